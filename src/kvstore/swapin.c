/* swapin.c — the swap-in stage: copies fetched blocks into the engine's
 * paged pool layer by layer, so the forward pass of layer l can start as
 * soon as layer l of every hit block is in place while later layers are
 * still being copied (and, for layer 0, while later blocks are still being
 * read: the copy waits for each block's fetch in order).
 *
 * One helper thread per swap-in: a hit is tens to thousands of blocks, so a
 * thread start (tens of microseconds) is noise next to the copy, and a
 * private thread cannot be starved by another request's swap-in. The first
 * block that arrives as a miss ends the usable prefix: later blocks are not
 * copied, and every layer reports the same count of leading blocks. */
#include <stdlib.h>
#include <string.h>

#include "kvstore/kvs_internal.h"

struct kvs_swapin {
    kvs_fetch *f;
    const kvs_layout *lay;
    int n, n_ok;
    void **dst;
    int layers_done;
    bool joined, stop;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    pthread_t th;
};

static void *swapin_main(void *arg) {
    kvs_swapin *w = arg;
    const kvs_layout *lay = w->lay;
    const void **src = di_calloc(w->n ? (size_t)w->n : 1, sizeof *src);
    int n_ok = w->n;
    for (int l = 0; l < lay->n_layers; l++) {
        for (int i = 0; i < n_ok; i++) {
            if (l == 0 && kvs_fetch_wait(w->f, i, &src[i]) < 0) {
                n_ok = i;
                break;
            }
            memcpy((char *)w->dst[i] + lay->layer_off[l], (const char *)src[i] + lay->layer_off[l],
                   lay->layer_bytes[l]);
        }
        pthread_mutex_lock(&w->mu);
        w->n_ok = n_ok;
        w->layers_done = l + 1;
        bool stop = w->stop;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->mu);
        if (stop) break;
    }
    free(src);
    return NULL;
}

kvs_swapin *kvs_swapin_start(kvs_fetch *f, int n, void *const *dst) {
    kvs_swapin *w = di_calloc(1, sizeof *w);
    w->f = f;
    w->lay = kvs_fetch_layout(f);
    w->n = n < 0 ? 0 : n > kvs_fetch_count(f) ? kvs_fetch_count(f) : n;
    w->dst = di_malloc((w->n ? (size_t)w->n : 1) * sizeof *w->dst);
    memcpy(w->dst, dst, (size_t)w->n * sizeof *w->dst);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cond, NULL);
    pthread_create(&w->th, NULL, swapin_main, w);
    return w;
}

bool kvs_swapin_layer_ready(kvs_swapin *w, int l) {
    pthread_mutex_lock(&w->mu);
    bool ready = w->layers_done > l;
    pthread_mutex_unlock(&w->mu);
    return ready;
}

int kvs_swapin_wait_layer(kvs_swapin *w, int l) {
    if (l >= w->lay->n_layers) l = w->lay->n_layers - 1;
    pthread_mutex_lock(&w->mu);
    while (w->layers_done <= l) pthread_cond_wait(&w->cond, &w->mu);
    int n = w->n_ok;
    pthread_mutex_unlock(&w->mu);
    return n;
}

int kvs_swapin_finish(kvs_swapin *w) {
    if (!w->joined) {
        pthread_join(w->th, NULL);
        w->joined = true;
    }
    return w->n_ok;
}

void kvs_swapin_free(kvs_swapin *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_mutex_unlock(&w->mu);
    kvs_swapin_finish(w);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cond);
    free(w->dst);
    free(w);
}
