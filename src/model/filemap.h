/* filemap.h — read-only mappings of weight files, in 2 MiB pages where the
 * kernel allows it (filemap.c). */
#ifndef DI_MODEL_FILEMAP_H
#define DI_MODEL_FILEMAP_H

#include <stdbool.h>
#include <stddef.h>

/* Maps `size` bytes of fd read-only (MAP_PRIVATE) and faults it in. Files of
 * FILEMAP_HUGE_MIN bytes or more are mapped 2 MiB-aligned with huge pages
 * advised and read through page faults, so the page cache holds them in
 * 2 MiB folios that map with one PMD each; *huge tells whether that took.
 * Returns MAP_FAILED (errno set) on failure. Unmap with munmap(p, size). */
#define FILEMAP_HUGE_MIN ((size_t)64 << 20)
void *filemap_open(int fd, size_t size, bool *huge);
/* The same mapping, faulted in only as it is read (*huge false): for a file
 * most of which may never be read (filemap_populate faults it in later). */
void *filemap_open_lazy(int fd, size_t size);
/* Faults a mapping in (read faults; the pages stay as the page cache holds
 * them). */
void filemap_populate(void *p, size_t size);

#endif
