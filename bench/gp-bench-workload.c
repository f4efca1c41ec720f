/*
 * gp-bench workloads: what a batch costs, and the naive serial loop over the same compute.
 *
 * synthetic: items of in/out bytes; compute of compute_us per batch + compute_us_per_item per
 *   item. Host backend: the library's simulated engines (sim_compute_us*, and
 *   sim_copy_bytes_per_s from --copy-gbps), or a busy loop with --host-spin. CUDA backend: the
 *   spin kernel (bench/bench-spin.cu), with real copies.
 * mlp | cnn | FILE.safetensors: the built-in model runtime (include/gpupipe/model.h).
 *
 * naive: one item per call from a pageable buffer: synchronous copy in, compute, synchronous
 * copy out, wait; the cost model is the same as the pipeline's (on the host backend the same
 * simulated copy and compute times, slept the same way).
 *
 * compute alone (the bound of CPU compute on the host backend): the configured compute called
 * directly on as many threads as the pipeline has slot threads, nothing else running.
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
#endif
#ifdef GB_HAVE_SPIN
#include <cuda_runtime_api.h>

#include "bench-spin.h"
#endif

struct gb_workload {
    const gb_opts *o;
    char desc[256];
    size_t in_bytes, out_bytes;
    int synthetic;
    unsigned char *pool; /* npool distinct inputs */
    size_t npool;
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

static int synth_compute(void *user, const gp_batch *b) {
    const gb_workload *w = user;
    const gb_opts *o = w->o;
    if (b->backend == GP_BACKEND_CUDA) {
#ifdef GB_HAVE_SPIN
        uint64_t ns = (uint64_t)(o->compute_us * 1e3 + o->compute_us_per_item * 1e3 * (double)b->n);
        cudaError_t e = bench_spin_launch((cudaStream_t)b->stream, ns, 1, NULL, 0, 0);
        return e == cudaSuccess ? GP_OK : GP_EDEVICE;
#else
        return GP_ENOTSUP;
#endif
    }
    /* Host: a token result per item (first bytes of the input), then the cost. */
    size_t k = b->in_bytes < b->out_bytes ? b->in_bytes : b->out_bytes;
    if (k > 8) k = 8;
    for (size_t i = 0; i < b->n; i++)
        memcpy((char *)b->out + i * b->out_bytes, (const char *)b->in + i * b->in_bytes, k);
    if (o->host_spin) spin_us(o->compute_us + o->compute_us_per_item * (double)b->n);
    return GP_OK;
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

static int is_model_name(const char *s) {
    size_t n = strlen(s);
    const char *ext = ".safetensors";
    size_t e = strlen(ext);
    return !strcmp(s, "mlp") || !strcmp(s, "cnn") || (n > e && !strcmp(s + n - e, ext));
}

int gb_workload_open(const gb_opts *o, gb_workload **out, char *err, size_t len) {
    *out = NULL;
    gb_workload *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, len, "out of memory");
        return GP_ENOMEM;
    }
    w->o = o;
    if (!strcmp(o->workload, "synthetic")) {
        w->synthetic = 1;
        w->in_bytes = o->in_bytes;
        w->out_bytes = o->out_bytes;
        char copies[64];
        if (o->copy_gbps > 0)
            snprintf(copies, sizeof copies, "%.3g GB/s simulated on host", o->copy_gbps);
        else
            snprintf(copies, sizeof copies, "free on host");
        snprintf(w->desc, sizeof w->desc,
                 "synthetic: %zu B in, %zu B out per item; compute %.4g us/batch + %.4g "
                 "us/item (host: %s, CUDA: spin kernel); copies %s",
                 w->in_bytes, w->out_bytes, o->compute_us, o->compute_us_per_item,
                 o->host_spin ? "busy loop" : "simulated", copies);
        int rc = make_pool(w, err, len);
        if (rc != GP_OK) {
            free(w);
            return rc;
        }
        *out = w;
        return GP_OK;
    }
    if (!is_model_name(o->workload)) {
        snprintf(err, len, "--workload %s: expected synthetic, mlp, cnn or FILE.safetensors",
                 o->workload);
        free(w);
        return GP_EINVAL;
    }
#ifdef GB_HAVE_MODEL
    gp_model_options mo;
    gp_model_options_init(&mo);
    if (o->precision && gp_precision_parse(o->precision, &mo.precision) != GP_OK) {
        snprintf(err, len, "--precision %s: expected fp32, tf32, fp16 or bf16", o->precision);
        free(w);
        return GP_EINVAL;
    }
    int rc = !strcmp(o->workload, "mlp") || !strcmp(o->workload, "cnn")
                 ? gp_model_demo(o->workload, &mo, &w->model, err, len)
                 : gp_model_load(o->workload, &mo, &w->model, err, len);
    if (rc != GP_OK) {
        free(w);
        return rc;
    }
    gp_tensor_info oi;
    gp_model_input_info(w->model, &w->in_info);
    gp_model_output_info(w->model, &oi);
    w->in_bytes = gp_model_input_bytes(w->model);
    w->out_bytes = gp_model_output_bytes(w->model);
    char ind[48] = "", outd[48] = "";
    for (int i = 0; i < w->in_info.rank; i++)
        snprintf(ind + strlen(ind), sizeof ind - strlen(ind), "%s%lld", i ? "x" : "",
                 (long long)w->in_info.dims[i]);
    for (int i = 0; i < oi.rank; i++)
        snprintf(outd + strlen(outd), sizeof outd - strlen(outd), "%s%lld", i ? "x" : "",
                 (long long)oi.dims[i]);
    snprintf(w->desc, sizeof w->desc, "model %s: %s[%s] -> %s[%s], %.3g MFLOP/item%s%s",
             o->workload, gp_dtype_name(w->in_info.dtype), ind, gp_dtype_name(oi.dtype), outd,
             gp_model_flops(w->model) / 1e6, o->precision ? ", precision " : "",
             o->precision ? o->precision : "");
    if ((rc = make_pool(w, err, len)) != GP_OK) {
        gb_workload_close(w);
        return rc;
    }
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

size_t gb_workload_in_bytes(const gb_workload *w) {
    return w->in_bytes;
}

int gb_workload_configure(gb_workload *w, gp_config *cfg, char *err, size_t len) {
    const gb_opts *o = w->o;
    cfg->sim_copy_bytes_per_s = o->copy_gbps * 1e9;
    if (w->synthetic) {
        cfg->item_in_bytes = w->in_bytes;
        cfg->item_out_bytes = w->out_bytes;
        cfg->compute = synth_compute;
        cfg->compute_user = w;
        cfg->sim_compute_us = o->host_spin ? 0 : o->compute_us;
        cfg->sim_compute_us_per_item = o->host_spin ? 0 : o->compute_us_per_item;
        return GP_OK;
    }
#ifdef GB_HAVE_MODEL
    int rc = gp_model_configure(w->model, cfg);
    if (rc != GP_OK) snprintf(err, len, "gp_model_configure: %s", gp_strerror(rc));
    return rc;
#else
    snprintf(err, len, "model runtime not built");
    return GP_ENOTSUP;
#endif
}

const void *gb_workload_item(const gb_workload *w, uint64_t i) {
    return w->pool + (i % w->npool) * w->in_bytes;
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
    r->p99_us = (double)gb_hist_quantile(b->lat, 0.99) / 1e3;
}

/* Host backend: the same simulated costs the pipeline pays, per item, in series. */
static int naive_host(gb_workload *w, double seconds, gb_naive *r, char *err, size_t len) {
    const gb_opts *o = w->o;
    naive_bufs b = {0};
    int rc = naive_alloc(w, &b, err, len);
    double bw = o->copy_gbps * 1e9;
    uint64_t items = 0;
    double t_start = now_s(), t_end = t_start + seconds;
    snprintf(r->how, sizeof r->how,
             "serial loop: pageable buffer, 1 item per call, copy in, compute, copy out, wait");
    while (rc == GP_OK && now_s() < t_end) {
        uint64_t t0 = gp_now_ns();
        memcpy(b.dev_in, gb_workload_item(w, items), w->in_bytes);
        if (bw > 0) sim_sleep_us((double)w->in_bytes / bw * 1e6);
        if (w->synthetic) {
            gp_batch batch = {.n = 1,
                              .capacity = 1,
                              .in = b.dev_in,
                              .out = b.dev_out,
                              .in_bytes = w->in_bytes,
                              .out_bytes = w->out_bytes,
                              .device = -1,
                              .backend = GP_BACKEND_HOST};
            rc = synth_compute(w, &batch);
            if (!o->host_spin) sim_sleep_us(o->compute_us + o->compute_us_per_item);
        } else {
#ifdef GB_HAVE_MODEL
            rc = gp_model_run_host(w->model, 1, b.dev_in, b.dev_out, err, len);
#else
            rc = GP_ENOTSUP;
#endif
        }
        memcpy(b.out, b.dev_out, w->out_bytes);
        if (bw > 0) sim_sleep_us((double)w->out_bytes / bw * 1e6);
        gb_hist_add(b.lat, gp_now_ns() - t0);
        items++;
    }
    if (rc == GP_OK) naive_result(r, &b, items, now_s() - t_start);
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
             "serial loop: pageable buffer, 1 item per call, cudaMemcpy in, spin kernel, "
             "cudaMemcpy out (waits)");
    uint64_t items = 0;
    double t_start = now_s(), t_end = t_start + seconds;
    while (rc == GP_OK && now_s() < t_end) {
        uint64_t t0 = gp_now_ns();
        if ((e = cudaMemcpy(d_in, gb_workload_item(w, items), w->in_bytes,
                            cudaMemcpyHostToDevice)) != cudaSuccess) {
            rc = cuda_fail(e, "cudaMemcpy H2D", err, len);
            break;
        }
        e = bench_spin_launch((cudaStream_t)0,
                              (uint64_t)(o->compute_us * 1e3 + o->compute_us_per_item * 1e3), 1,
                              NULL, 0, 0);
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
    cudaFree(d_in);
    cudaFree(d_out);
    naive_free(&b);
    return rc;
}
#endif

#ifdef GB_HAVE_MODEL
/* CUDA, model: the model's device layers need a slot's stream and handles, so the serial loop
   goes through a one-slot pipeline with max_batch 1 and waits for each item. */
static int naive_cuda_model(gb_workload *w, double seconds, gb_naive *r, char *err, size_t len) {
    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = GP_BACKEND_CUDA;
    cfg.max_batch = 1;
    cfg.inflight = 1;
    int rc = gb_workload_configure(w, &cfg, err, len);
    gp_pipeline *p = NULL;
    if (rc == GP_OK) rc = gp_pipeline_create(&cfg, &p, err, len);
    naive_bufs b = {0};
    if (rc == GP_OK) rc = naive_alloc(w, &b, err, len);
    snprintf(r->how, sizeof r->how,
             "serial loop: gp_pipeline_infer, 1 item per call, one slot, wait (the model's "
             "device layers run only inside a pipeline slot)");
    uint64_t items = 0;
    double t_start = now_s(), t_end = t_start + seconds;
    while (rc == GP_OK && now_s() < t_end) {
        uint64_t t0 = gp_now_ns();
        rc = gp_pipeline_infer(p, gb_workload_item(w, items), w->in_bytes, b.out, w->out_bytes);
        gb_hist_add(b.lat, gp_now_ns() - t0);
        items++;
    }
    if (rc == GP_OK)
        naive_result(r, &b, items, now_s() - t_start);
    else if (p && !err[0])
        gp_pipeline_last_error(p, err, len);
    gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
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

int gb_workload_cpu_compute(const gb_workload *w, gp_backend backend) {
    /* A GPU batch and the host backend's simulated compute (one engine) run one at a time;
       real CPU compute on the host backend runs on each slot's thread. */
    return backend == GP_BACKEND_HOST && (!w->synthetic || w->o->host_spin);
}

/* ---- compute alone ---------------------------------------------------------------------- */

typedef struct alone_lane {
    gb_workload *w;
    const gp_config *cfg;
    gp_batch b;
    pthread_t th;
    int started, ready;
    _Atomic int *go, *stop;
    _Atomic uint64_t batches; /* completed, the warm-up one included */
    double cpu_s;             /* thread CPU time of the batches after the warm-up one */
    _Atomic int rc;
} alone_lane;

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *alone_main(void *arg) {
    alone_lane *l = arg;
    while (!atomic_load(l->go) && !atomic_load(l->stop))
        sched_yield();
    while (!atomic_load(l->stop)) {
        double c0 = thread_cpu_s();
        int rc;
#ifdef GB_HAVE_MODEL
        /* A model's compute keeps its state in a pipeline's slot (gp_batch.slot_user): alone,
           its host layers run through gp_model_run_host, the same layers on the same data. */
        if (l->w->model)
            rc = gp_model_run_host(l->w->model, l->b.n, l->b.in, l->b.out, NULL, 0);
        else
#endif
            rc = l->cfg->compute(l->cfg->compute_user, &l->b);
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
    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = GP_BACKEND_HOST;
    int rc = gb_workload_configure(w, &cfg, err, len);
    if (rc != GP_OK) return rc;
    alone_lane *lanes = calloc((size_t)threads, sizeof *lanes);
    _Atomic int go = 0, stop = 0;
    if (!lanes) {
        snprintf(err, len, "out of memory");
        return GP_ENOMEM;
    }
    /* Each thread owns buffers and per-slot state, as a pipeline slot does (compute_setup
       with b->n == 0 first, compute_teardown last). */
    for (int i = 0; rc == GP_OK && i < threads; i++) {
        alone_lane *l = &lanes[i];
        l->w = w;
        l->cfg = &cfg;
        l->go = &go;
        l->stop = &stop;
        void *in = malloc(batch * cfg.item_in_bytes), *out = malloc(batch * cfg.item_out_bytes);
        l->b = (gp_batch){.n = 0,
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
            memcpy((char *)in + k * cfg.item_in_bytes, gb_workload_item(w, k), cfg.item_in_bytes);
        int model = 0;
#ifdef GB_HAVE_MODEL
        model = w->model != NULL; /* runs without setup (alone_main) */
#endif
        if (!model && cfg.compute_setup &&
            (rc = cfg.compute_setup(cfg.compute_user, &l->b)) != GP_OK) {
            snprintf(err, len, "compute_setup: %s", gp_strerror(rc));
            break;
        }
        l->ready = !model;
        l->b.n = batch;
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
        l->b.n = 0;
        if (l->ready && cfg.compute_teardown) cfg.compute_teardown(cfg.compute_user, &l->b);
        free((void *)l->b.in);
        free(l->b.out);
    }
    free(lanes);
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
