/* json_schema.c — JSON schemas for constrained decoding (json_grammar.h):
 * the compiler from a schema's text to a graph of nodes (json_internal.h;
 * json_follow.c steps a state along one).
 *
 * The graph: an object node lists its properties (name, node, required),
 * an array node its items' node, an enum node its values' compact JSON
 * texts, a union its branches, which start with different bytes so that
 * the first byte picks one; its object branches are one object union
 * (the names any of them has, each key narrowing the branches to those
 * that have it, an enum value or a value's first byte to those that take
 * it, closing once a branch left has what it requires). Strings, numbers,
 * integers, booleans and null are leaves read by the core automaton, and
 * so is a free value (a part the compiler cannot hold: any JSON there). A
 * $ref is a node shared (recursion included). A string node's pattern (or
 * the format that stands for one) is compiled to a DFA (json_regex.h). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/json_internal.h"

/* ---- compiling ------------------------------------------------------------ */
typedef struct compiler {
    jg_schema *s;
    const json_t *doc;
    const char *refs[MAX_NODES]; /* $ref strings compiled so far, and their nodes */
    uint16_t ref_node[MAX_NODES];
    int n_refs;
    bool full;
    char **src; /* each pattern's text, by its index in the schema's res */
} compiler;

static int new_node(compiler *c, int kind) {
    jg_schema *s = c->s;
    if (s->n_nodes == MAX_NODES) {
        c->full = true;
        return 0; /* node 0 is a free value */
    }
    s->nodes = di_realloc(s->nodes, sizeof *s->nodes * (size_t)(s->n_nodes + 1));
    s->nodes[s->n_nodes] = (js_node){.kind = (uint8_t)kind, .hi = UINT32_MAX};
    return s->n_nodes++;
}

static int add_text(compiler *c, const char *p, size_t len, int node) {
    jg_schema *s = c->s;
    s->texts = di_realloc(s->texts, sizeof *s->texts * (size_t)(s->n_texts + 1));
    char *d = di_malloc(len + 1);
    memcpy(d, p, len);
    d[len] = 0;
    s->texts[s->n_texts] = (js_text){.p = d, .len = (int)len, .node = (uint16_t)node};
    return s->n_texts++;
}

static int compile(compiler *c, const json_t *j, int depth);
static int with_pattern(compiler *c, int n, const char *p, size_t len);

/* The bytes a value of node n can start with. */
void js_first_bytes(const jg_schema *s, int n, bool *set, int depth) {
    const js_node *k = &s->nodes[n];
    const char *starts = "";
    switch (k->kind) {
    case K_ANY:
        starts = "{[\"-0123456789tfn";
        break;
    case K_ANYOBJ:
    case K_OBJECT:
    case K_OBJUNION:
        starts = "{";
        break;
    case K_ARRAY:
        starts = "[";
        break;
    case K_STRING:
        starts = "\"";
        break;
    case K_NUMBER:
    case K_INTEGER:
        starts = k->nonneg ? "0123456789" : "-0123456789";
        break;
    case K_BOOL:
        starts = "tf";
        break;
    case K_NULL:
        starts = "n";
        break;
    case K_ENUM:
        for (int i = 0; i < k->count; i++) set[(uint8_t)s->texts[k->first + i].p[0]] = true;
        break;
    case K_UNION:
        if (depth < 16)
            for (int i = 0; i < k->count; i++)
                js_first_bytes(s, s->alts[k->first + i], set, depth + 1);
        break;
    }
    for (; *starts; starts++) set[(uint8_t)*starts] = true;
}

static int make_union(compiler *c, int *b, int n);

static int name_index(const jg_schema *s, int first, int count, const char *name) {
    for (int i = 0; i < count; i++)
        if (!strcmp(s->texts[first + i].p, name)) return i;
    return -1;
}

/* How name m's value follows the object union u's branches: the node
 * they share, a merged enum of theirs, or a union of theirs told apart by
 * the first byte (into the names' texts and the narrowing table). */
static void union_value(compiler *c, int u, int m) {
    jg_schema *s = c->s;
    js_node *n = &s->nodes[u];
    int nb = n->n_branch, nm = n->count, tab = n->tab;
    int nodes[MAX_SET], k = 0, texts = 0;
    bool enums = true;
    for (int b = 0; b < nb; b++) {
        int v = s->tab[tab + b * nm + m], seen = 0;
        if (v == NO_NODE) continue;
        while (seen < k && nodes[seen] != v) seen++;
        if (seen < k) continue;
        nodes[k++] = v;
        enums &= s->nodes[v].kind == K_ENUM;
        texts += s->nodes[v].count;
    }
    int value = nodes[0], how = V_SAME;
    if (k > 1 && enums && texts <= MAX_SET) { /* one enum: each value its branches */
        value = new_node(c, K_ENUM);
        if (value) {
            s->nodes[value].first = s->n_texts;
            s->nodes[value].count = texts;
            for (int i = 0; i < k; i++) {
                uint64_t in = union_with(s, &s->nodes[u], m, nodes[i]);
                for (int t = 0; t < s->nodes[nodes[i]].count; t++) {
                    js_text *e = &s->texts[s->nodes[nodes[i]].first + t];
                    int at = add_text(c, e->p, (size_t)e->len, 0);
                    s->texts[at].branches = in;
                }
            }
            how = V_ENUM;
        }
    } else if (k > 1) {
        int alts[MAX_SET];
        memcpy(alts, nodes, sizeof(int) * (size_t)k);
        value = make_union(c, alts, k);
        /* told apart by the first byte only where each branch's node is one
         * of the union's (an integer beside a number, nested objects merged:
         * no narrowing) */
        if (value && s->nodes[value].kind == K_UNION && s->nodes[value].count == k) how = V_FIRST;
    }
    s->texts[s->nodes[u].first + m].node = (uint16_t)value;
    *union_how(s, &s->nodes[u], m) = (uint16_t)how;
}

/* One node for object branches o[0..nb): the names any of them has, keys
 * narrowing the branches to those with the key, values (enum values, first
 * bytes) to those that take them; it closes where a branch left has all it
 * requires. Any object where one is, or where the names are too many. */
static int object_union(compiler *c, const int *o, int nb) {
    jg_schema *s = c->s;
    for (int b = 0; b < nb; b++)
        if (s->nodes[o[b]].kind != K_OBJECT) return new_node(c, K_ANYOBJ);
    int first = s->n_texts, nm = 0;
    for (int b = 0; b < nb; b++) {
        const js_node *k = &s->nodes[o[b]];
        for (int p = 0; p < k->count; p++) {
            const js_text *t = &s->texts[k->first + p];
            if (name_index(s, first, nm, t->p) >= 0) continue;
            if (nm == MAX_SET) return new_node(c, K_ANYOBJ);
            add_text(c, t->p, (size_t)t->len, 0);
            nm++;
        }
    }
    int u = new_node(c, K_OBJUNION);
    if (!u) return 0;
    s->tab = di_realloc(s->tab, sizeof *s->tab * (size_t)(s->n_tab + nb * nm + nm));
    s->masks = di_realloc(s->masks, sizeof *s->masks * (size_t)(s->n_masks + 2 * nb));
    s->alts = di_realloc(s->alts, sizeof *s->alts * (size_t)(s->n_alts + nb));
    js_node *n = &s->nodes[u];
    n->first = first, n->count = nm, n->n_branch = nb;
    n->branches = s->n_alts, n->tab = s->n_tab, n->masks = s->n_masks;
    s->n_alts += nb, s->n_tab += nb * nm + nm, s->n_masks += 2 * nb;
    for (int b = 0; b < nb; b++) {
        const js_node *k = &s->nodes[o[b]];
        uint64_t has = 0, req = 0;
        for (int m = 0; m < nm; m++) s->tab[n->tab + b * nm + m] = NO_NODE;
        for (int p = 0; p < k->count; p++) {
            int m = name_index(s, first, nm, s->texts[k->first + p].p);
            s->tab[n->tab + b * nm + m] = s->texts[k->first + p].node;
            has |= 1ull << m;
            if (k->required >> p & 1) req |= 1ull << m;
        }
        s->alts[n->branches + b] = (uint16_t)o[b];
        s->masks[n->masks + b] = has;
        s->masks[n->masks + nb + b] = req;
    }
    for (int m = 0; m < nm; m++) union_value(c, u, m);
    return u;
}

/* Node n takes strings alone (a string, or an enum of strings only). */
static bool string_only(const jg_schema *s, int n) {
    const js_node *k = &s->nodes[n];
    if (k->kind == K_STRING) return true;
    if (k->kind != K_ENUM) return false;
    for (int i = 0; i < k->count; i++)
        if (s->texts[k->first + i].p[0] != '"') return false;
    return true;
}

/* The pattern a string branch without a length range stands for: its
 * own, or an enum's values as one anchored alternation of literals
 * (malloc'd; NULL: it has none, any string). */
static char *branch_pattern(const compiler *c, int node) {
    const js_node *k = &c->s->nodes[node];
    if (k->kind == K_STRING) return k->re ? di_strdup(c->src[k->re - 1]) : NULL;
    di_buf b = {0};
    di_buf_adds(&b, "^(?:");
    for (int i = 0; i < k->count; i++) {
        json_t *v = json_loads(c->s->texts[k->first + i].p, JSON_DECODE_ANY, NULL);
        const char *t = json_string_value(v);
        if (i) di_buf_putc(&b, '|');
        if (t) jr_escape_literal(&b, t, json_string_length(v));
        json_decref(v);
    }
    di_buf_adds(&b, ")$");
    return b.p;
}

/* Merges the string branches of b[0..m) without length ranges (strings
 * with patterns, enums of strings) into one string node whose pattern is
 * their alternation, in the first one's place; returns the branches left.
 * Where the alternation does not compile, b stays as it was. */
static int merge_strings(compiler *c, int *b, int m) {
    di_buf text = {0};
    int first = -1, count = 0;
    bool merged[MAX_SET] = {0};
    for (int i = 0; i < m; i++) {
        const js_node *k = &c->s->nodes[b[i]];
        if (!string_only(c->s, b[i]) || (k->kind == K_STRING && (k->lo || k->hi != UINT32_MAX)))
            continue;
        char *p = branch_pattern(c, b[i]);
        if (!p) continue;
        if (count++) di_buf_putc(&text, '|');
        di_buf_adds(&text, p);
        free(p);
        merged[i] = true;
        if (first < 0) first = i;
    }
    int u = count >= 2 ? new_node(c, K_STRING) : 0;
    if (u && with_pattern(c, u, text.p, text.n) == u && c->s->nodes[u].re) {
        int n = 0;
        for (int i = 0; i < m; i++)
            if (i == first)
                b[n++] = u;
            else if (!merged[i])
                b[n++] = b[i];
        m = n;
    }
    di_buf_free(&text);
    return m;
}

/* A union of the compiled branches b[0..n), whose branches start with
 * different bytes (an integer beside a number is the number; object
 * branches become one object union; below, the others that start alike). */
static int make_union(compiler *c, int *b, int n) {
    bool number = false;
    for (int i = 0; i < n; i++) number |= c->s->nodes[b[i]].kind == K_NUMBER;
    int m = 0, objs[MAX_SET], no = 0;
    for (int i = 0; i < n; i++) {
        int k = c->s->nodes[b[i]].kind;
        if (k == K_OBJECT || k == K_ANYOBJ || k == K_OBJUNION)
            objs[no++] = b[i];
        else if (!number || k != K_INTEGER)
            b[m++] = b[i];
    }
    if (no) b[m++] = no == 1 ? objs[0] : object_union(c, objs, no);
    /* Branches a first byte cannot tell apart: a string with nothing more
     * to it stands for every string and string enum (it is their union),
     * patterns and enums are one alternation; of the others, the first
     * listed stays and the later ones go (what is written is a value of the
     * union still, if not any of them). */
    int plain = -1;
    for (int i = 0; i < m && plain < 0; i++) {
        const js_node *k = &c->s->nodes[b[i]];
        if (k->kind == K_STRING && !k->re && !k->lo && k->hi == UINT32_MAX) plain = b[i];
    }
    if (plain < 0) m = merge_strings(c, b, m);
    bool seen[256] = {0};
    n = 0;
    for (int i = 0; i < m; i++) {
        if (plain >= 0 && b[i] != plain && string_only(c->s, b[i])) continue;
        bool set[256] = {0}, clash = false;
        js_first_bytes(c->s, b[i], set, 0);
        for (int x = 0; x < 256; x++) clash |= set[x] && seen[x];
        if (clash) continue;
        for (int x = 0; x < 256; x++) seen[x] |= set[x];
        b[n++] = b[i];
    }
    if (n == 1) return b[0];
    int u = new_node(c, K_UNION);
    if (!u) return 0;
    jg_schema *s = c->s;
    s->alts = di_realloc(s->alts, sizeof *s->alts * (size_t)(s->n_alts + n));
    s->nodes[u].first = s->n_alts;
    s->nodes[u].count = n;
    for (int i = 0; i < n; i++) s->alts[s->n_alts++] = (uint16_t)b[i];
    return u;
}

/* A count keyword (minLength, maxItems, ...): a non-negative integer, or
 * dflt where it is absent or not one. */
static uint32_t count_kw(const json_t *j, const char *key, uint32_t dflt) {
    const json_t *v = json_object_get(j, key);
    double x = json_is_number(v) ? json_number_value(v) : -1;
    if (x < 0 || x != floor(x)) return dflt;
    return x < (double)UINT32_MAX ? (uint32_t)x : UINT32_MAX;
}

/* A node with a count range from keywords lo_kw / hi_kw; a range nothing
 * can meet is a free value. */
static int ranged(compiler *c, const json_t *j, int kind, const char *lo_kw, const char *hi_kw) {
    uint32_t lo = count_kw(j, lo_kw, 0), hi = count_kw(j, hi_kw, UINT32_MAX);
    if (lo > hi) return 0;
    int n = new_node(c, kind);
    c->s->nodes[n].lo = lo, c->s->nodes[n].hi = hi;
    return n;
}

/* A bound of a number: keyword kw, or its exclusive form (a number, or
 * draft 4's flag beside kw); *bound the tighter of the two. */
static void bound_kw(const json_t *j, const char *kw, const char *xkw, double *bound, bool *excl,
                     bool upper) {
    const json_t *v = json_object_get(j, kw), *x = json_object_get(j, xkw);
    if (json_is_number(v)) *bound = json_number_value(v), *excl = json_is_true(x);
    if (json_is_number(x) &&
        (upper ? json_number_value(x) <= *bound : json_number_value(x) >= *bound))
        *bound = json_number_value(x), *excl = true;
}

/* x as the shortest decimal that reads back as x (as JavaScript prints
 * it): output at or inside it, compared exactly, reads back inside x. */
static js_dec shortest_dec(double x) {
    char buf[40];
    for (int p = 0; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p, x);
        if (strtod(buf, NULL) == x) break;
    }
    js_dec d = {.neg = buf[0] == '-'};
    const char *q = buf + d.neg;
    int digits = 0;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') d.m = d.m * 10 + (uint64_t)(*q - '0'), digits++;
    d.e = atoi(q + 1) - (digits - 1);
    while (d.m && d.m % 10 == 0) d.m /= 10, d.e++;
    if (!d.m) d.e = 0, d.neg = false;
    return d;
}

/* A number or integer node; a minimum (or exclusiveMinimum) of 0 or more
 * rules the sign out, and bounds hold it to a range (one nothing meets, or
 * only numbers past 10^17 that need an exponent: a free value). A number's
 * exclusive bound becomes the inclusive one next to it (x < b for doubles
 * is x <= the double before b), an integer's the integer next to it. A
 * multipleOf (under 10^17, at most MULT_MAX_DEC digits after its point) is
 * held in units of its last digit: a number is then written with no more
 * digits after the point than it has (none for a whole step: a subset), an
 * integer is a multiple of what makes its multiples whole; a range with no
 * multiple in it is a free value. */
#define MULT_MAX_DEC 9

static int number(compiler *c, const json_t *j, int kind) {
    double lo = -INFINITY, hi = INFINITY;
    bool lo_x = false, hi_x = false;
    bound_kw(j, "minimum", "exclusiveMinimum", &lo, &lo_x, false);
    bound_kw(j, "maximum", "exclusiveMaximum", &hi, &hi_x, true);
    double a = lo_x ? floor(lo) + 1 : ceil(lo), b = hi_x ? ceil(hi) - 1 : floor(hi);
    if (kind == K_NUMBER)
        a = lo_x ? nextafter(lo, INFINITY) : lo, b = hi_x ? nextafter(hi, -INFINITY) : hi;
    if (a > b || a >= 1e17 || b <= -1e17) return 0;
    const json_t *mo = json_object_get(j, "multipleOf");
    double step = json_is_number(mo) ? json_number_value(mo) : 0;
    /* step = mult / 10^mdec, as its shortest decimal writes it */
    js_dec sd = step > 0 && step < 1e17 ? shortest_dec(step) : (js_dec){0};
    uint64_t mult = sd.m;
    int mdec = sd.e < 0 ? -sd.e : 0;
    for (int e = sd.e; e > 0; e--) mult *= 10;
    if (mdec > MULT_MAX_DEC || mult >= (uint64_t)1e17) mult = 0, mdec = 0; /* not held */
    if (mdec && kind == K_INTEGER) { /* integers N with N * 10^mdec a multiple of mult */
        uint64_t p10 = 1, g = mult;
        for (int i = 0; i < mdec; i++) p10 *= 10;
        for (uint64_t r = p10; r;) { /* gcd(mult, 10^mdec) */
            uint64_t t = g % r;
            g = r, r = t;
        }
        mult /= g, mdec = 0;
    }
    if (mult == 1 && !mdec && kind == K_INTEGER) mult = 0;
    if (mult) { /* some multiple in [a, b], in units of 10^-mdec */
        double u = pow(10, mdec), lo_u = a > -1e17 ? ceil(a * u - 1e-6) : -1e17;
        double hi_u = b < 1e17 ? floor(b * u + 1e-6) : 1e17;
        if (ceil(lo_u / (double)mult) * (double)mult > hi_u) return 0;
    }
    int n = new_node(c, kind);
    js_node *k = &c->s->nodes[n];
    k->nonneg = lo >= 0;
    k->has_nlo = a > -INFINITY, k->has_nhi = b < INFINITY;
    k->mult = mult;
    k->mdec = (uint8_t)mdec;
    k->bounded = k->has_nlo || k->has_nhi || mult;
    if (k->has_nlo) k->nlo = shortest_dec(a);
    if (k->has_nhi) k->nhi = shortest_dec(b);
    return n;
}

/* A string node: its length range, and its pattern or the one its format
 * stands for (one outside json_regex.h's subset, or past the schema's
 * states, not held). A pattern and a length range are held together
 * (jr_lengths: no state that neither lets go on); where that table would
 * be too large, the pattern alone; where no value fits both, a free value. */
static int string_node(compiler *c, const json_t *j) {
    int n = ranged(c, j, K_STRING, "minLength", "maxLength");
    const json_t *pat = json_object_get(j, "pattern");
    const char *p = json_string_value(pat);
    size_t len = p ? json_string_length(pat) : 0;
    const char *format = json_string_value(json_object_get(j, "format"));
    if (!p && format && (p = jr_format(format))) len = strlen(p);
    return n && p ? with_pattern(c, n, p, len) : n;
}

/* String node n held to pattern p (len bytes); returns n, or 0 (a free
 * value) where no value fits both it and n's length range. */
static int with_pattern(compiler *c, int n, const char *p, size_t len) {
    jg_schema *s = c->s;
    int room = MAX_SCHEMA_STATES - s->res_states;
    if (room <= 0 || s->n_res == UINT16_MAX - 1) return n;
    char why[128];
    jr_dfa *d =
        jr_compile(p, len, room < MAX_PATTERN_STATES ? room : MAX_PATTERN_STATES, why, sizeof why);
    if (!d) { /* a refusal may have cost a search: charged half a pattern's states */
        s->res_states += MAX_PATTERN_STATES / 2;
        return n;
    }
    js_node *k = &s->nodes[n];
    jr_lengths *l = NULL;
    if (k->lo > 0 || k->hi != UINT32_MAX) {
        size_t bits = MAX_SCHEMA_LENGTHS_BITS - s->lens_bits;
        bool none;
        l = jr_lengths_new(d, k->lo, k->hi, bits < MAX_LENGTHS_BITS ? bits : MAX_LENGTHS_BITS,
                           &none);
        if (none) {
            jr_free(d);
            return 0;
        }
        if (l)
            s->lens_bits += jr_lengths_bits(l);
        else
            k->lo = 0, k->hi = UINT32_MAX;
    }
    s->res = di_realloc(s->res, sizeof *s->res * (size_t)(s->n_res + 1));
    s->lens = di_realloc(s->lens, sizeof *s->lens * (size_t)(s->n_res + 1));
    s->lens[s->n_res] = l;
    c->src = di_realloc(c->src, sizeof *c->src * (size_t)(s->n_res + 1));
    c->src[s->n_res] = di_malloc(len + 1);
    memcpy(c->src[s->n_res], p, len);
    c->src[s->n_res][len] = 0;
    s->res[s->n_res++] = d;
    s->res_states += jr_states(d);
    k->re = (uint16_t)s->n_res;
    return n;
}

static int compile_type(compiler *c, const json_t *j, const char *type, int depth) {
    if (!strcmp(type, "string")) return string_node(c, j);
    if (!strcmp(type, "number")) return number(c, j, K_NUMBER);
    if (!strcmp(type, "integer")) return number(c, j, K_INTEGER);
    if (!strcmp(type, "boolean")) return new_node(c, K_BOOL);
    if (!strcmp(type, "null")) return new_node(c, K_NULL);
    if (!strcmp(type, "array")) {
        int n = ranged(c, j, K_ARRAY, "minItems", "maxItems");
        if (!n) return 0; /* (the graph is full, or no length fits) */
        const json_t *items = json_object_get(j, "items");
        int it = json_is_object(items) ? compile(c, items, depth + 1) : 0;
        c->s->nodes[n].items = (uint16_t)it;
        return n;
    }
    if (strcmp(type, "object")) return 0;
    const json_t *props = json_object_get(j, "properties");
    if (!json_is_object(props) || !json_object_size(props) || json_object_size(props) > MAX_SET)
        return new_node(c, K_ANYOBJ); /* no properties named: any object */
    int n = new_node(c, K_OBJECT);
    if (!n) return 0;
    const char *name;
    const json_t *sub;
    int first = c->s->n_texts, count = 0;
    json_object_foreach((json_t *)props, name, sub) {
        size_t len = strlen(name);
        for (size_t i = 0; i < len; i++)
            if (name[i] == '"' || name[i] == '\\' || (uint8_t)name[i] < 0x20 || len > 255)
                return c->s->nodes[n].kind = K_ANYOBJ, n; /* a name written with escapes */
        add_text(c, name, len, 0);
        count++;
    }
    c->s->nodes[n].first = first;
    c->s->nodes[n].count = count;
    int i = 0;
    json_object_foreach((json_t *)props, name, sub) {
        int v = json_is_object(sub) ? compile(c, sub, depth + 1) : 0;
        c->s->texts[first + i++].node = (uint16_t)v;
    }
    const json_t *req = json_object_get(j, "required");
    size_t k;
    const json_t *r;
    json_array_foreach(req, k, r) {
        const char *rn = json_string_value(r);
        for (int p = 0; rn && p < count; p++)
            if (!strcmp(c->s->texts[first + p].p, rn)) c->s->nodes[n].required |= 1ull << p;
    }
    return n;
}

/* "#/$defs/X" or "#/definitions/X": the schema it names, or NULL. */
static const json_t *resolve(const json_t *doc, const char *ref) {
    if (!strncmp(ref, "#/$defs/", 8))
        return json_object_get(json_object_get(doc, "$defs"), ref + 8);
    if (!strncmp(ref, "#/definitions/", 14))
        return json_object_get(json_object_get(doc, "definitions"), ref + 14);
    return NULL;
}

static int compile(compiler *c, const json_t *j, int depth) {
    if (!json_is_object(j) || depth > 64 || c->full) return 0;
    const json_t *ref = json_object_get(j, "$ref");
    if (json_is_string(ref)) {
        const char *r = json_string_value(ref);
        for (int i = 0; i < c->n_refs; i++)
            if (!strcmp(c->refs[i], r)) return c->ref_node[i];
        const json_t *target = resolve(c->doc, r);
        if (!target || c->n_refs == MAX_NODES) return 0;
        /* the node is named before its body is compiled, so a recursive
         * reference finds it: a union of one branch, filled in after */
        int slot = c->n_refs++;
        int n = new_node(c, K_UNION);
        if (!n) return 0;
        c->refs[slot] = r;
        c->ref_node[slot] = (uint16_t)n;
        int body = compile(c, target, depth + 1);
        c->s->nodes[n] = c->s->nodes[body];
        return n;
    }
    const json_t *en = json_object_get(j, "enum"), *cn = json_object_get(j, "const");
    if (json_is_array(en) || cn) {
        size_t count = cn ? 1 : json_array_size(en);
        if (count == 0 || count > MAX_SET) return 0;
        int n = new_node(c, K_ENUM);
        if (!n) return 0;
        c->s->nodes[n].first = c->s->n_texts;
        c->s->nodes[n].count = (int)count;
        for (size_t i = 0; i < count; i++) {
            char *t = json_dumps(cn ? cn : json_array_get(en, i), JSON_ENCODE_ANY | JSON_COMPACT);
            add_text(c, t, strlen(t), 0);
            free(t);
        }
        return n;
    }
    const json_t *any = json_object_get(j, "anyOf");
    if (!json_is_array(any)) any = json_object_get(j, "oneOf");
    const json_t *all = json_object_get(j, "allOf");
    if (json_is_array(all) && json_array_size(all) == 1)
        return compile(c, json_array_get(all, 0), depth + 1);
    const json_t *type = json_object_get(j, "type");
    int b[MAX_SET], n = 0;
    if (json_is_array(any) && json_array_size(any) <= MAX_SET) {
        size_t i;
        const json_t *a;
        json_array_foreach(any, i, a) b[n++] = compile(c, a, depth + 1);
    } else if (json_is_array(type) && json_array_size(type) <= MAX_SET) {
        size_t i;
        const json_t *t;
        json_array_foreach(type, i, t) if (json_is_string(t)) b[n++] =
            compile_type(c, j, json_string_value(t), depth);
    } else if (json_is_string(type))
        return compile_type(c, j, json_string_value(type), depth);
    if (!n) return 0;
    for (int i = 0; i < n; i++)
        if (c->s->nodes[b[i]].kind == K_ANY) return 0;
    return make_union(c, b, n);
}

jg_schema *jg_schema_compile(const char *text, size_t len, char *why, size_t cap) {
    json_error_t e;
    json_t *doc = json_loadb(text, len, 0, &e);
    if (!json_is_object(doc)) {
        snprintf(why, cap, "the schema is not a JSON object");
        json_decref(doc);
        return NULL;
    }
    jg_schema *s = di_calloc(1, sizeof *s);
    compiler c = {.s = s, .doc = doc};
    new_node(&c, K_ANY); /* node 0: a free value */
    s->root = (uint16_t)compile(&c, doc, 0);
    json_decref(doc);
    for (int i = 0; i < s->n_res; i++) free(c.src[i]);
    free(c.src);
    int k = s->nodes[s->root].kind;
    if (k != K_OBJECT && k != K_ANYOBJ) {
        snprintf(why, cap, "the schema does not describe an object this decoder can hold");
        jg_schema_free(s);
        return NULL;
    }
    return s;
}

void jg_schema_free(jg_schema *s) {
    if (!s) return;
    for (int i = 0; i < s->n_texts; i++) free(s->texts[i].p);
    free(s->texts);
    free(s->nodes);
    free(s->alts);
    free(s->tab);
    free(s->masks);
    for (int i = 0; i < s->n_res; i++) jr_free(s->res[i]), jr_lengths_free(s->lens[i]);
    free(s->lens);
    free(s->res);
    free(s);
}
