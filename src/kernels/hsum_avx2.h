/* hsum_avx2.h — the horizontal sums (and maximum) the AVX2 kernels reduce
 * with, shared by the files that must reproduce their bits (the AVX-512
 * attention helpers give kern_dot's exact result, the AVX-512 softmax the
 * AVX2 one's). Include only from files compiled with AVX2. */
#ifndef DI_HSUM_AVX2_H
#define DI_HSUM_AVX2_H

#include <immintrin.h>

/* Low + high half, then (0+2) + (1+3). */
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The largest lane, by the same halving steps. */
static inline float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* hsum8 of the four vectors v[0..3] at once, bit for bit: out[q] =
 * hsum8(v[q]). */
static inline void hsum8x4(const __m256 v[4], float out[4]) {
    /* [lo + hi of 0 | of 1], [of 2 | of 3] */
    __m256 x01 = _mm256_add_ps(_mm256_permute2f128_ps(v[0], v[1], 0x20),
                               _mm256_permute2f128_ps(v[0], v[1], 0x31));
    __m256 x23 = _mm256_add_ps(_mm256_permute2f128_ps(v[2], v[3], 0x20),
                               _mm256_permute2f128_ps(v[2], v[3], 0x31));
    /* per 128-bit lane: (e0 + e2, e1 + e3) of each of its two vectors */
    __m256 h = _mm256_add_ps(_mm256_shuffle_ps(x01, x23, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(x01, x23, _MM_SHUFFLE(3, 2, 3, 2)));
    /* lanes 0, 1, 4, 5: vectors 0, 2, 1, 3 */
    __m256 f = _mm256_add_ps(_mm256_shuffle_ps(h, h, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(h, h, _MM_SHUFFLE(3, 1, 3, 1)));
    float t[8];
    _mm256_storeu_ps(t, f);
    out[0] = t[0], out[1] = t[4], out[2] = t[1], out[3] = t[5];
}

#endif
