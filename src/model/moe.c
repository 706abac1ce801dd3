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
 * step. All experts' gate/up matmuls (and the shared experts') form one list
 * of independent jobs, then all down matmuls another (deepseek_jobs_run: at
 * one token the lists' rows are shared out end to end, else each job runs on
 * one thread as a pool task, or with few jobs each parallel over its rows).
 * Two pool barriers per layer, whatever the number of experts. Expert outputs
 * land in per-(token, slot) rows and are summed per token in slot order, so
 * the result does not depend on the schedule or the thread count. No state
 * survives a call. */
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

static void moe_chunk(model *m, const model_layer *L, const float *x, float *out, int n) {
    const model_config *cfg = &m->cfg;
    int E = cfg->n_routed_experts, K = cfg->num_experts_per_tok, hid = cfg->hidden_size;
    int inter = L->exp_gate[0].rows;
    pool *p = m->pool;

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

    /* Group the (token, slot) pairs by expert, tokens in order: expert e's
     * rows are [off[e], off[e] + cnt[e]) of xin / g / u / y. */
    int *cnt = di_calloc((size_t)E, sizeof(int));
    int *off = di_malloc(sizeof(int) * (size_t)E);
    int *row = di_malloc(sizeof(int) * (size_t)n * K); /* (t, k) -> row */
    for (int s = 0; s < n * K; s++) cnt[idx[s]]++;
    for (int e = 0, o = 0; e < E; e++) {
        off[e] = o;
        o += cnt[e];
    }
    int *fill = di_calloc((size_t)E, sizeof(int));
    float *xin = di_malloc(sizeof(float) * (size_t)n * K * hid);
    for (int s = 0; s < n * K; s++) {
        int e = idx[s];
        row[s] = off[e] + fill[e]++;
        memcpy(xin + (size_t)row[s] * hid, x + (size_t)(s / K) * hid, sizeof(float) * (size_t)hid);
    }
    free(fill);

    /* Every active expert and the shared experts: gate and up, then down. */
    bool shared = L->sh_gate.data && L->sh_gate.rows > 0;
    int sw = shared ? L->sh_gate.rows : 0;
    float *g = di_malloc(sizeof(float) * ((size_t)n * K * inter + (size_t)n * sw));
    float *u = di_malloc(sizeof(float) * ((size_t)n * K * inter + (size_t)n * sw));
    float *y = di_malloc(sizeof(float) * (size_t)n * K * hid);
    float *gs = g + (size_t)n * K * inter, *us = u + (size_t)n * K * inter;
    deepseek_jobs js = {0};
    for (int e = 0; e < E; e++) {
        if (!cnt[e]) continue;
        size_t r0 = (size_t)off[e];
        deepseek_jobs_add(&js, &L->exp_gate[e], xin + r0 * hid, g + r0 * inter, cnt[e]);
        deepseek_jobs_add(&js, &L->exp_up[e], xin + r0 * hid, u + r0 * inter, cnt[e]);
    }
    if (shared) {
        deepseek_jobs_add(&js, &L->sh_gate, x, gs, n);
        deepseek_jobs_add(&js, &L->sh_up, x, us, n);
    }
    deepseek_jobs_run(p, &js);
    kern_silu_mul(g, g, u, n * K * inter + n * sw);
    for (int e = 0; e < E; e++)
        if (cnt[e]) {
            size_t r0 = (size_t)off[e];
            deepseek_jobs_add(&js, &L->exp_down[e], g + r0 * inter, y + r0 * hid, cnt[e]);
        }
    if (shared)
        deepseek_jobs_add(&js, &L->sh_down, gs, out, n);
    else
        memset(out, 0, sizeof(float) * (size_t)n * hid);
    deepseek_jobs_run(p, &js);
    free(js.j);

    /* out = shared + the routed outputs per token, in slot order. */
    for (int t = 0; t < n; t++)
        for (int k = 0; k < K; k++) {
            int s = t * K + k;
            kern_axpy(out + (size_t)t * hid, w[s], y + (size_t)row[s] * hid, hid);
        }

    free(g);
    free(u);
    free(y);
    free(xin);
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
