/* Strict JSON parser for safetensors headers (see json.h). Recursive descent, depth-bounded. */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupipe/gpupipe.h"

/* Every allocation of a tree is a block on one list, so an error or gp__json_free releases
   everything at once. */
typedef struct gp__jblock {
    struct gp__jblock *next;
    max_align_t data[];
} gp__jblock;

typedef struct gp__jparser {
    const char *s;
    size_t len, pos;
    gp__jblock *blocks;
    gp__err *e;
    int oom;
} gp__jparser;

static void *jalloc(gp__jparser *p, size_t n) {
    if (n > SIZE_MAX - sizeof(gp__jblock)) {
        p->oom = 1;
        return NULL;
    }
    gp__jblock *b = malloc(sizeof(gp__jblock) + (n ? n : 1));
    if (!b) {
        p->oom = 1;
        return NULL;
    }
    b->next = p->blocks;
    p->blocks = b;
    return b->data;
}

static void free_blocks(gp__jblock *b) {
    while (b) {
        gp__jblock *next = b->next;
        free(b);
        b = next;
    }
}

static int fail(gp__jparser *p, const char *what) {
    if (p->oom) return gp__errf(p->e, GP_ENOMEM, "out of memory parsing the JSON header");
    return gp__errf(p->e, GP_EMODEL, "malformed JSON header: %s at byte %zu", what, p->pos);
}

static void skip_ws(gp__jparser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(gp__jparser *p, unsigned *out) {
    if (p->len - p->pos < 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[p->pos + (size_t)i]);
        if (h < 0) return 0;
        v = v * 16u + (unsigned)h;
    }
    p->pos += 4;
    *out = v;
    return 1;
}

static size_t put_utf8(char *d, unsigned cp) {
    if (cp < 0x80) {
        d[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (char)(0xC0 | (cp >> 6));
        d[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (char)(0xE0 | (cp >> 12));
        d[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        d[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (char)(0xF0 | (cp >> 18));
    d[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    d[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    d[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid UTF-8 sequence at s[0..avail) (RFC 3629: no overlongs, no surrogates,
   at most U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *s, size_t avail) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t n;
    unsigned cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2, cp = c & 0x1Fu, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3, cp = c & 0x0Fu, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4, cp = c & 0x07u, min = 0x10000;
    } else {
        return 0;
    }
    if (avail < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

/* At the opening quote. Decodes into a new block: *out (NUL-terminated), *outlen. */
static int parse_string(gp__jparser *p, char **out, size_t *outlen) {
    p->pos++; /* the quote */
    size_t start = p->pos;
    /* First pass: find the end and validate; decoded length <= raw length. */
    while (1) {
        if (p->pos >= p->len) return fail(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') break;
        if (c < 0x20) return fail(p, "raw control character in string");
        if (c == '\\') {
            p->pos++;
            if (p->pos >= p->len) return fail(p, "unterminated escape");
            char x = p->s[p->pos];
            if (x == 'u') {
                p->pos++;
                unsigned u;
                if (!read_hex4(p, &u)) return fail(p, "bad \\u escape");
                if (u >= 0xD800 && u <= 0xDBFF) {
                    unsigned lo;
                    if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                        return fail(p, "unpaired surrogate in \\u escape");
                    p->pos += 2;
                    if (!read_hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                        return fail(p, "unpaired surrogate in \\u escape");
                } else if (u >= 0xDC00 && u <= 0xDFFF) {
                    return fail(p, "unpaired surrogate in \\u escape");
                }
                continue;
            }
            if (!strchr("\"\\/bfnrt", x) || x == '\0') return fail(p, "unknown escape in string");
            p->pos++;
            continue;
        }
        size_t n = utf8_len((const unsigned char *)p->s + p->pos, p->len - p->pos);
        if (n == 0) return fail(p, "invalid UTF-8 in string");
        p->pos += n;
    }
    size_t end = p->pos;
    char *d = jalloc(p, end - start + 1);
    if (!d) return fail(p, "out of memory");
    size_t o = 0;
    for (size_t i = start; i < end;) {
        char c = p->s[i];
        if (c != '\\') {
            d[o++] = c;
            i++;
            continue;
        }
        char x = p->s[i + 1];
        i += 2;
        switch (x) {
        case 'b':
            d[o++] = '\b';
            break;
        case 'f':
            d[o++] = '\f';
            break;
        case 'n':
            d[o++] = '\n';
            break;
        case 'r':
            d[o++] = '\r';
            break;
        case 't':
            d[o++] = '\t';
            break;
        case 'u': {
            unsigned u = 0;
            for (int k = 0; k < 4; k++)
                u = u * 16u + (unsigned)hexval(p->s[i + (size_t)k]);
            i += 4;
            if (u >= 0xD800 && u <= 0xDBFF) {
                unsigned lo = 0;
                for (int k = 0; k < 4; k++)
                    lo = lo * 16u + (unsigned)hexval(p->s[i + 2 + (size_t)k]);
                i += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            o += put_utf8(d + o, u);
            break;
        }
        default: /* " \ / */
            d[o++] = x;
            break;
        }
    }
    d[o] = '\0';
    p->pos = end + 1;
    *out = d;
    *outlen = o;
    return GP_OK;
}

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

static int parse_number(gp__jparser *p, gp__jval *v) {
    size_t start = p->pos;
    if (p->pos < p->len && p->s[p->pos] == '-') p->pos++;
    if (p->pos >= p->len || !is_digit(p->s[p->pos])) return fail(p, "bad number");
    if (p->s[p->pos] == '0') {
        p->pos++;
    } else {
        while (p->pos < p->len && is_digit(p->s[p->pos]))
            p->pos++;
    }
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos])) return fail(p, "bad number fraction");
        while (p->pos < p->len && is_digit(p->s[p->pos]))
            p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos])) return fail(p, "bad number exponent");
        while (p->pos < p->len && is_digit(p->s[p->pos]))
            p->pos++;
    }
    size_t n = p->pos - start;
    char *d = jalloc(p, n + 1);
    if (!d) return fail(p, "out of memory");
    memcpy(d, p->s + start, n);
    d[n] = '\0';
    v->kind = GP__J_NUMBER;
    v->str = d;
    v->len = n;
    return GP_OK;
}

static int parse_value(gp__jparser *p, gp__jval *v, int depth);

static int literal(gp__jparser *p, const char *word, gp__jkind kind, gp__jval *v) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, "unexpected character");
    p->pos += n;
    v->kind = kind;
    return GP_OK;
}

/* Arrays and objects collect children in a growing temporary, then move them into a block. */
static int parse_container(gp__jparser *p, gp__jval *v, int depth, int is_object) {
    char close = is_object ? '}' : ']';
    p->pos++;
    gp__jval *items = NULL;
    char **keys = NULL;
    size_t n = 0, cap = 0;
    int rc = GP_OK;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
    } else {
        for (;;) {
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 8;
                gp__jval *ni = realloc(items, ncap * sizeof *ni);
                if (!ni) {
                    p->oom = 1;
                    rc = fail(p, "out of memory");
                    goto out;
                }
                items = ni;
                if (is_object) {
                    char **nk = realloc(keys, ncap * sizeof *nk);
                    if (!nk) {
                        p->oom = 1;
                        rc = fail(p, "out of memory");
                        goto out;
                    }
                    keys = nk;
                }
                cap = ncap;
            }
            skip_ws(p);
            if (is_object) {
                if (p->pos >= p->len || p->s[p->pos] != '"') {
                    rc = fail(p, "expected a string key");
                    goto out;
                }
                size_t klen;
                size_t kpos = p->pos;
                if ((rc = parse_string(p, &keys[n], &klen)) != GP_OK) goto out;
                if (memchr(keys[n], '\0', klen)) {
                    p->pos = kpos;
                    rc = fail(p,
                              "NUL (\\u0000) in an object key, which this loader does not support "
                              "(tensor names are C strings)");
                    goto out;
                }
                for (size_t i = 0; i < n; i++) {
                    if (strcmp(keys[i], keys[n]) == 0) {
                        p->pos = kpos;
                        rc = fail(p, "duplicate key");
                        goto out;
                    }
                }
                skip_ws(p);
                if (p->pos >= p->len || p->s[p->pos] != ':') {
                    rc = fail(p, "expected ':'");
                    goto out;
                }
                p->pos++;
            }
            if ((rc = parse_value(p, &items[n], depth + 1)) != GP_OK) goto out;
            n++;
            skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->pos < p->len && p->s[p->pos] == close) {
                p->pos++;
                break;
            }
            rc = fail(p, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
            goto out;
        }
    }
    v->kind = is_object ? GP__J_OBJECT : GP__J_ARRAY;
    v->n = n;
    if (n) {
        v->items = jalloc(p, n * sizeof *items);
        if (!v->items) {
            rc = fail(p, "out of memory");
            goto out;
        }
        memcpy(v->items, items, n * sizeof *items);
        if (is_object) {
            v->keys = jalloc(p, n * sizeof *keys);
            if (!v->keys) {
                rc = fail(p, "out of memory");
                goto out;
            }
            memcpy(v->keys, keys, n * sizeof *keys);
        }
    }
out:
    free(items);
    free(keys);
    return rc;
}

static int parse_value(gp__jparser *p, gp__jval *v, int depth) {
    memset(v, 0, sizeof *v);
    if (depth > GP__JSON_MAX_DEPTH) return fail(p, "nesting too deep");
    skip_ws(p);
    v->pos = p->pos;
    if (p->pos >= p->len) return fail(p, "unexpected end");
    switch (p->s[p->pos]) {
    case '{':
        return parse_container(p, v, depth, 1);
    case '[':
        return parse_container(p, v, depth, 0);
    case '"':
        v->kind = GP__J_STRING;
        return parse_string(p, &v->str, &v->len);
    case 't':
        return literal(p, "true", GP__J_TRUE, v);
    case 'f':
        return literal(p, "false", GP__J_FALSE, v);
    case 'n':
        return literal(p, "null", GP__J_NULL, v);
    default:
        return parse_number(p, v);
    }
}

int gp__json_parse(const char *text, size_t len, gp__json *out, gp__err *e) {
    gp__jparser p = {.s = text, .len = len, .e = e};
    out->root = NULL;
    out->blocks = NULL;
    gp__jval *root = jalloc(&p, sizeof *root);
    int rc = root ? parse_value(&p, root, 0) : fail(&p, "out of memory");
    if (rc == GP_OK) {
        skip_ws(&p);
        if (p.pos != p.len) rc = fail(&p, "trailing characters after the value");
    }
    if (rc != GP_OK) {
        free_blocks(p.blocks);
        return rc;
    }
    out->root = root;
    out->blocks = p.blocks;
    return GP_OK;
}

void gp__json_free(gp__json *j) {
    if (!j) return;
    free_blocks(j->blocks);
    j->blocks = NULL;
    j->root = NULL;
}

const gp__jval *gp__json_get(const gp__jval *obj, const char *key) {
    if (!obj || obj->kind != GP__J_OBJECT) return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

int gp__json_u64(const gp__jval *v, uint64_t *out) {
    if (!v || v->kind != GP__J_NUMBER || v->len == 0) return 0;
    uint64_t x = 0;
    for (size_t i = 0; i < v->len; i++) {
        char c = v->str[i];
        if (!is_digit(c)) return 0;
        uint64_t d = (uint64_t)(c - '0');
        if (x > (UINT64_MAX - d) / 10) return 0;
        x = x * 10 + d;
    }
    *out = x;
    return 1;
}
