/* tok_internal.h — the tokenizer's private structures, shared by the tok_*.c
 * files and tokenizer.c only (nothing outside src/recipe/tok* includes it,
 * except the tokenizer's own unit tests).
 *
 * Pipeline for untrusted text: validate UTF-8 -> normalizers (whole text) ->
 * pre-tokenizers (pieces) -> BPE per piece (word) -> ids. Decoding runs the
 * decoder chain as a pipeline of streaming stages, so tok_decode and the
 * incremental detokenizer share one code path. */
#ifndef DI_TOK_INTERNAL_H
#define DI_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>

#include "recipe/tokenizer.h"

/* ---- string -> id map (open addressing, xxhash) -------------------------- */
typedef struct tok_strmap {
    uint32_t *slot; /* entry index + 1, 0 = empty */
    size_t cap;     /* power of two */
    struct tok_sment {
        const char *s;
        uint32_t len;
        int id;
    } * ent;
    size_t n, ecap;
} tok_strmap;
void tok_strmap_init(tok_strmap *m, size_t expect);
void tok_strmap_free(tok_strmap *m);
/* s must outlive the map. Overwrites an existing key. */
void tok_strmap_put(tok_strmap *m, const char *s, size_t len, int id);
int tok_strmap_get(const tok_strmap *m, const char *s, size_t len); /* -1 if absent */

/* ---- (id, id) -> (rank, merged id) --------------------------------------- */
typedef struct tok_pairmap {
    struct tok_pent {
        uint64_t key; /* UINT64_MAX = empty */
        uint32_t rank;
        int32_t id;
    } * e;
    size_t cap, n;
} tok_pairmap;
void tok_pairmap_init(tok_pairmap *m, size_t expect);
void tok_pairmap_free(tok_pairmap *m);
void tok_pairmap_put(tok_pairmap *m, int a, int b, uint32_t rank, int id);
static inline uint64_t tok_pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}
/* Returns the merged id (rank in *rank) or -1. */
static inline int tok_pairmap_get(const tok_pairmap *m, int a, int b, uint32_t *rank) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = m->cap - 1, i = (size_t)tok_pair_hash(key) & mask;
    for (;;) {
        const struct tok_pent *p = &m->e[i];
        if (p->key == key) {
            *rank = p->rank;
            return p->id;
        }
        if (p->key == UINT64_MAX) return -1;
        i = (i + 1) & mask;
    }
}

/* ---- normalizers, pre-tokenizers, decoders ------------------------------- */
enum { TN_NFC, TN_NFKC, TN_NFD, TN_NFKD, TN_REPLACE, TN_PREPEND, TN_LOWERCASE, TN_STRIP };
typedef struct tok_norm {
    int kind;
    char *a, *b;       /* Replace: pattern -> content; Prepend: a */
    size_t alen, blen; /* Strip: alen = left, blen = right (bools) */
} tok_norm;

enum { TP_SPLIT, TP_BYTELEVEL, TP_DIGITS, TP_METASPACE };
enum { TB_REMOVED, TB_ISOLATED, TB_MERGED_PREV, TB_MERGED_NEXT, TB_CONTIGUOUS };
enum { TM_ALWAYS, TM_FIRST, TM_NEVER };
typedef struct tok_pretok {
    int kind;
    pcre2_code *re; /* Split with a regex; ByteLevel with use_regex (GPT-2 pattern) */
    bool jit;
    char *lit; /* Split with a string pattern */
    size_t lit_len;
    int behavior;
    bool invert;
    bool individual_digits; /* Digits */
    bool add_prefix_space;  /* ByteLevel */
    char repl[8];           /* Metaspace replacement (UTF-8) */
    size_t repl_len;
    int prepend_scheme; /* Metaspace */
    bool split;         /* Metaspace */
    bool cut_safe;      /* Split regex on the parallel whitelist (tok_parallel.c) */
} tok_pretok;

enum { TD_BYTELEVEL, TD_METASPACE, TD_REPLACE, TD_BYTEFALLBACK, TD_FUSE, TD_STRIP };
typedef struct tok_dec {
    int kind;
    char *a, *b; /* Replace pattern/content; Metaspace replacement in a; Strip content in a */
    size_t alen, blen;
    int start, stop;    /* Strip */
    int prepend_scheme; /* Metaspace */
} tok_dec;

/* An added token as tokenizer.json declares it. */
typedef struct tok_added {
    char *content;
    int id;
    bool special, lstrip, rstrip, normalized, single_word;
} tok_added;

struct tokenizer {
    int n_ids;        /* max id + 1 over vocab and added tokens */
    char **str;       /* id -> token string (vocabulary spelling), NULL if unused */
    uint32_t *slen;   /* id -> strlen */
    uint8_t *control; /* id -> 1 for added tokens (except unk): never produced from text */
    uint8_t *special; /* id -> 1 for added tokens marked special (skipped by skip_control) */
    tok_strmap vocab; /* model vocabulary, control ids excluded: what text can reach */
    tok_strmap added; /* added-token content -> id */
    tok_added *adds;
    int n_adds;
    tok_pairmap merges;

    /* model (BPE) */
    bool byte_level;  /* initial symbols are bytes through the GPT-2 byte map */
    int byte_id[256]; /* byte-level: byte -> id of its mapped char; else <0xNN> id or -1 */
    tok_strmap raw;   /* byte-level: raw bytes of each token -> id (for ignore_merges) */
    char *raw_arena;
    bool byte_fallback, fuse_unk, ignore_merges;
    int unk_id;

    tok_norm *norms;
    int n_norms;
    tok_pretok *pretoks;
    int n_pretoks;
    tok_dec *decs;
    int n_decs;
    bool has_decoder;

    /* Safe cuts (tok_parallel.c): 1 = after '\n' before an ASCII letter (the
     * known byte-level split regexes), 2 = before "▁" that follows a non-"▁"
     * (SentencePiece without pre-tokenizer), 0 = none (serial). */
    int cut_rule;
    /* The normalizers commute with those cuts (tok_parallel.c), so each piece
     * is validated and normalized on its own thread, cut in the raw text;
     * space_mark: a Replace(" " -> "▁") is among them (rule 2 then also cuts
     * before a raw space). */
    bool cut_raw, cut_space_mark;

    int bos_id, eos_id;
    int16_t cp_byte[324]; /* byte-level decoding: code point -> byte, -1 if none */
};

/* Byte-level (GPT-2) mapping: byte -> code point, and back (-1 if none). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);
/* Decodes one UTF-8 char at s (n bytes available); returns its length
 * (0 if invalid) and the code point in *cp. */
size_t tok_utf8_next(const char *s, size_t n, uint32_t *cp);
size_t tok_utf8_put(uint32_t cp, char *out);
/* Byte offset of the first invalid UTF-8 sequence, or n when valid. */
size_t tok_utf8_check(const char *s, size_t n);

/* Load-time builders (tok_normalize.c, tok_pretok.c, tok_decode.c): parse one
 * JSON object of the corresponding section, append to t. */
struct json_t;
int tok_parse_normalizer(tokenizer *t, struct json_t *j, di_err *err);
int tok_parse_pretokenizer(tokenizer *t, struct json_t *j, di_err *err);
int tok_parse_decoder(tokenizer *t, struct json_t *j, di_err *err);
void tok_pipeline_free(tokenizer *t);

/* Applies the normalizers to text; returns a malloc'd string (or NULL with
 * err set), or sets *same when the text is unchanged (nothing allocated). */
char *tok_normalize(const tokenizer *t, const char *text, size_t len, size_t *out_len, bool *same,
                    di_err *err);
/* The same on a part of a text cut where normalization is local
 * (tok_parallel.c): Prepend applies only when first (the part starts the text). */
char *tok_normalize_part(const tokenizer *t, const char *text, size_t len, bool first,
                         size_t *out_len, bool *same, di_err *err);

/* Pre-tokenization of normalized text: each word (piece after the last
 * pre-tokenizer) goes to emit, in order, pointing into the text or into the
 * state's buffers (valid during the call only). first: the text starts the
 * input (Metaspace prepend_scheme "first"). */
#define TOK_MAX_PRETOK 16
typedef void (*tok_word_fn)(void *ctx, const char *s, size_t n);
typedef struct tok_spans {
    struct tok_span *v;
    size_t n, cap;
} tok_spans;
typedef struct tok_pre {
    tok_spans sp[TOK_MAX_PRETOK];
    di_buf rw[TOK_MAX_PRETOK];
    pcre2_match_data *md;
} tok_pre;
int tok_pretokenize(const tokenizer *t, tok_pre *st, const char *text, size_t len, bool first,
                    tok_word_fn emit, void *ctx, di_err *err);
void tok_pre_free(tok_pre *st);

/* The word cache shared by the threads of one parallel encode (tok_cache.c):
 * lock-free, insert-only; words -> ids. Each writer (thread) puts records
 * into its own arena, so writer must not be used by two threads at once. */
typedef struct tok_wcache tok_wcache;
tok_wcache *tok_wcache_new(size_t text_len, int n_writers);
void tok_wcache_free(tok_wcache *c);
const int *tok_wcache_get(tok_wcache *c, uint64_t h, const char *s, size_t n, size_t *nids);
void tok_wcache_put(tok_wcache *c, int writer, uint64_t h, const char *s, size_t n, const int *ids,
                    size_t nids);

/* BPE over pre-tokenized text with a word cache (tok_bpe.c): words seen
 * before in the encoder's life reuse their ids; or, from _shared, the
 * parallel encode's shared cache. One encoder per thread. */
typedef struct tok_enc tok_enc;
tok_enc *tok_enc_new(const tokenizer *t, size_t text_len);
tok_enc *tok_enc_new_shared(const tokenizer *t, tok_wcache *shared, int writer);
void tok_enc_free(tok_enc *e);
/* Encodes already-normalized text (pre-tokenizers + BPE) and appends ids. */
int tok_encode_normalized(const tokenizer *t, tok_enc *e, const char *text, size_t len, bool first,
                          tok_ids *out, di_err *err);
/* Parallel encoding with an explicit minimum piece size (tests force many cuts). */
int tok_encode_parallel_min(const tokenizer *t, pool *p, const char *text, size_t len,
                            size_t min_piece, tok_ids *out, di_err *err);
/* Whether a Split regex (as tokenizer.json spells it) is one whose safe cuts
 * have been reasoned out (tok_parallel.c). */
bool tok_regex_cut_safe(const char *pattern);
/* Decides the tokenizer's cut_rule, cut_raw and cut_space_mark at load
 * (tok_parallel.c). */
void tok_choose_cuts(tokenizer *t);
/* The safe cut at or after pos (text already normalized), or len if none. */
size_t tok_next_cut(const tokenizer *t, const char *s, size_t len, size_t pos);

/* Reads bos/eos from dir/tokenizer_config.json if present (tokenizer.c). */
int tok_load_config(tokenizer *t, const char *dir, di_err *err);

#endif
