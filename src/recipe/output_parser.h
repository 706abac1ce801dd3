/* output_parser.h — the streaming parser that turns a model's output text,
 * arriving in chunks of any size (a chunk may end inside a UTF-8 character, a
 * tag, a tool name or a parameter value), into structured events: reasoning
 * text, answer text, tool calls with incrementally streamed JSON arguments,
 * a matched stop string, errors and the finish. The HTTP layer maps the
 * events onto each protocol (Chat Completions, Responses, Messages).
 *
 * Output markup understood (DeepSeek, DESIGN.md §2):
 *   reasoning   ... `</think>` ends it; with cfg.think_opened the output
 *               starts in reasoning, else a leading `<think>` (after at most
 *               63 bytes of whitespace, dropped) opens it. A repeated leading
 *               `<think>` in an opened reasoning is dropped too.
 *   tool calls  `<｜DSML｜tool_calls>` (V4) or `<｜DSML｜ calls>` (V4.1) or
 *               `<｜DSML｜function_calls>` (V3.2), holding
 *               `<｜DSML｜invoke name="N">` and per argument
 *               `<｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>`;
 *               inside a block a space after `｜DSML｜` is accepted everywhere.
 *               string="true": V is a raw string (JSON-escaped as it streams);
 *               string="false": V is JSON, validated at `</｜DSML｜parameter>`
 *               and passed through verbatim (trimmed); invalid JSON falls back
 *               to the raw text as a JSON string. A missing string attribute
 *               means "true".
 *   JSON mode   the answer starts (after whitespace) with a ```json fence or
 *               `{` / `[`: only the JSON value is emitted (fence and any text
 *               after the value dropped); otherwise the answer is plain text.
 *   stops       match only in answer text (never in reasoning or tool markup);
 *               the text before the stop is emitted, the rest dropped. Where
 *               markers overlap, the earliest match wins, and at one position
 *               the shortest (so a stop string can pre-empt a tool block).
 *
 * Feeding: give it the detokenized text with control tokens KEPT
 * (tok_stream_new(t, false)): `<think>`, `</think>` and the DSML tags are
 * added tokens in some tokenizers and would vanish otherwise. End-of-sequence
 * is the engine's business (stop on the EOS id; do not feed its text).
 *
 * Guarantees:
 *   - results (the concatenated deltas per channel, tool calls, stop, errors)
 *     do not depend on how the output was chunked;
 *   - text is emitted as soon as it is confirmed: what is held back is only a
 *     possible marker prefix (tag or stop string), an incomplete UTF-8
 *     character and, when tools are on, trailing whitespace of answer text
 *     (dropped if a tool block follows);
 *   - every delta is non-empty, valid UTF-8 and never splits a character
 *     (invalid input bytes become U+FFFD);
 *   - the TOOL_ARGS deltas of one call always concatenate to one valid JSON
 *     object, e.g. `{"city": "Paris", "days": 3}`, even when the call is cut
 *     short.
 * Whitespace policy: leading whitespace of the answer after `</think>` and
 * after a tool block is dropped; whitespace directly before a tool block is
 * dropped; reasoning text is passed verbatim.
 *
 * Malformed or truncated tool markup (chosen behaviour): an OUTP_EV_ERROR
 * event names the problem; an open call is closed with the arguments parsed
 * so far (an unfinished string value is closed, an unfinished JSON value is
 * left out) and its OUTP_EV_TOOL_END has complete == false. For malformed
 * markup inside a block (not truncation), the text from the offending tag on
 * is then parsed as answer text again, so nothing the model wrote is lost.
 * Reporting it as an error rather than turning the whole block back into
 * text is deliberate: by then the call's start and arguments have streamed.
 * Whether a call names a tool the request offered is the caller's check.
 *
 * Forced start (cfg.start_in_block / cfg.start_invoke): for servers that
 * enforce a tool choice by ending the prompt with the block opener (and the
 * invoke tag of a named tool), the model's continuation is parsed from its
 * first byte as the inside of that block or invoke. The results are the same
 * as parsing opener + output without the option (ids aside), so every rule
 * above holds; the forced call's TOOL_START comes with the first feed (or the
 * finish, if nothing was fed).
 *
 * Events arrive in output order: for each call TOOL_START, TOOL_ARGS...,
 * TOOL_END, never interleaved with text; STOP (if any) is the last event
 * before FINISH. Typical use:
 *
 *     outp_parser *p = outp_new(&cfg, &err);
 *     while (generating) if (outp_feed(p, text, len, on_event, ctx)) break;
 *     outp_finish(p, on_event, ctx);  // then map summary->stop_index and
 *     outp_free(p);                   // n_tool_calls to a finish reason
 *
 * One parser per response; not thread-safe; no global state. */
#ifndef DI_OUTPUT_PARSER_H
#define DI_OUTPUT_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

typedef struct outp_parser outp_parser;

/* Which tool-block spelling opens a tool-call block. */
typedef enum {
    OUTP_DSML_AUTO = 0, /* any of the below */
    OUTP_DSML_V4,       /* <｜DSML｜tool_calls> */
    OUTP_DSML_V41,      /* <｜DSML｜ calls> */
    OUTP_DSML_V32,      /* <｜DSML｜function_calls> */
} outp_dsml;

/* How tool calls are written: DSML blocks (DeepSeek V4, the default), or a
 * JSON body in Hermes tags (Qwen, the ChatML renderer) or in DeepSeek V3's
 * markers (outp_jcalls.c). */
typedef enum {
    OUTP_SYNTAX_DSML = 0,
    OUTP_SYNTAX_HERMES,
    OUTP_SYNTAX_DSV3,
} outp_syntax;

typedef struct outp_config {
    bool reasoning;           /* the model may reason before answering */
    bool think_opened;        /* the prompt already ended with <think> (needs reasoning) */
    bool tools;               /* recognise tool-call blocks */
    outp_syntax syntax;       /* ... written this way */
    outp_dsml dsml;           /* DSML: spelling of the block tag */
    bool json_mode;           /* response_format json_object: see the top comment */
    const char *const *stops; /* stop strings (UTF-8, NUL-terminated; copied; "" ignored) */
    size_t n_stops;           /* at most OUTP_MAX_STOPS */
    bool keep_stop;           /* the stop string that ends the answer is part of it (vLLM's) */
    uint64_t id_seed;         /* tool-call ids derive from it; 0: seeded from the clock */
    /* Forced tool calls (the prompt itself ended by opening the block, see
     * below). start_in_block: the output starts inside a tool-call block, as
     * if the opener had been parsed (reasoning, think_opened and JSON mode are
     * ignored for the start; needs tools). start_invoke (copied; implies
     * start_in_block): the output starts inside `<｜DSML｜invoke name="N">`
     * for this N, and the parser emits that call's OUTP_EV_TOOL_START (and
     * its opening "{") first, as if the model had written the tag. */
    bool start_in_block;
    const char *start_invoke;
} outp_config;

#define OUTP_MAX_STOPS    64
#define OUTP_MAX_STOP_LEN 1024

typedef enum {
    OUTP_EV_REASONING,  /* text: reasoning delta */
    OUTP_EV_TEXT,       /* text: answer delta */
    OUTP_EV_TOOL_START, /* index, id, name */
    OUTP_EV_TOOL_ARGS,  /* index, text: arguments JSON delta */
    OUTP_EV_TOOL_END,   /* index, complete */
    OUTP_EV_STOP,       /* index: which stop string (cfg.stops index), text: the string */
    OUTP_EV_ERROR,      /* text: one line naming the problem (NUL-terminated); index: the
                           call it concerns, -1 if none. Not fatal: parsing goes on */
    OUTP_EV_FINISH,     /* summary */
} outp_event_kind;

typedef struct outp_summary {
    int n_tool_calls;    /* calls started */
    int n_errors;        /* OUTP_EV_ERROR events */
    int stop_index;      /* matched stop string, -1 if none */
    bool reasoning_open; /* the output ended inside reasoning (no </think>) */
    bool json_valid;     /* JSON mode: the emitted answer parses as JSON */
} outp_summary;

/* Pointers in an event are valid only during the callback. */
typedef struct outp_event {
    outp_event_kind kind;
    const char *text;
    size_t len;
    int index;
    const char *id;              /* TOOL_START: "call_" + 24 alphanumerics */
    const char *name;            /* TOOL_START: the function name */
    bool complete;               /* TOOL_END: false when the call was cut short or malformed */
    const outp_summary *summary; /* FINISH */
} outp_event;

typedef void (*outp_event_fn)(void *ctx, const outp_event *ev);

/* NULL with err set if a stop string is invalid UTF-8 or too long, or there
 * are too many. */
outp_parser *outp_new(const outp_config *cfg, di_err *err);
/* Parses the next chunk of output, calling cb for every event it confirms.
 * Returns 1 once a stop string has matched (the caller should stop
 * generating; later input is ignored), else 0. */
int outp_feed(outp_parser *p, const char *bytes, size_t len, outp_event_fn cb, void *ctx);
/* End of output: flushes held-back text, closes or reports anything left
 * open, then emits OUTP_EV_FINISH. Later feeds are ignored. Returns the
 * summary (owned by p). */
const outp_summary *outp_finish(outp_parser *p, outp_event_fn cb, void *ctx);
void outp_free(outp_parser *p);

/* Whether a rendered prompt ends by opening reasoning (`<think>` followed
 * only by whitespace), i.e. the value for cfg.think_opened (with
 * cfg.reasoning on). */
bool outp_prompt_opens_think(const char *prompt, size_t len);

#endif
