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
 * A call's body is collected whole until its closing marker and then read:
 * the name, and the arguments' JSON text passed through verbatim (numbers
 * keep their spelling) inside the events' "{" and "}", so each call is one
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
/* Validation only: integers beyond int64 are valid JSON. */
#define JSON_FLAGS (JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL)

static const outp_marker hermes_close = LIT(HERMES_CLOSE);
static const outp_marker v3_call_end = LIT(V3_CALL_END);

void outp_jcalls_openers(outp_parser *p) {
    if (p->cfg.syntax == OUTP_SYNTAX_HERMES) {
        outp_add_marker(p, HERMES_OPEN);
    } else {
        outp_add_marker(p, V3_CALLS_BEG);
        outp_add_marker(p, V3_CALL_BEG);
    }
}

void outp_jcalls_open(outp_parser *p, const char *opener) {
    p->pval.n = 0;
    p->st = !strcmp(opener, V3_CALLS_BEG) ? OUTP_S_JBLOCK : OUTP_S_JCALL;
}

void outp_jcalls_start_forced(outp_parser *p, const char *name) {
    p->pval.n = 0;
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

static void trim(const char **s, size_t *n) {
    while (*n && outp_is_ws(**s)) (*s)++, (*n)--;
    while (*n && outp_is_ws((*s)[*n - 1])) (*n)--;
}

/* The end of the JSON value starting at b[i] (valid JSON: checked before). */
static size_t value_end(const char *b, size_t n, size_t i) {
    int depth = 0;
    bool str = false, esc = false;
    for (; i < n; i++) {
        char c = b[i];
        if (str) {
            if (esc)
                esc = false;
            else if (c == '\\')
                esc = true;
            else if (c == '"') {
                str = false;
                if (!depth) return i + 1;
            }
        } else if (c == '"')
            str = true;
        else if (c == '{' || c == '[')
            depth++;
        else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
        } else if (!depth && (c == ',' || outp_is_ws(c)))
            return i;
    }
    return n;
}

/* The raw text of member `key` of the object b[0..n) (valid JSON, an
 * object), or NULL. Keys are compared as written, without escapes. */
static const char *member(const char *b, size_t n, const char *key, size_t *len) {
    size_t i = 1, kl = strlen(key);
    for (;;) {
        while (i < n && (outp_is_ws(b[i]) || b[i] == ',')) i++;
        if (i >= n || b[i] != '"') return NULL;
        size_t k0 = i + 1, k1 = value_end(b, n, i) - 1;
        i = k1 + 1;
        while (i < n && (outp_is_ws(b[i]) || b[i] == ':')) i++;
        size_t v1 = value_end(b, n, i);
        if (k1 - k0 == kl && !memcmp(b + k0, key, kl)) {
            *len = v1 - i;
            return b + i;
        }
        i = v1;
    }
}

/* The call out of its name and the arguments' object text: TOOL_START,
 * the object's inside, TOOL_END. */
static bool emit_call(outp_parser *p, const char *name, const char *args, size_t n) {
    json_error_t je;
    json_t *a = json_loadb(args, n, JSON_FLAGS, &je);
    bool ok = json_is_object(a);
    json_decref(a);
    if (!ok) return false;
    outp_start_call(p, name, strlen(name));
    outp_emit(p, OUTP_EV_TOOL_ARGS, args + 1, n - 2);
    outp_end_call(p, true);
    return true;
}

/* {"name": N, "arguments": {...}} ("parameters" too; arguments that are a
 * string holding an object taken as that object). */
static bool read_hermes(outp_parser *p, const char *b, size_t n) {
    trim(&b, &n);
    json_error_t je;
    json_t *j = json_loadb(b, n, JSON_FLAGS, &je);
    const char *name = json_string_value(json_object_get(j, "name"));
    bool ok = false;
    if (json_is_object(j) && name && name[0]) {
        const json_t *a = json_object_get(j, "arguments");
        const char *key = "arguments";
        if (!a) a = json_object_get(j, "parameters"), key = "parameters";
        size_t al = 0;
        const char *raw = a ? member(b, n, key, &al) : NULL;
        if (!a)
            ok = emit_call(p, name, "{}", 2);
        else if (json_is_string(a)) {
            const char *s = json_string_value(a);
            size_t sl = json_string_length(a);
            trim(&s, &sl);
            ok = emit_call(p, name, s, sl);
        } else if (raw)
            ok = emit_call(p, name, raw, al);
    }
    json_decref(j);
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
    trim(&nm, &nn);
    trim(&a, &an);
    if (an >= 3 && !memcmp(a, "```", 3)) { /* ```json ... ``` */
        const char *eol = memchr(a, '\n', an);
        if (!eol) return false;
        an -= (size_t)(eol - a);
        a = eol;
        if (an >= 3 && !memcmp(a + an - 3, "```", 3)) an -= 3;
        trim(&a, &an);
    }
    if (!nn || memchr(nm, 0, nn)) return false;
    char *name = di_malloc(nn + 1);
    memcpy(name, nm, nn);
    name[nn] = 0;
    bool ok = an >= 2 && emit_call(p, name, a, an);
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

bool outp_step_jcall(outp_parser *p, bool final) {
    const char *b = outp_cur(p);
    size_t n = outp_avail(p), at, w;
    bool hermes = p->cfg.syntax == OUTP_SYNTAX_HERMES;
    const outp_marker *close = hermes ? &hermes_close : &v3_call_end;
    outp_scan_result r = outp_scan(b, n, close, 1, final, &at, &w);
    di_buf_add(&p->pval, b, at);
    outp_consume(p, at);
    if (r != OUTP_SCAN_FOUND) return at > 0;
    outp_consume(p, close->len);
    bool ok = hermes ? read_hermes(p, p->pval.p, p->pval.n) : read_v3(p, p->pval.p, p->pval.n);
    if (!ok) {
        unread(p, hermes ? "not {\"name\": ..., \"arguments\": {...}}"
                         : "not TYPE<｜tool▁sep｜>NAME and a JSON object");
        outp_emit_answer(p, close->s, close->len);
    }
    p->pval.n = 0;
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
        p->pval.n = 0;
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
    p->pval.n = 0;
    p->st = OUTP_S_ANSWER;
}
