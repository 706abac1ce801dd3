/* pack_file.c — --pack-cache: the packed copy of the weights (panels.c)
 * kept in a file, and mapped in place by later loads.
 *
 * --pack-weights packs the copy at every load (most of a second for
 * llama-1b), in anonymous memory: one copy per process. Given a cache
 * directory, the load that packs it also writes it there (to a temporary
 * file, renamed when whole), and later loads map that file read-only like
 * the checkpoint itself (filemap.c, in 2 MiB pages where the file system
 * allows): no packing, and the copy lives in the page cache, shared by
 * every process that serves the model.
 *
 * A file is one 4 KiB header (magic, the payload's bytes, a 16-byte key over
 * everything the copy's bits depend on, which panels.c computes, and a
 * checksum of the payload) and the copy as it lies in memory. The copy is
 * written on a thread of its own (seconds for llama-1b on a slow disk), so
 * the load that packs it does not wait; freeing the model does. A file whose
 * header does not match the expected key and size, or whose payload does
 * not match its checksum, is not used: the load packs again and replaces
 * it. The checksum (XXH3 over 64 MiB pieces on the thread pool: about
 * 0.1 s for llama-1b's 2.5 GB) is what makes a file torn by a crash or
 * damaged on disk harmless, rather than an fsync at every write (tens of
 * seconds on a slow disk). */
#include "model/model_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "base/pool.h"
#include "model/filemap.h"

#define PACK_HEADER 4096

static const char pack_magic[8] = {'D', 'I', 'P', 'A', 'C', 'K', '0', '1'};

typedef struct pack_header {
    char magic[8];
    uint64_t bytes; /* of the payload, which starts at PACK_HEADER */
    uint8_t key[PACK_KEY_BYTES];
    uint64_t checksum; /* pack_checksum of the payload */
} pack_header;

#define PIECE ((size_t)64 << 20)

typedef struct sum_job {
    const uint8_t *p;
    size_t bytes;
    uint64_t *piece;
} sum_job;

static void sum_task(void *ctx, int task, int n_tasks) {
    const sum_job *j = ctx;
    size_t at = (size_t)task * PIECE, n = j->bytes - at < PIECE ? j->bytes - at : PIECE;
    j->piece[task] = XXH3_64bits(j->p + at, n);
}

uint64_t pack_checksum(pool *p, const void *payload, size_t bytes) {
    int n = (int)((bytes + PIECE - 1) / PIECE);
    sum_job j = {payload, bytes, di_malloc(((size_t)n + 1) * sizeof(uint64_t))};
    pool_run(p, sum_task, &j, n);
    uint64_t sum = XXH3_64bits_withSeed(j.piece, (size_t)n * sizeof(uint64_t), bytes);
    free(j.piece);
    return sum;
}

int pack_file_open(const char *path, const uint8_t *key, size_t bytes, uint64_t *checksum) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    pack_header h;
    struct stat sb;
    if (pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && !memcmp(h.magic, pack_magic, 8) &&
        h.bytes == bytes && !memcmp(h.key, key, PACK_KEY_BYTES) && fstat(fd, &sb) == 0 &&
        (uint64_t)sb.st_size == PACK_HEADER + (uint64_t)bytes) {
        *checksum = h.checksum;
        return fd;
    }
    close(fd);
    return -1;
}

const void *pack_file_map(pool *p, int fd, const char *path, size_t bytes, uint64_t checksum,
                          pack_map *map) {
    *map = (pack_map){0};
    bool huge;
    void *base = filemap_open(fd, PACK_HEADER + bytes, &huge);
    close(fd);
    if (base == MAP_FAILED) return NULL;
    const uint8_t *payload = (const uint8_t *)base + PACK_HEADER;
    if (pack_checksum(p, payload, bytes) != checksum) {
        fprintf(stderr, "deepinfer: --pack-cache: %s does not match its checksum; packing again\n",
                path);
        munmap(base, PACK_HEADER + bytes);
        return NULL;
    }
    *map = (pack_map){base, PACK_HEADER + bytes};
    return payload;
}

void pack_file_unmap(pack_map *map) {
    if (map->base) munmap(map->base, map->size);
    *map = (pack_map){0};
}

/* Removes the temporary files of path that writers which are gone left
 * behind (killed while writing: each up to the whole copy). */
static void remove_stale(const char *dir, const char *name) {
    DIR *d = opendir(dir);
    if (!d) return;
    size_t n = strlen(name);
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid;
        unsigned seq;
        char end[8];
        if (strncmp(e->d_name, name, n) || e->d_name[n] != '.' ||
            sscanf(e->d_name + n, ".%ld.%u.%7s", &pid, &seq, end) != 3 || strcmp(end, "tmp") ||
            pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char p[4600];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
}

struct pack_writer {
    pthread_t thread;
    bool started;
    int fd;
    char path[4096], tmp[4200];
    uint8_t header[PACK_HEADER];
    const void *payload;
    size_t bytes;
};

static void *write_body(void *arg) {
    pack_writer *w = arg;
    int rc = di_write_all(w->fd, w->header, sizeof w->header) ||
             di_write_all(w->fd, w->payload, w->bytes);
    int err = errno;
    if (close(w->fd) != 0 && !rc) rc = -1, err = errno;
    if (!rc && rename(w->tmp, w->path) != 0) rc = -1, err = errno;
    if (rc) {
        unlink(w->tmp);
        fprintf(stderr, "deepinfer: --pack-cache: cannot write %s (%s)\n", w->path, strerror(err));
    }
    return NULL;
}

pack_writer *pack_file_write(pool *p, const char *path, const uint8_t *key, const void *payload,
                             size_t bytes) {
    /* the directory itself, not its parents: a mistyped path fails loudly */
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (slash && slash > path && mkdir(dir, 0777) != 0 && errno != EEXIST) goto fail;
    remove_stale(dir, slash ? slash + 1 : path);
    pack_writer *w = di_calloc(1, sizeof *w);
    /* one per writer, threads of one process included */
    static atomic_uint seq;
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.%ld.%u.tmp", path, (long)getpid(),
             atomic_fetch_add(&seq, 1));
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        free(w);
        goto fail;
    }
    pack_header h = {.bytes = bytes, .checksum = pack_checksum(p, payload, bytes)};
    memcpy(h.magic, pack_magic, 8);
    memcpy(h.key, key, PACK_KEY_BYTES);
    memcpy(w->header, &h, sizeof h);
    w->payload = payload;
    w->bytes = bytes;
    w->started = pthread_create(&w->thread, NULL, write_body, w) == 0;
    if (!w->started) write_body(w);
    return w;
fail:
    fprintf(stderr, "deepinfer: --pack-cache: cannot write %s (%s); the copy stays in memory\n",
            path, strerror(errno));
    return NULL;
}

void pack_file_finish(pack_writer *w) {
    if (!w) return;
    if (w->started) pthread_join(w->thread, NULL);
    free(w);
}
