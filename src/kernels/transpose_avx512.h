/* transpose_avx512.h — the 16 x 16 transpose of 32-bit elements that puts
 * sixteen weight rows into the lanes of a vector: the bf16 GEMM's packing
 * and the one-token batch-invariant kernel both take each column pair of 16
 * rows this way. Include only from files compiled with AVX-512. */
#ifndef DI_TRANSPOSE_AVX512_H
#define DI_TRANSPOSE_AVX512_H

#include <immintrin.h>

/* v[i] element p becomes v[p] element i. First each group of four rows by
 * 32- and 64-bit unpacks (u[4g + c], 128-bit lane L: rows 4g .. 4g + 3 at
 * element 4L + c), then the 128-bit lanes of the four groups 4 x 4. */
static inline void transpose16_epi32(__m512i v[16]) {
    __m512i u[16];
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const __m512i *r = v + 4 * g;
        __m512i t0 = _mm512_unpacklo_epi32(r[0], r[1]), t1 = _mm512_unpackhi_epi32(r[0], r[1]);
        __m512i t2 = _mm512_unpacklo_epi32(r[2], r[3]), t3 = _mm512_unpackhi_epi32(r[2], r[3]);
        u[4 * g] = _mm512_unpacklo_epi64(t0, t2);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t0, t2);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t1, t3);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t1, t3);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m512i s0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
        __m512i s1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
        __m512i s2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
        __m512i s3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
        v[c] = _mm512_shuffle_i32x4(s0, s2, 0x88);
        v[4 + c] = _mm512_shuffle_i32x4(s0, s2, 0xdd);
        v[8 + c] = _mm512_shuffle_i32x4(s1, s3, 0x88);
        v[12 + c] = _mm512_shuffle_i32x4(s1, s3, 0xdd);
    }
}

#endif
