/* common.c — what the subcommands share: dtype parsing, model loading with a
 * one-line error, KV store options, resident-memory readout, and the sort
 * behind the benchmarks' percentiles. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static int parse_dtype(const char *s, model_opts *o) {
    if (!strcmp(s, "bf16"))
        o->dtype = MODEL_DTYPE_BF16;
    else if (!strcmp(s, "f32"))
        o->dtype = MODEL_DTYPE_F32;
    else if (!strcmp(s, "int8"))
        o->dtype = MODEL_DTYPE_INT8, o->int8_group = 0;
    else if (!strncmp(s, "int8:", 5)) {
        char *end;
        long g = strtol(s + 5, &end, 10);
        if (*end || g <= 0 || g > 1 << 20) return -1;
        o->dtype = MODEL_DTYPE_INT8;
        o->int8_group = (int)g;
    } else
        return -1;
    return 0;
}

int cli_model_opts(const char *dtype, const char *kv_dtype, int threads, bool pack_weights,
                   const char *pack_cache, model_opts *o) {
    *o = (model_opts){.dtype = MODEL_DTYPE_BF16,
                      .threads = threads,
                      .pack_weights = pack_weights || pack_cache,
                      .pack_cache = pack_cache};
    if (parse_dtype(dtype, o)) {
        fprintf(stderr, "deepinfer: unknown --dtype '%s' (bf16, f32, int8, int8:GROUP)\n", dtype);
        return -1;
    }
    if (!kv_dtype || !strcmp(kv_dtype, "auto"))
        o->kv_dtype = MODEL_KV_AUTO;
    else if (!strcmp(kv_dtype, "f32"))
        o->kv_dtype = MODEL_KV_F32;
    else if (!strcmp(kv_dtype, "bf16"))
        o->kv_dtype = MODEL_KV_BF16;
    else {
        fprintf(stderr, "deepinfer: unknown --kv-dtype '%s' (auto, f32, bf16)\n", kv_dtype);
        return -1;
    }
    return 0;
}

model *cli_load_model(const char *dir, const model_opts *o) {
    di_err err = {{0}};
    model *m = model_load(dir, o, &err);
    if (!m) {
        fprintf(stderr, "deepinfer: %s\n", err.msg);
        return NULL;
    }
    const model_info *in = model_get_info(m);
    if (in->packed_from == MODEL_PACK_WRITTEN)
        fprintf(stderr, "deepinfer: packed copy of the weights being written to %s\n",
                in->pack_file);
    else if (in->packed_from == MODEL_PACK_MAPPED)
        fprintf(stderr, "deepinfer: packed copy of the weights mapped from %s\n", in->pack_file);
    return m;
}

int cli_kv_store_opts(const char *cmd, const char *capacity, float ttl_chat_h, float ttl_agent_h,
                      kvs_opts *ko) {
    *ko = (kvs_opts){0};
    if (capacity) {
        bool ok;
        ko->capacity_bytes = kvs_parse_size(capacity, &ok);
        if (!ok || !ko->capacity_bytes) {
            fprintf(stderr, "deepinfer %s: --kv-store-capacity '%s' is not a size\n", cmd,
                    capacity);
            return -1;
        }
    }
    float ttl_h[KVS_N_CLASS] = {ttl_chat_h, ttl_agent_h};
    for (int c = 0; c < KVS_N_CLASS; c++) /* unset: the store's default; 0: no expiry */
        ko->ttl_s[c] = ttl_h[c] < 0 ? 0 : ttl_h[c] == 0 ? -1 : ttl_h[c] * 3600.0;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void cli_sort_doubles(double *v, int n) {
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_double);
}

double cli_median(double *v, int n) {
    if (n <= 0) return 0;
    cli_sort_doubles(v, n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

size_t cli_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtoull(line + 6, NULL, 10);
    fclose(f);
    return kb * 1024;
}
