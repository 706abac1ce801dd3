/* model_internal.h — what the model subsystem's own files share: the parsed
 * config, the immutable weights, and the loader's tensor lookup. Nothing
 * outside src/model/ includes this.
 *
 * Ownership: config.c fills model_config; loader.c (safetensors, dtype
 * conversion, quantization) fills model_weights through model_get_mat /
 * model_get_vec; llama.c runs the Llama-family layers, deepseek.c the MLA and
 * MoE layers and MTP. Weights never change after load. */
#ifndef DI_MODEL_INTERNAL_H
#define DI_MODEL_INTERNAL_H

#include "kernels/kernels.h"
#include "model/model.h"

typedef enum {
    ARCH_LLAMA = 0,
    ARCH_QWEN2,
    ARCH_QWEN3,
    ARCH_MISTRAL,
    ARCH_DEEPSEEK_V2,
    ARCH_DEEPSEEK_V3,
} model_arch;

typedef enum { ROPE_DEFAULT = 0, ROPE_LINEAR, ROPE_LLAMA3, ROPE_YARN } model_rope_kind;
typedef enum { SCORE_SOFTMAX = 0, SCORE_SIGMOID } model_score_fn;
typedef enum { TOPK_GREEDY = 0, TOPK_GROUP_LIMITED, TOPK_NOAUX_TC } model_topk_method;

typedef struct model_config {
    model_arch arch;
    char model_type[32];
    int vocab_size, hidden_size, intermediate_size, n_layers;
    int n_heads, n_kv_heads, head_dim;
    int max_position_embeddings;
    float rms_norm_eps;
    bool tie_word_embeddings;
    bool attention_bias; /* qwen2: q/k/v biases */
    bool qk_norm;        /* qwen3: per-head RMSNorm on q and k */

    /* RoPE */
    float rope_theta;
    model_rope_kind rope_kind;
    float rope_factor;                                 /* linear, llama3, yarn */
    float rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
    int rope_original_max_pos;                         /* llama3, yarn */
    float yarn_beta_fast, yarn_beta_slow, yarn_mscale, yarn_mscale_all_dim;
    bool rope_interleaved; /* DeepSeek: adjacent pairs; Llama family: half-split */

    /* Sliding window: layer_swa[l] tells which layers attend to the last
     * `sliding_window` positions only (the query's own position included:
     * position j is visible from i when i - sliding_window < j <= i). */
    int sliding_window;
    bool *layer_swa; /* n_layers (+ MTP layers) entries */

    /* DeepSeek MLA (arch DEEPSEEK_*) */
    int q_lora_rank; /* 0: no q compression (q_proj) */
    int kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;

    /* DeepSeekMoE */
    int n_routed_experts, n_shared_experts, num_experts_per_tok;
    int moe_intermediate_size, first_k_dense_replace, moe_layer_freq;
    int n_group, topk_group;
    float routed_scaling_factor;
    bool norm_topk_prob;
    model_score_fn scoring_func;
    model_topk_method topk_method;
    int num_nextn_predict_layers;

    int bos_token_id;
    int eos_ids[MODEL_MAX_EOS], n_eos;
} model_config;

/* Parses dir/config.json (and generation_config.json for eos ids, if present). */
int model_config_load(model_config *c, const char *dir, di_err *err);
void model_config_free(model_config *c);
/* True when layer l is a MoE layer (DeepSeek: l >= first_k_dense_replace and
 * l % moe_layer_freq == 0, n_routed_experts > 0). */
bool model_layer_is_moe(const model_config *c, int l);

typedef struct model_layer {
    bool swa, moe;
    const float *attn_norm, *ffn_norm; /* input_layernorm, post_attention_layernorm (f32) */

    /* GQA attention (Llama family) */
    kern_mat wq, wk, wv, wo;
    kern_mat wqkv;                /* wq, wk, wv stacked (they are views of it); data NULL if not */
    const float *bq, *bk, *bv;    /* qwen2 biases (f32) or NULL */
    const float *bqkv;            /* the three stacked, when wqkv is */
    const float *bo;              /* llama attention_bias: o_proj bias (f32) or NULL */
    const float *q_norm, *k_norm; /* qwen3, head_dim each (f32) or NULL */

    /* MLA attention (DeepSeek) */
    kern_mat q_proj;        /* when q_lora_rank == 0 */
    kern_mat q_a, q_b;      /* q_a_proj, q_b_proj */
    const float *q_a_norm;  /* q_a_layernorm */
    kern_mat kv_a;          /* kv_a_proj_with_mqa: kv_lora_rank + rope dims rows */
    const float *kv_a_norm; /* kv_a_layernorm */
    kern_mat kv_b;          /* kv_b_proj: n_heads*(nope+v) x kv_lora_rank */
    kern_mat o_proj;
    /* Absorbed decode path, derived from kv_b at load (deepseek.c owns them):
     * per head h, w_uk_t[h] is kv_lora x nope (transposed k up-projection),
     * w_uv[h] is v_head x kv_lora. */
    kern_mat *w_uk_t, *w_uv;

    /* Dense FFN (SwiGLU) */
    kern_mat gate, up, down;
    kern_mat gate_up; /* gate and up stacked (they are views of it); data NULL if not */

    /* DeepSeekMoE */
    kern_mat router;                        /* mlp.gate.weight: n_routed x hidden (kept f32) */
    const float *e_bias;                    /* e_score_correction_bias or NULL */
    kern_mat *exp_gate, *exp_up, *exp_down; /* n_routed_experts each */
    kern_mat sh_gate, sh_up, sh_down;       /* shared experts (fused, as stored) */
} model_layer;

/* MTP module k lives in the checkpoint as model.layers.{n_layers + k}. Its
 * input is the previous hidden state (the main model's final hidden after the
 * final norm for k = 0) and the embedding of the next token:
 *   h = eh_proj(concat(enorm(embed(tok)), hnorm(hidden)))
 *   h = decoder_layer(h)          (the same layer shapes as the main model)
 *   logits = head(shared_head.norm(h))
 * (vLLM's deepseek_mtp order; the reference implements the same.) */
typedef struct model_mtp {
    model_layer layer;
    const float *enorm, *hnorm, *head_norm;
    kern_mat eh_proj, head; /* head: shared_head.head, or the main lm_head if absent */
    kern_mat embed;         /* own embed_tokens, or the main one if absent */
} model_mtp;

typedef struct model_weights {
    kern_mat embed; /* model.embed_tokens.weight: vocab x hidden */
    const float *final_norm;
    kern_mat lm_head;    /* lm_head.weight, or embed when tied */
    model_layer *layers; /* n_layers */
    model_mtp *mtp;      /* num_nextn_predict_layers */
} model_weights;

/* A file mapping: base and bytes for munmap. */
typedef struct pack_map {
    void *base;
    size_t size;
} pack_map;

/* The loader: open safetensors shards, find tensors by name, convert. */
typedef struct model_loader model_loader;

/* Hands back the pages of [p, p + n) that lie wholly inside it, if it is
 * part of a file mapping (a weight used in place that nothing reads any
 * more): they leave the resident set, and fault in again if read. */
void model_loader_release(model_loader *ld, const void *p, size_t n);
/* The same for a copy the loader converted at load, if [p, p + n) is part
 * of one: for good (those pages would read back as zeros), so only for a
 * weight nothing will ever read again. */
void model_loader_drop_copy(model_loader *ld, const void *p, size_t n);
/* Feeds what identifies the checkpoint's weights into the XXH3 state h (an
 * XXH3_state_t): each shard's name, size, modification time, inode and
 * device. */
void model_loader_fingerprint(const model_loader *ld, void *h);
/* Where p lies in the checkpoint's files: the offset in file *file, or -1
 * if in none (a converted copy). */
int64_t model_loader_file_offset(const model_loader *ld, const void *p, int *file);
/* The checkpoint directory's real path (caller frees), or NULL. */
char *model_loader_realdir(const model_loader *ld);

/* model_get_mat flags. */
#define MODEL_MAT_F32 1u /* always f32, whatever the compute dtype (routers) */

/* Looks tensor `name` up, checks it is rows x cols (cols == 0: 1-D of rows),
 * and returns it in the compute dtype: the mapping itself when stored in
 * that dtype, else a converted/quantized copy in huge-page memory.
 * fp8 tensors are dequantized with their weight_scale_inv blocks. Errors
 * name the file and tensor. */
int model_get_mat(model_loader *ld, const char *name, int rows, int cols, unsigned flags,
                  kern_mat *out, di_err *err);
/* Several matrices of the same width that take the same input, stacked so
 * one matmul computes them all (one pass over the input, one thread-pool
 * round): `fused` is the stack, parts[i] views of its rows. Copies are
 * stacked in one allocation; matrices used in place from the mapping are
 * stacked only when the file stores them back to back in this order, else
 * fused stays empty (data NULL) and the parts stand alone. At most 8. */
int model_get_mats_fused(model_loader *ld, const char *const *names, const int *rows, int n,
                         int cols, kern_mat *fused, kern_mat *parts, di_err *err);
/* A 1-D tensor of n elements as f32 (norm weights, biases). */
int model_get_vec(model_loader *ld, const char *name, int n, const float **out, di_err *err);
bool model_has_tensor(model_loader *ld, const char *name);
/* Memory the loader allocated (converted copies), freed with the model:
 * family loaders allocate their per-layer arrays (experts, absorbed
 * matrices) here too, so model_free needs no per-family hook. Zeroed. */
void *model_loader_alloc(model_loader *ld, size_t bytes);

struct model {
    model_config cfg;
    model_weights w;
    model_info info;
    model_opts opts;
    pool *pool;
    model_loader *ld;     /* keeps the mappings alive */
    void *rope;           /* rope.c: inverse frequencies with the scaling folded in */
    void *fwd;            /* forward.c: step scratch, grown on demand, reused across
                             steps (one model_forward at a time per model) */
    bool batch_invariant; /* model_set_batch_invariant: fixed attention paths */
    void *panels;         /* panels.c: the packed copies the kernels read */
    size_t panels_bytes;
    pack_map panels_file; /* the mapping of --pack-cache's file they lie in, if so */
    model_pack_source panels_from;
    char *panels_path;                 /* --pack-cache's file for them (written or mapped) */
    struct pack_writer *panels_writer; /* writing that file, while it does */
    int panels_n;                      /* matrices set to read them */
    bool panels_for_good; /* the same copies in either mode: never freed before the model */
};

/* panels.c: the packed copies of the matrices (kern_pack_panels) that
 * batch-invariant mode or --pack-weights reads: made, or remade, or freed
 * to suit the present mode and options; and freed. */
void model_panels_update(model *m);
void model_panels_free(model *m);

/* pack_file.c: the packed copies kept in a file (model_opts.pack_cache). */
#define PACK_KEY_BYTES 16
/* The file at path, open, when its header carries key and bytes (its
 * payload not read yet; *checksum: the payload's, as the header says); -1
 * otherwise. */
int pack_file_open(const char *path, const uint8_t *key, size_t bytes, uint64_t *checksum);
/* The payload (bytes, after the header) of that file (fd, closed here)
 * mapped read-only (map: what to unmap) when it matches checksum (summed on
 * pool p); NULL otherwise. */
const void *pack_file_map(pool *p, int fd, const char *path, size_t bytes, uint64_t checksum,
                          pack_map *map);
void pack_file_unmap(pack_map *map);
/* A hash of n bytes: XXH3 of the XXH3s of their 64 MiB pieces, hashed in
 * parallel on pool p. */
uint64_t pack_checksum(pool *p, const void *bytes, size_t n);
/* Starts writing the file: makes its directory (not the parents) and a
 * temporary file, and sums the payload's checksum on pool p, now; writes
 * them on a thread of its own, which renames the file when whole. NULL
 * after saying why on stderr. The payload must stay until
 * pack_file_finish. */
typedef struct pack_writer pack_writer;
pack_writer *pack_file_write(pool *p, const char *path, const uint8_t *key, const void *payload,
                             size_t bytes);
/* Waits for the writer (which said on stderr if the write failed) and
 * frees it. */
void pack_file_finish(pack_writer *w);

/* rope.c: precomputes the rotary frequencies at load; freed by model_free. */
int model_rope_init(model *m, di_err *err);
void model_rope_free(model *m);
/* forward.c: frees the step scratch. */
void model_forward_free(model *m);
/* forward.c: a scratch buffer of at least `floats` floats, one per slot,
 * reused across steps and layers (grown when a step needs more). Slots
 * FWD_SLOT_FAMILY0.. are free for attention/FFN implementations; a slot's
 * contents are valid until the next call for the same slot. */
enum {
    FWD_SLOT_X = 0,
    FWD_SLOT_XN,
    FWD_SLOT_OUT,
    FWD_SLOT_STAGE,
    FWD_SLOT_LOGITS,
    FWD_SLOT_FFN_GATE,
    FWD_SLOT_FFN_UP,
    FWD_SLOT_ROPE,
    FWD_SLOT_FAMILY0, /* gqa_attention / mla_attention / moe_ffn use FAMILY0 + k */
    FWD_N_SLOTS = FWD_SLOT_FAMILY0 + 8
};
float *model_scratch(model *m, int slot, size_t floats);

/* --- one forward step, as forward.c lays it out ------------------------- */
/* forward.c flattens the batch into tokens; attention and FFN implementations
 * see the whole step. */
typedef struct model_step {
    model_kv_pool *kv;
    model_batch_seq *batch;
    int n_batch;
    int n_tokens;      /* all tokens of the step */
    const int *pos;    /* n_tokens: absolute position of each token */
    const int *seq_of; /* n_tokens: index into batch of each token's sequence */
    const int *first;  /* n_batch: index of each sequence's first token in the step */
    void *scratch;     /* KV staging for SWA layers: n_tokens entries of the largest
                          model_kv_entry_bytes (forward.c's FWD_SLOT_STAGE) */
    const float *rope; /* or NULL: n_tokens rows of model_rope_dim floats, each
                          token's cos then sin, once for all layers (forward.c) */
} model_step;

/* The per-token cache entry of layer l: K then V (2 * n_kv_heads * head_dim
 * floats) for GQA layers; the normalised latent then the roped k_pe
 * (kv_lora_rank + qk_rope_head_dim floats) for MLA layers. Layers 0..n_layers-1
 * are the main model, n_layers + k is MTP module k. */
int model_kv_entry_floats(const model *m, int l);
/* What the elements are stored as (KT_F32 or KT_BF16), and an entry's bytes. */
kern_dtype model_kv_dtype(const model *m);
size_t model_kv_entry_bytes(const model *m, int l);
kern_dtype model_kv_step_dtype(const model_step *st);
/* Stores the entry of step token t for layer l (paged block for full layers,
 * step staging for sliding-window layers), rounded to the KV dtype. */
void model_kv_put(model *m, const model_step *st, int l, int t, const float *entry);
/* Starts fetching, for writing, the paged rows model_kv_put will fill for a
 * decode step's tokens in layer l (called before the projections that make
 * the entries, which hide the fetch); nothing for larger steps. */
void model_kv_put_ahead(const model_step *st, int l);
/* The entry of batch sequence b at absolute position pos for layer l as f32
 * values (model_kv_entry_floats of them): the cache for earlier positions,
 * this step's entries for new ones. Valid for every pos < n_past + n_tokens
 * on full layers, and for the last sliding_window positions before each of
 * the step's tokens on SWA layers. */
void model_kv_read(model *m, const model_step *st, int l, int b, int pos, float *out);
/* What attention reads of an entry, as separate rows of
 * model_kv_entry_floats(l) / model_kv_parts(l) elements: GQA 2 x n_kv_heads
 * parts (K of each kv head, then V of each); MLA one (latent, then k_pe). */
int model_kv_parts(const model *m, int l);
/* Part `part` of the same entries as model_kv_read, a run at a time, in
 * place: returns the part's row at position pos and sets *n (1..want) to how
 * many consecutive positions' rows follow it in memory, *stride elements
 * apart (a part's width in the paged pool, a whole entry in ring buffers and
 * step staging). Lets attention loop over plain arrays. */
const void *model_kv_run(model *m, const model_step *st, int l, int b, int pos, int want, int part,
                         int *n, size_t *stride);
/* After layer l's attention: moves staged sliding-window entries into the
 * sequences' ring buffers. No-op for full layers. */
void model_kv_commit(model *m, const model_step *st, int l);
/* forward.c calls this once per step before the layers (single-threaded):
 * sets up what sequences with a replay floor need (their zero entries). */
void model_kv_prepare(model *m, const model_step *st);
/* First position token t may attend to on layer l (0, or the window start). */
int model_attn_start(const model *m, int l, int pos);
/* The same for batch sequence b of a step, raised to the sequence's
 * swa_floor on sliding-window layers (after a replay the ring holds nothing
 * below it). Attention implementations that support replay use this one. */
int model_attn_first(const model *m, const model_step *st, int l, int b, int pos);

/* Attention of layer l for every token of the step. x: n_tokens x hidden
 * (already normed); out: n_tokens x hidden (after the output projection).
 * Each stores its new cache entries (model_kv_put), attends causally, and
 * calls model_kv_commit. */
void gqa_attention(model *m, const model_step *st, int l, const float *x, float *out);
void mla_attention(model *m, const model_step *st, int l, const float *x, float *out);
/* Feed-forward: x n x hidden (normed) -> out n x hidden. */
void dense_ffn(model *m, const model_layer *L, const float *x, float *out, int n);
void moe_ffn(model *m, const model_layer *L, const float *x, float *out, int n);

/* RoPE tables: cos/sin of `dim` rotated dims at position pos (dim/2 each),
 * with the config's scaling (Llama 3, linear, YaRN) folded in. */
void model_rope_at(const model *m, int pos, int dim, float *cos, float *sin);
/* The width of the table above (0 without one): head_dim, or DeepSeek's
 * qk_rope_head_dim. */
int model_rope_dim(const model *m);
/* Step token t's cos (dim / 2 floats, its sin right after): the step's
 * rows where dim is model_rope_dim, else computed into buf (dim floats). */
const float *model_rope_of(const model *m, const model_step *st, int t, int dim, float *buf);
/* YaRN attention-scale factor (mscale^2 for DeepSeek), 1 otherwise. */
float model_attn_mscale(const model *m);

/* Per-family tensor loading (model.layers.*). */
int llama_load_layer(model *m, int l, model_layer *L, const char *prefix, di_err *err);
int deepseek_load_layer(model *m, int l, model_layer *L, const char *prefix, di_err *err);
int deepseek_load_mtp(model *m, int k, model_mtp *mtp, di_err *err);

#endif
