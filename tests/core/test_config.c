/*
 * Every invalid config field fails create with GP_EINVAL and the field named in the detail;
 * NULL arguments, wrong byte counts and submits after shutdown began return errors and never
 * a callback; error names and strings come from the one table.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "gpt.h"

static int noop(void *user, const gp_batch *b) {
    return GP_OK;
}

static _Atomic int callbacks;

static void count_cb(void *user, int status, const void *out, size_t bytes) {
    atomic_fetch_add(&callbacks, 1);
}

static void base(gp_config *c) {
    gpt_config(c, GP_BACKEND_HOST);
    c->item_in_bytes = 16;
    c->item_out_bytes = 8;
    c->compute = noop;
}

typedef struct bad_case {
    const char *field;
    void (*apply)(gp_config *c);
} bad_case;

#define CASE(field, body)                                                                          \
    static void set_##field(gp_config *c) {                                                        \
        body;                                                                                      \
    }
CASE(struct_size, c->struct_size = 3)
CASE(struct_size_big, c->struct_size = sizeof *c + 8)
CASE(backend, c->backend = (gp_backend)7)
CASE(num_devices, c->num_devices = GP_MAX_DEVICES + 1)
CASE(num_devices_neg, c->num_devices = -1)
CASE(devices, (c->num_devices = 2, c->devices[1] = -3))
CASE(item_in_bytes, c->item_in_bytes = 0)
CASE(item_out_bytes, c->item_out_bytes = 0)
CASE(max_batch, c->max_batch = 0)
CASE(max_batch_big, c->max_batch = (size_t)1 << 21)
CASE(inflight, c->inflight = 0)
CASE(inflight_big, c->inflight = 65)
CASE(num_preferred, c->num_preferred = GP_MAX_PREFERRED + 1)
CASE(preferred_zero, (c->num_preferred = 1, c->preferred[0] = 0))
CASE(preferred_big, (c->num_preferred = 1, c->preferred[0] = 65))
CASE(preferred_order, (c->num_preferred = 2, c->preferred[0] = 8, c->preferred[1] = 8))
CASE(capacity_pow2, c->capacity = 100)
CASE(capacity_small, c->capacity = 32)
CASE(capacity_overflow, (c->capacity = (size_t)1 << 30, c->item_in_bytes = SIZE_MAX / 4))
CASE(max_delay_us, c->max_delay_us = 61u * 1000u * 1000u)
CASE(full_policy, c->full_policy = (gp_full_policy)2)
CASE(compute, c->compute = NULL)
CASE(prep_workers, c->prep_workers = -1)
CASE(prep, (c->prep_workers = 2, c->prep = NULL))
CASE(completion_workers, c->completion_workers = 0)
CASE(completion_workers_big, c->completion_workers = 65)
CASE(cuda_graphs, c->cuda_graphs = 2)
CASE(cuda_graphs_var_in, (c->cuda_graphs = 1, c->item_in_bytes = 0, c->max_item_in_bytes = 64))
CASE(cuda_graphs_var_out, (c->cuda_graphs = 1, c->item_out_bytes = 0, c->max_item_out_bytes = 64))
CASE(spin_wait, c->spin_wait = -1)
CASE(sim_copy_bytes_per_s, c->sim_copy_bytes_per_s = -1)
CASE(sim_compute_us, c->sim_compute_us = NAN)
CASE(sim_compute_us_per_item, c->sim_compute_us_per_item = INFINITY)

static const bad_case cases[] = {
    {"struct_size", set_struct_size},
    {"struct_size", set_struct_size_big},
    {"config.backend", set_backend},
    {"config.num_devices", set_num_devices},
    {"config.num_devices", set_num_devices_neg},
    {"config.devices[1]", set_devices},
    {"config.item_in_bytes", set_item_in_bytes},
    {"config.item_out_bytes", set_item_out_bytes},
    {"config.max_batch", set_max_batch},
    {"config.max_batch", set_max_batch_big},
    {"config.inflight", set_inflight},
    {"config.inflight", set_inflight_big},
    {"config.num_preferred", set_num_preferred},
    {"config.preferred[0]", set_preferred_zero},
    {"config.preferred[0]", set_preferred_big},
    {"config.preferred[1]", set_preferred_order},
    {"config.capacity", set_capacity_pow2},
    {"config.capacity", set_capacity_small},
    {"config.capacity", set_capacity_overflow},
    {"config.max_delay_us", set_max_delay_us},
    {"config.full_policy", set_full_policy},
    {"config.compute", set_compute},
    {"config.prep_workers", set_prep_workers},
    {"config.prep", set_prep},
    {"config.completion_workers", set_completion_workers},
    {"config.completion_workers", set_completion_workers_big},
    {"config.cuda_graphs", set_cuda_graphs},
    {"config.cuda_graphs", set_cuda_graphs_var_in},
    {"config.cuda_graphs", set_cuda_graphs_var_out},
    {"config.spin_wait", set_spin_wait},
    {"config.sim_copy_bytes_per_s", set_sim_copy_bytes_per_s},
    {"config.sim_compute_us", set_sim_compute_us},
    {"config.sim_compute_us_per_item", set_sim_compute_us_per_item},
};

static void invalid_fields(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gp_config c;
        base(&c);
        cases[i].apply(&c);
        gp_pipeline *p = (gp_pipeline *)&c; /* must be reset to NULL */
        char err[256] = "";
        int rc = gp_pipeline_create(&c, &p, err, sizeof err);
        if (rc != GP_EINVAL || p != NULL || !strstr(err, cases[i].field)) {
            fprintf(stderr, "case %zu (%s): rc %s, detail '%s'\n", i, cases[i].field,
                    gp_err_name(rc), err);
            exit(1);
        }
    }
    printf("%zu invalid configs rejected with the field named\n", sizeof cases / sizeof cases[0]);
}

/* Item sizes that fit size_t times capacity but no memory: create says GP_ENOMEM, never GP_OK
   with a buffer smaller than the ring it promised (the host backend rounded SIZE_MAX - 62 up
   to a 64-byte block, a reserve then handed out SIZE_MAX - 62 bytes over it). */
static void sizes_no_memory_holds(void) {
    static const size_t below_max[] = {0, 1, 62, 63, 64, 4096};
    for (int side = 0; side < 2; side++)
        for (size_t i = 0; i < sizeof below_max / sizeof below_max[0]; i++) {
            gp_config c;
            base(&c);
            c.capacity = 1;
            c.max_batch = 1;
            if (side == 0)
                c.item_in_bytes = SIZE_MAX - below_max[i];
            else
                c.item_out_bytes = SIZE_MAX - below_max[i];
            gp_pipeline *p = (gp_pipeline *)&c;
            char err[256] = "";
            int rc = gp_pipeline_create(&c, &p, err, sizeof err);
            if (rc != GP_ENOMEM || p != NULL || !err[0]) {
                fprintf(stderr, "item_%s_bytes SIZE_MAX - %zu: rc %s, detail '%s'\n",
                        side ? "out" : "in", below_max[i], gp_err_name(rc), err);
                exit(1);
            }
        }
    printf("item sizes within 4 KiB of SIZE_MAX: GP_ENOMEM\n");
}

static void null_arguments(void) {
    gp_config c;
    base(&c);
    gp_pipeline *p;
    GPT_RC(gp_pipeline_create(NULL, &p, NULL, 0), GP_EINVAL);
    GPT_RC(gp_pipeline_create(&c, NULL, NULL, 0), GP_EINVAL);
    GPT_RC(gp_pipeline_destroy(NULL, GP_DESTROY_DRAIN), GP_OK);
    GPT_RC(gp_pipeline_submit(NULL, "x", 1, count_cb, NULL), GP_EINVAL);
    GPT_RC(gp_pipeline_flush(NULL), GP_EINVAL);
    GPT_RC(gp_pipeline_drain(NULL, 0), GP_EINVAL);

    p = gpt_create(&c);
    char in[16] = {0}, out[8];
    GPT_RC(gp_pipeline_submit(p, NULL, 16, count_cb, NULL), GP_EINVAL);
    GPT_RC(gp_pipeline_submit(p, in, 16, NULL, NULL), GP_EINVAL);
    GPT_RC(gp_pipeline_submit(p, in, 15, count_cb, NULL), GP_EINVAL);
    GPT_RC(gp_pipeline_submit(p, in, 17, count_cb, NULL), GP_EINVAL);
    GPT_RC(gp_pipeline_submit_prep(p, in, 16, 0, count_cb, NULL), GP_EINVAL); /* no prep pool */
    GPT_RC(gp_pipeline_reserve(p, NULL), GP_EINVAL);
    GPT_RC(gp_pipeline_infer(p, in, 16, out, 7), GP_EINVAL);
    GPT_RC(gp_pipeline_infer(p, in, 15, out, 8), GP_EINVAL);
    gp_reservation r;
    GPT_RC(gp_pipeline_reserve(p, &r), GP_OK);
    GPT_RC(gp_pipeline_commit(p, &r, NULL, NULL), GP_EINVAL); /* stays open */
    GPT_RC(gp_pipeline_abandon(p, &r), GP_OK);
    GPT_RC(gp_pipeline_abandon(p, &r), GP_EINVAL); /* once */
    gp_stats st = {.struct_size = 4};
    GPT_RC(gp_pipeline_stats(p, &st), GP_EINVAL);
    GPT_RC(gp_pipeline_stats(p, NULL), GP_EINVAL);
    GPT_RC(gp_pipeline_drain(p, -1), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_EQ(atomic_load(&callbacks), 0);
}

/* A callback that blocks until released, so destroy can be caught in progress. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open, gate_entered;

static void gated_cb(void *user, int status, const void *out, size_t bytes) {
    pthread_mutex_lock(&gate_mu);
    gate_entered = 1;
    pthread_cond_broadcast(&gate_cv);
    while (!gate_open)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    atomic_fetch_add(&callbacks, 1);
}

static void *shutter(void *arg) {
    GPT_RC(gp_pipeline_shutdown(arg, GP_DESTROY_DRAIN), GP_OK);
    return NULL;
}

static void submit_after_shutdown(void) {
    gp_config c;
    base(&c);
    gp_pipeline *p = gpt_create(&c);
    char in[16] = {0};
    atomic_store(&callbacks, 0);
    GPT_RC(gp_pipeline_submit(p, in, 16, gated_cb, NULL), GP_OK);
    pthread_mutex_lock(&gate_mu);
    while (!gate_entered)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);

    pthread_t th;
    GPT_EQ(pthread_create(&th, NULL, shutter, p), 0);
    /* Shutdown closes the ring first; poll until submits are refused. */
    int rc, accepted = 0;
    double t0 = gpt_now();
    while ((rc = gp_pipeline_submit(p, in, 16, count_cb, NULL)) == GP_OK) {
        GPT_CHECK(gpt_now() - t0 < 10.0);
        accepted++; /* accepted before the close: it gets a callback */
    }
    GPT_RC(rc, GP_ESHUTDOWN);
    gp_reservation r;
    GPT_RC(gp_pipeline_reserve(p, &r), GP_ESHUTDOWN);
    pthread_mutex_lock(&gate_mu);
    gate_open = 1;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
    GPT_EQ(pthread_join(th, NULL), 0);
    GPT_EQ(atomic_load(&callbacks), 1 + accepted); /* none for the refused submits */
    GPT_RC(gp_pipeline_submit(p, in, 16, count_cb, NULL), GP_ESHUTDOWN);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_EQ(atomic_load(&callbacks), 1 + accepted);
    printf("submit during shutdown: GP_ESHUTDOWN, no callback for it\n");
}

static void error_table(void) {
    GPT_CHECK(strcmp(gp_err_name(GP_EINVAL), "GP_EINVAL") == 0);
    GPT_CHECK(strcmp(gp_err_name(GP_OK), "GP_OK") == 0);
    GPT_CHECK(strcmp(gp_err_name(12345), "GP_UNKNOWN") == 0);
    GPT_CHECK(strcmp(gp_strerror(-9999), "unknown error") == 0);
    /* Pinned values. */
    GPT_EQ(GP_EINVAL, -1);
    GPT_EQ(GP_EAGAIN, -3);
    GPT_EQ(GP_ETIMEDOUT, -4);
    GPT_EQ(GP_ECANCELED, -5);
    GPT_EQ(GP_ESHUTDOWN, -6);
    GPT_EQ(GP_ECOMPUTE, -7);
    GPT_EQ(GP_EDEVICE, -8);
    GPT_EQ(GP_ENODEV, -9);
    for (int c = GP_ENOTSUP; c <= 0; c++)
        GPT_CHECK(strcmp(gp_strerror(c), "unknown error") != 0);
    GPT_CHECK(strcmp(gp_version(), GP_VERSION_STRING) == 0);
}

int main(void) {
    error_table();
    invalid_fields();
    sizes_no_memory_holds();
    null_arguments();
    submit_after_shutdown();
    return 0;
}
