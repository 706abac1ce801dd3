/* runner.h — what the engine needs from an execution backend and from a
 * detokenizer, as function-pointer tables, so the engine never depends on a
 * particular model implementation: engine_model.c wires model.h and
 * tokenizer.h in; tests plug in a deterministic fake model.
 *
 * KV blocks: the engine takes every block the runner's pool has once, at
 * start-up (kv_alloc until -1 or kv_blocks), hands them to its block manager,
 * and gives them back with kv_release when it is freed. */
#ifndef DI_RUNNER_H
#define DI_RUNNER_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"
#include "base/pool.h"
#include "model/model.h"

typedef struct engine_runner {
    void *ctx;
    int vocab;
    int max_context; /* positions the model supports */
    int eos_ids[MODEL_MAX_EOS], n_eos;
    /* Sliding-window layers keep per-sequence ring buffers outside the
     * blocks. With swa_save / swa_restore the engine snapshots them (prefix
     * cache, forks) and rebuilds them by replay on a miss; without, it runs
     * such a model with no prefix reuse and n > 1 as independent sequences. */
    bool has_swa;
    int sliding_window, n_swa_layers; /* for exact replay: window x SWA depth */
    int (*kv_alloc)(void *ctx);       /* a block id, or -1 when the pool is empty */
    void (*kv_release)(void *ctx, int block);
    /* Initialises / frees a sequence's model state (ring buffers). The
     * engine owns s->blocks: seq_free must not free or release them (the
     * engine sets s->blocks = NULL before the call). */
    void (*seq_init)(void *ctx, model_seq *s);
    void (*seq_free)(void *ctx, model_seq *s);
    /* model_forward's contract (model.h). */
    int (*forward)(void *ctx, model_batch_seq *batch, int n, di_err *err);
    /* Optional: copies block src's KV to block dst (copy-on-write). NULL:
     * the engine recomputes the copied block's tokens instead. */
    int (*copy_block)(void *ctx, int dst, int src, di_err *err);
    /* Optional (sliding-window models): snapshot / restore a sequence's
     * rings at its n_past (model_swa_save / model_swa_restore semantics);
     * swa_free frees a snapshot, swa_bytes is its size. */
    model_swa_state *(*swa_save)(void *ctx, const model_seq *s);
    void (*swa_restore)(void *ctx, model_seq *s, const model_swa_state *st);
    void (*swa_free)(void *st);
    size_t (*swa_bytes)(const model_swa_state *st);
    /* Optional: a block's KV memory, model_kv_block_bytes laid out as
     * model_kv_block_layout (model.h). Needed by the persistent KV store
     * (engine_opts.kv_store), which reads and fills blocks through it, and
     * by swap space (engine_opts.swap_bytes), which copies whole blocks. */
    void *(*kv_block_data)(void *ctx, int block);
    size_t kv_block_bytes; /* a block's size in that memory (swap space) */
    /* Optional: the backend's compute pool. It is idle between passes, and
     * the engine samples a pass's logits rows on it then. */
    pool *pool;
    /* Optional: turns batch-invariant kernels on or off for this backend. */
    void (*set_batch_invariant)(void *ctx, bool on);
    /* Optional: frees ctx when the engine is freed. */
    void (*destroy)(void *ctx);
} engine_runner;

/* An incremental detokenizer (tok_stream_* semantics, tokenizer.h). */
typedef struct engine_detok {
    void *ctx;
    void *(*open)(void *ctx);
    const char *(*push)(void *stream, int id, size_t *len);
    const char *(*flush)(void *stream, size_t *len);
    void (*close)(void *stream);
    /* A token's own bytes (malloc'd; tokenizer.h's tok_token_bytes), NULL
     * for a control token: what JSON-constrained requests are masked by.
     * NULL: such requests are refused. */
    char *(*token_bytes)(void *ctx, int id, size_t *len);
    /* Optional: a control token's text (malloc'd), NULL for the others:
     * tool calls let the markers a format spells as tokens through. */
    char *(*control_bytes)(void *ctx, int id, size_t *len);
} engine_detok;

#endif
