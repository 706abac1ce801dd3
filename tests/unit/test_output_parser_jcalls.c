/* test_output_parser_jcalls.c — tool calls with a JSON body (outp_jcalls.c):
 * Hermes tags (Qwen) and DeepSeek V3's markers. Each case is parsed whole
 * and in every chunking (the results must not depend on where the output
 * was cut), and checked against what the model wrote: the calls' names and
 * arguments (verbatim), the answer text around them, and for a body that does
 * not read, an error with the call's whole text kept as answer text. A forced
 * start must give what parsing the opener the prompt ended with gives. */
#include "harness.h"
#include "outp_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HC(body) "<tool_call>\n" body "\n</tool_call>"
#define V3_CALLS "<｜tool▁calls▁begin｜>"
#define V3_END   "<｜tool▁calls▁end｜>"
#define V3_CALL(name, args)                                                                        \
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" name "\n```json\n" args "\n```<"                 \
    "｜tool▁call▁end｜>"

typedef struct want {
    const char *in;
    const char *text;     /* the answer text */
    const char *calls[6]; /* name, then arguments, per call */
    int n_calls, n_errors;
} want;

static const char *check(const void *ctx, const outpt_res *r) {
    static char why[512];
    const want *w = ctx;
    if (strcmp(outpt_str(&r->text), w->text))
        return snprintf(why, sizeof why, "text [%s], want [%s]", outpt_str(&r->text), w->text), why;
    if (r->n_calls != w->n_calls || r->sum.n_errors != w->n_errors)
        return snprintf(why, sizeof why, "%d calls, %d errors (%s); want %d, %d", r->n_calls,
                        r->sum.n_errors, outpt_str(&r->errors), w->n_calls, w->n_errors),
               why;
    for (int i = 0; i < r->n_calls; i++) {
        const outpt_call *c = &r->calls[i];
        if (strcmp(c->name, w->calls[2 * i]) || strcmp(outpt_str(&c->args), w->calls[2 * i + 1]) ||
            !c->complete)
            return snprintf(why, sizeof why, "call %d: %s %s (complete %d)", i, c->name,
                            outpt_str(&c->args), c->complete),
                   why;
    }
    return "";
}

static void run_cases(outp_syntax syntax, const want *cases, size_t n) {
    static const char *const stops[] = {"STOP"};
    outp_config cfg = {.tools = true, .syntax = syntax, .stops = stops, .n_stops = 1};
    for (size_t i = 0; i < n; i++) {
        const char *why = outpt_all_modes(&cfg, cases[i].in, true, check, &cases[i], 8, 7 + i);
        CHECKF(!*why, "case %zu: %s", i, why);
    }
}

TEST(outp_hermes_calls) {
    static const want cases[] = {
        {HC("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}"),
         "",
         {"get_weather", "{\"city\": \"Paris\", \"days\": 3}"},
         1,
         0},
        /* text around, two calls; numbers keep their spelling; nested values */
        {"Let me check.\n\n" HC(
             "{\"name\": \"a\", \"arguments\": {\"x\": 1.10, \"big\": "
             "123456789012345678901234}}") "\n" HC("{\"name\":\"b\",\"arguments\":{\"l\":[{\"q\":"
                                                   "\"}\\\"]\"}],\"n\":null}}") "\n\nDone.",
         "Let me check.Done.",
         {"a", "{\"x\": 1.10, \"big\": 123456789012345678901234}", "b",
          "{\"l\":[{\"q\":\"}\\\"]\"}],\"n\":null}"},
         2,
         0},
        /* "parameters", arguments as a string holding an object, no arguments */
        {HC("{\"name\": \"p\", \"parameters\": {\"k\": true}}")
             HC("{\"arguments\": \"{\\\"s\\\": \\\"v\\\"}\", \"name\": \"q\"}")
                 HC("{\"name\": \"r\"}"),
         "",
         {"p", "{\"k\": true}", "q", "{\"s\": \"v\"}", "r", "{}"},
         3,
         0},
        /* a stop string inside a call's body is not answer text */
        {HC("{\"name\": \"s\", \"arguments\": {\"t\": \"STOP\"}}") " after STOP tail",
         "after ",
         {"s", "{\"t\": \"STOP\"}"},
         1,
         0},
        /* bodies that do not read: kept as text, with an error each */
        {"x " HC("not json") " y", "x<tool_call>\nnot json\n</tool_call> y", {0}, 0, 1},
        {HC("{\"arguments\": {}}") HC("{\"name\": \"n\", \"arguments\": [1]}"),
         "<tool_call>\n{\"arguments\": {}}\n</tool_call><tool_call>\n{\"name\": \"n\", "
         "\"arguments\": [1]}\n</tool_call>",
         {0},
         0,
         2},
        /* cut short inside a call */
        {"hi " HC("{\"name\": \"c\", \"arguments\": {\"a\":") "",
         "hi<tool_call>\n{\"name\": \"c\", \"arguments\": {\"a\":\n</tool_call>",
         {0},
         0,
         1},
        {"hi <tool_call>\n{\"name\": \"c\", \"argu",
         "hi<tool_call>\n{\"name\": \"c\", \"argu",
         {0},
         0,
         1},
        /* a partial opener at the end is text */
        {"text <tool_ca", "text <tool_ca", {0}, 0, 0},
    };
    run_cases(OUTP_SYNTAX_HERMES, cases, sizeof cases / sizeof *cases);
}

TEST(outp_dsv3_calls) {
    static const want cases[] = {
        {V3_CALLS V3_CALL("get_weather", "{\"city\": \"Paris\"}") V3_END,
         "",
         {"get_weather", "{\"city\": \"Paris\"}"},
         1,
         0},
        {"Sure." V3_CALLS V3_CALL("a", "{\"x\": [1, 2]}") "\n" V3_CALL("b", "{}") V3_END " ok",
         "Sure.ok",
         {"a", "{\"x\": [1, 2]}", "b", "{}"},
         2,
         0},
        /* a lone call (later turns), no fence, the block left open */
        {"<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n{\"k\": 1}<｜tool▁call▁end｜> then",
         "then",
         {"f", "{\"k\": 1}"},
         1,
         0},
        /* a body that does not read, and a cut-short one */
        {V3_CALLS "<｜tool▁call▁begin｜>function\n{}<｜tool▁call▁end｜>" V3_END,
         "<｜tool▁call▁begin｜>function\n{}<｜tool▁call▁end｜>",
         {0},
         0,
         1},
        {V3_CALLS "<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{\"a\"",
         "<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{\"a\"",
         {0},
         0,
         1},
    };
    run_cases(OUTP_SYNTAX_DSV3, cases, sizeof cases / sizeof *cases);
}

/* What the prompt ends with under a forced choice (routes.c renders the
 * same), and continuations a model may write after it. */
TEST(outp_jcalls_forced_equals_parsing_the_opener) {
    static const char *const after_named[] = {
        "{\"city\": \"Paris\"}}\n</tool_call>",
        "{\"city\": \"Paris\"}}\n</tool_call>\n" HC("{\"name\": \"x\", \"arguments\": {}}") "t",
        "{\"city\": \"Pa",
        "",
    };
    static const char *const after_v3_named[] = {
        "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>" V3_END,
        "{}\n```<｜tool▁call▁end｜>" V3_CALL("more", "{\"a\": 1}") V3_END "text",
        "{\"ci",
    };
    static const char *const after_block[] = {
        "{\"name\": \"x\", \"arguments\": {\"a\": 1}}\n</tool_call>\n" HC("{\"name\": \"y\"}"),
        "not a call",
    };
    static const char *const after_v3_block[] = {
        V3_CALL("x", "{\"a\": 1}") V3_CALL("y", "{}") V3_END "t",
        "no call",
    };
    struct {
        outp_syntax syntax;
        const char *name, *opener;
        const char *const *after;
        size_t n;
    } sets[] = {
        {OUTP_SYNTAX_HERMES, "get_weather",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ", after_named, 4},
        {OUTP_SYNTAX_DSV3, "get_weather",
         V3_CALLS "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n",
         after_v3_named, 3},
        {OUTP_SYNTAX_HERMES, NULL, "<tool_call>\n", after_block, 2},
        {OUTP_SYNTAX_DSV3, NULL, V3_CALLS, after_v3_block, 2},
    };
    for (size_t s = 0; s < sizeof sets / sizeof *sets; s++)
        for (size_t i = 0; i < sets[s].n; i++) {
            const char *after = sets[s].after[i];
            outp_config plain = {.tools = true, .syntax = sets[s].syntax};
            outp_config forced = plain;
            forced.start_in_block = true;
            forced.start_invoke = sets[s].name;
            char in[1024];
            snprintf(in, sizeof in, "%s%s", sets[s].opener, after);
            outpt_res a, b;
            outpt_parse(&forced, after, strlen(after), NULL, 0, &a);
            outpt_parse(&plain, in, strlen(in), NULL, 0, &b);
            const char *d = a.bad[0] ? a.bad : outpt_diff(&a, &b);
            CHECKF(!*d, "set %zu case %zu: %.300s", s, i, d);
            CHECKF(i > 0 || (a.n_calls >= 1 && a.sum.n_errors == 0), "set %zu: %d calls", s,
                   a.n_calls);
            outpt_res_free(&a);
            outpt_res_free(&b);
            const char *m = outpt_all_modes(&forced, after, true, NULL, NULL, 4, 3);
            CHECKF(!*m, "set %zu case %zu: %.300s", s, i, m);
        }
}
