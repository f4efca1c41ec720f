/*
 * Runs against the SHARED library (the way a distributor ships it): a pipeline with backend
 * AUTO, 1000 items through it, every output checked. Prints the backend, whether AUTO fell back
 * and why. With an argument, the fallback reason must contain it ("any" accepts a run on CUDA
 * too, for machines with a GPU); with a second, "cut", the reason must have been longer than
 * gp_stats.fallback_reason and end in "...". Exit 0 on success, 1 on failure.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <gpupipe/gpupipe.h>

#define N 1000

static _Atomic int good, bad;

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

int main(int argc, char **argv) {
    const char *want = argc > 1 ? argv[1] : NULL;
    gp_config c;
    gp_config_init(&c);
    c.backend = GP_BACKEND_AUTO;
    c.item_in_bytes = c.item_out_bytes = sizeof(float);
    c.compute = twice;
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
        (rl != sizeof s.fallback_reason - 1 || strcmp(s.fallback_reason + rl - 3, "...") != 0)) {
        printf("FAIL: the reason (%zu characters) is not cut at %zu with '...'\n", rl,
               sizeof s.fallback_reason - 1);
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
