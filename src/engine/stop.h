/* stop.h — when a generation stream ends: stop token ids, EOS (unless
 * ignore_eos), max_tokens, and stop strings matched on the detokenized text
 * across token boundaries.
 *
 * Stop strings: text is fed piece by piece; the state holds back the longest
 * tail that could still be the start of a stop string and releases the rest
 * at once, so a client never sees text that a later token turns into a stop.
 * The stop string itself is not part of the output (OpenAI semantics). */
#ifndef DI_STOP_H
#define DI_STOP_H

#include <stdbool.h>
#include <stddef.h>

#define STOP_MAX_STRS    16
#define STOP_MAX_STR_LEN 256

typedef struct stop_params {
    const int *ids; /* extra stop token ids */
    int n_ids;
    const char *const *strs; /* stop strings (non-empty UTF-8) */
    int n_strs;
    int max_tokens; /* generated tokens; <= 0: up to the context limit */
    bool ignore_eos;
} stop_params;

typedef enum {
    STOP_NONE = 0,
    STOP_EOS,    /* an EOS or stop token id was generated */
    STOP_STRING, /* a stop string matched */
    STOP_LENGTH, /* max_tokens or the context limit */
} stop_reason;

typedef struct stop_state {
    char *held; /* text not yet released */
    size_t n_held, cap_held;
    char *out; /* the last released text */
    size_t cap_out;
} stop_state;

/* Checks the limits a stop_params can break; -1 with a message in msg. */
int stop_params_check(const stop_params *p, char *msg, size_t msg_len);
/* Token-level check of a generated token: STOP_EOS if it is a stop id, or an
 * EOS id (eos[0..n_eos)) without ignore_eos; else STOP_NONE. */
stop_reason stop_check_token(const stop_params *p, const int *eos, int n_eos, int token);
/* Feeds a text piece. Returns STOP_STRING when a stop string completed
 * (*text then holds the text before it), else STOP_NONE with *text the text
 * now safe to release. *text stays valid until the next call on st. */
stop_reason stop_feed(stop_state *st, const stop_params *p, const char *piece, size_t len,
                      const char **text, size_t *text_len);
/* Releases everything held (the stream ends for another reason). */
void stop_flush(stop_state *st, const char **text, size_t *text_len);
void stop_state_free(stop_state *st);

#endif
