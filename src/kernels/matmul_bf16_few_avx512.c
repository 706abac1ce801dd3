/* matmul_bf16_few_avx512.c — the bf16 matmul for a few tokens (2 to 8, plain
 * mode) on CPUs with AVX-512 BF16: batched decode at small batch.
 *
 * The token lanes (matmul_bf16_avx512.c) put one token per 32-bit lane and
 * broadcast each weight pair to all 16 lanes, so below 16 tokens lanes idle
 * while the instruction count stays that of 16 tokens; and the instruction
 * count is what they are bound by. Here the 16 lanes are 8 tokens x 2 pairs:
 * lane 2t takes token t's even pairs (columns 4u, 4u + 1) and lane 2t + 1
 * its odd pairs (4u + 2, 4u + 3), so each vdpbf16ps is two consecutive
 * pairs of one row (one 64-bit broadcast) against one packed vector of the
 * activations, every lane busy at 8 tokens. That halves the instructions of
 * the token lanes at 8 tokens.
 *
 * The order of the sums (its own, as every plain-mode kernel's): per
 * (row, token) two chains, even and odd pair-pairs in turn (u even, u odd),
 * each with its even-pair and odd-pair lanes; at the row's end the two
 * chains added, then the bias, the even-pair lane and the odd-pair lane.
 * It depends on the shape alone, not on the tile, the thread or the token's
 * place. For matrices of whole 4-column steps (K % 4 == 0); others take the
 * other kernels. */
#include "kernels/kern_internal.h"

#include <immintrin.h>
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx512bf16")

#define AI static inline __attribute__((always_inline))

#define FEW_R  8    /* rows per register tile */
#define FEW_PF 1024 /* bytes prefetched ahead in each row */

typedef struct few_job {
    const kern_mat *W;
    float *y;
    const uint32_t
        *xt; /* step u (columns 4u .. 4u + 3) at xt[16 u]: lane 2t + s = token t's pair 2u + s */
    const float *bias;
    int n;
} few_job;

/* Step u of R rows (p: row 0's bytes, ld bytes apart) onto chain acc[.][c];
 * with tail, only the row's first `tail` columns of the step (1 to 3, read
 * alone: the 8 bytes could run past the matrix). */
AI void few_step(const char *p, size_t ld, const uint32_t *xt, int u, __m512 acc[FEW_R][2],
                 const int R, const int c, int tail) {
    __m512bh xv = (__m512bh)_mm512_load_si512(xt + (size_t)u * 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        long long w = 0;
        memcpy(&w, p + (size_t)r * ld + (size_t)u * 8, tail ? 2 * (size_t)tail : 8);
        acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, (__m512bh)_mm512_set1_epi64(w));
    }
}

/* Rows [r0, r0 + R): every step, then the outputs. */
AI void few_rows(const few_job *j, int r0, const int R) {
    const kern_mat *W = j->W;
    int K = W->cols, M = W->rows, U = K / 4;
    size_t ld = (size_t)K * 2;
    const char *p = (const char *)W->data + (size_t)r0 * ld;
    __m512 acc[FEW_R][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    int u = 0;
    for (; u + 8 <= U; u += 8) { /* a cache line of each row */
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            _mm_prefetch(p + (size_t)r * ld + (size_t)u * 8 + FEW_PF, _MM_HINT_T0);
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) few_step(p, ld, j->xt, u + s, acc, R, s & 1, 0);
    }
    for (; u < U; u++) few_step(p, ld, j->xt, u, acc, R, u & 1, 0);
    if (K % 4) few_step(p, ld, j->xt, u, acc, R, u & 1, K % 4);
    for (int r = 0; r < R; r++) {
        _Alignas(64) float s[16];
        _mm512_store_ps(s, _mm512_add_ps(acc[r][0], acc[r][1]));
        float b = j->bias ? j->bias[r0 + r] : 0.0f;
        for (int t = 0; t < j->n; t++) j->y[(size_t)t * M + r0 + r] = b + s[2 * t] + s[2 * t + 1];
    }
}

static void few_range(void *ctx, int lo, int hi) {
    const few_job *j = ctx;
    int r = lo;
    for (; r + FEW_R <= hi; r += FEW_R) few_rows(j, r, FEW_R);
    for (; r < hi; r++) few_rows(j, r, 1);
}

void kern_bf16_few_avx512(pool *p, float *y, const uint16_t *xb, size_t ldx, const kern_mat *W,
                          const float *bias, int n) {
    int U = (W->cols + 3) / 4; /* the last one partial when K % 4 != 0 */
    uint32_t *xt = kern_scratch(KERN_SCRATCH_ACT2, (size_t)U * 16 * sizeof(uint32_t));
    for (int u = 0; u < U; u++) {
        uint32_t *v = xt + (size_t)u * 16;
        for (int t = 0; t < 8; t++) {
            if (t < n) {
                memcpy(v + 2 * t, xb + (size_t)t * ldx + 4 * (size_t)u, 8);
            } else {
                v[2 * t] = v[2 * t + 1] = 0;
            }
        }
    }
    few_job j = {.W = W, .y = y, .xt = xt, .bias = bias, .n = n};
    /* tiles of whole 8 rows, about 64 KB of weights, the threads' ends
     * balanced */
    int rows = kern_one_token_grain(KT_BF16, W->cols);
    pool_for(p, few_range, &j, W->rows, (rows + FEW_R - 1) / FEW_R * FEW_R);
}
#pragma GCC pop_options
