/* matmul_one_avx2.c — one token in plain mode with AVX2: the rows one
 * after another, for bf16 and f32 on CPUs without AVX-512, and for int8
 * where the int16 rows (matmul_avx512.c) do not run (no AVX-512 VNNI, or
 * weight groups they do not fit).
 *
 * A decode step at batch 1 streams every weight once, and the 4-row blocks
 * of matmul_avx2.c stream four rows at a time, each a page or more apart,
 * which the hardware prefetchers take as four streams stopping at every
 * page. Here each thread reads its rows in address order, one sequential
 * stream, with kern_stream_ahead's prefetches (the page touch and the
 * non-temporal lines a page on), as the AVX-512 one-token rows do. Four
 * accumulators (eight for bf16's even and odd halves) cover the FMAs'
 * latency. Measured on this project's Zen 5 host running the AVX2 code
 * (DEEPINFER_ISA=avx2; no AVX2-only machine here), llama-1b decode against
 * the 4-row blocks, alternating runs of 64 tokens: bf16 15.2-16.1 -> 20.8-21.9
 * tok/s, int8 31.2-32.0 -> 41.2-45.0, f32 8.5-9.4 -> 11.3-12.0 (40 tokens).
 *
 * Each kernel's order is its own (plain mode: a token's bits may differ
 * between batch 1 and larger batches, as on AVX-512): per row, chunk c of
 * each step onto accumulator c, the accumulators added pairwise, one
 * reduction (hsum8), the row's tail columns in sequence, the bias. */
#include "kernels/kern_internal.h"

#include <immintrin.h>

#include "kernels/hsum_avx2.h"

#define AI static inline __attribute__((always_inline))

AI float sum4(const __m256 a[4]) {
    return hsum8(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
}

/* bf16: 16 columns a chunk, a 32-bit lane holding (w[2j+1], w[2j]) gives
 * w[2j] by a shift and w[2j+1] by a mask, against xp (each 16-column block
 * of the activations split into its even then its odd columns). */
AI void bf16_chunk(__m256 a[2], const uint16_t *w, const float *xp) {
    __m256i v = _mm256_loadu_si256((const __m256i *)w);
    __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
    a[0] = _mm256_fmadd_ps(we, _mm256_loadu_ps(xp), a[0]);
    a[1] = _mm256_fmadd_ps(wo, _mm256_loadu_ps(xp + 8), a[1]);
}

void kern_bf16_one_rows_avx2(const kern_mat *W, float *y, const float *x, const float *xp,
                             const float *bias, int r0, int r1) {
    int K = W->cols, K16 = K & ~15, K64 = K & ~63;
    for (int r = r0; r < r1; r++) {
        const uint16_t *w = (const uint16_t *)W->data + (size_t)r * K;
        __m256 a[4][2];
        for (int c = 0; c < 4; c++) a[c][0] = a[c][1] = _mm256_setzero_ps();
        int k = 0;
        for (; k < K64; k += 64) {
            kern_stream_ahead(w + k, 64 * sizeof(uint16_t));
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) bf16_chunk(a[c], w + k + 16 * c, xp + k + 16 * c);
        }
        for (int c = 0; k < K16; k += 16, c++) bf16_chunk(a[c], w + k, xp + k);
        __m256 s4[4];
        for (int c = 0; c < 4; c++) s4[c] = _mm256_add_ps(a[c][0], a[c][1]);
        float s = sum4(s4);
        for (; k < K; k++) s += kern_bf16_to_f32(w[k]) * x[k];
        y[r] = s + (bias ? bias[r] : 0.0f);
    }
}

void kern_f32_one_rows_avx2(const kern_mat *W, float *y, const float *x, const float *bias, int r0,
                            int r1) {
    int K = W->cols, K8 = K & ~7, K32 = K & ~31;
    for (int r = r0; r < r1; r++) {
        const float *w = (const float *)W->data + (size_t)r * K;
        __m256 a[4];
        for (int c = 0; c < 4; c++) a[c] = _mm256_setzero_ps();
        int k = 0;
        for (; k < K32; k += 32) {
            kern_stream_ahead(w + k, 32 * sizeof(float));
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                a[c] = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 8 * c),
                                       _mm256_loadu_ps(x + k + 8 * c), a[c]);
        }
        for (int c = 0; k < K8; k += 8, c++)
            a[c] = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), a[c]);
        float s = sum4(a);
        for (; k < K; k++) s += w[k] * x[k];
        y[r] = s + (bias ? bias[r] : 0.0f);
    }
}

/* int8 (blockable groups, kern_i8_blockable): the activations quantized per
 * block of KQ_BLOCK columns (xq, one scale each in xs), the products of a
 * block summed in integers as the 4-row blocks do (maddubs on |x| and w
 * carrying x's sign, exact for weights in [-127, 127]), then converted and
 * added times the block's scale (and the weight group's) onto the block's
 * accumulator; per row the accumulators reduced, the row's partial last
 * block in integers (one scale per row only), times the row scale. */
AI void i8_block(__m256 *a, const int8_t *w, const int8_t *x, float scale) {
    __m256i xv = _mm256_loadu_si256((const __m256i *)x);
    __m256i wv = _mm256_loadu_si256((const __m256i *)w);
    __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(wv, xv));
    __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
    *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(scale), *a);
}

AI void i8_one_rows(const kern_mat *W, float *y, const int8_t *xq, const float *xs,
                    const float *bias, int r0, int r1, const bool per_row) {
    int K = W->cols, K32 = K & ~31, K128 = K & ~127;
    int g = per_row ? K : W->group, ng = K / g;
    for (int r = r0; r < r1; r++) {
        const int8_t *w = (const int8_t *)W->data + (size_t)r * K;
        const float *ws = W->scales + (size_t)r * ng;
        __m256 a[4];
        for (int c = 0; c < 4; c++) a[c] = _mm256_setzero_ps();
        int k = 0;
        for (; k < K128; k += 128) {
            kern_stream_ahead(w + k, 128);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                int kc = k + 32 * c;
                float sc = xs[kc / KQ_BLOCK];
                if (!per_row) sc *= ws[kc / g];
                i8_block(&a[c], w + kc, xq + kc, sc);
            }
        }
        for (int c = 0; k < K32; k += 32, c++)
            i8_block(&a[c], w + k, xq + k,
                     per_row ? xs[k / KQ_BLOCK] : xs[k / KQ_BLOCK] * ws[k / g]);
        float s = sum4(a);
        if (K32 < K) /* only with one scale per row */
            s += xs[K32 / KQ_BLOCK] * kern_i8_dot_tail(w, xq, K32, K);
        if (per_row) s *= ws[0];
        y[r] = s + (bias ? bias[r] : 0.0f);
    }
}

void kern_i8_one_rows_avx2(const kern_mat *W, float *y, const int8_t *xq, const float *xs,
                           const float *bias, int r0, int r1) {
    if (W->group <= 0 || W->group == W->cols)
        i8_one_rows(W, y, xq, xs, bias, r0, r1, true);
    else
        i8_one_rows(W, y, xq, xs, bias, r0, r1, false);
}
