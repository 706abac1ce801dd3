/* fetch.c — the fetch stage: fetch threads read block files into host
 * memory off the request's critical path. kvs_fetch_start queues every block
 * of a hit at once, so the threads read ahead of the consumer (swap-in
 * copies block 0 while later blocks are still being read); each block
 * settles as intact (1) or miss (-1) and wakes whoever waits for it.
 *
 * The job queue, the per-block states and the counters live under the
 * store's mutex; the reads themselves run unlocked straight into staging
 * buffers taken from the store's pool (already faulted in, reused).
 *
 * Cancellation never waits for I/O (a request cancelled while its blocks
 * are read from a slow mount must not stall the engine): kvs_fetch_cancel
 * takes the fetch's jobs out of the queue and settles them as misses at
 * once, and wakes its waiters; a fetch freed while some of its reads are
 * still in progress is orphaned, and the fetch thread that settles its last
 * read frees it. */
#include <stdlib.h>
#include <string.h>

#include "kvstore/kvs_internal.h"

struct kvs_fetch {
    kvs *s;
    int n;
    uint64_t *keys;
    int32_t *tokens;    /* n * 128, or NULL */
    void **buf;         /* n staging buffers from the store's pool */
    signed char *state; /* 0 pending, 1 intact, -1 miss */
    int pending;        /* blocks not settled yet */
    bool cancelled;
    bool orphan; /* freed by its owner: the last read in progress frees it */
    pthread_cond_t cond;
};

kvs_fetch *kvs_fetch_start(kvs *s, const uint64_t *keys, const int32_t *tokens, int n) {
    if (n < 0) n = 0;
    kvs_fetch *f = di_calloc(1, sizeof *f);
    f->s = s;
    f->n = n;
    size_t m = n ? (size_t)n : 1;
    f->keys = di_malloc(m * sizeof *f->keys);
    memcpy(f->keys, keys, (size_t)n * sizeof *f->keys);
    if (tokens) {
        f->tokens = di_malloc(m * KVS_BLOCK_TOKENS * sizeof *f->tokens);
        memcpy(f->tokens, tokens, (size_t)n * KVS_BLOCK_TOKENS * sizeof *f->tokens);
    }
    f->buf = di_malloc(m * sizeof *f->buf);
    for (int i = 0; i < n; i++) f->buf[i] = kvs_buf_get(s);
    f->state = di_calloc(m, 1);
    pthread_cond_init(&f->cond, NULL);
    pthread_mutex_lock(&s->mu);
    if (s->fq_n + n > s->fq_cap) {
        /* Grow the ring, unrolling it so the head is at 0. */
        int cap = s->fq_cap ? s->fq_cap : 64;
        while (cap < s->fq_n + n) cap *= 2;
        kvs_fjob *q = di_malloc((size_t)cap * sizeof *q);
        for (int i = 0; i < s->fq_n; i++) q[i] = s->fq[(s->fq_head + i) % s->fq_cap];
        free(s->fq);
        s->fq = q;
        s->fq_cap = cap;
        s->fq_head = 0;
    }
    for (int i = 0; i < n; i++)
        s->fq[(s->fq_head + s->fq_n++) % s->fq_cap] = (kvs_fjob){.f = f, .i = i};
    f->pending = n;
    pthread_cond_broadcast(&s->fcond);
    pthread_mutex_unlock(&s->mu);
    return f;
}

/* Frees f; s->mu held (its staging buffers go back to the store's pool). */
static void fetch_destroy_locked(kvs_fetch *f) {
    kvs *s = f->s;
    for (int i = 0; i < f->n; i++) {
        if (s->n_bufs < s->o.host_blocks)
            s->bufs[s->n_bufs++] = f->buf[i];
        else
            free(f->buf[i]);
    }
    pthread_cond_destroy(&f->cond);
    free(f->keys);
    free(f->tokens);
    free(f->buf);
    free(f->state);
    free(f);
}

/* s->mu held. Returns true when f was an orphan and is now freed. */
static bool settle(kvs_fetch *f, int i, int state) {
    f->state[i] = (signed char)state;
    f->pending--;
    if (f->orphan && !f->pending) {
        fetch_destroy_locked(f);
        return true;
    }
    pthread_cond_broadcast(&f->cond);
    return false;
}

void *kvs_fetch_main(void *arg) {
    kvs *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && !s->fq_n) pthread_cond_wait(&s->fcond, &s->mu);
        if (!s->fq_n) break; /* stopping with nothing queued */
        kvs_fjob j = s->fq[s->fq_head];
        s->fq_head = (s->fq_head + 1) % s->fq_cap;
        s->fq_n--;
        kvs_fetch *f = j.f;
        if (f->cancelled) {
            settle(f, j.i, -1);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        double t0 = di_now();
        if (s->o.read_hook) s->o.read_hook(s->o.read_hook_ctx, f->keys[j.i]);
        int cls = KVS_CLASS_UNKNOWN;
        kvs_read_status rs =
            kvs_file_read(s->root, &s->lay, f->keys[j.i],
                          f->tokens ? f->tokens + (size_t)j.i * KVS_BLOCK_TOKENS : NULL,
                          f->buf[j.i], !s->o.buffered_io, &cls, s->o.touch_s);
        double dt = di_now() - t0;
        pthread_mutex_lock(&s->mu);
        kvs_note_read(s, f->keys[j.i], rs, cls, dt);
        settle(f, j.i, rs == KVS_READ_OK ? 1 : -1);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int kvs_fetch_poll(kvs_fetch *f, int i, const void **payload) {
    if (i < 0 || i >= f->n) return -1;
    pthread_mutex_lock(&f->s->mu);
    int st = f->state[i];
    pthread_mutex_unlock(&f->s->mu);
    if (st > 0 && payload) *payload = (const char *)f->buf[i] + KVS_PAYLOAD_OFF;
    return st;
}

int kvs_fetch_wait(kvs_fetch *f, int i, const void **payload) {
    if (i < 0 || i >= f->n) return -1;
    pthread_mutex_lock(&f->s->mu);
    while (!f->state[i] && !f->cancelled) pthread_cond_wait(&f->cond, &f->s->mu);
    int st = f->state[i];
    pthread_mutex_unlock(&f->s->mu);
    if (st > 0 && payload) *payload = (const char *)f->buf[i] + KVS_PAYLOAD_OFF;
    return st > 0 ? 0 : -1;
}

int kvs_fetch_wait_all(kvs_fetch *f) {
    pthread_mutex_lock(&f->s->mu);
    while (f->pending && !f->cancelled) pthread_cond_wait(&f->cond, &f->s->mu);
    int ok = 0;
    while (ok < f->n && f->state[ok] > 0) ok++;
    pthread_mutex_unlock(&f->s->mu);
    return ok;
}

/* s->mu held. */
static void cancel_locked(kvs_fetch *f) {
    kvs *s = f->s;
    if (f->cancelled) return;
    f->cancelled = true;
    int kept = 0;
    for (int k = 0; k < s->fq_n; k++) {
        kvs_fjob j = s->fq[(s->fq_head + k) % s->fq_cap];
        if (j.f == f)
            settle(f, j.i, -1); /* not an orphan yet: never frees here */
        else
            s->fq[(s->fq_head + kept++) % s->fq_cap] = j;
    }
    s->fq_n = kept;
    pthread_cond_broadcast(&f->cond);
}

void kvs_fetch_cancel(kvs_fetch *f) {
    if (!f) return;
    pthread_mutex_lock(&f->s->mu);
    cancel_locked(f);
    pthread_mutex_unlock(&f->s->mu);
}

void kvs_fetch_free(kvs_fetch *f) {
    if (!f) return;
    kvs *s = f->s;
    pthread_mutex_lock(&s->mu);
    cancel_locked(f);
    if (f->pending)
        f->orphan = true; /* reads in progress: the last one frees it */
    else
        fetch_destroy_locked(f);
    pthread_mutex_unlock(&s->mu);
}

/* swapin.c reads a fetch's geometry through these. */
const kvs_layout *kvs_fetch_layout(const kvs_fetch *f) {
    return &f->s->lay;
}

int kvs_fetch_count(const kvs_fetch *f) {
    return f->n;
}
