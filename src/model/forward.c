/* forward.c — model_forward: one step over a batch of sequences, read top to
 * bottom in the order the math happens:
 *
 *   embed -> for each layer: x += attn(norm(x)); x += ffn(norm(x))
 *         -> final norm -> lm_head (only for the rows whose logits are asked)
 *
 * The step is flattened into tokens (prefill chunks and decode tokens mixed),
 * and every matmul runs once over all tokens of the step (kern_matmul with
 * n = step tokens): weights are streamed once per step, which is what makes
 * batched decode fast. Attention is per token (llama.c / mla.c); the FFN is
 * dense SwiGLU here, MoE in moe.c.
 *
 * Scratch: model->fwd holds one buffer per FWD_SLOT_*, grown when a step is
 * bigger than any before and reused otherwise, so a step allocates nothing
 * per layer. That buffer is the model's only mutable state; one
 * model_forward runs at a time per model. */
#include <stdlib.h>
#include <string.h>

#include "model/deepseek.h"
#include "model/model_internal.h"

typedef struct {
    float *buf[FWD_N_SLOTS];
    size_t cap[FWD_N_SLOTS];
    int *ints;
    size_t ints_cap;
} fwd_scratch;

static fwd_scratch *scratch_of(model *m) {
    if (!m->fwd) m->fwd = di_calloc(1, sizeof(fwd_scratch));
    return m->fwd;
}

float *model_scratch(model *m, int slot, size_t floats) {
    fwd_scratch *s = scratch_of(m);
    if (floats > s->cap[slot]) {
        size_t cap = floats + floats / 4 + 16;
        di_free_aligned(s->buf[slot]);
        s->buf[slot] = di_alloc_aligned(cap * sizeof(float));
        s->cap[slot] = cap;
    }
    return s->buf[slot];
}

static int *scratch_ints(model *m, size_t n) {
    fwd_scratch *s = scratch_of(m);
    if (n > s->ints_cap) {
        s->ints_cap = n + n / 4 + 16;
        s->ints = di_realloc(s->ints, s->ints_cap * sizeof(int));
    }
    return s->ints;
}

void model_forward_free(model *m) {
    fwd_scratch *s = m->fwd;
    if (!s) return;
    for (int i = 0; i < FWD_N_SLOTS; i++) di_free_aligned(s->buf[i]);
    free(s->ints);
    free(s);
    m->fwd = NULL;
}

void model_set_batch_invariant(model *m, bool on) {
    m->batch_invariant = on;
    kern_set_batch_invariant(on);
    model_panels_update(m);
}

/* silu(gate) * up for tokens [lo, hi): token t's gate and up at gate + t *
 * ld and up + t * ld, its result at out + t * inter (out may be gate when ld
 * is inter: the tokens' rows are disjoint). */
typedef struct silu_job {
    float *out;
    const float *gate, *up;
    size_t ld, inter;
} silu_job;

static void silu_rows(void *ctx, int lo, int hi) {
    const silu_job *j = ctx;
    for (size_t t = (size_t)lo; t < (size_t)hi; t++)
        kern_silu_mul(j->out + t * j->inter, j->gate + t * j->ld, j->up + t * j->ld, (int)j->inter);
}

void dense_ffn(model *m, const model_layer *L, const float *x, float *out, int n) {
    size_t inter = (size_t)L->gate.rows;
    float *g = model_scratch(m, FWD_SLOT_FFN_GATE, (size_t)n * inter);
    silu_job j = {.out = g, .inter = inter};
    if (L->gate_up.data) { /* one pass over x for both, rows [gate | up] */
        float *gu = model_scratch(m, FWD_SLOT_FFN_UP, (size_t)n * 2 * inter);
        kern_matmul(m->pool, gu, x, &L->gate_up, NULL, n);
        j.gate = gu, j.up = gu + inter, j.ld = 2 * inter;
    } else {
        float *u = model_scratch(m, FWD_SLOT_FFN_UP, (size_t)n * inter);
        kern_matmul(m->pool, g, x, &L->gate, NULL, n);
        kern_matmul(m->pool, u, x, &L->up, NULL, n);
        j.gate = g, j.up = u, j.ld = inter;
    }
    /* a token's exp work is about 10 us: on the pool from two tokens (it ran
     * on the calling thread alone, 1.4 % of a prefill's time) */
    if (n > 1)
        pool_for(m->pool, silu_rows, &j, n, 1);
    else
        silu_rows(&j, 0, n);
    kern_matmul(m->pool, out, g, &L->down, NULL, n);
}

static int check_batch(model *m, model_batch_seq *batch, int n_batch, di_err *err) {
    const model_config *c = &m->cfg;
    bool any_full = false, any_swa = false;
    for (int l = 0; l < c->n_layers; l++) {
        any_full |= !c->layer_swa[l];
        any_swa |= c->layer_swa[l];
    }
    if (n_batch < 1) return di_errf(err, "model_forward: empty batch");
    for (int b = 0; b < n_batch; b++) {
        const model_batch_seq *bs = &batch[b];
        if (!bs->seq || !bs->tokens || bs->n_tokens < 1)
            return di_errf(err, "model_forward: batch entry %d has no tokens", b);
        const model_seq *s = bs->seq;
        for (int j = 0; j < b; j++)
            if (batch[j].seq == s)
                return di_errf(err, "model_forward: sequence appears twice (entries %d, %d)", j, b);
        int end = s->n_past + bs->n_tokens;
        if (any_full && s->n_blocks * MODEL_KV_BLOCK < end)
            return di_errf(
                err, "model_forward: entry %d needs KV blocks up to position %d (%d reserved)", b,
                end, s->n_blocks * MODEL_KV_BLOCK);
        if (any_swa && !s->swa)
            return di_errf(err, "model_forward: entry %d: sequence not made by model_seq_init", b);
        for (int i = 0; i < bs->n_tokens; i++)
            if (bs->tokens[i] < 0 || bs->tokens[i] >= c->vocab_size)
                return di_errf(err,
                               "model_forward: token %d (entry %d) outside the vocabulary (%d)",
                               bs->tokens[i], b, c->vocab_size);
    }
    return 0;
}

/* Layer segment seg of the sequences' cached KV in place (model_seq.kv_wait). */
static void wait_kv(const model_batch_seq *batch, int n_batch, int seg) {
    for (int b = 0; b < n_batch; b++) {
        const model_seq *s = batch[b].seq;
        if (s->kv_wait) s->kv_wait(s->kv_wait_ctx, seg);
    }
}

/* Final norm + lm_head for the rows that want logits or the final hidden;
 * lm_head runs over up to FWD_LOGIT_ROWS rows per call. */
enum { FWD_LOGIT_ROWS = 64 };

static void flush_logits(model *m, const model_step *st, const float *rows, int k, const int *dst_b,
                         const int *dst_i) {
    size_t V = (size_t)m->cfg.vocab_size;
    /* written in place when the rows' destinations follow one another (one
     * row, or a sequence's consecutive positions): no copy of k x V floats */
    float *to = st->batch[dst_b[0]].logits + (size_t)dst_i[0] * V;
    bool in_place = true;
    for (int j = 1; j < k && in_place; j++)
        in_place = st->batch[dst_b[j]].logits + (size_t)dst_i[j] * V == to + (size_t)j * V;
    if (in_place) {
        kern_matmul(m->pool, to, rows, &m->w.lm_head, NULL, k);
        return;
    }
    float *logits = model_scratch(m, FWD_SLOT_LOGITS, (size_t)k * V); /* grows with k */
    kern_matmul(m->pool, logits, rows, &m->w.lm_head, NULL, k);
    for (int j = 0; j < k; j++)
        memcpy(st->batch[dst_b[j]].logits + (size_t)dst_i[j] * V, logits + (size_t)j * V,
               V * sizeof(float));
}

static void emit_outputs(model *m, const model_step *st, const float *x) {
    const model_config *c = &m->cfg;
    size_t H = (size_t)c->hidden_size;
    float *rows = model_scratch(m, FWD_SLOT_XN, (size_t)FWD_LOGIT_ROWS * H);
    int dst_b[FWD_LOGIT_ROWS], dst_i[FWD_LOGIT_ROWS], k = 0;
    for (int b = 0; b < st->n_batch; b++) {
        const model_batch_seq *bs = &st->batch[b];
        for (int i = bs->all_logits ? 0 : bs->n_tokens - 1; i < bs->n_tokens; i++) {
            bool last = i == bs->n_tokens - 1;
            if (!bs->logits && !(last && bs->hidden)) continue;
            float *r = rows + (size_t)k * H;
            kern_rmsnorm(r, x + (size_t)(st->first[b] + i) * H, m->w.final_norm, (int)H,
                         c->rms_norm_eps);
            if (last && bs->hidden) memcpy(bs->hidden, r, H * sizeof(float));
            if (!bs->logits) continue;
            dst_b[k] = b;
            dst_i[k] = bs->all_logits ? i : 0;
            if (++k == FWD_LOGIT_ROWS) {
                flush_logits(m, st, rows, k, dst_b, dst_i);
                k = 0;
            }
        }
    }
    if (k) flush_logits(m, st, rows, k, dst_b, dst_i);
}

int model_forward(model *m, model_kv_pool *kv, model_batch_seq *batch, int n_batch, di_err *err) {
    const model_config *c = &m->cfg;
    if (check_batch(m, batch, n_batch, err)) return -1;
    int n = 0;
    for (int b = 0; b < n_batch; b++) n += batch[b].n_tokens;
    size_t H = (size_t)c->hidden_size;

    int *ints = scratch_ints(m, 3 * (size_t)n);
    int *pos = ints, *seq_of = ints + n, *first = ints + 2 * n;
    for (int b = 0, t = 0; b < n_batch; b++) {
        first[b] = t;
        for (int i = 0; i < batch[b].n_tokens; i++, t++) {
            pos[t] = batch[b].seq->n_past + i;
            seq_of[t] = b;
        }
    }
    /* first[] has n_batch entries; n >= n_batch, so it fits in its n slots. */
    int max_entry = 0; /* floats: an entry never takes more than that */
    for (int l = 0; l < c->n_layers; l++) {
        int e = model_kv_entry_floats(m, l);
        if (c->layer_swa[l] && e > max_entry) max_entry = e;
    }
    float *x = model_scratch(m, FWD_SLOT_X, (size_t)n * H);
    float *stage =
        max_entry ? model_scratch(m, FWD_SLOT_STAGE, (size_t)n * (size_t)max_entry) : NULL;
    model_step st = {kv, batch, n_batch, n, pos, seq_of, first, stage, NULL};
    int rd = model_rope_dim(m);
    if (rd) { /* every layer's angles, once */
        float *rope = model_scratch(m, FWD_SLOT_ROPE, (size_t)n * (size_t)rd);
        for (int t = 0; t < n; t++) {
            float *r = rope + (size_t)t * (size_t)rd;
            model_rope_at(m, pos[t], rd, r, r + rd / 2);
        }
        st.rope = rope;
    }
    model_kv_prepare(m, &st);

    for (int t = 0; t < n; t++)
        kern_row_f32(x + (size_t)t * H, &m->w.embed, batch[seq_of[t]].tokens[t - first[seq_of[t]]]);

    bool ds = c->arch == ARCH_DEEPSEEK_V2 || c->arch == ARCH_DEEPSEEK_V3;
    for (int l = 0, seg = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->w.layers[l];
        if (!c->layer_swa[l]) wait_kv(batch, n_batch, seg++);
        float *xn = model_scratch(m, FWD_SLOT_XN, (size_t)n * H);
        float *out = model_scratch(m, FWD_SLOT_OUT, (size_t)n * H);
        for (int t = 0; t < n; t++)
            kern_rmsnorm(xn + t * H, x + t * H, L->attn_norm, (int)H, c->rms_norm_eps);
        if (!ds)
            gqa_attention(m, &st, l, xn, out);
        else if (m->batch_invariant) /* the path AUTO picks depends on the chunk */
            mla_attention_path(m, &st, l, xn, out, MLA_PATH_ABSORBED);
        else
            mla_attention(m, &st, l, xn, out);
        kern_add(x, out, (int)((size_t)n * H));
        for (int t = 0; t < n; t++)
            kern_rmsnorm(xn + t * H, x + t * H, L->ffn_norm, (int)H, c->rms_norm_eps);
        (L->moe ? moe_ffn : dense_ffn)(m, L, xn, out, n);
        kern_add(x, out, (int)((size_t)n * H));
    }
    emit_outputs(m, &st, x);
    for (int b = 0; b < n_batch; b++) batch[b].seq->n_past += batch[b].n_tokens;
    return 0;
}
