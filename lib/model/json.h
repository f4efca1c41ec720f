/*
 * A small strict JSON parser (RFC 8259) for safetensors headers: the whole input must be one
 * value with only whitespace around it; strings must be valid UTF-8 without raw control
 * characters; escapes are checked (surrogates paired); objects must not repeat a key; nesting
 * is bounded. The tree lives in one allocation list freed by gp__json_free.
 */
#ifndef GP_LIB_MODEL_JSON_H
#define GP_LIB_MODEL_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef enum gp__jkind {
    GP__J_NULL,
    GP__J_FALSE,
    GP__J_TRUE,
    GP__J_NUMBER,
    GP__J_STRING,
    GP__J_ARRAY,
    GP__J_OBJECT
} gp__jkind;

typedef struct gp__jval {
    gp__jkind kind;
    size_t pos; /* byte offset of the value in the text, for messages */
    /* STRING: decoded, NUL-terminated (may contain NUL: see len). NUMBER: the literal. */
    char *str;
    size_t len;
    /* ARRAY / OBJECT: n children; keys[i] (NUL-terminated, decoded) for OBJECT. */
    struct gp__jval *items;
    char **keys;
    size_t n;
} gp__jval;

typedef struct gp__json {
    gp__jval *root;
    void *blocks; /* allocation list */
} gp__json;

#define GP__JSON_MAX_DEPTH 64

/* Parse `len` bytes of `text`. On error returns GP_EMODEL with "JSON ... at byte N" in e and
   leaves nothing allocated. */
int gp__json_parse(const char *text, size_t len, gp__json *out, gp__err *e);
void gp__json_free(gp__json *j);

/* Object member by key, or NULL. */
const gp__jval *gp__json_get(const gp__jval *obj, const char *key);

/* A NUMBER that is a non-negative integer literal (no fraction, exponent or sign) fitting in
   uint64_t: 1 and *out; else 0. */
int gp__json_u64(const gp__jval *v, uint64_t *out);

#endif
