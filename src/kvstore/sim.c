/* sim.c — the KV store trace simulator (kvs_sim.h). The trace is generated
 * up front from the seed (every request of every session, with its time,
 * prompt length and length after the reply), sorted by time, and replayed
 * against a kvs_index on a virtual clock with the store's TTL and capacity
 * rules: a request hits the longest run of leading blocks present and
 * unexpired (refreshing their last use), then stores every full block of
 * its prompt and reply, as the engine persists blocks as they fill.
 *
 * Block keys follow the store's hash chains: block i's key hashes its
 * content id with block i-1's key. Blocks wholly inside an application's
 * system prompt have an application-wide content id (shared by all its
 * sessions); the rest belong to the session. Prompts only grow by appending,
 * so a session's earlier blocks keep their keys.
 *
 * Traffic model (per class, all times in seconds):
 *   agent: one of 40 applications (Zipf), system prompt 2-10K tokens; 5-60
 *          turns (mean ~20) 20 s-5 min apart (exponential, mean 90 s); each
 *          turn adds ~1.5K tokens of tool output and ~300 of reply; one turn
 *          in 20 pauses for hours (log-normal, median 2 h) before resuming.
 *   chat:  one of 12 system prompts (Zipf, ~600-1500 tokens); visits of 1-8
 *          turns a minute apart (user ~150, reply ~450 tokens); after a
 *          visit the user returns with probability 0.65 after a Pareto gap
 *          (minimum 30 min, alpha 0.6, capped at 30 days): the long tail of
 *          re-reads that makes chat want a longer TTL.
 * No global state; deterministic for a seed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvstore/kvs_index.h"
#include "kvstore/kvs_sim.h"

typedef struct {
    double t;
    int session;
    int prompt, after; /* tokens */
} sim_req;

typedef struct {
    int cls, app, sys_len;
} sim_session;

typedef struct {
    sim_req *r;
    long long n, cap;
    sim_session *s;
    int n_s, cap_s;
    uint64_t rng;
} sim_trace;

static uint64_t rnd(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unif(uint64_t *s) {
    return ((double)(rnd(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double expo(uint64_t *s, double mean) {
    return -mean * log(unif(s));
}

static double normal(uint64_t *s) {
    return sqrt(-2 * log(unif(s))) * cos(6.283185307179586 * unif(s));
}

static int zipf(uint64_t *s, int n) { /* P(k) ~ 1/(k+1) */
    double h = 0;
    for (int k = 0; k < n; k++) h += 1.0 / (k + 1);
    double u = unif(s) * h;
    for (int k = 0; k < n; k++)
        if ((u -= 1.0 / (k + 1)) <= 0) return k;
    return n - 1;
}

static int add_session(sim_trace *tr, int cls, int app, int sys_len) {
    if (tr->n_s == tr->cap_s)
        tr->s = di_realloc(tr->s,
                           (size_t)(tr->cap_s = tr->cap_s ? 2 * tr->cap_s : 1024) * sizeof *tr->s);
    tr->s[tr->n_s] = (sim_session){cls, app, sys_len};
    return tr->n_s++;
}

static void add_req(sim_trace *tr, double t, int session, int prompt, int after) {
    if (tr->n == tr->cap)
        tr->r = di_realloc(tr->r, (size_t)(tr->cap = tr->cap ? 2 * tr->cap : 4096) * sizeof *tr->r);
    tr->r[tr->n++] = (sim_req){t, session, prompt, after};
}

static void gen_agent(sim_trace *tr, double t, double end) {
    uint64_t *g = &tr->rng;
    int app = zipf(g, 40);
    int sid = add_session(tr, KVS_CLASS_AGENT, app, 2048 + (app * 977) % 8192);
    int ctx = tr->s[sid].sys_len + 200 + (int)expo(g, 300);
    int turns = 5 + (int)expo(g, 15);
    if (turns > 60) turns = 60;
    for (int k = 0; k < turns && t < end; k++) {
        int reply = 50 + (int)expo(g, 250);
        add_req(tr, t, sid, ctx, ctx + reply);
        ctx += reply + 100 + (int)expo(g, 1400);
        if (ctx > 120000) break;
        double gap = 20 + expo(g, 70);
        if (rnd(g) % 20 == 0) gap += 7200 * exp(1.0 * normal(g));
        t += gap;
    }
}

static void gen_chat(sim_trace *tr, double t, double end) {
    uint64_t *g = &tr->rng;
    int app = zipf(g, 12);
    int sid = add_session(tr, KVS_CLASS_CHAT, 1000 + app, 600 + (app * 331) % 900);
    int ctx = tr->s[sid].sys_len;
    while (t < end) {
        int turns = 1 + (int)(rnd(g) % 8);
        for (int k = 0; k < turns && t < end; k++) {
            ctx += 20 + (int)expo(g, 130);
            int reply = 50 + (int)expo(g, 400);
            add_req(tr, t, sid, ctx, ctx + reply);
            ctx += reply;
            t += 20 + expo(g, 40);
        }
        if (unif(g) > 0.65 || ctx > 60000) break;
        double gap = 1800 * pow(unif(g), -1.0 / 0.6);
        t += gap < 30 * 86400.0 ? gap : 30 * 86400.0;
    }
}

static int by_time(const void *a, const void *b) {
    const sim_req *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return (x->session > y->session) - (x->session < y->session);
}

static uint64_t block_key(const sim_session *s, int session, int i, uint64_t parent) {
    uint64_t cid[2];
    bool shared = (i + 1) * KVS_BLOCK_TOKENS <= s->sys_len;
    cid[0] = shared ? 0x5000000000000000ull | (uint64_t)s->app : (uint64_t)session;
    cid[1] = (uint64_t)i;
    return XXH3_64bits_withSeed(cid, sizeof cid, parent);
}

static void evict(kvs_index *ix, double now, const double *ttl, uint64_t cap, kvs_sim_result *r) {
    kvs_victim *v;
    int n = kvs_index_evict(ix, now, ttl, cap, 0.9, &v);
    for (int i = 0; i < n; i++) {
        if (v[i].expired)
            r->evictions_ttl++;
        else
            r->evictions_capacity++;
    }
    free(v);
}

int kvs_sim_run(const kvs_sim_params *p, kvs_sim_result *r, di_err *err) {
    double days = p->days > 0 ? p->days : 21;
    double warm = p->warmup_days > 0 ? p->warmup_days : p->warmup_days < 0 ? 0 : 7;
    double a_rate = p->agent_per_day > 0 ? p->agent_per_day : 100;
    double c_rate = p->chat_per_day > 0 ? p->chat_per_day : 500;
    uint64_t bb = p->block_bytes ? p->block_bytes : 1u << 20;
    double ttl[KVS_N_CLASS];
    for (int c = 0; c < KVS_N_CLASS; c++)
        ttl[c] = p->ttl_s[c] ? p->ttl_s[c] : c == KVS_CLASS_AGENT ? 3 * 86400.0 : 7 * 86400.0;
    if (warm >= days)
        return di_errf(err, "kv-sim: warm-up (%g d) must be shorter than the trace (%g d)", warm,
                       days);
    if (a_rate * days > 2e6 || c_rate * days > 2e6)
        return di_errf(
            err, "kv-sim: at most 2M sessions per class (%g agent/day, %g chat/day over %g d)",
            a_rate, c_rate, days);

    memset(r, 0, sizeof *r);
    sim_trace tr = {.rng = p->seed ^ 0xD1B54A32D192ED03ull};
    double end = days * 86400;
    for (double t = expo(&tr.rng, 86400 / a_rate); t < end; t += expo(&tr.rng, 86400 / a_rate))
        gen_agent(&tr, t, end);
    for (double t = expo(&tr.rng, 86400 / c_rate); t < end; t += expo(&tr.rng, 86400 / c_rate))
        gen_chat(&tr, t, end);
    qsort(tr.r, (size_t)tr.n, sizeof *tr.r, by_time);

    kvs_index *ix = kvs_index_create();
    double next_sweep = 6 * 3600;
    for (long long q = 0; q < tr.n; q++) {
        const sim_req *rq = &tr.r[q];
        const sim_session *s = &tr.s[rq->session];
        double now = rq->t;
        if (now >= next_sweep) {
            evict(ix, now, ttl, 0, r); /* periodic TTL sweep (lookups check expiry too) */
            next_sweep = now + 6 * 3600;
        }
        uint64_t key = 0;
        int i = 0, n_prompt = rq->prompt / KVS_BLOCK_TOKENS, n_after = rq->after / KVS_BLOCK_TOKENS;
        for (; i < n_prompt; i++) {
            uint64_t k = block_key(s, rq->session, i, key);
            kvs_ientry *e = kvs_index_find(ix, k);
            if (!e || kvs_index_expired(e, now, ttl)) break;
            e->atime = now;
            key = k;
        }
        if (now >= warm * 86400) {
            r->requests[s->cls]++;
            r->input_tokens[s->cls] += rq->prompt;
            r->hit_tokens[s->cls] += (long long)i * KVS_BLOCK_TOKENS;
        }
        for (; i < n_after; i++) {
            key = block_key(s, rq->session, i, key);
            kvs_ientry *e = kvs_index_find(ix, key);
            if (e) {
                if (kvs_index_expired(e, now, ttl)) r->blocks_written++; /* rewritten */
                e->atime = now;
                e->cls = s->cls;
                continue;
            }
            kvs_index_set(ix, key, bb, now, s->cls);
            r->blocks_written++;
        }
        if (p->capacity_bytes && kvs_index_bytes(ix) > p->capacity_bytes)
            evict(ix, now, ttl, p->capacity_bytes, r);
        if (kvs_index_bytes(ix) > r->peak_bytes) r->peak_bytes = kvs_index_bytes(ix);
    }
    r->end_bytes = kvs_index_bytes(ix);
    kvs_index_free(ix);
    free(tr.r);
    free(tr.s);
    return 0;
}
