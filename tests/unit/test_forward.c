/* test_forward.c — forward-pass invariants checkable in C: one prefill chunk
 * == token-by-token decode == random chunks; batched == alone; sliding-window
 * rings that wrap (chunks longer than the ring, rollback into the spare);
 * the KV pool's accounting; and model_forward's input checks. Runs on tiny
 * checkpoints written from C and on the tools/make_model.py presets when
 * they are present (harness_model_dir()). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "kernels/kern_internal.h"
#include "model/model_internal.h"
#include "tmodel.h"

static const char *presets[] = {"llama3-tiny", "qwen2-tiny", "qwen3-tiny", "mistral-tiny",
                                "hybrid-tiny", "dsv2-tiny",  "dsv3-tiny"};
enum { N_PRESETS = sizeof presets / sizeof presets[0] };

static model *open_preset(const char *name, model_dtype dt, char *why, size_t why_len) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", harness_model_dir(), name);
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        snprintf(why, why_len, "skip");
        return NULL;
    }
    model_opts o = {.dtype = dt, .threads = 1};
    di_err err = {{0}};
    model *m = model_load(dir, &o, &err);
    if (!m) snprintf(why, why_len, "%s", err.msg);
    /* bf16 rounds each matmul's activations, so a plain run's few-ulp
     * differences in the sums' order (which depends on how many tokens a
     * call has) become bf16-ulp differences downstream: the chunking and
     * batching checks hold bf16 to batch-invariant mode's exact order. */
    if (m && dt == MODEL_DTYPE_BF16) model_set_batch_invariant(m, true);
    return m;
}

static void close_preset(model *m) {
    model_set_batch_invariant(m, false);
    model_free(m);
}

static model *open_tiny(const char *model_type, const char *extra, int n_layers, char **dir) {
    *dir = tm_tempdir();
    tm_make(*dir, model_type, "F32", n_layers, extra);
    model_opts o = {.dtype = MODEL_DTYPE_F32, .threads = 1};
    di_err err = {{0}};
    model *m = model_load(*dir, &o, &err);
    if (!m) fprintf(stderr, "tiny model: %s\n", err.msg);
    return m;
}

static void test_tokens(int *t, int n, int vocab, unsigned seed) {
    for (int i = 0; i < n; i++) t[i] = (int)(harness_lcg(&seed) % (unsigned)vocab);
}

/* Max over rows of max|a-b| / max|a| (per token's logits). */
static double row_rel_diff(const float *a, const float *b, int rows, int V) {
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        double md = 0, mx = 1e-30;
        for (int i = 0; i < V; i++) {
            double d = fabs((double)a[r * V + i] - b[r * V + i]);
            if (d > md) md = d;
            if (fabs(a[r * V + i]) > mx) mx = fabs(a[r * V + i]);
        }
        if (md / mx > worst) worst = md / mx;
    }
    return worst;
}

/* Runs toks through a fresh sequence in chunks of sizes[] (cycled), collecting
 * every position's logits into out (n x vocab). Returns 0 or -1. */
static int run_chunks(model *m, model_kv_pool *kv, const int *toks, int n, const int *sizes,
                      int n_sizes, float *out) {
    int V = model_get_info(m)->vocab_size;
    model_seq s;
    model_seq_init(m, &s);
    di_err err;
    int rc = 0;
    for (int at = 0, k = 0; at < n && !rc; k++) {
        int c = sizes[k % n_sizes];
        if (c > n - at) c = n - at;
        rc = model_seq_reserve(kv, &s, at + c, &err);
        model_batch_seq b = {.seq = &s,
                             .tokens = toks + at,
                             .n_tokens = c,
                             .logits = out + (size_t)at * V,
                             .all_logits = true};
        if (!rc) rc = model_forward(m, kv, &b, 1, &err);
        if (rc) fprintf(stderr, "run_chunks: %s\n", err.msg);
        at += c;
    }
    model_seq_free(m, kv, &s);
    return rc;
}

/* One chunk vs token by token vs the given chunk pattern; returns the worst rel diff. */
static double chunking_diff(model *m, int n, const int *sizes, int n_sizes, unsigned seed) {
    int V = model_get_info(m)->vocab_size;
    di_err err;
    model_kv_pool *kv = model_kv_pool_create(m, 3 * ((n + 127) / 128), &err);
    int *toks = malloc(sizeof(int) * (size_t)n);
    float *a = malloc(sizeof(float) * (size_t)n * V), *b = malloc(sizeof(float) * (size_t)n * V),
          *c = malloc(sizeof(float) * (size_t)n * V);
    test_tokens(toks, n, V, seed);
    int one = 1;
    double d = 1e9;
    if (!run_chunks(m, kv, toks, n, &n, 1, a) && !run_chunks(m, kv, toks, n, &one, 1, b) &&
        !run_chunks(m, kv, toks, n, sizes, n_sizes, c)) {
        double d1 = row_rel_diff(a, b, n, V), d2 = row_rel_diff(a, c, n, V);
        d = d1 > d2 ? d1 : d2;
    }
    free(toks);
    free(a);
    free(b);
    free(c);
    model_kv_pool_free(kv);
    return d;
}

TEST(forward_prefill_decode_chunks_agree_tiny) {
    char *dir;
    model *m = open_tiny("llama", "", 2, &dir);
    CHECK(m);
    int sizes[] = {3, 1, 7, 2, 11, 1, 5};
    double d = chunking_diff(m, 60, sizes, 7, 1);
    model_free(m);
    tm_rmdir(dir);
    CHECKF(d < 1e-5, "rel diff %g", d);
}

TEST(forward_prefill_decode_chunks_agree_presets) {
    int sizes[] = {13, 1, 4, 29, 2, 1, 8};
    for (int p = 0; p < N_PRESETS; p++) {
        char why[DI_ERR_LEN];
        model *m = open_preset(presets[p], MODEL_DTYPE_BF16, why, sizeof why);
        if (!m && !strcmp(why, "skip")) continue;
        CHECKF(m, "%s: %.400s", presets[p], why);
        double d = chunking_diff(m, 70, sizes, 7, 7 + (unsigned)p);
        close_preset(m);
        CHECKF(d < 1e-5, "%s: rel diff %g", presets[p], d);
    }
}

/* Batch-invariant mode on the packed copies of the weights (panels.c),
 * bf16 and int8, gives the bits it gives without them, through every
 * preset: a prompt of 34 tokens (the GEMM), then one token, then 13; and
 * the copies are there where this CPU's kernels read them (the output head
 * at least) and gone once the mode is off. */
TEST(forward_invariant_packed_copies_same_bits) {
    enum { N = 48 };
    int sizes[] = {34, 1};
    for (int q = 0; q < 2 * N_PRESETS; q++) {
        int p = q % N_PRESETS;
        model_dtype dt = q < N_PRESETS ? MODEL_DTYPE_BF16 : MODEL_DTYPE_INT8;
        char why[DI_ERR_LEN];
        model *m = open_preset(presets[p], dt, why, sizeof why);
        if (!m && !strcmp(why, "skip")) continue;
        CHECKF(m, "%s: %.400s", presets[p], why);
        model_set_batch_invariant(m, true); /* (open_preset does for bf16) */
        int V = model_get_info(m)->vocab_size, toks[N];
        bool packed = kern_panels_bytes(&m->w.lm_head) > 0;
        CHECKF(!packed || m->w.lm_head.panels, "%s: no packed output head", presets[p]);
        di_err err;
        model_kv_pool *kv = model_kv_pool_create(m, 2, &err);
        float *a = malloc(sizeof(float) * N * V), *b = malloc(sizeof(float) * N * V);
        test_tokens(toks, N, V, 11 + (unsigned)q);
        int rc = run_chunks(m, kv, toks, N, sizes, 2, a);
        /* the mode stays on, the copies go: every one, even while the
         * kernels would read none (DEEPINFER_ISA-style forcing) */
        kern_force_scalar(true);
        model_panels_free(m);
        kern_force_scalar(false);
        CHECK(!m->w.lm_head.panels && !m->w.layers[0].down.panels);
        rc = rc ? rc : run_chunks(m, kv, toks, N, sizes, 2, b);
        CHECKF(!rc && !memcmp(a, b, sizeof(float) * N * V), "%s %s: packed and unpacked differ",
               presets[p], dt == MODEL_DTYPE_INT8 ? "int8" : "bf16");
        free(a), free(b);
        model_kv_pool_free(kv);
        close_preset(m);
    }
}

/* --pack-weights (model_opts.pack_weights): plain mode reads the copies
 * where they are all the kernels read (AVX2 without AVX-512 BF16), with
 * the bits of batch-invariant mode; elsewhere it packs nothing. One token
 * at a time (MLA's prefill form is not the mode's), then a chunk of 34 on
 * the presets without MLA (the GEMM on the copy); every preset. Then the
 * same model in the mode, token by token. */
TEST(forward_pack_weights_reads_copies_same_bits) {
    enum { N = 40 };
    for (int p = 0; p < N_PRESETS; p++) {
        char why[DI_ERR_LEN], dir[4096];
        /* batch-invariant mode first: it is process-wide (the kernels') */
        model *inv = open_preset(presets[p], MODEL_DTYPE_BF16, why, sizeof why);
        if (!inv && !strcmp(why, "skip")) continue;
        CHECKF(inv, "%s: %.400s", presets[p], why);
        bool mla = inv->cfg.kv_lora_rank > 0;
        int V = model_get_info(inv)->vocab_size, toks[N], one = 1, sizes[] = {1, 34};
        int runs = mla ? 1 : 2, lens[2] = {8, N}, rc = 0;
        test_tokens(toks, N, V, 5 + (unsigned)p);
        float *want[2], *got = malloc(sizeof(float) * N * V);
        di_err err = {{0}};
        model_kv_pool *kv = model_kv_pool_create(inv, 2, &err);
        for (int run = 0; run < runs; run++) {
            want[run] = malloc(sizeof(float) * N * V);
            rc = rc ? rc
                    : run_chunks(inv, kv, toks, lens[run], run ? sizes : &one, 1 + run, want[run]);
        }
        model_kv_pool_free(kv);
        close_preset(inv);
        snprintf(dir, sizeof dir, "%s/%s", harness_model_dir(), presets[p]);
        model_opts o = {.dtype = MODEL_DTYPE_BF16, .threads = 1, .pack_weights = true};
        model *m = model_load(dir, &o, &err);
        CHECKF(m, "%s: %.400s", presets[p], err.msg);
        bool only = kern_panels_only(&m->w.lm_head);
        CHECKF(only == (m->w.lm_head.panels != NULL) && only == (m->panels != NULL),
               "%s: --pack-weights packed %s", presets[p], only ? "nothing" : "copies");
        kv = model_kv_pool_create(m, 2, &err);
        for (int run = 0; run < runs && only; run++) {
            rc = rc ? rc : run_chunks(m, kv, toks, lens[run], run ? sizes : &one, 1 + run, got);
            CHECKF(!rc && !memcmp(want[run], got, sizeof(float) * lens[run] * V),
                   "%s: --pack-weights and batch-invariant mode differ (%s)", presets[p],
                   run ? "chunked" : "token by token");
        }
        /* the same model in the mode keeps its copies (the converted ones
         * it dropped are not read) */
        model_set_batch_invariant(m, true);
        const uint32_t *copy = m->w.lm_head.panels;
        rc = rc ? rc : run_chunks(m, kv, toks, lens[0], &one, 1, got);
        CHECKF(!rc && (!only || m->w.lm_head.panels == copy) &&
                   !memcmp(want[0], got, sizeof(float) * lens[0] * V),
               "%s: --pack-weights in batch-invariant mode differs", presets[p]);
        model_set_batch_invariant(m, false);
        for (int run = 0; run < runs; run++) free(want[run]);
        free(got);
        model_kv_pool_free(kv);
        model_free(m);
    }
}

/* Resident kB of file-backed mappings (smaps_rollup: Rss less Anonymous),
 * or -1 where the kernel does not say. */
static long file_rss_kb(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return -1;
    char line[256];
    long rss = -1, anon = -1, v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "Rss: %ld kB", &v) == 1) rss = v;
        if (sscanf(line, "Anonymous: %ld kB", &v) == 1) anon = v;
    }
    fclose(f);
    return rss < 0 || anon < 0 ? -1 : rss - anon;
}

/* *out: preset in bf16 (with --pack-weights or not) after a forward pass
 * over 40 tokens. 1 where the preset is missing or the CPU packs no copy,
 * -1 on error (why). */
static int after_forward(const char *preset, bool pack, model **out, char *why, size_t n_why) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", harness_model_dir(), preset);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !kern_use_avx2() || kern_use_avx512_bf16()) return 1;
    model_opts o = {.dtype = MODEL_DTYPE_BF16, .threads = 1, .pack_weights = pack};
    di_err err = {{0}};
    model *m = model_load(dir, &o, &err);
    if (!m) {
        snprintf(why, n_why, "%s: %.400s", preset, err.msg);
        return -1;
    }
    int V = model_get_info(m)->vocab_size, toks[40], n = 40;
    test_tokens(toks, n, V, 3);
    float *logits = malloc(sizeof(float) * n * V);
    model_kv_pool *kv = model_kv_pool_create(m, 2, &err);
    int rc = run_chunks(m, kv, toks, n, &n, 1, logits);
    free(logits);
    model_kv_pool_free(kv);
    if (rc) {
        snprintf(why, n_why, "%s: the forward pass failed", preset);
        model_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

/* With --pack-weights the matrices' pages of the file mapping leave the
 * resident set (the copy replaces them: about the same memory as the
 * default), and nothing faults them in again while the model runs. */
TEST(forward_pack_weights_hands_back_mapping) {
    long kb[2] = {-1, -1};
    size_t copy = 0;
    for (int pack = 0; pack < 2; pack++) {
        model *m = NULL;
        char why[512];
        int rc = after_forward("llama3-tiny", pack, &m, why, sizeof why);
        CHECKF(rc >= 0, "%s", why);
        if (rc) return;
        kb[pack] = file_rss_kb();
        copy = m->panels_bytes;
        model_free(m);
    }
    long plain = kb[0], packed = kb[1];
    if (plain < 0) return; /* no smaps_rollup */
    CHECKF(packed > 0 && copy > 0, "rss %ld / %ld, copy %zu", plain, packed, copy);
    /* the matrices' pages, less a page at each end of each, are gone */
    CHECKF(plain - packed > (long)(copy >> 10) / 2,
           "file-backed RSS %ld kB plain, %ld kB packed: less than half the copy's %zu kB back",
           plain, packed, copy >> 10);
}

/* Resident pages among the whole pages inside W's bytes; *pages: how many
 * there are. */
static long resident_pages(const kern_mat *W, long *pages) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)W->data;
    uintptr_t lo = (a + page - 1) & ~(page - 1),
              hi = (a + (size_t)W->rows * W->cols * kern_dtype_size(W->dtype)) & ~(page - 1);
    *pages = hi > lo ? (long)((hi - lo) / page) : 0;
    long res = 0;
    unsigned char vec[256];
    for (uintptr_t p = lo; p < hi; p += sizeof vec * page) {
        size_t n = (hi - p) / page < sizeof vec ? (hi - p) / page : sizeof vec;
        if (mincore((void *)p, n * page, vec)) return -1;
        for (size_t i = 0; i < n; i++) res += vec[i] & 1;
    }
    return res;
}

/* Of a checkpoint converted at load (qwen3-tiny: stored f32), --pack-weights
 * keeps the packed copy alone: the converted bf16 copy's pages leave the
 * resident set after a forward pass, where without the option they are
 * all there. (The same logits: forward_pack_weights_reads_copies_same_bits.) */
TEST(forward_pack_weights_drops_converted_copies) {
    for (int pack = 0; pack < 2; pack++) {
        model *m = NULL;
        char why[512];
        int rc = after_forward("qwen3-tiny", pack, &m, why, sizeof why);
        CHECKF(rc >= 0, "%s", why);
        if (rc) return;
        long pages = 0, res = 0, p;
        for (int l = 0; l < m->cfg.n_layers; l++) {
            const model_layer *L = &m->w.layers[l];
            const kern_mat *mats[] = {&L->down, L->gate_up.data ? &L->gate_up : &L->gate};
            for (int i = 0; i < 2; i++) {
                res += resident_pages(mats[i], &p);
                pages += p;
            }
        }
        CHECKF(pages > 0 && res == (pack ? 0 : pages),
               "pack %d: %ld of the %ld pages of the FFN matrices' converted copies resident", pack,
               res, pages);
        model_free(m);
    }
}

/* Steps two sequences together (chunks A[k], B[k] per step, 0 = absent) and
 * checks every produced logit row against each sequence run alone. */
static double batched_vs_alone(model *m) {
    enum { NA = 40, NB = 33, STEPS = 5 };
    int ca[STEPS] = {20, 1, 1, 9, 9}, cb[STEPS] = {7, 13, 0, 1, 12};
    int V = model_get_info(m)->vocab_size;
    di_err err;
    model_kv_pool *kv = model_kv_pool_create(m, 8, &err);
    int ta[NA], tb[NB];
    test_tokens(ta, NA, V, 3);
    test_tokens(tb, NB, V, 4);
    float *ra = malloc(sizeof(float) * NA * V), *rb = malloc(sizeof(float) * NB * V);
    float *ga = calloc((size_t)NA * V, sizeof(float)), *gb = calloc((size_t)NB * V, sizeof(float));
    int one = NA;
    run_chunks(m, kv, ta, NA, &one, 1, ra);
    one = NB;
    run_chunks(m, kv, tb, NB, &one, 1, rb);
    model_seq sa, sb;
    model_seq_init(m, &sa);
    model_seq_init(m, &sb);
    int pa = 0, pb = 0;
    double worst = 0;
    for (int k = 0; k < STEPS; k++) {
        model_batch_seq batch[2];
        int nb = 0;
        if (ca[k]) {
            model_seq_reserve(kv, &sa, pa + ca[k], &err);
            batch[nb++] = (model_batch_seq){.seq = &sa,
                                            .tokens = ta + pa,
                                            .n_tokens = ca[k],
                                            .logits = ga + (size_t)pa * V,
                                            .all_logits = true};
        }
        if (cb[k]) {
            model_seq_reserve(kv, &sb, pb + cb[k], &err);
            /* B asks only for its last token's logits */
            batch[nb++] = (model_batch_seq){.seq = &sb,
                                            .tokens = tb + pb,
                                            .n_tokens = cb[k],
                                            .logits = gb + (size_t)(pb + cb[k] - 1) * V};
        }
        if (model_forward(m, kv, batch, nb, &err)) {
            fprintf(stderr, "batched: %s\n", err.msg);
            worst = 1e9;
            break;
        }
        if (cb[k]) {
            double d = row_rel_diff(rb + (size_t)(pb + cb[k] - 1) * V,
                                    gb + (size_t)(pb + cb[k] - 1) * V, 1, V);
            if (d > worst) worst = d;
        }
        pa += ca[k];
        pb += cb[k];
    }
    double d = row_rel_diff(ra, ga, NA, V);
    if (d > worst) worst = d;
    model_seq_free(m, kv, &sa);
    model_seq_free(m, kv, &sb);
    model_kv_pool_free(kv);
    free(ra);
    free(rb);
    free(ga);
    free(gb);
    return worst;
}

TEST(forward_batched_equals_alone) {
    char *dir;
    model *m = open_tiny("mistral", "\"sliding_window\": 5,", 2, &dir);
    CHECK(m);
    double d = batched_vs_alone(m);
    model_free(m);
    tm_rmdir(dir);
    CHECKF(d < 1e-5, "tiny: rel diff %g", d);
    for (int p = 0; p < N_PRESETS; p++) {
        char why[DI_ERR_LEN];
        m = open_preset(presets[p], MODEL_DTYPE_BF16, why, sizeof why);
        if (!m && !strcmp(why, "skip")) continue;
        CHECKF(m, "%s: %.400s", presets[p], why);
        d = batched_vs_alone(m);
        close_preset(m);
        CHECKF(d < 1e-5, "%s: rel diff %g", presets[p], d);
    }
}

TEST(forward_swa_ring_wrap) {
    /* window 4 -> ring of 10; chunks longer than the ring go through staging */
    char *dir;
    model *m = open_tiny("mistral", "\"sliding_window\": 4,", 2, &dir);
    CHECK(m);
    CHECK(m->cfg.layer_swa[0] && m->cfg.layer_swa[1]);
    int sizes[] = {15, 1, 12, 3, 1, 1, 23, 9};
    double d = chunking_diff(m, 90, sizes, 8, 11);
    CHECKF(d < 1e-5, "rel diff %g", d);

    /* The window really limits the receptive field: 2 layers of window 4 see
     * 2 * 3 positions back, so a change at position 0 reaches position 6 but
     * not position 7. */
    enum { N = 12 };
    int V = model_get_info(m)->vocab_size, t1[N], t2[N];
    test_tokens(t1, N, V, 5);
    memcpy(t2, t1, sizeof t1);
    t2[0] = (t1[0] + 1) % V;
    di_err err;
    model_kv_pool *kv = model_kv_pool_create(m, 1, &err);
    float *a = malloc(sizeof(float) * N * V), *b = malloc(sizeof(float) * N * V);
    int n = N;
    run_chunks(m, kv, t1, N, &n, 1, a);
    run_chunks(m, kv, t2, N, &n, 1, b);
    CHECK(row_rel_diff(a + 6 * V, b + 6 * V, 1, V) > 1e-4);
    CHECK(row_rel_diff(a + 7 * V, b + 7 * V, N - 7, V) == 0);
    free(a);
    free(b);
    model_kv_pool_free(kv);
    model_free(m);
    tm_rmdir(dir);

    /* window 40 -> ring 46: rings grow 16 -> 32 -> 46 as the sequence does */
    m = open_tiny("mistral", "\"sliding_window\": 40,", 2, &dir);
    CHECK(m);
    int grow[] = {1, 1, 9, 20, 1, 50, 3};
    d = chunking_diff(m, 120, grow, 7, 13);
    model_free(m);
    tm_rmdir(dir);
    CHECKF(d < 1e-5, "window 40: rel diff %g", d);

    char why[DI_ERR_LEN];
    m = open_preset("mistral-tiny", MODEL_DTYPE_BF16, why, sizeof why);
    if (m) { /* window 16 -> ring 22 */
        int ps[] = {30, 1, 25, 14, 1, 40};
        d = chunking_diff(m, 150, ps, 6, 12);
        close_preset(m);
        CHECKF(d < 1e-5, "mistral-tiny: rel diff %g", d);
    }
}

TEST(forward_swa_rollback_within_spare) {
    /* Speculative rollback: decode 8 draft tokens, roll back 6 (the spare),
     * continue differently; must equal a fresh run of the accepted tokens. */
    char *dir;
    model *m = open_tiny("mistral", "\"sliding_window\": 4,", 2, &dir);
    CHECK(m);
    enum { N = 30 };
    int V = model_get_info(m)->vocab_size, toks[N], alt[N];
    test_tokens(toks, N, V, 21);
    memcpy(alt, toks, sizeof toks);
    for (int i = 16; i < N; i++) alt[i] = (toks[i] * 5 + 3) % V;
    di_err err;
    model_kv_pool *kv = model_kv_pool_create(m, 2, &err);
    float *ref = malloc(sizeof(float) * N * V), *got = malloc(sizeof(float) * N * V);
    int n = N;
    CHECK(run_chunks(m, kv, alt, N, &n, 1, ref) == 0);
    model_seq s;
    model_seq_init(m, &s);
    model_seq_reserve(kv, &s, N, &err);
    model_batch_seq b = {
        .seq = &s, .tokens = toks, .n_tokens = 22, .logits = got, .all_logits = true};
    CHECK(model_forward(m, kv, &b, 1, &err) == 0); /* positions 0..21 */
    s.n_past = 16;                                 /* reject the last 6 */
    b = (model_batch_seq){.seq = &s, .tokens = alt + 16, .n_tokens = 1, .logits = got + 16 * V};
    CHECK(model_forward(m, kv, &b, 1, &err) == 0);
    b = (model_batch_seq){.seq = &s,
                          .tokens = alt + 17,
                          .n_tokens = N - 17,
                          .logits = got + 17 * V,
                          .all_logits = true};
    CHECK(model_forward(m, kv, &b, 1, &err) == 0);
    double d = row_rel_diff(ref + 16 * V, got + 16 * V, N - 16, V);
    model_seq_free(m, kv, &s);
    model_kv_pool_free(kv);
    model_free(m);
    tm_rmdir(dir);
    free(ref);
    free(got);
    CHECKF(d < 1e-5, "rel diff %g", d);
}

TEST(forward_kv_pool_accounting) {
    char *dir;
    model *m = open_tiny("llama", "", 2, &dir);
    CHECK(m);
    /* 2 layers x 128 positions x (K + V) x 2 kv heads x 4 dims x f32 */
    CHECK(model_kv_block_bytes(m) == 2 * 128 * 2 * 2 * 4 * 4);
    CHECK(model_kv_entry_floats(m, 0) == 16);
    di_err err;
    model_kv_pool *kv = model_kv_pool_create(m, 3, &err);
    CHECK(kv && model_kv_n_free(kv) == 3);
    model_seq s;
    model_seq_init(m, &s);
    CHECK(s.swa == NULL);
    CHECK(model_seq_reserve(kv, &s, 129, &err) == 0 && s.n_blocks == 2);
    CHECK(model_kv_n_free(kv) == 1);
    CHECK(model_seq_reserve(kv, &s, 256, &err) == 0 && s.n_blocks == 2);
    CHECK(model_seq_reserve(kv, &s, 1000, &err) == -1);
    CHECKF(strstr(err.msg, "KV pool exhausted"), "%s", err.msg);
    int b = model_kv_alloc(kv);
    CHECK(b == -1); /* the failed reserve took the last block */
    model_seq_free(m, kv, &s);
    CHECK(model_kv_n_free(kv) == 3);
    b = model_kv_alloc(kv);
    CHECK(b >= 0 && model_kv_n_free(kv) == 2);
    model_kv_release(kv, b);
    CHECK(model_kv_n_free(kv) == 3);
    model_kv_pool_free(kv);
    model_free(m);
    tm_rmdir(dir);
    /* sliding-only layers take no block memory; hybrid takes only its full layers */
    m = open_tiny("llama",
                  "\"sliding_window\": 4, \"layer_types\": [\"sliding_attention\", "
                  "\"full_attention\"],",
                  2, &dir);
    CHECK(m);
    CHECK(model_kv_block_bytes(m) == 128 * 2 * 2 * 4 * 4);
    model_free(m);
    tm_rmdir(dir);
    m = open_tiny("mistral", "\"sliding_window\": 4,", 2, &dir);
    CHECK(m && model_kv_block_bytes(m) == 0);
    model_free(m);
    tm_rmdir(dir);
}

TEST(forward_input_checks_and_outputs) {
    char *dir;
    model *m = open_tiny("llama", "", 2, &dir);
    CHECK(m);
    di_err err;
    model_kv_pool *kv = model_kv_pool_create(m, 2, &err);
    model_seq s;
    model_seq_init(m, &s);
    int toks[4] = {1, 2, 3, 4}, bad[1] = {TM_VOCAB};
    float logits[TM_VOCAB], hidden[TM_HIDDEN];
    model_batch_seq b = {.seq = &s, .tokens = toks, .n_tokens = 4, .logits = logits};
    CHECK(model_forward(m, kv, &b, 1, &err) == -1);
    CHECKF(strstr(err.msg, "KV blocks"), "%s", err.msg);
    CHECK(model_seq_reserve(kv, &s, 4, &err) == 0);
    b.tokens = bad;
    b.n_tokens = 1;
    CHECK(model_forward(m, kv, &b, 1, &err) == -1);
    CHECKF(strstr(err.msg, "vocabulary"), "%s", err.msg);
    model_batch_seq two[2] = {{.seq = &s, .tokens = toks, .n_tokens = 1},
                              {.seq = &s, .tokens = toks, .n_tokens = 1}};
    CHECK(model_forward(m, kv, two, 2, &err) == -1);
    CHECK(s.n_past == 0);
    b = (model_batch_seq){
        .seq = &s, .tokens = toks, .n_tokens = 4, .logits = logits, .hidden = hidden};
    CHECK(model_forward(m, kv, &b, 1, &err) == 0 && s.n_past == 4);
    /* logits are lm_head applied to the returned final hidden */
    float again[TM_VOCAB];
    kern_matmul(NULL, again, hidden, &m->w.lm_head, NULL, 1);
    CHECK(row_rel_diff(logits, again, 1, TM_VOCAB) < 1e-6);
    model_seq_free(m, kv, &s);
    model_kv_pool_free(kv);
    model_free(m);
    tm_rmdir(dir);
}

TEST(forward_threads_agree) {
    char *dir = tm_tempdir();
    tm_make(dir, "llama", "BF16", 2, "");
    enum { N = 20 };
    int toks[N];
    test_tokens(toks, N, TM_VOCAB, 9);
    float out[2][N * TM_VOCAB];
    for (int k = 0; k < 2; k++) {
        model_opts o = {.dtype = MODEL_DTYPE_BF16, .threads = k + 1};
        di_err err;
        model *m = model_load(dir, &o, &err);
        CHECKF(m, "%s", err.msg);
        model_kv_pool *kv = model_kv_pool_create(m, 1, &err);
        int sizes[] = {7, 1, 12};
        CHECK(run_chunks(m, kv, toks, N, sizes, 3, out[k]) == 0);
        model_kv_pool_free(kv);
        model_free(m);
    }
    tm_rmdir(dir);
    CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0);
}

/* Decode over many kv heads (16, head_dim 4): attention walks up to
 * ATTN_GANG heads of a token block by block, a decode-only step cut into
 * tasks of several heads. Eight sequences' decode tokens stepped together,
 * and each one alone (a one-token step over 2 threads: tasks of 4 heads),
 * give the logits that one prefill of the same tokens gives at those
 * positions, bit for bit (batch-invariant kernels: the matmuls too). */
TEST(forward_decode_many_kv_heads) {
    enum { NH = 16, HD = 4, S = 8, P = 140 }; /* prompts past a block: two runs a head */
    char *dir = tm_tempdir();
    tm_set ts;
    tm_llama(&ts, "F32", 2, true);
    unsigned seed = 77;
    float *w = malloc(sizeof(float) * NH * HD * TM_HIDDEN);
    for (int l = 0; l < 2; l++) {
        static const char *proj[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
        for (int k = 0; k < 4; k++) {
            char n[96];
            snprintf(n, sizeof n, "model.layers.%d.self_attn.%s.weight", l, proj[k]);
            tm_remove(&ts, n);
            for (int i = 0; i < NH * HD * TM_HIDDEN; i++)
                w[i] = ((float)(harness_lcg(&seed) >> 1) / (float)(1u << 23) - 0.5f) * 0.8f;
            long shape[2] = {k < 3 ? NH * HD : TM_HIDDEN, k < 3 ? TM_HIDDEN : NH * HD};
            tm_add(&ts, n, "F32", 2, shape, w, sizeof(float) * NH * HD * TM_HIDDEN);
        }
    }
    free(w);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(tm_write_st(path, &ts, 0, ts.n) == 0);
    tm_free(&ts);
    tm_config(dir, "llama", 2,
              "\"num_attention_heads\": 16, \"num_key_value_heads\": 16, \"head_dim\": 4,");
    model_opts o = {.dtype = MODEL_DTYPE_F32, .threads = 2};
    di_err err;
    model *m = model_load(dir, &o, &err);
    CHECKF(m, "%s", err.msg);
    CHECK(m->cfg.n_kv_heads == NH);
    int V = model_get_info(m)->vocab_size, toks[S][P + 1];
    model_kv_pool *kv = model_kv_pool_create(m, 2 * S, &err);
    kern_set_batch_invariant(true);
    float *ref = malloc(sizeof(float) * (P + 1) * V), *got = malloc(sizeof(float) * S * V);
    model_seq seqs[S];
    model_batch_seq b[S];
    int bad = 0;
    for (int together = 1; together >= 0; together--) {
        for (int i = 0; i < S; i++) { /* each prompt prefilled alone, all but its last token */
            test_tokens(toks[i], P + 1, V, 100 + (unsigned)i);
            model_seq_init(m, &seqs[i]);
            CHECK(model_seq_reserve(kv, &seqs[i], P + 1, &err) == 0);
            b[i] = (model_batch_seq){
                .seq = &seqs[i], .tokens = toks[i], .n_tokens = P, .logits = got + (size_t)i * V};
            CHECK(model_forward(m, kv, &b[i], 1, &err) == 0);
            b[i].tokens = toks[i] + P, b[i].n_tokens = 1;
        }
        if (together) {
            CHECK(model_forward(m, kv, b, S, &err) == 0);
        } else {
            for (int i = 0; i < S; i++) CHECK(model_forward(m, kv, &b[i], 1, &err) == 0);
        }
        for (int i = 0; i < S; i++) model_seq_free(m, kv, &seqs[i]);
        for (int i = 0; i < S && !bad; i++) {
            int one = P + 1;
            CHECK(run_chunks(m, kv, toks[i], P + 1, &one, 1, ref) == 0);
            if (memcmp(ref + (size_t)P * V, got + (size_t)i * V, sizeof(float) * V))
                bad = 1 + i + 100 * together;
        }
    }
    kern_set_batch_invariant(false);
    CHECKF(!bad, "decode logits differ from the prefill's (code %d)", bad);
    free(ref);
    free(got);
    model_kv_pool_free(kv);
    model_free(m);
    tm_rmdir(dir);
}

/* A bf16 KV cache (the default with bf16 weights): half the block bytes;
 * layer 0's entries (which no attention feeds) are the f32 cache's rounded
 * to bf16, bit for bit, in the pool and in sliding-window rings alike; the
 * logits stay within bf16 error of the f32 cache's. In the pool, each part
 * of the entries (a kv head's K or V, MLA's whole entry) is one contiguous
 * run of a block's positions. */
TEST(forward_bf16_kv_cache) {
    static const char *names[] = {"llama3-tiny", "mistral-tiny", "dsv3-tiny", "hybrid-tiny"};
    for (int p = 0; p < 4; p++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", harness_model_dir(), names[p]);
        struct stat sb;
        if (stat(dir, &sb) != 0) continue;
        model *m[2];
        for (int k = 0; k < 2; k++) {
            model_opts o = {.dtype = MODEL_DTYPE_BF16,
                            .kv_dtype = k ? MODEL_KV_AUTO : MODEL_KV_F32,
                            .threads = 1};
            di_err err = {{0}};
            m[k] = model_load(dir, &o, &err);
            CHECKF(m[k], "%s", err.msg);
        }
        CHECK(!strcmp(model_kv_dtype_name(m[0]), "f32") &&
              !strcmp(model_kv_dtype_name(m[1]), "bf16"));
        CHECK(model_kv_block_bytes(m[0]) == 2 * model_kv_block_bytes(m[1]));
        int V = model_get_info(m[0])->vocab_size, n = 80, chunks[] = {64, 1};
        int *toks = malloc(sizeof(int) * (size_t)n);
        test_tokens(toks, n, V, 7u + (unsigned)p);
        float *lg[2];
        model_seq s[2];
        model_kv_pool *kv[2];
        di_err err;
        for (int k = 0; k < 2; k++) {
            lg[k] = malloc(sizeof(float) * (size_t)n * V);
            kv[k] = model_kv_pool_create(m[k], 2, &err);
            model_seq_init(m[k], &s[k]);
            CHECK(model_seq_reserve(kv[k], &s[k], n, &err) == 0);
            for (int at = 0, c; at < n; at += c) {
                c = at < chunks[0] ? chunks[0] : chunks[1];
                model_batch_seq b = {.seq = &s[k],
                                     .tokens = toks + at,
                                     .n_tokens = c,
                                     .logits = lg[k] + (size_t)at * V,
                                     .all_logits = true};
                CHECK(model_forward(m[k], kv[k], &b, 1, &err) == 0);
            }
        }
        int E = model_kv_entry_floats(m[0], 0), win = m[0]->cfg.sliding_window, bad = 0;
        float *e0 = malloc(sizeof(float) * (size_t)E), *e1 = malloc(sizeof(float) * (size_t)E);
        for (int pos = m[0]->cfg.layer_swa[0] ? n - win : 0; pos < n; pos++) {
            model_batch_seq bs[2] = {{.seq = &s[0]}, {.seq = &s[1]}};
            model_step st0 = {.kv = kv[0], .batch = &bs[0], .n_batch = 1};
            model_step st1 = {.kv = kv[1], .batch = &bs[1], .n_batch = 1};
            model_kv_read(m[0], &st0, 0, 0, pos, e0);
            model_kv_read(m[1], &st1, 0, 0, pos, e1);
            for (int i = 0; i < E; i++) bad += kern_f32_to_bf16(e1[i]) != kern_f32_to_bf16(e0[i]);
        }
        CHECKF(!bad, "%s: %d layer-0 entries are not the f32 ones rounded", names[p], bad);
        if (!m[0]->cfg.layer_swa[0]) { /* the pool: each part's rows one contiguous run */
            model_batch_seq bs = {.seq = &s[0]};
            model_step st = {.kv = kv[0], .batch = &bs, .n_batch = 1};
            int parts = model_kv_parts(m[0], 0), width = E / parts, split = 0;
            const float **row = malloc(sizeof *row * (size_t)parts);
            for (int q = 0; q < parts; q++) {
                int run;
                size_t stride;
                row[q] = model_kv_run(m[0], &st, 0, 0, 0, n, q, &run, &stride);
                CHECK(run == n && stride == (size_t)width);
            }
            for (int pos = 0; pos < n; pos++) {
                model_kv_read(m[0], &st, 0, 0, pos, e0);
                for (int q = 0; q < parts; q++)
                    split += memcmp(row[q] + (size_t)pos * width, e0 + q * width,
                                    sizeof(float) * (size_t)width) != 0;
            }
            free(row);
            CHECKF(!split, "%s: %d rows of parts differ from the entries", names[p], split);
        }
        free(e0);
        free(e1);
        double d = row_rel_diff(lg[0], lg[1], n, V);
        CHECKF(d < 3e-2, "%s: bf16 KV logits %.3g from the f32 KV ones", names[p], d);
        for (int k = 0; k < 2; k++) {
            model_seq_free(m[k], kv[k], &s[k]);
            model_kv_pool_free(kv[k]);
            model_free(m[k]);
            free(lg[k]);
        }
        free(toks);
    }
}
