/* matmul_bf16_few_avx512.c — the bf16 matmul for a few tokens (2 to 24)
 * on CPUs with AVX-512 BF16: batched decode at small batch.
 *
 * The token lanes (matmul_bf16_avx512.c) put one token per 32-bit lane and
 * broadcast each weight pair to all 16 lanes, so below 16 tokens lanes idle
 * while the instruction count stays that of 16 tokens; and the instruction
 * count is what they are bound by. Here the 16 lanes are 8 tokens x 2 pairs:
 * lane 2t takes token t's even pairs (columns 4u, 4u + 1) and lane 2t + 1
 * its odd pairs (4u + 2, 4u + 3), so each vdpbf16ps is two consecutive
 * pairs of one row (one 64-bit broadcast) against one packed vector of the
 * activations, every lane busy at 8 tokens. That halves the instructions of
 * the token lanes at 8 tokens. From 9 to 16 tokens two halves of 8 share
 * each broadcast, where the lanes broadcast every pair for 16 lanes; from
 * 17 to 24 three halves, where the lanes run two groups of 16 (a quarter
 * more products). A tile is 8 rows (16 or 24 accumulators), its outputs
 * written eight rows to a store (few_out8); the rows are shared out by
 * pool_for. Software prefetch: up to 8 tokens, the next tile's lines in
 * address order (one tile ahead: 8-16 % faster from 2 to 8 tokens than
 * each row 512 bytes ahead, streaming llama-1b's matrices, alternating),
 * with the non-temporal hint: each line is read once, and the tile's
 * activations stay in L1 (Zen 5, 2 threads, 8 tokens over 256 MB of
 * 2048-column rows: 49.6-52.3 against 46.4-48.6 GB/s with T0, four
 * alternating rounds; llama-1b decode at batch 8 +4 %, seven alternating
 * pairs, five ahead, within the host's noise), and as the one-token
 * kernels do (kern_page_ahead), the page after next touched as those
 * prefetches enter a page: llama-1b bf16 decode at batch 8 160-165 tok/s
 * against 135-136 without (alternating runs), b8/b1 5.53-5.74x against
 * 4.64-4.99x;
 * from 9 tokens, whose activations no longer fit in L1 beside a tile,
 * each row 512 bytes ahead (1 KB ahead was 5-10 % slower at 16 tokens,
 * the next tile 15 %). A last partial step of
 * 1 to 3 columns reads the weights alone (the activations are zero past the
 * row).
 *
 * Measured (256 MB of llama-1b-shaped matrices from memory): at 8 tokens
 * 0.72-0.92 ms per 32 MB against 1.06-1.23 with the token lanes, at 6
 * 0.72-0.84 against 0.92-1.14 with the 4-row dot-product blocks this
 * replaced, at 2 level; at 12 tokens 0.96-1.05 against 1.07-1.29, at 16
 * 1.00-1.15 against 1.12-1.17; at 20 and 24 tokens (2 threads, three
 * rounds) 504-551 and 642-652 GFLOP/s against 439-470 and 526-556. The
 * kernel streams at about 90 % of the one-token rows' rate up to 8 tokens.
 *
 * Up to kern_l1_tokens(K) tokens in plain mode the kernel takes a
 * dot-product form instead (few_dot_row, below), a row at a time.
 *
 * The order of the sums (its own, as every plain-mode kernel's): up to 8
 * tokens, per (row, token) two chains, the even and the odd steps (u), each
 * with its even-pair and odd-pair lanes; at the row's end the two chains
 * added, then the bias, the even-pair lane and the odd-pair lane. From 9
 * tokens one chain per half, then the same. It depends on the shape and on
 * which of the three ranges n is in (up to kern_l1_tokens(K), then up
 * to 8, from 9), not on the tile, the thread, the number of halves or the
 * token's place. In batch-invariant mode, the order every n takes there
 * (matmul_bf16_avx512.c): per block of KERN_BF16_GEMM_KC columns one chain
 * per lane, the lanes' sums added and the block's sum added onto the
 * output so far, from the bias.
 *
 * Global state: kern_few_touch (below), set once by kern_init. */
#include "kernels/kern_internal.h"
#include "kernels/load_avx512.h"

#include <immintrin.h>
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx512bf16")

#define AI static inline __attribute__((always_inline))

/* Whether the 8-token tiles touch the page after next (few_steps); on,
 * but cleared by kern_init under DEEPINFER_FEW_TOUCH=0 to measure without.
 * A value read at run time on purpose: with the touch spelled
 * unconditionally GCC 12 laid this loop out so that batch 8 ran at 92-100
 * tok/s, against 126-136 without the touch and 156-165 with it as here
 * (llama-1b bf16, alternating runs; the instructions of the loop are the
 * same but for the test). */
int kern_few_touch = 1;

#define FEW_R  8   /* rows per register tile */
#define FEW_PF 512 /* bytes prefetched ahead in each row (9 to 24 tokens) */
#define FEW_H  3   /* halves of 8 tokens at most (24 tokens, 24 accumulators) */

typedef struct few_job {
    const kern_mat *W;
    float *y;
    /* half h (tokens 8h .. 8h + 7), step u (columns 4u .. 4u + 3) at
     * xt[(h * U + u) * 16]: lane 2i + s = token 8h + i's pair 2u + s */
    const uint32_t *xt;
    size_t U;
    const uint16_t *xb; /* dot-product form: the tokens' bf16 rows, ldx apart */
    size_t ldx;
    const float *bias;
    int n;
    bool inv; /* batch-invariant mode: that mode's order */
} few_job;

/* Step u of R rows (p: row 0's bytes, ld bytes apart) times H halves: half
 * h onto acc[.][h + c]; with tail, only the row's first `tail` columns of
 * the step (1 to 3, read alone: the 8 bytes could run past the matrix). */
AI void few_step(const char *p, size_t ld, const few_job *j, int u, __m512 acc[FEW_R][FEW_H],
                 const int R, const int H, const int c, int tail) {
    __m512bh xv[FEW_H];
#pragma GCC unroll 3
    for (int h = 0; h < H; h++)
        xv[h] = (__m512bh)_mm512_load_si512(j->xt + ((size_t)h * j->U + (size_t)u) * 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        long long w = 0;
        memcpy(&w, p + (size_t)r * ld + (size_t)u * 8, tail ? 2 * (size_t)tail : 8);
        __m512bh wv = (__m512bh)_mm512_set1_epi64(w);
#pragma GCC unroll 3
        for (int h = 0; h < H; h++) acc[r][h + c] = _mm512_dpbf16_ps(acc[r][h + c], xv[h], wv);
    }
}

/* v[k] lane t becomes lane k of the result t: an 8 x 8 transpose. */
AI void transpose8(__m256 v[8]) {
    __m256 t[8], u[8];
#pragma GCC unroll 4
    for (int k = 0; k < 8; k += 2)
        t[k] = _mm256_unpacklo_ps(v[k], v[k + 1]), t[k + 1] = _mm256_unpackhi_ps(v[k], v[k + 1]);
#pragma GCC unroll 2
    for (int k = 0; k < 8; k += 4) {
        u[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
        v[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
    }
}

/* Eight rows' outputs for half h, one store per token: v[r] holds row r0 +
 * r's output for token 8h + t in lane 2t; the even lanes of each row
 * gathered (its 8 tokens), and a transpose. */
AI void few_store8(const few_job *j, const __m512 v[FEW_R], int r0, int h) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    __m256 o[FEW_R];
#pragma GCC unroll 8
    for (int r = 0; r < FEW_R; r++)
        o[r] = _mm512_castps512_ps256(_mm512_permutexvar_ps(even, v[r]));
    transpose8(o);
    int M = j->W->rows, nt = j->n - 8 * h < 8 ? j->n - 8 * h : 8;
    for (int t = 0; t < nt; t++) _mm256_storeu_ps(j->y + (size_t)(8 * h + t) * M + r0, o[t]);
}

/* Lane 2t + 1 added onto lane 2t (and lane 2t onto 2t + 1): a token's
 * even-pair and odd-pair sums. */
AI __m512 few_pair_sum(__m512 s) {
    return _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* The outputs of a whole tile in plain mode, as the scalar loop below
 * computes them (bias + even-pair lane, then + odd-pair lane) but eight
 * rows at once. */
AI void few_out8(const few_job *j, __m512 acc[FEW_R][FEW_H], int r0, const int H) {
#pragma GCC unroll 3
    for (int h = 0; h < H; h++) {
        __m512 v[FEW_R];
#pragma GCC unroll 8
        for (int r = 0; r < FEW_R; r++) {
            __m512 s = H == 1 ? _mm512_add_ps(acc[r][0], acc[r][1]) : acc[r][h];
            float b = j->bias ? j->bias[r0 + r] : 0.0f;
            v[r] = few_pair_sum(_mm512_mask_add_ps(s, 0x5555, _mm512_set1_ps(b), s));
        }
        few_store8(j, v, r0, h);
    }
}

/* Steps [u0, u1) of rows [r0, r0 + R) (p: row r0's bytes) onto acc, and
 * with tail the row's last partial step; one half: with chains, the even
 * and the odd steps in two chains, else all in one. */
AI void few_steps(const few_job *j, const char *p, int u0, int u1, int tail,
                  __m512 acc[FEW_R][FEW_H], const int R, const int H, const bool chains) {
    size_t ld = (size_t)j->W->cols * 2;
    int u = u0;
    for (; u + 8 <= u1; u += 8) { /* a cache line of each row */
        if (H == 1 && R == FEW_R) {
            /* eight lines of the next tile, in address order: 8 steps of
             * 8 rows take eight lines, so the next tile arrives whole; and
             * the page after next touched as they enter a page */
            const char *next = p + (size_t)R * ld + (size_t)u * 64;
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) _mm_prefetch(next + i * 64, _MM_HINT_NTA);
            if (kern_few_touch) kern_page_ahead(next, 512);
        } else {
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                _mm_prefetch(p + (size_t)r * ld + (size_t)u * 8 + FEW_PF, _MM_HINT_T0);
        }
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            few_step(p, ld, j, u + s, acc, R, H, H == 1 && chains ? s & 1 : 0, 0);
    }
    for (; u < u1; u++) few_step(p, ld, j, u, acc, R, H, H == 1 && chains ? u & 1 : 0, 0);
    if (tail) few_step(p, ld, j, u, acc, R, H, H == 1 && chains ? u & 1 : 0, tail);
}

AI void few_zero(__m512 acc[FEW_R][FEW_H], const int R) {
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 3
        for (int h = 0; h < FEW_H; h++) acc[r][h] = _mm512_setzero_ps();
}

/* Rows [r0, r0 + R), plain mode: every step, then the outputs. One half:
 * two chains, the even and the odd steps; two or three halves: one chain
 * each. */
AI void few_rows(const few_job *j, int r0, const int R, const int H) {
    const kern_mat *W = j->W;
    int K = W->cols, M = W->rows;
    const char *p = (const char *)W->data + (size_t)r0 * K * 2;
    __m512 acc[FEW_R][FEW_H];
    few_zero(acc, R);
    few_steps(j, p, 0, K / 4, K % 4, acc, R, H, true);
    if (R == FEW_R) {
        few_out8(j, acc, r0, H);
        return;
    }
    for (int r = 0; r < R; r++) {
        _Alignas(64) float s[FEW_H][16];
        if (H == 1)
            _mm512_store_ps(s[0], _mm512_add_ps(acc[r][0], acc[r][1]));
        else
            for (int h = 0; h < H; h++) _mm512_store_ps(s[h], acc[r][h]);
        float b = j->bias ? j->bias[r0 + r] : 0.0f;
        for (int t = 0; t < j->n; t++)
            j->y[(size_t)t * M + r0 + r] = b + s[t / 8][2 * (t % 8)] + s[t / 8][2 * (t % 8) + 1];
    }
}

/* Rows [r0, r0 + R) in batch-invariant mode, in that mode's order: per
 * block of KERN_BF16_GEMM_KC columns one chain per lane (a token's even or
 * odd pairs), the lanes' sums added and the block's sum added onto the
 * output so far (from the bias), block by block. */
#define FEW_KB (KERN_BF16_GEMM_KC / 4) /* steps per column block */
_Static_assert(FEW_KB % 8 == 0, "blocks of whole cache lines");
AI void few_rows_inv(const few_job *j, int r0, const int R, const int H) {
    const kern_mat *W = j->W;
    int K = W->cols, M = W->rows, U = K / 4;
    const char *p = (const char *)W->data + (size_t)r0 * K * 2;
    _Alignas(64) float out[FEW_R][FEW_H][16];
    for (int r = 0; r < R; r++) {
        __m512 b = _mm512_set1_ps(j->bias ? j->bias[r0 + r] : 0.0f);
        for (int h = 0; h < H; h++) _mm512_store_ps(out[r][h], b);
    }
    int nblk = (K + KERN_BF16_GEMM_KC - 1) / KERN_BF16_GEMM_KC;
    for (int b = 0; b < nblk; b++) { /* the row's last partial step in its last block */
        int u0 = b * FEW_KB, u1 = U - u0 < FEW_KB ? U : u0 + FEW_KB;
        __m512 acc[FEW_R][FEW_H];
        few_zero(acc, R);
        few_steps(j, p, u0, u1, b == nblk - 1 ? K % 4 : 0, acc, R, H, false);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 3
            for (int h = 0; h < H; h++)
                _mm512_store_ps(out[r][h],
                                _mm512_add_ps(_mm512_load_ps(out[r][h]), few_pair_sum(acc[r][h])));
    }
    for (int h = 0; h < H; h++) {
        if (R == FEW_R) {
            __m512 v[FEW_R];
#pragma GCC unroll 8
            for (int r = 0; r < FEW_R; r++) v[r] = _mm512_load_ps(out[r][h]);
            few_store8(j, v, r0, h);
            continue;
        }
        int t1 = j->n - 8 * h < 8 ? j->n : 8 * h + 8;
        for (int r = 0; r < R; r++)
            for (int t = 8 * h; t < t1; t++) j->y[(size_t)t * M + r0 + r] = out[r][h][2 * (t % 8)];
    }
}

/* Up to kern_l1_tokens(K) tokens in plain mode, one row at a time,
 * dot-product style: each 32-column step of the row (one 64-byte read of
 * the weights, two 256-bit loads) goes into one vdpbf16ps per token against
 * the token's bf16 activations, two chains per token (the even and the odd
 * steps); no broadcasts. The rows stream one after another, with
 * kern_stream_ahead's prefetches. Streaming llama-1b's 65 matrices,
 * alternating with the 8 x 2 lanes below (medians of 8 rounds): 2 tokens
 * 71 against 42 GB/s (x1.6), 3 x1.38, 4 x1.41, 5 x1.04; 6 0.93, 7 0.88, 8
 * 0.85 (the lanes' one broadcast a row per step serves 8 tokens; here each
 * token's activations are a load of their own). By shape the two part
 * where the activations stop fitting in L1 beside the stream (256 MB of
 * one shape from memory, alternating): at 2048 columns (4 KiB a token)
 * this form at 6 tokens 61.0 against 55.2 GB/s (medians of 8), 7 53.7
 * against 50.6, 8 level (51.5 against 52.6); at 8192 (16 KiB a token) the
 * lanes at 3 tokens 45.3 against 43.5, 4 47.8 against 35.3, 5 51.0 against
 * 29.3, this form at 2 69.8 against 51.1: hence kern_l1_tokens. Its
 * order, per (row, token): the even steps onto one accumulator and the odd
 * ones onto another, the row's last partial step masked onto the chain its
 * parity gives, the two added, reduced, plus the bias; the same for every
 * n up to kern_l1_tokens(K). */
_Static_assert(KERN_L1_TOKENS_MAX <= 8, "few_dot_row holds 8 tokens' accumulators");
AI void few_dot_row(const few_job *j, const uint16_t *xb, size_t ldx, int r, const int T) {
    const kern_mat *W = j->W;
    int K = W->cols, K64 = K & ~63, M = W->rows;
    const uint16_t *w = (const uint16_t *)W->data + (size_t)r * K;
    __m512 a[8][2];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) a[t][0] = a[t][1] = _mm512_setzero_ps();
    int k = 0;
    for (; k < K64; k += 64) {
        kern_stream_ahead(w + k, 64 * sizeof(uint16_t));
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
            __m512bh wv = (__m512bh)kern_load64_halves(w + k + 32 * c);
#pragma GCC unroll 8
            for (int t = 0; t < T; t++)
                a[t][c] = _mm512_dpbf16_ps(
                    a[t][c], wv, (__m512bh)_mm512_load_si512(xb + (size_t)t * ldx + k + 32 * c));
        }
    }
    for (int c = 0; k < K; k += 32, c++) {
        __mmask32 m = K - k >= 32 ? ~0u : (1u << (K - k)) - 1;
        __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, w + k);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            a[t][c] = _mm512_dpbf16_ps(
                a[t][c], wv, (__m512bh)_mm512_maskz_loadu_epi16(m, xb + (size_t)t * ldx + k));
    }
    float b = j->bias ? j->bias[r] : 0.0f;
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        j->y[(size_t)t * M + r] = _mm512_reduce_add_ps(_mm512_add_ps(a[t][0], a[t][1])) + b;
}

AI void few_dot_range_t(const few_job *j, const uint16_t *xb, size_t ldx, int lo, int hi,
                        const int T) {
    for (int r = lo; r < hi; r++) few_dot_row(j, xb, ldx, r, T);
}

/* Whole tiles, then single rows; H halves, batch-invariant or not (one
 * test a tile). */
AI void few_range_h(const few_job *j, int lo, int hi, const int H, bool inv) {
    int r = lo;
    for (; r + FEW_R <= hi; r += FEW_R)
        inv ? few_rows_inv(j, r, FEW_R, H) : few_rows(j, r, FEW_R, H);
    for (; r < hi; r++) inv ? few_rows_inv(j, r, 1, H) : few_rows(j, r, 1, H);
}

static void few_dot_range(void *ctx, int lo, int hi) {
    const few_job *j = ctx;
    switch (j->n) { /* a constant T each: the accumulators stay in registers */
#define CASE(T)                                                                                    \
    case T:                                                                                        \
        few_dot_range_t(j, j->xb, j->ldx, lo, hi, T);                                              \
        break;
        CASE(2)
        CASE(3)
        CASE(4)
        CASE(5)
        CASE(6)
        CASE(7)
        CASE(8)
#undef CASE
    default:
        break;
    }
}

static void few_range(void *ctx, int lo, int hi) {
    const few_job *j = ctx;
    int halves = (j->n + 7) / 8; /* a constant H each: the accumulators stay in registers */
    halves == 3   ? few_range_h(j, lo, hi, 3, j->inv)
    : halves == 2 ? few_range_h(j, lo, hi, 2, j->inv)
                  : few_range_h(j, lo, hi, 1, j->inv);
}

void kern_bf16_few_avx512(pool *p, float *y, const uint16_t *xb, size_t ldx, const kern_mat *W,
                          const float *bias, int n) {
    if (n <= kern_l1_tokens(W->cols) && !kern_batch_inv()) {
        few_job j = {.W = W, .y = y, .xb = xb, .ldx = ldx, .bias = bias, .n = n};
        pool_for(p, few_dot_range, &j, W->rows, kern_one_token_grain(KT_BF16, W->cols));
        return;
    }
    size_t U = ((size_t)W->cols + 3) / 4; /* the last one partial when K % 4 != 0 */
    int halves = (n + 7) / 8;
    uint32_t *xt = kern_scratch(KERN_SCRATCH_ACT2, (size_t)halves * U * 16 * sizeof(uint32_t));
    for (int h = 0; h < halves; h++)
        for (size_t u = 0; u < U; u++) {
            uint32_t *v = xt + ((size_t)h * U + u) * 16;
            for (int i = 0; i < 8; i++) {
                int t = 8 * h + i;
                if (t < n) {
                    memcpy(v + 2 * i, xb + (size_t)t * ldx + 4 * u, 8);
                } else {
                    v[2 * i] = v[2 * i + 1] = 0;
                }
            }
        }
    few_job j = {.W = W, .y = y, .xt = xt, .U = U, .bias = bias, .n = n, .inv = kern_batch_inv()};
    /* about 64 KB of weights per grain, the threads' ends balanced; the
     * grain is a multiple of 16 rows, so of the 8-row tiles too */
    _Static_assert(16 % FEW_R == 0, "grains of whole tiles");
    pool_for(p, few_range, &j, W->rows, kern_one_token_grain(KT_BF16, W->cols));
}
#pragma GCC pop_options
