/* matmul_bf16_avx512.c — the bf16 matmul at every n on CPUs with AVX-512
 * BF16 (Zen 4 and later, Sapphire Rapids and later): bf16 weights times
 * activations rounded to bf16, by vdpbf16ps.
 *
 * Numerics. A bf16 matmul multiplies bf16 weights by activations rounded to
 * bf16 (to nearest even, kern_round_bf16), the products exact in f32 and
 * summed in f32 — what a bf16 model computes on accelerators, and what the
 * other paths compute too (kern_matmul rounds the activations for them). So
 * this path differs from them only in the order of the sums. vdpbf16ps does
 * two of those products per 32-bit lane, 32 per instruction: twice the
 * arithmetic of an f32 FMA with no widening of the weights, which is what
 * batched decode and prefill are bound by.
 *
 * The kernels, by n:
 *   one token: in plain mode the rows one after another, one sequential
 *     stream per thread; per row the 32-column steps summed in four
 *     accumulators in turn, then added pairwise and reduced (below; rows
 *     of up to 128 columns sixteen at a time, to the same bits). In
 *     batch-invariant mode the GEMM's panels, packed once when the mode
 *     went on (kern_pack_panels, below), or where a matrix has no packed
 *     copy 16 rows transposed into the lanes in registers as they stream in
 *     (matmul_bf16_inv1_avx512.c).
 *   a few tokens (2 to KERN_BF16_FEW_MAX): 16 lanes as 8 tokens x 2 pairs,
 *     in matmul_bf16_few_avx512.c.
 *   token lanes (KERN_BF16_FEW_MAX + 1 to TL_LANES_MAX tokens): lanes
 *     across the tokens, the weights broadcast in place, unpacked (below).
 *   packed GEMM (above TL_LANES_MAX tokens): panels of 16 rows packed as
 *     column pairs, lanes across the rows (below).
 * In plain mode each has its own order of the sums (the lanes and the GEMM
 * share one: per output the bias, then each block of DPG_KC columns summed
 * pair by pair in one chain and added in turn), which depends on the matrix
 * shape alone, not on the tile, the thread count or the token's place in
 * the batch. Batch-invariant mode gives every n one order, the few-token
 * kernel's lanes in blocks: per output the bias, then for each block of
 * KERN_BF16_GEMM_KC columns in turn, its even pairs (0, 2, 4, ... from the
 * block's start) summed in one chain and its odd pairs in another, the two
 * added, that sum added on. So batch-invariant decode runs the few-token
 * kernel at its plain speed (at 8 and 16 tokens 30 and 15 % less time
 * than the token lanes it took before, llama-1b's matrices); the lanes and
 * the GEMM, whose register tiles cannot hold both chains, park the even
 * one while the odd one runs (split), 5-7 % slower than their plain order
 * at 64 and 512 tokens. */
#include "kernels/kern_internal.h"
#include "kernels/hsum_avx512.h"
#include "kernels/load_avx512.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/transpose_avx512.h"

#pragma GCC push_options
#pragma GCC target("avx512bf16")

#define AI static inline __attribute__((always_inline))

typedef struct dp_job {
    const kern_mat *W;
    float *y;
    const uint16_t *xb; /* n x ldx bf16 activations, zero past the columns */
    size_t ldx;
    const float *bias;
    int n;
    int kb;     /* the GEMM's columns per block: DPG_KC, or an int8 weight group below it */
    bool split; /* each block's even and odd pairs in two chains (batch-invariant mode) */
} dp_job;

/* ---- the packed GEMM: above TL_LANES_MAX tokens ----------------------------- */
/* Blocked like gemm_avx2.c: panels of 16 rows x DPG_KC columns are packed as
 * column pairs ([pair][row], one 32-bit lane per row and pair, the layout
 * vdpbf16ps multiplies), a group of DPG_NCP panels stays in L2 while a block
 * of DPG_NT tokens passes, and a register tile of up to 12 tokens x 2
 * panels takes one broadcast pair of activations per token and pair of
 * columns. Each output starts from the bias, sums its pairs in order within
 * a column block (split: its even and its odd pairs) and adds each block's
 * sum in turn. */
#define DPG_KC      KERN_BF16_GEMM_KC             /* columns per block (256 pairs) */
#define DPG_NR      KERN_PANEL_ROWS               /* rows per panel */
#define DPG_NCP     8                             /* panels per L2-resident group */
#define DPG_MR      12                            /* tokens per register tile */
#define DPG_PSTRIDE ((size_t)DPG_KC / 2 * DPG_NR) /* u32 per packed panel */
_Static_assert(KERN_PANEL_GROUP_ROWS == DPG_NCP * DPG_NR, "packed panels: groups of 128 rows");

/* 32 int8 weights as bf16: integers of at most 8 bits, so exact. */
AI __m512i i8_to_bf16x32(const int8_t *p) {
    __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
    __m512 hi =
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 16))));
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* Element k of row i of W (bf16, or int8 as its bf16 value) as bf16 bits. */
AI uint16_t dpg_elt(const kern_mat *W, size_t i, size_t k, const bool i8) {
    if (!i8) return ((const uint16_t *)W->data)[i * (size_t)W->cols + k];
    return kern_f32_to_bf16((float)((const int8_t *)W->data)[i * (size_t)W->cols + k]);
}

/* Packs rows [r0, r0 + 16) x columns [k0, k0 + kc) into dst[pair][16]: 32
 * columns (16 pairs) of the 16 rows at a time, transposed in registers;
 * rows past the matrix and the column past an odd end are zero. With i8,
 * W's int8 weights, each widened to bf16 as it is loaded. */
AI void dpg_pack_any(uint32_t *dst, size_t qs, const kern_mat *W, int r0, int k0, int kc,
                     const bool i8) {
    int K = W->cols, np = (kc + 1) / 2, full = kc / 2, steps = kc / 32;
    int valid = W->rows - r0 < DPG_NR ? W->rows - r0 : DPG_NR;
    size_t at = (size_t)r0 * K + k0;  /* element of row r0, column k0 */
    for (int s = 0; s < steps; s++) { /* 32 columns (16 pairs) of the 16 rows */
        __m512i v[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            size_t e = at + (size_t)i * K + 32 * (size_t)s;
            v[i] = i >= valid ? _mm512_setzero_si512()
                   : i8       ? i8_to_bf16x32((const int8_t *)W->data + e)
                              : _mm512_loadu_si512((const uint16_t *)W->data + e);
        }
        transpose16_epi32(v);
        uint32_t *d = dst + (size_t)16 * s * qs;
#pragma GCC unroll 16
        for (int q = 0; q < 16; q++) _mm512_store_si512(d + (size_t)q * qs, v[q]);
    }
    for (int i = 0; i < DPG_NR; i++)
        for (int q = 16 * steps; q < np; q++) {
            uint32_t v = 0;
            if (i < valid) {
                size_t row = (size_t)r0 + i, k = (size_t)k0 + 2 * q;
                v = dpg_elt(W, row, k, i8);
                if (q < full) v |= (uint32_t)dpg_elt(W, row, k + 1, i8) << 16;
                /* else the odd end: the pair's second column is zero */
            }
            dst[(size_t)q * qs + i] = v;
        }
}

/* qs: u32 from one pair's 16 lanes to the next pair's (DPG_NR: the panel's
 * pairs back to back) */
static void dpg_pack(uint32_t *dst, size_t qs, const kern_mat *W, int r0, int k0, int kc) {
    if (W->dtype == KT_I8)
        dpg_pack_any(dst, qs, W, r0, k0, kc, true);
    else
        dpg_pack_any(dst, qs, W, r0, k0, kc, false);
}

/* Pairs q0, q0 + step, ... below npairs of x[i] times panel p onto
 * acc[i][p] (zeroed first), i < MR, p < NP: a block's one chain (step 1) or
 * one of its two (step 2). */
AI void dpg_chain(const uint32_t *pw, size_t pstride, const uint16_t *x, size_t ldx, int q0,
                  const int step, int npairs, __m512 acc[DPG_MR][2], const int MR, const int NP) {
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int q = q0; q < npairs; q += step) {
        __m512bh w0 = (__m512bh)_mm512_load_si512(pw + (size_t)q * DPG_NR);
        __m512bh w1 = NP > 1 ? (__m512bh)_mm512_load_si512(pw + pstride + (size_t)q * DPG_NR) : w0;
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            int32_t pair;
            memcpy(&pair, x + (size_t)i * ldx + 2 * q, 4);
            __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], w0, xb);
            if (NP > 1) acc[i][1] = _mm512_dpbf16_ps(acc[i][1], w1, xb);
        }
    }
}

/* c[i][16p .. 16p+16) = cin[i][16p ..] + the block's sum of x[i] times
 * panel p, i < MR, p < NP (cin is c, ld ldc, or for a first column block the
 * bias or zeros, ld 0: the outputs need no start of their own); m0, m1 mask
 * the panels' valid rows. With split, the even pairs' chain parked while the
 * odd pairs' runs (both at once would not fit in the registers), then the
 * two added; the one chain is 5-7 % faster, which plain mode keeps. */
AI void dpg_tile(const uint32_t *pw, size_t pstride, const uint16_t *x, size_t ldx, int npairs,
                 float *c, size_t ldc, const float *cin, size_t ldcin, const float *sv,
                 const int MR, const int NP, __mmask16 m0, __mmask16 m1, bool split) {
    __m512 acc[DPG_MR][2];
    _Alignas(64) float even[DPG_MR][2][DPG_NR];
    if (split) {
        dpg_chain(pw, pstride, x, ldx, 0, 2, npairs, acc, MR, NP);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
            for (int p = 0; p < NP; p++) _mm512_store_ps(even[i][p], acc[i][p]);
        dpg_chain(pw, pstride, x, ldx, 1, 2, npairs, acc, MR, NP);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
            for (int p = 0; p < NP; p++)
                acc[i][p] = _mm512_add_ps(_mm512_load_ps(even[i][p]), acc[i][p]);
    } else {
        dpg_chain(pw, pstride, x, ldx, 0, 1, npairs, acc, MR, NP);
    }
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int p = 0; p < NP; p++) {
            const float *in = cin + (size_t)i * ldcin + DPG_NR * p;
            __mmask16 m = p ? m1 : m0;
            __m512 v = _mm512_maskz_loadu_ps(m, in);
            v = sv ? _mm512_fmadd_ps(acc[i][p], _mm512_loadu_ps(sv + DPG_NR * p), v)
                   : _mm512_add_ps(v, acc[i][p]);
            _mm512_mask_storeu_ps(c + (size_t)i * ldc + DPG_NR * p, m, v);
        }
}

#define DPG_CASE(mr)                                                                               \
    case mr:                                                                                       \
        if (np > 1)                                                                                \
            dpg_tile(pw, pstride, x, ldx, npairs, c, ldc, cin, ldcin, sv, mr, 2, m0, m1, split);   \
        else                                                                                       \
            dpg_tile(pw, pstride, x, ldx, npairs, c, ldc, cin, ldcin, sv, mr, 1, m0, m1, split);   \
        break;

static void dpg_tile_any(const uint32_t *pw, size_t pstride, int np, const uint16_t *x, size_t ldx,
                         int npairs, float *c, size_t ldc, const float *cin, size_t ldcin,
                         const float *sv, int mr, __mmask16 m0, __mmask16 m1, bool split) {
    switch (mr) { /* constant sizes: the accumulators stay in registers */
        DPG_CASE(12)
        DPG_CASE(11)
        DPG_CASE(10)
        DPG_CASE(9)
        DPG_CASE(8)
        DPG_CASE(7)
        DPG_CASE(6)
        DPG_CASE(5)
        DPG_CASE(4)
        DPG_CASE(3)
        DPG_CASE(2)
        DPG_CASE(1)
    default:
        break;
    }
}

/* One token against NP panels at once: NP independent sums per chain
 * (S chains: 1, or 2 with split) where a tile of one token has S times two,
 * which wait on the dot products' latency. The same sums in the same order
 * as dpg_tile. Pair q of panel p at pw + q * qs + p * pstride (the GEMM's
 * pack: qs DPG_NR; packed panels: pstride DPG_NR, the pairs interleaved).
 * stream: the panels come from memory, each pair's lines prefetched a page
 * ahead (kern_stream_ahead, as the plain one-token rows do; without it the
 * packed panels streamed at 75 % of the read bandwidth, with it 90-97 %). */
AI void dpg_tile1(const uint32_t *pw, size_t pstride, size_t qs, const uint16_t *x, int npairs,
                  float *c, const float *cin, const float *sv, const int NP, const int S,
                  const __mmask16 *m, const bool stream) {
    __m512 acc[DPG_NCP][2];
#pragma GCC unroll 8
    for (int p = 0; p < NP; p++) acc[p][0] = acc[p][1] = _mm512_setzero_ps();
    for (int q = 0; q < npairs; q += S)
#pragma GCC unroll 2
        for (int e = 0; e < S; e++) { /* pair q + e onto chain e */
            if (q + e == npairs) break;
            int32_t pair;
            memcpy(&pair, x + 2 * (q + e), 4);
            __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
            const uint32_t *pq = pw + (size_t)(q + e) * qs;
            if (stream) kern_stream_ahead(pq, qs * sizeof(uint32_t));
#pragma GCC unroll 8
            for (int p = 0; p < NP; p++)
                acc[p][e] = _mm512_dpbf16_ps(
                    acc[p][e], (__m512bh)_mm512_load_si512(pq + (size_t)p * pstride), xb);
        }
#pragma GCC unroll 8
    for (int p = 0; p < NP; p++) {
        __m512 v = _mm512_maskz_loadu_ps(m[p], cin + DPG_NR * p);
        __m512 sum = S > 1 ? _mm512_add_ps(acc[p][0], acc[p][1]) : acc[p][0];
        v = sv ? _mm512_fmadd_ps(sum, _mm512_loadu_ps(sv + DPG_NR * p), v) : _mm512_add_ps(v, sum);
        _mm512_mask_storeu_ps(c + DPG_NR * p, m[p], v);
    }
}

static void dpg_tile1_any(const uint32_t *pw, size_t pstride, size_t qs, int np, const uint16_t *x,
                          int npairs, float *c, const float *cin, const float *sv,
                          const __mmask16 *m, bool split, bool stream) {
    switch (np) { /* constant counts: the sums stay in registers */
#define DPG1_CASE(k)                                                                               \
    case k:                                                                                        \
        if (split)                                                                                 \
            dpg_tile1(pw, pstride, qs, x, npairs, c, cin, sv, k, 2, m, stream);                    \
        else                                                                                       \
            dpg_tile1(pw, pstride, qs, x, npairs, c, cin, sv, k, 1, m, stream);                    \
        break;
        DPG1_CASE(8)
        DPG1_CASE(7)
        DPG1_CASE(6)
        DPG1_CASE(5)
        DPG1_CASE(4)
        DPG1_CASE(3)
        DPG1_CASE(2)
        DPG1_CASE(1)
#undef DPG1_CASE
    default:
        break;
    }
}

/* The valid rows of the panel at r0, as a mask. */
static __mmask16 dpg_rows(const kern_mat *W, int r0) {
    int v = W->rows - r0;
    return v >= DPG_NR ? (__mmask16)0xffff : v <= 0 ? 0 : (__mmask16)((1u << v) - 1);
}

/* ---- one token on packed panels (batch-invariant mode) ------------------- */
/* kern_pack_panels lays a bf16 matrix out as the GEMM's panels, packed once
 * when batch-invariant mode goes on, so that its decode streams them instead
 * of transposing the rows at every token (matmul_bf16_inv1_avx512.c): groups
 * of DPG_NCP panels (128 rows), group g at g * DPG_NCP * kp * 16 (kp: the
 * column pairs; units of u32); in a group of np panels, column block k0 at
 * np * k0 / 2 * 16 from the group's start, and in it pair q of panel p at
 * (q * np + p) * 16. A token reads a group as one sequential stream, its
 * np panels side by side in dpg_tile1 (two chains each: 16 sums under way
 * for a whole group), in the GEMM's order: the same bits. */
static size_t pp_block_at(int g, int np, int kp, int k0) {
    return (size_t)g * DPG_NCP * kp * DPG_NR + (size_t)np * (size_t)(k0 / 2) * DPG_NR;
}

static int pp_group_panels(const kern_mat *W, int g) {
    int n_panels = (W->rows + DPG_NR - 1) / DPG_NR;
    return n_panels - g * DPG_NCP < DPG_NCP ? n_panels - g * DPG_NCP : DPG_NCP;
}

typedef struct pp_job {
    const kern_mat *W;
    uint32_t *dst;      /* packing */
    float *y;           /* a token: */
    const uint16_t *xb; /* its activations in bf16, zero past the columns */
    const float *bias;
} pp_job;

static void pp_pack_groups(void *ctx, int lo, int hi) {
    const pp_job *j = ctx;
    int K = j->W->cols;
    for (int g = lo; g < hi; g++) {
        int np = pp_group_panels(j->W, g);
        for (int k0 = 0; k0 < K; k0 += DPG_KC) {
            int kc = K - k0 < DPG_KC ? K - k0 : DPG_KC;
            uint32_t *blk = j->dst + pp_block_at(g, np, (K + 1) / 2, k0);
            for (int pi = 0; pi < np; pi++)
                dpg_pack(blk + (size_t)pi * DPG_NR, (size_t)np * DPG_NR, j->W,
                         (g * DPG_NCP + pi) * DPG_NR, k0, kc);
        }
    }
}

void kern_bf16_pack_panels(pool *p, uint32_t *dst, const kern_mat *W) {
    pp_job j = {.W = W, .dst = dst};
    int n_panels = (W->rows + DPG_NR - 1) / DPG_NR;
    pool_for(p, pp_pack_groups, &j, (n_panels + DPG_NCP - 1) / DPG_NCP, 1);
}

static void pp_token_groups(void *ctx, int lo, int hi) {
    static const float zeros[DPG_NCP * DPG_NR];
    const pp_job *j = ctx;
    const kern_mat *W = j->W;
    int K = W->cols;
    for (int g = lo; g < hi; g++) {
        int np = pp_group_panels(W, g), r0 = g * DPG_NCP * DPG_NR;
        __mmask16 m[DPG_NCP];
        for (int pi = 0; pi < np; pi++) m[pi] = dpg_rows(W, r0 + pi * DPG_NR);
        float *c = j->y + r0;
        for (int k0 = 0; k0 < K; k0 += DPG_KC) {
            int kc = K - k0 < DPG_KC ? K - k0 : DPG_KC;
            const float *cin = k0 ? c : j->bias ? j->bias + r0 : zeros;
            dpg_tile1_any(W->panels + pp_block_at(g, np, (K + 1) / 2, k0), DPG_NR,
                          (size_t)np * DPG_NR, np, j->xb + k0, (kc + 1) / 2, c, cin, NULL, m, true,
                          true);
        }
    }
}

/* Panels [g0, g0 + np) (one group) times tokens [t_lo, t_hi), every column
 * block: each packed once, then every token tile through it. */
static void dpg_group(const dp_job *j, uint32_t *pack, int g0, int np, int t_lo, int t_hi) {
    static const float zeros[DPG_NCP * DPG_NR];
    const kern_mat *W = j->W;
    int M = W->rows, K = W->cols, kb = j->kb;
    size_t pstride = DPG_PSTRIDE;
    /* int8: each block's sums times its rows' scales (one weight group per
     * block), 16 per panel */
    bool i8 = W->dtype == KT_I8;
    int g = W->group > 0 ? W->group : K, ng = K / g;
    float sv[DPG_NCP * DPG_NR];
    for (int k0 = 0; k0 < K; k0 += kb) {
        int kc = K - k0 < kb ? K - k0 : kb, npairs = (kc + 1) / 2;
        for (int pi = 0; pi < np; pi++) {
            dpg_pack(pack + (size_t)pi * pstride, DPG_NR, W, (g0 + pi) * DPG_NR, k0, kc);
            for (int r = 0; i8 && r < DPG_NR; r++) {
                int row = (g0 + pi) * DPG_NR + r;
                sv[pi * DPG_NR + r] = row < M ? W->scales[(size_t)row * ng + k0 / g] : 0.0f;
            }
        }
        for (int t0 = t_lo; t0 < t_hi; t0 += DPG_MR) {
            int mr = t_hi - t0 < DPG_MR ? t_hi - t0 : DPG_MR;
            const uint16_t *xt = j->xb + (size_t)t0 * j->ldx + k0;
            float *c = j->y + (size_t)t0 * M + g0 * DPG_NR;
            /* the first block adds onto the bias (or zero), the others
             * onto the outputs so far */
            const float *cin = k0 ? c : j->bias ? j->bias + g0 * DPG_NR : zeros;
            size_t ldcin = k0 ? (size_t)M : 0;
            if (mr == 1) { /* every panel of the group at once */
                __mmask16 m[DPG_NCP];
                for (int pi = 0; pi < np; pi++) m[pi] = dpg_rows(W, (g0 + pi) * DPG_NR);
                dpg_tile1_any(pack, pstride, DPG_NR, np, xt, npairs, c, cin, i8 ? sv : NULL, m,
                              j->split, false);
                continue;
            }
            for (int pi = 0; pi < np; pi += 2) {
                int r0 = (g0 + pi) * DPG_NR, two = pi + 1 < np;
                dpg_tile_any(pack + (size_t)pi * pstride, pstride, 1 + two, xt, j->ldx, npairs,
                             c + pi * DPG_NR, (size_t)M, cin + pi * DPG_NR, ldcin,
                             i8 ? sv + pi * DPG_NR : NULL, mr, dpg_rows(W, r0),
                             two ? dpg_rows(W, r0 + DPG_NR) : 0, j->split);
            }
        }
    }
}

/* The tokens go through in blocks of at most DPG_NT, each block through
 * every panel group: a group's outputs for a block (128 rows x 512 tokens,
 * 256 KiB) and the block's activations at one column block (512 KiB) stay
 * in L2 from one column block to the next, where all n tokens' spilled (at
 * 2048 tokens, 1 MiB of outputs per group and 2 MiB of activations). The
 * weights are packed once per block instead of once. llama-1b's four
 * shapes, alternating in one process: 679 against 594 GFLOP/s at 2048
 * tokens, 683 against 517 at 4096, 673 against 619 at 1536. */
#define DPG_NT 512
static void dpg_task(void *ctx, int task, int n_tasks) {
    const dp_job *j = ctx;
    int n = j->n, n_panels = (j->W->rows + DPG_NR - 1) / DPG_NR;
    int p_lo, p_hi;
    kern_split(n_panels, 1, task, n_tasks, &p_lo, &p_hi);
    if (p_lo >= p_hi) return;
    uint32_t *pack = kern_scratch(KERN_SCRATCH_PANEL, DPG_NCP * DPG_PSTRIDE * sizeof(uint32_t));
    int blocks = (n + DPG_NT - 1) / DPG_NT;
    for (int b = 0; b < blocks; b++) {
        int t_lo, t_hi;
        kern_split(n, 1, b, blocks, &t_lo, &t_hi);
        for (int g0 = p_lo; g0 < p_hi; g0 += DPG_NCP)
            dpg_group(j, pack, g0, p_hi - g0 < DPG_NCP ? p_hi - g0 : DPG_NCP, t_lo, t_hi);
    }
}

/* ---- token lanes: small batches, weights broadcast in place -------------- */
/* The GEMM's order without its packing of the weights: the activations
 * are packed instead (dpg_pack on the bf16 activations: [pair][16 tokens],
 * one 32-bit lane per token), and each pair of a weight row is broadcast
 * from the mapping in place. A register tile of R rows x V groups of 16
 * tokens takes per pair V loads, R broadcasts and R x V dot products; the
 * rows stream in once, R sequential streams, each prefetched TL_PF columns
 * ahead. Each output sums its pairs in order within a block of DPG_KC
 * columns (split: its even and its odd pairs) and adds each block's sum in
 * turn onto the bias: the GEMM's order, so the two give the same bits at
 * every n. */
#define TL_VMAX  4 /* token groups of 16 in registers: up to 64 tokens */
#define TL_MAX_N (16 * TL_VMAX)
/* From KERN_BF16_FEW_MAX + 1 tokens on (in both modes), where two whole
 * groups or more share each broadcast weight pair: up to 24 tokens the
 * few-token kernel, which shares each 64-bit broadcast between up to three
 * halves of 8 tokens, does fewer products and is faster (at 16 tokens a 32
 * MB matrix from memory: 1.00-1.15 ms against 1.12-1.17; at 24, 17 % more
 * GFLOP/s). At 32
 * tokens the lanes take 1.6-2.1 ms against 3.3-3.7 for 4-row blocks of dot
 * products (since removed) and the GEMM's 2.1-3.0. */
#define TL_PF   512 /* columns prefetched ahead of each row (1 KiB) */
#define TL_RMAX 8   /* rows per register tile, at most */
/* Up to here the token lanes, in passes of TL_MAX_N tokens at most over
 * each panel of rows (tl_panel_chunks); above, the GEMM. llama-1b's 64 layer
 * matrices, the two alternating in one process: the lanes 7-25 % faster from
 * 65 to 512 tokens (622 against 499 GFLOP/s at 80, 631 against 568 at 512),
 * 12 % at 1024 (level with the GEMM once it blocked its tokens, DPG_NT),
 * 5-7 % slower at 1536 and 2048 (13-20 % against the blocked GEMM). In the
 * model: llama-1b prefill of 512 at 282-285 tok/s against 260-271. */
#define TL_LANES_MAX 1024

/* A weight pair read in place as one 32-bit value (rows are only 2-byte
 * aligned): broadcast straight from memory, not through a general register. */
typedef int32_t pair32 __attribute__((may_alias, aligned(2)));

typedef struct tl_job {
    const kern_mat *W;
    float *y;
    const uint32_t *xt; /* group g's pair q at xt[(g * gpairs + q) * 16] */
    size_t gpairs;
    const float *bias;
    int n;
    bool split; /* as dp_job's */
} tl_job;

/* Columns from a weight to the one a tile of R rows prefetches in the block
 * of columns [k0, k0 + kc): TL_PF on; in a row's last block that lies past
 * the row, so the next tile's rows at the block's columns instead (k0 is
 * even), whose first TL_PF columns are then in cache when that tile starts. */
AI size_t tl_ahead(int K, int R, int k0, int kc) {
    return k0 + kc >= K ? (size_t)R * K - (size_t)k0 : (size_t)TL_PF;
}

/* Pair q of rows w[0 .. R) times groups [0, V) onto acc; with half, the
 * pair's second column is zero (a row's odd end). */
AI void tl_pair(const tl_job *j, const uint32_t *xt, const uint16_t *const *w, int q,
                const bool half, __m512 acc[TL_RMAX][TL_VMAX], const int R, const int V) {
    __m512bh xv[TL_VMAX];
#pragma GCC unroll 4
    for (int v = 0; v < V; v++)
        xv[v] = (__m512bh)_mm512_load_si512(xt + ((size_t)v * j->gpairs + q) * 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        __m512bh wb = half ? (__m512bh)_mm512_set1_epi32(w[r][2 * q])
                           : (__m512bh)_mm512_set1_epi32(*(const pair32 *)(w[r] + 2 * q));
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], xv[v], wb);
    }
}

/* Pairs first, first + step, ... of block [k0, k0 + kc) of rows w[0 .. R)
 * (w: the rows' starts) times groups [0, V) onto acc, zeroed first: the
 * block's one chain (step 1) or one of its two (step 2). The chain from
 * the first pair streams the rows and prefetches (`ahead` columns on, once
 * a cache line); the odd pairs' chain finds them in L1. */
AI void tl_chain(const tl_job *j, const uint32_t *xt, const uint16_t *const *w, int k0, int kc,
                 const int first, const int step, size_t ahead, __m512 acc[TL_RMAX][TL_VMAX],
                 const int R, const int V) {
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) acc[r][v] = _mm512_setzero_ps();
    int q0 = k0 / 2, nw = kc / 2; /* whole pairs; an odd end after */
    for (int i = first; i < nw; i += step) {
        int q = q0 + i;
        if (!first && (q & 15) == 0) /* a cache line of each row */
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                _mm_prefetch((const char *)(w[r] + 2 * q + ahead), _MM_HINT_T0);
        tl_pair(j, xt, w, q, false, acc, R, V);
    }
    if ((kc & 1) && nw % step == first) tl_pair(j, xt, w, q0 + nw, true, acc, R, V);
}

/* Rows [r0, r0 + R) x the V groups at xt over columns [k0, k0 + kc): the
 * block's sum added onto c[r][16 v + lane] (ld TL_MAX_N). With split, the
 * even pairs' chain parked while the odd pairs' runs, then the two added;
 * the one chain is 5-7 % faster, which plain mode keeps. */
AI void tl_block(const tl_job *j, const uint32_t *xt, int r0, const int R, const int V, int k0,
                 int kc, float *c) {
    const kern_mat *W = j->W;
    int K = W->cols;
    const uint16_t *w[TL_RMAX];
    for (int r = 0; r < R; r++) w[r] = (const uint16_t *)W->data + (size_t)(r0 + r) * K;
    __m512 acc[TL_RMAX][TL_VMAX];
    _Alignas(64) float even[TL_RMAX][TL_VMAX][16];
    size_t ahead = tl_ahead(K, R, k0, kc);
    if (j->split) {
        tl_chain(j, xt, w, k0, kc, 0, 2, ahead, acc, R, V);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++) _mm512_store_ps(even[r][v], acc[r][v]);
        tl_chain(j, xt, w, k0, kc, 1, 2, ahead, acc, R, V);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                acc[r][v] = _mm512_add_ps(_mm512_load_ps(even[r][v]), acc[r][v]);
    } else {
        tl_chain(j, xt, w, k0, kc, 0, 1, ahead, acc, R, V);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            float *cv = c + r * TL_MAX_N + 16 * v;
            _mm512_store_ps(cv, _mm512_add_ps(_mm512_load_ps(cv), acc[r][v]));
        }
}

/* Rows [r0, r0 + rows), rows <= TL_PANEL, times the V groups from group g0:
 * R rows at a time (then one at a time), each through every column block,
 * the sums kept here and then written out token by token, whole lines of y:
 * written row by row, each store went to another page of y, all in one L1
 * set. */
#define TL_PANEL 48 /* a multiple of every tile's rows */
AI void tl_panel(const tl_job *j, int r0, int rows, int g0, const int R, const int V) {
    const kern_mat *W = j->W;
    int K = W->cols, M = W->rows;
    const uint32_t *xt = j->xt + (size_t)g0 * j->gpairs * 16;
    _Alignas(64) float c[TL_PANEL * TL_MAX_N];
    for (int r = 0; r < rows; r++) {
        float b = j->bias ? j->bias[r0 + r] : 0.0f;
        for (int t = 0; t < 16 * V; t++) c[r * TL_MAX_N + t] = b;
    }
    int r = 0;
    for (; r + R <= rows; r += R) {
        for (int k0 = 0; k0 < K; k0 += DPG_KC)
            tl_block(j, xt, r0 + r, R, V, k0, K - k0 < DPG_KC ? K - k0 : DPG_KC, c + r * TL_MAX_N);
    }
    for (; r < rows; r++)
        for (int k0 = 0; k0 < K; k0 += DPG_KC)
            tl_block(j, xt, r0 + r, 1, V, k0, K - k0 < DPG_KC ? K - k0 : DPG_KC, c + r * TL_MAX_N);
    int t1 = 16 * (g0 + V) < j->n ? 16 * (g0 + V) : j->n;
    for (int t = 16 * g0; t < t1; t++) {
        float *yt = j->y + (size_t)t * M + r0;
        for (int i = 0; i < rows; i++) yt[i] = c[i * TL_MAX_N + t - 16 * g0];
    }
}

/* Above TL_VMAX groups the groups go TL_VMAX at a time through each panel
 * while its rows are in L2 (a panel of llama-1b's widest rows is 768 KiB),
 * so the weights still stream from memory once. */
static void tl_panel_chunks(const tl_job *j, int r0, int rows, int groups) {
    int passes = (groups + TL_VMAX - 1) / TL_VMAX;
    for (int c = 0; c < passes; c++) {
        int g0 = groups * c / passes, g1 = groups * (c + 1) / passes;
        switch (g1 - g0) { /* at least 2: groups > TL_VMAX */
        case 2:
            tl_panel(j, r0, rows, g0, 6, 2);
            break;
        case 3:
            tl_panel(j, r0, rows, g0, 6, 3);
            break;
        default:
            tl_panel(j, r0, rows, g0, 6, 4);
            break;
        }
    }
}

AI void tl_range(const tl_job *j, int lo, int hi, const int R, const int V) {
    for (int r = lo; r < hi; r += TL_PANEL)
        tl_panel(j, r, hi - r < TL_PANEL ? hi - r : TL_PANEL, 0, R, V);
}

/* Rows per register tile at 2 to 4 groups of 16 tokens: 8 x 2 accumulators,
 * then 6 x 3 and 6 x 4 (and 6 rows for every pass above 4 groups). More
 * rows than 8 fell behind (rows 4 KiB apart share L1 sets); 8 x 3 spilled
 * (llama-1b matrices: 48 tokens at 5.0 ms, at 2.5 ms with 6 rows). */
static int tl_tile_rows(int groups) {
    return groups <= 2 ? 8 : 6;
}

/* Rows [lo, hi), whole tiles but the matrix's last; two groups at least
 * (the few-token kernel takes up to KERN_BF16_FEW_MAX tokens). */
_Static_assert(KERN_BF16_FEW_MAX >= 16, "the token lanes start at two groups");
static void tl_rows(void *ctx, int lo, int hi) {
    const tl_job *j = ctx;
    int groups = (j->n + 15) / 16;
    switch (groups) {
    case 2:
        tl_range(j, lo, hi, 8, 2);
        break;
    case 3:
        tl_range(j, lo, hi, 6, 3);
        break;
    case 4:
        tl_range(j, lo, hi, 6, 4);
        break;
    default:
        for (int r = lo; r < hi; r += TL_PANEL)
            tl_panel_chunks(j, r, hi - r < TL_PANEL ? hi - r : TL_PANEL, groups);
        break;
    }
}

/* ---- one token (plain mode): rows one after another ----------------------- */
/* Bound by streaming the weights, so the rows are read strictly in order:
 * one sequential stream per thread, four accumulators per row (32-column
 * steps in turn) to cover the dot products' latency. The weights are read
 * in 256-bit halves (kern_load64_halves). The stream is
 * left to the hardware prefetchers but for one touch two pages ahead as it
 * enters a page (kern_page_ahead): streaming llama-1b's matrices 36-38 %
 * faster, its decode 19-23 % (21.3-21.8 against 25.6-26.2 tok/s,
 * alternating runs); and each line prefetched a page on with the
 * non-temporal hint (kern_stream_ahead), which keeps the activations in L1
 * beside the stream: 3-5 % faster, decode 2-4 %. Prefetching within the
 * page, 256 B to 1 KiB ahead with the T0 hint, only got in the way. Its
 * own order: step s of a row goes to accumulator s mod 4; then (a0 + a1) +
 * (a2 + a3), one reduction. */
#define DP1_CHAINS 4

static void dp1_rows(void *ctx, int lo, int hi) {
    const dp_job *j = ctx;
    const kern_mat *W = j->W;
    int K = W->cols, K128 = K & ~127;
    const uint16_t *x = j->xb;
    for (int r = lo; r < hi; r++) {
        const uint16_t *w = (const uint16_t *)W->data + (size_t)r * K;
        __m512 a[DP1_CHAINS];
        for (int c = 0; c < DP1_CHAINS; c++) a[c] = _mm512_setzero_ps();
        int k = 0;
        for (; k < K128; k += 128) {
            kern_stream_ahead(w + k, 128 * sizeof(uint16_t));
#pragma GCC unroll 4
            for (int c = 0; c < DP1_CHAINS; c++)
                a[c] = _mm512_dpbf16_ps(a[c], (__m512bh)kern_load64_halves(w + k + 32 * c),
                                        (__m512bh)_mm512_loadu_si512(x + k + 32 * c));
        }
        for (int c = 0; k < K; k += 32, c++) { /* the tail, masked; x is zero past K */
            __mmask32 m = K - k >= 32 ? ~0u : (1u << (K - k)) - 1;
            a[c] = _mm512_dpbf16_ps(a[c], (__m512bh)_mm512_maskz_loadu_epi16(m, w + k),
                                    (__m512bh)_mm512_loadu_si512(x + k));
        }
        float s = _mm512_reduce_add_ps(
            _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
        j->y[r] = s + (j->bias ? j->bias[r] : 0.0f);
    }
}

/* Rows of at most one 128-column step are all tail or one step and a
 * reduction in dp1_rows, whose tail chains sit in memory: MLA's absorbed
 * query (W_uk^T, 64 columns a row in dsv3-1b, 128 in DeepSeek V2/V3) took
 * 1.03-1.10 us for a head of 256 x 64 even from L1 or L2, 2.14 for 512 x
 * 128. Sixteen rows go together here, each row's chains formed as dp1_rows
 * forms them (a chunk past K adds +0, as dp1_rows's untouched chains do)
 * and added in the same pairs, then one butterfly for the sixteen sums,
 * whose adds are _mm512_reduce_add_ps's (hsum16x16): the same bits, 0.37-0.42
 * and 1.63 us. Lane 4c + e of the butterfly holds row c + 4e. */
static void dp1_short_rows(void *ctx, int lo, int hi) {
    const dp_job *j = ctx;
    const kern_mat *W = j->W;
    int K = W->cols, r = lo;
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512i xc[DP1_CHAINS]; /* the 32-column chunks: x, and each one's mask */
    __mmask32 mc[DP1_CHAINS];
#pragma GCC unroll 4
    for (int c = 0; c < DP1_CHAINS; c++) {
        int k = 32 * c;
        mc[c] = K - k >= 32 ? ~0u : K > k ? (1u << (K - k)) - 1 : 0;
        xc[c] = K > k ? _mm512_loadu_si512(j->xb + k) : _mm512_setzero_si512();
    }
    for (; r + 16 <= hi; r += 16) {
        const uint16_t *w = (const uint16_t *)W->data + (size_t)r * K;
        kern_stream_ahead(w, 16 * (size_t)K * sizeof(uint16_t));
        __m512 v[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++, w += K) {
            __m512 a[DP1_CHAINS];
#pragma GCC unroll 4
            for (int c = 0; c < DP1_CHAINS; c++) /* chunks past K add +0 */
                a[c] = _mm512_dpbf16_ps(_mm512_setzero_ps(),
                                        (__m512bh)_mm512_maskz_loadu_epi16(mc[c], w + 32 * c),
                                        (__m512bh)xc[c]);
            v[i] = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
        }
        __m512 s = _mm512_permutexvar_ps(order, hsum16x16(v));
        __m512 b = j->bias ? _mm512_loadu_ps(j->bias + r) : _mm512_setzero_ps();
        _mm512_storeu_ps(j->y + r, _mm512_add_ps(s, b));
    }
    if (r < hi) dp1_rows(ctx, r, hi);
}

/* The one-token row kernel for rows of K columns. */
static pool_range_fn dp1_for(int K) {
    return K <= 128 ? dp1_short_rows : dp1_rows;
}

/* Rounds 16 floats to bf16 as kern_f32_to_bf16 does (nearest even, NaN kept
 * quiet). */
AI __m256i round16(const float *src) {
    __m512i u = _mm512_loadu_si512(src);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

/* The activations of tokens [lo, hi) rounded into their bf16 rows (zero past
 * column K), and, for the token lanes, each whole group of 16 packed. */
typedef struct prep_job {
    const float *x;
    uint16_t *xb;
    size_t ldx;
    int K, n;
    uint32_t *xt; /* NULL: rows only */
} prep_job;

static void prep_rows(void *ctx, int lo, int hi) {
    const prep_job *j = ctx;
    for (int t = lo; t < hi; t++) {
        const float *src = j->x + (size_t)t * j->K;
        uint16_t *dst = j->xb + (size_t)t * j->ldx;
        int k = 0;
        for (; k + 16 <= j->K; k += 16) _mm256_storeu_si256((__m256i *)(dst + k), round16(src + k));
        for (; k < j->K; k++) dst[k] = kern_f32_to_bf16(src[k]);
        memset(dst + j->K, 0, (j->ldx - (size_t)j->K) * sizeof(uint16_t));
    }
}

static void prep_groups(void *ctx, int lo, int hi) {
    const prep_job *j = ctx;
    prep_rows(ctx, 16 * lo, 16 * hi < j->n ? 16 * hi : j->n);
    kern_mat X = {.dtype = KT_BF16, .rows = j->n, .cols = (int)j->ldx, .data = j->xb};
    for (int g = lo; g < hi; g++)
        dpg_pack(j->xt + (size_t)g * j->ldx / 2 * 16, DPG_NR, &X, 16 * g, 0, (int)j->ldx);
}

/* From this many tokens the rounding (and packing) runs on the pool: at
 * 1024 tokens of 8192 columns it was 2.5 % of the GEMM's time on the calling
 * thread alone. */
#define PREP_POOL_N 32

/* The bf16 activations' rows: padded by 128 bytes, so that the tokens'
 * activations at one column do not all fall in one L1 set when K is a
 * multiple of 1024, in 64-byte aligned scratch (ldx is a multiple of 32):
 * every 32-column load of the activations one cache line (misaligned, the
 * one-token rows streamed 15-20 % slower). */
size_t kern_bf16_one_ldx(int cols) {
    return (size_t)((cols + 31) & ~31) + 64;
}

static prep_job prep_buffers(const float *x, int K, int n) {
    size_t ldx = kern_bf16_one_ldx(K);
    uint16_t *xb = kern_scratch(KERN_SCRATCH_ACT, (size_t)n * ldx * sizeof(uint16_t));
    return (prep_job){.x = x, .xb = xb, .ldx = ldx, .K = K, .n = n};
}

/* The GEMM over all of W: several tasks per thread, so a late-waking
 * worker does not leave one thread with all the rows; small matrices stay
 * on one thread. */
static void dpg_run(pool *p, dp_job *j) {
    const kern_mat *W = j->W;
    int tasks = (double)W->rows * W->cols * j->n < 65536 ? 1 : pool_threads(p) * 4;
    int units = (W->rows + DPG_NR - 1) / DPG_NR;
    pool_run(p, dpg_task, j, tasks < units ? tasks : units);
}

void kern_matmul_bf16_avx512(pool *p, float *y, const float *x, const kern_mat *W,
                             const float *bias, int n) {
    int K = W->cols;
    prep_job pj = prep_buffers(x, K, n);
    uint16_t *xb = pj.xb;
    size_t ldx = pj.ldx;
    if (n == 1 && W->panels && kern_batch_inv()) { /* the packed panels, group by group */
        prep_rows(&pj, 0, 1);
        pp_job j = {.W = W, .y = y, .xb = xb, .bias = bias};
        pool_for(p, pp_token_groups, &j, (W->rows + DPG_NCP * DPG_NR - 1) / (DPG_NCP * DPG_NR), 1);
        return;
    }
    bool lanes = n > KERN_BF16_FEW_MAX && n <= TL_LANES_MAX;
    if (!lanes) {
        if (n >= PREP_POOL_N)
            pool_for(p, prep_rows, &pj, n, 1);
        else
            prep_rows(&pj, 0, n);
    }
    bool split = kern_batch_inv();
    dp_job j = {
        .W = W, .y = y, .xb = xb, .ldx = ldx, .bias = bias, .n = n, .kb = DPG_KC, .split = split};
    /* the kernel; in batch-invariant mode each takes that mode's order */
    if (n > TL_LANES_MAX) {
        dpg_run(p, &j);
    } else if (n == 1 && kern_batch_inv()) {
        kern_bf16_inv1_avx512(p, y, xb, W, bias);
    } else if (n == 1) {
        /* one stream per thread, the threads' ends balanced (pool_for) */
        pool_for(p, dp1_for(K), &j, W->rows, kern_one_token_grain(KT_BF16, K));
    } else if (lanes) {
        int groups = (n + 15) / 16;
        tl_job tj = {.W = W, .y = y, .gpairs = ldx / 2, .bias = bias, .n = n, .split = split};
        pj.xt = kern_scratch(KERN_SCRATCH_ACT2, (size_t)groups * tj.gpairs * 16 * sizeof(uint32_t));
        if (n >= PREP_POOL_N) /* each group's rows rounded and packed by one thread */
            pool_for(p, prep_groups, &pj, groups, 1);
        else
            prep_groups(&pj, 0, groups);
        tj.xt = pj.xt;
        /* whole tiles of about 64 KB of weights, the threads' ends balanced */
        int tile = tl_tile_rows(groups), rows = kern_one_token_grain(KT_BF16, K);
        pool_for(p, tl_rows, &tj, W->rows, (rows + tile - 1) / tile * tile);
    } else {
        kern_bf16_few_avx512(p, y, xb, ldx, W, bias, n);
    }
}

void kern_bf16_one_prepare(uint16_t *xb, const float *x, int cols) {
    prep_job pj = {.x = x, .xb = xb, .ldx = kern_bf16_one_ldx(cols), .K = cols, .n = 1};
    prep_rows(&pj, 0, 1);
}

void kern_bf16_one_prepared(float *y, const uint16_t *xb, const kern_mat *W) {
    dp_job j = {.W = W, .y = y, .xb = xb, .n = 1};
    dp1_for(W->cols)(&j, 0, W->rows);
}

/* int8 weights, above KERN_GEMM_MIN_N tokens in plain mode: the packed GEMM
 * on their integer values (exact in bf16) and the activations rounded to
 * bf16, each column block's sums times its rows' scales as they are added
 * (the blocks are the weight groups when those are shorter than DPG_KC).
 * The products are those of the weights' integers and the rounded
 * activations, exact in f32; the activations keep 8 significant bits where
 * the few-token kernels' int8 blocks keep 7 or fewer. The f32 GEMM on
 * dequantized panels it replaces ran at the FMA peak's pace, half this
 * one's. */
void kern_matmul_i8_gemm_avx512(pool *p, float *y, const float *x, const kern_mat *W,
                                const float *bias, int n) {
    int g = W->group > 0 ? W->group : W->cols;
    prep_job pj = prep_buffers(x, W->cols, n);
    pool_for(p, prep_rows, &pj, n, 1);
    dp_job j = {.W = W,
                .y = y,
                .xb = pj.xb,
                .ldx = pj.ldx,
                .bias = bias,
                .n = n,
                .kb = g < DPG_KC ? g : DPG_KC};
    dpg_run(p, &j);
}

#pragma GCC pop_options
