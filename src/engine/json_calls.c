/* json_calls.c — tool calls held to their tools' schemas (json_grammar.h's
 * jg_init_calls): the texts around each call's arguments matched byte by
 * byte, the arguments read by the JSON automaton following the tool's
 * compiled schema — as a JSON object, or (DSML) as the parameters that
 * stand for one, fed to the automaton as the object they spell.
 *
 * Phases: FREE (with a trigger: any text, the trigger's bytes matched so
 * far tracked as KMP does), CHOICE (the text opening a call, or the closing
 * text, matched against a table sorted by bytes: the entries still matching
 * are a range of it, narrowed by each byte), VALUE (the arguments), SUFFIX
 * (the tool's text after them), END (closed: nothing more). A choice is made
 * once one entry is left and matched whole; the closing text may be matched
 * whole while longer entries still match (the output is then complete but
 * may go on). */
#include "engine/json_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

/* The choice tables: the openers of a first call, those of a later one
 * (and the closing text), the closing text alone. */
enum { T_FIRST, T_NEXT, T_CLOSE };

typedef struct choice_entry {
    char *s;
    int len;
    int alt; /* the tool, or -1: the closing text */
} choice_entry;

typedef struct choice_table {
    choice_entry *e;
    int n;
} choice_table;

struct jg_calls {
    int n;
    jg_schema **schema; /* by tool; NULL: any object */
    char **suffix;
    int *suffix_len;
    choice_table t[3];
    int max_calls;
    bool dsml;     /* jg_calls_set_dsml: the arguments are DSML parameters */
    char *trigger; /* jg_calls_set_trigger: NULL, or the text the calls start after */
    bool answer;   /* jg_calls_set_answer: an answer or calls, not free text */
    jg_schema *answer_schema;
    int trigger_len;
    int *fail; /* KMP's: the longest proper border of the trigger's first k + 1 bytes */
};

static int entry_cmp(const void *a, const void *b) {
    const choice_entry *x = a, *y = b;
    int m = x->len < y->len ? x->len : y->len, c = memcmp(x->s, y->s, (size_t)m);
    return c ? c : x->len - y->len;
}

static void table_add(choice_table *t, const char *s, int alt) {
    t->e = di_realloc(t->e, sizeof *t->e * (size_t)(t->n + 1));
    t->e[t->n++] = (choice_entry){.s = di_strdup(s), .len = (int)strlen(s), .alt = alt};
}

/* Sorted; false where an entry is a prefix of another (a call's opener of
 * any entry, the closing text of a call's opener is allowed). */
static bool table_sort(choice_table *t, char *why, size_t cap) {
    qsort(t->e, (size_t)t->n, sizeof *t->e, entry_cmp);
    for (int i = 0; i + 1 < t->n; i++) {
        const choice_entry *a = &t->e[i], *b = &t->e[i + 1];
        if (a->alt >= 0 && a->len <= b->len && !memcmp(a->s, b->s, (size_t)a->len)) {
            snprintf(why, cap, "tool calls: the text opening a call of tool %d begins another's",
                     a->alt);
            return false;
        }
    }
    return true;
}

void jg_calls_free(jg_calls *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        jg_schema_free(c->schema[i]);
        free(c->suffix[i]);
    }
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < c->t[k].n; i++) free(c->t[k].e[i].s);
        free(c->t[k].e);
    }
    free(c->trigger);
    free(c->fail);
    jg_schema_free(c->answer_schema);
    free(c->schema);
    free(c->suffix);
    free(c->suffix_len);
    free(c);
}

jg_calls *jg_calls_compile(const jg_call_form *forms, int n, const char *close, int max_calls,
                           char *why, size_t cap) {
    if (n < 1 || n > JG_MAX_CALL_FORMS)
        return snprintf(why, cap, "tool calls: %d tools (1 to %d)", n, JG_MAX_CALL_FORMS), NULL;
    jg_calls *c = di_calloc(1, sizeof *c);
    c->n = n;
    c->max_calls = max_calls > 0 ? max_calls : 1;
    c->schema = di_calloc((size_t)n, sizeof *c->schema);
    c->suffix = di_calloc((size_t)n, sizeof *c->suffix);
    c->suffix_len = di_calloc((size_t)n, sizeof *c->suffix_len);
    for (int i = 0; i < n; i++) {
        c->suffix[i] = di_strdup(forms[i].suffix ? forms[i].suffix : "");
        c->suffix_len[i] = (int)strlen(c->suffix[i]);
        table_add(&c->t[T_FIRST], forms[i].first ? forms[i].first : "", i);
        table_add(&c->t[T_NEXT], forms[i].next ? forms[i].next : "", i);
        if (!forms[i].schema) continue;
        char w[160];
        c->schema[i] = jg_schema_compile(forms[i].schema, strlen(forms[i].schema), w, sizeof w);
        if (!c->schema[i]) {
            snprintf(why, cap, "tool %d's parameters: %s", i, w);
            jg_calls_free(c);
            return NULL;
        }
    }
    table_add(&c->t[T_NEXT], close ? close : "", -1);
    table_add(&c->t[T_CLOSE], close ? close : "", -1);
    for (int k = 0; k < 3; k++)
        if (!table_sort(&c->t[k], why, cap)) {
            jg_calls_free(c);
            return NULL;
        }
    return c;
}

void jg_calls_set_trigger(jg_calls *c, const char *trigger) {
    free(c->trigger);
    free(c->fail);
    c->trigger = NULL, c->fail = NULL, c->trigger_len = 0;
    if (!trigger || !trigger[0]) return;
    c->trigger = di_strdup(trigger);
    c->trigger_len = (int)strlen(trigger);
    c->fail = di_calloc((size_t)c->trigger_len, sizeof *c->fail);
    for (int i = 1, k = 0; i < c->trigger_len; i++) {
        while (k > 0 && trigger[i] != trigger[k]) k = c->fail[k - 1];
        if (trigger[i] == trigger[k]) k++;
        c->fail[i] = k;
    }
}

void jg_calls_set_dsml(jg_calls *c) {
    c->dsml = true;
}

bool jg_calls_set_answer(jg_calls *c, const char *schema, char *why, size_t cap) {
    jg_schema_free(c->answer_schema);
    c->answer_schema = schema ? jg_schema_compile(schema, strlen(schema), why, cap) : NULL;
    c->answer = !schema || c->answer_schema;
    return c->answer;
}

/* ---- following --------------------------------------------------------------- */

static void call_done(jg_state *s);

/* The arguments' JSON: the tool's schema (or any object) stepped by byte. */
static bool value_step(jg_state *s, uint8_t b) {
    return s->schema ? jg_schema_step(s, b) : jg_core_step(&s->c, b);
}

static bool value_done(const jg_state *s) {
    return s->schema ? s->done : s->c.mode == M_DONE;
}

static bool value_feed(jg_state *s, const char *t) {
    for (; *t; t++)
        if (!value_step(s, (uint8_t)*t)) return false;
    return true;
}

int jg_calls_free_at_rest(const jg_state *s) {
    return s->calls && s->cphase == JG_CALLS_FREE && !s->cpos ? (uint8_t)s->calls->trigger[0] : -1;
}

/* ---- DSML arguments: parameters standing for the object's members, fed
 * to the JSON automaton as `{"KEY": VALUE, ...}` would be ---- */
#define DSML "｜DSML｜"
static const char P_OPEN[] = "<" DSML "parameter name=\"";
static const char P_TRUE[] = "\" string=\"true\">";
static const char P_FALSE[] = "\" string=\"false\">";
static const char P_END[] = "</" DSML "parameter>\n";
#define P_ATTR    10                      /* bytes P_TRUE and P_FALSE share */
#define P_CLOSE   ((int)sizeof P_END - 2) /* the closing tag, before its newline */
#define D_MAX_KEY 256

enum {
    D_NEXT,   /* a parameter's tag or the arguments' end (the suffix); dpos: bytes matched */
    D_OPEN,   /* in P_OPEN */
    D_KEY,    /* the name */
    D_ATTR,   /* in P_TRUE / P_FALSE, before they part */
    D_ATTR_T, /* in P_TRUE */
    D_ATTR_F, /* in P_FALSE */
    D_RAW,    /* a string="true" value; dpos: bytes of the closing tag held */
    D_JSON,   /* a string="false" value; dpos: bytes of the closing tag in it so far */
    D_TAG,    /* in P_END */
};

bool jg_calls_in_value(const jg_state *s) {
    if (!s->calls || s->cphase == JG_CALLS_ANSWER) return true;
    if (s->cphase != JG_CALLS_VALUE) return false;
    /* DSML: a raw value, or a JSON value's string (the mask checks that the
     * JSON is in one), no closing tag begun */
    return !s->calls->dsml || ((s->dphase == D_RAW || s->dphase == D_JSON) && !s->dpos);
}

int jg_calls_plain_stop(const jg_state *s) {
    return s->calls && s->calls->dsml && s->cphase == JG_CALLS_VALUE ? '<' : -1;
}

/* A raw value's byte as the JSON string's characters. */
static bool raw_byte(jg_state *s, uint8_t b) {
    static const char hex[] = "0123456789abcdef";
    char e[7] = {'\\', 0};
    s->cbytes++;
    if (b == '"' || b == '\\') {
        e[1] = (char)b;
        return value_feed(s, e);
    }
    if (b >= 0x20) return value_step(s, b);
    const char *sh = b == '\n'   ? "n"
                     : b == '\t' ? "t"
                     : b == '\r' ? "r"
                     : b == '\b' ? "b"
                     : b == '\f' ? "f"
                                 : NULL;
    if (sh) {
        e[1] = sh[0];
        return value_feed(s, e);
    }
    e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hex[b >> 4], e[5] = hex[b & 15];
    return value_feed(s, e);
}

/* A string="false" value may end here: outside its strings, at its own
 * level, and the automaton takes the member's end (another member after it,
 * or the object's close). */
static bool json_may_end(const jg_state *s) {
    if (s->dstr || s->ddepth) return false;
    jg_state t = *s, u = *s;
    return value_step(&t, ',') || value_step(&u, '}');
}

static bool dsml_step(jg_state *s, uint8_t b) {
    const char *suffix = s->calls->suffix[s->calt];
    switch (s->dphase) {
    case D_NEXT: { /* a member can follow / the object can close (checked on copies) */
        const char *sep = s->dhave ? ",\"" : "\"";
        jg_state m = *s, e = *s;
        bool param = (uint8_t)P_OPEN[s->dpos] == b && value_feed(&m, sep);
        bool end = (uint8_t)suffix[s->dpos] == b && value_step(&e, '}') && value_done(&e);
        if (param && end) { /* both begin alike ("<") */
            s->dpos++;
            return true;
        }
        if (param) {
            *s = m;
            s->dphase = D_OPEN, s->dpos++;
            return true;
        }
        if (!end) return false;
        *s = e;
        s->cphase = JG_CALLS_SUFFIX; /* the arguments' end: the suffix goes on */
        s->cpos = (uint16_t)(s->dpos + 1);
        if (!suffix[s->cpos]) call_done(s);
        return true;
    }
    case D_OPEN:
        if ((uint8_t)P_OPEN[s->dpos] != b) return false;
        if (P_OPEN[++s->dpos]) return true;
        s->dphase = D_KEY, s->dpos = 0;
        return true;
    case D_KEY: /* dpos: its bytes (a tag the parser reads is at most 1 KiB) */
        if (b == '"' && s->dpos) {
            s->dphase = D_ATTR, s->dpos = 1;
            return value_feed(s, "\":");
        }
        if (b < 0x20 || b == '\\' || b == '"' || ++s->dpos > D_MAX_KEY) return false;
        s->cbytes++;
        return value_step(s, b);
    case D_ATTR:
        if (s->dpos == P_ATTR) {
            if (b != 't' && b != 'f') return false;
            s->dphase = b == 't' ? D_ATTR_T : D_ATTR_F;
            if (b == 't' && !value_step(s, '"')) return false; /* string="true": a string */
        } else if ((uint8_t)P_TRUE[s->dpos] != b)
            return false;
        s->dpos++;
        return true;
    case D_ATTR_T:
    case D_ATTR_F: {
        const char *lit = s->dphase == D_ATTR_T ? P_TRUE : P_FALSE;
        if ((uint8_t)lit[s->dpos] != b) return false;
        if (lit[++s->dpos]) return true;
        s->dphase = s->dphase == D_ATTR_T ? D_RAW : D_JSON, s->dpos = 0;
        s->dstr = s->desc = false, s->ddepth = 0;
        return true;
    }
    case D_RAW:
        if ((uint8_t)P_END[s->dpos] == b) { /* (more of) the closing tag: held */
            if (s->dpos + 1 == P_CLOSE) {   /* the value's end */
                s->dphase = D_TAG, s->dpos = P_CLOSE;
                return value_step(s, '"');
            }
            jg_state e = *s, t = *s; /* the value can end, or the held bytes be text */
            bool text = true;
            for (int i = 0; i <= s->dpos && text; i++) text = raw_byte(&t, (uint8_t)P_END[i]);
            if (!value_step(&e, '"') && !text) return false;
            s->dpos++;
            return true;
        }
        if (!s->dpos) return raw_byte(s, b);
        for (int i = 0; i < s->dpos; i++) /* a held start of the tag was text */
            if (!raw_byte(s, (uint8_t)P_END[i])) return false;
        s->dpos = 0;
        return dsml_step(s, b);
    case D_JSON:
        if (b == '<' && json_may_end(s)) {
            s->dphase = D_TAG, s->dpos = 1;
            return true;
        }
        /* the tag must not be spelled inside the value: the parser would
         * end it there */
        s->dpos = (uint8_t)P_END[s->dpos] == b ? s->dpos + 1 : b == '<';
        if (s->dpos == P_CLOSE) return false;
        if (!s->dstr && !s->ddepth && (b == ',' || b == '}')) return false; /* the object's own */
        if (s->dstr) {
            if (s->desc)
                s->desc = false;
            else if (b == '\\')
                s->desc = true;
            else if (b == '"')
                s->dstr = false;
        } else if (b == '"')
            s->dstr = true;
        else if (b == '{' || b == '[')
            s->ddepth++;
        else if ((b == '}' || b == ']') && s->ddepth)
            s->ddepth--;
        s->cbytes++;
        return value_step(s, b);
    default: /* D_TAG */
        if ((uint8_t)P_END[s->dpos] != b) return false;
        if (P_END[++s->dpos]) return true;
        s->dphase = D_NEXT, s->dpos = 0, s->dhave = true;
        return true;
    }
}

/* Outside calls: free text, or (with an answer) the answer or a block. */
static void free_text(jg_state *s) {
    s->cphase = s->calls->answer ? JG_CALLS_START : JG_CALLS_FREE;
    s->cpos = 0;
}

/* A JSON object afresh (following schema), the calls' own fields kept;
 * then phase. */
static void begin_object(jg_state *s, const jg_schema *schema, int phase) {
    jg_state keep = *s;
    jg_init_schema(s, schema);
    s->calls = keep.calls;
    s->ctable = keep.ctable, s->ncalls = keep.ncalls, s->calt = keep.calt;
    s->cbytes = keep.cbytes, s->cmade = keep.cmade;
    s->cphase = (uint8_t)phase;
}

static void start_value(jg_state *s, int alt) {
    const jg_calls *c = s->calls;
    s->calt = (uint16_t)alt;
    begin_object(s, c->schema[alt], JG_CALLS_VALUE);
    if (c->dsml) { /* the object the parameters stand for */
        value_step(s, '{');
        s->dphase = D_NEXT, s->dpos = 0, s->dhave = false;
    }
}

/* A choice down to one entry matched whole is made. */
static void settle(jg_state *s) {
    const choice_entry *e = &s->calls->t[s->ctable].e[s->clo];
    if (s->chi - s->clo != 1 || e->len != s->cpos) return;
    if (e->alt < 0 && s->calls->trigger) { /* the block closed: text until the next one */
        s->cmade = true;
        free_text(s);
    } else if (e->alt < 0)
        s->cphase = JG_CALLS_END;
    else
        start_value(s, e->alt);
}

static void choose(jg_state *s, int table) {
    s->cphase = JG_CALLS_CHOICE;
    s->ctable = (uint8_t)table;
    s->clo = 0;
    s->chi = (uint16_t)s->calls->t[table].n;
    s->cpos = 0;
    settle(s);
}

/* After a call's suffix: another call (up to max_calls) or the close. */
static void call_done(jg_state *s) {
    s->ncalls++;
    choose(s, s->ncalls < s->calls->max_calls ? T_NEXT : T_CLOSE);
}

void jg_init_calls(jg_state *s, const jg_calls *c) {
    jg_init(s);
    s->calls = c;
    if (c->trigger)
        free_text(s);
    else
        choose(s, T_FIRST);
}

/* A byte of the trigger that opens a block (with an answer: nothing else
 * may stand there). */
static bool open_step(jg_state *s, uint8_t b) {
    if ((uint8_t)s->calls->trigger[s->cpos] != b) return false;
    if (++s->cpos == s->calls->trigger_len) {
        s->ncalls = 0;
        choose(s, T_FIRST);
    }
    return true;
}

bool jg_calls_step(jg_state *s, uint8_t b) {
    const jg_calls *c = s->calls;
    switch (s->cphase) {
    case JG_CALLS_START:
        if (b == ' ' || b == '\n' || b == '\t' || b == '\r') return ++s->cpos <= JG_MAX_WS;
        if (b == '{' && !s->cmade) { /* the answer */
            begin_object(s, c->answer_schema, JG_CALLS_ANSWER);
            s->cbytes++;
            return value_step(s, b);
        }
        s->cphase = JG_CALLS_OPEN, s->cpos = 0;
        return open_step(s, b); /* the trigger's first byte */
    case JG_CALLS_OPEN:
        return open_step(s, b);
    case JG_CALLS_ANSWER:
        s->cbytes++;
        if (!value_step(s, b)) return false;
        if (value_done(s)) s->cphase = JG_CALLS_END;
        return true;
    case JG_CALLS_FREE: {
        int k = s->cpos;
        while (k > 0 && (uint8_t)c->trigger[k] != b) k = c->fail[k - 1];
        if ((uint8_t)c->trigger[k] == b) k++;
        s->cpos = (uint16_t)k;
        if (k == c->trigger_len) {
            s->ncalls = 0;
            choose(s, T_FIRST);
        }
        return true;
    }
    case JG_CALLS_CHOICE: {
        const choice_table *t = &c->t[s->ctable];
        int lo = s->clo, hi = s->chi, pos = s->cpos;
        while (lo < hi && (t->e[lo].len <= pos || (uint8_t)t->e[lo].s[pos] < b)) lo++;
        int end = lo;
        while (end < hi && (uint8_t)t->e[end].s[pos] == b) end++;
        if (lo == end) return false;
        s->clo = (uint16_t)lo, s->chi = (uint16_t)end, s->cpos = (uint16_t)(pos + 1);
        settle(s);
        return true;
    }
    case JG_CALLS_VALUE:
        if (c->dsml) return dsml_step(s, b);
        s->cbytes++;
        if (!value_step(s, b)) return false;
        if (value_done(s)) {
            s->cphase = JG_CALLS_SUFFIX;
            s->cpos = 0;
            if (!c->suffix_len[s->calt]) call_done(s);
        }
        return true;
    case JG_CALLS_SUFFIX:
        if ((uint8_t)c->suffix[s->calt][s->cpos] != b) return false;
        if (++s->cpos == c->suffix_len[s->calt]) call_done(s);
        return true;
    default: /* JG_CALLS_END */
        return false;
    }
}

bool jg_calls_done(const jg_state *s) {
    if (s->cphase == JG_CALLS_END || s->cphase == JG_CALLS_FREE) return true;
    if (s->cphase == JG_CALLS_START) return s->cmade; /* after calls: nothing more needed */
    if (s->cphase != JG_CALLS_CHOICE || s->ctable == T_FIRST) return false;
    const choice_entry *e = &s->calls->t[s->ctable].e[s->clo];
    return e->alt < 0 && e->len == s->cpos;
}
