/*
 * image_classifier: u8 images in, top-5 classes out. The built-in demo CNN takes 32x32 RGB
 * images as raw bytes (HWC), normalizes them inside the model (on the GPU when one is used, so
 * the copy carries 1 byte per channel) and returns the 5 best class indices, so nothing but
 * those 5 numbers comes back. Producer threads write images straight into the pipeline's ring
 * (reserve/commit: no extra copy). At the end: the pipeline's report (is the device busy, and if
 * not, why) and the model's per-op time (options.profile: which layer the time goes to).
 */
#include <gpupipe/gpupipe.h>
#include <gpupipe/model.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define PRODUCERS 3
#define PER_PRODUCER 500
#define H 32
#define W 32
#define TOPK 5

typedef struct shared {
    gp_pipeline *p;
    atomic_int shown; /* print the first few results */
    atomic_ulong ok, failed;
} shared;

typedef struct tag { /* per-image user data: alive until its callback has run */
    shared *s;
    int id;
} tag;

typedef struct producer {
    shared *s;
    int id, rc;
    tag tags[PER_PRODUCER];
} producer;

/* Runs on a completion worker; `out` (5 x int64, best first) is valid only during the call. */
static void on_top5(void *user, int status, const void *out, size_t bytes) {
    const tag *t = user;
    shared *s = t->s;
    if (status != GP_OK) {
        atomic_fetch_add(&s->failed, 1);
        return;
    }
    atomic_fetch_add(&s->ok, 1);
    const int64_t *cls = out;
    if (atomic_fetch_add(&s->shown, 1) < 6)
        printf("image %4d: top-5 classes %lld %lld %lld %lld %lld\n", t->id, (long long)cls[0],
               (long long)cls[1], (long long)cls[2], (long long)cls[3], (long long)cls[4]);
}

/* A synthetic photo: a colour gradient whose slope depends on the image number. */
static void draw(uint8_t *img, int n) {
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *px = img + (y * W + x) * 3;
            px[0] = (uint8_t)(x * (n % 7 + 1));
            px[1] = (uint8_t)(y * (n % 5 + 1));
            px[2] = (uint8_t)((x + y) * (n % 3 + 1));
        }
}

static void *produce(void *arg) {
    producer *pr = arg;
    for (int i = 0; i < PER_PRODUCER; i++) {
        gp_reservation r;
        if ((pr->rc = gp_pipeline_reserve(pr->s->p, &r)) != GP_OK) break;
        int n = pr->id * PER_PRODUCER + i;
        draw(r.data, n); /* write the image in place, in the ring */
        pr->tags[i] = (tag){pr->s, n};
        if ((pr->rc = gp_pipeline_commit(pr->s->p, &r, on_top5, &pr->tags[i])) != GP_OK) break;
    }
    return NULL;
}

int main(void) {
    char err[256];
    gp_model *model;
    gp_model_options opt;
    gp_model_options_init(&opt);
    opt.profile = 1; /* time every op of every batch: gp_model_profile below */
    int rc = gp_model_demo("cnn", &opt, &model, err, sizeof err);
    if (rc != GP_OK) return fprintf(stderr, "model: %s\n", err), 1;
    gp_tensor_info in, out;
    gp_model_input_info(model, &in);
    gp_model_output_info(model, &out);
    printf("model: %s %lldx%lldx%lld in (%zu bytes), %s[%lld] out (%zu bytes)\n",
           gp_dtype_name(in.dtype), (long long)in.dims[0], (long long)in.dims[1],
           (long long)in.dims[2], in.bytes, gp_dtype_name(out.dtype), (long long)out.dims[0],
           out.bytes);

    gp_config cfg;
    gp_config_init(&cfg);
    cfg.max_batch = 64;
    gp_model_configure(model, &cfg);
    shared s = {0};
    if ((rc = gp_pipeline_create(&cfg, &s.p, err, sizeof err)) != GP_OK) {
        /* Print the code's name once: some details already begin with it. */
        int named = strncmp(err, "GP_E", 4) == 0;
        fprintf(stderr, "pipeline: %s%s%s\n", named ? "" : gp_err_name(rc), named ? "" : ": ", err);
        gp_model_free(model);
        return 1;
    }
    static producer pr[PRODUCERS]; /* outlive every callback: freed after destroy */
    pthread_t th[PRODUCERS];
    uint64_t t0 = gp_now_ns();
    for (int i = 0; i < PRODUCERS; i++) {
        pr[i].s = &s;
        pr[i].id = i;
        if (pthread_create(&th[i], NULL, produce, &pr[i]) != 0)
            return fprintf(stderr, "pthread_create failed\n"), 1;
    }
    for (int i = 0; i < PRODUCERS; i++) {
        pthread_join(th[i], NULL);
        if (pr[i].rc != GP_OK) fprintf(stderr, "producer %d: %s\n", i, gp_err_name(pr[i].rc));
    }
    gp_pipeline_drain(s.p, -1);
    double secs = (double)(gp_now_ns() - t0) * 1e-9;
    printf("%lu images classified in %.3f s (%.0f images/s), %lu failed\n\n", atomic_load(&s.ok),
           secs, (double)atomic_load(&s.ok) / secs, atomic_load(&s.failed));
    gp_pipeline_report(s.p, stdout);
    /* Per op, over every batch above. On a GPU an op's time is its CUDA stream's, shared with the
       other slots' work in flight: set cfg.inflight = 1 to see each op's own cost. */
    printf("\n");
    gp_model_profile(model, stdout);
    rc = gp_pipeline_destroy(s.p, GP_DESTROY_DRAIN);
    gp_model_free(model);
    return rc == GP_OK && atomic_load(&s.failed) == 0 ? 0 : 1;
}
