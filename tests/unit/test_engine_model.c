/* test_engine_model.c — the engine on the real tiny models (every preset in
 * $DI_TEST_MODELS): batched greedy outputs equal solo ones, prefix hits equal
 * misses and report cached tokens, preempted-and-resumed sequences give the
 * same outputs, n > 1 branches share prompt blocks and are each correct, and
 * the streamed text equals the decoded tokens. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "harness.h"
#include "model/model.h"
#include "recipe/tokenizer.h"

enum { NR = 6, GEN = 12, MAXP = 320 };

typedef struct out {
    int tok[ENGINE_MAX_N][64];
    int n[ENGINE_MAX_N];
    char text[ENGINE_MAX_N][1024];
    size_t tl[ENGINE_MAX_N];
    int cached, finished;
} out;

static void on_ev(const engine_event *ev, void *user) {
    out *o = user;
    int b = ev->index;
    if (ev->token >= 0 && o->n[b] < 64) o->tok[b][o->n[b]++] = ev->token;
    if (o->tl[b] + ev->text_len < sizeof o->text[b]) {
        memcpy(o->text[b] + o->tl[b], ev->text, ev->text_len);
        o->tl[b] += ev->text_len;
    }
    if (ev->finish != ENGINE_FINISH_NONE) {
        o->cached = ev->usage.cached_tokens;
        o->finished++;
    }
}

static uint64_t go(engine *e, const int *p, int np, int n, out *o) {
    memset(o, 0, sizeof *o);
    engine_request q = {.prompt = p,
                        .n_prompt = np,
                        .stop = {.max_tokens = GEN, .ignore_eos = true},
                        .n = n,
                        .on_event = on_ev,
                        .user = o};
    di_err err;
    return engine_submit(e, &q, &err);
}

typedef struct fixture {
    model *m;
    tokenizer *t;
    int vocab;
    int prompts[NR][MAXP], lens[NR];
    out solo[NR];
} fixture;

static bool load(fixture *f, const char *preset) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", harness_model_dir(), preset);
    if (access(path, R_OK)) return false;
    di_err err;
    f->m = model_load(path, &(model_opts){.dtype = MODEL_DTYPE_F32, .threads = 1}, &err);
    if (!f->m) {
        fprintf(stderr, "%s: %s\n", preset, err.msg);
        return false;
    }
    f->t = tok_load(path, &err);
    f->vocab = model_get_info(f->m)->vocab_size;
    for (int i = 0; i < NR; i++) {
        f->lens[i] = 20 + i * 55; /* 20 .. 295: one to three blocks */
        for (int j = 0; j < f->lens[i]; j++)
            f->prompts[i][j] = 3 + (i * 97 + j * 31 + j * j) % (f->vocab - 3);
    }
    /* Prompt 5 starts with all of prompt 4 (240 tokens: one full block). */
    memcpy(f->prompts[5], f->prompts[4], sizeof(int) * 240);
    return true;
}

static void unload(fixture *f) {
    tok_free(f->t);
    model_free(f->m);
}

static void run_preset(const char *preset) {
    static fixture f;
    memset(&f, 0, sizeof f);
    if (!load(&f, preset)) {
        CHECKF(0, "cannot load tiny model %s (run make models)", preset);
    }
    di_err err;
    engine *e = engine_create(
        f.m, f.t,
        &(engine_opts){
            .kv_blocks = 24, .step_tokens = 96, .max_running = 8, .no_prefix_cache = true},
        &err);
    CHECKF(e, "%s: %.300s", preset, err.msg);
    /* Solo runs. */
    for (int i = 0; i < NR; i++) {
        go(e, f.prompts[i], f.lens[i], 1, &f.solo[i]);
        engine_wait_idle(e);
        CHECKF(f.solo[i].n[0] == GEN, "%s: solo %d gave %d tokens", preset, i, f.solo[i].n[0]);
        size_t len;
        char *want = tok_decode(f.t, f.solo[i].tok[0], GEN, true, &len);
        CHECKF(len == f.solo[i].tl[0] && !memcmp(want, f.solo[i].text[0], len),
               "%s: streamed text differs from the decoded tokens", preset);
        free(want);
    }
    /* All together, chunked prefill mixed with decodes. */
    static out tog[NR];
    engine_pause(e, true);
    for (int i = 0; i < NR; i++) go(e, f.prompts[i], f.lens[i], 1, &tog[i]);
    engine_pause(e, false);
    engine_wait_idle(e);
    for (int i = 0; i < NR; i++)
        CHECKF(!memcmp(tog[i].tok[0], f.solo[i].tok[0], sizeof(int) * GEN),
               "%s: request %d differs batched vs alone", preset, i);
    engine_stats s = engine_get_stats(e);
    CHECK(s.blocks_used == 0);
    engine_free(e);

    /* Prefix cache on: hits give the same output as misses and report cached tokens. */
    e = engine_create(f.m, f.t,
                      &(engine_opts){.kv_blocks = 24, .step_tokens = 96, .max_running = 8}, &err);
    CHECK(e);
    bool swa = false;
    static out o;
    go(e, f.prompts[4], f.lens[4], 1, &o);
    engine_wait_idle(e);
    CHECK(!memcmp(o.tok[0], f.solo[4].tok[0], sizeof(int) * GEN));
    go(e, f.prompts[5], f.lens[5], 1, &o);
    engine_wait_idle(e);
    s = engine_get_stats(e);
    swa = s.prefix_hit_tokens == 0;
    if (!swa) CHECKF(o.cached == 128, "%s: cached %d", preset, o.cached);
    CHECKF(!memcmp(o.tok[0], f.solo[5].tok[0], sizeof(int) * GEN), "%s: prefix hit changed output",
           preset);

    /* n > 1 greedy: every branch is the solo output; prompt blocks shared. */
    go(e, f.prompts[3], f.lens[3], 3, &o);
    engine_wait_idle(e);
    for (int b = 0; b < 3; b++)
        CHECKF(o.n[b] == GEN && !memcmp(o.tok[b], f.solo[3].tok[0], sizeof(int) * GEN),
               "%s: branch %d differs", preset, b);
    s = engine_get_stats(e);
    if (!swa) CHECK(s.cows >= 2);
    CHECK(s.blocks_used == 0);
    engine_free(e);

    /* A pool too small for all at once: preemption, resumption, same outputs
     * (prefix cache off: with it, prompt 5 waits for prompt 4's shared block
     * and the pool is no longer short); by recomputation, then from swap
     * space, where each preempted sequence resumes with its own KV (and
     * rings) and nothing is computed twice. */
    long long computed[2] = {0, 0};
    for (int swap = 0; swap < 2; swap++) {
        e = engine_create(f.m, f.t,
                          &(engine_opts){.kv_blocks = 5,
                                         .step_tokens = 512,
                                         .max_running = 8,
                                         .no_prefix_cache = true,
                                         .swap_bytes = swap ? (size_t)64 << 20 : 0},
                          &err);
        CHECKF(e, "%s: %.300s", preset, err.msg);
        engine_pause(e, true);
        for (int i = 0; i < NR; i++) go(e, f.prompts[i], f.lens[i], 1, &tog[i]);
        engine_pause(e, false);
        engine_wait_idle(e);
        s = engine_get_stats(e);
        CHECKF(s.preemptions > 0, "%s: no preemption", preset);
        for (int i = 0; i < NR; i++)
            CHECKF(!memcmp(tog[i].tok[0], f.solo[i].tok[0], sizeof(int) * GEN),
                   "%s: request %d differs after preemption (swap %d)", preset, i, swap);
        CHECK(s.blocks_used == 0);
        CHECKF(s.swap_outs == (swap ? s.preemptions : 0) && s.swap_ins == s.swap_outs &&
                   s.swap_bytes_used == 0,
               "%s: swap %d: %lld preemptions, %lld out, %lld in, %zu bytes held", preset, swap,
               s.preemptions, s.swap_outs, s.swap_ins, s.swap_bytes_used);
        computed[swap] = s.computed_tokens;
        engine_free(e);
    }
    CHECKF(computed[1] < computed[0], "%s: %lld tokens computed with swap, %lld without", preset,
           computed[1], computed[0]);

    /* The start-up cost model gives a sane budget from timed passes. */
    e = engine_create(f.m, f.t, &(engine_opts){.kv_blocks = 4, .step_ms = 50}, &err);
    CHECK(e);
    s = engine_get_stats(e);
    CHECKF(s.token_budget >= 16 && s.token_budget <= 16384 && s.token_ms > 0,
           "%s: budget %d, %.4f ms/token", preset, s.token_budget, s.token_ms);
    engine_free(e);
    unload(&f);
}

TEST(engine_model_llama3_tiny) {
    run_preset("llama3-tiny");
}
TEST(engine_model_qwen2_tiny) {
    run_preset("qwen2-tiny");
}
TEST(engine_model_qwen3_tiny) {
    run_preset("qwen3-tiny");
}
TEST(engine_model_mistral_tiny) {
    run_preset("mistral-tiny");
}
TEST(engine_model_dsv2_tiny) {
    run_preset("dsv2-tiny");
}
TEST(engine_model_dsv3_tiny) {
    run_preset("dsv3-tiny");
}
TEST(engine_model_hybrid_tiny) {
    run_preset("hybrid-tiny");
}

/* Seeded sampling (temperature, top-p / top-k / min-p, penalties)
 * of 6 requests decoding together: the engine over a 2-thread model draws
 * each pass's rows on the pool, over a 1-thread model one after another;
 * the kernels give the same bits at any thread count, so the tokens and
 * the draws must be the same. */
static void run_sampled(model *m, const fixture *f, out *res) {
    di_err err;
    engine *e = engine_create(
        m, f->t, &(engine_opts){.kv_blocks = 24, .step_tokens = 512, .max_running = 8}, &err);
    CHECKF(e, "%.300s", err.msg);
    if (!e) return;
    engine_pause(e, true);
    for (int i = 0; i < NR; i++) {
        memset(&res[i], 0, sizeof res[i]);
        engine_request q = {.prompt = f->prompts[i],
                            .n_prompt = f->lens[i],
                            .sampling = {.temperature = 0.5f + 0.25f * (float)i,
                                         .top_p = i % 2 ? 0.9f : 0,
                                         .top_k = i % 3 == 0 ? 20 : 0,
                                         .min_p = i == 4 ? 0.05f : 0,
                                         .repetition_penalty = i == 5 ? 1.3f : 0,
                                         .presence_penalty = i == 2 ? 0.5f : 0,
                                         .seed = 1000 + (uint64_t)i,
                                         .logprobs = true},
                            .stop = {.max_tokens = GEN, .ignore_eos = true},
                            .on_event = on_ev,
                            .user = &res[i]};
        CHECKF(engine_submit(e, &q, &err), "%.300s", err.msg);
    }
    engine_pause(e, false);
    engine_wait_idle(e);
    engine_free(e);
}

TEST(engine_model_pool_draws_equal_serial) {
    static fixture f;
    memset(&f, 0, sizeof f);
    if (!load(&f, "llama3-tiny")) {
        CHECKF(0, "cannot load tiny model llama3-tiny (run make models)");
        return;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/llama3-tiny", harness_model_dir());
    di_err err;
    model *m2 = model_load(path, &(model_opts){.dtype = MODEL_DTYPE_F32, .threads = 2}, &err);
    CHECKF(m2, "%.300s", err.msg);
    static out serial[NR], pooled[NR];
    run_sampled(f.m, &f, serial);
    if (m2) run_sampled(m2, &f, pooled);
    for (int i = 0; i < NR && m2; i++) {
        CHECKF(serial[i].n[0] == GEN && pooled[i].n[0] == GEN, "request %d: %d / %d tokens", i,
               serial[i].n[0], pooled[i].n[0]);
        CHECKF(!memcmp(serial[i].tok[0], pooled[i].tok[0], sizeof(int) * GEN),
               "request %d: pooled draws differ from serial ones", i);
    }
    model_free(m2);
    unload(&f);
}

/* Prompt logprobs on a real model: the engine's (chunked, beside another
 * request, the prompt in the prefix cache already, scored on a 2-thread
 * pool) against one pass over the whole prompt with every position's logits
 * and a plain log-softmax. */
typedef struct plp_out {
    samp_out *lp;
    int n, events;
} plp_out;

static void on_plp(const engine_event *ev, void *user) {
    plp_out *o = user;
    if (!ev->prompt_lp) return;
    o->events++;
    free(o->lp);
    o->n = ev->n_prompt_lp;
    o->lp = malloc(sizeof(samp_out) * (size_t)o->n);
    memcpy(o->lp, ev->prompt_lp, sizeof(samp_out) * (size_t)o->n);
}

static void run_prompt_logprobs(const char *preset) {
    static fixture f;
    memset(&f, 0, sizeof f);
    if (!load(&f, preset)) {
        CHECKF(0, "cannot load tiny model %s (run make models)", preset);
        return;
    }
    const int *p = f.prompts[5], np = f.lens[5], V = f.vocab;
    di_err err;
    model_kv_pool *kv = model_kv_pool_create(f.m, 4, &err);
    model_seq s;
    model_seq_init(f.m, &s);
    float *lg = malloc(sizeof(float) * (size_t)np * (size_t)V);
    CHECK(model_seq_reserve(kv, &s, np, &err) == 0);
    model_batch_seq b = {.seq = &s, .tokens = p, .n_tokens = np, .logits = lg, .all_logits = true};
    CHECKF(model_forward(f.m, kv, &b, 1, &err) == 0, "%.300s", err.msg);
    model_seq_free(f.m, kv, &s);
    model_kv_pool_free(kv);

    char path[512];
    snprintf(path, sizeof path, "%s/%s", harness_model_dir(), preset);
    model *m2 = model_load(path, &(model_opts){.dtype = MODEL_DTYPE_F32, .threads = 2}, &err);
    CHECKF(m2, "%.300s", err.msg);
    engine *e = engine_create(
        m2, f.t, &(engine_opts){.kv_blocks = 24, .step_tokens = 96, .max_running = 8}, &err);
    CHECKF(e, "%.300s", err.msg);
    static out warm, other;
    go(e, f.prompts[4], f.lens[4], 1, &warm); /* prompt 5's first 240 tokens, cached */
    engine_wait_idle(e);
    plp_out o = {0};
    engine_pause(e, true);
    engine_request q = {.prompt = p,
                        .n_prompt = np,
                        .stop = {.max_tokens = 1},
                        .prompt_logprobs = true,
                        .prompt_top = 2,
                        .prompt_only = true,
                        .on_event = on_plp,
                        .user = &o};
    CHECKF(engine_submit(e, &q, &err), "%.300s", err.msg);
    go(e, f.prompts[2], f.lens[2], 1, &other);
    engine_pause(e, false);
    engine_wait_idle(e);
    CHECK(o.events == 1 && o.n == np && o.lp && o.lp[0].token == p[0]);
    double worst = 0;
    for (int i = 1; i < np && o.lp; i++) {
        const float *row = lg + (size_t)(i - 1) * V;
        double mx = row[0], sum = 0;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > mx) mx = row[v], best = v;
        for (int v = 0; v < V; v++) sum += exp(row[v] - mx);
        double want = row[p[i]] - mx - log(sum), d = fabs(o.lp[i].logprob - want);
        if (d > worst) worst = d;
        CHECKF(o.lp[i].token == p[i] && o.lp[i].n_top == 2 && o.lp[i].top[0].id == best,
               "%s: position %d", preset, i);
    }
    CHECKF(worst < 1e-3, "%s: prompt logprobs off by %g", preset, worst);
    static out alone; /* the request beside it is unchanged */
    go(e, f.prompts[2], f.lens[2], 1, &alone);
    engine_wait_idle(e);
    CHECK(other.n[0] == GEN && !memcmp(other.tok[0], alone.tok[0], sizeof(int) * GEN));
    engine_free(e);
    model_free(m2);
    free(o.lp);
    free(lg);
    unload(&f);
}

TEST(engine_model_prompt_logprobs_llama3_tiny) {
    run_prompt_logprobs("llama3-tiny");
}
TEST(engine_model_prompt_logprobs_hybrid_tiny) {
    run_prompt_logprobs("hybrid-tiny");
}
