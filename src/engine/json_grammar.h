/* json_grammar.h — constrained decoding to one JSON object (OpenAI's
 * response_format json_object / json_schema, Responses text.format): a
 * byte-level pushdown automaton of the JSON grammar (RFC 8259, the top-level
 * value an object, strings valid UTF-8), optionally following a compiled
 * JSON schema (json_schema.c), and over a vocabulary's token bytes the mask
 * of the tokens that keep the output a prefix of such a value.
 *
 * The state is a few bytes of plain data (nesting in a 64-bit stack, so at
 * most JG_MAX_DEPTH levels), copied freely. The mask walks the tokens in
 * byte order, each resuming from the state its shared prefix with the one
 * before left (the walk of a trie without building one), and skips every
 * token that shares a prefix that failed; inside a string, the tokens of
 * plain text are allowed as a set and only the others walked (llama 3's
 * 128k tokens: about 1 ms a mask in any state, 4-8 ms walking them all
 * inside strings). Whitespace outside strings is
 * bounded (JG_MAX_WS bytes in a row) so that a model cannot pad forever;
 * once the object closes only an end-of-sequence token is allowed. The same
 * mask holds plain text to a pattern (jg_init_regex) or to a grammar
 * (jg_init_grammar), and tool calls as a model format writes them, each
 * call's arguments an object following its tool's schema (jg_init_calls,
 * json_calls.c). */
#ifndef DI_JSON_GRAMMAR_H
#define DI_JSON_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JG_MAX_DEPTH 64
#define JG_MAX_WS    32

/* The JSON automaton's own state (json_grammar.c). */
typedef struct jg_core {
    uint64_t arrays; /* bit d: the container at depth d + 1 is an array */
    uint8_t depth;   /* containers open */
    uint8_t mode;    /* what the next byte may be (json_internal.h) */
    uint8_t sub;     /* progress in a literal, a number or a \u escape */
    uint8_t utf8;    /* continuation bytes a string still owes */
    uint8_t lo, hi;  /* range of the next continuation byte */
    uint8_t ws;      /* whitespace bytes in a row outside strings */
    bool key;        /* the string being read is an object key */
    bool low;        /* a \u escape must be a low surrogate */
    uint16_t cp;     /* the \u escape's value so far */
} jg_core;

/* A JSON schema compiled for decoding (json_schema.c); with one, the
 * state follows it: its containers in frames, a key or an enum value being
 * matched in cand / kpos, a string, number or free value in c. */
typedef struct jg_schema jg_schema;
#define JG_SCHEMA_DEPTH 12
typedef struct jg_frame {
    uint64_t seen; /* object: properties written; array: items started */
    uint64_t alts; /* object union: the branches it can still be */
    uint16_t node;
    uint8_t phase, prop;
} jg_frame;

/* What a number with a range has read: its digits as one integer m (the
 * point ignored), their count before the point, the significant ones, and
 * those after the point. */
typedef struct jg_num {
    uint64_t m;
    uint16_t frac;
    uint8_t whole, sig;
    bool neg, dot;
} jg_num;

typedef struct jr_dfa jr_dfa;         /* json_regex.h */
typedef struct gr_matcher gr_matcher; /* grammar.h */

typedef struct jg_calls jg_calls; /* below */

typedef struct jg_state {
    jg_core c;
    const jr_dfa *raw;       /* not JSON: text matching this pattern whole, in rstate */
    gr_matcher *gram;        /* not JSON: text this grammar matches whole (the caller's) */
    const jg_schema *schema; /* NULL: any JSON object */
    uint8_t depth;           /* frames open */
    uint8_t what;            /* what is being read below the frames (json_internal.h) */
    uint8_t ws;              /* whitespace bytes in a row between values */
    bool int_only;           /* the number in c is an integer */
    bool num_bounded;        /* ... or any number, with a range (node snode): num */
    jg_num num;
    bool str_limited; /* the string in c has a length range (node snode) */
    bool str_re;      /* ... a pattern: its DFA's state, a \u high surrogate pending */
    uint16_t snode;
    uint16_t rstate, rhigh;
    uint32_t slen;  /* its characters so far */
    bool done;      /* the value is complete */
    uint16_t kpos;  /* bytes of the key or enum value matched */
    uint16_t enode; /* the enum's node */
    uint64_t cand;  /* properties or enum values still matching */
    jg_frame f[JG_SCHEMA_DEPTH];
    /* Tool calls (jg_init_calls): the object above is one call's arguments,
     * between texts matched here: the phase (json_calls.c), the texts still
     * matching (a range of a sorted table) and the bytes matched, the call's
     * tool, the calls written. */
    const jg_calls *calls;
    uint8_t cphase, ctable;
    uint16_t clo, chi, cpos, calt, ncalls;
    uint32_t cbytes; /* bytes of arguments read (a control token adds none) */
    bool cmade;      /* with an answer (jg_calls_set_answer): calls written, so no answer */
    /* DSML arguments (jg_calls_set_dsml): where in a parameter's markup or
     * value, the bytes of a tag matched, a parameter written before, and a
     * string="false" value's JSON strings and nesting */
    uint8_t dphase;
    bool dhave, dstr, desc;
    uint16_t dpos, ddepth;
} jg_state;

/* Any JSON object, or one that schema (borrowed) describes. */
void jg_init(jg_state *s);
void jg_init_schema(jg_state *s, const jg_schema *schema);
/* Not JSON: text the pattern's automaton (borrowed; its state 0 the start)
 * takes whole, bytes as they are (structured outputs' regex and choice);
 * complete where the automaton accepts. */
void jg_init_regex(jg_state *s, const jr_dfa *re);
/* Not JSON: text the grammar takes whole, through matcher m (the caller
 * owns it and frees it after s; s's copies share it, so one of them a
 * matcher); complete where the grammar's root can end. */
void jg_init_grammar(jg_state *s, gr_matcher *m);
/* Tool calls, as a model writes them: one to max_calls calls, each the text
 * opening a call of one of the tools (`first` for the first call, `next`
 * for a later one), its arguments (a JSON object following the tool's
 * schema, or any object), the tool's `suffix`; then `close` (complete
 * there; "": the output may end after any call). The opening texts of the
 * tools must differ, none a prefix of another or of close. NULL, with why,
 * where a schema does not compile or the texts clash. */
typedef struct jg_call_form {
    const char *first, *next, *suffix;
    const char *schema; /* the arguments' JSON schema text, or NULL */
} jg_call_form;
#define JG_MAX_CALL_FORMS 256
jg_calls *jg_calls_compile(const jg_call_form *forms, int n, const char *close, int max_calls,
                           char *why, size_t cap);
/* Calls that start where the model writes `trigger` (strict tools under
 * tool_choice auto): any text until then (control tokens too: the
 * vocabulary's jg_vocab_add_controls), the calls held from the byte after
 * it, and once they close any text again, until the trigger's next
 * occurrence. The output may end anywhere outside a call. */
void jg_calls_set_trigger(jg_calls *c, const char *trigger);
/* The arguments are DeepSeek V4's DSML parameters, not a JSON object:
 *   <｜DSML｜parameter name="KEY" string="true">RAW</｜DSML｜parameter>\n
 *   <｜DSML｜parameter name="KEY" string="false">JSON</｜DSML｜parameter>\n
 * one after another (none: no arguments), held to the tool's schema as the
 * object they stand for (RAW: a string's characters as they are, JSON: any
 * other value); the arguments end where the form's suffix begins. */
void jg_calls_set_dsml(jg_calls *c);
/* With a trigger: instead of free text, either an answer (one JSON object
 * following the schema's text, or any object where NULL) or calls, each
 * block opened by the trigger (whitespace before either, bounded) — the
 * structured output of a request that offers tools. false, with why, where
 * the schema does not compile. */
bool jg_calls_set_answer(jg_calls *c, const char *schema, char *why, size_t cap);
void jg_calls_free(jg_calls *c);
/* Text that c (borrowed) takes whole. */
void jg_init_calls(jg_state *s, const jg_calls *c);
/* Compiles a JSON schema (its text): objects (properties in any order, the
 * required ones before the object closes, no others), arrays of items,
 * strings, numbers, integers, booleans, null, enum / const values, anyOf /
 * oneOf / type lists (objects one object union: keys and values narrow its
 * branches; of other branches that start alike, a plain string stands for
 * the string ones, patterns and string enums are one alternation, else the
 * first listed stays), and $ref into $defs
 * or definitions; strings' minLength / maxLength (characters), pattern
 * (json_regex.h's subset of ECMAScript's) or format (date, date-time,
 * time, uuid, email, ipv4, hostname, uri: json_regex.c's patterns; with a
 * length range, held together with it: json_regex_len.c), arrays'
 * minItems / maxItems, and numbers' and integers' minimum / maximum
 * (exclusive or not; a number with a range takes no exponent) and a
 * multipleOf of up to 9 decimals (then no more digits after the point than
 * it has). Keywords that narrow further (other formats, patterns outside
 * the subset, a multipleOf with more decimals)
 * are not enforced; a part it cannot hold is any
 * JSON value there (a whole schema that is not an object: NULL, with why). */
jg_schema *jg_schema_compile(const char *text, size_t len, char *why, size_t cap);
void jg_schema_free(jg_schema *schema);
/* Feeds bytes; false (s then undefined) where they cannot continue a value. */
bool jg_feed(jg_state *s, const char *b, size_t n);
/* The object is complete: only an end-of-sequence token may follow. */
bool jg_done(const jg_state *s);

/* A vocabulary's token bytes in byte order. bytes(ctx, id, &len) gives a
 * token's bytes (malloc'd) or NULL for a token never allowed (control
 * tokens); eos: the ids allowed once the object is complete. */
typedef struct jg_vocab jg_vocab;
typedef char *(*jg_token_bytes_fn)(void *ctx, int id, size_t *len);
jg_vocab *jg_vocab_new(int vocab, jg_token_bytes_fn bytes, void *ctx, const int *eos, int n_eos);
/* The control tokens' bytes (control_bytes: a control token's text, NULL
 * for the others): tool calls (jg_init_calls) allow one wherever it is all
 * text around the arguments (a marker the format spells as a token), never
 * inside them; JSON, patterns and grammars never do. */
void jg_vocab_add_controls(jg_vocab *v, jg_token_bytes_fn control_bytes, void *ctx);
void jg_vocab_free(jg_vocab *v);
/* Sets the logits of the tokens that cannot follow state s to -INFINITY;
 * returns how many can. */
int jg_mask(const jg_vocab *v, const jg_state *s, float *logits);
/* Advances s by token id's bytes (an end-of-sequence token: unchanged);
 * false if they cannot follow. */
bool jg_feed_token(const jg_vocab *v, jg_state *s, int id);

#endif
