/* sequence.h — one generation stream's state: its tokens (prompt, then
 * generated), how many of them are in the KV cache, its block table, and the
 * per-stream sampling and stop state. A request with n > 1 owns n sequences.
 *
 * The one number that drives scheduling is n_computed: tokens whose KV is in
 * the cache. tokens[n_computed..n_tokens) still have to go through the model
 * (a whole prompt, a prefill chunk, or the single last sampled token), so
 * prefill, decode, resumption after preemption (n_computed = 0, generated
 * tokens kept) and copy-on-write by recomputation are the same operation. */
#ifndef DI_SEQUENCE_H
#define DI_SEQUENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/block_manager.h"
#include "engine/json_grammar.h"
#include "engine/stop.h"
#include "model/model.h"

/* FETCHING: admitted with a KV store hit whose blocks are still being read
 * (kvs_engine.h); it waits aside while other sequences run. */
typedef enum { SEQ_WAITING = 0, SEQ_RUNNING, SEQ_FINISHED, SEQ_FETCHING } seq_state;

typedef struct seq {
    uint64_t id;      /* unique within the engine; FCFS tie-break */
    int priority;     /* lower runs first */
    uint64_t arrival; /* submission order of the request */
    seq_state state;

    int *tokens;
    int n_tokens, cap;
    int n_prompt;     /* the request's prompt length (usage) */
    int n_computed;   /* tokens with KV in the cache */
    int n_cached;     /* prompt tokens served by the prefix cache at first admission */
    int n_cached_mem; /* of them, from the in-memory prefix cache (the rest: the store) */
    bool admitted;    /* has been admitted once (n_cached is final) */
    int n_preempt;    /* times preempted */
    /* Preempted by swapping (swapped): the KV of its first n_computed tokens
     * is out of the pool, its table empty until it is admitted again. Blocks
     * [swap_first, swap_first + swap_blocks) are in swap_buf (of the
     * runner's block size, engine-owned); the swap_first before them were
     * shared with running sequences and are expected back from the prefix
     * cache. At admission its first swap_skip blocks are found there (shared
     * again, not copied back). */
    bool swapped;
    int swap_first, swap_blocks, swap_skip;
    void *swap_buf;

    /* Its prompt is scored (the request's prompt_logprobs): admitted without
     * the prefix cache (a cached token has no logits), and the logits rows
     * of its prefill chunks all kept, at most sched_opts.score_rows of them
     * per step over all such sequences. */
    bool scored;

    bm_table table;
    model_seq mseq; /* the model's view: blocks point into table */
    /* KV store hit in progress (kvs_engine.h), or NULL: from admission until
     * the end of the first pass that uses it (or the sequence's removal). */
    struct kvs_load *store_load;

    /* Engine-side state (engine.c). */
    void *owner; /* the request */
    int branch;  /* index among the request's n sequences */
    uint64_t rng;
    stop_state stop;
    void *detok;    /* incremental detokenizer stream, or NULL */
    bool json_on;   /* output held to one JSON object, parsed so far in json */
    bool json_wait; /* ... from the request's json_wait_for token on */
    bool plp_sent;  /* the request's prompt logprobs went with an event of this branch */
    jg_state json;
    bool in_flight; /* in the forward pass running now: its memory is the model's */
    bool draining;  /* final event sent while in flight: freed when the pass ends */
    /* tokens[n_tokens - 1] is a placeholder for the token that the pass in
     * flight will sample: the next step is planned with it (decode of one
     * token), its id is written by sampling before that step runs. */
    bool ahead;
    /* The pass's copy of the block table: planning may grow or copy-on-write
     * the table while the pass reads the copy. */
    int *run_blocks;
    int cap_run_blocks;
} seq;

seq *seq_new(uint64_t id, const int *prompt, int n_prompt, int priority, uint64_t arrival);
/* A copy of parent's tokens and counters (not its blocks, stop or detok state). */
seq *seq_clone(const seq *parent, uint64_t id);
/* Frees the tokens and the table array (blocks must be released already). */
void seq_free(seq *s);
void seq_append(seq *s, int token);
/* Appends the placeholder of the token the pass about to run will sample. */
void seq_append_ahead(seq *s);
/* Writes the sampled token into the placeholder. */
void seq_fill_ahead(seq *s, int token);
static inline int seq_pending(const seq *s) {
    return s->n_tokens - s->n_computed;
}
/* Generated tokens known so far (not the placeholder). */
static inline int seq_generated(const seq *s) {
    return s->n_tokens - (s->ahead ? 1 : 0) - s->n_prompt;
}
/* Ordering of the scheduler's queues: priority, then arrival, then id. */
int seq_cmp(const seq *a, const seq *b);

#endif
