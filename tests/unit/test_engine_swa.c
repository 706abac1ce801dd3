/* test_engine_swa.c — sliding-window state: the SWA snapshot cache (LRU
 * bound), ring snapshots that restore exactly, replay over a cached prefix
 * on hybrid-tiny (exact replay == no cache within the reference tolerance;
 * the bounded replay's difference is measured and printed), and the engine
 * end to end on the SWA presets with the prefix cache on: restored and
 * replayed hits give the no-cache greedy output, stats count the replay. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/swa_cache.h"
#include "harness.h"
#include "model/model.h"

/* --- the cache ------------------------------------------------------------ */
static int n_freed;
static void count_free(void *v) {
    n_freed++;
    free(v);
}

TEST(engine_swa_cache_lru_bound) {
    n_freed = 0;
    swc *c = swc_create(1000, count_free);
    for (uint64_t k = 1; k <= 300; k++) swc_put(c, k * 0x9E3779B97F4A7C15ull, malloc(8), 100);
    swc_stats s = swc_get_stats(c);
    CHECKF(s.entries == 10 && s.bytes == 1000, "%d entries, %zu bytes", s.entries, s.bytes);
    CHECK(s.evictions == 290 && n_freed == 290);
    /* The 10 most recent survive; touching the oldest keeps it over a newer one. */
    CHECK(!swc_has(c, 290 * 0x9E3779B97F4A7C15ull) && swc_has(c, 291 * 0x9E3779B97F4A7C15ull));
    CHECK(swc_get(c, 291 * 0x9E3779B97F4A7C15ull));
    swc_put(c, 7, malloc(8), 100);
    CHECK(swc_has(c, 291 * 0x9E3779B97F4A7C15ull) && !swc_has(c, 292 * 0x9E3779B97F4A7C15ull));
    /* Replacing a key frees the old value; an oversized value is not kept. */
    swc_put(c, 7, malloc(8), 50);
    CHECK(n_freed == 292 && swc_get_stats(c).bytes == 950);
    swc_put(c, 8, malloc(8), 5000);
    CHECK(!swc_has(c, 8) && n_freed == 293);
    CHECK(!swc_get(c, 12345) && swc_get_stats(c).misses == 1);
    swc_free(c);
    CHECK(n_freed == 293 + 10);
}

/* --- the model: snapshots and replay --------------------------------------- */
static model *load(const char *preset, model_kv_type kt) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", harness_model_dir(), preset);
    if (access(path, R_OK)) return NULL;
    di_err err;
    model *m = model_load(
        path, &(model_opts){.dtype = MODEL_DTYPE_F32, .kv_dtype = kt, .threads = 1}, &err);
    if (!m) fprintf(stderr, "%s: %s\n", preset, err.msg);
    return m;
}

enum { NP = 300, HIT = 256 };

static void prompt(int *p, int n, int vocab) {
    for (int j = 0; j < n; j++) p[j] = 3 + (j * 37 + j * j * 11 + 5) % (vocab - 3);
}

static float max_abs(const float *a, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fabsf(a[i]) > m ? fabsf(a[i]) : m;
    return m;
}
static float max_diff(const float *a, const float *b, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fabsf(a[i] - b[i]) > m ? fabsf(a[i] - b[i]) : m;
    return m;
}

/* Logits after tokens[0..NP) where the first HIT positions come from a cached
 * prefix (the blocks of `src`) and the rings are rebuilt by replaying the last
 * `replay` tokens of the prefix. */
static int replayed_logits(model *m, model_kv_pool *kv, const model_seq *src, const int *tok,
                           int replay, float *logits) {
    model_seq s;
    model_seq_init(m, &s);
    di_err err;
    if (model_seq_reserve(kv, &s, NP, &err)) return -1;
    for (int i = 0; i < HIT / MODEL_KV_BLOCK; i++) {
        model_kv_release(kv, s.blocks[i]); /* share the cached prefix blocks instead */
        s.blocks[i] = src->blocks[i];
    }
    s.n_past = s.swa_floor = HIT - replay;
    s.kv_keep_end = HIT;
    model_batch_seq b = {&s, tok + HIT - replay, replay, NULL, false, NULL};
    int rc = model_forward(m, kv, &b, 1, &err);
    b = (model_batch_seq){&s, tok + HIT, NP - HIT, logits, false, NULL};
    rc = rc || model_forward(m, kv, &b, 1, &err);
    for (int i = HIT / MODEL_KV_BLOCK; i < s.n_blocks; i++) model_kv_release(kv, s.blocks[i]);
    model_seq_free(m, NULL, &s);
    return rc;
}

static void replay_case(model_kv_type kt) {
    model *m = load("hybrid-tiny", kt);
    CHECKF(m, "cannot load hybrid-tiny (run make models)");
    const model_info *in = model_get_info(m);
    CHECKF(in->n_swa_layers == 2 && in->sliding_window == 16, "%d SWA layers, window %d",
           in->n_swa_layers, in->sliding_window);
    int V = in->vocab_size;
    di_err err;
    model_kv_pool *kv = model_kv_pool_create(m, 16, &err);
    CHECK(kv);
    static int tok[NP];
    prompt(tok, NP, V);
    float *ref = malloc(sizeof(float) * (size_t)V), *got = malloc(sizeof(float) * (size_t)V);

    /* No cache: the whole prompt (the cached prefix's blocks are A's). */
    model_seq a;
    model_seq_init(m, &a);
    CHECK(model_seq_reserve(kv, &a, NP, &err) == 0);
    model_batch_seq b = {&a, tok, HIT, NULL, false, NULL};
    CHECK(model_forward(m, kv, &b, 1, &err) == 0);
    model_swa_state *snap = model_swa_save(m, &a);
    CHECK(snap && model_swa_state_pos(snap) == HIT && model_swa_state_bytes(snap) > 0);
    b = (model_batch_seq){&a, tok + HIT, NP - HIT, ref, false, NULL};
    CHECK(model_forward(m, kv, &b, 1, &err) == 0);
    float tol = 1e-4f * max_abs(ref, V);

    /* A restored snapshot continues exactly like the original. */
    model_seq r;
    model_seq_init(m, &r);
    CHECK(model_seq_reserve(kv, &r, NP, &err) == 0);
    for (int i = 0; i < HIT / MODEL_KV_BLOCK; i++)
        model_kv_copy_block(kv, r.blocks[i], a.blocks[i]);
    model_swa_restore(m, &r, snap);
    CHECK(r.n_past == HIT);
    b = (model_batch_seq){&r, tok + HIT, NP - HIT, got, false, NULL};
    CHECK(model_forward(m, kv, &b, 1, &err) == 0);
    CHECKF(max_diff(ref, got, V) <= tol, "restored snapshot: %g", max_diff(ref, got, V));
    model_seq_free(m, kv, &r);
    model_swa_state_free(snap);

    /* Exact replay (window x SWA depth) matches no cache; bounded ones are
     * measured. The full layers' cached entries must not change. */
    size_t bb = model_kv_block_bytes(m);
    int exact = in->sliding_window * in->n_swa_layers;
    int lens[] = {exact, 128, 16, 8};
    for (int i = 0; i < 4; i++) {
        CHECK(replayed_logits(m, kv, &a, tok, lens[i], got) == 0);
        float d = max_diff(ref, got, V);
        fprintf(
            stderr,
            "  hybrid-tiny replay of %3d tokens%s: max |logit diff| %.3g (%.3g of max|logit|)\n",
            lens[i], i == 0 ? " (exact)" : "", d, d / max_abs(ref, V));
        if (lens[i] >= exact) CHECKF(d <= tol, "replay of %d tokens: %g > %g", lens[i], d, tol);
    }
    (void)bb;
    free(ref);
    free(got);
    model_seq_free(m, kv, &a);
    CHECK(model_kv_n_free(kv) == 16);
    model_kv_pool_free(kv);
    model_free(m);
}

TEST(engine_swa_replay_hybrid_tiny) {
    replay_case(MODEL_KV_AUTO);
}
TEST(engine_swa_replay_bf16_kv_hybrid_tiny) {
    replay_case(MODEL_KV_BF16);
}

/* --- the engine ------------------------------------------------------------- */
enum { GEN = 10 };
typedef struct out {
    int tok[4][GEN];
    int n[4], cached, done;
} out;

static void on_ev(const engine_event *ev, void *user) {
    out *o = user;
    if (ev->token >= 0 && o->n[ev->index] < GEN) o->tok[ev->index][o->n[ev->index]++] = ev->token;
    if (ev->finish != ENGINE_FINISH_NONE) {
        o->cached = ev->usage.cached_tokens;
        o->done++;
    }
}

static void run(engine *e, const int *p, int np, int n, out *o) {
    memset(o, 0, sizeof *o);
    engine_request q = {.prompt = p,
                        .n_prompt = np,
                        .stop = {.max_tokens = GEN, .ignore_eos = true},
                        .n = n,
                        .on_event = on_ev,
                        .user = o};
    di_err err;
    engine_submit(e, &q, &err);
    engine_wait_idle(e);
}

static void engine_case(const char *preset, model_kv_type kt) {
    model *m = load(preset, kt);
    CHECKF(m, "cannot load %s (run make models)", preset);
    int V = model_get_info(m)->vocab_size;
    static int p[NP + 40];
    prompt(p, NP + 40, V);
    p[NP + 20] = 7; /* the second prompt shares the first NP tokens */
    static out ref1, ref2, o;
    di_err err;
    engine_opts base = {.kv_blocks = 16, .step_tokens = 96, .max_running = 8};
    engine_opts nc = base;
    nc.no_prefix_cache = true;
    engine *e = engine_create(m, NULL, &nc, &err);
    CHECKF(e, "%s", err.msg);
    run(e, p, NP, 1, &ref1);
    run(e, p, NP + 40, 1, &ref2);
    engine_free(e);

    /* Cache on: the second prompt hits 256 tokens and restores the rings. */
    e = engine_create(m, NULL, &base, &err);
    CHECK(e);
    run(e, p, NP, 1, &o);
    CHECK(!memcmp(o.tok[0], ref1.tok[0], sizeof o.tok[0]));
    run(e, p, NP + 40, 1, &o);
    engine_stats s = engine_get_stats(e);
    CHECKF(o.cached == HIT && s.swa_restores == 1 && s.swa_replays == 0,
           "%s: cached %d, %lld restores, %lld replays", preset, o.cached, s.swa_restores,
           s.swa_replays);
    CHECKF(!memcmp(o.tok[0], ref2.tok[0], sizeof o.tok[0]), "%s: restored hit changed output",
           preset);
    /* n > 1 forks the rings: every branch is the greedy output. */
    run(e, p, NP, 3, &o);
    for (int b = 0; b < 3; b++)
        CHECKF(!memcmp(o.tok[b], ref1.tok[0], sizeof o.tok[0]), "%s: branch %d", preset, b);
    s = engine_get_stats(e);
    CHECK(s.blocks_used == 0 && s.swa_cache_entries > 0);
    engine_free(e);

    /* No room for snapshots: every hit replays (exact: window x depth). */
    engine_opts ex = base;
    ex.swa_cache_bytes = 1;
    ex.swa_replay_exact = true;
    e = engine_create(m, NULL, &ex, &err);
    CHECK(e);
    run(e, p, NP, 1, &o);
    run(e, p, NP + 40, 1, &o);
    s = engine_get_stats(e);
    const model_info *in = model_get_info(m);
    long long want = in->sliding_window * in->n_swa_layers;
    CHECKF(s.swa_replays == 1 && s.swa_replayed_tokens == want && s.swa_restores == 0,
           "%s: %lld replays of %lld tokens", preset, s.swa_replays, s.swa_replayed_tokens);
    CHECKF(!memcmp(o.tok[0], ref2.tok[0], sizeof o.tok[0]), "%s: exact replay changed output",
           preset);
    engine_free(e);

    /* Bounded replay (the default 128 tokens) counts its tokens. */
    engine_opts bo = base;
    bo.swa_cache_bytes = 1;
    e = engine_create(m, NULL, &bo, &err);
    CHECK(e);
    run(e, p, NP, 1, &o);
    run(e, p, NP + 40, 1, &o);
    s = engine_get_stats(e);
    CHECKF(s.swa_replays == 1 && s.swa_replayed_tokens == 128, "%s: %lld replayed tokens", preset,
           s.swa_replayed_tokens);
    CHECK(o.n[0] == GEN && s.blocks_used == 0);
    engine_free(e);
    model_free(m);
}

TEST(engine_swa_hybrid_tiny) {
    engine_case("hybrid-tiny", MODEL_KV_AUTO);
}
TEST(engine_swa_mistral_tiny) {
    engine_case("mistral-tiny", MODEL_KV_AUTO);
}
/* Snapshots, forks and replays of bf16 rings. */
TEST(engine_swa_bf16_kv_hybrid_tiny) {
    engine_case("hybrid-tiny", MODEL_KV_BF16);
}
