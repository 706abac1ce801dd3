/* panels.c — packed copies of the weights: batch-invariant mode's, and
 * --pack-weights'.
 *
 * Batch-invariant mode sums every output in one order at every batch size,
 * with rows side by side in the vector lanes (bf16: the GEMM's order; int8:
 * the 16-row tiles'). A lone token read straight from the weights has to
 * transpose each 16 rows as it streams them, at 55-60 % of a plain token's
 * pace; from a copy packed once in that layout (kern_pack_panels) it
 * streams at the plain pace, with the same bits. The copies are made when
 * the mode goes on (model_set_batch_invariant) and freed when it goes off:
 * one more copy of the matrices the kernels would read one of (bf16 weights
 * with AVX2 or AVX-512 BF16, int8 with AVX-512 VNNI), in one huge-page
 * allocation. Batches of two tokens or more still read the weights
 * themselves, but on the AVX2 layout (no AVX-512 BF16).
 *
 * On that layout the copy is all the kernels read (kern_panels_only), in
 * either mode, and it runs batches faster than the plain kernels do: with
 * --pack-weights (model_opts.pack_weights) plain mode packs those matrices
 * at load too. Either way their pages of the file mapping are then handed
 * back (model_loader_release; the embedding table's stay, lookups read
 * it), so the copy replaces the weights in memory rather than doubling
 * them; they fault in again from the page cache if the copy goes. A
 * matrix converted at load (stored f32, f16 or fp8) cannot fault back in:
 * its converted copy is dropped only where the packed one stays until the
 * model is freed (--pack-weights packing what either mode would read,
 * for_good). Such copies can also live in a file (--pack-cache,
 * model_opts.pack_cache; pack_file.c): the load that packs them writes it,
 * later loads map it in place instead of packing; the file's name and key
 * come from here (copy_file).
 *
 * A matrix that lies inside an earlier one (a tied or shared head, MLA's
 * per-head rows of kv_b) shares that one's copy where it starts and ends
 * on the copy's groups of rows (kern_panels_view), and gets its own
 * otherwise. The copies are made only where they leave PANELS_SPARE of the
 * memory the kernel reports available (MemAvailable) free; otherwise, or if
 * the allocation fails, the model runs without them and says so on stderr. */
#include "model/model_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/base.h"
#include "kernels/kern_internal.h"

#define PANELS_SPARE ((size_t)1 << 30)

/* MemAvailable in bytes, or SIZE_MAX where /proc/meminfo does not say. */
static size_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return SIZE_MAX;
    char line[256];
    size_t kb = SIZE_MAX;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb == SIZE_MAX ? kb : kb << 10;
}

typedef struct panel_list {
    kern_mat **mats;
    int n, cap;
    bool any_mode; /* collect every matrix that would have a copy in some mode */
} panel_list;

/* Whether W gets a copy in m's present mode. The sets nest: what
 * --pack-weights alone packs, batch-invariant mode packs too. */
static bool wanted(const model *m, const kern_mat *W) {
    if (m->batch_invariant) return kern_panels_bytes(W) > 0;
    return m->opts.pack_weights && kern_panels_only(W);
}

/* W, if it has a copy or gets one (any_mode: in either mode). */
static void add(const model *m, panel_list *l, kern_mat *W) {
    if (l->any_mode ? !kern_panels_bytes(W) : !W->panels && !wanted(m, W)) return;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->mats = di_realloc(l->mats, (size_t)l->cap * sizeof *l->mats);
    }
    l->mats[l->n++] = W;
}

/* Every matrix a layer multiplies by: a stack, or its parts where there is
 * none (the forward pass takes the stack when it has one). */
static void add_layer(const model *m, panel_list *l, const model_config *c, model_layer *L) {
    kern_mat *mats[] = {&L->wo,     &L->q_proj, &L->q_a,     &L->q_b,   &L->kv_a,   &L->kv_b,
                        &L->o_proj, &L->down,   &L->sh_gate, &L->sh_up, &L->sh_down};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) add(m, l, mats[i]);
    if (L->wqkv.data) {
        add(m, l, &L->wqkv);
    } else {
        add(m, l, &L->wq);
        add(m, l, &L->wk);
        add(m, l, &L->wv);
    }
    if (L->gate_up.data) {
        add(m, l, &L->gate_up);
    } else {
        add(m, l, &L->gate);
        add(m, l, &L->up);
    }
    for (int h = 0; L->w_uk_t && h < c->n_heads; h++) add(m, l, &L->w_uk_t[h]);
    for (int h = 0; L->w_uv && h < c->n_heads; h++) add(m, l, &L->w_uv[h]);
    for (int e = 0; L->exp_gate && e < c->n_routed_experts; e++) {
        add(m, l, &L->exp_gate[e]);
        add(m, l, &L->exp_up[e]);
        add(m, l, &L->exp_down[e]);
    }
}

/* The earlier matrix W lies in (same columns, its rows a subset), or -1. */
static int container(kern_mat *const *mats, int i) {
    const kern_mat *W = mats[i];
    size_t row = (size_t)W->cols * kern_dtype_size(W->dtype);
    const char *a = W->data, *b = a + (size_t)W->rows * row;
    for (int k = 0; k < i; k++) {
        const kern_mat *P = mats[k];
        const char *pa = P->data, *pb = pa + (size_t)P->rows * row;
        if (P->dtype == W->dtype && P->cols == W->cols && a >= pa && b <= pb &&
            (size_t)(a - pa) % row == 0)
            return k;
    }
    return -1;
}

/* The row of P where W, which lies in it, starts. */
static int first_row(const kern_mat *P, const kern_mat *W) {
    size_t row = (size_t)P->cols * kern_dtype_size(P->dtype);
    return (int)(((const char *)W->data - (const char *)P->data) / row);
}

/* Every matrix of the model that has a copy or gets one, or (any_mode)
 * would in some mode. */
static panel_list collect(model *m, bool any_mode) {
    panel_list l = {.any_mode = any_mode};
    add(m, &l, &m->w.lm_head);
    for (int i = 0; i < m->cfg.n_layers; i++) add_layer(m, &l, &m->cfg, &m->w.layers[i]);
    for (int k = 0; k < m->info.n_mtp_layers; k++) {
        model_mtp *t = &m->w.mtp[k];
        add(m, &l, &t->eh_proj);
        add(m, &l, &t->head);
        add_layer(m, &l, &m->cfg, &t->layer);
    }
    return l;
}

static size_t mat_bytes(const kern_mat *W) {
    return (size_t)W->rows * W->cols * kern_dtype_size(W->dtype);
}

/* Whether W's bytes overlap an embedding table's (looked up by rows, from
 * the weights themselves: a tied head). */
static bool overlaps_embedding(const model *m, const kern_mat *W) {
    const char *a = W->data, *b = a + mat_bytes(W);
    for (int k = -1; k < m->info.n_mtp_layers; k++) {
        const kern_mat *E = k < 0 ? &m->w.embed : &m->w.mtp[k].embed;
        const char *ea = E->data, *eb = ea + mat_bytes(E);
        if (ea && a < eb && ea < b) return true;
    }
    return false;
}

/* Whether W's weights leave the resident set once W has its copy: what
 * reads the copy alone, except what an embedding lookup reads. */
static bool drops(const model *m, const kern_mat *W) {
    return kern_panels_only(W) && !overlaps_embedding(m, W);
}

/* A hash of the bf16 copy's layout on this CPU: a probe matrix packed, its
 * rows past a group and a partial panel, its columns past two column blocks
 * and odd. A change to the layout, or another CPU's, changes it. */
static uint64_t layout_hash(pool *p) {
    enum { PR = KERN_PANEL_GROUP_ROWS + 24 + 5, PC = 2 * KERN_GEMM_AVX2_KC + 77 };
    uint16_t *w = di_malloc(sizeof(uint16_t) * PR * PC);
    uint32_t s = 12345;
    for (int i = 0; i < PR * PC; i++) w[i] = (uint16_t)((s = s * 1664525u + 1013904223u) >> 16);
    kern_mat P = {.dtype = KT_BF16, .rows = PR, .cols = PC, .data = w};
    size_t n = (kern_panels_bytes(&P) + 63) & ~(size_t)63;
    uint32_t *copy = di_huge_alloc(n ? n : 64);
    kern_pack_panels(p, copy, &P);
    uint64_t h = XXH3_64bits(copy, n);
    di_huge_free(copy, n ? n : 64);
    free(w);
    return h;
}

/* --pack-cache's file for l's copy (caller frees) and in key what the
 * copy's bits depend on: the layout, the matrices in order (shape, dtype,
 * which copy each reads) and their weights: for a matrix used in place,
 * where it lies in which checkpoint file, and the files' identities; for
 * one converted at load (whose bits also depend on the conversion), a hash
 * of all its bytes. The name depends on the checkpoint's real path, the
 * dtype and the layout alone, so a checkpoint that changes replaces its
 * file rather than adding one. */
static char *copy_file(model *m, const panel_list *l, const int *owner, uint8_t *key) {
    char *dir = model_loader_realdir(m->ld);
    if (!dir) return NULL;
    uint64_t layout = layout_hash(m->pool);
    int32_t opts[] = {(int32_t)m->opts.dtype, m->opts.int8_group};
    XXH3_state_t *h = XXH3_createState();
    XXH3_128bits_reset(h);
    XXH3_128bits_update(h, &layout, sizeof layout);
    XXH3_128bits_update(h, opts, sizeof opts);
    model_loader_fingerprint(m->ld, h);
    for (int i = 0; i < l->n; i++) {
        const kern_mat *W = l->mats[i];
        int64_t where[] = {W->rows, W->cols, W->dtype, owner[i], -1, -1};
        if (owner[i] == i) {
            int file;
            where[5] = model_loader_file_offset(m->ld, W->data, &file);
            where[4] =
                where[5] >= 0 ? file : (int64_t)pack_checksum(m->pool, W->data, mat_bytes(W));
        }
        XXH3_128bits_update(h, where, sizeof where);
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(h));
    XXH3_freeState(h);
    memcpy(key, c.digest, PACK_KEY_BYTES);
    XXH3_state_t *nh = XXH3_createState();
    XXH3_64bits_reset(nh);
    XXH3_64bits_update(nh, dir, strlen(dir) + 1);
    XXH3_64bits_update(nh, &layout, sizeof layout);
    XXH3_64bits_update(nh, opts, sizeof opts);
    unsigned long long name = XXH3_64bits_digest(nh);
    XXH3_freeState(nh);
    free(dir);
    size_t len = strlen(m->opts.pack_cache) + 32;
    char *path = di_malloc(len);
    snprintf(path, len, "%s/%016llx.pack", m->opts.pack_cache, name);
    return path;
}

static void pack(model *m, panel_list *l) {
    /* owner[i]: the matrix whose copy i uses (itself when it gets its own) */
    int *owner = di_malloc(((size_t)l->n + 1) * sizeof(int));
    size_t total = 0;
    for (int i = 0; i < l->n; i++) {
        int k = container(l->mats, i), o = k < 0 ? -1 : owner[k];
        owner[i] = o >= 0 && kern_panels_view(l->mats[o], first_row(l->mats[o], l->mats[i]),
                                              l->mats[i]->rows)
                       ? o
                       : i;
        if (owner[i] == i) total += (kern_panels_bytes(l->mats[i]) + 63) & ~(size_t)63;
    }
    /* A file only for copies that stay until the model is freed */
    uint8_t key[PACK_KEY_BYTES];
    char *path = NULL;
    if (total && m->opts.pack_cache && m->panels_for_good) path = copy_file(m, l, owner, key);
    const void *mapped = NULL;
    uint64_t checksum;
    int fd = path ? pack_file_open(path, key, total, &checksum) : -1;
    if (fd >= 0) {
        /* the file's pages come in as the mapping's go: resident memory
         * peaks at about the weights, not the weights and the copy */
        for (int i = 0; i < l->n; i++)
            if (drops(m, l->mats[i]))
                model_loader_release(m->ld, l->mats[i]->data, mat_bytes(l->mats[i]));
        mapped = pack_file_map(m->pool, fd, path, total, checksum, &m->panels_file);
    }
    size_t avail = total && !mapped ? mem_available() : 0;
    uint8_t *buf = mapped ? (uint8_t *)mapped
                   : total && avail > PANELS_SPARE && avail - PANELS_SPARE >= total
                       ? di_huge_map(total)
                       : NULL;
    if (!buf && total)
        fprintf(stderr,
                "deepinfer: %s without its packed copy of the weights (%zu MiB, more than the "
                "memory available allows): %s\n",
                m->batch_invariant ? "batch-invariant mode" : "--pack-weights", total >> 20,
                m->batch_invariant ? "a lone sequence decodes slower"
                                   : "the weights stay in place");
    size_t at = 0;
    for (int i = 0; buf && i < l->n; i++) {
        kern_mat *W = l->mats[i];
        if (owner[i] == i) {
            if (!mapped) kern_pack_panels(m->pool, (uint32_t *)(buf + at), W);
            W->panels = (const uint32_t *)(buf + at);
            at += (kern_panels_bytes(W) + 63) & ~(size_t)63;
        } else {
            const kern_mat *P = l->mats[owner[i]];
            W->panels = kern_mat_rows(P, first_row(P, W), W->rows).panels;
        }
        /* at once: the mapping and the copy are both resident for one
         * matrix at a time, not the whole model */
        if (drops(m, W)) model_loader_release(m->ld, W->data, mat_bytes(W));
    }
    /* A converted copy only now: a matrix packed later may lie in an
     * earlier one's bytes, and these would read back as zeros. */
    for (int i = 0; buf && m->panels_for_good && i < l->n; i++)
        if (drops(m, l->mats[i]))
            model_loader_drop_copy(m->ld, l->mats[i]->data, mat_bytes(l->mats[i]));
    m->panels = buf;
    m->panels_bytes = buf ? total : 0;
    m->panels_n = buf ? l->n : 0;
    m->panels_from = MODEL_PACK_PACKED;
    if (mapped)
        m->panels_from = MODEL_PACK_MAPPED;
    else if (buf && path && (m->panels_writer = pack_file_write(m->pool, path, key, buf, total)))
        m->panels_from = MODEL_PACK_WRITTEN;
    if (m->panels_from == MODEL_PACK_PACKED) {
        free(path);
        path = NULL;
    }
    m->panels_path = path;
    free(owner);
}

static void panels_free(model *m, panel_list *l) {
    for (int i = 0; i < l->n; i++) l->mats[i]->panels = NULL;
    pack_file_finish(m->panels_writer); /* it reads them */
    m->panels_writer = NULL;
    if (m->panels_file.base)
        pack_file_unmap(&m->panels_file);
    else
        di_huge_free(m->panels, m->panels_bytes);
    free(m->panels_path);
    m->panels_path = NULL;
    m->panels = NULL;
    m->panels_bytes = 0;
    m->panels_n = 0;
    m->panels_for_good = false;
}

/* Whether m's copies, once made, are the same in either mode: --pack-weights
 * packs every matrix that batch-invariant mode would (on AVX2 without
 * AVX-512 BF16 both are the bf16 matrices). Then they stay until the model
 * is freed, and a matrix converted at load can drop its converted copy. */
static bool for_good(model *m) {
    if (!m->opts.pack_weights) return false;
    panel_list all = collect(m, true);
    int only = 0;
    for (int i = 0; i < all.n; i++) only += kern_panels_only(all.mats[i]);
    free(all.mats);
    return all.n && only == all.n;
}

void model_panels_update(model *m) {
    if (m->panels && m->panels_for_good) return;
    panel_list l = collect(m, false);
    int n_want = 0;
    for (int i = 0; i < l.n; i++) n_want += wanted(m, l.mats[i]);
    /* the sets nest, so a copy of as many matrices is a copy of these */
    if (m->panels && n_want != m->panels_n) panels_free(m, &l);
    if (!m->panels && n_want) {
        int k = 0; /* the wanted ones alone, in order */
        for (int i = 0; i < l.n; i++)
            if (wanted(m, l.mats[i])) l.mats[k++] = l.mats[i];
        l.n = k;
        m->panels_for_good = for_good(m);
        pack(m, &l);
        if (!m->panels) m->panels_for_good = false;
    }
    free(l.mats);
}

void model_panels_free(model *m) {
    if (!m->panels) return;
    panel_list l = collect(m, false);
    panels_free(m, &l);
    free(l.mats);
}
