/* test_grammar.c — GBNF grammars (src/engine/grammar.c, grammar_match.c):
 * texts taken and refused, grammars refused with their reasons, regular
 * grammars against the pattern automaton of json_regex.c (an independent
 * compiler) on every short string, nested brackets against a stack
 * recognizer, and the token mask against feeding each token to a fresh
 * matcher (caches kept, and started afresh at every step). */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/grammar.h"
#include "engine/json_grammar.h"
#include "engine/json_regex.h"
#include "harness.h"

/* The text is taken whole (1), is a prefix of one taken (0), or neither
 * (-1), by a fresh matcher. */
static int match_g(const gr_grammar *g, const char *text, size_t len) {
    gr_matcher *m = gr_matcher_new(g);
    int r = !gr_feed(m, text, len) ? -1 : gr_done(m) ? 1 : 0;
    gr_matcher_free(m);
    return r;
}

/* The same, compiling the grammar (-2: refused). */
static int match(const char *grammar, const char *text, size_t len) {
    char why[200];
    gr_grammar *g = gr_compile(grammar, strlen(grammar), why, sizeof why);
    int r = g ? match_g(g, text, len) : -2;
    gr_free(g);
    return r;
}

TEST(grammar_takes_and_refuses_texts) {
    static const char *const arith = "root ::= expr\n"
                                     "expr ::= term ([-+] term)*\n"
                                     "term ::= factor ([*/] factor)*\n"
                                     "factor ::= [0-9]+ | \"(\" expr \")\"\n";
    static const struct {
        const char *grammar, *text;
        int want;
    } cases[] = {
        {arith, "1+2*(3-4)", 1},
        {arith, "1+2*(3-4", 0},
        {arith, "1+2*(3-4))", -1},
        {arith, "", 0},
        {arith, "12", 1},
        {arith, "1++", -1},
        {"root ::= \"a\"{2,4}", "a", 0},
        {"root ::= \"a\"{2,4}", "aaaa", 1},
        {"root ::= \"a\"{2,4}", "aaaaa", -1},
        {"root ::= \"ab\"{3}", "ababab", 1},
        {"root ::= \"ab\"{3}", "ababa", 0},
        {"root ::= \"a\"{2,} \"b\"", "ab", -1},
        {"root ::= \"a\"{2,} \"b\"", "aaaaaaab", 1},
        {"root ::= \"a\"{,2} \"b\"", "aab", 1},
        {"root ::= \"a\"{,2} \"b\"", "aaab", -1},
        {"root ::= \"ab\"* \"c\"?", "", 1},
        {"root ::= \"ab\"* \"c\"?", "ababc", 1},
        {"root ::= \"ab\"* \"c\"?", "abc c", -1},
        {"root ::= (\"x\" | \"yz\")+ \".\"", "xyzx.", 1},
        {"root ::= (\"x\" | \"yz\")+ \".\"", ".", -1},
        {"root ::= [^\\n]+", "h\xC3\xA9llo \xF0\x9F\x98\x80", 1},
        {"root ::= [^\\n]+", "a\nb", -1},
        {"root ::= . .", "\xC3\xA9\xF0\x9F\x98\x80", 1},
        {"root ::= . .", "\xC3\xA9\xF0\x9F\x98", 0},
        {"root ::= [\xCE\xB1-\xCF\x89]+", "\xCE\xB1\xCE\xB2", 1}, /* [α-ω] */
        {"root ::= [\xCE\xB1-\xCF\x89]+",
         "\xCE\xB1"
         "a",
         -1},
        {"root ::= [\xCE\xB1-\xCF\x89]+", "\xCF\x8A", -1}, /* ϊ, past ω */
        {"root ::= \"\\x41\\u00e9\\U0001F600\\t\\\"\\\\\"", "A\xC3\xA9\xF0\x9F\x98\x80\t\"\\", 1},
        {"root ::= [\\]\\-a]+", "]-a", 1},
        {"root ::= [\\]\\-a]+", "b", -1},
        {"root ::= 'single' \"double\"", "singledouble", 1},
        {"# a comment\nroot ::= yes | no # another\nyes ::= \"yes\"\nno ::= \"no\"\n", "no", 1},
        {"root ::=\n  \"a\"\n  | \"b\" c\nc ::= \"c\"", "bc", 1}, /* rules over lines */
        {"root ::= \"a\" |", "", 1},
        {"root ::= x\nx ::= \"(\" x \")\" | \"\"", "((()))", 1},
        {"root ::= x\nx ::= \"(\" x \")\" | \"\"", "(()))", -1},
        {"root ::= [a-c]+ \"-\" [^a-c-]", "ab-\xE2\x82\xAC", 1},
        {"root ::= [a-c]+ \"-\" [^a-c-]", "ab-c", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int got = match(cases[i].grammar, cases[i].text, strlen(cases[i].text));
        CHECKF(got == cases[i].want, "%zu: '%s' on %s: %d, want %d", i, cases[i].text,
               cases[i].grammar, got, cases[i].want);
    }
}

TEST(grammar_refuses_bad_grammars_with_their_reasons) {
    static const struct {
        const char *grammar, *why;
    } cases[] = {
        {"root ::= x", "line 1: rule 'x' is used and not defined"},
        {"start ::= \"a\"", "no rule 'root'"},
        {"root ::= \"a\"\nroot ::= \"b\"", "line 2: rule 'root' is defined twice"},
        {"root ::= x\nx ::= x \"a\" | \"b\"", "rule 'x' is left-recursive"},
        {"root ::= x\nx ::= y \"a\" | \"c\"\ny ::= \"b\"? x", "is left-recursive"},
        {"root ::= (\"a\"?)*", "left-recursive"},
        {"root ::= x\nx ::= \"a\" x", "rule 'x' can never be completed"},
        {"root ::= \"abc", "line 1: a string literal is not closed"},
        {"root ::= [a-", "a character class is not closed"},
        {"root ::= (\"a\" | \"b\"", "a group is not closed"},
        {"root ::= \"a\")", "unexpected ')'"},
        {"root ::= [z-a]", "runs backwards"},
        {"root ::= \"\\q\"", "unknown escape"},
        {"root ::= \"\\x4\"", "\\x needs 2 hex digits"},
        {"root ::= \"\\uD800\"", "no Unicode scalar value"},
        {"root ::= \"a\"{3,2}", "n < m"},
        {"root ::= \"a\"{10001}", "a repetition count over 10000"},
        {"root ::= \"a\"{2", "malformed"},
        {"root ::= *", "unexpected '*'"},
        {"root ::= \"\"*", "a repetition of nothing"},
        {"root ::= <think> \"a\"", "token references"},
        {"root ::= \"a\" @", "unexpected '@'"},
        {"\"a\"", "expected a rule"},
        {"root ::= [^\\x01-\\U0010FFFF]", "matches nothing"},
        {"root ::= \"a\"{0,9999} \"b\"{0,9999} \"c\"{0,9999} \"d\"{0,9999} \"e\"{0,9999} "
         "\"f\"{0,9999} \"g\"{0,9999} \"h\"{0,9999} \"i\"{0,9999}",
         "too large"},
        {"root ::= \"a\"\n\n\nx ::= \"\\z\"", "line 4: unknown escape"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char why[200] = "";
        gr_grammar *g = gr_compile(cases[i].grammar, strlen(cases[i].grammar), why, sizeof why);
        CHECKF(!g && strstr(why, cases[i].why), "%zu: %s: got '%s', want '%s'", i, cases[i].grammar,
               g ? "(compiled)" : why, cases[i].why);
    }
}

/* Long chains of rules, each named before or after it is defined (a
 * grammar near the size limit compiles in linear time: name lookups and
 * the nullable / productive analysis by worklist; quadratic, this took tens
 * of seconds), and too many distinct classes refused. */
TEST(grammar_long_chains_compile) {
    enum { N = 30000 };
    for (int order = 0; order < 2; order++) {
        di_buf b = {0};
        char line[96];
        snprintf(line, sizeof line, "root ::= r%d\n", order ? N : 0);
        di_buf_adds(&b, line);
        for (int i = 0; i < N; i++) { /* r_i ::= "x" r_next | "b", r_end ::= "z" */
            int self = order ? N - i : i, next = order ? N - i - 1 : i + 1;
            snprintf(line, sizeof line, "r%d ::= \"x\" r%d | \"b\"\n", self, next);
            di_buf_adds(&b, line);
        }
        snprintf(line, sizeof line, "r%d ::= \"z\"\n", order ? 0 : N);
        di_buf_adds(&b, line);
        char why[200];
        gr_grammar *g = gr_compile(b.p, b.n, why, sizeof why);
        di_buf_free(&b);
        CHECKF(g, "%s", why);
        CHECK(match_g(g, "b", 1) == 1 && match_g(g, "xxb", 3) == 1 && match_g(g, "bx", 2) == -1);
        gr_free(g);
    }
    di_buf b = {0};
    di_buf_adds(&b, "root ::= ");
    int sets = 0; /* ASCII ranges, alone or with \x7E or \x7F: each a new byte set */
    for (int extra = 0; extra < 3; extra++)
        for (int lo = 1; lo <= 125; lo++)
            for (int hi = lo; hi <= 125 && sets <= GR_MAX_SETS; hi++, sets++) {
                char cls[40];
                snprintf(cls, sizeof cls, "[\\x%02x-\\x%02x%s] ", lo, hi,
                         extra == 1   ? "\\x7E"
                         : extra == 2 ? "\\x7F"
                                      : "");
                di_buf_adds(&b, cls);
            }
    char why[200] = "";
    gr_grammar *g = gr_compile(b.p, b.n, why, sizeof why);
    di_buf_free(&b);
    CHECKF(!g && strstr(why, "distinct byte sets"), "%s", g ? "(compiled)" : why);
}

/* Regular grammars and the same languages as patterns: on every string of
 * up to 6 bytes over an alphabet (a two-byte character's bytes apart too),
 * the grammar's matcher and the pattern's DFA agree at every prefix on
 * whether it can still be completed and whether it is complete. */
TEST(grammar_agrees_with_the_pattern_automaton) {
    static const struct {
        const char *grammar, *pattern;
    } pairs[] = {
        {"root ::= [a-b]+ (\"-\" [0-1]{2,3})?", "^[a-b]+(-[0-1]{2,3})?$"},
        {"root ::= (\"ab\" | \"a\" \"-\"?)* \"0\"", "^(ab|a-?)*0$"},
        {"root ::= [^-]{1,3} \"-\"", "^[^-]{1,3}-$"},
        {"root ::= . . \"a\"?", "^..a?$"},
        {"root ::= \"\xC3\xA9\"+ | [\xC3\xA9-\xC3\xAA]{2}", "^(\xC3\xA9+|[\xC3\xA9-\xC3\xAA]{2})$"},
        {"root ::= x y\nx ::= (\"a\" | \"b\")*\ny ::= \"b\" \"0\"{0,2} | \"-\"",
         "^[ab]*(b0{0,2}|-)$"},
    };
    static const char alpha[] = {'a', 'b', '-', '0', '1', '\xC3', '\xA9'};
    enum { NA = sizeof alpha, L = 6 };
    for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++) {
        char why[200];
        gr_grammar *g = gr_compile(pairs[p].grammar, strlen(pairs[p].grammar), why, sizeof why);
        CHECKF(g, "%s: %s", pairs[p].grammar, why);
        jr_dfa *d =
            jr_compile(pairs[p].pattern, strlen(pairs[p].pattern), JR_MAX_STATES, why, sizeof why);
        CHECKF(d, "%s: %s", pairs[p].pattern, why);
        gr_matcher *m = gr_matcher_new(g);
        long strings = 0, taken = 0;
        int digit[L] = {0};
        for (int len = 1; len <= L; len++) {
            memset(digit, 0, sizeof digit);
            for (;;) {
                int gs = gr_current(m), ds = 0;
                for (int k = 0; k < len; k++) {
                    uint8_t b = (uint8_t)alpha[digit[k]];
                    gs = gs >= 0 ? gr_next(m, gs, b) : -1;
                    ds = jr_live(ds) ? jr_step(d, ds, b) : JR_DEAD;
                    CHECKF((gs >= 0) == jr_live(ds), "%s: prefix of %d bytes: grammar %d",
                           pairs[p].grammar, k + 1, gs >= 0);
                }
                bool ga = gr_accepts(m, gs), da = jr_live(ds) && jr_accepts(d, ds);
                CHECKF(ga == da, "%s: whole string: grammar %d, pattern %d", pairs[p].grammar, ga,
                       da);
                strings++, taken += ga;
                int k = len - 1;
                while (k >= 0 && ++digit[k] == NA) digit[k--] = 0;
                if (k < 0) break;
            }
        }
        CHECKF(taken >= 3, "%s: %ld of %ld taken", pairs[p].grammar, taken, strings);
        gr_matcher_free(m);
        gr_free(g);
        jr_free(d);
    }
}

/* 1 balanced, 0 a prefix of a balanced text, -1 neither. */
static int brackets(const char *t, int n) {
    char st[64];
    int depth = 0;
    for (int i = 0; i < n; i++) {
        if (t[i] == '(' || t[i] == '[') {
            if (depth == 64) return -1;
            st[depth++] = t[i];
        } else if (t[i] == ')' || t[i] == ']') {
            if (!depth || st[depth - 1] != (t[i] == ')' ? '(' : '[')) return -1;
            depth--;
        }
    }
    return depth ? 0 : 1;
}

/* A recursive grammar against a stack recognizer on random texts. */
TEST(grammar_nested_brackets_agree_with_a_recognizer) {
    const char *text = "root ::= item*\n"
                       "item ::= \"(\" item* \")\" | \"[\" item* \"]\" | \"x\"\n";
    char why[200];
    gr_grammar *g = gr_compile(text, strlen(text), why, sizeof why);
    CHECKF(g, "%s", why);
    gr_matcher *m = gr_matcher_new(g);
    unsigned rng = 5;
    int whole = 0;
    for (int trial = 0; trial < 20000; trial++) {
        char t[40];
        int n = 1 + (int)(harness_lcg(&rng) % 24);
        for (int i = 0; i < n; i++) t[i] = "([x])"[harness_lcg(&rng) % (i < n / 2 ? 3 : 5)];
        int s = gr_current(m), k = 0;
        for (; k < n && s >= 0; k++) {
            s = gr_next(m, s, (uint8_t)t[k]);
            int want = brackets(t, k + 1);
            CHECKF((s >= 0) == (want >= 0), "'%.*s': grammar %d, recognizer %d", k + 1, t, s >= 0,
                   want);
        }
        if (s >= 0) {
            CHECKF(gr_accepts(m, s) == (brackets(t, n) == 1), "'%.*s'", n, t);
            whole += gr_accepts(m, s);
        }
    }
    CHECKF(whole > 100, "%d balanced", whole);
    gr_matcher_free(m);
    gr_free(g);
}

/* Tokens over the grammars below: multi-byte and partial characters,
 * brackets, a control token (no bytes) and an end-of-sequence token. */
static const char *const VOCAB[] = {
    NULL, /* 0: EOS */
    ")",         "]",    ";",
    "))",        "x)",   "(",
    "((",        "[",    "x",
    "xx",        "(x",   "1",
    "2",         "+",    "*",
    "12",        "+1",   " ",
    "\xC3",      "\xA9", "\xC3\xA9",
    "\xC3\xA9x", "ab",   "a",
    "b",         "-",    "\n",
    NULL, /* a control token */
    "\xE2\x82",  "\xAC", "\xE2\x82\xAC",
};
#define NV ((int)(sizeof VOCAB / sizeof *VOCAB))

static char *vocab_bytes(void *ctx, int id, size_t *len) {
    (void)ctx;
    if (!VOCAB[id]) return NULL;
    *len = strlen(VOCAB[id]);
    return strdup(VOCAB[id]);
}

/* Random walks through the tokens the mask allows (past 30 bytes, half the
 * time the first: closers and the end come first); at every step the mask
 * equals, token by token, feeding the text so far and the token to a
 * fresh matcher (the end of sequence: the text is complete, or nothing
 * else goes on), and a walk that ends is taken whole. With budget 1 the
 * caches start afresh at every mask. */
TEST(grammar_mask_equals_feeding_each_token) {
    static const char *const grammars[] = {
        "root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= factor (\"*\" factor)*\n"
        "factor ::= [0-9]+ | \"(\" expr \")\"\n",
        "root ::= item+ \";\"\nitem ::= \"(\" item* \")\" | \"[\" item* \"]\" | \"x\"\n",
        "root ::= ([a-b\xC3\xA9\xE2\x82\xAC]+ (\" \" | \"\\n\"))* \"-\"?\n",
    };
    int eos = 0;
    jg_vocab *v = jg_vocab_new(NV, vocab_bytes, NULL, &eos, 1);
    for (size_t gi = 0; gi < sizeof grammars / sizeof *grammars; gi++)
        for (int budget = 0; budget < 2; budget++) {
            char why[200];
            gr_grammar *g = gr_compile(grammars[gi], strlen(grammars[gi]), why, sizeof why);
            CHECKF(g, "%s", why);
            gr_matcher *m = gr_matcher_new(g);
            if (budget) gr_matcher_set_budget(m, 1);
            jg_state s;
            jg_init_grammar(&s, m);
            char text[400];
            size_t len = 0;
            uint64_t x = 0x9e3779b97f4a7c15ull + gi * 2 + (uint64_t)budget;
            int completed = 0, steps = 0;
            for (; steps < 3000 && completed < 15; steps++) {
                float lg[NV] = {0};
                int allowed = jg_mask(v, &s, lg), pick[NV], n = 0;
                bool any = false, want[NV];
                for (int id = 1; id < NV; id++) {
                    want[id] = false;
                    if (!VOCAB[id]) continue;
                    char t[420];
                    memcpy(t, text, len);
                    memcpy(t + len, VOCAB[id], strlen(VOCAB[id]));
                    want[id] = match_g(g, t, len + strlen(VOCAB[id])) >= 0;
                    any |= want[id];
                }
                want[eos] = jg_done(&s) || !any;
                for (int id = 0; id < NV; id++) {
                    CHECKF(want[id] == (lg[id] == 0), "grammar %zu after '%.*s': token %d: mask %d",
                           gi, (int)len, text, id, lg[id] == 0);
                    if (lg[id] == 0) pick[n++] = id;
                }
                CHECK(n == allowed && n > 0);
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                int id = len > 30 && x % 2 ? pick[0] : pick[(x >> 1) % (uint64_t)n];
                if (id == eos || len + 8 > sizeof text) {
                    if (id == eos) {
                        CHECKF(match_g(g, text, len) == 1, "ended on '%.*s'", (int)len, text);
                        completed++;
                    }
                    gr_matcher_free(m);
                    m = gr_matcher_new(g);
                    if (budget) gr_matcher_set_budget(m, 1);
                    jg_init_grammar(&s, m);
                    len = 0;
                    continue;
                }
                CHECK(jg_feed_token(v, &s, id));
                memcpy(text + len, VOCAB[id], strlen(VOCAB[id]));
                len += strlen(VOCAB[id]);
            }
            CHECKF(completed == 15, "grammar %zu: %d texts in %d steps", gi, completed, steps);
            gr_matcher_free(m);
            gr_free(g);
        }
    jg_vocab_free(v);
}
