/* test_output_parser_forced.c — the output parser's forced start (a server
 * enforcing tool_choice ends the prompt with the DSML block opener, and for a
 * named choice the invoke tag): parsing output X from inside the block (or
 * the invoke) must give exactly what parsing opener + X from the answer state
 * gives (same ids: same seed, same call order), in every chunking — whole,
 * byte by byte, split at every position and randomly. */
#include "harness.h"
#include "outp_test.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const STOPS[] = {"STOP"};

/* Continuations a model may write after a forced opener: well-formed calls,
 * several calls, text after the block, truncation at every kind of place,
 * malformed markup, a stop string after the block, nothing at all. */
static const char *const AFTER_BLOCK[] = {
    "\n" INV("get_weather") "\n" PS("city", "Paris") "\n" PJ("days", "3") "\n" INV_END
                                                                          "\n" TC_CLOSE,
    INV("a") PJ("x", "[1, 2]") INV_END INV("b") PS("s", "q\"\n") INV_END TC_CLOSE "after",
    "\n" INV("get_weather") "\n" PS("city", "Par"),
    "\n" INV("get_weather") "\n" PJ("days", "3"),
    "\n" INV("get_weather") "\n",
    "\n<" D "invo",
    "hello, no markup",
    "\n" INV("x") INV_END TC_CLOSE "\n\ntext STOP more",
    "",
    "   ",
};

static const char *const AFTER_INVOKE[] = {
    "\n" PS("city", "Paris") "\n" PJ("days", "3") "\n" INV_END "\n" TC_CLOSE,
    PS("city", "名名") INV_END INV("again") INV_END TC_CLOSE " done",
    "\n" PS("city", "Pa"),
    "\n" PJ("days", "{\"a\": ["),
    "\n",
    "I think the weather is nice",
    "\n" INV_END TC_CLOSE "text STOP tail",
    "",
};

static void cfgs(outp_config *forced, outp_config *plain, const char *invoke, bool reasoning) {
    *plain = (outp_config){.tools = true, .stops = STOPS, .n_stops = 1};
    *forced = *plain;
    forced->start_in_block = true;
    forced->start_invoke = invoke;
    /* the forced start ignores reasoning: the prompt closed it */
    forced->reasoning = reasoning;
    forced->think_opened = reasoning;
}

static const char *same_as_opened(const char *after, const char *invoke, bool reasoning) {
    static char why[1400];
    outp_config forced, plain;
    cfgs(&forced, &plain, invoke, reasoning);
    char in[2048];
    snprintf(in, sizeof in, "%s%s%s%s%s", TC_OPEN, invoke ? "<" D "invoke name=\"" : "",
             invoke ? invoke : "", invoke ? "\">" : "", after);
    outpt_res a, b;
    outpt_parse(&forced, after, strlen(after), NULL, 0, &a);
    outpt_parse(&plain, in, strlen(in), NULL, 0, &b);
    const char *d = a.bad[0] ? a.bad : outpt_diff(&a, &b);
    snprintf(why, sizeof why, "%s", d);
    outpt_res_free(&a);
    outpt_res_free(&b);
    if (*why) return why;
    const char *m = outpt_all_modes(&forced, after, true, NULL, NULL, 8, 99);
    snprintf(why, sizeof why, "%s", m);
    return why;
}

TEST(outp_forced_block_equals_parsing_the_opener) {
    for (size_t i = 0; i < sizeof AFTER_BLOCK / sizeof *AFTER_BLOCK; i++)
        for (int r = 0; r < 2; r++) {
            const char *why = same_as_opened(AFTER_BLOCK[i], NULL, r);
            CHECKF(!*why, "case %zu (reasoning %d): %s", i, r, why);
        }
}

TEST(outp_forced_invoke_equals_parsing_the_opener) {
    for (size_t i = 0; i < sizeof AFTER_INVOKE / sizeof *AFTER_INVOKE; i++)
        for (int r = 0; r < 2; r++) {
            const char *why = same_as_opened(AFTER_INVOKE[i], "get_weather", r);
            CHECKF(!*why, "case %zu (reasoning %d): %s", i, r, why);
        }
}

TEST(outp_forced_invoke_results) {
    outp_config forced, plain;
    cfgs(&forced, &plain, "get_weather", true);
    outpt_res r;
    const char *out = "\n" PS("city", "Paris") "\n" PJ("days", "3") "\n" INV_END "\n" TC_CLOSE;
    outpt_parse(&forced, out, strlen(out), NULL, 0, &r);
    CHECK(!r.bad[0]);
    CHECK(r.n_calls == 1 && !strcmp(r.calls[0].name, "get_weather") && r.calls[0].complete);
    CHECKF(!strcmp(outpt_str(&r.calls[0].args), WEATHER_ARGS), "%s", outpt_str(&r.calls[0].args));
    CHECK(r.reasoning.n == 0 && r.text.n == 0 && r.sum.n_errors == 0);
    outpt_res_free(&r);

    /* nothing written: the forced call still starts, and ends incomplete */
    outpt_parse(&forced, "", 0, NULL, 0, &r);
    CHECK(!r.bad[0]);
    CHECK(r.n_calls == 1 && r.calls[0].ended && !r.calls[0].complete);
    CHECK(!strcmp(outpt_str(&r.calls[0].args), "{}") && r.sum.n_errors == 1);
    outpt_res_free(&r);

    /* the start event arrives with the first feed, before any argument */
    di_err err = {{0}};
    forced.id_seed = 5;
    outp_parser *p = outp_new(&forced, &err);
    CHECK(p);
    outpt_fresh(&r);
    OUTPT_FEED(p, "\n<" D "param", &r);
    CHECK(r.n_calls == 1 && !strcmp(r.calls[0].name, "get_weather") && r.open_call == 0);
    CHECKF(!strcmp(outpt_str(&r.calls[0].args), "{"), "%s", outpt_str(&r.calls[0].args));
    outp_finish(p, outpt_event, &r);
    outp_free(p);
    CHECK(!r.bad[0]);
    outpt_res_free(&r);

    /* without tools the option is ignored */
    forced.tools = false;
    forced.reasoning = false;
    outpt_parse(&forced, "plain", 5, NULL, 0, &r);
    CHECK(r.n_calls == 0 && !strcmp(outpt_str(&r.text), "plain"));
    outpt_res_free(&r);
}
