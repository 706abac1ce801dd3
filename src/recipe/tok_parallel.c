/* tok_parallel.c — cutting text where neither the normalizers nor the
 * pre-tokenizer can act across, and encoding the pieces on a pool.
 *
 * Two rules, each chosen at load only when it is proven for the tokenizer:
 *
 * 1. Byte-level tokenizers whose every split regex is one we have reasoned
 *    about (GPT-2, Llama 3, Qwen2/3, DeepSeek V3): cut at p when text[p-1] is
 *    '\n' and text[p] is a letter (\p{L}; in raw text an ASCII letter). In
 *    each of those regexes no alternative can consume a '\n' and then a
 *    letter: the letter-run alternatives' optional prefix excludes \r\n
 *    (GPT-2 and the DeepSeek \p{N} / CJK splits cannot match either
 *    character), and every alternative that matches '\n' ends in [\r\n]* /
 *    \s and stops before a letter. Every character is covered by some
 *    alternative, so the match covering p-1 ends exactly at p; none of the
 *    patterns looks behind, and the lookahead (?!\S) never decides a run that
 *    ends in '\n' (the \s*[\r\n]+ alternative comes first). Matching from p
 *    therefore sees the same thing serially and in isolation.
 * 2. SentencePiece BPE without pre-tokenizer (Llama 2): the whole text is one
 *    word, but when no vocabulary token contains a non-"▁" character followed
 *    by "▁" (checked over the whole vocabulary at load), no merge can join
 *    the two sides of such a position, so BPE of the parts equals BPE of the
 *    whole (merges on the two sides commute).
 *
 * Normalizers that commute with the cut (cut_raw) let each piece be cut in
 * the raw text and validated, normalized and encoded on its own thread, so
 * nothing proportional to the text runs serially but one memcpy of the ids:
 * - rule 1 with Unicode forms (NFC, NFKC, NFD, NFKD) only: '\n' and ASCII
 *   letters are starters that never compose with a preceding character, so
 *   normalization has a boundary before each of them and NF(a + b) = NF(a) +
 *   NF(b); the normalized piece still starts with a letter (an ASCII letter
 *   composes only into letters) after a '\n', so rule 1 holds on the result.
 * - rule 2 with Prepend (applied to the first piece only, as to the text's
 *   start) and Replace(" " -> "▁"): each character maps on its own, and a raw
 *   " " or "▁" after a character that is neither becomes exactly the "▁" after
 *   a non-"▁" that rule 2 cuts at.
 * Other normalizers run serially over the whole text, then it is cut.
 *
 * Each pool thread keeps one encoder (scratch, ids) for all the pieces it
 * takes; pieces are many and small (the pool hands them out, so the last one
 * bounds the imbalance). The only thing the threads share is the word cache
 * (tok_cache.c), so a word's BPE is done about once. Anything not covered above
 * encodes serially. The property tests check parallel == serial on random
 * and adversarial inputs with every cut taken. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/tok_internal.h"

#define SPACE_MARK "\xE2\x96\x81" /* ▁ */

static const char *const SAFE_REGEXES[] = {
    /* Llama 3 */
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    /* Qwen2 / Qwen3 */
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    /* DeepSeek V3 (three splits) */
    "\\p{N}{1,3}",
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+",
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

bool tok_regex_cut_safe(const char *pattern) {
    for (size_t i = 0; i < sizeof SAFE_REGEXES / sizeof *SAFE_REGEXES; i++)
        if (!strcmp(pattern, SAFE_REGEXES[i])) return true;
    return false;
}

static int choose_cut_rule(const tokenizer *t) {
    if (!t->n_pretoks) {
        if (t->byte_level || t->ignore_merges) return 0;
        if (tok_strmap_get(&t->vocab, SPACE_MARK, 3) < 0) return 0;
        for (size_t e = 0; e < t->vocab.n; e++) {
            const char *s = t->vocab.ent[e].s;
            size_t n = t->vocab.ent[e].len;
            for (size_t i = 1; i + 3 <= n; i++)
                if (!memcmp(s + i, SPACE_MARK, 3) && !(i >= 3 && !memcmp(s + i - 3, SPACE_MARK, 3)))
                    return 0;
        }
        return 2;
    }
    for (int i = 0; i < t->n_pretoks; i++) {
        const tok_pretok *p = &t->pretoks[i];
        if (p->kind == TP_SPLIT && p->cut_safe && p->behavior == TB_ISOLATED && !p->invert)
            continue;
        if (p->kind == TP_BYTELEVEL && !p->add_prefix_space) continue; /* GPT-2 regex is safe */
        return 0;
    }
    return t->byte_level ? 1 : 0;
}

void tok_choose_cuts(tokenizer *t) {
    t->cut_rule = choose_cut_rule(t);
    t->cut_raw = t->cut_rule != 0;
    t->cut_space_mark = false;
    for (int i = 0; i < t->n_norms; i++) {
        const tok_norm *n = &t->norms[i];
        bool unicode_form =
            n->kind == TN_NFC || n->kind == TN_NFKC || n->kind == TN_NFD || n->kind == TN_NFKD;
        bool space_mark = n->kind == TN_REPLACE && n->alen == 1 && n->a[0] == ' ' && n->blen == 3 &&
                          !memcmp(n->b, SPACE_MARK, 3);
        if (t->cut_rule == 1 && unicode_form) continue;
        if (t->cut_rule == 2 && (n->kind == TN_PREPEND || space_mark)) {
            t->cut_space_mark |= space_mark;
            continue;
        }
        t->cut_raw = false;
    }
}

static bool ascii_letter(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

size_t tok_next_cut(const tokenizer *t, const char *s, size_t len, size_t pos) {
    if (pos == 0) pos = 1;
    if (t->cut_rule == 1) {
        while (pos < len) {
            const char *nl = memchr(s + pos - 1, '\n', len - pos);
            if (!nl) return len;
            size_t c = (size_t)(nl - s) + 1;
            if (ascii_letter(s[c])) return c;
            pos = c + 1;
        }
        return len;
    }
    if (t->cut_rule == 2) {
        while (pos < len) {
            const char *m = memmem(s + pos, len - pos, SPACE_MARK, 3);
            if (!m) return len;
            size_t c = (size_t)(m - s);
            if (!(c >= 3 && !memcmp(s + c - 3, SPACE_MARK, 3))) return c;
            pos = c + 3;
        }
        return len;
    }
    return len;
}

/* Rule 2 in raw text with Replace(" " -> "▁"): a " " or "▁" after a
 * character that is neither. */
static size_t next_raw_space_cut(const char *s, size_t len, size_t pos) {
    for (size_t c = pos; c < len; c++) {
        bool mark = s[c] == ' ' || (c + 3 <= len && !memcmp(s + c, SPACE_MARK, 3));
        if (!mark) continue;
        if (s[c - 1] == ' ' || (c >= 3 && !memcmp(s + c - 3, SPACE_MARK, 3))) continue;
        return c;
    }
    return len;
}

/* A cut at or after pos in the text the pieces are cut from (raw when
 * t->cut_raw, else normalized). */
static size_t next_piece_cut(const tokenizer *t, const char *s, size_t len, size_t pos) {
    if (pos == 0) pos = 1;
    if (t->cut_raw && t->cut_space_mark) return next_raw_space_cut(s, len, pos);
    return tok_next_cut(t, s, len, pos);
}

typedef struct piece {
    size_t off, len;
    int worker;      /* whose ids hold the result */
    size_t start, n; /* range in that worker's ids */
    int rc;
    di_err err;
} piece;

/* One per pool thread: a task takes a free one, so encoders and ids are
 * never shared between threads that run at the same time. Padded to its own
 * cache lines. */
typedef struct worker {
    _Alignas(64) atomic_flag busy;
    tok_enc *enc;
    tok_ids ids;
} worker;

typedef struct pjob {
    const tokenizer *t;
    const char *text;
    size_t text_len;
    bool raw; /* pieces are raw text: validate and normalize each */
    piece *pc;
    worker *w;
    int n_workers;
    tok_wcache *cache;
} pjob;

static int take_worker(pjob *j) {
    for (int i = 0;; i = (i + 1) % j->n_workers)
        if (!atomic_flag_test_and_set_explicit(&j->w[i].busy, memory_order_acquire)) return i;
}

static void run_piece(void *ctx, int i, int n) {
    (void)n;
    pjob *j = ctx;
    piece *pc = &j->pc[i];
    int wi = take_worker(j);
    worker *w = &j->w[wi];
    if (!w->enc) w->enc = tok_enc_new_shared(j->t, j->cache, wi);
    const char *s = j->text + pc->off;
    size_t len = pc->len;
    char *norm = NULL;
    pc->rc = 0;
    if (j->raw) {
        size_t bad = tok_utf8_check(s, len);
        if (bad != len)
            pc->rc =
                di_errf(&pc->err, "tokenize: text is not valid UTF-8 at byte %zu", pc->off + bad);
        bool same;
        if (!pc->rc) {
            norm = tok_normalize_part(j->t, s, len, pc->off == 0, &len, &same, &pc->err);
            if (!norm && !same) pc->rc = -1;
            if (norm) s = norm;
        }
    }
    pc->worker = wi;
    pc->start = w->ids.n;
    if (!pc->rc)
        pc->rc = tok_encode_normalized(j->t, w->enc, s, len, pc->off == 0, &w->ids, &pc->err);
    pc->n = w->ids.n - pc->start;
    free(norm);
    atomic_flag_clear_explicit(&w->busy, memory_order_release);
}

int tok_encode_parallel_min(const tokenizer *t, pool *p, const char *text, size_t len,
                            size_t min_piece, tok_ids *out, di_err *err) {
    if (!p || !t->cut_rule || len < 2 * min_piece) return tok_encode_text(t, text, len, out, err);
    const char *s = text;
    char *norm = NULL;
    size_t slen = len;
    if (!t->cut_raw) {
        size_t bad = tok_utf8_check(text, len);
        if (bad != len) return di_errf(err, "tokenize: text is not valid UTF-8 at byte %zu", bad);
        bool same;
        norm = tok_normalize(t, text, len, &slen, &same, err);
        if (!norm && !same) return -1;
        if (norm) s = norm;
    }
    if (min_piece == 0) min_piece = 1;
    piece *pc = NULL;
    size_t np = 0, cap = 0;
    for (size_t pos = 0; pos < slen;) {
        size_t cut = next_piece_cut(t, s, slen, pos + min_piece);
        if (np == cap) pc = di_realloc(pc, (cap = cap ? cap * 2 : 64) * sizeof *pc);
        pc[np++] = (piece){.off = pos, .len = cut - pos};
        pos = cut;
    }
    int nw = pool_threads(p);
    if ((size_t)nw > np) nw = (int)np;
    pjob j = {t,    s,
              slen, t->cut_raw,
              pc,   di_alloc_aligned((size_t)nw * sizeof(worker)),
              nw,   tok_wcache_new(slen, nw)};
    for (int i = 0; i < nw; i++) atomic_flag_clear(&j.w[i].busy);
    pool_run(p, run_piece, &j, (int)np);
    /* join: the first failing piece is the first error of a serial encode */
    int rc = 0;
    size_t total = 0;
    for (size_t i = 0; i < np && !rc; i++) {
        if (pc[i].rc) {
            rc = -1;
            if (err) *err = pc[i].err;
        }
        total += pc[i].n;
    }
    if (!rc && total) {
        if (out->cap < out->n + total) {
            out->cap = out->n + total;
            out->v = di_realloc(out->v, out->cap * sizeof *out->v);
        }
        for (size_t i = 0; i < np; i++) {
            memcpy(out->v + out->n, j.w[pc[i].worker].ids.v + pc[i].start,
                   pc[i].n * sizeof *out->v);
            out->n += pc[i].n;
        }
    }
    for (int i = 0; i < nw; i++) {
        tok_enc_free(j.w[i].enc);
        tok_ids_free(&j.w[i].ids);
    }
    di_free_aligned(j.w);
    tok_wcache_free(j.cache);
    free(pc);
    free(norm);
    return rc;
}

int tok_encode_text_parallel(const tokenizer *t, pool *p, const char *text, size_t len,
                             tok_ids *out, di_err *err) {
    int threads = p ? pool_threads(p) : 1;
    /* many pieces per thread: the pool hands them out as threads come free,
     * so the last piece bounds the imbalance; each thread's encoder (and its
     * word cache) lives across all the pieces it takes */
    size_t piece = len / (size_t)(threads * 16);
    if (piece < 16384) piece = 16384;
    return tok_encode_parallel_min(t, p, text, len, piece, out, err);
}
