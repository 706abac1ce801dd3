/* cmd_generate.c — `deepinfer generate`: encode a prompt, prefill it in
 * chunks, then decode token by token, streaming complete UTF-8 text to stdout
 * as it is produced; prefill and decode speeds go to stderr. The prompt is
 * user text: control tokens it spells stay text (tok_encode_text).
 *
 * --kv-store DIR (with serve's store options): the prompt's whole blocks
 * already in the store are fetched and swapped into the KV pool layer by
 * layer while the prefill of the rest runs (model_seq.kv_wait), sliding-
 * window rings are rebuilt by exact replay, and the prompt's new full blocks
 * are written to the store (chat class); stderr says how many prompt tokens
 * came from the store and how many were computed.
 *
 * --grammar TEXT / --grammar-file FILE (llama.cpp's): the continuation is
 * held to a GBNF grammar (grammar.h) by masking, before each draw, the
 * tokens that cannot continue a text its root matches; it ends with the
 * end of sequence once complete (or at --max-tokens). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "engine/block_manager.h"
#include "engine/engine.h"
#include "engine/grammar.h"
#include "engine/json_grammar.h"
#include "engine/sampler.h"
#include "recipe/tokenizer.h"

#define PREFILL_CHUNK 512

/* A prompt's store hit in progress: its fetch and layer-by-layer swap-in. */
typedef struct store_hit {
    kvs_fetch *f;
    kvs_swapin *w;
    uint64_t *keys; /* chain keys of the prompt's full blocks */
    int n_keys, tokens, replay;
} store_hit;

static void wait_layer(void *w, int seg) {
    kvs_swapin_wait_layer(w, seg);
}

/* Matches the prompt's whole blocks (all but its last token) in the store
 * and starts their fetch and swap-in into seq's blocks; returns the position
 * the prefill starts from (a replay of the sliding-window rings before the
 * hit, exact: window x SWA layers). */
static int store_attach(kvs *st, model *m, model_kv_pool *kv, model_seq *seq, const int *ids, int n,
                        store_hit *h) {
    h->keys = di_malloc(sizeof *h->keys * (size_t)(n / BM_BLOCK + 1));
    h->n_keys = bm_chain_keys(ids, n, h->keys);
    int hit = kvs_match(st, h->keys, (n - 1) / BM_BLOCK, n);
    if (hit == 0) return 0;
    void **dst = di_malloc(sizeof *dst * (size_t)hit);
    for (int i = 0; i < hit; i++) dst[i] = model_kv_block_data(kv, seq->blocks[i]);
    h->f = kvs_fetch_start(st, h->keys, ids, hit);
    h->w = kvs_swapin_start(h->f, hit, dst);
    free(dst);
    h->tokens = kvs_swapin_wait_layer(h->w, 0) * BM_BLOCK; /* fetched: the usable prefix */
    seq->kv_wait = wait_layer;
    seq->kv_wait_ctx = h->w;
    const model_info *info = model_get_info(m);
    int R = info->n_swa_layers ? info->sliding_window * info->n_swa_layers : 0;
    if (R > h->tokens) R = h->tokens;
    h->replay = R;
    seq->n_past = seq->swa_floor = h->tokens - R;
    seq->kv_keep_end = h->tokens;
    return h->tokens - R;
}

/* After the prefill: the swap-in is complete; the prompt's other full blocks
 * go to the store. */
static void store_finish(kvs *st, model_kv_pool *kv, model_seq *seq, const int *ids, store_hit *h) {
    if (h->w) {
        kvs_swapin_finish(h->w);
        kvs_swapin_free(h->w);
        kvs_fetch_free(h->f);
    }
    seq->kv_wait = NULL;
    for (int i = h->tokens / BM_BLOCK; i < h->n_keys; i++)
        kvs_put(st, h->keys[i], i ? h->keys[i - 1] : 0, ids + (size_t)i * BM_BLOCK,
                model_kv_block_data(kv, seq->blocks[i]), KVS_CLASS_CHAT);
    free(h->keys);
}

static bool is_eos(const model_info *info, const tokenizer *tok, int id) {
    for (int i = 0; i < info->n_eos; i++)
        if (info->eos_ids[i] == id) return true;
    return id == tok_eos_id(tok);
}

/* The continuation held to a grammar: its matcher and the vocabulary's
 * bytes for the mask. */
typedef struct held {
    gr_grammar *g;
    gr_matcher *m;
    jg_vocab *v;
    jg_state s;
} held;

static char *token_bytes(void *tok, int id, size_t *len) {
    return tok_is_control(tok, id) ? NULL : tok_token_bytes(tok, id, len);
}

/* Compiles the grammar (text, or the file's) for the model's vocabulary. */
static int held_init(held *h, const char *text, const char *file, tokenizer *tok,
                     const model_info *info, di_err *err) {
    size_t len = 0;
    char *owned = file ? di_read_file(file, &len, err) : NULL;
    if (file && !owned) return -1;
    if (!file) len = strlen(text);
    char why[200];
    h->g = gr_compile(owned ? owned : text, len, why, sizeof why);
    free(owned);
    if (!h->g) return di_errf(err, "%s: %s", file ? file : "--grammar", why);
    int eos[16], n_eos = 0;
    for (int i = 0; i < info->n_eos && n_eos < 15; i++) eos[n_eos++] = info->eos_ids[i];
    if (tok_eos_id(tok) >= 0) eos[n_eos++] = tok_eos_id(tok);
    h->v = jg_vocab_new(info->vocab_size, token_bytes, tok, eos, n_eos);
    h->m = gr_matcher_new(h->g);
    jg_init_grammar(&h->s, h->m);
    return 0;
}

static void held_free(held *h) {
    gr_matcher_free(h->m);
    gr_free(h->g);
    jg_vocab_free(h->v);
}

int cmd_generate(int argc, char **argv) {
    int pack_weights = 0;
    const char *pack_cache = NULL;
    const char *dir = NULL, *prompt = NULL, *dtype = "bf16", *kv_dtype = "auto";
    int max_tokens = 128, threads = 0, top_k = 0, ignore_eos = 0, no_bos = 0;
    float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f;
    uint64_t seed = 0;
    const char *kv_store = NULL, *kv_capacity = NULL, *grammar = NULL, *grammar_file = NULL;
    float ttl_chat_h = -1, ttl_agent_h = -1;
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
        CLI_PACK_OPTS(pack_weights, pack_cache),
        {"--kv-dtype", OPT_STR, &kv_dtype, CLI_KV_DTYPE_HELP},
        {"--ignore-eos", OPT_FLAG, &ignore_eos, "keep going past end-of-sequence"},
        {"--no-bos", OPT_FLAG, &no_bos, "do not start with the BOS token"},
        {"--grammar", OPT_STR, &grammar,
         "GBNF grammar the continuation is held to (its rule root)"},
        {"--grammar-file", OPT_STR, &grammar_file, "... read from this file"},
        {"--kv-store", OPT_STR, &kv_store, "persistent KV block store directory (default: none)"},
        {"--kv-store-capacity", OPT_STR, &kv_capacity,
         "store size bound: bytes, or with a K/M/G/T suffix (default unbounded)"},
        {"--kv-ttl-chat", OPT_FLOAT, &ttl_chat_h,
         "hours a chat block is kept since last use (default 168; 0 = forever)"},
        {"--kv-ttl-agent", OPT_FLOAT, &ttl_agent_h,
         "hours an agent block is kept since last use (default 72; 0 = forever)"},
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

    if ((grammar && grammar_file) || ((grammar || grammar_file) && ignore_eos)) {
        fprintf(stderr, "deepinfer generate: --grammar and --grammar-file are one option, and a "
                        "grammar ends the text with end-of-sequence (not with --ignore-eos)\n");
        return 2;
    }

    kvs_opts ko;
    if (cli_kv_store_opts("generate", kv_capacity, ttl_chat_h, ttl_agent_h, &ko)) return 2;
    model_opts mo;
    if (cli_model_opts(dtype, kv_dtype, threads, pack_weights, pack_cache, &mo)) return 2;

    di_err err = {{0}};
    tokenizer *tok = tok_load(dir, &err);
    if (!tok) {
        fprintf(stderr, "deepinfer: %s\n", err.msg);
        return 1;
    }
    model *m = cli_load_model(dir, &mo);
    if (!m) {
        tok_free(tok);
        return 1;
    }
    const model_info *info = model_get_info(m);
    kvs *store = NULL;
    if (kv_store && !(store = engine_kv_store_open(m, dir, dtype, kv_store, &ko, &err))) {
        fprintf(stderr, "deepinfer generate: --kv-store: %s\n", err.msg);
        model_free(m);
        tok_free(tok);
        return 1;
    }

    held h = {0};
    if ((grammar || grammar_file) && held_init(&h, grammar, grammar_file, tok, info, &err)) {
        fprintf(stderr, "deepinfer generate: %s\n", err.msg);
        if (store) kvs_close(store);
        model_free(m);
        tok_free(tok);
        return 1;
    }
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
    store_hit hit = {0};
    size_t start =
        store && !rc ? (size_t)store_attach(store, m, kv, &seq, ids.v, (int)ids.n, &hit) : 0;
    for (size_t at = start; !rc && at < ids.n; at += PREFILL_CHUNK) {
        int n = ids.n - at < PREFILL_CHUNK ? (int)(ids.n - at) : PREFILL_CHUNK;
        model_batch_seq b = {.seq = &seq, .tokens = ids.v + at, .n_tokens = n, .logits = logits};
        rc = model_forward(m, kv, &b, 1, &err);
    }
    double t_prefill = di_now() - t0;
    if (store && !rc) {
        store_finish(store, kv, &seq, ids.v, &hit);
        fprintf(stderr,
                "kv store: %zu prompt tokens: %d from the store (cached), %zu computed (+%d "
                "replayed for sliding-window layers)\n",
                ids.n, hit.tokens, ids.n - (size_t)hit.tokens, hit.replay);
    } else if (store) {
        store_finish(store, kv, &seq, ids.v,
                     &(store_hit){.f = hit.f, .w = hit.w, .keys = hit.keys});
    }

    sampler smp;
    sampler_init(&smp, &(sampler_params){temperature, top_k, top_p, min_p, seed}, info->vocab_size);
    tok_stream *ts = tok_stream_new(tok, true);
    int generated = 0, steps = 0;
    t0 = di_now();
    while (!rc && generated < max_tokens) {
        if (h.v) jg_mask(h.v, &h.s, logits);
        int next = sampler_sample(&smp, logits);
        generated++;
        if (!ignore_eos && is_eos(info, tok, next)) break;
        if (h.v) jg_feed_token(h.v, &h.s, next);
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
    held_free(&h);
    sampler_free(&smp);
    free(logits);
    model_seq_free(m, kv, &seq);
    if (kv) model_kv_pool_free(kv);
    tok_ids_free(&ids);
    if (store) kvs_close(store); /* writes what is queued */
    model_free(m);
    tok_free(tok);
    return rc ? 1 : 0;
}
