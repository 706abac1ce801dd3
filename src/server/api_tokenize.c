/* api_tokenize.c — POST /tokenize and /detokenize (vLLM's endpoints): the
 * ids a request's prompt becomes, and the text ids decode to, so that a
 * client can count or inspect tokens without generating. /tokenize takes a
 * chat request (messages: rendered with the model's prompt format, as chat
 * completions would) or a completions one (prompt: BOS then the text, or
 * ids; vLLM's add_special_tokens: false leaves BOS out) and answers
 * {"count", "max_model_len", "tokens"} (return_token_strs: and
 * "token_strs", the vocabulary's strings); /detokenize takes
 * {"tokens": [ids]} and answers {"prompt"} (control tokens left out). */
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"

static int tokenize_parse(const json_t *body, srv_req *r, const srv_limits *lim, srv_fail *f) {
    const srv_api *as = json_object_get(body, "messages") ? &srv_api_chat : &srv_api_completions;
    return as->parse(body, r, lim, f) || srv_get_bool(body, "return_token_strs", &r->token_strs, f);
}

static json_t *tokenize_answer(const srv_req *r, const tok_ids *ids, const tokenizer *tok,
                               int context) {
    json_t *t = json_array();
    for (size_t i = 0; i < ids->n; i++) json_array_append_new(t, json_integer(ids->v[i]));
    json_t *o = json_pack("{s:I, s:i, s:o}", "count", (json_int_t)ids->n, "max_model_len", context,
                          "tokens", t);
    if (r->token_strs) { /* the vocabulary's own strings (byte-level BPE's spelling) */
        json_t *strs = json_array();
        for (size_t i = 0; i < ids->n; i++) {
            const char *s = tok ? tok_token_str(tok, ids->v[i]) : NULL;
            json_array_append_new(strs, s ? srv_jstr(s, strlen(s)) : json_null());
        }
        json_object_set_new(o, "token_strs", strs);
    }
    return o;
}

const srv_api srv_api_tokenize = {.path = "/tokenize",
                                  .name = "tokenize",
                                  .proto = SRV_CHAT,
                                  .parse = tokenize_parse,
                                  .answer = tokenize_answer};

static int detokenize_parse(const json_t *body, srv_req *r, const srv_limits *lim, srv_fail *f) {
    (void)lim;
    const json_t *t = json_object_get(body, "tokens");
    if (!json_is_array(t)) return srv_failf(f, 400, "tokens", "tokens: expected an array of ids");
    size_t i;
    const json_t *id;
    json_array_foreach(t, i, id) {
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > 1 << 30)
            return srv_failf(f, 400, "tokens", "tokens[%zu]: expected a token id", i);
        tok_ids_push(&r->prompt_ids, (int)json_integer_value(id));
    }
    return 0;
}

static json_t *detokenize_answer(const srv_req *r, const tok_ids *ids, const tokenizer *tok,
                                 int context) {
    (void)r, (void)context;
    size_t len = 0;
    char *text = tok ? tok_decode(tok, ids->v, ids->n, true, &len) : NULL;
    json_t *o = json_pack("{s:o}", "prompt", srv_jstr(text ? text : "", len));
    free(text);
    return o;
}

const srv_api srv_api_detokenize = {.path = "/detokenize",
                                    .name = "detokenize",
                                    .proto = SRV_CHAT,
                                    .parse = detokenize_parse,
                                    .answer = detokenize_answer};
