/*
 * CONV2D (layers.h): on cuDNN when the build has it and cuDNN can plan the op (per bucket: tensor
 * descriptors, the heuristic's algorithm and its workspace; the fused conv + bias + relu where
 * cuDNN accepts it), otherwise on the direct kernel (kernels/act.cu), which is exact but slow;
 * the reason then goes to the slot's note, which the model's setup passes on to the pipeline's
 * stats.backend_note (handles.h, note).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupipe/cuda.h"

#include "layers.h"

/* The most a convolution may ask for as workspace; algorithms wanting more are skipped. */
#define CONV_WS_MAX ((size_t)256 << 20)

/* The direct kernel: builds without cuDNN, and convolutions cuDNN could not plan. */
static int conv_run_direct(slot_state *st, const step *sp, const gp_batch *b, ck *c) {
    const gp__op *op = sp->op;
    CK(c, gp__k_conv2d_direct(gp_cuda_stream(b), st->kt, gp__resolve(sp->src, b), sp->k->w,
                              sp->k->bias_f32, gp__resolve(sp->dst, b), b->n, op->in.c, op->in.h,
                              op->in.w, op->out.c, op->out.h, op->out.w, op->kh, op->kw,
                              op->stride_h, op->stride_w, op->pad_h, op->pad_w, op->dil_h,
                              op->dil_w, op->groups, (int)op->act));
    return GP_OK;
}

#ifdef GP_HAVE_CUDNN
typedef struct conv_bucket {
    cudnnConvolutionDescriptor_t conv; /* per bucket: the math type follows the algorithm */
    cudnnTensorDescriptor_t x, y;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
    int fused; /* cudnnConvolutionBiasActivationForward accepted this bucket */
} conv_bucket;

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

/* Pick the bucket's algorithm: the heuristic's first (fastest estimate) that succeeded, fits
   CONV_WS_MAX and, for fp32, uses FMA math only. The descriptor takes that result's math
   type (cuDNN needs algorithm and math type together). IMPLICIT_GEMM stands in when the
   heuristic offers nothing usable. */
static int conv_pick(slot_state *st, conv_plan *cp, conv_bucket *bk, cudnnHandle_t h, ck *c) {
    gp_precision prec = st->m->precision;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0;
    memset(perf, 0, sizeof perf);
    CK(c, cudnnGetConvolutionForwardAlgorithm_v7(h, bk->x, cp->w, bk->conv, bk->y,
                                                 CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
    for (int i = 0; i < got; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > CONV_WS_MAX) continue;
        /* fp32 runs FMA only; no precision lets cuDNN down-convert fp32 data to fp16. */
        if (prec == GP_PRECISION_FP32 && perf[i].mathType != CUDNN_FMA_MATH) continue;
        if (perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
        /* A candidate the descriptor or the workspace query rejects is skipped, not an error. */
        if (cudnnSetConvolutionMathType(bk->conv, perf[i].mathType) != CUDNN_STATUS_SUCCESS)
            continue;
        size_t ws = 0;
        if (cudnnGetConvolutionForwardWorkspaceSize(h, bk->x, cp->w, bk->conv, bk->y, perf[i].algo,
                                                    &ws) != CUDNN_STATUS_SUCCESS ||
            ws > CONV_WS_MAX)
            continue;
        bk->algo = perf[i].algo;
        bk->ws = ws;
        return GP_OK;
    }
    CK(c, cudnnSetConvolutionMathType(bk->conv, dnn_math(prec)));
    bk->algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    CK(c, cudnnGetConvolutionForwardWorkspaceSize(h, bk->x, cp->w, bk->conv, bk->y, bk->algo,
                                                  &bk->ws));
    if (bk->ws > CONV_WS_MAX)
        return CK_FAIL(c, GP_ENOTSUP, "cuDNN offers no convolution algorithm within %zu bytes",
                       CONV_WS_MAX);
    return GP_OK;
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
        }
    free(cp->bk);
    if (cp->w) cudnnDestroyFilterDescriptor(cp->w);
    if (cp->bias) cudnnDestroyTensorDescriptor(cp->bias);
    if (cp->relu) cudnnDestroyActivationDescriptor(cp->relu);
    free(cp);
    sp->plan = NULL;
}

static int conv_plan_dnn(slot_state *st, step *sp, cudnnHandle_t h, ck *c) {
    const gp__op *op = sp->op;
    cudnnDataType_t dt = dnn_type(st->kt);
    conv_plan *cp = calloc(1, sizeof *cp);
    if (!cp) return CK_FAIL(c, GP_ENOMEM, "out of memory planning conv2d");
    sp->plan = cp;
    cp->bk = calloc((size_t)st->n_buckets, sizeof *cp->bk);
    if (!cp->bk) return CK_FAIL(c, GP_ENOMEM, "out of memory planning conv2d");
    CK(c, cudnnCreateFilterDescriptor(&cp->w));
    CK(c, cudnnSetFilter4dDescriptor(cp->w, dt, CUDNN_TENSOR_NCHW, op->out.c, op->in.c / op->groups,
                                     op->kh, op->kw));
    if (op->act == GP__ACT_RELU) {
        CK(c, cudnnCreateTensorDescriptor(&cp->bias));
        CK(c, cudnnSetTensor4dDescriptor(cp->bias, CUDNN_TENSOR_NCHW, dt, 1, op->out.c, 1, 1));
        CK(c, cudnnCreateActivationDescriptor(&cp->relu));
        CK(c,
           cudnnSetActivationDescriptor(cp->relu, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
    }
    size_t need = 0;
    for (int bi = 0; bi < st->n_buckets; bi++) {
        conv_bucket *bk = &cp->bk[bi];
        int N = (int)st->buckets[bi], rc;
        if ((rc = conv_desc(&bk->conv, op, c)) != GP_OK) return rc;
        CK(c, cudnnSetConvolutionMathType(bk->conv, dnn_math(st->m->precision)));
        CK(c, cudnnCreateTensorDescriptor(&bk->x));
        CK(c, cudnnSetTensor4dDescriptor(bk->x, CUDNN_TENSOR_NCHW, dt, N, op->in.c, op->in.h,
                                         op->in.w));
        CK(c, cudnnCreateTensorDescriptor(&bk->y));
        CK(c, cudnnSetTensor4dDescriptor(bk->y, CUDNN_TENSOR_NCHW, dt, N, op->out.c, op->out.h,
                                         op->out.w));
        int on, oc, oh, ow;
        CK(c, cudnnGetConvolution2dForwardOutputDim(bk->conv, bk->x, cp->w, &on, &oc, &oh, &ow));
        if (on != N || oc != op->out.c || oh != op->out.h || ow != op->out.w)
            return CK_FAIL(c, GP_ENOTSUP, "cuDNN computes a %dx%dx%d output, the model %dx%dx%d",
                           oc, oh, ow, op->out.c, op->out.h, op->out.w);
        if ((rc = conv_pick(st, cp, bk, h, c)) != GP_OK) return rc;
        if (bk->ws > need) need = bk->ws;
    }
    if (need > st->conv_ws_bytes) st->conv_ws_bytes = need;
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
    int rc = conv_plan_dnn(st, sp, h, &probe);
    if (rc == GP_ENOMEM) return CK_FAIL(c, rc, "out of memory planning conv2d");
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
    /* y = relu(conv(x) + 0 * z + bias), with z = y (alpha2 is 0). */
    return cudnnConvolutionBiasActivationForward(gp_cuda_cudnn(b), &one, bk->x, x, cp->w, sp->k->w,
                                                 bk->conv, bk->algo, conv_ws(st, b, bk->ws), bk->ws,
                                                 &zero, bk->y, y, cp->bias, sp->k->bias_t, cp->relu,
                                                 bk->y, y);
}

/* After the buffers: try the fused call once per bucket (on zeroed buffers): cuDNN rejects
   unsupported fused configurations at the call, and those buckets then run unfused. */
static int conv_bind(slot_state *st, step *sp, const gp_batch *slot, ck *c) {
    conv_plan *cp = sp->plan;
    if (!cp || !cp->relu) return GP_OK;
    for (int bi = 0; bi < st->n_buckets; bi++) {
        conv_bucket *bk = &cp->bk[bi];
        bk->fused = conv_fused(st, sp, slot, bk) == CUDNN_STATUS_SUCCESS;
        if (!bk->fused) (void)cudaGetLastError(); /* drop what a rejected call may have left */
    }
    return GP_OK;
}

static int conv_run(slot_state *st, const step *sp, const gp_batch *b, int bi, ck *c) {
    const conv_plan *cp = sp->plan;
    if (!cp) return conv_run_direct(st, sp, b, c);
    const conv_bucket *bk = &cp->bk[bi];
    const gp__op *op = sp->op;
    if (bk->fused) {
        CK(c, conv_fused(st, sp, b, bk));
        return GP_OK;
    }
    const float one = 1.0f, zero = 0.0f;
    void *x = gp__resolve(sp->src, b), *y = gp__resolve(sp->dst, b);
    CK(c, cudnnConvolutionForward(gp_cuda_cudnn(b), &one, bk->x, x, cp->w, sp->k->w, bk->conv,
                                  bk->algo, conv_ws(st, b, bk->ws), bk->ws, &zero, bk->y, y));
    CK(c, gp__k_bias_act(gp_cuda_stream(b), st->kt, y, sp->k->bias_f32, b->n, op->out.c,
                         (size_t)op->out.h * (size_t)op->out.w, (int)op->act));
    return GP_OK;
}

const cuda_layer GP__CUDA_LAYER(CONV2D) = {
    .consts = gp__consts_weight_bias,
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
    .consts = gp__consts_weight_bias, .plan = conv_plan_op, .run = conv_run};
#endif
