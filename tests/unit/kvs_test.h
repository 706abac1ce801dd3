/* kvs_test.h — helpers shared by the KV store tests: a scratch directory,
 * a small three-layer block layout, and payloads that verify themselves
 * (every 8-byte word derives from a seed stored in the first word, so a
 * torn or mixed block is recognisable even without the store's checksum). */
#ifndef DI_KVS_TEST_H
#define DI_KVS_TEST_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/block_manager.h"
#include "kvstore/kvstore.h"

static const size_t kvt_off[3] = {0, 1024, 4096};
static const size_t kvt_bytes[3] = {1024, 3072, 2048};

static inline kvs_layout kvt_layout(uint64_t fingerprint) {
    return (kvs_layout){.fingerprint = fingerprint,
                        .block_bytes = 6144,
                        .n_layers = 3,
                        .layer_off = kvt_off,
                        .layer_bytes = kvt_bytes};
}

static inline void kvt_payload(void *buf, size_t bytes, uint64_t seed) {
    uint64_t *w = buf;
    w[0] = seed;
    for (size_t i = 1; i < bytes / 8; i++) w[i] = XXH3_64bits_withSeed(&i, sizeof i, seed);
}

/* 1 when buf is a whole payload of some seed (*seed set). */
static inline int kvt_payload_ok(const void *buf, size_t bytes, uint64_t *seed) {
    const uint64_t *w = buf;
    for (size_t i = 1; i < bytes / 8; i++)
        if (w[i] != XXH3_64bits_withSeed(&i, sizeof i, w[0])) return 0;
    if (seed) *seed = w[0];
    return 1;
}

static inline void kvt_tokens(int32_t *t, int n, int seed) {
    for (int i = 0; i < n; i++) t[i] = (seed * 7919 + i * 31) % 1000;
}

static inline char *kvt_tmpdir(void) {
    char tmpl[] = "/tmp/di_kvs_XXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

static inline int kvt_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

static inline void kvt_rmdir(char *dir) {
    if (dir) nftw(dir, kvt_rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

/* A fake paged pool of KVT_NBLK blocks in the layout above, and a block
 * manager over all of them, for store <-> pool tests without a model. */
enum { KVT_NBLK = 16, KVT_BYTES = 6144 };

typedef struct {
    char data[KVT_NBLK][KVT_BYTES];
} kvt_pool;

static inline void *kvt_block_data(void *ctx, int block) {
    return ((kvt_pool *)ctx)->data[block];
}

static inline bm *kvt_make_bm(void) {
    int ids[KVT_NBLK];
    for (int i = 0; i < KVT_NBLK; i++) ids[i] = i;
    return bm_create(ids, KVT_NBLK);
}

#endif
