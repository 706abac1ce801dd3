/* grammar.c — compiles GBNF text (grammar.h) to byte-level rules
 * (grammar_internal.h).
 *
 * A literal becomes one element a byte; a character class one byte set
 * for its one-byte characters and, for the others, a rule with one
 * alternative per run of UTF-8 byte ranges; a group a rule of its own;
 * x* the rule R ::= x R | (empty), x? R ::= x | (empty), x{m,n} m copies
 * of x then a chain of n - m nested optionals (each R_k ::= x R_k-1 |
 * (empty)), so that no repetition is ambiguous and every call to R sits
 * last in its alternative (the matcher returns from it straight to the
 * caller). Then the checks: every rule used is defined, and root is; the
 * analyses of grammar_check.c: every rule reachable from root can be
 * completed, none can begin with itself. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>
#include <xxhash.h>

#include "base/base.h"
#include "engine/grammar_internal.h"

typedef struct seqv {
    gr_elem *e;
    int n, cap;
} seqv;

typedef struct brule {
    const char *name; /* NULL for a rule the compiler made */
    int len, owner;   /* owner: the named rule it was made for */
    bool defined, used;
    size_t used_at; /* where first used (for a message) */
    seqv *alts;
    int n_alts, cap_alts;
} brule;

typedef struct parser {
    const char *p;
    size_t n, i;
    brule *rules;
    int n_rules, cap_rules;
    uint64_t (*sets)[4];
    int n_sets, cap_sets;
    int *set_hash; /* open addressing: set + 1, 0 empty */
    int hash_cap;
    int *name_hash; /* the named rules, the same way */
    int name_cap, n_named;
    long total; /* elements so far */
    int cur;    /* the named rule being defined */
    int any;    /* the rule of the dot, once made */
    char *why;
    size_t cap;
    bool failed;
} parser;

/* The grammar's fault, at byte at: "line N: ..." into why. */
__attribute__((format(printf, 3, 4))) static int fail_at(parser *ps, size_t at, const char *fmt,
                                                         ...) {
    if (ps->failed) return -1;
    ps->failed = true;
    int line = 1;
    for (size_t k = 0; k < at && k < ps->n; k++) line += ps->p[k] == '\n';
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ps->why, ps->cap, "line %d: %s", line, msg);
    return -1;
}
#define FAIL(ps, ...) fail_at(ps, (ps)->i, __VA_ARGS__)

static int too_large(parser *ps) {
    return FAIL(ps, "the grammar is too large (over %d elements once repetitions are expanded)",
                GR_MAX_ELEMS);
}

/* ---- rules, sets, elements ------------------------------------------------ */
static int new_rule(parser *ps, const char *name, int len) {
    if (ps->n_rules == ps->cap_rules) {
        ps->cap_rules = ps->cap_rules ? 2 * ps->cap_rules : 32;
        ps->rules = di_realloc(ps->rules, sizeof *ps->rules * (size_t)ps->cap_rules);
    }
    brule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name, r->len = len, r->owner = name ? ps->n_rules : ps->cur;
    return ps->n_rules++;
}

static uint32_t name_key(const char *name, int len) {
    return (uint32_t)XXH3_64bits(name, (size_t)len);
}

/* The rule named so (made where new). */
static int named_rule(parser *ps, const char *name, int len) {
    if (2 * (ps->n_named + 1) > ps->name_cap) {
        free(ps->name_hash);
        ps->name_cap = ps->name_cap ? 2 * ps->name_cap : 64;
        ps->name_hash = di_calloc((size_t)ps->name_cap, sizeof(int));
        for (int r = 0; r < ps->n_rules; r++) {
            if (!ps->rules[r].name) continue;
            uint32_t h = name_key(ps->rules[r].name, ps->rules[r].len);
            while (ps->name_hash[h & (uint32_t)(ps->name_cap - 1)]) h++;
            ps->name_hash[h & (uint32_t)(ps->name_cap - 1)] = r + 1;
        }
    }
    uint32_t h = name_key(name, len);
    for (int at; (at = ps->name_hash[h & (uint32_t)(ps->name_cap - 1)]); h++)
        if (ps->rules[at - 1].len == len && !memcmp(ps->rules[at - 1].name, name, (size_t)len))
            return at - 1;
    int r = new_rule(ps, name, len);
    ps->name_hash[h & (uint32_t)(ps->name_cap - 1)] = r + 1;
    ps->n_named++;
    return r;
}

/* Appends an element (arg -1: its set could not be made; failed). */
static int push(parser *ps, seqv *s, int type, int arg) {
    if (arg < 0) return -1;
    if (++ps->total > GR_MAX_ELEMS) return too_large(ps);
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->e = di_realloc(s->e, sizeof *s->e * (size_t)s->cap);
    }
    s->e[s->n++] = (gr_elem){.type = type, .arg = arg};
    return 0;
}

/* Adds s as an alternative of rule r (taking its elements; its end is one
 * more, counted here and checked at the next push or at the end). */
static void add_alt(parser *ps, int r, seqv *s) {
    brule *b = &ps->rules[r];
    ps->total++;
    if (b->n_alts == b->cap_alts) {
        b->cap_alts = b->cap_alts ? 2 * b->cap_alts : 4;
        b->alts = di_realloc(b->alts, sizeof *b->alts * (size_t)b->cap_alts);
    }
    b->alts[b->n_alts++] = *s;
    memset(s, 0, sizeof *s);
}

static uint32_t set_hash(const uint64_t s[4]) {
    uint64_t h = s[0] * 0x9E3779B97F4A7C15ull ^ s[1] * 0xC2B2AE3D27D4EB4Full ^
                 s[2] * 0x165667B19E3779F9ull ^ s[3] * 0x27D4EB2F165667C5ull;
    return (uint32_t)(h >> 32);
}

/* The index of byte set s (each set stored once); -1 (failed) past
 * GR_MAX_SETS. */
static int set_id(parser *ps, const uint64_t s[4]) {
    if (2 * (ps->n_sets + 1) > ps->hash_cap) {
        free(ps->set_hash);
        ps->hash_cap = ps->hash_cap ? 2 * ps->hash_cap : 256;
        ps->set_hash = di_calloc((size_t)ps->hash_cap, sizeof(int));
        for (int k = 0; k < ps->n_sets; k++) {
            uint32_t h = set_hash(ps->sets[k]) & (uint32_t)(ps->hash_cap - 1);
            while (ps->set_hash[h]) h = (h + 1) & (uint32_t)(ps->hash_cap - 1);
            ps->set_hash[h] = k + 1;
        }
    }
    uint32_t h = set_hash(s) & (uint32_t)(ps->hash_cap - 1);
    for (; ps->set_hash[h]; h = (h + 1) & (uint32_t)(ps->hash_cap - 1))
        if (!memcmp(ps->sets[ps->set_hash[h] - 1], s, sizeof(uint64_t[4])))
            return ps->set_hash[h] - 1;
    if (ps->n_sets == GR_MAX_SETS)
        return FAIL(ps, "over %d distinct byte sets (character classes' pieces)", GR_MAX_SETS);
    if (ps->n_sets == ps->cap_sets) {
        ps->cap_sets = ps->cap_sets ? 2 * ps->cap_sets : 64;
        ps->sets = di_realloc(ps->sets, sizeof *ps->sets * (size_t)ps->cap_sets);
    }
    memcpy(ps->sets[ps->n_sets], s, sizeof(uint64_t[4]));
    ps->set_hash[h] = ps->n_sets + 1;
    return ps->n_sets++;
}

static int push_range(parser *ps, seqv *s, int lo, int hi) {
    uint64_t set[4] = {0};
    for (int b = lo; b <= hi; b++) set[b >> 6] |= 1ull << (b & 63);
    return push(ps, s, GE_SET, set_id(ps, set));
}

/* ---- character classes ------------------------------------------------------ */
typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;

typedef struct ranges {
    cp_range *r;
    int n, cap;
} ranges;

static void add_cp_range(ranges *rs, uint32_t lo, uint32_t hi) {
    if (rs->n == rs->cap) {
        rs->cap = rs->cap ? 2 * rs->cap : 16;
        rs->r = di_realloc(rs->r, sizeof *rs->r * (size_t)rs->cap);
    }
    rs->r[rs->n++] = (cp_range){lo, hi};
}

static int cmp_range(const void *a, const void *b) {
    const cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorted, merged, without NUL and the surrogates; complemented if negate. */
static void normalize(ranges *rs, bool negate) {
    qsort(rs->r, (size_t)rs->n, sizeof *rs->r, cmp_range);
    int m = 0;
    for (int k = 0; k < rs->n; k++) {
        if (m && rs->r[k].lo <= rs->r[m - 1].hi + 1) {
            if (rs->r[k].hi > rs->r[m - 1].hi) rs->r[m - 1].hi = rs->r[k].hi;
        } else
            rs->r[m++] = rs->r[k];
    }
    rs->n = m;
    ranges out = {0};
    if (negate) {
        uint32_t next = 0;
        for (int k = 0; k < rs->n; k++) {
            if (rs->r[k].lo > next) add_cp_range(&out, next, rs->r[k].lo - 1);
            next = rs->r[k].hi + 1;
        }
        if (next <= 0x10FFFF) add_cp_range(&out, next, 0x10FFFF);
    } else
        for (int k = 0; k < rs->n; k++) add_cp_range(&out, rs->r[k].lo, rs->r[k].hi);
    free(rs->r);
    *rs = (ranges){0};
    for (int k = 0; k < out.n; k++) { /* cut out NUL and the surrogates */
        uint32_t lo = out.r[k].lo ? out.r[k].lo : 1, hi = out.r[k].hi;
        if (lo > hi) continue;
        if (hi < 0xD800 || lo > 0xDFFF) {
            add_cp_range(rs, lo, hi);
            continue;
        }
        if (lo < 0xD800) add_cp_range(rs, lo, 0xD7FF);
        if (hi > 0xDFFF) add_cp_range(rs, 0xE000, hi);
    }
    free(out.r);
}

static int utf8_len(uint32_t cp) {
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

/* Adds to rule r the alternatives (runs of byte ranges) of the code
 * points lo..hi, which all encode in the same number of bytes: split
 * until each is a product of ranges, byte by byte. */
static int utf8_alts(parser *ps, int r, uint32_t lo, uint32_t hi) {
    int n = utf8_len(lo);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) return utf8_alts(ps, r, lo, lo | m) || utf8_alts(ps, r, (lo | m) + 1, hi);
            if ((hi & m) != m)
                return utf8_alts(ps, r, lo, (hi & ~m) - 1) || utf8_alts(ps, r, hi & ~m, hi);
        }
    }
    uint8_t a[4], b[4];
    utf8proc_encode_char((utf8proc_int32_t)lo, a);
    utf8proc_encode_char((utf8proc_int32_t)hi, b);
    seqv s = {0};
    for (int k = 0; k < n; k++)
        if (push_range(ps, &s, a[k], b[k])) return free(s.e), -1;
    add_alt(ps, r, &s);
    return 0;
}

/* Appends to s what matches one character of rs (normalized): one byte
 * set where they are all one byte, else a call to a rule of them. */
static int push_chars(parser *ps, seqv *s, const ranges *rs) {
    uint64_t one[4] = {0};
    bool multi = false;
    for (int k = 0; k < rs->n; k++) {
        for (uint32_t c = rs->r[k].lo; c <= rs->r[k].hi && c < 0x80; c++)
            one[c >> 6] |= 1ull << (c & 63);
        multi |= rs->r[k].hi >= 0x80;
    }
    if (!multi) return push(ps, s, GE_SET, set_id(ps, one));
    int r = new_rule(ps, NULL, 0);
    if (one[0] | one[1]) {
        seqv a = {0};
        if (push(ps, &a, GE_SET, set_id(ps, one))) return free(a.e), -1;
        add_alt(ps, r, &a);
    }
    static const uint32_t bounds[][2] = {{0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, 0x10FFFF}};
    for (int k = 0; k < rs->n; k++)
        for (int b = 0; b < 3; b++) {
            uint32_t lo = rs->r[k].lo > bounds[b][0] ? rs->r[k].lo : bounds[b][0];
            uint32_t hi = rs->r[k].hi < bounds[b][1] ? rs->r[k].hi : bounds[b][1];
            if (lo <= hi && utf8_alts(ps, r, lo, hi)) return -1;
        }
    return push(ps, s, GE_REF, r);
}

/* ---- the text ----------------------------------------------------------------- */
static bool at_end(const parser *ps) {
    return ps->i >= ps->n;
}

static void skip_ws(parser *ps) {
    while (!at_end(ps)) {
        char c = ps->p[ps->i];
        if (c == '#')
            while (!at_end(ps) && ps->p[ps->i] != '\n') ps->i++;
        else if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
            ps->i++;
        else
            break;
    }
}

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
}

static size_t name_len(const parser *ps, size_t at) {
    size_t k = at;
    while (k < ps->n && name_char(ps->p[k])) k++;
    return k - at;
}

/* Where a rule's definition that starts here (a name, then ::=) goes on
 * after its ::=, or 0. */
static size_t rule_start(const parser *ps) {
    size_t k = ps->i + name_len(ps, ps->i);
    if (k == ps->i) return 0;
    while (k < ps->n && (ps->p[k] == ' ' || ps->p[k] == '\t')) k++;
    return ps->n - k >= 3 && !memcmp(ps->p + k, "::=", 3) ? k + 3 : 0;
}

/* One character of a literal or a class (an escape undone) into *cp. */
static int read_char(parser *ps, uint32_t *cp) {
    const uint8_t *s = (const uint8_t *)ps->p + ps->i;
    size_t left = ps->n - ps->i;
    if (s[0] != '\\') {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate(s, (utf8proc_ssize_t)left, &c);
        if (k <= 0) return FAIL(ps, "invalid UTF-8");
        ps->i += (size_t)k, *cp = (uint32_t)c;
        return 0;
    }
    if (left < 2) return FAIL(ps, "an escape at the end of the grammar");
    char e = (char)s[1];
    ps->i += 2;
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; k++) {
            int h = ps->i < ps->n ? di_hexval(ps->p[ps->i]) : -1;
            if (h < 0) return FAIL(ps, "\\%c needs %d hex digits", e, digits);
            v = v * 16 + (uint32_t)h, ps->i++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return FAIL(ps, "an escape that is no Unicode scalar value");
        *cp = v;
        return 0;
    }
    switch (e) {
    case 'n':
        *cp = '\n';
        return 0;
    case 'r':
        *cp = '\r';
        return 0;
    case 't':
        *cp = '\t';
        return 0;
    case 'f':
        *cp = '\f';
        return 0;
    case 'v':
        *cp = '\v';
        return 0;
    case '0':
        *cp = 0;
        return 0;
    default:
        if (e > ' ' && e < 0x7F && !(e >= 'a' && e <= 'z') && !(e >= 'A' && e <= 'Z') &&
            !(e >= '0' && e <= '9')) {
            *cp = (uint32_t)e; /* \\ \" \] \- \[ \^ \/ ... */
            return 0;
        }
        ps->i--;
        return FAIL(ps, "unknown escape");
    }
}

static int literal(parser *ps, seqv *s) {
    char q = ps->p[ps->i++];
    while (!at_end(ps) && ps->p[ps->i] != q) {
        if (ps->p[ps->i] == '\n') break;
        uint32_t cp;
        if (read_char(ps, &cp)) return -1;
        if (!cp) return FAIL(ps, "NUL is not a character a grammar can match");
        uint8_t b[4];
        int k = (int)utf8proc_encode_char((utf8proc_int32_t)cp, b);
        for (int j = 0; j < k; j++)
            if (push_range(ps, s, b[j], b[j])) return -1;
    }
    if (at_end(ps) || ps->p[ps->i] != q) return FAIL(ps, "a string literal is not closed");
    ps->i++;
    return 0;
}

static int char_class(parser *ps, seqv *s) {
    size_t open = ps->i++;
    bool negate = !at_end(ps) && ps->p[ps->i] == '^';
    if (negate) ps->i++;
    ranges rs = {0};
    while (!at_end(ps) && ps->p[ps->i] != ']') {
        uint32_t lo, hi;
        if (read_char(ps, &lo)) return free(rs.r), -1;
        hi = lo;
        if (ps->n - ps->i >= 2 && ps->p[ps->i] == '-' && ps->p[ps->i + 1] != ']') {
            ps->i++;
            if (read_char(ps, &hi)) return free(rs.r), -1;
            if (hi < lo) return free(rs.r), FAIL(ps, "a class range runs backwards");
        }
        add_cp_range(&rs, lo, hi);
    }
    if (at_end(ps)) return free(rs.r), fail_at(ps, open, "a character class is not closed");
    ps->i++;
    normalize(&rs, negate);
    int rc = rs.n ? push_chars(ps, s, &rs) : FAIL(ps, "a character class matches nothing");
    free(rs.r);
    return rc;
}

static int any_char(parser *ps, seqv *s) {
    ps->i++;
    if (ps->any >= 0) return push(ps, s, GE_REF, ps->any);
    ranges rs = {0};
    add_cp_range(&rs, 1, 0x10FFFF);
    normalize(&rs, false);
    int saved = ps->cur, rc;
    ps->cur = -1; /* shared by every rule */
    rc = push_chars(ps, s, &rs);
    ps->cur = saved;
    if (!rc) ps->any = s->e[s->n - 1].arg;
    free(rs.r);
    return rc;
}

/* ---- repetitions -------------------------------------------------------------- */
/* R ::= x R | (empty) */
static int star(parser *ps, gr_elem x) {
    int r = new_rule(ps, NULL, 0);
    seqv a = {0}, b = {0};
    if (push(ps, &a, x.type, x.arg) || push(ps, &a, GE_REF, r)) return free(a.e), -1;
    add_alt(ps, r, &a);
    add_alt(ps, r, &b);
    return r;
}

/* R_k ::= x R_k-1 | (empty), R_1 ::= x | (empty): up to k more of x */
static int up_to(parser *ps, gr_elem x, long k) {
    int prev = -1;
    for (long j = 1; j <= k; j++) {
        int r = new_rule(ps, NULL, 0);
        seqv a = {0}, b = {0};
        if (push(ps, &a, x.type, x.arg) || (prev >= 0 && push(ps, &a, GE_REF, prev)))
            return free(a.e), -1;
        add_alt(ps, r, &a);
        add_alt(ps, r, &b);
        prev = r;
    }
    return prev;
}

static long read_count(parser *ps) {
    long v = -1;
    while (!at_end(ps) && ps->p[ps->i] >= '0' && ps->p[ps->i] <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (ps->p[ps->i++] - '0');
        if (v > GR_MAX_REPEAT) return -2;
    }
    return v;
}

/* The repetition at ps->i of s's elements from first on. */
static int repeat(parser *ps, seqv *s, int first) {
    char op = ps->p[ps->i];
    size_t at = ps->i++;
    long lo = op == '+', hi = op == '?' ? 1 : -1; /* -1: no most */
    if (op == '{') {
        skip_ws(ps);
        lo = read_count(ps);
        skip_ws(ps);
        bool comma = !at_end(ps) && ps->p[ps->i] == ',';
        if (comma) {
            ps->i++, skip_ws(ps);
            hi = read_count(ps);
            skip_ws(ps);
        } else
            hi = lo;
        if (lo == -2 || hi == -2)
            return fail_at(ps, at, "a repetition count over %d", GR_MAX_REPEAT);
        if (lo < 0) lo = 0;
        if (at_end(ps) || ps->p[ps->i] != '}' || (!comma && hi < 0))
            return fail_at(ps, at, "a malformed {m,n} repetition");
        ps->i++;
        if (hi >= 0 && hi < lo) return fail_at(ps, at, "a {m,n} repetition with n < m");
    }
    if (s->n == first) return fail_at(ps, at, "a repetition of nothing");
    gr_elem x = s->e[first];
    if (s->n - first > 1) { /* a literal of several bytes: one rule */
        int r = new_rule(ps, NULL, 0);
        seqv a = {0};
        for (int k = first; k < s->n; k++) push(ps, &a, s->e[k].type, s->e[k].arg);
        add_alt(ps, r, &a);
        x = (gr_elem){.type = GE_REF, .arg = r};
    }
    s->n = first;
    for (long k = 0; k < lo; k++)
        if (push(ps, s, x.type, x.arg)) return -1;
    int tail = hi < 0 ? star(ps, x) : hi > lo ? up_to(ps, x, hi - lo) : -2;
    if (tail == -1) return -1;
    return tail >= 0 ? push(ps, s, GE_REF, tail) : 0;
}

/* ---- rules -------------------------------------------------------------------- */
static int alternates(parser *ps, int r, int depth);

static int sequence(parser *ps, seqv *s, int depth) {
    for (;;) {
        skip_ws(ps);
        if (at_end(ps)) return 0;
        char c = ps->p[ps->i];
        if (c == '|' || c == ')') return 0;
        if (rule_start(ps)) return 0;
        int first = s->n;
        size_t at = ps->i;
        if (c == '"' || c == '\'') {
            if (literal(ps, s)) return -1;
        } else if (c == '[') {
            if (char_class(ps, s)) return -1;
        } else if (c == '.') {
            if (any_char(ps, s)) return -1;
        } else if (c == '(') {
            if (depth > 64) return FAIL(ps, "groups nested too deep");
            ps->i++;
            int r = new_rule(ps, NULL, 0);
            if (alternates(ps, r, depth + 1)) return -1;
            if (at_end(ps) || ps->p[ps->i] != ')') return fail_at(ps, at, "a group is not closed");
            ps->i++;
            if (push(ps, s, GE_REF, r)) return -1;
        } else if (name_char(c)) {
            size_t k = name_len(ps, ps->i);
            int r = named_rule(ps, ps->p + ps->i, (int)k);
            if (!ps->rules[r].used) ps->rules[r].used = true, ps->rules[r].used_at = ps->i;
            ps->i += k;
            if (push(ps, s, GE_REF, r)) return -1;
        } else if (c == '<')
            return FAIL(ps, "token references (<...>) are not supported");
        else
            return fail_at(ps, at, "unexpected '%c'", c);
        for (;;) {
            skip_ws(ps);
            if (at_end(ps) || !strchr("*+?{", ps->p[ps->i])) break;
            if (repeat(ps, s, first)) return -1;
        }
    }
}

static int alternates(parser *ps, int r, int depth) {
    for (;;) {
        seqv s = {0};
        if (sequence(ps, &s, depth)) return free(s.e), -1;
        add_alt(ps, r, &s);
        skip_ws(ps);
        if (at_end(ps) || ps->p[ps->i] != '|') return 0;
        ps->i++;
    }
}

static int definitions(parser *ps) {
    for (skip_ws(ps); !at_end(ps); skip_ws(ps)) {
        if (!rule_start(ps)) return FAIL(ps, "expected a rule (name ::= ...)");
        size_t k = name_len(ps, ps->i);
        int r = named_rule(ps, ps->p + ps->i, (int)k);
        if (ps->rules[r].defined)
            return FAIL(ps, "rule '%.*s' is defined twice", (int)k, ps->p + ps->i);
        ps->rules[r].defined = true;
        ps->cur = r;
        ps->i = rule_start(ps);
        if (alternates(ps, r, 0)) return -1;
        if (!at_end(ps) && ps->p[ps->i] == ')') return FAIL(ps, "unexpected ')'");
    }
    return 0;
}

/* ---- the compiled form -------------------------------------------------------- */
static void rule_label(const parser *ps, int r, char *out, size_t cap) {
    int o = ps->rules[r].owner;
    if (o < 0)
        snprintf(out, cap, "(the dot)");
    else
        snprintf(out, cap, "%.*s", ps->rules[o].len, ps->rules[o].name);
}

static void flatten(const parser *ps, gr_grammar *g) {
    int n_alts = 0, n_el = 0;
    for (int r = 0; r < ps->n_rules; r++) {
        n_alts += ps->rules[r].n_alts;
        for (int a = 0; a < ps->rules[r].n_alts; a++) n_el += ps->rules[r].alts[a].n + 1;
    }
    g->n_rules = ps->n_rules;
    g->rule_alt = di_malloc(sizeof(int32_t) * (size_t)(ps->n_rules + 1));
    g->alt_start = di_malloc(sizeof(int32_t) * (size_t)(n_alts ? n_alts : 1));
    g->el = di_malloc(sizeof(gr_elem) * (size_t)(n_el ? n_el : 1));
    int a_at = 0, e_at = 0;
    for (int r = 0; r < ps->n_rules; r++) {
        g->rule_alt[r] = a_at;
        for (int a = 0; a < ps->rules[r].n_alts; a++) {
            const seqv *s = &ps->rules[r].alts[a];
            g->alt_start[a_at++] = e_at;
            if (s->n) memcpy(g->el + e_at, s->e, sizeof(gr_elem) * (size_t)s->n);
            e_at += s->n;
            g->el[e_at++] = (gr_elem){.type = GE_END};
        }
    }
    g->rule_alt[ps->n_rules] = a_at;
    g->n_el = n_el;
}

static void parser_free(parser *ps) {
    for (int r = 0; r < ps->n_rules; r++) {
        for (int a = 0; a < ps->rules[r].n_alts; a++) free(ps->rules[r].alts[a].e);
        free(ps->rules[r].alts);
    }
    free(ps->rules);
    free(ps->sets);
    free(ps->set_hash);
    free(ps->name_hash);
}

gr_grammar *gr_compile(const char *text, size_t len, char *why, size_t cap) {
    char scratch[8];
    parser ps = {.p = text,
                 .n = len,
                 .cur = -1,
                 .any = -1,
                 .why = why ? why : scratch,
                 .cap = why ? cap : sizeof scratch};
    gr_grammar *g = NULL;
    if (definitions(&ps) || (ps.total > GR_MAX_ELEMS && too_large(&ps))) goto out;
    int root = -1;
    for (int r = 0; r < ps.n_rules; r++) {
        brule *b = &ps.rules[r];
        if (b->name && b->used && !b->defined) {
            fail_at(&ps, b->used_at, "rule '%.*s' is used and not defined", b->len, b->name);
            goto out;
        }
        if (b->name && b->len == 4 && !memcmp(b->name, "root", 4)) root = r;
    }
    if (root < 0) {
        snprintf(ps.why, ps.cap, "no rule 'root' (the rule the text matches)");
        goto out;
    }
    g = di_calloc(1, sizeof *g);
    g->root = root;
    flatten(&ps, g);
    bool left = false;
    int culprit = gr_check(g, &left);
    if (culprit >= 0) {
        char name[80];
        rule_label(&ps, culprit, name, sizeof name);
        if (left)
            snprintf(ps.why, ps.cap,
                     "rule '%s' is left-recursive (it can begin with itself, perhaps through a "
                     "repetition of something that can be empty)",
                     name);
        else
            snprintf(ps.why, ps.cap, "rule '%s' can never be completed (it always needs itself)",
                     name);
        gr_free(g);
        g = NULL;
    } else
        gr_byte_classes(g, ps.sets, ps.n_sets);
out:
    parser_free(&ps);
    return g;
}

void gr_free(gr_grammar *g) {
    if (!g) return;
    free(g->rule_alt);
    free(g->alt_start);
    free(g->el);
    free(g->set_has);
    free(g);
}
