/*
 * conv-bench: cuDNN's forward convolution alone, per shape, through the legacy API that
 * lib/cuda/conv.c uses, to say where a CNN's convolution time goes (bench/conv-bench.py sets it
 * beside PyTorch's F.conv2d on the same shapes).
 *
 *   conv-bench [--batch N] [--precision fp32|fp16|bf16] [--shapes resnet18|FILE] [--reps R]
 *              [--layouts NCHW,NHWC]
 *
 * For each shape (default: every distinct convolution of torchvision's ResNet-18 at 224x224,
 * with how often the model has it) and each layout (x, y and the filter all NCHW, or all NHWC):
 *   (h) conv.c's legacy-API rule (conv.c also times graph-API plans: the first 8 of (g)'s
 *       configurations that qualify, mode A then the fallback list):
 *       cudnnGetConvolutionForwardAlgorithm_v7's list filtered as conv_pick filters it (status
 *       ok, workspace within conv.c's cap, gp__conv_ws_cap of the free memory at start, printed
 *       as ws_max_mib; fp32: no FFT / FFT_TILING and FMA math only, never
 *       TENSOR_OP_MATH_ALLOW_CONVERSION), every entry timed: the fastest convolution
 *       alone (conv.c also times each unfused with its bias/act kernel after it, which this
 *       bench does not run, and fused: (f));
 *   (a) every algorithm with every math type the precision allows (fp32: FMA, the IEEE fp32
 *       contract; fp16 / bf16: DEFAULT and TENSOR_OP), workspace within the cap, timed: the
 *       fastest; FFT and FFT_TILING are timed too but reported apart (conv.c excludes them
 *       in fp32);
 *   (f) conv.c's fused form, cudnnConvolutionBiasActivationForward (bias + relu, alpha2 = 0,
 *       z = y), with each of (h)'s candidates: the fastest cuDNN accepts, or "rejected";
 *   (g) the graph API (cudnnBackend*, what PyTorch 2's F.conv2d and cudnn-frontend use) through
 *       lib/cuda/conv_graph.c, the code of conv.c's graph-API candidates: the same convolution
 *       as a one-operation graph, every engine configuration of the heuristic in mode A and of
 *       the fallback list (the plans deduplicated, up to 32 finalized within about 1 s per
 *       shape and layout), each timed; passed over: engines noted DOWN_CONVERT_INPUTS or
 *       REDUCED_PRECISION_REDUCTION (conv.c's fp32 sums), in fp32 also TENSOR_CORE or FFT
 *       (conv.c's IEEE fp32, PyTorch's with TF32 off); the fastest plan's output is compared with
 * (a)'s fastest (g_diff: the largest difference over the largest magnitude of (a)'s output).
 * Whether an engine the legacy API cannot reach is what PyTorch has over conv.c. (r) fp16 / bf16:
 * (g) again for the engines noted REDUCED_PRECISION_REDUCTION alone (their sums in 16 bits), which
 * conv.c forbids (gpupipe's fp16 / bf16 accumulate in fp32, include/gpupipe/model.h) and PyTorch's
 * engine filter does not (it drops only DOWN_CONVERT_INPUTS, and TENSOR_CORE for fp32 without
 * TF32): whether PyTorch's lead on a shape is such an engine. Timed and compared with (a)'s output
 * as (g); its lines are `conv-bench-graph-r:`, its fastest r_eng / r_ms / r_diff on the shape's
 * line. Timing: one untimed run (timed, to size what follows), then up to R runs (default 5; fewer
 * when one run takes more than 250 ms / R) queued behind a spin kernel so that the CUDA events
 * between them time the GPU, not the host's calls; the median is reported.
 * FILE: one shape per line, `NAME CIN COUT KERNEL STRIDE PAD SIZE COUNT` (square input, square
 * kernel, groups 1, dilation 1); `#` starts a comment.
 *
 * Output: the cuDNN version and library, the device; one `conv-bench:` line of key=value pairs
 * per shape and layout; one `conv-bench-algo:` line per configuration tried, one
 * `conv-bench-graph:` line per engine configuration; then a Markdown table with totals
 * weighted by each shape's count, and the cuDNN libraries loaded.
 * Exit status: 0; 1 when a CUDA or cuDNN call fails (a candidate that fails to run is reported
 * and passed over); 2 on bad usage; 77 without a usable device (1 instead when
 * GPT_REQUIRE_DEVICE is set, as for the tests).
 */
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "bench-spin.h"
#include "conv_graph.h"

#define N_CAND CUDNN_CONVOLUTION_FWD_ALGO_COUNT /* conv.c's CONV_MAX_CAND */
#define TIMED_CAP_MS 250.0f                     /* the timed runs of one configuration, about */
#define MAX_SHAPES 64
#define N_ALGO CUDNN_CONVOLUTION_FWD_ALGO_COUNT
#define N_MATH 4 /* DEFAULT, TENSOR_OP, TENSOR_OP_ALLOW_CONVERSION, FMA */

/* What is being measured, for the failure messages: "" or " (shape S, layout L)". */
static char g_where[128] = "";

static _Noreturn void fail_cuda(const char *call, cudaError_t e, int line) {
    fprintf(stderr, "conv-bench: %s failed: %s: %s (line %d)%s\n", call, cudaGetErrorName(e),
            cudaGetErrorString(e), line, g_where);
    exit(1);
}
static _Noreturn void fail_dnn(const char *call, cudnnStatus_t s, int line) {
    fprintf(stderr, "conv-bench: %s failed: %s (line %d)%s\n", call, cudnnGetErrorString(s), line,
            g_where);
    exit(1);
}
#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) fail_cuda(#call, e_, __LINE__);                                     \
    } while (0)
#define DNN(call)                                                                                  \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS) fail_dnn(#call, s_, __LINE__);                             \
    } while (0)

typedef struct shape {
    char name[48];
    int c, k, r, stride, pad, hw, count; /* output: (hw + 2 pad - r) / stride + 1 */
} shape;

/* torchvision's ResNet-18 at 224x224: its 20 convolutions, 11 distinct; then its stem with the
   image's 3 channels padded to 4 and to 8 (conv.c gives the added channels zero values and
   weights; timed here on random data, as every shape), count 0 so outside the totals: NVIDIA's
   Convolutional Layers guide has tensor cores want 8 channels in fp16 and 4 enough for a first
   layer of stride 2; conv.c's stem pad (docs/DESIGN.md §6) runs the 4. */
static const shape RESNET18[] = {
    {"conv1", 3, 64, 7, 2, 3, 224, 1},
    {"conv1.c4", 4, 64, 7, 2, 3, 224, 0},
    {"conv1.c8", 8, 64, 7, 2, 3, 224, 0},
    {"layer1.3x3", 64, 64, 3, 1, 1, 56, 4},
    {"layer2.0.conv1", 64, 128, 3, 2, 1, 56, 1},
    {"layer2.0.downsample", 64, 128, 1, 2, 0, 56, 1},
    {"layer2.3x3", 128, 128, 3, 1, 1, 28, 3},
    {"layer3.0.conv1", 128, 256, 3, 2, 1, 28, 1},
    {"layer3.0.downsample", 128, 256, 1, 2, 0, 28, 1},
    {"layer3.3x3", 256, 256, 3, 1, 1, 14, 3},
    {"layer4.0.conv1", 256, 512, 3, 2, 1, 14, 1},
    {"layer4.0.downsample", 256, 512, 1, 2, 0, 14, 1},
    {"layer4.3x3", 512, 512, 3, 1, 1, 7, 3},
};

static int out_hw(const shape *s) {
    return (s->hw + 2 * s->pad - s->r) / s->stride + 1;
}

static const char *algo_name(int a) {
    static const char *const names[] = {
        "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
        "WINOGRAD",      "WINOGRAD_NONFUSED"};
    return a >= 0 && a < (int)(sizeof names / sizeof *names) ? names[a] : "?";
}
static const char *math_name(int m) {
    static const char *const names[] = {"DEFAULT", "TENSOR_OP", "TENSOR_OP_ALLOW_CONVERSION",
                                        "FMA"};
    return m >= 0 && m < N_MATH ? names[m] : "?";
}
static int is_fft(int a) {
    return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING;
}

typedef enum { PREC_FP32, PREC_FP16, PREC_BF16 } precision;
static const char *const PREC_NAME[] = {"fp32", "fp16", "bf16"};

/* One (algorithm, math type) of the current shape and layout. */
typedef struct cfg {
    int state; /* CFG_* */
    float ms;  /* median of `runs` timed runs */
    int runs;
    size_t ws;
    char why[96]; /* failed / skipped: why, no spaces */
} cfg;
enum { CFG_UNTRIED, CFG_OK, CFG_FAILED, CFG_SKIPPED };

/* One shape in one layout: what the summary line and the table report. */
typedef struct result {
    int done;
    int h_algo, h_math; /* -1: no candidate ran */
    float h_ms;
    int a_algo, a_math; /* -1: none ran */
    float a_ms;
    int fft_algo, fft_math; /* the fastest FFT variant, -1 if none ran */
    float fft_ms;
    int f_algo, f_math; /* the fastest fused candidate; -1: every one rejected (f_why) */
    float f_ms;
    long f_nan; /* fused_reads_z: y's non-finite elements after a fused run on NaN; -1 not run */
    char f_why[64];
    /* (g): the fastest plan (g_eng -1: none ran; g_why), and what was offered */
    long long g_eng;
    float g_ms;
    size_t g_ws;
    int g_offered, g_dup, g_contract, g_failed, g_timed, g_untried;
    double g_diff; /* against (a)'s fastest output; < 0: not compared */
    char g_why[96];
    /* (r), fp16 / bf16: the fastest plan noted REDUCED_PRECISION_REDUCTION (r_eng -1: none) */
    long long r_eng;
    float r_ms;
    int r_timed;
    double r_diff; /* as g_diff */
} result;

typedef struct bench {
    precision prec;
    cudnnDataType_t dt;
    size_t es; /* bytes per element */
    int batch, reps;
    cudnnHandle_t h;
    cudnnTensorDescriptor_t xd, yd, bd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnActivationDescriptor_t act;
    void *x, *y, *w, *bias, *ws;
    void *host;  /* host staging, as large as the largest of x, y and w */
    void *host2; /* (g)'s comparison: a second y */
    /* (g): the plans of the current shape and layout; run_once runs plan cg_i for ALGO_GRAPH */
    gp__cgraph *cg;
    int cg_i;
    cudaEvent_t *ev; /* reps + 1 */
    float *times;    /* reps */
    /* the current shape and layout */
    const shape *s;
    const char *layout;
    cfg cache[N_ALGO][N_MATH];
    int heur_rank[N_ALGO][N_MATH]; /* position in the heuristic's list, -1: not in it */
    size_t ws_max;                 /* conv.c's workspace cap (gp__conv_ws_cap) for this device */
} bench;

/* --- host data: a fixed LCG, converted to the storage type --------------------------------- */

static uint16_t f32_to_f16(float f) { /* round to nearest even; subnormals flush to zero */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, m = u & 0x7fffffu;
    int32_t e = (int32_t)((u >> 23) & 0xffu) - 127 + 15;
    if (e <= 0) return (uint16_t)sign;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    uint32_t hv = sign | ((uint32_t)e << 10) | (m >> 13), rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (hv & 1u))) hv++;
    return (uint16_t)hv;
}
static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* n values uniform in [-scale, scale) into the device buffer dst. */
static void fill(const bench *b, void *dst, size_t n, float scale, uint64_t seed, void *host) {
    unsigned char *hp = host;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)((double)(seed >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0) * scale;
        if (b->prec == PREC_FP32) {
            memcpy(hp + 4 * i, &v, 4);
        } else {
            uint16_t hv = b->prec == PREC_FP16 ? f32_to_f16(v) : f32_to_bf16(v);
            memcpy(hp + 2 * i, &hv, 2);
        }
    }
    CU(cudaMemcpy(dst, host, n * b->es, cudaMemcpyHostToDevice));
}

/* --- one configuration, timed --------------------------------------------------------------- */

#define ALGO_GRAPH (-1) /* run_once / time_runs: b->cg's plan b->cg_i, (g) */

static cudnnStatus_t run_once(const bench *b, int algo, size_t ws, int fused) {
    const float one = 1.0f, zero = 0.0f; /* float scaling for float / half / bf16 data */
    if (algo == ALGO_GRAPH) return gp__cgraph_run(b->cg, b->h, b->cg_i);
    cudnnConvolutionFwdAlgo_t a = (cudnnConvolutionFwdAlgo_t)algo;
    if (fused) /* y = relu(conv(x) + 0 * z + bias), z = y, as conv.c */
        return cudnnConvolutionBiasActivationForward(b->h, &one, b->xd, b->x, b->wd, b->w, b->cd, a,
                                                     b->ws, ws, &zero, b->yd, b->y, b->bd, b->bias,
                                                     b->act, b->yd, b->y);
    return cudnnConvolutionForward(b->h, &one, b->xd, b->x, b->wd, b->w, b->cd, a, b->ws, ws, &zero,
                                   b->yd, b->y);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Whether the fused call reads z although alpha2 is 0 (RESULTS.md, "First GPU run: check
   these" 14(a): conv.c passes z = y, and cuDNN documents "not read" for beta = 0, not for
   alpha2): y filled with NaN (all-ones bytes are NaN in fp32, fp16 and bf16), one fused run,
   then y's non-finite elements counted. x, w and bias are finite, so any is z's NaN read.
   Returns the count, or -1 when the call failed. */
static long fused_reads_z(bench *b, int algo, size_t ws, size_t y_elems, void *host) {
    CU(cudaMemset(b->y, 0xff, y_elems * b->es));
    if (run_once(b, algo, ws, 1) != CUDNN_STATUS_SUCCESS) {
        (void)cudaGetLastError();
        return -1;
    }
    CU(cudaGetLastError());
    CU(cudaMemcpy(host, b->y, y_elems * b->es, cudaMemcpyDeviceToHost));
    long bad = 0;
    const unsigned char *hp = host;
    for (size_t i = 0; i < y_elems; i++) {
        if (b->prec == PREC_FP32) {
            uint32_t u;
            memcpy(&u, hp + 4 * i, 4);
            bad += (u & 0x7f800000u) == 0x7f800000u;
        } else {
            uint16_t h;
            memcpy(&h, hp + 2 * i, 2);
            uint16_t m = b->prec == PREC_FP16 ? 0x7c00u : 0x7f80u;
            bad += (h & m) == m;
        }
    }
    return bad;
}

/* Runs the configuration the descriptors hold (math type set): one untimed run, then the
   timed ones. 0 with *ms and *runs, or -1 with why (cuDNN refused it, or its launch failed:
   the candidate is passed over). */
static int time_runs(bench *b, int algo, size_t ws, int fused, float *ms, int *runs, char *why,
                     size_t why_len) {
    cudnnStatus_t st;
    cudaError_t e;
    float warm_ms = 0.0f;
    CU(cudaEventRecord(b->ev[0], 0));
    st = run_once(b, algo, ws, fused);
    if (st != CUDNN_STATUS_SUCCESS) {
        snprintf(why, why_len, "%s", cudnnGetErrorString(st));
        (void)cudaGetLastError(); /* what a refused call may have left; a sticky error
                                     fails the next checked call */
        return -1;
    }
    if ((e = cudaGetLastError()) != cudaSuccess) {
        snprintf(why, why_len, "launch:%s", cudaGetErrorName(e));
        return -1;
    }
    CU(cudaEventRecord(b->ev[1], 0));
    CU(cudaEventSynchronize(b->ev[1]));
    CU(cudaEventElapsedTime(&warm_ms, b->ev[0], b->ev[1]));
    /* The untimed run overstates a run (first-use costs): it only bounds how many follow. */
    int n = b->reps;
    if (warm_ms * (float)n > TIMED_CAP_MS) n = (int)(TIMED_CAP_MS / warm_ms);
    if (n < 1) n = 1;
    /* Queued behind the spin, the host's calls are ahead of the GPU: each interval is the GPU's. */
    CU(bench_spin_launch(0, 1000000ull + 200000ull * (uint64_t)n, 0, NULL, 1, 0));
    CU(cudaEventRecord(b->ev[0], 0));
    for (int i = 0; i < n; i++) {
        st = run_once(b, algo, ws, fused);
        if (st != CUDNN_STATUS_SUCCESS) break;
        CU(cudaEventRecord(b->ev[i + 1], 0));
    }
    if (st != CUDNN_STATUS_SUCCESS) { /* it ran once: not expected, but not fatal */
        snprintf(why, why_len, "timed_run:%s", cudnnGetErrorString(st));
        (void)cudaGetLastError();
        CU(cudaDeviceSynchronize());
        return -1;
    }
    CU(cudaEventSynchronize(b->ev[n]));
    for (int i = 0; i < n; i++)
        CU(cudaEventElapsedTime(&b->times[i], b->ev[i], b->ev[i + 1]));
    qsort(b->times, (size_t)n, sizeof *b->times, cmp_float);
    *ms = n % 2 ? b->times[n / 2] : 0.5f * (b->times[n / 2 - 1] + b->times[n / 2]);
    *runs = n;
    return 0;
}

static void print_cfg(const bench *b, int algo, int math, const cfg *c) {
    printf("conv-bench-algo: shape=%s prec=%s layout=%s algo=%s math=%s heur=", b->s->name,
           PREC_NAME[b->prec], b->layout, algo_name(algo), math_name(math));
    if (b->heur_rank[algo][math] >= 0)
        printf("%d", b->heur_rank[algo][math]);
    else
        printf("-");
    if (c->state == CFG_OK)
        printf(" ws_mib=%.2f ms=%.4f runs=%d\n", (double)c->ws / (1 << 20), (double)c->ms, c->runs);
    else
        printf(" status=%s why=%s\n", c->state == CFG_FAILED ? "failed" : "skipped", c->why);
}

/* The configuration (algo, math) of the current shape and layout: timed once, then cached. */
static const cfg *time_cfg(bench *b, int algo, int math) {
    cfg *c = &b->cache[algo][math];
    if (c->state != CFG_UNTRIED) return c;
    cudnnStatus_t st = cudnnSetConvolutionMathType(b->cd, (cudnnMathType_t)math);
    if (st != CUDNN_STATUS_SUCCESS) {
        c->state = CFG_SKIPPED;
        snprintf(c->why, sizeof c->why, "math_type:%s", cudnnGetErrorString(st));
    } else if ((st = cudnnGetConvolutionForwardWorkspaceSize(b->h, b->xd, b->wd, b->cd, b->yd,
                                                             (cudnnConvolutionFwdAlgo_t)algo,
                                                             &c->ws)) != CUDNN_STATUS_SUCCESS) {
        c->state = CFG_SKIPPED;
        snprintf(c->why, sizeof c->why, "workspace_query:%s", cudnnGetErrorString(st));
    } else if (c->ws > b->ws_max) {
        c->state = CFG_SKIPPED;
        snprintf(c->why, sizeof c->why, "workspace_%.0f_MiB>%zu", (double)c->ws / (1 << 20),
                 b->ws_max >> 20);
    } else if (time_runs(b, algo, c->ws, 0, &c->ms, &c->runs, c->why, sizeof c->why) == 0) {
        c->state = CFG_OK;
    } else {
        c->state = CFG_FAILED;
    }
    print_cfg(b, algo, math, c);
    return c;
}

/* --- (g) the graph API ---------------------------------------------------------------------- */
/* The plans come from lib/cuda/conv_graph.c, the code conv.c's graph-API candidates use, asked
   for more: every qualifying configuration of mode A and of the fallback list (up to
   G_MAX_PLANS), within G_CAP_MS of planning per shape and layout. */

#define G_MAX_PLANS 32
#define G_CAP_MS 1000.0

/* Every configuration gp__cgraph_plan saw, for the report (its `why` copied). */
typedef struct seen_list {
    int n;
    gp__cgraph_seen s[2 * GP__CGRAPH_OFFERED];
    char why[2 * GP__CGRAPH_OFFERED][96];
} seen_list;

static void on_seen(void *user, const gp__cgraph_seen *sn) {
    seen_list *l = user;
    if (l->n == 2 * GP__CGRAPH_OFFERED) return;
    l->s[l->n] = *sn;
    snprintf(l->why[l->n], sizeof l->why[0], "%s", sn->why ? sn->why : "");
    for (char *p = l->why[l->n]; *p; p++) /* one token on the key=value line */
        if (*p == ' ' || *p == '\'' || *p == '"') *p = '_';
    l->s[l->n].why = l->why[l->n];
    l->n++;
}

static void notes_str(unsigned numerical, int runtime_built, char *out, size_t len) {
    static const char *const nn[] = {
        "tensor_core", "down_convert", "reduced_reduction", "fft",           "nondeterministic",
        "winograd",    "winograd4x4",  "winograd6x6",       "winograd13x13", "strict_nan"};
    size_t at = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < sizeof nn / sizeof *nn; i++)
        if (numerical & 1u << i && at < len)
            at += (size_t)snprintf(out + at, len - at, "%s%s", at ? "," : "", nn[i]);
    if (runtime_built && at < len)
        at += (size_t)snprintf(out + at, len - at, "%sruntime_compiled", at ? "," : "");
    if (!out[0]) snprintf(out, len, "-");
}

/* y's element i as a float. */
static float y_at(const bench *b, const void *p, size_t i) {
    const unsigned char *hp = p;
    if (b->prec == PREC_FP32) {
        float v;
        memcpy(&v, hp + 4 * i, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, hp + 2 * i, 2);
    if (b->prec == PREC_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float v;
        memcpy(&v, &u, 4);
        return v;
    }
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1f)
        u = sign | 0x7f800000u | (m << 13);
    else if (e == 0) { /* zero or subnormal: m * 2^-24 */
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    } else
        u = sign | ((e + 127 - 15) << 23) | (m << 13);
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* The graph plan's output (b->cg's plan b->cg_i) against (a)'s fastest legacy configuration's:
   the largest difference over the largest magnitude of the legacy output; -1 when one of them
   fails. */
static double graph_compare(bench *b, const result *res, size_t y_elems) {
    const cfg *c = &b->cache[res->a_algo][res->a_math];
    CU(cudaMemset(b->y, 0, y_elems * b->es));
    if (run_once(b, ALGO_GRAPH, 0, 0) != CUDNN_STATUS_SUCCESS || cudaGetLastError() != cudaSuccess)
        return -1.0;
    CU(cudaMemcpy(b->host2, b->y, y_elems * b->es, cudaMemcpyDeviceToHost));
    CU(cudaMemset(b->y, 0, y_elems * b->es));
    DNN(cudnnSetConvolutionMathType(b->cd, (cudnnMathType_t)res->a_math));
    if (run_once(b, res->a_algo, c->ws, 0) != CUDNN_STATUS_SUCCESS ||
        cudaGetLastError() != cudaSuccess)
        return -1.0;
    CU(cudaMemcpy(b->host, b->y, y_elems * b->es, cudaMemcpyDeviceToHost));
    double diff = 0.0, mag = 0.0;
    for (size_t i = 0; i < y_elems; i++) {
        double r = (double)y_at(b, b->host, i), g = (double)y_at(b, b->host2, i);
        double d = r > g ? r - g : g - r;
        if (!(d <= diff)) diff = d; /* a NaN counts as the largest */
        if ((r < 0 ? -r : r) > mag) mag = r < 0 ? -r : r;
    }
    return diff / (mag > 0.0 ? mag : 1.0);
}

/* (g) for the current shape and layout: the plans, each timed; the fastest kept in res and its
   output compared with (a)'s. One conv-bench-graph line per configuration offered. */
static void bench_graph(bench *b, const shape *s, int nhwc, int reduced, result *res) {
    static seen_list seen;
    static float ms_of[G_MAX_PLANS];
    static int runs_of[G_MAX_PLANS];
    static char fail_of[G_MAX_PLANS][96];
    const int64_t ho = out_hw(s);
    const gp__cgraph_geom geo = {b->batch,  s->c,      s->hw,  s->hw,  s->k, ho, ho, s->r, s->r,
                                 s->stride, s->stride, s->pad, s->pad, 1,    1,  1,  nhwc};
    /* (r): PyTorch's filter for 16-bit data (no DOWN_CONVERT_INPUTS), engines that reduce in
       reduced precision only: what conv.c forbids and PyTorch's cudnn.benchmark may pick */
    const unsigned r_bit = 1u << CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION;
    const gp__cgraph_want want = {.forbid = reduced ? 1u << CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS
                                                    : gp__cgraph_forbidden(b->prec == PREC_FP32),
                                  .require = reduced ? r_bit : 0,
                                  .ws_max = b->ws_max,
                                  .cap_ms = G_CAP_MS,
                                  .max_plans = G_MAX_PLANS,
                                  .only = -1,
                                  .fallback = 1,
                                  .seen = on_seen,
                                  .user = &seen};
    gp__cgraph *cg = NULL;
    char why[96];
    int best = -1;
    char g_why[sizeof res->g_why];
    seen.n = 0;
    int n = gp__cgraph_plan(b->h, b->dt, &geo, &want, &cg, why, sizeof why);
    if (n > 0 && gp__cgraph_bind(cg, b->x, b->w, b->y, b->ws, why, sizeof why) != 0) n = 0;
    snprintf(g_why, sizeof g_why, "%s", why[0] ? why : "no_engine_config");
    for (char *p = g_why; *p; p++) /* one shlex token: no blank, no quote */
        if (*p == ' ' || *p == '\'' || *p == '"') *p = '_';
    if (!reduced) memcpy(res->g_why, g_why, sizeof g_why);
    b->cg = cg;
    for (int i = 0; i < n; i++) {
        b->cg_i = i;
        fail_of[i][0] = '\0';
        if (time_runs(b, ALGO_GRAPH, 0, 0, &ms_of[i], &runs_of[i], fail_of[i], sizeof fail_of[i]) !=
            0) {
            ms_of[i] = -1.0f;
            if (!reduced) res->g_failed++;
            continue;
        }
        if (reduced)
            res->r_timed++;
        else
            res->g_timed++;
        if (best < 0 || ms_of[i] < ms_of[best]) best = i;
    }
    if (!reduced) res->g_offered = seen.n;
    for (int i = 0; i < seen.n; i++) {
        const gp__cgraph_seen *sn = &seen.s[i];
        char notes[160], line[256];
        notes_str(sn->notes, sn->runtime_built, notes, sizeof notes);
        if (sn->plan >= 0 && sn->plan < n && ms_of[sn->plan] >= 0)
            snprintf(line, sizeof line, "ws_mib=%.2f ms=%.4f runs=%d", (double)sn->ws / (1 << 20),
                     (double)ms_of[sn->plan], runs_of[sn->plan]);
        else if (sn->plan >= 0 && sn->plan < n)
            snprintf(line, sizeof line, "status=failed why=%s", fail_of[sn->plan]);
        else if (sn->plan >= 0) /* planned, but the variant pack was refused */
            snprintf(line, sizeof line, "status=failed why=%s", g_why);
        else
            snprintf(line, sizeof line, "status=skipped why=%s", sn->why);
        if (reduced) {
            /* (r) has no counts of its own: its lines say what was passed over */
        } else if (sn->plan >= n) { /* planned, then not run: the variant pack was refused */
            res->g_failed++;
        } else if (sn->plan < 0) { /* the summary's counts */
            if (!strcmp(sn->why, "same_plan_as_an_earlier"))
                res->g_dup++;
            else if (!strcmp(sn->why, "forbidden_note"))
                res->g_contract++;
            else if (!strcmp(sn->why, "not_reached_in_time") || !strcmp(sn->why, "kept_enough"))
                res->g_untried++;
            else
                res->g_failed++;
        }
        printf("conv-bench-graph%s: shape=%s prec=%s layout=%s mode=%s cfg=%d eng=%lld notes=%s "
               "%s\n",
               reduced ? "-r" : "", s->name, PREC_NAME[b->prec], b->layout,
               sn->fallback ? "fallback" : "A", sn->index, sn->engine, notes, line);
    }
    fflush(stdout);
    if (best >= 0) {
        double diff = -1.0;
        if (res->a_algo >= 0) {
            b->cg_i = best;
            diff = graph_compare(b, res, (size_t)b->batch * (size_t)s->k * (size_t)ho * (size_t)ho);
        }
        if (reduced) {
            res->r_eng = gp__cgraph_engine(cg, best);
            res->r_ms = ms_of[best];
            res->r_diff = diff;
        } else {
            res->g_eng = gp__cgraph_engine(cg, best);
            res->g_ms = ms_of[best];
            res->g_ws = gp__cgraph_ws(cg, best);
            res->g_diff = diff;
        }
    }
    b->cg = NULL;
    gp__cgraph_free(cg);
}

/* --- one shape in one layout ---------------------------------------------------------------- */

/* The math type conv.c sets before the heuristic (dnn_math): fp32 FMA, 16-bit tensor ops. */
static int prec_math(precision p) {
    return p == PREC_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

static void bench_shape(bench *b, const shape *s, cudnnTensorFormat_t fmt, result *res) {
    const int N = b->batch, ho = out_hw(s);
    b->s = s;
    b->layout = fmt == CUDNN_TENSOR_NHWC ? "NHWC" : "NCHW";
    snprintf(g_where, sizeof g_where, " (shape %.47s, layout %.4s)", s->name, b->layout);
    memset(b->cache, 0, sizeof b->cache);
    memset(res, 0, sizeof *res);
    res->h_algo = res->a_algo = res->fft_algo = -1;
    res->h_math = res->a_math = res->fft_math = -1;
    res->f_ms = -1.0f;
    res->f_algo = res->f_math = -1;
    res->f_nan = -1;
    res->g_eng = res->r_eng = -1;
    res->g_diff = res->r_diff = -1.0;

    /* A layout or shape this cuDNN will not describe or plan is reported and passed over (the
       other shapes and layouts still run): a line with refused=<call>, "-" in the table. */
#define REFUSE(call)                                                                               \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                          \
            printf("conv-bench: shape=%s count=%d prec=%s layout=%s n=%d c=%d hw=%d k=%d r=%d "    \
                   "stride=%d pad=%d out=%d refused=%.*s status=%s\n",                             \
                   s->name, s->count, PREC_NAME[b->prec], b->layout, N, s->c, s->hw, s->k, s->r,   \
                   s->stride, s->pad, ho, (int)strcspn(#call, "("), #call,                         \
                   cudnnGetErrorString(s_));                                                       \
            fflush(stdout);                                                                        \
            return;                                                                                \
        }                                                                                          \
    } while (0)
    REFUSE(cudnnSetTensor4dDescriptor(b->xd, fmt, b->dt, N, s->c, s->hw, s->hw));
    REFUSE(cudnnSetTensor4dDescriptor(b->yd, fmt, b->dt, N, s->k, ho, ho));
    REFUSE(cudnnSetFilter4dDescriptor(b->wd, b->dt, fmt, s->k, s->c, s->r, s->r));
    REFUSE(cudnnSetTensor4dDescriptor(b->bd, fmt, b->dt, 1, s->k, 1, 1));
    /* Cross-correlation, fp32 accumulation for every storage type: conv.c's conv_desc. */
    REFUSE(cudnnSetConvolution2dDescriptor(b->cd, s->pad, s->pad, s->stride, s->stride, 1, 1,
                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    REFUSE(cudnnSetConvolutionGroupCount(b->cd, 1));
    int on, oc, oh, ow;
    REFUSE(cudnnGetConvolution2dForwardOutputDim(b->cd, b->xd, b->wd, &on, &oc, &oh, &ow));
    if (on != N || oc != s->k || oh != ho || ow != ho) {
        fprintf(stderr,
                "conv-bench: %s: cuDNN computes a %dx%dx%dx%d output, expected %dx%dx%dx%d\n",
                s->name, on, oc, oh, ow, N, s->k, ho, ho);
        exit(1);
    }

    /* (h) conv_pick's candidates, from the heuristic asked with conv.c's math type. */
    cudnnConvolutionFwdAlgoPerf_t perf[N_ALGO];
    int got = 0;
    memset(perf, 0, sizeof perf);
    REFUSE(cudnnSetConvolutionMathType(b->cd, (cudnnMathType_t)prec_math(b->prec)));
    REFUSE(cudnnGetConvolutionForwardAlgorithm_v7(b->h, b->xd, b->wd, b->cd, b->yd, N_ALGO, &got,
                                                  perf));
#undef REFUSE
    for (int a = 0; a < N_ALGO; a++)
        for (int m = 0; m < N_MATH; m++)
            b->heur_rank[a][m] = -1;
    for (int i = 0; i < got; i++) {
        int a = (int)perf[i].algo, m = (int)perf[i].mathType;
        if (a >= 0 && a < N_ALGO && m >= 0 && m < N_MATH && b->heur_rank[a][m] < 0)
            b->heur_rank[a][m] = i;
    }
    int cand_a[N_CAND], cand_m[N_CAND], n_cand = 0;
    for (int i = 0; i < got && n_cand < N_CAND; i++) {
        int a = (int)perf[i].algo, m = (int)perf[i].mathType;
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > b->ws_max) continue;
        if (b->prec == PREC_FP32 && (is_fft(a) || m != CUDNN_FMA_MATH)) continue;
        if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
        if (a < 0 || a >= N_ALGO || m < 0 || m >= N_MATH) continue;
        /* conv_pick skips what the descriptor or the workspace query rejects */
        size_t ws = 0;
        if (cudnnSetConvolutionMathType(b->cd, (cudnnMathType_t)m) != CUDNN_STATUS_SUCCESS)
            continue;
        if (cudnnGetConvolutionForwardWorkspaceSize(b->h, b->xd, b->wd, b->cd, b->yd,
                                                    (cudnnConvolutionFwdAlgo_t)a,
                                                    &ws) != CUDNN_STATUS_SUCCESS ||
            ws > b->ws_max)
            continue;
        cand_a[n_cand] = a;
        cand_m[n_cand] = m;
        n_cand++;
    }
    int h_fallback = n_cand == 0; /* conv_pick's stand-in: IMPLICIT_GEMM, conv.c's math type */
    if (h_fallback) {
        cand_a[0] = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
        cand_m[0] = prec_math(b->prec);
        n_cand = 1;
    }
    for (int i = 0; i < n_cand; i++) {
        const cfg *c = time_cfg(b, cand_a[i], cand_m[i]);
        if (c->state == CFG_OK && (res->h_algo < 0 || c->ms < res->h_ms)) {
            res->h_algo = cand_a[i];
            res->h_math = cand_m[i];
            res->h_ms = c->ms;
        }
    }

    /* (a) every algorithm with every math type the precision allows. */
    const int maths16[] = {CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH}, maths32[] = {CUDNN_FMA_MATH};
    const int *maths = b->prec == PREC_FP32 ? maths32 : maths16;
    int n_maths = b->prec == PREC_FP32 ? 1 : 2;
    for (int a = 0; a < N_ALGO; a++)
        for (int j = 0; j < n_maths; j++) {
            const cfg *c = time_cfg(b, a, maths[j]);
            if (c->state != CFG_OK) continue;
            if (is_fft(a)) {
                if (res->fft_algo < 0 || c->ms < res->fft_ms)
                    res->fft_algo = a, res->fft_math = maths[j], res->fft_ms = c->ms;
            } else if (res->a_algo < 0 || c->ms < res->a_ms) {
                res->a_algo = a, res->a_math = maths[j], res->a_ms = c->ms;
            }
        }

    /* (f) the fused form with each of (h)'s candidates that ran: the fastest cuDNN accepts. */
    snprintf(res->f_why, sizeof res->f_why, "no_h_algorithm");
    for (int i = 0; i < n_cand; i++) {
        const cfg *c = &b->cache[cand_a[i]][cand_m[i]];
        float ms;
        int runs;
        char why[sizeof res->f_why];
        if (c->state != CFG_OK) continue;
        DNN(cudnnSetConvolutionMathType(b->cd, (cudnnMathType_t)cand_m[i]));
        if (time_runs(b, cand_a[i], c->ws, 1, &ms, &runs, why, sizeof why) != 0) {
            if (res->f_algo < 0) memcpy(res->f_why, why, sizeof why); /* the first refusal */
            continue;
        }
        if (res->f_algo < 0 || ms < res->f_ms)
            res->f_algo = cand_a[i], res->f_math = cand_m[i], res->f_ms = ms;
    }
    if (res->f_algo >= 0) {
        const cfg *c = &b->cache[res->f_algo][res->f_math];
        DNN(cudnnSetConvolutionMathType(b->cd, (cudnnMathType_t)res->f_math));
        res->f_nan = fused_reads_z(b, res->f_algo, c->ws,
                                   (size_t)N * (size_t)s->k * (size_t)ho * (size_t)ho, b->host);
    }

    /* (g) the graph API's engines, compared with (a)'s fastest */
    bench_graph(b, s, fmt == CUDNN_TENSOR_NHWC, 0, res);
    /* (r) the engines reducing in 16 bits, which conv.c forbids and PyTorch does not */
    if (b->prec != PREC_FP32) bench_graph(b, s, fmt == CUDNN_TENSOR_NHWC, 1, res);

    printf("conv-bench: shape=%s count=%d prec=%s layout=%s n=%d c=%d hw=%d k=%d r=%d stride=%d "
           "pad=%d out=%d",
           s->name, s->count, PREC_NAME[b->prec], b->layout, N, s->c, s->hw, s->k, s->r, s->stride,
           s->pad, ho);
    printf(" h_cands=");
    for (int i = 0; i < n_cand; i++)
        printf("%s%s/%s", i ? "," : "", algo_name(cand_a[i]), math_name(cand_m[i]));
    if (h_fallback) printf("(fallback)");
    if (res->h_algo >= 0)
        printf(" h_algo=%s h_math=%s h_ms=%.4f", algo_name(res->h_algo), math_name(res->h_math),
               (double)res->h_ms);
    else
        printf(" h_algo=- h_math=- h_ms=-");
    if (res->a_algo >= 0) {
        int rank = b->heur_rank[res->a_algo][res->a_math];
        printf(" a_algo=%s a_math=%s a_ms=%.4f a_heur=", algo_name(res->a_algo),
               math_name(res->a_math), (double)res->a_ms);
        if (rank >= 0)
            printf("%d", rank);
        else
            printf("-");
    } else {
        printf(" a_algo=- a_math=- a_ms=- a_heur=-");
    }
    if (res->fft_algo >= 0)
        printf(" fft_algo=%s fft_math=%s fft_ms=%.4f fft_faster=%d", algo_name(res->fft_algo),
               math_name(res->fft_math), (double)res->fft_ms,
               res->a_algo < 0 || res->fft_ms < res->a_ms);
    else
        printf(" fft_algo=- fft_ms=- fft_faster=0");
    if (res->f_algo >= 0)
        printf(" fused_algo=%s fused_math=%s fused_ms=%.4f fused_z_nan=%ld", algo_name(res->f_algo),
               math_name(res->f_math), (double)res->f_ms, res->f_nan);
    else
        printf(" fused_ms=- fused=rejected:%s", res->f_why);
    printf(" g_offered=%d g_timed=%d g_same_plan=%d g_fp32_contract=%d g_failed=%d g_untried=%d",
           res->g_offered, res->g_timed, res->g_dup, res->g_contract, res->g_failed,
           res->g_untried);
    if (res->g_eng >= 0) {
        printf(" g_eng=%lld g_ms=%.4f g_ws_mib=%.2f g_diff=", res->g_eng, (double)res->g_ms,
               (double)res->g_ws / (1 << 20));
        if (res->g_diff >= 0.0)
            printf("%.3g", res->g_diff);
        else
            printf("-");
    } else {
        printf(" g_ms=- g_why=%s", res->g_why);
    }
    if (b->prec != PREC_FP32 && res->r_eng >= 0) {
        printf(" r_timed=%d r_eng=%lld r_ms=%.4f r_diff=", res->r_timed, res->r_eng,
               (double)res->r_ms);
        if (res->r_diff >= 0.0)
            printf("%.3g", res->r_diff);
        else
            printf("-");
    } else if (b->prec != PREC_FP32) {
        printf(" r_timed=%d r_ms=-", res->r_timed);
    }
    printf("\n");
    fflush(stdout);
    res->done = 1;
}

/* --- the shape list ------------------------------------------------------------------------- */

static int load_shapes(const char *path, shape *out) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(2);
    }
    char line[256];
    int n = 0, ln = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char name[48];
        shape s;
        int got = sscanf(line, "%47s %d %d %d %d %d %d %d", name, &s.c, &s.k, &s.r, &s.stride,
                         &s.pad, &s.hw, &s.count);
        if (got <= 0) continue; /* blank */
        if (got != 8 || s.c < 1 || s.k < 1 || s.r < 1 || s.stride < 1 || s.pad < 0 || s.hw < 1 ||
            s.count < 0 || s.hw + 2 * s.pad < s.r) {
            fprintf(stderr,
                    "conv-bench: %s:%d: expected NAME CIN COUT KERNEL STRIDE PAD SIZE COUNT\n",
                    path, ln);
            exit(2);
        }
        if (n == MAX_SHAPES) {
            fprintf(stderr, "conv-bench: %s: more than %d shapes\n", path, MAX_SHAPES);
            exit(2);
        }
        memcpy(s.name, name, sizeof s.name);
        out[n++] = s;
    }
    if (ferror(f)) {
        perror(path);
        exit(2);
    }
    fclose(f);
    if (n == 0) {
        fprintf(stderr, "conv-bench: %s: no shapes\n", path);
        exit(2);
    }
    return n;
}

/* --- the report ----------------------------------------------------------------------------- */

static int print_libs(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size, (void)data;
    const char *p = info->dlpi_name, *base = p ? strrchr(p, '/') : NULL;
    base = base ? base + 1 : p;
    if (base && (strncmp(base, "libcudnn", 8) == 0 || strncmp(base, "libcudart", 9) == 0))
        printf("conv-bench: loaded=%s\n", p);
    return 0;
}

/* One table cell: the value, or "-". */
static void cell(float v, int ok) {
    if (ok)
        printf(" %.3f |", (double)v);
    else
        printf(" - |");
}

#define N_COLS 9 /* the last two, (r), in fp16 / bf16 only */
static void print_table(const bench *b, const shape *sh, int n, int lay[2], result (*res)[2]) {
    double tot[N_COLS] = {0};
    int miss[N_COLS] = {0}, count = 0, counted = 0,
        ncols = b->prec == PREC_FP32 ? N_COLS - 2 : N_COLS;
    for (int i = 0; i < n; i++)
        counted += sh[i].count > 0; /* the shapes inside the totals */
    printf("\nconv-bench: %s, batch %d, ms per convolution (median of up to %d runs); "
           "(h) conv.c's rule, (a) every algorithm, (g) the graph API's fastest engine, fused: "
           "the fastest of (h)'s candidates as cudnnConvolutionBiasActivationForward, NCHW%s; "
           "weighted total: sum of count x ms\n\n",
           PREC_NAME[b->prec], b->batch, b->reps,
           ncols > 7 ? "; (r) the graph API's fastest engine that reduces in reduced precision "
                       "(not conv.c's: its sums are fp32)"
                     : "");
    printf("| shape | count | NCHW ours(h) ms | NCHW best(a) ms | NHWC ours(h) ms | NHWC best(a) "
           "ms | fused ms | NCHW graph(g) ms | NHWC graph(g) ms |%s best algo |\n",
           ncols > 7 ? " NCHW graph(r) ms | NHWC graph(r) ms |" : "");
    printf("|---|---|---|---|---|---|---|---|---|---|%s\n", ncols > 7 ? "---|---|" : "");
    for (int i = 0; i < n; i++) {
        const shape *s = &sh[i];
        const result *r0 = lay[0] ? &res[i][0] : NULL, *r1 = lay[1] ? &res[i][1] : NULL;
        float v[N_COLS] = {r0 ? r0->h_ms : 0, r0 ? r0->a_ms : 0, r1 ? r1->h_ms : 0,
                           r1 ? r1->a_ms : 0, r0 ? r0->f_ms : 0, r0 ? r0->g_ms : 0,
                           r1 ? r1->g_ms : 0, r0 ? r0->r_ms : 0, r1 ? r1->r_ms : 0};
        int ok[N_COLS] = {r0 && r0->h_algo >= 0, r0 && r0->a_algo >= 0, r1 && r1->h_algo >= 0,
                          r1 && r1->a_algo >= 0, r0 && r0->f_algo >= 0, r0 && r0->g_eng >= 0,
                          r1 && r1->g_eng >= 0,  r0 && r0->r_eng >= 0,  r1 && r1->r_eng >= 0};
        printf("| %s %d->%d %dx%d/%d @%d | %d |", s->name, s->c, s->k, s->r, s->r, s->stride, s->hw,
               s->count);
        for (int j = 0; j < ncols; j++) {
            cell(v[j], ok[j]);
            if (ok[j])
                tot[j] += (double)s->count * (double)v[j];
            else if (s->count) /* a count-0 shape is outside the totals */
                miss[j]++;
        }
        count += s->count;
        /* the fastest non-FFT configuration of either layout; FFT when it would be faster */
        const result *best = NULL;
        const char *bl = "";
        if (r0 && r0->a_algo >= 0) best = r0, bl = "NCHW";
        if (r1 && r1->a_algo >= 0 && (!best || r1->a_ms < best->a_ms)) best = r1, bl = "NHWC";
        if (best)
            printf(" %s %s/%s", bl, algo_name(best->a_algo), math_name(best->a_math));
        else
            printf(" -");
        for (int l = 0; l < 2; l++) {
            const result *r = l ? r1 : r0;
            if (r && r->fft_algo >= 0 && (!best || r->fft_ms < best->a_ms))
                printf("; fft%s %s %s %.3f", b->prec == PREC_FP32 ? " (excluded)" : "",
                       l ? "NHWC" : "NCHW", algo_name(r->fft_algo), (double)r->fft_ms);
        }
        printf(" |\n");
    }
    printf("| weighted total | %d |", count);
    for (int j = 0; j < ncols; j++) {
        if (miss[j] == counted)
            printf(" - |");
        else if (miss[j])
            printf(" %.3f (%d shapes missing) |", tot[j], miss[j]);
        else
            printf(" %.3f |", tot[j]);
    }
    printf(" |\n");
}

static _Noreturn void usage(void) {
    fprintf(stderr, "usage: conv-bench [--batch N] [--precision fp32|fp16|bf16] "
                    "[--shapes resnet18|FILE] [--reps R] [--layouts NCHW,NHWC]\n");
    exit(2);
}

int main(int argc, char **argv) {
    bench b;
    memset(&b, 0, sizeof b);
    b.batch = 256;
    b.reps = 5;
    b.prec = PREC_FP32;
    const char *shapes_arg = "resnet18", *layouts = "NCHW,NHWC";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) usage();
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        char *end;
        if (!strcmp(a, "--batch")) {
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 1 << 20) usage();
            b.batch = (int)n;
        } else if (!strcmp(a, "--reps")) {
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 1000) usage();
            b.reps = (int)n;
        } else if (!strcmp(a, "--precision")) {
            if (!strcmp(v, "fp32"))
                b.prec = PREC_FP32;
            else if (!strcmp(v, "fp16"))
                b.prec = PREC_FP16;
            else if (!strcmp(v, "bf16"))
                b.prec = PREC_BF16;
            else
                usage();
        } else if (!strcmp(a, "--shapes")) {
            shapes_arg = v;
        } else if (!strcmp(a, "--layouts")) {
            layouts = v;
        } else {
            usage();
        }
    }
    int lay[2] = {0, 0}; /* NCHW, NHWC */
    {
        char buf[64];
        snprintf(buf, sizeof buf, "%s", layouts);
        for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
            if (!strcmp(t, "NCHW") || !strcmp(t, "nchw"))
                lay[0] = 1;
            else if (!strcmp(t, "NHWC") || !strcmp(t, "nhwc"))
                lay[1] = 1;
            else
                usage();
        }
        if (!lay[0] && !lay[1]) usage();
    }
    static shape shapes[MAX_SHAPES];
    int n_shapes;
    if (!strcmp(shapes_arg, "resnet18")) {
        n_shapes = (int)(sizeof RESNET18 / sizeof *RESNET18);
        memcpy(shapes, RESNET18, sizeof RESNET18);
    } else {
        n_shapes = load_shapes(shapes_arg, shapes);
    }
    b.dt = b.prec == PREC_FP32   ? CUDNN_DATA_FLOAT
           : b.prec == PREC_FP16 ? CUDNN_DATA_HALF
                                 : CUDNN_DATA_BFLOAT16;
    b.es = b.prec == PREC_FP32 ? 4 : 2;

    /* cuDNN first: its version is worth having even where no device is. */
    int vmaj = -1, vmin = -1, vpatch = -1;
    DNN(cudnnGetProperty(MAJOR_VERSION, &vmaj));
    DNN(cudnnGetProperty(MINOR_VERSION, &vmin));
    DNN(cudnnGetProperty(PATCH_LEVEL, &vpatch));
    const char *lib = "?";
    {
        Dl_info di;
        cudnnStatus_t (*fn)(cudnnHandle_t *) = cudnnCreate;
        void *addr;
        _Static_assert(sizeof fn == sizeof addr, "function and data pointers differ in size");
        memcpy(&addr, &fn, sizeof addr);
        if (dladdr(addr, &di) && di.dli_fname) lib = di.dli_fname;
    }
    printf("conv-bench: cudnn_version=%zu cudnn=%d.%d.%d cudnn_cudart=%zu cudnn_lib=%s "
           "cudnn_header=%d.%d.%d\n",
           cudnnGetVersion(), vmaj, vmin, vpatch, cudnnGetCudartVersion(), lib, CUDNN_MAJOR,
           CUDNN_MINOR, CUDNN_PATCHLEVEL);
    fflush(stdout);

    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("SKIP: no usable CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
        const char *req = getenv("GPT_REQUIRE_DEVICE");
        if (req && *req && strcmp(req, "0") != 0) {
            fprintf(stderr, "conv-bench: GPT_REQUIRE_DEVICE is set: no usable device fails\n");
            return 1;
        }
        return 77;
    }
    struct cudaDeviceProp prop;
    int drv = 0, rt = 0;
    CU(cudaSetDevice(0));
    CU(cudaGetDeviceProperties(&prop, 0));
    CU(cudaDriverGetVersion(&drv));
    CU(cudaRuntimeGetVersion(&rt));
    size_t free_b = 0, total_b = 0;
    CU(cudaMemGetInfo(&free_b, &total_b));
    b.ws_max = gp__conv_ws_cap(free_b); /* as conv.c's first slot on the device sets it */
    printf("conv-bench: device=\"%s\" cc=%d.%d sms=%d mem_gib=%.1f driver=%d runtime=%d\n",
           prop.name, prop.major, prop.minor, prop.multiProcessorCount,
           (double)prop.totalGlobalMem / (1 << 30), drv, rt);
    printf("conv-bench: prec=%s batch=%d reps=%d shapes=%s n_shapes=%d layouts=%s%s%s "
           "ws_max_mib=%d\n",
           PREC_NAME[b.prec], b.batch, b.reps, shapes_arg, n_shapes, lay[0] ? "NCHW" : "",
           lay[0] && lay[1] ? "," : "", lay[1] ? "NHWC" : "", (int)(b.ws_max >> 20));
    fflush(stdout);

    /* Buffers once, for the largest shape. */
    size_t x_el = 0, y_el = 0, w_el = 0, k_max = 0;
    for (int i = 0; i < n_shapes; i++) {
        const shape *s = &shapes[i];
        size_t ho = (size_t)out_hw(s), N = (size_t)b.batch;
        size_t xe = N * (size_t)s->c * (size_t)s->hw * (size_t)s->hw;
        size_t ye = N * (size_t)s->k * ho * ho, we = (size_t)s->k * (size_t)s->c * s->r * s->r;
        if (xe > x_el) x_el = xe;
        if (ye > y_el) y_el = ye;
        if (we > w_el) w_el = we;
        if ((size_t)s->k > k_max) k_max = (size_t)s->k;
    }
    size_t host_el = x_el > w_el ? x_el : w_el;
    if (y_el > host_el) host_el = y_el;
    void *host = b.host = malloc(host_el * b.es);
    b.host2 = malloc(y_el * b.es);
    if (!host || !b.host2) {
        fprintf(stderr, "conv-bench: out of host memory (%zu bytes)\n", host_el * b.es);
        return 1;
    }
    CU(cudaMalloc(&b.x, x_el * b.es));
    CU(cudaMalloc(&b.y, y_el * b.es));
    CU(cudaMalloc(&b.w, w_el * b.es));
    CU(cudaMalloc(&b.bias, k_max * b.es));
    CU(cudaMalloc(&b.ws, b.ws_max));
    fill(&b, b.x, x_el, 1.0f, 0x636f6e76ull, host);
    fill(&b, b.w, w_el, 0.1f, 0x77656967ull, host);
    fill(&b, b.bias, k_max, 0.1f, 0x62696173ull, host);
    CU(cudaMemset(b.y, 0, y_el * b.es)); /* the fused form reads it (z = y, alpha2 = 0) */
    b.ev = malloc((size_t)(b.reps + 1) * sizeof *b.ev);
    b.times = malloc((size_t)b.reps * sizeof *b.times);
    if (!b.ev || !b.times) {
        fprintf(stderr, "conv-bench: out of host memory\n");
        return 1;
    }
    for (int i = 0; i <= b.reps; i++)
        CU(cudaEventCreate(&b.ev[i]));
    CU(cudaDeviceSynchronize());

    DNN(cudnnCreate(&b.h));
    DNN(cudnnCreateTensorDescriptor(&b.xd));
    DNN(cudnnCreateTensorDescriptor(&b.yd));
    DNN(cudnnCreateTensorDescriptor(&b.bd));
    DNN(cudnnCreateFilterDescriptor(&b.wd));
    DNN(cudnnCreateConvolutionDescriptor(&b.cd));
    DNN(cudnnCreateActivationDescriptor(&b.act));
    DNN(cudnnSetActivationDescriptor(b.act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));

    result(*res)[2] = calloc((size_t)n_shapes, sizeof *res);
    if (!res) {
        fprintf(stderr, "conv-bench: out of host memory\n");
        return 1;
    }
    for (int i = 0; i < n_shapes; i++)
        for (int l = 0; l < 2; l++)
            if (lay[l])
                bench_shape(&b, &shapes[i], l ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, &res[i][l]);
    g_where[0] = '\0';
    print_table(&b, shapes, n_shapes, lay, res);
    printf("\n");
    dl_iterate_phdr(print_libs, NULL);

    DNN(cudnnDestroyActivationDescriptor(b.act));
    DNN(cudnnDestroyConvolutionDescriptor(b.cd));
    DNN(cudnnDestroyFilterDescriptor(b.wd));
    DNN(cudnnDestroyTensorDescriptor(b.bd));
    DNN(cudnnDestroyTensorDescriptor(b.yd));
    DNN(cudnnDestroyTensorDescriptor(b.xd));
    DNN(cudnnDestroy(b.h));
    for (int i = 0; i <= b.reps; i++)
        CU(cudaEventDestroy(b.ev[i]));
    CU(cudaFree(b.ws));
    CU(cudaFree(b.bias));
    CU(cudaFree(b.w));
    CU(cudaFree(b.y));
    CU(cudaFree(b.x));
    free(res);
    free(b.ev);
    free(b.times);
    free(b.host);
    free(b.host2);
    return 0;
}
