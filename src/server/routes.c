/* routes.c — turning a request body into something the engine can run, the
 * same way for every protocol: a bounded pre-scan of the JSON nesting depth
 * (before any recursive parsing), the JSON parse, the model-name check, the
 * protocol's own field parser, then rendering the conversation with the
 * model's prompt format and tokenizing it (completions: BOS + the prompt as
 * untrusted text, as `deepinfer generate` does). HTTP-free, so unit tests
 * and the fuzzer drive it directly.
 *
 * Forced tool calls (tool_choice "required" / Anthropic "any", or a named
 * tool): for the formats that write tool calls (deepseek-v4's DSML,
 * chatml's Hermes tags, deepseek-v3's markers), with a generation prompt,
 * the request is rendered in non-thinking mode (as DeepSeek's own API does
 * for forced calls: the assistant turn opens with "</think>") and the prompt
 * then ends by opening the call, spelled as the format's renderer spells it
 * (markers as soft control segments: text where a tokenizer lacks them;
 * names TEXT; via the renderers' rs_* helpers):
 *   deepseek-v4  `<｜DSML｜tool_calls>\n`, named: + `<｜DSML｜invoke name="X">\n`
 *   chatml       `<tool_call>\n`, named: + `{"name": "X", "arguments": `
 *   deepseek-v3  `<｜tool▁calls▁begin｜>`, named: + `<｜tool▁call▁begin｜>function
 *                <｜tool▁sep｜>X\n```json\n`
 * r->tool_forced tells gen.c to start the output parser inside that block /
 * call (the parser's forced start spells the same), and call_forms holds the
 * calls to the tools' schemas from there (json_calls.c). Llama 3's template
 * has no tools, so there the choice is only validated (and a named choice
 * offers that one tool). */
#include <stdlib.h>
#include <string.h>

#include "recipe/render_internal.h" /* rs_*: the renderers' segment helpers */
#include "server/srv_internal.h"

/* Nesting depth of raw JSON text (strings skipped), stopping past cap. */
static int raw_depth(const char *s, size_t n, int cap) {
    int d = 0, best = 0;
    bool str = false, esc = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (str) {
            if (esc)
                esc = false;
            else if (c == '\\')
                esc = true;
            else if (c == '"')
                str = false;
        } else if (c == '"')
            str = true;
        else if (c == '{' || c == '[') {
            if (++d > best) best = d;
            if (best > cap) return best;
        } else if (c == '}' || c == ']')
            d--;
    }
    return best;
}

static bool ends_with_think(const char *s, size_t n) {
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    return n >= 7 && !memcmp(s + n - 7, "<think>", 7);
}

/* Ends the prompt inside the tool-call block (see the top comment). */
static void force_tool_block(render_format fmt, const srv_req *r, render_segs *segs) {
    bool named = r->tool_choice == SRV_TC_NAMED;
    if (fmt == RENDER_CHATML) {
        rs_control(segs, "<tool_call>", true);
        rs_textz(segs, "\n");
        if (named) {
            rs_textz(segs, "{\"name\": \"");
            rs_textz(segs, r->tool_name);
            rs_textz(segs, "\", \"arguments\": ");
        }
    } else if (fmt == RENDER_DEEPSEEK_V3) {
        rs_control(segs, "<｜tool▁calls▁begin｜>", true);
        if (named) {
            rs_control(segs, "<｜tool▁call▁begin｜>", true);
            rs_textz(segs, "function");
            rs_control(segs, "<｜tool▁sep｜>", true);
            rs_textz(segs, r->tool_name);
            rs_textz(segs, "\n```json\n");
        }
    } else {
        rs_control(segs, "<｜DSML｜tool_calls>", true);
        rs_textz(segs, "\n");
        if (named) {
            rs_textz(segs, "<｜DSML｜invoke name=\"");
            rs_textz(segs, r->tool_name);
            rs_textz(segs, "\">\n");
        }
    }
}

/* A tool's parameters as a schema the decoder holds (its arguments are an
 * object whether or not the schema says so), or NULL: any object. */
static char *params_schema(const char *params) {
    json_t *j = params ? json_loads(params, 0, NULL) : NULL;
    if (json_is_object(j) && !json_object_get(j, "type"))
        json_object_set_new(j, "type", json_string("object"));
    char *text = json_is_object(j) ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    char why[160];
    jg_schema *sc = text ? jg_schema_compile(text, strlen(text), why, sizeof why) : NULL;
    if (!sc) free(text), text = NULL;
    jg_schema_free(sc);
    return text;
}

static char *concat3(const char *a, const char *b, const char *c) {
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    char *s = di_malloc(la + lb + lc + 1);
    memcpy(s, a, la);
    memcpy(s + la, b, lb);
    memcpy(s + la + lb, c, lc + 1);
    return s;
}

/* The tool may be called (allowed_tools, or any). */
static bool allowed(const srv_req *r, const char *name) {
    for (int k = 0; k < r->n_allowed_tools; k++)
        if (!strcmp(r->allowed_tools[k], name)) return true;
    return !r->allowed_tools;
}

/* Tool calls held to the tools' schemas (chatml, deepseek-v3, deepseek-v4):
 * each offered tool's texts as the renderer spells a call. Forced
 * (tool_choice required / named): from the prompt's opener on (a named
 * choice: its call already opened), then at most one call (named, or
 * parallel_tool_calls false) or SRV_MAX_FORCED_CALLS, every tool's schema.
 * Lazy (tool_choice auto with strict tools, allowed_tools, or a structured
 * output): free text until the model opens a block (Hermes: one call a
 * block; DeepSeek V3: each call, lone or in a block, from its
 * <｜tool▁call▁begin｜>), the strict tools' arguments held to their schemas,
 * the others any object. With allowed_tools, only those tools' calls. */
static void call_forms(render_format fmt, srv_req *r, bool lazy) {
    const conversation *c = r->conv;
    bool hermes = fmt == RENDER_CHATML, dsml = fmt == RENDER_DEEPSEEK_V4;
    bool named = r->tool_choice == SRV_TC_NAMED && !lazy;
    if ((!hermes && !dsml && fmt != RENDER_DEEPSEEK_V3) || c->n_tools > JG_MAX_CALL_FORMS ||
        r->call_forms)
        return;
    r->call_forms = di_calloc(c->n_tools, sizeof *r->call_forms);
    for (size_t i = 0; i < c->n_tools; i++) {
        const char *name = c->tools[i].name;
        if (!allowed(r, name)) continue;
        jg_call_form *f = &r->call_forms[r->n_call_forms++];
        if (hermes) {
            f->first =
                concat3(lazy ? "\n{\"name\": \"" : "{\"name\": \"", name, "\", \"arguments\": ");
            f->next = concat3("\n<tool_call>\n", f->first + lazy, "");
            f->suffix = di_strdup("}\n</tool_call>");
        } else if (dsml) { /* after the block opener and its newline */
            f->next = concat3("<｜DSML｜invoke name=\"", name, "\">\n");
            f->first = concat3(lazy ? "\n" : "", f->next, "");
            f->suffix = di_strdup("</｜DSML｜invoke>\n");
        } else { /* lazy: after <｜tool▁call▁begin｜>, one call a block (so a lone call,
                    as the template writes later turns', is held as well) */
            f->first = concat3(lazy ? "function<｜tool▁sep｜>"
                                    : "<｜tool▁call▁begin｜>function<｜tool▁sep｜>",
                               name, "\n```json\n");
            f->next = di_strdup(f->first);
            f->suffix = di_strdup("\n```<｜tool▁call▁end｜>");
        }
        if (named) { /* the prompt opened it (one tool left: apply_tool_choice) */
            free((char *)f->first);
            f->first = di_strdup("");
        }
        f->schema = !lazy || c->tools[i].strict ? params_schema(c->tools[i].parameters) : NULL;
    }
    bool one_a_block = lazy && !dsml; /* Hermes blocks; V3's calls, each its own trigger */
    r->calls_close = dsml ? "</｜DSML｜tool_calls>" : hermes || lazy ? "" : "<｜tool▁calls▁end｜>";
    r->max_calls = named || !r->parallel_tool_calls || one_a_block ? 1 : SRV_MAX_FORCED_CALLS;
    r->calls_dsml = dsml;
    if (lazy)
        r->calls_trigger = hermes ? "<tool_call>"
                           : dsml ? "<｜DSML｜tool_calls>"
                                  : "<｜tool▁call▁begin｜>";
}

int srv_render_conv(render_format fmt, srv_req *r, render_segs *segs, di_err *err) {
    r->tool_syntax = fmt == RENDER_CHATML        ? OUTP_SYNTAX_HERMES
                     : fmt == RENDER_DEEPSEEK_V3 ? OUTP_SYNTAX_DSV3
                                                 : OUTP_SYNTAX_DSML;
    r->calls_written = fmt != RENDER_LLAMA3;
    r->tool_forced = r->calls_written && r->conv->n_tools > 0 && r->conv->add_generation_prompt &&
                     (r->tool_choice == SRV_TC_REQUIRED || r->tool_choice == SRV_TC_NAMED);
    if (r->tool_forced) r->conv->thinking = CONV_THINK_OFF;
    if (render_conversation(fmt, r->conv, segs, err)) return -1;
    if (r->tool_forced) {
        force_tool_block(fmt, r, segs);
        call_forms(fmt, r, false);
    } else if (r->tool_choice == SRV_TC_AUTO && r->conv->n_tools > 0 &&
               r->conv->add_generation_prompt) {
        /* held: strict tools, allowed_tools' names, or structured output
         * (the reply its JSON or calls) */
        bool hold = r->allowed_tools || r->json_mode;
        for (size_t i = 0; i < r->conv->n_tools; i++) hold |= r->conv->tools[i].strict;
        if (hold) call_forms(fmt, r, true);
        r->calls_answer = r->n_call_forms && r->json_mode;
    }
    return 0;
}

void srv_json_constraint(const srv_req *r, bool think_opened, const tokenizer *tok,
                         engine_request *er) {
    /* with tools offered, a structured output is held with the calls below
     * (where the format writes them) or not at all */
    er->json =
        (r->json_mode || r->regex || r->grammar) &&
        !(r->conv && r->conv->n_tools > 0 && r->tool_choice != SRV_TC_NONE && r->calls_written);
    er->json_schema = r->json_schema;
    er->regex = r->regex;
    er->grammar = r->grammar;
    if (r->n_call_forms) { /* the calls' forms (call_forms) */
        er->json = true;
        er->call_forms = r->call_forms;
        er->n_call_forms = r->n_call_forms;
        er->calls_close = r->calls_close;
        er->max_calls = r->max_calls;
        er->calls_trigger = r->calls_trigger;
        er->calls_dsml = r->calls_dsml;
        er->calls_answer = r->calls_answer;
        er->calls_answer_schema = r->json_schema;
    }
    if (!er->json || !think_opened) return;
    er->json_wait_for = tok ? tok_control_id(tok, "</think>") : -1;
    er->json_wait = er->json_wait_for >= 0;
    er->json = er->json_wait;
}

/* A completions prompt's ids: BOS (unless r->no_bos) and the text as
 * untrusted text, or the ids as given (in the vocabulary); with a suffix
 * (r->suffix), the text and it around the model's fill-in-the-middle
 * markers (render_fim). Errors name param, and the prompt as name. */
static int prompt_ids(const tokenizer *tok, const srv_req *r, const srv_prompt *p,
                      const char *param, const char *name, tok_ids *out, srv_fail *f) {
    /* an empty suffix where the model has no markers: a plain completion */
    if (r->suffix && tok && (r->suffix_len > 0 || render_fim_supported(tok))) {
        di_err err = {{0}};
        if (!p->text)
            return srv_failf(f, 400, "suffix", "suffix: %s must be text, not token ids", name);
        if (render_fim(tok, p->text, p->len, r->suffix, r->suffix_len, out, &err))
            return srv_failf(f, 400, "suffix", "suffix: %s", err.msg);
        if (r->no_bos && out->n && out->v[0] == tok_bos_id(tok)) /* add_special_tokens: false */
            memmove(out->v, out->v + 1, sizeof *out->v * --out->n);
    } else if (p->text) {
        di_err err = {{0}};
        int bos = tok && !r->no_bos ? tok_bos_id(tok) : -1;
        if (bos >= 0) tok_ids_push(out, bos);
        if (tok && tok_encode_text(tok, p->text, p->len, out, &err))
            return srv_failf(f, 400, param, "%s: %s", name, err.msg);
    } else {
        int vocab = tok ? tok_vocab_size(tok) : 1 << 30;
        for (size_t i = 0; i < p->ids.n; i++) {
            if (p->ids.v[i] >= vocab)
                return srv_failf(f, 400, param, "%s[%zu]: token id %d is outside the vocabulary",
                                 name, i, p->ids.v[i]);
            tok_ids_push(out, p->ids.v[i]);
        }
    }
    if (tok && out->n == 0) return srv_failf(f, 400, param, "%s: the prompt is empty", name);
    return 0;
}

void srv_prepared_free(srv_prepared *p) {
    tok_ids_free(&p->ids);
    for (int i = 0; i < p->n_more; i++) tok_ids_free(&p->more[i]);
    free(p->more);
    p->more = NULL;
    p->n_more = 0;
}

int srv_prepare(const srv_api *api, const char *body, size_t len, const srv_limits *lim,
                render_format fmt, const tokenizer *tok, srv_req *r, srv_prepared *out,
                srv_fail *f) {
    *r = (srv_req){.proto = api->proto,
                   .n = 1,
                   .max_tokens = -1,
                   .parallel_tool_calls = true,
                   .prompt_logprobs = -1};
    *out = (srv_prepared){0};
    int cap = lim->max_json_depth > 0 ? lim->max_json_depth : 64;
    if (raw_depth(body, len, cap) > cap)
        return srv_failf(f, 400, NULL, "request body: JSON nested deeper than %d levels", cap);
    json_error_t je;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        return srv_failf(f, 400, NULL, "request body: invalid JSON at line %d column %d: %s",
                         je.line, je.column, je.text);
    int rc = -1;
    if (!json_is_object(j)) {
        srv_failf(f, 400, NULL, "request body: expected a JSON object");
        goto done;
    }
    const char *model = NULL;
    if (srv_get_str(j, "model", &model, f)) goto done;
    if (!model && api->proto == SRV_MESSAGES) {
        srv_failf(f, 400, "model", "model: Field required");
        goto done;
    }
    if (model && lim->model_name && strcmp(model, lim->model_name)) {
        srv_failf(f, 404, "model", "The model '%s' does not exist (this server serves '%s')", model,
                  lim->model_name);
        goto done;
    }
    r->model = di_strdup(model ? model : lim->model_name ? lim->model_name : "deepinfer");
    if (api->parse(j, r, lim, f)) goto done;
    if (r->conv && r->conv->continue_final &&
        (r->json_mode || r->regex || r->grammar || r->tool_choice == SRV_TC_REQUIRED ||
         r->tool_choice == SRV_TC_NAMED)) {
        /* their constraints start a reply afresh, not inside a message */
        srv_failf(f, 400, "messages",
                  "messages: a continued last message cannot be held to a structured output "
                  "(JSON, a pattern or a grammar) or be a forced tool call");
        goto done;
    }

    if (tok && srv_vocab_params(r, tok, f)) goto done;
    di_err err = {{0}};
    if (r->conv) {
        render_segs segs = {0};
        if (srv_render_conv(fmt, r, &segs, &err)) {
            srv_failf(f, 400, "messages", "%s", err.msg);
            render_segs_free(&segs);
            goto done;
        }
        size_t plen = 0;
        char *prompt = render_to_string(&segs, &plen);
        out->think_opened = ends_with_think(prompt, plen);
        free(prompt);
        int e = tok ? render_to_ids(tok, &segs, &out->ids, &err) : 0;
        render_segs_free(&segs);
        if (e) {
            srv_failf(f, 400, "messages", "%s", err.msg);
            goto done;
        }
    } else {
        const char *field = api == &srv_api_detokenize ? "tokens" : "prompt";
        srv_prompt first = {r->prompt, r->prompt_len, r->prompt_ids};
        if (prompt_ids(tok, r, &first, field, field, &out->ids, f)) goto done;
        if (r->n_more) out->more = di_calloc((size_t)r->n_more, sizeof *out->more);
        out->n_more = r->n_more;
        for (int i = 0; i < r->n_more; i++) {
            char name[32];
            snprintf(name, sizeof name, "prompt[%d]", i + 1);
            if (prompt_ids(tok, r, &r->more[i], field, name, &out->more[i], f)) goto done;
        }
    }
    for (int q = 0; r->truncate_prompt > 0 && q <= out->n_more; q++) { /* the last tokens kept */
        tok_ids *ids = q ? &out->more[q - 1] : &out->ids;
        size_t k = (size_t)r->truncate_prompt;
        if (ids->n <= k) continue;
        memmove(ids->v, ids->v + ids->n - k, k * sizeof *ids->v);
        ids->n = k;
    }
    rc = 0;
done:
    json_decref(j);
    return rc;
}
