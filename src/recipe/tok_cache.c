/* tok_cache.c — the word cache shared by the threads of one parallel encode.
 *
 * Each thread with a cache of its own would repeat the BPE of every word the
 * other threads already did, and a word's first BPE is the cache-missing part
 * of encoding (merge lookups all over an 8 MB table): per-thread caches cost
 * ~30 % more CPU on 2 threads than one shared cache. But a table that both
 * threads probe for every word runs from cache misses (it was the largest
 * item of a parallel DeepSeek V3 encode), so each thread keeps its own small
 * table in front (tok_bpe.c) and asks this one only on a miss there: for the
 * first sight of a word in that thread. Insert-only and
 * lock-free: a slot holds a pointer to an immutable record, published with a
 * release CAS and read with an acquire load; two threads that miss on the
 * same word both compute it and one record wins (the ids are the same either
 * way). The table stops accepting inserts at 3/4 load, so probes stay a few
 * cache lines (a word past that is encoded by each thread that meets it).
 *
 * Records come from a bump arena per thread (writer), so an insert is no
 * malloc and the end of the call frees a few blocks, not one record per
 * word. A writer's arena sits on its own cache lines. Lives for one call;
 * nothing global. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/tok_internal.h"

#define ARENA_BLOCK (256u << 10)

typedef struct rec {
    uint64_t h;
    uint32_t klen, vlen;
    int ids[]; /* vlen ids, then klen key bytes */
} rec;

/* The hash sits next to the pointer so probes past other words need no
 * dereference; it is stored after the pointer is claimed, so a reader that
 * sees a pointer but no hash yet compares the record itself. */
typedef struct slot {
    _Atomic(rec *) r;
    _Atomic(uint64_t) h;
} slot;

typedef struct arena {
    _Alignas(64) char *blk; /* current block; its first word links the previous one */
    size_t used, cap;
    size_t n; /* records this writer put in the table */
} arena;

struct tok_wcache {
    slot *slot;
    size_t cap;
    arena *ar;
    int n_writers;
};

tok_wcache *tok_wcache_new(size_t text_len, int n_writers) {
    tok_wcache *c = di_calloc(1, sizeof *c);
    /* sized for distinct words, which grow far slower than the text (2.8 MB
     * of the benchmark text holds 18k): a table that stays in cache beats one
     * that never fills (a 2 MB table spent a DRAM miss on every probe; at 512
     * KB the 2-thread Llama 3 encode ran 3-4 % faster) */
    size_t want = text_len / 128 + 1024, cap = 1024;
    while (cap < want && cap < (1u << 17)) cap <<= 1;
    c->cap = cap;
    c->slot = di_calloc(cap, sizeof *c->slot);
    c->n_writers = n_writers;
    c->ar = di_alloc_aligned((size_t)n_writers * sizeof *c->ar);
    return c;
}

void tok_wcache_free(tok_wcache *c) {
    if (!c) return;
    for (int w = 0; w < c->n_writers; w++)
        for (char *b = c->ar[w].blk; b;) {
            char *prev;
            memcpy(&prev, b, sizeof prev);
            free(b);
            b = prev;
        }
    di_free_aligned(c->ar);
    free(c->slot);
    free(c);
}

static void *arena_alloc(arena *a, size_t n) {
    n = (n + 7) & ~(size_t)7;
    if (a->used + n > a->cap) {
        size_t cap = n + 8 > ARENA_BLOCK ? n + 8 : ARENA_BLOCK;
        char *b = di_malloc(cap);
        memcpy(b, &a->blk, sizeof a->blk);
        a->blk = b, a->used = 8, a->cap = cap;
    }
    void *p = a->blk + a->used;
    a->used += n;
    return p;
}

static const char *rec_key(const rec *r) {
    return (const char *)(r->ids + r->vlen);
}

const int *tok_wcache_get(tok_wcache *c, uint64_t h, const char *s, size_t n, size_t *nids) {
    if (!h) h = 1;
    size_t mask = c->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        rec *r = atomic_load_explicit(&c->slot[i].r, memory_order_acquire);
        if (!r) return NULL;
        uint64_t sh = atomic_load_explicit(&c->slot[i].h, memory_order_relaxed);
        if (sh && sh != h) continue;
        if (r->h == h && r->klen == n && !memcmp(rec_key(r), s, n)) {
            *nids = r->vlen;
            return r->ids;
        }
    }
}

void tok_wcache_put(tok_wcache *c, int writer, uint64_t h, const char *s, size_t n, const int *ids,
                    size_t nids) {
    arena *a = &c->ar[writer];
    /* each writer's share of the 3/4 load, counted on its own cache line (a
     * shared counter bounced between the cores on every insert) */
    if (a->n * 4 * (size_t)c->n_writers >= c->cap * 3) return;
    size_t used = a->used;
    char *blk = a->blk;
    rec *r = arena_alloc(a, sizeof *r + nids * sizeof(int) + n);
    if (!h) h = 1; /* 0 marks "hash not stored yet" */
    r->h = h, r->klen = (uint32_t)n, r->vlen = (uint32_t)nids;
    memcpy(r->ids, ids, nids * sizeof(int));
    memcpy((char *)(r->ids + nids), s, n);
    size_t mask = c->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        rec *cur = atomic_load_explicit(&c->slot[i].r, memory_order_acquire);
        if (!cur) {
            if (atomic_compare_exchange_strong_explicit(
                    &c->slot[i].r, &cur, r, memory_order_release, memory_order_acquire)) {
                atomic_store_explicit(&c->slot[i].h, h, memory_order_relaxed);
                a->n++;
                return;
            }
        }
        /* cur is the occupant (possibly just published by another thread) */
        if (cur->h == h && cur->klen == n && !memcmp(rec_key(cur), s, n)) {
            if (a->blk == blk) a->used = used; /* lost the race: take the record back */
            return;
        }
    }
}
