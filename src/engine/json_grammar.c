/* json_grammar.c — the JSON automaton and the token mask (see
 * json_grammar.h). One byte at a time: step() is the whole grammar; a mode
 * says what the next byte may be, a number's or a literal's progress sits in
 * sub, and the containers open in a bit stack. Strings take valid UTF-8
 * only (the continuation bytes' ranges as RFC 3629 gives them) and \u
 * escapes as strict parsers take them (a high surrogate followed by a low
 * one; no \u0000), so that what the model is held to parses everywhere. */
#include "engine/json_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
static const char *const literals[3] = {"true", "false", "null"};

void jg_init(jg_state *s) {
    memset(s, 0, sizeof *s);
    s->c.mode = M_START;
}

void jg_init_regex(jg_state *s, const jr_dfa *re) {
    jg_init(s);
    s->raw = re;
}

void jg_init_grammar(jg_state *s, gr_matcher *m) {
    jg_init(s);
    s->gram = m;
}

bool jg_done(const jg_state *s) {
    if (s->calls) return jg_calls_done(s);
    if (s->raw) return jr_accepts(s->raw, s->rstate);
    if (s->gram) return gr_done(s->gram);
    return s->schema ? s->done : s->c.mode == M_DONE;
}

bool jg_core_number_ends(const jg_core *s) {
    return s->mode == M_NUMBER &&
           (s->sub == N_ZERO || s->sub == N_INT || s->sub == N_FRAC || s->sub == N_EXP);
}

static bool jg_step(jg_state *s, uint8_t c) {
    if (s->calls) return jg_calls_step(s, c);
    if (s->raw) {
        int next = jr_step(s->raw, s->rstate, c);
        s->rstate = (uint16_t)next;
        return jr_live(next);
    }
    return s->schema ? jg_schema_step(s, c) : jg_core_step(&s->c, c);
}

static bool after_value(jg_core *s) {
    s->mode = s->depth ? M_AFTER : M_DONE;
    s->ws = 0;
    return true;
}

static bool open_container(jg_core *s, bool array) {
    if (s->depth == JG_MAX_DEPTH) return false;
    uint64_t bit = 1ull << s->depth;
    s->arrays = array ? s->arrays | bit : s->arrays & ~bit;
    s->depth++;
    s->mode = array ? M_ARR_FIRST : M_OBJ_FIRST;
    return true;
}

static bool close_container(jg_core *s, bool array) {
    if (!s->depth || (bool)((s->arrays >> (s->depth - 1)) & 1) != array) return false;
    s->depth--;
    return after_value(s);
}

static bool start_string(jg_core *s, bool key) {
    s->mode = M_STRING;
    s->key = key;
    s->utf8 = 0;
    s->low = false;
    return true;
}

static bool start_value(jg_core *s, uint8_t c) {
    switch (c) {
    case '{':
        return open_container(s, false);
    case '[':
        return open_container(s, true);
    case '"':
        return start_string(s, false);
    case '-':
        s->mode = M_NUMBER, s->sub = N_MINUS;
        return true;
    case '0':
        s->mode = M_NUMBER, s->sub = N_ZERO;
        return true;
    case 't':
    case 'f':
    case 'n':
        s->mode = M_LITERAL, s->sub = (uint8_t)((c == 't' ? 0 : c == 'f' ? 1 : 2) * 8 + 1);
        return true;
    default:
        if (c < '1' || c > '9') return false;
        s->mode = M_NUMBER, s->sub = N_INT;
        return true;
    }
}

/* A number's next byte: a digit, '.', 'e', a sign where one fits, or (in
 * an accepting state) anything else, which ends it and is read after it. */
static bool number_step(jg_core *s, uint8_t c) {
    bool digit = c >= '0' && c <= '9';
    switch (s->sub) {
    case N_MINUS:
        if (!digit) return false;
        s->sub = c == '0' ? N_ZERO : N_INT;
        return true;
    case N_INT:
        if (digit) return true;
        /* fall through */
    case N_ZERO:
        if (c == '.') return s->sub = N_DOT, true;
        if (c == 'e' || c == 'E') return s->sub = N_E, true;
        break;
    case N_DOT:
        return digit ? (s->sub = N_FRAC, true) : false;
    case N_FRAC:
        if (digit) return true;
        if (c == 'e' || c == 'E') return s->sub = N_E, true;
        break;
    case N_E:
        if (c == '+' || c == '-') return s->sub = N_ESIGN, true;
        return digit ? (s->sub = N_EXP, true) : false;
    case N_ESIGN:
        return digit ? (s->sub = N_EXP, true) : false;
    case N_EXP:
        if (digit) return true;
        break;
    }
    after_value(s); /* an accepting state: the number ends before c */
    return jg_core_step(s, c);
}

static bool string_step(jg_core *s, uint8_t c) {
    if (s->utf8) {
        if (c < s->lo || c > s->hi) return false;
        s->lo = 0x80, s->hi = 0xBF;
        s->utf8--;
        return true;
    }
    if (c == '"') {
        if (!s->key) return after_value(s);
        s->mode = M_COLON, s->ws = 0;
        return true;
    }
    if (c == '\\') return s->mode = M_ESC, true;
    if (c < 0x20) return false;
    if (c < 0x80) return true;
    if (c >= 0xC2 && c <= 0xDF)
        s->utf8 = 1, s->lo = 0x80, s->hi = 0xBF;
    else if (c >= 0xE0 && c <= 0xEF)
        s->utf8 = 2, s->lo = c == 0xE0 ? 0xA0 : 0x80, s->hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        s->utf8 = 3, s->lo = c == 0xF0 ? 0x90 : 0x80, s->hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return false;
    return true;
}

static bool hex_step(jg_core *s, uint8_t c) {
    int h = di_hexval(c);
    if (h < 0) return false;
    s->cp = (uint16_t)(s->cp << 4 | h);
    /* no prefix that only a lone or a missing low surrogate could finish */
    if (++s->sub == 1 && s->low) return h == 0xD;
    if (s->sub == 2) return s->low == (s->cp >= 0xDC && s->cp <= 0xDF);
    if (s->sub < 4) return true;
    uint16_t cp = s->cp;
    bool high = cp >= 0xD800 && cp <= 0xDBFF, low = cp >= 0xDC00 && cp <= 0xDFFF;
    if (s->low) { /* the low half a high surrogate asked for */
        if (!low) return false;
        s->low = false;
        return s->mode = M_STRING, true;
    }
    if (low || cp == 0) return false;
    s->low = high;
    s->mode = high ? M_LOW_BSL : M_STRING;
    return true;
}

bool jg_core_step(jg_core *s, uint8_t c) {
    if (s->mode <= M_AFTER && (c == ' ' || c == '\t' || c == '\n' || c == '\r'))
        return ++s->ws <= JG_MAX_WS;
    switch (s->mode) {
    case M_START:
        s->ws = 0;
        return c == '{' && open_container(s, false);
    case M_OBJ_FIRST:
        s->ws = 0;
        if (c == '}') return close_container(s, false);
        return c == '"' && start_string(s, true);
    case M_OBJ_KEY:
        s->ws = 0;
        return c == '"' && start_string(s, true);
    case M_COLON:
        s->ws = 0;
        return c == ':' && (s->mode = M_VALUE, true);
    case M_VALUE:
        s->ws = 0;
        return start_value(s, c);
    case M_ARR_FIRST:
        s->ws = 0;
        if (c == ']') return close_container(s, true);
        return start_value(s, c);
    case M_AFTER: {
        s->ws = 0;
        bool array = (s->arrays >> (s->depth - 1)) & 1;
        if (c == ',') return s->mode = array ? M_VALUE : M_OBJ_KEY, true;
        return c == (array ? ']' : '}') && close_container(s, array);
    }
    case M_STRING:
        return string_step(s, c);
    case M_ESC:
        if (c == 'u') return s->mode = M_UHEX, s->sub = 0, s->cp = 0, true;
        return strchr("\"\\/bfnrt", c) && c && (s->mode = M_STRING, true);
    case M_UHEX:
        return hex_step(s, c);
    case M_LOW_BSL:
        return c == '\\' && (s->mode = M_LOW_U, true);
    case M_LOW_U:
        return c == 'u' && (s->mode = M_UHEX, s->sub = 0, s->cp = 0, true);
    case M_NUMBER:
        return number_step(s, c);
    case M_LITERAL: {
        const char *lit = literals[s->sub / 8];
        int pos = s->sub % 8;
        if (c != (uint8_t)lit[pos]) return false;
        s->sub++;
        return lit[pos + 1] ? true : after_value(s);
    }
    default: /* M_DONE */
        return false;
    }
}

bool jg_feed(jg_state *s, const char *b, size_t n) {
    if (s->gram) return gr_feed(s->gram, b, n);
    for (size_t i = 0; i < n; i++)
        if (!jg_step(s, (uint8_t)b[i])) return false;
    return true;
}

/* ---- the vocabulary --------------------------------------------------------- */
#define JG_MAX_TOKEN 256 /* longer tokens are never allowed (none real is) */
#define JG_MAX_EOS   8

/* Tokens in byte order, each with the bytes it shares with the one before. */
typedef struct jg_walk {
    int n;
    int *id;
    uint16_t *lcp;
} jg_walk;

struct jg_vocab {
    int vocab;
    uint32_t *off; /* by id: bytes in blob */
    uint16_t *len; /* by id: 0 for a token never allowed */
    char *blob;
    jg_walk all;
    /* Plain string text (no quote, backslash or control byte, valid UTF-8
     * as far as it goes) is allowed as a whole inside a string outside a
     * character: the walk there covers the other tokens only. */
    jg_walk plain;
    uint16_t *plain_chars; /* by id: characters a plain token starts */
    jg_walk other;
    int eos[JG_MAX_EOS], n_eos;
    /* control tokens (jg_vocab_add_controls): ids, and by id their bytes */
    int *ctrl, n_ctrl;
    /* by byte, the tokens holding it (-1 ended), made when first asked
     * (with_byte); masks may run on several threads */
    int *with[256];
    uint32_t *coff;
    uint16_t *clen;
    char *cblob;
};

static bool is_eos(const jg_vocab *v, int id) {
    for (int i = 0; i < v->n_eos; i++)
        if (v->eos[i] == id) return true;
    return false;
}

static bool plain_text(const uint8_t *b, int n) {
    jg_core s = {.mode = M_STRING};
    for (int i = 0; i < n; i++)
        if (b[i] == '"' || b[i] == '\\' || !string_step(&s, b[i])) return false;
    return true;
}

static int cmp_bytes(const void *a, const void *b, void *ctx) {
    const jg_vocab *v = ctx;
    int i = *(const int *)a, j = *(const int *)b;
    size_t li = v->len[i], lj = v->len[j];
    int c = memcmp(v->blob + v->off[i], v->blob + v->off[j], li < lj ? li : lj);
    return c ? c : li < lj ? -1 : li > lj;
}

/* Sorts w's ids (set) by bytes and fills their shared-prefix lengths. */
static void walk_sort(jg_vocab *v, jg_walk *w) {
    qsort_r(w->id, (size_t)w->n, sizeof *w->id, cmp_bytes, v);
    w->lcp = di_calloc((size_t)(w->n ? w->n : 1), sizeof *w->lcp);
    for (int k = 1; k < w->n; k++) {
        int a = w->id[k - 1], b = w->id[k], m = v->len[a] < v->len[b] ? v->len[a] : v->len[b];
        int l = 0;
        while (l < m && v->blob[v->off[a] + l] == v->blob[v->off[b] + l]) l++;
        w->lcp[k] = (uint16_t)l;
    }
}

jg_vocab *jg_vocab_new(int vocab, jg_token_bytes_fn bytes, void *ctx, const int *eos, int n_eos) {
    jg_vocab *v = di_calloc(1, sizeof *v);
    v->vocab = vocab;
    for (int i = 0; i < n_eos && v->n_eos < JG_MAX_EOS; i++) v->eos[v->n_eos++] = eos[i];
    v->off = di_malloc(sizeof *v->off * (size_t)(vocab ? vocab : 1));
    v->len = di_calloc((size_t)(vocab ? vocab : 1), sizeof *v->len);
    di_buf blob = {0};
    for (int id = 0; id < vocab; id++) {
        size_t l = 0;
        char *b = bytes(ctx, id, &l);
        if (b && l > 0 && l <= JG_MAX_TOKEN) {
            v->off[id] = (uint32_t)blob.n;
            v->len[id] = (uint16_t)l;
            di_buf_add(&blob, b, l);
            v->all.n++;
        }
        free(b);
    }
    v->blob = blob.p;
    size_t cap = (size_t)(v->all.n ? v->all.n : 1);
    v->all.id = di_malloc(sizeof(int) * cap);
    v->other.id = di_malloc(sizeof(int) * cap);
    v->plain.id = di_malloc(sizeof(int) * cap);
    v->plain_chars = di_calloc((size_t)(vocab ? vocab : 1), sizeof(uint16_t));
    for (int id = 0, k = 0; id < vocab; id++) {
        if (!v->len[id]) continue;
        v->all.id[k++] = id;
        const uint8_t *b = (const uint8_t *)v->blob + v->off[id];
        if (plain_text(b, v->len[id])) {
            int chars = 0;
            for (int i = 0; i < v->len[id]; i++) chars += (b[i] & 0xC0) != 0x80;
            v->plain_chars[id] = (uint16_t)chars;
            v->plain.id[v->plain.n++] = id;
        } else
            v->other.id[v->other.n++] = id;
    }
    walk_sort(v, &v->all);
    walk_sort(v, &v->other);
    walk_sort(v, &v->plain);
    return v;
}

void jg_vocab_add_controls(jg_vocab *v, jg_token_bytes_fn control_bytes, void *ctx) {
    size_t cap = (size_t)(v->vocab ? v->vocab : 1);
    v->coff = di_calloc(cap, sizeof *v->coff);
    v->clen = di_calloc(cap, sizeof *v->clen);
    v->ctrl = di_malloc(sizeof(int) * cap);
    di_buf blob = {0};
    for (int id = 0; id < v->vocab; id++) {
        size_t l = 0;
        char *b = v->len[id] || is_eos(v, id) ? NULL : control_bytes(ctx, id, &l);
        if (b && l > 0 && l <= JG_MAX_TOKEN) {
            v->coff[id] = (uint32_t)blob.n;
            v->clen[id] = (uint16_t)l;
            v->ctrl[v->n_ctrl++] = id;
            di_buf_add(&blob, b, l);
        }
        free(b);
    }
    v->cblob = blob.p;
}

/* The tokens whose bytes hold b, -1 ended. */
static const int *with_byte(jg_vocab *v, uint8_t b) {
    int *l = __atomic_load_n(&v->with[b], __ATOMIC_ACQUIRE);
    if (l) return l;
    int n = 0;
    for (int id = 0; id < v->vocab; id++)
        n += v->len[id] && memchr(v->blob + v->off[id], b, v->len[id]);
    l = di_malloc(sizeof(int) * (size_t)(n + 1));
    n = 0;
    for (int id = 0; id < v->vocab; id++)
        if (v->len[id] && memchr(v->blob + v->off[id], b, v->len[id])) l[n++] = id;
    l[n] = -1;
    int *none = NULL; /* another thread may have made it meanwhile: keep the first */
    if (!__atomic_compare_exchange_n(&v->with[b], &none, l, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        free(l);
        l = none;
    }
    return l;
}

void jg_vocab_free(jg_vocab *v) {
    if (!v) return;
    for (int b = 0; b < 256; b++) free(v->with[b]);
    free(v->ctrl);
    free(v->coff);
    free(v->clen);
    free(v->cblob);
    free(v->off);
    free(v->len);
    free(v->blob);
    free(v->all.id);
    free(v->all.lcp);
    free(v->other.id);
    free(v->other.lcp);
    free(v->plain.id);
    free(v->plain.lcp);
    free(v->plain_chars);
    free(v);
}

/* Marks in ok the tokens of w that can follow s: each resumes from the
 * state its shared prefix left, and a token that shares the prefix that
 * failed fails without a step. */
static void walk(const jg_vocab *v, const jg_walk *w, const jg_state *s, unsigned char *ok) {
    jg_state st[JG_MAX_TOKEN + 1];
    st[0] = *s;
    int good = 0; /* bytes of the token before whose states are in st */
    for (int k = 0; k < w->n; k++) {
        int id = w->id[k], l = w->lcp[k], n = v->len[id];
        if (l > good) continue;
        const uint8_t *b = (const uint8_t *)v->blob + v->off[id];
        int d = l;
        for (; d < n; d++) {
            st[d + 1] = st[d];
            if (!jg_step(&st[d + 1], b[d])) break;
        }
        good = d;
        ok[id] = d == n;
    }
}

/* Marks the tokens of w (the plain ones: their bytes the value's own; or
 * all, for plain text) that a pattern, in DFA state st, can take with room
 * characters left (and, with lens, len characters written so far: its
 * length range's table): the DFA walked as walk() walks the automaton, a
 * dead prefix skipped whole. */
static void walk_pattern(const jg_vocab *v, const jg_walk *w, const jr_dfa *re,
                         const jr_lengths *lens, int st, uint32_t len, uint32_t room,
                         unsigned char *ok) {
    int at[JG_MAX_TOKEN + 1];
    uint32_t chars[JG_MAX_TOKEN + 1]; /* the length at each byte */
    at[0] = st, chars[0] = len;
    int good = 0;
    for (int k = 0; k < w->n; k++) {
        int id = w->id[k], l = w->lcp[k], n = v->len[id];
        if (l > good) continue;
        const uint8_t *b = (const uint8_t *)v->blob + v->off[id];
        int d = l;
        for (; d < n; d++) {
            chars[d + 1] = chars[d] + ((b[d] & 0xC0) != 0x80);
            at[d + 1] = jr_step(re, at[d], b[d]);
            if (!jr_live(at[d + 1]) || (lens && !jr_lengths_ok(lens, at[d + 1], chars[d + 1])))
                break;
        }
        good = d;
        ok[id] = d == n && v->plain_chars[id] <= room; /* 0 for a token not plain */
    }
}

/* Closure steps one grammar mask may take: thousands in usual grammars;
 * where a pathological one passes this (about 0.1 s), the tokens not yet
 * walked stay masked (each allowed one was checked, so the text stays
 * valid). */
#define JG_GRAMMAR_WORK ((uint64_t)1 << 22)

/* Marks the tokens of w that grammar matcher m can take next: its states
 * walked as walk() walks the automaton. */
static void walk_grammar(const jg_vocab *v, const jg_walk *w, gr_matcher *m, unsigned char *ok) {
    int at[JG_MAX_TOKEN + 1];
    at[0] = gr_current(m);
    int good = 0;
    uint64_t limit = gr_work(m) + JG_GRAMMAR_WORK;
    for (int k = 0; k < w->n && gr_work(m) <= limit; k++) {
        int id = w->id[k], l = w->lcp[k], n = v->len[id];
        if (l > good) continue;
        const uint8_t *b = (const uint8_t *)v->blob + v->off[id];
        int d = l;
        for (; d < n && (at[d + 1] = gr_next(m, at[d], b[d])) >= 0; d++) {
        }
        good = d;
        ok[id] = d == n;
    }
}

/* A control token's bytes into tool calls, none of them inside the
 * arguments (a marker is never part of a value). */
static bool feed_control(const jg_vocab *v, jg_state *s, int id) {
    const uint8_t *b = (const uint8_t *)v->cblob + v->coff[id];
    uint32_t before = s->cbytes;
    for (int i = 0; i < v->clen[id]; i++)
        if (!jg_step(s, b[i]) || s->cbytes != before) return false;
    return true;
}

/* Marks in ok, one by one from s, the tokens that hold byte b. */
static void walk_holding(const jg_vocab *v, const jg_state *s, uint8_t b, unsigned char *ok) {
    for (const int *l = with_byte((jg_vocab *)v, b); *l >= 0; l++) {
        jg_state t = *s;
        ok[*l] = jg_feed(&t, v->blob + v->off[*l], v->len[*l]);
    }
}

int jg_mask(const jg_vocab *v, const jg_state *s, float *logits) {
    unsigned char *ok = di_calloc((size_t)(v->vocab ? v->vocab : 1), 1);
    int first = jg_calls_free_at_rest(s);
    if (first >= 0) { /* free text: every token but those that may open a call */
        for (int id = 0; id < v->vocab; id++) ok[id] = v->len[id] != 0;
        walk_holding(v, s, (uint8_t)first, ok);
    } else if (s->gram) {
        walk_grammar(v, &v->all, s->gram, ok);
    } else if (s->raw) {
        walk_pattern(v, &v->all, s->raw, NULL, s->rstate, 0, UINT32_MAX, ok);
    } else if ((!s->schema || s->what == W_CORE) && s->c.mode == M_STRING && !s->c.utf8 &&
               jg_calls_in_value(s)) {
        uint32_t room = jg_string_room(s); /* a schema's maxLength */
        const jr_dfa *re = jg_string_pattern(s);
        if (re)
            walk_pattern(v, &v->plain, re, jg_string_lengths(s), s->rstate, s->slen, room, ok);
        else
            for (int k = 0; k < v->plain.n; k++)
                ok[v->plain.id[k]] = v->plain_chars[v->plain.id[k]] <= room;
        walk(v, &v->other, s, ok);
        int stop = jg_calls_plain_stop(s);
        if (stop >= 0) walk_holding(v, s, (uint8_t)stop, ok);
    } else
        walk(v, &v->all, s, ok);
    for (int k = 0; s->calls && k < v->n_ctrl; k++) {
        jg_state t = *s;
        ok[v->ctrl[k]] = feed_control(v, &t, v->ctrl[k]);
    }
    int allowed = 0;
    bool done = jg_done(s);
    for (int id = 0; id < v->vocab; id++) {
        if (is_eos(v, id)) ok[id] = done;
        if (ok[id])
            allowed++;
        else
            logits[id] = -INFINITY;
    }
    if (!allowed) /* a dead end (no token continues): let the sequence end */
        for (int i = 0; i < v->n_eos; i++)
            if (v->eos[i] >= 0 && v->eos[i] < v->vocab) logits[v->eos[i]] = 0, allowed++;
    free(ok);
    return allowed;
}

bool jg_feed_token(const jg_vocab *v, jg_state *s, int id) {
    if (is_eos(v, id)) return true;
    if (id < 0 || id >= v->vocab) return false;
    if (!v->len[id]) return s->calls && v->clen && v->clen[id] && feed_control(v, s, id);
    return jg_feed(s, v->blob + v->off[id], v->len[id]);
}
