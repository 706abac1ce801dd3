/* tok_util.c — the tokenizer's small building blocks: the string->id and
 * pair->merge hash maps (open addressing: one probe sequence, no per-entry
 * allocation, so lookups in the BPE inner loop stay cheap), UTF-8 helpers,
 * the GPT-2 byte<->char map, and a growable byte buffer. No global mutable
 * state: the byte map is computed on the fly from a fixed rule. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "recipe/tok_internal.h"

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* ---- string map ----------------------------------------------------------- */
void tok_strmap_init(tok_strmap *m, size_t expect) {
    memset(m, 0, sizeof *m);
    m->cap = pow2_at_least(expect * 2 + 16);
    m->slot = di_calloc(m->cap, sizeof *m->slot);
    m->ecap = expect + 16;
    m->ent = di_malloc(m->ecap * sizeof *m->ent);
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slot);
    free(m->ent);
    memset(m, 0, sizeof *m);
}

static void strmap_grow(tok_strmap *m) {
    size_t cap = m->cap * 2;
    uint32_t *slot = di_calloc(cap, sizeof *slot);
    for (size_t e = 0; e < m->n; e++) {
        size_t i = (size_t)XXH3_64bits(m->ent[e].s, m->ent[e].len) & (cap - 1);
        while (slot[i]) i = (i + 1) & (cap - 1);
        slot[i] = (uint32_t)(e + 1);
    }
    free(m->slot);
    m->slot = slot;
    m->cap = cap;
}

void tok_strmap_put(tok_strmap *m, const char *s, size_t len, int id) {
    if ((m->n + 1) * 2 > m->cap) strmap_grow(m);
    size_t i = (size_t)XXH3_64bits(s, len) & (m->cap - 1);
    while (m->slot[i]) {
        struct tok_sment *e = &m->ent[m->slot[i] - 1];
        if (e->len == len && !memcmp(e->s, s, len)) {
            e->id = id;
            return;
        }
        i = (i + 1) & (m->cap - 1);
    }
    if (m->n == m->ecap) {
        m->ecap *= 2;
        m->ent = di_realloc(m->ent, m->ecap * sizeof *m->ent);
    }
    m->ent[m->n] = (struct tok_sment){s, (uint32_t)len, id};
    m->slot[i] = (uint32_t)++m->n;
}

int tok_strmap_get(const tok_strmap *m, const char *s, size_t len) {
    if (!m->cap) return -1;
    size_t i = (size_t)XXH3_64bits(s, len) & (m->cap - 1);
    while (m->slot[i]) {
        const struct tok_sment *e = &m->ent[m->slot[i] - 1];
        if (e->len == len && !memcmp(e->s, s, len)) return e->id;
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

/* ---- pair map ------------------------------------------------------------- */
void tok_pairmap_init(tok_pairmap *m, size_t expect) {
    m->cap = pow2_at_least(expect * 2 + 16);
    m->n = 0;
    m->e = di_malloc(m->cap * sizeof *m->e);
    for (size_t i = 0; i < m->cap; i++) m->e[i].key = UINT64_MAX;
}

void tok_pairmap_free(tok_pairmap *m) {
    free(m->e);
    memset(m, 0, sizeof *m);
}

static void pairmap_insert(tok_pairmap *m, uint64_t key, uint32_t rank, int id) {
    size_t mask = m->cap - 1, i = (size_t)tok_pair_hash(key) & mask;
    while (m->e[i].key != UINT64_MAX && m->e[i].key != key) i = (i + 1) & mask;
    if (m->e[i].key == UINT64_MAX) m->n++;
    m->e[i] = (struct tok_pent){key, rank, id};
}

void tok_pairmap_put(tok_pairmap *m, int a, int b, uint32_t rank, int id) {
    if ((m->n + 1) * 2 > m->cap) {
        tok_pairmap old = *m;
        m->cap *= 2;
        m->n = 0;
        m->e = di_malloc(m->cap * sizeof *m->e);
        for (size_t i = 0; i < m->cap; i++) m->e[i].key = UINT64_MAX;
        for (size_t i = 0; i < old.cap; i++)
            if (old.e[i].key != UINT64_MAX)
                pairmap_insert(m, old.e[i].key, old.e[i].rank, old.e[i].id);
        free(old.e);
    }
    pairmap_insert(m, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b, rank, id);
}

/* ---- UTF-8 ---------------------------------------------------------------- */
size_t tok_utf8_next(const char *s, size_t n, uint32_t *cp) {
    const uint8_t *u = (const uint8_t *)s;
    if (n == 0) return 0;
    uint8_t c = u[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, v = c & 0x07, min = 0x10000;
    else
        return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (u[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

size_t tok_utf8_put(uint32_t cp, char *out) {
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

size_t tok_utf8_check(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* ASCII runs eight bytes at a time */
        uint64_t w;
        while (i + 8 <= n && (memcpy(&w, s + i, 8), !(w & 0x8080808080808080ull))) i += 8;
        if (i >= n) break;
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t l = tok_utf8_next(s + i, n - i, &cp);
        if (!l) return i;
        i += l;
    }
    return n;
}

/* ---- GPT-2 byte map: printable bytes map to themselves, the other 68 to
 * U+0100.. in byte order. ---------------------------------------------------- */
static bool byte_is_direct(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cp(uint8_t b) {
    if (byte_is_direct(b)) return b;
    uint32_t k = 0;
    for (int i = 0; i < b; i++) k += !byte_is_direct(i);
    return 256 + k;
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_direct((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t k = cp - 256;
    for (int i = 0; i < 256; i++)
        if (!byte_is_direct(i) && k-- == 0) return i;
    return -1;
}
