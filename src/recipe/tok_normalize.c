/* tok_normalize.c — tokenizer.json normalizers: parsing and applying them to
 * the whole input before pre-tokenization. Supported: NFC, NFKC, NFD, NFKD
 * (utf8proc), Sequence, Replace (string pattern), Prepend. Anything else is a
 * load error naming it. The Unicode forms run only over the non-ASCII
 * stretches of the text (ASCII is invariant under all four and a boundary
 * for each), and all-ASCII text is left as it is, copy-free. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "recipe/tok_internal.h"

static void add_norm(tokenizer *t, tok_norm n) {
    t->norms = di_realloc(t->norms, (size_t)(t->n_norms + 1) * sizeof *t->norms);
    t->norms[t->n_norms++] = n;
}

static char *dup_n(const char *s, size_t n) {
    char *d = di_malloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

int tok_parse_normalizer(tokenizer *t, json_t *j, di_err *err) {
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) return di_errf(err, "normalizer without a type");
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(j, "normalizers"), *v;
        size_t i;
        if (!json_is_array(list)) return di_errf(err, "normalizer Sequence without 'normalizers'");
        json_array_foreach(list, i, v) if (tok_parse_normalizer(t, v, err)) return -1;
        return 0;
    }
    tok_norm n = {0};
    if (!strcmp(type, "NFC"))
        n.kind = TN_NFC;
    else if (!strcmp(type, "NFKC"))
        n.kind = TN_NFKC;
    else if (!strcmp(type, "NFD"))
        n.kind = TN_NFD;
    else if (!strcmp(type, "NFKD"))
        n.kind = TN_NFKD;
    else if (!strcmp(type, "Prepend")) {
        json_t *p = json_object_get(j, "prepend");
        if (!json_is_string(p)) return di_errf(err, "normalizer Prepend without 'prepend'");
        n.kind = TN_PREPEND;
        n.a = dup_n(json_string_value(p), n.alen = json_string_length(p));
    } else if (!strcmp(type, "Replace")) {
        json_t *pat = json_object_get(j, "pattern"), *c = json_object_get(j, "content");
        json_t *s = json_object_get(pat, "String");
        if (json_object_get(pat, "Regex"))
            return di_errf(err, "normalizer Replace with a Regex pattern is not supported");
        if (!json_is_string(s) || !json_is_string(c) || !json_string_length(s))
            return di_errf(err, "normalizer Replace needs a non-empty String pattern and content");
        n.kind = TN_REPLACE;
        n.a = dup_n(json_string_value(s), n.alen = json_string_length(s));
        n.b = dup_n(json_string_value(c), n.blen = json_string_length(c));
    } else
        return di_errf(err, "normalizer '%s' is not supported", type);
    add_norm(t, n);
    return 0;
}

/* A Unicode form, run only over the stretches that hold non-ASCII text:
 * every ASCII character is a starter that nothing composes onto and that
 * decomposes to itself, so each of the four forms has a boundary before it
 * and maps the text stretch by stretch (the ASCII character just before a
 * stretch goes with it: it may be the base of combining marks that follow).
 * Mostly-ASCII text then costs a copy, not a per-character table walk. */
static char *unicode_form(const tok_norm *nm, const char *cur, size_t n, size_t *out_n, di_err *err,
                          bool *fail) {
    size_t i = 0;
    while (i < n && (unsigned char)cur[i] < 0x80) i++;
    if (i == n) return NULL;
    int opt = UTF8PROC_STABLE;
    if (nm->kind == TN_NFC || nm->kind == TN_NFKC)
        opt |= UTF8PROC_COMPOSE;
    else
        opt |= UTF8PROC_DECOMPOSE;
    if (nm->kind == TN_NFKC || nm->kind == TN_NFKD) opt |= UTF8PROC_COMPAT;
    di_buf b = {0};
    size_t done = 0; /* cur[0, done) is in b */
    while (i < n) {
        size_t start = i > done ? i - 1 : i, end = i;
        while (end < n && (unsigned char)cur[end] >= 0x80) end++;
        di_buf_add(&b, cur + done, start - done);
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r =
            utf8proc_map((const utf8proc_uint8_t *)cur + start, (utf8proc_ssize_t)(end - start),
                         &dst, (utf8proc_option_t)opt);
        if (r < 0) {
            free(b.p);
            *fail = true;
            di_errf(err, "unicode normalization failed: %s", utf8proc_errmsg(r));
            return NULL;
        }
        di_buf_add(&b, dst, (size_t)r);
        free(dst);
        done = i = end;
        while (i < n && (unsigned char)cur[i] < 0x80) i++;
    }
    di_buf_add(&b, cur + done, n - done);
    *out_n = b.n;
    return b.p;
}

/* One step on (cur, n) -> malloc'd result, or NULL when unchanged. */
static char *apply(const tok_norm *nm, const char *cur, size_t n, size_t *out_n, di_err *err,
                   bool *fail) {
    switch (nm->kind) {
    case TN_NFC:
    case TN_NFKC:
    case TN_NFD:
    case TN_NFKD:
        return unicode_form(nm, cur, n, out_n, err, fail);
    case TN_PREPEND: {
        if (!n) return NULL;
        char *d = di_malloc(n + nm->alen + 1);
        memcpy(d, nm->a, nm->alen);
        memcpy(d + nm->alen, cur, n);
        d[ *out_n = n + nm->alen] = 0;
        return d;
    }
    case TN_REPLACE: {
        const char *hit = memmem(cur, n, nm->a, nm->alen);
        if (!hit) return NULL;
        di_buf b = {0};
        size_t i = 0;
        while (hit) {
            di_buf_add(&b, cur + i, (size_t)(hit - (cur + i)));
            di_buf_add(&b, nm->b, nm->blen);
            i = (size_t)(hit - cur) + nm->alen;
            hit = memmem(cur + i, n - i, nm->a, nm->alen);
        }
        di_buf_add(&b, cur + i, n - i);
        if (!b.p) di_buf_add(&b, "", 0);
        *out_n = b.n;
        return b.p;
    }
    }
    return NULL;
}

char *tok_normalize(const tokenizer *t, const char *text, size_t len, size_t *out_len, bool *same,
                    di_err *err) {
    return tok_normalize_part(t, text, len, true, out_len, same, err);
}

char *tok_normalize_part(const tokenizer *t, const char *text, size_t len, bool first,
                         size_t *out_len, bool *same, di_err *err) {
    *same = true;
    *out_len = len;
    char *cur = NULL;
    size_t n = len;
    for (int i = 0; i < t->n_norms; i++) {
        if (t->norms[i].kind == TN_PREPEND && !first) continue; /* the whole text's start only */
        bool fail = false;
        size_t nn = 0;
        char *r = apply(&t->norms[i], cur ? cur : text, n, &nn, err, &fail);
        if (fail) {
            free(cur);
            *same = false;
            return NULL;
        }
        if (r) {
            free(cur);
            cur = r;
            n = nn;
            *same = false;
        }
    }
    *out_len = n;
    return cur;
}

void tok_pipeline_free(tokenizer *t) {
    for (int i = 0; i < t->n_norms; i++) free(t->norms[i].a), free(t->norms[i].b);
    free(t->norms);
    for (int i = 0; i < t->n_pretoks; i++) {
        if (t->pretoks[i].re) pcre2_code_free(t->pretoks[i].re);
        free(t->pretoks[i].lit);
    }
    free(t->pretoks);
    for (int i = 0; i < t->n_decs; i++) free(t->decs[i].a), free(t->decs[i].b);
    free(t->decs);
}
