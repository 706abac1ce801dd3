/* errors.c — error bodies in each protocol's own shape: OpenAI (Chat
 * Completions, Completions, Responses) {"error":{"message","type","param",
 * "code"}} and Anthropic {"type":"error","error":{"type","message"}}. The
 * HTTP status comes with the srv_fail; the Anthropic error type is derived
 * from it the way Anthropic's API names them, so its SDK raises the right
 * exception class. */
#include <stdlib.h>
#include <string.h>

#include "server/srv_internal.h"

static const char *anthropic_type(int status) {
    switch (status) {
    case 400:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
        return "overloaded_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

char *srv_error_body(srv_proto p, const srv_fail *f) {
    json_t *o;
    if (p == SRV_MESSAGES) {
        o = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                      anthropic_type(f->status), "message", f->msg);
    } else {
        json_t *param = f->param[0] ? json_string(f->param) : json_null();
        bool no_model = f->status == 404 && !strcmp(f->param, "model");
        json_t *code = no_model           ? json_string("model_not_found")
                       : f->status == 401 ? json_string("invalid_api_key")
                       : f->status == 429 ? json_string("rate_limit_exceeded")
                                          : json_null();
        o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", f->msg, "type", f->kind,
                      "param", param, "code", code);
    }
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s ? s : di_strdup("{\"error\":{\"message\":\"internal error\"}}");
}
