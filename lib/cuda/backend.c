/*
 * CUDA backend: the device interface (lib/device.h) on the CUDA Runtime.
 *
 *  - Rings: pinned, portable host memory (cudaHostAlloc). Pinning failure fails create; there
 *    is no pageable fallback, because pageable copies are synchronous and would serialise the
 *    pipeline behind the host.
 *  - Slots: one non-blocking stream each, with its own cuBLAS handle (bound to the stream,
 *    with a workspace set so cuBLAS never allocates later, also inside graph capture), a
 *    cuBLASLt handle and workspace, and, when built with cuDNN, a cuDNN handle created on the
 *    first gp_cuda_cudnn() of the slot: a cuDNN that cannot load then fails only the computes
 *    that use it (they see NULL; the reason is logged and kept in stats.backend_note), not
 *    every pipeline. Device buffers are allocated once at create; every
 *    cudaMalloc/cudaHostAlloc is counted so a test can prove none happens afterwards.
 *  - Events: blocking-sync events by default, so the completion thread sleeps in the driver;
 *    with config.spin_wait it polls cudaEventQuery, yielding, then napping.
 *  - Time: event times come back on the gp__now_ns() clock through a reference event per
 *    device whose host time is known (anchored by polling it right after recording). Elapsed
 *    times are floats in ms, so the anchor is renewed when an event is more than
 *    REANCHOR_MS past it: a float then still resolves about a microsecond.
 *  - Faults: every CUDA, cuBLAS(Lt) and cuDNN call goes through GP__CU (cu_check, on the
 *    library's one status check, check.h): it records the native code, its name and text, the
 *    call and file:line, and maps to GP_EDEVICE. Sticky errors (the context is lost: illegal
 * address, launch failure, trap, ...) latch `sticky`; healthy() then reports the device failed and
 * the pipeline moves to its failed state. After a sticky fault every later call fails with the same
 *    code; those repeats are not recorded, so the last error keeps the root cause.
 *  - Graphs (config.cuda_graphs): per slot and batch-size bucket (gp_batch.buckets, the
 *    pipeline's one bucket rule) the compute is captured once at create (slot_ready) and
 *    replayed; a batch is padded up to its bucket (gp_batch.bucket).
 *  - NVTX: a "gpupipe" domain with a range around each stage's enqueue (h2d, compute, d2h,
 *    per slot), so Nsight Systems shows the pipeline and projects the ranges onto the GPU.
 *
 * Threads (device.h): create/destroy on the caller's thread; copies, launch and event_record
 * on the batcher thread; event_wait, event_time_ns, healthy on the poller thread; stats from
 * any thread. The current device is per thread, so every per-device call sets it first.
 */
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#ifdef GP_HAVE_CUDNN
#include <cudnn.h>
#endif
#include <nvtx3/nvToolsExt.h>

#include "gpupipe/cuda.h"

#include "../backend.h"
#include "../bucket.h"
#include "../clock.h"
#include "../device.h"
#include "../stats.h"
#include "check.h"
#include "handles.h"
#include "kernels.h"

#define REANCHOR_MS 10000.0f /* float ms resolves ~1 us up to here */
#define SPIN_YIELDS 256      /* spin_wait: polls with sched_yield before napping */
#define SPIN_NAP_NS 20000    /* then poll every 20 us: no core is burnt for long waits */

/* ---- context -------------------------------------------------------------------------- */

/* One configured device. `ref`/`ref_ns` are the time anchor: written at open, then only by
   the poller (event_time_ns). */
typedef struct cuda_dev {
    int id;
    int cc_major;
    cudaStream_t anchor; /* idle stream the reference event is recorded on */
    cudaEvent_t ref;
    uint64_t ref_ns; /* gp__now_ns() when `ref` completed */
} cuda_dev;

typedef struct cuda_ctx {
    gp__errsink *sink;
    int ndev;
    cuda_dev dev[GP_MAX_DEVICES];
    int spin;   /* config.spin_wait */
    int graphs; /* config.cuda_graphs */
    nvtxDomainHandle_t nvtx;

    _Atomic int sticky;       /* first sticky cudaError_t, 0 while healthy; any thread */
    _Atomic uint64_t allocs;  /* cudaMalloc + cudaHostAlloc; create thread */
    _Atomic uint64_t replays; /* batcher only (single writer), read by stats */
    _Atomic uint64_t eager;   /* batcher only */
    char eager_reason[96];    /* written during create only, read-only after */
    /* stats.backend_note: the first note (cuDNN unavailable, a layer on a slow path), written
       once (note_set, release) by the thread that had it, read by stats. */
    char note[160];
    _Atomic int note_set;
} cuda_ctx;

struct gp__stream {
    gp__cuda_handles h; /* what the batch's impl points to (handles.h): stream, handles */
    cuda_ctx *ctx;
    cuda_dev *dev;
    cudaStream_t st;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *blas_ws, *lt_ws;
    size_t ws_bytes; /* each of the two workspaces */
#ifdef GP_HAVE_CUDNN
    cudnnHandle_t dnn; /* created on first use (get_cudnn); NULL before or on failure */
    int dnn_failed;    /* the creation failed: NULL from now on, no retry per batch */
#endif
    int dnn_refused; /* a capture's compute got NULL from gp_cuda_cudnn: that bucket runs eager */
    int slot;
    cudaGraphExec_t exec[GP_MAX_BUCKETS]; /* per bucket index; NULL: that bucket runs eager */
    nvtxStringHandle_t nv_h2d, nv_compute, nv_d2h;
};

struct gp__event {
    cudaEvent_t ev;
    cuda_dev *dev;
    /* Recorded at least once: set by the batcher, read by the poller after the pipeline's
       record -> wait ordering (device.h). A batch that failed while being enqueued may leave
       an event never recorded; its time is then unknown, not an error to report. */
    int recorded;
};

/* ---- the one check ---------------------------------------------------------------------- */

/*
 * The failure path of every checked call. With `why` NULL the detail is recorded in the sink
 * as `gp_code`; with `why` it is only written there, for callers that say more (open: why
 * there is no usable device) or fall back (graph capture). Sticky errors latch ctx->sticky
 * either way. Returns `gp_code`.
 */
static int cu_check(cuda_ctx *c, gp__cu_status s, int gp_code, const char *call, const char *file,
                    int line, char *why, size_t why_len) {
    if (s.code == 0) return GP_OK;
    /* An allocation failure (cudaMalloc, cudaHostAlloc, a library's own) is GP_ENOMEM: create
       then says "out of memory", which lowering max_batch or inflight fixes. */
    if (gp_code == GP_EDEVICE) gp_code = gp__cu_code(s);
    int was_sticky = atomic_load_explicit(&c->sticky, memory_order_relaxed);
    int sticky = gp__cu_is_sticky(s);
    if (sticky && !was_sticky) {
        int expected = 0;
        atomic_compare_exchange_strong_explicit(&c->sticky, &expected, s.code, memory_order_relaxed,
                                                memory_order_relaxed);
    }
    if (why) {
        /* The native name first: short copies of this (stats) keep what matters. */
        const char *name, *text;
        gp__cu_describe(s, &name, &text);
        snprintf(why, why_len, "%s (%d) in %s: %s", name, s.code, call, text);
        return gp_code;
    }
    /* Once the context is lost every call fails the same way; keep the root cause. */
    if (was_sticky) return gp_code;
    char what[256];
    gp__cu_format(s, call, what, sizeof what);
    gp__err_record(c->sink, gp_code, file, line, "%s%s", what,
                   sticky ? "; sticky: the device context is lost, the pipeline fails" : "");
    return gp_code;
}

/* GP__CU(c, call): check a CUDA/cuBLAS/cuDNN call, record its failure, return a GP code. */
#define GP__CU(c, call)                                                                            \
    cu_check((c), GP__CU_STATUS(call), GP_EDEVICE, #call, __FILE__, __LINE__, NULL, 0)
/* As GP__CU, but the detail goes to `buf` (an array) instead of the sink. */
#define GP__CU_WHY(c, call, buf)                                                                   \
    cu_check((c), GP__CU_STATUS(call), GP_EDEVICE, #call, __FILE__, __LINE__, (buf), sizeof(buf))
/* For a status obtained in a loop or kept for its value: `text` names the call. */
#define GP__CU_ST(c, status, text)                                                                 \
    cu_check((c), GP__CU_STATUS(status), GP_EDEVICE, (text), __FILE__, __LINE__, NULL, 0)
#define GP__CU_ST_WHY(c, status, text, buf)                                                        \
    cu_check((c), GP__CU_STATUS(status), GP_EDEVICE, (text), __FILE__, __LINE__, (buf), sizeof(buf))

/* ---- helpers ---------------------------------------------------------------------------- */

/* strlcpy: truncate to fit, always terminate. */
static void copy_str(char *dst, size_t cap, const char *src) {
    size_t k = strlen(src);
    if (k >= cap) k = cap - 1;
    memcpy(dst, src, k);
    dst[k] = '\0';
}

static cuda_dev *dev_of(cuda_ctx *c, int id) {
    for (int i = 0; i < c->ndev; i++)
        if (c->dev[i].id == id) return &c->dev[i];
    return NULL;
}

static int set_device(cuda_ctx *c, const cuda_dev *d) {
    return GP__CU(c, cudaSetDevice(d->id));
}

static int cuda_bind_device(void *ctx, int device) {
    cuda_ctx *c = ctx;
    cuda_dev *d = dev_of(c, device);
    if (!d) return GP__ERR(c->sink, GP_EINVAL, "device %d is not one of this pipeline's", device);
    return set_device(c, d);
}

/* device.h thread_start: the batcher's and the poller's own threads (never an application
   thread) interact with stream capture thread-locally (cudaThreadExchangeStreamCaptureMode):
   under the default, global mode, another thread's global-mode capture makes their
   cudaEventQuery / cudaEventSynchronize fail and invalidates that capture. The pipeline's first
   device is made current first: a first CUDA call with none set could initialise device 0's
   context on a pipeline that does not use device 0. */
static void cuda_thread_start(void *ctx) {
    cuda_ctx *c = ctx;
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
    char why[256];
    if (GP__CU_WHY(c, cudaSetDevice(c->dev[0].id), why) != GP_OK ||
        GP__CU_WHY(c, cudaThreadExchangeStreamCaptureMode(&mode), why) != GP_OK)
        gp__log(c->sink, GP_LOG_WARN, "stream-capture mode stays global on a pipeline thread: %s",
                why);
}

static void nap(unsigned i) {
    if (i < SPIN_YIELDS) {
        sched_yield();
    } else {
        struct timespec ts = {0, SPIN_NAP_NS};
        nanosleep(&ts, NULL);
    }
}

/* Poll `ev` until it completes (napping): its final status. The polls' "not yet"
   (cudaErrorNotReady) may stay as the thread's last error (PyTorch clears it for that reason),
   where the next cudaGetLastError() on this thread (the application's, a callback's) would read
   it as its own failure: it is cleared when it is the last error and the event completed. */
static cudaError_t spin_query(cudaEvent_t ev) {
    cudaError_t q;
    unsigned i = 0;
    for (; (q = cudaEventQuery(ev)) == cudaErrorNotReady; i++)
        nap(i);
    if (i > 0 && q == cudaSuccess && cudaPeekAtLastError() == cudaErrorNotReady)
        (void)cudaGetLastError();
    return q;
}

/* Record the reference event on the idle anchor stream and poll it: its host time lies
   between the call and the observed completion; take the middle (a few us of offset, the
   same for every event of the device, so stage intervals are unaffected).
   Runs on the application's thread in create (and on the poller later). A query's "not yet"
   (cudaErrorNotReady) may stay as the thread's last error (PyTorch clears it for that reason),
   where the application's next cudaGetLastError() would read it as its own failure: it is
   cleared here. So as not to clear (or overwrite) an error the application has not read yet,
   a thread with one pending waits with cudaEventSynchronize instead of polling. */
static int anchor(cuda_ctx *c, cuda_dev *d) {
    int rc;
    if ((rc = set_device(c, d)) != GP_OK) return rc;
    int poll = cudaPeekAtLastError() == cudaSuccess; /* a value, not a failure of the call */
    uint64_t t0 = gp__now_ns();
    if ((rc = GP__CU(c, cudaEventRecord(d->ref, d->anchor))) != GP_OK) return rc;
    if (poll) {
        if ((rc = GP__CU_ST(c, spin_query(d->ref), "cudaEventQuery(d->ref)")) != GP_OK) return rc;
    } else if ((rc = GP__CU(c, cudaEventSynchronize(d->ref))) != GP_OK) {
        return rc;
    }
    uint64_t t1 = gp__now_ns();
    d->ref_ns = t0 + (t1 - t0) / 2;
    return GP_OK;
}

static void nvtx_push(cuda_ctx *c, nvtxStringHandle_t msg, uint32_t argb, uint64_t payload) {
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.colorType = NVTX_COLOR_ARGB;
    a.color = argb;
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    a.payload.ullValue = payload;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = msg;
    nvtxDomainRangePushEx(c->nvtx, &a);
}

#define NV_H2D 0xff2e9e44u     /* green */
#define NV_COMPUTE 0xff3a6fd8u /* blue */
#define NV_D2H 0xffe08a1eu     /* orange */

/* ---- open / close ------------------------------------------------------------------------ */

static void close_devices(cuda_ctx *c) {
    for (int i = 0; i < c->ndev; i++) {
        cuda_dev *d = &c->dev[i];
        /* A device that failed open before its anchor existed is not touched: its id may be
           out of range, and the error that explains why must stay the last one. */
        if ((!d->ref && !d->anchor) || set_device(c, d) != GP_OK) continue;
        if (d->ref) GP__CU(c, cudaEventDestroy(d->ref));
        if (d->anchor) GP__CU(c, cudaStreamDestroy(d->anchor));
    }
}

static void cuda_close(void *ctx) {
    cuda_ctx *c = ctx;
    close_devices(c);
    if (c->nvtx) nvtxDomainDestroy(c->nvtx);
    free(c);
}

/* Why the CUDA runtime sees no usable device here, in words: the most useful part first,
   because AUTO keeps the first 160 characters as stats.fallback_reason. `native` names the
   cudaGetDeviceCount error. */
static int no_device(cuda_ctx *c, cudaError_t count_err) {
    int drv = 0, rt = 0;
    char w[200];
    const char *native = cudaGetErrorName(count_err);
    if (GP__CU_WHY(c, cudaDriverGetVersion(&drv), w) != GP_OK) drv = -1;
    if (GP__CU_WHY(c, cudaRuntimeGetVersion(&rt), w) != GP_OK) rt = 0;
    if (drv == 0)
        return GP__ERR(c->sink, GP_ENODEV,
                       "no NVIDIA driver: libcuda cannot be loaded (cudaGetDeviceCount: %s; "
                       "CUDA runtime %d.%d)",
                       native, rt / 1000, rt % 1000 / 10);
    if (drv > 0 && rt > 0 && drv < rt)
        return GP__ERR(c->sink, GP_ENODEV,
                       "NVIDIA driver too old: it supports CUDA %d.%d, the runtime is %d.%d "
                       "(cudaGetDeviceCount: %s)",
                       drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10, native);
    if (count_err == cudaErrorNoDevice || count_err == cudaSuccess) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        return GP__ERR(c->sink, GP_ENODEV, "no CUDA device visible (cudaGetDeviceCount: %s%s%s%s)",
                       native, vis ? "; CUDA_VISIBLE_DEVICES=\"" : "", vis ? vis : "",
                       vis ? "\"" : "");
    }
    return GP__ERR(c->sink, GP_ENODEV,
                   "the CUDA runtime cannot use any device "
                   "(cudaGetDeviceCount: %s: %s)",
                   native, cudaGetErrorString(count_err));
}

static int open_device(cuda_ctx *c, cuda_dev *d, int count) {
    char why[256];
    int mode = 0, rc;
    if (d->id >= count)
        return GP__ERR(c->sink, GP_ENODEV,
                       "config.devices: CUDA device %d is out of range: %d device(s) visible "
                       "(ids 0..%d)",
                       d->id, count, count - 1);
    /* cudaSetDevice creates the primary context: unusable devices (exclusive-process and
       taken, out of memory, ...) fail here. */
    if (GP__CU_WHY(c, cudaSetDevice(d->id), why) != GP_OK)
        return GP__ERR(c->sink, GP_ENODEV, "CUDA device %d cannot be used: %s", d->id, why);
    if (GP__CU_WHY(c, cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, d->id), why) != GP_OK ||
        GP__CU_WHY(c,
                   cudaDeviceGetAttribute(&d->cc_major, cudaDevAttrComputeCapabilityMajor, d->id),
                   why) != GP_OK)
        return GP__ERR(c->sink, GP_ENODEV, "CUDA device %d cannot be queried: %s", d->id, why);
    if (mode == cudaComputeModeProhibited)
        return GP__ERR(c->sink, GP_ENODEV,
                       "CUDA device %d is in compute-prohibited mode (nvidia-smi -c)", d->id);
    if ((rc = GP__CU(c, cudaStreamCreateWithFlags(&d->anchor, cudaStreamNonBlocking))) != GP_OK)
        return rc;
    if ((rc = GP__CU(c, cudaEventCreateWithFlags(&d->ref, cudaEventDefault))) != GP_OK) return rc;
    return anchor(c, d);
}

static int cuda_open(const gp_config *cfg, gp__errsink *sink, void **out) {
    char why[256];
    int count = 0, rc;
    *out = NULL;
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!c) return GP__ERR(sink, GP_ENOMEM, "CUDA backend context");
    c->sink = sink;
    c->spin = cfg->spin_wait;
    c->graphs = cfg->cuda_graphs;
    if (!c->graphs) copy_str(c->eager_reason, sizeof c->eager_reason, "config.cuda_graphs is 0");

    cudaError_t count_err = cudaGetDeviceCount(&count);
    if (GP__CU_ST_WHY(c, count_err, "cudaGetDeviceCount(&count)", why) != GP_OK || count <= 0) {
        rc = no_device(c, count_err);
        free(c);
        return rc;
    }

    /* The distinct configured devices; none configured means device 0. */
    int ids[GP_MAX_DEVICES], nids = cfg->num_devices ? cfg->num_devices : 1;
    for (int i = 0; i < nids; i++)
        ids[i] = cfg->num_devices ? cfg->devices[i] : 0;
    for (int i = 0; i < nids; i++) {
        if (dev_of(c, ids[i])) continue;
        cuda_dev *d = &c->dev[c->ndev++];
        d->id = ids[i];
        if ((rc = open_device(c, d, count)) != GP_OK) {
            /* Anything that stops a device here means "not usable": AUTO falls back. */
            if (rc != GP_ENODEV && rc != GP_ENOMEM) {
                char detail[sizeof sink->msg];
                gp__err_copy(sink, detail, sizeof detail);
                rc = GP__ERR(sink, GP_ENODEV, "CUDA device %d could not be set up: %s", d->id,
                             detail);
            }
            close_devices(c);
            free(c);
            return rc;
        }
    }
    c->nvtx = nvtxDomainCreateA("gpupipe");
    *out = c;
    return GP_OK;
}

/* ---- memory ----------------------------------------------------------------------------- */

static int cuda_host_alloc(void *ctx, size_t bytes, void **p) {
    cuda_ctx *c = ctx;
    char why[256];
    *p = NULL;
    /* Portable: pinned for every device's context, so one ring serves all slots. */
    int rc = GP__CU_WHY(c, cudaHostAlloc(p, bytes, cudaHostAllocPortable), why);
    if (rc != GP_OK) {
        *p = NULL;
        return GP__ERR(c->sink, rc,
                       "pinned host ring of %zu bytes: %s; gpupipe never falls back to pageable "
                       "memory (lower capacity or item size)",
                       bytes, why);
    }
    atomic_fetch_add_explicit(&c->allocs, 1, memory_order_relaxed);
    return GP_OK;
}

static void cuda_host_free(void *ctx, void *p) {
    cuda_ctx *c = ctx;
    GP__CU(c, cudaFreeHost(p));
}

static int dev_malloc(cuda_ctx *c, cuda_dev *d, size_t bytes, void **p) {
    int rc;
    *p = NULL;
    if ((rc = set_device(c, d)) != GP_OK) return rc;
    if ((rc = GP__CU(c, cudaMalloc(p, bytes))) != GP_OK) {
        *p = NULL;
        return rc;
    }
    atomic_fetch_add_explicit(&c->allocs, 1, memory_order_relaxed);
    /* Zeroed (create only: the pipeline allocates nothing later): a CUDA graph computes its
       whole bucket, so rows past a batch's n are read; they must never be uninitialized memory
       (a compute that gathers by value would read out of bounds). On the device's idle
       non-blocking anchor stream, waited for here: not on the legacy stream, whose use is
       invalid while any blocking stream of the context is being captured (an application's
       CUDA graph). */
    if ((rc = GP__CU(c, cudaMemsetAsync(*p, 0, bytes, d->anchor))) != GP_OK ||
        (rc = GP__CU(c, cudaStreamSynchronize(d->anchor))) != GP_OK) {
        GP__CU(c, cudaFree(*p));
        *p = NULL;
        return rc;
    }
    return GP_OK;
}

static int cuda_dev_alloc(void *ctx, int device, size_t bytes, void **p) {
    cuda_ctx *c = ctx;
    cuda_dev *d = dev_of(c, device);
    if (!d) return GP__ERR(c->sink, GP_EINVAL, "device %d was not opened", device);
    return dev_malloc(c, d, bytes, p);
}

static void dev_mfree(cuda_ctx *c, cuda_dev *d, void *p) {
    if (p && set_device(c, d) == GP_OK) GP__CU(c, cudaFree(p));
}

static void cuda_dev_free(void *ctx, int device, void *p) {
    cuda_ctx *c = ctx;
    cuda_dev *d = dev_of(c, device);
    if (d) dev_mfree(c, d, p);
}

/* ---- streams ---------------------------------------------------------------------------- */

/* Free whatever part of a slot stream exists. The stream is synchronized first: nothing may
   still use the handles or workspaces. */
static void stream_teardown(cuda_ctx *c, gp__stream *s) {
    if (set_device(c, s->dev) == GP_OK) {
        if (s->st) GP__CU(c, cudaStreamSynchronize(s->st));
        for (int i = 0; i < GP_MAX_BUCKETS; i++)
            if (s->exec[i]) GP__CU(c, cudaGraphExecDestroy(s->exec[i]));
#ifdef GP_HAVE_CUDNN
        if (s->dnn) GP__CU(c, cudnnDestroy(s->dnn));
#endif
        if (s->lt) GP__CU(c, cublasLtDestroy(s->lt));
        if (s->blas) GP__CU(c, cublasDestroy(s->blas));
        dev_mfree(c, s->dev, s->lt_ws);
        dev_mfree(c, s->dev, s->blas_ws);
        if (s->st) GP__CU(c, cudaStreamDestroy(s->st));
    }
    free(s);
}

static int cuda_stream_create(void *ctx, int device, gp__stream **out) {
    cuda_ctx *c = ctx;
    cuda_dev *d = dev_of(c, device);
    int rc;
    *out = NULL;
    if (!d) return GP__ERR(c->sink, GP_EINVAL, "device %d was not opened", device);
    gp__stream *s = calloc(1, sizeof *s);
    if (!s) return GP__ERR(c->sink, GP_ENOMEM, "CUDA stream state");
    s->ctx = c;
    s->dev = d;
    s->slot = -1;
    /* cuBLAS recommends 32 MiB of workspace on Hopper and later, 4 MiB before. */
    s->ws_bytes = (size_t)(d->cc_major >= 9 ? 32 : 4) << 20;
    if ((rc = set_device(c, d)) != GP_OK ||
        (rc = GP__CU(c, cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking))) != GP_OK ||
        (rc = GP__CU(c, cublasCreate(&s->blas))) != GP_OK ||
        (rc = GP__CU(c, cublasSetStream(s->blas, s->st))) != GP_OK ||
        (rc = dev_malloc(c, d, s->ws_bytes, &s->blas_ws)) != GP_OK ||
        (rc = GP__CU(c, cublasSetWorkspace(s->blas, s->blas_ws, s->ws_bytes))) != GP_OK ||
        (rc = GP__CU(c, cublasLtCreate(&s->lt))) != GP_OK ||
        (rc = dev_malloc(c, d, s->ws_bytes, &s->lt_ws)) != GP_OK)
        goto fail;
    *out = s;
    return GP_OK;
fail:
    stream_teardown(c, s);
    return rc;
}

static void cuda_stream_destroy(void *ctx, gp__stream *s) {
    stream_teardown(ctx, s);
}

/* Keep the first note for stats.backend_note: what the pipeline runs without, and why. */
static void keep_note(cuda_ctx *c, const char *prefix, const char *msg) {
    int expected = 0;
    if (atomic_compare_exchange_strong_explicit(&c->note_set, &expected, 1, memory_order_acq_rel,
                                                memory_order_relaxed)) {
        /* Truncated to the note on purpose (the front says the most). */
        size_t cap = sizeof c->note - 1, a = strnlen(prefix, cap), b = strnlen(msg, cap - a);
        memcpy(c->note, prefix, a);
        memcpy(c->note + a, msg, b);
        c->note[a + b] = '\0';
        atomic_store_explicit(&c->note_set, 2, memory_order_release);
    }
}

/* handles.h's note(). */
static void slot_note(gp__cuda_handles *h, const char *msg) {
    gp__stream *s = (gp__stream *)(void *)h; /* h is the stream's first member */
    keep_note(s->ctx, "", msg);
    gp__log(s->ctx->sink, GP_LOG_WARN, "slot %d: %s", s->slot, msg);
}

/* handles.h's info(). */
static void slot_info(gp__cuda_handles *h, const char *msg) {
    gp__stream *s = (gp__stream *)(void *)h; /* h is the stream's first member */
    gp__log(s->ctx->sink, GP_LOG_INFO, "slot %d: %s", s->slot, msg);
}

#ifdef GP_HAVE_CUDNN
/* A cuDNN that cannot be used here is a note, not a failure: computes get NULL and may run
   without it (the model layers' direct convolution). The first reason is kept for stats. */
static void dnn_unavailable(cuda_ctx *c, gp__stream *s, const char *why) {
    s->dnn_failed = 1;
    keep_note(c, "cuDNN unavailable: ", why);
    gp__log(c->sink, GP_LOG_WARN, "slot %d: cuDNN unavailable, gp_cuda_cudnn() returns NULL: %s",
            s->slot, why);
}

/* handles.h's cudnn(): the slot's handle, created on the first call. */
static void *get_cudnn(gp__cuda_handles *h) {
    gp__stream *s = (gp__stream *)(void *)h; /* h is the stream's first member */
    cuda_ctx *c = s->ctx;
    char why[256];
    if (s->dnn || s->dnn_failed) return s->dnn;
    /* Under capture cudnnCreate would break it: NULL for this call only, no verdict on cuDNN
       (the bucket runs eager; the next call outside a capture creates the handle). */
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (GP__CU_WHY(c, cudaStreamIsCapturing(s->st, &cs), why) == GP_OK &&
        cs != cudaStreamCaptureStatusNone) {
        gp__log(c->sink, GP_LOG_WARN,
                "slot %d: gp_cuda_cudnn() first called under CUDA-graph capture: NULL for this "
                "call (call it first from compute_setup)",
                s->slot);
        s->dnn_refused = 1; /* capture_bucket keeps no graph of what ran without it */
        return NULL;
    }
    if (GP__CU_WHY(c, cudaSetDevice(s->dev->id), why) != GP_OK ||
        GP__CU_WHY(c, cudnnCreate(&s->dnn), why) != GP_OK) {
        s->dnn = NULL;
        dnn_unavailable(c, s, why);
        return NULL;
    }
    if (GP__CU_WHY(c, cudnnSetStream(s->dnn, s->st), why) != GP_OK) {
        GP__CU(c, cudnnDestroy(s->dnn));
        s->dnn = NULL;
        dnn_unavailable(c, s, why);
        return NULL;
    }
    return s->dnn;
}
#endif

static void cuda_stream_bind(void *ctx, gp__stream *s, gp_batch *b) {
    cuda_ctx *c = ctx;
    char name[48];
    s->h.magic = GP__CUDA_HANDLES_MAGIC;
    s->h.device = s->dev->id;
    s->h.stream = s->st;
    s->h.blas = s->blas;
    s->h.lt = s->lt;
    s->h.lt_ws = s->lt_ws;
    s->h.ws_bytes = s->ws_bytes;
#ifdef GP_HAVE_CUDNN
    s->h.cudnn = get_cudnn;
#else
    s->h.cudnn = NULL;
#endif
    s->h.note = slot_note;
    s->h.info = slot_info;
    b->stream = (void *)s->st;
    b->impl = &s->h;
    b->device = s->dev->id;
    s->slot = b->slot;
    snprintf(name, sizeof name, "gp h2d slot %d", b->slot);
    s->nv_h2d = nvtxDomainRegisterStringA(c->nvtx, name);
    snprintf(name, sizeof name, "gp compute slot %d", b->slot);
    s->nv_compute = nvtxDomainRegisterStringA(c->nvtx, name);
    snprintf(name, sizeof name, "gp d2h slot %d", b->slot);
    s->nv_d2h = nvtxDomainRegisterStringA(c->nvtx, name);
}

/* ---- copies and launch -------------------------------------------------------------------- */

static int copy(cuda_ctx *c, gp__stream *s, void *dst, const void *src, size_t bytes, int h2d) {
    int rc;
    nvtx_push(c, h2d ? s->nv_h2d : s->nv_d2h, h2d ? NV_H2D : NV_D2H, bytes);
    if ((rc = set_device(c, s->dev)) == GP_OK)
        rc = h2d ? GP__CU(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->st))
                 : GP__CU(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->st));
    nvtxDomainRangePop(c->nvtx);
    return rc;
}

static int cuda_copy_h2d(void *ctx, gp__stream *s, void *dst, const void *src, size_t bytes) {
    return copy(ctx, s, dst, src, bytes, 1);
}

static int cuda_copy_d2h(void *ctx, gp__stream *s, void *dst, const void *src, size_t bytes) {
    return copy(ctx, s, dst, src, bytes, 0);
}

/* The error a compute left behind on this thread (and clear it). cudaErrorNotReady is a
   query's "not yet" (cudaEventQuery, cudaStreamQuery), which the runtime may leave as the
   last error (PyTorch clears it for that reason): not a failure. */
static cudaError_t compute_error(void) {
    cudaError_t e = cudaGetLastError();
    return e == cudaErrorNotReady ? cudaSuccess : e;
}

/* Run the compute now (it enqueues on the stream). Its return is the batch's status; a CUDA
   error it left behind without reporting also fails the batch (GP_ECOMPUTE), or the device
   when sticky. */
static int run_eager(cuda_ctx *c, gp__launch *l) {
    /* Drop a stale error of this thread so only the compute's own is seen below. The value is
       the error state itself, not a failure of the call. */
    (void)cudaGetLastError();
    l->status = l->fn(l->user, &l->batch);
    int rc = GP__CU_ST(c, compute_error(), "the compute (cudaGetLastError after it)");
    if (rc != GP_OK) {
        if (atomic_load_explicit(&c->sticky, memory_order_relaxed)) return GP_EDEVICE;
        if (l->status == GP_OK) l->status = GP_ECOMPUTE;
    }
    return GP_OK;
}

static int cuda_launch(void *ctx, gp__stream *s, gp__launch *l) {
    cuda_ctx *c = ctx;
    int rc;
    nvtx_push(c, s->nv_compute, NV_COMPUTE, l->batch.n);
    if ((rc = set_device(c, s->dev)) == GP_OK) {
        int b = c->graphs
                    ? gp__bucket_index(l->batch.buckets, l->batch.num_buckets, l->batch.bucket)
                    : -1;
        if (b >= 0 && s->exec[b]) {
            /* Pad up to the bucket: the buffers hold max_batch items and only the first n are
               copied back. */
            l->batch.n = l->batch.bucket;
            l->status = GP_OK;
            rc = GP__CU(c, cudaGraphLaunch(s->exec[b], s->st));
            GP__BUMP1(c->replays, 1);
        } else {
            rc = run_eager(c, l);
            GP__BUMP1(c->eager, 1);
        }
    }
    nvtxDomainRangePop(c->nvtx);
    return rc;
}

/* ---- graphs ----------------------------------------------------------------------------- */

static void eager_reason(cuda_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void eager_reason(cuda_ctx *c, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->eager_reason[0] == '\0') copy_str(c->eager_reason, sizeof c->eager_reason, msg);
    gp__log(c->sink, GP_LOG_WARN, "cuda graphs: %s; that bucket runs eager", msg);
}

/* Run the compute for one bucket once, eagerly, and wait for it: a first call's one-time work
   (in cuDNN, cuBLASLt, lazily loaded kernels, the compute's own) then happens outside the
   capture, as PyTorch's graph warm-up, and a compute that faults on the device fails create
   here rather than inside a capture. GP_OK when it ran clean; otherwise the reason is kept
   and the bucket stays eager (GP_EDEVICE only for a lost device, from the caller). */
static int warm_up(cuda_ctx *c, gp__stream *s, gp__launch *l, size_t size, char (*why)[256]) {
    (void)cudaGetLastError(); /* see run_eager */
    int st = l->fn(l->user, &l->batch);
    if (st != GP_OK) {
        eager_reason(c, "slot %d batch %zu: the warm-up run returned %d", s->slot, size, st);
        return GP_ECOMPUTE;
    }
    if (GP__CU_ST_WHY(c, compute_error(), "the warm-up run (cudaGetLastError)", *why) != GP_OK ||
        GP__CU_WHY(c, cudaStreamSynchronize(s->st), *why) != GP_OK) {
        eager_reason(c, "slot %d batch %zu: the warm-up run: %s", s->slot, size, *why);
        return GP_ECOMPUTE;
    }
    return GP_OK;
}

/* Warm up, then capture the compute for one bucket. GP_OK also when the bucket stays eager
   (the reason is kept); an error only for a lost device. */
static int capture_bucket(cuda_ctx *c, gp__stream *s, gp__launch *l, int b) {
    char why[256] = "";
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    size_t size = l->batch.buckets[b];
    l->batch.n = l->batch.bucket = size;
    /* gp_batch's promise at this size (fixed-size items: graphs refuse variable ones) */
    l->batch.in_total = size * l->batch.in_bytes;
    l->batch.out_total = size * l->batch.out_bytes;
    if (warm_up(c, s, l, size, &why) != GP_OK) goto out;
    /* Thread-local: only this thread's unsafe calls (cudaMalloc, sync) break the capture;
       other pipelines and the application keep running. */
    if (GP__CU_WHY(c, cudaStreamBeginCapture(s->st, cudaStreamCaptureModeThreadLocal), why) !=
        GP_OK) {
        eager_reason(c, "slot %d batch %zu: %s", s->slot, size, why);
        goto out;
    }
    s->dnn_refused = 0;
    int st = l->fn(l->user, &l->batch);
    int end_rc = GP__CU_WHY(c, cudaStreamEndCapture(s->st, &g), why);
    char why2[256];
    int last_rc = GP__CU_ST_WHY(c, compute_error(), "the compute (cudaGetLastError)", why2);
    if (st != GP_OK)
        eager_reason(c, "slot %d batch %zu: the compute returned %d under capture", s->slot, size,
                     st);
    else if (s->dnn_refused) /* cuda.h: gp_cuda_cudnn's NULL under capture, for that call only */
        eager_reason(c,
                     "slot %d batch %zu: gp_cuda_cudnn() was first called under capture (NULL "
                     "there): call it first from compute_setup",
                     s->slot, size);
    else if (end_rc != GP_OK)
        eager_reason(c, "slot %d batch %zu: %s", s->slot, size, why);
    else if (last_rc != GP_OK)
        eager_reason(c, "slot %d batch %zu: the compute left %s", s->slot, size, why2);
    else if (GP__CU_WHY(c, cudaGraphInstantiate(&exec, g, 0), why) != GP_OK)
        eager_reason(c, "slot %d batch %zu: %s", s->slot, size, why);
    else if (GP__CU_WHY(c, cudaGraphUpload(exec, s->st), why) != GP_OK) {
        eager_reason(c, "slot %d batch %zu: %s", s->slot, size, why);
        GP__CU(c, cudaGraphExecDestroy(exec));
        exec = NULL;
    }
    s->exec[b] = exec;
    if (g) GP__CU(c, cudaGraphDestroy(g));
out:
    if (atomic_load_explicit(&c->sticky, memory_order_relaxed))
        return GP__ERR(c->sink, GP_EDEVICE, "device fault while capturing CUDA graphs: %s", why);
    return GP_OK;
}

static int cuda_slot_ready(void *ctx, gp__stream *s, gp__launch *l) {
    cuda_ctx *c = ctx;
    int rc = GP_OK;
    if (!c->graphs) return GP_OK;
    if ((rc = set_device(c, s->dev)) != GP_OK) return rc;
    for (int b = 0; b < l->batch.num_buckets && rc == GP_OK; b++)
        rc = capture_bucket(c, s, l, b);
    l->batch.n = l->batch.bucket = 0;
    l->batch.in_total = l->batch.out_total = 0;
    /* Make the uploads complete before the first batch; create is allowed to wait. */
    if (rc == GP_OK) rc = GP__CU(c, cudaStreamSynchronize(s->st));
    return rc;
}

/* ---- events ----------------------------------------------------------------------------- */

static int cuda_event_create(void *ctx, int device, gp__event **out) {
    cuda_ctx *c = ctx;
    cuda_dev *d = dev_of(c, device);
    int rc;
    *out = NULL;
    if (!d) return GP__ERR(c->sink, GP_EINVAL, "device %d was not opened", device);
    gp__event *e = calloc(1, sizeof *e);
    if (!e) return GP__ERR(c->sink, GP_ENOMEM, "CUDA event state");
    e->dev = d;
    /* Blocking sync lets the completion thread sleep in the driver; spin_wait polls. Timing
       stays enabled: stage times come from these events. */
    unsigned flags = c->spin ? cudaEventDefault : cudaEventBlockingSync;
    if ((rc = set_device(c, d)) != GP_OK ||
        (rc = GP__CU(c, cudaEventCreateWithFlags(&e->ev, flags))) != GP_OK) {
        free(e);
        return rc;
    }
    *out = e;
    return GP_OK;
}

static void cuda_event_destroy(void *ctx, gp__event *e) {
    cuda_ctx *c = ctx;
    if (set_device(c, e->dev) == GP_OK) GP__CU(c, cudaEventDestroy(e->ev));
    free(e);
}

static int cuda_event_record(void *ctx, gp__event *e, gp__stream *s) {
    cuda_ctx *c = ctx;
    int rc = set_device(c, s->dev);
    if (rc == GP_OK && (rc = GP__CU(c, cudaEventRecord(e->ev, s->st))) == GP_OK) e->recorded = 1;
    return rc;
}

static int cuda_event_wait(void *ctx, gp__event *e) {
    cuda_ctx *c = ctx;
    /* The poller's first CUDA call: with no device set, the runtime would bind (and create)
       device 0's primary context on this thread, also when device 0 is not configured (its
       memory, or a failure where device 0 is exclusive or prohibited). */
    int rc = set_device(c, e->dev);
    if (rc != GP_OK) return rc;
    if (!c->spin) return GP__CU(c, cudaEventSynchronize(e->ev));
    /* spin_query: callbacks on the poller (one completion worker) see no "not yet" of ours */
    return GP__CU_ST(c, spin_query(e->ev), "cudaEventQuery(e->ev)");
}

static int elapsed_ns(cuda_ctx *c, cuda_dev *d, gp__event *e, int64_t *dt) {
    float ms = 0;
    int rc = GP__CU(c, cudaEventElapsedTime(&ms, d->ref, e->ev));
    *dt = (int64_t)llround((double)ms * 1e6);
    return rc == GP_OK && ms > REANCHOR_MS ? 1 : rc;
}

static int cuda_event_time_ns(void *ctx, gp__event *e, uint64_t *ns) {
    cuda_ctx *c = ctx;
    cuda_dev *d = e->dev;
    int64_t dt = 0; /* set by elapsed_ns whatever it returns (gcc -O3 cannot see it) */
    if (!e->recorded) return GP_EINVAL;
    int rc = set_device(c, d);
    if (rc == GP_OK) rc = elapsed_ns(c, d, e, &dt);
    if (rc == 1) { /* far from the anchor: renew it, then measure again */
        if ((rc = anchor(c, d)) == GP_OK) rc = elapsed_ns(c, d, e, &dt);
        if (rc == 1) rc = GP_OK;
    }
    if (rc != GP_OK) return rc;
    *ns = dt >= 0 || (uint64_t)-dt <= d->ref_ns ? d->ref_ns + (uint64_t)dt : 0;
    return GP_OK;
}

/* ---- health and stats ------------------------------------------------------------------- */

static int cuda_healthy(void *ctx) {
    cuda_ctx *c = ctx;
    return atomic_load_explicit(&c->sticky, memory_order_relaxed) ? GP_EDEVICE : GP_OK;
}

static void cuda_stats(void *ctx, gp_stats *s) {
    cuda_ctx *c = ctx;
    s->graph_replays = GP__READ(c->replays);
    s->graph_eager = GP__READ(c->eager);
    if (s->graph_eager)
        copy_str(s->graph_eager_reason, sizeof s->graph_eager_reason, c->eager_reason);
    /* Acquire pairs with dnn_unavailable's release: the note is written. */
    if (atomic_load_explicit(&c->note_set, memory_order_acquire) == 2)
        copy_str(s->backend_note, sizeof s->backend_note, c->note);
}

/* gp_batch_pad / gp_batch_unpad: kernels on the slot's stream (b->impl is the stream's
   handles, its first member). */
static int cuda_pad(void *ctx, const gp_batch *b, void *dst, size_t row_bytes, size_t elem_bytes,
                    uint8_t *mask) {
    cuda_ctx *c = ctx;
    const gp__stream *s = b->impl;
    return GP__CU(c,
                  gp__k_pad(s->st, b->n, b->in, b->in_offsets, dst, row_bytes, elem_bytes, mask));
}

static int cuda_unpad(void *ctx, const gp_batch *b, const void *src, size_t row_bytes) {
    cuda_ctx *c = ctx;
    const gp__stream *s = b->impl;
    return GP__CU(c, gp__k_unpad(s->st, b->n, src, row_bytes, b->out, b->out_offsets));
}

static uint64_t cuda_alloc_count(void *ctx) {
    cuda_ctx *c = ctx;
    return atomic_load_explicit(&c->allocs, memory_order_relaxed);
}

const gp__device_ops gp__cuda_ops = {
    .open = cuda_open,
    .close = cuda_close,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .dev_alloc = cuda_dev_alloc,
    .dev_free = cuda_dev_free,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_bind = cuda_stream_bind,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2h = cuda_copy_d2h,
    .launch = cuda_launch,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_wait = cuda_event_wait,
    .event_time_ns = cuda_event_time_ns,
    .slot_ready = cuda_slot_ready,
    .bind_device = cuda_bind_device,
    .thread_start = cuda_thread_start,
    .healthy = cuda_healthy,
    .stats = cuda_stats,
    .alloc_count = cuda_alloc_count,
    .pad = cuda_pad,
    .unpad = cuda_unpad,
};
