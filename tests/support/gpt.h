/*
 * gpt: the tests' support. Checks that fail print file:line and exit 1; a test that cannot
 * run here (no usable device) prints why and exits GPT_SKIP (ctest's SKIP_RETURN_CODE).
 */
#ifndef GPT_H
#define GPT_H

#include <gpupipe/gpupipe.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define GPT_SKIP 77

#define GPT_CHECK(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define GPT_EQ(a, b)                                                                               \
    do {                                                                                           \
        long long gpt_a_ = (long long)(a), gpt_b_ = (long long)(b);                                \
        if (gpt_a_ != gpt_b_) {                                                                    \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b,  \
                    gpt_a_, gpt_b_);                                                               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* An error code compare that prints names. */
#define GPT_RC(expr, want)                                                                         \
    do {                                                                                           \
        int gpt_rc_ = (expr);                                                                      \
        if (gpt_rc_ != (want)) {                                                                   \
            fprintf(stderr, "%s:%d: %s returned %s, want %s\n", __FILE__, __LINE__, #expr,         \
                    gp_err_name(gpt_rc_), gp_err_name(want));                                      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Backend from argv[1] ("host" | "cuda"); default host. */
gp_backend gpt_backend(int argc, char **argv);

/* gp_config_init + backend. */
void gpt_config(gp_config *cfg, gp_backend backend);

/* gp_pipeline_create, or skip the whole test (exit 77, reason printed) when the backend
   cannot run here; any other failure fails the test. */
gp_pipeline *gpt_create(const gp_config *cfg);

/* The known per-item transform: every 32-bit word w of an item becomes gpt_word(w). Item
   sizes must be multiples of 4 and in == out size. Runs as a host loop on the host backend
   and as a CUDA kernel on the CUDA backend. user: unused. */
static inline uint32_t gpt_word(uint32_t w) {
    return w * 2654435761u + 12345u;
}
int gpt_transform(void *user, const gp_batch *b);

#ifdef GPT_HAVE_CUDA_TRANSFORM
/* support/transform_cuda.cu: enqueue the transform on `stream`; returns a cudaError_t. */
int gpt_cuda_transform(void *stream, const uint32_t *in, uint32_t *out, size_t words);
#endif

/* A gate a compute can wait on, to hold slots busy for as long as a test needs. On the host
   backend the compute blocks in the gate; on CUDA it enqueues a host function that blocks the
   slot's stream. `entered` counts batches that reached the gate. */
typedef struct gpt_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
    int entered;
} gpt_gate;
void gpt_gate_init(gpt_gate *g);
void gpt_gate_open(gpt_gate *g);
void gpt_gate_close(gpt_gate *g);
/* Wait until `n` batches reached the gate (or 10 s: the test fails). */
void gpt_gate_wait_entered(gpt_gate *g, int n);
/* Count this caller as entered and wait until the gate is open (arg = gpt_gate *). */
void gpt_gate_pass(void *arg);
/* Compute: wait on the gate (user = gpt_gate *), then gpt_transform. */
int gpt_gate_compute(void *user, const gp_batch *b);

#ifdef GPT_HAVE_CUDA_TRANSFORM
/* support/gate_cuda.cu: cudaLaunchHostFunc(stream, fn, arg); returns a cudaError_t. */
int gpt_cuda_host_func(void *stream, void (*fn)(void *), void *arg);
#endif

/* Monotonic seconds. */
double gpt_now(void);

#endif
