/* tmodel.h — tiny Llama-shaped checkpoints written from C for the model tests:
 * a tensor set with deterministic random values that a test can break
 * (drop a tensor, change a shape or dtype) before writing it as safetensors
 * into a temp directory next to a config.json. */
#ifndef DI_TMODEL_H
#define DI_TMODEL_H

#include <stdbool.h>
#include <stddef.h>

/* The fixture's dimensions. */
enum {
    TM_VOCAB = 32,
    TM_HIDDEN = 16,
    TM_INTER = 32,
    TM_HEADS = 4,
    TM_KV_HEADS = 2,
    TM_HEAD_DIM = 4
};

typedef struct tm_tensor {
    char name[96];
    char dtype[16];
    int ndim;
    long shape[4];
    unsigned char *data;
    size_t nbytes;
} tm_tensor;

typedef struct tm_set {
    tm_tensor *t;
    int n;
} tm_set;

/* Every tensor of an n_layers tiny llama, stored as dtype "F32", "BF16" or "F16". */
void tm_llama(tm_set *s, const char *dtype, int n_layers, bool with_lm_head);
tm_tensor *tm_find(tm_set *s, const char *name);
void tm_remove(tm_set *s, const char *name);
/* Adds a tensor with the given raw bytes (copied). */
void tm_add(tm_set *s, const char *name, const char *dtype, int ndim, const long *shape,
            const void *data, size_t nbytes);
void tm_free(tm_set *s);

/* Writes tensors [from, to) of s as a safetensors file. 0 on success. */
int tm_write_st(const char *path, const tm_set *s, int from, int to);
/* A fresh directory under /tmp (caller frees the string, tm_rmdir removes it). */
char *tm_tempdir(void);
void tm_rmdir(char *dir);
void tm_write_text(const char *dir, const char *name, const char *text);
/* config.json of the tiny llama; `extra` (may be "") is spliced in after the
 * base fields, each followed by a comma, e.g. "\"sliding_window\": 4,"; a
 * field repeated there overrides the base (JSON's last duplicate wins). */
void tm_config(const char *dir, const char *model_type, int n_layers, const char *extra);
/* The whole checkpoint: config + model.safetensors. */
void tm_make(const char *dir, const char *model_type, const char *dtype, int n_layers,
             const char *extra);

#endif
