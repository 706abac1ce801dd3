/* engine_stub.c — the engine entry points the server's objects reference,
 * for the fuzz binary only: srv_fuzz_one never reaches an engine, so the
 * fuzz build links src/server, src/recipe and src/base with these stubs
 * instead of the engine, model and kernels (which need ISA-specific code
 * that the fuzzing compiler need not build). Calling one is a bug. */
#include <stdlib.h>

#include "engine/engine.h"

uint64_t engine_submit(engine *e, const engine_request *req, di_err *err) {
    (void)e, (void)req, (void)err;
    abort();
}
void engine_cancel(engine *e, uint64_t id) {
    (void)e, (void)id;
    abort();
}
engine_stats engine_get_stats(engine *e) {
    (void)e;
    abort();
}
