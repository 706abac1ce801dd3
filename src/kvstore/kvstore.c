/* kvstore.c — the store handle: opens a directory (scan -> index), answers
 * match from the index, queues puts for writer threads, evicts by TTL and
 * capacity, and keeps the index coherent with other processes writing the
 * same directory. The file format lives in store.c, the fetch threads in
 * fetch.c, swap-in in swapin.c.
 *
 * Coherence without a shared lock: a process's index is a cache of the
 * directory listing. A match that reaches a key the index lacks stats the
 * file (one metadata call per match, at the first miss), so a block another
 * process wrote is hit at once; a read that finds a block gone or damaged
 * drops it from the index; a writer thread rescans the whole directory
 * every rescan_s to relearn sizes, times and others' evictions, so each
 * process's capacity accounting converges on the directory's. Evicting a
 * block another process is reading is safe (an open file outlives its
 * unlink); evicting one another process just rewrote only costs a miss.
 *
 * Threads: the caller's (match, put, fetch/swap-in start), write_threads
 * writers (concurrent fdatasyncs share journal commits), and fetch_threads
 * readers; one mutex guards the index, the queues and the
 * stats, and is never held across file I/O. No global state. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvstore/kvs_internal.h"

#define DEFAULT_TTL_CHAT  (7 * 86400.0)
#define DEFAULT_TTL_AGENT (3 * 86400.0)
#define LOW_WATER         0.9

const char *kvs_class_name(kvs_class c) {
    return c == KVS_CLASS_AGENT ? "agent" : c == KVS_CLASS_CHAT ? "chat" : "?";
}

int kvs_class_parse(const char *s) {
    if (!strcmp(s, "chat")) return KVS_CLASS_CHAT;
    if (!strcmp(s, "agent")) return KVS_CLASS_AGENT;
    return -1;
}

double kvs_parse_duration(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0) return -1;
    double mul = 1;
    if (*end == 'd')
        mul = 86400, end++;
    else if (*end == 'h')
        mul = 3600, end++;
    else if (*end == 'm')
        mul = 60, end++;
    else if (*end == 's')
        end++;
    return *end ? -1 : v * mul;
}

size_t kvs_parse_size(const char *s, bool *ok) {
    char *end;
    double v = strtod(s, &end);
    *ok = false;
    if (end == s || !isfinite(v) || v < 0) return 0;
    double mul = 1;
    switch (*end) {
    case 'K':
    case 'k':
        mul = 1024.0;
        end++;
        break;
    case 'M':
    case 'm':
        mul = 1024.0 * 1024;
        end++;
        break;
    case 'G':
    case 'g':
        mul = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 'T':
    case 't':
        mul = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'i' && mul > 1) end++;
    if (*end == 'B') end++;
    if (*end || v * mul > 1e19) return 0;
    *ok = true;
    return (size_t)(v * mul);
}

static int mkdirs(const char *path, di_err *err) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return di_errf(err, "KV store: path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                return di_errf(err, "KV store: cannot create %s: %s", buf, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    return 0;
}

static void scan_into(void *ctx, uint64_t key, uint64_t bytes, double mtime) {
    kvs_index_set(ctx, key, bytes, mtime, KVS_CLASS_UNKNOWN);
}

typedef struct {
    kvs_index *old;
} merge_ctx;

static void merge_known(void *ctx, kvs_ientry *e) {
    kvs_ientry *o = kvs_index_find(((merge_ctx *)ctx)->old, e->key);
    if (!o) return;
    if (e->cls == KVS_CLASS_UNKNOWN) e->cls = o->cls;
    if (o->atime > e->atime) e->atime = o->atime;
}

/* Rebuilds the index from the directory, keeping what this process knew of
 * classes and last uses. */
static void rescan(kvs *s) {
    kvs_index *fresh = kvs_index_create();
    kvs_scan(s->root, scan_into, fresh);
    pthread_mutex_lock(&s->mu);
    merge_ctx mc = {s->ix};
    kvs_index_each(fresh, merge_known, &mc);
    kvs_index_free(s->ix);
    s->ix = fresh;
    s->last_scan = kvs_wall();
    pthread_mutex_unlock(&s->mu);
}

typedef struct {
    double now, min_ttl;
    uint64_t *keys;
    int n, cap;
} unknown_ctx;

static void collect_unknown(void *ctx, kvs_ientry *e) {
    unknown_ctx *u = ctx;
    if (e->cls != KVS_CLASS_UNKNOWN || u->now - e->atime <= u->min_ttl) return;
    if (u->n == u->cap)
        u->keys = di_realloc(u->keys, (size_t)(u->cap = u->cap ? 2 * u->cap : 64) * 8);
    u->keys[u->n++] = e->key;
}

void kvs_sweep(kvs *s) {
    double now = kvs_wall();
    /* Blocks found by a scan have no class yet; only those older than the
     * shortest TTL can be expired by it, so only their headers are read. */
    unknown_ctx u = {.now = now, .min_ttl = s->min_ttl};
    pthread_mutex_lock(&s->mu);
    if (s->min_ttl >= 0) kvs_index_each(s->ix, collect_unknown, &u);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < u.n; i++) {
        int cls = kvs_file_read_class(s->root, &s->lay, u.keys[i]);
        pthread_mutex_lock(&s->mu);
        kvs_ientry *e = kvs_index_find(s->ix, u.keys[i]);
        if (e && cls != KVS_CLASS_UNKNOWN) e->cls = cls;
        pthread_mutex_unlock(&s->mu);
    }
    free(u.keys);
    kvs_victim *v = NULL;
    pthread_mutex_lock(&s->mu);
    int n = kvs_index_evict(s->ix, now, s->o.ttl_s, s->o.capacity_bytes, LOW_WATER, &v);
    for (int i = 0; i < n; i++) {
        if (v[i].expired)
            s->st.evictions_ttl++;
        else
            s->st.evictions_capacity++;
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++) {
        char path[4200];
        kvs_file_path(path, sizeof path, s->root, v[i].key);
        unlink(path);
    }
    free(v);
}

static void *writer_main(void *arg) {
    kvs *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        double due = s->last_scan + s->o.rescan_s;
        while (!s->stop && !s->wq_n && kvs_wall() < due) {
            struct timespec ts;
            double t = due < kvs_wall() + 1.0 ? due : kvs_wall() + 1.0;
            ts.tv_sec = (time_t)t;
            ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
            pthread_cond_timedwait(&s->wcond, &s->mu, &ts);
        }
        if (s->wq_n) {
            kvs_wjob job = s->wq[s->wq_head];
            s->wq_head = (s->wq_head + 1) % s->o.write_queue;
            s->wq_n--;
            s->n_writing++;
            kvs_ientry *e = kvs_index_find(s->ix, job.key);
            bool present = e && !kvs_index_expired(e, kvs_wall(), s->o.ttl_s);
            pthread_mutex_unlock(&s->mu);
            di_err err = {{0}};
            int rc = present ? 1
                             : kvs_file_write(s->root, &s->lay, job.key, job.parent, job.cls,
                                              s->o.sync, !s->o.buffered_io, job.file, &err);
            pthread_mutex_lock(&s->mu);
            if (s->n_bufs < s->o.host_blocks)
                s->bufs[s->n_bufs++] = job.file;
            else
                free(job.file);
            if (rc == 0) {
                kvs_index_set(s->ix, job.key, kvs_file_bytes(&s->lay), kvs_wall(), job.cls);
                s->st.blocks_written++;
                s->st.bytes_written += (long long)kvs_file_bytes(&s->lay);
            } else if (rc > 0) {
                s->st.puts_skipped++;
            } else {
                s->st.write_errors++;
                di_log(DI_LOG_WARN, "%s", err.msg);
            }
            if (s->o.capacity_bytes && kvs_index_bytes(s->ix) > s->o.capacity_bytes) {
                pthread_mutex_unlock(&s->mu); /* still counted: kvs_flush waits for this */
                kvs_sweep(s);
                pthread_mutex_lock(&s->mu);
            }
            s->n_writing--;
            if (!s->wq_n && !s->n_writing) pthread_cond_broadcast(&s->widle);
            continue;
        }
        if (s->stop) break;
        if (kvs_wall() >= s->last_scan + s->o.rescan_s) {
            s->last_scan = kvs_wall(); /* one writer rescans; the others keep writing */
            pthread_mutex_unlock(&s->mu);
            rescan(s);
            kvs_sweep(s);
            pthread_mutex_lock(&s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void *alloc_buf(const kvs *s) {
    void *b;
    if (posix_memalign(&b, KVS_IO_ALIGN, kvs_file_cap(&s->lay))) {
        di_log(DI_LOG_ERROR, "KV store: out of memory for a %zu-byte staging buffer",
               kvs_file_cap(&s->lay));
        abort();
    }
    return b;
}

kvs *kvs_open(const char *dir, const kvs_layout *lay, const kvs_opts *opts, di_err *err) {
    if (!lay->block_bytes || lay->n_layers < 1 || lay->n_layers > KVS_MAX_LAYERS) {
        di_errf(err, "KV store %s: bad layout (%zu bytes, %d layers)", dir, lay->block_bytes,
                lay->n_layers);
        return NULL;
    }
    for (int l = 0; l < lay->n_layers; l++)
        if (lay->layer_off[l] > lay->block_bytes ||
            lay->layer_bytes[l] > lay->block_bytes - lay->layer_off[l]) {
            di_errf(err, "KV store %s: layer %d segment outside the %zu-byte block", dir, l,
                    lay->block_bytes);
            return NULL;
        }
    kvs_opts o = opts ? *opts : (kvs_opts){0};
    for (int c = 0; c < KVS_N_CLASS; c++)
        if (o.ttl_s[c] == 0)
            o.ttl_s[c] = c == KVS_CLASS_AGENT ? DEFAULT_TTL_AGENT : DEFAULT_TTL_CHAT;
    if (o.fetch_threads <= 0) o.fetch_threads = 2;
    if (o.write_threads <= 0) o.write_threads = 2;
    if (o.write_queue <= 0) o.write_queue = 64;
    if (o.rescan_s <= 0) o.rescan_s = 60;
    if (o.touch_s <= 0) o.touch_s = 3600;
    if (o.host_blocks <= 0) o.host_blocks = 16;

    char root[4096];
    if (snprintf(root, sizeof root, "%s/%016" PRIx64 "-v%d", dir, lay->fingerprint,
                 KVS_LAYOUT_VERSION) >= (int)sizeof root - 64) {
        di_errf(err, "KV store: directory path too long: %s", dir);
        return NULL;
    }
    if (mkdirs(root, err) < 0) return NULL;

    kvs *s = di_calloc(1, sizeof *s);
    s->root = di_strdup(root);
    s->lay = *lay;
    size_t *segs = di_malloc(2 * (size_t)lay->n_layers * sizeof *segs);
    memcpy(segs, lay->layer_off, (size_t)lay->n_layers * sizeof *segs);
    memcpy(segs + lay->n_layers, lay->layer_bytes, (size_t)lay->n_layers * sizeof *segs);
    s->lay.layer_off = segs;
    s->lay.layer_bytes = segs + lay->n_layers;
    s->o = o;
    s->min_ttl = -1;
    for (int c = 0; c < KVS_N_CLASS; c++)
        if (o.ttl_s[c] >= 0 && (s->min_ttl < 0 || o.ttl_s[c] < s->min_ttl)) s->min_ttl = o.ttl_s[c];
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wcond, NULL);
    pthread_cond_init(&s->widle, NULL);
    pthread_cond_init(&s->fcond, NULL);
    s->ix = kvs_index_create();
    s->wq = di_calloc((size_t)o.write_queue, sizeof *s->wq);
    s->bufs = di_malloc((size_t)o.host_blocks * sizeof *s->bufs);
    for (; s->n_bufs < o.host_blocks; s->n_bufs++) { /* faulted in now, not on a hit */
        s->bufs[s->n_bufs] = alloc_buf(s);
        memset(s->bufs[s->n_bufs], 0, kvs_file_cap(lay));
    }

    kvs_scan(s->root, scan_into, s->ix);
    s->last_scan = kvs_wall();
    kvs_sweep(s);

    s->writers = di_calloc((size_t)o.write_threads, sizeof *s->writers);
    for (int i = 0; i < o.write_threads; i++) pthread_create(&s->writers[i], NULL, writer_main, s);
    s->n_fth = o.fetch_threads;
    s->fth = di_calloc((size_t)s->n_fth, sizeof *s->fth);
    for (int i = 0; i < s->n_fth; i++) pthread_create(&s->fth[i], NULL, kvs_fetch_main, s);
    return s;
}

void kvs_flush(kvs *s) {
    pthread_mutex_lock(&s->mu);
    while (s->wq_n || s->n_writing) pthread_cond_wait(&s->widle, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void kvs_close(kvs *s) {
    if (!s) return;
    kvs_flush(s);
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->wcond);
    pthread_cond_broadcast(&s->fcond);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->o.write_threads; i++) pthread_join(s->writers[i], NULL);
    free(s->writers);
    for (int i = 0; i < s->n_fth; i++) pthread_join(s->fth[i], NULL);
    free(s->fth);
    free(s->fq);
    for (int i = 0; i < s->wq_n; i++) free(s->wq[(s->wq_head + i) % s->o.write_queue].file);
    free(s->wq);
    for (int i = 0; i < s->n_bufs; i++) free(s->bufs[i]);
    free(s->bufs);
    kvs_index_free(s->ix);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wcond);
    pthread_cond_destroy(&s->widle);
    pthread_cond_destroy(&s->fcond);
    free((void *)s->lay.layer_off);
    free(s->root);
    free(s);
}

const char *kvs_dir(const kvs *s) {
    return s->root;
}

kvs_stats kvs_get_stats(kvs *s) {
    pthread_mutex_lock(&s->mu);
    kvs_stats st = s->st;
    st.index_blocks = kvs_index_count(s->ix);
    st.index_bytes = (long long)kvs_index_bytes(s->ix);
    pthread_mutex_unlock(&s->mu);
    return st;
}

int kvs_match(kvs *s, const uint64_t *keys, int n_keys, int n_tokens) {
    double now = kvs_wall();
    pthread_mutex_lock(&s->mu);
    int i = 0;
    for (; i < n_keys; i++) {
        kvs_ientry *e = kvs_index_find(s->ix, keys[i]);
        if (e) {
            if (kvs_index_expired(e, now, s->o.ttl_s)) break;
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        uint64_t bytes;
        double mtime;
        bool found = kvs_file_stat(s->root, keys[i], &bytes, &mtime);
        pthread_mutex_lock(&s->mu);
        if (!found || bytes != kvs_file_bytes(&s->lay)) break;
        if (!kvs_index_find(s->ix, keys[i]))
            kvs_index_set(s->ix, keys[i], bytes, mtime, KVS_CLASS_UNKNOWN);
    }
    long long hit = (long long)i * KVS_BLOCK_TOKENS;
    s->st.match_calls++;
    s->st.match_tokens += n_tokens;
    s->st.hit_tokens += hit < n_tokens ? hit : n_tokens;
    pthread_mutex_unlock(&s->mu);
    return i;
}

int kvs_put(kvs *s, uint64_t key, uint64_t parent, const int32_t *tokens, const void *payload,
            kvs_class cls) {
    pthread_mutex_lock(&s->mu);
    kvs_ientry *e = kvs_index_find(s->ix, key);
    bool present = e && !kvs_index_expired(e, kvs_wall(), s->o.ttl_s); /* expired: rewrite */
    if (present) s->st.puts_skipped++;
    pthread_mutex_unlock(&s->mu);
    if (present) return 1;
    pthread_mutex_lock(&s->mu);
    bool full = s->wq_n == s->o.write_queue;
    if (full) s->st.puts_dropped++;
    pthread_mutex_unlock(&s->mu);
    if (full) return -1;
    void *copy = kvs_buf_get(s);
    memcpy((char *)copy + KVS_TOK_OFF, tokens, KVS_BLOCK_TOKENS * sizeof *tokens);
    memcpy((char *)copy + KVS_PAYLOAD_OFF, payload, s->lay.block_bytes);
    pthread_mutex_lock(&s->mu);
    if (s->wq_n == s->o.write_queue) { /* filled meanwhile by another thread */
        s->st.puts_dropped++;
        pthread_mutex_unlock(&s->mu);
        kvs_buf_put(s, copy);
        return -1;
    }
    kvs_wjob *j = &s->wq[(s->wq_head + s->wq_n) % s->o.write_queue];
    j->key = key;
    j->parent = parent;
    j->cls = cls;
    j->file = copy;
    s->wq_n++;
    pthread_cond_signal(&s->wcond);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void kvs_note_read(kvs *s, uint64_t key, kvs_read_status rs, int cls, double seconds) {
    if (rs == KVS_READ_OK) {
        s->st.blocks_read++;
        s->st.bytes_read += (long long)kvs_file_bytes(&s->lay);
        kvs_index_set(s->ix, key, kvs_file_bytes(&s->lay), kvs_wall(), cls);
        double us = seconds * 1e6;
        int b = 0;
        while (b < KVS_LAT_BUCKETS - 1 && us >= (double)(2ull << b)) b++;
        s->st.fetch_lat_us[b]++;
        return;
    }
    s->st.read_misses++;
    if (rs != KVS_READ_TOKENS && rs != KVS_READ_IO) kvs_index_remove(s->ix, key);
    if (rs != KVS_READ_MISSING)
        di_log(DI_LOG_WARN, "KV store %s: block %016" PRIx64 " is a miss: %s", s->root, key,
               kvs_read_status_name(rs));
}

void *kvs_buf_get(kvs *s) {
    pthread_mutex_lock(&s->mu);
    void *b = s->n_bufs ? s->bufs[--s->n_bufs] : NULL;
    pthread_mutex_unlock(&s->mu);
    return b ? b : alloc_buf(s);
}

void kvs_buf_put(kvs *s, void *buf) {
    pthread_mutex_lock(&s->mu);
    if (s->n_bufs < s->o.host_blocks) {
        s->bufs[s->n_bufs++] = buf;
        buf = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    free(buf);
}
