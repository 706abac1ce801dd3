/* tok_decode.c — tokenizer.json decoders, run as a pipeline of streaming
 * stages; tok_decode and the incremental detokenizer (tok_stream_*) are the
 * same code, so the streamed text always concatenates to tok_decode's.
 *
 * Token strings flow through the stages in order (HF's decode_chain). Stages
 * hold back only what a later token can still change: ByteLevel keeps an
 * incomplete UTF-8 tail (complete text is converted with Rust's
 * from_utf8_lossy rule: one U+FFFD per maximal invalid subpart); ByteFallback
 * keeps a run of <0xNN> tokens until it ends (HF turns the whole run into
 * U+FFFD per byte if any of it is invalid). After a fusing stage (Fuse,
 * ByteLevel) the rest of the chain sees one logical token, so Strip strips
 * only at the very start of the stream. Supported: ByteLevel, Metaspace,
 * Replace (string), ByteFallback, Fuse, Strip (stop = 0), Sequence. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/tok_internal.h"

#define MAX_STAGES 16
static const char REPLACEMENT_CHAR[] = "\xEF\xBF\xBD";

static char *dup_n(const char *s, size_t n) {
    char *d = di_malloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static void add_dec(tokenizer *t, tok_dec d) {
    t->decs = di_realloc(t->decs, (size_t)(t->n_decs + 1) * sizeof *t->decs);
    t->decs[t->n_decs++] = d;
}

int tok_parse_decoder(tokenizer *t, json_t *j, di_err *err) {
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) return di_errf(err, "decoder without a type");
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(j, "decoders"), *v;
        size_t i;
        if (!json_is_array(list)) return di_errf(err, "decoder Sequence without 'decoders'");
        json_array_foreach(list, i, v) if (tok_parse_decoder(t, v, err)) return -1;
        return 0;
    }
    if (t->n_decs >= MAX_STAGES) return di_errf(err, "decoder chain longer than %d", MAX_STAGES);
    tok_dec d = {0};
    if (!strcmp(type, "ByteLevel"))
        d.kind = TD_BYTELEVEL;
    else if (!strcmp(type, "ByteFallback"))
        d.kind = TD_BYTEFALLBACK;
    else if (!strcmp(type, "Fuse"))
        d.kind = TD_FUSE;
    else if (!strcmp(type, "Metaspace")) {
        d.kind = TD_METASPACE;
        const char *r = json_string_value(json_object_get(j, "replacement"));
        if (!r) r = "\xE2\x96\x81";
        d.a = dup_n(r, d.alen = strlen(r));
        const char *ps = json_string_value(json_object_get(j, "prepend_scheme"));
        json_t *aps = json_object_get(j, "add_prefix_space");
        if (ps)
            d.prepend_scheme = !strcmp(ps, "never")   ? TM_NEVER
                               : !strcmp(ps, "first") ? TM_FIRST
                                                      : TM_ALWAYS;
        else
            d.prepend_scheme = (!aps || json_is_true(aps)) ? TM_ALWAYS : TM_NEVER;
    } else if (!strcmp(type, "Replace")) {
        json_t *pat = json_object_get(j, "pattern"), *c = json_object_get(j, "content");
        json_t *s = json_object_get(pat, "String");
        if (!json_is_string(s) || !json_string_length(s) || !json_is_string(c))
            return di_errf(err, "decoder Replace: only non-empty String patterns are supported");
        d.kind = TD_REPLACE;
        d.a = dup_n(json_string_value(s), d.alen = json_string_length(s));
        d.b = dup_n(json_string_value(c), d.blen = json_string_length(c));
    } else if (!strcmp(type, "Strip")) {
        const char *c = json_string_value(json_object_get(j, "content"));
        d.kind = TD_STRIP;
        d.start = (int)json_integer_value(json_object_get(j, "start"));
        d.stop = (int)json_integer_value(json_object_get(j, "stop"));
        if (!c || d.stop != 0)
            return di_errf(err, "decoder Strip with stop > 0 is not supported (not streamable)");
        d.a = dup_n(c, d.alen = strlen(c));
    } else
        return di_errf(err, "decoder '%s' is not supported", type);
    add_dec(t, d);
    return 0;
}

struct tok_stream {
    const tokenizer *t;
    bool skip;
    bool raw; /* bytes as they are, invalid UTF-8 too (tok_token_bytes) */
    di_buf out;
    di_buf scratch[MAX_STAGES];
    di_buf pend[MAX_STAGES]; /* ByteLevel: pending bytes; ByteFallback: pending run */
    int runlen[MAX_STAGES];
    long idx[MAX_STAGES];
    int stripped[MAX_STAGES];
    bool strip_over[MAX_STAGES];
    bool fused[MAX_STAGES];
    long n_sink;
};

/* Converts b[0, n) with the lossy rule into out; returns bytes consumed. When
 * !final, stops before a tail that could still become a valid character. */
static size_t utf8_lossy(const uint8_t *b, size_t n, bool final, di_buf *out) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = b[i];
        if (c < 0x80) {
            size_t j = i;
            while (j < n && b[j] < 0x80) j++;
            di_buf_add(out, b + i, j - i);
            i = j;
            continue;
        }
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c >= 0xE0 && c <= 0xEF)
            need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4)
            need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else {
            di_buf_add(out, REPLACEMENT_CHAR, 3);
            i++;
            continue;
        }
        size_t k = 1;
        while (k <= need && i + k < n) {
            uint8_t x = b[i + k];
            if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) break;
            k++;
        }
        if (k == need + 1) {
            di_buf_add(out, b + i, k);
            i += k;
        } else if (i + k >= n && !final) {
            break; /* incomplete tail: wait for more */
        } else {
            di_buf_add(out, REPLACEMENT_CHAR, 3);
            i += k;
        }
    }
    return i;
}

static void feed(tok_stream *st, int k, const char *s, size_t n);

static void flush_run(tok_stream *st, int k) {
    if (!st->runlen[k]) return;
    di_buf *p = &st->pend[k];
    int cnt = st->runlen[k];
    st->runlen[k] = 0;
    if (st->raw || tok_utf8_check(p->p, p->n) == p->n) {
        di_buf *sc = &st->scratch[k];
        sc->n = 0;
        di_buf_add(sc, p->p, p->n);
        p->n = 0;
        feed(st, k + 1, sc->p, sc->n);
    } else {
        p->n = 0;
        for (int i = 0; i < cnt; i++) feed(st, k + 1, REPLACEMENT_CHAR, 3);
    }
}

static void feed(tok_stream *st, int k, const char *s, size_t n) {
    const tokenizer *t = st->t;
    if (k == t->n_decs) {
        if (!t->has_decoder && st->n_sink++ > 0) di_buf_putc(&st->out, ' ');
        di_buf_add(&st->out, s, n);
        return;
    }
    const tok_dec *d = &t->decs[k];
    di_buf *sc = &st->scratch[k];
    sc->n = 0;
    switch (d->kind) {
    case TD_BYTELEVEL: {
        di_buf *p = &st->pend[k];
        size_t i = 0, start = p->n;
        bool ok = true;
        while (i < n && ok) {
            uint32_t cp;
            size_t l = tok_utf8_next(s + i, n - i, &cp);
            int b = l && cp < 324 ? t->cp_byte[cp] : -1;
            if (b < 0)
                ok = false;
            else
                di_buf_putc(p, (char)b), i += l;
        }
        if (!ok) p->n = start, di_buf_add(p, s, n);
        size_t used = st->raw ? (di_buf_add(sc, p->p, p->n), p->n)
                              : utf8_lossy((const uint8_t *)p->p, p->n, false, sc);
        memmove(p->p, p->p + used, p->n - used);
        p->n -= used;
        if (sc->n) feed(st, k + 1, sc->p, sc->n);
        return;
    }
    case TD_BYTEFALLBACK: {
        int h1, h2;
        if (!st->fused[k] && n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' &&
            (h1 = di_hexval((uint8_t)s[3])) >= 0 && (h2 = di_hexval((uint8_t)s[4])) >= 0) {
            di_buf_putc(&st->pend[k], (char)(h1 * 16 + h2));
            st->runlen[k]++;
            return;
        }
        flush_run(st, k);
        feed(st, k + 1, s, n);
        return;
    }
    case TD_FUSE:
        feed(st, k + 1, s, n);
        return;
    case TD_METASPACE: {
        long idx = st->fused[k] ? 0 : st->idx[k]++;
        bool drop = idx == 0 && d->prepend_scheme != TM_NEVER;
        for (size_t i = 0; i < n;) {
            if (n - i >= d->alen && !memcmp(s + i, d->a, d->alen)) {
                if (!drop) di_buf_putc(sc, ' ');
                i += d->alen;
            } else
                di_buf_putc(sc, s[i++]);
        }
        break;
    }
    case TD_REPLACE:
        for (size_t i = 0; i < n;) {
            if (n - i >= d->alen && !memcmp(s + i, d->a, d->alen)) {
                di_buf_add(sc, d->b, d->blen);
                i += d->alen;
            } else
                di_buf_putc(sc, s[i++]);
        }
        break;
    case TD_STRIP: {
        size_t i = 0;
        bool fz = st->fused[k];
        int done = fz ? st->stripped[k] : 0;
        bool over = fz && st->strip_over[k];
        while (!over && done < d->start && i < n) {
            if (n - i >= d->alen && !memcmp(s + i, d->a, d->alen))
                i += d->alen, done++;
            else
                over = true;
        }
        if (fz) st->stripped[k] = done, st->strip_over[k] = over || done >= d->start;
        di_buf_add(sc, s + i, n - i);
        break;
    }
    }
    if (!sc->p) di_buf_add(sc, "", 0);
    feed(st, k + 1, sc->p, sc->n);
}

tok_stream *tok_stream_new(const tokenizer *t, bool skip_control) {
    tok_stream *st = di_calloc(1, sizeof *st);
    st->t = t;
    st->skip = skip_control;
    bool f = false;
    for (int k = 0; k < t->n_decs; k++) {
        st->fused[k] = f;
        if (t->decs[k].kind == TD_FUSE || t->decs[k].kind == TD_BYTELEVEL) f = true;
    }
    return st;
}

static const char *result(tok_stream *st, size_t *len) {
    if (!st->out.p) di_buf_add(&st->out, "", 0);
    if (len) *len = st->out.n;
    return st->out.p;
}

const char *tok_stream_push(tok_stream *st, int id, size_t *len) {
    const tokenizer *t = st->t;
    st->out.n = 0;
    if (id >= 0 && id < t->n_ids && t->str[id] && !(st->skip && t->special[id]))
        feed(st, 0, t->str[id], t->slen[id]);
    return result(st, len);
}

const char *tok_stream_flush(tok_stream *st, size_t *len) {
    const tokenizer *t = st->t;
    st->out.n = 0;
    for (int k = 0; k < t->n_decs; k++) {
        if (t->decs[k].kind == TD_BYTEFALLBACK) flush_run(st, k);
        if (t->decs[k].kind == TD_BYTELEVEL && st->pend[k].n) {
            di_buf *p = &st->pend[k], *sc = &st->scratch[k];
            sc->n = 0;
            utf8_lossy((const uint8_t *)p->p, p->n, true, sc);
            p->n = 0;
            feed(st, k + 1, sc->p, sc->n);
        }
    }
    return result(st, len);
}

void tok_stream_free(tok_stream *st) {
    if (!st) return;
    free(st->out.p);
    for (int k = 0; k < MAX_STAGES; k++) free(st->scratch[k].p), free(st->pend[k].p);
    free(st);
}

/* The whole text of ids through stream st (freed here). */
static char *decode_all(tok_stream *st, const int *ids, size_t n, size_t *len) {
    di_buf all = {0};
    size_t l;
    for (size_t i = 0; i < n; i++) {
        const char *s = tok_stream_push(st, ids[i], &l);
        di_buf_add(&all, s, l);
    }
    const char *s = tok_stream_flush(st, &l);
    di_buf_add(&all, s, l);
    tok_stream_free(st);
    if (len) *len = all.n;
    return all.p;
}

char *tok_decode(const tokenizer *t, const int *ids, size_t n, bool skip_control, size_t *len) {
    return decode_all(tok_stream_new(t, skip_control), ids, n, len);
}

char *tok_token_bytes(const tokenizer *t, int id, size_t *len) {
    tok_stream *st = tok_stream_new(t, false);
    st->raw = true;
    for (int k = 0; k < t->n_decs; k++) { /* past the start of a text */
        st->idx[k] = 1;
        st->stripped[k] = t->decs[k].start;
        st->strip_over[k] = true;
    }
    return decode_all(st, &id, 1, len);
}

char *tok_utf8_lossy(const char *s, size_t n, size_t *len) {
    di_buf out = {0};
    utf8_lossy((const uint8_t *)s, n, true, &out);
    if (!out.p) di_buf_add(&out, "", 0);
    if (len) *len = out.n;
    return out.p;
}
