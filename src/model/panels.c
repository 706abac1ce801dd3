/* panels.c — batch-invariant mode's packed copies of the weights.
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
 * allocation.
 * Batches of two tokens or more still read the weights themselves, but
 * for up to 32 tokens on the AVX2 layout (no AVX-512 BF16).
 *
 * A matrix that lies inside an earlier one (a tied or shared head, MLA's
 * per-head rows of kv_b) shares that one's copy where it starts and ends
 * on the copy's groups of rows (kern_panels_view), and gets its own
 * otherwise. The copies are made only where they leave PANELS_SPARE of the
 * memory the kernel reports available (MemAvailable) free; otherwise, or if
 * the allocation fails, the mode runs without them and says so on stderr. */
#include "model/model_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"

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
} panel_list;

/* W, if it has a copy or this CPU's kernels would read one. */
static void add(panel_list *l, kern_mat *W) {
    if (!W->panels && !kern_panels_bytes(W)) return;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->mats = di_realloc(l->mats, (size_t)l->cap * sizeof *l->mats);
    }
    l->mats[l->n++] = W;
}

/* Every matrix a layer multiplies by: a stack, or its parts where there is
 * none (the forward pass takes the stack when it has one). */
static void add_layer(panel_list *l, const model_config *c, model_layer *L) {
    kern_mat *mats[] = {&L->wo,     &L->q_proj, &L->q_a,     &L->q_b,   &L->kv_a,   &L->kv_b,
                        &L->o_proj, &L->down,   &L->sh_gate, &L->sh_up, &L->sh_down};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) add(l, mats[i]);
    if (L->wqkv.data) {
        add(l, &L->wqkv);
    } else {
        add(l, &L->wq);
        add(l, &L->wk);
        add(l, &L->wv);
    }
    if (L->gate_up.data) {
        add(l, &L->gate_up);
    } else {
        add(l, &L->gate);
        add(l, &L->up);
    }
    for (int h = 0; L->w_uk_t && h < c->n_heads; h++) add(l, &L->w_uk_t[h]);
    for (int h = 0; L->w_uv && h < c->n_heads; h++) add(l, &L->w_uv[h]);
    for (int e = 0; L->exp_gate && e < c->n_routed_experts; e++) {
        add(l, &L->exp_gate[e]);
        add(l, &L->exp_up[e]);
        add(l, &L->exp_down[e]);
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

/* Every matrix of the model that has a copy or could have one. */
static panel_list collect(model *m) {
    panel_list l = {0};
    add(&l, &m->w.lm_head);
    for (int i = 0; i < m->cfg.n_layers; i++) add_layer(&l, &m->cfg, &m->w.layers[i]);
    for (int k = 0; k < m->info.n_mtp_layers; k++) {
        model_mtp *t = &m->w.mtp[k];
        add(&l, &t->eh_proj);
        add(&l, &t->head);
        add_layer(&l, &m->cfg, &t->layer);
    }
    return l;
}

void model_panels_pack(model *m) {
    if (m->panels) return;
    panel_list l = collect(m);
    /* owner[i]: the matrix whose copy i uses (itself when it gets its own) */
    int *owner = di_malloc(((size_t)l.n + 1) * sizeof(int));
    size_t total = 0;
    for (int i = 0; i < l.n; i++) {
        int k = container(l.mats, i), o = k < 0 ? -1 : owner[k];
        owner[i] =
            o >= 0 && kern_panels_view(l.mats[o], first_row(l.mats[o], l.mats[i]), l.mats[i]->rows)
                ? o
                : i;
        if (owner[i] == i) total += (kern_panels_bytes(l.mats[i]) + 63) & ~(size_t)63;
    }
    size_t avail = total ? mem_available() : 0;
    uint8_t *buf =
        total && avail > PANELS_SPARE && avail - PANELS_SPARE >= total ? di_huge_map(total) : NULL;
    if (!buf && total)
        fprintf(stderr,
                "deepinfer: batch-invariant mode without its packed copy of the weights "
                "(%zu MiB, more than the memory available allows): a lone sequence "
                "decodes slower\n",
                total >> 20);
    size_t at = 0;
    for (int i = 0; buf && i < l.n; i++) {
        kern_mat *W = l.mats[i];
        if (owner[i] == i) {
            kern_pack_panels(m->pool, (uint32_t *)(buf + at), W);
            W->panels = (const uint32_t *)(buf + at);
            at += (kern_panels_bytes(W) + 63) & ~(size_t)63;
            continue;
        }
        const kern_mat *P = l.mats[owner[i]];
        W->panels = kern_mat_rows(P, first_row(P, W), W->rows).panels;
    }
    m->panels = buf;
    m->panels_bytes = buf ? total : 0;
    free(owner);
    free(l.mats);
}

void model_panels_free(model *m) {
    if (!m->panels) return;
    panel_list l = collect(m);
    for (int i = 0; i < l.n; i++) l.mats[i]->panels = NULL;
    free(l.mats);
    di_huge_free(m->panels, m->panels_bytes);
    m->panels = NULL;
    m->panels_bytes = 0;
}
