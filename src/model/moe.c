/* moe.c — DeepSeekMoE feed-forward: router, routing rules per model version,
 * routed experts and the always-on shared experts.
 *
 * Routing follows HF modeling_deepseek to the letter (moe_route):
 *   V2 (softmax scores; topk_method "greedy" or "group_limited_greedy", group
 *      score = max within the group, keep topk_group groups): if top_k > 1 and
 *      norm_topk_prob the weights are normalised (sum + 1e-20), otherwise they
 *      are multiplied by routed_scaling_factor.
 *   V3 ("noaux_tc", sigmoid scores): choice = score + e_score_correction_bias;
 *      group score = sum of the group's top-2 choices; keep topk_group groups;
 *      top-k on choice; weights = the chosen experts' ORIGINAL scores;
 *      normalised if top_k > 1 and norm_topk_prob; then ALWAYS multiplied by
 *      routed_scaling_factor.
 *   Experts of dropped groups are excluded outright (HF masks them to 0, which
 *   only differs when every kept choice is negative).
 *
 * Execution is batch-shaped: the step's tokens are grouped by expert and each
 * active expert runs its SwiGLU as three kern_matmul calls over just its
 * tokens, so only active experts' weights are read and each is read once per
 * step. Many active experts run as parallel tasks (one expert per task); few
 * run one after another with each matmul parallel over rows. Expert outputs
 * land in per-(token, slot) rows and are summed per token in slot order, so the
 * result does not depend on the schedule. No state survives a call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/deepseek.h"

/* Tokens per routing chunk: bounds the per-call scratch. */
#define MOE_CHUNK 256

static bool moe_v3_rules(const model_config *c) {
    return c->topk_method == TOPK_NOAUX_TC || c->arch == ARCH_DEEPSEEK_V3;
}

void moe_route(const model_config *c, const float *logits, const float *bias, float *scratch,
               int *idx, float *w) {
    int E = c->n_routed_experts, K = c->num_experts_per_tok;
    float *sc = scratch, *ch = scratch + E;
    if (c->scoring_func == SCORE_SIGMOID) {
        for (int e = 0; e < E; e++) sc[e] = 1.0f / (1.0f + expf(-logits[e]));
    } else {
        memcpy(sc, logits, sizeof(float) * (size_t)E);
        kern_softmax(sc, E);
    }
    for (int e = 0; e < E; e++)
        ch[e] = sc[e] + (c->topk_method == TOPK_NOAUX_TC && bias ? bias[e] : 0.0f);

    int G = c->n_group;
    if (c->topk_method != TOPK_GREEDY && G > 1 && c->topk_group < G) {
        int gs = E / G;
        float *gscore = scratch + 2 * E, *keep = scratch + 2 * E + G; /* G <= E */
        for (int g = 0; g < G; g++) {
            const float *v = ch + g * gs;
            float a = -INFINITY, b2 = -INFINITY; /* largest, second largest */
            for (int e = 0; e < gs; e++) {
                if (v[e] > a) {
                    b2 = a;
                    a = v[e];
                } else if (v[e] > b2) {
                    b2 = v[e];
                }
            }
            gscore[g] = c->topk_method == TOPK_NOAUX_TC && gs >= 2 ? a + b2 : a;
            keep[g] = 0;
        }
        for (int k = 0; k < c->topk_group; k++) {
            int best = -1;
            for (int g = 0; g < G; g++)
                if (!keep[g] && (best < 0 || gscore[g] > gscore[best])) best = g;
            keep[best] = 1;
        }
        for (int g = 0; g < G; g++)
            if (!keep[g])
                for (int e = 0; e < gs; e++) ch[g * gs + e] = -INFINITY;
    }

    /* Top-k on the choice scores; ties go to the lower expert id. */
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int j = 0; j < k; j++) taken |= idx[j] == e;
            if (taken) continue;
            if (best < 0 || ch[e] > ch[best]) best = e;
        }
        idx[k] = best;
        w[k] = sc[best];
    }
    bool normed = K > 1 && c->norm_topk_prob;
    if (normed) {
        float sum = 0;
        for (int k = 0; k < K; k++) sum += w[k];
        sum += 1e-20f;
        for (int k = 0; k < K; k++) w[k] /= sum;
    }
    if (!normed || moe_v3_rules(c))
        for (int k = 0; k < K; k++) w[k] *= c->routed_scaling_factor;
}

/* out = down(silu(gate(x)) * up(x)) over n rows; g, u: n x gate.rows scratch. */
static void moe_swiglu(pool *p, const kern_mat *gate, const kern_mat *up, const kern_mat *down,
                       const float *x, float *out, int n, float *g, float *u) {
    kern_matmul(p, g, x, gate, NULL, n);
    kern_matmul(p, u, x, up, NULL, n);
    kern_silu_mul(g, u, n * gate->rows);
    kern_matmul(p, out, g, down, NULL, n);
}

typedef struct moe_ctx {
    const model_layer *L;
    int hid, inter;
    const int *active;    /* active expert ids */
    const int *off, *cnt; /* per expert: first row in xin/y, number of rows */
    const float *xin;     /* (n*K) x hid, grouped by expert */
    float *g, *u, *y;     /* (n*K) x inter, (n*K) x inter, (n*K) x hid */
    pool *p;              /* NULL inside tasks */
} moe_ctx;

static void moe_expert(void *vctx, int i, int n) {
    (void)n;
    moe_ctx *c = vctx;
    int e = c->active[i];
    size_t r0 = (size_t)c->off[e];
    moe_swiglu(c->p, &c->L->exp_gate[e], &c->L->exp_up[e], &c->L->exp_down[e], c->xin + r0 * c->hid,
               c->y + r0 * c->hid, c->cnt[e], c->g + r0 * c->inter, c->u + r0 * c->inter);
}

static void moe_chunk(model *m, const model_layer *L, const float *x, float *out, int n) {
    const model_config *cfg = &m->cfg;
    int E = cfg->n_routed_experts, K = cfg->num_experts_per_tok, hid = cfg->hidden_size;
    int inter = L->exp_gate[0].rows;
    pool *p = m->pool;
    int threads = p ? pool_threads(p) : 1;

    float *logits = di_malloc(sizeof(float) * (size_t)n * E);
    kern_matmul(p, logits, x, &L->router, NULL, n);
    int *idx = di_malloc(sizeof(int) * (size_t)n * K);
    float *w = di_malloc(sizeof(float) * (size_t)n * K);
    float *scratch = di_malloc(sizeof(float) * 4 * (size_t)E);
    for (int t = 0; t < n; t++)
        moe_route(cfg, logits + (size_t)t * E, L->e_bias, scratch, idx + (size_t)t * K,
                  w + (size_t)t * K);
    free(scratch);
    free(logits);

    /* Group the (token, slot) pairs by expert, tokens in order. */
    int *cnt = di_calloc((size_t)E, sizeof(int));
    int *off = di_malloc(sizeof(int) * (size_t)E);
    int *row = di_malloc(sizeof(int) * (size_t)n * K); /* (t, k) -> row in xin/y */
    for (int s = 0; s < n * K; s++) cnt[idx[s]]++;
    int *active = di_malloc(sizeof(int) * (size_t)E);
    int n_active = 0;
    for (int e = 0, o = 0; e < E; e++) {
        off[e] = o;
        o += cnt[e];
        if (cnt[e]) active[n_active++] = e;
    }
    int *fill = di_calloc((size_t)E, sizeof(int));
    float *xin = di_malloc(sizeof(float) * (size_t)n * K * hid);
    for (int s = 0; s < n * K; s++) {
        int e = idx[s];
        row[s] = off[e] + fill[e]++;
        memcpy(xin + (size_t)row[s] * hid, x + (size_t)(s / K) * hid, sizeof(float) * (size_t)hid);
    }
    free(fill);
    /* Biggest experts first: better balance when they run as parallel tasks. */
    for (int i = 1; i < n_active; i++)
        for (int j = i; j > 0 && cnt[active[j]] > cnt[active[j - 1]]; j--) {
            int tmp = active[j];
            active[j] = active[j - 1];
            active[j - 1] = tmp;
        }

    moe_ctx c = {
        .L = L, .hid = hid, .inter = inter, .active = active, .off = off, .cnt = cnt, .xin = xin};
    c.g = di_malloc(sizeof(float) * (size_t)n * K * inter);
    c.u = di_malloc(sizeof(float) * (size_t)n * K * inter);
    c.y = di_malloc(sizeof(float) * (size_t)n * K * hid);
    if (p && n_active >= 2 * threads) {
        c.p = NULL;
        pool_run(p, moe_expert, &c, n_active);
    } else {
        c.p = p;
        for (int i = 0; i < n_active; i++) moe_expert(&c, i, n_active);
    }

    /* Shared experts over every token, then the routed outputs per token. */
    if (L->sh_gate.data && L->sh_gate.rows > 0) {
        int sw = L->sh_gate.rows;
        float *g = di_malloc(sizeof(float) * (size_t)n * sw);
        float *u = di_malloc(sizeof(float) * (size_t)n * sw);
        moe_swiglu(p, &L->sh_gate, &L->sh_up, &L->sh_down, x, out, n, g, u);
        free(g);
        free(u);
    } else {
        memset(out, 0, sizeof(float) * (size_t)n * hid);
    }
    for (int t = 0; t < n; t++)
        for (int k = 0; k < K; k++) {
            int s = t * K + k;
            kern_axpy(out + (size_t)t * hid, w[s], c.y + (size_t)row[s] * hid, hid);
        }

    free(c.g);
    free(c.u);
    free(c.y);
    free(xin);
    free(active);
    free(row);
    free(off);
    free(cnt);
    free(w);
    free(idx);
}

void moe_ffn(model *m, const model_layer *L, const float *x, float *out, int n) {
    int hid = m->cfg.hidden_size;
    for (int t0 = 0; t0 < n; t0 += MOE_CHUNK) {
        int c = n - t0 < MOE_CHUNK ? n - t0 : MOE_CHUNK;
        moe_chunk(m, L, x + (size_t)t0 * hid, out + (size_t)t0 * hid, c);
    }
}
