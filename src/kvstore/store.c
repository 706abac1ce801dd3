/* store.c — the on-disk block format and its crash-safe reads and writes.
 *
 * One file per block: root/xx/<key as 16 hex>.kvb, root = DIR/<model
 * fingerprint>-v<layout version>, xx = the key's top byte (256 shards keep
 * directories small). Why a file per block rather than log-structured
 * segments: the directory is shared by many processes, possibly on a network
 * filesystem (NFS, CephFS, 3FS). With one file per block, a write is a
 * private temporary file renamed into place — rename is atomic on all of
 * them, so a reader sees the old block, the new one or none, never a mix,
 * with no cross-process lock or shared append offset; eviction is an unlink
 * that cannot disturb a reader that already opened the file; and the
 * directory listing *is* the index, so any process rebuilds it with a scan.
 * Blocks are large (hundreds of KiB to MiBs), so per-file metadata costs
 * little next to the data — the same granularity the reference system's
 * store reads at.
 *
 * File: a 64-byte header, the block's 128 token ids (int32), the payload.
 *   magic "DIKVBLK\0" | u32 layout version | u32 header bytes | u64 model
 *   fingerprint | u64 key | u64 parent key | u64 payload bytes | u32 tokens |
 *   u32 traffic class | u64 XXH3-64 of (header with this field 0, tokens,
 *   payload).
 * A read checks the size, every header field against what was asked, the
 * checksum and (when given) the tokens: a truncated, corrupt or foreign file
 * is a miss, never wrong data.
 *
 * Durability (kvs_sync): the temporary file is fdatasync'ed before the rename
 * by default, so a renamed block survives power loss whole; without it a
 * crash may leave a renamed but empty file, which the checksum catches. A
 * crashed writer's temporary file (".<key>.<pid>.<tid>.<ns>.tmp") is removed
 * by the next scan once older than KVS_TMP_STALE_S. The file's mtime is the
 * block's last use (reads refresh it), which TTL eviction goes by.
 * No global state. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvstore/kvs_internal.h"

typedef struct {
    char magic[8];
    uint32_t version, hdr_bytes;
    uint64_t fingerprint, key, parent, payload_bytes;
    uint32_t n_tokens, cls;
    uint64_t checksum;
} kvs_hdr;

_Static_assert(sizeof(kvs_hdr) == KVS_HDR_BYTES, "block header is 64 bytes");

#define TOK_BYTES (KVS_BLOCK_TOKENS * sizeof(int32_t))

double kvs_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t kvs_file_bytes(const kvs_layout *lay) {
    return KVS_HDR_BYTES + TOK_BYTES + lay->block_bytes;
}

void kvs_file_path(char *buf, size_t n, const char *root, uint64_t key) {
    snprintf(buf, n, "%s/%02x/%016" PRIx64 ".kvb", root, (unsigned)(key >> 56), key);
}

const char *kvs_read_status_name(kvs_read_status s) {
    static const char *names[] = {"ok",      "missing",        "truncated", "foreign",
                                  "corrupt", "token mismatch", "I/O error"};
    return (unsigned)s < sizeof names / sizeof *names ? names[s] : "?";
}

static uint64_t checksum(const kvs_hdr *h, const int32_t *tokens, const void *payload,
                         size_t payload_bytes) {
    kvs_hdr z = *h;
    z.checksum = 0;
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, &z, sizeof z);
    XXH3_64bits_update(st, tokens, TOK_BYTES);
    XXH3_64bits_update(st, payload, payload_bytes);
    uint64_t sum = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return sum;
}

static int write_all(int fd, struct iovec *iov, int n) {
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

static int read_at(int fd, void *buf, size_t n, off_t off) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

/* The whole file in one vectored read: a small header read first would
 * make the kernel treat the file as random access and read the payload in
 * small synchronous pieces (5x slower on a cold cache). */
static int read_whole(int fd, kvs_hdr *h, int32_t *tok, void *payload, size_t payload_bytes) {
    struct iovec iov[3] = {{h, sizeof *h}, {tok, TOK_BYTES}, {payload, payload_bytes}};
    struct iovec *v = iov;
    int n = 3;
    off_t off = 0;
    while (n > 0) {
        ssize_t r = preadv(fd, v, n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        off += r;
        while (n > 0 && (size_t)r >= v->iov_len) {
            r -= (ssize_t)v->iov_len;
            v++;
            n--;
        }
        if (n > 0) {
            v->iov_base = (char *)v->iov_base + r;
            v->iov_len -= (size_t)r;
        }
    }
    return 0;
}

static int open_tmp(const char *root, uint64_t key, char *tmp, size_t n) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%02x", root, (unsigned)(key >> 56));
    for (int attempt = 0; attempt < 8; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(tmp, n, "%s/.%016" PRIx64 ".%ld.%ld.%ld%09ld.tmp", dir, key, (long)getpid(),
                 (long)syscall(SYS_gettid), (long)ts.tv_sec, (long)ts.tv_nsec);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) return fd;
        if (errno == ENOENT && mkdir(dir, 0755) < 0 && errno != EEXIST) return -1;
        if (errno != ENOENT && errno != EEXIST) return -1;
    }
    return -1;
}

int kvs_file_write(const char *root, const kvs_layout *lay, uint64_t key, uint64_t parent,
                   const int32_t *tokens, const void *payload, int cls, kvs_sync sync,
                   di_err *err) {
    char tmp[4200], path[4200];
    kvs_file_path(path, sizeof path, root, key);
    int fd = open_tmp(root, key, tmp, sizeof tmp);
    if (fd < 0) return di_errf(err, "KV store: cannot create %s: %s", tmp, strerror(errno));
    kvs_hdr h = {.version = KVS_LAYOUT_VERSION,
                 .hdr_bytes = KVS_HDR_BYTES,
                 .fingerprint = lay->fingerprint,
                 .key = key,
                 .parent = parent,
                 .payload_bytes = lay->block_bytes,
                 .n_tokens = KVS_BLOCK_TOKENS,
                 .cls = (uint32_t)cls};
    memcpy(h.magic, KVS_MAGIC, sizeof h.magic);
    h.checksum = checksum(&h, tokens, payload, lay->block_bytes);
    struct iovec iov[3] = {
        {&h, sizeof h}, {(void *)tokens, TOK_BYTES}, {(void *)payload, lay->block_bytes}};
    const char *what = NULL;
    if (write_all(fd, iov, 3) < 0)
        what = "write";
    else if (sync >= KVS_SYNC_DATA && fdatasync(fd) < 0)
        what = "fdatasync";
    int e = errno;
    if (close(fd) < 0 && !what) what = "close", e = errno;
    if (!what && rename(tmp, path) < 0) what = "rename", e = errno;
    if (what) {
        unlink(tmp);
        return di_errf(err, "KV store: %s of %s failed: %s", what, path, strerror(e));
    }
    if (sync == KVS_SYNC_FULL) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%02x", root, (unsigned)(key >> 56));
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    return 0;
}

kvs_read_status kvs_file_read(const char *root, const kvs_layout *lay, uint64_t key,
                              const int32_t *want_tokens, void *payload, int *cls,
                              double touch_older_s) {
    char path[4200];
    kvs_file_path(path, sizeof path, root, key);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? KVS_READ_MISSING : KVS_READ_IO;
    kvs_read_status rs = KVS_READ_OK;
    struct stat sb;
    kvs_hdr h;
    int32_t tok[KVS_BLOCK_TOKENS];
    if (fstat(fd, &sb) < 0) {
        rs = KVS_READ_IO;
    } else if ((uint64_t)sb.st_size != kvs_file_bytes(lay)) {
        rs = (uint64_t)sb.st_size < kvs_file_bytes(lay) ? KVS_READ_TRUNCATED : KVS_READ_FOREIGN;
    } else if (read_whole(fd, &h, tok, payload, lay->block_bytes) < 0) {
        rs = KVS_READ_TRUNCATED;
    } else if (memcmp(h.magic, KVS_MAGIC, sizeof h.magic) || h.version != KVS_LAYOUT_VERSION ||
               h.hdr_bytes != KVS_HDR_BYTES || h.fingerprint != lay->fingerprint || h.key != key ||
               h.payload_bytes != lay->block_bytes || h.n_tokens != KVS_BLOCK_TOKENS) {
        rs = KVS_READ_FOREIGN;
    } else if (checksum(&h, tok, payload, lay->block_bytes) != h.checksum) {
        rs = KVS_READ_CORRUPT;
    } else if (want_tokens && memcmp(want_tokens, tok, TOK_BYTES)) {
        rs = KVS_READ_TOKENS;
    }
    if (rs == KVS_READ_OK) {
        if (cls) *cls = h.cls < KVS_N_CLASS ? (int)h.cls : KVS_CLASS_UNKNOWN;
        double mt = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
        if (touch_older_s >= 0 && kvs_wall() - mt > touch_older_s) futimens(fd, NULL);
    }
    close(fd);
    return rs;
}

int kvs_file_read_class(const char *root, const kvs_layout *lay, uint64_t key) {
    char path[4200];
    kvs_file_path(path, sizeof path, root, key);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return KVS_CLASS_UNKNOWN;
    kvs_hdr h;
    int cls = KVS_CLASS_UNKNOWN;
    if (read_at(fd, &h, sizeof h, 0) == 0 && !memcmp(h.magic, KVS_MAGIC, sizeof h.magic) &&
        h.version == KVS_LAYOUT_VERSION && h.fingerprint == lay->fingerprint && h.key == key &&
        h.cls < KVS_N_CLASS)
        cls = (int)h.cls;
    close(fd);
    return cls;
}

bool kvs_file_stat(const char *root, uint64_t key, uint64_t *bytes, double *mtime) {
    char path[4200];
    kvs_file_path(path, sizeof path, root, key);
    struct stat sb;
    if (stat(path, &sb) < 0 || !S_ISREG(sb.st_mode)) return false;
    *bytes = (uint64_t)sb.st_size;
    *mtime = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
    return true;
}

static bool parse_key(const char *name, uint64_t *key) {
    if (strlen(name) != 20 || strcmp(name + 16, ".kvb")) return false;
    uint64_t k = 0;
    for (int i = 0; i < 16; i++) {
        char c = name[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        k = k << 4 | (uint64_t)d;
    }
    *key = k;
    return true;
}

long long kvs_scan(const char *root,
                   void (*fn)(void *ctx, uint64_t key, uint64_t bytes, double mtime), void *ctx) {
    long long n = 0;
    double now = kvs_wall();
    for (int x = 0; x < 256; x++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%02x", root, x);
        DIR *d = opendir(dir);
        if (!d) continue;
        int dfd = dirfd(d);
        struct dirent *de;
        while ((de = readdir(d))) {
            uint64_t key;
            struct stat sb;
            size_t len = strlen(de->d_name);
            bool tmp = de->d_name[0] == '.' && len > 4 && !strcmp(de->d_name + len - 4, ".tmp");
            if (!tmp && !parse_key(de->d_name, &key)) continue;
            if (fstatat(dfd, de->d_name, &sb, 0) < 0 || !S_ISREG(sb.st_mode)) continue;
            double mt = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
            if (tmp) {
                if (now - mt > KVS_TMP_STALE_S) unlinkat(dfd, de->d_name, 0);
                continue;
            }
            if ((unsigned)(key >> 56) != (unsigned)x) continue; /* misplaced: never looked up */
            fn(ctx, key, (uint64_t)sb.st_size, mt);
            n++;
        }
        closedir(d);
    }
    return n;
}
