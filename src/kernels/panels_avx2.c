/* panels_avx2.c — batch-invariant mode's packed copy of a bf16 matrix
 * where there is no AVX-512 BF16 (kern_pack_panels), and a few tokens on it.
 *
 * Batch-invariant bf16 sums in the AVX2 GEMM's order (gemm_avx2.c): rows
 * side by side in the lanes; per block of KERN_GEMM_AVX2_KC columns a
 * chain of FMAs over the columns in order, from zero; each block's sum
 * added onto y, which starts at the bias. Read straight from the row-major
 * weights, decode transposes every 8 x 8 tile as it streams it (the GEMM's
 * small-n path): on Zen 3 one token at 62-75 % of the read bandwidth where
 * the plain rows run at 85-93 %, eight at half the plain rows' pace. Packed
 * once when the mode goes on, the weights stream in the order the lanes
 * take them.
 *
 * The layout has the size and the 128-row groups of the AVX-512 copy
 * (matmul_bf16_avx512.c), so that a view starting on a group keeps the copy
 * at the same offset (kern_mat_rows): group g at g * 128 * kp 32-bit words
 * (kp = ceil(cols / 2), the column pairs); a group of np 16-row panels has
 * 2 np strips of 8 rows, the first 8 strips (a half: 64 rows) laid out
 * first, then the rest. A half of s strips holds its column blocks in turn
 * (block b, nb pairs from pair 256 b, at 256 b * s * 8), and a block its
 * strip pairs in turn (pair of strips 2p, 2p + 1 at nb * 2p * 8; the last
 * may be one strip): pair q of strip u of the two at q * ss * 8 + u * 8,
 * eight words, one per row, each the row's columns 2q (low half) and
 * 2q + 1 (high half); zero past the rows and columns. So two strips' block
 * (16 KiB) is one stream, which stays in L1 while the token tiles pass over
 * it: per pair the even product then (where the column exists) the odd one
 * fused onto each (row, token) chain, the order of the GEMM's, so the same
 * bits. */
#include "kernels/kern_internal.h"

#include <immintrin.h>

#define AI        static inline __attribute__((always_inline))
#define PA_GROUP  KERN_PANEL_GROUP_ROWS /* rows per group */
#define PA_HALF   64                    /* rows per half of a group */
#define PA_STRIP  8                     /* rows per strip: one vector */
#define PA_KC     KERN_GEMM_AVX2_KC     /* columns per block of the GEMM's order */
#define PA_PANEL  KERN_PANEL_ROWS       /* rows per panel (the copy's size) */
#define PA_STRIPS (PA_HALF / PA_STRIP)

/* Half h (64 rows from 64 h) of W's copy: its first word and its strips. */
static size_t pa_half_at(const kern_mat *W, int h, int *strips) {
    size_t kp = ((size_t)W->cols + 1) / 2;
    int g = h / 2, rows_g = W->rows - g * PA_GROUP < PA_GROUP ? W->rows - g * PA_GROUP : PA_GROUP;
    int s_group = 2 * ((rows_g + PA_PANEL - 1) / PA_PANEL);
    *strips = h % 2 ? s_group - PA_STRIPS : s_group < PA_STRIPS ? s_group : PA_STRIPS;
    return (size_t)g * PA_GROUP * kp + (size_t)(h % 2) * PA_HALF * kp;
}

/* Pairs per column block; and, from the start of a half of s strips, the
 * word where the block from pair q0 (a multiple of PA_BP) holds strips p2
 * and p2 + 1 (p2 even). */
#define PA_BP (PA_KC / 2)
static size_t pa_block_at(int kp, int s, int q0, int p2) {
    int nb = kp - q0 < PA_BP ? kp - q0 : PA_BP;
    return ((size_t)q0 * s + (size_t)nb * p2) * PA_STRIP;
}

typedef struct pa_pack_job {
    const kern_mat *W;
    uint32_t *dst;
} pa_pack_job;

static void pa_pack_halves(void *ctx, int lo, int hi) {
    const pa_pack_job *j = ctx;
    const kern_mat *W = j->W;
    const uint16_t *w = W->data;
    int K = W->cols, kp = (K + 1) / 2;
    for (int h = lo; h < hi; h++) {
        int s;
        uint32_t *d = j->dst + pa_half_at(W, h, &s);
        for (int i = 0; i < s; i++) {
            int p2 = i & ~1, ss = s - p2 < 2 ? s - p2 : 2;
            for (int l = 0; l < PA_STRIP; l++) {
                int r = h * PA_HALF + i * PA_STRIP + l;
                const uint16_t *row = w + (size_t)r * K;
                for (int q0 = 0; q0 < kp; q0 += PA_BP) {
                    uint32_t *blk = d + pa_block_at(kp, s, q0, p2) + (i - p2) * PA_STRIP + l;
                    for (int q = q0; q < kp && q < q0 + PA_BP; q++) {
                        uint32_t v = 0;
                        if (r < W->rows)
                            v = row[2 * q] | (2 * q + 1 < K ? (uint32_t)row[2 * q + 1] << 16 : 0);
                        blk[(size_t)(q - q0) * ss * PA_STRIP] = v;
                    }
                }
            }
        }
    }
}

void kern_bf16_pack_panels_avx2(pool *p, uint32_t *dst, const kern_mat *W) {
    pa_pack_job j = {.W = W, .dst = dst};
    pool_for(p, pa_pack_halves, &j, (W->rows + PA_HALF - 1) / PA_HALF, 1);
}

/* The GEMM's panel of rows [r0, r0 + 16) (r0 a multiple of 16) x columns
 * [k0, k0 + kc) (k0 a multiple of PA_KC, kc <= PA_KC) from W's copy:
 * dst[k][16] as f32, what gemm_avx2.c's pack_panel makes of the weights
 * themselves. A panel is one strip pair and a GEMM block one of the copy's
 * column blocks, so the block is a single stream widened in place. */
void kern_bf16_copy_panel_avx2(float *dst, const kern_mat *W, int r0, int k0, int kc) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    int kp = (W->cols + 1) / 2, s, p2 = r0 % PA_HALF / PA_STRIP;
    const uint32_t *d = W->panels + pa_half_at(W, r0 / PA_HALF, &s);
    int ss = s - p2 < 2 ? s - p2 : 2;
    const uint32_t *blk = d + pa_block_at(kp, s, k0 / 2, p2);
    for (int q = 0; q < (kc + 1) / 2; q++) {
        const uint32_t *dq = blk + (size_t)q * ss * PA_STRIP;
        float *e = dst + (size_t)2 * q * 2 * PA_STRIP, *o = e + 2 * PA_STRIP;
        for (int u = 0; u < 2; u++) {
            __m256i v = u < ss ? _mm256_load_si256((const __m256i *)(dq + u * PA_STRIP))
                               : _mm256_setzero_si256();
            _mm256_store_ps(e + u * PA_STRIP, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
            if (2 * q + 1 < kc)
                _mm256_store_ps(o + u * PA_STRIP, _mm256_castsi256_ps(_mm256_and_si256(v, hi)));
        }
    }
}

/* Two strips' block from d (one strip if SS is 1), pairs [q0, q1), against
 * up to PA_FEW_T tokens' activations x (ldx apart) in registers: eight
 * chains, per pair two weight loads widened once for every token; each
 * chain from zero, added onto y's rows (ldy apart; rows past the matrix
 * not stored). odd: whether the last pair's high column exists. Each pair
 * step asks for the line at the same place in the next block (the next
 * 16 KiB in memory) into L2, so that the memory works while the FMAs run
 * (with more than 4 tokens, also while the later token tiles run from L1);
 * pf (the first token tile, which streams the block from memory) also
 * touches the page ahead. Against kern_stream_ahead's non-temporal lines a
 * page on, in alternating rounds over llama-1b's matrices from memory
 * (Zen 3, 2 threads): 1 token 28.8-29.2 against 25.9-27.1 GB/s in a fast
 * phase of the host, 12.0-12.7 against 10.5-11.8 in a slow one; 8 tokens
 * level (118 against 114 GFLOP/s); llama-1b decode with --pack-weights
 * 10.7-12.0 against 7.6-11.2 tok/s. Requesting the next block only from
 * the L1 passes (5 tokens on) had 8 tokens +4 % in the model, +7-14 % in
 * kbench. */
#define PA_FEW_T 4

AI void pa_few_tile(const uint32_t *d, const float *x, size_t ldx, int q0, int q1, bool odd,
                    float *y, size_t ldy, int rows, const int SS, const int T, const bool pf,
                    const int P) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    /* P strip pairs (SS 2 when P is 2): the second's block follows the
     * first's, q1 - q0 pairs of two strips on */
    const size_t next = (size_t)(q1 - q0) * SS * PA_STRIP;
    __m256 acc[2][2][PA_FEW_T];
#pragma GCC unroll 2
    for (int p = 0; p < P; p++)
#pragma GCC unroll 2
        for (int u = 0; u < SS; u++)
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) acc[p][u][t] = _mm256_setzero_ps();
    int qe = odd ? q1 : q1 - 1;
    for (int q = q0; q < qe; q++) {
#pragma GCC unroll 2
        for (int p = 0; p < P; p++) {
            const uint32_t *dq = d + p * next + (size_t)(q - q0) * SS * PA_STRIP;
            if (pf) kern_page_ahead(dq, (size_t)SS * PA_STRIP * sizeof(uint32_t));
            __builtin_prefetch((const char *)(dq + PA_BP * SS * PA_STRIP), 0, 2);
            __m256 we[2], wo[2];
#pragma GCC unroll 2
            for (int u = 0; u < SS; u++) {
                __m256i v = _mm256_load_si256((const __m256i *)(dq + u * PA_STRIP));
                we[u] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
                wo[u] = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
            }
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                __m256 xe = _mm256_broadcast_ss(x + t * ldx + 2 * q);
                __m256 xo = _mm256_broadcast_ss(x + t * ldx + 2 * q + 1);
#pragma GCC unroll 2
                for (int u = 0; u < SS; u++) {
                    acc[p][u][t] = _mm256_fmadd_ps(we[u], xe, acc[p][u][t]);
                    acc[p][u][t] = _mm256_fmadd_ps(wo[u], xo, acc[p][u][t]);
                }
            }
        }
    }
    if (qe < q1) /* the matrix's last column alone */
#pragma GCC unroll 2
        for (int p = 0; p < P; p++) {
            const uint32_t *dq = d + p * next + (size_t)(qe - q0) * SS * PA_STRIP;
#pragma GCC unroll 2
            for (int u = 0; u < SS; u++) {
                __m256i v = _mm256_load_si256((const __m256i *)(dq + u * PA_STRIP));
                __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
#pragma GCC unroll 4
                for (int t = 0; t < T; t++)
                    acc[p][u][t] = _mm256_fmadd_ps(we, _mm256_broadcast_ss(x + t * ldx + 2 * qe),
                                                   acc[p][u][t]);
            }
        }
#pragma GCC unroll 2
    for (int p = 0; p < P; p++)
#pragma GCC unroll 2
        for (int u = 0; u < SS; u++) {
            int vr = rows - (p * SS + u) * PA_STRIP;
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                float *c = y + t * ldy + (p * SS + u) * PA_STRIP;
                if (vr >= PA_STRIP) {
                    _mm256_storeu_ps(c, _mm256_add_ps(_mm256_loadu_ps(c), acc[p][u][t]));
                } else if (vr > 0) {
                    float a[PA_STRIP];
                    _mm256_storeu_ps(a, acc[p][u][t]);
                    for (int l = 0; l < vr; l++) c[l] += a[l];
                }
            }
        }
}

/* One instance per (strips, tokens, prefetch), each on its own (inlined
 * into the block loop the compiler would spill the accumulators). */
typedef void pa_few_fn(const uint32_t *d, const float *x, size_t ldx, int q0, int q1, bool odd,
                       float *y, size_t ldy, int rows);
#define PA_FEW_FN(SS, T, PF)                                                                       \
    static __attribute__((noinline)) void pa_few_##SS##_##T##_##PF(                                \
        const uint32_t *d, const float *x, size_t ldx, int q0, int q1, bool odd, float *y,         \
        size_t ldy, int rows) {                                                                    \
        pa_few_tile(d, x, ldx, q0, q1, odd, y, ldy, rows, SS, T, PF, 1);                           \
    }
#define PA_FEW_FNS(SS)                                                                             \
    PA_FEW_FN(SS, 1, 0)                                                                            \
    PA_FEW_FN(SS, 1, 1)                                                                            \
    PA_FEW_FN(SS, 2, 0)                                                                            \
    PA_FEW_FN(SS, 2, 1)                                                                            \
    PA_FEW_FN(SS, 3, 0)                                                                            \
    PA_FEW_FN(SS, 3, 1)                                                                            \
    PA_FEW_FN(SS, 4, 0)                                                                            \
    PA_FEW_FN(SS, 4, 1)
PA_FEW_FNS(1)
PA_FEW_FNS(2)
/* [strips - 1][tokens - 1][prefetch] */
static pa_few_fn *const pa_few_fns[2][PA_FEW_T][2] = {
    {{pa_few_1_1_0, pa_few_1_1_1},
     {pa_few_1_2_0, pa_few_1_2_1},
     {pa_few_1_3_0, pa_few_1_3_1},
     {pa_few_1_4_0, pa_few_1_4_1}},
    {{pa_few_2_1_0, pa_few_2_1_1},
     {pa_few_2_2_0, pa_few_2_2_1},
     {pa_few_2_3_0, pa_few_2_3_1},
     {pa_few_2_4_0, pa_few_2_4_1}},
};

/* One token against two strip pairs' blocks at once (32 rows, the
 * second block 16 KiB on), streaming them as the first token tile does:
 * four FMA chains in flight where one strip pair has two, each advancing
 * two dependent FMAs a pair, so that a pair's latency is not what paces
 * the stream. Each chain's order is the same: the same bits. Against one
 * strip pair at a time (Zen 3, 2 threads, alternating binaries): llama-1b
 * --pack-weights decode at batch 1 10.9-13.4 tok/s, mean 12.1, against
 * 10.9-12.3, mean 11.4, over seven pairs of runs; over llama-1b's
 * matrices from memory the copy's pace against the plain rows' level to
 * +10 % (the host's noise is as large). Two tokens the same way ran
 * 10-20 % slower than one strip pair at a time. */
static __attribute__((noinline)) void pa_one_two(const uint32_t *d, const float *x, int q0, int q1,
                                                 bool odd, float *y) {
    pa_few_tile(d, x, 0, q0, q1, odd, y, 0, 4 * PA_STRIP, 2, 1, true, 2);
}

typedef struct pa_few_job {
    const kern_mat *W;
    float *y;
    const float *x; /* n tokens' activations, rounded to bf16 values */
    const float *bias;
    int n;
} pa_few_job;

static void pa_few_halves(void *ctx, int lo, int hi) {
    const pa_few_job *j = ctx;
    const kern_mat *W = j->W;
    int K = W->cols, M = W->rows, kp = (K + 1) / 2, n = j->n;
    kern_start_rows(j->y, n, M, j->bias, lo * PA_HALF, hi * PA_HALF < M ? hi * PA_HALF : M);
    for (int h = lo; h < hi; h++) {
        int s, r0 = h * PA_HALF;
        const uint32_t *d = W->panels + pa_half_at(W, h, &s);
        for (int q0 = 0; q0 < kp; q0 += PA_BP) {
            bool last = q0 + PA_BP >= kp;
            int q1 = last ? kp : q0 + PA_BP;
            bool odd = !last || K % 2 == 0;
            for (int p2 = 0; p2 < s; p2 += 2) {
                int ss = s - p2 < 2 ? s - p2 : 2;
                const uint32_t *blk = d + pa_block_at(kp, s, q0, p2);
                if (n == 1 && s - p2 >= 4 && M - r0 - p2 * PA_STRIP >= 4 * PA_STRIP) {
                    pa_one_two(blk, j->x, q0, q1, odd, j->y + r0 + p2 * PA_STRIP);
                    p2 += 2;
                    continue;
                }
                for (int t0 = 0; t0 < n; t0 += PA_FEW_T) {
                    int T = n - t0 < PA_FEW_T ? n - t0 : PA_FEW_T;
                    pa_few_fns[ss - 1][T - 1][t0 == 0](blk, j->x + (size_t)t0 * K, (size_t)K, q0,
                                                       q1, odd,
                                                       j->y + (size_t)t0 * M + r0 + p2 * PA_STRIP,
                                                       (size_t)M, M - r0 - p2 * PA_STRIP);
                }
            }
        }
    }
}

void kern_bf16_few_packed_avx2(pool *p, const kern_mat *W, float *y, const float *x, int n,
                               const float *bias) {
    pa_few_job j = {.W = W, .y = y, .x = x, .bias = bias, .n = n};
    pool_for(p, pa_few_halves, &j, (W->rows + PA_HALF - 1) / PA_HALF, 1);
}
