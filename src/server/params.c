/* params.c — the typed request-field readers every protocol parser shares
 * (bool, int, number, string, stop lists, the common sampling fields), each
 * failing with a 400 that names the field, plus the small byte buffer the
 * server writes responses into. Kept apart from the protocol files so every
 * protocol validates a field the same way. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "server/srv_internal.h"

int srv_failf(srv_fail *f, int status, const char *param, const char *fmt, ...) {
    f->status = status;
    snprintf(f->kind, sizeof f->kind, "%s",
             status == 401   ? "authentication_error"
             : status == 404 ? "not_found_error"
             : status == 413 ? "request_too_large"
             : status == 429 ? "rate_limit_error"
             : status >= 500 ? "server_error"
                             : "invalid_request_error");
    snprintf(f->param, sizeof f->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    json_t *j = srv_jstr(f->msg, strlen(f->msg)); /* a cut or hostile field name stays UTF-8 */
    snprintf(f->msg, sizeof f->msg, "%s", json_string_value(j));
    json_decref(j);
    return -1;
}

static const json_t *field(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

int srv_get_bool(const json_t *o, const char *key, bool *out, srv_fail *f) {
    const json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return srv_failf(f, 400, key, "%s: expected a boolean", key);
    *out = json_is_true(v);
    return 0;
}

int srv_get_int(const json_t *o, const char *key, long long lo, long long hi, int *out,
                srv_fail *f) {
    const json_t *v = field(o, key);
    if (!v) return 0;
    long long x;
    if (json_is_integer(v))
        x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
             fabs(json_real_value(v)) < 1e15)
        x = (long long)json_real_value(v);
    else
        return srv_failf(f, 400, key, "%s: expected an integer", key);
    if (x < lo || x > hi)
        return srv_failf(f, 400, key, "%s: %lld is out of range [%lld, %lld]", key, x, lo, hi);
    *out = (int)x;
    return 0;
}

int srv_get_num(const json_t *o, const char *key, double lo, double hi, float *out, srv_fail *f) {
    const json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_number(v)) return srv_failf(f, 400, key, "%s: expected a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return srv_failf(f, 400, key, "%s: %g is out of range [%g, %g]", key, x, lo, hi);
    *out = (float)x;
    return 0;
}

int srv_get_str(const json_t *o, const char *key, const char **out, srv_fail *f) {
    const json_t *v = field(o, key);
    *out = NULL;
    if (!v) return 0;
    if (!json_is_string(v)) return srv_failf(f, 400, key, "%s: expected a string", key);
    *out = json_string_value(v);
    return 0;
}

int srv_get_stops(const json_t *o, const char *key, srv_req *r, const srv_limits *lim,
                  srv_fail *f) {
    const json_t *v = field(o, key);
    if (!v) return 0;
    int cap = lim->max_stops < SRV_MAX_STOPS ? lim->max_stops : SRV_MAX_STOPS;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) return 0;
        if (json_string_length(v) > OUTP_MAX_STOP_LEN)
            return srv_failf(f, 400, key, "%s: longer than %d bytes", key, OUTP_MAX_STOP_LEN);
        r->stops[r->n_stops++] = di_strdup(json_string_value(v));
        return 0;
    }
    if (!json_is_array(v))
        return srv_failf(f, 400, key, "%s: expected a string or an array of strings", key);
    if ((int)json_array_size(v) > cap)
        return srv_failf(f, 400, key, "%s: at most %d stop strings", key, cap);
    size_t i;
    const json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s)) return srv_failf(f, 400, key, "%s[%zu]: expected a string", key, i);
        if (json_string_length(s) > OUTP_MAX_STOP_LEN)
            return srv_failf(f, 400, key, "%s[%zu]: longer than %d bytes", key, i,
                             OUTP_MAX_STOP_LEN);
        if (json_string_length(s) == 0) continue;
        if (memchr(json_string_value(s), 0, json_string_length(s)))
            return srv_failf(f, 400, key, "%s[%zu]: contains a NUL byte", key, i);
        r->stops[r->n_stops++] = di_strdup(json_string_value(s));
    }
    return 0;
}

int srv_get_stream_options(const json_t *body, srv_req *r, srv_fail *f) {
    const json_t *so = json_object_get(body, "stream_options");
    if (!so || json_is_null(so)) return 0;
    if (!json_is_object(so))
        return srv_failf(f, 400, "stream_options", "stream_options: expected an object");
    return srv_get_bool(so, "include_usage", &r->include_usage, f) ||
           srv_get_bool(so, "continuous_usage_stats", &r->continuous_usage, f);
}

int srv_get_priority(const json_t *body, srv_req *r, const srv_limits *lim, srv_fail *f) {
    if (srv_get_int(body, "priority", -(1 << 30), 1 << 30, &r->priority, f)) return -1;
    if (r->priority && !lim->priority)
        return srv_failf(f, 400, "priority",
                         "priority: scheduling by priority is off (the server takes it with "
                         "--scheduling-policy priority)");
    return 0;
}

/* vLLM's arrays of token ids (at most max) under key. */
static int get_token_ids(const json_t *o, const char *key, size_t max, int **out, int *n,
                         srv_fail *f) {
    const json_t *ids = field(o, key);
    if (!ids) return 0;
    if (!json_is_array(ids) || json_array_size(ids) > max)
        return srv_failf(f, 400, key, "%s: expected an array of at most %zu token ids", key, max);
    *out = di_calloc(json_array_size(ids) + 1, sizeof **out);
    size_t i;
    const json_t *id;
    json_array_foreach(ids, i, id) {
        json_int_t x = json_is_integer(id) ? json_integer_value(id) : -1;
        if (x < 0 || x > 1 << 30)
            return srv_failf(f, 400, key, "%s[%zu]: expected a token id", key, i);
        (*out)[(*n)++] = (int)x;
    }
    return 0;
}

/* vLLM's bad_words: strings, made token sequences by srv_prepare. */
static int get_bad_words(const json_t *o, srv_req *r, srv_fail *f) {
    const json_t *w = field(o, "bad_words");
    if (!w) return 0;
    if (!json_is_array(w) || json_array_size(w) > SRV_MAX_BAD_WORDS)
        return srv_failf(f, 400, "bad_words", "bad_words: expected an array of at most %d strings",
                         SRV_MAX_BAD_WORDS);
    r->bad_words = di_calloc(json_array_size(w) + 1, sizeof *r->bad_words);
    size_t i;
    const json_t *s;
    json_array_foreach(w, i, s) {
        size_t len = json_string_length(s);
        if (!json_is_string(s) || len == 0 || len > SRV_MAX_BAD_WORD ||
            memchr(json_string_value(s), 0, len))
            return srv_failf(f, 400, "bad_words",
                             "bad_words[%zu]: expected a string of 1 to %d bytes (no NUL)", i,
                             SRV_MAX_BAD_WORD);
        r->bad_words[r->n_bad_words++] = di_strdup(json_string_value(s));
    }
    return 0;
}

static int in_vocab(const char *key, const int *ids, int n, int vocab, srv_fail *f) {
    for (int i = 0; i < n; i++)
        if (ids[i] >= vocab)
            return srv_failf(f, 400, key, "%s[%d]: token id %d is outside the vocabulary", key, i,
                             ids[i]);
    return 0;
}

int srv_vocab_params(srv_req *r, const tokenizer *tok, srv_fail *f) {
    int vocab = tok_vocab_size(tok);
    if (in_vocab("stop_token_ids", r->stop_ids, r->n_stop_ids, vocab, f) ||
        in_vocab("allowed_token_ids", r->allowed_ids, r->n_allowed_ids, vocab, f))
        return -1;
    if (!r->n_bad_words) return 0;
    di_buf words = {0}; /* ints: each sequence's length, then its ids */
    int first = -1, first_len = 0;
    for (int w = 0; w < r->n_bad_words; w++)
        for (int spaced = 0; spaced < 2; spaced++) {
            const char *word = r->bad_words[w];
            while (*word == ' ' || *word == '\t' || *word == '\n' || *word == '\r') word++;
            di_buf text = {0};
            di_buf_adds(&text, spaced ? " " : "");
            di_buf_adds(&text, word);
            tok_ids ids = {0};
            di_err err = {{0}};
            int rc = text.n ? tok_encode_text(tok, text.p, text.n, &ids, &err) : 0;
            di_buf_free(&text);
            bool take =
                !rc && ids.n > 0 && (!spaced || (ids.v[0] != first && (int)ids.n == first_len));
            if (!spaced) first = ids.n ? ids.v[0] : -1, first_len = (int)ids.n;
            if (take) {
                int len = (int)ids.n;
                di_buf_add(&words, &len, sizeof len);
                di_buf_add(&words, ids.v, sizeof(int) * ids.n);
            }
            tok_ids_free(&ids);
            if (rc) {
                di_buf_free(&words);
                return srv_failf(f, 400, "bad_words", "bad_words[%d]: %s", w, err.msg);
            }
        }
    if (words.n / sizeof(int) > SAMP_MAX_BAD) {
        di_buf_free(&words);
        return srv_failf(f, 400, "bad_words", "bad_words: over %d tokens in all", SAMP_MAX_BAD);
    }
    r->bad_ids = (int *)words.p;
    r->n_bad_ids = (int)(words.n / sizeof(int));
    r->samp.bad = r->bad_ids, r->samp.n_bad = r->n_bad_ids;
    return 0;
}

int srv_get_sampling(const json_t *o, srv_req *r, float max_temperature, srv_fail *f) {
    samp_params *s = &r->samp;
    s->temperature = 1.0f;
    if (srv_get_num(o, "temperature", 0, max_temperature, &s->temperature, f) ||
        srv_get_num(o, "top_p", 0, 1, &s->top_p, f) ||
        srv_get_int(o, "top_k", -1, 1 << 30, &s->top_k, f) ||
        srv_get_num(o, "min_p", 0, 1, &s->min_p, f) ||
        srv_get_num(o, "presence_penalty", -2, 2, &s->presence_penalty, f) ||
        srv_get_num(o, "frequency_penalty", -2, 2, &s->frequency_penalty, f) ||
        srv_get_num(o, "repetition_penalty", 0, 10, &s->repetition_penalty, f) ||
        srv_get_int(o, "min_tokens", 0, 1 << 30, &s->min_tokens, f) ||
        srv_get_bool(o, "ignore_eos", &r->ignore_eos, f) ||
        srv_get_bool(o, "include_stop_str_in_output", &r->keep_stop, f) ||
        srv_get_bool(o, "return_tokens_as_token_ids", &r->tokens_as_ids, f) ||
        srv_get_int(o, "truncate_prompt_tokens", 1, 1 << 30, &r->truncate_prompt, f))
        return -1;
    if (get_token_ids(o, "stop_token_ids", SRV_MAX_STOP_IDS, &r->stop_ids, &r->n_stop_ids, f) ||
        get_token_ids(o, "allowed_token_ids", SRV_MAX_ALLOWED_IDS, &r->allowed_ids,
                      &r->n_allowed_ids, f) ||
        get_bad_words(o, r, f))
        return -1;
    if (field(o, "allowed_token_ids") && !r->n_allowed_ids)
        return srv_failf(f, 400, "allowed_token_ids", "allowed_token_ids: empty (nothing to draw)");
    s->allowed = r->allowed_ids, s->n_allowed = r->n_allowed_ids;
    const json_t *lb = field(o, "logit_bias");
    if (lb) {
        if (!json_is_object(lb))
            return srv_failf(f, 400, "logit_bias",
                             "logit_bias: expected an object of token id -> bias");
        if (json_object_size(lb) > SAMP_MAX_BIAS)
            return srv_failf(f, 400, "logit_bias", "logit_bias: at most %d entries", SAMP_MAX_BIAS);
        r->bias = di_calloc(json_object_size(lb) + 1, sizeof *r->bias);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)lb, k, v) {
            char *end;
            long id = strtol(k, &end, 10);
            if (!*k || *end || id < 0 || id > 1 << 30)
                return srv_failf(f, 400, "logit_bias", "logit_bias: key '%s' is not a token id", k);
            if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
                return srv_failf(f, 400, "logit_bias",
                                 "logit_bias[%s]: expected a number in [-100, 100]", k);
            r->bias[s->n_bias++] = (samp_bias){(int)id, (float)json_number_value(v)};
        }
        s->bias = r->bias;
    }
    const json_t *sd = field(o, "seed");
    if (sd && !json_is_integer(sd)) return srv_failf(f, 400, "seed", "seed: expected an integer");
    if (sd) s->seed = (uint64_t)json_integer_value(sd);
    if (s->top_p == 0 && json_object_get(o, "top_p") && !json_is_null(json_object_get(o, "top_p")))
        return srv_failf(f, 400, "top_p", "top_p: must be greater than 0");
    return 0;
}

static int depth_of(const json_t *v, int d, int cap) {
    if (d > cap) return d;
    int best = d;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            int e = depth_of(x, d + 1, cap);
            if (e > best) best = e;
            if (best > cap) break;
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            int e = depth_of(x, d + 1, cap);
            if (e > best) best = e;
            if (best > cap) break;
        }
    }
    return best;
}

int srv_json_depth(const json_t *v) {
    return depth_of(v, 1, 1 << 20);
}

void srv_req_free(srv_req *r) {
    free(r->model);
    if (r->conv) conv_free(r->conv);
    free(r->prompt);
    free(r->suffix);
    tok_ids_free(&r->prompt_ids);
    for (int i = 0; i < r->n_more; i++) {
        free(r->more[i].text);
        tok_ids_free(&r->more[i].ids);
    }
    free(r->more);
    free(r->bias);
    free(r->stop_ids);
    free(r->allowed_ids);
    for (int i = 0; i < r->n_bad_words; i++) free(r->bad_words[i]);
    free(r->bad_words);
    free(r->bad_ids);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->tool_name);
    for (int i = 0; i < r->n_allowed_tools; i++) free(r->allowed_tools[i]);
    free(r->allowed_tools);
    for (int i = 0; i < r->n_call_forms; i++) {
        free((char *)r->call_forms[i].first);
        free((char *)r->call_forms[i].next);
        free((char *)r->call_forms[i].suffix);
        free((char *)r->call_forms[i].schema);
    }
    free(r->call_forms);
    free(r->json_schema);
    free(r->regex);
    free(r->grammar);
    di_buf_free(&r->chat_echo);
    json_decref(r->resp_input);
    free(r->resp_prev);
    *r = (srv_req){0};
}

json_t *srv_jstr(const char *s, size_t len) {
    json_t *j = json_stringn(s, len);
    if (j) return j;
    di_buf b = {0};
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k > 0 && cp != 0) {
            di_buf_add(&b, s + i, (size_t)k);
            i += (size_t)k;
        } else {
            di_buf_adds(&b, "\xEF\xBF\xBD");
            i++;
        }
    }
    j = json_stringn(b.p ? b.p : "", b.n);
    di_buf_free(&b);
    return j ? j : json_string("");
}
