/* kernels.c — kernel dispatch, element conversions, int8 quantization, row
 * lookup, and the portable scalar vector helpers.
 *
 * Every public kernel checks one switch (use_avx2) and either runs the AVX2
 * version (ops_avx2.c, matmul_avx2.c) or the portable one here. On CPUs with
 * AVX-512 the GEMM's register tile (gemm_avx512.c), the batched-decode row
 * blocks (matmul_avx512.c) and the attention helpers (ops_avx512.c) are
 * 512-bit, and with AVX-512 BF16 every bf16 matmul runs on bf16 dot
 * products (matmul_bf16_avx512.c). The scalar versions are the reference the
 * tests compare against, so they are written plainly, in the order the math
 * is defined.
 *
 * Global state: the dispatch switches below (set by kern_init,
 * kern_force_scalar, kern_set_batch_invariant; read by every kernel), and
 * kern_init clears kern_few_touch under DEEPINFER_FEW_TOUCH=0. Per
 * thread: the matmuls' scratch buffers (kern_scratch). */
#include "kernels/kern_internal.h"

#include "base/base.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_bool have_avx2;     /* CPU supports AVX2+FMA+F16C */
static atomic_bool have_avx512;   /* ... and AVX-512 F/BW/VL */
static atomic_bool have_vnni;     /* ... and AVX-512 VNNI */
static atomic_bool have_bf16;     /* ... and AVX-512 BF16 */
static atomic_bool force_scalar;  /* tests: use the scalar path */
static atomic_bool force_avx2;    /* tests: AVX2 even where AVX-512 is there */
static atomic_bool force_no_bf16; /* tests: not AVX-512 BF16 even where it is there */
static atomic_bool batch_inv;     /* batch-invariant reduction order */
static atomic_bool inited;

void kern_init(void) {
    if (atomic_load(&inited)) return;
    __builtin_cpu_init();
    bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
              __builtin_cpu_supports("f16c");
    atomic_store(&have_avx2, ok);
    bool avx512 = ok && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl");
    atomic_store(&have_avx512, avx512);
    atomic_store(&have_vnni, avx512 && __builtin_cpu_supports("avx512vnni"));
    atomic_store(&have_bf16, avx512 && __builtin_cpu_supports("avx512bf16"));
    const char *touch = getenv("DEEPINFER_FEW_TOUCH"); /* "0": measure without it */
    if (touch && !strcmp(touch, "0")) kern_few_touch = 0;
    atomic_store(&inited, true);
}

void kern_force_scalar(bool on) {
    atomic_store(&force_scalar, on);
}

bool kern_use_avx2(void) {
    if (!atomic_load_explicit(&inited, memory_order_relaxed)) kern_init();
    return atomic_load_explicit(&have_avx2, memory_order_relaxed) &&
           !atomic_load_explicit(&force_scalar, memory_order_relaxed);
}

void kern_force_avx2(bool on) {
    atomic_store(&force_avx2, on);
}

bool kern_use_avx512(void) {
    return kern_use_avx2() && atomic_load_explicit(&have_avx512, memory_order_relaxed) &&
           !atomic_load_explicit(&force_avx2, memory_order_relaxed);
}

bool kern_use_avx512_vnni(void) {
    return kern_use_avx512() && atomic_load_explicit(&have_vnni, memory_order_relaxed);
}

bool kern_use_avx512_bf16(void) {
    return kern_use_avx512() && atomic_load_explicit(&have_bf16, memory_order_relaxed) &&
           !atomic_load_explicit(&force_no_bf16, memory_order_relaxed);
}

void kern_force_no_avx512_bf16(bool on) {
    atomic_store(&force_no_bf16, on);
}

const char *kern_isa(void) {
    return kern_use_avx512_bf16() ? "avx2+avx512+bf16"
           : kern_use_avx512()    ? "avx2+avx512"
           : kern_use_avx2()      ? "avx2"
                                  : "scalar";
}

void kern_set_batch_invariant(bool on) {
    atomic_store(&batch_inv, on);
}
bool kern_batch_inv(void) {
    return atomic_load_explicit(&batch_inv, memory_order_relaxed);
}

/* ---- per-thread scratch ----------------------------------------------------- */
typedef struct scratch_buf {
    void *p;
    size_t cap;
} scratch_buf;
static _Thread_local scratch_buf scratch[KERN_SCRATCH_SLOTS];
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *bufs) {
    scratch_buf *s = bufs;
    for (int i = 0; i < KERN_SCRATCH_SLOTS; i++) free(s[i].p), s[i] = (scratch_buf){0};
}
static void scratch_key_create(void) {
    if (pthread_key_create(&scratch_key, scratch_free)) abort();
}

void *kern_scratch(int slot, size_t bytes) {
    scratch_buf *s = &scratch[slot];
    if (bytes <= s->cap) return s->p;
    pthread_once(&scratch_once, scratch_key_create);
    pthread_setspecific(scratch_key, scratch); /* the destructor frees them at thread exit */
    size_t cap = (bytes + 4095) & ~(size_t)4095;
    if (cap < 2 * s->cap) cap = 2 * s->cap;
    free(s->p);
    s->p = aligned_alloc(64, cap);
    if (!s->p) abort();
    s->cap = cap;
    return s->p;
}

/* ---- conversions ------------------------------------------------------- */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float kern_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t kern_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* f's bits rounded so that the high half is its bf16 (nearest even, NaN
 * kept quiet): one integer expression, so the loops over it vectorize. */
static inline uint32_t bf16_rounded_bits(float f) {
    uint32_t u = f32_bits(f);
    return (u & 0x7fffffffu) > 0x7f800000u ? u | 0x400000u : u + 0x7fffu + ((u >> 16) & 1u);
}

/* kern_f32_to_bf16 then back (it runs over every activation of every bf16
 * matmul where there is no AVX-512 BF16: a few per cent of a DeepSeek
 * decode step, one call per expert, until it ran eight at a time). */
void kern_round_bf16_scalar(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bits_f32(bf16_rounded_bits(src[i]) & 0xffff0000u);
}

void kern_round_bf16(float *dst, const float *src, size_t n) {
    if (kern_use_avx2())
        kern_round_bf16_avx2(dst, src, n);
    else
        kern_round_bf16_scalar(dst, src, n);
}

float kern_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {
        float v = ldexpf((float)man, -24); /* subnormal (or zero): man * 2^-24 */
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* OCP FP8 E4M3 ("e4m3fn"): bias 7, no infinities, S.1111.111 is NaN,
 * exponent 0 is subnormal (man/8 * 2^-6). Largest finite value 448. */
float kern_fp8e4m3_to_f32(uint8_t v) {
    uint32_t exp = (v >> 3) & 0xfu;
    uint32_t man = v & 7u;
    float r;
    if (exp == 0xf && man == 7) return bits_f32((v & 0x80u ? 0xffc00000u : 0x7fc00000u));
    if (exp == 0)
        r = ldexpf((float)man, -9);
    else
        r = bits_f32(((exp + 120) << 23) | (man << 20));
    return v & 0x80u ? -r : r;
}

size_t kern_dtype_size(kern_dtype t) {
    return t == KT_F32 ? 4 : t == KT_I8 ? 1 : 2;
}

/* A packed copy's groups of rows, each laid out by itself (bf16: 128 rows,
 * the GEMM's panel groups; int8: the 16-row tiles), and its bytes for W's
 * shape, whatever this CPU's kernels read. */
static int copy_group_rows(const kern_mat *W) {
    return W->dtype == KT_I8 ? KERN_I8_TILE_ROWS : KERN_PANEL_GROUP_ROWS;
}

/* bf16: whole panels of rows (zero past the matrix), a 32-bit word per row
 * and column pair; the same for either layout (AVX-512 BF16, AVX2). */
size_t kern_bf16_panels_bytes(const kern_mat *W) {
    size_t panels = (size_t)(W->rows + KERN_PANEL_ROWS - 1) / KERN_PANEL_ROWS;
    return panels * KERN_PANEL_ROWS * (size_t)((W->cols + 1) / 2) * sizeof(uint32_t);
}

static size_t copy_bytes(const kern_mat *W) {
    return W->dtype == KT_I8 ? kern_i8_panels_bytes(W) : kern_bf16_panels_bytes(W);
}

kern_mat kern_mat_rows(const kern_mat *W, int r0, int n) {
    kern_mat v = *W;
    v.rows = n;
    v.data = (const char *)W->data + (size_t)r0 * (size_t)W->cols * kern_dtype_size(W->dtype);
    if (W->dtype == KT_I8 && W->scales)
        v.scales = W->scales + (size_t)r0 * (size_t)(W->cols / W->group);
    if (W->panels && kern_panels_view(W, r0, n)) {
        /* the copy of rows [0, r0), whole groups, comes first */
        kern_mat head = *W;
        head.rows = r0;
        v.panels = W->panels + copy_bytes(&head) / sizeof(uint32_t);
    } else {
        v.panels = NULL;
    }
    return v;
}

bool kern_panels_view(const kern_mat *W, int r0, int n) {
    int grp = copy_group_rows(W);
    return r0 % grp == 0 && (n % grp == 0 || r0 + n == W->rows);
}

int kern_panels_group(const kern_mat *W) {
    return W->panels ? copy_group_rows(W) : 1;
}

size_t kern_panels_bytes(const kern_mat *W) {
    if (!W->data) return 0;
    if ((W->dtype == KT_BF16 && kern_use_avx2()) ||
        (W->dtype == KT_I8 && kern_use_avx512_vnni() && kern_i8_blockable(W)))
        return copy_bytes(W);
    return 0;
}

bool kern_panels_only(const kern_mat *W) {
    return W->data && W->dtype == KT_BF16 && kern_use_avx2() && !kern_use_avx512_bf16();
}

void kern_pack_panels(pool *p, uint32_t *dst, const kern_mat *W) {
    if (!kern_panels_bytes(W)) return;
    if (W->dtype == KT_I8)
        kern_i8_pack_panels(p, dst, W);
    else if (kern_use_avx512_bf16())
        kern_bf16_pack_panels(p, dst, W);
    else
        kern_bf16_pack_panels_avx2(p, dst, W);
}

int kern_one_token_grain(kern_dtype t, int cols) {
    size_t row = (size_t)(cols > 0 ? cols : 1) * kern_dtype_size(t);
    size_t g = ((64u << 10) / row + 15) / 16 * 16;
    return g > 0 ? (int)g : 16;
}

void kern_prefetch_start(const void *p, size_t bytes) {
    const char *c = p;
    if (bytes > KERN_NTA_AHEAD) bytes = KERN_NTA_AHEAD;
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, 0);
}

void kern_row_f32(float *out, const kern_mat *W, int r) {
    int cols = W->cols;
    size_t off = (size_t)r * (size_t)cols;
    switch (W->dtype) {
    case KT_F32:
        memcpy(out, (const float *)W->data + off, (size_t)cols * sizeof(float));
        break;
    case KT_BF16:
        if (kern_use_avx2()) {
            kern_row_bf16_avx2(out, (const uint16_t *)W->data + off, cols);
            break;
        }
        for (int c = 0; c < cols; c++)
            out[c] = kern_bf16_to_f32(((const uint16_t *)W->data)[off + c]);
        break;
    case KT_F16:
        for (int c = 0; c < cols; c++)
            out[c] = kern_f16_to_f32(((const uint16_t *)W->data)[off + c]);
        break;
    case KT_I8: {
        const int8_t *q = (const int8_t *)W->data + off;
        int g = W->group > 0 ? W->group : cols;
        const float *s = W->scales + (size_t)r * (size_t)(cols / g);
        for (int c = 0; c < cols; c++) out[c] = (float)q[c] * s[c / g];
        break;
    }
    }
}

/* ---- int8 quantization ------------------------------------------------- */

void kern_quantize_i8(int8_t *q, float *scales, const float *w, int rows, int cols, int group) {
    if (group <= 0 || group > cols) group = cols;
    int ng = cols / group;
    for (int r = 0; r < rows; r++) {
        for (int g = 0; g < ng; g++) {
            const float *src = w + (size_t)r * cols + (size_t)g * group;
            int8_t *dst = q + (size_t)r * cols + (size_t)g * group;
            /* written so that they vectorize (no libm calls: a load
             * quantizes a billion weights) */
            float amax = 0;
            for (int c = 0; c < group; c++) {
                float a = fabsf(src[c]);
                amax = a > amax ? a : amax;
            }
            float s = amax / 127.0f;
            float inv = s > 0 ? 1.0f / s : 0.0f;
            for (int c = 0; c < group; c++) {
                /* |v| <= 127: adding and taking away 1.5 * 2^23 rounds it to
                 * the nearest integer, ties to even, as nearbyintf does */
                float v = (src[c] * inv + 12582912.0f) - 12582912.0f;
                dst[c] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
            }
            scales[(size_t)r * ng + g] = s;
        }
    }
}

bool kern_i8_prefill_on_bf16(int group, int cols) {
    int g = group > 0 ? group : cols, kc = KERN_BF16_GEMM_KC;
    if (!kern_use_avx512_bf16() || cols <= 0) return false;
    /* with several groups, each column block lies in one and starts on a pair */
    return g == cols || (cols % g == 0 && (g % kc == 0 || (kc % g == 0 && g % 2 == 0)));
}

bool kern_i8_blockable(const kern_mat *W) {
    int g = W->group > 0 ? W->group : W->cols;
    return g == W->cols || g % KQ_BLOCK == 0;
}

void kern_quantize_act_scalar(int8_t *q, float *s, const float *x, int cols) {
    for (int b = 0; b * KQ_BLOCK < cols; b++) {
        int c0 = b * KQ_BLOCK, c1 = c0 + KQ_BLOCK < cols ? c0 + KQ_BLOCK : cols;
        float amax = 0;
        for (int c = c0; c < c1; c++) amax = fmaxf(amax, fabsf(x[c]));
        float sc = amax / 127.0f;
        float inv = sc > 0 ? 127.0f / amax : 0.0f;
        for (int c = c0; c < c1; c++) q[c] = (int8_t)nearbyintf(x[c] * inv);
        s[b] = sc;
    }
}

void kern_quantize_act(int8_t *q, float *s, const float *x, int cols) {
    if (kern_use_avx2())
        kern_quantize_act_avx2(q, s, x, cols);
    else
        kern_quantize_act_scalar(q, s, x, cols);
}

/* ---- vector helpers ---------------------------------------------------- */

float kern_dot(const float *a, const float *b, int n) {
    if (kern_use_avx2()) return kern_dot_avx2(a, b, n);
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The f32 helpers on f32 rows. */
static void dot_heads_f32(float *out, size_t ld, const float *a, int n_a, const float *b,
                          size_t stride, int m, int n) {
    if (kern_use_avx512()) {
        kern_dot_heads_avx512(out, ld, a, n_a, b, false, stride, m, n);
        return;
    }
    if (kern_use_avx2()) {
        kern_dot_heads_avx2(out, ld, a, n_a, b, stride, m, n);
        return;
    }
    for (int h = 0; h < n_a; h++)
        for (int i = 0; i < m; i++)
            out[(size_t)h * ld + i] = kern_dot(a + (size_t)h * n, b + (size_t)i * stride, n);
}

static void axpy_heads_f32(float *y, size_t ldy, const float *a, size_t lda, int n_a,
                           const float *x, size_t stride, int m, int n) {
    if (kern_use_avx512()) {
        kern_axpy_heads_avx512(y, ldy, a, lda, n_a, x, false, stride, m, n);
        return;
    }
    for (int h = 0; h < n_a; h++) kern_axpy_rows(y + h * ldy, a + h * lda, x, stride, m, n);
}

/* bf16 rows through the f32 helpers: a chunk of rows at a time widened into
 * a buffer on the stack, the chunks in row order (so the sums are the f32
 * helpers' on the widened rows). Where there is no AVX-512, and for what
 * the AVX-512 helpers leave over. */
#define WIDEN_FLOATS 4096

static float *widen_buf(float *stack, int n, int *rows) {
    *rows = n <= WIDEN_FLOATS ? WIDEN_FLOATS / n : 1;
    return n <= WIDEN_FLOATS ? stack : di_malloc(sizeof(float) * (size_t)n);
}

static const float *widen(float *buf, const uint16_t *b, size_t stride, int i, int r, int n) {
    for (int k = 0; k < r; k++)
        kern_bf16_row_to_f32(buf + (size_t)k * n, b + (size_t)(i + k) * stride, (size_t)n);
    return buf;
}

void kern_dot_heads_widened(float *out, size_t ld, const float *a, int n_a, const uint16_t *b,
                            size_t stride, int m, int n) {
    float stack[WIDEN_FLOATS];
    int rows;
    float *buf = widen_buf(stack, n, &rows);
    for (int i = 0; i < m; i += rows) {
        int r = m - i < rows ? m - i : rows;
        dot_heads_f32(out + i, ld, a, n_a, widen(buf, b, stride, i, r, n), (size_t)n, r, n);
    }
    if (buf != stack) free(buf);
}

void kern_axpy_heads_widened(float *y, size_t ldy, const float *a, size_t lda, int n_a,
                             const uint16_t *x, size_t stride, int m, int n) {
    float stack[WIDEN_FLOATS];
    int rows;
    float *buf = widen_buf(stack, n, &rows);
    for (int i = 0; i < m; i += rows) {
        int r = m - i < rows ? m - i : rows;
        axpy_heads_f32(y, ldy, a + i, lda, n_a, widen(buf, x, stride, i, r, n), (size_t)n, r, n);
    }
    if (buf != stack) free(buf);
}

void kern_dot_heads(float *out, size_t ld, const float *a, int n_a, const void *b, kern_dtype bt,
                    size_t stride, int m, int n) {
    if (bt == KT_F32)
        dot_heads_f32(out, ld, a, n_a, b, stride, m, n);
    else if (kern_use_avx512())
        kern_dot_heads_avx512(out, ld, a, n_a, b, true, stride, m, n);
    else
        kern_dot_heads_widened(out, ld, a, n_a, b, stride, m, n);
}

void kern_axpy_rows(float *y, const float *a, const float *x, size_t stride, int m, int n) {
    if (kern_use_avx2()) {
        kern_axpy_rows_avx2(y, a, x, stride, m, n);
        return;
    }
    for (int i = 0; i < m; i++) kern_axpy(y, a[i], x + (size_t)i * stride, n);
}

void kern_axpy_heads(float *y, size_t ldy, const float *a, size_t lda, int n_a, const void *x,
                     kern_dtype xt, size_t stride, int m, int n) {
    if (xt == KT_F32)
        axpy_heads_f32(y, ldy, a, lda, n_a, x, stride, m, n);
    else if (kern_use_avx512())
        kern_axpy_heads_avx512(y, ldy, a, lda, n_a, x, true, stride, m, n);
    else
        kern_axpy_heads_widened(y, ldy, a, lda, n_a, x, stride, m, n);
}

void kern_bf16_row_to_f32(float *dst, const uint16_t *src, size_t n) {
    if (kern_use_avx2()) {
        kern_row_bf16_avx2(dst, src, (int)n);
        return;
    }
    for (size_t i = 0; i < n; i++) dst[i] = kern_bf16_to_f32(src[i]);
}

void kern_f32_row_to_bf16(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (uint16_t)(bf16_rounded_bits(src[i]) >> 16);
}

void kern_axpy(float *y, float a, const float *x, int n) {
    if (kern_use_avx2()) {
        kern_axpy_avx2(y, a, x, n);
        return;
    }
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

void kern_scale(float *y, float a, int n) {
    if (kern_use_avx2()) {
        kern_scale_avx2(y, a, n);
        return;
    }
    for (int i = 0; i < n; i++) y[i] *= a;
}

void kern_add(float *y, const float *x, int n) {
    if (kern_use_avx2()) {
        kern_add_avx2(y, x, n);
        return;
    }
    for (int i = 0; i < n; i++) y[i] += x[i];
}

void kern_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    if (kern_use_avx2()) {
        kern_rmsnorm_avx2(out, x, w, n, eps);
        return;
    }
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * (w ? w[i] : 1.0f);
}

/* Two passes, as the AVX2 one: the maximum in eight lanes (a NaN never
 * replaces one), then the first index holding it. */
int kern_argmax(const float *x, int n) {
    if (kern_use_avx2()) return kern_argmax_avx2(x, n);
    float lane[8], mx = -INFINITY;
    int i = 0;
    for (int j = 0; j < 8; j++) lane[j] = -INFINITY;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    for (int j = 0; j < 8; j++) mx = lane[j] > mx ? lane[j] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (i = 0; i < n; i++)
        if (x[i] == mx) return i;
    return 0;
}

void kern_softmax(float *x, int n) {
    kern_softmax_scaled(x, n, 1.0f);
}

void kern_softmax_scaled(float *x, int n, float scale) {
    if (n <= 0) return;
    if (kern_use_avx512()) {
        kern_softmax_avx512(x, n, scale);
        return;
    }
    if (kern_use_avx2()) {
        kern_softmax_avx2(x, n, scale);
        return;
    }
    float m = x[0] * scale;
    for (int i = 1; i < n; i++) m = fmaxf(m, x[i] * scale);
    float s = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] * scale - m);
        s += x[i];
    }
    float inv = 1.0f / s;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void kern_silu_mul(float *out, const float *gate, const float *up, int n) {
    if (kern_use_avx512()) {
        kern_silu_mul_avx512(out, gate, up, n);
        return;
    }
    if (kern_use_avx2()) {
        kern_silu_mul_avx2(out, gate, up, n);
        return;
    }
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void kern_rope(float *x, const float *cos, const float *sin, int dim, bool interleaved) {
    int half = dim / 2, i = kern_use_avx2() ? kern_rope_avx2(x, cos, sin, dim, interleaved) : 0;
    for (; i < half; i++) {
        int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        float x0 = x[a], x1 = x[b], c = cos[i], s = sin[i];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}
