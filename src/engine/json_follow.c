/* json_follow.c — the step of a state that follows a compiled JSON schema
 * (json_schema.c, json_internal.h) byte by byte.
 *
 * It keeps one frame per container open; object keys and enum values are
 * matched against all the candidates at once (a bit each), so properties
 * come in any order, each once. A string node's length range counts
 * characters (an escape is one, a surrogate pair's two escapes one) as the
 * core reads them; an array frame counts its items; a string's pattern DFA
 * steps over the value's bytes, escapes undone. */
#include <ctype.h>
#include <string.h>

#include "engine/json_internal.h"

void jg_init_schema(jg_state *s, const jg_schema *schema) {
    jg_init(s);
    s->schema = schema;
}

/* Some integer that starts with digits digits of magnitude mag (at most
 * 10^19), negative or not, lies in node n's range; with end, the integer as
 * it stands. A leading 0 stands alone (RFC 8259). */
static bool int_fits(const js_node *n, bool neg, int digits, uint64_t mag, bool end) {
    if (!digits) return !end && n->min < 0;
    __int128 lo = n->min, hi = n->max, m = mag, span = 1;
    for (int k = 0; k <= (end || !m ? 0 : 19); k++, m *= 10, span *= 10) {
        __int128 a = neg ? -(m + span - 1) : m, b = neg ? -m : m + span - 1;
        if (a <= hi && b >= lo) return true;
    }
    return false;
}

#define MAG_CAP 10000000000000000000ull /* 10^19: past any int64 */

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
    s->int_bounded = false;
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
        s->int_only = true;
        if (n->bounded && digit) {
            s->int_bounded = true, s->snode = (uint16_t)node;
            s->int_neg = c == '-';
            s->int_digits = c != '-';
            s->int_mag = c == '-' ? 0 : (uint64_t)(c - '0');
            if (!int_fits(n, s->int_neg, s->int_digits, s->int_mag, false)) return false;
        }
        /* fall through */
    case K_NUMBER:
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
static bool pattern_step(jg_state *s, const jg_core *before, uint8_t c, int *st, uint16_t *high) {
    const jr_dfa *d = jg_string_pattern(s);
    uint8_t b[4];
    int n = 0;
    switch (before->mode) {
    case M_STRING:
        if (!before->utf8 && c == '"') return jr_accepts(d, *st);
        if (!before->utf8 && c == '\\') /* an escape: some character must follow */
            return jr_takes_any(d, *st, 1, 0x10FFFF);
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
        if (!isxdigit(c)) break;
        int rest = 4 * (3 - before->sub);
        uint32_t v =
            (uint32_t)before->cp << 4 | (uint32_t)(isdigit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
        uint32_t lo = v << rest, hi = lo | ((1u << rest) - 1);
        uint32_t base = 0x10000 + ((uint32_t)(*high - 0xD800) << 10);
        if (before->low) { /* the low half: its pairs */
            if (lo > 0xDFFF || hi < 0xDC00) return false;
            uint32_t a = base + (lo > 0xDC00 ? lo - 0xDC00 : 0);
            if (rest) return jr_takes_any(d, *st, a, base + (hi < 0xDFFF ? hi : 0xDFFF) - 0xDC00);
            n = jr_utf8(a, b);
            break;
        }
        if (lo <= 0xDBFF && hi >= 0xD800) {
            uint32_t hl = lo > 0xD800 ? lo : 0xD800, hh = hi < 0xDBFF ? hi : 0xDBFF;
            bool pairs = jr_takes_any(d, *st, 0x10000 + ((hl - 0xD800) << 10),
                                      0x10000 + ((hh - 0xD800) << 10) + 0x3FF);
            if (!rest) return pairs && (*high = (uint16_t)v, true);
            if (pairs) return true;
        }
        if (rest) return jr_takes_any(d, *st, lo, hi);
        n = jr_utf8(v, b);
        break;
    }
    default:
        break;
    }
    for (int k = 0; k < n && jr_live(*st); k++) *st = jr_step(d, *st, b[k]);
    return jr_live(*st);
}

bool jg_schema_step(jg_state *s, uint8_t c) {
    const jg_schema *sc = s->schema;
    if (s->what == W_CORE) {
        jg_core before = s->c;
        int st = s->rstate;
        uint16_t high = s->rhigh;
        if (s->str_re && !pattern_step(s, &before, c, &st, &high)) return false;
        bool cut = s->int_only && (c == '.' || c == 'e' || c == 'E');
        uint64_t mag = s->int_mag;
        int digits = s->int_digits;
        if (s->int_bounded && before.mode == M_NUMBER && c >= '0' && c <= '9') {
            mag = mag >= MAG_CAP / 10 ? MAG_CAP : mag * 10 + (uint64_t)(c - '0');
            digits += digits < 255;
            if (!int_fits(&sc->nodes[s->snode], s->int_neg, digits, mag, false)) return false;
        }
        bool counted = false; /* a character of a string with a length range starts at c */
        if (s->str_limited && before.mode == M_STRING && (c & 0xC0) != 0x80) {
            const js_node *n = &sc->nodes[s->snode];
            if (c == '"' ? s->slen < n->lo : s->slen >= n->hi) return false;
            counted = c != '"';
        }
        if (!cut && jg_core_step(&s->c, c)) {
            s->slen += counted;
            s->rstate = (uint16_t)st, s->rhigh = high;
            s->int_mag = mag, s->int_digits = (uint8_t)digits;
            return s->c.mode == M_DONE ? value_done(s) : true;
        }
        s->c = before;
        if (before.depth || !jg_core_number_ends(&before)) return false;
        if (s->int_bounded &&
            !int_fits(&sc->nodes[s->snode], s->int_neg, s->int_digits, s->int_mag, true))
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
