/* engine_internal.h — what engine.c (API, thread, lifecycle) and
 * engine_step.c (executing a plan, turning logits into events) share.
 * Nothing outside src/engine/engine*.c includes this. */
#ifndef DI_ENGINE_INTERNAL_H
#define DI_ENGINE_INTERNAL_H

#include <pthread.h>

#include "engine/block_manager.h"
#include "engine/engine.h"
#include "engine/grammar.h"
#include "engine/json_regex.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/swa_cache.h"
#include "kvstore/kvs_engine.h"

/* One request in flight, with owned copies of everything it points to. */
typedef struct ereq {
    uint64_t id;
    engine_request r; /* pointers below replace the caller's */
    int *prompt;
    samp_bias *bias;
    int *stop_ids;
    int *allowed, *bad; /* r.sampling's */
    int *ends;          /* min_tokens: the ids held off until then (EOS, stop ids) */
    char **stop_strs;
    jg_schema *schema;   /* compiled r.json_schema */
    jr_dfa *regex;       /* compiled r.regex */
    gr_grammar *grammar; /* compiled r.grammar */
    jg_calls *calls;     /* compiled r.call_forms */
    samp_out *plp;       /* with prompt_logprobs: n_prompt entries (engine_event.prompt_lp) */
    seq *seqs[ENGINE_MAX_N];
    int n_seqs, n_live;
    bool forked;
    struct ereq *next; /* inbox, or the active list */
} ereq;

/* engine_exec.c: the compute thread (one forward pass at a time). */
enum { EXEC_IDLE = 0, EXEC_RUN, EXEC_DONE };
typedef struct engine_exec {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const engine_runner *run;
    model_batch_seq *batch;
    int n, state, rc;
    bool quit, started;
    di_err err;
    double secs;  /* the job's time in the runner */
    double t_end; /* when it ended (di_now) */
} engine_exec;
int engine_exec_start(engine_exec *x, const engine_runner *run);
void engine_exec_launch(engine_exec *x, model_batch_seq *batch, int n);
bool engine_exec_busy(engine_exec *x);
/* Waits for the launched job; returns its status (err filled on failure). */
int engine_exec_wait(engine_exec *x, double *secs, di_err *err);
void engine_exec_stop(engine_exec *x);

/* A sampled token whose event is delivered while the next pass runs. */
typedef struct pending_ev {
    struct seq *q; /* NULL: dropped (the sequence failed) */
    samp_out so;
    stop_reason why; /* token-level: STOP_EOS (EOS or a stop id) or STOP_NONE */
    bool length;     /* reached max_tokens or the context */
} pending_ev;

/* One batch entry of a forward pass, kept from its launch until the work
 * it leaves (sampling, commit) is done. */
typedef struct pass_item {
    seq *q;        /* NULL: freed since */
    float *logits; /* its logits row, or NULL */
    float *rows;   /* a prompt being scored: every token's row, n_tokens of them; or NULL */
    int end;       /* q's computed tokens once the pass is done */
    int n_tokens;
    bool committed;
} pass_item;
typedef struct pass_rec {
    pass_item *v;
    int n, cap;
} pass_rec;

struct engine {
    engine_runner run;
    engine_detok detok;
    bool has_detok;
    engine_opts o;
    int max_len;
    int seq_cap;  /* tokens a sequence can reach: max_len, or the whole pool's if fewer */
    jg_vocab *jv; /* token bytes for JSON-constrained requests, made at the first one */
    int *block_ids, n_block_ids;
    bm *bm;
    sched *sched;
    samp_ctx *samp;
    /* Sampling a pass's rows on run.pool: a scratch context per task, and
     * each row's draw, made before the rows' events in pass order. */
    samp_ctx **samp_task;
    int n_samp_task;
    samp_out *drawn;
    int cap_drawn;
    bool swa; /* sliding-window model with snapshots: SWA cache, replay, forks */
    swc *swa_cache;
    int replay_tokens; /* tokens replayed on a SWA cache miss (before capping at the prefix) */
    kvs *store;        /* persistent KV store (not owned), or NULL */
    kvs_pool_io store_io;

    /* Step-thread state. */
    ereq *active;
    uint64_t next_seq_id;
    model_batch_seq *batch, *replay; /* the step's batch; replays run before it */
    seq **replay_seq;
    int cap_batch, cap_replay;
    float *logits;
    int cap_rows;
    char *text;
    size_t cap_text;
    engine_stats st; /* counters owned by the step thread */
    engine_exec exec;
    pass_rec fl;   /* the pass in flight (n == 0: none) */
    pass_rec done; /* the pass that ended, until its commits and events are done */
    pending_ev *pend;
    int n_pend, cap_pend;

    /* Shared with submitters, under mu. */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, idle;
    ereq *inbox, *inbox_tail;
    uint64_t *cancels;
    int n_cancels, cap_cancels;
    bool stop, busy, paused;
    uint64_t next_req_id;
    engine_stats pub; /* last published snapshot */
};

/* engine_step.c */
void engine_ingest(engine *e, ereq *r);
void engine_cancel_now(engine *e, uint64_t id, engine_finish why, const char *error);
/* One iteration of the pipeline: plans the next step while the pass in
 * flight runs, waits for that pass and samples it, launches the next pass,
 * then commits the ended pass and delivers its events while the next runs. */
int engine_step(engine *e, di_err *err);
/* Waits for the pass in flight (if any) and delivers everything it produced
 * (the step thread, before it exits). */
void engine_drain(engine *e);
void engine_free_req(ereq *r);
/* Resets a sequence's model state (after preemption, or to free it). */
void engine_seq_model_free(engine *e, seq *q);

#endif
