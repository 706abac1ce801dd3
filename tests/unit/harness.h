/* harness.h — the unit-test runner's interface. Tests register themselves:
 *
 *     TEST(pool_runs_every_task) { ... CHECK(x == 3); CHECKF(a < b, "a=%d", a); }
 *
 * `test_unit [FILTER]` runs every test whose name contains FILTER and ends
 * with the line "N passed, N failed". A failing CHECK stops that test only.
 * Tests that need generated models read the directory from $DI_TEST_MODELS
 * (tests/run.sh sets it) through harness_model_dir(). */
#ifndef DI_HARNESS_H
#define DI_HARNESS_H

#include <stdio.h>

typedef void (*harness_fn)(void);
void harness_register(const char *name, harness_fn fn);
void harness_fail(const char *file, int line, const char *what);
/* Directory holding the tiny test models (build/models by default). */
const char *harness_model_dir(void);
/* A test's own reproducible random stream: the next value of state *r
 * (24 bits). */
static inline unsigned harness_lcg(unsigned *r) {
    *r = *r * 1103515245u + 12345u;
    return *r >> 8;
}

#define TEST(name)                                                                                 \
    static void name(void);                                                                        \
    __attribute__((constructor)) static void harness_reg_##name(void) {                            \
        harness_register(#name, name);                                                             \
    }                                                                                              \
    static void name(void)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            harness_fail(__FILE__, __LINE__, #cond);                                               \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            char harness_msg_[512];                                                                \
            snprintf(harness_msg_, sizeof harness_msg_, __VA_ARGS__);                              \
            harness_fail(__FILE__, __LINE__, harness_msg_);                                        \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#endif
