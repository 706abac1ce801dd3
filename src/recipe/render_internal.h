/* render_internal.h — what the per-format renderers (render_*.c) share and
 * nobody else sees: segment building, template literals split at the
 * format's markers, the JSON writer that matches the templates' `tojson`, and
 * the string trims the templates use. */
#ifndef DI_RENDER_INTERNAL_H
#define DI_RENDER_INTERNAL_H

#include "recipe/render.h"

/* A format's control markers; tables end with {NULL}. */
typedef struct render_marker {
    const char *s;
    bool soft;
} render_marker;

/* Untrusted or literal text, merged into a trailing TEXT segment. */
void rs_text(render_segs *o, const char *s, size_t len);
void rs_textz(render_segs *o, const char *s);
void rs_control(render_segs *o, const char *marker, bool soft);
/* Template literal: every occurrence of a marker in `lit` becomes CONTROL,
 * the rest TEXT. Only for trusted strings written in the renderers. */
void rs_lit(render_segs *o, const render_marker *markers, const char *lit);

/* A message's content: text parts as TEXT, image parts as the literal
 * `image_lit` split at `markers` (an error naming the message if image_lit is
 * NULL: the format has no image token). */
int rs_content(render_segs *o, const conv_message *m, size_t idx, const render_marker *markers,
               const char *image_lit, const char *fmt, di_err *err);

/* Writes the JSON text `json` re-serialised the way the chat templates'
 * `tojson` does (@huggingface/jinja, = Python json.dumps(ensure_ascii=False)):
 * ", " and ": " separators, key order kept, non-ASCII raw, numbers as
 * JavaScript prints them (1.0 -> 1). */
int rjson_dump(di_buf *b, const char *json, di_err *err);
/* The same for an already parsed jansson value. */
struct json_t;
void rjson_value(di_buf *b, struct json_t *v);
/* One string as a JSON string literal (JSON.stringify). */
void rjson_string(di_buf *b, const char *s, size_t len);

/* [*s, *s+*len) trimmed in place: characters in `chars` (Python
 * str.strip(chars)) at the left and/or right. */
void rstr_strip_chars(const char **s, size_t *len, const char *chars, bool left, bool right);
/* Python str.strip() with no argument: Unicode whitespace both sides (what
 * Jinja's `trim` filter does under Python). */
void rstr_strip_ws(const char **s, size_t *len);
/* First/last occurrence of needle in [s, s+len), or NULL. */
const char *rstr_find(const char *s, size_t len, const char *needle);
const char *rstr_rfind(const char *s, size_t len, const char *needle);

int render_deepseek_v3(const conversation *c, render_segs *o, di_err *err);
int render_deepseek_v4(const conversation *c, render_segs *o, di_err *err);
int render_chatml(const conversation *c, render_segs *o, di_err *err);
int render_llama3(const conversation *c, render_segs *o, di_err *err);

#endif
