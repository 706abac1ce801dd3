/* server.h — `deepinfer serve`: an HTTP server that speaks OpenAI Chat
 * Completions, Completions, Responses and Anthropic Messages (streamed over
 * SSE or not) on top of one engine, plus /v1/models, /health and /metrics.
 *
 *   srv *s = srv_start(engine, tokenizer, &opts, &err);   // listening
 *   ... srv_port(s) ...
 *   srv_stop(s);                                           // joins everything
 *
 * The engine and tokenizer are borrowed and must outlive the server. Every
 * limit the server enforces is a field of srv_opts (zero: the default). */
#ifndef DI_SERVER_H
#define DI_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"
#include "recipe/render.h"

typedef struct engine engine;
typedef struct tokenizer tokenizer;
typedef struct srv srv;

typedef struct srv_opts {
    const char *host;               /* NULL: 127.0.0.1 */
    int port;                       /* 0: any free port (see srv_port) */
    const char *api_key;            /* NULL: no authentication */
    const char *model_name;         /* the name clients use (NULL: "deepinfer") */
    render_format format;           /* prompt format of the model */
    int context;                    /* positions per sequence (prompt + output) */
    size_t max_body;                /* request body cap in bytes (0: 8 MiB) */
    int max_json_depth;             /* JSON nesting cap (0: 64) */
    int max_pending;                /* requests in flight before 429 (0: 256) */
    int max_connections;            /* concurrent connections (0: 512) */
    int default_max_tokens;         /* when the request sets none (0: 4096) */
    int max_n;                      /* cap on n (0: 16) */
    int max_batch;                  /* prompts in one completions request (0: 32) */
    int response_store_mib;         /* Responses kept, MiB (0: 64; < 0: none) */
    const char *response_store_dir; /* ... also as files there (NULL: memory only) */
    int max_stops;                  /* cap on stop strings (0: 16) */
    bool priority;            /* requests' priority taken (vLLM's --scheduling-policy priority) */
    double request_timeout_s; /* idle connection timeout (0: 600) */
} srv_opts;

/* Binds and starts serving; NULL with err naming the address on failure. */
srv *srv_start(engine *e, tokenizer *tok, const srv_opts *opts, di_err *err);
/* The port actually bound (useful with opts.port == 0). */
int srv_port(const srv *s);
/* Stops accepting, cancels requests in flight, joins the HTTP threads. */
void srv_stop(srv *s);

#endif
