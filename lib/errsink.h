/*
 * Error sink: where the detail of the last failure is kept (per pipeline, never global) and
 * forwarded to the optional log callback. Any thread may record; readers copy out.
 */
#ifndef GP_LIB_ERRSINK_H
#define GP_LIB_ERRSINK_H

#include <pthread.h>
#include <stdarg.h>

#include "gpupipe/gpupipe.h"

#ifdef __cplusplus /* the CUDA layers in kernels/<name>.cu include these headers */
extern "C" {
#endif

typedef struct gp__errsink {
    pthread_mutex_t mu; /* guards code, msg and probing */
    int code;
    char msg[512];
    int probing;   /* AUTO trying a backend that may fail: record without logging */
    gp_log_fn log; /* written once at init, read-only after */
    void *log_user;
} gp__errsink;

int gp__errsink_init(gp__errsink *s, gp_log_fn log, void *log_user);
void gp__errsink_fini(gp__errsink *s);

/* Record `code` with a printf-style detail prefixed by file:line; returns `code` so callers
   can write `return GP__ERR(sink, GP_EINVAL, "...")`. */
int gp__err_record(gp__errsink *s, int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#define GP__ERR(sink, code, ...) gp__err_record((sink), (code), __FILE__, __LINE__, __VA_ARGS__)
/* The same with a va_list (a caller's own variadic wrapper passes its file:line on). */
int gp__err_vrecord(gp__errsink *s, int code, const char *file, int line, const char *fmt,
                    va_list ap) __attribute__((format(printf, 5, 0)));

/* 1 when `code` is one of gpupipe.h's GP_E* codes (not GP_OK): a user's callback may return
   one, and anything else maps to the caller's generic code. */
int gp__is_err(int code);

/* AUTO's probe of a backend (pipeline.c, open_backend): while on, failures are recorded but
   not logged; turning it off after a failure clears the record (the failure becomes the
   fallback reason, never the pipeline's last error). */
void gp__err_probe(gp__errsink *s, int on, int failed);

/* Copy the last detail into buf; returns its code. */
int gp__err_copy(gp__errsink *s, char *buf, size_t len);

/* Log at INFO/WARN without recording an error. */
void gp__log(gp__errsink *s, gp_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif
