#include "errsink.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gp__errsink_init(gp__errsink *s, gp_log_fn log, void *log_user) {
    memset(s, 0, sizeof *s);
    s->log = log;
    s->log_user = log_user;
    return pthread_mutex_init(&s->mu, NULL) == 0 ? GP_OK : GP_ESYS;
}

void gp__errsink_fini(gp__errsink *s) {
    pthread_mutex_destroy(&s->mu);
}

int gp__err_record(gp__errsink *s, int code, const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gp__err_vrecord(s, code, file, line, fmt, ap);
    va_end(ap);
    return code;
}

int gp__err_vrecord(gp__errsink *s, int code, const char *file, int line, const char *fmt,
                    va_list ap) {
    char msg[sizeof s->msg];
    const char *base = strrchr(file, '/');
    int k = vsnprintf(msg, sizeof msg, fmt, ap);
    if (k >= 0 && (size_t)k < sizeof msg)
        snprintf(msg + k, sizeof msg - (size_t)k, " (%s:%d)", base ? base + 1 : file, line);
    if (!s) return code;
    /* The detail does not repeat the code's name: callers have the code (gpupipe.h,
       gp_pipeline_last_error). A failed lock only loses the detail; the code still reaches the
       caller. */
    int probing = 0;
    if (pthread_mutex_lock(&s->mu) == 0) {
        s->code = code;
        memcpy(s->msg, msg, sizeof msg);
        probing = s->probing;
        pthread_mutex_unlock(&s->mu);
    }
    if (s->log && !probing) { /* a log line stands alone: it names the code */
        char line_msg[sizeof s->msg + 32];
        snprintf(line_msg, sizeof line_msg, "%s: %s", gp_err_name(code), msg);
        s->log(s->log_user, GP_LOG_ERROR, line_msg);
    }
    return code;
}

void gp__err_probe(gp__errsink *s, int on, int failed) {
    if (pthread_mutex_lock(&s->mu) != 0) return; /* then a probe's failure may log: harmless */
    s->probing = on;
    if (!on && failed) {
        s->code = GP_OK;
        s->msg[0] = '\0';
    }
    pthread_mutex_unlock(&s->mu);
}

int gp__err_copy(gp__errsink *s, char *buf, size_t len) {
    int code = GP_OK;
    if (pthread_mutex_lock(&s->mu) != 0) return GP_ESYS;
    code = s->code;
    if (buf && len) {
        strncpy(buf, s->msg, len - 1);
        buf[len - 1] = '\0';
    }
    pthread_mutex_unlock(&s->mu);
    return code;
}

/* A line is whole (gpupipe.h: the fallback reason's WARN line "has it whole"): one longer than
   the stack buffer is formatted again into one of its size; without the memory for it, it ends
   in "..." rather than being cut silently. */
void gp__log(gp__errsink *s, gp_log_level level, const char *fmt, ...) {
    char msg[512], *big = NULL;
    va_list ap, again;
    if (!s || !s->log) return;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof msg && (big = malloc((size_t)n + 1)) != NULL)
        vsnprintf(big, (size_t)n + 1, fmt, again);
    else if (n >= (int)sizeof msg)
        memcpy(msg + sizeof msg - 4, "...", 4);
    va_end(again);
    s->log(s->log_user, level, big ? big : msg);
    free(big);
}
