/* cmd_kvsim.c — `deepinfer kv-sim`: runs the KV store trace simulator
 * (src/kvstore/sim.c) for given TTLs and capacity and prints the input-token
 * hit rate per traffic class; --compare adds a table over other TTL choices
 * on the same trace, so a TTL can be argued with numbers. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "kvstore/kvs_sim.h"

static void human(char *buf, size_t n, double bytes) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int k = 0;
    while (bytes >= 1024 && k < 5) bytes /= 1024, k++;
    snprintf(buf, n, "%.1f %s", bytes, u[k]);
}

static double rate(long long hit, long long in) {
    return in ? 100.0 * (double)hit / (double)in : 0;
}

static void ttl_str(char *buf, size_t n, double s) {
    if (s < 0)
        snprintf(buf, n, "none");
    else if (s >= 86400 && s == (double)(long long)(s / 86400) * 86400)
        snprintf(buf, n, "%gd", s / 86400);
    else
        snprintf(buf, n, "%gh", s / 3600);
}

static int parse_ttl(const char *s, double *out, const char *name) {
    if (!s) return 0;
    if (!strcmp(s, "none")) {
        *out = -1;
        return 0;
    }
    double v = kvs_parse_duration(s);
    if (v <= 0) {
        fprintf(stderr, "kv-sim: %s: expected a duration like 3d, 12h, 90m or 'none', got '%s'\n",
                name, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cmd_kvsim(int argc, char **argv) {
    uint64_t seed = 1;
    float days = 21, warmup = 7, agent_rate = 100, chat_rate = 500;
    const char *ttl_agent = "3d", *ttl_chat = "7d", *capacity = NULL, *block = "1M";
    int compare = 0;
    const cli_opt opts[] = {
        {"--seed", OPT_U64, &seed, "trace seed (default 1)"},
        {"--days", OPT_FLOAT, &days, "trace length in days (default 21)"},
        {"--warmup", OPT_FLOAT, &warmup, "days replayed before counting (default 7)"},
        {"--agent-per-day", OPT_FLOAT, &agent_rate, "new agent sessions per day (default 100)"},
        {"--chat-per-day", OPT_FLOAT, &chat_rate, "new chat sessions per day (default 500)"},
        {"--ttl-agent", OPT_STR, &ttl_agent,
         "agent TTL since last use: 3d, 12h, none (default 3d)"},
        {"--ttl-chat", OPT_STR, &ttl_chat, "chat TTL since last use (default 7d)"},
        {"--capacity", OPT_STR, &capacity, "store capacity, e.g. 20T (default unbounded)"},
        {"--block-bytes", OPT_STR, &block, "bytes per block (default 1M)"},
        {"--compare", OPT_FLAG, &compare, "also print hit rates for other TTL choices"},
    };
    int rc = cli_parse(argc, argv, opts, sizeof opts / sizeof *opts, "deepinfer kv-sim [options]");
    if (rc) return rc == 1 ? 0 : rc;
    kvs_sim_params p = {.seed = seed,
                        .days = days,
                        .warmup_days = warmup > 0 ? warmup : -1,
                        .agent_per_day = agent_rate,
                        .chat_per_day = chat_rate};
    if (parse_ttl(ttl_agent, &p.ttl_s[KVS_CLASS_AGENT], "--ttl-agent") ||
        parse_ttl(ttl_chat, &p.ttl_s[KVS_CLASS_CHAT], "--ttl-chat"))
        return 2;
    bool ok = true;
    if (capacity) p.capacity_bytes = kvs_parse_size(capacity, &ok);
    if (!ok) {
        fprintf(stderr, "kv-sim: --capacity: expected a size like 20T or 512G, got '%s'\n",
                capacity);
        return 2;
    }
    p.block_bytes = kvs_parse_size(block, &ok);
    if (!ok || !p.block_bytes) {
        fprintf(stderr, "kv-sim: --block-bytes: expected a size like 1M, got '%s'\n", block);
        return 2;
    }
    kvs_sim_result r;
    di_err err;
    if (kvs_sim_run(&p, &r, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    char cap[32], bb[32], peak[32], ta[16], tc[16];
    if (p.capacity_bytes)
        human(cap, sizeof cap, (double)p.capacity_bytes);
    else
        snprintf(cap, sizeof cap, "unbounded");
    human(bb, sizeof bb, (double)p.block_bytes);
    human(peak, sizeof peak, (double)r.peak_bytes);
    ttl_str(ta, sizeof ta, p.ttl_s[KVS_CLASS_AGENT]);
    ttl_str(tc, sizeof tc, p.ttl_s[KVS_CLASS_CHAT]);
    printf("kv-sim: seed %llu, %g days (first %g not counted), %g agent + %g chat sessions/day, "
           "block %s, capacity %s\n",
           (unsigned long long)seed, days, warmup > 0 ? warmup : 0, agent_rate, chat_rate, bb, cap);
    printf("%-6s %6s %10s %16s %16s %9s\n", "class", "ttl", "requests", "input tokens",
           "hit tokens", "hit rate");
    long long rq = 0, in = 0, hit = 0;
    for (int c = KVS_N_CLASS - 1; c >= 0; c--) {
        printf("%-6s %6s %10lld %16lld %16lld %8.2f%%\n", kvs_class_name(c),
               c == KVS_CLASS_AGENT ? ta : tc, r.requests[c], r.input_tokens[c], r.hit_tokens[c],
               rate(r.hit_tokens[c], r.input_tokens[c]));
        rq += r.requests[c], in += r.input_tokens[c], hit += r.hit_tokens[c];
    }
    printf("%-6s %6s %10lld %16lld %16lld %8.2f%%\n", "all", "", rq, in, hit, rate(hit, in));
    printf("store: %lld blocks written, peak %s, evictions: %lld ttl, %lld capacity\n",
           r.blocks_written, peak, r.evictions_ttl, r.evictions_capacity);
    if (!compare) return 0;
    static const double alt[][2] = {{86400, 86400},          {3 * 86400, 3 * 86400},
                                    {3 * 86400, 7 * 86400},  {7 * 86400, 7 * 86400},
                                    {3 * 86400, 14 * 86400}, {-1, -1}};
    printf("\nsame trace and capacity, other TTLs:\n%6s %6s %9s %9s %9s %12s\n", "agent", "chat",
           "agent hit", "chat hit", "all hit", "peak store");
    for (size_t k = 0; k < sizeof alt / sizeof *alt; k++) {
        kvs_sim_params q = p;
        q.ttl_s[KVS_CLASS_AGENT] = alt[k][0];
        q.ttl_s[KVS_CLASS_CHAT] = alt[k][1];
        if (kvs_sim_run(&q, &r, &err) < 0) return 1;
        ttl_str(ta, sizeof ta, alt[k][0]);
        ttl_str(tc, sizeof tc, alt[k][1]);
        human(peak, sizeof peak, (double)r.peak_bytes);
        long long i2 = r.input_tokens[0] + r.input_tokens[1],
                  h2 = r.hit_tokens[0] + r.hit_tokens[1];
        printf("%6s %6s %8.2f%% %8.2f%% %8.2f%% %12s\n", ta, tc,
               rate(r.hit_tokens[KVS_CLASS_AGENT], r.input_tokens[KVS_CLASS_AGENT]),
               rate(r.hit_tokens[KVS_CLASS_CHAT], r.input_tokens[KVS_CLASS_CHAT]), rate(h2, i2),
               peak);
    }
    return 0;
}
