/* api_openai_chat.c — OpenAI Chat Completions: the request (messages with
 * text/image parts, tool calls and tool results, tools, tool_choice,
 * response_format, sampling, n, logprobs, thinking) into the internal
 * conversation, and the output back as a `chat.completion` body or
 * `chat.completion.chunk` SSE deltas ending with `data: [DONE]`.
 *
 * Also the OpenAI pieces the other OpenAI-shaped protocols share (usage with
 * cached tokens, finish reasons, parsed tool arguments). Extensions accepted
 * as DeepSeek's and vLLM's APIs do: `reasoning_content` on assistant
 * messages, `thinking` / `chat_template_kwargs.thinking|enable_thinking`. */
#include <stdlib.h>
#include <string.h>

#include "engine/json_grammar.h"
#include "server/srv_internal.h"

/* --- shared OpenAI pieces ------------------------------------------------ */
json_t *srv_usage_openai(const srv_gen *g) {
    engine_usage u = gen_usage(g);
    return json_pack("{s:i, s:i, s:i, s:{s:i}, s:i, s:i}", "prompt_tokens", u.prompt_tokens,
                     "completion_tokens", u.completion_tokens, "total_tokens",
                     u.prompt_tokens + u.completion_tokens, "prompt_tokens_details",
                     "cached_tokens", u.cached_tokens, "prompt_cache_hit_tokens", u.cached_tokens,
                     "prompt_cache_miss_tokens", u.prompt_tokens - u.cached_tokens);
}

void srv_chunk_usage(const srv_gen *g, int bi, json_t *chunk) {
    if (!g->req->include_usage || !g->req->continuous_usage) return;
    int done = g->b[bi].n_tokens;
    json_object_set_new(chunk, "usage",
                        json_pack("{s:i, s:i, s:i}", "prompt_tokens", g->prompt_tokens,
                                  "completion_tokens", done, "total_tokens",
                                  g->prompt_tokens + done));
}

const char *srv_finish_openai(srv_finish f) {
    switch (f) {
    case FIN_LENGTH:
        return "length";
    case FIN_TOOLS:
        return "tool_calls";
    default:
        return "stop";
    }
}

json_t *srv_tool_args_json(const gen_tool *t) {
    json_t *v = t->args.n ? json_loadb(t->args.p, t->args.n, 0, NULL) : NULL;
    if (!json_is_object(v)) {
        json_decref(v);
        v = json_object();
    }
    return v;
}

/* --- request ------------------------------------------------------------- */
static int parse_content(const json_t *c, conv_message *m, const char *where, srv_fail *f) {
    if (!c || json_is_null(c)) {
        m->has_content = false;
        return 0;
    }
    if (json_is_string(c)) {
        conv_message_add_text(m, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c))
        return srv_failf(f, 400, where, "%s.content: expected a string, an array or null", where);
    m->has_content = true;
    size_t i;
    const json_t *p;
    json_array_foreach(c, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        if (!json_is_object(p) || !type)
            return srv_failf(f, 400, where, "%s.content[%zu].type: expected a string", where, i);
        if (!strcmp(type, "text") || !strcmp(type, "input_text") || !strcmp(type, "output_text")) {
            const json_t *t = json_object_get(p, "text");
            if (!json_is_string(t))
                return srv_failf(f, 400, where, "%s.content[%zu].text: expected a string", where,
                                 i);
            conv_message_add_text(m, json_string_value(t), json_string_length(t));
        } else if (!strcmp(type, "image_url") || !strcmp(type, "image") ||
                   !strcmp(type, "input_image")) {
            conv_message_add_image(m);
        } else
            return srv_failf(f, 400, where, "%s.content[%zu].type: unsupported part type '%s'",
                             where, i, type);
    }
    return 0;
}

static int check_utf8_nul(const json_t *s, const char *where, srv_fail *f) {
    if (memchr(json_string_value(s), 0, json_string_length(s)))
        return srv_failf(f, 400, where, "%s: contains a NUL byte", where);
    return 0;
}

static int parse_message(const json_t *m, conversation *c, size_t i, srv_fail *f) {
    char where[64];
    snprintf(where, sizeof where, "messages[%zu]", i);
    if (!json_is_object(m)) return srv_failf(f, 400, where, "%s: expected an object", where);
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!role) return srv_failf(f, 400, where, "%s.role: expected a string", where);
    conv_role r;
    if (conv_role_parse(role, &r))
        return srv_failf(f, 400, where, "%s.role: unknown role '%s'", where, role);
    conv_message *cm = conv_add_message(c, r);
    if (parse_content(json_object_get(m, "content"), cm, where, f)) return -1;
    if (r == CONV_TOOL) {
        const json_t *id = json_object_get(m, "tool_call_id");
        if (id && !json_is_null(id)) {
            if (!json_is_string(id) || check_utf8_nul(id, where, f))
                return srv_failf(f, 400, where, "%s.tool_call_id: expected a string", where);
            cm->tool_call_id = di_strdup(json_string_value(id));
        }
    }
    if (r != CONV_ASSISTANT) return 0;
    const json_t *rc = json_object_get(m, "reasoning_content");
    if (!rc || json_is_null(rc)) rc = json_object_get(m, "reasoning");
    if (rc && json_is_string(rc))
        cm->reasoning = di_strdup(json_string_value(rc));
    else if (rc && !json_is_null(rc))
        return srv_failf(f, 400, where, "%s.reasoning_content: expected a string", where);
    const json_t *tcs = json_object_get(m, "tool_calls");
    if (!tcs || json_is_null(tcs)) return 0;
    if (!json_is_array(tcs))
        return srv_failf(f, 400, where, "%s.tool_calls: expected an array", where);
    size_t k;
    const json_t *tc;
    json_array_foreach(tcs, k, tc) {
        const json_t *fn = json_object_get(tc, "function");
        const json_t *name = json_object_get(fn, "name");
        const json_t *args = json_object_get(fn, "arguments");
        const json_t *id = json_object_get(tc, "id");
        if (!json_is_object(fn))
            return srv_failf(f, 400, where, "%s.tool_calls[%zu].function: expected an object",
                             where, k);
        if (!json_is_string(name) || check_utf8_nul(name, where, f))
            return srv_failf(f, 400, where, "%s.tool_calls[%zu].function.name: expected a string",
                             where, k);
        char *a = NULL;
        if (json_is_string(args)) {
            json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
            a = parsed ? json_dumps(parsed, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY)
                       : NULL;
            json_decref(parsed);
            if (!a) a = di_strdup(json_string_value(args));
        } else if (json_is_object(args))
            a = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
        else if (!args || json_is_null(args))
            a = di_strdup("{}");
        else
            return srv_failf(f, 400, where,
                             "%s.tool_calls[%zu].function.arguments: expected a string", where, k);
        conv_message_add_tool_call(cm, json_is_string(id) ? json_string_value(id) : "",
                                   json_string_value(name), a);
        free(a);
    }
    return 0;
}

int srv_parse_tools(const json_t *tools, conversation *c, srv_fail *f) {
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return srv_failf(f, 400, "tools", "tools: expected an array");
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        if (!fn) fn = t; /* Responses-style flat tools */
        const json_t *name = json_object_get(fn, "name");
        const json_t *desc = json_object_get(fn, "description");
        const json_t *params = json_object_get(fn, "parameters");
        if (!json_is_object(fn) || !json_is_string(name) || !json_string_length(name))
            return srv_failf(f, 400, "tools", "tools[%zu].function.name: expected a string", i);
        if (memchr(json_string_value(name), 0, json_string_length(name)))
            return srv_failf(f, 400, "tools", "tools[%zu].function.name: contains a NUL byte", i);
        if (desc && !json_is_null(desc) && !json_is_string(desc))
            return srv_failf(f, 400, "tools", "tools[%zu].function.description: expected a string",
                             i);
        if (params && !json_is_null(params) && !json_is_object(params))
            return srv_failf(f, 400, "tools", "tools[%zu].function.parameters: expected an object",
                             i);
        char *p = params && json_is_object(params)
                      ? json_dumps(params, JSON_COMPACT | JSON_PRESERVE_ORDER)
                      : NULL;
        const char *d = json_is_string(desc) ? json_string_value(desc) : NULL;
        if (d && memchr(d, 0, json_string_length(desc))) d = NULL;
        conv_add_tool(c, json_string_value(name), d, p);
        c->tools[c->n_tools - 1].strict = json_is_true(json_object_get(fn, "strict"));
        free(p);
    }
    return 0;
}

/* {"type": "allowed_tools", "mode", "tools"} (Responses; Chat Completions
 * nests mode and tools in "allowed_tools"): the tools calls may name, each
 * {"type": "function", "function": {"name"}} or flat; mode auto or
 * required. */
static int parse_allowed_tools(const json_t *tc, srv_req *r, srv_fail *f) {
    const json_t *at = json_object_get(tc, "allowed_tools");
    if (!at) at = tc;
    const char *mode = json_string_value(json_object_get(at, "mode"));
    const json_t *tools = json_object_get(at, "tools");
    if (!mode || (strcmp(mode, "auto") && strcmp(mode, "required")))
        return srv_failf(f, 400, "tool_choice",
                         "tool_choice.allowed_tools.mode: expected \"auto\" or \"required\"");
    if (!json_is_array(tools) || !json_array_size(tools))
        return srv_failf(f, 400, "tool_choice",
                         "tool_choice.allowed_tools.tools: expected a non-empty array");
    r->tool_choice = strcmp(mode, "auto") ? SRV_TC_REQUIRED : SRV_TC_AUTO;
    r->allowed_tools = di_calloc(json_array_size(tools), sizeof *r->allowed_tools);
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const json_t *name = json_object_get(fn ? fn : t, "name");
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || (type && strcmp(type, "function")) || !json_is_string(name))
            return srv_failf(f, 400, "tool_choice",
                             "tool_choice.allowed_tools.tools[%zu]: expected a function by name",
                             i);
        r->allowed_tools[r->n_allowed_tools++] = di_strdup(json_string_value(name));
    }
    return 0;
}

/* Shared with the Responses parser: tool_choice as a string, an object
 * naming a function ({"type":"function","function":{"name"}} or flat), or
 * allowed_tools. */
int srv_parse_tool_choice(const json_t *tc, srv_req *r, srv_fail *f) {
    if (!tc || json_is_null(tc)) return 0;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "auto"))
            r->tool_choice = SRV_TC_AUTO;
        else if (!strcmp(s, "none"))
            r->tool_choice = SRV_TC_NONE;
        else if (!strcmp(s, "required"))
            r->tool_choice = SRV_TC_REQUIRED;
        else
            return srv_failf(f, 400, "tool_choice", "tool_choice: unknown value '%s'", s);
        return 0;
    }
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (type && !strcmp(type, "allowed_tools")) return parse_allowed_tools(tc, r, f);
    const json_t *fn = json_object_get(tc, "function");
    const json_t *name = json_object_get(fn ? fn : tc, "name");
    if (!json_is_object(tc) || !json_is_string(name))
        return srv_failf(f, 400, "tool_choice",
                         "tool_choice: expected \"auto\", \"none\", \"required\", a named "
                         "function or allowed_tools");
    r->tool_choice = SRV_TC_NAMED;
    r->tool_name = di_strdup(json_string_value(name));
    return 0;
}

/* Shared: applies tool_choice to the conversation (none: no tools offered;
 * named: only that one, which must exist). */
int srv_apply_tool_choice(srv_req *r, srv_fail *f) {
    conversation *c = r->conv;
    if (r->tool_choice == SRV_TC_NAMED) {
        size_t keep = c->n_tools;
        for (size_t i = 0; i < c->n_tools; i++)
            if (!strcmp(c->tools[i].name, r->tool_name)) keep = i;
        if (keep == c->n_tools)
            return srv_failf(f, 400, "tool_choice", "tool_choice: no tool named '%s' in tools",
                             r->tool_name);
        for (size_t i = 0; i < c->n_tools; i++) {
            if (i == keep) continue;
            free(c->tools[i].name);
            free(c->tools[i].description);
            free(c->tools[i].parameters);
        }
        c->tools[0] = c->tools[keep];
        c->n_tools = 1;
    } else if (r->tool_choice == SRV_TC_REQUIRED && c->n_tools == 0)
        return srv_failf(f, 400, "tool_choice", "tool_choice: \"required\" needs tools");
    for (int k = 0; k < r->n_allowed_tools; k++) {
        bool known = false;
        for (size_t i = 0; i < c->n_tools && !known; i++)
            known = !strcmp(c->tools[i].name, r->allowed_tools[k]);
        if (!known)
            return srv_failf(f, 400, "tool_choice",
                             "tool_choice.allowed_tools: no tool named '%s' in tools",
                             r->allowed_tools[k]);
    }
    return 0;
}

/* Shared: thinking on/off from `thinking` (bool or {"type":"enabled"|
 * "disabled"}) and chat_template_kwargs; reasoning_effort. */
int srv_parse_thinking(const json_t *body, conversation *c, srv_fail *f) {
    const json_t *th = json_object_get(body, "thinking");
    const json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (!th || json_is_null(th)) th = json_object_get(kw, "thinking");
    if (!th || json_is_null(th)) th = json_object_get(kw, "enable_thinking");
    if (th && !json_is_null(th)) {
        if (json_is_boolean(th))
            c->thinking = json_is_true(th) ? CONV_THINK_ON : CONV_THINK_OFF;
        else if (json_is_object(th) && json_is_string(json_object_get(th, "type"))) {
            const char *t = json_string_value(json_object_get(th, "type"));
            if (!strcmp(t, "enabled"))
                c->thinking = CONV_THINK_ON;
            else if (!strcmp(t, "disabled"))
                c->thinking = CONV_THINK_OFF;
            else
                return srv_failf(f, 400, "thinking.type", "thinking.type: unknown value '%s'", t);
        } else
            return srv_failf(
                f, 400, "thinking",
                "thinking: expected a boolean or {\"type\": \"enabled\"|\"disabled\"}");
    }
    const char *eff = NULL;
    if (srv_get_str(body, "reasoning_effort", &eff, f)) return -1;
    if (eff) {
        if (strcmp(eff, "low") && strcmp(eff, "medium") && strcmp(eff, "high") &&
            strcmp(eff, "minimal") && strcmp(eff, "none") && strcmp(eff, "max"))
            return srv_failf(f, 400, "reasoning_effort", "reasoning_effort: unknown value '%s'",
                             eff);
        if (!strcmp(eff, "none"))
            c->thinking = CONV_THINK_OFF;
        else {
            c->reasoning_effort = di_strdup(eff);
            if (c->thinking == CONV_THINK_UNSET) c->thinking = CONV_THINK_ON;
        }
    }
    return 0;
}

/* Shared: response_format {"type": "text"|"json_object"|"json_schema"}; the
 * schema sits in json_schema.schema (chat) or schema (Responses' format). */
int srv_parse_response_format(const json_t *rf, const char *name, srv_req *r, srv_fail *f) {
    if (!rf || json_is_null(rf)) return 0;
    const char *t = json_string_value(json_object_get(rf, "type"));
    if (!json_is_object(rf) || !t)
        return srv_failf(f, 400, name, "%s.type: expected a string", name);
    if (!strcmp(t, "json_object") || !strcmp(t, "json_schema"))
        r->json_mode = true;
    else if (strcmp(t, "text"))
        return srv_failf(f, 400, name, "%s.type: unknown value '%s'", name, t);
    const json_t *sch = json_object_get(json_object_get(rf, "json_schema"), "schema");
    if (!sch) sch = json_object_get(rf, "schema");
    if (strcmp(t, "json_schema") || !sch || json_is_null(sch)) return 0;
    return srv_set_json_schema(r, sch, name, "json_schema: ", f);
}

int srv_set_json_schema(srv_req *r, const json_t *sch, const char *name, const char *what,
                        srv_fail *f) {
    char *text = json_dumps(sch, JSON_COMPACT | JSON_ENCODE_ANY), why[160] = "unreadable";
    jg_schema *ok = text ? jg_schema_compile(text, strlen(text), why, sizeof why) : NULL;
    if (!ok) {
        free(text);
        return srv_failf(f, 400, name, "%s: %s%s", name, what, why);
    }
    jg_schema_free(ok);
    r->json_mode = true;
    r->json_schema = text;
    return 0;
}

/* vLLM's echo: where the last message is the assistant's (the role the
 * reply takes, as with continue_final_message), its text comes first in
 * the reply. */
static int get_echo(const json_t *body, srv_req *r, srv_fail *f) {
    bool echo = false;
    if (srv_get_bool(body, "echo", &echo, f)) return -1;
    const conversation *c = r->conv;
    if (!echo || !c->n_msgs || c->msgs[c->n_msgs - 1].role != CONV_ASSISTANT) return 0;
    const conv_message *m = &c->msgs[c->n_msgs - 1];
    for (size_t i = 0; i < m->n_parts; i++)
        if (m->parts[i].kind == CONV_PART_TEXT)
            di_buf_add(&r->chat_echo, m->parts[i].text, m->parts[i].len);
    return 0;
}

/* Continuing the last message, an assistant's (a prefill): vLLM's
 * continue_final_message, or DeepSeek's "prefix": true on that message;
 * vLLM's add_generation_prompt (false: the prompt ends with the last
 * message's turn), not true beside a continuation. */
static int parse_continuation(const json_t *body, const json_t *msgs, conversation *c,
                              srv_fail *f) {
    bool cont = false, agp = true, prefix = false;
    const json_t *agp_set = json_object_get(body, "add_generation_prompt");
    if (srv_get_bool(body, "continue_final_message", &cont, f) ||
        srv_get_bool(body, "add_generation_prompt", &agp, f))
        return -1;
    size_t n = json_array_size(msgs), i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        char where[64];
        snprintf(where, sizeof where, "messages[%zu].prefix", i);
        bool p = false;
        if (srv_get_bool(m, "prefix", &p, f)) return -1;
        if (p && (i + 1 < n || c->msgs[i].role != CONV_ASSISTANT))
            return srv_failf(f, 400, where,
                             "%s: only the last message, an assistant's, is a prefix", where);
        prefix = prefix || p;
    }
    if ((cont || prefix) && agp && agp_set && !json_is_null(agp_set))
        return srv_failf(f, 400, "add_generation_prompt",
                         "add_generation_prompt: not true beside continue_final_message");
    c->continue_final = cont || prefix;
    c->add_generation_prompt = agp && !c->continue_final;
    return 0;
}

static int chat_parse(const json_t *body, srv_req *r, const srv_limits *lim, srv_fail *f) {
    const json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs))
        return srv_failf(f, 400, "messages", "messages: expected an array of messages");
    if (json_array_size(msgs) == 0)
        return srv_failf(f, 400, "messages", "messages: must not be empty");
    r->conv = conv_new();
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) if (parse_message(m, r->conv, i, f)) return -1;
    if (parse_continuation(body, msgs, r->conv, f) ||
        srv_parse_tools(json_object_get(body, "tools"), r->conv, f) ||
        srv_parse_tool_choice(json_object_get(body, "tool_choice"), r, f) ||
        srv_apply_tool_choice(r, f) || srv_parse_thinking(body, r->conv, f) ||
        srv_parse_response_format(json_object_get(body, "response_format"), "response_format", r,
                                  f) ||
        srv_parse_structured(body, r, f) || srv_get_sampling(body, r, 2.0f, f) ||
        srv_get_stops(body, "stop", r, lim, f) || srv_get_bool(body, "stream", &r->stream, f) ||
        srv_get_int(body, "n", 1, lim->max_n, &r->n, f) || srv_get_priority(body, r, lim, f) ||
        srv_get_int(body, "max_tokens", 1, 1 << 30, &r->max_tokens, f) ||
        srv_get_int(body, "max_completion_tokens", 1, 1 << 30, &r->max_tokens, f) ||
        srv_get_bool(body, "logprobs", &r->logprobs, f) ||
        srv_get_int(body, "top_logprobs", 0, SAMP_MAX_TOP, &r->top_logprobs, f) ||
        srv_get_int(body, "prompt_logprobs", 0, SAMP_MAX_TOP, &r->prompt_logprobs, f) ||
        srv_get_bool(body, "parallel_tool_calls", &r->parallel_tool_calls, f))
        return -1;
    if (r->top_logprobs && !r->logprobs)
        return srv_failf(f, 400, "top_logprobs", "top_logprobs: requires logprobs: true");
    return get_echo(body, r, f) || srv_get_stream_options(body, r, f);
}

/* --- stream -------------------------------------------------------------- */
static json_t *chunk(srv_gen *g, int bi, json_t *delta, const char *finish) {
    json_t *choice =
        json_pack("{s:i, s:o, s:n, s:n}", "index", bi, "delta", delta, "logprobs", "finish_reason");
    if (finish) json_object_set_new(choice, "finish_reason", json_string(finish));
    json_t *c = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", g->id, "object",
                          "chat.completion.chunk", "created", (json_int_t)g->created, "model",
                          g->env.model_name, "system_fingerprint", "deepinfer", "choices", choice);
    srv_chunk_usage(g, bi, c);
    return c;
}

static void chat_event(srv_gen *g, int bi, const gev *ev) {
    gen_branch *b = &g->b[bi];
    if (ev->kind == GEV_TOOL_END) return;
    json_t *delta = json_object();
    if (!b->started) {
        json_object_set_new(delta, "role", json_string("assistant"));
        b->started = true;
    }
    if (ev->kind == GEV_REASONING)
        json_object_set_new(delta, "reasoning_content", srv_jstr(ev->text, ev->len));
    else if (ev->kind == GEV_TEXT)
        json_object_set_new(delta, "content", srv_jstr(ev->text, ev->len));
    else {
        json_t *tc = json_pack("{s:i}", "index", ev->tool);
        if (ev->kind == GEV_TOOL_START) {
            json_object_set_new(tc, "id", json_string(ev->id));
            json_object_set_new(tc, "type", json_string("function"));
            json_object_set_new(tc, "function",
                                json_pack("{s:s, s:s}", "name", ev->name, "arguments", ""));
        } else
            json_object_set_new(tc, "function",
                                json_pack("{s:o}", "arguments", srv_jstr(ev->text, ev->len)));
        json_object_set_new(delta, "tool_calls", json_pack("[o]", tc));
    }
    json_t *c = chunk(g, bi, delta, NULL);
    if (b->lp_pending) {
        json_t *choice = json_array_get(json_object_get(c, "choices"), 0);
        json_object_set_new(choice, "logprobs", json_pack("{s:o}", "content", b->lp_pending));
        b->lp_pending = NULL;
    }
    sse_json(g, NULL, c);
}

static void chat_begin(srv_gen *g) {
    const di_buf *echo = &g->req->chat_echo; /* else the role arrives with the first delta */
    for (int i = 0; echo->n && i < g->n; i++) {
        sse_json(g, NULL,
                 chunk(g, i,
                       json_pack("{s:s, s:o}", "role", "assistant", "content",
                                 srv_jstr(echo->p, echo->n)),
                       NULL));
        g->b[i].started = true;
    }
}

/* prompt_logprobs (vLLM's), streamed: a chunk of its own, no choice in it,
 * before the first choice's first delta. */
static void chat_scored(srv_gen *g, int bi) {
    if (bi != 0 || g->req->prompt_logprobs < 0) return;
    sse_json(g, NULL,
             json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:o}", "id", g->id, "object",
                       "chat.completion.chunk", "created", (json_int_t)g->created, "model",
                       g->env.model_name, "system_fingerprint", "deepinfer", "choices",
                       "prompt_logprobs", gen_prompt_logprobs(g, 0)));
}

static void chat_branch_end(srv_gen *g, int bi) {
    gen_branch *b = &g->b[bi];
    json_t *delta = json_object();
    if (!b->started) json_object_set_new(delta, "role", json_string("assistant"));
    b->started = true;
    if (b->finish == FIN_ERROR) {
        sse_json(g, NULL,
                 json_pack("{s:{s:s, s:s}}", "error", "message",
                           b->error ? b->error : "generation failed", "type", "server_error"));
    }
    json_t *c = chunk(g, bi, delta, srv_finish_openai(b->finish));
    if (b->lp_pending) {
        json_t *choice = json_array_get(json_object_get(c, "choices"), 0);
        json_object_set_new(choice, "logprobs", json_pack("{s:o}", "content", b->lp_pending));
        b->lp_pending = NULL;
    }
    sse_json(g, NULL, c);
}

static void chat_end(srv_gen *g) {
    if (g->req->include_usage) {
        json_t *c = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:o}", "id", g->id, "object",
                              "chat.completion.chunk", "created", (json_int_t)g->created, "model",
                              g->env.model_name, "system_fingerprint", "deepinfer", "choices",
                              "usage", srv_usage_openai(g));
        sse_json(g, NULL, c);
    }
    sse_raw(g, "data: [DONE]\n\n");
}

/* --- body ---------------------------------------------------------------- */
static json_t *chat_body(srv_gen *g) {
    json_t *choices = json_array();
    for (int i = 0; i < g->n; i++) {
        gen_branch *b = &g->b[i];
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        di_buf content = {0}; /* vLLM's echo first */
        di_buf_add(&content, g->req->chat_echo.p, g->req->chat_echo.n);
        di_buf_add(&content, b->text.p, b->text.n);
        json_object_set_new(msg, "content",
                            content.n || !b->n_tools
                                ? srv_jstr(content.p ? content.p : "", content.n)
                                : json_null());
        di_buf_free(&content);
        if (b->reasoning.n)
            json_object_set_new(msg, "reasoning_content", srv_jstr(b->reasoning.p, b->reasoning.n));
        if (b->n_tools) {
            json_t *tcs = json_array();
            for (int t = 0; t < b->n_tools; t++) {
                const char *a = b->tools[t].args.n ? b->tools[t].args.p : "{}";
                json_array_append_new(tcs, json_pack("{s:s, s:s, s:{s:s, s:o}}", "id",
                                                     b->tools[t].id, "type", "function", "function",
                                                     "name", b->tools[t].name, "arguments",
                                                     srv_jstr(a, strlen(a))));
            }
            json_object_set_new(msg, "tool_calls", tcs);
        }
        json_t *lp = g->req->logprobs ? json_pack("{s:O}", "content", b->logprobs) : json_null();
        json_array_append_new(choices, json_pack("{s:i, s:o, s:o, s:s}", "index", i, "message", msg,
                                                 "logprobs", lp, "finish_reason",
                                                 srv_finish_openai(b->finish)));
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o}", "id", g->id, "object",
                          "chat.completion", "created", (json_int_t)g->created, "model",
                          g->env.model_name, "system_fingerprint", "deepinfer", "choices", choices,
                          "usage", srv_usage_openai(g));
    if (g->req->prompt_logprobs >= 0) /* vLLM's: beside the choices */
        json_object_set_new(o, "prompt_logprobs", gen_prompt_logprobs(g, 0));
    return o;
}

const srv_api srv_api_chat = {.path = "/v1/chat/completions",
                              .name = "chat_completions",
                              .proto = SRV_CHAT,
                              .parse = chat_parse,
                              .begin = chat_begin,
                              .event = chat_event,
                              .branch_end = chat_branch_end,
                              .scored = chat_scored,
                              .end = chat_end,
                              .body = chat_body};
