/* test_engine_sampling.c — logits processors, sampler filters, seeded
 * determinism, logprobs, and stop conditions (token ids and stop strings
 * across token boundaries). */
#include <math.h>
#include <string.h>

#include <stdlib.h>

#include "engine/sampler.h"
#include "engine/sampling.h"
#include "engine/stop.h"
#include "harness.h"

enum { V = 8 };
static const float L0[V] = {1.0f, 3.0f, 2.5f, -1.0f, 0.5f, 2.9f, 0.0f, -2.0f}; /* argmax 1 */

static int draw(samp_ctx *c, const samp_params *p, uint64_t *rng, const int *toks, int np, int nt) {
    samp_out o;
    samp_next(c, p, rng, L0, toks, np, nt, NULL, NULL, &o);
    return o.token;
}

TEST(engine_sampling_greedy_and_filters) {
    samp_ctx *c = samp_ctx_new(V);
    uint64_t rng = samp_rng_init(1, 0);
    int none[1] = {0};
    CHECK(draw(c, &(samp_params){0}, &rng, none, 0, 0) == 1);
    /* Filters that leave only the top token make any temperature greedy. */
    for (int i = 0; i < 50; i++) {
        CHECK(draw(c, &(samp_params){.temperature = 5, .top_k = 1}, &rng, none, 0, 0) == 1);
        CHECK(draw(c, &(samp_params){.temperature = 5, .min_p = 1}, &rng, none, 0, 0) == 1);
        CHECK(draw(c, &(samp_params){.temperature = 0.5f, .top_p = 0.01f}, &rng, none, 0, 0) == 1);
    }
    /* top_k = 3 never leaves {1, 5, 2}. */
    for (int i = 0; i < 200; i++) {
        int t = draw(c, &(samp_params){.temperature = 10, .top_k = 3}, &rng, none, 0, 0);
        CHECK(t == 1 || t == 5 || t == 2);
    }
    samp_ctx_free(c);
}

TEST(engine_sampling_distribution_and_seed) {
    samp_ctx *c = samp_ctx_new(2);
    float lg[2] = {0.0f, logf(3.0f)}; /* p = 0.25, 0.75 */
    uint64_t rng = samp_rng_init(7, 0);
    samp_params p = {.temperature = 1, .seed = 7};
    int ones = 0, N = 8000;
    samp_out o;
    int t[1] = {0};
    for (int i = 0; i < N; i++) {
        samp_next(c, &p, &rng, lg, t, 0, 0, NULL, NULL, &o);
        ones += o.token;
    }
    double f = (double)ones / N;
    CHECKF(fabs(f - 0.75) < 0.025, "frequency %f", f);
    /* Same seed and branch: same draws; another branch: a different stream. */
    uint64_t a = samp_rng_init(99, 0), b = samp_rng_init(99, 0), d = samp_rng_init(99, 1);
    int same = 1, diff = 0;
    for (int i = 0; i < 64; i++) {
        samp_out x, y, z;
        samp_next(c, &p, &a, lg, t, 0, 0, NULL, NULL, &x);
        samp_next(c, &p, &b, lg, t, 0, 0, NULL, NULL, &y);
        samp_next(c, &p, &d, lg, t, 0, 0, NULL, NULL, &z);
        same &= x.token == y.token;
        diff += x.token != z.token;
    }
    CHECK(same && diff > 0);
    samp_ctx_free(c);
}

TEST(engine_sampling_bias_and_penalties) {
    samp_ctx *c = samp_ctx_new(V);
    uint64_t rng = 0;
    int none[1] = {0};
    samp_bias ban = {1, -100}, force = {7, 100};
    CHECK(draw(c, &(samp_params){.bias = &ban, .n_bias = 1}, &rng, none, 0, 0) == 5);
    CHECK(draw(c, &(samp_params){.bias = &force, .n_bias = 1}, &rng, none, 0, 0) == 7);
    /* Repetition penalty covers prompt and output: 3.0/2 = 1.5 < 2.9. */
    int prompt_has_1[2] = {1, 4};
    CHECK(draw(c, &(samp_params){.repetition_penalty = 2}, &rng, prompt_has_1, 2, 2) == 5);
    /* Presence/frequency cover only the output: token 1 in the prompt is kept. */
    CHECK(draw(c, &(samp_params){.presence_penalty = 1}, &rng, prompt_has_1, 2, 2) == 1);
    int out_has_1[3] = {4, 1, 1}; /* prompt {4}, output {1, 1} */
    /* frequency 0.1 * 2 = 0.2: 2.8 < 2.9 → token 5. */
    CHECK(draw(c, &(samp_params){.frequency_penalty = 0.1f}, &rng, out_has_1, 1, 3) == 5);
    /* presence 0.05 alone: 2.95 > 2.9 → still 1. */
    CHECK(draw(c, &(samp_params){.presence_penalty = 0.05f}, &rng, out_has_1, 1, 3) == 1);
    /* The scratch counts are clean afterwards: no penalty leaks into the next call. */
    CHECK(draw(c, &(samp_params){0}, &rng, out_has_1, 1, 3) == 1);
    samp_ctx_free(c);
}

/* vLLM's allowed_token_ids and bad_words (L0's order: 1, 5, 2, 0, 4, 6, 3, 7). */
TEST(engine_sampling_allowed_ids_and_bad_words) {
    samp_ctx *c = samp_ctx_new(V);
    uint64_t rng = samp_rng_init(3, 0);
    int none[1] = {0};
    int allowed[3] = {6, 3, 6}; /* 0.0 > -1.0; a repeat changes nothing */
    CHECK(draw(c, &(samp_params){.allowed = allowed, .n_allowed = 3}, &rng, none, 0, 0) == 6);
    for (int i = 0; i < 200; i++) {
        int t = draw(c, &(samp_params){.temperature = 20, .allowed = allowed, .n_allowed = 3}, &rng,
                     none, 0, 0);
        CHECK(t == 6 || t == 3);
    }
    /* a bias on a token not allowed does not bring it back */
    samp_bias force = {1, 100};
    CHECK(draw(c, &(samp_params){.bias = &force, .n_bias = 1, .allowed = allowed, .n_allowed = 2},
               &rng, none, 0, 0) == 6);
    /* bad words: {1} always, {4, 5} after a 4, {2, 4, 2} after 2 4 */
    int bad[] = {1, 1, 2, 4, 5, 3, 2, 4, 2};
    samp_params p = {.bad = bad, .n_bad = 9};
    int gen[4] = {0, 3, 2, 4};                /* prompt {0}, generated {3, 2, 4} */
    CHECK(draw(c, &p, &rng, gen, 1, 2) == 5); /* generated {3}: only {1} banned */
    CHECK(draw(c, &p, &rng, gen, 1, 4) == 0); /* ... {3, 2, 4}: 1, 5 and 2 banned */
    int prompt_4[2] = {4, 3};                 /* a 4 in the prompt is not generated */
    CHECK(draw(c, &p, &rng, prompt_4, 2, 2) == 5);
    CHECK(draw(c, &p, &rng, (int[]){4}, 0, 1) == 2); /* generated {4}: 1 and 5 banned */
    di_err err;
    CHECK(samp_params_check(&p, V, &err) == 0);
    int bad_len[] = {3, 1, 2};
    CHECK(samp_params_check(&(samp_params){.bad = bad_len, .n_bad = 3}, V, &err) &&
          strstr(err.msg, "malformed"));
    int outside[] = {9};
    CHECK(samp_params_check(&(samp_params){.allowed = outside, .n_allowed = 1}, V, &err) &&
          strstr(err.msg, "allowed token 9 outside"));
    samp_ctx_free(c);
}

TEST(engine_sampling_logprobs) {
    samp_ctx *c = samp_ctx_new(V);
    uint64_t rng = 0;
    int none[1] = {0};
    samp_out o;
    samp_next(c, &(samp_params){.logprobs = true, .top_logprobs = 5}, &rng, L0, none, 0, 0, NULL,
              NULL, &o);
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(L0[i]);
    CHECK(o.token == 1 && fabs(o.logprob - (3.0 - log(z))) < 1e-5);
    CHECK(o.n_top == 5 && o.top[0].id == 1 && o.top[1].id == 5 && o.top[2].id == 2);
    CHECK(o.top[3].id == 0 && o.top[4].id == 4);
    for (int i = 0; i < 5; i++) CHECK(fabs(o.top[i].logprob - (L0[o.top[i].id] - log(z))) < 1e-5);
    /* Logprobs are of the raw logits, whatever the processors did. */
    samp_bias force = {7, 100};
    samp_next(c, &(samp_params){.logprobs = true, .bias = &force, .n_bias = 1}, &rng, L0, none, 0,
              0, NULL, NULL, &o);
    CHECK(o.token == 7 && fabs(o.logprob - (-2.0 - log(z))) < 1e-5 && o.n_top == 0);
    di_err err;
    CHECK(samp_params_check(&(samp_params){.top_logprobs = 21}, V, &err) == -1);
    CHECK(samp_params_check(&(samp_params){.top_p = 1.5f}, V, &err) == -1);
    samp_bias bad = {V, 1};
    CHECK(samp_params_check(&(samp_params){.bias = &bad, .n_bias = 1}, V, &err) == -1);
    CHECK(strstr(err.msg, "logit_bias"));
    samp_ctx_free(c);
}

/* --- stop conditions ------------------------------------------------------ */
static stop_reason feed(stop_state *st, const stop_params *p, const char *s, char *acc) {
    const char *t;
    size_t n;
    stop_reason r = stop_feed(st, p, s, strlen(s), &t, &n);
    strncat(acc, t, n);
    return r;
}

TEST(engine_stop_strings_across_tokens) {
    const char *strs[2] = {"o w", "xyz"};
    stop_params p = {.strs = strs, .n_strs = 2};
    stop_state st = {0};
    char acc[128] = "";
    CHECK(feed(&st, &p, "he", acc) == STOP_NONE && !strcmp(acc, "he"));
    CHECK(feed(&st, &p, "llo", acc) == STOP_NONE && !strcmp(acc, "hell")); /* "o" held */
    CHECK(feed(&st, &p, " ", acc) == STOP_NONE && !strcmp(acc, "hell"));   /* "o " held */
    CHECK(feed(&st, &p, "wor", acc) == STOP_STRING && !strcmp(acc, "hell"));
    stop_state_free(&st);

    /* A held prefix that does not complete is released later, in order. */
    acc[0] = 0;
    CHECK(feed(&st, &p, "ax", acc) == STOP_NONE && !strcmp(acc, "a"));
    CHECK(feed(&st, &p, "y", acc) == STOP_NONE && !strcmp(acc, "a"));
    CHECK(feed(&st, &p, "q", acc) == STOP_NONE && !strcmp(acc, "axyq"));
    CHECK(feed(&st, &p, "x", acc) == STOP_NONE);
    const char *t;
    size_t n;
    stop_flush(&st, &t, &n);
    strncat(acc, t, n);
    CHECK(!strcmp(acc, "axyqx"));
    /* A match inside one piece keeps the text before it. */
    acc[0] = 0;
    CHECK(feed(&st, &p, "abxyzcd", acc) == STOP_STRING && !strcmp(acc, "ab"));
    stop_state_free(&st);

    /* Token-level: stop ids always, EOS unless ignore_eos. */
    int ids[1] = {42}, eos[2] = {2, 3};
    stop_params q = {.ids = ids, .n_ids = 1};
    CHECK(stop_check_token(&q, eos, 2, 42) == STOP_EOS);
    CHECK(stop_check_token(&q, eos, 2, 3) == STOP_EOS);
    CHECK(stop_check_token(&q, eos, 2, 5) == STOP_NONE);
    q.ignore_eos = true;
    CHECK(stop_check_token(&q, eos, 2, 3) == STOP_NONE &&
          stop_check_token(&q, eos, 2, 42) == STOP_EOS);
    char msg[128];
    const char *empty[1] = {""};
    CHECK(stop_params_check(&(stop_params){.strs = empty, .n_strs = 1}, msg, sizeof msg) == -1);
}

/* --- the bucketed candidate cut equals a full sort ------------------------ */
/* sampler_argmax against the plain loop: the first index of the largest
 * value, at every length around its 16-lane blocks and at a vocabulary's,
 * with ties (few distinct values), NaNs (never chosen) and nothing but -inf. */
static int naive_argmax(const float *x, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > x[best])) best = i;
    return best < 0 ? 0 : best;
}

TEST(engine_sampler_argmax_first_of_the_largest) {
    enum { N = 128256 };
    float *x = malloc(sizeof(float) * N);
    uint64_t s = 12345;
    int bad = 0;
    for (int trial = 0; trial < 400 && !bad; trial++) {
        int n = trial < 100   ? 1 + trial
                : trial < 399 ? 1 + (int)(samp_rng_init(trial, 0) % 5000)
                              : N;
        int levels = trial % 3 ? 1 << 20 : 4; /* every third: ties everywhere */
        for (int i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((s >> 33) % (uint64_t)levels) - 2.0f;
            if (trial % 5 == 0 && (s >> 20) % 17 == 0) x[i] = NAN;
        }
        if (sampler_argmax(x, n) != naive_argmax(x, n)) bad = 1 + trial;
    }
    for (int i = 0; i < 40; i++) x[i] = -INFINITY;
    x[7] = NAN;
    if (sampler_argmax(x, 40) != 0) bad = -1;
    x[0] = NAN;
    if (sampler_argmax(x, 40) != 1) bad = -2;
    free(x);
    CHECKF(!bad, "argmax differs from the plain loop (case %d)", bad);
}

static const float *ref_prob;
static int ref_cmp(const void *a, const void *b) {
    int ia = *(const int *)a, ib = *(const int *)b;
    if (ref_prob[ia] != ref_prob[ib]) return ref_prob[ia] > ref_prob[ib] ? -1 : 1;
    return ia - ib;
}

/* The sampler's algorithm with a full sort of every candidate. */
static int ref_draw(const sampler_params *p, uint64_t *rng, const float *lg, int n, int *idx,
                    float *prob) {
    int top = sampler_argmax(lg, n);
    sampler_softmax(prob, lg, n, top, p->temperature);
    int m = 0;
    float floor_p = p->min_p > 0 ? p->min_p * prob[top] : 0.0f;
    for (int i = 0; i < n; i++)
        if (prob[i] > 0 && prob[i] >= floor_p) idx[m++] = i;
    ref_prob = prob;
    qsort(idx, (size_t)m, sizeof(int), ref_cmp);
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
    uint64_t z = (*rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    double r = (double)(z >> 11) * 0x1.0p-53 * total, acc = 0;
    for (int i = 0; i < m; i++) {
        acc += prob[idx[i]];
        if (r < acc) return idx[i];
    }
    return idx[m - 1];
}

TEST(engine_sampler_cut_equals_full_sort) {
    enum { N = 3000 };
    static float lg[N], prob[N];
    static int idx[N];
    uint64_t s = 1;
    for (int trial = 0; trial < 80; trial++) {
        for (int i = 0; i < N; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            lg[i] = (float)((s >> 40) % 20000) / 1000.0f * (trial % 3 ? 1.0f : 0.2f);
        }
        sampler_params p = {.temperature = 0.3f + (float)(trial % 7) * 0.3f,
                            .top_k = trial % 4 == 0 ? 0 : 1 + trial % 50,
                            .top_p = trial % 5 == 0 ? 1.0f : 0.5f + (float)(trial % 9) * 0.05f,
                            .min_p = trial % 6 == 0 ? 0.01f : 0};
        if (p.top_k == 0 && p.top_p >= 1 && p.min_p == 0) p.top_k = 5;
        uint64_t r1 = (uint64_t)trial * 77, r2 = r1;
        for (int k = 0; k < 5; k++) {
            int a = sampler_draw(&p, &r1, lg, N, idx, prob);
            int b = ref_draw(&p, &r2, lg, N, idx, prob);
            CHECKF(a == b, "trial %d draw %d: %d vs full sort %d", trial, k, a, b);
        }
    }
}
