/* tok_parallel.c — cutting normalized text where the pre-tokenizer provably
 * cannot merge across, and encoding the pieces on a pool.
 *
 * Two rules, each chosen at load only when it is proven for the tokenizer:
 *
 * 1. Byte-level tokenizers whose every split regex is one we have reasoned
 *    about (GPT-2, Llama 3, Qwen2/3, DeepSeek V3): cut at p when text[p-1] is
 *    '\n' and text[p] is an ASCII letter. In each of those regexes no
 *    alternative can consume a '\n' and then a letter: the letter-run
 *    alternatives' optional prefix excludes \r\n (GPT-2 and the DeepSeek
 *    \p{N} / CJK splits cannot match either character), and every alternative
 *    that matches '\n' ends in [\r\n]* / \s and stops before a letter. Every
 *    character is covered by some alternative, so the match covering p-1 ends
 *    exactly at p; none of the patterns looks behind, and the lookahead
 *    (?!\S) never decides a run that ends in '\n' (the \s*[\r\n]+ alternative
 *    comes first). Matching from p therefore sees the same thing serially
 *    and in isolation.
 * 2. SentencePiece BPE without pre-tokenizer (Llama 2): the whole text is one
 *    word, but when no vocabulary token contains a non-"▁" character followed
 *    by "▁" (checked over the whole vocabulary at load), no merge can join
 *    the two sides of such a position, so BPE of the parts equals BPE of the
 *    whole (merges on the two sides commute).
 *
 * Anything else encodes serially. The property tests check parallel ==
 * serial on random and adversarial inputs with every cut taken. The pieces
 * share one lock-free word cache (tok_cache.c) so no word is BPE'd twice. */
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

int tok_choose_cut_rule(const tokenizer *t) {
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

typedef struct chunk {
    size_t off, len;
    tok_ids ids;
    int rc;
    di_err err;
} chunk;

typedef struct pjob {
    const tokenizer *t;
    const char *text;
    chunk *c;
    tok_wcache *cache;
} pjob;

static void run_chunk(void *ctx, int i, int n) {
    (void)n;
    pjob *j = ctx;
    chunk *c = &j->c[i];
    tok_enc *e = tok_enc_new_shared(j->t, j->cache);
    c->rc = tok_encode_normalized(j->t, e, j->text + c->off, c->len, c->off == 0, &c->ids, &c->err);
    tok_enc_free(e);
}

int tok_encode_parallel_min(const tokenizer *t, pool *p, const char *text, size_t len,
                            size_t min_piece, tok_ids *out, di_err *err) {
    if (!p || !t->cut_rule || len < 2 * min_piece) return tok_encode_text(t, text, len, out, err);
    size_t bad = tok_utf8_check(text, len);
    if (bad != len) return di_errf(err, "tokenize: text is not valid UTF-8 at byte %zu", bad);
    bool same;
    size_t nlen;
    char *norm = tok_normalize(t, text, len, &nlen, &same, err);
    if (!norm && !same) return -1;
    const char *s = norm ? norm : text;
    chunk *c = NULL;
    size_t nc = 0, cap = 0, pos = 0;
    if (min_piece == 0) min_piece = 1;
    while (pos < nlen) {
        size_t cut = tok_next_cut(t, s, nlen, pos + min_piece);
        if (nc == cap) c = di_realloc(c, (cap = cap ? cap * 2 : 16) * sizeof *c);
        c[nc++] = (chunk){.off = pos, .len = cut - pos};
        pos = cut;
    }
    pjob j = {t, s, c, tok_wcache_new(nlen)};
    if (nc > 1)
        pool_run(p, run_chunk, &j, (int)nc);
    else if (nc == 1)
        run_chunk(&j, 0, 1);
    int rc = 0;
    for (size_t i = 0; i < nc; i++) {
        if (c[i].rc && !rc) {
            rc = -1;
            if (err) *err = c[i].err;
        }
        for (size_t k = 0; k < c[i].ids.n && !rc; k++) tok_ids_push(out, c[i].ids.v[k]);
        tok_ids_free(&c[i].ids);
    }
    free(c);
    free(norm);
    tok_wcache_free(j.cache);
    return rc;
}

int tok_encode_text_parallel(const tokenizer *t, pool *p, const char *text, size_t len,
                             tok_ids *out, di_err *err) {
    int threads = p ? pool_threads(p) : 1;
    /* several pieces per thread: the pool hands them out dynamically */
    size_t piece = len / (size_t)(threads * 2);
    if (piece < 32768) piece = 32768;
    return tok_encode_parallel_min(t, p, text, len, piece, out, err);
}
