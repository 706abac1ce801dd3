/* test_engine_bm.c — block manager: allocation, prefix hash chains, LRU
 * eviction, copy-on-write, and a randomized stress test that must leave the
 * pool full. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/block_manager.h"
#include "harness.h"

static bm *make_bm(int n) {
    int *ids = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) ids[i] = 100 + 3 * i; /* ids need not be dense */
    bm *b = bm_create(ids, n);
    free(ids);
    return b;
}

static void fill(int *t, int n, int seed) {
    for (int i = 0; i < n; i++) t[i] = (seed * 7919 + i * 31) % 1000;
}

TEST(engine_bm_alloc_release) {
    bm *b = make_bm(4);
    bm_table t = {0};
    bm_cow cow;
    CHECK(bm_reserve(b, &t, 0, 300, &cow) == 0);
    CHECK(t.n == 3 && cow.src == -1);
    CHECK(bm_get_stats(b).used == 3);
    CHECK(bm_reserve(b, &t, 300, 600, &cow) == -1); /* needs 2 more, 1 left */
    CHECK(t.n == 3);
    bm_release(b, &t);
    bm_stats s = bm_get_stats(b);
    CHECK(s.free == 4 && s.used == 0 && s.cached == 0);
    bm_table_free(&t);
    bm_free(b);
}

TEST(engine_bm_prefix_chain) {
    bm *b = make_bm(8);
    int tok[400];
    fill(tok, 400, 1);
    bm_table a = {0}, c = {0};
    bm_cow cow;
    CHECK(bm_reserve(b, &a, 0, 400, &cow) == 0);
    bm_commit(b, &a, tok, 400);
    CHECK(a.n_hashed == 3);
    uint64_t keys[4];
    CHECK(bm_chain_keys(tok, 400, keys) == 3 && keys[2] == a.last_key);
    CHECK(keys[0] == XXH3_64bits_withSeed(tok, sizeof(int) * 128, 0));
    CHECK(keys[1] == XXH3_64bits_withSeed(tok + 128, sizeof(int) * 128, keys[0]));
    CHECK(bm_lookup(b, tok, 400) == 384);
    CHECK(bm_lookup(b, tok, 383) == 256);
    int other[400];
    memcpy(other, tok, sizeof other);
    other[130] ^= 1; /* differs in block 1: only block 0 matches */
    CHECK(bm_lookup(b, other, 400) == 128);
    /* Same block content after a different first block: the chain differs. */
    int shifted[400];
    memcpy(shifted, tok, sizeof shifted);
    shifted[0] ^= 1;
    CHECK(bm_lookup(b, shifted, 400) == 0);
    /* Attach shares blocks; limited by max_tokens. */
    CHECK(bm_attach_prefix(b, &c, tok, 400, 399) == 384);
    CHECK(c.n == 3 && c.blocks[0] == a.blocks[0] && bm_refcount(b, a.blocks[0]) == 2);
    bm_release(b, &c);
    CHECK(bm_attach_prefix(b, &c, tok, 400, 200) == 128);
    bm_release(b, &c);
    bm_release(b, &a);
    /* Released hashed blocks stay cached and are still found. */
    bm_stats s = bm_get_stats(b);
    CHECKF(s.cached == 3 && s.free == 5, "cached %d free %d", s.cached, s.free);
    CHECK(bm_lookup(b, tok, 400) == 384);
    CHECK(bm_attach_prefix(b, &c, tok, 400, 400) == 384);
    CHECK(bm_get_stats(b).cached == 0);
    bm_release(b, &c);
    bm_table_free(&a);
    bm_table_free(&c);
    bm_free(b);
}

TEST(engine_bm_lru_eviction) {
    bm *b = make_bm(4);
    int t1[256], t2[256];
    fill(t1, 256, 1);
    fill(t2, 256, 2);
    bm_table a = {0};
    bm_cow cow;
    /* t1 then t2 cached (2 blocks each) fill the pool. */
    CHECK(bm_reserve(b, &a, 0, 256, &cow) == 0);
    bm_commit(b, &a, t1, 256);
    bm_release(b, &a);
    CHECK(bm_reserve(b, &a, 0, 256, &cow) == 0);
    bm_commit(b, &a, t2, 256);
    bm_release(b, &a);
    CHECK(bm_get_stats(b).cached == 4);
    /* Touch t1 so t2 becomes least recently used. */
    CHECK(bm_attach_prefix(b, &a, t1, 256, 256) == 256);
    bm_release(b, &a);
    /* One new block evicts t2's tail block first (released last-block-first). */
    CHECK(bm_reserve(b, &a, 0, 128, &cow) == 0);
    CHECK(bm_lookup(b, t1, 256) == 256);
    CHECKF(bm_lookup(b, t2, 256) == 128, "t2 %d", bm_lookup(b, t2, 256));
    CHECK(bm_get_stats(b).evictions == 1);
    bm_release(b, &a);
    bm_table_free(&a);
    bm_free(b);
}

TEST(engine_bm_fork_cow) {
    bm *b = make_bm(8);
    int tok[200];
    fill(tok, 200, 5);
    bm_table p = {0}, c = {0};
    bm_cow cow;
    CHECK(bm_reserve(b, &p, 0, 200, &cow) == 0);
    bm_commit(b, &p, tok, 200);
    bm_fork(b, &p, &c);
    CHECK(bm_get_stats(b).used == 2);
    CHECK(bm_refcount(b, p.blocks[1]) == 2);
    /* The child writes position 200 into the shared partial block: copy. */
    int shared = p.blocks[1];
    CHECK(bm_reserve(b, &c, 200, 201, &cow) == 0);
    CHECK(cow.src == shared && cow.dst == c.blocks[1] && cow.dst != shared);
    CHECK(bm_refcount(b, shared) == 1 && c.blocks[0] == p.blocks[0]);
    /* The parent now owns its block alone: no copy. */
    CHECK(bm_reserve(b, &p, 200, 201, &cow) == 0);
    CHECK(cow.src == -1);
    /* Writing at a block boundary of a shared full block needs no copy. */
    bm_release(b, &p);
    bm_release(b, &c);
    CHECK(bm_get_stats(b).used == 0);
    bm_table_free(&p);
    bm_table_free(&c);
    bm_free(b);
}

/* Thousands of random alloc/fork/free/lookup operations over a small pool,
 * checking reference counts against an independent count at every step. */
TEST(engine_bm_stress) {
    enum { NB = 64, NS = 24, OPS = 20000 };
    bm *b = make_bm(NB);
    bm_table t[NS];
    int *tok[NS], len[NS];
    memset(t, 0, sizeof t);
    for (int i = 0; i < NS; i++) {
        tok[i] = malloc(sizeof(int) * 2400);
        len[i] = 0;
    }
    unsigned rng = 12345;
#define RND() harness_lcg(&rng)
    for (int op = 0; op < OPS; op++) {
        int i = (int)(RND() % NS), kind = (int)(RND() % 10);
        bm_cow cow;
        if (kind < 5) { /* grow (with a shared prefix family to get hits) */
            if (t[i].n == 0) {
                int fam = (int)(RND() % 4);
                len[i] = 0;
                int n = 1 + (int)(RND() % 600);
                fill(tok[i], n, fam);
                int got = bm_attach_prefix(b, &t[i], tok[i], n, n - 1);
                CHECK(got % BM_BLOCK == 0 && got <= n - 1);
                if (bm_reserve(b, &t[i], got, n, &cow) == 0) {
                    len[i] = n;
                    bm_commit(b, &t[i], tok[i], n);
                } else {
                    bm_release(b, &t[i]);
                }
            } else if (len[i] < 2000) {
                int add = 1 + (int)(RND() % 200);
                for (int k = 0; k < add; k++) tok[i][len[i] + k] = (int)(RND() % 5);
                if (bm_reserve(b, &t[i], len[i], len[i] + add, &cow) == 0) {
                    len[i] += add;
                    bm_commit(b, &t[i], tok[i], len[i]);
                }
            }
        } else if (kind < 7) { /* free */
            bm_release(b, &t[i]);
            len[i] = 0;
        } else if (kind < 9) { /* fork into an empty slot */
            int j = (int)(RND() % NS);
            if (j != i && t[j].n == 0 && t[i].n > 0) {
                bm_fork(b, &t[i], &t[j]);
                memcpy(tok[j], tok[i], sizeof(int) * (size_t)len[i]);
                len[j] = len[i];
            }
        } else {
            CHECK(bm_lookup(b, tok[i], len[i]) <= len[i]);
        }
        /* Invariants: refcounts equal table occurrences; stats add up. */
        if (op % 50 == 0) {
            int cnt[NB * 3 + 100];
            memset(cnt, 0, sizeof cnt);
            int used = 0;
            for (int s = 0; s < NS; s++)
                for (int k = 0; k < t[s].n; k++) cnt[t[s].blocks[k]]++;
            for (int id = 100; id < 100 + 3 * NB; id += 3) {
                CHECKF(bm_refcount(b, id) == cnt[id], "block %d ref %d counted %d", id,
                       bm_refcount(b, id), cnt[id]);
                used += cnt[id] > 0;
            }
            bm_stats st = bm_get_stats(b);
            CHECK(st.used == used && st.used + st.free + st.cached == NB);
        }
    }
    for (int i = 0; i < NS; i++) {
        bm_release(b, &t[i]);
        bm_table_free(&t[i]);
        free(tok[i]);
    }
    bm_stats st = bm_get_stats(b);
    CHECKF(st.used == 0 && st.free + st.cached == NB, "used %d", st.used);
    CHECKF(st.hit_tokens > 0 && st.evictions > 0 && st.cows > 0, "hits %lld ev %lld cows %lld",
           st.hit_tokens, st.evictions, st.cows);
    bm_free(b);
}
