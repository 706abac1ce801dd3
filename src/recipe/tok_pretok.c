/* tok_pretok.c — tokenizer.json pre-tokenizers: parsing, and cutting
 * normalized text into pieces (the words BPE runs on).
 *
 * Supported: Sequence, Split (Regex through PCRE2 with JIT and Unicode
 * properties, or String; all five behaviours and invert), ByteLevel (GPT-2
 * regex when use_regex, add_prefix_space; the byte->char mapping itself is
 * left to the BPE stage, which works on raw bytes), Digits, Metaspace. The
 * semantics follow Hugging Face tokenizers: a pattern's matches and the gaps
 * between them form a list of (range, is_match), the behaviour folds that
 * list, and empty pieces are dropped. Regexes run on each piece in isolation,
 * exactly as HF runs them on each split. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "recipe/tok_internal.h"

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Oniguruma's \s is Unicode White_Space; PCRE2's (with UCP) also takes
 * U+180E through \h. Spelled out so both agree. */
#define WS_CLASS_BODY                                                                              \
    "\\x{9}-\\x{d} \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}" \
    "\\x{3000}"

/* Translates an Oniguruma pattern (as HF writes them) to PCRE2: \uHHHH ->
 * \x{HHHH}, \s / \S -> the White_Space set. */
static char *onig_to_pcre2(const char *p, size_t n, size_t *out_n) {
    tok_buf b = {0};
    bool in_class = false;
    size_t class_start = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            if (e == 'u' && i + 6 <= n) {
                tok_buf_put(&b, "\\x{", 3);
                tok_buf_put(&b, p + i + 2, 4);
                tok_buf_putc(&b, '}');
                i += 5;
            } else if (e == 's') {
                if (in_class)
                    tok_buf_put(&b, WS_CLASS_BODY, strlen(WS_CLASS_BODY));
                else
                    tok_buf_put(&b, "[" WS_CLASS_BODY "]", strlen(WS_CLASS_BODY) + 2);
                i++;
            } else if (e == 'S' && !in_class) {
                tok_buf_put(&b, "[^" WS_CLASS_BODY "]", strlen(WS_CLASS_BODY) + 3);
                i++;
            } else {
                tok_buf_put(&b, p + i, 2);
                i++;
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            class_start = i + 1;
            if (i + 1 < n && p[i + 1] == '^') class_start++;
        } else if (in_class && c == ']' && i != class_start)
            in_class = false;
        tok_buf_putc(&b, c);
    }
    if (!b.p) tok_buf_put(&b, "", 0);
    *out_n = b.n;
    return b.p;
}

static int compile_re(tok_pretok *pt, const char *pat, size_t n, di_err *err) {
    size_t cn;
    char *conv = onig_to_pcre2(pat, n, &cn);
    int ec;
    PCRE2_SIZE eo;
    pt->re = pcre2_compile((PCRE2_SPTR)conv, cn, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &ec,
                           &eo, NULL);
    free(conv);
    if (!pt->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return di_errf(err, "pre_tokenizer Split regex does not compile at offset %zu: %s",
                       (size_t)eo, (char *)msg);
    }
    pt->jit = pcre2_jit_compile(pt->re, PCRE2_JIT_COMPLETE) == 0;
    pt->cut_safe = n == strlen(pat) && tok_regex_cut_safe(pat);
    return 0;
}

static void add_pretok(tokenizer *t, tok_pretok p) {
    t->pretoks = di_realloc(t->pretoks, (size_t)(t->n_pretoks + 1) * sizeof *t->pretoks);
    t->pretoks[t->n_pretoks++] = p;
}

int tok_parse_pretokenizer(tokenizer *t, json_t *j, di_err *err) {
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) return di_errf(err, "pre_tokenizer without a type");
    if (t->n_pretoks && t->pretoks[t->n_pretoks - 1].kind == TP_BYTELEVEL)
        return di_errf(err, "pre_tokenizer '%s' after ByteLevel is not supported", type);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(j, "pretokenizers"), *v;
        size_t i;
        if (!json_is_array(list))
            return di_errf(err, "pre_tokenizer Sequence without 'pretokenizers'");
        json_array_foreach(list, i, v) if (tok_parse_pretokenizer(t, v, err)) return -1;
        return 0;
    }
    tok_pretok p = {0};
    if (!strcmp(type, "Split")) {
        p.kind = TP_SPLIT;
        json_t *pat = json_object_get(j, "pattern");
        json_t *re = json_object_get(pat, "Regex"), *s = json_object_get(pat, "String");
        const char *beh = json_string_value(json_object_get(j, "behavior"));
        static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                      "Contiguous"};
        p.behavior = -1;
        for (int i = 0; i < 5; i++)
            if (beh && !strcmp(beh, names[i])) p.behavior = i;
        if (p.behavior < 0)
            return di_errf(err, "pre_tokenizer Split behavior '%s' is not supported",
                           beh ? beh : "(none)");
        p.invert = json_is_true(json_object_get(j, "invert"));
        if (json_is_string(re)) {
            if (compile_re(&p, json_string_value(re), json_string_length(re), err)) return -1;
        } else if (json_is_string(s) && json_string_length(s)) {
            p.lit_len = json_string_length(s);
            p.lit = di_malloc(p.lit_len + 1);
            memcpy(p.lit, json_string_value(s), p.lit_len + 1);
        } else
            return di_errf(err, "pre_tokenizer Split needs a Regex or non-empty String pattern");
    } else if (!strcmp(type, "ByteLevel")) {
        p.kind = TP_BYTELEVEL;
        p.add_prefix_space = json_is_true(json_object_get(j, "add_prefix_space"));
        json_t *ur = json_object_get(j, "use_regex");
        if (!ur || json_is_true(ur))
            if (compile_re(&p, GPT2_PATTERN, strlen(GPT2_PATTERN), err)) return -1;
        t->byte_level = true;
    } else if (!strcmp(type, "Digits")) {
        p.kind = TP_DIGITS;
        p.individual_digits = json_is_true(json_object_get(j, "individual_digits"));
    } else if (!strcmp(type, "Metaspace")) {
        p.kind = TP_METASPACE;
        const char *r = json_string_value(json_object_get(j, "replacement"));
        if (!r) r = "\xE2\x96\x81";
        uint32_t cp;
        size_t rl = tok_utf8_next(r, strlen(r), &cp);
        if (!rl || rl != strlen(r))
            return di_errf(err, "pre_tokenizer Metaspace replacement must be one character");
        memcpy(p.repl, r, rl);
        p.repl_len = rl;
        const char *ps = json_string_value(json_object_get(j, "prepend_scheme"));
        json_t *aps = json_object_get(j, "add_prefix_space");
        if (ps)
            p.prepend_scheme = !strcmp(ps, "first")   ? TM_FIRST
                               : !strcmp(ps, "never") ? TM_NEVER
                                                      : TM_ALWAYS;
        else
            p.prepend_scheme = (!aps || json_is_true(aps)) ? TM_ALWAYS : TM_NEVER;
        json_t *sp = json_object_get(j, "split");
        p.split = !sp || json_is_true(sp);
    } else
        return di_errf(err, "pre_tokenizer '%s' is not supported", type);
    add_pretok(t, p);
    return 0;
}

/* ---- running them ---------------------------------------------------------- */

typedef struct span {
    size_t s, e;
    bool m;
} span;

typedef struct spans {
    span *v;
    size_t n, cap;
} spans;

static void spans_push(spans *l, size_t s, size_t e, bool m) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = di_realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (span){s, e, m};
}

static void out_piece(tok_pre *st, size_t off, size_t len) {
    if (!len) return;
    if (st->n2 == st->cap2) {
        st->cap2 = st->cap2 ? st->cap2 * 2 : 256;
        st->pc2 = di_realloc(st->pc2, st->cap2 * sizeof *st->pc2);
    }
    st->pc2[st->n2++] = (tok_piece){off, len};
}

/* Matches of a regex in s[0, n) as HF's find_matches lists them. */
static int regex_spans(const tok_pretok *pt, tok_pre *st, const char *s, size_t n, spans *out,
                       di_err *err) {
    if (!st->md) st->md = pcre2_match_data_create(8, NULL);
    size_t pos = 0, prev = 0;
    while (pos <= n) {
        int rc = pt->jit ? pcre2_jit_match(pt->re, (PCRE2_SPTR)s, n, pos, 0, st->md, NULL)
                         : PCRE2_ERROR_JIT_BADOPTION;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_JIT_BADOPTION)
            rc = pcre2_match(pt->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, st->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return di_errf(err, "pre_tokenizer regex failed: %s", (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
        size_t ms = ov[0], me = ov[1];
        if (prev != ms) spans_push(out, prev, ms, false);
        spans_push(out, ms, me, true);
        prev = me;
        if (me == ms) {
            if (ms >= n) break;
            uint32_t cp;
            size_t l = tok_utf8_next(s + ms, n - ms, &cp);
            pos = ms + (l ? l : 1);
        } else
            pos = me;
    }
    if (prev != n) spans_push(out, prev, n, false);
    return 0;
}

static void literal_spans(const char *lit, size_t ll, const char *s, size_t n, spans *out) {
    size_t prev = 0, i = 0;
    const char *h;
    while (i <= n && (h = memmem(s + i, n - i, lit, ll))) {
        size_t ms = (size_t)(h - s);
        if (prev != ms) spans_push(out, prev, ms, false);
        spans_push(out, ms, ms + ll, true);
        prev = i = ms + ll;
    }
    if (prev != n) spans_push(out, prev, n, false);
}

static bool is_numeric(uint32_t cp) {
    int c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

static void digit_spans(const char *s, size_t n, spans *out) {
    size_t i = 0, gap = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = tok_utf8_next(s + i, n - i, &cp);
        if (!l) l = 1, cp = 0xFFFD;
        if (is_numeric(cp)) {
            if (gap != i) spans_push(out, gap, i, false);
            spans_push(out, i, i + l, true);
            gap = i + l;
        }
        i += l;
    }
    if (gap != n) spans_push(out, gap, n, false);
}

/* Folds (range, is_match) by behaviour and emits the pieces (offset base). */
static void apply_behavior(tok_pre *st, spans *l, int beh, bool invert, size_t base) {
    if (invert)
        for (size_t i = 0; i < l->n; i++) l->v[i].m = !l->v[i].m;
    if (beh == TB_REMOVED) {
        for (size_t i = 0; i < l->n; i++)
            if (!l->v[i].m) out_piece(st, base + l->v[i].s, l->v[i].e - l->v[i].s);
        return;
    }
    if (beh == TB_ISOLATED) {
        for (size_t i = 0; i < l->n; i++) out_piece(st, base + l->v[i].s, l->v[i].e - l->v[i].s);
        return;
    }
    /* fold into acc (reuse l in place: acc never outgrows the input) */
    size_t na = 0;
    bool prevm = false;
    if (beh == TB_MERGED_NEXT) {
        for (size_t k = l->n; k-- > 0;) {
            span sp = l->v[k];
            if (sp.m && !prevm && na)
                l->v[l->n - na].s = sp.s;
            else
                l->v[l->n - 1 - na++] = sp;
            prevm = sp.m;
        }
        for (size_t i = l->n - na; i < l->n; i++)
            out_piece(st, base + l->v[i].s, l->v[i].e - l->v[i].s);
        return;
    }
    for (size_t i = 0; i < l->n; i++) {
        span sp = l->v[i];
        bool merge = beh == TB_MERGED_PREV ? (sp.m && !prevm) : (sp.m == prevm);
        if (merge && na)
            l->v[na - 1].e = sp.e;
        else
            l->v[na++] = sp;
        prevm = sp.m;
    }
    for (size_t i = 0; i < na; i++) out_piece(st, base + l->v[i].s, l->v[i].e - l->v[i].s);
}

static void swap_pieces(tok_pre *st) {
    tok_piece *p = st->pc;
    size_t c = st->cap;
    st->pc = st->pc2, st->cap = st->cap2, st->n = st->n2;
    st->pc2 = p, st->cap2 = c, st->n2 = 0;
}

int tok_pretokenize(const tokenizer *t, tok_pre *st, const char *text, size_t len, bool first,
                    di_err *err) {
    st->n = st->n2 = 0;
    st->buf.n = 0;
    tok_buf_put(&st->buf, text, len);
    out_piece(st, 0, len);
    swap_pieces(st);
    spans l = {0};
    int rc = 0;
    for (int k = 0; k < t->n_pretoks && !rc; k++) {
        const tok_pretok *pt = &t->pretoks[k];
        if (pt->kind == TP_METASPACE || (pt->kind == TP_BYTELEVEL && pt->add_prefix_space)) {
            /* rewrite every piece into tmp */
            st->tmp.n = 0;
            for (size_t i = 0; i < st->n; i++) {
                const char *s = st->buf.p + st->pc[i].off;
                size_t n = st->pc[i].len, start = st->tmp.n;
                if (pt->kind == TP_BYTELEVEL) {
                    if (s[0] != ' ') tok_buf_putc(&st->tmp, ' ');
                    tok_buf_put(&st->tmp, s, n);
                } else {
                    bool starts =
                        s[0] == ' ' || (n >= pt->repl_len && !memcmp(s, pt->repl, pt->repl_len));
                    bool allow = pt->prepend_scheme == TM_ALWAYS ||
                                 (pt->prepend_scheme == TM_FIRST && first && st->pc[i].off == 0);
                    bool pre = allow && !starts;
                    if (pre) tok_buf_put(&st->tmp, pt->repl, pt->repl_len);
                    for (size_t c = 0; c < n; c++)
                        if (s[c] == ' ')
                            tok_buf_put(&st->tmp, pt->repl, pt->repl_len);
                        else
                            tok_buf_putc(&st->tmp, s[c]);
                }
                out_piece(st, start, st->tmp.n - start);
            }
            tok_buf b = st->buf;
            st->buf = st->tmp;
            st->tmp = b;
            swap_pieces(st);
            if (pt->kind == TP_METASPACE && !pt->split) continue;
        }
        for (size_t i = 0; i < st->n && !rc; i++) {
            const char *s = st->buf.p + st->pc[i].off;
            size_t n = st->pc[i].len;
            l.n = 0;
            int beh = pt->behavior;
            bool inv = pt->invert;
            if (pt->kind == TP_SPLIT && pt->re)
                rc = regex_spans(pt, st, s, n, &l, err);
            else if (pt->kind == TP_SPLIT)
                literal_spans(pt->lit, pt->lit_len, s, n, &l);
            else if (pt->kind == TP_BYTELEVEL) {
                if (!pt->re) {
                    out_piece(st, st->pc[i].off, n);
                    continue;
                }
                rc = regex_spans(pt, st, s, n, &l, err);
                beh = TB_ISOLATED, inv = false;
            } else if (pt->kind == TP_DIGITS) {
                digit_spans(s, n, &l);
                beh = pt->individual_digits ? TB_ISOLATED : TB_CONTIGUOUS, inv = false;
            } else { /* Metaspace split */
                literal_spans(pt->repl, pt->repl_len, s, n, &l);
                beh = TB_MERGED_NEXT, inv = false;
            }
            if (!rc) apply_behavior(st, &l, beh, inv, st->pc[i].off);
        }
        swap_pieces(st);
    }
    free(l.v);
    return rc;
}

void tok_pre_free(tok_pre *st) {
    free(st->buf.p);
    free(st->tmp.p);
    free(st->pc);
    free(st->pc2);
    if (st->md) pcre2_match_data_free(st->md);
    memset(st, 0, sizeof *st);
}
