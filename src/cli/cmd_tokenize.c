/* cmd_tokenize.c — `deepinfer tokenize`: encode stdin with a model's
 * tokenizer (tokenizer.json + tokenizer_config.json are all DIR needs).
 *
 * stdin is untrusted text: control tokens it spells stay text. By default the
 * whole input is one text; --nul / --lines treat it as records (NUL- or
 * newline-separated) and print one output line per record, so a conformance
 * test can check thousands of strings with one process. --decode reads ids and
 * prints their text (round trips); --time reports encode-only throughput on
 * stderr (for the benchmark, which must not count process start and load),
 * and with --threads the parallel encoder's speed-up over the serial one. */
#include <sched.h>
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

/* One pass over the input: the whole text, or each record. */
typedef struct encode_run {
    const tokenizer *tok;
    pool *p;
    const char *in;
    size_t len;
    char sep;
    bool records, add_bos, trusted, print, as_tokens;
    size_t tokens; /* counted over the passes */
} encode_run;

static int encode_input(encode_run *r) {
    di_err err = {{0}};
    for (size_t pos = 0; pos < r->len || (!r->records && pos == 0);) {
        size_t end = r->len;
        if (r->records) {
            const char *q = memchr(r->in + pos, r->sep, r->len - pos);
            end = q ? (size_t)(q - r->in) : r->len;
        }
        tok_ids ids = {0};
        if (r->add_bos) tok_ids_push(&ids, tok_bos_id(r->tok));
        const char *s = r->in + pos;
        size_t n = end - pos;
        int e = r->trusted ? tok_encode_trusted(r->tok, s, n, &ids, &err)
                : r->p     ? tok_encode_text_parallel(r->tok, r->p, s, n, &ids, &err)
                           : tok_encode_text(r->tok, s, n, &ids, &err);
        if (e) {
            fprintf(stderr, "deepinfer: %s\n", err.msg);
            tok_ids_free(&ids);
            return 1;
        }
        r->tokens += ids.n;
        if (r->print) print_ids(r->tok, &ids, r->as_tokens, stdout);
        tok_ids_free(&ids);
        pos = end + 1;
        if (!r->records) break;
    }
    return 0;
}

/* --time with --threads N: the parallel encoder's speed-up, from rounds that
 * run it and the serial encoder back to back (in alternating order), so that
 * both see the same machine. The serial encoder runs once pinned to each of
 * the first N cores this process may use: on a shared host one core can run
 * at half the other's speed for minutes, so a serial run that lands on one
 * core or the other is no baseline. Each round's figure is N x the parallel
 * throughput over the sum of the cores' serial throughputs (N x efficiency:
 * the speed-up on N equal cores); the median round counts. */
static double timed_pass(encode_run *run, pool *p, int *rc) {
    run->p = p;
    double t0 = di_now();
    *rc = encode_input(run);
    return di_now() - t0;
}

static int time_speedup(encode_run *run, int rounds, int threads) {
    cpu_set_t all, one;
    if (sched_getaffinity(0, sizeof all, &all)) return 1;
    int cores[CPU_SETSIZE], n_cores = 0;
    for (int c = 0; c < CPU_SETSIZE && n_cores < threads; c++)
        if (CPU_ISSET(c, &all)) cores[n_cores++] = c;
    double *speedup = malloc(sizeof(double) * (size_t)rounds);
    if (!speedup) return 1;
    pool *p = run->p;
    int rc = 0;
    for (int r = 0; r < rounds && !rc; r++) {
        double par = r % 2 ? timed_pass(run, p, &rc) : 0, serial_rate = 0;
        for (int i = 0; i < n_cores && !rc; i++) {
            CPU_ZERO(&one);
            CPU_SET(cores[i], &one);
            sched_setaffinity(0, sizeof one, &one);
            serial_rate += 1 / timed_pass(run, NULL, &rc);
        }
        sched_setaffinity(0, sizeof all, &all);
        if (!rc && r % 2 == 0) par = timed_pass(run, p, &rc);
        speedup[r] = n_cores / (par * serial_rate);
    }
    run->p = p;
    if (!rc) {
        cli_sort_doubles(speedup, rounds);
        fprintf(stderr,
                "tokenize: %d threads, %d paired rounds: speed-up %.2fx (median; %.2f-%.2fx), "
                "parallel efficiency %.0f %% of the %d cores' serial throughputs summed\n",
                threads, rounds, speedup[rounds / 2], speedup[0], speedup[rounds - 1],
                100 * speedup[rounds / 2] / n_cores, n_cores);
    }
    free(speedup);
    return rc;
}

/* --time: encode-only throughput. One untimed pass first, as a server's
 * threads are warm: it pays what a process pays once (the first touch of
 * each thread's heap, which on a VM costs tens of microseconds a page), not
 * what an encode costs. */
static int time_encode(encode_run *run, int repeat, int threads) {
    int rc = encode_input(run);
    run->tokens = 0;
    double wall = 0, cpu = 0;
    for (int r = 0; r < repeat && !rc; r++) {
        double t0 = di_now(), c0 = cpu_seconds();
        rc = encode_input(run);
        wall += di_now() - t0, cpu += cpu_seconds() - c0;
    }
    if (rc) return rc;
    fprintf(stderr,
            "tokenize: %zu bytes x %d, %zu tokens in %.3f s: %.2f MB/s, %.0f tokens/s (cpu %.3f "
            "s)\n",
            run->len, repeat, run->tokens, wall, (double)run->len * repeat / wall / 1e6,
            (double)run->tokens / wall, cpu);
    return run->p && !run->trusted ? time_speedup(run, repeat, threads) : 0;
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
        {"--repeat", OPT_INT, &repeat,
         "with --time: encode the input N times (with --threads, then N paired serial and "
         "parallel rounds for the speed-up)"},
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
    encode_run run = {.tok = tok,
                      .p = p,
                      .in = in,
                      .len = len,
                      .sep = nul ? '\0' : '\n',
                      .records = nul || lines,
                      .add_bos = add_bos,
                      .trusted = trusted,
                      .print = !timeit,
                      .as_tokens = tokens};
    rc = timeit ? time_encode(&run, repeat, threads) : encode_input(&run);
    if (p) pool_free(p);
    free(in);
    tok_free(tok);
    return rc;
}
