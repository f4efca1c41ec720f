#include "gpt.h"

#include <string.h>
#include <time.h>

gp_backend gpt_backend(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "cuda") == 0) return GP_BACKEND_CUDA;
    if (argc > 1 && strcmp(argv[1], "host") != 0) {
        fprintf(stderr, "unknown backend '%s' (host | cuda)\n", argv[1]);
        exit(2);
    }
    return GP_BACKEND_HOST;
}

void gpt_config(gp_config *cfg, gp_backend backend) {
    gp_config_init(cfg);
    cfg->backend = backend;
}

gp_pipeline *gpt_create(const gp_config *cfg) {
    gp_pipeline *p = NULL;
    char err[512];
    int rc = gp_pipeline_create(cfg, &p, err, sizeof err);
    if (rc == GP_ENODEV) {
        printf("SKIP: backend %s is not usable here: %s\n", gp_backend_name(cfg->backend), err);
        exit(GPT_SKIP);
    }
    if (rc != GP_OK) {
        int named = strncmp(err, "GP_E", 4) == 0; /* some details already begin with it */
        fprintf(stderr, "gp_pipeline_create: %s%s%s\n", named ? "" : gp_err_name(rc),
                named ? "" : ": ", err);
        exit(1);
    }
    return p;
}

int gpt_transform(void *user, const gp_batch *b) {
    size_t words = b->n * b->in_bytes / 4;
    if (b->backend == GP_BACKEND_CUDA) {
#ifdef GPT_HAVE_CUDA_TRANSFORM
        return gpt_cuda_transform(b->stream, b->in, b->out, words) == 0 ? GP_OK : GP_EDEVICE;
#else
        return GP_ENOTSUP;
#endif
    }
    const uint32_t *in = b->in;
    uint32_t *out = b->out;
    for (size_t i = 0; i < words; i++)
        out[i] = gpt_word(in[i]);
    return GP_OK;
}

double gpt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void gpt_gate_init(gpt_gate *g) {
    GPT_EQ(pthread_mutex_init(&g->mu, NULL), 0);
    GPT_EQ(pthread_cond_init(&g->cv, NULL), 0);
    g->open = 0;
    g->entered = 0;
}

void gpt_gate_open(gpt_gate *g) {
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void gpt_gate_close(gpt_gate *g) {
    pthread_mutex_lock(&g->mu);
    g->open = 0;
    pthread_mutex_unlock(&g->mu);
}

void gpt_gate_wait_entered(gpt_gate *g, int n) {
    double t0 = gpt_now();
    pthread_mutex_lock(&g->mu);
    while (g->entered < n) {
        pthread_mutex_unlock(&g->mu);
        GPT_CHECK(gpt_now() - t0 < 10.0);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

void gpt_gate_pass(void *arg) {
    gpt_gate *g = arg;
    pthread_mutex_lock(&g->mu);
    g->entered++;
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

int gpt_gate_compute(void *user, const gp_batch *b) {
    if (b->backend == GP_BACKEND_CUDA) {
#ifdef GPT_HAVE_CUDA_TRANSFORM
        if (gpt_cuda_host_func(b->stream, gpt_gate_pass, user) != 0) return GP_EDEVICE;
#else
        return GP_ENOTSUP;
#endif
    } else {
        gpt_gate_pass(user);
    }
    return gpt_transform(NULL, b);
}
