/* render.c — the renderer front: format names and guessing, dispatch to the
 * per-format renderers (render_<format>.c), the segment list, and segments ->
 * string / ids.
 *
 * Segments are the one place where "control" and "text" meet: rs_text is the
 * only way content enters a prompt and it always lands in a TEXT segment;
 * CONTROL segments are made only from marker strings written in the
 * renderers. render_to_ids keeps that split when it tokenizes. No global
 * state. */
#include "recipe/render_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const format_names[] = {
    [RENDER_DEEPSEEK_V3] = "deepseek-v3",
    [RENDER_DEEPSEEK_V4] = "deepseek-v4",
    [RENDER_CHATML] = "chatml",
    [RENDER_LLAMA3] = "llama3",
};

int render_format_parse(const char *name, render_format *out) {
    for (size_t i = 0; i < sizeof format_names / sizeof format_names[0]; i++)
        if (!strcmp(name, format_names[i])) {
            *out = (render_format)i;
            return 0;
        }
    return -1;
}

const char *render_format_name(render_format f) {
    return (size_t)f < sizeof format_names / sizeof format_names[0] ? format_names[f] : "?";
}

/* A special-token field of tokenizer_config.json: a string or {"content": ...}. */
static const char *token_field(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : "";
}

/* The format whose markers `text` (a chat template, or the added tokens'
 * contents) spells, or whose BOS/EOS these are; -1 if none. */
static int guess_from(const char *text, const char *bos, const char *eos, render_format *out) {
    if (strstr(text, "｜DSML｜"))
        *out = RENDER_DEEPSEEK_V4;
    else if (strstr(text, "<｜User｜>") || strstr(bos, "begin▁of▁sentence"))
        *out = RENDER_DEEPSEEK_V3;
    else if (strstr(text, "<|im_start|>") || !strcmp(eos, "<|im_end|>"))
        *out = RENDER_CHATML;
    else if (strstr(text, "<|start_header_id|>") || !strcmp(bos, "<|begin_of_text|>"))
        *out = RENDER_LLAMA3;
    else
        return -1;
    return 0;
}

/* tokenizer_config.json: its chat_template (a string, or a list of
 * {"name", "template"}: all of them) and special tokens. */
static int guess_from_config(json_t *cfg, render_format *out) {
    di_buf tpl = {0};
    json_t *ct = json_object_get(cfg, "chat_template");
    if (json_is_string(ct)) di_buf_adds(&tpl, json_string_value(ct));
    size_t i;
    json_t *e;
    if (json_is_array(ct)) json_array_foreach(ct, i, e) {
            const char *s = json_string_value(json_object_get(e, "template"));
            if (s) di_buf_adds(&tpl, s);
        }
    di_buf_adds(&tpl, "");
    int rc = guess_from(tpl.p, token_field(cfg, "bos_token"), token_field(cfg, "eos_token"), out);
    di_buf_free(&tpl);
    return rc;
}

/* tokenizer.json: the contents of its added tokens. */
static int guess_from_tokenizer(json_t *tj, render_format *out) {
    di_buf toks = {0};
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(tj, "added_tokens"), i, e) {
        const char *s = json_string_value(json_object_get(e, "content"));
        if (s) di_buf_adds(&toks, s);
    }
    di_buf_adds(&toks, "");
    int rc = guess_from(toks.p, "", "", out);
    di_buf_free(&toks);
    return rc;
}

int render_format_guess(const char *model_dir, render_format *out, di_err *err) {
    char cpath[4096], tpath[4096];
    snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", model_dir);
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", model_dir);
    json_error_t jerr;
    json_t *cfg = json_load_file(cpath, JSON_DECODE_INT_AS_REAL, &jerr);
    int rc = cfg ? guess_from_config(cfg, out) : -1;
    json_decref(cfg);
    if (!rc) return 0;
    json_t *tj = json_load_file(tpath, JSON_DECODE_INT_AS_REAL, &jerr);
    rc = tj ? guess_from_tokenizer(tj, out) : -1;
    json_decref(tj);
    if (!rc) return 0;
    return di_errf(err,
                   "%s: cannot tell the prompt format from tokenizer_config.json or "
                   "tokenizer.json; pass --format",
                   model_dir);
}

static int render_format_of(render_format f, const conversation *c, render_segs *out, di_err *err) {
    switch (f) {
    case RENDER_DEEPSEEK_V3:
        return render_deepseek_v3(c, out, err);
    case RENDER_DEEPSEEK_V4:
        return render_deepseek_v4(c, out, err);
    case RENDER_CHATML:
        return render_chatml(c, out, err);
    case RENDER_LLAMA3:
        return render_llama3(c, out, err);
    }
    return di_errf(err, "render: unknown format %d", (int)f);
}

/* c->continue_final: see render.h. Only the TEXT segments are searched, so
 * a text that a closing marker happens to spell is not cut inside it. */
static int render_continued(render_format f, const conversation *c, render_segs *out, di_err *err) {
    const conv_message *last = c->n_msgs ? &c->msgs[c->n_msgs - 1] : NULL;
    if (!last || last->role != CONV_ASSISTANT || last->n_tool_calls)
        return di_errf(err, "continue_final_message: the last message must be the assistant's, "
                            "without tool calls");
    /* the last text part with more than whitespace */
    const char *s = "", *t = s;
    size_t n = 0, m = 0;
    for (size_t i = last->n_parts; i-- > 0 && !m;) {
        if (last->parts[i].kind != CONV_PART_TEXT) continue;
        s = t = last->parts[i].text, n = m = last->parts[i].len;
        rstr_strip_ws(&t, &m); /* Python's str.strip(), as Hugging Face's */
    }
    conversation cc = *c;
    cc.continue_final = false;
    if (!m && conv_message_has_image(last))
        return di_errf(err, "continue_final_message: the last message has no text to continue");
    if (!m) { /* nothing to continue: the assistant's turn opened */
        cc.n_msgs--;
        cc.add_generation_prompt = true;
        return render_format_of(f, &cc, out, err);
    }
    cc.add_generation_prompt = false;
    size_t first = out->n;
    if (render_format_of(f, &cc, out, err)) return -1;
    char *needle = di_malloc(m + 1);
    memcpy(needle, t, m);
    needle[m] = 0;
    for (size_t i = out->n; i-- > first;) {
        render_seg *g = &out->v[i];
        const char *hit = g->kind == RENDER_TEXT ? rstr_rfind(g->s, g->len, needle) : NULL;
        if (!hit) continue;
        size_t at = (size_t)(hit - g->s), keep = m;
        if (t == s && at + n <= g->len && !memcmp(hit, s, n)) keep = n; /* its spaces kept */
        g->len = at + keep;
        g->s[g->len] = 0;
        for (size_t k = i + 1; k < out->n; k++) free(out->v[k].s);
        out->n = i + 1;
        free(needle);
        return 0;
    }
    free(needle);
    return di_errf(err,
                   "continue_final_message: the %s template leaves out the last message's text",
                   render_format_name(f));
}

int render_conversation(render_format f, const conversation *c, render_segs *out, di_err *err) {
    return c->continue_final ? render_continued(f, c, out, err) : render_format_of(f, c, out, err);
}

void render_segs_free(render_segs *s) {
    for (size_t i = 0; i < s->n; i++) free(s->v[i].s);
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

static render_seg *push_seg(render_segs *o, render_kind kind, const char *s, size_t len) {
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 16;
        o->v = di_realloc(o->v, o->cap * sizeof *o->v);
    }
    render_seg *g = &o->v[o->n++];
    g->kind = kind;
    g->soft = false;
    size_t cap = 16;
    while (cap < len + 1) cap *= 2;
    g->s = di_malloc(cap);
    memcpy(g->s, s, len);
    g->s[len] = 0;
    g->len = len;
    return g;
}

void rs_text(render_segs *o, const char *s, size_t len) {
    if (!len) return;
    render_seg *last = o->n ? &o->v[o->n - 1] : NULL;
    if (!last || last->kind != RENDER_TEXT) {
        push_seg(o, RENDER_TEXT, s, len);
        return;
    }
    /* Capacity is the next power of two of the length, so it needs no field. */
    size_t cap = 16, need = last->len + len + 1;
    while (cap < last->len + 1) cap *= 2;
    if (need > cap) {
        while (cap < need) cap *= 2;
        last->s = di_realloc(last->s, cap);
    }
    memcpy(last->s + last->len, s, len);
    last->len += len;
    last->s[last->len] = 0;
}

void rs_textz(render_segs *o, const char *s) {
    rs_text(o, s, strlen(s));
}

void rs_control(render_segs *o, const char *marker, bool soft) {
    push_seg(o, RENDER_CONTROL, marker, strlen(marker))->soft = soft;
}

void rs_lit(render_segs *o, const render_marker *markers, const char *lit) {
    while (*lit) {
        const char *best = NULL;
        const render_marker *bm = NULL;
        for (const render_marker *m = markers; m && m->s; m++) {
            const char *p = strstr(lit, m->s);
            if (p && (!best || p < best || (p == best && strlen(m->s) > strlen(bm->s))))
                best = p, bm = m;
        }
        if (!best) {
            rs_textz(o, lit);
            return;
        }
        rs_text(o, lit, (size_t)(best - lit));
        rs_control(o, bm->s, bm->soft);
        lit = best + strlen(bm->s);
    }
}

int rs_content(render_segs *o, const conv_message *m, size_t idx, const render_marker *markers,
               const char *image_lit, const char *fmt, di_err *err) {
    for (size_t i = 0; i < m->n_parts; i++) {
        const conv_part *p = &m->parts[i];
        if (p->kind == CONV_PART_TEXT)
            rs_text(o, p->text, p->len);
        else if (image_lit)
            rs_lit(o, markers, image_lit);
        else
            return di_errf(err, "messages[%zu]: format %s has no image token", idx, fmt);
    }
    return 0;
}

char *render_to_string(const render_segs *s, size_t *len) {
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++) n += s->v[i].len;
    char *out = di_malloc(n + 1), *w = out;
    for (size_t i = 0; i < s->n; i++) {
        memcpy(w, s->v[i].s, s->v[i].len);
        w += s->v[i].len;
    }
    *w = 0;
    if (len) *len = n;
    return out;
}

/* Text runs are accumulated across soft markers the tokenizer lacks, so
 * they are encoded exactly as the same text in one piece would be. */
int render_to_ids(const tokenizer *t, const render_segs *s, tok_ids *out, di_err *err) {
    di_buf run = {0};
    int rc = 0;
    for (size_t i = 0; i < s->n && !rc; i++) {
        const render_seg *g = &s->v[i];
        int id = g->kind == RENDER_CONTROL ? tok_control_id(t, g->s) : -1;
        if (g->kind == RENDER_TEXT || (id < 0 && g->soft)) {
            di_buf_add(&run, g->s, g->len);
            continue;
        }
        if (id < 0) {
            rc = di_errf(err, "render: the tokenizer has no control token \"%s\"", g->s);
            break;
        }
        if (run.n) rc = tok_encode_text(t, run.p, run.n, out, err);
        run.n = 0;
        if (!rc) tok_ids_push(out, id);
    }
    if (!rc && run.n) rc = tok_encode_text(t, run.p, run.n, out, err);
    di_buf_free(&run);
    return rc;
}
