/* test_kvstore_restart.c — the engine over the persistent KV store
 * (engine_opts.kv_store): an engine restarted on the same store directory
 * (new engine, new KV pool, store reopened and its index rebuilt from disk)
 * attaches the whole-block prefix of a prompt an earlier engine computed,
 * reports it as cached tokens, and gives the same greedy output. On
 * hybrid-tiny the sliding-window rings are not in the store: the engine's
 * replay rebuilds them after the store hit (exact replay here, so the output
 * must equal the first run's). f32 test models from harness_model_dir().
 * The store's counters reach /metrics (srv_metrics_render). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "harness.h"
#include "kvs_test.h"
#include "model/model.h"
#include "server/srv_internal.h"

enum { NP = 300, HIT = 256, GEN = 8 };

typedef struct out {
    int tok[GEN], n, cached, done;
} out;

static void on_ev(const engine_event *ev, void *user) {
    out *o = user;
    if (ev->token >= 0 && o->n < GEN) o->tok[o->n++] = ev->token;
    if (ev->finish != ENGINE_FINISH_NONE) {
        o->cached = ev->usage.cached_tokens;
        o->done++;
    }
}

/* One engine over the store: runs the prompt once, returns its stats. */
static void run_once(model *m, kvs *st, const int *p, engine_traffic t, out *o, engine_stats *s) {
    engine_opts eo = {.kv_blocks = 16,
                      .step_tokens = 96,
                      .max_running = 4,
                      .swa_replay_exact = true,
                      .kv_store = st};
    di_err err;
    engine *e = engine_create(m, NULL, &eo, &err);
    CHECKF(e, "%s", err.msg);
    memset(o, 0, sizeof *o);
    engine_request q = {.prompt = p,
                        .n_prompt = NP,
                        .stop = {.max_tokens = GEN, .ignore_eos = true},
                        .traffic = t,
                        .on_event = on_ev,
                        .user = o};
    CHECKF(engine_submit(e, &q, &err) > 0, "%s", err.msg);
    engine_wait_idle(e);
    *s = engine_get_stats(e);
    engine_free(e);
}

static void restart_case(const char *preset) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", harness_model_dir(), preset);
    if (access(dir, R_OK)) return; /* test models not made */
    di_err err;
    model *m = model_load(dir, &(model_opts){.dtype = MODEL_DTYPE_F32, .threads = 1}, &err);
    CHECKF(m, "%s", err.msg);
    int V = model_get_info(m)->vocab_size;
    static int p[NP];
    for (int i = 0; i < NP; i++) p[i] = (i * 7919 + 13) % V;
    char *sdir = kvt_tmpdir();
    static out o1, o2;

    /* First engine: an empty store, everything computed, two full blocks
     * persisted (agent class). */
    kvs *st = engine_kv_store_open(m, dir, "f32", sdir, NULL, &err);
    CHECKF(st, "%s", err.msg);
    engine_stats s;
    run_once(m, st, p, ENGINE_TRAFFIC_AGENT, &o1, &s);
    CHECKF(o1.done == 1 && o1.n == GEN && o1.cached == 0, "%s: first run cached %d", preset,
           o1.cached);
    CHECK(s.has_kv_store && s.kv_store_hit_tokens == 0);
    kvs_close(st); /* writes what is queued */

    /* Restart: the store reopened from the directory, a fresh engine. */
    st = engine_kv_store_open(m, dir, "f32", sdir, NULL, &err);
    CHECKF(st, "%s", err.msg);
    CHECKF(kvs_get_stats(st).index_blocks == HIT / 128, "%s: %lld blocks stored", preset,
           kvs_get_stats(st).index_blocks);
    run_once(m, st, p, ENGINE_TRAFFIC_CHAT, &o2, &s);
    CHECKF(o2.cached == HIT && s.kv_store_hit_tokens == HIT, "%s: cached %d, from store %lld",
           preset, o2.cached, s.kv_store_hit_tokens);
    CHECKF(s.kv_store.blocks_read == HIT / 128 && s.kv_store.hit_tokens == HIT,
           "%s: %lld blocks read", preset, s.kv_store.blocks_read);
    CHECKF(!memcmp(o1.tok, o2.tok, sizeof o1.tok), "%s: store hit changed the greedy output",
           preset);
    /* hit rate: 256 of the 300 tokens looked up in the store */
    srv_metrics *sm = srv_metrics_new();
    char *txt = srv_metrics_render(sm, &s, 0);
    CHECK(strstr(txt, "deepinfer_kv_store_prompt_tokens_total 256\n") &&
          strstr(txt, "deepinfer_kv_store_blocks_read_total 2\n") &&
          strstr(txt, "deepinfer_kv_store_hit_rate 0.853333\n") &&
          strstr(txt, "deepinfer_kv_store_evictions_total{reason=\"ttl\"} 0\n"));
    free(txt);
    srv_metrics_free(sm);
    if (model_get_info(m)->n_swa_layers > 0)
        CHECKF(s.swa_replays == 1 && s.swa_restores == 0, "%s: %lld replays after a store hit",
               preset, s.swa_replays);
    kvs_close(st);
    kvt_rmdir(sdir);
    model_free(m);
}

TEST(kvstore_restart_engine_llama3_tiny) {
    restart_case("llama3-tiny");
}

TEST(kvstore_restart_engine_hybrid_tiny) {
    restart_case("hybrid-tiny");
}
