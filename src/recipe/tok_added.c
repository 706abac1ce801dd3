/* tok_added.c — the trusted encoder: added tokens recognised in text the way
 * Hugging Face's AddedVocabulary does, flags honoured.
 *
 * Only for text the server itself wrote (a rendered template); user text goes
 * through tok_encode_text, which never sees added tokens. Two passes, as HF:
 * tokens with normalized=false are matched on the raw text; each remaining
 * piece is normalized on its own and tokens with normalized=true are matched
 * on it; what remains goes to pre-tokenization and BPE. Matching is
 * leftmost-longest (HF uses Aho-Corasick with that match kind; with a few
 * hundred tokens a first-byte index is as fast). single_word rejects a match
 * touching a word character; lstrip / rstrip widen it over adjacent
 * whitespace. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "recipe/tok_internal.h"

static bool is_word_cp(uint32_t cp) {
    if (cp == '_') return true;
    int c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO) ||
           (c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ME) || c == UTF8PROC_CATEGORY_PC;
}

static bool is_ws_cp(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || cp == ' ' || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* Code point ending at s[i) (i > 0). */
static uint32_t cp_before(const char *s, size_t i, size_t *start) {
    size_t j = i - 1;
    while (j > 0 && ((uint8_t)s[j] & 0xC0) == 0x80) j--;
    uint32_t cp = 0xFFFD;
    tok_utf8_next(s + j, i - j, &cp);
    *start = j;
    return cp;
}

typedef struct match {
    size_t s, e;
    int id;
} match;

/* Finds the next accepted match of the given kind (normalized flag) in
 * s[from, n); returns false if none. */
static bool next_match(const tokenizer *t, const char *s, size_t n, size_t from, size_t floor,
                       bool normalized, match *m) {
    bool first[256] = {false};
    for (int a = 0; a < t->n_adds; a++)
        if (t->adds[a].normalized == normalized) first[(uint8_t)t->adds[a].content[0]] = true;
    for (size_t i = from; i < n; i++) {
        if (!first[(uint8_t)s[i]]) continue;
        const tok_added *best = NULL;
        size_t best_len = 0;
        for (int a = 0; a < t->n_adds; a++) {
            const tok_added *ad = &t->adds[a];
            size_t l = strlen(ad->content);
            if (ad->normalized != normalized || !l || l > n - i || l <= best_len ||
                (uint8_t)ad->content[0] != (uint8_t)s[i] || memcmp(ad->content, s + i, l))
                continue;
            best = ad, best_len = l;
        }
        if (!best) continue;
        size_t ms = i, me = i + best_len, tmp;
        uint32_t cp;
        if (best->single_word) {
            bool left_ok = ms == 0 || !is_word_cp(cp_before(s, ms, &tmp));
            bool right_ok = me == n || !tok_utf8_next(s + me, n - me, &cp) || !is_word_cp(cp);
            if (!left_ok || !right_ok) continue;
        }
        if (best->lstrip) {
            while (ms > floor && is_ws_cp(cp_before(s, ms, &tmp))) ms = tmp;
        }
        if (best->rstrip) {
            size_t l;
            while (me < n && (l = tok_utf8_next(s + me, n - me, &cp)) && is_ws_cp(cp)) me += l;
        }
        *m = (match){ms, me, best->id};
        return true;
    }
    return false;
}

/* Pass 2 on one piece of the raw text: normalize, split on normalized added
 * tokens, encode the rest. */
static int encode_piece(const tokenizer *t, const char *s, size_t n, bool at_start, tok_ids *out,
                        di_err *err) {
    if (!n) return 0;
    bool same;
    size_t nn;
    char *norm = tok_normalize(t, s, n, &nn, &same, err);
    if (!norm && !same) return -1;
    const char *p = norm ? norm : s;
    tok_enc *e = tok_enc_new(t, nn);
    size_t pos = 0;
    int rc = 0;
    match m;
    while (!rc && pos < nn && next_match(t, p, nn, pos, pos, true, &m)) {
        if (m.s > pos)
            rc = tok_encode_normalized(t, e, p + pos, m.s - pos, at_start && pos == 0, out, err);
        tok_ids_push(out, m.id);
        pos = m.e;
    }
    if (!rc && pos < nn)
        rc = tok_encode_normalized(t, e, p + pos, nn - pos, at_start && pos == 0, out, err);
    tok_enc_free(e);
    free(norm);
    return rc;
}

int tok_encode_trusted(const tokenizer *t, const char *text, size_t len, tok_ids *out,
                       di_err *err) {
    size_t bad = tok_utf8_check(text, len);
    if (bad != len) return di_errf(err, "tokenize: text is not valid UTF-8 at byte %zu", bad);
    size_t pos = 0;
    match m;
    while (pos < len && next_match(t, text, len, pos, pos, false, &m)) {
        if (m.s > pos && encode_piece(t, text + pos, m.s - pos, pos == 0, out, err)) return -1;
        tok_ids_push(out, m.id);
        pos = m.e;
    }
    return encode_piece(t, text + pos, len - pos, pos == 0, out, err);
}
