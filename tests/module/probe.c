/*
 * Runs against the SHARED library (the way a distributor ships it): a pipeline with backend
 * AUTO, 1000 items through it, every output checked. Prints the backend, whether AUTO fell back
 * and why. With an argument, the fallback reason must contain it ("any" accepts a run on CUDA
 * too, for machines with a GPU); with a second, "cut", the reason must have been longer than
 * gp_stats.fallback_reason and end in "..." there, and the WARN log line must have it whole
 * (gpupipe.h), ending in the third argument if there is one. Exit 0 on success, 1 on failure.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gpupipe/gpupipe.h>

#define N 1000

static _Atomic int good, bad;
static char *warn_line; /* the first WARN line: create logs on this thread */

static void on_log(void *user, gp_log_level level, const char *msg) {
    (void)user;
    size_t n = strlen(msg) + 1;
    if (level == GP_LOG_WARN && !warn_line && (warn_line = malloc(n)) != NULL)
        memcpy(warn_line, msg, n);
}

static int twice(void *user, const gp_batch *b) {
    if (b->backend != GP_BACKEND_HOST) return 1; /* this probe's compute is host code */
    for (size_t i = 0; i < b->n; i++)
        ((float *)b->out)[i] = 2.0f * ((const float *)b->in)[i];
    return GP_OK;
}

static void done(void *user, int status, const void *out, size_t bytes) {
    float want = 2.0f * (float)(size_t)user;
    if (status == GP_OK && bytes == sizeof(float) && *(const float *)out == want)
        atomic_fetch_add(&good, 1);
    else
        atomic_fetch_add(&bad, 1);
}

/* Well-formed UTF-8 (RFC 3629)? The stats' reason is cut, never inside a character. */
static int utf8_ok(const unsigned char *c) {
    while (*c) {
        int n = c[0] < 0x80 ? 1 : c[0] < 0xC2 ? 0 : c[0] < 0xE0 ? 2 : c[0] < 0xF0 ? 3 : 4;
        if (c[0] >= 0xF5) n = 0;
        for (int k = 1; k < n; k++)
            if ((c[k] & 0xC0) != 0x80) n = 0;
        if (n == 0) return 0;
        c += n;
    }
    return 1;
}

int main(int argc, char **argv) {
    const char *want = argc > 1 ? argv[1] : NULL;
    gp_config c;
    gp_config_init(&c);
    c.backend = GP_BACKEND_AUTO;
    c.item_in_bytes = c.item_out_bytes = sizeof(float);
    c.compute = twice;
    c.log = on_log;
    gp_pipeline *p;
    char err[512];
    int rc = gp_pipeline_create(&c, &p, err, sizeof err);
    if (rc != GP_OK) {
        printf("create failed: %s: %s\n", gp_err_name(rc), err);
        return 1;
    }
    gp_stats s;
    s.struct_size = sizeof s;
    gp_pipeline_stats(p, &s);
    printf("backend %s, fell back %d, reason: %s\n", gp_backend_name(s.backend), s.fell_back,
           s.fallback_reason);
    int ok = 1;
    if (s.backend == GP_BACKEND_CUDA) {
        /* A GPU machine: nothing was hidden from the library. Only "any" accepts that. */
        ok = want && strcmp(want, "any") == 0;
        gp_pipeline_destroy(p, GP_DESTROY_CANCEL);
        printf("%s\n", ok ? "ran on CUDA (accepted: any)" : "FAIL: expected a fallback");
        return ok ? 0 : 1;
    }
    if (!s.fell_back) ok = 0;
    /* "cut": the reason is longer than the field, so it must be cut visibly, ending in "...". */
    size_t rl = strlen(s.fallback_reason);
    if (argc > 2 && !strcmp(argv[2], "cut") &&
        (rl + 4 < sizeof s.fallback_reason || strcmp(s.fallback_reason + rl - 3, "...") != 0)) {
        /* at the field's end, or up to 3 bytes before it: a UTF-8 character is not split */
        printf("FAIL: the reason (%zu characters) is not cut at %zu with '...'\n", rl,
               sizeof s.fallback_reason - 1);
        ok = 0;
    }
    if (argc > 2 && !strcmp(argv[2], "cut")) {
        /* The WARN line: the reason whole, so longer than the field and not cut itself. */
        char head[24] = "";
        memcpy(head, s.fallback_reason, rl < sizeof head - 1 ? rl : sizeof head - 1);
        const char *w = warn_line ? strstr(warn_line, head) : NULL;
        size_t wl = w ? strlen(w) : 0;
        const char *end = argc > 3 ? argv[3] : ""; /* how the whole reason ends */
        size_t el = strlen(end);
        if (!w || wl <= rl || strncmp(w, s.fallback_reason, rl - 3) != 0 || wl < el ||
            strcmp(w + wl - el, end) != 0 || strcmp(w + wl - 3, "...") == 0) {
            printf("FAIL: the WARN line does not have the reason whole: %s\n",
                   warn_line ? warn_line : "(no WARN line)");
            ok = 0;
        } else {
            printf("the WARN line has the reason whole: %zu characters, %zu in the stats\n", wl,
                   rl);
        }
    }
    free(warn_line);
    if (!utf8_ok((const unsigned char *)s.fallback_reason)) {
        printf("FAIL: the reason is not UTF-8 (cut inside a character?)\n");
        ok = 0;
    }
    if (want && strcmp(want, "any") != 0 && !strstr(s.fallback_reason, want)) {
        printf("FAIL: the reason does not say '%s'\n", want);
        ok = 0;
    }
    for (size_t i = 0; i < N; i++) {
        float x = (float)i;
        if (gp_pipeline_submit(p, &x, sizeof x, done, (void *)i) != GP_OK) ok = 0;
    }
    if (gp_pipeline_drain(p, -1) != GP_OK) ok = 0;
    if (gp_pipeline_destroy(p, GP_DESTROY_DRAIN) != GP_OK) ok = 0;
    printf("%d items ok, %d wrong\n", atomic_load(&good), atomic_load(&bad));
    if (atomic_load(&good) != N || atomic_load(&bad) != 0) ok = 0;
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
