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
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GB_MAX_LIST 32
#define GB_STR_(x) #x
#define GB_STR(x) GB_STR_(x) /* GB_STR(GB_MAX_LIST): "32" */
#define GB_MAX_POINTS 512
/* Every measurement covers at least this many batches: a pipeline window, each stage-alone
   run of the bound, and each thread of the compute-alone run. */
#define GB_MIN_BATCHES 5
/* A pipeline figure above its bound by more than this is a measurement problem. */
#define GB_OVER_BOUND 1.02

typedef enum gb_arrival { GB_CLOSED, GB_RATE, GB_POISSON } gb_arrival;

/* Token counts of variable-size items (--lengths). Item number i has draw(i) tokens, a pure
   function of i, so every packing mode and every point sees the same items. */
typedef enum gb_dist { GB_LEN_NONE, GB_LEN_FIXED, GB_LEN_UNIFORM, GB_LEN_LOGNORMAL } gb_dist;

typedef struct gb_lengths {
    gb_dist kind;     /* GB_LEN_NONE: fixed-size items of --in-bytes (no tokens) */
    uint32_t lo, hi;  /* tokens per item, [lo, hi]; fixed: lo == hi */
    double mu, sigma; /* lognormal: of the natural log of the token count, before clipping */
    char spec[96];    /* as given */
} gb_lengths;

/* How variable-size items are batched (--packing); see the usage text for what each moves
   and computes. GB_PACK_NONE: fixed-size items (no --lengths). */
typedef enum gb_packing {
    GB_PACKED,
    GB_PADDED,
    GB_PADMAX,
    GB_PACKING_COUNT_,
    GB_PACK_NONE
} gb_packing;

#define GB_MAX_TOKENS (1u << 20)

typedef struct gb_opts {
    const char *workload; /* "synthetic", a demo name or a .safetensors path */
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
    double copy_gbps;           /* host backend: simulated copy engines, GB/s; 0 = free */
    int host_spin;              /* host: compute as a busy loop instead of simulated time */
    const char *synthetic_only; /* the first synthetic-only option given (refused for a model) */
    /* Variable-size items. */
    gb_lengths lengths;
    size_t token_bytes; /* synthetic: bytes per token */
    int token_bytes_set;
    double compute_us_per_token; /* synthetic: compute per computed token, us */
    int compute_us_per_token_set;
    size_t max_batch_tokens; /* token budget per batch; 0 = none (max_batch only) */
    gb_packing packing[GB_PACKING_COUNT_];
    int npacking;   /* 0: the default for the workload */
    uint64_t vocab; /* token-id inputs: ids in [0, vocab); 0: the model's vocabulary */
    int completion_workers;
    int cuda_graphs, spin_wait; /* config.cuda_graphs / config.spin_wait for every point and
                                   bound run (the doctor's knobs; the naive loop spins anyway) */
    const char *precision;      /* model workloads on CUDA */
    int naive, bound;           /* baselines */
    const char *csv, *json, *svg;
    int quiet, report;
    const char *command; /* the command line, for the outputs */
} gb_opts;

typedef struct gb_point {
    size_t batch;
    gb_packing packing;
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
    double launch_us; /* of enqueue_us: in the backend's launch (stats.launch_ns per batch) */
    uint64_t window_batches; /* batches that completed in the (median) window */
    gp_verdict verdict;      /* the report's first verdict (gp_diagnosis.verdict) */
    gp_verdict bottleneck;   /* the pipeline's own limit (gp_diagnosis.bottleneck) */
    /* bound: the slowest stage alone at this batch size, items/s (0 = not measured, and
       bound_note says why). Copies per batch from a one-slot run; compute per batch from that
       run (bound_threads 1) or, for CPU compute on the host backend, from the compute alone on
       bound_threads threads (the pipeline's inflight), per thread. */
    double bound_items_per_s, bound_h2d_us, bound_compute_us, bound_d2h_us;
    int bound_threads, bound_alone; /* bound_alone: compute measured alone on threads */
    int bound_in_slot; /* bound_alone from the compute's CPU time in the one-slot run */
    char bound_note[200];
    /* Variable-size items (0 for fixed-size runs): from the window's padding report
       (gp_batch_report_padding: useful and computed tokens) and its H2D bytes, per item carried
       by the window's batches. */
    double tokens_per_s;       /* useful tokens per second: items/s * mean_tokens */
    double useful_bytes_per_s; /* tokens_per_s * bytes per token */
    double h2d_bytes_per_item; /* bytes the H2D stage moved per item (offsets included) */
    double padding;            /* share of computed tokens that were padding */
    double mean_tokens;        /* useful tokens per item */
    double computed_tokens;    /* tokens computed per item, padding included */
} gb_point;

typedef struct gb_naive {
    int ran;
    char how[160];
    uint64_t items, tokens; /* tokens: variable-size items */
    double items_per_s, p50_us, p95_us, p99_us;
    int repeats;                             /* runs behind the median (--repeat) */
    double items_per_s_min, items_per_s_max; /* over those runs */
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
/* The length of the valid UTF-8 sequence at s (1..4), 0 when it is not one (a Latin-1 file
   name, a stray byte): JSON and SVG write U+FFFD for it. */
size_t gb_utf8_len(const unsigned char *s);
/* Output paths, checked before a run, not found unwritable after it: each {flag, path} given
   (NULL paths skipped) must be an existing file we may write or a new one in a directory we
   may write; the first that is not is printed as "TOOL: FLAG why" on stderr and gives -1. */
int gb_check_outputs(const char *tool, const char *const (*outputs)[2], size_t n);
/* Each output path of `outputs` (NULL skipped) names a file no other output and no input of
   `inputs` names (the same string, or an existing file's device and inode): the first that
   does is printed as "TOOL: FLAG PATH: also FLAG2's file" on stderr and gives -1. */
int gb_check_distinct(const char *tool, const char *const (*outputs)[2], size_t nout,
                      const char *const (*inputs)[2], size_t nin);
/* Whether an argument reads as an option ("--name", "-q"), not a value (a negative number is
   a value): a value option followed by one was given no value. */
int gb_is_option(const char *arg);
/* What reached standard output is the result (a table, a description, the per-op time): a
   write that failed there fails the run, as a file's does (README: a report that did not reach
   its file does not pass for one that did). Returns `rc`, or 1 for a 0 when stdout failed
   (said on stderr as "TOOL: standard output: ..."). */
int gb_stdout_checked(const char *tool, int rc);
/* Close output file `f` (NULL: fopen failed), written at `path`: 0 when every write and the
   close succeeded; else -1 with errno set, and a regular file at `path` removed (*removed
   1: no half-written file stays behind to pass for a whole one). */
int gb_close_output(FILE *f, const char *path, int *removed);

/* Parse a --lengths value into *l; 0, or -1 with the reason in `why`. */
int gb_lengths_parse(const char *s, gb_lengths *l, char *why, size_t len);
/* Tokens of item number i (lo..hi); 0 for GB_LEN_NONE. */
uint32_t gb_lengths_draw(const gb_lengths *l, uint64_t i);
/* Mean, median and 99th percentile of the token counts of items 0..n-1 (the items a run
   submits first; n = GB_LEN_SAMPLE). */
#define GB_LEN_SAMPLE 65536
void gb_lengths_stats(const gb_lengths *l, double *mean, uint32_t *p50, uint32_t *p99);
/* "packed", "padded", "padmax" ("fixed" for GB_PACK_NONE). */
const char *gb_packing_name(gb_packing p);

typedef struct gb_run {
    const gb_opts *o;
    char workload_desc[512];
    gp_backend backend; /* what ran */
    int fell_back;
    char fallback_reason[160];
    gb_point pts[GB_MAX_POINTS];
    int npts;
    gb_naive naive;
    char date[32], machine[256];
    /* Variable-size items: the workload's bytes per token and its token counts. */
    size_t token_bytes;
    double mean_tokens;
    uint32_t p50_tokens, p99_tokens;
    char lengths_spec[96];
} gb_run;

/* ---- workloads (gp-bench-workload.c) ---------------------------------------------------- */

typedef struct gb_workload gb_workload;

/* An option or value the workload cannot take: gb_workload_open's answer for a usage error
   (gp-bench exits 2), not a GP_E* code (a model that does not load: exit 1). */
#define GB_EUSAGE 1
/* Open the workload named by o->workload. GP_OK, GB_EUSAGE or an error, with a message in
   err. */
int gb_workload_open(const gb_opts *o, gb_workload **out, char *err, size_t len);
void gb_workload_close(gb_workload *w);
/* Whether a --workload value names a model file (FILE.safetensors), not synthetic or a demo. */
int gb_is_model_file(const char *workload);
const char *gb_workload_describe(const gb_workload *w);
/* GP_OK when the workload can run on `backend` (host or cuda), else GP_ENOTSUP + why. */
int gb_workload_supports(const gb_workload *w, gp_backend backend, char *err, size_t len);
/* "GPU 0 <name> (cc, SMs, driver)" for the run's header; "" in a build without CUDA or where
   the runtime sees no device. */
void gb_gpu_desc(char *buf, size_t len);
/* 1 when the compute is CPU work on the pipeline's slot threads (the host backend with a model
   or --host-spin): its bound is then measured with the compute alone on as many threads. 0 on a
   GPU and for the host backend's simulated compute (one simulated engine). */
int gb_workload_cpu_compute(const gb_workload *w, gp_backend backend);
/* 1 when items have token counts (--lengths, or a model with a variable-length input). */
int gb_workload_varlen(const gb_workload *w);
/* The token counts a variable-length workload submits (a model's default when no --lengths). */
const gb_lengths *gb_workload_lengths(const gb_workload *w);
/* Bytes per token of a variable-length workload (0 otherwise). */
size_t gb_workload_token_bytes(const gb_workload *w);
/* GP_OK when the workload can be batched as `p`, else GP_ENOTSUP + why. */
int gb_workload_packing_ok(const gb_workload *w, gb_packing p, char *err, size_t len);

/* Tokens the compute processed (variable-size items): batches' items, their real tokens and
   the tokens computed, padding included. */
typedef struct gb_tokens {
    uint64_t items, useful, computed;
} gb_tokens;

/*
 * One pipeline's use of a workload: the compute's context (cfg->compute_user) and the
 * producers' submit. Owned by the caller, who keeps it alive until the pipeline is destroyed.
 */
typedef struct gb_feed {
    gb_workload *w;
    gb_packing packing;
    size_t token_bytes, max_tokens;
    size_t in_bytes; /* fixed-size pipelines: bytes of one item */
    /* padmax: the real token count of the item with sequence number s, at lens[s & lens_mask]
       (written before the item is committed: the library's publish orders it before the
       compute reads it, and the slot is not reused before the item is released). */
    uint32_t *lens;
    uint64_t lens_mask;
    /* A model's own compute, wrapped to time it (and, variable-length, to report padding). */
    gp_compute_fn inner;
    void *inner_user;
    int (*inner_setup)(void *user, const gp_batch *b);
    void (*inner_teardown)(void *user, const gp_batch *b);
    /* Host backend, variable lengths: the simulated compute engine, one per pipeline, served in
       arrival order like a GPU's compute queue (the library's engine charges per item only). */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t next, serving; /* under mu */
    int engine_ok;
    /* Sums of what the compute reported, read by the windows: one lock for the three, so a
       window's per-item figures are ratios of sums over the same batches (the library's
       batch_items counts at dispatch, its padding sums at compute). */
    pthread_mutex_t tok_mu;
    int tok_ok;
    gb_tokens tok; /* under tok_mu */
    /* A model's compute: its thread CPU time over the batches after the first (under tok_mu),
       the compute-alone figure of the bound (gb_workload_slot_cpu). */
    double cpu_s;
    uint64_t cpu_seen, cpu_batches, cpu_items;
} gb_feed;

/* Prepare `f` for `packing` (GB_PACK_NONE for fixed-size workloads). GP_OK or an error. */
int gb_feed_init(gb_feed *f, gb_workload *w, gb_packing packing, char *err, size_t len);
void gb_feed_free(gb_feed *f);
/* The sums so far (zeros for fixed-size items). Any thread. */
gb_tokens gb_feed_tokens(gb_feed *f);
/* A model's compute: its thread CPU time so far (0 batches for the synthetic workload). Any
   thread. */
void gb_feed_cpu(gb_feed *f, double *cpu_s, uint64_t *batches, uint64_t *items);
/* 1 when the compute alone is measured as the compute's thread CPU time inside a one-slot
   pipeline instead of by gb_workload_compute_alone: models, whose gp_model_run_host(_packed)
   allocates its scratch on every call (page faults the pipeline's per-slot compute never pays;
   at batch 512 they put the demo MLP's old bound 20% below the pipeline). */
int gb_workload_slot_cpu(const gb_workload *w);
/* Set compute, item sizes and (host) simulated costs in cfg, with f as the compute's context.
   cfg->max_batch and cfg->inflight must be set (padmax sizes its table from them). */
int gb_workload_configure(gb_feed *f, gp_config *cfg, char *err, size_t len);
/* Submit input number i to p as f's packing wants: fixed-size items with gp_pipeline_submit;
   packed and padded at the item's own length with gp_pipeline_submit_ex; padmax padded to
   the maximum in place (reserve, write, commit). Returns the submit's code. */
int gb_feed_submit(gb_feed *f, gp_pipeline *p, uint64_t i, gp_done_fn done, void *user);

/* The compute alone, outside any pipeline, as the host backend calls it (the fixed-size
   synthetic workload with --host-spin; models: gb_workload_slot_cpu): `threads` threads at
   once, each with its own buffers of `batch` items, calling the configured compute back to back
   for at least `seconds` and GB_MIN_BATCHES batches per thread after one warm-up batch.
   *batch_cpu_us: the mean thread CPU time of one batch; *items_per_s: min(threads, cores)
   batches at once at that CPU time (what the threads could do with the cores to themselves,
   whatever else runs on the machine). GP_OK, or an error with a message in err. */
int gb_workload_compute_alone(gb_workload *w, size_t batch, int threads, double seconds,
                              double *items_per_s, double *batch_cpu_us, char *err, size_t len);
/* Input item number i (the workload's largest item, read-only): one of a pool of up to 64
   distinct deterministic inputs, so batches carry varied data. */
const void *gb_workload_item(const gb_workload *w, uint64_t i);
/* The naive serial loop on `backend` for `seconds` (variable lengths: each item at its own
   length). GP_OK, GP_ENOTSUP (+ err) or an error. */
int gb_workload_naive(gb_workload *w, gp_backend backend, double seconds, gb_naive *r, char *err,
                      size_t len);

/* ---- output (gp-bench-output.c) --------------------------------------------------------- */

void gb_print_header(const gb_run *r, FILE *f);
void gb_print_table(const gb_run *r, FILE *f);
int gb_write_csv(const gb_run *r, const char *path, int *removed);
int gb_write_json(const gb_run *r, const char *path, int *removed);
int gb_write_svg(const gb_run *r, const char *path, int *removed);
/* The best pipeline point (highest items/s); -1 when none. */
int gb_best_point(const gb_run *r);

#endif
