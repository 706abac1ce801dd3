/* engine.h — one deepinfer engine instance: many requests in flight, one
 * forward pass per step over all of them (continuous batching), KV memory in
 * 128-token blocks shared between requests with the same prefix.
 *
 *   engine *e = engine_create(model, tokenizer, &opts, &err);
 *   uint64_t id = engine_submit(e, &req, &err);   // any thread
 *   ... req.on_event(ev, req.user) runs on the engine's step thread ...
 *   engine_cancel(e, id);                         // any thread
 *   engine_free(e);
 *
 * Events: one per generated token (token id, the text it releases — stop
 * strings may hold text back —, logprobs), the last one of each of the n
 * branches with finish != ENGINE_FINISH_NONE and its usage. A cancelled or
 * failed branch gets a final event with token -1. Callbacks run on the step
 * thread with no engine lock held (or, for requests still in flight when
 * engine_free is called, on its caller): they may call engine_submit,
 * engine_cancel and engine_get_stats, never engine_free, and should be quick
 * (they run while the next forward pass computes, and delay the step after
 * it when slower than that pass). An event's pointers are valid only during
 * the callback.
 *
 * Prefix lookup happens when a sequence is admitted to run (not while it
 * waits), so cached blocks are pinned only by running sequences; the hit is
 * reported in the final event's usage.cached_tokens and in the stats. */
#ifndef DI_ENGINE_H
#define DI_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "engine/json_grammar.h"
#include "engine/runner.h"
#include "engine/sampling.h"
#include "engine/stop.h"
#include "kvstore/kvstore.h"

#define ENGINE_MAX_N 64

typedef struct engine engine;
typedef struct model model;
typedef struct tokenizer tokenizer;

typedef enum {
    ENGINE_FINISH_NONE = 0,
    ENGINE_FINISH_STOP,      /* EOS, a stop token id or a stop string */
    ENGINE_FINISH_LENGTH,    /* max_tokens, the context limit, or a sequence filling the KV pool */
    ENGINE_FINISH_CANCELLED, /* engine_cancel, or the engine was freed */
    ENGINE_FINISH_ERROR,     /* see event.error */
} engine_finish;

typedef enum { ENGINE_TRAFFIC_CHAT = 0, ENGINE_TRAFFIC_AGENT = 1, ENGINE_N_TRAFFIC } engine_traffic;

typedef struct engine_usage {
    int prompt_tokens;
    int completion_tokens; /* of this branch */
    int cached_tokens;     /* prompt tokens served by the prefix cache */
} engine_usage;

typedef struct engine_event {
    uint64_t req_id;
    int index; /* branch, 0..n-1 */
    int token; /* -1: no token (cancel, error) */
    const char *text;
    size_t text_len;
    bool has_logprobs;
    float logprob;
    const samp_logprob *top;
    int n_top;
    engine_finish finish;
    engine_usage usage; /* on the final event */
    const char *error;  /* ENGINE_FINISH_ERROR */
    /* With the request's prompt_logprobs, on each branch's first event:
     * entry i for prompt token i (its id in .token; entry 0, which nothing
     * precedes, has logprob NAN and no alternatives). */
    const samp_out *prompt_lp;
    int n_prompt_lp;
} engine_event;

typedef void (*engine_event_fn)(const engine_event *ev, void *user);

/* Everything is copied by engine_submit. */
typedef struct engine_request {
    const int *prompt;
    int n_prompt;
    samp_params sampling;
    stop_params stop;
    int n;        /* completions sharing the prompt (<= 0: 1) */
    int priority; /* lower runs first; FCFS within a priority */
    engine_traffic traffic;
    engine_event_fn on_event;
    void *user;
    /* Constrain the output to one JSON object (json_grammar.h): each token
     * drawn among those that keep it a prefix of one, an end-of-sequence
     * token only once it is complete. With json_wait, only what follows
     * token json_wait_for (the end of the model's reasoning) is held. */
    bool json;
    bool json_wait;
    int json_wait_for;
    /* With json: a JSON schema (its text, json_grammar.h) the object
     * follows; NULL: any object. One the decoder cannot hold is refused. */
    const char *json_schema;
    /* With json, instead of an object: plain text that this pattern
     * (json_regex.h's syntax, anchors included) matches; refused where it
     * does not compile. */
    const char *regex;
    /* With json, instead: plain text that this grammar (grammar.h's GBNF,
     * its rule root) matches whole; refused where it does not compile. */
    const char *grammar;
    /* With json, instead: tool calls as the model writes them, each one of
     * these forms (one per tool: its opening texts, its arguments' schema,
     * the text after them; json_grammar.h's jg_calls_compile), from one to
     * max_calls of them, then calls_close. Refused where a schema does not
     * compile or the forms clash. */
    const jg_call_form *call_forms;
    int n_call_forms;
    const char *calls_close;
    int max_calls;
    const char *calls_trigger;       /* NULL: the calls start at once; else after this text
                                        (jg_calls_set_trigger) */
    bool calls_dsml;                 /* the arguments are DSML parameters (jg_calls_set_dsml) */
    bool calls_answer;               /* with a trigger: an answer or calls (jg_calls_set_answer) */
    const char *calls_answer_schema; /* ... the answer's JSON schema, NULL: any object */
    /* Score the prompt: each prompt token's logprob given those before it,
     * with prompt_top alternatives (0..SAMP_MAX_TOP), on each branch's first
     * event. The prompt is then computed whole, without the prefix cache
     * (a cached token has no logits), scored prompts taking at most
     * ENGINE_SCORE_CHUNK tokens per step together (their logits rows are
     * held at once). */
    bool prompt_logprobs;
    int prompt_top;
    /* Generate nothing: each branch ends with LENGTH, no token and no
     * completion tokens, once its prompt has gone through the model (with
     * prompt_logprobs: the prompt is only scored). */
    bool prompt_only;
} engine_request;

/* The tool calls a request's call_forms describe, as engine_submit holds
 * them (with its trigger, DSML arguments and answer); NULL with err set
 * where they do not compile. */
jg_calls *engine_calls_compile(const engine_request *q, di_err *err);

#define ENGINE_SCORE_CHUNK 128

typedef struct engine_opts {
    int kv_blocks;        /* KV pool size in blocks (0: from kv_memory) */
    size_t kv_memory;     /* bytes for the KV pool when kv_blocks == 0 (0: 1 GiB) */
    double step_ms;       /* per-step time budget (0: 50) */
    int step_tokens;      /* > 0: fixed token budget, no start-up measurement */
    int max_running;      /* bound on running sequences (0: 256) */
    int max_model_len;    /* 0: the model's context */
    bool no_prefix_cache; /* disable prefix reuse */
    /* Sliding-window models: on a prefix hit whose ring snapshot is not in
     * the SWA state cache, the rings are rebuilt by replaying the last
     * swa_replay_tokens (0: 128) tokens of the cached prefix (bounded), or,
     * with swa_replay_exact, window x sliding-window depth tokens (the whole
     * receptive field: the same state as no cache). Capped at the prefix. */
    bool swa_replay_exact;
    int swa_replay_tokens;
    size_t swa_cache_bytes; /* bound on the host-memory SWA state cache (0: 64 MiB) */
    /* A request's logits do not depend on what else runs in its steps or on
     * its chunking (fixed reduction orders in every kernel; slower). */
    bool batch_invariant;
    /* Persistent KV block store (kvstore.h), or NULL. Opened and closed by
     * the caller (engine_kv_store_open: the fingerprint needs the model
     * directory and dtype); it must outlive the engine. At admission the
     * in-memory prefix is extended by the store's blocks; every block that
     * becomes full is persisted under the request's traffic class (chat /
     * agent TTL). Used only while the prefix cache is on. */
    kvs *kv_store;
    /* Host memory for the KV of preempted sequences (vLLM's swap space):
     * while it has room, a sequence preempted for lack of blocks has its
     * blocks copied out and back in when it resumes, instead of recomputing
     * its tokens. 0: preemption by recomputation only. Needs a backend that
     * exposes its KV blocks (runner.kv_block_data). */
    size_t swap_bytes;
    /* Plan each step only after the previous step's pass has ended (for
     * comparisons; by default the next step is planned while a pass runs). */
    bool no_overlap;
} engine_opts;

typedef struct engine_stats {
    int running, waiting;
    int blocks_total, blocks_used, blocks_free, blocks_cached;
    long long prefix_hit_tokens; /* prompt tokens served by the prefix cache */
    long long prompt_tokens;     /* prompt tokens of admitted requests */
    long long computed_tokens;   /* tokens through the model */
    long long generated_tokens;
    long long steps, preemptions, cows, evictions;
    /* Preemptions by swapping (part of preemptions), their resumptions, and
     * the swap space held now. */
    long long swap_outs, swap_ins;
    size_t swap_bytes_used;
    long long requests_done, requests_cancelled;
    /* Sliding-window state: snapshots restored on prefix hits, replays run
     * (and their tokens) when the snapshot was missing, cache occupancy. */
    long long swa_restores, swa_replays, swa_replayed_tokens;
    int swa_cache_entries;
    size_t swa_cache_bytes;
    /* Time on the step thread: inside forward passes vs. wall time while
     * there was work (1 - busy/active: fraction the compute threads idle). */
    double forward_s, active_s;
    /* Overlapped scheduling: steps planned while the previous step's pass
     * ran (ahead) or after it ended (no pass ran, a preemption was due, or
     * no_overlap); planning time that overlapped a pass vs. not; tokens
     * computed for branches that had ended meanwhile (a stop string found
     * while their next pass ran, a cancel), whose results were dropped. */
    long long plans_ahead, plans_after, discarded_tokens;
    double plan_overlap_s, plan_exposed_s;
    long long traffic_requests[ENGINE_N_TRAFFIC];
    /* Persistent KV store (when configured): prompt tokens attached from it
     * (part of the requests' cached_tokens, not of prefix_hit_tokens), and
     * the store's own counters (hit rate, blocks / bytes read and written,
     * evictions). */
    bool has_kv_store;
    long long kv_store_hit_tokens;
    kvs_stats kv_store;
    int token_budget;               /* tokens per step */
    double step_fixed_ms, token_ms; /* the cost model: step ~ fixed + n * token */
} engine_stats;

/* Builds the engine over a loaded model (KV pool sized by opts) and starts
 * the step thread. tok may be NULL (no text, no stop strings). */
engine *engine_create(model *m, tokenizer *tok, const engine_opts *opts, di_err *err);
/* Opens the KV store under store_dir for this model's block layout, with
 * the fingerprint of model_dir's checkpoint, dtype_tag (the compute dtype,
 * e.g. "f32") and the model's KV dtype: a store written by another model,
 * compute dtype or KV dtype is never read. ko may be NULL. Close with kvs_close after engine_free.
 */
kvs *engine_kv_store_open(model *m, const char *model_dir, const char *dtype_tag,
                          const char *store_dir, const kvs_opts *ko, di_err *err);
/* The same over any runner (tests: a fake model). detok may be NULL. The
 * runner table is copied; its ctx must outlive the engine (or set destroy). */
engine *engine_create_runner(const engine_runner *r, const engine_detok *detok,
                             const engine_opts *opts, di_err *err);
/* Cancels every request still in flight (their final events are delivered),
 * stops the thread, and frees everything. */
void engine_free(engine *e);

/* Returns the request id (> 0), or 0 with err naming the bad field. */
uint64_t engine_submit(engine *e, const engine_request *req, di_err *err);
/* Cancels a request; a no-op when it already finished. */
void engine_cancel(engine *e, uint64_t id);
engine_stats engine_get_stats(engine *e);
/* The most tokens one sequence can hold: the context, or the whole KV
 * pool's where that is less (a sequence reaching it ends with length). */
int engine_max_seq_tokens(const engine *e);
/* While paused, submitted requests and cancellations queue up but no step
 * runs (a pass in flight completes). Lets a caller hand over a burst of
 * requests that the scheduler then sees all at once (tests, benchmarks).
 * Do not wait for idle while paused. */
void engine_pause(engine *e, bool paused);
/* Blocks until no request is queued or running. */
void engine_wait_idle(engine *e);

#endif
