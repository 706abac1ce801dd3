/* grammar.h — constrained decoding to a context-free grammar: llama.cpp's
 * GBNF (also the EBNF that vLLM's guided_grammar and SGLang's ebnf take
 * through xgrammar), compiled to byte-level rules (grammar.c) and matched
 * by a set of stacks over them (grammar_match.c), for json_grammar.c's
 * token mask.
 *
 * The syntax: rules `name ::= alternatives`, alternatives separated by
 * `|`, each a sequence of string literals ("..." with \n \r \t \\ \" \'
 * \xHH \uHHHH \UHHHHHHHH), character classes ([a-z_], [^"\\], the same
 * escapes, \] \- \[ \^ too), the dot (any character), rule names, groups
 * (...) and the postfix repetitions * + ? {m} {m,} {m,n} {,n}; comments
 * from # to the end of the line. A rule ends where the next one begins
 * (`name ::=`) or the text does, so it may span lines. The text matched
 * is the rule "root"'s. Refused with a reason: syntax errors, a rule used
 * and not defined or defined twice, no root, a rule (reachable from root)
 * that can never be completed, left recursion (a rule that can begin with
 * itself, also through a repetition of something that can be empty), and
 * grammars over the size limits. Characters are Unicode scalar values
 * but NUL, matched as their UTF-8 bytes.
 *
 * Matching keeps every parse still possible as a stack of positions in
 * the rules (a rule called last in its alternative returns straight to its
 * caller, so repetitions do not deepen it); states (sets of stacks) and
 * their transitions by byte are cached per matcher, so walking a
 * vocabulary's tokens costs about a table lookup a byte once a state has
 * been seen. Every stack can be completed, since every rule can: a text
 * the matcher takes can always be finished. */
#ifndef DI_GRAMMAR_H
#define DI_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Size limits of a grammar: its elements after repetitions are expanded
 * (a {m,n} costs about n), and a repetition's count. */
#define GR_MAX_ELEMS  (1 << 18)
#define GR_MAX_REPEAT 10000
#define GR_MAX_SETS   16384 /* distinct byte sets, the pieces of classes */

typedef struct gr_grammar gr_grammar;

/* Compiles grammar text (len bytes); NULL with why where it is refused. */
gr_grammar *gr_compile(const char *text, size_t len, char *why, size_t cap);
void gr_free(gr_grammar *g);

/* A text being matched, with its caches; one per sequence (not shared
 * between threads), reading g (borrowed). */
typedef struct gr_matcher gr_matcher;
gr_matcher *gr_matcher_new(const gr_grammar *g);
void gr_matcher_free(gr_matcher *m);
/* The caches' size past which gr_current starts them afresh from the
 * current state (default GR_CACHE_BYTES). */
#define GR_CACHE_BYTES ((size_t)16 << 20)
void gr_matcher_set_budget(gr_matcher *m, size_t bytes);

/* States are ints valid until the next gr_current or gr_feed. The state
 * of the text so far (trimming the caches first where they have grown). */
int gr_current(gr_matcher *m);
/* The state after byte b from state, or -1 where no text goes on so. */
int gr_next(gr_matcher *m, int state, uint8_t b);
/* Closure steps this matcher has taken (each a node visited): what a
 * caller bounds a walk by. */
uint64_t gr_work(const gr_matcher *m);
/* The text may end in state. */
bool gr_accepts(const gr_matcher *m, int state);
/* The text so far may end. */
bool gr_done(const gr_matcher *m);
/* Appends n bytes to the text; false (the matcher then unchanged) where
 * they cannot continue it. */
bool gr_feed(gr_matcher *m, const char *b, size_t n);

#endif
