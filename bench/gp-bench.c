/*
 * gp-bench: pick a batch size with numbers. For each point of the sweep it creates a pipeline,
 * drives gp_pipeline_submit() from producer threads (closed loop, fixed rate or Poisson),
 * measures a window after a warm-up with the pipeline's own stats, and asks the doctor for the
 * verdict. Baselines in the same run: the naive serial loop, and each stage alone (bound).
 * Run `gp-bench --help` for the flags.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "gp-bench.h"

static const char usage[] =
    "usage: gp-bench [options]\n"
    "Throughput and latency of a gpupipe pipeline against batch size, with the doctor's\n"
    "verdict per point and baselines from the same run. No options: a quick demo sweep.\n"
    "\n"
    "workload\n"
    "  --workload W          synthetic (default) | mlp | cnn | encoder | FILE.safetensors\n"
    "  --in-bytes N          synthetic: input bytes per item (default 3072)\n"
    "  --out-bytes N         synthetic: output bytes per item (default 40)\n"
    "  --compute-us X        synthetic: compute per batch, us (default 200)\n"
    "  --compute-us-per-item X   synthetic: compute per item, us (default 5)\n"
    "  --copy-gbps X         host backend: simulated H2D/D2H engines, GB/s; 0 = free\n"
    "                        (default 12, a PCIe 3.0 x16 link)\n"
    "  --host-spin           synthetic, host backend: compute as a busy loop, not simulated\n"
    "                        time\n"
    "  --precision P         model on CUDA: fp32 | tf32 | fp16 | bf16\n"
    "variable-size items (token counts; item i always has the same count, in every mode)\n"
    "  --lengths D           fixed (default: fixed-size items of --in-bytes) | fixed:N |\n"
    "                        uniform:A,B | lognormal:MU,SIGMA,A,B (exp(MU + SIGMA * Z)\n"
    "                        tokens, rounded, clipped to [A, B]; text-like:\n"
    "                        lognormal:4.5,0.9,8,512, the default for a model whose input is\n"
    "                        variable-length)\n"
    "  --token-bytes N       synthetic: bytes per token (default 256)\n"
    "  --compute-us-per-token X  synthetic: compute per computed token, padding included, us\n"
    "                        (default 0.5), on top of --compute-us and --compute-us-per-item\n"
    "  --max-batch-tokens N  token budget per batch (max_batch_bytes); padmax: N / max\n"
    "                        tokens items per batch (default: none, max_batch only)\n"
    "  --packing LIST        how batches carry items, every mode in the same run, same\n"
    "                        arrivals and lengths (default: all when lengths vary, for a model\n"
    "                        packed,padmax; else packed):\n"
    "                        packed: each item at its own length (gp_pipeline_submit_ex);\n"
    "                          H2D moves the real tokens, the compute pays for them\n"
    "                        padded: moved packed as above; the compute pads the batch to its\n"
    "                          longest item (gp_batch_pad, with a mask) and pays for n *\n"
    "                          longest tokens, as a collate_fn that pads per batch (which\n"
    "                          would also copy the padding)\n"
    "                        padmax: every item padded to the maximum in a fixed-size ring\n"
    "                          slot; H2D moves and the compute pays for n * max tokens\n"
    "                        both = packed,padded; all = packed,padded,padmax\n"
    "  --vocab N             models with token-id inputs: ids uniform in [0, N), N at most\n"
    "                          the model's vocabulary (default: the whole vocabulary)\n"
    "pipeline and sweep (lists are comma separated; every combination is run)\n"
    "  --backend B           auto (default) | host | cuda\n"
    "  --batch LIST          max_batch values (default 1,2,4,...,512)\n"
    "  --inflight LIST       in-flight slots (default 3)\n"
    "  --producers LIST      producer threads (default 2)\n"
    "  --max-delay-us LIST   batcher delay (default 0)\n"
    "  --completion-workers N  callback threads (default 1)\n"
    "  --cuda-graphs         CUDA: capture each batch size's compute once and replay it\n"
    "                        (config.cuda_graphs; fixed-size items), for every point\n"
    "  --spin-wait           poll instead of sleeping: the completion thread on the GPU's\n"
    "                        events, the batcher for a free slot (config.spin_wait; a core\n"
    "                        each), for every point\n"
    "load\n"
    "  --arrival A           closed (default): each producer keeps --window items in flight;\n"
    "                        rate=R: R items/s in total, evenly spaced; poisson=R: Poisson\n"
    "                        arrivals at R items/s in total; R >= 1 (a window needs\n"
    "                        batches to complete)\n"
    "  --window N            closed: items in flight per producer (default: enough to fill\n"
    "                        every slot and the next batch, (inflight+2)*batch/producers;\n"
    "                        with heavy per-item costs 4*batch keeps batches full)\n"
    "  --duration S          measured seconds per point, at least; a window also holds at\n"
    "                        least 5 whole batches (default 0.5)\n"
    "  --warmup S            seconds before each measurement (default 0.1)\n"
    "  --repeat N            measure N windows per point (and N naive runs) and report the\n"
    "                        median by items/s, with min and max in CSV/JSON (default 1)\n"
    "baselines and output\n"
    "  --baseline LIST       naive,bound (default) | naive | bound | none\n"
    "  --bound-duration S    seconds per bound run, at least; each also runs 5 batches\n"
    "                        after a warm-up one (default 0.2). The bound: the slowest stage\n"
    "                        alone, in a one-slot run of full batches; CPU compute (host\n"
    "                        backend): its thread CPU time per batch, inflight batches at\n"
    "                        once as the cores allow\n"
    "  --csv F  --json F  --svg F   write the results (SVG: items/s and p99 vs batch);\n"
    "                        with token counts also useful tokens/s, bytes/s, H2D bytes per\n"
    "                        item and the padding share per point\n"
    "  --report              print the doctor's full report for every point\n"
    "  -q, --quiet           no progress line on stderr\n"
    "  -h, --help            this text\n"
    "exit status: 0 every point ran; 1 the workload (a model that does not load), a backend or\n"
    "a point failed; 2 a bad option or value, options that do not go together or that the\n"
    "workload cannot take, an output path that cannot be written\n";

/* ---- option parsing --------------------------------------------------------------------- */

static int bad(const char *flag, const char *val, const char *why) {
    if (val)
        fprintf(stderr, "gp-bench: %s %s: %s\n", flag, val, why);
    else
        fprintf(stderr, "gp-bench: %s: %s\n", flag, why);
    fprintf(stderr, "(gp-bench --help lists the options)\n");
    return 2;
}

static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9') return -1; /* no sign, no leading space (strtoull takes both) */
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* A comma-separated list with an empty element ("", "1,,2", a comma at either end), which
   strtok_r would skip. */
static int empty_element(const char *s) {
    size_t len = strlen(s);
    return !len || s[0] == ',' || s[len - 1] == ',' || strstr(s, ",,") != NULL;
}

/* "1,2,4" -> values, each once (a repeat is dropped); -1 on a bad element, an empty one, too
   many, or none. */
static int parse_list(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, int max) {
    int n = 0;
    char buf[512];
    if (strlen(s) >= sizeof buf || empty_element(s)) return -1;
    strcpy(buf, s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        uint64_t x;
        if (parse_u64(t, lo, hi, &x) != 0) return -1;
        int seen = 0;
        for (int k = 0; k < n; k++)
            seen |= out[k] == x;
        if (seen) continue;
        if (n == max) return -1;
        out[n++] = x;
    }
    return n ? n : -1;
}

/* "packed,padmax", "both", "all": the modes in the order given, each once. */
static int parse_packing(const char *s, gb_opts *o) {
    char buf[64];
    if (strlen(s) >= sizeof buf || empty_element(s)) return -1;
    strcpy(buf, s);
    o->npacking = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        gb_packing add[GB_PACKING_COUNT_];
        int n = 0;
        if (!strcmp(t, "both") || !strcmp(t, "all")) {
            add[n++] = GB_PACKED;
            add[n++] = GB_PADDED;
            if (t[0] == 'a') add[n++] = GB_PADMAX;
        } else {
            int k = 0;
            while (k < GB_PACKING_COUNT_ && strcmp(t, gb_packing_name((gb_packing)k)) != 0)
                k++;
            if (k == GB_PACKING_COUNT_) return -1;
            add[n++] = (gb_packing)k;
        }
        for (int i = 0; i < n; i++) {
            int seen = 0;
            for (int j = 0; j < o->npacking; j++)
                seen |= o->packing[j] == add[i];
            if (!seen) o->packing[o->npacking++] = add[i];
        }
    }
    return o->npacking ? 0 : -1;
}

/* The options that take a value (synthetic: the synthetic workload's alone, refused with a
   model), and the flags (none). */
static const struct {
    const char *name;
    int synthetic;
} valued[] = {{"--workload", 0},
              {"--backend", 0},
              {"--batch", 0},
              {"--inflight", 0},
              {"--producers", 0},
              {"--max-delay-us", 0},
              {"--completion-workers", 0},
              {"--arrival", 0},
              {"--window", 0},
              {"--duration", 0},
              {"--repeat", 0},
              {"--warmup", 0},
              {"--bound-duration", 0},
              {"--in-bytes", 1},
              {"--out-bytes", 1},
              {"--compute-us", 1},
              {"--compute-us-per-item", 1},
              {"--copy-gbps", 0},
              {"--precision", 0},
              {"--lengths", 0},
              {"--token-bytes", 0},
              {"--compute-us-per-token", 1},
              {"--max-batch-tokens", 0},
              {"--vocab", 0},
              {"--packing", 0},
              {"--baseline", 0},
              {"--csv", 0},
              {"--json", 0},
              {"--svg", 0}};
static const char *const flags[] = {"--help",      "--quiet",       "--report",
                                    "--host-spin", "--cuda-graphs", "--spin-wait"};

static int parse_args(int argc, char **argv, gb_opts *o) {
    uint64_t v[GB_MAX_LIST];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            exit(0);
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o->quiet = 1;
            continue;
        }
        if (!strcmp(a, "--report")) {
            o->report = 1;
            continue;
        }
        if (!strcmp(a, "--host-spin")) {
            o->host_spin = 1;
            if (!o->synthetic_only) o->synthetic_only = "--host-spin";
            continue;
        }
        if (!strcmp(a, "--cuda-graphs")) {
            o->cuda_graphs = 1;
            continue;
        }
        if (!strcmp(a, "--spin-wait")) {
            o->spin_wait = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) return bad(a, NULL, "unexpected argument");
        const char *val = NULL;
        char name[48];
        const char *eq = strchr(a, '=');
        if (eq && (size_t)(eq - a) < sizeof name) { /* --flag=value */
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = '\0';
            val = eq + 1;
            a = name;
        }
        /* The name first: an unknown one is that, not "needs a value"; a flag given a value
           says it takes none. */
        size_t known = 0;
        while (known < sizeof valued / sizeof valued[0] && strcmp(a, valued[known].name))
            known++;
        if (known == sizeof valued / sizeof valued[0]) {
            for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
                if (!strcmp(a, flags[k])) return bad(a, val, "takes no value");
            return bad(a, NULL, "unknown option");
        }
        if (!val) {
            if (i + 1 >= argc) return bad(a, NULL, "needs a value");
            /* "--json --quiet" is a forgotten value, not a file named --quiet. */
            if (gb_is_option(argv[i + 1]))
                return bad(a, NULL,
                           "needs a value (the next word is an option; a value that starts "
                           "with -: write OPTION=VALUE, or ./NAME for a file)");
            val = argv[++i];
        }
        if (valued[known].synthetic && !o->synthetic_only) /* the static name, not name[] */
            o->synthetic_only = valued[known].name;
        double d;
        int n;
        if (!strcmp(a, "--workload")) {
            o->workload = val;
        } else if (!strcmp(a, "--backend")) {
            if (!strcmp(val, "auto"))
                o->backend = GP_BACKEND_AUTO;
            else if (!strcmp(val, "host"))
                o->backend = GP_BACKEND_HOST;
            else if (!strcmp(val, "cuda"))
                o->backend = GP_BACKEND_CUDA;
            else
                return bad(a, val, "expected auto, host or cuda");
        } else if (!strcmp(a, "--batch")) {
            if ((n = parse_list(val, 1, 1u << 20, v, GB_MAX_LIST)) < 0)
                return bad(
                    a, val,
                    "expected a list of at most " GB_STR(GB_MAX_LIST) " sizes in 1..1048576");
            for (o->nbatch = 0; o->nbatch < n; o->nbatch++)
                o->batch[o->nbatch] = (size_t)v[o->nbatch];
        } else if (!strcmp(a, "--inflight")) {
            if ((n = parse_list(val, 1, 64, v, GB_MAX_LIST)) < 0)
                return bad(a, val,
                           "expected a list of at most " GB_STR(GB_MAX_LIST) " values in 1..64");
            for (o->ninflight = 0; o->ninflight < n; o->ninflight++)
                o->inflight[o->ninflight] = (int)v[o->ninflight];
        } else if (!strcmp(a, "--producers")) {
            if ((n = parse_list(val, 1, 256, v, GB_MAX_LIST)) < 0)
                return bad(a, val,
                           "expected a list of at most " GB_STR(GB_MAX_LIST) " values in 1..256");
            for (o->nproducers = 0; o->nproducers < n; o->nproducers++)
                o->producers[o->nproducers] = (int)v[o->nproducers];
        } else if (!strcmp(a, "--max-delay-us")) {
            if ((n = parse_list(val, 0, 60000000, v, GB_MAX_LIST)) < 0)
                return bad(
                    a, val,
                    "expected a list of at most " GB_STR(GB_MAX_LIST) " delays in 0..60000000 us");
            for (o->ndelay = 0; o->ndelay < n; o->ndelay++)
                o->delay_us[o->ndelay] = (uint32_t)v[o->ndelay];
        } else if (!strcmp(a, "--completion-workers")) {
            if (parse_u64(val, 1, 64, v) != 0) return bad(a, val, "expected 1..64");
            o->completion_workers = (int)v[0];
        } else if (!strcmp(a, "--arrival")) {
            if (!strcmp(val, "closed")) {
                o->arrival = GB_CLOSED;
            } else if (!strncmp(val, "rate=", 5) && !parse_double(val + 5, 1, 1e9, &d)) {
                o->arrival = GB_RATE;
                o->rate = d;
            } else if (!strncmp(val, "poisson=", 8) && !parse_double(val + 8, 1, 1e9, &d)) {
                o->arrival = GB_POISSON;
                o->rate = d;
            } else {
                return bad(a, val, "expected closed, rate=R or poisson=R (R items/s, 1..1e9)");
            }
        } else if (!strcmp(a, "--window")) {
            if (parse_u64(val, 1, 1u << 24, v) != 0) return bad(a, val, "expected 1..16777216");
            o->window = (int)v[0];
        } else if (!strcmp(a, "--duration")) {
            if (parse_double(val, 0.01, 3600, &o->duration_s))
                return bad(a, val, "expected seconds in 0.01..3600");
        } else if (!strcmp(a, "--repeat")) {
            if (parse_u64(val, 1, 99, v) != 0) return bad(a, val, "expected 1..99");
            o->repeat = (int)v[0];
        } else if (!strcmp(a, "--warmup")) {
            if (parse_double(val, 0, 600, &o->warmup_s))
                return bad(a, val, "expected seconds in 0..600");
        } else if (!strcmp(a, "--bound-duration")) {
            if (parse_double(val, 0.01, 600, &o->bound_s))
                return bad(a, val, "expected seconds in 0.01..600");
        } else if (!strcmp(a, "--in-bytes") || !strcmp(a, "--out-bytes")) {
            if (parse_u64(val, 1, 64u << 20, v) != 0)
                return bad(a, val, "expected bytes in 1..67108864");
            *(a[2] == 'i' ? &o->in_bytes : &o->out_bytes) = (size_t)v[0];
        } else if (!strcmp(a, "--compute-us")) {
            if (parse_double(val, 0, 1e7, &o->compute_us))
                return bad(a, val, "expected microseconds in 0..1e7");
        } else if (!strcmp(a, "--compute-us-per-item")) {
            if (parse_double(val, 0, 1e6, &o->compute_us_per_item))
                return bad(a, val, "expected microseconds in 0..1e6");
        } else if (!strcmp(a, "--copy-gbps")) {
            if (parse_double(val, 0, 1e4, &o->copy_gbps))
                return bad(a, val, "expected GB/s in 0..10000");
        } else if (!strcmp(a, "--precision")) {
            o->precision = val; /* checked with the model (gp-bench-workload.c) */
        } else if (!strcmp(a, "--lengths")) {
            char why[320];
            if (gb_lengths_parse(val, &o->lengths, why, sizeof why)) return bad(a, val, why);
        } else if (!strcmp(a, "--token-bytes")) {
            if (parse_u64(val, 1, 1u << 20, v) != 0)
                return bad(a, val, "expected bytes per token in 1..1048576");
            o->token_bytes = (size_t)v[0];
            o->token_bytes_set = 1;
        } else if (!strcmp(a, "--compute-us-per-token")) {
            if (parse_double(val, 0, 1e6, &o->compute_us_per_token))
                return bad(a, val, "expected microseconds in 0..1e6");
            o->compute_us_per_token_set = 1;
        } else if (!strcmp(a, "--max-batch-tokens")) {
            if (parse_u64(val, 1, 1u << 30, v) != 0)
                return bad(a, val, "expected tokens in 1..1073741824");
            o->max_batch_tokens = (size_t)v[0];
        } else if (!strcmp(a, "--vocab")) {
            if (parse_u64(val, 1, INT32_MAX, v) != 0)
                return bad(a, val, "expected a vocabulary size in 1..2147483647");
            o->vocab = v[0];
        } else if (!strcmp(a, "--packing")) {
            if (parse_packing(val, o) != 0)
                return bad(a, val,
                           "expected a list of packed, padded, padmax, or both (packed,padded) "
                           "or all");
        } else if (!strcmp(a, "--baseline")) {
            o->naive = o->bound = 0;
            char buf[64];
            if (strlen(val) >= sizeof buf || empty_element(val))
                return bad(a, val, "expected naive, bound, naive,bound or none");
            strcpy(buf, val);
            char *save = NULL;
            for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (!strcmp(t, "naive"))
                    o->naive = 1;
                else if (!strcmp(t, "bound"))
                    o->bound = 1;
                else if (strcmp(t, "none") != 0 || strcmp(val, "none") != 0)
                    return bad(a, val, "expected naive, bound, naive,bound or none");
            }
        } else if (!strcmp(a, "--csv")) {
            o->csv = val;
        } else if (!strcmp(a, "--json")) {
            o->json = val;
        } else if (!strcmp(a, "--svg")) {
            o->svg = val;
        } else {
            return bad(a, NULL, "unknown option");
        }
    }
    /* Refused, not ignored: a setting the chosen load never reads. */
    if (o->window && o->arrival != GB_CLOSED)
        return bad("--window", NULL,
                   "sets the closed loop's items in flight; --arrival rate/poisson sets the load "
                   "by its rate: leave one out");
    return 0;
}

static void defaults(gb_opts *o) {
    memset(o, 0, sizeof *o);
    o->workload = "synthetic";
    o->backend = GP_BACKEND_AUTO;
    for (o->nbatch = 0; o->nbatch < 10; o->nbatch++)
        o->batch[o->nbatch] = (size_t)1 << o->nbatch;
    o->inflight[0] = 3;
    o->ninflight = 1;
    o->producers[0] = 2;
    o->nproducers = 1;
    o->delay_us[0] = 0;
    o->ndelay = 1;
    o->arrival = GB_CLOSED;
    o->duration_s = 0.5;
    o->warmup_s = 0.1;
    o->bound_s = 0.2;
    o->repeat = 1;
    o->in_bytes = 3072;
    o->out_bytes = 40;
    o->compute_us = 200;
    o->compute_us_per_item = 5;
    o->copy_gbps = 12;
    o->token_bytes = 256;
    o->compute_us_per_token = 0.5;
    o->completion_workers = 1;
    o->naive = o->bound = 1;
}

/* ---- producers -------------------------------------------------------------------------- */

typedef struct point_ctx point_ctx;

typedef struct producer {
    point_ctx *ctx;
    pthread_t th;
    int id, inited, started;
    uint64_t next;               /* input number of the next submit */
    _Atomic int64_t outstanding; /* submitted, callback not run yet */
    _Atomic int waiting;         /* the producer sleeps on cv for the window to open */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t rng;
} producer;

struct point_ctx {
    gp_pipeline *p;
    const gb_opts *o;
    gb_feed *feed;         /* the workload as this pipeline uses it */
    int64_t window;        /* closed loop */
    double per_producer_s; /* open loop: mean seconds between this producer's arrivals */
    _Atomic int stop;
    _Atomic uint64_t failed, submit_errors;
    int last_submit_error;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_until(double t) {
    struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void sleep_s(double s) {
    if (s > 0) sleep_until(now_s() + s);
}

static void on_done(void *user, int status, const void *out, size_t bytes) {
    producer *pr = user;
    if (status != GP_OK) atomic_fetch_add_explicit(&pr->ctx->failed, 1, memory_order_relaxed);
    /* seq_cst pairs with the producer's store of `waiting` then load of `outstanding`. */
    int64_t left = atomic_fetch_sub(&pr->outstanding, 1) - 1;
    if (left < pr->ctx->window && atomic_load(&pr->waiting)) {
        pthread_mutex_lock(&pr->mu);
        pthread_cond_signal(&pr->cv);
        pthread_mutex_unlock(&pr->mu);
    }
}

/* Closed loop: wait until fewer than `window` items are in flight. 0 when stopping. */
static int wait_window(producer *pr) {
    point_ctx *c = pr->ctx;
    if (atomic_load(&pr->outstanding) < c->window) return 1;
    pthread_mutex_lock(&pr->mu);
    atomic_store(&pr->waiting, 1);
    while (atomic_load(&pr->outstanding) >= c->window && !atomic_load(&c->stop)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&pr->cv, &pr->mu, &ts);
    }
    atomic_store(&pr->waiting, 0);
    pthread_mutex_unlock(&pr->mu);
    return !atomic_load(&c->stop);
}

static double next_gap(producer *pr) {
    point_ctx *c = pr->ctx;
    if (c->o->arrival == GB_RATE) return c->per_producer_s;
    uint64_t x = pr->rng; /* xorshift64*, then an exponential gap */
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    pr->rng = x;
    double u = (double)((x * 0x2545F4914F6CDD1Du) >> 11) / 9007199254740992.0;
    return -log1p(-u) * c->per_producer_s;
}

static void *producer_main(void *arg) {
    producer *pr = arg;
    point_ctx *c = pr->ctx;
    int open_loop = c->o->arrival != GB_CLOSED;
    double next = now_s() + (open_loop ? c->per_producer_s * pr->id / c->o->producers[0] : 0);
    while (!atomic_load_explicit(&c->stop, memory_order_relaxed)) {
        if (open_loop) {
            /* In steps of at most 20 ms, so a stop is seen within them even at a rate of one
               item in minutes (it was seen only at the next arrival). */
            double t;
            while ((t = now_s()) < next && !atomic_load_explicit(&c->stop, memory_order_relaxed))
                sleep_until(next - t > 0.02 ? t + 0.02 : next);
            if (atomic_load_explicit(&c->stop, memory_order_relaxed)) break;
            next += next_gap(pr);
        } else if (!wait_window(pr)) {
            break;
        }
        atomic_fetch_add(&pr->outstanding, 1);
        uint64_t item = pr->next;
        pr->next += (uint64_t)c->o->producers[0]; /* producers interleave the inputs */
        int rc = gb_feed_submit(c->feed, c->p, item, on_done, pr);
        if (rc != GP_OK) {
            atomic_fetch_sub(&pr->outstanding, 1);
            atomic_fetch_add(&c->submit_errors, 1);
            c->last_submit_error = rc;
            if (rc != GP_EAGAIN) break;
        }
    }
    return NULL;
}

/* ---- windows aligned to batches --------------------------------------------------------- */

/*
 * A window opens and closes inside the pipeline's per-batch trace callback (gp_config.on_batch),
 * which runs on the completion poller before the batch's callbacks, after those of the batch
 * before it (with one completion worker): so a window holds whole batches, and items/s is not
 * off by the part of a batch that a window edge would cut. Batches of different slots may
 * complete in bunches (slots that started together finish together), so a window also closes
 * at a batch of the slot it opened at: it then holds whole rounds of the slots, whatever the
 * bunching. It closes at the first such batch after the duration once GB_MIN_BATCHES batches
 * completed in it. The main thread asks, the callback acts; the states hand the mark over
 * without a lock.
 */
enum {
    W_IDLE,      /* no window */
    W_START,     /* main: open at the next batch */
    W_OPENING,   /* callback: taking the mark */
    W_OPEN,      /* mark taken; counting batches */
    W_END,       /* main: close at the next batch once min_batches completed */
    W_CLOSING,   /* callback: reading the window */
    W_DONE,      /* window in `out` */
    W_ABANDONED, /* main gave up waiting for batches */
};

typedef struct windower {
    gp_pipeline *p;
    _Atomic int phase;
    gp_stats_mark *mark;  /* written by the callback before W_OPEN */
    int mark_slot;        /* the slot of the batch the window opened at; callback only */
    _Atomic uint64_t all; /* every device batch so far (warm-up) */
    _Atomic uint64_t batches;
    int mark_rc, since_rc;
    gp_stats out; /* written by the callback before W_DONE */
    /* Bound runs: stage times of the batches after the first `skip` (status GP_OK only), the
       first GB_MAX_TRACED of them; poller only until the pipeline is destroyed. */
    int trace_stages;
    uint64_t skip, seen;
    _Atomic uint64_t traced;
    double *h2d_ns, *compute_ns, *d2h_ns; /* GB_MAX_TRACED each */
    double items;                         /* sum over traced batches */
    /* Variable-size items: the compute's token sums at the window's open, and over the window
       (written by the callback with mark and out). */
    gb_feed *feed;
    gb_tokens tok_open, tok_out;
} windower;

static gb_tokens tokens_since(gb_feed *f, const gb_tokens *open) {
    gb_tokens now = gb_feed_tokens(f);
    return (gb_tokens){now.items - open->items, now.useful - open->useful,
                       now.computed - open->computed};
}

#define GB_MAX_TRACED 4096

static void on_batch(void *user, const gp_batch_trace *t) {
    windower *wd = user;
    atomic_fetch_add(&wd->all, 1);
    uint64_t k = atomic_load(&wd->traced);
    if (wd->trace_stages && t->status == GP_OK && wd->seen++ >= wd->skip && k < GB_MAX_TRACED) {
        wd->h2d_ns[k] = (double)(t->t_h2d_done - t->t_start);
        wd->compute_ns[k] = (double)(t->t_compute_done - t->t_h2d_done);
        wd->d2h_ns[k] = (double)(t->t_d2h_done - t->t_compute_done);
        wd->items += (double)t->n;
        atomic_store(&wd->traced, k + 1);
    }
    int ph = atomic_load(&wd->phase);
    if (ph == W_START && atomic_compare_exchange_strong(&wd->phase, &ph, W_OPENING)) {
        wd->mark_rc = gp_pipeline_mark(wd->p, &wd->mark);
        wd->tok_open = gb_feed_tokens(wd->feed);
        wd->mark_slot = t->slot;
        atomic_store(&wd->batches, 0);
        atomic_store(&wd->phase, W_OPEN);
        return;
    }
    if (ph != W_OPEN && ph != W_END) return;
    uint64_t n = atomic_fetch_add(&wd->batches, 1) + 1; /* the batch before this one is done */
    if (ph == W_END && n >= GB_MIN_BATCHES && t->slot == wd->mark_slot &&
        atomic_compare_exchange_strong(&wd->phase, &ph, W_CLOSING)) {
        wd->out.struct_size = sizeof wd->out;
        wd->since_rc =
            wd->mark_rc == GP_OK ? gp_pipeline_stats_since(wd->p, wd->mark, &wd->out) : wd->mark_rc;
        wd->tok_out = tokens_since(wd->feed, &wd->tok_open);
        atomic_store(&wd->phase, W_DONE);
    }
}

/* Wait until the phase leaves `from` (the callback moved it), for at most `cap_s`; then try to
   abandon. Returns the phase it ended in. */
static int wait_phase(windower *wd, int from, int to_abandon, double cap_s) {
    double give_up = now_s() + cap_s;
    for (;;) {
        int ph = atomic_load(&wd->phase);
        if (ph != from && ph != from + 1) return ph; /* from + 1: the callback is acting */
        if (ph == from && now_s() > give_up &&
            atomic_compare_exchange_strong(&wd->phase, &ph, to_abandon))
            return to_abandon;
        sleep_s(0.0005);
    }
}

/* ---- one point -------------------------------------------------------------------------- */

typedef struct point_spec {
    size_t batch;
    gb_packing packing;
    int inflight, producers;
    uint32_t delay_us;
    int64_t window; /* 0: auto */
    double warmup_s, duration_s;
    int repeat;
    gb_arrival arrival;
} point_spec;

typedef struct window_set {
    gp_stats s[99];
    uint64_t batches[99]; /* whole batches in each window; 0: not aligned */
    gb_tokens tok[99];    /* the compute's token sums over each window */
    int n;
} window_set;

/* A pipeline with its producers, running. Lives in the caller's frame: threads point into it. */
typedef struct point_run {
    gb_opts local; /* producer_main reads producers[0] and arrival */
    gb_feed feed;
    int fed;              /* feed initialized */
    uint64_t arena_bytes; /* the pipeline's input arena (variable-size items), 0 if none */
    point_ctx c;
    producer *prs;
    int nprs;
    windower wd;
} point_run;

static double window_rate(const gp_stats *x) {
    return (double)x->completed * 1e9 / (double)(x->wall_ns ? x->wall_ns : 1);
}

/* Create the pipeline (with the trace callback) and start the producers. On error everything
   started is stopped by point_stop, which must be called either way. */
static int point_start(const gb_opts *o, gb_workload *w, const point_spec *ps, int trace_stages,
                       point_run *r, char *err, size_t len) {
    memset(r, 0, sizeof *r);
    /* Before create: the poller reads these from the first batch on. */
    if (trace_stages) {
        r->wd.h2d_ns = malloc(3 * GB_MAX_TRACED * sizeof(double));
        if (!r->wd.h2d_ns) {
            snprintf(err, len, "out of memory");
            return GP_ENOMEM;
        }
        r->wd.compute_ns = r->wd.h2d_ns + GB_MAX_TRACED;
        r->wd.d2h_ns = r->wd.compute_ns + GB_MAX_TRACED;
    }
    r->wd.trace_stages = trace_stages;
    r->wd.feed = &r->feed;
    r->wd.skip = 1; /* the warm-up batch */
    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = o->backend;
    cfg.max_batch = ps->batch;
    cfg.inflight = ps->inflight;
    cfg.max_delay_us = ps->delay_us;
    cfg.completion_workers = o->completion_workers;
    cfg.cuda_graphs = o->cuda_graphs;
    cfg.spin_wait = o->spin_wait;
    cfg.on_batch = on_batch;
    cfg.on_batch_user = &r->wd;
    int rc = gb_feed_init(&r->feed, w, ps->packing, err, len);
    if (rc != GP_OK) return rc;
    r->fed = 1;
    if ((rc = gb_workload_configure(&r->feed, &cfg, err, len)) != GP_OK) return rc;
    r->local = *o;
    r->local.producers[0] = ps->producers;
    r->local.arrival = ps->arrival;
    point_ctx *c = &r->c;
    c->o = &r->local;
    c->feed = &r->feed;
    c->window = ps->window ? ps->window
                           : (int64_t)(((size_t)ps->inflight + 2) * ps->batch + ps->producers - 1) /
                                 ps->producers;
    if (c->window < 1) c->window = 1;
    c->per_producer_s = o->rate > 0 ? ps->producers / o->rate : 0;
    if ((rc = gp_pipeline_create(&cfg, &c->p, err, len)) != GP_OK) return rc;
    r->arena_bytes = cfg.arena_bytes;
    r->wd.p = c->p;

    r->prs = calloc((size_t)ps->producers, sizeof *r->prs);
    if (!r->prs) {
        snprintf(err, len, "out of memory");
        return GP_ENOMEM;
    }
    r->nprs = ps->producers;
    for (int i = 0; i < ps->producers; i++) {
        producer *pr = &r->prs[i];
        pr->ctx = c;
        pr->id = i;
        pr->rng = 0x853C49E6748FEA9Bu ^ ((uint64_t)i * 0x9E3779B97F4A7C15u) ^ ps->batch;
        pr->next = (uint64_t)i;
        if (pthread_mutex_init(&pr->mu, NULL) != 0) {
            snprintf(err, len, "producer %d: pthread_mutex_init failed", i);
            return GP_ESYS;
        }
        if (pthread_cond_init(&pr->cv, NULL) != 0) {
            pthread_mutex_destroy(&pr->mu);
            snprintf(err, len, "producer %d: pthread_cond_init failed", i);
            return GP_ESYS;
        }
        pr->inited = 1;
        if (pthread_create(&pr->th, NULL, producer_main, pr) != 0) {
            snprintf(err, len, "producer %d: pthread_create failed", i);
            return GP_ESYS;
        }
        pr->started = 1;
    }
    return GP_OK;
}

/* Stop the producers, drain, report what went wrong (when rc is GP_OK so far), destroy. */
static int point_stop(point_run *r, int rc, char *err, size_t len) {
    point_ctx *c = &r->c;
    atomic_store(&c->stop, 1);
    for (int i = 0; i < r->nprs; i++) {
        producer *pr = &r->prs[i];
        if (pr->started) {
            pthread_mutex_lock(&pr->mu);
            pthread_cond_broadcast(&pr->cv);
            pthread_mutex_unlock(&pr->mu);
            pthread_join(pr->th, NULL);
        }
    }
    if (c->p) {
        /* A hang guard, not a deadline: a slow point (a CPU model, long items) may need minutes
           for what is in flight; only a minute without one item completing fails it. */
        int drc, still = 0;
        uint64_t seen = UINT64_MAX;
        while ((drc = gp_pipeline_drain(c->p, 10 * 1000 * 1000)) == GP_ETIMEDOUT) {
            gp_stats s;
            memset(&s, 0, sizeof s);
            s.struct_size = sizeof s;
            if (gp_pipeline_stats(c->p, &s) != GP_OK) break;
            still = s.completed == seen ? still + 1 : 0;
            seen = s.completed;
            if (still >= 6) break;
        }
        if (rc == GP_OK && drc != GP_OK) {
            snprintf(err, len, "drain: %s", gp_strerror(drc));
            rc = drc;
        }
        if (rc == GP_OK && atomic_load(&c->submit_errors) && c->last_submit_error != GP_EAGAIN) {
            char detail[256];
            gp_pipeline_last_error(c->p, detail, sizeof detail);
            snprintf(err, len, "submit: %s (%s)", gp_strerror(c->last_submit_error), detail);
            rc = c->last_submit_error;
        }
        if (rc == GP_OK && atomic_load(&c->failed)) {
            char detail[256];
            gp_pipeline_last_error(c->p, detail, sizeof detail);
            snprintf(err, len, "%llu items failed: %s", (unsigned long long)atomic_load(&c->failed),
                     detail);
            rc = GP_ECOMPUTE;
        }
        gp_pipeline_destroy(c->p, GP_DESTROY_DRAIN);
    }
    for (int i = 0; i < r->nprs; i++) {
        if (r->prs[i].inited) {
            pthread_cond_destroy(&r->prs[i].cv);
            pthread_mutex_destroy(&r->prs[i].mu);
        }
    }
    free(r->prs);
    gp_stats_mark_free(r->wd.mark);
    if (r->fed) gb_feed_free(&r->feed); /* after destroy: the compute used it */
    return rc;
}

/* One window of at least `duration_s` and GB_MIN_BATCHES whole batches into *s. When no batch
   completes for a long time, the window closes where it is (*batches = 0: not aligned). */
static int measure_window(point_run *r, double duration_s, gp_stats *s, uint64_t *batches,
                          gb_tokens *tok, char *err, size_t len) {
    windower *wd = &r->wd;
    gp_stats_mark_free(wd->mark);
    wd->mark = NULL;
    atomic_store(&wd->phase, W_START);
    int ph = wait_phase(wd, W_START, W_IDLE, 60);
    if (ph == W_IDLE) { /* no batch for 60 s */
        snprintf(err, len, "no batch completed in 60 s");
        return GP_ETIMEDOUT;
    }
    if (wd->mark_rc != GP_OK) {
        snprintf(err, len, "gp_pipeline_mark: %s", gp_strerror(wd->mark_rc));
        return wd->mark_rc;
    }
    sleep_s(duration_s);
    ph = W_OPEN;
    atomic_compare_exchange_strong(&wd->phase, &ph, W_END);
    ph = wait_phase(wd, W_END, W_ABANDONED, 120);
    if (ph == W_DONE) {
        *s = wd->out;
        *tok = wd->tok_out;
        *batches = atomic_load(&wd->batches);
        if (wd->since_rc != GP_OK) {
            snprintf(err, len, "gp_pipeline_stats_since: %s", gp_strerror(wd->since_rc));
            return wd->since_rc;
        }
        return GP_OK;
    }
    s->struct_size = sizeof *s;
    *batches = 0;
    int rc = gp_pipeline_stats_since(r->c.p, wd->mark, s);
    *tok = tokens_since(wd->feed, &wd->tok_open);
    if (rc != GP_OK) snprintf(err, len, "gp_pipeline_stats_since: %s", gp_strerror(rc));
    return rc;
}

static int run_point(const gb_opts *o, gb_workload *w, const point_spec *ps, window_set *ws,
                     char *err, size_t len) {
    point_run r;
    int rc = point_start(o, w, ps, 0, &r, err, len);
    if (rc == GP_OK) {
        /* Warm up for --warmup and until every slot ran two batches: the first batches of a
           pipeline are small (the producers ramp up) and pay for cold caches. */
        double t0 = now_s();
        sleep_s(ps->warmup_s);
        while (atomic_load(&r.wd.all) < 2 * (uint64_t)ps->inflight && now_s() - t0 < 120)
            sleep_s(0.001);
        /* Variable-size items: also until the ring (and the input arena) went round once. On
           the host backend they are plain malloc'ed memory that the first pass faults in page
           by page, in the producers' writes and the H2D copies: padmax's ring of maximum-size
           items is hundreds of MiB, which a measurement would otherwise mostly spend
           faulting (a service runs warm; pinned memory on CUDA is resident from the start). */
        if (ps->packing != GB_PACK_NONE) {
            gp_stats s = {.struct_size = sizeof s};
            while (gp_pipeline_stats(r.c.p, &s) == GP_OK &&
                   (s.submitted < s.capacity || s.h2d_bytes < r.arena_bytes) && now_s() - t0 < 120)
                sleep_s(0.002);
        }
        ws->n = ps->repeat < 1 ? 1 : ps->repeat > 99 ? 99 : ps->repeat;
        for (int k = 0; rc == GP_OK && k < ws->n; k++)
            rc = measure_window(&r, ps->duration_s, &ws->s[k], &ws->batches[k], &ws->tok[k], err,
                                len);
        if (rc == GP_OK && ws->s[0].completed == 0) {
            snprintf(err, len, "no item completed in %.2f s", ps->duration_s);
            rc = GP_ETIMEDOUT;
        }
        /* The median by items/s: ws->s[n / 2] (insertion sort keeps batches with their window) */
        for (int a = 1; rc == GP_OK && a < ws->n; a++)
            for (int b = a; b > 0 && window_rate(&ws->s[b]) < window_rate(&ws->s[b - 1]); b--) {
                gp_stats t = ws->s[b];
                uint64_t tb = ws->batches[b];
                gb_tokens tt = ws->tok[b];
                ws->s[b] = ws->s[b - 1];
                ws->batches[b] = ws->batches[b - 1];
                ws->tok[b] = ws->tok[b - 1];
                ws->tok[b - 1] = tt;
                ws->s[b - 1] = t;
                ws->batches[b - 1] = tb;
            }
    }
    return point_stop(&r, rc, err, len);
}

/* The backend AUTO picks here, by creating (and destroying) one small pipeline. */
static int probe_backend(const gb_opts *o, gb_workload *w, gb_packing packing, gb_run *r, char *err,
                         size_t len) {
    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = o->backend;
    cfg.max_batch = 1;
    cfg.inflight = 1;
    gb_feed feed;
    int rc = gb_feed_init(&feed, w, packing, err, len);
    if (rc != GP_OK) return rc;
    rc = gb_workload_configure(&feed, &cfg, err, len);
    gp_pipeline *p = NULL;
    if (rc == GP_OK) rc = gp_pipeline_create(&cfg, &p, err, len);
    if (rc != GP_OK) {
        gb_feed_free(&feed);
        return rc;
    }
    gp_stats s = {.struct_size = sizeof s};
    gp_pipeline_stats(p, &s);
    r->backend = s.backend;
    if (s.backend == GP_BACKEND_CUDA) { /* every figure depends on it: the header names it */
        char gpu[128];
        gb_gpu_desc(gpu, sizeof gpu);
        size_t k = strlen(r->machine);
        if (gpu[0] && k < sizeof r->machine)
            snprintf(r->machine + k, sizeof r->machine - k, "; %s", gpu);
    }
    r->fell_back = s.fell_back;
    snprintf(r->fallback_reason, sizeof r->fallback_reason, "%s", s.fallback_reason);
    gp_pipeline_destroy(p, GP_DESTROY_CANCEL);
    gb_feed_free(&feed);
    return GP_OK;
}

static void fill_point(gb_point *pt, const point_spec *ps, const gp_stats *s, uint64_t batches,
                       const gb_tokens *tok, size_t token_bytes) {
    gp_diagnosis d = {.struct_size = sizeof d};
    gp_stats_diagnose(s, &d);
    pt->batch = ps->batch;
    pt->packing = ps->packing;
    if (ps->packing != GB_PACK_NONE && s->batch_items > 0 && tok->items > 0) {
        /* Tokens per item from the compute's sums over the window's batches; H2D bytes per
           item from the pipeline's (both count at dispatch). */
        double items = (double)tok->items;
        pt->mean_tokens = (double)tok->useful / items;
        pt->computed_tokens = (double)tok->computed / items;
        pt->padding = tok->computed ? 1 - (double)tok->useful / (double)tok->computed : 0;
        pt->h2d_bytes_per_item = (double)s->h2d_bytes / (double)s->batch_items;
        pt->tokens_per_s = d.items_per_s * pt->mean_tokens;
        pt->useful_bytes_per_s = pt->tokens_per_s * (double)token_bytes;
    }
    pt->inflight = ps->inflight;
    pt->producers = ps->producers;
    pt->delay_us = ps->delay_us;
    pt->window_s = (double)s->wall_ns / 1e9;
    pt->window_batches = batches;
    pt->completed = s->completed;
    pt->failed = s->failed + s->timed_out + s->canceled;
    pt->items_per_s = d.items_per_s;
    pt->p50_us = (double)s->latency_p50 / 1e3;
    pt->p95_us = (double)s->latency_p95 / 1e3;
    pt->p99_us = (double)s->latency_p99 / 1e3;
    pt->compute_busy = d.compute;
    pt->h2d_busy = d.h2d;
    pt->d2h_busy = d.d2h;
    pt->h2d_gbps = d.h2d_gbps;
    pt->d2h_gbps = d.d2h_gbps;
    pt->enqueue_us = d.batch_enqueue_us;
    pt->launch_us = s->batches ? (double)s->launch_ns / (double)s->batches / 1e3 : 0;
    pt->mean_batch = d.mean_batch;
    pt->verdict = d.verdict;
    pt->bottleneck = d.bottleneck;
}

/* ---- the bound -------------------------------------------------------------------------- */

/* Each stage alone at one batch size: a one-slot pipeline, so H2D, compute and D2H of a batch
   never overlap anything, timed per batch by the pipeline's own stage timestamps (the median
   over the batches; the mean for variable-size items), after one warm-up batch, for at least
   --bound-duration and GB_MIN_BATCHES batches. */
typedef struct stage_times {
    double h2d_us, compute_us, d2h_us, items; /* per batch */
    uint64_t batches;
    /* gb_workload_slot_cpu: the compute's thread CPU time per batch, its items per batch, over
       cpu_batches batches */
    double cpu_us, cpu_items;
    uint64_t cpu_batches;
} stage_times;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorts v): a stage's time per batch, robust to the odd batch whose
   thread was preempted on a shared machine. */
static double median(double *v, uint64_t n) {
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double mean(double *v, uint64_t n) {
    double sum = 0;
    for (uint64_t i = 0; i < n; i++)
        sum += v[i];
    return sum / (double)n;
}

static int run_stages_alone(const gb_opts *o, gb_workload *w, size_t batch, gb_packing packing,
                            stage_times *st, char *err, size_t len) {
    /* Full batches: with one slot, work-conserving dispatch would send whatever arrived when
       the slot came free, and the median stage time of such mixed sizes over the mean batch
       is no rate at all. The delay holds a batch until it is full (or the byte budget closes
       it); it is not a stage time, so it does not enter the bound. */
    point_spec ps = {.batch = batch,
                     .packing = packing,
                     .inflight = 1,
                     .producers = 1,
                     .delay_us = 1000000,
                     .window = (int64_t)(3 * batch),
                     .arrival = GB_CLOSED};
    point_run r;
    int rc = point_start(o, w, &ps, 1, &r, err, len);
    if (rc == GP_OK) {
        double t0 = now_s();
        while (atomic_load(&r.wd.traced) < GB_MIN_BATCHES || now_s() - t0 < o->bound_s) {
            /* Items that fail (a compute error, a lost device) are never traced: stop at the
               first one rather than wait out the limit below; point_stop says why. */
            if (atomic_load(&r.c.failed) ||
                (atomic_load(&r.c.submit_errors) && r.c.last_submit_error != GP_EAGAIN))
                break;
            if (now_s() - t0 > 600) {
                snprintf(err, len, "fewer than %d batches of %zu in 600 s", GB_MIN_BATCHES + 1,
                         batch);
                rc = GP_ETIMEDOUT;
                break;
            }
            sleep_s(0.002);
        }
        double cpu_s;
        uint64_t cb, ci;
        gb_feed_cpu(&r.feed, &cpu_s, &cb, &ci);
        st->cpu_batches = cb;
        st->cpu_us = cb ? cpu_s / (double)cb * 1e6 : 0;
        st->cpu_items = cb ? (double)ci / (double)cb : 0;
    }
    rc = point_stop(&r, rc, err, len);
    /* The poller has stopped: its sums are final and visible. */
    uint64_t n = atomic_load(&r.wd.traced);
    if (rc == GP_OK && n == 0) {
        snprintf(err, len, "no batch traced");
        rc = GP_ETIMEDOUT;
    }
    if (rc == GP_OK) {
        /* Fixed-size items: the median, robust to a batch whose thread was preempted.
           Variable-size items: batches differ in cost by design (padded: the longest item
           sets it), and the rate of such a mix is the mean, not the median. */
        double (*typical)(double *, uint64_t) = packing == GB_PACK_NONE ? median : mean;
        st->batches = n;
        st->h2d_us = typical(r.wd.h2d_ns, n) / 1e3;
        st->compute_us = typical(r.wd.compute_ns, n) / 1e3;
        st->d2h_us = typical(r.wd.d2h_ns, n) / 1e3;
        st->items = r.wd.items / (double)n;
    }
    free(r.wd.h2d_ns);
    return rc;
}

/* The bound of one point from the stage times at its batch size and, for CPU compute, the
   compute alone on as many threads as the point's inflight. */
typedef struct bound_parts {
    int stages_ok;
    stage_times st;
    char stages_err[160];
    int cpu;     /* compute measured alone on threads */
    int in_slot; /* ... from its CPU time in the one-slot run (gb_workload_slot_cpu) */
    int alone_ok;
    double alone_items_per_s, alone_batch_us;
    char alone_err[160];
} bound_parts;

static void set_bound(gb_point *pt, const bound_parts *b, int threads) {
    pt->bound_threads = b->cpu ? threads : 1;
    pt->bound_alone = b->cpu;
    pt->bound_in_slot = b->in_slot;
    if (!b->stages_ok) {
        snprintf(pt->bound_note, sizeof pt->bound_note, "stages alone: %s", b->stages_err);
        return;
    }
    if (b->cpu && !b->alone_ok) {
        snprintf(pt->bound_note, sizeof pt->bound_note, "compute alone on %d threads: %s", threads,
                 b->alone_err);
        return;
    }
    const stage_times *st = &b->st;
    pt->bound_h2d_us = st->h2d_us;
    pt->bound_d2h_us = st->d2h_us;
    pt->bound_compute_us = b->cpu ? b->alone_batch_us : st->compute_us;
    double best = b->cpu               ? b->alone_items_per_s
                  : st->compute_us > 0 ? st->items / (st->compute_us * 1e-6)
                                       : INFINITY;
    if (st->h2d_us > 0) best = fmin(best, st->items / (st->h2d_us * 1e-6));
    if (st->d2h_us > 0) best = fmin(best, st->items / (st->d2h_us * 1e-6));
    if (!isfinite(best) || best <= 0) {
        snprintf(pt->bound_note, sizeof pt->bound_note, "no stage took measurable time");
        return;
    }
    pt->bound_items_per_s = best;
}

/* ---- main ------------------------------------------------------------------------------- */

static void progress(const gb_opts *o, int i, int n, const char *what) {
    if (o->quiet) return;
    if (isatty(2))
        fprintf(stderr, "\r\033[K[%d/%d] %s", i, n, what);
    else
        fprintf(stderr, "[%d/%d] %s\n", i, n, what);
}

static void run_info(gb_run *r, int argc, char **argv, char *cmd, size_t len) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(r->date, sizeof r->date, "%Y-%m-%d", &tm);
    struct utsname u;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (uname(&u) == 0)
        snprintf(r->machine, sizeof r->machine, "%s %s, %ld CPUs", u.sysname, u.machine, cpus);
    else
        snprintf(r->machine, sizeof r->machine, "%ld CPUs", cpus);
    /* Other work on the machine moves every figure: say how busy it was. */
    double load;
    if (getloadavg(&load, 1) == 1)
        snprintf(r->machine + strlen(r->machine), sizeof r->machine - strlen(r->machine),
                 ", load average %.2f at start", load);
    size_t k = 0;
    cmd[0] = '\0';
    for (int i = 0; i < argc && k + 1 < len; i++)
        k += (size_t)snprintf(cmd + k, len - k, "%s%s", i ? " " : "", argv[i]);
}

/* The bound parts of point (packing pk, batch bi, inflight ii) that are not measured yet: the
   stages alone once per packing and batch size; the compute alone once per packing, batch size
   and inflight (CPU compute runs on that many threads). Returns the number of failures (each
   also noted in its cells). */
typedef struct bound_cache {
    bound_parts cell[GB_PACKING_COUNT_ + 1][GB_MAX_LIST]
                    [GB_MAX_LIST]; /* [packing][batch][inflight] */
    int have_stages[GB_PACKING_COUNT_ + 1][GB_MAX_LIST];
    int have_alone[GB_PACKING_COUNT_ + 1][GB_MAX_LIST][GB_MAX_LIST];
} bound_cache;

/* GB_PACK_NONE shares the last row. */
static int pack_row(gb_packing p) {
    return p == GB_PACK_NONE ? GB_PACKING_COUNT_ : (int)p;
}

static int measure_bound(const gb_opts *o, gb_workload *w, gb_packing packing, int bi, int ii,
                         int cpu, bound_cache *bc, int *step, int steps) {
    char line[160], err[512] = "", mode[32] = "";
    int failures = 0, pk = pack_row(packing);
    size_t batch = o->batch[bi];
    if (packing != GB_PACK_NONE) snprintf(mode, sizeof mode, ", %s", gb_packing_name(packing));
    if (!bc->have_stages[pk][bi]) {
        bc->have_stages[pk][bi] = 1;
        snprintf(line, sizeof line, "bound: batch %zu%s, each stage alone (one slot)", batch, mode);
        progress(o, ++*step, steps, line);
        bound_parts bp = {.cpu = cpu};
        int rc = run_stages_alone(o, w, batch, packing, &bp.st, err, sizeof err);
        if (rc == GP_OK) {
            bp.stages_ok = 1;
        } else {
            snprintf(bp.stages_err, sizeof bp.stages_err, "%s: %.140s", gp_err_name(rc), err);
            fprintf(stderr, "%sgp-bench: bound at batch %zu%s, stages alone: %s\n",
                    o->quiet ? "" : "\n", batch, mode, bp.stages_err);
            failures++;
        }
        for (int k = 0; k < o->ninflight; k++)
            bc->cell[pk][bi][k] = bp;
    }
    if (cpu && !bc->have_alone[pk][bi][ii]) {
        bc->have_alone[pk][bi][ii] = 1;
        bound_parts *cell = &bc->cell[pk][bi][ii];
        int threads = o->inflight[ii];
        int rc;
        if (gb_workload_slot_cpu(w)) {
            snprintf(line, sizeof line,
                     "bound: batch %zu%s, compute CPU time from the one-slot run, %d threads",
                     batch, mode, threads);
            progress(o, ++*step, steps, line);
            cell->in_slot = 1;
            const stage_times *st = &cell->st;
            long cores = sysconf(_SC_NPROCESSORS_ONLN);
            int at_once = cores > 0 && cores < threads ? (int)cores : threads;
            rc = GP_OK;
            if (!cell->stages_ok) {
                snprintf(err, sizeof err, "the one-slot run failed");
                rc = GP_ETIMEDOUT;
            } else if (st->cpu_batches == 0 || st->cpu_us <= 0) {
                snprintf(err, sizeof err, "no batch after the warm-up one was timed");
                rc = GP_ETIMEDOUT;
            } else {
                cell->alone_batch_us = st->cpu_us;
                cell->alone_items_per_s = at_once * st->cpu_items / (st->cpu_us * 1e-6);
            }
        } else {
            snprintf(line, sizeof line, "bound: batch %zu%s, compute alone on %d threads", batch,
                     mode, threads);
            progress(o, ++*step, steps, line);
            rc = gb_workload_compute_alone(w, batch, threads, o->bound_s, &cell->alone_items_per_s,
                                           &cell->alone_batch_us, err, sizeof err);
        }
        if (rc == GP_OK) {
            cell->alone_ok = 1;
        } else {
            snprintf(cell->alone_err, sizeof cell->alone_err, "%s: %.140s", gp_err_name(rc), err);
            fprintf(stderr, "%sgp-bench: bound at batch %zu%s, compute alone on %d threads: %s\n",
                    o->quiet ? "" : "\n", batch, mode, threads, cell->alone_err);
            failures++;
        }
    }
    return failures;
}

/* The packing modes of this run: --packing, or the default for the workload. */
static int pick_packing(gb_opts *o, const gb_workload *w, char *err, size_t len) {
    if (!gb_workload_varlen(w)) {
        if (o->npacking) { /* fills err */
            gb_workload_packing_ok(w, o->packing[0], err, len);
            return -1;
        }
        o->packing[0] = GB_PACK_NONE;
        o->npacking = 1;
        return 0;
    }
    if (!o->npacking) {
        const gb_lengths *l = gb_workload_lengths(w);
        int vary = l->lo < l->hi;
        o->packing[o->npacking++] = GB_PACKED;
        if (vary && gb_workload_packing_ok(w, GB_PADDED, err, len) == GP_OK)
            o->packing[o->npacking++] = GB_PADDED;
        if (vary) o->packing[o->npacking++] = GB_PADMAX;
        err[0] = '\0';
        return 0;
    }
    for (int i = 0; i < o->npacking; i++)
        if (gb_workload_packing_ok(w, o->packing[i], err, len) != GP_OK) return -1;
    return 0;
}

static int tool_main(int argc, char **argv) {
    static gb_opts o;
    static gb_run r;
    static char cmd[2048];
    defaults(&o);
    int prc = parse_args(argc, argv, &o);
    if (prc) return prc;
    /* The outputs' paths, before a sweep of minutes rather than after it. */
    const char *const outputs[][2] = {{"--csv", o.csv}, {"--json", o.json}, {"--svg", o.svg}};
    const char *const inputs[][2] = {
        {"--workload", gb_is_model_file(o.workload) ? o.workload : NULL}};
    if (gb_check_outputs("gp-bench", outputs, 3) != 0 ||
        gb_check_distinct("gp-bench", outputs, 3, inputs, 1) != 0)
        return 2;
    run_info(&r, argc, argv, cmd, sizeof cmd);
    o.command = cmd;
    r.o = &o;
    /* Sleeps here and in the host backend's simulated engines should last what they ask for,
       not the default 50 us timer slack; threads inherit it from this one. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

    char err[512] = "";
    gb_workload *w = NULL;
    int rc = gb_workload_open(&o, &w, err, sizeof err);
    if (rc != GP_OK) {
        fprintf(stderr, "gp-bench: %s\n", err);
        return rc == GB_EUSAGE ? 2 : 1;
    }
    snprintf(r.workload_desc, sizeof r.workload_desc, "%s", gb_workload_describe(w));
    if (pick_packing(&o, w, err, sizeof err) != 0) {
        fprintf(stderr, "gp-bench: %s\n", err);
        gb_workload_close(w);
        return 2;
    }
    if (gb_workload_varlen(w)) {
        r.token_bytes = gb_workload_token_bytes(w);
        gb_lengths_stats(gb_workload_lengths(w), &r.mean_tokens, &r.p50_tokens, &r.p99_tokens);
        snprintf(r.lengths_spec, sizeof r.lengths_spec, "%s", gb_workload_lengths(w)->spec);
    }
    if ((rc = probe_backend(&o, w, o.packing[0], &r, err, sizeof err)) != GP_OK ||
        (rc = gb_workload_supports(w, r.backend, err, sizeof err)) != GP_OK) {
        /* The library's detail already names the code. */
        if (strncmp(err, "GP_E", 4) == 0)
            fprintf(stderr, "gp-bench: %s\n", err);
        else
            fprintf(stderr, "gp-bench: %s: %s\n", gp_err_name(rc), err);
        gb_workload_close(w);
        return 1;
    }
    int total = o.nbatch * o.ninflight * o.nproducers * o.ndelay * o.npacking;
    if (total > GB_MAX_POINTS) { /* before anything is printed: a usage error */
        fprintf(stderr, "gp-bench: %d points; at most %d\n", total, GB_MAX_POINTS);
        gb_workload_close(w);
        return 2;
    }
    gb_print_header(&r, stdout);
    fflush(stdout);

    /* The bound: the stages alone once per batch size; for CPU compute, the compute alone
       once per batch size and inflight (it runs on that many threads). */
    int cpu = gb_workload_cpu_compute(w, r.backend);
    int steps = total + (o.naive ? 1 : 0) +
                (o.bound ? o.npacking * o.nbatch * (1 + (cpu ? o.ninflight : 0)) : 0);
    int step = 0, failures = 0;
    char line[256];

    if (o.naive) {
        progress(&o, ++step, steps, "naive serial loop");
        static gb_naive runs[99];
        int nr = 0;
        rc = GP_OK;
        for (int k = 0; k < o.repeat && rc == GP_OK; k++)
            if ((rc = gb_workload_naive(w, r.backend, o.duration_s, &runs[nr], err, sizeof err)) ==
                GP_OK)
                nr++;
        for (int a = 1; a < nr; a++) /* insertion sort by items/s; the median is reported */
            for (int b = a; b > 0 && runs[b].items_per_s < runs[b - 1].items_per_s; b--) {
                gb_naive t = runs[b];
                runs[b] = runs[b - 1];
                runs[b - 1] = t;
            }
        if (nr) {
            r.naive = runs[nr / 2];
            r.naive.repeats = nr;
            r.naive.items_per_s_min = runs[0].items_per_s;
            r.naive.items_per_s_max = runs[nr - 1].items_per_s;
        }
        if (nr && !o.quiet && !isatty(2)) /* a log keeps each result as it comes */
            fprintf(stderr, "      naive: %.0f items/s, p50 %.3f ms\n", r.naive.items_per_s,
                    r.naive.p50_us / 1e3);
        if (rc != GP_OK) {
            fprintf(stderr, "%sgp-bench: naive baseline: %s: %s\n", o.quiet ? "" : "\n",
                    gp_err_name(rc), err);
            failures += rc != GP_ENOTSUP;
        }
    }
    /* Measured just before the first point that needs it, so the bound and the pipeline see
       the machine in the same state (a shared machine's load drifts over a sweep). The packing
       modes of a batch size run one after the other, so they too see the same machine. */
    static bound_cache bc;
    for (int ii = 0; ii < o.ninflight; ii++)
        for (int pi = 0; pi < o.nproducers; pi++)
            for (int di = 0; di < o.ndelay; di++)
                for (int bi = 0; bi < o.nbatch; bi++)
                    for (int ki = 0; ki < o.npacking; ki++) {
                        point_spec ps = {.batch = o.batch[bi],
                                         .packing = o.packing[ki],
                                         .inflight = o.inflight[ii],
                                         .producers = o.producers[pi],
                                         .delay_us = o.delay_us[di],
                                         .window = o.window,
                                         .warmup_s = o.warmup_s,
                                         .duration_s = o.duration_s,
                                         .repeat = o.repeat,
                                         .arrival = o.arrival};
                        snprintf(line, sizeof line,
                                 "batch %zu, inflight %d, producers %d, max_delay_us %u%s%s",
                                 ps.batch, ps.inflight, ps.producers, ps.delay_us,
                                 ps.packing == GB_PACK_NONE ? "" : ", ",
                                 ps.packing == GB_PACK_NONE ? "" : gb_packing_name(ps.packing));
                        progress(&o, ++step, steps, line);
                        if (o.bound)
                            failures +=
                                measure_bound(&o, w, ps.packing, bi, ii, cpu, &bc, &step, steps);
                        static window_set ws;
                        rc = run_point(&o, w, &ps, &ws, err, sizeof err);
                        if (rc != GP_OK) {
                            fprintf(stderr, "%sgp-bench: %s: %s: %s\n", o.quiet ? "" : "\n", line,
                                    gp_err_name(rc), err);
                            failures++;
                            continue;
                        }
                        gb_point *pt = &r.pts[r.npts++];
                        const gp_stats *sm = &ws.s[ws.n / 2];
                        fill_point(pt, &ps, sm, ws.batches[ws.n / 2], &ws.tok[ws.n / 2],
                                   r.token_bytes);
                        pt->repeats = ws.n;
                        pt->items_per_s_min = window_rate(&ws.s[0]);
                        pt->items_per_s_max = window_rate(&ws.s[ws.n - 1]);
                        pt->offered_per_s = o.arrival == GB_CLOSED ? 0 : o.rate;
                        if (o.bound)
                            set_bound(pt, &bc.cell[pack_row(ps.packing)][bi][ii], ps.inflight);
                        /* In a log (not a terminal) each point's result is written as it comes:
                           a run cut short by a timeout keeps the points it finished. */
                        if (!o.quiet && !isatty(2))
                            fprintf(stderr,
                                    "      %.0f items/s, p99 %.3f ms, compute %.0f %%, bound "
                                    "%.0f items/s\n",
                                    pt->items_per_s, pt->p99_us / 1e3, 100 * pt->compute_busy,
                                    pt->bound_items_per_s);
                        if (o.report) {
                            if (!o.quiet && isatty(2)) fputc('\n', stderr);
                            printf("---- %s\n", line);
                            if (gp_stats_report(sm, stdout) != GP_OK) failures++;
                            fflush(stdout);
                        }
                    }
    if (!o.quiet && isatty(2)) fputc('\n', stderr);

    gb_print_table(&r, stdout);
    /* A file not written whole is removed, and the run fails: a report that did not reach its
       file does not pass for one that did (README); stdout's in main. */
    static const char *const what[] = {"csv", "json", "svg"};
    int (*const write[])(const gb_run *, const char *, int *) = {gb_write_csv, gb_write_json,
                                                                 gb_write_svg};
    const char *const paths[] = {o.csv, o.json, o.svg};
    for (int i = 0; i < 3; i++) {
        int removed;
        if (paths[i] && write[i](&r, paths[i], &removed) != 0) {
            fprintf(stderr, "gp-bench: --%s %s: not written: %s%s\n", what[i], paths[i],
                    strerror(errno), removed ? " (the partial file was removed)" : "");
            failures++;
        }
    }
    gb_workload_close(w);
    return failures || r.npts == 0 ? 1 : 0;
}

int main(int argc, char **argv) {
    return gb_stdout_checked("gp-bench", tool_main(argc, argv));
}
