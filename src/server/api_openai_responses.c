/* api_openai_responses.c — OpenAI Responses: `input` (a string or a list of
 * message / function_call / function_call_output / reasoning items) plus
 * `instructions` into the internal conversation; output as a `response`
 * object whose `output` holds reasoning, message and function_call items,
 * streamed as response.created, response.in_progress, output_item.added,
 * content_part.added, output_text.delta, function_call_arguments.delta, the
 * matching .done events and response.completed (or response.incomplete when
 * max_output_tokens cut it). Every event carries a sequence_number.
 * Responses are kept (resp_store.h; unless the request says store: false)
 * and previous_response_id continues one: its conversation's items come
 * before this request's input (instructions are not carried over, as
 * OpenAI does). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"

/* --- request ------------------------------------------------------------- */
static int add_content(const json_t *c, conv_message *m, const char *where, srv_fail *f) {
    if (json_is_string(c)) {
        conv_message_add_text(m, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c))
        return srv_failf(f, 400, "input", "%s.content: expected a string or an array", where);
    m->has_content = true;
    size_t i;
    const json_t *p;
    json_array_foreach(c, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        if (!type)
            return srv_failf(f, 400, "input", "%s.content[%zu].type: expected a string", where, i);
        if (!strcmp(type, "input_text") || !strcmp(type, "output_text") || !strcmp(type, "text")) {
            const json_t *t = json_object_get(p, "text");
            if (!json_is_string(t))
                return srv_failf(f, 400, "input", "%s.content[%zu].text: expected a string", where,
                                 i);
            conv_message_add_text(m, json_string_value(t), json_string_length(t));
        } else if (!strcmp(type, "input_image"))
            conv_message_add_image(m);
        else if (strcmp(type, "refusal"))
            return srv_failf(f, 400, "input", "%s.content[%zu].type: unsupported '%s'", where, i,
                             type);
    }
    return 0;
}

static conv_message *last_assistant(conversation *c) {
    if (c->n_msgs && c->msgs[c->n_msgs - 1].role == CONV_ASSISTANT) return &c->msgs[c->n_msgs - 1];
    conv_message *m = conv_add_message(c, CONV_ASSISTANT);
    m->has_content = false;
    return m;
}

static int parse_item(const json_t *it, conversation *c, size_t i, srv_fail *f) {
    char where[48];
    snprintf(where, sizeof where, "input[%zu]", i);
    if (!json_is_object(it)) return srv_failf(f, 400, "input", "%s: expected an object", where);
    const char *type = json_string_value(json_object_get(it, "type"));
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!type || !strcmp(type, "message")) {
        if (!role) return srv_failf(f, 400, "input", "%s.role: expected a string", where);
        conv_role r;
        if (!strcmp(role, "user"))
            r = CONV_USER;
        else if (!strcmp(role, "assistant"))
            r = CONV_ASSISTANT;
        else if (!strcmp(role, "system") || !strcmp(role, "developer"))
            r = CONV_SYSTEM;
        else
            return srv_failf(f, 400, "input", "%s.role: unknown role '%s'", where, role);
        conv_message *m = conv_add_message(c, r);
        return add_content(json_object_get(it, "content"), m, where, f);
    }
    if (!strcmp(type, "function_call")) {
        const json_t *name = json_object_get(it, "name"), *args = json_object_get(it, "arguments");
        const json_t *id = json_object_get(it, "call_id");
        if (!json_is_string(name))
            return srv_failf(f, 400, "input", "%s.name: expected a string", where);
        if (!json_is_string(args))
            return srv_failf(f, 400, "input", "%s.arguments: expected a string", where);
        conv_message_add_tool_call(last_assistant(c),
                                   json_is_string(id) ? json_string_value(id) : "",
                                   json_string_value(name), json_string_value(args));
        return 0;
    }
    if (!strcmp(type, "function_call_output")) {
        const json_t *id = json_object_get(it, "call_id"), *out = json_object_get(it, "output");
        if (!json_is_string(id))
            return srv_failf(f, 400, "input", "%s.call_id: expected a string", where);
        conv_message *m = conv_add_message(c, CONV_TOOL);
        m->tool_call_id = di_strdup(json_string_value(id));
        if (json_is_string(out))
            conv_message_add_text(m, json_string_value(out), json_string_length(out));
        else if (out && !json_is_null(out))
            return add_content(out, m, where, f);
        return 0;
    }
    if (!strcmp(type, "reasoning")) {
        di_buf t = {0};
        const json_t *parts = json_object_get(it, "content");
        if (!json_is_array(parts)) parts = json_object_get(it, "summary");
        size_t k;
        const json_t *p;
        json_array_foreach(parts, k, p) {
            const json_t *s = json_object_get(p, "text");
            if (json_is_string(s)) di_buf_add(&t, json_string_value(s), json_string_length(s));
        }
        conv_message *m = last_assistant(c);
        free(m->reasoning);
        m->reasoning = di_strdup(t.p ? t.p : "");
        di_buf_free(&t);
        return 0;
    }
    return srv_failf(f, 400, "input", "%s.type: unsupported item type '%s'", where, type);
}

/* include: what the response should carry beyond the default. Output text
 * logprobs are the one this server makes; the other documented values have
 * nothing to add here and are accepted. */
static int parse_include(const json_t *inc, srv_req *r, srv_fail *f) {
    static const char *const known[] = {"message.output_text.logprobs",
                                        "reasoning.encrypted_content",
                                        "file_search_call.results",
                                        "web_search_call.results",
                                        "web_search_call.action.sources",
                                        "message.input_image.image_url",
                                        "computer_call_output.output.image_url",
                                        "code_interpreter_call.outputs"};
    if (!inc || json_is_null(inc)) return 0;
    if (!json_is_array(inc)) return srv_failf(f, 400, "include", "include: expected an array");
    size_t i;
    const json_t *v;
    json_array_foreach(inc, i, v) {
        const char *s = json_string_value(v);
        if (!s) return srv_failf(f, 400, "include", "include[%zu]: expected a string", i);
        size_t k = 0;
        while (k < sizeof known / sizeof *known && strcmp(s, known[k])) k++;
        if (k == sizeof known / sizeof *known)
            return srv_failf(f, 400, "include", "include[%zu]: unknown value '%.64s'", i, s);
        if (k == 0) r->logprobs = true;
    }
    return 0;
}

/* previous_response_id: the stored conversation's items, into the
 * conversation before this request's input. */
static int continue_from(const json_t *body, srv_req *r, const srv_limits *lim, srv_fail *f) {
    const char *prev = NULL;
    if (srv_get_str(body, "previous_response_id", &prev, f)) return -1;
    if (!prev) return 0;
    json_t *was = lim->responses ? resp_store_get(lim->responses, prev) : NULL;
    const char *status = json_string_value(json_object_get(was, "status"));
    bool running = status && !strcmp(status, "in_progress");
    json_decref(was);
    if (running)
        return srv_failf(f, 400, "previous_response_id",
                         "previous_response_id: response '%.100s' is still in progress", prev);
    json_t *items = lim->responses ? resp_store_history(lim->responses, prev, true) : NULL;
    if (!items)
        return srv_failf(f, 400, "previous_response_id",
                         "previous_response_id: no stored response '%.100s' (never made, made "
                         "with store: false, deleted, or evicted)",
                         prev);
    r->resp_prev = di_strdup(prev);
    size_t i;
    const json_t *it;
    int rc = 0;
    json_array_foreach(items, i, it) if (!rc) rc = parse_item(it, r->conv, i, f);
    json_decref(items);
    return rc;
}

static int resp_parse(const json_t *body, srv_req *r, const srv_limits *lim, srv_fail *f) {
    r->conv = conv_new();
    r->resp_store = true;
    const char *instr = NULL;
    if (srv_get_str(body, "instructions", &instr, f) ||
        srv_get_bool(body, "store", &r->resp_store, f))
        return -1;
    if (instr) conv_message_add_text(conv_add_message(r->conv, CONV_SYSTEM), instr, strlen(instr));
    if (continue_from(body, r, lim, f)) return -1;
    const json_t *in = json_object_get(body, "input");
    if (json_is_string(in)) {
        conv_message_add_text(conv_add_message(r->conv, CONV_USER), json_string_value(in),
                              json_string_length(in));
        r->resp_input =
            json_pack("[{s:s, s:s, s:O}]", "type", "message", "role", "user", "content", in);
    } else if (json_is_array(in)) {
        size_t i;
        const json_t *it;
        json_array_foreach(in, i, it) if (parse_item(it, r->conv, i, f)) return -1;
        r->resp_input = json_deep_copy(in);
    } else
        return srv_failf(f, 400, "input", "input: expected a string or an array of items");
    if (!r->conv->n_msgs) return srv_failf(f, 400, "input", "input: must not be empty");
    const json_t *reasoning = json_object_get(body, "reasoning");
    if (json_is_object(reasoning)) {
        const char *eff = json_string_value(json_object_get(reasoning, "effort"));
        if (eff && !strcmp(eff, "none"))
            r->conv->thinking = CONV_THINK_OFF;
        else if (eff) {
            r->conv->thinking = CONV_THINK_ON;
            r->conv->reasoning_effort = di_strdup(eff);
        }
    } else if (reasoning && !json_is_null(reasoning))
        return srv_failf(f, 400, "reasoning", "reasoning: expected an object");
    const json_t *text = json_object_get(body, "text");
    if (text && !json_is_null(text) && !json_is_object(text))
        return srv_failf(f, 400, "text", "text: expected an object");
    if (srv_parse_tools(json_object_get(body, "tools"), r->conv, f) ||
        srv_parse_tool_choice(json_object_get(body, "tool_choice"), r, f) ||
        srv_apply_tool_choice(r, f) ||
        srv_parse_response_format(json_object_get(text, "format"), "text.format", r, f) ||
        srv_get_sampling(body, r, 2.0f, f) || srv_get_bool(body, "stream", &r->stream, f) ||
        srv_get_int(body, "max_output_tokens", 1, 1 << 30, &r->max_tokens, f) ||
        srv_get_int(body, "top_logprobs", 0, SAMP_MAX_TOP, &r->top_logprobs, f) ||
        srv_get_bool(body, "parallel_tool_calls", &r->parallel_tool_calls, f) ||
        parse_include(json_object_get(body, "include"), r, f) ||
        srv_get_bool(body, "background", &r->background, f))
        return -1;
    if (r->top_logprobs) r->logprobs = true;
    if (r->background && (r->stream || !r->resp_store || !lim->responses))
        return srv_failf(f, 400, "background",
                         "background: needs store (and a server that keeps responses) and is not "
                         "streamed here (poll GET /v1/responses/ID)");
    return 0;
}

/* --- output items -------------------------------------------------------- */
/* The output_text's logprobs: every generated token's entry (as chat
 * completions' content logprobs), when asked for; a reference, each event
 * being written out as it is made. */
static json_t *text_logprobs(const srv_gen *g) {
    json_t *all = g->req->logprobs ? g->b[0].logprobs : NULL;
    return all ? json_incref(all) : json_array();
}

static void item_id(const srv_gen *g, const char *pre, int index, char *out, size_t cap) {
    snprintf(out, cap, "%s_%s_%d", pre, g->id + 5, index);
}

static json_t *reasoning_item(const srv_gen *g, int idx, const char *text, size_t len,
                              const char *status) {
    char id[80];
    item_id(g, "rs", idx, id, sizeof id);
    json_t *content = json_array();
    if (text)
        json_array_append_new(content, json_pack("{s:s, s:o}", "type", "reasoning_text", "text",
                                                 srv_jstr(text, len)));
    return json_pack("{s:s, s:s, s:[], s:o, s:s}", "id", id, "type", "reasoning", "summary",
                     "content", content, "status", status);
}

/* lp: the logprobs (taken), NULL for none yet */
static json_t *text_part(const char *text, size_t len, json_t *lp) {
    return json_pack("{s:s, s:o, s:[], s:o}", "type", "output_text", "text", srv_jstr(text, len),
                     "annotations", "logprobs", lp ? lp : json_array());
}

static json_t *message_item(const srv_gen *g, int idx, const char *text, size_t len,
                            const char *status) {
    char id[80];
    item_id(g, "msg", idx, id, sizeof id);
    json_t *content = json_array();
    if (text) json_array_append_new(content, text_part(text, len, text_logprobs(g)));
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", id, "type", "message", "role", "assistant",
                     "status", status, "content", content);
}

static json_t *call_item(const srv_gen *g, int idx, const gen_tool *t, const char *status,
                         bool with_args) {
    char id[80];
    item_id(g, "fc", idx, id, sizeof id);
    const char *a = with_args && t->args.n ? t->args.p : "";
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s}", "id", id, "type", "function_call", "call_id",
                     t->id, "name", t->name, "arguments", srv_jstr(a, strlen(a)), "status", status);
}

/* What response_obj holds: no output yet, the output so far (items in
 * progress, no usage), or the whole. */
enum { OUT_NONE, OUT_SO_FAR, OUT_FINAL };

static json_t *response_obj(srv_gen *g, const char *status, int what) {
    gen_branch *b = &g->b[0];
    json_t *output = json_array();
    bool final = what == OUT_FINAL;
    const char *item = final ? "completed" : "in_progress";
    if (what != OUT_NONE) {
        int idx = 0;
        if (b->reasoning.n)
            json_array_append_new(output,
                                  reasoning_item(g, idx++, b->reasoning.p, b->reasoning.n, item));
        if (b->text.n || !b->n_tools)
            json_array_append_new(
                output, message_item(g, idx++, b->text.p ? b->text.p : "", b->text.n, item));
        for (int t = 0; t < b->n_tools; t++)
            json_array_append_new(output, call_item(g, idx++, &b->tools[t], item, true));
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:b, s:n, s:n, s:s, s:[], s:n}", "id",
                          g->id, "object", "response", "created_at", (json_int_t)g->created,
                          "status", status, "model", g->env.model_name, "output", output,
                          "parallel_tool_calls", g->req->parallel_tool_calls, "error",
                          "incomplete_details", "tool_choice", "auto", "tools", "usage");
    json_object_set_new(o, "temperature", json_real(g->req->samp.temperature));
    json_object_set_new(o, "top_p", json_real(g->req->samp.top_p > 0 ? g->req->samp.top_p : 1.0));
    json_object_set_new(o, "max_output_tokens",
                        g->req->max_tokens > 0 ? json_integer(g->req->max_tokens) : json_null());
    json_object_set_new(o, "previous_response_id",
                        g->req->resp_prev ? json_string(g->req->resp_prev) : json_null());
    json_object_set_new(o, "store", json_boolean(g->req->resp_store && g->env.responses));
    json_object_set_new(o, "background", json_boolean(g->req->background));
    if (final) {
        engine_usage u = gen_usage(g);
        json_object_set_new(o, "usage",
                            json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens",
                                      u.prompt_tokens, "input_tokens_details", "cached_tokens",
                                      u.cached_tokens, "output_tokens", u.completion_tokens,
                                      "output_tokens_details", "reasoning_tokens", 0,
                                      "total_tokens", u.prompt_tokens + u.completion_tokens));
        if (b->finish == FIN_LENGTH)
            json_object_set_new(o, "incomplete_details",
                                json_pack("{s:s}", "reason", "max_output_tokens"));
        if (b->finish == FIN_ERROR)
            json_object_set_new(o, "error",
                                json_pack("{s:s, s:s}", "code", "server_error", "message",
                                          b->error ? b->error : "generation failed"));
    }
    return o;
}

/* --- stream -------------------------------------------------------------- */
static void emit(srv_gen *g, const char *type, json_t *ev) {
    json_object_set_new(ev, "type", json_string(type));
    json_object_set_new(ev, "sequence_number", json_integer(g->seq_no++));
    sse_json(g, type, ev);
}

static void close_block(srv_gen *g, gen_branch *b) {
    int idx = b->blk_index;
    char id[80];
    if (b->blk == GEV_REASONING + 1) {
        const char *t = b->reasoning.p + b->blk_from;
        size_t n = b->reasoning.n - b->blk_from;
        item_id(g, "rs", idx, id, sizeof id);
        emit(g, "response.reasoning_text.done",
             json_pack("{s:s, s:i, s:i, s:o}", "item_id", id, "output_index", idx, "content_index",
                       0, "text", srv_jstr(t, n)));
        emit(g, "response.output_item.done",
             json_pack("{s:i, s:o}", "output_index", idx, "item",
                       reasoning_item(g, idx, t, n, "completed")));
    } else if (b->blk == GEV_TEXT + 1) {
        const char *t = b->text.p + b->blk_from;
        size_t n = b->text.n - b->blk_from;
        item_id(g, "msg", idx, id, sizeof id);
        emit(g, "response.output_text.done",
             json_pack("{s:s, s:i, s:i, s:o, s:o}", "item_id", id, "output_index", idx,
                       "content_index", 0, "text", srv_jstr(t, n), "logprobs", text_logprobs(g)));
        emit(g, "response.content_part.done",
             json_pack("{s:s, s:i, s:i, s:o}", "item_id", id, "output_index", idx, "content_index",
                       0, "part", text_part(t, n, text_logprobs(g))));
        emit(g, "response.output_item.done",
             json_pack("{s:i, s:o}", "output_index", idx, "item",
                       message_item(g, idx, t, n, "completed")));
    } else if (b->blk == GEV_TOOL_START + 1) {
        const gen_tool *t = &b->tools[b->tool_open];
        item_id(g, "fc", idx, id, sizeof id);
        const char *a = t->args.n ? t->args.p : "{}";
        emit(g, "response.function_call_arguments.done",
             json_pack("{s:s, s:i, s:o}", "item_id", id, "output_index", idx, "arguments",
                       srv_jstr(a, strlen(a))));
        emit(g, "response.output_item.done",
             json_pack("{s:i, s:o}", "output_index", idx, "item",
                       call_item(g, idx, t, "completed", true)));
    }
    if (b->blk) b->blk_index++;
    b->blk = 0;
}

static void resp_event(srv_gen *g, int bi, const gev *ev) {
    gen_branch *b = &g->b[bi];
    if (bi != 0 || ev->kind == GEV_TOOL_END) return;
    int want = ev->kind == GEV_TOOL_ARGS ? GEV_TOOL_START + 1 : (int)ev->kind + 1;
    if (b->blk != want || ev->kind == GEV_TOOL_START) {
        close_block(g, b);
        int idx = b->blk_index;
        char id[80];
        b->blk = want;
        if (ev->kind == GEV_REASONING) {
            b->blk_from = b->reasoning.n - ev->len;
            emit(g, "response.output_item.added",
                 json_pack("{s:i, s:o}", "output_index", idx, "item",
                           reasoning_item(g, idx, NULL, 0, "in_progress")));
        } else if (ev->kind == GEV_TEXT) {
            b->blk_from = b->text.n - ev->len;
            item_id(g, "msg", idx, id, sizeof id);
            emit(g, "response.output_item.added",
                 json_pack("{s:i, s:o}", "output_index", idx, "item",
                           message_item(g, idx, NULL, 0, "in_progress")));
            emit(g, "response.content_part.added",
                 json_pack("{s:s, s:i, s:i, s:o}", "item_id", id, "output_index", idx,
                           "content_index", 0, "part", text_part("", 0, NULL)));
        } else if (ev->kind == GEV_TOOL_START) {
            b->tool_open = ev->tool;
            emit(g, "response.output_item.added",
                 json_pack("{s:i, s:o}", "output_index", idx, "item",
                           call_item(g, idx, &b->tools[ev->tool], "in_progress", false)));
            return;
        }
    }
    int idx = b->blk_index;
    char id[80];
    if (ev->kind == GEV_REASONING) {
        item_id(g, "rs", idx, id, sizeof id);
        emit(g, "response.reasoning_text.delta",
             json_pack("{s:s, s:i, s:i, s:o}", "item_id", id, "output_index", idx, "content_index",
                       0, "delta", srv_jstr(ev->text, ev->len)));
    } else if (ev->kind == GEV_TEXT) {
        item_id(g, "msg", idx, id, sizeof id);
        emit(g, "response.output_text.delta",
             json_pack("{s:s, s:i, s:i, s:o, s:o}", "item_id", id, "output_index", idx,
                       "content_index", 0, "delta", srv_jstr(ev->text, ev->len), "logprobs",
                       b->lp_pending ? b->lp_pending : json_array()));
        b->lp_pending = NULL;
    } else if (ev->kind == GEV_TOOL_ARGS) {
        item_id(g, "fc", idx, id, sizeof id);
        emit(g, "response.function_call_arguments.delta",
             json_pack("{s:s, s:i, s:o}", "item_id", id, "output_index", idx, "delta",
                       srv_jstr(ev->text, ev->len)));
    }
}

static void resp_begin(srv_gen *g) {
    emit(g, "response.created",
         json_pack("{s:o}", "response", response_obj(g, "in_progress", OUT_NONE)));
    emit(g, "response.in_progress",
         json_pack("{s:o}", "response", response_obj(g, "in_progress", OUT_NONE)));
}

static const char *status_of(srv_finish f) {
    return f == FIN_LENGTH      ? "incomplete"
           : f == FIN_ERROR     ? "failed"
           : f == FIN_CANCELLED ? "cancelled"
                                : "completed";
}

/* An item as input_items lists it: a message's string content as one
 * text part (input_text, or output_text for the assistant's). */
static json_t *listed_item(const json_t *it) {
    json_t *o = json_deep_copy(it);
    const json_t *c = json_object_get(it, "content");
    const char *role = json_string_value(json_object_get(it, "role"));
    if (json_is_string(c))
        json_object_set_new(
            o, "content",
            json_pack("[{s:s, s:O}]", "type",
                      role && !strcmp(role, "assistant") ? "output_text" : "input_text", "text",
                      c));
    return o;
}

json_t *srv_response_input_items(resp_store *s, const char *id, const char *limit,
                                 const char *order, const char *after, const char *before,
                                 srv_fail *f) {
    char *end = NULL;
    long lim = limit ? strtol(limit, &end, 10) : 20;
    if (limit && (!*limit || *end || lim < 1 || lim > 100)) {
        srv_failf(f, 400, "limit", "limit: expected an integer from 1 to 100");
        return NULL;
    }
    bool desc = !order || !strcmp(order, "desc");
    if (!desc && strcmp(order, "asc")) {
        srv_failf(f, 400, "order", "order: expected asc or desc");
        return NULL;
    }
    json_t *items = s ? resp_store_history(s, id, false) : NULL;
    if (!items) {
        srv_failf(f, 404, NULL, "No response found with id '%.100s'", id);
        return NULL;
    }
    long n = (long)json_array_size(items), lo = 0, hi = n; /* positions in the order asked */
    for (int side = 0; side < 2; side++) {
        const char *cursor = side ? before : after;
        if (!cursor) continue;
        long at = -1;
        for (long k = 0; k < n && at < 0; k++) {
            const json_t *it = json_array_get(items, (size_t)(desc ? n - 1 - k : k));
            const char *iid = json_string_value(json_object_get(it, "id"));
            if (iid && !strcmp(iid, cursor)) at = k;
        }
        if (at < 0) {
            json_decref(items);
            srv_failf(f, 400, side ? "before" : "after", "%s: no item '%.100s' in this list",
                      side ? "before" : "after", cursor);
            return NULL;
        }
        if (side)
            hi = at;
        else
            lo = at + 1;
    }
    json_t *data = json_array();
    for (long k = lo; k < hi && k < lo + lim; k++)
        json_array_append_new(data,
                              listed_item(json_array_get(items, (size_t)(desc ? n - 1 - k : k))));
    json_decref(items);
    size_t m = json_array_size(data);
    const json_t *first = json_object_get(json_array_get(data, 0), "id"),
                 *last = json_object_get(json_array_get(data, m ? m - 1 : 0), "id");
    return json_pack("{s:s, s:o, s:O?, s:O?, s:b}", "object", "list", "data", data, "first_id",
                     first, "last_id", last, "has_more", lo + lim < hi);
}

/* Gives the input items without an id one (msg_ + the response's id's
 * tail + "_in" + their place; its output items end in their place alone),
 * as OpenAI lists them: input_items pages by id. */
static void name_items(json_t *items, const char *resp_id) {
    size_t i;
    json_t *it;
    const char *tail = strchr(resp_id, '_') ? strchr(resp_id, '_') + 1 : resp_id;
    json_array_foreach(items, i, it) {
        if (!json_is_object(it) || json_is_string(json_object_get(it, "id"))) continue;
        char id[96];
        snprintf(id, sizeof id, "msg_%.64s_in%zu", tail, i);
        json_object_set_new(it, "id", json_string(id));
    }
}

static void keep(srv_gen *g, const json_t *o) {
    name_items(g->req->resp_input, g->id);
    resp_store_put(g->env.responses, g->id, g->req->resp_prev, g->req->resp_input, o);
}

/* The finished response, kept for previous_response_id and GET unless the
 * request said store: false (not one that failed, or whose client left; a
 * background one always, as polling finds it: failed or cancelled too). */
static json_t *final_response(srv_gen *g) {
    srv_finish fin = g->b[0].finish;
    json_t *o = response_obj(g, status_of(fin), OUT_FINAL);
    if (g->env.responses && g->req->resp_store && g->req->resp_input &&
        (g->req->background || (fin != FIN_ERROR && fin != FIN_CANCELLED)))
        keep(g, o);
    return o;
}

/* Background mode: in progress, with no output yet. */
static json_t *resp_started(srv_gen *g) {
    json_t *o = response_obj(g, "in_progress", OUT_NONE);
    keep(g, o);
    return o;
}

/* Background mode, polled while it runs: the output so far. */
static json_t *resp_so_far(srv_gen *g) {
    return response_obj(g, "in_progress", OUT_SO_FAR);
}

static void resp_end(srv_gen *g) {
    gen_branch *b = &g->b[0];
    close_block(g, b);
    const char *type = b->finish == FIN_LENGTH  ? "response.incomplete"
                       : b->finish == FIN_ERROR ? "response.failed"
                                                : "response.completed";
    emit(g, type, json_pack("{s:o}", "response", final_response(g)));
}

static json_t *resp_body(srv_gen *g) {
    return final_response(g);
}

const srv_api srv_api_responses = {.path = "/v1/responses",
                                   .name = "responses",
                                   .proto = SRV_RESPONSES,
                                   .parse = resp_parse,
                                   .begin = resp_begin,
                                   .event = resp_event,
                                   .end = resp_end,
                                   .body = resp_body,
                                   .started = resp_started,
                                   .so_far = resp_so_far};
