/* test_engine.c — the engine end to end on a deterministic fake model.
 *
 * The fake model keeps a real paged KV cache: each position stores a hash of
 * (token, position) in its block, and the logits after a token are a hash of
 * every entry the sequence's block table reaches. A wrong block table, a
 * missed copy-on-write, a stale prefix block or a bad resume changes the
 * output, so comparing with a direct computation over the token list checks
 * the whole paging machinery. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/engine.h"
#include "engine/grammar.h"
#include "engine/json_grammar.h"
#include "harness.h"

enum { FV = 50 }; /* fake vocabulary */

typedef struct fake {
    int n_blocks;
    uint64_t *kv; /* n_blocks * 128 entries */
    int *free_ids, n_free;
    bool copy; /* offer copy_block */
    int max_batch;
    int max_scored; /* rows of every-token logits in one pass, at most */
    long long forwards;
    atomic_int hold; /* forwards wait while set: a test queues work before the first step */
    /* Overlap gate: while set, the k-th pass does not return before the
     * engine has planned k steps ahead (or a 5 s timeout, counted). */
    _Atomic(engine *) gate;
    long long gate_passes;
    int gate_timeouts;
} fake;

static uint64_t entry(int token, int pos) {
    return XXH3_64bits_withSeed(&token, sizeof token, (uint64_t)pos + 1);
}

static void logits_from(uint64_t state, float *lg) {
    for (int v = 0; v < FV; v++) {
        uint64_t h = XXH3_64bits_withSeed(&v, sizeof v, state);
        lg[v] = (float)(h >> 44) / 4096.0f; /* 0..256, distinct enough for a clear argmax */
    }
}

/* The reference: greedy continuation computed straight from the tokens. */
static int ref_next(const int *tokens, int n) {
    uint64_t st = 0;
    for (int i = 0; i < n; i++) st = XXH3_64bits_withSeed(&(uint64_t){entry(tokens[i], i)}, 8, st);
    float lg[FV];
    logits_from(st, lg);
    int best = 0;
    for (int v = 1; v < FV; v++)
        if (lg[v] > lg[best]) best = v;
    return best;
}

static int fake_kv_alloc(void *c) {
    fake *f = c;
    return f->n_free ? f->free_ids[--f->n_free] : -1;
}
static void fake_kv_release(void *c, int b) {
    fake *f = c;
    f->free_ids[f->n_free++] = b;
}
static void fake_seq_init(void *c, model_seq *s) {
    memset(s, 0, sizeof *s);
}
static void fake_seq_free(void *c, model_seq *s) {}
static int fake_copy(void *c, int dst, int src, di_err *err) {
    fake *f = c;
    memcpy(f->kv + (size_t)dst * 128, f->kv + (size_t)src * 128, sizeof(uint64_t) * 128);
    return 0;
}
static void *fake_block_data(void *c, int block) {
    return ((fake *)c)->kv + (size_t)block * 128;
}
static int fake_forward(void *c, model_batch_seq *b, int n, di_err *err) {
    fake *f = c;
    while (atomic_load(&f->hold)) usleep(200);
    f->forwards++;
    engine *g = atomic_load(&f->gate);
    if (g) {
        long long want = ++f->gate_passes;
        int t = 0;
        while (engine_get_stats(g).plans_ahead < want && t < 10000) {
            usleep(500);
            t++;
        }
        if (t == 10000) f->gate_timeouts++;
    }
    if (n > f->max_batch) f->max_batch = n;
    int scored = 0;
    for (int i = 0; i < n; i++) scored += b[i].all_logits ? b[i].n_tokens : 0;
    if (scored > f->max_scored) f->max_scored = scored;
    for (int i = 0; i < n; i++) {
        model_seq *s = b[i].seq;
        for (int j = 0; j < b[i].n_tokens; j++) {
            int pos = s->n_past + j;
            if (pos / 128 >= s->n_blocks)
                return di_errf(err, "fake: no block for position %d", pos);
            f->kv[(size_t)s->blocks[pos / 128] * 128 + pos % 128] = entry(b[i].tokens[j], pos);
        }
        int last = s->n_past + b[i].n_tokens;
        if (b[i].logits) { /* the last token's row, or every token's */
            int first = b[i].all_logits ? s->n_past : last - 1;
            uint64_t st = 0;
            for (int p = 0; p < last; p++) {
                st =
                    XXH3_64bits_withSeed(&f->kv[(size_t)s->blocks[p / 128] * 128 + p % 128], 8, st);
                if (p >= first) logits_from(st, b[i].logits + (size_t)(p - first) * FV);
            }
        }
        s->n_past = last;
    }
    return 0;
}

static fake *fake_new(int n_blocks, bool copy) {
    fake *f = calloc(1, sizeof *f);
    f->n_blocks = n_blocks;
    f->kv = calloc((size_t)n_blocks * 128, sizeof(uint64_t));
    f->free_ids = malloc(sizeof(int) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++) f->free_ids[i] = n_blocks - 1 - i;
    f->n_free = n_blocks;
    f->copy = copy;
    return f;
}
static void fake_free(fake *f) {
    free(f->kv);
    free(f->free_ids);
    free(f);
}

/* Detokenizer: token v is the letter 'a' + v % 26, or with json_alpha set
 * json_alpha[v % N_JSON_ALPHA]. */
static const char *const JSON_ALPHA[] = {"{", "}",   "[",  "]",    "\"",     ":",   ",",
                                         " ", "a",   "1",  "true", "\"k\":", "0.5", "null",
                                         "-", "\"}", "]}", "k",    "x"};
#define N_JSON_ALPHA ((int)(sizeof JSON_ALPHA / sizeof *JSON_ALPHA))
static bool json_alpha;
static void *fd_open(void *c) {
    return malloc(8);
}
static const char *fd_push(void *s, int id, size_t *len) {
    char *b = s;
    if (json_alpha) {
        snprintf(b, 8, "%s", JSON_ALPHA[id % N_JSON_ALPHA]);
        *len = strlen(b);
        return b;
    }
    b[0] = (char)('a' + id % 26);
    b[1] = 0;
    *len = 1;
    return b;
}
static char *fd_token_bytes(void *c, int id, size_t *len) {
    char *b = malloc(8);
    fd_push(b, id, len);
    return b;
}
static const char *fd_flush(void *s, size_t *len) {
    *len = 0;
    return "";
}
static void fd_close(void *s) {
    free(s);
}

static engine *fake_engine_opts(fake *f, bool swa, const engine_opts *o) {
    engine_runner r = {.ctx = f,
                       .vocab = FV,
                       .max_context = 4096,
                       .eos_ids = {0},
                       .n_eos = 1,
                       .has_swa = swa,
                       .kv_alloc = fake_kv_alloc,
                       .kv_release = fake_kv_release,
                       .seq_init = fake_seq_init,
                       .seq_free = fake_seq_free,
                       .forward = fake_forward,
                       .copy_block = f->copy ? fake_copy : NULL,
                       .kv_block_data = fake_block_data,
                       .kv_block_bytes = 128 * sizeof(uint64_t)};
    engine_detok d = {.open = fd_open,
                      .push = fd_push,
                      .flush = fd_flush,
                      .close = fd_close,
                      .token_bytes = fd_token_bytes};
    di_err err;
    return engine_create_runner(&r, &d, o, &err);
}

static engine *fake_engine(fake *f, int budget, int max_running, bool swa) {
    return fake_engine_opts(f, swa,
                            &(engine_opts){.step_tokens = budget, .max_running = max_running});
}

/* --- collecting events ---------------------------------------------------- */
enum { MAXOUT = 600 };
typedef struct result {
    int tokens[ENGINE_MAX_N][MAXOUT];
    int n[ENGINE_MAX_N];
    char text[ENGINE_MAX_N][MAXOUT + 1];
    size_t text_len[ENGINE_MAX_N];
    engine_finish finish[ENGINE_MAX_N];
    engine_usage usage[ENGINE_MAX_N];
    int n_finished, n_events;
    samp_out plp[ENGINE_MAX_N][MAXOUT]; /* prompt logprobs as each branch got them */
    int n_plp[ENGINE_MAX_N], plp_events[ENGINE_MAX_N];
    float logprob_sum;
    int top_seen;
    bool bad;
} result;

static void collect(const engine_event *ev, void *user) {
    result *r = user;
    int b = ev->index;
    r->n_events++;
    if (ev->token >= 0 && r->n[b] < MAXOUT) r->tokens[b][r->n[b]++] = ev->token;
    if (r->text_len[b] + ev->text_len <= MAXOUT) {
        memcpy(r->text[b] + r->text_len[b], ev->text, ev->text_len);
        r->text_len[b] += ev->text_len;
    }
    if (ev->prompt_lp) {
        if (r->n[b] != (ev->token >= 0)) r->bad = true; /* not the branch's first event */
        r->plp_events[b]++;
        r->n_plp[b] = ev->n_prompt_lp < MAXOUT ? ev->n_prompt_lp : MAXOUT;
        memcpy(r->plp[b], ev->prompt_lp, sizeof(samp_out) * (size_t)r->n_plp[b]);
    }
    if (ev->has_logprobs) {
        r->logprob_sum += ev->logprob;
        r->top_seen = ev->n_top;
        for (int i = 1; i < ev->n_top; i++)
            if (ev->top[i].logprob > ev->top[i - 1].logprob) r->bad = true;
    }
    if (ev->finish != ENGINE_FINISH_NONE) {
        if (r->finish[b] != ENGINE_FINISH_NONE) r->bad = true; /* two final events */
        r->finish[b] = ev->finish;
        r->usage[b] = ev->usage;
        r->n_finished++;
    }
}

static void make_prompt(int *p, int n, int seed) {
    for (int i = 0; i < n; i++) p[i] = 1 + (seed * 131 + i * 17 + i * i) % (FV - 1);
}

static uint64_t submit(engine *e, const int *p, int np, int max_tokens, int n, result *res) {
    engine_request q = {.prompt = p,
                        .n_prompt = np,
                        .stop = {.max_tokens = max_tokens, .ignore_eos = true},
                        .n = n,
                        .on_event = collect,
                        .user = res};
    di_err err;
    return engine_submit(e, &q, &err);
}

/* Checks a greedy branch against the reference computed from the tokens. */
static bool matches_ref(const int *prompt, int np, const int *out, int n) {
    int *all = malloc(sizeof(int) * (size_t)(np + n));
    memcpy(all, prompt, sizeof(int) * (size_t)np);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        ok = ref_next(all, np + i) == out[i];
        all[np + i] = out[i];
    }
    free(all);
    return ok;
}

TEST(engine_fake_batch_equals_solo_and_reference) {
    enum { NR = 12 };
    static int prompts[NR][400];
    static result together[NR], alone;
    int lens[NR];
    fake *f = fake_new(64, true);
    engine *e = fake_engine(f, 100, 8, false);
    CHECK(e);
    memset(together, 0, sizeof together);
    atomic_store(&f->hold, 1);
    for (int i = 0; i < NR; i++) {
        lens[i] = 5 + (i * 53) % 390;
        make_prompt(prompts[i], lens[i], i);
        CHECK(submit(e, prompts[i], lens[i], 20 + i * 3, 1, &together[i]) > 0);
    }
    atomic_store(&f->hold, 0);
    engine_wait_idle(e);
    CHECK(f->max_batch > 1);
    for (int i = 0; i < NR; i++) {
        CHECK(together[i].finish[0] == ENGINE_FINISH_LENGTH && together[i].n[0] == 20 + i * 3);
        CHECKF(matches_ref(prompts[i], lens[i], together[i].tokens[0], together[i].n[0]),
               "request %d differs from the reference", i);
        memset(&alone, 0, sizeof alone);
        submit(e, prompts[i], lens[i], 20 + i * 3, 1, &alone);
        engine_wait_idle(e);
        CHECK(!memcmp(alone.tokens[0], together[i].tokens[0], sizeof(int) * (size_t)alone.n[0]));
        CHECK(together[i].usage[0].prompt_tokens == lens[i]);
        CHECK(together[i].usage[0].completion_tokens == 20 + i * 3);
    }
    engine_stats s = engine_get_stats(e);
    CHECK(s.running == 0 && s.waiting == 0 && s.blocks_used == 0 && s.requests_done == 2 * NR);
    engine_free(e);
    CHECK(f->n_free == 64);
    fake_free(f);
}

TEST(engine_fake_prefix_hits) {
    static int p[700];
    static result a, b;
    fake *f = fake_new(32, true);
    engine *e = fake_engine(f, 256, 8, false);
    make_prompt(p, 700, 9);
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    submit(e, p, 600, 10, 1, &a);
    engine_wait_idle(e);
    CHECK(a.usage[0].cached_tokens == 0);
    /* The same prefix, a longer prompt: the 4 full blocks are cached. */
    submit(e, p, 700, 10, 1, &b);
    engine_wait_idle(e);
    CHECKF(b.usage[0].cached_tokens == 512, "cached %d", b.usage[0].cached_tokens);
    CHECK(matches_ref(p, 700, b.tokens[0], b.n[0]));
    /* A fully cached prompt still recomputes its last block for logits. */
    memset(&b, 0, sizeof b);
    submit(e, p, 600, 10, 1, &b);
    engine_wait_idle(e);
    CHECK(b.usage[0].cached_tokens == 512);
    CHECK(!memcmp(a.tokens[0], b.tokens[0], sizeof(int) * 10));
    engine_stats s = engine_get_stats(e);
    CHECK(s.prefix_hit_tokens == 1024 && s.blocks_used == 0 && s.blocks_cached > 0);
    engine_free(e);
    CHECK(f->n_free == 32);
    fake_free(f);
}

/* A pool too small for everyone at once: sequences get preempted, resume
 * (by recomputation, or from swap space of swap_blocks blocks), and still
 * produce the reference output. *computed: the tokens computed. */
static void preempt_case(bool copy, int swap_blocks, long long *computed) {
    enum { NR = 10 };
    static int prompts[NR][200];
    static result res[NR];
    fake *f = fake_new(12, copy);
    engine *e = fake_engine_opts(
        f, false,
        &(engine_opts){.step_tokens = 512,
                       .max_running = 16,
                       .swap_bytes = (size_t)swap_blocks * 128 * sizeof(uint64_t)});
    memset(res, 0, sizeof res);
    atomic_store(&f->hold, 1);
    for (int i = 0; i < NR; i++) {
        make_prompt(prompts[i], 100 + i * 10, 100 + i);
        submit(e, prompts[i], 100 + i * 10, 150, 1, &res[i]);
    }
    atomic_store(&f->hold, 0);
    engine_wait_idle(e);
    engine_stats s = engine_get_stats(e);
    for (int i = 0; i < NR; i++) {
        CHECKF(res[i].n[0] == 150 && res[i].finish[0] == ENGINE_FINISH_LENGTH, "req %d: %d tokens",
               i, res[i].n[0]);
        CHECKF(matches_ref(prompts[i], 100 + i * 10, res[i].tokens[0], 150), "req %d differs", i);
    }
    CHECKF(s.preemptions > 0, "no preemption happened");
    CHECK(s.blocks_used == 0);
    if (swap_blocks >= 12) /* room for any sequence's blocks: every preemption swaps */
        CHECKF(s.swap_outs == s.preemptions, "swap-outs %lld of %lld preemptions", s.swap_outs,
               s.preemptions);
    CHECKF(swap_blocks ? s.swap_outs > 0 : s.swap_outs == 0, "swap-outs %lld", s.swap_outs);
    CHECKF(s.swap_ins == s.swap_outs && s.swap_bytes_used == 0, "swap-ins %lld of %lld, %zu held",
           s.swap_ins, s.swap_outs, s.swap_bytes_used);
    engine_free(e);
    CHECK(f->n_free == 12);
    fake_free(f);
    *computed = s.computed_tokens;
}

TEST(engine_fake_preemption_resume) {
    long long n;
    preempt_case(true, 0, &n);
}

/* Swap space: preempted sequences' KV goes to host memory and back, so
 * they resume without recomputing their tokens (each of the 10 requests
 * puts its prompt and 149 of its 150 tokens through the model once: 1,450 +
 * 1,490); with room for
 * only a few blocks, some preemptions swap and the rest recompute. */
TEST(engine_fake_preemption_swap) {
    long long recompute = 0, swap = 0, some = 0;
    preempt_case(true, 0, &recompute);
    preempt_case(true, 64, &swap);
    CHECKF(swap == 1450 + 1490 && recompute > swap, "tokens computed: %lld with swap, %lld without",
           swap, recompute);
    preempt_case(false, 3, &some);
    CHECKF(some > swap, "tokens computed with 3 blocks of swap space: %lld", some);
    /* Swap space smaller than a block is refused, not silently unused. */
    fake *f = fake_new(4, true);
    CHECK(!fake_engine_opts(f, false, &(engine_opts){.step_tokens = 64, .swap_bytes = 1000}));
    CHECK(f->n_free == 4);
    fake_free(f);
}

/* n > 1: branches share the prompt blocks, each is a correct continuation
 * (sampled with its own generator), both with a block-copying runner and
 * with copy-on-write by recomputation. */
static void fork_case(bool copy) {
    static int p[300];
    static result r;
    fake *f = fake_new(40, copy);
    engine *e = fake_engine(f, 1024, 16, false);
    make_prompt(p, 300, 3);
    memset(&r, 0, sizeof r);
    engine_request q = {.prompt = p,
                        .n_prompt = 300,
                        .sampling = {.temperature = 1.0f, .seed = 42},
                        .stop = {.max_tokens = 40, .ignore_eos = true},
                        .n = 4,
                        .on_event = collect,
                        .user = &r};
    di_err err;
    CHECK(engine_submit(e, &q, &err) > 0);
    /* Blocks used while the branches run: 2 shared full blocks + 4 private tails. */
    int peak = 0;
    for (int i = 0; i < 100000; i++) {
        engine_stats s = engine_get_stats(e);
        if (s.blocks_used > peak) peak = s.blocks_used;
        if (s.requests_done > 0) break;
    }
    engine_wait_idle(e);
    CHECKF(peak <= 6, "peak blocks %d (4 unshared copies would need 12)", peak);
    CHECK(r.n_finished == 4);
    int distinct = 0;
    for (int b = 0; b < 4; b++) {
        CHECK(r.n[b] == 40 && r.usage[b].completion_tokens == 40);
        if (b > 0 && memcmp(r.tokens[b], r.tokens[0], sizeof(int) * 40)) distinct++;
    }
    CHECK(distinct > 0);
    /* Every branch must be what the same seed gives when run alone. */
    static result again;
    memset(&again, 0, sizeof again);
    q.user = &again;
    engine_submit(e, &q, &err);
    engine_wait_idle(e);
    for (int b = 0; b < 4; b++) CHECK(!memcmp(again.tokens[b], r.tokens[b], sizeof(int) * 40));
    /* Greedy branches are all the reference. */
    memset(&r, 0, sizeof r);
    q.sampling = (samp_params){0};
    q.user = &r;
    engine_submit(e, &q, &err);
    engine_wait_idle(e);
    for (int b = 0; b < 4; b++) CHECK(matches_ref(p, 300, r.tokens[b], 40));
    engine_stats s = engine_get_stats(e);
    CHECK(s.blocks_used == 0 && s.cows >= 3);
    engine_free(e);
    CHECK(f->n_free == 40);
    fake_free(f);
}

TEST(engine_fake_fork_copy) {
    fork_case(true);
}
TEST(engine_fake_fork_recompute) {
    fork_case(false);
}
/* Swap space with prompts that share two blocks: a preempted sequence
 * leaves the blocks running ones share to the prefix cache, resumes sharing
 * them again (or, evicted meanwhile, recomputes), and every output is the
 * reference. */
TEST(engine_fake_preemption_swap_shared_prefix) {
    enum { NR = 8, NP = 300, GEN = 100 };
    static int prompts[NR][NP];
    static result res[NR];
    fake *f = fake_new(14, true);
    engine *e = fake_engine_opts(
        f, false,
        &(engine_opts){.step_tokens = 512, .max_running = 16, .swap_bytes = 64 * 128 * 8});
    memset(res, 0, sizeof res);
    atomic_store(&f->hold, 1);
    for (int i = 0; i < NR; i++) {
        make_prompt(prompts[i], NP, 7);
        make_prompt(prompts[i] + 256, NP - 256, 200 + i);
        submit(e, prompts[i], NP, GEN, 1, &res[i]);
    }
    atomic_store(&f->hold, 0);
    engine_wait_idle(e);
    engine_stats s = engine_get_stats(e);
    for (int i = 0; i < NR; i++)
        CHECKF(res[i].n[0] == GEN && matches_ref(prompts[i], NP, res[i].tokens[0], GEN),
               "req %d differs", i);
    CHECKF(s.swap_outs > 0 && s.swap_ins <= s.swap_outs && s.swap_bytes_used == 0 &&
               s.blocks_used == 0,
           "swap-outs %lld, swap-ins %lld", s.swap_outs, s.swap_ins);
    engine_free(e);
    CHECK(f->n_free == 14);
    fake_free(f);
}

TEST(engine_fake_preemption_recompute_cow) {
    long long n;
    preempt_case(false, 0, &n);
}

TEST(engine_fake_stop_conditions) {
    static int p[50];
    static result r;
    fake *f = fake_new(8, true);
    engine *e = fake_engine(f, 256, 8, false);
    make_prompt(p, 50, 1);
    /* Find the greedy text first, then stop on a string spanning tokens 5..7. */
    memset(&r, 0, sizeof r);
    submit(e, p, 50, 20, 1, &r);
    engine_wait_idle(e);
    char full[32];
    memcpy(full, r.text[0], 20);
    full[20] = 0;
    CHECK(strlen(full) == 20);
    char stop_s[4] = {full[5], full[6], full[7], 0};
    const char *strs[1] = {stop_s};
    memset(&r, 0, sizeof r);
    engine_request q = {.prompt = p,
                        .n_prompt = 50,
                        .stop = {.strs = strs, .n_strs = 1, .max_tokens = 20, .ignore_eos = true},
                        .on_event = collect,
                        .user = &r};
    di_err err;
    engine_submit(e, &q, &err);
    engine_wait_idle(e);
    char *first = strstr(full, stop_s);
    CHECK(first);
    size_t want = (size_t)(first - full);
    CHECKF(r.finish[0] == ENGINE_FINISH_STOP && r.text_len[0] == want, "len %zu want %zu",
           r.text_len[0], want);
    CHECK(!memcmp(r.text[0], full, want));
    /* A stop token id ends the stream with that token, not in the text. */
    int stop_id = r.tokens[0][3];
    memset(&r, 0, sizeof r);
    q.stop = (stop_params){.ids = &stop_id, .n_ids = 1, .max_tokens = 20, .ignore_eos = true};
    engine_submit(e, &q, &err);
    engine_wait_idle(e);
    int k = 0;
    while (k < 20 && r.tokens[0][k] != stop_id) k++;
    CHECK(r.finish[0] == ENGINE_FINISH_STOP && r.n[0] == k + 1 && r.text_len[0] == (size_t)k);
    /* min_tokens: the stop id is held off until then (the stream goes
     * elsewhere at token k), and so are the EOS ids. */
    memset(&r, 0, sizeof r);
    q.stop = (stop_params){.ids = &stop_id, .n_ids = 1, .max_tokens = 20, .ignore_eos = true};
    q.sampling = (samp_params){.min_tokens = k + 3};
    CHECK(engine_submit(e, &q, &err));
    engine_wait_idle(e);
    CHECK(r.n[0] > k + 3 && r.tokens[0][k] != stop_id);
    for (int t = 0; t < k + 3; t++) CHECK(r.tokens[0][t] != stop_id);
    memset(&r, 0, sizeof r);
    q.stop = (stop_params){.max_tokens = 20};
    q.sampling = (samp_params){.min_tokens = 20};
    CHECK(engine_submit(e, &q, &err));
    engine_wait_idle(e);
    CHECK(r.finish[0] == ENGINE_FINISH_LENGTH && r.n[0] == 20);
    for (int t = 0; t < 20; t++) CHECK(r.tokens[0][t] != 0);
    /* Logprobs: top list sorted, chosen greedy token is the top one. */
    memset(&r, 0, sizeof r);
    q.stop = (stop_params){.max_tokens = 5, .ignore_eos = true};
    q.sampling = (samp_params){.logprobs = true, .top_logprobs = 20};
    engine_submit(e, &q, &err);
    engine_wait_idle(e);
    CHECK(r.top_seen == 20 && !r.bad && r.logprob_sum < 0);
    /* Bad requests are refused with a message. */
    q.sampling.top_logprobs = 21;
    CHECK(engine_submit(e, &q, &err) == 0 && strstr(err.msg, "top_logprobs"));
    q.sampling.top_logprobs = 0;
    int badp[1] = {FV + 3};
    q.prompt = badp;
    q.n_prompt = 1;
    CHECK(engine_submit(e, &q, &err) == 0 && strstr(err.msg, "vocabulary"));
    engine_free(e);
    CHECK(f->n_free == 8);
    fake_free(f);
}

/* --- 10,000 random requests with random cancellations --------------------- */
typedef struct stress {
    pthread_mutex_t mu;
    int finished, cancelled;
    long long tokens;
} stress;

static void stress_cb(const engine_event *ev, void *user) {
    stress *s = user;
    pthread_mutex_lock(&s->mu);
    if (ev->token >= 0) s->tokens++;
    if (ev->finish != ENGINE_FINISH_NONE) {
        s->finished++;
        if (ev->finish == ENGINE_FINISH_CANCELLED) s->cancelled++;
    }
    pthread_mutex_unlock(&s->mu);
}

/* 10,000 random requests (shared prefixes, n > 1, priorities, random
 * cancellations) through a 48-block pool, preempting by recomputation or
 * with swap_blocks blocks of swap space: everything finishes and the pool
 * (and the swap space) is whole again. */
static void stress_case(int swap_blocks) {
    enum { NR = 10000 };
    fake *f = fake_new(48, false);
    engine *e = fake_engine_opts(
        f, false,
        &(engine_opts){.step_tokens = 256,
                       .max_running = 64,
                       .swap_bytes = (size_t)swap_blocks * 128 * sizeof(uint64_t)});
    stress st = {.mu = PTHREAD_MUTEX_INITIALIZER};
    unsigned rng = 777;
#define SR() harness_lcg(&rng)
    int p[600];
    uint64_t *ids = malloc(sizeof(uint64_t) * NR);
    int expected_branches = 0;
    for (int i = 0; i < NR; i++) {
        int np = 1 + (int)(SR() % (SR() % 8 == 0 ? 590 : 60));
        int fam = (int)(SR() % 6); /* shared prefixes */
        make_prompt(p, np, fam);
        if (SR() % 3 == 0) p[np - 1] = (int)(SR() % FV);
        int n = SR() % 10 == 0 ? 1 + (int)(SR() % 4) : 1;
        engine_request q = {.prompt = p,
                            .n_prompt = np,
                            .sampling = {.temperature = SR() % 2 ? 0.8f : 0, .seed = i},
                            .stop = {.max_tokens = 1 + (int)(SR() % 24), .ignore_eos = SR() % 2},
                            .n = n,
                            .priority = (int)(SR() % 3),
                            .on_event = stress_cb,
                            .user = &st};
        di_err err;
        ids[i] = engine_submit(e, &q, &err);
        CHECKF(ids[i] > 0, "submit %d: %.200s", i, err.msg);
        expected_branches += n;
        if (SR() % 4 == 0) engine_cancel(e, ids[SR() % (unsigned)(i + 1)]);
        if (i % 500 == 499) engine_wait_idle(e);
    }
    engine_wait_idle(e);
    engine_stats s = engine_get_stats(e);
    CHECKF(st.finished == expected_branches, "finished %d of %d", st.finished, expected_branches);
    CHECK(s.running == 0 && s.waiting == 0 && s.blocks_used == 0);
    CHECK(s.blocks_free + s.blocks_cached == 48);
    CHECK(st.cancelled > 0 && s.prefix_hit_tokens > 0);
    CHECKF(s.plans_ahead > 0 && s.preemptions > 0, "plans ahead %lld, preemptions %lld",
           s.plans_ahead, s.preemptions);
    /* swapped sequences cancelled while they waited never come back in */
    CHECKF((swap_blocks ? s.swap_outs > 0 : s.swap_outs == 0) && s.swap_ins <= s.swap_outs &&
               s.swap_bytes_used == 0,
           "swap-outs %lld, swap-ins %lld, %zu bytes held", s.swap_outs, s.swap_ins,
           s.swap_bytes_used);
    engine_free(e);
    CHECK(f->n_free == 48);
    fake_free(f);
    free(ids);
}

/* A sequence that would outgrow the whole KV pool ends there with "length",
 * its tokens delivered (it was an error); so do two that each would, one
 * preempted while the other runs. */
TEST(engine_fake_sequence_filling_the_pool_ends_at_length) {
    static int p[2][50];
    static result r[2];
    fake *f = fake_new(3, true);
    engine *e = fake_engine(f, 256, 8, false);
    memset(r, 0, sizeof r);
    make_prompt(p[0], 50, 7);
    make_prompt(p[1], 50, 8);
    CHECK(submit(e, p[0], 50, 1000, 1, &r[0]));
    engine_wait_idle(e);
    CHECKF(r[0].finish[0] == ENGINE_FINISH_LENGTH && r[0].n[0] == 3 * 128 - 50,
           "finish %d after %d tokens", (int)r[0].finish[0], r[0].n[0]);
    CHECK(matches_ref(p[0], 50, r[0].tokens[0], r[0].n[0]));
    memset(r, 0, sizeof r);
    for (int i = 0; i < 2; i++) CHECK(submit(e, p[i], 50, 1000, 1, &r[i]));
    engine_wait_idle(e);
    for (int i = 0; i < 2; i++) {
        CHECK(r[i].finish[0] == ENGINE_FINISH_LENGTH && r[i].n[0] == 3 * 128 - 50);
        CHECK(matches_ref(p[i], 50, r[i].tokens[0], r[i].n[0]));
    }
    engine_free(e);
    CHECK(f->n_free == 3);
    fake_free(f);
}

/* Checks prompt logprobs against the reference: entry i is token i's
 * log-softmax under the logits of tokens [0, i), with the top k. */
static bool plp_matches_ref(const int *prompt, int np, const samp_out *plp, int n, int k) {
    if (n != np || plp[0].token != prompt[0] || !isnan(plp[0].logprob) || plp[0].n_top)
        return false;
    uint64_t st = 0;
    for (int i = 1; i < np; i++) {
        st = XXH3_64bits_withSeed(&(uint64_t){entry(prompt[i - 1], i - 1)}, 8, st);
        float lg[FV];
        logits_from(st, lg);
        double sum = 0, mx = lg[0];
        for (int v = 1; v < FV; v++) mx = lg[v] > mx ? lg[v] : mx;
        for (int v = 0; v < FV; v++) sum += exp(lg[v] - mx);
        double lse = mx + log(sum);
        const samp_out *o = &plp[i];
        if (o->token != prompt[i] || fabs(o->logprob - (lg[prompt[i]] - lse)) > 1e-4) return false;
        int rank = 1;
        for (int v = 0; v < FV; v++) rank += lg[v] > lg[prompt[i]];
        if (o->rank != rank) return false;
        if (o->n_top != k) return false;
        for (int j = 0; j < k; j++) {
            int above = 0; /* the j-th best: exactly j logits above it */
            for (int v = 0; v < FV; v++) above += lg[v] > lg[o->top[j].id];
            if (above != j || fabs(o->top[j].logprob - (lg[o->top[j].id] - lse)) > 1e-4)
                return false;
        }
    }
    return true;
}

/* Prompt logprobs: every prompt token scored (in chunks cut by the rows a
 * step may hold, beside other requests, with the prompt in the
 * prefix cache already, which must not be used), on each branch's first
 * event once; the continuation is unchanged; prompt_only generates nothing. */
TEST(engine_fake_prompt_logprobs) {
    static int p[3][300];
    static result warm, r[3];
    fake *f = fake_new(64, true);
    engine *e = fake_engine(f, 512, 8, false);
    for (int i = 0; i < 3; i++) make_prompt(p[i], 300, 40 + i);
    memset(&warm, 0, sizeof warm);
    CHECK(submit(e, p[0], 300, 4, 1, &warm));
    engine_wait_idle(e); /* p[0] is in the prefix cache now */
    memset(r, 0, sizeof r);
    atomic_store(&f->hold, 1);
    for (int i = 0; i < 3; i++) {
        engine_request q = {.prompt = p[i],
                            .n_prompt = 300,
                            .stop = {.max_tokens = 6, .ignore_eos = true},
                            .n = i == 0 ? 2 : 1,
                            .prompt_logprobs = i != 2,
                            .prompt_top = 3,
                            .prompt_only = i == 1,
                            .on_event = collect,
                            .user = &r[i]};
        di_err err;
        CHECKF(engine_submit(e, &q, &err), "%s", err.msg);
    }
    atomic_store(&f->hold, 0);
    engine_wait_idle(e);
    /* the two scored prompts share the step's rows (the budget would take more) */
    CHECKF(f->max_scored == ENGINE_SCORE_CHUNK, "%d rows", f->max_scored);
    for (int b = 0; b < 2; b++) { /* scored, and the continuation as without */
        CHECK(!r[0].bad && r[0].plp_events[b] == 1);
        CHECK(plp_matches_ref(p[0], 300, r[0].plp[b], r[0].n_plp[b], 3));
        CHECK(r[0].finish[b] == ENGINE_FINISH_LENGTH && r[0].n[b] == 6);
        CHECK(!memcmp(r[0].tokens[b], warm.tokens[0], sizeof(int) * 4));
        CHECK(r[0].usage[b].cached_tokens == 0 && r[0].usage[b].completion_tokens == 6);
    }
    CHECK(r[1].plp_events[0] == 1 && plp_matches_ref(p[1], 300, r[1].plp[0], r[1].n_plp[0], 3));
    CHECK(r[1].finish[0] == ENGINE_FINISH_LENGTH && r[1].n[0] == 0 && r[1].text_len[0] == 0);
    CHECK(r[1].usage[0].completion_tokens == 0 && r[1].usage[0].prompt_tokens == 300);
    CHECK(r[2].plp_events[0] == 0 && matches_ref(p[2], 300, r[2].tokens[0], r[2].n[0]));
    engine_request bad = {
        .prompt = p[0], .n_prompt = 10, .prompt_logprobs = true, .prompt_top = 21};
    di_err err;
    CHECK(!engine_submit(e, &bad, &err) && strstr(err.msg, "prompt_top"));
    engine_free(e);
    CHECK(f->n_free == 64);
    /* Sliding-window runner without ring snapshots: n independent branches,
     * each scoring the prompt before its first event. */
    e = fake_engine(f, 64, 8, true);
    memset(r, 0, sizeof r);
    engine_request q = {.prompt = p[2],
                        .n_prompt = 300,
                        .stop = {.max_tokens = 3, .ignore_eos = true},
                        .n = 3,
                        .prompt_logprobs = true,
                        .on_event = collect,
                        .user = &r[0]};
    CHECKF(engine_submit(e, &q, &err), "%s", err.msg);
    engine_wait_idle(e);
    for (int b = 0; b < 3; b++)
        CHECK(r[0].plp_events[b] == 1 && plp_matches_ref(p[2], 300, r[0].plp[b], r[0].n_plp[b], 0));
    engine_free(e);
    CHECK(f->n_free == 64);
    fake_free(f);
}

/* Runs n JSON-constrained requests like q on the fake with the JSON
 * alphabet, request i from prompt seed + i with sampling seed i (and, with
 * vary, whatever else vary(&q, i) sets), into r[0..n); the pool must be
 * whole again after. */
static void run_json(engine_request q, int n, int seed, void (*vary)(engine_request *, int),
                     result *r) {
    static int p[8][20];
    fake *f = fake_new(64, true);
    json_alpha = true;
    engine *e = fake_engine(f, 256, 8, false);
    memset(r, 0, sizeof *r * (size_t)n);
    for (int i = 0; i < n; i++) {
        make_prompt(p[i], 20, seed + i);
        q.prompt = p[i], q.n_prompt = 20, q.json = true, q.on_event = collect, q.user = &r[i];
        q.sampling.seed = (uint64_t)i;
        if (vary) vary(&q, i);
        di_err err;
        CHECKF(engine_submit(e, &q, &err), "%s", err.msg);
    }
    engine_wait_idle(e);
    engine_request bad = q; /* a schema the decoder cannot hold is refused */
    bad.json_schema = "[1]";
    di_err err;
    CHECK(!engine_submit(e, &bad, &err) && strstr(err.msg, "json_schema"));
    engine_free(e);
    json_alpha = false;
    CHECK(f->n_free == 64);
    fake_free(f);
}

/* greedy first, then sampled (the fake's logits lie 0..256 apart: 50
 * spreads the draws); the last with n = 3 */
static void greedy_then_sampled(engine_request *q, int i) {
    q->sampling.temperature = i ? 50.0f : 0.0f;
    q->n = i == 3 ? 3 : 1;
}

/* JSON-constrained requests: every branch's text is a prefix of a JSON
 * object, and a branch that ends by EOS ends a whole one (jansson parses
 * it), sampled or greedy, alone or batched, n > 1 included. */
TEST(engine_fake_json_output_is_one_object) {
    static result r[4];
    run_json((engine_request){.stop = {.max_tokens = 300}}, 4, 3, greedy_then_sampled, r);
    int whole = 0;
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < (i == 3 ? 3 : 1); b++) {
            jg_state s;
            jg_init(&s);
            CHECKF(jg_feed(&s, r[i].text[b], r[i].text_len[b]), "not a JSON prefix: %.*s",
                   (int)r[i].text_len[b], r[i].text[b]);
            if (r[i].finish[b] != ENGINE_FINISH_STOP) continue;
            json_error_t je;
            json_t *j = json_loadb(r[i].text[b], r[i].text_len[b], 0, &je);
            CHECKF(j && json_is_object(j), "%.*s: %s", (int)r[i].text_len[b], r[i].text[b],
                   je.text);
            json_decref(j);
            whole++;
        }
    CHECKF(whole >= 3, "%d of 6 branches ended a whole object", whole);
}

/* A grammar (llama.cpp's JSON one, less the \\u escapes jansson can
 * refuse, and with no x in strings, which the JSON mask alone writes):
 * every branch's text is taken so far by a fresh matcher, and
 * each that ends by EOS is whole and parses as an object; greedy, sampled
 * and n = 3 (each branch its own matcher, freed with it). */
TEST(engine_fake_grammar_output_parses) {
    static const char *const json_gbnf =
        "root ::= object\n"
        "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
        "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? "
        "\"}\" ws\n"
        "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
        "string ::= \"\\\"\" ( [^\"x\\\\\\x7F\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt] )* \"\\\"\" "
        "ws\n"
        "number ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) (\".\" [0-9]+)? ws\n"
        "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
    static result r[4];
    run_json((engine_request){.stop = {.max_tokens = 300}, .grammar = json_gbnf}, 4, 11,
             greedy_then_sampled, r);
    char why[200];
    gr_grammar *g = gr_compile(json_gbnf, strlen(json_gbnf), why, sizeof why);
    CHECKF(g, "%s", why);
    int whole = 0;
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < (i == 3 ? 3 : 1); b++) {
            gr_matcher *m = gr_matcher_new(g);
            bool taken = gr_feed(m, r[i].text[b], r[i].text_len[b]), done = gr_done(m);
            gr_matcher_free(m);
            CHECKF(taken, "not taken: %.*s", (int)r[i].text_len[b], r[i].text[b]);
            if (r[i].finish[b] != ENGINE_FINISH_STOP) continue;
            json_error_t je;
            json_t *j = json_loadb(r[i].text[b], r[i].text_len[b], 0, &je);
            CHECKF(done && j && json_is_object(j), "%.*s: %s", (int)r[i].text_len[b], r[i].text[b],
                   je.text);
            json_decref(j);
            whole++;
        }
    gr_free(g);
    CHECKF(whole >= 3, "%d of 6 branches ended a whole object", whole);
}

/* With a schema: each whole object follows it ("k", an array of integers). */
TEST(engine_fake_json_follows_a_schema) {
    static result r[6];
    run_json((engine_request){.sampling = {.temperature = 50.0f},
                              .stop = {.max_tokens = 200},
                              .json_schema = "{\"type\":\"object\",\"properties\":{\"k\":{\"type\":"
                                             "\"array\",\"items\":{\"type\":\"integer\"}}},"
                                             "\"required\":[\"k\"]}"},
             6, 30, NULL, r);
    int whole = 0;
    for (int i = 0; i < 6; i++) {
        if (r[i].finish[0] != ENGINE_FINISH_STOP) continue;
        json_t *j = json_loadb(r[i].text[0], r[i].text_len[0], 0, NULL);
        json_t *k = json_object_get(j, "k");
        bool ints = json_is_array(k) && json_object_size(j) == 1;
        size_t x;
        json_t *v;
        json_array_foreach(k, x, v) ints &= json_is_integer(v);
        CHECKF(ints, "%.*s", (int)r[i].text_len[0], r[i].text[0]);
        json_decref(j);
        whole++;
    }
    CHECKF(whole >= 2, "%d of 6 ended a whole object", whole);
}

/* json_wait: free output up to the json_wait_for token (the end of
 * reasoning), one JSON object after it. */
TEST(engine_fake_json_after_a_token) {
    static result r[8];
    const int mark = N_JSON_ALPHA - 1; /* "x" */
    run_json(
        (engine_request){.stop = {.max_tokens = 400}, .json_wait = true, .json_wait_for = mark}, 8,
        4, NULL, r);
    int marked = 0, free_before = 0;
    for (int i = 0; i < 8; i++) {
        int k = 0;
        while (k < r[i].n[0] && r[i].tokens[0][k] != mark) k++;
        if (k == r[i].n[0]) continue;
        marked++;
        jg_state s, t;
        jg_init(&s);
        jg_init(&t);
        for (int j = 0; j < k; j++) { /* before it: not held (it does not parse) */
            const char *a = JSON_ALPHA[r[i].tokens[0][j] % N_JSON_ALPHA];
            free_before += !jg_feed(&t, a, strlen(a));
        }
        for (int j = k + 1; j < r[i].n[0]; j++) {
            int id = r[i].tokens[0][j];
            if (id == 0 && j == r[i].n[0] - 1) { /* EOS: the object is whole */
                CHECK(jg_done(&s));
                break;
            }
            const char *a = JSON_ALPHA[id % N_JSON_ALPHA];
            CHECKF(jg_feed(&s, a, strlen(a)), "request %d token %d '%s' after the mark", i, j, a);
        }
    }
    CHECKF(marked >= 2 && free_before > 0, "%d marked, %d free", marked, free_before);
}

TEST(engine_fake_stress_10k) {
    stress_case(0);
}
TEST(engine_fake_stress_10k_swap) {
    stress_case(24);
}

/* Sliding-window runners: n > 1 runs as independent sequences, no prefix reuse. */
TEST(engine_fake_swa_mode) {
    static int p[300];
    static result r;
    fake *f = fake_new(16, false);
    engine *e = fake_engine(f, 128, 8, true);
    make_prompt(p, 300, 4);
    memset(&r, 0, sizeof r);
    submit(e, p, 300, 12, 3, &r);
    engine_wait_idle(e);
    for (int b = 0; b < 3; b++) CHECK(r.n[b] == 12 && matches_ref(p, 300, r.tokens[b], 12));
    submit(e, p, 300, 12, 1, &r);
    engine_wait_idle(e);
    engine_stats s = engine_get_stats(e);
    CHECK(s.prefix_hit_tokens == 0 && s.blocks_used == 0);
    engine_free(e);
    fake_free(f);
}

/* The start-up cost model picks a budget from timed passes. */
TEST(engine_fake_cost_model) {
    fake *f = fake_new(8, true);
    engine *e = fake_engine(f, 0, 8, false);
    engine_stats s = engine_get_stats(e);
    CHECKF(s.token_budget >= 16 && s.token_budget <= 16384 && s.token_ms > 0, "budget %d",
           s.token_budget);
    engine_free(e);
    CHECK(f->n_free == 8);
    fake_free(f);
}

/* Freeing the engine with requests in flight ends each of them as cancelled
 * (one final event per branch) and returns every block. Cancelling from the
 * event callback works too. */
typedef struct self_cancel {
    engine *e;
    result *r;
} self_cancel;

static void cancel_cb(const engine_event *ev, void *user) {
    self_cancel *c = user;
    collect(ev, c->r);
    if (ev->token >= 0 && c->r->n[0] == 3) engine_cancel(c->e, ev->req_id);
}

TEST(engine_fake_free_in_flight_and_self_cancel) {
    static int p[100];
    static result r[8], sc;
    fake *f = fake_new(16, true);
    engine *e = fake_engine(f, 32, 4, false);
    make_prompt(p, 100, 2);
    memset(r, 0, sizeof r);
    memset(&sc, 0, sizeof sc);
    self_cancel c = {e, &sc};
    engine_request q = {.prompt = p,
                        .n_prompt = 100,
                        .stop = {.max_tokens = 200, .ignore_eos = true},
                        .on_event = cancel_cb,
                        .user = &c};
    di_err err;
    engine_submit(e, &q, &err);
    engine_wait_idle(e);
    CHECKF(sc.finish[0] == ENGINE_FINISH_CANCELLED && sc.n[0] >= 3 && sc.n[0] < 10, "n %d",
           sc.n[0]);
    for (int i = 0; i < 8; i++) submit(e, p, 100, 200, 2, &r[i]);
    engine_free(e);
    for (int i = 0; i < 8; i++)
        for (int b = 0; b < 2; b++)
            CHECKF(r[i].finish[b] != ENGINE_FINISH_NONE && !r[i].bad, "req %d branch %d", i, b);
    CHECK(f->n_free == 16);
    fake_free(f);
}

/* --- overlapped scheduling -------------------------------------------------- */
/* Each pass is held until the engine has planned the step after it, so the
 * test passes only if planning runs while a pass is in flight. */
TEST(engine_fake_overlap_plans_while_pass_runs) {
    enum { NR = 8 };
    static int prompts[NR][300];
    static result res[NR];
    fake *f = fake_new(64, true);
    engine *e = fake_engine(f, 256, 16, false);
    memset(res, 0, sizeof res);
    atomic_store(&f->hold, 1);
    for (int i = 0; i < NR; i++) {
        make_prompt(prompts[i], 40 + i * 30, 200 + i);
        submit(e, prompts[i], 40 + i * 30, 6 + i, 1, &res[i]);
    }
    atomic_store(&f->gate, e);
    atomic_store(&f->hold, 0);
    engine_wait_idle(e);
    atomic_store(&f->gate, NULL);
    engine_stats s = engine_get_stats(e);
    CHECKF(f->gate_timeouts == 0, "%d of %lld passes ended with no plan made ahead",
           f->gate_timeouts, f->gate_passes);
    CHECKF(s.plans_ahead >= s.steps - 1 && s.plan_overlap_s > 0,
           "%lld plans ahead, %lld after, %lld steps", s.plans_ahead, s.plans_after, s.steps);
    for (int i = 0; i < NR; i++) {
        CHECK(res[i].n[0] == 6 + i && res[i].finish[0] == ENGINE_FINISH_LENGTH);
        CHECKF(matches_ref(prompts[i], 40 + i * 30, res[i].tokens[0], res[i].n[0]),
               "request %d differs", i);
    }
    CHECK(s.blocks_used == 0 && s.running == 0);
    engine_free(e);
    CHECK(f->n_free == 64);
    fake_free(f);
}

/* The same requests with and without overlap give the same events: stop
 * strings (found while the next pass already computes one more token, which
 * is discarded), stop ids, lengths, seeded sampling, n > 1 forks, logprobs,
 * and preemption in a pool too small for all. */
enum { MIX = 12 };
static void run_mix(bool no_overlap, bool copy, result *res, engine_stats *st) {
    static int prompts[MIX][260];
    static const char *strs[MIX][1];
    static char stop_s[MIX][2];
    fake *f = fake_new(14, copy);
    engine *e = fake_engine_opts(
        f, false, &(engine_opts){.step_tokens = 200, .max_running = 8, .no_overlap = no_overlap});
    memset(res, 0, sizeof(result) * MIX);
    atomic_store(&f->hold, 1);
    for (int i = 0; i < MIX; i++) {
        int np = 30 + (i * 71) % 230;
        make_prompt(prompts[i], np, 300 + i);
        /* A one-letter stop string: token v reads 'a' + v % 26. */
        stop_s[i][0] = (char)('a' + (i * 7) % 26);
        stop_s[i][1] = 0;
        strs[i][0] = stop_s[i];
        int stop_id = 1 + i % 40;
        engine_request q = {.prompt = prompts[i],
                            .n_prompt = np,
                            .sampling = {.temperature = i % 3 ? 0.9f : 0,
                                         .seed = 7 + i,
                                         .logprobs = i % 4 == 0,
                                         .top_logprobs = i % 4 == 0 ? 3 : 0},
                            .stop = {.strs = i % 2 ? strs[i] : NULL,
                                     .n_strs = i % 2,
                                     .ids = i % 3 == 1 ? &stop_id : NULL,
                                     .n_ids = i % 3 == 1,
                                     .max_tokens = 20 + (i * 37) % 90,
                                     .ignore_eos = true},
                            .n = i % 5 == 2 ? 3 : 1,
                            .on_event = collect,
                            .user = &res[i]};
        di_err err;
        CHECKF(engine_submit(e, &q, &err) > 0, "%s", err.msg);
    }
    atomic_store(&f->hold, 0);
    engine_wait_idle(e);
    *st = engine_get_stats(e);
    CHECK(st->blocks_used == 0);
    engine_free(e);
    CHECK(f->n_free == 14);
    fake_free(f);
}

static void overlap_same_case(bool copy) {
    static result with[MIX], without[MIX];
    engine_stats sw, so;
    run_mix(false, copy, with, &sw);
    run_mix(true, copy, without, &so);
    int by_string = 0;
    for (int i = 0; i < MIX; i++)
        for (int b = 0; b < (i % 5 == 2 ? 3 : 1); b++) {
            const result *a = &with[i], *o = &without[i];
            CHECKF(a->finish[b] != ENGINE_FINISH_NONE && !a->bad, "req %d.%d unfinished", i, b);
            CHECKF(a->n[b] == o->n[b] && !memcmp(a->tokens[b], o->tokens[b], sizeof(int) * a->n[b]),
                   "req %d.%d: tokens differ (%d vs %d)", i, b, a->n[b], o->n[b]);
            CHECKF(a->text_len[b] == o->text_len[b] &&
                       !memcmp(a->text[b], o->text[b], a->text_len[b]),
                   "req %d.%d: text differs", i, b);
            CHECK(a->finish[b] == o->finish[b]);
            CHECK(!memcmp(&a->usage[b], &o->usage[b], sizeof a->usage[b]));
            CHECK(a->n_events == o->n_events && a->logprob_sum == o->logprob_sum);
            /* Ended by its stop string (no stop id, EOS ignored): the text stops
             * before the string's letter. */
            if (a->finish[b] == ENGINE_FINISH_STOP && i % 2 && i % 3 != 1) {
                CHECK(a->text_len[b] == (size_t)a->n[b] - 1);
                by_string++;
            }
            CHECK(a->usage[b].completion_tokens == a->n[b]);
        }
    CHECKF(by_string > 0, "no request ended on a stop string");
    CHECKF(sw.discarded_tokens > 0 && so.discarded_tokens == 0, "discarded %lld / %lld",
           sw.discarded_tokens, so.discarded_tokens);
    CHECKF(sw.preemptions > 0 && so.preemptions > 0, "preemptions %lld / %lld", sw.preemptions,
           so.preemptions);
    CHECKF(sw.plans_ahead > 0 && sw.plans_after > 0 && so.plans_ahead == 0, "plans %lld/%lld, %lld",
           sw.plans_ahead, sw.plans_after, so.plans_ahead);
}

TEST(engine_fake_overlap_same_events_copy) {
    overlap_same_case(true);
}
TEST(engine_fake_overlap_same_events_recompute) {
    overlap_same_case(false);
}
