/* test_kvstore_engine.c — the engine's side of the store (kvs_engine.h) with
 * the real block manager over a fake pool: blocks persisted after a commit
 * are attached after a "restart" (new manager, new pool, store reopened)
 * with their bytes and registered in the prefix cache; the store continues
 * a prefix the in-memory cache started; a store miss attaches nothing more. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvs_test.h"
#include "kvstore/kvs_engine.h"

enum { NBLK = KVT_NBLK, BYTES = KVT_BYTES };

TEST(kvstore_engine_restart_attaches_stored_prefix) {
    char *dir = kvt_tmpdir();
    kvs_layout lay = kvt_layout(0xE1);
    di_err err;
    kvs *s = kvs_open(dir, &lay, NULL, &err);
    CHECK(s);
    kvt_pool *p1 = calloc(1, sizeof *p1), *p2 = calloc(1, sizeof *p2);
    kvs_pool_io io1 = {p1, kvt_block_data}, io2 = {p2, kvt_block_data};
    int tok[3 * 128 + 10];
    for (int i = 0; i < (int)(sizeof tok / sizeof *tok); i++) tok[i] = (i * 31 + 7) % 1000;
    int n = (int)(sizeof tok / sizeof *tok);

    /* First engine: computes the prompt, commits, persists 3 full blocks. */
    bm *b1 = kvt_make_bm();
    bm_table t1 = {0};
    bm_cow cow;
    CHECK(kvs_attach_prefix(s, b1, &t1, tok, n, n - 1, &io1, NULL) == 0);
    CHECK(bm_reserve(b1, &t1, 0, n, &cow) == 0);
    for (int i = 0; i < t1.n; i++) kvt_payload(p1->data[t1.blocks[i]], BYTES, 100 + (uint64_t)i);
    int before = t1.n_hashed;
    bm_commit(b1, &t1, tok, n);
    CHECK(kvs_persist_new(s, &t1, before, tok, KVS_CLASS_AGENT, &io1) == 3);
    CHECK(kvs_persist_new(s, &t1, t1.n_hashed, tok, KVS_CLASS_AGENT, &io1) == 0);
    kvs_close(s);

    /* Restart: another manager and pool; the whole-block prefix comes from
     * the store, byte for byte, and is now in the prefix cache too. */
    s = kvs_open(dir, &lay, NULL, &err);
    CHECK(s);
    bm *b2 = kvt_make_bm();
    bm_table t2 = {0};
    int fs = -1;
    CHECK(kvs_attach_prefix(s, b2, &t2, tok, n, n - 1, &io2, &fs) == 384);
    CHECK(fs == 384 && t2.n == 3 && t2.n_hashed == 3 && t2.last_key == t1.last_key);
    for (int i = 0; i < 3; i++) {
        uint64_t seed;
        CHECK(kvt_payload_ok(p2->data[t2.blocks[i]], BYTES, &seed) && seed == 100 + (uint64_t)i);
    }
    CHECK(bm_lookup(b2, tok, n) == 384);

    /* Memory first, then the store: a manager that has block 0 cached. */
    bm *b3 = kvt_make_bm();
    kvt_pool *p3 = calloc(1, sizeof *p3);
    kvs_pool_io io3 = {p3, kvt_block_data};
    bm_table t3 = {0}, t4 = {0};
    CHECK(bm_reserve(b3, &t3, 0, 128, &cow) == 0);
    bm_commit(b3, &t3, tok, 128);
    CHECK(kvs_attach_prefix(s, b3, &t4, tok, n, n - 1, &io3, &fs) == 384);
    CHECK(fs == 256 && t4.blocks[0] == t3.blocks[0]);

    /* A prompt that leaves the stored chain in block 1: block 0 only. */
    int other[3 * 128];
    memcpy(other, tok, sizeof other);
    other[200] ^= 1;
    bm *b5 = kvt_make_bm();
    bm_table t5 = {0};
    CHECK(kvs_attach_prefix(s, b5, &t5, other, 384, 384, &io3, &fs) == 128);
    CHECK(fs == 128);
    /* max_tokens bounds the attach (n - 1: the last token is always run). */
    bm *b6 = kvt_make_bm();
    bm_table t6 = {0};
    CHECK(kvs_attach_prefix(s, b6, &t6, tok, 384, 383, &io3, &fs) == 256);

    bm_table *tabs[] = {&t1, &t2, &t3, &t4, &t5, &t6};
    bm *bms[] = {b1, b2, b3, b3, b5, b6};
    for (int i = 0; i < 6; i++) {
        bm_release(bms[i], tabs[i]);
        bm_table_free(tabs[i]);
    }
    bm_free(b1), bm_free(b2), bm_free(b3), bm_free(b5), bm_free(b6);
    kvs_close(s);
    free(p1), free(p2), free(p3);
    kvt_rmdir(dir);
}
