/* json_schema.c — JSON schemas for constrained decoding (json_grammar.h):
 * the compiler from a schema's text to a graph of nodes, and the step of a
 * state that follows one.
 *
 * The graph: an object node lists its properties (name, node, required),
 * an array node its items' node, an enum node its values' compact JSON
 * texts, a union its branches, which must start with different bytes so
 * that the first byte picks one; its object branches are one object union
 * (the names any of them has, each key narrowing the branches to those
 * that have it, an enum value or a value's first byte to those that take
 * it, closing once a branch left has what it requires). Strings, numbers,
 * integers, booleans and null are leaves read by the core automaton, and
 * so is a free value (a part the compiler cannot hold: any JSON there). A
 * $ref is a node shared (recursion included). The step keeps one frame per
 * container open; object keys and enum values are matched against all the
 * candidates at once (a bit each), so properties come in any order, each
 * once. A string node's length range counts characters (an escape is one,
 * a surrogate pair's two escapes one) as the core reads them; an array
 * frame counts its items. A string node's pattern (or the format that
 * stands for one) is a DFA (json_regex.h) over the value's bytes, escapes
 * undone, stepped as the core reads them. */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/json_internal.h"
#include "engine/json_regex.h"

enum {
    K_ANY,
    K_ANYOBJ,
    K_OBJECT,
    K_ARRAY,
    K_STRING,
    K_NUMBER,
    K_INTEGER,
    K_BOOL,
    K_NULL,
    K_ENUM,
    K_UNION,
    K_OBJUNION
};
enum { O_FIRST, O_NEXT, O_COLON, O_VALUE, O_AFTER, A_FIRST, A_VALUE, A_AFTER };
#define MAX_SET   64 /* properties of an object, values of an enum, branches of a union */
#define MAX_NODES 4096
/* A pattern's DFA states at most, and a schema's in all (a table of up to
 * 256 byte classes each). */
#define MAX_PATTERN_STATES 4096
#define MAX_SCHEMA_STATES  16384

typedef struct js_node {
    uint8_t kind;
    bool nonneg;       /* number, integer: no sign (a minimum of 0 or more) */
    uint16_t items;    /* array: the items' node */
    uint16_t re;       /* string: its pattern's DFA + 1 (0: none) */
    uint32_t lo, hi;   /* string: characters; array: items (hi UINT32_MAX: no bound) */
    int first, count;  /* object: props; enum: lits; union: alts; object union: names */
    uint64_t required; /* object: a bit per property */
    /* Object union: its branches (objects) at alts[branches ..], n_branch of
     * them; at tab[tab ..] each branch's value node per name (NO_NODE where
     * it has none), branch-major, then each name's narrowing (V_*); at
     * masks[masks ..] each branch's names, then each branch's required. */
    int branches, n_branch, tab, masks;
} js_node;

typedef struct js_text {
    char *p;
    int len;
    uint16_t node;     /* a property's value */
    uint64_t branches; /* a merged enum's value: the object-union branches it is one of */
} js_text;

struct jg_schema {
    js_node *nodes;
    int n_nodes;
    js_text *texts; /* properties' names and enum values' JSON */
    int n_texts;
    uint16_t *alts; /* unions' branches */
    int n_alts;
    uint16_t *tab; /* object unions' value nodes and narrowings */
    int n_tab;
    uint64_t *masks; /* object unions' branch masks */
    int n_masks;
    jr_dfa **res; /* strings' patterns */
    int n_res, res_states;
    uint16_t root;
};

#define NO_NODE 0xffff
/* How a name's value narrows an object union's branches: not at all (the
 * branches share its node, or could not be told apart), by the enum value
 * it is (a merged enum: each value knows its branches), or by its first
 * byte (a union of the branches' nodes). */
enum { V_SAME, V_ENUM, V_FIRST };

/* An object union's branches whose value for name m is node v. */
static uint64_t union_with(const jg_schema *sc, const js_node *n, int m, int v) {
    uint64_t in = 0;
    for (int b = 0; b < n->n_branch; b++)
        in |= (uint64_t)(sc->tab[n->tab + b * n->count + m] == v) << b;
    return in;
}

/* Where an object union keeps how name m's value narrows it (V_*). */
static uint16_t *union_how(const jg_schema *sc, const js_node *n, int m) {
    return &sc->tab[n->tab + n->n_branch * n->count + m];
}

/* ---- compiling ------------------------------------------------------------ */
typedef struct compiler {
    jg_schema *s;
    const json_t *doc;
    const char *refs[MAX_NODES]; /* $ref strings compiled so far, and their nodes */
    uint16_t ref_node[MAX_NODES];
    int n_refs;
    bool full;
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

/* The bytes a value of node n can start with. */
static void first_bytes(const jg_schema *s, int n, bool *set, int depth) {
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
                first_bytes(s, s->alts[k->first + i], set, depth + 1);
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

/* A union of the compiled branches b[0..n), or a free value where two
 * could start with the same byte (an integer beside a number is the
 * number; object branches become one object union). */
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
    n = m;
    if (n == 1) return b[0];
    bool seen[256] = {0};
    for (int i = 0; i < n; i++) {
        bool set[256] = {0};
        first_bytes(c->s, b[i], set, 0);
        for (int x = 0; x < 256; x++) {
            if (set[x] && seen[x]) return 0;
            seen[x] |= set[x];
        }
    }
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

/* A number or integer node; a minimum (or exclusiveMinimum) of 0 or more
 * rules the sign out. */
static int number(compiler *c, const json_t *j, int kind) {
    int n = new_node(c, kind);
    const json_t *mn = json_object_get(j, "minimum"), *xm = json_object_get(j, "exclusiveMinimum");
    c->s->nodes[n].nonneg = (json_is_number(mn) && json_number_value(mn) >= 0) ||
                            (json_is_number(xm) && json_number_value(xm) >= 0);
    return n;
}

/* A string node: its length range, and its pattern or the one its format
 * stands for (one outside json_regex.h's subset, or past the schema's
 * states, not held). */
static int string_node(compiler *c, const json_t *j) {
    int n = ranged(c, j, K_STRING, "minLength", "maxLength");
    const json_t *pat = json_object_get(j, "pattern");
    const char *p = json_string_value(pat);
    size_t len = p ? json_string_length(pat) : 0;
    const char *format = json_string_value(json_object_get(j, "format"));
    if (!p && format && (p = jr_format(format))) len = strlen(p);
    jg_schema *s = c->s;
    int room = MAX_SCHEMA_STATES - s->res_states;
    if (!n || !p || room <= 0 || s->n_res == UINT16_MAX - 1) return n;
    char why[128];
    jr_dfa *d =
        jr_compile(p, len, room < MAX_PATTERN_STATES ? room : MAX_PATTERN_STATES, why, sizeof why);
    if (!d) { /* a refusal may have cost a search: charged half a pattern's states */
        s->res_states += MAX_PATTERN_STATES / 2;
        return n;
    }
    s->res = di_realloc(s->res, sizeof *s->res * (size_t)(s->n_res + 1));
    s->res[s->n_res++] = d;
    s->res_states += jr_states(d);
    s->nodes[n].re = (uint16_t)s->n_res;
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
    for (int i = 0; i < s->n_res; i++) jr_free(s->res[i]);
    free(s->res);
    free(s);
}

/* ---- decoding --------------------------------------------------------------- */
void jg_init_schema(jg_state *s, const jg_schema *schema) {
    jg_init(s);
    s->schema = schema;
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
            first_bytes(sc, sc->alts[n->first + i], set, 0);
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
            first_bytes(sc, x, set, 0);
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
        if (before->utf8 || c != '\\') b[n++] = c;
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
        bool counted = false; /* a character of a string with a length range starts at c */
        if (s->str_limited && before.mode == M_STRING && (c & 0xC0) != 0x80) {
            const js_node *n = &sc->nodes[s->snode];
            if (c == '"' ? s->slen < n->lo : s->slen >= n->hi) return false;
            counted = c != '"';
        }
        if (!cut && jg_core_step(&s->c, c)) {
            s->slen += counted;
            s->rstate = (uint16_t)st, s->rhigh = high;
            return s->c.mode == M_DONE ? value_done(s) : true;
        }
        s->c = before;
        if (before.depth || !jg_core_number_ends(&before)) return false;
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
