/*
 * gp-bench: throughput and latency against batch size, measured by driving
 * gp_pipeline_submit() and reading the pipeline's own stats over a window after a warm-up;
 * baselines (naive serial loop, each stage alone) in the same run; the doctor's verdict per
 * point. Parts: gp-bench.c (options, sweep, producers), gp-bench-workload.c (workloads and
 * the naive baseline), gp-bench-output.c (table, CSV, JSON, SVG).
 */
#ifndef GP_BENCH_H
#define GP_BENCH_H

#include <gpupipe/gpupipe.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stats.h" /* lib/: windows (gp__stats_mark) and the doctor (gp__diagnose) */

#define GB_MAX_LIST 32
#define GB_MAX_POINTS 512

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
    gp__verdict verdict; /* the pipeline's bottleneck (gp__diag.bottleneck) */
    /* bound: each stage alone at this batch size (a one-slot run), per batch; the compute
       stage runs on `bound_lanes` batches at once. 0 = not run. */
    double bound_items_per_s, bound_h2d_us, bound_compute_us, bound_d2h_us;
    int bound_lanes;
} gb_point;

typedef struct gb_naive {
    int ran;
    char how[160];
    uint64_t items;
    double items_per_s, p50_us, p99_us;
} gb_naive;

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
/* How many batches the compute stage runs at once with `inflight` slots: 1 on a GPU and for
   simulated compute; for CPU compute on the host backend, one per core up to inflight. */
int gb_workload_compute_lanes(const gb_workload *w, gp_backend backend, int inflight);
/* Set compute, item sizes and (host) simulated costs in cfg. */
int gb_workload_configure(gb_workload *w, gp_config *cfg, char *err, size_t len);
size_t gb_workload_in_bytes(const gb_workload *w);
/* Write input item number i (deterministic) to `item`. */
void gb_workload_input(const gb_workload *w, void *item, uint64_t i);
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
