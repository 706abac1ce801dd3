/* hsum_avx512.h — sixteen horizontal sums at once in 512-bit registers, for
 * the kernels whose rows or heads are each reduced to one number (the
 * attention scores, short one-token rows). Include only from files
 * compiled with AVX-512. */
#ifndef DI_HSUM_AVX512_H
#define DI_HSUM_AVX512_H

#include <immintrin.h>

/* The horizontal sums of sixteen vectors, bit for bit the low and high
 * 256-bit halves added and then hsum8 (hsum_avx2.h) of each: the same adds
 * in the same pairs (lane l with l + 8, then l + 4, then (0 + 2) + (1 + 3)),
 * done as a butterfly over all sixteen so that every shuffle and add serves
 * several sums (45 instructions for 16 sums, against 76 for the halves and
 * two hsum8x8). Lane 4c + e holds v[c + 4e]'s. GCC's _mm512_reduce_add_ps
 * adds in the same pairs, so each sum is also its bits. */
static inline __attribute__((always_inline)) __m512 hsum16x16(const __m512 v[16]) {
    __m512 w[8], u[4], t[2];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) /* [lo + hi 256 of v[2k] | of v[2k + 1]] */
        w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE));
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) /* 128-bit chunk c: lo + hi 128 of v[4k + c]'s 8 */
        u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0x88),
                             _mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0xDD));
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) /* chunk c: (0 + 2, 1 + 3) of v[8k + c], of v[8k + 4 + c] */
        t[k] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

#endif
