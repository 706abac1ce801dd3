/* conversation.h — the one internal conversation format every protocol
 * (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages) is converted
 * into, and every prompt renderer reads.
 *
 * A conversation is a list of messages (system, user, assistant, tool), each
 * with content made of text parts and image placeholders; tool definitions
 * (name, description, JSON Schema parameters); assistant tool calls (id, name,
 * arguments as JSON text); assistant reasoning; thinking on/off/unset with an
 * optional reasoning effort; and the generation-prompt flag.
 *
 * All strings are owned by the conversation, NUL-terminated UTF-8 (valid
 * UTF-8 is checked on parse; NUL bytes inside strings are rejected). Build
 * one with conv_parse_json (the OpenAI-chat-like JSON shape below) or by hand
 * with conv_add_* and free it with conv_free.
 *
 * JSON shape:
 *   {"messages": [{"role": "system"|"user"|"assistant"|"tool",
 *                  "content": string | null | [{"type":"text","text":...} | {"type":"image"}],
 *                  "tool_calls": [{"id":..., "type":"function",
 *                                  "function": {"name":..., "arguments": string | object}}],
 *                  "tool_call_id": ..., "reasoning_content": string | null}],
 *    "tools": [{"type":"function", "function": {"name", "description", "parameters"}}],
 *    "add_generation_prompt": bool (default true), "continue_final_message": bool
 *    (default false), "thinking": bool (default unset),
 *    "reasoning_effort": string} */
#ifndef DI_CONVERSATION_H
#define DI_CONVERSATION_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"

typedef enum { CONV_SYSTEM, CONV_USER, CONV_ASSISTANT, CONV_TOOL } conv_role;
typedef enum { CONV_PART_TEXT, CONV_PART_IMAGE } conv_part_kind;
/* Thinking as the request asked for it: unset leaves the template's default. */
typedef enum { CONV_THINK_UNSET = 0, CONV_THINK_OFF, CONV_THINK_ON } conv_thinking;

typedef struct conv_part {
    conv_part_kind kind;
    char *text; /* CONV_PART_TEXT only, else NULL */
    size_t len;
} conv_part;

typedef struct conv_tool_call {
    char *id; /* may be "" */
    char *name;
    /* JSON text as the client sent it; an object is kept as compact JSON text
     * with arguments_object set (templates print it through tojson then). */
    char *arguments;
    bool arguments_object;
} conv_tool_call;

typedef struct conv_message {
    conv_role role;
    bool has_content; /* false: content was null or absent */
    conv_part *parts;
    size_t n_parts;
    conv_tool_call *tool_calls;
    size_t n_tool_calls;
    char *tool_call_id; /* tool messages; NULL if absent */
    char *reasoning;    /* assistant reasoning_content; NULL if absent/null */
} conv_message;

typedef struct conv_tool {
    char *name;
    char *description; /* NULL if absent */
    char *parameters;  /* JSON Schema as compact JSON text (key order kept); NULL if absent */
    bool strict;       /* OpenAI's / Anthropic's strict: calls held to the schema */
} conv_tool;

typedef struct conversation {
    conv_message *msgs;
    size_t n_msgs;
    conv_tool *tools;
    size_t n_tools;
    bool add_generation_prompt;
    /* The last message, an assistant's, is continued (a prefill): rendered
     * up to the end of its text, no generation prompt (render_conversation) */
    bool continue_final;
    conv_thinking thinking;
    char *reasoning_effort; /* NULL if absent */
} conversation;

/* Parses the JSON shape above; NULL with err naming the offending field
 * (e.g. "messages[3].tool_calls[0].function.name: expected a string"). */
conversation *conv_parse_json(const char *json, size_t len, di_err *err);
/* An empty conversation (add_generation_prompt true, thinking unset). */
conversation *conv_new(void);
void conv_free(conversation *c);

/* Builders for callers that convert other protocols. Strings are copied. */
conv_message *conv_add_message(conversation *c, conv_role role);
void conv_message_add_text(conv_message *m, const char *text, size_t len);
void conv_message_add_image(conv_message *m);
void conv_message_add_tool_call(conv_message *m, const char *id, const char *name,
                                const char *arguments);
void conv_add_tool(conversation *c, const char *name, const char *description,
                   const char *parameters);

/* The message's text parts joined (images left out); malloc'd, *len set. */
char *conv_message_text(const conv_message *m, size_t *len);
bool conv_message_has_image(const conv_message *m);
const char *conv_role_name(conv_role r);
/* Parses an API role name ("system" and "developer" are both CONV_SYSTEM,
 * "user", "assistant", "tool"); -1 for anything else. */
int conv_role_parse(const char *name, conv_role *out);

#endif
