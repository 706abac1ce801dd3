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
    di_buf b = {0};
    bool in_class = false;
    size_t class_start = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            if (e == 'u' && i + 6 <= n) {
                di_buf_add(&b, "\\x{", 3);
                di_buf_add(&b, p + i + 2, 4);
                di_buf_putc(&b, '}');
                i += 5;
            } else if (e == 's') {
                if (in_class)
                    di_buf_add(&b, WS_CLASS_BODY, strlen(WS_CLASS_BODY));
                else
                    di_buf_add(&b, "[" WS_CLASS_BODY "]", strlen(WS_CLASS_BODY) + 2);
                i++;
            } else if (e == 'S' && !in_class) {
                di_buf_add(&b, "[^" WS_CLASS_BODY "]", strlen(WS_CLASS_BODY) + 3);
                i++;
            } else {
                di_buf_add(&b, p + i, 2);
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
        di_buf_putc(&b, c);
    }
    if (!b.p) di_buf_add(&b, "", 0);
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
    if (t->n_pretoks >= TOK_MAX_PRETOK)
        return di_errf(err, "more than %d pre-tokenizers", TOK_MAX_PRETOK);
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

/* ---- running them ----------------------------------------------------------
 * Pieces are not materialized: each step hands every piece it produces
 * straight to the next step (recursion by step index), and the last step hands
 * words to the caller. Isolated and Removed splits stream their matches;
 * other behaviours fold one piece's match list first. Per-step buffers make
 * the recursion allocation-free in steady state. */

typedef struct tok_span {
    size_t s, e;
    bool m;
} tok_span;

static void spans_push(tok_spans *l, size_t s, size_t e, bool m) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = di_realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (tok_span){s, e, m};
}

typedef struct run {
    const tokenizer *t;
    tok_pre *st;
    bool first;
    tok_word_fn emit;
    void *ctx;
    di_err *err;
} run;

static int step(run *r, int k, const char *s, size_t n, bool at_start);

/* A piece [ps, pe) of s (a step-k piece) goes on to step k + 1. */
static int pass(run *r, int k, const char *s, size_t ps, size_t pe, bool at_start) {
    if (pe == ps) return 0;
    return step(r, k + 1, s + ps, pe - ps, at_start && ps == 0);
}

/* Runs the regex over s[0, n). stream 1 passes every piece on (Isolated),
 * 2 only the gaps (Removed), 3 only the matches (Removed, inverted); stream 0
 * records (range, is_match) into l for fold(). */
static int regex_scan(run *r, int k, const pcre2_code *re, bool jit, const char *s, size_t n,
                      bool at_start, int stream, tok_spans *l) {
    tok_pre *st = r->st;
    if (!st->md) st->md = pcre2_match_data_create(8, NULL);
    size_t pos = 0, prev = 0;
    while (pos <= n) {
        int rc = jit ? pcre2_jit_match(re, (PCRE2_SPTR)s, n, pos, 0, st->md, NULL)
                     : PCRE2_ERROR_JIT_BADOPTION;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_JIT_BADOPTION)
            rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, st->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return di_errf(r->err, "pre_tokenizer regex failed: %s", (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
        size_t ms = ov[0], me = ov[1];
        if (stream) {
            /* stream: 1 = keep both (Isolated), 2 = keep gaps (Removed), 3 = keep matches */
            if (prev != ms && stream != 3 && pass(r, k, s, prev, ms, at_start)) return -1;
            if (stream != 2 && pass(r, k, s, ms, me, at_start)) return -1;
        } else {
            if (prev != ms) spans_push(l, prev, ms, false);
            spans_push(l, ms, me, true);
        }
        prev = me;
        if (me == ms) {
            if (ms >= n) break;
            uint32_t cp;
            size_t len = tok_utf8_next(s + ms, n - ms, &cp);
            pos = ms + (len ? len : 1);
        } else
            pos = me;
    }
    if (prev != n) {
        if (!stream)
            spans_push(l, prev, n, false);
        else if (stream != 3 && pass(r, k, s, prev, n, at_start))
            return -1;
    }
    return 0;
}

static void literal_spans(const char *lit, size_t ll, const char *s, size_t n, tok_spans *out) {
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

static void digit_spans(const char *s, size_t n, tok_spans *out) {
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

/* Folds (range, is_match) by behaviour (HF's SplitDelimiterBehavior) and
 * passes the pieces on. */
static int fold(run *r, int k, const char *s, tok_spans *l, int beh, bool invert, bool at_start) {
    if (invert)
        for (size_t i = 0; i < l->n; i++) l->v[i].m = !l->v[i].m;
    if (beh == TB_REMOVED || beh == TB_ISOLATED) {
        for (size_t i = 0; i < l->n; i++)
            if ((beh == TB_ISOLATED || !l->v[i].m) && pass(r, k, s, l->v[i].s, l->v[i].e, at_start))
                return -1;
        return 0;
    }
    size_t na = 0;
    bool prevm = false;
    if (beh == TB_MERGED_NEXT) {
        for (size_t j = l->n; j-- > 0;) {
            tok_span sp = l->v[j];
            if (sp.m && !prevm && na)
                l->v[l->n - na].s = sp.s;
            else
                l->v[l->n - 1 - na++] = sp;
            prevm = sp.m;
        }
        for (size_t i = l->n - na; i < l->n; i++)
            if (pass(r, k, s, l->v[i].s, l->v[i].e, at_start)) return -1;
        return 0;
    }
    for (size_t i = 0; i < l->n; i++) {
        tok_span sp = l->v[i];
        bool merge = beh == TB_MERGED_PREV ? (sp.m && !prevm) : (sp.m == prevm);
        if (merge && na)
            l->v[na - 1].e = sp.e;
        else
            l->v[na++] = sp;
        prevm = sp.m;
    }
    for (size_t i = 0; i < na; i++)
        if (pass(r, k, s, l->v[i].s, l->v[i].e, at_start)) return -1;
    return 0;
}

static int step(run *r, int k, const char *s, size_t n, bool at_start) {
    const tokenizer *t = r->t;
    if (k == t->n_pretoks) {
        r->emit(r->ctx, s, n);
        return 0;
    }
    const tok_pretok *pt = &t->pretoks[k];
    tok_pre *st = r->st;
    tok_spans *l = &st->sp[k];
    di_buf *rw = &st->rw[k];
    l->n = 0;
    switch (pt->kind) {
    case TP_SPLIT:
        if (pt->re) {
            int stream = pt->behavior == TB_ISOLATED  ? 1
                         : pt->behavior == TB_REMOVED ? (pt->invert ? 3 : 2)
                                                      : 0;
            if (regex_scan(r, k, pt->re, pt->jit, s, n, at_start, stream, l)) return -1;
            return stream ? 0 : fold(r, k, s, l, pt->behavior, pt->invert, at_start);
        }
        literal_spans(pt->lit, pt->lit_len, s, n, l);
        return fold(r, k, s, l, pt->behavior, pt->invert, at_start);
    case TP_DIGITS:
        digit_spans(s, n, l);
        return fold(r, k, s, l, pt->individual_digits ? TB_ISOLATED : TB_CONTIGUOUS, false,
                    at_start);
    case TP_BYTELEVEL:
        if (pt->add_prefix_space && s[0] != ' ') {
            rw->n = 0;
            di_buf_putc(rw, ' ');
            di_buf_add(rw, s, n);
            s = rw->p, n = rw->n;
        }
        if (!pt->re) return step(r, k + 1, s, n, at_start);
        return regex_scan(r, k, pt->re, pt->jit, s, n, at_start, 1, l);
    case TP_METASPACE: {
        rw->n = 0;
        bool starts = s[0] == ' ' || (n >= pt->repl_len && !memcmp(s, pt->repl, pt->repl_len));
        bool allow = pt->prepend_scheme == TM_ALWAYS ||
                     (pt->prepend_scheme == TM_FIRST && r->first && at_start);
        if (allow && !starts) di_buf_add(rw, pt->repl, pt->repl_len);
        for (size_t c = 0; c < n; c++)
            if (s[c] == ' ')
                di_buf_add(rw, pt->repl, pt->repl_len);
            else
                di_buf_putc(rw, s[c]);
        if (!pt->split) return step(r, k + 1, rw->p, rw->n, at_start);
        literal_spans(pt->repl, pt->repl_len, rw->p, rw->n, l);
        return fold(r, k, rw->p, l, TB_MERGED_NEXT, false, at_start);
    }
    }
    return 0;
}

int tok_pretokenize(const tokenizer *t, tok_pre *st, const char *text, size_t len, bool first,
                    tok_word_fn emit, void *ctx, di_err *err) {
    if (!len) return 0;
    run r = {t, st, first, emit, ctx, err};
    return step(&r, 0, text, len, true);
}

void tok_pre_free(tok_pre *st) {
    for (int k = 0; k < TOK_MAX_PRETOK; k++) free(st->sp[k].v), free(st->rw[k].p);
    if (st->md) pcre2_match_data_free(st->md);
    memset(st, 0, sizeof *st);
}
