/* outp_jcalls.c — the output parser's states for tool calls whose body is
 * JSON (or holds it), as models other than DeepSeek V4 write them:
 *
 *   Hermes (Qwen 2.5 / Qwen 3, the ChatML renderer's tools):
 *     <tool_call>\n{"name": "N", "arguments": {...}}\n</tool_call>
 *     one block per call, blocks one after another;
 *   DeepSeek V3:
 *     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n
 *     ```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
 *     (the template opens the block only for a conversation's first call, so
 *     a lone <｜tool▁call▁begin｜> opens a call too, and a block may end
 *     without its closer).
 *
 * A call's body is collected whole until its closing marker (one outside
 * the body's JSON strings: an argument may spell the marker) and then read:
 * the name, and the arguments' JSON text passed through verbatim (numbers
 * keep their spelling; checked for JSON syntax here, with no limit on a
 * number's size) inside the events' "{" and "}", so each call is one
 * TOOL_START, one TOOL_ARGS and one TOOL_END. A body that does not read (not
 * JSON, no name, arguments that are not an object) is an OUTP_EV_ERROR and
 * the call's whole text goes out as answer text, markers included: nothing
 * the model wrote is lost. So does a call the output ends inside. */
#include "recipe/outp_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define HERMES_OPEN  "<tool_call>"
#define HERMES_CLOSE "</tool_call>"
#define V3_CALLS_BEG "<｜tool▁calls▁begin｜>"
#define V3_CALLS_END "<｜tool▁calls▁end｜>"
#define V3_CALL_BEG  "<｜tool▁call▁begin｜>"
#define V3_CALL_END  "<｜tool▁call▁end｜>"
#define V3_SEP       "<｜tool▁sep｜>"
#define LIT(s)                                                                                     \
    { s, sizeof s - 1 }
#define MAX_DEPTH 128

static const outp_marker hermes_close = LIT(HERMES_CLOSE);
static const outp_marker v3_call_end = LIT(V3_CALL_END);

/* A call's body: none yet, outside any JSON string. */
static void body_reset(outp_parser *p) {
    p->pval.n = 0;
    p->cstr = p->cesc = false;
}

void outp_jcalls_openers(outp_parser *p) {
    if (p->cfg.syntax == OUTP_SYNTAX_HERMES) {
        outp_add_marker(p, HERMES_OPEN);
    } else {
        outp_add_marker(p, V3_CALLS_BEG);
        outp_add_marker(p, V3_CALL_BEG);
    }
}

void outp_jcalls_open(outp_parser *p, const char *opener) {
    body_reset(p);
    p->st = !strcmp(opener, V3_CALLS_BEG) ? OUTP_S_JBLOCK : OUTP_S_JCALL;
}

void outp_jcalls_start_forced(outp_parser *p, const char *name) {
    body_reset(p);
    p->st = p->cfg.syntax == OUTP_SYNTAX_HERMES || name ? OUTP_S_JCALL : OUTP_S_JBLOCK;
    /* the body the prompt began, as the server's rendering spells it */
    if (p->cfg.syntax == OUTP_SYNTAX_HERMES) {
        di_buf_adds(&p->pval, "\n");
        if (name) {
            di_buf_adds(&p->pval, "{\"name\": \"");
            di_buf_adds(&p->pval, name);
            di_buf_adds(&p->pval, "\", \"arguments\": ");
        }
    } else if (name) {
        di_buf_adds(&p->pval, "function" V3_SEP);
        di_buf_adds(&p->pval, name);
        di_buf_adds(&p->pval, "\n```json\n");
    }
}

/* ---- reading a body ------------------------------------------------------------ */

static const char *skip_ws(const char *p, const char *e) {
    while (p < e && outp_is_ws(*p)) p++;
    return p;
}

static bool digits(const char **p, const char *e) {
    const char *s = *p;
    while (*p < e && **p >= '0' && **p <= '9') (*p)++;
    return *p > s;
}

/* One JSON value at *p (RFC 8259's syntax; the text is valid UTF-8
 * already), *p moved past it. */
static bool value(const char **p, const char *e, int depth) {
    const char *s = *p;
    if (s >= e || depth > MAX_DEPTH) return false;
    if (*s == '"') {
        for (s++; s < e && *s != '"'; s++) {
            if ((unsigned char)*s < 0x20) return false;
            if (*s != '\\') continue;
            if (++s >= e) return false;
            if (*s == 'u') {
                for (int i = 0; i < 4; i++)
                    if (++s >= e || !strchr("0123456789abcdefABCDEF", *s) || !*s) return false;
            } else if (!strchr("\"\\/bfnrt", *s) || !*s)
                return false;
        }
        if (s >= e) return false;
        *p = s + 1;
        return true;
    }
    if (*s == '{' || *s == '[') {
        bool obj = *s == '{';
        char close = obj ? '}' : ']';
        s = skip_ws(s + 1, e);
        if (s < e && *s == close) return *p = s + 1, true;
        for (;;) {
            if (obj) {
                if (s >= e || *s != '"' || !value(&s, e, depth + 1)) return false;
                s = skip_ws(s, e);
                if (s >= e || *s != ':') return false;
                s = skip_ws(s + 1, e);
            }
            if (!value(&s, e, depth + 1)) return false;
            s = skip_ws(s, e);
            if (s < e && *s == close) return *p = s + 1, true;
            if (s >= e || *s != ',') return false;
            s = skip_ws(s + 1, e);
        }
    }
    static const char *const lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(lits[i]);
        if ((size_t)(e - s) >= l && !memcmp(s, lits[i], l)) return *p = s + l, true;
    }
    if (*s == '-') s++;
    if (s < e && *s == '0')
        s++;
    else if (!digits(&s, e) || s[-1] == '-')
        return false;
    if (s < e && *s == '.' && (s++, !digits(&s, e))) return false;
    if (s < e && (*s == 'e' || *s == 'E')) {
        s++;
        if (s < e && (*s == '+' || *s == '-')) s++;
        if (!digits(&s, e)) return false;
    }
    *p = s;
    return true;
}

bool outp_json_value(const char *b, size_t n) {
    const char *p = skip_ws(b, b + n), *e = b + n;
    return p < e && value(&p, e, 0) && skip_ws(p, e) == e;
}

/* b[0..n) is one JSON object (whitespace around it allowed). */
static bool is_object(const char *b, size_t n) {
    const char *p = skip_ws(b, b + n);
    return p < b + n && *p == '{' && outp_json_value(b, n);
}

/* The raw text of member `key` of the object b[0..n) (valid: checked
 * before), or NULL. Keys are compared as written, without escapes. */
static const char *member(const char *b, size_t n, const char *key, size_t *len) {
    const char *p = skip_ws(b, b + n) + 1, *e = b + n;
    size_t kl = strlen(key);
    for (;;) {
        p = skip_ws(p, e);
        if (p >= e || *p != '"') return NULL;
        const char *k = p + 1;
        value(&p, e, 0);
        bool match = (size_t)(p - 1 - k) == kl && !memcmp(k, key, kl);
        p = skip_ws(skip_ws(p, e) + 1, e); /* past ':' */
        const char *v = p;
        value(&p, e, 0);
        if (match) return *len = (size_t)(p - v), v;
        p = skip_ws(p, e);
        if (p >= e || *p != ',') return NULL;
        p++;
    }
}

/* A JSON string literal's value (malloc'd), or NULL if raw is not one. */
static char *string_of(const char *raw, size_t n) {
    if (!raw || !n || raw[0] != '"') return NULL;
    json_error_t je;
    json_t *j = json_loadb(raw, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    char *s = json_is_string(j) && !memchr(json_string_value(j), 0, json_string_length(j))
                  ? di_strdup(json_string_value(j))
                  : NULL;
    json_decref(j);
    return s;
}

/* The call out of its name and the arguments' object text: TOOL_START,
 * the object's inside, TOOL_END. */
static bool emit_call(outp_parser *p, const char *name, const char *args, size_t n) {
    outp_trim(&args, &n);
    if (!name || !name[0] || !is_object(args, n)) return false;
    outp_start_call(p, name, strlen(name));
    outp_emit(p, OUTP_EV_TOOL_ARGS, args + 1, n - 2);
    outp_end_call(p, true);
    return true;
}

/* {"name": N, "arguments": {...}} ("parameters" too; arguments that are a
 * string holding an object taken as that object; none: {}). */
static bool read_hermes(outp_parser *p, const char *b, size_t n) {
    if (!is_object(b, n)) return false;
    size_t nl = 0, al = 0;
    const char *raw = member(b, n, "name", &nl);
    char *name = string_of(raw, nl);
    const char *a = member(b, n, "arguments", &al);
    if (!a) a = member(b, n, "parameters", &al);
    char *str = a ? string_of(a, al) : NULL;
    bool ok = !a    ? emit_call(p, name, "{}", 2)
              : str ? emit_call(p, name, str, strlen(str))
                    : emit_call(p, name, a, al);
    free(name);
    free(str);
    return ok;
}

/* TYPE<｜tool▁sep｜>N\n```json\n{...}\n``` (the fence optional). */
static bool read_v3(outp_parser *p, const char *b, size_t n) {
    const char *sep = memmem(b, n, V3_SEP, sizeof V3_SEP - 1);
    if (!sep) return false;
    const char *s = sep + sizeof V3_SEP - 1, *e = b + n;
    const char *nl = memchr(s, '\n', (size_t)(e - s));
    if (!nl) return false;
    size_t nn = (size_t)(nl - s), an = (size_t)(e - nl);
    const char *nm = s, *a = nl;
    outp_trim(&nm, &nn);
    outp_trim(&a, &an);
    if (an >= 3 && !memcmp(a, "```", 3)) { /* ```json ... ``` */
        const char *eol = memchr(a, '\n', an);
        if (!eol) return false;
        an -= (size_t)(eol - a);
        a = eol;
        if (an >= 3 && !memcmp(a + an - 3, "```", 3)) an -= 3;
    }
    if (!nn || memchr(nm, 0, nn)) return false;
    char *name = di_malloc(nn + 1);
    memcpy(name, nm, nn);
    name[nn] = 0;
    bool ok = emit_call(p, name, a, an);
    free(name);
    return ok;
}

/* A body that did not read: an error, and the call's text as answer text. */
static void unread(outp_parser *p, const char *why) {
    bool hermes = p->cfg.syntax == OUTP_SYNTAX_HERMES;
    outp_emit_error(p, "tool call %d: %s", p->n_calls, why);
    outp_emit_answer(p, hermes ? HERMES_OPEN : V3_CALL_BEG,
                     strlen(hermes ? HERMES_OPEN : V3_CALL_BEG));
    outp_emit_answer(p, p->pval.p, p->pval.n);
}

/* ---- states ------------------------------------------------------------------------ */

/* The closing marker is looked for outside the body's JSON strings; the
 * bytes before it (or before a partial one at the end) join the body. */
bool outp_step_jcall(outp_parser *p, bool final) {
    const char *b = outp_cur(p);
    size_t n = outp_avail(p), i = 0;
    bool hermes = p->cfg.syntax == OUTP_SYNTAX_HERMES;
    const outp_marker *close = hermes ? &hermes_close : &v3_call_end;
    bool found = false;
    for (; i < n; i++) {
        char c = b[i];
        if (outp_json_quoted(&p->cstr, &p->cesc, c)) continue;
        if (c != close->s[0]) continue;
        size_t m = n - i < close->len ? n - i : close->len;
        if (memcmp(b + i, close->s, m)) continue;
        if (m == close->len) found = true;
        if (found || !final) break; /* found, or maybe: wait for more */
    }
    di_buf_add(&p->pval, b, i);
    outp_consume(p, i);
    if (!found) return i > 0;
    outp_consume(p, close->len);
    bool ok = hermes ? read_hermes(p, p->pval.p, p->pval.n) : read_v3(p, p->pval.p, p->pval.n);
    if (!ok) {
        unread(p, hermes ? "not {\"name\": ..., \"arguments\": {...}}"
                         : "not TYPE<｜tool▁sep｜>NAME and a JSON object");
        outp_emit_answer(p, close->s, close->len);
    }
    body_reset(p);
    p->st = hermes ? OUTP_S_ANSWER : OUTP_S_JBLOCK;
    p->lead_trim = hermes && ok;
    return true;
}

/* DeepSeek V3, between calls: another call, the block's end, or (the block
 * left open, as the template leaves a lone call) answer text again. */
bool outp_step_jblock(outp_parser *p, bool final) {
    static const outp_marker next[] = {LIT(V3_CALL_BEG), LIT(V3_CALLS_END)};
    const char *b = outp_cur(p);
    size_t n = outp_avail(p), k = 0, at, w;
    while (k < n && outp_is_ws(b[k])) k++;
    if (k == n && !final) return false;
    outp_scan_result r = outp_scan(b + k, n - k, next, 2, final, &at, &w);
    if (r == OUTP_SCAN_HOLD && at == 0) return false;
    if (r == OUTP_SCAN_FOUND && at == 0) {
        outp_consume(p, k + next[w].len);
        body_reset(p);
        p->st = w == 0 ? OUTP_S_JCALL : OUTP_S_ANSWER;
        p->lead_trim = w == 1;
        return true;
    }
    outp_consume(p, k);
    p->st = OUTP_S_ANSWER;
    p->lead_trim = true;
    return true;
}

void outp_jcalls_truncated(outp_parser *p) {
    if (p->st == OUTP_S_JCALL) {
        di_buf_add(&p->pval, outp_cur(p), outp_avail(p));
        outp_consume(p, outp_avail(p));
        unread(p, "output ended inside the call");
    }
    body_reset(p);
    p->st = OUTP_S_ANSWER;
}
