/* deepseek.h — what the DeepSeek-family files (deepseek.c, mla.c, moe.c,
 * mtp.c) share with each other and with their unit tests, beyond the entry
 * points declared in model_internal.h. Nothing outside src/model/ and
 * tests/unit/test_deepseek.c includes this. */
#ifndef DI_MODEL_DEEPSEEK_H
#define DI_MODEL_DEEPSEEK_H

#include "model/model_internal.h"

/* Layer l of the model: the main layers 0..n_layers-1, then MTP module k as
 * n_layers + k (the index the KV accessors use too). */
model_layer *deepseek_layer(model *m, int l);

/* A list of independent matmuls (y = x W^T over n rows) run with one pool
 * barrier. When every one is a single token's (decode) with a whole number
 * of 16-row groups, their rows laid end to end are one pool_for: each thread
 * streams its share of whole matrices and bands, and a thread done early
 * takes bands from the back of the other's (bands at 16-row multiples: each
 * row bit-identical to the whole matrix's). Otherwise as parallel tasks,
 * each matmul on one thread, when there are at least two per thread, else
 * one after another, each parallel over its rows. run() empties the list;
 * free js->j when done. */
typedef struct deepseek_job {
    kern_mat W;
    const float *x;
    float *y;
    int n;
    const void *act; /* x prepared once for the one-token bands (kern_one_act_prepare) */
} deepseek_job;
typedef struct deepseek_jobs {
    deepseek_job *j;
    int n, cap;
} deepseek_jobs;
void deepseek_jobs_add(deepseek_jobs *js, const kern_mat *W, const float *x, float *y, int n);
void deepseek_jobs_run(pool *p, deepseek_jobs *js);

/* How mla_attention attends over the latent cache. AUTO picks, per sequence
 * of the step, whichever of the two costs fewer FLOPs; the other two force a
 * path (tests check both give the same result). */
typedef enum { MLA_PATH_AUTO = 0, MLA_PATH_EXPANDED, MLA_PATH_ABSORBED } mla_path;
void mla_attention_path(model *m, const model_step *st, int l, const float *x, float *out,
                        mla_path path);

/* Routes one token: logits (n_routed_experts, x · router^T) -> the chosen
 * experts idx[num_experts_per_tok] and their weights w[...], exactly as HF
 * modeling_deepseek does for the config's scoring_func / topk_method (V2:
 * softmax, greedy or group-limited greedy; V3: sigmoid + bias "noaux_tc").
 * bias: e_score_correction_bias or NULL. scratch: 4 * n_routed_experts
 * floats. idx comes out in the order chosen (highest choice score first). */
void moe_route(const model_config *c, const float *logits, const float *bias, float *scratch,
               int *idx, float *w);

#endif
