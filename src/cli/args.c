/* args.c — table-driven option parsing for the subcommands. */
#include "cli/args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void cli_usage(FILE *f, const cli_opt *opts, int n_opts, const char *synopsis) {
    fprintf(f, "usage: %s\n", synopsis);
    for (int i = 0; i < n_opts; i++) {
        const char *arg = opts[i].kind == OPT_FLAG    ? ""
                          : opts[i].kind == OPT_STR   ? " S"
                          : opts[i].kind == OPT_FLOAT ? " X"
                                                      : " N";
        fprintf(f, "  %s%-*s %s\n", opts[i].name, (int)(22 - strlen(opts[i].name)), arg,
                opts[i].help);
    }
}

static int parse_value(const cli_opt *o, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case OPT_STR:
        *(const char **)o->dst = v;
        return 0;
    case OPT_INT: {
        long x = strtol(v, &end, 10);
        if (errno || !*v || *end || x < -2147483647L || x > 2147483647L) return -1;
        *(int *)o->dst = (int)x;
        return 0;
    }
    case OPT_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || !*v || *end || *v == '-') return -1;
        *(uint64_t *)o->dst = x;
        return 0;
    }
    case OPT_FLOAT: {
        float x = strtof(v, &end);
        if (errno || !*v || *end) return -1;
        *(float *)o->dst = x;
        return 0;
    }
    case OPT_FLAG:
        return 0;
    }
    return -1;
}

int cli_parse(int argc, char **argv, const cli_opt *opts, int n_opts, const char *synopsis) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            cli_usage(stdout, opts, n_opts, synopsis);
            return 1;
        }
        const cli_opt *o = NULL;
        for (int j = 0; j < n_opts; j++)
            if (!strcmp(argv[i], opts[j].name)) o = &opts[j];
        if (!o) {
            fprintf(stderr, "%s: unknown option '%s'\n", argv[0], argv[i]);
            cli_usage(stderr, opts, n_opts, synopsis);
            return 2;
        }
        if (o->kind == OPT_FLAG) {
            *(int *)o->dst = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: option %s needs a value\n", argv[0], o->name);
            return 2;
        }
        if (parse_value(o, argv[++i])) {
            fprintf(stderr, "%s: bad value '%s' for %s\n", argv[0], argv[i], o->name);
            return 2;
        }
    }
    return 0;
}
