/* filemap.c — how weight files are mapped. Decode streams every weight once
 * per token straight from the file mapping (bf16 is used in place), and it
 * streams 2 MiB pages markedly faster than 4 KiB ones: a TLB entry and a
 * page walk per 2 MiB instead of per 4 KiB, and hardware prefetchers that
 * stop at page boundaries run on.
 *
 * The page cache maps a file range with one PMD only when it holds it in a
 * 2 MiB folio, at a virtual address congruent to the file offset modulo
 * 2 MiB. So a large file is mapped at a 2 MiB-aligned address (offset 0
 * congruent), advised MADV_HUGEPAGE, and populated through read faults: a
 * fault in a huge-page VMA reads ahead whole 2 MiB folios (filesystems with
 * large folios; others fall back to 4 KiB pages, which still work). A file
 * already cached in small folios, wholly or in part (written by another
 * process, read by one without the advice), keeps mapping small there. So
 * when a probe of the first 2 MiB maps small, or the populated mapping maps
 * huge but not nearly all of it, the clean cached pages are dropped
 * (POSIX_FADV_DONTNEED; pages other processes map stay) and read again, a
 * one-time cost of one read of the file at load. A file found half small
 * decoded llama-1b about 15 % slower.
 *
 * No state: the probe reads /proc/self/smaps. */
#include "model/filemap.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_2M ((size_t)2 << 20)

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

/* FilePmdMapped of the mapping starting at p, in kB (0 if none or unknown). */
static long pmd_mapped_kb(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return 0;
    char line[512];
    bool in = false;
    long kb = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's header line */
            if (in) break;
            in = lo == (uintptr_t)p;
        } else if (in && sscanf(line, "FilePmdMapped: %ld kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb;
}

/* The file at a 2 MiB-aligned address of a reserved range, huge pages advised. */
static void *map_aligned(int fd, size_t size) {
    uint8_t *res = mmap(NULL, size + HUGE_2M, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (res == MAP_FAILED) return MAP_FAILED;
    uint8_t *a = (uint8_t *)(((uintptr_t)res + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
    if (a > res) munmap(res, (size_t)(a - res));
    size_t tail = (size_t)(res + size + HUGE_2M - (a + size));
    if (tail) munmap(a + size, tail);
    void *p = mmap(a, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        munmap(a, size);
        return MAP_FAILED;
    }
    madvise(p, size, MADV_HUGEPAGE);
    return p;
}

/* Drops the file's clean cached pages and maps it afresh, to be read again. */
static void *remap_uncached(int fd, void *p, size_t size) {
    munmap(p, size);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    return map_aligned(fd, size);
}

void *filemap_open_lazy(int fd, size_t size) {
    return size < FILEMAP_HUGE_MIN ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0)
                                   : map_aligned(fd, size);
}

void filemap_populate(void *p, size_t size) {
    if (madvise(p, size, MADV_POPULATE_READ) != 0) madvise(p, size, MADV_WILLNEED);
}

void *filemap_open(int fd, size_t size, bool *huge) {
    *huge = false;
    if (size < FILEMAP_HUGE_MIN) {
        void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p != MAP_FAILED) madvise(p, size, MADV_WILLNEED);
        return p;
    }
    void *p = map_aligned(fd, size);
    if (p == MAP_FAILED) return p;
    volatile uint8_t probe = *(const uint8_t *)p; /* faults the first 2 MiB in */
    (void)probe;
    if (pmd_mapped_kb(p) == 0 && (p = remap_uncached(fd, p, size)) == MAP_FAILED)
        return p; /* cached small */
    for (int pass = 0;; pass++) {
        /* Read faults, not readahead (MADV_WILLNEED reads ahead in small folios). */
        filemap_populate(p, size);
        size_t pmd = (size_t)pmd_mapped_kb(p) << 10;
        *huge = pmd > 0;
        /* Done: all but the file's last partial 2 MiB (and a little slack)
         * maps huge, or nothing does (no large folios here: reading again
         * would not help), or this was the second read. */
        if (pass == 1 || pmd == 0 || pmd + HUGE_2M + size / 32 >= size) return p;
        /* huge pages work, but part of the file was cached small */
        if ((p = remap_uncached(fd, p, size)) == MAP_FAILED) return p;
    }
}
