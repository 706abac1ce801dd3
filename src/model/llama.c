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
 * spread over (block of a sequence's consecutive tokens, kv head) units on
 * the model's pool, in tasks of about equal work, each with its own score
 * rows in scratch. K and V enter the cache (model_kv_put) before anyone
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

/* Query rows a unit of attention takes at most: a run of consecutive
 * positions of one sequence (a prefill chunk) shares each cached K and V row
 * among its tokens' q heads, where one token at a time read the whole
 * context from L3 or memory once per token and kv head. llama-1b prefill of
 * 3072 tokens, the attention helpers' time against the GEMM's in one
 * profile: 0.40 with one token per unit, 0.32 with 16 rows (4 tokens), 0.26
 * with 32. The scores take 32 rows x the context per task (512 KiB at 4096
 * positions). */
#define ATTN_ROWS 32

typedef struct {
    model *m;
    const model_step *st;
    int l;
    const float *q; /* token t's q heads at q + t * q_stride, roped */
    size_t q_stride;
    float *att;         /* n_tokens x n_heads*head_dim */
    float *scratch;     /* per task: max_rows x max_span scores, then max_rows x hd queries,
                           then as many outputs */
    size_t task_floats; /* scratch floats per task */
    int max_rows;       /* query rows of a unit, at most */
    const int *block;   /* block b: tokens [block[b], block[b + 1]) */
    const int *first;   /* task k: units [first[k], first[k + 1]) */
    int max_span;
    int split; /* each kv head's q-head group is cut into this many parts */
} attn_job;

/* Kv heads a decode task walks together at most (attn_gang), and at least
 * when there are enough (attn_plan). */
#define ATTN_GANG     8
#define ATTN_GANG_MIN 4

/* Starts the run of part `part` at span offset i (rows side by side only),
 * which a gang reads next after its current block's last head: within a
 * block the K rows' stream runs on from one head's run into the next one's
 * (and the V runs follow on for the hardware's prefetcher), but nothing
 * runs on across blocks or from K to V. llama-1b int8 at
 * 512-544 positions, alternating call by call: a layer's attention 27.3 /
 * 33.7 us against 28.6 / 35.0, eight tokens level (a one-token step's
 * time moves within its noise, 0.1 %). */
static void gang_next(attn_job *j, int b, int s0, int span, int i, int part) {
    int run;
    size_t stride;
    const void *r = model_kv_run(j->m, j->st, j->l, b, s0 + i, span - i, part, &run, &stride);
    if (stride == (size_t)j->m->cfg.head_dim)
        kern_prefetch_start(r, (size_t)run * stride * kern_dtype_size(model_kv_step_dtype(j->st)));
}

/* One token's kv heads [kh0, kh0 + g), each with its whole q-head group,
 * their cached runs walked block by block: within a block of the pool the
 * heads' K runs lie side by side (model_kv_run's part-major layout), and so
 * do their V runs, so the walk reads g runs in a row (g x 16 KiB for a
 * 1B-scale model) where one head at a time read one and jumped to the next
 * block. llama-1b bf16, 2 threads, alternating runs against one head at a
 * time: decode at 4,096 positions 27.2-28.8 tok/s against 26.4-26.7 (5
 * runs each), at ~2,100 median +2.5 % (6 of 6 pairs), batch 8 at 512
 * positions +2 % (4 of 4 pairs), batch 1 at ~600 level. Every part of a
 * layer has the same runs (the blocks, or the ring's wrap), so one run
 * length steps all g heads. Each head's scores, softmax and sums are
 * attn_task's, in the same order. */
static void attn_gang(attn_job *j, int blk, int kh0, int g, float *sc) {
    const model_config *c = &j->m->cfg;
    int nkv = c->n_kv_heads, hd = c->head_dim, group = c->n_heads / nkv;
    size_t ml = (size_t)j->max_span, us = (size_t)group * ml;
    kern_dtype kt = model_kv_step_dtype(j->st);
    float scale = 1.0f / sqrtf((float)hd);
    int t0 = j->block[blk], b = j->st->seq_of[t0], pos = j->st->pos[t0];
    int s0 = model_attn_first(j->m, j->st, j->l, b, pos), span = pos - s0 + 1;
    const float *q = j->q + (size_t)t0 * j->q_stride;
    float *o = j->att + (size_t)t0 * c->n_heads * hd;
    for (int i = 0, run; i < span; i += run)
        for (int u = 0; u < g; u++) {
            size_t stride;
            const void *k =
                model_kv_run(j->m, j->st, j->l, b, s0 + i, span - i, kh0 + u, &run, &stride);
            if (u == g - 1) /* the next block's K runs, or the first V runs */
                gang_next(j, b, s0, span, i + run < span ? i + run : 0,
                          i + run < span ? kh0 : nkv + kh0);
            kern_dot_heads(sc + u * us + i, ml, q + (size_t)(kh0 + u) * group * hd, group, k, kt,
                           stride, run, hd);
        }
    for (int u = 0; u < g; u++)
        for (int h = 0; h < group; h++) kern_softmax_scaled(sc + u * us + h * ml, span, scale);
    memset(o + (size_t)kh0 * group * hd, 0, sizeof(float) * (size_t)g * group * hd);
    for (int i = 0, run; i < span; i += run)
        for (int u = 0; u < g; u++) {
            size_t stride;
            const void *v =
                model_kv_run(j->m, j->st, j->l, b, s0 + i, span - i, nkv + kh0 + u, &run, &stride);
            if (u == g - 1 && i + run < span) gang_next(j, b, s0, span, i + run, nkv + kh0);
            kern_axpy_heads(o + (size_t)(kh0 + u) * group * hd, (size_t)hd, sc + u * us + i, ml,
                            group, v, kt, stride, run, hd);
        }
}

/* One task: a range of (block of tokens, kv head, part of its q-head group)
 * units. A block's tokens (consecutive positions of one sequence) and the q
 * heads of a part are done together, so each cached K/V row is read once per
 * unit, and the cache is walked in contiguous runs (model_kv_run) over the
 * positions any of them sees. Each token's scores outside its own window
 * get probability zero, so its sums are the same, bit for bit, as it alone
 * would get: every score is kern_dot's, every output row sums its V rows in
 * position order, and the zero terms before its first position and after
 * its own add nothing. The group is split only when there are too few
 * units to keep every thread busy (decode at small batch, few kv heads). */
static void attn_task(void *ctx, int task, int n_tasks) {
    attn_job *j = ctx;
    const model_config *c = &j->m->cfg;
    int nkv = c->n_kv_heads, hd = c->head_dim, group = c->n_heads / c->n_kv_heads;
    size_t qd = (size_t)c->n_heads * hd, ml = (size_t)j->max_span;
    kern_dtype kt = model_kv_step_dtype(j->st);
    float scale = 1.0f / sqrtf((float)hd);
    float *sc = j->scratch + (size_t)task * j->task_floats;
    float *qb = sc + (size_t)j->max_rows * ml, *ob = qb + (size_t)j->max_rows * hd;
    for (int p = j->first[task]; p < j->first[task + 1]; p++) {
        int part = p % j->split, kh = p / j->split % nkv, blk = p / j->split / nkv;
        if (j->split == 1 && j->block[blk + 1] - j->block[blk] == 1) { /* decode */
            int g = 1;
            while (p + g < j->first[task + 1] && (p + g) / nkv == blk && g < ATTN_GANG) g++;
            attn_gang(j, blk, kh, g, sc);
            p += g - 1;
            continue;
        }
        int g0 = group * part / j->split, g1 = group * (part + 1) / j->split, gn = g1 - g0;
        int t0 = j->block[blk], nt = j->block[blk + 1] - t0, rows = nt * gn;
        int b = j->st->seq_of[t0], last = j->st->pos[t0 + nt - 1];
        int s0 = model_attn_first(j->m, j->st, j->l, b, j->st->pos[t0]), span = last - s0 + 1;
        /* the block's queries, row i * gn + g, side by side (one token's
         * already are) */
        const float *q = j->q + (size_t)t0 * j->q_stride + (size_t)(kh * group + g0) * hd;
        float *o = j->att + (size_t)t0 * qd + (size_t)(kh * group + g0) * hd;
        if (nt > 1) {
            for (int i = 0; i < nt; i++)
                memcpy(qb + (size_t)i * gn * hd, q + (size_t)i * j->q_stride,
                       sizeof(float) * (size_t)gn * hd);
            q = qb, o = ob;
        }
        for (int i = 0, run; i < span; i += run) {
            size_t stride;
            const void *k = model_kv_run(j->m, j->st, j->l, b, s0 + i, span - i, kh, &run, &stride);
            kern_dot_heads(sc + i, ml, q, rows, k, kt, stride, run, hd);
        }
        for (int i = 0; i < nt; i++) {
            int pos = j->st->pos[t0 + i];
            int lo = model_attn_first(j->m, j->st, j->l, b, pos) - s0, hi = pos - s0 + 1;
            for (int g = 0; g < gn; g++) {
                float *row = sc + (size_t)(i * gn + g) * ml;
                memset(row, 0, sizeof(float) * (size_t)lo);
                kern_softmax_scaled(row + lo, hi - lo, scale);
                memset(row + hi, 0, sizeof(float) * (size_t)(span - hi));
            }
        }
        memset(o, 0, sizeof(float) * (size_t)rows * hd);
        for (int i = 0, run; i < span; i += run) {
            size_t stride;
            const void *v =
                model_kv_run(j->m, j->st, j->l, b, s0 + i, span - i, nkv + kh, &run, &stride);
            kern_axpy_heads(o, (size_t)hd, sc + i, ml, rows, v, kt, stride, run, hd);
        }
        if (nt > 1)
            for (int i = 0; i < nt; i++)
                memcpy(j->att + (size_t)(t0 + i) * qd + (size_t)(kh * group + g0) * hd,
                       ob + (size_t)i * gn * hd, sizeof(float) * (size_t)gn * hd);
    }
}

/* Cuts the step into units and tasks: blocks of consecutive positions of
 * one sequence, ATTN_ROWS query rows at most (a kv head's group, or the part
 * of it, per token), and tasks of about equal work (a unit's rows times the
 * positions it reads), so that a prefill's late tokens, which see the most,
 * do not all land in the last task. Fills j's plan; returns the tasks. */
static int attn_plan(attn_job *j) {
    model *m = j->m;
    const model_step *st = j->st;
    const model_config *c = &m->cfg;
    int n = st->n_tokens, nkv = c->n_kv_heads, hd = c->head_dim, group = c->n_heads / nkv;
    int threads = pool_threads(m->pool), split = 1;
    while (split < group && n * nkv * split < 2 * threads) split++;
    int part_heads = (group + split - 1) / split, per_block = ATTN_ROWS / part_heads;
    if (per_block < 1) per_block = 1;
    /* slot 7: each block's work (doubles), then the blocks' and the tasks' starts */
    double *cost =
        (double *)model_scratch(m, FWD_SLOT_FAMILY0 + 7, (size_t)3 * n + 4 * (size_t)threads + 2);
    int *block = (int *)(cost + n);
    int n_blocks = 0, max_span = 0, max_rows = 0;
    for (int t = 0; t < n; t++) {
        int b = n_blocks ? block[n_blocks - 1] : 0;
        if (!n_blocks || t - b == per_block || st->seq_of[t] != st->seq_of[b] ||
            st->pos[t] != st->pos[t - 1] + 1)
            block[n_blocks++] = t;
    }
    block[n_blocks] = n;
    double total = 0;
    for (int k = 0; k < n_blocks; k++) {
        int t0 = block[k], nt = block[k + 1] - t0;
        int span =
            st->pos[t0 + nt - 1] - model_attn_first(m, st, j->l, st->seq_of[t0], st->pos[t0]) + 1;
        if (span > max_span) max_span = span;
        if (nt * part_heads > max_rows) max_rows = nt * part_heads;
        cost[k] = (double)nt * span;
        total += cost[k];
    }
    int units_per_block = nkv * split, n_units = n_blocks * units_per_block;
    int n_tasks = threads * 4 < n_units ? threads * 4 : n_units;
    /* A decode-only step: ATTN_GANG_MIN kv heads a task where there are
     * enough (attn_gang), a task a thread at least. */
    int most = n_units / ATTN_GANG_MIN;
    if (split == 1 && n_blocks == n && most < n_tasks) {
        n_tasks = most > threads ? most : threads;
        if (n_tasks > n_units) n_tasks = n_units;
    }
    int *first = block + n_blocks + 1, task = 1;
    double done = 0;
    first[0] = 0;
    for (int k = 0; k < n_blocks; k++)
        for (int u = 0; u < units_per_block; u++) {
            done += cost[k] / units_per_block;
            while (task < n_tasks && done >= total * task / n_tasks)
                first[task++] = k * units_per_block + u + 1;
        }
    while (task <= n_tasks) first[task++] = n_units;
    if (split == 1 && max_rows < ATTN_GANG * group) max_rows = ATTN_GANG * group; /* attn_gang */
    j->task_floats = (size_t)max_rows * ((size_t)max_span + 2 * (size_t)hd);
    j->scratch = model_scratch(m, FWD_SLOT_FAMILY0 + 6, (size_t)n_tasks * j->task_floats);
    j->max_rows = max_rows;
    j->block = block;
    j->first = first;
    j->max_span = max_span;
    j->split = split;
    return n_tasks;
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
    model_kv_put_ahead(st, l);
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

    float *buf = model_scratch(m, FWD_SLOT_FAMILY0 + 2, (size_t)hd);
    for (int t = 0; t < n; t++) {
        float *qt = qkv + (size_t)t * w, *kt = qt + qd;
        if (L->q_norm) {
            for (int h = 0; h < nh; h++)
                kern_rmsnorm(qt + h * hd, qt + h * hd, L->q_norm, hd, c->rms_norm_eps);
            for (int h = 0; h < nkv; h++)
                kern_rmsnorm(kt + h * hd, kt + h * hd, L->k_norm, hd, c->rms_norm_eps);
        }
        const float *cs = model_rope_of(m, st, t, hd, buf), *sn = cs + hd / 2;
        for (int h = 0; h < nh; h++) kern_rope(qt + h * hd, cs, sn, hd, false);
        for (int h = 0; h < nkv; h++) kern_rope(kt + h * hd, cs, sn, hd, false);
        model_kv_put(m, st, l, t, kt);
    }

    attn_job j = {.m = m, .st = st, .l = l, .q = qkv, .q_stride = w, .att = att};
    int n_tasks = attn_plan(&j);
    pool_run(m->pool, attn_task, &j, n_tasks);
    model_kv_commit(m, st, l);
    kern_matmul(m->pool, out, att, &L->wo, L->bo, n);
}
