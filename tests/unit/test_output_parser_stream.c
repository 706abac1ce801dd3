/* test_output_parser_stream.c — the output parser as a stream: what is
 * emitted at once and what is held back, tool arguments streaming, stop
 * strings ending the feed, linear time on degenerate whitespace, randomized
 * outputs in random chunkings, and a round trip through the DeepSeek V4
 * renderer's DSML (what the renderer writes for a tool call, the parser reads
 * back as the same call). */
#include "harness.h"
#include "outp_test.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "recipe/conversation.h"
#include "recipe/render.h"

/* ---- early emission ------------------------------------------------------------ */

TEST(outp_emits_early) {
    outpt_res r;
    outp_config cfg = {.tools = true, STOPS("STOP")};
    outp_parser *p = outp_new(&cfg, NULL);
    OUTPT_FEED(p, "Hello wor", outpt_fresh(&r));
    CHECKF(!strcmp(outpt_str(&r.text), "Hello wor"), "[%s]", outpt_str(&r.text));
    OUTPT_FEED(p, "ld <｜DS", &r); /* possible block opener; the space before it too */
    CHECKF(!strcmp(outpt_str(&r.text), "Hello world"), "[%s]", outpt_str(&r.text));
    OUTPT_FEED(p, "x ST", &r); /* not an opener after all; " ST" may begin " STOP"... */
    CHECKF(!strcmp(outpt_str(&r.text), "Hello world <｜DSx"), "[%s]", outpt_str(&r.text));
    OUTPT_FEED(p, "\xe4\xb8", &r); /* ...and half a character cannot be emitted */
    CHECKF(!strcmp(outpt_str(&r.text), "Hello world <｜DSx"), "[%s]", outpt_str(&r.text));
    OUTPT_FEED(p, "\xad", &r);
    CHECKF(!strcmp(outpt_str(&r.text), "Hello world <｜DSx ST中"), "[%s]", outpt_str(&r.text));
    outp_finish(p, outpt_event, &r);
    outp_free(p);
    outpt_res_free(&r);

    /* Without tools, whitespace and "<" are not held. */
    outp_config plain = {0};
    p = outp_new(&plain, NULL);
    OUTPT_FEED(p, "a <｜DSML｜tool_calls", outpt_fresh(&r));
    CHECKF(!strcmp(outpt_str(&r.text), "a <｜DSML｜tool_calls"), "[%s]", outpt_str(&r.text));
    outp_finish(p, outpt_event, &r);
    outp_free(p);
    outpt_res_free(&r);

    /* Reasoning: only a possible "</think>" is held. */
    outp_config think = {.reasoning = true, .think_opened = true};
    p = outp_new(&think, NULL);
    OUTPT_FEED(p, "abc </th", outpt_fresh(&r));
    CHECKF(!strcmp(outpt_str(&r.reasoning), "abc "), "[%s]", outpt_str(&r.reasoning));
    OUTPT_FEED(p, "ink>", &r);
    CHECK(r.text.n == 0 && !strcmp(outpt_str(&r.reasoning), "abc "));
    outp_finish(p, outpt_event, &r);
    outp_free(p);
    outpt_res_free(&r);
}

TEST(outp_streams_tool_arguments) {
    outpt_res r;
    outp_config cfg = {.tools = true};
    outp_parser *p = outp_new(&cfg, NULL);
    OUTPT_FEED(p, TC_OPEN INV("get_weather"), outpt_fresh(&r));
    CHECK(r.n_calls == 1 && !strcmp(r.calls[0].name, "get_weather"));
    CHECKF(!strcmp(outpt_str(&r.calls[0].args), "{"), "[%s]", outpt_str(&r.calls[0].args));
    OUTPT_FEED(p, "<" D "parameter name=\"city\" string=\"true\">Par", &r);
    CHECKF(!strcmp(outpt_str(&r.calls[0].args), "{\"city\": \"Par"), "[%s]",
           outpt_str(&r.calls[0].args));
    OUTPT_FEED(p, "is\n</" D "par", &r);
    CHECKF(!strcmp(outpt_str(&r.calls[0].args), "{\"city\": \"Paris\\n"), "[%s]",
           outpt_str(&r.calls[0].args));
    OUTPT_FEED(p, "ameter>" PJ("days", "[3,") " " INV_END, &r);
    CHECKF(!strcmp(outpt_str(&r.calls[0].args), "{\"city\": \"Paris\\n\", \"days\": \"[3,\"}"),
           "[%s]", outpt_str(&r.calls[0].args));
    CHECK(r.calls[0].ended && r.calls[0].complete);
    outp_finish(p, outpt_event, &r);
    CHECK(r.sum.n_errors == 1); /* the block was never closed */
    outp_free(p);
    outpt_res_free(&r);
}

TEST(outp_stop_ends_feeding_and_config_errors) {
    outpt_res r;
    outp_config cfg = {STOPS("\n\nUser:")};
    outp_parser *p = outp_new(&cfg, NULL);
    CHECK(OUTPT_FEED(p, "answer\n\nUs", outpt_fresh(&r)) == 0);
    CHECK(OUTPT_FEED(p, "er: more", &r) == 1);
    CHECK(OUTPT_FEED(p, "ignored", &r) == 1);
    outp_finish(p, outpt_event, &r);
    CHECK(!strcmp(outpt_str(&r.text), "answer") && r.stop_index == 0 && r.n_finish == 1);
    outp_free(p);
    outpt_res_free(&r);

    di_err err;
    outp_config badcfg = {STOPS("ok", "\xff")};
    CHECK(outp_new(&badcfg, &err) == NULL);
    CHECKF(strstr(err.msg, "stop[1]") != NULL, "%s", err.msg);
}

TEST(outp_long_whitespace_runs_stay_linear) {
    /* A degenerate model can emit long whitespace runs; with tools on they are
     * held (a tool block may follow) but must not be rescanned per byte. */
    outpt_res r;
    outp_config cfg = {.tools = true, .reasoning = true, STOPS("STOP")};
    outp_parser *p = outp_new(&cfg, NULL);
    outpt_fresh(&r);
    enum { N = 200000 };
    double t0 = di_now();
    for (int i = 0; i < N; i++) outp_feed(p, i % 2 ? "\n" : " ", 1, outpt_event, &r);
    OUTPT_FEED(p, "x", &r);
    double dt = di_now() - t0;
    CHECK(r.text.n == N + 1 && r.reasoning.n == 0);
    CHECKF(dt < 10.0, "%.2f s for %d whitespace bytes", dt, N);
    outp_finish(p, outpt_event, &r);
    outp_free(p);
    outpt_res_free(&r);
}

/* ---- randomized ------------------------------------------------------------------- */

static const char *const pieces[] = {
    "a",  " ",   "\n",        "<",    "｜",       "DSML",   "<｜DSML｜", "</think>", "<think>",
    "é",  "😀",   "{",         "}",    "[",        "]",      "\"",        "\\",       "STOP",
    "ST", "```", "```json\n", "\xff", "\xe4\xb8", "日本語", "</",        ">",        "\t",
};
#define N_PIECES (sizeof pieces / sizeof pieces[0])

static void add_block(di_buf *o, uint64_t *rng) {
    bool v41 = outpt_rng(rng) & 1;
    const char *sp = v41 ? " " : "";
    char t[256];
    snprintf(t, sizeof t, "<" D "%s>\n", v41 ? " calls" : "tool_calls");
    di_buf_add(o, t, strlen(t));
    int n_inv = 1 + (int)(outpt_rng(rng) % 3);
    for (int i = 0; i < n_inv; i++) {
        snprintf(t, sizeof t, "<" D "%sinvoke name=\"fn%d\">\n", sp, i);
        di_buf_add(o, t, strlen(t));
        int n_par = (int)(outpt_rng(rng) % 4);
        for (int k = 0; k < n_par; k++) {
            static const char *const vals[] = {
                "x",      "42", "{\"a\": [1, \"}\"]}", "a \"q\" \\ 😀", "not json", "",
                " true ", "<",  "</" D "para"};
            const char *v = vals[outpt_rng(rng) % 9];
            bool str = outpt_rng(rng) & 1;
            snprintf(t, sizeof t, "<" D "%sparameter name=\"p%d\" string=\"%s\">", sp, k,
                     str ? "true" : "false");
            di_buf_add(o, t, strlen(t));
            di_buf_add(o, v, strlen(v));
            snprintf(t, sizeof t, "</" D "%sparameter>\n", sp);
            di_buf_add(o, t, strlen(t));
        }
        snprintf(t, sizeof t, "</" D "%sinvoke>\n", sp);
        di_buf_add(o, t, strlen(t));
    }
    snprintf(t, sizeof t, "</" D "%s>", v41 ? " calls" : "tool_calls");
    di_buf_add(o, t, strlen(t));
}

TEST(outp_randomized_chunkings) {
    /* OUTP_RANDOM_ITERS / OUTP_RANDOM_SEED run it longer or elsewhere. */
    const char *env_n = getenv("OUTP_RANDOM_ITERS"), *env_seed = getenv("OUTP_RANDOM_SEED");
    int iters = env_n ? atoi(env_n) : 300;
    uint64_t rng = env_seed ? strtoull(env_seed, NULL, 10) : 12345;
    for (int it = 0; it < iters; it++) {
        di_buf o = {0};
        int n = 1 + (int)(outpt_rng(&rng) % 40);
        bool noise = it % 10 == 9; /* bytes that make up the markup, in random order */
        static const char alphabet[] = "<>/\"= \n\xef\xbd\x9c"
                                       "DSMLthink{}`\x80\xc3\xa9\\";
        for (int i = 0; i < (noise ? 8 * n : n); i++) {
            if (noise)
                di_buf_add(&o, &alphabet[outpt_rng(&rng) % (sizeof alphabet - 1)], 1);
            else if (outpt_rng(&rng) % 12 == 0)
                add_block(&o, &rng);
            else {
                const char *pc = pieces[outpt_rng(&rng) % N_PIECES];
                di_buf_add(&o, pc, strlen(pc));
            }
        }
        /* Corrupt some: truncate, or flip one byte. */
        if (o.n && outpt_rng(&rng) % 3 == 0) o.n = outpt_rng(&rng) % o.n;
        if (o.n && outpt_rng(&rng) % 4 == 0)
            o.p[outpt_rng(&rng) % o.n] = (char)('<' + (char)(outpt_rng(&rng) % 3));
        di_buf_add(&o, "", 0);
        uint64_t f = outpt_rng(&rng);
        outp_config cfg = {.reasoning = f & 1,
                           .think_opened = f & 2,
                           .tools = !(f & 4),
                           .json_mode = (f & 24) == 8,
                           .dsml = (outp_dsml)((f >> 5) % 4)};
        static const char *const stops[] = {"STOP", "日本", "\n\n"};
        if (f & 256) {
            cfg.stops = stops;
            cfg.n_stops = 3;
            cfg.keep_stop = f & 512;
        }
        uint64_t seed = outpt_rng(&rng);
        const char *why = outpt_all_modes(&cfg, o.p, false, NULL, NULL, 4, seed);
        if (*why) {
            CHECKF(0, "iteration %d: %s; input [%s]", it, why, o.p);
        }
        free(o.p);
    }
}

/* ---- round trip through the renderer ---------------------------------------------- */

/* The assistant turn the V4 renderer writes for a past tool-calling turn is
 * exactly what the model generates; parsed back, it must give the same calls
 * (names, and arguments equal as JSON: strings stay strings, the rest keeps
 * its type). */
TEST(outp_reads_back_what_the_v4_renderer_writes) {
    static const char args0[] = "{\"cmd\": \"ls \\\"a b\\\"\\n\", \"n\": 2, \"ok\": true, "
                                "\"none\": null, \"flags\": [\"x\", {\"y\": [1.5, \"z\"]}], "
                                "\"text\": \"日本語 😀 </think> <｜DSML｜\", \"num_str\": \"007\"}";
    static const char args1[] = "{}";
    char json[2048];
    snprintf(json, sizeof json,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"go\"},"
             "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"plan\","
             "\"tool_calls\":[{\"id\":\"c1\",\"function\":{\"name\":\"run\",\"arguments\":%s}},"
             "{\"id\":\"c2\",\"function\":{\"name\":\"noop\",\"arguments\":%s}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"}],\"thinking\":true}",
             args0, args1);
    di_err err = {{0}};
    conversation *c = conv_parse_json(json, strlen(json), &err);
    CHECKF(c, "%s", err.msg);
    render_segs segs = {0};
    int rc = render_conversation(RENDER_DEEPSEEK_V4, c, &segs, &err);
    conv_free(c);
    CHECKF(rc == 0, "%s", err.msg);
    char *prompt = render_to_string(&segs, NULL);
    render_segs_free(&segs);
    /* The model's output for that turn: after "<｜Assistant｜><think>", up to EOS. */
    const char *from = strstr(prompt, "<｜Assistant｜><think>");
    const char *to = from ? strstr(from, "<｜end▁of▁sentence｜>") : NULL;
    if (!from || !to) free(prompt);
    CHECK(from && to);
    CHECK(outp_prompt_opens_think(prompt, strlen(prompt))); /* thinking on: ends "<think>" */
    CHECK(!outp_prompt_opens_think(prompt, (size_t)(from - prompt) + strlen("<｜Assistant｜>")));
    CHECK(outp_prompt_opens_think("x<think>\n", 9) && !outp_prompt_opens_think("</think>", 8));
    from += strlen("<｜Assistant｜><think>");
    size_t n = (size_t)(to - from);
    char *out = strndup(from, n);
    free(prompt);

    outp_config cfg = {.reasoning = true, .think_opened = true, .tools = true};
    const char *why = outpt_all_modes(&cfg, out, true, NULL, NULL, 4, 7);
    outpt_res r;
    outpt_parse(&cfg, out, n, NULL, 0, &r);
    free(out);
    const char *want[2][2] = {{"run", args0}, {"noop", args1}};
    bool ok = !*why && r.n_calls == 2 && !strcmp(outpt_str(&r.reasoning), "plan") &&
              r.text.n == 0 && r.sum.n_errors == 0;
    for (int i = 0; ok && i < 2; i++) {
        json_t *a = json_loads(outpt_str(&r.calls[i].args), 0, NULL);
        json_t *b = json_loads(want[i][1], 0, NULL);
        ok = !strcmp(r.calls[i].name, want[i][0]) && r.calls[i].complete && json_equal(a, b);
        if (!ok)
            fprintf(stderr, "  call %d: %s %s\n", i, r.calls[i].name, outpt_str(&r.calls[i].args));
        json_decref(a);
        json_decref(b);
    }
    outpt_res_free(&r);
    CHECKF(ok, "round trip: %s", why);
}
