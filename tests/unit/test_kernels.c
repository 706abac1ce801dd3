/* test_kernels.c — kernels against a naive double-precision reference, on both
 * the scalar and the AVX2 path: matmul for every dtype over odd shapes, with
 * and without bias; thread-count independence; batch invariance; exhaustive
 * bf16/f16/fp8 conversions; vector helpers. Sizes are small so the ASan build
 * runs them in seconds. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kern_internal.h"
#include "kernels/kernels.h"

static uint32_t rng_state = 12345;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((int32_t)(rng_state >> 8) - (1 << 23)) / (float)(1 << 23);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* A test matrix: the stored weights plus their exact f32 values. */
typedef struct tmat {
    kern_mat m;
    float *deq; /* rows x cols, the values the stored weights represent */
    void *data;
    float *scales;
} tmat;

static tmat make_mat(kern_dtype dt, int rows, int cols, int group) {
    tmat t = {.m = {.dtype = dt, .rows = rows, .cols = cols}};
    size_t n = (size_t)rows * cols;
    float *w = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) w[i] = frand();
    t.deq = malloc((n ? n : 1) * sizeof(float));
    if (dt == KT_F32) {
        t.data = malloc((n ? n : 1) * 4);
        memcpy(t.data, w, n * 4);
    } else if (dt == KT_BF16 || dt == KT_F16) {
        uint16_t *d = malloc((n ? n : 1) * 2);
        for (size_t i = 0; i < n; i++) {
            if (dt == KT_BF16) {
                d[i] = kern_f32_to_bf16(w[i]);
            } else { /* f16 by truncation is enough for a test value */
                float a = fabsf(w[i]);
                int e;
                float m = frexpf(a, &e); /* a = m 2^e, m in [0.5,1) */
                uint16_t h = 0;
                if (a >= 6.2e-5f) h = (uint16_t)(((e + 14) << 10) | ((int)(m * 2048) & 0x3ff));
                d[i] = h | (w[i] < 0 ? 0x8000 : 0);
            }
        }
        t.data = d;
    } else {
        t.m.group = group;
        t.data = malloc(n ? n : 1);
        t.scales = malloc(((size_t)rows * (cols / group) + 1) * sizeof(float));
        kern_quantize_i8(t.data, t.scales, w, rows, cols, group);
        t.m.scales = t.scales;
    }
    t.m.data = t.data;
    for (int r = 0; r < rows; r++) kern_row_f32(t.deq + (size_t)r * cols, &t.m, r);
    free(w);
    return t;
}

static void free_mat(tmat *t) {
    free(t->deq);
    free(t->data);
    free(t->scales);
}

/* Checks y against a double reference. For int8 the activations are
 * quantized in blocks of 32, which the bound allows for; a bf16 matmul
 * multiplies by the activations rounded to bf16, so the reference does. */
static int check_matmul(const tmat *t, const float *x, const float *bias, const float *y, int n,
                        char *why, size_t why_len) {
    int rows = t->m.rows, cols = t->m.cols;
    for (int tk = 0; tk < n; tk++) {
        const float *xt = x + (size_t)tk * cols;
        float bmax[4096 / 32 + 8];
        for (int b = 0; b * 32 < cols; b++) {
            float m = 0;
            for (int c = b * 32; c < cols && c < b * 32 + 32; c++) m = fmaxf(m, fabsf(xt[c]));
            bmax[b] = m;
        }
        for (int r = 0; r < rows; r++) {
            double ref = bias ? bias[r] : 0, mag = 0, qerr = 0;
            for (int c = 0; c < cols; c++) {
                double w = t->deq[(size_t)r * cols + c], xv = xt[c];
                if (t->m.dtype == KT_BF16) xv = kern_bf16_to_f32(kern_f32_to_bf16(xt[c]));
                ref += w * xv;
                mag += fabs(w * xv);
                qerr += fabs(w) * bmax[c / 32] / 127.0 * 0.5;
            }
            double tol = 2e-6 * (mag + 1) * sqrt((double)cols + 1) + 1e-6;
            if (t->m.dtype == KT_I8) tol += qerr * 1.01;

            double got = y[(size_t)tk * rows + r];
            if (!(fabs(got - ref) <= tol)) {
                snprintf(why, why_len, "t=%d r=%d got %.7g want %.7g (tol %.3g)", tk, r, got, ref,
                         tol);
                return 0;
            }
        }
    }
    return 1;
}

typedef struct shape {
    int rows, cols, n;
} shape;

/* {29, 1100, 26}: two groups of token lanes over column blocks of whole
 * lines and a block that ends in pairs past the last line, rows past whole
 * tiles; {29, 1100, 14}, {29, 1100, 20}, {21, 130, 24}: the few-token
 * kernel's two halves, one partial, and three halves, the last partial or
 * whole.
 * {11, 320, 1}, {7, 352, 1}: one int8 token in weight groups of 32 and 64,
 * the second with a 32-column tail; {9, 640, 1}: groups of 128, two
 * 64-column steps per group scale, and a last 128 columns past the 256-column
 * loop. {21, 130, 8}, {12, 1025, 4},
 * {19, 67, 6}: a few bf16 tokens (matmul_bf16_few_avx512.c) with 2, 1 and 3
 * columns past the last 4-column step, rows past whole tiles of 8, and
 * whole cache lines of steps; {5, 3, 5}, {9, 2, 11}: rows shorter than one
 * step, in one half and in two. {64, 64, 100}, {37, 160, 130}: token lanes in
 * passes over each panel (groups 3 + 4, 3 + 3 + 3); {19, 70, 1100}: past
 * the lanes, the bf16 GEMM's tiles; {21, 1031, 1030}: the GEMMs' token
 * blocks over three column blocks, the last ending in half a pair. */
static const shape shapes[] = {
    {1, 1, 1},        {5, 7, 1},      {13, 31, 2},   {33, 64, 3},    {17, 100, 7},  {40, 257, 17},
    {8, 32, 64},      {70, 96, 5},    {24, 129, 16}, {19, 300, 33},  {50, 128, 64}, {3, 1000, 9},
    {64, 64, 100},    {37, 160, 130}, {21, 333, 40}, {29, 1100, 14}, {9, 130, 1},   {6, 1000, 1},
    {11, 320, 1},     {7, 352, 1},    {21, 130, 8},  {12, 1025, 4},  {19, 67, 6},   {29, 1100, 20},
    {5, 3, 5},        {9, 2, 11},     {9, 640, 1},   {29, 1100, 26}, {21, 130, 24}, {19, 70, 1100},
    {21, 1031, 1030},
};

static void run_matmul_suite(bool scalar, bool avx2, bool no_bf16) {
    pool *p = pool_create(2);
    kern_force_scalar(scalar);
    kern_force_avx2(avx2);
    kern_force_no_avx512_bf16(no_bf16);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        shape sh = shapes[s];
        for (int d = 0; d < 8; d++) {
            kern_dtype dt = d < 3 ? (kern_dtype)d : KT_I8;
            int group = d == 3 ? sh.cols : d == 4 ? 32 : d == 5 ? 16 : d == 6 ? 64 : 128;
            if (dt == KT_I8 && sh.cols % group) group = sh.cols;
            tmat t = make_mat(dt, sh.rows, sh.cols, group);
            float *x = malloc((size_t)sh.n * sh.cols * sizeof(float));
            float *y = malloc((size_t)sh.n * sh.rows * sizeof(float));
            float *bias = malloc((size_t)sh.rows * sizeof(float));
            for (int i = 0; i < sh.n * sh.cols; i++) x[i] = frand();
            for (int i = 0; i < sh.rows; i++) bias[i] = frand();
            for (int b = 0; b < 2; b++) {
                char why[256];
                kern_matmul(p, y, x, &t.m, b ? bias : NULL, sh.n);
                int ok = check_matmul(&t, x, b ? bias : NULL, y, sh.n, why, sizeof why);
                if (!ok) {
                    harness_fail(__FILE__, __LINE__, why);
                    fprintf(stderr, "    path=%s dtype=%d group=%d rows=%d cols=%d n=%d bias=%d\n",
                            kern_isa(), dt, group, sh.rows, sh.cols, sh.n, b);
                    s = sizeof shapes / sizeof shapes[0] - 1;
                    d = 8;
                    break;
                }
            }
            free(x);
            free(y);
            free(bias);
            free_mat(&t);
        }
    }
    kern_force_scalar(false);
    kern_force_avx2(false);
    kern_force_no_avx512_bf16(false);
    pool_free(p);
}

TEST(kern_matmul_scalar_vs_reference) {
    run_matmul_suite(true, false, false);
}
TEST(kern_matmul_avx2_vs_reference) {
    run_matmul_suite(false, true, false);
}
TEST(kern_matmul_best_vs_reference) {
    run_matmul_suite(false, false, false);
}
/* On CPUs with AVX-512 BF16: the AVX-512 paths the others take for bf16. */
TEST(kern_matmul_avx512_without_bf16_vs_reference) {
    run_matmul_suite(false, false, true);
}

/* A random matrix (dtype d, shape sh, int8 group) times sh.n random tokens,
 * on pool pa, then on pool pb (with the AVX-512 paths off if avx2_b): are the
 * two outputs the same bits? */
static bool matmul_same_bits(kern_dtype d, shape sh, int group, pool *pa, pool *pb, bool avx2_b) {
    tmat t = make_mat(d, sh.rows, sh.cols, group);
    size_t nx = (size_t)sh.n * sh.cols, ny = (size_t)sh.n * sh.rows;
    float *x = malloc(nx * 4), *y0 = malloc(ny * 4), *y1 = malloc(ny * 4);
    for (size_t i = 0; i < nx; i++) x[i] = frand();
    kern_matmul(pa, y0, x, &t.m, NULL, sh.n);
    kern_force_avx2(avx2_b);
    kern_matmul(pb, y1, x, &t.m, NULL, sh.n);
    kern_force_avx2(false);
    bool same = !memcmp(y0, y1, ny * 4);
    free(x), free(y0), free(y1);
    free_mat(&t);
    return same;
}

/* Where the CPU has AVX-512, the GEMM's wide register tile gives the bits
 * of the AVX2 one: every dtype, token counts that leave partial tiles of 12
 * and 6, row counts that leave a single panel or a partial one, in normal and
 * batch-invariant mode (there int8 takes the small-n kernel, not the GEMM). */
TEST(kern_gemm_avx512_equals_avx2) {
    kern_force_avx2(false);
    kern_force_no_avx512_bf16(true); /* bf16 takes vdpbf16ps where it can */
    if (!kern_use_avx512()) {
        kern_force_no_avx512_bf16(false);
        printf("    (skipped: no AVX-512 on this CPU)\n");
        return;
    }
    pool *p = pool_create(2);
    static const shape sh[] = {{16, 64, 40}, {48, 300, 37}, {77, 130, 65}, {40, 257, 150}};
    int bad = 0;
    for (int inv = 0; inv < 2 && !bad; inv++) {
        kern_set_batch_invariant(inv);
        for (int s = 0; s < 4 && !bad; s++) {
            for (int d = 0; d < (inv ? 3 : 4) && !bad; d++)
                if (!matmul_same_bits((kern_dtype)d, sh[s], sh[s].cols, p, p, true))
                    bad = 1 + s * 10 + d * 100 + inv * 1000;
        }
    }
    kern_set_batch_invariant(false);
    kern_force_no_avx512_bf16(false);
    pool_free(p);
    CHECKF(!bad, "AVX-512 and AVX2 GEMM differ (code %d)", bad);
}

/* Decode batches give each token the same bits whatever the batch size,
 * within each small-batch kernel's range: its row of y is the same as at the
 * range's last n (the AVX2 and int8 row blocks serve 2 to KERN_GEMM_MIN_N,
 * with AVX-512 VNNI from kern_i8_x16_max(cols) + 1; bf16 on AVX-512 BF16 changes
 * order after kern_l1_tokens(cols) (3 at 4100 columns, 7 at 2050, 8
 * below 2048) and 8 tokens and kernel after KERN_BF16_FEW_MAX = 24). Every
 * dtype, columns with and without tails (of 4, 32 and 64 columns), int8 per
 * row and grouped. */
static int same_bits_as(const kern_mat *W, int n) {
    int dot = W->dtype == KT_BF16 && kern_use_avx512_bf16() ? kern_l1_tokens(W->cols) : 5;
    return n <= dot ? dot : n <= 8 ? 8 : n <= KERN_BF16_FEW_MAX ? KERN_BF16_FEW_MAX : 32;
}

TEST(kern_matmul_batched_decode_independent_of_n) {
    pool *p = pool_create(2);
    static const int cols[] = {96, 200, 1024, 1030, 2050, 4100};
    static const int ns[] = {2, 3, 4, 5, 6, 7, 12, 17, 23, 26, 31};
    enum { N_COLS = sizeof cols / sizeof cols[0], N_NS = sizeof ns / sizeof ns[0] };
    int bad = 0, rows = 45, nmax = KERN_GEMM_MIN_N;
    for (int c = 0; c < N_COLS && !bad; c++)
        for (int d = 0; d < 5 && !bad; d++) {
            int K = cols[c], group = d == 4 ? 32 : K;
            tmat t = make_mat(d < 4 ? (kern_dtype)d : KT_I8, rows, K, group);
            float *x = malloc((size_t)nmax * K * 4), *y1 = malloc((size_t)nmax * rows * 4);
            float *ref = malloc((size_t)nmax * rows * 4);
            for (int i = 0; i < nmax * K; i++) x[i] = frand();
            for (int ni = 0; ni < N_NS && !bad; ni++) {
                /* A few tokens through the row kernels, in orders of their own
                 * (kern_matmul_i8_int16_rows, kern_matmul_avx2_rows_independent_
                 * of_n): int8 up to kern_i8_x16_max(K) tokens with VNNI, up to
                 * KERN_ONE_ROWS_MAX without; f32 and bf16 up to KERN_ONE_ROWS_MAX
                 * without AVX-512. */
                int rows_max = t.m.dtype == KT_I8 ? (kern_use_avx512_vnni() ? kern_i8_x16_max(K)
                                                                            : KERN_ONE_ROWS_MAX)
                               : t.m.dtype != KT_F16 && !kern_use_avx512() ? KERN_ONE_ROWS_MAX
                                                                           : 0;
                int ref_n = same_bits_as(&t.m, ns[ni]);
                if (ns[ni] <= rows_max || ref_n == ns[ni]) continue;
                kern_matmul(p, ref, x, &t.m, NULL, ref_n);
                kern_matmul(p, y1, x, &t.m, NULL, ns[ni]);
                if (memcmp(ref, y1, (size_t)ns[ni] * rows * 4)) bad = 1 + ni + 20 * d + 200 * c;
            }
            free(x), free(y1), free(ref);
            free_mat(&t);
        }
    pool_free(p);
    CHECKF(!bad, "a token's row changed with the batch size (code %d)", bad);
}

/* With AVX2 alone, up to KERN_ONE_ROWS_MAX tokens go through the row
 * kernels (matmul_one_avx2.c): f32, bf16 and int8 (per row and per group),
 * rows with and without a partial last step. Each token's outputs are the
 * same bits at every n from 2 on, and for f32 alone too (bf16 and int8
 * take a layout of their own for a token alone). */
TEST(kern_matmul_avx2_rows_independent_of_n) {
    kern_init();
    kern_force_avx2(true);
    static const int dims[][2] = {{37, 1030}, {20, 2048}, {9, 640}, {7, 352}, {5, 100}, {3, 31}};
    pool *p = pool_create(2);
    int bad = 0, nmax = KERN_ONE_ROWS_MAX;
    for (int s = 0; s < 6 && !bad; s++)
        for (int d = 0; d < 4 && !bad; d++) {
            int M = dims[s][0], K = dims[s][1], g = d == 3 && K % 32 == 0 ? 32 : K;
            tmat t = make_mat(d < 2 ? (kern_dtype)d : KT_I8, M, K, g);
            float *x = malloc((size_t)nmax * K * 4), *bias = malloc((size_t)M * 4);
            float *y = malloc((size_t)nmax * M * 4), *all = malloc((size_t)nmax * M * 4);
            for (int i = 0; i < nmax * K; i++) x[i] = frand();
            for (int i = 0; i < M; i++) bias[i] = frand();
            kern_matmul(p, all, x, &t.m, bias, nmax);
            for (int n = 1; n < nmax && !bad; n++) {
                kern_matmul(p, y, x, &t.m, bias, n);
                if ((n > 1 || d == 0) && memcmp(y, all, (size_t)n * M * 4))
                    bad = 1 + n + 10 * d + 100 * s;
            }
            free(x), free(bias), free(y), free(all);
            free_mat(&t);
        }
    pool_free(p);
    kern_force_avx2(false);
    CHECKF(!bad, "a token's row changed with the batch size (code %d)", bad);
}

/* The same call on pools of 1, 2 and 3 threads gives bit-identical output. */
TEST(kern_matmul_thread_independent) {
    pool *pools[3] = {pool_create(1), pool_create(2), pool_create(3)};
    static const shape sh[] = {{77, 130, 1}, {77, 130, 5}, {150, 200, 40}, {300, 64, 130}};
    int bad = 0;
    for (int sc = 0; sc < 2 && !bad; sc++) {
        kern_force_scalar(sc);
        for (int s = 0; s < 4 && !bad; s++) {
            for (int d = 0; d < 4 && !bad; d++)
                for (int pi = 1; pi < 3 && !bad; pi++)
                    if (!matmul_same_bits((kern_dtype)d, sh[s], 32, pools[0], pools[pi], false))
                        bad = 1 + s * 10 + d * 100 + pi * 1000 + sc * 10000;
        }
    }
    kern_force_scalar(false);
    for (int i = 0; i < 3; i++) pool_free(pools[i]);
    CHECKF(!bad, "thread count changed the result (code %d)", bad);
}

/* bf16 rows shorter than 128 columns at one token take sixteen rows at a
 * time on AVX-512 BF16 (dp1_short_rows); a one-row view of each row takes
 * the row loop every longer row takes. Both give the same bits, with and
 * without a bias, at row counts around the sixteens, on one thread and
 * on two. */
TEST(kern_matmul_bf16_short_rows_same_bits) {
    static const int cols[] = {1, 7, 16, 31, 32, 33, 63, 64, 65, 96, 127, 128, 200};
    static const int rows[] = {1, 15, 16, 17, 33, 64, 256, 530};
    pool *pools[2] = {pool_create(1), pool_create(2)};
    int bad = 0;
    for (int ci = 0; ci < 13 && !bad; ci++)
        for (int ri = 0; ri < 8 && !bad; ri++) {
            int K = cols[ci], M = rows[ri];
            tmat t = make_mat(KT_BF16, M, K, 0);
            float *x = malloc(sizeof(float) * (size_t)K), *bias = malloc(sizeof(float) * M);
            float *y = malloc(sizeof(float) * M), *want = malloc(sizeof(float) * M);
            for (int k = 0; k < K; k++) x[k] = frand();
            for (int r = 0; r < M; r++) bias[r] = frand();
            for (int b = 0; b < 2 && !bad; b++)
                for (int pi = 0; pi < 2 && !bad; pi++) {
                    for (int r = 0; r < M; r++) {
                        kern_mat row = kern_mat_rows(&t.m, r, 1);
                        kern_matmul(NULL, want + r, x, &row, b ? bias + r : NULL, 1);
                    }
                    kern_matmul(pools[pi], y, x, &t.m, b ? bias : NULL, 1);
                    for (int r = 0; r < M && !bad; r++)
                        if (bits(y[r]) != bits(want[r])) bad = 1 + ri + 10 * ci + 1000 * b;
                }
            free(x);
            free(bias);
            free(y);
            free(want);
            free_mat(&t);
        }
    for (int i = 0; i < 2; i++) pool_free(pools[i]);
    CHECKF(!bad, "short bf16 rows: sixteen at a time differ from one at a time (code %d)", bad);
}

/* kern_matmul_one on activations prepared once gives kern_matmul's bits
 * at one token, for bands of a matrix as deepseek_jobs_run takes them, in
 * every dtype (where nothing is prepared it is kern_matmul), in plain and
 * batch-invariant mode, and with no prepared activations at all. */
TEST(kern_matmul_one_prepared_same_bits) {
    static const int shapes[][2] = {{48, 64}, {64, 128}, {96, 200}, {37, 1024}};
    int bad = 0;
    for (int inv = 0; inv < 2 && !bad; inv++) {
        kern_set_batch_invariant(inv);
        for (int d = 0; d < 3 && !bad; d++)
            for (int si = 0; si < 4 && !bad; si++) {
                kern_dtype dt = d == 0 ? KT_BF16 : d == 1 ? KT_F32 : KT_I8;
                int M = shapes[si][0], K = shapes[si][1];
                tmat t = make_mat(dt, M, K, K);
                float *x = malloc(sizeof(float) * (size_t)K), *y = malloc(sizeof(float) * M);
                float *want = malloc(sizeof(float) * M);
                for (int k = 0; k < K; k++) x[k] = frand();
                size_t ab = kern_one_act_bytes(&t.m);
                void *act = ab ? di_alloc_aligned(ab) : NULL;
                if (ab) kern_one_act_prepare(act, x, &t.m);
                kern_matmul(NULL, want, x, &t.m, NULL, 1);
                for (int use = 0; use < 2 && !bad; use++)
                    for (int r0 = 0; r0 < M && !bad; r0 += 16) { /* bands of 16 rows and the rest */
                        int n = M - r0 < 16 ? M - r0 : 16;
                        kern_mat band = kern_mat_rows(&t.m, r0, n);
                        kern_matmul_one(y + r0, use ? act : NULL, x, &band);
                        for (int r = r0; r < r0 + n && !bad; r++)
                            if (bits(y[r]) != bits(want[r])) bad = 1 + si + 10 * d + 100 * inv;
                    }
                di_free_aligned(act);
                free(x);
                free(y);
                free(want);
                free_mat(&t);
            }
    }
    kern_set_batch_invariant(false);
    CHECKF(!bad, "prepared one-token matmul differs from kern_matmul (code %d)", bad);
}

/* int8 weights, prefill in plain mode on AVX-512 BF16: the bf16 GEMM on
 * the weights' integers, one scale per row or per group (32, 128: blocks of
 * one group; 1024: groups of two blocks). Its products are exact, so the
 * result is the double reference on the activations rounded to bf16 within
 * f32 summation error alone (much tighter than the int8 blocks' bound
 * above): a wrong scale, bias or packed element fails it. */
TEST(kern_matmul_i8_prefill_gemm) {
    kern_init();
    if (!kern_use_avx512_bf16()) {
        printf("  (no AVX-512 BF16: the path is not taken here)\n");
        return;
    }
    static const shape cases[] = {{21, 1031, 1030}, {19, 70, 33},  {40, 2048, 100}, {3, 5, 40},
                                  {21, 2048, 37},   {18, 640, 50}, {33, 2048, 45}};
    static const int groups[] = {0, 0, 0, 0, 1024, 128, 32}; /* 0: per row */
    pool *p = pool_create(2);
    int bad = 0;
    for (int s = 0; s < 7 && !bad; s++) {
        shape sh = cases[s];
        tmat t = make_mat(KT_I8, sh.rows, sh.cols, groups[s] ? groups[s] : sh.cols);
        float *x = malloc((size_t)sh.n * sh.cols * 4), *y = malloc((size_t)sh.n * sh.rows * 4);
        float *bias = malloc((size_t)sh.rows * 4);
        for (int i = 0; i < sh.n * sh.cols; i++) x[i] = frand();
        for (int i = 0; i < sh.rows; i++) bias[i] = frand();
        kern_matmul(p, y, x, &t.m, bias, sh.n);
        for (int tk = 0; tk < sh.n && !bad; tk++)
            for (int r = 0; r < sh.rows && !bad; r++) {
                double ref = bias[r], mag = 0;
                for (int c = 0; c < sh.cols; c++) {
                    double w = t.deq[(size_t)r * sh.cols + c];
                    double xv = kern_bf16_to_f32(kern_f32_to_bf16(x[(size_t)tk * sh.cols + c]));
                    ref += w * xv, mag += fabs(w * xv);
                }
                double tol = 2e-6 * (mag + 1) * sqrt((double)sh.cols + 1) + 1e-6;
                if (!(fabs(y[(size_t)tk * sh.rows + r] - ref) <= tol)) bad = 1 + s;
            }
        free(x), free(y), free(bias);
        free_mat(&t);
    }
    pool_free(p);
    CHECKF(!bad, "int8 prefill GEMM off the bf16-activation reference (case %d)", bad);
}

/* Row r of an int8 matrix times activations quantized in blocks of B
 * columns (xa: their integers, xs: the blocks' scales), as the int8 kernels
 * define it: each block's integer sum exact, times the block's scale and
 * its weight group's, summed in double; *mag gets the sum of the terms'
 * magnitudes (for a rounding bound). */
static double i8_block_sums_ref(const tmat *t, int r, const int16_t *xa, const float *xs, int B,
                                double *mag) {
    int K = t->m.cols, g = t->m.group > 0 ? t->m.group : K, nb = (K + B - 1) / B;
    const int8_t *w = (const int8_t *)t->data + (size_t)r * K;
    double ref = 0;
    *mag = 0;
    for (int b = 0; b < nb; b++) {
        long isum = 0;
        for (int c = b * B; c < K && c < (b + 1) * B; c++) isum += (long)w[c] * xa[c];
        double term = (double)isum * xs[b] * t->scales[(size_t)r * (K / g) + b * B / g];
        ref += term, *mag += fabs(term);
    }
    return ref;
}

/* int8 from kern_i8_x16_max(cols) + 1 to KERN_GEMM_MIN_N tokens (and every n in
 * batch-invariant mode) against the exact sums of the quantized activations: each 32-column
 * block's integer dot product is exact, so only f32 rounding of the scaled
 * block sums separates a kernel from the reference. Rows past whole tiles of
 * 16, columns past whole blocks and 4-column groups, one scale per row or
 * per group of 32, 64 or 1024. A wrong sign fix, block start, scale or group
 * index is far outside the bound. */
TEST(kern_matmul_i8_exact_blocks) {
    kern_init();
    /* past kern_i8_x16_max(cols) tokens (up to it, plain mode takes int16
     * activations): 3 tokens of 8200 columns, whose int16 rows would not
     * fit in L1, come here too */
    static const shape cases[] = {{37, 1030, 9}, {16, 96, 12},   {5, 1031, 17}, {40, 2048, 10},
                                  {33, 640, 32}, {21, 2048, 13}, {11, 8200, 3}};
    static const int groups[] = {0, 0, 0, 1024, 64, 32, 0}; /* 0: per row */
    enum { N_CASES = sizeof cases / sizeof cases[0] };
    pool *p = pool_create(2);
    int bad = 0;
    for (int inv = 0; inv < 2 && !bad; inv++) {
        kern_set_batch_invariant(inv);
        for (int s = 0; s < N_CASES && !bad; s++) {
            shape sh = cases[s];
            int K = sh.cols, nb = (K + 31) / 32, g = groups[s] ? groups[s] : K;
            tmat t = make_mat(KT_I8, sh.rows, K, g);
            float *x = malloc((size_t)sh.n * K * 4), *y = malloc((size_t)sh.n * sh.rows * 4);
            float *bias = malloc((size_t)sh.rows * 4), *xs = malloc((size_t)nb * 4);
            int8_t *xq = malloc((size_t)K);
            int16_t *xa = malloc((size_t)K * sizeof(int16_t));
            for (int i = 0; i < sh.n * K; i++) x[i] = frand();
            for (int i = 0; i < sh.rows; i++) bias[i] = frand();
            kern_matmul(p, y, x, &t.m, bias, sh.n);
            for (int tk = 0; tk < sh.n && !bad; tk++) {
                kern_quantize_act(xq, xs, x + (size_t)tk * K, K);
                for (int k = 0; k < K; k++) xa[k] = xq[k];
                for (int r = 0; r < sh.rows && !bad; r++) {
                    double mag, ref = i8_block_sums_ref(&t, r, xa, xs, 32, &mag);
                    ref += bias[r], mag += fabs(bias[r]);
                    double tol = 4e-7 * (nb + 4) * mag + 1e-30;
                    if (!(fabs(y[(size_t)tk * sh.rows + r] - ref) <= tol)) bad = 1 + s + 10 * inv;
                }
            }
            free(x), free(y), free(bias), free(xs), free(xq), free(xa);
            free_mat(&t);
        }
    }
    kern_set_batch_invariant(false);
    pool_free(p);
    CHECKF(!bad, "int8 off the exact block sums of its quantized activations (case %d)", bad);
}

/* int8 up to kern_i8_x16_max(cols) tokens in plain mode with AVX-512 VNNI:
 * activations in int16 blocks (128 columns, or 64 / 32 for groups 128 does
 * not divide). Each activation within half a step of its block's scale of
 * the input; the outputs the exact integer block sums times the scales
 * within f32 rounding; and a token's outputs the same bits in a batch of 2
 * or kern_i8_x16_max(cols) as alone. Rows past the last 128 or 32 columns, groups of 32, 64,
 * 256. */
TEST(kern_matmul_i8_int16_rows) {
    kern_init();
    if (!kern_use_avx512_vnni()) {
        printf("  (no AVX-512 VNNI: the path is not taken here)\n");
        return;
    }
    static const int dims[][2] = {{37, 1030}, {20, 2048}, {9, 640}, {7, 352},
                                  {5, 1024},  {3, 96},    {6, 4100}};
    static const int groups[] = {0, 0, 64, 32, 256, 0, 0}; /* 0: per row */
    pool *p = pool_create(2);
    int bad = 0;
    for (int s = 0; s < 7 && !bad; s++) {
        int M = dims[s][0], K = dims[s][1], g = groups[s] ? groups[s] : K,
            nmax = kern_i8_x16_max(K);
        const int ns[] = {2, nmax};
        tmat t = make_mat(KT_I8, M, K, g);
        float *x = malloc((size_t)nmax * K * 4), *bias = malloc((size_t)M * 4);
        float *y = malloc((size_t)nmax * M * 4), *alone = malloc((size_t)nmax * M * 4);
        for (int i = 0; i < nmax * K; i++) x[i] = frand() * (i % 7 == 0 ? 8.0f : 1.0f);
        for (int i = 0; i < M; i++) bias[i] = frand();
        for (int tk = 0; tk < nmax; tk++)
            kern_matmul(p, alone + (size_t)tk * M, x + (size_t)tk * K, &t.m, bias, 1);
        for (int k = 0; k < 2 && !bad; k++) {
            kern_matmul(p, y, x, &t.m, bias, ns[k]);
            if (memcmp(y, alone, (size_t)ns[k] * M * 4)) bad = 100 + s;
        }
        kern_i8_x16 a;
        void *buf = di_huge_alloc(kern_i8_x16_bytes(K, nmax));
        kern_i8_x16_prepare(&a, buf, x, &t.m, nmax);
        int B = a.block, nb = (K + B - 1) / B;
        for (int tk = 0; tk < nmax && !bad; tk++) {
            const int16_t *x16 = (const int16_t *)((const char *)a.base + (size_t)tk * a.ld);
            const float *s16 = (const float *)(x16 + a.padded);
            const float *xt = x + (size_t)tk * K;
            for (int k = 0; k < K && !bad; k++) { /* the quantizer: nearest step */
                double err = fabs((double)xt[k] - (double)x16[k] * s16[k / B]);
                if (!(err <= 0.5 * s16[k / B] + fabs(xt[k]) * 1e-6)) bad = 1 + s; /* + rounding */
            }
            for (int r = 0; r < M && !bad; r++) {
                double mag, ref = i8_block_sums_ref(&t, r, x16, s16, B, &mag);
                ref += bias[r], mag += fabs(bias[r]);
                if (!(fabs(alone[(size_t)tk * M + r] - ref) <= 4e-7 * (nb + 4) * mag + 1e-30))
                    bad = 10 + s;
            }
        }
        di_huge_free(buf, kern_i8_x16_bytes(K, nmax));
        free(x), free(y), free(alone), free(bias);
        free_mat(&t);
    }
    pool_free(p);
    CHECKF(!bad, "int8 rows on int16 activations: off the exact sums, or n-dependent (code %d)",
           bad);
}

/* Batch-invariant mode: a token's row is bit-identical whatever n and position. */
TEST(kern_matmul_batch_invariant) {
    pool *p = pool_create(2);
    kern_set_batch_invariant(true);
    int bad = 0;
    static const int ns[] = {1, 2, 3, 7, 17, 64, 150, 1030};
    for (int sc = 0; sc < 2 && !bad; sc++) {
        kern_force_scalar(sc);
        for (int d = 0; d < 5 && !bad; d++) {
            int rows = 45, cols = d == 4 ? 96 : 201; /* odd: a half pair at the end */
            tmat t = make_mat(d < 4 ? (kern_dtype)d : KT_I8, rows, cols, d == 4 ? 32 : cols);
            int nmax = 1030;
            float *x = malloc((size_t)nmax * cols * 4), *y = malloc((size_t)nmax * rows * 4);
            float *bias = malloc((size_t)rows * 4), *ref = malloc((size_t)nmax * rows * 4);
            for (int i = 0; i < nmax * cols; i++) x[i] = frand();
            for (int i = 0; i < rows; i++) bias[i] = frand();
            for (int tk = 0; tk < nmax; tk++)
                kern_matmul(p, ref + (size_t)tk * rows, x + (size_t)tk * cols, &t.m, bias, 1);
            for (int k = 0; k < 8 && !bad; k++) {
                int n = ns[k], off = (k * 13) % (nmax - n + 1);
                kern_matmul(p, y, x + (size_t)off * cols, &t.m, bias, n);
                if (memcmp(y, ref + (size_t)off * rows, (size_t)n * rows * 4))
                    bad = 1 + d * 10 + k * 100 + sc * 1000;
            }
            free(x), free(y), free(bias), free(ref);
            free_mat(&t);
        }
    }
    kern_set_batch_invariant(false);
    kern_force_scalar(false);
    pool_free(p);
    CHECKF(!bad, "batch-invariant mode: result depends on n (code %d)", bad);
}

/* Batch-invariant mode over the small-batch kernel's blocking: more columns
 * than one column chunk (512) with a tail that is not a multiple of 16, rows
 * not a multiple of 4, enough tokens for several token tiles (at most 48
 * tokens each), and each small-n path of the GEMM, on 1 and 2 threads. Every token's outputs must
 * equal the same token computed alone, and the values must match the reference. */
TEST(kern_matmul_batch_invariant_tiles) {
    pool *pools[2] = {pool_create(1), pool_create(2)};
    kern_set_batch_invariant(true);
    int bad = 0;
    static const int ns[] = {2, 5, 7, 8, 49, 120};
    for (int d = 0; d < 5 && !bad; d++) {
        int rows = 43, cols = d == 4 ? 1120 : 1100, nmax = 130; /* int8: 7 groups of 160 */
        tmat t = make_mat(d < 4 ? (kern_dtype)d : KT_I8, rows, cols, d == 4 ? 160 : cols);
        float *x = malloc((size_t)nmax * cols * 4), *y = malloc((size_t)nmax * rows * 4);
        float *bias = malloc((size_t)rows * 4), *ref = malloc((size_t)nmax * rows * 4);
        for (int i = 0; i < nmax * cols; i++) x[i] = frand();
        for (int i = 0; i < rows; i++) bias[i] = frand();
        for (int tk = 0; tk < nmax; tk++)
            kern_matmul(pools[0], ref + (size_t)tk * rows, x + (size_t)tk * cols, &t.m, bias, 1);
        char why[256];
        if (!check_matmul(&t, x, bias, ref, nmax, why, sizeof why)) {
            harness_fail(__FILE__, __LINE__, why);
            bad = -1;
        }
        for (int k = 0; k < 12 && bad == 0; k++) {
            int n = ns[k % 6], off = (k * 7) % (nmax - n + 1);
            kern_matmul(pools[k / 6], y, x + (size_t)off * cols, &t.m, bias, n);
            if (memcmp(y, ref + (size_t)off * rows, (size_t)n * rows * 4))
                bad = 1 + d * 10 + k * 100;
        }
        free(x), free(y), free(bias), free(ref);
        free_mat(&t);
    }
    kern_set_batch_invariant(false);
    for (int i = 0; i < 2; i++) pool_free(pools[i]);
    CHECKF(!bad, "batch-invariant mode across tiles/chunks: result depends on n (code %d)", bad);
}

/* Batch-invariant bf16 over several column blocks, at every kernel's n:
 * 2607 columns are five whole blocks of 512 and an odd 47 (the last block
 * shorter than a step, a half pair at its end), 53 rows leave partial
 * tiles. Each token alone (1 and 2 threads, with and without bias) must
 * equal its row of a batch bit for bit: 5, 12 and 20 tokens (the few-token
 * kernel with one, two and three halves), 40 and 100 (the token lanes, one
 * pass and several), 1047 (the GEMM, token tiles of one at the end of each
 * block); and the reference within rounding. */
TEST(kern_matmul_bf16_invariant_every_kernel) {
    pool *pools[2] = {pool_create(1), pool_create(2)};
    kern_set_batch_invariant(true);
    static const int ns[] = {5, 12, 20, 40, 100, 1047};
    int rows = 53, cols = 2607, nmax = 1047, bad = 0;
    tmat t = make_mat(KT_BF16, rows, cols, cols);
    float *x = malloc((size_t)nmax * cols * 4), *bias = malloc((size_t)rows * 4);
    float *batch = malloc((size_t)nmax * rows * 4), *alone = malloc((size_t)nmax * rows * 4);
    for (int i = 0; i < nmax * cols; i++) x[i] = frand();
    for (int i = 0; i < rows; i++) bias[i] = frand();
    for (int b = 0; b < 2 && !bad; b++) { /* with a bias, then without */
        const float *bv = b ? NULL : bias;
        for (int tk = 0; tk < nmax; tk++)
            kern_matmul(pools[tk & 1], alone + (size_t)tk * rows, x + (size_t)tk * cols, &t.m, bv,
                        1);
        char why[256];
        if (!check_matmul(&t, x, bv, alone, 8, why, sizeof why)) {
            harness_fail(__FILE__, __LINE__, why);
            bad = -1;
        }
        for (int k = 0; k < 6 && !bad; k++) {
            int n = ns[k], off = (k * 37) % (nmax - n + 1);
            kern_matmul(pools[1], batch, x + (size_t)off * cols, &t.m, bv, n);
            if (memcmp(batch, alone + (size_t)off * rows, (size_t)n * rows * 4))
                bad = 1 + k + 100 * b;
        }
    }
    free(x), free(bias), free(batch), free(alone);
    free_mat(&t);
    kern_set_batch_invariant(false);
    for (int i = 0; i < 2; i++) pool_free(pools[i]);
    CHECKF(!bad, "batch-invariant bf16, a token alone against a batch (code %d)", bad);
}

/* Batch-invariant mode on a matrix's packed copy (kern_pack_panels) gives
 * the bits it gives without it, at each n of ns (the one-token kernel reads
 * the copy, batches the weights); on a 300-row matrix, a view of rows
 * [g, 300) keeps the copy (g: the copy's group of rows) and views that
 * start or end inside a group drop it. Returns 0, -1 where this CPU's
 * kernels read no copy of dt, or a code saying what differed. */
static int packed_same_bits(pool *pl, kern_dtype dt, const int (*shapes)[3], int n_shapes,
                            const int *ns, int n_ns, int g) {
    int bad = 0, nmax = ns[n_ns - 1];
    kern_set_batch_invariant(true);
    for (int si = 0; si < n_shapes && !bad; si++) {
        int rows = shapes[si][0], cols = shapes[si][1];
        tmat t = make_mat(dt, rows, cols, shapes[si][2] ? shapes[si][2] : cols);
        size_t bytes = kern_panels_bytes(&t.m);
        if (!bytes) {
            free_mat(&t);
            bad = -1;
            break;
        }
        uint32_t *panels = di_alloc_aligned(bytes);
        kern_pack_panels(pl, panels, &t.m);
        kern_mat packed = t.m;
        packed.panels = panels;
        /* where the copy is all the kernels read, the weights beside it are
         * NaNs, and plain mode on it has the batch-invariant bits too */
        bool only = kern_panels_only(&t.m);
        size_t wbytes = (size_t)rows * cols * kern_dtype_size(dt);
        void *poison = only ? malloc(wbytes) : NULL;
        if (only) memset(poison, 0xff, wbytes), packed.data = poison;
        float *x = malloc((size_t)nmax * cols * 4), *bias = malloc((size_t)rows * 4);
        float *y0 = malloc((size_t)nmax * rows * 4), *y1 = malloc((size_t)nmax * rows * 4);
        for (int i = 0; i < nmax * cols; i++) x[i] = frand();
        for (int i = 0; i < rows; i++) bias[i] = frand();
        for (int k = 0; k < n_ns && !bad; k++) {
            const float *bv = k & 1 ? NULL : bias;
            size_t ybytes = (size_t)ns[k] * rows * 4;
            kern_matmul(pl, y0, x, &t.m, bv, ns[k]);
            kern_matmul(pl, y1, x, &packed, bv, ns[k]);
            if (memcmp(y0, y1, ybytes)) bad = 1 + 10 * k + 100 * si;
            if (bad || !only) continue;
            kern_set_batch_invariant(false);
            kern_matmul(pl, y1, x, &packed, bv, ns[k]);
            kern_set_batch_invariant(true);
            if (memcmp(y0, y1, ybytes)) bad = 3 + 10 * k + 100 * si;
        }
        if (rows == 300 && !bad) {
            kern_mat v0 = kern_mat_rows(&t.m, g, 300 - g), v1 = kern_mat_rows(&packed, g, 300 - g);
            kern_mat u1 = kern_mat_rows(&packed, g / 2, g), w1 = kern_mat_rows(&packed, 0, g + 8);
            if (!v1.panels || u1.panels || w1.panels) bad = 1000;
            kern_matmul(pl, y0, x, &v0, bias, 1);
            kern_matmul(pl, y1, x, &v1, bias, 1);
            if (!bad && memcmp(y0, y1, (size_t)(300 - g) * 4)) bad = 2000;
        }
        free(x), free(bias), free(y0), free(y1), free(poison);
        di_free_aligned(panels);
        free_mat(&t);
    }
    kern_set_batch_invariant(false);
    return bad;
}

/* bf16 (the AVX-512 BF16 layout, and the AVX2 one, also forced where
 * AVX-512 runs: beside the AVX-512 GEMM without BF16, and beside the AVX2
 * one): shapes with a partial last group, half group, panel and column
 * block and an odd column count; n through every kernel's range. */
TEST(kern_matmul_bf16_packed_panels_same_bits) {
    static const int shapes[][3] = {
        {300, 1030, 0}, {53, 2607, 0}, {128, 64, 0}, {1, 33, 0}, {200, 514, 0}};
    static const int ns[] = {1, 2, 5, 7, 24, 25, 100, 1030};
    pool *pl = pool_create(2);
    for (int forced = 0; forced < 3; forced++) {
        kern_force_no_avx512_bf16(forced == 1);
        kern_force_avx2(forced == 2);
        int bad = packed_same_bits(pl, KT_BF16, shapes, 5, ns, 8, 128);
        if (bad < 0) CHECK(!kern_use_avx2()); /* no copy only without the kernels */
        CHECKF(bad <= 0, "batch-invariant bf16 on packed panels differs (code %d, %s)", bad,
               kern_isa());
    }
    kern_force_no_avx512_bf16(false);
    kern_force_avx2(false);
    pool_free(pl);
}

/* int8 (AVX-512 VNNI, 16-row tiles): one scale per row and per 64-column
 * group, a partial last tile and column block. */
TEST(kern_matmul_i8_packed_tiles_same_bits) {
    static const int shapes[][3] = {{300, 1056, 0}, {53, 2624, 64}, {16, 64, 0}, {1, 33, 0}};
    static const int ns[] = {1, 2, 9, 40};
    pool *pl = pool_create(2);
    int bad = packed_same_bits(pl, KT_I8, shapes, 4, ns, 4, 16);
    pool_free(pl);
    if (bad < 0) CHECK(!kern_use_avx512_vnni());
    CHECKF(bad <= 0, "batch-invariant int8 on packed tiles differs (code %d)", bad);
}

/* The AVX2 activation quantizer gives the scalar one's bytes and scales:
 * whole and partial blocks, an all-zero block, ties at .5 after scaling. */
TEST(kern_quantize_act_paths_agree) {
    kern_init();
    if (!kern_use_avx2()) return; /* no AVX2 on this CPU: nothing to compare */
    int bad = 0;
    static const int colss[] = {1, 31, 32, 33, 96, 100, 255, 256, 300, 1100};
    for (int ci = 0; ci < 10 && !bad; ci++) {
        int cols = colss[ci], nb = (cols + 31) / 32;
        float *x = malloc((size_t)cols * 4), *s0 = malloc((size_t)nb * 4),
              *s1 = malloc((size_t)nb * 4);
        int8_t *q0 = malloc((size_t)cols), *q1 = malloc((size_t)cols);
        for (int c = 0; c < cols; c++) x[c] = frand() * (c % 7 == 3 ? 10.0f : 1.0f);
        if (cols >= 64)
            for (int c = 32; c < 64; c++) x[c] = 0.0f; /* all-zero block: scale 0 */
        if (cols >= 96) {                              /* block 2: max 127, so x * inv = x */
            for (int c = 64; c < 96; c++) x[c] = (float)(c - 80) + 0.5f;
            x[64] = 127.0f;
        }
        kern_quantize_act_scalar(q0, s0, x, cols);
        kern_quantize_act_avx2(q1, s1, x, cols);
        if (memcmp(q0, q1, (size_t)cols) || memcmp(s0, s1, (size_t)nb * 4)) bad = cols;
        free(x), free(s0), free(s1), free(q0), free(q1);
    }
    CHECKF(!bad, "quantize_act: AVX2 and scalar differ at cols=%d", bad);
}

TEST(kern_bf16_exhaustive) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kern_bf16_to_f32((uint16_t)h);
        CHECKF(bits(f) == h << 16, "bf16 %04x", h);
        if (!isnan(f))
            CHECKF(kern_f32_to_bf16(f) == h, "bf16 roundtrip %04x", h);
        else
            CHECKF(isnan(kern_bf16_to_f32(kern_f32_to_bf16(f))), "nan %04x", h);
    }
    /* Round to nearest, ties to even, checked against a double computation. */
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)rand() << 16 ^ (uint32_t)rand() ^ (uint32_t)(i & 1) << 31;
        if (i % 7 == 0) u = (u & 0xffff0000u) | 0x8000u; /* exact ties */
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f) || isinf(f)) continue;
        uint16_t h = kern_f32_to_bf16(f);
        double lo = kern_bf16_to_f32((uint16_t)(u >> 16));
        double hi = kern_bf16_to_f32((uint16_t)((u >> 16) + 1));
        double dl = fabs((double)f - lo), dh = fabs(hi - (double)f);
        uint32_t low = u & 0xffffu;
        if (isinf(hi)) dh = low > 0x8000u ? 0 : low < 0x8000u ? 1e300 : dl; /* overflow edge */
        uint16_t want = dl < dh ? (uint16_t)(u >> 16)
                        : dh < dl
                            ? (uint16_t)((u >> 16) + 1)
                            : ((u >> 16) & 1 ? (uint16_t)((u >> 16) + 1) : (uint16_t)(u >> 16));
        CHECKF(h == want, "f32 %08x -> bf16 %04x want %04x", u, h, want);
    }
    /* kern_round_bf16 (a bf16 matmul's activations) is the same rounding:
     * the same bits, NaNs and infinities included, vectorized (a tail of
     * five) and scalar. */
    enum { NR = 4096 + 5 };
    static float src[NR], dst[NR];
    for (int rep = 0, bad = 0; rep < 64 && !bad; rep++) {
        kern_force_scalar(rep & 1);
        for (int i = 0; i < NR; i++) {
            uint32_t u = (uint32_t)rand() << 16 ^ (uint32_t)rand() ^ (uint32_t)(i & 1) << 31;
            if (i % 5 == 0) u = (u & 0xffff0000u) | 0x8000u;      /* ties */
            if (i % 97 == 0) u = (u & 0x807fffffu) | 0x7f800000u; /* inf, NaN */
            memcpy(&src[i], &u, 4);
        }
        kern_round_bf16(dst, src, NR);
        for (int i = 0; i < NR && !bad; i++) {
            float want = kern_bf16_to_f32(kern_f32_to_bf16(src[i]));
            bad = bits(dst[i]) != bits(want);
            CHECKF(!bad, "round %08x -> %08x want %08x", bits(src[i]), bits(dst[i]), bits(want));
        }
    }
    kern_force_scalar(false);
}

TEST(kern_f16_exhaustive) {
    for (uint32_t h = 0; h < 65536; h++) {
        int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
        double want = e == 0    ? ldexp(m, -24)
                      : e == 31 ? (m ? NAN : INFINITY)
                                : ldexp(1024 + m, e - 25);
        if (s) want = -want;
        float got = kern_f16_to_f32((uint16_t)h);
        if (isnan(want))
            CHECKF(isnan(got), "f16 %04x", h);
        else
            CHECKF((double)got == want && !!signbit(got) == !!signbit(want), "f16 %04x: %g vs %g",
                   h, got, want);
    }
}

TEST(kern_fp8_exhaustive) {
    for (int v = 0; v < 256; v++) {
        int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
        double want = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
        if (e == 15 && m == 7) want = NAN;
        if (s) want = -want;
        float got = kern_fp8e4m3_to_f32((uint8_t)v);
        if (isnan(want))
            CHECKF(isnan(got), "fp8 %02x", v);
        else
            CHECKF((double)got == want && !!signbit(got) == !!signbit(want), "fp8 %02x: %g vs %g",
                   v, got, want);
    }
    CHECK(kern_fp8e4m3_to_f32(0x7e) == 448.0f);
    CHECK(kern_fp8e4m3_to_f32(0x01) == 0x1p-9f);
}

TEST(kern_quantize_i8_roundtrip) {
    float w[3 * 64];
    for (int i = 0; i < 3 * 64; i++) w[i] = frand() * 3;
    int8_t q[3 * 64];
    float s[3 * 2];
    kern_quantize_i8(q, s, w, 3, 64, 32);
    kern_mat W = {.dtype = KT_I8, .rows = 3, .cols = 64, .data = q, .scales = s, .group = 32};
    float row[64];
    for (int r = 0; r < 3; r++) {
        kern_row_f32(row, &W, r);
        for (int c = 0; c < 64; c++) {
            CHECK(q[r * 64 + c] >= -127);
            CHECKF(fabsf(row[c] - w[r * 64 + c]) <= s[r * 2 + c / 32] * 0.5001f, "r%d c%d", r, c);
        }
    }
}

static double rel_err(double got, double want) {
    return fabs(got - want) / (fabs(want) + 1e-6);
}

/* The row-run attention helpers equal the per-row ones bit for bit, on every
 * path (AVX-512 where present, AVX2, scalar), for head sizes the fast paths
 * take and ones they hand back, on f32 rows and on bf16 rows (against the
 * per-row helpers on the same values in f32; n = 4100 does not fit the
 * widening buffer). */
TEST(kern_rows_helpers_equal_per_row) {
    static const int ns[] = {16, 24, 64, 72, 128, 136, 576, 4100};
    int bad = 0;
    for (int path = 0; path < 6 && !bad; path++) {
        bool bf = path >= 3;
        kern_force_avx2(path % 3 == 1);
        kern_force_scalar(path % 3 == 2);
        for (int ni = 0; ni < 8 && !bad; ni++) {
            int n = ns[ni], stride = n * 3 + 5;
            for (int m = 0; m <= (n > 1000 ? 5 : 11) && !bad; m++) {
                size_t nb = (size_t)m * stride + 1;
                float *a = malloc(16 * 4 + (size_t)n * 4), *b = malloc(nb * 4);
                uint16_t *bb = malloc(nb * 2);
                float *y1 = malloc((size_t)n * 4), *y2 = malloc((size_t)n * 4);
                for (int i = 0; i < 16 + n; i++) a[i] = frand();
                for (size_t i = 0; i < nb; i++) {
                    bb[i] = kern_f32_to_bf16(frand());
                    b[i] = bf ? kern_bf16_to_f32(bb[i]) : frand();
                }
                const void *rows = bf ? (const void *)bb : b;
                kern_dtype dt = bf ? KT_BF16 : KT_F32;
                for (int i = 0; i < n; i++) y1[i] = y2[i] = frand();
                kern_axpy_rows(y1, a, b, (size_t)stride, m, n);
                for (int i = 0; i < m; i++) kern_axpy(y2, a[i], b + (size_t)i * stride, n);
                if (memcmp(y1, y2, (size_t)n * 4)) bad = 1 + m + 100 * n + 1000000 * path;
                for (int na = 1; na <= 6 && !bad; na++) { /* one query head, or several */
                    float *q = malloc((size_t)na * n * 4), *h1 = malloc((size_t)na * 12 * 4);
                    float *o1 = malloc((size_t)na * n * 4), *o2 = malloc((size_t)na * n * 4);
                    for (int i = 0; i < na * n; i++) q[i] = frand(), o1[i] = o2[i] = frand();
                    kern_dot_heads(h1, 12, q, na, rows, dt, (size_t)stride, m, n);
                    for (int h = 0; h < na && !bad; h++)
                        for (int i = 0; i < m && !bad; i++)
                            if (memcmp(&h1[h * 12 + i],
                                       &(float){
                                           kern_dot(q + (size_t)h * n, b + (size_t)i * stride, n)},
                                       4))
                                bad = 2 + m + 100 * n + 10000 * na + 1000000 * path;
                    /* weights: head h's m weights at q + 12 h (q has na * n >= 12 na) */
                    kern_axpy_heads(o1, (size_t)n, q, 12, na, rows, dt, (size_t)stride, m, n);
                    for (int h = 0; h < na; h++)
                        for (int i = 0; i < m; i++)
                            kern_axpy(o2 + (size_t)h * n, q[h * 12 + i], b + (size_t)i * stride, n);
                    if (!bad && memcmp(o1, o2, (size_t)na * n * 4))
                        bad = 3 + m + 100 * n + 10000 * na + 1000000 * path;
                    free(q), free(h1), free(o1), free(o2);
                }
                free(a), free(b), free(bb), free(y1), free(y2);
            }
        }
    }
    kern_force_avx2(false);
    kern_force_scalar(false);
    CHECKF(!bad, "row helpers differ from per-row calls (code %d)", bad);
}

/* The bf16 row conversions are kern_f32_to_bf16 / kern_bf16_to_f32 per
 * element, NaN and infinities included. */
TEST(kern_bf16_rows) {
    float src[37];
    for (int i = 0; i < 37; i++) src[i] = frand() * 1000;
    src[3] = NAN, src[5] = INFINITY, src[7] = -INFINITY, src[9] = -0.0f, src[11] = 1e-40f;
    uint16_t h[37];
    float back[37];
    kern_f32_row_to_bf16(h, src, 37);
    for (int path = 0; path < 2; path++) {
        kern_force_scalar(path == 1);
        kern_bf16_row_to_f32(back, h, 37);
        for (int i = 0; i < 37; i++) {
            CHECKF(h[i] == kern_f32_to_bf16(src[i]), "element %d", i);
            uint16_t r = kern_f32_to_bf16(back[i]);
            CHECKF(r == h[i] && !memcmp(&back[i], &(float){kern_bf16_to_f32(h[i])}, 4),
                   "element %d (path %d)", i, path);
        }
    }
    kern_force_scalar(false);
}

TEST(kern_vector_ops) {
    static const int ns[] = {1, 3, 8, 15, 16, 33, 100, 1027};
    for (int sc = 0; sc < 2; sc++) {
        kern_force_scalar(sc);
        for (int k = 0; k < 8; k++) {
            int n = ns[k];
            float *a = malloc(n * 4), *b = malloc(n * 4), *y = malloc(n * 4), *w = malloc(n * 4);
            for (int i = 0; i < n; i++) a[i] = frand() * 4, b[i] = frand() * 4, w[i] = frand();
            double dref = 0, mag = 0;
            for (int i = 0; i < n; i++) dref += (double)a[i] * b[i], mag += fabs(a[i] * b[i]);
            CHECKF(fabs(kern_dot(a, b, n) - dref) <= 1e-5 * mag + 1e-6, "dot n=%d", n);

            memcpy(y, a, n * 4);
            kern_axpy(y, 0.5f, b, n);
            for (int i = 0; i < n; i++) CHECK(fabs(y[i] - (a[i] + 0.5 * b[i])) < 1e-5);
            kern_scale(y, 2.0f, n);
            for (int i = 0; i < n; i++) CHECK(fabs(y[i] - 2 * (a[i] + 0.5 * b[i])) < 1e-5);
            memcpy(y, a, n * 4);
            kern_add(y, b, n);
            for (int i = 0; i < n; i++) CHECK(y[i] == a[i] + b[i]);

            double ss = 0;
            for (int i = 0; i < n; i++) ss += (double)a[i] * a[i];
            double inv = 1 / sqrt(ss / n + 1e-6);
            kern_rmsnorm(y, a, w, n, 1e-6f);
            for (int i = 0; i < n; i++) CHECKF(fabs(y[i] - a[i] * inv * w[i]) < 1e-5, "rms %d", i);
            memcpy(y, a, n * 4);
            kern_rmsnorm(y, y, NULL, n, 1e-6f); /* aliasing, no weight */
            for (int i = 0; i < n; i++) CHECK(fabs(y[i] - a[i] * inv) < 1e-5);

            memcpy(y, a, n * 4);
            if (n > 2) y[1] = -INFINITY; /* masked entry */
            kern_softmax(y, n);
            double m = -1e30, s = 0;
            for (int i = 0; i < n; i++)
                if (!(n > 2 && i == 1)) m = fmax(m, a[i]);
            for (int i = 0; i < n; i++)
                if (!(n > 2 && i == 1)) s += exp(a[i] - m);
            for (int i = 0; i < n; i++) {
                double want = n > 2 && i == 1 ? 0 : exp(a[i] - m) / s;
                CHECKF(fabs(y[i] - want) <= 2e-6 * want + 1e-9, "softmax n=%d i=%d", n, i);
            }

            for (int k = 0; k < 2; k++) { /* in place, and into another buffer */
                if (k == 0) memcpy(y, a, n * 4);
                kern_silu_mul(y, k ? a : y, b, n);
                for (int i = 0; i < n; i++) {
                    double g = a[i], want = g / (1 + exp(-g)) * b[i];
                    CHECKF(rel_err(y[i], want) < 1e-5 || fabs(y[i] - want) < 1e-6, "silu %d", i);
                }
            }
            free(a), free(b), free(y), free(w);
        }
    }
    kern_force_scalar(false);
    float big[4] = {-100, 100, 0, -50};
    kern_silu_mul(big, big, (float[]){1, 1, 1, 1}, 4);
    CHECK(fabsf(big[0]) < 1e-30f && big[1] == 100 && big[2] == 0);
}

/* Softmax and SiLU give the same bits on AVX-512 as on AVX2 (lane for lane
 * the same exp, the sum in the same order), at lengths around the vector
 * widths and with masked (-inf) entries; kern_softmax_scaled equals scaling
 * first on every path. */
TEST(kern_softmax_silu_paths_agree) {
    static const int ns[] = {1, 7, 8, 9, 15, 16, 17, 23, 24, 31, 100, 1027, 4099};
    int bad = 0;
    for (int k = 0; k < 13 && !bad; k++) {
        int n = ns[k];
        float *a = malloc(n * 4), *b = malloc(n * 4), *y[3], *z[2];
        for (int i = 0; i < n; i++) a[i] = frand() * 40, b[i] = frand() * 4;
        if (n > 3) a[2] = -INFINITY;
        for (int v = 0; v < 3; v++) y[v] = malloc(n * 4);
        for (int v = 0; v < 2; v++) z[v] = malloc(n * 4);
        for (int path = 0; path < 3 && !bad; path++) {
            kern_force_avx2(path == 1);
            kern_force_scalar(path == 2);
            float *pre = malloc(n * 4);
            for (int i = 0; i < n; i++) pre[i] = a[i] * 0.125f;
            memcpy(y[path], a, n * 4);
            kern_softmax_scaled(y[path], n, 0.125f);
            kern_softmax(pre, n);
            if (memcmp(pre, y[path], n * 4)) bad = 1 + 10 * path + 100 * n;
            if (path < 2) kern_silu_mul(z[path], b, a, n);
            free(pre);
        }
        if (!bad && memcmp(y[0], y[1], n * 4)) bad = 2 + 100 * n;
        if (!bad && memcmp(z[0], z[1], n * 4)) bad = 3 + 100 * n;
        for (int v = 0; v < 3; v++) free(y[v]);
        free(z[0]), free(z[1]), free(a), free(b);
    }
    kern_force_avx2(false);
    kern_force_scalar(false);
    CHECKF(!bad, "softmax / silu paths differ (code %d)", bad);
}

/* The argmax a sampler expects, one comparison at a time: the first index
 * of the largest value, NaNs never taken, the first -inf where nothing is
 * larger, else 0. */
static int argmax_reference(const float *x, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (x[i] > -INFINITY && (best < 0 || x[i] > x[best])) best = i;
    for (int i = 0; i < n && best < 0; i++)
        if (x[i] == -INFINITY) best = i;
    return best < 0 ? 0 : best;
}

/* kern_argmax on both paths against that, at lengths around the vector
 * widths: ties of the maximum (planted across lanes and chunks, the first
 * must win), NaNs and -inf among the values, all NaN, all -inf, empty. */
TEST(kern_argmax_first_of_largest) {
    static const int ns[] = {0, 1, 2, 7, 8, 9, 31, 32, 33, 63, 100, 1027, 128256};
    unsigned r = 7;
    int bad = 0;
    for (int k = 0; k < 13 && !bad; k++) {
        int n = ns[k];
        float *x = malloc((n ? n : 1) * sizeof(float));
        for (int trial = 0; trial < 40 && !bad; trial++) {
            for (int i = 0; i < n; i++) x[i] = (float)(harness_lcg(&r) % 2000) - 1000.0f;
            int kind = trial % 8;
            if (kind >= 1 && n) { /* the maximum in two or three places */
                for (int c = 0; c < 1 + kind % 3; c++) x[harness_lcg(&r) % n] = 5000.0f;
            }
            if (kind >= 4 && n) /* NaNs, some above the rest in the order */
                for (int c = 0; c < 3; c++) x[harness_lcg(&r) % n] = NAN;
            if (kind == 5 && n) x[harness_lcg(&r) % n] = -INFINITY;
            if (kind == 6)
                for (int i = 0; i < n; i++) x[i] = harness_lcg(&r) % 3 ? -INFINITY : NAN;
            if (kind == 7)
                for (int i = 0; i < n; i++) x[i] = NAN;
            int want = argmax_reference(x, n);
            for (int path = 0; path < 2 && !bad; path++) {
                kern_force_scalar(path == 1);
                int got = kern_argmax(x, n);
                if (got != want) bad = 1 + path + 10 * kind + 100 * n;
            }
        }
        free(x);
    }
    kern_force_scalar(false);
    CHECKF(!bad, "argmax differs from the reference (code %d)", bad);
}

TEST(kern_rope_pair_orders) {
    float cs[4], sn[4], x[8], y[8];
    for (int i = 0; i < 4; i++) cs[i] = cosf(0.3f * (i + 1)), sn[i] = sinf(0.3f * (i + 1));
    for (int i = 0; i < 8; i++) x[i] = frand();
    memcpy(y, x, sizeof y);
    kern_rope(y, cs, sn, 8, true);
    for (int i = 0; i < 4; i++) {
        CHECK(fabsf(y[2 * i] - (x[2 * i] * cs[i] - x[2 * i + 1] * sn[i])) < 1e-6f);
        CHECK(fabsf(y[2 * i + 1] - (x[2 * i] * sn[i] + x[2 * i + 1] * cs[i])) < 1e-6f);
    }
    memcpy(y, x, sizeof y);
    kern_rope(y, cs, sn, 8, false);
    for (int i = 0; i < 4; i++) {
        CHECK(fabsf(y[i] - (x[i] * cs[i] - x[i + 4] * sn[i])) < 1e-6f);
        CHECK(fabsf(y[i + 4] - (x[i] * sn[i] + x[i + 4] * cs[i])) < 1e-6f);
    }
}

/* The AVX2 rope gives the scalar loop's bits, both layouts, at widths
 * around its 4- and 8-pair steps (the pairs past them left to the loop). */
TEST(kern_rope_paths_agree) {
    int bad = 0;
    for (int dim = 2; dim <= 140 && !bad; dim += 2)
        for (int il = 0; il < 2 && !bad; il++) {
            float cs[70], sn[70], x[140], y[2][140];
            for (int i = 0; i < dim / 2; i++)
                cs[i] = cosf(0.7f * i + 0.1f), sn[i] = sinf(0.7f * i + 0.1f);
            for (int i = 0; i < dim; i++) x[i] = frand() * 8;
            for (int path = 0; path < 2; path++) {
                kern_force_scalar(path == 1);
                memcpy(y[path], x, sizeof x);
                kern_rope(y[path], cs, sn, dim, il);
            }
            if (memcmp(y[0], y[1], sizeof y[0])) bad = dim * 2 + il;
        }
    kern_force_scalar(false);
    CHECKF(!bad, "rope paths differ (dim %d, interleaved %d)", bad / 2, bad % 2);
}

TEST(kern_row_and_isa) {
    kern_init();
    CHECK(strcmp(kern_isa(), "avx2+avx512+bf16") == 0 || strcmp(kern_isa(), "avx2+avx512") == 0 ||
          strcmp(kern_isa(), "avx2") == 0 || strcmp(kern_isa(), "scalar") == 0);
    kern_force_avx2(true);
    CHECK(strcmp(kern_isa(), "avx2") == 0 || strcmp(kern_isa(), "scalar") == 0);
    kern_force_avx2(false);
    kern_force_scalar(true);
    CHECK(strcmp(kern_isa(), "scalar") == 0);
    kern_force_scalar(false);
    uint16_t h[19];
    for (int i = 0; i < 19; i++) h[i] = kern_f32_to_bf16(frand());
    kern_mat W = {.dtype = KT_BF16, .rows = 1, .cols = 19, .data = h};
    float out[19];
    kern_row_f32(out, &W, 0);
    for (int i = 0; i < 19; i++) CHECK(out[i] == kern_bf16_to_f32(h[i]));
}

TEST(kern_limits_measure) {
    pool *p = pool_create(2);
    double bw = kern_measure_read_bandwidth(p, (size_t)16 << 20);
    double peak = kern_measure_fma_peak(p);
    fprintf(stderr, "  (small-buffer) read %.1f GB/s, fma peak %.1f GFLOP/s\n", bw, peak);
    CHECK(bw > 0.1 && peak > 0.1);
    /* the dot-product peaks where the CPU has them, 0 where not */
    double bf16 = kern_measure_bf16_dot_peak(p), i8 = kern_measure_i8_dot_peak(p);
    CHECK(kern_use_avx512_bf16() ? bf16 > 0.1 : bf16 == 0);
    CHECK(kern_use_avx512_vnni() ? i8 > 0.1 : i8 == 0);
    pool_free(p);
}
