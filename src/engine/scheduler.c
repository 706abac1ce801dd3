/* scheduler.c — the step planner (policy in scheduler.h). Both queues are
 * arrays kept sorted by seq_cmp; they hold at most a few thousand entries,
 * so sorted insertion by memmove is cheaper than any tree. */
#include "engine/scheduler.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

typedef struct seq_list {
    seq **v;
    int n, cap;
} seq_list;

struct sched {
    bm *b;
    sched_opts o;
    seq_list waiting, running;
    seq_list fetching; /* admitted with a store hit still being read */
    sched_plan plan;
    int cap_items, cap_pre, cap_fail;
    int n_swap_ids, cap_swap_ids; /* plan.swap_out_ids */
    int swap_used;                /* blocks of swap space held by waiting sequences */
    long long prefix_hit_tokens, store_hit_tokens; /* at sequences' first admission */
};

static void list_insert(seq_list *l, seq *q) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = di_realloc(l->v, sizeof(seq *) * (size_t)l->cap);
    }
    int i = l->n;
    while (i > 0 && seq_cmp(l->v[i - 1], q) > 0) i--;
    memmove(l->v + i + 1, l->v + i, sizeof(seq *) * (size_t)(l->n - i));
    l->v[i] = q;
    l->n++;
}

static bool list_remove(seq_list *l, seq *q) {
    for (int i = 0; i < l->n; i++)
        if (l->v[i] == q) {
            memmove(l->v + i, l->v + i + 1, sizeof(seq *) * (size_t)(l->n - i - 1));
            l->n--;
            return true;
        }
    return false;
}

sched *sched_create(bm *b, const sched_opts *o) {
    sched *s = di_calloc(1, sizeof *s);
    s->b = b;
    s->o = *o;
    if (s->o.token_budget < 1) s->o.token_budget = 1;
    if (s->o.max_running < 1) s->o.max_running = 1;
    return s;
}

int sched_swap_used(const sched *s) {
    return s->swap_used;
}

long long sched_prefix_hit_tokens(const sched *s) {
    return s->prefix_hit_tokens;
}

long long sched_store_hit_tokens(const sched *s) {
    return s->store_hit_tokens;
}

void sched_free(sched *s) {
    if (!s) return;
    free(s->fetching.v);
    free(s->waiting.v);
    free(s->running.v);
    free(s->plan.items);
    free(s->plan.cows);
    free(s->plan.preempted);
    free(s->plan.failed);
    free(s->plan.swap_outs);
    free(s->plan.swap_out_at);
    free(s->plan.swap_out_ids);
    free(s->plan.swap_ins);
    free(s->plan.swap_drops);
    free(s);
}

void sched_set_budget(sched *s, int token_budget) {
    s->o.token_budget = token_budget < 1 ? 1 : token_budget;
}

void sched_add_waiting(sched *s, seq *q) {
    q->state = SEQ_WAITING;
    list_insert(&s->waiting, q);
}

void sched_add_running(sched *s, seq *q) {
    q->state = SEQ_RUNNING;
    list_insert(&s->running, q);
}

/* --- KV store hits in progress (kvs_engine.h) ------------------------------ */
/* Stops q's store load (never waits for I/O); its blocks are the caller's
 * to release. */
static void drop_load(seq *q) {
    kvs_load_free(q->store_load);
    q->store_load = NULL;
}

/* Admission of q (empty table): the in-memory prefix and the store's match.
 * Returns false when q went aside to fetch its store blocks. */
static bool attach_prefix(sched *s, seq *q) {
    kvs_load *ld = NULL;
    if (q->scored) /* every token computed */
        q->n_computed = 0;
    else if (s->o.store)
        q->n_computed = kvs_admit(s->o.store, s->b, &q->table, q->tokens, q->n_tokens,
                                  q->n_tokens - 1, &s->o.store_io, &ld);
    else
        q->n_computed = bm_attach_prefix(s->b, &q->table, q->tokens, q->n_tokens, q->n_tokens - 1);
    if (!q->admitted)
        q->n_cached = q->n_cached_mem = q->n_computed < q->n_prompt ? q->n_computed : q->n_prompt;
    if (!ld) return true;
    q->store_load = ld;
    list_remove(&s->waiting, q);
    q->state = SEQ_FETCHING;
    list_insert(&s->fetching, q);
    return false;
}

/* Sequences whose store blocks are in (layer 0 swapped in; later layers
 * follow during their first pass) go back to the waiting queue, where they
 * keep their place, with their prefix counted as computed. */
static void poll_fetching(sched *s) {
    for (int i = 0; i < s->fetching.n;) {
        seq *q = s->fetching.v[i];
        int tok;
        if (!kvs_load_ready(q->store_load, &tok)) {
            i++;
            continue;
        }
        if (tok == 0) drop_load(q); /* nothing usable: the pass fills the blocks */
        q->n_computed += tok;
        if (!q->admitted) q->n_cached = q->n_computed < q->n_prompt ? q->n_computed : q->n_prompt;
        list_remove(&s->fetching, q);
        sched_add_waiting(s, q);
    }
}

/* Under block pressure: sequences that hold blocks without running (fetching
 * their store blocks, or fetched and waiting for a slot) give them back,
 * their loads cancelled, before any running sequence is preempted or a
 * request is failed as too big; they are matched and fetched again when
 * admitted next. Returns whether any block was given back. */
static bool release_idle_holders(sched *s, const seq *except) {
    bool any = false;
    while (s->fetching.n > 0) {
        seq *q = s->fetching.v[s->fetching.n - 1];
        drop_load(q);
        bm_release(s->b, &q->table);
        q->n_computed = 0;
        list_remove(&s->fetching, q);
        sched_add_waiting(s, q);
        any = true;
    }
    for (int i = 0; i < s->waiting.n; i++) {
        seq *q = s->waiting.v[i];
        if (q == except || q->table.n == 0) continue;
        if (q->store_load) drop_load(q);
        bm_release(s->b, &q->table);
        q->n_computed = 0;
        any = true;
    }
    return any;
}

/* q's swapped KV is given up: its swap space is free again (its buffer is
 * the engine's to free, or goes with the sequence). */
static void unswap(sched *s, seq *q) {
    s->swap_used -= q->swap_blocks;
    q->swapped = false;
    q->swap_first = q->swap_blocks = 0;
}

/* A swapped sequence that leaves before it is admitted again. */
static void drop_swap(sched *s, seq *q) {
    if (q->swapped && q->state != SEQ_RUNNING) unswap(s, q);
}

void sched_remove(sched *s, seq *q) {
    drop_swap(s, q);
    if (!list_remove(&s->running, q) && !list_remove(&s->waiting, q)) list_remove(&s->fetching, q);
    if (q->store_load) drop_load(q);
    bm_release(s->b, &q->table);
    q->state = SEQ_FINISHED;
}

int sched_n_waiting(const sched *s) {
    return s->waiting.n + s->fetching.n;
}

int sched_n_fetching(const sched *s) {
    return s->fetching.n;
}
int sched_n_running(const sched *s) {
    return s->running.n;
}

/* --- plan building -------------------------------------------------------- */
static void plan_reserve(sched *s) {
    int need = s->running.n + s->waiting.n + 1;
    sched_plan *p = &s->plan;
    if (need > s->cap_items) {
        s->cap_items = need * 2;
        p->items = di_realloc(p->items, sizeof *p->items * (size_t)s->cap_items);
        p->cows = di_realloc(p->cows, sizeof *p->cows * (size_t)s->cap_items);
        p->swap_ins = di_realloc(p->swap_ins, sizeof(seq *) * (size_t)s->cap_items);
        p->swap_drops = di_realloc(p->swap_drops, sizeof(seq *) * (size_t)s->cap_items);
    }
    if (s->running.n + 1 > s->cap_pre) {
        s->cap_pre = (s->running.n + 1) * 2;
        p->preempted = di_realloc(p->preempted, sizeof(seq *) * (size_t)s->cap_pre);
        p->swap_outs = di_realloc(p->swap_outs, sizeof(seq *) * (size_t)s->cap_pre);
        p->swap_out_at = di_realloc(p->swap_out_at, sizeof(int) * (size_t)s->cap_pre);
    }
    if (need > s->cap_fail) {
        s->cap_fail = need * 2;
        p->failed = di_realloc(p->failed, sizeof(seq *) * (size_t)s->cap_fail);
    }
    p->n_items = p->n_cows = p->n_preempted = p->n_failed = 0;
    p->n_swap_outs = p->n_swap_ins = p->n_swap_drops = s->n_swap_ids = 0;
    p->n_decode = p->n_prefill_tokens = 0;
}

/* Swaps q's KV out when the swap space has room for it (not while its store
 * blocks are still loading): its block ids go into the plan, for the engine
 * to copy before they are reused. Leading blocks that running sequences
 * share (hashed, so they can be found again) stay to the prefix cache. */
static bool swap_out(sched *s, seq *q) {
    int nb = (q->n_computed + BM_BLOCK - 1) / BM_BLOCK, first = 0;
    if (nb > q->table.n) nb = q->table.n;
    while (first < nb && first < q->table.n_hashed && bm_refcount(s->b, q->table.blocks[first]) > 1)
        first++;
    int n = nb - first;
    if (q->store_load || nb == 0 || n > s->o.swap_blocks - s->swap_used) return false;
    sched_plan *p = &s->plan;
    if (s->n_swap_ids + n > s->cap_swap_ids) {
        s->cap_swap_ids = (s->n_swap_ids + n) * 2;
        p->swap_out_ids = di_realloc(p->swap_out_ids, sizeof(int) * (size_t)s->cap_swap_ids);
    }
    memcpy(p->swap_out_ids + s->n_swap_ids, q->table.blocks + first, sizeof(int) * (size_t)n);
    p->swap_out_at[p->n_swap_outs] = s->n_swap_ids;
    p->swap_outs[p->n_swap_outs++] = q;
    s->n_swap_ids += n;
    s->swap_used += n;
    q->swapped = true;
    q->swap_first = first;
    q->swap_blocks = n;
    return true;
}

/* Admission of swapped q: the cached full blocks of its computed tokens are
 * attached (shared, not copied back). When the shared prefix it left to the
 * cache is no longer all there, its swapped KV is of no use: dropped, it
 * goes on from what was found. */
static void swap_admit(sched *s, seq *q) {
    int hit = bm_attach_prefix(s->b, &q->table, q->tokens, q->n_tokens,
                               q->n_computed / BM_BLOCK * BM_BLOCK);
    q->swap_skip = hit / BM_BLOCK;
    if (q->swap_skip >= q->swap_first) return;
    unswap(s, q);
    q->n_computed = hit;
    s->plan.swap_drops[s->plan.n_swap_drops++] = q;
}

static void preempt(sched *s, seq *q) {
    list_remove(&s->running, q);
    if (!swap_out(s, q)) q->n_computed = 0;
    if (q->store_load) drop_load(q);
    bm_release(s->b, &q->table);
    q->n_preempt++;
    sched_add_waiting(s, q);
    s->plan.preempted[s->plan.n_preempted++] = q;
}

static void fail(sched *s, seq *q) {
    sched_remove(s, q);
    s->plan.failed[s->plan.n_failed++] = q;
}

/* Rows of logits the scored prompts' chunks may hold in one step. */
static int score_rows(const sched *s) {
    return s->o.score_rows > 0 ? s->o.score_rows : INT_MAX;
}

/* Tokens of a prefill chunk: what is pending, at most the budget (and, for
 * a scored prompt, the rows of logits left to the step: score_room), cut
 * back to the last block boundary it crosses under block_chunks. */
static int chunk_len(const sched *s, const seq *q, int budget, int score_room) {
    int pending = seq_pending(q);
    int n = pending < budget ? pending : budget;
    if (q->scored && n > score_room) n = score_room;
    if (s->o.block_chunks && n > 1) {
        int end = q->n_computed + n, cut = end - end % BM_BLOCK;
        if (cut > q->n_computed && cut < end) n = cut - q->n_computed;
    }
    return n;
}

static void add_item(sched *s, seq *q, int n, const bm_cow *cow) {
    sched_plan *p = &s->plan;
    int ci = -1;
    if (cow->src >= 0) {
        if (s->o.can_copy) {
            ci = p->n_cows;
            p->cows[p->n_cows++] = *cow;
        } else {
            /* Copy-on-write by recomputation: the new block is filled again
             * from its first position (at most one block of extra tokens). */
            q->n_computed -= q->n_computed % BM_BLOCK;
            n = seq_pending(q);
        }
    }
    bool decode = n == 1 && seq_pending(q) == 1;
    p->items[p->n_items++] = (sched_item){q, n, q->n_computed + n == q->n_tokens, decode, ci};
    if (decode)
        p->n_decode++;
    else
        p->n_prefill_tokens += n;
}

/* Blocks the first chunk of waiting sequence q takes. A swapped q is
 * counted as if none of its blocks were found cached (swap_admit may share
 * its leading ones): an upper bound, and one that never decides anything
 * today, since the callers only ask for a q more urgent than the last
 * running sequence, and a swapped q never is one. A swapped q was the
 * least urgent runner when it was preempted (victims are taken from the
 * end of the running list), and no less urgent sequence is admitted while
 * it waits ahead of them (admission stops at the first that does not fit). */
static int first_chunk_blocks(const sched *s, const seq *q) {
    if (q->swapped) { /* its swapped KV comes back into fresh blocks */
        int chunk = seq_pending(q) < s->o.token_budget ? seq_pending(q) : s->o.token_budget;
        return (q->n_computed + chunk + BM_BLOCK - 1) / BM_BLOCK;
    }
    int hit = q->table.n || q->scored ? q->n_computed : bm_lookup(s->b, q->tokens, q->n_tokens - 1);
    int chunk = seq_pending(q) - (hit - q->n_computed);
    if (chunk > s->o.token_budget) chunk = s->o.token_budget;
    return (hit + chunk + BM_BLOCK - 1) / BM_BLOCK - hit / BM_BLOCK;
}

/* A waiting sequence more urgent than the least urgent running ones takes
 * their place (blocks or running slot) before the step is planned. */
static bool priority_preempts(const sched *s, int need) {
    const seq *q = s->waiting.v[0];
    return s->running.n > 0 && s->running.v[s->running.n - 1]->priority > q->priority &&
           (bm_n_available(s->b) < need || s->running.n >= s->o.max_running);
}

static void preempt_for_priority(sched *s) {
    if (s->waiting.n == 0 || s->running.n == 0) return;
    if (s->running.v[s->running.n - 1]->priority <= s->waiting.v[0]->priority) return;
    int need = first_chunk_blocks(s, s->waiting.v[0]);
    while (priority_preempts(s, need)) preempt(s, s->running.v[s->running.n - 1]);
}

/* Planning ahead needs no preemption: no priority preemption is due and the
 * running sequences' next tokens fit in the blocks available (an upper
 * bound: a copy-on-write made for one may unshare another's block). */
static bool ahead_fits(const sched *s) {
    if (s->waiting.n > 0 && s->running.n > 0 &&
        s->running.v[s->running.n - 1]->priority > s->waiting.v[0]->priority &&
        priority_preempts(s, first_chunk_blocks(s, s->waiting.v[0])))
        return false;
    int budget = s->o.token_budget, need = 0, room = score_rows(s);
    for (int i = 0; i < s->running.n; i++) {
        const seq *q = s->running.v[i];
        if (q->draining) continue;
        int pending = seq_pending(q);
        int n = pending == 1 ? 1 : chunk_len(s, q, budget, room);
        if (n <= 0) continue;
        need += bm_reserve_need(s->b, &q->table, q->n_computed, q->n_computed + n);
        budget -= n;
        if (q->scored && pending > 1) room -= n;
    }
    return need <= bm_n_available(s->b);
}

/* In-batch prefix sharing: would waiting q compute full blocks that a
 * running sequence shares with it and is computing (this step or the one in
 * flight) rather than finding them cached? Those blocks are registered when
 * that pass ends, so q admitted a step later gets them as a prefix hit
 * instead of computing them a second time (requests that arrive together
 * with one long system prompt compute it once). */
static bool shares_pending_prefix(const sched *s, const seq *q) {
    if (!bm_caching(s->b)) return false;
    int limit = q->n_tokens - 1, hit = -1;
    for (int i = 0; i < s->running.n; i++) {
        const seq *r = s->running.v[i];
        int m = limit < r->n_tokens ? limit : r->n_tokens, common = 0;
        while (common < m && q->tokens[common] == r->tokens[common]) common++;
        int shared = common - common % BM_BLOCK;
        if (shared == 0) continue;
        if (hit < 0) hit = bm_lookup(s->b, q->tokens, limit);
        if (shared > hit) return true;
    }
    return false;
}

/* ahead: the current step's pass is in flight (see sched_schedule_ahead). */
static const sched_plan *plan_make(sched *s, bool ahead) {
    plan_reserve(s);
    poll_fetching(s);
    if (!ahead) preempt_for_priority(s);
    int budget = s->o.token_budget, room = score_rows(s);
    bool short_of_blocks = false;
    bm_cow cow;

    /* 1. Running sequences: decodes always, prefill chunks within budget. */
    for (int i = 0; i < s->running.n; i++) {
        seq *q = s->running.v[i];
        if (q->draining) continue; /* ended while in flight: freed when its pass ends */
        int pending = seq_pending(q);
        int n = pending == 1 ? 1 : chunk_len(s, q, budget, room);
        if (n <= 0) continue;
        bool placed = true;
        while (bm_reserve(s->b, &q->table, q->n_computed, q->n_computed + n, &cow) != 0) {
            if (release_idle_holders(s, NULL)) continue;
            if (ahead) { /* cannot happen after ahead_fits; never preempt in flight */
                placed = false;
                break;
            }
            seq *victim = s->running.v[s->running.n - 1];
            if (victim == q && s->running.n == 1 && i == 0) {
                /* Alone and still too big: no preemption can make room. */
                fail(s, q);
                i--;
                placed = false;
                break;
            }
            preempt(s, victim);
            short_of_blocks = true;
            if (victim == q) {
                placed = false;
                i--;
                break;
            }
        }
        if (!placed) continue;
        add_item(s, q, n, &cow);
        budget -= s->plan.items[s->plan.n_items - 1].n_tokens;
        if (q->scored && pending > 1) room -= s->plan.items[s->plan.n_items - 1].n_tokens;
    }

    /* 2. Admissions, unless this step had to preempt; a sequence waits
     * (others pass it) while a running one computes the prefix it shares. */
    int w = 0;
    while (!short_of_blocks && budget > 0 && w < s->waiting.n && s->running.n < s->o.max_running) {
        seq *q = s->waiting.v[w];
        bool fresh = q->table.n == 0 && !q->swapped; /* no blocks, no swapped KV */
        if (fresh && !q->scored && shares_pending_prefix(s, q)) {
            w++;
            continue;
        }
        if (fresh && !attach_prefix(s, q)) continue; /* fetching aside */
        if (q->swapped && q->table.n == 0) swap_admit(s, q);
        int n = chunk_len(s, q, budget, room);
        if (n <= 0) { /* a scored prompt, and no rows left to this step */
            w++;
            continue;
        }
        bool reserved = bm_reserve(s->b, &q->table, q->n_computed, q->n_computed + n, &cow) == 0;
        if (!reserved && release_idle_holders(s, q))
            reserved = bm_reserve(s->b, &q->table, q->n_computed, q->n_computed + n, &cow) == 0;
        if (!reserved) {
            if (q->store_load) drop_load(q);
            bm_release(s->b, &q->table);
            if (!q->swapped) q->n_computed = 0;
            if (!ahead && s->running.n == 0 && s->plan.n_items == 0) { /* pool too small */
                drop_swap(s, q);
                list_remove(&s->waiting, q);
                q->state = SEQ_FINISHED;
                s->plan.failed[s->plan.n_failed++] = q;
                continue;
            }
            break;
        }
        if (!q->admitted) { /* its hits count once, whatever tries came before */
            s->prefix_hit_tokens += q->n_cached_mem;
            s->store_hit_tokens += q->n_cached - q->n_cached_mem;
        }
        q->admitted = true;
        if (q->swapped) { /* its swap space is the engine's to empty now */
            s->swap_used -= q->swap_blocks;
            s->plan.swap_ins[s->plan.n_swap_ins++] = q;
        }
        list_remove(&s->waiting, q);
        sched_add_running(s, q);
        add_item(s, q, n, &cow);
        budget -= n;
        if (q->scored) room -= n;
    }
    return &s->plan;
}

const sched_plan *sched_schedule(sched *s) {
    return plan_make(s, false);
}

const sched_plan *sched_schedule_ahead(sched *s) {
    poll_fetching(s); /* before the check: a fetched sequence may be the most urgent */
    return ahead_fits(s) ? plan_make(s, true) : NULL;
}

bool sched_plan_add(sched *s, seq *q) {
    sched_plan *p = &s->plan;
    int n = seq_pending(q);
    bm_cow cow;
    if (n <= 0 || bm_reserve(s->b, &q->table, q->n_computed, q->n_computed + n, &cow)) return false;
    if (p->n_items + 1 > s->cap_items) {
        s->cap_items = (p->n_items + 1) * 2;
        p->items = di_realloc(p->items, sizeof *p->items * (size_t)s->cap_items);
        p->cows = di_realloc(p->cows, sizeof *p->cows * (size_t)s->cap_items);
    }
    add_item(s, q, n, &cow);
    return true;
}

/* Takes q out of one of the plan's lists of sequences (order not kept). */
static void plan_list_drop(seq **v, int *n, const seq *q) {
    for (int i = 0; i < *n; i++)
        if (v[i] == q) {
            v[i] = v[--*n];
            return;
        }
}

void sched_plan_drop(sched *s, seq *q) {
    sched_plan *p = &s->plan;
    plan_list_drop(p->swap_ins, &p->n_swap_ins, q);
    plan_list_drop(p->swap_drops, &p->n_swap_drops, q);
    for (int i = 0; i < p->n_items; i++) {
        sched_item *it = &p->items[i];
        if (it->s != q) continue;
        if (it->cow >= 0) p->cows[it->cow] = (bm_cow){-1, -1};
        if (it->decode)
            p->n_decode--;
        else
            p->n_prefill_tokens -= it->n_tokens;
        memmove(it, it + 1, sizeof *it * (size_t)(p->n_items - i - 1));
        p->n_items--;
        return;
    }
}
