/*
 * A model as the pipeline's compute, on the backend given in argv[1]: several producer
 * threads, small batches, several slots in flight; every output is checked against the host
 * reference (gp_model_run_host): bit for bit on the host backend, within the fp32 tolerance
 * (and the same top-1 class) on CUDA. Two pipelines share one model at once.
 */
#include <gpupipe/model.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"

#define PRODUCERS 4
#define PER_PRODUCER 96
#define N (PRODUCERS * PER_PRODUCER)

typedef struct check {
    const uint8_t *ref; /* N reference outputs */
    size_t ob;
    gp_dtype dtype;
    gp_backend backend;
    atomic_int done, bad;
    atomic_int worst_ppm; /* worst relative error seen, parts per million (CUDA) */
} check;

typedef struct item {
    check *c;
    size_t index;
} item;

static void on_done(void *user, int status, const void *out, size_t bytes) {
    item *it = user;
    check *c = it->c;
    const uint8_t *ref = c->ref + it->index * c->ob;
    int ok = status == GP_OK && bytes == c->ob;
    if (ok && c->backend == GP_BACKEND_HOST) {
        ok = memcmp(out, ref, bytes) == 0;
    } else if (ok && c->dtype == GP_DTYPE_I64) {
        ok = ((const int64_t *)out)[0] == ((const int64_t *)ref)[0]; /* top-1 */
    } else if (ok) {
        const float *g = out, *r = (const float *)(const void *)ref;
        double num = 0, den = 0;
        for (size_t k = 0; k < bytes / 4; k++) {
            num = fmax(num, fabs((double)g[k] - r[k]));
            den = fmax(den, fabs((double)r[k]));
        }
        double rel = den > 0 ? num / den : num;
        ok = rel <= 1e-4;
        int ppm = (int)fmin(rel * 1e6, 1e9);
        int cur = atomic_load(&c->worst_ppm);
        while (ppm > cur && !atomic_compare_exchange_weak(&c->worst_ppm, &cur, ppm))
            ;
    }
    if (!ok) {
        if (atomic_fetch_add(&c->bad, 1) == 0)
            fprintf(stderr, "item %zu: status %s, output differs from the host reference\n",
                    it->index, gp_err_name(status));
    }
    atomic_fetch_add(&c->done, 1);
}

typedef struct producer {
    gp_pipeline *p;
    const uint8_t *in;
    size_t ib;
    item *items;
    int first;
} producer;

static void *produce(void *arg) {
    producer *pr = arg;
    for (int k = 0; k < PER_PRODUCER; k++) {
        size_t i = (size_t)pr->first + (size_t)k * PRODUCERS; /* interleaved across threads */
        GPT_RC(gp_pipeline_submit(pr->p, pr->in + i * pr->ib, pr->ib, on_done, &pr->items[i]),
               GP_OK);
    }
    return NULL;
}

static gp_pipeline *create(gp_model *m, gp_backend backend, size_t max_batch) {
    gp_config cfg;
    gpt_config(&cfg, backend);
    cfg.max_batch = max_batch;
    cfg.inflight = 3;
    GPT_RC(gp_model_configure(m, &cfg), GP_OK);
    GPT_EQ(cfg.item_in_bytes, gp_model_input_bytes(m));
    GPT_EQ(cfg.item_out_bytes, gp_model_output_bytes(m));
    gp_pipeline *p = NULL;
    char err[512];
    int rc = gp_pipeline_create(&cfg, &p, err, sizeof err);
    if (rc == GP_ENODEV || (backend == GP_BACKEND_CUDA && rc == GP_ENOTSUP)) {
        char detail[256];
        gp_model_last_error(m, detail, sizeof detail);
        printf("SKIP: backend %s is not usable for models here: %s (%s)\n",
               gp_backend_name(backend), err, detail);
        exit(gpt_no_device());
    }
    if (rc != GP_OK) {
        fprintf(stderr, "gp_pipeline_create: %s: %s\n", gp_err_name(rc), err);
        exit(1);
    }
    return p;
}

static void run_model(const char *name, gp_backend backend) {
    gp_model *m;
    char err[256];
    GPT_RC(gp_model_demo(name, NULL, &m, err, sizeof err), GP_OK);
    size_t ib = gp_model_input_bytes(m), ob = gp_model_output_bytes(m);
    gp_tensor_info oi;
    GPT_RC(gp_model_output_info(m, &oi), GP_OK);
    uint8_t *in = malloc(N * ib), *ref = malloc(N * ob);
    GPT_CHECK(in && ref);
    uint64_t s = 12345;
    for (size_t i = 0; i < N * ib; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        in[i] = (uint8_t)(s >> 56);
    }
    if (gp_model_input_info(m, &oi) == GP_OK && oi.dtype == GP_DTYPE_F32) /* sane floats */
        for (size_t i = 0; i < N * ib / 4; i++)
            ((float *)(void *)in)[i] = (float)(in[i * 4] % 200) / 100.0f - 1.0f;
    GPT_RC(gp_model_output_info(m, &oi), GP_OK);
    GPT_RC(gp_model_run_host(m, N, in, ref, err, sizeof err), GP_OK);

    /* Two pipelines on the same model at once, different batch sizes. */
    check c[2];
    item *items[2];
    gp_pipeline *p[2];
    pthread_t th[2][PRODUCERS];
    producer pr[2][PRODUCERS];
    for (int k = 0; k < 2; k++) {
        c[k] = (check){.ref = ref, .ob = ob, .dtype = oi.dtype, .backend = backend};
        items[k] = malloc(N * sizeof *items[k]);
        for (size_t i = 0; i < N; i++)
            items[k][i] = (item){&c[k], i};
        p[k] = create(m, backend, k ? 5 : 16);
    }
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < PRODUCERS; t++) {
            pr[k][t] = (producer){p[k], in, ib, items[k], t};
            GPT_EQ(pthread_create(&th[k][t], NULL, produce, &pr[k][t]), 0);
        }
    for (int k = 0; k < 2; k++) {
        for (int t = 0; t < PRODUCERS; t++)
            pthread_join(th[k][t], NULL);
        GPT_RC(gp_pipeline_drain(p[k], 60 * 1000 * 1000), GP_OK);
        gp_stats st = {.struct_size = sizeof st};
        GPT_RC(gp_pipeline_stats(p[k], &st), GP_OK);
        GPT_EQ(st.completed_ok, N);
        GPT_RC(gp_pipeline_destroy(p[k], GP_DESTROY_DRAIN), GP_OK);
        GPT_EQ(atomic_load(&c[k].done), N);
        GPT_EQ(atomic_load(&c[k].bad), 0);
        printf("ok  demo %s on %s, pipeline %d: %d items in %llu batches (mean %.1f)%s", name,
               gp_backend_name(backend), k, N, (unsigned long long)st.batches,
               (double)st.batch_items / (double)st.batches,
               backend == GP_BACKEND_HOST ? ", bitwise equal to the reference\n" : "");
        if (backend != GP_BACKEND_HOST)
            printf(", worst relative error %.2g\n", atomic_load(&c[k].worst_ppm) * 1e-6);
        free(items[k]);
    }
    free(in), free(ref);
    gp_model_free(m);
}

static void count_ok(void *user, int status, const void *out, size_t bytes) {
    (void)out, (void)bytes;
    if (status == GP_OK) atomic_fetch_add((atomic_int *)user, 1);
}

/* A thread resetting the model's counters until told to stop (run_profile). */
typedef struct resetter {
    gp_model *m;
    atomic_int stop, resets;
} resetter;

static void *keep_resetting(void *arg) {
    resetter *r = arg;
    while (!atomic_load(&r->stop)) {
        GPT_RC(gp_model_profile_reset(r->m), GP_OK);
        atomic_fetch_add(&r->resets, 1);
    }
    return NULL;
}

/* The report (gp_model_profile) as a string; the caller frees it. */
static char *profile_text(const gp_model *m, int want) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    GPT_CHECK(f);
    GPT_RC(gp_model_profile(m, f), want);
    GPT_EQ(fclose(f), 0);
    return text;
}

/* options.profile (model.h): per-op counters of the batches two pipelines sharing the model
   ran, their report, reset; the API's refusals. */
static void run_profile(gp_backend backend) {
    gp_model_options o;
    gp_model_options_init(&o);
    GPT_EQ(o.profile, 0);
    gp_model *m = NULL;
    char err[256];
    o.profile = 2;
    GPT_RC(gp_model_demo("cnn", &o, &m, err, sizeof err), GP_EINVAL);
    GPT_CHECK(strstr(err, "options.profile 2") != NULL);
    GPT_CHECK(m == NULL);

    /* Without the option: nothing is counted and the API says so. */
    GPT_RC(gp_model_demo("cnn", NULL, &m, err, sizeof err), GP_OK);
    int ops = gp_model_op_count(m);
    GPT_CHECK(ops >= 5);
    uint64_t ns = 1, nb = 1, ni = 1;
    GPT_RC(gp_model_op_time(m, 0, &ns, &nb, &ni), GP_ENOTSUP);
    GPT_EQ(ns + nb + ni, 0);
    GPT_RC(gp_model_profile_reset(m), GP_ENOTSUP);
    free(profile_text(m, GP_ENOTSUP));
    gp_model_free(m);

    o.profile = 1;
    GPT_RC(gp_model_demo("cnn", &o, &m, err, sizeof err), GP_OK);
    GPT_EQ(gp_model_op_count(m), ops);
    GPT_EQ(gp_model_op_count(NULL), 0);
    GPT_RC(gp_model_op_time(NULL, 0, NULL, NULL, NULL), GP_EINVAL);
    GPT_RC(gp_model_op_time(m, -1, NULL, NULL, NULL), GP_EINVAL);
    GPT_RC(gp_model_op_time(m, ops, NULL, NULL, NULL), GP_EINVAL);
    GPT_RC(gp_model_op_time(m, ops - 1, NULL, NULL, NULL), GP_OK);
    GPT_RC(gp_model_profile(NULL, stdout), GP_EINVAL);
    GPT_RC(gp_model_profile(m, NULL), GP_EINVAL);
    GPT_RC(gp_model_profile_reset(NULL), GP_EINVAL);
    /* Not a pipeline batch: never timed. */
    size_t ib = gp_model_input_bytes(m), ob = gp_model_output_bytes(m);
    uint8_t *in = calloc(N, ib), *out = malloc(N * ob);
    GPT_CHECK(in && out);
    for (size_t i = 0; i < N * ib; i++)
        in[i] = (uint8_t)(i * 7 + i / 3);
    GPT_RC(gp_model_run_host(m, 4, in, out, err, sizeof err), GP_OK);
    GPT_RC(gp_model_op_time(m, 0, &ns, &nb, &ni), GP_OK);
    GPT_EQ(ns + nb + ni, 0);

    gp_pipeline *p[2] = {create(m, backend, 16), create(m, backend, 5)};
    atomic_int ok = 0;
    uint64_t batches = 0;
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < N; i++)
            GPT_RC(gp_pipeline_submit(p[k], in + i * ib, ib, count_ok, &ok), GP_OK);
        GPT_RC(gp_pipeline_drain(p[k], 60 * 1000 * 1000), GP_OK);
        gp_stats st = {.struct_size = sizeof st};
        GPT_RC(gp_pipeline_stats(p[k], &st), GP_OK);
        GPT_EQ(st.completed_ok, N);
        GPT_EQ(st.graph_replays, 0);
        batches += st.batches;
    }
    /* Every batch was counted before its callbacks: drained means counted. Each op of each
       batch once, with its items. */
    for (int i = 0; i < ops; i++) {
        GPT_RC(gp_model_op_time(m, i, &ns, &nb, &ni), GP_OK);
        GPT_EQ(nb, batches);
        GPT_EQ(ni, 2 * (uint64_t)N);
        GPT_CHECK(ns > 0); /* every op ran, in every batch */
    }
    char *text = profile_text(m, GP_OK);
    char head[128];
    snprintf(head, sizeof head, "per-op time: %llu batches timed (%d items, ",
             (unsigned long long)batches, 2 * N);
    GPT_CHECK(strncmp(text, head, strlen(head)) == 0);
    GPT_CHECK(strstr(text, ", 0 not timed") != NULL);
    GPT_CHECK(strstr(text, "layer1.0.conv2") != NULL);
    GPT_CHECK(strstr(text, "sum") != NULL);
    int rows = 0; /* one per op, each ending in its share */
    for (const char *q = text; (q = strchr(q, '%')) != NULL; q++)
        rows++;
    GPT_EQ(rows, ops + 1);
    free(text);

    GPT_RC(gp_model_profile_reset(m), GP_OK);
    for (int i = 0; i < ops; i++) {
        GPT_RC(gp_model_op_time(m, i, &ns, &nb, &ni), GP_OK);
        GPT_EQ(ns + nb + ni, 0);
    }
    text = profile_text(m, GP_OK);
    GPT_CHECK(strstr(text, "per-op time: 0 batches timed (0 items") != NULL);
    { /* the sum row is there before a batch is timed, its times "-" (model.h) */
        const char *sum = strstr(text, "\n     sum ");
        GPT_CHECK(sum != NULL);
        const char *eol = sum ? strchr(sum + 1, '\n') : NULL;
        GPT_CHECK(eol != NULL && eol[-1] == '-' && !memchr(sum, '%', (size_t)(eol - sum)));
    }
    free(text);
    /* Counting goes on after a reset. */
    GPT_RC(gp_pipeline_submit(p[0], in, ib, count_ok, &ok), GP_OK);
    GPT_RC(gp_pipeline_drain(p[0], 60 * 1000 * 1000), GP_OK);
    GPT_RC(gp_model_op_time(m, ops - 1, NULL, &nb, &ni), GP_OK);
    GPT_EQ(nb, 1);
    GPT_EQ(ni, 1);
    /* Resets while batches finish: a batch is added to every op at once, so after the drain
       every op holds the same batches and items (whichever batches came after the last
       reset). */
    resetter rs = {.m = m};
    pthread_t rt;
    GPT_EQ(pthread_create(&rt, NULL, keep_resetting, &rs), 0);
    for (size_t i = 0; i < 4 * N; i++)
        GPT_RC(gp_pipeline_submit(p[i % 2], in + i % N * ib, ib, count_ok, &ok), GP_OK);
    while (atomic_load(&ok) < 2 * N + 1 + 2 * N) /* stop halfway */
        ;
    atomic_store(&rs.stop, 1);
    GPT_EQ(pthread_join(rt, NULL), 0);
    for (int k = 0; k < 2; k++)
        GPT_RC(gp_pipeline_drain(p[k], 60 * 1000 * 1000), GP_OK);
    uint64_t nb0 = 0, ni0 = 0;
    GPT_RC(gp_model_op_time(m, 0, NULL, &nb0, &ni0), GP_OK);
    GPT_CHECK(nb0 > 0 && ni0 >= nb0 && ni0 <= 4 * N);
    for (int i = 1; i < ops; i++) {
        GPT_RC(gp_model_op_time(m, i, NULL, &nb, &ni), GP_OK);
        GPT_EQ(nb, nb0);
        GPT_EQ(ni, ni0);
    }
    for (int k = 0; k < 2; k++)
        GPT_RC(gp_pipeline_destroy(p[k], GP_DESTROY_DRAIN), GP_OK);
    GPT_EQ(atomic_load(&ok), 6 * N + 1);
    GPT_CHECK(atomic_load(&rs.resets) > 0);
    printf("ok  profile on %s: %llu batches of two pipelines, every op counted once each\n",
           gp_backend_name(backend), (unsigned long long)batches);
    free(in), free(out);
    gp_model_free(m);
}

int main(int argc, char **argv) {
    gp_backend backend = gpt_backend(argc, argv);
    GPT_RC(gp_model_configure(NULL, NULL), GP_EINVAL);
    run_model("mlp", backend);
    run_model("cnn", backend);
    run_profile(backend);
    return 0;
}
