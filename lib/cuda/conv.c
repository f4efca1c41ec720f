/*
 * CONV2D (layers.h): on cuDNN when the build has it and cuDNN can plan the op (per bucket: tensor
 * descriptors, every usable algorithm of the heuristic's list, each timed on the slot's buffers
 * at setup as it will run, as conv then the bias/act kernel and, for a relu, as cuDNN's fused
 * conv + bias + relu where cuDNN accepts it: the fastest pair stays), otherwise on the direct
 * kernel (kernels/act.cu), which is exact but slow; the reason then goes to the slot's note,
 * which the model's setup passes on to the pipeline's stats.backend_note (handles.h, note).
 * docs/DESIGN.md §6.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupipe/cuda.h"

#include "layers.h"

/* The most a convolution may ask for as workspace; algorithms wanting more are skipped. */
#define CONV_WS_MAX ((size_t)256 << 20)
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
                              sp->k->bias_f32, gp__resolve(sp->dst, b), b->n, op->in.c, op->in.h,
                              op->in.w, op->out.c, op->out.h, op->out.w, op->kh, op->kw,
                              op->stride_h, op->stride_w, op->pad_h, op->pad_w, op->dil_h,
                              op->dil_w, op->groups, res ? GP__ACT_NONE : (int)op->act));
    if (res) CK(c, conv_residual(st, sp, b, b->n));
    return GP_OK;
}

#ifdef GP_HAVE_CUDNN
typedef struct conv_bucket {
    cudnnConvolutionDescriptor_t conv; /* per bucket: the math type follows the algorithm */
    cudnnTensorDescriptor_t x, y;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
    int fused; /* runs as cudnnConvolutionBiasActivationForward (timed faster, and accepted) */
    /* The candidates conv_bind times (the first is the heuristic's choice). */
    int n_cand;
    cudnnConvolutionFwdAlgo_t cand_algo[CONV_MAX_CAND];
    cudnnMathType_t cand_math[CONV_MAX_CAND];
    size_t cand_ws[CONV_MAX_CAND];
} conv_bucket;

/* What a convolution's choice depends on (gp__memo_*): its geometry, its activation (the fused
   form exists for relu only), whether it adds a residual (the fused form reads it) and the
   batch size; int64 fields, so no padding. */
enum { CONV_KEY_LEN = 18 };
_Static_assert(CONV_KEY_LEN * sizeof(int64_t) <= GP__MEMO_KEY, "a conv key fits a memo");
static void conv_key(const gp__op *op, size_t n, int64_t key[CONV_KEY_LEN]) {
    const int64_t k[CONV_KEY_LEN] = {
        op->in.c,  op->in.h,  op->in.w,     op->out.c,    op->out.h,           op->out.w,
        op->kh,    op->kw,    op->stride_h, op->stride_w, op->pad_h,           op->pad_w,
        op->dil_h, op->dil_w, op->groups,   (int)op->act, gp__op_has_src2(op), (int64_t)n};
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

/* The bucket's candidates: every entry of the heuristic's list (fastest estimates first) that
   succeeded, fits CONV_WS_MAX and, for fp32, is not FFT (its rounding is not the direct sums'
   and fp32 is held to 1e-4 of the reference: left out untried rather than chosen by speed
   alone; tf32, fp16 and bf16 take it, its fp32-computed transforms' error being far below their
   own rounding) and uses FMA math only; the first is the bucket's algorithm until conv_bind has
   timed them. The descriptor takes that result's math type (cuDNN needs algorithm and math type
   together). When an earlier slot on this device timed the same convolution at this batch size
   (gp__memo_*), its choice is the only candidate, so this slot's workspace is only what that
   algorithm needs. IMPLICIT_GEMM stands in when the heuristic offers nothing usable. */
static int conv_pick(slot_state *st, const gp__op *op, conv_plan *cp, conv_bucket *bk,
                     cudnnHandle_t h, size_t n, ck *c) {
    gp_precision prec = st->m->precision;
    int64_t key[CONV_KEY_LEN];
    int memo[GP__MEMO_VALS];
    conv_key(op, n, key);
    if (gp__memo_get(st, key, sizeof key, memo)) {
        size_t ws = 0;
        /* The descriptors are this op's own: a choice they reject falls back to the list. */
        if (cudnnSetConvolutionMathType(bk->conv, (cudnnMathType_t)memo[1]) ==
                CUDNN_STATUS_SUCCESS &&
            cudnnGetConvolutionForwardWorkspaceSize(h, bk->x, cp->w, bk->conv, bk->y,
                                                    (cudnnConvolutionFwdAlgo_t)memo[0],
                                                    &ws) == CUDNN_STATUS_SUCCESS &&
            ws <= CONV_WS_MAX) {
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
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > CONV_WS_MAX) continue;
        if (prec == GP_PRECISION_FP32 && (perf[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
                                          perf[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING))
            continue;
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
        if ((rc = conv_pick(st, op, cp, bk, h, (size_t)N, c)) != GP_OK) return rc;
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
static cudnnStatus_t conv_exec(const slot_state *st, const step *sp, const gp_batch *b,
                               const conv_bucket *bk, size_t n, cudaError_t *kerr) {
    const conv_plan *cp = sp->plan;
    const gp__op *op = sp->op;
    *kerr = cudaSuccess;
    if (bk->fused) return conv_fused(st, sp, b, bk);
    const float one = 1.0f, zero = 0.0f;
    void *x = gp__resolve(sp->src, b), *y = gp__resolve(sp->dst, b);
    cudnnStatus_t s =
        cudnnConvolutionForward(gp_cuda_cudnn(b), &one, bk->x, x, cp->w, sp->k->w, bk->conv,
                                bk->algo, conv_ws(st, b, bk->ws), bk->ws, &zero, bk->y, y);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    int res = gp__op_has_src2(op); /* the activation then follows the residual add */
    *kerr =
        gp__k_bias_act(gp_cuda_stream(b), st->kt, y, sp->k->bias_f32, n, op->out.c,
                       (size_t)op->out.h * (size_t)op->out.w, res ? GP__ACT_NONE : (int)op->act);
    if (*kerr == cudaSuccess && res) *kerr = conv_residual(st, sp, b, n);
    return s;
}

/* Make candidate i the bucket's algorithm (its math type on the descriptor). */
static int conv_set(conv_bucket *bk, int i, ck *c) {
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
    if (!cp->relu) return 0;
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

/* The pipeline's INFO line for a timed bucket: what stays, its time per run, and the
   heuristic's first pick's (what an untimed rule would have run). */
static void conv_log(const gp__op *op, const gp_batch *slot, const conv_bucket *bk, size_t n,
                     int best, int fused, float best_ms, float first_ms, int ran, int tried) {
    if (best_ms < 0) {
        gp__slot_info(slot,
                      "conv2d %s: batch %zu: none of %d algorithm/form pairs ran at setup; "
                      "batches run the heuristic's first",
                      op->name, n, tried);
        return;
    }
    int has = bk->n_cand > 0; /* 0: IMPLICIT_GEMM, conv_pick's stand-in, in the layer's math */
    cudnnConvolutionFwdAlgo_t algo = has ? bk->cand_algo[best]
                                         : CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                              first = has ? bk->cand_algo[0] : algo;
    char tail[96];
    if (first_ms >= 0)
        snprintf(tail, sizeof tail, "%.3f ms", (double)(first_ms / CONV_TIMED_RUNS));
    else
        snprintf(tail, sizeof tail, "did not run");
    gp__slot_info(slot,
                  "conv2d %s (%dx%dx%d -> %dx%dx%d, %dx%d/%d): batch %zu: %s%s%s %s, %.3f ms per "
                  "run (%d of %d algorithm/form pairs ran; the heuristic's first, %s: %s)",
                  op->name, op->in.c, op->in.h, op->in.w, op->out.c, op->out.h, op->out.w, op->kh,
                  op->kw, op->stride_h, n, algo_name(algo), has ? " " : "",
                  has ? math_name(bk->cand_math[best]) : "", fused ? "fused" : "unfused",
                  (double)(best_ms / CONV_TIMED_RUNS), ran, tried, algo_name(first), tail);
}

/* After the buffers. Per bucket, every candidate runs in each form (fused only for a relu) as
   its batches would, and the fastest pair stays (cudnn.benchmark's method, on the slot's
   buffers, which setup zeroed). The choice is kept with the model's weights on the device, per
   geometry and bucket size (gp__memo_*, conv_key): a later op of the same geometry takes it
   here, a later slot's conv_pick makes it the only candidate, so a device pays the timing once
   per distinct convolution and bucket, in the first slot of the first pipeline. */
static int conv_bind(slot_state *st, step *sp, const gp_batch *slot, ck *c) {
    conv_plan *cp = sp->plan;
    if (!cp) return GP_OK;
    cudaEvent_t ev[2] = {NULL, NULL};
    int rc = GP_OK, forms = cp->relu ? 2 : 1;
    for (int bi = 0; bi < st->n_buckets && rc == GP_OK; bi++) {
        conv_bucket *bk = &cp->bk[bi];
        size_t n = st->buckets[bi];
        int n_cand = bk->n_cand > 0 ? bk->n_cand : 1; /* 0: conv_pick's IMPLICIT_GEMM */
        int best = 0, best_fused = cp->relu != NULL;  /* untimed: fused where cuDNN takes it */
        int64_t key[CONV_KEY_LEN];
        int memo[GP__MEMO_VALS], hit = -1;
        conv_key(sp->op, n, key);
        /* Timed already: by an earlier slot (conv_pick made its choice the only candidate) or by
           an op of the same geometry before this one in this slot. */
        if (gp__memo_get(st, key, sizeof key, memo))
            for (int i = 0; i < bk->n_cand && hit < 0; i++)
                if ((int)bk->cand_algo[i] == memo[0] && (int)bk->cand_math[i] == memo[1]) hit = i;
        if (hit >= 0) {
            best = hit;
            best_fused = memo[2];
        } else if (n_cand * forms > 1) {
            if (!ev[0]) {
                cudaError_t e = cudaEventCreate(&ev[0]);
                if (e == cudaSuccess && (e = cudaEventCreate(&ev[1])) != cudaSuccess) ev[1] = NULL;
                if (e != cudaSuccess) {
                    rc = gp__ck_status(c, gp__cu_rt(e), "cudaEventCreate(conv timing)", __FILE__,
                                       __LINE__);
                    break;
                }
            }
            float best_ms = -1.0f, first_ms = -1.0f; /* first: the heuristic's first, any form */
            int ran = 0;
            for (int i = 0; i < n_cand && rc == GP_OK; i++)
                for (int f = 0; f < forms && rc == GP_OK; f++) {
                    float ms;
                    rc = conv_time(st, sp, slot, bk, i, f, n, ev, &ms, c);
                    if (rc != GP_OK || ms < 0) continue;
                    ran++;
                    if (i == 0 && (first_ms < 0 || ms < first_ms)) first_ms = ms;
                    if (best_ms < 0 || ms < best_ms) {
                        best_ms = ms;
                        best = i;
                        best_fused = f;
                    }
                }
            if (rc != GP_OK) break;
            conv_log(sp->op, slot, bk, n, best, best_fused, best_ms, first_ms, ran, n_cand * forms);
            if (best_ms >= 0 && bk->n_cand > 0) {
                memo[0] = (int)bk->cand_algo[best];
                memo[1] = (int)bk->cand_math[best];
                memo[2] = best_fused;
                /* Not kept (out of memory): the next slot times it again. */
                (void)gp__memo_put(st, key, sizeof key, memo);
            }
        }
        if ((rc = conv_set(bk, best, c)) == GP_OK) {
            if (best_fused)
                (void)conv_try_fused(st, sp, slot, bk); /* rejected: runs unfused */
            else
                bk->fused = 0;
        }
    }
    /* Destroy statuses are not actionable here. */
    if (ev[0]) cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    return rc;
}

static int conv_run(slot_state *st, const step *sp, const gp_batch *b, int bi, ck *c) {
    const conv_plan *cp = sp->plan;
    if (!cp) return conv_run_direct(st, sp, b, c);
    cudaError_t kerr;
    cudnnStatus_t s = conv_exec(st, sp, b, &cp->bk[bi], b->n, &kerr);
    if (s != CUDNN_STATUS_SUCCESS)
        return gp__ck_status(c, gp__cu_dnn(s),
                             cp->bk[bi].fused ? "cudnnConvolutionBiasActivationForward"
                                              : "cudnnConvolutionForward",
                             __FILE__, __LINE__);
    if (kerr != cudaSuccess)
        return gp__ck_status(c, gp__cu_rt(kerr), "the conv's bias/residual kernel", __FILE__,
                             __LINE__);
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
