/* sampling.c — logits processors and logprobs around sampler.c (contract in
 * sampling.h). Processors work on a copy of the row in the engine's scratch;
 * token counts for the penalties are built per call from the sequence's own
 * tokens and cleared the same way, so no per-sequence vocab-sized state
 * exists and the cost is O(sequence length), not O(vocab), per penalty. */
#include "engine/sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"

struct samp_ctx {
    int vocab;
    float *work, *prob;
    int *idx, *count;
    unsigned char *seen;
};

samp_ctx *samp_ctx_new(int vocab) {
    samp_ctx *c = di_calloc(1, sizeof *c);
    c->vocab = vocab;
    c->work = di_malloc(sizeof(float) * (size_t)vocab);
    c->prob = di_malloc(sizeof(float) * (size_t)vocab);
    c->idx = di_malloc(sizeof(int) * (size_t)vocab);
    c->count = di_calloc((size_t)vocab, sizeof(int));
    c->seen = di_calloc((size_t)vocab, 1);
    return c;
}

void samp_ctx_free(samp_ctx *c) {
    if (!c) return;
    free(c->work);
    free(c->prob);
    free(c->idx);
    free(c->count);
    free(c->seen);
    free(c);
}

int samp_params_check(const samp_params *p, int vocab, di_err *err) {
    if (!(p->temperature >= 0 && p->temperature <= 100))
        return di_errf(err, "sampling: temperature %g out of range [0, 100]", p->temperature);
    if (p->top_k < 0) return di_errf(err, "sampling: top_k %d is negative", p->top_k);
    if (!(p->top_p >= 0 && p->top_p <= 1))
        return di_errf(err, "sampling: top_p %g out of range [0, 1]", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return di_errf(err, "sampling: min_p %g out of range [0, 1]", p->min_p);
    if (!(p->repetition_penalty >= 0 && p->repetition_penalty <= 100))
        return di_errf(err, "sampling: repetition_penalty %g out of range", p->repetition_penalty);
    if (!(fabsf(p->presence_penalty) <= 2) || !(fabsf(p->frequency_penalty) <= 2))
        return di_errf(err, "sampling: presence/frequency penalty out of range [-2, 2]");
    if (p->n_bias < 0 || p->n_bias > SAMP_MAX_BIAS || (p->n_bias > 0 && !p->bias))
        return di_errf(err, "sampling: %d logit bias entries (at most %d)", p->n_bias,
                       SAMP_MAX_BIAS);
    for (int i = 0; i < p->n_bias; i++) {
        if (p->bias[i].id < 0 || p->bias[i].id >= vocab)
            return di_errf(err, "sampling: logit_bias token %d outside the vocabulary (%d)",
                           p->bias[i].id, vocab);
        if (!(fabsf(p->bias[i].bias) <= 100))
            return di_errf(err, "sampling: logit_bias of token %d out of range [-100, 100]",
                           p->bias[i].id);
    }
    if (p->n_allowed < 0 || p->n_allowed > vocab || (p->n_allowed > 0 && !p->allowed))
        return di_errf(err, "sampling: %d allowed token ids (at most the vocabulary, %d)",
                       p->n_allowed, vocab);
    for (int i = 0; i < p->n_allowed; i++)
        if (p->allowed[i] < 0 || p->allowed[i] >= vocab)
            return di_errf(err, "sampling: allowed token %d outside the vocabulary (%d)",
                           p->allowed[i], vocab);
    if (p->n_bad < 0 || p->n_bad > SAMP_MAX_BAD || (p->n_bad > 0 && !p->bad))
        return di_errf(err, "sampling: bad words of %d ints (at most %d)", p->n_bad, SAMP_MAX_BAD);
    for (int i = 0; i < p->n_bad; i += 1 + p->bad[i]) {
        if (p->bad[i] < 1 || p->bad[i] >= p->n_bad - i)
            return di_errf(err, "sampling: a bad word's length %d at %d is malformed", p->bad[i],
                           i);
        for (int k = 1; k <= p->bad[i]; k++)
            if (p->bad[i + k] < 0 || p->bad[i + k] >= vocab)
                return di_errf(err, "sampling: bad word token %d outside the vocabulary (%d)",
                               p->bad[i + k], vocab);
    }
    if (p->min_tokens < 0)
        return di_errf(err, "sampling: min_tokens %d is negative", p->min_tokens);
    if (p->top_logprobs < 0 || p->top_logprobs > SAMP_MAX_TOP)
        return di_errf(err, "sampling: top_logprobs %d out of range [0, %d]", p->top_logprobs,
                       SAMP_MAX_TOP);
    return 0;
}

uint64_t samp_rng_init(uint64_t seed, int branch) {
    return sampler_seed_state(seed + (uint64_t)branch * 0xD1B54A32D192ED03ull);
}

static void apply_penalties(samp_ctx *c, const samp_params *p, float *x, const int *tokens,
                            int n_prompt, int n_tokens) {
    float rep = p->repetition_penalty;
    if (rep > 0 && rep != 1) {
        for (int i = 0; i < n_tokens; i++) {
            int t = tokens[i];
            if (c->seen[t]) continue;
            c->seen[t] = 1;
            x[t] = x[t] > 0 ? x[t] / rep : x[t] * rep;
        }
        for (int i = 0; i < n_tokens; i++) c->seen[tokens[i]] = 0;
    }
    if (p->presence_penalty != 0 || p->frequency_penalty != 0) {
        for (int i = n_prompt; i < n_tokens; i++) c->count[tokens[i]]++;
        for (int i = n_prompt; i < n_tokens; i++) {
            int t = tokens[i];
            if (c->count[t] == 0) continue; /* already applied */
            x[t] -= p->presence_penalty + p->frequency_penalty * (float)c->count[t];
            c->count[t] = 0;
        }
    }
}

/* log-softmax of the raw logits: chosen token, and the top k (id order on ties). */
static void logprobs(samp_ctx *c, const float *logits, int k, samp_out *out) {
    int n = c->vocab;
    float mx = logits[sampler_argmax(logits, n)];
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)(logits[i] - mx));
    float lse = mx + (float)log(sum);
    out->logprob = logits[out->token] - lse;
    /* Top k by insertion into a k-entry list: k <= 20, one pass over the row. */
    int m = 0;
    for (int i = 0; i < n && k > 0; i++) {
        float v = logits[i];
        if (m == k && v <= out->top[m - 1].logprob) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && out->top[j - 1].logprob < v) {
            out->top[j] = out->top[j - 1];
            j--;
        }
        out->top[j] = (samp_logprob){i, v};
    }
    for (int i = 0; i < m; i++) out->top[i].logprob -= lse;
    out->n_top = m;
}

void samp_score(samp_ctx *c, const float *logits, int token, int k, samp_out *out) {
    out->token = token;
    logprobs(c, logits, k, out);
    int above = 0;
    for (int i = 0; i < c->vocab; i++) above += logits[i] > logits[token];
    out->rank = 1 + above;
}

/* Only the allowed ids keep their logits (c->prob holds them meanwhile). */
static void keep_only(samp_ctx *c, float *row, const int *allowed, int n) {
    for (int i = 0; i < n; i++) c->prob[i] = row[allowed[i]];
    for (int i = 0; i < c->vocab; i++) row[i] = -INFINITY;
    for (int i = 0; i < n; i++) row[allowed[i]] = c->prob[i];
}

/* Bans each bad sequence's last id where the generated tokens (gen, n)
 * end with the ids before it. */
static void ban_bad(float *row, const int *bad, int n_bad, const int *gen, int n) {
    for (int i = 0; i < n_bad; i += 1 + bad[i]) {
        int len = bad[i], before = len - 1;
        if (before > n) continue;
        bool match = true;
        for (int k = 0; k < before && match; k++) match = gen[n - before + k] == bad[i + 1 + k];
        if (match) row[bad[i + len]] = -INFINITY;
    }
}

void samp_next(samp_ctx *c, const samp_params *p, uint64_t *rng, const float *logits,
               const int *tokens, int n_prompt, int n_tokens, const jg_vocab *jv,
               const jg_state *js, samp_out *out) {
    const float *row = logits;
    bool penal = (p->repetition_penalty > 0 && p->repetition_penalty != 1) ||
                 p->presence_penalty != 0 || p->frequency_penalty != 0;
    bool hold = !js && n_tokens - n_prompt < p->min_tokens && p->n_ends > 0;
    if (penal || p->n_bias > 0 || p->n_allowed > 0 || p->n_bad > 0 || js || hold) {
        memcpy(c->work, logits, sizeof(float) * (size_t)c->vocab);
        if (penal) apply_penalties(c, p, c->work, tokens, n_prompt, n_tokens);
        for (int i = 0; i < p->n_bias; i++) c->work[p->bias[i].id] += p->bias[i].bias;
        if (p->n_allowed > 0) keep_only(c, c->work, p->allowed, p->n_allowed);
        if (p->n_bad > 0)
            ban_bad(c->work, p->bad, p->n_bad, tokens + n_prompt, n_tokens - n_prompt);
        for (int i = 0; hold && i < p->n_ends; i++) c->work[p->ends[i]] = -INFINITY;
        if (js) jg_mask(jv, js, c->work);
        row = c->work;
    }
    sampler_params sp = {p->temperature, p->top_k, p->top_p, p->min_p, p->seed};
    out->token = sampler_draw(&sp, rng, row, c->vocab, c->idx, c->prob);
    out->logprob = 0;
    out->n_top = 0;
    if (p->logprobs || p->top_logprobs > 0) logprobs(c, logits, p->top_logprobs, out);
}
