/* engine.c — the engine's public face and its step thread: creation (KV
 * blocks taken from the runner, the start-up cost model that sets the
 * per-step token budget), thread-safe submit / cancel / stats, and the loop
 * that drains the inbox and runs steps. The step's work itself is in
 * engine_step.c.
 *
 * Concurrency: submitters and the step thread meet only at the mutex-guarded
 * inbox, cancel list and published stats snapshot; everything else (the
 * scheduler, block manager, sequences) belongs to the step thread alone, so
 * the hot path takes the lock once per step. Forward passes run on the
 * compute thread (engine_exec.c): while one runs, the step thread takes in
 * new requests and cancellations, plans the next step, and commits and
 * delivers the events of the previous one (engine_step.c), so between two
 * passes the compute threads wait only for sampling and the next pass's
 * preparation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

/* --- start-up cost model -------------------------------------------------- */
/* Times a P-token prefill and a 1-token decode (after a warm-up pass) and
 * fits step_time = fixed + n_tokens * per_token; the budget is what fits in
 * step_ms. */
static void measure_budget(engine *e) {
    int P = 128;
    if (P > e->max_len - 2) P = e->max_len - 2;
    int budget = 256;
    double t1 = 1e30, tp = 1e30;
    bm_table t = {0};
    bm_cow cow;
    float *lg = di_malloc(sizeof(float) * (size_t)e->run.vocab);
    int *tok = di_malloc(sizeof(int) * (size_t)(P + 1));
    for (int i = 0; i <= P; i++) tok[i] = (i * 7 + 1) % e->run.vocab;
    bool ok = P >= 2 && bm_reserve(e->bm, &t, 0, P + 1, &cow) == 0;
    for (int rep = 0; ok && rep < 2; rep++) {
        model_seq ms;
        e->run.seq_init(e->run.ctx, &ms);
        ms.blocks = t.blocks;
        ms.n_blocks = t.n;
        ms.cap_blocks = t.cap;
        model_batch_seq b = {&ms, tok, P, lg, false, NULL};
        di_err err;
        double a = di_now();
        ok = e->run.forward(e->run.ctx, &b, 1, &err) == 0;
        double m = di_now();
        b = (model_batch_seq){&ms, tok + P, 1, lg, false, NULL};
        ok = ok && e->run.forward(e->run.ctx, &b, 1, &err) == 0;
        double z = di_now();
        if (rep > 0 && ok) {
            tp = m - a;
            t1 = z - m;
        }
        if (!ok) di_log(DI_LOG_WARN, "engine: cost model pass failed: %s", err.msg);
        ms.blocks = NULL;
        ms.n_blocks = ms.cap_blocks = 0;
        e->run.seq_free(e->run.ctx, &ms);
    }
    if (ok) {
        double per_tok = (tp - t1) / (P - 1);
        if (per_tok < 1e-7) per_tok = 1e-7;
        double b = (e->o.step_ms / 1000.0 - t1) / per_tok;
        budget = b < 16 ? 16 : b > 16384 ? 16384 : (int)b;
        e->st.step_fixed_ms = t1 * 1000;
        e->st.token_ms = per_tok * 1000;
    }
    bm_release(e->bm, &t);
    bm_table_free(&t);
    free(lg);
    free(tok);
    e->st.token_budget = budget;
}

/* --- the step thread ------------------------------------------------------ */
static void publish(engine *e) {
    bm_stats b = bm_get_stats(e->bm);
    engine_stats s = e->st;
    s.running = sched_n_running(e->sched);
    s.waiting = sched_n_waiting(e->sched);
    s.blocks_total = b.total;
    s.blocks_used = b.used;
    s.blocks_free = b.free;
    s.blocks_cached = b.cached;
    s.prefix_hit_tokens = sched_prefix_hit_tokens(e->sched);
    s.cows = b.cows;
    s.evictions = b.evictions;
    s.swap_bytes_used = (size_t)sched_swap_used(e->sched) * e->run.kv_block_bytes;
    if (e->store) {
        s.kv_store_hit_tokens = sched_store_hit_tokens(e->sched);
        s.kv_store = kvs_get_stats(e->store);
    }
    if (e->swa_cache) {
        swc_stats w = swc_get_stats(e->swa_cache);
        s.swa_cache_entries = w.entries;
        s.swa_cache_bytes = w.bytes;
    }
    pthread_mutex_lock(&e->mu);
    e->pub = s;
    pthread_mutex_unlock(&e->mu);
}

static void fail_all(engine *e, const char *msg) {
    while (e->active) engine_cancel_now(e, e->active->id, ENGINE_FINISH_ERROR, msg);
}

static void *engine_main(void *arg) {
    engine *e = arg;
    uint64_t *cancels = NULL;
    int cap = 0;
    double t_prev = 0; /* wall time with work in flight, for the idle fraction */
    bool counting = false;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stop && (e->paused || (!e->inbox && e->n_cancels == 0 && !e->active))) {
            if (counting) { /* the last iteration (it waited for the last pass) */
                e->st.active_s += di_now() - t_prev;
                e->pub.active_s = e->st.active_s; /* under mu, as publish() would */
                counting = false;
            }
            e->busy = false;
            pthread_cond_broadcast(&e->idle);
            pthread_cond_wait(&e->work, &e->mu);
        }
        if (e->stop) break;
        double now = di_now();
        if (counting) e->st.active_s += now - t_prev;
        t_prev = now;
        counting = true;
        e->busy = true;
        ereq *in = e->inbox;
        e->inbox = e->inbox_tail = NULL;
        int nc = e->n_cancels;
        if (nc > cap) {
            cap = nc * 2;
            cancels = di_realloc(cancels, sizeof *cancels * (size_t)cap);
        }
        if (nc) memcpy(cancels, e->cancels, sizeof *cancels * (size_t)nc);
        e->n_cancels = 0;
        pthread_mutex_unlock(&e->mu);

        while (in) {
            ereq *next = in->next;
            engine_ingest(e, in);
            in = next;
        }
        for (int i = 0; i < nc; i++)
            engine_cancel_now(e, cancels[i], ENGINE_FINISH_CANCELLED, NULL);
        if (e->active) {
            di_err err = {{0}};
            if (engine_step(e, &err)) {
                di_log(DI_LOG_ERROR, "engine: step failed: %s", err.msg);
                fail_all(e, err.msg);
            }
        }
        publish(e);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    engine_drain(e); /* the pass in flight and its events */
    free(cancels);
    return NULL;
}

/* --- lifecycle ------------------------------------------------------------ */
engine *engine_create_runner(const engine_runner *r, const engine_detok *detok,
                             const engine_opts *opts, di_err *err) {
    engine_opts o = opts ? *opts : (engine_opts){0};
    if (o.step_ms <= 0) o.step_ms = 50;
    if (o.max_running <= 0) o.max_running = 256;
    if (r->vocab <= 0 || !r->forward || !r->kv_alloc || !r->kv_release || !r->seq_init ||
        !r->seq_free) {
        di_errf(err, "engine: runner is missing its vocabulary size or a required function");
        if (r->destroy) r->destroy(r->ctx);
        return NULL;
    }
    engine *e = di_calloc(1, sizeof *e);
    e->run = *r;
    if (detok && detok->open) {
        e->detok = *detok;
        e->has_detok = true;
    }
    e->o = o;
    e->max_len = o.max_model_len > 0 && (r->max_context <= 0 || o.max_model_len < r->max_context)
                     ? o.max_model_len
                 : r->max_context > 0 ? r->max_context
                                      : 1 << 30;
    int want = o.kv_blocks > 0 ? o.kv_blocks : 1 << 30;
    int cap = 64;
    e->block_ids = di_malloc(sizeof(int) * (size_t)cap);
    while (e->n_block_ids < want) {
        int id = r->kv_alloc(r->ctx);
        if (id < 0) break;
        if (e->n_block_ids == cap) {
            cap *= 2;
            e->block_ids = di_realloc(e->block_ids, sizeof(int) * (size_t)cap);
        }
        e->block_ids[e->n_block_ids++] = id;
    }
    if (e->n_block_ids == 0) {
        di_errf(err, "engine: the KV pool has no blocks");
        engine_free(e);
        return NULL;
    }
    e->bm = bm_create(e->block_ids, e->n_block_ids);
    e->seq_cap = e->n_block_ids < e->max_len / BM_BLOCK ? e->n_block_ids * BM_BLOCK : e->max_len;
    /* Sliding-window models share prefixes only when their rings can be
     * snapshotted (and rebuilt by replay). */
    e->swa = r->has_swa && r->swa_save && r->swa_restore && r->swa_free && r->swa_bytes;
    bm_set_caching(e->bm, !o.no_prefix_cache && (!r->has_swa || e->swa));
    if (e->swa) {
        e->swa_cache =
            swc_create(o.swa_cache_bytes ? o.swa_cache_bytes : (size_t)64 << 20, r->swa_free);
        int exact = r->sliding_window * (r->n_swa_layers > 0 ? r->n_swa_layers : 1);
        e->replay_tokens = o.swa_replay_exact        ? exact
                           : o.swa_replay_tokens > 0 ? o.swa_replay_tokens
                                                     : 128;
    }
    if (o.batch_invariant) {
        if (!r->set_batch_invariant) {
            di_errf(err, "engine: --batch-invariant: the backend has no batch-invariant mode");
            engine_free(e);
            return NULL;
        }
        r->set_batch_invariant(r->ctx, true);
    }
    e->samp = samp_ctx_new(r->vocab);
    if (o.step_tokens > 0)
        e->st.token_budget = o.step_tokens;
    else
        measure_budget(e);
    if (o.kv_store && !r->kv_block_data) {
        di_errf(err, "engine: --kv-store: the backend exposes no KV block memory");
        engine_free(e);
        return NULL;
    }
    int swap_blocks = 0;
    if (o.swap_bytes) {
        if (!r->kv_block_data) {
            di_errf(err, "engine: --swap-space: the backend exposes no KV block memory");
            engine_free(e);
            return NULL;
        }
        if (o.swap_bytes < r->kv_block_bytes) {
            di_errf(err, "engine: --swap-space: %zu bytes hold no KV block (%zu bytes each)",
                    o.swap_bytes, r->kv_block_bytes);
            engine_free(e);
            return NULL;
        }
        /* blocks of no bytes (only sliding-window layers): swapping is free */
        size_t n = r->kv_block_bytes ? o.swap_bytes / r->kv_block_bytes : (size_t)INT32_MAX;
        swap_blocks = n > (size_t)INT32_MAX ? INT32_MAX : (int)n;
    }
    /* The store extends the prefix cache: off with it. */
    if (!o.no_prefix_cache && (!r->has_swa || e->swa)) e->store = o.kv_store;
    e->store_io = (kvs_pool_io){r->ctx, r->kv_block_data};
    e->st.has_kv_store = e->store != NULL;
    e->sched = sched_create(e->bm, &(sched_opts){.token_budget = e->st.token_budget,
                                                 .max_running = o.max_running,
                                                 .can_copy = r->copy_block != NULL,
                                                 .block_chunks = e->swa,
                                                 .store = e->store,
                                                 .store_io = e->store_io,
                                                 .swap_blocks = swap_blocks,
                                                 .score_rows = ENGINE_SCORE_CHUNK});
    e->next_req_id = 1;
    if (engine_exec_start(&e->exec, &e->run)) {
        di_errf(err, "engine: cannot start the compute thread");
        sched_free(e->sched);
        e->sched = NULL;
        engine_free(e);
        return NULL;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->idle, NULL);
    publish(e);
    e->busy = true; /* until the thread first finds nothing to do */
    if (pthread_create(&e->thread, NULL, engine_main, e)) {
        di_errf(err, "engine: cannot start the step thread");
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->work);
        pthread_cond_destroy(&e->idle);
        sched_free(e->sched);
        e->sched = NULL; /* tells engine_free there is no thread */
        engine_free(e);
        return NULL;
    }
    return e;
}

void engine_free(engine *e) {
    if (!e) return;
    if (e->sched) { /* the thread runs */
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_broadcast(&e->work);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
        /* Requests still queued or running end as cancelled. */
        while (e->inbox) {
            ereq *r = e->inbox;
            e->inbox = r->next;
            engine_ingest(e, r);
        }
        while (e->active) engine_cancel_now(e, e->active->id, ENGINE_FINISH_CANCELLED, NULL);
        sched_free(e->sched);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->work);
        pthread_cond_destroy(&e->idle);
    }
    engine_exec_stop(&e->exec);
    free(e->pend);
    free(e->fl.v);
    free(e->done.v);
    swc_free(e->swa_cache);
    jg_vocab_free(e->jv);
    if (e->o.batch_invariant && e->run.set_batch_invariant)
        e->run.set_batch_invariant(e->run.ctx, false);
    bm_free(e->bm);
    for (int i = 0; i < e->n_block_ids; i++) e->run.kv_release(e->run.ctx, e->block_ids[i]);
    free(e->block_ids);
    samp_ctx_free(e->samp);
    for (int i = 0; i < e->n_samp_task; i++) samp_ctx_free(e->samp_task[i]);
    free(e->samp_task);
    free(e->drawn);
    free(e->batch);
    free(e->replay);
    free(e->replay_seq);
    free(e->logits);
    free(e->text);
    free(e->cancels);
    if (e->run.destroy) e->run.destroy(e->run.ctx);
    free(e);
}

/* --- API ------------------------------------------------------------------ */
static int check_request(engine *e, const engine_request *q, di_err *err) {
    if (!q->prompt || q->n_prompt < 1) return di_errf(err, "request: empty prompt");
    if (q->n_prompt >= e->max_len)
        return di_errf(err, "request: prompt of %d tokens leaves no room in the %d-token context",
                       q->n_prompt, e->max_len);
    for (int i = 0; i < q->n_prompt; i++)
        if (q->prompt[i] < 0 || q->prompt[i] >= e->run.vocab)
            return di_errf(err,
                           "request: prompt token %d at position %d outside the vocabulary (%d)",
                           q->prompt[i], i, e->run.vocab);
    int need = (q->n_prompt + 1 + BM_BLOCK - 1) / BM_BLOCK;
    if (need > e->n_block_ids)
        return di_errf(err, "request: prompt needs %d KV blocks, the pool has %d", need,
                       e->n_block_ids);
    if (q->n > ENGINE_MAX_N)
        return di_errf(err, "request: n = %d (at most %d)", q->n, ENGINE_MAX_N);
    if ((unsigned)q->traffic >= ENGINE_N_TRAFFIC)
        return di_errf(err, "request: unknown traffic class %d", (int)q->traffic);
    if (samp_params_check(&q->sampling, e->run.vocab, err)) return -1;
    if (q->prompt_logprobs && (q->prompt_top < 0 || q->prompt_top > SAMP_MAX_TOP))
        return di_errf(err, "request: prompt_top %d out of range [0, %d]", q->prompt_top,
                       SAMP_MAX_TOP);
    char msg[256];
    if (stop_params_check(&q->stop, msg, sizeof msg)) return di_errf(err, "request: %s", msg);
    if (q->stop.n_strs > 0 && !e->has_detok)
        return di_errf(err, "request: stop strings need a tokenizer");
    if (q->json && (!e->has_detok || !e->detok.token_bytes))
        return di_errf(err, "request: JSON output needs the tokenizer's token bytes");
    return 0;
}

static int *copy_ints(const int *v, int n) {
    if (n <= 0) return NULL;
    int *c = di_malloc(sizeof(int) * (size_t)n);
    memcpy(c, v, sizeof(int) * (size_t)n);
    return c;
}

static ereq *copy_request(const engine_request *q) {
    ereq *r = di_calloc(1, sizeof *r);
    r->r = *q;
    if (r->r.n <= 0) r->r.n = 1;
    r->prompt = copy_ints(q->prompt, q->n_prompt); /* check_request: n_prompt >= 1 */
    r->r.prompt = r->prompt;
    if (q->sampling.n_bias > 0) {
        r->bias = di_malloc(sizeof *r->bias * (size_t)q->sampling.n_bias);
        memcpy(r->bias, q->sampling.bias, sizeof *r->bias * (size_t)q->sampling.n_bias);
    }
    r->r.sampling.bias = r->bias;
    r->allowed = copy_ints(q->sampling.allowed, q->sampling.n_allowed);
    r->r.sampling.allowed = r->allowed;
    r->bad = copy_ints(q->sampling.bad, q->sampling.n_bad);
    r->r.sampling.bad = r->bad;
    r->stop_ids = copy_ints(q->stop.ids, q->stop.n_ids);
    r->r.stop.ids = r->stop_ids;
    if (q->stop.n_strs > 0) {
        r->stop_strs = di_calloc((size_t)q->stop.n_strs, sizeof(char *));
        for (int i = 0; i < q->stop.n_strs; i++) r->stop_strs[i] = di_strdup(q->stop.strs[i]);
    }
    r->r.stop.strs = (const char *const *)r->stop_strs;
    r->r.json_schema = NULL; /* compiled into r->schema */
    r->r.regex = NULL;       /* ... r->regex */
    r->r.grammar = NULL;     /* ... r->grammar */
    r->r.call_forms = NULL;  /* ... r->calls */
    r->r.n_call_forms = 0;
    r->r.calls_close = NULL;
    r->r.calls_trigger = NULL;
    r->r.calls_answer_schema = NULL;
    if (q->prompt_logprobs) {
        r->plp = di_calloc((size_t)q->n_prompt, sizeof *r->plp);
        r->plp[0] = (samp_out){.token = q->prompt[0], .logprob = NAN};
    }
    return r;
}

jg_calls *engine_calls_compile(const engine_request *q, di_err *err) {
    char why[200];
    jg_calls *calls = jg_calls_compile(q->call_forms, q->n_call_forms, q->calls_close, q->max_calls,
                                       why, sizeof why);
    if (!calls) return di_errf(err, "request: tools: %s", why), NULL;
    jg_calls_set_trigger(calls, q->calls_trigger);
    if (q->calls_dsml) jg_calls_set_dsml(calls);
    if (q->calls_answer && !jg_calls_set_answer(calls, q->calls_answer_schema, why, sizeof why)) {
        jg_calls_free(calls);
        return di_errf(err, "request: json_schema: %s", why), NULL;
    }
    return calls;
}

uint64_t engine_submit(engine *e, const engine_request *q, di_err *err) {
    if (check_request(e, q, err)) return 0;
    jg_schema *schema = NULL;
    if (q->json && q->json_schema) {
        char why[160];
        schema = jg_schema_compile(q->json_schema, strlen(q->json_schema), why, sizeof why);
        if (!schema) return di_errf(err, "request: json_schema: %s", why), 0;
    }
    jr_dfa *regex = NULL;
    if (q->json && q->regex) {
        char why[160];
        regex = jr_compile(q->regex, strlen(q->regex), JR_MAX_STATES, why, sizeof why);
        if (!regex) {
            jg_schema_free(schema);
            return di_errf(err, "request: regex: %s", why), 0;
        }
    }
    gr_grammar *grammar = NULL;
    if (q->json && q->grammar) {
        char why[200];
        grammar = gr_compile(q->grammar, strlen(q->grammar), why, sizeof why);
        if (!grammar) {
            jg_schema_free(schema);
            jr_free(regex);
            return di_errf(err, "request: grammar: %s", why), 0;
        }
    }
    jg_calls *calls = NULL;
    if (q->json && q->call_forms && !(calls = engine_calls_compile(q, err))) {
        jg_schema_free(schema);
        jr_free(regex);
        gr_free(grammar);
        return 0;
    }
    ereq *r = copy_request(q);
    r->calls = calls;
    r->schema = schema;
    r->regex = regex;
    r->grammar = grammar;
    if (q->sampling.min_tokens > 0) { /* held off: the EOS ids (unless ignored), the stop ids */
        int n = (q->stop.ignore_eos ? 0 : e->run.n_eos) + q->stop.n_ids;
        r->ends = di_malloc(sizeof(int) * (size_t)(n ? n : 1));
        int k = 0;
        for (int i = 0; !q->stop.ignore_eos && i < e->run.n_eos; i++)
            if (e->run.eos_ids[i] >= 0 && e->run.eos_ids[i] < e->run.vocab)
                r->ends[k++] = e->run.eos_ids[i];
        for (int i = 0; i < q->stop.n_ids; i++)
            if (q->stop.ids[i] >= 0 && q->stop.ids[i] < e->run.vocab) r->ends[k++] = q->stop.ids[i];
        r->r.sampling.ends = r->ends;
        r->r.sampling.n_ends = k;
    }
    pthread_mutex_lock(&e->mu);
    uint64_t id = r->id = e->next_req_id++;
    if (e->inbox_tail)
        e->inbox_tail->next = r;
    else
        e->inbox = r;
    e->inbox_tail = r;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
    return id; /* r may be finished and freed already */
}

void engine_cancel(engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    if (id > 0 && id < e->next_req_id) {
        if (e->n_cancels == e->cap_cancels) {
            e->cap_cancels = e->cap_cancels ? e->cap_cancels * 2 : 16;
            e->cancels = di_realloc(e->cancels, sizeof *e->cancels * (size_t)e->cap_cancels);
        }
        e->cancels[e->n_cancels++] = id;
        pthread_cond_signal(&e->work);
    }
    pthread_mutex_unlock(&e->mu);
}

int engine_max_seq_tokens(const engine *e) {
    return e->seq_cap;
}

engine_stats engine_get_stats(engine *e) {
    pthread_mutex_lock(&e->mu);
    engine_stats s = e->pub;
    pthread_mutex_unlock(&e->mu);
    return s;
}

void engine_pause(engine *e, bool paused) {
    pthread_mutex_lock(&e->mu);
    e->paused = paused;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
}

void engine_wait_idle(engine *e) {
    pthread_mutex_lock(&e->mu);
    while (e->inbox || e->n_cancels || e->busy) pthread_cond_wait(&e->idle, &e->mu);
    pthread_mutex_unlock(&e->mu);
}
