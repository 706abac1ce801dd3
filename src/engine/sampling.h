/* sampling.h — the full per-token sampling pipeline of a request: logits
 * processors (logit bias, repetition / presence / frequency penalties), then
 * the sampler (greedy, temperature, top-k, top-p, min-p, seeded draw), and
 * the logprobs of the chosen token with up to SAMP_MAX_TOP alternatives.
 *
 * Penalties follow the usual definitions: repetition (HF/vLLM) divides a
 * positive logit (multiplies a negative one) of every token seen in the
 * prompt or the output; presence and frequency (OpenAI) subtract
 * presence + frequency * count for tokens of the output. Logprobs are the
 * log-softmax of the model's raw logits (before any processor), the way
 * vLLM reports them by default. A zero-initialised samp_params is greedy with
 * everything off. */
#ifndef DI_SAMPLING_H
#define DI_SAMPLING_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "engine/json_grammar.h"

#define SAMP_MAX_TOP  20
#define SAMP_MAX_BIAS 1024
#define SAMP_MAX_BAD  4096 /* ints in samp_params.bad */

typedef struct samp_bias {
    int id;
    float bias;
} samp_bias;

typedef struct samp_params {
    float temperature;        /* <= 0: greedy */
    int top_k;                /* <= 0: off */
    float top_p;              /* <= 0 or >= 1: off */
    float min_p;              /* <= 0: off */
    float repetition_penalty; /* <= 0 or 1: off */
    float presence_penalty, frequency_penalty;
    const samp_bias *bias; /* added to the logits (-100 / +100 ban / force) */
    int n_bias;
    /* vLLM's allowed_token_ids: only these are drawn (n_allowed 0: any). */
    const int *allowed;
    int n_allowed;
    /* vLLM's bad_words as token sequences, each its length then its ids
     * (n_bad ints in all): a sequence's last id is not drawn where the
     * generated tokens end with the ids before it. */
    const int *bad;
    int n_bad;
    uint64_t seed;
    bool logprobs;    /* report the chosen token's logprob */
    int top_logprobs; /* and this many alternatives (0..SAMP_MAX_TOP) */
    /* Until min_tokens tokens are generated, ends[0..n_ends) (the engine
     * fills in its end-of-sequence and stop ids) are not drawn; not in
     * JSON-constrained output, which ends when its object closes. */
    int min_tokens;
    const int *ends;
    int n_ends;
} samp_params;

typedef struct samp_logprob {
    int id;
    float logprob;
} samp_logprob;

typedef struct samp_out {
    int token;
    float logprob; /* of token (when params.logprobs) */
    int rank;      /* samp_score: 1 + the tokens more likely than token */
    int n_top;
    samp_logprob top[SAMP_MAX_TOP]; /* most likely first */
} samp_out;

/* Scratch shared by every sequence of one engine (one step thread). */
typedef struct samp_ctx samp_ctx;
samp_ctx *samp_ctx_new(int vocab);
void samp_ctx_free(samp_ctx *c);

/* Validates ranges against the vocabulary; -1 with err naming the field. */
int samp_params_check(const samp_params *p, int vocab, di_err *err);
/* Generator state of branch `branch` of a request seeded `seed`. */
uint64_t samp_rng_init(uint64_t seed, int branch);
/* Samples the next token of a sequence whose tokens are tokens[0..n_tokens),
 * the first n_prompt of them its prompt. logits (vocab) are not modified.
 * With js (JSON-constrained output, json_grammar.h), only the tokens of
 * vocabulary jv that can follow state js are drawn; logprobs stay those of
 * the model's distribution. */
void samp_next(samp_ctx *c, const samp_params *p, uint64_t *rng, const float *logits,
               const int *tokens, int n_prompt, int n_tokens, const jg_vocab *jv,
               const jg_state *js, samp_out *out);
/* What samp_next reports for a token that is already known (a prompt's):
 * its logprob under the raw logits, its rank, and the top k
 * (0..SAMP_MAX_TOP). */
void samp_score(samp_ctx *c, const float *logits, int token, int k, samp_out *out);

#endif
