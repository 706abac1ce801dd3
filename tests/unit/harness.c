/* harness.c — runs the registered unit tests and prints "N passed, N failed". */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define MAX_TESTS 4096
static struct {
    const char *name;
    harness_fn fn;
} tests[MAX_TESTS];
static int n_tests;
static int current_failed;

void harness_register(const char *name, harness_fn fn) {
    if (n_tests == MAX_TESTS) {
        fprintf(stderr, "harness: too many tests\n");
        abort();
    }
    tests[n_tests].name = name;
    tests[n_tests].fn = fn;
    n_tests++;
}

void harness_fail(const char *file, int line, const char *what) {
    fprintf(stderr, "  FAIL %s:%d: %s\n", file, line, what);
    current_failed = 1;
}

const char *harness_model_dir(void) {
    const char *d = getenv("DI_TEST_MODELS");
    return d && *d ? d : "build/models";
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    /* Deterministic order regardless of link order. */
    qsort(tests, (size_t)n_tests, sizeof tests[0], by_name);
    int passed = 0, failed = 0;
    for (int i = 0; i < n_tests; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        current_failed = 0;
        double t0 = di_now();
        tests[i].fn();
        double ms = (di_now() - t0) * 1e3;
        if (current_failed) {
            failed++;
            fprintf(stderr, "not ok %s (%.0f ms)\n", tests[i].name, ms);
        } else {
            passed++;
            fprintf(stderr, "ok %s (%.0f ms)\n", tests[i].name, ms);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
