/* test_json_regex.c — JSON schema patterns as DFAs (json_regex.h): what
 * they match and refuse, the formats, and PCRE2 as an independent oracle
 * (strings drawn at random and strings the DFA generates). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_regex.h"
#include "harness.h"

static jr_dfa *dfa(const char *pattern) {
    char why[160];
    jr_dfa *d = jr_compile(pattern, strlen(pattern), 4096, why, sizeof why);
    if (!d) fprintf(stderr, "pattern %s: %s\n", pattern, why);
    return d;
}

static bool dfa_matches(const jr_dfa *d, const char *s, size_t n) {
    int st = 0;
    for (size_t i = 0; i < n && jr_live(st); i++) st = jr_step(d, st, (uint8_t)s[i]);
    return jr_live(st) && jr_accepts(d, st);
}

typedef struct pattern_case {
    const char *pattern;
    const char *yes[5], *no[5];
} pattern_case;

static const pattern_case CASES[] = {
    {"^[A-Z]{3}-\\d{4}$", {"ABC-1234", "ZZZ-0000"}, {"AB-1234", "ABC-12345", "abc-1234", ""}},
    {"ab",
     {"ab", "xaby",
      "\xC3\xA9"
      "ab"},
     {"a", "ba", ""}}, /* a search: anywhere */
    {"^a|b$", {"ax", "xb", "a", "b"}, {"xa", "bx"}},
    {"^(foo|bar)+$", {"foo", "foobar", "barbarfoo"}, {"", "fo", "foob"}},
    {"^(?:x{2,3}|y{,2})$", {"xx", "xxx", "y{,2}"}, {"x", "xxxx", "yy"}},
    {"^[^a-c\\d]*$", {"xyz", "\xC3\xA9\xE4\xB8\xAD", ""}, {"abc", "x1"}},
    {"^\\S+\\s\\w+\\W$", {"\xC3\xA9z\tok!", "a b_c\xC3\xA9"}, {"a b", "a  b!", "a b!x"}},
    {"^.\\.$", {"a.", "\xE4\xB8\xAD."}, {"\n.", "ab", "a"}},
    {"^[\\u00e0-\\u00ff]+\\x41\\/\\u00e9$",
     {"\xC3\xA0\xC3\xBF"
      "A/\xC3\xA9"},
     {"aA/\xC3\xA9"}},
    {"^\\uD83D\\uDE00?$", {"\xF0\x9F\x98\x80", ""}, {"\xED\xA0\xBD"}},
    {"^\\d+(\\.\\d+)?$", {"12", "1.5"}, {"1.", ".5", "1e5"}},
    {"^a{2}{,]$", {"aa{,]"}, {"aa", "aa{"}}, /* braces that quantify nothing: themselves */
};

TEST(json_regex_matches_what_the_pattern_does) {
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        jr_dfa *d = dfa(CASES[c].pattern);
        CHECKF(d, "%s refused", CASES[c].pattern);
        for (int k = 0; k < 5 && CASES[c].yes[k]; k++)
            CHECKF(dfa_matches(d, CASES[c].yes[k], strlen(CASES[c].yes[k])), "%s refused '%s'",
                   CASES[c].pattern, CASES[c].yes[k]);
        for (int k = 0; k < 5 && CASES[c].no[k]; k++)
            CHECKF(!dfa_matches(d, CASES[c].no[k], strlen(CASES[c].no[k])), "%s took '%s'",
                   CASES[c].pattern, CASES[c].no[k]);
        jr_free(d);
    }
}

TEST(json_regex_refuses_what_it_cannot_hold) {
    const char *bad[][2] = {
        {"a(?=b)", "look-around"},
        {"(a", "unclosed"},
        {"a)", "unmatched"},
        {"(a)\\1", "back-ref"},
        {"a\\bc", "boundary"},
        {"a{3,2}", "out of order"},
        {"[z-a]", "out of order"},
        {"[^\\u00e9]", "negated"},
        {"a^b", "anchor"},
        {"a**", "nothing"},
        {"*a", "nothing"},
        {"[]", "no string"},
        {"^[a-z]{1001}$", "1000"},
        {"\\x4", "malformed"},
        {"\\ud800", "surrogate"},
        {"[\\u0100-\\u0300]", "256"},
        {"(a|b)*a(a|b){12}", "states"},
        {"[\\u00c0-\\u01bf]{1,30}.{1,40}", "costs"}, /* a bounded search */
    };
    char why[160];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        jr_dfa *d = jr_compile(bad[i][0], strlen(bad[i][0]), 4096, why, sizeof why);
        CHECKF(!d && strstr(why, bad[i][1]), "%s: %s", bad[i][0], d ? "compiled" : why);
    }
}

TEST(json_regex_formats) {
    const char *cases[][3] = {
        /* format, a value, one it is not */
        {"date", "2024-02-29", "2024-13-01"},
        {"time", "23:59:60.5+05:30", "24:00:00Z"},
        {"date-time", "2024-02-29T12:30:00Z", "2024-02-29 12:30:00Z"},
        {"uuid", "123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000"},
        {"email", "first.last+tag@mail.example.org", "first..last@example.org"},
        {"ipv4", "192.168.0.255", "192.168.0.256"},
        {"hostname", "a-b.example", "-ab.example"},
        {"uri", "https://example.org/a?b=c#d", "no scheme"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *p = jr_format(cases[i][0]);
        CHECKF(p, "no %s", cases[i][0]);
        jr_dfa *d = dfa(p);
        CHECK(d);
        CHECKF(dfa_matches(d, cases[i][1], strlen(cases[i][1])), "%s: %s", cases[i][0],
               cases[i][1]);
        CHECKF(!dfa_matches(d, cases[i][2], strlen(cases[i][2])), "%s: %s", cases[i][0],
               cases[i][2]);
        jr_free(d);
    }
    CHECK(!jr_format("ipv6") && !jr_format(""));
}

/* ---- PCRE2 as the oracle ---- */
static const char *const ORACLE_PATTERNS[] = {
    "^[ab]+-[0-9]{2}$",
    "a.b",
    "^(ab|a)(b|c)*$",
    "^\\w+@\\w+(\\.\\w+)+$",
    "^[^ab\\s]{1,3}(-[a-c]?)?$",
    "b\\d|^a",
    "^(a|b)?(a|b)?c{0,2}\\.?$",
    "^\\S*[ \\t]?\\D$", /* (not \\s: PCRE2 without UCP takes ASCII spaces only) */
    "^(?:[a\\u00e9]|\\u4e2d)+$",
    "^.+$",
};

static const char *const PIECES[] = {"a", "b", "c",  "0", "1",        "-",           ".",
                                     "@", " ", "\n", "_", "\xC3\xA9", "\xE4\xB8\xAD"};

/* A string the DFA takes, drawn by walking its live bytes (NULL past len). */
static int dfa_draw(const jr_dfa *d, char *out, int cap, unsigned *r) {
    int st = 0, n = 0;
    for (;;) {
        if (jr_accepts(d, st) && (n >= cap - 4 || harness_lcg(r) % 3 == 0)) return n;
        if (n >= cap - 4) return -1;
        int next[256], m = 0;
        for (int b = 1; b < 256; b++)
            if (jr_live(jr_step(d, st, (uint8_t)b))) next[m++] = b;
        if (!m) return -1;
        int b = next[harness_lcg(r) % (unsigned)m];
        out[n++] = (char)b;
        st = jr_step(d, st, (uint8_t)b);
    }
}

TEST(json_regex_agrees_with_pcre2) {
    unsigned r = 11;
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    pcre2_set_newline(cc, PCRE2_NEWLINE_ANYCRLF); /* the dot: neither \n nor \r */
    int checked = 0, matched = 0, drawn = 0;
    for (size_t p = 0; p < sizeof ORACLE_PATTERNS / sizeof *ORACLE_PATTERNS; p++) {
        const char *pat = ORACLE_PATTERNS[p];
        int err;
        PCRE2_SIZE off;
        pcre2_code *re =
            pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALT_BSUX, &err, &off, cc);
        CHECKF(re, "pcre2 refused %s", pat);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        jr_dfa *d = dfa(pat);
        CHECK(d);
        for (int t = 0; t < 3000; t++) {
            char s[64];
            int n = 0, pieces = (int)(harness_lcg(&r) % 9);
            bool ascii = true;
            for (int k = 0; k < pieces; k++) {
                const char *q = PIECES[harness_lcg(&r) % (sizeof PIECES / sizeof *PIECES)];
                ascii &= (uint8_t)q[0] < 0x80;
                memcpy(s + n, q, strlen(q));
                n += (int)strlen(q);
            }
            bool want = pcre2_match(re, (PCRE2_SPTR)s, (size_t)n, 0, 0, md, NULL) >= 0;
            bool got = dfa_matches(d, s, (size_t)n);
            /* beyond ASCII the DFA may take a subset (json_regex.h) */
            CHECKF(ascii ? got == want : !got || want, "%s on '%.*s': dfa %d, pcre2 %d", pat, n, s,
                   got, want);
            checked++;
            matched += want;
        }
        for (int t = 0; t < 300; t++) { /* every string the DFA draws, PCRE2 matches */
            char s[64];
            int n = dfa_draw(d, s, sizeof s, &r);
            if (n < 0) continue;
            drawn++;
            CHECKF(pcre2_match(re, (PCRE2_SPTR)s, (size_t)n, 0, 0, md, NULL) >= 0, "%s drew '%.*s'",
                   pat, n, s);
        }
        jr_free(d);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
    }
    pcre2_compile_context_free(cc);
    CHECKF(matched > 1000 && drawn > 1500, "%d of %d matched, %d drawn", matched, checked, drawn);
}
