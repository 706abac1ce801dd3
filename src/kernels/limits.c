/* limits.c — measures the machine's limits the benchmarks report their
 * figures against: streaming read bandwidth and fp32 FMA peak (and, where
 * bf16 matmuls run on vdpbf16ps, its peak), all with every thread of the
 * pool. Measured in the same run as the benchmark because absolute figures
 * drift between runs and machines.
 *
 * The FMA peak is taken at the widest vectors the kernels use (AVX-512 where
 * the CPU has it). The vector loops use target attributes rather than an
 * *_avx2.c file so a portable fallback lives beside them; they are only entered after
 * the same CPU check kern_init makes. No global state. */
#include "kernels/kern_internal.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

__attribute__((target("avx2,fma"))) static double read_avx2(const uint8_t *p, size_t n, bool l2) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        if (l2)
            kern_stream_ahead_l2(p + i, 128);
        else
            kern_stream_ahead(p + i, 128);
        a0 = _mm256_add_ps(a0, _mm256_load_ps((const float *)(p + i)));
        a1 = _mm256_add_ps(a1, _mm256_load_ps((const float *)(p + i + 32)));
        a2 = _mm256_add_ps(a2, _mm256_load_ps((const float *)(p + i + 64)));
        a3 = _mm256_add_ps(a3, _mm256_load_ps((const float *)(p + i + 96)));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

static double read_scalar(const uint8_t *p, size_t n) {
    uint64_t a0 = 0, a1 = 0;
    for (size_t i = 0; i + 16 <= n; i += 16) {
        uint64_t u, v;
        memcpy(&u, p + i, 8);
        memcpy(&v, p + i + 8, 8);
        a0 += u;
        a1 ^= v;
    }
    return (double)(a0 + a1);
}

/* Pages [lo, hi) of the buffer. The threads share the pages out as the
 * one-token kernels share their rows (pool_for, grains of 64 KiB) and
 * prefetch as they do (kern_stream_ahead, or kern_stream_ahead_l2 on
 * alternate passes: the best of the two is the machine's): the kernels
 * streamed up to 7 % faster than this probe read when it gave each thread
 * one half and left the pages to the hardware; alternating in one process,
 * that read 52-57 GB/s where this one read 74-78 with the page touch
 * alone. The lines' non-temporal prefetch adds 0-9 % (median about 3 %) to
 * a plain read on the Zen 5; on a Zen 3 the L2 one reads 10-20 % faster. */
#define BW_GRAIN 16
typedef struct bw_job {
    const uint8_t *buf;
    bool l2;
} bw_job;

static void bw_range(void *ctx, int lo, int hi) {
    const bw_job *j = ctx;
    const uint8_t *p = j->buf + (size_t)lo * KERN_PAGE;
    size_t n = (size_t)(hi - lo) * KERN_PAGE;
    volatile double keep = kern_use_avx2() ? read_avx2(p, n, j->l2) : read_scalar(p, n);
    (void)keep; /* the loads stay observable */
}

struct kern_read_probe {
    uint8_t *buf;
    size_t bytes;
};

kern_read_probe *kern_read_probe_new(size_t bytes) {
    if (bytes < ((size_t)1 << 20)) bytes = (size_t)1 << 20;
    bytes &= ~(size_t)(KERN_PAGE - 1);
    kern_read_probe *r = di_malloc(sizeof *r);
    /* Huge pages, like the weights (loader.c): the limit is what the
     * machine streams at best, not what 4 KiB pages allow. */
    r->buf = di_huge_alloc(bytes);
    r->bytes = bytes;
    memset(r->buf, 1, bytes); /* every page touched before timing */
    return r;
}

size_t kern_read_probe_bytes(const kern_read_probe *r) {
    return r->bytes;
}

double kern_read_probe_pass(pool *p, const kern_read_probe *r, bool l2) {
    bw_job j = {.buf = r->buf, .l2 = l2};
    double t0 = di_now();
    pool_for(p, bw_range, &j, (int)(r->bytes / KERN_PAGE), BW_GRAIN);
    return di_now() - t0;
}

void kern_read_probe_free(kern_read_probe *r) {
    if (!r) return;
    di_huge_free(r->buf, r->bytes);
    free(r);
}

double kern_measure_read_bandwidth(pool *p, size_t bytes) {
    kern_read_probe *r = kern_read_probe_new(bytes);
    kern_read_probe_pass(p, r, false); /* warm-up */
    double best = 0;
    for (int rep = 0; rep < 6; rep++) {
        double dt = kern_read_probe_pass(p, r, rep % 2);
        if (dt > 0 && (double)r->bytes / dt > best) best = (double)r->bytes / dt;
    }
    kern_read_probe_free(r);
    return best / 1e9;
}

typedef enum peak_kind { PEAK_FMA, PEAK_DPBF16, PEAK_DPBUSD } peak_kind;

typedef struct fma_job {
    long iters;
    peak_kind kind; /* FMAs, or vdpbf16ps, or vpdpbusd */
    double secs[64];
    float sink[64];
} fma_job;

#define FMA_CHAINS 12

/* Twelve independent chains (named, so they stay in registers): enough to
 * cover FMA latency (4) times throughput (2 per cycle) with margin. */
__attribute__((target("avx2,fma"))) static float fma_avx2(long iters) {
    __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    __m256 c0 = _mm256_set1_ps(0.00f), c1 = _mm256_set1_ps(0.01f), c2 = _mm256_set1_ps(0.02f);
    __m256 c3 = _mm256_set1_ps(0.03f), c4 = _mm256_set1_ps(0.04f), c5 = _mm256_set1_ps(0.05f);
    __m256 c6 = _mm256_set1_ps(0.06f), c7 = _mm256_set1_ps(0.07f), c8 = _mm256_set1_ps(0.08f);
    __m256 c9 = _mm256_set1_ps(0.09f), c10 = _mm256_set1_ps(0.10f), c11 = _mm256_set1_ps(0.11f);
    for (long it = 0; it < iters; it++) {
        c0 = _mm256_fmadd_ps(c0, a, b), c1 = _mm256_fmadd_ps(c1, a, b);
        c2 = _mm256_fmadd_ps(c2, a, b), c3 = _mm256_fmadd_ps(c3, a, b);
        c4 = _mm256_fmadd_ps(c4, a, b), c5 = _mm256_fmadd_ps(c5, a, b);
        c6 = _mm256_fmadd_ps(c6, a, b), c7 = _mm256_fmadd_ps(c7, a, b);
        c8 = _mm256_fmadd_ps(c8, a, b), c9 = _mm256_fmadd_ps(c9, a, b);
        c10 = _mm256_fmadd_ps(c10, a, b), c11 = _mm256_fmadd_ps(c11, a, b);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                             _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
}

/* The same on 16 lanes, for CPUs with AVX-512: their FMA units are as wide,
 * so the AVX2 loop would report half the machine. */
__attribute__((target("avx512f"))) static float fma_avx512(long iters) {
    __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    __m512 c0 = _mm512_set1_ps(0.00f), c1 = _mm512_set1_ps(0.01f), c2 = _mm512_set1_ps(0.02f);
    __m512 c3 = _mm512_set1_ps(0.03f), c4 = _mm512_set1_ps(0.04f), c5 = _mm512_set1_ps(0.05f);
    __m512 c6 = _mm512_set1_ps(0.06f), c7 = _mm512_set1_ps(0.07f), c8 = _mm512_set1_ps(0.08f);
    __m512 c9 = _mm512_set1_ps(0.09f), c10 = _mm512_set1_ps(0.10f), c11 = _mm512_set1_ps(0.11f);
    for (long it = 0; it < iters; it++) {
        c0 = _mm512_fmadd_ps(c0, a, b), c1 = _mm512_fmadd_ps(c1, a, b);
        c2 = _mm512_fmadd_ps(c2, a, b), c3 = _mm512_fmadd_ps(c3, a, b);
        c4 = _mm512_fmadd_ps(c4, a, b), c5 = _mm512_fmadd_ps(c5, a, b);
        c6 = _mm512_fmadd_ps(c6, a, b), c7 = _mm512_fmadd_ps(c7, a, b);
        c8 = _mm512_fmadd_ps(c8, a, b), c9 = _mm512_fmadd_ps(c9, a, b);
        c10 = _mm512_fmadd_ps(c10, a, b), c11 = _mm512_fmadd_ps(c11, a, b);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                             _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
    return _mm512_reduce_add_ps(s);
}

/* bf16 dot products (vdpbf16ps, two multiply-adds per lane) on CPUs with
 * AVX-512 BF16: the arithmetic bf16 matmuls run on there. */
__attribute__((target("avx512f,avx512bf16"))) static float dpbf16_avx512(long iters) {
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3a83), b = (__m512bh)_mm512_set1_epi16(0x3a83);
    __m512 c[FMA_CHAINS];
#pragma GCC unroll 12
    for (int i = 0; i < FMA_CHAINS; i++) c[i] = _mm512_set1_ps(0.01f * (float)i);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < FMA_CHAINS; i++) c[i] = _mm512_dpbf16_ps(c[i], a, b);
    }
#pragma GCC unroll 12
    for (int i = 1; i < FMA_CHAINS; i++) c[0] = _mm512_add_ps(c[0], c[i]);
    return _mm512_reduce_add_ps(c[0]);
}

/* int8 dot products (vpdpbusd, four byte products per 32-bit lane) on CPUs
 * with AVX-512 VNNI: what int8 batched decode runs on. The chains' integer
 * sums wrap (in the instruction, defined); one lane is kept. */
__attribute__((target("avx512f,avx512vnni"))) static float dpbusd_avx512(long iters) {
    __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
    __m512i c[FMA_CHAINS];
#pragma GCC unroll 12
    for (int i = 0; i < FMA_CHAINS; i++) c[i] = _mm512_set1_epi32(i);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < FMA_CHAINS; i++) c[i] = _mm512_dpbusd_epi32(c[i], a, b);
    }
#pragma GCC unroll 12
    for (int i = 1; i < FMA_CHAINS; i++) c[0] = _mm512_add_epi32(c[0], c[i]);
    return (float)_mm_cvtsi128_si32(_mm512_castsi512_si128(c[0])); /* (a sum would overflow) */
}

static float fma_scalar(long iters) {
    float acc[FMA_CHAINS];
    for (int i = 0; i < FMA_CHAINS; i++) acc[i] = (float)i * 0.01f;
    for (long it = 0; it < iters; it++) {
        for (int i = 0; i < FMA_CHAINS; i++) acc[i] = acc[i] * 0.999999f + 1e-7f;
    }
    float s = 0;
    for (int i = 0; i < FMA_CHAINS; i++) s += acc[i];
    return s;
}

static void fma_task(void *ctx, int task, int n_tasks) {
    fma_job *j = ctx;
    double t0 = di_now();
    j->sink[task & 63] = j->kind == PEAK_DPBF16   ? dpbf16_avx512(j->iters)
                         : j->kind == PEAK_DPBUSD ? dpbusd_avx512(j->iters)
                         : kern_use_avx512()      ? fma_avx512(j->iters)
                         : kern_use_avx2()        ? fma_avx2(j->iters)
                                                  : fma_scalar(j->iters);
    j->secs[task & 63] = di_now() - t0;
}

/* Multiply-adds per instruction and chain times 2 FLOPs, over every thread
 * (macs: multiply-adds per instruction). */
static double chains_peak(pool *p, peak_kind kind, double macs) {
    int tasks = pool_threads(p);
    if (tasks > 64) tasks = 64;
    fma_job j = {.iters = 200000, .kind = kind};
    pool_run(p, fma_task, &j, tasks); /* warm-up, also sizes the run */
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        j.iters = 2000000; /* ~24 M vector FMAs per thread: tens of ms */
        double t0 = di_now();
        pool_run(p, fma_task, &j, tasks);
        double dt = di_now() - t0;
        double flops = 2.0 * macs * FMA_CHAINS * (double)j.iters * tasks;
        if (dt > 0 && flops / dt > best) best = flops / dt;
    }
    volatile float keep = j.sink[0];
    (void)keep;
    return best / 1e9;
}

double kern_measure_fma_peak(pool *p) {
    return chains_peak(p, PEAK_FMA, kern_use_avx512() ? 16.0 : kern_use_avx2() ? 8.0 : 1.0);
}

double kern_measure_bf16_dot_peak(pool *p) {
    return kern_use_avx512_bf16() ? chains_peak(p, PEAK_DPBF16, 32.0) : 0.0;
}

double kern_measure_i8_dot_peak(pool *p) {
    return kern_use_avx512_vnni() ? chains_peak(p, PEAK_DPBUSD, 64.0) : 0.0;
}
