/*
 * gp-bench: throughput and latency against batch size, measured by driving
 * gp_pipeline_submit() and reading the pipeline's own stats over a window after a warm-up;
 * baselines (naive serial loop, each stage alone) in the same run; the doctor's verdict per
 * point. Parts: gp-bench.c (options, sweep, producers, windows, the bound),
 * gp-bench-workload.c (workloads, the naive baseline, compute alone), gp-bench-output.c (table,
 * CSV, JSON, SVG), gp-bench-util.c (a latency histogram, JSON strings). Only public headers.
 */
#ifndef GP_BENCH_H
#define GP_BENCH_H

#include <gpupipe/gpupipe.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GB_MAX_LIST 32
#define GB_MAX_POINTS 512
/* Every measurement covers at least this many batches: a pipeline window, each stage-alone
   run of the bound, and each thread of the compute-alone run. */
#define GB_MIN_BATCHES 5
/* A pipeline figure above its bound by more than this is a measurement problem. */
#define GB_OVER_BOUND 1.02

typedef enum gb_arrival { GB_CLOSED, GB_RATE, GB_POISSON } gb_arrival;

typedef struct gb_opts {
    const char *workload; /* "synthetic", "mlp", "cnn" or a .safetensors path */
    gp_backend backend;
    size_t batch[GB_MAX_LIST];
    int nbatch;
    int inflight[GB_MAX_LIST];
    int ninflight;
    int producers[GB_MAX_LIST];
    int nproducers;
    uint32_t delay_us[GB_MAX_LIST];
    int ndelay;
    gb_arrival arrival;
    double rate; /* items/s over all producers (rate=, poisson=) */
    int window;  /* closed: items in flight per producer; 0 = enough to fill every slot */
    double duration_s, warmup_s, bound_s;
    int repeat; /* windows per point (and naive runs); the median by items/s is reported */
    size_t in_bytes, out_bytes;             /* synthetic */
    double compute_us, compute_us_per_item; /* synthetic, per batch and per item */
    double copy_gbps; /* host backend: simulated copy engines, GB/s; 0 = free */
    int host_spin;    /* host: compute as a busy loop instead of simulated time */
    int completion_workers;
    const char *precision; /* model workloads on CUDA */
    int naive, bound;      /* baselines */
    const char *csv, *json, *svg;
    int quiet, report;
    const char *command; /* the command line, for the outputs */
} gb_opts;

typedef struct gb_point {
    size_t batch;
    int inflight, producers;
    uint32_t delay_us;
    double window_s;
    uint64_t completed, failed;
    double items_per_s, offered_per_s;
    double items_per_s_min, items_per_s_max; /* over the --repeat windows */
    int repeats;
    double p50_us, p95_us, p99_us;
    double compute_busy, h2d_busy, d2h_busy; /* fractions of wall time */
    double h2d_gbps, d2h_gbps;
    double enqueue_us, mean_batch;
    uint64_t window_batches; /* batches that completed in the (median) window */
    gp_verdict verdict;      /* the report's first verdict (gp_diagnosis.verdict) */
    gp_verdict bottleneck;   /* the pipeline's own limit (gp_diagnosis.bottleneck) */
    /* bound: the slowest stage alone at this batch size, items/s (0 = not measured, and
       bound_note says why). Copies per batch from a one-slot run; compute per batch from that
       run (bound_threads 1) or, for CPU compute on the host backend, from the compute alone on
       bound_threads threads (the pipeline's inflight), per thread. */
    double bound_items_per_s, bound_h2d_us, bound_compute_us, bound_d2h_us;
    int bound_threads, bound_alone; /* bound_alone: compute measured alone on threads */
    char bound_note[200];
} gb_point;

typedef struct gb_naive {
    int ran;
    char how[160];
    uint64_t items;
    double items_per_s, p50_us, p99_us;
} gb_naive;

/* ---- helpers (gp-bench-util.c) ---------------------------------------------------------- */

#define GB_HIST_SUB 16
#define GB_HIST_BUCKETS (61 * GB_HIST_SUB)

/* Latencies in ns, log-linear buckets (<= 1/16 relative error); zero-initialize. One writer. */
typedef struct gb_hist {
    uint64_t b[GB_HIST_BUCKETS];
    uint64_t n;
} gb_hist;

void gb_hist_add(gb_hist *h, uint64_t ns);
/* Value at quantile q in [0, 1] (bucket midpoint); 0 when empty. */
uint64_t gb_hist_quantile(const gb_hist *h, double q);
/* `s` (NULL: "") as a JSON string literal, escaped. */
void gb_json_str(FILE *f, const char *s);

typedef struct gb_run {
    const gb_opts *o;
    char workload_desc[256];
    gp_backend backend; /* what ran */
    int fell_back;
    char fallback_reason[160];
    gb_point pts[GB_MAX_POINTS];
    int npts;
    gb_naive naive;
    char date[32], machine[160];
} gb_run;

/* ---- workloads (gp-bench-workload.c) ---------------------------------------------------- */

typedef struct gb_workload gb_workload;

/* Open the workload named by o->workload. GP_OK, or an error with a message in err. */
int gb_workload_open(const gb_opts *o, gb_workload **out, char *err, size_t len);
void gb_workload_close(gb_workload *w);
const char *gb_workload_describe(const gb_workload *w);
/* GP_OK when the workload can run on `backend` (host or cuda), else GP_ENOTSUP + why. */
int gb_workload_supports(const gb_workload *w, gp_backend backend, char *err, size_t len);
/* 1 when the compute is CPU work on the pipeline's slot threads (the host backend with a model
   or --host-spin): its bound is then measured with the compute alone on as many threads. 0 on a
   GPU and for the host backend's simulated compute (one simulated engine). */
int gb_workload_cpu_compute(const gb_workload *w, gp_backend backend);
/* The compute alone, outside any pipeline, as the host backend calls it: `threads` threads at
   once, each with its own buffers of `batch` items, calling the configured compute back to back
   for at least `seconds` and GB_MIN_BATCHES batches per thread after one warm-up batch.
   *batch_cpu_us: the mean thread CPU time of one batch; *items_per_s: min(threads, cores)
   batches at once at that CPU time (what the threads could do with the cores to themselves,
   whatever else runs on the machine). GP_OK, or an error with a message in err. */
int gb_workload_compute_alone(gb_workload *w, size_t batch, int threads, double seconds,
                              double *items_per_s, double *batch_cpu_us, char *err, size_t len);
/* Set compute, item sizes and (host) simulated costs in cfg. */
int gb_workload_configure(gb_workload *w, gp_config *cfg, char *err, size_t len);
size_t gb_workload_in_bytes(const gb_workload *w);
/* Input item number i (in_bytes, read-only): one of a pool of up to 64 distinct deterministic
   inputs, so batches carry varied data. */
const void *gb_workload_item(const gb_workload *w, uint64_t i);
/* The naive serial loop on `backend` for `seconds`. GP_OK, GP_ENOTSUP (+ err) or an error. */
int gb_workload_naive(gb_workload *w, gp_backend backend, double seconds, gb_naive *r, char *err,
                      size_t len);

/* ---- output (gp-bench-output.c) --------------------------------------------------------- */

void gb_print_header(const gb_run *r, FILE *f);
void gb_print_table(const gb_run *r, FILE *f);
int gb_write_csv(const gb_run *r, const char *path);
int gb_write_json(const gb_run *r, const char *path);
int gb_write_svg(const gb_run *r, const char *path);
/* The best pipeline point (highest items/s); -1 when none. */
int gb_best_point(const gb_run *r);

#endif
