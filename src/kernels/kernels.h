/* kernels.h — the CPU compute kernels every model runs on.
 *
 * Weights are row-major matrices W[rows][cols] as Hugging Face stores a
 * Linear's weight (rows = output features, cols = input features). Activations
 * are f32, row-major, one row per token; a bf16 matmul multiplies them rounded
 * to bf16 (products exact, sums in f32), as bf16 models compute. Each kernel has a portable scalar
 * path and an AVX2/FMA path picked at run time (kern_init); tests force the
 * scalar path with kern_force_scalar to check both. On CPUs with AVX-512 the
 * prefill GEMM runs 512-bit FMAs in the same order (the same bits);
 * kern_force_avx2 keeps it on 256-bit ones.
 *
 * Determinism: every output element is reduced in a fixed order that does not
 * depend on the thread count. With kern_set_batch_invariant(true) it does not
 * depend on the number of rows (tokens) in the call either, so a token's
 * result is bit-identical whatever it is batched with. */
#ifndef DI_KERNELS_H
#define DI_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/pool.h"

typedef enum {
    KT_F32 = 0, /* float */
    KT_BF16,    /* uint16_t, bfloat16 */
    KT_F16,     /* uint16_t, IEEE half (stored only; converted at load) */
    KT_I8,      /* int8_t in [-127, 127] with f32 scales, symmetric, per row or per group */
} kern_dtype;

typedef struct kern_mat {
    kern_dtype dtype;
    int rows, cols;
    const void *data;       /* rows * cols elements of dtype */
    const float *scales;    /* KT_I8 only: rows * (cols / group) scales, row-major */
    int group;              /* KT_I8 only: columns per scale; == cols means per row */
    const uint32_t *panels; /* optional: kern_pack_panels' copy (bf16, int8), or NULL */
} kern_mat;

/* Picks the best implementation for this CPU. Safe to call more than once. */
void kern_init(void);
/* For tests: use the scalar path (true) or the best one (false). */
void kern_force_scalar(bool on);
/* For tests: the AVX2 paths even where AVX-512 is present. */
void kern_force_avx2(bool on);
/* Name of the active path ("avx2+avx512+bf16", "avx2+avx512", "avx2",
 * "scalar"). */
const char *kern_isa(void);
void kern_set_batch_invariant(bool on);

/* y[t][r] = sum_c x[t][c] * W[r][c] + (bias ? bias[r] : 0), for t < n.
 * x: n x W.cols, y: n x W.rows (y must not alias x). Parallel over pool p
 * (NULL = calling thread only). n == 1 is the bandwidth-bound decode case;
 * larger n is the FLOP-bound prefill case (blocked GEMM). */
void kern_matmul(pool *p, float *y, const float *x, const kern_mat *W, const float *bias, int n);
/* One token's activations prepared once for one-token matmuls on the
 * calling thread over several bands of matrices with W's dtype and columns
 * (the rows of a list of experts laid end to end, each thread taking its
 * bands): kern_one_act_bytes(W) bytes (0 where the kernels take x as it
 * is), 64-byte aligned, filled by kern_one_act_prepare; kern_matmul_one
 * then gives y = W x, bit for bit kern_matmul(NULL, y, x, W, NULL, 1),
 * without preparing x again (act NULL: it does). */
size_t kern_one_act_bytes(const kern_mat *W);
void kern_one_act_prepare(void *act, const float *x, const kern_mat *W);
void kern_matmul_one(float *y, const void *act, const float *x, const kern_mat *W);
/* Batch-invariant mode sums a bf16 or int8 matmul's outputs with rows side
 * by side in the vector lanes; for one token without a packed copy of the
 * weights in that layout the kernel transposes the rows as it streams them,
 * at 55-60 % of a plain token's pace, and with one it streams the copy at
 * the plain pace (batches read W->data, but on the AVX2 layout, which runs
 * every n from the copy and a few tokens faster than the plain kernels do).
 * kern_panels_bytes: the bytes of that copy for W on this CPU (bf16
 * weights with AVX2, laid out for AVX-512 BF16 where that runs; int8 with
 * AVX-512 VNNI), 0 where no kernel would read one; kern_pack_panels writes
 * it to dst (64-byte aligned), to be set as W->panels. The bits are the
 * same with it or without. A copy is read by the kernels of the CPU
 * features it was packed under: pack again after kern_force_avx2 or the
 * like. */
size_t kern_panels_bytes(const kern_mat *W);
void kern_pack_panels(pool *p, uint32_t *dst, const kern_mat *W);
/* Whether W's copy, once set, is all the kernels read of W, in either mode
 * and at every n (bf16 on the AVX2 layout, where there is no AVX-512
 * BF16): plain mode then reads it too (the same bits as batch-invariant
 * mode), and W->data may be released. */
bool kern_panels_only(const kern_mat *W);
/* Whether the view kern_mat_rows(W, r0, n) keeps W's packed copy; and the
 * rows of the copy's groups (bf16 128, int8 16; 1 where W has none): views
 * that start on one and end on one or at W's end keep it. */
bool kern_panels_view(const kern_mat *W, int r0, int n);
int kern_panels_group(const kern_mat *W);

/* Whether int8 prefill (plain mode, more than KERN_GEMM_MIN_N tokens) of a
 * matrix with this group (<= 0 or cols: one scale per row) and cols runs on
 * bf16 dot products: on CPUs with AVX-512 BF16, for one scale per row or
 * groups that divide the bf16 GEMM's column blocks or are multiples of them. */
bool kern_i8_prefill_on_bf16(int group, int cols);

/* Quantizes an f32 matrix to symmetric int8 with one scale per `group`
 * columns (group must divide cols; group == cols: per row). q: rows*cols,
 * scales: rows*(cols/group). */
void kern_quantize_i8(int8_t *q, float *scales, const float *w, int rows, int cols, int group);

/* Element conversions. */
float kern_bf16_to_f32(uint16_t h);
uint16_t kern_f32_to_bf16(float f); /* round to nearest even */
float kern_f16_to_f32(uint16_t h);
float kern_fp8e4m3_to_f32(uint8_t v);
/* Row r of W (any dtype) as f32: embedding lookup. */
void kern_row_f32(float *out, const kern_mat *W, int r);
/* Bytes per element of a dtype's data. */
size_t kern_dtype_size(kern_dtype t);
/* Rows [r0, r0 + n) of W: a view sharing W's memory (and its int8 scales). */
kern_mat kern_mat_rows(const kern_mat *W, int r0, int n);
/* Rows per pool_for grain when one token's matmul with a matrix of `cols`
 * columns of dtype t is split over threads: about 64 KB of weights, so a
 * thread that takes grains from another's share still reads long sequential
 * runs and the threads end within about a microsecond of each other; a
 * multiple of 16 rows, so every row of a band is reduced exactly as in the
 * whole matrix in every mode. */
int kern_one_token_grain(kern_dtype t, int cols);
/* Starts loading the head of [p, p + bytes) (at most a page), rows the
 * attention helpers are about to read side by side: they prefetch only
 * ahead of the rows they read (K rows side by side a page on), so a run
 * that does not follow on from the one before would start cold. */
void kern_prefetch_start(const void *p, size_t bytes);

/* Vector helpers used by attention and norms (n elements). */
float kern_dot(const float *a, const float *b, int n);
void kern_axpy(float *y, float a, const float *x, int n); /* y += a*x */
void kern_scale(float *y, float a, int n);                /* y *= a */
void kern_add(float *y, const float *x, int n);           /* y += x */
/* Attention over a run of m cache rows, each bit for bit the per-row helper:
 * for n_a query vectors a + h*n at once (each row read once for all of them)
 * out[h*ld + i] = kern_dot(a + h*n, b + i*stride, n); and y += a[i] *
 * (x + i*stride) by kern_axpy for i = 0, 1, ... m-1 in turn. The cache rows
 * of the _heads helpers are f32 or bf16 (bt / xt is KT_F32 or KT_BF16;
 * stride counts elements): a bf16 row counts as its f32 values, exactly. */
void kern_dot_heads(float *out, size_t ld, const float *a, int n_a, const void *b, kern_dtype bt,
                    size_t stride, int m, int n);
void kern_axpy_rows(float *y, const float *a, const float *x, size_t stride, int m, int n);
/* kern_axpy_rows for n_a heads at once (each V row read once for all):
 * y + h*ldy gets the rows weighted by a + h*lda, for h < n_a, bit for bit. */
void kern_axpy_heads(float *y, size_t ldy, const float *a, size_t lda, int n_a, const void *x,
                     kern_dtype xt, size_t stride, int m, int n);
/* Rows of bf16 values to f32 and back (kern_bf16_to_f32 / kern_f32_to_bf16
 * per element). */
void kern_bf16_row_to_f32(float *dst, const uint16_t *src, size_t n);
void kern_f32_row_to_bf16(uint16_t *dst, const float *src, size_t n);

/* out = x / rms(x) * w (w may be NULL: no weight). out may alias x. */
void kern_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* The index of the largest of x[0 .. n): the first of equal ones, NaNs
 * never taken; where nothing exceeds -inf, the first -inf, else 0. */
int kern_argmax(const float *x, int n);
/* In-place softmax; the _scaled one of x[i] * scale (the products rounded
 * as a separate pass would round them: the same bits, one pass fewer). */
void kern_softmax(float *x, int n);
void kern_softmax_scaled(float *x, int n, float scale);
/* out[i] = silu(gate[i]) * up[i]; out may be gate */
void kern_silu_mul(float *out, const float *gate, const float *up, int n);

/* Rotary embedding on one head vector x of `dim` rotated dims, using
 * per-pair cos/sin tables (dim/2 entries each).
 * interleaved = true: pairs (x[2i], x[2i+1]) (DeepSeek reference order);
 * false: pairs (x[i], x[i + dim/2]) (Llama/HF half-split order). */
void kern_rope(float *x, const float *cos, const float *sin, int dim, bool interleaved);

/* Machine limits measured in the same run as a benchmark (2 threads on the
 * pool): streaming read bandwidth in GB/s over a buffer much larger than the
 * last-level cache, and fp32 FMA peak in GFLOP/s. */
double kern_measure_read_bandwidth(pool *p, size_t bytes);
/* The read that measures it, pass by pass, for timing between other work
 * (the benchmark interleaves it with decode steps): a buffer of `bytes`
 * (at least 1 MiB, whole pages) in huge pages, touched once at creation;
 * each pass reads all of it with every thread of p, the lines prefetched as
 * the one-token kernels prefetch theirs (l2: as the AVX2 kernels do), and
 * returns its seconds. */
typedef struct kern_read_probe kern_read_probe;
kern_read_probe *kern_read_probe_new(size_t bytes);
size_t kern_read_probe_bytes(const kern_read_probe *r);
double kern_read_probe_pass(pool *p, const kern_read_probe *r, bool l2);
void kern_read_probe_free(kern_read_probe *r);
double kern_measure_fma_peak(pool *p);
/* The peak of the bf16 dot products bf16 matmuls run on (AVX-512 BF16), in
 * GFLOP/s; 0 where the CPU has none (bf16 matmuls then run on FMAs). */
double kern_measure_bf16_dot_peak(pool *p);
/* The peak of the int8 dot products (vpdpbusd, AVX-512 VNNI) int8 batched
 * decode runs on, in GOP/s (a multiply-add counted as two); 0 without. */
double kern_measure_i8_dot_peak(pool *p);

/* `deepinfer bench --kernels`: prints to stdout one line per figure (the two
 * limits, decode GEMV GB/s and % of bandwidth, GEMM GFLOP/s and % of peak). */
void kern_bench_report(pool *p);

#endif
