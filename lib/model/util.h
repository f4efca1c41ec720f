/* Small helpers shared by the model runtime's files: error formatting, checked arithmetic. */
#ifndef GP_LIB_MODEL_UTIL_H
#define GP_LIB_MODEL_UTIL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus /* the CUDA layers in kernels/<name>.cu include these headers */
extern "C" {
#endif

/* An error destination: the caller's buffer (may be NULL / 0). */
typedef struct gp__err {
    char *buf;
    size_t len;
} gp__err;

/* Write a printf-style message into e (truncated, NUL-terminated) and return `code`. */
int gp__errf(gp__err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* a * b into *out; 0 on overflow. */
static inline int gp__mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static inline int gp__add_ok(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return 0;
    *out = a + b;
    return 1;
}

#ifdef __cplusplus
}
#endif

#endif
