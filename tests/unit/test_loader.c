/* test_loader.c — checkpoint loading: config.json parsing, the safetensors
 * validator, dtype conversion, and one clear error line for each way a
 * checkpoint can be broken (each built in a temp dir from C). */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "model/filemap.h"
#include "model/model_internal.h"
#include "model/safetensors.h"
#include "tmodel.h"

/* Loads dir; returns the model or NULL with the error line in err. */
static model *load(const char *dir, model_dtype dt, di_err *err) {
    model_opts o = {.dtype = dt, .threads = 1};
    memset(err, 0, sizeof *err);
    return model_load(dir, &o, err);
}

/* Writes config + the tensor set (possibly broken) and expects model_load to
 * fail with an error containing both needles. */
static int expect_load_error(tm_set *s, const char *extra, const char *n1, const char *n2,
                             char *msg, size_t msg_len) {
    char *dir = tm_tempdir();
    tm_config(dir, "llama", 2, extra);
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    tm_write_st(p, s, 0, s->n);
    di_err err;
    model *m = load(dir, MODEL_DTYPE_BF16, &err);
    snprintf(msg, msg_len, "%s", err.msg);
    tm_rmdir(dir);
    if (m) {
        model_free(m);
        snprintf(msg, msg_len, "loaded a broken checkpoint");
        return 0;
    }
    return strstr(msg, n1) && (!n2 || strstr(msg, n2));
}

TEST(loader_error_missing_config) {
    char *dir = tm_tempdir();
    di_err err;
    model *m = load(dir, MODEL_DTYPE_BF16, &err);
    CHECK(!m);
    CHECKF(strstr(err.msg, "config.json") && strstr(err.msg, "missing"), "%s", err.msg);
    tm_rmdir(dir);
}

TEST(loader_error_unknown_architecture) {
    char *dir = tm_tempdir();
    tm_make(dir, "gpt2", "F32", 2, "");
    di_err err;
    model *m = load(dir, MODEL_DTYPE_BF16, &err);
    CHECK(!m);
    CHECKF(strstr(err.msg, "unknown architecture") && strstr(err.msg, "gpt2"), "%s", err.msg);
    tm_rmdir(dir);
}

TEST(loader_error_bad_config_json) {
    char *dir = tm_tempdir();
    tm_write_text(dir, "config.json", "{\"model_type\": \"llama\", ");
    di_err err;
    model *m = load(dir, MODEL_DTYPE_BF16, &err);
    CHECK(!m);
    CHECKF(strstr(err.msg, "config.json") && strstr(err.msg, "JSON"), "%s", err.msg);
    tm_make(dir, "llama", "F32", 2, "\"vocab_size\": 1e300,");
    m = load(dir, MODEL_DTYPE_BF16, &err);
    CHECK(!m);
    CHECKF(strstr(err.msg, "vocab_size"), "%s", err.msg);
    tm_make(dir, "llama", "F32", 2, "\"num_key_value_heads\": 3,");
    m = load(dir, MODEL_DTYPE_BF16, &err);
    CHECK(!m);
    CHECKF(strstr(err.msg, "num_key_value_heads"), "%s", err.msg);
    tm_rmdir(dir);
}

TEST(loader_error_missing_tensor) {
    tm_set s;
    tm_llama(&s, "F32", 2, true);
    tm_remove(&s, "model.layers.1.mlp.down_proj.weight");
    char msg[DI_ERR_LEN];
    int ok = expect_load_error(&s, "", "model.layers.1.mlp.down_proj.weight", "missing", msg,
                               sizeof msg);
    tm_free(&s);
    CHECKF(ok, "%s", msg);
}

TEST(loader_error_wrong_shape) {
    tm_set s;
    tm_llama(&s, "F32", 2, true);
    tm_tensor *t = tm_find(&s, "model.layers.0.self_attn.k_proj.weight");
    t->shape[0] = TM_HIDDEN; /* same bytes, transposed: [16, 8] instead of [8, 16] */
    t->shape[1] = TM_KV_HEADS * TM_HEAD_DIM;
    char msg[DI_ERR_LEN];
    int ok = expect_load_error(&s, "", "model.layers.0.self_attn.k_proj.weight", "shape", msg,
                               sizeof msg);
    tm_free(&s);
    CHECKF(ok, "%s", msg);
}

TEST(loader_error_unsupported_dtype) {
    static const char *bad[] = {"I64", "F8_E5M2"};
    for (int i = 0; i < 2; i++) {
        tm_set s;
        tm_llama(&s, "F32", 2, true);
        tm_tensor *t = tm_find(&s, "model.layers.1.self_attn.o_proj.weight");
        snprintf(t->dtype, sizeof t->dtype, "%s", bad[i]);
        /* keep the byte count consistent with the claimed dtype */
        size_t esz = st_dtype_size(bad[i]);
        t->nbytes = (size_t)t->shape[0] * (size_t)t->shape[1] * esz;
        t->data = di_realloc(t->data, t->nbytes);
        memset(t->data, 0, t->nbytes);
        char msg[DI_ERR_LEN];
        int ok = expect_load_error(&s, "", "unsupported dtype", bad[i], msg, sizeof msg);
        tm_free(&s);
        CHECKF(ok, "%s: %.400s", bad[i], msg);
    }
}

static void write_raw(const char *dir, const void *buf, size_t n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    FILE *f = fopen(p, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
}

static char *read_whole(const char *dir, size_t *n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    return di_read_file(p, n, NULL);
}

TEST(loader_error_truncated_file) {
    char *dir = tm_tempdir();
    tm_make(dir, "llama", "F32", 2, "");
    size_t n;
    char *buf = read_whole(dir, &n);
    CHECK(buf);
    write_raw(dir, buf, n - 100);
    di_err err;
    model *m = load(dir, MODEL_DTYPE_BF16, &err);
    CHECK(!m);
    CHECKF(strstr(err.msg, "model.safetensors") && strstr(err.msg, "truncated"), "%s", err.msg);
    write_raw(dir, buf, 5); /* not even a header length */
    m = load(dir, MODEL_DTYPE_BF16, &err);
    CHECK(!m);
    CHECKF(strstr(err.msg, "truncated"), "%s", err.msg);
    free(buf);
    tm_rmdir(dir);
}

TEST(loader_error_malformed_header) {
    char *dir = tm_tempdir();
    tm_config(dir, "llama", 2, "");
    struct {
        const char *json;
        const char *needle;
    } cases[] = {
        {"{not json at all", "malformed header JSON"},
        {"[1, 2, 3]", "not a JSON object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", "needs 8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", "bad shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", "bad data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,8]}}",
         "overflow"},
        {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", "unknown dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", "malformed header entry"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         "malformed header JSON"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[0,256]}}", "beyond"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t hl = strlen(cases[i].json);
        unsigned char buf[1024] = {0};
        for (int b = 0; b < 8; b++) buf[b] = (unsigned char)((uint64_t)hl >> (8 * b));
        memcpy(buf + 8, cases[i].json, hl);
        write_raw(dir, buf, 8 + hl + 8); /* 8 data bytes */
        di_err err;
        model *m = load(dir, MODEL_DTYPE_BF16, &err);
        CHECKF(!m, "case %zu loaded", i);
        CHECKF(strstr(err.msg, cases[i].needle) && strstr(err.msg, "model.safetensors"),
               "case %zu: %.400s", i, err.msg);
    }
    /* header length larger than the file */
    unsigned char big[16] = {0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, '{', '}'};
    write_raw(dir, big, sizeof big);
    di_err err;
    CHECK(!load(dir, MODEL_DTYPE_BF16, &err));
    CHECKF(strstr(err.msg, "malformed header") && strstr(err.msg, "exceeds"), "%s", err.msg);
    tm_rmdir(dir);
}

/* Writes the tiny model as two shards with an index; `missing` drops shard 2's file. */
static char *make_sharded(bool missing) {
    char *dir = tm_tempdir();
    tm_set s;
    tm_llama(&s, "BF16", 2, true);
    tm_config(dir, "llama", 2, "");
    int half = s.n / 2;
    char p[4096];
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    tm_write_st(p, &s, 0, half);
    if (!missing) {
        snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
        tm_write_st(p, &s, half, s.n);
    }
    size_t cap = 64 * 1024, len = 0;
    char *idx = di_malloc(cap);
    len += (size_t)snprintf(idx, cap, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < s.n; i++)
        len += (size_t)snprintf(idx + len, cap - len,
                                "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "",
                                s.t[i].name, i < half ? 1 : 2);
    snprintf(idx + len, cap - len, "}}");
    tm_write_text(dir, "model.safetensors.index.json", idx);
    free(idx);
    tm_free(&s);
    return dir;
}

TEST(loader_error_missing_shard) {
    char *dir = make_sharded(true);
    di_err err;
    model *m = load(dir, MODEL_DTYPE_BF16, &err);
    CHECK(!m);
    CHECKF(strstr(err.msg, "model-00002-of-00002.safetensors") && strstr(err.msg, "missing") &&
               strstr(err.msg, "index.json"),
           "%s", err.msg);
    /* shard names come from an untrusted file: no paths out of the directory */
    tm_write_text(dir, "model.safetensors.index.json",
                  "{\"weight_map\": {\"model.norm.weight\": \"../../etc/passwd\"}}");
    CHECK(!load(dir, MODEL_DTYPE_BF16, &err));
    CHECKF(strstr(err.msg, "not a plain file name"), "%s", err.msg);
    tm_rmdir(dir);
}

static void last_logits(model *m, const int *toks, int n, float *out) {
    di_err err;
    model_kv_pool *kv = model_kv_pool_create(m, 4, &err);
    model_seq s;
    model_seq_init(m, &s);
    model_seq_reserve(kv, &s, n, &err);
    model_batch_seq b = {.seq = &s, .tokens = toks, .n_tokens = n, .logits = out};
    if (model_forward(m, kv, &b, 1, &err)) fprintf(stderr, "%s\n", err.msg);
    model_seq_free(m, kv, &s);
    model_kv_pool_free(kv);
}

static double rel_diff(const float *a, const float *b, int n) {
    double md = 0, mx = 1e-30;
    for (int i = 0; i < n; i++) {
        double d = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
        double v = a[i] < 0 ? -a[i] : a[i];
        if (d > md) md = d;
        if (v > mx) mx = v;
    }
    return md / mx;
}

/* True when p lies inside a file mapping whose path contains `needle`. */
static bool in_file_mapping(const void *p, const char *needle) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    bool found = false;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)p >= lo && (uintptr_t)p < hi &&
            strstr(line, needle))
            found = true;
    }
    if (f) fclose(f);
    return found;
}

TEST(loader_sharded_matches_single_and_bf16_in_place) {
    char *dir = make_sharded(false);
    di_err err;
    model *m = load(dir, MODEL_DTYPE_BF16, &err);
    CHECKF(m, "%s", err.msg);
    /* bf16-stored weights are used from the mapping, not copied */
    CHECK(m->w.layers[1].wq.dtype == KT_BF16);
    CHECK(in_file_mapping(m->w.layers[1].wq.data, "di_tmodel_"));
    CHECK(in_file_mapping(m->w.embed.data, "di_tmodel_"));
    CHECK(!in_file_mapping(m->w.layers[0].attn_norm, "di_tmodel_")); /* f32 copy */
    int toks[5] = {1, 5, 9, 30, 2};
    float a[TM_VOCAB], b[TM_VOCAB];
    last_logits(m, toks, 5, a);
    model_free(m);
    char *one = tm_tempdir();
    tm_make(one, "llama", "BF16", 2, "");
    m = load(one, MODEL_DTYPE_BF16, &err);
    CHECKF(m, "%s", err.msg);
    last_logits(m, toks, 5, b);
    model_free(m);
    CHECKF(rel_diff(a, b, TM_VOCAB) == 0, "sharded != single: %g", rel_diff(a, b, TM_VOCAB));
    tm_rmdir(dir);
    tm_rmdir(one);
}

TEST(loader_dtypes_agree) {
    /* f32/f16/bf16 stored x f32/bf16/int8 compute: logits close to f32/f32. */
    int toks[6] = {3, 7, 11, 13, 17, 19};
    float ref[TM_VOCAB], got[TM_VOCAB];
    char *dir = tm_tempdir();
    tm_make(dir, "llama", "F32", 2, "");
    di_err err;
    model *m = load(dir, MODEL_DTYPE_F32, &err);
    CHECKF(m, "%s", err.msg);
    CHECK(m->w.layers[0].wq.dtype == KT_F32);
    last_logits(m, toks, 6, ref);
    const model_info *in = model_get_info(m);
    /* f32 weights: 2 layers x (q,k,v,o,gate,up,down) + embed + lm_head + norms */
    size_t mats = 2 * (size_t)(16 * 16 + 8 * 16 * 2 + 16 * 16 + 32 * 16 * 3) + 2 * 32 * 16;
    size_t vecs = (2 * 2 + 1) * 16;
    CHECKF(in->weight_bytes == 4 * (mats + vecs), "weight_bytes %zu", in->weight_bytes);
    CHECK(in->flops_per_token == 2.0 * (double)(mats - 32 * 16)); /* embed is a lookup */
    CHECK(in->bos_id == 1 && in->n_eos == 1 && in->eos_ids[0] == 2);
    model_free(m);
    const char *stored[] = {"F32", "F16", "BF16"};
    const model_dtype compute[] = {MODEL_DTYPE_F32, MODEL_DTYPE_BF16, MODEL_DTYPE_INT8};
    const double tol[] = {1e-2, 3e-2, 8e-2};
    for (int s = 0; s < 3; s++)
        for (int c = 0; c < 3; c++) {
            tm_make(dir, "llama", stored[s], 2, "");
            m = load(dir, compute[c], &err);
            CHECKF(m, "%s", err.msg);
            CHECK(m->w.layers[0].wq.dtype == (c == 0 ? KT_F32 : c == 1 ? KT_BF16 : KT_I8));
            last_logits(m, toks, 6, got);
            model_free(m);
            double d = rel_diff(ref, got, TM_VOCAB);
            CHECKF(d < tol[c], "stored %s compute %d: rel diff %g", stored[s], c, d);
        }
    /* per-group int8 */
    tm_make(dir, "llama", "F32", 2, "");
    model_opts o = {.dtype = MODEL_DTYPE_INT8, .int8_group = 8, .threads = 1};
    m = model_load(dir, &o, &err);
    CHECKF(m, "%s", err.msg);
    CHECK(m->w.layers[0].wq.group == 8 && m->w.layers[0].down.group == 8);
    last_logits(m, toks, 6, got);
    model_free(m);
    CHECKF(rel_diff(ref, got, TM_VOCAB) < 5e-2, "int8 g8: %g", rel_diff(ref, got, TM_VOCAB));
    tm_rmdir(dir);
}

static uint8_t to_e4m3(float x) {
    /* nearest of the 256 codes (brute force, test only) */
    int best = 0;
    float bd = 1e30f;
    for (int c = 0; c < 256; c++) {
        float v = kern_fp8e4m3_to_f32((uint8_t)c);
        if (v != v) continue;
        float d = v > x ? v - x : x - v;
        if (d < bd) {
            bd = d;
            best = c;
        }
    }
    return (uint8_t)best;
}

TEST(loader_fp8_block_scales_partial_edges) {
    /* A 130 x 260 fp8 matrix has 2 x 3 blocks, the last row/column blocks partial. */
    enum { R = 130, C = 260 };
    tm_set s;
    tm_llama(&s, "F32", 2, true);
    uint8_t *q = di_malloc(R * C);
    float scales[2 * 3] = {0.5f, 2.0f, 0.25f, 4.0f, 1.0f, 8.0f};
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) q[r * C + c] = to_e4m3((float)((r * 7 + c * 3) % 17 - 8) / 4);
    long shape[2] = {R, C}, sshape[2] = {2, 3};
    tm_add(&s, "extra.weight", "F8_E4M3", 2, shape, q, R * C);
    tm_add(&s, "extra.weight_scale_inv", "F32", 2, sshape, scales, sizeof scales);
    tm_add(&s, "noscale.weight", "F8_E4M3", 2, shape, q, R * C);
    char *dir = tm_tempdir();
    tm_config(dir, "llama", 2, "");
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    tm_write_st(p, &s, 0, s.n);
    tm_free(&s);
    di_err err;
    model *m = load(dir, MODEL_DTYPE_F32, &err);
    CHECKF(m, "%s", err.msg);
    kern_mat w;
    CHECKF(model_get_mat(m->ld, "extra.weight", R, C, false, &w, &err) == 0, "%s", err.msg);
    CHECK(w.dtype == KT_F32);
    const float *v = w.data;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            float want = kern_fp8e4m3_to_f32(q[r * C + c]) * scales[(r / 128) * 3 + c / 128];
            CHECKF(v[r * C + c] == want, "[%d,%d] %g != %g", r, c, v[r * C + c], want);
        }
    CHECK(model_get_mat(m->ld, "noscale.weight", R, C, false, &w, &err) == -1);
    CHECKF(strstr(err.msg, "noscale.weight_scale_inv"), "%s", err.msg);
    CHECK(model_get_mat(m->ld, "extra.weight", C, R, false, &w, &err) == -1);
    CHECKF(strstr(err.msg, "shape"), "%s", err.msg);
    model_free(m);
    free(q);
    tm_rmdir(dir);
}

/* --- config.json ------------------------------------------------------------ */

static int config_of(const char *model_type, int n_layers, const char *extra, model_config *c,
                     di_err *err) {
    char *dir = tm_tempdir();
    tm_config(dir, model_type, n_layers, extra);
    int rc = model_config_load(c, dir, err);
    tm_rmdir(dir);
    return rc;
}

TEST(loader_config_sliding_window_rules) {
    model_config c;
    di_err err;
    /* Mistral with sliding_window and no layer_types: every layer */
    CHECK(config_of("mistral", 3, "\"sliding_window\": 8,", &c, &err) == 0);
    CHECK(c.sliding_window == 8 && c.layer_swa[0] && c.layer_swa[1] && c.layer_swa[2]);
    model_config_free(&c);
    /* Mistral with sliding_window null: none */
    CHECK(config_of("mistral", 3, "\"sliding_window\": null,", &c, &err) == 0);
    CHECK(c.sliding_window == 0 && !c.layer_swa[0]);
    model_config_free(&c);
    /* Qwen2: only with use_sliding_window, from max_window_layers on */
    CHECK(config_of("qwen2", 4, "\"sliding_window\": 8, \"max_window_layers\": 2,", &c, &err) == 0);
    CHECK(!c.layer_swa[0] && !c.layer_swa[3] && c.attention_bias);
    model_config_free(&c);
    CHECK(
        config_of("qwen2", 4,
                  "\"sliding_window\": 8, \"max_window_layers\": 2, \"use_sliding_window\": true,",
                  &c, &err) == 0);
    CHECK(!c.layer_swa[0] && !c.layer_swa[1] && c.layer_swa[2] && c.layer_swa[3]);
    model_config_free(&c);
    /* layer_types wins, on any family */
    CHECK(config_of("llama", 3,
                    "\"sliding_window\": 8, \"layer_types\": [\"sliding_attention\", "
                    "\"full_attention\", \"sliding_attention\"],",
                    &c, &err) == 0);
    CHECK(c.layer_swa[0] && !c.layer_swa[1] && c.layer_swa[2]);
    model_config_free(&c);
    CHECK(config_of("llama", 4, "\"sliding_window\": 8, \"sliding_window_pattern\": 2,", &c,
                    &err) == 0);
    CHECK(c.layer_swa[0] && !c.layer_swa[1] && c.layer_swa[2] && !c.layer_swa[3]);
    model_config_free(&c);
    CHECK(config_of("llama", 3, "\"sliding_window\": 8, \"layer_types\": [\"full_attention\"],", &c,
                    &err) == -1);
    CHECKF(strstr(err.msg, "layer_types"), "%s", err.msg);
    CHECK(config_of("llama", 2, "\"layer_types\": [\"sliding_attention\", \"full_attention\"],", &c,
                    &err) == -1);
    CHECKF(strstr(err.msg, "sliding_window"), "%s", err.msg);
}

TEST(loader_config_fields) {
    model_config c;
    di_err err;
    CHECK(config_of("qwen3", 2,
                    "\"head_dim\": 8, \"tie_word_embeddings\": true, \"eos_token_id\": [2, 5, 2],",
                    &c, &err) == 0);
    CHECK(c.arch == ARCH_QWEN3 && c.qk_norm && c.head_dim == 8 && c.tie_word_embeddings);
    CHECK(c.n_eos == 2 && c.eos_ids[0] == 2 && c.eos_ids[1] == 5 && c.bos_token_id == 1);
    CHECK(!c.rope_interleaved && c.rope_kind == ROPE_DEFAULT);
    model_config_free(&c);
    CHECK(config_of("llama", 2,
                    "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                    "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                    "\"original_max_position_embeddings\": 64},",
                    &c, &err) == 0);
    CHECK(c.rope_kind == ROPE_LLAMA3 && c.rope_factor == 8.0f && c.rope_original_max_pos == 64);
    model_config_free(&c);
    CHECK(config_of("llama", 2, "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0},", &c,
                    &err) == 0);
    CHECK(c.rope_kind == ROPE_LINEAR && c.rope_factor == 2.0f);
    model_config_free(&c);
    CHECK(config_of("llama", 2, "\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0},", &c,
                    &err) == -1);
    CHECKF(strstr(err.msg, "dynamic"), "%s", err.msg);
    CHECK(
        config_of("deepseek_v3", 2,
                  "\"kv_lora_rank\": 8, \"qk_nope_head_dim\": 4, \"qk_rope_head_dim\": 4, "
                  "\"v_head_dim\": 4, \"q_lora_rank\": null, \"n_routed_experts\": 4, "
                  "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 8, "
                  "\"first_k_dense_replace\": 1, \"n_group\": 2, \"topk_group\": 1, "
                  "\"scoring_func\": \"sigmoid\", \"topk_method\": \"noaux_tc\", "
                  "\"num_nextn_predict_layers\": 1, \"rope_scaling\": {\"type\": \"yarn\", "
                  "\"factor\": 40, \"mscale\": 1.0, \"mscale_all_dim\": 1.0, "
                  "\"original_max_position_embeddings\": 64, \"beta_fast\": 32, \"beta_slow\": 1},",
                  &c, &err) == 0);
    CHECK(c.rope_interleaved && c.q_lora_rank == 0 && c.kv_lora_rank == 8);
    CHECK(c.scoring_func == SCORE_SIGMOID && c.topk_method == TOPK_NOAUX_TC);
    CHECK(!model_layer_is_moe(&c, 0) && model_layer_is_moe(&c, 1));
    CHECK(c.rope_kind == ROPE_YARN && c.yarn_mscale_all_dim == 1.0f);
    CHECK(c.num_nextn_predict_layers == 1 && !c.layer_swa[2]);
    model_config_free(&c);
    /* generation_config.json eos ids join config.json's */
    char *dir = tm_tempdir();
    tm_config(dir, "llama", 2, "");
    tm_write_text(dir, "generation_config.json", "{\"eos_token_id\": [7, 2]}");
    CHECK(model_config_load(&c, dir, &err) == 0);
    CHECK(c.n_eos == 2 && c.eos_ids[0] == 2 && c.eos_ids[1] == 7);
    model_config_free(&c);
    tm_rmdir(dir);
}

TEST(loader_tied_embeddings) {
    char *dir = tm_tempdir();
    tm_set s;
    tm_llama(&s, "BF16", 2, false);
    tm_config(dir, "qwen2", 2, "\"tie_word_embeddings\": true,");
    /* qwen2 needs q/k/v biases */
    float z[16] = {0};
    for (int l = 0; l < 2; l++) {
        char n[96];
        long q = 16, kv = 8;
        snprintf(n, sizeof n, "model.layers.%d.self_attn.q_proj.bias", l);
        tm_add(&s, n, "F32", 1, &q, z, 64);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.k_proj.bias", l);
        tm_add(&s, n, "F32", 1, &kv, z, 32);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.v_proj.bias", l);
        tm_add(&s, n, "F32", 1, &kv, z, 32);
    }
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    tm_write_st(p, &s, 0, s.n);
    tm_free(&s);
    di_err err;
    model *m = load(dir, MODEL_DTYPE_BF16, &err);
    CHECKF(m, "%s", err.msg);
    CHECK(m->w.lm_head.data == m->w.embed.data && m->w.layers[0].bq);
    model_free(m);
    tm_rmdir(dir);
}

TEST(loader_rope_tables) {
    char *dir = tm_tempdir();
    tm_make(dir, "llama", "F32", 2, "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 4.0},");
    di_err err;
    model *m = load(dir, MODEL_DTYPE_F32, &err);
    CHECKF(m, "%s", err.msg);
    float cs[2], sn[2];
    model_rope_at(m, 40, TM_HEAD_DIM, cs, sn);
    /* inv_freq = theta^(-2i/d) / 4: i = 0 -> 1/4, i = 1 -> 0.01/4 */
    CHECKF(fabsf(cs[0] - cosf(10.0f)) < 1e-6f && fabsf(sn[1] - sinf(0.1f)) < 1e-6f, "%g %g", cs[0],
           sn[1]);
    CHECK(model_attn_mscale(m) == 1.0f);
    model_free(m);
    tm_rmdir(dir);
}

/* cos/sin at position 50, computed by tools/reference.py (float64) for the
 * configs below; the C tables must agree to f32 rounding. */
TEST(loader_rope_llama3_and_yarn_match_reference) {
    static const float l3_cos[8] = {9.649660285e-01f, 9.403493388e-01f, 7.948033835e-01f,
                                    9.805322456e-01f, 9.980475107e-01f, 9.998046939e-01f,
                                    9.999804688e-01f, 9.999980469e-01f};
    static const float l3_sin[8] = {-2.623748537e-01f, -3.402104070e-01f, 6.068670213e-01f,
                                    1.963581305e-01f,  6.245931784e-02f,  1.976294867e-02f,
                                    6.249959310e-03f,  1.976422251e-03f};
    static const float y_cos[8] = {1.115232459e+00f, -3.667173641e-01f, -2.060028862e-01f,
                                   1.154819200e+00f, 1.155631701e+00f,  1.155712961e+00f,
                                   1.155721087e+00f, 1.155721900e+00f};
    static const float y_sin[8] = {-3.032323881e-01f, -1.095998035e+00f, 1.137214197e+00f,
                                   4.567202696e-02f,  1.444614867e-02f,  4.568380392e-03f,
                                   1.444652112e-03f,  4.568392170e-04f};
    model m;
    di_err err;
    float cs[8], sn[8];
    memset(&m, 0, sizeof m);
    CHECK(config_of(
              "llama", 2,
              "\"head_dim\": 16, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
              "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
              "\"original_max_position_embeddings\": 64},",
              &m.cfg, &err) == 0);
    CHECK(model_rope_init(&m, &err) == 0);
    model_rope_at(&m, 50, 16, cs, sn);
    for (int i = 0; i < 8; i++)
        CHECKF(fabsf(cs[i] - l3_cos[i]) < 2e-6f && fabsf(sn[i] - l3_sin[i]) < 2e-6f,
               "llama3 pair %d: %g %g", i, cs[i], sn[i]);
    CHECK(model_attn_mscale(&m) == 1.0f);
    model_rope_free(&m);
    model_config_free(&m.cfg);
    CHECK(
        config_of("deepseek_v3", 2,
                  "\"kv_lora_rank\": 8, \"qk_nope_head_dim\": 8, \"qk_rope_head_dim\": 16, "
                  "\"v_head_dim\": 8, \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40.0, "
                  "\"mscale\": 1.0, \"mscale_all_dim\": 0.5, "
                  "\"original_max_position_embeddings\": 64, \"beta_fast\": 32, \"beta_slow\": 1},",
                  &m.cfg, &err) == 0);
    CHECK(model_rope_init(&m, &err) == 0);
    model_rope_at(&m, 50, 16, cs, sn);
    for (int i = 0; i < 8; i++)
        CHECKF(fabsf(cs[i] - y_cos[i]) < 3e-6f && fabsf(sn[i] - y_sin[i]) < 3e-6f,
               "yarn pair %d: %g %g", i, cs[i], sn[i]);
    CHECKF(fabsf(model_attn_mscale(&m) - 1.402907524f) < 1e-6f, "%g", model_attn_mscale(&m));
    model_rope_free(&m);
    model_config_free(&m.cfg);
}

/* The header is untrusted: random byte flips and every truncation of a small
 * valid file must give a clean open or a clean error, never a crash (this
 * test earns its keep under ASan/UBSan). */
TEST(loader_safetensors_fuzz_header) {
    char *dir = tm_tempdir();
    tm_set s;
    tm_llama(&s, "BF16", 1, false);
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECK(tm_write_st(p, &s, 0, 4) == 0);
    tm_free(&s);
    size_t n;
    char *orig = di_read_file(p, &n, NULL);
    CHECK(orig && n > 16);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | (unsigned char)orig[i];
    char *buf = di_malloc(n);
    uint32_t seed = 12345;
    int opened = 0, failed = 0;
    for (int it = 0; it < 400; it++) {
        memcpy(buf, orig, n);
        int flips = 1 + it % 4;
        for (int k = 0; k < flips; k++) {
            seed = seed * 1664525u + 1013904223u;
            size_t at = (seed >> 8) % (8 + hl);
            seed = seed * 1664525u + 1013904223u;
            buf[at] =
                (char)(it % 3 == 0 ? "{}[]\":,0123456789-e"[(seed >> 8) % 19] : (int)(seed >> 24));
        }
        size_t len = it % 5 == 0 ? (seed >> 4) % n : n;
        FILE *f = fopen(p, "wb");
        fwrite(buf, 1, len, f);
        fclose(f);
        st_file sf;
        di_err err;
        if (st_open(&sf, p, false, &err) == 0) {
            for (int t = 0; t < sf.n_tensors; t++) { /* every tensor must lie in the file */
                const uint8_t *d = sf.tensors[t].data, *base = sf.map;
                CHECK(d >= base && d + sf.tensors[t].nbytes <= base + sf.size);
            }
            st_close(&sf);
            opened++;
        } else {
            CHECK(strstr(err.msg, "model.safetensors"));
            failed++;
        }
    }
    CHECK(failed > 0 && opened + failed == 400);
    free(buf);
    free(orig);
    tm_rmdir(dir);
}

/* Stacked q/k/v and gate/up give bit-identical logits to separate matmuls:
 * every kernel's per-element reduction order depends on K only. Both ways a
 * stack is made: copies (f32-stored, computed in bf16) and in place. */
static void unstack(model *m) {
    for (int l = 0; l < m->cfg.n_layers; l++) {
        m->w.layers[l].wqkv.data = NULL;
        m->w.layers[l].bqkv = NULL;
        m->w.layers[l].gate_up.data = NULL;
    }
}

TEST(loader_stacked_projections_match_separate) {
    const char *stored[2] = {"F32", "BF16"};
    int toks[6] = {3, 7, 11, 13, 17, 19};
    for (int i = 0; i < 2; i++) {
        char *dir = tm_tempdir();
        tm_make(dir, "llama", stored[i], 2, "");
        di_err err;
        model *m = load(dir, MODEL_DTYPE_BF16, &err);
        CHECKF(m, "%s", err.msg);
        const model_layer *L = &m->w.layers[1];
        if (i == 0) { /* copies are always stacked, parts viewing the stack */
            CHECK(L->wqkv.data == L->wq.data && L->gate_up.data == L->gate.data);
            CHECK((const uint16_t *)L->wk.data ==
                  (const uint16_t *)L->wq.data + (size_t)L->wq.rows * L->wq.cols);
        }
        float a[TM_VOCAB], b[TM_VOCAB];
        last_logits(m, toks, 6, a);
        unstack(m);
        last_logits(m, toks, 6, b);
        CHECKF(rel_diff(a, b, TM_VOCAB) == 0, "%s: stacked != separate: %g", stored[i],
               rel_diff(a, b, TM_VOCAB));
        model_free(m);
        tm_rmdir(dir);
    }
}

/* A file past FILEMAP_HUGE_MIN goes through the aligned huge-page path
 * (whether 2 MiB pages take depends on the filesystem); its bytes must read
 * back exactly, first to last. */
TEST(loader_filemap_large_file_reads_back) {
    char *dir = tm_tempdir();
    char path[512];
    snprintf(path, sizeof path, "%s/big.bin", dir);
    size_t size = FILEMAP_HUGE_MIN + 4096 + 123;
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    uint32_t buf[4096];
    for (size_t off = 0; f && off < size; off += sizeof buf) {
        for (int k = 0; k < 4096; k++) buf[k] = (uint32_t)(off / 4 + (size_t)k) * 2654435761u;
        size_t n = size - off < sizeof buf ? size - off : sizeof buf;
        CHECK(fwrite(buf, 1, n, f) == n);
    }
    if (f) fclose(f);
    int fd = open(path, O_RDONLY);
    bool huge;
    const uint8_t *p = filemap_open(fd, size, &huge);
    close(fd);
    CHECK(p != MAP_FAILED);
    bool same = true;
    for (size_t off = 0; p != MAP_FAILED && off + 4 <= size; off += 4096 * 4 + 4) {
        uint32_t want = (uint32_t)(off / 4) * 2654435761u, got;
        memcpy(&got, p + off, 4);
        same &= got == want;
    }
    CHECK(same);
    CHECK(p == MAP_FAILED || ((uintptr_t)p & ((2u << 20) - 1)) == 0);
    if (p != MAP_FAILED) munmap((void *)p, size);
    tm_rmdir(dir);
}
