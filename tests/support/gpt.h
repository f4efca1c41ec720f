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
#include <string.h>

#define GPT_SKIP 77

/* The drain timeout of the tests that also run on CUDA: a hang fails the test at the call
   (GP_ETIMEDOUT, file:line) in 2 minutes, not at ctest's TIMEOUT with nothing said. */
#define GPT_DRAIN_US (120LL * 1000 * 1000)

/* The exit code of a test that found no usable device, after it printed why: GPT_SKIP, or 1
   when GPT_REQUIRE_DEVICE is set (and not "0"). bench/gpu-run.sh sets it on the GPU machine,
   where "no usable device" is a broken setup (driver too old, a library missing, exclusive
   compute mode) that a skip would hide. Only for a missing device: a test that skips for
   another reason (needs two GPUs, no LibTorch) still exits GPT_SKIP. */
static inline int gpt_no_device(void) {
    const char *r = getenv("GPT_REQUIRE_DEVICE");
    if (r && *r && strcmp(r, "0") != 0) {
        fprintf(stderr, "GPT_REQUIRE_DEVICE is set: no usable device fails this test\n");
        return 1;
    }
    return GPT_SKIP;
}

/* splitmix64 -> [0, 1): the tests' random numbers, one stream per state word. */
static inline double gpt_uniform(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

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
   backend the compute blocks in the gate. On CUDA it enqueues a one-thread kernel that waits
   on a flag in mapped host memory (support/gate_cuda.cu): kernels of several streams wait side
   by side, where blocking host functions may be serialized by CUDA and deadlock. The kernel
   gives up after `timeout_ns` (GPT_GATE_TIMEOUT_S) and records it; the gate then fails the
   test at the next open, wait, enqueue or destroy. `entered` counts batches that reached the
   gate on the host backend; the kernels' records are counted on top.
   Lifetime: gpt_gate_init, then gpt_gate_destroy once no pipeline uses the gate any more
   (after gp_pipeline_destroy): it frees the mapped memory and checks the kernels' records.
   Not for CUDA graphs: every gate kernel launch needs its own record, a replay reuses one. */
#define GPT_GATE_TIMEOUT_S 30
#define GPT_GATE_RECORDS 1024 /* gate kernels queued or running at once, at most */
typedef struct gpt_gate_shared gpt_gate_shared;
typedef struct gpt_gate {
    pthread_mutex_t mu; /* guards every field below */
    pthread_cond_t cv;
    int open;
    int entered;
    unsigned long long timeout_ns; /* a gate kernel gives up after this */
    /* Device side, allocated at the first enqueue (no gate kernel runs yet then: a
       page-locked allocation orders the streams' later work after their earlier work). */
    gpt_gate_shared *sh; /* host view */
    void *sh_dev;        /* device view */
    uint32_t launched;   /* gate kernels enqueued */
    uint32_t folded;     /* launches [0, folded) have finished (passed or timed out) */
    int timed_out;       /* of those, how many gave up */
} gpt_gate;
void gpt_gate_init(gpt_gate *g);
void gpt_gate_destroy(gpt_gate *g);
void gpt_gate_open(gpt_gate *g);
void gpt_gate_close(gpt_gate *g);
/* Batches that reached the gate so far, on either backend. */
int gpt_gate_entered(gpt_gate *g);
/* Wait until `n` batches reached the gate (or 10 s: the test fails). */
void gpt_gate_wait_entered(gpt_gate *g, int n);
/* Count this caller as entered and wait until the gate is open (arg = gpt_gate *). Host side
   only: prep functions and callbacks wait here too. */
void gpt_gate_pass(void *arg);
/* Compute: wait on the gate (user = gpt_gate *), then gpt_transform. */
int gpt_gate_compute(void *user, const gp_batch *b);
/* Enqueue the gate's device-side wait on `stream` (what gpt_gate_compute does on CUDA).
   Returns 0, or the device's error (printed). */
int gpt_gate_enqueue(gpt_gate *g, void *stream);

/* The gate's device side: the CUDA functions below when built with CUDA, else none (enqueue
   fails). tests/gpu/test_gate.c replaces them with host threads that do what the kernel does,
   to test the bookkeeping on machines without a GPU. Each returns 0 or an error code. */
typedef struct gpt_gate_device {
    int (*alloc)(size_t bytes, void **host, void **dev); /* zeroed, host- and device-visible */
    int (*free)(void *host);
    /* One waiter: store tag|1 at *rec, wait for *open != 0 at most timeout_ns, then store
       tag|2 (opened) or tag|3 (gave up). */
    int (*launch)(void *stream, const void *open, void *rec, uint32_t tag,
                  unsigned long long timeout_ns);
    const char *(*error_name)(int err);
} gpt_gate_device;
extern gpt_gate_device gpt_gate_dev;

#ifdef GPT_HAVE_CUDA_TRANSFORM
/* support/gate_cuda.cu; each returns a cudaError_t. */
int gpt_cuda_gate_alloc(size_t bytes, void **host, void **dev);
int gpt_cuda_gate_free(void *host);
int gpt_cuda_gate_launch(void *stream, const void *open, void *rec, uint32_t tag,
                         unsigned long long timeout_ns);
const char *gpt_cuda_error_name(int err);
#endif

/* Monotonic seconds. */
double gpt_now(void);

#endif
