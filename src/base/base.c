/* base.c — errors, checked allocation, logging, clock, whole-file reads.
 * The only global state is the log level (set once by the CLI). */
#include "base/base.h"

#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int log_level = DI_LOG_WARN;

int di_errf(di_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void oom(size_t n) {
    fprintf(stderr, "deepinfer: out of memory allocating %zu bytes\n", n);
    abort();
}

void di_malloc_policy(void) {
    mallopt(M_MMAP_THRESHOLD, (int)DI_MALLOC_MMAP_MIN);
    mallopt(M_TRIM_THRESHOLD, (int)DI_MALLOC_KEEP);
}

void *di_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *di_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *di_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *di_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = di_malloc(n);
    memcpy(p, s, n);
    return p;
}

void *di_alloc_aligned(size_t n) {
    size_t sz = (n + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, sz ? sz : 64);
    if (!p) oom(n);
    memset(p, 0, sz ? sz : 64);
    return p;
}

void di_free_aligned(void *p) {
    free(p);
}

void di_buf_add(di_buf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = di_realloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void di_buf_adds(di_buf *b, const char *s) {
    di_buf_add(b, s, strlen(s));
}

void di_buf_free(di_buf *b) {
    free(b->p);
    *b = (di_buf){0};
}

#define HUGE_PAGE ((size_t)2 << 20)

void *di_huge_map(size_t n) {
    size_t sz = (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    if (!sz) sz = HUGE_PAGE;
    if (sz < n || sz + HUGE_PAGE < sz) return NULL; /* n near SIZE_MAX */
    /* Over-map by one huge page and trim, so the start is 2 MiB aligned. */
    uint8_t *raw =
        mmap(NULL, sz + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    size_t tail = (size_t)(raw + sz + HUGE_PAGE - (p + sz));
    if (tail) munmap(p + sz, tail);
#ifdef MADV_HUGEPAGE
    madvise(p, sz, MADV_HUGEPAGE); /* advice only: 4 KiB pages still work */
#endif
    return p;
}

void *di_huge_alloc(size_t n) {
    void *p = di_huge_map(n);
    if (!p) oom(n);
    return p;
}

void di_huge_free(void *p, size_t n) {
    if (!p) return;
    size_t sz = (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    munmap(p, sz ? sz : HUGE_PAGE);
}

void di_log_set_level(int level) {
    log_level = level;
}

void di_log(int level, const char *fmt, ...) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    if (level > log_level) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "deepinfer %s: ", names[level < 0 ? 0 : level > 3 ? 3 : level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

double di_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

char *di_read_file(const char *path, size_t *len, di_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        di_errf(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = di_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = di_realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        di_errf(err, "%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int di_write_all(int fd, const void *p, size_t n) {
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}
