/* outp_internal.h — what the output parser's two files share and nobody else
 * sees: the parser state, the marker scanner and event emitters
 * (output_parser.c) and the DSML tool-block states (outp_dsml.c).
 *
 * Shape: every accepted byte (already made valid UTF-8) is appended to one
 * buffer of undecided input, buf[off..len). The state's step function decides
 * what a prefix of it is, emits events and consumes it, or returns without
 * progress when it needs more input. Because a step never looks past what it
 * consumes except to decide, and every decision depends only on the bytes
 * seen, the results cannot depend on where the chunks were cut. */
#ifndef DI_OUTP_INTERNAL_H
#define DI_OUTP_INTERNAL_H

#include "recipe/output_parser.h"

typedef enum {
    OUTP_S_THINK_START, /* reasoning on: optional leading <think> */
    OUTP_S_REASONING,   /* until </think> */
    OUTP_S_ANSWER,      /* answer text: tool-block openers and stop strings */
    OUTP_S_BLOCK,       /* inside a tool block, between invokes */
    OUTP_S_INVOKE,      /* inside an invoke, between parameters */
    OUTP_S_PARAM_STR,   /* string="true" value */
    OUTP_S_PARAM_JSON,  /* string="false" value */
    OUTP_S_JBLOCK,      /* JSON-bodied calls: a DeepSeek V3 block, between calls */
    OUTP_S_JCALL,       /* ... a call's body, until its closing marker */
    OUTP_S_DONE,        /* a stop string matched: everything after is dropped */
} outp_state;

/* JSON-mode filter over answer text. */
typedef enum { OUTP_J_START, OUTP_J_VALUE, OUTP_J_PLAIN, OUTP_J_DONE } outp_jstate;

/* A marker the scanner looks for. */
typedef struct outp_marker {
    const char *s;
    size_t len;
} outp_marker;

/* Scanner result over b[0..n): the earliest position where a marker matches
 * in full (the shortest one there) or could still match (a proper prefix at
 * the end of b; not when `final`). */
typedef enum { OUTP_SCAN_NONE, OUTP_SCAN_HOLD, OUTP_SCAN_FOUND } outp_scan_result;
outp_scan_result outp_scan(const char *b, size_t n, const outp_marker *m, size_t nm, bool final,
                           size_t *at, size_t *which);

#define OUTP_MAX_MARKERS (OUTP_MAX_STOPS + 4)

struct outp_parser {
    outp_config cfg;
    outp_state st;
    bool think_seen_open; /* THINK_START: reasoning is already open (prompt opened it) */
    bool lead_trim;       /* ANSWER: drop leading whitespace */
    size_t ans_skip;      /* ANSWER: held whitespace already scanned (no marker starts there) */
    bool finished;
    outp_event_fn cb;
    void *ctx;

    /* UTF-8 assembly of the raw input. */
    unsigned char u8[4];
    int u8_n, u8_need;
    unsigned char u8_lo, u8_hi;

    di_buf in; /* undecided bytes: in.p[off..in.n) */
    size_t off;

    /* Answer-state markers: tool openers first, then stops. */
    outp_marker amk[OUTP_MAX_MARKERS];
    size_t n_amk, n_openers;
    char **stops; /* copies, by cfg index (NULL for "" stops) */
    int *stop_of; /* amk index -> cfg stop index */

    /* JSON mode. */
    outp_jstate js;
    int jdepth;
    bool jstr, jesc;
    int jfence;   /* J_START: 0 leading ws, 1-3 backticks, 4 language, 5 ws after it */
    di_buf jhold; /* J_START: held bytes, emitted verbatim if no JSON follows */
    di_buf jtext; /* emitted answer text, for the validity check */

    /* Tool calls. */
    int n_calls;  /* calls started */
    int cur_call; /* index of the open call, -1 if none */
    char *cur_name;
    bool first_param;
    char *param_key; /* PARAM_JSON: the JSON-escaped key, emitted with the value */
    di_buf pval;     /* PARAM_JSON: the raw value so far */
    di_buf scratch;
    uint64_t id_state;
    char *forced_invoke; /* cfg.start_invoke, until its TOOL_START is emitted */
    bool cstr, cesc;     /* JCALL: the body so far ends inside a JSON string (after a backslash) */

    outp_summary sum;
};

/* Answer-state markers (output_parser.c). */
void outp_add_marker(outp_parser *p, const char *s);

/* Emitters (output_parser.c). */
void outp_emit(outp_parser *p, outp_event_kind k, const char *s, size_t n);
void outp_emit_error(outp_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Answer text: through the JSON-mode filter when on. */
void outp_emit_answer(outp_parser *p, const char *s, size_t n);

/* Undecided input. */
static inline const char *outp_cur(const outp_parser *p) {
    return p->in.p + p->off;
}
static inline size_t outp_avail(const outp_parser *p) {
    return p->in.n - p->off;
}
static inline void outp_consume(outp_parser *p, size_t n) {
    p->off += n;
}
static inline bool outp_is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}
/* A JSON text's byte c as to its strings: true where c is inside one or
 * opens one (str: inside, esc: after a backslash there, both updated). */
static inline bool outp_json_quoted(bool *str, bool *esc, char c) {
    if (*str) {
        if (*esc)
            *esc = false;
        else if (c == '\\')
            *esc = true;
        else if (c == '"')
            *str = false;
        return true;
    }
    return *str = c == '"';
}
/* s[0..n) without whitespace at either end; false where nothing is left. */
static inline bool outp_trim(const char **s, size_t *n) {
    while (*n && outp_is_ws(**s)) (*s)++, (*n)--;
    while (*n && outp_is_ws((*s)[*n - 1])) (*n)--;
    return *n > 0;
}

/* DSML states (outp_dsml.c). Each returns true if it made progress. */
bool outp_step_block(outp_parser *p, bool final);
bool outp_step_invoke(outp_parser *p, bool final);
bool outp_step_param_str(outp_parser *p, bool final);
bool outp_step_param_json(outp_parser *p, bool final);
/* A call's TOOL_START (with a fresh id) and its arguments' opening "{"; its
 * closing "}" and TOOL_END. */
void outp_start_call(outp_parser *p, const char *name, size_t nlen);
void outp_end_call(outp_parser *p, bool complete);
/* cfg.start_invoke: starts the forced call (TOOL_START, "{") and enters
 * the invoke state. Called once, with the callback set. */
void outp_dsml_start_forced(outp_parser *p);
/* End of output inside a tool block: close what is open, report it. */
void outp_dsml_truncated(outp_parser *p);

/* b[0..n) is one JSON value, whitespace around it allowed (RFC 8259's
 * syntax, numbers of any size; outp_jcalls.c). */
bool outp_json_value(const char *b, size_t n);

/* JSON-bodied calls (outp_jcalls.c): the syntax's openers into the answer
 * markers; the state an opener found in the answer enters; the forced start
 * (name: the named call's body as the prompt began it, or NULL: the block);
 * the steps; the end of output inside a call. */
void outp_jcalls_openers(outp_parser *p);
void outp_jcalls_open(outp_parser *p, const char *opener);
void outp_jcalls_start_forced(outp_parser *p, const char *name);
bool outp_step_jblock(outp_parser *p, bool final);
bool outp_step_jcall(outp_parser *p, bool final);
void outp_jcalls_truncated(outp_parser *p);

#endif
