/* test_kvstore_sim.c — the KV store trace simulator (deterministic for a
 * seed, a longer TTL never lowers a class's hit rate on the same trace, the
 * capacity bound holds at every step; small traces, well under a second)
 * and the model fingerprint that names a store directory. */
#include <stdio.h>
#include <string.h>

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

/* The model fingerprint names the store directory: the same checkpoint and
 * tag give the same value; another checkpoint, another compute tag or another
 * block size give another; a directory without shards is an error naming it. */
TEST(kvstore_fingerprint_model) {
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/llama3-tiny", harness_model_dir());
    snprintf(b, sizeof b, "%s/qwen2-tiny", harness_model_dir());
    uint64_t fa, fa2, fb, ft, fs;
    di_err err;
    if (kvs_fingerprint_model(a, "f32", 4096, &fa, &err) < 0) {
        CHECKF(strstr(err.msg, "llama3-tiny"), "%s", err.msg);
        return; /* test models not made: the error names the directory */
    }
    CHECK(kvs_fingerprint_model(a, "f32", 4096, &fa2, &err) == 0 && fa == fa2);
    CHECK(kvs_fingerprint_model(a, "bf16", 4096, &ft, &err) == 0 && ft != fa);
    CHECK(kvs_fingerprint_model(a, "f32", 8192, &fs, &err) == 0 && fs != fa);
    CHECK(kvs_fingerprint_model(b, "f32", 4096, &fb, &err) == 0 && fb != fa);
    CHECK(kvs_fingerprint_model("/nonexistent/model", "f32", 4096, &fb, &err) < 0);
    CHECK(strstr(err.msg, "/nonexistent/model"));
}
