/* cmd_bench.c — `deepinfer bench`: speed against the machine's own limits,
 * all measured in the same run. Read bandwidth and FMA peak come first; then
 * prefill of --prompt-len tokens (fraction of FMA peak: the FLOPs the
 * prefill really does — matmuls, the output head for the last token only,
 * attention over the causal context — / time / peak), decode at batch 1
 * (fraction of the bandwidth roofline: bandwidth / weight bytes read per
 * token, active experts only for MoE), and decode at batch B (B sequences
 * stepping together; against batch 1, also paired round by round with a
 * lone sequence, and as a fraction of its limit, batch_limit). Where bf16
 * matmuls run on bf16 dot products (AVX-512 BF16), which do twice an FMA's
 * arithmetic, prefill is also given as a fraction of their peak. --json
 * prints one object. With --serving, the engine under a conversational load
 * instead (bench_serving.c). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "engine/sampler.h"
#include "kernels/kernels.h"

/* Decode is timed in rounds of this many steps and the best round counts:
 * other tenants of a shared machine steal memory bandwidth in bursts. The
 * limits are measured before and after all runs and the better of the two
 * counts, so a fraction is never flattered by a dip in the limit. */
#define BENCH_ROUND        8
#define BENCH_PREFILL_REPS 2 /* prefill timed this many times, the best counted */
/* The FMA peak drifts as well (here 100-205 GFLOP/s from one minute to the
 * next), so prefill is also given against the peak measured just before
 * the pass that counts. */
/* The host's bandwidth also drifts over seconds (on the 2-core machines
 * here 39-75 GB/s within one `make bench`), so decode at batch 1 is also
 * given paired: each round against the bandwidth measured just before it
 * (a shorter read, BENCH_PAIRED_BW bytes), the median of the rounds'
 * fractions. */
#define BENCH_PAIRED_BW ((size_t)512 << 20)
/* Both limits above are the best of several passes, so on a host whose
 * bandwidth moves from one pass to the next a plain read's own mean falls
 * short of them (here 81-90 % of the best of six). Decode at batch 1 is
 * therefore also timed step by step against that plain read at the same
 * moments: each step followed by one pass of the read (the weights' bytes
 * per token, at most BENCH_INTERLEAVED_READ), the two prefetch variants in
 * turn, the better variant's mean counted. */
#define BENCH_INTERLEAVED_READ ((size_t)1 << 30)

typedef struct bench_result {
    double bandwidth_gbs, fma_gflops;
    double bf16_dot_gflops; /* 0 unless bf16 matmuls run on bf16 dot products */
    double i8_dot_gflops;   /* int8 batched decode's peak: 0 unless int8 at batch > 1 with VNNI */
    double prefill_dot_frac;
    double load_s, rss_after_load_mb, weight_mb;
    double prefill_tok_s, prefill_gflop_s, prefill_peak_frac;
    double prefill_paired_frac, prefill_paired_peak; /* see BENCH_PREFILL_REPS */
    double decode_tok_s_b1, decode_roofline_frac_b1;
    double decode_paired_frac_b1, paired_bw_lo, paired_bw_hi; /* see BENCH_PAIRED_BW */
    int paired_rounds;
    double decode_interleaved_frac_b1, interleaved_read_gbs; /* see BENCH_INTERLEAVED_READ */
    int interleaved_steps;
    double decode_tok_s_bB, decode_bB_over_b1;
    double decode_paired_bB_over_b1; /* median of rounds against a lone sequence (bench_batch) */
    int paired_rounds_bB;
    double batch_peak_gflops; /* the peak batch B's matmuls run on (batch_peak_name) */
    const char *batch_peak_name;
    double decode_limit_tok_s_bB, decode_limit_frac_bB;
    bool limit_by_compute_bB; /* the matmuls at the peak bind, not the weights' read */
    int batch, prompt_len, gen_len;
} bench_result;

static void random_ids(int *ids, int n, int vocab, uint64_t *state) {
    for (int i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int)((*state >> 33) % (uint64_t)vocab);
    }
}

/* n more greedy decode steps of s, from token *next, each followed by a
 * pass of the plain read (BENCH_INTERLEAVED_READ). */
static int bench_interleaved(model *m, model_kv_pool *kv, model_seq *s, int *next, float *logits,
                             int n, bench_result *r, di_err *err) {
    if (n < 1) return 0;
    const model_info *info = model_get_info(m);
    size_t bytes = (size_t)info->active_bytes_per_token;
    kern_read_probe *rp =
        kern_read_probe_new(bytes < BENCH_INTERLEAVED_READ ? bytes : BENCH_INTERLEAVED_READ);
    kern_read_probe_pass(model_pool(m), rp, false); /* warm-up */
    double t_step = 0, t_read[2] = {0, 0};
    int rc = 0, passes[2] = {0, 0};
    for (int i = 0; !rc && i < n; i++) {
        model_batch_seq b = {.seq = s, .tokens = next, .n_tokens = 1, .logits = logits};
        double t0 = di_now();
        rc = model_forward(m, kv, &b, 1, err);
        *next = sampler_argmax(logits, info->vocab_size);
        t_step += di_now() - t0;
        t_read[i % 2] += kern_read_probe_pass(model_pool(m), rp, i % 2);
        passes[i % 2]++;
    }
    double read = 0; /* bytes/s, the better variant */
    for (int v = 0; v < 2; v++)
        if (passes[v]) read = fmax(read, passes[v] * (double)kern_read_probe_bytes(rp) / t_read[v]);
    kern_read_probe_free(rp);
    if (rc) return rc;
    r->interleaved_steps = n;
    r->interleaved_read_gbs = read / 1e9;
    r->decode_interleaved_frac_b1 = n * (double)bytes / t_step / read;
    return 0;
}

/* Prefill L tokens of one sequence in one pass; then G greedy decode steps,
 * and up to G more interleaved with the plain read (as many as the context
 * holds). Returns -1 on error. */
static int bench_single(model *m, model_kv_pool *kv, int L, int G, bench_result *r, di_err *err) {
    const model_info *info = model_get_info(m);
    int V = info->vocab_size;
    int Gi = info->max_context - L - G < G ? info->max_context - L - G : G;
    uint64_t st = 1;
    int *ids = malloc(sizeof(int) * (size_t)L);
    float *logits = malloc(sizeof(float) * (size_t)V);
    random_ids(ids, L, V < 1000 ? V : 1000, &st);
    model_seq s;
    model_batch_seq b;
    double t0, t_prefill = 1e30;
    int rc = 0;
    /* Twice, the better one counted: the first pass also pays for first
     * touches (scratch buffers, KV pages) that a running server has behind it,
     * as llama-bench's warm-up run does. */
    for (int rep = 0; rep < BENCH_PREFILL_REPS && !rc; rep++) {
        if (rep) model_seq_free(m, kv, &s);
        model_seq_init(m, &s);
        rc = model_seq_reserve(kv, &s, L + G + Gi, err);
        double peak = kern_measure_fma_peak(model_pool(m));
        t0 = di_now();
        b = (model_batch_seq){.seq = &s, .tokens = ids, .n_tokens = L, .logits = logits};
        if (!rc) rc = model_forward(m, kv, &b, 1, err);
        double dt = di_now() - t0;
        if (dt < t_prefill) t_prefill = dt, r->prefill_paired_peak = peak;
    }
    int next = sampler_argmax(logits, V), rounds = (G + BENCH_ROUND - 1) / BENCH_ROUND, nf = 0;
    double t_token = 1e30; /* best round's seconds per step */
    double *frac = di_malloc(sizeof(double) * (size_t)rounds);
    r->paired_bw_lo = 1e30, r->paired_bw_hi = 0;
    for (int done = 0, k; !rc && done < G; done += k) {
        k = G - done < BENCH_ROUND ? G - done : BENCH_ROUND;
        double bw = kern_measure_read_bandwidth(model_pool(m), BENCH_PAIRED_BW);
        r->paired_bw_lo = fmin(r->paired_bw_lo, bw), r->paired_bw_hi = fmax(r->paired_bw_hi, bw);
        t0 = di_now();
        for (int i = 0; !rc && i < k; i++) {
            b = (model_batch_seq){.seq = &s, .tokens = &next, .n_tokens = 1, .logits = logits};
            rc = model_forward(m, kv, &b, 1, err);
            next = sampler_argmax(logits, V);
        }
        double dt = (di_now() - t0) / k;
        t_token = fmin(t_token, dt);
        frac[nf++] = (double)info->active_bytes_per_token / dt / (bw * 1e9);
    }
    r->paired_rounds = nf;
    r->decode_paired_frac_b1 = cli_median(frac, nf);
    free(frac);
    if (!rc) rc = bench_interleaved(m, kv, &s, &next, logits, Gi, r, err);
    model_seq_free(m, kv, &s);
    free(ids);
    free(logits);
    if (rc) return rc;
    r->prefill_tok_s = L / t_prefill;
    r->prefill_gflop_s = model_prefill_flops(m, L) / t_prefill / 1e9;
    r->prefill_paired_frac = r->prefill_gflop_s / r->prefill_paired_peak;
    r->decode_tok_s_b1 = 1 / t_token;
    return 0;
}

/* B sequences with short prompts decode G steps together, in rounds of
 * BENCH_ROUND steps, the best round counted. Before each round a lone
 * sequence with the same prompt length decodes a round of its own, so each
 * round also gives batch B's tokens/s over batch 1's in one phase of the
 * host (b1 is bound by the read bandwidth, bB by the arithmetic, and a
 * shared host moves the first far more than the second); the median of
 * those is the paired ratio. */
static int bench_batch(model *m, model_kv_pool *kv, int B, int G, bench_result *r, di_err *err) {
    const model_info *info = model_get_info(m);
    int V = info->vocab_size, P = 16, N = B + 1, rc = 0; /* sequence B decodes alone */
    uint64_t st = 7;
    model_seq *seqs = calloc((size_t)N, sizeof *seqs);
    model_batch_seq *batch = calloc((size_t)N, sizeof *batch);
    int *ids = malloc(sizeof(int) * (size_t)(N * P)), *next = malloc(sizeof(int) * (size_t)N);
    float *logits = malloc(sizeof(float) * (size_t)V * (size_t)N);
    int rounds = (G + BENCH_ROUND - 1) / BENCH_ROUND, nr = 0;
    double *ratio = di_malloc(sizeof(double) * (size_t)rounds);
    random_ids(ids, N * P, V < 1000 ? V : 1000, &st);
    for (int i = 0; i < N; i++) {
        model_seq_init(m, &seqs[i]);
        if (!rc) rc = model_seq_reserve(kv, &seqs[i], P + G, err);
        batch[i] = (model_batch_seq){.seq = &seqs[i],
                                     .tokens = ids + i * P,
                                     .n_tokens = P,
                                     .logits = logits + (size_t)i * V};
    }
    if (!rc) rc = model_forward(m, kv, batch, N, err);
    double t_step = 1e30; /* best round's seconds per step */
    for (int done = 0, k; !rc && done < G; done += k) {
        k = G - done < BENCH_ROUND ? G - done : BENCH_ROUND;
        double t_lone = 0, t_round = 0;
        for (int pass = 0; pass < 2 && !rc; pass++) { /* the lone sequence, then the batch */
            int lo = pass ? 0 : B, n = pass ? B : 1;
            double t0 = di_now();
            for (int step = 0; !rc && step < k; step++) {
                for (int i = lo; i < lo + n; i++) {
                    next[i] = sampler_argmax(logits + (size_t)i * V, V);
                    batch[i].tokens = &next[i];
                    batch[i].n_tokens = 1;
                }
                rc = model_forward(m, kv, batch + lo, n, err);
            }
            *(pass ? &t_round : &t_lone) = (di_now() - t0) / k;
        }
        t_step = fmin(t_step, t_round);
        ratio[nr++] = B * t_lone / t_round;
    }
    r->decode_paired_bB_over_b1 = cli_median(ratio, nr);
    r->paired_rounds_bB = nr;
    free(ratio);
    for (int i = 0; i < N; i++) model_seq_free(m, kv, &seqs[i]);
    free(seqs);
    free(batch);
    free(ids);
    free(next);
    free(logits);
    if (rc) return rc;
    r->decode_tok_s_bB = B / t_step;
    r->decode_bB_over_b1 = r->decode_tok_s_bB / r->decode_tok_s_b1;
    return 0;
}

static void print_result(const bench_result *r, const model_info *info, bool json) {
    if (json) {
        json_t *o = json_pack(
            "{s:s,s:f,s:f,s:f,s:f,s:f,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:i,s:i,s:s}", "arch", info->arch,
            "bandwidth_gbs", r->bandwidth_gbs, "fma_gflops", r->fma_gflops, "weight_mb",
            r->weight_mb, "rss_after_load_mb", r->rss_after_load_mb, "load_s", r->load_s,
            "prompt_len", r->prompt_len, "prefill_tok_s", r->prefill_tok_s, "prefill_peak_frac",
            r->prefill_peak_frac, "decode_tok_s_b1", r->decode_tok_s_b1, "decode_roofline_frac_b1",
            r->decode_roofline_frac_b1, "decode_tok_s_bB", r->decode_tok_s_bB, "decode_bB_over_b1",
            r->decode_bB_over_b1, "batch", r->batch, "gen_len", r->gen_len, "kernels", kern_isa());
        json_object_set_new(o, "prefill_paired_frac", json_real(r->prefill_paired_frac));
        json_object_set_new(o, "decode_paired_frac_b1", json_real(r->decode_paired_frac_b1));
        json_object_set_new(o, "decode_paired_bB_over_b1", json_real(r->decode_paired_bB_over_b1));
        if (r->interleaved_steps) {
            json_object_set_new(o, "decode_interleaved_frac_b1",
                                json_real(r->decode_interleaved_frac_b1));
            json_object_set_new(o, "interleaved_read_gbs", json_real(r->interleaved_read_gbs));
        }
        json_object_set_new(o, "decode_limit_tok_s_bB", json_real(r->decode_limit_tok_s_bB));
        json_object_set_new(o, "decode_limit_frac_bB", json_real(r->decode_limit_frac_bB));
        json_object_set_new(o, "packed_weights_mb", json_real(info->packed_bytes / 1e6));
        json_object_set_new(o, "packed_weights_mapped",
                            json_boolean(info->packed_from == MODEL_PACK_MAPPED));
        if (r->bf16_dot_gflops > 0) {
            json_object_set_new(o, "bf16_dot_gflops", json_real(r->bf16_dot_gflops));
            json_object_set_new(o, "prefill_bf16_dot_frac", json_real(r->prefill_dot_frac));
        }
        char *s = json_dumps(o, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        json_decref(o);
        return;
    }
    printf("model            %s, %.0f MB of weights (%.0f MB read per decoded token), kernels %s\n",
           info->arch, r->weight_mb, info->active_bytes_per_token / 1e6, kern_isa());
    printf("load             %.2f s, RSS after load %.0f MB", r->load_s, r->rss_after_load_mb);
    if (info->packed_bytes)
        printf(", the matrices read from a copy %s (%.0f MB)",
               info->packed_from == MODEL_PACK_MAPPED ? "mapped from --pack-cache"
                                                      : "packed at load",
               info->packed_bytes / 1e6);
    printf("\n");
    printf("machine          read bandwidth %.1f GB/s, fp32 FMA peak %.1f GFLOP/s",
           r->bandwidth_gbs, r->fma_gflops);
    if (r->bf16_dot_gflops > 0) printf(", bf16 dot peak %.1f GFLOP/s", r->bf16_dot_gflops);
    printf("\nprefill %-5d    %.1f tok/s  = %.1f %% of FMA peak", r->prompt_len, r->prefill_tok_s,
           100 * r->prefill_peak_frac);
    if (r->bf16_dot_gflops > 0) printf(", %.1f %% of bf16 dot peak", 100 * r->prefill_dot_frac);
    printf("\n                 paired: %.1f %% of the FMA peak measured just before the pass "
           "(%.1f GFLOP/s)\n",
           100 * r->prefill_paired_frac, r->prefill_paired_peak);
    printf("decode batch 1   %.2f tok/s  = %.1f %% of bandwidth roofline (%.2f tok/s)\n",
           r->decode_tok_s_b1, 100 * r->decode_roofline_frac_b1,
           r->decode_tok_s_b1 / r->decode_roofline_frac_b1);
    printf("                 paired: %.1f %% (median of %d rounds, each against the bandwidth read "
           "just before it: %.1f-%.1f GB/s)\n",
           100 * r->decode_paired_frac_b1, r->paired_rounds, r->paired_bw_lo, r->paired_bw_hi);
    if (r->interleaved_steps)
        printf("                 interleaved: %.1f %% of a plain read timed between the steps (%d "
               "steps: the weights at %.1f GB/s, the read at %.1f GB/s, %.1f %% of the read "
               "bandwidth above)\n",
               100 * r->decode_interleaved_frac_b1, r->interleaved_steps,
               r->decode_interleaved_frac_b1 * r->interleaved_read_gbs, r->interleaved_read_gbs,
               100 * r->interleaved_read_gbs / r->bandwidth_gbs);
    printf("decode batch %-3d %.2f tok/s  = %.2fx batch 1, %.1f %% of its limit (%.2f tok/s: ",
           r->batch, r->decode_tok_s_bB, r->decode_bB_over_b1, 100 * r->decode_limit_frac_bB,
           r->decode_limit_tok_s_bB);
    if (r->limit_by_compute_bB)
        printf("%d tokens' matmuls a step at the %s peak, %.1f GOP/s)\n", r->batch,
               r->batch_peak_name, r->batch_peak_gflops);
    else
        printf("the active weights read once a step at the read bandwidth)\n");
    printf("                 paired: %.2fx batch 1 (median of %d rounds, each against a lone "
           "sequence of the same length decoding just before it)\n",
           r->decode_paired_bB_over_b1, r->paired_rounds_bB);
}

/* Batch B's limit: B tokens a step, a step no shorter than reading the
 * active weights once at the read bandwidth (for MoE, as if the batch's
 * tokens shared their experts) nor than B tokens' matmuls at
 * the peak of the arithmetic the batched kernels run on (bf16 or int8 dot
 * products where the CPU has them, else FMAs; int8 at 2 or 3 tokens
 * multiplies int16 activations at half the int8 rate, but there the read
 * binds). Attention is not counted, so it is an upper bound on tok/s. */
static void batch_limit(bench_result *r, const model_info *info, const char *dtype) {
    r->batch_peak_gflops = r->fma_gflops, r->batch_peak_name = "fp32 FMA";
    if (r->bf16_dot_gflops > 0 && !strcmp(dtype, "bf16"))
        r->batch_peak_gflops = r->bf16_dot_gflops, r->batch_peak_name = "bf16 dot";
    else if (r->i8_dot_gflops > 0)
        r->batch_peak_gflops = r->i8_dot_gflops, r->batch_peak_name = "int8 dot";
    double t_read = (double)info->active_bytes_per_token / (r->bandwidth_gbs * 1e9);
    double t_mm = r->batch * info->flops_per_token / (r->batch_peak_gflops * 1e9);
    r->limit_by_compute_bB = t_mm > t_read;
    r->decode_limit_tok_s_bB = r->batch / fmax(t_read, t_mm);
    r->decode_limit_frac_bB = r->decode_tok_s_bB / r->decode_limit_tok_s_bB;
}

int cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--serving")) return cmd_bench_serving(argc, argv);
    int pack_weights = 0;
    const char *pack_cache = NULL;
    const char *dir = NULL, *dtype = "bf16", *kv_dtype = "auto";
    int batch = 8, prompt_len = 512, gen_len = 32, threads = 0, json = 0, kernels = 0;
    const cli_opt opts[] = {
        {"--model", OPT_STR, &dir, "checkpoint directory"},
        {"--kernels", OPT_FLAG, &kernels, "kernel figures only (GEMV/GEMM vs limits), no model"},
        {"--batch", OPT_INT, &batch, "sequences decoding together (default 8)"},
        {"--prompt-len", OPT_INT, &prompt_len, "prefill length (default 512)"},
        {"--gen-len", OPT_INT, &gen_len, "decode steps (default 32)"},
        {"--threads", OPT_INT, &threads, "compute threads (default: all cores)"},
        {"--dtype", OPT_STR, &dtype, "bf16 (default) | f32 | int8 | int8:GROUP"},
        CLI_PACK_OPTS(pack_weights, pack_cache),
        {"--kv-dtype", OPT_STR, &kv_dtype, CLI_KV_DTYPE_HELP},
        {"--json", OPT_FLAG, &json, "print one JSON object"},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    const char *syn = "deepinfer bench --model DIR [options]";
    int rc = cli_parse(argc, argv, opts, n_opts, syn);
    if (rc) return rc == 1 ? 0 : rc;
    if (kernels) {
        kern_init();
        pool *p = pool_create(threads);
        kern_bench_report(p);
        pool_free(p);
        return 0;
    }
    if (!dir || batch < 1 || prompt_len < 1 || gen_len < 1) {
        cli_usage(stderr, opts, n_opts, syn);
        return 2;
    }
    model_opts mo;
    if (cli_model_opts(dtype, kv_dtype, threads, pack_weights, pack_cache, &mo)) return 2;
    bench_result r = {.batch = batch, .prompt_len = prompt_len, .gen_len = gen_len};
    double t0 = di_now();
    model *m = cli_load_model(dir, &mo);
    if (!m) return 1;
    r.load_s = di_now() - t0;
    r.rss_after_load_mb = cli_rss_bytes() / 1e6;
    const model_info *info = model_get_info(m);
    r.weight_mb = info->weight_bytes / 1e6;
    if (prompt_len + gen_len > info->max_context) {
        fprintf(stderr, "deepinfer bench: --prompt-len + --gen-len exceed the context (%d)\n",
                info->max_context);
        model_free(m);
        return 2;
    }
    r.bandwidth_gbs = kern_measure_read_bandwidth(model_pool(m), (size_t)1 << 30);
    r.fma_gflops = kern_measure_fma_peak(model_pool(m));
    /* bf16 weights, and int8 ones in prefill where the kernels say so, run
     * on bf16 dot products (measured 0 where the CPU has none) */
    int group = !strncmp(dtype, "int8:", 5) ? atoi(dtype + 5) : 0;
    if (!strcmp(dtype, "bf16") ||
        (!strncmp(dtype, "int8", 4) && kern_i8_prefill_on_bf16(group, info->hidden_size)))
        r.bf16_dot_gflops = kern_measure_bf16_dot_peak(model_pool(m));

    di_err err = {{0}};
    int per_seq = (prompt_len + 2 * gen_len) / MODEL_KV_BLOCK + 1; /* and the interleaved steps */
    int per_batch = (batch + 1) * ((16 + gen_len) / MODEL_KV_BLOCK + 1); /* and the lone one */
    int blocks = per_seq > per_batch ? per_seq : per_batch;
    model_kv_pool *kv = model_kv_pool_create(m, blocks, &err);
    rc = kv ? 0 : -1;
    if (!rc) rc = bench_single(m, kv, prompt_len, gen_len, &r, &err);
    if (!rc) rc = bench_batch(m, kv, batch, gen_len, &r, &err);
    if (!rc) { /* the limits again after the runs: the better of both counts */
        r.bandwidth_gbs =
            fmax(r.bandwidth_gbs, kern_measure_read_bandwidth(model_pool(m), (size_t)1 << 30));
        r.fma_gflops = fmax(r.fma_gflops, kern_measure_fma_peak(model_pool(m)));
        r.prefill_peak_frac = r.prefill_gflop_s / r.fma_gflops;
        if (r.bf16_dot_gflops > 0) {
            r.bf16_dot_gflops = fmax(r.bf16_dot_gflops, kern_measure_bf16_dot_peak(model_pool(m)));
            r.prefill_dot_frac = r.prefill_gflop_s / r.bf16_dot_gflops;
        }
        if (!strncmp(dtype, "int8", 4) && batch > 1)
            r.i8_dot_gflops = kern_measure_i8_dot_peak(model_pool(m));
        double roof = r.bandwidth_gbs * 1e9 / (double)info->active_bytes_per_token;
        r.decode_roofline_frac_b1 = r.decode_tok_s_b1 / roof;
        batch_limit(&r, info, dtype);
    }
    if (rc)
        fprintf(stderr, "deepinfer bench: %s\n", err.msg);
    else
        print_result(&r, info, json);
    if (kv) model_kv_pool_free(kv);
    model_free(m);
    return rc ? 1 : 0;
}
