/* cmd_render.c — `deepinfer render`: a conversation (JSON on stdin, the shape
 * in recipe/conversation.h) rendered into a model's prompt, printed as the
 * prompt string, as token ids (--ids), or as the tagged segments (--segments,
 * JSON, for tests that check what is control and what is text).
 *
 * The string and segment outputs need only tokenizer_config.json (to guess
 * the format); the tokenizer is loaded for --ids alone. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "recipe/conversation.h"
#include "recipe/render.h"
#include "recipe/tokenizer.h"

static const char synopsis[] =
    "usage: deepinfer render --model DIR [--format deepseek-v3|deepseek-v4|chatml|llama3]\n"
    "                        [--ids | --segments] [--no-generation-prompt] < conversation.json\n"
    "  --model DIR               model (or tokenizer) directory with tokenizer_config.json\n"
    "  --format F                prompt format (default: guessed from tokenizer_config.json)\n"
    "  --ids                     print token ids, space-separated, instead of the prompt\n"
    "  --segments                print the control/text segments as a JSON array\n"
    "  --no-generation-prompt    do not open the assistant's turn at the end\n";

static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) return free(buf), NULL;
            buf = nb;
        }
    }
    *len = n;
    return buf;
}

static void print_segments(const render_segs *s) {
    json_t *arr = json_array();
    for (size_t i = 0; i < s->n; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "control", json_boolean(s->v[i].kind == RENDER_CONTROL));
        json_object_set_new(o, "text", json_stringn(s->v[i].s, s->v[i].len));
        json_array_append_new(arr, o);
    }
    char *out = json_dumps(arr, JSON_COMPACT | JSON_ENSURE_ASCII);
    puts(out);
    free(out);
    json_decref(arr);
}

static int print_ids(const char *dir, const render_segs *s) {
    di_err err = {{0}};
    tokenizer *t = tok_load(dir, &err);
    if (!t) {
        fprintf(stderr, "deepinfer render: %s\n", err.msg);
        return 1;
    }
    tok_ids ids = {0};
    int rc = render_to_ids(t, s, &ids, &err);
    if (rc) fprintf(stderr, "deepinfer render: %s\n", err.msg);
    for (size_t i = 0; !rc && i < ids.n; i++) printf(i ? " %d" : "%d", ids.v[i]);
    if (!rc) putchar('\n');
    tok_ids_free(&ids);
    tok_free(t);
    return rc ? 1 : 0;
}

int cmd_render(int argc, char **argv) {
    const char *dir = NULL, *fmt_name = NULL;
    int want_ids = 0, want_segs = 0, no_gen = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(synopsis, stdout);
            return 0;
        } else if (!strcmp(a, "--model") || !strcmp(a, "--format")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "deepinfer render: %s needs a value\n%s", a, synopsis);
                return 2;
            }
            *(!strcmp(a, "--model") ? &dir : &fmt_name) = argv[++i];
        } else if (!strcmp(a, "--ids"))
            want_ids = 1;
        else if (!strcmp(a, "--segments"))
            want_segs = 1;
        else if (!strcmp(a, "--no-generation-prompt"))
            no_gen = 1;
        else {
            fprintf(stderr, "deepinfer render: unknown option '%s'\n%s", a, synopsis);
            return 2;
        }
    }
    if (!dir || (want_ids && want_segs)) {
        fprintf(stderr, "deepinfer render: %s\n%s",
                dir ? "--ids and --segments exclude each other" : "--model is required", synopsis);
        return 2;
    }
    di_err err = {{0}};
    render_format fmt;
    if (fmt_name && render_format_parse(fmt_name, &fmt)) {
        fprintf(stderr, "deepinfer render: unknown --format '%s'\n%s", fmt_name, synopsis);
        return 2;
    }
    if (!fmt_name && render_format_guess(dir, &fmt, &err)) {
        fprintf(stderr, "deepinfer render: %s\n", err.msg);
        return 1;
    }
    size_t len;
    char *json = read_stdin(&len);
    if (!json) {
        fprintf(stderr, "deepinfer render: cannot read the conversation from stdin\n");
        return 1;
    }
    conversation *c = conv_parse_json(json, len, &err);
    free(json);
    if (!c) {
        fprintf(stderr, "deepinfer render: %s\n", err.msg);
        return 1;
    }
    if (no_gen) c->add_generation_prompt = false;
    render_segs segs = {0};
    int rc = 0;
    if (render_conversation(fmt, c, &segs, &err)) {
        fprintf(stderr, "deepinfer render: %s\n", err.msg);
        rc = 1;
    } else if (want_ids) {
        rc = print_ids(dir, &segs);
    } else if (want_segs) {
        print_segments(&segs);
    } else {
        size_t n;
        char *prompt = render_to_string(&segs, &n);
        fwrite(prompt, 1, n, stdout);
        free(prompt);
    }
    render_segs_free(&segs);
    conv_free(c);
    return rc;
}
