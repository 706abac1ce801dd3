/* common.c — what the model-running subcommands share: dtype parsing, model
 * loading with a one-line error, and resident-memory readout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int cli_parse_dtype(const char *s, model_opts *o) {
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

model *cli_load_model(const char *dir, const char *dtype, int threads) {
    model_opts o = {.dtype = MODEL_DTYPE_BF16, .threads = threads};
    if (cli_parse_dtype(dtype, &o)) {
        fprintf(stderr, "deepinfer: unknown --dtype '%s' (bf16, f32, int8, int8:GROUP)\n", dtype);
        return NULL;
    }
    di_err err = {{0}};
    model *m = model_load(dir, &o, &err);
    if (!m) fprintf(stderr, "deepinfer: %s\n", err.msg);
    return m;
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
