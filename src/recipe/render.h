/* render.h — conversation -> prompt, per model family, as a list of segments
 * tagged CONTROL or TEXT, then -> token ids.
 *
 * CONTROL segments are template markers (e.g. "<|im_start|>") emitted by id
 * through tok_control_id; TEXT segments hold everything else — template
 * literal text and all user/tool/document content — and are encoded with
 * tok_encode_text as untrusted text. No content can therefore become a
 * control token, whatever it spells. Consecutive TEXT is merged into one
 * segment, so ids match tokenizing the rendered string with the special
 * tokens split out first (what Hugging Face does for benign content).
 *
 * A "soft" CONTROL segment is a marker that some tokenizers of the family
 * have as an added token and others do not (e.g. "<think>"): render_to_ids
 * emits it by id when the tokenizer has it and as text otherwise. Renderer
 * literals are trusted, so this never lets content through as control. */
#ifndef DI_RENDER_H
#define DI_RENDER_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"
#include "recipe/conversation.h"
#include "recipe/tokenizer.h"

typedef enum {
    RENDER_DEEPSEEK_V3, /* the DeepSeek V3 chat template */
    RENDER_DEEPSEEK_V4, /* thinking + DSML tool calls; see render_deepseek_v4.c */
    RENDER_CHATML,      /* the Qwen3 chat template */
    RENDER_LLAMA3,      /* the Llama 3 chat template */
} render_format;

typedef enum { RENDER_TEXT, RENDER_CONTROL } render_kind;

typedef struct render_seg {
    render_kind kind;
    bool soft; /* CONTROL only: fall back to text if the tokenizer lacks it */
    char *s;   /* NUL-terminated */
    size_t len;
} render_seg;

typedef struct render_segs {
    render_seg *v;
    size_t n, cap;
} render_segs;

/* "deepseek-v3", "deepseek-v4", "chatml", "llama3" <-> render_format. */
int render_format_parse(const char *name, render_format *out);
const char *render_format_name(render_format f);
/* Guesses the format from a model directory's tokenizer_config.json (its
 * chat_template and special tokens). Error if the file is missing or no
 * format matches. */
int render_format_guess(const char *model_dir, render_format *out, di_err *err);

/* Renders c into out (appended). Errors name the message (e.g. "messages[2]:
 * llama3 has no image token"). With c->continue_final the prompt ends where
 * the last message's last text part does, as Hugging Face's
 * continue_final_message cuts it: rendered without a generation prompt, cut
 * after the last occurrence of its last text part (one with more than
 * whitespace) stripped of surrounding whitespace (its trailing whitespace
 * kept where the template kept it and the text has no leading whitespace); a
 * last message of whitespace alone is left out and the generation prompt
 * added. */
int render_conversation(render_format f, const conversation *c, render_segs *out, di_err *err);
void render_segs_free(render_segs *s);

/* The prompt as one string (malloc'd, NUL-terminated; *len set if non-NULL). */
char *render_to_string(const render_segs *s, size_t *len);
/* Appends the prompt's ids: CONTROL by tok_control_id (error naming the
 * marker if a non-soft one is missing), TEXT by tok_encode_text. */
int render_to_ids(const tokenizer *t, const render_segs *s, tok_ids *out, di_err *err);

/* Fill-in-the-middle (render_fim.c): appends BOS (where the tokenizer has
 * one) and the prefix and suffix around the model family's infilling
 * markers (DeepSeek, Qwen-Coder, StarCoder, Codestral), the texts as
 * untrusted text; the model continues with the middle. Error if the
 * tokenizer has no family's markers. */
bool render_fim_supported(const tokenizer *t);
int render_fim(const tokenizer *t, const char *prefix, size_t plen, const char *suffix, size_t slen,
               tok_ids *out, di_err *err);

#endif
