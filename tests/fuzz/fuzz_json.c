/* fuzz_json.c — libFuzzer target over constrained decoding
 * (src/engine/json_grammar.c, json_schema.c, grammar.c): a schema's text, a
 * NUL, then bytes fed to a state that follows the schema (or any object,
 * where the schema does not compile; with '~' first, plain text held to the
 * rest as a pattern, where it compiles; with '=' first, to the rest as a
 * GBNF grammar, its matcher's caches started afresh past 4 KiB; with '@'
 * first, tool calls: one to three calls of two tools, "a" + an object the
 * rest holds as a schema + "x", or "x" + any object + "]", ","
 * before a later call, "." to close; with '&' first, the same calls with
 * DSML parameters for arguments), byte by
 * byte, the mask of a small fixed vocabulary taken at every step and
 * checked against feeding each token alone (for a grammar: the text so far
 * and the token, to a fresh matcher, over the first 256 bytes), and some
 * byte continuing every state short of a complete one (no dead end). Must
 * never crash, loop or disagree.
 *   make fuzz-json                 (FUZZ_TIME=60 seconds by default) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "engine/json_grammar.h"
#include "engine/json_regex.h"

#define DSML "｜DSML｜"

static const char *const VOCAB[] = {NULL,
                                    "{",
                                    "}",
                                    "[",
                                    "]",
                                    "\"",
                                    ":",
                                    ",",
                                    " ",
                                    "a",
                                    "1",
                                    "-",
                                    ".",
                                    "e",
                                    "true",
                                    "null",
                                    "\"a\":",
                                    "\\",
                                    "u",
                                    "\xC3",
                                    "\xA9",
                                    "\"}",
                                    "]}",
                                    "x",
                                    "0",
                                    "\"b\"",
                                    "false",
                                    "<" DSML "parameter name=\"",
                                    "\" string=\"true\">",
                                    "\" string=\"false\">",
                                    "</" DSML "parameter>\n",
                                    "</" DSML "invoke>\n"};
#define NV ((int)(sizeof VOCAB / sizeof *VOCAB))

static char *vocab_bytes(void *ctx, int id, size_t *len) {
    (void)ctx;
    if (!VOCAB[id]) return NULL;
    *len = strlen(VOCAB[id]);
    char *b = malloc(*len + 1);
    memcpy(b, VOCAB[id], *len + 1);
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static jg_vocab *v;
    int eos = 0;
    if (!v) v = jg_vocab_new(NV, vocab_bytes, NULL, &eos, 1);
    const uint8_t *sep = memchr(data, 0, size);
    size_t slen = sep ? (size_t)(sep - data) : size;
    char why[160];
    jg_schema *sc = NULL;
    jr_dfa *re = NULL;
    gr_grammar *g = NULL;
    gr_matcher *m = NULL;
    jg_calls *calls = NULL;
    jg_state s;
    if (slen && data[0] == '~') /* a pattern the text is held to whole (structured outputs) */
        re = jr_compile((const char *)data + 1, slen - 1, JR_MAX_STATES, why, sizeof why);
    else if (slen && data[0] == '=') /* a grammar */
        g = gr_compile((const char *)data + 1, slen - 1, why, sizeof why);
    else if (slen && data[0] == '@') { /* tool calls, the first one's schema the rest */
        char *schema = strndup((const char *)data + 1, slen - 1);
        jg_call_form forms[2] = {{"a", ",a", "x", schema}, {"x", ",x", "]", NULL}};
        calls = jg_calls_compile(forms, 2, ".", 3, why, sizeof why);
        free(schema);
    } else if (slen && data[0] == '&') { /* ... as DSML parameters */
        char *schema = strndup((const char *)data + 1, slen - 1);
        jg_call_form forms[2] = {{"a", "a", "</" DSML "invoke>\n", schema},
                                 {"x", "x", "</" DSML "invoke>\n", NULL}};
        calls = jg_calls_compile(forms, 2, ".", 3, why, sizeof why);
        if (calls) jg_calls_set_dsml(calls);
        free(schema);
    } else
        sc = jg_schema_compile((const char *)data, slen, why, sizeof why);
    if (re)
        jg_init_regex(&s, re);
    else if (g) {
        m = gr_matcher_new(g);
        gr_matcher_set_budget(m, 4096);
        jg_init_grammar(&s, m);
    } else if (calls)
        jg_init_calls(&s, calls);
    else
        jg_init_schema(&s, sc);
    const uint8_t *out = sep ? sep + 1 : data + size;
    size_t n = (size_t)(data + size - out);
    for (size_t i = 0; i <= n; i++) {
        float lg[NV] = {0};
        jg_mask(v, &s, lg);
        for (int id = 1; id < NV && (!g || i <= 256); id++) {
            bool fed = false;
            if (VOCAB[id] && g) { /* the text so far and the token, to a fresh matcher */
                gr_matcher *fresh = gr_matcher_new(g);
                fed = gr_feed(fresh, (const char *)out, i) &&
                      gr_feed(fresh, VOCAB[id], strlen(VOCAB[id]));
                gr_matcher_free(fresh);
            } else if (VOCAB[id]) {
                jg_state t = s;
                fed = jg_feed(&t, VOCAB[id], strlen(VOCAB[id]));
            }
            if (fed != (lg[id] == 0)) abort(); /* the mask and feeding disagree */
        }
        bool more = jg_done(&s);
        for (int b = 1; b < 256 && !more; b++) {
            char c = (char)b;
            if (g) {
                more = gr_next(m, gr_current(m), (uint8_t)c) >= 0;
                continue;
            }
            jg_state t = s;
            more = jg_feed(&t, &c, 1);
        }
        if (!more) abort(); /* a dead end */
        if (i == n || !jg_feed(&s, (const char *)out + i, 1)) break;
    }
    jg_schema_free(sc);
    jr_free(re);
    gr_matcher_free(m);
    gr_free(g);
    jg_calls_free(calls);
    return 0;
}
