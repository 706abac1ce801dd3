/* swa_cache.c — LRU map from prefix key to sliding-window snapshot (contract
 * in swa_cache.h). An open-chained hash table over the keys (they are
 * XXH3 hashes already, so the low bits index it) plus an intrusive doubly
 * linked LRU list; every operation is O(1). The table doubles when it is
 * more than 3/4 full. */
#include "engine/swa_cache.h"

#include <stdlib.h>

#include "base/base.h"

typedef struct swc_ent {
    uint64_t key;
    void *value;
    size_t bytes;
    struct swc_ent *next_hash, *prev, *next; /* prev/next: LRU, head = most recent */
} swc_ent;

struct swc {
    size_t max_bytes;
    void (*free_fn)(void *);
    swc_ent **tab;
    size_t n_tab;
    swc_ent *head, *tail;
    swc_stats st;
};

swc *swc_create(size_t max_bytes, void (*free_fn)(void *value)) {
    swc *c = di_calloc(1, sizeof *c);
    c->max_bytes = max_bytes;
    c->free_fn = free_fn;
    c->n_tab = 64;
    c->tab = di_calloc(c->n_tab, sizeof *c->tab);
    return c;
}

static void lru_unlink(swc *c, swc_ent *e) {
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_front(swc *c, swc_ent *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
}

static swc_ent **slot_of(const swc *c, uint64_t key) {
    swc_ent **pp = &c->tab[key & (c->n_tab - 1)];
    while (*pp && (*pp)->key != key) pp = &(*pp)->next_hash;
    return pp;
}

static void drop(swc *c, swc_ent *e) {
    swc_ent **pp = slot_of(c, e->key);
    *pp = e->next_hash;
    lru_unlink(c, e);
    c->st.entries--;
    c->st.bytes -= e->bytes;
    if (c->free_fn) c->free_fn(e->value);
    free(e);
}

void swc_free(swc *c) {
    if (!c) return;
    while (c->head) drop(c, c->head);
    free(c->tab);
    free(c);
}

const void *swc_get(swc *c, uint64_t key) {
    swc_ent *e = *slot_of(c, key);
    if (!e) {
        c->st.misses++;
        return NULL;
    }
    c->st.hits++;
    lru_unlink(c, e);
    lru_push_front(c, e);
    return e->value;
}

bool swc_has(const swc *c, uint64_t key) {
    return *slot_of(c, key) != NULL;
}

static void grow(swc *c) {
    size_t n = c->n_tab * 2;
    swc_ent **tab = di_calloc(n, sizeof *tab);
    for (size_t i = 0; i < c->n_tab; i++)
        for (swc_ent *e = c->tab[i], *nx; e; e = nx) {
            nx = e->next_hash;
            e->next_hash = tab[e->key & (n - 1)];
            tab[e->key & (n - 1)] = e;
        }
    free(c->tab);
    c->tab = tab;
    c->n_tab = n;
}

void swc_put(swc *c, uint64_t key, void *value, size_t bytes) {
    swc_ent *old = *slot_of(c, key);
    if (old) drop(c, old);
    if (bytes > c->max_bytes) {
        if (c->free_fn) c->free_fn(value);
        return;
    }
    if ((size_t)c->st.entries + 1 > c->n_tab / 4 * 3) grow(c);
    swc_ent *e = di_calloc(1, sizeof *e);
    e->key = key;
    e->value = value;
    e->bytes = bytes;
    swc_ent **pp = &c->tab[key & (c->n_tab - 1)];
    e->next_hash = *pp;
    *pp = e;
    lru_push_front(c, e);
    c->st.entries++;
    c->st.bytes += bytes;
    c->st.inserts++;
    while (c->st.bytes > c->max_bytes && c->tail != e) {
        drop(c, c->tail);
        c->st.evictions++;
    }
}

swc_stats swc_get_stats(const swc *c) {
    return c->st;
}
