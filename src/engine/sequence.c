/* sequence.c — construction and token bookkeeping of one generation stream
 * (see sequence.h). Plain data: no policy and no KV memory here. */
#include "engine/sequence.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/grammar.h"

seq *seq_new(uint64_t id, const int *prompt, int n_prompt, int priority, uint64_t arrival) {
    seq *s = di_calloc(1, sizeof *s);
    s->id = id;
    s->priority = priority;
    s->arrival = arrival;
    s->cap = n_prompt + 16;
    s->tokens = di_malloc(sizeof(int) * (size_t)s->cap);
    memcpy(s->tokens, prompt, sizeof(int) * (size_t)n_prompt);
    s->n_tokens = s->n_prompt = n_prompt;
    return s;
}

seq *seq_clone(const seq *p, uint64_t id) {
    seq *s = seq_new(id, p->tokens, p->n_tokens, p->priority, p->arrival);
    s->n_prompt = p->n_prompt;
    s->n_computed = p->n_computed;
    s->n_cached = p->n_cached;
    s->admitted = p->admitted;
    s->state = p->state;
    s->owner = p->owner;
    s->ahead = p->ahead;
    return s;
}

void seq_free(seq *s) {
    if (!s) return;
    bm_table_free(&s->table);
    stop_state_free(&s->stop);
    free(s->run_blocks);
    free(s->swap_buf);
    free(s->tokens);
    gr_matcher_free(s->json.gram);
    free(s);
}

void seq_append(seq *s, int token) {
    if (s->n_tokens == s->cap) {
        s->cap *= 2;
        s->tokens = di_realloc(s->tokens, sizeof(int) * (size_t)s->cap);
    }
    s->tokens[s->n_tokens++] = token;
}

void seq_append_ahead(seq *s) {
    seq_append(s, -1);
    s->ahead = true;
}

void seq_fill_ahead(seq *s, int token) {
    s->tokens[s->n_tokens - 1] = token;
    s->ahead = false;
}

int seq_cmp(const seq *a, const seq *b) {
    if (a->priority != b->priority) return a->priority < b->priority ? -1 : 1;
    if (a->arrival != b->arrival) return a->arrival < b->arrival ? -1 : 1;
    if (a->id != b->id) return a->id < b->id ? -1 : 1;
    return 0;
}
