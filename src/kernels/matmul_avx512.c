/* matmul_avx512.c — on CPUs with AVX-512 without BF16 dot products: the
 * bf16 row blocks of the small-n matmul for batched decode (2 <= n <=
 * KERN_GEMM_MIN_N). matmul_avx2.c walks the rows and tokens and calls these
 * in place of its own 8-lane blocks. Batched decode is bound by the
 * arithmetic as much as by the memory stream: streaming a llama-1b's
 * matrices at n = 8, the bf16 blocks ran about 1.1-1.2x the AVX2 blocks'
 * rate. At n = 1 the AVX2 blocks streamed the weights 5-15 % faster
 * (measured on Zen 5), so they keep that case.
 *
 * Same scheme as the AVX2 blocks, twice as wide: a block of 4 rows stays in
 * L1 while the tokens pass over it (4 at a time in registers, 16
 * accumulators), column chunk by column chunk, the partial sums parked in
 * memory in between, so the rows stream in evenly while the later passes
 * compute from L1; the first pass prefetches the next row block. A 32-bit
 * lane holding (w[2j+1], w[2j]) gives w[2j] by a shift and w[2j+1] by a
 * mask, so 64 bytes of weights widen to 32 f32 in two integer operations,
 * against activations split into even/odd halves per 32-column block once
 * per call. Activations stay f32; the products are exact FMAs.
 *
 * Per (row, token) the order is fixed by the matrix shape alone — the column
 * steps in order, the chunks in order, one fixed reduction tree, then the
 * column tail in sequence — so a token gets the same bits whatever n (from 2),
 * its place in the batch or the thread count. */
#include "kernels/kern_internal.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

#define SB512_R  4   /* rows per block */
#define SB512_T  4   /* tokens per pass, in registers */
#define SB512_KC 512 /* columns per chunk */

/* Adds columns [k0, k1) (multiples of 32) of rows [r0, r0 + R) times tokens
 * [t0, t0 + T) onto part[r * ld + t]. With pf, prefetches the next row block
 * at the same columns (other pages, which the hardware prefetcher does not
 * cross): only the first pass over a chunk does, as it streams the rows. */
AI void sb512(const kern_mat *W, const float *xp, size_t ldx, int r0, int t0, const int R,
              const int T, int k0, int k1, __m512 *part, int ld, const bool pf) {
    int K = W->cols;
    size_t ahead = (size_t)SB512_R * K;
    const uint16_t *w[SB512_R];
    const float *x[SB512_T];
    for (int r = 0; r < R; r++) w[r] = (const uint16_t *)W->data + (size_t)(r0 + r) * K;
    for (int t = 0; t < T; t++) x[t] = xp + (size_t)(t0 + t) * ldx;
    __m512 acc[SB512_R][SB512_T];
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[r][t] = part[r * ld + t];
    for (int k = k0; k < k1; k += 32) {
        __m512 xe[SB512_T], xo[SB512_T];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            xe[t] = _mm512_loadu_ps(x[t] + k);
            xo[t] = _mm512_loadu_ps(x[t] + k + 16);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            if (pf) _mm_prefetch((const char *)(w[r] + k + ahead), _MM_HINT_T0);
            __m512i v = _mm512_loadu_si512(w[r] + k);
            __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
            __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm512_fmadd_ps(wo, xo[t], _mm512_fmadd_ps(we, xe[t], acc[r][t]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) part[r * ld + t] = acc[r][t];
}

/* Runs PASS(t, T) for the token passes over [t_lo, t_hi): SB512_T tokens at a
 * time, then the remainder with its own constant count, so that each pass's
 * accumulators stay in registers. */
#define TOKEN_PASSES(t_lo, t_hi, PASS)                                                             \
    do {                                                                                           \
        int t_ = (t_lo);                                                                           \
        for (; t_ + SB512_T <= (t_hi); t_ += SB512_T) PASS(t_, SB512_T);                           \
        switch ((t_hi)-t_) {                                                                       \
        case 3:                                                                                    \
            PASS(t_, 3);                                                                           \
            break;                                                                                 \
        case 2:                                                                                    \
            PASS(t_, 2);                                                                           \
            break;                                                                                 \
        case 1:                                                                                    \
            PASS(t_, 1);                                                                           \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

/* One chunk of every token pass; the first one streams. */
AI void sb512_chunk(const kern_mat *W, const float *xp, size_t ldx, int r0, const int R, int t_lo,
                    int t_hi, int k0, int k1, __m512 *part) {
    int nt = t_hi - t_lo;
#define PASS(t, T) sb512(W, xp, ldx, r0, t, R, T, k0, k1, part + (t - t_lo), nt, t == t_lo)
    TOKEN_PASSES(t_lo, t_hi, PASS);
#undef PASS
}

AI void rows_bf16(const kern_mat *W, float *y, const float *x, const float *xp, size_t ldx,
                  const float *bias, int r0, const int R, int t_lo, int t_hi) {
    int K = W->cols, K32 = K & ~31, nt = t_hi - t_lo;
    __m512 part[SB512_R * KERN_SB_TILE_MAX];
    for (int i = 0; i < R * nt; i++) part[i] = _mm512_setzero_ps();
    for (int k0 = 0; k0 < K32; k0 += SB512_KC) {
        int k1 = k0 + SB512_KC < K32 ? k0 + SB512_KC : K32;
        sb512_chunk(W, xp, ldx, r0, R, t_lo, t_hi, k0, k1, part);
    }
    for (int r = 0; r < R; r++) {
        const uint16_t *w = (const uint16_t *)W->data + (size_t)(r0 + r) * K;
        for (int t = t_lo; t < t_hi; t++) {
            float s = _mm512_reduce_add_ps(part[r * nt + t - t_lo]);
            const float *xt = x + (size_t)t * K;
            for (int c = K32; c < K; c++) s += kern_bf16_to_f32(w[c]) * xt[c];
            y[(size_t)t * W->rows + r0 + r] = s + (bias ? bias[r0 + r] : 0.0f);
        }
    }
}

void kern_sb_rows_bf16_avx512(const kern_mat *W, float *y, const float *x, const float *xp,
                              size_t ldx, const float *bias, int r0, int R, int t_lo, int t_hi) {
    if (R == SB512_R)
        rows_bf16(W, y, x, xp, ldx, bias, r0, SB512_R, t_lo, t_hi);
    else
        for (int r = r0; r < r0 + R; r++) rows_bf16(W, y, x, xp, ldx, bias, r, 1, t_lo, t_hi);
}

void kern_split_even_odd32_avx512(float *xp, size_t ldx, const float *x, int n, int K) {
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd =
        _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int t = 0; t < n; t++) {
        const float *src = x + (size_t)t * K;
        float *dst = xp + (size_t)t * ldx;
        int k = 0;
        for (; k + 32 <= K; k += 32) {
            __m512 a = _mm512_loadu_ps(src + k), b = _mm512_loadu_ps(src + k + 16);
            _mm512_storeu_ps(dst + k, _mm512_permutex2var_ps(a, even, b));
            _mm512_storeu_ps(dst + k + 16, _mm512_permutex2var_ps(a, odd, b));
        }
        for (; k < K; k++) dst[k] = src[k];
    }
}
