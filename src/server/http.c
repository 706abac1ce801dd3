/* http.c — the HTTP side of `deepinfer serve`, on GNU libmicrohttpd.
 *
 * Why libmicrohttpd: it is a mature, small C library in Debian
 * (libmicrohttpd-dev) that does HTTP/1.1 parsing, keep-alive, chunked
 * transfer and connection limits for us, and its thread-per-connection mode
 * lets a streaming response simply block in its content callback until the
 * engine has produced more tokens (plain condition-variable waits, no event
 * loop glue), which keeps the SSE path short and obviously correct at the
 * concurrency one CPU engine serves. libevent's evhttp would need a bridge
 * from the engine thread into its loop for every token.
 *
 * Request life: the body is collected (capped at max_body), authenticated
 * (Bearer or x-api-key), routed, parsed and tokenized (routes.c), checked
 * against the context and the pending-request bound, then submitted to the
 * engine with a srv_gen as the event sink. Streams are served from g->out by
 * a content callback; non-streamed requests wait for the end in the handler.
 * Both poll the client socket for a hang-up while they wait and cancel the
 * engine request as soon as it goes, so its KV blocks return to the pool
 * within one engine step. State: the srv below, one per server; nothing
 * global. */
#include <microhttpd.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "server/srv_internal.h"

#define WAIT_SLICE_MS 20

struct srv {
    struct MHD_Daemon *d;
    engine *e;
    tokenizer *tok;
    srv_opts o;
    srv_limits lim;
    srv_metrics *metrics;
    resp_store *responses; /* NULL: none kept */
    /* Responses running in the background (bg_mu): listed for cancel,
     * counted so that srv_stop waits for their threads. */
    pthread_mutex_t bg_mu;
    pthread_cond_t bg_cv;
    struct job *bg;
    int bg_running;
    atomic_int pending;
    atomic_bool stopping;
    int port;
};

typedef struct conn {
    srv *s;
    const srv_api *api;
    const char *endpoint;
    di_buf body;
    size_t received; /* body bytes seen, kept or drained */
    bool too_big;
    srv_fail fail; /* set when the request was refused before its body ended */
} conn;

/* A submitted request; owned by the streaming response (or the handler). */
typedef struct job {
    srv *s;
    const srv_api *api;
    srv_req req;
    srv_gen *g;
    int fd;
    size_t sent;
    struct job *next; /* in s->bg */
} job;

static const srv_api *const apis[] = {&srv_api_chat,      &srv_api_completions,  &srv_api_responses,
                                      &srv_api_messages,  &srv_api_count_tokens, &srv_api_tokenize,
                                      &srv_api_detokenize};

/* --- responses ----------------------------------------------------------- */
static enum MHD_Result reply(struct MHD_Connection *c, int status, const char *ctype, char *body,
                             size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", ctype);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_json(struct MHD_Connection *c, int status, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) s = di_strdup("{}");
    return reply(c, status, "application/json", s, strlen(s));
}

static enum MHD_Result reply_fail(conn *k, struct MHD_Connection *c, const srv_fail *f) {
    srv_proto p = k->api ? k->api->proto : SRV_CHAT;
    char *s = srv_error_body(p, f);
    srv_metrics_request(k->s->metrics, k->endpoint, f->status);
    return reply(c, f->status, "application/json", s, strlen(s));
}

static bool peer_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void wait_slice(srv_gen *g) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WAIT_SLICE_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&g->cv, &g->mu, &ts);
}

/* Cancels (if still running) and waits for every branch's final event.
 * Called with g->mu held. */
static void cancel_engine(const job *j) {
    for (int p = 0; p < j->g->n_prompts; p++) engine_cancel(j->s->e, j->g->prompts[p].engine_id);
}

static void cancel_locked(job *j) {
    srv_gen *g = j->g;
    if (!g->all_done) {
        g->cancelled = true;
        pthread_mutex_unlock(&g->mu);
        cancel_engine(j);
        pthread_mutex_lock(&g->mu);
        while (!g->all_done) pthread_cond_wait(&g->cv, &g->mu);
    }
}

static void job_free(job *j) {
    if (!j) return;
    if (j->g) {
        pthread_mutex_lock(&j->g->mu);
        cancel_locked(j);
        pthread_mutex_unlock(&j->g->mu);
        gen_free(j->g);
        atomic_fetch_sub(&j->s->pending, 1);
    }
    srv_req_free(&j->req);
    free(j);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    job *j = cls;
    srv_gen *g = j->g;
    (void)pos;
    pthread_mutex_lock(&g->mu);
    /* checked on every call, not only while waiting: writes into a socket
     * whose peer has gone still succeed for a while */
    if (!g->all_done && peer_gone(j->fd)) {
        cancel_locked(j);
        pthread_mutex_unlock(&g->mu);
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    while (j->sent == g->out.n && !g->all_done) {
        if (peer_gone(j->fd) || atomic_load(&j->s->stopping)) {
            cancel_locked(j);
            pthread_mutex_unlock(&g->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        wait_slice(g);
    }
    size_t n = g->out.n - j->sent;
    if (n == 0) {
        pthread_mutex_unlock(&g->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    if (n > max) n = max;
    memcpy(buf, g->out.p + j->sent, n);
    j->sent += n;
    if (j->sent == g->out.n) j->sent = g->out.n = 0; /* everything sent: reuse the buffer */
    pthread_mutex_unlock(&g->mu);
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    job_free(cls);
}

/* --- background responses ------------------------------------------------ */
/* A background response's own thread: waits for the end (or the server's
 * stop, which cancels it), has the finished response stored, and frees
 * the job. */
static void *background_run(void *arg) {
    job *j = arg;
    srv *s = j->s;
    srv_gen *g = j->g;
    pthread_mutex_lock(&g->mu);
    while (!g->all_done) {
        if (atomic_load(&s->stopping)) {
            cancel_locked(j);
            break;
        }
        wait_slice(g);
    }
    pthread_mutex_unlock(&g->mu);
    json_decref(j->api->body(g)); /* stores it: completed, incomplete, failed or cancelled */
    pthread_mutex_lock(&s->bg_mu);
    for (job **pp = &s->bg; *pp; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            break;
        }
    pthread_mutex_unlock(&s->bg_mu);
    job_free(j);
    pthread_mutex_lock(&s->bg_mu);
    s->bg_running--;
    pthread_cond_broadcast(&s->bg_cv);
    pthread_mutex_unlock(&s->bg_mu);
    return NULL;
}

/* Hands job j (submitted) to a thread of its own; the answer is the
 * response as it starts. NULL where no thread could be made (j is then
 * the caller's still). */
static json_t *background_start(job *j) {
    srv *s = j->s;
    j->fd = -1; /* no client waits on it */
    pthread_mutex_lock(&j->g->mu);
    json_t *now = j->api->started(j->g);
    pthread_mutex_unlock(&j->g->mu);
    pthread_mutex_lock(&s->bg_mu);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    bool ok = pthread_create(&t, &at, background_run, j) == 0;
    pthread_attr_destroy(&at);
    if (ok) {
        j->next = s->bg, s->bg = j;
        s->bg_running++;
    }
    pthread_mutex_unlock(&s->bg_mu);
    if (!ok) json_decref(now);
    return ok ? now : NULL;
}

/* The background job of response id (NULL: none running). Called with
 * s->bg_mu held. */
static job *running_job(const srv *s, const char *id) {
    for (job *j = s->bg; j; j = j->next)
        if (!strcmp(j->g->id, id)) return j;
    return NULL;
}

/* POST /v1/responses/ID/cancel: a background response still running is
 * cancelled (it is stored cancelled once its branches end); the answer is
 * the response as stored now, status cancelled. */
static enum MHD_Result cancel_response(conn *k, struct MHD_Connection *c, const char *id) {
    srv *s = k->s;
    srv_fail f = {0};
    pthread_mutex_lock(&s->bg_mu);
    job *j = running_job(s, id);
    bool found = j != NULL;
    if (j) {
        pthread_mutex_lock(&j->g->mu);
        bool running = !j->g->all_done;
        if (running) j->g->cancelled = true; /* its end: cancelled, not a stop */
        pthread_mutex_unlock(&j->g->mu);
        if (running) cancel_engine(j);
    }
    pthread_mutex_unlock(&s->bg_mu);
    json_t *o = s->responses ? resp_store_get(s->responses, id) : NULL;
    if (!o) {
        srv_failf(&f, 404, NULL, "No response found with id '%.100s'", id);
        return reply_fail(k, c, &f);
    }
    if (!found) {
        json_decref(o);
        srv_failf(&f, 400, NULL,
                  "Response '%.100s' is not running in the background: only such a response can "
                  "be cancelled",
                  id);
        return reply_fail(k, c, &f);
    }
    json_object_set_new(o, "status", json_string("cancelled"));
    srv_metrics_request(s->metrics, k->endpoint, 200);
    return reply_json(c, 200, o);
}

/* --- generation requests ------------------------------------------------- */
static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Alternatives the engine keeps per prompt token: the legacy echo's
 * (logprobs) or vLLM's prompt_logprobs, whichever asks more. */
static int scored_top(const srv_req *r) {
    int legacy = r->echo && r->logprobs ? r->top_logprobs : 0;
    return legacy > r->prompt_logprobs ? legacy : r->prompt_logprobs;
}

static enum MHD_Result generate(conn *k, struct MHD_Connection *c) {
    srv *s = k->s;
    srv_fail f = {0};
    job *j = di_calloc(1, sizeof *j);
    j->s = s;
    j->api = k->api;
    j->fd = conn_fd(c);
    srv_prepared p;
    const char *body = k->body.p ? k->body.p : "";
    if (srv_prepare(k->api, body, k->body.n, &s->lim, s->o.format, s->tok, &j->req, &p, &f))
        goto fail;
    srv_req *r = &j->req;
    if (k->api->answer) {
        json_t *o = k->api->answer(r, &p.ids, s->tok, s->o.context);
        srv_prepared_free(&p);
        job_free(j);
        srv_metrics_request(s->metrics, k->endpoint, 200);
        return reply_json(c, 200, o);
    }
    int ctx = s->o.context, n_prompts = 1 + r->n_more, all_tokens = 0;
    for (int q = 0; q < n_prompts; q++) { /* a completions batch: every prompt fits */
        const tok_ids *ids = srv_prepared_ids(&p, q);
        char which[32] = "the prompt";
        if (n_prompts > 1) snprintf(which, sizeof which, "prompt %d", q);
        if ((int)ids->n >= ctx) {
            srv_failf(&f, 400, k->api->proto == SRV_COMPLETIONS ? "prompt" : "messages",
                      "This model's maximum context length is %d tokens; %s is %zu tokens", ctx,
                      which, ids->n);
            goto fail;
        }
        if (r->max_tokens > 0 && (int)ids->n + r->max_tokens > ctx) {
            srv_failf(&f, 400, "max_tokens",
                      "This model's maximum context length is %d tokens; %s (%zu tokens) "
                      "plus max_tokens (%d) exceeds it",
                      ctx, which, ids->n, r->max_tokens);
            goto fail;
        }
        all_tokens += (int)ids->n;
    }
    if (atomic_fetch_add(&s->pending, 1) >= s->o.max_pending) {
        atomic_fetch_sub(&s->pending, 1);
        srv_failf(&f, 429, NULL, "too many requests in flight (%d); retry later", s->o.max_pending);
        goto fail;
    }
    gen_env env = {.tok = s->tok,
                   .model_name = s->o.model_name,
                   .metrics = s->metrics,
                   .responses = s->responses};
    j->g = gen_new(&env, k->api, r, all_tokens, p.think_opened, &f);
    if (!j->g) {
        atomic_fetch_sub(&s->pending, 1);
        goto fail;
    }
    srv_gen *g = j->g;
    for (int q = 0; r->echo && q < n_prompts; q++) {
        const srv_prompt *pr =
            q ? &r->more[q - 1] : &(srv_prompt){.text = r->prompt, .len = r->prompt_len};
        const tok_ids *ids = srv_prepared_ids(&p, q);
        gen_prompt *gp = &g->prompts[q];
        if (pr->text && !r->truncate_prompt) {
            gp->echo = di_strdup(pr->text);
            gp->echo_len = pr->len;
        } else if (s->tok) /* a token-id or truncated prompt: its text */
            gp->echo = tok_decode(s->tok, ids->v, ids->n, false, &gp->echo_len);
    }
    samp_params sp = r->samp;
    sp.logprobs = r->logprobs || r->best_keep; /* best_of ranks the branches by them */
    sp.top_logprobs = r->top_logprobs;
    engine_request er = {
        .sampling = sp,
        .stop = {.ignore_eos = r->ignore_eos, .ids = r->stop_ids, .n_ids = r->n_stop_ids},
        .n = g->per,
        .prompt_logprobs = (r->echo && r->logprobs) || r->prompt_logprobs >= 0,
        .prompt_top = scored_top(r),
        .prompt_only = r->prompt_only,
        .priority = r->priority,
        .traffic = k->api->proto == SRV_COMPLETIONS ? ENGINE_TRAFFIC_AGENT : ENGINE_TRAFFIC_CHAT,
        .on_event = gen_on_engine_event,
        .user = g};
    srv_json_constraint(r, p.think_opened, s->tok, &er);
    gen_begin(g);
    di_err err = {{0}};
    pthread_mutex_lock(&g->mu); /* events must not run before every engine id is known */
    g->engine = s->e;
    int submitted = 0;
    for (; submitted < n_prompts; submitted++) {
        const tok_ids *ids = srv_prepared_ids(&p, submitted);
        er.prompt = ids->v;
        er.n_prompt = (int)ids->n;
        er.stop.max_tokens = r->max_tokens > 0 ? r->max_tokens : s->o.default_max_tokens;
        if ((int)ids->n + er.stop.max_tokens > ctx) er.stop.max_tokens = ctx - (int)ids->n;
        uint64_t id = engine_submit(s->e, &er, &err);
        if (!id) break;
        g->prompts[submitted].engine_id = id;
    }
    pthread_mutex_unlock(&g->mu);
    srv_prepared_free(&p);
    if (submitted == 0) {
        gen_free(g);
        j->g = NULL;
        atomic_fetch_sub(&s->pending, 1);
        srv_failf(&f, 400, NULL, "%s", err.msg);
        goto fail;
    }
    if (submitted < n_prompts) { /* the rest never run: their branches end here */
        for (int b = submitted * g->per; b < g->n; b++)
            gen_on_final(g, b, ENGINE_FINISH_CANCELLED, (engine_usage){0}, NULL);
        srv_failf(&f, 400, "prompt", "prompt %d: %s", submitted, err.msg);
        goto fail; /* job_free cancels the others and waits for them */
    }
    srv_metrics_request(s->metrics, k->endpoint, 200);
    if (r->background && k->api->started) {
        json_t *now = background_start(j);
        if (now) return reply_json(c, 200, now);
        srv_failf(&f, 503, NULL, "could not start a background response");
        j->fd = -1;
        job_free(j); /* cancels it */
        return reply_fail(k, c, &f);
    }
    if (r->stream) {
        struct MHD_Response *resp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, j, stream_free);
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    pthread_mutex_lock(&g->mu);
    while (!g->all_done) {
        if (peer_gone(j->fd) || atomic_load(&s->stopping)) {
            cancel_locked(j);
            break;
        }
        wait_slice(g);
    }
    pthread_mutex_unlock(&g->mu);
    int status = 200;
    json_t *out;
    if (g->cancelled) {
        job_free(j);
        return MHD_NO; /* the client is gone */
    }
    if (g->b[0].finish == FIN_ERROR) {
        srv_failf(&f, 500, NULL, "%s", g->b[0].error ? g->b[0].error : "generation failed");
        char *e = srv_error_body(k->api->proto, &f);
        out = json_loads(e, 0, NULL);
        free(e);
        status = 500;
    } else
        out = k->api->body(g);
    job_free(j);
    return reply_json(c, status, out);
fail:
    srv_prepared_free(&p);
    job_free(j);
    return reply_fail(k, c, &f);
}

/* --- other endpoints ----------------------------------------------------- */
/* The served model, with Anthropic's model fields too, so either SDK can
 * list and retrieve it. */
static json_t *model_obj(const srv *s) {
    json_t *m = json_pack("{s:s, s:s, s:i, s:s, s:i}", "id", s->o.model_name, "object", "model",
                          "created", 0, "owned_by", "deepinfer", "max_model_len", s->o.context);
    json_object_set_new(m, "type", json_string("model"));
    json_object_set_new(m, "display_name", json_string(s->o.model_name));
    json_object_set_new(m, "created_at", json_string("1970-01-01T00:00:00Z"));
    return m;
}

static enum MHD_Result models(srv *s, struct MHD_Connection *c) {
    return reply_json(
        c, 200,
        json_pack("{s:s, s:[o], s:b}", "object", "list", "data", model_obj(s), "has_more", 0));
}

/* GET /v1/models/ID: ID names the served model, or 404 */
#define MODEL_PATH "/v1/models/"

/* GET or DELETE /v1/responses/ID: a stored response; GET
 * /v1/responses/ID/input_items: the items that made it; POST
 * /v1/responses/ID/cancel: a background one stopped */
#define RESPONSE_PATH "/v1/responses/"

/* A background response still running, as it stands (NULL: none). */
static json_t *running_so_far(srv *s, const char *id) {
    json_t *o = NULL;
    pthread_mutex_lock(&s->bg_mu);
    job *j = running_job(s, id);
    if (j) {
        pthread_mutex_lock(&j->g->mu);
        if (!j->g->all_done) o = j->api->so_far(j->g);
        pthread_mutex_unlock(&j->g->mu);
    }
    pthread_mutex_unlock(&s->bg_mu);
    return o;
}

/* The length of s before suffix, where s ends with it (and has more); 0
 * where not. */
static size_t before_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && !strcmp(s + n - k, suffix) ? n - k : 0;
}

static enum MHD_Result stored_response(conn *k, struct MHD_Connection *c, const char *id,
                                       bool del) {
    srv *s = k->s;
    json_t *o = NULL;
    size_t n = before_suffix(id, "/input_items");
    srv_fail f = {0};
    if (!del && n) { /* GET .../input_items */
        char *rid = di_strdup(id);
        rid[n] = 0;
        o = srv_response_input_items(
            s->responses, rid, MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit"),
            MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "order"),
            MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "after"),
            MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "before"), &f);
        free(rid);
        if (!o) return reply_fail(k, c, &f);
        srv_metrics_request(s->metrics, k->endpoint, 200);
        return reply_json(c, 200, o);
    }
    if (del && s->responses && resp_store_delete(s->responses, id))
        o = json_pack("{s:s, s:s, s:b}", "id", id, "object", "response.deleted", "deleted", 1);
    else if (!del && !(o = running_so_far(s, id)) && s->responses)
        o = resp_store_get(s->responses, id);
    if (o) {
        srv_metrics_request(s->metrics, k->endpoint, 200);
        return reply_json(c, 200, o);
    }
    srv_failf(&f, 404, NULL, "No response found with id '%.100s'", id);
    return reply_fail(k, c, &f);
}

static enum MHD_Result metrics(srv *s, struct MHD_Connection *c) {
    engine_stats st = engine_get_stats(s->e);
    char *t = srv_metrics_render(s->metrics, &st, atomic_load(&s->pending));
    return reply(c, 200, "text/plain; version=0.0.4", t, strlen(t));
}

static bool authorized(srv *s, struct MHD_Connection *c) {
    if (!s->o.api_key) return true;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (a && !strncasecmp(a, "Bearer ", 7) && !strcmp(a + 7, s->o.api_key)) return true;
    return x && !strcmp(x, s->o.api_key);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls) {
    srv *s = cls;
    conn *k = *con_cls;
    (void)version;
    if (!k) {
        k = di_calloc(1, sizeof *k);
        k->s = s;
        k->endpoint = "other";
        *con_cls = k;
        for (size_t i = 0; i < sizeof apis / sizeof apis[0]; i++)
            if (!strcmp(url, apis[i]->path)) k->api = apis[i], k->endpoint = apis[i]->name;
        if (!strcmp(url, "/v1/models")) k->endpoint = "models";
        if (!strncmp(url, MODEL_PATH, strlen(MODEL_PATH)) && url[strlen(MODEL_PATH)])
            k->endpoint = "model";
        if (!strncmp(url, RESPONSE_PATH, strlen(RESPONSE_PATH)) && url[strlen(RESPONSE_PATH)])
            k->endpoint = "response";
        if (!strcmp(url, "/health")) k->endpoint = "health";
        if (!strcmp(url, "/metrics")) k->endpoint = "metrics";
        bool is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        bool is_post = !strcmp(method, "POST"), is_del = !strcmp(method, "DELETE");
        bool response = !strcmp(k->endpoint, "response");
        bool cancel = response && is_post && before_suffix(url, "/cancel");
        if (!strcmp(k->endpoint, "other"))
            srv_failf(&k->fail, 404, NULL, "no route for %s %s", method, url);
        else if (k->api ? !is_post : !(is_get || (response && is_del) || cancel))
            srv_failf(&k->fail, 405, NULL, "%s does not accept %s", url, method);
        else if ((k->api || response || !strncmp(k->endpoint, "model", 5)) && !authorized(s, c))
            srv_failf(&k->fail, 401, NULL,
                      "missing or wrong API key (send Authorization: Bearer KEY or x-api-key)");
        else if (!strcmp(k->endpoint, "model") && strcmp(url + strlen(MODEL_PATH), s->o.model_name))
            srv_failf(&k->fail, 404, "model",
                      "The model '%.200s' does not exist (this server serves '%s')",
                      url + strlen(MODEL_PATH), s->o.model_name);
        if (k->fail.status) return reply_fail(k, c, &k->fail);
        return MHD_YES;
    }
    if (*upload_size) { /* an oversized body is drained, not kept: 413 at its end */
        k->received += *upload_size;
        if (k->received > 4 * s->o.max_body + (1 << 20)) return MHD_NO; /* a flood: hang up */
        if (k->body.n + *upload_size > s->o.max_body) k->too_big = true;
        if (!k->too_big) di_buf_add(&k->body, upload_data, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (k->too_big) {
        srv_failf(&k->fail, 413, NULL, "request body: larger than %zu bytes", s->o.max_body);
        return reply_fail(k, c, &k->fail);
    }
    if (k->api) return generate(k, c);
    if (!strcmp(k->endpoint, "response")) {
        const char *id = url + strlen(RESPONSE_PATH);
        size_t n = before_suffix(id, "/cancel");
        if (!strcmp(method, "POST") && n) {
            char *rid = di_strdup(id);
            rid[n] = 0;
            enum MHD_Result ret = cancel_response(k, c, rid);
            free(rid);
            return ret;
        }
        return stored_response(k, c, id, !strcmp(method, "DELETE"));
    }
    srv_metrics_request(s->metrics, k->endpoint, 200);
    if (!strcmp(k->endpoint, "models")) return models(s, c);
    if (!strcmp(k->endpoint, "model")) return reply_json(c, 200, model_obj(s));
    if (!strcmp(k->endpoint, "metrics")) return metrics(s, c);
    char *ok = di_strdup("{\"status\":\"ok\"}");
    return reply(c, 200, "application/json", ok, strlen(ok));
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode why) {
    (void)cls, (void)c, (void)why;
    conn *k = *con_cls;
    if (!k) return;
    di_buf_free(&k->body);
    free(k);
    *con_cls = NULL;
}

/* --- lifecycle ----------------------------------------------------------- */
srv *srv_start(engine *e, tokenizer *tok, const srv_opts *opts, di_err *err) {
    srv *s = di_calloc(1, sizeof *s);
    s->e = e;
    s->tok = tok;
    s->o = *opts;
    srv_opts *o = &s->o;
    if (!o->host) o->host = "127.0.0.1";
    if (!o->model_name) o->model_name = "deepinfer";
    if (!o->max_body) o->max_body = 8 << 20;
    if (o->max_json_depth <= 0) o->max_json_depth = 64;
    if (o->max_pending <= 0) o->max_pending = 256;
    if (o->max_connections <= 0) o->max_connections = 512;
    if (o->default_max_tokens <= 0) o->default_max_tokens = 4096;
    if (o->max_n <= 0) o->max_n = 16;
    if (o->max_n > ENGINE_MAX_N) o->max_n = ENGINE_MAX_N;
    if (o->max_stops <= 0) o->max_stops = 16;
    if (o->max_batch <= 0) o->max_batch = 32;
    if (o->response_store_mib >= 0) {
        size_t bytes = (size_t)(o->response_store_mib ? o->response_store_mib : 64) << 20;
        s->responses = resp_store_open(bytes, o->response_store_dir, err);
        if (!s->responses) {
            free(s);
            return NULL;
        }
    }
    if (o->request_timeout_s <= 0) o->request_timeout_s = 600;
    s->lim = (srv_limits){.max_n = o->max_n,
                          .max_batch = o->max_batch,
                          .responses = s->responses,
                          .max_stops = o->max_stops,
                          .max_json_depth = o->max_json_depth,
                          .model_name = o->model_name,
                          .priority = o->priority};
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, o->host, &addr.sin_addr) != 1) {
        di_errf(err, "serve: --host '%s' is not an IPv4 address", o->host);
        resp_store_free(s->responses);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->bg_mu, NULL);
    pthread_cond_init(&s->bg_cv, NULL);
    s->metrics = srv_metrics_new();
    s->d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0,
        NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, &addr, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->request_timeout_s, MHD_OPTION_END);
    if (!s->d) {
        di_errf(err, "serve: cannot listen on %s:%d (port in use?)", o->host, o->port);
        srv_metrics_free(s->metrics);
        resp_store_free(s->responses);
        pthread_mutex_destroy(&s->bg_mu);
        pthread_cond_destroy(&s->bg_cv);
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    return s;
}

int srv_port(const srv *s) {
    return s->port;
}

void srv_stop(srv *s) {
    if (!s) return;
    atomic_store(&s->stopping, true);
    MHD_stop_daemon(s->d);
    pthread_mutex_lock(&s->bg_mu); /* background responses cancel themselves on stopping */
    while (s->bg_running) pthread_cond_wait(&s->bg_cv, &s->bg_mu);
    pthread_mutex_unlock(&s->bg_mu);
    pthread_mutex_destroy(&s->bg_mu);
    pthread_cond_destroy(&s->bg_cv);
    srv_metrics_free(s->metrics);
    resp_store_free(s->responses);
    free(s);
}
