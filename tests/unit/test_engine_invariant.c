/* test_engine_invariant.c — batch-invariant mode on every tiny preset: a
 * request's logits at every position are bit-identical (memcmp) whether it
 * runs alone in one chunk or in random chunks mixed with random other
 * requests; and through the engine with --batch-invariant, a request's
 * logprobs (top 20) are bit-identical alone and among other requests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "harness.h"
#include "model/model.h"

enum { LT = 170, NO = 3, LO = 200 };

static uint32_t rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

static bool forward_mixed(model *m, model_kv_pool *kv, const int *tok, float *lg, int V,
                          uint64_t seed) {
    di_err err;
    static int other[NO][LO];
    model_seq t, o[NO];
    model_seq_init(m, &t);
    if (model_seq_reserve(kv, &t, LT, &err)) return false;
    for (int k = 0; k < NO; k++) {
        model_seq_init(m, &o[k]);
        if (model_seq_reserve(kv, &o[k], LO, &err)) return false;
        for (int j = 0; j < LO; j++) other[k][j] = 3 + (int)(rnd(&seed) % (uint32_t)(V - 3));
    }
    static float scratch[NO][4096];
    bool ok = true;
    while (ok && t.n_past < LT) {
        model_batch_seq b[NO + 1];
        int n = 0;
        for (int k = 0; k < NO; k++) { /* random others, random chunks, random order */
            if (o[k].n_past >= LO || rnd(&seed) % 3 == 0) continue;
            int c = 1 + (int)(rnd(&seed) % 40);
            if (c > LO - o[k].n_past) c = LO - o[k].n_past;
            b[n++] = (model_batch_seq){
                &o[k], other[k] + o[k].n_past, c, V <= 4096 ? scratch[k] : NULL, false, NULL};
        }
        int c = 1 + (int)(rnd(&seed) % 48);
        if (c > LT - t.n_past) c = LT - t.n_past;
        int at = n ? (int)(rnd(&seed) % (uint32_t)(n + 1)) : 0;
        memmove(b + at + 1, b + at, sizeof *b * (size_t)(n - at));
        b[at] = (model_batch_seq){&t, tok + t.n_past, c, lg + (size_t)t.n_past * V, true, NULL};
        ok = model_forward(m, kv, b, n + 1, &err) == 0;
        if (!ok) fprintf(stderr, "%s\n", err.msg);
    }
    model_seq_free(m, kv, &t);
    for (int k = 0; k < NO; k++) model_seq_free(m, kv, &o[k]);
    return ok;
}

static void model_case(const char *preset, model_kv_type kt) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", harness_model_dir(), preset);
    CHECKF(!access(path, R_OK), "cannot load %s (run make models)", preset);
    di_err err;
    model *m = model_load(
        path, &(model_opts){.dtype = MODEL_DTYPE_F32, .kv_dtype = kt, .threads = 2}, &err);
    CHECKF(m, "%s", err.msg);
    int V = model_get_info(m)->vocab_size;
    model_kv_pool *kv = model_kv_pool_create(m, 16, &err);
    CHECK(kv);
    static int tok[LT];
    uint64_t s = 42;
    for (int j = 0; j < LT; j++) tok[j] = 3 + (int)(rnd(&s) % (uint32_t)(V - 3));
    float *alone = malloc(sizeof(float) * (size_t)LT * V);
    float *mixed = malloc(sizeof(float) * (size_t)LT * V);
    model_set_batch_invariant(m, true);

    model_seq a;
    model_seq_init(m, &a);
    CHECK(model_seq_reserve(kv, &a, LT, &err) == 0);
    model_batch_seq b = {&a, tok, LT, alone, true, NULL};
    CHECK(model_forward(m, kv, &b, 1, &err) == 0);
    model_seq_free(m, kv, &a);
    for (uint64_t seed = 1; seed <= 3; seed++) {
        CHECK(forward_mixed(m, kv, tok, mixed, V, seed * 7919));
        for (int p = 0; p < LT; p++)
            CHECKF(!memcmp(alone + (size_t)p * V, mixed + (size_t)p * V, sizeof(float) * V),
                   "%s: logits at position %d differ alone vs batched (seed %d)", preset, p,
                   (int)seed);
    }
    model_set_batch_invariant(m, false);
    CHECK(model_kv_n_free(kv) == 16);
    free(alone);
    free(mixed);
    model_kv_pool_free(kv);
    model_free(m);
}

TEST(engine_invariant_llama3_tiny) {
    model_case("llama3-tiny", MODEL_KV_AUTO);
}
TEST(engine_invariant_qwen2_tiny) {
    model_case("qwen2-tiny", MODEL_KV_AUTO);
}
TEST(engine_invariant_qwen3_tiny) {
    model_case("qwen3-tiny", MODEL_KV_AUTO);
}
TEST(engine_invariant_mistral_tiny) {
    model_case("mistral-tiny", MODEL_KV_AUTO);
}
TEST(engine_invariant_dsv2_tiny) {
    model_case("dsv2-tiny", MODEL_KV_AUTO);
}
TEST(engine_invariant_dsv3_tiny) {
    model_case("dsv3-tiny", MODEL_KV_AUTO);
}
TEST(engine_invariant_hybrid_tiny) {
    model_case("hybrid-tiny", MODEL_KV_AUTO);
}

/* bf16 cache entries: a token reads its own entry rounded whether it came in
 * this step or an earlier one, so any chunking gives the same bits. */
TEST(engine_invariant_bf16_kv_llama3_tiny) {
    model_case("llama3-tiny", MODEL_KV_BF16);
}
TEST(engine_invariant_bf16_kv_mistral_tiny) {
    model_case("mistral-tiny", MODEL_KV_BF16);
}
TEST(engine_invariant_bf16_kv_dsv3_tiny) {
    model_case("dsv3-tiny", MODEL_KV_BF16);
}
TEST(engine_invariant_bf16_kv_hybrid_tiny) {
    model_case("hybrid-tiny", MODEL_KV_BF16);
}

/* --- through the engine ------------------------------------------------------- */
enum { GEN = 8 };
typedef struct lp_out {
    float lp[GEN][21];
    int tok[GEN][21], n;
} lp_out;

static void on_lp(const engine_event *ev, void *user) {
    lp_out *o = user;
    if (ev->token < 0 || o->n >= GEN) return;
    o->lp[o->n][0] = ev->logprob;
    o->tok[o->n][0] = ev->token;
    for (int i = 0; i < ev->n_top && i < 20; i++) {
        o->lp[o->n][i + 1] = ev->top[i].logprob;
        o->tok[o->n][i + 1] = ev->top[i].id;
    }
    o->n++;
}

static void submit(engine *e, const int *p, int np, float temp, lp_out *o) {
    engine_request q = {
        .prompt = p,
        .n_prompt = np,
        .sampling = {.temperature = temp, .seed = 5, .logprobs = true, .top_logprobs = 20},
        .stop = {.max_tokens = GEN, .ignore_eos = true},
        .on_event = on_lp,
        .user = o};
    di_err err;
    engine_submit(e, &q, &err);
}

TEST(engine_invariant_engine_logprobs) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", harness_model_dir(), "llama3-tiny");
    di_err err;
    model *m = model_load(path, &(model_opts){.dtype = MODEL_DTYPE_F32, .threads = 2}, &err);
    CHECKF(m, "cannot load llama3-tiny (run make models)");
    int V = model_get_info(m)->vocab_size;
    static int p[5][300];
    uint64_t s = 9;
    for (int k = 0; k < 5; k++)
        for (int j = 0; j < 300; j++) p[k][j] = 3 + (int)(rnd(&s) % (uint32_t)(V - 3));
    engine *e = engine_create(
        m, NULL,
        &(engine_opts){
            .kv_blocks = 24, .step_tokens = 70, .no_prefix_cache = true, .batch_invariant = true},
        &err);
    CHECKF(e, "%s", err.msg);
    static lp_out alone, with[5];
    memset(&alone, 0, sizeof alone);
    memset(with, 0, sizeof with);
    submit(e, p[0], 250, 0.8f, &alone);
    engine_wait_idle(e);
    engine_pause(e, true); /* all five in the same steps */
    for (int k = 1; k < 5; k++) submit(e, p[k], 50 + 60 * k, 0.8f, &with[k]);
    submit(e, p[0], 250, 0.8f, &with[0]);
    engine_pause(e, false);
    engine_wait_idle(e);
    CHECK(alone.n == GEN && with[0].n == GEN);
    CHECKF(!memcmp(&alone, &with[0], sizeof alone), "logprobs differ alone vs batched");
    engine_free(e);
    model_free(m);
}
