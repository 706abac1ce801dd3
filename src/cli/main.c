/* main.c — the deepinfer command line: dispatches to subcommands. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "cli/cli.h"

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
               "run 'deepinfer COMMAND --help' for a command's options\n");
}

int main(int argc, char **argv) {
    di_malloc_policy();
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
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
