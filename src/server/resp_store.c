/* resp_store.c — the Responses API's stored responses: what
 * previous_response_id continues and GET /v1/responses/ID returns.
 *
 * An entry holds a response (the Responses object, as compact JSON), the
 * request's own input items and the id of the response it continued, so a
 * conversation is a chain: continuing one rebuilds its items by walking
 * back, each ancestor's input then its output, and stores nothing twice.
 * Bounded in bytes, the least recently used entries go first; a chain whose
 * ancestor went is refused rather than continued without its start. One
 * mutex: the HTTP threads share the store. */
#include "server/resp_store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define MAX_CHAIN 4096 /* turns rebuilt at most (a cycle cannot be made, but be safe) */

typedef struct entry {
    char *id, *prev;        /* prev: NULL when it starts a conversation */
    char *input, *response; /* compact JSON: the items array, the object */
    size_t bytes;
    uint64_t used; /* last use, for eviction */
} entry;

struct resp_store {
    pthread_mutex_t mu;
    entry *v;
    int n, cap;
    size_t bytes, max_bytes;
    uint64_t clock;
};

resp_store *resp_store_new(size_t max_bytes) {
    resp_store *s = di_calloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->max_bytes = max_bytes;
    return s;
}

static void entry_free(entry *e) {
    free(e->id);
    free(e->prev);
    free(e->input);
    free(e->response);
}

void resp_store_free(resp_store *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) entry_free(&s->v[i]);
    free(s->v);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int find(const resp_store *s, const char *id) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->v[i].id, id)) return i;
    return -1;
}

static void drop(resp_store *s, int i) {
    s->bytes -= s->v[i].bytes;
    entry_free(&s->v[i]);
    s->v[i] = s->v[--s->n];
}

void resp_store_put(resp_store *s, const char *id, const char *prev, const json_t *input,
                    const json_t *response) {
    char *in = json_dumps(input, JSON_COMPACT), *out = json_dumps(response, JSON_COMPACT);
    if (!in || !out) {
        free(in);
        free(out);
        return;
    }
    entry e = {
        .id = di_strdup(id), .prev = prev ? di_strdup(prev) : NULL, .input = in, .response = out};
    e.bytes = strlen(id) + (prev ? strlen(prev) : 0) + strlen(in) + strlen(out) + sizeof e;
    pthread_mutex_lock(&s->mu);
    int old = find(s, id);
    if (old >= 0) drop(s, old);
    while (s->n && s->bytes + e.bytes > s->max_bytes) { /* the least recently used first */
        int lru = 0;
        for (int i = 1; i < s->n; i++)
            if (s->v[i].used < s->v[lru].used) lru = i;
        drop(s, lru);
    }
    if (e.bytes > s->max_bytes) { /* larger than the whole store */
        pthread_mutex_unlock(&s->mu);
        entry_free(&e);
        return;
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->v = di_realloc(s->v, sizeof *s->v * (size_t)s->cap);
    }
    e.used = ++s->clock;
    s->v[s->n++] = e;
    s->bytes += e.bytes;
    pthread_mutex_unlock(&s->mu);
}

json_t *resp_store_history(resp_store *s, const char *id, bool own_output) {
    pthread_mutex_lock(&s->mu);
    int chain[MAX_CHAIN], n = 0;
    for (const char *at = id; at; at = s->v[chain[n - 1]].prev) {
        int i = find(s, at);
        if (i < 0 || n == MAX_CHAIN) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        chain[n++] = i;
    }
    json_t *items = json_array();
    for (int k = n - 1; k >= 0; k--) { /* oldest first: its input, then its output */
        entry *e = &s->v[chain[k]];
        e->used = ++s->clock;
        json_t *in = json_loads(e->input, JSON_ALLOW_NUL, NULL),
               *resp = json_loads(e->response, JSON_ALLOW_NUL, NULL);
        json_array_extend(items, in);
        if (k || own_output) json_array_extend(items, json_object_get(resp, "output"));
        json_decref(in);
        json_decref(resp);
    }
    pthread_mutex_unlock(&s->mu);
    return items;
}

json_t *resp_store_get(resp_store *s, const char *id) {
    pthread_mutex_lock(&s->mu);
    int i = find(s, id);
    json_t *o = NULL;
    if (i >= 0) {
        s->v[i].used = ++s->clock;
        o = json_loads(s->v[i].response, JSON_ALLOW_NUL, NULL);
    }
    pthread_mutex_unlock(&s->mu);
    return o;
}

bool resp_store_delete(resp_store *s, const char *id) {
    pthread_mutex_lock(&s->mu);
    int i = find(s, id);
    if (i >= 0) drop(s, i);
    pthread_mutex_unlock(&s->mu);
    return i >= 0;
}
