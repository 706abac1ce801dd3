/* engine_internal.h — what engine.c (API, thread, lifecycle) and
 * engine_step.c (executing a plan, turning logits into events) share.
 * Nothing outside src/engine/engine*.c includes this. */
#ifndef DI_ENGINE_INTERNAL_H
#define DI_ENGINE_INTERNAL_H

#include <pthread.h>

#include "engine/block_manager.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/swa_cache.h"

/* One request in flight, with owned copies of everything it points to. */
typedef struct ereq {
    uint64_t id;
    engine_request r; /* pointers below replace the caller's */
    int *prompt;
    samp_bias *bias;
    int *stop_ids;
    char **stop_strs;
    seq *seqs[ENGINE_MAX_N];
    int n_seqs, n_live;
    bool forked;
    struct ereq *next; /* inbox, or the active list */
} ereq;

struct engine {
    engine_runner run;
    engine_detok detok;
    bool has_detok;
    engine_opts o;
    int max_len;
    int *block_ids, n_block_ids;
    bm *bm;
    sched *sched;
    samp_ctx *samp;
    bool swa; /* sliding-window model with snapshots: SWA cache, replay, forks */
    swc *swa_cache;
    int replay_tokens; /* tokens replayed on a SWA cache miss (before capping at the prefix) */

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

    /* Shared with submitters, under mu. */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, idle;
    ereq *inbox, *inbox_tail;
    uint64_t *cancels;
    int n_cancels, cap_cancels;
    bool stop, busy;
    uint64_t next_req_id;
    engine_stats pub; /* last published snapshot */
};

/* engine_step.c */
void engine_ingest(engine *e, ereq *r);
void engine_cancel_now(engine *e, uint64_t id, engine_finish why, const char *error);
int engine_step(engine *e, di_err *err);
void engine_free_req(ereq *r);
/* Resets a sequence's model state (after preemption, or to free it). */
void engine_seq_model_free(engine *e, seq *q);

#endif
