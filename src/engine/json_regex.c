/* json_regex.c — patterns to byte DFAs (json_regex.h): a recursive-descent
 * parser to a tree, Thompson's construction of an NFA over bytes (a
 * character class becomes its UTF-8 byte sequences), the subset
 * construction over the byte classes the NFA tells apart, and the states
 * that cannot reach an accepting one cut. */
#include "engine/json_regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/base.h"

#define MAX_PATTERN 4096 /* bytes of a pattern */
#define MAX_TREE    4096 /* nodes of its tree */
#define MAX_NFA     8192
#define MAX_RANGE   256  /* non-ASCII characters of one class range */
#define MAX_REPEAT  1000 /* a bounded quantifier's bounds */
#define MAX_DEPTH   64   /* groups within groups */
/* Steps the subset construction may take (words and edges looked at): a
 * pattern that needs more is refused, so no schema costs more than tens of
 * milliseconds a pattern to compile. */
#define MAX_WORK (30l * 1000 * 1000)
#define INF      (-1) /* a quantifier without upper bound */

/* ---- the tree ---- */
enum { R_EMPTY, R_CHAR, R_CAT, R_ALT, R_REP };
/* A class's non-ASCII members beyond those it names: the non-ASCII
 * characters that are not spaces (a subset of them: below), and the
 * Unicode spaces (\s beyond ASCII). */
enum { NA_OTHER = 1, NA_SPACE = 2, NA_ALL = 3 };

typedef struct rx_set {
    uint64_t ascii[2]; /* bit c: ASCII character c */
    uint8_t na;        /* NA_* */
    int first, count;  /* non-ASCII code points named, at cps[first ..] */
} rx_set;

typedef struct rx_node {
    uint8_t op;
    int a, b;     /* cat, alt: the two parts; rep: a, the part repeated */
    int min, max; /* rep */
    int set;      /* char */
} rx_node;

typedef struct parser {
    const uint8_t *p;
    size_t n, i;
    rx_node *nodes;
    int n_nodes;
    rx_set *sets;
    int n_sets;
    uint32_t *cps;
    int n_cps, cap_cps;
    const char *err;
} parser;

static int node(parser *ps, int op, int a, int b) {
    if (ps->err) return -1;
    if (ps->n_nodes == MAX_TREE) return ps->err = "the pattern is too long", -1;
    ps->nodes[ps->n_nodes] = (rx_node){.op = (uint8_t)op, .a = a, .b = b};
    return ps->n_nodes++;
}

static rx_set *new_set(parser *ps, int *id) {
    if (ps->n_sets == MAX_TREE) return ps->err = "the pattern is too long", NULL;
    *id = ps->n_sets;
    rx_set *s = &ps->sets[ps->n_sets++];
    *s = (rx_set){.first = ps->n_cps};
    return s;
}

static void add_cp(parser *ps, rx_set *s, uint32_t cp) {
    if (cp < 128) {
        if (cp) s->ascii[cp >> 6] |= 1ull << (cp & 63); /* never NUL */
        return;
    }
    if (ps->n_cps == ps->cap_cps) {
        ps->cap_cps = ps->cap_cps ? 2 * ps->cap_cps : 64;
        ps->cps = di_realloc(ps->cps, sizeof *ps->cps * (size_t)ps->cap_cps);
    }
    ps->cps[ps->n_cps++] = cp;
    s->count++;
}

static void add_range(rx_set *s, int lo, int hi) {
    for (int c = lo < 1 ? 1 : lo; c <= hi && c < 128; c++) s->ascii[c >> 6] |= 1ull << (c & 63);
}

/* ASCII sets of \d \w \s; with neg, their complements (less NUL), which
 * take every non-ASCII character too (\D, \W) or all but the spaces (\S). */
static void add_class_escape(rx_set *s, char e) {
    rx_set t = {0};
    char low = (char)(e | 0x20);
    if (low == 'd') add_range(&t, '0', '9');
    if (low == 'w') add_range(&t, '0', '9'), add_range(&t, 'A', 'Z'), add_range(&t, 'a', 'z');
    if (low == 'w') add_range(&t, '_', '_');
    if (low == 's') add_range(&t, '\t', '\r'), add_range(&t, ' ', ' ');
    bool neg = e != low;
    if (neg) {
        t.ascii[0] = ~t.ascii[0] & ~1ull;
        t.ascii[1] = ~t.ascii[1];
        t.na = low == 's' ? NA_OTHER : NA_ALL;
    } else if (low == 's')
        t.na = NA_SPACE;
    s->ascii[0] |= t.ascii[0], s->ascii[1] |= t.ascii[1], s->na |= t.na;
}

static int hex_digits(parser *ps, int n) {
    int v = 0;
    for (int k = 0; k < n; k++) {
        int h = ps->i < ps->n ? di_hexval(ps->p[ps->i]) : -1;
        if (h < 0) return ps->err = "a malformed \\x or \\u escape", -1;
        v = v << 4 | h;
        ps->i++;
    }
    return v;
}

/* The code point at i (0, with err, where the UTF-8 is not valid). */
static uint32_t next_cp(parser *ps) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate(ps->p + ps->i, (utf8proc_ssize_t)(ps->n - ps->i), &cp);
    if (k <= 0) {
        ps->i = ps->n;
        return ps->err = "the pattern is not valid UTF-8", 0;
    }
    ps->i += (size_t)k;
    return (uint32_t)cp;
}

/* After a backslash: a class escape (added to s, returns -2) or one code
 * point (returned); -1 with err. In a class, \b is a backspace. */
static int32_t escape(parser *ps, rx_set *s, bool in_class) {
    if (ps->i >= ps->n) return ps->err = "a pattern ending in a backslash", -1;
    uint8_t e = ps->p[ps->i++];
    switch (e) {
    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 's':
    case 'S':
        add_class_escape(s, (char)e);
        return -2;
    case 'n':
        return '\n';
    case 't':
        return '\t';
    case 'r':
        return '\r';
    case 'f':
        return '\f';
    case 'v':
        return '\v';
    case '0':
        return 0;
    case 'x':
        return hex_digits(ps, 2);
    case 'u': {
        int v = hex_digits(ps, 4);
        if (v < 0xD800 || v > 0xDFFF) return v;
        if (v > 0xDBFF || ps->i + 6 > ps->n || ps->p[ps->i] != '\\' || ps->p[ps->i + 1] != 'u')
            return ps->err = "a lone surrogate escape", -1;
        ps->i += 2;
        int lo = hex_digits(ps, 4);
        if (lo < 0xDC00 || lo > 0xDFFF) return ps->err = "a lone surrogate escape", -1;
        return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
    }
    case 'b':
        if (in_class) return '\b';
        return ps->err = "a word boundary (\\b)", -1;
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '1' && e <= '9'))
            return ps->err = "an escape this decoder does not hold (a back-reference, "
                             "\\B, \\p, \\c or \\k)",
                   -1;
        ps->i--;
        return (int32_t)next_cp(ps); /* an escaped punctuation character: itself */
    }
}

static int char_node(parser *ps, int set) {
    int n = node(ps, R_CHAR, 0, 0);
    if (n >= 0) ps->nodes[n].set = set;
    return n;
}

/* A bracketed class, after '['. */
static int class_atom(parser *ps) {
    int id;
    rx_set *s = new_set(ps, &id);
    if (!s) return -1;
    bool neg = ps->i < ps->n && ps->p[ps->i] == '^';
    ps->i += neg;
    for (;;) {
        if (ps->i >= ps->n) return ps->err = "an unclosed character class", -1;
        if (ps->p[ps->i] == ']') {
            ps->i++;
            break;
        }
        int32_t lo;
        if (ps->p[ps->i] == '\\') {
            ps->i++;
            lo = escape(ps, s, true);
            if (lo == -1) return -1;
            if (lo == -2) continue;
        } else
            lo = (int32_t)next_cp(ps);
        if (ps->i + 1 < ps->n && ps->p[ps->i] == '-' && ps->p[ps->i + 1] != ']') {
            ps->i++;
            int32_t hi;
            if (ps->p[ps->i] == '\\') {
                ps->i++;
                hi = escape(ps, s, true);
                if (hi == -1) return -1;
                if (hi == -2) return ps->err = "a class escape ending a range", -1;
            } else
                hi = (int32_t)next_cp(ps);
            if (hi < lo) return ps->err = "a range out of order", -1;
            add_range(s, lo, hi);
            int from = lo < 128 ? 128 : lo;
            if (hi - from + 1 > MAX_RANGE) return ps->err = "a non-ASCII range over 256 wide", -1;
            for (int32_t c = from; c <= hi; c++) add_cp(ps, s, (uint32_t)c);
        } else
            add_cp(ps, s, (uint32_t)lo);
    }
    if (neg) {
        if (s->count) return ps->err = "a negated class naming non-ASCII characters", -1;
        s->ascii[0] = ~s->ascii[0] & ~1ull;
        s->ascii[1] = ~s->ascii[1];
        s->na = NA_ALL ^ s->na;
    }
    return char_node(ps, id);
}

static int parse_alt(parser *ps, int depth);

static int atom(parser *ps, int depth) {
    uint8_t c = ps->p[ps->i];
    int id;
    rx_set *s;
    switch (c) {
    case '(': {
        if (depth == MAX_DEPTH) return ps->err = "groups nested too deep", -1;
        ps->i++;
        if (ps->i < ps->n && ps->p[ps->i] == '?') {
            if (ps->i + 1 >= ps->n || ps->p[ps->i + 1] != ':')
                return ps->err = "a look-around or a named group", -1;
            ps->i += 2;
        }
        int r = parse_alt(ps, depth + 1);
        if (ps->err) return -1;
        if (ps->i >= ps->n || ps->p[ps->i] != ')') return ps->err = "an unclosed group", -1;
        ps->i++;
        return r;
    }
    case '[':
        ps->i++;
        return class_atom(ps);
    case '.':
        ps->i++;
        if (!(s = new_set(ps, &id))) return -1;
        s->ascii[0] = ~0ull & ~(1ull | 1ull << '\n' | 1ull << '\r');
        s->ascii[1] = ~0ull;
        s->na = NA_OTHER;
        return char_node(ps, id);
    case '^':
    case '$':
        return ps->err = "an anchor inside the pattern", -1;
    case '*':
    case '+':
    case '?':
        return ps->err = "a quantifier with nothing to repeat", -1;
    default:
        if (!(s = new_set(ps, &id))) return -1;
        if (c == '\\') {
            ps->i++;
            int32_t cp = escape(ps, s, false);
            if (cp == -1) return -1;
            if (cp >= 0) add_cp(ps, s, (uint32_t)cp);
        } else
            add_cp(ps, s, next_cp(ps));
        return char_node(ps, id);
    }
}

/* A decimal number at i (at most MAX_REPEAT + 1), or -1. */
static int count(parser *ps) {
    int v = -1;
    while (ps->i < ps->n && ps->p[ps->i] >= '0' && ps->p[ps->i] <= '9') {
        int d = ps->p[ps->i++] - '0';
        v = v < 0 ? d : v * 10 + d;
        if (v > MAX_REPEAT) v = MAX_REPEAT + 1;
    }
    return v;
}

/* {n}, {n,} or {n,m} at i: true with the bounds; false (i unchanged) where
 * the brace is a literal one. */
static bool braces(parser *ps, int *min, int *max) {
    size_t at = ps->i++;
    *min = count(ps);
    *max = *min;
    if (*min >= 0 && ps->i < ps->n && ps->p[ps->i] == ',') {
        ps->i++;
        *max = count(ps);
        if (*max < 0) *max = INF;
    }
    if (*min >= 0 && ps->i < ps->n && ps->p[ps->i] == '}') {
        ps->i++;
        return true;
    }
    ps->i = at;
    return false;
}

static int repeat(parser *ps, int depth) {
    int a = atom(ps, depth);
    if (a < 0 || ps->i >= ps->n) return a;
    int min, max;
    uint8_t c = ps->p[ps->i];
    if (c == '*' || c == '+' || c == '?')
        ps->i++, min = c == '+', max = c == '?' ? 1 : INF;
    else if (c != '{' || !braces(ps, &min, &max))
        return a;
    if (min > MAX_REPEAT || max > MAX_REPEAT) return ps->err = "a repeat count over 1000", -1;
    if (max != INF && max < min) return ps->err = "a repeat range out of order", -1;
    if (ps->i < ps->n && ps->p[ps->i] == '?') ps->i++; /* lazy: the same strings */
    if (ps->i < ps->n && strchr("*+?", ps->p[ps->i]))
        return ps->err = "a quantifier with nothing to repeat", -1;
    int r = node(ps, R_REP, a, 0);
    if (r >= 0) ps->nodes[r].min = min, ps->nodes[r].max = max;
    return r;
}

/* A sequence, up to '|', the group's ')' or (top level) a final '$'. */
static int parse_seq(parser *ps, int depth) {
    int acc = node(ps, R_EMPTY, 0, 0);
    while (!ps->err && ps->i < ps->n) {
        uint8_t c = ps->p[ps->i];
        if (c == '|' || (c == ')' && depth)) break;
        if (c == ')') return ps->err = "an unmatched ')'", -1;
        if (c == '$' && !depth && (ps->i + 1 == ps->n || ps->p[ps->i + 1] == '|')) break;
        int r = repeat(ps, depth);
        acc = node(ps, R_CAT, acc, r);
    }
    return ps->err ? -1 : acc;
}

static int parse_alt(parser *ps, int depth) {
    int a = parse_seq(ps, depth);
    while (!ps->err && ps->i < ps->n && ps->p[ps->i] == '|') {
        ps->i++;
        a = node(ps, R_ALT, a, parse_seq(ps, depth));
    }
    return ps->err ? -1 : a;
}

/* Any character (what an unanchored end leaves free), repeated. */
static int any_star(parser *ps) {
    int id;
    rx_set *s = new_set(ps, &id);
    if (!s) return -1;
    s->ascii[0] = ~1ull, s->ascii[1] = ~0ull, s->na = NA_ALL;
    int r = node(ps, R_REP, char_node(ps, id), 0);
    if (r >= 0) ps->nodes[r].min = 0, ps->nodes[r].max = INF;
    return r;
}

/* The whole pattern: its top-level alternatives, each anchored where it
 * starts with ^ or ends with $, free (any characters) where not. */
static int parse_top(parser *ps) {
    int top = -1;
    for (;;) {
        bool start = ps->i < ps->n && ps->p[ps->i] == '^';
        ps->i += start;
        int a = parse_seq(ps, 0);
        bool end = ps->i < ps->n && ps->p[ps->i] == '$';
        ps->i += end;
        if (!start) a = node(ps, R_CAT, any_star(ps), a);
        if (!end) a = node(ps, R_CAT, a, any_star(ps));
        top = top < 0 ? a : node(ps, R_ALT, top, a);
        if (ps->err || ps->i >= ps->n) break;
        ps->i++; /* '|' */
    }
    return ps->err ? -1 : top;
}

/* ---- the NFA ---- */
typedef struct nfa {
    int n, cap;
    int *eps_head, *byte_head; /* per state: its first epsilon edge, byte edge */
    int *eps_to, *eps_next;
    int n_eps, cap_eps;
    int *byte_to, *byte_next; /* per byte edge: its target; its bytes in bsets */
    uint64_t (*bsets)[4];
    int n_bytes, cap_bytes;
    bool full;
} nfa;

static int new_state(nfa *f) {
    if (f->n == MAX_NFA) return f->full = true, -1;
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 256;
        f->eps_head = di_realloc(f->eps_head, sizeof(int) * (size_t)f->cap);
        f->byte_head = di_realloc(f->byte_head, sizeof(int) * (size_t)f->cap);
    }
    f->eps_head[f->n] = f->byte_head[f->n] = -1;
    return f->n++;
}

static void eps(nfa *f, int from, int to) {
    if (from < 0 || to < 0) return;
    if (f->n_eps == f->cap_eps) {
        f->cap_eps = f->cap_eps ? 2 * f->cap_eps : 256;
        f->eps_to = di_realloc(f->eps_to, sizeof(int) * (size_t)f->cap_eps);
        f->eps_next = di_realloc(f->eps_next, sizeof(int) * (size_t)f->cap_eps);
    }
    f->eps_to[f->n_eps] = to;
    f->eps_next[f->n_eps] = f->eps_head[from];
    f->eps_head[from] = f->n_eps++;
}

/* An edge on the bytes of set from state from to state to. */
static void byte_edge(nfa *f, int from, const uint64_t set[4], int to) {
    if (from < 0 || to < 0) return;
    if (f->n_bytes == f->cap_bytes) {
        f->cap_bytes = f->cap_bytes ? 2 * f->cap_bytes : 256;
        f->byte_to = di_realloc(f->byte_to, sizeof(int) * (size_t)f->cap_bytes);
        f->byte_next = di_realloc(f->byte_next, sizeof(int) * (size_t)f->cap_bytes);
        f->bsets = di_realloc(f->bsets, sizeof *f->bsets * (size_t)f->cap_bytes);
    }
    memcpy(f->bsets[f->n_bytes], set, sizeof f->bsets[0]);
    f->byte_to[f->n_bytes] = to;
    f->byte_next[f->n_bytes] = f->byte_head[from];
    f->byte_head[from] = f->n_bytes++;
}

static void range_edge(nfa *f, int from, int lo, int hi, int to) {
    uint64_t set[4] = {0};
    for (int b = lo; b <= hi; b++) set[b >> 6] |= 1ull << (b & 63);
    byte_edge(f, from, set, to);
}

/* Non-ASCII characters in UTF-8, a row per kind of lead byte: its range,
 * the second byte's range, and the continuation bytes (80-BF) after that.
 * All of them; and a subset without the Unicode spaces (lead bytes C2, E1,
 * E2, E3 and EF left out whole). */
typedef struct utf8_row {
    uint8_t lead_lo, lead_hi, second_lo, second_hi, tail;
} utf8_row;
static const utf8_row NA_ALL_ROWS[] = {
    {0xC2, 0xDF, 0x80, 0xBF, 0}, {0xE0, 0xE0, 0xA0, 0xBF, 1}, {0xE1, 0xEC, 0x80, 0xBF, 1},
    {0xED, 0xED, 0x80, 0x9F, 1}, {0xEE, 0xEF, 0x80, 0xBF, 1}, {0xF0, 0xF0, 0x90, 0xBF, 2},
    {0xF1, 0xF3, 0x80, 0xBF, 2}, {0xF4, 0xF4, 0x80, 0x8F, 2},
};
static const utf8_row NA_OTHER_ROWS[] = {
    {0xC3, 0xDF, 0x80, 0xBF, 0}, {0xE0, 0xE0, 0xA0, 0xBF, 1}, {0xE4, 0xEC, 0x80, 0xBF, 1},
    {0xED, 0xED, 0x80, 0x9F, 1}, {0xEE, 0xEE, 0x80, 0xBF, 1}, {0xF0, 0xF0, 0x90, 0xBF, 2},
    {0xF1, 0xF3, 0x80, 0xBF, 2}, {0xF4, 0xF4, 0x80, 0x8F, 2},
};
/* \s beyond ASCII */
static const uint32_t SPACES[] = {0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
                                  0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028,
                                  0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF};

/* The characters of rows from in to out, sharing the states that wait for
 * k more continuation bytes (tail[k]). */
static void utf8_rows(nfa *f, const utf8_row *rows, int n, int in, int out) {
    int tail[4] = {out};
    for (int k = 1; k < 4; k++) {
        tail[k] = new_state(f);
        range_edge(f, tail[k], 0x80, 0xBF, tail[k - 1]);
    }
    for (int r = 0; r < n; r++) {
        const utf8_row *w = &rows[r];
        if (w->second_lo == 0x80 && w->second_hi == 0xBF) {
            range_edge(f, in, w->lead_lo, w->lead_hi, tail[w->tail + 1]);
        } else {
            int x = new_state(f);
            range_edge(f, in, w->lead_lo, w->lead_hi, x);
            range_edge(f, x, w->second_lo, w->second_hi, tail[w->tail]);
        }
    }
}

static void cp_seq(nfa *f, int in, uint32_t cp, int out) {
    uint8_t b[4];
    int n = (int)utf8proc_encode_char((utf8proc_int32_t)cp, b), x = in;
    for (int k = 0; k < n; k++) {
        int y = k == n - 1 ? out : new_state(f);
        range_edge(f, x, b[k], b[k], y);
        x = y;
    }
}

static int emit_char(nfa *f, const parser *ps, const rx_set *s, int in) {
    int out = new_state(f);
    uint64_t set[4] = {s->ascii[0], s->ascii[1], 0, 0};
    if (set[0] | set[1]) byte_edge(f, in, set, out);
    if (s->na == NA_ALL) utf8_rows(f, NA_ALL_ROWS, 8, in, out);
    if (s->na == NA_OTHER) utf8_rows(f, NA_OTHER_ROWS, 8, in, out);
    if (s->na == NA_SPACE)
        for (size_t k = 0; k < sizeof SPACES / sizeof *SPACES; k++) cp_seq(f, in, SPACES[k], out);
    for (int k = 0; k < s->count; k++) cp_seq(f, in, ps->cps[s->first + k], out);
    return out;
}

/* Thompson's construction: the fragment of tree node x entered at state
 * in; returns the state it leaves by. */
static int emit(nfa *f, const parser *ps, int x, int in) {
    if (f->full || in < 0) return -1;
    const rx_node *r = &ps->nodes[x];
    switch (r->op) {
    case R_CHAR:
        return emit_char(f, ps, &ps->sets[r->set], in);
    case R_CAT:
        return emit(f, ps, r->b, emit(f, ps, r->a, in));
    case R_ALT: {
        int out = new_state(f);
        eps(f, emit(f, ps, r->a, in), out);
        eps(f, emit(f, ps, r->b, in), out);
        return out;
    }
    case R_REP: {
        int at = in;
        for (int k = 0; k < r->min; k++) at = emit(f, ps, r->a, at);
        int out = new_state(f);
        if (r->max == INF) {
            int loop = new_state(f);
            eps(f, at, loop);
            eps(f, emit(f, ps, r->a, loop), loop);
            eps(f, loop, out);
            return out;
        }
        for (int k = r->min; k < r->max; k++) {
            eps(f, at, out);
            at = emit(f, ps, r->a, at);
        }
        eps(f, at, out);
        return out;
    }
    default: /* R_EMPTY */
        return in;
    }
}

static void nfa_free(nfa *f) {
    free(f->eps_head);
    free(f->byte_head);
    free(f->byte_to);
    free(f->byte_next);
    free(f->eps_to);
    free(f->eps_next);
    free(f->bsets);
}

/* ---- the DFA ---- */
struct jr_dfa {
    int n_states, n_cls;
    uint8_t cls[256];
    int16_t rep[256]; /* a byte of each class but NUL (-1: none) */
    uint16_t *next;   /* n_states x n_cls */
    uint8_t *accept;
};

static bool in_set(const uint64_t set[4], int b) {
    return set[b >> 6] >> (b & 63) & 1;
}

/* Bytes no edge tells apart share a class. */
static int byte_classes(const nfa *f, uint8_t cls[256]) {
    int n = 1;
    memset(cls, 0, 256);
    for (int s = 0; s < f->n_bytes; s++) {
        int map[512];
        memset(map, -1, sizeof map);
        int m = 0;
        for (int b = 0; b < 256; b++) {
            int key = cls[b] * 2 + in_set(f->bsets[s], b);
            if (map[key] < 0) map[key] = m++;
            cls[b] = (uint8_t)map[key];
        }
        n = m;
    }
    return n;
}

/* Adds state s and what its epsilon edges reach to bits; counts the
 * edges looked at in *work. */
static void closure(const nfa *f, uint64_t *bits, int s, int *stack, long *work) {
    int top = 0;
    if (bits[s >> 6] >> (s & 63) & 1) return;
    bits[s >> 6] |= 1ull << (s & 63);
    stack[top++] = s;
    while (top) {
        int x = stack[--top];
        for (int e = f->eps_head[x]; e >= 0; e = f->eps_next[e]) {
            int y = f->eps_to[e];
            ++*work;
            if (bits[y >> 6] >> (y & 63) & 1) continue;
            bits[y >> 6] |= 1ull << (y & 63);
            stack[top++] = y;
        }
    }
}

typedef struct subsets {
    int words, n, max;
    uint64_t *bits; /* n x words */
    int *slot;      /* open addressing: subset index or -1 */
    int n_slot;
} subsets;

static uint64_t hash_bits(const uint64_t *b, int words) {
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < words; k++) h = (h ^ b[k]) * 1099511628211ull;
    return h ^ h >> 29;
}

/* The index of subset b, added if new; -1 past max. */
static int subset_id(subsets *ss, const uint64_t *b) {
    size_t mask = (size_t)ss->n_slot - 1, k = hash_bits(b, ss->words) & mask;
    for (; ss->slot[k] >= 0; k = (k + 1) & mask)
        if (!memcmp(ss->bits + (size_t)ss->slot[k] * ss->words, b, sizeof *b * ss->words))
            return ss->slot[k];
    if (ss->n == ss->max) return -1;
    memcpy(ss->bits + (size_t)ss->n * ss->words, b, sizeof *b * ss->words);
    ss->slot[k] = ss->n;
    return ss->n++;
}

/* Keeps the states that reach an accepting one, renumbered in order;
 * false where the start is not among them. */
static bool prune(jr_dfa *d) {
    int n = d->n_states, c = d->n_cls;
    bool *live = di_calloc((size_t)n, sizeof *live);
    for (int s = 0; s < n; s++) live[s] = d->accept[s];
    for (bool grew = true; grew;) {
        grew = false;
        for (int s = n - 1; s >= 0; s--)
            for (int k = 0; !live[s] && k < c; k++) {
                uint16_t t = d->next[(size_t)s * c + k];
                if (t != JR_DEAD && live[t]) live[s] = grew = true;
            }
    }
    int *id = di_malloc(sizeof *id * (size_t)n), m = 0;
    for (int s = 0; s < n; s++) id[s] = live[s] ? m++ : -1;
    bool ok = live[0];
    for (int s = 0; s < n; s++) {
        if (!live[s]) continue;
        for (int k = 0; k < c; k++) {
            uint16_t t = d->next[(size_t)s * c + k];
            d->next[(size_t)id[s] * c + k] = t != JR_DEAD && live[t] ? (uint16_t)id[t] : JR_DEAD;
        }
        d->accept[id[s]] = d->accept[s];
    }
    d->n_states = m;
    free(id);
    free(live);
    return ok;
}

static jr_dfa *determinize(const nfa *f, int start, int accept, int max_states, const char **err) {
    jr_dfa *d = di_calloc(1, sizeof *d);
    d->n_cls = byte_classes(f, d->cls);
    int16_t *rep = d->rep;
    for (int k = 0; k < 256; k++) rep[k] = -1;
    for (int b = 255; b >= 1; b--) rep[d->cls[b]] = (int16_t)b;
    subsets ss = {.words = (f->n + 63) / 64, .max = max_states};
    ss.bits = di_calloc((size_t)max_states * ss.words, sizeof *ss.bits);
    for (ss.n_slot = 16; ss.n_slot < 2 * max_states;) ss.n_slot *= 2;
    ss.slot = di_malloc(sizeof *ss.slot * (size_t)ss.n_slot);
    memset(ss.slot, -1, sizeof *ss.slot * (size_t)ss.n_slot);
    d->next = di_malloc(sizeof *d->next * (size_t)max_states * d->n_cls);
    d->accept = di_calloc((size_t)max_states, 1);
    int *stack = di_malloc(sizeof *stack * (size_t)f->n);
    uint64_t *b = di_calloc((size_t)ss.words, sizeof *b);
    long work = 0;
    closure(f, b, start, stack, &work);
    subset_id(&ss, b);
    for (int s = 0; s < ss.n && !*err; s++) {
        const uint64_t *cur = ss.bits + (size_t)s * ss.words;
        d->accept[s] = cur[accept >> 6] >> (accept & 63) & 1;
        for (int k = 0; k < d->n_cls; k++) {
            memset(b, 0, sizeof *b * ss.words);
            work += ss.words;
            bool any = false;
            for (int w = 0; rep[k] >= 0 && w < ss.words; w++)
                for (uint64_t m = cur[w]; m; m &= m - 1) {
                    int x = w * 64 + __builtin_ctzll(m);
                    for (int e = f->byte_head[x]; e >= 0; e = f->byte_next[e], work++)
                        if (in_set(f->bsets[e], rep[k]))
                            closure(f, b, f->byte_to[e], stack, &work), any = true;
                }
            int t = any ? subset_id(&ss, b) : JR_DEAD;
            if (t < 0 || work > MAX_WORK) {
                *err = t < 0 ? "the pattern needs too many states" : "the pattern costs too much";
                break;
            }
            d->next[(size_t)s * d->n_cls + k] = (uint16_t)t;
        }
    }
    d->n_states = ss.n;
    free(b);
    free(stack);
    free(ss.bits);
    free(ss.slot);
    if (!*err && !prune(d)) *err = "the pattern matches no string";
    if (*err) jr_free(d), d = NULL;
    return d;
}

jr_dfa *jr_compile(const char *pattern, size_t len, int max_states, char *why, size_t cap) {
    if (max_states > JR_DEAD) max_states = JR_DEAD;
    if (len > MAX_PATTERN) {
        snprintf(why, cap, "the pattern is over %d bytes", MAX_PATTERN);
        return NULL;
    }
    parser ps = {.p = (const uint8_t *)pattern, .n = len};
    ps.nodes = di_malloc(sizeof *ps.nodes * MAX_TREE);
    ps.sets = di_malloc(sizeof *ps.sets * MAX_TREE);
    int root = parse_top(&ps);
    const char *err = ps.err;
    jr_dfa *d = NULL;
    if (!err) {
        nfa f = {0};
        int start = new_state(&f), accept = emit(&f, &ps, root, start);
        if (f.full || accept < 0)
            err = "the pattern is too large";
        else
            d = determinize(&f, start, accept, max_states, &err);
        nfa_free(&f);
    }
    if (err) snprintf(why, cap, "%s", err);
    free(ps.nodes);
    free(ps.sets);
    free(ps.cps);
    return d;
}

void jr_free(jr_dfa *d) {
    if (!d) return;
    free(d->next);
    free(d->accept);
    free(d);
}

int jr_step(const jr_dfa *d, int state, uint8_t b) {
    return d->next[(size_t)state * d->n_cls + d->cls[b]];
}

bool jr_accepts(const jr_dfa *d, int state) {
    return d->accept[state];
}

/* The bytes ranges [lo[k], hi[k]] in sequence from k on lead st somewhere
 * live (each byte class tried once per position). */
static bool seq_live(const jr_dfa *d, int st, const uint8_t *lo, const uint8_t *hi, int k, int n,
                     const jr_lengths *l, uint32_t len) {
    if (k == n) return !l || jr_lengths_ok(l, st, len);
    bool tried[256] = {0};
    for (int b = lo[k]; b <= hi[k]; b++) {
        if (tried[d->cls[b]]) continue;
        tried[d->cls[b]] = true;
        int t = jr_step(d, st, (uint8_t)b);
        if (jr_live(t) && seq_live(d, t, lo, hi, k + 1, n, l, len)) return true;
    }
    return false;
}

/* Splits [lo, hi] until its code points share a UTF-8 length and each
 * byte position spans a plain range (as RE2 turns ranges into UTF-8). */
bool jr_takes_any(const jr_dfa *d, int st, uint32_t lo, uint32_t hi, const jr_lengths *l,
                  uint32_t len) {
    if (lo == 0) lo = 1;
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return false;
    static const uint32_t ends[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= ends[i] && hi > ends[i])
            return jr_takes_any(d, st, lo, ends[i], l, len) ||
                   jr_takes_any(d, st, ends[i] + 1, hi, l, len);
    if (lo <= 0xDFFF && hi >= 0xD800) /* surrogates are no characters */
        return (lo < 0xD800 && jr_takes_any(d, st, lo, 0xD7FF, l, len)) ||
               (hi > 0xDFFF && jr_takes_any(d, st, 0xE000, hi, l, len));
    uint8_t a[4], b[4];
    int n = (int)utf8proc_encode_char((utf8proc_int32_t)lo, a);
    utf8proc_encode_char((utf8proc_int32_t)hi, b);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if (lo & m)
            return jr_takes_any(d, st, lo, lo | m, l, len) ||
                   jr_takes_any(d, st, (lo | m) + 1, hi, l, len);
        if ((hi & m) != m)
            return jr_takes_any(d, st, lo, (hi & ~m) - 1, l, len) ||
                   jr_takes_any(d, st, hi & ~m, hi, l, len);
    }
    return seq_live(d, st, a, b, 0, n, l, len);
}

int jr_states(const jr_dfa *d) {
    return d->n_states;
}

int jr_classes(const jr_dfa *d) {
    return d->n_cls;
}

int jr_class_byte(const jr_dfa *d, int k) {
    return d->rep[k];
}

int jr_step_class(const jr_dfa *d, int state, int k) {
    return d->next[(size_t)state * d->n_cls + k];
}

void jr_escape_literal(di_buf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = (uint8_t)s[i];
        if (ch < 0x20 || ch == 0x7f) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\x%02x", ch);
            di_buf_adds(b, esc);
            continue;
        }
        if (strchr("\\^$.|?*+()[]{}/-", ch)) di_buf_putc(b, '\\');
        di_buf_putc(b, (char)ch);
    }
}

/* ---- formats ---- */
#define DATE "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])"
#define TIME                                                                                       \
    "([01]\\d|2[0-3]):[0-5]\\d:([0-5]\\d|60)(\\.\\d{1,9})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)"
#define LABEL "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"

const char *jr_format(const char *name) {
    static const char *const formats[][2] = {
        {"date", "^" DATE "$"},
        {"time", "^" TIME "$"},
        {"date-time", "^" DATE "T" TIME "$"},
        {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
        {"email", "^[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*@" LABEL "(\\." LABEL ")+$"},
        {"ipv4",
         "^((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)$"},
        {"hostname", "^" LABEL "(\\." LABEL ")*$"},
        {"uri", "^[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]+$"},
    };
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        if (!strcmp(formats[i][0], name)) return formats[i][1];
    return NULL;
}
