/* fuzz_entry.c — the one entry point fuzzing goes through (the libFuzzer
 * target in tests/fuzz/ and the corpus replay in the unit tests): a hostile
 * request body through srv_prepare for one protocol and prompt format, then,
 * when it parses, hostile "model output" through a generation (output parser
 * -> protocol stream events and body), without an engine or a tokenizer; or,
 * for the endpoints that generate nothing (count_tokens, tokenize,
 * detokenize: bit 5 of the first byte), their answer. */
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"

int srv_fuzz_one(const uint8_t *data, size_t len) {
    if (len < 2) return 0;
    static const srv_api *const apis[] = {&srv_api_chat, &srv_api_completions, &srv_api_responses,
                                          &srv_api_messages};
    static const srv_api *const answers[] = {&srv_api_count_tokens, &srv_api_tokenize,
                                             &srv_api_detokenize, &srv_api_count_tokens};
    const srv_api *api = (data[0] & 0x20 ? answers : apis)[data[0] & 3];
    bool stream = data[0] & 4;
    render_format fmt = (render_format)(data[1] & 3);
    data += 2, len -= 2;
    const uint8_t *sep = memchr(data, 0, len);
    size_t body_len = sep ? (size_t)(sep - data) : len;
    const char *output = sep ? (const char *)sep + 1 : "";
    size_t out_len = sep ? len - body_len - 1 : 0;

    srv_limits lim = {.max_n = 4, .max_stops = 8, .max_json_depth = 32, .max_batch = 3};
    srv_req r;
    srv_prepared p;
    srv_fail f = {0};
    if (srv_prepare(api, (const char *)data, body_len, &lim, fmt, NULL, &r, &p, &f)) {
        free(srv_error_body(api->proto, &f));
        srv_req_free(&r);
        srv_prepared_free(&p);
        return 0;
    }
    if (api->answer) {
        json_t *a = api->answer(&r, &p.ids, NULL, 1024);
        free(json_dumps(a, JSON_COMPACT));
        json_decref(a);
        srv_req_free(&r);
        srv_prepared_free(&p);
        return 0;
    }
    r.stream = stream;
    gen_env env = {.tok = NULL, .model_name = "fuzz"};
    srv_gen *g = gen_new(&env, api, &r, 7, p.think_opened, &f);
    if (g) {
        gen_begin(g);
        for (int b = 0; b < g->n; b++) {
            /* feed in uneven chunks so chunk boundaries get exercised too */
            size_t at = 0, step = 1;
            while (at < out_len) {
                size_t n = out_len - at < step ? out_len - at : step;
                gen_on_logprob(g, b, 1, -0.5f, NULL, 0);
                gen_on_text(g, b, output + at, n);
                at += n;
                step = step * 3 % 17 + 1;
            }
            engine_usage u = {7, (int)out_len, 3};
            gen_on_final(g, b, (engine_finish)(1 + (data[0] >> 3) % 4), u, NULL);
        }
        json_t *body = api->body(g);
        char *s = json_dumps(body, JSON_COMPACT);
        free(s);
        json_decref(body);
        gen_free(g);
    }
    srv_req_free(&r);
    srv_prepared_free(&p);
    return 0;
}
