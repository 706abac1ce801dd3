/* rope.c — rotary-embedding frequencies with the config's scaling folded in,
 * and the YaRN attention scale.
 *
 * At load the inverse frequencies for the model's rotary width (head_dim for
 * the Llama family, qk_rope_head_dim for DeepSeek) are computed once, as
 * transformers does: default theta^(-2i/d); linear divides by factor; Llama 3
 * blends low/high-frequency bands around original_max_position_embeddings;
 * YaRN (HF modeling_deepseek) mixes interpolated and extrapolated frequencies
 * over a linear ramp between the correction dims and multiplies cos/sin by
 * yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim).
 * model_rope_at then costs one multiply and one sincos per pair. The angle is
 * formed in f32 (position x inv_freq) like the PyTorch reference. The table
 * is immutable after load. */
#include <math.h>
#include <stdlib.h>

#include "model/model_internal.h"

typedef struct {
    int dim;
    float *inv_freq; /* dim / 2 */
    float mscale;    /* cos/sin multiplier (YaRN), else 1 */
} rope_tab;

static double yarn_get_mscale(double scale, double mscale) {
    return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_correction_dim(double rot, int dim, double base, int max_pos) {
    return (dim * log(max_pos / (rot * 2 * M_PI))) / (2 * log(base));
}

/* Inverse frequencies of `dim` rotated dims (dim / 2 entries) and the cos/sin multiplier. */
static void compute_freqs(const model_config *c, int dim, float *inv, float *mscale) {
    int half = dim / 2;
    double base = c->rope_theta, f = c->rope_factor;
    *mscale = 1.0f;
    for (int i = 0; i < half; i++) {
        /* HF: 1 / base^(2i/dim) computed in float32 */
        float e = (float)(2 * i) / (float)dim;
        inv[i] = (float)(1.0 / pow(base, (double)e));
    }
    switch (c->rope_kind) {
    case ROPE_DEFAULT:
        break;
    case ROPE_LINEAR:
        for (int i = 0; i < half; i++) inv[i] = (float)(inv[i] / f);
        break;
    case ROPE_LLAMA3: {
        double old = c->rope_original_max_pos, lo = c->rope_low_freq_factor,
               hi = c->rope_high_freq_factor;
        double lo_wl = old / lo, hi_wl = old / hi;
        for (int i = 0; i < half; i++) {
            double wl = 2 * M_PI / inv[i];
            if (wl > lo_wl) {
                inv[i] = (float)(inv[i] / f);
            } else if (wl >= hi_wl) {
                double s = (old / wl - lo) / (hi - lo);
                inv[i] = (float)((1 - s) * inv[i] / f + s * inv[i]);
            }
        }
        break;
    }
    case ROPE_YARN: {
        double lo =
            floor(yarn_correction_dim(c->yarn_beta_fast, dim, base, c->rope_original_max_pos));
        double hi =
            ceil(yarn_correction_dim(c->yarn_beta_slow, dim, base, c->rope_original_max_pos));
        if (lo < 0) lo = 0;
        if (hi > dim - 1) hi = dim - 1;
        if (lo == hi) hi += 0.001;
        for (int i = 0; i < half; i++) {
            double ramp = (i - lo) / (hi - lo);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            double extra_mask = 1.0 - ramp; /* 1: keep the original (extrapolated) frequency */
            float extra = inv[i];
            float inter = (float)(1.0 / (f * pow(base, (double)((float)(2 * i) / (float)dim))));
            inv[i] = (float)(inter * (1 - extra_mask) + extra * extra_mask);
        }
        *mscale = (float)(yarn_get_mscale(f, c->yarn_mscale) /
                          yarn_get_mscale(f, c->yarn_mscale_all_dim));
        break;
    }
    }
}

int model_rope_init(model *m, di_err *err) {
    const model_config *c = &m->cfg;
    bool ds = c->arch == ARCH_DEEPSEEK_V2 || c->arch == ARCH_DEEPSEEK_V3;
    int dim = ds ? c->qk_rope_head_dim : c->head_dim;
    if (dim <= 0 || dim % 2) return di_errf(err, "config.json: rotary width %d must be even", dim);
    rope_tab *t = di_calloc(1, sizeof *t);
    t->dim = dim;
    t->inv_freq = di_malloc((size_t)dim / 2 * sizeof(float));
    compute_freqs(c, dim, t->inv_freq, &t->mscale);
    m->rope = t;
    return 0;
}

void model_rope_free(model *m) {
    rope_tab *t = m->rope;
    if (!t) return;
    free(t->inv_freq);
    free(t);
    m->rope = NULL;
}

void model_rope_at(const model *m, int pos, int dim, float *cos_out, float *sin_out) {
    const rope_tab *t = m->rope;
    float local[512], ms;
    const float *inv = t->inv_freq;
    if (dim != t->dim) { /* an unusual width: compute its frequencies here */
        float *buf = dim / 2 <= 512 ? local : di_malloc((size_t)dim / 2 * sizeof(float));
        compute_freqs(&m->cfg, dim, buf, &ms);
        for (int i = 0; i < dim / 2; i++) {
            float a = (float)pos * buf[i];
            cos_out[i] = (float)cos((double)a) * ms;
            sin_out[i] = (float)sin((double)a) * ms;
        }
        if (buf != local) free(buf);
        return;
    }
    ms = t->mscale;
    for (int i = 0; i < dim / 2; i++) {
        float a = (float)pos * inv[i];
        cos_out[i] = (float)cos((double)a) * ms;
        sin_out[i] = (float)sin((double)a) * ms;
    }
}

int model_rope_dim(const model *m) {
    return m->rope ? ((const rope_tab *)m->rope)->dim : 0;
}

/* A token's angles are the same in every layer: forward.c computes them
 * once a step (sincos per pair was 0.9 us a layer for a 64-wide head, of
 * about 30 us of serial work between a decode layer's matmuls). */
const float *model_rope_of(const model *m, const model_step *st, int t, int dim, float *buf) {
    if (st->rope && dim == model_rope_dim(m)) return st->rope + (size_t)t * (size_t)dim;
    model_rope_at(m, st->pos[t], dim, buf, buf + dim / 2);
    return buf;
}

float model_attn_mscale(const model *m) {
    const model_config *c = &m->cfg;
    bool ds = c->arch == ARCH_DEEPSEEK_V2 || c->arch == ARCH_DEEPSEEK_V3;
    /* HF modeling_deepseek: any rope_scaling with mscale_all_dim scales the softmax. */
    if (!ds || c->rope_kind == ROPE_DEFAULT || c->yarn_mscale_all_dim == 0) return 1.0f;
    double s = yarn_get_mscale(c->rope_factor, c->yarn_mscale_all_dim);
    return (float)(s * s);
}
