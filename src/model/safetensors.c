/* safetensors.c — maps one .safetensors file and validates its header.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON
 * {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
 * then the data area; offsets are relative to the data area. Everything in
 * the header is checked before use (bounded length, strict JSON without
 * duplicate keys, offsets inside the file, size == product(shape) x dtype
 * size with overflow checks), because checkpoints come from anywhere. The
 * mapping is MAP_PRIVATE + PROT_READ (filemap.c: in 2 MiB pages when it
 * can): bf16 weights are used in place from it. */
#include "model/safetensors.h"

#include "model/filemap.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *name;
    size_t size;
    st_dtype dtype;
} dtypes[] = {
    {"F32", 4, ST_F32},         {"F16", 2, ST_F16},    {"BF16", 2, ST_BF16},
    {"F8_E4M3", 1, ST_F8_E4M3}, {"F64", 8, ST_OTHER},  {"I64", 8, ST_OTHER},
    {"I32", 4, ST_OTHER},       {"I16", 2, ST_OTHER},  {"I8", 1, ST_OTHER},
    {"U64", 8, ST_OTHER},       {"U32", 4, ST_OTHER},  {"U16", 2, ST_OTHER},
    {"U8", 1, ST_OTHER},        {"BOOL", 1, ST_OTHER}, {"F8_E5M2", 1, ST_OTHER},
};

size_t st_dtype_size(const char *name) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(dtypes[i].name, name)) return dtypes[i].size;
    return 0;
}

static st_dtype dtype_of(const char *name) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(dtypes[i].name, name)) return dtypes[i].dtype;
    return ST_OTHER;
}

void st_close(st_file *f) {
    if (f->map) munmap(f->map, f->size);
    free(f->path);
    free(f->tensors);
    free(f->names);
    memset(f, 0, sizeof *f);
}

/* Validates one header entry and fills t (name pointer set by the caller). */
static int parse_entry(st_file *f, const char *key, json_t *v, const uint8_t *data,
                       uint64_t data_size, st_tensor *t, di_err *err) {
    if (!json_is_object(v))
        return di_errf(err, "%s: tensor %s: header entry is not an object", f->path, key);
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) ||
        json_array_size(off) != 2)
        return di_errf(err,
                       "%s: tensor %s: malformed header entry (needs dtype, shape, data_offsets)",
                       f->path, key);
    const char *dname = json_string_value(dt);
    size_t esize = st_dtype_size(dname);
    if (!esize) return di_errf(err, "%s: tensor %s: unknown dtype %.15s", f->path, key, dname);
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dname);
    t->dtype = dtype_of(dname);
    size_t nd = json_array_size(sh);
    if (nd > ST_MAX_DIMS) return di_errf(err, "%s: tensor %s: %zu dimensions", f->path, key, nd);
    t->ndim = (int)nd;
    uint64_t count = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(sh, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return di_errf(err, "%s: tensor %s: bad shape entry", f->path, key);
        t->shape[i] = json_integer_value(d);
        if (__builtin_mul_overflow(count, (uint64_t)t->shape[i], &count))
            return di_errf(err, "%s: tensor %s: shape overflows", f->path, key);
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(count, (uint64_t)esize, &bytes))
        return di_errf(err, "%s: tensor %s: size overflows", f->path, key);
    json_t *b0 = json_array_get(off, 0), *b1 = json_array_get(off, 1);
    if (!json_is_integer(b0) || !json_is_integer(b1) || json_integer_value(b0) < 0 ||
        json_integer_value(b1) < json_integer_value(b0))
        return di_errf(err, "%s: tensor %s: bad data_offsets", f->path, key);
    uint64_t begin = (uint64_t)json_integer_value(b0), end = (uint64_t)json_integer_value(b1);
    if (end > data_size)
        return di_errf(err,
                       "%s: tensor %s: data_offsets [%llu, %llu) beyond the data area (%llu bytes; "
                       "file truncated?)",
                       f->path, key, (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)data_size);
    if (end - begin != bytes)
        return di_errf(err, "%s: tensor %s: %llu bytes stored but shape x %s needs %llu", f->path,
                       key, (unsigned long long)(end - begin), dname, (unsigned long long)bytes);
    t->data = data + begin;
    t->nbytes = (size_t)bytes;
    return 0;
}

static int parse_header(st_file *f, di_err *err) {
    const uint8_t *base = f->map;
    if (f->size < 8)
        return di_errf(err, "%s: truncated (%zu bytes, no header length)", f->path, f->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | base[i];
    if (hlen > ST_MAX_HEADER || hlen > f->size - 8)
        return di_errf(err, "%s: malformed header: length %llu exceeds the file (%zu bytes)",
                       f->path, (unsigned long long)hlen, f->size);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return di_errf(err, "%s: malformed header JSON: %s", f->path, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return di_errf(err, "%s: malformed header: not a JSON object", f->path);
    }
    const uint8_t *data = base + 8 + hlen;
    uint64_t data_size = f->size - 8 - hlen;
    size_t n = json_object_size(root), names_len = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) names_len += strlen(key) + 1;
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    f->names = malloc(names_len ? names_len : 1);
    if (!f->tensors || !f->names) {
        json_decref(root);
        return di_errf(err, "%s: out of memory for %zu header entries", f->path, n);
    }
    char *np = f->names;
    int rc = 0;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) continue;
        st_tensor *t = &f->tensors[f->n_tensors];
        if ((rc = parse_entry(f, key, v, data, data_size, t, err))) break;
        size_t kl = strlen(key) + 1;
        memcpy(np, key, kl);
        t->name = np;
        np += kl;
        f->n_tensors++;
    }
    json_decref(root);
    return rc;
}

int st_open(st_file *f, const char *path, bool lazy, di_err *err) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return di_errf(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return di_errf(err, "%s: not a regular file", path);
    }
    f->path = di_strdup(path);
    f->size = (size_t)sb.st_size;
    if (f->size > 0) {
        bool huge = false;
        void *p = lazy ? filemap_open_lazy(fd, f->size) : filemap_open(fd, f->size, &huge);
        if (p == MAP_FAILED) {
            close(fd);
            int rc = di_errf(err, "%s: mmap failed: %s", path, strerror(errno));
            st_close(f);
            return rc;
        }
        f->map = p;
        if (f->size >= FILEMAP_HUGE_MIN && !lazy)
            di_log(DI_LOG_INFO, "%s: mapped in %s pages", path, huge ? "2 MiB" : "4 KiB");
    }
    close(fd);
    if (parse_header(f, err)) {
        st_close(f);
        return -1;
    }
    return 0;
}
