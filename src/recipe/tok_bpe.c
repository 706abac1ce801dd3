/* tok_bpe.c — the BPE model and the serial encoder for untrusted text.
 *
 * A word's initial symbols are its bytes (byte-level: one id per byte through
 * the GPT-2 map) or its characters (SentencePiece: vocabulary lookup, then
 * <0xNN> byte fallback, then unk with fuse_unk), exactly as HF's merge_word
 * builds them. Merging follows HF's rule — repeatedly apply the lowest-rank
 * merge, leftmost first — with a rank array scan for short words (no heap,
 * two merge lookups per merge) and HF's priority queue over a linked list for
 * long ones (1 MB words stay O(n log n)). Merges are found in a hash map keyed
 * by the id pair. A per-call word cache (words seen before reuse their ids)
 * makes long texts cheap; scratch arrays live in the per-call tok_enc, so the
 * inner loop does not allocate. The vocabulary used here excludes added
 * tokens, so no text can produce a control id. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "recipe/tok_internal.h"

#define SMALL_WORD   48 /* symbols; above this the heap is used */
#define CACHE_KEYMAX 64 /* bytes; longer words are not cached */
#define CACHE_MAX    (1u << 17)

typedef struct hent {
    uint32_t rank;
    int pos, id;
} hent;

typedef struct cent {
    uint64_t h;
    uint32_t koff, klen, voff, vlen;
} cent;

struct tok_enc {
    tok_pre pre;
    int *sym, *prev, *next, *nid;
    uint32_t *rank;
    size_t scap;
    hent *heap;
    size_t hn, hcap;
    cent *tab;
    size_t tcap, tn;
    di_buf keys;
    tok_ids vals;
    bool use_cache;
    tok_wcache *shared; /* instead of the own cache, written as writer */
    int writer;
};

tok_enc *tok_enc_new(const tokenizer *t, size_t text_len) {
    (void)t;
    tok_enc *e = di_calloc(1, sizeof *e);
    e->use_cache = text_len >= 2048;
    return e;
}

tok_enc *tok_enc_new_shared(const tokenizer *t, tok_wcache *shared, int writer) {
    tok_enc *e = tok_enc_new(t, 0);
    e->use_cache = true;
    e->shared = shared;
    e->writer = writer;
    return e;
}

void tok_enc_free(tok_enc *e) {
    if (!e) return;
    tok_pre_free(&e->pre);
    free(e->sym), free(e->prev), free(e->next), free(e->nid), free(e->rank);
    free(e->heap);
    free(e->tab);
    free(e->keys.p);
    tok_ids_free(&e->vals);
    free(e);
}

static void reserve_syms(tok_enc *e, size_t n) {
    if (n <= e->scap) return;
    size_t c = e->scap ? e->scap : 64;
    while (c < n) c *= 2;
    e->sym = di_realloc(e->sym, c * sizeof *e->sym);
    e->prev = di_realloc(e->prev, c * sizeof *e->prev);
    e->next = di_realloc(e->next, c * sizeof *e->next);
    e->nid = di_realloc(e->nid, c * sizeof *e->nid);
    e->rank = di_realloc(e->rank, c * sizeof *e->rank);
    e->scap = c;
}

/* Initial symbols of word s[0, n) into e->sym; returns their count. */
static size_t initial_symbols(const tokenizer *t, tok_enc *e, const char *s, size_t n) {
    reserve_syms(e, n + 1);
    size_t k = 0;
    if (t->byte_level) {
        for (size_t i = 0; i < n; i++) {
            int id = t->byte_id[(uint8_t)s[i]];
            if (id >= 0)
                e->sym[k++] = id;
            else if (t->unk_id >= 0) {
                if (!(t->fuse_unk && k && e->sym[k - 1] == t->unk_id)) e->sym[k++] = t->unk_id;
            }
        }
        return k;
    }
    int unk = -1; /* pending unk, as HF keeps it */
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = tok_utf8_next(s + i, n - i, &cp);
        if (!l) l = 1;
        int id = tok_strmap_get(&t->vocab, s + i, l);
        if (id >= 0) {
            if (unk >= 0) e->sym[k++] = unk, unk = -1;
            e->sym[k++] = id;
        } else {
            bool done = false;
            if (t->byte_fallback) {
                bool all = true;
                for (size_t b = 0; b < l; b++) all = all && t->byte_id[(uint8_t)s[i + b]] >= 0;
                if (all) {
                    for (size_t b = 0; b < l; b++) e->sym[k++] = t->byte_id[(uint8_t)s[i + b]];
                    done = true;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (unk >= 0 && !t->fuse_unk) e->sym[k++] = unk;
                unk = t->unk_id;
            }
        }
        i += l;
    }
    if (unk >= 0) e->sym[k++] = unk;
    return k;
}

static inline uint32_t pair_rank(const tokenizer *t, int a, int b, int *nid) {
    uint32_t r;
    int m = tok_pairmap_get(&t->merges, a, b, &r);
    *nid = m;
    return m < 0 ? UINT32_MAX : r;
}

/* Short words: ranks of adjacent pairs in an array, merged in place. */
static size_t merge_small(const tokenizer *t, tok_enc *e, size_t n) {
    int *sym = e->sym, *nid = e->nid;
    uint32_t *rank = e->rank;
    for (size_t i = 0; i + 1 < n; i++) rank[i] = pair_rank(t, sym[i], sym[i + 1], &nid[i]);
    while (n > 1) {
        size_t best = 0;
        uint32_t br = rank[0];
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < br) br = rank[i], best = i;
        if (br == UINT32_MAX) break;
        sym[best] = nid[best];
        memmove(sym + best + 1, sym + best + 2, (n - best - 2) * sizeof *sym);
        memmove(rank + best + 1, rank + best + 2, (n - best - 2) * sizeof *rank);
        memmove(nid + best + 1, nid + best + 2, (n - best - 2) * sizeof *nid);
        n--;
        if (best + 1 < n) rank[best] = pair_rank(t, sym[best], sym[best + 1], &nid[best]);
        if (best > 0) rank[best - 1] = pair_rank(t, sym[best - 1], sym[best], &nid[best - 1]);
    }
    return n;
}

static inline bool hless(hent a, hent b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void hpush(tok_enc *e, hent h) {
    if (e->hn == e->hcap) {
        e->hcap = e->hcap ? e->hcap * 2 : 256;
        e->heap = di_realloc(e->heap, e->hcap * sizeof *e->heap);
    }
    size_t i = e->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(h, e->heap[p])) break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = h;
}

static hent hpop(tok_enc *e) {
    hent top = e->heap[0], last = e->heap[--e->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= e->hn) break;
        if (c + 1 < e->hn && hless(e->heap[c + 1], e->heap[c])) c++;
        if (!hless(e->heap[c], last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (e->hn) e->heap[i] = last;
    return top;
}

/* Long words: HF's priority queue over a linked list of symbols. */
static size_t merge_heap(const tokenizer *t, tok_enc *e, size_t n) {
    int *sym = e->sym, *prev = e->prev, *next = e->next;
    uint8_t *dead = (uint8_t *)e->rank; /* reuse: one byte per symbol */
    memset(dead, 0, n);
    e->hn = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int)i - 1;
        next[i] = i + 1 < n ? (int)i + 1 : -1;
        int m;
        uint32_t r = i + 1 < n ? pair_rank(t, sym[i], sym[i + 1], &m) : UINT32_MAX;
        if (r != UINT32_MAX) hpush(e, (hent){r, (int)i, m});
    }
    while (e->hn) {
        hent top = hpop(e);
        int p = top.pos;
        if (dead[p] || next[p] < 0) continue;
        int q = next[p], m;
        if (pair_rank(t, sym[p], sym[q], &m) == UINT32_MAX || m != top.id) continue;
        sym[p] = m;
        dead[q] = 1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        uint32_t r;
        if (prev[p] >= 0 && (r = pair_rank(t, sym[prev[p]], sym[p], &m)) != UINT32_MAX)
            hpush(e, (hent){r, prev[p], m});
        if (next[p] >= 0 && (r = pair_rank(t, sym[p], sym[next[p]], &m)) != UINT32_MAX)
            hpush(e, (hent){r, p, m});
    }
    size_t k = 0;
    for (int i = 0; i >= 0; i = next[i]) sym[k++] = sym[i];
    return k;
}

static void encode_word(const tokenizer *t, tok_enc *e, const char *s, size_t n, tok_ids *out) {
    if (t->ignore_merges) {
        int id = t->byte_level ? tok_strmap_get(&t->raw, s, n) : tok_strmap_get(&t->vocab, s, n);
        if (id >= 0) {
            tok_ids_push(out, id);
            return;
        }
    }
    size_t k = initial_symbols(t, e, s, n);
    if (!k) return;
    k = k <= SMALL_WORD ? merge_small(t, e, k) : merge_heap(t, e, k);
    for (size_t i = 0; i < k; i++) tok_ids_push(out, e->sym[i]);
}

static void cache_grow(tok_enc *e) {
    size_t cap = e->tcap ? e->tcap * 2 : 1024;
    cent *tab = di_calloc(cap, sizeof *tab);
    for (size_t i = 0; i < e->tcap; i++) {
        if (!e->tab[i].klen) continue;
        size_t j = (size_t)e->tab[i].h & (cap - 1);
        while (tab[j].klen) j = (j + 1) & (cap - 1);
        tab[j] = e->tab[i];
    }
    free(e->tab);
    e->tab = tab;
    e->tcap = cap;
}

/* A word's ids, from the caches when they have it. The own table is looked
 * up first (it stays small and hot, as in a serial encode); a parallel
 * encode's shared table is asked only on a miss there, so each word's BPE is
 * done about once over all threads but the shared table is not touched per
 * word. */
static void encode_cached(const tokenizer *t, tok_enc *e, const char *s, size_t n, tok_ids *out) {
    if (!e->use_cache || n > CACHE_KEYMAX) {
        encode_word(t, e, s, n, out);
        return;
    }
    if (!e->tcap) cache_grow(e);
    uint64_t h = XXH3_64bits(s, n);
    size_t j = (size_t)h & (e->tcap - 1);
    while (e->tab[j].klen) {
        cent *c = &e->tab[j];
        if (c->h == h && c->klen == n && !memcmp(e->keys.p + c->koff, s, n)) {
            for (uint32_t i = 0; i < c->vlen; i++) tok_ids_push(out, e->vals.v[c->voff + i]);
            return;
        }
        j = (j + 1) & (e->tcap - 1);
    }
    size_t before = out->n, k;
    const int *v = e->shared ? tok_wcache_get(e->shared, h, s, n, &k) : NULL;
    if (v) {
        for (size_t i = 0; i < k; i++) tok_ids_push(out, v[i]);
    } else {
        encode_word(t, e, s, n, out);
        if (e->shared)
            tok_wcache_put(e->shared, e->writer, h, s, n, out->v + before, out->n - before);
    }
    if (e->tn >= CACHE_MAX) return;
    cent c = {h, (uint32_t)e->keys.n, (uint32_t)n, (uint32_t)e->vals.n,
              (uint32_t)(out->n - before)};
    di_buf_add(&e->keys, s, n);
    for (size_t i = before; i < out->n; i++) tok_ids_push(&e->vals, out->v[i]);
    e->tab[j] = c;
    if (++e->tn * 2 > e->tcap) cache_grow(e);
}

struct word_ctx {
    const tokenizer *t;
    tok_enc *e;
    tok_ids *out;
};

static void word_cb(void *ctx, const char *s, size_t n) {
    struct word_ctx *w = ctx;
    encode_cached(w->t, w->e, s, n, w->out);
}

int tok_encode_normalized(const tokenizer *t, tok_enc *e, const char *text, size_t len, bool first,
                          tok_ids *out, di_err *err) {
    if (!len) return 0;
    if (!t->n_pretoks) {
        /* one word; cut where no merge can cross (tok_next_cut), which
         * changes nothing but lets the cache work */
        size_t pos = 0;
        while (pos < len) {
            size_t c = t->cut_rule ? tok_next_cut(t, text, len, pos + 1) : len;
            encode_cached(t, e, text + pos, c - pos, out);
            pos = c;
        }
        return 0;
    }
    struct word_ctx w = {t, e, out};
    return tok_pretokenize(t, &e->pre, text, len, first, word_cb, &w, err);
}

int tok_encode_text(const tokenizer *t, const char *text, size_t len, tok_ids *out, di_err *err) {
    size_t bad = tok_utf8_check(text, len);
    if (bad != len) return di_errf(err, "tokenize: text is not valid UTF-8 at byte %zu", bad);
    bool same;
    size_t nlen;
    char *norm = tok_normalize(t, text, len, &nlen, &same, err);
    if (!norm && !same) return -1;
    tok_enc *e = tok_enc_new(t, nlen);
    int rc = tok_encode_normalized(t, e, norm ? norm : text, nlen, true, out, err);
    tok_enc_free(e);
    free(norm);
    return rc;
}
