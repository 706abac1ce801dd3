/* test_json_calls.c — tool calls held to their tools' schemas
 * (json_calls.c): texts taken and refused as a whole, the forms' clashes
 * refused at compile time, and random walks through the mask (checked at
 * every step against feeding each token) whose outputs the output parser,
 * an independent reader of the same syntax, must read back as calls of the
 * offered tools with arguments their schemas take. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_grammar.h"
#include "engine/json_internal.h"
#include "recipe/output_parser.h"

static const char WEATHER[] = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\","
                              "\"maxLength\":6},\"days\":{\"type\":\"integer\",\"minimum\":1,"
                              "\"maximum\":7}},\"required\":[\"city\"],\"additionalProperties\":"
                              "false}";

#define H_FIRST(n) "{\"name\": \"" n "\", \"arguments\": "
#define H_NEXT(n)  "\n<tool_call>\n" H_FIRST(n)
#define H_SUFFIX   "}\n</tool_call>"

/* Hermes after `<tool_call>\n`: get_weather (schema) and get_time (any
 * object), at most max calls. */
static jg_calls *hermes(int max) {
    jg_call_form f[2] = {
        {H_FIRST("get_weather"), H_NEXT("get_weather"), H_SUFFIX, WEATHER},
        {H_FIRST("get_time"), H_NEXT("get_time"), H_SUFFIX, NULL},
    };
    char why[200];
    jg_calls *c = jg_calls_compile(f, 2, "", max, why, sizeof why);
    if (!c) fprintf(stderr, "  hermes forms: %s\n", why);
    return c;
}

/* 1: taken and complete; 0: taken, not complete; -1: refused. */
static int verdict(const jg_calls *c, const char *text) {
    jg_state s;
    jg_init_calls(&s, c);
    if (!jg_feed(&s, text, strlen(text))) return -1;
    return jg_done(&s);
}

/* A text and its verdict. */
typedef struct verdict_case {
    const char *text;
    int want;
} verdict_case;

static void check_verdicts(const jg_calls *c, const verdict_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++)
        CHECKF(verdict(c, cases[i].text) == cases[i].want, "case %zu [%s]: %d, want %d", i,
               cases[i].text, verdict(c, cases[i].text), cases[i].want);
}

#define W1 H_FIRST("get_weather") "{\"city\": \"Paris\"}" H_SUFFIX
#define T1 H_FIRST("get_time") "{\"zone\": [1, {\"x\": null}]}" H_SUFFIX

TEST(json_calls_take_and_refuse) {
    jg_calls *c = hermes(3);
    CHECK(c);
    static const verdict_case cases[] = {
        {W1, 1},
        {T1, 1},
        {W1 "\n<tool_call>\n" H_FIRST("get_time") "{}" H_SUFFIX, 1},
        {W1 "\n<tool_call>\n" H_FIRST("get_weather") "{\"days\": 7, \"city\": \"Rome\"}" H_SUFFIX
                                                     "\n<tool_call>\n" H_FIRST(
                                                         "get_time") "{}" H_SUFFIX,
         1},
        {"", 0},
        {"{\"name\": \"get_w", 0},
        {H_FIRST("get_weather") "{\"city\": \"Paris\"}", 0},
        {H_FIRST("get_weather") "{\"city\": \"Paris\"}}\n</tool", 0},
        {W1 "\n<tool_call>\n", 0},
        {H_FIRST("get_x"), -1},                                       /* no such tool */
        {"{\"name\":\"get_weather\"", -1},                            /* not the form's spelling */
        {H_FIRST("get_weather") "{}", -1},                            /* city required */
        {H_FIRST("get_weather") "{\"city\": \"Paris!!\"", -1},        /* maxLength 6 */
        {H_FIRST("get_weather") "{\"city\": \"P\", \"days\": 8", -1}, /* maximum 7 */
        {H_FIRST("get_weather") "{\"city\": \"P\", \"x\"", -1},       /* no other property */
        {H_FIRST("get_time") "[]", -1},                               /* arguments are an object */
        {W1 " ", -1},                                                 /* nothing but a next call */
        {W1 W1, -1},
        {W1 "\n<tool_call>\n" H_FIRST("get_time") "{}" H_SUFFIX "\n<tool_call>\n" H_FIRST(
             "get_time") "{}" H_SUFFIX "\n",
         -1}, /* a fourth call */
    };
    check_verdicts(c, cases, sizeof cases / sizeof *cases);
    jg_calls_free(c);

    /* one call at most: complete after it, nothing more */
    c = hermes(1);
    CHECK(c);
    CHECK(verdict(c, W1) == 1 && verdict(c, W1 "\n") == -1);
    jg_calls_free(c);

    /* a named call the prompt opened (empty opener), DeepSeek V3's markers
     * with a closing text */
    jg_call_form v3 = {"", "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n",
                       "\n```<｜tool▁call▁end｜>", WEATHER};
    char why[200];
    c = jg_calls_compile(&v3, 1, "<｜tool▁calls▁end｜>", 4, why, sizeof why);
    CHECKF(c, "%s", why);
    if (!c) return;
    CHECK(verdict(c, "{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜>") == 0);
    CHECK(verdict(c, "{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>") == 1);
    CHECK(verdict(c, "{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜"
                     "tool▁sep｜>f\n```json\n{\"city\": \"\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁"
                     "end｜>") == 1);
    CHECK(verdict(c, "{\"city\": 1}") == -1);
    jg_calls_free(c);
}

TEST(json_calls_refuse_clashing_forms) {
    char why[200];
    jg_call_form same[2] = {{"a", "b", "", NULL}, {"a", "c", "", NULL}};
    CHECK(!jg_calls_compile(same, 2, "", 2, why, sizeof why) && strstr(why, "begins"));
    jg_call_form prefix[2] = {{"ab", "x", "", NULL}, {"abc", "y", "", NULL}};
    CHECK(!jg_calls_compile(prefix, 2, "", 2, why, sizeof why));
    jg_call_form close_clash[1] = {{"a", "z", "", NULL}};
    CHECK(!jg_calls_compile(close_clash, 1, "zz", 2, why, sizeof why)); /* next "z" begins "zz" */
    jg_call_form bad_schema[1] = {{"a", "b", "", "{\"type\":\"array\"}"}};
    CHECK(!jg_calls_compile(bad_schema, 1, "", 2, why, sizeof why) && strstr(why, "parameters"));
    CHECK(!jg_calls_compile(bad_schema, 0, "", 2, why, sizeof why));
}

/* ---- the mask ------------------------------------------------------------------ */

static const char *const PIECES[] = {
    "{\"name\": \"",
    "get_weather",
    "get_time",
    "\", \"arguments\": ",
    "get",
    "_time",
    "\"city\"",
    "Paris",
    "}\n",
    "</tool_call>",
    "<tool_call>",
    "\n<tool_call>\n",
    ": ",
    ", ",
    "\"days\": ",
    "\": \"",
    "\"}",
    "12",
    "\\n",
    "\\u00e9",
    "\xC3\xA9",
    "\xC3",
    "\xA9",
    "nu",
    "ll",
};
#define N_ASCII  96 /* '\n' and 0x20..0x7e */
#define N_PIECES ((int)(sizeof PIECES / sizeof *PIECES))
#define NV       (1 + N_ASCII + N_PIECES + 1) /* EOS, bytes, pieces, a control token */

/* A test vocabulary: id 0 end of sequence, then the printable bytes, then
 * pieces; past those, ids without bytes (control tokens). */
typedef struct piece_set {
    const char *const *p;
    int n;
} piece_set;

static const char *tok_of(const piece_set *set, int id, char *one) {
    if (id <= 0 || id > N_ASCII + set->n) return NULL;
    if (id <= N_ASCII) {
        one[0] = id == 1 ? '\n' : (char)(0x20 + id - 2);
        one[1] = 0;
        return one;
    }
    return set->p[id - 1 - N_ASCII];
}

static char *vocab_bytes(void *ctx, int id, size_t *len) {
    char one[2];
    const char *t = tok_of(ctx, id, one);
    if (!t) return NULL;
    *len = strlen(t);
    return strdup(t);
}

static const piece_set HERMES_SET = {PIECES, N_PIECES};

static const char *tok(int id, char *one) {
    return tok_of(&HERMES_SET, id, one);
}

/* The mask at s against feeding each token by itself; the allowed ids. */
#define MAX_VOCAB 256 /* the test vocabularies' ids, at most */

/* The mask at s against feeding each of the nv tokens by itself (control
 * tokens too), an end of sequence where s is complete or nothing else
 * continues; the allowed ids, ascending, into pick. */
static void mask_check(const jg_vocab *v, const jg_state *s, int nv, int *pick, int *n_pick) {
    float lg[MAX_VOCAB] = {0};
    jg_mask(v, s, lg);
    int n = 0;
    bool any = false, want[MAX_VOCAB];
    for (int id = 0; id < nv; id++) { /* id 0: the end of sequence */
        jg_state c = *s;
        want[id] = id == 0 ? jg_done(s) : jg_feed_token(v, &c, id);
        any |= want[id];
    }
    want[0] |= !any;
    for (int id = 0; id < nv; id++) {
        CHECKF(want[id] == (lg[id] == 0), "token %d: mask %d, fed %d (phase %d/%d/%d)", id,
               lg[id] == 0, want[id], s->cphase, s->dphase, s->dpos);
        if (lg[id] == 0) pick[n++] = id;
    }
    *n_pick = n;
}

typedef struct calls_seen {
    int n, errors, complete;
    char error[160];
    char names[64][32];
    di_buf args[64];
} calls_seen;

static void on_event(void *ctx, const outp_event *ev) {
    calls_seen *w = ctx;
    if (ev->kind == OUTP_EV_ERROR && !w->errors++)
        snprintf(w->error, sizeof w->error, "%s", ev->text);
    if (ev->kind == OUTP_EV_TOOL_START && w->n < 64) snprintf(w->names[w->n++], 32, "%s", ev->name);
    if (ev->kind == OUTP_EV_TOOL_ARGS && ev->index >= 0 && ev->index < 64)
        di_buf_add(&w->args[ev->index], ev->text, ev->len);
    if (ev->kind == OUTP_EV_TOOL_END) w->complete += ev->complete;
}

/* The output parser (cfg) reads what a walk wrote as `calls` calls, all
 * complete, no error, each of one of the two tools with arguments its
 * schema (weather's, or any object) takes whole. */
static void read_back(const outp_config *cfg, const char *text, size_t n, int calls,
                      const jg_schema *weather) {
    di_err err = {{0}};
    outp_parser *p = outp_new(cfg, &err);
    calls_seen w = {0};
    outp_feed(p, text, n, on_event, &w);
    outp_finish(p, on_event, &w);
    outp_free(p);
    CHECKF(w.n == calls && w.complete == calls && !w.errors,
           "%d calls (%d complete), %d errors (%s), want %d: [%.*s]", w.n, w.complete, w.errors,
           w.error, calls, (int)n, text);
    for (int i = 0; i < w.n && i < 64; i++) {
        bool is_w = !strcmp(w.names[i], "get_weather");
        CHECKF(is_w || !strcmp(w.names[i], "get_time"), "call %d: %s", i, w.names[i]);
        jg_state a;
        jg_init_schema(&a, is_w ? weather : NULL);
        CHECKF(jg_feed(&a, w.args[i].p, w.args[i].n) && jg_done(&a), "%s [%.*s]", w.names[i],
               (int)w.args[i].n, w.args[i].p);
        di_buf_free(&w.args[i]);
    }
}

/* After the prompt's `<tool_call>\n`. */
static const outp_config HERMES_FORCED = {
    .tools = true, .syntax = OUTP_SYNTAX_HERMES, .start_in_block = true};

/* Random walks through calls c over vocabulary set (nv ids), the mask
 * checked against feeding each token at every step, until `outputs`
 * outputs end; the parser (cfg) must read each back (read_back). */
static void forced_walk(const jg_calls *c, const piece_set *set, int nv, const outp_config *cfg,
                        uint64_t x, int outputs) {
    char why[160];
    jg_schema *weather = jg_schema_compile(WEATHER, strlen(WEATHER), why, sizeof why);
    CHECK(c && weather);
    int eos = 0, pick[MAX_VOCAB], n = 0;
    jg_vocab *v = jg_vocab_new(nv, vocab_bytes, (void *)set, &eos, 1);
    jg_state s;
    jg_init_calls(&s, c);
    di_buf out = {0};
    int completed = 0, steps = 0;
    for (; steps < 7000 * outputs && completed < outputs; steps++) {
        mask_check(v, &s, nv, pick, &n);
        CHECKF(n > 0, "no token after [%.*s]", (int)out.n, out.p);
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int id = pick[x % (uint64_t)n];
        if (id == eos) {
            CHECKF(jg_done(&s), "a dead end after [%.*s]", (int)out.n, out.p);
            completed++;
            read_back(cfg, out.p, out.n, s.ncalls, weather);
            out.n = 0;
            jg_init_calls(&s, c);
            continue;
        }
        char one[2];
        const char *t = tok_of(set, id, one);
        CHECK(jg_feed_token(v, &s, id));
        di_buf_add(&out, t, strlen(t));
    }
    CHECKF(completed == outputs, "%d outputs completed in %d steps", completed, steps);
    di_buf_free(&out);
    jg_vocab_free(v);
    jg_schema_free(weather);
}

TEST(json_calls_mask_equals_feeding_each_token) {
    jg_calls *c = hermes(2);
    forced_walk(c, &HERMES_SET, NV, &HERMES_FORCED, 29, 12);
    jg_calls_free(c);
}

/* ---- strict tools under tool_choice auto: calls after a trigger ---------------- */

/* Hermes as the model writes it unprompted: free text, `<tool_call>`, one
 * call a block, free text again. */
static jg_calls *hermes_lazy(void) {
    jg_call_form f[2] = {
        {"\n" H_FIRST("get_weather"), H_NEXT("get_weather"), H_SUFFIX, WEATHER},
        {"\n" H_FIRST("get_time"), H_NEXT("get_time"), H_SUFFIX, NULL},
    };
    char why[200];
    jg_calls *c = jg_calls_compile(f, 2, "", 1, why, sizeof why);
    if (c) jg_calls_set_trigger(c, "<tool_call>");
    return c;
}

#define LAZY_W1 "<tool_call>\n" W1

TEST(json_calls_after_a_trigger) {
    jg_calls *c = hermes_lazy();
    CHECK(c);
    static const verdict_case cases[] = {
        {"", 1},
        {"Sure, let me look that up.", 1},
        {"<tool_ca", 1}, /* a trigger's start is text */
        {"<tool_call>", 0},
        {LAZY_W1, 1},
        {"I'll check. " LAZY_W1 " Then " LAZY_W1 "\nDone.", 1},
        {"<tool<tool_call>\n" H_FIRST("get_time") "{}" H_SUFFIX, 1}, /* found after a false start */
        {"<tool_call>\n" H_FIRST("get_weather") "{\"city\": \"Paris\"}", 0},
        {"<tool_call>\n" H_FIRST("nope"), -1},
        {"<tool_call>\n" H_FIRST("get_weather") "{\"city\": 3", -1},
        {"<tool_call>{", -1}, /* the form's newline first */
    };
    check_verdicts(c, cases, sizeof cases / sizeof *cases);
    jg_calls_free(c);
}

/* The test vocabulary's control tokens: the trigger as a token of its own,
 * and one that is no marker of the calls. */
static const char *const CONTROLS[] = {"<tool_call>", "</think>"};
#define NVC (NV + 2)

static const char *ctok(int id, char *one) {
    return id >= NV ? CONTROLS[id - NV] : tok(id, one);
}

static char *control_bytes(void *ctx, int id, size_t *len) {
    (void)ctx;
    if (id < NV) return NULL;
    *len = strlen(CONTROLS[id - NV]);
    return strdup(CONTROLS[id - NV]);
}

/* Free text and its calls. */
static const outp_config HERMES_FREE = {.tools = true, .syntax = OUTP_SYNTAX_HERMES};

TEST(json_calls_after_a_trigger_mask_equals_feeding_each_token) {
    jg_calls *c = hermes_lazy();
    char why[160];
    jg_schema *weather = jg_schema_compile(WEATHER, strlen(WEATHER), why, sizeof why);
    CHECK(c && weather);
    int eos = 0;
    jg_vocab *v = jg_vocab_new(NVC, vocab_bytes, (void *)&HERMES_SET, &eos, 1);
    jg_vocab_add_controls(v, control_bytes, NULL);
    jg_state s;
    jg_init_calls(&s, c);
    di_buf out = {0};
    uint64_t x = 41;
    int completed = 0, with_calls = 0, blocks = 0, think_in_value = 0;
    for (int steps = 0; steps < 60000 && completed < 16; steps++) {
        int all[NVC], n = 0;
        mask_check(v, &s, NVC, all, &n);
        const int *pick = all + (n && !all[0]); /* the end aside */
        n -= (int)(pick - all);
        bool trigger = false, think = false; /* the two control tokens allowed */
        for (int k = 0; k < n; k++) trigger |= pick[k] == NV, think |= pick[k] == NV + 1;
        think_in_value += s.cphase == JG_CALLS_VALUE && think;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        bool free_text = jg_done(&s);
        if (free_text && (x % 64 == 0 || !n)) { /* the end */
            completed++;
            with_calls += blocks > 0;
            read_back(&HERMES_FREE, out.p, out.n, blocks, weather);
            out.n = blocks = 0;
            jg_init_calls(&s, c);
            continue;
        }
        CHECK(n > 0);
        int id = free_text && x % 8 == 1 && trigger ? NV : pick[(x >> 8) % (uint64_t)n];
        char one[2];
        const char *t = ctok(id, one);
        bool was_free = s.cphase == JG_CALLS_FREE;
        CHECK(jg_feed_token(v, &s, id));
        blocks += was_free && s.cphase != JG_CALLS_FREE;
        di_buf_add(&out, t, strlen(t));
    }
    CHECKF(completed == 16 && with_calls >= 4, "%d outputs, %d with calls", completed, with_calls);
    CHECK(think_in_value == 0);
    di_buf_free(&out);
    jg_vocab_free(v);
    jg_schema_free(weather);
    jg_calls_free(c);
}

/* ---- DSML (DeepSeek V4): parameters standing for the arguments' object ---- */

#define DS        "｜DSML｜"
#define D_INV(n)  "<" DS "invoke name=\"" n "\">\n"
#define D_INV_END "</" DS "invoke>\n"
#define D_CLOSE   "</" DS "tool_calls>"
#define D_P(k, str, v)                                                                             \
    "<" DS "parameter name=\"" k "\" string=\"" str "\">" v "</" DS "parameter>\n"

/* After `<｜DSML｜tool_calls>\n`: get_weather and get_time, up to max calls. */
static jg_calls *dsml(int max) {
    jg_call_form f[2] = {
        {D_INV("get_weather"), D_INV("get_weather"), D_INV_END, WEATHER},
        {D_INV("get_time"), D_INV("get_time"), D_INV_END, NULL},
    };
    char why[200];
    jg_calls *c = jg_calls_compile(f, 2, D_CLOSE, max, why, sizeof why);
    if (c) jg_calls_set_dsml(c);
    return c;
}

TEST(json_calls_dsml_take_and_refuse) {
    jg_calls *c = dsml(2);
    CHECK(c);
    static const verdict_case cases[] = {
        {D_INV("get_weather") D_P("city", "true", "Paris") D_INV_END D_CLOSE, 1},
        {D_INV("get_weather") D_P("days", "false", "3") D_P("city", "true", "a\"b<c")
             D_INV_END D_INV("get_time") D_INV_END D_CLOSE,
         1},
        {D_INV("get_weather") D_P("city", "false", "\"Rome\"") D_INV_END D_CLOSE, 1},
        {D_INV("get_time") D_P("note", "true", "a</" DS "b\n\\")
             D_P("n", "false", "[1, {\"x\": \"<\"}]") D_INV_END D_CLOSE,
         1},
        {D_INV("get_weather") D_P("city", "true", "Paris") D_INV_END, 0},
        {D_INV("get_weather") D_P("days", "true", "3"), -1},            /* an integer */
        {D_INV("get_weather") D_P("days", "false", "3") D_INV_END, -1}, /* city required */
        {D_INV("get_weather") D_P("city", "true", "Paris!!"), -1},      /* maxLength 6 */
        {D_INV("get_weather") D_P("town", "true", "x"), -1},            /* no such property */
        {D_INV("get_weather") D_P("city", "true", "a") D_P("city", "true", "b"), -1}, /* twice */
        {D_INV("get_time") "<" DS "parameter name=\"\"", -1},                         /* a name */
        {D_INV("get_time") D_P("x", "false", ""), -1},                                /* a value */
        {D_INV("get_time") D_P("x", "false", "\"a</" DS "parameter>\""), -1}, /* the tag in it */
        {D_INV("get_time") D_P("x", "false", "1 ") D_INV_END D_CLOSE, 1},
        {D_INV("get_time") D_INV_END D_INV("get_time") D_INV_END D_INV("get_time"), -1}, /* max 2 */
    };
    check_verdicts(c, cases, sizeof cases / sizeof *cases);
    jg_calls_free(c);
}

static const char *const D_PIECES[] = {
    D_INV("get_weather"),
    D_INV("get_time"),
    "<" DS "parameter name=\"",
    "\" string=\"true\">",
    "\" string=\"false\">",
    "</" DS "parameter>\n",
    D_INV_END,
    D_CLOSE,
    "city",
    "days",
    "<" DS,
    "</",
    "12",
    "Paris",
    "\xC3\xA9",
    "\\u00e9",
    "nu",
    "ll",
    "\"a\"",
    DS,
    DS "parameter>\n",
    DS "parameter name=\"",
    "/" DS "invoke>\n",
    "/" DS "tool_calls>",
};
/* -DDSML_SEED=S -DDSML_N=N: other and longer walks, by hand */
#ifndef DSML_SEED
#define DSML_SEED 17
#define DSML_N    12
#endif
#define N_DPIECES ((int)(sizeof D_PIECES / sizeof *D_PIECES))
#define NVD       (1 + N_ASCII + N_DPIECES)

static const piece_set DSML_SET = {D_PIECES, N_DPIECES};

/* After the prompt's `<｜DSML｜tool_calls>\n`. */
static const outp_config DSML_FORCED = {.tools = true, .start_in_block = true};

/* Random walks through the DSML calls, the mask checked against feeding
 * each token; the output parser must read every output back as the calls
 * written, with arguments the schemas take. */
TEST(json_calls_dsml_mask_equals_feeding_each_token) {
    jg_calls *c = dsml(2);
    forced_walk(c, &DSML_SET, NVD, &DSML_FORCED, DSML_SEED, DSML_N);
    jg_calls_free(c);
}

/* ---- structured output with tools offered: an answer or calls ------------------ */

static const char ANSWER[] = "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"}},"
                             "\"required\":[\"ok\"],\"additionalProperties\":false}";

TEST(json_calls_an_answer_or_calls) {
    jg_calls *c = hermes_lazy();
    char why[160];
    CHECK(c && jg_calls_set_answer(c, ANSWER, why, sizeof why));
    static const verdict_case cases[] = {
        {"{\"ok\": true}", 1},
        {" \n{\"ok\":false}", 1},
        {"{\"ok\": true", 0},
        {"", 0}, /* something must be written */
        {"{\"no\": 1}", -1},
        {"Sure: {\"ok\": true}", -1}, /* no free text */
        {"{\"ok\": true} and more", -1},
        {LAZY_W1, 1},
        {LAZY_W1 "\n" LAZY_W1, 1},
        {LAZY_W1 "{\"ok\": true}", -1}, /* calls, then no answer */
        {"<tool_call>\n" H_FIRST("get_time") "{\"zone\": 1}" H_SUFFIX, 1},
        {"<tool_ca", 0},
    };
    check_verdicts(c, cases, sizeof cases / sizeof *cases);
    CHECK(!jg_calls_set_answer(c, "{\"type\":\"array\"}", why, sizeof why));
    jg_calls_free(c);
}

/* Random walks: each output is the answer (its JSON the schema's) or calls
 * the parser reads back, with the JSON mode the server turns on. */
TEST(json_calls_an_answer_or_calls_mask_equals_feeding_each_token) {
    jg_calls *c = hermes_lazy();
    char why[160];
    jg_schema *weather = jg_schema_compile(WEATHER, strlen(WEATHER), why, sizeof why);
    jg_schema *answer = jg_schema_compile(ANSWER, strlen(ANSWER), why, sizeof why);
    CHECK(c && weather && answer && jg_calls_set_answer(c, ANSWER, why, sizeof why));
    int eos = 0, n = 0, pick[NVC];
    jg_vocab *v = jg_vocab_new(NVC, vocab_bytes, (void *)&HERMES_SET, &eos, 1);
    jg_vocab_add_controls(v, control_bytes, NULL);
    jg_state s;
    jg_init_calls(&s, c);
    di_buf out = {0};
    uint64_t x = 5;
    int completed = 0, answers = 0, blocks = 0;
    for (int steps = 0; steps < 60000 && completed < 16; steps++) {
        mask_check(v, &s, NVC, pick, &n);
        CHECK(n > 0);
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int id = pick[x % (uint64_t)n];
        if (id == eos) {
            CHECKF(jg_done(&s), "a dead end after [%.*s]", (int)out.n, out.p);
            completed++;
            const char *p = out.p;
            size_t len = out.n;
            while (len && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++, len--;
            if (len && *p == '{') { /* the answer, whole */
                answers++;
                jg_state a;
                jg_init_schema(&a, answer);
                CHECKF(jg_feed(&a, p, len) && jg_done(&a), "[%.*s]", (int)len, p);
            } else {
                outp_config cfg = {.tools = true, .syntax = OUTP_SYNTAX_HERMES, .json_mode = true};
                read_back(&cfg, out.p, out.n, blocks, weather);
            }
            out.n = blocks = 0;
            jg_init_calls(&s, c);
            continue;
        }
        char one[2];
        const char *t = ctok(id, one);
        bool outside = s.cphase == JG_CALLS_START || s.cphase == JG_CALLS_OPEN;
        CHECK(jg_feed_token(v, &s, id));
        blocks += outside && s.cphase != JG_CALLS_START && s.cphase != JG_CALLS_OPEN;
        di_buf_add(&out, t, strlen(t));
    }
    CHECKF(completed == 16 && answers > 0 && answers < 16, "%d outputs, %d answers", completed,
           answers);
    di_buf_free(&out);
    jg_vocab_free(v);
    jg_schema_free(weather);
    jg_schema_free(answer);
    jg_calls_free(c);
}
