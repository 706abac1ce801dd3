/* matmul_i8_avx512.c — int8 weights times kern_i8_x16_max(cols) + 1 to
 * KERN_GEMM_MIN_N tokens (batched decode, short prefill chunks; fewer tokens
 * take the int16-activation rows in matmul_avx512.c) and every n in
 * batch-invariant mode, on CPUs with AVX-512 VNNI: matmul_avx2.c walks the
 * rows and tokens and calls kern_sb_rows_i8_avx512 in place of its own
 * 8-lane blocks.
 *
 * Rows in lanes. A tile is 16 rows, one per 32-bit lane. Each 32-column
 * block of the tile is loaded row by row and transposed in registers (8
 * vectors: vector c, lane i = row i's columns 4c .. 4c + 3), so vpdpbusd
 * multiplies four columns of 16 rows by one token's four activations,
 * broadcast from memory, and sums a whole block in integers: 8 dot
 * products per (16 rows, token, block), then one conversion and one FMA
 * with the block's scale. The arithmetic per product is about a third of
 * one vpdpbusd per (row, token, 64 columns) plus its sign fix, conversion
 * and FMA, which the row-major blocks this replaced needed (they ran at the
 * f32 FMA's pace). The transposition (32 shuffles a block) is shared by all
 * the tokens of the call. Each transposed chunk of RL_KC columns (4 KiB)
 * stays in L1 while the tokens pass over it, RL_T at a time in registers;
 * partial sums wait in memory between chunks.
 *
 * vpdpbusd multiplies unsigned by signed bytes, so the weights go in as
 * w + 128 (unsigned, made by flipping the top bit) against the signed
 * activations, and each block's sum starts at -128 times the block's sum
 * of activations (kern_i8_block_starts, once per call): the integer sum is
 * exactly that of the weights times the activations.
 *
 * The order (its own, in plain and batch-invariant mode alike): per (row,
 * token), the blocks in order, each block's exact integer sum converted
 * and added times its scale (the token's block scale, times the weight
 * group's unless one scale per row), then the row scale and the bias. It
 * depends on the shape alone: a token gets the same bits whatever n, its
 * place in the batch, the tile or the thread. */
#include "kernels/kern_internal.h"

#include <immintrin.h>
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")

#define AI static inline __attribute__((always_inline))

#define RL_ROWS  KERN_I8_TILE_ROWS      /* rows per tile: one per 32-bit lane */
#define RL_KC    256                    /* columns per chunk (its transposed tile: 4 KiB) */
#define RL_LINES (RL_ROWS * RL_KC / 64) /* cache lines of a chunk of the tile */
#define RL_T     8                      /* tokens per pass, in registers */
#define RL_BLKS  (RL_KC / KQ_BLOCK)

void kern_i8_block_starts(int32_t *st, const int8_t *xq, int n, int K) {
    int nb = (K + KQ_BLOCK - 1) / KQ_BLOCK;
    for (int t = 0; t < n; t++)
        for (int b = 0; b < nb; b++) {
            const int8_t *x = xq + (size_t)t * K + (size_t)b * KQ_BLOCK;
            int kv = K - b * KQ_BLOCK < KQ_BLOCK ? K - b * KQ_BLOCK : KQ_BLOCK, s = 0;
            for (int k = 0; k < kv; k++) s += x[k];
            st[(size_t)t * nb + b] = -128 * s;
        }
}

/* Block [k, k + kv) (kv <= 32) of rows w[0 .. R) (K bytes apart) into out:
 * vector c, lane i = row i's bytes k + 4c .. k + 4c + 3, each + 128 as an
 * unsigned byte; bytes past kv are 0 (they meet activations of the next
 * row), lanes past R are never stored. full: R = 16 and kv = 32. */
AI void rl_transpose(__m512i out[8], const int8_t *w, size_t K, int R, int kv, const bool full) {
    __m512i z[8], t[8], u[8];
    __mmask32 m = full || kv >= 32 ? ~0u : (1u << kv) - 1;
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        __m256i lo, hi;
        if (full) {
            lo = _mm256_loadu_si256((const __m256i *)(w + (size_t)i * K));
            hi = _mm256_loadu_si256((const __m256i *)(w + (size_t)(i + 8) * K));
        } else {
            lo = i < R ? _mm256_maskz_loadu_epi8(m, w + (size_t)i * K) : _mm256_setzero_si256();
            hi = i + 8 < R ? _mm256_maskz_loadu_epi8(m, w + (size_t)(i + 8) * K)
                           : _mm256_setzero_si256();
        }
        z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    /* an 8 x 8 transpose of dwords in each 256-bit half (rows 0-7, 8-15) */
#pragma GCC unroll 4
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* u[c] (c < 4) holds rows 0-3 | 8-11 of columns c and c + 4 in its
     * 128-bit lanes (c, c + 4, c, c + 4), u[c + 4] rows 4-7 | 12-15 */
    const __m512i lo_idx = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi_idx = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        out[c] = _mm512_permutex2var_epi64(u[c], lo_idx, u[c + 4]);
        out[c + 4] = _mm512_permutex2var_epi64(u[c], hi_idx, u[c + 4]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        if (full || kv >= 32) {
            out[c] = _mm512_xor_si512(out[c], flip);
        } else { /* adding 0x80 flips the top bit; only the row's bytes */
            int v = kv - 4 * c;
            uint64_t nib = v >= 4 ? 0xf : v > 0 ? (1u << v) - 1 : 0;
            out[c] = _mm512_mask_add_epi8(out[c], _cvtu64_mask64(nib * 0x1111111111111111ull),
                                          out[c], flip);
        }
    }
}

typedef struct rl_args {
    const kern_mat *W;
    const int8_t *xq;
    const float *xs;
    const int32_t *xst;
    int nb, K, ng, g;
} rl_args;

/* A block's exact integer sum for 16 rows (w: the block's 8 transposed
 * vectors) and one token (x: its 32 quantized activations, st: its block
 * start): two chains of four vpdpbusd, added. */
AI __m512i rl_block_sum(const __m512i w[8], const int8_t *x, int32_t st) {
    __m512i s0 = _mm512_set1_epi32(st), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 8; c += 2) {
        int32_t x0, x1;
        memcpy(&x0, x + 4 * c, 4);
        memcpy(&x1, x + 4 * c + 4, 4);
        s0 = _mm512_dpbusd_epi32(s0, w[c], _mm512_set1_epi32(x0));
        s1 = _mm512_dpbusd_epi32(s1, w[c + 1], _mm512_set1_epi32(x1));
    }
    return _mm512_add_epi32(s0, s1);
}

/* The scales of weight group grp for rows [r0, r0 + 16) (rm: the rows in
 * the matrix), one gather. */
AI __m512 rl_group_scales(const rl_args *a, int r0, __mmask16 rm, int grp) {
    const __m512i ridx =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(a->ng));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), rm, ridx,
                                    a->W->scales + (size_t)r0 * a->ng + grp, 4);
}

/* A token's sums for rows [r0, r0 + 16) (rm) times the row scales (one
 * scale per row) plus the bias, stored to y (the token's row of outputs). */
AI void rl_store(const rl_args *a, float *y, const float *bias, int r0, __mmask16 rm, __m512 part,
                 const bool per_row) {
    __m512 s = per_row ? _mm512_mul_ps(part, _mm512_maskz_loadu_ps(rm, a->W->scales + r0)) : part;
    __m512 bv = bias ? _mm512_maskz_loadu_ps(rm, bias + r0) : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(y + r0, rm, _mm512_add_ps(s, bv));
}

/* Tokens [t0, t0 + T) over the chunk's blocks [b0, b0 + nblk), onto
 * part[t - t_lo]: per token and block, two chains of four vpdpbusd (from
 * the block's start and from zero), added, converted, times the scale. */
AI void rl_pass(const rl_args *a, const __m512i (*wt)[8], const __m512 *wsv, int b0, int nblk,
                int t0, const int T, __m512 *part, const bool per_row) {
    __m512 acc[RL_T];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = part[t];
    for (int bi = 0; bi < nblk; bi++) {
        int b = b0 + bi;
        __m512i w[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) w[c] = _mm512_load_si512(&wt[bi][c]);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const int8_t *x = a->xq + (size_t)(t0 + t) * a->K + (size_t)b * KQ_BLOCK;
            __m512i sum = rl_block_sum(w, x, a->xst[(size_t)(t0 + t) * a->nb + b]);
            __m512 sc = _mm512_set1_ps(a->xs[(size_t)(t0 + t) * a->nb + b]);
            if (!per_row) sc = _mm512_mul_ps(sc, wsv[bi]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sc, acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) part[t] = acc[t];
}

/* One tile: rows [r0, r0 + R) (R <= 16) times tokens [t_lo, t_hi). */
AI void rl_tile(const rl_args *a, float *y, const float *bias, int r0, int R, int t_lo, int t_hi,
                const bool per_row, const bool full_rows) {
    const kern_mat *W = a->W;
    int K = a->K, nt = t_hi - t_lo;
    const int8_t *w0 = (const int8_t *)W->data + (size_t)r0 * K;
    __m512 part[KERN_SB_TILE_MAX];
    _Alignas(64) __m512i wt[RL_BLKS][8];
    _Alignas(64) __m512 wsv[RL_BLKS];
    for (int t = 0; t < nt; t++) part[t] = _mm512_setzero_ps();
    __mmask16 rm = (__mmask16)((1u << R) - 1);
    __m512 ws_cur = _mm512_setzero_ps();
    int ws_grp = -1; /* the group ws_cur holds (a gather per group, not per block) */
    for (int k0 = 0; k0 < K; k0 += RL_KC) {
        int kc = K - k0 < RL_KC ? K - k0 : RL_KC, nblk = (kc + KQ_BLOCK - 1) / KQ_BLOCK;
        /* the next chunk of the rows (or the next tile's first) prefetched,
         * spread over this chunk's blocks, while this one is computed: at 8
         * and 16 tokens 424 and 563 GFLOP/s against 358 and 524 left to the
         * hardware prefetchers (streaming llama-1b's matrices). With the T0
         * hint rather than T1, alternating in one process: 4 tokens 7-10 %
         * faster, 1 (batch-invariant), 16 and 32 tokens 2-3 %, 8 level. */
        const int8_t *next = k0 + RL_KC < K ? w0 + k0 + RL_KC : w0 + (size_t)RL_ROWS * K;
        for (int bi = 0; bi < nblk; bi++) {
            int k = k0 + bi * KQ_BLOCK, kv = K - k < KQ_BLOCK ? K - k : KQ_BLOCK;
            for (int l = bi * RL_LINES / RL_BLKS; l < (bi + 1) * RL_LINES / RL_BLKS; l++) {
                int row = l / (RL_KC / 64), col = l % (RL_KC / 64) * 64;
                _mm_prefetch((const char *)(next + (size_t)row * K + col), _MM_HINT_T0);
            }
            if (full_rows && kv == KQ_BLOCK)
                rl_transpose(wt[bi], w0 + k, (size_t)K, RL_ROWS, KQ_BLOCK, true);
            else
                rl_transpose(wt[bi], w0 + k, (size_t)K, R, kv, false);
            if (!per_row) { /* the 16 rows' scales of this block's group */
                int grp = k / a->g;
                if (grp != ws_grp) ws_cur = rl_group_scales(a, r0, rm, grp);
                ws_grp = grp;
                wsv[bi] = ws_cur;
            }
        }
        int t = t_lo, b0 = k0 / KQ_BLOCK;
        for (; t + RL_T <= t_hi; t += RL_T)
            rl_pass(a, (const __m512i(*)[8])wt, wsv, b0, nblk, t, RL_T, part + (t - t_lo), per_row);
        _Static_assert(RL_T == 8, "the tail passes below are 1 to 7 tokens");
        switch (t_hi - t) {
#define TAIL(T)                                                                                    \
    case T:                                                                                        \
        rl_pass(a, (const __m512i(*)[8])wt, wsv, b0, nblk, t, T, part + (t - t_lo), per_row);      \
        break;
            TAIL(1)
            TAIL(2)
            TAIL(3)
            TAIL(4)
            TAIL(5)
            TAIL(6)
            TAIL(7)
#undef TAIL
        default:
            break;
        }
    }
    for (int t = 0; t < nt; t++)
        rl_store(a, y + (size_t)(t_lo + t) * W->rows, bias, r0, rm, part[t], per_row);
}

/* W and the call's quantized activations (g: the weight group's columns,
 * K where one scale per row). */
static rl_args rl_args_of(const kern_mat *W, const int8_t *xq, const float *xs, const int32_t *xst,
                          int nb) {
    bool per_row = W->group <= 0 || W->group == W->cols;
    int g = per_row ? W->cols : W->group;
    return (rl_args){
        .W = W, .xq = xq, .xs = xs, .xst = xst, .nb = nb, .K = W->cols, .ng = W->cols / g, .g = g};
}

void kern_sb_rows_i8_avx512(const kern_mat *W, float *y, const int8_t *xq, const float *xs,
                            const int32_t *xst, int nb, const float *bias, int r0, int R, int t_lo,
                            int t_hi) {
    bool per_row = W->group <= 0 || W->group == W->cols;
    rl_args a = rl_args_of(W, xq, xs, xst, nb);
    int r = r0;
    for (; r + RL_ROWS <= r0 + R; r += RL_ROWS) {
        if (per_row)
            rl_tile(&a, y, bias, r, RL_ROWS, t_lo, t_hi, true, true);
        else
            rl_tile(&a, y, bias, r, RL_ROWS, t_lo, t_hi, false, true);
    }
    if (r < r0 + R) {
        if (per_row)
            rl_tile(&a, y, bias, r, r0 + R - r, t_lo, t_hi, true, false);
        else
            rl_tile(&a, y, bias, r, r0 + R - r, t_lo, t_hi, false, false);
    }
}

/* ---- one token on a packed copy (batch-invariant mode) ------------------- */
/* kern_i8_pack_panels stores every tile's blocks as rl_transpose makes them
 * (16 rows, 32 columns: 8 vectors, 512 bytes), tile after tile, so one
 * token streams them in place of transposing the rows at every call: tile
 * i at i * nb * 512 bytes, block b of it at b * 512. The token's sums are
 * rl_pass's at one token, in its order: the same bits. */
#define RL_BLOCK_BYTES 512

size_t kern_i8_panels_bytes(const kern_mat *W) {
    size_t tiles = (size_t)(W->rows + RL_ROWS - 1) / RL_ROWS;
    return tiles * (size_t)((W->cols + KQ_BLOCK - 1) / KQ_BLOCK) * RL_BLOCK_BYTES;
}

typedef struct rlp_job {
    rl_args a;     /* a.W: the matrix */
    uint32_t *dst; /* packing: the copy */
    float *y;
    const float *bias;
} rlp_job;

static void rlp_pack_tiles(void *ctx, int lo, int hi) {
    const rlp_job *j = ctx;
    const kern_mat *W = j->a.W;
    int K = W->cols, nb = (K + KQ_BLOCK - 1) / KQ_BLOCK;
    for (int i = lo; i < hi; i++) {
        int r0 = i * RL_ROWS, R = W->rows - r0 < RL_ROWS ? W->rows - r0 : RL_ROWS;
        const int8_t *w0 = (const int8_t *)W->data + (size_t)r0 * K;
        __m512i *out = (__m512i *)((char *)j->dst + (size_t)i * nb * RL_BLOCK_BYTES);
        for (int b = 0; b < nb; b++) {
            int k = b * KQ_BLOCK, kv = K - k < KQ_BLOCK ? K - k : KQ_BLOCK;
            __m512i v[8];
            if (R == RL_ROWS && kv == KQ_BLOCK)
                rl_transpose(v, w0 + k, (size_t)K, RL_ROWS, KQ_BLOCK, true);
            else
                rl_transpose(v, w0 + k, (size_t)K, R, kv, false);
            for (int c = 0; c < 8; c++) _mm512_store_si512(out + (size_t)b * 8 + c, v[c]);
        }
    }
}

void kern_i8_pack_panels(pool *p, uint32_t *dst, const kern_mat *W) {
    rlp_job j = {.a = {.W = W}, .dst = dst};
    pool_for(p, rlp_pack_tiles, &j, (W->rows + RL_ROWS - 1) / RL_ROWS, 1);
}

/* Tile i of the copy times the token (rl_tile at one token, the blocks
 * read in place, each prefetched a page ahead as the one-token rows do). */
AI void rlp_tile(const rlp_job *j, int i, const bool per_row) {
    const rl_args *a = &j->a;
    int r0 = i * RL_ROWS, R = a->W->rows - r0 < RL_ROWS ? a->W->rows - r0 : RL_ROWS;
    const __m512i *wt =
        (const __m512i *)((const char *)a->W->panels + (size_t)i * a->nb * RL_BLOCK_BYTES);
    __mmask16 rm = (__mmask16)((1u << R) - 1);
    __m512 ws = _mm512_setzero_ps(), part = _mm512_setzero_ps();
    int ws_grp = -1;
    for (int b = 0; b < a->nb; b++) {
        kern_stream_ahead(wt + (size_t)b * 8, RL_BLOCK_BYTES);
        __m512i w[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) w[c] = _mm512_load_si512(wt + (size_t)b * 8 + c);
        __m512i sum = rl_block_sum(w, a->xq + (size_t)b * KQ_BLOCK, a->xst[b]);
        __m512 sc = _mm512_set1_ps(a->xs[b]);
        if (!per_row) { /* the group's scales, gathered as rl_tile does */
            int grp = b * KQ_BLOCK / a->g;
            if (grp != ws_grp) ws = rl_group_scales(a, r0, rm, grp);
            ws_grp = grp;
            sc = _mm512_mul_ps(sc, ws);
        }
        part = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sc, part);
    }
    rl_store(a, j->y, j->bias, r0, rm, part, per_row);
}

static void rlp_tiles(void *ctx, int lo, int hi) {
    const rlp_job *j = ctx;
    bool per_row = j->a.g == j->a.K;
    for (int i = lo; i < hi; i++) {
        if (per_row)
            rlp_tile(j, i, true);
        else
            rlp_tile(j, i, false);
    }
}

void kern_i8_one_packed_avx512(pool *p, const kern_mat *W, float *y, const int8_t *xq,
                               const float *xs, const int32_t *xst, int nb, const float *bias) {
    rlp_job j = {.a = rl_args_of(W, xq, xs, xst, nb), .y = y, .bias = bias};
    /* whole tiles of about 64 KB of weights, the threads' ends balanced */
    int grain = kern_one_token_grain(KT_I8, W->cols) / RL_ROWS;
    pool_for(p, rlp_tiles, &j, (W->rows + RL_ROWS - 1) / RL_ROWS, grain > 0 ? grain : 1);
}
#pragma GCC pop_options
