/* test_kvstore_async.c — the KV store's hit path off the critical path
 * (kvs_engine.h): admission only matches and starts the fetch; a stalled
 * read (a read hook that blocks until the test opens a gate) stalls neither
 * the admission call nor, in the engine, any other request; a request
 * cancelled while its blocks are being read releases everything at once
 * (the fetch thread frees the orphaned fetch later; ASan checks leaks); a
 * corrupt block in the middle of a stored prefix truncates the hit there
 * (the rest is computed, the greedy output unchanged); blocks held by
 * fetching sequences are given back before a request is failed as too big
 * for the pool; the forward pass
 * calls the per-layer wait hook once per full-attention layer, in the store
 * layout's order. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "harness.h"
#include "kvs_test.h"
#include "kvstore/kvs_engine.h"
#include "kvstore/kvs_internal.h"
#include "model/model.h"

/* --- a gate in front of every block read ----------------------------------- */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
    int entered; /* reads that reached the hook */
} gate;

static void gate_hook(void *ctx, uint64_t key) {
    (void)key;
    gate *g = ctx;
    pthread_mutex_lock(&g->mu);
    g->entered++;
    pthread_cond_broadcast(&g->cv);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_set(gate *g, bool open) {
    pthread_mutex_lock(&g->mu);
    g->open = open;
    if (!open) g->entered = 0;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Waits (at most 10 s) until n reads are stalled in the hook. */
static bool gate_wait_entered(gate *g, int n) {
    bool ok = false;
    for (int i = 0; i < 10000 && !ok; i++) {
        pthread_mutex_lock(&g->mu);
        ok = g->entered >= n;
        pthread_mutex_unlock(&g->mu);
        if (!ok) usleep(1000);
    }
    return ok;
}

/* --- store level, over a fake pool ------------------------------------------ */
enum { NBLK = KVT_NBLK, BYTES = KVT_BYTES, NB = 4 };

typedef struct {
    kvs_load *ld;
    atomic_bool done; /* polled by the test thread */
} free_job;

static void *free_main(void *arg) {
    free_job *j = arg;
    kvs_load_free(j->ld);
    atomic_store(&j->done, true);
    return NULL;
}

TEST(kvstore_async_admit_cancel_and_truncate) {
    char *dir = kvt_tmpdir();
    kvs_layout lay = kvt_layout(0xA5);
    gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, true, 0};
    kvs_opts o = {.read_hook = gate_hook, .read_hook_ctx = &g};
    di_err err;
    kvs *s = kvs_open(dir, &lay, &o, &err);
    CHECKF(s, "%s", err.msg);
    int tok[NB * 128 + 5], n = NB * 128 + 5;
    kvt_tokens(tok, n, 11);
    uint64_t keys[NB];
    bm_chain_keys(tok, NB * 128, keys);
    char payload[BYTES];
    for (int i = 0; i < NB; i++) {
        kvt_payload(payload, BYTES, 50 + (uint64_t)i);
        CHECK(kvs_put(s, keys[i], i ? keys[i - 1] : 0, tok + i * 128, payload, KVS_CLASS_CHAT) ==
              0);
    }
    kvs_flush(s);
    kvt_pool *p = calloc(1, sizeof *p);
    kvs_pool_io io = {p, kvt_block_data};
    bm *b = kvt_make_bm();

    /* Admission with every read stalled: returns at once with a load that is
     * not ready, its pool blocks reserved but not in the prefix cache. */
    gate_set(&g, false);
    bm_table t = {0};
    kvs_load *ld = NULL;
    CHECK(kvs_admit(s, b, &t, tok, n, n - 1, &io, &ld) == 0);
    CHECK(ld && t.n == NB && t.n_hashed == 0);
    CHECK(gate_wait_entered(&g, 1));
    int got = -1;
    CHECK(!kvs_load_ready(ld, &got) && got == -1);
    CHECK(bm_lookup(b, tok, n) == 0);

    /* Cancelled while reads are stalled: the free does not wait for them. */
    free_job j = {.ld = ld};
    atomic_init(&j.done, false);
    pthread_t th;
    pthread_create(&th, NULL, free_main, &j);
    for (int i = 0; i < 5000 && !atomic_load(&j.done); i++) usleep(1000);
    CHECKF(atomic_load(&j.done), "kvs_load_free waited for a stalled read");
    gate_set(&g, true);
    pthread_join(th, NULL);
    bm_release(b, &t);
    CHECK(bm_n_available(b) == NBLK);

    /* Ready once the gate opens; the payload arrives byte for byte and enters
     * the prefix cache at finish. */
    gate_set(&g, false);
    CHECK(kvs_admit(s, b, &t, tok, n, n - 1, &io, &ld) == 0 && ld);
    CHECK(!kvs_load_ready(ld, &got));
    gate_set(&g, true);
    for (int i = 0; i < 10000 && !kvs_load_ready(ld, &got); i++) usleep(500);
    CHECK(got == NB * 128);
    for (int l = 0; l < lay.n_layers; l++) kvs_load_wait_layer(ld, l);
    kvs_load_finish(ld, b, &t, tok);
    CHECK(t.n_hashed == NB && bm_lookup(b, tok, n) == NB * 128);
    for (int i = 0; i < NB; i++) {
        uint64_t seed;
        CHECK(kvt_payload_ok(p->data[t.blocks[i]], BYTES, &seed) && seed == 50 + (uint64_t)i);
    }
    bm_release(b, &t);
    bm_free(b);

    /* A corrupt block mid-prefix: the hit ends before it (kvs_attach_prefix
     * runs the same path to the end). */
    char path[4200];
    kvs_file_path(path, sizeof path, kvs_dir(s), keys[2]);
    FILE *fp = fopen(path, "r+b");
    CHECK(fp && fseek(fp, KVS_PAYLOAD_OFF + 100, SEEK_SET) == 0);
    int c = fgetc(fp);
    fseek(fp, KVS_PAYLOAD_OFF + 100, SEEK_SET);
    fputc(c ^ 0x5a, fp);
    fclose(fp);
    b = kvt_make_bm();
    int fs = -1;
    CHECK(kvs_attach_prefix(s, b, &t, tok, n, n - 1, &io, &fs) == 256 && fs == 256);
    CHECK(t.n == NB && t.n_hashed == 2); /* blocks 2, 3 stay reserved for the forward pass */
    kvs_stats st = kvs_get_stats(s);
    CHECK(st.read_misses >= 1);
    long long lat = 0;
    for (int i = 0; i < KVS_LAT_BUCKETS; i++) lat += st.fetch_lat_us[i];
    CHECKF(lat == st.blocks_read, "latency histogram %lld, blocks read %lld", lat, st.blocks_read);
    bm_release(b, &t);
    bm_table_free(&t);
    bm_free(b);
    kvs_close(s);
    free(p);
    kvt_rmdir(dir);
}

/* --- the scheduler: fetching sequences hold blocks ------------------------- */
static seq *mk_seq(uint64_t id, const int *p, int n) {
    return seq_new(id, p, n, 0, id);
}

/* The engine's part of a step: store loads finished, chunks computed. */
static void run_plan(bm *b, const sched_plan *p) {
    for (int i = 0; i < p->n_items; i++) {
        seq *q = p->items[i].s;
        if (q->store_load) {
            kvs_load_finish(q->store_load, b, &q->table, q->tokens);
            q->store_load = NULL;
        }
        q->n_computed += p->items[i].n_tokens;
        bm_commit(b, &q->table, q->tokens, q->n_computed);
        if (p->items[i].logits) seq_append(q, 7);
    }
}

TEST(kvstore_async_sched_fetching_blocks_given_back) {
    char *dir = kvt_tmpdir();
    kvs_layout lay = kvt_layout(0xA6);
    gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, true, 0};
    kvs_opts o = {.read_hook = gate_hook, .read_hook_ctx = &g};
    di_err err;
    kvs *st = kvs_open(dir, &lay, &o, &err);
    CHECKF(st, "%s", err.msg);
    enum { N = 4 * 128 + 10 };
    static int p1[N], p2[N], p3[10];
    kvt_tokens(p1, N, 1);
    kvt_tokens(p2, N, 2);
    kvt_tokens(p3, 10, 3);
    char payload[BYTES];
    for (int k = 0; k < 2; k++) {
        const int *pp = k ? p2 : p1;
        uint64_t keys[4];
        bm_chain_keys(pp, 512, keys);
        for (int i = 0; i < 4; i++) {
            kvt_payload(payload, BYTES, (uint64_t)(k * 10 + i));
            CHECK(kvs_put(st, keys[i], i ? keys[i - 1] : 0, pp + i * 128, payload,
                          KVS_CLASS_CHAT) == 0);
        }
    }
    kvs_flush(st);
    kvt_pool *fp = calloc(1, sizeof *fp);
    int ids[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    bm *b = bm_create(ids, 8);
    sched *s = sched_create(b, &(sched_opts){.token_budget = 64,
                                             .max_running = 8,
                                             .store = st,
                                             .store_io = {fp, kvt_block_data}});

    /* Both store hits fetching (stalled): the whole pool is theirs. */
    gate_set(&g, false);
    seq *a = mk_seq(1, p1, N), *c = mk_seq(2, p2, N), *d = mk_seq(3, p3, 10);
    sched_add_waiting(s, a);
    sched_add_waiting(s, c);
    const sched_plan *p = sched_schedule(s);
    CHECK(p->n_items == 0 && p->n_failed == 0 && sched_n_fetching(s) == 2);
    CHECK(a->state == SEQ_FETCHING && bm_n_available(b) == 0);
    /* A short request: not failed as too big, the fetching ones give way
     * (their loads cancelled without waiting for the stalled reads). */
    sched_add_waiting(s, d);
    p = sched_schedule(s);
    CHECKF(p->n_failed == 0, "%d failed", p->n_failed);
    CHECK(sched_store_hit_tokens(s) == 0);
    bool has_d = false;
    for (int i = 0; i < p->n_items; i++) has_d |= p->items[i].s == d;
    CHECK(has_d && d->state == SEQ_RUNNING);
    run_plan(b, p);

    /* Reads resume: every sequence gets its prompt computed (and leaves, as
     * a finished request would); none is failed on the way. */
    gate_set(&g, true);
    seq *all[3] = {a, c, d};
    int left = 3;
    for (int step = 0; step < 300 && left; step++) {
        p = sched_schedule(s);
        CHECK(p->n_failed == 0);
        run_plan(b, p);
        for (int i = 0; i < 3; i++)
            if (all[i] && all[i]->n_computed >= all[i]->n_prompt) {
                sched_remove(s, all[i]);
                seq_free(all[i]);
                all[i] = NULL;
                left--;
            }
        if (!p->n_items) usleep(1000);
    }
    CHECKF(left == 0, "%d prompts not computed", left);
    CHECK(bm_get_stats(b).used == 0);
    for (int i = 0; i < 3; i++)
        if (all[i]) {
            sched_remove(s, all[i]);
            seq_free(all[i]);
        }
    sched_free(s);
    bm_free(b);
    kvs_close(st);
    free(fp);
    kvt_rmdir(dir);
}

/* --- the forward's hook ------------------------------------------------------ */
typedef struct {
    int segs[64], n;
} seg_log;

static void log_seg(void *ctx, int seg) {
    seg_log *g = ctx;
    if (g->n < 64) g->segs[g->n++] = seg;
}

static void hook_case(const char *preset) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", harness_model_dir(), preset);
    if (access(dir, R_OK)) return;
    di_err err;
    model *m = model_load(dir, &(model_opts){.dtype = MODEL_DTYPE_F32, .threads = 1}, &err);
    CHECKF(m, "%s", err.msg);
    model_kv_pool *kv = model_kv_pool_create(m, 2, &err);
    model_seq s;
    model_seq_init(m, &s);
    CHECK(model_seq_reserve(kv, &s, 4, &err) == 0);
    seg_log g = {{0}, 0};
    s.kv_wait = log_seg;
    s.kv_wait_ctx = &g;
    int toks[4] = {1, 2, 3, 4};
    model_batch_seq bs = {&s, toks, 4, NULL, false, NULL};
    CHECK(model_forward(m, kv, &bs, 1, &err) == 0);
    size_t off[64], bytes[64];
    const model_info *mi = model_get_info(m);
    int full = mi->n_layers - mi->n_swa_layers;
    CHECK(model_kv_block_layout(m, off, bytes, 64) >= full);
    CHECKF(g.n == full, "%s: %d waits for %d full-attention layers", preset, g.n, full);
    for (int i = 0; i < g.n; i++) CHECK(g.segs[i] == i);
    model_seq_free(m, kv, &s);
    model_kv_pool_free(kv);
    model_free(m);
}

TEST(kvstore_async_forward_waits_per_layer) {
    hook_case("llama3-tiny");
    hook_case("hybrid-tiny");
}

/* --- the engine -------------------------------------------------------------- */
enum { NP = 400, HIT = 384, GEN = 6 };

typedef struct out {
    int tok[GEN], n, cached, done, finish;
} out;

static void on_ev(const engine_event *ev, void *user) {
    out *o = user;
    if (ev->token >= 0 && o->n < GEN) o->tok[o->n++] = ev->token;
    if (ev->finish != ENGINE_FINISH_NONE) {
        o->cached = ev->usage.cached_tokens;
        o->finish = ev->finish;
        __atomic_store_n(&o->done, 1, __ATOMIC_SEQ_CST);
    }
}

static engine *new_engine(model *m, kvs *st) {
    engine_opts eo = {.kv_blocks = 16, .step_tokens = 96, .max_running = 4, .kv_store = st};
    di_err err;
    engine *e = engine_create(m, NULL, &eo, &err);
    if (!e) fprintf(stderr, "engine_create: %s\n", err.msg);
    return e;
}

static uint64_t submit(engine *e, const int *p, int n, int gen, out *o) {
    memset(o, 0, sizeof *o);
    engine_request q = {.prompt = p,
                        .n_prompt = n,
                        .stop = {.max_tokens = gen, .ignore_eos = true},
                        .on_event = on_ev,
                        .user = o};
    di_err err;
    uint64_t id = engine_submit(e, &q, &err);
    if (!id) fprintf(stderr, "engine_submit: %s\n", err.msg);
    return id;
}

static bool wait_done(out *o, int ms) {
    for (int i = 0; i < ms && !__atomic_load_n(&o->done, __ATOMIC_SEQ_CST); i++) usleep(1000);
    return __atomic_load_n(&o->done, __ATOMIC_SEQ_CST);
}

TEST(kvstore_async_engine_stalled_fetch_cancel_corrupt) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/llama3-tiny", harness_model_dir());
    if (access(dir, R_OK)) return;
    di_err err;
    model *m = model_load(dir, &(model_opts){.dtype = MODEL_DTYPE_F32, .threads = 1}, &err);
    CHECKF(m, "%s", err.msg);
    int V = model_get_info(m)->vocab_size;
    static int p[NP], other[20];
    for (int i = 0; i < NP; i++) p[i] = (i * 7919 + 13) % V;
    for (int i = 0; i < 20; i++) other[i] = (i * 31 + 5) % V;
    char *sdir = kvt_tmpdir();
    static out o1, oa, ob;

    /* Computed once, three full blocks persisted. */
    kvs *st = engine_kv_store_open(m, dir, "f32", sdir, NULL, &err);
    CHECKF(st, "%s", err.msg);
    engine *e = new_engine(m, st);
    CHECK(e && submit(e, p, NP, GEN, &o1));
    engine_wait_idle(e);
    engine_free(e);
    kvs_close(st);
    CHECK(o1.done && o1.n == GEN && o1.cached == 0);

    /* Restart with every read stalled: the store-hit request waits aside
     * while a later request is admitted, computed and finished. */
    gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0};
    kvs_opts ko = {.read_hook = gate_hook, .read_hook_ctx = &g};
    st = engine_kv_store_open(m, dir, "f32", sdir, &ko, &err);
    CHECKF(st, "%s", err.msg);
    e = new_engine(m, st);
    CHECK(e && submit(e, p, NP, GEN, &oa));
    CHECK(gate_wait_entered(&g, 1));
    CHECK(submit(e, other, 20, 4, &ob));
    CHECKF(wait_done(&ob, 30000), "a stalled store fetch blocked another request");
    CHECK(ob.n == 4 && !__atomic_load_n(&oa.done, __ATOMIC_SEQ_CST) && oa.n == 0);
    gate_set(&g, true);
    engine_wait_idle(e);
    /* Layer-by-layer swap-in during its first pass: same greedy output. */
    CHECKF(oa.done && oa.cached == HIT, "cached %d", oa.cached);
    CHECK(!memcmp(oa.tok, o1.tok, sizeof o1.tok));
    engine_stats es = engine_get_stats(e);
    CHECK(es.kv_store_hit_tokens == HIT && es.kv_store.blocks_read == HIT / 128);
    engine_free(e);

    /* Cancelled while its reads are stalled: ends at once, blocks released. */
    gate_set(&g, false);
    e = new_engine(m, st);
    CHECK(e);
    uint64_t id = submit(e, p, NP, GEN, &oa);
    CHECK(gate_wait_entered(&g, 1));
    engine_cancel(e, id);
    CHECKF(wait_done(&oa, 10000), "cancel waited for a stalled fetch");
    CHECK(oa.finish == ENGINE_FINISH_CANCELLED && oa.n == 0);
    engine_wait_idle(e);
    es = engine_get_stats(e);
    CHECKF(es.blocks_used == 0 && es.waiting == 0, "%d blocks used", es.blocks_used);
    gate_set(&g, true);
    engine_free(e);

    /* Block 1 of 3 corrupt: 128 tokens from the store, the rest computed,
     * the greedy output unchanged. */
    char path[4200];
    uint64_t keys[HIT / 128];
    bm_chain_keys(p, HIT, keys);
    kvs_file_path(path, sizeof path, kvs_dir(st), keys[1]);
    FILE *fp = fopen(path, "r+b");
    CHECK(fp && fseek(fp, KVS_PAYLOAD_OFF + 64, SEEK_SET) == 0);
    int c = fgetc(fp);
    fseek(fp, KVS_PAYLOAD_OFF + 64, SEEK_SET);
    fputc(c ^ 0x33, fp);
    fclose(fp);
    e = new_engine(m, st);
    CHECK(e && submit(e, p, NP, GEN, &oa));
    engine_wait_idle(e);
    CHECKF(oa.done && oa.cached == 128, "cached %d after a corrupt block 1", oa.cached);
    CHECK(!memcmp(oa.tok, o1.tok, sizeof o1.tok));
    engine_free(e);
    kvs_close(st);
    kvt_rmdir(sdir);
    model_free(m);
}
