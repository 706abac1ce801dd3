/* gemm_avx2.c — blocked AVX2/FMA GEMM for prefill (large n), every dtype.
 *
 * y (n x M) = x (n x K) * W^T, W row-major M x K. FLOP-bound, so it is laid
 * out for reuse: weight panels of 16 rows x KC columns are converted to f32
 * and transposed once ([k][16], so one k is two vector loads), a group of
 * GEMM_NCP panels stays in L2 while every token of the call streams past it,
 * and a 6-token x 16-row register tile (12 accumulators, 6 broadcasts and 2
 * loads per k) does the FMAs. Threads split the output rows in whole panels.
 *
 * Reduction order per output element: sequential over k inside each KC block,
 * blocks added to y in order, starting from the bias. It depends on K only,
 * never on the thread count (it does depend on using this kernel at all,
 * which is why batch-invariant mode does not). */
#include "kernels/kern_internal.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define GEMM_MR  6   /* tokens per register tile */
#define GEMM_NR  16  /* weight rows per panel / register tile */
#define GEMM_KC  256 /* columns per K block */
#define GEMM_NCP 8   /* panels per L2-resident group (128 rows) */

#define AI static inline __attribute__((always_inline))

typedef struct gemm_job {
    const kern_mat *W;
    float *y;
    const float *x;
    const float *bias;
    int n;
    int n_panels;
} gemm_job;

static float w_load1(const kern_mat *W, int r, int k) {
    size_t i = (size_t)r * W->cols + k;
    switch (W->dtype) {
    case KT_F32:
        return ((const float *)W->data)[i];
    case KT_BF16:
        return kern_bf16_to_f32(((const uint16_t *)W->data)[i]);
    case KT_F16:
        return kern_f16_to_f32(((const uint16_t *)W->data)[i]);
    case KT_I8: {
        int g = W->group > 0 ? W->group : W->cols;
        return (float)((const int8_t *)W->data)[i] * W->scales[(size_t)r * (W->cols / g) + k / g];
    }
    }
    return 0;
}

/* In-register 8x8 transpose of r[0..7]. */
AI void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Packs 8 full rows [rb, rb+8) x columns [k0, k0+kc8) (kc8 % 8 == 0) into
 * dst[k][16] at column offset 8*h, as f32: 8x8 tiles converted then
 * transposed in registers. dt is a constant after inlining. */
AI void pack8_rows(float *dst, const kern_mat *W, int rb, int k0, int kc8, int h,
                   const kern_dtype dt) {
    size_t K = (size_t)W->cols;
    int g = W->group > 0 ? W->group : W->cols, gend = -1;
    __m256 sc[8];
    for (int k = 0; k < kc8; k += 8) {
        __m256 v[8];
        size_t base = (size_t)rb * K + (size_t)(k0 + k);
        if (dt == KT_I8 && k0 + k >= gend) { /* entering a new scale group */
            int gi = (k0 + k) / g, ng = W->cols / g;
            gend = (gi + 1) * g;
            for (int i = 0; i < 8; i++)
                sc[i] = _mm256_set1_ps(W->scales[(size_t)(rb + i) * ng + gi]);
        }
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            size_t at = base + (size_t)i * K;
            if (dt == KT_F32) {
                v[i] = _mm256_loadu_ps((const float *)W->data + at);
            } else if (dt == KT_BF16) {
                __m128i b = _mm_loadu_si128((const __m128i *)((const uint16_t *)W->data + at));
                v[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
            } else if (dt == KT_F16) {
                v[i] = _mm256_cvtph_ps(
                    _mm_loadu_si128((const __m128i *)((const uint16_t *)W->data + at)));
            } else {
                __m128i b = _mm_loadl_epi64((const __m128i *)((const int8_t *)W->data + at));
                v[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), sc[i]);
            }
        }
        transpose8(v);
        for (int i = 0; i < 8; i++) _mm256_store_ps(dst + (size_t)(k + i) * 16 + 8 * h, v[i]);
    }
}

/* Packs rows [r0, r0+16) x columns [k0, k0+kc) into dst[k][16] as f32;
 * rows past the matrix are zero. */
static void pack_panel(float *dst, const kern_mat *W, int r0, int k0, int kc) {
    int kc8 = kc & ~7;
    for (int h = 0; h < 2; h++) {
        int rb = r0 + 8 * h;
        int valid = W->rows - rb;
        if (valid > 8) valid = 8;
        if (valid == 8) {
            switch (W->dtype) {
            case KT_F32:
                pack8_rows(dst, W, rb, k0, kc8, h, KT_F32);
                break;
            case KT_BF16:
                pack8_rows(dst, W, rb, k0, kc8, h, KT_BF16);
                break;
            case KT_F16:
                pack8_rows(dst, W, rb, k0, kc8, h, KT_F16);
                break;
            case KT_I8:
                pack8_rows(dst, W, rb, k0, kc8, h, KT_I8);
                break;
            }
        } else {
            for (int k = 0; k < kc8; k++)
                for (int i = 0; i < 8; i++)
                    dst[(size_t)k * 16 + 8 * h + i] = i < valid ? w_load1(W, rb + i, k0 + k) : 0.0f;
        }
        for (int k = kc8; k < kc; k++)
            for (int i = 0; i < 8; i++)
                dst[(size_t)k * 16 + 8 * h + i] = i < valid ? w_load1(W, rb + i, k0 + k) : 0.0f;
    }
}

/* c[i][0..16) += sum_k x[i][k] * pw[k][0..16) for i < MR tokens. */
AI void micro(const float *pw, const float *x, size_t ldx, int kc, float *c, size_t ldc,
              const int MR) {
    __m256 acc[GEMM_MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int k = 0; k < kc; k++) {
        __m256 w0 = _mm256_load_ps(pw + (size_t)k * 16),
               w1 = _mm256_load_ps(pw + (size_t)k * 16 + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            __m256 xb = _mm256_broadcast_ss(x + i * ldx + k);
            acc[i][0] = _mm256_fmadd_ps(w0, xb, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(w1, xb, acc[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        _mm256_storeu_ps(c + i * ldc, _mm256_add_ps(_mm256_loadu_ps(c + i * ldc), acc[i][0]));
        _mm256_storeu_ps(c + i * ldc + 8,
                         _mm256_add_ps(_mm256_loadu_ps(c + i * ldc + 8), acc[i][1]));
    }
}

static void micro_any(const float *pw, const float *x, size_t ldx, int kc, float *c, size_t ldc,
                      int mr) {
    switch (mr) {
    case 6:
        micro(pw, x, ldx, kc, c, ldc, 6);
        break;
    case 5:
        micro(pw, x, ldx, kc, c, ldc, 5);
        break;
    case 4:
        micro(pw, x, ldx, kc, c, ldc, 4);
        break;
    case 3:
        micro(pw, x, ldx, kc, c, ldc, 3);
        break;
    case 2:
        micro(pw, x, ldx, kc, c, ldc, 2);
        break;
    default:
        micro(pw, x, ldx, kc, c, ldc, 1);
        break;
    }
}

static void gemm_task(void *ctx, int task, int n_tasks) {
    const gemm_job *j = ctx;
    const kern_mat *W = j->W;
    int M = W->rows, K = W->cols, n = j->n;
    int p_lo, p_hi;
    kern_split(j->n_panels, 1, task, n_tasks, &p_lo, &p_hi);
    if (p_lo >= p_hi) return;
    int r_lo = p_lo * GEMM_NR, r_hi = p_hi * GEMM_NR < M ? p_hi * GEMM_NR : M;
    for (int t = 0; t < n; t++) {
        float *yt = j->y + (size_t)t * M;
        if (j->bias)
            memcpy(yt + r_lo, j->bias + r_lo, (size_t)(r_hi - r_lo) * sizeof(float));
        else
            memset(yt + r_lo, 0, (size_t)(r_hi - r_lo) * sizeof(float));
    }
    float *pack = aligned_alloc(64, (size_t)GEMM_NCP * GEMM_KC * GEMM_NR * sizeof(float));
    if (!pack) abort();
    float tmp[GEMM_MR * GEMM_NR];
    for (int g0 = p_lo; g0 < p_hi; g0 += GEMM_NCP) {
        int np = p_hi - g0 < GEMM_NCP ? p_hi - g0 : GEMM_NCP;
        for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
            int kc = K - k0 < GEMM_KC ? K - k0 : GEMM_KC;
            for (int pi = 0; pi < np; pi++)
                pack_panel(pack + (size_t)pi * GEMM_KC * GEMM_NR, W, (g0 + pi) * GEMM_NR, k0, kc);
            for (int t0 = 0; t0 < n; t0 += GEMM_MR) {
                int mr = n - t0 < GEMM_MR ? n - t0 : GEMM_MR;
                const float *xt = j->x + (size_t)t0 * K + k0;
                for (int pi = 0; pi < np; pi++) {
                    const float *pw = pack + (size_t)pi * GEMM_KC * GEMM_NR;
                    int r0 = (g0 + pi) * GEMM_NR;
                    float *c = j->y + (size_t)t0 * M + r0;
                    if (r0 + GEMM_NR <= M) {
                        micro_any(pw, xt, (size_t)K, kc, c, (size_t)M, mr);
                        continue;
                    }
                    int vr = M - r0; /* last, partial panel: go through a 16-wide copy */
                    for (int i = 0; i < mr; i++)
                        for (int q = 0; q < GEMM_NR; q++)
                            tmp[i * GEMM_NR + q] = q < vr ? c[(size_t)i * M + q] : 0.0f;
                    micro_any(pw, xt, (size_t)K, kc, tmp, GEMM_NR, mr);
                    for (int i = 0; i < mr; i++)
                        for (int q = 0; q < vr; q++) c[(size_t)i * M + q] = tmp[i * GEMM_NR + q];
                }
            }
        }
    }
    free(pack);
}

void kern_gemm_avx2(pool *p, float *y, const float *x, const kern_mat *W, const float *bias,
                    int n) {
    gemm_job j = {.W = W, .y = y, .x = x, .bias = bias, .n = n};
    j.n_panels = (W->rows + GEMM_NR - 1) / GEMM_NR;
    int tasks = pool_threads(p) * 4;
    if (tasks > j.n_panels) tasks = j.n_panels;
    pool_run(p, gemm_task, &j, tasks);
}
