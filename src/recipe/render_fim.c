/* render_fim.c — fill-in-the-middle prompts: a prefix and a suffix around
 * the hole the model is to fill, in the format the model was trained on.
 *
 * Code models learn infilling with three markers, added tokens of their
 * vocabulary, around the two texts; the family is told by which markers the
 * tokenizer has. The markers go in by id, the texts as untrusted text
 * (tok_encode_text: text spelling a marker stays text), BOS first where the
 * tokenizer has one, as for a plain completions prompt. */
#include "recipe/render.h"

#include <string.h>

enum { FIM_P, FIM_S, FIM_NONE }; /* the text after a marker: prefix, suffix, none */

typedef struct fim_family {
    const char *marker[3];
    int text[3];
} fim_family;

/* prefix-suffix-middle: the model writes the middle after the last marker */
static const fim_family families[] = {
    /* DeepSeek Coder, DeepSeek V2 and V3 */
    {{"<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"}, {FIM_P, FIM_S, FIM_NONE}},
    /* Qwen2.5-Coder, Qwen3-Coder */
    {{"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"}, {FIM_P, FIM_S, FIM_NONE}},
    /* StarCoder, StarCoder2, SantaCoder */
    {{"<fim_prefix>", "<fim_suffix>", "<fim_middle>"}, {FIM_P, FIM_S, FIM_NONE}},
    /* Codestral: the suffix first, then the prefix the middle continues */
    {{"[SUFFIX]", "[PREFIX]", NULL}, {FIM_S, FIM_P, FIM_NONE}},
};

/* The family whose markers the tokenizer all has, their ids in ids. */
static const fim_family *find_family(const tokenizer *t, int ids[3]) {
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        int k = 0;
        for (; k < 3; k++) {
            const char *m = families[f].marker[k];
            ids[k] = m ? tok_control_id(t, m) : -1;
            if (m && ids[k] < 0) break;
        }
        if (k == 3) return &families[f];
    }
    return NULL;
}

bool render_fim_supported(const tokenizer *t) {
    int ids[3];
    return find_family(t, ids) != NULL;
}

int render_fim(const tokenizer *t, const char *prefix, size_t plen, const char *suffix, size_t slen,
               tok_ids *out, di_err *err) {
    int ids[3];
    const fim_family *fam = find_family(t, ids);
    if (!fam) return di_errf(err, "this model's tokenizer has no fill-in-the-middle tokens");
    int bos = tok_bos_id(t);
    if (bos >= 0) tok_ids_push(out, bos);
    for (int k = 0; k < 3; k++) {
        if (ids[k] >= 0) tok_ids_push(out, ids[k]);
        if (fam->text[k] == FIM_P && tok_encode_text(t, prefix, plen, out, err)) return -1;
        if (fam->text[k] == FIM_S && tok_encode_text(t, suffix, slen, out, err)) return -1;
    }
    return 0;
}
