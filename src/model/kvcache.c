/* kvcache.c — KV memory: the paged pool for full-attention layers, the
 * per-sequence ring buffers for sliding-window layers, and the per-step
 * put, read and commit that attention implementations go through.
 *
 * Pool: n_blocks blocks of MODEL_KV_BLOCK positions. A block holds every
 * full-attention layer (main and MTP) for its 128 positions, layer-major,
 * and within a layer part-major: [layer][part][position][part's elements].
 * An entry's parts (model_kv_parts) are what attention reads as separate
 * rows: GQA's K of each kv head, then V of each (2 x n_kv_heads rows of
 * head_dim); MLA's latent and k_pe are read together, one part. So a kv
 * head's 128 cached keys are one contiguous run of 128 x head_dim. With
 * whole entries side by side (K and V of every head, 4 KiB a token for a
 * 1B-scale model) a head's rows lay a page apart: llama-1b's attention over
 * 512 positions, 16 layers on two threads, took 1.8-1.9 ms a token that way
 * and 1.44-1.5 ms part-major (harness, rows prefetched in both); int8 decode
 * at 3,200 positions, 4 alternating runs: median 1.045x. Free blocks sit
 * on a stack; the caller's block manager decides policy.
 *
 * Elements are the model's KV dtype (model_kv_dtype): f32 with f32 weights,
 * else bf16 unless asked otherwise, everywhere an entry is kept (pool, rings,
 * step staging, snapshots), so a token reads the same values of its own
 * entry whether it came in this step or an earlier one. model_kv_put rounds
 * (nearest even); attention reads the rows as they are stored.
 *
 * Rings: each sliding-window layer keeps window + MODEL_SWA_SPARE entries per
 * sequence at slot pos % ring; the spare lets a speculative rollback of up
 * to MODEL_SWA_SPARE tokens still see its window. A step's new SWA entries
 * are first staged (st->scratch, one per step token) so that a prefill chunk
 * longer than the ring still reads its own earlier positions; after the
 * layer, model_kv_commit moves the last ring-size entries into the ring.
 *
 * Replay and snapshots: a sequence's swa_floor hides ring positions never
 * written (a replay starts mid-context): attention that asks
 * model_attn_first starts there; one that asks model_attn_start (MLA) reads
 * zero entries below it — either way the rings left after window x depth
 * replayed tokens do not depend on what lies below the floor. kv_keep_end
 * keeps shared cached full-layer entries from being rewritten by a replay.
 * model_swa_save / model_swa_restore copy the last `window` ring entries
 * in and out of host memory (the engine's SWA state cache, forks).
 *
 * MTP layers (index >= n_layers) count their positions with seq->mtp_n_past.
 * No global state; the pool is used by one forward pass at a time. */
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

struct model_kv_pool {
    int n_blocks;
    int n_all;         /* main + MTP layers */
    size_t esize;      /* bytes per element: 4 (f32) or 2 (bf16) */
    kern_dtype dtype;  /* KT_F32 or KT_BF16 */
    size_t block_elts; /* elements per block, all full layers */
    long *layer_off;   /* n_all: offset of the layer within a block, -1 for SWA layers */
    int *entry;        /* n_all: model_kv_entry_floats */
    int *parts;        /* n_all: model_kv_parts */
    unsigned char *data;
    size_t map_bytes;
    int *free_stack, n_free;
    unsigned char *in_use;
};

typedef struct {
    int ring; /* window + MODEL_SWA_SPARE */
    int *cap; /* n_all: entries allocated so far (grows up to ring; 0 for full layers) */
    unsigned char **layer; /* n_all: the layer's ring, NULL for full layers */
    void *zero;            /* ring entries of zeros: what positions below swa_floor read as */
} kv_rings;

static int n_all_layers(const model *m) {
    return m->cfg.n_layers + m->cfg.num_nextn_predict_layers;
}

int model_kv_entry_floats(const model *m, int l) {
    const model_config *c = &m->cfg;
    (void)l;
    if (c->arch == ARCH_DEEPSEEK_V2 || c->arch == ARCH_DEEPSEEK_V3)
        return c->kv_lora_rank + c->qk_rope_head_dim;
    return 2 * c->n_kv_heads * c->head_dim;
}

int model_kv_parts(const model *m, int l) {
    const model_config *c = &m->cfg;
    (void)l;
    if (c->arch == ARCH_DEEPSEEK_V2 || c->arch == ARCH_DEEPSEEK_V3) return 1;
    return 2 * c->n_kv_heads;
}

kern_dtype model_kv_dtype(const model *m) {
    model_kv_type t = m->opts.kv_dtype;
    if (t == MODEL_KV_AUTO) t = m->opts.dtype == MODEL_DTYPE_F32 ? MODEL_KV_F32 : MODEL_KV_BF16;
    return t == MODEL_KV_F32 ? KT_F32 : KT_BF16;
}

const char *model_kv_dtype_name(const model *m) {
    return model_kv_dtype(m) == KT_F32 ? "f32" : "bf16";
}

size_t model_kv_entry_bytes(const model *m, int l) {
    return (size_t)model_kv_entry_floats(m, l) * kern_dtype_size(model_kv_dtype(m));
}

size_t model_kv_block_bytes(const model *m) {
    size_t b = 0;
    for (int l = 0; l < n_all_layers(m); l++)
        if (!m->cfg.layer_swa[l]) b += (size_t)MODEL_KV_BLOCK * model_kv_entry_bytes(m, l);
    return b;
}

model_kv_pool *model_kv_pool_create(model *m, int n_blocks, di_err *err) {
    if (n_blocks < 0) {
        di_errf(err, "KV pool: negative block count %d", n_blocks);
        return NULL;
    }
    model_kv_pool *kv = di_calloc(1, sizeof *kv);
    kv->n_blocks = n_blocks;
    kv->n_all = n_all_layers(m);
    kv->layer_off = di_calloc((size_t)kv->n_all, sizeof *kv->layer_off);
    kv->entry = di_calloc((size_t)kv->n_all, sizeof *kv->entry);
    kv->parts = di_calloc((size_t)kv->n_all, sizeof *kv->parts);
    long off = 0;
    for (int l = 0; l < kv->n_all; l++) {
        kv->entry[l] = model_kv_entry_floats(m, l);
        kv->parts[l] = model_kv_parts(m, l);
        kv->layer_off[l] = m->cfg.layer_swa[l] ? -1 : off;
        if (!m->cfg.layer_swa[l]) off += (long)MODEL_KV_BLOCK * kv->entry[l];
    }
    kv->block_elts = (size_t)off;
    kv->dtype = model_kv_dtype(m);
    kv->esize = kern_dtype_size(kv->dtype);
    size_t bytes;
    if (__builtin_mul_overflow(kv->block_elts * kv->esize, (size_t)n_blocks, &bytes)) {
        model_kv_pool_free(kv);
        di_errf(err, "KV pool: %d blocks overflow the address space", n_blocks);
        return NULL;
    }
    if (bytes) {
        /* Huge pages: an entry of a 1B-scale model is a whole 4 KiB page, so
         * with small pages every cached row attention reads is a TLB miss
         * (16 tokens of 100 rows took 0.7 ms a layer, mostly page walks). */
        void *p = di_huge_map(bytes);
        if (!p) {
            model_kv_pool_free(kv);
            di_errf(err, "KV pool: cannot map %zu bytes for %d blocks", bytes, n_blocks);
            return NULL;
        }
        kv->data = p;
        kv->map_bytes = bytes;
    }
    kv->free_stack = di_malloc((size_t)(n_blocks ? n_blocks : 1) * sizeof(int));
    kv->in_use = di_calloc((size_t)(n_blocks ? n_blocks : 1), 1);
    for (int i = 0; i < n_blocks; i++) kv->free_stack[i] = n_blocks - 1 - i; /* 0 pops first */
    kv->n_free = n_blocks;
    return kv;
}

void model_kv_pool_free(model_kv_pool *kv) {
    if (!kv) return;
    di_huge_free(kv->data, kv->map_bytes);
    free(kv->layer_off);
    free(kv->entry);
    free(kv->parts);
    free(kv->free_stack);
    free(kv->in_use);
    free(kv);
}

int model_kv_n_free(const model_kv_pool *kv) {
    return kv->n_free;
}

int model_kv_alloc(model_kv_pool *kv) {
    if (!kv->n_free) return -1;
    int b = kv->free_stack[--kv->n_free];
    kv->in_use[b] = 1;
    return b;
}

void model_kv_release(model_kv_pool *kv, int block) {
    if (block < 0 || block >= kv->n_blocks || !kv->in_use[block]) {
        di_log(DI_LOG_ERROR, "KV pool: release of block %d that is not allocated", block);
        abort();
    }
    kv->in_use[block] = 0;
    kv->free_stack[kv->n_free++] = block;
}

/* --- sequences ------------------------------------------------------------ */

void model_seq_init(model *m, model_seq *s) {
    memset(s, 0, sizeof *s);
    int n_all = n_all_layers(m);
    bool any = false;
    for (int l = 0; l < n_all; l++) any |= m->cfg.layer_swa[l];
    if (!any) return;
    kv_rings *r = di_calloc(1, sizeof *r);
    r->ring = m->cfg.sliding_window + MODEL_SWA_SPARE;
    r->cap = di_calloc((size_t)n_all, sizeof *r->cap);
    r->layer = di_calloc((size_t)n_all, sizeof *r->layer);
    s->swa = r;
}

void model_seq_free(model *m, model_kv_pool *kv, model_seq *s) {
    if (kv)
        for (int i = 0; i < s->n_blocks; i++) model_kv_release(kv, s->blocks[i]);
    free(s->blocks);
    kv_rings *r = s->swa;
    if (r) {
        for (int l = 0; l < n_all_layers(m); l++) free(r->layer[l]);
        free(r->cap);
        free(r->layer);
        free(r->zero);
        free(r);
    }
    memset(s, 0, sizeof *s);
}

int model_seq_reserve(model_kv_pool *kv, model_seq *s, int n_tokens, di_err *err) {
    int need = (n_tokens + MODEL_KV_BLOCK - 1) / MODEL_KV_BLOCK;
    if (need > s->cap_blocks) {
        int cap = s->cap_blocks ? s->cap_blocks : 4;
        while (cap < need) cap *= 2;
        s->blocks = di_realloc(s->blocks, (size_t)cap * sizeof(int));
        s->cap_blocks = cap;
    }
    while (s->n_blocks < need) {
        int b = model_kv_alloc(kv);
        if (b < 0)
            return di_errf(err, "KV pool exhausted: %d more blocks needed for %d tokens",
                           need - s->n_blocks, n_tokens);
        s->blocks[s->n_blocks++] = b;
    }
    return 0;
}

/* --- per-step access -------------------------------------------------------- */

static int seq_past(const model *m, const model_seq *s, int l) {
    return l >= m->cfg.n_layers ? s->mtp_n_past : s->n_past;
}

/* Part `part` of full layer l's entry at pos: its row in the sequence's block. */
static unsigned char *full_row(const model_kv_pool *kv, const model_seq *s, int l, int pos,
                               int part) {
    int blk = s->blocks[pos / MODEL_KV_BLOCK];
    size_t width = (size_t)(kv->entry[l] / kv->parts[l]);
    size_t row = (size_t)part * MODEL_KV_BLOCK + (size_t)(pos % MODEL_KV_BLOCK);
    return kv->data +
           ((size_t)blk * kv->block_elts + (size_t)kv->layer_off[l] + row * width) * kv->esize;
}

/* n values into KV storage, rounded to its dtype */
static void store_values(const model_kv_pool *kv, void *dst, const float *src, size_t n) {
    if (kv->dtype == KT_F32)
        memcpy(dst, src, n * sizeof(float));
    else
        kern_f32_row_to_bf16(dst, src, n);
}

void model_kv_put(model *m, const model_step *st, int l, int t, const float *entry) {
    const model_kv_pool *kv = st->kv;
    size_t n = (size_t)kv->entry[l];
    if (kv->layer_off[l] >= 0) {
        const model_seq *s = st->batch[st->seq_of[t]].seq;
        if (l < m->cfg.n_layers && st->pos[t] < s->kv_keep_end) return; /* replay: keep cached */
        size_t width = n / (size_t)kv->parts[l];
        for (int p = 0; p < kv->parts[l]; p++)
            store_values(kv, full_row(kv, s, l, st->pos[t], p), entry + p * width, width);
    } else {
        store_values(kv, (unsigned char *)st->scratch + (size_t)t * n * kv->esize, entry, n);
    }
}

/* The rows a position's entry goes to are lines no one has touched since
 * the block was taken: stored cold, each a miss the calling thread waited
 * for while the others idled (0.26 % of an int8 decode step of llama-1b in
 * the conversion that stores them; with the prefetch the step was 0.2 %
 * shorter, on and off in alternate steps, 4 runs: within their noise). */
#define KV_PUT_AHEAD_TOKENS 16
void model_kv_put_ahead(const model_step *st, int l) {
    const model_kv_pool *kv = st->kv;
    if (kv->layer_off[l] < 0 || st->n_tokens > KV_PUT_AHEAD_TOKENS) return;
    size_t bytes = (size_t)(kv->entry[l] / kv->parts[l]) * kv->esize;
    for (int t = 0; t < st->n_tokens; t++) {
        const model_seq *s = st->batch[st->seq_of[t]].seq;
        for (int p = 0; p < kv->parts[l]; p++) {
            const unsigned char *r = full_row(kv, s, l, st->pos[t], p);
            for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(r + o, 1, 3);
        }
    }
}

/* The whole entry of a sliding-window layer at pos: this step's staging for
 * new positions, the ring for earlier ones (zeros below the replay floor). */
static const unsigned char *swa_entry(const model *m, const model_step *st, int l, int b, int pos) {
    const model_kv_pool *kv = st->kv;
    const model_seq *s = st->batch[b].seq;
    int past = seq_past(m, s, l);
    size_t n = (size_t)kv->entry[l] * kv->esize;
    if (pos >= past)
        return (const unsigned char *)st->scratch + (size_t)(st->first[b] + pos - past) * n;
    const kv_rings *r = s->swa;
    if (pos < s->swa_floor && l < m->cfg.n_layers) return r->zero;
    return r->layer[l] + (size_t)(pos % r->ring) * n;
}

void model_kv_read(model *m, const model_step *st, int l, int b, int pos, float *out) {
    const model_kv_pool *kv = st->kv;
    size_t n = (size_t)kv->entry[l], width = n / (size_t)kv->parts[l];
    for (int p = 0; p < kv->parts[l]; p++) {
        size_t stride;
        int one;
        const void *e = model_kv_run(m, st, l, b, pos, 1, p, &one, &stride);
        if (kv->dtype == KT_F32)
            memcpy(out + p * width, e, width * sizeof(float));
        else
            kern_bf16_row_to_f32(out + p * width, e, width);
    }
}

kern_dtype model_kv_step_dtype(const model_step *st) {
    return st->kv->dtype;
}

const void *model_kv_run(model *m, const model_step *st, int l, int b, int pos, int want, int part,
                         int *n, size_t *stride) {
    const model_kv_pool *kv = st->kv;
    const model_seq *s = st->batch[b].seq;
    size_t width = (size_t)(kv->entry[l] / kv->parts[l]);
    int run;
    if (kv->layer_off[l] >= 0) {
        run = MODEL_KV_BLOCK - pos % MODEL_KV_BLOCK;
        *n = run < want ? run : want;
        *stride = width;
        return full_row(kv, s, l, pos, part);
    }
    int past = seq_past(m, s, l);
    const kv_rings *r = s->swa;
    run = pos >= past ? past + st->batch[b].n_tokens - pos : past - pos;
    if (pos < past && pos < s->swa_floor && l < m->cfg.n_layers) {
        run = s->swa_floor - pos; /* zeros, at most a window of them */
        if (run > r->ring) run = r->ring;
    } else if (pos < past && r->ring - pos % r->ring < run) {
        run = r->ring - pos % r->ring;
    }
    *n = run < want ? run : want;
    *stride = (size_t)kv->entry[l];
    return swa_entry(m, st, l, b, pos) + (size_t)part * width * kv->esize;
}

/* Rings start empty and grow with the sequence up to window + spare, so a
 * short request does not pay for a long window. While cap < ring every
 * stored position is below cap, so slot pos % ring == pos survives growth. */
static void ring_grow(kv_rings *r, int l, int end, size_t entry_bytes) {
    int want = end < r->ring ? end : r->ring;
    if (want <= r->cap[l]) return;
    int cap = r->cap[l] ? 2 * r->cap[l] : 16;
    if (cap < want) cap = want;
    if (cap > r->ring) cap = r->ring;
    r->layer[l] = di_realloc(r->layer[l], (size_t)cap * entry_bytes);
    r->cap[l] = cap;
}

void model_kv_commit(model *m, const model_step *st, int l) {
    const model_kv_pool *kv = st->kv;
    if (kv->layer_off[l] >= 0) return;
    size_t n = (size_t)kv->entry[l] * kv->esize; /* bytes */
    for (int b = 0; b < st->n_batch; b++) {
        const model_batch_seq *bs = &st->batch[b];
        kv_rings *r = bs->seq->swa;
        int past = seq_past(m, bs->seq, l);
        int from = bs->n_tokens > r->ring ? bs->n_tokens - r->ring : 0;
        ring_grow(r, l, past + bs->n_tokens, n);
        for (int i = from; i < bs->n_tokens; i++) {
            int pos = past + i;
            memcpy(r->layer[l] + (size_t)(pos % r->ring) * n,
                   (const unsigned char *)st->scratch + (size_t)(st->first[b] + i) * n, n);
        }
    }
}

void model_kv_prepare(model *m, const model_step *st) {
    size_t max_entry = 0;
    for (int l = 0; l < m->cfg.n_layers; l++)
        if (m->cfg.layer_swa[l] && model_kv_entry_bytes(m, l) > max_entry)
            max_entry = model_kv_entry_bytes(m, l);
    for (int b = 0; b < st->n_batch; b++) {
        kv_rings *r = st->batch[b].seq->swa;
        if (r && st->batch[b].seq->swa_floor > 0 && !r->zero)
            r->zero = di_calloc((size_t)r->ring, max_entry);
    }
}

int model_attn_start(const model *m, int l, int pos) {
    if (!m->cfg.layer_swa[l]) return 0;
    int s = pos - m->cfg.sliding_window + 1;
    return s > 0 ? s : 0;
}

int model_attn_first(const model *m, const model_step *st, int l, int b, int pos) {
    int s = model_attn_start(m, l, pos);
    if (!m->cfg.layer_swa[l] || l >= m->cfg.n_layers) return s;
    int floor = st->batch[b].seq->swa_floor;
    return s < floor ? floor : s;
}

void model_kv_copy_block(model_kv_pool *kv, int dst, int src) {
    size_t bb = kv->block_elts * kv->esize;
    if (dst == src || !bb) return;
    memcpy(kv->data + (size_t)dst * bb, kv->data + (size_t)src * bb, bb);
}

void *model_kv_block_data(model_kv_pool *kv, int block) {
    if (!kv || block < 0 || block >= kv->n_blocks || !kv->data) return NULL;
    return kv->data + (size_t)block * kv->block_elts * kv->esize;
}

int model_kv_block_layout(const model *m, size_t *off, size_t *bytes, int max) {
    int n = 0;
    size_t o = 0;
    for (int l = 0; l < n_all_layers(m); l++) {
        if (m->cfg.layer_swa[l]) continue;
        size_t b = (size_t)MODEL_KV_BLOCK * model_kv_entry_bytes(m, l);
        if (n < max) {
            off[n] = o;
            bytes[n] = b;
        }
        o += b;
        n++;
    }
    return n;
}

/* --- sliding-window snapshots ------------------------------------------------ */
/* Layout: for each sliding-window layer of the main model in order, `keep`
 * entries for positions pos - keep .. pos - 1. keep = min(window, pos -
 * swa_floor): no later token looks further back than the window. */
struct model_swa_state {
    int pos, keep, floor;
    size_t bytes;
    unsigned char data[];
};

model_swa_state *model_swa_save(model *m, const model_seq *s) {
    const kv_rings *r = s->swa;
    if (!r) return NULL;
    const model_config *c = &m->cfg;
    int keep = s->n_past - s->swa_floor;
    if (keep > c->sliding_window) keep = c->sliding_window;
    if (keep < 0) keep = 0;
    size_t bytes = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_swa[l]) bytes += (size_t)keep * model_kv_entry_bytes(m, l);
    model_swa_state *st = di_malloc(sizeof *st + bytes);
    st->pos = s->n_past;
    st->keep = keep;
    st->floor = s->n_past - keep;
    st->bytes = bytes;
    unsigned char *d = st->data;
    for (int l = 0; l < c->n_layers; l++) {
        if (!c->layer_swa[l]) continue;
        size_t n = model_kv_entry_bytes(m, l);
        for (int p = st->floor; p < st->pos; p++, d += n)
            memcpy(d, r->layer[l] + (size_t)(p % r->ring) * n, n);
    }
    return st;
}

void model_swa_restore(model *m, model_seq *s, const model_swa_state *st) {
    kv_rings *r = s->swa;
    if (!r || !st) return;
    const model_config *c = &m->cfg;
    const unsigned char *d = st->data;
    for (int l = 0; l < c->n_layers; l++) {
        if (!c->layer_swa[l]) continue;
        size_t n = model_kv_entry_bytes(m, l);
        ring_grow(r, l, st->pos, n);
        for (int p = st->floor; p < st->pos; p++, d += n)
            memcpy(r->layer[l] + (size_t)(p % r->ring) * n, d, n);
    }
    s->n_past = st->pos;
    s->swa_floor = st->floor;
}

int model_swa_state_pos(const model_swa_state *st) {
    return st->pos;
}
size_t model_swa_state_bytes(const model_swa_state *st) {
    return sizeof *st + st->bytes;
}
void model_swa_state_free(model_swa_state *st) {
    free(st);
}
