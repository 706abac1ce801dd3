/* gemm_avx512.c — the AVX-512 register tile of the blocked GEMM
 * (gemm_avx2.c packs the panels and walks the blocks; this file only
 * multiplies). On CPUs with AVX-512 the FMA units are twice as wide, so a
 * packed panel's 16 rows at one k are a single vector and the tile is up to
 * 12 tokens x 2 panels (24 accumulators, 2 panel loads and 12 broadcasts per
 * k), against the AVX2 tile's 6 tokens x 1 panel.
 *
 * Each output element still gets acc = fma(w, x, acc) over k in order from
 * zero, then one add onto c: exactly the AVX2 tile's arithmetic, so results
 * are bit-identical to it and batch-invariant mode may mix the two. */
#include "kernels/kern_internal.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* c[i][16p .. 16p+16) += sum_k x[i][k] * panel_p[k][0..16), i < MR, p < NP. */
AI void tile(const float *pw, size_t pstride, const float *x, size_t ldx, int kc, float *c,
             size_t ldc, const int MR, const int NP) {
    __m512 acc[KERN_GEMM512_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int k = 0; k < kc; k++) {
        __m512 w0 = _mm512_load_ps(pw + (size_t)k * 16);
        __m512 w1 = NP > 1 ? _mm512_load_ps(pw + pstride + (size_t)k * 16) : w0;
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            __m512 xb = _mm512_set1_ps(x[(size_t)i * ldx + k]);
            acc[i][0] = _mm512_fmadd_ps(w0, xb, acc[i][0]);
            if (NP > 1) acc[i][1] = _mm512_fmadd_ps(w1, xb, acc[i][1]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int p = 0; p < NP; p++) {
            float *ci = c + (size_t)i * ldc + 16 * p;
            _mm512_storeu_ps(ci, _mm512_add_ps(_mm512_loadu_ps(ci), acc[i][p]));
        }
}

#define TILE_CASE(m)                                                                               \
    case m:                                                                                        \
        if (np > 1)                                                                                \
            tile(pw, pstride, x, ldx, kc, c, ldc, m, 2);                                           \
        else                                                                                       \
            tile(pw, pstride, x, ldx, kc, c, ldc, m, 1);                                           \
        break;

void kern_gemm_tile_avx512(const float *pw, size_t pstride, int np, const float *x, size_t ldx,
                           int kc, float *c, size_t ldc, int mr) {
    switch (mr) { /* constant sizes: the accumulators stay in registers */
        TILE_CASE(12)
        TILE_CASE(11)
        TILE_CASE(10)
        TILE_CASE(9)
        TILE_CASE(8)
        TILE_CASE(7)
        TILE_CASE(6)
        TILE_CASE(5)
        TILE_CASE(4)
        TILE_CASE(3)
        TILE_CASE(2)
    default:
        if (np > 1)
            tile(pw, pstride, x, ldx, kc, c, ldc, 1, 2);
        else
            tile(pw, pstride, x, ldx, kc, c, ldc, 1, 1);
        break;
    }
}
