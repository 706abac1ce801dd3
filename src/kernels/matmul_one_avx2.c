/* matmul_one_avx2.c — one to KERN_ONE_ROWS_MAX tokens in plain mode with
 * AVX2: the rows one after another, for bf16 and f32 on CPUs without
 * AVX-512, and for int8 where neither the int16 rows (matmul_avx512.c) nor
 * the 16-row lanes (matmul_i8_avx512.c) run: no AVX-512 VNNI, or at one
 * token weight groups the int16 rows do not fit.
 *
 * A decode step at small batch streams every weight once, and the 4-row
 * blocks of matmul_avx2.c stream four rows at a time, each a page or more
 * apart, which the hardware prefetchers take as four streams stopping at
 * every page. Here each thread reads its rows in address order, one
 * sequential stream, with kern_stream_ahead_l2's prefetches (the page touch
 * and each line into L2 8 KiB on), and each weight step, loaded (and
 * widened) once, serves every token. AVX2 has 16 vector registers: at three
 * tokens the accumulators take twelve. Measured on this project's Zen 5
 * host running the AVX2 code (DEEPINFER_ISA=avx2): the figures at
 * kern_one_rows_avx2 in kern_internal.h; the prefetch on a Zen 3 (AVX2
 * only), at kern_stream_ahead_l2.
 *
 * Each kernel's order is its own (plain mode): per (row, token), chunk c
 * of each step onto accumulator c, the accumulators added pairwise, one
 * reduction (hsum8), the row's tail columns in sequence, the bias. f32 has
 * one layout for every n up to KERN_ONE_ROWS_MAX; bf16 and int8 one for a
 * token alone and one from two tokens (below), so a token gets the same
 * bits in batches of 2 to KERN_ONE_ROWS_MAX, others alone, others again
 * from KERN_ONE_ROWS_MAX + 1 tokens (the 4-row blocks). */
#include "kernels/kern_internal.h"

#include <immintrin.h>

#include "kernels/hsum_avx2.h"

#define AI    static inline __attribute__((always_inline))
#define T_MAX KERN_ONE_ROWS_MAX

AI float sum4(const __m256 a[4]) {
    return hsum8(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
}

/* bf16: 16 columns a chunk, four chunks a 128-byte step; a 32-bit lane
 * holding (w[2j+1], w[2j]) gives w[2j] by a shift and w[2j+1] by a mask,
 * and the activations, in bf16 too, the same way, so the products are those
 * of the rounded activations in f32, exactly. Read as bf16 the activations
 * take half the L1 they took in f32 (a row of 8192 columns 16 KiB, not 32,
 * which the weight stream had pushed out of L1 before each row came back
 * to them). One token: the even and the odd products onto accumulators of
 * their own (a[c][0], a[c][1]), added at the end; more tokens, where AVX2's
 * 16 registers hold no more, the odd product after the even one onto one
 * accumulator per chunk. */
AI void bf16_chunk(__m256 a[T_MAX][4][2], int c, const uint16_t *w, const uint16_t *xb, size_t ldxb,
                   const int T) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256i v = _mm256_loadu_si256((const __m256i *)w);
    __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
#pragma GCC unroll 3
    for (int t = 0; t < T; t++) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(xb + (size_t)t * ldxb));
        __m256 xe = _mm256_castsi256_ps(_mm256_slli_epi32(xv, 16));
        __m256 xo = _mm256_castsi256_ps(_mm256_and_si256(xv, hi));
        a[t][c][0] = _mm256_fmadd_ps(we, xe, a[t][c][0]);
        if (T == 1)
            a[t][c][1] = _mm256_fmadd_ps(wo, xo, a[t][c][1]);
        else
            a[t][c][0] = _mm256_fmadd_ps(wo, xo, a[t][c][0]);
    }
}

AI void bf16_rows(const kern_one_rows *o, int r0, int r1, const int T) {
    const kern_mat *W = o->W;
    int K = W->cols, M = W->rows, K16 = K & ~15, K64 = K & ~63;
    for (int r = r0; r < r1; r++) {
        const uint16_t *w = (const uint16_t *)W->data + (size_t)r * K;
        __m256 a[T_MAX][4][2];
#pragma GCC unroll 3
        for (int t = 0; t < T; t++)
            for (int c = 0; c < 4; c++) a[t][c][0] = a[t][c][1] = _mm256_setzero_ps();
        int k = 0;
        for (; k < K64; k += 64) {
            kern_stream_ahead_l2(w + k, 64 * sizeof(uint16_t));
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                bf16_chunk(a, c, w + k + 16 * c, o->xb + k + 16 * c, o->ldxb, T);
        }
        for (int c = 0; k < K16; k += 16, c++) bf16_chunk(a, c, w + k, o->xb + k, o->ldxb, T);
#pragma GCC unroll 3
        for (int t = 0; t < T; t++) {
            const float *x = o->x + (size_t)t * K;
            __m256 s4[4];
            for (int c = 0; c < 4; c++)
                s4[c] = T == 1 ? _mm256_add_ps(a[t][c][0], a[t][c][1]) : a[t][c][0];
            float s = sum4(s4);
            for (int c = k; c < K; c++) s += kern_bf16_to_f32(w[c]) * x[c];
            o->y[(size_t)t * M + r] = s + (o->bias ? o->bias[r] : 0.0f);
        }
    }
}

/* f32: 8 columns a chunk, four chunks a 128-byte step. */
AI void f32_rows(const kern_one_rows *o, int r0, int r1, const int T) {
    const kern_mat *W = o->W;
    int K = W->cols, M = W->rows, K8 = K & ~7, K32 = K & ~31;
    for (int r = r0; r < r1; r++) {
        const float *w = (const float *)W->data + (size_t)r * K;
        __m256 a[T_MAX][4];
#pragma GCC unroll 3
        for (int t = 0; t < T; t++)
            for (int c = 0; c < 4; c++) a[t][c] = _mm256_setzero_ps();
        int k = 0;
        for (; k < K32; k += 32) {
            kern_stream_ahead_l2(w + k, 32 * sizeof(float));
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                __m256 wv = _mm256_loadu_ps(w + k + 8 * c);
#pragma GCC unroll 3
                for (int t = 0; t < T; t++)
                    a[t][c] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(o->x + (size_t)t * K + k + 8 * c),
                                              a[t][c]);
            }
        }
        for (int c = 0; k < K8; k += 8, c++) {
            __m256 wv = _mm256_loadu_ps(w + k);
#pragma GCC unroll 3
            for (int t = 0; t < T; t++)
                a[t][c] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(o->x + (size_t)t * K + k), a[t][c]);
        }
#pragma GCC unroll 3
        for (int t = 0; t < T; t++) {
            const float *x = o->x + (size_t)t * K;
            float s = sum4(a[t]);
            for (int c = k; c < K; c++) s += w[c] * x[c];
            o->y[(size_t)t * M + r] = s + (o->bias ? o->bias[r] : 0.0f);
        }
    }
}

/* int8 (blockable groups, kern_i8_blockable): the activations quantized per
 * block of KQ_BLOCK columns (xq, one scale each in xs), the products of a
 * block summed in integers as the 4-row blocks do (maddubs on |x| and w
 * carrying x's sign, exact for weights in [-127, 127]), then converted and
 * added times the block's scale (and the weight group's) onto its chunk's
 * accumulator: four blocks a 128-byte step at one token, two a 64-byte
 * step from two (the registers). Per (row, token) the accumulators added
 * pairwise and reduced, the row's partial last block in integers (one scale
 * per row only), times the row scale. */
AI void i8_block(__m256 a[T_MAX][4], int c, const int8_t *w, const kern_one_rows *o, int k,
                 float wscale, const bool per_row, const int T) {
    __m256i wv = _mm256_loadu_si256((const __m256i *)(w + k));
#pragma GCC unroll 3
    for (int t = 0; t < T; t++) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(o->xq + (size_t)t * o->W->cols + k));
        __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(wv, xv));
        __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
        float sc = o->xs[(size_t)t * o->nb + k / KQ_BLOCK];
        if (!per_row) sc *= wscale;
        a[t][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(sc), a[t][c]);
    }
}

AI void i8_rows(const kern_one_rows *o, int r0, int r1, const bool per_row, const int T) {
    const int C = T == 1 ? 4 : 2; /* blocks a step */
    const kern_mat *W = o->W;
    int K = W->cols, M = W->rows, K32 = K & ~31, Kstep = K / (32 * C) * (32 * C);
    int g = per_row ? K : W->group, ng = K / g;
    for (int r = r0; r < r1; r++) {
        const int8_t *w = (const int8_t *)W->data + (size_t)r * K;
        const float *ws = W->scales + (size_t)r * ng;
        __m256 a[T_MAX][4];
#pragma GCC unroll 3
        for (int t = 0; t < T; t++)
            for (int c = 0; c < 4; c++) a[t][c] = _mm256_setzero_ps();
        int k = 0;
        for (; k < Kstep; k += 32 * C) {
            kern_stream_ahead_l2(w + k, 32 * (size_t)C);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                i8_block(a, c, w, o, k + 32 * c, ws[(k + 32 * c) / g], per_row, T);
        }
        for (int c = 0; k < K32; k += 32, c++) i8_block(a, c, w, o, k, ws[k / g], per_row, T);
#pragma GCC unroll 3
        for (int t = 0; t < T; t++) {
            const int8_t *xq = o->xq + (size_t)t * K;
            const float *xs = o->xs + (size_t)t * o->nb;
            float s = C == 4 ? sum4(a[t]) : hsum8(_mm256_add_ps(a[t][0], a[t][1]));
            if (k < K) /* only with one scale per row */
                s += xs[k / KQ_BLOCK] * kern_i8_dot_tail(w, xq, k, K);
            if (per_row) s *= ws[0];
            o->y[(size_t)t * M + r] = s + (o->bias ? o->bias[r] : 0.0f);
        }
    }
}

AI void one_rows_t(const kern_one_rows *o, int r0, int r1, const int T) {
    const kern_mat *W = o->W;
    if (W->dtype == KT_BF16)
        bf16_rows(o, r0, r1, T);
    else if (W->dtype == KT_F32)
        f32_rows(o, r0, r1, T);
    else if (W->group <= 0 || W->group == W->cols)
        i8_rows(o, r0, r1, true, T);
    else
        i8_rows(o, r0, r1, false, T);
}

void kern_one_rows_avx2(const kern_one_rows *o, int r0, int r1) {
    _Static_assert(KERN_ONE_ROWS_MAX == 3, "one case per token count");
    switch (o->n) { /* a constant T each: the accumulators stay in registers */
    case 1:
        one_rows_t(o, r0, r1, 1);
        break;
    case 2:
        one_rows_t(o, r0, r1, 2);
        break;
    case 3:
        one_rows_t(o, r0, r1, 3);
        break;
    default:
        break;
    }
}
