/* pool.c — the fixed thread pool behind every data-parallel kernel loop.
 *
 * Shape: one job slot per pool. pool_run publishes (fn, ctx, n_tasks), bumps
 * a generation counter and joins in. Tasks are handed out through one 64-bit
 * ticket = (generation << 32 | next index), taken by compare-and-swap: a
 * worker only runs a task whose ticket carries the generation it read the job
 * under, so a worker that wakes late (descheduled on a busy machine) can never
 * run a stale or half-published job, and the caller never waits for a worker
 * that has not started: it waits only for tasks actually taken. The caller
 * closes the ticket (new generation, index exhausted) before rewriting the
 * slot, which is what makes the slot safe to reuse.
 *
 * Workers spin on the generation counter for a short while (a decode step
 * issues hundreds of pool_run calls back to back, and waking a sleeping thread
 * costs tens of microseconds) and then sleep on a futex, so an idle server
 * does not burn its cores.
 *
 * pool_for runs on pool_run, one task per thread: each task owns one share
 * of the range, (front, back) in one 64-bit word taken by compare-and-swap,
 * the owner from the front and the others, once their own share is done,
 * from the back.
 *
 * Global state: one thread-local flag marking "inside a pool task", so a
 * nested pool_run (from any pool) runs serially on the calling thread. */
#include "base/pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/base.h"

#define POOL_MAX_THREADS 256
/* Spin iterations (each a pause) before a worker sleeps: roughly 100 µs. */
#define POOL_SPIN     20000
#define TICKET_CLOSED 0xffffffffu

static _Thread_local int pool_in_task;

/* One thread's share of a pool_for range, in grains: front << 32 | back. */
typedef struct {
    _Alignas(64) _Atomic uint64_t span;
} pool_share;

struct pool {
    int n_threads; /* including the caller */
    pthread_t *threads;
    /* Job slot: written (release) by pool_run while the ticket is closed. */
    _Atomic(pool_fn) fn;
    _Atomic(void *) ctx;
    atomic_int n_tasks;
    _Alignas(64) _Atomic uint64_t ticket; /* gen << 32 | next task index */
    _Alignas(64) atomic_int done;         /* tasks finished in this job */
    _Alignas(64) atomic_uint gen;         /* job generation; futex word */
    atomic_int sleepers;                  /* workers blocked (or about to) on gen */
    atomic_int quit;
    pool_share *shares; /* n_threads, for pool_for */
};

static void futex_wait(atomic_uint *addr, unsigned val) {
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *addr) {
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}

static inline void cpu_relax(void) {
    __builtin_ia32_pause();
}

/* Runs tasks of generation g until its tickets are used up (or the pool has
 * moved to another generation, which means g is finished). */
static void pool_drain(pool *p, unsigned g) {
    pool_fn fn = atomic_load_explicit(&p->fn, memory_order_acquire);
    void *ctx = atomic_load_explicit(&p->ctx, memory_order_acquire);
    int n = atomic_load_explicit(&p->n_tasks, memory_order_acquire);
    uint64_t t = atomic_load_explicit(&p->ticket, memory_order_acquire);
    for (;;) {
        if ((unsigned)(t >> 32) != g || (uint32_t)t >= (uint32_t)n) return;
        if (!atomic_compare_exchange_weak_explicit(&p->ticket, &t, t + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        fn(ctx, (int)(uint32_t)t, n);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        t = atomic_load_explicit(&p->ticket, memory_order_acquire);
    }
}

static void *pool_worker(void *arg) {
    pool *p = arg;
    pool_in_task = 1;
    unsigned seen = 0; /* gen starts at 0; a job published before we got here still runs */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (++spins < POOL_SPIN) {
                cpu_relax();
                continue;
            }
            atomic_fetch_add(&p->sleepers, 1);
            /* Re-check after announcing ourselves: pool_run bumps gen before
             * reading sleepers, so either we see the bump or it sees us. */
            if (atomic_load(&p->gen) == seen) futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
            spins = 0;
        }
        seen = g;
        if (atomic_load(&p->quit)) return NULL;
        pool_drain(p, g);
    }
}

pool *pool_create(int n_threads) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > POOL_MAX_THREADS) n_threads = POOL_MAX_THREADS;
    pool *p = di_alloc_aligned(sizeof *p);
    p->n_threads = n_threads;
    atomic_init(&p->fn, NULL);
    atomic_init(&p->ctx, NULL);
    atomic_init(&p->n_tasks, 0);
    atomic_init(&p->ticket, (uint64_t)TICKET_CLOSED);
    atomic_init(&p->done, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->quit, 0);
    p->threads = di_calloc((size_t)n_threads, sizeof *p->threads);
    p->shares = di_alloc_aligned((size_t)n_threads * sizeof *p->shares);
    for (int i = 1; i < n_threads; i++) {
        if (pthread_create(&p->threads[i], NULL, pool_worker, p) != 0) {
            /* Run with the threads we have: correctness does not depend on it. */
            di_log(DI_LOG_WARN, "pool: could not start thread %d of %d", i, n_threads);
            p->n_threads = i;
            break;
        }
    }
    return p;
}

void pool_free(pool *p) {
    if (!p) return;
    atomic_store(&p->quit, 1);
    atomic_fetch_add(&p->gen, 1);
    futex_wake_all(&p->gen);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    di_free_aligned(p->shares);
    di_free_aligned(p);
}

int pool_threads(const pool *p) {
    return p ? p->n_threads : 1;
}

void pool_run(pool *p, pool_fn fn, void *ctx, int n_tasks) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1 || pool_in_task) {
        int was = pool_in_task;
        pool_in_task = 1;
        for (int i = 0; i < n_tasks; i++) fn(ctx, i, n_tasks);
        pool_in_task = was;
        return;
    }
    unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    /* Close the ticket under the new generation before touching the slot: a
     * late worker still holding the old generation can take nothing now. */
    atomic_store_explicit(&p->ticket, (uint64_t)g << 32 | TICKET_CLOSED, memory_order_seq_cst);
    atomic_store_explicit(&p->fn, fn, memory_order_release);
    atomic_store_explicit(&p->ctx, ctx, memory_order_release);
    atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_release);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->ticket, (uint64_t)g << 32, memory_order_release);
    atomic_store_explicit(&p->gen, g, memory_order_seq_cst);
    if (atomic_load_explicit(&p->sleepers, memory_order_seq_cst) > 0) futex_wake_all(&p->gen);
    pool_in_task = 1;
    pool_drain(p, g);
    pool_in_task = 0;
    /* Every task has been taken; wait for the ones other threads are running. */
    for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks; spins++) {
        if (spins > POOL_SPIN)
            sched_yield(); /* oversubscribed: let the runner run */
        else
            cpu_relax();
    }
}

/* --- pool_for ------------------------------------------------------------- */
typedef struct {
    pool_range_fn fn;
    void *ctx;
    int n, grain;
    pool_share *shares;
} for_job;

/* Takes grains [*g, *g + *cnt) of share s: the owner from the front, an
 * eighth of what is left (at least one grain), so it makes few calls while
 * what it holds stays small against what others can still take; the others
 * one grain from the back. */
static bool share_take(pool_share *s, bool front, unsigned *g, unsigned *cnt) {
    uint64_t v = atomic_load_explicit(&s->span, memory_order_relaxed);
    for (;;) {
        unsigned f = (unsigned)(v >> 32), b = (unsigned)v;
        if (f >= b) return false;
        unsigned c = front && (b - f) / 8 > 1 ? (b - f) / 8 : 1;
        uint64_t nv = front ? (uint64_t)(f + c) << 32 | b : (uint64_t)f << 32 | (b - 1);
        if (atomic_compare_exchange_weak_explicit(&s->span, &v, nv, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *g = front ? f : b - 1;
            *cnt = c;
            return true;
        }
    }
}

static void for_grains(const for_job *j, unsigned g, unsigned cnt) {
    long lo = (long)g * j->grain, hi = lo + (long)cnt * j->grain;
    j->fn(j->ctx, (int)lo, hi < j->n ? (int)hi : j->n);
}

static void for_task(void *ctx, int task, int n_tasks) {
    const for_job *j = ctx;
    unsigned g, cnt;
    while (share_take(&j->shares[task], true, &g, &cnt)) for_grains(j, g, cnt);
    for (;;) { /* own share done: the back of the share with the most left */
        int most = -1;
        unsigned left = 0;
        for (int s = 0; s < n_tasks; s++) {
            uint64_t v = atomic_load_explicit(&j->shares[s].span, memory_order_relaxed);
            unsigned f = (unsigned)(v >> 32), b = (unsigned)v;
            if (f < b && b - f > left) left = b - f, most = s;
        }
        if (most < 0) return;
        if (share_take(&j->shares[most], false, &g, &cnt)) for_grains(j, g, cnt);
    }
}

void pool_for(pool *p, pool_range_fn fn, void *ctx, int n, int grain) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    unsigned grains = (unsigned)((n - 1) / grain) + 1;
    int T = p ? p->n_threads : 1;
    if ((unsigned)T > grains) T = (int)grains;
    if (T == 1 || pool_in_task) { /* serial, and the shares are not ours to touch */
        fn(ctx, 0, n);
        return;
    }
    for (int t = 0; t < T; t++) {
        uint64_t f = (uint64_t)grains * (unsigned)t / (unsigned)T;
        uint64_t b = (uint64_t)grains * (unsigned)(t + 1) / (unsigned)T;
        atomic_store_explicit(&p->shares[t].span, f << 32 | b, memory_order_relaxed);
    }
    for_job j = {.fn = fn, .ctx = ctx, .n = n, .grain = grain, .shares = p->shares};
    pool_run(p, for_task, &j, T);
}
