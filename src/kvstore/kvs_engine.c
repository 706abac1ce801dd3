/* kvs_engine.c — the engine's side of the KV store (kvs_engine.h): prefix
 * attach that continues from the in-memory prefix cache into the store,
 * asynchronously (match at admission, fetch and swap-in on the store's
 * threads, the forward pass waiting per layer), and persistence of newly
 * full blocks. Keys are the block manager's own chain keys (bm_chain_keys),
 * so a block is named the same in memory, on disk and in every process.
 * State: one kvs_load per sequence with a store hit in progress. */
#include <stdlib.h>

#include "kvstore/kvs_engine.h"

_Static_assert(sizeof(int) == sizeof(int32_t), "token ids are stored as int32");

struct kvs_load {
    kvs_fetch *f;
    kvs_swapin *w;
    int have; /* tokens attached from memory: the store's blocks follow */
    int n;    /* store blocks being loaded */
};

int kvs_admit(kvs *s, bm *b, bm_table *t, const int *tokens, int n, int max_tokens,
              const kvs_pool_io *io, kvs_load **load) {
    *load = NULL;
    int have = bm_attach_prefix(b, t, tokens, n, max_tokens);
    int limit = (n < max_tokens ? n : max_tokens) / BM_BLOCK, h = have / BM_BLOCK;
    if (!s || limit <= h || t->n != h) return have;
    uint64_t *keys = di_malloc(sizeof *keys * (size_t)limit);
    bm_chain_keys(tokens, limit * BM_BLOCK, keys);
    int hit = kvs_match(s, keys + h, limit - h, n - have);
    bm_cow cow;
    if (hit > 0 && bm_reserve(b, t, have, have + hit * BM_BLOCK, &cow) == 0) {
        kvs_load *ld = di_calloc(1, sizeof *ld);
        ld->have = have;
        ld->n = hit;
        ld->f = kvs_fetch_start(s, keys + h, tokens + have, hit);
        void **dst = di_malloc(sizeof *dst * (size_t)hit);
        for (int i = 0; i < hit; i++) dst[i] = io->block_data(io->ctx, t->blocks[h + i]);
        ld->w = kvs_swapin_start(ld->f, hit, dst);
        free(dst);
        *load = ld;
    }
    free(keys);
    return have;
}

bool kvs_load_ready(kvs_load *ld, int *tokens) {
    if (!kvs_swapin_layer_ready(ld->w, 0)) return false;
    *tokens = kvs_swapin_wait_layer(ld->w, 0) * BM_BLOCK; /* settled: returns at once */
    return true;
}

void kvs_load_wait_layer(void *ld, int seg) {
    kvs_swapin_wait_layer(((kvs_load *)ld)->w, seg);
}

void kvs_load_finish(kvs_load *ld, bm *b, bm_table *t, const int *tokens) {
    int ok = kvs_swapin_finish(ld->w);
    bm_commit(b, t, tokens, ld->have + ok * BM_BLOCK);
    kvs_swapin_free(ld->w);
    kvs_fetch_free(ld->f);
    free(ld);
}

void kvs_load_free(kvs_load *ld) {
    if (!ld) return;
    kvs_fetch_cancel(ld->f); /* wakes a swap-in waiting for a block */
    kvs_swapin_free(ld->w);
    kvs_fetch_free(ld->f);
    free(ld);
}

int kvs_attach_prefix(kvs *s, bm *b, bm_table *t, const int *tokens, int n, int max_tokens,
                      const kvs_pool_io *io, int *from_store) {
    kvs_load *ld;
    int have = kvs_admit(s, b, t, tokens, n, max_tokens, io, &ld), got = 0;
    if (ld) {
        got = kvs_swapin_finish(ld->w) * BM_BLOCK;
        kvs_load_finish(ld, b, t, tokens);
    }
    if (from_store) *from_store = got;
    return have + got;
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
