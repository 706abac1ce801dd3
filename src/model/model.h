/* model.h — the public face of the model subsystem: load a Hugging Face
 * checkpoint directory, run forward passes over a batch of sequences, and
 * read logits. Everything above (engine, CLI, benchmarks) uses only this.
 *
 * KV memory: the full-attention layers' cache lives in a model_kv_pool of
 * MODEL_KV_BLOCK-token blocks (K and V per layer for GQA layers; the MLA
 * latent of kv_lora_rank + qk_rope_head_dim per token for MLA layers). A
 * sequence holds a block table into that pool. Sliding-window layers keep no
 * blocks: each sequence owns a ring buffer of window + MODEL_SWA_SPARE tokens
 * per sliding-window layer. The caller owns block allocation policy; the pool
 * offers a plain free list (model_kv_alloc / model_kv_release) that a block
 * manager can sit on. */
#ifndef DI_MODEL_H
#define DI_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"
#include "base/pool.h"

#define MODEL_KV_BLOCK  128
#define MODEL_SWA_SPARE 6
#define MODEL_MAX_EOS   8

typedef struct model model;
typedef struct model_kv_pool model_kv_pool;

typedef enum { MODEL_DTYPE_BF16 = 0, MODEL_DTYPE_F32, MODEL_DTYPE_INT8 } model_dtype;

/* What KV cache entries are stored as. AUTO: f32 with f32 weights, else bf16
 * (half the bytes attention reads; attention still computes in f32). */
typedef enum { MODEL_KV_AUTO = 0, MODEL_KV_F32, MODEL_KV_BF16 } model_kv_type;

typedef struct model_opts {
    model_dtype dtype; /* compute precision of the weights (activations are f32) */
    model_kv_type kv_dtype;
    int int8_group; /* MODEL_DTYPE_INT8: 0 = one scale per output row, else columns per scale */
    int threads;    /* <= 0: all online cores */
    /* Reads bf16 weights from a copy packed at load in the layout of the
     * vector lanes where that is all the kernels would read (AVX2 without
     * AVX-512 BF16: batches faster, the same bits as batch-invariant mode),
     * and hands the file mapping's pages back: about the same memory, a
     * slower load. Elsewhere it changes nothing. */
    bool pack_weights;
    /* With pack_weights: a directory that keeps that copy as a file
     * (pack_file.c). The load that packs it writes it there; later loads of
     * the same checkpoint on the same layout map it in place instead of
     * packing (faster, and shared between processes through the page
     * cache). NULL: the copy lives in the process's memory. */
    const char *pack_cache;
} model_opts;

/* Where the copy --pack-weights reads came from. */
typedef enum {
    MODEL_PACK_NONE = 0, /* no copy */
    MODEL_PACK_PACKED,   /* packed at load into memory (no cache, or writing it failed) */
    MODEL_PACK_WRITTEN,  /* packed at load, and being written to the cache (on a thread of its
                            own: model_free waits for it; a failure is said on stderr) */
    MODEL_PACK_MAPPED,   /* mapped from the cache's file */
} model_pack_source;

typedef struct model_info {
    const char *arch; /* config.json model_type */
    int vocab_size, hidden_size, n_layers;
    int max_context;  /* max_position_embeddings */
    int n_mtp_layers; /* num_nextn_predict_layers loaded */
    int bos_id;       /* -1 if none */
    int eos_ids[MODEL_MAX_EOS], n_eos;
    size_t weight_bytes;           /* bytes of all weights as computed on (after --dtype) */
    size_t active_bytes_per_token; /* bytes read per decoded token at batch 1 (MoE: active experts
                                      only) */
    double flops_per_token;  /* matmul FLOPs per token, excluding attention over the context */
    size_t packed_bytes;     /* the copy --pack-weights packed at load (0: none) */
    bool pack_weights_helps; /* whether --pack-weights packs this model's matrices here */
    model_pack_source packed_from;
    const char *pack_file; /* the cache's file for this model (packed_from WRITTEN, MAPPED) */
    /* Sliding-window layers (main model): how many, and their window (0, 0
     * when every layer attends to the whole context). */
    int n_swa_layers, sliding_window;
} model_info;

/* Loads config.json and *.safetensors from dir (memory-mapped). On failure
 * returns NULL and err names the file/tensor and what is wrong. */
model *model_load(const char *dir, const model_opts *opts, di_err *err);
void model_free(model *m);
const model_info *model_get_info(const model *m);
/* FLOPs of a prefill of n_tokens from an empty context with logits for the
 * last token only: the matmuls (the output head once) plus attention over
 * each token's visible context. What prefill benchmarks divide by. */
double model_prefill_flops(const model *m, int n_tokens);
pool *model_pool(model *m);

/* --- KV memory ---------------------------------------------------------- */
model_kv_pool *model_kv_pool_create(model *m, int n_blocks, di_err *err);
void model_kv_pool_free(model_kv_pool *kv);
size_t model_kv_block_bytes(const model *m);
const char *model_kv_dtype_name(const model *m); /* "f32" or "bf16" */
int model_kv_n_free(const model_kv_pool *kv);
int model_kv_alloc(model_kv_pool *kv); /* block id, or -1 when exhausted */
void model_kv_release(model_kv_pool *kv, int block);

/* One sequence's cache state. Create with model_seq_init, which allocates the
 * sliding-window ring buffers; the block table is filled by the caller (or by
 * model_seq_reserve) before a forward pass needs it. */
typedef struct model_seq {
    int n_past;  /* tokens already in the cache */
    int *blocks; /* block table: blocks[i] holds positions [i*128, (i+1)*128) */
    int n_blocks, cap_blocks;
    void *swa;      /* model-owned ring buffers for sliding-window layers */
    int mtp_n_past; /* tokens in the MTP layers' cache */
    /* Replay (rebuilding the rings over a cached prefix): sliding-window
     * layers see no position below swa_floor (their ring holds nothing
     * there), and full-attention layers keep their cached entries below
     * kv_keep_end (a step's new entries there are computed but not stored,
     * so shared cached blocks are never rewritten). Both 0 normally. */
    int swa_floor, kv_keep_end;
    /* Optional: the cached KV is still arriving (a KV store swap-in). Before
     * a full-attention layer reads it, the forward calls kv_wait(kv_wait_ctx,
     * seg), seg being the layer's index among the block's segments
     * (model_kv_block_layout); the call returns once that layer's entries
     * are in place. NULL normally (model_seq_init). */
    void (*kv_wait)(void *ctx, int seg);
    void *kv_wait_ctx;
} model_seq;

void model_seq_init(model *m, model_seq *s);
/* Releases the sequence's blocks to kv (kv may be NULL if the caller already
 * released them) and frees its ring buffers. */
void model_seq_free(model *m, model_kv_pool *kv, model_seq *s);
/* Ensures blocks for n_tokens positions; -1 with err when the pool is empty. */
int model_seq_reserve(model_kv_pool *kv, model_seq *s, int n_tokens, di_err *err);

/* One entry of a forward batch: n_tokens new tokens of seq, appended at
 * positions seq->n_past ... (a prefill chunk, or 1 token for decode). */
typedef struct model_batch_seq {
    model_seq *seq;
    const int *tokens;
    int n_tokens;
    float *logits; /* NULL: none; else vocab floats for the last token, or
                      n_tokens * vocab when all_logits */
    bool all_logits;
    float *hidden; /* optional: hidden_size floats, the last token's final
                      hidden state (after the final norm), input to MTP */
} model_batch_seq;

/* Copies every full-attention layer's entries of block src to block dst
 * (copy-on-write when a forked sequence writes into a shared block). */
void model_kv_copy_block(model_kv_pool *kv, int dst, int src);
/* A block's memory: model_kv_block_bytes, every full-attention layer (main
 * and MTP) layer-major, each layer part-major, [layer][part][position][part's
 * elements] (kvcache.c; the KV store persists and restores blocks through
 * it). NULL for an id outside the pool. */
void *model_kv_block_data(model_kv_pool *kv, int block);
/* Names that layout. Stored blocks are only valid for the layout they were
 * written in, so it is part of a KV store's fingerprint. */
#define MODEL_KV_LAYOUT "part-major"
/* The block's layer segments in that order: byte offset and size of each
 * full-attention layer within a block, at most max of them. Returns how many
 * there are (may exceed max: then only max were written). */
int model_kv_block_layout(const model *m, size_t *off, size_t *bytes, int max);

/* --- sliding-window state ------------------------------------------------ */
/* A snapshot of a sequence's sliding-window rings at its n_past: the last
 * `window` entries of every sliding-window layer of the main model (all any
 * later token can see), so it restores exactly. Host memory, owned by the
 * caller. NULL when the model has no sliding-window layers. */
typedef struct model_swa_state model_swa_state;
model_swa_state *model_swa_save(model *m, const model_seq *s);
/* Restores a snapshot into s (fresh, or any state: its rings are replaced):
 * sets s->n_past to the snapshot's position. The full layers' blocks are the
 * caller's business (the prefix cache). */
void model_swa_restore(model *m, model_seq *s, const model_swa_state *st);
int model_swa_state_pos(const model_swa_state *st);
size_t model_swa_state_bytes(const model_swa_state *st);
void model_swa_state_free(model_swa_state *st);

/* Batch-invariant mode: a token's results stop depending on what else is in
 * the step or how its sequence is chunked — the kernels reduce in a fixed
 * order (kern_set_batch_invariant, process-wide) and attention takes one
 * fixed path (MLA: always the absorbed form). Slower; off by default.
 * Turning it on packs a copy of the bf16 matrices where the kernels read
 * one (panels.c: a lone token then streams at the plain pace); off frees
 * it. */
void model_set_batch_invariant(model *m, bool on);

/* Runs the batch through every layer. Blocks must be reserved for each
 * sequence up to n_past + n_tokens. Advances each seq->n_past. */
int model_forward(model *m, model_kv_pool *kv, model_batch_seq *batch, int n_batch, di_err *err);

/* MTP (num_nextn_predict_layers): layer `depth` (0-based) predicts the token
 * after `next_token` from `hidden` (the previous depth's output hidden, or the
 * main model's final hidden for depth 0) at position seq->mtp_n_past.
 * Writes logits (vocab) and, if hidden_out, this depth's hidden for the next
 * depth. Uses and advances the sequence's MTP cache. */
int model_mtp_forward(model *m, model_kv_pool *kv, model_seq *seq, int depth, const float *hidden,
                      int next_token, float *logits, float *hidden_out, di_err *err);

#endif
