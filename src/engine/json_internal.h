/* json_internal.h — what json_grammar.c (the JSON automaton, the mask),
 * json_schema.c (schemas compiled to graphs), json_follow.c (a state
 * following one) and json_calls.c (tool calls around such objects) share. */
#ifndef DI_JSON_INTERNAL_H
#define DI_JSON_INTERNAL_H

#include "engine/grammar.h"
#include "engine/json_grammar.h"
#include "engine/json_regex.h"

/* jg_core.mode: what the next byte may be */
enum {
    M_START,     /* before the object: whitespace, then '{' */
    M_OBJ_FIRST, /* after '{': a key or '}' */
    M_OBJ_KEY,   /* after ',' in an object: a key */
    M_COLON,     /* after a key */
    M_VALUE,     /* a value */
    M_ARR_FIRST, /* after '[': a value or ']' */
    M_AFTER,     /* after a value in a container: ',' or its closer */
    M_STRING,
    M_ESC,     /* after a backslash */
    M_UHEX,    /* in the 4 hex digits of \u (sub: digits read, cp: their value) */
    M_LOW_BSL, /* after a high surrogate's escape: '\' of the low one */
    M_LOW_U,   /* ... its 'u' */
    M_NUMBER,  /* sub: N_* */
    M_LITERAL, /* sub: literal * 8 + characters matched */
    M_DONE,    /* the value is complete */
};

/* jg_state.what: with a schema, what is being read below the frames */
enum { W_NONE, W_CORE, W_KEY, W_ENUM };

/* One byte of tool calls; complete there (json_calls.c). */
bool jg_calls_step(jg_state *s, uint8_t c);
bool jg_calls_done(const jg_state *s);
/* A JSON value's bytes are being read as they are written (the mask's
 * string shortcut may apply: plain tokens are string characters there). */
enum { /* jg_state.cphase */
       JG_CALLS_CHOICE,
       JG_CALLS_VALUE,
       JG_CALLS_SUFFIX,
       JG_CALLS_END,
       JG_CALLS_FREE,   /* before the trigger (cpos: its bytes matched) */
       JG_CALLS_START,  /* with an answer: whitespace (cpos bytes), then it or the trigger */
       JG_CALLS_OPEN,   /* ... in the trigger (cpos: its bytes matched) */
       JG_CALLS_ANSWER, /* ... in the answer */
};
bool jg_calls_in_value(const jg_state *s);
/* ... except the plain tokens holding this byte (a DSML raw value's closing
 * tag may begin there: walked one by one); -1 none. */
int jg_calls_plain_stop(const jg_state *s);
/* Free text with none of the trigger matched: a token can only fail where
 * it holds the trigger's first byte (returned), so the mask walks those
 * alone; -1 otherwise. */
int jg_calls_free_at_rest(const jg_state *s);

/* One byte into the core automaton. */
bool jg_core_step(jg_core *s, uint8_t c);
/* The core holds a number that may end here. */
bool jg_core_number_ends(const jg_core *s);
/* One byte with a schema (json_schema.c). */
bool jg_schema_step(jg_state *s, uint8_t c);
/* Characters the string being read may still take (UINT32_MAX: any). */
uint32_t jg_string_room(const jg_state *s);
/* The pattern the string being read follows (its state: s->rstate), or
 * NULL. */
const jr_dfa *jg_string_pattern(const jg_state *s);
/* ... and its length range's table (jr_lengths), or NULL. */
const jr_lengths *jg_string_lengths(const jg_state *s);

/* ---- compiled schemas (json_schema.c; followed in json_follow.c) ---- */
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
/* A pattern's table under a length range at most, and a schema's in all,
 * in bits (a bit a state and a length). */
#define MAX_LENGTHS_BITS        (1u << 20)
#define MAX_SCHEMA_LENGTHS_BITS (8u << 20)

/* A decimal m x 10^e, negative or not: a number's bound. */
typedef struct js_dec {
    uint64_t m;
    int e;
    bool neg;
} js_dec;

typedef struct js_node {
    uint8_t kind;
    bool nonneg;  /* number, integer: no sign (a minimum of 0 or more) */
    bool bounded; /* number, integer: held to [nlo, nhi] (where has_*) */
    bool has_nlo, has_nhi;
    js_dec nlo, nhi;
    uint64_t mult;     /* number, integer: a multiple of mult / 10^mdec (0: any) */
    uint8_t mdec;      /* ... with at most mdec digits after the point (0: none) */
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
    jr_dfa **res;      /* strings' patterns */
    jr_lengths **lens; /* ... under their length ranges (NULL: none) */
    int n_res, res_states;
    size_t lens_bits;
    uint16_t root;
};

#define NO_NODE 0xffff
/* How a name's value narrows an object union's branches: not at all (the
 * branches share its node, or could not be told apart), by the enum value
 * it is (a merged enum: each value knows its branches), or by its first
 * byte (a union of the branches' nodes). */
enum { V_SAME, V_ENUM, V_FIRST };

/* An object union's branches whose value for name m is node v. */
static inline uint64_t union_with(const jg_schema *sc, const js_node *n, int m, int v) {
    uint64_t in = 0;
    for (int b = 0; b < n->n_branch; b++)
        in |= (uint64_t)(sc->tab[n->tab + b * n->count + m] == v) << b;
    return in;
}

/* Where an object union keeps how name m's value narrows it (V_*). */
static inline uint16_t *union_how(const jg_schema *sc, const js_node *n, int m) {
    return &sc->tab[n->tab + n->n_branch * n->count + m];
}

/* The bytes a value of node n can start with (set: 256 flags). */
void js_first_bytes(const jg_schema *s, int n, bool *set, int depth);

#endif
