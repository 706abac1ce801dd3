/* block_manager.h — paged KV blocks of MODEL_KV_BLOCK tokens: reference
 * counts, per-sequence block tables, prefix caching by hash chains, LRU
 * eviction of unreferenced cached blocks, and copy-on-write for forks.
 *
 * The manager owns a fixed set of block ids (taken once from the KV pool's
 * free list) and never touches KV memory: it decides which block holds which
 * positions, the runner moves the data. A FULL block's key is
 * XXH3_64bits_withSeed(its 128 token ids, previous block's key) (seed 0 for
 * the first block), so a key names the whole prefix up to the block's end.
 * Cached blocks also keep their tokens and parent key, so a lookup is exact
 * even under a 64-bit collision.
 *
 * Block states: free (never cached, or evicted), in use (ref > 0), cached
 * (ref == 0 but hashed: reusable by a later lookup, evicted least recently
 * released first when an allocation finds no free block). */
#ifndef DI_BLOCK_MANAGER_H
#define DI_BLOCK_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#define BM_BLOCK 128

typedef struct bm bm;

/* One sequence's block table: blocks[i] (a pool block id) holds positions
 * [i*128, (i+1)*128). n_hashed leading blocks are registered in the prefix
 * cache (or were found there); last_key is the key of block n_hashed-1. */
typedef struct bm_table {
    int *blocks;
    int n, cap;
    int n_hashed;
    uint64_t last_key;
} bm_table;

/* A block copy the runner must do before the step writes into dst. */
typedef struct bm_cow {
    int src, dst;
} bm_cow;

typedef struct bm_stats {
    int total, used, free, cached; /* used + free + cached == total */
    long long hit_tokens;          /* tokens served by bm_attach_prefix */
    long long lookups, evictions, cows;
} bm_stats;

/* ids: the n pool block ids the manager may hand out (copied). */
bm *bm_create(const int *ids, int n);
void bm_free(bm *b);
/* Prefix caching on/off (on by default). Off: nothing is hashed or found. */
void bm_set_caching(bm *b, bool on);
bool bm_caching(const bm *b);
bm_stats bm_get_stats(const bm *b);
/* Blocks that could be handed out now (free + cached). */
int bm_n_available(const bm *b);

/* The hash-chain keys of the full blocks of tokens[0..n): keys[i] names the
 * prefix tokens[0 .. (i+1)*128). Returns the number of keys (n / 128). The
 * same keys name blocks anywhere (a persistent store, another instance). */
int bm_chain_keys(const int *tokens, int n, uint64_t *keys);
/* Tokens of the longest cached prefix of tokens[0..n) (a multiple of 128);
 * a pure query. */
int bm_lookup(const bm *b, const int *tokens, int n);
/* For an empty table: takes references on the longest cached prefix of
 * tokens[0..n), at most max_tokens tokens (rounded down to whole blocks).
 * Returns the number of tokens attached. */
int bm_attach_prefix(bm *b, bm_table *t, const int *tokens, int n, int max_tokens);
/* Makes positions [from, to) writable: appends blocks up to position `to`
 * and, when the block holding `from` is shared, replaces it with a private
 * copy target (copy-on-write) reported in *cow (cow->src = -1 if none).
 * All or nothing: returns -1 and changes nothing when blocks run out. */
int bm_reserve(bm *b, bm_table *t, int from, int to, bm_cow *cow);
/* Blocks bm_reserve(b, t, from, to) would take now (appended + copied). */
int bm_reserve_need(const bm *b, const bm_table *t, int from, int to);
/* After the step: registers the table's newly FULL blocks among
 * tokens[0..n_computed) in the prefix cache. */
void bm_commit(bm *b, bm_table *t, const int *tokens, int n_computed);
/* dst (empty) shares every block of src (references taken). */
void bm_fork(bm *b, const bm_table *src, bm_table *dst);
/* Drops every reference of the table (last block first, so a sequence's
 * tail is evicted before its head) and empties it; keeps its array. */
void bm_release(bm *b, bm_table *t);
void bm_table_free(bm_table *t);

/* Reference count of a pool block id (tests). */
int bm_refcount(const bm *b, int id);

#endif
