/* ops_avx512.c — the attention helpers with 512-bit vectors (AVX-512 CPUs):
 * query heads against a run of cached K rows, and the weighted sum of V rows
 * for several heads. Prefill attention spends most of its time in these.
 *
 * Both give the AVX2 helpers' bits exactly. kern_dot keeps two 8-lane sums,
 * over columns [16j, 16j + 8) and [16j + 8, 16j + 16); one 16-lane FMA over
 * columns [16j, 16j + 16) is those two FMAs lane for lane, and its halves
 * add and reduce as hsum8 does. The weighted sums are one FMA per element and
 * row, in row order, at any vector width. What the wider vectors buy is
 * fewer loads: four heads' partial dot products share each K load and four
 * rows each query load (the AVX2 helper reloads every query per row), their
 * horizontal sums done eight at a time in registers; and four heads' outputs
 * stay in registers while each V row is loaded once for all of them (the AVX2
 * path reloads it per head).
 *
 * The cache rows may be bf16 (bf): each 16 values are widened to f32 as they
 * are loaded (a shift into the high half), so the arithmetic, and the bits,
 * are those of the f32 rows the widened values make; the bytes read halve. */
#include "kernels/kern_internal.h"

#include <immintrin.h>
#include <math.h>

#include "kernels/hsum_avx2.h"
#include "kernels/hsum_avx512.h"

#define AI         static inline __attribute__((always_inline))
#define ROWS_AHEAD 16 /* cached rows prefetched ahead (prefetch_row) */

/* 16 elements of row storage from element k: f32, or bf16 widened. */
AI __m512 load16(const void *p, size_t k, const bool bf) {
    if (!bf) return _mm512_loadu_ps((const float *)p + k);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* low + high 256-bit halves: kern_dot's s0 + s1 */
AI __m256 halves(__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* Heads a[h0 .. h0+4) against rows [i, i + R) (R = 1 or 2). */
AI void dot4(float *out, size_t ld, const float *a, int h0, const void *b, const bool bf,
             size_t stride, int i, const int R, int n) {
    __m512 acc[2][4];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) acc[r][q] = _mm512_setzero_ps();
    const float *aq = a + (size_t)h0 * n;
    for (int k = 0; k < n; k += 16) {
        __m512 bk[2];
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) bk[r] = load16(b, (size_t)(i + r) * stride + k, bf);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m512 av = _mm512_loadu_ps(aq + (size_t)q * n + k);
#pragma GCC unroll 2
            for (int r = 0; r < R; r++) acc[r][q] = _mm512_fmadd_ps(av, bk[r], acc[r][q]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        __m256 v[4];
        float o[4];
        for (int q = 0; q < 4; q++) v[q] = halves(acc[r][q]);
        hsum8x4(v, o);
        for (int q = 0; q < 4; q++) out[(size_t)(h0 + q) * ld + i + r] = o[q];
    }
}

/* Heads a[h0 .. h0+4) against rows [i, i + 4): dot4's sums, sixteen
 * accumulators (every row and query loaded once per 16 columns), and the
 * horizontal sums in registers, each head's four scores one store. */
AI void dot4x4(float *out, size_t ld, const float *a, int h0, const void *b, const bool bf,
               size_t stride, int i, int n, const int H) {
    __m512 acc[16]; /* row r, head q at 4r + q */
#pragma GCC unroll 16
    for (int x = 0; x < 16; x++) acc[x] = _mm512_setzero_ps();
    const float *aq = a + (size_t)h0 * n;
    for (int k = 0; k < n; k += 16) {
        __m512 bk[4], av[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) bk[r] = load16(b, (size_t)(i + r) * stride + k, bf);
#pragma GCC unroll 4
        for (int q = 0; q < H; q++) av[q] = _mm512_loadu_ps(aq + (size_t)q * n + k);
#pragma GCC unroll 4
        for (int q = 0; q < H; q++)
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                acc[4 * r + q] = _mm512_fmadd_ps(av[q], bk[r], acc[4 * r + q]);
    }
    /* chunk q: head q's four rows; each lane sums one vector's own lanes,
     * so the zeros of heads past H change no other head's bits */
    __m512 s = hsum16x16(acc);
    _mm_storeu_ps(out + (size_t)h0 * ld + i, _mm512_castps512_ps128(s));
    if (H > 1) _mm_storeu_ps(out + (size_t)(h0 + 1) * ld + i, _mm512_extractf32x4_ps(s, 1));
    if (H > 2) _mm_storeu_ps(out + (size_t)(h0 + 2) * ld + i, _mm512_extractf32x4_ps(s, 2));
    if (H > 3) _mm_storeu_ps(out + (size_t)(h0 + 3) * ld + i, _mm512_extractf32x4_ps(s, 3));
}

/* The attention helpers prefetch the rows they walk, ROWS_AHEAD rows ahead,
 * into L2 (T1: the loads that follow need no L1 miss slots held for the
 * prefetches). Sliding-window rings keep whole entries side by side (a
 * head's rows a page apart for a 1B-scale model), a stride the hardware
 * prefetchers do not follow; and they fetch a kv head's contiguous 256-byte
 * rows (bf16) or MLA's 576-element latent rows not far enough ahead either:
 * llama-1b's 16 layers at 512 positions took 1.44-1.5 ms a token on two
 * threads with, ~2.2 without (harness); dsv3-1b decode at 6,400 positions,
 * attention time against the matmuls' 0.28-0.30 with, 0.34-0.36 without.
 *
 * prefetch_row: row i of b, all n elements of esize bytes. */
AI void prefetch_row(const void *b, size_t stride, int i, int n, size_t esize) {
    const char *r = (const char *)b + (size_t)i * stride * esize;
    for (size_t k = 0; k < (size_t)n * esize; k += 64) _mm_prefetch(r + k, _MM_HINT_T1);
}

/* The K rows [i, i + 4) of m about to be read. Rows side by side (stride ==
 * n: a full layer's run; four of them within a page) are one stream, read as
 * the weight kernels read theirs (kern_stream_ahead: each line a page on,
 * non-temporal, and the page after next touched as the stream enters a
 * page), the prefetches running on past the run's end into the next kv
 * head's run, which a full layer's block keeps right after it (the caller
 * starts the runs that do not follow on: kern_prefetch_start). llama-1b
 * int8, 2 threads, a layer's attention alternating call by call in one
 * run against the ROWS_AHEAD rows: one token at 512-544 positions 27.4 /
 * 38.8 us against 31.2 / 43.1 (two runs), eight tokens level (57.7 / 56.7
 * against 57.4 / 57.1); the whole one-token step 0.57 % shorter (on and
 * off in alternate steps, both orders, 8 runs). The V rows (axpy64) keep
 * ROWS_AHEAD: streamed too, eight tokens took 65.1 / 53.2 us against 60.5
 * / 47.2. */
AI void k_rows_ahead(const void *b, size_t stride, int i, int m, int n, size_t esize) {
    size_t row = (size_t)n * esize;
    if (stride == (size_t)n && 4 * row <= KERN_PAGE) {
        kern_stream_ahead((const char *)b + (size_t)i * row, 4 * row);
        return;
    }
    if (i + ROWS_AHEAD + 4 <= m)
        for (int r = 0; r < 4; r++) prefetch_row(b, stride, i + ROWS_AHEAD + r, n, esize);
}

/* Heads [h, h + H) against the rows four at a time (the first heads
 * prefetching the rows); returns the rows done, the last whole four. */
AI int dot_rows4(float *out, size_t ld, const float *a, int h, const int H, const void *b,
                 const bool bf, size_t stride, int m, int n) {
    size_t esize = bf ? 2 : 4;
    int i = 0;
    for (; i + 4 <= m; i += 4) {
        if (h == 0) k_rows_ahead(b, stride, i, m, n, esize);
        dot4x4(out, ld, a, h, b, bf, stride, i, n, H);
    }
    return i;
}

AI void dot_heads(float *out, size_t ld, const float *a, int n_a, const void *b, const bool bf,
                  size_t stride, int m, int n) {
    int h = 0;
    for (; n % 16 == 0 && h + 4 <= n_a; h += 4) {
        int i = dot_rows4(out, ld, a, h, 4, b, bf, stride, m, n);
        for (; i + 2 <= m; i += 2) dot4(out, ld, a, h, b, bf, stride, i, 2, n);
        if (i < m) dot4(out, ld, a, h, b, bf, stride, i, 1, n);
    }
    if (h == n_a) return;
    /* one to three heads left: their rows four at a time in the same
     * registers (MLA's tasks of two heads took the path below for all of
     * it), the rows past whole fours below */
    int left = n_a - h, i = 0;
    if (n % 16 == 0)
        i = left == 1   ? dot_rows4(out, ld, a, h, 1, b, bf, stride, m, n)
            : left == 2 ? dot_rows4(out, ld, a, h, 2, b, bf, stride, m, n)
                        : dot_rows4(out, ld, a, h, 3, b, bf, stride, m, n);
    if (i == m) return;
    /* the rest (or n not whole 16s) */
    out += (size_t)h * ld + i;
    a += (size_t)h * n;
    b = (const char *)b + (size_t)i * stride * (bf ? 2 : 4);
    if (bf)
        kern_dot_heads_widened(out, ld, a, left, b, stride, m - i, n);
    else
        kern_dot_heads_avx2(out, ld, a, left, b, stride, m - i, n);
}

void kern_dot_heads_avx512(float *out, size_t ld, const float *a, int n_a, const void *b, bool bf,
                           size_t stride, int m, int n) {
    if (bf)
        dot_heads(out, ld, a, n_a, b, true, stride, m, n);
    else
        dot_heads(out, ld, a, n_a, b, false, stride, m, n);
}

/* Heads [h0, h0 + H) (H <= 4), columns [c, c + 64). */
AI void axpy64(float *y, size_t ldy, const float *a, size_t lda, int h0, const int H, const void *x,
               const bool bf, size_t stride, int m, int c, int n) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int h = 0; h < H; h++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) acc[h][v] = _mm512_loadu_ps(y + (h0 + h) * ldy + c + 16 * v);
    for (int i = 0; i < m; i++) {
        size_t r = (size_t)i * stride + c;
        if (c == 0 && i + ROWS_AHEAD < m) /* the whole row, once */
            prefetch_row(x, stride, i + ROWS_AHEAD, n, bf ? 2 : 4);
        __m512 xv[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) xv[v] = load16(x, r + 16 * v, bf);
#pragma GCC unroll 4
        for (int h = 0; h < H; h++) {
            __m512 va = _mm512_set1_ps(a[(h0 + h) * lda + i]);
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) acc[h][v] = _mm512_fmadd_ps(va, xv[v], acc[h][v]);
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < H; h++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) _mm512_storeu_ps(y + (h0 + h) * ldy + c + 16 * v, acc[h][v]);
}

AI void axpy_heads(float *y, size_t ldy, const float *a, size_t lda, int n_a, const void *x,
                   const bool bf, size_t stride, int m, int n) {
    int c = 0;
    for (; n % 8 == 0 && c + 64 <= n; c += 64) {
        int h = 0;
        for (; h + 4 <= n_a; h += 4) axpy64(y, ldy, a, lda, h, 4, x, bf, stride, m, c, n);
        switch (n_a - h) {
        case 3:
            axpy64(y, ldy, a, lda, h, 3, x, bf, stride, m, c, n);
            break;
        case 2:
            axpy64(y, ldy, a, lda, h, 2, x, bf, stride, m, c, n);
            break;
        case 1:
            axpy64(y, ldy, a, lda, h, 1, x, bf, stride, m, c, n);
            break;
        default:
            break;
        }
    }
    if (c == n) return;
    /* the columns past whole 64s, as the AVX2 path does them */
    if (bf)
        kern_axpy_heads_widened(y + c, ldy, a, lda, n_a, (const uint16_t *)x + c, stride, m, n - c);
    else
        for (int h = 0; h < n_a; h++)
            for (int i = 0; i < m; i++)
                kern_axpy_avx2(y + h * ldy + c, a[h * lda + i],
                               (const float *)x + (size_t)i * stride + c, n - c);
}

void kern_axpy_heads_avx512(float *y, size_t ldy, const float *a, size_t lda, int n_a,
                            const void *x, bool bf, size_t stride, int m, int n) {
    if (bf)
        axpy_heads(y, ldy, a, lda, n_a, x, true, stride, m, n);
    else
        axpy_heads(y, ldy, a, lda, n_a, x, false, stride, m, n);
}

/* ---- softmax and SiLU: ops_avx2.c's, 16 lanes at a time -------------------- */
/* e^x as ops_avx2.c's exp8, lane for lane the same operations (so the same
 * bits): clamped, x = n ln2 + r, the degree-5 polynomial, 2^n, and zero
 * below the range. */
AI __m512 exp16(__m512 x) {
    __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(KEXP_MIN), _CMP_LT_OQ);
    x = _mm512_min_ps(x, _mm512_set1_ps(KEXP_MAX));
    x = _mm512_max_ps(x, _mm512_set1_ps(KEXP_MIN));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(KEXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(KEXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(KEXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(KEXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KEXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KEXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KEXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KEXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KEXP_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

AI __m256 lo8(__m512 v) {
    return _mm512_castps512_ps256(v);
}

AI __m256 hi8(__m512 v) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

/* kern_softmax_avx2's bits: the maximum (exact in any order), each e^(x s -
 * m) by exp16, the sum in the AVX2 loop's order (one 8-lane sum, each
 * 8-column chunk added in turn; then the libm tail), the same 1 / sum. */
void kern_softmax_avx512(float *x, int n, float scale) {
    const __m512 vsc = _mm512_set1_ps(scale);
    int i = 0, n8 = n & ~7;
    __m512 vm = _mm512_set1_ps(-INFINITY);
    for (; i + 16 <= n8; i += 16)
        vm = _mm512_max_ps(vm, _mm512_mul_ps(_mm512_loadu_ps(x + i), vsc));
    __m256 vm8 = _mm256_max_ps(lo8(vm), hi8(vm));
    if (i < n8)
        vm8 = _mm256_max_ps(vm8, lo8(_mm512_mul_ps(_mm512_maskz_loadu_ps(0xff, x + i), vsc)));
    float m = hmax8(vm8);
    for (i = n8; i < n; i++) m = fmaxf(m, x[i] * scale);
    const __m512 mm = _mm512_set1_ps(m);
    __m256 vs = _mm256_setzero_ps();
    for (i = 0; i + 16 <= n8; i += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vsc), mm));
        _mm512_storeu_ps(x + i, e);
        vs = _mm256_add_ps(_mm256_add_ps(vs, lo8(e)), hi8(e));
    }
    if (i < n8) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(0xff, x + i), vsc), mm));
        _mm256_storeu_ps(x + i, lo8(e));
        vs = _mm256_add_ps(vs, lo8(e));
    }
    float s = hsum8(vs);
    for (i = n8; i < n; i++) {
        x[i] = expf(x[i] * scale - m);
        s += x[i];
    }
    const __m512 inv = _mm512_set1_ps(1.0f / s);
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv));
    }
}

/* kern_silu_mul_avx2's bits: g / (1 + e^-g) * up per element, exp16 for
 * exp8, the tail past whole 8s in libm as there. */
void kern_silu_mul_avx512(float *out, const float *gate, const float *up, int n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    int i = 0, n8 = n & ~7;
    for (; i < n8; i += 16) {
        __mmask16 k = n8 - i >= 16 ? (__mmask16)0xffff : (__mmask16)0xff;
        __m512 g = _mm512_maskz_loadu_ps(k, gate + i);
        __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
        __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, up + i)));
    }
    for (i = n8; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}
