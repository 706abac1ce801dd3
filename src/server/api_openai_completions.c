/* api_openai_completions.c — the legacy OpenAI Completions endpoint: a raw
 * prompt (a string, or token ids) continued as plain text, the way
 * `deepinfer generate` does it (BOS, then the prompt as untrusted text; no
 * chat template, no reasoning or tool parsing; stop strings still apply).
 * Bodies are `text_completion` objects; streams are `text_completion` chunks
 * ending with `data: [DONE]`. logprobs is the legacy integer form. A
 * response_format (json_object / json_schema, as vLLM takes it here too)
 * holds the text to one JSON object.
 *
 * echo with logprobs scores the prompt: the logprobs list the prompt's
 * tokens first (the first one's logprob and top_logprobs null), then the
 * generated ones; max_tokens 0 generates nothing. That is how evaluation
 * harnesses (lm-evaluation-harness's loglikelihood) use this endpoint. A
 * stream sends the echo, with the prompt's logprobs, once they are
 * computed.
 *
 * best_of above n generates that many per prompt and returns the n with
 * the highest mean token logprob, best first (not streamed; usage counts
 * them all, as OpenAI bills them). */
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"

/* One prompt: a string or an array of token ids (name: how errors call it). */
static int parse_prompt(const json_t *p, const char *name, srv_prompt *out, srv_fail *f) {
    if (json_is_string(p)) {
        out->text = di_strdup(json_string_value(p));
        out->len = json_string_length(p);
        return 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return srv_failf(f, 400, "prompt",
                         "%s: expected a string, an array of token ids, or a batch of those", name);
    size_t i;
    const json_t *id;
    json_array_foreach(p, i, id) {
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > 1 << 30)
            return srv_failf(f, 400, "prompt", "%s[%zu]: expected a token id", name, i);
        tok_ids_push(&out->ids, (int)json_integer_value(id));
    }
    return 0;
}

/* prompt: one, or a batch (an array of strings or of token-id arrays), each
 * completed n times; choice i * n + k is prompt i's k-th. */
static int parse_prompts(const json_t *p, srv_req *r, const srv_limits *lim, srv_fail *f) {
    const json_t *first = json_array_get(p, 0);
    bool batch = json_is_array(p) && (json_is_string(first) || json_is_array(first));
    size_t n = batch ? json_array_size(p) : 1;
    int cap = lim->max_batch > 0 ? lim->max_batch : 1;
    if (n > (size_t)cap)
        return srv_failf(f, 400, "prompt", "prompt: a batch of %zu prompts (at most %d)", n, cap);
    srv_prompt one = {0};
    char name[32] = "prompt";
    if (parse_prompt(batch ? first : p, batch ? "prompt[0]" : "prompt", &one, f)) {
        tok_ids_free(&one.ids);
        return -1;
    }
    r->prompt = one.text, r->prompt_len = one.len, r->prompt_ids = one.ids;
    if (n > 1) r->more = di_calloc(n - 1, sizeof *r->more);
    for (size_t i = 1; i < n; i++) {
        snprintf(name, sizeof name, "prompt[%zu]", i);
        r->n_more++;
        if (parse_prompt(json_array_get(p, i), name, &r->more[i - 1], f)) return -1;
    }
    return 0;
}

/* vLLM's add_special_tokens (default true): false leaves BOS out; its
 * skip_special_tokens (default true): false keeps control tokens' text. */
static int get_add_special(const json_t *body, srv_req *r, srv_fail *f) {
    bool add = true, skip = true;
    if (srv_get_bool(body, "add_special_tokens", &add, f) ||
        srv_get_bool(body, "skip_special_tokens", &skip, f))
        return -1;
    r->no_bos = !add;
    r->keep_special = !skip;
    return 0;
}

static int comp_parse(const json_t *body, srv_req *r, const srv_limits *lim, srv_fail *f) {
    if (parse_prompts(json_object_get(body, "prompt"), r, lim, f)) return -1;
    r->max_tokens = 16; /* the OpenAI default for this endpoint */
    int lp = -1;
    if (srv_get_sampling(body, r, 2.0f, f) || srv_get_stops(body, "stop", r, lim, f) ||
        srv_get_bool(body, "stream", &r->stream, f) ||
        srv_get_int(body, "n", 1, lim->max_n, &r->n, f) || srv_get_priority(body, r, lim, f) ||
        srv_get_int(body, "max_tokens", 0, 1 << 30, &r->max_tokens, f) ||
        srv_get_int(body, "logprobs", 0, SAMP_MAX_TOP, &lp, f) ||
        srv_get_bool(body, "echo", &r->echo, f) || get_add_special(body, r, f) ||
        srv_get_int(body, "prompt_logprobs", 0, SAMP_MAX_TOP, &r->prompt_logprobs, f) ||
        srv_parse_response_format(json_object_get(body, "response_format"), "response_format", r,
                                  f) ||
        srv_parse_structured(body, r, f))
        return -1;
    if (r->max_tokens == 0) r->prompt_only = true;
    /* suffix: fill in the middle between the prompt and it (srv_prepare) */
    const json_t *suffix = json_object_get(body, "suffix");
    if (suffix && !json_is_null(suffix)) {
        if (!json_is_string(suffix))
            return srv_failf(f, 400, "suffix", "suffix: expected a string");
        if (r->echo)
            return srv_failf(f, 400, "suffix",
                             "suffix: not with echo (the prompt is not one text)");
        r->suffix_len = json_string_length(suffix);
        r->suffix = di_malloc(r->suffix_len + 1);
        memcpy(r->suffix, json_string_value(suffix), r->suffix_len + 1);
    }
    /* best_of: that many generated, the n best returned (OpenAI's rules) */
    int best_of = r->n;
    if (srv_get_int(body, "best_of", 1, lim->max_n, &best_of, f)) return -1;
    if (best_of < r->n)
        return srv_failf(f, 400, "best_of", "best_of: %d is less than n (%d)", best_of, r->n);
    if (best_of > r->n && r->stream)
        return srv_failf(f, 400, "best_of", "best_of: results cannot be streamed above n");
    if (best_of > r->n) r->best_keep = r->n, r->n = best_of;
    if (lp >= 0) {
        r->logprobs = true;
        r->top_logprobs = lp;
    }
    return srv_get_stream_options(body, r, f);
}

static json_t *choice(srv_gen *g, int bi, const char *text, size_t len, json_t *lps,
                      const char *finish) {
    json_t *c = json_pack("{s:o, s:i, s:n, s:n}", "text", srv_jstr(text, len), "index", bi,
                          "logprobs", "finish_reason");
    if (finish) json_object_set_new(c, "finish_reason", json_string(finish));
    if (lps) {
        json_t *tokens = json_array(), *tlp = json_array(), *top = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(lps, i, e) {
            json_array_append(tokens, json_object_get(e, "token"));
            json_array_append(tlp, json_object_get(e, "logprob"));
            const json_t *tops = json_object_get(e, "top_logprobs");
            if (json_is_null(tops)) { /* a scored prompt's first token */
                json_array_append_new(top, json_null());
                continue;
            }
            json_t *m = json_object(), *t;
            size_t k;
            json_array_foreach(tops, k, t) {
                json_object_set(m, json_string_value(json_object_get(t, "token")),
                                json_object_get(t, "logprob"));
            }
            json_array_append_new(top, m);
        }
        json_object_set_new(c, "logprobs",
                            json_pack("{s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", tlp,
                                      "top_logprobs", top));
    }
    return c;
}

static json_t *wrap(srv_gen *g, json_t *choices) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:o}", "id", g->id, "object", "text_completion",
                     "created", (json_int_t)g->created, "model", g->env.model_name,
                     "system_fingerprint", "deepinfer", "choices", choices);
}

/* A chunk of branch bi's choice c (with its usage so far, where asked). */
static json_t *wrap_one(srv_gen *g, int bi, json_t *c) {
    json_t *w = wrap(g, json_pack("[o]", c));
    srv_chunk_usage(g, bi, w);
    return w;
}

static void comp_event(srv_gen *g, int bi, const gev *ev) {
    gen_branch *b = &g->b[bi];
    if (ev->kind != GEV_TEXT) return;
    json_t *c = choice(g, bi, ev->text, ev->len, b->lp_pending, NULL);
    json_decref(b->lp_pending);
    b->lp_pending = NULL;
    sse_json(g, NULL, wrap_one(g, bi, c));
}

/* Whether the prompt is scored (its logprobs come with the engine's first
 * event, the echo with them). */
static bool scoring(const srv_gen *g) {
    return g->req->echo && g->req->logprobs;
}

static void comp_begin(srv_gen *g) {
    if (!g->req->echo || scoring(g)) return;
    for (int i = 0; i < g->n; i++) {
        const gen_prompt *gp = &g->prompts[i / g->per];
        if (gp->echo)
            sse_json(g, NULL, wrap_one(g, i, choice(g, i, gp->echo, gp->echo_len, NULL, NULL)));
    }
}

/* The prompt's scores are in: the echo with its logprobs (held back for
 * them), and vLLM's prompt_logprobs. */
static void comp_scored(srv_gen *g, int bi) {
    const gen_prompt *gp = &g->prompts[bi / g->per];
    bool echo = scoring(g) && gp->echo;
    json_t *c = choice(g, bi, echo ? gp->echo : "", echo ? gp->echo_len : 0,
                       scoring(g) ? gp->lp : NULL, NULL);
    if (g->req->prompt_logprobs >= 0)
        json_object_set_new(c, "prompt_logprobs", gen_prompt_logprobs(g, bi / g->per));
    sse_json(g, NULL, wrap_one(g, bi, c));
}

static void comp_branch_end(srv_gen *g, int bi) {
    gen_branch *b = &g->b[bi];
    json_t *c = choice(g, bi, "", 0, b->lp_pending, srv_finish_openai(b->finish));
    json_decref(b->lp_pending);
    b->lp_pending = NULL;
    sse_json(g, NULL, wrap_one(g, bi, c));
}

static void comp_end(srv_gen *g) {
    if (g->req->include_usage) {
        json_t *w = wrap(g, json_array());
        json_object_set_new(w, "usage", srv_usage_openai(g));
        sse_json(g, NULL, w);
    }
    sse_raw(g, "data: [DONE]\n\n");
}

/* A branch's mean token logprob, its end of sequence counted (best_of's
 * ranking, as OpenAI's "highest log probability per token"). */
static double mean_logprob(const gen_branch *b) {
    return b->lp_count ? b->lp_sum / b->lp_count : 0;
}

/* The branches a body returns, in order: every one, or with best_of each
 * prompt's best_keep best (by mean token logprob, the first on a tie). */
static int body_branches(const srv_gen *g, int *out) {
    int keep = g->req->best_keep, n = 0;
    if (!keep) {
        for (int i = 0; i < g->n; i++) out[n++] = i;
        return n;
    }
    for (int p = 0; p < g->n / g->per; p++)
        for (int k = 0; k < keep; k++) {
            int best = -1;
            for (int i = p * g->per; i < (p + 1) * g->per; i++) {
                bool taken = false;
                for (int j = n - k; j < n; j++) taken |= out[j] == i;
                if (!taken && (best < 0 || mean_logprob(&g->b[i]) > mean_logprob(&g->b[best])))
                    best = i;
            }
            out[n++] = best;
        }
    return n;
}

static json_t *comp_body(srv_gen *g) {
    json_t *choices = json_array();
    int *order = di_malloc(sizeof *order * (size_t)g->n);
    int shown = body_branches(g, order);
    for (int c_i = 0; c_i < shown; c_i++) {
        int i = order[c_i];
        gen_branch *b = &g->b[i];
        di_buf t = {0};
        const gen_prompt *gp = &g->prompts[i / g->per];
        if (g->req->echo && gp->echo) di_buf_add(&t, gp->echo, gp->echo_len);
        di_buf_add(&t, b->text.p ? b->text.p : "", b->text.n);
        json_t *lps = NULL;
        if (scoring(g)) { /* the prompt's tokens, then the generated ones */
            lps = gp->lp ? json_copy(gp->lp) : json_array();
            json_array_extend(lps, b->logprobs);
        } else if (g->req->logprobs)
            lps = json_incref(b->logprobs);
        json_t *c = choice(g, c_i, t.p, t.n, lps, srv_finish_openai(b->finish));
        if (g->req->prompt_logprobs >= 0) /* vLLM's: in each choice */
            json_object_set_new(c, "prompt_logprobs", gen_prompt_logprobs(g, i / g->per));
        json_array_append_new(choices, c);
        json_decref(lps);
        di_buf_free(&t);
    }
    free(order);
    json_t *w = wrap(g, choices); /* usage counts every branch generated */
    json_object_set_new(w, "usage", srv_usage_openai(g));
    return w;
}

const srv_api srv_api_completions = {.path = "/v1/completions",
                                     .name = "completions",
                                     .proto = SRV_COMPLETIONS,
                                     .parse = comp_parse,
                                     .begin = comp_begin,
                                     .event = comp_event,
                                     .branch_end = comp_branch_end,
                                     .scored = comp_scored,
                                     .end = comp_end,
                                     .body = comp_body};
