/*
 * test_torch: libgpupipe-torch through its C API on one backend, against PyTorch eager outputs
 * on the same inputs (fixtures written by make_fixtures.py, shapes listed there).
 *
 *   outputs: the MLP at max_batch 1, 7 and 32 (batches of several sizes), ResNet-18, the MLP in
 *            bf16, a model returning [N]; host fp32 within 1e-5 of eager (relative to the
 *            largest output), CUDA within 1e-4 (5e-3 for convolutions: PyTorch allows TF32 in
 *            cuDNN by default), bf16 within 2e-2
 *   errors:  bad options and files at load; a model that raises fails only its batch; input
 *            shape, output shape and dtype mismatches and a tuple result fail the batch (no
 *            warm-up) or gp_pipeline_create (warm-up), with readable messages; one live
 *            pipeline per model
 *   shutdown with batches in flight, GP_DESTROY_CANCEL and GP_DESTROY_DRAIN: every accepted
 *            item gets exactly one callback, outputs delivered are right
 *
 * usage: test_torch host|cuda FIXTURE_DIR. Exit 77 (skipped, reason printed) when the fixtures
 * could not be made (no PyTorch for Python) or, for cuda, when there is no usable device or
 * this build's LibTorch has no CUDA.
 */
#include <gpupipe/gpupipe.h>
#include <gpupipe/torch.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpt.h" /* check macros only: this test links the shared libraries, not the support */

static const char *g_dir;
static gp_backend g_backend;

/* ---- helpers --------------------------------------------------------------------------- */

static const char *fixture(const char *name) {
    static _Thread_local char buf[4][1024];
    static _Thread_local int k;
    char *b = buf[k++ % 4];
    int n = snprintf(b, sizeof buf[0], "%s/%s", g_dir, name);
    GPT_CHECK(n > 0 && (size_t)n < sizeof buf[0]);
    return b;
}

/* The whole file, which must hold exactly `bytes`. */
static void *read_fixture(const char *name, size_t bytes) {
    FILE *f = fopen(fixture(name), "rb");
    if (!f) {
        fprintf(stderr, "cannot open fixture %s\n", fixture(name));
        exit(1);
    }
    void *p = malloc(bytes + 1);
    GPT_CHECK(p != NULL);
    size_t got = fread(p, 1, bytes + 1, f);
    GPT_CHECK(fclose(f) == 0);
    if (got != bytes) {
        fprintf(stderr, "fixture %s: %zu bytes, expected %zu\n", name, got, bytes);
        exit(1);
    }
    return p;
}

static int contains(const char *s, const char *part) {
    return strstr(s, part) != NULL;
}

#define CHECK_MSG(s, part)                                                                         \
    do {                                                                                           \
        if (!contains((s), (part))) {                                                              \
            fprintf(stderr, "%s:%d: message \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__, \
                    (s), (part));                                                                  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static gp_torch_item item1(gp_dtype t, int64_t d0) {
    gp_torch_item it = {t, 1, {d0}};
    return it;
}

static void options(gp_torch_options *o, gp_torch_item in) {
    gp_torch_options_init(o);
    o->input = in;
}

static gp_torch_model *load_ok(const char *file, const gp_torch_options *o) {
    gp_torch_model *m = NULL;
    char err[1024] = "";
    int rc = gp_torch_model_load(fixture(file), o, &m, err, sizeof err);
    if (rc != GP_OK) {
        fprintf(stderr, "load %s: %s: %s\n", file, gp_err_name(rc), err);
        exit(1);
    }
    return m;
}

/* Load that must fail with `want`, the message containing `part`. */
static void load_fails(const char *path, const gp_torch_options *o, int want, const char *part) {
    gp_torch_model *m = (gp_torch_model *)&m; /* must come back NULL */
    char err[2048] = "";
    GPT_RC(gp_torch_model_load(path, o, &m, err, sizeof err), want);
    GPT_CHECK(m == NULL);
    CHECK_MSG(err, part);
    printf("  load %s -> %s: %.160s\n", strrchr(path, '/') ? strrchr(path, '/') + 1 : path,
           gp_err_name(want), err);
}

/* ---- batch traces ---------------------------------------------------------------------- */

#define MAX_TRACES 8192

typedef struct traces {
    pthread_mutex_t mu;
    size_t n;
    gp_batch_trace t[MAX_TRACES];
} traces;

static void on_batch(void *user, const gp_batch_trace *t) {
    traces *tr = user;
    pthread_mutex_lock(&tr->mu);
    if (tr->n < MAX_TRACES) tr->t[tr->n++] = *t;
    pthread_mutex_unlock(&tr->mu);
}

static traces *traces_new(void) {
    traces *tr = calloc(1, sizeof *tr);
    GPT_CHECK(tr != NULL);
    GPT_CHECK(pthread_mutex_init(&tr->mu, NULL) == 0);
    return tr;
}

static void traces_free(traces *tr) {
    pthread_mutex_destroy(&tr->mu);
    free(tr);
}

/* ---- a run: items, their results, exactly-once accounting ------------------------------ */

typedef struct run {
    size_t n, in_bytes, out_bytes;
    const unsigned char *in; /* n items */
    unsigned char *out;      /* n items, written by callbacks */
    int *status;
    atomic_int *calls;
    atomic_int accepted;
    struct tag {
        struct run *r;
        size_t i;
    } * tags;
} run;

static void run_init(run *r, size_t n, const void *in, size_t in_bytes, size_t out_bytes) {
    memset(r, 0, sizeof *r);
    r->n = n;
    r->in = in;
    r->in_bytes = in_bytes;
    r->out_bytes = out_bytes;
    r->out = calloc(n, out_bytes);
    r->status = calloc(n, sizeof *r->status);
    r->calls = calloc(n, sizeof *r->calls);
    r->tags = calloc(n, sizeof *r->tags);
    GPT_CHECK(r->out && r->status && r->calls && r->tags);
    for (size_t i = 0; i < n; i++)
        r->tags[i] = (struct tag){r, i};
}

static void run_free(run *r) {
    free(r->out);
    free(r->status);
    free(r->calls);
    free(r->tags);
}

static void on_done(void *user, int status, const void *out, size_t bytes) {
    struct tag *t = user;
    run *r = t->r;
    r->status[t->i] = status;
    if (status == GP_OK) {
        GPT_EQ(bytes, r->out_bytes);
        memcpy(r->out + t->i * r->out_bytes, out, bytes);
    }
    atomic_fetch_add(&r->calls[t->i], 1);
}

typedef struct producer {
    gp_pipeline *p;
    run *r;
    size_t first, step;
    pthread_t th;
} producer;

/* Submit items first, first + step, ... until the end or GP_ESHUTDOWN. */
static void *produce(void *arg) {
    producer *pr = arg;
    run *r = pr->r;
    for (size_t i = pr->first; i < r->n; i += pr->step) {
        int rc =
            gp_pipeline_submit(pr->p, r->in + i * r->in_bytes, r->in_bytes, on_done, &r->tags[i]);
        if (rc == GP_ESHUTDOWN) break;
        GPT_RC(rc, GP_OK);
        atomic_fetch_add(&r->accepted, 1);
    }
    return NULL;
}

static void start(producer *pr, int np, gp_pipeline *p, run *r) {
    for (int k = 0; k < np; k++) {
        pr[k] = (producer){p, r, (size_t)k, (size_t)np, 0};
        GPT_CHECK(pthread_create(&pr[k].th, NULL, produce, &pr[k]) == 0);
    }
}

static void join(producer *pr, int np) {
    for (int k = 0; k < np; k++)
        GPT_CHECK(pthread_join(pr[k].th, NULL) == 0);
}

/* Every item submitted, each called back exactly once. */
static void run_all(gp_pipeline *p, run *r, int np) {
    producer pr[8];
    start(pr, np, p, r);
    join(pr, np);
    GPT_RC(gp_pipeline_drain(p, -1), GP_OK);
    GPT_EQ(atomic_load(&r->accepted), r->n);
    for (size_t i = 0; i < r->n; i++)
        GPT_EQ(atomic_load(&r->calls[i]), 1);
}

static gp_pipeline *create(gp_config *cfg) {
    gp_pipeline *p = NULL;
    char err[512] = "";
    int rc = gp_pipeline_create(cfg, &p, err, sizeof err);
    if (rc == GP_ENODEV && g_backend == GP_BACKEND_CUDA) {
        printf("SKIP: no usable CUDA device: %s\n", err);
        exit(gpt_no_device());
    }
    if (rc != GP_OK) {
        char terr[2048] = "";
        gp_torch_last_error((gp_torch_model *)cfg->compute_user, terr, sizeof terr);
        fprintf(stderr, "create: %s: %s\n  torch: %s\n", gp_err_name(rc), err, terr);
        exit(1);
    }
    return p;
}

static void config(gp_config *cfg, gp_torch_model *m) {
    gp_config_init(cfg);
    cfg->backend = g_backend;
    GPT_RC(gp_torch_configure(m, cfg), GP_OK);
}

/* max |got - ref| / max |ref| over n floats. */
static double rel_err(const float *got, const float *ref, size_t n) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!(d <= diff)) diff = d; /* NaN propagates */
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    }
    return scale > 0 ? diff / scale : diff;
}

/* ---- cases ----------------------------------------------------------------------------- */

static void test_load_errors(void) {
    printf("load errors\n");
    gp_torch_options o;
    options(&o, item1(GP_DTYPE_F32, 16));
    gp_torch_model *m = NULL;
    char err[512] = "";
    GPT_RC(gp_torch_model_load(fixture("mlp.pt"), NULL, &m, err, sizeof err), GP_EINVAL);
    CHECK_MSG(err, "options are required");
    GPT_RC(gp_torch_model_load(NULL, &o, &m, NULL, 0), GP_EINVAL);
    GPT_RC(gp_torch_model_load(fixture("mlp.pt"), &o, NULL, NULL, 0), GP_EINVAL);
    gp_torch_options bad = o;
    bad.struct_size = 4;
    load_fails(fixture("mlp.pt"), &bad, GP_EINVAL, "struct_size");
    bad.struct_size = sizeof bad + 8; /* built against a newer header: its fields unread */
    load_fails(fixture("mlp.pt"), &bad, GP_EINVAL, "struct_size");
    bad = o;
    bad.input.rank = 0;
    load_fails(fixture("mlp.pt"), &bad, GP_EINVAL, "options.input.rank is 0");
    bad = o;
    bad.input.dims[0] = 0;
    load_fails(fixture("mlp.pt"), &bad, GP_EINVAL, "options.input.dims[0] is 0");
    bad = o;
    bad.input.dtype = (gp_dtype)99;
    load_fails(fixture("mlp.pt"), &bad, GP_EINVAL, "not a gp_dtype");
    bad = o;
    bad.input.dtype = GP_DTYPE_U32;
    load_fails(fixture("mlp.pt"), &bad, GP_EINVAL, "options.input.dtype u32 has no LibTorch");
    bad = o;
    bad.output = (gp_torch_item){GP_DTYPE_F32, 9, {1}};
    load_fails(fixture("mlp.pt"), &bad, GP_EINVAL, "options.output.rank is 9");
    bad = o;
    bad.precision = GP_PRECISION_TF32;
    load_fails(fixture("mlp.pt"), &bad, GP_EINVAL, "process-wide");
    bad = o;
    bad.warmup = -1;
    load_fails(fixture("mlp.pt"), &bad, GP_EINVAL, "warmup");
    load_fails(fixture("does-not-exist.pt"), &o, GP_EIO, "cannot open");
    load_fails(fixture("."), &o, GP_EIO, "cannot read"); /* a directory */
    load_fails(fixture("notmodel.pt"), &o, GP_EMODEL, "not a TorchScript file");
    load_fails(fixture("statedict.pt"), &o, GP_EMODEL, "not a TorchScript file");
    /* Output found by a forward at load: a wrong input shape fails there, in PyTorch's words. */
    bad = o;
    bad.input.dims[0] = 15;
    load_fails(fixture("mlp.pt"), &bad, GP_EMODEL, "shapes cannot be multiplied");
    gp_torch_options t;
    options(&t, item1(GP_DTYPE_F32, 4));
    load_fails(fixture("tuple.pt"), &t, GP_EMODEL, "not one tensor");
    load_fails(fixture("huge.pt"), &t, GP_EMODEL, "too large"); /* its item's bytes wrap */

    /* The queries, and NULLs. */
    m = load_ok("mlp.pt", &o);
    gp_torch_item in, out;
    GPT_RC(gp_torch_input(m, &in), GP_OK);
    GPT_RC(gp_torch_output(m, &out), GP_OK);
    GPT_EQ(in.rank, 1);
    GPT_EQ(in.dims[0], 16);
    GPT_EQ(out.dtype, GP_DTYPE_F32);
    GPT_EQ(out.rank, 1);
    GPT_EQ(out.dims[0], 10);
    GPT_EQ(gp_torch_input_bytes(m), 64);
    GPT_EQ(gp_torch_output_bytes(m), 40);
    GPT_RC(gp_torch_last_error(m, err, sizeof err), GP_OK);
    GPT_CHECK(err[0] == '\0');
    GPT_RC(gp_torch_configure(NULL, NULL), GP_EINVAL);
    gp_config small; /* a config from an older, smaller gp_config: refused with the detail */
    gp_config_init(&small);
    small.struct_size = 8;
    GPT_RC(gp_torch_configure(m, &small), GP_EINVAL);
    GPT_RC(gp_torch_last_error(m, err, sizeof err), GP_EINVAL);
    GPT_CHECK(strstr(err, "struct_size is 8") != NULL);
    /* A config configured for a token model before (variable-size fields set): cleared, so
       create does not refuse "set one, not both". */
    gp_config reused;
    gp_config_init(&reused);
    reused.max_item_in_bytes = 4096;
    reused.max_batch_bytes = 8192;
    reused.item_in_multiple = 4;
    GPT_RC(gp_torch_configure(m, &reused), GP_OK);
    GPT_CHECK(reused.item_in_bytes == 64 && reused.max_item_in_bytes == 0 &&
              reused.max_batch_bytes == 0 && reused.arena_bytes == 0 &&
              reused.item_in_multiple == 0 && reused.max_item_out_bytes == 0);
    /* Each field as far as struct_size reaches, also a size that ends between them. */
    reused.max_item_in_bytes = 4096;
    reused.max_item_out_bytes = 64;
    reused.struct_size = offsetof(gp_config, max_item_out_bytes) + sizeof reused.max_item_out_bytes;
    GPT_RC(gp_torch_configure(m, &reused), GP_OK);
    GPT_CHECK(reused.max_item_in_bytes == 0 && reused.max_item_out_bytes == 0);
    GPT_RC(gp_torch_input(NULL, &in), GP_EINVAL);
    strcpy(err, "stale");
    GPT_RC(gp_torch_last_error(NULL, err, sizeof err), GP_EINVAL);
    GPT_CHECK(err[0] == '\0'); /* "copies a NUL-terminated string", as the others do */
    GPT_EQ(gp_torch_input_bytes(NULL), 0);
    gp_torch_model_free(m);
    gp_torch_model_free(NULL);
}

/* The MLP against eager at one max_batch, 2 producers, batches formed by a delay. */
static void test_mlp(size_t max_batch) {
    enum { N = 200, IN = 16, OUT = 10 };
    float *x = read_fixture("mlp_in.f32", N * IN * sizeof(float));
    float *ref = read_fixture("mlp_ref.f32", N * OUT * sizeof(float));
    gp_torch_options o;
    options(&o, item1(GP_DTYPE_F32, IN));
    gp_torch_model *m = load_ok("mlp.pt", &o);
    gp_config cfg;
    config(&cfg, m);
    traces *tr = traces_new();
    cfg.max_batch = max_batch;
    cfg.max_delay_us = 2000;
    cfg.on_batch = on_batch;
    cfg.on_batch_user = tr;
    gp_pipeline *p = create(&cfg);
    run r;
    run_init(&r, N, x, IN * sizeof(float), OUT * sizeof(float));
    run_all(p, &r, 2);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    for (size_t i = 0; i < N; i++)
        GPT_RC(r.status[i], GP_OK);
    double e = rel_err((const float *)r.out, ref, N * OUT);
    double tol = g_backend == GP_BACKEND_HOST ? 1e-5 : 1e-4;
    size_t items = 0, maxn = 0, sizes[65] = {0}, distinct = 0;
    for (size_t b = 0; b < tr->n; b++) {
        items += tr->t[b].n;
        if (tr->t[b].n > maxn) maxn = tr->t[b].n;
        if (tr->t[b].n <= 64 && sizes[tr->t[b].n]++ == 0) distinct++;
    }
    printf("mlp max_batch %zu: %zu batches, %zu distinct sizes, largest %zu; rel error %.3g "
           "(limit %.0e)\n",
           max_batch, tr->n, distinct, maxn, e, tol);
    GPT_CHECK(e <= tol);
    GPT_EQ(items, N);
    GPT_CHECK(maxn <= max_batch);
    if (max_batch > 1) GPT_CHECK(maxn > 1 && distinct >= 2);
    run_free(&r);
    traces_free(tr);
    gp_torch_model_free(m);
    free(x);
    free(ref);
}

static void test_resnet(void) {
    enum { N = 24, C = 3, H = 40, W = 40, OUT = 10 };
    float *x = read_fixture("resnet_in.f32", (size_t)N * C * H * W * sizeof(float));
    float *ref = read_fixture("resnet_ref.f32", N * OUT * sizeof(float));
    gp_torch_options o;
    gp_torch_options_init(&o);
    o.input = (gp_torch_item){GP_DTYPE_F32, 3, {C, H, W}};
    o.output = item1(GP_DTYPE_F32, OUT); /* given: checked, not inferred */
    gp_torch_model *m = load_ok("resnet.pt", &o);
    gp_config cfg;
    config(&cfg, m);
    cfg.max_batch = 8;
    cfg.max_delay_us = 5000;
    cfg.inflight = 2;
    gp_pipeline *p = create(&cfg);
    run r;
    run_init(&r, N, x, (size_t)C * H * W * sizeof(float), OUT * sizeof(float));
    run_all(p, &r, 3);
    gp_stats s = {.struct_size = sizeof s};
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    for (size_t i = 0; i < N; i++)
        GPT_RC(r.status[i], GP_OK);
    double e = rel_err((const float *)r.out, ref, N * OUT);
    /* CUDA: LibTorch's default lets cuDNN's convolutions use TF32 (gpupipe/torch.h); rounding
       every conv's operands to TF32 moves this ResNet by up to ~9e-3 relative (emulated on
       the CPU with truncation; ~9e-4 with round-to-nearest). */
    double tol = g_backend == GP_BACKEND_HOST ? 1e-5 : 2e-2;
    printf("resnet18 (3x40x40, 10 classes): %llu batches, mean %.1f items; rel error %.3g "
           "(limit %.0e)\n",
           (unsigned long long)s.batches, (double)s.batch_items / (double)s.batches, e, tol);
    GPT_CHECK(e <= tol);
    run_free(&r);
    gp_torch_model_free(m);
    free(x);
    free(ref);
}

static void test_bf16(void) {
    enum { N = 200, IN = 16, OUT = 10 };
    float *x = read_fixture("mlp_in.f32", N * IN * sizeof(float));
    float *ref = read_fixture("mlp_bf16_ref.f32", N * OUT * sizeof(float));
    gp_torch_options o;
    options(&o, item1(GP_DTYPE_F32, IN));
    o.precision = GP_PRECISION_BF16;
    gp_torch_model *m = load_ok("mlp.pt", &o);
    gp_torch_item out;
    GPT_RC(gp_torch_output(m, &out), GP_OK);
    GPT_EQ(out.dtype, GP_DTYPE_F32); /* found in fp32 at load; bf16 results are converted */
    gp_config cfg;
    config(&cfg, m);
    cfg.max_batch = 16;
    gp_pipeline *p = create(&cfg);
    run r;
    run_init(&r, N, x, IN * sizeof(float), OUT * sizeof(float));
    run_all(p, &r, 2);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    for (size_t i = 0; i < N; i++)
        GPT_RC(r.status[i], GP_OK);
    double e = rel_err((const float *)r.out, ref, N * OUT);
    printf("mlp bf16: rel error %.3g against eager bf16 (limit 2e-2)\n", e);
    GPT_CHECK(e <= 2e-2);
    run_free(&r);
    gp_torch_model_free(m);
    free(x);
    free(ref);
}

/* forward returns [N]: the output item is f32[1]. */
static void test_sum(void) {
    enum { N = 50 };
    float x[N][4], want[N];
    for (int i = 0; i < N; i++) {
        for (int c = 0; c < 4; c++)
            x[i][c] = (float)(i * 4 + c);
        want[i] = x[i][0] + x[i][1] + x[i][2] + x[i][3];
    }
    gp_torch_options o;
    options(&o, item1(GP_DTYPE_F32, 4));
    gp_torch_model *m = load_ok("sum.pt", &o);
    gp_torch_item out;
    GPT_RC(gp_torch_output(m, &out), GP_OK);
    GPT_EQ(out.rank, 1);
    GPT_EQ(out.dims[0], 1);
    gp_config cfg;
    config(&cfg, m);
    cfg.max_batch = 8;
    gp_pipeline *p = create(&cfg);
    run r;
    run_init(&r, N, x, sizeof x[0], sizeof(float));
    run_all(p, &r, 1);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    for (int i = 0; i < N; i++) {
        GPT_RC(r.status[i], GP_OK);
        GPT_CHECK(((const float *)r.out)[i] == want[i]);
    }
    printf("sum: %d items, one value each\n", N);
    run_free(&r);
    gp_torch_model_free(m);
}

/* A model that raises for one item: that batch alone fails, readably; the rest are right. */
static void test_thrower(void) {
    enum { N = 40, BAD = 17 };
    float x[N][4];
    for (int i = 0; i < N; i++)
        for (int c = 0; c < 4; c++)
            x[i][c] = (float)(i + c);
    x[BAD][0] = -1;
    gp_torch_options o;
    options(&o, item1(GP_DTYPE_F32, 4));
    gp_torch_model *m = load_ok("thrower.pt", &o);
    gp_config cfg;
    config(&cfg, m);
    traces *tr = traces_new();
    cfg.max_batch = 4;
    cfg.max_delay_us = 2000;
    cfg.on_batch = on_batch;
    cfg.on_batch_user = tr;
    gp_pipeline *p = create(&cfg);
    run r;
    run_init(&r, N, x, sizeof x[0], sizeof x[0]);
    run_all(p, &r, 1); /* one producer: item i has submit sequence number i */
    char perr[512] = "", terr[4096] = "";
    GPT_RC(gp_pipeline_last_error(p, perr, sizeof perr), GP_ECOMPUTE);
    GPT_RC(gp_torch_last_error(m, terr, sizeof terr), GP_ECOMPUTE);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    CHECK_MSG(perr, "compute returned");
    CHECK_MSG(perr, "poisoned item: a negative first value"); /* the compute's reason too */
    CHECK_MSG(terr, "poisoned item: a negative first value");
    CHECK_MSG(terr, "forward failed");
    printf("thrower: pipeline: %s\n  torch: %.300s\n", perr, terr);
    size_t failed_batches = 0, lo = 0, hi = 0;
    for (size_t b = 0; b < tr->n; b++)
        if (tr->t[b].status != GP_OK) {
            GPT_RC(tr->t[b].status, GP_ECOMPUTE);
            failed_batches++;
            lo = tr->t[b].first_seq;
            hi = lo + tr->t[b].n;
        }
    GPT_EQ(failed_batches, 1);
    GPT_CHECK(lo <= BAD && BAD < hi);
    for (size_t i = 0; i < N; i++) {
        if (i >= lo && i < hi) {
            GPT_RC(r.status[i], GP_ECOMPUTE);
            continue;
        }
        GPT_RC(r.status[i], GP_OK);
        const float *y = (const float *)(r.out + i * sizeof x[0]);
        for (int c = 0; c < 4; c++)
            GPT_CHECK(y[c] == x[i][c] * 2 + 1);
    }
    run_free(&r);
    traces_free(tr);
    gp_torch_model_free(m);
}

/* A model whose options disagree with it: without warm-up the batch fails with `part` in the
   message; with warm-up gp_pipeline_create fails (GP_EMODEL). */
static void mismatch(const char *file, gp_torch_item in, gp_torch_item outi, const char *part) {
    gp_torch_options o;
    options(&o, in);
    o.output = outi;
    for (int warmup = 0; warmup <= 2; warmup += 2) {
        o.warmup = warmup;
        gp_torch_model *m = load_ok(file, &o);
        gp_config cfg;
        config(&cfg, m);
        cfg.max_batch = 4;
        char terr[4096] = "", perr[512] = "";
        if (warmup) {
            gp_pipeline *p = NULL;
            int rc = gp_pipeline_create(&cfg, &p, perr, sizeof perr);
            if (rc == GP_ENODEV && g_backend == GP_BACKEND_CUDA) {
                printf("SKIP: no usable CUDA device: %s\n", perr);
                exit(gpt_no_device());
            }
            GPT_RC(rc, GP_EMODEL);
            GPT_CHECK(p == NULL);
            GPT_RC(gp_torch_last_error(m, terr, sizeof terr), GP_EMODEL);
            CHECK_MSG(terr, "warm-up");
            CHECK_MSG(terr, part);
            printf("  %s, warm-up: create -> GP_EMODEL: %.200s\n", file, terr);
        } else {
            gp_pipeline *p = create(&cfg);
            unsigned char buf[1024] = {0}, out[1024];
            GPT_CHECK(gp_torch_input_bytes(m) <= sizeof buf);
            GPT_RC(
                gp_pipeline_infer(p, buf, gp_torch_input_bytes(m), out, gp_torch_output_bytes(m)),
                GP_ECOMPUTE);
            GPT_RC(gp_pipeline_last_error(p, perr, sizeof perr), GP_ECOMPUTE);
            CHECK_MSG(perr, "compute returned");
            GPT_RC(gp_torch_last_error(m, terr, sizeof terr), GP_ECOMPUTE);
            CHECK_MSG(terr, part);
            GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
            printf("  %s, no warm-up: batch -> GP_ECOMPUTE: %.200s\n", file, terr);
        }
        gp_torch_model_free(m);
    }
}

static void test_mismatch(void) {
    printf("mismatches\n");
    /* Input shape: the model's own error. */
    mismatch("mlp.pt", item1(GP_DTYPE_F32, 15), item1(GP_DTYPE_F32, 10),
             "shapes cannot be multiplied");
    /* Output shape and dtype, and a tuple: ours. */
    mismatch("mlp.pt", item1(GP_DTYPE_F32, 16), item1(GP_DTYPE_F32, 11),
             "forward returned Float[1, 10]");
    mismatch("mlp.pt", item1(GP_DTYPE_F32, 16), item1(GP_DTYPE_F32, 11), "expected Float[1, 11]");
    mismatch("mlp.pt", item1(GP_DTYPE_F32, 16), item1(GP_DTYPE_I64, 10), "expected Long[1, 10]");
    mismatch("tuple.pt", item1(GP_DTYPE_F32, 4), item1(GP_DTYPE_F32, 4), "not one tensor");
    /* Input dtype: u8 into a float Linear, PyTorch's words. */
    mismatch("mlp.pt", item1(GP_DTYPE_U8, 16), item1(GP_DTYPE_F32, 10), "dtype");
}

/* A forward that runs out of memory: its batch fails (GP_ECOMPUTE for the items), the model's
   last error is GP_ENOMEM and says so, the pipeline's names the allocator's message, and the
   pipeline goes on with the next batch. A raise in the model's code that only reads like it is
   a failed forward, also from a forked function, and so is an error whose traceback quotes
   source in those words. */
static void test_oom_forward(void) {
    gp_torch_options o;
    options(&o, item1(GP_DTYPE_F32, 4));
    gp_torch_model *m = load_ok("thrower.pt", &o);
    gp_config cfg;
    config(&cfg, m);
    cfg.max_batch = 1;
    gp_pipeline *p = create(&cfg);
    float x[4] = {-2, 0, 0, 0}, y[4], ok[4] = {3, 1, 1, 1};
    GPT_RC(gp_pipeline_infer(p, x, sizeof x, y, sizeof y), GP_ECOMPUTE);
    char perr[512] = "", terr[2048] = "";
    GPT_RC(gp_torch_last_error(m, terr, sizeof terr), GP_ENOMEM);
    GPT_RC(gp_pipeline_last_error(p, perr, sizeof perr), GP_ECOMPUTE);
    CHECK_MSG(terr, "forward ran out of memory");
    CHECK_MSG(perr, "forward ran out of memory"); /* CPU or CUDA allocator: each says it its way */
    printf("out of memory in forward: pipeline: %.200s\n  torch: %.200s\n", perr, terr);
    x[0] = 1;
    GPT_RC(gp_pipeline_infer(p, x, sizeof x, y, sizeof y), GP_OK);
    GPT_CHECK(memcmp(y, ok, sizeof y) == 0);
    /* The model's own raise in an allocator's words is a failed forward, not out of memory. */
    x[0] = -3;
    GPT_RC(gp_pipeline_infer(p, x, sizeof x, y, sizeof y), GP_ECOMPUTE);
    GPT_RC(gp_torch_last_error(m, terr, sizeof terr), GP_ECOMPUTE);
    CHECK_MSG(terr, "forward failed");
    CHECK_MSG(terr, "rejected: std::bad_alloc");
    printf("a raise in an allocator's words: %.200s\n", terr);
    /* The same raised in a forked function (its type lost in the re-raise), and a shape error
       whose traceback quotes a comment in an allocator's words: failed forwards too. */
    const float bad[] = {-4, -5};
    for (int i = 0; i < 2; i++) {
        x[0] = bad[i];
        GPT_RC(gp_pipeline_infer(p, x, sizeof x, y, sizeof y), GP_ECOMPUTE);
        GPT_RC(gp_torch_last_error(m, terr, sizeof terr), GP_ECOMPUTE);
        CHECK_MSG(terr, "forward failed");
        CHECK_MSG(terr, i == 0 ? "forked: CUDA out of memory" : "is invalid for input of size");
        printf("%s: %.200s\n", i == 0 ? "a forked raise" : "a shape error", terr);
    }
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    gp_torch_model_free(m);
}

/* The threads in this process (Linux: /proc/self/task); -1 elsewhere. */
static int process_threads(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    if (f) fclose(f);
    return n;
}

/* The torch compute, wrapped: setup and teardown passed through (they get compute_user). */
typedef struct counted {
    gp_compute_fn fn;
    int (*setup)(void *user, const gp_batch *b);
    void (*teardown)(void *user, const gp_batch *b);
    void *user;
    _Atomic int calls, before, after;
} counted;

static int counted_setup(void *user, const gp_batch *b) {
    counted *c = user;
    return c->setup(c->user, b);
}

static void counted_teardown(void *user, const gp_batch *b) {
    counted *c = user;
    c->teardown(c->user, b);
}

static int count_threads(void *user, const gp_batch *b) {
    counted *c = user;
    int first = atomic_fetch_add(&c->calls, 1) == 0;
    if (first) atomic_store(&c->before, process_threads());
    int rc = c->fn(c->user, b);
    if (first) atomic_store(&c->after, process_threads());
    return rc;
}

/* intra_op_threads = 1 holds for a slot thread's first forward too: the ResNet's convolutions
   (oneDNN, OpenMP) start no worker thread there. Before, that forward ran at OpenMP's default
   (the machine's cores) and started cores - 1 workers. Last: the setting is process-wide. */
static void test_intra_op_threads(void) {
    if (g_backend != GP_BACKEND_HOST) return;
    enum { N = 24, C = 3, H = 40, W = 40, OUT = 10 };
    float *x = read_fixture("resnet_in.f32", (size_t)N * C * H * W * sizeof(float));
    gp_torch_options o;
    gp_torch_options_init(&o);
    o.input = (gp_torch_item){GP_DTYPE_F32, 3, {C, H, W}};
    o.intra_op_threads = 1025;
    load_fails(fixture("resnet.pt"), &o, GP_EINVAL, "intra_op_threads is 1025");
    o.intra_op_threads = 1;
    gp_torch_model *m = load_ok("resnet.pt", &o);
    gp_config cfg;
    config(&cfg, m);
    cfg.inflight = 1;
    cfg.max_batch = 1;
    counted c = {.fn = cfg.compute,
                 .setup = cfg.compute_setup,
                 .teardown = cfg.compute_teardown,
                 .user = cfg.compute_user};
    cfg.compute = count_threads;
    cfg.compute_setup = counted_setup;
    cfg.compute_teardown = counted_teardown;
    cfg.compute_user = &c;
    gp_pipeline *p = create(&cfg);
    float y[OUT];
    GPT_RC(gp_pipeline_infer(p, x, (size_t)C * H * W * sizeof(float), y, sizeof y), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    /* OpenMP's default is the CPUs: with one, the old code started no worker either. */
    printf("intra_op_threads 1: the slot thread's first forward: process threads %d -> %d "
           "(%ld CPUs%s)\n",
           atomic_load(&c.before), atomic_load(&c.after), sysconf(_SC_NPROCESSORS_ONLN),
           atomic_load(&c.before) < 0 ? ": no /proc here, not checked" : "");
    GPT_CHECK(atomic_load(&c.before) != 0);
    GPT_EQ(atomic_load(&c.after), atomic_load(&c.before));
    gp_torch_model_free(m);
    free(x);
}

/* One live pipeline per model, detected at configure and at create. */
static void test_one_pipeline(void) {
    gp_torch_options o;
    options(&o, item1(GP_DTYPE_F32, 16));
    gp_torch_model *m = load_ok("mlp.pt", &o);
    gp_config cfg, cfg2, cfg3;
    config(&cfg, m);
    cfg2 = cfg;
    gp_pipeline *p = create(&cfg);
    gp_config_init(&cfg3);
    char terr[1024] = "", perr[512] = "";
    GPT_RC(gp_torch_configure(m, &cfg3), GP_EINVAL);
    GPT_RC(gp_torch_last_error(m, terr, sizeof terr), GP_EINVAL);
    CHECK_MSG(terr, "live pipeline");
    gp_pipeline *p2 = NULL;
    GPT_RC(gp_pipeline_create(&cfg2, &p2, perr, sizeof perr), GP_EINVAL);
    GPT_RC(gp_torch_last_error(m, terr, sizeof terr), GP_EINVAL);
    CHECK_MSG(terr, "already set up");
    printf("one pipeline per model: configure -> GP_EINVAL; second create -> GP_EINVAL: %.160s\n",
           terr);
    /* The first pipeline still works; after it, the model serves a new one. */
    float x[16] = {1}, y[10], y2[10];
    GPT_RC(gp_pipeline_infer(p, x, sizeof x, y, sizeof y), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_RC(gp_torch_configure(m, &cfg3), GP_OK);
    cfg3.backend = g_backend;
    p = create(&cfg3);
    GPT_RC(gp_pipeline_infer(p, x, sizeof x, y2, sizeof y2), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_CHECK(memcmp(y, y2, sizeof y) == 0);
    gp_torch_model_free(m);
}

/* Shutdown while producers submit and batches run: every accepted item exactly once. */
static void test_shutdown(gp_destroy_mode mode) {
    enum { N = 8000, D = 64, NP = 4 };
    float *x = malloc((size_t)N * D * sizeof(float));
    GPT_CHECK(x != NULL);
    for (size_t i = 0; i < N; i++)
        for (int c = 0; c < D; c++)
            x[i * D + c] = (float)((i + (size_t)c) % 1000);
    gp_torch_options o;
    options(&o, item1(GP_DTYPE_F32, D));
    gp_torch_model *m = load_ok("slow.pt", &o);
    gp_config cfg;
    config(&cfg, m);
    traces *tr = traces_new();
    cfg.max_batch = 16;
    cfg.on_batch = on_batch;
    cfg.on_batch_user = tr;
    gp_pipeline *p = create(&cfg);
    run r;
    run_init(&r, N, x, D * sizeof(float), D * sizeof(float));
    producer pr[NP];
    start(pr, NP, p, &r);
    gp_stats s = {.struct_size = sizeof s};
    do { /* let a few batches complete, so the pipeline is in full flow */
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    } while (s.batches < 4);
    uint64_t t_stop = gp_now_ns();
    GPT_RC(gp_pipeline_shutdown(p, mode), GP_OK);
    join(pr, NP);
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, mode), GP_OK);

    size_t accepted = (size_t)atomic_load(&r.accepted), called = 0, ok = 0, canceled = 0;
    for (size_t i = 0; i < N; i++) {
        int c = atomic_load(&r.calls[i]);
        GPT_CHECK(c == 0 || c == 1);
        called += (size_t)c;
        if (!c) continue;
        if (r.status[i] == GP_OK) {
            ok++;
            const float *y = (const float *)(r.out + i * D * sizeof(float));
            for (int k = 0; k < D; k++)
                GPT_CHECK(y[k] == x[i * D + k] * 2 + 1);
        } else {
            GPT_RC(r.status[i], GP_ECANCELED);
            canceled++;
        }
    }
    /* The shutdown must have met unfinished work: items accepted but not yet out of a batch
       that ended before t_stop. A batch caught mid-run at t_stop is only informative: on a
       loaded machine the one slot can sit between batches at that instant. */
    size_t in_flight = 0, done_before = 0;
    for (size_t b = 0; b < tr->n; b++) {
        if (tr->t[b].t_start <= t_stop && tr->t[b].t_d2h_done > t_stop) in_flight++;
        if (tr->t[b].t_d2h_done <= t_stop) done_before += tr->t[b].n;
    }
    printf("shutdown %s: %zu accepted, %zu callbacks (%zu ok, %zu canceled), %zu items done "
           "before shutdown, %zu batches in flight at it\n",
           mode == GP_DESTROY_CANCEL ? "cancel" : "drain", accepted, called, ok, canceled,
           done_before, in_flight);
    GPT_EQ(called, accepted);
    GPT_EQ(s.submitted, accepted);
    GPT_EQ(s.completed, accepted);
    GPT_CHECK(done_before > 0 && done_before < accepted);
    if (mode == GP_DESTROY_DRAIN) GPT_EQ(ok, accepted);
    run_free(&r);
    traces_free(tr);
    gp_torch_model_free(m);
    free(x);
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "host") && strcmp(argv[1], "cuda"))) {
        fprintf(stderr, "usage: test_torch host|cuda FIXTURE_DIR\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_backend = strcmp(argv[1], "cuda") ? GP_BACKEND_HOST : GP_BACKEND_CUDA;
    g_dir = argv[2];
    FILE *f = fopen(fixture("SKIP"), "r");
    if (f) {
        char why[512] = "";
        if (!fgets(why, sizeof why, f)) why[0] = '\0';
        fclose(f);
        printf("SKIP: no fixtures: %s", why);
        return GPT_SKIP;
    }
    if (!(f = fopen(fixture("slow.pt"), "rb"))) {
        printf("SKIP: no fixtures in %s (the torch_fixtures test makes them)\n", g_dir);
        return GPT_SKIP;
    }
    fclose(f);
    if (g_backend == GP_BACKEND_CUDA && !gp_torch_has_cuda()) {
        printf("SKIP: this libgpupipe-torch was built against a LibTorch %s without CUDA (or "
               "without gpupipe's CUDA backend)\n",
               gp_torch_version());
        return GPT_SKIP;
    }
    printf("LibTorch %s, backend %s\n", gp_torch_version(), argv[1]);
    test_load_errors();
    test_mlp(1);
    test_mlp(7);
    test_mlp(32);
    test_resnet();
    test_bf16();
    test_sum();
    test_thrower();
    test_oom_forward();
    test_mismatch();
    test_one_pipeline();
    test_shutdown(GP_DESTROY_CANCEL);
    test_shutdown(GP_DESTROY_DRAIN);
    test_intra_op_threads();
    printf("ok\n");
    return 0;
}
