/* test_server_engine.c — the server's generation object wired to a real
 * engine over a scripted fake model (each branch writes a fixed token
 * script): stop strings that end every branch cancel the engine request and
 * return its KV blocks, EOS text never reaches the client, n > 1 branches are
 * independent, and a tool call written token by token comes out as a chat
 * tool_calls body. This is the engine-event path (gen_on_engine_event) the
 * HTTP layer uses, without sockets. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server/srv_internal.h"

enum { SV = 16, SEOS = 15, SBLOCKS = 64 };

/* token id -> text; 15 is EOS */
static const char *const stext[SV] = {"",
                                      "Hello",
                                      " world",
                                      " END",
                                      " more",
                                      "<｜DSML｜tool_calls>",
                                      "<｜DSML｜invoke name=\"f\">",
                                      "<｜DSML｜parameter name=\"x\" string=\"true\">",
                                      "42",
                                      "</｜DSML｜parameter>",
                                      "</｜DSML｜invoke>",
                                      "</｜DSML｜tool_calls>",
                                      "?",
                                      "?",
                                      "?",
                                      "<eos>"};

typedef struct script {
    const int *toks;
    int n, prompt;
    int free_ids[SBLOCKS], n_free;
} script;

static int s_alloc(void *c) {
    script *s = c;
    return s->n_free ? s->free_ids[--s->n_free] : -1;
}
static void s_release(void *c, int b) {
    script *s = c;
    s->free_ids[s->n_free++] = b;
}
static void s_init(void *c, model_seq *q) {
    memset(q, 0, sizeof *q);
}
static void s_free(void *c, model_seq *q) {}
static int s_forward(void *c, model_batch_seq *b, int n, di_err *err) {
    script *s = c;
    for (int i = 0; i < n; i++) {
        int last = b[i].seq->n_past + b[i].n_tokens;
        if (b[i].logits) {
            int k = last - s->prompt;
            int next = s->toks[k < 0 ? 0 : k < s->n ? k : s->n - 1];
            for (int v = 0; v < SV; v++) b[i].logits[v] = v == next ? 10.0f : 0.0f;
        }
        b[i].seq->n_past = last;
    }
    return 0;
}
static void *d_open(void *c) {
    return (void *)stext; /* any non-NULL stream handle: the detokenizer is stateless */
}
static const char *d_push(void *st, int id, size_t *len) {
    *len = strlen(stext[id]);
    return stext[id];
}
static const char *d_flush(void *st, size_t *len) {
    *len = 0;
    return "";
}
static void d_close(void *st) {}

static engine *script_engine(script *s) {
    s->n_free = SBLOCKS;
    for (int i = 0; i < SBLOCKS; i++) s->free_ids[i] = SBLOCKS - 1 - i;
    engine_runner r = {.ctx = s,
                       .vocab = SV,
                       .max_context = 4096,
                       .eos_ids = {SEOS},
                       .n_eos = 1,
                       .kv_alloc = s_alloc,
                       .kv_release = s_release,
                       .seq_init = s_init,
                       .seq_free = s_free,
                       .forward = s_forward};
    engine_detok d = {.open = d_open, .push = d_push, .flush = d_flush, .close = d_close};
    di_err err;
    return engine_create_runner(&r, &d, &(engine_opts){.step_tokens = 64}, &err);
}

/* Runs body through gen + engine with the scripted output; returns the body. */
static json_t *run(engine *e, const srv_api *api, const char *body, script *s, int max_tokens,
                   srv_gen **out_g, srv_req *r) {
    srv_limits lim = {.max_n = 8, .max_stops = 8, .max_json_depth = 32};
    srv_prepared p;
    srv_fail f = {0};
    if (srv_prepare(api, body, strlen(body), &lim, RENDER_DEEPSEEK_V4, NULL, r, &p, &f)) {
        fprintf(stderr, "prepare: %s\n", f.msg);
        return NULL;
    }
    int prompt[4] = {1, 2, 1, 2};
    s->prompt = 4;
    gen_env env = {.model_name = "m"};
    srv_gen *g = gen_new(&env, api, r, 4, false, &f);
    gen_begin(g);
    engine_request er = {.prompt = prompt,
                         .n_prompt = 4,
                         .n = g->n,
                         .stop = {.max_tokens = max_tokens},
                         .on_event = gen_on_engine_event,
                         .user = g};
    di_err err;
    pthread_mutex_lock(&g->mu);
    g->engine = e;
    g->prompts[0].engine_id = engine_submit(e, &er, &err);
    while (g->prompts[0].engine_id && !g->all_done) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    srv_prepared_free(&p);
    *out_g = g;
    return g->prompts[0].engine_id ? api->body(g) : NULL;
}

static const char *jstr(json_t *j, const char *a, int i, const char *b, const char *c) {
    json_t *x = json_object_get(json_array_get(json_object_get(j, a), (size_t)i), b);
    return json_string_value(c ? json_object_get(x, c) : x);
}

TEST(server_engine_stop_string_cancels_and_frees_blocks) {
    static const int toks[] = {1, 2, 3, 4, 4, 4};
    script s = {.toks = toks, .n = 6};
    engine *e = script_engine(&s);
    CHECK(e);
    srv_req r;
    srv_gen *g = NULL;
    json_t *b =
        run(e, &srv_api_chat,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2,\"stop\":[\"END\"]}", &s,
            1000, &g, &r);
    CHECK(b);
    CHECKF(!strcmp(jstr(b, "choices", 0, "message", "content"), "Hello world "), "got '%s'",
           jstr(b, "choices", 0, "message", "content"));
    CHECK(!strcmp(jstr(b, "choices", 1, "message", "content"), "Hello world "));
    CHECK(!strcmp(jstr(b, "choices", 1, "finish_reason", NULL), "stop"));
    engine_wait_idle(e);
    engine_stats st = engine_get_stats(e);
    CHECKF(st.requests_cancelled == 1, "cancelled %lld", st.requests_cancelled);
    CHECKF(st.blocks_used == 0, "blocks used %d", st.blocks_used);
    CHECK(st.running == 0 && st.waiting == 0);
    json_decref(b);
    gen_free(g);
    srv_req_free(&r);
    engine_free(e);
}

TEST(server_engine_eos_text_is_not_sent) {
    static const int toks[] = {1, 2, SEOS};
    script s = {.toks = toks, .n = 3};
    engine *e = script_engine(&s);
    CHECK(e);
    srv_req r;
    srv_gen *g = NULL;
    json_t *b = run(e, &srv_api_messages,
                    "{\"model\":\"m\",\"max_tokens\":50,\"stream\":true,\"messages\":[{\"role\":"
                    "\"user\",\"content\":\"x\"}]}",
                    &s, 50, &g, &r);
    CHECK(b);
    CHECKF(jstr(b, "content", 0, "text", NULL) &&
               !strcmp(jstr(b, "content", 0, "text", NULL), "Hello world"),
           "body %s", json_dumps(b, 0));
    CHECK(!strcmp(json_string_value(json_object_get(b, "stop_reason")), "end_turn"));
    CHECK(!strstr(g->out.p, "<eos>"));
    CHECK(strstr(g->out.p, "event: message_stop"));
    CHECK(json_integer_value(json_object_get(json_object_get(b, "usage"), "output_tokens")) == 3);
    json_decref(b);
    gen_free(g);
    srv_req_free(&r);
    engine_free(e);
}

TEST(server_engine_tool_call_token_by_token) {
    static const int toks[] = {1, 5, 6, 7, 8, 9, 10, 11, SEOS};
    script s = {.toks = toks, .n = 9};
    engine *e = script_engine(&s);
    CHECK(e);
    srv_req r;
    srv_gen *g = NULL;
    json_t *b = run(e, &srv_api_chat,
                    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
                    "\"function\",\"function\":{\"name\":\"f\"}}]}",
                    &s, 50, &g, &r);
    CHECK(b);
    CHECK(!strcmp(jstr(b, "choices", 0, "finish_reason", NULL), "tool_calls"));
    json_t *tc = json_array_get(
        json_object_get(
            json_object_get(json_array_get(json_object_get(b, "choices"), 0), "message"),
            "tool_calls"),
        0);
    CHECK(
        !strcmp(json_string_value(json_object_get(json_object_get(tc, "function"), "name")), "f"));
    json_t *args = json_loads(
        json_string_value(json_object_get(json_object_get(tc, "function"), "arguments")), 0, NULL);
    CHECK(args && !strcmp(json_string_value(json_object_get(args, "x")), "42"));
    json_decref(args);
    json_decref(b);
    gen_free(g);
    srv_req_free(&r);
    engine_free(e);
}
