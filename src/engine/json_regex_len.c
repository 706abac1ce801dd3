/* json_regex_len.c — a pattern's DFA under a string length range
 * (json_regex.h): for each length written so far, the states from which a
 * value of an allowed length can still be finished, so that a pattern and
 * a minLength / maxLength together never lead where neither lets the
 * string go on or end. Computed longest length first: a character (a byte
 * that starts one) moves to the next length, a UTF-8 continuation byte
 * stays in its own (at most three in a row, so three passes settle it). */
#include <stdlib.h>

#include "base/base.h"
#include "engine/json_regex.h"

struct jr_lengths {
    uint32_t lo, hi, top; /* lengths past top (no most: lo) count as top */
    int n;                /* states */
    size_t words;         /* 64-bit words a length */
    uint64_t *bits;
};

static bool get(const jr_lengths *l, uint32_t len, int q) {
    return l->bits[len * l->words + (size_t)q / 64] >> (q % 64) & 1;
}

jr_lengths *jr_lengths_new(const jr_dfa *d, uint32_t lo, uint32_t hi, size_t max_bits, bool *none) {
    *none = false;
    int n = jr_states(d), ncls = jr_classes(d);
    uint32_t top = hi != UINT32_MAX ? hi : lo;
    size_t words = ((size_t)n + 63) / 64;
    if (lo > hi || ((size_t)top + 1) * words * 64 > max_bits) return NULL;
    jr_lengths *l = di_calloc(1, sizeof *l);
    *l = (jr_lengths){.lo = lo, .hi = hi, .top = top, .n = n, .words = words};
    l->bits = di_calloc(((size_t)top + 1) * words, sizeof *l->bits);
    bool starts[256]; /* class k's bytes start a character */
    for (int k = 0; k < ncls; k++) {
        int b = jr_class_byte(d, k);
        starts[k] = b >= 0 && (b & 0xC0) != 0x80;
    }
    for (uint32_t len = top + 1; len-- > 0;) {
        uint64_t *row = l->bits + len * words;
        if (hi == UINT32_MAX && len == top) { /* long enough: every state can finish */
            for (int q = 0; q < n; q++) row[q / 64] |= 1ull << (q % 64);
            continue;
        }
        for (int pass = 0; pass < 4; pass++)
            for (int q = 0; q < n; q++) {
                bool ok = jr_accepts(d, q) && len >= lo;
                for (int k = 0; k < ncls && !ok; k++) {
                    int t = jr_step_class(d, q, k);
                    if (!jr_live(t)) continue;
                    uint32_t next = len + starts[k];
                    if (next > top) {
                        if (hi != UINT32_MAX) continue;
                        next = top;
                    }
                    ok = get(l, next, t);
                }
                if (ok) row[q / 64] |= 1ull << (q % 64);
            }
    }
    if (!get(l, 0, 0)) {
        *none = true;
        jr_lengths_free(l);
        return NULL;
    }
    return l;
}

void jr_lengths_free(jr_lengths *l) {
    if (!l) return;
    free(l->bits);
    free(l);
}

size_t jr_lengths_bits(const jr_lengths *l) {
    return ((size_t)l->top + 1) * l->words * 64;
}

bool jr_lengths_ok(const jr_lengths *l, int state, uint32_t len) {
    if (len > l->top) {
        if (l->hi != UINT32_MAX) return false;
        len = l->top;
    }
    return get(l, len, state);
}
