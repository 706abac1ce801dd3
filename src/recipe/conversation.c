/* conversation.c — the internal conversation format: builders, accessors and
 * the parser from the OpenAI-chat-like JSON shape (jansson).
 *
 * The parser is strict about types (a wrong type is an error naming the JSON
 * path) and lenient about unknown keys (ignored), because the API layer feeds
 * it requests from many clients. jansson already rejects invalid UTF-8 and,
 * without JSON_ALLOW_NUL, NUL bytes in strings, so every string here is
 * NUL-terminated valid UTF-8. No global state. */
#include "recipe/conversation.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

const char *conv_role_name(conv_role r) {
    switch (r) {
    case CONV_SYSTEM:
        return "system";
    case CONV_USER:
        return "user";
    case CONV_ASSISTANT:
        return "assistant";
    case CONV_TOOL:
        return "tool";
    }
    return "?";
}

conversation *conv_new(void) {
    conversation *c = di_calloc(1, sizeof *c);
    c->add_generation_prompt = true;
    return c;
}

void conv_free(conversation *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n_msgs; i++) {
        conv_message *m = &c->msgs[i];
        for (size_t j = 0; j < m->n_parts; j++) free(m->parts[j].text);
        free(m->parts);
        for (size_t j = 0; j < m->n_tool_calls; j++) {
            free(m->tool_calls[j].id);
            free(m->tool_calls[j].name);
            free(m->tool_calls[j].arguments);
        }
        free(m->tool_calls);
        free(m->tool_call_id);
        free(m->reasoning);
    }
    free(c->msgs);
    for (size_t i = 0; i < c->n_tools; i++) {
        free(c->tools[i].name);
        free(c->tools[i].description);
        free(c->tools[i].parameters);
    }
    free(c->tools);
    free(c->reasoning_effort);
    free(c);
}

/* Arrays grow one element at a time: conversations are short lists. */
conv_message *conv_add_message(conversation *c, conv_role role) {
    c->msgs = di_realloc(c->msgs, (c->n_msgs + 1) * sizeof *c->msgs);
    conv_message *m = &c->msgs[c->n_msgs++];
    memset(m, 0, sizeof *m);
    m->role = role;
    return m;
}

static conv_part *add_part(conv_message *m, conv_part_kind kind) {
    m->parts = di_realloc(m->parts, (m->n_parts + 1) * sizeof *m->parts);
    conv_part *p = &m->parts[m->n_parts++];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    m->has_content = true;
    return p;
}

void conv_message_add_text(conv_message *m, const char *text, size_t len) {
    conv_part *p = add_part(m, CONV_PART_TEXT);
    p->text = di_malloc(len + 1);
    memcpy(p->text, text, len);
    p->text[len] = 0;
    p->len = len;
}

void conv_message_add_image(conv_message *m) {
    add_part(m, CONV_PART_IMAGE);
}

void conv_message_add_tool_call(conv_message *m, const char *id, const char *name,
                                const char *arguments) {
    m->tool_calls = di_realloc(m->tool_calls, (m->n_tool_calls + 1) * sizeof *m->tool_calls);
    conv_tool_call *tc = &m->tool_calls[m->n_tool_calls++];
    tc->id = di_strdup(id ? id : "");
    tc->name = di_strdup(name);
    tc->arguments = di_strdup(arguments ? arguments : "{}");
    tc->arguments_object = false;
}

void conv_add_tool(conversation *c, const char *name, const char *description,
                   const char *parameters) {
    c->tools = di_realloc(c->tools, (c->n_tools + 1) * sizeof *c->tools);
    conv_tool *t = &c->tools[c->n_tools++];
    t->name = di_strdup(name);
    t->description = description ? di_strdup(description) : NULL;
    t->parameters = parameters ? di_strdup(parameters) : NULL;
    t->strict = false;
}

char *conv_message_text(const conv_message *m, size_t *len) {
    size_t n = 0;
    for (size_t i = 0; i < m->n_parts; i++) n += m->parts[i].len;
    char *s = di_malloc(n + 1), *w = s;
    for (size_t i = 0; i < m->n_parts; i++)
        if (m->parts[i].kind == CONV_PART_TEXT) {
            memcpy(w, m->parts[i].text, m->parts[i].len);
            w += m->parts[i].len;
        }
    *w = 0;
    if (len) *len = (size_t)(w - s);
    return s;
}

bool conv_message_has_image(const conv_message *m) {
    for (size_t i = 0; i < m->n_parts; i++)
        if (m->parts[i].kind == CONV_PART_IMAGE) return true;
    return false;
}

/* ---- JSON parsing ------------------------------------------------------ */

/* Optional string field: 0 and *out NULL when absent or null. */
static int opt_string(json_t *obj, const char *key, const char *path, char **out, di_err *err) {
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return di_errf(err, "%s.%s: expected a string", path, key);
    *out = di_strdup(json_string_value(v));
    return 0;
}

static int parse_content(json_t *content, conv_message *m, const char *path, di_err *err) {
    if (!content || json_is_null(content)) return 0;
    if (json_is_string(content)) {
        conv_message_add_text(m, json_string_value(content), json_string_length(content));
        return 0;
    }
    if (!json_is_array(content))
        return di_errf(err, "%s.content: expected a string, an array of parts or null", path);
    m->has_content = true; /* an empty array is empty content, not null */
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!json_is_object(part) || !type)
            return di_errf(err, "%s.content[%zu]: expected an object with a string \"type\"", path,
                           i);
        if (!strcmp(type, "text")) {
            json_t *t = json_object_get(part, "text");
            if (!json_is_string(t))
                return di_errf(err, "%s.content[%zu].text: expected a string", path, i);
            conv_message_add_text(m, json_string_value(t), json_string_length(t));
        } else if (!strcmp(type, "image") || !strcmp(type, "image_url")) {
            conv_message_add_image(m);
        } else {
            return di_errf(err, "%s.content[%zu].type: unknown part type \"%s\"", path, i, type);
        }
    }
    return 0;
}

static int parse_tool_calls(json_t *calls, conv_message *m, const char *path, di_err *err) {
    if (!calls || json_is_null(calls)) return 0;
    if (!json_is_array(calls)) return di_errf(err, "%s.tool_calls: expected an array", path);
    size_t i;
    json_t *call;
    json_array_foreach(calls, i, call) {
        json_t *fn = json_object_get(call, "function");
        if (!json_is_object(call) || !json_is_object(fn))
            return di_errf(err, "%s.tool_calls[%zu].function: expected an object", path, i);
        json_t *id = json_object_get(call, "id"), *name = json_object_get(fn, "name");
        json_t *args = json_object_get(fn, "arguments");
        if (id && !json_is_null(id) && !json_is_string(id))
            return di_errf(err, "%s.tool_calls[%zu].id: expected a string", path, i);
        if (!json_is_string(name))
            return di_errf(err, "%s.tool_calls[%zu].function.name: expected a string", path, i);
        char *argtext = NULL;
        if (json_is_string(args))
            argtext = di_strdup(json_string_value(args));
        else if (json_is_object(args))
            argtext = json_dumps(args, JSON_COMPACT);
        else if (!args || json_is_null(args))
            argtext = di_strdup("{}");
        else
            return di_errf(
                err, "%s.tool_calls[%zu].function.arguments: expected a JSON string or object",
                path, i);
        conv_message_add_tool_call(m, json_string_value(id), json_string_value(name), argtext);
        m->tool_calls[m->n_tool_calls - 1].arguments_object = json_is_object(args);
        free(argtext);
    }
    return 0;
}

int conv_role_parse(const char *name, conv_role *out) {
    if (!strcmp(name, "system") || !strcmp(name, "developer"))
        *out = CONV_SYSTEM;
    else if (!strcmp(name, "user"))
        *out = CONV_USER;
    else if (!strcmp(name, "assistant"))
        *out = CONV_ASSISTANT;
    else if (!strcmp(name, "tool"))
        *out = CONV_TOOL;
    else
        return -1;
    return 0;
}

static int parse_message(json_t *jm, conversation *c, size_t idx, di_err *err) {
    char path[48];
    snprintf(path, sizeof path, "messages[%zu]", idx);
    if (!json_is_object(jm)) return di_errf(err, "%s: expected an object", path);
    const char *role = json_string_value(json_object_get(jm, "role"));
    if (!role) return di_errf(err, "%s.role: expected a string", path);
    conv_role r;
    if (conv_role_parse(role, &r)) return di_errf(err, "%s.role: unknown role \"%s\"", path, role);
    conv_message *m = conv_add_message(c, r);
    if (parse_content(json_object_get(jm, "content"), m, path, err)) return -1;
    if (parse_tool_calls(json_object_get(jm, "tool_calls"), m, path, err)) return -1;
    if (opt_string(jm, "tool_call_id", path, &m->tool_call_id, err)) return -1;
    if (opt_string(jm, "reasoning_content", path, &m->reasoning, err)) return -1;
    return 0;
}

static int parse_tools(json_t *tools, conversation *c, di_err *err) {
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return di_errf(err, "tools: expected an array");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn)) return di_errf(err, "tools[%zu].function: expected an object", i);
        json_t *name = json_object_get(fn, "name"), *desc = json_object_get(fn, "description");
        json_t *params = json_object_get(fn, "parameters");
        if (!json_is_string(name))
            return di_errf(err, "tools[%zu].function.name: expected a string", i);
        if (desc && !json_is_null(desc) && !json_is_string(desc))
            return di_errf(err, "tools[%zu].function.description: expected a string", i);
        if (params && !json_is_null(params) && !json_is_object(params))
            return di_errf(err, "tools[%zu].function.parameters: expected an object", i);
        char *ptext = params && json_is_object(params) ? json_dumps(params, JSON_COMPACT) : NULL;
        conv_add_tool(c, json_string_value(name), json_string_value(desc), ptext);
        free(ptext);
    }
    return 0;
}

conversation *conv_parse_json(const char *json, size_t len, di_err *err) {
    json_error_t jerr;
    json_t *root = json_loadb(json, len, 0, &jerr);
    if (!root) {
        di_errf(err, "conversation JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                jerr.column);
        return NULL;
    }
    conversation *c = conv_new();
    json_t *msgs = json_object_get(root, "messages");
    json_t *agp = json_object_get(root, "add_generation_prompt");
    json_t *think = json_object_get(root, "thinking");
    size_t i;
    json_t *jm;
    if (!json_is_object(root)) {
        di_errf(err, "conversation JSON: expected an object at the top");
        goto fail;
    }
    if (!json_is_array(msgs)) {
        di_errf(err, "messages: expected an array");
        goto fail;
    }
    json_array_foreach(msgs, i, jm) if (parse_message(jm, c, i, err)) goto fail;
    if (parse_tools(json_object_get(root, "tools"), c, err)) goto fail;
    if (agp && !json_is_null(agp)) {
        if (!json_is_boolean(agp)) {
            di_errf(err, "add_generation_prompt: expected a boolean");
            goto fail;
        }
        c->add_generation_prompt = json_is_true(agp);
    }
    json_t *cont = json_object_get(root, "continue_final_message");
    if (cont && !json_is_null(cont)) {
        if (!json_is_boolean(cont)) {
            di_errf(err, "continue_final_message: expected a boolean");
            goto fail;
        }
        c->continue_final = json_is_true(cont);
    }
    if (think && !json_is_null(think)) {
        if (!json_is_boolean(think)) {
            di_errf(err, "thinking: expected a boolean");
            goto fail;
        }
        c->thinking = json_is_true(think) ? CONV_THINK_ON : CONV_THINK_OFF;
    }
    if (opt_string(root, "reasoning_effort", "conversation", &c->reasoning_effort, err)) goto fail;
    json_decref(root);
    return c;
fail:
    json_decref(root);
    conv_free(c);
    return NULL;
}
