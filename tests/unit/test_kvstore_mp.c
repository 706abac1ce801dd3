/* test_kvstore_mp.c — the KV store shared by processes (fork): each sees
 * the blocks the other wrote after it started, and a stress run of writers
 * overwriting the same keys, readers, and evictions racing in several
 * processes never yields a torn or mixed block (every block read as intact
 * must verify against its own seed). */
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/block_manager.h"
#include "harness.h"
#include "kvs_test.h"
#include "kvstore/kvs_internal.h"

static int chain(int seed, int32_t *tok, uint64_t *keys) {
    kvt_tokens(tok, 4 * 128, seed);
    return bm_chain_keys(tok, 4 * 128, keys);
}

static void put_chain(kvs *s, const int32_t *tok, const uint64_t *keys, uint64_t seed0) {
    char payload[6144];
    for (int i = 0; i < 4; i++) {
        kvt_payload(payload, sizeof payload, seed0 + (uint64_t)i);
        kvs_put(s, keys[i], i ? keys[i - 1] : 0, tok + 128 * i, payload, KVS_CLASS_CHAT);
    }
    kvs_flush(s);
}

/* Leading blocks of the chain that arrive intact with seeds seed0 + i. */
static int read_chain(kvs *s, const int32_t *tok, const uint64_t *keys, uint64_t seed0) {
    int hit = kvs_match(s, keys, 4, 512);
    kvs_fetch *f = kvs_fetch_start(s, keys, tok, hit);
    int ok = kvs_fetch_wait_all(f);
    for (int i = 0; i < ok; i++) {
        const void *p;
        uint64_t seed;
        if (kvs_fetch_wait(f, i, &p) < 0 || !kvt_payload_ok(p, 6144, &seed) ||
            seed != seed0 + (uint64_t)i)
            ok = -1;
    }
    kvs_fetch_free(f);
    return ok;
}

TEST(kvstore_two_processes_share_blocks) {
    char *dir = kvt_tmpdir();
    kvs_layout lay = kvt_layout(77);
    int32_t tx[512], ty[512];
    uint64_t kx[4], ky[4];
    chain(1, tx, kx);
    chain(2, ty, ky);
    int to_parent[2], to_child[2];
    CHECK(pipe(to_parent) == 0 && pipe(to_child) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        di_err err;
        char c = 0;
        kvs *s = kvs_open(dir, &lay, NULL, &err);
        if (!s) _exit(10);
        put_chain(s, tx, kx, 100);
        if (write(to_parent[1], "x", 1) != 1 || read(to_child[0], &c, 1) != 1) _exit(11);
        int rc = read_chain(s, ty, ky, 200) == 4 ? 0 : 12;
        kvs_close(s);
        _exit(rc);
    }
    di_err err;
    kvs *s = kvs_open(dir, &lay, NULL, &err);
    CHECK(s);
    char c;
    CHECK(read(to_parent[0], &c, 1) == 1);
    CHECK(read_chain(s, tx, kx, 100) == 4); /* written by the child after we opened */
    put_chain(s, ty, ky, 200);
    CHECK(write(to_child[1], "y", 1) == 1);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    kvs_close(s);
    close(to_parent[0]), close(to_parent[1]), close(to_child[0]), close(to_child[1]);
    kvt_rmdir(dir);
}

enum { STRESS_PROCS = 4, STRESS_OPS = 150, STRESS_KEYS = 16, STRESS_BYTES = 256 << 10 };

static int stress_worker(const char *dir, int id) {
    static const size_t off[1] = {0}, bytes[1] = {STRESS_BYTES};
    kvs_layout lay = {.fingerprint = 99,
                      .block_bytes = STRESS_BYTES,
                      .n_layers = 1,
                      .layer_off = off,
                      .layer_bytes = bytes};
    size_t fb = 64 + 512 + STRESS_BYTES;
    kvs_opts o = {.capacity_bytes = 10 * fb, .sync = KVS_SYNC_NONE};
    di_err err;
    kvs *s = kvs_open(dir, &lay, &o, &err);
    if (!s) return 10;
    char *file = malloc(64 + 512 + STRESS_BYTES), *buf = file + KVS_PAYLOAD_OFF;
    int32_t tok[128];
    kvt_tokens(tok, 128, 5);
    uint64_t keys[STRESS_KEYS];
    for (int k = 0; k < STRESS_KEYS; k++) keys[k] = 0x1000 + (uint64_t)k * 0x0100000000000001ull;
    uint64_t r = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
    int rc = 0, good = 0;
    for (int op = 0; op < STRESS_OPS && !rc; op++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int k = (int)(r % STRESS_KEYS), kind = (int)((r >> 32) % 10);
        if (kind < 4) { /* overwrite with a new version (seed), racing others */
            kvt_payload(buf, STRESS_BYTES, r);
            memcpy(file + KVS_TOK_OFF, tok, sizeof tok);
            if (kvs_file_write(kvs_dir(s), &lay, keys[k], 0, KVS_CLASS_AGENT, KVS_SYNC_NONE, false,
                               file, &err) < 0)
                rc = 11;
        } else if (kind < 7) {
            memset(buf, 0, STRESS_BYTES);
            if (kvs_file_read(kvs_dir(s), &lay, keys[k], tok, file, false, NULL, -1) ==
                KVS_READ_OK) {
                if (!kvt_payload_ok(buf, STRESS_BYTES, NULL)) rc = 1;
                good++;
            }
        } else if (kind < 9) {
            int n = 1 + (int)((r >> 40) % 4);
            if (k + n > STRESS_KEYS) n = STRESS_KEYS - k;
            kvs_fetch *f = kvs_fetch_start(s, keys + k, NULL, n);
            for (int i = 0; i < n; i++) {
                const void *p;
                if (kvs_fetch_wait(f, i, &p) == 0) {
                    if (!kvt_payload_ok(p, STRESS_BYTES, NULL)) rc = 2;
                    good++;
                }
            }
            kvs_fetch_free(f);
        } else {
            kvs_match(s, keys, STRESS_KEYS, STRESS_KEYS * 128); /* learns others' blocks */
            kvs_sweep(s);                                       /* evicts: unlinks race reads */
        }
    }
    free(file);
    kvs_close(s);
    return rc ? rc : good ? 0 : 3;
}

TEST(kvstore_multiprocess_stress_never_torn) {
    char *dir = kvt_tmpdir();
    pid_t pids[STRESS_PROCS];
    for (int i = 0; i < STRESS_PROCS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) _exit(stress_worker(dir, i));
        CHECK(pids[i] > 0);
    }
    int bad = 0, last = 0;
    for (int i = 0; i < STRESS_PROCS; i++) {
        int status;
        waitpid(pids[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status)) bad++, last = status;
    }
    CHECKF(bad == 0, "%d workers failed (last status %d: 1/2 torn read, 3 no reads)", bad, last);
    kvt_rmdir(dir);
}
