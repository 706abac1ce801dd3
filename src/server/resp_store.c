/* resp_store.c — the Responses API's stored responses: what
 * previous_response_id continues and GET /v1/responses/ID returns.
 *
 * An entry holds a response (the Responses object, as compact JSON), the
 * request's own input items and the id of the response it continued, so a
 * conversation is a chain: continuing one rebuilds its items by walking
 * back, each ancestor's input then its output, and stores nothing twice.
 * Bounded in bytes, the least recently used entries go first; a chain whose
 * ancestor went is refused rather than continued without its start. One
 * mutex: the HTTP threads share the store.
 *
 * With a directory, each entry is also a file there, <id>.json ({"id",
 * "prev", "input", "response"}, written whole to <id>.json.tmp and renamed
 * into place), removed when the entry goes; opening the store loads the
 * files back, oldest (by modification time) first, as the least recently
 * used, so conversations outlive a restart. */
#include "server/resp_store.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    char *dir; /* NULL: memory only */
    entry *v;
    int n, cap;
    size_t bytes, max_bytes;
    uint64_t clock;
};

/* The ids the store makes files of (ours: resp_ and hex digits). */
static bool file_safe(const char *id) {
    size_t n = strlen(id);
    if (!n || n > 128) return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

static char *file_of(const resp_store *s, const char *id, const char *ext) {
    size_t n = strlen(s->dir) + strlen(id) + strlen(ext) + 2;
    char *p = di_malloc(n);
    snprintf(p, n, "%s/%s%s", s->dir, id, ext);
    return p;
}

/* Writes entry e's file (whole, then renamed into place), from the
 * compact JSON it already holds. */
static void save(const resp_store *s, const entry *e) {
    if (!s->dir || !file_safe(e->id)) return;
    json_t *pv = e->prev ? json_string(e->prev) : json_null();
    char *prev = json_dumps(pv, JSON_ENCODE_ANY);
    json_decref(pv);
    char *path = file_of(s, e->id, ".json"), *tmp = file_of(s, e->id, ".json.tmp");
    FILE *f = prev ? fopen(tmp, "w") : NULL;
    bool ok = f && fprintf(f, "{\"id\":\"%s\",\"prev\":%s,\"input\":%s,\"response\":%s}", e->id,
                           prev, e->input, e->response) > 0;
    if (f && fclose(f)) ok = false;
    if (!(ok && rename(tmp, path) == 0) && f) unlink(tmp);
    free(prev);
    free(path);
    free(tmp);
}

static void unsave(const resp_store *s, const char *id) {
    if (!s->dir || !file_safe(id)) return;
    char *path = file_of(s, id, ".json");
    unlink(path);
    free(path);
}

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
    free(s->dir);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int find(const resp_store *s, const char *id) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->v[i].id, id)) return i;
    return -1;
}

/* Removes entry i (its file too, with persist). */
static void drop(resp_store *s, int i, bool persist) {
    if (persist) unsave(s, s->v[i].id);
    s->bytes -= s->v[i].bytes;
    entry_free(&s->v[i]);
    s->v[i] = s->v[--s->n];
}

/* resp_store_put; without persist (loading), no file is written for it. */
static void put(resp_store *s, const char *id, const char *prev, const json_t *input,
                const json_t *response, bool persist) {
    char *in = json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY),
         *out = json_dumps(response, JSON_COMPACT | JSON_ENCODE_ANY);
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
    if (old >= 0) drop(s, old, false);                  /* its file is rewritten below */
    while (s->n && s->bytes + e.bytes > s->max_bytes) { /* the least recently used first */
        int lru = 0;
        for (int i = 1; i < s->n; i++)
            if (s->v[i].used < s->v[lru].used) lru = i;
        drop(s, lru, true);
    }
    if (e.bytes > s->max_bytes) { /* larger than the whole store */
        if (old >= 0 && persist) unsave(s, id);
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
    if (persist) save(s, &s->v[s->n - 1]);
    pthread_mutex_unlock(&s->mu);
}

void resp_store_put(resp_store *s, const char *id, const char *prev, const json_t *input,
                    const json_t *response) {
    put(s, id, prev, input, response, true);
}

typedef struct saved {
    char *name;
    struct timespec mtime;
} saved;

/* Oldest first; files of the same time in name order. */
static int by_mtime(const void *a, const void *b) {
    const saved *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

resp_store *resp_store_open(size_t max_bytes, const char *dir, di_err *err) {
    resp_store *s = resp_store_new(max_bytes);
    if (!dir) return s;
    if (mkdir(dir, 0700) && errno != EEXIST) {
        di_errf(err, "response store: cannot make directory %s: %s", dir, strerror(errno));
        resp_store_free(s);
        return NULL;
    }
    DIR *d = opendir(dir);
    if (!d) {
        di_errf(err, "response store: cannot read directory %s: %s", dir, strerror(errno));
        resp_store_free(s);
        return NULL;
    }
    s->dir = di_strdup(dir);
    saved *files = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".json")) continue;
        char *path = file_of(s, de->d_name, "");
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (n == cap) files = di_realloc(files, sizeof *files * (cap = cap ? 2 * cap : 64));
            files[n++] = (saved){di_strdup(de->d_name), st.st_mtim};
        }
        free(path);
    }
    closedir(d);
    if (n) qsort(files, n, sizeof *files, by_mtime);
    for (size_t i = 0; i < n; i++) { /* oldest first: the least recently used */
        char *path = file_of(s, files[i].name, "");
        json_t *o = json_load_file(path, JSON_ALLOW_NUL, NULL);
        const char *id = json_string_value(json_object_get(o, "id"));
        const json_t *prev = json_object_get(o, "prev");
        size_t len = strlen(files[i].name);
        bool ok = id && file_safe(id) && strlen(id) == len - 5 &&
                  !strncmp(id, files[i].name, len - 5) &&
                  (json_is_string(prev) || !prev || json_is_null(prev)) &&
                  json_is_array(json_object_get(o, "input")) &&
                  json_is_object(json_object_get(o, "response"));
        if (ok)
            put(s, id, json_string_value(prev), json_object_get(o, "input"),
                json_object_get(o, "response"), false);
        json_decref(o);
        free(path);
        free(files[i].name);
    }
    free(files);
    return s;
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
    if (i >= 0) drop(s, i, true);
    pthread_mutex_unlock(&s->mu);
    return i >= 0;
}
