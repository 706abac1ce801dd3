/* matmul_bf16_inv_rows_avx512.c — bf16 weights times 1 to
 * KERN_BF16_INV_ROWS_MAX tokens in batch-invariant mode on CPUs with
 * AVX-512 BF16: the packed GEMM's order (matmul_bf16_avx512.c) at the pace
 * of a weight stream.
 *
 * Batch-invariant mode gives a token the order every other n takes: per
 * output the bias (or zero), then each block of KERN_BF16_GEMM_KC columns
 * summed pair by pair in one 32-bit lane and added in turn. So a lane holds
 * one row of one token. The GEMM packs panels of 16 rows a column block at
 * a time for that, and for one token read each 128-row group one column
 * block after another (128 pieces of 1 KiB, 4 KiB apart, for llama-1b's
 * rows) and stored and reloaded every packed panel; the token lanes put a
 * token in each lane and so cost sixteen tokens' work at any n up to 16.
 *
 * Here a tile is 16 consecutive rows, walked to their end before the next
 * tile. Each 32-column step of the 16 rows is loaded, transposed in
 * registers (transpose16_epi32: vector p, lane i = row i's pair p) and goes
 * straight into the dot products against each token's pairs, broadcast from
 * memory: the transposition is shared by the tokens, each token costs 16
 * dot products a step. Column blocks run side by side where the tokens are
 * few (inv_blocks), each (block, token) its own chain, so the dot products'
 * latency is covered; the block sums are added onto the outputs in block
 * order. While a tile is computed the next one is prefetched into L2 in
 * address order, a kilobyte per step: memory sees one sequential stream per
 * thread where 16 rows 4 KiB apart would be 16 streams (without the
 * prefetch, llama-1b's matrices streamed at 15 GB/s, with it 37-47).
 *
 * Each output's sums are the GEMM's, term for term, so the bits are the
 * same (kern_matmul_batch_invariant* check a token alone against it in
 * batches). */
#include "kernels/kern_internal.h"

#include <immintrin.h>
#include <string.h>

#include "kernels/transpose_avx512.h"

#pragma GCC push_options
#pragma GCC target("avx512bf16")

#define AI static inline __attribute__((always_inline))

#define IV_ROWS 16                /* rows per tile: one per lane */
#define IV_KC   KERN_BF16_GEMM_KC /* columns per block (the GEMM's) */
#define IV_NB   4                 /* column blocks side by side, at most */
#define IV_STEP 32                /* columns per step: 16 pairs */
#define IV_T    KERN_BF16_INV_ROWS_MAX

typedef struct inv_job {
    const kern_mat *W;
    float *y;
    const uint16_t *x; /* the tokens' activations in bf16, zero past the columns */
    size_t ldx;
    const float *bias;
    int n;
} inv_job;

/* Columns [k, k + kv) (kv <= 32) of the tile's rows (w: row 0's first, rows
 * K apart, the first R of them in the matrix) times T tokens onto acc[t],
 * pair by pair in order. full: kv = 32 and R = 16. Columns past kv are
 * zero, as the GEMM packs them (the second of an odd end's pair); pairs past
 * them are not added. */
AI void inv_step(__m512 *acc, const uint16_t *w, size_t K, const inv_job *j, int k, int kv, int R,
                 const bool full, const int T) {
    __m512i v[IV_ROWS];
    __mmask32 m = full || kv >= IV_STEP ? ~0u : (1u << kv) - 1;
#pragma GCC unroll 16
    for (int i = 0; i < IV_ROWS; i++) {
        const uint16_t *p = w + (size_t)i * K + k;
        v[i] = full    ? _mm512_loadu_si512(p)
               : i < R ? _mm512_maskz_loadu_epi16(m, p)
                       : _mm512_setzero_si512();
    }
    transpose16_epi32(v);
    int np = full ? IV_STEP / 2 : (kv + 1) / 2;
#pragma GCC unroll 16
    for (int q = 0; q < np; q++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            int32_t pair;
            memcpy(&pair, j->x + (size_t)t * j->ldx + k + 2 * q, 4);
            acc[t] = _mm512_dpbf16_ps(acc[t], (__m512bh)v[q], (__m512bh)_mm512_set1_epi32(pair));
        }
}

/* Rows [r0, r0 + R), R <= 16 (full_rows: R = 16), times T tokens, NB
 * column blocks side by side. */
AI void inv_tile(const inv_job *j, int r0, int R, const bool full_rows, const int T, const int NB) {
    const kern_mat *W = j->W;
    int K = W->cols, M = W->rows, nblk = (K + IV_KC - 1) / IV_KC;
    const uint16_t *w = (const uint16_t *)W->data + (size_t)r0 * K;
    /* the next tile, a kilobyte per step (a tile is K / 32 steps of 1 KiB) */
    const char *next = (const char *)(w + (size_t)IV_ROWS * K);
    const char *end = (const char *)((const uint16_t *)W->data + (size_t)M * K);
    __mmask16 rm = full_rows ? 0xffff : (__mmask16)((1u << R) - 1);
    __m512 bv = j->bias ? _mm512_maskz_loadu_ps(rm, j->bias + r0) : _mm512_setzero_ps();
    __m512 out[IV_T];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) out[t] = bv;
    for (int b0 = 0; b0 < nblk; b0 += NB) {
        __m512 acc[IV_NB][IV_T];
#pragma GCC unroll 4
        for (int bi = 0; bi < NB; bi++)
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) acc[bi][t] = _mm512_setzero_ps();
        for (int s = 0; s < IV_KC; s += IV_STEP) {
#pragma GCC unroll 4
            for (int bi = 0; bi < NB; bi++) {
                int k = (b0 + bi) * IV_KC + s, kv = K - k;
                if (b0 + bi >= nblk || kv <= 0) continue;
                if (next < end) {
#pragma GCC unroll 16
                    for (int l = 0; l < 16; l++) _mm_prefetch(next + 64 * l, _MM_HINT_T1);
                    next += 1024;
                }
                if (full_rows && kv >= IV_STEP)
                    inv_step(acc[bi], w, (size_t)K, j, k, IV_STEP, IV_ROWS, true, T);
                else
                    inv_step(acc[bi], w, (size_t)K, j, k, kv < IV_STEP ? kv : IV_STEP, R, false, T);
            }
        }
#pragma GCC unroll 4
        for (int bi = 0; bi < NB; bi++)
            if (b0 + bi < nblk)
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) out[t] = _mm512_add_ps(out[t], acc[bi][t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(j->y + (size_t)t * M + r0, rm, out[t]);
}

/* Blocks side by side for T tokens: enough chains to cover the dot
 * products' latency, few enough that the sums and one transposed step stay
 * in registers. */
#define inv_blocks(T) ((T) == 1 ? IV_NB : (T) <= 4 ? 2 : 1)

AI void inv_range(const inv_job *j, int lo, int hi, const int T) {
    int r = lo;
    for (; r + IV_ROWS <= hi; r += IV_ROWS) inv_tile(j, r, IV_ROWS, true, T, inv_blocks(T));
    if (r < hi) inv_tile(j, r, hi - r, false, T, inv_blocks(T));
}

static void inv_rows(void *ctx, int lo, int hi) {
    const inv_job *j = ctx;
    switch (j->n) {
#define CASE(T)                                                                                    \
    case T:                                                                                        \
        inv_range(j, lo, hi, T);                                                                   \
        break;
        CASE(1)
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

void kern_bf16_inv_rows_avx512(pool *p, float *y, const uint16_t *xb, size_t ldx, const kern_mat *W,
                               const float *bias, int n) {
    _Static_assert(IV_T == 8, "inv_rows has a case for each n up to 8");
    inv_job j = {.W = W, .y = y, .x = xb, .ldx = ldx, .bias = bias, .n = n};
    /* grains of whole tiles (a multiple of 16 rows), the threads' ends balanced */
    pool_for(p, inv_rows, &j, W->rows, kern_one_token_grain(KT_BF16, W->cols));
}
#pragma GCC pop_options
