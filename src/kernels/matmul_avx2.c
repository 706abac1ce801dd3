/* matmul_avx2.c — AVX2/FMA matmul for decode: the n = 1 GEMV and small
 * batches (n <= KERN_GEMM_MIN_N = 32), plus the dispatch between it and the blocked GEMM
 * (gemm_avx2.c) for prefill.
 *
 * Decode is bound by streaming the weights, so the kernel walks the matrix
 * once per call: a block of 4 rows stays in L1 while every token of the call
 * (T at a time in registers) is multiplied against it. Large n (batch-
 * invariant prefill) is cut into token tiles whose activations stay in L2
 * while the task's rows pass over them, rather than re-read from memory for
 * every row block. bf16 also runs the token passes over a row block column
 * chunk by column chunk (partial sums parked in memory in between, which
 * leaves the arithmetic unchanged), so the rows stream in from memory evenly
 * during the whole block instead of only during its first pass. Lanes run
 * along the columns (dot-product style): each (row, token) pair owns one 8-lane
 * accumulator, summed horizontally at the end in a fixed order and then the
 * column tail is added sequentially. That per-element order depends on
 * nothing but the matrix shape, not on n, T, the thread count or where the
 * token sits in the batch, which batch-invariant mode relies on for int8: in
 * that mode every int8 n goes through this kernel (other dtypes take the
 * GEMM's order at every n, which runs prefill far closer to the FMA peak).
 * On AVX-512 CPUs, bf16 and (with VNNI) int8 at n >= 2 run their row
 * blocks at twice the width (matmul_avx512.c), in a fixed order of their own;
 * batch-invariant int8 takes those at every n, and plain int8 up to
 * kern_i8_x16_max(cols) tokens the row kernel there on int16 activations
 * (kern_i8_x16_rows_avx512); bf16 and f32 at one token in plain mode
 * stream their rows one after another there (kern_bf16_one_rows_avx512,
 * kern_f32_one_rows_avx512). With AVX2 alone up to KERN_ONE_ROWS_MAX tokens
 * in plain mode stream the rows one after another too, in 256 bits
 * (matmul_one_avx2.c): bf16, f32 and int8.
 *
 * bf16 weights are widened two ways per 16 columns: a 32-bit lane holding
 * (w[2j+1], w[2j]) gives w[2j] by a shift and w[2j+1] by a mask, so the
 * activations are pre-split into even/odd halves per 16-column block once per
 * call (the rows that stream one after another read them in bf16 instead,
 * widened the same way: half the bytes beside the weight stream in L1).
 * int8 weights use llama.cpp's Q8_0 trick: activations are quantized per 32
 * columns and the products summed in integers with maddubs (|x| times w
 * carrying x's sign, so the per-row work is one sign per token), then
 * scaled once per block. Weights must lie in [-127, 127], as
 * kern_quantize_i8 makes them.
 *
 * The per-call preparation of the activations (the even/odd split, the int8
 * quantization, kern_quantize_act_avx2) runs serially before the threads
 * start, so it is vectorized too: scalar, it cost up to a fifth of an int8
 * n = 8 call. */
#include "kernels/kern_internal.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/hsum_avx2.h"

#define SB_R 4 /* rows per block */
/* Activations of one token tile stay in L2 while the task's rows pass over
 * them, so a large n does not re-read them from memory per row block. */
#define SB_TILE_BYTES (256 << 10)
/* bf16: columns per chunk. All token passes over a row block run chunk by
 * chunk, the partial sums parked in memory in between, so the weights stream
 * in evenly while the later passes compute from L1. */
#define SB_KC 512

typedef struct sb_job {
    const kern_mat *W;
    float *y;
    const float *x;  /* n x cols activations (natural order) */
    const float *xp; /* bf16: activations with each 16-block (AVX-512: 32-block) split even/odd */
    size_t ldxp;     /* floats from one token's row of xp to the next */
    const uint16_t *xb; /* bf16 through the one-token rows: the activations in bf16 */
    size_t ldxb;        /* elements from one token's row of xb to the next */
    bool avx512;        /* bf16: blocks through kern_sb_rows_bf16_avx512 */
    bool i8_lanes;      /* int8 with AVX-512 VNNI: tiles of KERN_I8_TILE_ROWS rows */
    const float *bias;
    int n;
    const int8_t *xq;   /* int8: quantized activations, n x cols */
    const float *xs;    /* their per-block scales, n x nb */
    const int32_t *xst; /* AVX-512 int8: each block's start, kern_i8_block_starts */
    int nb;
    kern_i8_x16 x16; /* int8, a few tokens in plain mode: their int16 activations */
    int tile;        /* tokens per token tile */
    int n_tasks;
} sb_job;

#define AI static inline __attribute__((always_inline))

/* ---- bf16: R rows x T tokens ------------------------------------------- */
/* Adds columns [k0, k1) (multiples of 16) of rows [r0, r0 + R) times tokens
 * [t0, t0 + T) onto the partial sums acc[r * ld + t]. With pf, the pass also
 * prefetches the next row block at the same columns (other pages, which the
 * hardware prefetcher does not cross): only the first token pass over a
 * chunk does, as it is the one that streams the rows from memory. */
AI void sb_bf16(const sb_job *j, int r0, int t0, const int R, const int T, int k0, int k1,
                __m256 *part, int ld, const bool pf) {
    const kern_mat *W = j->W;
    int K = W->cols;
    size_t ahead = (size_t)SB_R * K;
    const uint16_t *w[SB_R];
    const float *xp[2];
    for (int r = 0; r < R; r++) w[r] = (const uint16_t *)W->data + (size_t)(r0 + r) * K;
    for (int t = 0; t < T; t++) xp[t] = j->xp + (size_t)(t0 + t) * j->ldxp;
    __m256 acc[SB_R][2];
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) acc[r][t] = part[r * ld + t];
    for (int k = k0; k < k1; k += 16) {
        __m256 xe[2], xo[2];
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) {
            xe[t] = _mm256_loadu_ps(xp[t] + k);
            xo[t] = _mm256_loadu_ps(xp[t] + k + 8);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            if (pf) _mm_prefetch((const char *)(w[r] + k + ahead), _MM_HINT_T0);
            __m256i v = _mm256_loadu_si256((const __m256i *)(w[r] + k));
            __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
            __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
#pragma GCC unroll 2
            for (int t = 0; t < T; t++) {
                /* the even product and then the odd one fused onto the
                 * accumulator: an even product, the odd one fused onto it
                 * and the sum added (the accumulator chain only the add)
                 * costs three operations per two products where Zen 3 has
                 * two FMA pipes: one core, in L1, 55 against 88 % of the FMA
                 * peak; llama-1b decode at batch 8 +13 % (33.2 against 29.1
                 * tok/s, alternating runs). */
                acc[r][t] = _mm256_fmadd_ps(we, xe[t], acc[r][t]);
                acc[r][t] = _mm256_fmadd_ps(wo, xo[t], acc[r][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) part[r * ld + t] = acc[r][t];
}

/* Runs rows [r0, r0 + R) against tokens [t_lo, t_hi) (at most KERN_SB_TILE_MAX),
 * two at a time, chunk by chunk; then the horizontal sums in a fixed order,
 * the column tail in sequence, and the bias. */
AI void sb_rows_bf16(const sb_job *j, int r0, const int R, int t_lo, int t_hi) {
    const kern_mat *W = j->W;
    int K = W->cols, K16 = K & ~15, nt = t_hi - t_lo;
    __m256 part[SB_R * KERN_SB_TILE_MAX];
    for (int i = 0; i < R * nt; i++) part[i] = _mm256_setzero_ps();
    for (int k0 = 0; k0 < K16; k0 += SB_KC) {
        int k1 = k0 + SB_KC < K16 ? k0 + SB_KC : K16;
        int t = t_lo;
        for (; t + 2 <= t_hi; t += 2) {
            if (t == t_lo)
                sb_bf16(j, r0, t, R, 2, k0, k1, part, nt, true);
            else
                sb_bf16(j, r0, t, R, 2, k0, k1, part + (t - t_lo), nt, false);
        }
        if (t < t_hi) {
            if (t == t_lo)
                sb_bf16(j, r0, t, R, 1, k0, k1, part, nt, true);
            else
                sb_bf16(j, r0, t, R, 1, k0, k1, part + (t - t_lo), nt, false);
        }
    }
    for (int r = 0; r < R; r++) {
        const uint16_t *w = (const uint16_t *)W->data + (size_t)(r0 + r) * K;
        for (int t = t_lo; t < t_hi; t++) {
            float s = hsum8(part[r * nt + t - t_lo]);
            const float *x = j->x + (size_t)t * K;
            for (int c = K16; c < K; c++) s += kern_bf16_to_f32(w[c]) * x[c];
            j->y[(size_t)t * W->rows + r0 + r] = s + (j->bias ? j->bias[r0 + r] : 0.0f);
        }
    }
}

/* ---- f32 and f16: R rows x T tokens, 8 columns per step ---------------- */
AI __m256 load8(const void *base, size_t i, const bool half) {
    if (half)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + i)));
    return _mm256_loadu_ps((const float *)base + i);
}

AI void sb_f32(const sb_job *j, int r0, int t0, const int R, const int T, const bool half,
               bool first) {
    const kern_mat *W = j->W;
    int K = W->cols, K8 = K & ~7;
    /* The first token pass over a row block streams the rows from memory:
     * prefetch the next row block at the same column (other pages, which the
     * hardware prefetcher does not cross). Later passes hit L1/L2, and
     * prefetch in place. */
    size_t pf = first ? (size_t)SB_R * K : 0;
    size_t wrow[SB_R];
    const float *x[4];
    for (int r = 0; r < R; r++) wrow[r] = (size_t)(r0 + r) * K;
    for (int t = 0; t < T; t++) x[t] = j->x + (size_t)(t0 + t) * K;
    __m256 acc[SB_R][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int k = 0; k < K8; k += 8) {
        __m256 xv[4];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) xv[t] = _mm256_loadu_ps(x[t] + k);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            if (!half || (k & 15) == 0) /* once per 64 bytes */
                _mm_prefetch((const char *)W->data + (wrow[r] + k + pf) * (half ? 2 : 4),
                             _MM_HINT_T0);
            __m256 wv = load8(W->data, wrow[r] + k, half);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            float s = hsum8(acc[r][t]);
            for (int c = K8; c < K; c++) {
                float wc = half ? kern_f16_to_f32(((const uint16_t *)W->data)[wrow[r] + c])
                                : ((const float *)W->data)[wrow[r] + c];
                s += wc * x[t][c];
            }
            j->y[(size_t)(t0 + t) * W->rows + r0 + r] = s + (j->bias ? j->bias[r0 + r] : 0.0f);
        }
}

/* ---- int8 (blockable groups): R rows x T tokens, 32 columns per step ---- */
AI void sb_i8(const sb_job *j, int r0, int t0, const int R, const int T, const bool per_row,
              bool first) {
    const kern_mat *W = j->W;
    int K = W->cols, K32 = K & ~31, g = per_row ? K : W->group, ng = K / g;
    /* The first token pass over a row block streams the rows from memory:
     * prefetch the next row block at the same column (other pages, which the
     * hardware prefetcher does not cross). Later passes hit L1/L2, and
     * prefetch in place. */
    size_t pf = first ? (size_t)SB_R * K : 0;
    const int8_t *w[SB_R];
    const float *ws[SB_R];
    for (int r = 0; r < R; r++) {
        w[r] = (const int8_t *)W->data + (size_t)(r0 + r) * K;
        ws[r] = W->scales + (size_t)(r0 + r) * ng;
    }
    const int8_t *xq[4];
    const float *xs[4];
    for (int t = 0; t < T; t++) {
        xq[t] = j->xq + (size_t)(t0 + t) * K;
        xs[t] = j->xs + (size_t)(t0 + t) * j->nb;
    }
    __m256 acc[SB_R][4];
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    /* Per row: one pass over all blocks, the row scale applied at the end.
     * Per group: the group's scale folds into each block's scale. */
    int gstep = per_row ? (K32 > 0 ? K32 : 32) : g;
    for (int g0 = 0; g0 < K32; g0 += gstep) {
        __m256 sw[SB_R];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            sw[r] = per_row ? _mm256_set1_ps(1.0f) : _mm256_broadcast_ss(ws[r] + g0 / g);
        int gend = g0 + gstep < K32 ? g0 + gstep : K32;
        for (int k = g0; k < gend; k += 32) {
            int b = k / 32;
            __m256i xv[4], xa[4];
            __m256 sx[4];
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                xv[t] = _mm256_loadu_si256((const __m256i *)(xq[t] + k));
                xa[t] = _mm256_abs_epi8(xv[t]);
                sx[t] = _mm256_broadcast_ss(xs[t] + b);
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                _mm_prefetch((const char *)(w[r] + k + pf), _MM_HINT_T0);
                __m256i wv = _mm256_loadu_si256((const __m256i *)(w[r] + k));
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) {
                    /* |x| * (w with x's sign): unsigned x signed bytes, pairs to i16, to i32.
                     * Exact because weights lie in [-127, 127] (kern_quantize_i8). */
                    __m256i p16 = _mm256_maddubs_epi16(xa[t], _mm256_sign_epi8(wv, xv[t]));
                    __m256 pf = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                    __m256 sc = per_row ? sx[t] : _mm256_mul_ps(sx[t], sw[r]);
                    acc[r][t] = _mm256_fmadd_ps(pf, sc, acc[r][t]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            float s = hsum8(acc[r][t]);
            if (K32 < K) /* only with one scale per row: tail block of the row */
                s += xs[t][K32 / 32] * kern_i8_dot_tail(w[r], xq[t], K32, K);
            if (per_row) s *= ws[r][0];
            j->y[(size_t)(t0 + t) * W->rows + r0 + r] = s + (j->bias ? j->bias[r0 + r] : 0.0f);
        }
}

/* Runs rows [r0, r0 + R) against tokens [t_lo, n), T at a time. */
AI void sb_rows(const sb_job *j, int r0, const int R, int t_lo, int n) {
    int t = t_lo;
    switch (j->W->dtype) {
    case KT_BF16:
        if (j->avx512)
            kern_sb_rows_bf16_avx512(j->W, j->y, j->x, j->xp, j->ldxp, j->bias, r0, R, t_lo, n);
        else
            sb_rows_bf16(j, r0, R, t_lo, n);
        break;
    case KT_F32:
        for (; t + 3 <= n; t += 3) sb_f32(j, r0, t, R, 3, false, t == t_lo);
        if (n - t == 2)
            sb_f32(j, r0, t, R, 2, false, t == t_lo);
        else if (n - t == 1)
            sb_f32(j, r0, t, R, 1, false, t == t_lo);
        break;
    case KT_F16:
        for (; t + 3 <= n; t += 3) sb_f32(j, r0, t, R, 3, true, t == t_lo);
        if (n - t == 2)
            sb_f32(j, r0, t, R, 2, true, t == t_lo);
        else if (n - t == 1)
            sb_f32(j, r0, t, R, 1, true, t == t_lo);
        break;
    case KT_I8: /* (with AVX-512, sb_task calls its own tiles) */
        if (j->W->group <= 0 || j->W->group == j->W->cols) {
            for (; t + 2 <= n; t += 2) sb_i8(j, r0, t, R, 2, true, t == t_lo);
            if (t < n) sb_i8(j, r0, t, R, 1, true, t == t_lo);
        } else {
            for (; t + 2 <= n; t += 2) sb_i8(j, r0, t, R, 2, false, t == t_lo);
            if (t < n) sb_i8(j, r0, t, R, 1, false, t == t_lo);
        }
        break;
    }
}

/* One token, bf16 or f32, on AVX-512: the rows one after another. */
static void sb_one_rows_avx512(void *ctx, int lo, int hi) {
    const sb_job *j = ctx;
    if (j->W->dtype == KT_BF16)
        kern_bf16_one_rows_avx512(j->W, j->y, j->xb, j->bias, lo, hi);
    else
        kern_f32_one_rows_avx512(j->W, j->y, j->x, j->bias, lo, hi);
}

static void one_rows_avx2(void *ctx, int lo, int hi) {
    kern_one_rows_avx2(ctx, lo, hi);
}

/* Up to KERN_ONE_ROWS_MAX tokens in plain mode through the AVX2 rows. */
static void run_one_rows_avx2(pool *p, const sb_job *j) {
    kern_one_rows o = {.W = j->W,
                       .y = j->y,
                       .bias = j->bias,
                       .n = j->n,
                       .x = j->x,
                       .xb = j->xb,
                       .ldxb = j->ldxb,
                       .xq = j->xq,
                       .xs = j->xs,
                       .nb = j->nb};
    pool_for(p, one_rows_avx2, &o, j->W->rows, kern_one_token_grain(j->W->dtype, j->W->cols));
}

static void sb_x16_rows(void *ctx, int lo, int hi) {
    const sb_job *j = ctx;
    kern_i8_x16_rows_avx512(j->W, j->y, &j->x16, j->bias, lo, hi);
}

static void sb_task(void *ctx, int task, int n_tasks) {
    const sb_job *j = ctx;
    int lo, hi;
    kern_split(j->W->rows, j->i8_lanes ? KERN_I8_TILE_ROWS : SB_R, task, n_tasks, &lo, &hi);
    for (int t0 = 0; t0 < j->n; t0 += j->tile) {
        int t1 = t0 + j->tile < j->n ? t0 + j->tile : j->n;
        if (j->i8_lanes) {
            kern_sb_rows_i8_avx512(j->W, j->y, j->xq, j->xs, j->xst, j->nb, j->bias, lo, hi - lo,
                                   t0, t1);
            continue;
        }
        int r = lo;
        for (; r + SB_R <= hi; r += SB_R) sb_rows(j, r, SB_R, t0, t1);
        for (; r < hi; r++) sb_rows(j, r, 1, t0, t1);
    }
}

/* The bf16 bits of K activations that are bf16 values already (a bf16
 * matmul's are rounded, kern_matmul): each float's upper half. */
static void bf16_exact(uint16_t *dst, const float *src, int K) {
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        __m256i a = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(src + k)), 16);
        __m256i b = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(src + k + 8)), 16);
        /* per 128-bit lane a0-3 b0-3 | a4-7 b4-7, then the middle quarters swapped */
        __m256i v = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + k), v);
    }
    for (; k < K; k++) {
        uint32_t u;
        memcpy(&u, src + k, sizeof u);
        dst[k] = (uint16_t)(u >> 16);
    }
}

/* Splits each 16-column block of every token into even then odd columns
 * (plain copies, so exact). */
static void split_even_odd(float *xp, const float *x, int n, int K) {
    for (int t = 0; t < n; t++) {
        const float *src = x + (size_t)t * K;
        float *dst = xp + (size_t)t * K;
        int k = 0;
        for (; k + 16 <= K; k += 16) {
            __m256 a = _mm256_loadu_ps(src + k), b = _mm256_loadu_ps(src + k + 8);
            /* per 128-bit lane: a0 a2 b0 b2 | a4 a6 b4 b6, then 64-bit pieces reordered */
            __m256 e = _mm256_shuffle_ps(a, b, 0x88), o = _mm256_shuffle_ps(a, b, 0xdd);
            e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xd8));
            o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xd8));
            _mm256_storeu_ps(dst + k, e);
            _mm256_storeu_ps(dst + k + 8, o);
        }
        for (; k < K; k++) dst[k] = src[k];
    }
}

/* kern_quantize_act with AVX2: the same block maximum (max is exact in any
 * order), the same scale and inverse (IEEE divisions, eight blocks at a
 * time), the same products rounded to nearest even, so the same bytes as the
 * scalar loop. The last, partial block goes through the scalar loop. */
static inline __m256 block_absmax(const float *xb) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 a = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xb), absm),
                             _mm256_and_ps(_mm256_loadu_ps(xb + 8), absm));
    __m256 c = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xb + 16), absm),
                             _mm256_and_ps(_mm256_loadu_ps(xb + 24), absm));
    return _mm256_max_ps(a, c);
}

/* Lane i of the result: the largest lane of m[i]. */
static inline __m256 hmax8x8(const __m256 m[8]) {
    __m256 t[4], u[2];
    for (int i = 0; i < 4; i++)
        t[i] = _mm256_max_ps(_mm256_unpacklo_ps(m[2 * i], m[2 * i + 1]),
                             _mm256_unpackhi_ps(m[2 * i], m[2 * i + 1]));
    for (int i = 0; i < 2; i++)
        u[i] = _mm256_max_ps(_mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44),
                             _mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0xee));
    return _mm256_max_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20),
                         _mm256_permute2f128_ps(u[0], u[1], 0x31));
}

/* 32 values times inv, rounded, as bytes in order. */
static inline void block_quantize(int8_t *q, const float *xb, __m256 vi) {
    __m256i iv[4];
    for (int i = 0; i < 4; i++)
        iv[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * i), vi),
                                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    /* packs work per 128-bit lane: dwords come out as 0 2 4 6 1 3 5 7 of the
     * wanted order; one dword permute puts them back. */
    __m256i p =
        _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
    _mm256_storeu_si256((__m256i *)q,
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

void kern_quantize_act_avx2(int8_t *q, float *s, const float *x, int cols) {
    const __m256 k127 = _mm256_set1_ps(127.0f);
    int nfull = cols / KQ_BLOCK, b = 0;
    for (; b + 8 <= nfull; b += 8) {
        const float *xb = x + (size_t)b * KQ_BLOCK;
        __m256 m[8];
        for (int i = 0; i < 8; i++) m[i] = block_absmax(xb + i * KQ_BLOCK);
        __m256 amax = hmax8x8(m);
        __m256 sc = _mm256_div_ps(amax, k127);
        __m256 inv = _mm256_and_ps(_mm256_cmp_ps(sc, _mm256_setzero_ps(), _CMP_GT_OQ),
                                   _mm256_div_ps(k127, amax));
        _mm256_storeu_ps(s + b, sc);
        float iv[8];
        _mm256_storeu_ps(iv, inv);
        for (int i = 0; i < 8; i++)
            block_quantize(q + (size_t)(b + i) * KQ_BLOCK, xb + i * KQ_BLOCK,
                           _mm256_set1_ps(iv[i]));
    }
    if (b * KQ_BLOCK < cols)
        kern_quantize_act_scalar(q + (size_t)b * KQ_BLOCK, s + b, x + (size_t)b * KQ_BLOCK,
                                 cols - b * KQ_BLOCK);
}

static void sb_matmul(pool *p, float *y, const float *x, const kern_mat *W, const float *bias,
                      int n) {
    sb_job j = {.W = W, .y = y, .x = x, .bias = bias, .n = n};
    int K = W->cols;
    /* One token on AVX-512, bf16 and f32: the rows one after another, one
     * stream per thread, the threads' ends balanced. */
    bool one_avx512 = n == 1 && kern_use_avx512() && (W->dtype == KT_BF16 || W->dtype == KT_F32);
    /* bf16 and f32 through the AVX2 rows (below) */
    bool rows_avx2 = n <= KERN_ONE_ROWS_MAX && !kern_batch_inv() && !kern_use_avx512();
    if (W->dtype == KT_BF16 && (one_avx512 || rows_avx2)) {
        /* Those rows and the AVX2 ones below read the activations in bf16;
         * rows padded by 128 bytes, as the AVX-512 blocks' are (below). */
        j.ldxb = (size_t)K + 64;
        uint16_t *xb = kern_scratch(KERN_SCRATCH_ACT, (size_t)n * j.ldxb * sizeof(uint16_t));
        for (int t = 0; t < n; t++) bf16_exact(xb + (size_t)t * j.ldxb, x + (size_t)t * K, K);
        j.xb = xb;
    }
    if (one_avx512) {
        pool_for(p, sb_one_rows_avx512, &j, W->rows, kern_one_token_grain(W->dtype, K));
        return;
    }
    if (W->dtype == KT_BF16 && !j.xb) {
        /* From two tokens the AVX-512 blocks: the arithmetic counts. */
        j.avx512 = kern_use_avx512();
        /* AVX-512: rows padded by 128 bytes, so that the tokens' activations
         * at one column do not all fall in one L1 set (with the weight rows,
         * 4 KiB apart at 2048 columns) when K is a multiple of 1024. */
        j.ldxp = j.avx512 ? (size_t)K + 32 : (size_t)K;
        float *xp = kern_scratch(KERN_SCRATCH_ACT, (size_t)n * j.ldxp * sizeof(float));
        if (j.avx512)
            kern_split_even_odd32_avx512(xp, j.ldxp, x, n, K);
        else
            split_even_odd(xp, x, n, K);
        j.xp = xp;
    } else if (W->dtype == KT_I8) {
        /* As bf16, n >= 2; batch-invariant mode needs one order for every
         * n, and takes the one that serves batches. */
        j.i8_lanes = kern_use_avx512_vnni() && (n >= 2 || kern_batch_inv());
        j.nb = (K + KQ_BLOCK - 1) / KQ_BLOCK;
        /* A few tokens in plain mode: rows one after another, on int16
         * activations of their own. */
        if (n <= kern_i8_x16_max(K) && !kern_batch_inv() && kern_use_avx512_vnni() &&
            kern_i8_x16_fits(W)) {
            void *buf = kern_scratch(KERN_SCRATCH_ACT, kern_i8_x16_bytes(K, n));
            kern_i8_x16_prepare(&j.x16, buf, x, W, n);
            /* one stream per thread, the threads' ends balanced */
            pool_for(p, sb_x16_rows, &j, W->rows, kern_one_token_grain(KT_I8, K));
            return;
        }
        size_t nq = ((size_t)n * K + 32 + 63) & ~(size_t)63;
        int8_t *xq = kern_scratch(KERN_SCRATCH_ACT, nq);
        size_t ns = ((size_t)n * j.nb + 16) & ~(size_t)15; /* floats, then the starts */
        float *xs = kern_scratch(KERN_SCRATCH_ACT2, ns * (sizeof(float) + sizeof(int32_t)));
        for (int t = 0; t < n; t++)
            kern_quantize_act(xq + (size_t)t * K, xs + (size_t)t * j.nb, x + (size_t)t * K, K);
        j.xq = xq;
        j.xs = xs;
        if (j.i8_lanes) {
            int32_t *xst = (int32_t *)(xs + ns);
            kern_i8_block_starts(xst, xq, n, K);
            j.xst = xst;
            if (n == 1 && kern_batch_inv() && W->panels) { /* the tiles packed once */
                kern_i8_one_packed_avx512(p, W, y, xq, xs, xst, j.nb, bias);
                return;
            }
        }
    }
    /* A few tokens in plain mode with AVX2 (bf16 and f32 without AVX-512,
     * int8 where neither the int16 rows above nor the 16-row lanes run):
     * the rows one after another, one stream per thread. */
    if (W->dtype == KT_I8 ? n <= KERN_ONE_ROWS_MAX && !kern_batch_inv() && !j.i8_lanes
                          : W->dtype != KT_F16 && rows_avx2) {
        run_one_rows_avx2(p, &j);
        return;
    }
    size_t tok_bytes = W->dtype == KT_I8 ? (size_t)K + (size_t)j.nb * 4 : (size_t)K * 4;
    size_t tile = SB_TILE_BYTES / tok_bytes;
    if (tile > KERN_SB_TILE_MAX) tile = KERN_SB_TILE_MAX;
    if (tile >= 12) tile -= tile % 12; /* whole register blocks of 2 and 3 tokens */
    j.tile = tile < 4 ? 4 : (int)tile;
    /* the int8 tiles keep a chunk of their rows in L1 for every token */
    if (j.i8_lanes) j.tile = KERN_SB_TILE_MAX;
    /* Several tasks per thread so a late-waking worker does not leave one
     * thread with all the rows; small matrices stay on one thread. */
    int rows_per_block = j.i8_lanes ? KERN_I8_TILE_ROWS : SB_R;
    int blocks = (W->rows + rows_per_block - 1) / rows_per_block;
    double work = (double)W->rows * K * n;
    int tasks = work < 65536 ? 1 : pool_threads(p) * 4;
    if (tasks > blocks) tasks = blocks;
    j.n_tasks = tasks;
    pool_run(p, sb_task, &j, tasks);
}

bool kern_matmul_avx2(pool *p, float *y, const float *x, const kern_mat *W, const float *bias,
                      int n, bool batch_inv) {
    if (W->dtype == KT_I8 && !kern_i8_blockable(W)) return false;
    if (W->cols <= 0) return false;
    /* A bf16 matrix with a packed copy reads only that, in either mode
     * (panels_avx2.c; the GEMM widens its panels from it). */
    if (W->dtype == KT_BF16 && W->panels) {
        if (n <= KERN_GEMM_MIN_N)
            kern_bf16_few_packed_avx2(p, W, y, x, n, bias);
        else
            kern_gemm_avx2(p, y, x, W, bias, n);
        return true;
    }
    /* Batch-invariant mode needs one order for every n: the GEMM's (it has a
     * small-n path of its own), except for int8, whose integer dot products
     * only this kernel has. */
    if (batch_inv && W->dtype != KT_I8) {
        kern_gemm_avx2(p, y, x, W, bias, n);
        return true;
    }
    if (batch_inv || n <= KERN_GEMM_MIN_N || W->cols < 64) {
        sb_matmul(p, y, x, W, bias, n);
        return true;
    }
    kern_gemm_avx2(p, y, x, W, bias, n);
    return true;
}
