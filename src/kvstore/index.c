/* index.c — the store's in-memory index (kvs_index.h): an open-addressing
 * hash table of block entries with linear probing and backward-shift
 * deletion (no tombstones, so a long-lived index under constant churn keeps
 * short probe runs). Victim selection walks the table once for TTL expiry
 * and sorts the survivors by last use only when the bytes exceed capacity,
 * evicting down to a low watermark so the sort is amortised over many
 * writes. No global state. */
#include <stdlib.h>

#include "base/base.h"
#include "kvstore/kvs_index.h"

struct kvs_index {
    kvs_ientry *t;
    size_t cap; /* power of two */
    long long n;
    unsigned long long bytes;
};

static size_t slot_of(const kvs_index *ix, uint64_t key) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (ix->cap - 1);
}

kvs_index *kvs_index_create(void) {
    kvs_index *ix = di_calloc(1, sizeof *ix);
    ix->cap = 1024;
    ix->t = di_calloc(ix->cap, sizeof *ix->t);
    return ix;
}

void kvs_index_free(kvs_index *ix) {
    if (!ix) return;
    free(ix->t);
    free(ix);
}

kvs_ientry *kvs_index_find(kvs_index *ix, uint64_t key) {
    for (size_t i = slot_of(ix, key);; i = (i + 1) & (ix->cap - 1)) {
        kvs_ientry *e = &ix->t[i];
        if (!e->bytes) return NULL;
        if (e->key == key) return e;
    }
}

static void grow(kvs_index *ix) {
    kvs_ientry *old = ix->t;
    size_t old_cap = ix->cap;
    ix->cap *= 2;
    ix->t = di_calloc(ix->cap, sizeof *ix->t);
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].bytes) continue;
        size_t j = slot_of(ix, old[i].key);
        while (ix->t[j].bytes) j = (j + 1) & (ix->cap - 1);
        ix->t[j] = old[i];
    }
    free(old);
}

void kvs_index_set(kvs_index *ix, uint64_t key, uint64_t bytes, double atime, int cls) {
    if (!bytes) bytes = 1;
    kvs_ientry *e = kvs_index_find(ix, key);
    if (e) {
        ix->bytes = ix->bytes - e->bytes + bytes;
        e->bytes = bytes;
        e->atime = atime;
        e->cls = cls;
        return;
    }
    if ((size_t)(ix->n + 1) * 4 > ix->cap * 3) grow(ix);
    size_t i = slot_of(ix, key);
    while (ix->t[i].bytes) i = (i + 1) & (ix->cap - 1);
    ix->t[i] = (kvs_ientry){.key = key, .bytes = bytes, .atime = atime, .cls = cls};
    ix->n++;
    ix->bytes += bytes;
}

bool kvs_index_remove(kvs_index *ix, uint64_t key) {
    kvs_ientry *e = kvs_index_find(ix, key);
    if (!e) return false;
    size_t mask = ix->cap - 1, i = (size_t)(e - ix->t);
    ix->n--;
    ix->bytes -= e->bytes;
    /* Backward shift: pull later members of the run into the hole when the
     * hole lies between their home slot and where they sit. */
    for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        if (!ix->t[j].bytes) break;
        size_t home = slot_of(ix, ix->t[j].key);
        bool movable = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) {
            ix->t[i] = ix->t[j];
            i = j;
        }
    }
    ix->t[i] = (kvs_ientry){0};
    return true;
}

long long kvs_index_count(const kvs_index *ix) {
    return ix->n;
}

unsigned long long kvs_index_bytes(const kvs_index *ix) {
    return ix->bytes;
}

void kvs_index_each(kvs_index *ix, void (*fn)(void *ctx, kvs_ientry *e), void *ctx) {
    for (size_t i = 0; i < ix->cap; i++)
        if (ix->t[i].bytes) fn(ctx, &ix->t[i]);
}

bool kvs_index_expired(const kvs_ientry *e, double now, const double ttl[KVS_N_CLASS]) {
    double t;
    if (e->cls >= 0 && e->cls < KVS_N_CLASS) {
        t = ttl[e->cls];
    } else {
        t = ttl[0];
        for (int c = 1; c < KVS_N_CLASS; c++)
            if (ttl[c] < 0 || (t >= 0 && ttl[c] > t)) t = ttl[c];
    }
    return t >= 0 && now - e->atime > t;
}

static int by_atime(const void *a, const void *b) {
    const kvs_ientry *x = a, *y = b;
    return (x->atime > y->atime) - (x->atime < y->atime);
}

int kvs_index_evict(kvs_index *ix, double now, const double ttl[KVS_N_CLASS], uint64_t capacity,
                    double low, kvs_victim **out) {
    int n = 0, cap = 0;
    kvs_victim *v = NULL;
    /* TTL: collect keys first, then remove (removal shifts entries). */
    for (size_t i = 0; i < ix->cap; i++) {
        kvs_ientry *e = &ix->t[i];
        if (!e->bytes || !kvs_index_expired(e, now, ttl)) continue;
        if (n == cap) v = di_realloc(v, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *v);
        v[n++] = (kvs_victim){.key = e->key, .bytes = e->bytes, .expired = true};
    }
    for (int k = 0; k < n; k++) kvs_index_remove(ix, v[k].key);
    if (capacity && ix->bytes > capacity) {
        kvs_ientry *all = di_malloc((size_t)(ix->n ? ix->n : 1) * sizeof *all);
        long long m = 0;
        for (size_t i = 0; i < ix->cap; i++)
            if (ix->t[i].bytes) all[m++] = ix->t[i];
        qsort(all, (size_t)m, sizeof *all, by_atime);
        double target = low * (double)capacity;
        for (long long k = 0; k < m && (double)ix->bytes > target; k++) {
            if (n == cap) v = di_realloc(v, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *v);
            v[n++] = (kvs_victim){.key = all[k].key, .bytes = all[k].bytes, .expired = false};
            kvs_index_remove(ix, all[k].key);
        }
        free(all);
    }
    *out = v;
    return n;
}
