/* test_deepseek.c — the DeepSeek family: MoE routing rules per version on
 * hand-made router scores, MoE batching against a naive per-token reference,
 * MLA absorbed == expanded attention, prefill == decode == chunked logits on
 * the tiny DeepSeek models (dsv2-tiny, dsv3-tiny, hybrid-tiny), and MTP. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "model/deepseek.h"

/* --- routing ---------------------------------------------------------------- */

static model_config route_cfg(model_score_fn sf, model_topk_method tm, int E, int K, int G, int TG,
                              bool norm, float rsf) {
    model_config c;
    memset(&c, 0, sizeof c);
    c.arch = tm == TOPK_NOAUX_TC ? ARCH_DEEPSEEK_V3 : ARCH_DEEPSEEK_V2;
    c.scoring_func = sf;
    c.topk_method = tm;
    c.n_routed_experts = E;
    c.num_experts_per_tok = K;
    c.n_group = G;
    c.topk_group = TG;
    c.norm_topk_prob = norm;
    c.routed_scaling_factor = rsf;
    return c;
}

static void softmax_d(const float *x, double *p, int n) {
    double mx = x[0], s = 0;
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) s += p[i] = exp(x[i] - mx);
    for (int i = 0; i < n; i++) p[i] /= s;
}

static double sigm(double x) {
    return 1.0 / (1.0 + exp(-x));
}

/* idx as a set equals want (order free); weights match by expert. */
static bool route_is(const int *idx, const float *w, int K, const int *want, const double *ww) {
    for (int i = 0; i < K; i++) {
        int found = -1;
        for (int j = 0; j < K; j++)
            if (idx[j] == want[i]) found = j;
        if (found < 0) return false;
        if (fabs(w[found] - ww[i]) > 1e-6 * (1 + fabs(ww[i]))) return false;
    }
    return true;
}

TEST(ds_route_v2_greedy_scales_unnormalised) {
    float lg[8] = {0.1f, 2.0f, -1.0f, 1.5f, 0.3f, 1.9f, 0.0f, -2.0f};
    double p[8];
    softmax_d(lg, p, 8);
    float sc[32], w[3];
    int idx[3];
    model_config c = route_cfg(SCORE_SOFTMAX, TOPK_GREEDY, 8, 3, 1, 1, false, 2.0f);
    moe_route(&c, lg, NULL, sc, idx, w);
    int want[3] = {1, 5, 3};
    double ww[3] = {2 * p[1], 2 * p[5], 2 * p[3]};
    CHECKF(route_is(idx, w, 3, want, ww), "got %d %d %d / %g %g %g", idx[0], idx[1], idx[2], w[0],
           w[1], w[2]);
    /* norm_topk_prob with top_k > 1: normalised, NOT scaled. */
    c.norm_topk_prob = true;
    moe_route(&c, lg, NULL, sc, idx, w);
    double s = p[1] + p[5] + p[3];
    double wn[3] = {p[1] / s, p[5] / s, p[3] / s};
    CHECKF(route_is(idx, w, 3, want, wn), "normalised: %g %g %g", w[0], w[1], w[2]);
    /* top_k == 1 ignores norm_topk_prob and scales (HF: top_k > 1 and norm). */
    c.num_experts_per_tok = 1;
    moe_route(&c, lg, NULL, sc, idx, w);
    double w1[1] = {2 * p[1]};
    CHECKF(route_is(idx, w, 1, want, w1), "top-1: %d %g", idx[0], w[0]);
}

TEST(ds_route_v2_group_limited_drops_groups) {
    /* 4 groups of 2; group score = max. The 3 best experts sit in 3 groups,
     * but only 2 groups survive: the third pick comes from a kept group. */
    float lg[8] = {5.0f, -3.0f, 4.9f, -2.0f, 4.8f, -3.0f, -3.0f, -3.0f};
    double p[8];
    softmax_d(lg, p, 8);
    float sc[32], w[3];
    int idx[3];
    model_config c = route_cfg(SCORE_SOFTMAX, TOPK_GROUP_LIMITED, 8, 3, 4, 2, false, 1.5f);
    moe_route(&c, lg, NULL, sc, idx, w);
    int want[3] = {0, 2, 3};
    double ww[3] = {1.5 * p[0], 1.5 * p[2], 1.5 * p[3]};
    CHECKF(route_is(idx, w, 3, want, ww), "got %d %d %d", idx[0], idx[1], idx[2]);
    /* greedy on the same scores takes expert 4 */
    c.topk_method = TOPK_GREEDY;
    moe_route(&c, lg, NULL, sc, idx, w);
    int want_g[3] = {0, 2, 4};
    double wg[3] = {1.5 * p[0], 1.5 * p[2], 1.5 * p[4]};
    CHECKF(route_is(idx, w, 3, want_g, wg), "greedy got %d %d %d", idx[0], idx[1], idx[2]);
}

TEST(ds_route_v3_bias_chooses_but_does_not_weigh) {
    /* 2 groups of 4, keep 1. Choice = sigmoid + bias:
     *   group 0: 0.9 0.1 0.1 0.1  (max 0.9, top-2 sum 1.0)
     *   group 1: 0.6 0.59 0.1 0.1 (max 0.6, top-2 sum 1.19)
     * V3 ranks groups by the top-2 sum: group 1 wins, experts 4 and 5. */
    float lg[8] = {0, 0, 0, 0, 1.0f, -1.0f, 0, 0};
    float bias[8];
    float choice[8] = {0.9f, 0.1f, 0.1f, 0.1f, 0.6f, 0.59f, 0.1f, 0.1f};
    for (int e = 0; e < 8; e++) bias[e] = choice[e] - (float)sigm(lg[e]);
    float sc[32], w[2];
    int idx[2];
    model_config c = route_cfg(SCORE_SIGMOID, TOPK_NOAUX_TC, 8, 2, 2, 1, true, 2.5f);
    moe_route(&c, lg, bias, sc, idx, w);
    double s4 = sigm(1.0), s5 = sigm(-1.0), sum = s4 + s5 + 1e-20;
    int want[2] = {4, 5};
    double ww[2] = {2.5 * s4 / sum, 2.5 * s5 / sum}; /* original scores, normed, then scaled */
    CHECKF(route_is(idx, w, 2, want, ww), "got %d %d / %g %g", idx[0], idx[1], w[0], w[1]);
    /* without normalisation: the sigmoid scores times the factor */
    c.norm_topk_prob = false;
    moe_route(&c, lg, bias, sc, idx, w);
    double wu[2] = {2.5 * s4, 2.5 * s5};
    CHECKF(route_is(idx, w, 2, want, wu), "unnormalised: %g %g", w[0], w[1]);
    /* without the bias expert 4 and (tie-break) a group-0 expert can't both
     * come: group 0 (0.5+0.5 = 1.0) vs group 1 (0.731 + 0.5) -> group 1, and
     * the chosen are 4 and the best of 6/7 (equal: lower id 6). */
    c.norm_topk_prob = true;
    moe_route(&c, lg, NULL, sc, idx, w);
    double s6 = 0.5, sum2 = s4 + s6 + 1e-20;
    int want2[2] = {4, 6};
    double ww2[2] = {2.5 * s4 / sum2, 2.5 * s6 / sum2};
    CHECKF(route_is(idx, w, 2, want2, ww2), "no bias: %d %d", idx[0], idx[1]);
}

TEST(ds_route_v3_single_group_is_plain_topk) {
    float lg[8] = {0.3f, -0.2f, 0.8f, 0.1f, 0.7f, -1.0f, 0.2f, 0.0f};
    float bias[8] = {0, 0, -0.3f, 0, 0, 0, 0.2f, 0};
    float sc[32], w[2];
    int idx[2];
    model_config c = route_cfg(SCORE_SIGMOID, TOPK_NOAUX_TC, 8, 2, 1, 1, true, 1.5f);
    moe_route(&c, lg, bias, sc, idx, w);
    /* choice: 4 (0.668), 6 (0.550+0.2=0.750), 2 (0.690-0.3) -> 6 and 4 */
    double s6 = sigm(0.2), s4 = sigm(0.7), sum = s6 + s4 + 1e-20;
    int want[2] = {6, 4};
    double ww[2] = {1.5 * s6 / sum, 1.5 * s4 / sum};
    CHECKF(route_is(idx, w, 2, want, ww), "got %d %d", idx[0], idx[1]);
}

/* --- MoE execution -------------------------------------------------------- */

static unsigned ds_rng = 12345;
static float ds_rand(void) { /* uniform in [-1, 1) */
    ds_rng = ds_rng * 1664525u + 1013904223u;
    return (float)((ds_rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static kern_mat rand_mat(int rows, int cols, float scale, float **keep) {
    float *d = malloc(sizeof(float) * (size_t)rows * cols);
    for (int i = 0; i < rows * cols; i++) d[i] = ds_rand() * scale;
    *keep = d;
    kern_mat W = {.dtype = KT_F32, .rows = rows, .cols = cols, .data = d};
    return W;
}

/* A MoE layer of E random experts and one shared expert (hidden D,
 * intermediate I): gate and up weights in [-in, in), down in [-down, down),
 * the router in [-router, router); the arrays it allocates go to keep[*nk..]. */
static void rand_moe_layer(model_layer *L, kern_mat *eg, kern_mat *eu, kern_mat *ed, int E, int D,
                           int I, float in, float down, float router, float **keep, int *nk) {
    memset(L, 0, sizeof *L);
    for (int e = 0; e < E; e++) {
        eg[e] = rand_mat(I, D, in, &keep[(*nk)++]);
        eu[e] = rand_mat(I, D, in, &keep[(*nk)++]);
        ed[e] = rand_mat(D, I, down, &keep[(*nk)++]);
    }
    L->moe = true;
    L->exp_gate = eg;
    L->exp_up = eu;
    L->exp_down = ed;
    L->router = rand_mat(E, D, router, &keep[(*nk)++]);
    L->sh_gate = rand_mat(I, D, in, &keep[(*nk)++]);
    L->sh_up = rand_mat(I, D, in, &keep[(*nk)++]);
    L->sh_down = rand_mat(D, I, down, &keep[(*nk)++]);
}

/* A model with no weights and no pool whose config routes a rand_moe_layer:
 * E experts, top K of sigmoid scores (noaux_tc) in G groups, the best one kept,
 * normalized and scaled by `scale`; hidden D, intermediate I, one shared
 * expert. */
static void moe_model(model *m, int E, int K, int G, int D, int I, float scale) {
    memset(m, 0, sizeof *m);
    m->cfg = route_cfg(SCORE_SIGMOID, TOPK_NOAUX_TC, E, K, G, 1, true, scale);
    m->cfg.hidden_size = D;
    m->cfg.moe_intermediate_size = I;
    m->cfg.n_shared_experts = 1;
}

static void naive_swiglu(const kern_mat *g, const kern_mat *u, const kern_mat *dn, const float *x,
                         double *acc, double wt) {
    int I = g->rows, D = g->cols;
    const float *G = g->data, *U = u->data, *Dn = dn->data;
    double *h = malloc(sizeof(double) * (size_t)I);
    for (int i = 0; i < I; i++) {
        double a = 0, b = 0;
        for (int j = 0; j < D; j++) {
            a += (double)G[i * D + j] * x[j];
            b += (double)U[i * D + j] * x[j];
        }
        h[i] = a / (1 + exp(-a)) * b;
    }
    for (int r = 0; r < D; r++) {
        double s = 0;
        for (int i = 0; i < I; i++) s += (double)Dn[r * I + i] * h[i];
        acc[r] += wt * s;
    }
    free(h);
}

TEST(ds_moe_batched_matches_per_token_and_naive) {
    kern_init();
    enum { D = 48, E = 8, K = 2, I = 24, N = 21 };
    model m;
    moe_model(&m, E, K, 2, D, I, 1.5f);
    m.pool = pool_create(2);
    float *keep[3 * E + 8];
    int nk = 0;
    model_layer L;
    kern_mat eg[E], eu[E], ed[E];
    rand_moe_layer(&L, eg, eu, ed, E, D, I, 0.3f, 0.3f, 0.5f, keep, &nk);
    float bias[E];
    for (int e = 0; e < E; e++) bias[e] = 0.1f * ds_rand();
    L.e_bias = bias;

    float *x = malloc(sizeof(float) * N * D), *yb = malloc(sizeof(float) * N * D),
          *y1 = malloc(sizeof(float) * N * D);
    for (int i = 0; i < N * D; i++) x[i] = ds_rand();
    moe_ffn(&m, &L, x, yb, N); /* many active experts: parallel expert tasks */
    for (int t = 0; t < N; t++) moe_ffn(&m, &L, x + t * D, y1 + t * D, 1);

    double worst_b = 0, worst_n = 0, scale = 0;
    for (int t = 0; t < N; t++) {
        const float *xt = x + t * D;
        float lg[E], sc[4 * E], w[K];
        int idx[K];
        const float *R = L.router.data;
        for (int e = 0; e < E; e++) {
            double s = 0;
            for (int j = 0; j < D; j++) s += (double)R[e * D + j] * xt[j];
            lg[e] = (float)s;
        }
        moe_route(&m.cfg, lg, bias, sc, idx, w);
        double acc[D] = {0};
        naive_swiglu(&L.sh_gate, &L.sh_up, &L.sh_down, xt, acc, 1.0);
        for (int k = 0; k < K; k++)
            naive_swiglu(&eg[idx[k]], &eu[idx[k]], &ed[idx[k]], xt, acc, w[k]);
        for (int r = 0; r < D; r++) {
            scale = fmax(scale, fabs(acc[r]));
            worst_n = fmax(worst_n, fabs(acc[r] - yb[t * D + r]));
            worst_b = fmax(worst_b, fabs((double)y1[t * D + r] - yb[t * D + r]));
        }
    }
    for (int i = 0; i < nk; i++) free(keep[i]);
    free(x);
    free(yb);
    free(y1);
    pool_free(m.pool);
    CHECKF(worst_n <= 1e-5 * scale, "batched vs naive: %g (scale %g)", worst_n, scale);
    CHECKF(worst_b <= 1e-5 * scale, "batched vs per-token: %g (scale %g)", worst_b, scale);
}

/* One token's experts are one pool_for over their rows laid end to end:
 * whatever the threads and however the bands fall, the same bits as on one
 * thread. Rows of 4 KB (f32, 1024 columns), so the 64 KB grains cut the
 * 32-row gate and up matrices apart and the 1024-row downs into many. */
TEST(ds_moe_one_token_same_bits_on_any_threads) {
    kern_init();
    enum { D = 1024, E = 4, K = 2, I = 32 };
    model m;
    moe_model(&m, E, K, 1, D, I, 1.0f);
    float *keep[3 * E + 4];
    int nk = 0;
    model_layer L;
    kern_mat eg[E], eu[E], ed[E];
    rand_moe_layer(&L, eg, eu, ed, E, D, I, 0.05f, 0.3f, 0.05f, keep, &nk);
    float x[D], y0[D], y[D];
    for (int i = 0; i < D; i++) x[i] = ds_rand();
    moe_ffn(&m, &L, x, y0, 1); /* no pool: one thread, whole matrices */
    static const int threads[] = {1, 2, 3, 4};
    for (int k = 0; k < 4; k++) {
        m.pool = pool_create(threads[k]);
        for (int rep = 0; rep < 20; rep++) {
            moe_ffn(&m, &L, x, y, 1);
            CHECKF(!memcmp(y, y0, sizeof y), "%d threads, run %d", threads[k], rep);
        }
        pool_free(m.pool);
    }
    for (int i = 0; i < nk; i++) free(keep[i]);
}

/* --- tiny models ------------------------------------------------------------ */

static model *ds_load(const char *name, model_dtype dt) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", harness_model_dir(), name);
    model_opts o = {.dtype = dt, .threads = 2};
    di_err e = {{0}};
    model *m = model_load(dir, &o, &e);
    if (!m) fprintf(stderr, "  %s: %s\n", dir, e.msg);
    return m;
}

static double max_abs(const float *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Runs layer l's MLA over a T-token chunk at positions p0.. of a fresh
 * sequence, both paths, and a 1-token step after it, both paths. */
static void mla_paths_agree(const char *name, model_dtype dt, int l, int T) {
    model *m = ds_load(name, dt);
    CHECK(m);
    di_err e = {{0}};
    model_kv_pool *kv = model_kv_pool_create(m, 4, &e);
    CHECK(kv);
    model_seq s;
    model_seq_init(m, &s);
    CHECK(model_seq_reserve(kv, &s, T + 1, &e) == 0);
    int D = m->cfg.hidden_size;
    float *x = malloc(sizeof(float) * (size_t)(T + 1) * D);
    float *o1 = malloc(sizeof(float) * (size_t)T * D), *o2 = malloc(sizeof(float) * (size_t)T * D);
    float *stage = malloc(sizeof(float) * (size_t)(T + 1) * model_kv_entry_floats(m, l));
    for (int i = 0; i < (T + 1) * D; i++) x[i] = ds_rand();
    int *pos = malloc(sizeof(int) * (size_t)T), *seq_of = calloc((size_t)T, sizeof(int));
    int *toks = calloc((size_t)T, sizeof(int)), first = 0;
    for (int t = 0; t < T; t++) pos[t] = t;
    model_batch_seq bs = {.seq = &s, .tokens = toks, .n_tokens = T};
    model_step st = {.kv = kv,
                     .batch = &bs,
                     .n_batch = 1,
                     .n_tokens = T,
                     .pos = pos,
                     .seq_of = seq_of,
                     .first = &first,
                     .scratch = stage};
    mla_attention_path(m, &st, l, x, o1, MLA_PATH_EXPANDED);
    mla_attention_path(m, &st, l, x, o2, MLA_PATH_ABSORBED);
    double sc = max_abs(o1, (size_t)T * D), d = max_diff(o1, o2, (size_t)T * D);
    s.n_past = T;
    pos[0] = T;
    bs.n_tokens = 1;
    st.n_tokens = 1;
    mla_attention_path(m, &st, l, x + (size_t)T * D, o1, MLA_PATH_EXPANDED);
    mla_attention_path(m, &st, l, x + (size_t)T * D, o2, MLA_PATH_ABSORBED);
    double sc1 = max_abs(o1, (size_t)D), d1 = max_diff(o1, o2, (size_t)D);
    model_seq_free(m, kv, &s);
    model_kv_pool_free(kv);
    model_free(m);
    free(x), free(o1), free(o2), free(stage), free(pos), free(seq_of), free(toks);
    /* bf16: the paths round different operands to bf16 (the latent, the
     * absorbed query), so they agree to about bf16's precision */
    double tol = dt == MODEL_DTYPE_BF16 ? 1e-2 : 1e-5;
    CHECKF(sc > 0 && d <= tol * sc, "%s layer %d chunk: |expanded - absorbed| %g of %g", name, l, d,
           sc);
    CHECKF(sc1 > 0 && d1 <= tol * sc1, "%s layer %d step: |expanded - absorbed| %g of %g", name, l,
           d1, sc1);
}

TEST(ds_mla_absorbed_equals_expanded) {
    mla_paths_agree("dsv2-tiny", MODEL_DTYPE_F32, 1, 37);   /* q_proj, YaRN */
    mla_paths_agree("dsv3-tiny", MODEL_DTYPE_F32, 2, 37);   /* q_lora, fp8 weights */
    mla_paths_agree("dsv3-tiny", MODEL_DTYPE_BF16, 0, 20);  /* bf16 absorbed matrices */
    mla_paths_agree("hybrid-tiny", MODEL_DTYPE_F32, 0, 30); /* sliding window 16 */
    mla_paths_agree("hybrid-tiny", MODEL_DTYPE_F32, 3, 30);
}

/* Logits of n tokens fed as chunks of `chunk` (all rows). */
static int run_chunks(model *m, model_kv_pool *kv, const int *ids, int n, int chunk, float *out) {
    di_err e = {{0}};
    model_seq s;
    model_seq_init(m, &s);
    int V = m->cfg.vocab_size, rc = 0;
    for (int i = 0; i < n && !rc; i += chunk) {
        int c = n - i < chunk ? n - i : chunk;
        rc = model_seq_reserve(kv, &s, i + c, &e);
        model_batch_seq b = {.seq = &s,
                             .tokens = ids + i,
                             .n_tokens = c,
                             .logits = out + (size_t)i * V,
                             .all_logits = true};
        if (!rc) rc = model_forward(m, kv, &b, 1, &e);
    }
    if (rc) fprintf(stderr, "  forward: %s\n", e.msg);
    model_seq_free(m, kv, &s);
    return rc;
}

static void prefill_matches_decode(const char *name) {
    enum { N = 45 };
    model *m = ds_load(name, MODEL_DTYPE_F32);
    CHECK(m);
    di_err e = {{0}};
    model_kv_pool *kv = model_kv_pool_create(m, 8, &e);
    CHECK(kv);
    int V = m->cfg.vocab_size, ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int)((unsigned)(i * 7919 + 13) % 500u);
    float *full = malloc(sizeof(float) * N * V), *step = malloc(sizeof(float) * N * V),
          *chunk = malloc(sizeof(float) * N * V);
    int rc = run_chunks(m, kv, ids, N, N, full) | run_chunks(m, kv, ids, N, 1, step) |
             run_chunks(m, kv, ids, N, 7, chunk);

    /* Mixed step: one sequence decoding (absorbed) beside one prefilling
     * (expanded), then compare with the single-sequence rows. */
    model_seq a, b;
    model_seq_init(m, &a);
    model_seq_init(m, &b);
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    const int P = 30;
    rc |= model_seq_reserve(kv, &a, P + 1, &e) | model_seq_reserve(kv, &b, P + 1, &e);
    model_batch_seq b1 = {.seq = &a, .tokens = ids, .n_tokens = P};
    rc |= model_forward(m, kv, &b1, 1, &e);
    model_batch_seq b2[2] = {{.seq = &a, .tokens = ids + P, .n_tokens = 1, .logits = la},
                             {.seq = &b, .tokens = ids, .n_tokens = P + 1, .logits = lb}};
    rc |= model_forward(m, kv, b2, 2, &e);
    model_seq_free(m, kv, &a);
    model_seq_free(m, kv, &b);
    model_kv_pool_free(kv);
    model_free(m);

    double sc = max_abs(full, (size_t)N * V);
    double d1 = max_diff(full, step, (size_t)N * V), d2 = max_diff(full, chunk, (size_t)N * V);
    double d3 = max_diff(full + (size_t)P * V, la, V), d4 = max_diff(full + (size_t)P * V, lb, V);
    free(full), free(step), free(chunk), free(la), free(lb);
    CHECKF(rc == 0, "%s: forward failed", name);
    fprintf(stderr,
            "  %s: max|logit| %.3g, prefill vs decode %.2g, vs chunks of 7 %.2g, mixed "
            "step %.2g / %.2g\n",
            name, sc, d1, d2, d3, d4);
    CHECKF(sc > 0 && d1 <= 1e-5 * sc, "%s: prefill vs step-by-step %g of %g", name, d1, sc);
    CHECKF(d2 <= 1e-5 * sc, "%s: prefill vs chunks %g of %g", name, d2, sc);
    CHECKF(d3 <= 1e-5 * sc && d4 <= 1e-5 * sc, "%s: mixed batch %g %g of %g", name, d3, d4, sc);
}

TEST(ds_prefill_equals_decode_dsv2) {
    prefill_matches_decode("dsv2-tiny");
}
TEST(ds_prefill_equals_decode_dsv3) {
    prefill_matches_decode("dsv3-tiny");
}
TEST(ds_prefill_equals_decode_hybrid) {
    prefill_matches_decode("hybrid-tiny");
}

TEST(ds_mtp_runs_and_advances) {
    enum { N = 12 };
    model *m = ds_load("dsv3-tiny", MODEL_DTYPE_F32);
    CHECK(m);
    CHECK(model_get_info(m)->n_mtp_layers == 1);
    di_err e = {{0}};
    model_kv_pool *kv = model_kv_pool_create(m, 2, &e);
    CHECK(kv);
    int V = m->cfg.vocab_size, D = m->cfg.hidden_size, ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + 5) % 500;
    float *hid = malloc(sizeof(float) * D), *ho = malloc(sizeof(float) * D);
    float *lg = malloc(sizeof(float) * V), *mt = malloc(sizeof(float) * (N - 1) * V);
    int rc = 0;
    for (int round = 0; round < 2 && !rc; round++) {
        model_seq s;
        model_seq_init(m, &s);
        for (int i = 0; i < N - 1 && !rc; i++) {
            rc |= model_seq_reserve(kv, &s, i + 1, &e);
            model_batch_seq b = {
                .seq = &s, .tokens = ids + i, .n_tokens = 1, .logits = lg, .hidden = hid};
            rc |= model_forward(m, kv, &b, 1, &e);
            float *row = mt + (size_t)i * V;
            if (round == 0) {
                rc |= model_mtp_forward(m, kv, &s, 0, hid, ids[i + 1], row, ho, &e);
            } else {
                rc |= model_mtp_forward(m, kv, &s, 0, hid, ids[i + 1], lg, ho, &e);
                if (max_diff(lg, row, V) != 0) rc |= 2;
            }
            if (s.mtp_n_past != i + 1) rc |= 4;
        }
        model_seq_free(m, kv, &s);
    }
    bool finite = true;
    for (int i = 0; i < (N - 1) * V; i++) finite &= isfinite(mt[i]);
    model_seq s;
    model_seq_init(m, &s);
    int bad = model_mtp_forward(m, kv, &s, 1, hid, 1, lg, NULL, &e);
    model_seq_free(m, kv, &s);
    model_kv_pool_free(kv);
    model_free(m);
    free(hid), free(ho), free(lg), free(mt);
    CHECKF(rc == 0, "mtp rc %d: %.200s", rc, e.msg);
    CHECK(finite);
    CHECKF(bad == -1 && strstr(e.msg, "depth"), "depth 1 accepted: %.200s", e.msg);
}

/* A config whose group limit keeps fewer experts than top_k is refused with
 * a message naming the fields (HF would fail inside torch.topk). */
TEST(ds_load_rejects_group_limit_below_top_k) {
    char src[512], dir[] = "/tmp/di_ds_cfg_XXXXXX", path[600], link[600];
    snprintf(src, sizeof src, "%s/dsv2-tiny", harness_model_dir());
    CHECK(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/config.json", src);
    json_t *cfg = json_load_file(path, 0, NULL);
    CHECKF(cfg, "cannot parse %.300s", path);
    int E = (int)json_integer_value(json_object_get(cfg, "n_routed_experts"));
    int G = (int)json_integer_value(json_object_get(cfg, "n_group"));
    int TG = (int)json_integer_value(json_object_get(cfg, "topk_group"));
    int K = TG * (E / (G > 0 ? G : 1)) + 1; /* one more than the kept groups hold */
    json_object_set_new(cfg, "num_experts_per_tok", json_integer(K < E ? K : E));
    snprintf(path, sizeof path, "%s/config.json", dir);
    int wrote = json_dump_file(cfg, path, JSON_INDENT(2));
    json_decref(cfg);
    CHECK(wrote == 0 && G > 1 && TG < G && K <= E);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    snprintf(link, sizeof link, "%s/model.safetensors", dir);
    di_err e = {{0}};
    size_t len;
    char *st = di_read_file(path, &len, &e);
    CHECKF(st, "%.200s", e.msg);
    FILE *f = fopen(link, "w");
    size_t put = f ? fwrite(st, 1, len, f) : 0;
    if (f) fclose(f);
    free(st);
    CHECK(put == len);
    model_opts o = {.dtype = MODEL_DTYPE_F32, .threads = 1};
    model *m = model_load(dir, &o, &e);
    unlink(link);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
    if (m) model_free(m);
    CHECK(!m);
    CHECKF(strstr(e.msg, "topk_group") && strstr(e.msg, "num_experts_per_tok"), "error: %.200s",
           e.msg);
}
