/* llama.c — the Llama-family layers (llama, qwen2, qwen3, mistral): tensor
 * loading and grouped-query attention.
 *
 * One layer, as HF's LlamaAttention computes it:
 *   q, k, v = x Wq (+bq), x Wk (+bk), x Wv (+bv)      (qwen2 biases)
 *   q, k   = rmsnorm per head (q_norm, k_norm)          (qwen3, before rope)
 *   q, k   = rope half-split (pairs i, i + d/2) at each token's position
 *   o      = softmax(q k^T / sqrt(head_dim)) v over the visible positions
 *            (causal; sliding layers: i - window < j <= i), kv head h / (nh/nkv)
 *   out    = o Wo (+bo)
 * The projections run once over all step tokens; the attention itself is
 * spread over (token, kv head) pairs on the model's pool, each task with its
 * own score rows in scratch. K and V enter the cache (model_kv_put) before anyone
 * attends, so a prefill chunk sees its own earlier tokens. No state. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model_internal.h"

int llama_load_layer(model *m, int l, model_layer *L, const char *prefix, di_err *err) {
    const model_config *c = &m->cfg;
    model_loader *ld = m->ld;
    int H = c->hidden_size, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    int I = c->intermediate_size;
    char name[256];
#define NAME(s) (snprintf(name, sizeof name, "%s%s", prefix, s), name)
    char n0[256], n1[256], n2[256];
    const char *qkv[3] = {n0, n1, n2}, *gu[2] = {n0, n1};
    kern_mat parts[3];
    snprintf(n0, sizeof n0, "%sself_attn.q_proj.weight", prefix);
    snprintf(n1, sizeof n1, "%sself_attn.k_proj.weight", prefix);
    snprintf(n2, sizeof n2, "%sself_attn.v_proj.weight", prefix);
    if (model_get_vec(ld, NAME("input_layernorm.weight"), H, &L->attn_norm, err) ||
        model_get_vec(ld, NAME("post_attention_layernorm.weight"), H, &L->ffn_norm, err) ||
        model_get_mats_fused(ld, qkv, (const int[]){qd, kvd, kvd}, 3, H, &L->wqkv, parts, err))
        return -1;
    L->wq = parts[0], L->wk = parts[1], L->wv = parts[2];
    snprintf(n0, sizeof n0, "%smlp.gate_proj.weight", prefix);
    snprintf(n1, sizeof n1, "%smlp.up_proj.weight", prefix);
    if (model_get_mat(ld, NAME("self_attn.o_proj.weight"), H, qd, 0, &L->wo, err) ||
        model_get_mats_fused(ld, gu, (const int[]){I, I}, 2, H, &L->gate_up, parts, err) ||
        model_get_mat(ld, NAME("mlp.down_proj.weight"), H, I, 0, &L->down, err))
        return -1;
    L->gate = parts[0], L->up = parts[1];
    if (c->attention_bias && (model_get_vec(ld, NAME("self_attn.q_proj.bias"), qd, &L->bq, err) ||
                              model_get_vec(ld, NAME("self_attn.k_proj.bias"), kvd, &L->bk, err) ||
                              model_get_vec(ld, NAME("self_attn.v_proj.bias"), kvd, &L->bv, err)))
        return -1;
    if (L->bq && L->wqkv.data) { /* the fused projection's bias, in the same order */
        float *b = model_loader_alloc(ld, sizeof(float) * (size_t)(qd + 2 * kvd));
        memcpy(b, L->bq, sizeof(float) * (size_t)qd);
        memcpy(b + qd, L->bk, sizeof(float) * (size_t)kvd);
        memcpy(b + qd + kvd, L->bv, sizeof(float) * (size_t)kvd);
        L->bqkv = b;
    }
    /* Llama's attention_bias also biases o_proj; Qwen2 never does. */
    if (c->attention_bias && c->arch != ARCH_QWEN2 &&
        model_get_vec(ld, NAME("self_attn.o_proj.bias"), H, &L->bo, err))
        return -1;
    if (c->qk_norm &&
        (model_get_vec(ld, NAME("self_attn.q_norm.weight"), c->head_dim, &L->q_norm, err) ||
         model_get_vec(ld, NAME("self_attn.k_norm.weight"), c->head_dim, &L->k_norm, err)))
        return -1;
#undef NAME
    (void)l;
    return 0;
}

typedef struct {
    model *m;
    const model_step *st;
    int l;
    const float *q; /* token t's q heads at q + t * q_stride, roped */
    size_t q_stride;
    float *att;    /* n_tokens x n_heads*head_dim */
    float *scores; /* n_tasks x group x max_len */
    int max_len, n_units;
    int split; /* each kv head's q-head group is cut into this many parts */
} attn_job;

/* One task: a range of (token, kv head, part of its q-head group) units. The
 * q heads of a part are done together, so each cached K/V row is read once
 * per part, and the cache is walked in contiguous runs (model_kv_run). The
 * group is split only when there are too few (token, kv head) pairs to keep
 * every thread busy (decode at small batch, few kv heads). */
static void attn_task(void *ctx, int task, int n_tasks) {
    attn_job *j = ctx;
    const model_config *c = &j->m->cfg;
    int nkv = c->n_kv_heads, hd = c->head_dim, group = c->n_heads / c->n_kv_heads;
    size_t qd = (size_t)c->n_heads * hd, kv_dim = (size_t)nkv * hd, ml = (size_t)j->max_len;
    size_t E = (size_t)model_kv_entry_floats(j->m, j->l);
    kern_dtype kt = model_kv_step_dtype(j->st);
    size_t es = kern_dtype_size(kt);
    float scale = 1.0f / sqrtf((float)hd);
    float *sc = j->scores + (size_t)task * group * ml;
    int p0 = (int)((long)j->n_units * task / n_tasks);
    int p1 = (int)((long)j->n_units * (task + 1) / n_tasks);
    for (int p = p0; p < p1; p++) {
        int part = p % j->split, t = p / j->split / nkv, kh = p / j->split % nkv;
        int g0 = group * part / j->split, g1 = group * (part + 1) / j->split;
        int b = j->st->seq_of[t], pos = j->st->pos[t];
        int s0 = model_attn_first(j->m, j->st, j->l, b, pos), len = pos - s0 + 1;
        const float *q0 = j->q + (size_t)t * j->q_stride + (size_t)kh * group * hd;
        for (int i = 0, run; i < len; i += run) {
            const char *e = model_kv_run(j->m, j->st, j->l, b, s0 + i, len - i, &run);
            kern_dot_heads(sc + g0 * ml + i, ml, q0 + g0 * hd, g1 - g0, e + (size_t)kh * hd * es,
                           kt, E, run, hd);
            for (int g = g0; g < g1; g++)
                for (int r = 0; r < run; r++) sc[g * ml + i + r] *= scale;
        }
        for (int g = g0; g < g1; g++) kern_softmax(sc + g * ml, len);
        float *o0 = j->att + (size_t)t * qd + (size_t)kh * group * hd;
        memset(o0 + (size_t)g0 * hd, 0, (size_t)(g1 - g0) * hd * sizeof(float));
        for (int i = 0, run; i < len; i += run) {
            const char *e = model_kv_run(j->m, j->st, j->l, b, s0 + i, len - i, &run);
            kern_axpy_heads(o0 + g0 * hd, (size_t)hd, sc + g0 * ml + i, ml, g1 - g0,
                            e + (kv_dim + (size_t)kh * hd) * es, kt, E, run, hd);
        }
    }
}

void gqa_attention(model *m, const model_step *st, int l, const float *x, float *out) {
    const model_config *c = &m->cfg;
    const model_layer *L = &m->w.layers[l];
    int n = st->n_tokens, nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim;
    size_t qd = (size_t)nh * hd, kvd = (size_t)nkv * hd;
    /* Each token's row of the projection is [q | k | v], used in place: k
     * and v, side by side, are the cache entry. */
    size_t w = qd + 2 * kvd;
    float *qkv = model_scratch(m, FWD_SLOT_FAMILY0, (size_t)n * w);
    float *att = model_scratch(m, FWD_SLOT_FAMILY0 + 1, (size_t)n * qd);
    if (L->wqkv.data) { /* one pass over x for all three */
        kern_matmul(m->pool, qkv, x, &L->wqkv, L->bqkv, n);
    } else { /* the three stored apart in the checkpoint: each, then interleaved */
        float *q = model_scratch(m, FWD_SLOT_FAMILY0 + 3, (size_t)n * qd);
        float *k = model_scratch(m, FWD_SLOT_FAMILY0 + 4, (size_t)n * kvd);
        float *v = model_scratch(m, FWD_SLOT_FAMILY0 + 5, (size_t)n * kvd);
        kern_matmul(m->pool, q, x, &L->wq, L->bq, n);
        kern_matmul(m->pool, k, x, &L->wk, L->bk, n);
        kern_matmul(m->pool, v, x, &L->wv, L->bv, n);
        for (int t = 0; t < n; t++) {
            float *r = qkv + (size_t)t * w;
            memcpy(r, q + (size_t)t * qd, qd * sizeof(float));
            memcpy(r + qd, k + (size_t)t * kvd, kvd * sizeof(float));
            memcpy(r + qd + kvd, v + (size_t)t * kvd, kvd * sizeof(float));
        }
    }

    float *cs = model_scratch(m, FWD_SLOT_FAMILY0 + 2, (size_t)hd), *sn = cs + hd / 2;
    for (int t = 0; t < n; t++) {
        float *qt = qkv + (size_t)t * w, *kt = qt + qd;
        if (L->q_norm) {
            for (int h = 0; h < nh; h++)
                kern_rmsnorm(qt + h * hd, qt + h * hd, L->q_norm, hd, c->rms_norm_eps);
            for (int h = 0; h < nkv; h++)
                kern_rmsnorm(kt + h * hd, kt + h * hd, L->k_norm, hd, c->rms_norm_eps);
        }
        model_rope_at(m, st->pos[t], hd, cs, sn);
        for (int h = 0; h < nh; h++) kern_rope(qt + h * hd, cs, sn, hd, false);
        for (int h = 0; h < nkv; h++) kern_rope(kt + h * hd, cs, sn, hd, false);
        model_kv_put(m, st, l, t, kt);
    }

    int max_len = 0;
    for (int t = 0; t < n; t++) {
        int len = st->pos[t] - model_attn_start(m, l, st->pos[t]) + 1;
        if (len > max_len) max_len = len;
    }
    int threads = pool_threads(m->pool), split = 1, group = nh / nkv;
    while (split < group && n * nkv * split < 2 * threads) split++;
    attn_job j = {m, st, l, qkv, w, att, NULL, max_len, n * nkv * split, split};
    int n_tasks = threads * 4;
    if (n_tasks > j.n_units) n_tasks = j.n_units;
    j.scores = model_scratch(m, FWD_SLOT_FAMILY0 + 6,
                             (size_t)n_tasks * (size_t)(nh / nkv) * (size_t)max_len);
    pool_run(m->pool, attn_task, &j, n_tasks);
    model_kv_commit(m, st, l);
    kern_matmul(m->pool, out, att, &L->wo, L->bo, n);
}
