#include "gpt.h"

#include <stddef.h>
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
        exit(gpt_no_device());
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

/* Mapped host memory shared with the gate kernels (support/gate_cuda.cu). `open`: written by
   the host under the gate's mutex, read by the kernels. rec[i % GPT_GATE_RECORDS]: written by
   the kernel of launch i, read by the host: REC_TAG(i) | code, code 1 entered, 2 passed, 3 gave
   up. Any other value (zero, or an earlier launch's final record) means launch i has not
   started. A record is reused only once its previous launch has finished (folded). */
struct gpt_gate_shared {
    volatile uint32_t open;
    uint32_t pad_[31]; /* the host's flag and the kernels' records on separate 128-byte lines */
    volatile uint32_t rec[GPT_GATE_RECORDS];
};
#define REC_TAG(i) (((uint32_t)(i)&0x3fffffffu) << 2)

#ifdef GPT_HAVE_CUDA_TRANSFORM
gpt_gate_device gpt_gate_dev = {gpt_cuda_gate_alloc, gpt_cuda_gate_free, gpt_cuda_gate_launch,
                                gpt_cuda_error_name};
#else
gpt_gate_device gpt_gate_dev;
#endif

void gpt_gate_init(gpt_gate *g) {
    memset(g, 0, sizeof *g);
    g->timeout_ns = (unsigned long long)GPT_GATE_TIMEOUT_S * 1000000000ull;
    GPT_EQ(pthread_mutex_init(&g->mu, NULL), 0);
    GPT_EQ(pthread_cond_init(&g->cv, NULL), 0);
}

/* Launch i's state from its record (0: not started). g->mu held. */
static uint32_t rec_code(const gpt_gate *g, uint32_t i) {
    uint32_t v = __atomic_load_n(&g->sh->rec[i % GPT_GATE_RECORDS], __ATOMIC_ACQUIRE);
    return (v & ~3u) == REC_TAG(i) ? (v & 3u) : 0;
}

/* Advance `folded` over finished launches; fail the test if a gate kernel gave up (the test
   kept the gate closed for GPT_GATE_TIMEOUT_S: what it checks next would be meaningless).
   g->mu held. */
static void gate_fold(gpt_gate *g) {
    if (!g->sh) return;
    while (g->folded != g->launched) {
        uint32_t c = rec_code(g, g->folded);
        if (c < 2) break;
        g->timed_out += c == 3;
        g->folded++;
    }
    int late = 0; /* gave up, behind one still running */
    for (uint32_t i = g->folded; i != g->launched; i++)
        late += rec_code(g, i) == 3;
    if (g->timed_out + late > 0) {
        fprintf(stderr, "gate: %d gate kernel(s) gave up after %.3f s with the gate closed\n",
                g->timed_out + late, (double)g->timeout_ns * 1e-9);
        exit(1);
    }
}

/* Batches that reached the gate on either backend. g->mu held. */
static int gate_entered(gpt_gate *g) {
    int n = g->entered;
    if (g->sh) {
        gate_fold(g);
        n += (int)g->folded;
        for (uint32_t i = g->folded; i != g->launched; i++)
            n += rec_code(g, i) != 0;
    }
    return n;
}

void gpt_gate_destroy(gpt_gate *g) {
    pthread_mutex_lock(&g->mu);
    if (g->sh) {
        gate_fold(g);
        if (g->folded != g->launched) {
            fprintf(stderr,
                    "gate: destroyed with %u gate kernel(s) unfinished (destroy the "
                    "pipeline first)\n",
                    g->launched - g->folded);
            exit(1);
        }
        GPT_EQ(gpt_gate_dev.free(g->sh), 0);
        g->sh = NULL;
        g->sh_dev = NULL;
    }
    pthread_mutex_unlock(&g->mu);
    GPT_EQ(pthread_cond_destroy(&g->cv), 0);
    GPT_EQ(pthread_mutex_destroy(&g->mu), 0);
}

void gpt_gate_open(gpt_gate *g) {
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    if (g->sh) {
        gate_fold(g);
        /* Full barrier, then the store the kernels poll (volatile loads): whatever the test
           wrote before opening is visible to the device before the flag is. */
        __sync_synchronize();
        __atomic_store_n(&g->sh->open, 1u, __ATOMIC_RELEASE);
    }
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void gpt_gate_close(gpt_gate *g) {
    pthread_mutex_lock(&g->mu);
    g->open = 0;
    if (g->sh) {
        __atomic_store_n(&g->sh->open, 0u, __ATOMIC_RELAXED);
        __sync_synchronize(); /* closed before the test submits the batches meant to wait */
    }
    pthread_mutex_unlock(&g->mu);
}

int gpt_gate_entered(gpt_gate *g) {
    pthread_mutex_lock(&g->mu);
    int n = gate_entered(g);
    pthread_mutex_unlock(&g->mu);
    return n;
}

void gpt_gate_wait_entered(gpt_gate *g, int n) {
    double t0 = gpt_now();
    pthread_mutex_lock(&g->mu);
    while (gate_entered(g) < n) {
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

int gpt_gate_enqueue(gpt_gate *g, void *stream) {
    if (!gpt_gate_dev.launch) {
        fprintf(stderr, "gate: no device side in this build\n");
        return -1;
    }
    int rc = 0;
    pthread_mutex_lock(&g->mu);
    if (!g->sh) {
        void *h = NULL, *d = NULL;
        rc = gpt_gate_dev.alloc(sizeof(gpt_gate_shared), &h, &d);
        if (rc != 0) {
            fprintf(stderr, "gate: mapped host memory: %s\n", gpt_gate_dev.error_name(rc));
            goto out;
        }
        g->sh = h;
        g->sh_dev = d;
        __atomic_store_n(&g->sh->open, (uint32_t)g->open, __ATOMIC_RELAXED);
        __sync_synchronize();
    }
    gate_fold(g);
    if (g->launched - g->folded >= GPT_GATE_RECORDS) {
        fprintf(stderr, "gate: %d gate kernels unfinished: raise GPT_GATE_RECORDS\n",
                GPT_GATE_RECORDS);
        rc = -1;
        goto out;
    }
    uint32_t i = g->launched;
    char *d = g->sh_dev;
    rc = gpt_gate_dev.launch(stream, d + offsetof(gpt_gate_shared, open),
                             d + offsetof(gpt_gate_shared, rec) + (i % GPT_GATE_RECORDS) * 4,
                             REC_TAG(i), g->timeout_ns);
    if (rc == 0)
        g->launched++;
    else
        fprintf(stderr, "gate: kernel launch: %s\n", gpt_gate_dev.error_name(rc));
out:
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int gpt_gate_compute(void *user, const gp_batch *b) {
    if (b->backend == GP_BACKEND_CUDA) {
#ifdef GPT_HAVE_CUDA_TRANSFORM
        if (gpt_gate_enqueue(user, b->stream) != 0) return GP_EDEVICE;
#else
        return GP_ENOTSUP;
#endif
    } else {
        gpt_gate_pass(user);
    }
    return gpt_transform(NULL, b);
}
