/* outp_dsml.c — the output parser's DSML tool-block states: tags between
 * invokes and parameters, parameter values, and the incremental JSON text of
 * each call's arguments.
 *
 * Between values the markup is read a whole tag at a time (a tag is at most
 * TAG_MAX bytes, so a runaway one cannot grow the buffer); a byte that cannot
 * begin a DSML tag is malformed markup at once. Values stream: string="true"
 * text is JSON-escaped and emitted as soon as it cannot be the start of the
 * closing tag; string="false" text is collected and checked to be JSON
 * (outp_json_value: any number, as the JSON grammar has it) when its closing
 * tag arrives, then emitted with its key in one delta, so
 * the arguments stay valid JSON whatever the model wrote. Space after
 * `｜DSML｜` is optional in every tag here (V4.1 writes one, V4 does not). */
#include "recipe/outp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DSML     "｜DSML｜" /* U+FF5C on both sides */
#define DSML_LEN (sizeof DSML - 1)
#define TAG_MAX  1024

static const outp_marker param_close[] = {
    {"</" DSML "parameter>", sizeof("</" DSML "parameter>") - 1},
    {"</" DSML " parameter>", sizeof("</" DSML " parameter>") - 1},
};

/* ---- tags ------------------------------------------------------------------- */

typedef struct tag {
    bool close;
    const char *name, *attrs;
    size_t name_len, attrs_len;
} tag;

/* b starts with a complete DSML tag (1, its length in *len), may still
 * (0: need more), or cannot (-1). */
static int read_tag(const char *b, size_t n, size_t *len) {
    if (n == 0) return 0;
    if (b[0] != '<') return -1;
    size_t i = 1;
    if (i < n && b[i] == '/') i++;
    for (size_t k = 0; k < DSML_LEN; k++, i++) {
        if (i >= n) return 0;
        if (b[i] != DSML[k]) return -1;
    }
    bool quoted = false;
    for (; i < n && i < TAG_MAX; i++) {
        if (b[i] == '"')
            quoted = !quoted;
        else if (b[i] == '>' && !quoted) {
            *len = i + 1;
            return 1;
        }
    }
    return i >= TAG_MAX ? -1 : 0;
}

static void parse_tag(const char *b, size_t len, tag *t) {
    size_t i = 1;
    t->close = b[i] == '/';
    i += t->close + DSML_LEN;
    while (i < len && b[i] == ' ') i++;
    t->name = b + i;
    while (i < len && ((b[i] >= 'a' && b[i] <= 'z') || b[i] == '_')) i++;
    t->name_len = (size_t)(b + i - t->name);
    t->attrs = b + i;
    t->attrs_len = len - 1 - i;
}

static bool tag_is(const tag *t, const char *name) {
    return t->name_len == strlen(name) && memcmp(t->name, name, t->name_len) == 0;
}

/* The value of attribute `key` (1), absent (0) or malformed attributes (-1). */
static int tag_attr(const tag *t, const char *key, const char **v, size_t *vlen) {
    const char *s = t->attrs, *e = t->attrs + t->attrs_len;
    size_t kl = strlen(key);
    int found = 0;
    for (;;) {
        while (s < e && outp_is_ws(*s)) s++;
        if (s >= e) return found;
        const char *k = s;
        while (s < e && *s != '=' && !outp_is_ws(*s)) s++;
        size_t klen = (size_t)(s - k);
        if (klen == 0 || s + 1 >= e || s[0] != '=' || s[1] != '"') return -1;
        s += 2;
        const char *val = s;
        while (s < e && *s != '"') s++;
        if (s >= e) return -1;
        if (!found && klen == kl && memcmp(k, key, kl) == 0) {
            *v = val;
            *vlen = (size_t)(s - val);
            found = 1;
        }
        s++;
    }
}

/* ---- arguments ---------------------------------------------------------------- */

static void args(outp_parser *p, const char *s, size_t n) {
    outp_emit(p, OUTP_EV_TOOL_ARGS, s, n);
}

/* Appends s as the inside of a JSON string. */
static void json_escape(di_buf *o, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        di_buf_add(o, s + run, i - run);
        run = i + 1;
        char e[6] = {'\\', 0};
        size_t el = 2;
        switch (c) {
        case '"':
            e[1] = '"';
            break;
        case '\\':
            e[1] = '\\';
            break;
        case '\n':
            e[1] = 'n';
            break;
        case '\r':
            e[1] = 'r';
            break;
        case '\t':
            e[1] = 't';
            break;
        case '\b':
            e[1] = 'b';
            break;
        case '\f':
            e[1] = 'f';
            break;
        default:
            memcpy(e + 1, "u00", 3);
            e[4] = hex[c >> 4];
            e[5] = hex[c & 15];
            el = 6;
        }
        di_buf_add(o, e, el);
    }
    di_buf_add(o, s + run, n - run);
}

static void args_escaped(outp_parser *p, const char *s, size_t n) {
    if (!n) return;
    p->scratch.n = 0;
    json_escape(&p->scratch, s, n);
    args(p, p->scratch.p, p->scratch.n);
}

/* `"key": ` (preceded by ", " after the first parameter) into o. */
static void key_prefix(outp_parser *p, di_buf *o, const char *key, size_t klen) {
    if (!p->first_param) di_buf_add(o, ", ", 2);
    p->first_param = false;
    di_buf_add(o, "\"", 1);
    json_escape(o, key, klen);
    di_buf_add(o, "\": ", 3);
}

void outp_start_call(outp_parser *p, const char *name, size_t nlen) {
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    char id[5 + 24 + 1] = "call_";
    for (int i = 0; i < 24; i++) {
        uint64_t z = (p->id_state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        id[5 + i] = alnum[(z ^ (z >> 31)) % 62];
    }
    id[29] = 0;
    free(p->cur_name);
    p->cur_name = di_malloc(nlen + 1);
    memcpy(p->cur_name, name, nlen);
    p->cur_name[nlen] = 0;
    p->cur_call = p->n_calls++;
    p->first_param = true;
    outp_event ev = {
        .kind = OUTP_EV_TOOL_START, .index = p->cur_call, .id = id, .name = p->cur_name};
    p->cb(p->ctx, &ev);
    args(p, "{", 1);
}

void outp_end_call(outp_parser *p, bool complete) {
    args(p, "}", 1);
    outp_event ev = {.kind = OUTP_EV_TOOL_END, .index = p->cur_call, .complete = complete};
    p->cb(p->ctx, &ev);
    p->cur_call = -1;
}

/* ---- malformed markup ----------------------------------------------------------- */

/* Reports what was found where markup was expected, closes an open call and
 * hands the undecided bytes back to the answer state. `found` names the tag
 * or holds the first character, so the message depends only on the bytes. */
static bool malformed(outp_parser *p, const char *expected) {
    const char *b = outp_cur(p);
    size_t n = outp_avail(p), len;
    char found[64];
    if (read_tag(b, n, &len) == 1) {
        tag t;
        parse_tag(b, len, &t);
        snprintf(found, sizeof found, "the tag <%s%.*s>", t.close ? "/" : "",
                 (int)(t.name_len < 32 ? t.name_len : 32), t.name);
    } else {
        size_t cl = 1;
        while (cl < n && ((unsigned char)b[cl] & 0xC0) == 0x80) cl++;
        if (b[0] == '\n' || b[0] == '"' || (unsigned char)b[0] < 0x20) cl = 0;
        snprintf(found, sizeof found, "\"%.*s\"", (int)cl, b);
    }
    if (p->cur_call >= 0) {
        outp_emit_error(p, "tool call %d (%s): malformed DSML markup: expected %s, found %s",
                        p->cur_call, p->cur_name, expected, found);
        outp_end_call(p, false);
    } else {
        outp_emit_error(p, "malformed DSML tool-call block: expected %s, found %s", expected,
                        found);
    }
    p->st = OUTP_S_ANSWER;
    p->lead_trim = false;
    return true;
}

/* Skips whitespace, then reads one tag: 1 (tag in *t, length *len), 0 (need
 * more; *prog set if whitespace was consumed), -1 (not a DSML tag). */
static int next_tag(outp_parser *p, tag *t, size_t *len, bool *prog) {
    const char *b = outp_cur(p);
    size_t n = outp_avail(p), k = 0;
    while (k < n && outp_is_ws(b[k])) k++;
    outp_consume(p, k);
    *prog = k > 0;
    int r = read_tag(b + k, n - k, len);
    if (r == 1) parse_tag(b + k, *len, t);
    return r;
}

/* ---- states ---------------------------------------------------------------------- */

bool outp_step_block(outp_parser *p, bool final) {
    tag t;
    size_t len;
    bool prog;
    int r = next_tag(p, &t, &len, &prog);
    static const char expect[] = "<｜DSML｜invoke name=\"...\"> or the end of the block";
    if (r == 0) return prog;
    if (r < 0) return malformed(p, expect);
    if (!t.close && tag_is(&t, "invoke")) {
        const char *name;
        size_t nl;
        if (tag_attr(&t, "name", &name, &nl) != 1 || nl == 0)
            return malformed(p, "<｜DSML｜invoke> with a name attribute");
        outp_start_call(p, name, nl);
        outp_consume(p, len);
        p->st = OUTP_S_INVOKE;
        return true;
    }
    if (t.close &&
        (tag_is(&t, "tool_calls") || tag_is(&t, "calls") || tag_is(&t, "function_calls"))) {
        outp_consume(p, len);
        p->st = OUTP_S_ANSWER;
        p->lead_trim = true;
        return true;
    }
    return malformed(p, expect);
}

bool outp_step_invoke(outp_parser *p, bool final) {
    tag t;
    size_t len;
    bool prog;
    int r = next_tag(p, &t, &len, &prog);
    static const char expect[] = "<｜DSML｜parameter name=\"...\"> or </｜DSML｜invoke>";
    if (r == 0) return prog;
    if (r < 0) return malformed(p, expect);
    if (!t.close && tag_is(&t, "parameter")) {
        const char *key, *str;
        size_t kl, sl;
        if (tag_attr(&t, "name", &key, &kl) != 1 || kl == 0)
            return malformed(p, "<｜DSML｜parameter> with a name attribute");
        int has_str = tag_attr(&t, "string", &str, &sl);
        if (has_str < 0) return malformed(p, "<｜DSML｜parameter> with well-formed attributes");
        bool is_json = has_str == 1 && sl == 5 && memcmp(str, "false", 5) == 0;
        di_buf o = {0};
        key_prefix(p, &o, key, kl);
        if (is_json) {
            free(p->param_key);
            p->param_key = o.p; /* emitted with the value once it is validated */
            p->pval.n = 0;
            p->st = OUTP_S_PARAM_JSON;
        } else {
            di_buf_add(&o, "\"", 1);
            args(p, o.p, o.n);
            di_buf_free(&o);
            p->st = OUTP_S_PARAM_STR;
        }
        outp_consume(p, len);
        return true;
    }
    if (t.close && tag_is(&t, "invoke")) {
        outp_end_call(p, true);
        outp_consume(p, len);
        p->st = OUTP_S_BLOCK;
        return true;
    }
    return malformed(p, expect);
}

/* The closing tag is held back even at the end of output: a truncated
 * `</｜DSML｜para` is markup, not part of the value. */
bool outp_step_param_str(outp_parser *p, bool final) {
    const char *b = outp_cur(p);
    size_t n = outp_avail(p), at, w;
    outp_scan_result r = outp_scan(b, n, param_close, 2, false, &at, &w);
    args_escaped(p, b, at);
    if (r == OUTP_SCAN_FOUND) {
        args(p, "\"", 1);
        outp_consume(p, at + param_close[w].len);
        p->st = OUTP_S_INVOKE;
        return true;
    }
    outp_consume(p, at);
    return at > 0;
}

bool outp_step_param_json(outp_parser *p, bool final) {
    const char *b = outp_cur(p);
    size_t n = outp_avail(p), at, w;
    outp_scan_result r = outp_scan(b, n, param_close, 2, false, &at, &w);
    di_buf_add(&p->pval, b, at);
    if (r != OUTP_SCAN_FOUND) {
        outp_consume(p, at);
        return at > 0;
    }
    outp_consume(p, at + param_close[w].len);
    const char *v = p->pval.p ? p->pval.p : "";
    size_t vn = p->pval.n;
    di_buf o = {0};
    di_buf_add(&o, p->param_key, strlen(p->param_key));
    if (outp_trim(&v, &vn) && outp_json_value(v, vn)) {
        di_buf_add(&o, v, vn);
    } else { /* not JSON: keep what the model wrote, as a string */
        di_buf_add(&o, "\"", 1);
        json_escape(&o, p->pval.p ? p->pval.p : "", p->pval.n);
        di_buf_add(&o, "\"", 1);
    }
    args(p, o.p, o.n);
    di_buf_free(&o);
    p->pval.n = 0;
    p->st = OUTP_S_INVOKE;
    return true;
}

void outp_dsml_start_forced(outp_parser *p) {
    char *name = p->forced_invoke;
    p->forced_invoke = NULL;
    outp_start_call(p, name, strlen(name));
    free(name);
    p->st = OUTP_S_INVOKE;
}

void outp_dsml_truncated(outp_parser *p) {
    outp_consume(p, outp_avail(p)); /* a partial tag: markup, dropped */
    switch (p->st) {
    case OUTP_S_BLOCK:
        outp_emit_error(p, "output ended inside a DSML tool-call block");
        break;
    case OUTP_S_INVOKE:
        outp_emit_error(p, "tool call %d (%s): output ended inside the call", p->cur_call,
                        p->cur_name);
        outp_end_call(p, false);
        break;
    case OUTP_S_PARAM_STR:
        outp_emit_error(p, "tool call %d (%s): output ended inside a string parameter", p->cur_call,
                        p->cur_name);
        args(p, "\"", 1);
        outp_end_call(p, false);
        break;
    case OUTP_S_PARAM_JSON:
        outp_emit_error(p, "tool call %d (%s): output ended inside a JSON parameter (left out)",
                        p->cur_call, p->cur_name);
        outp_end_call(p, false);
        break;
    default:
        break;
    }
    p->st = OUTP_S_ANSWER;
}
