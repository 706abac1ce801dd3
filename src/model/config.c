/* config.c — config.json (+ generation_config.json) -> model_config.
 *
 * Follows what the Hugging Face config classes do with absent fields (their
 * defaults), so a checkpoint behaves here as it does in transformers:
 * num_key_value_heads defaults to num_attention_heads, head_dim to
 * hidden/heads, rope_scaling accepts "rope_type" or the older "type", Mistral
 * with sliding_window and no layer_types slides on every layer, Qwen2/3 slide
 * only with use_sliding_window on layers >= max_window_layers, an explicit
 * layer_types list wins for every family, and a Gemma-style
 * sliding_window_pattern N makes every N-th layer full and the rest slide. Every size is bounded so
 * later size arithmetic cannot overflow. No state beyond the config being filled. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

#define CFG_MAX_DIM (1 << 24)

typedef struct {
    const char *file;
    di_err *err;
} cfg_ctx;

/* Integer field: absent or null -> dflt; otherwise must be an integer in [lo, hi]. */
static int get_int(cfg_ctx *cx, json_t *o, const char *key, long long dflt, long long lo,
                   long long hi, int *out) {
    json_t *v = json_object_get(o, key);
    long long x = dflt;
    if (v && !json_is_null(v)) {
        double r = json_is_real(v) ? json_real_value(v) : 0.5;
        if (json_is_real(v) && fabs(r) < 9e18 && r == (double)(long long)r)
            x = (long long)r; /* 4096.0 is an integer too */
        else if (!json_is_integer(v))
            return di_errf(cx->err, "%s: field %s is not an integer", cx->file, key);
        else
            x = json_integer_value(v);
    }
    if (x < lo || x > hi)
        return di_errf(cx->err, "%s: field %s = %lld out of range [%lld, %lld]", cx->file, key, x,
                       lo, hi);
    *out = (int)x;
    return 0;
}

static int get_float(cfg_ctx *cx, json_t *o, const char *key, double dflt, float *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = (float)dflt;
        return 0;
    }
    if (!json_is_number(v)) return di_errf(cx->err, "%s: field %s is not a number", cx->file, key);
    *out = (float)json_number_value(v);
    return 0;
}

static bool get_bool(json_t *o, const char *key, bool dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static const char *get_str(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* eos_token_id: an int or a list of ints; appended to c->eos_ids without duplicates. */
static void add_eos(model_config *c, json_t *v) {
    if (json_is_integer(v)) {
        int id = (int)json_integer_value(v);
        for (int i = 0; i < c->n_eos; i++)
            if (c->eos_ids[i] == id) return;
        if (c->n_eos < MODEL_MAX_EOS && id >= 0) c->eos_ids[c->n_eos++] = id;
    } else if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) add_eos(c, e);
    }
}

static int parse_rope(cfg_ctx *cx, model_config *c, json_t *root) {
    if (get_float(cx, root, "rope_theta", 10000.0, &c->rope_theta)) return -1;
    c->rope_kind = ROPE_DEFAULT;
    c->rope_factor = 1.0f;
    json_t *rs = json_object_get(root, "rope_scaling");
    if (!rs || json_is_null(rs)) return 0;
    if (!json_is_object(rs)) return di_errf(cx->err, "%s: rope_scaling is not an object", cx->file);
    const char *type = get_str(rs, "rope_type");
    if (!type) type = get_str(rs, "type");
    if (!type || !strcmp(type, "default")) return 0;
    if (!strcmp(type, "linear"))
        c->rope_kind = ROPE_LINEAR;
    else if (!strcmp(type, "llama3"))
        c->rope_kind = ROPE_LLAMA3;
    else if (!strcmp(type, "yarn"))
        c->rope_kind = ROPE_YARN;
    else
        return di_errf(cx->err, "%s: rope_scaling type \"%.40s\" is not supported", cx->file, type);
    if (get_float(cx, rs, "factor", 1.0, &c->rope_factor) ||
        get_float(cx, rs, "low_freq_factor", 1.0, &c->rope_low_freq_factor) ||
        get_float(cx, rs, "high_freq_factor", 4.0, &c->rope_high_freq_factor) ||
        get_float(cx, rs, "beta_fast", 32.0, &c->yarn_beta_fast) ||
        get_float(cx, rs, "beta_slow", 1.0, &c->yarn_beta_slow) ||
        get_float(cx, rs, "mscale", 1.0, &c->yarn_mscale) ||
        get_float(cx, rs, "mscale_all_dim", 0.0, &c->yarn_mscale_all_dim) ||
        get_int(cx, rs, "original_max_position_embeddings", c->max_position_embeddings, 1, 1 << 30,
                &c->rope_original_max_pos))
        return -1;
    if (!(c->rope_factor > 0))
        return di_errf(cx->err, "%s: rope_scaling factor must be positive", cx->file);
    if (c->rope_kind == ROPE_LLAMA3 && !(c->rope_high_freq_factor > c->rope_low_freq_factor))
        return di_errf(cx->err, "%s: rope_scaling needs high_freq_factor > low_freq_factor",
                       cx->file);
    return 0;
}

static int parse_window(cfg_ctx *cx, model_config *c, json_t *root) {
    int n_all = c->n_layers + c->num_nextn_predict_layers;
    c->layer_swa = di_calloc((size_t)n_all, sizeof(bool));
    json_t *sw = json_object_get(root, "sliding_window");
    c->sliding_window = 0;
    if (sw && !json_is_null(sw) &&
        get_int(cx, root, "sliding_window", 0, 0, 1 << 30, &c->sliding_window))
        return -1;
    json_t *lt = json_object_get(root, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || (int)json_array_size(lt) < c->n_layers)
            return di_errf(cx->err, "%s: layer_types must list %d layers", cx->file, c->n_layers);
        size_t i;
        json_t *e;
        json_array_foreach(lt, i, e) {
            if ((int)i >= n_all) break;
            const char *s = json_string_value(e);
            if (s && !strcmp(s, "sliding_attention"))
                c->layer_swa[i] = true;
            else if (!s || strcmp(s, "full_attention"))
                return di_errf(cx->err, "%s: layer_types[%zu] \"%.40s\" is not supported", cx->file,
                               i, s ? s : "?");
        }
    } else if (c->sliding_window > 0 &&
               json_is_integer(json_object_get(root, "sliding_window_pattern"))) {
        /* Gemma-style pattern: every pattern-th layer is full, the rest slide. */
        int pat;
        if (get_int(cx, root, "sliding_window_pattern", 1, 1, 1 << 20, &pat)) return -1;
        for (int l = 0; l < c->n_layers; l++) c->layer_swa[l] = (l + 1) % pat != 0;
    } else if (c->sliding_window > 0) {
        int from = c->n_layers; /* first sliding layer */
        if (c->arch == ARCH_MISTRAL) {
            from = 0;
        } else if (c->arch == ARCH_QWEN2 || c->arch == ARCH_QWEN3) {
            int mwl;
            if (get_int(cx, root, "max_window_layers", 28, 0, 1 << 20, &mwl)) return -1;
            if (get_bool(root, "use_sliding_window", false)) from = mwl;
        }
        for (int l = from; l < c->n_layers; l++) c->layer_swa[l] = true;
    }
    bool any = false;
    for (int l = 0; l < n_all; l++) any |= c->layer_swa[l];
    if (any && c->sliding_window <= 0)
        return di_errf(cx->err, "%s: sliding layers need a positive sliding_window", cx->file);
    if (!any) c->sliding_window = 0;
    return 0;
}

static int parse_deepseek(cfg_ctx *cx, model_config *c, json_t *root) {
    c->rope_interleaved = true;
    if (get_int(cx, root, "q_lora_rank", 0, 0, CFG_MAX_DIM, &c->q_lora_rank) ||
        get_int(cx, root, "kv_lora_rank", -1, 1, CFG_MAX_DIM, &c->kv_lora_rank) ||
        get_int(cx, root, "qk_nope_head_dim", -1, 1, CFG_MAX_DIM, &c->qk_nope_head_dim) ||
        get_int(cx, root, "qk_rope_head_dim", -1, 2, CFG_MAX_DIM, &c->qk_rope_head_dim) ||
        get_int(cx, root, "v_head_dim", -1, 1, CFG_MAX_DIM, &c->v_head_dim) ||
        get_int(cx, root, "n_routed_experts", 0, 0, 1 << 16, &c->n_routed_experts) ||
        get_int(cx, root, "n_shared_experts", 0, 0, 1 << 16, &c->n_shared_experts) ||
        get_int(cx, root, "num_experts_per_tok", 0, 0, 1 << 16, &c->num_experts_per_tok) ||
        get_int(cx, root, "moe_intermediate_size", 0, 0, CFG_MAX_DIM, &c->moe_intermediate_size) ||
        get_int(cx, root, "first_k_dense_replace", 0, 0, 1 << 20, &c->first_k_dense_replace) ||
        get_int(cx, root, "moe_layer_freq", 1, 1, 1 << 20, &c->moe_layer_freq) ||
        get_int(cx, root, "n_group", 1, 1, 1 << 16, &c->n_group) ||
        get_int(cx, root, "topk_group", 1, 1, 1 << 16, &c->topk_group) ||
        get_float(cx, root, "routed_scaling_factor", 1.0, &c->routed_scaling_factor))
        return -1;
    if (c->qk_rope_head_dim % 2)
        return di_errf(cx->err, "%s: qk_rope_head_dim must be even", cx->file);
    c->norm_topk_prob = get_bool(root, "norm_topk_prob", false);
    const char *sf = get_str(root, "scoring_func");
    if (!sf || !strcmp(sf, "softmax"))
        c->scoring_func = SCORE_SOFTMAX;
    else if (!strcmp(sf, "sigmoid"))
        c->scoring_func = SCORE_SIGMOID;
    else
        return di_errf(cx->err, "%s: scoring_func \"%.40s\" is not supported", cx->file, sf);
    const char *tm = get_str(root, "topk_method");
    if (!tm || !strcmp(tm, "greedy"))
        c->topk_method = TOPK_GREEDY;
    else if (!strcmp(tm, "group_limited_greedy"))
        c->topk_method = TOPK_GROUP_LIMITED;
    else if (!strcmp(tm, "noaux_tc"))
        c->topk_method = TOPK_NOAUX_TC;
    else
        return di_errf(cx->err, "%s: topk_method \"%.40s\" is not supported", cx->file, tm);
    if (c->n_routed_experts > 0 &&
        (c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->n_routed_experts ||
         c->moe_intermediate_size < 1 || c->n_routed_experts % c->n_group ||
         c->topk_group > c->n_group))
        return di_errf(
            cx->err, "%s: inconsistent MoE fields (experts %d, per token %d, groups %d/%d)",
            cx->file, c->n_routed_experts, c->num_experts_per_tok, c->topk_group, c->n_group);
    return 0;
}

static int parse(cfg_ctx *cx, model_config *c, json_t *root) {
    static const struct {
        const char *name;
        model_arch arch;
    } archs[] = {{"llama", ARCH_LLAMA},
                 {"qwen2", ARCH_QWEN2},
                 {"qwen3", ARCH_QWEN3},
                 {"mistral", ARCH_MISTRAL},
                 {"deepseek_v2", ARCH_DEEPSEEK_V2},
                 {"deepseek_v3", ARCH_DEEPSEEK_V3}};
    const char *mt = get_str(root, "model_type");
    if (!mt) return di_errf(cx->err, "%s: missing model_type", cx->file);
    size_t i = 0;
    while (i < sizeof archs / sizeof archs[0] && strcmp(archs[i].name, mt)) i++;
    if (i == sizeof archs / sizeof archs[0])
        return di_errf(cx->err, "%s: unknown architecture model_type \"%.40s\"", cx->file, mt);
    c->arch = archs[i].arch;
    snprintf(c->model_type, sizeof c->model_type, "%s", mt);
    bool ds = c->arch == ARCH_DEEPSEEK_V2 || c->arch == ARCH_DEEPSEEK_V3;

    if (get_int(cx, root, "vocab_size", -1, 1, 1 << 26, &c->vocab_size) ||
        get_int(cx, root, "hidden_size", -1, 1, CFG_MAX_DIM, &c->hidden_size) ||
        get_int(cx, root, "intermediate_size", -1, 1, CFG_MAX_DIM, &c->intermediate_size) ||
        get_int(cx, root, "num_hidden_layers", -1, 1, 1 << 16, &c->n_layers) ||
        get_int(cx, root, "num_attention_heads", -1, 1, 1 << 16, &c->n_heads) ||
        get_int(cx, root, "num_key_value_heads", c->n_heads, 1, c->n_heads, &c->n_kv_heads) ||
        get_int(cx, root, "head_dim", c->hidden_size / c->n_heads, 1, CFG_MAX_DIM, &c->head_dim) ||
        get_int(cx, root, "max_position_embeddings", 4096, 1, 1 << 30,
                &c->max_position_embeddings) ||
        get_int(cx, root, "num_nextn_predict_layers", 0, 0, 64, &c->num_nextn_predict_layers) ||
        get_float(cx, root, "rms_norm_eps", 1e-6, &c->rms_norm_eps))
        return -1;
    if (c->n_heads % c->n_kv_heads)
        return di_errf(cx->err,
                       "%s: num_attention_heads %d not a multiple of num_key_value_heads %d",
                       cx->file, c->n_heads, c->n_kv_heads);
    if (!ds && c->head_dim % 2) return di_errf(cx->err, "%s: head_dim must be even", cx->file);
    if (!ds) c->num_nextn_predict_layers = 0;
    c->tie_word_embeddings = get_bool(root, "tie_word_embeddings", false);
    c->attention_bias = c->arch == ARCH_QWEN2 || get_bool(root, "attention_bias", false);
    c->qk_norm = c->arch == ARCH_QWEN3;
    if (parse_rope(cx, c, root)) return -1;
    if (ds && parse_deepseek(cx, c, root)) return -1;
    if (parse_window(cx, c, root)) return -1;

    json_t *bos = json_object_get(root, "bos_token_id");
    c->bos_token_id = json_is_integer(bos) ? (int)json_integer_value(bos) : -1;
    add_eos(c, json_object_get(root, "eos_token_id"));
    return 0;
}

int model_config_load(model_config *c, const char *dir, di_err *err) {
    memset(c, 0, sizeof *c);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cfg_ctx cx = {path, err};
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        FILE *f = fopen(path, "rb");
        if (!f) return di_errf(err, "%s: missing (not a model directory?)", path);
        fclose(f);
        return di_errf(err, "%s: invalid JSON at line %d: %s", path, jerr.line, jerr.text);
    }
    int rc =
        json_is_object(root) ? parse(&cx, c, root) : di_errf(err, "%s: not a JSON object", path);
    json_decref(root);
    if (rc) {
        model_config_free(c);
        return -1;
    }
    /* generation_config.json names the eos ids generation stops on. */
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    json_t *gen = json_load_file(path, 0, &jerr);
    if (gen) {
        add_eos(c, json_object_get(gen, "eos_token_id"));
        json_t *bos = json_object_get(gen, "bos_token_id");
        if (c->bos_token_id < 0 && json_is_integer(bos))
            c->bos_token_id = (int)json_integer_value(bos);
        json_decref(gen);
    }
    return 0;
}

void model_config_free(model_config *c) {
    free(c->layer_swa);
    c->layer_swa = NULL;
}

bool model_layer_is_moe(const model_config *c, int l) {
    return c->n_routed_experts > 0 && l >= c->first_k_dense_replace &&
           l % (c->moe_layer_freq > 0 ? c->moe_layer_freq : 1) == 0;
}
