/* base.h — what every deepinfer module uses: errors, checked allocation,
 * logging and a monotonic clock.
 *
 * Errors: a function that can fail returns int (0 ok, -1 failure) or NULL and
 * writes one line into a caller-provided di_err naming the culprit (file,
 * tensor, field) and what is wrong. Nothing here keeps global mutable state
 * except the log level, set once at start-up. */
#ifndef DI_BASE_H
#define DI_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define DI_ERR_LEN 512
typedef struct di_err {
    char msg[DI_ERR_LEN];
} di_err;

/* Formats into err (if non-NULL) and returns -1, so `return di_errf(...)` reads naturally. */
int di_errf(di_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Allocation that aborts with a message on out-of-memory: used only for
 * sizes the program controls. Sizes derived from untrusted input must be
 * bounded before they get here. */
void *di_malloc(size_t n);
void *di_calloc(size_t n, size_t size);
void *di_realloc(void *p, size_t n);
char *di_strdup(const char *s);
/* Process-wide allocator policy, called once at start by programs with many
 * threads: freed memory up to DI_MALLOC_KEEP stays with the process instead
 * of going back to the kernel, and blocks below DI_MALLOC_MMAP_MIN come from
 * the heap. Returning memory and faulting it back in is cheap for one
 * thread, but on the paravirtualized machines this project runs on (PVM) it
 * was seen to slow a process's other threads too: two threads encoding text
 * with their own tokenizers ran 1.3-1.8x slower each than one alone (two
 * processes did not), about 1.15x with the memory kept. */
#define DI_MALLOC_KEEP     ((size_t)256 << 20)
#define DI_MALLOC_MMAP_MIN ((size_t)64 << 20)
void di_malloc_policy(void);
/* 64-byte aligned, zeroed; free with di_free_aligned. */
void *di_alloc_aligned(size_t n);
void di_free_aligned(void *p);
/* A growable byte string, always NUL-terminated after its n bytes (p is
 * NULL until the first add). Zero-initialise; free with di_buf_free. */
typedef struct di_buf {
    char *p;
    size_t n, cap;
} di_buf;
void di_buf_add(di_buf *b, const void *s, size_t n);
void di_buf_adds(di_buf *b, const char *s);
static inline void di_buf_putc(di_buf *b, char c) {
    if (b->n + 2 <= b->cap) {
        b->p[b->n++] = c;
        b->p[b->n] = 0;
    } else {
        di_buf_add(b, &c, 1);
    }
}
void di_buf_free(di_buf *b);

/* A hex digit's value, or -1. */
static inline int di_hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Large, long-lived buffers (model weights, the KV pool): anonymous memory
 * aligned to 2 MiB and advised for transparent huge pages, so a weight
 * stream crosses a page (and a TLB entry) every 2 MiB instead of every
 * 4 KiB. Zero (the kernel's fresh pages). di_huge_alloc aborts on failure
 * like di_malloc; di_huge_map returns NULL. Free either with di_huge_free and
 * the same size. */
void *di_huge_alloc(size_t n);
void *di_huge_map(size_t n);
void di_huge_free(void *p, size_t n);

enum { DI_LOG_ERROR = 0, DI_LOG_WARN = 1, DI_LOG_INFO = 2, DI_LOG_DEBUG = 3 };
void di_log_set_level(int level);
void di_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Monotonic time in seconds. */
double di_now(void);

/* Reads a whole file; returns NULL with err set. *len gets the size; the
 * buffer is NUL-terminated for convenience. */
char *di_read_file(const char *path, size_t *len, di_err *err);
/* Writes all n bytes to fd (short writes and EINTR retried, at most 1 GiB
 * a call); 0, or -1 with errno set. */
int di_write_all(int fd, const void *p, size_t n);

#endif
