/* mla.c — DeepSeek multi-head latent attention (MLA) of one layer over a
 * whole forward step (every token of every sequence in the batch).
 *
 * The cache keeps, per token, the normalised KV latent c (kv_lora_rank floats)
 * and the roped key part k_pe (qk_rope_head_dim floats) that all heads share.
 * Two mathematically equal ways to attend over it:
 *   expanded — up-project the visible latents through kv_b into per-head
 *              k_nope and v once per sequence (one GEMM), then attend as plain
 *              multi-head attention. Cheap when many queries share a context
 *              (prefill chunks).
 *   absorbed — fold kv_b into the query and the output: q_lat = W_uk^T q_nope,
 *              score = q_lat·c + q_pe·k_pe, o_lat = Σ p·c, out = W_uv·o_lat.
 *              Reads only the latent per position: the decode path.
 * Each sequence of the step takes whichever costs fewer FLOPs for its number
 * of new tokens and visible context (MLA_PATH_AUTO), so a step mixing prefill
 * chunks and decode tokens uses both. Work is split over (token, head-range)
 * tasks on the model's pool; every output element is reduced by one task in a
 * fixed order, so results do not depend on the thread count. Decode keeps
 * pool barriers few (they dominate a small step): q_a and kv_a share one,
 * and for a few absorbed tokens each task absorbs, attends and un-absorbs
 * its own heads. Scratch is
 * allocated per call (its size follows the step's contexts); no state
 * survives the call. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/deepseek.h"

typedef struct mla_dims {
    int H, nope, rope, qk, vd, lora, ent; /* heads; per-head dims; latent; cache entry */
} mla_dims;

static void mla_run(pool *p, pool_fn fn, void *ctx, int n) {
    if (n <= 0) return;
    if (p && n > 1) {
        pool_run(p, fn, ctx, n);
        return;
    }
    for (int i = 0; i < n; i++) fn(ctx, i, n);
}

/* Shared by the task bodies below. */
typedef struct mla_ctx {
    model *m;
    const model_step *st;
    const model_layer *L;
    int l;
    mla_dims d;
    float scale;
    const float *q; /* n_tokens x H*qk (rope part already rotated) */
    float *attn;    /* n_tokens x H*vd: per-head outputs before o_proj */
    /* absorbed */
    int hc;        /* heads per task */
    int n_hchunks; /* tasks per token */
    int max_ctx;   /* scores buffer: hc * max_ctx floats per task */
    float *scores; /* n_tasks x hc x max_ctx */
    float *qcat;   /* n_tasks x hc x (lora + rope), the heads' queries in a row */
    const int *at; /* na absorbed tokens (step indices) */
    int na;
    bool fused;                      /* few tokens: each task absorbs its own heads' q and output */
    float *qin, *qlat, *olat, *vout; /* head-major: [h][i][...] */
    /* expanded (one sequence, one head group at a time) */
    int t0, T, s0, C; /* tokens [t0, t0+T), visible window [s0, s0+C) */
    int h0, hg;       /* head group */
    const float *kvx; /* C x hg*(nope+vd) */
    const float *kpe; /* C x rope */
} mla_ctx;

/* --- absorbed path -------------------------------------------------------- */

/* Per head: q_lat = W_uk^T q_nope for every absorbed token (one GEMM). */
static void mla_absorb_q(void *vctx, int h, int n) {
    (void)n;
    mla_ctx *c = vctx;
    const mla_dims *d = &c->d;
    float *in = c->qin + (size_t)h * c->na * d->nope;
    for (int i = 0; i < c->na; i++)
        memcpy(in + (size_t)i * d->nope, c->q + (size_t)c->at[i] * d->H * d->qk + (size_t)h * d->qk,
               sizeof(float) * (size_t)d->nope);
    kern_matmul(NULL, c->qlat + (size_t)h * c->na * d->lora, in, &c->L->w_uk_t[h], NULL, c->na);
}

/* Per head: out = W_uv o_lat for every absorbed token, scattered to attn. */
static void mla_absorb_o(void *vctx, int h, int n) {
    (void)n;
    mla_ctx *c = vctx;
    const mla_dims *d = &c->d;
    float *v = c->vout + (size_t)h * c->na * d->vd;
    kern_matmul(NULL, v, c->olat + (size_t)h * c->na * d->lora, &c->L->w_uv[h], NULL, c->na);
    for (int i = 0; i < c->na; i++)
        memcpy(c->attn + (size_t)c->at[i] * d->H * d->vd + (size_t)h * d->vd, v + (size_t)i * d->vd,
               sizeof(float) * (size_t)d->vd);
}

/* Task (absorbed token i, head range): scores over the latent, softmax, and
 * the weighted latent sum. Each cache entry is read once for the head range:
 * the latent is shared by every head, so the heads' queries are laid out in
 * a row and the cache is walked a contiguous run at a time with the
 * multi-head helpers, bit for bit the per-head kern_dot / kern_axpy. */
static void mla_absorb_attend(void *vctx, int task, int n) {
    (void)n;
    mla_ctx *c = vctx;
    const mla_dims *d = &c->d;
    int i = task / c->n_hchunks, ha = (task % c->n_hchunks) * c->hc;
    int hb = ha + c->hc < d->H ? ha + c->hc : d->H;
    int t = c->at[i], b = c->st->seq_of[t], pos = c->st->pos[t];
    int s0 = model_attn_start(c->m, c->l, pos), C = pos - s0 + 1;
    float *sc = c->scores + (size_t)task * c->hc * c->max_ctx;
    const float *qt = c->q + (size_t)t * d->H * d->qk;
    /* Each head's W_uk^T and W_uv are read cold, once a token, by the
     * kernels' own streams. Requested up front as well (every line of the
     * task's 256 KiB at once), dsv3-1b's task took 28-34 us against 24-29
     * at 300-600 positions: the requests held the core while they queued. */
    if (c->fused) /* q_lat = W_uk^T q_nope for this task's heads */
        for (int h = ha; h < hb; h++)
            kern_matmul(NULL, c->qlat + ((size_t)h * c->na + i) * d->lora, qt + (size_t)h * d->qk,
                        &c->L->w_uk_t[h], NULL, 1);
    int nh = hb - ha;
    size_t lora = (size_t)d->lora, ml = (size_t)c->max_ctx;
    kern_dtype kt = model_kv_step_dtype(c->st);
    /* a head's query laid out as a cache entry: the latent part, then the
     * rope part, so one dot product per (head, position) covers both */
    size_t qe = lora + (size_t)d->rope;
    float *qh = c->qcat + (size_t)task * c->hc * qe;
    for (int h = 0; h < nh; h++) {
        memcpy(qh + h * qe, c->qlat + ((size_t)(ha + h) * c->na + i) * lora, sizeof(float) * lora);
        memcpy(qh + h * qe + lora, qt + (size_t)(ha + h) * d->qk + d->nope,
               sizeof(float) * (size_t)d->rope);
    }
    for (int j = 0, run; j < C; j += run) {
        size_t stride;
        const void *e = model_kv_run(c->m, c->st, c->l, b, s0 + j, C - j, 0, &run, &stride);
        kern_dot_heads(sc + j, ml, qh, nh, e, kt, stride, run, (int)qe);
    }
    for (int h = 0; h < nh; h++) {
        float *sh = sc + h * ml;
        kern_softmax_scaled(sh, C, c->scale);
        memset(c->olat + ((size_t)(ha + h) * c->na + i) * lora, 0, sizeof(float) * lora);
    }
    for (int j = 0, run; j < C; j += run) {
        size_t stride;
        const void *e = model_kv_run(c->m, c->st, c->l, b, s0 + j, C - j, 0, &run, &stride);
        kern_axpy_heads(c->olat + ((size_t)ha * c->na + i) * lora, (size_t)c->na * lora, sc + j, ml,
                        nh, e, kt, stride, run, d->lora);
    }
    if (c->fused) /* out_h = W_uv o_lat */
        for (int h = ha; h < hb; h++)
            kern_matmul(NULL, c->attn + (size_t)t * d->H * d->vd + (size_t)h * d->vd,
                        c->olat + ((size_t)h * c->na + i) * d->lora, &c->L->w_uv[h], NULL, 1);
}

/* --- expanded path -------------------------------------------------------- */

/* Query tokens per expanded-path task: a head's K and V rows are read once
 * for all of them. */
#define MLA_QTILE 8

/* Task (tile of up to MLA_QTILE tokens from t0, one head of the current head
 * group). The tile's scores over the union of its tokens' visible ranges
 * come from the multi-query helpers, bit for bit kern_dot per (token,
 * position); each token's softmax runs over its own range and the other
 * positions weigh zero, so every token gets what it would get alone. */
static void mla_expand_attend(void *vctx, int task, int n) {
    (void)n;
    mla_ctx *c = vctx;
    const mla_dims *d = &c->d;
    int hh = task % c->hg, h = c->h0 + hh, i0 = task / c->hg * MLA_QTILE;
    int nq = c->T - i0 < MLA_QTILE ? c->T - i0 : MLA_QTILE;
    int js[MLA_QTILE], je[MLA_QTILE], jlo = INT_MAX, jhi = 0;
    for (int q = 0; q < nq; q++) {
        int pos = c->st->pos[c->t0 + i0 + q];
        js[q] = model_attn_start(c->m, c->l, pos) - c->s0, je[q] = pos - c->s0 + 1;
        jlo = js[q] < jlo ? js[q] : jlo, jhi = je[q] > jhi ? je[q] : jhi;
    }
    int run = jhi - jlo;
    size_t kvw = (size_t)c->hg * (d->nope + d->vd), hoff = (size_t)hh * (d->nope + d->vd);
    float *qn = di_malloc(sizeof(float) * ((size_t)nq * d->qk + 2 * (size_t)nq * run));
    float *qr = qn + (size_t)nq * d->nope, *s = qr + (size_t)nq * d->rope,
          *sr = s + (size_t)nq * run;
    for (int q = 0; q < nq; q++) {
        const float *qt = c->q + (size_t)(c->t0 + i0 + q) * d->H * d->qk + (size_t)h * d->qk;
        memcpy(qn + (size_t)q * d->nope, qt, sizeof(float) * (size_t)d->nope);
        memcpy(qr + (size_t)q * d->rope, qt + d->nope, sizeof(float) * (size_t)d->rope);
    }
    const float *k = c->kvx + (size_t)jlo * kvw + hoff;
    kern_dot_heads(s, (size_t)run, qn, nq, k, KT_F32, kvw, run, d->nope);
    kern_dot_heads(sr, (size_t)run, qr, nq, c->kpe + (size_t)jlo * d->rope, KT_F32, (size_t)d->rope,
                   run, d->rope);
    for (int q = 0; q < nq; q++) {
        float *sq = s + (size_t)q * run, *rq = sr + (size_t)q * run;
        int lo = js[q] - jlo, hi = je[q] - jlo;
        for (int j = 0; j < run; j++) sq[j] = j >= lo && j < hi ? (sq[j] + rq[j]) * c->scale : 0.0f;
        kern_softmax(sq + lo, hi - lo);
        float *o = c->attn + (size_t)(c->t0 + i0 + q) * d->H * d->vd + (size_t)h * d->vd;
        memset(o, 0, sizeof(float) * (size_t)d->vd);
    }
    kern_axpy_heads(c->attn + (size_t)(c->t0 + i0) * d->H * d->vd + (size_t)h * d->vd,
                    (size_t)d->H * d->vd, s, (size_t)run, nq, k + d->nope, KT_F32, kvw, run, d->vd);
    free(qn);
}

/* Absorbed tokens up to which each task absorbs its own heads (a constant,
 * not the thread count, so results do not depend on the pool size). */
#define MLA_FUSED_MAX 8

/* Bound on the expanded K/V buffer of one head group (floats). */
#define MLA_EXPAND_FLOATS ((size_t)16 << 20)

static void mla_expanded_seq(mla_ctx *c, int b) {
    const mla_dims *d = &c->d;
    const model_step *st = c->st;
    c->t0 = st->first[b];
    c->T = st->batch[b].n_tokens;
    int plast = st->pos[c->t0 + c->T - 1];
    c->s0 = model_attn_start(c->m, c->l, st->pos[c->t0]);
    c->C = plast - c->s0 + 1;
    float *lat = di_malloc(sizeof(float) * (size_t)c->C * d->lora);
    float *kpe = di_malloc(sizeof(float) * (size_t)c->C * d->rope);
    float *e = di_malloc(sizeof(float) * (size_t)d->ent);
    for (int j = 0; j < c->C; j++) {
        model_kv_read(c->m, st, c->l, b, c->s0 + j, e);
        memcpy(lat + (size_t)j * d->lora, e, sizeof(float) * (size_t)d->lora);
        memcpy(kpe + (size_t)j * d->rope, e + d->lora, sizeof(float) * (size_t)d->rope);
    }
    free(e);
    size_t per_head = (size_t)c->C * (d->nope + d->vd);
    int hg = (int)(MLA_EXPAND_FLOATS / per_head);
    hg = hg < 1 ? 1 : hg > d->H ? d->H : hg;
    /* With a packed copy of kv_b, whole groups of its rows a view: a view
     * elsewhere would read the weights themselves, which the copy may have
     * replaced (panels.c). */
    int grp = kern_panels_group(&c->L->kv_b), g = grp, r = d->nope + d->vd;
    while (r) { /* g = gcd(grp, rows per head) */
        int t = g % r;
        g = r, r = t;
    }
    int q = grp / g; /* heads per whole number of groups */
    hg = hg < q ? q : hg - hg % q;
    hg = hg > d->H ? d->H : hg;
    float *kvx = di_malloc(sizeof(float) * per_head * hg);
    c->kpe = kpe;
    c->kvx = kvx;
    for (int h0 = 0; h0 < d->H; h0 += hg) {
        c->h0 = h0;
        c->hg = h0 + hg <= d->H ? hg : d->H - h0;
        kern_mat sub =
            kern_mat_rows(&c->L->kv_b, h0 * (d->nope + d->vd), c->hg * (d->nope + d->vd));
        kern_matmul(c->m->pool, kvx, lat, &sub, NULL, c->C);
        mla_run(c->m->pool, mla_expand_attend, c, (c->T + MLA_QTILE - 1) / MLA_QTILE * c->hg);
    }
    free(kvx);
    free(kpe);
    free(lat);
}

/* FLOPs of each path for sequence b (multiply-adds; constant factors shared). */
static bool mla_prefers_absorbed(const model *m, const model_step *st, int l, const mla_dims *d,
                                 int b) {
    int t0 = st->first[b], T = st->batch[b].n_tokens;
    double vis = 0;
    for (int t = t0; t < t0 + T; t++) vis += st->pos[t] - model_attn_start(m, l, st->pos[t]) + 1;
    double C = st->pos[t0 + T - 1] - model_attn_start(m, l, st->pos[t0]) + 1;
    double up = (double)d->lora * d->H * (d->nope + d->vd);
    double expanded = C * up + vis * d->H * (d->nope + d->rope + d->vd);
    double absorbed = T * up + vis * d->H * (2.0 * d->lora + d->rope);
    return absorbed < expanded;
}

void mla_attention_path(model *m, const model_step *st, int l, const float *x, float *out,
                        mla_path path) {
    const model_config *cfg = &m->cfg;
    const model_layer *L = deepseek_layer(m, l);
    mla_dims d = {cfg->n_heads,
                  cfg->qk_nope_head_dim,
                  cfg->qk_rope_head_dim,
                  cfg->qk_nope_head_dim + cfg->qk_rope_head_dim,
                  cfg->v_head_dim,
                  cfg->kv_lora_rank,
                  cfg->kv_lora_rank + cfg->qk_rope_head_dim};
    pool *p = m->pool;
    int threads = p ? pool_threads(p) : 1;
    int n = st->n_tokens;
    float eps = cfg->rms_norm_eps;

    /* Queries, and this step's cache entries (stored before anyone attends:
     * a chunk's later tokens see its earlier ones). */
    float *q = di_malloc(sizeof(float) * (size_t)n * d.H * d.qk);
    float *kva = di_malloc(sizeof(float) * (size_t)n * d.ent);
    int r = cfg->q_lora_rank;
    float *qa = r > 0 ? di_malloc(sizeof(float) * (size_t)n * r) : NULL;
    model_kv_put_ahead(st, l);
    deepseek_jobs js = {0}; /* the two projections of x in one pool barrier */
    deepseek_jobs_add(&js, r > 0 ? &L->q_a : &L->q_proj, x, r > 0 ? qa : q, n);
    deepseek_jobs_add(&js, &L->kv_a, x, kva, n);
    deepseek_jobs_run(p, &js);
    free(js.j);
    if (r > 0) {
        for (int t = 0; t < n; t++)
            kern_rmsnorm(qa + (size_t)t * r, qa + (size_t)t * r, L->q_a_norm, r, eps);
        kern_matmul(p, q, qa, &L->q_b, NULL, n);
        free(qa);
    }
    float *buf = di_malloc(sizeof(float) * (size_t)d.rope);
    for (int t = 0; t < n; t++) {
        const float *cs = model_rope_of(m, st, t, d.rope, buf), *sn = cs + d.rope / 2;
        for (int h = 0; h < d.H; h++)
            kern_rope(q + (size_t)t * d.H * d.qk + (size_t)h * d.qk + d.nope, cs, sn, d.rope, true);
        float *e = kva + (size_t)t * d.ent;
        kern_rmsnorm(e, e, L->kv_a_norm, d.lora, eps);
        kern_rope(e + d.lora, cs, sn, d.rope, true);
        model_kv_put(m, st, l, t, e);
    }
    free(buf);
    free(kva);

    mla_ctx c = {.m = m, .st = st, .L = L, .l = l, .d = d, .q = q};
    c.scale = 1.0f / sqrtf((float)d.qk) * model_attn_mscale(m);
    c.attn = di_malloc(sizeof(float) * (size_t)n * d.H * d.vd);

    /* Split the sequences between the two paths. */
    bool *absorb = di_malloc(sizeof(bool) * (size_t)(st->n_batch > 0 ? st->n_batch : 1));
    int *at = di_malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    int na = 0, max_ctx = 1;
    for (int b = 0; b < st->n_batch; b++) {
        if (st->batch[b].n_tokens <= 0) {
            absorb[b] = false;
            continue;
        }
        absorb[b] = path == MLA_PATH_ABSORBED ||
                    (path == MLA_PATH_AUTO && mla_prefers_absorbed(m, st, l, &d, b));
        if (!absorb[b]) continue;
        for (int t = st->first[b]; t < st->first[b] + st->batch[b].n_tokens; t++) {
            at[na++] = t;
            int C = st->pos[t] - model_attn_start(m, l, st->pos[t]) + 1;
            if (C > max_ctx) max_ctx = C;
        }
    }

    if (na > 0) {
        /* Few tokens (small-batch decode): one task per (token, head range)
         * absorbs, attends and un-absorbs, one pool barrier in all. Many:
         * the absorptions run per head as GEMMs over all the tokens. */
        c.at = at;
        c.na = na;
        c.fused = na <= MLA_FUSED_MAX;
        c.qlat = di_malloc(sizeof(float) * (size_t)d.H * na * d.lora);
        c.olat = di_malloc(sizeof(float) * (size_t)d.H * na * d.lora);
        if (!c.fused) {
            c.qin = di_malloc(sizeof(float) * (size_t)d.H * na * d.nope);
            c.vout = di_malloc(sizeof(float) * (size_t)d.H * na * d.vd);
            mla_run(p, mla_absorb_q, &c, d.H);
        }
        c.n_hchunks = na >= 2 * threads ? 1 : (2 * threads + na - 1) / na;
        if (c.n_hchunks > d.H) c.n_hchunks = d.H;
        c.hc = (d.H + c.n_hchunks - 1) / c.n_hchunks;
        c.n_hchunks = (d.H + c.hc - 1) / c.hc;
        c.max_ctx = max_ctx;
        int n_tasks = na * c.n_hchunks;
        c.scores = di_malloc(sizeof(float) * (size_t)n_tasks * c.hc * max_ctx);
        c.qcat = di_malloc(sizeof(float) * (size_t)n_tasks * c.hc * (d.lora + d.rope));
        mla_run(p, mla_absorb_attend, &c, n_tasks);
        free(c.scores);
        free(c.qcat);
        if (!c.fused) {
            mla_run(p, mla_absorb_o, &c, d.H);
            free(c.qin);
            free(c.vout);
        }
        free(c.qlat);
        free(c.olat);
    }
    for (int b = 0; b < st->n_batch; b++)
        if (st->batch[b].n_tokens > 0 && !absorb[b]) mla_expanded_seq(&c, b);

    model_kv_commit(m, st, l);
    kern_matmul(p, out, c.attn, &L->o_proj, NULL, n);
    free(at);
    free(absorb);
    free(c.attn);
    free(q);
}

void mla_attention(model *m, const model_step *st, int l, const float *x, float *out) {
    mla_attention_path(m, st, l, x, out, MLA_PATH_AUTO);
}
