/* fingerprint.c — the model fingerprint that names a store directory: KV
 * blocks are only reusable by the same model computing at the same
 * precision with the same block layout. It hashes (XXH3-64) config.json,
 * every *.safetensors shard's JSON header (tensor names, dtypes, shapes,
 * offsets) and a 4 KiB sample from the start and end of each shard's data
 * (so a retrained checkpoint of the same shape differs too), then the
 * compute tag and the block's byte size. Reads the files directly (no model
 * internals), so tools can fingerprint a checkpoint without loading it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvstore/kvstore.h"

#define SAMPLE     4096
#define MAX_HEADER (100u << 20)

static int is_shard(const struct dirent *d) {
    size_t n = strlen(d->d_name);
    return n > 12 && !strcmp(d->d_name + n - 12, ".safetensors");
}

static int hash_shard(XXH3_state_t *st, const char *path, di_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return di_errf(err, "KV store fingerprint: cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    uint64_t hlen = 0;
    int rc = 0;
    if (fstat(fd, &sb) < 0 || pread(fd, &hlen, 8, 0) != 8 || hlen > MAX_HEADER ||
        8 + hlen > (uint64_t)sb.st_size) {
        rc = di_errf(err, "KV store fingerprint: %s has no readable safetensors header", path);
    } else {
        size_t data = (size_t)sb.st_size - 8 - (size_t)hlen;
        size_t cap = (size_t)hlen + 2 * SAMPLE;
        char *buf = di_malloc(cap ? cap : 1);
        size_t head = data < SAMPLE ? data : SAMPLE;
        off_t tail_off = (off_t)(sb.st_size - (off_t)head);
        if (pread(fd, buf, (size_t)hlen, 8) != (ssize_t)hlen ||
            pread(fd, buf + hlen, head, (off_t)(8 + hlen)) != (ssize_t)head ||
            pread(fd, buf + hlen + head, head, tail_off) != (ssize_t)head)
            rc = di_errf(err, "KV store fingerprint: short read of %s", path);
        else
            XXH3_64bits_update(st, buf, (size_t)hlen + 2 * head);
        free(buf);
    }
    close(fd);
    return rc;
}

int kvs_fingerprint_model(const char *model_dir, const char *tag, size_t block_bytes, uint64_t *out,
                          di_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    size_t len;
    char *cfg = di_read_file(path, &len, err);
    if (!cfg) return -1;
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, cfg, len);
    free(cfg);
    struct dirent **names;
    int n = scandir(model_dir, &names, is_shard, alphasort);
    int rc = 0;
    if (n < 0)
        rc = di_errf(err, "KV store fingerprint: cannot list %s: %s", model_dir, strerror(errno));
    for (int i = 0; i < n; i++) {
        if (!rc) {
            snprintf(path, sizeof path, "%s/%s", model_dir, names[i]->d_name);
            XXH3_64bits_update(st, names[i]->d_name, strlen(names[i]->d_name));
            rc = hash_shard(st, path, err);
        }
        free(names[i]);
    }
    if (n >= 0) free(names);
    if (!rc && n == 0) rc = di_errf(err, "KV store fingerprint: no *.safetensors in %s", model_dir);
    const char *t = tag ? tag : "";
    XXH3_64bits_update(st, t, strlen(t) + 1);
    uint64_t bb = block_bytes;
    XXH3_64bits_update(st, &bb, sizeof bb);
    *out = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return rc;
}
