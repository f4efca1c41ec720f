/*
 * CONV2D (layers.h): on cuDNN when the build has it and cuDNN can plan the op (per bucket: tensor
 * descriptors, every usable algorithm of the heuristic's list, each timed on the slot's buffers
 * at setup as it will run, as conv then the bias/act kernel and, for a relu, as cuDNN's fused
 * conv + bias + relu where cuDNN accepts it, and the graph API's plans (conv_graph.c) as conv
 * then the kernel, a winner among them checked against the direct kernel first: the fastest
 * pair stays), otherwise on the direct kernel (kernels/act.cu), which is exact but slow; the
 * reason then goes to the slot's note, which the model's setup passes on to the pipeline's
 * stats.backend_note (handles.h, note). docs/DESIGN.md §6, "The graph API's engines".
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupipe/cuda.h"

#include "../clock.h"
#include "layers.h"

/* Per bucket, every usable algorithm of the heuristic's list is timed at setup, as PyTorch's
   cudnn.benchmark does (the second GPU run, 2026-11-26, had gpupipe's 3x3 stride-1 stages 1.2-2.8x
   slower than PyTorch's with the heuristic's first three only; bench/RESULTS.md), in each form,
   CONV_TIMED_RUNS times after one untimed run. */
#define CONV_MAX_CAND CUDNN_CONVOLUTION_FWD_ALGO_COUNT
#define CONV_TIMED_RUNS 2

/* A folded residual add (model_impl.h, Buffers) after a convolution that wrote conv + bias
   without the activation: y = act(y + z) over the batch's n items. */
static cudaError_t conv_residual(const slot_state *st, const step *sp, const gp_batch *b,
                                 size_t n) {
    const gp__op *op = sp->op;
    void *y = gp__resolve(sp->dst, b);
    return gp__k_add_act(gp_cuda_stream(b), st->kt, y, gp__resolve(sp->src2, b), y,
                         n * gp__shape_numel(op->out), (int)op->act);
}

/* The direct kernel: builds without cuDNN, and convolutions cuDNN could not plan. */
static int conv_run_direct(slot_state *st, const step *sp, const gp_batch *b, ck *c) {
    const gp__op *op = sp->op;
    int res = gp__op_has_src2(op); /* the activation then follows the residual add */
    CK(c, gp__k_conv2d_direct(gp_cuda_stream(b), st->kt, gp__resolve(sp->src, b), sp->k->w,
                              sp->k->bias_f32, gp__resolve(sp->dst, b), b->n, sp->chans, op->in.h,
                              op->in.w, op->out.c, op->out.h, op->out.w, op->kh, op->kw,
                              op->stride_h, op->stride_w, op->pad_h, op->pad_w, op->dil_h,
                              op->dil_w, op->groups, res ? GP__ACT_NONE : (int)op->act, st->nhwc));
    if (res) CK(c, conv_residual(st, sp, b, b->n));
    return GP_OK;
}

/* The weight and bias into the model's arena: the weight [Cout][Cin / groups][kh][kw] as the
   model holds it, or for an NHWC model [Cout][kh][kw][Cs] (cuDNN's NHWC filter, and the direct
   kernel's in that layout), Cs = Cin / groups, or the stem pad's stored channels (k->chans:
   the weights of the added channels zero). */
static int conv_consts(const gp__op *op, gp__consts *k, ck *c) {
    if (!k->nhwc) return gp__consts_weight_bias(op, k, c);
    const size_t cout = (size_t)op->out.c, cin = (size_t)(op->in.c / op->groups),
                 kk = (size_t)op->kh * (size_t)op->kw;
    const size_t cs = op->groups == 1 && (size_t)k->chans > cin ? (size_t)k->chans : cin;
    if (op->weight_count != cout * cin * kk)
        return CK_FAIL(c, GP_EMODEL, "conv2d weight of %zu floats, not %zu x %zu x %d x %d",
                       op->weight_count, cout, cin, op->kh, op->kw);
    const size_t count = cout * kk * cs;
    float *w = NULL;
    if (k->img) { /* else sizing: no values */
        if (!(w = calloc(count ? count : 1, sizeof *w)))
            return CK_FAIL(c, GP_ENOMEM, "out of memory laying out a conv2d weight as NHWC");
        for (size_t o = 0; o < cout; o++)
            for (size_t i = 0; i < cin; i++)
                for (size_t q = 0; q < kk; q++)
                    w[(o * kk + q) * cs + i] = op->weight[(o * cin + i) * kk + q];
    }
    gp__consts_put(k, GP__K_W, w, 0.0f, count, k->kt);
    free(w);
    gp__consts_bias(k, GP__K_BIAS_F32, GP__K_BIAS_T, op->bias, cout);
    return GP_OK;
}

#ifdef GP_HAVE_CUDNN
#include "conv_graph.h"

/* Wall time a bucket's graph-API plans may take to finalize at setup (conv_graph.c), and a
   slot's plans in all: past it, later convolutions and buckets time the legacy algorithms
   only (an INFO line says so), so a deep network's create stays bounded. Engines built at run
   time are passed over (finalizing one can take seconds). */
#define CONV_GRAPH_CAP_MS 250.0
#define CONV_GRAPH_SLOT_MS 4000.0
/* A memo's algorithm field for a graph-API plan: {CONV_MEMO_GRAPH, position, engine}. */
#define CONV_MEMO_GRAPH (-1)

typedef struct conv_bucket {
    cudnnConvolutionDescriptor_t conv; /* per bucket: the math type follows the algorithm */
    cudnnTensorDescriptor_t x, y;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
    int fused; /* runs as cudnnConvolutionBiasActivationForward (timed faster, and accepted) */
    /* The candidates conv_bind times, in this order: the legacy algorithms (the first is the
       heuristic's choice), then the graph API's plans (g; NULL: none). */
    int n_cand;
    cudnnConvolutionFwdAlgo_t cand_algo[CONV_MAX_CAND];
    cudnnMathType_t cand_math[CONV_MAX_CAND];
    size_t cand_ws[CONV_MAX_CAND];
    gp__cgraph *g;
    int over_cap;   /* legacy candidates and graph configurations over the workspace cap */
    int graph;      /* the plan of g the bucket runs, or -1: the legacy algorithm */
    const void *gx; /* the x and y g's variant pack holds (conv_bind_graph) */
    void *gy;
    int deferred; /* an earlier op of this slot planned the same key: its memo, at bind */
} conv_bucket;

/* What a convolution's choice depends on (gp__memo_*): its geometry, its activation (the fused
   form exists for relu only), whether it adds a residual (the fused form reads it), the batch
   size and the layout (one per model, gp__cuda_nhwc: kept in the key all the same); int64
   fields, so no padding. */
enum { CONV_KEY_LEN = 19 };
_Static_assert(CONV_KEY_LEN * sizeof(int64_t) <= GP__MEMO_KEY, "a conv key fits a memo");
static void conv_key(const slot_state *st, const step *sp, size_t n, int64_t key[CONV_KEY_LEN]) {
    const gp__op *op = sp->op;
    const int64_t k[CONV_KEY_LEN] = {sp->chans,           op->in.h,     op->in.w,   op->out.c,
                                     op->out.h,           op->out.w,    op->kh,     op->kw,
                                     op->stride_h,        op->stride_w, op->pad_h,  op->pad_w,
                                     op->dil_h,           op->dil_w,    op->groups, (int)op->act,
                                     gp__op_has_src2(op), (int64_t)n,   st->nhwc};
    memcpy(key, k, sizeof k);
}

typedef struct conv_plan {
    cudnnFilterDescriptor_t w;
    cudnnTensorDescriptor_t bias;
    cudnnActivationDescriptor_t relu; /* NULL unless the op's act is relu */
    conv_bucket *bk;
} conv_plan;

static cudnnDataType_t dnn_type(gp__kt t) {
    return t == GP__KT_F16    ? CUDNN_DATA_HALF
           : t == GP__KT_BF16 ? CUDNN_DATA_BFLOAT16
                              : CUDNN_DATA_FLOAT;
}

/* The math type the precision asks cuDNN for, before the heuristic (PyTorch's choice):
   fp32 FMA only (no tf32), tf32 default (tensor cores allowed), 16-bit tensor ops. */
static cudnnMathType_t dnn_math(gp_precision p) {
    return p == GP_PRECISION_FP32   ? CUDNN_FMA_MATH
           : p == GP_PRECISION_TF32 ? CUDNN_DEFAULT_MATH
                                    : CUDNN_TENSOR_OP_MATH;
}

static int conv_desc(cudnnConvolutionDescriptor_t *d, const gp__op *op, ck *c) {
    CK(c, cudnnCreateConvolutionDescriptor(d));
    /* Cross-correlation, as torch.nn.Conv2d; fp32 accumulation for every storage type. */
    CK(c, cudnnSetConvolution2dDescriptor(*d, op->pad_h, op->pad_w, op->stride_h, op->stride_w,
                                          op->dil_h, op->dil_w, CUDNN_CROSS_CORRELATION,
                                          CUDNN_DATA_FLOAT));
    CK(c, cudnnSetConvolutionGroupCount(*d, op->groups));
    return GP_OK;
}

/* conv_graph's tally of the configurations passed over for their workspace (conv_log). */
static void conv_seen(void *user, const gp__cgraph_seen *s) {
    if (s->over_ws) ((conv_bucket *)user)->over_cap++;
}

/* The bucket's graph-API plans (conv_graph.c) into bk->g, all of them (only < 0) or the one at
   position `only` (a memo's), within cap_ms of finalizing: how many. None is no error (the
   legacy candidates stand); the precision's rule is the legacy one's: fp32 without tensor
   cores or FFT, no precision with inputs converted down or reduced-precision sums. */
static int conv_graph(const slot_state *st, const gp_batch *slot, const step *sp, conv_bucket *bk,
                      cudnnHandle_t h, size_t n, int only, double cap_ms) {
    const gp__op *op = sp->op;
    const gp__cgraph_geom g = {(int64_t)n,   sp->chans, op->in.h,  op->in.w,  op->out.c,
                               op->out.h,    op->out.w, op->kh,    op->kw,    op->stride_h,
                               op->stride_w, op->pad_h, op->pad_w, op->dil_h, op->dil_w,
                               op->groups,   st->nhwc};
    const gp__cgraph_want want = {.forbid =
                                      gp__cgraph_forbidden(st->m->precision == GP_PRECISION_FP32),
                                  .ws_max = st->conv_ws_cap,
                                  .cap_ms = cap_ms,
                                  .max_plans = GP__CGRAPH_MAX,
                                  .only = only,
                                  .fallback = 1, /* fp32's mode A is mostly tensor-core */
                                  .no_rtc = 1,
                                  .seen = only < 0 ? conv_seen : NULL, /* a full planning */
                                  .user = bk};
    char why[512];
    int got = gp__cgraph_plan(h, dnn_type(st->kt), &g, &want, &bk->g, why, sizeof why);
    if (got == 0) { /* why: cuDNN refused the graph, or nothing qualified: not an error */
        gp__slot_info(slot, "conv2d %s: batch %zu: no graph-API plans: %s", op->name, n, why);
        gp__cgraph_free(bk->g);
        bk->g = NULL;
    }
    return got;
}

/* The bucket's algorithm when no candidate is usable: IMPLICIT_GEMM in the precision's math. */
static int conv_standin(const slot_state *st, const conv_plan *cp, conv_bucket *bk, cudnnHandle_t h,
                        ck *c) {
    gp_precision prec = st->m->precision;
    CK(c, cudnnSetConvolutionMathType(bk->conv, dnn_math(prec)));
    bk->algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    CK(c, cudnnGetConvolutionForwardWorkspaceSize(h, bk->x, cp->w, bk->conv, bk->y, bk->algo,
                                                  &bk->ws));
    if (bk->ws > st->conv_ws_cap)
        return CK_FAIL(c, GP_ENOTSUP,
                       "cuDNN offers no convolution algorithm within the %zu MiB workspace cap "
                       "(IMPLICIT_GEMM asks for %zu MiB)",
                       st->conv_ws_cap >> 20, (bk->ws + (1u << 20) - 1) >> 20);
    return GP_OK;
}

/* The bucket's candidates: every entry of the heuristic's list (fastest estimates first) that
   succeeded, fits the slot's workspace cap (gp__conv_ws_cap; over it, counted) and, for fp32, is
   not FFT (its rounding is not the direct sums' and fp32 is held to 1e-4 of the reference: left out
   untried rather than chosen by speed alone; tf32, fp16 and bf16 take it, its fp32-computed
   transforms' error being far below their own rounding) and uses FMA math only; the first is the
   bucket's algorithm until conv_bind has timed them. The descriptor takes that result's math type
   (cuDNN needs algorithm and math type together). Then the graph API's plans (conv_graph), which
   conv_bind times after them. When an earlier slot on this device timed the same convolution at
   this batch size (gp__memo_*), its choice is the only candidate, so this slot's workspace is only
   what that algorithm or plan needs. With `defer` (an earlier op of this slot has the same key) no
   plans are made here: that op's timing decides, and conv_bind plans its choice. IMPLICIT_GEMM
   stands in when the heuristic offers nothing usable. */
static int conv_pick(slot_state *st, const gp_batch *slot, const step *sp, conv_plan *cp,
                     conv_bucket *bk, cudnnHandle_t h, size_t n, int defer, ck *c) {
    gp_precision prec = st->m->precision;
    int64_t key[CONV_KEY_LEN];
    int memo[GP__MEMO_VALS];
    conv_key(st, sp, n, key);
    bk->graph = -1;
    int has_memo = gp__memo_get(st, key, sizeof key, memo);
    if (has_memo && memo[0] == CONV_MEMO_GRAPH) {
        /* The plan at the memo's position, if this slot's heuristic still puts that engine
           there; otherwise planned from scratch (and timed again at bind). IMPLICIT_GEMM stays
           behind it, should the plan not run at bind. */
        if (conv_graph(st, slot, sp, bk, h, n, memo[1], CONV_GRAPH_CAP_MS) == 1 &&
            gp__cgraph_engine(bk->g, 0) == (long long)memo[2]) {
            bk->n_cand = 0;
            int rc = conv_standin(st, cp, bk, h, c);
            if (rc == GP_OK && gp__cgraph_ws(bk->g, 0) > bk->ws) bk->ws = gp__cgraph_ws(bk->g, 0);
            return rc;
        }
        gp__cgraph_free(bk->g);
        bk->g = NULL;
    } else if (has_memo) {
        size_t ws = 0;
        /* The descriptors are this op's own: a choice they reject falls back to the list. */
        if (cudnnSetConvolutionMathType(bk->conv, (cudnnMathType_t)memo[1]) ==
                CUDNN_STATUS_SUCCESS &&
            cudnnGetConvolutionForwardWorkspaceSize(h, bk->x, cp->w, bk->conv, bk->y,
                                                    (cudnnConvolutionFwdAlgo_t)memo[0],
                                                    &ws) == CUDNN_STATUS_SUCCESS &&
            ws <= st->conv_ws_cap) {
            bk->n_cand = 1;
            bk->cand_algo[0] = bk->algo = (cudnnConvolutionFwdAlgo_t)memo[0];
            bk->cand_math[0] = (cudnnMathType_t)memo[1];
            bk->cand_ws[0] = bk->ws = ws;
            return GP_OK; /* conv_bind finds the memo's form */
        }
    }
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0;
    memset(perf, 0, sizeof perf);
    CK(c, cudnnSetConvolutionMathType(bk->conv, dnn_math(prec)));
    CK(c, cudnnGetConvolutionForwardAlgorithm_v7(h, bk->x, cp->w, bk->conv, bk->y,
                                                 CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
    bk->n_cand = 0;
    for (int i = 0; i < got && bk->n_cand < CONV_MAX_CAND; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
        if (prec == GP_PRECISION_FP32 && (perf[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
                                          perf[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING))
            continue;
        /* fp32 runs FMA only; no precision lets cuDNN down-convert fp32 data to fp16. */
        if (prec == GP_PRECISION_FP32 && perf[i].mathType != CUDNN_FMA_MATH) continue;
        if (perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
        if (perf[i].memory > st->conv_ws_cap) {
            bk->over_cap++;
            continue;
        }
        /* A candidate the descriptor or the workspace query rejects is skipped, not an error. */
        if (cudnnSetConvolutionMathType(bk->conv, perf[i].mathType) != CUDNN_STATUS_SUCCESS)
            continue;
        size_t ws = 0;
        if (cudnnGetConvolutionForwardWorkspaceSize(h, bk->x, cp->w, bk->conv, bk->y, perf[i].algo,
                                                    &ws) != CUDNN_STATUS_SUCCESS)
            continue;
        if (ws > st->conv_ws_cap) {
            bk->over_cap++;
            continue;
        }
        bk->cand_algo[bk->n_cand] = perf[i].algo;
        bk->cand_math[bk->n_cand] = perf[i].mathType;
        bk->cand_ws[bk->n_cand] = ws;
        bk->n_cand++;
    }
    if (bk->n_cand > 0) { /* the first, until timed; the workspace fits the largest */
        CK(c, cudnnSetConvolutionMathType(bk->conv, bk->cand_math[0]));
        bk->algo = bk->cand_algo[0];
        bk->ws = 0;
        for (int i = 0; i < bk->n_cand; i++)
            if (bk->cand_ws[i] > bk->ws) bk->ws = bk->cand_ws[i];
    } else {
        int rc = conv_standin(st, cp, bk, h, c);
        if (rc != GP_OK) return rc;
    }
    int ng = 0;
    if (defer) { /* the earlier op times them; conv_bind plans its choice if it is a plan */
        bk->deferred = 1;
    } else if (st->graph_ms < CONV_GRAPH_SLOT_MS) {
        uint64_t t0 = gp__now_ns();
        double left = CONV_GRAPH_SLOT_MS - st->graph_ms;
        ng = conv_graph(st, slot, sp, bk, h, n, -1,
                        left < CONV_GRAPH_CAP_MS ? left : CONV_GRAPH_CAP_MS);
        st->graph_ms += (double)(gp__now_ns() - t0) / 1e6;
    }
    for (int i = 0; i < ng; i++)
        if (gp__cgraph_ws(bk->g, i) > bk->ws) bk->ws = gp__cgraph_ws(bk->g, i);
    return GP_OK;
}

/* Whether an earlier conv2d of this slot made graph-API plans for the same key at bucket bi
   (it is bound first, so its memo is there when this op binds). */
static int conv_graph_earlier(const slot_state *st, const step *sp, int bi, size_t n) {
    int64_t key[CONV_KEY_LEN], k2[CONV_KEY_LEN];
    conv_key(st, sp, n, key);
    for (const step *e = st->steps; e < sp; e++) {
        const conv_plan *ep = e->op->kind == GP__OP_CONV2D ? e->plan : NULL;
        if (!ep || !ep->bk || !ep->bk[bi].g) continue;
        conv_key(st, e, n, k2);
        if (!memcmp(key, k2, sizeof key)) return 1;
    }
    return 0;
}

static void conv_release(step *sp, int n_buckets) {
    conv_plan *cp = sp->plan;
    if (!cp) return;
    /* Destroy statuses are not actionable in teardown. */
    if (cp->bk)
        for (int i = 0; i < n_buckets; i++) {
            conv_bucket *bk = &cp->bk[i];
            if (bk->conv) cudnnDestroyConvolutionDescriptor(bk->conv);
            if (bk->x) cudnnDestroyTensorDescriptor(bk->x);
            if (bk->y) cudnnDestroyTensorDescriptor(bk->y);
            gp__cgraph_free(bk->g);
        }
    free(cp->bk);
    if (cp->w) cudnnDestroyFilterDescriptor(cp->w);
    if (cp->bias) cudnnDestroyTensorDescriptor(cp->bias);
    if (cp->relu) cudnnDestroyActivationDescriptor(cp->relu);
    free(cp);
    sp->plan = NULL;
}

static int conv_plan_dnn(slot_state *st, step *sp, const gp_batch *slot, cudnnHandle_t h, ck *c) {
    const gp__op *op = sp->op;
    cudnnDataType_t dt = dnn_type(st->kt);
    conv_plan *cp = calloc(1, sizeof *cp);
    if (!cp) return CK_FAIL(c, GP_ENOMEM, "out of memory planning conv2d");
    sp->plan = cp;
    cp->bk = calloc((size_t)st->n_buckets, sizeof *cp->bk);
    if (!cp->bk) return CK_FAIL(c, GP_ENOMEM, "out of memory planning conv2d");
    /* The model's layout for x, y, the filter (conv_consts laid it out) and the bias. */
    const cudnnTensorFormat_t fmt = st->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CK(c, cudnnCreateFilterDescriptor(&cp->w));
    CK(c, cudnnSetFilter4dDescriptor(cp->w, dt, fmt, op->out.c, sp->chans / op->groups, op->kh,
                                     op->kw));
    if (op->act == GP__ACT_RELU) {
        CK(c, cudnnCreateTensorDescriptor(&cp->bias));
        CK(c, cudnnSetTensor4dDescriptor(cp->bias, fmt, dt, 1, op->out.c, 1, 1));
        CK(c, cudnnCreateActivationDescriptor(&cp->relu));
        CK(c,
           cudnnSetActivationDescriptor(cp->relu, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
    }
    size_t need = 0;
    for (int bi = 0; bi < st->n_buckets; bi++) {
        conv_bucket *bk = &cp->bk[bi];
        int N = (int)st->buckets[bi], rc;
        if ((rc = conv_desc(&bk->conv, op, c)) != GP_OK) return rc;
        CK(c, cudnnCreateTensorDescriptor(&bk->x));
        CK(c, cudnnSetTensor4dDescriptor(bk->x, fmt, dt, N, sp->chans, op->in.h, op->in.w));
        CK(c, cudnnCreateTensorDescriptor(&bk->y));
        CK(c, cudnnSetTensor4dDescriptor(bk->y, fmt, dt, N, op->out.c, op->out.h, op->out.w));
        int on, oc, oh, ow;
        CK(c, cudnnGetConvolution2dForwardOutputDim(bk->conv, bk->x, cp->w, &on, &oc, &oh, &ow));
        if (on != N || oc != op->out.c || oh != op->out.h || ow != op->out.w)
            return CK_FAIL(c, GP_ENOTSUP, "cuDNN computes a %dx%dx%d output, the model %dx%dx%d",
                           oc, oh, ow, op->out.c, op->out.h, op->out.w);
        int defer = conv_graph_earlier(st, sp, bi, (size_t)N);
        if ((rc = conv_pick(st, slot, sp, cp, bk, h, (size_t)N, defer, c)) != GP_OK) return rc;
        if (bk->ws > need) need = bk->ws;
    }
    if (need > st->conv_ws_bytes) st->conv_ws_bytes = need;
    return GP_OK;
}

/* The slot's workspace cap: set from the device's free memory by the first slot that plans a
   convolution there, then taken from the memo by every later slot (their memos' choices were
   made under it, and the free memory has shrunk by then). */
static int conv_cap(slot_state *st, ck *c) {
    static const char key[] = "conv2d workspace cap"; /* a length no conv_key has */
    int v[GP__MEMO_VALS] = {0};
    if (st->conv_ws_cap) return GP_OK;
    if (gp__memo_get(st, key, sizeof key, v) && v[0] > 0) {
        st->conv_ws_cap = (size_t)v[0] << 20;
        return GP_OK;
    }
    size_t free_b = 0, total = 0;
    CK(c, cudaMemGetInfo(&free_b, &total));
    st->conv_ws_cap = gp__conv_ws_cap(free_b);
    v[0] = (int)(st->conv_ws_cap >> 20);
    (void)gp__memo_put(st, key, sizeof key, v); /* not kept: the next slot reads its own */
    return GP_OK;
}

/* Before the buffers: the workspace sizes decide the slot's allocation. A convolution cuDNN
   cannot plan (cuDNN unavailable here, or a configuration its legacy API lacks) runs on the
   direct kernel; the reason goes to the slot's note, not to the model's errors. */
static int conv_plan_op(slot_state *st, step *sp, const gp_batch *slot, ck *c) {
    cudnnHandle_t h = gp_cuda_cudnn(slot);
    if (!h) {
        snprintf(st->note, sizeof st->note,
                 "cuDNN is unavailable (the pipeline's log says why): conv2d runs on the direct "
                 "kernel");
        return GP_OK;
    }
    char why[200] = ""; /* what cuDNN's planning failed on, if it did */
    ck probe = *c;
    probe.note = why;
    probe.note_len = sizeof why;
    int spent = st->graph_ms >= CONV_GRAPH_SLOT_MS;
    int rc = conv_cap(st, c);
    if (rc != GP_OK) return rc;
    rc = conv_plan_dnn(st, sp, slot, h, &probe);
    if (!spent && st->graph_ms >= CONV_GRAPH_SLOT_MS)
        gp__slot_info(slot,
                      "conv2d %s: the slot's %.0f ms of graph-API planning is spent (%.0f ms): "
                      "from here, buckets and convolutions time the legacy algorithms only",
                      sp->op->name, CONV_GRAPH_SLOT_MS, st->graph_ms);
    if (rc == GP_ENOMEM) return CK_FAIL(c, rc, "out of memory planning conv2d: %s", why);
    if (rc != GP_OK) { /* the model's setup passes the note on to stats */
        snprintf(st->note, sizeof st->note, "conv2d runs on the direct kernel (slow): %s", why);
        conv_release(sp, st->n_buckets);
    }
    return GP_OK;
}

static void *conv_ws(const slot_state *st, const gp_batch *b, size_t need) {
    if (need == 0) return NULL;
    if (st->conv_ws) return st->conv_ws;
    return gp_cuda_workspace(b, NULL); /* it is large enough: see the slot's allocation */
}

static cudnnStatus_t conv_fused(const slot_state *st, const step *sp, const gp_batch *b,
                                const conv_bucket *bk) {
    const conv_plan *cp = sp->plan;
    const float one = 1.0f, zero = 0.0f; /* float scaling for float / half / bf16 data */
    void *x = gp__resolve(sp->src, b), *y = gp__resolve(sp->dst, b);
    /* y = relu(conv(x) + alpha2 z + bias): z the folded residual (alpha2 1), or none: z = y
       with alpha2 0. */
    int res = gp__op_has_src2(sp->op);
    const void *z = res ? gp__resolve(sp->src2, b) : y;
    return cudnnConvolutionBiasActivationForward(gp_cuda_cudnn(b), &one, bk->x, x, cp->w, sp->k->w,
                                                 bk->conv, bk->algo, conv_ws(st, b, bk->ws), bk->ws,
                                                 res ? &one : &zero, bk->y, z, cp->bias,
                                                 sp->k->bias_t, cp->relu, bk->y, y);
}

/* One bucket's convolution as a batch runs it: fused, or cuDNN's then the bias/act kernel. A
   cuDNN status and a CUDA error come back apart (the caller decides what each means). */
/* The convolution alone, y = conv(x) on b's buffers: graph plan gi, or with gi < 0 the bucket's
   legacy algorithm (conv_set). */
static cudnnStatus_t conv_forward(const slot_state *st, const step *sp, const gp_batch *b,
                                  const conv_bucket *bk, int gi) {
    const conv_plan *cp = sp->plan;
    const float one = 1.0f, zero = 0.0f;
    if (gi >= 0) return gp__cgraph_run(bk->g, gp_cuda_cudnn(b), gi);
    return cudnnConvolutionForward(gp_cuda_cudnn(b), &one, bk->x, gp__resolve(sp->src, b), cp->w,
                                   sp->k->w, bk->conv, bk->algo, conv_ws(st, b, bk->ws), bk->ws,
                                   &zero, bk->y, gp__resolve(sp->dst, b));
}

static cudnnStatus_t conv_exec(const slot_state *st, const step *sp, const gp_batch *b,
                               const conv_bucket *bk, size_t n, cudaError_t *kerr) {
    const gp__op *op = sp->op;
    *kerr = cudaSuccess;
    if (bk->fused) return conv_fused(st, sp, b, bk);
    void *x = gp__resolve(sp->src, b), *y = gp__resolve(sp->dst, b);
    /* A graph plan's variant pack holds the slot's x, w, y and workspace (conv_bind); a batch on
       other buffers (a caller that wraps the compute) runs the legacy algorithm behind it. */
    cudnnStatus_t s =
        conv_forward(st, sp, b, bk, bk->graph >= 0 && x == bk->gx && y == bk->gy ? bk->graph : -1);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    int res = gp__op_has_src2(op); /* the activation then follows the residual add */
    *kerr = gp__k_bias_act(gp_cuda_stream(b), st->kt, y, sp->k->bias_f32, n, op->out.c,
                           (size_t)op->out.h * (size_t)op->out.w, res ? GP__ACT_NONE : (int)op->act,
                           st->nhwc);
    if (*kerr == cudaSuccess && res) *kerr = conv_residual(st, sp, b, n);
    return s;
}

/* Make candidate i the bucket's: a legacy algorithm (its math type on the descriptor), or past
   them the graph's plan i - n_cand, with the heuristic's first behind it (conv_exec: a batch on
   other buffers), never a candidate conv_verify may have passed over. */
static int conv_set(conv_bucket *bk, int i, ck *c) {
    if (i >= bk->n_cand && i - bk->n_cand < gp__cgraph_count(bk->g)) {
        bk->graph = i - bk->n_cand;
        bk->fused = 0;
        i = 0;
    } else {
        bk->graph = -1;
    }
    if (bk->n_cand == 0) return GP_OK; /* IMPLICIT_GEMM, set by conv_pick */
    CK(c, cudnnSetConvolutionMathType(bk->conv, bk->cand_math[i]));
    bk->algo = bk->cand_algo[i];
    return GP_OK;
}

/* Whether cuDNN fuses bias + relu with the bucket's algorithm: it rejects an unsupported fused
   configuration at the call (run here once, on the slot's buffers), and such a bucket runs
   unfused. Returns whether the call ran (a run of the fused form, or nothing). */
static int conv_try_fused(const slot_state *st, step *sp, const gp_batch *slot, conv_bucket *bk) {
    const conv_plan *cp = sp->plan;
    bk->fused = 0;
    if (!cp->relu || bk->graph >= 0) return 0;
    bk->fused = conv_fused(st, sp, slot, bk) == CUDNN_STATUS_SUCCESS;
    if (!bk->fused) (void)cudaGetLastError(); /* drop what a rejected call may have left */
    return bk->fused;
}

/* Time candidate i in one form (fused: cuDNN's conv + bias + relu; else the conv, then the
   bias/act kernel) as the bucket's batches will run it: one untimed run (for the fused form,
   the trial that says whether cuDNN accepts it), then CONV_TIMED_RUNS between ev[0] and ev[1]
   on the slot's stream. Sets *ms, or -1 when the pair does not run (it is passed over). */
static int conv_time(const slot_state *st, step *sp, const gp_batch *slot, conv_bucket *bk, int i,
                     int fused, size_t n, cudaEvent_t ev[2], float *ms, ck *c) {
    cudaStream_t s = gp_cuda_stream(slot);
    cudaError_t kerr = cudaSuccess;
    cudnnStatus_t ds = CUDNN_STATUS_SUCCESS;
    int rc;
    *ms = -1.0f;
    if ((rc = conv_set(bk, i, c)) != GP_OK) return rc;
    if (fused && bk->graph >= 0) return GP_OK; /* a graph plan runs unfused only */
    if (fused) {
        if (!conv_try_fused(st, sp, slot, bk)) return GP_OK; /* rejected: no fused form */
    } else {
        bk->fused = 0;
        ds = conv_exec(st, sp, slot, bk, n, &kerr);
    }
    CK(c, cudaEventRecord(ev[0], s));
    for (int r = 0; r < CONV_TIMED_RUNS && ds == CUDNN_STATUS_SUCCESS && kerr == cudaSuccess; r++)
        ds = conv_exec(st, sp, slot, bk, n, &kerr);
    CK(c, cudaEventRecord(ev[1], s));
    CK(c, cudaEventSynchronize(ev[1]));
    if (ds != CUDNN_STATUS_SUCCESS || kerr != cudaSuccess) {
        (void)cudaGetLastError(); /* this candidate's failure: passed over */
        if (bk->graph >= 0 && ds != CUDNN_STATUS_SUCCESS)
            gp__slot_info(slot, "conv2d %s: batch %zu: graph engine %lld did not run: %s",
                          sp->op->name, n, gp__cgraph_engine(bk->g, bk->graph),
                          cudnnGetErrorString(ds));
        return GP_OK;
    }
    CK(c, cudaEventElapsedTime(ms, ev[0], ev[1]));
    return GP_OK;
}

static const char *algo_name(cudnnConvolutionFwdAlgo_t a) {
    static const char *const names[] = {
        "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
        "WINOGRAD",      "WINOGRAD_NONFUSED"};
    return (unsigned)a < sizeof names / sizeof *names ? names[a] : "?";
}

static const char *math_name(cudnnMathType_t m) {
    return m == CUDNN_TENSOR_OP_MATH ? "tensor-op"
           : m == CUDNN_FMA_MATH     ? "fma"
           : m == CUDNN_DEFAULT_MATH ? "default math"
                                     : "?";
}

/* Candidate i's name for the log: "ALGO math" (legacy) or "graph engine N". */
static void cand_name(const conv_bucket *bk, int i, char *buf, size_t len) {
    if (i >= bk->n_cand && i - bk->n_cand < gp__cgraph_count(bk->g))
        snprintf(buf, len, "graph engine %lld", gp__cgraph_engine(bk->g, i - bk->n_cand));
    else if (bk->n_cand == 0) /* conv_pick's stand-in, in the layer's math */
        snprintf(buf, len, "%s", algo_name(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM));
    else
        snprintf(buf, len, "%s %s", algo_name(bk->cand_algo[i]), math_name(bk->cand_math[i]));
}

/* The pipeline's INFO line for a timed bucket: what stays, its time per run, and the
   heuristic's first pick's (what an untimed rule would have run). */
static void conv_log(const slot_state *st, const step *sp, const gp_batch *slot,
                     const conv_bucket *bk, size_t n, int best, int fused, float best_ms,
                     float first_ms, int ran, int tried) {
    const gp__op *op = sp->op;
    char over[96] = ""; /* what the cap left out, so a reader sees what a larger one would add */
    char pad[16] = "";  /* the stem pad's added input channels */
    if (sp->chans > op->in.c) snprintf(pad, sizeof pad, "(+%d)", sp->chans - op->in.c);
    if (bk->over_cap)
        snprintf(over, sizeof over, "; %d more over the %zu MiB workspace cap", bk->over_cap,
                 st->conv_ws_cap >> 20);
    if (best_ms < 0) {
        gp__slot_info(slot,
                      "conv2d %s: batch %zu: none of %d algorithm/form pairs ran at setup%s; "
                      "batches run the heuristic's first",
                      op->name, n, tried, over);
        return;
    }
    char name[64], first[64], tail[96];
    cand_name(bk, best, name, sizeof name);
    cand_name(bk, 0, first, sizeof first);
    if (first_ms >= 0)
        snprintf(tail, sizeof tail, "%.3f ms", (double)(first_ms / CONV_TIMED_RUNS));
    else
        snprintf(tail, sizeof tail, "did not run");
    gp__slot_info(slot,
                  "conv2d %s (%d%sx%dx%d -> %dx%dx%d, %dx%d/%d): batch %zu: %s %s, %.3f ms per "
                  "run (%d of %d algorithm/form pairs ran, %d of them graph-API plans%s; the "
                  "heuristic's first, %s: %s)",
                  op->name, op->in.c, pad, op->in.h, op->in.w, op->out.c, op->out.h, op->out.w,
                  op->kh, op->kw, op->stride_h, n, name, fused ? "fused" : "unfused",
                  (double)(best_ms / CONV_TIMED_RUNS), ran, tried, gp__cgraph_count(bk->g), over,
                  first, tail);
}

/* How far a precision's convolution may be from the direct kernel's, relative to the largest
   magnitude of the direct kernel's output: fp32 sums in another order; tf32 and 16-bit add
   their input or output rounding. */
static double conv_tol(gp_precision p) {
    return p == GP_PRECISION_FP32 ? 1e-4 : p == GP_PRECISION_BF16 ? 3e-2 : 1e-2;
}

/* The first and last item's values of a buffer holding n items of `el` elements (0 and n-1),
   to host floats out[2 * el], on the slot's stream (synchronized). */
static int conv_fetch(const slot_state *st, cudaStream_t s, const unsigned char *dev, size_t n,
                      size_t el, unsigned char *tmp, float *out, ck *c) {
    size_t es = gp__kt_size(st->kt);
    CK(c, cudaMemcpyAsync(tmp, dev, el * es, cudaMemcpyDeviceToHost, s));
    CK(c,
       cudaMemcpyAsync(tmp + el * es, dev + (n - 1) * el * es, el * es, cudaMemcpyDeviceToHost, s));
    CK(c, cudaStreamSynchronize(s));
    for (size_t i = 0; i < 2 * el; i++) {
        if (st->kt == GP__KT_F32) {
            memcpy(&out[i], tmp + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, tmp + 2 * i, 2);
            if (st->kt == GP__KT_F16) {
                out[i] = gp__f16_to_f32(h);
            } else {
                uint32_t u = (uint32_t)h << 16;
                memcpy(&out[i], &u, 4);
            }
        }
    }
    return GP_OK;
}

/* CK, for a function that must free before it returns: rc set, then to `label`. */
#define CK_GOTO(c, rc, label, call)                                                                \
    do {                                                                                           \
        gp__cu_status ck_st_ = GP__CU_STATUS(call);                                                \
        if (ck_st_.code) {                                                                         \
            (rc) = gp__ck_status((c), ck_st_, #call, __FILE__, __LINE__);                          \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* A patterned first and last item (0 and n-1) of a buffer of n items of `el` elements: values
   in [-1, 1) from a fixed LCG seeded with `seed`, through tmp (2 * el elements), on the slot's
   stream. */
static int conv_pattern(const slot_state *st, cudaStream_t s, unsigned char *dev, size_t n,
                        size_t el, uint64_t seed, unsigned char *tmp, ck *c) {
    const size_t es = gp__kt_size(st->kt);
    for (size_t i = 0; i < 2 * el; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)((double)(seed >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
        if (st->kt == GP__KT_F32) {
            memcpy(tmp + 4 * i, &v, 4);
        } else {
            uint16_t h = st->kt == GP__KT_F16 ? gp__f32_to_f16(v) : gp__f32_to_bf16(v);
            memcpy(tmp + 2 * i, &h, 2);
        }
    }
    CK(c, cudaMemcpyAsync(dev, tmp, el * es, cudaMemcpyHostToDevice, s));
    CK(c,
       cudaMemcpyAsync(dev + (n - 1) * el * es, tmp + el * es, el * es, cudaMemcpyHostToDevice, s));
    /* tmp is reused at once: the copies from pageable memory have read it when they return,
       but a pinned tmp would not be, so wait */
    CK(c, cudaStreamSynchronize(s));
    return GP_OK;
}

/* Before a candidate other than the heuristic's first legacy algorithm unfused may run the
   bucket's batches (a graph-API plan gi; with gi < 0 the legacy algorithm conv_set made the
   bucket's: FFT and Winograd trade accuracy for speed; or, with `fused`, cuDNN's fused conv +
   bias + relu (+ the folded residual z) of that algorithm, whose operands' handling, NHWC
   included, is cuDNN's own): what it computes from a patterned first and last item (and z)
   against the direct kernel's (kernels/act.cu, exact sums) followed as conv_run_direct does,
   one item at a time. *diff: the largest difference over the direct output's largest magnitude
   (infinite when the candidate does not run). The slot's buffers are scratch at setup (timing
   overwrites them too); a conv2d's y is never its x or z (model.c's buffers). */
static int conv_verify(const slot_state *st, const step *sp, const gp_batch *slot, conv_bucket *bk,
                       int gi, int fused, size_t n, double *diff, ck *c) {
    const gp__op *op = sp->op;
    cudaStream_t s = gp_cuda_stream(slot);
    const size_t es = gp__kt_size(st->kt), hw = (size_t)op->out.h * (size_t)op->out.w;
    const size_t in_el = (size_t)sp->chans * op->in.h * op->in.w, out_el = (size_t)op->out.c * hw;
    unsigned char *x = gp__resolve(sp->src, slot), *y = gp__resolve(sp->dst, slot);
    const int res = fused && gp__op_has_src2(op); /* the fused call adds z (unfused: checked
                                                     without it, the add being our kernel) */
    unsigned char *z = res ? gp__resolve(sp->src2, slot) : NULL;
    size_t tmp_bytes = (in_el > out_el ? in_el : out_el) * 2 * es;
    unsigned char *tmp = malloc(tmp_bytes);
    float *want = malloc(2 * out_el * sizeof *want), *got = malloc(2 * out_el * sizeof *got);
    int rc = GP_OK;
    *diff = INFINITY;
    if (!tmp || !want || !got) {
        rc = CK_FAIL(c, GP_ENOMEM,
                     "out of memory checking conv2d %s's candidate against the direct kernel",
                     op->name);
        goto out;
    }
    if ((rc = conv_pattern(st, s, x, n, in_el, 0x636f6e76ull, tmp, c)) != GP_OK) goto out;
    if (z && z != x && (rc = conv_pattern(st, s, z, n, out_el, 0x7a7a7a7aull, tmp, c)) != GP_OK)
        goto out;
    for (int k = 0; k < 2; k++) { /* item 0, then item n-1 (the same item when n is 1) */
        size_t at = k ? n - 1 : 0;
        CK_GOTO(c, rc, out,
                gp__k_conv2d_direct(
                    s, st->kt, x + at * in_el * es, sp->k->w, sp->k->bias_f32, y + at * out_el * es,
                    1, sp->chans, op->in.h, op->in.w, op->out.c, op->out.h, op->out.w, op->kh,
                    op->kw, op->stride_h, op->stride_w, op->pad_h, op->pad_w, op->dil_h, op->dil_w,
                    op->groups, fused && !res ? (int)op->act : GP__ACT_NONE, st->nhwc));
    }
    if (res) CK_GOTO(c, rc, out, conv_residual(st, sp, slot, n)); /* y = act(y + z) */
    if ((rc = conv_fetch(st, s, y, n, out_el, tmp, want, c)) != GP_OK) goto out;
    cudnnStatus_t ds = fused ? conv_fused(st, sp, slot, bk) : conv_forward(st, sp, slot, bk, gi);
    if (ds != CUDNN_STATUS_SUCCESS) {
        (void)cudaGetLastError(); /* what a refused call may have left: passed over */
        gp__slot_info(slot, "conv2d %s: batch %zu: %s%s did not run for the check: %s", op->name, n,
                      gi >= 0 ? "a graph-API plan" : algo_name(bk->algo), fused ? " fused" : "",
                      cudnnGetErrorString(ds));
        goto out;
    }
    if (!fused)
        CK_GOTO(c, rc, out,
                gp__k_bias_act(s, st->kt, y, sp->k->bias_f32, n, op->out.c, hw, GP__ACT_NONE,
                               st->nhwc));
    if ((rc = conv_fetch(st, s, y, n, out_el, tmp, got, c)) != GP_OK) goto out;
    double d = 0.0, mag = 0.0;
    for (size_t i = 0; i < 2 * out_el; i++) {
        double r = want[i], g = got[i], e = fabs(r - g);
        if (!(e <= d)) d = e; /* a NaN counts as the largest */
        if (fabs(r) > mag) mag = fabs(r);
    }
    *diff = d / (mag > 0.0 ? mag : 1.0);
out:
    free(tmp);
    free(want);
    free(got);
    return rc;
}

/* The bucket's graph plans as bind needs them. A deferred bucket (conv_pick) plans the earlier
   op's choice when the memo says it is a plan: this op's own copy of it, whose workspace the
   slot already covers (that op's plans sized it). Then the variant pack for the slot's buffers.
   Anything that fails leaves the bucket without plans (its legacy candidates stand). */
static void conv_bind_graph(const slot_state *st, const step *sp, const gp_batch *slot,
                            conv_bucket *bk, size_t n, const int *memo) {
    char why[512];
    if (bk->deferred && !bk->g && memo && memo[0] == CONV_MEMO_GRAPH) {
        if (conv_graph(st, slot, sp, bk, gp_cuda_cudnn(slot), n, memo[1], CONV_GRAPH_CAP_MS) == 1 &&
            gp__cgraph_engine(bk->g, 0) == (long long)memo[2] &&
            gp__cgraph_ws(bk->g, 0) <= st->conv_ws_bytes) {
            if (gp__cgraph_ws(bk->g, 0) > bk->ws) bk->ws = gp__cgraph_ws(bk->g, 0);
            gp__slot_info(slot,
                          "conv2d %s: batch %zu: graph engine %lld, as an earlier convolution of "
                          "the same shape chose",
                          sp->op->name, n, gp__cgraph_engine(bk->g, 0));
        } else {
            gp__cgraph_free(bk->g);
            bk->g = NULL;
        }
    }
    bk->gx = gp__resolve(sp->src, slot);
    bk->gy = gp__resolve(sp->dst, slot);
    if (bk->g && gp__cgraph_bind(bk->g, bk->gx, sp->k->w, bk->gy, conv_ws(st, slot, bk->ws), why,
                                 sizeof why) != 0) {
        gp__slot_info(slot, "conv2d %s: batch %zu: no graph-API plans: %s", sp->op->name, n, why);
        gp__cgraph_free(bk->g);
        bk->g = NULL;
    }
}

/* The candidate a memo names among the bucket's (a legacy algorithm and math type, or a plan's
   position and engine), or -1. */
static int conv_memo_hit(const conv_bucket *bk, const int memo[GP__MEMO_VALS]) {
    if (memo[0] != CONV_MEMO_GRAPH) {
        for (int i = 0; i < bk->n_cand; i++)
            if ((int)bk->cand_algo[i] == memo[0] && (int)bk->cand_math[i] == memo[1]) return i;
        return -1;
    }
    for (int j = 0; j < gp__cgraph_count(bk->g); j++)
        if (gp__cgraph_pos(bk->g, j) == memo[1] &&
            gp__cgraph_engine(bk->g, j) == (long long)memo[2])
            return bk->n_cand + j;
    return -1;
}

/* Time every candidate in each form (a plan unfused only) between ev[0] and ev[1], and choose
   the fastest; any but the heuristic's first unfused only after conv_verify, else the next
   fastest (a fused form that fails leaves its algorithm's unfused form standing). Logs
   the bucket's INFO line and keeps the choice in the memo under `key`. *best, *best_fused: the
   choice (the heuristic's first legacy algorithm, or the stand-in, when nothing ran). */
static int conv_choose(slot_state *st, step *sp, const gp_batch *slot, conv_bucket *bk, size_t n,
                       const int64_t key[CONV_KEY_LEN], cudaEvent_t ev[2], int *best,
                       int *best_fused, int *none, ck *c) {
    const conv_plan *cp = sp->plan;
    const int forms = cp->relu ? 2 : 1, ng = gp__cgraph_count(bk->g);
    const int n_all = bk->n_cand + ng > 0 ? bk->n_cand + ng : 1; /* 1: the stand-in */
    float ms_of[CONV_MAX_CAND + GP__CGRAPH_MAX][2];
    float best_ms = -1.0f, first_ms = -1.0f; /* first: the heuristic's first, any form */
    int ran = 0, tried = 0, rc = GP_OK;
    for (int i = 0; i < n_all && rc == GP_OK; i++)
        for (int f = 0; f < forms && rc == GP_OK; f++) {
            ms_of[i][f] = -1.0f;
            if (f && i >= bk->n_cand && ng > 0) continue; /* a plan has no fused form */
            tried++;
            rc = conv_time(st, sp, slot, bk, i, f, n, ev, &ms_of[i][f], c);
            if (rc == GP_OK && ms_of[i][f] >= 0) ran++;
        }
    for (;;) { /* the fastest; any but the heuristic's first unfused must agree with the direct
                  kernel */
        best_ms = -1.0f;
        for (int i = 0; i < n_all && rc == GP_OK; i++)
            for (int f = 0; f < forms; f++)
                if (ms_of[i][f] >= 0 && (best_ms < 0 || ms_of[i][f] < best_ms))
                    best_ms = ms_of[i][f], *best = i, *best_fused = f;
        /* Trusted: the heuristic's first legacy algorithm unfused, or the stand-in (index 0
           when there is nothing else). A legacy algorithm is checked as the bucket's
           (conv_set), in the form it won in. */
        const int graph = *best >= bk->n_cand && *best < bk->n_cand + ng;
        if (rc != GP_OK || best_ms < 0 || (!graph && *best == 0 && !*best_fused)) break;
        double diff;
        if ((!graph && (rc = conv_set(bk, *best, c)) != GP_OK) ||
            (rc = conv_verify(st, sp, slot, bk, graph ? *best - bk->n_cand : -1, *best_fused, n,
                              &diff, c)) != GP_OK ||
            diff <= conv_tol(st->m->precision))
            break;
        char name[64];
        cand_name(bk, *best, name, sizeof name);
        gp__slot_info(slot,
                      "conv2d %s: batch %zu: %s%s, the fastest (%.3f ms per run), differs from "
                      "the direct kernel by %.3g of the output's magnitude (limit %.0e): passed "
                      "over",
                      sp->op->name, n, name, *best_fused ? " fused" : "",
                      (double)(best_ms / CONV_TIMED_RUNS), diff, conv_tol(st->m->precision));
        ms_of[*best][1] = -1.0f; /* the fused form; a wrong convolution in either form */
        if (!*best_fused) ms_of[*best][0] = -1.0f;
    }
    if (rc != GP_OK) return rc;
    for (int f = 0; f < forms; f++)
        if (ms_of[0][f] >= 0 && (first_ms < 0 || ms_of[0][f] < first_ms)) first_ms = ms_of[0][f];
    *none = best_ms < 0; /* nothing cuDNN offers ran (conv_bind: the direct kernel) */
    if (best_ms < 0) {
        *best = bk->n_cand > 0 ? 0 : bk->n_cand + ng;
        *best_fused = cp->relu != NULL && bk->n_cand > 0;
    }
    conv_log(st, sp, slot, bk, n, *best, *best_fused, best_ms, first_ms, ran, tried);
    if (best_ms < 0 || (bk->n_cand == 0 && ng == 0)) return GP_OK; /* nothing to keep */
    int memo[GP__MEMO_VALS];
    if (*best >= bk->n_cand) {
        memo[0] = CONV_MEMO_GRAPH;
        memo[1] = gp__cgraph_pos(bk->g, *best - bk->n_cand);
        memo[2] = (int)gp__cgraph_engine(bk->g, *best - bk->n_cand);
    } else {
        memo[0] = (int)bk->cand_algo[*best];
        memo[1] = (int)bk->cand_math[*best];
        memo[2] = *best_fused;
    }
    (void)gp__memo_put(st, key, sizeof(int64_t) * CONV_KEY_LEN, memo); /* not kept: timed again */
    return GP_OK;
}

/* After the buffers. Per bucket, every candidate runs in each form as its batches would, and
   the fastest pair stays (conv_choose: cudnn.benchmark's method, on the slot's buffers, which
   setup zeroed). The choice is kept with the model's weights on the device, per geometry and
   bucket size (gp__memo_*, conv_key): a later op of the same geometry takes it here, a later
   slot's conv_pick makes it the only candidate, so a device pays the timing once per distinct
   convolution and bucket, in the first slot of the first pipeline. Plans not chosen are freed. */
static int conv_bind(slot_state *st, step *sp, const gp_batch *slot, ck *c) {
    conv_plan *cp = sp->plan;
    if (!cp) return GP_OK;
    cudaEvent_t ev[2] = {NULL, NULL};
    int rc = GP_OK, forms = cp->relu ? 2 : 1, none = 0;
    size_t none_n = 0;
    for (int bi = 0; bi < st->n_buckets && rc == GP_OK && !none; bi++) {
        conv_bucket *bk = &cp->bk[bi];
        size_t n = st->buckets[bi];
        int64_t key[CONV_KEY_LEN];
        int memo[GP__MEMO_VALS], has_memo;
        conv_key(st, sp, n, key);
        has_memo = gp__memo_get(st, key, sizeof key, memo);
        conv_bind_graph(st, sp, slot, bk, n, has_memo ? memo : NULL);
        int ng = gp__cgraph_count(bk->g), n_all = bk->n_cand + ng > 0 ? bk->n_cand + ng : 1;
        /* Timed already: by an earlier slot (conv_pick made its choice the only candidate) or by
           an op of the same geometry before this one in this slot. */
        int hit = has_memo ? conv_memo_hit(bk, memo) : -1;
        /* Untimed (one candidate, one form: no relu to fuse): unfused. A fused form runs only
           once conv_verify passed it (a memo's fused choice was verified by the slot that
           timed it; docs/DESIGN.md §6). */
        int best = 0, best_fused = 0;
        if (hit >= 0) {
            best = hit;
            best_fused = hit < bk->n_cand ? memo[2] : 0;
            if (hit >= bk->n_cand) { /* an earlier slot's plan: run once here before batches */
                cudnnStatus_t ds = conv_forward(st, sp, slot, bk, hit - bk->n_cand);
                cudaError_t e = cudaSuccess;
                if (ds == CUDNN_STATUS_SUCCESS) e = cudaStreamSynchronize(gp_cuda_stream(slot));
                if (e != cudaSuccess) {
                    rc = gp__ck_status(c, gp__cu_rt(e), "cudaStreamSynchronize(a graph plan's run)",
                                       __FILE__, __LINE__);
                    break;
                }
                if (ds != CUDNN_STATUS_SUCCESS) {
                    (void)cudaGetLastError(); /* what a refused call may have left */
                    best = bk->n_cand > 0 ? 0 : bk->n_cand + ng; /* the stand-in: n_cand 0 */
                    /* The heuristic's first legacy algorithm, unfused: the one form trusted
                       unchecked (a fused form here would run unverified). */
                    best_fused = 0;
                    char name[64];
                    cand_name(bk, best, name, sizeof name);
                    gp__slot_info(slot,
                                  "conv2d %s: batch %zu: graph engine %lld, chosen earlier, did "
                                  "not run on this slot (%s): %s instead",
                                  sp->op->name, n, gp__cgraph_engine(bk->g, hit - bk->n_cand),
                                  cudnnGetErrorString(ds), name);
                }
            }
        } else if (n_all * forms > 1 || ng > 0) { /* a graph plan is never chosen untried */
            if (!ev[0]) {
                cudaError_t e = cudaEventCreate(&ev[0]);
                if (e == cudaSuccess && (e = cudaEventCreate(&ev[1])) != cudaSuccess) ev[1] = NULL;
                if (e != cudaSuccess) {
                    rc = gp__ck_status(c, gp__cu_rt(e), "cudaEventCreate(conv timing)", __FILE__,
                                       __LINE__);
                    break;
                }
            }
            if ((rc = conv_choose(st, sp, slot, bk, n, key, ev, &best, &best_fused, &none, c)) !=
                GP_OK)
                break;
            if (none) { /* every batch of this size would fail: the op goes to the direct kernel */
                none_n = n;
                break;
            }
        }
        if ((rc = conv_set(bk, best, c)) == GP_OK) {
            if (best_fused && bk->graph < 0)
                (void)conv_try_fused(st, sp, slot, bk); /* rejected: runs unfused */
            else
                bk->fused = 0;
        }
        /* Only the plan that runs stays (it becomes plan 0). */
        if (bk->graph >= 0) {
            gp__cgraph_keep(bk->g, bk->graph);
            bk->graph = 0;
        } else if (bk->g) {
            gp__cgraph_free(bk->g);
            bk->g = NULL;
        }
    }
    /* Destroy statuses are not actionable here. */
    if (ev[0]) cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    if (rc == GP_OK && none) { /* correct and slow, and said in the stats, rather than failed */
        snprintf(st->note, sizeof st->note,
                 "conv2d %s runs on the direct kernel (slow): none of cuDNN's algorithms for it "
                 "ran at batch %zu (conv2d's INFO lines say which were tried)",
                 sp->op->name, none_n);
        gp__slot_info(slot, "%s", st->note);
        conv_release(sp, st->n_buckets);
    }
    return rc;
}

static int conv_run(slot_state *st, const step *sp, const gp_batch *b, int bi, ck *c) {
    const conv_plan *cp = sp->plan;
    if (!cp) return conv_run_direct(st, sp, b, c);
    cudaError_t kerr;
    cudnnStatus_t s = conv_exec(st, sp, b, &cp->bk[bi], b->n, &kerr);
    if (s != CUDNN_STATUS_SUCCESS)
        return gp__ck_status(c, gp__cu_dnn(s),
                             cp->bk[bi].graph >= 0 ? "cudnnBackendExecute"
                             : cp->bk[bi].fused    ? "cudnnConvolutionBiasActivationForward"
                                                   : "cudnnConvolutionForward",
                             __FILE__, __LINE__);
    if (kerr != cudaSuccess)
        return gp__ck_status(c, gp__cu_rt(kerr), "the conv's bias/residual kernel", __FILE__,
                             __LINE__);
    return GP_OK;
}

const cuda_layer GP__CUDA_LAYER(CONV2D) = {
    .consts = conv_consts,
    .plan = conv_plan_op,
    .bind = conv_bind,
    .run = conv_run,
    .release = conv_release,
};
#else
static int conv_plan_op(slot_state *st, step *sp, const gp_batch *slot, ck *c) {
    (void)sp, (void)slot, (void)c;
    snprintf(st->note, sizeof st->note,
             "conv2d runs on the direct kernel (slow): gpupipe was built without cuDNN");
    return GP_OK;
}

static int conv_run(slot_state *st, const step *sp, const gp_batch *b, int bi, ck *c) {
    (void)bi;
    return conv_run_direct(st, sp, b, c);
}

const cuda_layer GP__CUDA_LAYER(CONV2D) = {
    .consts = conv_consts, .plan = conv_plan_op, .run = conv_run};
#endif
