/* safetensors.h — a validating, memory-mapped reader for one .safetensors
 * file. The file is untrusted input: st_open checks the header length, the
 * JSON, and that every tensor's byte range lies inside the file and matches
 * shape x dtype size, before any tensor is handed out. Tensors point into a
 * read-only private mapping that lives until st_close. */
#ifndef DI_SAFETENSORS_H
#define DI_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define ST_MAX_DIMS   8
#define ST_MAX_HEADER ((uint64_t)100 << 20) /* 100 MiB of JSON is already absurd */

typedef enum {
    ST_F32 = 0,
    ST_F16,
    ST_BF16,
    ST_F8_E4M3,
    ST_OTHER, /* a dtype we can size but not compute with (I64, F8_E5M2, ...) */
} st_dtype;

typedef struct st_tensor {
    const char *name; /* owned by the st_file */
    st_dtype dtype;
    char dtype_name[16]; /* as written in the header, for error messages */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data; /* into the mapping */
    size_t nbytes;
} st_tensor;

typedef struct st_file {
    char *path;
    void *map;
    size_t size;
    st_tensor *tensors;
    int n_tensors;
    char *names; /* one buffer holding every tensor name */
} st_file;

/* Maps and validates path, faulting it in (lazy: only as it is read). On
 * failure returns -1 with err naming the file and the problem; f is left
 * closed. */
int st_open(st_file *f, const char *path, bool lazy, di_err *err);
void st_close(st_file *f);
/* Bytes per element of a dtype name, or 0 when unknown. */
size_t st_dtype_size(const char *name);

#endif
