/* test_kvstore_sim.c — the KV store trace simulator: deterministic for a
 * seed, a longer TTL never lowers a class's hit rate on the same trace, and
 * the capacity bound holds at every step. Small traces (a few seconds of
 * CPU at most). */
#include "harness.h"
#include "kvstore/kvs_sim.h"

static kvs_sim_params small(void) {
    return (kvs_sim_params){.seed = 7,
                            .days = 6,
                            .warmup_days = 2,
                            .agent_per_day = 15,
                            .chat_per_day = 80,
                            .block_bytes = 1 << 20};
}

static double hit(const kvs_sim_result *r, int c) {
    return r->input_tokens[c] ? (double)r->hit_tokens[c] / (double)r->input_tokens[c] : 0;
}

TEST(kvstore_sim_deterministic_and_monotone) {
    kvs_sim_params p = small();
    kvs_sim_result a, b, lo, hi;
    di_err err;
    CHECK(kvs_sim_run(&p, &a, &err) == 0 && kvs_sim_run(&p, &b, &err) == 0);
    CHECK(a.requests[0] > 100 && a.requests[1] > 50);
    CHECK(a.hit_tokens[0] == b.hit_tokens[0] && a.hit_tokens[1] == b.hit_tokens[1]);
    CHECK(a.blocks_written == b.blocks_written && a.peak_bytes == b.peak_bytes);
    p.ttl_s[0] = p.ttl_s[1] = 3600;
    CHECK(kvs_sim_run(&p, &lo, &err) == 0);
    p.ttl_s[0] = p.ttl_s[1] = -1;
    CHECK(kvs_sim_run(&p, &hi, &err) == 0);
    for (int c = 0; c < KVS_N_CLASS; c++) {
        CHECKF(hit(&lo, c) <= hit(&a, c) && hit(&a, c) <= hit(&hi, c), "class %d: %f %f %f", c,
               hit(&lo, c), hit(&a, c), hit(&hi, c));
        CHECK(hit(&hi, c) > 0.5 && hit(&hi, c) < 1.0);
    }
    CHECK(lo.evictions_ttl > a.evictions_ttl && hi.evictions_ttl == 0);
    p.seed = 8;
    CHECK(kvs_sim_run(&p, &b, &err) == 0 && b.hit_tokens[0] != hi.hit_tokens[0]);
}

TEST(kvstore_sim_capacity_bound) {
    kvs_sim_params p = small();
    kvs_sim_result free_r, cap_r;
    di_err err;
    CHECK(kvs_sim_run(&p, &free_r, &err) == 0);
    p.capacity_bytes = free_r.peak_bytes / 4;
    CHECK(kvs_sim_run(&p, &cap_r, &err) == 0);
    CHECK(cap_r.peak_bytes <= p.capacity_bytes && cap_r.evictions_capacity > 0);
    CHECK(hit(&cap_r, 0) + hit(&cap_r, 1) < hit(&free_r, 0) + hit(&free_r, 1));
    p.warmup_days = 10;
    CHECK(kvs_sim_run(&p, &cap_r, &err) < 0);
}
