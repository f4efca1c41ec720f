/*
 * Every host layer against an independent naive reference written here (direct loops in
 * double, straight from the PyTorch definitions): relative error <= 1e-5 (max |diff| / max
 * |ref|); index outputs exact. Also: results do not depend on how items are batched.
 */
#include <gpupipe/model.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpt.h"
#include "mt.h"

#define TOL 1e-5

typedef struct shape3 {
    int c, h, w;
} shape3;

/* ---- references (double) ---------------------------------------------------------------- */

static void ref_conv(const double *x, shape3 in, const float *w, const float *b, int cout, int kh,
                     int kw, int sh, int sw, int ph, int pw, int dh, int dw, int groups, double *y,
                     shape3 *out) {
    int Ho = (in.h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
    int Wo = (in.w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
    int cin_g = in.c / groups, cout_g = cout / groups;
    for (int o = 0; o < cout; o++) {
        int g = o / cout_g;
        for (int oy = 0; oy < Ho; oy++)
            for (int ox = 0; ox < Wo; ox++) {
                double s = b ? b[o] : 0.0;
                for (int ci = 0; ci < cin_g; ci++)
                    for (int ky = 0; ky < kh; ky++)
                        for (int kx = 0; kx < kw; kx++) {
                            int iy = oy * sh - ph + ky * dh, ix = ox * sw - pw + kx * dw;
                            if (iy < 0 || iy >= in.h || ix < 0 || ix >= in.w) continue;
                            s += (double)w[((o * cin_g + ci) * kh + ky) * kw + kx] *
                                 x[((g * cin_g + ci) * in.h + iy) * in.w + ix];
                        }
                y[(o * Ho + oy) * Wo + ox] = s;
            }
    }
    *out = (shape3){cout, Ho, Wo};
}

static double ref_act(const char *a, double x) {
    if (!strcmp(a, "relu")) return x > 0 ? x : 0;
    if (!strcmp(a, "gelu")) return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    if (!strcmp(a, "sigmoid")) return 1.0 / (1.0 + exp(-x));
    if (!strcmp(a, "tanh")) return tanh(x);
    return x;
}

static void ref_pool(const double *x, shape3 in, int kh, int kw, int sh, int sw, int ph, int pw,
                     int is_max, double *y, shape3 *out) {
    int Ho = (in.h + 2 * ph - kh) / sh + 1, Wo = (in.w + 2 * pw - kw) / sw + 1;
    for (int c = 0; c < in.c; c++)
        for (int oy = 0; oy < Ho; oy++)
            for (int ox = 0; ox < Wo; ox++) {
                double acc = is_max ? -INFINITY : 0.0;
                for (int ky = 0; ky < kh; ky++)
                    for (int kx = 0; kx < kw; kx++) {
                        int iy = oy * sh - ph + ky, ix = ox * sw - pw + kx;
                        double v = 0.0; /* padding: zero for avg (count_include_pad) */
                        if (iy >= 0 && iy < in.h && ix >= 0 && ix < in.w)
                            v = x[(c * in.h + iy) * in.w + ix];
                        else if (is_max)
                            continue;
                        acc = is_max ? (v > acc ? v : acc) : acc + v;
                    }
                y[(c * Ho + oy) * Wo + ox] = is_max ? acc : acc / (kh * kw);
            }
    *out = (shape3){in.c, Ho, Wo};
}

/* ---- running a case ----------------------------------------------------------------------- */

static float *run(gp_model *m, size_t n, const void *in) {
    float *out = malloc(n * gp_model_output_bytes(m));
    GPT_CHECK(out);
    char err[256];
    GPT_RC(gp_model_run_host(m, n, in, out, err, sizeof err), GP_OK);
    return out;
}

static gp_model *load(mt *t, const char *spec) {
    gp_model *m;
    char err[256];
    int rc = mt_load(t, spec, &m, err, sizeof err);
    if (rc != GP_OK) {
        fprintf(stderr, "load failed: %s\nspec:\n%s\n", err, spec);
        exit(1);
    }
    return m;
}

static void check_close(const char *what, const float *got, const double *ref, size_t n) {
    double e = mt_rel_err(got, ref, n);
    if (!(e <= TOL)) {
        fprintf(stderr, "%s: relative error %.3g > %g\n", what, e, TOL);
        exit(1);
    }
    printf("ok  %-58s rel err %.2g\n", what, e);
}

static double *dvec(const float *x, size_t n) {
    double *d = malloc(n * sizeof *d);
    GPT_CHECK(d);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

/* ---- cases -------------------------------------------------------------------------------- */

static void linear_cases(void) {
    const char *acts[] = {"", "relu", "gelu", "sigmoid", "tanh"};
    for (int a = 0; a < 5; a++) {
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            mt t = {.rng = 10 + (uint64_t)a};
            int I = 300, O = 37;
            size_t N = 70; /* > the host's 64-item chunk */
            float *w =
                mt_add(&t, "fc.weight", 2, (uint64_t[]){(uint64_t)O, (uint64_t)I}, -0.1, 0.1);
            float *b =
                with_bias ? mt_add(&t, "fc.bias", 1, (uint64_t[]){(uint64_t)O}, -1, 1) : NULL;
            char spec[128];
            snprintf(spec, sizeof spec, "input f32 %d\nlinear fc\n%s\n", I, acts[a]);
            gp_model *m = load(&t, spec);
            float *x = mt_rand(&t, N * (size_t)I, -2, 2);
            float *y = run(m, N, x);
            double *ref = malloc(N * (size_t)O * sizeof *ref);
            for (size_t i = 0; i < N; i++)
                for (int o = 0; o < O; o++) {
                    double s = b ? b[o] : 0.0;
                    for (int k = 0; k < I; k++)
                        s += (double)w[o * I + k] * x[i * (size_t)I + (size_t)k];
                    ref[i * (size_t)O + (size_t)o] = ref_act(acts[a], s);
                }
            char what[96];
            snprintf(what, sizeof what, "linear 300->37 %s%s", acts[a],
                     with_bias ? "" : " (no bias in the file)");
            check_close(what, y, ref, N * (size_t)O);
            free(ref), free(x), free(y);
            gp_model_free(m);
            mt_free(&t);
        }
    }
}

typedef struct conv_case {
    int cin, cout, h, w, kh, kw, sh, sw, ph, pw, dh, dw, groups;
    int bn; /* followed by batchnorm2d */
    const char *act;
} conv_case;

static void conv_cases(void) {
    static const conv_case cases[] = {
        {3, 8, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, ""},
        {4, 6, 10, 7, 3, 2, 2, 1, 1, 0, 2, 1, 2, 0, "relu"},
        {8, 8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8, 0, "tanh"}, /* depthwise */
        {16, 12, 6, 6, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, ""},   /* 1x1: input read directly */
        {16, 12, 7, 7, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, ""},   /* 1x1 stride 2: im2col */
        {5, 7, 11, 11, 5, 5, 2, 2, 2, 2, 1, 1, 1, 1, "relu"},
        {32, 40, 24, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "gelu"}, /* K 288 > KC, N 576 > NC */
        {6, 9, 5, 5, 5, 5, 1, 1, 0, 0, 1, 1, 3, 1, "sigmoid"},  /* output 1x1 */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const conv_case *c = &cases[ci];
        mt t = {.rng = 100 + ci};
        uint64_t C = (uint64_t)c->cout;
        float *w = mt_add(
            &t, "c.weight", 4,
            (uint64_t[]){C, (uint64_t)(c->cin / c->groups), (uint64_t)c->kh, (uint64_t)c->kw}, -0.3,
            0.3);
        float *b = ci % 2 ? mt_add(&t, "c.bias", 1, (uint64_t[]){C}, -0.5, 0.5) : NULL;
        float *g = NULL, *be = NULL, *mu = NULL, *var = NULL;
        if (c->bn) {
            g = mt_add(&t, "bn.weight", 1, (uint64_t[]){C}, 0.5, 1.5);
            be = mt_add(&t, "bn.bias", 1, (uint64_t[]){C}, -0.2, 0.2);
            mu = mt_add(&t, "bn.running_mean", 1, (uint64_t[]){C}, -0.2, 0.2);
            var = mt_add(&t, "bn.running_var", 1, (uint64_t[]){C}, 0.5, 2);
        }
        char spec[256];
        snprintf(spec, sizeof spec,
                 "input f32 %dx%dx%d\nconv2d c stride=%dx%d padding=%dx%d dilation=%dx%d "
                 "groups=%d\n%s\n%s\n",
                 c->cin, c->h, c->w, c->sh, c->sw, c->ph, c->pw, c->dh, c->dw, c->groups,
                 c->bn ? "batchnorm2d bn eps=1e-3" : "", c->act);
        gp_model *m = load(&t, spec);
        size_t N = 3, in_n = (size_t)c->cin * (size_t)c->h * (size_t)c->w;
        float *x = mt_rand(&t, N * in_n, -1, 1);
        float *y = run(m, N, x);
        size_t out_n = gp_model_output_bytes(m) / sizeof(float);
        double *ref = malloc(N * out_n * sizeof *ref);
        for (size_t i = 0; i < N; i++) {
            double *xd = dvec(x + i * in_n, in_n);
            shape3 os;
            ref_conv(xd, (shape3){c->cin, c->h, c->w}, w, b, c->cout, c->kh, c->kw, c->sh, c->sw,
                     c->ph, c->pw, c->dh, c->dw, c->groups, ref + i * out_n, &os);
            GPT_EQ((size_t)os.c * (size_t)os.h * (size_t)os.w, out_n);
            size_t hw = (size_t)os.h * (size_t)os.w;
            for (size_t k = 0; k < out_n; k++) {
                double v = ref[i * out_n + k];
                if (c->bn) {
                    size_t o = k / hw;
                    v = (v - mu[o]) / sqrt((double)var[o] + 1e-3) * g[o] + be[o];
                }
                ref[i * out_n + k] = ref_act(c->act, v);
            }
            free(xd);
        }
        char what[128];
        snprintf(what, sizeof what, "conv2d %d->%d k%dx%d s%dx%d p%dx%d d%dx%d g%d%s %s", c->cin,
                 c->cout, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw, c->dh, c->dw, c->groups,
                 c->bn ? " +bn" : "", c->act);
        check_close(what, y, ref, N * out_n);
        free(ref), free(x), free(y);
        gp_model_free(m);
        mt_free(&t);
    }
}

static void pool_cases(void) {
    static const struct {
        const char *spec;
        int kh, kw, sh, sw, ph, pw, is_max, global;
    } cases[] = {
        {"maxpool2d kernel=3 stride=2 padding=1", 3, 3, 2, 2, 1, 1, 1, 0},
        {"maxpool2d kernel=2", 2, 2, 2, 2, 0, 0, 1, 0},
        {"avgpool2d kernel=3 stride=2 padding=1", 3, 3, 2, 2, 1, 1, 0, 0},
        {"avgpool2d kernel=2x3 stride=1", 2, 3, 1, 1, 0, 0, 0, 0},
        {"globalavgpool", 0, 0, 0, 0, 0, 0, 0, 1},
    };
    shape3 in = {5, 9, 8};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        mt t = {.rng = 200 + ci};
        char spec[160];
        snprintf(spec, sizeof spec, "input f32 %dx%dx%d\n%s\n", in.c, in.h, in.w, cases[ci].spec);
        gp_model *m = load(&t, spec);
        size_t N = 4, in_n = (size_t)(in.c * in.h * in.w);
        float *x = mt_rand(&t, N * in_n, -3, 3);
        float *y = run(m, N, x);
        size_t out_n = gp_model_output_bytes(m) / sizeof(float);
        double *ref = malloc(N * out_n * sizeof *ref);
        for (size_t i = 0; i < N; i++) {
            double *xd = dvec(x + i * in_n, in_n);
            shape3 os = {in.c, 1, 1};
            if (cases[ci].global) {
                for (int c = 0; c < in.c; c++) {
                    double s = 0;
                    for (int k = 0; k < in.h * in.w; k++)
                        s += xd[c * in.h * in.w + k];
                    ref[i * out_n + (size_t)c] = s / (in.h * in.w);
                }
            } else {
                ref_pool(xd, in, cases[ci].kh, cases[ci].kw, cases[ci].sh, cases[ci].sw,
                         cases[ci].ph, cases[ci].pw, cases[ci].is_max, ref + i * out_n, &os);
            }
            GPT_EQ((size_t)os.c * (size_t)os.h * (size_t)os.w, out_n);
            free(xd);
        }
        check_close(cases[ci].spec, y, ref, N * out_n);
        free(ref), free(x), free(y);
        gp_model_free(m);
        mt_free(&t);
    }
}

static void elementwise_cases(void) {
    const char *acts[] = {"relu", "gelu", "sigmoid", "tanh"};
    for (int a = 0; a < 4; a++) {
        mt t = {.rng = 300 + (uint64_t)a};
        char spec[64];
        snprintf(spec, sizeof spec, "input f32 3x5x5\n%s\n", acts[a]); /* standalone, from input */
        gp_model *m = load(&t, spec);
        size_t n = 2 * 75;
        float *x = mt_rand(&t, n, -4, 4);
        float *y = run(m, 2, x);
        double *ref = malloc(n * sizeof *ref);
        for (size_t i = 0; i < n; i++)
            ref[i] = ref_act(acts[a], x[i]);
        char what[64];
        snprintf(what, sizeof what, "%s (standalone, reading the input)", acts[a]);
        check_close(what, y, ref, n);
        free(ref), free(x), free(y);
        gp_model_free(m);
        mt_free(&t);
    }
    /* softmax, with a large offset (max subtraction) */
    mt t = {.rng = 310};
    gp_model *m = load(&t, "input f32 33\nsoftmax\n");
    size_t N = 5;
    float *x = mt_rand(&t, N * 33, 80, 90);
    float *y = run(m, N, x);
    double ref[5 * 33];
    for (size_t i = 0; i < N; i++) {
        double mx = -INFINITY, s = 0;
        for (int k = 0; k < 33; k++)
            mx = fmax(mx, x[i * 33 + (size_t)k]);
        for (int k = 0; k < 33; k++)
            s += exp(x[i * 33 + (size_t)k] - mx);
        for (int k = 0; k < 33; k++)
            ref[i * 33 + (size_t)k] = exp(x[i * 33 + (size_t)k] - mx) / s;
    }
    check_close("softmax (inputs near 85)", y, ref, N * 33);
    free(x), free(y);
    gp_model_free(m);

    /* residual: save / restore / add, flatten */
    float *w1 = mt_add(&t, "a.weight", 4, (uint64_t[]){4, 4, 3, 3}, -0.3, 0.3);
    float *w2 = mt_add(&t, "p.weight", 4, (uint64_t[]){4, 4, 1, 1}, -0.3, 0.3);
    m = load(&t, "input f32 4x5x5\nsave in\nconv2d a padding=1\nrelu\nsave main\nrestore in\n"
                 "conv2d p\nadd main\nrelu\nflatten\n");
    x = mt_rand(&t, 2 * 100, -1, 1);
    y = run(m, 2, x);
    double rr[200];
    for (int i = 0; i < 2; i++) {
        double *xd = dvec(x + i * 100, 100), r1[100], r2[100];
        shape3 os;
        ref_conv(xd, (shape3){4, 5, 5}, w1, NULL, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, r1, &os);
        ref_conv(xd, (shape3){4, 5, 5}, w2, NULL, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1, r2, &os);
        for (int k = 0; k < 100; k++)
            rr[i * 100 + k] = ref_act("relu", ref_act("relu", r1[k]) + r2[k]);
        free(xd);
    }
    check_close("residual: save, restore, add, flatten", y, rr, 200);
    free(x), free(y);
    gp_model_free(m);
    mt_free(&t);
}

static void index_cases(void) {
    mt t = {.rng = 400};
    gp_model *m = load(&t, "input f32 12\ntopk k=5\n");
    /* ties: equal values rank in index order; NaN ranks first */
    float x[3][12] = {{1, 5, 3, 5, 2, 9, 0, 9, 4, 4, 4, -1},
                      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                      {1, NAN, 3, -INFINITY, 7, INFINITY, 2, 2, 2, 2, 2, 2}};
    int64_t want[3][5] = {{5, 7, 1, 3, 8}, {0, 1, 2, 3, 4}, {1, 5, 4, 2, 6}};
    int64_t *y = (int64_t *)(void *)run(m, 3, x);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 5; k++)
            GPT_EQ(y[i * 5 + k], want[i][k]);
    free(y);
    gp_model_free(m);

    m = load(&t, "input f32 1000\nargmax\n");
    size_t N = 9;
    float *r = mt_rand(&t, N * 1000, -1, 1);
    y = (int64_t *)(void *)run(m, N, r);
    for (size_t i = 0; i < N; i++) {
        size_t best = 0;
        for (size_t k = 1; k < 1000; k++)
            if (r[i * 1000 + k] > r[i * 1000 + best]) best = k;
        GPT_EQ(y[i], best);
    }
    GPT_EQ(gp_model_output_bytes(m), 8);
    free(y), free(r);
    gp_model_free(m);
    mt_free(&t);
    printf("ok  topk (ties in index order, NaN first), argmax\n");
}

/* l2norm as F.normalize, x / clamp_min(||x||, eps): a zero row stays zero, and a NaN anywhere
   makes the whole row NaN (the clamp keeps a NaN norm), not x / eps beside the NaN. */
static void l2norm_cases(void) {
    mt t = {.rng = 450};
    gp_model *m = load(&t, "input f32 4\nl2norm\n");
    float x[3][4] = {{3, 4, 0, 0}, {0, 0, 0, 0}, {1, NAN, 2, 3}};
    float *y = run(m, 3, x);
    GPT_CHECK(y[0] == 0.6f && y[1] == 0.8f && y[2] == 0.0f && y[3] == 0.0f);
    for (int k = 4; k < 8; k++)
        GPT_CHECK(y[k] == 0.0f);
    for (int k = 8; k < 12; k++)
        GPT_CHECK(isnan(y[k]));
    free(y);
    gp_model_free(m);
    mt_free(&t);
    printf("ok  l2norm (a zero row, a NaN makes its row NaN)\n");
}

static void input_cases(void) {
    mt t = {.rng = 500};
    int C = 3, H = 4, W = 5;
    size_t per = (size_t)(C * H * W), N = 3;
    /* u8 HWC with mean/std: (x / 255 - mean) / std, as torchvision ToTensor + Normalize */
    gp_model *m = load(&t, "input u8 4x5x3 layout=hwc mean=0.485,0.456,0.406 "
                           "std=0.229,0.224,0.225\n");
    uint8_t *u = malloc(N * per);
    for (size_t i = 0; i < N * per; i++)
        u[i] = (uint8_t)(mt_uniform(&t) * 256);
    float *y = run(m, N, u);
    double mean[3] = {0.485, 0.456, 0.406}, sd[3] = {0.229, 0.224, 0.225};
    double *ref = malloc(N * per * sizeof *ref);
    for (size_t i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            for (int h = 0; h < H; h++)
                for (int w = 0; w < W; w++)
                    ref[i * per + (size_t)((c * H + h) * W + w)] =
                        (u[i * per + (size_t)((h * W + w) * C + c)] / 255.0 - mean[c]) / sd[c];
    check_close("input u8 HWC, mean/std -> f32 CHW", y, ref, N * per);
    free(y);
    gp_model_free(m);

    /* u8 CHW, no normalization: x / 255 */
    m = load(&t, "input u8 3x4x5\n");
    y = run(m, N, u);
    for (size_t i = 0; i < N * per; i++)
        ref[i] = u[i] / 255.0;
    check_close("input u8 CHW -> x / 255", y, ref, N * per);
    free(y);
    gp_model_free(m);

    /* f32 HWC with one mean/std for all channels: no /255 */
    m = load(&t, "input f32 4x5x3 layout=hwc mean=0.5 std=2\n");
    float *x = mt_rand(&t, N * per, -1, 1);
    y = run(m, N, x);
    for (size_t i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            for (int h = 0; h < H; h++)
                for (int w = 0; w < W; w++)
                    ref[i * per + (size_t)((c * H + h) * W + w)] =
                        (x[i * per + (size_t)((h * W + w) * C + c)] - 0.5) / 2.0;
    check_close("input f32 HWC, mean/std", y, ref, N * per);
    free(y), free(x), free(u), free(ref);
    gp_model_free(m);

    /* an identity model: the input copied out */
    m = load(&t, "input f32 7\n");
    x = mt_rand(&t, 14, -1, 1);
    y = run(m, 2, x);
    GPT_CHECK(memcmp(x, y, 14 * sizeof *x) == 0);
    free(x), free(y);
    gp_model_free(m);
    mt_free(&t);
    printf("ok  identity model copies its input\n");
}

/* Weights stored as F16, BF16, F64 are converted to the same fp32 the reference uses. */
static void dtype_cases(void) {
    gp__st_dtype dts[] = {GP__ST_F16, GP__ST_BF16, GP__ST_F64};
    const char *names[] = {"F16", "BF16", "F64"};
    for (int d = 0; d < 3; d++) {
        mt t = {.rng = 600 + (uint64_t)d};
        float *w = mt_add_as(&t, "fc.weight", dts[d], 2, (uint64_t[]){6, 9}, -1, 1);
        float *b = mt_add_as(&t, "fc.bias", dts[d], 1, (uint64_t[]){6}, -1, 1);
        gp_model *m = load(&t, "input f32 9\nlinear fc\n");
        float *x = mt_rand(&t, 18, -1, 1);
        float *y = run(m, 2, x);
        double ref[12];
        for (int i = 0; i < 2; i++)
            for (int o = 0; o < 6; o++) {
                double s = b[o];
                for (int k = 0; k < 9; k++)
                    s += (double)w[o * 9 + k] * x[i * 9 + k];
                ref[i * 6 + o] = s;
            }
        char what[64];
        snprintf(what, sizeof what, "linear with %s weights", names[d]);
        check_close(what, y, ref, 12);
        free(x), free(y);
        gp_model_free(m);
        mt_free(&t);
    }
}

/* Batching must not change results: n items at once == one at a time, bit for bit. */
static void batch_independence(void) {
    const char *demos[] = {"mlp", "cnn"};
    for (int d = 0; d < 2; d++) {
        gp_model *m;
        char err[256];
        GPT_RC(gp_model_demo(demos[d], NULL, &m, err, sizeof err), GP_OK);
        size_t N = 70, ib = gp_model_input_bytes(m), ob = gp_model_output_bytes(m);
        mt t = {.rng = 700};
        uint8_t *x = malloc(N * ib);
        if (d == 0) {
            float *f = mt_rand(&t, N * ib / 4, -1, 1);
            memcpy(x, f, N * ib);
            free(f);
        } else {
            for (size_t i = 0; i < N * ib; i++)
                x[i] = (uint8_t)(mt_uniform(&t) * 256);
        }
        uint8_t *all = (uint8_t *)run(m, N, x);
        for (size_t i = 0; i < N; i += 7) {
            uint8_t *one = (uint8_t *)run(m, 1, x + i * ib);
            GPT_CHECK(memcmp(one, all + i * ob, ob) == 0);
            free(one);
        }
        free(all), free(x);
        gp_model_free(m);
        printf("ok  demo %s: batched == one at a time, bitwise\n", demos[d]);
    }
    { /* the image's outputs on error: NULL and 0 (model.h), also when the name is NULL */
        void *img = &img;
        size_t len = 1;
        char err[256];
        GPT_RC(gp_model_demo_safetensors(NULL, NULL, &img, &len, err, sizeof err), GP_EINVAL);
        GPT_CHECK(img == NULL && len == 0);
        img = &img, len = 1;
        GPT_RC(gp_model_demo_safetensors("nope", NULL, &img, &len, err, sizeof err), GP_EINVAL);
        GPT_CHECK(img == NULL && len == 0);
    }
    /* A model whose scratch (4 MiB per item) makes the host run a batch in chunks. */
    mt t = {.rng = 701};
    mt_add(&t, "c.weight", 4, (uint64_t[]){16, 4, 3, 3}, -0.3, 0.3);
    gp_model *m = load(&t, "input f32 4x256x256\nconv2d c padding=1\nsave a\ntanh\n");
    size_t N = 20, ib = gp_model_input_bytes(m), ob = gp_model_output_bytes(m);
    float *x = mt_rand(&t, N * ib / 4, -1, 1);
    uint8_t *all = (uint8_t *)run(m, N, x);
    for (size_t i = 0; i < N; i += 9) {
        uint8_t *one = (uint8_t *)run(m, 1, (const uint8_t *)x + i * ib);
        GPT_CHECK(memcmp(one, all + i * ob, ob) == 0);
        free(one);
    }
    free(all), free(x);
    gp_model_free(m);
    mt_free(&t);
    printf("ok  large activations, run in chunks: batched == one at a time, bitwise\n");
}

/* A residual add folded into the conv2d before it (model_impl.h, Buffers) computes what the
   unfolded ops did, bit for bit: the same spec with the conv's output also saved (so nothing
   folds) is the reference. Residuals: the model input, an earlier op's output; with and without
   the activation after the add; a saved conv output, an activation between, or `add` of the
   conv's own output must not fold. */
static int count_kind(const gp_model *m, gp__op_kind k, int with_src2) {
    int n = 0;
    for (int i = 0; i < m->n_ops; i++)
        n += m->ops[i].kind == k && (!with_src2 || gp__op_has_src2(&m->ops[i]));
    return n;
}

static void residual_fold(void) {
    static const struct {
        const char *folded, *unfolded;
        int folds;
    } cases[] = {
        {"input f32 4x6x6\nsave a\nconv2d c padding=1\nadd a\nrelu\nflatten\n",
         "input f32 4x6x6\nsave a\nconv2d c padding=1\nsave b\nadd a\nrelu\nflatten\n", 1},
        {"input f32 4x6x6\nconv2d c padding=1\nrelu\nsave a\nconv2d c2 padding=1\nadd a\n"
         "relu\nflatten\n",
         "input f32 4x6x6\nconv2d c padding=1\nrelu\nsave a\nconv2d c2 padding=1\nsave b\n"
         "add a\nrelu\nflatten\n",
         1},
        {"input f32 4x6x6\nsave a\nconv2d c padding=1\nadd a\nflatten\n",
         "input f32 4x6x6\nsave a\nconv2d c padding=1\nsave b\nadd a\nflatten\n", 1},
        /* not folded: an activation between (the add reads the act's output), the conv's own
           output as the residual */
        {"input f32 4x6x6\nsave a\nconv2d c padding=1\nrelu\nadd a\nflatten\n",
         "input f32 4x6x6\nsave a\nconv2d c padding=1\nsave b\nrelu\nadd a\nflatten\n", 0},
        {"input f32 4x6x6\nconv2d c padding=1\nsave a\nadd a\nflatten\n",
         "input f32 4x6x6\nconv2d c padding=1\nsave a\nsave b\nadd a\nflatten\n", 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        mt t = {.rng = 800 + (uint64_t)k};
        mt_add(&t, "c.weight", 4, (uint64_t[]){4, 4, 3, 3}, -0.3, 0.3);
        mt_add(&t, "c.bias", 1, (uint64_t[]){4}, -0.5, 0.5);
        mt_add(&t, "c2.weight", 4, (uint64_t[]){4, 4, 3, 3}, -0.3, 0.3);
        gp_model *f = load(&t, cases[k].folded), *u = load(&t, cases[k].unfolded);
        GPT_EQ(count_kind(f, GP__OP_CONV2D, 1), cases[k].folds);
        GPT_EQ(count_kind(f, GP__OP_ADD, 0), 1 - cases[k].folds);
        GPT_EQ(count_kind(u, GP__OP_CONV2D, 1), 0);
        GPT_EQ(count_kind(u, GP__OP_ADD, 0), 1);
        /* folding moves the add's flops into the conv2d (in the cases that do not fold, `save b`
           also keeps an activation from fusing, which changes nothing but the op count) */
        if (cases[k].folds) GPT_CHECK(gp_model_flops(f) == gp_model_flops(u));
        size_t N = 70; /* > the host's 64-item chunk */
        float *x = mt_rand(&t, N * gp_model_input_bytes(f) / 4, -1, 1);
        float *yf = run(f, N, x), *yu = run(u, N, x);
        GPT_CHECK(memcmp(yf, yu, N * gp_model_output_bytes(f)) == 0);
        if (cases[k].folds) { /* describe shows the residual on the conv2d's line */
            char *buf = mt_describe(f);
            GPT_CHECK(strstr(buf, " + ") && !strstr(buf, "add "));
            free(buf);
        }
        free(x), free(yf), free(yu);
        gp_model_free(f), gp_model_free(u);
        mt_free(&t);
    }
    printf("ok  residual add folded into the conv2d before it: bitwise the unfolded model\n");
}

static void conversions(void) {
    /* fp16 / bf16 round to nearest even, specials kept */
    float vals[] = {0.0f,    -0.0f,    1.0f,    -2.5f,       65504.0f, 65520.0f, 1e-8f,
                    6.1e-5f, 5.96e-8f, 3.0e-8f, 1.0f / 3.0f, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        float f = vals[i];
        float h = gp__f16_to_f32(gp__f32_to_f16(f));
        float b = gp__bf16_to_f32(gp__f32_to_bf16(f));
        /* the nearest representable value: relative error within half an ulp */
        if (isinf(f) || f == 0.0f || fabsf(f) > 65519.0f) {
            GPT_CHECK(isinf(f) || f == 0.0f ? h == f : isinf(h));
        } else if (fabsf(f) >= 6.103515625e-05f) {
            GPT_CHECK(fabsf(h - f) <= fabsf(f) * 0x1p-11f);
        } else {
            GPT_CHECK(fabsf(h - f) <= 0x1p-25f); /* subnormal half: absolute half unit */
        }
        GPT_CHECK(isinf(f) ? b == f : fabsf(b - f) <= fabsf(f) * 0x1p-8f);
    }
    GPT_EQ(gp__f32_to_f16(1.0f), 0x3C00);
    GPT_EQ(gp__f32_to_f16(65504.0f), 0x7BFF);
    GPT_EQ(gp__f32_to_f16(5.9604645e-8f), 0x0001);
    GPT_EQ(gp__f32_to_bf16(1.0f), 0x3F80);
    GPT_CHECK(isnan(gp__f16_to_f32(gp__f32_to_f16(NAN))));
    GPT_CHECK(isnan(gp__bf16_to_f32(gp__f32_to_bf16(NAN))));
    /* every half round-trips */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;
        GPT_EQ(gp__f32_to_f16(gp__f16_to_f32((uint16_t)h)), h);
    }
    printf("ok  fp16 / bf16 conversions\n");
}

int main(void) {
    conversions();
    linear_cases();
    conv_cases();
    pool_cases();
    elementwise_cases();
    index_cases();
    l2norm_cases();
    input_cases();
    dtype_cases();
    batch_independence();
    residual_fold();
    return 0;
}
