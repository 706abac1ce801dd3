/* kvs_engine.h — the engine's side of the KV store, over its block manager
 * (engine/block_manager.h): what the scheduler calls at admission and the
 * step thread calls after a commit, so wiring --kv-store into the engine is
 * two calls plus a pool accessor.
 *
 *   admission:  n_computed = kvs_attach_prefix(store, bm, &table, tokens, n,
 *                                              n - 1, &io, &from_store);
 *               (instead of bm_attach_prefix; SWA layers are then rebuilt
 *               by the engine's bounded replay, as on any prefix hit)
 *   after step: int before = table.n_hashed;
 *               bm_commit(bm, &table, tokens, n_computed);
 *               kvs_persist_new(store, &table, before, tokens, cls, &io);
 *
 * First version: the store's blocks are swapped in whole before the call
 * returns; overlapping swap-in with the forward pass layer by layer needs
 * forward.c to wait on kvs_swapin_wait_layer per layer (kvstore.h). */
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

/* For an empty table: the longest prefix of tokens[0..n) (at most
 * max_tokens, whole blocks) from the in-memory prefix cache, extended by the
 * store's blocks that follow it. Store blocks get pool blocks (bm_reserve),
 * are fetched and swapped in, and are registered in the prefix cache
 * (bm_commit). Returns the tokens attached; *from_store (may be NULL) gets
 * the store's share. A miss while loading (block vanished or damaged) ends
 * the prefix there; pool blocks reserved past it stay in the table for the
 * forward pass to fill. */
int kvs_attach_prefix(kvs *s, bm *b, bm_table *t, const int *tokens, int n, int max_tokens,
                      const kvs_pool_io *io, int *from_store);

/* Queues the table's blocks hashed since hashed_before (by bm_commit) for
 * writing to the store. Returns how many were queued. */
int kvs_persist_new(kvs *s, const bm_table *t, int hashed_before, const int *tokens, kvs_class cls,
                    const kvs_pool_io *io);

#endif
