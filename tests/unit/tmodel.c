/* tmodel.c — writes tiny Llama-shaped safetensors checkpoints for the model
 * tests (see tmodel.h). Values come from a fixed xorshift stream so every run
 * builds the same model. No global state. */
#include "tmodel.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "kernels/kernels.h"

static uint32_t tm_rand(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static float tm_uniform(uint32_t *s) {
    return (float)(tm_rand(s) >> 8) / (float)(1 << 23) - 1.0f;
}

void tm_add(tm_set *s, const char *name, const char *dtype, int ndim, const long *shape,
            const void *data, size_t nbytes) {
    s->t = di_realloc(s->t, (size_t)(s->n + 1) * sizeof *s->t);
    tm_tensor *t = &s->t[s->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->data = di_malloc(nbytes);
    memcpy(t->data, data, nbytes);
    t->nbytes = nbytes;
}

static uint16_t f32_to_f16(float f) {
    /* enough for the fixture's small normal values */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int exp = (int)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffff;
    if (exp <= 0) return (uint16_t)sign;
    uint32_t h = sign | (uint32_t)exp << 10 | mant >> 13;
    if ((mant >> 12) & 1) h++; /* round half up */
    return (uint16_t)h;
}

static void add_random(tm_set *s, uint32_t *seed, const char *name, const char *dtype, long rows,
                       long cols, float base, float amp) {
    size_t n = (size_t)rows * (size_t)(cols ? cols : 1);
    float *v = di_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = base + amp * tm_uniform(seed);
    long shape[2] = {rows, cols};
    int ndim = cols ? 2 : 1;
    if (!strcmp(dtype, "F32")) {
        tm_add(s, name, dtype, ndim, shape, v, n * 4);
    } else {
        uint16_t *h = di_malloc(n * 2);
        for (size_t i = 0; i < n; i++)
            h[i] = !strcmp(dtype, "BF16") ? kern_f32_to_bf16(v[i]) : f32_to_f16(v[i]);
        tm_add(s, name, dtype, ndim, shape, h, n * 2);
        free(h);
    }
    free(v);
}

void tm_llama(tm_set *s, const char *dtype, int n_layers, bool with_lm_head) {
    memset(s, 0, sizeof *s);
    uint32_t seed = 0x1234567u;
    const long H = TM_HIDDEN, I = TM_INTER, Q = TM_HEADS * TM_HEAD_DIM,
               KV = TM_KV_HEADS * TM_HEAD_DIM;
    add_random(s, &seed, "model.embed_tokens.weight", dtype, TM_VOCAB, H, 0, 1.0f);
    add_random(s, &seed, "model.norm.weight", "F32", H, 0, 1.0f, 0.1f);
    if (with_lm_head) add_random(s, &seed, "lm_head.weight", dtype, TM_VOCAB, H, 0, 0.5f);
    for (int l = 0; l < n_layers; l++) {
        char n[96];
#define L(suffix) (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), n)
        add_random(s, &seed, L("input_layernorm.weight"), "F32", H, 0, 1.0f, 0.1f);
        add_random(s, &seed, L("post_attention_layernorm.weight"), "F32", H, 0, 1.0f, 0.1f);
        add_random(s, &seed, L("self_attn.q_proj.weight"), dtype, Q, H, 0, 0.5f);
        add_random(s, &seed, L("self_attn.k_proj.weight"), dtype, KV, H, 0, 0.5f);
        add_random(s, &seed, L("self_attn.v_proj.weight"), dtype, KV, H, 0, 0.5f);
        add_random(s, &seed, L("self_attn.o_proj.weight"), dtype, H, Q, 0, 0.3f);
        add_random(s, &seed, L("mlp.gate_proj.weight"), dtype, I, H, 0, 0.4f);
        add_random(s, &seed, L("mlp.up_proj.weight"), dtype, I, H, 0, 0.4f);
        add_random(s, &seed, L("mlp.down_proj.weight"), dtype, H, I, 0, 0.3f);
#undef L
    }
}

tm_tensor *tm_find(tm_set *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->t[i].name, name)) return &s->t[i];
    return NULL;
}

void tm_remove(tm_set *s, const char *name) {
    tm_tensor *t = tm_find(s, name);
    if (!t) return;
    free(t->data);
    int i = (int)(t - s->t);
    memmove(t, t + 1, (size_t)(s->n - i - 1) * sizeof *t);
    s->n--;
}

void tm_free(tm_set *s) {
    for (int i = 0; i < s->n; i++) free(s->t[i].data);
    free(s->t);
    memset(s, 0, sizeof *s);
}

int tm_write_st(const char *path, const tm_set *s, int from, int to) {
    size_t cap = 4096 + (size_t)(to - from) * 256, len = 0, off = 0;
    char *hdr = di_malloc(cap);
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = from; i < to; i++) {
        const tm_tensor *t = &s->t[i];
        len += (size_t)snprintf(hdr + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                                t->name, t->dtype);
        for (int d = 0; d < t->ndim; d++)
            len += (size_t)snprintf(hdr + len, cap - len, "%s%ld", d ? "," : "", t->shape[d]);
        len += (size_t)snprintf(hdr + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", off,
                                off + t->nbytes);
        off += t->nbytes;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8) hdr[len++] = ' '; /* keep the data area 8-byte aligned, as HF does */
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(hdr);
        return -1;
    }
    uint64_t hl = len;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hl >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(hdr, 1, len, f);
    for (int i = from; i < to; i++) fwrite(s->t[i].data, 1, s->t[i].nbytes, f);
    fclose(f);
    free(hdr);
    return 0;
}

char *tm_tempdir(void) {
    char *d = di_strdup("/tmp/di_tmodel_XXXXXX");
    if (!mkdtemp(d)) {
        free(d);
        return NULL;
    }
    return d;
}

void tm_rmdir(char *dir) {
    if (!dir) return;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[4096];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

void tm_write_text(const char *dir, const char *name, const char *text) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

void tm_config(const char *dir, const char *model_type, int n_layers, const char *extra) {
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"model_type\": \"%s\", \"vocab_size\": %d, \"hidden_size\": %d,"
             " \"intermediate_size\": %d, \"num_hidden_layers\": %d,"
             " \"num_attention_heads\": %d, \"num_key_value_heads\": %d,"
             " \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-5,"
             " \"rope_theta\": 10000.0, \"bos_token_id\": 1, \"eos_token_id\": 2, %s"
             " \"_end\": 0}",
             model_type, TM_VOCAB, TM_HIDDEN, TM_INTER, n_layers, TM_HEADS, TM_KV_HEADS, extra);
    tm_write_text(dir, "config.json", buf);
}

void tm_make(const char *dir, const char *model_type, const char *dtype, int n_layers,
             const char *extra) {
    tm_set s;
    tm_llama(&s, dtype, n_layers, true);
    tm_config(dir, model_type, n_layers, extra);
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    tm_write_st(p, &s, 0, s.n);
    tm_free(&s);
}
