/* panels_avx2.c — batch-invariant mode's packed copy of a bf16 matrix
 * where there is no AVX-512 BF16 (kern_pack_panels), and one token on it.
 *
 * Batch-invariant bf16 sums in the AVX2 GEMM's order (gemm_avx2.c): rows
 * side by side in the lanes; per block of KERN_GEMM_AVX2_KC columns a
 * chain of FMAs over the columns in order, from zero; each block's sum
 * added onto y, which starts at the bias. A lone token read straight from
 * the row-major weights transposes every 8 x 8 tile as it streams it (the
 * GEMM's small-n path): on Zen 3 at 62-69 % of the read bandwidth where the
 * plain rows run at 89-96 %. Packed once when the mode goes on, the weights
 * stream in the order the lanes take them.
 *
 * The layout has the size and the 128-row groups of the AVX-512 copy
 * (matmul_bf16_avx512.c), so that a view starting on a group keeps the copy
 * at the same offset (kern_mat_rows): group g at g * 128 * kp 32-bit words
 * (kp = ceil(cols / 2), the column pairs); a group of np 16-row panels has
 * 2 np strips of 8 rows, the first 8 strips (64 rows) laid out first, then
 * the rest. In a half of s strips, pair q of strip i is at (q * s + i) * 8:
 * eight words, one per row, each the row's columns 2q (low half) and
 * 2q + 1 (high half); zero past the rows and columns. A token reads a half
 * as one stream, its s strips' chains side by side: per pair the even
 * product then (where the column exists) the odd one fused onto the strip's
 * accumulator, the order of the GEMM's chain, so the same bits. */
#include "kernels/kern_internal.h"

#include <immintrin.h>

#define AI        static inline __attribute__((always_inline))
#define PA_GROUP  KERN_PANEL_GROUP_ROWS /* rows per group */
#define PA_HALF   64                    /* rows per half of a group */
#define PA_STRIP  8                     /* rows per strip: one vector */
#define PA_KC     KERN_GEMM_AVX2_KC     /* columns per block of the GEMM's order */
#define PA_PANEL  16                    /* rows per panel (the copy's size) */
#define PA_STRIPS (PA_HALF / PA_STRIP)

/* Half h (64 rows from 64 h) of W's copy: its first word and its strips. */
static size_t pa_half_at(const kern_mat *W, int h, int *strips) {
    size_t kp = ((size_t)W->cols + 1) / 2;
    int g = h / 2, rows_g = W->rows - g * PA_GROUP < PA_GROUP ? W->rows - g * PA_GROUP : PA_GROUP;
    int s_group = 2 * ((rows_g + PA_PANEL - 1) / PA_PANEL);
    *strips = h % 2 ? s_group - PA_STRIPS : s_group < PA_STRIPS ? s_group : PA_STRIPS;
    return (size_t)g * PA_GROUP * kp + (size_t)(h % 2) * PA_HALF * kp;
}

typedef struct pa_job {
    const kern_mat *W;
    uint32_t *dst;  /* packing */
    float *y;       /* a token: */
    const float *x; /* its activations, rounded to bf16 values */
    const float *bias;
} pa_job;

static void pa_pack_halves(void *ctx, int lo, int hi) {
    const pa_job *j = ctx;
    const kern_mat *W = j->W;
    const uint16_t *w = W->data;
    int K = W->cols, kp = (K + 1) / 2;
    for (int h = lo; h < hi; h++) {
        int s;
        uint32_t *d = j->dst + pa_half_at(W, h, &s);
        for (int i = 0; i < s; i++)
            for (int l = 0; l < PA_STRIP; l++) {
                int r = h * PA_HALF + i * PA_STRIP + l;
                const uint16_t *row = w + (size_t)r * K;
                for (int q = 0; q < kp; q++) {
                    uint32_t v = 0;
                    if (r < W->rows)
                        v = row[2 * q] | (2 * q + 1 < K ? (uint32_t)row[2 * q + 1] << 16 : 0);
                    d[((size_t)q * s + i) * PA_STRIP + l] = v;
                }
            }
    }
}

void kern_bf16_pack_panels_avx2(pool *p, uint32_t *dst, const kern_mat *W) {
    pa_job j = {.W = W, .dst = dst};
    pool_for(p, pa_pack_halves, &j, (W->rows + PA_HALF - 1) / PA_HALF, 1);
}

/* Pairs [q0, q1) of a half of S strips from d against x: each strip's chain
 * from zero, added onto y's rows (rows past the matrix not stored). odd:
 * whether the last pair's high column exists. */
AI void pa_block(const uint32_t *d, const float *x, int q0, int q1, bool odd, float *y, int rows,
                 const int S) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256 acc[PA_STRIPS];
#pragma GCC unroll 8
    for (int i = 0; i < S; i++) acc[i] = _mm256_setzero_ps();
    int qe = odd ? q1 : q1 - 1; /* pairs with both columns */
    for (int q = q0; q < qe; q++) {
        const uint32_t *dq = d + (size_t)q * S * PA_STRIP;
        kern_stream_ahead(dq, (size_t)S * PA_STRIP * sizeof(uint32_t));
        __m256 xe = _mm256_broadcast_ss(x + 2 * q), xo = _mm256_broadcast_ss(x + 2 * q + 1);
#pragma GCC unroll 8
        for (int i = 0; i < S; i++) {
            __m256i v = _mm256_load_si256((const __m256i *)(dq + i * PA_STRIP));
            __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
            __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
            acc[i] = _mm256_fmadd_ps(we, xe, acc[i]);
            acc[i] = _mm256_fmadd_ps(wo, xo, acc[i]);
        }
    }
    if (qe < q1) { /* the matrix's last column alone */
        const uint32_t *dq = d + (size_t)qe * S * PA_STRIP;
        __m256 xe = _mm256_broadcast_ss(x + 2 * qe);
#pragma GCC unroll 8
        for (int i = 0; i < S; i++) {
            __m256i v = _mm256_load_si256((const __m256i *)(dq + i * PA_STRIP));
            acc[i] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), xe, acc[i]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < S; i++) {
        float *c = y + i * PA_STRIP;
        int vr = rows - i * PA_STRIP;
        if (vr >= PA_STRIP) {
            _mm256_storeu_ps(c, _mm256_add_ps(_mm256_loadu_ps(c), acc[i]));
        } else if (vr > 0) {
            float a[PA_STRIP];
            _mm256_storeu_ps(a, acc[i]);
            for (int l = 0; l < vr; l++) c[l] += a[l];
        }
    }
}

/* A half of S strips (rows from r0), every block of the GEMM's order. */
AI void pa_half(const pa_job *j, const uint32_t *d, int r0, const int S) {
    const kern_mat *W = j->W;
    int K = W->cols, kp = (K + 1) / 2, rows = W->rows - r0;
    for (int k0 = 0; k0 < K; k0 += PA_KC) {
        bool last = k0 + PA_KC >= K;
        pa_block(d, j->x, k0 / 2, last ? kp : (k0 + PA_KC) / 2, !last || K % 2 == 0, j->y + r0,
                 rows, S);
    }
}

static void pa_token_halves(void *ctx, int lo, int hi) {
    const pa_job *j = ctx;
    const kern_mat *W = j->W;
    kern_start_rows(j->y, 1, W->rows, j->bias, lo * PA_HALF,
                    hi * PA_HALF < W->rows ? hi * PA_HALF : W->rows);
    for (int h = lo; h < hi; h++) {
        int s;
        const uint32_t *d = W->panels + pa_half_at(W, h, &s);
        switch (s) {
#define PA_CASE(S)                                                                                 \
    case S:                                                                                        \
        pa_half(j, d, h *PA_HALF, S);                                                              \
        break;
            PA_CASE(1)
            PA_CASE(2)
            PA_CASE(3)
            PA_CASE(4)
            PA_CASE(5)
            PA_CASE(6)
            PA_CASE(7)
            PA_CASE(8)
#undef PA_CASE
        }
    }
}

void kern_bf16_one_packed_avx2(pool *p, const kern_mat *W, float *y, const float *x,
                               const float *bias) {
    pa_job j = {.W = W, .y = y, .x = x, .bias = bias};
    pool_for(p, pa_token_halves, &j, (W->rows + PA_HALF - 1) / PA_HALF, 1);
}
