/* pool.h — a fixed thread pool for data-parallel loops with low per-call
 * overhead (workers spin briefly, then sleep on a futex/condvar).
 *
 * pool_run(p, fn, ctx, n) calls fn(ctx, i, n) once for each i in [0, n), spread
 * over the pool's threads with the calling thread taking part, and returns when
 * all calls are done. Calls from inside a task run serially on the caller.
 * One pool_run at a time per pool (the engine's step loop owns its pool). */
#ifndef DI_POOL_H
#define DI_POOL_H

typedef struct pool pool;
typedef void (*pool_fn)(void *ctx, int task, int n_tasks);

/* n_threads counts the caller; n_threads <= 0 means all online cores. */
pool *pool_create(int n_threads);
void pool_free(pool *p);
int pool_threads(const pool *p);
void pool_run(pool *p, pool_fn fn, void *ctx, int n_tasks);

/* pool_for(p, fn, ctx, n, grain) calls fn(ctx, lo, hi) on disjoint ranges
 * of whole grains that together cover [0, n): lo a multiple of `grain`, hi
 * too or n. Each thread starts on its own contiguous share of [0, n) and
 * walks it front to back, so it reads memory as one sequential stream; a
 * thread that finishes its share takes single grains from the back of the
 * share with the most left, so the threads finish together even when one
 * streams slower or starts late. For loops whose iterations stream memory in
 * order (one-token matmuls: one row per iteration). */
typedef void (*pool_range_fn)(void *ctx, int lo, int hi);
void pool_for(pool *p, pool_range_fn fn, void *ctx, int n, int grain);

#endif
