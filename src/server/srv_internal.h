/* srv_internal.h — what the server's files share: the protocol-neutral
 * request (srv_req) every protocol parser fills, the failure record every
 * error body is made from, the generation state (srv_gen: engine events ->
 * per-branch detokenizer + output parser -> neutral events), and the table
 * of per-protocol operations (srv_api) that turns neutral events into SSE
 * bytes or a JSON body.
 *
 * Threads: the HTTP layer owns a srv_gen; the engine's step thread calls the
 * gen_on_* entry points, which take g->mu and append SSE bytes to g->out (or
 * accumulate for a body); the HTTP thread waits on g->cv. Nothing here is
 * global. */
#ifndef DI_SRV_INTERNAL_H
#define DI_SRV_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "recipe/conversation.h"
#include "recipe/output_parser.h"
#include "recipe/render.h"
#include "recipe/tokenizer.h"
#include "server/resp_store.h"
#include "server/server.h"

/* --- failures ------------------------------------------------------------ */
typedef enum { SRV_CHAT, SRV_COMPLETIONS, SRV_RESPONSES, SRV_MESSAGES } srv_proto;

typedef struct srv_fail {
    int status;    /* HTTP status */
    char kind[40]; /* "invalid_request_error", "authentication_error", ... */
    char param[128];
    char msg[DI_ERR_LEN];
} srv_fail;

/* Fills f and returns -1. param may be NULL. */
int srv_failf(srv_fail *f, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The protocol's error body (OpenAI {"error":{...}}, Anthropic
 * {"type":"error","error":{...}}) as malloc'd compact JSON. */
char *srv_error_body(srv_proto p, const srv_fail *f);

/* --- the protocol-neutral request ---------------------------------------- */
typedef enum { SRV_TC_AUTO = 0, SRV_TC_NONE, SRV_TC_REQUIRED, SRV_TC_NAMED } srv_tool_choice;

#define SRV_MAX_STOPS        64
#define SRV_MAX_STOP_IDS     64        /* stop_token_ids */
#define SRV_MAX_ALLOWED_IDS  (1 << 18) /* allowed_token_ids */
#define SRV_MAX_BAD_WORDS    64        /* bad_words, each at most SRV_MAX_BAD_WORD bytes */
#define SRV_MAX_BAD_WORD     256
#define SRV_MAX_FORCED_CALLS 8 /* tool_choice required, parallel_tool_calls: calls held at most */

/* A completions prompt: text, or token ids when text is NULL. */
typedef struct srv_prompt {
    char *text;
    size_t len;
    tok_ids ids;
} srv_prompt;

typedef struct srv_req {
    srv_proto proto;
    char *model;
    conversation *conv; /* chat-like protocols */
    char *prompt;       /* completions: text prompt (NULL if ids) */
    size_t prompt_len;
    tok_ids prompt_ids; /* completions: token-id prompt */
    char *suffix;       /* completions: the text after the hole to fill (NULL: none) */
    size_t suffix_len;
    srv_prompt *more; /* completions: a batch's prompts after the first */
    int n_more;
    /* Responses: this request's own input items (an array), the response it
     * continues, and whether its response is kept (store, default true). */
    json_t *resp_input;
    char *resp_prev;
    bool resp_store;
    bool stream, include_usage;
    bool continuous_usage; /* vLLM's stream_options.continuous_usage_stats */
    int n;
    /* completions' best_of above n: n is best_of (the branches generated) and
     * best_keep the n asked for, the best by mean token logprob; 0: off */
    int best_keep;
    int max_tokens; /* -1: unset */
    samp_params samp;
    samp_bias *bias;
    char *stops[SRV_MAX_STOPS];
    int n_stops;
    bool logprobs;
    int top_logprobs;
    bool json_mode;
    char *json_schema; /* json_schema's schema (compact JSON), or NULL */
    char *regex;       /* not JSON: the reply matches this pattern whole (structured.c) */
    char *grammar;     /* ... or this grammar (GBNF, grammar.h) */
    srv_tool_choice tool_choice;
    char *tool_name; /* SRV_TC_NAMED */
    /* OpenAI's allowed_tools choice: the tools (by name) calls may name; the
     * others stay in the prompt. NULL: all. */
    char **allowed_tools;
    int n_allowed_tools;
    /* Set by srv_prepare: tool_choice required/named is enforced by ending the
     * prompt with the DSML block opener (and the named invoke), thinking off;
     * the output parser starts inside it (routes.c has the details). */
    bool tool_forced;
    outp_syntax tool_syntax; /* set by srv_render_conv: how the format writes tool calls */
    bool calls_written;      /* ... whether it does (Llama 3's template offers no tools) */
    /* ... and where the calls are forced and written as JSON, the forms
     * they are held to (engine_request.call_forms; strings owned here) */
    jg_call_form *call_forms;
    int n_call_forms, max_calls;
    const char *calls_close;
    const char *calls_trigger; /* strict tools under tool_choice auto: the calls' opener */
    bool calls_dsml;           /* the arguments are DSML parameters */
    bool calls_answer; /* structured output with tools offered: an answer (json_schema) or calls */
    bool parallel_tool_calls;
    bool echo; /* completions */
    /* completions: max_tokens 0, nothing generated (with echo and logprobs:
     * the prompt scored, what evaluation harnesses ask for) */
    bool prompt_only;
    bool ignore_eos; /* vLLM extension: keep going past EOS */
    int *stop_ids;   /* vLLM's stop_token_ids: tokens that end the reply (left out of it) */
    int n_stop_ids;
    bool keep_stop;      /* vLLM's include_stop_str_in_output */
    int prompt_logprobs; /* vLLM's: alternatives per prompt token, -1 unset */
    int truncate_prompt; /* vLLM's truncate_prompt_tokens: the prompt's last ones kept; 0 off */
    int priority;        /* vLLM's: lower is served first (engine_request.priority) */
    bool no_bos;         /* vLLM's add_special_tokens: false (completions): no BOS first */
    bool keep_special; /* vLLM's skip_special_tokens: false (completions): control tokens' text kept
                        */
    bool token_strs;   /* vLLM's /tokenize return_token_strs */
    bool tokens_as_ids; /* vLLM's return_tokens_as_token_ids: logprobs' tokens "token_id:N" */
    bool background;    /* Responses: answered at once, run on, polled by GET (srv_api.started) */
    di_buf chat_echo;   /* vLLM's chat echo: the last (assistant) message's text, said first */
    int *allowed_ids;   /* vLLM's allowed_token_ids */
    int n_allowed_ids;
    char **bad_words; /* vLLM's, as sent; srv_prepare makes them bad_ids */
    int n_bad_words;
    int *bad_ids; /* samp_params.bad */
    int n_bad_ids;
} srv_req;

/* Limits the parsers enforce (from srv_opts). */
typedef struct srv_limits {
    int max_n, max_stops, max_json_depth;
    int max_batch;          /* prompts in one completions request (0: 1) */
    resp_store *responses;  /* Responses: what previous_response_id continues (NULL: none) */
    const char *model_name; /* requests naming another model get 404 (NULL: any) */
    bool priority;          /* vLLM's priority field taken (else only 0) */
} srv_limits;

void srv_req_free(srv_req *r);

/* Typed field readers shared by the parsers: absent (or null) leaves *out as
 * is and returns 0; a wrong type or range fails naming the field. */
int srv_get_bool(const json_t *o, const char *key, bool *out, srv_fail *f);
int srv_get_int(const json_t *o, const char *key, long long lo, long long hi, int *out,
                srv_fail *f);
int srv_get_num(const json_t *o, const char *key, double lo, double hi, float *out, srv_fail *f);
/* NULL when absent; fails (returns -1) when present and not a string. */
int srv_get_str(const json_t *o, const char *key, const char **out, srv_fail *f);
/* stop: a string or an array of strings (field name given for errors). */
int srv_get_stops(const json_t *o, const char *key, srv_req *r, const srv_limits *lim, srv_fail *f);
/* Sampling fields every protocol shares in name (temperature, top_p, seed,
 * penalties, top_k, min_p, repetition_penalty). */
int srv_get_sampling(const json_t *o, srv_req *r, float max_temperature, srv_fail *f);
/* A JSON string from bytes, invalid UTF-8 replaced by U+FFFD. */
json_t *srv_jstr(const char *s, size_t len);
/* Deepest nesting of a JSON value. */
int srv_json_depth(const json_t *v);

/* --- generation ---------------------------------------------------------- */
typedef enum {
    GEV_REASONING,
    GEV_TEXT,
    GEV_TOOL_START,
    GEV_TOOL_ARGS,
    GEV_TOOL_END,
    GEV_LOGPROB,
} gev_kind;

typedef struct gev {
    gev_kind kind;
    const char *text;
    size_t len;
    int tool; /* tool index within the branch */
    const char *id, *name;
    bool complete;   /* GEV_TOOL_END: the call was closed properly */
    json_t *logprob; /* GEV_LOGPROB: {"token","logprob","bytes","top_logprobs"} */
} gev;

typedef enum { FIN_NONE = 0, FIN_STOP, FIN_LENGTH, FIN_TOOLS, FIN_CANCELLED, FIN_ERROR } srv_finish;

typedef struct gen_tool {
    char *id, *name;
    di_buf args;
    bool complete; /* ended with </｜DSML｜invoke> (not cut short or malformed) */
} gen_tool;

typedef struct gen_branch {
    tok_stream *ts;
    outp_parser *p;
    di_buf reasoning, text;
    gen_tool *tools;
    int n_tools, cap_tools;
    json_t *logprobs; /* array of token entries (every token) */
    double lp_sum;    /* the logprobs of the tokens generated (an end of sequence too, not
                         those past a stop string), and how many */
    int lp_count;
    json_t *lp_pending; /* streams: entries not sent yet (a protocol sends and clears them
                           with its next text; GEV_LOGPROB never reaches its event) */
    srv_finish finish;
    int stop_index; /* matched stop string or -1 */
    bool stopped;   /* a stop string matched: later tokens are ignored */
    bool done;
    engine_usage usage;
    char *error;
    int n_tokens;
    double t_last;
    /* protocol stream state */
    int blk;         /* open block: 0 none, else a GEV_* kind + 1 */
    int blk_index;   /* index of the open block / next block */
    int tool_open;   /* tool index of the open block */
    size_t blk_from; /* where the open block's text starts in reasoning/text */
    bool started;
} gen_branch;

typedef struct srv_api srv_api;
typedef struct srv_metrics srv_metrics;

typedef struct gen_env {
    const tokenizer *tok;
    const char *model_name;
    srv_metrics *metrics;  /* may be NULL */
    resp_store *responses; /* Responses kept here (NULL: none) */
} gen_env;

/* What a response keeps per prompt: one, or each of a completions batch. */
typedef struct gen_prompt {
    uint64_t engine_id; /* its engine request (0: not submitted) */
    char *echo;         /* completions echo */
    size_t echo_len;
    /* A scored prompt (echo with logprobs, or prompt_logprobs), from the
     * engine's first event: its entries (gen_prompt_logprobs), and the
     * legacy form, one logprob entry per prompt token (the first one's
     * logprob and top_logprobs null). */
    samp_out *scores;
    int n_scores;
    json_t *lp;
} gen_prompt;

typedef struct srv_gen {
    gen_env env;
    const srv_api *api;
    srv_req *req;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    di_buf out; /* stream bytes not yet sent */
    gen_branch *b;
    int n;
    int n_done;
    bool all_done, cancelled;
    engine *engine; /* set once submitted (NULL in tests) */
    /* Prompt p's branches are [p * per, (p + 1) * per); one prompt except
     * in a completions batch. */
    gen_prompt *prompts;
    int n_prompts, per;
    char id[48];
    long long created;
    int seq_no;
    int prompt_tokens, cached_tokens;
    bool think_opened, reasoning;
    double t_start, t_first;
} srv_gen;

/* A generation for a parsed request (which it borrows). think_opened: the
 * prompt ends inside <think>. NULL with f set if the parser config is bad. */
srv_gen *gen_new(const gen_env *env, const srv_api *api, srv_req *req, int prompt_tokens,
                 bool think_opened, srv_fail *f);
void gen_free(srv_gen *g);
/* vLLM's prompt_logprobs of prompt p (a new array): null for the first
 * token, then per token an object from token id to logprob, rank and
 * decoded_token (the token itself and req->prompt_logprobs alternatives). */
json_t *gen_prompt_logprobs(const srv_gen *g, int p);
/* Engine callback (user = srv_gen). */
void gen_on_engine_event(const engine_event *ev, void *user);
/* The same steps, for tests and the engine callback: a token's logprobs, a
 * piece of output text, the end of a branch. Take g->mu themselves. */
void gen_on_logprob(srv_gen *g, int branch, int token, float lp, const samp_logprob *top,
                    int n_top);
void gen_on_text(srv_gen *g, int branch, const char *text, size_t len);
void gen_on_final(srv_gen *g, int branch, engine_finish fin, engine_usage u, const char *error);
/* Starts the stream (api->begin) — call once before events arrive. */
void gen_begin(srv_gen *g);

/* SSE helpers for the api files (called with g->mu held). event may be NULL. */
void sse_json(srv_gen *g, const char *event, json_t *obj); /* steals obj */
void sse_raw(srv_gen *g, const char *line);
/* Total usage over branches. */
engine_usage gen_usage(const srv_gen *g);

/* --- per-protocol operations --------------------------------------------- */
struct srv_api {
    const char *path; /* "/v1/chat/completions" */
    const char *name; /* metrics label */
    srv_proto proto;
    int (*parse)(const json_t *body, srv_req *r, const srv_limits *lim, srv_fail *f);
    void (*begin)(srv_gen *g);                            /* stream start */
    void (*event)(srv_gen *g, int branch, const gev *ev); /* stream event */
    void (*branch_end)(srv_gen *g, int branch);           /* stream: branch finished */
    void (*scored)(srv_gen *g, int branch); /* stream: its prompt's lp is in, before any text */
    void (*end)(srv_gen *g);                /* stream: all branches finished */
    json_t *(*body)(srv_gen *g);            /* non-stream body */
    /* Responses' background mode: the response as it starts (in_progress),
     * stored for GET and answered at once; body then stores it finished. */
    json_t *(*started)(srv_gen *g);
    json_t *(*so_far)(srv_gen *g); /* ... as it stands while it runs (GET) */
    /* Set: the endpoint generates nothing, it answers this of the prompt's
     * ids (count_tokens, tokenize, detokenize; prompt.c). */
    json_t *(*answer)(const srv_req *r, const tok_ids *ids, const tokenizer *tok, int context);
};

/* Shared between the chat-like parsers (api_openai_chat.c). */
int srv_parse_tool_choice(const json_t *tc, srv_req *r, srv_fail *f);
int srv_apply_tool_choice(srv_req *r, srv_fail *f);
int srv_parse_thinking(const json_t *body, conversation *c, srv_fail *f);
int srv_parse_response_format(const json_t *rf, const char *name, srv_req *r, srv_fail *f);
/* r held to one JSON object following schema sch (json_mode, json_schema);
 * a 400 naming name (and what) where the decoder cannot hold it. */
int srv_set_json_schema(srv_req *r, const json_t *sch, const char *name, const char *what,
                        srv_fail *f);
/* vLLM's and SGLang's structured outputs (structured.c), chat and
 * completions: a schema, or plain text held to a pattern (r->regex). */
int srv_parse_structured(const json_t *body, srv_req *r, srv_fail *f);
/* vLLM's priority (chat and completions): an integer, lower served first,
 * preempting later classes; other than 0 only where lim->priority. */
int srv_get_priority(const json_t *body, srv_req *r, const srv_limits *lim, srv_fail *f);
/* GET /v1/responses/ID/input_items (OpenAI's list): the items that made
 * stored response id (earlier turns' input and output, then its own input;
 * string contents as input_text / output_text parts) as a page of at most
 * limit (1..100, default 20) in order (desc, the default, or asc), after
 * or before an item id; NULL with f's 404 or 400. */
json_t *srv_response_input_items(resp_store *s, const char *id, const char *limit,
                                 const char *order, const char *after, const char *before,
                                 srv_fail *f);
/* The sampling fields that need the vocabulary: stop and allowed token ids
 * inside it, and bad_words as vLLM tokenizes them (each word with its
 * leading whitespace stripped, and again after a space where that is as
 * many tokens and starts with another), into r->bad_ids / samp.bad. */
int srv_vocab_params(srv_req *r, const tokenizer *tok, srv_fail *f);
int srv_parse_tools(const json_t *tools, conversation *c, srv_fail *f);

extern const srv_api srv_api_chat, srv_api_completions, srv_api_responses, srv_api_messages,
    srv_api_count_tokens, srv_api_tokenize, srv_api_detokenize;

/* Shared JSON pieces. */
json_t *srv_usage_openai(const srv_gen *g);
/* stream_options: include_usage and vLLM's continuous_usage_stats: chunk
 * (of branch bi) gets the usage so far, the branch's tokens as completion
 * tokens. */
void srv_chunk_usage(const srv_gen *g, int bi, json_t *chunk);
/* Reads stream_options into r (chat and completions; params.c). */
int srv_get_stream_options(const json_t *body, srv_req *r, srv_fail *f);
const char *srv_finish_openai(srv_finish f);
json_t *srv_tool_args_json(const gen_tool *t); /* parsed arguments (object) */

/* --- request preparation (routes.c) -------------------------------------- */
typedef struct srv_prepared {
    tok_ids ids;
    tok_ids *more; /* a completions batch: the ids of r->more[i] */
    int n_more;
    bool think_opened;
} srv_prepared;
void srv_prepared_free(srv_prepared *p);
/* The ids of a completions batch's prompt q (0: the first, p->ids). */
static inline const tok_ids *srv_prepared_ids(const srv_prepared *p, int q) {
    return q ? &p->more[q - 1] : &p->ids;
}

/* Parses a body for api into r (validation, limits), renders and tokenizes
 * the prompt. tok may be NULL (fuzzing: stop after rendering). */
int srv_prepare(const srv_api *api, const char *body, size_t len, const srv_limits *lim,
                render_format fmt, const tokenizer *tok, srv_req *r, srv_prepared *out,
                srv_fail *f);

/* Renders r->conv with fmt into segs (appended), forcing the tool-call
 * block when tool_choice asks for it (sets r->tool_forced; see routes.c). */
int srv_render_conv(render_format fmt, srv_req *r, render_segs *segs, di_err *err);

/* How the engine holds a reply to one JSON object (response_format
 * json_object / json_schema) or to a pattern (structured.c's regex and
 * choice; sets er->json, er->regex and the wait): where the answer
 * is all the output after any reasoning (no tools offered), from the first
 * token, or after the reasoning's "</think>" where the prompt opened it and
 * the tokenizer has that as one token (else the reply is left free). */
void srv_json_constraint(const srv_req *r, bool think_opened, const tokenizer *tok,
                         engine_request *er);

/* Fuzzing entry (fuzz_entry.c): data = 1 byte protocol/stream (bit 5: an
 * endpoint that generates nothing), 1 byte format, a request body, a NUL,
 * then model output text that is fed through a generation as if the model
 * had written it. Must never crash or leak. */
int srv_fuzz_one(const uint8_t *data, size_t len);

/* --- metrics ------------------------------------------------------------- */
srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);
void srv_metrics_request(srv_metrics *m, const char *endpoint, int status);
void srv_metrics_tokens(srv_metrics *m, int prompt, int generated, int cached);
void srv_metrics_ttft(srv_metrics *m, double s);
void srv_metrics_tbt(srv_metrics *m, double s);
/* Prometheus text exposition (malloc'd). */
char *srv_metrics_render(srv_metrics *m, const engine_stats *st, int pending);

#endif
