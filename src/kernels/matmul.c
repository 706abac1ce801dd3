/* matmul.c — kern_matmul's entry point and its portable scalar path.
 *
 * A bf16 matmul multiplies by the activations rounded to bf16 (as a bf16
 * model does on accelerators): on CPUs with AVX-512 BF16 by vdpbf16ps
 * (matmul_bf16_avx512.c) at every n; elsewhere the activations are rounded
 * here and the f32 kernels multiply them exactly.
 *
 * The entry point hands the call to the AVX2 implementation when it is active
 * and handles the case; otherwise the scalar path here runs. The scalar path
 * is the reference: each output element is a plain sequential sum over the
 * columns (for int8, over integer blocks of activations quantized the same way
 * the AVX2 path quantizes them), so it is independent of the thread count and
 * of n by construction. Threads split the output rows. */
#include "kernels/kern_internal.h"

typedef struct scalar_job {
    float *y;
    const float *x;
    const kern_mat *W;
    const float *bias;
    int n;
    const int8_t *xq; /* KT_I8 blockable: quantized activations, n x cols */
    const float *xs;  /* their block scales, n x nb */
    int nb;
} scalar_job;

static float load_w(const kern_mat *W, size_t i) {
    switch (W->dtype) {
    case KT_F32:
        return ((const float *)W->data)[i];
    case KT_BF16:
        return kern_bf16_to_f32(((const uint16_t *)W->data)[i]);
    case KT_F16:
        return kern_f16_to_f32(((const uint16_t *)W->data)[i]);
    case KT_I8:
        return (float)((const int8_t *)W->data)[i];
    }
    return 0;
}

/* One output element of an int8 matrix with quantized activations. */
static float dot_i8_blocks(const scalar_job *j, int r, int t) {
    const kern_mat *W = j->W;
    int cols = W->cols, g = W->group > 0 ? W->group : cols, ng = cols / g;
    const int8_t *w = (const int8_t *)W->data + (size_t)r * cols;
    const int8_t *xq = j->xq + (size_t)t * cols;
    const float *xs = j->xs + (size_t)t * j->nb;
    const float *ws = W->scales + (size_t)r * ng;
    float acc = 0;
    for (int gi = 0; gi < ng; gi++) {
        float accg = 0;
        for (int c0 = gi * g; c0 < (gi + 1) * g; c0 += KQ_BLOCK) {
            int c1 = c0 + KQ_BLOCK < (gi + 1) * g ? c0 + KQ_BLOCK : (gi + 1) * g;
            int32_t isum = 0;
            for (int c = c0; c < c1; c++) isum += (int32_t)w[c] * xq[c];
            accg += xs[c0 / KQ_BLOCK] * (float)isum;
        }
        acc += ws[gi] * accg;
    }
    return acc;
}

static void scalar_task(void *ctx, int task, int n_tasks) {
    const scalar_job *j = ctx;
    const kern_mat *W = j->W;
    int lo, hi, cols = W->cols;
    kern_split(W->rows, 4, task, n_tasks, &lo, &hi);
    int g = W->dtype == KT_I8 && W->group > 0 ? W->group : cols;
    for (int r = lo; r < hi; r++) {
        size_t base = (size_t)r * cols;
        for (int t = 0; t < j->n; t++) {
            const float *x = j->x + (size_t)t * cols;
            float acc = 0;
            if (W->dtype == KT_I8 && j->xq) {
                acc = dot_i8_blocks(j, r, t);
            } else if (W->dtype == KT_I8) {
                const float *ws = W->scales + (size_t)r * (cols / g);
                for (int c0 = 0; c0 < cols; c0 += g) {
                    float accg = 0;
                    for (int c = c0; c < c0 + g; c++) accg += load_w(W, base + c) * x[c];
                    acc += ws[c0 / g] * accg;
                }
            } else {
                for (int c = 0; c < cols; c++) acc += load_w(W, base + c) * x[c];
            }
            j->y[(size_t)t * W->rows + r] = acc + (j->bias ? j->bias[r] : 0.0f);
        }
    }
}

void kern_matmul_scalar(pool *p, float *y, const float *x, const kern_mat *W, const float *bias,
                        int n) {
    scalar_job j = {.y = y, .x = x, .W = W, .bias = bias, .n = n};
    if (W->dtype == KT_I8 && kern_i8_blockable(W)) {
        j.nb = (W->cols + KQ_BLOCK - 1) / KQ_BLOCK;
        int8_t *xq = kern_scratch(KERN_SCRATCH_ACT, (size_t)n * W->cols);
        float *xs = kern_scratch(KERN_SCRATCH_ACT2, (size_t)n * j.nb * sizeof(float));
        for (int t = 0; t < n; t++)
            kern_quantize_act(xq + (size_t)t * W->cols, xs + (size_t)t * j.nb,
                              x + (size_t)t * W->cols, W->cols);
        j.xq = xq;
        j.xs = xs;
    }
    int tasks = pool_threads(p);
    if (tasks > (W->rows + 3) / 4) tasks = (W->rows + 3) / 4;
    pool_run(p, scalar_task, &j, tasks > 0 ? tasks : 1);
}

void kern_matmul(pool *p, float *y, const float *x, const kern_mat *W, const float *bias, int n) {
    if (n <= 0 || W->rows <= 0) return;
    if (W->dtype == KT_BF16) {
        if (kern_use_avx512_bf16() && W->cols > 0) {
            kern_matmul_bf16_avx512(p, y, x, W, bias, n);
            return;
        }
        /* bf16 times bf16: the activations rounded, the products exact */
        size_t nx = (size_t)n * W->cols;
        float *xr = kern_scratch(KERN_SCRATCH_ROUNDED, nx * sizeof(float));
        kern_round_bf16(xr, x, nx);
        x = xr;
    }
    if (W->dtype == KT_I8 && n > KERN_GEMM_MIN_N && !kern_batch_inv() &&
        kern_i8_prefill_on_bf16(W->group, W->cols)) {
        kern_matmul_i8_gemm_avx512(p, y, x, W, bias, n);
        return;
    }
    if (!kern_use_avx2() || !kern_matmul_avx2(p, y, x, W, bias, n, kern_batch_inv()))
        kern_matmul_scalar(p, y, x, W, bias, n);
}

/* Prepared activations: where a one-token matmul prepares x before its
 * rows (plain mode: bf16 rows on AVX-512 BF16 round it to bf16, as
 * kern_matmul_bf16_avx512 does at n = 1; int8 rows on AVX-512 VNNI take it
 * as int16 with block scales, as sb_matmul does), x so prepared; elsewhere
 * nothing, and kern_matmul_one is kern_matmul on the calling thread.
 * dsv3-1b's expert lists called kern_matmul about 24 times a thread a list,
 * each preparing its x again: with x prepared once a job, decode steps
 * 0.1-1.2 % shorter in bf16 (mean 0.65 %, 4 runs), 1.2-2.1 % in int8 (3
 * runs), alternating step by step in one process. */
static bool one_act_bf16(const kern_mat *W) {
    return W->dtype == KT_BF16 && W->cols > 0 && kern_use_avx512_bf16() && !kern_batch_inv();
}

static bool one_act_i8(const kern_mat *W) {
    return W->dtype == KT_I8 && W->cols > 0 && kern_use_avx2() && kern_i8_blockable(W) &&
           !kern_batch_inv() && kern_use_avx512_vnni() && kern_i8_x16_fits(W) &&
           kern_i8_x16_max(W->cols) >= 1;
}

/* int8: the activations' descriptor, then the int16 row it points into */
#define ACT_I8_HEAD 64
_Static_assert(sizeof(kern_i8_x16) <= ACT_I8_HEAD, "the descriptor fits before the row");

size_t kern_one_act_bytes(const kern_mat *W) {
    if (one_act_bf16(W)) return kern_bf16_one_ldx(W->cols) * sizeof(uint16_t);
    if (one_act_i8(W)) return ACT_I8_HEAD + kern_i8_x16_bytes(W->cols, 1);
    return 0;
}

void kern_one_act_prepare(void *act, const float *x, const kern_mat *W) {
    if (one_act_bf16(W))
        kern_bf16_one_prepare(act, x, W->cols);
    else if (one_act_i8(W))
        kern_i8_x16_prepare(act, (char *)act + ACT_I8_HEAD, x, W, 1);
}

void kern_matmul_one(float *y, const void *act, const float *x, const kern_mat *W) {
    if (act && W->rows > 0 && one_act_bf16(W))
        kern_bf16_one_prepared(y, act, W);
    else if (act && W->rows > 0 && one_act_i8(W))
        kern_i8_x16_rows_avx512(W, y, act, NULL, 0, W->rows);
    else
        kern_matmul(NULL, y, x, W, NULL, 1);
}
