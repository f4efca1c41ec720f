/*
 * mlp_classifier: the built-in demo MLP (784 features -> 10 class probabilities) as the
 * pipeline's compute, fed by several producer threads. Each callback picks the class with the
 * highest probability. Runs on the GPU when one is usable, else on the host (and says so).
 *
 * With your own weights: gp_model_load("net.safetensors", NULL, &model, err, sizeof err).
 */
#include <gpupipe/gpupipe.h>
#include <gpupipe/model.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRODUCERS 4
#define PER_PRODUCER 2000
#define FEATURES 784
#define CLASSES 10

typedef struct tally {
    atomic_ulong per_class[CLASSES];
    atomic_ulong failed;
} tally;

typedef struct producer {
    gp_pipeline *p;
    tally *t;
    unsigned seed;
    int rc;
} producer;

/* Runs on a completion worker; `out` is valid only during the call. */
static void on_result(void *user, int status, const void *out, size_t bytes) {
    tally *t = user;
    if (status != GP_OK) {
        atomic_fetch_add(&t->failed, 1);
        return;
    }
    const float *prob = out;
    int best = 0;
    for (int c = 1; c < CLASSES; c++)
        if (prob[c] > prob[best]) best = c;
    atomic_fetch_add(&t->per_class[best], 1);
}

static void *produce(void *arg) {
    producer *pr = arg;
    float x[FEATURES]; /* submit copies it into the ring: reusable at once */
    for (int i = 0; i < PER_PRODUCER; i++) {
        for (int k = 0; k < FEATURES; k++) {
            pr->seed = pr->seed * 1103515245u + 12345u;
            x[k] = (float)((pr->seed >> 16) & 0xFF) / 255.0f; /* a stand-in for pixels */
        }
        pr->rc = gp_pipeline_submit(pr->p, x, sizeof x, on_result, pr->t);
        if (pr->rc != GP_OK) break;
    }
    return NULL;
}

int main(void) {
    char err[256];
    gp_model *model;
    int rc = gp_model_demo("mlp", NULL, &model, err, sizeof err);
    if (rc != GP_OK) return fprintf(stderr, "model: %s\n", err), 1;

    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = GP_BACKEND_AUTO; /* cuda when usable, else host */
    cfg.max_batch = 128;
    gp_model_configure(model, &cfg); /* compute + item sizes */
    gp_pipeline *p;
    if ((rc = gp_pipeline_create(&cfg, &p, err, sizeof err)) != GP_OK) {
        /* Print the code's name once: some details already begin with it. */
        int named = strncmp(err, "GP_E", 4) == 0;
        fprintf(stderr, "pipeline: %s%s%s\n", named ? "" : gp_err_name(rc), named ? "" : ": ", err);
        gp_model_free(model);
        return 1;
    }

    static tally t; /* zero-initialized counters */
    producer pr[PRODUCERS];
    pthread_t th[PRODUCERS];
    uint64_t t0 = gp_now_ns();
    for (int i = 0; i < PRODUCERS; i++) {
        pr[i] = (producer){p, &t, 1234u + (unsigned)i, GP_OK};
        if (pthread_create(&th[i], NULL, produce, &pr[i]) != 0)
            return fprintf(stderr, "pthread_create failed\n"), 1;
    }
    for (int i = 0; i < PRODUCERS; i++) {
        pthread_join(th[i], NULL);
        if (pr[i].rc != GP_OK)
            fprintf(stderr, "producer %d: submit: %s\n", i, gp_err_name(pr[i].rc));
    }
    gp_pipeline_drain(p, -1); /* every accepted item has had its callback */
    double secs = (double)(gp_now_ns() - t0) * 1e-9;

    printf("%d items in %.3f s (%.0f items/s)\nclass histogram:", PRODUCERS * PER_PRODUCER, secs,
           PRODUCERS * PER_PRODUCER / secs);
    for (int c = 0; c < CLASSES; c++)
        printf(" %d:%lu", c, atomic_load(&t.per_class[c]));
    printf("\nfailed: %lu\n\n", atomic_load(&t.failed));
    gp_pipeline_report(p, stdout); /* where the time went, and what to turn */

    rc = gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
    gp_model_free(model); /* after the pipeline that uses it */
    return rc == GP_OK && atomic_load(&t.failed) == 0 ? 0 : 1;
}
