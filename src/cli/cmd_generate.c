/* cmd_generate.c — `deepinfer generate`: encode a prompt, prefill it in
 * chunks, then decode token by token, streaming complete UTF-8 text to stdout
 * as it is produced; prefill and decode speeds go to stderr. The prompt is
 * user text: control tokens it spells stay text (tok_encode_text). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "engine/sampler.h"
#include "recipe/tokenizer.h"

#define PREFILL_CHUNK 512

static bool is_eos(const model_info *info, const tokenizer *tok, int id) {
    for (int i = 0; i < info->n_eos; i++)
        if (info->eos_ids[i] == id) return true;
    return id == tok_eos_id(tok);
}

int cmd_generate(int argc, char **argv) {
    const char *dir = NULL, *prompt = NULL, *dtype = "bf16";
    int max_tokens = 128, threads = 0, top_k = 0, ignore_eos = 0, no_bos = 0;
    float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f;
    uint64_t seed = 0;
    const cli_opt opts[] = {
        {"--model", OPT_STR, &dir, "checkpoint directory (Hugging Face layout)"},
        {"--prompt", OPT_STR, &prompt, "prompt text"},
        {"--max-tokens", OPT_INT, &max_tokens, "tokens to generate (default 128)"},
        {"--temperature", OPT_FLOAT, &temperature, "0 = greedy (default 0)"},
        {"--top-p", OPT_FLOAT, &top_p, "nucleus sampling mass (default 1 = off)"},
        {"--top-k", OPT_INT, &top_k, "keep the k most likely tokens (default 0 = off)"},
        {"--min-p", OPT_FLOAT, &min_p, "drop tokens below min-p x the top probability"},
        {"--seed", OPT_U64, &seed, "sampling seed (default 0)"},
        {"--threads", OPT_INT, &threads, "compute threads (default: all cores)"},
        {"--dtype", OPT_STR, &dtype, "bf16 (default) | f32 | int8 | int8:GROUP"},
        {"--ignore-eos", OPT_FLAG, &ignore_eos, "keep going past end-of-sequence"},
        {"--no-bos", OPT_FLAG, &no_bos, "do not start with the BOS token"},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    const char *syn = "deepinfer generate --model DIR --prompt TEXT [options]";
    int rc = cli_parse(argc, argv, opts, n_opts, syn);
    if (rc) return rc == 1 ? 0 : rc;
    if (!dir || !prompt) {
        cli_usage(stderr, opts, n_opts, syn);
        return 2;
    }
    if (max_tokens < 0 || temperature < 0 || top_p <= 0 || top_p > 1 || top_k < 0) {
        fprintf(stderr, "deepinfer generate: --max-tokens, --temperature, --top-p or --top-k out "
                        "of range\n");
        return 2;
    }

    di_err err = {{0}};
    tokenizer *tok = tok_load(dir, &err);
    if (!tok) {
        fprintf(stderr, "deepinfer: %s\n", err.msg);
        return 1;
    }
    model *m = cli_load_model(dir, dtype, threads);
    if (!m) {
        tok_free(tok);
        return 1;
    }
    const model_info *info = model_get_info(m);

    tok_ids ids = {0};
    int bos = no_bos ? -1 : tok_bos_id(tok);
    if (bos >= 0) tok_ids_push(&ids, bos);
    rc = tok_encode_text(tok, prompt, strlen(prompt), &ids, &err);
    int total = (int)ids.n + max_tokens;
    if (!rc && ids.n == 0) rc = di_errf(&err, "empty prompt");
    if (!rc && total > info->max_context)
        rc = di_errf(&err, "prompt (%zu tokens) + --max-tokens %d exceeds the model's context %d",
                     ids.n, max_tokens, info->max_context);

    model_kv_pool *kv = rc ? NULL : model_kv_pool_create(m, total / MODEL_KV_BLOCK + 1, &err);
    model_seq seq;
    model_seq_init(m, &seq);
    if (!kv) rc = -1;
    if (!rc) rc = model_seq_reserve(kv, &seq, total, &err);

    float *logits = malloc(sizeof(float) * (size_t)info->vocab_size);
    double t0 = di_now();
    for (size_t at = 0; !rc && at < ids.n; at += PREFILL_CHUNK) {
        int n = ids.n - at < PREFILL_CHUNK ? (int)(ids.n - at) : PREFILL_CHUNK;
        model_batch_seq b = {.seq = &seq, .tokens = ids.v + at, .n_tokens = n, .logits = logits};
        rc = model_forward(m, kv, &b, 1, &err);
    }
    double t_prefill = di_now() - t0;

    sampler smp;
    sampler_init(&smp, &(sampler_params){temperature, top_k, top_p, min_p, seed}, info->vocab_size);
    tok_stream *ts = tok_stream_new(tok, true);
    int generated = 0, steps = 0;
    t0 = di_now();
    while (!rc && generated < max_tokens) {
        int next = sampler_sample(&smp, logits);
        generated++;
        if (!ignore_eos && is_eos(info, tok, next)) break;
        size_t len;
        const char *piece = tok_stream_push(ts, next, &len);
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
        if (generated == max_tokens) break;
        model_batch_seq b = {.seq = &seq, .tokens = &next, .n_tokens = 1, .logits = logits};
        rc = model_forward(m, kv, &b, 1, &err);
        steps++;
    }
    size_t len;
    const char *rest = tok_stream_flush(ts, &len);
    fwrite(rest, 1, len, stdout);
    printf("\n");
    double t_decode = di_now() - t0;
    if (rc)
        fprintf(stderr, "deepinfer generate: %s\n", err.msg);
    else
        fprintf(stderr,
                "prefill: %zu tokens in %.3f s (%.1f tok/s); decode: %d tokens, %d forward "
                "steps in %.3f s (%.2f tok/s)\n",
                ids.n, t_prefill, ids.n / (t_prefill > 0 ? t_prefill : 1e-9), generated, steps,
                t_decode, steps / (t_decode > 0 ? t_decode : 1e-9));

    tok_stream_free(ts);
    sampler_free(&smp);
    free(logits);
    model_seq_free(m, kv, &seq);
    if (kv) model_kv_pool_free(kv);
    tok_ids_free(&ids);
    model_free(m);
    tok_free(tok);
    return rc ? 1 : 0;
}
