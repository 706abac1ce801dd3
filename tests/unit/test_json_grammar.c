/* test_json_grammar.c — the JSON-object automaton and its token mask
 * (src/engine/json_grammar.c): valid and invalid texts, whole and byte by
 * byte; agreement with jansson (the oracle) on random short texts; the mask
 * against feeding every token by itself, along a walk to a complete object. */
#include <jansson.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_grammar.h"
#include "engine/json_regex.h"
#include "harness.h"

static bool accepts(const char *t, size_t n) {
    jg_state s;
    jg_init(&s);
    return jg_feed(&s, t, n) && jg_done(&s);
}

/* Fed whole or a byte at a time: the same verdict. */
static bool accepts_bytewise(const char *t, size_t n) {
    jg_state s;
    jg_init(&s);
    for (size_t i = 0; i < n; i++)
        if (!jg_feed(&s, t + i, 1)) return false;
    return jg_done(&s);
}

TEST(json_grammar_accepts_objects) {
    const char *ok[] = {
        "{}",
        " \n{ }",
        "{\"a\":1}",
        "{\"a\": -0.5e+10, \"b\": [1, 2.25, -3E2, 0], \"c\": {\"d\": [[], {}]}}",
        "{\"s\":\"esc \\\" \\\\ \\/ \\b\\f\\n\\r\\t \\u00e9 \\uD83D\\uDE00\"}",
        "{\"t\":true,\"f\":false,\"n\":null,\"x\":[true,false,null]}",
        "{\"caf\xC3\xA9\":\"\xE4\xB8\xAD\xF0\x9F\x98\x80\"}",
        "{\"a\":{\"b\":{\"c\":{\"d\":{}}}}}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        CHECKF(accepts(ok[i], strlen(ok[i])), "rejected %s", ok[i]);
        CHECKF(accepts_bytewise(ok[i], strlen(ok[i])), "rejected byte by byte: %s", ok[i]);
    }
}

TEST(json_grammar_rejects_the_rest) {
    const char *bad[] = {
        "[1]",                      /* the top level is an object */
        "\"x\"",                    /* ... */
        "{\"a\":1",                 /* not complete */
        "{\"a\":01}",               /* leading zero */
        "{\"a\":-01}",              /* ... after a sign */
        "{\"a\":1.}",               /* no fraction digits */
        "{\"a\":-}",                /* a sign alone */
        "{\"a\":1e}",               /* no exponent digits */
        "{\"a\":tru}",              /* a broken literal */
        "{\"a\":1,}",               /* trailing comma */
        "{,}",                      /* ... */
        "{\"a\" 1}",                /* no colon */
        "{a:1}",                    /* unquoted key */
        "{\"a\":1}}",               /* past the end */
        "{\"a\":1} ",               /* whitespace past the end */
        "{\"a\":[1}",               /* mismatched closer */
        "{\"a\":\"\x01\"}",         /* a control byte in a string */
        "{\"a\":\"\xC0\x80\"}",     /* overlong UTF-8 */
        "{\"a\":\"\xED\xA0\x80\"}", /* a UTF-8 surrogate */
        "{\"a\":\"\\ud800\"}",      /* a lone high surrogate */
        "{\"a\":\"\\udc00\"}",      /* a lone low one */
        "{\"a\":\"\\u0000\"}",      /* NUL, which strict parsers refuse */
        "{\"a\":\"\\x41\"}",        /* an unknown escape */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECKF(!accepts(bad[i], strlen(bad[i])), "accepted %s", bad[i]);
        CHECKF(!accepts_bytewise(bad[i], strlen(bad[i])), "accepted byte by byte: %s", bad[i]);
    }
    /* whitespace outside strings is bounded; inside them it is not */
    char pad[128] = "{";
    memset(pad + 1, ' ', JG_MAX_WS + 1);
    strcpy(pad + 2 + JG_MAX_WS, "}");
    CHECK(!accepts(pad, strlen(pad)));
    pad[1 + JG_MAX_WS] = '}', pad[2 + JG_MAX_WS] = 0;
    CHECK(accepts(pad, strlen(pad)));
    /* nesting is bounded */
    char deep[2 * JG_MAX_DEPTH + 8];
    size_t n = 0;
    deep[n++] = '{', deep[n++] = '"', deep[n++] = 'a', deep[n++] = '"', deep[n++] = ':';
    for (int d = 1; d < JG_MAX_DEPTH; d++) deep[n++] = '[';
    jg_state s;
    jg_init(&s);
    CHECK(jg_feed(&s, deep, n));
    CHECK(!jg_feed(&s, "[", 1));
    /* a \u escape's digits refused as soon as no character can come of them */
    const char *dead[] = {"{\"a\":\"\\uDC", "{\"a\":\"\\udf", "{\"a\":\"\\uD83D\\u0",
                          "{\"a\":\"\\uD83D\\uDB"};
    const char *live[] = {"{\"a\":\"\\uD", "{\"a\":\"\\uDB", "{\"a\":\"\\u000",
                          "{\"a\":\"\\uD83D\\uDc"};
    for (size_t i = 0; i < sizeof dead / sizeof *dead; i++) {
        jg_init(&s);
        CHECKF(!jg_feed(&s, dead[i], strlen(dead[i])), "took %s", dead[i]);
        jg_init(&s);
        CHECKF(jg_feed(&s, live[i], strlen(live[i])), "refused %s", live[i]);
    }
}

/* Random short texts over JSON's characters: the automaton accepts exactly
 * what jansson parses as an object (numbers kept short, so none overflows
 * jansson's integers), whitespace after it aside. */
TEST(json_grammar_agrees_with_jansson) {
    static const char alpha[] = "{}[]\":, a1-0.e+tnu\\";
    uint64_t x = 88172645463325252ull;
    int agree = 0, accepted = 0;
    for (int it = 0; it < 200000; it++) {
        char t[16];
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t n = 2 + x % 11;
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            t[i] = alpha[x % (sizeof alpha - 1)];
        }
        t[0] = '{'; /* most texts start as an object would */
        json_error_t e;
        json_t *j = json_loadb(t, n, 0, &e);
        bool want = j && json_is_object(j);
        json_decref(j);
        size_t m = n; /* whitespace past the object: jansson's; here only EOS may follow */
        while (m && t[m - 1] == ' ') m--;
        bool got = accepts(t, m);
        if (got != want) {
            CHECKF(false, "'%.*s': automaton %d, jansson %d (%s)", (int)n, t, got, want, e.text);
            break;
        }
        agree++;
        accepted += got;
    }
    CHECKF(agree == 200000 && accepted > 100, "%d agreed, %d accepted", agree, accepted);
}

/* A vocabulary of JSON pieces, multi-byte and partial characters, a control
 * token (no bytes) and an end-of-sequence token. */
static const char *const VOCAB[] = {
    NULL, /* 0: EOS */
    "\\x",
    "\\u12",
    "a\"b",
    "\xA9\xC3",
    "\xC3"
    "a",
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    " ",
    "  ",
    "\n",
    "a",
    "b",
    "1",
    "0",
    "-",
    ".",
    "e",
    "true",
    "tr",
    "ue",
    "null",
    "\"a\"",
    "\":",
    "\",",
    "{\"",
    "\"}",
    "12",
    "1.5",
    "\xC3",
    "\xA9",
    "\xC3\xA9",
    "\\",
    "n",
    "u",
    "00e9",
    "\\n",
    NULL /* a control token */,
    "}}",
    "]}",
    "\":\"",
    "x\"",
    "\t\t",
};
#define NV ((int)(sizeof VOCAB / sizeof *VOCAB))

static char *vocab_bytes(void *ctx, int id, size_t *len) {
    (void)ctx;
    if (!VOCAB[id]) return NULL;
    *len = strlen(VOCAB[id]);
    char *b = malloc(*len + 1);
    memcpy(b, VOCAB[id], *len + 1);
    return b;
}

/* The mask at s against feeding every token by itself (and an
 * end-of-sequence token where the object is complete, or where nothing
 * else can follow); returns the allowed ids in pick. */
static void check_mask(const jg_vocab *v, const jg_state *s, int eos, int *pick, int *n_pick,
                       int *dead_ends, const char *where) {
    float lg[NV];
    for (int i = 0; i < NV; i++) lg[i] = 0;
    int allowed = jg_mask(v, s, lg);
    bool want[NV], any = false;
    for (int id = 0; id < NV; id++) {
        jg_state t = *s;
        want[id] = id == eos   ? jg_done(s)
                   : VOCAB[id] ? jg_feed(&t, VOCAB[id], strlen(VOCAB[id]))
                               : false;
        any |= want[id];
    }
    want[eos] |= !any; /* a dead end ("nu", no "l" here): the sequence may end */
    *dead_ends += !any;
    int n = *n_pick = 0;
    for (int id = 0; id < NV; id++) {
        CHECKF(want[id] == (lg[id] == 0), "%s: token %d '%s': mask %d, fed %d", where, id,
               VOCAB[id] ? VOCAB[id] : "-", lg[id] == 0, want[id]);
        if (lg[id] == 0) pick[n++] = id;
    }
    CHECK(n == allowed && n > 0);
    *n_pick = n;
}

TEST(json_grammar_mask_equals_feeding_each_token) {
    int eos = 0, pick[NV], n = 0, dead_ends = 0;
    jg_vocab *v = jg_vocab_new(NV, vocab_bytes, NULL, &eos, 1);
    jg_state s;
    /* states the walk below may miss: inside a character, an escape, a
     * literal, a number */
    const char *at[] = {"{\"a\":\"\xC3", "{\"a\":\"\xE4\xB8", "{\"a\":\"\\", "{\"a\":\"\\u1",
                        "{\"a\":tr",     "{\"a\":1",          "{\"a\":[",    "{\"a\":{} "};
    for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
        jg_init(&s);
        CHECK(jg_feed(&s, at[i], strlen(at[i])));
        check_mask(v, &s, eos, pick, &n, &dead_ends, at[i]);
    }
    jg_init(&s);
    uint64_t x = 7;
    int steps = 0, completed = 0;
    for (; steps < 2000 && completed < 5; steps++) {
        check_mask(v, &s, eos, pick, &n, &dead_ends, "walk");
        if (!n) break;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int id = pick[x % (uint64_t)n];
        if (id == eos) { /* the object was complete, or a dead end: start another */
            completed += jg_done(&s);
            jg_init(&s);
            continue;
        }
        CHECK(jg_feed_token(v, &s, id));
    }
    CHECKF(completed == 5, "%d objects completed in %d steps (%d dead ends)", completed, steps,
           dead_ends);
    jg_vocab_free(v);
}

/* ---- schemas ----------------------------------------------------------------- */
static jg_schema *schema_of(const char *text) {
    char why[160];
    jg_schema *s = jg_schema_compile(text, strlen(text), why, sizeof why);
    if (!s) fprintf(stderr, "schema: %s\n", why);
    return s;
}

static bool schema_accepts(const jg_schema *sc, const char *t) {
    jg_state s;
    jg_init_schema(&s, sc);
    bool whole = jg_feed(&s, t, strlen(t)) && jg_done(&s);
    jg_init_schema(&s, sc); /* byte by byte: the same */
    bool bytes = true;
    for (size_t i = 0; bytes && t[i]; i++) bytes = jg_feed(&s, t + i, 1);
    return whole && bytes && jg_done(&s);
}

/* The first text of list (n of them) that sc does not take whole (want)
 * or takes (!want); NULL where there is none. */
static const char *schema_misjudges(const jg_schema *sc, const char *const *list, size_t n,
                                    bool want) {
    for (size_t i = 0; i < n; i++)
        if (schema_accepts(sc, list[i]) != want) return list[i];
    return NULL;
}
#define CHECK_LISTS(sc, ok, bad)                                                                   \
    do {                                                                                           \
        const char *wrong_ = schema_misjudges(sc, ok, sizeof ok / sizeof *ok, true);               \
        CHECKF(!wrong_, "rejected %s", wrong_);                                                    \
        wrong_ = schema_misjudges(sc, bad, sizeof bad / sizeof *bad, false);                       \
        CHECKF(!wrong_, "accepted %s", wrong_);                                                    \
    } while (0)

static const char PERSON[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
    "\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},\"kind\":{"
    "\"enum\":[\"cat\",\"dog\",3,null]},\"opt\":{\"anyOf\":[{\"type\":\"number\"},{\"type\":"
    "\"null\"}]},\"nested\":{\"$ref\":\"#/$defs/N\"},\"free\":{}},\"required\":[\"name\","
    "\"age\"],\"$defs\":{\"N\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":["
    "\"boolean\",\"null\"]}},\"required\":[\"x\"]}}}";

TEST(json_schema_holds_objects_to_it) {
    jg_schema *sc = schema_of(PERSON);
    CHECK(sc);
    const char *ok[] = {
        "{\"name\":\"a\",\"age\":3}",
        "{ \"age\" : -12 , \"name\" : \"b\\u00e9\" }",
        "{\"name\":\"a\",\"age\":0,\"tags\":[\"x\",\"y\"],\"kind\":\"dog\",\"opt\":null,"
        "\"nested\":{\"x\":true}}",
        "{\"name\":\"a\",\"age\":3,\"kind\":3,\"opt\":1.5e3,\"nested\":{\"x\":null}}",
        "{\"name\":\"a\",\"age\":3,\"kind\":null,\"tags\":[]}",
        "{\"free\":[1,{\"q\":\"w\"}],\"name\":\"\",\"age\":7}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        CHECKF(schema_accepts(sc, ok[i]), "rejected %s", ok[i]);
        json_error_t e;
        json_t *j = json_loads(ok[i], 0, &e);
        CHECKF(json_is_object(j), "jansson: %s", e.text);
        json_decref(j);
    }
    const char *bad[] = {
        "{\"name\":\"a\"}",                                /* age is required */
        "{\"name\":\"a\",\"age\":3.5}",                    /* an integer */
        "{\"name\":\"a\",\"age\":1e3}",                    /* ... */
        "{\"name\":\"a\",\"age\":3,\"extra\":1}",          /* no such property */
        "{\"name\":1,\"age\":3}",                          /* a string */
        "{\"name\":\"a\",\"name\":\"b\",\"age\":1}",       /* twice */
        "{\"name\":\"a\",\"age\":3,\"kind\":\"cow\"}",     /* not in the enum */
        "{\"name\":\"a\",\"age\":3,\"kind\":\"ca\"}",      /* ... */
        "{\"name\":\"a\",\"age\":3,\"kind\":33}",          /* ... */
        "{\"name\":\"a\",\"age\":3,\"nested\":{}}",        /* x is required */
        "{\"name\":\"a\",\"age\":3,\"nested\":{\"x\":1}}", /* boolean or null */
        "{\"name\":\"a\",\"age\":3,\"tags\":[1]}",         /* strings */
        "{\"name\":\"a\",\"age\":3,\"opt\":\"1\"}",        /* number or null */
        "{\"nam\":\"a\",\"age\":3}",                       /* a prefix of a name */
        "[{\"name\":\"a\",\"age\":3}]",                    /* an object */
    };
    CHECK_LISTS(sc, ok, bad);
    jg_schema_free(sc);
}

TEST(json_schema_refs_recurse_and_unsupported_parts_are_free) {
    jg_schema *sc = schema_of(
        "{\"$ref\":\"#/$defs/T\",\"$defs\":{\"T\":{\"type\":\"object\",\"properties\":{\"v\":{"
        "\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/T\"}}},"
        "\"required\":[\"v\"]}}}");
    CHECK(sc);
    CHECK(schema_accepts(sc, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4}]}]}"));
    CHECK(!schema_accepts(sc, "{\"v\":1,\"kids\":[{\"w\":2}]}"));
    jg_schema_free(sc);
    /* branches that start alike and are not objects cannot be told apart
     * by a byte: a plain string stands for every string branch (their
     * union), patterns and string enums are one alternation, and of the
     * others the first listed stays (a value of the union still) */
    sc = schema_of("{\"type\":\"object\",\"properties\":{\"u\":{\"anyOf\":[{\"type\":\"array\","
                   "\"items\":{\"type\":\"string\"}},{\"type\":\"array\",\"items\":{\"type\":"
                   "\"null\"}}]},\"m\":{\"anyOf\":[{\"const\":\"auto\"},{\"type\":\"string\"},{"
                   "\"type\":\"integer\",\"minimum\":5},{\"type\":\"integer\",\"maximum\":0}]},"
                   "\"e\":{\"anyOf\":[{\"enum\":[\"a.b\",\"c|\\n\"]},{\"const\":1},{\"enum\":["
                   "\"q\"]},{\"type\":"
                   "\"string\",\"pattern\":\"^x+$\"}]},\"d\":{\"anyOf\":[{\"type\":\"string\","
                   "\"format\":\"date\"},{\"type\":\"string\",\"format\":\"date-time\"}]}}}");
    CHECK(sc);
    const char *ok[] = {"{\"u\":[\"x\"]}",
                        "{\"m\":\"auto\"}",
                        "{\"m\":\"other\"}",
                        "{\"m\":7}",
                        "{\"e\":\"a.b\"}",
                        "{\"e\":\"c|\\n\"}",
                        "{\"e\":1}",
                        "{\"e\":\"q\"}",
                        "{\"e\":\"xx\"}",
                        "{\"d\":\"2024-01-02\"}",
                        "{\"d\":\"2024-01-02T03:04:05Z\"}"};
    const char *bad[] = {"{\"u\":[null]}",
                         "{\"u\":{\"c\":[1]}}",
                         "{\"m\":-3}",
                         "{\"e\":\"axb\"}",
                         "{\"e\":\"c|n\"}",
                         "{\"e\":\"qq\"}",
                         "{\"d\":\"2024-01-02 03:04:05Z\"}"};
    CHECK_LISTS(sc, ok, bad);
    jg_schema_free(sc);
    /* a union that reaches itself through a $ref: bounded, not a loop */
    sc = schema_of("{\"$defs\":{\"U\":{\"anyOf\":[{\"$ref\":\"#/$defs/U\"},{\"type\":"
                   "\"string\"}]}},\"type\":\"object\",\"properties\":{\"u\":{\"$ref\":"
                   "\"#/$defs/U\"}}}");
    CHECK(sc);
    schema_accepts(sc, "{\"u\":\"s\"}"); /* whatever it decides, it returns */
    jg_schema_free(sc);
    /* number or integer: a number */
    sc = schema_of("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":[\"integer\","
                   "\"number\"]}}}");
    CHECK(sc && schema_accepts(sc, "{\"x\":1.5}") && schema_accepts(sc, "{\"x\":2}"));
    CHECK(!schema_accepts(sc, "{\"x\":\"2\"}"));
    jg_schema_free(sc);
    /* {"type": "object"} alone: any object */
    sc = schema_of("{\"type\":\"object\"}");
    CHECK(sc && schema_accepts(sc, "{\"any\":[1,true]}") && !schema_accepts(sc, "[1]"));
    jg_schema_free(sc);
    char why[160];
    CHECK(!jg_schema_compile("{\"type\":\"array\"}", 16, why, sizeof why) && strstr(why, "object"));
    CHECK(!jg_schema_compile("[1]", 3, why, sizeof why));
}

/* A random walk through the tokens schema allows, the mask checked at
 * every step against feeding each token, until `objects` objects are
 * complete. */
static void schema_walk(const char *schema, uint64_t seed, int objects, const char *where) {
    jg_schema *sc = schema_of(schema);
    CHECK(sc);
    if (!sc) return;
    int eos = 0, pick[NV], n = 0, dead_ends = 0;
    jg_vocab *v = jg_vocab_new(NV, vocab_bytes, NULL, &eos, 1);
    jg_state s;
    jg_init_schema(&s, sc);
    uint64_t x = seed;
    int steps = 0, completed = 0;
    for (; steps < 4000 && completed < objects; steps++) {
        check_mask(v, &s, eos, pick, &n, &dead_ends, where);
        if (!n) break;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int id = pick[x % (uint64_t)n];
        if (id == eos) {
            completed += jg_done(&s);
            jg_init_schema(&s, sc);
            continue;
        }
        CHECK(jg_feed_token(v, &s, id));
    }
    CHECKF(completed == objects, "%s: %d objects completed in %d steps (%d dead ends)", where,
           completed, steps, dead_ends);
    jg_vocab_free(v);
    jg_schema_free(sc);
}

TEST(json_schema_mask_equals_feeding_each_token) {
    schema_walk("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\","
                "\"items\":{\"type\":\"number\"}},\"b\":{\"enum\":[true,null,\"e\"]}},"
                "\"required\":[\"a\"]}",
                11, 5, "schema walk");
}

/* A union of objects (Pydantic's discriminated unions): the keys written
 * narrow the branches to those that have them, a value to the branches
 * that take it (an enum value, or the first byte of a value the branches
 * type differently), and the object closes once a branch left has all it
 * requires. */
static const char SHAPES[] =
    "{\"type\":\"object\",\"properties\":{\"s\":{\"anyOf\":[{\"$ref\":\"#/$defs/C\"},{\"$ref\":"
    "\"#/$defs/Q\"},{\"type\":\"null\"}]}},\"required\":[\"s\"],\"$defs\":{\"C\":{\"type\":"
    "\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":\"number\"},"
    "\"v\":{\"type\":\"string\"}},\"required\":[\"kind\",\"r\"]},\"Q\":{\"type\":\"object\","
    "\"properties\":{\"kind\":{\"enum\":[\"square\",\"box\"]},\"side\":{\"type\":\"number\"},"
    "\"v\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}},\"required\":[\"kind\","
    "\"side\"]}}}";

TEST(json_schema_holds_unions_of_objects) {
    jg_schema *sc = schema_of(SHAPES);
    CHECK(sc);
    const char *ok[] = {
        "{\"s\":{\"kind\":\"circle\",\"r\":1}}",
        "{\"s\":{\"kind\":\"box\",\"side\":2,\"v\":[1]}}",
        "{\"s\":{\"r\":1.5,\"kind\":\"circle\",\"v\":\"x\"}}",
        "{\"s\":{\"v\":\"x\",\"kind\":\"circle\",\"r\":1}}",
        "{\"s\":{\"v\":[1],\"side\":2,\"kind\":\"square\"}}",
        "{\"s\":null}",
    };
    const char *bad[] = {
        "{\"s\":{\"kind\":\"circle\",\"side\":2}}",             /* side: not a circle's */
        "{\"s\":{\"kind\":\"square\",\"r\":1}}",                /* r: not a square's */
        "{\"s\":{\"kind\":\"circle\"}}",                        /* r required */
        "{\"s\":{\"r\":1}}",                                    /* kind required */
        "{\"s\":{\"v\":\"x\",\"kind\":\"square\",\"side\":1}}", /* a string v: a circle */
        "{\"s\":{\"side\":1,\"kind\":\"circle\"}}",             /* a side: a square */
        "{\"s\":{\"kind\":\"tri\",\"r\":1}}",                   /* no such kind */
        "{\"s\":{\"kind\":\"circle\",\"r\":1,\"r\":2}}",        /* twice */
        "{\"s\":{\"v\":[\"x\"],\"kind\":\"box\",\"side\":1}}",  /* integers */
        "{\"s\":{\"c\":[1]}}",                                  /* no such key */
    };
    CHECK_LISTS(sc, ok, bad);
    /* no dead end offered: once a string v made it a circle, a square's
     * kind does not even start */
    jg_state s;
    jg_init_schema(&s, sc);
    const char *circle = "{\"s\":{\"v\":\"x\",\"kind\":\"c",
               *square = "{\"s\":{\"v\":\"x\",\"kind\":\"s";
    CHECK(jg_feed(&s, circle, strlen(circle)));
    jg_init_schema(&s, sc);
    CHECK(!jg_feed(&s, square, strlen(square)));
    jg_schema_free(sc);
}

/* Lengths in characters (a UTF-8 character, an escape, a surrogate pair's
 * two escapes: one each), item counts, and a minimum of 0 ruling out a sign. */
static const char RANGES[] =
    "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":2,"
    "\"maxLength\":3},\"a\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0},"
    "\"minItems\":1,\"maxItems\":2},\"x\":{\"type\":\"number\",\"exclusiveMinimum\":0},"
    "\"e\":{\"type\":\"array\",\"maxItems\":0},\"w\":{\"type\":\"string\",\"minLength\":3,"
    "\"maxLength\":2}},\"required\":[\"s\",\"a\"]}";

TEST(json_schema_holds_lengths_counts_and_signs) {
    jg_schema *sc = schema_of(RANGES);
    CHECK(sc);
    const char *ok[] = {
        "{\"s\":\"ab\",\"a\":[1]}",
        "{\"s\":\"a\\u00e9c\",\"a\":[0,2]}",
        "{\"s\":\"\xC3\xA9\\n\",\"a\":[3]}",
        "{\"s\":\"\\ud83d\\ude00x\",\"a\":[1]}",
        "{\"s\":\"\xF0\x9F\x98\x80\xC3\xA9\xE4\xB8\xAD\",\"a\":[10],\"x\":0.5,\"e\":[]}",
        "{\"a\":[ 1 , 2 ],\"s\":\"abc\",\"w\":[1,\"q\"]}", /* no length fits: any value */
    };
    const char *bad[] = {
        "{\"s\":\"a\",\"a\":[1]}",                                /* one character */
        "{\"s\":\"abcd\",\"a\":[1]}",                             /* four */
        "{\"s\":\"\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\",\"a\":[1]}", /* four, in eight bytes */
        "{\"s\":\"\\u00e9\",\"a\":[1]}",                          /* one, in six */
        "{\"s\":\"ab\",\"a\":[]}",                                /* no item */
        "{\"s\":\"ab\",\"a\":[1,2,3]}",                           /* three */
        "{\"s\":\"ab\",\"a\":[-1]}",                              /* a sign */
        "{\"s\":\"ab\",\"a\":[1],\"x\":-2}",                      /* ... */
        "{\"s\":\"ab\",\"a\":[1],\"e\":[1]}",                     /* no item allowed */
    };
    CHECK_LISTS(sc, ok, bad);
    jg_schema_free(sc);
}

/* Patterns and formats hold the string's value, its escapes undone. */
static const char PATTERNS[] =
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":"
    "\"^[A-Z]{2}-\\\\d{3}$\"},\"q\":{\"type\":\"string\",\"pattern\":\"^\\\"\\u00e9\\\\\\\\"
    "\\\\n?\\uD83D\\uDE00?$\"},\"d\":{\"type\":\"string\",\"format\":\"date\"},\"f\":{"
    "\"type\":\"string\",\"format\":\"no-such\",\"pattern\":\"(?=x)\"}},\"required\":[\"id\"]}";

TEST(json_schema_holds_patterns_and_formats) {
    jg_schema *sc = schema_of(PATTERNS);
    CHECK(sc);
    const char *ok[] = {
        "{\"id\":\"AB-123\"}",
        "{\"id\":\"\\u0041B-123\"}", /* an escaped A */
        "{\"id\":\"ZZ-000\",\"q\":\"\\\"\xC3\xA9\\\\\"}",
        "{\"id\":\"ZZ-000\",\"q\":\"\\\"\\u00E9\\\\\\n\\ud83d\\ude00\"}",
        "{\"id\":\"ZZ-000\",\"q\":\"\\\"\xC3\xA9\\u005c\xF0\x9F\x98\x80\"}",
        "{\"d\":\"2024-02-29\",\"id\":\"AB-123\"}",
        "{\"id\":\"AB-123\",\"f\":\"anything\"}", /* neither held: a free string */
    };
    const char *bad[] = {
        "{\"id\":\"AB-12\"}",
        "{\"id\":\"ab-123\"}",
        "{\"id\":\"AB-1234\"}",
        "{\"id\":\"AB-123\",\"q\":\"\\\"e\\\\\"}",
        "{\"id\":\"AB-123\",\"q\":\"\\\"\xC3\xA9\\\\\\t\"}",
        "{\"id\":\"AB-123\",\"q\":\"\\\"\xC3\xA9\\\\\\ud83d\\ude01\"}",
        "{\"id\":\"AB-123\",\"d\":\"2024-2-29\"}",
        "{\"id\":\"AB-123\",\"d\":\"2024-02-29T00:00:00Z\"}",
    };
    CHECK_LISTS(sc, ok, bad);
    /* no prefix the pattern cannot finish */
    jg_state s;
    jg_init_schema(&s, sc);
    CHECK(jg_feed(&s, "{\"id\":\"AB", 9));
    CHECK(!jg_feed(&s, "C", 1));
    jg_schema_free(sc);
}

/* Some bytes of alphabet, at most depth of them, finish the object from s. */
static bool finishes_with(const jg_state *s, const char *alphabet, int depth) {
    for (const char *b = alphabet; *b; b++) {
        jg_state t = *s;
        if (jg_feed(&t, b, 1) &&
            (jg_done(&t) || (depth > 1 && finishes_with(&t, alphabet, depth - 1))))
            return true;
    }
    return false;
}

/* A pattern and a length range held together: a slug of at most 5
 * characters cannot end in a hyphen at the fifth; one that must be
 * "ababa" cannot stop at "ab"; no value fitting both: a free value; and
 * from every prefix of up to 5 bytes over "ab-\\u06" the value is taken
 * or finished within 12 more bytes (no dead end). */
TEST(json_schema_holds_patterns_with_lengths) {
    static const struct {
        const char *kw, *ok[3], *bad[3];
    } cases[] = {
        {"\"pattern\":\"^[a-z]+(-[a-z]+)*$\",\"maxLength\":5",
         {"{\"s\":\"abcde\"}", "{\"s\":\"a-b-c\"}", "{\"s\":\"\\u0061b\"}"},
         {"{\"s\":\"abcd-", "{\"s\":\"abcdef", "{\"s\":\"ab\\u002d\\u0063d\\u002d"}},
        {"\"pattern\":\"^(ab|ababa)$\",\"minLength\":3",
         {"{\"s\":\"ababa\"}", "{\"s\":\"ab\\u0061ba\"}"},
         {"{\"s\":\"ab\"", "{\"s\":\"ababab"}},
        {"\"pattern\":\"^a*-?$\",\"minLength\":2,\"maxLength\":3",
         {"{\"s\":\"aa\"}", "{\"s\":\"a-\"}", "{\"s\":\"aa-\"}"},
         {"{\"s\":\"-", "{\"s\":\"a\"", "{\"s\":\"aaa-"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char schema[256];
        snprintf(schema, sizeof schema,
                 "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",%s}}}",
                 cases[i].kw);
        jg_schema *sc = schema_of(schema);
        CHECK(sc);
        jg_state s;
        for (int k = 0; k < 3 && cases[i].ok[k]; k++)
            CHECKF(schema_accepts(sc, cases[i].ok[k]), "%s: rejected %s", cases[i].kw,
                   cases[i].ok[k]);
        for (int k = 0; k < 3 && cases[i].bad[k]; k++) {
            jg_init_schema(&s, sc);
            CHECKF(!jg_feed(&s, cases[i].bad[k], strlen(cases[i].bad[k])), "%s: took %s",
                   cases[i].kw, cases[i].bad[k]);
        }
        const char alpha[] = "ab-\\u06";
        for (int len = 0, total = 1; len <= 5; len++, total *= 7)
            for (int code = 0; code < total; code++) {
                char t[8];
                for (int k = 0, c = code; k < len; k++, c /= 7) t[k] = alpha[c % 7];
                jg_init_schema(&s, sc);
                CHECK(jg_feed(&s, "{\"s\":\"", 6));
                if (!jg_feed(&s, t, (size_t)len)) continue;
                CHECKF(finishes_with(&s, "ab-\"}\\u0612", 12), "%s: '%.*s' not finished",
                       cases[i].kw, len, t);
            }
        jg_schema_free(sc);
    }
    jg_schema *sc = schema_of("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\","
                              "\"pattern\":\"^(ab|ababa)$\",\"minLength\":3,\"maxLength\":4}}}");
    CHECK(sc && schema_accepts(sc, "{\"s\":[1]}")); /* no value fits both: free */
    jg_schema_free(sc);
}

/* A \u escape's digits, each as it comes, leave open a character the
 * pattern takes (a surrogate pair's whole), or are refused. */
TEST(json_schema_pattern_escapes_digit_by_digit) {
    jg_schema *sc = schema_of("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
                              "\"pattern\":\"^x(b|\\uD83D\\uDE00)$\"}}}");
    CHECK(sc);
    const char *ok[] = {"\\u006",        "\\u0062\"}", "\\uD", "\\uD83D", "\\uD83D\\uDE00\"}",
                        "\\ud83d\\ude0", "b\"}"};
    const char *bad[] = {"\\u01",          "\\u0063",      "\\uE",      "\\uD9", "\\uD83E",
                         "\\uD83D\\uDE01", "\\uD83D\\uDF", "\\uD83D\"", "c",     "b\\"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok + sizeof bad / sizeof *bad; i++) {
        bool want = i < sizeof ok / sizeof *ok;
        const char *t = want ? ok[i] : bad[i - sizeof ok / sizeof *ok];
        jg_state s;
        jg_init_schema(&s, sc);
        CHECK(jg_feed(&s, "{\"a\":\"x", 7));
        CHECKF(jg_feed(&s, t, strlen(t)) == want, "%s: %s", t, want ? "refused" : "taken");
    }
    jg_schema_free(sc);
}

/* Integers held to a range (and to multiples): every integer text from
 * -2000 to 2000 taken whole iff in range (and a multiple), and each of its
 * prefixes iff some such integer starts so (found by listing them). */
TEST(json_schema_holds_integer_bounds) {
    static const struct {
        const char *kw;
        int lo, hi, mult;
    } cases[] = {
        {"\"minimum\":-5,\"maximum\":12", -5, 12, 1},
        {"\"exclusiveMinimum\":0,\"exclusiveMaximum\":100", 1, 99, 1},
        {"\"minimum\":10,\"exclusiveMinimum\":true,\"maximum\":1e3", 11, 1000, 1},
        {"\"maximum\":-7.5,\"minimum\":-1200", -1200, -8, 1},
        {"\"minimum\":-0.5,\"maximum\":0.5", 0, 0, 1},
        {"\"minimum\":150,\"maximum\":160", 150, 160, 1},
        {"\"multipleOf\":7,\"minimum\":-30,\"maximum\":45", -30, 45, 7},
        {"\"multipleOf\":25,\"minimum\":-1999.5,\"maximum\":1999", -1999, 1999, 25},
        {"\"multipleOf\":10,\"minimum\":-9,\"maximum\":0", -9, 0, 10},
        {"\"multipleOf\":400,\"exclusiveMinimum\":-800,\"maximum\":1700", -799, 1700, 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char schema[256], text[64];
        snprintf(schema, sizeof schema,
                 "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\",%s}}}",
                 cases[i].kw);
        jg_schema *sc = schema_of(schema);
        CHECK(sc);
        int lo = cases[i].lo, hi = cases[i].hi;
        static char texts[4001][8]; /* the integers in range (multiples), written */
        int n_texts = 0, mult = cases[i].mult;
        for (int w = lo; w <= hi; w++)
            if (w % mult == 0) snprintf(texts[n_texts++], sizeof texts[0], "%d", w);
        for (int v = -2000; v <= 2000; v++) {
            snprintf(text, sizeof text, "{\"x\":%d}", v);
            CHECKF(schema_accepts(sc, text) == (v >= lo && v <= hi && v % mult == 0), "%s: %d",
                   cases[i].kw, v);
            char num[16];
            int len = snprintf(num, sizeof num, "%d", v);
            for (int l = 1; l <= len; l++) {
                bool want = false; /* some integer in range starts with num[0..l) */
                for (int w = 0; w < n_texts && !want; w++)
                    want = !strncmp(texts[w], num, (size_t)l);
                jg_state s;
                jg_init_schema(&s, sc);
                CHECK(jg_feed(&s, "{\"x\":", 5));
                CHECKF(jg_feed(&s, num, (size_t)l) == want, "%s: prefix %.*s", cases[i].kw, l, num);
            }
        }
        CHECK(!schema_accepts(sc, "{\"x\":1.0}") && !schema_accepts(sc, "{\"x\":-0.0}"));
        jg_schema_free(sc);
    }
    /* a range no integer meets: a free value; also one no multiple meets */
    jg_schema *sc = schema_of("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\","
                              "\"minimum\":3.2,\"maximum\":3.8}}}");
    CHECK(sc && schema_accepts(sc, "{\"x\":\"any\"}"));
    jg_schema_free(sc);
    sc = schema_of("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\","
                   "\"minimum\":1,\"maximum\":4,\"multipleOf\":5}}}");
    CHECK(sc && schema_accepts(sc, "{\"x\":\"any\"}"));
    jg_schema_free(sc);
    /* unbounded multiples: any prefix goes on (7 to 7000), whole only at a multiple; a
     * number's whole multiples are written as integers, a fraction's with at most its
     * digits after the point */
    sc = schema_of("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\","
                   "\"multipleOf\":1000},\"y\":{\"type\":\"number\",\"multipleOf\":5},"
                   "\"z\":{\"type\":\"number\",\"multipleOf\":0.5}}}");
    CHECK(sc);
    static const char *const yes[] = {"{\"x\":7000}", "{\"x\":-123000}", "{\"x\":0}",
                                      "{\"y\":-15}",  "{\"z\":0.5}",     "{\"z\":-2}"};
    static const char *const no[] = {"{\"x\":7}",  "{\"x\":1500}", "{\"x\":-0}",  "{\"y\":15.0}",
                                     "{\"y\":12}", "{\"y\":1e1}",  "{\"z\":0.3}", "{\"z\":0.50}"};
    for (size_t k = 0; k < sizeof yes / sizeof *yes; k++)
        CHECKF(schema_accepts(sc, yes[k]), "%s", yes[k]);
    for (size_t k = 0; k < sizeof no / sizeof *no; k++)
        CHECKF(!schema_accepts(sc, no[k]), "%s", no[k]);
    jg_state st;
    jg_init_schema(&st, sc);
    const char *deep = "{\"x\":-999999999999999"; /* 15 digits: only ...000 at 18 goes on */
    CHECK(jg_feed(&st, deep, strlen(deep)));
    jg_state more = st;
    CHECK(!jg_feed(&more, "9", 1) && jg_feed(&st, "000}", 4) && jg_done(&st));
    jg_schema_free(sc);
}

/* A fraction's multipleOf: every text of a number from -20 to 20 with up
 * to three digits after the point, taken whole iff it is a multiple in
 * range written with no more digits after the point than the step has
 * (and not -0), every prefix taken iff one such text starts with it; an
 * integer with a fractional step: the integers it makes whole multiples
 * of. Exact arithmetic in thousandths as the oracle. */
TEST(json_schema_holds_fractional_multiples) {
    static const struct {
        const char *kw;
        int lo, hi, step, dec; /* in thousandths; digits after the step's point */
        bool integer;
    } cases[] = {
        {"\"multipleOf\":0.25,\"minimum\":-3,\"maximum\":7.5", -3000, 7500, 250, 2, false},
        {"\"multipleOf\":0.1,\"exclusiveMinimum\":-1,\"maximum\":2", -999, 2000, 100, 1, false},
        {"\"multipleOf\":2.5,\"minimum\":-20,\"maximum\":20", -20000, 20000, 2500, 1, false},
        {"\"multipleOf\":0.05,\"minimum\":0.3,\"maximum\":0.6", 300, 600, 50, 2, false},
        {"\"multipleOf\":1.5,\"minimum\":-20,\"maximum\":20", -20000, 20000, 3000, 0, true},
    };
    static char texts[80000][12];
    int n_texts = 0;
    for (int v = -20000; v <= 20000; v++) /* every number, written with 0 to 3 decimals */
        for (int dd = 0; dd <= 3; dd++) {
            int a = v < 0 ? -v : v, p10 = dd == 0 ? 1000 : dd == 1 ? 100 : dd == 2 ? 10 : 1;
            if (a % p10) continue;
            if (dd == 0)
                snprintf(texts[n_texts++], 12, "%s%d", v < 0 ? "-" : "", a / 1000);
            else
                snprintf(texts[n_texts++], 12, "%s%d.%0*d", v < 0 ? "-" : "", a / 1000, dd,
                         a % 1000 / p10);
        }
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char schema[256], text[40];
        snprintf(schema, sizeof schema,
                 "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"%s\",%s}}}",
                 cases[i].integer ? "integer" : "number", cases[i].kw);
        jg_schema *sc = schema_of(schema);
        CHECK(sc);
        static bool good[80000];
        for (int t = 0; t < n_texts; t++) {
            const char *dot = strchr(texts[t], '.');
            int dd = dot ? (int)strlen(dot + 1) : 0;
            double v = atof(texts[t]);
            int th = (int)lround(v * 1000);
            good[t] = dd <= cases[i].dec && th >= cases[i].lo && th <= cases[i].hi &&
                      th % cases[i].step == 0 && strcmp(texts[t], "-0") != 0 &&
                      !(texts[t][0] == '-' && th == 0);
            snprintf(text, sizeof text, "{\"x\":%.11s}", texts[t]);
            CHECKF(schema_accepts(sc, text) == good[t], "%s: %.11s", cases[i].kw, texts[t]);
        }
        for (int t = 0; t < n_texts; t += 7) /* prefixes */
            for (size_t l = 1; l <= strlen(texts[t]); l++) {
                bool want = false;
                for (int u = 0; u < n_texts && !want; u++)
                    want = good[u] && !strncmp(texts[u], texts[t], l);
                jg_state s;
                jg_init_schema(&s, sc);
                CHECK(jg_feed(&s, "{\"x\":", 5));
                CHECKF(jg_feed(&s, texts[t], l) == want, "%s: prefix %.*s", cases[i].kw, (int)l,
                       texts[t]);
            }
        jg_schema_free(sc);
    }
}

/* Numbers held to a range, against jansson and a double comparison as the
 * oracle: every text of up to 6 characters over "-0159." taken whole iff it
 * is a number in range (an integer, for integers; never a negative zero),
 * every prefix of one taken, and every prefix taken finished within five
 * more bytes. */
static bool range_oracle(const char *num, bool integer, double lo, bool lo_x, double hi,
                         bool hi_x) {
    char doc[32];
    snprintf(doc, sizeof doc, "{\"x\":%s}", num);
    json_t *j = json_loads(doc, 0, NULL);
    json_t *x = json_object_get(j, "x");
    bool ok = json_is_number(x) && (!integer || json_is_integer(x));
    double v = json_number_value(x);
    ok &= num[0] != '-' || v != 0; /* never a negative zero */
    json_decref(j);
    return ok && (lo_x ? v > lo : v >= lo) && (hi_x ? v < hi : v <= hi);
}

/* Some bytes, at most depth of them, finish the object from s. */
static bool finishes(const jg_state *s, int depth) {
    for (const char *b = "0123456789.}"; *b; b++) {
        jg_state t = *s;
        if (jg_feed(&t, b, 1) && (jg_done(&t) || (depth > 1 && finishes(&t, depth - 1))))
            return true;
    }
    return false;
}

TEST(json_schema_holds_number_bounds) {
    static const struct {
        const char *kw;
        bool integer;
        double lo, hi;
        bool lo_x, hi_x;
    } cases[] = {
        {"\"minimum\":0,\"maximum\":1", false, 0, 1, false, false},
        {"\"exclusiveMinimum\":0,\"exclusiveMaximum\":1", false, 0, 1, true, true},
        {"\"minimum\":-1.5,\"maximum\":9.05", false, -1.5, 9.05, false, false},
        {"\"exclusiveMinimum\":-0.05,\"maximum\":0.5", false, -0.05, 0.5, true, false},
        {"\"minimum\":0.15,\"maximum\":0.15", false, 0.15, 0.15, false, false},
        {"\"exclusiveMaximum\":10", false, -INFINITY, 10, false, true},
        {"\"minimum\":-5,\"maximum\":11", true, -5, 11, false, false},
        {"\"maximum\":-1,\"minimum\":-150", true, -150, -1, false, false},
        {"\"maximum\":-1,\"minimum\":-9.5", false, -9.5, -1, false, false},
    };
    const char alpha[] = "-0159.";
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char schema[256];
        snprintf(schema, sizeof schema,
                 "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"%s\",%s}}}",
                 cases[i].integer ? "integer" : "number", cases[i].kw);
        jg_schema *sc = schema_of(schema);
        CHECK(sc);
        int in_range = 0;
        for (int len = 1; len <= 6; len++) {
            int total = 1;
            for (int k = 0; k < len; k++) total *= 6;
            for (int code = 0; code < total; code++) {
                char num[8], doc[32];
                for (int k = 0, c = code; k < len; k++, c /= 6) num[k] = alpha[c % 6];
                num[len] = 0;
                bool want = range_oracle(num, cases[i].integer, cases[i].lo, cases[i].lo_x,
                                         cases[i].hi, cases[i].hi_x);
                in_range += want;
                snprintf(doc, sizeof doc, "{\"x\":%s}", num);
                CHECKF(schema_accepts(sc, doc) == want, "%s: %s", cases[i].kw, num);
                jg_state s;
                jg_init_schema(&s, sc);
                CHECK(jg_feed(&s, "{\"x\":", 5));
                bool fed = jg_feed(&s, num, (size_t)len);
                CHECKF(fed || !want, "%s: prefix %s refused", cases[i].kw, num);
                CHECKF(!fed || finishes(&s, 5), "%s: %s not finished", cases[i].kw, num);
            }
        }
        CHECKF(in_range > 2, "%s: %d in range", cases[i].kw, in_range);
        jg_schema_free(sc);
    }
}

/* The mask in a union of objects, whose keys and values narrow it. */
TEST(json_schema_mask_equals_feeding_each_token_in_unions) {
    schema_walk("{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[{\"type\":\"object\","
                "\"properties\":{\"a\":{\"const\":\"a\"},\"b\":{\"type\":\"number\"}},"
                "\"required\":[\"a\"]},{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":["
                "\"b\",true]},\"b\":{\"type\":\"string\"}},\"required\":[\"a\",\"b\"]}]}},"
                "\"required\":[\"a\"]}",
                31, 8, "union walk");
}

/* The mask in strings with patterns: every token walked (plain text is no
 * longer one set), escapes and multi-byte characters included. */
TEST(json_schema_mask_equals_feeding_each_token_with_patterns) {
    schema_walk("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
                "\"^(ab|\\u00e9)+-?[01]{0,2}$\"},\"b\":{\"type\":\"array\",\"items\":{\"type\":"
                "\"string\",\"pattern\":\"\\n|^b\"}}},\"required\":[\"a\",\"b\"]}",
                29, 8, "pattern walk");
}

/* The mask where a string's length is bounded: plain tokens are allowed as
 * a set only as far as they fit. */
TEST(json_schema_mask_equals_feeding_each_token_with_patterns_and_lengths) {
    schema_walk("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":"
                "\"^(ab|\\u00e9)+-?$\",\"maxLength\":4},\"b\":{\"type\":\"string\",\"pattern\":"
                "\"^[ab1]*$\",\"minLength\":3}},\"required\":[\"a\",\"b\"]}",
                41, 8, "pattern length walk");
}

TEST(json_schema_mask_equals_feeding_each_token_with_integer_bounds) {
    schema_walk("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{"
                "\"type\":\"integer\",\"minimum\":-3,\"maximum\":115}},\"b\":{\"type\":"
                "\"integer\",\"exclusiveMinimum\":11,\"maximum\":12}},\"required\":[\"a\",\"b\"]}",
                37, 8, "integer walk");
}

TEST(json_schema_mask_equals_feeding_each_token_with_lengths) {
    schema_walk("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":2},"
                "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1,"
                "\"maxLength\":3},\"maxItems\":2}},\"required\":[\"a\",\"b\"]}",
                23, 8, "length walk");
}

/* Plain text held to a whole pattern (structured outputs' regex and
 * choice: jg_init_regex): random walks through the tokens the mask allows,
 * the mask checked at every step against feeding each token (bytes as they
 * are, no JSON: quotes, backslashes, partial characters), each walk ending
 * only where the text written matches, which the automaton then accepts
 * (or where this small vocabulary has no token to go on). */
TEST(json_regex_raw_text_mask_equals_feeding_each_token) {
    static const char *const patterns[] = {
        "^(?:-?\\d+(\\.\\d+)?(e1)?)$",
        "^(?:true|null|tr|a\"b|\\{\\})$", /* a choice: literals escaped */
        "^(?:[ab\"\\\\{}:]{2,6})$",
        "^(?:(\xC3\xA9|a)+\\n?)$",
    };
    int eos = 0, pick[NV], n = 0, dead_ends = 0;
    jg_vocab *v = jg_vocab_new(NV, vocab_bytes, NULL, &eos, 1);
    for (size_t p = 0; p < sizeof patterns / sizeof *patterns; p++) {
        char why[160];
        jr_dfa *re = jr_compile(patterns[p], strlen(patterns[p]), JR_MAX_STATES, why, sizeof why);
        CHECKF(re, "%s: %s", patterns[p], why);
        if (!re) continue;
        jg_state s;
        jg_init_regex(&s, re);
        CHECK(!jg_done(&s) || p == 3);
        uint64_t x = 0x9e3779b97f4a7c15ull + p;
        int completed = 0, steps = 0;
        char text[256];
        size_t len = 0;
        for (; steps < 3000 && completed < 20; steps++) {
            check_mask(v, &s, eos, pick, &n, &dead_ends, patterns[p]);
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int id = n ? pick[x % (uint64_t)n] : eos;
            if (id == eos && !jg_done(&s)) { /* a dead end of this vocabulary ("nu", no "l") */
                jg_init_regex(&s, re);
                len = 0;
                continue;
            }
            if (id == eos || len + 8 > sizeof text) {
                CHECKF(jg_done(&s) || len + 8 > sizeof text, "%s: ended on '%.*s'", patterns[p],
                       (int)len, text);
                if (!jg_done(&s)) { /* too long to keep: start over */
                    jg_init_regex(&s, re);
                    len = 0;
                    continue;
                }
                /* the automaton from the start agrees: it takes the text */
                int st = 0;
                for (size_t i = 0; i < len && jr_live(st); i++)
                    st = jr_step(re, st, (uint8_t)text[i]);
                CHECK(jr_live(st) && jr_accepts(re, st));
                completed++;
                jg_init_regex(&s, re);
                len = 0;
                continue;
            }
            CHECK(jg_feed_token(v, &s, id));
            memcpy(text + len, VOCAB[id], strlen(VOCAB[id]));
            len += strlen(VOCAB[id]);
        }
        CHECKF(completed == 20, "%s: %d texts in %d steps", patterns[p], completed, steps);
        jr_free(re);
    }
    jg_vocab_free(v);
}
