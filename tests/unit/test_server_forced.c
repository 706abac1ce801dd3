/* test_server_forced.c — enforced tool_choice ("required" / Anthropic "any",
 * and a named tool) in the three chat-like protocols, streamed and not, for
 * the three formats that write tool calls (DSML, Hermes, DeepSeek V3),
 * driven by synthetic model output: the prompt ends inside the tool-call
 * block (and the named call), so what the model writes is a continuation
 * parsed as tool calls from its first byte. A completed call gives finish
 * "tool_calls" / "tool_use"; output with no complete call gives "stop" /
 * "end_turn" and, in a body, no tool call. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server/srv_internal.h"

#define D "｜DSML｜"
/* After `<｜DSML｜tool_calls>\n` (required) ... */
static const char *AFTER_BLOCK =
    "<" D "invoke name=\"get_weather\">\n<" D "parameter name=\"city\" string=\"true\">Paris</" D
    "parameter>\n</" D "invoke>\n</" D "tool_calls>";
/* ... and after `<｜DSML｜invoke name="get_weather">\n` (named). */
static const char *AFTER_INVOKE = "<" D "parameter name=\"city\" string=\"true\">Paris</" D
                                  "parameter>\n</" D "invoke>\n</" D "tool_calls>";

/* The same for chatml's Hermes tags, after `<tool_call>\n` (required) and
 * after `{"name": "get_weather", "arguments": ` (named) ... */
static const char *HERMES_BLOCK =
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
static const char *HERMES_NAMED = "{\"city\": \"Paris\"}}\n</tool_call>";
/* ... and DeepSeek V3's markers, after `<｜tool▁calls▁begin｜>` and after
 * `<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n`. */
#define INV_WEATHER "<" D "invoke name=\"get_weather\">\n"
#define V3_TAIL     "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
static const char *V3_BLOCK = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"
                              "\"city\": \"Paris\"}" V3_TAIL;
static const char *V3_NAMED = "{\"city\": \"Paris\"}" V3_TAIL;

static const render_format FORMATS[] = {RENDER_DEEPSEEK_V4, RENDER_CHATML, RENDER_DEEPSEEK_V3};

static const srv_limits LIM = {.max_n = 8, .max_stops = 8, .max_json_depth = 16, .model_name = "m"};

/* body prepared for api in fmt into r and p (both to free); false, the
 * reason printed, where srv_prepare refuses it. */
static bool prepared(const srv_api *api, const char *body, render_format fmt, srv_req *r,
                     srv_prepared *p) {
    srv_fail f = {0};
    if (srv_prepare(api, body, strlen(body), &LIM, fmt, NULL, r, p, &f) == 0) return true;
    fprintf(stderr, "  prepare: %s\n", f.msg);
    return false;
}

typedef enum { REQUIRED, NAMED, AUTO } choice;

/* A complete call to get_weather(city: Paris), as format fmt's model writes
 * it after the forced prompt. */
static const char *call_after(render_format fmt, choice c) {
    if (fmt == RENDER_CHATML) return c == NAMED ? HERMES_NAMED : HERMES_BLOCK;
    if (fmt == RENDER_DEEPSEEK_V3) return c == NAMED ? V3_NAMED : V3_BLOCK;
    return c == NAMED ? AFTER_INVOKE : AFTER_BLOCK;
}

/* A request for api with one tool (get_weather, plus `other` to show the
 * named choice picks) and the given tool_choice. */
static void request(char *out, size_t cap, const srv_api *api, choice c) {
    if (api == &srv_api_messages)
        snprintf(out, cap,
                 "{\"model\":\"m\",\"max_tokens\":50,\"messages\":[{\"role\":\"user\",\"content\":"
                 "\"w?\"}],\"tools\":[{\"name\":\"other\",\"input_schema\":{\"type\":\"object\"}},"
                 "{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\"}}],"
                 "\"tool_choice\":%s,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}",
                 c == NAMED  ? "{\"type\":\"tool\",\"name\":\"get_weather\"}"
                 : c == AUTO ? "{\"type\":\"auto\"}"
                             : "{\"type\":\"any\"}");
    else if (api == &srv_api_responses)
        snprintf(out, cap,
                 "{\"model\":\"m\",\"input\":\"w?\",\"tools\":[{\"type\":\"function\",\"name\":"
                 "\"other\",\"parameters\":{\"type\":\"object\"}},{\"type\":\"function\",\"name\":"
                 "\"get_weather\",\"parameters\":{\"type\":\"object\"}}],\"tool_choice\":%s}",
                 c == NAMED  ? "{\"type\":\"function\",\"name\":\"get_weather\"}"
                 : c == AUTO ? "\"auto\""
                             : "\"required\"");
    else
        snprintf(out, cap,
                 "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"w?\"}],\"tools\":"
                 "[{\"type\":\"function\",\"function\":{\"name\":\"other\",\"parameters\":{}}},"
                 "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{}}}"
                 "],\"tool_choice\":%s,\"chat_template_kwargs\":{\"thinking\":true}}",
                 c == NAMED  ? "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"
                 : c == AUTO ? "\"auto\""
                             : "\"required\"");
}

/* What a response says, whatever the protocol: the finish, the first tool
 * call's name and city argument, and how many tool calls. */
typedef struct seen {
    char finish[32], name[64], city[64];
    int n_calls;
} seen;

static json_t *jget(json_t *j, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *k = strtok(buf, "."); k && j; k = strtok(NULL, "."))
        j = (*k >= '0' && *k <= '9') ? json_array_get(j, (size_t)atoi(k)) : json_object_get(j, k);
    return j;
}
static const char *js(json_t *j, const char *path) {
    const char *s = json_string_value(jget(j, path));
    return s ? s : "";
}

static void city_of(seen *w, const char *args_json) {
    json_t *a = json_loads(args_json, 0, NULL);
    snprintf(w->city, sizeof w->city, "%s", js(a, "city"));
    json_decref(a);
}

/* A Responses or Messages body (or the response object a stream ends with). */
static void read_body(const srv_api *api, json_t *body, seen *w) {
    size_t i;
    json_t *it;
    if (api == &srv_api_chat) {
        json_t *ch = jget(body, "choices.0");
        snprintf(w->finish, sizeof w->finish, "%s", js(ch, "finish_reason"));
        json_t *tc = jget(ch, "message.tool_calls");
        w->n_calls = (int)json_array_size(tc);
        snprintf(w->name, sizeof w->name, "%s", js(tc, "0.function.name"));
        if (w->n_calls) city_of(w, js(tc, "0.function.arguments"));
        return;
    }
    bool msgs = api == &srv_api_messages;
    if (msgs) snprintf(w->finish, sizeof w->finish, "%s", js(body, "stop_reason"));
    json_array_foreach(jget(body, msgs ? "content" : "output"), i, it) {
        if (strcmp(js(it, "type"), msgs ? "tool_use" : "function_call")) continue;
        if (!w->n_calls++) {
            snprintf(w->name, sizeof w->name, "%s", js(it, "name"));
            if (msgs)
                snprintf(w->city, sizeof w->city, "%s", js(it, "input.city"));
            else
                city_of(w, js(it, "arguments"));
        }
    }
    if (!msgs) snprintf(w->finish, sizeof w->finish, "%s", js(body, "status")); /* no finish */
}

/* Runs `output` as the model's continuation; fills w from the body or, when
 * streamed, from the stream's events. */
static int run(const srv_api *api, render_format fmt, choice c, bool stream, const char *output,
               size_t chunk, seen *w) {
    memset(w, 0, sizeof *w);
    char body[2048];
    request(body, sizeof body, api, c);
    srv_req r;
    srv_prepared p;
    if (!prepared(api, body, fmt, &r, &p)) return -1;
    srv_fail f = {0};
    int rc = -1;
    if ((c == AUTO) == r.tool_forced ||
        (c != AUTO && p.think_opened)) { /* forced: non-thinking, prompt ends in the block */
        fprintf(stderr, "not forced (%d) or thinking (%d)\n", r.tool_forced, p.think_opened);
        goto out;
    }
    r.stream = stream;
    gen_env env = {.model_name = "m"};
    srv_gen *g = gen_new(&env, api, &r, 11, p.think_opened, &f);
    if (!g) goto out;
    gen_begin(g);
    size_t n = strlen(output);
    for (size_t at = 0; at < n; at += chunk)
        gen_on_text(g, 0, output + at, n - at < chunk ? n - at : chunk);
    gen_on_final(g, 0, ENGINE_FINISH_STOP, (engine_usage){11, 20, 0}, NULL);
    if (!stream) {
        json_t *b = api->body(g);
        read_body(api, b, w);
        json_decref(b);
    } else {
        char args[512] = "";
        for (char *ev = g->out.p ? g->out.p : ""; (ev = strstr(ev, "data: "));) {
            char *end = strstr(ev, "\n\n");
            if (!end) break;
            *end = 0;
            json_t *e = json_loads(ev + 6, 0, NULL);
            ev = end + 2;
            if (!e) continue;
            if (api == &srv_api_chat) {
                json_t *tc = jget(e, "choices.0.delta.tool_calls.0");
                if (*js(tc, "function.name")) {
                    w->n_calls++;
                    snprintf(w->name, sizeof w->name, "%s", js(tc, "function.name"));
                }
                strncat(args, js(tc, "function.arguments"), sizeof args - strlen(args) - 1);
                if (*js(e, "choices.0.finish_reason"))
                    snprintf(w->finish, sizeof w->finish, "%s", js(e, "choices.0.finish_reason"));
            } else if (api == &srv_api_messages) {
                if (!strcmp(js(e, "content_block.type"), "tool_use")) {
                    w->n_calls++;
                    snprintf(w->name, sizeof w->name, "%s", js(e, "content_block.name"));
                }
                strncat(args, js(e, "delta.partial_json"), sizeof args - strlen(args) - 1);
                if (*js(e, "delta.stop_reason"))
                    snprintf(w->finish, sizeof w->finish, "%s", js(e, "delta.stop_reason"));
            } else if (!strcmp(js(e, "type"), "response.completed")) {
                read_body(api, jget(e, "response"), w);
            }
            json_decref(e);
        }
        if (api != &srv_api_responses && w->n_calls) city_of(w, args);
    }
    gen_free(g);
    rc = 0;
out:
    srv_req_free(&r);
    srv_prepared_free(&p);
    return rc;
}

static const srv_api *const APIS[] = {&srv_api_chat, &srv_api_responses, &srv_api_messages};

TEST(server_forced_tool_choice_gives_the_call) {
    size_t chunks[] = {1, 5, 1000};
    for (int fi = 0; fi < 3; fi++)
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 2; c++)
                for (int st = 0; st < 2; st++)
                    for (int k = 0; k < 3; k++) {
                        seen w;
                        const srv_api *api = APIS[a];
                        render_format fmt = FORMATS[fi];
                        CHECK(run(api, fmt, (choice)c, st, call_after(fmt, (choice)c), chunks[k],
                                  &w) == 0);
                        const char *want = api == &srv_api_messages    ? "tool_use"
                                           : api == &srv_api_responses ? "completed"
                                                                       : "tool_calls";
                        CHECKF(!strcmp(w.finish, want) && w.n_calls == 1 &&
                                   !strcmp(w.name, "get_weather") && !strcmp(w.city, "Paris"),
                               "%s %s %s stream %d chunk %zu: finish %s, %d calls, %s(%s)",
                               render_format_name(fmt), api->path,
                               c == NAMED ? "named" : "required", st, chunks[k], w.finish,
                               w.n_calls, w.name, w.city);
                    }
}

TEST(server_forced_tool_choice_without_a_call_is_a_plain_stop) {
    /* required: the model wrote no invoke; named: it wrote nothing usable */
    const char *outputs[2] = {"I would rather not.", "no parameters here"};
    for (int fi = 0; fi < 3; fi++)
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 2; c++)
                for (int st = 0; st < 2; st++) {
                    seen w;
                    const srv_api *api = APIS[a];
                    render_format fmt = FORMATS[fi];
                    CHECK(run(api, fmt, (choice)c, st, outputs[c], 3, &w) == 0);
                    const char *want = api == &srv_api_messages    ? "end_turn"
                                       : api == &srv_api_responses ? "completed"
                                                                   : "stop";
                    /* a DSML stream has sent the forced call's start; a body drops
                     * it (the JSON-bodied formats send a call only once it reads) */
                    int calls = st && c == NAMED && fmt == RENDER_DEEPSEEK_V4 ? 1 : 0;
                    CHECKF(!strcmp(w.finish, want) && w.n_calls == calls,
                           "%s %s %s stream %d: finish %s, %d calls", render_format_name(fmt),
                           api->path, c == NAMED ? "named" : "required", st, w.finish, w.n_calls);
                }
}

TEST(server_forced_tool_choice_only_where_calls_are_written_and_asked) {
    char body[2048];
    request(body, sizeof body, &srv_api_chat, REQUIRED);
    srv_req r;
    srv_prepared p;
    CHECK(prepared(&srv_api_chat, body, RENDER_LLAMA3, &r, &p));
    CHECK(!r.tool_forced); /* Llama 3's template has no tools */
    srv_req_free(&r);
    srv_prepared_free(&p);
    const char *auto_body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"}],\"tools\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"x\",\"parameters\":{}}}]}";
    CHECK(prepared(&srv_api_chat, auto_body, RENDER_DEEPSEEK_V4, &r, &p));
    CHECK(!r.tool_forced);
    srv_req_free(&r);
    srv_prepared_free(&p);
}

/* The prompt ends as the V4 renderer spells a non-thinking turn that opens a
 * tool-call block: the opener a soft control segment, the invoke tag TEXT. */
TEST(server_forced_prompt_ends_inside_the_block) {
    for (int c = 0; c < 2; c++) {
        char body[2048];
        request(body, sizeof body, &srv_api_chat, (choice)c);
        srv_req r;
        srv_prepared p;
        CHECK(prepared(&srv_api_chat, body, RENDER_DEEPSEEK_V4, &r, &p));
        render_segs segs = {0};
        di_err err = {{0}};
        CHECK(srv_render_conv(RENDER_DEEPSEEK_V4, &r, &segs, &err) == 0 && r.tool_forced);
        size_t n = 0;
        char *s = render_to_string(&segs, &n);
        const char *want = c == NAMED ? "<｜Assistant｜></think><" D "tool_calls>\n<" D
                                        "invoke name=\"get_weather\">\n"
                                      : "<｜Assistant｜></think><" D "tool_calls>\n";
        size_t wn = strlen(want);
        CHECK(r.tool_syntax == OUTP_SYNTAX_DSML);
        CHECKF(n >= wn && !strcmp(s + n - wn, want), "prompt ends [%s]", n > 80 ? s + n - 80 : s);
        bool found = false;
        for (size_t i = 0; i < segs.n; i++)
            found |= segs.v[i].kind == RENDER_CONTROL && segs.v[i].soft &&
                     !strcmp(segs.v[i].s, "<" D "tool_calls>") && i + 1 >= segs.n - 1;
        CHECK(found);
        free(s);
        render_segs_free(&segs);
        srv_req_free(&r);
        srv_prepared_free(&p);
    }
}

/* chatml and deepseek-v3: the prompt ends as their renderers spell a call's
 * start, markers control segments (so the ids are the markers' own). */
TEST(server_forced_prompt_ends_inside_the_call_hermes_and_v3) {
    static const struct {
        render_format fmt;
        const char *want[2], *marker;
        outp_syntax syntax;
    } cases[] = {
        {RENDER_CHATML,
         {"<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n",
          "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{\"name\": "
          "\"get_weather\", \"arguments\": "},
         "<tool_call>",
         OUTP_SYNTAX_HERMES},
        {RENDER_DEEPSEEK_V3,
         {"<｜Assistant｜><｜tool▁calls▁begin｜>",
          "<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
          "get_weather\n```json\n"},
         "<｜tool▁calls▁begin｜>",
         OUTP_SYNTAX_DSV3},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        for (int c = 0; c < 2; c++) {
            char body[2048];
            request(body, sizeof body, &srv_api_chat, (choice)c);
            srv_req r;
            srv_prepared p;
            CHECK(prepared(&srv_api_chat, body, cases[k].fmt, &r, &p));
            render_segs segs = {0};
            di_err err = {{0}};
            CHECK(srv_render_conv(cases[k].fmt, &r, &segs, &err) == 0 && r.tool_forced);
            CHECK(r.tool_syntax == cases[k].syntax);
            size_t n = 0;
            char *s = render_to_string(&segs, &n);
            const char *want = cases[k].want[c];
            size_t wn = strlen(want);
            CHECKF(n >= wn && !strcmp(s + n - wn, want), "%s: prompt ends [%s]",
                   render_format_name(cases[k].fmt), n > 120 ? s + n - 120 : s);
            bool found = false;
            for (size_t i = 0; i < segs.n; i++)
                found |= segs.v[i].kind == RENDER_CONTROL && !strcmp(segs.v[i].s, cases[k].marker);
            CHECK(found);
            free(s);
            render_segs_free(&segs);
            srv_req_free(&r);
            srv_prepared_free(&p);
        }
}

/* Unforced (tool_choice auto): text, then calls as each format writes them,
 * become the answer's text and its tool calls, finish "tool_calls". */
TEST(server_auto_tool_calls_in_hermes_and_v3) {
    static const char *const outputs[] = {
        "</think>Checking.\n<tool_call>\n"
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Paris\"}}\n</tool_call>",
        "</think>Checking.<｜tool▁calls▁begin｜>"
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        "{\"city\": \"Paris\"}" V3_TAIL,
    };
    const render_format fmts[] = {RENDER_CHATML, RENDER_DEEPSEEK_V3};
    for (int k = 0; k < 2; k++)
        for (int a = 0; a < 3; a++)
            for (int st = 0; st < 2; st++) {
                seen w;
                const srv_api *api = APIS[a];
                CHECK(run(api, fmts[k], AUTO, st, outputs[k], 4, &w) == 0);
                const char *want = api == &srv_api_messages    ? "tool_use"
                                   : api == &srv_api_responses ? "completed"
                                                               : "tool_calls";
                CHECKF(!strcmp(w.finish, want) && w.n_calls == 1 &&
                           !strcmp(w.name, "get_weather") && !strcmp(w.city, "Paris"),
                       "%s %s stream %d: finish %s, %d calls, %s(%s)", render_format_name(fmts[k]),
                       api->path, st, w.finish, w.n_calls, w.name, w.city);
            }
}

/* The calls the engine holds r's reply to: its request as the server
 * builds it (srv_json_constraint), compiled as engine_submit compiles it. */
static jg_calls *held_calls(const srv_req *r) {
    engine_request er = {0};
    srv_json_constraint(r, false, NULL, &er);
    di_err err = {{0}};
    jg_calls *jc = er.json && er.call_forms ? engine_calls_compile(&er, &err) : NULL;
    if (!jc) fprintf(stderr, "  no calls held: %s\n", err.msg);
    return jc;
}

/* A forced choice holds the calls to the tools' forms (chatml, deepseek-v3,
 * deepseek-v4): the calls the parser reads above (the same texts) are
 * taken whole, a call of a tool not offered is not; a named choice or
 * parallel_tool_calls false allows one call, required up to
 * SRV_MAX_FORCED_CALLS. Llama 3 gets no forms. */
TEST(server_forced_calls_are_held_to_the_tools_forms) {
    const render_format fmts[] = {RENDER_CHATML, RENDER_DEEPSEEK_V3, RENDER_DEEPSEEK_V4,
                                  RENDER_LLAMA3};
    for (int k = 0; k < 4; k++)
        for (int c = 0; c < 2; c++) {
            char body[2048];
            request(body, sizeof body, &srv_api_chat, (choice)c);
            srv_req r;
            srv_prepared p;
            CHECK(prepared(&srv_api_chat, body, fmts[k], &r, &p));
            if (k == 3) {
                CHECK(r.n_call_forms == 0);
            } else {
                CHECK(r.n_call_forms == (c == NAMED ? 1 : 2));
                CHECK(r.max_calls == (c == NAMED ? 1 : SRV_MAX_FORCED_CALLS));
                jg_calls *jc = held_calls(&r);
                CHECK(jc);
                const char *out = call_after(fmts[k], (choice)c);
                jg_state s;
                jg_init_calls(&s, jc);
                CHECKF(jg_feed(&s, out, strlen(out)) && jg_done(&s), "%s %d: [%s]",
                       render_format_name(fmts[k]), c, out);
                if (c == REQUIRED) {
                    const char *other = fmts[k] == RENDER_CHATML
                                            ? "{\"name\": \"get_time\", \"arguments\": {}"
                                        : fmts[k] == RENDER_DEEPSEEK_V4
                                            ? "<" D "invoke name=\"get_t"
                                            : "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_t";
                    jg_init_calls(&s, jc);
                    CHECK(!jg_feed(&s, other, strlen(other)));
                }
                jg_calls_free(jc);
            }
            srv_req_free(&r);
            srv_prepared_free(&p);
        }
}

/* tool_choice auto with a strict tool (chat's function.strict, Messages'
 * strict): the calls are held once the model opens a block, the strict
 * tool's arguments to its schema, the other's free; the answer the auto
 * test above parses is taken whole. Without a strict tool, or in Llama 3's
 * format, nothing is held. */
TEST(server_strict_tools_hold_calls_after_the_opener) {
    static const char *const outputs[] = {
        "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"
        "\n</tool_call>",
        "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        "```json\n{\"city\": \"Paris\"}" V3_TAIL,
        "Checking.<" D "tool_calls>\n" INV_WEATHER "<" D "parameter name=\"city\" string=\"true\">"
        "Paris</" D "parameter>\n</" D "invoke>\n</" D "tool_calls>",
    };
    const render_format fmts[] = {RENDER_CHATML, RENDER_DEEPSEEK_V3, RENDER_DEEPSEEK_V4,
                                  RENDER_LLAMA3};
    for (int k = 0; k < 4; k++)
        for (int strict = 0; strict < 2; strict++) {
            char body[1024];
            snprintf(body, sizeof body,
                     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"w?\"}],"
                     "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                     "\"strict\":%s,\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
                     "{\"type\":\"string\"}},\"required\":[\"city\"]}}},{\"type\":\"function\","
                     "\"function\":{\"name\":\"other\"}}]}",
                     strict ? "true" : "false");
            srv_req r;
            srv_prepared p;
            CHECK(prepared(&srv_api_chat, body, fmts[k], &r, &p));
            CHECK(!r.tool_forced);
            if (!strict || k == 3) {
                CHECK(r.n_call_forms == 0 && !r.calls_trigger);
            } else {
                CHECK(r.n_call_forms == 2 && r.calls_trigger);
                jg_calls *jc = held_calls(&r);
                CHECK(jc);
                jg_state s;
                jg_init_calls(&s, jc);
                CHECKF(jg_feed(&s, outputs[k], strlen(outputs[k])) && jg_done(&s), "%s",
                       render_format_name(fmts[k]));
                const char *bad =
                    k == 0 ? "x<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\""
                    : k == 1 ? "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                               "get_weather\n```json\n{\"town\""
                             : "<" D "tool_calls>\n" INV_WEATHER "<" D "parameter name=\"town\"";
                jg_init_calls(&s, jc);
                CHECK(!jg_feed(&s, bad, strlen(bad))); /* not a property of the strict tool */
                if (fmts[k] == RENDER_DEEPSEEK_V3) {   /* a lone call, as later turns write one */
                    const char *lone =
                        "Ok.<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
                        "```json\n{\"city\": \"Rome\"}\n```<｜tool▁call▁end｜> Done.";
                    jg_init_calls(&s, jc);
                    CHECK(jg_feed(&s, lone, strlen(lone)) && jg_done(&s));
                    const char *lone_bad = "Ok.<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                                           "get_weather\n```json\n{\"town\"";
                    jg_init_calls(&s, jc);
                    CHECK(!jg_feed(&s, lone_bad, strlen(lone_bad)));
                }
                jg_calls_free(jc);
            }
            srv_req_free(&r);
            srv_prepared_free(&p);
        }
}

/* OpenAI's allowed_tools: the prompt offers every tool (so it stays the
 * same whatever the choice), the calls may name the allowed ones only:
 * required forces a call of one of them, auto holds the calls the model
 * opens. Both shapes: Chat Completions' nested, Responses' flat. */
TEST(server_allowed_tools_hold_the_names) {
    static const char *const bodies[] = {
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"w?\"}],\"tools\":"
        "[{\"type\":\"function\",\"function\":{\"name\":\"other\"}},{\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\"}}],\"tool_choice\":{\"type\":\"allowed_tools\","
        "\"allowed_tools\":{\"mode\":\"%s\",\"tools\":[{\"type\":\"function\",\"function\":"
        "{\"name\":\"get_weather\"}}]}}}",
        "{\"model\":\"m\",\"input\":\"w?\",\"tools\":[{\"type\":\"function\",\"name\":\"other\"},"
        "{\"type\":\"function\",\"name\":\"get_weather\"}],\"tool_choice\":{\"type\":"
        "\"allowed_tools\",\"mode\":\"%s\",\"tools\":[{\"type\":\"function\",\"name\":"
        "\"get_weather\"}]}}",
    };
    const srv_api *apis[] = {&srv_api_chat, &srv_api_responses};
    for (int a = 0; a < 2; a++)
        for (int req = 0; req < 2; req++) {
            char body[1024];
            snprintf(body, sizeof body, bodies[a], req ? "required" : "auto");
            srv_req r;
            srv_prepared p;
            CHECK(prepared(apis[a], body, RENDER_CHATML, &r, &p));
            CHECK(r.tool_forced == (req == 1) && r.conv->n_tools == 2);
            CHECK(r.n_call_forms == 1 && strstr(r.call_forms[0].first, "get_weather"));
            CHECK(req || r.calls_trigger);
            render_segs segs = {0};
            di_err err = {{0}};
            CHECK(srv_render_conv(RENDER_CHATML, &r, &segs, &err) == 0 && r.n_call_forms == 1);
            char *s = render_to_string(&segs, NULL);
            CHECK(strstr(s, "\"name\": \"other\"")); /* still offered in the prompt */
            free(s);
            render_segs_free(&segs);
            srv_req_free(&r);
            srv_prepared_free(&p);
        }
}

/* Structured output with tools offered (tool_choice auto): the reply is its
 * JSON or calls, held together (call_forms with an answer) where the format
 * writes calls; with tool_choice none, or in Llama 3's format (no tools
 * rendered), the JSON alone as without tools. */
TEST(server_structured_output_with_tools_is_an_answer_or_calls) {
    static const char *const choices[] = {"\"auto\"", "\"none\""};
    const render_format fmts[] = {RENDER_CHATML, RENDER_DEEPSEEK_V4, RENDER_LLAMA3};
    for (int k = 0; k < 3; k++)
        for (int ch = 0; ch < 2; ch++) {
            char body[1024];
            snprintf(body, sizeof body,
                     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"w?\"}],"
                     "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}],"
                     "\"tool_choice\":%s,\"response_format\":{\"type\":\"json_schema\","
                     "\"json_schema\":{\"name\":\"a\",\"schema\":{\"type\":\"object\","
                     "\"properties\":{\"ok\":{\"type\":\"boolean\"}}}}}}",
                     choices[ch]);
            srv_req r;
            srv_prepared p;
            CHECK(prepared(&srv_api_chat, body, fmts[k], &r, &p));
            engine_request er = {0};
            srv_json_constraint(&r, false, NULL, &er);
            bool held = k < 2 && ch == 0;
            CHECKF(r.calls_answer == held && (r.n_call_forms > 0) == held, "%s %s",
                   render_format_name(fmts[k]), choices[ch]);
            CHECK(er.json); /* held with the calls, or alone */
            CHECK(held ? er.call_forms && er.calls_answer && er.calls_answer_schema
                       : !er.call_forms && er.json_schema);
            srv_req_free(&r);
            srv_prepared_free(&p);
        }
}
