/*
 * gp-bench workloads: what a batch costs, and the naive serial loop over the same compute.
 *
 * synthetic: items of in/out bytes; compute of compute_us per batch + compute_us_per_item per
 *   item. Host backend: the library's simulated engines (sim_compute_us*, and
 *   sim_copy_bytes_per_s from --copy-gbps), or a busy loop with --host-spin. CUDA backend: the
 *   spin kernel (bench/bench-spin.cu), with real copies.
 * synthetic with --lengths: variable-size items of token_bytes per token, token counts from the
 *   distribution; the compute also costs compute_us_per_token per computed token (padding
 *   included). Host: a simulated compute engine of gp-bench's own (gb_feed), because the
 *   library's charges per item, not per token; CUDA: the spin kernel for the batch's cost.
 * mlp | cnn | encoder | FILE.safetensors: the built-in model runtime (include/gpupipe/model.h);
 *   a model with a variable-length input gets items from the length distribution.
 *
 * Packing (variable-size items; what each mode moves and computes is in gp-bench's usage):
 *   packed: items at their own length (gp_pipeline_submit_ex), the compute pays for the batch's
 *           real tokens;
 *   padded: items moved packed, the compute pads the batch to its longest item
 *           (gp_batch_pad, with a mask) and pays for n * longest tokens;
 *   padmax: every item padded to the maximum in its ring slot (fixed-size slots), moved and
 *           computed at the maximum.
 * Every mode reports useful and computed tokens with gp_batch_report_padding.
 *
 * naive: one item per call from a pageable buffer: synchronous copy in, compute, synchronous
 * copy out, wait; the cost model is the same as the pipeline's (on the host backend the same
 * simulated copy and compute times, slept the same way).
 *
 * The bound of CPU compute on the host backend: a model's compute is timed in thread CPU time
 * inside the pipeline's one-slot run (gb_feed_cpu); --host-spin's is called directly on as many
 * threads as the pipeline has slot threads, nothing else running (compute alone).
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gp-bench.h"

#ifdef GB_HAVE_MODEL
#include <gpupipe/model.h>

/* A model input of token ids (MODELS.md: i32, i64 or u32): --vocab's uniform ids. */
static int gb_is_ids(gp_dtype t) {
    return t == GP_DTYPE_I32 || t == GP_DTYPE_I64 || t == GP_DTYPE_U32;
}
#endif
#ifdef GB_HAVE_SPIN
#include <cuda_runtime_api.h>

#include "bench-spin.h"
#endif

struct gb_workload {
    const gb_opts *o;
    char desc[512];
    size_t in_bytes, out_bytes; /* in_bytes: the largest item (variable lengths: max_tokens) */
    int synthetic;
    unsigned char *pool; /* npool distinct inputs of in_bytes */
    size_t npool;
    /* Variable-size items: token counts from `len`, token_bytes each, 1..max_tokens. */
    int varlen;
    gb_lengths len;
    size_t token_bytes, max_tokens;
    uint64_t vocab; /* token-id models: ids uniform in [0, vocab) (--vocab or the model's) */
    double mean_tokens;
#ifdef GB_HAVE_MODEL
    gp_model *model;
    gp_tensor_info in_info;
#endif
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* As the host backend's simulated engines: sleep `us`, nothing when <= 0. */
static void sim_sleep_us(double us) {
    if (us <= 0) return;
    uint64_t ns = (uint64_t)(us * 1000.0);
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) != 0)
        ;
}

static void spin_us(double us) {
    if (us <= 0) return;
    double end = now_s() + us * 1e-6;
    while (now_s() < end)
        ;
}

/* ---- synthetic -------------------------------------------------------------------------- */

/* Tokens of one batch: the real ones, the computed ones (padding included), the longest item. */
typedef struct batch_tokens {
    uint64_t useful, computed, longest;
} batch_tokens;

static batch_tokens tokens_of(const gb_feed *f, const gp_batch *b) {
    batch_tokens t = {0, 0, 0};
    if (f->packing == GB_PADMAX) {
        for (size_t k = 0; k < b->n; k++)
            t.useful += f->lens[(b->first_seq + k) & f->lens_mask];
        t.longest = f->max_tokens;
        t.computed = (uint64_t)b->n * f->max_tokens;
        return t;
    }
    const uint64_t *off = b->in_offsets_host;
    for (size_t k = 0; k < b->n; k++) {
        uint64_t n = (off[k + 1] - off[k]) / f->token_bytes;
        t.useful += n;
        if (n > t.longest) t.longest = n;
    }
    t.computed = f->packing == GB_PADDED ? (uint64_t)b->n * t.longest : t.useful;
    return t;
}

static int report_tokens(gb_feed *f, const gp_batch *b, const batch_tokens *t) {
    int rc = gp_batch_report_padding(b, t->useful, t->computed);
    if (rc != GP_OK) {
        gp_batch_set_error(b, "gp_batch_report_padding(%llu of %llu): %s",
                           (unsigned long long)t->useful, (unsigned long long)t->computed,
                           gp_strerror(rc));
        return rc;
    }
    pthread_mutex_lock(&f->tok_mu);
    f->tok.items += b->n;
    f->tok.useful += t->useful;
    f->tok.computed += t->computed;
    pthread_mutex_unlock(&f->tok_mu);
    return GP_OK;
}

gb_tokens gb_feed_tokens(gb_feed *f) {
    gb_tokens t = {0, 0, 0};
    if (!f->tok_ok) return t;
    pthread_mutex_lock(&f->tok_mu);
    t = f->tok;
    pthread_mutex_unlock(&f->tok_mu);
    return t;
}

/* The host's simulated compute engine for variable-size items: one batch at a time, in the
   order the slots reach it (a GPU's compute queue), so three slots do not compute three times
   as fast. */
static void engine_enter(gb_feed *f) {
    pthread_mutex_lock(&f->mu);
    uint64_t ticket = f->next++;
    while (f->serving != ticket)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
}

static void engine_leave(gb_feed *f) {
    pthread_mutex_lock(&f->mu);
    f->serving++;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* padded: the slot's [capacity, max_tokens] padded tensor and its mask, in the batch's memory
   (device memory on CUDA), made once per slot by compute_setup. */
typedef struct pad_slot {
    void *rows;
    uint8_t *mask;
    int cuda;
} pad_slot;

static void pad_slot_free(pad_slot *ps) {
    if (!ps) return;
#ifdef GB_HAVE_SPIN
    if (ps->cuda) {
        cudaFree(ps->rows);
        cudaFree(ps->mask);
        free(ps);
        return;
    }
#endif
    free(ps->rows);
    free(ps->mask);
    free(ps);
}

static int pad_setup(void *user, const gp_batch *b) {
    const gb_feed *f = user;
    size_t tokens = b->capacity * f->max_tokens;
    pad_slot *ps = calloc(1, sizeof *ps);
    if (!ps) {
        gp_batch_set_error(b, "out of memory");
        return GP_ENOMEM;
    }
    if (b->backend == GP_BACKEND_CUDA) {
#ifdef GB_HAVE_SPIN
        ps->cuda = 1;
        cudaError_t e = cudaMalloc(&ps->rows, tokens * f->token_bytes);
        if (e == cudaSuccess) e = cudaMalloc((void **)&ps->mask, tokens);
        if (e != cudaSuccess) {
            gp_batch_set_error(b, "padded tensor of %zu tokens: cudaMalloc: %s", tokens,
                               cudaGetErrorString(e));
            pad_slot_free(ps);
            return GP_ENOMEM;
        }
#else
        free(ps);
        gp_batch_set_error(b, "the padded synthetic compute on CUDA needs the spin kernel");
        return GP_ENOTSUP;
#endif
    } else {
        ps->rows = malloc(tokens * f->token_bytes);
        ps->mask = malloc(tokens);
        if (!ps->rows || !ps->mask) {
            gp_batch_set_error(b, "padded tensor of %zu tokens: out of memory", tokens);
            pad_slot_free(ps);
            return GP_ENOMEM;
        }
    }
    int rc = gp_batch_set_slot_user(b, ps);
    if (rc != GP_OK) pad_slot_free(ps);
    return rc;
}

static void pad_teardown(void *user, const gp_batch *b) {
    pad_slot_free(b->slot_user);
}

static int pad_batch(const gb_feed *f, const gp_batch *b, const batch_tokens *t) {
    const pad_slot *ps = b->slot_user;
    int rc =
        gp_batch_pad(b, ps->rows, (size_t)t->longest * f->token_bytes, f->token_bytes, ps->mask);
    if (rc != GP_OK) gp_batch_set_error(b, "gp_batch_pad: %s", gp_strerror(rc));
    return rc;
}

/* Host: a token result per item (its first bytes), so outputs carry something. */
static void token_results(const gp_batch *b) {
    for (size_t i = 0; i < b->n; i++) {
        size_t at = b->in_offsets_host ? (size_t)b->in_offsets_host[i] : i * b->in_bytes;
        size_t len = b->in_offsets_host
                         ? (size_t)(b->in_offsets_host[i + 1] - b->in_offsets_host[i])
                         : b->in_bytes;
        size_t k = len < b->out_bytes ? len : b->out_bytes;
        if (k > 8) k = 8;
        memcpy((char *)b->out + i * b->out_bytes, (const char *)b->in + at, k);
    }
}

static int synth_compute(void *user, const gp_batch *b) {
    gb_feed *f = user;
    const gb_opts *o = f->w->o;
    if (f->packing == GB_PACK_NONE) {
        if (b->backend == GP_BACKEND_CUDA) {
#ifdef GB_HAVE_SPIN
            uint64_t ns =
                (uint64_t)(o->compute_us * 1e3 + o->compute_us_per_item * 1e3 * (double)b->n);
            cudaError_t e = bench_spin_launch((cudaStream_t)b->stream, ns, 1, NULL, 0, 0);
            return e == cudaSuccess ? GP_OK : GP_EDEVICE;
#else
            return GP_ENOTSUP;
#endif
        }
        token_results(b);
        if (o->host_spin) spin_us(o->compute_us + o->compute_us_per_item * (double)b->n);
        return GP_OK;
    }
    /* Variable-size items: the cost of the tokens computed, padding included. */
    batch_tokens t = tokens_of(f, b);
    double us = o->compute_us + o->compute_us_per_item * (double)b->n +
                o->compute_us_per_token * (double)t.computed;
    int rc = GP_OK;
    if (b->backend == GP_BACKEND_CUDA) {
#ifdef GB_HAVE_SPIN
        if (f->packing == GB_PADDED) rc = pad_batch(f, b, &t);
        if (rc == GP_OK) {
            cudaError_t e =
                bench_spin_launch((cudaStream_t)b->stream, (uint64_t)(us * 1e3), 1, NULL, 0, 0);
            if (e != cudaSuccess) {
                gp_batch_set_error(b, "spin kernel: %s", cudaGetErrorString(e));
                rc = GP_EDEVICE;
            }
        }
#else
        rc = GP_ENOTSUP;
#endif
    } else {
        engine_enter(f);
        if (f->packing == GB_PADDED) rc = pad_batch(f, b, &t);
        if (rc == GP_OK) {
            token_results(b);
            sim_sleep_us(us);
        }
        engine_leave(f);
    }
    return rc == GP_OK ? report_tokens(f, b, &t) : rc;
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A model's compute, timed in CPU time on its thread, then (variable-length) its padding
   report. */
static int model_compute(void *user, const gp_batch *b) {
    gb_feed *f = user;
    /* CPU time only where the compute is CPU work (the host backend's bound uses it): on CUDA
       the compute only enqueues, and two syscalls and a lock per batch would slow dispatch. */
    int timed = b->backend != GP_BACKEND_CUDA;
    double c0 = timed ? thread_cpu_s() : 0;
    int rc = f->inner(f->inner_user, b);
    double c1 = timed ? thread_cpu_s() : 0;
    if (rc != GP_OK) return rc;
    if (timed) {
        pthread_mutex_lock(&f->tok_mu);
        if (f->cpu_seen++ > 0) { /* the first batch warms the caches up */
            f->cpu_s += c1 - c0;
            f->cpu_batches++;
            f->cpu_items += b->n;
        }
        pthread_mutex_unlock(&f->tok_mu);
    }
    if (f->packing == GB_PACK_NONE) return GP_OK;
    batch_tokens t = tokens_of(f, b);
    return report_tokens(f, b, &t);
}

void gb_feed_cpu(gb_feed *f, double *cpu_s, uint64_t *batches, uint64_t *items) {
    *cpu_s = 0;
    *batches = *items = 0;
    if (!f->tok_ok) return;
    pthread_mutex_lock(&f->tok_mu);
    *cpu_s = f->cpu_s;
    *batches = f->cpu_batches;
    *items = f->cpu_items;
    pthread_mutex_unlock(&f->tok_mu);
}

static int model_setup(void *user, const gp_batch *b) {
    gb_feed *f = user;
    return f->inner_setup ? f->inner_setup(f->inner_user, b) : GP_OK;
}

static void model_teardown(void *user, const gp_batch *b) {
    gb_feed *f = user;
    if (f->inner_teardown) f->inner_teardown(f->inner_user, b);
}

/* Input item number i: deterministic pseudo-random bytes (floats in [0, 1) for f32 models). */
static void fill_input(const gb_workload *w, void *item, uint64_t i) {
    uint64_t x = 0x9E3779B97F4A7C15u * (i + 1);
    unsigned char *p = item;
#ifdef GB_HAVE_MODEL
    if (w->model && w->in_info.dtype == GP_DTYPE_F32) {
        float *f = item;
        for (size_t k = 0; k < w->in_bytes / sizeof(float); k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            f[k] = (float)(x >> 40) / (float)(1u << 24);
        }
        return;
    }
    /* Token ids: uniform in [0, vocab). */
    if (w->model && gb_is_ids(w->in_info.dtype)) {
        int wide = w->in_info.dtype == GP_DTYPE_I64;
        for (size_t k = 0; k < w->in_bytes / (wide ? 8 : 4); k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            uint64_t id = (x >> 11) % w->vocab;
            if (wide) {
                int64_t v = (int64_t)id;
                memcpy(p + 8 * k, &v, 8);
            } else {
                int32_t v = (int32_t)id;
                memcpy(p + 4 * k, &v, 4);
            }
        }
        return;
    }
#endif
    for (size_t k = 0; k < w->in_bytes; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[k] = (unsigned char)(x >> 56);
    }
}

/* Distinct inputs, so batches carry varied data as a service's would (the compute of some
   models depends on the data: branches in pooling and top-k, denormals); up to 64 of them,
   within 64 MiB. */
static int make_pool(gb_workload *w, char *err, size_t len) {
    w->npool = w->in_bytes > (1u << 20) ? (64u << 20) / w->in_bytes : 64;
    if (w->npool < 1) w->npool = 1;
    w->pool = malloc(w->npool * w->in_bytes);
    if (!w->pool) {
        snprintf(err, len, "out of memory for %zu inputs of %zu bytes", w->npool, w->in_bytes);
        return GP_ENOMEM;
    }
    for (size_t i = 0; i < w->npool; i++)
        fill_input(w, w->pool + i * w->in_bytes, i);
    return GP_OK;
}

/* ---- open / configure ------------------------------------------------------------------- */

static int is_demo_name(const char *s) {
    return !strcmp(s, "mlp") || !strcmp(s, "cnn") || !strcmp(s, "encoder");
}

int gb_is_model_file(const char *s) {
    size_t n = strlen(s), e = strlen(".safetensors");
    return n > e && !strcmp(s + n - e, ".safetensors");
}

static int is_model_name(const char *s) {
    return is_demo_name(s) || gb_is_model_file(s);
}

/* A variable-length model without --lengths gets text-like lengths. */
static const char default_model_lengths[] = "lognormal:4.5,0.9,8,512";

/* ", lengths SPEC tokens (mean M, p50 A, p99 B)" */
static void describe_lengths(const gb_workload *w, char *buf, size_t len) {
    double mean;
    uint32_t p50, p99;
    gb_lengths_stats(&w->len, &mean, &p50, &p99);
    snprintf(buf, len, "lengths %s tokens (mean %.1f, p50 %u, p99 %u, max %zu)", w->len.spec, mean,
             p50, p99, w->max_tokens);
}

/* Largest item the arenas allow: an arena holds two (docs of gp_config.arena_bytes) and is at
   most 2 GiB; gp-bench keeps items to 256 MiB. */
#define GB_MAX_ITEM_BYTES ((size_t)256 << 20)

/* --max-batch-tokens below the longest item: a usage error, said before any point runs. */
static int budget_too_small(const gb_opts *o, size_t max_tokens, char *err, size_t len) {
    if (!o->max_batch_tokens || o->max_batch_tokens >= max_tokens) return 0;
    snprintf(err, len,
             "--max-batch-tokens %zu: below the longest item (%zu tokens); every item must fit a "
             "batch alone",
             o->max_batch_tokens, max_tokens);
    return 1;
}

/* gp_config.cuda_graphs's rule (gpupipe.h), said before any point runs rather than by each. */
#define CUDA_GRAPHS_FIXED                                                                          \
    "fixed-size items only (a graph replays the work captured for one batch size; variable-size "  \
    "items change it batch to batch)"

int gb_workload_open(const gb_opts *o, gb_workload **out, char *err, size_t len) {
    *out = NULL;
    gb_workload *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, len, "out of memory");
        return GP_ENOMEM;
    }
    w->o = o;
    w->len = o->lengths;
    char lens[160] = "";
    if (!strcmp(o->workload, "synthetic") && (o->precision || o->vocab)) {
        snprintf(err, len,
                 "%s: the synthetic workload has no layers and no token ids; %s to a model "
                 "(--workload mlp, cnn, encoder or FILE.safetensors)",
                 o->precision && o->vocab ? "--precision and --vocab"
                 : o->precision           ? "--precision"
                                          : "--vocab",
                 o->precision && o->vocab ? "they apply" : "it applies");
        free(w);
        return GB_EUSAGE;
    }
    if (!strcmp(o->workload, "synthetic")) {
        w->synthetic = 1;
        w->in_bytes = o->in_bytes;
        w->out_bytes = o->out_bytes;
        char copies[64];
        if (o->copy_gbps > 0)
            snprintf(copies, sizeof copies, "%.3g GB/s simulated on host", o->copy_gbps);
        else
            snprintf(copies, sizeof copies, "free on host");
        if (w->len.kind != GB_LEN_NONE) {
            if (o->host_spin) {
                snprintf(err, len,
                         "--host-spin: fixed-size items only; the compute of variable-size "
                         "items is simulated per token (one compute engine, as on a GPU)");
                free(w);
                return GB_EUSAGE;
            }
            if (o->cuda_graphs) {
                snprintf(err, len, "--cuda-graphs: %s", CUDA_GRAPHS_FIXED);
                free(w);
                return GB_EUSAGE;
            }
            w->varlen = 1;
            w->token_bytes = o->token_bytes;
            w->max_tokens = w->len.hi;
            if (w->max_tokens > GB_MAX_ITEM_BYTES / w->token_bytes) {
                snprintf(err, len,
                         "--lengths %s with --token-bytes %zu: the longest item is over %zu MiB",
                         w->len.spec, w->token_bytes, GB_MAX_ITEM_BYTES >> 20);
                free(w);
                return GB_EUSAGE;
            }
            if (budget_too_small(o, w->max_tokens, err, len)) {
                free(w);
                return GB_EUSAGE;
            }
            w->in_bytes = w->max_tokens * w->token_bytes;
            describe_lengths(w, lens, sizeof lens);
            snprintf(w->desc, sizeof w->desc,
                     "synthetic, variable-size: %s of %zu B, %zu B out per item; compute %.4g "
                     "us/batch + %.4g us/item + %.4g us/computed token (host: simulated, one "
                     "engine; CUDA: spin kernel); copies %s",
                     lens, w->token_bytes, w->out_bytes, o->compute_us, o->compute_us_per_item,
                     o->compute_us_per_token, copies);
        } else if (o->max_batch_tokens || o->token_bytes_set || o->compute_us_per_token_set) {
            snprintf(err, len,
                     "%s: tokens need variable-size items (--lengths); these are fixed-size "
                     "(--batch limits them)",
                     o->max_batch_tokens  ? "--max-batch-tokens"
                     : o->token_bytes_set ? "--token-bytes"
                                          : "--compute-us-per-token");
            free(w);
            return GB_EUSAGE;
        } else {
            snprintf(w->desc, sizeof w->desc,
                     "synthetic: %zu B in, %zu B out per item; compute %.4g us/batch + %.4g "
                     "us/item (host: %s, CUDA: spin kernel); copies %s",
                     w->in_bytes, w->out_bytes, o->compute_us, o->compute_us_per_item,
                     o->host_spin ? "busy loop" : "simulated", copies);
        }
        int rc = make_pool(w, err, len);
        if (rc != GP_OK) {
            free(w);
            return rc;
        }
        gb_lengths_stats(&w->len, &w->mean_tokens, &(uint32_t){0}, &(uint32_t){0});
        *out = w;
        return GP_OK;
    }
    if (!is_model_name(o->workload)) {
        snprintf(err, len,
                 "--workload %s: expected synthetic, mlp, cnn, encoder or FILE.safetensors",
                 o->workload);
        free(w);
        return GB_EUSAGE;
    }
    if (o->synthetic_only) { /* a model has its own item sizes and compute */
        snprintf(err, len,
                 "%s: the synthetic workload's; the model %s sets its own item sizes and "
                 "compute: leave it out",
                 o->synthetic_only, o->workload);
        free(w);
        return GB_EUSAGE;
    }
#ifdef GB_HAVE_MODEL
    gp_model_options mo;
    gp_model_options_init(&mo);
    if (o->precision && gp_precision_parse(o->precision, &mo.precision) != GP_OK) {
        snprintf(err, len, "--precision %s: expected fp32, tf32, fp16 or bf16", o->precision);
        free(w);
        return GB_EUSAGE;
    }
    if (w->len.kind == GB_LEN_NONE) gb_lengths_parse(default_model_lengths, &w->len, err, len);
    /* Only a variable-length input reads max_tokens. */
    mo.max_tokens = w->len.hi;
    char why[448] = "";
    int rc = is_demo_name(o->workload)
                 ? gp_model_demo(o->workload, &mo, &w->model, why, sizeof why)
                 : gp_model_load(o->workload, &mo, &w->model, why, sizeof why);
    if (rc != GP_OK) { /* the file (or demo) named, as gp-infer does */
        snprintf(err, len, "--workload %s: %s: %s", o->workload, gp_err_name(rc), why);
        free(w);
        return rc;
    }
    gp_tensor_info oi;
    gp_model_input_info(w->model, &w->in_info);
    gp_model_output_info(w->model, &oi);
    w->in_bytes = gp_model_input_bytes(w->model);
    w->out_bytes = gp_model_output_bytes(w->model);
    w->varlen = w->in_info.rank > 0 && w->in_info.dims[0] < 0;
    if (o->cuda_graphs && w->varlen) {
        snprintf(err, len, "--cuda-graphs: the model %s takes variable-length items; %s",
                 o->workload, CUDA_GRAPHS_FIXED);
        gb_workload_close(w);
        return GB_EUSAGE;
    }
    char ind[48] = "", outd[48] = "";
    for (int i = 0; i < w->in_info.rank; i++) {
        if (w->in_info.dims[i] < 0)
            snprintf(ind + strlen(ind), sizeof ind - strlen(ind), "%s*", i ? "x" : "");
        else
            snprintf(ind + strlen(ind), sizeof ind - strlen(ind), "%s%lld", i ? "x" : "",
                     (long long)w->in_info.dims[i]);
    }
    for (int i = 0; i < oi.rank; i++)
        snprintf(outd + strlen(outd), sizeof outd - strlen(outd), "%s%lld", i ? "x" : "",
                 (long long)oi.dims[i]);
    if (!w->varlen && o->lengths.kind != GB_LEN_NONE) {
        snprintf(err, len,
                 "--lengths %s: the model's input %s[%s] is fixed-size; lengths need a "
                 "variable-length input (`input f32 *xF` or token ids)",
                 o->lengths.spec, gp_dtype_name(w->in_info.dtype), ind);
        gb_workload_close(w);
        return GB_EUSAGE;
    }
    if (o->vocab && !gb_is_ids(w->in_info.dtype)) {
        snprintf(err, len, "--vocab: the model's input %s[%s] is not token ids; leave it out",
                 gp_dtype_name(w->in_info.dtype), ind);
        gb_workload_close(w);
        return GB_EUSAGE;
    }
    if (w->varlen) {
        w->token_bytes = w->in_info.bytes;
        /* The model's own limit: the lengths asked for, or its position table's rows when
           shorter (model.h). The default lengths shrink to it; given ones must fit it. */
        size_t limit = w->in_bytes / w->token_bytes;
        if (limit < w->len.hi && o->lengths.kind == GB_LEN_NONE) {
            char spec[64];
            snprintf(spec, sizeof spec, "lognormal:4.5,0.9,%zu,%zu", limit < 8 ? limit : 8, limit);
            gb_lengths_parse(spec, &w->len, err, len);
        } else if (limit < w->len.hi) {
            snprintf(err, len,
                     "--lengths %s: items of up to %u tokens, but the model takes 1..%zu per "
                     "item (its position embeddings' rows; gp-infer --describe): lower the "
                     "lengths",
                     w->len.spec, (unsigned)w->len.hi, limit);
            gb_workload_close(w);
            return GB_EUSAGE;
        }
        w->max_tokens = w->len.hi;
        if (w->max_tokens > GB_MAX_ITEM_BYTES / w->token_bytes) {
            snprintf(err, len, "--lengths %s: the longest item is over %zu MiB", w->len.spec,
                     GB_MAX_ITEM_BYTES >> 20);
            gb_workload_close(w);
            return GB_EUSAGE;
        }
        if (budget_too_small(o, w->max_tokens, err, len)) {
            gb_workload_close(w);
            return GB_EUSAGE;
        }
        if (o->token_bytes_set && o->token_bytes != w->token_bytes) {
            snprintf(err, len,
                     "--token-bytes %zu: the model's tokens are %zu B (%s[%s]); leave it out",
                     o->token_bytes, w->token_bytes, gp_dtype_name(w->in_info.dtype), ind);
            gb_workload_close(w);
            return GB_EUSAGE;
        }
        char ids[96] = "";
        if (gb_is_ids(w->in_info.dtype)) {
            /* Ids the model takes (gp_model_vocab): by default all of them; a wider --vocab
               would fail items, so it is refused here. */
            uint64_t model_vocab = (uint64_t)gp_model_vocab(w->model);
            if (o->vocab > model_vocab) {
                snprintf(err, len,
                         "--vocab %llu: the model's embedding has %llu rows (ids 0..%llu); "
                         "give at most that, or leave it out",
                         (unsigned long long)o->vocab, (unsigned long long)model_vocab,
                         (unsigned long long)model_vocab - 1);
                gb_workload_close(w);
                return GB_EUSAGE;
            }
            w->vocab = o->vocab ? o->vocab : model_vocab;
            snprintf(ids, sizeof ids, ", token ids uniform in [0, %llu)%s",
                     (unsigned long long)w->vocab, o->vocab ? "" : " (the model's vocabulary)");
        } else
            snprintf(ids, sizeof ids, ", token values uniform in [0, 1)");
        describe_lengths(w, lens, sizeof lens);
        snprintf(lens + strlen(lens), sizeof lens - strlen(lens), "%s", ids);
    } else if (o->token_bytes_set || o->max_batch_tokens || o->npacking) {
        snprintf(err, len,
                 "%s: the model's input %s[%s] is fixed-size; token options need a "
                 "variable-length input",
                 o->token_bytes_set    ? "--token-bytes"
                 : o->max_batch_tokens ? "--max-batch-tokens"
                                       : "--packing",
                 gp_dtype_name(w->in_info.dtype), ind);
        gb_workload_close(w);
        return GB_EUSAGE;
    } else {
        w->len.kind = GB_LEN_NONE; /* the default lengths were for a variable-length input */
    }
    snprintf(w->desc, sizeof w->desc, "model %s: %s[%s] -> %s[%s], %.3g MFLOP/%s%s%s%s%s",
             o->workload, gp_dtype_name(w->in_info.dtype), ind, gp_dtype_name(oi.dtype), outd,
             gp_model_flops(w->model) / 1e6, w->varlen ? "token" : "item",
             o->precision ? ", precision " : "", o->precision ? o->precision : "",
             w->varlen ? "; " : "", lens);
    if ((rc = make_pool(w, err, len)) != GP_OK) {
        gb_workload_close(w);
        return rc;
    }
    gb_lengths_stats(&w->len, &w->mean_tokens, &(uint32_t){0}, &(uint32_t){0});
    *out = w;
    return GP_OK;
#else
    snprintf(err, len,
             "--workload %s: the model runtime (include/gpupipe/model.h) is not built into "
             "this gp-bench yet; use --workload synthetic",
             o->workload);
    free(w);
    return GP_ENOTSUP;
#endif
}

void gb_workload_close(gb_workload *w) {
    if (!w) return;
#ifdef GB_HAVE_MODEL
    gp_model_free(w->model);
#endif
    free(w->pool);
    free(w);
}

const char *gb_workload_describe(const gb_workload *w) {
    return w->desc;
}

int gb_workload_varlen(const gb_workload *w) {
    return w->varlen;
}

const gb_lengths *gb_workload_lengths(const gb_workload *w) {
    return &w->len;
}

size_t gb_workload_token_bytes(const gb_workload *w) {
    return w->token_bytes;
}

int gb_workload_packing_ok(const gb_workload *w, gb_packing p, char *err, size_t len) {
    if (!w->varlen) {
        if (p == GB_PACK_NONE) return GP_OK;
        snprintf(err, len,
                 "--packing: needs variable-size items (--lengths, or a model with a "
                 "variable-length input)");
        return GP_ENOTSUP;
    }
    if (p == GB_PACK_NONE) return GP_ENOTSUP;
    if (p == GB_PADDED && !w->synthetic) {
        snprintf(err, len,
                 "--packing padded: a model computes its packed tokens itself, so only the "
                 "synthetic compute can pad a batch to its longest item; use packed or padmax");
        return GP_ENOTSUP;
    }
    return GP_OK;
}

/* Input arena of a packed pipeline. The library's default, 4 * inflight * max_batch_bytes, is
   sized for batches of the longest items: with long-tailed lengths that is gigabytes (pinned,
   on CUDA) for batches that never occur. Four rounds of the slots' batches of items twice the
   mean hold what a closed loop keeps in flight; a fuller arena blocks producers like a full
   ring. */
static size_t arena_for(const gb_workload *w, const gp_config *cfg) {
    double budget = cfg->max_batch_bytes ? (double)cfg->max_batch_bytes
                                         : (double)cfg->max_batch * (double)w->in_bytes;
    double typical = (double)cfg->max_batch * 2 * w->mean_tokens * (double)w->token_bytes;
    double want = 4.0 * cfg->inflight * (budget < typical ? budget : typical);
    if (want < 2.0 * (double)w->in_bytes) want = 2.0 * (double)w->in_bytes;
    size_t a = 1;
    while ((double)a < want && a < ((size_t)1 << 31))
        a <<= 1;
    return a;
}

int gb_feed_init(gb_feed *f, gb_workload *w, gb_packing packing, char *err, size_t len) {
    memset(f, 0, sizeof *f);
    f->w = w;
    f->packing = packing;
    f->token_bytes = w->token_bytes;
    f->max_tokens = w->max_tokens;
    f->in_bytes = w->in_bytes;
    int rc = gb_workload_packing_ok(w, packing, err, len);
    if (rc != GP_OK) {
        if (!err[0]) snprintf(err, len, "fixed-size workload: no packing");
        return rc;
    }
    if (w->varlen || !w->synthetic) {
        if (pthread_mutex_init(&f->tok_mu, NULL) != 0) {
            snprintf(err, len, "pthread_mutex_init failed");
            return GP_ESYS;
        }
        f->tok_ok = 1;
    }
    if (w->varlen && w->synthetic) {
        if (pthread_mutex_init(&f->mu, NULL) != 0) {
            gb_feed_free(f);
            snprintf(err, len, "pthread_mutex_init failed");
            return GP_ESYS;
        }
        if (pthread_cond_init(&f->cv, NULL) != 0) {
            pthread_mutex_destroy(&f->mu);
            gb_feed_free(f);
            snprintf(err, len, "pthread_cond_init failed");
            return GP_ESYS;
        }
        f->engine_ok = 1;
    }
    return GP_OK;
}

void gb_feed_free(gb_feed *f) {
    if (f->tok_ok) pthread_mutex_destroy(&f->tok_mu);
    if (f->engine_ok) {
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
    }
    free(f->lens);
    memset(f, 0, sizeof *f);
}

/* padmax: the ring capacity (the library's default when unset) and the table of real lengths
   indexed by sequence number modulo it. */
static int padmax_table(gb_feed *f, gp_config *cfg, char *err, size_t len) {
    if (!cfg->capacity) {
        size_t want = 4 * cfg->max_batch * (size_t)cfg->inflight, c = 1;
        while (c < want)
            c <<= 1;
        cfg->capacity = c;
    }
    free(f->lens);
    f->lens = calloc(cfg->capacity, sizeof *f->lens);
    if (!f->lens) {
        snprintf(err, len, "out of memory for %zu lengths", cfg->capacity);
        return GP_ENOMEM;
    }
    f->lens_mask = cfg->capacity - 1;
    return GP_OK;
}

/* The token budget: packed items count their own bytes; padmax batches hold budget / max_tokens
   items (each computes max_tokens). A budget below the longest item was refused at open
   (budget_too_small). */
static int apply_budget(gb_feed *f, gp_config *cfg, char *err, size_t len) {
    const gb_opts *o = f->w->o;
    if (!o->max_batch_tokens) return GP_OK;
    if (f->packing == GB_PADMAX) {
        size_t n = o->max_batch_tokens / f->max_tokens;
        if (n < cfg->max_batch) cfg->max_batch = n;
    } else {
        cfg->max_batch_bytes = o->max_batch_tokens * f->token_bytes;
    }
    return GP_OK;
}

int gb_workload_configure(gb_feed *f, gp_config *cfg, char *err, size_t len) {
    gb_workload *w = f->w;
    const gb_opts *o = w->o;
    cfg->sim_copy_bytes_per_s = o->copy_gbps * 1e9;
    int rc = GP_OK;
    if (w->synthetic) {
        cfg->item_out_bytes = w->out_bytes;
        cfg->compute = synth_compute;
        cfg->compute_user = f;
        if (!w->varlen) {
            cfg->item_in_bytes = w->in_bytes;
            cfg->sim_compute_us = o->host_spin ? 0 : o->compute_us;
            cfg->sim_compute_us_per_item = o->host_spin ? 0 : o->compute_us_per_item;
            return GP_OK;
        }
        /* Variable lengths: the whole compute cost in gp-bench's engine (synth_compute). */
        if ((rc = apply_budget(f, cfg, err, len)) != GP_OK) return rc;
        if (f->packing == GB_PADMAX) {
            cfg->item_in_bytes = w->in_bytes;
            return padmax_table(f, cfg, err, len);
        }
        cfg->max_item_in_bytes = w->in_bytes;
        cfg->arena_bytes = arena_for(w, cfg);
        if (f->packing == GB_PADDED) {
            cfg->compute_setup = pad_setup;
            cfg->compute_teardown = pad_teardown;
        }
        return GP_OK;
    }
#ifdef GB_HAVE_MODEL
    rc = gp_model_configure(w->model, cfg);
    if (rc != GP_OK) {
        snprintf(err, len, "gp_model_configure: %s", gp_strerror(rc));
        return rc;
    }
    f->in_bytes = cfg->item_in_bytes;
    f->inner = cfg->compute;
    f->inner_user = cfg->compute_user;
    f->inner_setup = cfg->compute_setup;
    f->inner_teardown = cfg->compute_teardown;
    cfg->compute = model_compute;
    cfg->compute_setup = model_setup;
    cfg->compute_teardown = model_teardown;
    cfg->compute_user = f;
    if (!w->varlen) return GP_OK;
    if ((rc = apply_budget(f, cfg, err, len)) != GP_OK) return rc;
    if (f->packing == GB_PADMAX) return padmax_table(f, cfg, err, len);
    cfg->arena_bytes = arena_for(w, cfg);
    return GP_OK;
#else
    snprintf(err, len, "model runtime not built");
    return GP_ENOTSUP;
#endif
}

const void *gb_workload_item(const gb_workload *w, uint64_t i) {
    return w->pool + (i % w->npool) * w->in_bytes;
}

int gb_feed_submit(gb_feed *f, gp_pipeline *p, uint64_t i, gp_done_fn done, void *user) {
    const gb_workload *w = f->w;
    const unsigned char *item = gb_workload_item(w, i);
    if (f->packing == GB_PACK_NONE) return gp_pipeline_submit(p, item, f->in_bytes, done, user);
    uint32_t tokens = gb_lengths_draw(&w->len, i);
    size_t bytes = (size_t)tokens * f->token_bytes;
    if (f->packing != GB_PADMAX) {
        gp_submit_args a;
        gp_submit_args_init(&a);
        a.input = item;
        a.input_bytes = bytes;
        a.done = done;
        a.user = user;
        return gp_pipeline_submit_ex(p, &a, NULL);
    }
    /* padmax: the item padded to the maximum in its slot, as a padding service writes it. */
    gp_reservation r;
    int rc =
        w->synthetic ? gp_pipeline_reserve(p, &r) : gp_pipeline_reserve_ex(p, w->in_bytes, 0, &r);
    if (rc != GP_OK) return rc;
    memcpy(r.data, item, bytes);
    memset((unsigned char *)r.data + bytes, 0, r.bytes - bytes);
    f->lens[r.seq & f->lens_mask] = tokens;
    rc = gp_pipeline_commit(p, &r, done, user);
    if (rc != GP_OK) gp_pipeline_abandon(p, &r);
    return rc;
}

/* ---- naive ------------------------------------------------------------------------------ */

typedef struct naive_bufs {
    unsigned char *out;              /* pageable, the caller's (inputs: the workload's pool) */
    unsigned char *dev_in, *dev_out; /* "device" buffers of one item */
    gb_hist *lat;
} naive_bufs;

static int naive_alloc(gb_workload *w, naive_bufs *b, char *err, size_t len) {
    b->out = malloc(w->out_bytes);
    b->dev_in = malloc(w->in_bytes);
    b->dev_out = malloc(w->out_bytes);
    b->lat = calloc(1, sizeof *b->lat);
    if (!b->out || !b->dev_in || !b->dev_out || !b->lat) {
        snprintf(err, len, "out of memory");
        return GP_ENOMEM;
    }
    return GP_OK;
}

static void naive_free(naive_bufs *b) {
    free(b->out);
    free(b->dev_in);
    free(b->dev_out);
    free(b->lat);
}

static void naive_result(gb_naive *r, naive_bufs *b, uint64_t items, double secs) {
    r->ran = 1;
    r->items = items;
    r->items_per_s = secs > 0 ? (double)items / secs : 0;
    r->p50_us = (double)gb_hist_quantile(b->lat, 0.50) / 1e3;
    r->p95_us = (double)gb_hist_quantile(b->lat, 0.95) / 1e3;
    r->p99_us = (double)gb_hist_quantile(b->lat, 0.99) / 1e3;
}

/* Bytes of item number i as the naive loop sends it: its own length (a batch of one has
   nothing to pad to), or the fixed size. */
static size_t naive_item_bytes(const gb_workload *w, uint64_t i, uint32_t *tokens) {
    *tokens = w->varlen ? gb_lengths_draw(&w->len, i) : 0;
    return w->varlen ? (size_t)*tokens * w->token_bytes : w->in_bytes;
}

/* Host backend: the same simulated costs the pipeline pays, per item, in series. */
static int naive_host(gb_workload *w, double seconds, gb_naive *r, char *err, size_t len) {
    const gb_opts *o = w->o;
    naive_bufs b = {0};
    int rc = naive_alloc(w, &b, err, len);
    double bw = o->copy_gbps * 1e9;
    uint64_t items = 0, tokens = 0;
    double t_start = now_s(), t_end = t_start + seconds;
    gb_feed fixed = {.w = w, .packing = GB_PACK_NONE};
    snprintf(r->how, sizeof r->how,
             "serial loop: pageable buffer, 1 item per call%s, copy in, compute, copy out, wait",
             w->varlen ? " at its own length" : "");
    while (rc == GP_OK && now_s() < t_end) {
        uint64_t t0 = gp_now_ns();
        uint32_t tk;
        size_t in_bytes = naive_item_bytes(w, items, &tk);
        memcpy(b.dev_in, gb_workload_item(w, items), in_bytes);
        if (bw > 0) sim_sleep_us((double)in_bytes / bw * 1e6);
        if (w->synthetic && w->varlen) {
            gp_batch batch = {.n = 1,
                              .in = b.dev_in,
                              .out = b.dev_out,
                              .in_bytes = in_bytes,
                              .out_bytes = w->out_bytes};
            token_results(&batch);
            sim_sleep_us(o->compute_us + o->compute_us_per_item + o->compute_us_per_token * tk);
        } else if (w->synthetic) {
            gp_batch batch = {.n = 1,
                              .capacity = 1,
                              .in = b.dev_in,
                              .out = b.dev_out,
                              .in_bytes = w->in_bytes,
                              .out_bytes = w->out_bytes,
                              .device = -1,
                              .backend = GP_BACKEND_HOST};
            rc = synth_compute(&fixed, &batch);
            if (!o->host_spin) sim_sleep_us(o->compute_us + o->compute_us_per_item);
        } else {
#ifdef GB_HAVE_MODEL
            uint64_t off[2] = {0, in_bytes};
            rc = w->varlen
                     ? gp_model_run_host_packed(w->model, 1, b.dev_in, off, b.dev_out, err, len)
                     : gp_model_run_host(w->model, 1, b.dev_in, b.dev_out, err, len);
#else
            rc = GP_ENOTSUP;
#endif
        }
        memcpy(b.out, b.dev_out, w->out_bytes);
        if (bw > 0) sim_sleep_us((double)w->out_bytes / bw * 1e6);
        gb_hist_add(b.lat, gp_now_ns() - t0);
        items++;
        tokens += tk;
    }
    if (rc == GP_OK) naive_result(r, &b, items, now_s() - t_start);
    r->tokens = tokens;
    naive_free(&b);
    return rc;
}

#ifdef GB_HAVE_SPIN
static int cuda_fail(cudaError_t e, const char *what, char *err, size_t len) {
    snprintf(err, len, "%s: %s", what, cudaGetErrorString(e));
    return GP_EDEVICE;
}

/* CUDA, synthetic: cudaMemcpy from pageable memory, the spin kernel for 1 item on the legacy
   default stream, cudaMemcpy back (which waits for the kernel). */
static int naive_cuda_synth(gb_workload *w, double seconds, gb_naive *r, char *err, size_t len) {
    const gb_opts *o = w->o;
    naive_bufs b = {0};
    void *d_in = NULL, *d_out = NULL;
    cudaError_t e;
    int rc = naive_alloc(w, &b, err, len);
    if (rc == GP_OK && (e = cudaSetDevice(0)) != cudaSuccess)
        rc = cuda_fail(e, "cudaSetDevice", err, len);
    if (rc == GP_OK && (e = cudaMalloc(&d_in, w->in_bytes)) != cudaSuccess)
        rc = cuda_fail(e, "cudaMalloc", err, len);
    if (rc == GP_OK && (e = cudaMalloc(&d_out, w->out_bytes)) != cudaSuccess)
        rc = cuda_fail(e, "cudaMalloc", err, len);
    snprintf(r->how, sizeof r->how,
             "serial loop: pageable buffer, 1 item per call%s, cudaMemcpy in, spin kernel, "
             "cudaMemcpy out (waits)",
             w->varlen ? " at its own length" : "");
    uint64_t items = 0, tokens = 0;
    double t_start = now_s(), t_end = t_start + seconds;
    while (rc == GP_OK && now_s() < t_end) {
        uint64_t t0 = gp_now_ns();
        uint32_t tk;
        size_t in_bytes = naive_item_bytes(w, items, &tk);
        if ((e = cudaMemcpy(d_in, gb_workload_item(w, items), in_bytes, cudaMemcpyHostToDevice)) !=
            cudaSuccess) {
            rc = cuda_fail(e, "cudaMemcpy H2D", err, len);
            break;
        }
        tokens += tk;
        e = bench_spin_launch((cudaStream_t)0,
                              (uint64_t)(o->compute_us * 1e3 + o->compute_us_per_item * 1e3 +
                                         o->compute_us_per_token * 1e3 * tk),
                              1, NULL, 0, 0);
        if (e != cudaSuccess) {
            rc = cuda_fail(e, "spin kernel", err, len);
            break;
        }
        if ((e = cudaMemcpy(b.out, d_out, w->out_bytes, cudaMemcpyDeviceToHost)) != cudaSuccess) {
            rc = cuda_fail(e, "cudaMemcpy D2H", err, len);
            break;
        }
        gb_hist_add(b.lat, gp_now_ns() - t0);
        items++;
    }
    if (rc == GP_OK) naive_result(r, &b, items, now_s() - t_start);
    r->tokens = tokens;
    cudaFree(d_in);
    cudaFree(d_out);
    naive_free(&b);
    return rc;
}
#endif

#ifdef GB_HAVE_MODEL
/* CUDA, model: the model's device layers need a slot's stream and handles, so the serial loop
   goes through a one-slot pipeline with max_batch 1 and waits for each item. Completion spins
   (config.spin_wait), as PyTorch's .cpu() does, rather than a blocking-sync wake; the first
   items (lazy kernel loading, first cuBLASLt calls) run before the timing, as the pipeline's
   points have their warm-up. Unlike the articles' loop it copies through the pinned ring
   with async copies: the slot is the only place the device layers run. */
static int naive_cuda_model(gb_workload *w, double seconds, gb_naive *r, char *err, size_t len) {
    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = GP_BACKEND_CUDA;
    cfg.max_batch = 1;
    cfg.inflight = 1;
    cfg.spin_wait = 1;
    gb_feed feed;
    int rc = gb_feed_init(&feed, w, w->varlen ? GB_PACKED : GB_PACK_NONE, err, len);
    int fed = rc == GP_OK;
    if (rc == GP_OK) rc = gb_workload_configure(&feed, &cfg, err, len);
    gp_pipeline *p = NULL;
    if (rc == GP_OK) rc = gp_pipeline_create(&cfg, &p, err, len);
    naive_bufs b = {0};
    if (rc == GP_OK) rc = naive_alloc(w, &b, err, len);
    snprintf(r->how, sizeof r->how,
             "serial loop: gp_pipeline_infer, 1 item per call%s, one slot, spin-wait; pinned "
             "ring, async copies (device layers run only in a slot)",
             w->varlen ? " at its own length" : "");
    for (uint64_t i = 0; rc == GP_OK && i < 20; i++) { /* warm-up, not timed */
        uint32_t tk;
        size_t in_bytes = naive_item_bytes(w, i, &tk);
        rc = gp_pipeline_infer(p, gb_workload_item(w, i), in_bytes, b.out, w->out_bytes);
    }
    uint64_t items = 0, tokens = 0;
    double t_start = now_s(), t_end = t_start + seconds;
    while (rc == GP_OK && now_s() < t_end) {
        uint64_t t0 = gp_now_ns();
        uint32_t tk;
        size_t in_bytes = naive_item_bytes(w, items, &tk);
        rc = gp_pipeline_infer(p, gb_workload_item(w, items), in_bytes, b.out, w->out_bytes);
        gb_hist_add(b.lat, gp_now_ns() - t0);
        items++;
        tokens += tk;
    }
    if (rc == GP_OK)
        naive_result(r, &b, items, now_s() - t_start);
    else if (p && !err[0])
        gp_pipeline_last_error(p, err, len);
    r->tokens = tokens;
    gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
    if (fed) gb_feed_free(&feed);
    naive_free(&b);
    return rc;
}
#endif

int gb_workload_naive(gb_workload *w, gp_backend backend, double seconds, gb_naive *r, char *err,
                      size_t len) {
    memset(r, 0, sizeof *r);
    if (err && len) err[0] = '\0';
    if (backend == GP_BACKEND_HOST) return naive_host(w, seconds, r, err, len);
    if (w->synthetic) {
#ifdef GB_HAVE_SPIN
        return naive_cuda_synth(w, seconds, r, err, len);
#else
        snprintf(err, len, "naive baseline on CUDA needs the spin kernel (not built)");
        return GP_ENOTSUP;
#endif
    }
#ifdef GB_HAVE_MODEL
    return naive_cuda_model(w, seconds, r, err, len);
#else
    snprintf(err, len, "model runtime not built");
    return GP_ENOTSUP;
#endif
}

void gb_gpu_desc(char *buf, size_t len) {
    if (len) buf[0] = '\0';
#ifdef GB_HAVE_SPIN
    struct cudaDeviceProp p;
    int drv = 0;
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess && cudaDriverGetVersion(&drv) == cudaSuccess)
        snprintf(buf, len, "GPU 0 %s (cc %d.%d, %d SMs, driver CUDA %d.%d)", p.name, p.major,
                 p.minor, p.multiProcessorCount, drv / 1000, drv % 1000 / 10);
#endif
}

int gb_workload_supports(const gb_workload *w, gp_backend backend, char *err, size_t len) {
    if (backend != GP_BACKEND_CUDA || !w->synthetic) return GP_OK;
#ifdef GB_HAVE_SPIN
    return GP_OK;
#else
    snprintf(
        err, len,
        "--workload synthetic on the CUDA backend needs the spin kernel (bench/bench-spin.cu), "
        "which is not built into this gp-bench; use --backend host");
    return GP_ENOTSUP;
#endif
}

int gb_workload_slot_cpu(const gb_workload *w) {
    return !w->synthetic;
}

int gb_workload_cpu_compute(const gb_workload *w, gp_backend backend) {
    /* A GPU batch and the host backend's simulated compute (one engine) run one at a time;
       real CPU compute on the host backend runs on each slot's thread. */
    return backend == GP_BACKEND_HOST && (!w->synthetic || w->o->host_spin);
}

/* ---- compute alone ---------------------------------------------------------------------- */

/* The bound of CPU compute that gp-bench calls itself: the synthetic workload's busy loop
   (--host-spin). A model's CPU compute is timed inside a one-slot pipeline instead
   (gb_workload_slot_cpu): run alone through gp_model_run_host it would allocate its scratch on
   every call, and the page faults put that "bound" below the pipeline. */

typedef struct alone_lane {
    const gp_config *cfg;
    gp_batch b;
    pthread_t th;
    int started;
    _Atomic int *go, *stop;
    _Atomic uint64_t batches; /* completed, the warm-up one included */
    double cpu_s;             /* thread CPU time of the batches after the warm-up one */
    _Atomic int rc;
} alone_lane;

static void *alone_main(void *arg) {
    alone_lane *l = arg;
    while (!atomic_load(l->go) && !atomic_load(l->stop))
        sched_yield();
    while (!atomic_load(l->stop)) {
        double c0 = thread_cpu_s();
        int rc = l->cfg->compute(l->cfg->compute_user, &l->b);
        double c1 = thread_cpu_s();
        if (rc != GP_OK) {
            atomic_store(&l->rc, rc);
            break;
        }
        /* A batch that ends after the stop ran partly alone: not counted. */
        if (atomic_load(l->stop)) break;
        if (atomic_load(&l->batches) > 0) l->cpu_s += c1 - c0; /* the first one warms up */
        atomic_fetch_add(&l->batches, 1);
    }
    return NULL;
}

int gb_workload_compute_alone(gb_workload *w, size_t batch, int threads, double seconds,
                              double *items_per_s, double *batch_cpu_us, char *err, size_t len) {
    if (!w->synthetic || w->varlen) {
        snprintf(err, len, "compute alone: fixed-size synthetic workloads only");
        return GP_ENOTSUP;
    }
    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = GP_BACKEND_HOST;
    cfg.max_batch = batch;
    cfg.inflight = threads;
    gb_feed feed;
    int rc = gb_feed_init(&feed, w, GB_PACK_NONE, err, len);
    if (rc != GP_OK) return rc;
    if ((rc = gb_workload_configure(&feed, &cfg, err, len)) != GP_OK) {
        gb_feed_free(&feed);
        return rc;
    }
    alone_lane *lanes = calloc((size_t)threads, sizeof *lanes);
    _Atomic int go = 0, stop = 0;
    if (!lanes) {
        gb_feed_free(&feed);
        snprintf(err, len, "out of memory");
        return GP_ENOMEM;
    }
    /* Each thread owns its buffers, as a pipeline slot does. */
    for (int i = 0; rc == GP_OK && i < threads; i++) {
        alone_lane *l = &lanes[i];
        l->cfg = &cfg;
        l->go = &go;
        l->stop = &stop;
        unsigned char *in = malloc(batch * cfg.item_in_bytes);
        void *out = malloc(batch * cfg.item_out_bytes);
        l->b = (gp_batch){.n = batch,
                          .capacity = batch,
                          .in = in,
                          .out = out,
                          .in_bytes = cfg.item_in_bytes,
                          .out_bytes = cfg.item_out_bytes,
                          .slot = i,
                          .device = -1,
                          .backend = GP_BACKEND_HOST};
        if (!in || !out) {
            snprintf(err, len, "out of memory");
            rc = GP_ENOMEM;
            break;
        }
        for (size_t k = 0; k < batch; k++)
            memcpy(in + k * cfg.item_in_bytes, gb_workload_item(w, k), cfg.item_in_bytes);
        if (pthread_create(&l->th, NULL, alone_main, l) != 0) {
            snprintf(err, len, "pthread_create failed");
            rc = GP_ESYS;
            break;
        }
        l->started = 1;
    }
    /* Run until every thread did its warm-up batch and GB_MIN_BATCHES more, for `seconds` at
       least; at most 600 s. */
    double t0 = now_s();
    if (rc == GP_OK) {
        atomic_store(&go, 1);
        for (;;) {
            int enough = 1, failed = 0;
            for (int i = 0; i < threads; i++) {
                enough &= atomic_load(&lanes[i].batches) >= 1 + GB_MIN_BATCHES;
                failed |= atomic_load(&lanes[i].rc) != GP_OK;
            }
            double t = now_s();
            if (failed || (enough && t - t0 >= seconds) || t - t0 > 600) break;
            sim_sleep_us(2000);
        }
    }
    atomic_store(&stop, 1);
    double cpu_s = 0;
    uint64_t counted = 0;
    for (int i = 0; i < threads; i++) {
        alone_lane *l = &lanes[i];
        if (l->started) pthread_join(l->th, NULL);
        if (rc == GP_OK && atomic_load(&l->rc) != GP_OK) {
            rc = atomic_load(&l->rc);
            snprintf(err, len, "compute failed: %s", gp_strerror(rc));
        }
        uint64_t n = atomic_load(&l->batches);
        if (rc == GP_OK && n < 1 + GB_MIN_BATCHES) {
            snprintf(err, len, "%d threads did fewer than %d batches of %zu in 600 s", threads,
                     1 + GB_MIN_BATCHES, batch);
            rc = GP_ETIMEDOUT;
        }
        if (rc == GP_OK) {
            cpu_s += l->cpu_s;
            counted += n - 1;
        }
        free((void *)l->b.in);
        free(l->b.out);
    }
    free(lanes);
    gb_feed_free(&feed);
    /* CPU time, not wall time: on a shared machine the wall time of a busy loop depends on
       what else runs, and the bound is what these threads could do with the cores to
       themselves: min(threads, cores) batches at once, each taking its CPU time. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int at_once = cores > 0 && cores < threads ? (int)cores : threads;
    if (rc == GP_OK && cpu_s <= 0) {
        snprintf(err, len, "no measurable CPU time in %llu batches", (unsigned long long)counted);
        rc = GP_ETIMEDOUT;
    }
    if (rc == GP_OK) {
        *batch_cpu_us = cpu_s / (double)counted * 1e6;
        *items_per_s = (double)at_once * (double)batch / (cpu_s / (double)counted);
    }
    return rc;
}
