/* gemm_avx2.c — blocked AVX2/FMA GEMM for prefill (large n), every dtype.
 *
 * y (n x M) = x (n x K) * W^T, W row-major M x K. FLOP-bound, so it is laid
 * out for reuse: weight panels of 16 rows x KC columns are converted to f32
 * and transposed once ([k][16], so one k is two vector loads), a group of
 * GEMM_NCP panels stays in L2 while a block of GEMM_NT tokens streams past it,
 * and a 6-token x 16-row register tile (12 accumulators, 6 broadcasts and 2
 * loads per k) does the FMAs (on AVX-512 CPUs gemm_avx512.c's 12-token x
 * 32-row tile, same arithmetic). Threads split the output rows in whole panels.
 *
 * Reduction order per output element: sequential over k inside each KC block,
 * blocks added to y in order, starting from the bias. It depends on K only,
 * never on n, the thread count or where a token sits in the batch.
 *
 * Small n (decode) takes a second path in exactly that order, so that
 * batch-invariant mode can run every n through this file: packing a panel
 * for one or two tokens costs more than the FMAs it feeds. Lanes still run
 * across 8 rows and k stays sequential, but each 8-row x 8-column tile is
 * widened and transposed in registers (bf16 by 16-bit unpacks, the widening
 * falling out of the last unpack against zero) and multiplied at once; two
 * row groups and up to four tokens (bf16: one group, up to eight tokens) are
 * in flight so the per-element FMA chains overlap. Above GEMV_MAX_N tokens
 * (GEMV_MAX_N_AVX512 with the AVX-512 tile) packing pays for itself. A
 * bf16 matrix with a copy packed once (panels_avx2.c) runs up to
 * KERN_GEMM_MIN_N tokens on that instead, and here has its panels widened
 * from it. */
#include "kernels/kern_internal.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define GEMM_MR  6                 /* tokens per register tile */
#define GEMM_NR  16                /* weight rows per panel / register tile */
#define GEMM_KC  KERN_GEMM_AVX2_KC /* columns per K block */
#define GEMM_NCP 4                 /* panels per L2-resident group (64 rows) */
/* Tokens per block: each block goes through every panel group, so a group's
 * outputs for it (64 rows x 512 tokens, 128 KiB) stay in L2 from one K
 * block to the next rather than all n tokens' (the panels are packed once
 * per block). llama-1b's four shapes: int8 weights 355-360 against 319-324
 * GFLOP/s at 2048 tokens, 361 against 303-316 at 4096; f32 356-358 against
 * 326-333 at 2048. 128 and 256 tokens per block did less. */
#define GEMM_NT    512
#define GEMV_G     2 /* small n: 8-row groups in flight (16 rows per block) */
#define GEMV_T     8 /* small n: tokens per pass over a block (bf16; else 4) */
#define GEMV_MAX_N 8 /* small-n path up to this many tokens */
/* ... with the AVX-512 tile, which packs and multiplies so much faster that
 * from 5 tokens on the packed GEMM streamed the weights faster: at 8 tokens,
 * 1.5x (batch-invariant decode of the llama-1b matrices, from memory) */
#define GEMV_MAX_N_AVX512 4
#define GEMV_PF           512 /* small n, bf16: columns prefetched ahead */
#define GEMV_KS           32  /* small n: columns per step (a row's cache line of bf16) */

#define AI static inline __attribute__((always_inline))

/* Runs CALL(dt) with dt the matrix dtype as a constant, so each always-inline
 * loop is compiled once per dtype. */
#define BY_DTYPE(dtype, CALL)                                                                      \
    switch (dtype) {                                                                               \
    case KT_F32:                                                                                   \
        CALL(KT_F32);                                                                              \
        break;                                                                                     \
    case KT_BF16:                                                                                  \
        CALL(KT_BF16);                                                                             \
        break;                                                                                     \
    case KT_F16:                                                                                   \
        CALL(KT_F16);                                                                              \
        break;                                                                                     \
    case KT_I8:                                                                                    \
        CALL(KT_I8);                                                                               \
        break;                                                                                     \
    }

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
 * rows past the matrix are zero. A bf16 matrix with a packed copy (the
 * AVX2 layout: bf16 goes elsewhere where AVX-512 BF16 runs) is read from
 * that alone. */
static void pack_panel(float *dst, const kern_mat *W, int r0, int k0, int kc) {
    if (W->dtype == KT_BF16 && W->panels) {
        kern_bf16_copy_panel_avx2(dst, W, r0, k0, kc);
        return;
    }
    int kc8 = kc & ~7;
    for (int h = 0; h < 2; h++) {
        int rb = r0 + 8 * h;
        int valid = W->rows - rb;
        if (valid > 8) valid = 8;
        if (valid == 8) {
#define PACK(dt) pack8_rows(dst, W, rb, k0, kc8, h, dt)
            BY_DTYPE(W->dtype, PACK);
#undef PACK
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
    kern_start_rows(j->y, n, M, j->bias, r_lo, r_hi);
    float *pack =
        kern_scratch(KERN_SCRATCH_PANEL, (size_t)GEMM_NCP * GEMM_KC * GEMM_NR * sizeof(float));
    bool wide = kern_use_avx512(); /* AVX-512 tiles: up to 12 tokens x 2 panels */
    int mr_max = wide ? KERN_GEMM512_MR : GEMM_MR;
    size_t pstride = (size_t)GEMM_KC * GEMM_NR;
    float tmp[KERN_GEMM512_MR * GEMM_NR];
    int blocks = (n + GEMM_NT - 1) / GEMM_NT;
    for (int b = 0; b < blocks; b++) {
        int t_lo, t_hi;
        kern_split(n, 1, b, blocks, &t_lo, &t_hi);
        for (int g0 = p_lo; g0 < p_hi; g0 += GEMM_NCP) {
            int np = p_hi - g0 < GEMM_NCP ? p_hi - g0 : GEMM_NCP;
            for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
                int kc = K - k0 < GEMM_KC ? K - k0 : GEMM_KC;
                for (int pi = 0; pi < np; pi++)
                    pack_panel(pack + (size_t)pi * pstride, W, (g0 + pi) * GEMM_NR, k0, kc);
                for (int t0 = t_lo; t0 < t_hi; t0 += mr_max) {
                    int mr = t_hi - t0 < mr_max ? t_hi - t0 : mr_max;
                    const float *xt = j->x + (size_t)t0 * K + k0;
                    for (int pi = 0; pi < np; pi++) {
                        const float *pw = pack + (size_t)pi * pstride;
                        int r0 = (g0 + pi) * GEMM_NR;
                        float *c = j->y + (size_t)t0 * M + r0;
                        if (r0 + GEMM_NR <= M) {
                            int two = wide && pi + 1 < np && r0 + 2 * GEMM_NR <= M;
                            if (wide)
                                kern_gemm_tile_avx512(pw, pstride, 1 + two, xt, (size_t)K, kc, c,
                                                      (size_t)M, mr);
                            else
                                micro_any(pw, xt, (size_t)K, kc, c, (size_t)M, mr);
                            pi += two;
                            continue;
                        }
                        int vr = M - r0; /* last, partial panel: go through a 16-wide copy */
                        for (int i = 0; i < mr; i++)
                            for (int q = 0; q < GEMM_NR; q++)
                                tmp[i * GEMM_NR + q] = q < vr ? c[(size_t)i * M + q] : 0.0f;
                        if (wide)
                            kern_gemm_tile_avx512(pw, pstride, 1, xt, (size_t)K, kc, tmp, GEMM_NR,
                                                  mr);
                        else
                            micro_any(pw, xt, (size_t)K, kc, tmp, GEMM_NR, mr);
                        for (int i = 0; i < mr; i++)
                            for (int q = 0; q < vr; q++)
                                c[(size_t)i * M + q] = tmp[i * GEMM_NR + q];
                    }
                }
            }
        }
    }
}

/* ---- small n: the same order without packing ----------------------------- */

/* Rows [rb, rb+8) x columns [k, k+8) of a bf16 matrix as f32, transposed:
 * v[i] holds column k+i of the 8 rows. Rows i and i+4 share a vector (low and
 * high 128-bit lanes), so the 16-bit unpacks within lanes gather each
 * column's rows in order, and unpacking against zero puts each bf16 in the
 * top half of a 32-bit lane: its f32 value. */
AI void tile_bf16(const uint16_t *w, size_t K, __m256 v[8]) {
    __m256i a[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        a[i] = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(w + (size_t)i * K))),
            _mm_loadu_si128((const __m128i *)(w + (size_t)(i + 4) * K)), 1);
    __m256i b0 = _mm256_unpacklo_epi16(a[0], a[1]), b1 = _mm256_unpackhi_epi16(a[0], a[1]);
    __m256i b2 = _mm256_unpacklo_epi16(a[2], a[3]), b3 = _mm256_unpackhi_epi16(a[2], a[3]);
    __m256i c[4] = {_mm256_unpacklo_epi32(b0, b2), _mm256_unpackhi_epi32(b0, b2),
                    _mm256_unpacklo_epi32(b1, b3), _mm256_unpackhi_epi32(b1, b3)};
    const __m256i z = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        v[2 * i] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, c[i]));
        v[2 * i + 1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, c[i]));
    }
}

/* The same tile for any dtype and any rows: v[i] lane q is the f32 weight of
 * row rb+q (0 past the matrix) at column k+i, as pack_panel computes it. */
AI void tile_any(const kern_mat *W, int rb, int k, int nk, __m256 v[8], const kern_dtype dt) {
    size_t K = (size_t)W->cols;
    if (rb + 8 <= W->rows && nk == 8) {
        if (dt == KT_BF16) {
            tile_bf16((const uint16_t *)W->data + (size_t)rb * K + k, K, v);
            return;
        }
        __m256 sc = _mm256_setzero_ps();
        int g = W->group > 0 ? W->group : W->cols;
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            size_t at = (size_t)(rb + i) * K + (size_t)k;
            if (dt == KT_F32) {
                v[i] = _mm256_loadu_ps((const float *)W->data + at);
            } else if (dt == KT_F16) {
                v[i] = _mm256_cvtph_ps(
                    _mm_loadu_si128((const __m128i *)((const uint16_t *)W->data + at)));
            } else {
                sc = _mm256_set1_ps(W->scales[(size_t)(rb + i) * (W->cols / g) + k / g]);
                __m128i b = _mm_loadl_epi64((const __m128i *)((const int8_t *)W->data + at));
                v[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), sc);
            }
        }
        transpose8(v);
        return;
    }
    for (int i = 0; i < 8; i++) {
        float f[8];
        for (int q = 0; q < 8; q++)
            f[q] = i < nk && rb + q < W->rows ? w_load1(W, rb + q, k + i) : 0.0f;
        v[i] = _mm256_loadu_ps(f);
    }
}

/* Rows [r0, r0 + 8*G) (the last group may be partial) against tokens
 * [t0, t0+T) over columns [k0, k0+kc): each token's sums for the block, added
 * onto y in the GEMM's order. Per step of GEMV_KS columns, every tile is
 * widened and transposed into v (L1) first, then the FMAs are issued with the
 * groups' chains interleaved (chain after chain, dependent FMAs fill the
 * scheduler and run one at a time). A row's GEMV_KS columns are one cache
 * line, used up at once: rows K apart share L1 sets, and rows revisited over
 * several steps would evict each other (more groups in flight measured
 * slower for the same reason). The common case (all GEMV_G
 * groups whole, kc a multiple of GEMV_KS) is compiled apart from the edges. */
AI void gemv_block(const gemm_job *j, int r0, const int G, int t0, const int T, int k0, int kc,
                   const kern_dtype dt, const bool whole) {
    const kern_mat *W = j->W;
    int K = W->cols, M = W->rows;
    const float *x = j->x + (size_t)t0 * K;
    __m256 acc[GEMV_G][GEMV_T];
    __m256 v[GEMV_G][GEMV_KS];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) acc[g][t] = _mm256_setzero_ps();
    for (int k = k0; k < k0 + kc; k += GEMV_KS) {
        int nk = whole ? GEMV_KS : (k0 + kc - k < GEMV_KS ? k0 + kc - k : GEMV_KS);
        if (whole && dt == KT_BF16) {
            /* 16 rows stream at once, more than the hardware prefetcher
             * follows: fetch each row GEMV_PF columns ahead, and past the
             * row's end the next block's rows */
            const uint16_t *w0 = (const uint16_t *)W->data;
            size_t ahead = (size_t)k + GEMV_PF, rb = (size_t)r0;
            if (ahead >= (size_t)K) ahead -= (size_t)K, rb += 8 * GEMV_G;
            if (rb + 8 * GEMV_G <= (size_t)M)
                for (int r = 0; r < 8 * GEMV_G; r++)
                    _mm_prefetch((const char *)(w0 + (rb + r) * K + ahead), _MM_HINT_T0);
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int q = 0; q < GEMV_KS; q += 8) {
                if (!whole && q >= nk) break;
                if (whole && dt == KT_BF16)
                    tile_bf16((const uint16_t *)W->data + (size_t)(r0 + 8 * g) * K + k + q,
                              (size_t)K, v[g] + q);
                else
                    tile_any(W, r0 + 8 * g, k + q, nk - q < 8 ? nk - q : 8, v[g] + q, dt);
            }
#pragma GCC unroll 8
        for (int i = 0; i < nk; i++) {
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                __m256 b = _mm256_broadcast_ss(x + (size_t)t * K + k + i);
#pragma GCC unroll 4
                for (int g = 0; g < G; g++) acc[g][t] = _mm256_fmadd_ps(v[g][i], b, acc[g][t]);
            }
        }
    }
    for (int g = 0; g < G; g++)
        for (int t = 0; t < T; t++) {
            float *c = j->y + (size_t)(t0 + t) * M + r0 + 8 * g;
            int vr = M - (r0 + 8 * g);
            if (vr >= 8) {
                _mm256_storeu_ps(c, _mm256_add_ps(_mm256_loadu_ps(c), acc[g][t]));
                continue;
            }
            float a[8];
            _mm256_storeu_ps(a, acc[g][t]);
            for (int q = 0; q < vr; q++) c[q] += a[q];
        }
}

/* Edge blocks (a partial row group, or kc not a multiple of GEMV_KS). */
static void gemv_block_edge(const gemm_job *j, int r0, int G, int t0, int T, int k0, int kc) {
#define EDGE(dt) gemv_block(j, r0, G, t0, T, k0, kc, dt, false)
    BY_DTYPE(j->W->dtype, EDGE);
#undef EDGE
}

/* Whole blocks: up to 4 tokens with both row groups in flight; bf16 with more
 * tokens runs each group on its own with all of them (enough chains, and the
 * tiles are transposed once for every token). */
static void gemv_block_whole(const gemm_job *j, int r0, int t0, int T, int k0, int kc) {
    if (j->W->dtype == KT_BF16 && T > 4) {
        for (int g = 0; g < GEMV_G; g++) {
            int r = r0 + 8 * g;
            switch (T) {
            case 5:
                gemv_block(j, r, 1, t0, 5, k0, kc, KT_BF16, true);
                break;
            case 6:
                gemv_block(j, r, 1, t0, 6, k0, kc, KT_BF16, true);
                break;
            case 7:
                gemv_block(j, r, 1, t0, 7, k0, kc, KT_BF16, true);
                break;
            default:
                gemv_block(j, r, 1, t0, 8, k0, kc, KT_BF16, true);
                break;
            }
        }
        return;
    }
#define GEMV_DT(dt)                                                                                \
    (T == 4   ? gemv_block(j, r0, GEMV_G, t0, 4, k0, kc, dt, true)                                 \
     : T == 3 ? gemv_block(j, r0, GEMV_G, t0, 3, k0, kc, dt, true)                                 \
     : T == 2 ? gemv_block(j, r0, GEMV_G, t0, 2, k0, kc, dt, true)                                 \
              : gemv_block(j, r0, GEMV_G, t0, 1, k0, kc, dt, true))
    BY_DTYPE(j->W->dtype, GEMV_DT);
#undef GEMV_DT
}

static void gemv_task(void *ctx, int task, int n_tasks) {
    const gemm_job *j = ctx;
    int M = j->W->rows, K = j->W->cols, rows = 8 * GEMV_G;
    int lo, hi;
    kern_split(M, rows, task, n_tasks, &lo, &hi);
    kern_start_rows(j->y, j->n, M, j->bias, lo, hi);
    for (int r0 = lo; r0 < hi; r0 += rows) {
        int G = (hi - r0 + 7) / 8 < GEMV_G ? (hi - r0 + 7) / 8 : GEMV_G;
        for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
            int kc = K - k0 < GEMM_KC ? K - k0 : GEMM_KC;
            bool whole = G == GEMV_G && r0 + 8 * GEMV_G <= M && kc % GEMV_KS == 0;
            int step = whole && j->W->dtype == KT_BF16 ? GEMV_T : 4;
            for (int t0 = 0; t0 < j->n; t0 += step) {
                int T = j->n - t0 < step ? j->n - t0 : step;
                if (whole)
                    gemv_block_whole(j, r0, t0, T, k0, kc);
                else
                    gemv_block_edge(j, r0, G, t0, T, k0, kc);
            }
        }
    }
}

void kern_gemm_avx2(pool *p, float *y, const float *x, const kern_mat *W, const float *bias,
                    int n) {
    gemm_job j = {.W = W, .y = y, .x = x, .bias = bias, .n = n};
    j.n_panels = (W->rows + GEMM_NR - 1) / GEMM_NR;
    if (n <= (kern_use_avx512() ? GEMV_MAX_N_AVX512 : GEMV_MAX_N)) {
        /* several tasks per thread, so a late-waking worker does not leave
         * one thread with all the rows; small matrices stay on one thread */
        int blocks = (W->rows + 8 * GEMV_G - 1) / (8 * GEMV_G);
        int tasks = (double)W->rows * W->cols * n < 65536 ? 1 : pool_threads(p) * 4;
        pool_run(p, gemv_task, &j, tasks < blocks ? tasks : blocks);
        return;
    }
    int tasks = pool_threads(p) * 4;
    if (tasks > j.n_panels) tasks = j.n_panels;
    pool_run(p, gemm_task, &j, tasks);
}
