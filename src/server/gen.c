/* gen.c — one response being generated: engine events for each of the n
 * branches go through the branch's own incremental detokenizer (control
 * tokens kept, so <think> and DSML tags reach the parser) and output parser
 * (reasoning, tool calls, JSON mode, stop strings); the parser's events
 * become protocol-neutral gev events that are accumulated for a body and
 * handed to the protocol's stream writer, which appends SSE bytes to g->out.
 *
 * Stop strings are the parser's, not the engine's, so they apply to answer
 * text only. A branch whose stop string matched ignores later tokens; when
 * every live branch has stopped, the engine request is cancelled. All state
 * is per srv_gen under g->mu (the engine calls in on its step thread). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv_internal.h"

typedef struct feed_ctx {
    srv_gen *g;
    int branch;
} feed_ctx;

static void dispatch(srv_gen *g, int bi, const gev *ev) {
    gen_branch *b = &g->b[bi];
    switch (ev->kind) {
    case GEV_REASONING:
        di_buf_add(&b->reasoning, ev->text, ev->len);
        break;
    case GEV_TEXT:
        di_buf_add(&b->text, ev->text, ev->len);
        break;
    case GEV_TOOL_START:
        if (b->n_tools == b->cap_tools) {
            b->cap_tools = b->cap_tools ? 2 * b->cap_tools : 4;
            b->tools = di_realloc(b->tools, sizeof *b->tools * (size_t)b->cap_tools);
        }
        b->tools[b->n_tools++] = (gen_tool){.id = di_strdup(ev->id), .name = di_strdup(ev->name)};
        break;
    case GEV_TOOL_ARGS:
        if (ev->tool >= 0 && ev->tool < b->n_tools)
            di_buf_add(&b->tools[ev->tool].args, ev->text, ev->len);
        break;
    case GEV_TOOL_END:
        if (ev->tool >= 0 && ev->tool < b->n_tools) b->tools[ev->tool].complete = ev->complete;
        break;
    case GEV_LOGPROB: /* streamed with the next text the protocol sends */
        json_array_append(b->logprobs, ev->logprob);
        if (!g->req->stream) return;
        if (!b->lp_pending) b->lp_pending = json_array();
        json_array_append(b->lp_pending, ev->logprob);
        return;
    }
    if (g->req->stream && g->api->event) g->api->event(g, bi, ev);
}

static void on_outp(void *ctx, const outp_event *e) {
    feed_ctx *fc = ctx;
    srv_gen *g = fc->g;
    gen_branch *b = &g->b[fc->branch];
    gev ev = {.text = e->text,
              .len = e->len,
              .tool = e->index,
              .id = e->id,
              .name = e->name,
              .complete = e->complete};
    switch (e->kind) {
    case OUTP_EV_REASONING:
        ev.kind = GEV_REASONING;
        break;
    case OUTP_EV_TEXT:
        ev.kind = GEV_TEXT;
        break;
    case OUTP_EV_TOOL_START:
        ev.kind = GEV_TOOL_START;
        break;
    case OUTP_EV_TOOL_ARGS:
        ev.kind = GEV_TOOL_ARGS;
        break;
    case OUTP_EV_TOOL_END:
        ev.kind = GEV_TOOL_END;
        break;
    case OUTP_EV_STOP:
        b->stop_index = e->index;
        return;
    case OUTP_EV_ERROR:
        di_log(DI_LOG_DEBUG, "serve: output parser: %s", e->text);
        return;
    case OUTP_EV_FINISH:
        return;
    }
    if ((ev.kind == GEV_REASONING || ev.kind == GEV_TEXT || ev.kind == GEV_TOOL_ARGS) && !ev.len)
        return;
    /* parallel_tool_calls: false (disable_parallel_tool_use) keeps the first call only */
    if (ev.kind >= GEV_TOOL_START && ev.kind <= GEV_TOOL_END && e->index > 0 &&
        !g->req->parallel_tool_calls)
        return;
    dispatch(g, fc->branch, &ev);
}

srv_gen *gen_new(const gen_env *env, const srv_api *api, srv_req *req, int prompt_tokens,
                 bool think_opened, srv_fail *f) {
    srv_gen *g = di_calloc(1, sizeof *g);
    g->env = *env;
    g->api = api;
    g->req = req;
    g->per = req->n > 0 ? req->n : 1;
    g->n_prompts = 1 + req->n_more;
    g->n = g->per * g->n_prompts;
    g->prompts = di_calloc((size_t)g->n_prompts, sizeof *g->prompts);
    g->prompt_tokens = prompt_tokens;
    g->think_opened = think_opened;
    g->t_start = di_now();
    g->created = (long long)time(NULL);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    static const char hex[] = "0123456789abcdef";
    uint64_t x = (uint64_t)(di_now() * 1e9) ^ ((uint64_t)(uintptr_t)g << 16);
    const char *pre = api->proto == SRV_CHAT          ? "chatcmpl-"
                      : api->proto == SRV_COMPLETIONS ? "cmpl-"
                      : api->proto == SRV_RESPONSES   ? "resp_"
                                                      : "msg_";
    size_t k = (size_t)snprintf(g->id, sizeof g->id, "%s", pre);
    for (int i = 0; i < 24 && k + 1 < sizeof g->id; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        g->id[k++] = hex[x & 15];
    }
    g->id[k] = 0;

    bool chat_like = api->proto != SRV_COMPLETIONS;
    conv_thinking th = req->conv ? req->conv->thinking : CONV_THINK_UNSET;
    g->reasoning = chat_like && (think_opened || th != CONV_THINK_OFF);
    outp_config cfg = {.reasoning = g->reasoning,
                       .think_opened = think_opened,
                       .tools = chat_like && req->conv && req->conv->n_tools > 0 &&
                                req->tool_choice != SRV_TC_NONE,
                       .syntax = req->tool_syntax,
                       .json_mode = req->json_mode,
                       .stops = (const char *const *)req->stops,
                       .n_stops = (size_t)req->n_stops,
                       .keep_stop = req->keep_stop,
                       .id_seed = x | 1,
                       .start_in_block = req->tool_forced,
                       .start_invoke = req->tool_forced && req->tool_choice == SRV_TC_NAMED
                                           ? req->tool_name
                                           : NULL};
    g->b = di_calloc((size_t)g->n, sizeof *g->b);
    for (int i = 0; i < g->n; i++) {
        gen_branch *b = &g->b[i];
        di_err err = {{0}};
        b->stop_index = -1;
        b->logprobs = json_array();
        cfg.id_seed = x + (uint64_t)i * 0x9e3779b97f4a7c15ULL;
        b->p = outp_new(&cfg, &err);
        if (!b->p) {
            srv_failf(f, 400, "stop", "%s", err.msg);
            gen_free(g);
            return NULL;
        }
        /* completions keep raw text as `deepinfer generate` prints it (with
         * vLLM's skip_special_tokens: false, control tokens' text too) */
        if (env->tok) b->ts = tok_stream_new(env->tok, !chat_like && !req->keep_special);
    }
    return g;
}

void gen_free(srv_gen *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++) {
        gen_branch *b = &g->b[i];
        if (b->ts) tok_stream_free(b->ts);
        if (b->p) outp_free(b->p);
        di_buf_free(&b->reasoning);
        di_buf_free(&b->text);
        for (int t = 0; t < b->n_tools; t++) {
            free(b->tools[t].id);
            free(b->tools[t].name);
            di_buf_free(&b->tools[t].args);
        }
        free(b->tools);
        json_decref(b->logprobs);
        json_decref(b->lp_pending);
        free(b->error);
    }
    free(g->b);
    di_buf_free(&g->out);
    for (int p = 0; p < g->n_prompts; p++) {
        free(g->prompts[p].echo);
        json_decref(g->prompts[p].lp);
        free(g->prompts[p].scores);
    }
    free(g->prompts);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

/* A token's entry: `bytes` its raw bytes (a token holding part of a
 * character too, so that neighbours' bytes join into the text), `token`
 * those bytes as text (with vLLM's return_tokens_as_token_ids, "token_id:N"). */
static json_t *lp_entry(const srv_gen *g, int id, float lp) {
    const tokenizer *tok = g->env.tok;
    size_t len = 0, tlen = 0;
    char *raw = tok ? tok_token_bytes(tok, id, &len) : NULL;
    char *text = raw ? tok_utf8_lossy(raw, len, &tlen) : NULL;
    if (g->req->tokens_as_ids) {
        free(text);
        text = di_malloc(24);
        tlen = (size_t)snprintf(text, 24, "token_id:%d", id);
    }
    json_t *bytes = json_array();
    for (size_t i = 0; i < len; i++)
        json_array_append_new(bytes, json_integer((unsigned char)raw[i]));
    json_t *o = json_object();
    json_object_set_new(o, "token", srv_jstr(text ? text : "", tlen));
    json_object_set_new(o, "logprob", json_real(isfinite(lp) ? lp : -9999.0));
    json_object_set_new(o, "bytes", bytes);
    free(raw);
    free(text);
    return o;
}

/* The engine's prompt logprobs as entries like a generated token's. */
static json_t *prompt_entries(const srv_gen *g, const samp_out *lp, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        json_t *e = lp_entry(g, lp[i].token, lp[i].logprob);
        json_t *tops = json_array();
        for (int k = 0; k < lp[i].n_top && k < g->req->top_logprobs; k++)
            json_array_append_new(tops, lp_entry(g, lp[i].top[k].id, lp[i].top[k].logprob));
        json_object_set_new(e, "top_logprobs", tops);
        if (i == 0) { /* nothing precedes the first token */
            json_object_set_new(e, "logprob", json_null());
            json_object_set_new(e, "top_logprobs", json_null());
        }
        json_array_append_new(a, e);
    }
    return a;
}

/* One vLLM prompt-logprob value: {"logprob", "rank", "decoded_token"}. */
static void plp_put(const srv_gen *g, json_t *o, int id, float lp, int rank) {
    char key[16];
    snprintf(key, sizeof key, "%d", id);
    size_t len = 0, tlen = 0;
    char *raw = g->env.tok ? tok_token_bytes(g->env.tok, id, &len) : NULL;
    char *text = raw ? tok_utf8_lossy(raw, len, &tlen) : NULL;
    json_object_set_new(o, key,
                        json_pack("{s:f, s:i, s:o}", "logprob", isfinite(lp) ? lp : -9999.0, "rank",
                                  rank, "decoded_token", srv_jstr(text ? text : "", tlen)));
    free(raw);
    free(text);
}

json_t *gen_prompt_logprobs(const srv_gen *g, int p) {
    const gen_prompt *gp = &g->prompts[p];
    json_t *a = json_array();
    for (int i = 0; i < gp->n_scores; i++) {
        const samp_out *s = &gp->scores[i];
        if (i == 0) { /* nothing precedes the first token */
            json_array_append_new(a, json_null());
            continue;
        }
        json_t *o = json_object();
        for (int k = 0; k < s->n_top && k < g->req->prompt_logprobs; k++)
            plp_put(g, o, s->top[k].id, s->top[k].logprob, k + 1);
        plp_put(g, o, s->token, s->logprob, s->rank);
        json_array_append_new(a, o);
    }
    return a;
}

void gen_on_logprob(srv_gen *g, int bi, int token, float lp, const samp_logprob *top, int n_top) {
    if (bi < 0 || bi >= g->n) return;
    pthread_mutex_lock(&g->mu);
    gen_branch *b = &g->b[bi];
    if (!b->stopped && !b->done) {
        json_t *e = lp_entry(g, token, lp);
        json_t *tops = json_array();
        for (int i = 0; i < n_top && i < g->req->top_logprobs; i++)
            json_array_append_new(tops, lp_entry(g, top[i].id, top[i].logprob));
        json_object_set_new(e, "top_logprobs", tops);
        gev ev = {.kind = GEV_LOGPROB, .logprob = e};
        dispatch(g, bi, &ev);
        json_decref(e);
    }
    pthread_mutex_unlock(&g->mu);
}

/* Called with g->mu held. */
static void feed_locked(srv_gen *g, int bi, const char *text, size_t len) {
    gen_branch *b = &g->b[bi];
    if (b->stopped || b->done || !len) return;
    feed_ctx fc = {g, bi};
    if (outp_feed(b->p, text, len, on_outp, &fc)) b->stopped = true;
}

void gen_on_text(srv_gen *g, int bi, const char *text, size_t len) {
    if (bi < 0 || bi >= g->n) return;
    pthread_mutex_lock(&g->mu);
    feed_locked(g, bi, text, len);
    pthread_mutex_unlock(&g->mu);
}

/* A forced tool call (see routes.c) that the model did not complete is not
 * reported as one: finish_reason is "tool_calls" (tool_use) only when at
 * least one call is complete, else what the engine said ("stop"/"end_turn",
 * or "length"/"max_tokens"). A body (not streamed) then lists the complete
 * calls only; a stream has already sent the partial call, and its finish
 * reason is what tells the client. */
static void forced_finish(srv_gen *g, gen_branch *b) {
    int k = 0;
    for (int t = 0; t < b->n_tools; t++) {
        if (b->tools[t].complete || g->req->stream) {
            b->tools[k++] = b->tools[t];
            continue;
        }
        free(b->tools[t].id);
        free(b->tools[t].name);
        di_buf_free(&b->tools[t].args);
    }
    b->n_tools = k;
    bool any = false;
    for (int t = 0; t < b->n_tools; t++) any |= b->tools[t].complete;
    if (b->finish == FIN_TOOLS) b->finish = FIN_STOP;
    if (b->finish == FIN_STOP && any && !b->stopped) b->finish = FIN_TOOLS;
}

static void final_locked(srv_gen *g, int bi, engine_finish fin, engine_usage u, const char *error) {
    gen_branch *b = &g->b[bi];
    if (b->done) return;
    if (b->ts && !b->stopped) {
        size_t len = 0;
        const char *rest = tok_stream_flush(b->ts, &len);
        feed_locked(g, bi, rest, len);
    }
    feed_ctx fc = {g, bi};
    const outp_summary *sum = outp_finish(b->p, on_outp, &fc);
    b->usage = u;
    if (b->stopped || (sum && sum->stop_index >= 0))
        b->finish = FIN_STOP;
    else if (fin == ENGINE_FINISH_STOP)
        b->finish = b->n_tools ? FIN_TOOLS : FIN_STOP;
    else if (fin == ENGINE_FINISH_LENGTH)
        b->finish = FIN_LENGTH;
    else if (fin == ENGINE_FINISH_CANCELLED)
        b->finish = g->cancelled ? FIN_CANCELLED : FIN_STOP;
    else
        b->finish = FIN_ERROR;
    if (g->req->tool_forced)
        forced_finish(g, b);
    else if (b->finish == FIN_STOP && b->n_tools && !b->stopped)
        b->finish = FIN_TOOLS;
    if (error) b->error = di_strdup(error);
    b->done = true;
    if (g->req->stream && g->api->branch_end) g->api->branch_end(g, bi);
    if (++g->n_done == g->n) {
        engine_usage t = gen_usage(g);
        g->prompt_tokens = t.prompt_tokens;
        g->cached_tokens = t.cached_tokens;
        if (g->req->stream && g->api->end) g->api->end(g);
        g->all_done = true;
        if (g->env.metrics)
            srv_metrics_tokens(g->env.metrics, t.prompt_tokens, t.completion_tokens,
                               t.cached_tokens);
    }
    pthread_cond_broadcast(&g->cv);
}

void gen_on_final(srv_gen *g, int bi, engine_finish fin, engine_usage u, const char *error) {
    if (bi < 0 || bi >= g->n) return;
    pthread_mutex_lock(&g->mu);
    final_locked(g, bi, fin, u, error);
    pthread_mutex_unlock(&g->mu);
}

void gen_begin(srv_gen *g) {
    pthread_mutex_lock(&g->mu);
    if (g->req->stream && g->api->begin) g->api->begin(g);
    pthread_mutex_unlock(&g->mu);
}

/* The prompt whose engine request is id (a batch has one per prompt). */
static int prompt_of(const srv_gen *g, uint64_t id) {
    for (int p = 1; p < g->n_prompts; p++)
        if (g->prompts[p].engine_id == id) return p;
    return 0;
}

void gen_on_engine_event(const engine_event *ev, void *user) {
    srv_gen *g = user;
    if (ev->index < 0 || ev->index >= g->per) return;
    pthread_mutex_lock(&g->mu); /* the ids are all in: submitted under the lock */
    int p = prompt_of(g, ev->req_id), bi = p * g->per + ev->index;
    gen_branch *b = &g->b[bi];
    if (ev->prompt_lp && !b->done) { /* each branch's first event */
        gen_prompt *gp = &g->prompts[p];
        if (!gp->scores) {
            gp->n_scores = ev->n_prompt_lp;
            gp->scores = di_malloc(sizeof *gp->scores * (size_t)(gp->n_scores ? gp->n_scores : 1));
            memcpy(gp->scores, ev->prompt_lp, sizeof *gp->scores * (size_t)gp->n_scores);
            if (g->req->echo && g->req->logprobs)
                gp->lp = prompt_entries(g, ev->prompt_lp, ev->n_prompt_lp);
        }
        if (g->req->stream && g->api->scored) g->api->scored(g, bi);
    }
    double now = di_now();
    if (ev->token >= 0 && !b->done) {
        b->n_tokens++;
        if (g->env.metrics) {
            if (b->t_last == 0) {
                if (bi == 0) srv_metrics_ttft(g->env.metrics, now - g->t_start);
            } else
                srv_metrics_tbt(g->env.metrics, now - b->t_last);
        }
        b->t_last = now;
    }
    bool eos = ev->finish == ENGINE_FINISH_STOP; /* the engine holds no stop strings */
    if (ev->token >= 0 && ev->has_logprobs && !b->stopped && !b->done) /* best_of's rank */
        b->lp_sum += ev->logprob, b->lp_count++; /* (an end of sequence too) */
    if (ev->token >= 0 && !eos && !b->stopped && !b->done) {
        pthread_mutex_unlock(&g->mu);
        if (ev->has_logprobs && g->req->logprobs)
            gen_on_logprob(g, bi, ev->token, ev->logprob, ev->top, ev->n_top);
        pthread_mutex_lock(&g->mu);
        if (b->ts) {
            size_t len = 0;
            const char *piece = tok_stream_push(b->ts, ev->token, &len);
            feed_locked(g, bi, piece, len);
        } else
            feed_locked(g, bi, ev->text, ev->text_len);
    }
    bool cancel = false; /* every branch of the prompt has stopped: its request */
    if (ev->finish != ENGINE_FINISH_NONE)
        final_locked(g, bi, ev->finish, ev->usage, ev->error);
    else if (b->stopped) {
        cancel = true;
        for (int i = p * g->per; i < (p + 1) * g->per; i++)
            cancel &= g->b[i].stopped || g->b[i].done;
    }
    pthread_cond_broadcast(&g->cv);
    uint64_t id = g->prompts[p].engine_id;
    engine *e = g->engine;
    pthread_mutex_unlock(&g->mu);
    if (cancel && e && id) engine_cancel(e, id);
}

/* Each prompt's tokens counted once (its n branches share them), added
 * over a batch's prompts; every branch's completion tokens. */
engine_usage gen_usage(const srv_gen *g) {
    engine_usage t = {0};
    for (int p = 0; p < g->n_prompts; p++) {
        engine_usage one = {0};
        for (int i = p * g->per; i < (p + 1) * g->per; i++) {
            const engine_usage *u = &g->b[i].usage;
            if (u->prompt_tokens > one.prompt_tokens) one.prompt_tokens = u->prompt_tokens;
            if (u->cached_tokens > one.cached_tokens) one.cached_tokens = u->cached_tokens;
            t.completion_tokens += u->completion_tokens;
        }
        t.prompt_tokens += one.prompt_tokens;
        t.cached_tokens += one.cached_tokens;
    }
    if (!t.prompt_tokens) t.prompt_tokens = g->prompt_tokens;
    return t;
}

void sse_json(srv_gen *g, const char *event, json_t *obj) {
    if (event) {
        di_buf_adds(&g->out, "event: ");
        di_buf_adds(&g->out, event);
        di_buf_adds(&g->out, "\n");
    }
    char *s = json_dumps(obj, JSON_COMPACT);
    di_buf_adds(&g->out, "data: ");
    di_buf_adds(&g->out, s ? s : "{}");
    di_buf_adds(&g->out, "\n\n");
    free(s);
    json_decref(obj);
}

void sse_raw(srv_gen *g, const char *line) {
    di_buf_adds(&g->out, line);
}
