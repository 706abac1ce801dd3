/* args.h — the small option parser every subcommand uses: a table of
 * "--name value" options, typed, with help text; unknown options, missing
 * values and malformed numbers are usage errors naming the option. */
#ifndef DI_CLI_ARGS_H
#define DI_CLI_ARGS_H

#include <stdint.h>
#include <stdio.h>

typedef enum { OPT_STR, OPT_INT, OPT_FLOAT, OPT_U64, OPT_FLAG } cli_opt_kind;

typedef struct cli_opt {
    const char *name; /* "--model" */
    cli_opt_kind kind;
    void *dst; /* const char **, int *, float *, uint64_t *, int * (flag) */
    const char *help;
} cli_opt;

/* Returns 0, or 2 after printing the problem (or 1 after printing help for
 * --help: callers return 0 then). */
int cli_parse(int argc, char **argv, const cli_opt *opts, int n_opts, const char *synopsis);
void cli_usage(FILE *f, const cli_opt *opts, int n_opts, const char *synopsis);

#endif
