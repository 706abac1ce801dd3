/* grammar_check.c — the analyses of a compiled grammar (grammar.c
 * builds it): which rules can match the empty text (nullable) and some
 * text (productive), by worklist over the rules' call sites, linear in the
 * grammar's size; that every rule reachable from root is productive (so
 * every parse can be finished) and none can begin with itself (left
 * recursion: the matcher's closure would not end), by one depth-first
 * walk; and the byte classes the matcher's transition rows are indexed by. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/grammar_internal.h"

/* Marks in flag the rules with an alternative whose need count reaches
 * 0 (-1: never), counting down each alternative at its calls to rules
 * marked (sites: by callee, the calling alternatives, one a call). */
static void settle(const gr_grammar *g, const int32_t *owner, const int32_t *first,
                   const int32_t *site, int32_t *need, bool *flag) {
    int n_alts = g->rule_alt[g->n_rules], top = 0;
    int32_t *todo = di_malloc(sizeof(int32_t) * (size_t)(g->n_rules ? g->n_rules : 1));
    for (int a = 0; a < n_alts; a++)
        if (need[a] == 0 && !flag[owner[a]]) flag[owner[a]] = true, todo[top++] = owner[a];
    while (top) {
        int r = todo[--top];
        for (int k = first[r]; k < first[r + 1]; k++) {
            int a = site[k];
            if (need[a] > 0 && --need[a] == 0 && !flag[owner[a]])
                flag[owner[a]] = true, todo[top++] = owner[a];
        }
    }
    free(todo);
}

/* Rules that can match the empty text (nullable) or some text
 * (productive): a worklist each, linear in the grammar's size. */
static void fixpoints(const gr_grammar *g, bool *nullable, bool *productive) {
    int n_alts = g->rule_alt[g->n_rules];
    size_t na = (size_t)(n_alts ? n_alts : 1);
    int32_t *owner = di_malloc(sizeof(int32_t) * na), *need_p = di_calloc(na, sizeof(int32_t)),
            *need_n = di_calloc(na, sizeof(int32_t)),
            *first = di_calloc((size_t)g->n_rules + 2, sizeof(int32_t));
    for (int r = 0; r < g->n_rules; r++)
        for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            owner[a] = r;
            for (const gr_elem *e = g->el + g->alt_start[a]; e->type != GE_END; e++)
                if (e->type == GE_SET)
                    need_n[a] = INT32_MIN; /* never empty */
                else
                    need_p[a]++, need_n[a]++, first[e->arg + 2]++;
            if (need_n[a] < 0) need_n[a] = -1;
        }
    for (int r = 0; r < g->n_rules; r++) first[r + 2] += first[r + 1];
    int32_t *site = di_malloc(sizeof(int32_t) * (size_t)(first[g->n_rules + 1] + 1));
    for (int a = 0; a < n_alts; a++) /* first[r + 1]: where rule r's next site goes */
        for (const gr_elem *e = g->el + g->alt_start[a]; e->type != GE_END; e++)
            if (e->type == GE_REF) site[first[e->arg + 1]++] = a;
    settle(g, owner, first, site, need_p, productive);
    settle(g, owner, first, site, need_n, nullable);
    free(owner);
    free(need_p);
    free(need_n);
    free(first);
    free(site);
}

/* Calls rule r can make before it reads a byte: the leading calls of each
 * alternative, up to the first that cannot be empty. */
static int first_calls(const gr_grammar *g, const bool *nullable, int r, int *out) {
    int n = 0;
    for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
        for (const gr_elem *e = g->el + g->alt_start[a]; e->type == GE_REF; e++) {
            out[n++] = e->arg;
            if (!nullable[e->arg]) break;
        }
    return n;
}

/* Marks the rules reachable from root; with nullable, looks for a rule
 * that can begin with itself (depth-first over first_calls): -1 or one
 * on such a cycle. */
static int check_rules(const gr_grammar *g, const bool *nullable, uint8_t *color) {
    typedef struct {
        int r, k, n, at;
    } frame;
    frame *st = di_malloc(sizeof(frame) * (size_t)g->n_rules);
    int *calls = di_malloc(sizeof(int) * (size_t)(g->n_el + 1)), top = 0, cycle = -1, used = 0;
    /* color: 0 unseen, 1 on the path, 2 done; reached through any call */
    uint8_t *reach = di_calloc((size_t)g->n_rules, 1);
    int *todo = di_malloc(sizeof(int) * (size_t)g->n_rules), nt = 0;
    reach[g->root] = 1, todo[nt++] = g->root;
    while (nt) {
        int r = todo[--nt];
        for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
            for (const gr_elem *e = g->el + g->alt_start[a]; e->type != GE_END; e++)
                if (e->type == GE_REF && !reach[e->arg]) reach[e->arg] = 1, todo[nt++] = e->arg;
    }
    for (int r0 = 0; r0 < g->n_rules && cycle < 0; r0++) {
        if (!reach[r0] || color[r0]) continue;
        color[r0] = 1;
        int n = first_calls(g, nullable, r0, calls + used);
        st[top++] = (frame){r0, 0, n, used};
        used += n;
        while (top && cycle < 0) {
            frame *f = &st[top - 1];
            if (f->k == f->n) {
                color[f->r] = 2;
                used = f->at;
                top--;
                continue;
            }
            int s = calls[f->at + f->k++];
            if (color[s] == 1)
                cycle = s;
            else if (!color[s]) {
                color[s] = 1;
                int m = first_calls(g, nullable, s, calls + used);
                st[top++] = (frame){s, 0, m, used};
                used += m;
            }
        }
    }
    for (int r = 0; r < g->n_rules; r++) color[r] = reach[r];
    free(st);
    free(calls);
    free(reach);
    free(todo);
    return cycle;
}

/* Bytes no set tells apart share a class; the sets as classes. */
void gr_byte_classes(gr_grammar *g, uint64_t (*sets)[4], int n_sets) {
    memset(g->cls, 0, sizeof g->cls);
    int n = 1;
    for (int s = 0; s < n_sets; s++) {
        int16_t id[512];
        memset(id, -1, sizeof id);
        int m = 0;
        for (int b = 0; b < 256; b++) {
            int key = g->cls[b] * 2 + (int)(sets[s][b >> 6] >> (b & 63) & 1);
            if (id[key] < 0) id[key] = (int16_t)m++;
            g->cls[b] = (uint8_t)id[key];
        }
        n = m;
    }
    g->n_cls = n;
    g->set_has = di_calloc((size_t)(n_sets ? n_sets : 1) * (size_t)n, 1);
    for (int b = 0; b < 256; b++)
        for (int s = 0; s < n_sets; s++)
            if (sets[s][b >> 6] >> (b & 63) & 1) g->set_has[(size_t)s * (size_t)n + g->cls[b]] = 1;
}

/* Of the rules that cannot be completed, one that needs itself: what an
 * unproductive rule calls that is unproductive too, followed around. */
static int needs_itself(const gr_grammar *g, const bool *productive, int bad) {
    uint8_t *seen = di_calloc((size_t)g->n_rules, 1);
    for (;;) {
        seen[bad] = 1;
        int next = -1; /* its first alternative calls one (each must) */
        for (const gr_elem *e = g->el + g->alt_start[g->rule_alt[bad]]; next < 0; e++)
            if (e->type == GE_REF && !productive[e->arg]) next = e->arg;
        bad = next;
        if (seen[next]) break;
    }
    free(seen);
    return bad;
}

int gr_check(const gr_grammar *g, bool *left) {
    bool *nullable = di_calloc((size_t)g->n_rules, 1),
         *productive = di_calloc((size_t)g->n_rules, 1);
    uint8_t *reach = di_calloc((size_t)g->n_rules, 1);
    fixpoints(g, nullable, productive);
    int cycle = check_rules(g, nullable, reach), bad = -1;
    for (int r = 0; r < g->n_rules && bad < 0; r++)
        if (reach[r] && !productive[r]) bad = r;
    *left = bad < 0 && cycle >= 0;
    int culprit = bad >= 0 ? needs_itself(g, productive, bad) : cycle;
    free(nullable);
    free(productive);
    free(reach);
    return culprit;
}
