/*
 * cuda-bench: the CUDA backend's numbers in one run (issue 3), side by side:
 *  (a) copy peaks: pinned cudaMemcpyAsync H2D and D2H for 1..64 MiB, pageable cudaMemcpy for
 *      reference;
 *  (b) transfer-bound pipeline (4 MiB per batch, trivial compute): achieved H2D GB/s / (a);
 *      target >= 0.90;
 *  (c) compute-bound pipeline (spin kernel): compute-stream busy fraction; target >= 0.95;
 *  (d) balanced pipeline (H2D = compute = D2H per batch): items/s / the bound of the slowest
 *      stage alone; target >= 0.90;
 *  (e) the naive serial loop (pageable buffer, one item, cudaMemcpy, kernel, cudaMemcpy,
 *      synchronize) against the pipeline on the same kernel: the ratio.
 * Pipelines are fed by producer threads that reserve and commit ring slots without writing
 * them (what is measured is the pipeline, not memcpy into the ring); the figures come from
 * the pipeline's own stats over a window after a warm-up.
 *
 * Without a usable device it prints why and exits 77. Options: --device N, --seconds S (per
 * pipeline window, default 3), --producers P (default 2), --quick (1 s windows).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include <gpupipe/gpupipe.h>

#include "spin.h"

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

/* GB/s of `reps` async copies of `bytes`, timed with events on one stream. */
static double async_gbps(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                         cudaStream_t st) {
    cudaEvent_t a, b;
    float ms = 0;
    int reps = bytes >= 16 * MIB ? 20 : 100;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaMemcpyAsync(dst, src, bytes, kind, st)); /* warm */
    CK(cudaEventRecord(a, st));
    for (int i = 0; i < reps; i++)
        CK(cudaMemcpyAsync(dst, src, bytes, kind, st));
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return (double)bytes * reps / ((double)ms * 1e-3) / 1e9;
}

static double sync_gbps(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    int reps = bytes >= 16 * MIB ? 10 : 50;
    CK(cudaMemcpy(dst, src, bytes, kind));
    double t0 = now_s();
    for (int i = 0; i < reps; i++)
        CK(cudaMemcpy(dst, src, bytes, kind));
    return (double)bytes * reps / (now_s() - t0) / 1e9;
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

typedef struct spin_cfg {
    uint64_t ns_per_batch, ns_per_item;
    int exclusive;
} spin_cfg;

static int spin_compute(void *user, const gp_batch *b) {
    const spin_cfg *s = user;
    return gp__spin_launch(b->stream, s->ns_per_batch, s->ns_per_item, b->n, s->exclusive) ==
                   cudaSuccess
               ? GP_OK
               : 1;
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
    uint64_t graph_replays;
} window;

static gp_stats snap(gp_pipeline *p) {
    gp_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    gp_pipeline_stats(p, &s);
    return s;
}

/* Run a pipeline for warm-up + window with the producers; measure over the window. */
static window run_pipeline(gp_config *c) {
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
    gp_stats a = snap(p);
    struct timespec d = {(time_t)g_seconds, (long)((g_seconds - (double)(time_t)g_seconds) * 1e9)};
    nanosleep(&d, NULL);
    gp_stats b = snap(p);
    atomic_store(&g_stop, 1);
    for (int i = 0; i < np; i++)
        pthread_join(th[i], NULL);
    gp_pipeline_drain(p, -1);
    if (atomic_load(&g_bad)) {
        fprintf(stderr, "cuda-bench: %llu items failed\n", (unsigned long long)g_bad);
        exit(1);
    }
    gp_pipeline_destroy(p, GP_DESTROY_DRAIN);

    window r;
    memset(&r, 0, sizeof r);
    r.wall_s = (double)(b.wall_ns - a.wall_ns) * 1e-9;
    r.items_per_s = (double)(b.completed - a.completed) / r.wall_s;
    r.h2d_gbps = (double)(b.h2d_bytes - a.h2d_bytes) / r.wall_s / 1e9;
    r.d2h_gbps = (double)(b.d2h_bytes - a.d2h_bytes) / r.wall_s / 1e9;
    r.compute_busy = (double)(b.compute_busy_ns - a.compute_busy_ns) * 1e-9 / r.wall_s;
    r.h2d_busy = (double)(b.h2d_busy_ns - a.h2d_busy_ns) * 1e-9 / r.wall_s;
    r.d2h_busy = (double)(b.d2h_busy_ns - a.d2h_busy_ns) * 1e-9 / r.wall_s;
    uint64_t nb = b.batches - a.batches;
    r.mean_batch = nb ? (double)(b.batch_items - a.batch_items) / (double)nb : 0;
    r.graph_replays = b.graph_replays - a.graph_replays;
    return r;
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
    CK(gp__spin_launch(st, s->ns_per_batch, s->ns_per_item, n, s->exclusive));
    CK(cudaEventRecord(a, st));
    for (int i = 0; i < reps; i++)
        CK(gp__spin_launch(st, s->ns_per_batch, s->ns_per_item, n, s->exclusive));
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
        CK(gp__spin_launch(st, s->ns_per_batch, s->ns_per_item, 1, s->exclusive));
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

int main(int argc, char **argv) {
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
        spin_cfg s = {0, 0, 0};
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

    /* (b) transfer-bound: 256 KiB items, 16 per batch (4 MiB), 64 B out, trivial kernel. */
    spin_cfg trivial = {0, 0, 0};
    gp_config c;
    base_config(&c, 256 << 10, 64, 16, &trivial);
    c.capacity = 256;
    window wb = run_pipeline(&c);
    double b_ratio = wb.h2d_gbps / pk.h2d_peak;
    printf("(b) transfer-bound (4 MiB/batch, trivial kernel): H2D %.2f GB/s = %.3f of pinned peak "
           "%.2f [target >= 0.90: %s]; mean batch %.1f, H2D busy %.3f\n\n",
           wb.h2d_gbps, b_ratio, pk.h2d_peak, verdict(b_ratio, 0.90), wb.mean_batch, wb.h2d_busy);

    /* (c) compute-bound: 500 us exclusive kernel per batch, 4 KiB items, 64 per batch. */
    spin_cfg heavy = {500000, 0, 1};
    base_config(&c, 4096, 4096, 64, &heavy);
    window wc = run_pipeline(&c);
    printf("(c) compute-bound (500 us exclusive kernel/batch): compute busy %.4f of wall "
           "[target >= 0.95: %s]; %.0f items/s, mean batch %.1f\n\n",
           wc.compute_busy, verdict(wc.compute_busy, 0.95), wc.items_per_s, wc.mean_batch);

    /* (d) balanced: 64 KiB in and out, 64 per batch (4 MiB each way); kernel = H2D time. */
    size_t bbytes = 64 * ((size_t)64 << 10);
    double h2d_ns = copy_alone_ns(bbytes, 1), d2h_ns = copy_alone_ns(bbytes, 0);
    spin_cfg bal = {(uint64_t)h2d_ns, 0, 1};
    double k_ns = kernel_alone_ns(&bal, 64);
    double slowest = h2d_ns > d2h_ns ? h2d_ns : d2h_ns;
    slowest = k_ns > slowest ? k_ns : slowest;
    double bound = 64.0 / (slowest * 1e-9);
    base_config(&c, 64 << 10, 64 << 10, 64, &bal);
    c.capacity = 1024;
    window wd = run_pipeline(&c);
    double d_ratio = wd.items_per_s / bound;
    printf("(d) balanced (4 MiB each way/batch): alone per batch H2D %.1f us, kernel %.1f us, D2H "
           "%.1f us -> bound %.0f items/s; pipeline %.0f items/s = %.3f of bound [target >= "
           "0.90: %s]; busy H2D %.3f compute %.3f D2H %.3f, mean batch %.1f\n\n",
           h2d_ns / 1e3, k_ns / 1e3, d2h_ns / 1e3, bound, wd.items_per_s, d_ratio,
           verdict(d_ratio, 0.90), wd.h2d_busy, wd.compute_busy, wd.d2h_busy, wd.mean_batch);

    /* (e) naive loop vs pipeline, same kernel: 20 us per launch + 2 us per item, 16 KiB items. */
    spin_cfg same = {20000, 2000, 1};
    double naive = naive_items_per_s(16 << 10, 16 << 10, &same);
    base_config(&c, 16 << 10, 16 << 10, 64, &same);
    window we = run_pipeline(&c);
    printf("(e) naive serial loop (pageable, 1 item, cudaMemcpy + kernel + cudaMemcpy + sync) "
           "%.0f items/s; pipeline %.0f items/s (mean batch %.1f): %.1fx\n",
           naive, we.items_per_s, we.mean_batch, we.items_per_s / naive);
    return 0;
}
