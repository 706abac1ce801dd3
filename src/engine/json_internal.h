/* json_internal.h — what json_grammar.c (the JSON automaton, the mask) and
 * json_schema.c (schemas on top of it) share. */
#ifndef DI_JSON_INTERNAL_H
#define DI_JSON_INTERNAL_H

#include "engine/json_grammar.h"

/* jg_core.mode: what the next byte may be */
enum {
    M_START,     /* before the object: whitespace, then '{' */
    M_OBJ_FIRST, /* after '{': a key or '}' */
    M_OBJ_KEY,   /* after ',' in an object: a key */
    M_COLON,     /* after a key */
    M_VALUE,     /* a value */
    M_ARR_FIRST, /* after '[': a value or ']' */
    M_AFTER,     /* after a value in a container: ',' or its closer */
    M_STRING,
    M_ESC,     /* after a backslash */
    M_UHEX,    /* in the 4 hex digits of \u (sub: digits read, cp: their value) */
    M_LOW_BSL, /* after a high surrogate's escape: '\' of the low one */
    M_LOW_U,   /* ... its 'u' */
    M_NUMBER,  /* sub: N_* */
    M_LITERAL, /* sub: literal * 8 + characters matched */
    M_DONE,    /* the value is complete */
};

/* jg_state.what: with a schema, what is being read below the frames */
enum { W_NONE, W_CORE, W_KEY, W_ENUM };

/* One byte into the core automaton. */
bool jg_core_step(jg_core *s, uint8_t c);
/* The core holds a number that may end here. */
bool jg_core_number_ends(const jg_core *s);
/* One byte with a schema (json_schema.c). */
bool jg_schema_step(jg_state *s, uint8_t c);
/* Characters the string being read may still take (UINT32_MAX: any). */
uint32_t jg_string_room(const jg_state *s);
/* The pattern the string being read follows (its state: s->rstate), or
 * NULL. */
const struct jr_dfa *jg_string_pattern(const jg_state *s);

#endif
