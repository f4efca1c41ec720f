/*
 * stats_window: measure a pipeline over a window after its warm-up and ask the doctor about
 * that window as data. A producer thread keeps the pipeline busy; a simulated 2 ms compute per
 * batch makes it compute-bound. Host backend, public API only.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <gpupipe/gpupipe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static atomic_int stop;

static int noop(void *user, const gp_batch *b) { /* the cost is simulated: sim_compute_us */
    return GP_OK;
}

static void done(void *user, int status, const void *out, size_t bytes) {}

static void *producer(void *arg) {
    float item[4] = {1, 2, 3, 4};
    while (!atomic_load(&stop))
        if (gp_pipeline_submit(arg, item, sizeof item, done, NULL) != GP_OK) break;
    return NULL;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(void) {
    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = GP_BACKEND_HOST;
    cfg.item_in_bytes = cfg.item_out_bytes = 4 * sizeof(float);
    cfg.max_batch = 32;
    cfg.compute = noop;
    cfg.sim_compute_us = 2000;
    gp_pipeline *p;
    char err[256];
    if (gp_pipeline_create(&cfg, &p, err, sizeof err) != GP_OK) {
        fprintf(stderr, "create: %s\n", err);
        return 1;
    }
    pthread_t th;
    if (pthread_create(&th, NULL, producer, p) != 0) return 1;

    sleep_ms(100); /* warm-up: not measured */
    gp_stats_mark *mark;
    int rc = gp_pipeline_mark(p, &mark);
    sleep_ms(400);
    gp_stats w = {.struct_size = sizeof w};
    if (rc == GP_OK) rc = gp_pipeline_stats_since(p, mark, &w); /* the last 400 ms only */
    gp_stats_mark_free(mark);
    gp_diagnosis d = {.struct_size = sizeof d};
    if (rc == GP_OK) rc = gp_stats_diagnose(&w, &d);
    if (rc == GP_OK) {
        /* d.why proves d.bottleneck (d.verdict differs only when AUTO fell back to the host) */
        printf("%.0f items/s over %.2f s, verdict %s, bottleneck %s: %s\n", d.items_per_s, d.wall_s,
               gp_verdict_name(d.verdict), gp_verdict_name(d.bottleneck), d.why);
        rc = gp_stats_report(&w, stdout); /* GP_EIO if stdout failed */
    }

    atomic_store(&stop, 1);
    gp_pipeline_shutdown(p, GP_DESTROY_DRAIN); /* the producer's submit returns GP_ESHUTDOWN */
    pthread_join(th, NULL);
    gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
    if (rc != GP_OK) fprintf(stderr, "stats_window: %s\n", gp_strerror(rc));
    return rc == GP_OK && d.verdict == GP_VERDICT_COMPUTE ? 0 : 1;
}
