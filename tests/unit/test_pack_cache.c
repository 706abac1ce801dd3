/* test_pack_cache.c — --pack-cache (model_opts.pack_cache, pack_file.c): the
 * load that packs writes the copy to the cache, later loads map it and
 * compute the same bits; a damaged, truncated or stale file (the checkpoint
 * changed) is packed and written again, never read; a cache that cannot be
 * written leaves the copy in memory; a killed writer's temporary file goes
 * at the next write. Runs where --pack-weights packs (AVX2
 * without AVX-512 BF16), on a tiny bf16 llama written to a temp directory. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "kernels/kern_internal.h"
#include "model/model_internal.h"
#include "tmodel.h"

enum { N_TOK = 12, N_LAYERS = 2 };

static bool packs_here(void) {
    kern_init();
    return kern_use_avx2() && !kern_use_avx512_bf16();
}

/* A fresh cache directory's name, not made yet (the first write makes it;
 * tm_rmdir removes it). */
static char *cache_dir(void) {
    char *c = tm_tempdir();
    if (c) rmdir(c);
    return c;
}

/* Loads dir with a cache at cache; *from: where its copy came from. */
static model *load(const char *dir, const char *cache, model_pack_source *from) {
    model_opts o = {
        .dtype = MODEL_DTYPE_BF16, .threads = 1, .pack_weights = true, .pack_cache = cache};
    di_err err = {{0}};
    model *m = model_load(dir, &o, &err);
    if (!m) {
        fprintf(stderr, "load: %s\n", err.msg);
        return NULL;
    }
    *from = model_get_info(m)->packed_from;
    return m;
}

/* The logits of a prompt in one chunk and of one decode step after it
 * (the batched and the one-token kernels); 0 on success. */
static int logits(model *m, float *out) {
    int V = model_get_info(m)->vocab_size, toks[N_TOK + 1];
    unsigned r = 7;
    for (int i = 0; i <= N_TOK; i++) toks[i] = (int)(harness_lcg(&r) % (unsigned)V);
    di_err err;
    model_kv_pool *kv = model_kv_pool_create(m, 2, &err);
    model_seq s;
    model_seq_init(m, &s);
    model_batch_seq b = {
        .seq = &s, .tokens = toks, .n_tokens = N_TOK, .logits = out, .all_logits = true};
    int rc = model_seq_reserve(kv, &s, N_TOK + 1, &err) || model_forward(m, kv, &b, 1, &err);
    b = (model_batch_seq){
        .seq = &s, .tokens = toks + N_TOK, .n_tokens = 1, .logits = out + (size_t)N_TOK * V};
    rc = rc || model_forward(m, kv, &b, 1, &err);
    model_seq_free(m, kv, &s);
    model_kv_pool_free(kv);
    return rc;
}

/* Loads, checks the source, runs, frees; the logits in out. */
static bool run(const char *dir, const char *cache, model_pack_source want, float *out, char *path,
                size_t n_path) {
    model_pack_source from = MODEL_PACK_NONE;
    model *m = load(dir, cache, &from);
    if (!m) return false;
    bool ok = from == want && !logits(m, out);
    if (!ok) fprintf(stderr, "packed_from %d, want %d\n", (int)from, (int)want);
    const char *f = model_get_info(m)->pack_file;
    if (path) snprintf(path, n_path, "%s", f ? f : "");
    model_free(m);
    return ok;
}

static size_t file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (size_t)sb.st_size : 0;
}

/* Overwrites one byte at off (from the end when negative). */
static void poke(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, off, off < 0 ? SEEK_END : SEEK_SET);
    int c = fgetc(f);
    fseek(f, -1, SEEK_CUR);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

TEST(pack_cache_written_then_mapped_same_bits) {
    if (!packs_here()) return;
    char *dir = tm_tempdir();
    tm_make(dir, "llama", "BF16", N_LAYERS, "");
    char *cache = cache_dir(), path[4200];
    size_t n = (size_t)(N_TOK + 1) * TM_VOCAB;
    float *plain = malloc(n * sizeof(float)), *first = malloc(n * sizeof(float)),
          *again = malloc(n * sizeof(float));
    bool ok = run(dir, NULL, MODEL_PACK_PACKED, plain, NULL, 0) &&
              run(dir, cache, MODEL_PACK_WRITTEN, first, path, sizeof path);
    size_t bytes = file_size(path);
    /* the second load maps the file and reads the copy from it */
    model_pack_source from = MODEL_PACK_NONE;
    model *m = ok ? load(dir, cache, &from) : NULL;
    bool inside =
        m && m->panels_file.base &&
        (const char *)m->w.lm_head.panels > (const char *)m->panels_file.base &&
        (const char *)m->w.lm_head.panels < (const char *)m->panels_file.base + m->panels_file.size;
    size_t copy = m ? m->panels_bytes : 0;
    bool same = m && from == MODEL_PACK_MAPPED && !logits(m, again);
    model_free(m);
    CHECKF(ok && same && inside, "ok %d, mapped %d, lm_head's copy in the file %d", ok, same,
           inside);
    CHECKF(copy > 0 && bytes == 4096 + copy, "file %zu bytes for a copy of %zu", bytes, copy);
    CHECK(!memcmp(plain, first, n * sizeof(float)));
    CHECK(!memcmp(first, again, n * sizeof(float)));
    free(plain);
    free(first);
    free(again);
    tm_rmdir(cache);
    tm_rmdir(dir);
}

TEST(pack_cache_repacks_damaged_or_stale_files) {
    if (!packs_here()) return;
    char *dir = tm_tempdir();
    tm_make(dir, "llama", "BF16", N_LAYERS, "");
    char *cache = cache_dir(), path[4200];
    size_t n = (size_t)(N_TOK + 1) * TM_VOCAB;
    float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    CHECK(run(dir, cache, MODEL_PACK_WRITTEN, want, path, sizeof path));
    size_t bytes = file_size(path);
    /* a byte of the payload: the checksum catches it; and the rewrite
     * removes what a killed writer left, not what a live one is writing */
    poke(path, -(long)(bytes / 3));
    char dead[4300], live[4300];
    snprintf(dead, sizeof dead, "%s.999999999.0.tmp", path);
    snprintf(live, sizeof live, "%s.%ld.77.tmp", path, (long)getpid());
    tm_write_text(cache, strrchr(dead, '/') + 1, "torn");
    tm_write_text(cache, strrchr(live, '/') + 1, "writing");
    CHECK(run(dir, cache, MODEL_PACK_WRITTEN, got, NULL, 0));
    CHECK(access(dead, F_OK) != 0 && access(live, F_OK) == 0);
    unlink(live);
    CHECK(!memcmp(want, got, n * sizeof(float)));
    CHECK(run(dir, cache, MODEL_PACK_MAPPED, got, NULL, 0)); /* rewritten whole */
    /* truncated, and a header's key */
    CHECK(truncate(path, (off_t)(bytes - 64)) == 0);
    CHECK(run(dir, cache, MODEL_PACK_WRITTEN, got, NULL, 0));
    poke(path, 20);
    CHECK(run(dir, cache, MODEL_PACK_WRITTEN, got, NULL, 0));
    CHECK(!memcmp(want, got, n * sizeof(float)));
    /* the checkpoint changes (the same size, other weights): the same file
     * name, another key, and the new weights' logits */
    char st[4200];
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    size_t st_bytes = file_size(st);
    poke(st, -(long)(st_bytes / 2));
    CHECK(run(dir, cache, MODEL_PACK_WRITTEN, got, NULL, 0));
    CHECK(memcmp(want, got, n * sizeof(float)) != 0);
    CHECK(run(dir, cache, MODEL_PACK_MAPPED, got, NULL, 0));
    free(want);
    free(got);
    tm_rmdir(cache);
    tm_rmdir(dir);
}

/* A checkpoint converted at load (stored f32): its matrices' bits are in
 * the key whole, so a weight that changes is caught even where the file's
 * size, inode and modification time stay the same. */
TEST(pack_cache_keys_converted_weights_by_content) {
    if (!packs_here()) return;
    char *dir = tm_tempdir(), *cache = cache_dir(), st[4200];
    tm_make(dir, "llama", "F32", N_LAYERS, "");
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    size_t n = (size_t)(N_TOK + 1) * TM_VOCAB;
    float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    CHECK(run(dir, cache, MODEL_PACK_WRITTEN, want, NULL, 0));
    CHECK(run(dir, cache, MODEL_PACK_MAPPED, got, NULL, 0));
    CHECK(!memcmp(want, got, n * sizeof(float)));
    struct stat before;
    CHECK(stat(st, &before) == 0);
    tm_set s;
    tm_llama(&s, "F32", N_LAYERS, true);
    tm_tensor *t = tm_find(&s, "model.layers.1.mlp.down_proj.weight");
    CHECK(t != NULL);
    ((float *)t->data)[5] += 0.5f;
    CHECK(tm_write_st(st, &s, 0, s.n) == 0);
    tm_free(&s);
    struct timespec times[2] = {before.st_atim, before.st_mtim};
    CHECK(utimensat(AT_FDCWD, st, times, 0) == 0);
    struct stat after;
    CHECK(stat(st, &after) == 0 && after.st_ino == before.st_ino &&
          after.st_size == before.st_size && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
    CHECK(run(dir, cache, MODEL_PACK_WRITTEN, got, NULL, 0));
    CHECK(memcmp(want, got, n * sizeof(float)) != 0);
    free(want);
    free(got);
    tm_rmdir(cache);
    tm_rmdir(dir);
}

TEST(pack_cache_unwritable_keeps_copy_in_memory) {
    if (!packs_here()) return;
    char *dir = tm_tempdir();
    tm_make(dir, "llama", "BF16", N_LAYERS, "");
    char cache[4200];
    /* under a regular file: the directory cannot be made */
    snprintf(cache, sizeof cache, "%s/config.json/cache", dir);
    size_t n = (size_t)(N_TOK + 1) * TM_VOCAB;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    CHECK(run(dir, cache, MODEL_PACK_PACKED, a, NULL, 0));
    CHECK(run(dir, NULL, MODEL_PACK_PACKED, b, NULL, 0));
    CHECK(!memcmp(a, b, n * sizeof(float)));
    free(a);
    free(b);
    tm_rmdir(dir);
}
