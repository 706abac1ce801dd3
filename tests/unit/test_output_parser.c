/* test_output_parser.c — the streaming output parser (src/recipe/output_parser.h):
 * the table of cases, and the collector and chunking modes that
 * test_output_parser_stream.c shares through outp_test.h.
 *
 * Each case is fed whole, split into two chunks at every byte position, byte
 * by byte and in random chunkings: the parsed result (deltas concatenated per
 * channel, tool calls with ids, names, arguments and completeness, stop,
 * errors, summary) must equal the expectation and be identical across all
 * modes. Every delta must be non-empty whole UTF-8 and every call's arguments
 * a valid JSON object (jansson). */
#include "harness.h"
#include "outp_test.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Table rows leave the trailing expectation fields (errors, incomplete, ...) at zero. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/* ---- collecting a parse --------------------------------------------------- */

const char *outpt_str(const di_buf *b) {
    return b->p ? b->p : "";
}

outpt_res *outpt_fresh(outpt_res *r) {
    memset(r, 0, sizeof *r);
    r->open_call = -1;
    r->stop_index = -1;
    return r;
}

void outpt_res_free(outpt_res *r) {
    free(r->reasoning.p);
    free(r->text.p);
    free(r->errors.p);
    for (int i = 0; i < OUTPT_MAX_CALLS; i++) {
        free(r->calls[i].args.p);
        free(r->calls[i].name);
    }
}

static bool utf8_ok(const char *s, size_t n) {
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    while (n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p, (utf8proc_ssize_t)n, &cp);
        if (k <= 0) return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

static void bad(outpt_res *r, const char *what) {
    if (!r->bad[0]) snprintf(r->bad, sizeof r->bad, "%s", what);
}

void outpt_event(void *ctx, const outp_event *ev) {
    outpt_res *r = ctx;
    if (r->n_finish) bad(r, "event after FINISH");
    if (r->n_stop_events && ev->kind != OUTP_EV_FINISH) bad(r, "event after STOP");
    bool is_text =
        ev->kind == OUTP_EV_REASONING || ev->kind == OUTP_EV_TEXT || ev->kind == OUTP_EV_TOOL_ARGS;
    if (is_text && ev->len == 0) bad(r, "empty delta");
    if (is_text && !utf8_ok(ev->text, ev->len)) bad(r, "delta is not whole valid UTF-8");
    if ((ev->kind == OUTP_EV_REASONING || ev->kind == OUTP_EV_TEXT) && r->open_call >= 0)
        bad(r, "text inside a tool call");
    switch (ev->kind) {
    case OUTP_EV_REASONING:
        di_buf_add(&r->reasoning, ev->text, ev->len);
        break;
    case OUTP_EV_TEXT:
        di_buf_add(&r->text, ev->text, ev->len);
        break;
    case OUTP_EV_TOOL_START:
        if (r->open_call >= 0) bad(r, "TOOL_START inside a call");
        if (ev->index != r->n_calls || r->n_calls == OUTPT_MAX_CALLS) {
            bad(r, "TOOL_START index out of order");
            break;
        }
        if (strncmp(ev->id, "call_", 5) || strlen(ev->id) != 29) bad(r, "bad tool-call id");
        r->calls[r->n_calls].name = strdup(ev->name);
        snprintf(r->calls[r->n_calls].id, sizeof r->calls[0].id, "%s", ev->id);
        r->open_call = r->n_calls++;
        break;
    case OUTP_EV_TOOL_ARGS:
        if (ev->index != r->open_call || r->open_call < 0) {
            bad(r, "TOOL_ARGS outside its call");
            break;
        }
        di_buf_add(&r->calls[ev->index].args, ev->text, ev->len);
        break;
    case OUTP_EV_TOOL_END:
        if (ev->index != r->open_call || r->open_call < 0) {
            bad(r, "TOOL_END outside its call");
            break;
        }
        r->calls[ev->index].ended = true;
        r->calls[ev->index].complete = ev->complete;
        r->open_call = -1;
        break;
    case OUTP_EV_STOP:
        r->stop_index = ev->index;
        r->n_stop_events++;
        break;
    case OUTP_EV_ERROR:
        if (strlen(ev->text) != ev->len || !utf8_ok(ev->text, ev->len) || strchr(ev->text, '\n'))
            bad(r, "error text is not one line of whole UTF-8");
        di_buf_add(&r->errors, ev->text, ev->len);
        di_buf_add(&r->errors, "\n", 1);
        break;
    case OUTP_EV_FINISH:
        r->n_finish++;
        r->sum = *ev->summary;
        break;
    }
}

void outpt_parse(const outp_config *cfg0, const char *in, size_t n, const size_t *cuts,
                 size_t n_cuts, outpt_res *r) {
    outpt_fresh(r);
    outp_config cfg = *cfg0;
    cfg.id_seed = 42;
    di_err err;
    outp_parser *p = outp_new(&cfg, &err);
    if (!p) {
        bad(r, err.msg);
        return;
    }
    size_t at = 0;
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : n;
        if (outp_feed(p, in + at, end - at, outpt_event, r)) r->stopped = true;
        at = end;
    }
    const outp_summary *s = outp_finish(p, outpt_event, r);
    if (s->n_tool_calls != r->n_calls) bad(r, "summary call count");
    outp_free(p);
    if (r->n_finish != 1) bad(r, "FINISH not exactly once");
    if (r->open_call >= 0) bad(r, "call left open");
    for (int i = 0; i < r->n_calls; i++) {
        json_error_t je;
        json_t *j = json_loadb(outpt_str(&r->calls[i].args), r->calls[i].args.n,
                               JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
        if (!j || !json_is_object(j)) bad(r, "tool arguments are not a JSON object");
        json_decref(j);
    }
}

const char *outpt_diff(const outpt_res *a, const outpt_res *b) {
    if (strcmp(outpt_str(&a->reasoning), outpt_str(&b->reasoning))) return "reasoning";
    if (strcmp(outpt_str(&a->text), outpt_str(&b->text))) return "text";
    if (strcmp(outpt_str(&a->errors), outpt_str(&b->errors))) return "errors";
    if (a->n_calls != b->n_calls) return "number of calls";
    for (int i = 0; i < a->n_calls; i++) {
        const outpt_call *x = &a->calls[i], *y = &b->calls[i];
        if (strcmp(x->name, y->name) || strcmp(x->id, y->id)) return "call name/id";
        if (strcmp(outpt_str(&x->args), outpt_str(&y->args))) return "call arguments";
        if (x->complete != y->complete || x->ended != y->ended) return "call completeness";
    }
    if (a->stop_index != b->stop_index || a->stopped != b->stopped) return "stop";
    if (memcmp(&a->sum, &b->sum, sizeof a->sum)) return "summary";
    return "";
}

uint64_t outpt_rng(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random cut points: sorted distinct offsets in (0, n), gaps of 1-7 bytes. */
static size_t random_cuts(uint64_t *rng, size_t n, size_t *cuts, size_t max) {
    if (n < 2) return 0;
    size_t k = 0;
    for (size_t at = 0;;) {
        at += 1 + outpt_rng(rng) % 7;
        if (at >= n || k == max) break;
        cuts[k++] = at;
    }
    return k;
}

const char *outpt_all_modes(const outp_config *cfg, const char *in, bool every_split,
                            outpt_check_fn check, const void *ctx, int n_random, uint64_t seed) {
    static char why[1100];
    size_t n = strlen(in);
    outpt_res whole, r;
    outpt_parse(cfg, in, n, NULL, 0, &whole);
    const char *e = whole.bad[0] ? whole.bad : check ? check(ctx, &whole) : "";
    if (*e) {
        snprintf(why, sizeof why, "whole: %s", e);
        outpt_res_free(&whole);
        return why;
    }
    size_t *cuts = malloc((n + 1) * sizeof *cuts);
    for (size_t i = 0; i < n; i++) cuts[i] = i + 1;
    why[0] = 0;
    outpt_parse(cfg, in, n, cuts, n ? n - 1 : 0, &r); /* byte by byte */
    if (r.bad[0] || *outpt_diff(&whole, &r))
        snprintf(why, sizeof why, "byte by byte: %s%s", r.bad, outpt_diff(&whole, &r));
    outpt_res_free(&r);
    size_t step = every_split || n < 64 ? 1 : n / 32;
    for (size_t k = 1; k < n && !why[0]; k += step) {
        outpt_parse(cfg, in, n, &k, 1, &r);
        if (r.bad[0] || *outpt_diff(&whole, &r))
            snprintf(why, sizeof why, "split at %zu: %s%s", k, r.bad, outpt_diff(&whole, &r));
        outpt_res_free(&r);
    }
    uint64_t rng = seed;
    for (int t = 0; t < n_random && !why[0]; t++) {
        size_t nc = random_cuts(&rng, n, cuts, n);
        outpt_parse(cfg, in, n, cuts, nc, &r);
        if (r.bad[0] || *outpt_diff(&whole, &r))
            snprintf(why, sizeof why, "random chunking %d: %s%s", t, r.bad, outpt_diff(&whole, &r));
        outpt_res_free(&r);
    }
    free(cuts);
    outpt_res_free(&whole);
    return why;
}

/* ---- the case table -------------------------------------------------------- */

typedef struct tcase {
    const char *name;
    outp_config cfg;
    const char *in;
    const char *reasoning, *text;
    const char *calls[2 * 8 + 1]; /* name, arguments, ...; NULL-terminated */
    int stop;                     /* expected stop index, -1 none */
    int errors;                   /* expected ERROR events */
    int incomplete;               /* expected calls ended with complete == false */
    int json_valid;               /* JSON mode: expected summary.json_valid (0/1) */
    bool ropen;                   /* expected summary.reasoning_open */
} tcase;

static const tcase cases[] = {
    {"plain",
     {.tools = true},
     "Hello, world! 1 < 2 and <b>bold</b>.",
     "",
     "Hello, world! 1 < 2 and <b>bold</b>.",
     {NULL},
     -1},
    {"plain_tools_off_block_is_text", {0}, "a " WEATHER " b", "", "a " WEATHER " b", {NULL}, -1},
    {"partial_marker_lookalikes",
     {.tools = true},
     "x < y <｜DS z <｜DSML｜tool <｜DSML｜tool_call> <｜DSML｜invoke name=\"f\"> "
     "</｜DSML｜tool_calls> "
     "<｜ <",
     "",
     "x < y <｜DS z <｜DSML｜tool <｜DSML｜tool_call> <｜DSML｜invoke name=\"f\"> "
     "</｜DSML｜tool_calls> "
     "<｜ <",
     {NULL},
     -1},
    {"lookalike_at_end",
     {.tools = true, STOPS("STOP")},
     "ends with <｜DSML｜tool_ca",
     "",
     "ends with <｜DSML｜tool_ca",
     {NULL},
     -1},
    {"reasoning_prompt_opened",
     {.reasoning = true, .think_opened = true},
     "Let me think.\nOK.</think>\n\nThe answer is 4.",
     "Let me think.\nOK.",
     "The answer is 4.",
     {NULL},
     -1},
    {"reasoning_model_opens",
     {.reasoning = true},
     "\n<think>\nhmm, 2+2</think>Answer: 4",
     "\nhmm, 2+2",
     "Answer: 4",
     {NULL},
     -1},
    {"reasoning_on_but_skipped",
     {.reasoning = true},
     "  Direct answer",
     "",
     "  Direct answer",
     {NULL},
     -1},
    {"reasoning_repeated_open",
     {.reasoning = true, .think_opened = true},
     "<think>x</think>y",
     "x",
     "y",
     {NULL},
     -1},
    {"reasoning_lookalikes",
     {.reasoning = true},
     "<think>a </thin b <think> </think>c </think>",
     "a </thin b <think> ",
     "c </think>",
     {NULL},
     -1},
    {"reasoning_not_think_tag", {.reasoning = true}, "<thinking>", "", "<thinking>", {NULL}, -1},
    {"reasoning_unclosed",
     {.reasoning = true, .think_opened = true},
     "thinking forever ",
     "thinking forever ",
     "",
     {NULL},
     -1,
     .ropen = true},
    {"reasoning_only_open_tag", {.reasoning = true}, "<think>", "", "", {NULL}, -1, .ropen = true},
    {"reasoning_off_think_is_text", {0}, "a</think>b", "", "a</think>b", {NULL}, -1},
    {"tool_markup_in_reasoning_is_reasoning",
     {.reasoning = true, .think_opened = true, .tools = true},
     "plan " WEATHER "</think>ok",
     "plan " WEATHER,
     "ok",
     {NULL},
     -1},
    {"one_call_v4", {.tools = true}, WEATHER, "", "", {"get_weather", WEATHER_ARGS, NULL}, -1},
    {"text_around_call",
     {.tools = true},
     "Let me check.\n\n" WEATHER "\n\nDone.",
     "",
     "Let me check.Done.",
     {"get_weather", WEATHER_ARGS, NULL},
     -1},
    {"reasoning_then_call",
     {.reasoning = true, .think_opened = true, .tools = true},
     "I need the weather.</think>\n\n" WEATHER,
     "I need the weather.",
     "",
     {"get_weather", WEATHER_ARGS, NULL},
     -1},
    {"parallel_v4",
     {.tools = true},
     TC_OPEN "\n" INV("get_weather") "\n" PS("city", "Paris") "\n" INV_END "\n" INV(
         "get_time") "\n" PS("tz", "Europe/Paris") "\n" PJ("h24", "true") "\n" INV_END
                                                                          "\n" TC_CLOSE,
     "",
     "",
     {"get_weather", "{\"city\": \"Paris\"}", "get_time",
      "{\"tz\": \"Europe/Paris\", \"h24\": true}", NULL},
     -1},
    {"parallel_v41_nested_json",
     {.tools = true},
     C1_OPEN "\n" INV1("search") "\n" PJ1(
         "filter", "{\"a\": [1, 2.5e3, {\"b\": null}], \"c\": "
                   "\"x<y</z>\"}") "\n" PS1("q", "cats") "\n" INV1_END
                                                         "\n" INV1("noop") "\n" INV1_END
                                                                           "\n" C1_CLOSE,
     "",
     "",
     {"search",
      "{\"filter\": {\"a\": [1, 2.5e3, {\"b\": null}], \"c\": \"x<y</z>\"}, \"q\": \"cats\"}",
      "noop", "{}", NULL},
     -1},
    {"v32_function_calls",
     {.tools = true},
     "<" D "function_calls>" INV("f") PS("a", "1") INV_END "</" D "function_calls>",
     "",
     "",
     {"f", "{\"a\": \"1\"}", NULL},
     -1},
    {"unicode_and_escapes",
     {.tools = true},
     TC_OPEN INV("say") PS("text", "Zürich \"q\" back\\slash\nnew\ttab \x01 日本語 😀")
         PS("città", "ü") INV_END TC_CLOSE,
     "",
     "",
     {"say",
      "{\"text\": \"Zürich \\\"q\\\" back\\\\slash\\nnew\\ttab \\u0001 日本語 😀\", \"città\": "
      "\"ü\"}",
      NULL},
     -1},
    {"json_param_fallbacks",
     {.tools = true},
     TC_OPEN INV("f") PJ("bad", "not json") PJ("ws", "\n 42 \n") PJ("empty", "")
         PS("s", "") "<" D "parameter name=\"nostr\">raw</" D "parameter>" INV_END TC_CLOSE,
     "",
     "",
     {"f", "{\"bad\": \"not json\", \"ws\": 42, \"empty\": \"\", \"s\": \"\", \"nostr\": \"raw\"}",
      NULL},
     -1},
    {"json_param_big_numbers",
     {.tools = true},
     TC_OPEN INV("f") PJ("big", "123456789012345678901234567890") PJ("neg", "-0.5e-3")
         INV_END TC_CLOSE,
     "",
     "",
     {"f", "{\"big\": 123456789012345678901234567890, \"neg\": -0.5e-3}", NULL},
     -1},
    {"reasoning_long_leading_ws_means_no_think",
     {.reasoning = true},
     "                                                                        <think>x",
     "",
     "                                                                        <think>x",
     {NULL},
     -1},
    {"long_name_in_error_message",
     {.tools = true},
     TC_OPEN INV(N300) "oops",
     "",
     "oops",
     {N300, "{}", NULL},
     -1,
     1,
     1},
    {"several_blocks",
     {.tools = true},
     "a" TC_OPEN INV("f") INV_END TC_CLOSE "b" C1_OPEN INV1("g") PS1("k", "v") INV1_END C1_CLOSE
     "c",
     "",
     "abc",
     {"f", "{}", "g", "{\"k\": \"v\"}", NULL},
     -1},
    {"quoted_gt_in_name",
     {.tools = true},
     TC_OPEN INV("a>b") INV_END TC_CLOSE,
     "",
     "",
     {"a>b", "{}", NULL},
     -1},
    {"fixed_v4_ignores_v41",
     {.tools = true, .dsml = OUTP_DSML_V4},
     C1_OPEN INV1("f") INV1_END C1_CLOSE,
     "",
     C1_OPEN INV1("f") INV1_END C1_CLOSE,
     {NULL},
     -1},
    {"fixed_v41",
     {.tools = true, .dsml = OUTP_DSML_V41},
     "hi " C1_OPEN INV1("f") INV1_END C1_CLOSE,
     "",
     "hi",
     {"f", "{}", NULL},
     -1},
    {"json_fenced",
     {.json_mode = true},
     "```json\n{\"a\": 1, \"b\": \"}\\\"]\"}\n```\nExtra words",
     "",
     "{\"a\": 1, \"b\": \"}\\\"]\"}",
     {NULL},
     -1,
     .json_valid = 1},
    {"json_raw",
     {.json_mode = true},
     "  [1, 2, {\"x\": \"]\"}] trailing",
     "",
     "[1, 2, {\"x\": \"]\"}]",
     {NULL},
     -1,
     .json_valid = 1},
    {"json_plain",
     {.json_mode = true},
     "Sure! {\"a\":1}",
     "",
     "Sure! {\"a\":1}",
     {NULL},
     -1,
     .json_valid = 0},
    {"json_fence_then_text",
     {.json_mode = true},
     "``` not json",
     "",
     "``` not json",
     {NULL},
     -1,
     .json_valid = 0},
    {"json_truncated",
     {.json_mode = true},
     "{\"a\": [1, 2",
     "",
     "{\"a\": [1, 2",
     {NULL},
     -1,
     .json_valid = 0},
    {"json_after_reasoning",
     {.json_mode = true, .reasoning = true, .think_opened = true},
     "x</think>\n```json\n{}\n```",
     "x",
     "{}",
     {NULL},
     -1,
     .json_valid = 1},
    {"json_held_fence_then_stop",
     {.json_mode = true, STOPS("STOP")},
     "```STOP{}",
     "",
     "```",
     {NULL},
     0,
     .json_valid = 0},
    {"json_only_fence_start",
     {.json_mode = true},
     "  ```js",
     "",
     "  ```js",
     {NULL},
     -1,
     .json_valid = 0},
    {"stop_simple", {STOPS("STOP")}, "Hello STOP world", "", "Hello ", {NULL}, 0},
    {"stop_overlapping", {STOPS("abcd", "bc")}, "xxabcex", "", "xxa", {NULL}, 1},
    {"stop_kept",
     {.keep_stop = true, STOPS("STOP")},
     "Hello STOP world",
     "",
     "Hello STOP",
     {NULL},
     0},
    {"stop_kept_the_one_found",
     {.keep_stop = true, STOPS("abcd", "bc")},
     "xxabcex",
     "",
     "xxabc",
     {NULL},
     1},
    {"stop_shortest_at_same_place", {STOPS("abc", "ab")}, "zabc", "", "z", {NULL}, 1},
    {"stop_not_in_reasoning",
     {.reasoning = true, .think_opened = true, STOPS("STOP")},
     "has STOP inside</think>answer STOP tail",
     "has STOP inside",
     "answer ",
     {NULL},
     0},
    {"stop_not_in_tool_markup",
     {.tools = true, STOPS("STOP", "name")},
     TC_OPEN INV("f") PS("v", "a STOP b") INV_END TC_CLOSE "ok STOP x " WEATHER,
     "",
     "ok ",
     {"f", "{\"v\": \"a STOP b\"}", NULL},
     0},
    {"stop_unicode", {STOPS("日本")}, "これは日本語", "", "これは", {NULL}, 0},
    {"stop_near_miss_at_end", {STOPS("END")}, "the EN", "", "the EN", {NULL}, -1},
    {"stop_with_newlines_and_tools",
     {.tools = true, STOPS("\n\n")},
     "para1\n\npara2",
     "",
     "para1",
     {NULL},
     0},
    {"stop_empty_ignored", {STOPS("", "x")}, "abxc", "", "ab", {NULL}, 1},
    {"stop_before_tool_block",
     {.tools = true, STOPS("<｜DSML｜")},
     "t " WEATHER,
     "",
     "t ",
     {NULL},
     0},
    {"utf8_multibyte",
     {.tools = true},
     "naïve café 😀 — 中文 ｜",
     "",
     "naïve café 😀 — 中文 ｜",
     {NULL},
     -1},
    {"utf8_invalid_bytes",
     {0},
     "a\xff"
     "b\xe2\x28\xa1"
     "c\xed\xa0\x80"
     "d\xe2\x82",
     "",
     "a\xef\xbf\xbd"
     "b\xef\xbf\xbd(\xef\xbf\xbd"
     "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
     "d\xef\xbf\xbd",
     {NULL},
     -1},
    {"whitespace_tail_kept", {.tools = true}, "a \n", "", "a \n", {NULL}, -1},
    {"empty_output", {.tools = true, .reasoning = true}, "", "", "", {NULL}, -1, .ropen = false},
    {"malformed_garbage_in_block", {.tools = true}, TC_OPEN "\nhello", "", "hello", {NULL}, -1, 1},
    {"malformed_invoke_without_name",
     {.tools = true},
     TC_OPEN "<" D "invoke>x",
     "",
     "<" D "invoke>x",
     {NULL},
     -1,
     1},
    {"malformed_in_invoke",
     {.tools = true},
     TC_OPEN INV("f") PS("a", "1") "oops" INV_END TC_CLOSE,
     "",
     "oops" INV_END TC_CLOSE,
     {"f", "{\"a\": \"1\"}", NULL},
     -1,
     1,
     1},
    {"malformed_nested_opener",
     {.tools = true},
     TC_OPEN TC_OPEN INV("f") INV_END TC_CLOSE "after",
     "",
     "after",
     {"f", "{}", NULL},
     -1,
     1},
    {"truncated_in_string_param",
     {.tools = true},
     "x" TC_OPEN INV("f") "<" D "parameter name=\"city\" string=\"true\">Par",
     "",
     "x",
     {"f", "{\"city\": \"Par\"}", NULL},
     -1,
     1,
     1},
    {"truncated_in_closing_tag",
     {.tools = true},
     TC_OPEN INV("f") "<" D "parameter name=\"city\" string=\"true\">Paris</" D "param",
     "",
     "",
     {"f", "{\"city\": \"Paris\"}", NULL},
     -1,
     1,
     1},
    {"truncated_in_json_param",
     {.tools = true},
     TC_OPEN INV("f") PS("a", "x") "<" D "parameter name=\"b\" string=\"false\">[1, 2",
     "",
     "",
     {"f", "{\"a\": \"x\"}", NULL},
     -1,
     1,
     1},
    {"truncated_mid_tag", {.tools = true}, "t" TC_OPEN "\n<" D "inv", "", "t", {NULL}, -1, 1},
    {"truncated_after_invoke",
     {.tools = true},
     TC_OPEN INV("f") INV_END "\n",
     "",
     "",
     {"f", "{}", NULL},
     -1,
     1},
    {"truncated_in_invoke",
     {.tools = true},
     TC_OPEN INV("f") PJ("n", "1"),
     "",
     "",
     {"f", "{\"n\": 1}", NULL},
     -1,
     1,
     1},
    {"truncated_right_after_opener", {.tools = true}, "a " TC_OPEN, "", "a", {NULL}, -1, 1},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static const char *check_expect(const void *ctx, const outpt_res *r) {
    const tcase *c = ctx;
    static char why[1024];
    if (r->bad[0]) return snprintf(why, sizeof why, "protocol: %s", r->bad), why;
    if (strcmp(outpt_str(&r->reasoning), c->reasoning))
        return snprintf(why, sizeof why, "reasoning [%s]", outpt_str(&r->reasoning)), why;
    if (strcmp(outpt_str(&r->text), c->text))
        return snprintf(why, sizeof why, "text [%s]", outpt_str(&r->text)), why;
    int n = 0;
    while (c->calls[2 * n]) n++;
    if (n != r->n_calls) return snprintf(why, sizeof why, "%d calls, want %d", r->n_calls, n), why;
    int incomplete = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(r->calls[i].name, c->calls[2 * i]))
            return snprintf(why, sizeof why, "call %d name [%s]", i, r->calls[i].name), why;
        if (strcmp(outpt_str(&r->calls[i].args), c->calls[2 * i + 1]))
            return snprintf(why, sizeof why, "call %d args [%s]", i, outpt_str(&r->calls[i].args)),
                   why;
        incomplete += !r->calls[i].complete;
    }
    if (incomplete != c->incomplete)
        return snprintf(why, sizeof why, "%d incomplete calls", incomplete), why;
    if (r->stop_index != c->stop || r->sum.stop_index != c->stop || r->stopped != (c->stop >= 0))
        return snprintf(why, sizeof why, "stop %d", r->stop_index), why;
    if (r->sum.n_errors != c->errors)
        return snprintf(why, sizeof why, "%d errors: %s", r->sum.n_errors, outpt_str(&r->errors)),
               why;
    if (c->cfg.json_mode && r->sum.json_valid != (c->json_valid == 1)) return "json_valid";
    if (r->sum.reasoning_open != c->ropen) return "reasoning_open";
    return "";
}

TEST(outp_cases_all_chunkings) {
    for (size_t i = 0; i < N_CASES; i++) {
        const char *why =
            outpt_all_modes(&cases[i].cfg, cases[i].in, true, check_expect, &cases[i], 8, i + 1);
        CHECKF(!*why, "case %s: %s", cases[i].name, why);
    }
}
