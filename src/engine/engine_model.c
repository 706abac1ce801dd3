/* engine_model.c — engine_create: the engine over a loaded model and its
 * tokenizer. Wires model.h (KV pool, sequences, model_forward) and
 * tokenizer.h (tok_stream_*) into the runner and detokenizer tables that the
 * engine core is written against, so the core stays testable with a fake.
 *
 * Copy-on-write copies the block (model_kv_copy_block); sliding-window
 * models get ring snapshots (model_swa_save / restore) for the SWA state
 * cache, replay and forks, with the window and depth from model_info.
 * Batch invariance is model_set_batch_invariant (fixed kernel reduction
 * orders, one attention path); the rest of the forward pass (per-token
 * norms and attention, expert matmuls over their own tokens) already
 * reduces in an order fixed per row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/model.h"
#include "recipe/tokenizer.h"

typedef struct model_runner {
    model *m;
    model_kv_pool *kv;
} model_runner;

static int mr_kv_alloc(void *c) {
    return model_kv_alloc(((model_runner *)c)->kv);
}
static void mr_kv_release(void *c, int b) {
    model_kv_release(((model_runner *)c)->kv, b);
}
static void mr_seq_init(void *c, model_seq *s) {
    model_seq_init(((model_runner *)c)->m, s);
}
static void mr_seq_free(void *c, model_seq *s) {
    s->blocks = NULL; /* the engine owns the table */
    s->n_blocks = s->cap_blocks = 0;
    model_seq_free(((model_runner *)c)->m, NULL, s);
}
static int mr_forward(void *c, model_batch_seq *b, int n, di_err *err) {
    model_runner *r = c;
    return model_forward(r->m, r->kv, b, n, err);
}
static int mr_copy_block(void *c, int dst, int src, di_err *err) {
    (void)err;
    model_kv_copy_block(((model_runner *)c)->kv, dst, src);
    return 0;
}
static void *mr_kv_block_data(void *c, int block) {
    return model_kv_block_data(((model_runner *)c)->kv, block);
}
static model_swa_state *mr_swa_save(void *c, const model_seq *s) {
    return model_swa_save(((model_runner *)c)->m, s);
}
static void mr_swa_restore(void *c, model_seq *s, const model_swa_state *st) {
    model_swa_restore(((model_runner *)c)->m, s, st);
}
static void mr_swa_free(void *st) {
    model_swa_state_free(st);
}
static void mr_batch_invariant(void *c, bool on) {
    model_set_batch_invariant(((model_runner *)c)->m, on);
}
static void mr_destroy(void *c) {
    model_runner *r = c;
    model_kv_pool_free(r->kv);
    free(r);
}

static void *td_open(void *t) {
    return tok_stream_new(t, true);
}
static const char *td_push(void *s, int id, size_t *len) {
    return tok_stream_push(s, id, len);
}
static const char *td_flush(void *s, size_t *len) {
    return tok_stream_flush(s, len);
}
static void td_close(void *s) {
    tok_stream_free(s);
}
static char *td_token_bytes(void *t, int id, size_t *len) {
    return tok_is_control(t, id) ? NULL : tok_token_bytes(t, id, len);
}

static char *td_control_bytes(void *t, int id, size_t *len) {
    return tok_is_control(t, id) ? tok_token_bytes(t, id, len) : NULL;
}

engine *engine_create(model *m, tokenizer *tok, const engine_opts *opts, di_err *err) {
    const model_info *info = model_get_info(m);
    engine_opts o = opts ? *opts : (engine_opts){0};
    int n_blocks = o.kv_blocks;
    if (n_blocks <= 0) {
        size_t bytes = o.kv_memory ? o.kv_memory : (size_t)1 << 30;
        size_t bb = model_kv_block_bytes(m);
        n_blocks = bb ? (int)(bytes / bb) : 0;
        if (n_blocks < 1) {
            di_errf(err, "engine: --kv-memory %zu bytes holds no %zu-byte KV block", bytes, bb);
            return NULL;
        }
        o.kv_blocks = n_blocks;
    }
    model_kv_pool *kv = model_kv_pool_create(m, n_blocks, err);
    if (!kv) return NULL;
    model_runner *mr = di_calloc(1, sizeof *mr);
    mr->m = m;
    mr->kv = kv;

    engine_runner r = {.ctx = mr,
                       .vocab = info->vocab_size,
                       .max_context = info->max_context,
                       .kv_alloc = mr_kv_alloc,
                       .kv_release = mr_kv_release,
                       .seq_init = mr_seq_init,
                       .seq_free = mr_seq_free,
                       .forward = mr_forward,
                       .copy_block = mr_copy_block,
                       .kv_block_data = mr_kv_block_data,
                       .kv_block_bytes = model_kv_block_bytes(m),
                       .pool = model_pool(m),
                       .set_batch_invariant = mr_batch_invariant,
                       .destroy = mr_destroy};
    for (int i = 0; i < info->n_eos && r.n_eos < MODEL_MAX_EOS; i++)
        r.eos_ids[r.n_eos++] = info->eos_ids[i];
    int teos = tok ? tok_eos_id(tok) : -1;
    bool have = false;
    for (int i = 0; i < r.n_eos; i++) have |= r.eos_ids[i] == teos;
    if (teos >= 0 && !have && r.n_eos < MODEL_MAX_EOS) r.eos_ids[r.n_eos++] = teos;
    r.has_swa = info->n_swa_layers > 0;
    r.sliding_window = info->sliding_window;
    r.n_swa_layers = info->n_swa_layers;
    if (r.has_swa) {
        r.swa_save = mr_swa_save;
        r.swa_restore = mr_swa_restore;
        r.swa_free = mr_swa_free;
        r.swa_bytes = model_swa_state_bytes;
    }

    engine_detok d = {.ctx = tok,
                      .open = td_open,
                      .push = td_push,
                      .flush = td_flush,
                      .close = td_close,
                      .token_bytes = td_token_bytes,
                      .control_bytes = td_control_bytes};
    return engine_create_runner(&r, tok ? &d : NULL, &o, err);
}

kvs *engine_kv_store_open(model *m, const char *model_dir, const char *dtype_tag,
                          const char *store_dir, const kvs_opts *ko, di_err *err) {
    size_t off[KVS_MAX_LAYERS], bytes[KVS_MAX_LAYERS];
    int n = model_kv_block_layout(m, off, bytes, KVS_MAX_LAYERS);
    if (n < 1 || n > KVS_MAX_LAYERS) {
        di_errf(err, "--kv-store: the model has %d full-attention layers (1..%d supported)", n,
                KVS_MAX_LAYERS);
        return NULL;
    }
    kvs_layout lay = {.block_bytes = model_kv_block_bytes(m),
                      .n_layers = n,
                      .layer_off = off,
                      .layer_bytes = bytes};
    char tag[128]; /* what the entries hold depends on both; where they lie on the layout */
    snprintf(tag, sizeof tag, "%s/kv-%s/%s", dtype_tag, model_kv_dtype_name(m), MODEL_KV_LAYOUT);
    if (kvs_fingerprint_model(model_dir, tag, lay.block_bytes, &lay.fingerprint, err)) return NULL;
    return kvs_open(store_dir, &lay, ko, err);
}
