/* cli.h — subcommands of the deepinfer binary, one file each in src/cli/.
 * Each takes (argc, argv) with argv[0] the command name and returns the exit
 * status (0 ok, 1 runtime error, 2 usage error). */
#ifndef DI_CLI_H
#define DI_CLI_H

#include <stddef.h>

#include "kvstore/kvstore.h"
#include "model/model.h"

int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);
/* `deepinfer bench --serving` (bench_serving.c): the engine under load. */
int cmd_bench_serving(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_render(int argc, char **argv);
/* `deepinfer serve`: the OpenAI / Anthropic HTTP API server (src/server/). */
int cmd_serve(int argc, char **argv);
/* Developer command used by the reference tests: runs a prompt, then decode
 * steps, and writes every position's logits as raw f32 to a file. */
int cmd_logits(int argc, char **argv);
/* KV store tools (src/kvstore/): the trace simulator and the bandwidth benchmark. */
int cmd_kvsim(int argc, char **argv);
int cmd_kvbench(int argc, char **argv);

/* Shared by the model-running commands (common.c). */
#define CLI_KV_DTYPE_HELP "KV cache elements: auto (f32 with --dtype f32, else bf16) | f32 | bf16"
/* The load options from --dtype ("bf16" | "f32" | "int8" | "int8:G", G
 * columns per scale), --kv-dtype (NULL: auto) and --threads; -1 with a
 * one-line error on stderr for a value it does not know (the commands
 * then exit 2, as for any bad option). */
int cli_model_opts(const char *dtype, const char *kv_dtype, int threads, bool pack_weights,
                   const char *pack_cache, model_opts *o);
/* The option rows of --pack-weights (int flag) and --pack-cache (string). */
#define CLI_PACK_OPTS(pack_weights, pack_cache)                                                    \
    {"--pack-weights", OPT_FLAG, &(pack_weights),                                                  \
     "bf16 on AVX2: read a copy packed at load, not the mapping"},                                 \
    {                                                                                              \
        "--pack-cache", OPT_STR, &(pack_cache),                                                    \
            "DIR: keep that copy as a file there, mapped in place by later loads (implies "        \
            "--pack-weights)"                                                                      \
    }
/* Loads a model with a one-line error on stderr; NULL on failure. */
model *cli_load_model(const char *dir, const model_opts *o);
/* The KV store options serve and generate share (--kv-store-capacity,
 * --kv-ttl-chat / --kv-ttl-agent in hours, < 0 unset, 0 forever) into ko;
 * a one-line error naming cmd on stderr and -1 when capacity is no size. */
int cli_kv_store_opts(const char *cmd, const char *capacity, float ttl_chat_h, float ttl_agent_h,
                      kvs_opts *ko);
/* Sorts v[0, n) ascending (the benchmarks' percentiles and medians). */
void cli_sort_doubles(double *v, int n);
/* The median of v[0, n) (the mean of the middle two when n is even; 0 when
 * n is 0); sorts v. */
double cli_median(double *v, int n);
/* Resident set size of this process in bytes (0 if unknown). */
size_t cli_rss_bytes(void);

#endif
