/* kvs_sim.h — the trace-driven KV store simulator behind `deepinfer kv-sim`:
 * replays a seeded synthetic trace of agent sessions (contexts that grow
 * turn after turn, minutes apart) and chat sessions (a few turns per visit,
 * returns after long-tailed gaps of hours to weeks) against the store's own
 * index and eviction policy (kvs_index) with given TTLs and capacity, and
 * reports the input-token hit rate per traffic class — so TTL and capacity
 * choices can be argued with numbers. */
#ifndef DI_KVS_SIM_H
#define DI_KVS_SIM_H

#include <stdint.h>

#include "base/base.h"
#include "kvstore/kvstore.h"

typedef struct kvs_sim_params {
    uint64_t seed;
    double days;          /* trace length (0: 21) */
    double warmup_days;   /* requests before this are replayed but not counted (0: 7; < 0: none) */
    double agent_per_day; /* new agent sessions per day (0: 100) */
    double chat_per_day;  /* new chat sessions per day (0: 500) */
    double ttl_s[KVS_N_CLASS]; /* 0: store defaults (chat 7 d, agent 3 d); < 0: never */
    uint64_t capacity_bytes;   /* 0: unbounded */
    uint64_t block_bytes;      /* bytes per stored block (0: 1 MiB) */
} kvs_sim_params;

typedef struct kvs_sim_result {
    long long requests[KVS_N_CLASS], input_tokens[KVS_N_CLASS], hit_tokens[KVS_N_CLASS];
    long long blocks_written, evictions_ttl, evictions_capacity;
    uint64_t peak_bytes, end_bytes;
} kvs_sim_result;

int kvs_sim_run(const kvs_sim_params *p, kvs_sim_result *r, di_err *err);

#endif
