/* sampler.h — turns a logits row into the next token id.
 *
 * Greedy when temperature == 0; otherwise temperature, then top-k, top-p and
 * min-p filtering, then a draw from a per-request seeded generator, so the
 * same seed and logits give the same token on every machine. */
#ifndef DI_SAMPLER_H
#define DI_SAMPLER_H

#include <stdint.h>

typedef struct sampler_params {
    float temperature; /* 0: greedy */
    int top_k;         /* 0: off */
    float top_p;       /* 1: off */
    float min_p;       /* 0: off */
    uint64_t seed;
} sampler_params;

typedef struct sampler {
    sampler_params p;
    uint64_t rng; /* splitmix64 state */
    int vocab;
    int *idx;    /* scratch: candidate ids */
    float *prob; /* scratch: candidate probabilities */
} sampler;

void sampler_init(sampler *s, const sampler_params *p, int vocab);
void sampler_free(sampler *s);
/* Index of the largest logit (lowest index on ties). */
int sampler_argmax(const float *logits, int n);
/* Samples from logits (not modified). */
int sampler_sample(sampler *s, const float *logits);
/* Uniform double in [0, 1) from the sampler's generator. */
double sampler_uniform(sampler *s);

/* prob = softmax(logits / temperature) over n entries (temperature > 0),
 * computed around the largest logit, logits[top]: the distribution every
 * sampled draw starts from. */
void sampler_softmax(float *prob, const float *logits, int n, int top, float temperature);

/* The same draw without a sampler object, for callers that keep many
 * generators and share scratch: *rng is the splitmix64 state (advanced),
 * idx and prob are n-entry scratch arrays. logits are not modified. */
int sampler_draw(const sampler_params *p, uint64_t *rng, const float *logits, int n, int *idx,
                 float *prob);
/* A generator state for seed (what sampler_init uses). */
uint64_t sampler_seed_state(uint64_t seed);

#endif
