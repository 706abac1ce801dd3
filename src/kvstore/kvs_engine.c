/* kvs_engine.c — the engine's side of the KV store (kvs_engine.h): prefix
 * attach that continues from the in-memory prefix cache into the store, and
 * persistence of newly full blocks. Keys are the block manager's own chain
 * keys (bm_chain_keys), so a block is named the same in memory, on disk and
 * in every process. Holds no state of its own. */
#include <stdlib.h>

#include "kvstore/kvs_engine.h"

_Static_assert(sizeof(int) == sizeof(int32_t), "token ids are stored as int32");

int kvs_attach_prefix(kvs *s, bm *b, bm_table *t, const int *tokens, int n, int max_tokens,
                      const kvs_pool_io *io, int *from_store) {
    int have = bm_attach_prefix(b, t, tokens, n, max_tokens);
    if (from_store) *from_store = 0;
    int limit = (n < max_tokens ? n : max_tokens) / BM_BLOCK, h = have / BM_BLOCK;
    if (!s || limit <= h || t->n != h) return have;
    uint64_t *keys = malloc(sizeof *keys * (size_t)limit);
    if (!keys) return have;
    bm_chain_keys(tokens, limit * BM_BLOCK, keys);
    int hit = kvs_match(s, keys + h, limit - h, n - have);
    int loaded = 0;
    bm_cow cow;
    if (hit > 0 && bm_reserve(b, t, have, have + hit * BM_BLOCK, &cow) == 0) {
        kvs_fetch *f = kvs_fetch_start(s, keys + h, tokens + have, hit);
        void **dst = malloc(sizeof *dst * (size_t)hit);
        for (int i = 0; dst && i < hit; i++) dst[i] = io->block_data(io->ctx, t->blocks[h + i]);
        if (dst) {
            kvs_swapin *w = kvs_swapin_start(f, hit, dst);
            loaded = kvs_swapin_finish(w);
            kvs_swapin_free(w);
        }
        kvs_fetch_free(f);
        free(dst);
        bm_commit(b, t, tokens, have + loaded * BM_BLOCK);
    }
    free(keys);
    if (from_store) *from_store = loaded * BM_BLOCK;
    return have + loaded * BM_BLOCK;
}

int kvs_persist_new(kvs *s, const bm_table *t, int hashed_before, const int *tokens, kvs_class cls,
                    const kvs_pool_io *io) {
    if (!s || t->n_hashed <= hashed_before) return 0;
    uint64_t *keys = malloc(sizeof *keys * (size_t)t->n_hashed);
    if (!keys) return 0;
    bm_chain_keys(tokens, t->n_hashed * BM_BLOCK, keys);
    int queued = 0;
    for (int i = hashed_before < 0 ? 0 : hashed_before; i < t->n_hashed; i++)
        queued += kvs_put(s, keys[i], i ? keys[i - 1] : 0, tokens + (size_t)i * BM_BLOCK,
                          io->block_data(io->ctx, t->blocks[i]), cls) == 0;
    free(keys);
    return queued;
}
