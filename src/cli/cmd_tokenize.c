/* cmd_tokenize.c — `deepinfer tokenize`: encode stdin with a model's
 * tokenizer (tokenizer.json + tokenizer_config.json are all DIR needs).
 *
 * stdin is untrusted text: control tokens it spells stay text. By default the
 * whole input is one text; --nul / --lines treat it as records (NUL- or
 * newline-separated) and print one output line per record, so a conformance
 * test can check thousands of strings with one process. --decode reads ids and
 * prints their text (round trips); --time reports encode-only throughput on
 * stderr (for the benchmark, which must not count process start and load). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/pool.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "recipe/tokenizer.h"

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    size_t r;
    while ((r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
        }
    }
    b[n] = 0;
    *len = n;
    return b;
}

/* Process CPU time (all threads): the benchmark's figure on a shared machine. */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void print_ids(const tokenizer *tok, const tok_ids *ids, int tokens, FILE *out) {
    for (size_t i = 0; i < ids->n; i++) {
        if (i) fputc(' ', out);
        if (tokens) {
            const char *s = tok_token_str(tok, ids->v[i]);
            fputs(s ? s : "(null)", out);
        } else
            fprintf(out, "%d", ids->v[i]);
    }
    fputc('\n', out);
}

/* --decode: ids (whitespace-separated) -> text. With records, each input line
 * is one id list and each text is written followed by a NUL. */
static int decode_mode(const tokenizer *tok, char *in, int skip, bool records) {
    char *p = in;
    for (;;) {
        char *eol = records ? strchr(p, '\n') : NULL;
        if (eol) *eol = 0;
        tok_ids ids = {0};
        char *q = p, *end;
        for (;;) {
            long v = strtol(q, &end, 10);
            if (end == q) break;
            tok_ids_push(&ids, (int)v);
            q = end;
        }
        size_t n;
        char *s = tok_decode(tok, ids.v, ids.n, skip, &n);
        fwrite(s, 1, n, stdout);
        if (records) fputc('\0', stdout);
        free(s);
        tok_ids_free(&ids);
        if (!eol || !eol[1]) break;
        p = eol + 1;
    }
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *dir = NULL;
    int ids_flag = 0, tokens = 0, add_bos = 0, nul = 0, lines = 0, decode = 0, skip = 0, timeit = 0,
        threads = 1, repeat = 1, trusted = 0;
    const cli_opt opts[] = {
        {"--model", OPT_STR, &dir, "directory with tokenizer.json (or the file itself)"},
        {"--ids", OPT_FLAG, &ids_flag, "print ids separated by spaces (default)"},
        {"--tokens", OPT_FLAG, &tokens, "print the token strings instead"},
        {"--add-bos", OPT_FLAG, &add_bos, "start with the BOS token (tokenizer_config.json)"},
        {"--nul", OPT_FLAG, &nul, "stdin holds NUL-separated records: one output line each"},
        {"--lines", OPT_FLAG, &lines,
         "stdin holds newline-separated records: one output line each"},
        {"--decode", OPT_FLAG, &decode,
         "read ids from stdin and print their text (with --lines/--nul: one id list per line, "
         "each text NUL-terminated)"},
        {"--skip-special", OPT_FLAG, &skip, "with --decode: leave out special tokens"},
        {"--trusted", OPT_FLAG, &trusted,
         "recognise added tokens in the text (for testing; stdin is otherwise untrusted)"},
        {"--threads", OPT_INT, &threads, "encode on a pool of N threads (default 1)"},
        {"--time", OPT_FLAG, &timeit, "print encode-only throughput to stderr"},
        {"--repeat", OPT_INT, &repeat, "with --time: encode the input N times"},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    const char *syn = "deepinfer tokenize --model DIR [--ids|--tokens] [--add-bos] < text";
    int rc = cli_parse(argc, argv, opts, n_opts, syn);
    if (rc) return rc == 1 ? 0 : rc;
    if (!dir || (nul && lines) || threads < 1 || repeat < 1) {
        cli_usage(stderr, opts, n_opts, syn);
        return 2;
    }
    di_err err = {{0}};
    tokenizer *tok = tok_load(dir, &err);
    if (!tok) {
        fprintf(stderr, "deepinfer: %s\n", err.msg);
        return 1;
    }
    if (add_bos && tok_bos_id(tok) < 0) {
        fprintf(stderr, "deepinfer tokenize: --add-bos: %s has no bos_token\n", dir);
        tok_free(tok);
        return 1;
    }
    size_t len;
    char *in = read_all(stdin, &len);
    if (!in) {
        fprintf(stderr, "deepinfer tokenize: out of memory reading stdin\n");
        tok_free(tok);
        return 1;
    }
    if (decode) {
        rc = decode_mode(tok, in, skip, nul || lines);
        free(in);
        tok_free(tok);
        return rc;
    }
    pool *p = threads > 1 ? pool_create(threads) : NULL;
    char sep = nul ? '\0' : '\n';
    bool records = nul || lines;
    size_t pos = 0, total_tokens = 0;
    double t0 = di_now(), c0 = cpu_seconds();
    rc = 0;
    for (int r = 0; r < repeat && !rc; r++) {
        pos = 0;
        while (pos < len || (!records && pos == 0)) {
            size_t end = len;
            if (records) {
                char *q = memchr(in + pos, sep, len - pos);
                end = q ? (size_t)(q - in) : len;
            }
            tok_ids ids = {0};
            if (add_bos) tok_ids_push(&ids, tok_bos_id(tok));
            int e = trusted ? tok_encode_trusted(tok, in + pos, end - pos, &ids, &err)
                    : p     ? tok_encode_text_parallel(tok, p, in + pos, end - pos, &ids, &err)
                            : tok_encode_text(tok, in + pos, end - pos, &ids, &err);
            if (e) {
                fprintf(stderr, "deepinfer: %s\n", err.msg);
                rc = 1;
                tok_ids_free(&ids);
                break;
            }
            total_tokens += ids.n;
            if (!timeit) print_ids(tok, &ids, tokens, stdout);
            tok_ids_free(&ids);
            pos = end + 1;
            if (!records) break;
        }
    }
    double dt = di_now() - t0, dc = cpu_seconds() - c0;
    if (timeit && !rc)
        fprintf(stderr,
                "tokenize: %zu bytes x %d, %zu tokens in %.3f s: %.2f MB/s, %.0f tokens/s "
                "(cpu %.3f s)\n",
                len, repeat, total_tokens, dt, (double)len * repeat / dt / 1e6,
                (double)total_tokens / dt, dc);
    if (p) pool_free(p);
    free(in);
    tok_free(tok);
    return rc;
}
