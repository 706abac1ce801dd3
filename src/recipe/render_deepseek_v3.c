/* render_deepseek_v3.c — the DeepSeek V3 prompt, exactly as the chat_template
 * in DeepSeek V3's tokenizer_config.json renders it (checked against
 * @huggingface/jinja by tests/conformance/render).
 *
 *   <bos>{all system contents joined by "\n\n"}
 *   <｜User｜>{user}
 *   <｜Assistant｜>{assistant}<｜end▁of▁sentence｜>
 *   <｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}
 *   ```json\n{arguments}\n```<｜tool▁call▁end｜>  ...
 *   <｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{tool}<｜tool▁output▁end｜>
 *   \n<｜tool▁output▁begin｜>...<｜tool▁outputs▁end｜>{assistant}<｜end▁of▁sentence｜>
 *
 * The template's quirks are reproduced on purpose, because they are what the
 * model saw: tool calls are rendered only for an assistant message whose
 * content is null; "first tool call" and "first tool output" are tracked
 * across the whole conversation, not per message (so only the very first call
 * opens <｜tool▁calls▁begin｜>, and every later call closes the block with
 * <｜tool▁calls▁end｜><｜end▁of▁sentence｜>); a single call is never closed;
 * tools definitions, reasoning and thinking are not rendered; after tool
 * outputs the next assistant text follows <｜tool▁outputs▁end｜> directly and
 * no generation prompt is added. No global state. */
#include "recipe/render_internal.h"

#include <stdlib.h>
#include <string.h>

#define BOS       "<｜begin▁of▁sentence｜>"
#define EOS       "<｜end▁of▁sentence｜>"
#define USER      "<｜User｜>"
#define ASSISTANT "<｜Assistant｜>"
#define CALLS_BEG "<｜tool▁calls▁begin｜>"
#define CALLS_END "<｜tool▁calls▁end｜>"
#define CALL_BEG  "<｜tool▁call▁begin｜>"
#define CALL_END  "<｜tool▁call▁end｜>"
#define SEP       "<｜tool▁sep｜>"
#define OUTS_BEG  "<｜tool▁outputs▁begin｜>"
#define OUTS_END  "<｜tool▁outputs▁end｜>"
#define OUT_BEG   "<｜tool▁output▁begin｜>"
#define OUT_END   "<｜tool▁output▁end｜>"

static const render_marker markers[] = {
    {BOS, false},       {EOS, false},       {USER, false},     {ASSISTANT, false},
    {CALLS_BEG, false}, {CALLS_END, false}, {CALL_BEG, false}, {CALL_END, false},
    {SEP, false},       {OUTS_BEG, false},  {OUTS_END, false}, {OUT_BEG, false},
    {OUT_END, false},   {NULL, false},
};

#define FMT "deepseek-v3"

static void tool_call(render_segs *o, const conv_tool_call *tc) {
    rs_lit(o, markers, "function" SEP);
    rs_textz(o, tc->name);
    rs_textz(o, "\n```json\n");
    rs_textz(o, tc->arguments);
    rs_lit(o, markers, "\n```" CALL_END);
}

int render_deepseek_v3(const conversation *c, render_segs *o, di_err *err) {
    bool is_first = false, is_tool = false, is_output_first = true, first_sp = true;
    rs_lit(o, markers, BOS);
    for (size_t i = 0; i < c->n_msgs; i++) {
        const conv_message *m = &c->msgs[i];
        if (m->role != CONV_SYSTEM) continue;
        if (!first_sp) rs_textz(o, "\n\n");
        first_sp = false;
        if (rs_content(o, m, i, markers, NULL, FMT, err)) return -1;
    }
    for (size_t i = 0; i < c->n_msgs; i++) {
        const conv_message *m = &c->msgs[i];
        switch (m->role) {
        case CONV_SYSTEM:
            break;
        case CONV_USER:
            is_tool = false;
            rs_lit(o, markers, USER);
            if (rs_content(o, m, i, markers, NULL, FMT, err)) return -1;
            break;
        case CONV_ASSISTANT:
            if (!m->has_content) {
                is_tool = false;
                for (size_t j = 0; j < m->n_tool_calls; j++) {
                    if (!is_first) {
                        rs_lit(o, markers, ASSISTANT CALLS_BEG CALL_BEG);
                        tool_call(o, &m->tool_calls[j]);
                        is_first = true;
                    } else {
                        rs_lit(o, markers, "\n" CALL_BEG);
                        tool_call(o, &m->tool_calls[j]);
                        rs_lit(o, markers, CALLS_END EOS);
                    }
                }
                break;
            }
            rs_lit(o, markers, is_tool ? OUTS_END : ASSISTANT);
            is_tool = false;
            if (rs_content(o, m, i, markers, NULL, FMT, err)) return -1;
            rs_lit(o, markers, EOS);
            break;
        case CONV_TOOL:
            is_tool = true;
            rs_lit(o, markers, is_output_first ? OUTS_BEG OUT_BEG : "\n" OUT_BEG);
            is_output_first = false;
            if (rs_content(o, m, i, markers, NULL, FMT, err)) return -1;
            rs_lit(o, markers, OUT_END);
            break;
        }
    }
    if (is_tool) rs_lit(o, markers, OUTS_END);
    if (c->add_generation_prompt && !is_tool) rs_lit(o, markers, ASSISTANT);
    return 0;
}
