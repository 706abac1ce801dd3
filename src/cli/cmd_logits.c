/* cmd_logits.c — `deepinfer logits`: the hook the reference tests use.
 * Prefills --prompt-len ids in one forward pass, then feeds the remaining ids
 * one decode step at a time, and writes raw little-endian f32 logits:
 * row 0 after position prompt-len-1, row k after position prompt-len-1+k.
 * --mtp-out also writes MTP depth-0 logits for positions 0..n-2 (position i
 * uses the main model's final hidden at i and token i+1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"

static int parse_ids(const char *s, int **ids, int vocab) {
    int n = 0, cap = 64;
    *ids = malloc(sizeof(int) * (size_t)cap);
    for (;;) {
        while (*s == ' ' || *s == ',' || *s == '\n') s++;
        if (!*s) break;
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= vocab) {
            free(*ids);
            return -1;
        }
        if (n == cap) *ids = realloc(*ids, sizeof(int) * (size_t)(cap *= 2));
        (*ids)[n++] = (int)v;
        s = end;
    }
    return n;
}

static int write_rows(const char *path, const float *rows, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(rows, sizeof(float), n, f) != n) {
        fprintf(stderr, "deepinfer logits: cannot write %s\n", path);
        if (f) fclose(f);
        return -1;
    }
    return fclose(f);
}

/* Main-model logits: one prefill of P tokens, then single-token steps. */
static int run_main(model *m, const int *ids, int n, int P, float *out, di_err *err) {
    int V = model_get_info(m)->vocab_size;
    model_kv_pool *kv = model_kv_pool_create(m, n / MODEL_KV_BLOCK + 2, err);
    if (!kv) return -1;
    model_seq s;
    model_seq_init(m, &s);
    int rc = model_seq_reserve(kv, &s, n, err);
    model_batch_seq b = {.seq = &s, .tokens = ids, .n_tokens = P, .logits = out};
    if (!rc) rc = model_forward(m, kv, &b, 1, err);
    for (int k = P; !rc && k < n; k++) {
        b = (model_batch_seq){
            .seq = &s, .tokens = ids + k, .n_tokens = 1, .logits = out + (size_t)(k - P + 1) * V};
        rc = model_forward(m, kv, &b, 1, err);
    }
    model_seq_free(m, kv, &s);
    model_kv_pool_free(kv);
    return rc;
}

/* MTP depth-0 logits for positions 0..n-2, token by token. */
static int run_mtp(model *m, const int *ids, int n, float *out, di_err *err) {
    const model_info *info = model_get_info(m);
    int V = info->vocab_size, H = info->hidden_size;
    model_kv_pool *kv = model_kv_pool_create(m, n / MODEL_KV_BLOCK + 2, err);
    if (!kv) return -1;
    model_seq s;
    model_seq_init(m, &s);
    float *hidden = malloc(sizeof(float) * (size_t)H);
    float *scratch = malloc(sizeof(float) * (size_t)V);
    int rc = model_seq_reserve(kv, &s, n, err);
    for (int i = 0; !rc && i + 1 < n; i++) {
        model_batch_seq b = {
            .seq = &s, .tokens = ids + i, .n_tokens = 1, .logits = scratch, .hidden = hidden};
        rc = model_forward(m, kv, &b, 1, err);
        if (!rc)
            rc =
                model_mtp_forward(m, kv, &s, 0, hidden, ids[i + 1], out + (size_t)i * V, NULL, err);
    }
    free(hidden);
    free(scratch);
    model_seq_free(m, kv, &s);
    model_kv_pool_free(kv);
    return rc;
}

int cmd_logits(int argc, char **argv) {
    int pack_weights = 0;
    const char *pack_cache = NULL;
    const char *dir = NULL, *ids_s = NULL, *out = NULL, *mtp_out = NULL, *dtype = "f32",
               *kv_dtype = "auto";
    int prompt_len = 0, threads = 0;
    const cli_opt opts[] = {
        {"--model", OPT_STR, &dir, "checkpoint directory"},
        {"--ids", OPT_STR, &ids_s, "token ids, space-separated"},
        {"--prompt-len", OPT_INT, &prompt_len, "ids prefilled in one pass (default: all)"},
        {"--dtype", OPT_STR, &dtype, "bf16 | f32 | int8 (default f32)"},
        CLI_PACK_OPTS(pack_weights, pack_cache),
        {"--kv-dtype", OPT_STR, &kv_dtype, CLI_KV_DTYPE_HELP},
        {"--threads", OPT_INT, &threads, "threads (default: all cores)"},
        {"--out", OPT_STR, &out, "output file (raw f32 rows)"},
        {"--mtp-out", OPT_STR, &mtp_out, "also write MTP depth-0 logits here"},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    const char *syn = "deepinfer logits --model DIR --ids \"I0 I1 ...\" --out FILE [options]";
    int rc = cli_parse(argc, argv, opts, n_opts, syn);
    if (rc) return rc == 1 ? 0 : rc;
    if (!dir || !ids_s || !out) {
        cli_usage(stderr, opts, n_opts, syn);
        return 2;
    }
    model_opts mo;
    if (cli_model_opts(dtype, kv_dtype, threads, pack_weights, pack_cache, &mo)) return 2;
    model *m = cli_load_model(dir, &mo);
    if (!m) return 1;
    const model_info *info = model_get_info(m);
    int *ids = NULL;
    int n = parse_ids(ids_s, &ids, info->vocab_size);
    if (n <= 0 || prompt_len > n) {
        fprintf(stderr,
                "deepinfer logits: bad --ids (empty or out of vocabulary) or --prompt-len\n");
        model_free(m);
        return 2;
    }
    if (prompt_len <= 0) prompt_len = n;
    size_t V = (size_t)info->vocab_size, rows = (size_t)(n - prompt_len + 1);
    float *logits = malloc(sizeof(float) * V * rows);
    di_err err = {{0}};
    rc = run_main(m, ids, n, prompt_len, logits, &err) || write_rows(out, logits, V * rows);
    if (!rc && mtp_out) {
        if (info->n_mtp_layers < 1) {
            snprintf(err.msg, sizeof err.msg, "model has no MTP layers");
            rc = -1;
        } else {
            float *mtp = malloc(sizeof(float) * V * (size_t)(n - 1));
            rc = run_mtp(m, ids, n, mtp, &err) || write_rows(mtp_out, mtp, V * (size_t)(n - 1));
            free(mtp);
        }
    }
    if (rc && err.msg[0]) fprintf(stderr, "deepinfer logits: %s\n", err.msg);
    free(logits);
    free(ids);
    model_free(m);
    return rc ? 1 : 0;
}
