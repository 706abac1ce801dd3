/* kvstore.h — the persistent KV block store: full-attention KV blocks of
 * 128 tokens kept in a directory (local NVMe or a shared mount used by many
 * instances at once), found by the same hash-chain keys as the engine's
 * prefix cache (bm_chain_keys), with TTL per traffic class and a capacity
 * bound.
 *
 * The hit path has three stages; only the first is on a request's critical
 * path:
 *
 *   int hit = kvs_match(s, keys, n_keys, n_prompt);      // metadata only
 *   kvs_fetch *f = kvs_fetch_start(s, keys, tokens, hit); // fetch threads read
 *                                                         // blocks into host
 *                                                         // memory (read-ahead)
 *   kvs_swapin *w = kvs_swapin_start(f, hit, dst);        // layer by layer
 *   int ok = kvs_swapin_wait_layer(w, 0);  // layer 0 of blocks 0..ok-1 in
 *                                          // place: compute from ok * 128
 *   for (l = 0; l < n_layers; l++) {
 *       kvs_swapin_wait_layer(w, l);        // layer l in place
 *       ... forward pass of layer l ...
 *   }
 *   kvs_swapin_finish(w);
 *   kvs_swapin_free(w); kvs_fetch_free(f);
 *
 * Cancelling a hit in progress (the request went away) never waits for I/O:
 *   kvs_fetch_cancel(f); kvs_swapin_free(w); kvs_fetch_free(f);
 *
 * A block is a miss, never wrong data, when its file is missing, truncated,
 * corrupt (XXH3 checksum), of another layout version or model fingerprint,
 * or holds other tokens than asked (64-bit key collision). A miss at block i
 * ends the usable prefix at i.
 *
 * Writes: kvs_put copies the block and returns; writer threads persist it
 * (temporary file + rename, see store.c) and keep the directory within
 * capacity. Every function is thread-safe; one kvs per process and
 * directory. */
#ifndef DI_KVSTORE_H
#define DI_KVSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define KVS_BLOCK_TOKENS   128
#define KVS_LAYOUT_VERSION 1
#define KVS_MAX_LAYERS     512
#define KVS_LAT_BUCKETS    24 /* fetch latency histogram: bucket b holds [2^b, 2^(b+1)) us */

typedef enum { KVS_CLASS_CHAT = 0, KVS_CLASS_AGENT = 1, KVS_N_CLASS } kvs_class;

typedef enum {
    KVS_SYNC_DATA = 0, /* fdatasync before rename (default): a renamed block
                          is whole after power loss */
    KVS_SYNC_NONE,     /* rename only: a crash may leave a renamed but empty or
                          partial file, which the checksum turns into a miss */
    KVS_SYNC_FULL,     /* and fsync the directory after rename: the name too */
} kvs_sync;

typedef struct kvs_opts {
    size_t capacity_bytes;     /* bound on the directory's block bytes; 0: unbounded */
    double ttl_s[KVS_N_CLASS]; /* since last use; 0: default (chat 7 d, agent 3 d); < 0: none */
    int fetch_threads;         /* 0: 2 */
    int write_threads;         /* 0: 2 */
    kvs_sync sync;             /* default KVS_SYNC_DATA */
    int write_queue;           /* blocks waiting for the writer; a full queue drops puts (0: 64) */
    double rescan_s;           /* full rescan of the directory by the writer thread (0: 60 s) */
    double touch_s;   /* a hit refreshes a block's last-use time when older than this (0: 1 h) */
    bool buffered_io; /* through the page cache (default: O_DIRECT reads, and writes when
                         synced, where the filesystem supports it) */
    int host_blocks;  /* host staging buffers (one block file each), faulted in at open and
                         reused by fetches and puts; more are allocated on demand (0: 16) */
    /* Tests and fault injection: called by a fetch thread before it reads a
     * block (a slow or stalled storage mount is a hook that sleeps or
     * blocks). The time spent in it counts as read latency. NULL: none. */
    void (*read_hook)(void *ctx, uint64_t key);
    void *read_hook_ctx;
} kvs_opts;

/* What a block holds: block_bytes of payload, laid out as n_layers segments
 * (the engine pool's block layout, layer-major). The fingerprint names the
 * model (kvs_fingerprint_model) and is part of the directory name. */
typedef struct kvs_layout {
    uint64_t fingerprint;
    size_t block_bytes;
    int n_layers;
    const size_t *layer_off, *layer_bytes; /* n_layers each, within the payload */
} kvs_layout;

typedef struct kvs_stats {
    long long match_calls, match_tokens, hit_tokens; /* input-token hit rate = hit / match */
    long long blocks_read, bytes_read, read_misses;  /* misses: corrupt, truncated, vanished */
    long long blocks_written, bytes_written, puts_skipped, puts_dropped, write_errors;
    long long evictions_ttl, evictions_capacity;
    long long index_blocks, index_bytes; /* what this process's index knows of the directory */
    long long fetch_lat_us[KVS_LAT_BUCKETS];
} kvs_stats;

typedef struct kvs kvs;

/* Model fingerprint from a checkpoint directory: XXH3 over config.json, every
 * *.safetensors header (names, shapes, dtypes) and a sample of each shard's
 * data, plus `tag` (compute dtype, e.g. "f32") and the block layout size. */
int kvs_fingerprint_model(const char *model_dir, const char *tag, size_t block_bytes, uint64_t *out,
                          di_err *err);

/* Opens (creating if needed) the store under dir for this layout: scans the
 * directory to rebuild the index, removes stale temporary files, evicts what
 * is expired or over capacity, and starts the writer and fetch threads. */
kvs *kvs_open(const char *dir, const kvs_layout *lay, const kvs_opts *opts, di_err *err);
/* Writes what is queued, stops the threads, frees everything. Every fetch
 * and swap-in must have been freed. */
void kvs_close(kvs *s);
kvs_stats kvs_get_stats(kvs *s);
const char *kvs_dir(const kvs *s); /* the directory holding this layout's blocks */

/* Match: how many leading keys (keys[i] names the prefix up to block i's
 * end) have a block in the store, from the index (and a stat of the first
 * key the index lacks, so blocks other processes wrote are found). Counts
 * n_tokens input tokens and the hit tokens in the stats. */
int kvs_match(kvs *s, const uint64_t *keys, int n_keys, int n_tokens);

/* Queues a full block for writing: key, its parent's key (0 for the first
 * block), its 128 tokens, block_bytes of payload (copied). Returns 0 queued,
 * 1 already stored (skipped), -1 dropped (queue full). Never blocks on I/O. */
int kvs_put(kvs *s, uint64_t key, uint64_t parent, const int32_t *tokens, const void *payload,
            kvs_class cls);
/* Waits until every queued block is written. */
void kvs_flush(kvs *s);
/* Eviction pass now (the writer thread runs one after writes and on rescan):
 * TTL-expired blocks, then least recently used ones down to 90 % of capacity. */
void kvs_sweep(kvs *s);

/* --- fetch: blocks into host memory, asynchronously ----------------------- */
typedef struct kvs_fetch kvs_fetch;
/* Starts reading blocks keys[0..n) (all queued at once: read-ahead of what
 * the caller will consume). tokens (n * 128, may be NULL) are compared with
 * the stored ones. */
kvs_fetch *kvs_fetch_start(kvs *s, const uint64_t *keys, const int32_t *tokens, int n);
/* 1 arrived intact (*payload set, valid until kvs_fetch_free), 0 still
 * pending, -1 miss. */
int kvs_fetch_poll(kvs_fetch *f, int i, const void **payload);
/* Blocks until block i is settled (or the fetch is cancelled); 0 ok
 * (*payload set), -1 miss. */
int kvs_fetch_wait(kvs_fetch *f, int i, const void **payload);
/* Blocks until all are settled; the number of leading blocks that arrived. */
int kvs_fetch_wait_all(kvs_fetch *f);
/* Cancels without waiting for I/O: blocks still queued settle as misses at
 * once and every waiter wakes (a block whose read is in progress reads as a
 * miss to kvs_fetch_wait from now on). */
void kvs_fetch_cancel(kvs_fetch *f);
/* Cancels and frees; never waits for reads in progress (the fetch thread
 * doing the last of them frees what is left). */
void kvs_fetch_free(kvs_fetch *f);

/* --- swap-in: fetched blocks into the engine's pool, layer by layer ------- */
typedef struct kvs_swapin kvs_swapin;
/* A helper thread copies layer 0 of blocks 0..n-1 into dst[i] (block_bytes
 * each, the same layout), then layer 1, ...; each layer is published when
 * all of its blocks are in place, so the forward pass of layer l can run
 * while later layers still arrive. Blocks after the first miss are not
 * copied. The fetch must outlive the swap-in. */
kvs_swapin *kvs_swapin_start(kvs_fetch *f, int n, void *const *dst);
/* true when layer l is in place (non-blocking). */
bool kvs_swapin_layer_ready(kvs_swapin *w, int l);
/* Blocks until layer l is in place; returns the number of leading blocks it
 * holds (the same for every layer). */
int kvs_swapin_wait_layer(kvs_swapin *w, int l);
/* Waits for every layer; the number of leading blocks swapped in. */
int kvs_swapin_finish(kvs_swapin *w);
/* Stops the copy after the layer in progress (unless finished) and frees.
 * With its fetch cancelled first (kvs_fetch_cancel), never waits for I/O. */
void kvs_swapin_free(kvs_swapin *w);

/* --- helpers shared with the simulator and the tools ---------------------- */
const char *kvs_class_name(kvs_class c);
/* "chat" | "agent" -> class; -1 if unknown. */
int kvs_class_parse(const char *s);
/* Parses "3d", "12h", "30m", "45s" or plain seconds; -1 on error. */
double kvs_parse_duration(const char *s);
/* Parses "10G", "512M", "64K" or plain bytes; 0 with ok=false on error. */
size_t kvs_parse_size(const char *s, bool *ok);

#endif
