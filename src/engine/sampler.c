/* sampler.c — greedy and filtered random sampling over one logits row.
 * The filters run on a candidate list sorted by logit, so top-k, top-p and
 * min-p compose in the usual order (temperature first). The generator is
 * splitmix64: tiny, seedable, and identical on every platform. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "base/base.h"

void sampler_init(sampler *s, const sampler_params *p, int vocab) {
    s->p = *p;
    s->rng = p->seed ^ 0x9E3779B97F4A7C15ull;
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

double sampler_uniform(sampler *s) { return (double)(splitmix64(&s->rng) >> 11) * 0x1.0p-53; }

int sampler_argmax(const float *logits, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* Sort candidates by probability, descending; ties by id for determinism. */
static int by_prob_desc(const void *a, const void *b, void *key) {
    const float *prob = key;
    int ia = *(const int *)a, ib = *(const int *)b;
    if (prob[ia] != prob[ib]) return prob[ia] > prob[ib] ? -1 : 1;
    return ia - ib;
}

int sampler_sample(sampler *s, const float *logits) {
    const sampler_params *p = &s->p;
    int n = s->vocab;
    if (p->temperature <= 0.0f) return sampler_argmax(logits, n);

    /* Softmax with temperature over the whole vocabulary. */
    float mx = logits[sampler_argmax(logits, n)];
    double sum = 0;
    for (int i = 0; i < n; i++) {
        s->prob[i] = expf((logits[i] - mx) / p->temperature);
        sum += s->prob[i];
    }
    for (int i = 0; i < n; i++) s->prob[i] = (float)(s->prob[i] / sum);

    /* Candidate list: keep only what the filters can admit before sorting. */
    int m = 0;
    float floor_p = p->min_p > 0 ? p->min_p * s->prob[sampler_argmax(logits, n)] : 0.0f;
    for (int i = 0; i < n; i++)
        if (s->prob[i] > 0 && s->prob[i] >= floor_p) s->idx[m++] = i;
    qsort_r(s->idx, (size_t)m, sizeof(int), by_prob_desc, s->prob);
    if (p->top_k > 0 && p->top_k < m) m = p->top_k;
    if (p->top_p > 0 && p->top_p < 1) {
        double acc = 0;
        int keep = 0;
        while (keep < m) {
            acc += s->prob[s->idx[keep++]];
            if (acc >= p->top_p) break;
        }
        m = keep;
    }
    double total = 0;
    for (int i = 0; i < m; i++) total += s->prob[s->idx[i]];
    double r = sampler_uniform(s) * total, acc = 0;
    for (int i = 0; i < m; i++) {
        acc += s->prob[s->idx[i]];
        if (r < acc) return s->idx[i];
    }
    return s->idx[m - 1];
}
