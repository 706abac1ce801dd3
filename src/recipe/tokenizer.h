/* tokenizer.h — Hugging Face tokenizer.json tokenizers (byte-level BPE and
 * SentencePiece-style BPE) with special-token safety by construction.
 *
 * Two ways in: tok_encode_text takes untrusted text and never produces a
 * control (added/special) token id, whatever the text spells; control tokens
 * are emitted only by id, through tok_control_id, which only the prompt
 * renderer calls. Decoding and an incremental detokenizer for streaming. */
#ifndef DI_TOKENIZER_H
#define DI_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"
#include "base/pool.h"

typedef struct tokenizer tokenizer;

/* A growable id list. */
typedef struct tok_ids {
    int *v;
    size_t n, cap;
} tok_ids;
void tok_ids_push(tok_ids *ids, int id);
void tok_ids_free(tok_ids *ids);

/* path: a directory holding tokenizer.json (and optionally
 * tokenizer_config.json), or the tokenizer.json file itself. Unknown
 * tokenizer features are a load error naming the feature. */
tokenizer *tok_load(const char *path, di_err *err);
void tok_free(tokenizer *t);
int tok_vocab_size(const tokenizer *t);

/* Untrusted text -> ids appended to out. Added/special tokens are NOT
 * recognised; text that spells one is encoded as ordinary text. No BOS. */
int tok_encode_text(const tokenizer *t, const char *text, size_t len, tok_ids *out, di_err *err);
/* The same ids, computed on a pool: the text is cut where the pre-tokenizer
 * provably cannot merge across, and the pieces are encoded in parallel. */
int tok_encode_text_parallel(const tokenizer *t, pool *p, const char *text, size_t len,
                             tok_ids *out, di_err *err);

/* Trusted text only (a template the server itself rendered): added tokens
 * are recognised as Hugging Face does, honouring their lstrip, rstrip,
 * single_word and normalized flags. Never call it on user text. No BOS. */
int tok_encode_trusted(const tokenizer *t, const char *text, size_t len, tok_ids *out, di_err *err);

/* Trusted: id of an added/special token by its content (e.g.
 * "<｜begin▁of▁sentence｜>"), or -1. */
int tok_control_id(const tokenizer *t, const char *content);
/* BOS/EOS from tokenizer_config.json (-1 if none). */
int tok_bos_id(const tokenizer *t);
int tok_eos_id(const tokenizer *t);
/* The token's text as the vocabulary spells it (e.g. "Ġthe"), or NULL. */
const char *tok_token_str(const tokenizer *t, int id);
bool tok_is_control(const tokenizer *t, int id);

/* ids -> UTF-8 text (malloc'd, NUL-terminated; *len gets the length).
 * skip_control: leave out special tokens. */
char *tok_decode(const tokenizer *t, const int *ids, size_t n, bool skip_control, size_t *len);
/* The bytes one token adds to a text it does not start (malloc'd; *len gets
 * the length): its UTF-8 as decoded, except that a token holding part of a
 * character keeps its raw bytes, which concatenate with its neighbours' to
 * the text (OpenAI's logprobs `bytes`). tok_utf8_lossy: bytes as text, each
 * invalid part U+FFFD, as decoding does. */
char *tok_token_bytes(const tokenizer *t, int id, size_t *len);
char *tok_utf8_lossy(const char *s, size_t n, size_t *len);

/* Incremental detokenizer for one stream: feed ids one at a time; returns the
 * newly completed text (valid UTF-8, possibly empty) in a buffer owned by the
 * stream, valid until the next call. Concatenated output == tok_decode of all
 * ids once tok_stream_flush has been called. */
typedef struct tok_stream tok_stream;
tok_stream *tok_stream_new(const tokenizer *t, bool skip_control);
const char *tok_stream_push(tok_stream *s, int id, size_t *len);
const char *tok_stream_flush(tok_stream *s, size_t *len);
void tok_stream_free(tok_stream *s);

#endif
