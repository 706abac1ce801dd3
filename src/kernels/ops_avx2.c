/* ops_avx2.c — AVX2/FMA versions of the vector helpers (dot, axpy, norms,
 * argmax, RoPE, softmax, SiLU, bf16 row expansion). Entered only through kernels.c's
 * dispatch. exp is a Cephes-style polynomial (about 1 ulp over the range the
 * model uses), so softmax and SiLU need no libm call per element. */
#include "kernels/kern_internal.h"

#include <immintrin.h>
#include <math.h>

#include "kernels/hsum_avx2.h"

/* e^x for 8 lanes: x = n ln2 + r, |r| <= ln2/2, degree-5 polynomial. */
static inline __m256 exp8(__m256 x) {
    __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(KEXP_MIN), _CMP_LT_OQ); /* -> 0 */
    x = _mm256_min_ps(x, _mm256_set1_ps(KEXP_MAX));
    x = _mm256_max_ps(x, _mm256_set1_ps(KEXP_MIN));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(KEXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(KEXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(KEXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(KEXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KEXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KEXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KEXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KEXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KEXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

float kern_dot_avx2(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

void kern_axpy_avx2(float *y, float a, const float *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* Four query vectors a[q*n] at a time against each row: the row is read once
 * for the four of them. */
void kern_dot_heads_avx2(float *out, size_t ld, const float *a, int n_a, const float *b,
                         size_t stride, int m, int n) {
    int h = 0;
    for (; n % 16 == 0 && h + 4 <= n_a; h += 4) {
        const float *aq = a + (size_t)h * n;
        for (int i = 0; i < m; i++) {
            const float *r = b + (size_t)i * stride;
            __m256 s0[4], s1[4];
            for (int q = 0; q < 4; q++) s0[q] = s1[q] = _mm256_setzero_ps();
            for (int k = 0; k < n; k += 16) {
                __m256 b0 = _mm256_loadu_ps(r + k), b1 = _mm256_loadu_ps(r + k + 8);
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) {
                    s0[q] = _mm256_fmadd_ps(_mm256_loadu_ps(aq + (size_t)q * n + k), b0, s0[q]);
                    s1[q] = _mm256_fmadd_ps(_mm256_loadu_ps(aq + (size_t)q * n + k + 8), b1, s1[q]);
                }
            }
            float o[4];
            for (int q = 0; q < 4; q++) s0[q] = _mm256_add_ps(s0[q], s1[q]);
            hsum8x4(s0, o);
            for (int q = 0; q < 4; q++) out[(size_t)(h + q) * ld + i] = o[q];
        }
    }
    for (; h < n_a; h++)
        kern_dot_rows_avx2(out + (size_t)h * ld, a + (size_t)h * n, b, stride, m, n);
}

/* Four rows at a time: the same two accumulators per row as kern_dot_avx2,
 * and its horizontal sum (low + high half, then (0+2) + (1+3)) done for the
 * four rows together. n not a multiple of 16 goes row by row. */
void kern_dot_rows_avx2(float *out, const float *a, const float *b, size_t stride, int m, int n) {
    int i = 0;
    for (; n % 16 == 0 && i + 4 <= m; i += 4) {
        const float *r[4];
        __m256 s0[4], s1[4];
        for (int q = 0; q < 4; q++) {
            r[q] = b + (size_t)(i + q) * stride;
            s0[q] = s1[q] = _mm256_setzero_ps();
        }
        for (int k = 0; k < n; k += 16) {
            __m256 a0 = _mm256_loadu_ps(a + k), a1 = _mm256_loadu_ps(a + k + 8);
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                s0[q] = _mm256_fmadd_ps(a0, _mm256_loadu_ps(r[q] + k), s0[q]);
                s1[q] = _mm256_fmadd_ps(a1, _mm256_loadu_ps(r[q] + k + 8), s1[q]);
            }
        }
        for (int q = 0; q < 4; q++) s0[q] = _mm256_add_ps(s0[q], s1[q]);
        hsum8x4(s0, out + i);
    }
    for (; i < m; i++) out[i] = kern_dot_avx2(a, b + (size_t)i * stride, n);
}

/* y stays in registers, 64 floats at a time, while the rows go by: the same
 * FMA per element and row, in row order, as one kern_axpy_avx2 per row. */
void kern_axpy_rows_avx2(float *y, const float *a, const float *x, size_t stride, int m, int n) {
    int c = 0;
    for (; n % 8 == 0 && c + 64 <= n; c += 64) {
        __m256 acc[8];
        for (int v = 0; v < 8; v++) acc[v] = _mm256_loadu_ps(y + c + 8 * v);
        for (int i = 0; i < m; i++) {
            __m256 va = _mm256_set1_ps(a[i]);
            const float *r = x + (size_t)i * stride + c;
#pragma GCC unroll 8
            for (int v = 0; v < 8; v++)
                acc[v] = _mm256_fmadd_ps(va, _mm256_loadu_ps(r + 8 * v), acc[v]);
        }
        for (int v = 0; v < 8; v++) _mm256_storeu_ps(y + c + 8 * v, acc[v]);
    }
    if (c < n)
        for (int i = 0; i < m; i++) kern_axpy_avx2(y + c, a[i], x + (size_t)i * stride + c, n - c);
}

void kern_scale_avx2(float *y, float a, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] *= a;
}

void kern_add_avx2(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

void kern_rmsnorm_avx2(float *out, const float *x, const float *w, int n, float eps) {
    __m256 s0 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        s0 = _mm256_fmadd_ps(v, v, s0);
    }
    float ss = hsum8(s0);
    for (; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    __m256 vi = _mm256_set1_ps(inv);
    i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vi);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(out + i, v);
    }
    for (; i < n; i++) out[i] = x[i] * inv * (w ? w[i] : 1.0f);
}

/* kern_argmax: the maximum in four accumulators (max(x, acc) keeps acc
 * where x is NaN), then the first index equal to it, eight at a time. Over
 * a 128k vocabulary 13-18 us where the scalar loops took 26-70. */
int kern_argmax_avx2(const float *x, int n) {
    __m256 m4[4];
    for (int a = 0; a < 4; a++) m4[a] = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int a = 0; a < 4; a++) m4[a] = _mm256_max_ps(_mm256_loadu_ps(x + i + 8 * a), m4[a]);
    for (; i + 8 <= n; i += 8) m4[0] = _mm256_max_ps(_mm256_loadu_ps(x + i), m4[0]);
    float mx = hmax8(_mm256_max_ps(_mm256_max_ps(m4[0], m4[1]), _mm256_max_ps(m4[2], m4[3])));
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    const __m256 vm = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return 0;
}

int kern_rope_avx2(float *x, const float *cos, const float *sin, int dim, bool interleaved) {
    int half = dim / 2, i = 0;
    if (!interleaved) { /* pairs (i, i + half): eight at a time */
        for (; i + 8 <= half; i += 8) {
            __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + half);
            __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i);
            _mm256_storeu_ps(x + i, _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s)));
            _mm256_storeu_ps(x + i + half,
                             _mm256_add_ps(_mm256_mul_ps(x0, s), _mm256_mul_ps(x1, c)));
        }
        return i;
    }
    /* pairs (2i, 2i + 1), four at a time: even lanes x0 c - x1 s, odd lanes
     * x1 c + x0 s (the scalar sum's terms swapped: the same rounding) */
    for (; i + 4 <= half; i += 4) {
        __m256 v = _mm256_loadu_ps(x + 2 * i), sw = _mm256_permute_ps(v, 0xb1);
        __m128 c4 = _mm_loadu_ps(cos + i), s4 = _mm_loadu_ps(sin + i);
        __m256 c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
        __m256 s = _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4));
        _mm256_storeu_ps(x + 2 * i, _mm256_addsub_ps(_mm256_mul_ps(v, c), _mm256_mul_ps(sw, s)));
    }
    return i;
}

void kern_softmax_avx2(float *x, int n, float scale) {
    int i = 0;
    __m256 vm = _mm256_set1_ps(-INFINITY), vsc = _mm256_set1_ps(scale);
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_mul_ps(_mm256_loadu_ps(x + i), vsc));
    float m = hmax8(vm);
    for (; i < n; i++) m = fmaxf(m, x[i] * scale);
    __m256 mm = _mm256_set1_ps(m), vs = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vsc), mm));
        _mm256_storeu_ps(x + i, e);
        vs = _mm256_add_ps(vs, e);
    }
    float s = hsum8(vs);
    for (; i < n; i++) {
        x[i] = expf(x[i] * scale - m);
        s += x[i];
    }
    kern_scale_avx2(x, 1.0f / s, n);
}

void kern_silu_mul_avx2(float *out, const float *gate, const float *up, int n) {
    int i = 0;
    __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
        __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void kern_row_bf16_avx2(float *out, const uint16_t *row, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + i)));
        _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    for (; i < n; i++) out[i] = kern_bf16_to_f32(row[i]);
}

/* kern_round_bf16's bits, eight at a time: nearest even, NaN kept quiet. */
void kern_round_bf16_avx2(float *dst, const float *src, size_t n) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i quiet = _mm256_set1_epi32(0x400000), hi = _mm256_set1_epi32((int)0xffff0000u);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
        __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(half, odd));
        r = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), nan);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_and_si256(r, hi));
    }
    if (i < n) kern_round_bf16_scalar(dst + i, src + i, n - i);
}
