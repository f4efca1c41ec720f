/*
 * gpsim: a CUDA Runtime double for machines without a GPU (docs/DESIGN.md §11, "The simulated
 * device"). Preloaded (LD_PRELOAD) into a test built with CUDA, it answers the CUDA Runtime,
 * cuBLAS, cuBLASLt and cuDNN calls that the CUDA backend (lib/cuda/backend.c), the model
 * runtime's CUDA layers (lib/cuda/) and the tests' own CUDA support make, so their
 * orchestration runs in CI: streams, events, copies, stream capture and CUDA graphs, faults,
 * the layers' plans and launches. It is not a GPU and proves nothing about one: the
 * kernels are host emulations (of the tests' and the pipeline's kernels here, of the model
 * runtime's in kernels_sim.c), and cuBLASLt and cuDNN's convolutions are simulated from their
 * documented semantics (libs_sim.c).
 *
 * What it checks that a real device would only show as corruption or a hang:
 *  - every copy, memset and emulated kernel access lies inside one live allocation of the
 *    right kind (device, or mapped pinned host memory for kernels); outside one, the call
 *    fails (cudaErrorInvalidValue) or, for a kernel, the context is lost as on a GPU
 *    (cudaErrorIllegalAddress, sticky);
 *  - a kernel is launched into a stream of the current device, an event is recorded on a
 *    stream of its own device (cudaErrorInvalidResourceHandle otherwise, as CUDA does);
 *  - stream capture: unsafe calls under capture (synchronize, malloc, event query/sync) fail
 *    with cudaErrorStreamCaptureUnsupported and invalidate the capture, by the capture mode
 *    rules (global / thread-local / relaxed).
 *
 * Model: each stream is a host thread running its operations in order; an event is a
 * sequence number (recorded / completed) with a completion time; "device memory" is host
 * memory from malloc, tracked in a table. Exclusive kernels (dynamic shared memory, the
 * tests' spin kernel filling every SM) take turns, first ready first run, so they serialise as
 * on a GPU (one turn order for all simulated devices: no test runs them on two).
 * Environment: GPSIM_DEVICES (default 1) devices; CUDA_VISIBLE_DEVICES=-1 (or empty) hides
 * them all.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "sim.h"

#define SIM_MAX_DEV 8
#define SIM_MEM_TOTAL ((size_t)80 << 30)

/* What the simulated device reports of itself (an H100-like sm_90 part): one place, read by
   cudaDeviceGetAttribute and cudaGetDeviceProperties. */
enum {
    SIM_CC_MAJOR = 9,
    SIM_CC_MINOR = 0,
    SIM_SMS = 132,
    SIM_SMEM_OPTIN = 232448,
    SIM_MAX_THREADS = 1024,
    SIM_WARP = 32
};

/* ---- state ------------------------------------------------------------------------------ */

typedef struct sim_alloc {
    uintptr_t base;
    size_t bytes;
    int kind; /* MEM_DEVICE, MEM_PINNED, MEM_MAPPED (pinned and mapped for kernels) */
    int dev;
    struct sim_alloc *next;
} sim_alloc;

typedef struct CUstream_st sim_stream;

struct CUevent_st {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int dev;
    unsigned flags;
    uint64_t recorded;  /* records enqueued */
    uint64_t completed; /* records that ran */
    uint64_t done_ns;   /* time of the last completed record */
};

struct CUstream_st {
    int dev;
    unsigned flags;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sim_op *head, *tail;
    uint64_t enq, done;
    int quit;
    /* capture: guarded by mu; cap_thread/cap_mode fixed while capturing */
    int capturing; /* 0 none, 1 active, 2 invalidated */
    enum cudaStreamCaptureMode cap_mode;
    pthread_t cap_thread;
    sim_op *cap_head, *cap_tail;
};

struct sim_graph {
    sim_op *ops;
};
struct CUgraph_st {
    struct sim_graph g;
};
struct CUgraphExec_st {
    struct sim_graph g;
};

static struct {
    pthread_mutex_t mu; /* allocations, kernels, default streams, capture counters */
    sim_alloc *allocs;
    size_t used[SIM_MAX_DEV];
    sim_kernel kernels[512]; /* every kernel the program registers */
    int nkernels;
    sim_stream *legacy[SIM_MAX_DEV];
    sim_stream *streams[1024]; /* live streams (NULL: a free entry), for device-wide calls */
    int nstreams;
    int global_captures; /* captures in global mode, any thread */
    /* Exclusive kernels (those with dynamic shared memory: the tests' spin kernel fills every
       SM) run one at a time, in the order they become ready (excl_begin). */
    pthread_mutex_t excl_mu;
    pthread_cond_t excl_cv;
    uint64_t excl_next, excl_serving;
    int ndev; /* -1: not read yet */
} S = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .excl_mu = PTHREAD_MUTEX_INITIALIZER,
       .excl_cv = PTHREAD_COND_INITIALIZER,
       .ndev = -1};

static _Atomic int sticky; /* first context-losing error */

static __thread int t_dev;
static __thread cudaError_t t_last;
static __thread enum cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;
static __thread int t_captures; /* captures this thread began and has not ended */
static __thread struct {
    dim3 grid, block;
    size_t shmem;
    cudaStream_t st;
    int set;
} t_cfg[4];
static __thread int t_ncfg;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int ndev(void) {
    pthread_mutex_lock(&S.mu);
    if (S.ndev < 0) {
        const char *v = getenv("CUDA_VISIBLE_DEVICES"), *n = getenv("GPSIM_DEVICES");
        int k = n && *n ? atoi(n) : 1;
        if (k < 0) k = 0;
        if (k > SIM_MAX_DEV) k = SIM_MAX_DEV;
        if (v && (*v == '\0' || *v == '-')) k = 0;
        S.ndev = k;
    }
    int k = S.ndev;
    pthread_mutex_unlock(&S.mu);
    return k;
}

/* Every call's result: kept as the thread's last error when it is one. */
static cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) t_last = e;
    return e;
}

cudaError_t lost(void) {
    return (cudaError_t)atomic_load(&sticky);
}

static void lose(cudaError_t e) {
    int expected = 0;
    atomic_compare_exchange_strong(&sticky, &expected, (int)e);
}

/* ---- the resource ledger and fault injection (sim.h) ---------------------------------------- */

static _Atomic long fault_at;          /* the armed call's number since gpsim_fault_arm; 0: none */
static _Atomic long fault_seen;        /* create calls since gpsim_fault_arm */
static const char *_Atomic fault_call; /* the call that failed, NULL until one did */
static _Atomic long live[RES_N];

int sim_fault(const char *call) {
    long k = atomic_fetch_add(&fault_seen, 1) + 1;
    if (k != atomic_load(&fault_at)) return 0;
    atomic_store(&fault_call, call);
    return 1;
}

void sim_res(int kind, int delta) {
    atomic_fetch_add(&live[kind], delta);
}

/* Arm: the n-th create call from now fails (n >= 1); n = 0 disarms. Either way the count of
   create calls and the failed call's name start again. */
SIM_API void gpsim_fault_arm(long n) {
    atomic_store(&fault_at, 0);
    atomic_store(&fault_call, NULL);
    atomic_store(&fault_seen, 0);
    atomic_store(&fault_at, n > 0 ? n : 0);
}

/* The create call that failed since the last arm (its CUDA / library name), or NULL; with
   `seen`, the number of create calls made since then. */
SIM_API const char *gpsim_fault_fired(long *seen) {
    if (seen) *seen = atomic_load(&fault_seen);
    return atomic_load(&fault_call);
}

/* What the program holds: the sum over the ledger, each nonzero entry written into buf as
   "name=count" (space separated). */
SIM_API long gpsim_live(char *buf, size_t cap) {
    static const char *names[RES_N] = {"device_mem", "pinned_mem",  "streams",   "events",
                                       "graphs",     "graph_execs", "cublas",    "cublaslt",
                                       "lt_descs",   "cudnn",       "dnn_descs", "dnn_backend"};
    long total = 0;
    size_t at = 0;
    if (buf && cap) buf[0] = '\0';
    for (int k = 0; k < RES_N; k++) {
        long v = atomic_load(&live[k]);
        total += v;
        if (v && buf && at < cap) {
            int w = snprintf(buf + at, cap - at, "%s%s=%ld", at ? " " : "", names[k], v);
            if (w > 0) at += (size_t)w;
        }
    }
    return total;
}

#define ENTER()                                                                                    \
    do {                                                                                           \
        if (lost()) return ret(lost());                                                            \
    } while (0)

/* ---- memory table ------------------------------------------------------------------------- */

static int track(void *p, size_t bytes, int kind, int dev) {
    sim_alloc *a = malloc(sizeof *a);
    if (!a) return 0;
    a->base = (uintptr_t)p;
    a->bytes = bytes;
    a->kind = kind;
    a->dev = dev;
    pthread_mutex_lock(&S.mu);
    a->next = S.allocs;
    S.allocs = a;
    if (kind == MEM_DEVICE) S.used[dev] += bytes;
    pthread_mutex_unlock(&S.mu);
    return 1;
}

/* Remove the allocation starting at p of one of the kinds in mask (bits 1 << kind). */
static int untrack(void *p, int mask) {
    int found = 0;
    pthread_mutex_lock(&S.mu);
    for (sim_alloc **pp = &S.allocs; *pp; pp = &(*pp)->next) {
        sim_alloc *a = *pp;
        if (a->base == (uintptr_t)p && (mask & (1 << a->kind))) {
            *pp = a->next;
            if (a->kind == MEM_DEVICE) S.used[a->dev] -= a->bytes;
            free(a);
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&S.mu);
    return found;
}

/* The kind of the allocation holding [p, p + bytes), 0 when none holds all of it. */
int kind_of(const void *p, size_t bytes) {
    uintptr_t x = (uintptr_t)p;
    int kind = 0;
    pthread_mutex_lock(&S.mu);
    for (sim_alloc *a = S.allocs; a; a = a->next)
        if (x >= a->base && x - a->base <= a->bytes && bytes <= a->bytes - (x - a->base)) {
            kind = a->kind;
            break;
        }
    pthread_mutex_unlock(&S.mu);
    return kind;
}

/* A range a kernel may touch: device memory or mapped host memory. */
int dev_ok(const void *p, size_t bytes) {
    int k = kind_of(p, bytes);
    return k == MEM_DEVICE || k == MEM_MAPPED;
}

/* ---- capture rules ------------------------------------------------------------------------ */

/* An unsafe call (synchronize, query, malloc) from this thread under capture: CUDA fails it
   and invalidates the capture(s) it would break. */
static int unsafe_now(void) {
    if (t_mode == cudaStreamCaptureModeRelaxed) return 0;
    if (t_captures > 0) return 1;
    pthread_mutex_lock(&S.mu);
    int g = S.global_captures;
    pthread_mutex_unlock(&S.mu);
    return t_mode == cudaStreamCaptureModeGlobal && g > 0;
}

static void invalidate_captures(void) {
    pthread_mutex_lock(&S.mu);
    for (int i = 0; i < S.nstreams; i++) {
        sim_stream *s = S.streams[i];
        if (!s) continue;
        pthread_mutex_lock(&s->mu);
        if (s->capturing == 1 && (s->cap_mode == cudaStreamCaptureModeGlobal ||
                                  pthread_equal(s->cap_thread, pthread_self())))
            s->capturing = 2;
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&S.mu);
}

#define UNSAFE_CHECK()                                                                             \
    do {                                                                                           \
        if (unsafe_now()) {                                                                        \
            invalidate_captures();                                                                 \
            return ret(cudaErrorStreamCaptureUnsupported);                                         \
        }                                                                                          \
    } while (0)

/* ---- streams ------------------------------------------------------------------------------ */

static void free_ops(sim_op *o) {
    while (o) {
        sim_op *n = o->next;
        free(o);
        o = n;
    }
}

static void event_complete(cudaEvent_t e, uint64_t seq) {
    pthread_mutex_lock(&e->mu);
    if (seq > e->completed) {
        e->completed = seq;
        e->done_ns = now_ns();
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void run_op(const sim_op *o);

static void run_graph(const struct sim_graph *g) {
    for (const sim_op *o = g->ops; o; o = o->next)
        run_op(o);
}

/* An exclusive kernel that is ready to run (at the head of its stream) takes the next turn and
   waits for it: ready kernels start first come, first served, as a GPU's work distributor
   starts them; a kernel still behind other work in its stream holds no turn, so no wait
   across streams can deadlock on the order. */
static void excl_begin(void) {
    pthread_mutex_lock(&S.excl_mu);
    uint64_t ticket = ++S.excl_next;
    while (S.excl_serving + 1 != ticket)
        pthread_cond_wait(&S.excl_cv, &S.excl_mu);
    pthread_mutex_unlock(&S.excl_mu);
}

static void excl_end(void) {
    pthread_mutex_lock(&S.excl_mu);
    S.excl_serving++;
    pthread_cond_broadcast(&S.excl_cv);
    pthread_mutex_unlock(&S.excl_mu);
}

static void run_op(const sim_op *o) {
    if (lost() && o->kind != OP_RECORD) return; /* a lost context runs nothing more */
    switch (o->kind) {
    case OP_COPY:
        memmove(o->dst, o->src, o->bytes);
        break;
    case OP_SET:
        memset(o->dst, o->value, o->bytes);
        break;
    case OP_KERNEL: {
        int excl = o->shmem > 0;
        if (excl) excl_begin();
        int e = o->k->emu(o);
        if (excl) excl_end();
        if (e) lose((cudaError_t)e);
        break;
    }
    case OP_RECORD:
        event_complete(o->ev, o->seq);
        break;
    case OP_WAIT:
        pthread_mutex_lock(&o->ev->mu);
        while (o->ev->completed < o->seq && !lost())
            pthread_cond_wait(&o->ev->cv, &o->ev->mu);
        pthread_mutex_unlock(&o->ev->mu);
        break;
    case OP_HOSTFN:
        o->fn(o->user);
        break;
    case OP_GRAPH:
        run_graph(o->graph);
        break;
    }
}

static void *stream_main(void *arg) {
    sim_stream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->quit)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head) break;
        sim_op *o = s->head;
        pthread_mutex_unlock(&s->mu);
        run_op(o);
        pthread_mutex_lock(&s->mu);
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        s->done++;
        if (o->kind == OP_GRAPH) { /* the exec owns the graph's ops */
            o->graph = NULL;
        }
        free(o);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static sim_stream *stream_new(int dev, unsigned flags) {
    sim_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->dev = dev;
    s->flags = flags;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return NULL;
    }
    pthread_mutex_lock(&S.mu);
    int slot = -1;
    for (int i = 0; i < S.nstreams; i++)
        if (!S.streams[i]) slot = i;
    if (slot < 0 && S.nstreams < 1024) slot = S.nstreams++;
    if (slot >= 0) S.streams[slot] = s;
    pthread_mutex_unlock(&S.mu);
    return s;
}

static sim_stream *resolve(cudaStream_t st) {
    if (st && st != cudaStreamLegacy && st != cudaStreamPerThread) return st;
    int d = t_dev;
    pthread_mutex_lock(&S.mu);
    sim_stream *s = S.legacy[d];
    pthread_mutex_unlock(&S.mu);
    if (s) return s;
    s = stream_new(d, 0);
    pthread_mutex_lock(&S.mu);
    if (!S.legacy[d]) {
        S.legacy[d] = s;
    } else { /* another thread won: keep its stream (this one idles until exit) */
        sim_stream *w = S.legacy[d];
        pthread_mutex_unlock(&S.mu);
        return w;
    }
    pthread_mutex_unlock(&S.mu);
    return s;
}

/* Enqueue (or, under capture, record into the capture) a copy of *tmpl. */
cudaError_t enqueue(cudaStream_t st, const sim_op *tmpl) {
    sim_stream *s = resolve(st);
    if (!s) return ret(cudaErrorMemoryAllocation);
    sim_op *o = malloc(sizeof *o);
    if (!o) return ret(cudaErrorMemoryAllocation);
    *o = *tmpl;
    o->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->capturing) {
        if (s->capturing == 2) {
            pthread_mutex_unlock(&s->mu);
            free(o);
            return ret(cudaErrorStreamCaptureInvalidated);
        }
        if (o->kind == OP_RECORD || o->kind == OP_WAIT) { /* not simulated under capture */
            s->capturing = 2;
            pthread_mutex_unlock(&s->mu);
            free(o);
            return ret(cudaErrorStreamCaptureUnsupported);
        }
        if (s->cap_tail)
            s->cap_tail->next = o;
        else
            s->cap_head = o;
        s->cap_tail = o;
        pthread_mutex_unlock(&s->mu);
        return cudaSuccess;
    }
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    s->enq++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return cudaSuccess;
}

static void stream_drain(sim_stream *s) {
    pthread_mutex_lock(&s->mu);
    while (s->done < s->enq)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* ---- kernels (host emulations, chosen by the kernel's name at registration) ---------------- */

static int emu_transform(const sim_op *o) { /* (const uint32_t *in, uint32_t *out, size_t words) */
    const uint32_t *in;
    uint32_t *out;
    size_t words;
    memcpy(&in, o->args, 8);
    memcpy(&out, o->args + 8, 8);
    memcpy(&words, o->args + 16, 8);
    if (!dev_ok(in, words * 4) || !dev_ok(out, words * 4)) return cudaErrorIllegalAddress;
    for (size_t i = 0; i < words; i++)
        out[i] = in[i] * 2654435761u + 12345u;
    return 0;
}

/* (const volatile uint32_t *open, volatile uint32_t *rec, uint32_t tag, u64 timeout_ns) */
static int emu_gate(const sim_op *o) {
    uint32_t *open, *rec, tag;
    unsigned long long timeout;
    memcpy(&open, o->args, 8);
    memcpy(&rec, o->args + 8, 8);
    memcpy(&tag, o->args + 16, 4);
    memcpy(&timeout, o->args + 24, 8);
    if (!dev_ok(open, 4) || !dev_ok(rec, 4)) return cudaErrorIllegalAddress;
    __atomic_store_n(rec, tag | 1u, __ATOMIC_SEQ_CST);
    uint32_t code = 2;
    uint64_t t0 = now_ns();
    while (__atomic_load_n(open, __ATOMIC_SEQ_CST) == 0) {
        if (now_ns() - t0 >= timeout) {
            code = 3;
            break;
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    __atomic_store_n(rec, tag | code, __ATOMIC_SEQ_CST);
    return 0;
}

/* %globaltimer: nanoseconds of the wall clock, as the driver sets it. */
static uint64_t global_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void spin_for(uint64_t ns) {
    uint64_t t0 = now_ns();
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    while (now_ns() - t0 < ns) {
    }
}

/* cuda-bench's spin kernel (bench/bench-spin.cu): (u64 ns, bench_spin_stamp *stamp, u64 gen_hi,
   u64 base): stamps its start and end into *stamp with atomicMax, relative to base. */
static int emu_bench_spin(const sim_op *o) {
    unsigned long long ns, gen_hi, base, *stamp;
    const unsigned long long tmask = (1ull << 40) - 1;
    memcpy(&ns, o->args, 8);
    memcpy(&stamp, o->args + 8, 8);
    memcpy(&gen_hi, o->args + 16, 8);
    memcpy(&base, o->args + 24, 8);
    if (stamp && !dev_ok(stamp, 16)) return cudaErrorIllegalAddress;
    uint64_t t0 = global_ns();
    unsigned long long rel0 = t0 <= base ? 0 : t0 - base < tmask ? t0 - base : tmask;
    if (stamp) {
        unsigned long long key = gen_hi | (tmask - rel0),
                           cur = __atomic_load_n(&stamp[0], __ATOMIC_RELAXED);
        while (cur < key && !__atomic_compare_exchange_n(&stamp[0], &cur, key, 0, __ATOMIC_SEQ_CST,
                                                         __ATOMIC_RELAXED)) {
        }
    }
    spin_for(ns);
    if (stamp) {
        uint64_t t1 = global_ns();
        unsigned long long rel1 = t1 <= base ? 0 : t1 - base < tmask ? t1 - base : tmask;
        unsigned long long key = gen_hi | rel1, cur = __atomic_load_n(&stamp[1], __ATOMIC_RELAXED);
        while (cur < key && !__atomic_compare_exchange_n(&stamp[1], &cur, key, 0, __ATOMIC_SEQ_CST,
                                                         __ATOMIC_RELAXED)) {
        }
    }
    return 0;
}

/* (volatile u64 *dst): *dst = %globaltimer */
static int emu_timer(const sim_op *o) {
    unsigned long long *dst;
    memcpy(&dst, o->args, 8);
    if (!dev_ok(dst, 8)) return cudaErrorIllegalAddress;
    __atomic_store_n(dst, (unsigned long long)global_ns(), __ATOMIC_SEQ_CST);
    return 0;
}

static int emu_trap(const sim_op *o) {
    (void)o;
    return cudaErrorLaunchFailure;
}

static int emu_noop(const sim_op *o) {
    (void)o;
    return 0;
}

static int emu_spin(const sim_op *o) { /* (unsigned long long ns) */
    unsigned long long ns;
    memcpy(&ns, o->args, 8);
    spin_for(ns);
    return 0;
}

/* (const uint8_t *in, const uint64_t *in_off, uint8_t *out, const uint64_t *out_off); grid.x n */
static int emu_var(const sim_op *o) {
    const uint8_t *in;
    const uint64_t *in_off, *out_off;
    uint8_t *out;
    memcpy(&in, o->args, 8);
    memcpy(&in_off, o->args + 8, 8);
    memcpy(&out, o->args + 16, 8);
    memcpy(&out_off, o->args + 24, 8);
    size_t n = o->grid.x;
    if (!dev_ok(in_off, (n + 1) * 8) || !dev_ok(out_off, (n + 1) * 8))
        return cudaErrorIllegalAddress;
    for (size_t k = 0; k < n; k++) {
        uint64_t i0 = in_off[k], in_len = in_off[k + 1] - i0;
        uint64_t o0 = out_off[k], out_len = out_off[k + 1] - o0;
        if (out_len && (!in_len || !dev_ok(in + i0, in_len) || !dev_ok(out + o0, out_len)))
            return cudaErrorIllegalAddress;
        for (uint64_t j = 0; j < out_len; j++)
            out[o0 + j] = (uint8_t)(in[i0 + j % in_len] + j * 7u + in_len);
    }
    return 0;
}

/* (const uint8_t *in, const uint64_t *off, uint8_t *dst, size_t row, size_t elem, uint8_t *mask) */
static int emu_pad(const sim_op *o) {
    const uint8_t *in;
    const uint64_t *off;
    uint8_t *dst, *mask;
    size_t row, elem, n = o->grid.x;
    memcpy(&in, o->args, 8);
    memcpy(&off, o->args + 8, 8);
    memcpy(&dst, o->args + 16, 8);
    memcpy(&row, o->args + 24, 8);
    memcpy(&elem, o->args + 32, 8);
    memcpy(&mask, o->args + 40, 8);
    if (!dev_ok(off, (n + 1) * 8) || !dev_ok(dst, n * row) ||
        (mask && !dev_ok(mask, n * (row / elem))))
        return cudaErrorIllegalAddress;
    for (size_t k = 0; k < n; k++) {
        uint64_t start = off[k], len = off[k + 1] - start;
        if (len && !dev_ok(in + start, len < row ? len : row)) return cudaErrorIllegalAddress;
        for (size_t j = 0; j < row; j++) {
            dst[k * row + j] = j < len ? in[start + j] : 0;
            if (mask && j % elem == 0) mask[k * (row / elem) + j / elem] = j < len;
        }
    }
    return 0;
}

/* (const uint8_t *src, size_t row, uint8_t *out, const uint64_t *off) */
static int emu_unpad(const sim_op *o) {
    const uint8_t *src;
    const uint64_t *off;
    uint8_t *out;
    size_t row, n = o->grid.x;
    memcpy(&src, o->args, 8);
    memcpy(&row, o->args + 8, 8);
    memcpy(&out, o->args + 16, 8);
    memcpy(&off, o->args + 24, 8);
    if (!dev_ok(off, (n + 1) * 8) || !dev_ok(src, n * row)) return cudaErrorIllegalAddress;
    for (size_t k = 0; k < n; k++) {
        uint64_t start = off[k], len = off[k + 1] - start;
        if (len > row || (len && !dev_ok(out + start, len))) return cudaErrorIllegalAddress;
        memcpy(out + start, src + k * row, len);
    }
    return 0;
}

static const sim_emu EMUS[] = {
    {"16transform_kernel", emu_transform, "ppz"},
    {"11gate_kernel", emu_gate, "ppiz"},
    {"11trap_kernel", emu_trap, ""},
    {"11noop_kernel", emu_noop, ""},
    {"11spin_kernelEyP", emu_bench_spin, "zppp"}, /* before the tests' spin_kernel(u64) */
    {"11spin_kernel", emu_spin, "z"},
    {"12timer_kernel", emu_timer, "p"},
    {"10var_kernel", emu_var, "pppz"},
    {"10pad_kernel", emu_pad, "pppzzp"},
    {"12unpad_kernel", emu_unpad, "pzpp"},
};

/* The emulation of the kernel registered as `name`: the tests' and the pipeline's kernels
   above, then the model runtime's (kernels_sim.c); NULL for a kernel not emulated. */
static const sim_emu *emu_of(const char *name) {
    for (size_t i = 0; name && i < sizeof EMUS / sizeof EMUS[0]; i++)
        if (strstr(name, EMUS[i].id)) return &EMUS[i];
    for (size_t i = 0; name && i < sim_model_nemus; i++)
        if (strstr(name, sim_model_emus[i].id)) return &sim_model_emus[i];
    return NULL;
}

/* Pack the arguments as the kernel's parameters are laid out (each at its alignment). */
static int pack_args(const sim_emu *e, void **args, unsigned char *out) {
    size_t off = 0;
    for (int i = 0; e->args[i]; i++) {
        char c = e->args[i];
        size_t b = c == 'p' || c == 'z' ? 8 : c == 'i' ? 4 : c == 'G' ? 48 : c == 'C' ? 64 : 0;
        size_t al = b == 8 ? 8 : 4;
        if (!b) return 0;
        off = (off + al - 1) / al * al;
        if (off + b > SIM_MAX_ARGS) return 0;
        memcpy(out + off, args[i], b);
        off += b;
    }
    return 1;
}

/* ---- the runtime API ---------------------------------------------------------------------- */

/* What nvcc's generated host code calls (crt/host_runtime.h, C++ only): registration of
   each kernel with its device name, and the launch through a kernel handle (CUDA 13). */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **h);
void __cudaUnregisterFatBinary(void **h);
void __cudaRegisterVar(void **h, char *hostVar, char *deviceAddress, const char *deviceName,
                       int ext, size_t size, int constant, int global);
void __cudaRegisterManagedVar(void **h, void **hostVarPtrAddress, char *deviceAddress,
                              const char *deviceName, int ext, size_t size, int constant,
                              int global);
char __cudaInitModule(void **h);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim,
                            int *wSize);
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, struct CUstream_st *st);
cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *out, const void *stub);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                               size_t shmem, cudaStream_t st);

SIM_API void **__cudaRegisterFatBinary(void *fatCubin) {
    return (void **)fatCubin;
}
SIM_API void __cudaRegisterFatBinaryEnd(void **h) {
    (void)h;
}
SIM_API void __cudaUnregisterFatBinary(void **h) {
    (void)h;
}
SIM_API void __cudaRegisterVar(void **h, char *hostVar, char *deviceAddress, const char *deviceName,
                               int ext, size_t size, int constant, int global) {
    (void)h, (void)hostVar, (void)deviceAddress, (void)deviceName, (void)ext, (void)size,
        (void)constant, (void)global;
}
SIM_API void __cudaRegisterManagedVar(void **h, void **hostVarPtrAddress, char *deviceAddress,
                                      const char *deviceName, int ext, size_t size, int constant,
                                      int global) {
    (void)h, (void)hostVarPtrAddress, (void)deviceAddress, (void)deviceName, (void)ext, (void)size,
        (void)constant, (void)global;
}
SIM_API char __cudaInitModule(void **h) {
    (void)h;
    return 1;
}
SIM_API void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun,
                                    const char *deviceName, int thread_limit, uint3 *tid,
                                    uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize) {
    (void)h, (void)deviceFun, (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim,
        (void)wSize;
    pthread_mutex_lock(&S.mu);
    if (S.nkernels < (int)(sizeof S.kernels / sizeof S.kernels[0])) {
        sim_kernel *k = &S.kernels[S.nkernels++];
        const sim_emu *e = emu_of(deviceName);
        k->stub = hostFun;
        k->name = deviceName;
        k->emu = e ? e->emu : NULL;
    }
    pthread_mutex_unlock(&S.mu);
}

SIM_API unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem,
                                             struct CUstream_st *st) {
    if (t_ncfg < 4) {
        t_cfg[t_ncfg].grid = grid;
        t_cfg[t_ncfg].block = block;
        t_cfg[t_ncfg].shmem = shmem;
        t_cfg[t_ncfg].st = st;
        t_ncfg++;
    }
    return 0;
}

SIM_API cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem,
                                               void *stream) {
    if (t_ncfg == 0) return cudaErrorMissingConfiguration;
    t_ncfg--;
    *grid = t_cfg[t_ncfg].grid;
    *block = t_cfg[t_ncfg].block;
    *shmem = t_cfg[t_ncfg].shmem;
    *(cudaStream_t *)stream = t_cfg[t_ncfg].st;
    return cudaSuccess;
}

static const sim_kernel *kernel_of(const void *stub) {
    const sim_kernel *k = NULL;
    pthread_mutex_lock(&S.mu);
    for (int i = 0; i < S.nkernels; i++)
        if (S.kernels[i].stub == stub || (const void *)&S.kernels[i] == stub) k = &S.kernels[i];
    pthread_mutex_unlock(&S.mu);
    return k;
}

SIM_API cudaError_t __cudaGetKernel(cudaKernel_t *out, const void *stub) {
    const sim_kernel *k = kernel_of(stub);
    *out = (cudaKernel_t)(uintptr_t)k;
    return k ? cudaSuccess : cudaErrorInvalidDeviceFunction;
}

static cudaError_t launch(const sim_kernel *k, dim3 grid, dim3 block, void **args, size_t shmem,
                          cudaStream_t st) {
    ENTER();
    if (!k) return ret(cudaErrorInvalidDeviceFunction);
    if (!k->emu) return ret(cudaErrorNotSupported); /* no host emulation of this kernel */
    if (block.x * block.y * block.z > SIM_MAX_THREADS || block.x == 0 || grid.x == 0 ||
        grid.y > 65535 || grid.z > 65535)
        return ret(cudaErrorInvalidConfiguration);
    sim_stream *s = resolve(st);
    if (s->dev != t_dev) return ret(cudaErrorInvalidResourceHandle);
    sim_op o = {.kind = OP_KERNEL, .k = k, .grid = grid, .block = block, .shmem = shmem};
    if (!pack_args(emu_of(k->name), args, o.args)) return ret(cudaErrorInvalidValue);
    return ret(enqueue(st, &o));
}

SIM_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                                       size_t shmem, cudaStream_t st) {
    return launch((const sim_kernel *)(uintptr_t)kernel, grid, block, args, shmem, st);
}

SIM_API cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                                     size_t shmem, cudaStream_t st) {
    return launch(kernel_of(func), grid, block, args, shmem, st);
}

/* The device code a kernel runs is the device's own architecture's (the build's sm_90). */
SIM_API cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *fa, const void *func) {
    ENTER();
    if (!kernel_of(func)) return ret(cudaErrorInvalidDeviceFunction);
    memset(fa, 0, sizeof *fa);
    fa->maxThreadsPerBlock = SIM_MAX_THREADS;
    fa->ptxVersion = fa->binaryVersion = SIM_CC_MAJOR * 10 + SIM_CC_MINOR;
    return cudaSuccess;
}
SIM_API cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    (void)attr, (void)value;
    ENTER();
    return kernel_of(func) ? cudaSuccess : ret(cudaErrorInvalidDeviceFunction);
}

/* errors */
SIM_API cudaError_t cudaGetLastError(void) {
    cudaError_t e = lost() ? lost() : t_last;
    t_last = cudaSuccess;
    return e;
}
SIM_API cudaError_t cudaPeekAtLastError(void) {
    return lost() ? lost() : t_last;
}
SIM_API const char *cudaGetErrorName(cudaError_t e) {
    static const char *(*real)(cudaError_t);
    if (!real) real = (const char *(*)(cudaError_t))dlsym(RTLD_NEXT, "cudaGetErrorName");
    return real ? real(e) : "cudaError (gpsim)";
}
SIM_API const char *cudaGetErrorString(cudaError_t e) {
    static const char *(*real)(cudaError_t);
    if (!real) real = (const char *(*)(cudaError_t))dlsym(RTLD_NEXT, "cudaGetErrorString");
    return real ? real(e) : "CUDA error (gpsim)";
}

/* devices */
SIM_API cudaError_t cudaDriverGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}
SIM_API cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}
SIM_API cudaError_t cudaGetDeviceCount(int *n) {
    *n = ndev();
    return *n ? cudaSuccess : ret(cudaErrorNoDevice);
}
SIM_API cudaError_t cudaSetDevice(int d) {
    ENTER();
    if (d < 0 || d >= ndev()) return ret(cudaErrorInvalidDevice);
    t_dev = d;
    return cudaSuccess;
}
SIM_API cudaError_t cudaGetDevice(int *d) {
    ENTER();
    if (!ndev()) return ret(cudaErrorNoDevice);
    *d = t_dev;
    return cudaSuccess;
}
SIM_API cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
    ENTER();
    if (d < 0 || d >= ndev()) return ret(cudaErrorInvalidDevice);
    switch (a) {
    case cudaDevAttrComputeMode:
        *v = cudaComputeModeDefault;
        break;
    case cudaDevAttrComputeCapabilityMajor:
        *v = SIM_CC_MAJOR;
        break;
    case cudaDevAttrComputeCapabilityMinor:
        *v = SIM_CC_MINOR;
        break;
    case cudaDevAttrMultiProcessorCount:
        *v = SIM_SMS;
        break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
        *v = SIM_SMEM_OPTIN;
        break;
    case cudaDevAttrMaxThreadsPerBlock:
        *v = SIM_MAX_THREADS;
        break;
    case cudaDevAttrWarpSize:
        *v = SIM_WARP;
        break;
    default:
        return ret(cudaErrorNotSupported); /* not simulated: say so, never guess */
    }
    return cudaSuccess;
}
SIM_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    ENTER();
    if (d < 0 || d >= ndev()) return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "gpsim %d: simulated device, not a GPU", d);
    p->totalGlobalMem = SIM_MEM_TOTAL;
    p->major = SIM_CC_MAJOR;
    p->minor = SIM_CC_MINOR;
    p->multiProcessorCount = SIM_SMS;
    p->maxThreadsPerBlock = SIM_MAX_THREADS;
    p->warpSize = SIM_WARP;
    p->sharedMemPerBlockOptin = SIM_SMEM_OPTIN;
    p->asyncEngineCount = 2;
    p->canMapHostMemory = 1;
    p->unifiedAddressing = 1;
    return cudaSuccess;
}
SIM_API cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    ENTER();
    pthread_mutex_lock(&S.mu);
    *total = SIM_MEM_TOTAL;
    *free_b = SIM_MEM_TOTAL - S.used[t_dev];
    pthread_mutex_unlock(&S.mu);
    return cudaSuccess;
}
SIM_API cudaError_t cudaDeviceSynchronize(void) {
    ENTER();
    UNSAFE_CHECK();
    pthread_mutex_lock(&S.mu);
    int n = S.nstreams;
    pthread_mutex_unlock(&S.mu);
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&S.mu);
        sim_stream *s = S.streams[i];
        pthread_mutex_unlock(&S.mu);
        if (s && s->dev == t_dev) stream_drain(s);
    }
    return ret(lost());
}
SIM_API cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
    enum cudaStreamCaptureMode old = t_mode;
    t_mode = *mode;
    *mode = old;
    return cudaSuccess;
}

/* memory */
SIM_API cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = NULL;
    ENTER();
    UNSAFE_CHECK();
    if (!ndev()) return ret(cudaErrorNoDevice);
    if (sim_fault("cudaMalloc")) return ret(cudaErrorMemoryAllocation);
    void *m = malloc(bytes ? bytes : 1);
    if (!m || !track(m, bytes, MEM_DEVICE, t_dev)) {
        free(m);
        return ret(cudaErrorMemoryAllocation);
    }
    memset(m, 0xa5, bytes); /* device memory is not zeroed: neither is this */
    sim_res(RES_DEV_MEM, 1);
    *p = m;
    return cudaSuccess;
}
SIM_API cudaError_t cudaFree(void *p) {
    ENTER();
    if (!p) return cudaSuccess;
    UNSAFE_CHECK();
    if (!untrack(p, 1 << MEM_DEVICE)) return ret(cudaErrorInvalidValue);
    free(p);
    sim_res(RES_DEV_MEM, -1);
    return cudaSuccess;
}
static cudaError_t host_alloc(void **p, size_t bytes, unsigned flags, const char *call) {
    *p = NULL;
    ENTER();
    UNSAFE_CHECK();
    if (sim_fault(call)) return ret(cudaErrorMemoryAllocation);
    void *m = malloc(bytes ? bytes : 1);
    if (!m || !track(m, bytes, (flags & cudaHostAllocMapped) ? MEM_MAPPED : MEM_PINNED, t_dev)) {
        free(m);
        return ret(cudaErrorMemoryAllocation);
    }
    sim_res(RES_HOST_MEM, 1);
    *p = m;
    return cudaSuccess;
}
SIM_API cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags) {
    return host_alloc(p, bytes, flags, "cudaHostAlloc");
}
SIM_API cudaError_t cudaMallocHost(void **p, size_t bytes) {
    return host_alloc(p, bytes, cudaHostAllocDefault, "cudaMallocHost");
}
SIM_API cudaError_t cudaFreeHost(void *p) {
    ENTER();
    if (!p) return cudaSuccess;
    UNSAFE_CHECK();
    if (!untrack(p, (1 << MEM_PINNED) | (1 << MEM_MAPPED))) return ret(cudaErrorInvalidValue);
    free(p);
    sim_res(RES_HOST_MEM, -1);
    return cudaSuccess;
}
SIM_API cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned flags) {
    *d = NULL;
    ENTER();
    if (flags != 0 || kind_of(h, 1) != MEM_MAPPED) return ret(cudaErrorInvalidValue);
    *d = h;
    return cudaSuccess;
}

/* Both ranges of a copy of `kind`: each in an allocation of the kind it must be (host ranges
   may be pageable: not checked). */
static int copy_ok(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    int dk = kind_of(dst, bytes), sk = kind_of(src, bytes);
    switch (kind) {
    case cudaMemcpyHostToDevice:
        return dk == MEM_DEVICE;
    case cudaMemcpyDeviceToHost:
        return sk == MEM_DEVICE;
    case cudaMemcpyDeviceToDevice:
        return dk == MEM_DEVICE && sk == MEM_DEVICE;
    case cudaMemcpyHostToHost:
        return dk != MEM_DEVICE && sk != MEM_DEVICE;
    default:
        return (dk != 0 || sk != 0);
    }
}

SIM_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                                    enum cudaMemcpyKind kind, cudaStream_t st) {
    ENTER();
    if (bytes == 0) return cudaSuccess;
    if (!copy_ok(dst, src, bytes, kind)) return ret(cudaErrorInvalidValue);
    sim_op o = {.kind = OP_COPY, .dst = dst, .src = src, .bytes = bytes};
    return ret(enqueue(st, &o));
}
/* The synchronous calls: the operation on the legacy stream, waited for. */
static cudaError_t run_sync(const sim_op *o) {
    sim_stream *s = resolve(NULL);
    cudaError_t e = enqueue(NULL, o);
    if (e == cudaSuccess) stream_drain(s);
    return ret(e ? e : lost());
}
SIM_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    ENTER();
    UNSAFE_CHECK();
    if (bytes == 0) return cudaSuccess;
    if (!copy_ok(dst, src, bytes, kind)) return ret(cudaErrorInvalidValue);
    return run_sync(&(sim_op){.kind = OP_COPY, .dst = dst, .src = src, .bytes = bytes});
}
SIM_API cudaError_t cudaMemset(void *p, int value, size_t bytes) {
    ENTER();
    UNSAFE_CHECK();
    if (bytes == 0) return cudaSuccess;
    if (kind_of(p, bytes) != MEM_DEVICE) return ret(cudaErrorInvalidValue);
    return run_sync(&(sim_op){.kind = OP_SET, .dst = p, .value = value, .bytes = bytes});
}
SIM_API cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t st) {
    ENTER();
    if (bytes == 0) return cudaSuccess;
    if (kind_of(p, bytes) != MEM_DEVICE) return ret(cudaErrorInvalidValue);
    sim_op o = {.kind = OP_SET, .dst = p, .value = value, .bytes = bytes};
    return ret(enqueue(st, &o));
}
SIM_API cudaError_t cudaLaunchHostFunc(cudaStream_t st, cudaHostFn_t fn, void *user) {
    ENTER();
    sim_op o = {.kind = OP_HOSTFN, .fn = fn, .user = user};
    return ret(enqueue(st, &o));
}

/* streams */
static cudaError_t stream_create(cudaStream_t *st, unsigned flags, const char *call) {
    *st = NULL;
    ENTER();
    if (!ndev()) return ret(cudaErrorNoDevice);
    if (sim_fault(call)) return ret(cudaErrorMemoryAllocation);
    sim_stream *s = stream_new(t_dev, flags);
    if (!s) return ret(cudaErrorMemoryAllocation);
    sim_res(RES_STREAM, 1);
    *st = s;
    return cudaSuccess;
}
SIM_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags) {
    return stream_create(st, flags, "cudaStreamCreateWithFlags");
}
SIM_API cudaError_t cudaStreamCreate(cudaStream_t *st) {
    return stream_create(st, cudaStreamDefault, "cudaStreamCreate");
}
SIM_API cudaError_t cudaStreamDestroy(cudaStream_t st) {
    if (!st) return ret(cudaErrorInvalidResourceHandle);
    sim_stream *s = st;
    pthread_mutex_lock(&s->mu);
    int capturing = s->capturing;
    pthread_mutex_unlock(&s->mu);
    if (capturing) return ret(cudaErrorStreamCaptureUnsupported);
    pthread_mutex_lock(&S.mu);
    for (int i = 0; i < S.nstreams; i++)
        if (S.streams[i] == s) S.streams[i] = NULL;
    pthread_mutex_unlock(&S.mu);
    /* CUDA returns at once and frees the stream when its work is done; the work still runs,
       so waiting for it here changes no outcome. */
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    free(s);
    sim_res(RES_STREAM, -1);
    return ret(lost());
}
SIM_API cudaError_t cudaStreamSynchronize(cudaStream_t st) {
    ENTER();
    sim_stream *s = resolve(st);
    pthread_mutex_lock(&s->mu);
    int capturing = s->capturing;
    if (capturing) s->capturing = 2; /* synchronizing a capturing stream invalidates it */
    pthread_mutex_unlock(&s->mu);
    if (capturing) return ret(cudaErrorStreamCaptureUnsupported);
    UNSAFE_CHECK();
    stream_drain(s);
    return ret(lost());
}
SIM_API cudaError_t cudaStreamQuery(cudaStream_t st) {
    ENTER();
    UNSAFE_CHECK();
    sim_stream *s = resolve(st);
    pthread_mutex_lock(&s->mu);
    int busy = s->done < s->enq;
    pthread_mutex_unlock(&s->mu);
    return busy ? ret(cudaErrorNotReady) : cudaSuccess;
}
SIM_API cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned flags) {
    (void)flags;
    ENTER();
    pthread_mutex_lock(&ev->mu);
    uint64_t seq = ev->recorded;
    pthread_mutex_unlock(&ev->mu);
    if (seq == 0) return cudaSuccess;
    sim_op o = {.kind = OP_WAIT, .ev = ev, .seq = seq};
    return ret(enqueue(st, &o));
}

/* capture and graphs */
SIM_API cudaError_t cudaStreamBeginCapture(cudaStream_t st, enum cudaStreamCaptureMode mode) {
    ENTER();
    if (!st || st == cudaStreamLegacy || st == cudaStreamPerThread)
        return ret(cudaErrorStreamCaptureUnsupported);
    sim_stream *s = st;
    pthread_mutex_lock(&s->mu);
    if (s->capturing) {
        pthread_mutex_unlock(&s->mu);
        return ret(cudaErrorIllegalState);
    }
    s->capturing = 1;
    s->cap_mode = mode;
    s->cap_thread = pthread_self();
    s->cap_head = s->cap_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    t_captures++;
    if (mode == cudaStreamCaptureModeGlobal) {
        pthread_mutex_lock(&S.mu);
        S.global_captures++;
        pthread_mutex_unlock(&S.mu);
    }
    return cudaSuccess;
}
SIM_API cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *g) {
    *g = NULL;
    sim_stream *s = st;
    if (!s) return ret(cudaErrorIllegalState);
    pthread_mutex_lock(&s->mu);
    int state = s->capturing;
    if (state && s->cap_mode != cudaStreamCaptureModeRelaxed &&
        !pthread_equal(s->cap_thread, pthread_self())) {
        pthread_mutex_unlock(&s->mu);
        return ret(cudaErrorStreamCaptureWrongThread);
    }
    sim_op *ops = s->cap_head;
    enum cudaStreamCaptureMode mode = s->cap_mode;
    s->capturing = 0;
    s->cap_head = s->cap_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    if (!state) return ret(cudaErrorIllegalState);
    t_captures--;
    if (mode == cudaStreamCaptureModeGlobal) {
        pthread_mutex_lock(&S.mu);
        S.global_captures--;
        pthread_mutex_unlock(&S.mu);
    }
    if (state == 2) {
        free_ops(ops);
        return ret(cudaErrorStreamCaptureInvalidated);
    }
    struct CUgraph_st *graph = sim_fault("cudaStreamEndCapture") ? NULL : calloc(1, sizeof *graph);
    if (!graph) {
        free_ops(ops);
        return ret(cudaErrorMemoryAllocation);
    }
    graph->g.ops = ops;
    sim_res(RES_GRAPH, 1);
    *g = graph;
    return ret(lost());
}
SIM_API cudaError_t cudaStreamIsCapturing(cudaStream_t st, enum cudaStreamCaptureStatus *cs) {
    ENTER();
    *cs = cudaStreamCaptureStatusNone;
    if (!st || st == cudaStreamLegacy || st == cudaStreamPerThread) return cudaSuccess;
    sim_stream *s = st;
    pthread_mutex_lock(&s->mu);
    *cs = s->capturing == 1   ? cudaStreamCaptureStatusActive
          : s->capturing == 2 ? cudaStreamCaptureStatusInvalidated
                              : cudaStreamCaptureStatusNone;
    pthread_mutex_unlock(&s->mu);
    return cudaSuccess;
}
SIM_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g,
                                         unsigned long long flags) {
    (void)flags;
    *exec = NULL;
    ENTER();
    if (!g) return ret(cudaErrorInvalidValue);
    if (sim_fault("cudaGraphInstantiate")) return ret(cudaErrorMemoryAllocation);
    struct CUgraphExec_st *x = calloc(1, sizeof *x);
    if (!x) return ret(cudaErrorMemoryAllocation);
    sim_op **tail = &x->g.ops;
    for (const sim_op *o = g->g.ops; o; o = o->next) {
        sim_op *c = malloc(sizeof *c);
        if (!c) {
            free_ops(x->g.ops);
            free(x);
            return ret(cudaErrorMemoryAllocation);
        }
        *c = *o;
        c->next = NULL;
        *tail = c;
        tail = &c->next;
    }
    sim_res(RES_GRAPH_EXEC, 1);
    *exec = x;
    return cudaSuccess;
}
SIM_API cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t st) {
    (void)st;
    ENTER();
    return exec ? cudaSuccess : ret(cudaErrorInvalidValue);
}
SIM_API cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st) {
    ENTER();
    if (!exec) return ret(cudaErrorInvalidValue);
    sim_op o = {.kind = OP_GRAPH, .graph = &exec->g};
    return ret(enqueue(st, &o));
}
SIM_API cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    if (!g) return ret(cudaErrorInvalidValue);
    free_ops(g->g.ops);
    free(g);
    sim_res(RES_GRAPH, -1);
    return cudaSuccess;
}
SIM_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
    if (!x) return ret(cudaErrorInvalidValue);
    free_ops(x->g.ops);
    free(x);
    sim_res(RES_GRAPH_EXEC, -1);
    return cudaSuccess;
}

/* events */
/* `call`: the API the program called, as the fault names it. */
static cudaError_t event_create(cudaEvent_t *ev, unsigned flags, const char *call) {
    *ev = NULL;
    ENTER();
    if (sim_fault(call)) return ret(cudaErrorMemoryAllocation);
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) return ret(cudaErrorMemoryAllocation);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->dev = t_dev;
    e->flags = flags;
    sim_res(RES_EVENT, 1);
    *ev = e;
    return cudaSuccess;
}
SIM_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags) {
    return event_create(ev, flags, "cudaEventCreateWithFlags");
}
SIM_API cudaError_t cudaEventCreate(cudaEvent_t *ev) {
    return event_create(ev, cudaEventDefault, "cudaEventCreate");
}
SIM_API cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    if (!ev) return ret(cudaErrorInvalidResourceHandle);
    /* CUDA defers the release until a pending record completes: wait for it. */
    pthread_mutex_lock(&ev->mu);
    while (ev->completed < ev->recorded && !lost())
        pthread_cond_wait(&ev->cv, &ev->mu);
    pthread_mutex_unlock(&ev->mu);
    pthread_mutex_destroy(&ev->mu);
    pthread_cond_destroy(&ev->cv);
    free(ev);
    sim_res(RES_EVENT, -1);
    return ret(lost());
}
SIM_API cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st) {
    ENTER();
    if (!ev) return ret(cudaErrorInvalidResourceHandle);
    sim_stream *s = resolve(st);
    if (s->dev != ev->dev) return ret(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&s->mu);
    int capturing = s->capturing;
    pthread_mutex_unlock(&s->mu);
    if (capturing) {
        sim_op o = {.kind = OP_RECORD, .ev = ev};
        return ret(enqueue(st, &o)); /* refused: not simulated under capture */
    }
    pthread_mutex_lock(&ev->mu);
    uint64_t seq = ++ev->recorded;
    pthread_mutex_unlock(&ev->mu);
    sim_op o = {.kind = OP_RECORD, .ev = ev, .seq = seq};
    cudaError_t e = enqueue(st, &o);
    if (e != cudaSuccess) event_complete(ev, seq); /* never runs: do not leave it pending */
    return ret(e);
}
SIM_API cudaError_t cudaEventQuery(cudaEvent_t ev) {
    ENTER();
    UNSAFE_CHECK();
    pthread_mutex_lock(&ev->mu);
    int pending = ev->completed < ev->recorded;
    pthread_mutex_unlock(&ev->mu);
    if (lost()) return ret(lost());
    return pending ? ret(cudaErrorNotReady) : cudaSuccess;
}
SIM_API cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    ENTER();
    UNSAFE_CHECK();
    pthread_mutex_lock(&ev->mu);
    uint64_t want = ev->recorded;
    while (ev->completed < want && !lost())
        pthread_cond_wait(&ev->cv, &ev->mu);
    pthread_mutex_unlock(&ev->mu);
    return ret(lost());
}
SIM_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    ENTER();
    if (!a || !b || (a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming))
        return ret(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&a->mu);
    uint64_t ta = a->done_ns, ra = a->recorded, ca = a->completed;
    pthread_mutex_unlock(&a->mu);
    pthread_mutex_lock(&b->mu);
    uint64_t tb = b->done_ns, rb = b->recorded, cb = b->completed;
    pthread_mutex_unlock(&b->mu);
    if (!ra || !rb) return ret(cudaErrorInvalidResourceHandle);
    if (ca < ra || cb < rb) return ret(cudaErrorNotReady);
    *ms = (float)((double)(int64_t)(tb - ta) / 1e6);
    return cudaSuccess;
}
