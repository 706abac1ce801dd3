/* render_chatml.c — the ChatML prompt as Qwen3's chat_template renders it
 * (tokenizer_config.json of Qwen3; checked against @huggingface/jinja by
 * tests/conformance/render):
 *
 *   <|im_start|>system\n{system}<|im_end|>\n        (with tools: the system text,
 *                                                  "# Tools" and one tojson line per tool)
 *   <|im_start|>user\n{user}<|im_end|>\n
 *   <|im_start|>assistant\n[<think>\n{reasoning}\n</think>\n\n]{content}
 *       [\n<tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>]...<|im_end|>\n
 *   <|im_start|>user\n<tool_response>\n{tool}\n</tool_response>...<|im_end|>\n
 *   <|im_start|>assistant\n[<think>\n\n</think>\n\n if thinking is off]
 *
 * Reasoning is shown only for assistant turns after the last real user query
 * (a user message that is not a wrapped <tool_response>), and for those only
 * when it is non-empty or the turn is the conversation's last; without
 * reasoning_content it is taken from a "</think>" inside the content, as the
 * template does. Trims follow Python's str.strip(chars) — the template's
 * meaning under transformers — where @huggingface/jinja ignores the argument
 * and trims all whitespace (the two agree unless the text has spaces/tabs
 * next to those newlines). Images use Qwen-VL's
 * <|vision_start|><|image_pad|><|vision_end|>. No global state. */
#include "recipe/render_internal.h"

#include <stdlib.h>
#include <string.h>

static const render_marker markers[] = {
    {"<|im_start|>", false},   {"<|im_end|>", false},      {"<|vision_start|>", false},
    {"<|image_pad|>", false},  {"<|vision_end|>", false},  {"<think>", true},
    {"</think>", true},        {"<tool_call>", true},      {"</tool_call>", true},
    {"<tool_response>", true}, {"</tool_response>", true}, {NULL, false},
};

#define FMT   "chatml"
#define IMAGE "<|vision_start|><|image_pad|><|vision_end|>"

static const char tools_head[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char tools_tail[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

/* {"type": "function", "function": {...}} as `tool | tojson` prints it. */
static int tool_json(di_buf *b, const conv_tool *t, di_err *err) {
    di_buf_adds(b, "{\"type\": \"function\", \"function\": {\"name\": ");
    rjson_string(b, t->name, strlen(t->name));
    if (t->description) {
        di_buf_adds(b, ", \"description\": ");
        rjson_string(b, t->description, strlen(t->description));
    }
    if (t->parameters) {
        di_buf_adds(b, ", \"parameters\": ");
        if (rjson_dump(b, t->parameters, err)) return -1;
    }
    di_buf_adds(b, "}}");
    return 0;
}

static int system_block(const conversation *c, render_segs *o, di_err *err) {
    const conv_message *m0 = c->n_msgs ? &c->msgs[0] : NULL;
    bool sys0 = m0 && m0->role == CONV_SYSTEM;
    if (!c->n_tools) {
        if (!sys0) return 0;
        rs_lit(o, markers, "<|im_start|>system\n");
        if (rs_content(o, m0, 0, markers, IMAGE, FMT, err)) return -1;
        rs_lit(o, markers, "<|im_end|>\n");
        return 0;
    }
    rs_lit(o, markers, "<|im_start|>system\n");
    if (sys0) {
        if (rs_content(o, m0, 0, markers, IMAGE, FMT, err)) return -1;
        rs_textz(o, "\n\n");
    }
    rs_lit(o, markers, tools_head);
    for (size_t i = 0; i < c->n_tools; i++) {
        di_buf b = {0};
        di_buf_adds(&b, "\n");
        int rc = tool_json(&b, &c->tools[i], err);
        if (!rc) rs_text(o, b.p, b.n);
        di_buf_free(&b);
        if (rc) return di_errf(err, "tools[%zu].function.parameters: not valid JSON", i);
    }
    rs_lit(o, markers, tools_tail);
    return 0;
}

/* Index of the last user message that is a real query, not a wrapped tool
 * response; n-1 when there is none (the template's default). */
static size_t last_query_index(const conversation *c) {
    for (size_t i = c->n_msgs; i-- > 0;) {
        const conv_message *m = &c->msgs[i];
        if (m->role != CONV_USER) continue;
        size_t n;
        char *t = conv_message_text(m, &n);
        const char *open = "<tool_response>", *close = "</tool_response>";
        bool wrapped = n >= strlen(open) && !memcmp(t, open, strlen(open)) && n >= strlen(close) &&
                       !memcmp(t + n - strlen(close), close, strlen(close));
        free(t);
        if (!wrapped) return i;
    }
    return c->n_msgs ? c->n_msgs - 1 : 0;
}

static int assistant(const conversation *c, size_t i, size_t lqi, render_segs *o, di_err *err) {
    const conv_message *m = &c->msgs[i];
    if (conv_message_has_image(m))
        return di_errf(err, "messages[%zu]: images in assistant content are not supported", i);
    size_t n;
    char *text = conv_message_text(m, &n);
    const char *content = text, *reason = "";
    size_t clen = n, rlen = 0;
    const char *end_tag = rstr_find(text, n, "</think>");
    if (m->reasoning) {
        reason = m->reasoning;
        rlen = strlen(reason);
    } else if (end_tag) {
        const char *last_end = rstr_rfind(text, n, "</think>");
        content = last_end + 8;
        clen = (size_t)(text + n - content);
        rstr_strip_chars(&content, &clen, "\n", true, false);
        reason = text;
        rlen = (size_t)(end_tag - text);
        rstr_strip_chars(&reason, &rlen, "\n", false, true);
        const char *open = rstr_rfind(reason, rlen, "<think>");
        if (open) rlen -= (size_t)(open + 7 - reason), reason = open + 7;
        rstr_strip_chars(&reason, &rlen, "\n", true, false);
    }
    bool is_last = i + 1 == c->n_msgs;
    rs_lit(o, markers, "<|im_start|>assistant\n");
    if (i > lqi && (is_last || rlen)) {
        rstr_strip_chars(&reason, &rlen, "\n", true, true);
        rs_lit(o, markers, "<think>\n");
        rs_text(o, reason, rlen);
        rs_lit(o, markers, "\n</think>\n\n");
        const char *cs = content;
        size_t cl = clen;
        rstr_strip_chars(&cs, &cl, "\n", true, false);
        rs_text(o, cs, cl);
    } else {
        rs_text(o, content, clen);
    }
    for (size_t j = 0; j < m->n_tool_calls; j++) {
        const conv_tool_call *tc = &m->tool_calls[j];
        if (j > 0 || clen) rs_textz(o, "\n");
        rs_lit(o, markers, "<tool_call>\n{\"name\": \"");
        rs_textz(o, tc->name);
        rs_textz(o, "\", \"arguments\": ");
        if (tc->arguments_object) { /* `arguments | tojson` */
            di_buf b = {0};
            int rc = rjson_dump(&b, tc->arguments, err);
            if (!rc) rs_text(o, b.p, b.n);
            di_buf_free(&b);
            if (rc) return free(text), -1;
        } else {
            rs_textz(o, tc->arguments);
        }
        rs_lit(o, markers, "}\n</tool_call>");
    }
    rs_lit(o, markers, "<|im_end|>\n");
    free(text);
    return 0;
}

int render_chatml(const conversation *c, render_segs *o, di_err *err) {
    if (system_block(c, o, err)) return -1;
    size_t lqi = last_query_index(c);
    for (size_t i = 0; i < c->n_msgs; i++) {
        const conv_message *m = &c->msgs[i];
        if (m->role == CONV_USER || (m->role == CONV_SYSTEM && i > 0)) {
            rs_lit(o, markers,
                   m->role == CONV_USER ? "<|im_start|>user\n" : "<|im_start|>system\n");
            if (rs_content(o, m, i, markers, IMAGE, FMT, err)) return -1;
            rs_lit(o, markers, "<|im_end|>\n");
        } else if (m->role == CONV_ASSISTANT) {
            if (assistant(c, i, lqi, o, err)) return -1;
        } else if (m->role == CONV_TOOL) {
            if (i == 0 || c->msgs[i - 1].role != CONV_TOOL) rs_lit(o, markers, "<|im_start|>user");
            rs_lit(o, markers, "\n<tool_response>\n");
            if (rs_content(o, m, i, markers, IMAGE, FMT, err)) return -1;
            rs_lit(o, markers, "\n</tool_response>");
            if (i + 1 == c->n_msgs || c->msgs[i + 1].role != CONV_TOOL)
                rs_lit(o, markers, "<|im_end|>\n");
        }
    }
    if (c->add_generation_prompt) {
        rs_lit(o, markers, "<|im_start|>assistant\n");
        if (c->thinking == CONV_THINK_OFF) rs_lit(o, markers, "<think>\n\n</think>\n\n");
    }
    return 0;
}
