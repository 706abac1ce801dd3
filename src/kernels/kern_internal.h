/* kern_internal.h — what the kernel files share among themselves (not part of
 * the public kernels.h): the dispatch switches, the AVX2 entry points, and the
 * int8 activation-quantization layout both matmul paths agree on. */
#ifndef DI_KERN_INTERNAL_H
#define DI_KERN_INTERNAL_H

#include <string.h>

#include "kernels/kernels.h"

/* Dispatch state (kernels.c): is the AVX2 path active, may it use AVX-512,
 * is batch-invariant on. */
bool kern_use_avx2(void);
bool kern_use_avx512(void);      /* AVX-512 F, BW, VL */
bool kern_use_avx512_vnni(void); /* ... and VNNI */
bool kern_use_avx512_bf16(void); /* ... and BF16 */
/* For tests and benchmarks: the paths for AVX-512 without BF16 on a CPU
 * that has it (true), or the best ones again (false). */
void kern_force_no_avx512_bf16(bool on);
bool kern_batch_inv(void);

/* Per-thread scratch that only grows, 64-byte aligned, one buffer per slot:
 * the activations and panels a matmul packs on every call. Allocated per
 * call, buffers of a few hundred KiB went back to the kernel when freed and
 * faulted in afresh on the next call (about 20 us a page on some VMs: more
 * than the matmul at 16 tokens). Freed when the thread exits. */
enum {
    KERN_SCRATCH_ACT,     /* the activations in the form the kernel takes them */
    KERN_SCRATCH_ACT2,    /* a second form of them (packed, or their scales) */
    KERN_SCRATCH_PANEL,   /* a task's packed weight panels */
    KERN_SCRATCH_ROUNDED, /* bf16 without bf16 dot products: the activations rounded */
    KERN_SCRATCH_SLOTS
};
void *kern_scratch(int slot, size_t bytes);

/* Streaming weights from memory: the hardware's stream prefetchers work
 * within 4 KiB pages and pick a stream up again only after demand loads
 * have missed in the next page. A plain read runs far enough ahead of
 * itself for that not to matter; a dot-product kernel, with several times
 * the instructions per byte, does not, and stalls at every page. One
 * prefetch KERN_PAGE_AHEAD bytes on, as a stream enters a page, starts the
 * pages after it early. Measured streaming llama-1b's 65 matrices (2 MiB
 * pages, 2 threads, alternating with the unchanged kernel in one process):
 * bf16 one token +36-38 %, int8 one token +20-24 %, a plain read +11-13 %;
 * 4, 8 and 12 KiB ahead alike, T0 and T1 alike, more lines per page no
 * better. Called once per `step` bytes (at most a page) of a stream at p.
 * Always inlined: GCC 12 takes a function whose only statement is a
 * prefetch for one without effects and deletes the calls where it did not
 * inline it early (a larger caller lost every prefetch that way). */
#define KERN_PAGE       4096
#define KERN_PAGE_AHEAD 8192
static inline __attribute__((always_inline)) void kern_page_ahead(const void *p, size_t step) {
    uintptr_t a = (uintptr_t)p, last = a + step - 1, page = ~(uintptr_t)(KERN_PAGE - 1);
    if (((a - 1) ^ last) & page) /* [a, a + step) starts a page or enters one */
        __builtin_prefetch((const char *)(last & page) + KERN_PAGE_AHEAD);
}

/* The one-token kernels' weight stream, `step` bytes at p (whole lines, at
 * most a page) at a time: the page touch above, and each line prefetched a
 * page on with the non-temporal hint (locality 0, prefetchnta), which keeps
 * the stream from pushing the token's activations out of L1: reread from
 * L2 they took the L1 misses the stream needed. Measured on llama-1b's 65
 * matrices, alternating with the kernels without it: int8 rows (2 bytes of
 * activations a weight byte, 16 KiB for a row of 8192) at 1 token +11 %, 2
 * tokens +27 %, 3 tokens +14 % (medians of 12-16 rounds), int8 decode
 * 45.7 -> 50.3 tok/s (medians of 6 alternating runs); bf16 rows +3-5 %,
 * decode +2-4 %. Confining the int8 activations to 4 KiB (wrong sums, a
 * probe) had run rows of 16384 columns at 47-67 GB/s against 37. The T0
 * hint at the same distance was 4 % slower than none; 2 or 8 KiB on, or a
 * line in two, gained less. */
#define KERN_NTA_AHEAD 4096
static inline __attribute__((always_inline)) void kern_stream_ahead(const void *p, size_t step) {
    kern_page_ahead(p, step);
    for (size_t l = 0; l < step; l += 64)
        __builtin_prefetch((const char *)p + KERN_NTA_AHEAD + l, 0, 0);
}

/* The same stream for the kernels of CPUs without AVX-512 (measured on a
 * Zen 3, where those run): the page touch, and each line requested
 * KERN_L2_AHEAD bytes on into L2 (prefetcht1), which does not take L1 from
 * the activations either. Against kern_stream_ahead, alternating rounds
 * over llama-1b's matrices from memory, 2 threads: bf16 rows at 1 token
 * 30.3-33.5 against 26.1-29.3 GB/s, 2 tokens +9 %, 3 tokens +8 %; int8 rows
 * at 1 token 34.4 against 29.0, 2 tokens level; f32 rows +5-11 %; 32 KiB
 * on did as well, 16 KiB on less. The AVX-512 kernels keep the other: they
 * were measured on a Zen 5, where it was chosen. */
#define KERN_L2_AHEAD 8192
static inline __attribute__((always_inline)) void kern_stream_ahead_l2(const void *p, size_t step) {
    kern_page_ahead(p, step);
    for (size_t l = 0; l < step; l += 64)
        __builtin_prefetch((const char *)p + KERN_L2_AHEAD + l, 0, 2);
}

/* Int8 matmul: activations are quantized on the fly to int8 in blocks of
 * KQ_BLOCK columns (one f32 scale per block, llama.cpp Q8_0 style), so the
 * dot product runs on integers. Needs every block inside one weight group:
 * group % KQ_BLOCK == 0, or group == cols (one scale per row). */
#define KQ_BLOCK 32
bool kern_i8_blockable(const kern_mat *W);
/* Quantizes one activation row of `cols` values: q gets cols int8 in
 * [-127, 127], s gets ceil(cols / KQ_BLOCK) scales. */
void kern_quantize_act(int8_t *q, float *s, const float *x, int cols);
/* The portable version and the AVX2 one (matmul_avx2.c), which
 * kern_quantize_act picks between; both give identical bytes and scales. */
void kern_quantize_act_scalar(int8_t *q, float *s, const float *x, int cols);
void kern_quantize_act_avx2(int8_t *q, float *s, const float *x, int cols);

/* Scalar reference path for every dtype (matmul.c). Reduction per output
 * element is sequential over columns; independent of n and of threads. */
void kern_matmul_scalar(pool *p, float *y, const float *x, const kern_mat *W, const float *bias,
                        int n);

/* AVX2 matmul (matmul_avx2.c). Returns false when it does not handle this
 * case (the caller falls back to the scalar path). */
bool kern_matmul_avx2(pool *p, float *y, const float *x, const kern_mat *W, const float *bias,
                      int n, bool batch_inv);

/* Tokens per token tile of the small-n matmul, at most (its partial sums
 * live on the stack). */
#define KERN_SB_TILE_MAX 48

/* The bf16 row block of the small-n matmul with AVX-512 (matmul_avx512.c):
 * y rows [r0, r0 + R) for tokens [t_lo, t_hi) (at most KERN_SB_TILE_MAX) of
 * x (n x cols), plus bias; xp holds x with each 32-column block split into
 * even then odd columns (kern_split_even_odd32_avx512), ldx floats a row. */
void kern_sb_rows_bf16_avx512(const kern_mat *W, float *y, const float *x, const float *xp,
                              size_t ldx, const float *bias, int r0, int R, int t_lo, int t_hi);
void kern_split_even_odd32_avx512(float *xp, size_t ldx, const float *x, int n, int K);
/* The same for int8 weights with AVX-512 VNNI (matmul_i8_avx512.c), on the
 * activations quantized by kern_quantize_act (xq n x cols, xs n x nb block
 * scales) and their blocks' starts (xst n x nb, kern_i8_block_starts); rows
 * in tiles of KERN_I8_TILE_ROWS. */
#define KERN_I8_TILE_ROWS 16
void kern_sb_rows_i8_avx512(const kern_mat *W, float *y, const int8_t *xq, const float *xs,
                            const int32_t *xst, int nb, const float *bias, int r0, int R, int t_lo,
                            int t_hi);
/* Batch-invariant mode's packed copy of an int8 matrix (kern_pack_panels):
 * each 16-row tile's 32-column blocks as those tiles transpose them; its
 * size, the packing, and one token on it (the tiles' order: the same bits),
 * on xq / xs / xst as for kern_sb_rows_i8_avx512. */
size_t kern_i8_panels_bytes(const kern_mat *W);
void kern_i8_pack_panels(pool *p, uint32_t *dst, const kern_mat *W);
void kern_i8_one_packed_avx512(pool *p, const kern_mat *W, float *y, const int8_t *xq,
                               const float *xs, const int32_t *xst, int nb, const float *bias);
/* st[t * nb + b] = -128 times the sum of token t's quantized activations in
 * block b (nb blocks of KQ_BLOCK columns, the last one partial). */
void kern_i8_block_starts(int32_t *st, const int8_t *xq, int n, int K);
/* bf16 weights times 2 to KERN_BF16_FEW_MAX tokens on AVX-512 BF16 (in
 * batch-invariant mode in that mode's order), 16 lanes = 8 tokens x 2
 * pairs, up to three halves of 8 tokens, or in plain mode up to
 * kern_l1_tokens(cols) tokens a row at a time (matmul_bf16_few_avx512.c);
 * xb: the tokens' activations rounded to bf16, rows ldx apart, zero from
 * column K to a multiple of 4. */
#define KERN_BF16_FEW_MAX 24
extern int kern_few_touch; /* matmul_bf16_few_avx512.c: its tiles' page touch, on */
void kern_bf16_few_avx512(pool *p, float *y, const uint16_t *xb, size_t ldx, const kern_mat *W,
                          const float *bias, int n);
/* bf16 weights times one token in batch-invariant mode on AVX-512 BF16, in
 * that mode's order (matmul_bf16_inv1_avx512.c); xb: the token's
 * activations rounded to bf16, zero from column K to a multiple of 32. */
void kern_bf16_inv1_avx512(pool *p, float *y, const uint16_t *xb, const kern_mat *W,
                           const float *bias);
/* Tokens whose activations, two bytes a column (bf16 or int16), a
 * few-token kernel reads per weight step of a row rather than sharing
 * broadcast weights across: two always, more while they take less than
 * KERN_L1_ACT_BYTES, where they stay in L1 beside the weight stream (and
 * past which those kernels fall behind the ones that broadcast), at most
 * KERN_L1_TOKENS_MAX. */
#define KERN_L1_ACT_BYTES  (32 << 10)
#define KERN_L1_TOKENS_MAX 8
static inline int kern_l1_tokens(int cols) {
    size_t n = (KERN_L1_ACT_BYTES - 1) / ((size_t)(cols > 0 ? cols : 1) * 2);
    return n < 2 ? 2 : n > KERN_L1_TOKENS_MAX ? KERN_L1_TOKENS_MAX : (int)n;
}

/* Up to kern_i8_x16_max(cols) int8 tokens in plain mode on AVX-512 VNNI
 * (matmul_avx512.c): their activations quantized to int16, one scale per
 * block of `block` columns, once per call (kern_i8_x16_prepare from the f32
 * activations, into kern_i8_x16_bytes of 64-byte aligned memory), then rows
 * [r0, r1) of y. For weights with one scale per row or groups of a multiple
 * of 32 columns that divide the row (kern_i8_x16_fits). The tokens whose
 * activations fit in L1 (kern_l1_tokens), KERN_I8_X16_MAX at most: each
 * token's instructions slow the stream, and from 6 tokens the 16-row lanes
 * (matmul_i8_avx512.c) are level or ahead even at 2048 columns. */
#define KERN_I8_X16_MAX 5
static inline int kern_i8_x16_max(int cols) {
    int n = kern_l1_tokens(cols);
    return n < KERN_I8_X16_MAX ? n : KERN_I8_X16_MAX;
}
typedef struct kern_i8_x16 {
    const void *base; /* token t's int16 row at base + t * ld, zero to `padded`
                         columns, then its block scales (floats) */
    size_t ld, padded;
    int block; /* columns per block: 128, 64 or 32 */
    int n;     /* tokens */
} kern_i8_x16;
bool kern_i8_x16_fits(const kern_mat *W);
size_t kern_i8_x16_bytes(int cols, int n);
void kern_i8_x16_prepare(kern_i8_x16 *a, void *buf, const float *x, const kern_mat *W, int n);
void kern_i8_x16_rows_avx512(const kern_mat *W, float *y, const kern_i8_x16 *a, const float *bias,
                             int r0, int r1);
/* bf16 weights times one token in plain mode on CPUs with AVX-512 but no
 * BF16 dot products (matmul_avx512.c): rows [r0, r1) of y, one after
 * another; xb: the token's activations in bf16 (exact: they are rounded). */
void kern_bf16_one_rows_avx512(const kern_mat *W, float *y, const uint16_t *xb, const float *bias,
                               int r0, int r1);
/* f32 weights times one token in plain mode on CPUs with AVX-512
 * (matmul_avx512.c): rows [r0, r1) of y, one after another. */
void kern_f32_one_rows_avx512(const kern_mat *W, float *y, const float *x, const float *bias,
                              int r0, int r1);
/* bf16, f32 and int8 (kern_i8_blockable) weights times 1 to
 * KERN_ONE_ROWS_MAX tokens in plain mode with AVX2 (matmul_one_avx2.c):
 * rows [r0, r1) of y, one after another, each weight step read once for
 * every token. Taken by bf16 and f32 without AVX-512, by int8 where neither
 * the int16 rows nor the 16-row lanes (matmul_avx512.c, matmul_i8_avx512.c)
 * do. llama-1b under DEEPINFER_ISA=avx2 on Zen 5, against the 4-row blocks
 * of matmul_avx2.c: decode at batch 1 bf16 15.2-16.1 -> 20.8-21.9 tok/s,
 * int8 31.2-32.0 -> 41.2-45.0, f32 8.5-9.4 -> 11.3-12.0 (alternating runs);
 * batch 2 bf16 29.5 -> 35.5, int8 53.6 -> 56.1; batch 3 bf16 30.6 -> 38.5,
 * int8 59.2 -> 63.3 (one bench run each). bf16 activations read in bf16
 * rather than as split f32 columns (the same products), llama-1b's 16
 * matrices of a four-layer stretch streamed at 1, 2, 3 tokens (best of 5):
 * 72.7 -> 75.0-78.4, 50.4-51.2 -> 57.1-60.8, 40.8-40.9 -> 42.1-46.4 GB/s;
 * the 2048 x 8192 rows alone at 2 tokens 40 -> 57-59; decode at batch 1
 * 24.0-24.6 -> 25.2-25.7 tok/s (three alternating runs). */
#define KERN_ONE_ROWS_MAX 3
typedef struct kern_one_rows {
    const kern_mat *W;
    float *y; /* n x rows */
    const float *bias;
    int n;
    const float *x;     /* bf16, f32: the tokens' activations, rows cols apart */
    const uint16_t *xb; /* bf16: the same in bf16 (exact: a bf16 matmul's are rounded) */
    size_t ldxb;        /* elements from one token's row of xb to the next */
    const int8_t *xq;   /* int8: the activations quantized by kern_quantize_act, rows cols apart */
    const float *xs;    /* their block scales, rows nb apart */
    int nb;
} kern_one_rows;
void kern_one_rows_avx2(const kern_one_rows *o, int r0, int r1);

/* Every bf16 matmul on CPUs with AVX-512 BF16 (matmul_bf16_avx512.c):
 * vdpbf16ps on the activations rounded to bf16; one-token rows, the
 * few-token kernel and the token lanes for decode, a packed GEMM for
 * prefill (batch-invariant mode: one order for all). */
void kern_matmul_bf16_avx512(pool *p, float *y, const float *x, const kern_mat *W,
                             const float *bias, int n);
/* Its one-token rows in plain mode on activations already rounded
 * (kern_one_act_prepare): the padded row's length in elements, the
 * rounding, and all of W's rows on the calling thread. */
size_t kern_bf16_one_ldx(int cols);
void kern_bf16_one_prepare(uint16_t *xb, const float *x, int cols);
void kern_bf16_one_prepared(float *y, const uint16_t *xb, const kern_mat *W);
/* The GEMM's packed panels of a bf16 matrix, all of them at once
 * (kern_pack_panels): their size in bytes, and the packing. */
#define KERN_PANEL_GROUP_ROWS 128 /* rows per group of the packed panels */
#define KERN_PANEL_ROWS       16  /* rows per panel: the copy's size counts whole ones */
size_t kern_bf16_panels_bytes(const kern_mat *W);
void kern_bf16_pack_panels(pool *p, uint32_t *dst, const kern_mat *W);
/* The same copy's size and groups laid out for AVX2 (panels_avx2.c), where
 * there is no AVX-512 BF16; n tokens (a few: up to KERN_GEMM_MIN_N)
 * through it in the AVX2 GEMM's order; and one of the GEMM's f32 panels
 * (16 rows from r0 x kc columns from k0, a column block) widened from it. */
void kern_bf16_pack_panels_avx2(pool *p, uint32_t *dst, const kern_mat *W);
void kern_bf16_few_packed_avx2(pool *p, const kern_mat *W, float *y, const float *x, int n,
                               const float *bias);
void kern_bf16_copy_panel_avx2(float *dst, const kern_mat *W, int r0, int k0, int kc);
/* int8 weights through that GEMM (their integers are exact in bf16), for
 * prefill in plain mode, where kern_i8_prefill_on_bf16 says so.
 * KERN_BF16_GEMM_KC: that GEMM's columns per block. */
#define KERN_BF16_GEMM_KC 512
void kern_matmul_i8_gemm_avx512(pool *p, float *y, const float *x, const kern_mat *W,
                                const float *bias, int n);
/* dst = src rounded to bf16 values (kern_f32_to_bf16, kept as f32): what a
 * bf16 matmul multiplies the weights by. dst may be src. */
void kern_round_bf16(float *dst, const float *src, size_t n);
void kern_round_bf16_scalar(float *dst, const float *src, size_t n);
void kern_round_bf16_avx2(float *dst, const float *src, size_t n);

/* Blocked AVX2 GEMM for prefill (gemm_avx2.c); used above KERN_GEMM_MIN_N
 * tokens outside batch-invariant mode (below it the weight-streaming kernel
 * measured faster). Any dtype; int8 needs blockable groups. */
#define KERN_GEMM_MIN_N 32
/* Its columns per block: the batch-invariant order's blocks (each block's
 * chain added onto y in turn), which panels_avx2.c follows too. */
#define KERN_GEMM_AVX2_KC 512
void kern_gemm_avx2(pool *p, float *y, const float *x, const kern_mat *W, const float *bias, int n);

/* The AVX-512 register tile of the blocked GEMM (gemm_avx512.c): tokens
 * [0, mr) (mr <= KERN_GEMM512_MR) of x times np (1 or 2) packed panels
 * ([k][16] f32, pstride floats apart), added onto c. Same arithmetic as the
 * AVX2 tile, so the same bits. */
#define KERN_GEMM512_MR 12
void kern_gemm_tile_avx512(const float *pw, size_t pstride, int np, const float *x, size_t ldx,
                           int kc, float *c, size_t ldc, int mr);

/* AVX2 vector helpers (ops_avx2.c), same contracts as kernels.h. */
float kern_dot_avx2(const float *a, const float *b, int n);
void kern_axpy_avx2(float *y, float a, const float *x, int n);
void kern_dot_rows_avx2(float *out, const float *a, const float *b, size_t stride, int m, int n);
void kern_dot_heads_avx2(float *out, size_t ld, const float *a, int n_a, const float *b,
                         size_t stride, int m, int n);
void kern_axpy_rows_avx2(float *y, const float *a, const float *x, size_t stride, int m, int n);
/* The attention helpers with AVX-512 (ops_avx512.c): the AVX2 ones' bits,
 * on f32 rows, or bf16 rows (bf) widened as they are loaded. */
void kern_dot_heads_avx512(float *out, size_t ld, const float *a, int n_a, const void *b, bool bf,
                           size_t stride, int m, int n);
void kern_axpy_heads_avx512(float *y, size_t ldy, const float *a, size_t lda, int n_a,
                            const void *x, bool bf, size_t stride, int m, int n);
/* Softmax and SiLU with 16 lanes (ops_avx512.c): the AVX2 ones' bits. */
void kern_softmax_avx512(float *x, int n, float scale);
void kern_silu_mul_avx512(float *out, const float *gate, const float *up, int n);
/* The f32 helpers on bf16 rows widened a chunk at a time (kernels.c). */
void kern_dot_heads_widened(float *out, size_t ld, const float *a, int n_a, const uint16_t *b,
                            size_t stride, int m, int n);
void kern_axpy_heads_widened(float *y, size_t ldy, const float *a, size_t lda, int n_a,
                             const uint16_t *x, size_t stride, int m, int n);
/* e^x as ops_avx2.c's exp8 and ops_avx512.c's exp16 compute it, lane for
 * lane the same operations on these constants: x clamped to
 * [KEXP_MIN, KEXP_MAX] (below KEXP_MIN: 0), x = n ln2 + r with ln2 in two
 * parts, then a degree-5 polynomial in r times 2^n. */
#define KEXP_MAX    88.3762626647949f
#define KEXP_MIN    -87.3365447504f
#define KEXP_LOG2E  1.44269504088896341f
#define KEXP_LN2_HI 0.693359375f
#define KEXP_LN2_LO -2.12194440e-4f
#define KEXP_P0     1.9875691500E-4f
#define KEXP_P1     1.3981999507E-3f
#define KEXP_P2     8.3334519073E-3f
#define KEXP_P3     4.1665795894E-2f
#define KEXP_P4     1.6666665459E-1f
#define KEXP_P5     5.0000001201E-1f
void kern_scale_avx2(float *y, float a, int n);
void kern_add_avx2(float *y, const float *x, int n);
void kern_rmsnorm_avx2(float *out, const float *x, const float *w, int n, float eps);
void kern_softmax_avx2(float *x, int n, float scale);
int kern_argmax_avx2(const float *x, int n);
/* kern_rope's pairs 0 .. k - 1 with 8 lanes, its bits (products and
 * sums rounded as the scalar loop rounds them); returns k, a multiple of 4
 * (interleaved) or 8, the pairs left to that loop. */
int kern_rope_avx2(float *x, const float *cos, const float *sin, int dim, bool interleaved);
void kern_silu_mul_avx2(float *out, const float *gate, const float *up, int n);
void kern_row_bf16_avx2(float *out, const uint16_t *row, int n);

/* Rows [lo, hi) of each of the n tokens' outputs (y: n x M) set to the bias
 * (or zero): where the GEMMs start their sums. */
static inline void kern_start_rows(float *y, int n, int M, const float *bias, int lo, int hi) {
    for (int t = 0; t < n; t++) {
        float *yt = y + (size_t)t * M;
        if (bias)
            memcpy(yt + lo, bias + lo, (size_t)(hi - lo) * sizeof(float));
        else
            memset(yt + lo, 0, (size_t)(hi - lo) * sizeof(float));
    }
}

/* The integer dot product of int8 columns [k0, k1) of a weight row w and
 * quantized activations x, in scalar: the int8 kernels' tails past their
 * last whole vector (at most one activation block; the caller scales it). */
static inline float kern_i8_dot_tail(const int8_t *w, const int8_t *x, int k0, int k1) {
    int32_t is = 0;
    for (int c = k0; c < k1; c++) is += (int32_t)w[c] * x[c];
    return (float)is;
}

/* Splits [0, total) into n_tasks contiguous ranges aligned to `align`. */
static inline void kern_split(int total, int align, int task, int n_tasks, int *lo, int *hi) {
    int units = (total + align - 1) / align;
    int a = (int)((long long)units * task / n_tasks);
    int b = (int)((long long)units * (task + 1) / n_tasks);
    *lo = a * align < total ? a * align : total;
    *hi = b * align < total ? b * align : total;
}

#endif
