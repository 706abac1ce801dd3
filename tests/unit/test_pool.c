/* test_pool.c — thread pool: every task runs exactly once, nesting runs
 * serially, single-thread pools, many back-to-back calls, and per-call
 * overhead; pool_for covers every index once in whole grains, balances a
 * slow share by taking grains from its back, and nests serially. */
#include "harness.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/base.h"
#include "base/pool.h"

typedef struct count_ctx {
    atomic_int *hits;
    atomic_int calls;
    int n_seen_bad;
} count_ctx;

static void count_task(void *ctx, int task, int n_tasks) {
    count_ctx *c = ctx;
    if (task < 0 || task >= n_tasks) c->n_seen_bad++;
    atomic_fetch_add(&c->hits[task], 1);
    atomic_fetch_add(&c->calls, 1);
}

static int run_counts(pool *p, int n) {
    count_ctx c = {.hits = calloc((size_t)n, sizeof(atomic_int))};
    pool_run(p, count_task, &c, n);
    int ok = atomic_load(&c.calls) == n && c.n_seen_bad == 0;
    for (int i = 0; i < n; i++) ok &= atomic_load(&c.hits[i]) == 1;
    free(c.hits);
    return ok;
}

TEST(pool_every_task_once) {
    pool *p = pool_create(2);
    CHECK(pool_threads(p) == 2);
    static const int sizes[] = {1, 2, 3, 7, 64, 1000};
    for (int i = 0; i < 6; i++) CHECKF(run_counts(p, sizes[i]), "n_tasks=%d", sizes[i]);
    pool_run(p, count_task, NULL, 0); /* no tasks: returns without calling */
    pool_free(p);
}

TEST(pool_single_thread_and_default) {
    pool *p = pool_create(1);
    CHECK(pool_threads(p) == 1);
    CHECK(run_counts(p, 17));
    pool_free(p);
    p = pool_create(0);
    CHECK(pool_threads(p) >= 1);
    CHECK(run_counts(p, 33));
    pool_free(p);
    CHECK(run_counts(NULL, 5)); /* NULL pool: the caller runs everything */
}

TEST(pool_many_calls) {
    pool *p = pool_create(4); /* more threads than cores: exercises preemption */
    int ok = 1;
    for (int i = 0; i < 2000 && ok; i++) ok = run_counts(p, 1 + i % 9);
    CHECK(ok);
    pool_free(p);
}

/* Workers that went to sleep on the futex are woken by the next call. */
TEST(pool_wakes_sleeping_workers) {
    pool *p = pool_create(3);
    int ok = 1;
    for (int i = 0; i < 6 && ok; i++) {
        usleep(5000); /* longer than the spin phase */
        ok = run_counts(p, 16);
    }
    CHECK(ok);
    pool_free(p);
}

typedef struct nest_ctx {
    pool *p;
    atomic_int inner;
    atomic_int outer;
} nest_ctx;

static void inner_task(void *ctx, int task, int n_tasks) {
    atomic_fetch_add(&((nest_ctx *)ctx)->inner, 1);
}

static void outer_task(void *ctx, int task, int n_tasks) {
    nest_ctx *c = ctx;
    atomic_fetch_add(&c->outer, 1);
    pool_run(c->p, inner_task, c, 5); /* runs serially on this thread */
}

TEST(pool_nested_runs_serially) {
    pool *p = pool_create(2);
    nest_ctx c = {.p = p};
    for (int i = 0; i < 50; i++) pool_run(p, outer_task, &c, 3);
    CHECK(atomic_load(&c.outer) == 150);
    CHECK(atomic_load(&c.inner) == 750);
    pool_free(p);
}

static void empty_task(void *ctx, int task, int n_tasks) {}

TEST(pool_overhead) {
    pool *p = pool_create(2);
    for (int i = 0; i < 1000; i++) pool_run(p, empty_task, NULL, 2);
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = di_now();
        for (int i = 0; i < 2000; i++) pool_run(p, empty_task, NULL, 2);
        double us = (di_now() - t0) / 2000 * 1e6;
        if (us < best) best = us;
    }
    fprintf(stderr, "  pool_run empty, 2 threads: %.2f us/call\n", best);
    /* Generous bound: the shared CI machine and sanitizers both slow this down. */
    CHECKF(best < 200, "pool_run overhead %.1f us", best);
    pool_free(p);
}

/* --- pool_for ------------------------------------------------------------- */
typedef struct for_ctx {
    atomic_int *hits; /* per index */
    int n, grain;
    atomic_int bad;  /* ranges not of whole grains, or out of [0, n) */
    int slow_below;  /* indices below this sleep (one grain at a time) */
    atomic_int *who; /* per grain: the thread that ran it */
} for_ctx;

static atomic_int next_thread_id;
static _Thread_local int thread_id = -1;

static void for_range(void *ctx, int lo, int hi) {
    for_ctx *c = ctx;
    if (thread_id < 0) thread_id = atomic_fetch_add(&next_thread_id, 1);
    if (lo < 0 || hi > c->n || lo >= hi || lo % c->grain || (hi < c->n && hi % c->grain))
        atomic_fetch_add(&c->bad, 1);
    if (lo < 0 || hi > c->n) return;
    for (int i = lo; i < hi; i++) {
        if (c->who && i % c->grain == 0) atomic_store(&c->who[i / c->grain], thread_id);
        if (i < c->slow_below && i % c->grain == 0) usleep(2000);
        atomic_fetch_add(&c->hits[i], 1);
    }
}

static int for_covers(pool *p, int n, int grain) {
    for_ctx c = {.hits = calloc((size_t)n, sizeof(atomic_int)), .n = n, .grain = grain};
    pool_for(p, for_range, &c, n, grain);
    int ok = atomic_load(&c.bad) == 0;
    for (int i = 0; i < n; i++) ok &= atomic_load(&c.hits[i]) == 1;
    free(c.hits);
    return ok;
}

TEST(pool_for_covers_each_index_once) {
    static const int sizes[] = {1, 5, 64, 1000, 12345}, grains[] = {1, 7, 64, 5000};
    pool *pools[] = {NULL, pool_create(1), pool_create(2), pool_create(4)};
    for (int q = 0; q < 4; q++)
        for (int s = 0; s < 5; s++)
            for (int g = 0; g < 4; g++)
                CHECKF(for_covers(pools[q], sizes[s], grains[g]), "pool %d, n=%d, grain=%d", q,
                       sizes[s], grains[g]);
    for (int i = 0; i < 500; i++) CHECK(for_covers(pools[2], 1 + i % 37, 1 + i % 5));
    for (int q = 1; q < 4; q++) pool_free(pools[q]);
}

/* One thread's share is slow: the other thread, done with its own share,
 * takes grains from the slow share's back, and the owner keeps its front. */
TEST(pool_for_steals_from_a_slow_share) {
    pool *p = pool_create(2);
    enum { N = 100, GRAIN = 1 };
    atomic_int who[N];
    for (int i = 0; i < N; i++) atomic_init(&who[i], -1);
    for_ctx c = {.hits = calloc(N, sizeof(atomic_int)),
                 .n = N,
                 .grain = GRAIN,
                 .slow_below = N / 2,
                 .who = who};
    pool_for(p, for_range, &c, N, GRAIN);
    int ok = atomic_load(&c.bad) == 0;
    for (int i = 0; i < N; i++) ok &= atomic_load(&c.hits[i]) == 1;
    CHECK(ok);
    /* share 0 is [0, 50): its first grain and its last were run by
     * different threads, and the fast share's owner ran that last one */
    CHECKF(atomic_load(&who[0]) != atomic_load(&who[N / 2 - 1]), "grain 0 by %d, grain %d by %d",
           atomic_load(&who[0]), N / 2 - 1, atomic_load(&who[N / 2 - 1]));
    CHECK(atomic_load(&who[N / 2 - 1]) == atomic_load(&who[N / 2]));
    free(c.hits);
    pool_free(p);
}

static void for_outer_task(void *ctx, int task, int n_tasks) {
    nest_ctx *c = ctx;
    if (for_covers(c->p, 300, 7)) atomic_fetch_add(&c->outer, 1); /* runs serially here */
}

TEST(pool_for_nested_runs_serially) {
    pool *p = pool_create(2);
    nest_ctx c = {.p = p};
    for (int i = 0; i < 20; i++) pool_run(p, for_outer_task, &c, 4);
    CHECK(atomic_load(&c.outer) == 80);
    pool_free(p);
}
