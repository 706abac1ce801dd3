/* fuzz_json.c — libFuzzer target over JSON-constrained decoding
 * (src/engine/json_grammar.c, json_schema.c): a schema's text, a NUL, then
 * bytes fed to a state that follows the schema (or any object, where the
 * schema does not compile; with '~' first, plain text held to the rest as
 * a pattern, where it compiles), byte by byte, the mask of a small fixed
 * vocabulary taken at every step and checked against feeding each token
 * alone, and some byte continuing every state short of a complete object
 * (no dead end). Must never crash, loop or disagree.
 *   make fuzz-json                 (FUZZ_TIME=60 seconds by default) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_grammar.h"
#include "engine/json_regex.h"

static const char *const VOCAB[] = {NULL,   "{",    "}",      "[",  "]",     "\"",   ":",
                                    ",",    " ",    "a",      "1",  "-",     ".",    "e",
                                    "true", "null", "\"a\":", "\\", "u",     "\xC3", "\xA9",
                                    "\"}",  "]}",   "x",      "0",  "\"b\"", "false"};
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
    jg_state s;
    if (slen && data[0] == '~') /* a pattern the text is held to whole (structured outputs) */
        re = jr_compile((const char *)data + 1, slen - 1, JR_MAX_STATES, why, sizeof why);
    else
        sc = jg_schema_compile((const char *)data, slen, why, sizeof why);
    if (re)
        jg_init_regex(&s, re);
    else
        jg_init_schema(&s, sc);
    const uint8_t *out = sep ? sep + 1 : data + size;
    size_t n = (size_t)(data + size - out);
    for (size_t i = 0; i <= n; i++) {
        float lg[NV] = {0};
        jg_mask(v, &s, lg);
        for (int id = 1; id < NV; id++) {
            jg_state t = s;
            bool fed = VOCAB[id] && jg_feed(&t, VOCAB[id], strlen(VOCAB[id]));
            if (fed != (lg[id] == 0)) abort(); /* the mask and feeding disagree */
        }
        bool more = jg_done(&s);
        for (int b = 1; b < 256 && !more; b++) {
            jg_state t = s;
            char c = (char)b;
            more = jg_feed(&t, &c, 1);
        }
        if (!more) abort(); /* a dead end */
        if (i == n || !jg_feed(&s, (const char *)out + i, 1)) break;
    }
    jg_schema_free(sc);
    jr_free(re);
    return 0;
}
