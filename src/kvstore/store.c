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

size_t kvs_file_cap(const kvs_layout *lay) {
    return (kvs_file_bytes(lay) + KVS_IO_ALIGN - 1) / KVS_IO_ALIGN * KVS_IO_ALIGN;
}

void kvs_file_path(char *buf, size_t n, const char *root, uint64_t key) {
    snprintf(buf, n, "%s/%02x/%016" PRIx64 ".kvb", root, (unsigned)(key >> 56), key);
}

const char *kvs_read_status_name(kvs_read_status s) {
    static const char *names[] = {"ok",      "missing",        "truncated", "foreign",
                                  "corrupt", "token mismatch", "I/O error"};
    return (unsigned)s < sizeof names / sizeof *names ? names[s] : "?";
}

/* XXH3-64 of the file image with the header's checksum field zeroed. */
static uint64_t checksum(const unsigned char *file, size_t bytes) {
    kvs_hdr z;
    memcpy(&z, file, sizeof z);
    z.checksum = 0;
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, &z, sizeof z);
    XXH3_64bits_update(st, file + sizeof z, bytes - sizeof z);
    uint64_t sum = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return sum;
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

/* O_DIRECT read of a whole file of `bytes` into buf (KVS_IO_ALIGN-aligned,
 * kvs_file_cap bytes): aligned requests, the last one cut short by EOF. */
static int read_direct(int fd, void *buf, size_t bytes) {
    size_t cap = (bytes + KVS_IO_ALIGN - 1) / KVS_IO_ALIGN * KVS_IO_ALIGN, got = 0;
    while (got < bytes) {
        ssize_t r = pread(fd, (char *)buf + got, cap - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0 || (got + (size_t)r < bytes && (size_t)r % KVS_IO_ALIGN)) return -1;
        got += (size_t)r;
    }
    return got == bytes ? 0 : -1;
}

static int open_tmp(const char *root, uint64_t key, char *tmp, size_t n, bool *direct) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%02x", root, (unsigned)(key >> 56));
    for (int attempt = 0; attempt < 8; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(tmp, n, "%s/.%016" PRIx64 ".%ld.%ld.%ld%09ld.tmp", dir, key, (long)getpid(),
                 (long)syscall(SYS_gettid), (long)ts.tv_sec, (long)ts.tv_nsec);
        int fd =
            open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (*direct ? O_DIRECT : 0), 0644);
        if (fd < 0 && *direct && errno == EINVAL) { /* no O_DIRECT on this filesystem */
            *direct = false;
            fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        }
        if (fd >= 0) return fd;
        if (errno == ENOENT && mkdir(dir, 0755) < 0 && errno != EEXIST) return -1;
        if (errno != ENOENT && errno != EEXIST) return -1;
    }
    return -1;
}

int kvs_file_write(const char *root, const kvs_layout *lay, uint64_t key, uint64_t parent, int cls,
                   kvs_sync sync, bool direct, void *file, di_err *err) {
    char tmp[4200], path[4200];
    kvs_file_path(path, sizeof path, root, key);
    direct = direct && sync != KVS_SYNC_NONE; /* unsynced writes are cheaper through the cache */
    int fd = open_tmp(root, key, tmp, sizeof tmp, &direct);
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
    memcpy(file, &h, sizeof h);
    h.checksum = checksum(file, kvs_file_bytes(lay));
    memcpy(file, &h, sizeof h);
    const char *what = NULL;
    if (direct) /* whole pages straight from the staging buffer, then the exact size */
        memset((char *)file + kvs_file_bytes(lay), 0, kvs_file_cap(lay) - kvs_file_bytes(lay));
    if (di_write_all(fd, file, direct ? kvs_file_cap(lay) : kvs_file_bytes(lay)) < 0)
        what = "write";
    else if (direct && ftruncate(fd, (off_t)kvs_file_bytes(lay)) < 0)
        what = "truncate";
    else if (sync != KVS_SYNC_NONE && fdatasync(fd) < 0)
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
                              const int32_t *want_tokens, void *file, bool direct, int *cls,
                              double touch_older_s) {
    char path[4200];
    kvs_file_path(path, sizeof path, root, key);
    int fd = direct ? open(path, O_RDONLY | O_CLOEXEC | O_DIRECT) : -1;
    if (fd < 0 && (!direct || errno == EINVAL)) { /* no O_DIRECT here (tmpfs, some mounts) */
        direct = false;
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) return errno == ENOENT ? KVS_READ_MISSING : KVS_READ_IO;
    kvs_read_status rs = KVS_READ_OK;
    struct stat sb;
    kvs_hdr h;
    size_t bytes = kvs_file_bytes(lay);
    const unsigned char *img = file;
    /* One read of the whole image (a small header read first would make the
     * kernel read the payload in small synchronous pieces), by default with
     * O_DIRECT straight into the staging buffer: no page-cache copy, and a
     * block read once per hit does not evict what the host should cache. */
    if (fstat(fd, &sb) < 0) {
        rs = KVS_READ_IO;
    } else if ((uint64_t)sb.st_size != bytes) {
        rs = (uint64_t)sb.st_size < bytes ? KVS_READ_TRUNCATED : KVS_READ_FOREIGN;
    } else if ((direct ? read_direct(fd, file, bytes) : read_at(fd, file, bytes, 0)) < 0) {
        rs = KVS_READ_TRUNCATED;
    } else if (memcpy(&h, img, sizeof h),
               memcmp(h.magic, KVS_MAGIC, sizeof h.magic) || h.version != KVS_LAYOUT_VERSION ||
                   h.hdr_bytes != KVS_HDR_BYTES || h.fingerprint != lay->fingerprint ||
                   h.key != key || h.payload_bytes != lay->block_bytes ||
                   h.n_tokens != KVS_BLOCK_TOKENS) {
        rs = KVS_READ_FOREIGN;
    } else if (checksum(img, bytes) != h.checksum) {
        rs = KVS_READ_CORRUPT;
    } else if (want_tokens && memcmp(want_tokens, img + KVS_TOK_OFF, TOK_BYTES)) {
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
