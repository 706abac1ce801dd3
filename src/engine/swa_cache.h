/* swa_cache.h — the engine's bounded host-memory cache of sliding-window
 * state snapshots, keyed by the hash-chain key of the block at whose end the
 * snapshot was taken (bm_chain_keys), so a prefix-cache hit of that block
 * finds the rings to restore. Least recently used entries are evicted when
 * the bytes held exceed the bound. Values are opaque (model_swa_state in the
 * engine); the cache owns them and frees them with the given function.
 * Not thread-safe: the step thread alone uses it. */
#ifndef DI_SWA_CACHE_H
#define DI_SWA_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct swc swc;

typedef struct swc_stats {
    int entries;
    size_t bytes;
    long long hits, misses, inserts, evictions;
} swc_stats;

/* max_bytes: the bound (an entry larger than it is not kept). */
swc *swc_create(size_t max_bytes, void (*free_fn)(void *value));
void swc_free(swc *c);
/* The value under key (marked most recently used), or NULL. Counts a hit
 * or a miss. The value stays owned by the cache: valid until the next put. */
const void *swc_get(swc *c, uint64_t key);
bool swc_has(const swc *c, uint64_t key);
/* Takes ownership of value (bytes long) under key, replacing any previous
 * one, then evicts LRU entries down to the bound. */
void swc_put(swc *c, uint64_t key, void *value, size_t bytes);
swc_stats swc_get_stats(const swc *c);

#endif
