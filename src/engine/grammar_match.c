/* grammar_match.c — matching text against a compiled grammar
 * (grammar_internal.h) byte by byte, for the token mask.
 *
 * A stack is a chain of nodes, each a position in the rules and the node
 * below it (the caller's return position), interned so that a stack is
 * one int and equal stacks are equal ints. A settled stack's top is at a
 * byte set. A state is the sorted set of settled stacks the text so far
 * leaves, plus whether root may end there; states are interned too, and
 * each gets a row of transitions by byte class once a byte has left it,
 * so a vocabulary walk mostly looks up rows. Advancing a stack past its
 * byte runs the closure: at a rule call, each alternative of the rule
 * (returning to the element after the call, or straight to the caller's
 * caller where the call is last in its alternative); at an alternative's
 * end, back to the return position; at root's end, acceptance. Left
 * recursion is refused at compile time, so the closure ends; nodes met
 * twice in one closure are skipped by a stamp.
 *
 * The caches only grow between gr_current calls; gr_current starts them
 * afresh from the current state where they passed the matcher's budget,
 * so a matcher holds about that plus one mask walk's worth. */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "base/base.h"
#include "engine/grammar_internal.h"

/* Bounds on one closure (a state keeps the stacks found within them: a
 * subset of the parses, each still one that can be completed). */
#define MAX_STACKS 4096
#define MAX_VISITS (1 << 20)

#define ROW_UNKNOWN (-2)

typedef struct gnode {
    int32_t pos, below;
} gnode;

typedef struct gstate {
    uint32_t off, len; /* its stacks in stacks[] */
    bool accept;
    int32_t *row; /* by byte class: next state, -1 none, ROW_UNKNOWN */
} gstate;

struct gr_matcher {
    const gr_grammar *g;
    gnode *node;
    uint32_t *stamp;
    int n_node, cap_node;
    int32_t *node_hash; /* node + 1, 0 empty */
    uint32_t node_mask;
    gstate *st;
    int n_st, cap_st;
    int32_t *st_hash;
    uint32_t st_mask;
    int32_t *stacks;
    size_t n_stacks, cap_stacks;
    size_t row_bytes, budget;
    uint32_t now;   /* the closure's stamp */
    uint64_t spent; /* closure steps so far (gr_work) */
    int current;
    /* scratch of a step */
    int32_t *out;
    int n_out, cap_out;
    int32_t *work;
    int cap_work;
};

/* ---- interning ------------------------------------------------------------- */
static uint32_t node_key(int32_t pos, int32_t below) {
    uint64_t k = (uint64_t)(uint32_t)pos << 32 | (uint32_t)below;
    return (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 32);
}

static void node_rehash(gr_matcher *m) {
    free(m->node_hash);
    uint32_t cap = 1024;
    while (cap < 2u * (uint32_t)m->cap_node) cap *= 2;
    m->node_hash = di_calloc(cap, sizeof(int32_t));
    m->node_mask = cap - 1;
    for (int i = 0; i < m->n_node; i++) {
        uint32_t h = node_key(m->node[i].pos, m->node[i].below) & m->node_mask;
        while (m->node_hash[h]) h = (h + 1) & m->node_mask;
        m->node_hash[h] = i + 1;
    }
}

static int32_t intern_node(gr_matcher *m, int32_t pos, int32_t below) {
    uint32_t h = node_key(pos, below) & m->node_mask;
    for (; m->node_hash[h]; h = (h + 1) & m->node_mask) {
        const gnode *n = &m->node[m->node_hash[h] - 1];
        if (n->pos == pos && n->below == below) return m->node_hash[h] - 1;
    }
    if (m->n_node == m->cap_node) {
        m->cap_node = m->cap_node ? 2 * m->cap_node : 1024;
        m->node = di_realloc(m->node, sizeof *m->node * (size_t)m->cap_node);
        m->stamp = di_realloc(m->stamp, sizeof *m->stamp * (size_t)m->cap_node);
    }
    int32_t id = m->n_node++;
    m->node[id] = (gnode){pos, below};
    m->stamp[id] = 0;
    if (2u * (uint32_t)m->n_node > m->node_mask + 1)
        node_rehash(m);
    else
        m->node_hash[h] = id + 1;
    return id;
}

static uint32_t state_key(const int32_t *s, int n, bool accept) {
    return (uint32_t)XXH3_64bits_withSeed(s, sizeof *s * (size_t)n, accept);
}

static void state_rehash(gr_matcher *m) {
    free(m->st_hash);
    uint32_t cap = 256;
    while (cap < 2u * (uint32_t)m->cap_st) cap *= 2;
    m->st_hash = di_calloc(cap, sizeof(int32_t));
    m->st_mask = cap - 1;
    for (int i = 0; i < m->n_st; i++) {
        const gstate *t = &m->st[i];
        uint32_t h = state_key(m->stacks + t->off, (int)t->len, t->accept) & m->st_mask;
        while (m->st_hash[h]) h = (h + 1) & m->st_mask;
        m->st_hash[h] = i + 1;
    }
}

/* The state of stacks s (n, sorted) and accept. */
static int intern_state(gr_matcher *m, const int32_t *s, int n, bool accept) {
    uint32_t h = state_key(s, n, accept) & m->st_mask;
    for (; m->st_hash[h]; h = (h + 1) & m->st_mask) {
        const gstate *t = &m->st[m->st_hash[h] - 1];
        if (t->accept == accept && t->len == (uint32_t)n &&
            !memcmp(m->stacks + t->off, s, sizeof *s * (size_t)n))
            return m->st_hash[h] - 1;
    }
    if (m->n_stacks + (size_t)n > m->cap_stacks) {
        m->cap_stacks = (m->n_stacks + (size_t)n) * 2;
        m->stacks = di_realloc(m->stacks, sizeof *m->stacks * m->cap_stacks);
    }
    memcpy(m->stacks + m->n_stacks, s, sizeof *s * (size_t)n);
    if (m->n_st == m->cap_st) {
        m->cap_st = m->cap_st ? 2 * m->cap_st : 256;
        m->st = di_realloc(m->st, sizeof *m->st * (size_t)m->cap_st);
    }
    m->st[m->n_st] = (gstate){.off = (uint32_t)m->n_stacks, .len = (uint32_t)n, .accept = accept};
    m->n_stacks += (size_t)n;
    int id = m->n_st++;
    if (2u * (uint32_t)m->n_st > m->st_mask + 1)
        state_rehash(m);
    else
        m->st_hash[h] = id + 1;
    return id;
}

/* ---- the closure ------------------------------------------------------------- */
static void push_work(gr_matcher *m, int *top, int32_t pos, int32_t below) {
    if (*top + 2 > m->cap_work) {
        m->cap_work = m->cap_work ? 2 * m->cap_work : 256;
        m->work = di_realloc(m->work, sizeof *m->work * (size_t)m->cap_work);
    }
    m->work[(*top)++] = pos;
    m->work[(*top)++] = below;
}

/* Adds to m->out the settled stacks reached from position pos over the
 * stack below; sets *accept where root can end. */
static void closure(gr_matcher *m, int32_t pos, int32_t below, bool *accept, int *visits) {
    const gr_grammar *g = m->g;
    int top = 0;
    push_work(m, &top, pos, below);
    while (top) {
        below = m->work[--top];
        pos = m->work[--top];
        for (;;) {
            if (++*visits > MAX_VISITS) return;
            int32_t id = intern_node(m, pos, below);
            if (m->stamp[id] == m->now) break;
            m->stamp[id] = m->now;
            gr_elem e = g->el[pos];
            if (e.type == GE_SET) {
                if (m->n_out == m->cap_out) {
                    m->cap_out = m->cap_out ? 2 * m->cap_out : 64;
                    m->out = di_realloc(m->out, sizeof *m->out * (size_t)m->cap_out);
                }
                if (m->n_out < MAX_STACKS) m->out[m->n_out++] = id;
                break;
            }
            if (e.type == GE_END) {
                if (below < 0) {
                    *accept = true;
                    break;
                }
                pos = m->node[below].pos, below = m->node[below].below;
                continue;
            }
            /* a call: last in its alternative, it returns where this would */
            int32_t ret = g->el[pos + 1].type == GE_END ? below : intern_node(m, pos + 1, below);
            for (int a = g->rule_alt[e.arg + 1] - 1; a >= g->rule_alt[e.arg]; a--)
                push_work(m, &top, g->alt_start[a], ret);
            break;
        }
    }
}

static void next_stamp(gr_matcher *m) {
    if (++m->now == 0) { /* wrapped: no node may look visited */
        memset(m->stamp, 0, sizeof *m->stamp * (size_t)m->n_node);
        m->now = 1;
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The state of the closure's stacks, or -1 where there are none and root
 * cannot end. */
static int settle(gr_matcher *m, bool accept) {
    if (!m->n_out && !accept) return -1;
    qsort(m->out, (size_t)m->n_out, sizeof *m->out, cmp_i32);
    return intern_state(m, m->out, m->n_out, accept);
}

static int start_state(gr_matcher *m) {
    const gr_grammar *g = m->g;
    next_stamp(m);
    m->n_out = 0;
    bool accept = false;
    int visits = 0;
    for (int a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
        closure(m, g->alt_start[a], -1, &accept, &visits);
    return settle(m, accept);
}

int gr_next(gr_matcher *m, int state, uint8_t b) {
    const gr_grammar *g = m->g;
    if (state < 0) return -1; /* a start cut short by the bounds: nothing goes on */
    int k = g->cls[b];
    if (m->st[state].row && m->st[state].row[k] != ROW_UNKNOWN) return m->st[state].row[k];
    next_stamp(m);
    m->n_out = 0;
    bool accept = false;
    int visits = 0;
    for (uint32_t i = 0; i < m->st[state].len; i++) {
        const gnode *n = &m->node[m->stacks[m->st[state].off + i]];
        if (g->set_has[(size_t)g->el[n->pos].arg * (size_t)g->n_cls + (size_t)k])
            closure(m, n->pos + 1, n->below, &accept, &visits);
    }
    m->spent += (uint64_t)visits;
    int next = settle(m, accept);
    gstate *t = &m->st[state];
    size_t row = sizeof(int32_t) * (size_t)g->n_cls;
    if (!t->row && m->row_bytes + row <= m->budget / 2) { /* rows: half the budget */
        t->row = di_malloc(row);
        for (int c = 0; c < g->n_cls; c++) t->row[c] = ROW_UNKNOWN;
        m->row_bytes += row;
    }
    if (t->row) t->row[k] = next;
    return next;
}

uint64_t gr_work(const gr_matcher *m) {
    return m->spent;
}

bool gr_accepts(const gr_matcher *m, int state) {
    return state >= 0 && m->st[state].accept;
}

/* ---- the matcher ------------------------------------------------------------- */
static void clear_caches(gr_matcher *m) {
    for (int i = 0; i < m->n_st; i++) free(m->st[i].row);
    m->n_node = m->n_st = 0;
    m->n_stacks = m->row_bytes = 0;
    memset(m->node_hash, 0, sizeof *m->node_hash * (m->node_mask + 1));
    memset(m->st_hash, 0, sizeof *m->st_hash * (m->st_mask + 1));
}

gr_matcher *gr_matcher_new(const gr_grammar *g) {
    gr_matcher *m = di_calloc(1, sizeof *m);
    m->g = g;
    m->budget = GR_CACHE_BYTES;
    node_rehash(m);
    state_rehash(m);
    m->current = start_state(m);
    return m;
}

void gr_matcher_free(gr_matcher *m) {
    if (!m) return;
    for (int i = 0; i < m->n_st; i++) free(m->st[i].row);
    free(m->node);
    free(m->stamp);
    free(m->node_hash);
    free(m->st);
    free(m->st_hash);
    free(m->stacks);
    free(m->out);
    free(m->work);
    free(m);
}

/* Starts the caches afresh, keeping the current state: its stacks copied
 * node by node (each chain from the bottom) into the new tables. */
static void restart(gr_matcher *m) {
    const gstate *cur = &m->st[m->current];
    int n = (int)cur->len;
    bool accept = cur->accept;
    int32_t *chain = NULL, *tops = di_malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    int n_old = m->n_node, cap_chain = 0;
    gnode *old = di_malloc(sizeof *old * (size_t)(n_old ? n_old : 1));
    memcpy(old, m->node, sizeof *old * (size_t)n_old);
    const int32_t *stk = m->stacks + cur->off;
    int32_t *old_tops = di_malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    memcpy(old_tops, stk, sizeof(int32_t) * (size_t)n);
    clear_caches(m);
    for (int i = 0; i < n; i++) {
        int depth = 0;
        for (int32_t x = old_tops[i]; x >= 0; x = old[x].below) {
            if (depth == cap_chain) {
                cap_chain = cap_chain ? 2 * cap_chain : 64;
                chain = di_realloc(chain, sizeof *chain * (size_t)cap_chain);
            }
            chain[depth++] = x;
        }
        int32_t below = -1;
        while (depth--) below = intern_node(m, old[chain[depth]].pos, below);
        tops[i] = below;
    }
    qsort(tops, (size_t)n, sizeof *tops, cmp_i32);
    m->current = intern_state(m, tops, n, accept);
    free(chain);
    free(tops);
    free(old);
    free(old_tops);
}

void gr_matcher_set_budget(gr_matcher *m, size_t bytes) {
    m->budget = bytes;
}

/* What the caches hold, about (each entry with its hash slots). */
static size_t cache_bytes(const gr_matcher *m) {
    return (size_t)m->n_node * (sizeof(gnode) + sizeof(uint32_t) + 2 * sizeof(int32_t)) +
           (size_t)m->n_st * (sizeof(gstate) + 2 * sizeof(int32_t)) +
           m->n_stacks * sizeof(int32_t) + m->row_bytes;
}

int gr_current(gr_matcher *m) {
    if (m->current >= 0 && cache_bytes(m) > m->budget) restart(m);
    return m->current;
}

bool gr_done(const gr_matcher *m) {
    return gr_accepts(m, m->current);
}

bool gr_feed(gr_matcher *m, const char *b, size_t n) {
    int s = gr_current(m);
    for (size_t i = 0; i < n && s >= 0; i++) s = gr_next(m, s, (uint8_t)b[i]);
    if (s < 0) return false;
    m->current = s;
    return true;
}
