/* matmul_avx512.c — on CPUs with AVX-512: the bf16 row blocks of the
 * small-n matmul for batched decode (2 <= n <= KERN_GEMM_MIN_N) where the
 * CPU has no BF16 dot products, and the one-token rows in plain mode (a
 * single stream per thread, 256-bit loads; below) for bf16 without BF16
 * dot products, f32, and int8 up to kern_i8_x16_max(cols) tokens. matmul_avx2.c
 * walks the rows and tokens and calls these in place of its own 8-lane
 * blocks; int8 past kern_i8_x16_max(cols) tokens has its own kernel
 * (matmul_i8_avx512.c).
 * Batched decode is bound by the arithmetic as much as by the memory
 * stream: streaming a llama-1b's matrices at n = 8, the bf16 blocks ran
 * about 1.1-1.2x the AVX2 blocks' rate.
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
#include "kernels/load_avx512.h"

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

/* ---- bf16 without BF16 dot products, one token (plain mode) ---------------- */
/* The rows one after another as the f32 one-token rows below, each 32
 * columns widened by the shift and the mask, and the activations, in bf16
 * (xb, exact: a bf16 matmul's are rounded), the same way, eight accumulators
 * (the even and the odd halves of the four 32-column chunks of a 128-column
 * step). The activations had been split into even and odd f32 columns: at
 * 8192 columns 32 KiB, which the weight stream pushed out of L1 before each
 * row came back to them; in bf16 16 KiB, and the products the same. Four
 * copies of the 2048 x 8192 rows, alternating: 70.1-71.2 -> 77.5-78.3 GB/s
 * (best of 6, three runs each); rows of 2048 columns level.
 * Streaming 16 of llama-1b's matrices with the BF16 dot products switched
 * off (this host's stand-in for AVX-512 CPUs without them), alternating
 * with the AVX2 4-row blocks that had served the case (they had streamed
 * 5-15 % faster than these blocks at twice the width): 66.3-66.4 against
 * 45.3-47.0 GB/s (x1.41, medians of 12 rounds). Its own order:
 * chunk c of each step onto accumulators (c, even) and (c, odd), the row's
 * last partial step in masked 32-column chunks, then the eight added as a
 * tree, one reduction, the columns past the last multiple of 32 in
 * sequence, then the bias. */
/* 32 bf16 weights (64 bytes, v) onto a chunk's even and odd accumulators
 * against the chunk's 32 bf16 activations xb. */
AI void bf16_one_chunk(__m512 a[2], __m512i v, const uint16_t *xb) {
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512i xv = _mm512_loadu_si512(xb);
    __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
    a[0] = _mm512_fmadd_ps(we, _mm512_castsi512_ps(_mm512_slli_epi32(xv, 16)), a[0]);
    a[1] = _mm512_fmadd_ps(wo, _mm512_castsi512_ps(_mm512_and_si512(xv, hi)), a[1]);
}

void kern_bf16_one_rows_avx512(const kern_mat *W, float *y, const uint16_t *xb, const float *bias,
                               int r0, int r1) {
    int K = W->cols, K32 = K & ~31, K128 = K & ~127;
    for (int r = r0; r < r1; r++) {
        const uint16_t *w = (const uint16_t *)W->data + (size_t)r * K;
        __m512 a[4][2];
        for (int c = 0; c < 4; c++) a[c][0] = a[c][1] = _mm512_setzero_ps();
        int k = 0;
        for (; k < K128; k += 128) {
            kern_stream_ahead(w + k, 128 * sizeof(uint16_t));
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                bf16_one_chunk(a[c], kern_load64_halves(w + k + 32 * c), xb + k + 32 * c);
        }
        for (int c = 0; k < K32; k += 32, c++)
            bf16_one_chunk(a[c], kern_load64_halves(w + k), xb + k);
        __m512 s4[4];
        for (int c = 0; c < 4; c++) s4[c] = _mm512_add_ps(a[c][0], a[c][1]);
        float s = _mm512_reduce_add_ps(
            _mm512_add_ps(_mm512_add_ps(s4[0], s4[1]), _mm512_add_ps(s4[2], s4[3])));
        for (; k < K; k++) s += kern_bf16_to_f32(w[k]) * kern_bf16_to_f32(xb[k]);
        y[r] = s + (bias ? bias[r] : 0.0f);
    }
}

/* ---- f32, one token (plain mode) ------------------------------------------ */
/* As the bf16 one-token rows (matmul_bf16_avx512.c): the rows one after
 * another, one sequential stream per thread with kern_stream_ahead's
 * prefetches, the weights in 256-bit loads, four accumulators to cover the
 * FMAs' latency. Streaming 16 of llama-1b's matrices in f32 at one token,
 * alternating with the 4-row blocks (matmul_avx2.c) that had served it:
 * 71.5-72.6 against 48.1-48.7 GB/s (x1.46-1.54, medians of 12 rounds);
 * llama-1b --dtype f32 decode 10.7 -> 13.8 tok/s. Its own order: chunk c
 * of 16 columns of each 64-column step onto accumulator c (the row's last
 * partial step in masked chunks, zero past the row), then (a0 + a1) +
 * (a2 + a3), one reduction, then the bias. */
void kern_f32_one_rows_avx512(const kern_mat *W, float *y, const float *x, const float *bias,
                              int r0, int r1) {
    int K = W->cols, K64 = K & ~63;
    for (int r = r0; r < r1; r++) {
        const float *w = (const float *)W->data + (size_t)r * K;
        __m512 a[4];
        for (int c = 0; c < 4; c++) a[c] = _mm512_setzero_ps();
        int k = 0;
        for (; k < K64; k += 64) {
            kern_stream_ahead(w + k, 64 * sizeof(float));
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                a[c] = _mm512_fmadd_ps(_mm512_castsi512_ps(kern_load64_halves(w + k + 16 * c)),
                                       _mm512_loadu_ps(x + k + 16 * c), a[c]);
        }
        for (int c = 0; k < K; k += 16, c++) {
            __mmask16 m = K - k >= 16 ? 0xffff : (__mmask16)((1u << (K - k)) - 1);
            a[c] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + k), _mm512_maskz_loadu_ps(m, x + k),
                                   a[c]);
        }
        float s = _mm512_reduce_add_ps(
            _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
        y[r] = s + (bias ? bias[r] : 0.0f);
    }
}

/* ---- int8, up to kern_i8_x16_max(cols) tokens (plain mode) ----------------- */
/* The rows one after another, one sequential stream per thread touched two
 * pages ahead as it enters a page (kern_page_ahead) and the weights in
 * 256-bit loads, as the bf16 one-token rows (matmul_bf16_avx512.c): the
 * 4-row blocks' four streams and prefetch within the page stream slower on
 * Zen 5. The page touch: llama-1b's matrices at one token 20-24 % faster,
 * its decode 12-22 % (36.1-39.5 against 40.4-46.8 tok/s, alternating).
 *
 * Each weight line is also prefetched a page on with the non-temporal
 * hint (kern_stream_ahead), which keeps the activations, 2 bytes a column,
 * in L1: 11-27 % faster at 1 to 3 tokens.
 *
 * The activations go in as int16, one scale per block of B columns (128,
 * or 64 or 32 for weight groups that 128 does not divide): 15 bits of the
 * block's largest magnitude, where the int8 blocks of 32 keep 7. Per 32
 * columns the weights widen to int16 once (vpmovsxbw) and vpdpwssd adds
 * their products with each token's activations in pairs; a block's sum is
 * exact in integers (two chains of at most two steps), then converted and
 * added times the block's scale (and the weight group's) onto the token's
 * accumulator. Fewer instructions per weight byte than int8 activations'
 * sign fix, vpdpbusd, conversion and FMA per 64 columns, which is what lets
 * the stream run: one token, streaming llama-1b's matrices, 50.9-52.9
 * against 45.6-48.1 GB/s (a plain read of them: 57.4-59.3). From two tokens
 * the widened weights are shared: at 2 tokens 196-198 GFLOP/s against the
 * 16-row lanes' (matmul_i8_avx512.c) 164-166, level at 3, behind from 4
 * (each token's instructions slow the stream: 236-249 against 273-294).
 * By shape (16 matrices of one shape from memory, alternating, means of
 * 6): at 2048 columns these rows at 3 tokens 68.5 against 41.3 GB/s, 4
 * 53.2 against 43.0, 5 43.8 against 37.6, 6 level, 7 behind (31.4 against
 * 35.8); at 8192 columns the lanes at 3 tokens 38.6 against 25.3: the
 * activations past L1 (kern_l1_tokens). llama-1b's 16 matrices of a
 * four-layer stretch at 3, 4, 5 tokens: +7, +18, +19 % over 3 tokens for
 * every shape.
 *
 * The order, per (row, token): the blocks in turn onto one accumulator,
 * reduced, times the row scale, plus the bias — the same for every n up to
 * kern_i8_x16_max(cols), so a token gets the same bits in any such batch. */

/* Blocks of activation columns for W: the largest of 128, 64, 32 that
 * divides its weight group (any, with one scale per row). */
static int i8_x16_block(const kern_mat *W) {
    int g = W->group;
    if (g <= 0 || g == W->cols || g % 128 == 0) return 128;
    return g % 64 == 0 ? 64 : 32;
}

bool kern_i8_x16_fits(const kern_mat *W) {
    int g = W->group;
    return g <= 0 || g == W->cols || (g % 32 == 0 && W->cols % g == 0);
}

/* One token's int16 row (zero to a multiple of 128 columns), then its
 * scales, 64-byte aligned. */
static size_t x16_row(int cols) {
    return ((size_t)cols + 127) / 128 * 128;
}
static size_t x16_token_bytes(int cols) {
    size_t padded = x16_row(cols);
    return (padded * sizeof(int16_t) + (padded / 32) * sizeof(float) + 63) & ~(size_t)63;
}

size_t kern_i8_x16_bytes(int cols, int n) {
    return x16_token_bytes(cols) * (size_t)n;
}

void kern_i8_x16_prepare(kern_i8_x16 *a, void *buf, const float *x, const kern_mat *W, int n) {
    int K = W->cols, B = i8_x16_block(W), nb = (K + B - 1) / B;
    size_t padded = x16_row(K), ld = x16_token_bytes(K);
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * K;
        int16_t *x16 = (int16_t *)((char *)buf + (size_t)t * ld);
        float *s16 = (float *)(x16 + padded);
        for (int b = 0; b < nb; b++) {
            int k0 = b * B, kv = K - k0 < B ? K - k0 : B;
            __m512 m = _mm512_setzero_ps();
            for (int k = 0; k < kv; k += 16) {
                __mmask16 mk = kv - k >= 16 ? 0xffff : (__mmask16)((1u << (kv - k)) - 1);
                m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(mk, xt + k0 + k)));
            }
            float amax = _mm512_reduce_max_ps(m);
            s16[b] = amax / 32767.0f;
            __m512 inv = _mm512_set1_ps(amax > 0 ? 32767.0f / amax : 0.0f);
            for (int k = 0; k < B; k += 16) { /* nearest even; zero past the row */
                __mmask16 mk = k >= kv        ? 0
                               : kv - k >= 16 ? 0xffff
                                              : (__mmask16)((1u << (kv - k)) - 1);
                __m512i q =
                    _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, xt + k0 + k), inv));
                _mm256_storeu_si256((__m256i *)(x16 + k0 + k), _mm512_cvtsepi32_epi16(q));
            }
        }
        memset(x16 + (size_t)nb * B, 0, (padded - (size_t)nb * B) * sizeof(int16_t));
    }
    *a = (kern_i8_x16){.base = buf, .ld = ld, .padded = padded, .block = B, .n = n};
}

#pragma GCC push_options
#pragma GCC target("avx512vnni")

/* One block of S steps (S = B / 32) of a row from w against T tokens' int16
 * activations from x (ld bytes apart): each token's exact sum, into sum.
 * cols: the row's columns left from w (all of the block unless its last). */
AI void i8_x16_block_sums(__m512i *sum, const int8_t *w, const char *x, size_t ld, const int S,
                          int cols, const int T) {
    __m512i c0[KERN_I8_X16_MAX], c1[KERN_I8_X16_MAX];
#pragma GCC unroll 4
    for (int i = 0; i < S; i++) {
        int left = cols - 32 * i;
        __mmask32 m = left >= 32 ? ~0u : left > 0 ? (1u << left) - 1 : 0;
        __m256i wv = m == ~0u ? _mm256_loadu_si256((const __m256i *)(w + 32 * i))
                              : _mm256_maskz_loadu_epi8(m, w + 32 * i);
        __m512i w16 = _mm512_cvtepi8_epi16(wv);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            __m512i xv = _mm512_loadu_si512(x + (size_t)t * ld + 64 * i);
            /* each chain starts from its first products, not from zero
             * (2 and 3 tokens streaming 0.5-3 % faster) */
            if (i < 2)
                (i ? c1 : c0)[t] = _mm512_madd_epi16(w16, xv);
            else if (i & 1)
                c1[t] = _mm512_dpwssd_epi32(c1[t], w16, xv);
            else
                c0[t] = _mm512_dpwssd_epi32(c0[t], w16, xv);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) sum[t] = S > 1 ? _mm512_add_epi32(c0[t], c1[t]) : c0[t];
}

AI void i8_x16_rows(const kern_mat *W, float *y, const kern_i8_x16 *a, const float *bias, int r0,
                    int r1, const int S, const bool per_row, const int T) {
    const int B = 32 * S;
    int K = W->cols, M = W->rows, nb = (K + B - 1) / B, nfull = K / B;
    int g = per_row ? K : W->group, ng = K / g;
    const char *x0 = a->base;
    size_t ld = a->ld;
    const float *s16 = (const float *)(x0 + a->padded * sizeof(int16_t)); /* token 0's */
    for (int r = r0; r < r1; r++) {
        const int8_t *w = (const int8_t *)W->data + (size_t)r * K;
        const float *ws = W->scales + (size_t)r * ng;
        __m512 acc[KERN_I8_X16_MAX];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
        for (int b = 0; b < nb; b++) {
            size_t k = (size_t)b * B;
            kern_stream_ahead(w + k, (size_t)B);
            __m512i sum[KERN_I8_X16_MAX];
            if (b < nfull)
                i8_x16_block_sums(sum, w + k, x0 + k * sizeof(int16_t), ld, S, B, T);
            else
                i8_x16_block_sums(sum, w + k, x0 + k * sizeof(int16_t), ld, S, K - (int)k, T);
            float wsc = per_row ? 1.0f : ws[k / g];
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                float sc = *(const float *)((const char *)(s16 + b) + (size_t)t * ld);
                if (!per_row) sc *= wsc;
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_set1_ps(sc), acc[t]);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            float s = _mm512_reduce_add_ps(acc[t]);
            if (per_row) s *= ws[0];
            y[(size_t)t * M + r] = s + (bias ? bias[r] : 0.0f);
        }
    }
}

/* One token, blocks of 128 columns: the hot path of int8 decode, with less
 * around the dot products than the T-token rows above, which leaves the
 * core more room to catch up when lines arrive late. Two blocks go per
 * step, so the page test, the loop and the four line prefetches come once
 * per 256 bytes, and each block's two chains start from vpmaddwd (no
 * zeroed accumulators to copy in; the T-token rows now start so too). The
 * same sums in the same order, so the same bits. Streaming llama-1b's 65
 * matrices (2 threads, alternating pass by pass with the T-token rows in
 * one process, four sets of 30 passes): 61.6, 65.1, 61.9, 62.7 against
 * 58.0, 62.5, 58.3, 59.9 GB/s; int8 decode steps 2.9, 4.6, 8.6, 11.1 %
 * shorter (alternate steps, both orders, four runs of 500 tokens; the
 * larger gains while the host's bandwidth moved). Keep the two blocks
 * written out: the same code with them in an inner loop of one or two ran
 * 4-7 % slower than the T-token rows (GCC's layout of that loop), and one
 * chain per block, one block a step, slower still while streaming. */

/* i8_x16_block_sums for one token and a whole block, written out (the
 * loop above called with those constants compiled to other code, level or
 * slower within the noise; this one is what was measured). */
AI __m512i i8_x16_block128(const int8_t *w, const int16_t *x) {
#define W16(i) _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(w + 32 * (i))))
#define X16(i) _mm512_loadu_si512(x + 32 * (i))
    __m512i c0 = _mm512_madd_epi16(W16(0), X16(0)), c1 = _mm512_madd_epi16(W16(1), X16(1));
    c0 = _mm512_dpwssd_epi32(c0, W16(2), X16(2));
    c1 = _mm512_dpwssd_epi32(c1, W16(3), X16(3));
#undef W16
#undef X16
    return _mm512_add_epi32(c0, c1);
}

/* Block b's sum (from w and x at its start) times its scale, onto acc. */
AI __m512 i8_x16_block128_acc(__m512 acc, __m512i sum, const float *s16, const float *ws, int b,
                              int g, const bool per_row) {
    float sc = per_row ? s16[b] : s16[b] * ws[(size_t)b * 128 / g];
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(sc), acc);
}

AI void i8_x16_one_rows(const kern_mat *W, float *y, const kern_i8_x16 *a, const float *bias,
                        int r0, int r1, const bool per_row) {
    int K = W->cols, nfull = K / 128;
    int g = per_row ? K : W->group, ng = K / g;
    const int16_t *x = a->base;
    const float *s16 = (const float *)(x + a->padded); /* the blocks' scales */
    for (int r = r0; r < r1; r++) {
        const int8_t *w = (const int8_t *)W->data + (size_t)r * K;
        const float *ws = W->scales + (size_t)r * ng;
        __m512 acc = _mm512_setzero_ps();
        int b = 0;
        for (; b + 2 <= nfull; b += 2) {
            const int8_t *wb = w + (size_t)b * 128;
            const int16_t *xb = x + (size_t)b * 128;
            kern_stream_ahead(wb, 256);
            __m512i s0 = i8_x16_block128(wb, xb), s1 = i8_x16_block128(wb + 128, xb + 128);
            acc = i8_x16_block128_acc(acc, s0, s16, ws, b, g, per_row);
            acc = i8_x16_block128_acc(acc, s1, s16, ws, b + 1, g, per_row);
        }
        if (b < nfull) { /* an odd whole block */
            kern_stream_ahead(w + (size_t)b * 128, 128);
            __m512i s0 = i8_x16_block128(w + (size_t)b * 128, x + (size_t)b * 128);
            acc = i8_x16_block128_acc(acc, s0, s16, ws, b, g, per_row);
        }
        if (K > nfull * 128) { /* the last block, partial */
            size_t k = (size_t)nfull * 128;
            kern_stream_ahead(w + k, 128);
            __m512i sum;
            i8_x16_block_sums(&sum, w + k, (const char *)(x + k), a->ld, 4, K - (int)k, 1);
            acc = i8_x16_block128_acc(acc, sum, s16, ws, nfull, g, per_row);
        }
        float s = _mm512_reduce_add_ps(acc);
        if (per_row) s *= ws[0];
        y[r] = s + (bias ? bias[r] : 0.0f);
    }
}

/* Every (block, per_row) case for T tokens. */
AI void i8_x16_rows_t(const kern_mat *W, float *y, const kern_i8_x16 *a, const float *bias, int r0,
                      int r1, const int T) {
    bool per_row = W->group <= 0 || W->group == W->cols;
    if (a->block == 128 && per_row)
        i8_x16_rows(W, y, a, bias, r0, r1, 4, true, T);
    else if (a->block == 128)
        i8_x16_rows(W, y, a, bias, r0, r1, 4, false, T);
    else if (a->block == 64)
        i8_x16_rows(W, y, a, bias, r0, r1, 2, false, T);
    else
        i8_x16_rows(W, y, a, bias, r0, r1, 1, false, T);
}

void kern_i8_x16_rows_avx512(const kern_mat *W, float *y, const kern_i8_x16 *a, const float *bias,
                             int r0, int r1) {
    if (a->n == 1 && a->block == 128) {
        if (W->group <= 0 || W->group == W->cols)
            i8_x16_one_rows(W, y, a, bias, r0, r1, true);
        else
            i8_x16_one_rows(W, y, a, bias, r0, r1, false);
        return;
    }
    switch (a->n) {
#define CASE(T)                                                                                    \
    case T:                                                                                        \
        i8_x16_rows_t(W, y, a, bias, r0, r1, T);                                                   \
        break;
        CASE(1)
        CASE(2)
        CASE(3)
        CASE(4)
        CASE(5)
#undef CASE
    default:
        break;
    }
}
#pragma GCC pop_options
