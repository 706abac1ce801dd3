/* json_regex.h — a JSON schema string's `pattern` (and the `format`s that
 * stand for one) as a DFA over the bytes of the string's value, decoded
 * (escapes undone) in UTF-8, for constrained decoding (json_schema.c).
 *
 * The syntax is ECMAScript's, as JSON Schema says, less what no finite
 * automaton holds or this compiler does not: literals (any UTF-8), escapes
 * (\n \t \r \f \v \/ \\ \. ... \uXXXX \xHH), classes ([a-z], [^...], \d \w
 * \s and their negations, ranges of non-ASCII characters 256 wide at most),
 * the dot, groups ((...) and (?:...)), alternation, the quantifiers * + ?
 * {n} {n,} {n,m} (lazy or not: the same strings), and ^ / $ at the start /
 * end of a top-level alternative (one without them matches anywhere in the
 * string, as a search does). Back-references, look-around, \b and flags are
 * refused. Where ECMAScript's Unicode classes reach beyond what is spelled
 * out here (\s's Unicode spaces in a negated class, the dot on U+2028 /
 * U+2029), the automaton takes a subset of the strings the pattern matches,
 * never one it does not; U+0000 is never taken (JSON decoding refuses it).
 *
 * Every state kept can still reach an accepting one: a value that follows
 * the automaton can always be finished. */
#ifndef DI_JSON_REGEX_H
#define DI_JSON_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define JR_DEAD 0xFFFF
/* The most states for a pattern that is a request's whole constraint
 * (structured outputs' regex and choice); a schema's own have less. */
#define JR_MAX_STATES 16384

typedef struct jr_dfa jr_dfa;

/* The automaton of pattern (len bytes), at most max_states states; NULL
 * with why where the pattern is malformed, outside the subset, matches no
 * string, needs more states, or more work than a bounded search (tens of
 * milliseconds). */
jr_dfa *jr_compile(const char *pattern, size_t len, int max_states, char *why, size_t cap);
void jr_free(jr_dfa *d);
/* The state before any byte is 0. */
static inline bool jr_live(int state) {
    return state != JR_DEAD;
}
/* The state after byte b (JR_DEAD: no string continues so). */
int jr_step(const jr_dfa *d, int state, uint8_t b);
/* A string may end in state. */
bool jr_accepts(const jr_dfa *d, int state);
typedef struct jr_lengths jr_lengths;
/* Some code point in [lo, hi] (but NUL and the surrogates) leads state
 * somewhere live (with l, somewhere l allows at len characters): the
 * escape \uXXXX being read can still be one the pattern takes. */
bool jr_takes_any(const jr_dfa *d, int state, uint32_t lo, uint32_t hi, const jr_lengths *l,
                  uint32_t len);
int jr_states(const jr_dfa *d);
/* d's byte classes: how many, a byte of class k (-1: NUL alone), and the
 * state after one from state. */
int jr_classes(const jr_dfa *d);
int jr_class_byte(const jr_dfa *d, int k);
int jr_step_class(const jr_dfa *d, int state, int k);

/* ---- a pattern under a length range (json_regex_len.c) ----
 * The states from which, with len characters written (a character: a
 * byte that is no UTF-8 continuation), some value of between lo and hi
 * characters (hi UINT32_MAX: no most) can still be finished: a bitset a
 * length. NULL where that takes over max_bits bits, with *none where no
 * value from the start fits at all. */
jr_lengths *jr_lengths_new(const jr_dfa *d, uint32_t lo, uint32_t hi, size_t max_bits, bool *none);
void jr_lengths_free(jr_lengths *l);
/* The bits l holds (what max_bits bounds). */
size_t jr_lengths_bits(const jr_lengths *l);
bool jr_lengths_ok(const jr_lengths *l, int state, uint32_t len);
/* Appends to b a pattern matching exactly the n bytes of s (a literal:
 * the syntax's special characters escaped, control bytes as \xHH). */
void jr_escape_literal(di_buf *b, const char *s, size_t n);
/* The pattern standing for a JSON schema format ("date", "date-time",
 * "time", "uuid", "email", "ipv4", "hostname", "uri"), or NULL. */
const char *jr_format(const char *name);

#endif
