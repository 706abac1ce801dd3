/* test_pool.c — thread pool: every task runs exactly once, nesting runs
 * serially, single-thread pools, many back-to-back calls, and per-call overhead. */
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
