/*
 * The model runtime's CUDA layers against the host reference (gp_model_run_host), op by op on
 * small random models and on the demo models, in every precision:
 *   ops     one- to few-op models covering every op kind, fused and standalone activations,
 *           conv stride / padding / dilation / groups, batchnorm folding, the u8 and f32 input
 *           stages, residual adds, COPY, softmax, argmax and top-k; in fp16 and bf16 the
 *           convolutional ones the CUDA runtime keeps in NHWC run that way (lib/cuda/model.c,
 *           gp__cuda_nhwc), and each case says which layout it expects in those precisions:
 *           the pipeline's INFO line must say it (fp32 and tf32: NCHW)
 *   demo    the "mlp" and "cnn" demo models
 *   graphs  the demo models with config.cuda_graphs (the compute captured per bucket)
 *   profile options.profile on the demo mlp (fp32, fp16): every eager batch's ops timed from the
 *           slot's events, each op once per batch; with CUDA graphs every replay counted as not
 *           timed
 * Tolerances (relative to the largest reference magnitude): fp32 1e-4, tf32 5e-3, fp16 and
 * bf16 2e-2. Index outputs (argmax, top-k) are checked tie-aware: the logit at each returned
 * index must equal the reference's j-th largest logit within the tolerance, and top-1 must
 * agree on at least 99% of the items.
 * Without a usable CUDA device the first pipeline create returns GP_ENODEV: the test prints
 * why and exits 77 (skipped). GPT_REQUIRE_CUDNN=1: a convolution that runs on the direct kernel
 * (cuDNN unavailable, or unable to plan it) fails the test.
 */
#include <gpupipe/model.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "model/safetensors.h"

/* "host" as the second argument runs the pipelines on the host backend instead: the harness
   itself (specs, images, references, checks) can then be exercised without a GPU. */
static gp_backend backend = GP_BACKEND_CUDA;

#define N_ITEMS 29 /* not a power of two: batches of odd sizes, padded buckets */
#define MAX_T 16

static const gp_precision all_prec[] = {GP_PRECISION_FP32, GP_PRECISION_TF32, GP_PRECISION_FP16,
                                        GP_PRECISION_BF16};

static double tol_of(gp_precision p) {
    switch (p) {
    case GP_PRECISION_FP32:
        return 1e-4;
    case GP_PRECISION_TF32:
        return 5e-3;
    default:
        return 2e-2;
    }
}

/* ---- random tensors and safetensors images ---------------------------------------------- */

static uint64_t rng = 0x6d6f64656c637564ull;

typedef struct tset {
    gp__st_entry e[MAX_T];
    float *v[MAX_T];
    int n;
} tset;

/* Add an F32 tensor with values uniform in [lo, hi). */
static void t_add(tset *t, const char *name, int rank, const uint64_t *shape, double lo,
                  double hi) {
    GPT_CHECK(t->n < MAX_T);
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)shape[i];
    float *v = malloc(n * sizeof *v);
    GPT_CHECK(v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(lo + (hi - lo) * gpt_uniform(&rng));
    gp__st_entry *e = &t->e[t->n];
    memset(e, 0, sizeof *e);
    e->name = name;
    e->dtype = GP__ST_F32;
    e->rank = rank;
    for (int i = 0; i < rank; i++)
        e->shape[i] = shape[i];
    e->data = v;
    t->v[t->n++] = v;
}

/* Weight of a layer with fan-in `fan`: PyTorch's default range. */
static void t_weight(tset *t, const char *name, int rank, const uint64_t *shape, size_t fan) {
    double b = 1.0 / sqrt((double)fan);
    t_add(t, name, rank, shape, -b, b);
}

static void t_bn(tset *t, const char *prefix, uint64_t c, char names[4][64]) {
    const char *suffix[4] = {"weight", "bias", "running_mean", "running_var"};
    double lo[4] = {0.5, -0.5, -0.5, 0.5}, hi[4] = {1.5, 0.5, 0.5, 1.5};
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], 64, "%s.%s", prefix, suffix[i]);
        t_add(t, names[i], 1, &c, lo[i], hi[i]);
    }
}

static void t_image(tset *t, void **img, size_t *len) {
    char err[256] = "";
    int rc = gp__st_build(t->e, (size_t)t->n, NULL, img, len, &(gp__err){err, sizeof err});
    if (rc != GP_OK) {
        fprintf(stderr, "gp__st_build: %s: %s\n", gp_err_name(rc), err);
        exit(1);
    }
}

static void t_free(tset *t) {
    for (int i = 0; i < t->n; i++)
        free(t->v[i]);
    t->n = 0;
}

/* ---- running a model on both backends ---------------------------------------------------- */

static gp_model *load(const void *img, size_t len, const char *spec, gp_precision prec) {
    gp_model_options o;
    gp_model_options_init(&o);
    o.spec_text = spec;
    o.precision = prec;
    gp_model *m = NULL;
    char err[512] = "";
    int rc = gp_model_load_memory(img, len, &o, &m, err, sizeof err);
    if (rc != GP_OK) {
        fprintf(stderr, "gp_model_load_memory: %s: %s\nspec:\n%s\n", gp_err_name(rc), err,
                spec ? spec : "(metadata)");
        exit(1);
    }
    return m;
}

typedef struct result {
    unsigned char *out;
    size_t bytes;
    int status;
    int calls;
} result;

static void done(void *user, int status, const void *output, size_t bytes) {
    result *r = user;
    r->status = status;
    r->calls++;
    if (status == GP_OK && output && bytes == r->bytes) memcpy(r->out, output, bytes);
}

/* The CUDA model's INFO line naming its activations' layout, from the last pipeline created. */
static char layout_line[256];

static void log_layout(void *user, gp_log_level level, const char *msg) {
    (void)user, (void)level;
    if (strstr(msg, "model: activations in ")) snprintf(layout_line, sizeof layout_line, "%s", msg);
}

/* The stats of run_cuda's last pipeline, read after its drain. */
static gp_stats last_stats;

/* Run n items through a CUDA pipeline using `m`; skips the whole test when no device. */
static void run_cuda(gp_model *m, const char *label, size_t n, const unsigned char *in,
                     unsigned char *out, int graphs) {
    gp_config cfg;
    gp_config_init(&cfg);
    GPT_RC(gp_model_configure(m, &cfg), GP_OK);
    cfg.log = log_layout;
    layout_line[0] = '\0';
    cfg.backend = backend;
    cfg.max_batch = 8; /* buckets 1, 2, 4, 8 */
    cfg.inflight = 2;
    cfg.cuda_graphs = graphs;
    gp_pipeline *p = NULL;
    char err[512] = "";
    int rc = gp_pipeline_create(&cfg, &p, err, sizeof err);
    if (rc == GP_ENODEV) {
        printf("SKIP: no usable CUDA device: %s\n", err);
        exit(gpt_no_device());
    }
    if (rc != GP_OK) {
        char merr[512] = "";
        gp_model_last_error(m, merr, sizeof merr);
        fprintf(stderr, "%s: gp_pipeline_create: %s: %s\n  model: %s\n", label, gp_err_name(rc),
                err, merr);
        exit(1);
    }
    size_t ib = gp_model_input_bytes(m), ob = gp_model_output_bytes(m);
    result *r = calloc(n, sizeof *r);
    GPT_CHECK(r);
    for (size_t i = 0; i < n; i++) {
        r[i].out = out + i * ob;
        r[i].bytes = ob;
        GPT_RC(gp_pipeline_submit(p, in + i * ib, ib, done, &r[i]), GP_OK);
    }
    GPT_RC(gp_pipeline_drain(p, 60 * 1000000LL), GP_OK);
    gp_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    last_stats = s;
    /* What the CUDA layers ran without (a convolution on the direct kernel) is in the stats. */
    if (s.backend_note[0]) printf("%s: backend note: %s\n", label, s.backend_note);
    /* Where cuDNN is known to plan every convolution (the simulated device sets
       GPT_REQUIRE_CUDNN=1), one on the direct kernel is a failure, not a note. */
    if (backend == GP_BACKEND_CUDA && getenv("GPT_REQUIRE_CUDNN") &&
        strstr(gp_model_spec(m), "conv2d"))
        GPT_CHECK(strstr(s.backend_note, "direct kernel") == NULL);
#if !defined(GP_HAVE_CUDNN)
    if (backend == GP_BACKEND_CUDA && strstr(gp_model_spec(m), "conv2d"))
        GPT_CHECK(strstr(s.backend_note, "built without cuDNN") != NULL);
#endif
    if (graphs && s.graph_eager) printf("%s: eager batches: %s\n", label, s.graph_eager_reason);
    /* The built-in layers are made to be captured: on CUDA every batch replays a graph (a
       bucket left eager is a bug in them, its reason printed above). */
    if (graphs && backend == GP_BACKEND_CUDA) {
        GPT_EQ(s.graph_eager, 0);
        GPT_CHECK(s.graph_replays > 0);
    }
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    for (size_t i = 0; i < n; i++) {
        if (r[i].calls != 1 || r[i].status != GP_OK) {
            char merr[512] = "";
            gp_model_last_error(m, merr, sizeof merr);
            fprintf(stderr, "%s: item %zu: %d callbacks, status %s\n  model: %s\n", label, i,
                    r[i].calls, gp_err_name(r[i].status), merr);
            exit(1);
        }
    }
    free(r);
}

static unsigned char *make_inputs(const gp_model *m, size_t n) {
    gp_tensor_info ii;
    GPT_RC(gp_model_input_info(m, &ii), GP_OK);
    unsigned char *in = malloc(n * ii.bytes);
    GPT_CHECK(in);
    if (ii.dtype == GP_DTYPE_U8) {
        for (size_t i = 0; i < n * ii.bytes; i++)
            in[i] = (unsigned char)(gpt_uniform(&rng) * 256.0);
    } else {
        GPT_EQ(ii.dtype, GP_DTYPE_F32);
        float *f = (float *)(void *)in;
        for (size_t i = 0; i < n * ii.bytes / 4; i++)
            f[i] = (float)(2.0 * gpt_uniform(&rng) - 1.0);
    }
    return in;
}

static int failures;

static void check_f32(const char *label, gp_precision prec, const float *got, const float *ref,
                      size_t count) {
    double scale = 1e-6, worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < count; i++)
        scale = fmax(scale, fabs((double)ref[i]));
    for (size_t i = 0; i < count; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!(d <= worst)) { /* NaN counts as the worst */
            worst = isnan(d) ? INFINITY : d;
            at = i;
        }
    }
    double rel = worst / scale, tol = tol_of(prec);
    int ok = rel <= tol;
    printf("%-4s %-36s rel err %.3g (tol %.0e)%s\n", gp_precision_name(prec), label, rel, tol,
           ok ? "" : "  FAIL");
    if (!ok) {
        fprintf(stderr, "  worst at %zu: got %.9g, host %.9g\n", at, (double)got[at],
                (double)ref[at]);
        failures++;
    }
}

/* Tie-aware index check: logits (F per item, from the host) say what each index is worth. */
static void check_idx(const char *label, gp_precision prec, const int64_t *got, const int64_t *ref,
                      const float *logits, size_t n, int F, int k) {
    double tol = tol_of(prec), worst = 0.0;
    size_t top1 = 0;
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        const float *x = logits + i * (size_t)F;
        double scale = 1e-6;
        for (int f = 0; f < F; f++)
            scale = fmax(scale, fabs((double)x[f]));
        top1 += got[i * (size_t)k] == ref[i * (size_t)k];
        for (int j = 0; j < k; j++) {
            int64_t g = got[i * (size_t)k + (size_t)j], r = ref[i * (size_t)k + (size_t)j];
            if (g < 0 || g >= F) {
                fprintf(stderr, "  item %zu rank %d: index %lld out of range\n", i, j,
                        (long long)g);
                ok = 0;
                break;
            }
            for (int jj = 0; jj < j; jj++)
                if (got[i * (size_t)k + (size_t)jj] == g) {
                    fprintf(stderr, "  item %zu: index %lld twice\n", i, (long long)g);
                    ok = 0;
                }
            double d = fabs((double)x[g] - (double)x[r]) / scale;
            worst = fmax(worst, d);
            if (!(d <= tol)) {
                fprintf(stderr, "  item %zu rank %d: index %lld (%.6g), host %lld (%.6g)\n", i, j,
                        (long long)g, (double)x[g], (long long)r, (double)x[r]);
                ok = 0;
            }
        }
    }
    if (ok && (double)top1 < 0.99 * (double)n - 1.0) {
        fprintf(stderr, "  top-1 agrees on %zu of %zu items\n", top1, n);
        ok = 0;
    }
    printf("%-4s %-36s top-1 %zu/%zu, rel logit gap %.3g (tol %.0e)%s\n", gp_precision_name(prec),
           label, top1, n, worst, tol, ok ? "" : "  FAIL");
    failures += !ok;
}

/* The spec without its output stage (argmax / topk lines), for the reference logits. */
static char *strip_stage(const char *spec) {
    char *s = malloc(strlen(spec) + 1);
    GPT_CHECK(s);
    size_t o = 0;
    const char *p = spec;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) + 1 : strlen(p);
        const char *q = p;
        while (q < p + len && (*q == ' ' || *q == '\t'))
            q++;
        int stage = strncmp(q, "topk", 4) == 0 || strncmp(q, "argmax", 6) == 0;
        if (!stage) {
            memcpy(s + o, p, len);
            o += len;
        }
        p += len;
    }
    s[o] = '\0';
    return s;
}

/* One model (image + spec, NULL: the image's metadata) in one precision: host vs CUDA. On CUDA,
   the activations' layout must be layout16 in fp16 and bf16 (NULL: not checked; a prefix of
   the INFO line's text, and "NHWC" alone must be all of it: nothing padded), NCHW in fp32 and
   tf32. */
static void compare(const char *label, const void *img, size_t len, const char *spec,
                    gp_precision prec, int graphs, const char *layout16) {
    gp_model *m = load(img, len, spec, prec);
    gp_tensor_info oi;
    GPT_RC(gp_model_output_info(m, &oi), GP_OK);
    size_t n = N_ITEMS, ob = gp_model_output_bytes(m);
    unsigned char *in = make_inputs(m, n);
    unsigned char *ref = malloc(n * ob), *got = malloc(n * ob);
    GPT_CHECK(ref && got);
    memset(got, 0xff, n * ob);
    char err[512] = "";
    int rc = gp_model_run_host(m, n, in, ref, err, sizeof err);
    if (rc != GP_OK) {
        fprintf(stderr, "%s: gp_model_run_host: %s: %s\n", label, gp_err_name(rc), err);
        exit(1);
    }
    run_cuda(m, label, n, in, got, graphs);
    if (backend == GP_BACKEND_CUDA && layout16) {
        int half = prec == GP_PRECISION_FP16 || prec == GP_PRECISION_BF16;
        char want[160];
        snprintf(want, sizeof want, "model: activations in %s", half ? layout16 : "NCHW");
        /* NHWC with no note: nothing padded (the stem pad's note is in parentheses) */
        const char *at = strstr(layout_line, "model: activations in ");
        size_t wl = strlen(want);
        int ok = at && strncmp(at, want, wl) == 0 &&
                 (!half || strchr(layout16, '(') || strcmp(layout16, "NHWC") || !at[wl]);
        printf("%-4s %-36s %s%s\n", gp_precision_name(prec), label,
               layout_line[0] ? layout_line : "(no layout line)", ok ? "" : "  <-- WRONG LAYOUT");
        if (!ok) failures++;
    }
    if (oi.dtype == GP_DTYPE_F32) {
        check_f32(label, prec, (const float *)(void *)got, (const float *)(void *)ref, n * ob / 4);
    } else {
        GPT_EQ(oi.dtype, GP_DTYPE_I64);
        char *ls = strip_stage(gp_model_spec(m));
        gp_model *ml = load(img, len, ls, GP_PRECISION_FP32);
        size_t lb = gp_model_output_bytes(ml);
        float *logits = malloc(n * lb);
        GPT_CHECK(logits);
        GPT_RC(gp_model_run_host(ml, n, in, logits, err, sizeof err), GP_OK);
        check_idx(label, prec, (const int64_t *)(void *)got, (const int64_t *)(void *)ref, logits,
                  n, (int)(lb / 4), (int)(ob / 8));
        free(logits);
        gp_model_free(ml);
        free(ls);
    }
    free(in);
    free(ref);
    free(got);
    gp_model_free(m);
}

/* ---- the op cases ------------------------------------------------------------------------- */

typedef struct opcase {
    const char *label;
    const char *spec;
    void (*tensors)(tset *t);
    const char *layout16; /* the activations' layout in fp16 and bf16 (compare) */
} opcase;

static void w_none(tset *t) {
    (void)t;
}

static void w_fc_37_23(tset *t) {
    t_weight(t, "fc.weight", 2, (uint64_t[]){23, 37}, 37);
    t_weight(t, "fc.bias", 1, (uint64_t[]){23}, 37);
}

static void w_mlp(tset *t) {
    t_weight(t, "a.weight", 2, (uint64_t[]){48, 64}, 64);
    t_weight(t, "a.bias", 1, (uint64_t[]){48}, 64);
    t_weight(t, "b.weight", 2, (uint64_t[]){10, 48}, 48);
    t_weight(t, "b.bias", 1, (uint64_t[]){10}, 48);
}

static void w_fc_30_12(tset *t) {
    t_weight(t, "fc.weight", 2, (uint64_t[]){12, 30}, 30);
    t_weight(t, "fc.bias", 1, (uint64_t[]){12}, 30);
}

static void w_conv3(tset *t) {
    t_weight(t, "c.weight", 4, (uint64_t[]){8, 3, 3, 3}, 27);
    t_weight(t, "c.bias", 1, (uint64_t[]){8}, 27);
}

static void w_conv_grouped(tset *t) {
    t_weight(t, "c.weight", 4, (uint64_t[]){6, 2, 3, 3}, 18);
    t_weight(t, "c.bias", 1, (uint64_t[]){6}, 18);
}

static char bn_names[4][64];

static void w_conv_bn(tset *t) {
    t_weight(t, "c.weight", 4, (uint64_t[]){5, 3, 3, 3}, 27); /* no bias: zeros */
    t_bn(t, "bn", 5, bn_names);
}

static void w_gap_fc(tset *t) {
    t_weight(t, "fc.weight", 2, (uint64_t[]){4, 7}, 7);
    t_weight(t, "fc.bias", 1, (uint64_t[]){4}, 7);
}

static void w_residual(tset *t) {
    t_weight(t, "c.weight", 4, (uint64_t[]){4, 4, 3, 3}, 36);
    t_weight(t, "c.bias", 1, (uint64_t[]){4}, 36);
    t_bn(t, "bn", 4, bn_names);
}

static void w_nhwc_grouped(tset *t) {
    w_conv_grouped(t);
    t_weight(t, "d.weight", 4, (uint64_t[]){5, 6, 3, 3}, 54);
    t_weight(t, "d.bias", 1, (uint64_t[]){5}, 54);
}

static void w_nhwc_stack(tset *t) {
    w_conv_bn(t);
    t_weight(t, "d.weight", 4, (uint64_t[]){4, 5, 3, 3}, 45);
    t_weight(t, "d.bias", 1, (uint64_t[]){4}, 45);
    t_weight(t, "e.weight", 4, (uint64_t[]){6, 4, 1, 1}, 4);
    t_weight(t, "e.bias", 1, (uint64_t[]){6}, 4);
    t_weight(t, "fc.weight", 2, (uint64_t[]){3, 6}, 6);
    t_weight(t, "fc.bias", 1, (uint64_t[]){3}, 6);
}

static void w_nhwc_residual(tset *t) {
    w_residual(t);
    t_weight(t, "a.weight", 4, (uint64_t[]){4, 4, 3, 3}, 36);
    t_weight(t, "a.bias", 1, (uint64_t[]){4}, 36);
}

static void w_conv3x3_8(tset *t) {
    t_weight(t, "c.weight", 4, (uint64_t[]){8, 3, 3, 3}, 27);
    t_weight(t, "c.bias", 1, (uint64_t[]){8}, 27);
}

static void w_flatten_fc(tset *t) {
    t_weight(t, "c.weight", 4, (uint64_t[]){8, 3, 3, 3}, 27);
    t_weight(t, "c.bias", 1, (uint64_t[]){8}, 27);
    t_weight(t, "fc.weight", 2, (uint64_t[]){5, 128}, 128);
    t_weight(t, "fc.bias", 1, (uint64_t[]){5}, 128);
}

static void w_image(tset *t) {
    t_weight(t, "c.weight", 4, (uint64_t[]){6, 3, 3, 3}, 27);
    t_weight(t, "c.bias", 1, (uint64_t[]){6}, 27);
    t_weight(t, "fc.weight", 2, (uint64_t[]){9, 6}, 6);
    t_weight(t, "fc.bias", 1, (uint64_t[]){9}, 6);
}

static void w_stem(tset *t) {
    t_weight(t, "c.weight", 4, (uint64_t[]){8, 3, 7, 7}, 147);
    t_weight(t, "c.bias", 1, (uint64_t[]){8}, 147);
    t_weight(t, "d.weight", 4, (uint64_t[]){6, 8, 3, 3}, 72);
    t_weight(t, "d.bias", 1, (uint64_t[]){6}, 72);
}

static void w_gray(tset *t) {
    t_weight(t, "g.weight", 4, (uint64_t[]){5, 1, 3, 3}, 9);
    t_weight(t, "g.bias", 1, (uint64_t[]){5}, 9);
}

static void w_two_readers(tset *t) {
    t_weight(t, "a.weight", 4, (uint64_t[]){8, 3, 3, 3}, 27);
    t_weight(t, "a.bias", 1, (uint64_t[]){8}, 27);
    t_weight(t, "b.weight", 4, (uint64_t[]){8, 3, 1, 1}, 3);
    t_weight(t, "b.bias", 1, (uint64_t[]){8}, 3);
}

static void w_two_readers_s1(tset *t) {
    t_weight(t, "a.weight", 4, (uint64_t[]){8, 3, 3, 3}, 27);
    t_weight(t, "a.bias", 1, (uint64_t[]){8}, 27);
    t_weight(t, "b.weight", 4, (uint64_t[]){8, 3, 3, 3}, 27);
    t_weight(t, "b.bias", 1, (uint64_t[]){8}, 27);
}

static void w_conv3_3(tset *t) {
    t_weight(t, "c.weight", 4, (uint64_t[]){3, 3, 3, 3}, 27);
    t_weight(t, "c.bias", 1, (uint64_t[]){3}, 27);
}

static void w_nhwc16(tset *t) {
    t_weight(t, "a.weight", 4, (uint64_t[]){16, 16, 3, 3}, 144);
    t_weight(t, "a.bias", 1, (uint64_t[]){16}, 144);
    t_weight(t, "b.weight", 4, (uint64_t[]){16, 8, 3, 3}, 72);
    t_weight(t, "b.bias", 1, (uint64_t[]){16}, 72);
}

/* The stem pad's note in the layout line (model.c, gp__cuda_stem_pad). */
#define PAD3(to) "NHWC (prep (spec line 1) stores its 3 channels as " #to

static const opcase op_cases[] = {
    {"linear", "input f32 37\nlinear fc\n", w_fc_37_23, "NCHW"},
    {"linear+relu (epilogue)", "input f32 37\nlinear fc\nrelu\n", w_fc_37_23, "NCHW"},
    {"linear+gelu", "input f32 37\nlinear fc\ngelu\n", w_fc_37_23, "NCHW"},
    {"linear+sigmoid", "input f32 37\nlinear fc\nsigmoid\n", w_fc_37_23, "NCHW"},
    {"linear+tanh", "input f32 37\nlinear fc\ntanh\n", w_fc_37_23, "NCHW"},
    {"mlp+softmax", "input f32 64\nlinear a\nrelu\nlinear b\nsoftmax\n", w_mlp, "NCHW"},
    {"conv3x3+relu (fused)", "input f32 3x12x12\nconv2d c padding=1\nrelu\n", w_conv3,
     "NCHW"}, /* the input read by the conv, in CHW */
    {"conv3x3 (bias kernel)", "input f32 3x12x12\nconv2d c padding=1\n", w_conv3, "NCHW"},
    {"conv s2 p2 d2 g2+gelu",
     "input f32 4x11x13\nconv2d c stride=2 padding=2 dilation=2 groups=2\ngelu\n", w_conv_grouped,
     "NCHW"},
    {"conv+batchnorm, stride 2x1",
     "input f32 3x10x10\nconv2d c stride=2x1 padding=1\nbatchnorm2d bn\nsigmoid\n", w_conv_bn,
     "NCHW"},
    {"maxpool k3 s2 p1", "input f32 5x9x9\nmaxpool2d kernel=3 stride=2 padding=1\n", w_none,
     "NCHW"},
    {"avgpool k3 s2 p1 (pad counted)", "input f32 5x9x9\navgpool2d kernel=3 stride=2 padding=1\n",
     w_none, "NCHW"},
    {"avgpool k2", "input f32 5x8x9\navgpool2d kernel=2\n", w_none, "NCHW"},
    {"globalavgpool+linear", "input f32 7x5x6\nglobalavgpool\nflatten\nlinear fc\n", w_gap_fc,
     "NCHW"},
    {"residual add of the input",
     "input f32 4x8x8\nsave s\nconv2d c padding=1\nbatchnorm2d bn\nadd s\nrelu\n", w_residual,
     "NCHW"},
    {"u8 hwc prep, conv, softmax",
     "input u8 8x8x3 layout=hwc mean=0.485,0.456,0.406 std=0.229,0.224,0.225\n"
     "conv2d c padding=1\nrelu\nglobalavgpool\nflatten\nlinear fc\nsoftmax\n",
     w_image, PAD3(8)}, /* a conv of stride 1 reads the image: 8 channels */
    {"f32 prep mean/std, maxpool", "input f32 3x6x6 mean=0.5 std=0.25\nmaxpool2d kernel=2\n",
     w_none, "NCHW"}, /* no convolution, and a spatial output */
    /* The convolutions above again behind a PREP and ending in one pixel, so that fp16 and
       bf16 run them in NHWC: two convolutions in a row, so the first one's output order is
       the second one's input order, before the global pool. */
    {"nhwc: grouped dilated conv, conv",
     "input f32 4x11x13 mean=0.1 std=0.9\nconv2d c stride=2 padding=2 dilation=2 groups=2\n"
     "gelu\nconv2d d padding=1\nglobalavgpool\n",
     w_nhwc_grouped, "NHWC"},
    {"nhwc: conv+bn s2x1, pools, conv 1x1",
     "input u8 10x10x3 layout=hwc mean=0.5 std=0.25\nconv2d c stride=2x1 padding=1\n"
     "batchnorm2d bn\nsigmoid\nmaxpool2d kernel=2\nconv2d d padding=1\nrelu\n"
     "avgpool2d kernel=3 stride=1 padding=1\nconv2d e\nglobalavgpool\nflatten\nlinear fc\n",
     w_nhwc_stack, PAD3(8)}, /* stride 1 across: 8 */
    {"nhwc: residual folded into the conv",
     "input f32 4x8x8 mean=0 std=1\nconv2d a padding=1\nrelu\nsave s\nconv2d c padding=1\n"
     "batchnorm2d bn\nadd s\nrelu\nglobalavgpool\n",
     w_nhwc_residual, "NHWC"},
    {"flatten of 4x4 pixels, linear",
     "input f32 3x4x4 mean=0 std=1\nconv2d c padding=1\nflatten\nlinear fc\n", w_flatten_fc,
     "NCHW"}, /* the linear reads the pixels in CHW order */
    /* An activation between the flatten and its reader does not hide the pixels' order. */
    {"flatten of 4x4 pixels, relu, linear",
     "input f32 3x4x4 mean=0 std=1\nconv2d c padding=1\nflatten\nrelu\nlinear fc\n", w_flatten_fc,
     "NCHW"},
    {"flatten of 4x4 pixels, sigmoid as the output",
     "input f32 3x4x4 mean=0 std=1\nconv2d c padding=1\nflatten\nsigmoid\n", w_conv3x3_8, "NCHW"},
    {"act on the input", "input f32 50\ntanh\n", w_none, "NCHW"},
    {"copy of the input", "input f32 10\nsave a\nsigmoid\nrestore a\n", w_none, "NCHW"},
    {"argmax", "input f32 30\nlinear fc\nargmax\n", w_fc_30_12, "NCHW"},
    {"softmax+topk k=4", "input f32 30\nlinear fc\nsoftmax\ntopk k=4\n", w_fc_30_12, "NCHW"},
    {"u8 prep+topk",
     "input u8 8x8x3 layout=hwc mean=0.5 std=0.5\nconv2d c padding=1\nrelu\n"
     "globalavgpool\nflatten\nlinear fc\ntopk k=3\n",
     w_image, PAD3(8)},
    /* The stem pad: a ResNet-like stem of stride 2 reads 4 channels; one gray channel too; a
       value a convolution also adds as its residual keeps its 3. */
    {"nhwc: 7x7/2 stem, maxpool, conv",
     "input u8 20x18x3 layout=hwc mean=0.485,0.456,0.406 std=0.229,0.224,0.225\n"
     "conv2d c stride=2 padding=3\nrelu\nmaxpool2d kernel=3 stride=2 padding=1\n"
     "conv2d d padding=1\nrelu\nglobalavgpool\n",
     w_stem, PAD3(4)},
    {"nhwc: one gray channel, stride 2",
     "input u8 12x12x1 layout=hwc mean=0.5 std=0.5\nconv2d g stride=2 padding=1\nrelu\n"
     "globalavgpool\n",
     w_gray, "NHWC (prep (spec line 1) stores its 1 channel as 4"},
    /* Channel counts the tensor cores take (multiples of 8), odd sizes, 8 channels per group:
       the NHWC engines a GPU picks, where the small cases above may get other kernels. */
    {"nhwc: 16 channels, 13x11, s2, 2 groups of 8",
     "input f32 16x13x11 mean=0 std=1\nconv2d a stride=2 padding=1\nrelu\n"
     "conv2d b padding=1 groups=2\nrelu\nglobalavgpool\n",
     w_nhwc16, "NHWC"},
    /* Two convolutions read the image (a block and its 1x1 shortcut): both get the pad, 4
       when both have stride 2, 8 when one has stride 1. */
    {"nhwc: image read by two s2 convs",
     "input u8 16x14x3 layout=hwc mean=0.5 std=0.25\nsave s\nconv2d a stride=2 padding=1\n"
     "relu\nsave m\nrestore s\nconv2d b stride=2\nadd m\nrelu\nglobalavgpool\n",
     w_two_readers,
     "NHWC (prep (spec line 1) stores its 3 channels as 4, the added ones zero, "
     "for 2 convolutions)"},
    {"nhwc: image read by s2 and s1 convs",
     "input u8 16x14x3 layout=hwc mean=0.5 std=0.25\nsave s\nconv2d a stride=2 padding=1\n"
     "relu\nsave m\nrestore s\nconv2d b padding=1\nmaxpool2d kernel=2\nadd m\nrelu\n"
     "globalavgpool\n",
     w_two_readers_s1,
     "NHWC (prep (spec line 1) stores its 3 channels as 8, the added ones "
     "zero, for 2 convolutions)"},
    {"nhwc: the image is also a residual",
     "input f32 3x8x8 mean=0.5 std=0.5\nsave s\nconv2d c padding=1\nadd s\nrelu\nglobalavgpool\n",
     w_conv3_3, "NHWC"},
};

static void run_ops(void) {
    for (size_t c = 0; c < sizeof op_cases / sizeof op_cases[0]; c++) {
        tset t = {0};
        op_cases[c].tensors(&t);
        void *img = NULL;
        size_t len = 0;
        t_image(&t, &img, &len);
        for (size_t p = 0; p < sizeof all_prec / sizeof all_prec[0]; p++)
            compare(op_cases[c].label, img, len, op_cases[c].spec, all_prec[p], 0,
                    op_cases[c].layout16);
        free(img);
        t_free(&t);
    }
}

static void run_demos(int graphs) {
    static const char *names[] = {"mlp", "cnn"};
    for (size_t d = 0; d < 2; d++) {
        void *img = NULL;
        size_t len = 0;
        char err[256] = "";
        GPT_RC(gp_model_demo_safetensors(names[d], NULL, &img, &len, err, sizeof err), GP_OK);
        char label[64];
        snprintf(label, sizeof label, "demo %s%s", names[d], graphs ? " (cuda graphs)" : "");
        for (size_t p = 0; p < sizeof all_prec / sizeof all_prec[0]; p++)
            compare(label, img, len, NULL, all_prec[p], graphs,
                    d ? "NHWC (prep (spec line 2) stores its 3 channels as 8" /* stride 1 */
                      : "NCHW");
        free(img);
    }
}

/* The count before `what` in gp_model_profile's first line ("... 12 not timed ..."). */
static unsigned long long profile_count(const gp_model *m, const char *what) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    GPT_CHECK(f);
    GPT_RC(gp_model_profile(m, f), GP_OK);
    GPT_EQ(fclose(f), 0);
    printf("%s", text);
    const char *at = strstr(text, what);
    GPT_CHECK(at != NULL);
    while (at > text && at[-1] == ' ')
        at--;
    while (at > text && at[-1] >= '0' && at[-1] <= '9')
        at--;
    unsigned long long v = strtoull(at, NULL, 10);
    free(text);
    return v;
}

/* options.profile on the CUDA layers (model.h): eager batches are timed op by op, each op once
   per batch with the batch's items; CUDA graph replays are counted as not timed, none timed.
   The mlp: what is timed is the step loop, the same for every op (the cnn's convolutions would
   only add minutes of timing at create on the simulated device). */
static void run_profile(void) {
    for (size_t d = 0; d < 2; d++) {
        for (int graphs = 0; graphs < (backend == GP_BACKEND_CUDA ? 2 : 1); graphs++) {
            gp_model_options o;
            gp_model_options_init(&o);
            o.profile = 1;
            o.precision = d ? GP_PRECISION_FP16 : GP_PRECISION_FP32;
            gp_model *m = NULL;
            char err[256] = "";
            GPT_RC(gp_model_demo("mlp", &o, &m, err, sizeof err), GP_OK);
            unsigned char *in = make_inputs(m, N_ITEMS);
            unsigned char *out = malloc(N_ITEMS * gp_model_output_bytes(m));
            GPT_CHECK(out);
            char label[64];
            snprintf(label, sizeof label, "profile mlp %s%s", gp_precision_name(o.precision),
                     graphs ? " (cuda graphs)" : "");
            run_cuda(m, label, N_ITEMS, in, out, graphs);
            uint64_t ns, nb, ni;
            uint64_t timed = graphs ? 0 : last_stats.batches;
            for (int i = 0; i < gp_model_op_count(m); i++) {
                GPT_RC(gp_model_op_time(m, i, &ns, &nb, &ni), GP_OK);
                GPT_EQ(nb, timed);
                GPT_EQ(ni, graphs ? 0 : (uint64_t)N_ITEMS);
                GPT_CHECK(graphs ? ns == 0 : ns > 0); /* every op's events, in every batch */
            }
            GPT_EQ(profile_count(m, " batches timed"), timed);
            GPT_EQ(profile_count(m, " not timed"), graphs ? last_stats.graph_replays : 0);
            printf("ok  %s: %llu batches timed, %llu replays not timed\n", label,
                   (unsigned long long)timed,
                   (unsigned long long)(graphs ? last_stats.graph_replays : 0));
            free(in), free(out);
            gp_model_free(m);
        }
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ops";
    if (argc > 2 && strcmp(argv[2], "host") == 0) backend = GP_BACKEND_HOST;
    if (strcmp(mode, "ops") == 0)
        run_ops();
    else if (strcmp(mode, "demo") == 0)
        run_demos(0);
    else if (strcmp(mode, "graphs") == 0)
        run_demos(1);
    else if (strcmp(mode, "profile") == 0)
        run_profile();
    else {
        fprintf(stderr, "usage: %s ops|demo|graphs|profile [host]\n", argv[0]);
        return 2;
    }
    if (failures) {
        fprintf(stderr, "%d comparison(s) failed\n", failures);
        return 1;
    }
    printf("all comparisons within tolerance\n");
    return 0;
}
