/* grammar_internal.h — a compiled grammar as grammar.c writes it,
 * grammar_check.c checks it and grammar_match.c reads it: rules of alternatives, each a run of
 * elements closed by GE_END; an element takes one byte from a set, or calls a rule. Bytes that no
 * set tells apart share a class, and the sets are kept as which classes they take. */
#ifndef DI_GRAMMAR_INTERNAL_H
#define DI_GRAMMAR_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/grammar.h"

enum { GE_END, GE_SET, GE_REF };

typedef struct gr_elem {
    int32_t type : 8;
    int32_t arg : 24; /* GE_SET: the set; GE_REF: the rule */
} gr_elem;

struct gr_grammar {
    int n_rules, root;
    /* n_rules + 1: rule r's alternatives are rule_alt[r] .. rule_alt[r + 1] - 1 */
    int32_t *rule_alt;
    int32_t *alt_start; /* an alternative's first element */
    gr_elem *el;
    int n_el;
    int n_cls; /* byte classes */
    uint8_t cls[256];
    uint8_t *set_has; /* set s takes class k: set_has[s * n_cls + k] */
};

/* grammar_check.c: a rule that makes g unusable, or -1: one reachable
 * from root that can never be completed, or else (*left set) one that
 * can begin with itself. */
int gr_check(const gr_grammar *g, bool *left);
/* Fills g's byte classes and set_has from its n_sets byte sets. */
void gr_byte_classes(gr_grammar *g, uint64_t (*sets)[4], int n_sets);

#endif
