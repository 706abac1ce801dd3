/* metrics.c — the Prometheus text exposition behind GET /metrics: requests
 * by endpoint and status, prompt / generated / cached token counters, TTFT
 * and TBT histograms, and the engine's gauges (running, waiting, KV blocks,
 * prefix-cache hit rate; with --kv-store the store's hit rate, blocks and
 * bytes moved, evictions) read from engine_get_stats at scrape time. One mutex
 * guards the counters; the endpoint/status table is small and fixed-size. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"

#define MET_MAX_KEYS 64
static const double hist_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                     0.25,  0.5,    1,     2.5,  5,     10,   30};
#define N_BOUNDS ((int)(sizeof hist_bounds / sizeof hist_bounds[0]))

typedef struct hist {
    long long bucket[N_BOUNDS + 1];
    double sum;
    long long count;
} hist;

struct srv_metrics {
    pthread_mutex_t mu;
    struct {
        char endpoint[32];
        int status;
        long long n;
    } req[MET_MAX_KEYS];
    int n_req;
    long long prompt, generated, cached;
    hist ttft, tbt;
};

srv_metrics *srv_metrics_new(void) {
    srv_metrics *m = di_calloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void srv_metrics_free(srv_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void srv_metrics_request(srv_metrics *m, const char *endpoint, int status) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_req && (m->req[i].status != status || strcmp(m->req[i].endpoint, endpoint)))
        i++;
    if (i == m->n_req && m->n_req < MET_MAX_KEYS) {
        snprintf(m->req[i].endpoint, sizeof m->req[i].endpoint, "%s", endpoint);
        m->req[i].status = status;
        m->n_req++;
    }
    if (i < m->n_req) m->req[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_tokens(srv_metrics *m, int prompt, int generated, int cached) {
    pthread_mutex_lock(&m->mu);
    m->prompt += prompt;
    m->generated += generated;
    m->cached += cached;
    pthread_mutex_unlock(&m->mu);
}

static void observe(srv_metrics *m, hist *h, double s) {
    pthread_mutex_lock(&m->mu);
    int b = 0;
    while (b < N_BOUNDS && s > hist_bounds[b]) b++;
    h->bucket[b]++;
    h->sum += s;
    h->count++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_ttft(srv_metrics *m, double s) {
    observe(m, &m->ttft, s);
}
void srv_metrics_tbt(srv_metrics *m, double s) {
    observe(m, &m->tbt, s);
}

static void put(di_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(di_buf *b, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) di_buf_add(b, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static void put_hist(di_buf *b, const char *name, const char *help, const hist *h) {
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    long long cum = 0;
    for (int i = 0; i < N_BOUNDS; i++) {
        cum += h->bucket[i];
        put(b, "%s_bucket{le=\"%g\"} %lld\n", name, hist_bounds[i], cum);
    }
    cum += h->bucket[N_BOUNDS];
    put(b, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.6f\n%s_count %lld\n", name, cum, name, h->sum,
        name, h->count);
}

/* The persistent KV store (--kv-store): input-token hit rate, blocks and
 * bytes moved, evictions. */
static void put_kv_store(di_buf *b, const engine_stats *st) {
    const kvs_stats *k = &st->kv_store;
    put(b,
        "# HELP deepinfer_kv_store_hit_rate Input tokens found in the KV store / tokens looked "
        "up.\n# TYPE deepinfer_kv_store_hit_rate gauge\ndeepinfer_kv_store_hit_rate %.6f\n",
        k->match_tokens ? (double)k->hit_tokens / (double)k->match_tokens : 0.0);
    put(b,
        "# HELP deepinfer_kv_store_prompt_tokens_total Prompt tokens attached from the KV "
        "store.\n# TYPE deepinfer_kv_store_prompt_tokens_total counter\n"
        "deepinfer_kv_store_prompt_tokens_total %lld\n",
        st->kv_store_hit_tokens);
    const struct {
        const char *name;
        long long v;
    } c[] = {{"blocks_read", k->blocks_read},     {"bytes_read", k->bytes_read},
             {"read_misses", k->read_misses},     {"blocks_written", k->blocks_written},
             {"bytes_written", k->bytes_written}, {"puts_dropped", k->puts_dropped},
             {"write_errors", k->write_errors}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        put(b, "# TYPE deepinfer_kv_store_%s_total counter\ndeepinfer_kv_store_%s_total %lld\n",
            c[i].name, c[i].name, c[i].v);
    put(b,
        "# TYPE deepinfer_kv_store_evictions_total counter\n"
        "deepinfer_kv_store_evictions_total{reason=\"ttl\"} %lld\n"
        "deepinfer_kv_store_evictions_total{reason=\"capacity\"} %lld\n",
        k->evictions_ttl, k->evictions_capacity);
    put(b, "# TYPE deepinfer_kv_store_blocks gauge\ndeepinfer_kv_store_blocks %lld\n",
        k->index_blocks);
    put(b, "# TYPE deepinfer_kv_store_bytes gauge\ndeepinfer_kv_store_bytes %lld\n",
        k->index_bytes);
}

char *srv_metrics_render(srv_metrics *m, const engine_stats *st, int pending) {
    di_buf b = {0};
    pthread_mutex_lock(&m->mu);
    put(&b, "# HELP deepinfer_requests_total HTTP requests by endpoint and status.\n"
            "# TYPE deepinfer_requests_total counter\n");
    for (int i = 0; i < m->n_req; i++)
        put(&b, "deepinfer_requests_total{endpoint=\"%s\",status=\"%d\"} %lld\n",
            m->req[i].endpoint, m->req[i].status, m->req[i].n);
    put(&b,
        "# HELP deepinfer_prompt_tokens_total Prompt tokens of finished requests.\n"
        "# TYPE deepinfer_prompt_tokens_total counter\ndeepinfer_prompt_tokens_total %lld\n",
        m->prompt);
    put(&b,
        "# HELP deepinfer_generation_tokens_total Generated tokens.\n"
        "# TYPE deepinfer_generation_tokens_total counter\n"
        "deepinfer_generation_tokens_total %lld\n",
        m->generated);
    put(&b,
        "# HELP deepinfer_cached_prompt_tokens_total Prompt tokens served by the prefix "
        "cache.\n# TYPE deepinfer_cached_prompt_tokens_total counter\n"
        "deepinfer_cached_prompt_tokens_total %lld\n",
        m->cached);
    put_hist(&b, "deepinfer_time_to_first_token_seconds", "Time to first token.", &m->ttft);
    put_hist(&b, "deepinfer_time_between_tokens_seconds", "Time between tokens.", &m->tbt);
    pthread_mutex_unlock(&m->mu);
    put(&b,
        "# HELP deepinfer_requests_pending Requests accepted and not finished.\n"
        "# TYPE deepinfer_requests_pending gauge\ndeepinfer_requests_pending %d\n",
        pending);
    if (st) {
        put(&b, "# TYPE deepinfer_requests_running gauge\ndeepinfer_requests_running %d\n",
            st->running);
        put(&b, "# TYPE deepinfer_requests_waiting gauge\ndeepinfer_requests_waiting %d\n",
            st->waiting);
        put(&b, "# TYPE deepinfer_kv_blocks_total gauge\ndeepinfer_kv_blocks_total %d\n",
            st->blocks_total);
        put(&b, "# TYPE deepinfer_kv_blocks_used gauge\ndeepinfer_kv_blocks_used %d\n",
            st->blocks_used);
        put(&b, "# TYPE deepinfer_kv_blocks_free gauge\ndeepinfer_kv_blocks_free %d\n",
            st->blocks_free);
        put(&b, "# TYPE deepinfer_kv_blocks_cached gauge\ndeepinfer_kv_blocks_cached %d\n",
            st->blocks_cached);
        put(&b, "# TYPE deepinfer_kv_usage_ratio gauge\ndeepinfer_kv_usage_ratio %.6f\n",
            st->blocks_total ? (double)st->blocks_used / st->blocks_total : 0.0);
        put(&b,
            "# TYPE deepinfer_prefix_cache_hit_rate gauge\ndeepinfer_prefix_cache_hit_rate "
            "%.6f\n",
            st->prompt_tokens ? (double)st->prefix_hit_tokens / (double)st->prompt_tokens : 0.0);
        put(&b,
            "# TYPE deepinfer_engine_requests_cancelled_total counter\n"
            "deepinfer_engine_requests_cancelled_total %lld\n",
            st->requests_cancelled);
        put(&b,
            "# TYPE deepinfer_engine_requests_done_total counter\n"
            "deepinfer_engine_requests_done_total %lld\n",
            st->requests_done);
        put(&b, "# TYPE deepinfer_engine_steps_total counter\ndeepinfer_engine_steps_total %lld\n",
            st->steps);
        put(&b, "# TYPE deepinfer_preemptions_total counter\ndeepinfer_preemptions_total %lld\n",
            st->preemptions);
        put(&b,
            "# HELP deepinfer_swap_outs_total Preemptions whose KV went to the host swap space.\n"
            "# TYPE deepinfer_swap_outs_total counter\ndeepinfer_swap_outs_total %lld\n",
            st->swap_outs);
        put(&b,
            "# TYPE deepinfer_swap_ins_total counter\ndeepinfer_swap_ins_total %lld\n"
            "# TYPE deepinfer_swap_used_bytes gauge\ndeepinfer_swap_used_bytes %zu\n",
            st->swap_ins, st->swap_bytes_used);
        put(&b,
            "# HELP deepinfer_engine_compute_idle_ratio Fraction of the time with work in flight "
            "that the compute threads sat idle between forward passes.\n"
            "# TYPE deepinfer_engine_compute_idle_ratio gauge\n"
            "deepinfer_engine_compute_idle_ratio %.6f\n",
            st->active_s > 0 ? 1 - st->forward_s / st->active_s : 0.0);
        put(&b,
            "# HELP deepinfer_engine_steps_planned_ahead_total Steps planned while the previous "
            "step's forward pass ran.\n# TYPE deepinfer_engine_steps_planned_ahead_total counter\n"
            "deepinfer_engine_steps_planned_ahead_total %lld\n",
            st->plans_ahead);
        if (st->has_kv_store) put_kv_store(&b, st);
    }
    return b.p ? b.p : di_strdup("");
}
