/* load_avx512.h — 64 bytes of a weight stream read as two 256-bit loads,
 * which every one-token kernel's rows take: on the Zen 5 machines here
 * 512-bit loads from memory stream markedly slower (a plain read of
 * llama-1b's matrices in the model: 48-52 GB/s with 512-bit loads, 60-64
 * with 256-bit ones). Include only from files compiled with AVX-512. */
#ifndef DI_LOAD_AVX512_H
#define DI_LOAD_AVX512_H

#include <immintrin.h>

static inline __attribute__((always_inline)) __m512i kern_load64_halves(const void *p) {
    __m256i lo = _mm256_loadu_si256((const __m256i *)p);
    __m256i hi = _mm256_loadu_si256((const __m256i *)p + 1);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

#endif
