/* test_kvstore.c — the persistent KV block store in one process: round trip
 * through match/fetch/swap-in, damaged files (corrupt, truncated, foreign
 * version or model, other tokens, a crash's leftovers) read as misses, TTL
 * expiry per class, LRU capacity eviction, the index rebuilt at start-up,
 * and the in-memory index against a reference under random churn. The
 * multi-process tests are in test_kvstore_mp.c. */
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "engine/block_manager.h"
#include "harness.h"
#include "kvs_test.h"
#include "kvstore/kvs_index.h"
#include "kvstore/kvs_internal.h"

#define NB 6

typedef struct {
    char *dir;
    kvs_layout lay;
    kvs *s;
    int32_t tok[NB * 128];
    uint64_t keys[NB];
} fixture;

/* Opens a store and writes NB chained blocks (payload seed = block index + 1). */
static int fx_open(fixture *fx, const kvs_opts *o, kvs_class cls) {
    memset(fx, 0, sizeof *fx);
    fx->dir = kvt_tmpdir();
    fx->lay = kvt_layout(0xF1F2F3F4ull);
    di_err err;
    fx->s = kvs_open(fx->dir, &fx->lay, o, &err);
    if (!fx->s) return -1;
    kvt_tokens(fx->tok, NB * 128, 3);
    bm_chain_keys(fx->tok, NB * 128, fx->keys);
    char payload[6144];
    for (int i = 0; i < NB; i++) {
        kvt_payload(payload, sizeof payload, (uint64_t)i + 1);
        if (kvs_put(fx->s, fx->keys[i], i ? fx->keys[i - 1] : 0, fx->tok + i * 128, payload, cls))
            return -1;
    }
    kvs_flush(fx->s);
    return 0;
}

static void fx_close(fixture *fx) {
    kvs_close(fx->s);
    kvt_rmdir(fx->dir);
}

static void block_path(fixture *fx, int i, char *buf, size_t n) {
    kvs_file_path(buf, n, kvs_dir(fx->s), fx->keys[i]);
}

/* Leading blocks of the whole chain that fetch intact with the right data. */
static int fetch_ok(fixture *fx, int n) {
    kvs_fetch *f = kvs_fetch_start(fx->s, fx->keys, fx->tok, n);
    int ok = kvs_fetch_wait_all(f);
    for (int i = 0; i < ok; i++) {
        const void *p;
        uint64_t seed;
        if (kvs_fetch_wait(f, i, &p) < 0 || !kvt_payload_ok(p, 6144, &seed) ||
            seed != (uint64_t)i + 1) {
            ok = -100;
            break;
        }
    }
    kvs_fetch_free(f);
    return ok;
}

TEST(kvstore_round_trip) {
    fixture fx;
    CHECK(fx_open(&fx, NULL, KVS_CLASS_CHAT) == 0);
    CHECK(kvs_match(fx.s, fx.keys, NB, NB * 128 + 50) == NB);
    uint64_t other[2] = {fx.keys[0], 12345};
    CHECK(kvs_match(fx.s, other, 2, 256) == 1);
    CHECK(fetch_ok(&fx, NB) == NB);
    /* Swap-in: layer by layer into separate destination blocks. */
    kvs_fetch *f = kvs_fetch_start(fx.s, fx.keys, fx.tok, NB);
    char *dst = calloc(NB, 6144);
    void *ptrs[NB];
    for (int i = 0; i < NB; i++) ptrs[i] = dst + (size_t)i * 6144;
    kvs_swapin *w = kvs_swapin_start(f, NB, ptrs);
    CHECK(kvs_swapin_wait_layer(w, 0) == NB);
    CHECK(kvs_swapin_layer_ready(w, 0));
    CHECK(kvs_swapin_wait_layer(w, 2) == NB);
    CHECK(kvs_swapin_finish(w) == NB);
    for (int i = 0; i < NB; i++) {
        uint64_t seed;
        CHECKF(kvt_payload_ok(ptrs[i], 6144, &seed) && seed == (uint64_t)i + 1, "block %d", i);
    }
    kvs_swapin_free(w);
    kvs_fetch_free(f);
    CHECK(kvs_put(fx.s, fx.keys[0], 0, fx.tok, dst, KVS_CLASS_CHAT) == 1); /* already stored */
    free(dst);
    kvs_stats st = kvs_get_stats(fx.s);
    CHECK(st.blocks_written == NB && st.blocks_read == 2 * NB && st.puts_skipped >= 1);
    CHECK(st.match_tokens == NB * 128 + 50 + 256);
    CHECK(st.hit_tokens == NB * 128 + 128);
    long long lat = 0;
    for (int b = 0; b < KVS_LAT_BUCKETS; b++) lat += st.fetch_lat_us[b];
    CHECK(lat == 2 * NB);
    fx_close(&fx);
}

static void flip_byte(const char *path, off_t off) {
    int fd = open(path, O_RDWR);
    unsigned char c;
    if (pread(fd, &c, 1, off) == 1) {
        c ^= 0x40;
        if (pwrite(fd, &c, 1, off) != 1) abort();
    }
    close(fd);
}

TEST(kvstore_damaged_blocks_are_misses) {
    fixture fx;
    CHECK(fx_open(&fx, NULL, KVS_CLASS_CHAT) == 0);
    char p[4200];
    block_path(&fx, 4, p, sizeof p);
    flip_byte(p, 64 + 512 + 3000); /* payload byte */
    CHECK(fetch_ok(&fx, NB) == 4);
    block_path(&fx, 3, p, sizeof p);
    CHECK(truncate(p, 64 + 512 + 100) == 0);
    CHECK(fetch_ok(&fx, NB) == 3);
    block_path(&fx, 2, p, sizeof p);
    flip_byte(p, 8); /* layout version */
    CHECK(fetch_ok(&fx, NB) == 2);
    /* The index forgot them: match stops at the first (stat sees the
     * truncated size for block 3 only; 2 reads as present by size). */
    CHECK(kvs_match(fx.s, fx.keys, NB, NB * 128) == 2 ||
          kvs_match(fx.s, fx.keys, NB, NB * 128) == 3);
    /* Another model's block copied under this key: foreign fingerprint. */
    char dir2[4200];
    snprintf(dir2, sizeof dir2, "%s/other", fx.dir);
    kvs_layout lay2 = kvt_layout(0xABCDull);
    di_err err;
    kvs *s2 = kvs_open(dir2, &lay2, NULL, &err);
    CHECK(s2);
    char payload[6144];
    kvt_payload(payload, sizeof payload, 77);
    CHECK(kvs_match(s2, fx.keys, NB, NB * 128) == 0); /* other fingerprint, other directory */
    CHECK(kvs_put(s2, fx.keys[1], fx.keys[0], fx.tok + 128, payload, KVS_CLASS_CHAT) == 0);
    kvs_flush(s2);
    char p2[4200];
    kvs_file_path(p2, sizeof p2, kvs_dir(s2), fx.keys[1]);
    block_path(&fx, 1, p, sizeof p);
    CHECK(rename(p2, p) == 0);
    CHECK(fetch_ok(&fx, NB) == 1);
    kvs_close(s2);
    /* Other tokens under the same key (a 64-bit collision): a miss. */
    int32_t wrong[128];
    memcpy(wrong, fx.tok, sizeof wrong);
    wrong[5] ^= 1;
    kvs_fetch *f = kvs_fetch_start(fx.s, fx.keys, wrong, 1);
    CHECK(kvs_fetch_wait(f, 0, NULL) == -1);
    kvs_fetch_free(f);
    /* Block 0 itself is still good without the token check. */
    f = kvs_fetch_start(fx.s, fx.keys, NULL, 1);
    CHECK(kvs_fetch_wait_all(f) == 1);
    kvs_fetch_free(f);
    CHECK(kvs_get_stats(fx.s).read_misses >= 5);
    fx_close(&fx);
}

TEST(kvstore_crash_leftovers) {
    fixture fx;
    CHECK(fx_open(&fx, NULL, KVS_CLASS_CHAT) == 0);
    char p[4200], stale[4300], fresh[4300];
    /* A renamed but empty block (crash without fdatasync), an old temporary
     * file (crashed writer) and a new one (a live writer elsewhere). */
    block_path(&fx, 2, p, sizeof p);
    CHECK(truncate(p, 0) == 0);
    snprintf(stale, sizeof stale, "%s/00/.0000000000000001.1.1.1.tmp", kvs_dir(fx.s));
    snprintf(fresh, sizeof fresh, "%s/00/.0000000000000002.1.1.2.tmp", kvs_dir(fx.s));
    snprintf(p, sizeof p, "%s/00", kvs_dir(fx.s));
    mkdir(p, 0755);
    FILE *a = fopen(stale, "w"), *b = fopen(fresh, "w");
    CHECK(a && b);
    fclose(a);
    fclose(b);
    struct timeval old[2] = {{1000000, 0}, {1000000, 0}};
    CHECK(utimes(stale, old) == 0);
    kvs_close(fx.s);
    di_err err;
    fx.s = kvs_open(fx.dir, &fx.lay, NULL, &err);
    CHECK(fx.s);
    CHECK(access(stale, F_OK) != 0 && access(fresh, F_OK) == 0);
    CHECK(kvs_match(fx.s, fx.keys, NB, NB * 128) == NB); /* by name; the read decides */
    CHECK(fetch_ok(&fx, NB) == 2);
    CHECK(kvs_match(fx.s, fx.keys, NB, NB * 128) == 2);
    fx_close(&fx);
}

static void age_block(fixture *fx, int i, double days) {
    char p[4200];
    block_path(fx, i, p, sizeof p);
    struct timeval tv[2];
    gettimeofday(&tv[0], NULL);
    tv[0].tv_sec -= (time_t)(days * 86400);
    tv[1] = tv[0];
    utimes(p, tv);
}

TEST(kvstore_ttl_per_class) {
    fixture fx;
    CHECK(fx_open(&fx, NULL, KVS_CLASS_AGENT) == 0); /* blocks 0..5 agent */
    /* Rewrite blocks 3..5 as chat under new keys: a second chain. */
    int32_t tok2[NB * 128];
    uint64_t keys2[NB];
    kvt_tokens(tok2, NB * 128, 9);
    bm_chain_keys(tok2, NB * 128, keys2);
    char payload[6144];
    kvt_payload(payload, sizeof payload, 5);
    for (int i = 0; i < NB; i++)
        kvs_put(fx.s, keys2[i], 0, tok2 + i * 128, payload, KVS_CLASS_CHAT);
    kvs_flush(fx.s);
    char p[4200];
    for (int i = 0; i < NB; i++) {
        age_block(&fx, i, 4); /* agent: past 3 days */
        kvs_file_path(p, sizeof p, kvs_dir(fx.s), keys2[i]);
        struct timeval tv[2];
        gettimeofday(&tv[0], NULL);
        tv[0].tv_sec -= (time_t)((i < 2 ? 8 : 4) * 86400); /* chat: 2 past 7 days */
        tv[1] = tv[0];
        utimes(p, tv);
    }
    kvs_close(fx.s);
    di_err err;
    fx.s = kvs_open(fx.dir, &fx.lay, NULL, &err); /* scan, classes from headers, sweep */
    CHECK(fx.s);
    CHECK(kvs_match(fx.s, fx.keys, NB, NB * 128) == 0);
    CHECK(kvs_match(fx.s, keys2 + 2, NB - 2, 0) == NB - 2);
    CHECK(kvs_match(fx.s, keys2, NB, NB * 128) == 0);
    kvs_stats st = kvs_get_stats(fx.s);
    CHECKF(st.evictions_ttl == NB + 2, "ttl evictions %lld", st.evictions_ttl);
    block_path(&fx, 0, p, sizeof p);
    CHECK(access(p, F_OK) != 0);
    kvs_close(fx.s);
    /* Configured TTLs: chat 1 day expires the rest; negative never expires. */
    kvs_opts o = {.ttl_s = {86400, -1}};
    fx.s = kvs_open(fx.dir, &fx.lay, &o, &err);
    CHECK(fx.s);
    CHECK(kvs_get_stats(fx.s).index_blocks == 0);
    fx_close(&fx);
}

TEST(kvstore_capacity_lru) {
    fixture fx;
    size_t fb = 64 + 512 + 6144;
    kvs_opts o = {.capacity_bytes = 5 * fb, .write_threads = 1}; /* writes in put order */
    CHECK(fx_open(&fx, &o, KVS_CLASS_CHAT) == 0);                /* 6 blocks: over 5 */
    kvs_stats st = kvs_get_stats(fx.s);
    CHECKF(st.index_bytes <= (long long)(5 * fb) && st.evictions_capacity >= 1,
           "bytes %lld evictions %lld", st.index_bytes, st.evictions_capacity);
    char p[4200];
    block_path(&fx, 0, p, sizeof p);
    CHECK(access(p, F_OK) != 0); /* oldest went first */
    block_path(&fx, NB - 1, p, sizeof p);
    CHECK(access(p, F_OK) == 0);
    /* A block just used survives the next eviction; the oldest unused goes. */
    int first = NB - (int)st.index_blocks;
    kvs_fetch *f = kvs_fetch_start(fx.s, fx.keys + first, NULL, 1);
    CHECK(kvs_fetch_wait_all(f) == 1);
    kvs_fetch_free(f);
    usleep(2000);
    char payload[6144];
    int32_t tok[128 * 3];
    uint64_t k[3];
    kvt_tokens(tok, 128 * 3, 42);
    bm_chain_keys(tok, 128 * 3, k);
    kvt_payload(payload, sizeof payload, 9);
    for (int i = 0; i < 3; i++) kvs_put(fx.s, k[i], 0, tok + 128 * i, payload, KVS_CLASS_CHAT);
    kvs_flush(fx.s);
    block_path(&fx, first, p, sizeof p);
    CHECK(access(p, F_OK) == 0);
    block_path(&fx, first + 1, p, sizeof p);
    CHECK(access(p, F_OK) != 0);
    CHECK(kvs_get_stats(fx.s).index_bytes <= (long long)(5 * fb));
    fx_close(&fx);
}

TEST(kvstore_index_rebuilt_at_startup) {
    fixture fx;
    CHECK(fx_open(&fx, NULL, KVS_CLASS_CHAT) == 0);
    kvs_close(fx.s);
    di_err err;
    fx.s = kvs_open(fx.dir, &fx.lay, NULL, &err);
    CHECK(fx.s);
    kvs_stats st = kvs_get_stats(fx.s);
    CHECK(st.index_blocks == NB && st.index_bytes == NB * (64 + 512 + 6144));
    /* Hits come from the index: remove a file behind its back, the match
     * still says hit (metadata only) and the fetch settles it as a miss. */
    char p[4200];
    block_path(&fx, 3, p, sizeof p);
    unlink(p);
    CHECK(kvs_match(fx.s, fx.keys, NB, NB * 128) == NB);
    CHECK(fetch_ok(&fx, NB) == 3);
    CHECK(kvs_match(fx.s, fx.keys, NB, NB * 128) == 3);
    fx_close(&fx);
}

TEST(kvstore_bad_layout_and_helpers) {
    size_t off[1] = {100}, bytes[1] = {200};
    kvs_layout lay = {.fingerprint = 1,
                      .block_bytes = 256,
                      .n_layers = 1,
                      .layer_off = off,
                      .layer_bytes = bytes};
    di_err err = {{0}};
    CHECK(kvs_open("/tmp", &lay, NULL, &err) == NULL);
    CHECK(strstr(err.msg, "layer 0"));
    CHECK(kvs_parse_duration("3d") == 3 * 86400 && kvs_parse_duration("90m") == 5400);
    CHECK(kvs_parse_duration("x") < 0 && kvs_parse_duration("5q") < 0);
    bool ok;
    CHECK(kvs_parse_size("2G", &ok) == 2ull << 30 && ok);
    CHECK(kvs_parse_size("512MiB", &ok) == 512ull << 20 && ok);
    kvs_parse_size("12Z", &ok);
    CHECK(!ok);
    CHECK(kvs_class_parse("agent") == KVS_CLASS_AGENT && kvs_class_parse("bot") == -1);
}

TEST(kvstore_index_random_churn) {
    enum { N = 3000 };
    static uint64_t ref_key[N];
    static int present[N];
    kvs_index *ix = kvs_index_create();
    uint64_t r = 88172645463325252ull;
    long long n = 0;
    for (int step = 0; step < 40000; step++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int k = (int)(r % N);
        /* Keys crowd into few home slots to exercise long runs. */
        ref_key[k] = (uint64_t)k * 0x100000001ull;
        if ((r >> 20) & 1) {
            if (!present[k]) n++;
            kvs_index_set(ix, ref_key[k], 10, (double)step, 0);
            present[k] = 1;
        } else {
            CHECK(kvs_index_remove(ix, ref_key[k]) == (bool)present[k]);
            if (present[k]) n--;
            present[k] = 0;
        }
    }
    CHECK(kvs_index_count(ix) == n && kvs_index_bytes(ix) == (unsigned long long)n * 10);
    for (int k = 0; k < N; k++)
        if (ref_key[k]) CHECKF((kvs_index_find(ix, ref_key[k]) != NULL) == present[k], "key %d", k);
    /* Capacity: evicts the least recently used down to the low watermark. */
    double ttl[KVS_N_CLASS] = {-1, -1};
    kvs_victim *v;
    int m = kvs_index_evict(ix, 1e9, ttl, (uint64_t)n * 5, 0.5, &v);
    CHECK(m > 0 && kvs_index_bytes(ix) <= (unsigned long long)n * 5 / 2);
    for (int i = 1; i < m; i++) CHECK(!v[i].expired);
    free(v);
    kvs_index_free(ix);
}
