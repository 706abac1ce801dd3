/* kbench.c — kernel micro-benchmark report (`deepinfer bench --kernels`).
 *
 * Prints one line per figure: the two machine limits measured in this run,
 * then decode GEMV throughput (GB/s of weights streamed, and the fraction of
 * the measured read bandwidth) and batched / prefill GEMM throughput
 * (GFLOP/s and the fraction of the measured FMA peak; for bf16, and int8
 * prefill, on CPUs with AVX-512 BF16, of the bf16 dot-product peak their
 * matmuls run on; for int8 batched decode with AVX-512 VNNI, of the int8
 * dot-product peak).
 * Shapes are the ones the acceptance targets name (hidden 2048, FFN 8192, vocab 128256). On a
 * shared machine the limits drift during the run, so each figure is divided
 * by the best limit measured so far, re-measured right after the figure (the
 * denominator is printed in parentheses). The matrices sit on 2 MiB pages,
 * as a model's weights do (4 KiB pages stream markedly slower here), and a
 * GEMV figure is the best pass over all the copies of its matrix (at least
 * 256 MB): a sustained stream, like the bandwidth it is compared with, not
 * the best single call of a few tens of MB. A kernel that streams like a
 * plain read can still print a few per cent over 100 % when the host's
 * bandwidth moves between the two measurements. */
#include "kernels/kern_internal.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"

static void fill_random(float *v, size_t n, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = (float)((int32_t)(s >> 8) - (1 << 23)) * (1.0f / (float)(1 << 23));
    }
}

static size_t mat_bytes(const kern_mat *W) {
    return (size_t)W->rows * W->cols * kern_dtype_size(W->dtype);
}

/* Builds an rows x cols matrix of dtype with random values, on 2 MiB pages. */
static kern_mat bench_mat(kern_dtype dt, int rows, int cols) {
    kern_mat W = {.dtype = dt, .rows = rows, .cols = cols};
    size_t n = (size_t)rows * cols;
    float *row = di_malloc((size_t)cols * sizeof(float));
    if (dt == KT_F32) {
        float *d = di_huge_alloc(n * sizeof(float));
        fill_random(d, n, 7);
        W.data = d;
    } else if (dt == KT_BF16) {
        uint16_t *d = di_huge_alloc(n * 2);
        for (int r = 0; r < rows; r++) {
            fill_random(row, (size_t)cols, (uint32_t)r);
            for (int c = 0; c < cols; c++) d[(size_t)r * cols + c] = kern_f32_to_bf16(row[c]);
        }
        W.data = d;
    } else {
        int8_t *d = di_huge_alloc(n);
        float *s = di_alloc_aligned((size_t)rows * sizeof(float));
        for (int r = 0; r < rows; r++) {
            fill_random(row, (size_t)cols, (uint32_t)r);
            kern_quantize_i8(d + (size_t)r * cols, s + r, row, 1, cols, cols);
        }
        W.data = d;
        W.scales = s;
        W.group = cols;
    }
    free(row);
    return W;
}

static void free_mat(kern_mat *W) {
    di_huge_free((void *)W->data, mat_bytes(W));
    if (W->scales) di_free_aligned((void *)W->scales);
}

/* The time of one call: the best of `passes` passes (after one warm-up)
 * over the `nw` copies of the matrix, divided by nw. The copies make
 * decode-sized shapes come from memory, as in a model with many layers, not
 * from the last-level cache. */
static double time_matmul(pool *p, const kern_mat *W, int nw, int n, int passes) {
    float *x = di_alloc_aligned((size_t)n * W->cols * sizeof(float));
    float *y = di_alloc_aligned((size_t)n * W->rows * sizeof(float));
    fill_random(x, (size_t)n * W->cols, 3);
    for (int i = 0; i < nw; i++) kern_matmul(p, y, x, &W[i], NULL, n);
    double best = 1e30;
    for (int i = 0; i < passes; i++) {
        double t0 = di_now();
        for (int w = 0; w < nw; w++) kern_matmul(p, y, x, &W[w], NULL, n);
        double dt = (di_now() - t0) / nw;
        if (dt < best) best = dt;
    }
    di_free_aligned(x);
    di_free_aligned(y);
    return best;
}

/* time_matmul with batch-invariant mode on. */
static double time_matmul_invariant(pool *p, const kern_mat *W, int nw, int n, int passes) {
    kern_set_batch_invariant(true);
    double t = time_matmul(p, W, nw, n, passes);
    kern_set_batch_invariant(false);
    return t;
}

/* Batch-invariant mode on packed copies of the nw matrices (kern_pack_panels),
 * where this CPU's kernels read them: the time of one call, or 0. */
static double time_matmul_packed(pool *p, kern_mat *W, int nw, int n, int passes) {
    size_t bytes = kern_panels_bytes(&W[0]);
    if (!bytes) return 0;
    for (int i = 0; i < nw; i++) {
        uint32_t *panels = di_huge_alloc(bytes);
        kern_pack_panels(p, panels, &W[i]);
        W[i].panels = panels;
    }
    double t = time_matmul_invariant(p, W, nw, n, passes);
    for (int i = 0; i < nw; i++) {
        di_huge_free((void *)W[i].panels, bytes);
        W[i].panels = NULL;
    }
    return t;
}

static const char *dt_name(kern_dtype dt) {
    return dt == KT_F32 ? "f32" : dt == KT_BF16 ? "bf16" : dt == KT_F16 ? "f16" : "i8";
}

void kern_bench_report(pool *p) {
    kern_init();
    double bw = kern_measure_read_bandwidth(p, (size_t)1 << 30);
    double peak = kern_measure_fma_peak(p);
    printf("kernels isa=%s threads=%d\n", kern_isa(), pool_threads(p));
    printf("read bandwidth            %8.1f GB/s\n", bw);
    printf("fp32 FMA peak             %8.1f GFLOP/s\n", peak);
    /* bf16 matmuls on AVX-512 BF16 CPUs run on bf16 dot products: their peak */
    double dot = kern_measure_bf16_dot_peak(p);
    if (dot > 0) printf("bf16 dot-product peak     %8.1f GFLOP/s\n", dot);
    /* int8 batched decode with AVX-512 VNNI runs on int8 dot products */
    double i8dot = kern_measure_i8_dot_peak(p);
    if (i8dot > 0) printf("int8 dot-product peak     %8.1f GOP/s\n", i8dot);
    static const int gemv[][2] = {{8192, 2048}, {2048, 8192}, {128256, 2048}};
    static const kern_dtype dts[] = {KT_BF16, KT_F32, KT_I8};
    for (int d = 0; d < 3; d++) {
        for (int s = 0; s < 3; s++) {
            kern_mat W[16];
            size_t one = (size_t)gemv[s][0] * gemv[s][1] * kern_dtype_size(dts[d]);
            int nw = (int)(((size_t)256 << 20) / one) + 1;
            if (nw > 16) nw = 16;
            for (int i = 0; i < nw; i++) W[i] = bench_mat(dts[d], gemv[s][0], gemv[s][1]);
            double t = time_matmul(p, W, nw, 1, s == 2 ? 6 : 3);
            double gbs = (double)mat_bytes(&W[0]) / t / 1e9;
            bw = fmax(bw, kern_measure_read_bandwidth(p, (size_t)1 << 30));
            printf("gemv %-4s %6dx%-5d n=1   %8.1f GB/s    %5.1f %% of bandwidth (%.1f)\n",
                   dt_name(dts[d]), W[0].rows, W[0].cols, gbs, 100 * gbs / bw, bw);
            if (dts[d] != KT_F32) { /* what batch-invariant mode costs in decode */
                double ti = time_matmul_invariant(p, W, nw, 1, s == 2 ? 6 : 3);
                double gi = (double)mat_bytes(&W[0]) / ti / 1e9;
                printf("gemv %-4s %6dx%-5d n=1   %8.1f GB/s    %5.1f %% of bandwidth "
                       "(batch-invariant)\n",
                       dt_name(dts[d]), W[0].rows, W[0].cols, gi, 100 * gi / bw);
                double tp = time_matmul_packed(p, W, nw, 1, s == 2 ? 6 : 3);
                double gp = tp > 0 ? (double)mat_bytes(&W[0]) / tp / 1e9 : 0;
                if (tp > 0)
                    printf("gemv %-4s %6dx%-5d n=1   %8.1f GB/s    %5.1f %% of bandwidth "
                           "(batch-invariant, packed panels)\n",
                           dt_name(dts[d]), W[0].rows, W[0].cols, gp, 100 * gp / bw);
            }
            for (int i = 0; i < nw; i++) free_mat(&W[i]);
        }
    }
    static const int gemm[][3] = {
        {8, 2048, 8192}, {8, 8192, 2048}, {512, 2048, 2048}, {512, 8192, 2048}};
    for (int d = 0; d < 3; d++) {
        for (int s = 0; s < 4; s++) {
            kern_mat W = bench_mat(dts[d], gemm[s][1], gemm[s][2]);
            int n = gemm[s][0];
            double t = time_matmul(p, &W, 1, n, n > 64 ? 3 : 10);
            double gf = 2.0 * n * W.rows * W.cols / t / 1e9;
            peak = fmax(peak, kern_measure_fma_peak(p));
            if (dot > 0) dot = fmax(dot, kern_measure_bf16_dot_peak(p));
            if (i8dot > 0) i8dot = fmax(i8dot, kern_measure_i8_dot_peak(p));
            /* bf16, and int8 prefill where the kernels take the bf16 GEMM: on bf16 dot products */
            bool on_dot =
                dot > 0 && (dts[d] == KT_BF16 || (dts[d] == KT_I8 && n > KERN_GEMM_MIN_N &&
                                                  kern_i8_prefill_on_bf16(0, W.cols)));
            /* int8 up to KERN_GEMM_MIN_N tokens with VNNI: on int8 dot products */
            bool on_i8 = i8dot > 0 && dts[d] == KT_I8 && n <= KERN_GEMM_MIN_N;
            double lim = on_i8 ? i8dot : on_dot ? dot : peak;
            printf("gemm %-4s %6dx%-5d n=%-3d %8.1f GFLOP/s %5.1f %% of %s peak (%.1f)\n",
                   dt_name(dts[d]), W.rows, W.cols, n, gf, 100 * gf / lim,
                   on_i8    ? "int8 dot"
                   : on_dot ? "bf16 dot"
                            : "FMA",
                   lim);
            if (d == 0) { /* what batch-invariant mode costs in batches and prefill */
                double ti = time_matmul_invariant(p, &W, 1, n, n > 64 ? 3 : 10);
                double gi = 2.0 * n * W.rows * W.cols / ti / 1e9;
                printf("gemm %-4s %6dx%-5d n=%-3d %8.1f GFLOP/s %5.1f %% of %s peak "
                       "(batch-invariant)\n",
                       dt_name(dts[d]), W.rows, W.cols, n, gi, 100 * gi / lim,
                       on_dot ? "bf16 dot" : "FMA");
                /* the few-token kernels on the packed copy, where there are some */
                double tp = n <= KERN_GEMM_MIN_N && !on_dot
                                ? time_matmul_packed(p, &W, 1, n, n > 64 ? 3 : 10)
                                : 0;
                double gp = tp > 0 ? 2.0 * n * W.rows * W.cols / tp / 1e9 : 0;
                if (tp > 0)
                    printf("gemm %-4s %6dx%-5d n=%-3d %8.1f GFLOP/s %5.1f %% of FMA peak "
                           "(batch-invariant, packed panels)\n",
                           dt_name(dts[d]), W.rows, W.cols, n, gp, 100 * gp / lim);
            }
            free_mat(&W);
        }
    }
}
