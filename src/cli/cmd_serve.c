/* cmd_serve.c — `deepinfer serve`: loads a model and its tokenizer, builds
 * the engine, and serves the OpenAI / Anthropic HTTP API (src/server/) until
 * SIGINT or SIGTERM. Signals are blocked before any thread starts and taken
 * with sigwait here, so no handler runs concurrently with the server. Prints
 * "deepinfer serve: listening on http://HOST:PORT" to stderr once ready
 * (--port 0 picks a free port; the line says which).
 *
 * --kv-store DIR opens the persistent KV block store (kvstore.h) here, not
 * in the engine, because its model fingerprint needs the checkpoint
 * directory and --dtype; it is closed (queued writes flushed) after the
 * engine is freed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "engine/engine.h"
#include "recipe/render.h"
#include "recipe/tokenizer.h"
#include "server/server.h"

int cmd_serve(int argc, char **argv) {
    int pack_weights = 0;
    const char *pack_cache = NULL;
    const char *dir = NULL, *host = "127.0.0.1", *api_key = NULL, *name = NULL, *dtype = "bf16",
               *kv_dtype = "auto";
    const char *format = NULL, *swa_replay = "bounded";
    const char *kv_store = NULL, *kv_capacity = NULL, *policy = "fcfs", *store_dir = NULL;
    float ttl_chat_h = -1, ttl_agent_h = -1;
    int batch_invariant = 0;
    int port = 8000, threads = 0, kv_mib = 0, kv_blocks = 0, max_running = 0, max_len = 0;
    int swap_mib = 0;
    int no_prefix = 0, max_body_kib = 8192, depth = 64, pending = 256, conns = 512;
    int def_max = 4096, max_n = 16, max_batch = 32, store_mib = 64, timeout = 600, verbose = 0;
    float step_ms = 0;
    const cli_opt opts[] = {
        {"--model", OPT_STR, &dir, "checkpoint directory (Hugging Face layout)"},
        {"--host", OPT_STR, &host, "IPv4 address to listen on (default 127.0.0.1)"},
        {"--port", OPT_INT, &port, "TCP port (default 8000; 0 = any free port)"},
        {"--api-key", OPT_STR, &api_key, "require this key (Authorization: Bearer or x-api-key)"},
        {"--served-model-name", OPT_STR, &name, "model name clients use (default: DIR's name)"},
        {"--format", OPT_STR, &format, "prompt format (default: guessed from the tokenizer)"},
        {"--dtype", OPT_STR, &dtype, "bf16 (default) | f32 | int8 | int8:GROUP"},
        CLI_PACK_OPTS(pack_weights, pack_cache),
        {"--kv-dtype", OPT_STR, &kv_dtype, CLI_KV_DTYPE_HELP},
        {"--threads", OPT_INT, &threads, "compute threads (default: all cores)"},
        {"--kv-memory", OPT_INT, &kv_mib, "KV cache size in MiB (default 1024)"},
        {"--kv-blocks", OPT_INT, &kv_blocks, "KV cache size in 128-token blocks (overrides)"},
        {"--swap-space", OPT_INT, &swap_mib,
         "host MiB for preempted sequences' KV (default 0: preempted ones recompute)"},
        {"--max-running", OPT_INT, &max_running, "sequences decoded together (default 256)"},
        {"--max-model-len", OPT_INT, &max_len, "context per request (default: the model's)"},
        {"--step-ms", OPT_FLOAT, &step_ms, "engine step time budget in ms (default 50)"},
        {"--no-prefix-cache", OPT_FLAG, &no_prefix, "disable prefix reuse"},
        {"--swa-replay", OPT_STR, &swa_replay, "bounded (default: last 128 tokens) | exact"},
        {"--batch-invariant", OPT_FLAG, &batch_invariant,
         "bit-identical output whatever the batch"},
        {"--kv-store", OPT_STR, &kv_store, "persistent KV block store directory (default: none)"},
        {"--kv-store-capacity", OPT_STR, &kv_capacity,
         "store size bound: bytes, or with a K/M/G/T suffix (binary: 200G = 200 GiB; default "
         "unbounded)"},
        {"--kv-ttl-chat", OPT_FLOAT, &ttl_chat_h,
         "hours a chat block is kept since last use (default 168; 0 = forever)"},
        {"--kv-ttl-agent", OPT_FLOAT, &ttl_agent_h,
         "hours an agent block is kept since last use (default 72; 0 = forever)"},
        {"--max-body-kib", OPT_INT, &max_body_kib, "request body cap in KiB (default 8192)"},
        {"--max-json-depth", OPT_INT, &depth, "JSON nesting cap (default 64)"},
        {"--max-pending", OPT_INT, &pending, "requests in flight before 429 (default 256)"},
        {"--max-connections", OPT_INT, &conns, "concurrent connections (default 512)"},
        {"--default-max-tokens", OPT_INT, &def_max, "output cap when a request sets none (4096)"},
        {"--max-n", OPT_INT, &max_n, "largest n accepted (default 16)"},
        {"--max-batch", OPT_INT, &max_batch,
         "most prompts in one /v1/completions request (default 32)"},
        {"--response-store-mib", OPT_INT, &store_mib,
         "memory for stored Responses API responses (previous_response_id; default 64, 0: none)"},
        {"--response-store-dir", OPT_STR, &store_dir,
         "also keep them as files in this directory, loaded back at start (default: memory only)"},
        {"--timeout", OPT_INT, &timeout, "idle connection timeout in s (default 600)"},
        {"--scheduling-policy", OPT_STR, &policy,
         "fcfs (default: a request's priority must be 0) | priority (vLLM's: lower first)"},
        {"--verbose", OPT_FLAG, &verbose, "log debug lines"},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    const char *syn =
        "deepinfer serve --model DIR [--host 127.0.0.1] [--port 8000] [--api-key KEY] "
        "[--served-model-name NAME] [options]";
    int rc = cli_parse(argc, argv, opts, n_opts, syn);
    if (rc) return rc == 1 ? 0 : rc;
    if (!dir) {
        cli_usage(stderr, opts, n_opts, syn);
        return 2;
    }
    if (port < 0 || port > 65535 || kv_mib < 0 || kv_blocks < 0 || swap_mib < 0 ||
        max_running < 0 || max_len < 0 || max_body_kib <= 0 || depth <= 0 || pending <= 0 ||
        conns <= 0 || def_max <= 0 || max_n <= 0 || max_batch <= 0 || store_mib < 0 ||
        timeout <= 0) {
        fprintf(stderr, "deepinfer serve: a numeric option is out of range\n");
        return 2;
    }
    if (strcmp(policy, "fcfs") && strcmp(policy, "priority")) {
        fprintf(stderr, "deepinfer serve: --scheduling-policy is fcfs or priority, not '%s'\n",
                policy);
        return 2;
    }
    /* The mode packs the copies --pack-weights would (and more where that
     * packs none); asked for at load they stay for good, so a checkpoint
     * converted at load drops its converted copy (panels.c). */
    bool pack = pack_weights || batch_invariant;
    model_opts mo;
    if (cli_model_opts(dtype, kv_dtype, threads, pack, pack_cache, &mo)) return 2;
    if (verbose) di_log_set_level(DI_LOG_DEBUG);
    render_format fmt;
    di_err err = {{0}};
    if (format ? render_format_parse(format, &fmt) : render_format_guess(dir, &fmt, &err)) {
        fprintf(stderr, "deepinfer serve: %s\n",
                format ? "unknown --format (deepseek-v3, deepseek-v4, chatml, llama3)" : err.msg);
        return 2;
    }
    char base[256];
    if (!name) {
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/') n--;
        size_t b = n;
        while (b > 0 && dir[b - 1] != '/') b--;
        snprintf(base, sizeof base, "%.*s", (int)(n - b), dir + b);
        name = base;
    }

    /* Block the stop signals in every thread we are about to start. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    tokenizer *tok = tok_load(dir, &err);
    if (!tok) {
        fprintf(stderr, "deepinfer serve: %s\n", err.msg);
        return 1;
    }
    if (strcmp(swa_replay, "bounded") && strcmp(swa_replay, "exact")) {
        fprintf(stderr, "deepinfer serve: --swa-replay is bounded or exact, not '%s'\n",
                swa_replay);
        tok_free(tok);
        return 2;
    }
    kvs_opts ko;
    if (cli_kv_store_opts("serve", kv_capacity, ttl_chat_h, ttl_agent_h, &ko)) {
        tok_free(tok);
        return 2;
    }
    model *m = cli_load_model(dir, &mo);
    if (!m) {
        tok_free(tok);
        return 1;
    }
    if (!mo.pack_weights && model_get_info(m)->pack_weights_helps) {
        fprintf(stderr, "deepinfer serve: on this CPU (AVX2, no AVX-512 BF16) --pack-weights "
                        "decodes batches 1.3-1.5x faster, in about the same memory "
                        "(--pack-cache DIR: packed once, mapped by later loads)\n");
    }
    kvs *store = NULL;
    if (kv_store) {
        store = engine_kv_store_open(m, dir, dtype, kv_store, &ko, &err);
        if (!store) {
            fprintf(stderr, "deepinfer serve: --kv-store: %s\n", err.msg);
            model_free(m);
            tok_free(tok);
            return 1;
        }
        fprintf(stderr, "deepinfer serve: KV store %s (%lld blocks)\n", kvs_dir(store),
                kvs_get_stats(store).index_blocks);
    }
    const model_info *info = model_get_info(m);
    engine_opts eo = {.kv_blocks = kv_blocks,
                      .kv_memory = (size_t)kv_mib << 20,
                      .swap_bytes = (size_t)swap_mib << 20,
                      .step_ms = step_ms,
                      .max_running = max_running,
                      .max_model_len = max_len,
                      .no_prefix_cache = no_prefix,
                      .swa_replay_exact = !strcmp(swa_replay, "exact"),
                      .batch_invariant = batch_invariant,
                      .kv_store = store};
    engine *e = engine_create(m, tok, &eo, &err);
    if (!e) {
        fprintf(stderr, "deepinfer serve: %s\n", err.msg);
        if (store) kvs_close(store);
        model_free(m);
        tok_free(tok);
        return 1;
    }
    engine_stats es = engine_get_stats(e);
    fprintf(stderr, "deepinfer serve: KV cache of %d blocks of %d tokens, %s entries (%.0f MiB)",
            es.blocks_total, MODEL_KV_BLOCK, model_kv_dtype_name(m),
            (double)es.blocks_total * (double)model_kv_block_bytes(m) / (1 << 20));
    if (swap_mib)
        fprintf(stderr, ", swap space %d MiB for preempted requests\n", swap_mib);
    else
        fprintf(stderr, "\n");
    /* a request can never hold more than the whole pool: that is its context */
    int context = max_len > 0 && max_len < info->max_context ? max_len : info->max_context;
    if (engine_max_seq_tokens(e) < context) {
        fprintf(stderr,
                "deepinfer serve: the KV cache holds %d tokens, less than the context of %d: "
                "requests get %d (raise --kv-memory for more)\n",
                engine_max_seq_tokens(e), context, engine_max_seq_tokens(e));
        context = engine_max_seq_tokens(e);
    }
    srv_opts so = {.host = host,
                   .port = port,
                   .api_key = api_key,
                   .model_name = name,
                   .format = fmt,
                   .context = context,
                   .max_body = (size_t)max_body_kib << 10,
                   .max_json_depth = depth,
                   .max_pending = pending,
                   .max_connections = conns,
                   .default_max_tokens = def_max,
                   .max_n = max_n,
                   .priority = !strcmp(policy, "priority"),
                   .max_batch = max_batch,
                   .response_store_mib = store_mib ? store_mib : -1,
                   .response_store_dir = store_dir,
                   .request_timeout_s = timeout};
    srv *s = srv_start(e, tok, &so, &err);
    if (!s) {
        fprintf(stderr, "deepinfer %s\n", err.msg);
        engine_free(e);
        if (store) kvs_close(store);
        model_free(m);
        tok_free(tok);
        return 1;
    }
    fprintf(stderr,
            "deepinfer serve: model '%s' (%s format, context %d) listening on http://%s:%d\n", name,
            render_format_name(fmt), so.context, host, srv_port(s));
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "deepinfer serve: signal %d, shutting down\n", sig);
    srv_stop(s);
    engine_free(e);
    if (store) kvs_close(store);
    model_free(m);
    tok_free(tok);
    return 0;
}
