/* output_parser.c — the streaming output parser's core: the per-response
 * state, UTF-8 assembly of the raw chunks, the marker scanner, reasoning,
 * answer text with stop strings and tool-block openers, and JSON mode. The
 * DSML tool-block states live in outp_dsml.c.
 *
 * Shaped as "undecided buffer + step functions" (see outp_internal.h): input
 * is first made valid UTF-8 (incomplete trailing characters held, invalid
 * bytes replaced by U+FFFD, so nothing downstream can split a character),
 * then each state consumes the longest prefix it can decide. The scanner
 * holds back from the earliest position where a marker could still start,
 * and acts on a marker at the earliest position where one matches in full —
 * both functions of the bytes alone, which is what makes the parse
 * independent of chunking. No global state. */
#include "recipe/outp_internal.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define THINK_OPEN  "<think>"
#define THINK_CLOSE "</think>"
#define DSML        "｜DSML｜" /* U+FF5C on both sides */

/* Leading whitespace held while a <think> may still follow it. */
#define MAX_LEAD_WS 64

static const outp_marker think_close = {THINK_CLOSE, sizeof THINK_CLOSE - 1};

/* ---- validation of configured strings ------------------------------------ */

static bool valid_utf8(const char *s, size_t n) {
    const utf8proc_uint8_t *u = (const utf8proc_uint8_t *)s;
    while (n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(u, (utf8proc_ssize_t)n, &cp);
        if (k <= 0) return false;
        u += k;
        n -= (size_t)k;
    }
    return true;
}

/* ---- lifecycle ------------------------------------------------------------ */

void outp_add_marker(outp_parser *p, const char *s) {
    p->amk[p->n_amk].s = s;
    p->amk[p->n_amk].len = strlen(s);
    p->n_amk++;
}

outp_parser *outp_new(const outp_config *cfg, di_err *err) {
    if (cfg->n_stops > OUTP_MAX_STOPS)
        return di_errf(err, "stop: %zu stop strings, at most %d", cfg->n_stops, OUTP_MAX_STOPS),
               NULL;
    for (size_t i = 0; i < cfg->n_stops; i++) {
        const char *s = cfg->stops[i];
        size_t n = s ? strlen(s) : 0;
        if (n > OUTP_MAX_STOP_LEN)
            return di_errf(err, "stop[%zu]: %zu bytes, at most %d", i, n, OUTP_MAX_STOP_LEN), NULL;
        if (!valid_utf8(s, n)) return di_errf(err, "stop[%zu]: not valid UTF-8", i), NULL;
    }
    outp_parser *p = di_calloc(1, sizeof *p);
    p->cfg = *cfg;
    p->cfg.stops = NULL;
    if (cfg->tools && cfg->syntax != OUTP_SYNTAX_DSML) {
        outp_jcalls_openers(p);
    } else if (cfg->tools) {
        outp_dsml d = cfg->dsml;
        if (d == OUTP_DSML_AUTO || d == OUTP_DSML_V4) outp_add_marker(p, "<" DSML "tool_calls>");
        if (d == OUTP_DSML_AUTO || d == OUTP_DSML_V41) outp_add_marker(p, "<" DSML " calls>");
        if (d == OUTP_DSML_AUTO || d == OUTP_DSML_V32)
            outp_add_marker(p, "<" DSML "function_calls>");
    }
    p->n_openers = p->n_amk;
    p->stops = di_calloc(cfg->n_stops + 1, sizeof *p->stops);
    p->stop_of = di_calloc(OUTP_MAX_MARKERS, sizeof *p->stop_of);
    for (size_t i = 0; i < cfg->n_stops; i++) {
        if (!cfg->stops[i] || !cfg->stops[i][0]) continue;
        p->stops[i] = di_strdup(cfg->stops[i]);
        p->stop_of[p->n_amk] = (int)i;
        outp_add_marker(p, p->stops[i]);
    }
    if (cfg->tools && cfg->syntax != OUTP_SYNTAX_DSML &&
        (cfg->start_in_block || cfg->start_invoke)) {
        p->cfg.start_invoke = NULL;
        outp_jcalls_start_forced(p, cfg->start_invoke);
    } else if (cfg->tools && (cfg->start_in_block || cfg->start_invoke)) {
        p->st = OUTP_S_BLOCK; /* the prompt opened the block (and the invoke) */
        p->cfg.start_invoke = NULL;
        if (cfg->start_invoke) p->forced_invoke = di_strdup(cfg->start_invoke);
    } else if (cfg->reasoning) {
        p->st = OUTP_S_THINK_START;
        p->think_seen_open = cfg->think_opened;
    } else {
        p->st = OUTP_S_ANSWER;
    }
    di_buf_add(&p->in, "", 0); /* never NULL: steps compare against it */
    p->cur_call = -1;
    p->sum.stop_index = -1;
    p->id_state = cfg->id_seed ? cfg->id_seed : (uint64_t)(di_now() * 1e9) ^ (uint64_t)(uintptr_t)p;
    return p;
}

void outp_free(outp_parser *p) {
    if (!p) return;
    for (size_t i = 0; i < p->cfg.n_stops; i++) free(p->stops[i]);
    free(p->stops);
    free(p->stop_of);
    free(p->cur_name);
    free(p->forced_invoke);
    free(p->param_key);
    di_buf_free(&p->in);
    di_buf_free(&p->jhold);
    di_buf_free(&p->jtext);
    di_buf_free(&p->pval);
    di_buf_free(&p->scratch);
    free(p);
}

/* ---- events ---------------------------------------------------------------- */

void outp_emit(outp_parser *p, outp_event_kind k, const char *s, size_t n) {
    if (n == 0 && (k == OUTP_EV_REASONING || k == OUTP_EV_TEXT || k == OUTP_EV_TOOL_ARGS)) return;
    outp_event ev = {.kind = k, .text = s, .len = n, .index = p->cur_call};
    p->cb(p->ctx, &ev);
}

void outp_emit_error(outp_parser *p, const char *fmt, ...) {
    char msg[DI_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* One line of whole characters: model text in it may hold newlines, and
     * truncation may have cut a character. */
    size_t n = strlen(msg), k = n;
    while (k > 0 && ((unsigned char)msg[k - 1] & 0xC0) == 0x80) k--;
    if (k > 0 && (unsigned char)msg[k - 1] >= 0xC0) {
        unsigned char lead = (unsigned char)msg[k - 1];
        size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
        if (n - (k - 1) < want) msg[k - 1] = 0;
    }
    for (char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20) *c = ' ';
    p->sum.n_errors++;
    outp_event ev = {.kind = OUTP_EV_ERROR, .text = msg, .len = strlen(msg), .index = p->cur_call};
    p->cb(p->ctx, &ev);
}

static void emit_text(outp_parser *p, const char *s, size_t n) {
    if (!n) return;
    if (p->cfg.json_mode) di_buf_add(&p->jtext, s, n);
    outp_emit(p, OUTP_EV_TEXT, s, n);
}

/* JSON mode: hold the leading whitespace and ```lang fence, emit the first
 * object/array value only; anything else makes the answer plain text. */
void outp_emit_answer(outp_parser *p, const char *s, size_t n) {
    if (!p->cfg.json_mode) {
        outp_emit(p, OUTP_EV_TEXT, s, n);
        return;
    }
    size_t i = 0;
    while (i < n && p->js == OUTP_J_START) {
        char c = s[i];
        int f = p->jfence;
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '_' || c == '-';
        if ((c == '{' || c == '[') && (f == 0 || f >= 3)) {
            p->js = OUTP_J_VALUE;
            p->jhold.n = 0;
            break;
        }
        if (outp_is_ws(c) && (f == 0 || f >= 3))
            f = f == 0 ? 0 : 5;
        else if (c == '`' && f <= 2)
            f++;
        else if (alpha && (f == 3 || f == 4))
            f = 4;
        else
            f = -1;
        if (f < 0) {
            p->js = OUTP_J_PLAIN;
            size_t h = p->jhold.n;
            p->jhold.n = 0;
            emit_text(p, p->jhold.p, h);
            break;
        }
        p->jfence = f;
        di_buf_add(&p->jhold, s + i, 1);
        i++;
    }
    if (i == n) return;
    if (p->js == OUTP_J_PLAIN) {
        emit_text(p, s + i, n - i);
        return;
    }
    if (p->js != OUTP_J_VALUE) return; /* J_DONE: text after the value is dropped */
    size_t j = i;
    for (; j < n; j++) {
        char c = s[j];
        if (outp_json_quoted(&p->jstr, &p->jesc, c)) continue;
        if (c == '{' || c == '[') {
            p->jdepth++;
        } else if ((c == '}' || c == ']') && --p->jdepth == 0) {
            j++;
            p->js = OUTP_J_DONE;
            break;
        }
    }
    emit_text(p, s + i, j - i);
}

/* End of answer text: JSON mode's held start, if no JSON followed, is text. */
static void json_flush(outp_parser *p) {
    if (p->cfg.json_mode && p->js == OUTP_J_START && p->jhold.n) {
        size_t h = p->jhold.n;
        p->jhold.n = 0;
        p->js = OUTP_J_PLAIN;
        emit_text(p, p->jhold.p, h);
    }
}

/* ---- the marker scanner ----------------------------------------------------- */

outp_scan_result outp_scan(const char *b, size_t n, const outp_marker *m, size_t nm, bool final,
                           size_t *at, size_t *which) {
    for (size_t i = 0; i < n; i++) {
        size_t best = nm;
        bool partial = false;
        for (size_t k = 0; k < nm; k++) {
            if (b[i] != m[k].s[0]) continue;
            size_t avail = n - i;
            if (avail >= m[k].len) {
                if (memcmp(b + i, m[k].s, m[k].len) == 0 && (best == nm || m[k].len < m[best].len))
                    best = k;
            } else if (!final && memcmp(b + i, m[k].s, avail) == 0) {
                partial = true;
            }
        }
        if (best < nm) {
            *at = i;
            *which = best;
            return OUTP_SCAN_FOUND;
        }
        if (partial) {
            *at = i;
            return OUTP_SCAN_HOLD;
        }
    }
    *at = n;
    return OUTP_SCAN_NONE;
}

/* ---- UTF-8 assembly ----------------------------------------------------------- */

static const char REPLACEMENT[] = "\xef\xbf\xbd";

static void u8_push(outp_parser *p, unsigned char c) {
    for (;;) {
        if (p->u8_need == 0) {
            unsigned char lo = 0x80, hi = 0xBF;
            int need;
            if (c < 0x80) {
                di_buf_add(&p->in, (const char *)&c, 1);
                return;
            } else if (c >= 0xC2 && c <= 0xDF) {
                need = 1;
            } else if (c >= 0xE0 && c <= 0xEF) {
                need = 2;
                if (c == 0xE0) lo = 0xA0;
                if (c == 0xED) hi = 0x9F;
            } else if (c >= 0xF0 && c <= 0xF4) {
                need = 3;
                if (c == 0xF0) lo = 0x90;
                if (c == 0xF4) hi = 0x8F;
            } else {
                di_buf_add(&p->in, REPLACEMENT, 3);
                return;
            }
            p->u8[0] = c;
            p->u8_n = 1;
            p->u8_need = need;
            p->u8_lo = lo;
            p->u8_hi = hi;
            return;
        }
        if (c >= p->u8_lo && c <= p->u8_hi) {
            p->u8[p->u8_n++] = c;
            p->u8_lo = 0x80;
            p->u8_hi = 0xBF;
            if (--p->u8_need == 0) di_buf_add(&p->in, (const char *)p->u8, (size_t)p->u8_n);
            return;
        }
        /* The sequence so far is a maximal invalid subpart: one U+FFFD, then
         * c starts afresh. */
        di_buf_add(&p->in, REPLACEMENT, 3);
        p->u8_need = 0;
        p->u8_n = 0;
    }
}

static void u8_append(outp_parser *p, const char *bytes, size_t len) {
    const unsigned char *s = (const unsigned char *)bytes;
    size_t i = 0;
    while (i < len) {
        if (p->u8_need == 0) { /* fast path: a run of ASCII */
            size_t j = i;
            while (j < len && s[j] < 0x80) j++;
            if (j > i) {
                di_buf_add(&p->in, bytes + i, j - i);
                i = j;
                continue;
            }
        }
        u8_push(p, s[i++]);
    }
}

/* ---- states ----------------------------------------------------------------- */

static bool step_think_start(outp_parser *p, bool final) {
    const char *b = outp_cur(p);
    size_t n = outp_avail(p), k = 0, tl = sizeof THINK_OPEN - 1;
    while (k < n && k < MAX_LEAD_WS && outp_is_ws(b[k])) k++;
    size_t rest = n - k;
    if (k == MAX_LEAD_WS) { /* that much whitespace: no <think> after it */
        p->st = p->think_seen_open ? OUTP_S_REASONING : OUTP_S_ANSWER;
        return true;
    }
    if (rest >= tl && memcmp(b + k, THINK_OPEN, tl) == 0) {
        outp_consume(p, k + tl);
        p->st = OUTP_S_REASONING;
        return true;
    }
    if (rest < tl && memcmp(b + k, THINK_OPEN, rest) == 0 && !final) return false;
    p->st = p->think_seen_open ? OUTP_S_REASONING : OUTP_S_ANSWER;
    return true;
}

static bool step_reasoning(outp_parser *p, bool final) {
    const char *b = outp_cur(p);
    size_t n = outp_avail(p), at, w;
    outp_scan_result r = outp_scan(b, n, &think_close, 1, final, &at, &w);
    outp_emit(p, OUTP_EV_REASONING, b, at);
    if (r == OUTP_SCAN_FOUND) {
        outp_consume(p, at + think_close.len);
        p->st = OUTP_S_ANSWER;
        p->lead_trim = true;
        return true;
    }
    outp_consume(p, at);
    return at > 0;
}

/* Start of the whitespace run that ends b[0..c), given that b[0..ws) is all
 * whitespace (so a long run is not walked again on every feed). */
static size_t trail_ws(const char *b, size_t c, size_t ws) {
    while (c > ws && outp_is_ws(b[c - 1])) c--;
    return c <= ws ? 0 : c;
}

static bool step_answer(outp_parser *p, bool final) {
    const char *b = outp_cur(p);
    size_t n = outp_avail(p), at, w;
    if (p->lead_trim) {
        size_t k = 0;
        while (k < n && outp_is_ws(b[k])) k++;
        outp_consume(p, k);
        if (k == n) return k > 0;
        p->lead_trim = false;
        b += k;
        n -= k;
    }
    /* Held whitespace was scanned already; positions without a marker start
     * stay so as input grows, so only the rest is scanned again. */
    size_t skip = p->ans_skip < n ? p->ans_skip : 0;
    outp_scan_result r = outp_scan(b + skip, n - skip, p->amk, p->n_amk, final, &at, &w);
    at += skip;
    p->ans_skip = 0;
    if (r == OUTP_SCAN_FOUND && w < p->n_openers) {
        size_t c = trail_ws(b, at, skip);
        outp_emit_answer(p, b, c);
        outp_consume(p, at + p->amk[w].len);
        if (p->cfg.syntax == OUTP_SYNTAX_DSML)
            p->st = OUTP_S_BLOCK;
        else
            outp_jcalls_open(p, p->amk[w].s);
        return true;
    }
    if (r == OUTP_SCAN_FOUND) {
        outp_emit_answer(p, b, p->cfg.keep_stop ? at + p->amk[w].len : at);
        json_flush(p);
        outp_consume(p, outp_avail(p));
        p->sum.stop_index = p->stop_of[w];
        p->st = OUTP_S_DONE;
        outp_event ev = {.kind = OUTP_EV_STOP,
                         .text = p->amk[w].s,
                         .len = p->amk[w].len,
                         .index = p->stop_of[w]};
        p->cb(p->ctx, &ev);
        return true;
    }
    size_t c = p->n_openers && !final ? trail_ws(b, at, skip) : at;
    outp_emit_answer(p, b, c);
    outp_consume(p, c);
    p->ans_skip = at - c;
    return c > 0;
}

static void run(outp_parser *p, bool final) {
    if (p->forced_invoke) outp_dsml_start_forced(p);
    for (;;) {
        bool prog = false;
        switch (p->st) {
        case OUTP_S_THINK_START:
            prog = step_think_start(p, final);
            break;
        case OUTP_S_REASONING:
            prog = step_reasoning(p, final);
            break;
        case OUTP_S_ANSWER:
            prog = step_answer(p, final);
            break;
        case OUTP_S_BLOCK:
            prog = outp_step_block(p, final);
            break;
        case OUTP_S_INVOKE:
            prog = outp_step_invoke(p, final);
            break;
        case OUTP_S_PARAM_STR:
            prog = outp_step_param_str(p, final);
            break;
        case OUTP_S_PARAM_JSON:
            prog = outp_step_param_json(p, final);
            break;
        case OUTP_S_JBLOCK:
            prog = outp_step_jblock(p, final);
            break;
        case OUTP_S_JCALL:
            prog = outp_step_jcall(p, final);
            break;
        case OUTP_S_DONE:
            outp_consume(p, outp_avail(p));
            break;
        }
        if (!prog) break;
    }
    /* Compact: keep only the undecided tail. */
    size_t rest = outp_avail(p);
    if (p->off) {
        memmove(p->in.p, p->in.p + p->off, rest);
        p->in.n = rest;
        p->off = 0;
    }
}

int outp_feed(outp_parser *p, const char *bytes, size_t len, outp_event_fn cb, void *ctx) {
    if (p->finished || p->st == OUTP_S_DONE) return p->st == OUTP_S_DONE;
    p->cb = cb;
    p->ctx = ctx;
    u8_append(p, bytes, len);
    run(p, false);
    return p->st == OUTP_S_DONE;
}

const outp_summary *outp_finish(outp_parser *p, outp_event_fn cb, void *ctx) {
    if (p->finished) return &p->sum;
    p->cb = cb;
    p->ctx = ctx;
    if (p->st != OUTP_S_DONE && p->u8_need) {
        di_buf_add(&p->in, REPLACEMENT, 3);
        p->u8_need = 0;
    }
    run(p, true);
    switch (p->st) {
    case OUTP_S_THINK_START:
    case OUTP_S_REASONING:
        p->sum.reasoning_open = true;
        break;
    case OUTP_S_BLOCK:
    case OUTP_S_INVOKE:
    case OUTP_S_PARAM_STR:
    case OUTP_S_PARAM_JSON:
        outp_dsml_truncated(p);
        break;
    case OUTP_S_JBLOCK:
    case OUTP_S_JCALL:
        outp_jcalls_truncated(p);
        break;
    case OUTP_S_ANSWER:
    case OUTP_S_DONE:
        break;
    }
    if (p->cfg.json_mode) {
        json_flush(p);
        json_error_t je;
        json_t *j = json_loadb(p->jtext.p ? p->jtext.p : "", p->jtext.n,
                               JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
        p->sum.json_valid = j != NULL;
        json_decref(j);
    }
    p->sum.n_tool_calls = p->n_calls;
    p->finished = true;
    p->cur_call = -1;
    outp_event ev = {.kind = OUTP_EV_FINISH, .index = -1, .summary = &p->sum};
    p->cb(p->ctx, &ev);
    return &p->sum;
}

bool outp_prompt_opens_think(const char *prompt, size_t len) {
    size_t tl = sizeof THINK_OPEN - 1;
    while (len && outp_is_ws(prompt[len - 1])) len--;
    return len >= tl && memcmp(prompt + len - tl, THINK_OPEN, tl) == 0;
}
