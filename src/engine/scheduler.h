/* scheduler.h — continuous batching: which sequences run in the next step
 * and how many tokens each, under a per-step token budget.
 *
 * Policy (one plan per step):
 *   1. running sequences first, in (priority, arrival) order: a decode gets
 *      its one token whatever the budget, a sequence mid-prefill gets a chunk
 *      of what the budget has left — so prefill never starves decodes;
 *   2. then waiting sequences are admitted FCFS within priority classes while
 *      budget and the running bound allow; admission first attaches the
 *      longest cached prefix, so only the missing tokens are computed. With
 *      a persistent KV store, the in-memory prefix is extended by the
 *      store's blocks: admission only matches them (metadata) and starts
 *      their fetch; the sequence waits aside ("fetching", holding the pool
 *      blocks reserved for them) while the scheduler keeps planning the
 *      others, and rejoins the waiting queue, at its place, once its blocks
 *      are read and layer 0 is in the pool. Its first pass waits for each
 *      later layer as it needs it (seq.store_load, model_seq.kv_wait).
 * When blocks run out, the running sequence that comes last in that order is
 * preempted: its blocks are released and it goes back to the waiting queue
 * with its generated tokens kept. With swap space (sched_opts.swap_blocks)
 * and room left in it, its KV goes to host memory first (the plan lists the
 * blocks to copy out; leading blocks running sequences share stay to the
 * prefix cache) and comes back when it is admitted again (the cached prefix
 * attached, the rest copied into fresh blocks: swap_ins), so nothing is
 * recomputed unless that shared prefix was evicted meanwhile (swap_drops);
 * otherwise it is preempted by recomputation, to be prefilled again.
 * A waiting sequence of a more urgent priority class than running ones
 * preempts them the same way when it lacks blocks or a running slot.
 *
 * The scheduler only decides and does block bookkeeping; the engine executes
 * the plan and advances n_computed when it launches the step's pass.
 *
 * Planning ahead (the engine's overlapped scheduling): while the pass of step
 * N runs, sched_schedule_ahead plans step N+1 as if N were done — the engine
 * has already advanced n_computed past N's tokens and appended a placeholder
 * for each token N will sample, so every sequence of N simply continues
 * (decode of its next token, next prefill chunk) and new ones are admitted.
 * Sequences of the pass in flight are never preempted or failed, and draining
 * ones are skipped: when the plan would have to preempt (blocks or a running
 * slot short for a more urgent class), it returns NULL and the engine plans
 * with sched_schedule once the pass has ended. After N's sampling, the engine
 * drops the items of sequences that ended (sched_plan_drop) and adds the
 * branches forked from N's logits (sched_plan_add). */
#ifndef DI_SCHEDULER_H
#define DI_SCHEDULER_H

#include <stdbool.h>

#include "engine/block_manager.h"
#include "engine/sequence.h"
#include "kvstore/kvs_engine.h"

typedef struct sched_opts {
    int token_budget; /* tokens per step (decodes always run) */
    int max_running;  /* bound on running sequences */
    bool can_copy;    /* runner copies blocks; else copy-on-write recomputes the block */
    /* A prefill chunk that crosses a block boundary ends at the last one it
     * crosses (sliding-window models: the engine snapshots the rings when a
     * sequence stands exactly at a block boundary, for the prefix cache). */
    bool block_chunks;
    /* Persistent KV store, or NULL: admission attaches the in-memory prefix
     * extended by the store's blocks (kvs_admit), read into the pool through
     * store_io. */
    kvs *store;
    kvs_pool_io store_io;
    /* Host swap space for preempted sequences' KV, in blocks (0: preemption
     * by recomputation only). */
    int swap_blocks;
    /* Prefill tokens of scored prompts (seq.scored: every row of logits
     * kept) per step, over all of them (0: no bound). */
    int score_rows;
} sched_opts;

typedef struct sched_item {
    seq *s;
    int n_tokens; /* tokens[n_computed .. n_computed + n_tokens) run this step */
    bool logits;  /* the chunk ends at the sequence's last token: sample after it */
    bool decode;  /* counted in n_decode (else in n_prefill_tokens) */
    int cow;      /* index of its block copy in cows, or -1 */
} sched_item;

typedef struct sched_plan {
    sched_item *items;
    int n_items;
    bm_cow *cows; /* block copies to do before the step (src < 0: dropped) */
    int n_cows;
    seq **preempted; /* moved back to waiting this step (their model state must be reset) */
    int n_preempted;
    seq **failed; /* can never fit in the pool: removed, blocks released */
    int n_failed;
    /* Preempted by swapping (also in preempted): copy swap_blocks of their
     * released blocks, swap_out_ids[swap_out_at[i] ..], out before anything
     * else writes a block. */
    seq **swap_outs;
    int *swap_out_at, *swap_out_ids;
    int n_swap_outs;
    /* Admitted again after a swap: copy their swapped blocks not found in the
     * prefix cache (from block max(swap_skip, swap_first)) into the same
     * blocks of their table, after the swap-outs; then free swap_buf. */
    seq **swap_ins;
    int n_swap_ins;
    /* Admitted again after a swap whose shared prefix blocks were evicted
     * meanwhile: swap_buf is dropped and the model state reset; they go on
     * from the cached prefix they found, recomputing the rest. */
    seq **swap_drops;
    int n_swap_drops;
    int n_decode, n_prefill_tokens;
} sched_plan;

typedef struct sched sched;

sched *sched_create(bm *b, const sched_opts *o);
void sched_free(sched *s); /* does not free sequences */
void sched_set_budget(sched *s, int token_budget);
/* Queues a new (or preempted) sequence. */
void sched_add_waiting(sched *s, seq *q);
/* Adds a sequence that already holds blocks (a fork) to the running set. */
void sched_add_running(sched *s, seq *q);
/* Takes a sequence out of whichever queue holds it and releases its blocks. */
void sched_remove(sched *s, seq *q);
/* Waiting sequences, those fetching their store blocks included. */
int sched_n_waiting(const sched *s);
/* Sequences admitted with a store hit whose blocks are still being read. */
int sched_n_fetching(const sched *s);
int sched_n_running(const sched *s);
/* Blocks of swap space in use. */
int sched_swap_used(const sched *s);
/* Prompt tokens served at sequences' first admission by the in-memory
 * prefix cache, and by the store (a sequence that attaches its prefix and
 * waits, or is preempted, and attaches it again counts once). */
long long sched_prefix_hit_tokens(const sched *s);
long long sched_store_hit_tokens(const sched *s);
/* Makes the next step's plan (valid until the next call). */
const sched_plan *sched_schedule(sched *s);
/* The next step's plan while the current step's pass runs (see above), or
 * NULL when it needs a preemption: plan with sched_schedule after the pass. */
const sched_plan *sched_schedule_ahead(sched *s);
/* Adds running sequence q (a branch just forked) to the plan with its
 * pending tokens; false (nothing changed) when blocks are short. */
bool sched_plan_add(sched *s, seq *q);
/* Removes q's item from the plan (q ended before the plan ran); its blocks
 * stay in its table until it is removed. */
void sched_plan_drop(sched *s, seq *q);

#endif
