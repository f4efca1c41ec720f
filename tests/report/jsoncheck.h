/*
 * A strict JSON validator (RFC 8259 grammar, no extensions) for the tests of the stats
 * renderings and gp-bench's --json output. jsoncheck() returns NULL when `s` is exactly one
 * JSON value (surrounding whitespace allowed), else a static message; *at gets the offset.
 */
#ifndef GPT_JSONCHECK_H
#define GPT_JSONCHECK_H

#include <stddef.h>
#include <string.h>

typedef struct jc {
    const char *s;
    size_t i, n;
    const char *err;
    int depth;
} jc;

static void jc_ws(jc *c) {
    while (c->i < c->n && strchr(" \t\r\n", c->s[c->i]) && c->s[c->i])
        c->i++;
}

static int jc_fail(jc *c, const char *msg) {
    if (!c->err) c->err = msg;
    return 0;
}

static int jc_value(jc *c);

static int jc_lit(jc *c, const char *w) {
    size_t k = strlen(w);
    if (c->n - c->i < k || memcmp(c->s + c->i, w, k) != 0) return jc_fail(c, "bad literal");
    c->i += k;
    return 1;
}

static int jc_digits(jc *c) {
    size_t st = c->i;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9')
        c->i++;
    return c->i > st;
}

static int jc_number(jc *c) {
    if (c->s[c->i] == '-') c->i++;
    if (c->i < c->n && c->s[c->i] == '0')
        c->i++;
    else if (!jc_digits(c))
        return jc_fail(c, "bad number");
    if (c->i < c->n && c->s[c->i] == '.') {
        c->i++;
        if (!jc_digits(c)) return jc_fail(c, "bad fraction");
    }
    if (c->i < c->n && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
        c->i++;
        if (c->i < c->n && (c->s[c->i] == '+' || c->s[c->i] == '-')) c->i++;
        if (!jc_digits(c)) return jc_fail(c, "bad exponent");
    }
    return 1;
}

static int jc_string(jc *c) {
    c->i++; /* opening quote */
    while (c->i < c->n) {
        unsigned char ch = (unsigned char)c->s[c->i++];
        if (ch == '"') return 1;
        if (ch < 0x20) return jc_fail(c, "control character in string");
        if (ch >= 0x80) { /* RFC 8259: UTF-8; RFC 3629's well-formed sequences */
            int len = ch < 0xC2 ? 0 : ch < 0xE0 ? 2 : ch < 0xF0 ? 3 : ch < 0xF5 ? 4 : 0;
            unsigned lo = ch == 0xE0 ? 0xA0 : ch == 0xF0 ? 0x90 : 0x80;
            unsigned hi = ch == 0xED ? 0x9F : ch == 0xF4 ? 0x8F : 0xBF;
            for (int k = 1; k < len; k++, c->i++) {
                unsigned char b = c->i < c->n ? (unsigned char)c->s[c->i] : 0;
                if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) len = 0;
            }
            if (len == 0) return jc_fail(c, "not UTF-8");
            continue;
        }
        if (ch == '\\') {
            if (c->i >= c->n) break;
            char e = c->s[c->i++];
            if (e == 'u') {
                for (int k = 0; k < 4; k++, c->i++)
                    if (c->i >= c->n || !strchr("0123456789abcdefABCDEF", c->s[c->i]) ||
                        !c->s[c->i])
                        return jc_fail(c, "bad \\u escape");
            } else if (!strchr("\"\\/bfnrt", e) || !e) {
                return jc_fail(c, "bad escape");
            }
        }
    }
    return jc_fail(c, "unterminated string");
}

static int jc_container(jc *c, char close) {
    if (++c->depth > 64) return jc_fail(c, "nesting too deep");
    c->i++;
    jc_ws(c);
    if (c->i < c->n && c->s[c->i] == close) {
        c->i++;
        c->depth--;
        return 1;
    }
    for (;;) {
        jc_ws(c);
        if (close == '}') {
            if (c->i >= c->n || c->s[c->i] != '"') return jc_fail(c, "object key must be a string");
            if (!jc_string(c)) return 0;
            jc_ws(c);
            if (c->i >= c->n || c->s[c->i] != ':') return jc_fail(c, "missing ':'");
            c->i++;
        }
        if (!jc_value(c)) return 0;
        jc_ws(c);
        if (c->i < c->n && c->s[c->i] == ',') {
            c->i++;
            continue;
        }
        if (c->i < c->n && c->s[c->i] == close) {
            c->i++;
            c->depth--;
            return 1;
        }
        return jc_fail(c, "missing ',' or closing bracket");
    }
}

static int jc_value(jc *c) {
    jc_ws(c);
    if (c->i >= c->n) return jc_fail(c, "unexpected end");
    switch (c->s[c->i]) {
    case '{':
        return jc_container(c, '}');
    case '[':
        return jc_container(c, ']');
    case '"':
        return jc_string(c);
    case 't':
        return jc_lit(c, "true");
    case 'f':
        return jc_lit(c, "false");
    case 'n':
        return jc_lit(c, "null");
    default:
        if (c->s[c->i] == '-' || (c->s[c->i] >= '0' && c->s[c->i] <= '9')) return jc_number(c);
        return jc_fail(c, "unexpected character");
    }
}

static inline const char *jsoncheck(const char *s, size_t n, size_t *at) {
    jc c = {.s = s, .n = n};
    if (jc_value(&c)) {
        jc_ws(&c);
        if (c.i != c.n) jc_fail(&c, "trailing characters");
    }
    if (at) *at = c.i;
    return c.err;
}

#endif
