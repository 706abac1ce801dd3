/* render_util.c — small string tools the renderers share: a byte buffer, the
 * JSON writer that reproduces the chat templates' `tojson`, and the string
 * trims the templates use (Python semantics).
 *
 * tojson must match byte for byte what the model's template produces, so the
 * JSON is re-serialised here rather than with jansson's dumper: separators
 * ", " and ": ", key order as given, non-ASCII left raw, only the escapes
 * JSON.stringify / json.dumps(ensure_ascii=False) make, and numbers spelled
 * the way JavaScript spells them (shortest round-trip, 1.0 -> "1", 1e21 ->
 * "1e+21"). No global state. */
#include "recipe/render_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rjson_string(di_buf *b, const char *s, size_t len) {
    di_buf_add(b, "\"", 1);
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        di_buf_add(b, s + start, i - start);
        start = i + 1;
        char esc[8];
        switch (c) {
        case '"':
            di_buf_adds(b, "\\\"");
            break;
        case '\\':
            di_buf_adds(b, "\\\\");
            break;
        case '\b':
            di_buf_adds(b, "\\b");
            break;
        case '\f':
            di_buf_adds(b, "\\f");
            break;
        case '\n':
            di_buf_adds(b, "\\n");
            break;
        case '\r':
            di_buf_adds(b, "\\r");
            break;
        case '\t':
            di_buf_adds(b, "\\t");
            break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", c);
            di_buf_adds(b, esc);
        }
    }
    di_buf_add(b, s + start, len - start);
    di_buf_add(b, "\"", 1);
}

/* JavaScript Number.prototype.toString for a finite double. */
static void js_number(di_buf *b, double d) {
    char buf[64], digits[32];
    if (d == 0) {
        di_buf_adds(b, "0");
        return;
    }
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, d);
        if (strtod(buf, NULL) == d) break;
    }
    /* buf = [-]D[.DDD]e[+-]XX */
    const char *q = buf;
    if (*q == '-') di_buf_adds(b, "-"), q++;
    int k = 0;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[k++] = *q;
    while (k > 1 && digits[k - 1] == '0') k--;
    digits[k] = 0;
    int n = atoi(q + 1) + 1; /* decimal point position */
    if (k <= n && n <= 21) {
        di_buf_add(b, digits, (size_t)k);
        for (int i = k; i < n; i++) di_buf_adds(b, "0");
    } else if (0 < n && n <= 21) {
        di_buf_add(b, digits, (size_t)n);
        di_buf_adds(b, ".");
        di_buf_add(b, digits + n, (size_t)(k - n));
    } else if (-6 < n && n <= 0) {
        di_buf_adds(b, "0.");
        for (int i = 0; i < -n; i++) di_buf_adds(b, "0");
        di_buf_add(b, digits, (size_t)k);
    } else {
        di_buf_add(b, digits, 1);
        if (k > 1) {
            di_buf_adds(b, ".");
            di_buf_add(b, digits + 1, (size_t)(k - 1));
        }
        snprintf(buf, sizeof buf, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
        di_buf_adds(b, buf);
    }
}

void rjson_value(di_buf *b, json_t *v) {
    char buf[32];
    size_t i;
    const char *key;
    json_t *e;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        di_buf_adds(b, "{");
        i = 0;
        json_object_foreach(v, key, e) {
            if (i++) di_buf_adds(b, ", ");
            rjson_string(b, key, strlen(key));
            di_buf_adds(b, ": ");
            rjson_value(b, e);
        }
        di_buf_adds(b, "}");
        break;
    case JSON_ARRAY:
        di_buf_adds(b, "[");
        json_array_foreach(v, i, e) {
            if (i) di_buf_adds(b, ", ");
            rjson_value(b, e);
        }
        di_buf_adds(b, "]");
        break;
    case JSON_STRING:
        rjson_string(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        di_buf_adds(b, buf);
        break;
    case JSON_REAL:
        js_number(b, json_real_value(v));
        break;
    case JSON_TRUE:
        di_buf_adds(b, "true");
        break;
    case JSON_FALSE:
        di_buf_adds(b, "false");
        break;
    case JSON_NULL:
        di_buf_adds(b, "null");
        break;
    }
}

int rjson_dump(di_buf *b, const char *json, di_err *err) {
    json_error_t jerr;
    json_t *v = json_loads(json, JSON_DECODE_ANY, &jerr);
    if (!v) return di_errf(err, "render: invalid JSON (%s): %.60s", jerr.text, json);
    rjson_value(b, v);
    json_decref(v);
    return 0;
}

void rstr_strip_chars(const char **s, size_t *len, const char *chars, bool left, bool right) {
    while (left && *len && strchr(chars, (*s)[0])) (*s)++, (*len)--;
    while (right && *len && strchr(chars, (*s)[*len - 1])) (*len)--;
}

static bool py_space(unsigned cp) {
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* Code point starting at p (valid UTF-8 assumed) and its byte length. */
static unsigned utf8_at(const unsigned char *p, size_t avail, size_t *n) {
    if (p[0] < 0x80 || avail < 2) return *n = 1, p[0];
    if ((p[0] & 0xe0) == 0xc0) return *n = 2, ((p[0] & 0x1fu) << 6) | (p[1] & 0x3fu);
    if ((p[0] & 0xf0) == 0xe0 && avail >= 3)
        return *n = 3, ((p[0] & 0x0fu) << 12) | ((p[1] & 0x3fu) << 6) | (p[2] & 0x3fu);
    return *n = 1, 0xfffd; /* 4-byte sequences are never whitespace */
}

void rstr_strip_ws(const char **s, size_t *len) {
    size_t n;
    while (*len && py_space(utf8_at((const unsigned char *)*s, *len, &n))) *s += n, *len -= n;
    while (*len) {
        size_t st = *len - 1;
        while (st > 0 && ((unsigned char)(*s)[st] & 0xc0) == 0x80) st--;
        if (!py_space(utf8_at((const unsigned char *)*s + st, *len - st, &n))) break;
        *len = st;
    }
}

const char *rstr_find(const char *s, size_t len, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; m <= len && i <= len - m; i++)
        if (!memcmp(s + i, needle, m)) return s + i;
    return NULL;
}

const char *rstr_rfind(const char *s, size_t len, const char *needle) {
    size_t m = strlen(needle);
    if (m > len) return NULL;
    for (size_t i = len - m + 1; i-- > 0;)
        if (!memcmp(s + i, needle, m)) return s + i;
    return NULL;
}
