/* kvs_index.h — the store's in-memory index: block key -> (bytes, last use,
 * traffic class), with TTL and capacity victim selection. Pure data: no I/O
 * and no clock of its own (times are passed in, seconds since the epoch), so
 * the store and the trace simulator (kv-sim) share the same eviction policy.
 * Not thread-safe: the store holds its lock around every call. */
#ifndef DI_KVS_INDEX_H
#define DI_KVS_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvstore/kvstore.h"

#define KVS_CLASS_UNKNOWN (-1) /* found by a directory scan, header not read yet */

typedef struct kvs_ientry {
    uint64_t key;
    uint64_t bytes; /* file size; 0 marks an empty slot */
    double atime;   /* last write or use */
    int cls;        /* kvs_class or KVS_CLASS_UNKNOWN */
} kvs_ientry;

typedef struct kvs_victim {
    uint64_t key;
    uint64_t bytes;
    bool expired; /* TTL (else capacity) */
} kvs_victim;

typedef struct kvs_index kvs_index;

kvs_index *kvs_index_create(void);
void kvs_index_free(kvs_index *ix);
/* The entry of key, or NULL. Valid until the next insert or remove. */
kvs_ientry *kvs_index_find(kvs_index *ix, uint64_t key);
/* Inserts or replaces key (bytes > 0). */
void kvs_index_set(kvs_index *ix, uint64_t key, uint64_t bytes, double atime, int cls);
bool kvs_index_remove(kvs_index *ix, uint64_t key);
long long kvs_index_count(const kvs_index *ix);
unsigned long long kvs_index_bytes(const kvs_index *ix);
/* Calls fn for every entry (no inserts or removes meanwhile). */
void kvs_index_each(kvs_index *ix, void (*fn)(void *ctx, kvs_ientry *e), void *ctx);

/* TTL of entry e at time now: expired when now - atime > ttl[cls] (ttl < 0:
 * never). Unknown classes use the longest TTL (never evicted early). */
bool kvs_index_expired(const kvs_ientry *e, double now, const double ttl[KVS_N_CLASS]);
/* Removes from the index and returns (in *out, caller frees, count
 * returned) every expired entry, then, while the bytes exceed capacity (> 0),
 * the least recently used entries until the bytes are <= low * capacity. */
int kvs_index_evict(kvs_index *ix, double now, const double ttl[KVS_N_CLASS], uint64_t capacity,
                    double low, kvs_victim **out);

#endif
