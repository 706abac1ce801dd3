/* matmul_i8_rows_avx512.c — int8 weights times 1 to KERN_I8_ROWS_MAX tokens
 * in plain mode on CPUs with AVX-512 VNNI: one-token decode, the memory-bound
 * case. matmul_avx2.c quantizes the activations (kern_i8_a64_prepare) and
 * hands each thread a range of rows; more tokens, and every n in
 * batch-invariant mode, take the 16-row lanes (matmul_i8_avx512.c).
 *
 * The rows one after another, one sequential stream per thread with no
 * software prefetch, as the bf16 one-token rows (matmul_bf16_avx512.c). Per
 * 64 columns of a row: one load, one xor (w + 128 as an unsigned byte), and
 * per token one vpdpbusd against its int8 activations, one conversion and one
 * FMA with the block's scale: about the instructions per byte that the bf16
 * rows spend, which is what lets the stream run near a plain read.
 * Streaming llama-1b's matrices (2 MiB pages, two threads, alternating in
 * one process): 47 and 52 GB/s where the int16 activations this replaced,
 * whose weights widened to int16 before vpdpwssd, ran 39 and 36 (all shapes,
 * and the 2048 x 8192 down projection alone) and a plain read 50 and 58.
 * Blocks of 32 columns, one scale per 256-bit half of a vector, ran 44 and
 * 44; weights in 256-bit loads made no difference. llama-1b decode,
 * alternating runs: one token 35.5-38.0 tok/s before, 37.8-43.5 after; two
 * tokens 58.6-63.6 before, 67.3-72.0 after. The cost is precision: the
 * reference models' mean KL divergence from f32 rose from 1.8-4.8e-5 to
 * 2.9-7.9e-5 (int8 in blocks of 32: 2.9-6.8e-5), top-1 agreement 100 %.
 *
 * Activations: int8 per block of 64 columns, one scale per block (its
 * largest magnitude over 127, rounded to nearest even), zero past the row.
 * vpdpbusd multiplies unsigned by signed bytes, so the weights go in as
 * w + 128 against the signed activations and each of the block's 16 lanes
 * starts at -8 times the block's activation sum: over the lanes, exactly
 * -128 times it, so the lanes' integers add up to the weights times the
 * activations (each lane's value is exact and converts exactly). Weight
 * groups of an odd multiple of 32 columns split a block in its middle; then
 * each half's 8 lanes start at -16 times the half's sum and take the half's
 * group scale.
 *
 * The order, per (row, token): each block's 16 lane values times the block's
 * scale (times the weight group's) onto one vector accumulator, the blocks in
 * turn, reduced, times the row scale, plus the bias — the same for every n up
 * to KERN_I8_ROWS_MAX, so a token gets the same bits in any such batch. */
#include "kernels/kern_internal.h"

#include <immintrin.h>
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")

#define AI static inline __attribute__((always_inline))

#define A64 64 /* activation columns per block */

bool kern_i8_a64_fits(const kern_mat *W) {
    int g = W->group;
    return g <= 0 || g == W->cols || (g % 32 == 0 && W->cols % g == 0);
}

/* One token: its int8 row (zero to a whole number of blocks), the blocks'
 * scales, their starts, then their halves' starts, 64-byte aligned. */
static size_t a64_token_bytes(int cols) {
    size_t nb = ((size_t)cols + A64 - 1) / A64;
    return (nb * A64 + nb * (sizeof(float) + 3 * sizeof(int32_t)) + 63) & ~(size_t)63;
}

size_t kern_i8_a64_bytes(int cols, int n) {
    return a64_token_bytes(cols) * (size_t)n;
}

void kern_i8_a64_prepare(kern_i8_a64 *a, void *buf, const float *x, int K, int n) {
    int nb = (K + A64 - 1) / A64;
    size_t ld = a64_token_bytes(K);
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * K;
        int8_t *q = (int8_t *)buf + (size_t)t * ld;
        float *sc = (float *)(q + (size_t)nb * A64);
        int32_t *st = (int32_t *)(sc + nb), *hs = st + nb;
        for (int b = 0; b < nb; b++) {
            int k0 = b * A64, kv = K - k0 < A64 ? K - k0 : A64;
            __m512 v[4], m = _mm512_setzero_ps();
            for (int i = 0; i < 4; i++) {
                int left = kv - 16 * i;
                __mmask16 mk = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
                v[i] = _mm512_maskz_loadu_ps(mk, xt + k0 + 16 * i);
                m = _mm512_max_ps(m, _mm512_abs_ps(v[i]));
            }
            float amax = _mm512_reduce_max_ps(m);
            sc[b] = amax / 127.0f;
            __m512 inv = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
            __m512i sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
            for (int i = 0; i < 4; i++) { /* nearest even; |x * inv| <= 127 */
                __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(v[i], inv));
                sum[i / 2] = _mm512_add_epi32(sum[i / 2], qi);
                _mm_storeu_si128((__m128i *)(q + k0 + 16 * i), _mm512_cvtsepi32_epi8(qi));
            }
            int s0 = _mm512_reduce_add_epi32(sum[0]), s1 = _mm512_reduce_add_epi32(sum[1]);
            st[b] = -8 * (s0 + s1);
            hs[2 * b] = -16 * s0, hs[2 * b + 1] = -16 * s1;
        }
    }
    *a = (kern_i8_a64){.base = buf, .ld = ld, .nb = nb, .n = n};
}

/* Weight scales: one per row, one per group of a multiple of 64 columns (a
 * block's in one group), or groups of an odd multiple of 32 (a block's
 * halves in groups of their own, the group boundary at most in its middle). */
enum { WS_ROW, WS_BLOCK, WS_HALVES };

/* The group of the next 32-column half (*hg, *hleft halves left in it; m
 * halves a group), then one half on. */
AI int next_half(int *hg, int *hleft, int m) {
    int g = *hg;
    if (--*hleft == 0) ++*hg, *hleft = m;
    return g;
}

AI void i8_rows(const kern_mat *W, float *y, const kern_i8_a64 *a, const float *bias, int r0,
                int r1, const int wmode, const int T) {
    const bool per_row = wmode == WS_ROW;
    int K = W->cols, M = W->rows, nb = a->nb, nfull = K / A64;
    int g = per_row ? K : W->group, ng = K / g, m = g / 32; /* halves per group */
    const int8_t *x = a->base;
    const float *sc = (const float *)(x + (size_t)nb * A64); /* token 0's */
    const int32_t *st = (const int32_t *)(sc + nb), *hs = st + nb;
    size_t ld = a->ld;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int r = r0; r < r1; r++) {
        const int8_t *w = (const int8_t *)W->data + (size_t)r * K;
        const float *ws = W->scales + (size_t)r * ng;
        __m512 acc[KERN_I8_ROWS_MAX];
#pragma GCC unroll 3
        for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
        int hg = 0, hleft = m; /* the next half's group, and its halves left (no division) */
        for (int b = 0; b < nb; b++) {
            size_t k = (size_t)b * A64;
            /* the tail's missing weights load as 0 (128 after the flip)
             * against activations that are 0 */
            __m512i wv;
            if (b < nfull)
                wv = _mm512_loadu_si512(w + k);
            else
                wv = _mm512_maskz_loadu_epi8(_cvtu64_mask64(~0ull >> (A64 - (K - k))), w + k);
            wv = _mm512_xor_si512(wv, flip);
            int glo = 0, ghi = 0; /* the halves' groups */
            if (wmode != WS_ROW) glo = next_half(&hg, &hleft, m), ghi = next_half(&hg, &hleft, m);
            float wsc = wmode == WS_BLOCK ? ws[glo] : 1.0f;
            __m512 wsv = _mm512_setzero_ps();
            if (wmode == WS_HALVES) /* the second half past the row: its weights are 0 */
                wsv = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(ws[glo]),
                                           _mm512_set1_ps(k + 32 < (size_t)K ? ws[ghi] : 0));
#pragma GCC unroll 3
            for (int t = 0; t < T; t++) {
                size_t o = (size_t)t * ld;
                __m512i start;
                if (wmode == WS_HALVES) { /* each half's own: their scales differ */
                    const int32_t *h = (const int32_t *)((const char *)(hs + 2 * b) + o);
                    start = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(h[0]),
                                                    _mm512_set1_epi32(h[1]));
                } else {
                    start = _mm512_set1_epi32(*(const int32_t *)((const char *)(st + b) + o));
                }
                __m512i s = _mm512_dpbusd_epi32(start, wv, _mm512_load_si512(x + o + k));
                float s_b = *(const float *)((const char *)(sc + b) + o);
                __m512 scale = wmode == WS_HALVES
                                   ? _mm512_mul_ps(_mm512_set1_ps(s_b), wsv)
                                   : _mm512_set1_ps(wmode == WS_BLOCK ? s_b * wsc : s_b);
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[t]);
            }
        }
#pragma GCC unroll 3
        for (int t = 0; t < T; t++) {
            float s = _mm512_reduce_add_ps(acc[t]);
            if (per_row) s *= ws[0];
            y[(size_t)t * M + r] = s + (bias ? bias[r] : 0.0f);
        }
    }
}

AI void i8_rows_t(const kern_mat *W, float *y, const kern_i8_a64 *a, const float *bias, int r0,
                  int r1, const int T) {
    if (W->group <= 0 || W->group == W->cols)
        i8_rows(W, y, a, bias, r0, r1, WS_ROW, T);
    else if (W->group % A64 == 0)
        i8_rows(W, y, a, bias, r0, r1, WS_BLOCK, T);
    else
        i8_rows(W, y, a, bias, r0, r1, WS_HALVES, T);
}

void kern_i8_rows_avx512(const kern_mat *W, float *y, const kern_i8_a64 *a, const float *bias,
                         int r0, int r1) {
    _Static_assert(KERN_I8_ROWS_MAX == 3, "the cases below");
    switch (a->n) {
    case 1:
        i8_rows_t(W, y, a, bias, r0, r1, 1);
        break;
    case 2:
        i8_rows_t(W, y, a, bias, r0, r1, 2);
        break;
    case 3:
        i8_rows_t(W, y, a, bias, r0, r1, 3);
        break;
    default:
        break;
    }
}
#pragma GCC pop_options
