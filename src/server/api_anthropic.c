/* api_anthropic.c — Anthropic Messages: system (string or text blocks),
 * messages whose content is a string or blocks (text, image, document:
 * its text where its source is text, tool_use, tool_result, thinking),
 * tools with input_schema, tool_choice (auto, any, tool, none), thinking
 * (enabled/disabled), stop_sequences and structured outputs
 * (output_config.format, or the beta's output_format: a JSON schema the
 * reply's text follows) into the internal conversation; output as a
 * `message` body or the Messages stream: message_start,
 * content_block_start / _delta (text_delta, thinking_delta,
 * input_json_delta) / _stop, message_delta (stop_reason, usage),
 * message_stop. tool_result blocks become tool messages ahead of the
 * user's other text, which is the order the model saw them in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"

/* --- request ------------------------------------------------------------- */
static int text_of(const json_t *c, di_buf *out, const char *where, srv_fail *f) {
    if (json_is_string(c)) {
        di_buf_add(out, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!c || json_is_null(c)) return 0;
    if (!json_is_array(c))
        return srv_failf(f, 400, where, "%s: expected a string or an array of blocks", where);
    size_t i;
    const json_t *b;
    json_array_foreach(c, i, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        const json_t *t = json_object_get(b, "text");
        if (!type || strcmp(type, "text") || !json_is_string(t))
            return srv_failf(f, 400, where, "%s[%zu]: expected a text block", where, i);
        di_buf_add(out, json_string_value(t), json_string_length(t));
    }
    return 0;
}

/* A document block whose source is text (type text, or content: a string
 * or text blocks) into cm as text: its title and context (each on a line
 * of its own, where given), a blank line, then the document. Returns 1
 * where the source is not text (media: an image-like part), -1 on error. */
static int doc_text(const json_t *b, conv_message *cm, const char *bw, srv_fail *f) {
    const json_t *src = json_object_get(b, "source");
    const char *st = json_string_value(json_object_get(src, "type"));
    if (!st) return srv_failf(f, 400, bw, "%s.source.type: expected a string", bw);
    di_buf doc = {0};
    char sw[112];
    snprintf(sw, sizeof sw, "%s.source", bw);
    if (!strcmp(st, "text")) {
        const json_t *d = json_object_get(src, "data");
        if (!json_is_string(d)) return srv_failf(f, 400, bw, "%s.data: expected a string", sw);
        di_buf_add(&doc, json_string_value(d), json_string_length(d));
    } else if (!strcmp(st, "content")) {
        snprintf(sw, sizeof sw, "%s.source.content", bw);
        if (text_of(json_object_get(src, "content"), &doc, sw, f)) return di_buf_free(&doc), -1;
    } else
        return 1;
    di_buf t = {0};
    static const char *const heads[] = {"title", "context"};
    for (int h = 0; h < 2; h++) {
        const json_t *v = json_object_get(b, heads[h]);
        if (!json_is_string(v)) continue;
        di_buf_add(&t, json_string_value(v), json_string_length(v));
        di_buf_adds(&t, "\n");
    }
    if (t.n) di_buf_adds(&t, "\n");
    di_buf_add(&t, doc.p, doc.n);
    conv_message_add_text(cm, t.p ? t.p : "", t.n);
    di_buf_free(&t);
    di_buf_free(&doc);
    return 0;
}

static int parse_message(const json_t *m, conversation *c, size_t i, srv_fail *f) {
    char where[64];
    snprintf(where, sizeof where, "messages.%zu", i);
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!json_is_object(m) || !role)
        return srv_failf(f, 400, where, "%s.role: expected \"user\" or \"assistant\"", where);
    bool user = !strcmp(role, "user");
    if (!user && strcmp(role, "assistant"))
        return srv_failf(f, 400, where, "%s.role: expected \"user\" or \"assistant\"", where);
    const json_t *content = json_object_get(m, "content");
    if (json_is_string(content)) {
        conv_message *cm = conv_add_message(c, user ? CONV_USER : CONV_ASSISTANT);
        conv_message_add_text(cm, json_string_value(content), json_string_length(content));
        return 0;
    }
    if (!json_is_array(content))
        return srv_failf(f, 400, where, "%s.content: expected a string or an array of blocks",
                         where);
    conv_message *cm = NULL; /* created at the first non-tool_result block */
    size_t k;
    const json_t *b;
    json_array_foreach(content, k, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        char bw[96];
        snprintf(bw, sizeof bw, "%s.content.%zu", where, k);
        if (!json_is_object(b) || !type)
            return srv_failf(f, 400, bw, "%s.type: expected a string", bw);
        if (user && !strcmp(type, "tool_result")) {
            const json_t *id = json_object_get(b, "tool_use_id");
            if (!json_is_string(id))
                return srv_failf(f, 400, bw, "%s.tool_use_id: expected a string", bw);
            conv_message *tm = conv_add_message(c, CONV_TOOL);
            tm->tool_call_id = di_strdup(json_string_value(id));
            di_buf t = {0};
            char cw[112];
            snprintf(cw, sizeof cw, "%s.content", bw);
            int rc = text_of(json_object_get(b, "content"), &t, cw, f);
            conv_message_add_text(tm, t.p ? t.p : "", t.n);
            di_buf_free(&t);
            if (rc) return -1;
            cm = NULL;
            continue;
        }
        if (!cm) {
            cm = conv_add_message(c, user ? CONV_USER : CONV_ASSISTANT);
            cm->has_content = false;
        }
        if (!strcmp(type, "text")) {
            const json_t *t = json_object_get(b, "text");
            if (!json_is_string(t)) return srv_failf(f, 400, bw, "%s.text: expected a string", bw);
            conv_message_add_text(cm, json_string_value(t), json_string_length(t));
        } else if (!strcmp(type, "document")) {
            int rc = doc_text(b, cm, bw, f);
            if (rc < 0) return -1;
            if (rc > 0) conv_message_add_image(cm); /* media: stands as an image does */
        } else if (!strcmp(type, "image")) {
            conv_message_add_image(cm);
        } else if (!user && !strcmp(type, "tool_use")) {
            const json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name");
            const json_t *input = json_object_get(b, "input");
            if (!json_is_string(name))
                return srv_failf(f, 400, bw, "%s.name: expected a string", bw);
            if (input && !json_is_object(input))
                return srv_failf(f, 400, bw, "%s.input: expected an object", bw);
            char *a = input ? json_dumps(input, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
            conv_message_add_tool_call(cm, json_is_string(id) ? json_string_value(id) : "",
                                       json_string_value(name), a ? a : "{}");
            free(a);
        } else if (!user && (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking"))) {
            const json_t *t = json_object_get(b, "thinking");
            if (json_is_string(t)) {
                free(cm->reasoning);
                cm->reasoning = di_strdup(json_string_value(t));
            }
        } else
            return srv_failf(f, 400, bw, "%s.type: unsupported block type '%s' in a %s message", bw,
                             type, role);
    }
    return 0;
}

/* Structured outputs: output_config.format (or the beta's output_format),
 * {"type": "json_schema", "schema": {...}}. */
static int output_format(const json_t *body, srv_req *r, srv_fail *f) {
    const json_t *oc = json_object_get(body, "output_config");
    if (oc && !json_is_null(oc) && !json_is_object(oc))
        return srv_failf(f, 400, "output_config", "output_config: expected an object");
    const char *name = "output_config.format";
    const json_t *fmt = json_object_get(oc, "format");
    if (!fmt || json_is_null(fmt)) name = "output_format", fmt = json_object_get(body, name);
    if (!fmt || json_is_null(fmt)) return 0;
    const char *type = json_string_value(json_object_get(fmt, "type"));
    if (!type || strcmp(type, "json_schema"))
        return srv_failf(f, 400, name, "%s.type: expected \"json_schema\"", name);
    const json_t *sch = json_object_get(fmt, "schema");
    if (!json_is_object(sch))
        return srv_failf(f, 400, name, "%s.schema: expected a JSON schema object", name);
    return srv_set_json_schema(r, sch, name, "schema: ", f);
}

/* The Messages request; count_tokens sends the same without max_tokens. */
static int msg_fields(const json_t *body, srv_req *r, const srv_limits *lim, bool counting,
                      srv_fail *f) {
    if (!counting && !json_object_get(body, "max_tokens"))
        return srv_failf(f, 400, "max_tokens", "max_tokens: Field required");
    const json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs)) return srv_failf(f, 400, "messages", "messages: Field required");
    r->conv = conv_new();
    di_buf sys = {0};
    int rc = text_of(json_object_get(body, "system"), &sys, "system", f);
    if (!rc && sys.n) conv_message_add_text(conv_add_message(r->conv, CONV_SYSTEM), sys.p, sys.n);
    di_buf_free(&sys);
    if (rc) return -1;
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) if (parse_message(m, r->conv, i, f)) return -1;
    if (!json_array_size(msgs)) return srv_failf(f, 400, "messages", "messages: must not be empty");
    /* a last assistant message is a prefill the reply continues (without
     * trailing whitespace, as Anthropic asks) */
    const conv_message *last = &r->conv->msgs[r->conv->n_msgs - 1];
    if (last->role == CONV_ASSISTANT) {
        size_t n = 0;
        char *t = conv_message_text(last, &n);
        bool trailing = n && strchr(" \t\n\r\f\v", t[n - 1]);
        free(t);
        if (trailing)
            return srv_failf(
                f, 400, "messages",
                "messages: final assistant content cannot end with trailing whitespace");
        r->conv->continue_final = true;
        r->conv->add_generation_prompt = false;
    }

    const json_t *tools = json_object_get(body, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return srv_failf(f, 400, "tools", "tools: expected an array");
        json_t *t;
        json_array_foreach(tools, i, t) {
            const json_t *name = json_object_get(t, "name");
            const json_t *desc = json_object_get(t, "description");
            const json_t *schema = json_object_get(t, "input_schema");
            if (!json_is_string(name) || !json_string_length(name))
                return srv_failf(f, 400, "tools", "tools.%zu.name: expected a string", i);
            if (desc && !json_is_null(desc) && !json_is_string(desc))
                return srv_failf(f, 400, "tools", "tools.%zu.description: expected a string", i);
            if (!json_is_object(schema))
                return srv_failf(f, 400, "tools", "tools.%zu.input_schema: expected an object", i);
            char *p = json_dumps(schema, JSON_COMPACT | JSON_PRESERVE_ORDER);
            conv_add_tool(r->conv, json_string_value(name),
                          json_is_string(desc) ? json_string_value(desc) : NULL, p);
            r->conv->tools[r->conv->n_tools - 1].strict =
                json_is_true(json_object_get(t, "strict"));
            free(p);
        }
    }
    const json_t *tc = json_object_get(body, "tool_choice");
    if (tc && !json_is_null(tc)) {
        const char *type = json_string_value(json_object_get(tc, "type"));
        if (!type) return srv_failf(f, 400, "tool_choice", "tool_choice.type: expected a string");
        if (!strcmp(type, "auto"))
            r->tool_choice = SRV_TC_AUTO;
        else if (!strcmp(type, "any"))
            r->tool_choice = SRV_TC_REQUIRED;
        else if (!strcmp(type, "none"))
            r->tool_choice = SRV_TC_NONE;
        else if (!strcmp(type, "tool")) {
            const char *name = json_string_value(json_object_get(tc, "name"));
            if (!name)
                return srv_failf(f, 400, "tool_choice", "tool_choice.name: expected a string");
            r->tool_choice = SRV_TC_NAMED;
            r->tool_name = di_strdup(name);
        } else
            return srv_failf(f, 400, "tool_choice", "tool_choice.type: unknown value '%s'", type);
        bool no_par = false;
        if (srv_get_bool(tc, "disable_parallel_tool_use", &no_par, f)) return -1;
        r->parallel_tool_calls = !no_par;
    }
    if (srv_apply_tool_choice(r, f)) return -1;
    const json_t *th = json_object_get(body, "thinking");
    if (th && !json_is_null(th)) {
        const char *type = json_string_value(json_object_get(th, "type"));
        if (!type) return srv_failf(f, 400, "thinking", "thinking.type: expected a string");
        if (!strcmp(type, "enabled"))
            r->conv->thinking = CONV_THINK_ON;
        else if (!strcmp(type, "disabled"))
            r->conv->thinking = CONV_THINK_OFF;
        else
            return srv_failf(f, 400, "thinking", "thinking.type: unknown value '%s'", type);
    }
    r->max_tokens = -1;
    if (srv_get_sampling(body, r, 1.0f, f) || srv_get_stops(body, "stop_sequences", r, lim, f) ||
        srv_get_bool(body, "stream", &r->stream, f) ||
        srv_get_int(body, "max_tokens", 1, 1 << 30, &r->max_tokens, f) || output_format(body, r, f))
        return -1;
    return 0;
}

static int msg_parse(const json_t *body, srv_req *r, const srv_limits *lim, srv_fail *f) {
    return msg_fields(body, r, lim, false, f);
}

static int count_parse(const json_t *body, srv_req *r, const srv_limits *lim, srv_fail *f) {
    return msg_fields(body, r, lim, true, f);
}

/* --- output -------------------------------------------------------------- */
static const char *msg_stop_reason(const gen_branch *b) {
    srv_finish f = b->finish;
    if (b->stop_index >= 0) return "stop_sequence";
    return f == FIN_LENGTH ? "max_tokens" : f == FIN_TOOLS ? "tool_use" : "end_turn";
}

static json_t *stop_seq(srv_gen *g, const gen_branch *b) {
    if (b->stop_index >= 0 && b->stop_index < g->req->n_stops)
        return json_string(g->req->stops[b->stop_index]);
    return json_null();
}

static json_t *usage(srv_gen *g) {
    engine_usage u = gen_usage(g);
    return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", u.prompt_tokens - u.cached_tokens,
                     "output_tokens", u.completion_tokens, "cache_read_input_tokens",
                     u.cached_tokens, "cache_creation_input_tokens", 0);
}

static json_t *message_obj(srv_gen *g, json_t *content) {
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:n, s:n}", "id", g->id, "type", "message", "role",
                     "assistant", "model", g->env.model_name, "content", content, "stop_reason",
                     "stop_sequence");
}

static void close_block(srv_gen *g, gen_branch *b) {
    if (!b->blk) return;
    if (b->blk == GEV_REASONING + 1)
        sse_json(g, "content_block_delta",
                 json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index",
                           b->blk_index, "delta", "type", "signature_delta", "signature", ""));
    sse_json(g, "content_block_stop",
             json_pack("{s:s, s:i}", "type", "content_block_stop", "index", b->blk_index));
    b->blk_index++;
    b->blk = 0;
}

static void msg_event(srv_gen *g, int bi, const gev *ev) {
    gen_branch *b = &g->b[bi];
    if (bi != 0 || ev->kind == GEV_TOOL_END) return;
    int want = ev->kind == GEV_TOOL_ARGS ? GEV_TOOL_START + 1 : (int)ev->kind + 1;
    if (b->blk != want || ev->kind == GEV_TOOL_START) {
        close_block(g, b);
        b->blk = want;
        json_t *cb = ev->kind == GEV_REASONING ? json_pack("{s:s, s:s, s:s}", "type", "thinking",
                                                           "thinking", "", "signature", "")
                     : ev->kind == GEV_TEXT    ? json_pack("{s:s, s:s}", "type", "text", "text", "")
                                            : json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use",
                                                        "id", ev->id, "name", ev->name, "input");
        sse_json(g, "content_block_start",
                 json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", b->blk_index,
                           "content_block", cb));
        if (ev->kind == GEV_TOOL_START) return;
    }
    json_t *d = ev->kind == GEV_REASONING ? json_pack("{s:s, s:o}", "type", "thinking_delta",
                                                      "thinking", srv_jstr(ev->text, ev->len))
                : ev->kind == GEV_TEXT    ? json_pack("{s:s, s:o}", "type", "text_delta", "text",
                                                      srv_jstr(ev->text, ev->len))
                                          : json_pack("{s:s, s:o}", "type", "input_json_delta",
                                                      "partial_json", srv_jstr(ev->text, ev->len));
    sse_json(g, "content_block_delta",
             json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index", b->blk_index,
                       "delta", d));
}

static void msg_begin(srv_gen *g) {
    json_t *m = message_obj(g, json_array());
    json_object_set_new(m, "usage",
                        json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", g->prompt_tokens,
                                  "output_tokens", 0, "cache_read_input_tokens", 0,
                                  "cache_creation_input_tokens", 0));
    sse_json(g, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", m));
}

static void msg_end(srv_gen *g) {
    gen_branch *b = &g->b[0];
    close_block(g, b);
    if (b->finish == FIN_ERROR)
        sse_json(g, "error",
                 json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", "api_error",
                           "message", b->error ? b->error : "generation failed"));
    sse_json(g, "message_delta",
             json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta", "stop_reason",
                       msg_stop_reason(b), "stop_sequence", stop_seq(g, b), "usage", usage(g)));
    sse_json(g, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static json_t *msg_body(srv_gen *g) {
    gen_branch *b = &g->b[0];
    json_t *content = json_array();
    if (b->reasoning.n)
        json_array_append_new(content,
                              json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                        srv_jstr(b->reasoning.p, b->reasoning.n), "signature", ""));
    if (b->text.n)
        json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text",
                                                 srv_jstr(b->text.p, b->text.n)));
    for (int t = 0; t < b->n_tools; t++)
        json_array_append_new(content, json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id",
                                                 b->tools[t].id, "name", b->tools[t].name, "input",
                                                 srv_tool_args_json(&b->tools[t])));
    json_t *m = message_obj(g, content);
    json_object_set_new(m, "stop_reason", json_string(msg_stop_reason(b)));
    json_object_set_new(m, "stop_sequence", stop_seq(g, b));
    json_object_set_new(m, "usage", usage(g));
    return m;
}

const srv_api srv_api_messages = {.path = "/v1/messages",
                                  .name = "messages",
                                  .proto = SRV_MESSAGES,
                                  .parse = msg_parse,
                                  .begin = msg_begin,
                                  .event = msg_event,
                                  .end = msg_end,
                                  .body = msg_body};

/* POST /v1/messages/count_tokens: the prompt's tokens as the Messages
 * request would render them ({"input_tokens": N}); nothing runs. */
static json_t *count_answer(const srv_req *r, const tok_ids *ids, const tokenizer *tok,
                            int context) {
    (void)r;
    (void)tok, (void)context;
    return json_pack("{s:I}", "input_tokens", (json_int_t)ids->n);
}

const srv_api srv_api_count_tokens = {.path = "/v1/messages/count_tokens",
                                      .name = "count_tokens",
                                      .proto = SRV_MESSAGES,
                                      .parse = count_parse,
                                      .answer = count_answer};
