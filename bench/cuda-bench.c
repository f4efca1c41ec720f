/*
 * cuda-bench: the CUDA backend's numbers in one run (issues 3 and 8), side by side; the targets
 * are the GPU-proof issue's (B.3):
 *  (a) copy peaks: pinned cudaMemcpyAsync H2D and D2H for 1..64 MiB, pageable cudaMemcpy for
 *      reference;
 *  (b) transfer-bound pipeline (1 MiB and 4 MiB per batch, trivial compute): achieved H2D GB/s
 *      / the pinned copy of the same size rotating over a pinned buffer the size of the
 *      pipeline's ring (the target, >= 0.92); also printed: / (a) at the same size, whose
 *      copies all come from one buffer;
 *  (c) compute-bound pipeline (spin kernel): the fraction of wall time some spin kernel was
 *      executing, from %globaltimer stamps the kernels write themselves (first block start,
 *      last block end; union over kernels, clipped to the window); target >= 0.97. Printed
 *      with two figures that are NOT the target: the same union from CUDA events recorded
 *      around each launch (they also count the time a kernel waited behind another slot's
 *      kernel) and the pipeline's own compute_busy (stage events);
 *  (d) overlap: items/s / the bound of the slowest stage alone, for a copy-bound, a
 *      compute-bound and a balanced (H2D = compute = D2H per batch) load, at inflight 1..4;
 *      target >= 0.95 at inflight >= 3;
 *  (e) the naive serial loop (pageable buffer, one item, cudaMemcpy, kernel, cudaMemcpy,
 *      synchronize) against the pipeline on the same kernel: the ratio;
 *  (f) CUDA graphs: a compute of 32 tiny kernels per batch, eager and with cuda_graphs; the
 *      host enqueue time per batch (stats.enqueue_ns / batches), graph / eager; target <= 0.2.
 *      Also the doctor's verdict of each window (eager should read "enqueue": its rule is
 *      checked here on a device);
 *  (g) the slot turnaround, a report: (b) and (d)'s balanced load again with config.spin_wait,
 *      and the balanced load at inflight 3, 4, 6 and 8 both ways, each with the turnaround
 *      split from the per-batch traces (D2H done -> completion seen -> the slot's next start).
 *  (h) (b)'s copies issued by hand, a report: the H2D copies alone on one stream and on 3 in
 *      turn, whole batches on a stream per slot (the pipeline's layout) and with one copy
 *      stream per direction shared by the slots, enqueued ahead (the device alone) and with
 *      the host keeping 3 in flight: where (b)'s per-copy cost comes from.
 * Pipelines are fed by producer threads that reserve and commit ring slots without writing
 * them (what is measured is the pipeline, not memcpy into the ring); the figures come from
 * the pipeline's own stats over a window after a warm-up.
 *
 * The spin kernel is bench/bench-spin.cu (bench-local; the library does not ship it).
 *
 * Without a usable device it prints why and exits 77. Options: --device N, --seconds S (per
 * pipeline window, default 3), --producers P (default 2), --quick (1 s windows).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include <gpupipe/gpupipe.h>

#include "bench-spin.h"

#define MIB ((size_t)1 << 20)
#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "cuda-bench: %s: %s (%s:%d)\n", #call, cudaGetErrorString(e_),         \
                    __FILE__, __LINE__);                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int g_device = 0, g_producers = 2;
static double g_seconds = 3.0, g_warmup = 0.5;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- (a) copy peaks --------------------------------------------------------------------- */

typedef struct peaks {
    double h2d_gbps[4], d2h_gbps[4], pageable_h2d_gbps[4], pageable_d2h_gbps[4];
    double h2d_peak, d2h_peak;
} peaks;
static const size_t sizes[4] = {1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB};

static int dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (sorts v). */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, dbl_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* GB/s of async copies of `bytes` on one stream, timed with events: the median of 5 bursts of
   `reps` copies after one warm burst (a reference that a ratio divides by is not one sample).
   The source walks `span` bytes (>= bytes): copy j reads the piece at (j mod (span / bytes)) *
   bytes, counted across bursts, wrapping around; span == bytes copies one buffer over and over. */
static double async_gbps_walk(void *dst, const void *src, size_t span, size_t bytes,
                              enum cudaMemcpyKind kind, cudaStream_t st) {
    cudaEvent_t a, b;
    double g[5];
    int reps = bytes >= 16 * MIB ? 20 : 100;
    size_t pieces = span >= bytes ? span / bytes : 1, j = 0;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int k = -1; k < 5; k++) {
        float ms = 0;
        CK(cudaEventRecord(a, st));
        for (int i = 0; i < reps; i++, j = (j + 1) % pieces)
            CK(cudaMemcpyAsync(dst, (const char *)src + j * bytes, bytes, kind, st));
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms, a, b));
        if (k >= 0) g[k] = (double)bytes * reps / ((double)ms * 1e-3) / 1e9;
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return median(g, 5);
}

static double async_gbps(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                         cudaStream_t st) {
    return async_gbps_walk(dst, src, bytes, bytes, kind, st);
}

static double sync_gbps(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    int reps = bytes >= 16 * MIB ? 10 : 50;
    CK(cudaMemcpy(dst, src, bytes, kind));
    double t0 = now_s();
    for (int i = 0; i < reps; i++)
        CK(cudaMemcpy(dst, src, bytes, kind));
    return (double)bytes * reps / (now_s() - t0) / 1e9;
}

/* (b)'s target reference: pinned H2D copies of `bytes` whose source rotates over a pinned
   (portable, as the pipeline's) buffer of `span` bytes, the size of the pipeline's input ring,
   into one device buffer of `bytes`. The method of (a): ~0.2 s of copies first (here the
   rotating copies themselves, so every page of the buffer has been read once), then
   async_gbps's median of 5 bursts. */
static double rotating_h2d_gbps(size_t span, size_t bytes) {
    void *ring = NULL, *dev = NULL;
    cudaStream_t st;
    size_t pieces = span >= bytes ? span / bytes : 1;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaHostAlloc(&ring, pieces * bytes, cudaHostAllocPortable));
    CK(cudaMalloc(&dev, bytes));
    memset(ring, 1, pieces * bytes);
    double t_warm = now_s();
    while (now_s() - t_warm < 0.2) {
        for (size_t j = 0; j < pieces; j++)
            CK(cudaMemcpyAsync(dev, (const char *)ring + j * bytes, bytes, cudaMemcpyHostToDevice,
                               st));
        CK(cudaStreamSynchronize(st));
    }
    double gbps = async_gbps_walk(dev, ring, pieces * bytes, bytes, cudaMemcpyHostToDevice, st);
    CK(cudaFree(dev));
    CK(cudaFreeHost(ring));
    CK(cudaStreamDestroy(st));
    return gbps;
}

static void measure_peaks(peaks *pk) {
    void *pinned, *dev, *pageable;
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaHostAlloc(&pinned, 64 * MIB, cudaHostAllocPortable));
    CK(cudaMalloc(&dev, 64 * MIB));
    pageable = malloc(64 * MIB);
    if (!pageable) exit(1);
    memset(pinned, 1, 64 * MIB);
    memset(pageable, 1, 64 * MIB);
    /* ~0.2 s of copies both ways first: the link and the GPU leave their idle states before
       the references that (b) divides by are taken. */
    double t_warm = now_s();
    while (now_s() - t_warm < 0.2) {
        CK(cudaMemcpyAsync(dev, pinned, 64 * MIB, cudaMemcpyHostToDevice, st));
        CK(cudaMemcpyAsync(pinned, dev, 64 * MIB, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
    }
    pk->h2d_peak = pk->d2h_peak = 0;
    for (int i = 0; i < 4; i++) {
        pk->h2d_gbps[i] = async_gbps(dev, pinned, sizes[i], cudaMemcpyHostToDevice, st);
        pk->d2h_gbps[i] = async_gbps(pinned, dev, sizes[i], cudaMemcpyDeviceToHost, st);
        pk->pageable_h2d_gbps[i] = sync_gbps(dev, pageable, sizes[i], cudaMemcpyHostToDevice);
        pk->pageable_d2h_gbps[i] = sync_gbps(pageable, dev, sizes[i], cudaMemcpyDeviceToHost);
        if (pk->h2d_gbps[i] > pk->h2d_peak) pk->h2d_peak = pk->h2d_gbps[i];
        if (pk->d2h_gbps[i] > pk->d2h_peak) pk->d2h_peak = pk->d2h_gbps[i];
    }
    printf("(a) copy peaks (GB/s = 1e9 B/s)\n");
    printf("    %8s  %12s  %12s  %14s  %14s\n", "size", "pinned H2D", "pinned D2H", "pageable H2D",
           "pageable D2H");
    for (int i = 0; i < 4; i++)
        printf("    %5zu MiB  %12.2f  %12.2f  %14.2f  %14.2f\n", sizes[i] / MIB, pk->h2d_gbps[i],
               pk->d2h_gbps[i], pk->pageable_h2d_gbps[i], pk->pageable_d2h_gbps[i]);
    printf("    peak pinned: H2D %.2f GB/s, D2H %.2f GB/s\n\n", pk->h2d_peak, pk->d2h_peak);
    free(pageable);
    CK(cudaFree(dev));
    CK(cudaFreeHost(pinned));
    CK(cudaStreamDestroy(st));
}

/* ---- pipelines -------------------------------------------------------------------------- */

/* Kernel-side measurement of one pipeline run: each launch i stamps stamps[i % STAMP_CAP]
   (generation i / STAMP_CAP + 1) and, while i < ev_cap, is bracketed by the events
   ev[2i] (before) and ev[2i + 1] (after) on its stream. Nothing is read back until the run is
   over: no synchronisation per batch. */
#define STAMP_CAP ((uint64_t)1 << 18)
typedef struct meter {
    _Atomic uint64_t launches;
    bench_spin_stamp *stamps; /* device memory, STAMP_CAP records */
    double kernel_ns;         /* the kernel's intended duration */
    cudaEvent_t *ev;
    uint64_t ev_cap;
} meter;

typedef struct spin_cfg {
    uint64_t ns_per_batch, ns_per_item;
    int exclusive;
    meter *m;    /* NULL: no stamps, no events */
    int kernels; /* launches per batch without a meter (0 counts as 1) */
} spin_cfg;

/* %globaltimer at bench start: the stamps' base. */
static uint64_t g_base_ns;

static int spin_compute(void *user, const gp_batch *b) {
    const spin_cfg *s = user;
    cudaStream_t st = (cudaStream_t)b->stream;
    uint64_t ns = s->ns_per_batch + s->ns_per_item * b->n;
    meter *m = s->m;
    if (!m) {
        for (int k = 0; k < (s->kernels > 1 ? s->kernels : 1); k++)
            if (bench_spin_launch(st, ns, s->exclusive, NULL, 0, 0) != cudaSuccess) return 1;
        return GP_OK;
    }
    uint64_t i = atomic_fetch_add_explicit(&m->launches, 1, memory_order_relaxed);
    int ev = i < m->ev_cap;
    if (ev && cudaEventRecord(m->ev[2 * i], st) != cudaSuccess) return 1;
    if (bench_spin_launch(st, ns, s->exclusive, &m->stamps[i % STAMP_CAP],
                          (uint32_t)(i / STAMP_CAP + 1), g_base_ns) != cudaSuccess)
        return 1;
    if (ev && cudaEventRecord(m->ev[2 * i + 1], st) != cudaSuccess) return 1;
    return GP_OK;
}

static _Atomic int g_stop;
static _Atomic uint64_t g_bad;

static void on_done(void *user, int status, const void *out, size_t bytes) {
    if (status != GP_OK) atomic_fetch_add_explicit(&g_bad, 1, memory_order_relaxed);
}

static void *producer(void *arg) {
    gp_pipeline *p = arg;
    gp_reservation r;
    while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
        int rc = gp_pipeline_reserve(p, &r);
        if (rc != GP_OK) {
            fprintf(stderr, "cuda-bench: reserve: %s\n", gp_err_name(rc));
            exit(1);
        }
        /* The slot keeps whatever it held: the pipeline is measured, not memcpy. */
        if (gp_pipeline_commit(p, &r, on_done, NULL) != GP_OK) exit(1);
    }
    return NULL;
}

typedef struct window {
    double wall_s, items_per_s, h2d_gbps, d2h_gbps, compute_busy, h2d_busy, d2h_busy;
    double mean_batch;
    /* The lowest and highest of the window's three equal pieces: how much the figure moved. */
    double items_lo, items_hi, h2d_lo, h2d_hi;
    uint64_t graph_replays, graph_eager;
    double enqueue_us; /* host enqueue per batch (stats.enqueue_ns / batches) */
    char verdict[24];  /* the doctor's, over the window */
    /* With a meter: kernel execution (globaltimer stamps) and event-bracketed launches, each
       as the union of intervals over the window / its wall time; *_ok = 0: not measured,
       why in *_why. */
    int kernel_ok, events_ok;
    double kernel_busy, events_busy;
    char kernel_why[160], events_why[160];
    uint64_t kernels;              /* launches whose stamps were read */
    double calib_err_us, drift_us; /* host <-> globaltimer mapping: uncertainty, drift */
} window;

static gp_stats snap(gp_pipeline *p) {
    gp_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    gp_pipeline_stats(p, &s);
    return s;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- host clock <-> %globaltimer -------------------------------------------------------- */

static cudaStream_t g_side;                    /* idle stream: timer kernels, window events */
static volatile unsigned long long *g_timer_h; /* mapped host word the timer kernel writes */
static unsigned long long *g_timer_d;

/* 0 when the host <-> %globaltimer mapping could not be made (the reason in g_timer_why):
   (c)'s kernel busy is then "not measured"; every other figure still runs. */
static int g_timer_ok;
static char g_timer_why[160];

/* *off = globaltimer - CLOCK_MONOTONIC (ns), from the quickest of 8 round trips (a kernel
   stores %globaltimer in mapped memory while the host polls); *err_ns: half that round trip,
   which bounds the error. 0 (and g_timer_why) when the kernel's store never arrived. */
static int timer_offset(int64_t *off, double *err_ns) {
    uint64_t best = UINT64_MAX;
    *off = 0;
    for (int k = 0; k < 8; k++) {
        *g_timer_h = 0;
        __sync_synchronize();
        uint64_t t1 = now_ns(), t2;
        CK(bench_timer_now(g_side, g_timer_d));
        unsigned long long v;
        while ((v = *g_timer_h) == 0)
            if (now_ns() - t1 > 2000000000u) {
                snprintf(g_timer_why, sizeof g_timer_why,
                         "the timer kernel's store to mapped host memory did not arrive in 2 s");
                return 0;
            }
        t2 = now_ns();
        CK(cudaStreamSynchronize(g_side));
        if (t2 - t1 < best) {
            best = t2 - t1;
            *off = (int64_t)(v - (t1 + (t2 - t1) / 2)); /* wraps to a negative offset if need be */
        }
    }
    *err_ns = (double)best / 2;
    return 1;
}

static void timer_setup(void) {
    void *h = NULL, *d = NULL;
    CK(cudaStreamCreateWithFlags(&g_side, cudaStreamNonBlocking));
    CK(cudaHostAlloc(&h, sizeof(unsigned long long), cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostGetDevicePointer(&d, h, 0));
    g_timer_h = h;
    g_timer_d = d;
    double err;
    int64_t off;
    g_timer_ok = timer_offset(&off, &err);
    /* Stamps are relative to this base: a second before now, on the GPU's clock. */
    if (g_timer_ok) g_base_ns = (uint64_t)((int64_t)now_ns() + off) - 1000000000u;
}

/* ---- busy fraction from intervals ------------------------------------------------------- */

typedef struct ival {
    double s, e; /* ns on one clock */
} ival;

static int ival_cmp(const void *a, const void *b) {
    double x = ((const ival *)a)->s, y = ((const ival *)b)->s;
    return x < y ? -1 : x > y;
}

/* Length of the union of v[0..n) clipped to [a, b]. Sorts v. */
static double union_in(ival *v, size_t n, double a, double b) {
    qsort(v, n, sizeof *v, ival_cmp);
    double total = 0, cs = 0, ce = -1e300;
    for (size_t i = 0; i < n; i++) {
        double s0 = v[i].s > a ? v[i].s : a, e0 = v[i].e < b ? v[i].e : b;
        if (e0 <= s0) continue;
        if (s0 > ce) {
            if (ce > cs) total += ce - cs;
            cs = s0;
            ce = e0;
        } else if (e0 > ce) {
            ce = e0;
        }
    }
    if (ce > cs) total += ce - cs;
    return total;
}

/* A meter for a run whose kernels take about kernel_ns each; events: also bracket each launch
   with events (two cudaEventRecord calls per batch on the slot's thread: left out where the
   run's own figure is items/s). */
static meter *meter_new(double kernel_ns, int events) {
    meter *m = calloc(1, sizeof *m);
    if (!m) exit(1);
    m->kernel_ns = kernel_ns;
    CK(cudaMalloc((void **)&m->stamps, STAMP_CAP * sizeof(bench_spin_stamp)));
    /* Events for every launch of the run, with room to spare: the ring does not wrap (an
       event is read once the run is over), launches past it get none. */
    if (events) {
        double est = (g_warmup + g_seconds + 1.0) / (kernel_ns * 1e-9) * 1.5 + 256;
        m->ev_cap = est > (double)(1u << 18) ? (1u << 18) : (uint64_t)est;
        m->ev = malloc(2 * m->ev_cap * sizeof *m->ev);
        if (!m->ev) exit(1);
        for (uint64_t i = 0; i < 2 * m->ev_cap; i++)
            CK(cudaEventCreate(&m->ev[i]));
    }
    return m;
}

static void meter_free(meter *m) {
    for (uint64_t i = 0; i < 2 * m->ev_cap; i++)
        CK(cudaEventDestroy(m->ev[i]));
    free(m->ev);
    CK(cudaFree(m->stamps));
    free(m);
}

/* Launches that may have run inside a window whose first and last launch numbers were
   ia and ib: at most `inflight` kernels are outstanding at any time, so a margin of 16 on
   either side covers every kernel that overlapped it. */
#define WINDOW_MARGIN 16

/* Kernel busy from the stamps: [ta, tb] on the host clock, off = globaltimer - host. */
static void kernel_busy(window *r, meter *m, uint64_t ia, uint64_t ib, uint64_t ta, uint64_t tb,
                        int64_t off) {
    uint64_t n = atomic_load(&m->launches);
    uint64_t lo = ia > WINDOW_MARGIN ? ia - WINDOW_MARGIN : 0;
    uint64_t hi = ib + WINDOW_MARGIN < n ? ib + WINDOW_MARGIN : n;
    if (n - lo > STAMP_CAP) {
        snprintf(r->kernel_why, sizeof r->kernel_why,
                 "%" PRIu64 " launches overran the %" PRIu64 "-record stamp ring", n, STAMP_CAP);
        return;
    }
    bench_spin_stamp *h = malloc(STAMP_CAP * sizeof *h);
    ival *v = malloc((size_t)(hi - lo + 1) * sizeof *v);
    if (!h || !v) exit(1);
    CK(cudaMemcpy(h, m->stamps, STAMP_CAP * sizeof *h, cudaMemcpyDeviceToHost));
    size_t nv = 0;
    for (uint64_t i = lo; i < hi; i++) {
        uint64_t s0, e0;
        if (!bench_spin_decode(&h[i % STAMP_CAP], (uint32_t)(i / STAMP_CAP + 1), g_base_ns, &s0,
                               &e0)) {
            snprintf(r->kernel_why, sizeof r->kernel_why,
                     "launch %" PRIu64 " left no stamp (kernel fault?)", i);
            free(h);
            free(v);
            return;
        }
        /* A clock jump clamps a stamp to the base or the 40-bit end: such an interval would
           cover the window and read as busy. Refuse the figure instead. */
        if ((double)(e0 - s0) > 4 * m->kernel_ns + 100000.0) {
            snprintf(r->kernel_why, sizeof r->kernel_why,
                     "launch %" PRIu64 " stamped %.0f us for a %.0f us kernel (a clock jump?)", i,
                     (double)(e0 - s0) / 1e3, m->kernel_ns / 1e3);
            free(h);
            free(v);
            return;
        }
        v[nv++] = (ival){(double)(s0 - g_base_ns), (double)(e0 - g_base_ns)};
    }
    /* The window on the GPU's clock, relative to the base. */
    double a = (double)((int64_t)(ta + (uint64_t)off) - (int64_t)g_base_ns);
    double b = (double)((int64_t)(tb + (uint64_t)off) - (int64_t)g_base_ns);
    r->kernel_busy = union_in(v, nv, a, b) / (b - a);
    r->kernels = nv;
    r->kernel_ok = 1;
    free(h);
    free(v);
}

/* The same union from the events around each launch, on the events' clock: ev_a, ev_b were
   recorded on the idle side stream at the window's ends, ref before the run. */
static void events_busy(window *r, meter *m, uint64_t ia, uint64_t ib, cudaEvent_t ref,
                        cudaEvent_t ev_a, cudaEvent_t ev_b) {
    uint64_t n = atomic_load(&m->launches);
    uint64_t lo = ia > WINDOW_MARGIN ? ia - WINDOW_MARGIN : 0;
    uint64_t hi = ib + WINDOW_MARGIN < n ? ib + WINDOW_MARGIN : n;
    if (m->ev_cap == 0) {
        snprintf(r->events_why, sizeof r->events_why,
                 "off in this run (it would add two cudaEventRecord calls per batch)");
        return;
    }
    if (hi > m->ev_cap) {
        snprintf(r->events_why, sizeof r->events_why,
                 "%" PRIu64 " launches overran the %" PRIu64 " event pairs", hi, m->ev_cap);
        return;
    }
    ival *v = malloc((size_t)(hi - lo + 1) * sizeof *v);
    if (!v) exit(1);
    size_t nv = 0;
    for (uint64_t i = lo; i < hi; i++) {
        float s0, e0;
        CK(cudaEventElapsedTime(&s0, ref, m->ev[2 * i]));
        CK(cudaEventElapsedTime(&e0, ref, m->ev[2 * i + 1]));
        v[nv++] = (ival){(double)s0 * 1e6, (double)e0 * 1e6};
    }
    float a, b;
    CK(cudaEventElapsedTime(&a, ref, ev_a));
    CK(cudaEventElapsedTime(&b, ref, ev_b));
    r->events_busy = union_in(v, nv, (double)a * 1e6, (double)b * 1e6) / (((double)b - a) * 1e6);
    r->events_ok = 1;
    free(v);
}

/* Run a pipeline for warm-up + window with the producers; measure over the window. With a
   meter (the compute's spin_cfg carries it), also the kernels' own busy fraction. */
static window run_pipeline(gp_config *c, meter *m) {
    window r;
    memset(&r, 0, sizeof r);
    snprintf(r.kernel_why, sizeof r.kernel_why, "not metered");
    snprintf(r.events_why, sizeof r.events_why, "not metered");
    cudaEvent_t ref = NULL, ev_a = NULL, ev_b = NULL;
    int64_t off0 = 0;
    double err0 = 0;
    if (m) {
        atomic_store(&m->launches, 0);
        CK(cudaMemset(m->stamps, 0, STAMP_CAP * sizeof(bench_spin_stamp)));
        CK(cudaEventCreate(&ref));
        CK(cudaEventCreate(&ev_a));
        CK(cudaEventCreate(&ev_b));
        if (g_timer_ok) g_timer_ok = timer_offset(&off0, &err0);
        CK(cudaDeviceSynchronize()); /* the memset is on the legacy stream: done before */
        CK(cudaEventRecord(ref, g_side));
    }
    gp_pipeline *p = NULL;
    char err[512];
    int rc = gp_pipeline_create(c, &p, err, sizeof err);
    if (rc != GP_OK) {
        int named = strncmp(err, "GP_E", 4) == 0; /* some details already begin with it */
        fprintf(stderr, "cuda-bench: create: %s%s%s\n", named ? "" : gp_err_name(rc),
                named ? "" : ": ", err);
        exit(1);
    }
    pthread_t th[64];
    int np = g_producers < 64 ? g_producers : 64;
    atomic_store(&g_stop, 0);
    for (int i = 0; i < np; i++)
        if (pthread_create(&th[i], NULL, producer, p) != 0) exit(1);
    struct timespec w = {(time_t)g_warmup, (long)((g_warmup - (double)(time_t)g_warmup) * 1e9)};
    nanosleep(&w, NULL);
    gp_stats_mark *mark = NULL;
    if (gp_pipeline_mark(p, &mark) != GP_OK) exit(1);
    gp_stats a = snap(p);
    uint64_t ta = now_ns(), ia = m ? atomic_load(&m->launches) : 0;
    if (m) CK(cudaEventRecord(ev_a, g_side));
    enum { PIECES = 3 };
    double piece_s = g_seconds / PIECES;
    struct timespec d = {(time_t)piece_s, (long)((piece_s - (double)(time_t)piece_s) * 1e9)};
    gp_stats pc[PIECES + 1];
    pc[0] = a;
    for (int k = 1; k <= PIECES; k++) {
        nanosleep(&d, NULL);
        pc[k] = snap(p);
    }
    gp_stats b = pc[PIECES];
    gp_stats since;
    gp_diagnosis dg;
    memset(&since, 0, sizeof since);
    memset(&dg, 0, sizeof dg);
    since.struct_size = sizeof since;
    dg.struct_size = sizeof dg;
    if (gp_pipeline_stats_since(p, mark, &since) != GP_OK ||
        gp_stats_diagnose(&since, &dg) != GP_OK)
        exit(1);
    gp_stats_mark_free(mark);
    snprintf(r.verdict, sizeof r.verdict, "%s", gp_verdict_name(dg.bottleneck));
    uint64_t tb = now_ns(), ib = m ? atomic_load(&m->launches) : 0;
    if (m) CK(cudaEventRecord(ev_b, g_side));
    atomic_store(&g_stop, 1);
    for (int i = 0; i < np; i++)
        pthread_join(th[i], NULL);
    gp_pipeline_drain(p, -1);
    if (atomic_load(&g_bad)) {
        fprintf(stderr, "cuda-bench: %llu items failed\n", (unsigned long long)g_bad);
        exit(1);
    }
    gp_pipeline_destroy(p, GP_DESTROY_DRAIN);

    r.wall_s = (double)(b.wall_ns - a.wall_ns) * 1e-9;
    r.items_per_s = (double)(b.completed - a.completed) / r.wall_s;
    r.h2d_gbps = (double)(b.h2d_bytes - a.h2d_bytes) / r.wall_s / 1e9;
    r.d2h_gbps = (double)(b.d2h_bytes - a.d2h_bytes) / r.wall_s / 1e9;
    r.compute_busy = (double)(b.compute_busy_ns - a.compute_busy_ns) * 1e-9 / r.wall_s;
    r.h2d_busy = (double)(b.h2d_busy_ns - a.h2d_busy_ns) * 1e-9 / r.wall_s;
    r.d2h_busy = (double)(b.d2h_busy_ns - a.d2h_busy_ns) * 1e-9 / r.wall_s;
    for (int k = 1; k <= PIECES; k++) {
        double ws = (double)(pc[k].wall_ns - pc[k - 1].wall_ns) * 1e-9;
        double it = ws > 0 ? (double)(pc[k].completed - pc[k - 1].completed) / ws : 0;
        double gb = ws > 0 ? (double)(pc[k].h2d_bytes - pc[k - 1].h2d_bytes) / ws / 1e9 : 0;
        if (k == 1 || it < r.items_lo) r.items_lo = it;
        if (k == 1 || it > r.items_hi) r.items_hi = it;
        if (k == 1 || gb < r.h2d_lo) r.h2d_lo = gb;
        if (k == 1 || gb > r.h2d_hi) r.h2d_hi = gb;
    }
    uint64_t nb = b.batches - a.batches;
    r.mean_batch = nb ? (double)(b.batch_items - a.batch_items) / (double)nb : 0;
    r.graph_replays = b.graph_replays - a.graph_replays;
    r.graph_eager = b.graph_eager - a.graph_eager;
    r.enqueue_us = nb ? (double)(b.enqueue_ns - a.enqueue_ns) / (double)nb / 1e3 : 0;
    if (m) {
        CK(cudaStreamSynchronize(g_side));
        double err1 = 0;
        int64_t off1 = 0;
        if (g_timer_ok) g_timer_ok = timer_offset(&off1, &err1);
        r.calib_err_us = (err0 > err1 ? err0 : err1) * 1e-3;
        r.drift_us = (double)(off1 - off0) * 1e-3;
        if (g_timer_ok)
            kernel_busy(&r, m, ia, ib, ta, tb, off0 + (off1 - off0) / 2);
        else
            snprintf(r.kernel_why, sizeof r.kernel_why, "%s", g_timer_why);
        events_busy(&r, m, ia, ib, ref, ev_a, ev_b);
        CK(cudaEventDestroy(ref));
        CK(cudaEventDestroy(ev_a));
        CK(cudaEventDestroy(ev_b));
    }
    return r;
}

/* The three compute-busy figures of a metered window, saying which is which. */
static void print_busy(const char *indent, const window *w) {
    if (w->kernel_ok)
        printf("%skernel busy %.4f: union of the kernels' own %%globaltimer intervals (first block "
               "start .. last block end, %" PRIu64 " launches) over the window's wall time; host "
               "clock mapping +-%.1f us, drift %.1f us over the run\n",
               indent, w->kernel_busy, w->kernels, w->calib_err_us, w->drift_us);
    else
        printf("%skernel busy: not measured: %s\n", indent, w->kernel_why);
    if (w->events_ok)
        printf("%sevent busy  %.4f: union of [event before launch, event after] per batch (also "
               "counts a kernel's wait behind another slot's kernel: an upper bound)\n",
               indent, w->events_busy);
    else
        printf("%sevent busy: not measured: %s\n", indent, w->events_why);
    printf("%sstats busy  %.4f: the pipeline's compute_busy (its stage events)\n", indent,
           w->compute_busy);
}

static void base_config(gp_config *c, size_t in, size_t out, size_t max_batch, spin_cfg *s) {
    gp_config_init(c);
    c->backend = GP_BACKEND_CUDA;
    c->devices[0] = g_device;
    c->num_devices = 1;
    c->item_in_bytes = in;
    c->item_out_bytes = out;
    c->max_batch = max_batch;
    c->inflight = 3;
    c->compute = spin_compute;
    c->compute_user = s;
}

/* Mean wall time of the spin kernel alone, back to back on one stream (ns). */
static double kernel_alone_ns(const spin_cfg *s, size_t n) {
    cudaStream_t st;
    cudaEvent_t a, b;
    float ms;
    int reps = 50;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    uint64_t ns = s->ns_per_batch + s->ns_per_item * n;
    CK(bench_spin_launch(st, ns, s->exclusive, NULL, 0, 0));
    CK(cudaEventRecord(a, st));
    for (int i = 0; i < reps; i++)
        CK(bench_spin_launch(st, ns, s->exclusive, NULL, 0, 0));
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaStreamDestroy(st));
    return (double)ms * 1e6 / reps;
}

/* Mean time of one async copy of `bytes` alone (ns). */
static double copy_alone_ns(size_t bytes, int h2d) {
    void *pinned, *dev;
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaHostAlloc(&pinned, bytes, cudaHostAllocPortable));
    CK(cudaMalloc(&dev, bytes));
    double gbps = h2d ? async_gbps(dev, pinned, bytes, cudaMemcpyHostToDevice, st)
                      : async_gbps(pinned, dev, bytes, cudaMemcpyDeviceToHost, st);
    CK(cudaFree(dev));
    CK(cudaFreeHost(pinned));
    CK(cudaStreamDestroy(st));
    return (double)bytes / gbps; /* bytes / (1e9 B/s) = ns */
}

/* A batch's H2D of `in` bytes and D2H of `out` bytes at the same time, on two streams, as the
   pipeline moves them (one link, a copy engine each way): mean ns per copy of each direction
   over 20 pairs, the median of 5 rounds after a warm one. */
static void duplex_ns(size_t in, size_t out, double *h2d_ns, double *d2h_ns) {
    void *hin, *hout, *din, *dout;
    cudaStream_t s1, s2;
    cudaEvent_t a, b1, b2;
    double h[5], d[5];
    const int reps = 20;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b1));
    CK(cudaEventCreate(&b2));
    CK(cudaHostAlloc(&hin, in, cudaHostAllocPortable));
    CK(cudaHostAlloc(&hout, out, cudaHostAllocPortable));
    CK(cudaMalloc(&din, in));
    CK(cudaMalloc(&dout, out));
    for (int k = -1; k < 5; k++) {
        float m1 = 0, m2 = 0;
        CK(cudaEventRecord(a, s1));
        CK(cudaStreamWaitEvent(s2, a, 0));
        for (int i = 0; i < reps; i++) {
            CK(cudaMemcpyAsync(din, hin, in, cudaMemcpyHostToDevice, s1));
            CK(cudaMemcpyAsync(hout, dout, out, cudaMemcpyDeviceToHost, s2));
        }
        CK(cudaEventRecord(b1, s1));
        CK(cudaEventRecord(b2, s2));
        CK(cudaEventSynchronize(b1));
        CK(cudaEventSynchronize(b2));
        CK(cudaEventElapsedTime(&m1, a, b1));
        CK(cudaEventElapsedTime(&m2, a, b2));
        if (k >= 0) {
            h[k] = (double)m1 * 1e6 / reps;
            d[k] = (double)m2 * 1e6 / reps;
        }
    }
    *h2d_ns = median(h, 5);
    *d2h_ns = median(d, 5);
    CK(cudaFree(din));
    CK(cudaFree(dout));
    CK(cudaFreeHost(hin));
    CK(cudaFreeHost(hout));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b1));
    CK(cudaEventDestroy(b2));
    CK(cudaStreamDestroy(s1));
    CK(cudaStreamDestroy(s2));
}

/* The floor of (f), outside the pipeline: host time to enqueue `kernels` no-work kernels one
   by one, and one cudaGraphLaunch of the same kernels captured; the median over 1000 batches
   (ns). The stream is drained every 16 batches, outside the timed calls, so a full launch
   queue never blocks them. */
static void launch_only_ns(int kernels, double *eager_ns, double *graph_ns) {
    enum { BATCHES = 1000, DRAIN = 16 };
    static double t[BATCHES];
    cudaStream_t st;
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < kernels; k++)
        CK(bench_spin_launch(st, 0, 0, NULL, 0, 0));
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&exec, g, 0));
    CK(cudaGraphUpload(exec, st));
    for (int mode = 0; mode < 2; mode++) {
        for (int i = -DRAIN; i < BATCHES; i++) { /* the first DRAIN batches warm up */
            if (i % DRAIN == 0) CK(cudaStreamSynchronize(st));
            uint64_t t0 = now_ns();
            if (mode == 0)
                for (int k = 0; k < kernels; k++)
                    CK(bench_spin_launch(st, 0, 0, NULL, 0, 0));
            else
                CK(cudaGraphLaunch(exec, st));
            if (i >= 0) t[i] = (double)(now_ns() - t0);
        }
        CK(cudaStreamSynchronize(st));
        *(mode == 0 ? eager_ns : graph_ns) = median(t, BATCHES);
    }
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(st));
}

/* (e) one item at a time from pageable memory, synchronous copies, a sync per item. */
static double naive_items_per_s(size_t in, size_t out, const spin_cfg *s) {
    void *hin = calloc(1, in), *hout = calloc(1, out), *din, *dout;
    cudaStream_t st;
    if (!hin || !hout) exit(1);
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaMalloc(&din, in));
    CK(cudaMalloc(&dout, out));
    uint64_t n = 0;
    double t0 = now_s(), t1;
    do {
        CK(cudaMemcpy(din, hin, in, cudaMemcpyHostToDevice));
        CK(bench_spin_launch(st, s->ns_per_batch + s->ns_per_item, s->exclusive, NULL, 0, 0));
        /* The kernel's stream does not order with the legacy stream of cudaMemcpy: wait. */
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(hout, dout, out, cudaMemcpyDeviceToHost));
        n++;
        t1 = now_s();
    } while (t1 - t0 < g_seconds);
    CK(cudaFree(din));
    CK(cudaFree(dout));
    CK(cudaStreamDestroy(st));
    free(hin);
    free(hout);
    return (double)n / (t1 - t0);
}

static const char *verdict(double v, double target) {
    return v >= target ? "met" : "MISSED";
}

/* (g)'s split of a slot's turnaround, from the pipeline's per-batch traces (on_batch, on the
   completion thread, gp_now_ns() clock): for batch m on slot k after batch m' on the same
   slot, D2H(m') done -> the completion thread seeing it ("seen": the trace call, just before
   the slot is freed), and seen -> m's start event on the GPU, split at the trace's
   t_dispatch (the batcher starting m's dispatch, host clock) into the batcher's wait (its
   wake-up, or items to arrive) and the enqueue up to the start event. */
enum { TURN_CAP = 1 << 16, TURN_SLOTS = 64 };
typedef struct turn_acc {
    uint64_t last_d2h[TURN_SLOTS], seen[TURN_SLOTS];
    int have[TURN_SLOTS];
    double detect_us[TURN_CAP], rest_us[TURN_CAP], total_us[TURN_CAP];
    double wait_us[TURN_CAP], enq_us[TURN_CAP]; /* rest_us = wait_us + enq_us */
    int n;
} turn_acc;

static void turn_trace(void *user, const gp_batch_trace *t) {
    turn_acc *a = user;
    uint64_t now = gp_now_ns();
    int k = t->slot;
    if (k < 0 || k >= TURN_SLOTS) return;
    if (a->have[k] && a->n < TURN_CAP) {
        a->detect_us[a->n] = (double)(int64_t)(a->seen[k] - a->last_d2h[k]) / 1e3;
        a->rest_us[a->n] = (double)(int64_t)(t->t_start - a->seen[k]) / 1e3;
        a->wait_us[a->n] = (double)(int64_t)(t->t_dispatch - a->seen[k]) / 1e3;
        a->enq_us[a->n] = (double)(int64_t)(t->t_start - t->t_dispatch) / 1e3;
        a->total_us[a->n] = (double)(int64_t)(t->t_start - a->last_d2h[k]) / 1e3;
        a->n++;
    }
    a->have[k] = 1;
    a->last_d2h[k] = t->t_d2h_done;
    a->seen[k] = now;
}

static void turn_print(const char *indent, turn_acc *a) {
    if (a->n < 2) {
        printf("%sslot turnaround: too few traced batches (%d)\n", indent, a->n);
        return;
    }
    double det = median(a->detect_us, a->n), rest = median(a->rest_us, a->n);
    double wait = median(a->wait_us, a->n), enq = median(a->enq_us, a->n);
    double tot = median(a->total_us, a->n); /* sorts total_us: its 90th percentile below */
    printf("%sslot turnaround (D2H done -> the slot's next batch starts): median %.1f us, p90 "
           "%.1f us; of which D2H done -> completion seen %.1f us, seen -> next start %.1f us "
           "(seen -> the batcher dispatching it %.1f us, dispatch -> start event %.1f us) "
           "(medians of %d batches)\n",
           indent, tot, a->total_us[a->n * 9 / 10], det, rest, wait, enq, a->n);
}

/* (d) one load at the `n` inflight counts in `inflights` with config.spin_wait = `spin`:
   items/s over the bound of its slowest stage alone; `target`: (d)'s verdict at inflight >= 3
   ((g) reports without one). */
static void overlap_sweep(const char *name, size_t in, size_t out, size_t max_batch, spin_cfg *s,
                          const int *inflights, int n, int spin, int target) {
    double h2d_ns = copy_alone_ns(in * max_batch, 1), d2h_ns = copy_alone_ns(out * max_batch, 0);
    double k_ns = kernel_alone_ns(s, max_batch);
    double slowest = h2d_ns > d2h_ns ? h2d_ns : d2h_ns;
    slowest = k_ns > slowest ? k_ns : slowest;
    double bound = (double)max_batch / (slowest * 1e-9);
    /* Both directions at once share the link: where the host cannot carry both at full rate,
       the one-way bound is out of reach for a reason outside the pipeline. The target is read
       against the one-way bound; the duplex one is printed beside it to tell the two apart. */
    double dh_ns, dd_ns;
    duplex_ns(in * max_batch, out * max_batch, &dh_ns, &dd_ns);
    double dslow = dh_ns > dd_ns ? dh_ns : dd_ns;
    dslow = k_ns > dslow ? k_ns : dslow;
    double dbound = (double)max_batch / (dslow * 1e-9);
    printf("    %s: alone per batch of %zu: H2D %.1f us, kernel %.1f us, D2H %.1f us -> bound %.0f "
           "items/s; both copies at once: H2D %.1f us, D2H %.1f us -> duplex bound %.0f items/s\n",
           name, max_batch, h2d_ns / 1e3, k_ns / 1e3, d2h_ns / 1e3, bound, dh_ns / 1e3, dd_ns / 1e3,
           dbound);
    for (int k = 0; k < n; k++) {
        int inflight = inflights[k];
        gp_config c;
        base_config(&c, in, out, max_batch, s);
        c.inflight = inflight;
        c.capacity = 16 * max_batch;
        c.spin_wait = spin;
        turn_acc *ta = NULL;
        if (!target && (ta = calloc(1, sizeof *ta)) != NULL) { /* (g): trace the turnaround */
            c.on_batch = turn_trace;
            c.on_batch_user = ta;
        }
        window w = run_pipeline(&c, NULL);
        double ratio = w.items_per_s / bound;
        const char *v = "";
        if (target && inflight >= 3)
            v = ratio >= 0.95 ? " [target >= 0.95: met]" : " [target >= 0.95: MISSED]";
        printf("      inflight %d%s: %.0f items/s (1 s pieces %.0f..%.0f) = %.3f of bound%s, %.3f "
               "of duplex bound; busy H2D %.3f compute %.3f D2H %.3f, mean batch %.1f\n",
               inflight, spin ? ", spin_wait" : "", w.items_per_s, w.items_lo, w.items_hi, ratio, v,
               w.items_per_s / dbound, w.h2d_busy, w.compute_busy, w.d2h_busy, w.mean_batch);
        if (ta) turn_print("        ", ta);
        free(ta);
    }
}

/* (b) one batch size: H2D GB/s over the rotating reference (with config.spin_wait = `spin`:
   (g), which reports and sets no target). */
static void transfer_bound(size_t batch_bytes, double fixed_gbps, int spin) {
    spin_cfg trivial = {0, 0, 0, NULL, 1};
    gp_config c;
    base_config(&c, batch_bytes / 16, 64, 16, &trivial);
    c.capacity = 256;
    c.spin_wait = spin;
    turn_acc *ta = NULL;
    if (spin && (ta = calloc(1, sizeof *ta)) != NULL) { /* (g): trace the turnaround */
        c.on_batch = turn_trace;
        c.on_batch_user = ta;
    }
    /* The pinned input ring lib/pipeline.c allocates: capacity items of item_in_bytes. */
    size_t ring = c.capacity * c.item_in_bytes, batch = c.max_batch * c.item_in_bytes;
    double rot_gbps = rotating_h2d_gbps(ring, batch);
    window wb = run_pipeline(&c, NULL);
    double b_ratio = wb.h2d_gbps / rot_gbps, same_ratio = wb.h2d_gbps / fixed_gbps;
    char target[128] = "";
    if (!spin)
        snprintf(target, sizeof target,
                 " [target >= 0.92 on this ratio, against the rotating "
                 "reference: %s]",
                 verdict(b_ratio, 0.92));
    printf("(%s) transfer-bound (%zu MiB/batch, trivial kernel%s): H2D %.2f GB/s (1 s pieces "
           "%.2f..%.2f) = %.3f of pinned cudaMemcpyAsync alone at %zu MiB rotating over a %zu MiB "
           "pinned buffer, the pipeline's ring size (%.2f GB/s, median of 5)%s; mean batch %.1f, "
           "H2D busy %.3f\n",
           spin ? "g" : "b", batch_bytes / MIB, spin ? ", spin_wait" : "", wb.h2d_gbps, wb.h2d_lo,
           wb.h2d_hi, b_ratio, batch / MIB, ring / MIB, rot_gbps, target, wb.mean_batch,
           wb.h2d_busy);
    printf("    = %.3f of pinned cudaMemcpyAsync alone at %zu MiB from one fixed buffer ((a): "
           "%.2f GB/s, median of 5): not the target\n",
           same_ratio, batch_bytes / MIB, fixed_gbps);
    if (ta) turn_print("    ", ta);
    free(ta);
}

/* ---- (h) the copies' issue pattern, outside the pipeline -------------------------------- */

/* (b) left the copy engine busy (0.984 of the time with spin_wait) yet moving 0.78 of a plain
   copy's bytes at 1 MiB, 0.96 at 4 MiB: each copy took ~5 us longer in the pipeline than back
   to back on one stream, whatever its size. (h) issues the same copies by hand, each way the
   pipeline could: it says whether that cost is the slot layout's (one stream per slot, events
   around every stage) and whether one copy stream per direction, shared by the slots, would
   not pay it. A report, no target. */
#define HAND_SLOTS 3
#define HAND_AHEAD 200             /* batches enqueued behind the gate */
#define HAND_GATE_NS 50000000ull   /* the gate kernel: 50 ms, longer than enqueueing them */
#define HAND_OUT ((size_t)16 * 64) /* (b)'s D2H: 16 items of 64 B */
enum { HE_START, HE_H2D, HE_COMP, HE_DONE, HE_N };

typedef struct hand {
    size_t batch, pieces; /* the ring: `pieces` batches of `batch` bytes, as (b)'s */
    int streams;          /* slot streams used: 1 or HAND_SLOTS */
    int full;             /* the pipeline's whole batch, not the H2D copy alone */
    int copy_streams;     /* H2D on cin and D2H on cout, joined to the slot's stream by events */
    cudaStream_t st[HAND_SLOTS], cin, cout, gate;
    cudaEvent_t ev[HAND_SLOTS][HE_N], tail[HAND_SLOTS + 2], t0, t1;
    unsigned char *ring, *hout, *din[HAND_SLOTS], *dout[HAND_SLOTS];
} hand;

static void hand_init(hand *h, size_t batch, size_t pieces) {
    memset(h, 0, sizeof *h);
    h->batch = batch;
    h->pieces = pieces;
    CK(cudaHostAlloc((void **)&h->ring, batch * pieces, cudaHostAllocPortable));
    CK(cudaHostAlloc((void **)&h->hout, HAND_SLOTS * HAND_OUT, cudaHostAllocPortable));
    memset(h->ring, 1, batch * pieces);
    for (int s = 0; s < HAND_SLOTS; s++) {
        CK(cudaStreamCreateWithFlags(&h->st[s], cudaStreamNonBlocking));
        CK(cudaMalloc((void **)&h->din[s], batch));
        CK(cudaMalloc((void **)&h->dout[s], HAND_OUT));
        for (int e = 0; e < HE_N; e++) /* timing on, as the pipeline's stage events */
            CK(cudaEventCreate(&h->ev[s][e]));
    }
    for (int k = 0; k < HAND_SLOTS + 2; k++)
        CK(cudaEventCreateWithFlags(&h->tail[k], cudaEventDisableTiming));
    CK(cudaStreamCreateWithFlags(&h->cin, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&h->cout, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&h->gate, cudaStreamNonBlocking));
    CK(cudaEventCreate(&h->t0));
    CK(cudaEventCreate(&h->t1));
}

static void hand_free(hand *h) {
    CK(cudaDeviceSynchronize());
    for (int s = 0; s < HAND_SLOTS; s++) {
        CK(cudaStreamDestroy(h->st[s]));
        CK(cudaFree(h->din[s]));
        CK(cudaFree(h->dout[s]));
        for (int e = 0; e < HE_N; e++)
            CK(cudaEventDestroy(h->ev[s][e]));
    }
    for (int k = 0; k < HAND_SLOTS + 2; k++)
        CK(cudaEventDestroy(h->tail[k]));
    CK(cudaStreamDestroy(h->cin));
    CK(cudaStreamDestroy(h->cout));
    CK(cudaStreamDestroy(h->gate));
    CK(cudaEventDestroy(h->t0));
    CK(cudaEventDestroy(h->t1));
    CK(cudaFreeHost(h->ring));
    CK(cudaFreeHost(h->hout));
}

/* The streams a layout uses: its slot streams, then the copy streams. */
static int hand_streams(const hand *h, cudaStream_t *out) {
    int n = 0;
    for (int s = 0; s < h->streams; s++)
        out[n++] = h->st[s];
    if (h->copy_streams) out[n++] = h->cin, out[n++] = h->cout;
    return n;
}

/* Batch i on slot i mod streams, its source the ring's piece i mod pieces. With `full`, as
   lib/batcher.c's dispatch enqueues it: event, H2D, event, the kernel (one empty warp, (b)'s
   trivial kernel), event, D2H, event. */
static void hand_enqueue(hand *h, uint64_t i) {
    int s = (int)(i % (uint64_t)h->streams);
    const unsigned char *src = h->ring + (i % h->pieces) * h->batch;
    cudaStream_t st = h->st[s], in = h->copy_streams ? h->cin : st,
                 out = h->copy_streams ? h->cout : st;
    if (!h->full) {
        CK(cudaMemcpyAsync(h->din[s], src, h->batch, cudaMemcpyHostToDevice, st));
        return;
    }
    CK(cudaEventRecord(h->ev[s][HE_START], in));
    CK(cudaMemcpyAsync(h->din[s], src, h->batch, cudaMemcpyHostToDevice, in));
    CK(cudaEventRecord(h->ev[s][HE_H2D], in));
    if (h->copy_streams) CK(cudaStreamWaitEvent(st, h->ev[s][HE_H2D], 0));
    CK(bench_spin_launch(st, 0, 0, NULL, 0, 0));
    CK(cudaEventRecord(h->ev[s][HE_COMP], st));
    if (h->copy_streams) CK(cudaStreamWaitEvent(out, h->ev[s][HE_COMP], 0));
    CK(cudaMemcpyAsync(h->hout + (size_t)s * HAND_OUT, h->dout[s], HAND_OUT, cudaMemcpyDeviceToHost,
                       out));
    CK(cudaEventRecord(h->ev[s][HE_DONE], out));
}

/* The device's rate alone: HAND_AHEAD batches enqueued behind a gate (every stream waits for
   an event after a 50 ms kernel), then timed from the gate's opening to the last stream's end;
   H2D GB/s, the median of 5 rounds after a warm one. -1 when the host's enqueueing outran the
   gate (the device then waited for the host: not this figure). No slot-reuse ordering: the
   device's cost of the issue pattern, not a pipeline. */
static double hand_ahead_gbps(hand *h) {
    cudaStream_t sv[HAND_SLOTS + 2];
    int ns = hand_streams(h, sv);
    double g[5];
    for (int k = -1; k < 5; k++) {
        float ms = 0;
        CK(bench_spin_launch(h->gate, HAND_GATE_NS, 0, NULL, 0, 0));
        CK(cudaEventRecord(h->t0, h->gate));
        for (int j = 0; j < ns; j++)
            CK(cudaStreamWaitEvent(sv[j], h->t0, 0));
        for (uint64_t i = 0; i < HAND_AHEAD; i++)
            hand_enqueue(h, i);
        cudaError_t q = cudaEventQuery(h->t0);
        if (q != cudaErrorNotReady) CK(q);
        (void)cudaGetLastError(); /* "not ready" may stay as the last error: the next launch's */
        for (int j = 0; j < ns; j++) {
            CK(cudaEventRecord(h->tail[j], sv[j]));
            CK(cudaStreamWaitEvent(h->gate, h->tail[j], 0));
        }
        CK(cudaEventRecord(h->t1, h->gate));
        CK(cudaEventSynchronize(h->t1));
        if (q == cudaSuccess) return -1;
        CK(cudaEventElapsedTime(&ms, h->t0, h->t1));
        if (k >= 0) g[k] = (double)h->batch * HAND_AHEAD / ((double)ms * 1e-3) / 1e9;
    }
    return median(g, 5);
}

/* A minimal hand-written pipeline: the host keeps HAND_SLOTS batches in flight, polling the
   oldest's last event (as spin_wait does) before enqueueing the next on its slot. H2D GB/s
   over `seconds` after 0.1 s. */
static double hand_loop_gbps(hand *h, double seconds) {
    uint64_t i = 0, i0 = 0;
    double t_start = now_s(), t0 = 0, t;
    for (;; i++) {
        int s = (int)(i % (uint64_t)h->streams);
        if (i >= (uint64_t)h->streams) {
            cudaError_t q;
            while ((q = cudaEventQuery(h->ev[s][HE_DONE])) == cudaErrorNotReady)
                ;
            CK(q);
            (void)cudaGetLastError(); /* as in hand_ahead_gbps */
        }
        t = now_s();
        if (!t0 && t - t_start >= 0.1) t0 = t, i0 = i;
        if (t0 && t - t0 >= seconds) break;
        hand_enqueue(h, i);
    }
    CK(cudaDeviceSynchronize());
    return (double)h->batch * (double)(i - i0) / (t - t0) / 1e9;
}

static void hand_row(const char *what, double gbps, double ref) {
    if (gbps < 0)
        printf("      %-62s not measured: the host's enqueueing outran the 50 ms gate\n", what);
    else
        printf("      %-62s %6.2f GB/s = %.3f of (1)\n", what, gbps, gbps / ref);
}

static void copy_patterns(size_t batch_bytes, size_t pieces) {
    hand h;
    hand_init(&h, batch_bytes, pieces);
    printf("    %zu MiB per batch, the source rotating over %zu MiB of pinned memory:\n",
           batch_bytes / MIB, batch_bytes * pieces / MIB);
    h.streams = 1;
    double ref = hand_ahead_gbps(&h);
    if (ref <= 0) {
        printf("      (1) not measured: the host's enqueueing outran the 50 ms gate\n");
        hand_free(&h);
        return;
    }
    printf("      %-62s %6.2f GB/s\n", "(1) the H2D copies alone, one stream, back to back", ref);
    h.streams = HAND_SLOTS;
    hand_row("(2) the copies alone, 3 streams in turn", hand_ahead_gbps(&h), ref);
    h.full = 1;
    hand_row("(3) whole batches, a stream per slot (the pipeline's layout)", hand_ahead_gbps(&h),
             ref);
    h.copy_streams = 1;
    hand_row("(4) whole batches, one copy stream each way + 3 slot streams", hand_ahead_gbps(&h),
             ref);
    h.copy_streams = 0;
    hand_row("(5) = (3) with the host keeping 3 batches in flight", hand_loop_gbps(&h, 0.5), ref);
    h.copy_streams = 1;
    hand_row("(6) = (4) with the host keeping 3 batches in flight", hand_loop_gbps(&h, 0.5), ref);
    hand_free(&h);
}

int main(int argc, char **argv) {
    /* Line by line: a run cut by its timeout keeps every finished figure in the log. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            g_device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            g_seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--producers") && i + 1 < argc)
            g_producers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            g_seconds = 1.0, g_warmup = 0.3;
        else {
            fprintf(stderr, "usage: %s [--device N] [--seconds S] [--producers P] [--quick]\n",
                    argv[0]);
            return 2;
        }
    }
    if (g_seconds <= 0 || g_producers < 1) return 2;

    /* The pipeline's own verdict on the device comes first: it says why when there is none. */
    {
        gp_config c;
        spin_cfg s = {0, 0, 0, NULL, 1};
        base_config(&c, 64, 64, 8, &s);
        gp_pipeline *p = NULL;
        char err[512];
        int rc = gp_pipeline_create(&c, &p, err, sizeof err);
        if (rc == GP_ENODEV) {
            printf("cuda-bench: no usable CUDA device %d, nothing measured: %s\n", g_device, err);
            return 77;
        }
        if (rc != GP_OK) {
            int named = strncmp(err, "GP_E", 4) == 0; /* some details already begin with it */
            fprintf(stderr, "cuda-bench: create: %s%s%s\n", named ? "" : gp_err_name(rc),
                    named ? "" : ": ", err);
            return 1;
        }
        gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
    }
    CK(cudaSetDevice(g_device));
    timer_setup();
    struct cudaDeviceProp prop;
    int drv = 0, rt = 0;
    CK(cudaGetDeviceProperties(&prop, g_device));
    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));
    printf("cuda-bench (gpupipe %s): device %d %s, cc %d.%d, %d SMs, PCI %04x:%02x:%02x; driver "
           "CUDA %d.%d, runtime %d.%d\n",
           gp_version(), g_device, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
           prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, drv / 1000, drv % 1000 / 10,
           rt / 1000, rt % 1000 / 10);
    printf("windows: %.1f s after %.1f s warm-up, %d producer thread(s), 3 slots\n\n", g_seconds,
           g_warmup, g_producers);

    peaks pk;
    measure_peaks(&pk);

    /* (b) transfer-bound: 16 items per batch of 64 KiB (1 MiB) and 256 KiB (4 MiB), 64 B out,
       trivial kernel, a 256-item ring (16 MiB, 64 MiB). The target reference: the pinned copy
       of the same size alone with its source rotating over a pinned buffer of the ring's size,
       as the pipeline's copies walk its ring (an IOMMU's mappings then cost both the same).
       Also printed, not the target: (a)'s copy of that size, always from one buffer. */
    for (int i = 0; i < 2; i++)
        transfer_bound(sizes[i], pk.h2d_gbps[i], 0);
    printf("\n");
    gp_config c;

    /* (c) compute-bound: 500 us exclusive kernel per batch, 4 KiB items, 64 per batch. */
    meter *mc = meter_new(500000, 1);
    spin_cfg heavy = {500000, 0, 1, mc, 1};
    base_config(&c, 4096, 4096, 64, &heavy);
    window wc = run_pipeline(&c, mc);
    meter_free(mc);
    if (wc.kernel_ok)
        printf("(c) compute-bound (500 us exclusive kernel/batch): kernel busy %.4f of wall "
               "[target >= 0.97: %s]; %.0f items/s, mean batch %.1f\n",
               wc.kernel_busy, verdict(wc.kernel_busy, 0.97), wc.items_per_s, wc.mean_batch);
    else
        printf("(c) compute-bound (500 us exclusive kernel/batch): kernel busy not measured "
               "[target >= 0.97: NOT MEASURED]; %.0f items/s, mean batch %.1f\n",
               wc.items_per_s, wc.mean_batch);
    print_busy("    ", &wc);
    printf("\n");

    /* (d) overlap at inflight 1..4, 64 items per batch: copy-bound (64 KiB in, 4 MiB H2D per
       batch, the kernel half the H2D time), compute-bound (4 KiB items, 500 us kernel) and
       balanced (64 KiB in and out, the kernel = the H2D time). Exclusive kernels: one batch's
       kernel fills the GPU, as a real model's would. */
    printf("(d) overlap: items/s / the bound of the slowest stage alone [target >= 0.95 at "
           "inflight >= 3]\n");
    double h2d_ns = copy_alone_ns(64 * ((size_t)64 << 10), 1);
    static const int d_inflights[] = {1, 2, 3, 4};
    spin_cfg copyb = {(uint64_t)(h2d_ns / 2), 0, 1, NULL, 1};
    overlap_sweep("copy-bound", 64 << 10, 64, 64, &copyb, d_inflights, 4, 0, 1);
    spin_cfg compb = {500000, 0, 1, NULL, 1};
    overlap_sweep("compute-bound", 4 << 10, 4 << 10, 64, &compb, d_inflights, 4, 0, 1);
    spin_cfg bal = {(uint64_t)h2d_ns, 0, 1, NULL, 1};
    overlap_sweep("balanced", 64 << 10, 64 << 10, 64, &bal, d_inflights, 4, 0, 1);
    printf("\n");

    /* (e) naive loop vs pipeline, same kernel: 20 us per launch + 2 us per item, 16 KiB items. */
    spin_cfg same = {20000, 2000, 1, NULL, 1};
    double naive = naive_items_per_s(16 << 10, 16 << 10, &same);
    base_config(&c, 16 << 10, 16 << 10, 64, &same);
    window we = run_pipeline(&c, NULL);
    printf("(e) naive serial loop (pageable, 1 item, cudaMemcpy + kernel + cudaMemcpy + sync) "
           "%.0f items/s; pipeline %.0f items/s (mean batch %.1f): %.1fx\n",
           naive, we.items_per_s, we.mean_batch, we.items_per_s / naive);

    /* (f) CUDA graphs on a launch-bound compute: 32 one-warp kernels of no work per batch. */
    spin_cfg tiny = {0, 0, 0, NULL, 32};
    window wf[2];
    for (int g = 0; g < 2; g++) {
        base_config(&c, 4 << 10, 4 << 10, 64, &tiny);
        c.cuda_graphs = g;
        wf[g] = run_pipeline(&c, NULL);
    }
    double f_ratio = wf[0].enqueue_us > 0 ? wf[1].enqueue_us / wf[0].enqueue_us : 0;
    printf("(f) CUDA graphs, 32 kernels per batch: host enqueue per batch (the pipeline's whole "
           "dispatch: taking the items, events, both copies and the launches) eager %.1f us, "
           "graph %.1f us: graph / eager %.3f [target <= 0.2: %s]\n",
           wf[0].enqueue_us, wf[1].enqueue_us, f_ratio,
           wf[0].enqueue_us > 0 && f_ratio <= 0.2 ? "met" : "MISSED");
    double lo_e = 0, lo_g = 0;
    launch_only_ns(32, &lo_e, &lo_g);
    printf("    the launches alone, outside the pipeline (median of 1000 batches): 32 kernels "
           "%.1f us, one graph launch %.1f us: %.3f; the rest of the dispatch above is the "
           "pipeline's fixed cost per batch\n",
           lo_e / 1e3, lo_g / 1e3, lo_e > 0 ? lo_g / lo_e : 0);
    for (int g = 0; g < 2; g++)
        printf("    %s: %.0f items/s, mean batch %.1f, graph replays %" PRIu64 ", eager batches "
               "%" PRIu64 ", busy compute %.3f, the doctor's verdict: %s%s\n",
               g ? "graphs" : "eager ", wf[g].items_per_s, wf[g].mean_batch, wf[g].graph_replays,
               wf[g].graph_eager, wf[g].compute_busy, wf[g].verdict,
               !g && strcmp(wf[g].verdict, "enqueue") != 0
                   ? " (expected \"enqueue\": see RESULTS.md, checklist item 13)"
                   : "");

    /* (g) The slot's turnaround (RESULTS.md, "First GPU run"): on the first H200 run (b) left
       the copy engine idle 40 % / 11 % of the time with full batches waiting, and the balanced
       load took ~170 us per slot cycle beyond its three stages. Again with config.spin_wait
       (the completion thread polls its events instead of sleeping in cudaEventSynchronize),
       and the balanced load with more slots: how much of that is the completion's wake-up,
       and how many slots hide the rest. A report, no target. */
    printf("\n(g) the slot turnaround: (b) and the balanced load of (d) with spin_wait, and with "
           "more slots [report, no target]\n");
    for (int i = 0; i < 2; i++)
        transfer_bound(sizes[i], pk.h2d_gbps[i], 1);
    static const int g_inflight[] = {3, 4, 6, 8};
    overlap_sweep("balanced, blocking waits", 64 << 10, 64 << 10, 64, &bal, g_inflight, 4, 0, 0);
    overlap_sweep("balanced, spin_wait", 64 << 10, 64 << 10, 64, &bal, g_inflight, 4, 1, 0);

    printf("\n(h) (b)'s H2D copies issued by hand, outside the pipeline: (1)-(4) enqueued "
           "ahead behind a gate (the device alone), (5)-(6) the host keeping 3 batches in "
           "flight [report, no target]\n");
    for (int i = 0; i < 2; i++)
        copy_patterns(sizes[i], 16); /* (b)'s ring: 256 items = 16 batches */
    return 0;
}
