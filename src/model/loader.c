/* loader.c — model_load / model_free and the tensor lookup every family's
 * layer loader uses (model_get_mat, model_get_vec).
 *
 * Shards: model.safetensors.index.json's weight_map names them; otherwise
 * model.safetensors, otherwise every *.safetensors in the directory. Each is
 * mapped read-only (safetensors.c validates it); tensor names go into one
 * sorted table for lookup.
 *
 * Compute dtype: with bf16 (the default) bf16-stored matrices are used in
 * place from the mapping (filemap.c maps large files in 2 MiB pages), so
 * resident memory is the checkpoint plus small f32 vectors; f16/f32/fp8
 * matrices become bf16 copies. f32 converts to f32 (in place when already
 * f32). int8 quantizes row by row at load (symmetric, per row or per
 * int8_group columns). Copies live in huge-page memory and are converted on
 * the thread pool, and the mapping's pages of their sources are handed
 * back. fp8-e4m3 is dequantized with its `<name>_scale_inv` 128x128 block
 * scales (partial blocks at the edges). Norm weights and biases are always
 * f32 copies. Conversion works one row at a time, so load never holds a
 * whole f32 copy of a large matrix.
 *
 * State: the loader owns the mappings and every converted copy; both live
 * until model_free. */
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "model/filemap.h"
#include "model/model_internal.h"
#include "model/safetensors.h"

typedef struct {
    const char *name;
    int file, idx;
} ld_entry;

/* Copies live in a few large huge-page chunks, bump-allocated: one 2 MiB TLB
 * entry covers 512 times what a 4 KiB page does while decode streams them. */
typedef struct {
    uint8_t *base;
    size_t size, used;
} ld_chunk;

#define LD_CHUNK ((size_t)256 << 20)

struct model_loader {
    char *dir;
    st_file *files;
    int n_files;
    ld_entry *entries;
    int n_entries;
    model_dtype dtype;
    int int8_group;
    pool *pool; /* converts large matrices in parallel */
    ld_chunk *chunks;
    int n_chunks, cap_chunks;
    size_t weight_bytes; /* bytes of every tensor handed out, as computed on */
    /* The shards are faulted in only as read: with --pack-cache, a copy
     * mapped from its file leaves most of them unread (model_load faults
     * them in afterwards where the weights are still read in place). */
    bool lazy;
};

void *model_loader_alloc(model_loader *ld, size_t bytes) {
    bytes = (bytes + 63) & ~(size_t)63;
    ld_chunk *c = ld->n_chunks ? &ld->chunks[ld->n_chunks - 1] : NULL;
    if (!c || c->size - c->used < bytes) {
        if (ld->n_chunks == ld->cap_chunks) {
            ld->cap_chunks = ld->cap_chunks ? 2 * ld->cap_chunks : 16;
            ld->chunks = di_realloc(ld->chunks, (size_t)ld->cap_chunks * sizeof *ld->chunks);
        }
        c = &ld->chunks[ld->n_chunks++];
        c->size = bytes > LD_CHUNK ? bytes : LD_CHUNK;
        c->base = di_huge_alloc(c->size);
        c->used = 0;
    }
    void *p = c->base + c->used;
    c->used += bytes;
    return p;
}

static void loader_free(model_loader *ld) {
    if (!ld) return;
    for (int i = 0; i < ld->n_files; i++) st_close(&ld->files[i]);
    for (int i = 0; i < ld->n_chunks; i++) di_huge_free(ld->chunks[i].base, ld->chunks[i].size);
    free(ld->files);
    free(ld->entries);
    free(ld->chunks);
    free(ld->dir);
    free(ld);
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const ld_entry *)a)->name, ((const ld_entry *)b)->name);
}

static const st_tensor *find(model_loader *ld, const char *name, const st_file **file) {
    ld_entry key = {name, 0, 0};
    const ld_entry *e = bsearch(&key, ld->entries, (size_t)ld->n_entries, sizeof key, by_name);
    if (!e) return NULL;
    if (file) *file = &ld->files[e->file];
    return &ld->files[e->file].tensors[e->idx];
}

bool model_has_tensor(model_loader *ld, const char *name) {
    return find(ld, name, NULL) != NULL;
}

static int add_file(model_loader *ld, const char *fname, const char *why, di_err *err) {
    if (strchr(fname, '/') || !strcmp(fname, "..") || !*fname)
        return di_errf(err, "%s: shard name \"%.200s\" in %s is not a plain file name", ld->dir,
                       fname, why);
    for (int i = 0; i < ld->n_files; i++) {
        const char *base = strrchr(ld->files[i].path, '/') + 1;
        if (!strcmp(base, fname)) return 0;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", ld->dir, fname);
    struct stat sb;
    if (stat(path, &sb) != 0) return di_errf(err, "%s: missing (named in %s)", path, why);
    ld->files = di_realloc(ld->files, (size_t)(ld->n_files + 1) * sizeof *ld->files);
    if (st_open(&ld->files[ld->n_files], path, ld->lazy, err)) return -1;
    ld->n_files++;
    return 0;
}

static int open_shards(model_loader *ld, di_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", ld->dir);
    struct stat sb;
    if (stat(path, &sb) == 0) {
        json_error_t jerr;
        json_t *root = json_load_file(path, 0, &jerr);
        if (!root) return di_errf(err, "%s: invalid JSON: %s", path, jerr.text);
        json_t *wm = json_object_get(root, "weight_map");
        if (!json_is_object(wm)) {
            json_decref(root);
            return di_errf(err, "%s: no weight_map object", path);
        }
        const char *key;
        json_t *v;
        json_object_foreach(wm, key, v) {
            if (!json_is_string(v)) {
                json_decref(root);
                return di_errf(err, "%s: weight_map entry %s is not a file name", path, key);
            }
            if (add_file(ld, json_string_value(v), "model.safetensors.index.json", err)) {
                json_decref(root);
                return -1;
            }
        }
        json_decref(root);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", ld->dir);
        if (stat(path, &sb) == 0) {
            if (add_file(ld, "model.safetensors", "the directory", err)) return -1;
        } else {
            DIR *d = opendir(ld->dir);
            if (!d) return di_errf(err, "%s: cannot open model directory", ld->dir);
            struct dirent *de;
            int rc = 0;
            while (!rc && (de = readdir(d))) {
                size_t n = strlen(de->d_name);
                if (n > 12 && !strcmp(de->d_name + n - 12, ".safetensors"))
                    rc = add_file(ld, de->d_name, "the directory", err);
            }
            closedir(d);
            if (rc) return -1;
        }
    }
    if (!ld->n_files) return di_errf(err, "%s: no *.safetensors files", ld->dir);
    int n = 0;
    for (int i = 0; i < ld->n_files; i++) n += ld->files[i].n_tensors;
    ld->entries = di_calloc((size_t)n, sizeof *ld->entries);
    for (int i = 0; i < ld->n_files; i++)
        for (int j = 0; j < ld->files[i].n_tensors; j++)
            ld->entries[ld->n_entries++] = (ld_entry){ld->files[i].tensors[j].name, i, j};
    qsort(ld->entries, (size_t)n, sizeof *ld->entries, by_name);
    for (int i = 1; i < n; i++)
        if (!strcmp(ld->entries[i].name, ld->entries[i - 1].name))
            return di_errf(err, "%s: tensor %s stored twice", ld->files[ld->entries[i].file].path,
                           ld->entries[i].name);
    return 0;
}

/* --- conversion ----------------------------------------------------------- */

static float scale_at(const st_tensor *s, size_t i) {
    return s->dtype == ST_F32 ? ((const float *)s->data)[i]
                              : kern_bf16_to_f32(((const uint16_t *)s->data)[i]);
}

/* Row r of t (cols wide) as f32; scale: fp8 block scales or NULL. */
static void row_f32(float *out, const st_tensor *t, const st_tensor *scale, size_t r, size_t cols) {
    const uint8_t *p = (const uint8_t *)t->data;
    switch (t->dtype) {
    case ST_F32:
        memcpy(out, p + r * cols * 4, cols * 4);
        break;
    case ST_F16: {
        const uint8_t *q = p + r * cols * 2;
        for (size_t c = 0; c < cols; c++) {
            uint16_t h;
            memcpy(&h, q + 2 * c, 2);
            out[c] = kern_f16_to_f32(h);
        }
        break;
    }
    case ST_BF16: {
        const uint8_t *q = p + r * cols * 2;
        for (size_t c = 0; c < cols; c++) {
            uint16_t h;
            memcpy(&h, q + 2 * c, 2);
            out[c] = kern_bf16_to_f32(h);
        }
        break;
    }
    case ST_F8_E4M3: {
        const uint8_t *q = p + r * cols;
        size_t scols = (cols + 127) / 128;
        for (size_t c = 0; c < cols; c++) {
            float s = scale ? scale_at(scale, (r / 128) * scols + c / 128) : 1.0f;
            out[c] = kern_fp8e4m3_to_f32(q[c]) * s;
        }
        break;
    }
    default:
        break;
    }
}

static const char *shape_str(char *buf, size_t n, const st_tensor *t) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < t->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

/* Finds name, checks shape and dtype; rows x cols (cols 0: 1-D). */
static const st_tensor *lookup(model_loader *ld, const char *name, int rows, int cols,
                               const st_file **file, di_err *err) {
    const st_tensor *t = find(ld, name, file);
    if (!t) {
        di_errf(err, "%s: tensor %s missing from the checkpoint", ld->dir, name);
        return NULL;
    }
    bool ok = cols ? (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols)
                   : (t->ndim == 1 && t->shape[0] == rows);
    if (!ok) {
        char got[128];
        if (cols)
            di_errf(err, "%s: tensor %s has shape %s, expected [%d, %d]", (*file)->path, name,
                    shape_str(got, sizeof got, t), rows, cols);
        else
            di_errf(err, "%s: tensor %s has shape %s, expected [%d]", (*file)->path, name,
                    shape_str(got, sizeof got, t), rows);
        return NULL;
    }
    if (t->dtype == ST_OTHER) {
        di_errf(err, "%s: tensor %s has unsupported dtype %s", (*file)->path, name, t->dtype_name);
        return NULL;
    }
    return t;
}

static const st_tensor *fp8_scale(model_loader *ld, const char *name, const st_file *file,
                                  size_t rows, size_t cols, di_err *err) {
    char sname[512];
    snprintf(sname, sizeof sname, "%s_scale_inv", name);
    const st_file *sf;
    const st_tensor *s = find(ld, sname, &sf);
    if (!s) {
        di_errf(err, "%s: fp8 tensor %s has no %s block scales", file->path, name, sname);
        return NULL;
    }
    int64_t br = (int64_t)((rows + 127) / 128), bc = (int64_t)((cols + 127) / 128);
    bool shape_ok = (s->ndim == 2 && s->shape[0] == br && s->shape[1] == bc) ||
                    (cols == 1 && s->ndim == 1 && s->shape[0] == br);
    if (!shape_ok || (s->dtype != ST_F32 && s->dtype != ST_BF16)) {
        di_errf(err, "%s: tensor %s must be F32/BF16 of shape [%lld, %lld]", sf->path, sname,
                (long long)br, (long long)bc);
        return NULL;
    }
    return s;
}

/* Once a weight has a copy the kernels read instead (converted at load, or
 * packed), its whole pages in the read-only mapping are dead weight in the
 * resident set: hand them back (the page cache keeps the file; a later read
 * would simply fault them in again). */
static void release_pages(const void *p, size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void model_loader_release(model_loader *ld, const void *p, size_t n) {
    const uint8_t *a = p;
    for (int i = 0; i < ld->n_files; i++) {
        const uint8_t *f = ld->files[i].map;
        /* only a file's pages: a copy's would come back as zeros */
        if (f && a >= f && a + n <= f + ld->files[i].size) {
            release_pages(p, n);
            return;
        }
    }
}

void model_loader_drop_copy(model_loader *ld, const void *p, size_t n) {
    const uint8_t *a = p;
    for (int i = 0; i < ld->n_chunks; i++) {
        const ld_chunk *c = &ld->chunks[i];
        if (a >= c->base && a + n <= c->base + c->used) {
            release_pages(p, n);
            return;
        }
    }
}

void model_loader_fingerprint(const model_loader *ld, void *h) {
    for (int i = 0; i < ld->n_files; i++) {
        const char *base = strrchr(ld->files[i].path, '/') + 1;
        struct stat sb;
        if (stat(ld->files[i].path, &sb) != 0) memset(&sb, 0, sizeof sb);
        int64_t id[] = {(int64_t)sb.st_size,         (int64_t)sb.st_mtim.tv_sec,
                        (int64_t)sb.st_mtim.tv_nsec, (int64_t)sb.st_ino,
                        (int64_t)sb.st_dev,          (int64_t)ld->files[i].size};
        XXH3_128bits_update(h, base, strlen(base) + 1);
        XXH3_128bits_update(h, id, sizeof id);
    }
}

int64_t model_loader_file_offset(const model_loader *ld, const void *p, int *file) {
    const uint8_t *a = p;
    for (int i = 0; i < ld->n_files; i++) {
        const uint8_t *f = ld->files[i].map;
        if (f && a >= f && a < f + ld->files[i].size) {
            *file = i;
            return a - f;
        }
    }
    return -1;
}

char *model_loader_realdir(const model_loader *ld) {
    return realpath(ld->dir, NULL);
}

/* One matrix converted into a copy, rows spread over the pool. */
typedef struct convert_job {
    const st_tensor *t, *scale;
    size_t R, C, group;
    kern_dtype dtype; /* of the copy */
    void *dst;
    float *scales; /* KT_I8 */
} convert_job;

static void convert_task(void *ctx, int task, int n_tasks) {
    const convert_job *j = ctx;
    size_t lo = j->R * (size_t)task / (size_t)n_tasks,
           hi = j->R * (size_t)(task + 1) / (size_t)n_tasks;
    if (lo == hi) return;
    if ((j->dtype == KT_BF16 && j->t->dtype == ST_BF16) ||
        (j->dtype == KT_F32 && j->t->dtype == ST_F32)) { /* a plain copy */
        size_t row = j->C * kern_dtype_size(j->dtype);
        memcpy((uint8_t *)j->dst + lo * row, (const uint8_t *)j->t->data + lo * row,
               (hi - lo) * row);
        return;
    }
    float *row = di_malloc(j->C * sizeof(float));
    for (size_t r = lo; r < hi; r++) {
        float *out = j->dtype == KT_F32 ? (float *)j->dst + r * j->C : row;
        row_f32(out, j->t, j->scale, r, j->C);
        if (j->dtype == KT_BF16) {
            uint16_t *d = (uint16_t *)j->dst + r * j->C;
            for (size_t c = 0; c < j->C; c++) d[c] = kern_f32_to_bf16(row[c]);
        } else if (j->dtype == KT_I8) {
            size_t ng = j->C / j->group;
            kern_quantize_i8((int8_t *)j->dst + r * j->C, j->scales + r * ng, row, 1, (int)j->C,
                             (int)j->group);
        }
    }
    free(row);
}

/* A matrix's source tensor (and its fp8 block scales), looked up and checked. */
typedef struct {
    const st_tensor *t, *scale;
} mat_src;

static int mat_source(model_loader *ld, const char *name, int rows, int cols, mat_src *src,
                      di_err *err) {
    const st_file *file = NULL;
    src->scale = NULL;
    if (!(src->t = lookup(ld, name, rows, cols, &file, err))) return -1;
    size_t C = cols ? (size_t)cols : 1;
    if (src->t->dtype == ST_F8_E4M3 &&
        !(src->scale = fp8_scale(ld, name, file, (size_t)rows, C, err)))
        return -1;
    return 0;
}

static kern_dtype target_dtype(const model_loader *ld, unsigned flags) {
    model_dtype d = flags & MODEL_MAT_F32 ? MODEL_DTYPE_F32 : ld->dtype;
    return d == MODEL_DTYPE_F32 ? KT_F32 : d == MODEL_DTYPE_BF16 ? KT_BF16 : KT_I8;
}

/* The mapping itself serves as the matrix when it holds the compute dtype. */
static bool usable_in_place(const st_tensor *t, kern_dtype dt) {
    uintptr_t addr = (uintptr_t)t->data;
    return (dt == KT_BF16 && t->dtype == ST_BF16 && addr % 2 == 0) ||
           (dt == KT_F32 && t->dtype == ST_F32 && addr % 4 == 0);
}

/* The matrix is the mapping itself (usable_in_place said so). */
static void mat_in_place(model_loader *ld, kern_mat *out, const mat_src *src, size_t R, size_t C,
                         kern_dtype dt) {
    *out = (kern_mat){.dtype = dt, .rows = (int)R, .cols = (int)C, .data = src->t->data};
    ld->weight_bytes += R * C * kern_dtype_size(dt);
}

/* Allocates rows x cols of dtype dt (and int8 scales) in the loader's memory. */
static void mat_alloc(model_loader *ld, kern_mat *out, size_t R, size_t C, kern_dtype dt) {
    memset(out, 0, sizeof *out);
    out->dtype = dt;
    out->rows = (int)R;
    out->cols = (int)C;
    size_t elem = kern_dtype_size(dt);
    out->data = model_loader_alloc(ld, R * C * elem);
    ld->weight_bytes += R * C * elem;
    if (dt == KT_I8) {
        size_t group =
            ld->int8_group > 0 && C % (size_t)ld->int8_group == 0 ? (size_t)ld->int8_group : C;
        out->group = (int)group;
        out->scales = model_loader_alloc(ld, R * (C / group) * sizeof(float));
        ld->weight_bytes += R * (C / group) * sizeof(float);
    }
}

/* Converts src into the rows of view (its memory), on the pool, and gives
 * the source's mapping pages back. */
static void mat_fill(model_loader *ld, const kern_mat *view, const mat_src *src) {
    size_t R = (size_t)view->rows, C = (size_t)view->cols;
    convert_job j = {.t = src->t,
                     .scale = src->scale,
                     .R = R,
                     .C = C,
                     .group = view->group > 0 ? (size_t)view->group : C,
                     .dtype = view->dtype,
                     .dst = (void *)view->data,
                     .scales = (float *)view->scales};
    /* Small matrices stay on this thread: a pool round costs microseconds. */
    int tasks = R * C < ((size_t)1 << 16) ? 1 : pool_threads(ld->pool) * 4;
    if ((size_t)tasks > R) tasks = (int)R;
    pool_run(ld->pool, convert_task, &j, tasks);
    release_pages(src->t->data, src->t->nbytes);
}

int model_get_mat(model_loader *ld, const char *name, int rows, int cols, unsigned flags,
                  kern_mat *out, di_err *err) {
    mat_src src;
    if (mat_source(ld, name, rows, cols, &src, err)) return -1;
    size_t R = (size_t)rows, C = cols ? (size_t)cols : 1;
    kern_dtype dt = target_dtype(ld, flags);
    if (usable_in_place(src.t, dt)) {
        mat_in_place(ld, out, &src, R, C, dt);
        return 0;
    }
    mat_alloc(ld, out, R, C, dt);
    mat_fill(ld, out, &src);
    return 0;
}

int model_get_mats_fused(model_loader *ld, const char *const *names, const int *rows, int n,
                         int cols, kern_mat *fused, kern_mat *parts, di_err *err) {
    memset(fused, 0, sizeof *fused);
    if (n > 8) return di_errf(err, "model_get_mats_fused: %d parts (at most 8)", n);
    mat_src src[8];
    kern_dtype dt = target_dtype(ld, 0);
    bool in_place = true, adjacent = true;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (mat_source(ld, names[i], rows[i], cols, &src[i], err)) return -1;
        in_place &= usable_in_place(src[i].t, dt);
        adjacent &=
            i == 0 || src[i].t->data == (const uint8_t *)src[i - 1].t->data + src[i - 1].t->nbytes;
        total += (size_t)rows[i];
    }
    if (in_place) { /* stacked only if the file already stores them back to back */
        for (int i = 0; i < n; i++)
            mat_in_place(ld, &parts[i], &src[i], (size_t)rows[i], (size_t)cols, dt);
        if (adjacent)
            *fused =
                (kern_mat){.dtype = dt, .rows = (int)total, .cols = cols, .data = parts[0].data};
        return 0;
    }
    mat_alloc(ld, fused, total, (size_t)cols, dt);
    for (int i = 0, row0 = 0; i < n; row0 += rows[i++]) {
        parts[i] = kern_mat_rows(fused, row0, rows[i]);
        mat_fill(ld, &parts[i], &src[i]);
    }
    return 0;
}

int model_get_vec(model_loader *ld, const char *name, int n, const float **out, di_err *err) {
    const st_file *file = NULL;
    const st_tensor *t = lookup(ld, name, n, 0, &file, err);
    if (!t) return -1;
    if (t->dtype == ST_F8_E4M3)
        return di_errf(err, "%s: tensor %s: fp8 is not supported for vectors", file->path, name);
    float *dst = model_loader_alloc(ld, (size_t)n * sizeof(float));
    row_f32(dst, t, NULL, 0, (size_t)n);
    ld->weight_bytes += (size_t)n * sizeof(float);
    *out = dst;
    return 0;
}

/* --- model_load ----------------------------------------------------------- */

static size_t mat_bytes(const kern_mat *w) {
    if (!w->data) return 0;
    size_t n = (size_t)w->rows * (size_t)w->cols;
    switch (w->dtype) {
    case KT_F32:
        return n * 4;
    case KT_BF16:
    case KT_F16:
        return n * 2;
    case KT_I8:
        return n + (size_t)w->rows * (size_t)(w->cols / (w->group ? w->group : w->cols)) * 4;
    }
    return 0;
}

static double mat_params(const kern_mat *w) {
    return w->data ? (double)w->rows * (double)w->cols : 0;
}

/* Bytes and matmul parameters one decoded token touches (MoE: active experts). */
static void active_figures(const model *m, size_t *bytes, double *params) {
    const model_config *c = &m->cfg;
    size_t b = 0;
    double p = 0;
#define ACC(w)                                                                                     \
    do {                                                                                           \
        b += mat_bytes(w);                                                                         \
        p += mat_params(w);                                                                        \
    } while (0)
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->w.layers[l];
        b += 2 * (size_t)c->hidden_size * 4;
        const kern_mat *mats[] = {&L->wq,    &L->wk,     &L->wv,   &L->wo,     &L->q_proj,
                                  &L->q_a,   &L->q_b,    &L->kv_a, &L->kv_b,   &L->o_proj,
                                  &L->gate,  &L->up,     &L->down, &L->router, &L->sh_gate,
                                  &L->sh_up, &L->sh_down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) ACC(mats[i]);
        if (L->moe && L->exp_gate && c->n_routed_experts > 0) {
            size_t eb = 0;
            double ep = 0;
            for (int e = 0; e < c->n_routed_experts; e++) {
                const kern_mat *em[] = {&L->exp_gate[e], &L->exp_up[e], &L->exp_down[e]};
                for (int i = 0; i < 3; i++) {
                    eb += mat_bytes(em[i]);
                    ep += mat_params(em[i]);
                }
            }
            b += eb / (size_t)c->n_routed_experts * (size_t)c->num_experts_per_tok;
            p += ep / c->n_routed_experts * c->num_experts_per_tok;
        }
    }
    ACC(&m->w.lm_head);
    b += (size_t)c->hidden_size * 4 + mat_bytes(&m->w.embed) / (size_t)c->vocab_size;
#undef ACC
    *bytes = b;
    *params = p;
}

static int load_weights(model *m, di_err *err) {
    model_config *c = &m->cfg;
    model_loader *ld = m->ld;
    bool tied = c->tie_word_embeddings && !model_has_tensor(ld, "lm_head.weight");
    if (model_get_mat(ld, "model.embed_tokens.weight", c->vocab_size, c->hidden_size, 0,
                      &m->w.embed, err) ||
        model_get_vec(ld, "model.norm.weight", c->hidden_size, &m->w.final_norm, err))
        return -1;
    if (tied)
        m->w.lm_head = m->w.embed;
    else if (model_get_mat(ld, "lm_head.weight", c->vocab_size, c->hidden_size, 0, &m->w.lm_head,
                           err))
        return -1;
    bool ds = c->arch == ARCH_DEEPSEEK_V2 || c->arch == ARCH_DEEPSEEK_V3;
    m->w.layers = di_calloc((size_t)c->n_layers, sizeof *m->w.layers);
    for (int l = 0; l < c->n_layers; l++) {
        model_layer *L = &m->w.layers[l];
        char prefix[64];
        snprintf(prefix, sizeof prefix, "model.layers.%d.", l);
        L->swa = c->layer_swa[l];
        L->moe = ds && model_layer_is_moe(c, l);
        if ((ds ? deepseek_load_layer : llama_load_layer)(m, l, L, prefix, err)) return -1;
    }
    if (c->num_nextn_predict_layers > 0) {
        m->w.mtp = di_calloc((size_t)c->num_nextn_predict_layers, sizeof *m->w.mtp);
        for (int k = 0; k < c->num_nextn_predict_layers; k++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.eh_proj.weight", c->n_layers + k);
            if (!model_has_tensor(ld, name)) break; /* checkpoint shipped without MTP */
            if (deepseek_load_mtp(m, k, &m->w.mtp[k], err)) return -1;
            m->info.n_mtp_layers = k + 1;
        }
    }
    return 0;
}

double model_prefill_flops(const model *m, int n_tokens) {
    const model_config *c = &m->cfg;
    double head = 2.0 * (double)m->w.lm_head.rows * (double)m->w.lm_head.cols;
    double f = (m->info.flops_per_token - head) * n_tokens + head;
    bool mla = c->arch == ARCH_DEEPSEEK_V2 || c->arch == ARCH_DEEPSEEK_V3;
    /* Per (query, visible key) pair and layer: q.k and p.v, 2 FLOPs a MAC. */
    double pair =
        mla ? 2.0 * c->n_heads * (c->qk_nope_head_dim + c->qk_rope_head_dim + c->v_head_dim)
            : 4.0 * c->n_heads * c->head_dim;
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 1; i <= n_tokens; i++)
            f += pair * (c->layer_swa[l] && i > c->sliding_window ? c->sliding_window : i);
    return f;
}

model *model_load(const char *dir, const model_opts *opts, di_err *err) {
    kern_init();
    model *m = di_calloc(1, sizeof *m);
    if (opts) m->opts = *opts;
    if (model_config_load(&m->cfg, dir, err)) {
        free(m);
        return NULL;
    }
    model_loader *ld = di_calloc(1, sizeof *ld);
    ld->dir = di_strdup(dir);
    ld->dtype = m->opts.dtype;
    ld->int8_group = m->opts.int8_group;
    /* lazy only where the copy would replace the bf16 weights for good */
    uint16_t one = 0x3f80;
    kern_mat bf16 = {.dtype = KT_BF16, .rows = 1, .cols = 1, .data = &one};
    ld->lazy = m->opts.pack_weights && m->opts.pack_cache && m->opts.dtype == MODEL_DTYPE_BF16 &&
               kern_panels_only(&bf16);
    m->pool = pool_create(m->opts.threads);
    ld->pool = m->pool;
    m->ld = ld;
    if (open_shards(ld, err) || load_weights(m, err) || model_rope_init(m, err)) {
        model_free(m);
        return NULL;
    }
    model_config *c = &m->cfg;
    model_info *in = &m->info;
    in->arch = c->model_type;
    in->vocab_size = c->vocab_size;
    in->hidden_size = c->hidden_size;
    in->n_layers = c->n_layers;
    in->max_context = c->max_position_embeddings;
    in->bos_id = c->bos_token_id;
    in->n_eos = c->n_eos;
    memcpy(in->eos_ids, c->eos_ids, sizeof in->eos_ids);
    in->weight_bytes = ld->weight_bytes;
    double params;
    active_figures(m, &in->active_bytes_per_token, &params);
    in->flops_per_token = 2 * params;
    for (int l = 0; l < c->n_layers; l++) in->n_swa_layers += c->layer_swa[l];
    in->sliding_window = in->n_swa_layers ? c->sliding_window : 0;
    if (m->opts.pack_weights) model_panels_update(m);
    for (int i = 0; ld->lazy && !m->panels_for_good && i < ld->n_files; i++)
        if (ld->files[i].map) filemap_populate(ld->files[i].map, ld->files[i].size);
    in->packed_bytes = m->panels_bytes;
    in->packed_from = m->panels ? m->panels_from : MODEL_PACK_NONE;
    in->pack_file = m->panels ? m->panels_path : NULL;
    in->pack_weights_helps = kern_panels_only(&m->w.lm_head);
    return m;
}

void model_free(model *m) {
    if (!m) return;
    model_forward_free(m);
    model_panels_free(m);
    model_rope_free(m);
    free(m->w.layers);
    free(m->w.mtp);
    loader_free(m->ld);
    if (m->pool) pool_free(m->pool);
    model_config_free(&m->cfg);
    free(m);
}

const model_info *model_get_info(const model *m) {
    return &m->info;
}
pool *model_pool(model *m) {
    return m->pool;
}
