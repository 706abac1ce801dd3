/* test_engine_sched.c — the scheduler on its own: a simulated executor
 * advances n_computed and appends a token after each finished chunk. */
#include <stdlib.h>
#include <string.h>

#include "engine/scheduler.h"
#include "harness.h"

static bm *make_bm(int n) {
    int ids[256];
    for (int i = 0; i < n; i++) ids[i] = i;
    return bm_create(ids, n);
}

static seq *mk(uint64_t id, int n_prompt, int prio) {
    int *p = malloc(sizeof(int) * (size_t)n_prompt);
    for (int i = 0; i < n_prompt; i++) p[i] = (int)(id * 1000 + (uint64_t)i) % 977;
    seq *s = seq_new(id, p, n_prompt, prio, id);
    free(p);
    return s;
}

/* Executes a plan: swapped KV back in (the engine's part: the buffer
 * emptied), tokens computed, one token appended where logits. */
static void run_plan(bm *b, const sched_plan *p) {
    for (int i = 0; i < p->n_swap_ins; i++) {
        seq *q = p->swap_ins[i];
        q->swapped = false;
        q->swap_first = q->swap_blocks = 0;
    }
    for (int i = 0; i < p->n_items; i++) {
        seq *q = p->items[i].s;
        q->n_computed += p->items[i].n_tokens;
        bm_commit(b, &q->table, q->tokens, q->n_computed);
        if (p->items[i].logits) seq_append(q, 7);
    }
}

/* Ends a test: q[0, n) taken out of s and freed, then s and b; returns the
 * blocks still in use just before (0: nothing leaked). */
static int release_all(sched *s, bm *b, seq **q, int n) {
    for (int i = 0; i < n; i++) {
        sched_remove(s, q[i]);
        seq_free(q[i]);
    }
    int used = bm_get_stats(b).used;
    sched_free(s);
    bm_free(b);
    return used;
}

TEST(engine_sched_decodes_first_and_chunking) {
    bm *b = make_bm(64);
    sched *s = sched_create(b, &(sched_opts){.token_budget = 100, .max_running = 8});
    seq *a = mk(1, 10, 0), *c = mk(2, 250, 0);
    sched_add_waiting(s, a);
    sched_add_waiting(s, c);
    const sched_plan *p = sched_schedule(s);
    CHECK(p->n_items == 2 && p->items[0].s == a && p->items[0].n_tokens == 10 &&
          p->items[0].logits);
    CHECK(p->items[1].s == c && p->items[1].n_tokens == 90 && !p->items[1].logits);
    run_plan(b, p);
    p = sched_schedule(s);
    /* a decodes (1 token), c continues with the other 99. */
    CHECK(p->n_items == 2 && p->items[0].s == a && p->items[0].n_tokens == 1);
    CHECKF(p->items[1].s == c && p->items[1].n_tokens == 99, "n %d", p->items[1].n_tokens);
    CHECK(p->n_decode == 1 && p->n_prefill_tokens == 99);
    run_plan(b, p);
    p = sched_schedule(s);
    CHECK(p->items[1].n_tokens == 61 && p->items[1].logits);
    run_plan(b, p);
    CHECK(release_all(s, b, (seq *[]){a, c}, 2) == 0);
}

TEST(engine_sched_priority_and_bound) {
    bm *b = make_bm(64);
    sched *s = sched_create(b, &(sched_opts){.token_budget = 1000, .max_running = 2});
    seq *q[4] = {mk(1, 5, 1), mk(2, 5, 0), mk(3, 5, 1), mk(4, 5, 0)};
    for (int i = 0; i < 4; i++) sched_add_waiting(s, q[i]);
    const sched_plan *p = sched_schedule(s);
    CHECK(p->n_items == 2 && p->items[0].s == q[1] && p->items[1].s == q[3]);
    CHECK(sched_n_running(s) == 2 && sched_n_waiting(s) == 2);
    run_plan(b, p);
    sched_remove(s, q[1]);
    p = sched_schedule(s);
    CHECK(p->n_items == 2 && p->items[1].s == q[0]); /* FCFS within class 1 */
    CHECK(release_all(s, b, q, 4) == 0);
}

TEST(engine_sched_preempts_last) {
    bm *b = make_bm(4); /* 512 tokens */
    sched *s = sched_create(b, &(sched_opts){.token_budget = 1000, .max_running = 8});
    seq *x = mk(1, 200, 0), *y = mk(2, 200, 0);
    sched_add_waiting(s, x);
    sched_add_waiting(s, y);
    const sched_plan *p = sched_schedule(s);
    CHECK(p->n_items == 2 && bm_get_stats(b).used == 4);
    run_plan(b, p);
    /* Both decode until x needs a third block at position 256: y goes. */
    for (int step = 0; step < 60; step++) {
        p = sched_schedule(s);
        run_plan(b, p);
    }
    CHECKF(x->n_preempt == 0 && y->n_preempt == 1, "x %d y %d", x->n_preempt, y->n_preempt);
    CHECK(y->state == SEQ_WAITING && y->n_computed == 0 && y->n_tokens > 200);
    sched_remove(s, x);
    p = sched_schedule(s); /* y resumes: its prompt+generated tokens, prefix-cached block */
    CHECK(p->n_items == 1 && p->items[0].s == y && p->items[0].logits);
    CHECKF(y->n_computed == 128, "resumed from %d", y->n_computed);
    /* Its own block found again (at every try while it waited) is no prompt
     * hit: hits count at a sequence's first admission. */
    CHECKF(sched_prefix_hit_tokens(s) == 0 && bm_get_stats(b).hit_tokens >= 128,
           "prefix hits %lld, block manager's %lld", sched_prefix_hit_tokens(s),
           bm_get_stats(b).hit_tokens);
    sched_remove(s, y);
    seq_free(x);
    seq_free(y);
    /* A prompt larger than the whole pool fails instead of looping. */
    seq *z = mk(3, 600, 0);
    sched_add_waiting(s, z);
    p = sched_schedule(s);
    CHECK(p->n_failed == 1 && p->failed[0] == z && sched_n_waiting(s) == 0);
    seq_free(z);
    CHECK(bm_get_stats(b).used == 0);
    sched_free(s);
    bm_free(b);
}

/* With swap space: the preempted sequence keeps its computed tokens, the
 * plan names the blocks to copy out, and its resumption the copy back in
 * (into fresh blocks) before it decodes on; with too little room, or after
 * it leaves while swapped, the space is free again. */
static void swap_case(int swap_blocks) {
    bm *b = make_bm(4);
    sched *s = sched_create(
        b, &(sched_opts){.token_budget = 1000, .max_running = 8, .swap_blocks = swap_blocks});
    seq *x = mk(1, 200, 0), *y = mk(2, 200, 0);
    sched_add_waiting(s, x);
    sched_add_waiting(s, y);
    run_plan(b, sched_schedule(s));
    int y_blocks[2] = {y->table.blocks[0], y->table.blocks[1]};
    const sched_plan *p = NULL;
    for (int step = 0; step < 60 && y->n_preempt == 0; step++) {
        p = sched_schedule(s);
        if (y->n_preempt == 0) run_plan(b, p);
    }
    CHECK(y->n_preempt == 1 && y->state == SEQ_WAITING && y->table.n == 0);
    if (swap_blocks < 2) { /* no room for its 2 blocks: recomputation */
        CHECK(p->n_swap_outs == 0 && y->n_computed == 0 && sched_swap_used(s) == 0);
        CHECK(release_all(s, b, (seq *[]){x, y}, 2) == 0);
        return;
    }
    int computed = y->n_computed;
    CHECKF(computed > 200 && computed <= 256 && y->swap_blocks == 2, "y: %d computed, %d swapped",
           computed, y->swap_blocks);
    CHECK(p->n_swap_outs == 1 && p->swap_outs[0] == y && p->n_preempted == 1);
    const int *ids = p->swap_out_ids + p->swap_out_at[0];
    CHECK(ids[0] == y_blocks[0] && ids[1] == y_blocks[1] && sched_swap_used(s) == 2);
    run_plan(b, p);
    sched_remove(s, x);
    p = sched_schedule(s); /* y resumes where it stopped: a decode */
    CHECK(p->n_swap_ins == 1 && p->swap_ins[0] == y && sched_swap_used(s) == 0);
    CHECKF(p->n_items == 1 && p->items[0].s == y && p->items[0].n_tokens == 1 &&
               y->n_computed == computed && y->table.n == computed / 128 + 1,
           "%d tokens from %d", p->items[0].n_tokens, y->n_computed);
    run_plan(b, p);
    /* Swapped out again (for a more urgent request), then cancelled while
     * waiting: its space comes back. */
    seq *z = mk(3, 300, -1);
    sched_add_waiting(s, z);
    for (int step = 0; step < 200 && y->n_preempt < 2; step++) run_plan(b, sched_schedule(s));
    CHECKF(y->n_preempt == 2 && sched_swap_used(s) > 0, "preempted %d, %d swapped", y->n_preempt,
           sched_swap_used(s));
    sched_remove(s, y);
    CHECK(sched_swap_used(s) == 0);
    CHECK(release_all(s, b, (seq *[]){z}, 1) == 0);
    seq_free(x);
    seq_free(y);
}

TEST(engine_sched_preempts_by_swap) {
    swap_case(8);
    swap_case(1);
}

/* Blocks a swapped sequence shares with running ones stay to the prefix
 * cache (not copied out); it resumes sharing the blocks still cached and
 * copies back only the rest; and when its shared prefix was evicted
 * meanwhile, it drops its swapped KV and goes on from what was found. */
static void swap_shared_case(bool evict) {
    bm *b = make_bm(5);
    sched *s =
        sched_create(b, &(sched_opts){.token_budget = 1000, .max_running = 8, .swap_blocks = 8});
    seq *x = mk(1, 300, 0), *y = mk(2, 300, 0), *z = mk(3, 600, -1);
    memcpy(y->tokens, x->tokens, sizeof(int) * 256); /* two blocks in common */
    sched_add_waiting(s, x);
    sched_add_waiting(s, y);
    for (int step = 0; step < 8 && y->table.n == 0; step++) run_plan(b, sched_schedule(s));
    CHECKF(y->table.n == 3 && y->table.blocks[0] == x->table.blocks[0] &&
               y->table.blocks[1] == x->table.blocks[1],
           "y holds %d blocks", y->table.n);
    int shared[2] = {x->table.blocks[0], x->table.blocks[1]};
    for (int step = 0; step < 200 && y->n_preempt == 0; step++) run_plan(b, sched_schedule(s));
    CHECKF(y->n_preempt == 1 && y->swapped && y->swap_first == 2 && y->swap_blocks == 1 &&
               sched_swap_used(s) == 1 && x->n_preempt == 0,
           "y: swapped %d, first %d, %d blocks", y->swapped, y->swap_first, y->swap_blocks);
    int computed = y->n_computed;
    sched_remove(s, x); /* its blocks stay cached */
    if (evict) {
        /* A more urgent request takes the whole pool (y, tried after it,
         * finds its shared prefix gone and drops its swap), then leaves. */
        sched_add_waiting(s, z);
        const sched_plan *pz = sched_schedule(s);
        CHECKF(z->table.n == 5 && !y->table.n && pz->n_swap_drops == 1 && !y->swapped &&
                   y->n_computed == 0 && sched_swap_used(s) == 0,
               "z %d blocks, drops %d, y computed %d", z->table.n, pz->n_swap_drops, y->n_computed);
        run_plan(b, pz);
        sched_remove(s, z);
    }
    const sched_plan *p = sched_schedule(s);
    if (evict) { /* recomputed from the start */
        CHECK(p->n_swap_ins == 0 && p->n_items == 1 && p->items[0].s == y &&
              p->items[0].n_tokens == y->n_tokens);
    } else {
        CHECKF(p->n_swap_ins == 1 && y->swap_skip == 3 && y->n_computed == computed &&
                   y->table.blocks[0] == shared[0] && y->table.blocks[1] == shared[1] &&
                   sched_swap_used(s) == 0,
               "swap-ins %d, %d blocks found cached", p->n_swap_ins, y->swap_skip);
    }
    run_plan(b, p);
    CHECK(release_all(s, b, (seq *[]){y}, 1) == 0);
    seq_free(x);
    seq_free(z);
}

TEST(engine_sched_swap_shares_cached_prefix) {
    swap_shared_case(false);
    swap_shared_case(true);
}

/* Why first_chunk_blocks may count a swapped sequence's blocks loosely: a
 * swapped sequence that waits is never more urgent than a running one.
 * Random arrivals of four priority classes, lengths and endings over a
 * pool that keeps preempting (by swap, and by recomputation when the swap
 * space is full); after every plan, each swapped waiting sequence against
 * every running one. */
TEST(engine_sched_swapped_never_outranks_runners) {
    bm *b = make_bm(12);
    sched *s =
        sched_create(b, &(sched_opts){.token_budget = 256, .max_running = 6, .swap_blocks = 6});
    enum { MAXQ = 64 };
    seq *live[MAXQ];
    int n_live = 0, gen[MAXQ], swaps = 0, outranked = 0;
    unsigned rng = 12345;
    for (int step = 0, id = 1; step < 3000; step++) {
        if (n_live < MAXQ && harness_lcg(&rng) % 4 == 0) {
            gen[n_live] = 20 + (int)(harness_lcg(&rng) % 200);
            live[n_live] = mk((uint64_t)id++, 40 + (int)(harness_lcg(&rng) % 360),
                              (int)(harness_lcg(&rng) % 4));
            sched_add_waiting(s, live[n_live++]);
        }
        const sched_plan *p = sched_schedule(s);
        swaps += p->n_swap_outs;
        for (int i = 0; i < n_live; i++) {
            if (live[i]->state != SEQ_WAITING || !live[i]->swapped) continue;
            for (int k = 0; k < n_live; k++)
                if (live[k]->state == SEQ_RUNNING && live[k]->priority > live[i]->priority)
                    outranked++;
        }
        run_plan(b, p);
        for (int i = 0; i < n_live; i++) {
            seq *q = live[i];
            bool failed = q->state == SEQ_FINISHED; /* too big for the pool */
            if (failed || seq_generated(q) >= gen[i] || harness_lcg(&rng) % 200 == 0) {
                if (!failed) sched_remove(s, q);
                seq_free(q);
                live[i] = live[--n_live];
                gen[i--] = gen[n_live];
            }
        }
    }
    CHECKF(swaps > 50 && outranked == 0, "%d swaps, %d swapped waiting sequences outranked", swaps,
           outranked);
    CHECK(release_all(s, b, live, n_live) == 0);
}

TEST(engine_sched_priority_preempts) {
    bm *b = make_bm(4);
    sched *s = sched_create(b, &(sched_opts){.token_budget = 1000, .max_running = 8});
    seq *lo1 = mk(1, 200, 5), *lo2 = mk(2, 200, 5);
    sched_add_waiting(s, lo1);
    sched_add_waiting(s, lo2);
    run_plan(b, sched_schedule(s));
    CHECK(bm_n_available(b) == 0);
    /* An urgent request needing one block: the least urgent, latest runner yields. */
    seq *hi = mk(3, 100, 0);
    sched_add_waiting(s, hi);
    const sched_plan *p = sched_schedule(s);
    CHECK(p->n_preempted == 1 && p->preempted[0] == lo2);
    CHECK(p->n_items == 2 && p->items[0].s == lo1 && p->items[1].s == hi);
    run_plan(b, p);
    /* Same class: no preemption for a newcomer. */
    seq *lo3 = mk(4, 100, 5);
    sched_add_waiting(s, lo3);
    p = sched_schedule(s);
    CHECK(p->n_preempted == 0 && sched_n_waiting(s) == 2);
    CHECK(release_all(s, b, (seq *[]){lo1, lo2, hi, lo3}, 4) == 0);
}

/* Requests that arrive together sharing a long prefix compute it once: the
 * second waits (a third, unrelated, passes it) until the first's pass has
 * registered the shared blocks, then attaches them as a prefix hit. With the
 * prefix cache off nobody waits. */
TEST(engine_sched_in_batch_prefix_sharing) {
    for (int caching = 1; caching >= 0; caching--) {
        bm *b = make_bm(64);
        bm_set_caching(b, caching);
        sched *s = sched_create(b, &(sched_opts){.token_budget = 2000, .max_running = 8});
        int prompt[300];
        for (int i = 0; i < 300; i++) prompt[i] = 5 + i % 300;
        seq *a = seq_new(1, prompt, 300, 0, 1);
        prompt[280] = 1; /* shares 280 tokens (two full blocks) with a */
        seq *c = seq_new(2, prompt, 300, 0, 2), *d = mk(3, 40, 0);
        sched_add_waiting(s, a);
        sched_add_waiting(s, c);
        sched_add_waiting(s, d);
        const sched_plan *p = sched_schedule(s);
        if (caching) {
            CHECKF(p->n_items == 2 && p->items[0].s == a && p->items[1].s == d, "n %d", p->n_items);
            run_plan(b, p);
            p = sched_schedule(s);
            CHECK(c->n_cached == 256);
            CHECKF(p->n_items == 3 && p->items[2].s == c && p->items[2].n_tokens == 44, "n %d",
                   p->n_items);
        } else {
            CHECK(p->n_items == 3 && p->items[1].s == c && p->items[1].n_tokens == 300);
        }
        run_plan(b, p);
        CHECK(release_all(s, b, (seq *[]){a, c, d}, 3) == 0);
    }
}
