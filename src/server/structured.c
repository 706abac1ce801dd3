/* structured.c — vLLM's, SGLang's and llama.cpp's structured-output
 * parameters for chat and completions, beside OpenAI's response_format:
 * guided_json, guided_regex, guided_choice and guided_grammar (vLLM), the
 * same as structured_outputs' json, regex, choice, grammar and
 * json_object (vLLM's newer form), regex and ebnf (SGLang), grammar and json_schema
 * (llama.cpp).
 *
 * A schema goes where response_format's does. A regex or a choice holds the
 * reply, as plain text, to a whole match: the pattern anchored at both
 * ends (json_regex.h's syntax: ECMAScript's, less back-references,
 * look-around and flags), a choice the alternation of its strings as
 * literals; a grammar (GBNF, grammar.h) to a text its root matches.
 * Each is compiled here once so that one the decoder cannot hold is a 400
 * naming the field, not an engine error. At most one constraint a
 * request. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "engine/json_regex.h"
#include "server/srv_internal.h"

#define MAX_CHOICES 1024

/* A pattern matched whole: ^(?:p)$, p without its own ^ and $ (an
 * unescaped one at its ends). */
static char *anchored(const char *p, size_t n) {
    if (n && p[0] == '^') p++, n--;
    if (n && p[n - 1] == '$') {
        size_t bs = 0;
        while (bs + 1 < n && p[n - 2 - bs] == '\\') bs++;
        if (bs % 2 == 0) n--;
    }
    di_buf b = {0};
    di_buf_adds(&b, "^(?:");
    di_buf_add(&b, p, n);
    di_buf_adds(&b, ")$");
    return b.p;
}

static char *choices(const json_t *v, const char *name, srv_fail *f) {
    size_t n = json_array_size(v), i;
    if (!json_is_array(v) || n == 0 || n > MAX_CHOICES) {
        srv_failf(f, 400, name, "%s: expected an array of 1 to %d strings", name, MAX_CHOICES);
        return NULL;
    }
    di_buf b = {0};
    di_buf_adds(&b, "^(?:");
    const json_t *c;
    json_array_foreach(v, i, c) {
        if (!json_is_string(c)) {
            di_buf_free(&b);
            srv_failf(f, 400, name, "%s[%zu]: expected a string", name, i);
            return NULL;
        }
        if (i) di_buf_putc(&b, '|');
        jr_escape_literal(&b, json_string_value(c), json_string_length(c));
    }
    di_buf_adds(&b, ")$");
    return b.p;
}

/* A grammar's text v, named name, onto r. */
static int take_grammar(srv_req *r, const json_t *v, const char *name, srv_fail *f) {
    if (!json_is_string(v)) return srv_failf(f, 400, name, "%s: expected a string", name);
    const char *text = json_string_value(v);
    size_t len = json_string_length(v);
    char why[200];
    gr_grammar *g = gr_compile(text, len, why, sizeof why);
    if (!g) {
        /* Lark's rules read `name: ...`; vLLM's other backends take those */
        bool lark = !memmem(text, len, "::=", 3) &&
                    (memmem(text, len, "start:", 6) || memmem(text, len, "%import", 7));
        return srv_failf(f, 400, name, "%s: %s", name,
                         lark ? "Lark grammars are not supported (GBNF / EBNF, rules as "
                                "name ::= ..., are)"
                              : why);
    }
    gr_free(g);
    r->grammar = di_strdup(text); /* no NUL inside: gr_compile refuses one */
    return 0;
}

/* One constraint's value v, named name, onto r. */
static int take(srv_req *r, const char *kind, const json_t *v, const char *name, srv_fail *f) {
    if (!strcmp(kind, "object")) { /* any JSON object, as response_format json_object */
        if (!json_is_true(v))
            return srv_failf(f, 400, name, "%s: expected true (or no field)", name);
        r->json_mode = true;
        return 0;
    }
    if (!strcmp(kind, "json")) {
        json_t *parsed = json_is_string(v) ? json_loads(json_string_value(v), 0, NULL) : NULL;
        const json_t *sch = parsed ? parsed : v;
        int rc = json_is_object(sch) ? srv_set_json_schema(r, sch, name, "", f)
                                     : srv_failf(f, 400, name, "%s: expected a JSON schema", name);
        json_decref(parsed);
        return rc;
    }
    if (!strcmp(kind, "grammar")) return take_grammar(r, v, name, f);
    char *p = NULL;
    if (!strcmp(kind, "choice"))
        p = choices(v, name, f);
    else if (json_is_string(v))
        p = anchored(json_string_value(v), json_string_length(v));
    else
        srv_failf(f, 400, name, "%s: expected a string", name);
    if (!p) return -1;
    char why[160];
    jr_dfa *d = jr_compile(p, strlen(p), JR_MAX_STATES, why, sizeof why);
    if (!d) { /* the pattern's own fault rather than the anchoring's, if it has one */
        if (json_is_string(v)) {
            char own[160];
            jr_dfa *alone = jr_compile(json_string_value(v), json_string_length(v), JR_MAX_STATES,
                                       own, sizeof own);
            if (!alone) memcpy(why, own, sizeof why);
            jr_free(alone);
        }
        free(p);
        return srv_failf(f, 400, name, "%s: %s", name, why);
    }
    jr_free(d);
    r->regex = p;
    return 0;
}

int srv_parse_structured(const json_t *body, srv_req *r, srv_fail *f) {
    const json_t *so = json_object_get(body, "structured_outputs");
    if (so && !json_is_null(so) && !json_is_object(so))
        return srv_failf(f, 400, "structured_outputs", "structured_outputs: expected an object");
    static const struct {
        const char *name, *kind;
        bool nested; /* in structured_outputs */
    } keys[] = {
        {"guided_json", "json", false},
        {"guided_regex", "regex", false},
        {"guided_choice", "choice", false},
        {"guided_grammar", "grammar", false},
        {"regex", "regex", false},
        {"ebnf", "grammar", false},
        {"grammar", "grammar", false},
        {"json_schema", "json", false},
        {"json", "json", true},
        {"regex", "regex", true},
        {"choice", "choice", true},
        {"grammar", "grammar", true},
        {"json_object", "object", true},
    };
    const json_t *tag = json_object_get(so, "structural_tag"); /* said rather than ignored */
    if (tag && !json_is_null(tag))
        return srv_failf(f, 400, "structured_outputs.structural_tag",
                         "structured_outputs.structural_tag: not supported (json, regex, choice, "
                         "grammar and json_object are)");
    char taken[64] = "";
    if (r->json_mode) snprintf(taken, sizeof taken, "response_format");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const json_t *v = json_object_get(keys[i].nested ? so : body, keys[i].name);
        if (!v || json_is_null(v) || (!strcmp(keys[i].kind, "object") && json_is_false(v)))
            continue;
        char name[64];
        snprintf(name, sizeof name, "%s%s", keys[i].nested ? "structured_outputs." : "",
                 keys[i].name);
        if (taken[0])
            return srv_failf(f, 400, name, "%s: only one structured output a request (%s is set)",
                             name, taken);
        if (take(r, keys[i].kind, v, name, f)) return -1;
        snprintf(taken, sizeof taken, "%s", name);
    }
    return 0;
}
