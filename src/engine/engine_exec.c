/* engine_exec.c — the engine's compute thread: runs one forward pass at a
 * time, handed over by the step thread, so that the step thread can do the
 * CPU-side work around it (planning the next step, commits, detokenization,
 * stop strings, event callbacks, admission, cancellations) while the model
 * computes. One job slot under a mutex; the step thread launches a job and
 * later waits for it, never launching a second before the first is done.
 * The time the job spent in the runner and when it ended are returned with
 * it (the busy time behind the engine's idle-fraction figure; the share of
 * planning that overlapped the pass). */
#include <string.h>

#include "engine/engine_internal.h"

static void *exec_main(void *arg) {
    engine_exec *x = arg;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        while (!x->quit && x->state != EXEC_RUN) pthread_cond_wait(&x->cv, &x->mu);
        if (x->quit) break;
        pthread_mutex_unlock(&x->mu);
        di_err err = {{0}};
        double t0 = di_now();
        int rc = x->run->forward(x->run->ctx, x->batch, x->n, &err);
        double dt = di_now() - t0;
        pthread_mutex_lock(&x->mu);
        x->rc = rc;
        x->err = err;
        x->secs = dt;
        x->t_end = t0 + dt;
        x->state = EXEC_DONE;
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

int engine_exec_start(engine_exec *x, const engine_runner *run) {
    memset(x, 0, sizeof *x);
    x->run = run;
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    if (pthread_create(&x->th, NULL, exec_main, x)) {
        pthread_mutex_destroy(&x->mu);
        pthread_cond_destroy(&x->cv);
        return -1;
    }
    x->started = true;
    return 0;
}

void engine_exec_launch(engine_exec *x, model_batch_seq *batch, int n) {
    pthread_mutex_lock(&x->mu);
    x->batch = batch;
    x->n = n;
    x->state = EXEC_RUN;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

bool engine_exec_busy(engine_exec *x) {
    pthread_mutex_lock(&x->mu);
    bool busy = x->state != EXEC_IDLE;
    pthread_mutex_unlock(&x->mu);
    return busy;
}

int engine_exec_wait(engine_exec *x, double *secs, di_err *err) {
    pthread_mutex_lock(&x->mu);
    while (x->state == EXEC_RUN) pthread_cond_wait(&x->cv, &x->mu);
    int rc = x->rc;
    if (rc && err) *err = x->err;
    if (secs) *secs = x->secs;
    x->state = EXEC_IDLE;
    pthread_mutex_unlock(&x->mu);
    return rc;
}

void engine_exec_stop(engine_exec *x) {
    if (!x->started) return;
    pthread_mutex_lock(&x->mu);
    while (x->state == EXEC_RUN) pthread_cond_wait(&x->cv, &x->mu);
    x->quit = true;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    pthread_join(x->th, NULL);
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->cv);
    x->started = false;
}
