/* cmd_kvbench.c — `deepinfer kv-bench`: the KV store's write and read
 * bandwidth at the real block size with random access, beside the raw
 * bandwidth of the same disk measured in the same run:
 *
 *   raw write   pwrite of block-sized chunks at shuffled offsets of one
 *               preallocated file, fdatasync per block (the store's default
 *               durability), --threads threads (as many as store writers);
 *   raw read    pread of the same chunks in another shuffled order after
 *               dropping them from the page cache, --threads threads;
 *   (both O_DIRECT, as the store's reads and synced writes, unless --buffered)
 *   store write kvs_put + kvs_flush: copy, checksum, temporary file,
 *               fdatasync, rename;
 *   store read  kvs_fetch of every block in shuffled order after dropping
 *               the files from the page cache, --threads fetch threads,
 *               checksums verified.
 *
 * The block size comes from --model (the model's real KV block: every
 * full-attention layer's entries for 128 tokens, f32) or --block-bytes.
 * The figure that matters is store / raw (target >= 70 %). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "kvstore/kvstore.h"

typedef struct {
    int fd;
    size_t bytes, slot; /* read length, and the distance between blocks */
    const int *order;
    int from, to;
    char *buf;
    bool sync; /* writer: fdatasync after each block */
    int err;
} raw_job;

static void *raw_writer(void *arg) {
    raw_job *j = arg;
    for (int i = j->from; i < j->to && !j->err; i++) {
        off_t off = (off_t)j->order[i] * (off_t)j->slot;
        if (pwrite(j->fd, j->buf, j->bytes, off) != (ssize_t)j->bytes) j->err = 1;
        if (j->sync && fdatasync(j->fd) < 0) j->err = 1;
    }
    return NULL;
}

static void *raw_reader(void *arg) {
    raw_job *j = arg;
    for (int i = j->from; i < j->to && !j->err; i++) {
        size_t done = 0;
        off_t off = (off_t)j->order[i] * (off_t)j->slot;
        while (done < j->bytes) {
            ssize_t r = pread(j->fd, j->buf + done, j->bytes - done, off + (off_t)done);
            if (r <= 0) {
                j->err = 1;
                break;
            }
            done += (size_t)r;
        }
    }
    return NULL;
}

static void shuffle(int *a, int n, uint64_t *s) {
    for (int i = 0; i < n; i++) a[i] = i;
    for (int i = n - 1; i > 0; i--) {
        *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
        int j = (int)(*s % (uint64_t)(i + 1)), t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

static int drop_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)f;
    if (flag == FTW_F) {
        int fd = open(p, O_RDONLY);
        if (fd >= 0) {
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
    }
    return 0;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

static int rm_blocks(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)f;
    size_t n = strlen(p);
    if (flag == FTW_F && n > 4 && !strcmp(p + n - 4, ".kvb")) unlink(p);
    return 0;
}

static double mbps(size_t bytes, double s) {
    return s > 0 ? (double)bytes / s / 1e6 : 0;
}

static double lat_pct(const kvs_stats *st, double q) {
    long long n = 0, c = 0;
    for (int b = 0; b < KVS_LAT_BUCKETS; b++) n += st->fetch_lat_us[b];
    for (int b = 0; b < KVS_LAT_BUCKETS; b++)
        if ((c += st->fetch_lat_us[b]) >= q * (double)n) return (double)(2ull << b) / 1000;
    return 0;
}

int cmd_kvbench(int argc, char **argv) {
    const char *model_dir = NULL, *dir = "build/kv-bench", *block = "4M", *sync = "data";
    int blocks = 0, threads = 2, keep = 0, buffered = 0, rounds = 3;
    const cli_opt opts[] = {
        {"--model", OPT_STR, &model_dir, "take the block size from this model (f32 KV)"},
        {"--block-bytes", OPT_STR, &block, "block payload size without --model (default 4M)"},
        {"--blocks", OPT_INT, &blocks,
         "blocks written and read (default: ~512 MiB worth, 16..256)"},
        {"--threads", OPT_INT, &threads, "read threads, raw and store (default 2)"},
        {"--dir", OPT_STR, &dir,
         "scratch directory on the disk to measure (default build/kv-bench)"},
        {"--sync", OPT_STR, &sync, "none | data (fdatasync per block, default)"},
        {"--rounds", OPT_INT, &rounds, "rounds of raw + store, medians reported (default 3)"},
        {"--keep", OPT_FLAG, &keep, "leave the store's files in DIR/store"},
        {"--buffered", OPT_FLAG, &buffered, "reads through the page cache (default O_DIRECT)"},
    };
    int rc =
        cli_parse(argc, argv, opts, sizeof opts / sizeof *opts, "deepinfer kv-bench [options]");
    if (rc) return rc == 1 ? 0 : rc;
    bool ok = true, fsync_each = strcmp(sync, "none") != 0;
    size_t bytes = kvs_parse_size(block, &ok);
    uint64_t fp = 0x6B7662656E6368ull;
    if (model_dir) {
        /* only the layout: bf16, no f32 copy */
        model *m =
            cli_load_model(model_dir, &(model_opts){.dtype = MODEL_DTYPE_BF16, .threads = 1});
        if (!m) return 1;
        bytes = model_kv_block_bytes(m);
        model_free(m);
        di_err err;
        if (kvs_fingerprint_model(model_dir, "f32", bytes, &fp, &err) < 0) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
    }
    if (!ok || bytes < 4096 || threads < 1 || rounds < 1 || rounds > 16) {
        fprintf(stderr,
                "kv-bench: need a block of at least 4 KiB, --threads >= 1, --rounds 1..16\n");
        return 2;
    }
    if (blocks <= 0) {
        blocks = (int)((512u << 20) / bytes);
        blocks = blocks < 16 ? 16 : blocks > 256 ? 256 : blocks;
    }
    size_t total = bytes * (size_t)blocks;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "kv-bench: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char path[4096];
    int *order = malloc(sizeof(int) * (size_t)blocks);
    /* Raw blocks sit KVS_IO_ALIGN apart so O_DIRECT reads them as the store
     * does its files (whole 4 KiB pages, the last one partly past the block). */
    size_t slot = (bytes + 4095) / 4096 * 4096;
    char *buf;
    if (posix_memalign((void **)&buf, 4096, slot * (size_t)threads)) return 1;
    uint64_t rs = 0x243F6A8885A308D3ull;
    for (size_t i = 0; i < slot * (size_t)threads / 8; i++) {
        rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
        ((uint64_t *)buf)[i] = rs;
    }

    /* The store, opened once; each round writes new keys. */
    snprintf(path, sizeof path, "%s/store", dir);
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    size_t off[1] = {0};
    kvs_layout lay = {.fingerprint = fp,
                      .block_bytes = bytes,
                      .n_layers = 1,
                      .layer_off = off,
                      .layer_bytes = &bytes};
    kvs_opts o = {.fetch_threads = threads,
                  .write_threads = threads,
                  .write_queue = 8,
                  .host_blocks = blocks,
                  .buffered_io = buffered,
                  .sync = fsync_each ? KVS_SYNC_DATA : KVS_SYNC_NONE};
    di_err err;
    kvs *s = kvs_open(path, &lay, &o, &err);
    if (!s) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    if (threads > 64) threads = 64;
    uint64_t *keys = malloc(sizeof(uint64_t) * (size_t)blocks);
    uint64_t *rkeys = malloc(sizeof(uint64_t) * (size_t)blocks);
    int32_t tok[KVS_BLOCK_TOKENS] = {0};
    double raw_w[16], raw_r[16], st_w[16], st_r[16];
    int got = blocks;
    bool direct = false;
    char raw_path[4200];
    snprintf(raw_path, sizeof raw_path, "%s/raw.bin", dir);
    /* Rounds interleave raw and store so that both see the same disk weather
     * (other tenants, host caches); medians are reported. */
    for (int round = 0; round < rounds; round++) {
        /* --- raw disk ------------------------------------------------- */
        int fd = open(raw_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        int wfd = buffered || !fsync_each ? -1 : open(raw_path, O_WRONLY | O_DIRECT);
        size_t wlen = wfd >= 0 ? slot : bytes; /* O_DIRECT: whole pages, as the store does */
        if (wfd < 0) wfd = dup(fd);
        if (fd < 0 || posix_fallocate(fd, 0, (off_t)(slot * (size_t)blocks))) {
            fprintf(stderr, "kv-bench: cannot allocate %zu bytes in %s\n", total, raw_path);
            return 1;
        }
        fsync(fd);
        shuffle(order, blocks, &rs);
        pthread_t th[64];
        raw_job jobs[64];
        double t0 = di_now();
        for (int t = 0; t < threads; t++) {
            jobs[t] = (raw_job){.fd = wfd,
                                .bytes = wlen,
                                .slot = slot,
                                .order = order,
                                .from = blocks * t / threads,
                                .to = blocks * (t + 1) / threads,
                                .buf = buf + (size_t)t * slot,
                                .sync = fsync_each};
            pthread_create(&th[t], NULL, raw_writer, &jobs[t]);
        }
        int raw_err = 0;
        for (int t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            raw_err |= jobs[t].err;
        }
        if (raw_err) {
            fprintf(stderr, "kv-bench: write to %s failed\n", raw_path);
            return 1;
        }
        raw_w[round] = di_now() - t0;
        close(wfd);
        syncfs(fd); /* both reads start from a quiet disk: no journal commit in flight */
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        shuffle(order, blocks, &rs);
        int rfd = buffered ? -1 : open(raw_path, O_RDONLY | O_DIRECT);
        direct = rfd >= 0;
        if (!direct) rfd = open(raw_path, O_RDONLY);
        t0 = di_now();
        for (int t = 0; t < threads; t++) {
            jobs[t] = (raw_job){.fd = rfd,
                                .bytes = direct ? slot : bytes,
                                .slot = slot,
                                .order = order,
                                .from = blocks * t / threads,
                                .to = blocks * (t + 1) / threads,
                                .buf = buf + (size_t)t * slot};
            pthread_create(&th[t], NULL, raw_reader, &jobs[t]);
        }
        for (int t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            raw_err |= jobs[t].err;
        }
        raw_r[round] = di_now() - t0;
        close(rfd);
        close(fd);
        unlink(raw_path);
        if (raw_err) {
            fprintf(stderr, "kv-bench: read from %s failed\n", raw_path);
            return 1;
        }

        /* --- the store -------------------------------------------------- */
        for (int i = 0; i < blocks; i++) {
            rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
            keys[i] = rs;
        }
        t0 = di_now();
        for (int i = 0; i < blocks; i++) {
            ((uint64_t *)buf)[0] = keys[i];
            while (kvs_put(s, keys[i], 0, tok, buf, KVS_CLASS_CHAT) < 0) usleep(200);
        }
        kvs_flush(s);
        st_w[round] = di_now() - t0;
        int dfd = open(kvs_dir(s), O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) syncfs(dfd), close(dfd);
        nftw(kvs_dir(s), drop_one, 16, FTW_PHYS);
        shuffle(order, blocks, &rs);
        for (int i = 0; i < blocks; i++) rkeys[i] = keys[order[i]];
        t0 = di_now();
        kvs_fetch *f = kvs_fetch_start(s, rkeys, NULL, blocks);
        int n_ok = 0;
        for (int i = 0; i < blocks; i++) n_ok += kvs_fetch_wait(f, i, NULL) == 0;
        st_r[round] = di_now() - t0;
        kvs_fetch_free(f);
        if (n_ok < got) got = n_ok;
        if (!keep || round + 1 < rounds) nftw(kvs_dir(s), rm_blocks, 16, FTW_PHYS);
    }
    kvs_stats st = kvs_get_stats(s);
    kvs_close(s);
    if (!keep) {
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        rmdir(dir);
    }
    double rw = cli_median(raw_w, rounds), rr = cli_median(raw_r, rounds);
    double sw = cli_median(st_w, rounds), sr = cli_median(st_r, rounds);

    printf("kv-bench: %d blocks of %.2f MiB (%s), random order, sync %s, %s I/O, %d read "
           "threads, dir %s\n",
           blocks, (double)bytes / 1048576.0, model_dir ? model_dir : "--block-bytes", sync,
           direct ? "O_DIRECT" : "buffered", threads, dir);
    printf("  write: raw disk %8.1f MB/s   store %8.1f MB/s   store/raw %5.1f %%  (median of %d)\n",
           mbps(total, rw), mbps(total, sw), 100 * rw / sw, rounds);
    printf("  read:  raw disk %8.1f MB/s   store %8.1f MB/s   store/raw %5.1f %%  (%d/%d intact)\n",
           mbps(total, rr), mbps(total, sr), 100 * rr / sr, got, blocks);
    printf("  fetch latency per block: p50 <= %.2f ms, p99 <= %.2f ms; %lld puts waited on a full "
           "queue\n",
           lat_pct(&st, 0.5), lat_pct(&st, 0.99), st.puts_dropped);
    free(order);
    free(keys);
    free(rkeys);
    free(buf);
    return got == blocks ? 0 : 1;
}
