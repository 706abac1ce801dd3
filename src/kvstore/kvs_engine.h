/* kvs_engine.h — the engine's side of the KV store, over its block manager
 * (engine/block_manager.h): what the scheduler calls at admission, what the
 * forward pass waits on, and what the step thread calls after a pass.
 *
 * The hit path keeps only the match on the step loop's critical path:
 *
 *   admission:  kvs_load *ld;
 *               n_computed = kvs_admit(store, bm, &table, tokens, n, n - 1,
 *                                      &io, &ld);  // memory prefix + match;
 *               // ld != NULL: pool blocks reserved for the store's blocks,
 *               // fetch threads reading them, a swap-in thread copying them
 *               // into the pool layer by layer. The sequence waits aside
 *               // ("fetching") while other sequences run.
 *   each step:  if (kvs_load_ready(ld, &tok)) n_computed += tok;  // schedulable
 *   its pass:   seq.kv_wait = kvs_load_wait_layer, seq.kv_wait_ctx = ld (model_seq)
 *               (the forward waits for layer l's KV before layer l reads it)
 *   after it:   kvs_load_finish(ld, bm, &table, tokens);  // prefix cache, free
 *   cancelled:  kvs_load_free(ld); bm_release(bm, &table);
 *   after step: int before = table.n_hashed;
 *               bm_commit(bm, &table, tokens, n_computed);
 *               kvs_persist_new(store, &table, before, tokens, cls, &io);
 *
 * The store's blocks enter the prefix cache only after the pass that used
 * them (kvs_load_finish): until then another sequence cannot attach them
 * and read a layer that is not in place yet. kvs_attach_prefix is the same
 * path run to completion at once (tools and tests). */
#ifndef DI_KVS_ENGINE_H
#define DI_KVS_ENGINE_H

#include "engine/block_manager.h"
#include "kvstore/kvstore.h"

typedef struct kvs_pool_io {
    void *ctx;
    /* The pool memory of a block id: block_bytes laid out as the store's
     * kvs_layout (every full-attention layer, layer-major). */
    void *(*block_data)(void *ctx, int block);
} kvs_pool_io;

/* One sequence's store hit in progress. */
typedef struct kvs_load kvs_load;

/* Admission, for an empty table: attaches the longest prefix of
 * tokens[0..n) (at most max_tokens, whole blocks) from the in-memory prefix
 * cache and returns its tokens. When the store (may be NULL) holds blocks
 * that continue it (metadata only: kvs_match), reserves pool blocks for them
 * in the table, starts their fetch and swap-in and sets *load; else *load is
 * NULL. Never waits for I/O. When the pool is short of blocks the store's
 * share is not attached. */
int kvs_admit(kvs *s, bm *b, bm_table *t, const int *tokens, int n, int max_tokens,
              const kvs_pool_io *io, kvs_load **load);
/* Non-blocking: true once every block has been read or missed and layer 0 of
 * the leading intact ones is in the pool; *tokens then gets the store's
 * usable tokens (those blocks x 128; a missing, damaged or vanished block
 * ends the prefix there, and the pool blocks reserved past it are for the
 * forward pass to fill). */
bool kvs_load_ready(kvs_load *ld, int *tokens);
/* The forward pass's hook (model_batch_seq.kv_wait, ctx = the load): blocks
 * until segment seg (the layer's index in the store layout) of every usable
 * block is in the pool. Call only once ready. */
void kvs_load_wait_layer(void *ld, int seg);
/* After the pass that used it: waits for the rest of the swap-in, registers
 * the usable blocks in the prefix cache (bm_commit up to their end) and
 * frees the load. */
void kvs_load_finish(kvs_load *ld, bm *b, bm_table *t, const int *tokens);
/* Cancels and frees, never waiting for I/O: the caller then releases the
 * table's blocks (the swap-in no longer writes to them). */
void kvs_load_free(kvs_load *ld);

/* kvs_admit run to the end at once: the store's blocks are fetched, swapped
 * in and registered in the prefix cache before it returns. Returns the
 * tokens attached; *from_store (may be NULL) gets the store's share. */
int kvs_attach_prefix(kvs *s, bm *b, bm_table *t, const int *tokens, int n, int max_tokens,
                      const kvs_pool_io *io, int *from_store);

/* Queues the table's blocks hashed since hashed_before (by bm_commit) for
 * writing to the store. Returns how many were queued. */
int kvs_persist_new(kvs *s, const bm_table *t, int hashed_before, const int *tokens, kvs_class cls,
                    const kvs_pool_io *io);

#endif
