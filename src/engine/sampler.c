/* sampler.c — greedy and filtered random sampling over one logits row.
 * The filters run on a candidate list sorted by logit, so top-k, top-p and
 * min-p compose in the usual order (temperature first). The generator is
 * splitmix64: tiny, seedable, and identical on every platform. */
#include "engine/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"

uint64_t sampler_seed_state(uint64_t seed) {
    return seed ^ 0x9E3779B97F4A7C15ull;
}

void sampler_init(sampler *s, const sampler_params *p, int vocab) {
    s->p = *p;
    s->rng = sampler_seed_state(p->seed);
    s->vocab = vocab;
    s->idx = di_malloc(sizeof(int) * (size_t)vocab);
    s->prob = di_malloc(sizeof(float) * (size_t)vocab);
}

void sampler_free(sampler *s) {
    free(s->idx);
    free(s->prob);
    s->idx = NULL;
    s->prob = NULL;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *rng) {
    return (double)(splitmix64(rng) >> 11) * 0x1.0p-53;
}

double sampler_uniform(sampler *s) {
    return uniform(&s->rng);
}

/* The first index of the largest value (NaNs never win; 0 when nothing
 * compares): kern_argmax, the maximum first in vector lanes (no chain
 * through the index of the best so far, which ran at 4 ns a value), then
 * the first place it occurs. */
int sampler_argmax(const float *logits, int n) {
    return kern_argmax(logits, n);
}

/* Sort candidates by probability, descending; ties by id for determinism. */
static int by_prob_desc(const void *a, const void *b, void *key) {
    const float *prob = key;
    int ia = *(const int *)a, ib = *(const int *)b;
    if (prob[ia] != prob[ib]) return prob[ia] > prob[ib] ? -1 : 1;
    return ia - ib;
}

/* Probabilities fall into power-of-two buckets: bucket b holds (2^-(b+1), 2^-b].
 * The sorted candidate list only needs a prefix that holds the top_k tokens
 * or enough mass for top_p; whole buckets from the top give such a prefix,
 * so a 100k-entry vocabulary sorts a few dozen candidates instead of all of
 * it, with the same result as a full sort. */
enum { N_BUCKETS = 64 };

static int prob_bucket(float p) {
    /* p = f * 2^e with f in [0.5, 1) (frexpf's e, from the exponent bits:
     * e = E - 126 for a normal p; subnormals land in the last bucket) */
    uint32_t u;
    memcpy(&u, &p, sizeof u);
    int b = 126 - (int)(u >> 23 & 0xff);
    return b < 0 ? 0 : b >= N_BUCKETS ? N_BUCKETS - 1 : b;
}

/* Sorts idx[0, m) as by_prob_desc does (probability descending, ids
 * ascending on ties) for probabilities > 0: a stable radix sort on the
 * complemented float bits (positive floats order as their bits), three
 * passes of 11 bits, the ids entering in ascending order. A comparison sort
 * through a callback took 4 ms for a flat 128k-token row. */
static void sort_by_prob_desc(int *idx, int m, const float *prob) {
    enum { BITS = 11, BUCKETS = 1 << BITS };
    if (m < 512) {
        qsort_r(idx, (size_t)m, sizeof(int), by_prob_desc, (void *)prob);
        return;
    }
    uint32_t *keys = di_malloc(sizeof(uint32_t) * 2 * (size_t)m), *key = keys, *key2 = keys + m;
    int *ids = di_malloc(sizeof(int) * (size_t)m), *from = idx, *to = ids;
    size_t count[BUCKETS];
    for (int i = 0; i < m; i++) {
        memcpy(&key[i], &prob[idx[i]], sizeof(uint32_t));
        key[i] = ~key[i];
    }
    for (int shift = 0; shift < 32; shift += BITS) {
        memset(count, 0, sizeof count);
        for (int i = 0; i < m; i++) count[key[i] >> shift & (BUCKETS - 1)]++;
        size_t at = 0;
        for (int b = 0; b < BUCKETS; b++) {
            size_t c = count[b];
            count[b] = at;
            at += c;
        }
        for (int i = 0; i < m; i++) {
            size_t d = count[key[i] >> shift & (BUCKETS - 1)]++;
            key2[d] = key[i];
            to[d] = from[i];
        }
        uint32_t *tk = key;
        key = key2, key2 = tk;
        int *ti = from;
        from = to, to = ti;
    }
    if (from != idx) memcpy(idx, from, sizeof(int) * (size_t)m);
    free(keys);
    free(ids);
}

static int cut_bucket(const sampler_params *p, const float *prob, int n) {
    bool use_k = p->top_k > 0, use_p = p->top_p > 0 && p->top_p < 1;
    if (!use_k && !use_p) return N_BUCKETS - 1;
    int count[N_BUCKETS] = {0};
    double mass[N_BUCKETS] = {0};
    for (int i = 0; i < n; i++) {
        if (prob[i] <= 0) continue;
        int b = prob_bucket(prob[i]);
        count[b]++;
        mass[b] += prob[i];
    }
    int cnt = 0;
    double acc = 0;
    for (int b = 0; b < N_BUCKETS - 1; b++) {
        cnt += count[b];
        acc += mass[b];
        /* Margin: the sorted sum may round differently from this one. */
        if ((use_k && cnt >= p->top_k) || (use_p && acc >= p->top_p + 1e-6)) return b;
    }
    return N_BUCKETS - 1;
}

int sampler_sample(sampler *s, const float *logits) {
    return sampler_draw(&s->p, &s->rng, logits, s->vocab, s->idx, s->prob);
}

void sampler_softmax(float *prob, const float *logits, int n, int top, float temperature) {
    float mx = logits[top];
    for (int i = 0; i < n; i++) prob[i] = (logits[i] - mx) / temperature;
    kern_softmax(prob, n); /* vector exp: a 128k vocabulary in a tenth of the time of expf */
}

int sampler_draw(const sampler_params *p, uint64_t *rng, const float *logits, int n, int *idx,
                 float *prob) {
    if (p->temperature <= 0.0f) return sampler_argmax(logits, n);

    int top = sampler_argmax(logits, n);
    sampler_softmax(prob, logits, n, top, p->temperature);

    /* No filter: draw in id order, no sort needed. */
    if (p->top_k <= 0 && !(p->top_p > 0 && p->top_p < 1) && p->min_p <= 0) {
        double r = uniform(rng), acc = 0;
        int last = top;
        for (int i = 0; i < n; i++) {
            if (prob[i] <= 0) continue;
            acc += prob[i];
            last = i;
            if (r < acc) return i;
        }
        return last;
    }

    /* Candidate list: keep only what the filters can admit before sorting. */
    int m = 0;
    float floor_p = p->min_p > 0 ? p->min_p * prob[top] : 0.0f;
    int cut = cut_bucket(p, prob, n);
    for (int i = 0; i < n; i++)
        if (prob[i] > 0 && prob[i] >= floor_p && prob_bucket(prob[i]) <= cut) idx[m++] = i;
    sort_by_prob_desc(idx, m, prob);
    if (p->top_k > 0 && p->top_k < m) m = p->top_k;
    if (p->top_p > 0 && p->top_p < 1) {
        double acc = 0;
        int keep = 0;
        while (keep < m) {
            acc += prob[idx[keep++]];
            if (acc >= p->top_p) break;
        }
        m = keep;
    }
    double total = 0;
    for (int i = 0; i < m; i++) total += prob[idx[i]];
    double r = uniform(rng) * total, acc = 0;
    for (int i = 0; i < m; i++) {
        acc += prob[idx[i]];
        if (r < acc) return idx[i];
    }
    return idx[m - 1];
}
