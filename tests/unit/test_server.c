/* test_server.c — the API server without sockets: request parsing and
 * conversion per protocol (fields named in errors, tools and tool results,
 * thinking), each protocol's error shape, and the output side driven by
 * synthetic model output (a DSML tool call, reasoning, stop strings) through
 * the same generation object the engine feeds — so the tool-call and
 * reasoning paths are tested although the test models write noise. */
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "harness.h"
#include "server/srv_internal.h"

static const char *TOOLS_CHAT =
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"description\":\"Weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
    "{\"type\":\"string\"}}}}}]";
static const char *CALL_OUTPUT =
    "Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

static const srv_limits LIM = {
    .max_n = 8, .max_stops = 8, .max_json_depth = 16, .max_batch = 4, .model_name = "m"};

typedef struct synth {
    srv_req r;
    srv_prepared p;
    srv_gen *g;
    json_t *events; /* the SSE data objects, in order ([DONE] as the string "[DONE]") */
    json_t *names;  /* the SSE event names ("" when none) */
    json_t *body;
} synth;

/* Parses body for api, runs `output` through a generation fed in chunks of
 * `chunk` bytes, and collects the stream events and the body. */
static int run_synth(synth *s, const srv_api *api, const char *body, bool stream,
                     const char *output, size_t chunk, bool think, engine_finish fin) {
    memset(s, 0, sizeof *s);
    srv_fail f = {0};
    if (srv_prepare(api, body, strlen(body), &LIM, RENDER_DEEPSEEK_V4, NULL, &s->r, &s->p, &f)) {
        fprintf(stderr, "prepare: %s\n", f.msg);
        return -1;
    }
    s->r.stream = stream;
    gen_env env = {.model_name = "m"};
    s->g = gen_new(&env, api, &s->r, 11, think, &f);
    if (!s->g) return -1;
    gen_begin(s->g);
    size_t n = strlen(output);
    for (int b = 0; b < s->g->n; b++) {
        for (size_t at = 0; at < n; at += chunk)
            gen_on_text(s->g, b, output + at, n - at < chunk ? n - at : chunk);
        gen_on_final(s->g, b, fin, (engine_usage){11, 20, 4}, NULL);
    }
    s->events = json_array();
    s->names = json_array();
    char *text = s->g->out.p ? s->g->out.p : "";
    for (char *ev = text; *ev;) {
        char *end = strstr(ev, "\n\n");
        if (!end) break;
        *end = 0;
        const char *name = "";
        char *data = strstr(ev, "data: ");
        if (!strncmp(ev, "event: ", 7)) {
            name = ev + 7;
            char *nl = strchr(ev, '\n');
            if (nl) *nl = 0;
        }
        json_array_append_new(s->names, json_string(name));
        if (data) {
            json_t *j = json_loads(data + 6, 0, NULL);
            json_array_append_new(s->events, j ? j : json_string(data + 6));
        }
        ev = end + 2;
    }
    s->body = api->body(s->g);
    return 0;
}

static void synth_free(synth *s) {
    gen_free(s->g);
    srv_req_free(&s->r);
    srv_prepared_free(&s->p);
    json_decref(s->events);
    json_decref(s->names);
    json_decref(s->body);
}

static const char *jpath_s(json_t *j, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *k = strtok(buf, "."); k && j; k = strtok(NULL, "."))
        j = (*k >= '0' && *k <= '9') ? json_array_get(j, (size_t)atoi(k)) : json_object_get(j, k);
    return json_string_value(j);
}

TEST(server_chat_tool_call_body_and_stream) {
    char body[1024];
    snprintf(body, sizeof body,
             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],%s}",
             TOOLS_CHAT);
    size_t chunks[] = {1, 3, 7, 1000};
    for (int c = 0; c < 4; c++) {
        synth s;
        CHECK(run_synth(&s, &srv_api_chat, body, true, CALL_OUTPUT, chunks[c], false,
                        ENGINE_FINISH_STOP) == 0);
        /* body */
        json_t *choice = json_array_get(json_object_get(s.body, "choices"), 0);
        CHECKF(!strcmp(json_string_value(json_object_get(choice, "finish_reason")), "tool_calls"),
               "finish %s", json_string_value(json_object_get(choice, "finish_reason")));
        CHECK(!strcmp(jpath_s(choice, "message.content"), "Let me check."));
        CHECK(!strcmp(jpath_s(choice, "message.tool_calls.0.function.name"), "get_weather"));
        json_t *args =
            json_loads(jpath_s(choice, "message.tool_calls.0.function.arguments"), 0, NULL);
        CHECK(args && !strcmp(json_string_value(json_object_get(args, "city")), "Paris"));
        CHECK(json_integer_value(json_object_get(args, "days")) == 3);
        json_decref(args);
        CHECK(!strncmp(jpath_s(choice, "message.tool_calls.0.id"), "call_", 5));
        CHECK(json_integer_value(
                  json_object_get(json_object_get(s.body, "usage"), "completion_tokens")) == 20);
        /* stream: arguments deltas concatenate to the same JSON; [DONE] last */
        size_t i;
        json_t *e;
        char argbuf[256] = "";
        const char *finish = NULL;
        json_array_foreach(s.events, i, e) {
            json_t *ch = json_array_get(json_object_get(e, "choices"), 0);
            const char *a = jpath_s(ch, "delta.tool_calls.0.function.arguments");
            if (a) strncat(argbuf, a, sizeof argbuf - strlen(argbuf) - 1);
            if (jpath_s(ch, "finish_reason")) finish = jpath_s(ch, "finish_reason");
        }
        json_t *sa = json_loads(argbuf, 0, NULL);
        CHECKF(sa && !strcmp(json_string_value(json_object_get(sa, "city")), "Paris"),
               "streamed args '%s' (chunk %zu)", argbuf, chunks[c]);
        json_decref(sa);
        CHECK(finish && !strcmp(finish, "tool_calls"));
        CHECK(!strcmp(json_string_value(json_array_get(s.events, json_array_size(s.events) - 1)),
                      "[DONE]"));
        synth_free(&s);
    }
}

TEST(server_messages_tool_use_stream_sequence) {
    const char *body =
        "{\"model\":\"m\",\"max_tokens\":50,\"messages\":[{\"role\":\"user\",\"content\":\"w?\"}],"
        "\"tools\":[{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\"}}]}";
    synth s;
    CHECK(run_synth(&s, &srv_api_messages, body, true, CALL_OUTPUT, 5, false, ENGINE_FINISH_STOP) ==
          0);
    /* event names, collapsed: deltas of one block counted once */
    char seq[400] = "";
    size_t i;
    json_t *n;
    const char *prev = "";
    json_array_foreach(s.names, i, n) {
        const char *name = json_string_value(n);
        if (!strcmp(name, prev) && !strcmp(name, "content_block_delta")) continue;
        strncat(seq, name, sizeof seq - strlen(seq) - 2);
        strcat(seq, " ");
        prev = name;
    }
    CHECKF(!strcmp(seq, "message_start content_block_start content_block_delta content_block_stop "
                        "content_block_start content_block_delta content_block_stop "
                        "message_delta message_stop "),
           "sequence: %s", seq);
    char args[256] = "";
    json_t *e;
    json_array_foreach(s.events, i, e) {
        const char *pj = jpath_s(e, "delta.partial_json");
        if (pj) strncat(args, pj, sizeof args - strlen(args) - 1);
        if (!strcmp(jpath_s(e, "type"), "message_delta"))
            CHECK(!strcmp(jpath_s(e, "delta.stop_reason"), "tool_use"));
    }
    json_t *a = json_loads(args, 0, NULL);
    CHECKF(a && json_integer_value(json_object_get(a, "days")) == 3, "args %s", args);
    json_decref(a);
    /* body */
    CHECK(!strcmp(jpath_s(s.body, "stop_reason"), "tool_use"));
    CHECK(!strcmp(jpath_s(s.body, "content.0.type"), "text"));
    CHECK(!strcmp(jpath_s(s.body, "content.1.type"), "tool_use"));
    CHECK(!strcmp(jpath_s(s.body, "content.1.input.city"), "Paris"));
    CHECK(json_integer_value(
              json_object_get(json_object_get(s.body, "usage"), "cache_read_input_tokens")) == 4);
    synth_free(&s);
}

TEST(server_responses_function_call_and_reasoning) {
    char body[1024];
    snprintf(body, sizeof body,
             "{\"model\":\"m\",\"input\":\"w?\",\"tools\":[{\"type\":\"function\",\"name\":"
             "\"get_weather\",\"parameters\":{\"type\":\"object\"}}]}");
    char out[1024];
    snprintf(out, sizeof out, "I should call it.</think>%s", CALL_OUTPUT);
    synth s;
    CHECK(run_synth(&s, &srv_api_responses, body, true, out, 4, true, ENGINE_FINISH_STOP) == 0);
    size_t i;
    json_t *n;
    bool saw_args = false, saw_reason = false, saw_done = false;
    long last_seq = -1;
    json_t *e;
    json_array_foreach(s.names, i, n) {
        const char *name = json_string_value(n);
        saw_args |= !strcmp(name, "response.function_call_arguments.delta");
        saw_reason |= !strcmp(name, "response.reasoning_text.delta");
        saw_done |= !strcmp(name, "response.completed");
    }
    json_array_foreach(s.events, i, e) {
        long sq = (long)json_integer_value(json_object_get(e, "sequence_number"));
        CHECK(sq == last_seq + 1);
        last_seq = sq;
    }
    CHECK(saw_args && saw_reason && saw_done);
    CHECK(!strcmp(json_string_value(json_array_get(s.names, 0)), "response.created"));
    CHECK(!strcmp(jpath_s(s.body, "status"), "completed"));
    CHECK(!strcmp(jpath_s(s.body, "output.0.type"), "reasoning"));
    CHECK(!strcmp(jpath_s(s.body, "output.0.content.0.text"), "I should call it."));
    CHECK(!strcmp(jpath_s(s.body, "output.1.type"), "message"));
    CHECK(!strcmp(jpath_s(s.body, "output.2.type"), "function_call"));
    CHECK(!strcmp(jpath_s(s.body, "output.2.name"), "get_weather"));
    json_t *a = json_loads(jpath_s(s.body, "output.2.arguments"), 0, NULL);
    CHECK(a && !strcmp(json_string_value(json_object_get(a, "city")), "Paris"));
    json_decref(a);
    synth_free(&s);
}

TEST(server_reasoning_in_chat_and_messages) {
    synth s;
    const char *out = "Step one, step two.</think>\n\nThe answer is 4.";
    CHECK(run_synth(&s, &srv_api_chat,
                    "{\"messages\":[{\"role\":\"user\",\"content\":\"2+2\"}],\"n\":2}", false, out,
                    2, true, ENGINE_FINISH_STOP) == 0);
    CHECK(json_array_size(json_object_get(s.body, "choices")) == 2);
    CHECK(!strcmp(jpath_s(s.body, "choices.1.message.reasoning_content"), "Step one, step two."));
    CHECK(!strcmp(jpath_s(s.body, "choices.1.message.content"), "The answer is 4."));
    CHECK(!strcmp(jpath_s(s.body, "choices.0.finish_reason"), "stop"));
    CHECK(json_integer_value(
              json_object_get(json_object_get(s.body, "usage"), "completion_tokens")) == 40);
    synth_free(&s);
    CHECK(run_synth(&s, &srv_api_messages,
                    "{\"model\":\"m\",\"max_tokens\":9,\"thinking\":{\"type\":\"enabled\","
                    "\"budget_tokens\":1024},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                    true, out, 3, true, ENGINE_FINISH_LENGTH) == 0);
    CHECK(!strcmp(jpath_s(s.body, "content.0.type"), "thinking"));
    CHECK(!strcmp(jpath_s(s.body, "content.0.thinking"), "Step one, step two."));
    CHECK(!strcmp(jpath_s(s.body, "content.1.text"), "The answer is 4."));
    CHECK(!strcmp(jpath_s(s.body, "stop_reason"), "max_tokens"));
    CHECK(!strcmp(jpath_s(json_array_get(s.events, 1), "content_block.type"), "thinking"));
    synth_free(&s);
}

TEST(server_stop_strings_per_protocol) {
    synth s;
    CHECK(run_synth(&s, &srv_api_messages,
                    "{\"model\":\"m\",\"max_tokens\":9,\"stop_sequences\":[\"END\"],"
                    "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                    false, "abc ENDxyz", 1, false, ENGINE_FINISH_CANCELLED) == 0);
    CHECK(!strcmp(jpath_s(s.body, "content.0.text"), "abc "));
    CHECK(!strcmp(jpath_s(s.body, "stop_reason"), "stop_sequence"));
    CHECK(!strcmp(jpath_s(s.body, "stop_sequence"), "END"));
    synth_free(&s);
    CHECK(run_synth(&s, &srv_api_completions, "{\"prompt\":\"x\",\"stop\":\"EN\"}", true,
                    "abc ENDxyz", 2, false, ENGINE_FINISH_CANCELLED) == 0);
    CHECK(!strcmp(jpath_s(s.body, "choices.0.text"), "abc "));
    CHECK(!strcmp(jpath_s(s.body, "choices.0.finish_reason"), "stop"));
    synth_free(&s);
}

TEST(server_json_mode_drops_the_fence) {
    synth s;
    CHECK(run_synth(&s, &srv_api_chat,
                    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":"
                    "{\"type\":\"json_object\"}}",
                    false, "```json\n{\"a\": 1}\n```\ntrailing", 3, false,
                    ENGINE_FINISH_STOP) == 0);
    json_t *v = json_loads(jpath_s(s.body, "choices.0.message.content"), 0, NULL);
    CHECKF(v && json_integer_value(json_object_get(v, "a")) == 1, "content '%s'",
           jpath_s(s.body, "choices.0.message.content"));
    json_decref(v);
    synth_free(&s);
}

/* --- request conversion -------------------------------------------------- */
static conversation *prepare_ok(const srv_api *api, const char *body, srv_req *r) {
    srv_prepared p;
    srv_fail f = {0};
    if (srv_prepare(api, body, strlen(body), &LIM, RENDER_DEEPSEEK_V3, NULL, r, &p, &f)) {
        fprintf(stderr, "prepare: %s\n", f.msg);
        return NULL;
    }
    srv_prepared_free(&p);
    return r->conv;
}

TEST(server_tool_results_convert_in_every_protocol) {
    srv_req r;
    conversation *c = prepare_ok(
        &srv_api_chat,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\","
        "\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":"
        "{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}},{\"id\":"
        "\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
        "\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"sunny\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}],"
        "\"tool_choice\":\"auto\"}",
        &r);
    CHECK(c && c->n_msgs == 3 && c->msgs[1].n_tool_calls == 2);
    CHECK(!strcmp(c->msgs[1].tool_calls[0].name, "get_weather"));
    CHECK(c->msgs[2].role == CONV_TOOL && !strcmp(c->msgs[2].tool_call_id, "call_1"));
    srv_req_free(&r);

    c = prepare_ok(&srv_api_messages,
                   "{\"model\":\"m\",\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":"
                   "\"be brief\"}],\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":"
                   "\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\","
                   "\"signature\":\"\"},{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"gw\","
                   "\"input\":{\"city\":\"Paris\"}}]},{\"role\":\"user\",\"content\":[{\"type\":"
                   "\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"sunny\"},{\"type\":"
                   "\"text\",\"text\":\"thanks\"}]}],\"tools\":[{\"name\":\"gw\",\"input_schema\":"
                   "{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"gw\"}}",
                   &r);
    CHECK(c && c->n_msgs == 5);
    CHECK(c->msgs[0].role == CONV_SYSTEM);
    CHECK(c->msgs[2].role == CONV_ASSISTANT && c->msgs[2].n_tool_calls == 1);
    CHECK(c->msgs[2].reasoning && !strcmp(c->msgs[2].reasoning, "hm"));
    CHECK(strstr(c->msgs[2].tool_calls[0].arguments, "Paris"));
    CHECK(c->msgs[3].role == CONV_TOOL && !strcmp(c->msgs[3].tool_call_id, "t1"));
    CHECK(c->msgs[4].role == CONV_USER);
    CHECK(r.tool_choice == SRV_TC_NAMED && c->n_tools == 1);
    srv_req_free(&r);

    c = prepare_ok(&srv_api_responses,
                   "{\"model\":\"m\",\"instructions\":\"sys\",\"input\":[{\"role\":\"user\","
                   "\"content\":\"w?\"},{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":"
                   "\"gw\",\"arguments\":\"{}\"},{\"type\":\"function_call\",\"call_id\":\"c2\","
                   "\"name\":\"gw\",\"arguments\":\"{}\"},{\"type\":\"function_call_output\","
                   "\"call_id\":\"c1\",\"output\":\"sunny\"}],\"tools\":[{\"type\":\"function\","
                   "\"name\":\"gw\"}],\"reasoning\":{\"effort\":\"high\"}}",
                   &r);
    CHECK(c && c->n_msgs == 4);
    CHECK(c->msgs[2].role == CONV_ASSISTANT && c->msgs[2].n_tool_calls == 2);
    CHECK(c->msgs[3].role == CONV_TOOL);
    CHECK(c->thinking == CONV_THINK_ON && !strcmp(c->reasoning_effort, "high"));
    srv_req_free(&r);
}

static void expect_fail(const srv_api *api, const char *body, int status, const char *needle,
                        const char *shape, int *bad) {
    srv_req r;
    srv_prepared p;
    srv_fail f = {0};
    int rc = srv_prepare(api, body, strlen(body), &LIM, RENDER_DEEPSEEK_V3, NULL, &r, &p, &f);
    char *e = rc ? srv_error_body(api->proto, &f) : NULL;
    if (!rc || f.status != status || !strstr(f.msg, needle) || !strstr(e, shape)) {
        fprintf(stderr, "body %s -> rc %d status %d msg '%s' error body %s\n", body, rc, f.status,
                f.msg, e ? e : "-");
        (*bad)++;
    }
    free(e);
    srv_req_free(&r);
    srv_prepared_free(&p);
}

TEST(server_bad_requests_name_the_field_in_the_protocol_shape) {
    int bad = 0;
    const char *oa = "{\"error\":{\"message\":", *an = "{\"type\":\"error\",\"error\":{";
    expect_fail(&srv_api_chat, "{\"messages\":5}", 400, "messages", oa, &bad);
    expect_fail(&srv_api_chat, "{\"messages\":[]}", 400, "messages", oa, &bad);
    expect_fail(&srv_api_chat, "{\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0].role", oa,
                &bad);
    expect_fail(&srv_api_chat,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":\"9\"}", 400,
                "max_tokens", oa, &bad);
    expect_fail(&srv_api_chat,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":7}", 400,
                "temperature", oa, &bad);
    expect_fail(&srv_api_chat,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":"
                "{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}",
                400, "tool_choice", oa, &bad);
#define AT_BODY(choice)                                                                            \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","     \
    "\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"allowed_tools\",\"allowed_"       \
    "tools\":" choice "}}"
    expect_fail(&srv_api_chat,
                AT_BODY("{\"mode\":\"required\",\"tools\":[{\"type\":\"function\","
                        "\"function\":{\"name\":\"g\"}}]}"),
                400, "no tool named 'g'", oa, &bad);
    expect_fail(&srv_api_chat, AT_BODY("{\"mode\":\"none\",\"tools\":[{\"name\":\"f\"}]}"), 400,
                "allowed_tools.mode", oa, &bad);
    expect_fail(&srv_api_chat, AT_BODY("{\"mode\":\"auto\",\"tools\":[]}"), 400, "non-empty", oa,
                &bad);
    expect_fail(&srv_api_chat, AT_BODY("{\"mode\":\"auto\",\"tools\":[{\"type\":\"mcp\"}]}"), 400,
                "tools[0]", oa, &bad);
#undef AT_BODY
    expect_fail(&srv_api_chat, "{\"model\":\"other\",\"messages\":[]}", 404, "other", oa, &bad);
    expect_fail(&srv_api_chat, "{\"a\":[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]}", 400, "deeper", oa,
                &bad);
    expect_fail(&srv_api_chat, "{\"messages\": [", 400, "invalid JSON", oa, &bad);
    expect_fail(&srv_api_chat, "[]", 400, "object", oa, &bad);
    expect_fail(&srv_api_messages, "{\"model\":\"m\",\"messages\":[]}", 400, "max_tokens", an,
                &bad);
    expect_fail(&srv_api_messages,
                "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"system\","
                "\"content\":\"x\"}]}",
                400, "messages.0.role", an, &bad);
    expect_fail(&srv_api_messages, "{\"model\":\"zz\",\"max_tokens\":1,\"messages\":[]}", 404, "zz",
                "not_found_error", &bad);
    expect_fail(&srv_api_responses, "{\"model\":\"m\"}", 400, "input", oa, &bad);
    expect_fail(&srv_api_responses, "{\"input\":\"x\",\"previous_response_id\":\"r\"}", 400,
                "previous_response_id", oa, &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":{}}", 400, "prompt", oa, &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":\"x\",\"stop\":[1]}", 400, "stop[0]", oa, &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400,
                "batch of 5 prompts (at most 4)", oa, &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":[\"a\",[1,\"x\"]]}", 400,
                "prompt[1][1]: expected a token id", oa, &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":[[1],{}]}", 400, "prompt[1]: expected", oa,
                &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":\"x\",\"stop_token_ids\":[2,-1]}", 400,
                "stop_token_ids[1]: expected a token id", oa, &bad);
    expect_fail(&srv_api_chat,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop_token_ids\":3}", 400,
                "stop_token_ids: expected an array", oa, &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":\"x\",\"guided_grammar\":\"root ::= x\"}", 400,
                "guided_grammar: line 1: rule 'x' is used and not defined", oa, &bad);
    expect_fail(&srv_api_completions,
                "{\"prompt\":\"x\",\"structured_outputs\":{\"grammar\":\"g\"}}", 400,
                "structured_outputs.grammar: line 1: expected a rule", oa, &bad);
    expect_fail(&srv_api_chat,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"ebnf\":\"root ::= "
                "\\\"a\",\"grammar\":1}",
                400, "ebnf: line 1: a string literal is not closed", oa, &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":\"x\",\"priority\":-1}", 400,
                "priority: scheduling by priority is off", oa, &bad);
    expect_fail(&srv_api_chat,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"priority\":\"high\"}", 400,
                "priority: expected", oa, &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":\"x\",\"grammar\":[]}", 400,
                "grammar: expected a string", oa, &bad);
    expect_fail(&srv_api_completions,
                "{\"prompt\":\"x\",\"guided_grammar\":\"start: \\\"a\\\"\\n%import common.WS\"}",
                400, "guided_grammar: Lark grammars are not supported", oa, &bad);
    expect_fail(&srv_api_completions,
                "{\"prompt\":\"x\",\"guided_regex\":\"a\",\"grammar\":\"root ::= \\\"a\\\"\"}", 400,
                "grammar: only one structured output a request (guided_regex is set)", oa, &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":\"x\",\"guided_choice\":[\"a\",1]}", 400,
                "guided_choice[1]: expected a string", oa, &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":\"x\",\"suffix\":1}", 400,
                "suffix: expected a string", oa, &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":\"x\",\"suffix\":\"y\",\"echo\":true}", 400,
                "suffix: not with echo", oa, &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":\"x\",\"n\":2,\"best_of\":1}", 400,
                "best_of: 1 is less than n (2)", oa, &bad);
    expect_fail(&srv_api_completions, "{\"prompt\":\"x\",\"best_of\":2,\"stream\":true}", 400,
                "cannot be streamed", oa, &bad);
    expect_fail(&srv_api_responses, "{\"input\":\"x\",\"include\":[\"nope\"]}", 400,
                "include[0]: unknown value 'nope'", oa, &bad);
    expect_fail(&srv_api_responses, "{\"input\":\"x\",\"include\":\"x\"}", 400, "include", oa,
                &bad);
    expect_fail(&srv_api_count_tokens, "{\"model\":\"m\"}", 400, "messages", an, &bad);
    expect_fail(&srv_api_detokenize, "{\"tokens\":[1,\"x\"]}", 400, "tokens[1]", oa, &bad);
    expect_fail(&srv_api_tokenize, "{\"prompt\":{}}", 400, "prompt", oa, &bad);
    CHECKF(bad == 0, "%d bad-request cases misreported (see stderr)", bad);
}

/* --- the fuzz corpus, replayed through the fuzzer's entry point --------- */
TEST(server_fuzz_corpus_replays_cleanly) {
    const char *dirs[] = {"tests/fuzz/corpus", "../tests/fuzz/corpus"};
    DIR *d = NULL;
    const char *dir = NULL;
    for (int i = 0; i < 2 && !d; i++) d = opendir(dir = dirs[i]);
    CHECKF(d, "tests/fuzz/corpus not found (run from the repository root)");
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        size_t len = 0;
        di_err err;
        char *data = di_read_file(path, &len, &err);
        if (!data) continue;
        srv_fuzz_one((const uint8_t *)data, len);
        free(data);
        n++;
    }
    closedir(d);
    CHECKF(n >= 10, "only %d corpus files", n);
}

TEST(server_parallel_tool_calls_false_keeps_the_first_call) {
    char body[1024], out[2048];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],%s,"
             "\"parallel_tool_calls\":false}",
             TOOLS_CHAT);
    const char *call = "<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
                       "string=\"true\">X</｜DSML｜parameter>\n</｜DSML｜invoke>\n";
    snprintf(out, sizeof out, "<｜DSML｜tool_calls>\n%s%s</｜DSML｜tool_calls>", call, call);
    synth s;
    CHECK(run_synth(&s, &srv_api_chat, body, true, out, 3, false, ENGINE_FINISH_STOP) == 0);
    CHECK(json_array_size(json_object_get(
              json_object_get(json_array_get(json_object_get(s.body, "choices"), 0), "message"),
              "tool_calls")) == 1);
    synth_free(&s);
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],%s}",
             TOOLS_CHAT);
    CHECK(run_synth(&s, &srv_api_chat, body, false, out, 3, false, ENGINE_FINISH_STOP) == 0);
    CHECK(json_array_size(json_object_get(
              json_object_get(json_array_get(json_object_get(s.body, "choices"), 0), "message"),
              "tool_calls")) == 2);
    CHECK(!strcmp(jpath_s(s.body, "choices.0.message.tool_calls.1.function.name"), "get_weather"));
    synth_free(&s);
}

/* A store with a directory: responses outlive it (a chain, a reply
 * holding U+0000), a deletion and an eviction remove the file, files that
 * are not entries are passed over, and an unusable directory is refused. */
TEST(server_response_store_persists) {
    char dir[] = "/tmp/di_resp_XXXXXX";
    CHECK(mkdtemp(dir));
    json_t *in = json_pack("[{s:s}]", "content", "a"),
           *out = json_pack("{s:[s#]}", "output", "A\0", (size_t)2);
    json_t *out2 = json_pack("{s:[s]}", "output", "B");
    di_err err;
    resp_store *s = resp_store_open(1 << 20, dir, &err);
    CHECKF(s, "%s", err.msg);
    resp_store_put(s, "resp_1", NULL, in, out);
    resp_store_put(s, "resp_2", "resp_1", in, out2);
    resp_store_put(s, "resp_3", NULL, in, out2);
    CHECK(resp_store_delete(s, "resp_3"));
    resp_store_free(s);
    char path[96];
    snprintf(path, sizeof path, "%s/junk.json", dir); /* not an entry: passed over */
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("{\"id\":\"other\"}", f) >= 0 && fclose(f) == 0);
    s = resp_store_open(1 << 20, dir, &err);
    CHECKF(s, "%s", err.msg);
    json_t *h = resp_store_history(s, "resp_2", true);
    char *t = json_dumps(h, JSON_COMPACT);
    CHECKF(t && !strcmp(t, "[{\"content\":\"a\"},\"A\\u0000\",{\"content\":\"a\"},\"B\"]"), "%s",
           t ? t : "-");
    free(t);
    json_decref(h);
    CHECK(!resp_store_get(s, "resp_3") && !resp_store_get(s, "junk"));
    resp_store_free(s);
    s = resp_store_open(150, dir, &err); /* room for one: the older goes, its file too */
    CHECK(s && !resp_store_get(s, "resp_1"));
    json_t *r = resp_store_get(s, "resp_2");
    CHECK(r);
    json_decref(r);
    resp_store_free(s);
    snprintf(path, sizeof path, "%s/resp_1.json", dir);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/resp_2.json", dir);
    CHECK(access(path, F_OK) == 0 && unlink(path) == 0);
    snprintf(path, sizeof path, "%s/junk.json", dir);
    CHECK(unlink(path) == 0 && rmdir(dir) == 0);
    snprintf(path, sizeof path, "%s/no/such/dir", dir);
    CHECK(!resp_store_open(1 << 20, path, &err) && strstr(err.msg, "cannot make directory"));
    json_decref(in);
    json_decref(out);
    json_decref(out2);
}

/* Stored responses: a chain rebuilt oldest first (each turn's input, then
 * its output), least recently used out first, a chain missing a link
 * refused, deletion. */
TEST(server_response_store_chains_and_evicts) {
    json_t *in = json_pack("[s]", "a"), *out = json_pack("{s:[s]}", "output", "A");
    json_t *in2 = json_pack("[s]", "b"), *out2 = json_pack("{s:[s]}", "output", "B");
    size_t one = 2 * (sizeof "r1" + 8 + 20) + 200; /* about two entries' worth, and some */
    resp_store *s = resp_store_new(4 * one);
    resp_store_put(s, "r1", NULL, in, out);
    resp_store_put(s, "r2", "r1", in2, out2);
    json_t *h = resp_store_history(s, "r2", true);
    char *t = json_dumps(h, JSON_COMPACT);
    CHECKF(t && !strcmp(t, "[\"a\",\"A\",\"b\",\"B\"]"), "%s", t ? t : "-");
    free(t);
    json_decref(h);
    h = resp_store_history(s, "r2", false); /* what made r2: without its own output */
    t = json_dumps(h, JSON_COMPACT);
    CHECKF(t && !strcmp(t, "[\"a\",\"A\",\"b\"]"), "%s", t ? t : "-");
    free(t);
    json_decref(h);
    json_t *r = resp_store_get(s, "r1");
    CHECK(r && json_is_array(json_object_get(r, "output")));
    json_decref(r);
    CHECK(!resp_store_history(s, "nope", true) && !resp_store_get(s, "nope"));
    /* Filling the store evicts the least recently used first: the first two go. */
    char id[16];
    for (int i = 3; i < 40; i++) {
        snprintf(id, sizeof id, "r%d", i);
        resp_store_put(s, id, NULL, in, out);
    }
    CHECK(!resp_store_get(s, "r1") && !resp_store_history(s, "r2", true));
    r = resp_store_get(s, "r39");
    CHECK(r);
    json_decref(r);
    CHECK(resp_store_delete(s, "r39") && !resp_store_get(s, "r39") && !resp_store_delete(s, "r39"));
    /* a reply holding U+0000 (a model may write one) reads back, alone and in a chain */
    json_t *nul = json_pack("{s:[s#]}", "output", "a\0b", (size_t)3);
    resp_store_put(s, "n1", NULL, in, nul);
    resp_store_put(s, "n2", "n1", in2, out2);
    r = resp_store_get(s, "n1");
    h = resp_store_history(s, "n2", true);
    CHECK(r && json_string_length(json_array_get(json_object_get(r, "output"), 0)) == 3);
    CHECK(h && json_array_size(h) == 4);
    json_decref(r);
    json_decref(h);
    json_decref(nul);
    /* a chain whose start is gone is refused, not shortened */
    resp_store_put(s, "x1", NULL, in, out);
    resp_store_put(s, "x2", "x1", in2, out2);
    CHECK(resp_store_delete(s, "x1") && !resp_store_history(s, "x2", true));
    resp_store_free(s);
    json_decref(in);
    json_decref(out);
    json_decref(in2);
    json_decref(out2);
}
