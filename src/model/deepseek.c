/* deepseek.c — DeepSeek V2/V3 tensors: one decoder layer (MLA attention plus
 * a dense or DeepSeekMoE feed-forward) and the MTP modules, under the tensor
 * names of the Hugging Face checkpoints (model.layers.N.self_attn.*,
 * .mlp.*, .mlp.experts.E.*, .mlp.shared_experts.*, and for MTP module k,
 * stored as layer n_layers + k: enorm, hnorm, eh_proj, shared_head.*).
 *
 * Besides the stored tensors it derives the absorbed-decode matrices from
 * kv_b_proj (n_heads*(nope+v) x kv_lora): per head, w_uv[h] is a view of the
 * head's v rows (no copy) and w_uk_t[h] the transpose of its k_nope rows
 * (kv_lora x nope), kept in kv_b's compute dtype (int8: requantized per row
 * or per int8_group columns). Everything is allocated through the loader and
 * freed with the model; weights never change after load. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/deepseek.h"

model_layer *deepseek_layer(model *m, int l) {
    int nl = m->cfg.n_layers;
    return l < nl ? &m->w.layers[l] : &m->w.mtp[l - nl].layer;
}

typedef struct ds_names {
    char pre[96];
    char buf[256];
} ds_names;

static const char *ds_name(ds_names *n, const char *fmt, int a) {
    char tail[128];
    snprintf(tail, sizeof tail, fmt, a);
    snprintf(n->buf, sizeof n->buf, "%s%s", n->pre, tail);
    return n->buf;
}

void deepseek_jobs_add(deepseek_jobs *js, const kern_mat *W, const float *x, float *y, int n) {
    if (js->n == js->cap) {
        js->cap = js->cap ? 2 * js->cap : 64;
        js->j = di_realloc(js->j, sizeof(deepseek_job) * (size_t)js->cap);
    }
    js->j[js->n++] = (deepseek_job){*W, x, y, n, NULL};
}

static void ds_job_run(void *ctx, int i, int n) {
    (void)n;
    const deepseek_job *j = &((const deepseek_jobs *)ctx)->j[i];
    kern_matmul(NULL, j->y, j->x, &j->W, NULL, j->n);
}

/* Rows [lo, hi) of the one-token jobs' rows laid end to end. */
static void ds_rows_run(void *ctx, int lo, int hi) {
    const deepseek_jobs *js = ctx;
    for (int i = 0, base = 0; i < js->n && base < hi; base += js->j[i++].W.rows) {
        const deepseek_job *j = &js->j[i];
        int a = lo > base ? lo - base : 0, b = hi - base < j->W.rows ? hi - base : j->W.rows;
        if (a >= b) continue;
        kern_mat band = kern_mat_rows(&j->W, a, b - a);
        kern_matmul_one(j->y + a, j->act, j->x, &band);
    }
}

void deepseek_jobs_run(pool *p, deepseek_jobs *js) {
    int threads = p ? pool_threads(p) : 1;
    /* One token each, whole 16-row multiples: the rows end to end, one
     * pool_for (bands of the grain reduce each row as the whole matrix).
     * Bands of whole groups of a packed copy's rows, where a matrix has
     * one: a band elsewhere would read the weights themselves, which the
     * copy may have replaced (panels.c). */
    bool one = threads > 1 && js->n > 0;
    int rows = 0, grain = 16, group = 1;
    for (int i = 0; i < js->n && one; i++) {
        const kern_mat *W = &js->j[i].W;
        one = js->j[i].n == 1 && W->rows % 16 == 0 && rows <= INT_MAX - W->rows;
        int g = kern_one_token_grain(W->dtype, W->cols), pg = kern_panels_group(W);
        grain = g > grain ? g : grain;
        group = pg > group ? pg : group;
        rows += W->rows;
    }
    grain = (grain + group - 1) / group * group;
    /* where every matrix is whole groups, a band of whole groups from the
     * first row starts and ends on each matrix's groups */
    for (int i = 0; i < js->n && one && group > 1; i++) one = js->j[i].W.rows % group == 0;
    if (one) {
        /* each job's x prepared once here, not in each band a thread takes
         * (about 24 a thread in a list of dsv3-1b's experts); jobs in a row
         * on one x share it */
        size_t bytes = 0;
        for (int i = 0; i < js->n; i++) bytes += kern_one_act_bytes(&js->j[i].W);
        char *act = bytes ? di_alloc_aligned(bytes) : NULL;
        size_t o = 0;
        for (int i = 0; i < js->n && act; i++) {
            deepseek_job *j = &js->j[i], *prev = i ? j - 1 : NULL;
            size_t b = kern_one_act_bytes(&j->W);
            if (!b) continue;
            if (prev && prev->act && prev->x == j->x && prev->W.cols == j->W.cols &&
                prev->W.dtype == j->W.dtype && prev->W.group == j->W.group) {
                j->act = prev->act;
                continue;
            }
            kern_one_act_prepare(act + o, j->x, &j->W);
            j->act = act + o;
            o += b;
        }
        pool_for(p, ds_rows_run, js, rows, grain);
        di_free_aligned(act);
    } else if (p && js->n >= 2 * threads) {
        pool_run(p, ds_job_run, js, js->n);
    } else {
        for (int i = 0; i < js->n; i++)
            kern_matmul(p, js->j[i].y, js->j[i].x, &js->j[i].W, NULL, js->j[i].n);
    }
    js->n = 0;
}

/* w_uk_t[h] (kv_lora x nope, transposed k_nope rows of head h) and w_uv[h]. */
static int ds_absorb(model *m, model_layer *L, di_err *err) {
    const model_config *c = &m->cfg;
    int H = c->n_heads, nope = c->qk_nope_head_dim, vd = c->v_head_dim, lora = c->kv_lora_rank;
    const kern_mat *kvb = &L->kv_b;
    L->w_uk_t = model_loader_alloc(m->ld, sizeof(kern_mat) * (size_t)H);
    L->w_uv = model_loader_alloc(m->ld, sizeof(kern_mat) * (size_t)H);
    float *row = di_malloc(sizeof(float) * (size_t)lora);
    float *tr = di_malloc(sizeof(float) * (size_t)lora * nope);
    int group = kvb->dtype == KT_I8 && m->opts.int8_group > 0 && nope % m->opts.int8_group == 0
                    ? m->opts.int8_group
                    : nope;
    for (int h = 0; h < H; h++) {
        int r0 = h * (nope + vd);
        L->w_uv[h] = kern_mat_rows(kvb, r0 + nope, vd);
        for (int i = 0; i < nope; i++) {
            kern_row_f32(row, kvb, r0 + i);
            for (int j = 0; j < lora; j++) tr[(size_t)j * nope + i] = row[j];
        }
        kern_mat *W = &L->w_uk_t[h];
        W->dtype = kvb->dtype;
        W->rows = lora;
        W->cols = nope;
        size_t ne = (size_t)lora * nope;
        if (kvb->dtype == KT_F32) {
            float *d = model_loader_alloc(m->ld, ne * sizeof(float));
            memcpy(d, tr, ne * sizeof(float));
            W->data = d;
        } else if (kvb->dtype == KT_BF16) {
            uint16_t *d = model_loader_alloc(m->ld, ne * sizeof(uint16_t));
            for (size_t i = 0; i < ne; i++) d[i] = kern_f32_to_bf16(tr[i]);
            W->data = d;
        } else if (kvb->dtype == KT_I8) {
            int8_t *q = model_loader_alloc(m->ld, ne);
            float *sc = model_loader_alloc(m->ld, sizeof(float) * (size_t)lora * (nope / group));
            kern_quantize_i8(q, sc, tr, lora, nope, group);
            W->data = q;
            W->scales = sc;
            W->group = group;
        } else {
            free(row);
            free(tr);
            return di_errf(err, "kv_b_proj: unsupported compute dtype %d for MLA absorption",
                           (int)kvb->dtype);
        }
    }
    free(row);
    free(tr);
    return 0;
}

static int ds_load_attn(model *m, model_layer *L, ds_names *nm, di_err *err) {
    const model_config *c = &m->cfg;
    model_loader *ld = m->ld;
    int hid = c->hidden_size, H = c->n_heads;
    int qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    if (c->q_lora_rank > 0) {
        if (model_get_mat(ld, ds_name(nm, "self_attn.q_a_proj.weight", 0), c->q_lora_rank, hid, 0,
                          &L->q_a, err) ||
            model_get_vec(ld, ds_name(nm, "self_attn.q_a_layernorm.weight", 0), c->q_lora_rank,
                          &L->q_a_norm, err) ||
            model_get_mat(ld, ds_name(nm, "self_attn.q_b_proj.weight", 0), H * qk, c->q_lora_rank,
                          0, &L->q_b, err))
            return -1;
    } else if (model_get_mat(ld, ds_name(nm, "self_attn.q_proj.weight", 0), H * qk, hid, 0,
                             &L->q_proj, err)) {
        return -1;
    }
    if (model_get_mat(ld, ds_name(nm, "self_attn.kv_a_proj_with_mqa.weight", 0),
                      c->kv_lora_rank + c->qk_rope_head_dim, hid, 0, &L->kv_a, err) ||
        model_get_vec(ld, ds_name(nm, "self_attn.kv_a_layernorm.weight", 0), c->kv_lora_rank,
                      &L->kv_a_norm, err) ||
        model_get_mat(ld, ds_name(nm, "self_attn.kv_b_proj.weight", 0),
                      H * (c->qk_nope_head_dim + c->v_head_dim), c->kv_lora_rank, 0, &L->kv_b,
                      err) ||
        model_get_mat(ld, ds_name(nm, "self_attn.o_proj.weight", 0), hid, H * c->v_head_dim, 0,
                      &L->o_proj, err))
        return -1;
    return ds_absorb(m, L, err);
}

static int ds_load_mlp(model *m, model_layer *L, ds_names *nm, di_err *err) {
    const model_config *c = &m->cfg;
    model_loader *ld = m->ld;
    int hid = c->hidden_size;
    if (!L->moe) {
        int I = c->intermediate_size;
        char gn[256], un[256];
        const char *gu[2] = {gn, un};
        kern_mat parts[2];
        snprintf(gn, sizeof gn, "%s", ds_name(nm, "mlp.gate_proj.weight", 0));
        snprintf(un, sizeof un, "%s", ds_name(nm, "mlp.up_proj.weight", 0));
        if (model_get_mats_fused(ld, gu, (const int[]){I, I}, 2, hid, &L->gate_up, parts, err) ||
            model_get_mat(ld, ds_name(nm, "mlp.down_proj.weight", 0), hid, I, 0, &L->down, err))
            return -1;
        L->gate = parts[0], L->up = parts[1];
        return 0;
    }
    int E = c->n_routed_experts, I = c->moe_intermediate_size;
    if (c->n_group > 1 && c->topk_method != TOPK_GREEDY &&
        c->topk_group * (E / c->n_group) < c->num_experts_per_tok)
        return di_errf(err,
                       "config.json: topk_group %d of n_group %d keeps fewer experts than "
                       "num_experts_per_tok %d",
                       c->topk_group, c->n_group, c->num_experts_per_tok);
    if (model_get_mat(ld, ds_name(nm, "mlp.gate.weight", 0), E, hid, MODEL_MAT_F32, &L->router,
                      err))
        return -1;
    const char *bn = ds_name(nm, "mlp.gate.e_score_correction_bias", 0);
    L->e_bias = NULL;
    if (model_has_tensor(ld, bn) && model_get_vec(ld, bn, E, &L->e_bias, err)) return -1;
    L->exp_gate = model_loader_alloc(ld, sizeof(kern_mat) * (size_t)E);
    L->exp_up = model_loader_alloc(ld, sizeof(kern_mat) * (size_t)E);
    L->exp_down = model_loader_alloc(ld, sizeof(kern_mat) * (size_t)E);
    for (int e = 0; e < E; e++)
        if (model_get_mat(ld, ds_name(nm, "mlp.experts.%d.gate_proj.weight", e), I, hid, 0,
                          &L->exp_gate[e], err) ||
            model_get_mat(ld, ds_name(nm, "mlp.experts.%d.up_proj.weight", e), I, hid, 0,
                          &L->exp_up[e], err) ||
            model_get_mat(ld, ds_name(nm, "mlp.experts.%d.down_proj.weight", e), hid, I, 0,
                          &L->exp_down[e], err))
            return -1;
    if (c->n_shared_experts > 0) {
        int S = c->n_shared_experts * I;
        if (model_get_mat(ld, ds_name(nm, "mlp.shared_experts.gate_proj.weight", 0), S, hid, 0,
                          &L->sh_gate, err) ||
            model_get_mat(ld, ds_name(nm, "mlp.shared_experts.up_proj.weight", 0), S, hid, 0,
                          &L->sh_up, err) ||
            model_get_mat(ld, ds_name(nm, "mlp.shared_experts.down_proj.weight", 0), hid, S, 0,
                          &L->sh_down, err))
            return -1;
    }
    return 0;
}

int deepseek_load_layer(model *m, int l, model_layer *L, const char *prefix, di_err *err) {
    const model_config *c = &m->cfg;
    ds_names nm;
    size_t pl = strlen(prefix);
    snprintf(nm.pre, sizeof nm.pre, "%s%s", prefix, pl && prefix[pl - 1] == '.' ? "" : ".");
    L->swa = c->layer_swa ? c->layer_swa[l] : false;
    L->moe = model_layer_is_moe(c, l);
    if (c->kv_lora_rank < 1 || c->qk_rope_head_dim < 2 || c->qk_nope_head_dim < 1 ||
        c->v_head_dim < 1)
        return di_errf(err, "config.json: MLA dims (kv_lora_rank, qk_*_head_dim, v_head_dim) "
                            "must be positive for a DeepSeek model");
    if (model_get_vec(m->ld, ds_name(&nm, "input_layernorm.weight", 0), c->hidden_size,
                      &L->attn_norm, err) ||
        model_get_vec(m->ld, ds_name(&nm, "post_attention_layernorm.weight", 0), c->hidden_size,
                      &L->ffn_norm, err))
        return -1;
    return ds_load_attn(m, L, &nm, err) || ds_load_mlp(m, L, &nm, err) ? -1 : 0;
}

int deepseek_load_mtp(model *m, int k, model_mtp *mtp, di_err *err) {
    const model_config *c = &m->cfg;
    model_loader *ld = m->ld;
    int l = c->n_layers + k, hid = c->hidden_size;
    ds_names nm;
    snprintf(nm.pre, sizeof nm.pre, "model.layers.%d.", l);
    if (deepseek_load_layer(m, l, &mtp->layer, nm.pre, err) ||
        model_get_vec(ld, ds_name(&nm, "enorm.weight", 0), hid, &mtp->enorm, err) ||
        model_get_vec(ld, ds_name(&nm, "hnorm.weight", 0), hid, &mtp->hnorm, err) ||
        model_get_mat(ld, ds_name(&nm, "eh_proj.weight", 0), hid, 2 * hid, 0, &mtp->eh_proj, err) ||
        model_get_vec(ld, ds_name(&nm, "shared_head.norm.weight", 0), hid, &mtp->head_norm, err))
        return -1;
    const char *hn = ds_name(&nm, "shared_head.head.weight", 0);
    if (model_has_tensor(ld, hn)) {
        if (model_get_mat(ld, hn, c->vocab_size, hid, 0, &mtp->head, err)) return -1;
    } else {
        mtp->head = m->w.lm_head;
    }
    const char *en = ds_name(&nm, "embed_tokens.weight", 0);
    if (model_has_tensor(ld, en)) {
        if (model_get_mat(ld, en, c->vocab_size, hid, 0, &mtp->embed, err)) return -1;
    } else {
        mtp->embed = m->w.embed;
    }
    return 0;
}
