/* matmul_bf16_inv1_avx512.c — one token of bf16 weights in batch-invariant
 * mode on CPUs with AVX-512 BF16, for a matrix without a packed copy
 * (kern_pack_panels, which streams at the plain pace): the order of every
 * other n (matmul_bf16_avx512.c) read from the row-major weights.
 *
 * Batch-invariant mode gives a token the order every other n takes: per
 * output the bias (or zero), then for each block of KERN_BF16_GEMM_KC
 * columns in turn its even pairs summed in one 32-bit lane and its odd
 * pairs in another, the two added and added on. So a lane must hold one
 * row, as in the packed GEMM's panels; the GEMM itself, for one token, read
 * each 128-row group one column block after another (128 pieces of 1 KiB,
 * 4 KiB apart, for llama-1b's rows) and stored and reloaded every packed
 * panel.
 *
 * Here a tile is 16 consecutive rows, walked to their end before the next
 * tile. Each 32-column step of the 16 rows is loaded, transposed in
 * registers (transpose16_epi32: vector p, lane i = row i's pair p) and goes
 * straight into 16 dot products against the token's pairs, broadcast from
 * memory. IV_NB column blocks run side by side, two chains each (even and
 * odd pairs), so the dot products' latency is covered; their sums are
 * added onto the outputs in block order (two blocks side by side were 5-10
 * % slower). While a tile is computed the next one is prefetched in
 * address order, a kilobyte per step, so memory sees one sequential stream
 * per thread where 16 rows 4 KiB apart would be 16 streams. With the T0
 * hint: llama-1b's matrices and output head, alternating in one process,
 * 48-49 GB/s (median of 12) against 43 with T1, 40-41 with T2, 48 with NTA
 * (plain one-token rows: 54-55).
 *
 * Each output's sums are the other kernels', term for term, so the bits
 * are the same (kern_matmul_bf16_invariant_every_kernel checks a token
 * alone against batches that take each of them). */
#include "kernels/kern_internal.h"

#include <immintrin.h>
#include <string.h>

#include "kernels/transpose_avx512.h"

#pragma GCC push_options
#pragma GCC target("avx512bf16")

#define AI static inline __attribute__((always_inline))

#define IV_ROWS 16                /* rows per tile: one per lane */
#define IV_KC   KERN_BF16_GEMM_KC /* columns per block (the GEMM's) */
#define IV_NB   4                 /* column blocks side by side */
#define IV_STEP 32                /* columns per step: 16 pairs */

typedef struct inv1_job {
    const kern_mat *W;
    float *y;
    const uint16_t *x; /* the token's activations in bf16, zero past the columns */
    const float *bias;
} inv1_job;

/* Columns [k, k + kv) (kv <= 32, k a multiple of 32) of the tile's rows
 * (w: row 0's first, rows K apart, the first R of them in the matrix) onto
 * acc[0] (the even pairs) and acc[1] (the odd ones), pair by pair in order.
 * full: kv = 32 and R = 16. Columns past kv are zero, as the GEMM packs them
 * (the second of an odd end's pair); pairs past them are not added. */
AI void inv1_step(__m512 acc[2], const uint16_t *w, size_t K, const uint16_t *x, int k, int kv,
                  int R, const bool full) {
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
    for (int q = 0; q < np; q++) {
        int32_t pair;
        memcpy(&pair, x + k + 2 * q, 4);
        acc[q & 1] =
            _mm512_dpbf16_ps(acc[q & 1], (__m512bh)v[q], (__m512bh)_mm512_set1_epi32(pair));
    }
}

/* Rows [r0, r0 + R), R <= 16; full_rows: R = 16. */
AI void inv1_tile(const inv1_job *j, int r0, int R, const bool full_rows) {
    const kern_mat *W = j->W;
    int K = W->cols, nblk = (K + IV_KC - 1) / IV_KC;
    const uint16_t *w = (const uint16_t *)W->data + (size_t)r0 * K;
    /* the next tile, a kilobyte per step (a tile is K / 32 steps of 1 KiB) */
    const char *next = (const char *)(w + (size_t)IV_ROWS * K);
    const char *end = (const char *)((const uint16_t *)W->data + (size_t)W->rows * K);
    __mmask16 rm = full_rows ? 0xffff : (__mmask16)((1u << R) - 1);
    __m512 out = j->bias ? _mm512_maskz_loadu_ps(rm, j->bias + r0) : _mm512_setzero_ps();
    for (int b0 = 0; b0 < nblk; b0 += IV_NB) {
        __m512 acc[IV_NB][2];
#pragma GCC unroll 4
        for (int bi = 0; bi < IV_NB; bi++) acc[bi][0] = acc[bi][1] = _mm512_setzero_ps();
        for (int s = 0; s < IV_KC; s += IV_STEP) {
#pragma GCC unroll 4
            for (int bi = 0; bi < IV_NB; bi++) {
                int k = (b0 + bi) * IV_KC + s, kv = K - k;
                if (b0 + bi >= nblk || kv <= 0) continue;
                if (next < end) {
#pragma GCC unroll 16
                    for (int l = 0; l < 16; l++) _mm_prefetch(next + 64 * l, _MM_HINT_T0);
                    next += 1024;
                }
                if (full_rows && kv >= IV_STEP)
                    inv1_step(acc[bi], w, (size_t)K, j->x, k, IV_STEP, IV_ROWS, true);
                else
                    inv1_step(acc[bi], w, (size_t)K, j->x, k, kv < IV_STEP ? kv : IV_STEP, R,
                              false);
            }
        }
#pragma GCC unroll 4
        for (int bi = 0; bi < IV_NB; bi++)
            if (b0 + bi < nblk) out = _mm512_add_ps(out, _mm512_add_ps(acc[bi][0], acc[bi][1]));
    }
    _mm512_mask_storeu_ps(j->y + r0, rm, out);
}

static void inv1_rows(void *ctx, int lo, int hi) {
    const inv1_job *j = ctx;
    int r = lo;
    for (; r + IV_ROWS <= hi; r += IV_ROWS) inv1_tile(j, r, IV_ROWS, true);
    if (r < hi) inv1_tile(j, r, hi - r, false);
}

void kern_bf16_inv1_avx512(pool *p, float *y, const uint16_t *xb, const kern_mat *W,
                           const float *bias) {
    inv1_job j = {.W = W, .y = y, .x = xb, .bias = bias};
    /* grains of whole tiles (a multiple of 16 rows), the threads' ends balanced */
    pool_for(p, inv1_rows, &j, W->rows, kern_one_token_grain(KT_BF16, W->cols));
}
#pragma GCC pop_options
