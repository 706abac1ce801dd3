/* render_deepseek_v4.c — the DeepSeek V4-style prompt: V3's turn markers, a
 * thinking switch with <think>…</think>, and DSML tool calls (DESIGN.md §2).
 * No public template defines this format, so this file is its definition:
 *
 *   <｜begin▁of▁sentence｜>{system contents joined by "\n\n"}[\n\n]{TOOLS if any tools}
 *   <｜User｜>{user}<｜Assistant｜>{OPEN}{BODY}<｜end▁of▁sentence｜>
 *   <｜User｜><｜DSML｜tool_results>
 *   <｜DSML｜result tool_call_id="ID">{tool content}</｜DSML｜result>
 *   </｜DSML｜tool_results><｜Assistant｜>{OPEN}...
 *
 * - A turn is opened with <｜Assistant｜>{OPEN} after a user (or tool results)
 *   turn when an assistant message follows, or at the end when
 *   add_generation_prompt is set. An assistant message with no such opener
 *   before it (first message, or after another assistant) opens itself.
 * - OPEN is "<think>" when thinking is on and the turn comes after the last
 *   user message (the current task, including its tool-call rounds); else
 *   "</think>" (thinking off, unset, or an earlier task's turn).
 * - BODY is "{reasoning}</think>" (only when OPEN was "<think>") then the
 *   content, then, if there are tool calls, "\n\n" (when content is not empty)
 *   and one block:
 *       <｜DSML｜tool_calls>
 *       <｜DSML｜invoke name="NAME">
 *       <｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>
 *       </｜DSML｜invoke>
 *       </｜DSML｜tool_calls>
 *   one line per argument, in the arguments object's key order; a string
 *   argument is written raw with string="true", any other value as JSON
 *   (tojson spelling) with string="false". Arguments must be a JSON object.
 * - TOOLS is a "## Tools" section explaining that block, then
 *   <functions>, one {"name", "description", "parameters"} JSON line per
 *   tool, </functions>.
 * - Images are the control token <｜image｜>. reasoning_effort is carried by the
 *   conversation but not rendered (no spelling for it is defined yet).
 *
 * Control markers: BOS, EOS, <｜User｜>, <｜Assistant｜>, <｜image｜>; soft (ids
 * where the tokenizer has them, text otherwise): <think>, </think> and the
 * fixed DSML tags. Tag openers that carry an attribute and every name, key,
 * id and value are TEXT. No global state. */
#include "recipe/render_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define BOS       "<｜begin▁of▁sentence｜>"
#define EOS       "<｜end▁of▁sentence｜>"
#define USER      "<｜User｜>"
#define ASSISTANT "<｜Assistant｜>"
#define DSML      "｜DSML｜"
#define FMT       "deepseek-v4"

static const render_marker markers[] = {
    {BOS, false},
    {EOS, false},
    {USER, false},
    {ASSISTANT, false},
    {"<｜image｜>", false},
    {"<think>", true},
    {"</think>", true},
    {"<" DSML "tool_calls>", true},
    {"</" DSML "tool_calls>", true},
    {"</" DSML "invoke>", true},
    {"</" DSML "parameter>", true},
    {"<" DSML "tool_results>", true},
    {"</" DSML "tool_results>", true},
    {"</" DSML "result>", true},
    {NULL, false},
};

static const char tools_intro[] =
    "## Tools\n\nYou can call the tools below. To call tools, write one block like this in "
    "your reply:\n\n<" DSML "tool_calls>\n<" DSML "invoke name=\"TOOL_NAME\">\n<" DSML
    "parameter name=\"PARAMETER_NAME\" string=\"true|false\">VALUE</" DSML "parameter>\n</" DSML
    "invoke>\n</" DSML "tool_calls>\n\nWrite one invoke per call and one parameter per "
    "argument. Set string=\"true\" when VALUE is a plain string, written as is; set "
    "string=\"false\" when VALUE is JSON (a number, boolean, null, array or object). Tool results "
    "come back in a <" DSML "tool_results> block.\n\n<functions>";

static int tools_section(const conversation *c, render_segs *o, di_err *err) {
    rs_lit(o, markers, tools_intro);
    for (size_t i = 0; i < c->n_tools; i++) {
        const conv_tool *t = &c->tools[i];
        di_buf b = {0};
        di_buf_adds(&b, "\n{\"name\": ");
        rjson_string(&b, t->name, strlen(t->name));
        if (t->description) {
            di_buf_adds(&b, ", \"description\": ");
            rjson_string(&b, t->description, strlen(t->description));
        }
        int rc = 0;
        if (t->parameters) {
            di_buf_adds(&b, ", \"parameters\": ");
            rc = rjson_dump(&b, t->parameters, err);
        }
        di_buf_adds(&b, "}");
        if (!rc) rs_text(o, b.p, b.n);
        di_buf_free(&b);
        if (rc) return di_errf(err, "tools[%zu].function.parameters: not valid JSON", i);
    }
    rs_textz(o, "\n</functions>");
    return 0;
}

static int tool_calls(const conv_message *m, size_t idx, render_segs *o, di_err *err) {
    rs_lit(o, markers, "<" DSML "tool_calls>\n");
    for (size_t j = 0; j < m->n_tool_calls; j++) {
        const conv_tool_call *tc = &m->tool_calls[j];
        json_t *args = json_loads(tc->arguments, JSON_DECODE_ANY, NULL);
        if (!json_is_object(args)) {
            json_decref(args);
            return di_errf(
                err, "messages[%zu].tool_calls[%zu].function.arguments: not a JSON object", idx, j);
        }
        rs_textz(o, "<" DSML "invoke name=\"");
        rs_textz(o, tc->name);
        rs_textz(o, "\">\n");
        const char *key;
        json_t *v;
        json_object_foreach(args, key, v) {
            rs_textz(o, "<" DSML "parameter name=\"");
            rs_textz(o, key);
            rs_textz(o, json_is_string(v) ? "\" string=\"true\">" : "\" string=\"false\">");
            if (json_is_string(v)) {
                rs_text(o, json_string_value(v), json_string_length(v));
            } else {
                di_buf b = {0};
                rjson_value(&b, v);
                rs_text(o, b.p, b.n);
                di_buf_free(&b);
            }
            rs_lit(o, markers, "</" DSML "parameter>\n");
        }
        json_decref(args);
        rs_lit(o, markers, "</" DSML "invoke>\n");
    }
    rs_lit(o, markers, "</" DSML "tool_calls>");
    return 0;
}

/* Whether the assistant turn at index `turn` shows its reasoning: thinking
 * on, and the turn belongs to the current task (after the last user message). */
static bool thinking_turn(const conversation *c, size_t turn, size_t last_user) {
    return c->thinking == CONV_THINK_ON && (last_user == (size_t)-1 || turn > last_user);
}

static void open_turn(const conversation *c, size_t turn, size_t last_user, render_segs *o) {
    rs_lit(o, markers,
           thinking_turn(c, turn, last_user) ? ASSISTANT "<think>" : ASSISTANT "</think>");
}

int render_deepseek_v4(const conversation *c, render_segs *o, di_err *err) {
    size_t n = c->n_msgs, last_user = (size_t)-1;
    for (size_t i = 0; i < n; i++)
        if (c->msgs[i].role == CONV_USER) last_user = i;
    rs_lit(o, markers, BOS);
    bool any_system = false;
    for (size_t i = 0; i < n; i++) {
        if (c->msgs[i].role != CONV_SYSTEM) continue;
        if (any_system) rs_textz(o, "\n\n");
        any_system = true;
        if (rs_content(o, &c->msgs[i], i, markers, "<｜image｜>", FMT, err)) return -1;
    }
    if (c->n_tools) {
        if (any_system) rs_textz(o, "\n\n");
        if (tools_section(c, o, err)) return -1;
    }
    /* `opened`: the prompt ends with an <｜Assistant｜>{OPEN} opener. */
    bool opened = false;
    for (size_t i = 0; i < n; i++) {
        const conv_message *m = &c->msgs[i];
        if (m->role == CONV_SYSTEM) continue; /* rendered at the top */
        if (m->role == CONV_USER) {
            rs_lit(o, markers, USER);
            if (rs_content(o, m, i, markers, "<｜image｜>", FMT, err)) return -1;
        } else if (m->role == CONV_TOOL) {
            if (i == 0 || c->msgs[i - 1].role != CONV_TOOL)
                rs_lit(o, markers, USER "<" DSML "tool_results>");
            rs_textz(o, "\n<" DSML "result tool_call_id=\"");
            rs_textz(o, m->tool_call_id ? m->tool_call_id : "");
            rs_textz(o, "\">");
            if (rs_content(o, m, i, markers, "<｜image｜>", FMT, err)) return -1;
            rs_lit(o, markers, "</" DSML "result>");
            if (i + 1 == n || c->msgs[i + 1].role != CONV_TOOL)
                rs_lit(o, markers, "\n</" DSML "tool_results>");
        } else {
            if (!opened) open_turn(c, i, last_user, o);
            if (thinking_turn(c, i, last_user)) {
                if (m->reasoning) rs_textz(o, m->reasoning);
                rs_lit(o, markers, "</think>");
            }
            if (rs_content(o, m, i, markers, "<｜image｜>", FMT, err)) return -1;
            if (m->n_tool_calls) {
                size_t clen;
                free(conv_message_text(m, &clen));
                if (clen || conv_message_has_image(m)) rs_textz(o, "\n\n");
                if (tool_calls(m, i, o, err)) return -1;
            }
            rs_lit(o, markers, EOS);
            opened = false;
            continue;
        }
        /* After a user or tool-results turn: open the assistant's turn if one follows. */
        opened = i + 1 < n && c->msgs[i + 1].role == CONV_ASSISTANT;
        if (opened) open_turn(c, i + 1, last_user, o);
    }
    if (c->add_generation_prompt && !opened) open_turn(c, n, last_user, o);
    return 0;
}
