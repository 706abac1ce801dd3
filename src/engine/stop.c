/* stop.c — stop conditions of one stream (see stop.h). Stop strings are few
 * and short, so matching re-scans the small held-back buffer on every piece:
 * the buffer never grows beyond the longest stop string plus one piece. */
#include "engine/stop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int stop_params_check(const stop_params *p, char *msg, size_t msg_len) {
    if (p->n_strs < 0 || p->n_strs > STOP_MAX_STRS) {
        snprintf(msg, msg_len, "stop: %d stop strings (at most %d)", p->n_strs, STOP_MAX_STRS);
        return -1;
    }
    for (int i = 0; i < p->n_strs; i++) {
        size_t n = p->strs[i] ? strlen(p->strs[i]) : 0;
        if (n == 0 || n > STOP_MAX_STR_LEN) {
            snprintf(msg, msg_len, "stop: stop string %d is empty or longer than %d bytes", i,
                     STOP_MAX_STR_LEN);
            return -1;
        }
    }
    if (p->n_ids < 0 || (p->n_ids > 0 && !p->ids)) {
        snprintf(msg, msg_len, "stop: bad stop token id list");
        return -1;
    }
    return 0;
}

stop_reason stop_check_token(const stop_params *p, const int *eos, int n_eos, int token) {
    for (int i = 0; i < p->n_ids; i++)
        if (p->ids[i] == token) return STOP_EOS;
    if (!p->ignore_eos)
        for (int i = 0; i < n_eos; i++)
            if (eos[i] == token) return STOP_EOS;
    return STOP_NONE;
}

static void grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    *buf = di_realloc(*buf, c);
    *cap = c;
}

/* Moves held[0..n) to out and shifts the rest of held down. */
static void release(stop_state *st, size_t n, const char **text, size_t *text_len) {
    grow(&st->out, &st->cap_out, n + 1);
    if (n) memcpy(st->out, st->held, n);
    st->out[n] = 0;
    if (st->n_held > n) memmove(st->held, st->held + n, st->n_held - n);
    st->n_held -= n;
    *text = st->out;
    *text_len = n;
}

stop_reason stop_feed(stop_state *st, const stop_params *p, const char *piece, size_t len,
                      const char **text, size_t *text_len) {
    grow(&st->held, &st->cap_held, st->n_held + len + 1);
    memcpy(st->held + st->n_held, piece, len);
    st->n_held += len;
    if (p->n_strs == 0) {
        release(st, st->n_held, text, text_len);
        return STOP_NONE;
    }
    /* Earliest complete match wins. */
    size_t best = (size_t)-1;
    for (int i = 0; i < p->n_strs; i++) {
        const char *hit = memmem(st->held, st->n_held, p->strs[i], strlen(p->strs[i]));
        if (hit && (size_t)(hit - st->held) < best) best = (size_t)(hit - st->held);
    }
    if (best != (size_t)-1) {
        release(st, best, text, text_len);
        st->n_held = 0;
        return STOP_STRING;
    }
    /* Hold back the longest tail that is a proper prefix of a stop string. */
    size_t hold = 0;
    for (int i = 0; i < p->n_strs; i++) {
        size_t sl = strlen(p->strs[i]);
        for (size_t k = sl - 1; k > hold; k--)
            if (k <= st->n_held && !memcmp(st->held + st->n_held - k, p->strs[i], k)) {
                hold = k;
                break;
            }
    }
    release(st, st->n_held - hold, text, text_len);
    return STOP_NONE;
}

void stop_flush(stop_state *st, const char **text, size_t *text_len) {
    release(st, st->n_held, text, text_len);
}

void stop_state_free(stop_state *st) {
    free(st->held);
    free(st->out);
    memset(st, 0, sizeof *st);
}
