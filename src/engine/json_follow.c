/* json_follow.c — the step of a state that follows a compiled JSON schema
 * (json_schema.c, json_internal.h) byte by byte.
 *
 * It keeps one frame per container open; object keys and enum values are
 * matched against all the candidates at once (a bit each), so properties
 * come in any order, each once. A string node's length range counts
 * characters (an escape is one, a surrogate pair's two escapes one) as the
 * core reads them; an array frame counts its items; a string's pattern DFA
 * steps over the value's bytes, escapes undone. */
#include <string.h>
#include <utf8proc.h>

#include "base/base.h"
#include "engine/json_internal.h"

void jg_init_schema(jg_state *s, const jg_schema *schema) {
    jg_init(s);
    s->schema = schema;
}

/* ---- numbers with a range ---- */
#define NUM_SIG  18  /* significant digits a number with a range may have (m < 10^18) */
#define NUM_FRAC 400 /* ... digits after its point (a bound's smallest: 10^-324) */

static int ndigits(uint64_t m) {
    int n = 1;
    for (; m >= 10; m /= 10) n++;
    return n;
}

/* m1 x 10^e1 against m2 x 10^e2 (each under 10^19): -1, 0 or 1. */
static int mag_cmp(uint64_t m1, int e1, uint64_t m2, int e2) {
    if (!m1 || !m2) return (m1 > 0) - (m2 > 0);
    int n1 = ndigits(m1), n2 = ndigits(m2);
    if (n1 + e1 != n2 + e2) return n1 + e1 < n2 + e2 ? -1 : 1;
    for (; n1 < n2; n1++) m1 *= 10;
    for (; n2 < n1; n2++) m2 *= 10;
    return (m1 > m2) - (m1 < m2);
}

static int dec_cmp(js_dec a, js_dec b) {
    bool an = a.neg && a.m, bn = b.neg && b.m;
    if (an != bn) return an ? -1 : 1;
    int c = mag_cmp(a.m, a.e, b.m, b.e);
    return an ? -c : c;
}

/* The magnitudes [a, b) (b NULL: no end; point: a alone), negated with
 * neg, hold a value in node n's [nlo, nhi]. A negative zero is never
 * written (-0 is 0, and no model should say it). */
static bool num_meets(const js_node *n, bool neg, js_dec a, const js_dec *b, bool point) {
    js_dec lo = a, hi = point ? a : b ? *b : a;
    bool lo_open = false, hi_open = !point, hi_inf = !point && !b, lo_inf = false;
    if (neg) { /* (-b, -a], and open at -0 */
        if (point && !a.m) return false;
        js_dec t = lo;
        lo = hi, hi = t;
        lo.neg = hi.neg = true;
        lo_open = hi_open, lo_inf = hi_inf, hi_open = !a.m, hi_inf = false;
    }
    if (n->has_nhi && !lo_inf) {
        int c = dec_cmp(lo, n->nhi);
        if (lo_open ? c >= 0 : c > 0) return false;
    }
    if (n->has_nlo && !hi_inf) {
        int c = dec_cmp(hi, n->nlo);
        if (hi_open ? c <= 0 : c < 0) return false;
    }
    return true;
}

/* ---- integers that are multiples ---- */
#define INT_LIM 999999999999999999LL /* the largest NUM_SIG digits write */

/* d as an integer, rounded up (up) or down, clamped to +-INT_LIM. */
static int64_t dec_int(js_dec d, bool up) {
    uint64_t mag = d.m;
    bool frac = false, big = false;
    for (int e = d.e; e > 0 && !big; e--) big = mag > (uint64_t)INT_LIM / 10, mag *= 10;
    for (int e = d.e; e < 0 && mag; e++) frac |= mag % 10 != 0, mag /= 10;
    if (big || mag > (uint64_t)INT_LIM) mag = (uint64_t)INT_LIM;
    int64_t v = d.neg ? -(int64_t)mag : (int64_t)mag;
    if (frac) v += d.neg ? (up ? 0 : -1) : (up ? 1 : 0); /* toward the rounding's side */
    return v;
}

/* A multiple of k lies in [lo, hi]. */
static bool multiple_in(int64_t lo, int64_t hi, uint64_t k) {
    if (lo > hi) return false;
    int64_t q = lo / (int64_t)k; /* toward zero: up for a negative lo */
    if (lo > 0 && lo % (int64_t)k) q++;
    return q * (int64_t)k <= hi;
}

/* num_fits for a node held to multiples of n->mult / 10^d (d = n->mdec):
 * in units of 10^-d the number is an integer N, written with at most d
 * digits after the point (none when d is 0), so N is a multiple of n->mult
 * in the range scaled alike. The number as it stands (end), or one that
 * more digits make: before the point each a decade of magnitudes, and
 * after the point (or a point still to come) the units they leave open. */
static bool mult_fits(const js_node *n, const jg_num *p, bool end) {
    int d = n->mdec, rest = d - p->frac; /* digits after the point still possible */
    if (rest < 0 || p->sig + rest > NUM_SIG) return false;
    js_dec nlo = n->nlo, nhi = n->nhi;
    nlo.e += d, nhi.e += d;
    int64_t lo = n->has_nlo ? dec_int(nlo, true) : -INT_LIM;
    int64_t hi = n->has_nhi ? dec_int(nhi, false) : INT_LIM;
    if (!p->whole) return !end && multiple_in(lo, hi < -1 ? hi : -1, n->mult); /* a sign */
    int64_t m = (int64_t)p->m, unit = 1;
    if (!m && !p->dot && !d) /* 0 (no digit may follow a leading 0) */
        return !p->neg && multiple_in(lo > 0 ? lo : 0, hi < 0 ? hi : 0, n->mult);
    for (int i = 0; i < rest; i++) unit *= 10; /* N = m * unit as it stands */
    if (end) {
        int64_t v = p->neg ? -m * unit : m * unit;
        return !(p->neg && !v) && multiple_in(lo > v ? lo : v, hi < v ? hi : v, n->mult);
    }
    /* more digits: k more before the point (none after a leading 0 or the
     * point), then up to `rest` after it */
    int kmax = p->dot || !m ? 0 : NUM_SIG - p->sig - rest;
    int64_t scale = unit;
    for (int k = 0; k <= kmax; k++, scale *= 10) {
        int64_t a = m * scale, b = (m + 1) * scale - 1;                /* magnitudes */
        int64_t va = p->neg ? -b : a, vb = p->neg ? (a ? -a : -1) : b; /* never -0 */
        if (multiple_in(lo > va ? lo : va, hi < vb ? hi : vb, n->mult)) return true;
    }
    return false;
}

/* Some number that starts with what p holds lies in node n's range; with
 * end, the number as it stands. More digits before the point multiply by
 * tens, any after it (or after a point still to come) add less than the
 * last digit's unit; a leading 0 stands alone (RFC 8259), and for an
 * integer is 0 itself. */
static bool num_fits(const js_node *n, const jg_num *p, bool end, bool integer) {
    if (n->mult) return mult_fits(n, p, end);
    js_dec zero = {0}, one = {.m = 1}, v = {.m = p->m, .e = -p->frac};
    js_dec next = {.m = p->m + 1, .e = -p->frac};
    if (!p->whole) return !end && num_meets(n, true, zero, NULL, false); /* a sign alone */
    if (end || (p->dot && p->sig >= NUM_SIG)) return num_meets(n, p->neg, v, NULL, true);
    if (p->dot) return num_meets(n, p->neg, v, &next, false);
    if (!p->m) return num_meets(n, p->neg, zero, &one, integer); /* 0, or 0.x */
    for (int k = 0; p->sig + k <= NUM_SIG; k++) {
        js_dec a = {.m = p->m, .e = k}, b = {.m = p->m + 1, .e = k};
        if (num_meets(n, p->neg, a, &b, p->sig == NUM_SIG)) return true;
    }
    return false;
}

/* p after byte c of the number (a digit or the point); false where it
 * cannot go on within the limits. */
static bool num_next(jg_num *p, uint8_t c) {
    if (c == '.') return p->sig < NUM_SIG && (p->dot = true);
    if (c < '0' || c > '9') return true;
    uint64_t m = p->m * 10 + (uint64_t)(c - '0');
    if (m && ++p->sig > NUM_SIG) return false;
    if (p->dot && ++p->frac > NUM_FRAC) return false;
    p->whole += !p->dot && p->whole < 255;
    p->m = m;
    return true;
}

/* The value below the top frame (or the whole one) is complete. */
static bool value_done(jg_state *s) {
    s->what = W_NONE;
    s->ws = 0;
    if (!s->depth) return s->done = true;
    jg_frame *f = &s->f[s->depth - 1];
    f->phase = s->schema->nodes[f->node].kind == K_ARRAY ? A_AFTER : O_AFTER;
    return true;
}

/* ---- object unions ---- */
static uint64_t all_bits(int n) {
    return n >= 64 ? ~0ull : (1ull << n) - 1;
}

/* The names the branches left can still take. */
static uint64_t union_names(const jg_schema *sc, const js_node *n, uint64_t alts) {
    uint64_t names = 0;
    for (uint64_t m = alts; m; m &= m - 1) names |= sc->masks[n->masks + __builtin_ctzll(m)];
    return names;
}

/* A branch left has every name it requires. */
static bool union_may_close(const jg_schema *sc, const js_node *n, uint64_t alts, uint64_t seen) {
    for (uint64_t m = alts; m; m &= m - 1)
        if (!(sc->masks[n->masks + n->n_branch + __builtin_ctzll(m)] & ~seen)) return true;
    return false;
}

static bool push(jg_state *s, int node, int phase) {
    if (s->depth == JG_SCHEMA_DEPTH) return false;
    s->f[s->depth++] = (jg_frame){.node = (uint16_t)node, .phase = (uint8_t)phase};
    return true;
}

/* The core automaton reads one value from c on. */
static bool core_value(jg_state *s, uint8_t c, int mode) {
    memset(&s->c, 0, sizeof s->c);
    s->c.mode = (uint8_t)mode;
    if (!jg_core_step(&s->c, c)) return false;
    s->what = W_CORE;
    return true;
}

/* A value of node starts with c. depth: unions passed through (a union can
 * reach itself through a $ref: bounded). */
static bool start_value(jg_state *s, int node, uint8_t c, int depth) {
    const jg_schema *sc = s->schema;
    const js_node *n = &sc->nodes[node];
    bool digit = (c == '-' && !n->nonneg) || (c >= '0' && c <= '9');
    s->int_only = false;
    s->num_bounded = false;
    s->str_limited = false;
    s->str_re = false;
    switch (n->kind) {
    case K_OBJECT:
        return c == '{' && push(s, node, O_FIRST);
    case K_OBJUNION:
        if (c != '{' || !push(s, node, O_FIRST)) return false;
        s->f[s->depth - 1].alts = all_bits(n->n_branch);
        return true;
    case K_ARRAY:
        return c == '[' && push(s, node, A_FIRST);
    case K_ANYOBJ:
        return c == '{' && core_value(s, c, M_VALUE);
    case K_STRING:
        if (c != '"' || !core_value(s, c, M_VALUE)) return false;
        s->str_limited = n->lo > 0 || n->hi != UINT32_MAX;
        s->str_re = n->re != 0;
        s->snode = (uint16_t)node;
        s->slen = 0;
        s->rstate = 0;
        return true;
    case K_INTEGER:
    case K_NUMBER:
        s->int_only = n->kind == K_INTEGER || (n->mult && !n->mdec);
        if (n->bounded && digit) {
            s->num_bounded = true, s->snode = (uint16_t)node;
            s->num = (jg_num){.neg = c == '-'};
            if (!num_next(&s->num, c) || !num_fits(n, &s->num, false, s->int_only)) return false;
        }
        return digit && core_value(s, c, M_VALUE);
    case K_BOOL:
        return (c == 't' || c == 'f') && core_value(s, c, M_VALUE);
    case K_NULL:
        return c == 'n' && core_value(s, c, M_VALUE);
    case K_ENUM: {
        uint64_t cand = 0;
        for (int i = 0; i < n->count; i++)
            if ((uint8_t)sc->texts[n->first + i].p[0] == c) cand |= 1ull << i;
        if (!cand) return false;
        s->cand = cand, s->kpos = 1, s->enode = (uint16_t)node, s->what = W_ENUM;
        return true;
    }
    case K_UNION:
        for (int i = 0; depth < 16 && i < n->count; i++) {
            bool set[256] = {0};
            js_first_bytes(sc, sc->alts[n->first + i], set, 0);
            if (set[c]) return start_value(s, sc->alts[n->first + i], c, depth + 1);
        }
        return false;
    default: /* K_ANY */
        return core_value(s, c, M_VALUE);
    }
}

/* Matches c against the candidates (keys of the top frame's object, or
 * the enum's values) at kpos: 1 it continues one, 0 one ended just before
 * it, -1 neither. */
static int match(jg_state *s, int first, uint8_t c, uint64_t *ended) {
    const js_text *t = s->schema->texts + first;
    uint64_t next = 0;
    *ended = 0;
    for (uint64_t m = s->cand; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        if (s->kpos < t[i].len)
            next |= (uint64_t)((uint8_t)t[i].p[s->kpos] == c) << i;
        else
            *ended |= 1ull << i;
    }
    if (next) {
        s->cand = next, s->kpos++;
        return 1;
    }
    return *ended ? 0 : -1;
}

/* An object union's value: where the branches' nodes differ, one taken by
 * its first byte, or the enum values of the branches left. */
static bool union_value_start(jg_state *s, jg_frame *f, uint8_t c) {
    const jg_schema *sc = s->schema;
    const js_node *n = &sc->nodes[f->node];
    int m = f->prop, v = sc->texts[n->first + m].node;
    int how = *union_how(sc, n, m);
    if (how == V_FIRST) {
        const js_node *u = &sc->nodes[v];
        for (int i = 0; i < u->count; i++) {
            int x = sc->alts[u->first + i];
            uint64_t in = union_with(sc, n, m, x) & f->alts;
            bool set[256] = {0};
            js_first_bytes(sc, x, set, 0);
            if (set[c] && in) return f->alts = in, start_value(s, x, c, 0);
        }
        return false;
    }
    if (!start_value(s, v, c, 0)) return false;
    if (how == V_ENUM) { /* only the values of branches left */
        uint64_t keep = 0;
        for (uint64_t k = s->cand; k; k &= k - 1)
            if (sc->texts[sc->nodes[v].first + __builtin_ctzll(k)].branches & f->alts)
                keep |= k & -k;
        s->cand = keep;
    }
    return s->what != W_ENUM || s->cand;
}

/* The pattern's DFA past what byte c (read by the core in state before)
 * adds to the string's value: a byte of its own, an escape's character
 * once whole (a surrogate pair's once both halves are), or the closing
 * quote (false where the value does not match); false where the DFA dies. */
static bool pattern_step(jg_state *s, const jg_core *before, uint8_t c, uint32_t len, int *st,
                         uint16_t *high) {
    const jr_dfa *d = jg_string_pattern(s);
    const jr_lengths *l = jg_string_lengths(s);
    uint8_t b[4];
    int n = 0;
    switch (before->mode) {
    case M_STRING:
        if (!before->utf8 && c == '"') return jr_accepts(d, *st);
        if (!before->utf8 && c == '\\') /* an escape: some character must follow */
            return jr_takes_any(d, *st, 1, 0x10FFFF, l, len);
        b[n++] = c;
        break;
    case M_ESC: {
        static const char esc[] = "\"\\/bfnrt", val[] = "\"\\/\b\f\n\r\t";
        const char *e = c ? strchr(esc, c) : NULL;
        if (e) b[n++] = (uint8_t)val[e - esc];
        break;
    }
    case M_UHEX: {
        /* the code points the digits so far leave open must hold one the
         * pattern takes: a high surrogate's, those of the pairs it starts */
        int h = di_hexval(c);
        if (h < 0) break;
        int rest = 4 * (3 - before->sub);
        uint32_t v = (uint32_t)before->cp << 4 | (uint32_t)h;
        uint32_t lo = v << rest, hi = lo | ((1u << rest) - 1);
        uint32_t base = 0x10000 + ((uint32_t)(*high - 0xD800) << 10);
        if (before->low) { /* the low half: its pairs */
            if (lo > 0xDFFF || hi < 0xDC00) return false;
            uint32_t a = base + (lo > 0xDC00 ? lo - 0xDC00 : 0);
            if (rest)
                return jr_takes_any(d, *st, a, base + (hi < 0xDFFF ? hi : 0xDFFF) - 0xDC00, l, len);
            n = (int)utf8proc_encode_char((utf8proc_int32_t)a, b);
            break;
        }
        if (lo <= 0xDBFF && hi >= 0xD800) {
            uint32_t hl = lo > 0xD800 ? lo : 0xD800, hh = hi < 0xDBFF ? hi : 0xDBFF;
            bool pairs = jr_takes_any(d, *st, 0x10000 + ((hl - 0xD800) << 10),
                                      0x10000 + ((hh - 0xD800) << 10) + 0x3FF, l, len);
            if (!rest) return pairs && (*high = (uint16_t)v, true);
            if (pairs) return true;
        }
        if (rest) return jr_takes_any(d, *st, lo, hi, l, len);
        n = (int)utf8proc_encode_char((utf8proc_int32_t)v, b);
        break;
    }
    default:
        break;
    }
    for (int k = 0; k < n && jr_live(*st); k++) *st = jr_step(d, *st, b[k]);
    return jr_live(*st) && (!n || !l || jr_lengths_ok(l, *st, len));
}

bool jg_schema_step(jg_state *s, uint8_t c) {
    const jg_schema *sc = s->schema;
    if (s->what == W_CORE) {
        jg_core before = s->c;
        /* an integer has no point; a number with a range, no exponent */
        bool cut =
            (s->int_only && c == '.') || ((s->int_only || s->num_bounded) && (c | 0x20) == 'e');
        jg_num num = s->num;
        if (s->num_bounded && before.mode == M_NUMBER && !cut &&
            (!num_next(&num, c) || !num_fits(&sc->nodes[s->snode], &num, false, s->int_only)))
            return false;
        bool counted = false; /* a character of a string with a length range starts at c */
        if (s->str_limited && before.mode == M_STRING && (c & 0xC0) != 0x80) {
            const js_node *n = &sc->nodes[s->snode];
            if (c == '"' ? s->slen < n->lo : s->slen >= n->hi) return false;
            counted = c != '"';
        }
        int st = s->rstate; /* the pattern's DFA, with the length this byte leaves */
        uint16_t high = s->rhigh;
        if (s->str_re && !pattern_step(s, &before, c, s->slen + counted, &st, &high)) return false;
        if (!cut && jg_core_step(&s->c, c)) {
            s->slen += counted;
            s->rstate = (uint16_t)st, s->rhigh = high;
            s->num = num;
            return s->c.mode == M_DONE ? value_done(s) : true;
        }
        s->c = before;
        if (before.depth || !jg_core_number_ends(&before)) return false;
        if (s->num_bounded && !num_fits(&sc->nodes[s->snode], &s->num, true, s->int_only))
            return false;
        value_done(s); /* the number ended before c: c is the frame's */
    } else if (s->what == W_ENUM) {
        uint64_t ended;
        int first = sc->nodes[s->enode].first, r = match(s, first, c, &ended);
        if (r) return r > 0;
        jg_frame *f = s->depth ? &s->f[s->depth - 1] : NULL;
        if (f && f->phase == O_VALUE && sc->nodes[f->node].kind == K_OBJUNION) {
            uint64_t in = ~0ull; /* a merged enum's value: its branches */
            const js_node *n = &sc->nodes[f->node];
            if (*union_how(sc, n, f->prop) == V_ENUM)
                for (in = 0; ended; ended &= ended - 1)
                    in |= sc->texts[first + __builtin_ctzll(ended)].branches;
            f->alts &= in;
        }
        value_done(s);
    } else if (s->what == W_KEY) {
        jg_frame *f = &s->f[s->depth - 1];
        const js_node *n = &sc->nodes[f->node];
        uint64_t ended = 0;
        if (c != '"') return match(s, n->first, c, &ended) > 0;
        for (uint64_t m = s->cand; m; m &= m - 1) /* the key that ends here */
            if (sc->texts[n->first + __builtin_ctzll(m)].len == s->kpos)
                ended |= 1ull << __builtin_ctzll(m);
        if (!ended) return false;
        f->prop = (uint8_t)__builtin_ctzll(ended);
        f->seen |= 1ull << f->prop;
        if (n->kind == K_OBJUNION) { /* the branches that have the key */
            uint64_t in = 0;
            for (int b = 0; b < n->n_branch; b++)
                in |= (uint64_t)(sc->masks[n->masks + b] >> f->prop & 1) << b;
            f->alts &= in;
        }
        f->phase = O_COLON;
        s->what = W_NONE;
        s->ws = 0;
        return true;
    }
    if (s->done) return false;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return ++s->ws <= JG_MAX_WS;
    s->ws = 0;
    if (!s->depth) return start_value(s, sc->root, c, 0);
    jg_frame *f = &s->f[s->depth - 1];
    const js_node *n = &sc->nodes[f->node];
    bool onion = n->kind == K_OBJUNION;
    uint64_t left = (onion ? union_names(sc, n, f->alts) : all_bits(n->count)) & ~f->seen;
    switch (f->phase) {
    case O_FIRST:
    case O_AFTER:
        if (c == '}') {
            if (onion ? !union_may_close(sc, n, f->alts, f->seen) : (n->required & ~f->seen))
                return false;
            s->depth--;
            return value_done(s);
        }
        if (f->phase == O_AFTER) return c == ',' && left && (f->phase = O_NEXT, true);
        /* fall through */
    case O_NEXT:
        if (c != '"' || !left) return false;
        s->cand = left, s->kpos = 0, s->what = W_KEY;
        return true;
    case O_COLON:
        return c == ':' && (f->phase = O_VALUE, true);
    case O_VALUE:
        if (onion) return union_value_start(s, f, c);
        return start_value(s, sc->texts[n->first + f->prop].node, c, 0);
    case A_FIRST:
        if (c == ']') {
            if (n->lo > 0) return false;
            s->depth--;
            return value_done(s);
        }
        /* fall through */
    case A_VALUE:
        if (f->seen >= n->hi || !start_value(s, n->items, c, 0)) return false;
        f->seen++;
        return true;
    case A_AFTER:
        if (c == ',') return f->seen < n->hi && (f->phase = A_VALUE, true);
        if (c != ']' || f->seen < n->lo) return false;
        s->depth--;
        return value_done(s);
    }
    return false;
}

uint32_t jg_string_room(const jg_state *s) {
    if (!s->schema || s->what != W_CORE || !s->str_limited) return UINT32_MAX;
    return s->schema->nodes[s->snode].hi - s->slen;
}

const jr_dfa *jg_string_pattern(const jg_state *s) {
    if (!s->schema || s->what != W_CORE || !s->str_re) return NULL;
    return s->schema->res[s->schema->nodes[s->snode].re - 1];
}

const jr_lengths *jg_string_lengths(const jg_state *s) {
    if (!s->schema || s->what != W_CORE || !s->str_re) return NULL;
    return s->schema->lens[s->schema->nodes[s->snode].re - 1];
}
