/* tokenizer.c — loading a Hugging Face tokenizer.json (+ tokenizer_config.json)
 * into an immutable `tokenizer`, and the small public accessors.
 *
 * Everything the encoder needs at run time is precomputed here: the vocabulary
 * map that untrusted text can reach (added tokens left out, so no text can
 * ever spell a control id), the merge map keyed by id pair, the byte-level
 * initial symbols, and the pipeline stages (parsed by tok_normalize.c,
 * tok_pretok.c, tok_decode.c). Unknown features are load errors that name the
 * feature; nothing is silently approximated. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "recipe/tok_internal.h"

void tok_ids_push(tok_ids *ids, int id) {
    if (ids->n == ids->cap) {
        ids->cap = ids->cap ? ids->cap * 2 : 64;
        ids->v = di_realloc(ids->v, ids->cap * sizeof *ids->v);
    }
    ids->v[ids->n++] = id;
}

void tok_ids_free(tok_ids *ids) {
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

static const char *jstr(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jbool(json_t *o, const char *key, bool dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static void set_str(tokenizer *t, int id, const char *s, size_t len) {
    free(t->str[id]);
    t->str[id] = di_malloc(len + 1);
    memcpy(t->str[id], s, len);
    t->str[id][len] = 0;
    t->slen[id] = (uint32_t)len;
}

/* Merges come as "a b" strings or ["a", "b"] pairs. */
static int merge_parts(json_t *m, size_t i, const char **a, size_t *al, const char **b, size_t *bl,
                       char *tmp, size_t tmpcap, di_err *err) {
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *al = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *bl = json_string_length(json_array_get(m, 1));
        return 0;
    }
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = memchr(s, ' ', n);
        if (sp && !memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s)) && n < tmpcap) {
            memcpy(tmp, s, n);
            *a = tmp;
            *al = (size_t)(sp - s);
            *b = tmp + *al + 1;
            *bl = n - *al - 1;
            return 0;
        }
    }
    return di_errf(err, "tokenizer.json: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]",
                   i);
}

static int load_model(tokenizer *t, json_t *model, json_t *added, di_err *err) {
    const char *type = jstr(model, "type");
    if (type && strcmp(type, "BPE"))
        return di_errf(err, "tokenizer.json: model type '%s' is not supported (only BPE)", type);
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return di_errf(err, "tokenizer.json: model.vocab or model.merges missing");
    json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        return di_errf(err, "tokenizer.json: BPE dropout is not supported");
    const char *csp = jstr(model, "continuing_subword_prefix"),
               *eows = jstr(model, "end_of_word_suffix");
    if ((csp && *csp) || (eows && *eows))
        return di_errf(err, "tokenizer.json: BPE continuing_subword_prefix/end_of_word_suffix "
                            "is not supported");
    t->byte_fallback = jbool(model, "byte_fallback", false);
    t->fuse_unk = jbool(model, "fuse_unk", false);
    t->ignore_merges = jbool(model, "ignore_merges", false);

    /* id space */
    int max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) > 16 * 1024 * 1024)
            return di_errf(err, "tokenizer.json: vocab entry '%s' has a bad id", key);
        if (json_integer_value(val) > max_id) max_id = (int)json_integer_value(val);
    }
    size_t n_added = json_is_array(added) ? json_array_size(added) : 0;
    for (size_t i = 0; i < n_added; i++) {
        json_t *a = json_array_get(added, i), *id = json_object_get(a, "id");
        if (!json_is_integer(id) || !jstr(a, "content") || json_integer_value(id) < 0 ||
            json_integer_value(id) > 16 * 1024 * 1024)
            return di_errf(err, "tokenizer.json: added_tokens[%zu] lacks id or content", i);
        if (json_integer_value(id) > max_id) max_id = (int)json_integer_value(id);
    }
    t->n_ids = max_id + 1;
    t->str = di_calloc((size_t)t->n_ids, sizeof *t->str);
    t->slen = di_calloc((size_t)t->n_ids, sizeof *t->slen);
    t->control = di_calloc((size_t)t->n_ids, 1);
    t->special = di_calloc((size_t)t->n_ids, 1);
    json_object_foreach(vocab, key, val) set_str(t, (int)json_integer_value(val), key, strlen(key));

    t->unk_id = -1;
    const char *unk = jstr(model, "unk_token");
    tok_strmap full;
    tok_strmap_init(&full, (size_t)t->n_ids);
    json_object_foreach(vocab, key, val)
        tok_strmap_put(&full, key, strlen(key), (int)json_integer_value(val));
    if (unk) t->unk_id = tok_strmap_get(&full, unk, strlen(unk));
    if (unk && t->unk_id < 0) {
        tok_strmap_free(&full);
        return di_errf(err, "tokenizer.json: unk_token '%s' is not in the vocabulary", unk);
    }

    /* added tokens: control unless it is the model's unk */
    t->adds = di_calloc(n_added + 1, sizeof *t->adds);
    tok_strmap_init(&t->added, n_added);
    for (size_t i = 0; i < n_added; i++) {
        json_t *a = json_array_get(added, i);
        tok_added *ad = &t->adds[t->n_adds++];
        ad->id = (int)json_integer_value(json_object_get(a, "id"));
        ad->content = di_strdup(jstr(a, "content"));
        ad->special = jbool(a, "special", false);
        ad->lstrip = jbool(a, "lstrip", false);
        ad->rstrip = jbool(a, "rstrip", false);
        ad->normalized = jbool(a, "normalized", !ad->special);
        ad->single_word = jbool(a, "single_word", false);
        set_str(t, ad->id, ad->content, strlen(ad->content));
        t->control[ad->id] = ad->id != t->unk_id;
        t->special[ad->id] = ad->special;
    }
    for (int i = 0; i < t->n_adds; i++)
        tok_strmap_put(&t->added, t->adds[i].content, strlen(t->adds[i].content), t->adds[i].id);

    /* the vocabulary that text can reach */
    tok_strmap_init(&t->vocab, (size_t)t->n_ids);
    json_object_foreach(vocab, key, val) {
        int id = (int)json_integer_value(val);
        if (!t->control[id] && !strcmp(t->str[id], key))
            tok_strmap_put(&t->vocab, t->str[id], t->slen[id], id);
    }

    /* merges: rank = position; a later duplicate overwrites (as HF's map does) */
    size_t nm = json_array_size(merges);
    tok_pairmap_init(&t->merges, nm);
    size_t tmpcap = 4096;
    char *tmp = di_malloc(tmpcap), *cat = di_malloc(2 * tmpcap);
    int rc = 0;
    for (size_t i = 0; i < nm && !rc; i++) {
        const char *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        if ((rc = merge_parts(json_array_get(merges, i), i, &a, &al, &b, &bl, tmp, tmpcap, err)))
            break;
        int ia = tok_strmap_get(&full, a, al), ib = tok_strmap_get(&full, b, bl);
        if (al + bl >= 2 * tmpcap) {
            rc = di_errf(err, "tokenizer.json: model.merges[%zu] is too long", i);
            break;
        }
        memcpy(cat, a, al);
        memcpy(cat + al, b, bl);
        int im = tok_strmap_get(&full, cat, al + bl);
        if (ia < 0 || ib < 0 || im < 0) {
            rc = di_errf(
                err, "tokenizer.json: model.merges[%zu] names a token not in the vocabulary", i);
            break;
        }
        if (!t->control[im]) tok_pairmap_put(&t->merges, ia, ib, (uint32_t)i, im);
    }
    free(tmp);
    free(cat);
    tok_strmap_free(&full);
    return rc;
}

/* Initial symbols for bytes, and (byte-level) the raw-bytes map for ignore_merges. */
static void build_byte_tables(tokenizer *t) {
    for (uint32_t cp = 0; cp < 324; cp++) t->cp_byte[cp] = (int16_t)tok_cp_to_byte(cp);
    for (int b = 0; b < 256; b++) {
        char s[8];
        size_t n;
        if (t->byte_level)
            n = tok_utf8_put(tok_byte_to_cp((uint8_t)b), s);
        else
            n = (size_t)snprintf(s, sizeof s, "<0x%02X>", b);
        t->byte_id[b] = tok_strmap_get(&t->vocab, s, n);
    }
    if (!t->byte_level) return;
    /* raw byte spelling of every reachable token, in one arena */
    size_t total = 0;
    for (size_t e = 0; e < t->vocab.n; e++) total += t->vocab.ent[e].len + 1;
    t->raw_arena = di_malloc(total + 1);
    tok_strmap_init(&t->raw, t->vocab.n);
    char *w = t->raw_arena;
    for (size_t e = 0; e < t->vocab.n; e++) {
        const char *s = t->vocab.ent[e].s;
        size_t n = t->vocab.ent[e].len, i = 0, k = 0;
        bool ok = true;
        while (i < n && ok) {
            uint32_t cp;
            size_t l = tok_utf8_next(s + i, n - i, &cp);
            int b = l ? tok_cp_to_byte(cp) : -1;
            if (b < 0)
                ok = false;
            else
                w[k++] = (char)b, i += l;
        }
        if (!ok) continue;
        tok_strmap_put(&t->raw, w, k, t->vocab.ent[e].id);
        w += k;
    }
}

static int find_token_id(tokenizer *t, json_t *v) {
    const char *s = json_is_string(v)   ? json_string_value(v)
                    : json_is_object(v) ? jstr(v, "content")
                                        : NULL;
    if (!s) return -1;
    int id = tok_strmap_get(&t->added, s, strlen(s));
    if (id < 0) {
        /* not an added token: any vocabulary entry of that spelling */
        for (int i = 0; i < t->n_ids; i++)
            if (t->str[i] && !strcmp(t->str[i], s)) return i;
    }
    return id;
}

int tok_load_config(tokenizer *t, const char *dir, di_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    json_error_t je;
    json_t *c = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
    if (!c) return di_errf(err, "%s: %s (line %d)", path, je.text, je.line);
    t->bos_id = find_token_id(t, json_object_get(c, "bos_token"));
    t->eos_id = find_token_id(t, json_object_get(c, "eos_token"));
    json_decref(c);
    return 0;
}

tokenizer *tok_load(const char *path, di_err *err) {
    char file[4096], dir[4096];
    struct stat st;
    if (stat(path, &st) != 0) {
        di_errf(err, "%s: no such file or directory", path);
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", path);
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
    } else {
        snprintf(file, sizeof file, "%s", path);
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(dir, sizeof dir, ".");
    }
    json_error_t je;
    json_t *root = json_load_file(file, JSON_ALLOW_NUL, &je);
    if (!root) {
        di_errf(err, "%s: %s (line %d)", file, je.text, je.line);
        return NULL;
    }
    tokenizer *t = di_calloc(1, sizeof *t);
    t->bos_id = t->eos_id = t->unk_id = -1;
    di_err e2;
    int rc =
        load_model(t, json_object_get(root, "model"), json_object_get(root, "added_tokens"), &e2);
    json_t *n = json_object_get(root, "normalizer"), *p = json_object_get(root, "pre_tokenizer"),
           *d = json_object_get(root, "decoder");
    if (!rc && n && !json_is_null(n)) rc = tok_parse_normalizer(t, n, &e2);
    if (!rc && p && !json_is_null(p)) rc = tok_parse_pretokenizer(t, p, &e2);
    if (!rc && d && !json_is_null(d)) {
        t->has_decoder = true;
        rc = tok_parse_decoder(t, d, &e2);
    }
    if (!rc) {
        build_byte_tables(t);
        rc = tok_load_config(t, dir, &e2);
    }
    json_decref(root);
    if (rc) {
        di_errf(err, "%s: %s", file, e2.msg);
        tok_free(t);
        return NULL;
    }
    /* safe cut rule for parallel encoding, decided once */
    tok_choose_cuts(t);
    return t;
}

void tok_free(tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_ids; i++) free(t->str[i]);
    free(t->str);
    free(t->slen);
    free(t->control);
    free(t->special);
    for (int i = 0; i < t->n_adds; i++) free(t->adds[i].content);
    free(t->adds);
    tok_strmap_free(&t->vocab);
    tok_strmap_free(&t->added);
    tok_strmap_free(&t->raw);
    free(t->raw_arena);
    tok_pairmap_free(&t->merges);
    tok_pipeline_free(t);
    free(t);
}

int tok_vocab_size(const tokenizer *t) {
    return t->n_ids;
}
int tok_bos_id(const tokenizer *t) {
    return t->bos_id;
}
int tok_eos_id(const tokenizer *t) {
    return t->eos_id;
}

int tok_control_id(const tokenizer *t, const char *content) {
    return tok_strmap_get(&t->added, content, strlen(content));
}

const char *tok_token_str(const tokenizer *t, int id) {
    return id >= 0 && id < t->n_ids ? t->str[id] : NULL;
}

bool tok_is_control(const tokenizer *t, int id) {
    return id >= 0 && id < t->n_ids && t->control[id];
}
