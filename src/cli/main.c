/* main.c — the deepinfer command line: dispatches to subcommands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli/cli.h"
#include "kernels/kernels.h"

#define DEEPINFER_VERSION "0.9.0"

static void usage(FILE *f) {
    fprintf(f, "usage: deepinfer COMMAND [options]\n"
               "commands:\n"
               "  generate   stream a continuation of a prompt\n"
               "  bench      measure prefill/decode speed against the machine's limits\n"
               "  tokenize   encode text (stdin) with a model's tokenizer\n"
               "  render     render a conversation (JSON, stdin) into a prompt\n"
               "  serve      serve the OpenAI and Anthropic HTTP APIs\n"
               "  kv-sim     KV store hit rates per traffic class on a synthetic trace\n"
               "  kv-bench   KV store read/write bandwidth beside the raw disk's\n"
               "run 'deepinfer COMMAND --help' for a command's options; --version: this build\n"
               "environment:\n"
               "  DEEPINFER_ISA=avx2|scalar   run the AVX2 or the portable kernels even\n"
               "                              where the CPU has more (to measure or compare)\n"
               "  DEEPINFER_FEW_TOUCH=0       batched bf16 decode without its page touch\n"
               "                              (to measure it)\n");
}

/* DEEPINFER_ISA: the kernels' instruction set, below what the CPU offers. */
static int set_isa(void) {
    const char *isa = getenv("DEEPINFER_ISA");
    if (!isa || !*isa || !strcmp(isa, "native")) return 0;
    if (!strcmp(isa, "avx2")) {
        kern_force_avx2(true);
    } else if (!strcmp(isa, "scalar")) {
        kern_force_scalar(true);
    } else {
        fprintf(stderr, "deepinfer: DEEPINFER_ISA must be native, avx2 or scalar, not '%s'\n", isa);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    di_malloc_policy();
    if (set_isa()) return 2;
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("deepinfer %s (kernels %s)\n", DEEPINFER_VERSION, kern_isa());
        return 0;
    }
    const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {
        {"generate", cmd_generate}, {"bench", cmd_bench},      {"tokenize", cmd_tokenize},
        {"render", cmd_render},     {"logits", cmd_logits},    {"serve", cmd_serve},
        {"kv-sim", cmd_kvsim},      {"kv-bench", cmd_kvbench},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "deepinfer: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
