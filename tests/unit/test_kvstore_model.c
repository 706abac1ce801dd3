/* test_kvstore_model.c — the store carries a real model's KV exactly: a
 * prompt's full blocks, persisted from the KV pool after a run, are found
 * after a "restart" (new pool, store reopened and its index rebuilt from the
 * directory), swapped into a fresh sequence layer by layer, and the rest of
 * the prompt gives the first run's logits (to 1e-4; zeroed KV is off by
 * 6e-2) and the same greedy tokens (f32 llama3-tiny). Until the engine calls
 * the store itself (--kv-store), this is the end-to-end check of the block
 * layout and the hit path. Reads pool entries through model_internal.h, as
 * test_forward.c does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/block_manager.h"
#include "harness.h"
#include "kvs_test.h"
#include "kvstore/kvstore.h"
#include "model/model_internal.h"

enum { PROMPT = 300, GEN = 6, MAXL = 64 };

/* The pool block's segments: every full-attention layer (main and MTP),
 * layer-major, 128 entries each (kvcache.c's layout). */
static int full_layers(const model *m, size_t *off, size_t *bytes) {
    int n = 0;
    size_t o = 0;
    for (int l = 0; l < m->cfg.n_layers + m->cfg.num_nextn_predict_layers && n < MAXL; l++) {
        if (m->cfg.layer_swa[l]) continue;
        off[n] = o;
        bytes[n] = (size_t)MODEL_KV_BLOCK * model_kv_entry_bytes(m, l);
        o += bytes[n++];
    }
    return o == model_kv_block_bytes(m) ? n : -1;
}

/* The layer segment at byte offset off of the block that holds pos. */
static char *region(model_kv_pool *kv, model_seq *s, size_t off, int pos) {
    return (char *)model_kv_block_data(kv, s->blocks[pos / 128]) + off;
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* Forwards toks[from..PROMPT) on s (n_past == from), keeping the last
 * prompt token's logits in first (vocab floats), then GEN greedy tokens. */
static int finish(model *m, model_kv_pool *kv, model_seq *s, const int *toks, int from, int *out,
                  float *first) {
    int V = model_get_info(m)->vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)V);
    di_err err;
    model_batch_seq b = {
        .seq = s, .tokens = toks + from, .n_tokens = PROMPT - from, .logits = logits};
    int rc = model_seq_reserve(kv, s, PROMPT + GEN, &err) || model_forward(m, kv, &b, 1, &err);
    if (!rc) memcpy(first, logits, sizeof(float) * (size_t)V);
    for (int g = 0; g < GEN && !rc; g++) {
        out[g] = argmax(logits, V);
        b = (model_batch_seq){.seq = s, .tokens = &out[g], .n_tokens = 1, .logits = logits};
        rc = model_forward(m, kv, &b, 1, &err);
    }
    if (rc) fprintf(stderr, "%s\n", err.msg);
    free(logits);
    return rc;
}

TEST(kvstore_model_restart_same_greedy_output) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/llama3-tiny", harness_model_dir());
    struct stat sb;
    if (stat(dir, &sb) != 0) return; /* test models not made */
    model_opts mo = {.dtype = MODEL_DTYPE_F32, .threads = 1};
    di_err err;
    model *m = model_load(dir, &mo, &err);
    CHECKF(m, "%s", err.msg);
    size_t off[MAXL], bytes[MAXL];
    int nl = full_layers(m, off, bytes);
    CHECK(nl > 0);
    size_t off2[MAXL], bytes2[MAXL]; /* model.h's accessor agrees with the hand-made layout */
    CHECK(model_kv_block_layout(m, off2, bytes2, MAXL) == nl);
    for (int k = 0; k < nl; k++) CHECK(off2[k] == off[k] && bytes2[k] == bytes[k]);
    kvs_layout lay = {.block_bytes = model_kv_block_bytes(m),
                      .n_layers = nl,
                      .layer_off = off,
                      .layer_bytes = bytes};
    CHECK(kvs_fingerprint_model(dir, "f32", lay.block_bytes, &lay.fingerprint, &err) == 0);
    int toks[PROMPT], out1[GEN], out2[GEN], V = model_get_info(m)->vocab_size;
    float *l1 = malloc(sizeof(float) * (size_t)V), *l2 = malloc(sizeof(float) * (size_t)V);
    for (int i = 0; i < PROMPT; i++) toks[i] = (i * 7919 + 13) % model_get_info(m)->vocab_size;
    uint64_t keys[PROMPT / 128];
    int nk = bm_chain_keys(toks, PROMPT, keys);
    CHECK(nk == 2);
    char *sdir = kvt_tmpdir();

    /* First run: compute everything, persist the full blocks. */
    model_kv_pool *kv = model_kv_pool_create(m, 8, &err);
    model_seq s;
    model_seq_init(m, &s);
    CHECK(finish(m, kv, &s, toks, 0, out1, l1) == 0);
    kvs *st = kvs_open(sdir, &lay, NULL, &err);
    CHECKF(st, "%s", err.msg);
    char *payload = malloc(lay.block_bytes);
    for (int b = 0; b < nk; b++) {
        for (int k = 0; k < nl; k++)
            memcpy(payload + off[k], region(kv, &s, off[k], b * 128), bytes[k]);
        CHECK(kvs_put(st, keys[b], b ? keys[b - 1] : 0, toks + 128 * b, payload, KVS_CLASS_CHAT) ==
              0);
    }
    kvs_close(st); /* flushes */
    model_seq_free(m, kv, &s);
    model_kv_pool_free(kv);

    /* Restart: a new pool, the store reopened from the directory. */
    kv = model_kv_pool_create(m, 8, &err);
    st = kvs_open(sdir, &lay, NULL, &err);
    CHECK(st && kvs_get_stats(st).index_blocks == nk);
    int hit = kvs_match(st, keys, nk, PROMPT);
    CHECK(hit == nk);
    kvs_fetch *f = kvs_fetch_start(st, keys, toks, hit);
    void *host[2] = {malloc(lay.block_bytes), malloc(lay.block_bytes)};
    kvs_swapin *w = kvs_swapin_start(f, hit, host);
    CHECK(kvs_swapin_wait_layer(w, 0) == hit);
    model_seq_init(m, &s);
    CHECK(model_seq_reserve(kv, &s, hit * 128, &err) == 0);
    s.n_past = hit * 128;
    for (int k = 0; k < nl; k++) { /* layer k enters the pool as soon as it is in place */
        kvs_swapin_wait_layer(w, k);
        for (int b = 0; b < hit; b++)
            memcpy(region(kv, &s, off[k], b * 128), (char *)host[b] + off[k], bytes[k]);
    }
    CHECK(kvs_swapin_finish(w) == hit);
    kvs_swapin_free(w);
    kvs_fetch_free(f);
    CHECK(finish(m, kv, &s, toks, hit * 128, out2, l2) == 0);
    /* The suffix attends over swapped-in KV: its logits match the full run's
     * (only the chunking differs), which wrong or missing KV would not. */
    double md = 0, mx = 1e-30;
    for (int i = 0; i < V; i++) {
        double d = l1[i] - l2[i], a = l1[i] < 0 ? -l1[i] : l1[i];
        if ((d < 0 ? -d : d) > md) md = d < 0 ? -d : d;
        if (a > mx) mx = a;
    }
    CHECKF(md / mx < 1e-4, "last prompt logits differ by %g (relative)", md / mx);
    for (int g = 0; g < GEN; g++)
        CHECKF(out1[g] == out2[g], "token %d: %d vs %d", g, out1[g], out2[g]);
    kvs_stats ks = kvs_get_stats(st);
    CHECK(ks.hit_tokens == 256 && ks.blocks_read == 2);
    kvs_close(st);
    model_seq_free(m, kv, &s);
    model_kv_pool_free(kv);
    model_free(m);
    free(payload);
    free(l1);
    free(l2);
    free(host[0]);
    free(host[1]);
    kvt_rmdir(sdir);
}
