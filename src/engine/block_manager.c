/* block_manager.c — reference-counted 128-token KV blocks with a hash-chain
 * prefix cache (see block_manager.h for the contract).
 *
 * Internally blocks are slots 0..n-1 (slot_of maps a pool id to its slot).
 * Three intrusive structures over the slots, all O(1) per operation:
 *   - a free stack of slots that hold nothing reusable;
 *   - an LRU list (doubly linked) of cached slots with ref == 0, evicted from
 *     the head; a released cached block goes to the tail;
 *   - a chained hash map key -> slot for every hashed slot (in use or cached).
 * Allocation prefers the free stack, so cached prefixes survive as long as
 * the pool has room. No global state. */
#include "engine/block_manager.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/base.h"

struct bm {
    int n;
    int *id_of;   /* slot -> pool id */
    int *slot_of; /* pool id -> slot (size max_id + 1), -1 if not ours */
    int max_id;
    int *ref;
    bool caching;

    int *free_stack, n_free;

    int *lru_prev, *lru_next, lru_head, lru_tail, n_cached; /* ref==0 hashed slots */

    bool *hashed;
    uint64_t *key, *parent;
    int *tokens; /* n * BM_BLOCK, valid while hashed */
    int *bucket, n_bucket_mask, *chain;

    long long hit_tokens, lookups, evictions, cows;
};

static uint64_t block_key(const int *tokens, uint64_t parent) {
    return XXH3_64bits_withSeed(tokens, sizeof(int) * BM_BLOCK, parent);
}

bm *bm_create(const int *ids, int n) {
    bm *b = di_calloc(1, sizeof *b);
    b->n = n;
    b->caching = true;
    b->id_of = di_malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    b->max_id = -1;
    for (int i = 0; i < n; i++) {
        b->id_of[i] = ids[i];
        if (ids[i] > b->max_id) b->max_id = ids[i];
    }
    b->slot_of = di_malloc(sizeof(int) * (size_t)(b->max_id + 2));
    for (int i = 0; i <= b->max_id; i++) b->slot_of[i] = -1;
    for (int i = 0; i < n; i++) b->slot_of[ids[i]] = i;
    size_t nn = (size_t)(n > 0 ? n : 1);
    b->ref = di_calloc(nn, sizeof(int));
    b->free_stack = di_malloc(sizeof(int) * nn);
    for (int i = 0; i < n; i++) b->free_stack[i] = n - 1 - i; /* slot 0 handed out first */
    b->n_free = n;
    b->lru_prev = di_malloc(sizeof(int) * nn);
    b->lru_next = di_malloc(sizeof(int) * nn);
    b->lru_head = b->lru_tail = -1;
    b->hashed = di_calloc(nn, sizeof(bool));
    b->key = di_calloc(nn, sizeof(uint64_t));
    b->parent = di_calloc(nn, sizeof(uint64_t));
    b->tokens = di_malloc(sizeof(int) * nn * BM_BLOCK);
    int nb = 16;
    while (nb < 2 * n) nb *= 2;
    b->bucket = di_malloc(sizeof(int) * (size_t)nb);
    for (int i = 0; i < nb; i++) b->bucket[i] = -1;
    b->n_bucket_mask = nb - 1;
    b->chain = di_malloc(sizeof(int) * nn);
    return b;
}

void bm_free(bm *b) {
    if (!b) return;
    free(b->id_of);
    free(b->slot_of);
    free(b->ref);
    free(b->free_stack);
    free(b->lru_prev);
    free(b->lru_next);
    free(b->hashed);
    free(b->key);
    free(b->parent);
    free(b->tokens);
    free(b->bucket);
    free(b->chain);
    free(b);
}

void bm_set_caching(bm *b, bool on) {
    b->caching = on;
}

bool bm_caching(const bm *b) {
    return b->caching;
}

bm_stats bm_get_stats(const bm *b) {
    bm_stats s = {.total = b->n, .free = b->n_free, .cached = b->n_cached};
    s.used = b->n - b->n_free - b->n_cached;
    s.hit_tokens = b->hit_tokens;
    s.lookups = b->lookups;
    s.evictions = b->evictions;
    s.cows = b->cows;
    return s;
}

int bm_n_available(const bm *b) {
    return b->n_free + b->n_cached;
}

int bm_refcount(const bm *b, int id) {
    if (id < 0 || id > b->max_id || b->slot_of[id] < 0) return -1;
    return b->ref[b->slot_of[id]];
}

/* --- LRU list of cached, unreferenced slots ------------------------------- */
static void lru_remove(bm *b, int s) {
    int p = b->lru_prev[s], q = b->lru_next[s];
    if (p >= 0)
        b->lru_next[p] = q;
    else
        b->lru_head = q;
    if (q >= 0)
        b->lru_prev[q] = p;
    else
        b->lru_tail = p;
    b->n_cached--;
}

static void lru_push_tail(bm *b, int s) {
    b->lru_prev[s] = b->lru_tail;
    b->lru_next[s] = -1;
    if (b->lru_tail >= 0)
        b->lru_next[b->lru_tail] = s;
    else
        b->lru_head = s;
    b->lru_tail = s;
    b->n_cached++;
}

/* --- hash map key -> slot ------------------------------------------------- */
static void map_insert(bm *b, int s) {
    int h = (int)(b->key[s] & (uint64_t)b->n_bucket_mask);
    b->chain[s] = b->bucket[h];
    b->bucket[h] = s;
    b->hashed[s] = true;
}

static void map_remove(bm *b, int s) {
    int h = (int)(b->key[s] & (uint64_t)b->n_bucket_mask);
    int *pp = &b->bucket[h];
    while (*pp != s) pp = &b->chain[*pp];
    *pp = b->chain[s];
    b->hashed[s] = false;
}

static int map_find(const bm *b, uint64_t key, uint64_t parent, const int *tokens) {
    for (int s = b->bucket[key & (uint64_t)b->n_bucket_mask]; s >= 0; s = b->chain[s])
        if (b->key[s] == key && b->parent[s] == parent &&
            !memcmp(b->tokens + (size_t)s * BM_BLOCK, tokens, sizeof(int) * BM_BLOCK))
            return s;
    return -1;
}

/* --- allocation ----------------------------------------------------------- */
static int slot_alloc(bm *b) {
    int s;
    if (b->n_free > 0) {
        s = b->free_stack[--b->n_free];
    } else if (b->lru_head >= 0) {
        s = b->lru_head;
        lru_remove(b, s);
        map_remove(b, s);
        b->evictions++;
    } else {
        return -1;
    }
    b->ref[s] = 1;
    return s;
}

static void slot_unref(bm *b, int s) {
    if (--b->ref[s] > 0) return;
    if (b->hashed[s])
        lru_push_tail(b, s);
    else
        b->free_stack[b->n_free++] = s;
}

static void slot_ref(bm *b, int s) {
    if (b->ref[s]++ == 0) lru_remove(b, s); /* only hashed slots sit at ref 0 outside free */
}

static void table_push(bm_table *t, int id) {
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 8;
        t->blocks = di_realloc(t->blocks, sizeof(int) * (size_t)t->cap);
    }
    t->blocks[t->n++] = id;
}

/* --- prefix cache --------------------------------------------------------- */
int bm_chain_keys(const int *tokens, int n, uint64_t *keys) {
    uint64_t k = 0;
    int i = 0;
    for (; (i + 1) * BM_BLOCK <= n; i++) keys[i] = k = block_key(tokens + (size_t)i * BM_BLOCK, k);
    return i;
}

int bm_lookup(const bm *b, const int *tokens, int n) {
    if (!b->caching) return 0;
    uint64_t k = 0;
    int i = 0;
    for (; (i + 1) * BM_BLOCK <= n; i++) {
        const int *tk = tokens + (size_t)i * BM_BLOCK;
        uint64_t nk = block_key(tk, k);
        if (map_find(b, nk, k, tk) < 0) break;
        k = nk;
    }
    return i * BM_BLOCK;
}

int bm_attach_prefix(bm *b, bm_table *t, const int *tokens, int n, int max_tokens) {
    if (!b->caching || t->n != 0) return 0;
    b->lookups++;
    uint64_t k = 0;
    int i = 0;
    for (; (i + 1) * BM_BLOCK <= n && (i + 1) * BM_BLOCK <= max_tokens; i++) {
        const int *tk = tokens + (size_t)i * BM_BLOCK;
        uint64_t nk = block_key(tk, k);
        int s = map_find(b, nk, k, tk);
        if (s < 0) break;
        slot_ref(b, s);
        table_push(t, b->id_of[s]);
        k = nk;
    }
    t->n_hashed = i;
    t->last_key = k;
    b->hit_tokens += (long long)i * BM_BLOCK;
    return i * BM_BLOCK;
}

void bm_commit(bm *b, bm_table *t, const int *tokens, int n_computed) {
    if (!b->caching) return;
    int full = n_computed / BM_BLOCK;
    if (full > t->n) full = t->n;
    while (t->n_hashed < full) {
        int i = t->n_hashed;
        const int *tk = tokens + (size_t)i * BM_BLOCK;
        uint64_t parent = t->last_key, k = block_key(tk, parent);
        int s = b->slot_of[t->blocks[i]];
        /* If the same prefix is cached already (two sequences computed it at
         * once), keep that one and leave this block private. */
        if (!b->hashed[s] && map_find(b, k, parent, tk) < 0) {
            b->key[s] = k;
            b->parent[s] = parent;
            memcpy(b->tokens + (size_t)s * BM_BLOCK, tk, sizeof(int) * BM_BLOCK);
            map_insert(b, s);
        }
        t->last_key = k;
        t->n_hashed++;
    }
}

/* --- tables --------------------------------------------------------------- */
static bool reserve_shares(const bm *b, const bm_table *t, int from, int to) {
    int fb = from / BM_BLOCK;
    return from < to && fb < t->n && b->ref[b->slot_of[t->blocks[fb]]] > 1;
}

static int reserve_grow(const bm_table *t, int to) {
    int need_blocks = (to + BM_BLOCK - 1) / BM_BLOCK;
    return need_blocks > t->n ? need_blocks - t->n : 0;
}

int bm_reserve_need(const bm *b, const bm_table *t, int from, int to) {
    return reserve_grow(t, to) + (reserve_shares(b, t, from, to) ? 1 : 0);
}

int bm_reserve(bm *b, bm_table *t, int from, int to, bm_cow *cow) {
    cow->src = cow->dst = -1;
    int grow = reserve_grow(t, to);
    int fb = from / BM_BLOCK;
    bool shared = reserve_shares(b, t, from, to);
    if (grow + (shared ? 1 : 0) > bm_n_available(b)) return -1;
    if (shared) {
        int old = b->slot_of[t->blocks[fb]];
        int s = slot_alloc(b);
        slot_unref(b, old); /* ref > 1, so it stays in use */
        t->blocks[fb] = b->id_of[s];
        cow->src = b->id_of[old];
        cow->dst = b->id_of[s];
        b->cows++;
        /* A shared partial block is never hashed, so the chain is intact. */
    }
    for (int i = 0; i < grow; i++) table_push(t, b->id_of[slot_alloc(b)]);
    return 0;
}

void bm_fork(bm *b, const bm_table *src, bm_table *dst) {
    for (int i = 0; i < src->n; i++) {
        slot_ref(b, b->slot_of[src->blocks[i]]);
        table_push(dst, src->blocks[i]);
    }
    dst->n_hashed = src->n_hashed;
    dst->last_key = src->last_key;
}

void bm_release(bm *b, bm_table *t) {
    for (int i = t->n - 1; i >= 0; i--) slot_unref(b, b->slot_of[t->blocks[i]]);
    t->n = 0;
    t->n_hashed = 0;
    t->last_key = 0;
}

void bm_table_free(bm_table *t) {
    free(t->blocks);
    memset(t, 0, sizeof *t);
}
