/* mtp.c — DeepSeek multi-token prediction (num_nextn_predict_layers): one
 * MTP module predicts the token after `next_token` from the previous depth's
 * hidden state, for drafting in speculative decoding.
 *
 *   h = eh_proj(concat(enorm(embed(next_token)), hnorm(hidden)))   embedding first
 *   h = h + attn(attn_norm(h));  h = h + ffn(ffn_norm(h))           the decoder layer
 *   logits = head(shared_head.norm(h));  hidden_out = h             (pre-norm h)
 *
 * `hidden` for depth 0 is the main model's final hidden AFTER the final norm
 * (model_forward's `hidden` output). The module's attention runs over its own
 * cache: layer index n_layers + depth in the KV accessors, one entry per
 * position, positions 0..seq->mtp_n_past. Depth 0 writes position
 * seq->mtp_n_past and advances it; depth d > 0 continues the same position's
 * chain (position seq->mtp_n_past - 1, i.e. the one depth 0 just wrote). It
 * runs one token of one sequence through the same mla_attention / moe_ffn /
 * dense_ffn as the main layers; scratch (and the one-entry staging a
 * sliding-window MTP layer needs) is allocated per call. */
#include <stdlib.h>
#include <string.h>

#include "model/deepseek.h"

int model_mtp_forward(model *m, model_kv_pool *kv, model_seq *seq, int depth, const float *hidden,
                      int next_token, float *logits, float *hidden_out, di_err *err) {
    const model_config *c = &m->cfg;
    if (depth < 0 || depth >= m->info.n_mtp_layers || !m->w.mtp)
        return di_errf(err, "mtp: depth %d out of range (model has %d MTP layers)", depth,
                       m->info.n_mtp_layers);
    if (next_token < 0 || next_token >= c->vocab_size)
        return di_errf(err, "mtp: token id %d out of range (vocab %d)", next_token, c->vocab_size);
    int pos = depth == 0 ? seq->mtp_n_past : seq->mtp_n_past - 1;
    if (pos < 0) return di_errf(err, "mtp: depth %d called before depth 0", depth);
    if (!m->cfg.layer_swa || !m->cfg.layer_swa[c->n_layers + depth]) {
        if (pos >= seq->n_blocks * MODEL_KV_BLOCK)
            return di_errf(err, "mtp: no KV block reserved for position %d", pos);
    }
    const model_mtp *M = &m->w.mtp[depth];
    const model_layer *L = &M->layer;
    int hid = c->hidden_size, l = c->n_layers + depth;
    float eps = c->rms_norm_eps;

    float *cat = di_malloc(sizeof(float) * 2 * (size_t)hid);
    float *h = di_malloc(sizeof(float) * (size_t)hid);
    float *xn = di_malloc(sizeof(float) * (size_t)hid);
    float *y = di_malloc(sizeof(float) * (size_t)hid);
    const kern_mat *embed = M->embed.data ? &M->embed : &m->w.embed;
    kern_row_f32(cat, embed, next_token);
    kern_rmsnorm(cat, cat, M->enorm, hid, eps);
    kern_rmsnorm(cat + hid, hidden, M->hnorm, hid, eps);
    kern_matmul(m->pool, h, cat, &M->eh_proj, NULL, 1);

    /* The decoder layer, as a one-token step of this sequence. */
    model_batch_seq bs = {.seq = seq, .tokens = &next_token, .n_tokens = 1};
    void *stage = di_malloc(model_kv_entry_bytes(m, l));
    int seq_of = 0, first = 0;
    model_step st = {.kv = kv,
                     .batch = &bs,
                     .n_batch = 1,
                     .n_tokens = 1,
                     .pos = &pos,
                     .seq_of = &seq_of,
                     .first = &first,
                     .scratch = stage};
    kern_rmsnorm(xn, h, L->attn_norm, hid, eps);
    mla_attention(m, &st, l, xn, y);
    kern_add(h, y, hid);
    kern_rmsnorm(xn, h, L->ffn_norm, hid, eps);
    if (L->moe)
        moe_ffn(m, L, xn, y, 1);
    else
        dense_ffn(m, L, xn, y, 1);
    kern_add(h, y, hid);

    if (logits) {
        const kern_mat *head = M->head.data ? &M->head : &m->w.lm_head;
        kern_rmsnorm(xn, h, M->head_norm, hid, eps);
        kern_matmul(m->pool, logits, xn, head, NULL, 1);
    }
    if (hidden_out) memcpy(hidden_out, h, sizeof(float) * (size_t)hid);
    if (depth == 0) seq->mtp_n_past++;
    free(stage);
    free(cat);
    free(h);
    free(xn);
    free(y);
    return 0;
}
