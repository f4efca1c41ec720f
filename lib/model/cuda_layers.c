/*
 * The model runtime's CUDA layers: the CUDA boundary of model_impl.h (gp__model_cuda_setup /
 * run / teardown / free) on cuBLASLt, cuDNN and the kernels in kernels/.
 *
 * Model-wide (m->cuda, created under m->mu): per device, one arena with every weight in the
 * activation type (fp32, or fp16 / bf16 converted on the host with the loader's rounding),
 * each bias in fp32 (for the bias + activation kernel) and in the activation type (for the
 * cuBLASLt and cuDNN epilogues), and PREP's mean / std. Uploaded once per device, freed by
 * gp__model_cuda_free.
 *
 * Per slot (the state setup returns): one arena with the plan's buffers for `capacity` items
 * in the activation type (laid out from the plan's per-item sizes, each 256-byte aligned),
 * the 16-bit staging buffers (below), and a cuDNN workspace when the slot's cuBLASLt
 * workspace is too small; every cudaMalloc happens here, none in run. Per batch bucket (1, 2,
 * 4, ... below capacity, and capacity) each LINEAR has its cuBLASLt layouts and heuristic
 * algorithm (workspace within the slot's cuBLASLt workspace) and each CONV2D its cuDNN
 * descriptors, algorithm and workspace size. A batch of n items runs the cuBLASLt and cuDNN
 * calls at its bucket's size (the padding items are independent and their results unused, as
 * with CUDA-graph padding); the kernels run on n items.
 *
 * Precision. FP32: CUBLAS_COMPUTE_32F, cuDNN FMA math only. TF32: CUBLAS_COMPUTE_32F_FAST_TF32,
 * cuDNN default math (tensor cores allowed). FP16 / BF16: 16-bit storage and weights, fp32
 * accumulation (CUBLAS_COMPUTE_32F; cuDNN compute type float), tensor-op math. The model's
 * input and output stay as the model declares them (u8 / f32 in, f32 / i64 out): PREP writes
 * 16-bit directly; an f32 input read by another op is converted into a staging buffer first;
 * a result written by LINEAR, CONV2D or an elementwise op goes through an output staging
 * buffer and one conversion to f32. COPY reads / writes f32 ends directly.
 *
 * Fusion. LINEAR: cuBLASLt epilogue BIAS, or RELU_BIAS for relu; gelu (erf form; cuBLASLt's
 * GELU epilogue is the tanh form), sigmoid and tanh run as a separate kernel in place. CONV2D:
 * cudnnConvolutionBiasActivationForward for relu when cuDNN accepts the configuration (tried
 * once per bucket at setup), otherwise cudnnConvolutionForward and the bias + activation
 * kernel. Without cuDNN in the build, a direct convolution kernel with fused bias +
 * activation stands in.
 *
 * Errors: every CUDA, cuBLASLt and cuDNN call goes through CK(), which writes the call, the
 * native code and its name, file:line and the op into the error buffer (setup's `err`; the
 * slot state's buffer in run, copied to the model's last error) and returns GP_EDEVICE
 * (GP_ENOMEM for allocation failures).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#ifdef GP_HAVE_CUDNN
#include <cudnn.h>
#endif

#include "gpupipe/cuda.h"

#include "cuda_kernels.h"
#include "model_impl.h"
#include "util.h"

/* The kernels take gp__act values as ints (kernels/kernel_util.cuh mirrors them). */
_Static_assert(GP__ACT_NONE == 0 && GP__ACT_RELU == 1 && GP__ACT_GELU == 2 &&
                   GP__ACT_SIGMOID == 3 && GP__ACT_TANH == 4,
               "kernels/kernel_util.cuh mirrors gp__act");

#define ALIGN_BYTES 256
#define HEUR_RESULTS 8
/* The most a convolution may ask for as workspace; algorithms wanting more are skipped. */
#define CONV_WS_MAX ((size_t)256 << 20)

/* ---- checked calls ------------------------------------------------------------------------ */

typedef struct ck {
    char *buf;
    size_t len;
    const gp__op *op; /* the op being set up or run, for the message; NULL: none */
} ck;

static void ck_write(ck *c, const char *call, const char *name, int code, const char *text,
                     const char *file, int line) {
    if (!c->buf || !c->len) return;
    int call_len = (int)strcspn(call, "("); /* the function's name, not its arguments */
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    char where[128] = "";
    if (c->op)
        snprintf(where, sizeof where, " [spec line %d: %s%s%s%s]", c->op->line,
                 gp__op_name(c->op->kind), c->op->name[0] ? " '" : "", c->op->name,
                 c->op->name[0] ? "'" : "");
    snprintf(c->buf, c->len, "%.*s failed: %s (%d): %s at %s:%d%s", call_len, call, name, code,
             text, base, line, where);
}

static int ck_rt(ck *c, cudaError_t e, const char *call, const char *file, int line) {
    ck_write(c, call, cudaGetErrorName(e), (int)e, cudaGetErrorString(e), file, line);
    return e == cudaErrorMemoryAllocation ? GP_ENOMEM : GP_EDEVICE;
}

static int ck_blas(ck *c, cublasStatus_t e, const char *call, const char *file, int line) {
    ck_write(c, call, cublasLtGetStatusName(e), (int)e, cublasLtGetStatusString(e), file, line);
    return e == CUBLAS_STATUS_ALLOC_FAILED ? GP_ENOMEM : GP_EDEVICE;
}

#ifdef GP_HAVE_CUDNN
static int ck_dnn(ck *c, cudnnStatus_t e, const char *call, const char *file, int line) {
    ck_write(c, call, "cudnnStatus_t", (int)e, cudnnGetErrorString(e), file, line);
    return e == CUDNN_STATUS_ALLOC_FAILED ? GP_ENOMEM : GP_EDEVICE;
}
#define CK_DNN_ASSOC , cudnnStatus_t : ck_dnn
#else
#define CK_DNN_ASSOC
#endif

static inline int ok_rt(cudaError_t e) {
    return e == cudaSuccess;
}
static inline int ok_blas(cublasStatus_t e) {
    return e == CUBLAS_STATUS_SUCCESS;
}
#ifdef GP_HAVE_CUDNN
static inline int ok_dnn(cudnnStatus_t e) {
    return e == CUDNN_STATUS_SUCCESS;
}
#define OK_DNN_ASSOC , cudnnStatus_t : ok_dnn
#else
#define OK_DNN_ASSOC
#endif

/* Evaluate `call` once; on failure record it in `c` and return the mapped GP_E* code from the
   enclosing function. The library is told apart by the status type. */
#define CK(c, call)                                                                                \
    do {                                                                                           \
        __typeof__(call) ck_st_ = (call);                                                          \
        if (!_Generic(ck_st_, cudaError_t : ok_rt, cublasStatus_t : ok_blas OK_DNN_ASSOC)(ck_st_)) \
            return _Generic(ck_st_, cudaError_t                                                    \
                            : ck_rt, cublasStatus_t                                                \
                            : ck_blas CK_DNN_ASSOC)((c), ck_st_, #call, __FILE__, __LINE__);       \
    } while (0)

static int fail(ck *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ck *c, int code, const char *fmt, ...) {
    if (c->buf && c->len) {
        char msg[200];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (c->op)
            snprintf(c->buf, c->len, "%s [spec line %d: %s%s%s%s]", msg, c->op->line,
                     gp__op_name(c->op->kind), c->op->name[0] ? " '" : "", c->op->name,
                     c->op->name[0] ? "'" : "");
        else
            snprintf(c->buf, c->len, "%s", msg);
    }
    return code;
}

/* ---- model-wide state: weights per device ------------------------------------------------- */

/* Device copies of one op's constants (NULL where the op has none). */
typedef struct op_consts {
    void *w;         /* CONV2D / LINEAR weight, activation type */
    float *bias_f32; /* CONV2D / LINEAR bias, fp32 */
    void *bias_t;    /* the bias in the activation type (== bias_f32 for fp32) */
    float *mean;     /* PREP */
    float *std;
} op_consts;

typedef struct dev_weights {
    struct dev_weights *next;
    int device;
    void *arena;
    op_consts *ops; /* m->n_ops */
} dev_weights;

typedef struct model_cuda {
    dev_weights *devs;
} model_cuda;

static gp__kt act_type(gp_precision p) {
    return p == GP_PRECISION_FP16 ? GP__KT_F16 : p == GP_PRECISION_BF16 ? GP__KT_BF16 : GP__KT_F32;
}

static size_t kt_size(gp__kt t) {
    return t == GP__KT_F32 ? 4 : 2;
}

static size_t align_up(size_t x) {
    return (x + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES;
}

/* Append `n` floats to the host image at *off, converted to `t`; returns the offset used. */
static size_t put(unsigned char *img, size_t *off, const float *v, size_t n, gp__kt t) {
    size_t at = *off;
    if (img) {
        if (t == GP__KT_F32) {
            memcpy(img + at, v, n * sizeof(float));
        } else {
            uint16_t *d = (uint16_t *)(void *)(img + at);
            for (size_t i = 0; i < n; i++)
                d[i] = t == GP__KT_F16 ? gp__f32_to_f16(v[i]) : gp__f32_to_bf16(v[i]);
        }
    }
    *off = align_up(at + n * kt_size(t));
    return at;
}

/* Lay out (img == NULL: size only) the device arena of every op's constants. offs receives
   per op the byte offsets of w, bias_f32, bias_t, mean, std (SIZE_MAX: none). */
static size_t layout_consts(const gp__model *m, gp__kt kt, unsigned char *img, size_t (*offs)[5]) {
    size_t off = 0;
    for (int i = 0; i < m->n_ops; i++) {
        const gp__op *op = &m->ops[i];
        for (int k = 0; k < 5; k++)
            offs[i][k] = SIZE_MAX;
        if (op->kind == GP__OP_CONV2D || op->kind == GP__OP_LINEAR) {
            offs[i][0] = put(img, &off, op->weight, op->weight_count, kt);
            offs[i][1] = put(img, &off, op->bias, (size_t)op->out.c, GP__KT_F32);
            offs[i][2] =
                kt == GP__KT_F32 ? offs[i][1] : put(img, &off, op->bias, (size_t)op->out.c, kt);
        } else if (op->kind == GP__OP_PREP) {
            offs[i][3] = put(img, &off, op->mean, (size_t)op->out.c, GP__KT_F32);
            offs[i][4] = put(img, &off, op->std, (size_t)op->out.c, GP__KT_F32);
        }
    }
    return off;
}

static void dev_weights_free(dev_weights *d) {
    if (!d) return;
    if (d->arena) cudaFree(d->arena);
    free(d->ops);
    free(d);
}

/* Upload the weights to the current device (d->device) through `stream`, synchronously. */
static int upload_weights(gp__model *m, dev_weights *d, cudaStream_t stream, ck *c) {
    gp__kt kt = act_type(m->precision);
    size_t(*offs)[5] = calloc((size_t)m->n_ops ? (size_t)m->n_ops : 1, sizeof *offs);
    d->ops = calloc((size_t)m->n_ops ? (size_t)m->n_ops : 1, sizeof *d->ops);
    if (!offs || !d->ops) {
        free(offs);
        return fail(c, GP_ENOMEM, "out of memory laying out the weights");
    }
    size_t bytes = layout_consts(m, kt, NULL, offs);
    int rc = GP_OK;
    unsigned char *img = NULL;
    if (bytes) {
        img = malloc(bytes);
        if (!img) {
            rc = fail(c, GP_ENOMEM, "out of memory staging %zu bytes of weights", bytes);
            goto out;
        }
        layout_consts(m, kt, img, offs);
        cudaError_t e = cudaMalloc(&d->arena, bytes);
        if (e != cudaSuccess) {
            d->arena = NULL;
            rc = ck_rt(c, e, "cudaMalloc(weights)", __FILE__, __LINE__);
            goto out;
        }
        /* Pageable source: the call returns once the bytes are staged; the synchronize makes
           them visible to every slot's stream on this device. */
        e = cudaMemcpyAsync(d->arena, img, bytes, cudaMemcpyHostToDevice, stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
        if (e != cudaSuccess) {
            rc = ck_rt(c, e, "cudaMemcpyAsync(weights)", __FILE__, __LINE__);
            goto out;
        }
    }
    for (int i = 0; i < m->n_ops; i++) {
        unsigned char *base = d->arena;
        op_consts *oc = &d->ops[i];
        oc->w = offs[i][0] != SIZE_MAX ? base + offs[i][0] : NULL;
        oc->bias_f32 = offs[i][1] != SIZE_MAX ? (float *)(void *)(base + offs[i][1]) : NULL;
        oc->bias_t = offs[i][2] != SIZE_MAX ? base + offs[i][2] : NULL;
        oc->mean = offs[i][3] != SIZE_MAX ? (float *)(void *)(base + offs[i][3]) : NULL;
        oc->std = offs[i][4] != SIZE_MAX ? (float *)(void *)(base + offs[i][4]) : NULL;
    }
out:
    free(img);
    free(offs);
    return rc;
}

/* The weights on `device`, uploaded by the first slot that needs them. Takes m->mu. */
static int weights_for(gp__model *m, int device, cudaStream_t stream, ck *c,
                       const dev_weights **out) {
    int rc = GP_OK;
    pthread_mutex_lock(&m->mu);
    model_cuda *mc = m->cuda;
    if (!mc) {
        mc = calloc(1, sizeof *mc);
        if (!mc) {
            rc = fail(c, GP_ENOMEM, "out of memory for the model's CUDA state");
            goto out;
        }
        m->cuda = mc;
    }
    for (dev_weights *d = mc->devs; d; d = d->next)
        if (d->device == device) {
            *out = d;
            goto out;
        }
    dev_weights *d = calloc(1, sizeof *d);
    if (!d) {
        rc = fail(c, GP_ENOMEM, "out of memory for the model's CUDA state");
        goto out;
    }
    d->device = device;
    if ((rc = upload_weights(m, d, stream, c)) != GP_OK) {
        dev_weights_free(d);
        goto out;
    }
    d->next = mc->devs;
    mc->devs = d;
    *out = d;
out:
    pthread_mutex_unlock(&m->mu);
    return rc;
}

void gp__model_cuda_free(gp__model *m) {
    if (!m || !m->cuda) return;
    model_cuda *mc = m->cuda;
    int prev = -1;
    int have_prev = cudaGetDevice(&prev) == cudaSuccess;
    while (mc->devs) {
        dev_weights *d = mc->devs;
        mc->devs = d->next;
        cudaSetDevice(d->device); /* cudaFree needs the owning device current */
        dev_weights_free(d);
    }
    if (have_prev) cudaSetDevice(prev);
    free(mc);
    m->cuda = NULL;
}

/* ---- per-slot state ------------------------------------------------------------------------ */

/* Where a step's operand lives: a fixed device pointer, or the batch's in / out. */
enum { REF_PTR = 0, REF_IN, REF_OUT };
typedef struct ref {
    int kind;
    void *p; /* REF_PTR */
} ref;

typedef struct lin_bucket {
    cublasLtMatrixLayout_t b, d;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} lin_bucket;

typedef struct lin_plan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a;
    int epilogue_act; /* the epilogue applied the op's activation */
    lin_bucket *bk;   /* per bucket */
} lin_plan;

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
#endif

typedef struct step {
    const gp__op *op;
    const op_consts *k;
    ref src, src2, dst;
    gp__kt src_t, dst_t; /* storage types of src and dst (COPY may read / write f32 ends) */
    lin_plan *lin;
#ifdef GP_HAVE_CUDNN
    conv_plan *conv;
#endif
} step;

typedef struct slot_state {
    gp__model *m;
    int device;
    size_t capacity;
    gp__kt kt;
    size_t *buckets;
    int n_buckets;

    void *arena;      /* activation buffers, staging, conv workspace */
    void **bufs;      /* per plan buffer */
    void *instage;    /* the f32 input converted to the activation type, or NULL */
    size_t in_elems;  /* per item */
    void *ostage;     /* the result before its conversion to f32, or NULL */
    size_t out_elems; /* per item */
    void *conv_ws;    /* own cuDNN workspace, or NULL: the cuBLASLt workspace serves */
    size_t conv_ws_bytes;
    unsigned in_align, out_align; /* of b->in / b->out at setup, which the plans assume */

    step *steps;
    int n_steps;
    char err[256];  /* the last run failure */
    char note[256]; /* why a convolution runs on the direct kernel, if one does */
} slot_state;

static unsigned align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uintptr_t low = a & (~a + 1u); /* lowest set bit */
    return a == 0 || low >= ALIGN_BYTES ? ALIGN_BYTES : (unsigned)low;
}

static int bucket_of(const slot_state *st, size_t n) {
    int i = 0;
    while (i < st->n_buckets - 1 && st->buckets[i] < n)
        i++;
    return i;
}

static void *resolve(ref r, const gp_batch *b) {
    return r.kind == REF_IN ? (void *)(uintptr_t)b->in : r.kind == REF_OUT ? b->out : r.p;
}

static cudaDataType_t blas_type(gp__kt t) {
    return t == GP__KT_F16 ? CUDA_R_16F : t == GP__KT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* ---- LINEAR on cuBLASLt ------------------------------------------------------------------- */

/*
 * Row-major y[n][M] = x[n][K] W^T + b, W [M][K] row-major, in cuBLASLt's column-major terms:
 * D (M x n, ld M) = op(A) B with A = W stored K x M (ld K) and op = T, B = x stored K x n
 * (ld K). The bias runs along D's rows (M), as CUBLASLT_EPILOGUE_BIAS broadcasts it.
 */
static int lin_setup(slot_state *st, step *sp, const gp_batch *slot, ck *c) {
    const gp__op *op = sp->op;
    gp_precision prec = st->m->precision;
    uint64_t M = (uint64_t)op->out.c, K = (uint64_t)gp__shape_numel(op->in);
    cudaDataType_t dt = blas_type(st->kt);
    cublasComputeType_t ct =
        prec == GP_PRECISION_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    lin_plan *lp = calloc(1, sizeof *lp);
    if (!lp) return fail(c, GP_ENOMEM, "out of memory planning linear");
    sp->lin = lp;
    lp->bk = calloc((size_t)st->n_buckets, sizeof *lp->bk);
    if (!lp->bk) return fail(c, GP_ENOMEM, "out of memory planning linear");

    CK(c, cublasLtMatmulDescCreate(&lp->desc, ct, CUDA_R_32F));
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CK(c, cublasLtMatmulDescSetAttribute(lp->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CK(c, cublasLtMatmulDescSetAttribute(lp->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    lp->epilogue_act = op->act == GP__ACT_RELU;
    uint32_t epi = lp->epilogue_act ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    CK(c,
       cublasLtMatmulDescSetAttribute(lp->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    const void *bias = sp->k->bias_t; /* the bias is of D's type (cublasLt.h, BIAS_DATA_TYPE) */
    CK(c, cublasLtMatmulDescSetAttribute(lp->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                         sizeof bias));
    CK(c, cublasLtMatrixLayoutCreate(&lp->a, dt, K, M, (int64_t)K));

    size_t ws_bytes = 0;
    (void)gp_cuda_workspace(slot, &ws_bytes);
    cublasLtMatmulPreference_t pref = NULL;
    CK(c, cublasLtMatmulPreferenceCreate(&pref));
    int rc = GP_OK;
    uint64_t ws64 = ws_bytes;
    uint32_t al_a = align_of(sp->k->w), al_b = align_of(resolve(sp->src, slot)),
             al_d = align_of(resolve(sp->dst, slot));
    cublasStatus_t bs;
    const char *what = "cublasLtMatmulPreferenceSetAttribute";
    if ((bs = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws64, sizeof ws64)) != CUBLAS_STATUS_SUCCESS ||
        (bs = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                   &al_a, sizeof al_a)) != CUBLAS_STATUS_SUCCESS ||
        (bs = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                   &al_b, sizeof al_b)) != CUBLAS_STATUS_SUCCESS ||
        (bs = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                   &al_d, sizeof al_d)) != CUBLAS_STATUS_SUCCESS ||
        (bs = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                   &al_d, sizeof al_d)) != CUBLAS_STATUS_SUCCESS) {
        rc = ck_blas(c, bs, what, __FILE__, __LINE__);
        goto out;
    }
    for (int bi = 0; bi < st->n_buckets && rc == GP_OK; bi++) {
        lin_bucket *bk = &lp->bk[bi];
        uint64_t N = st->buckets[bi];
        if ((bs = cublasLtMatrixLayoutCreate(&bk->b, dt, K, N, (int64_t)K)) !=
                CUBLAS_STATUS_SUCCESS ||
            (bs = cublasLtMatrixLayoutCreate(&bk->d, dt, M, N, (int64_t)M)) !=
                CUBLAS_STATUS_SUCCESS) {
            rc = ck_blas(c, bs, "cublasLtMatrixLayoutCreate", __FILE__, __LINE__);
            break;
        }
        cublasLtMatmulHeuristicResult_t res[HEUR_RESULTS];
        int got = 0;
        memset(res, 0, sizeof res);
        bs = cublasLtMatmulAlgoGetHeuristic(gp_cuda_cublaslt(slot), lp->desc, lp->a, bk->b, bk->d,
                                            bk->d, pref, HEUR_RESULTS, res, &got);
        if (bs != CUBLAS_STATUS_SUCCESS) {
            rc = ck_blas(c, bs, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
            break;
        }
        int pick = -1;
        for (int r = 0; r < got && pick < 0; r++)
            if (res[r].state == CUBLAS_STATUS_SUCCESS && res[r].workspaceSize <= ws_bytes) pick = r;
        if (pick < 0) {
            rc = fail(c, GP_ENOTSUP,
                      "cuBLASLt has no algorithm for a %s GEMM M=%llu N=%llu K=%llu within %zu "
                      "bytes of workspace",
                      gp_precision_name(prec), (unsigned long long)M, (unsigned long long)N,
                      (unsigned long long)K, ws_bytes);
            break;
        }
        bk->algo = res[pick].algo;
        bk->ws = res[pick].workspaceSize;
    }
out:
    cublasLtMatmulPreferenceDestroy(pref);
    return rc;
}

static void lin_free(lin_plan *lp, int n_buckets) {
    if (!lp) return;
    if (lp->bk)
        for (int i = 0; i < n_buckets; i++) {
            if (lp->bk[i].b) cublasLtMatrixLayoutDestroy(lp->bk[i].b);
            if (lp->bk[i].d) cublasLtMatrixLayoutDestroy(lp->bk[i].d);
        }
    free(lp->bk);
    if (lp->a) cublasLtMatrixLayoutDestroy(lp->a);
    if (lp->desc) cublasLtMatmulDescDestroy(lp->desc);
    free(lp);
}

static int lin_run(slot_state *st, const step *sp, const gp_batch *b, int bi, ck *c) {
    const lin_plan *lp = sp->lin;
    const lin_bucket *bk = &lp->bk[bi];
    cudaStream_t s = gp_cuda_stream(b);
    size_t ws_bytes = 0;
    void *ws = gp_cuda_workspace(b, &ws_bytes);
    const float alpha = 1.0f, beta = 0.0f; /* scale type fp32; beta 0: C is not read */
    void *x = resolve(sp->src, b), *y = resolve(sp->dst, b);
    CK(c, cublasLtMatmul(gp_cuda_cublaslt(b), lp->desc, &alpha, sp->k->w, lp->a, x, bk->b, &beta, y,
                         bk->d, y, bk->d, &bk->algo, bk->ws ? ws : NULL, bk->ws, s));
    if (!lp->epilogue_act && sp->op->act != GP__ACT_NONE)
        CK(c, gp__k_act(s, st->kt, y, y, b->n * (size_t)sp->op->out.c, (int)sp->op->act));
    return GP_OK;
}

/* ---- CONV2D on cuDNN (or the direct kernel) ---------------------------------------------- */

/* The direct kernel: builds without cuDNN, and convolutions cuDNN could not plan. */
static int conv_run_direct(slot_state *st, const step *sp, const gp_batch *b, ck *c) {
    const gp__op *op = sp->op;
    CK(c, gp__k_conv2d_direct(gp_cuda_stream(b), st->kt, resolve(sp->src, b), sp->k->w,
                              sp->k->bias_f32, resolve(sp->dst, b), b->n, op->in.c, op->in.h,
                              op->in.w, op->out.c, op->out.h, op->out.w, op->kh, op->kw,
                              op->stride_h, op->stride_w, op->pad_h, op->pad_w, op->dil_h,
                              op->dil_w, op->groups, (int)op->act));
    return GP_OK;
}

#ifdef GP_HAVE_CUDNN
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
        return fail(c, GP_ENOTSUP, "cuDNN offers no convolution algorithm within %zu bytes",
                    CONV_WS_MAX);
    return GP_OK;
}

static int conv_setup(slot_state *st, step *sp, const gp_batch *slot, ck *c) {
    const gp__op *op = sp->op;
    cudnnHandle_t h = gp_cuda_cudnn(slot);
    cudnnDataType_t dt = dnn_type(st->kt);
    conv_plan *cp = calloc(1, sizeof *cp);
    if (!cp) return fail(c, GP_ENOMEM, "out of memory planning conv2d");
    sp->conv = cp;
    cp->bk = calloc((size_t)st->n_buckets, sizeof *cp->bk);
    if (!cp->bk) return fail(c, GP_ENOMEM, "out of memory planning conv2d");
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
            return fail(c, GP_ENOTSUP, "cuDNN computes a %dx%dx%d output, the model %dx%dx%d", oc,
                        oh, ow, op->out.c, op->out.h, op->out.w);
        if ((rc = conv_pick(st, cp, bk, h, c)) != GP_OK) return rc;
        if (bk->ws > st->conv_ws_bytes) st->conv_ws_bytes = bk->ws;
    }
    return GP_OK;
}

static void conv_free(conv_plan *cp, int n_buckets) {
    if (!cp) return;
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
}

static void *conv_ws(const slot_state *st, const gp_batch *b, size_t need) {
    if (need == 0) return NULL;
    if (st->conv_ws) return st->conv_ws;
    return gp_cuda_workspace(b, NULL); /* it is large enough: see slot_alloc */
}

static cudnnStatus_t conv_fused(const slot_state *st, const step *sp, const gp_batch *b,
                                const conv_bucket *bk) {
    const float one = 1.0f, zero = 0.0f; /* float scaling for float / half / bf16 data */
    void *x = resolve(sp->src, b), *y = resolve(sp->dst, b);
    /* y = relu(conv(x) + 0 * z + bias), with z = y (alpha2 is 0). */
    return cudnnConvolutionBiasActivationForward(
        gp_cuda_cudnn(b), &one, bk->x, x, sp->conv->w, sp->k->w, bk->conv, bk->algo,
        conv_ws(st, b, bk->ws), bk->ws, &zero, bk->y, y, sp->conv->bias, sp->k->bias_t,
        sp->conv->relu, bk->y, y);
}

/* Try the fused call once per bucket (setup, on zeroed buffers): cuDNN rejects unsupported
   fused configurations at the call, and those buckets then run unfused. */
static void conv_try_fused(slot_state *st, step *sp, const gp_batch *slot) {
    if (!sp->conv->relu) return;
    for (int bi = 0; bi < st->n_buckets; bi++) {
        conv_bucket *bk = &sp->conv->bk[bi];
        bk->fused = conv_fused(st, sp, slot, bk) == CUDNN_STATUS_SUCCESS;
        if (!bk->fused) (void)cudaGetLastError(); /* drop what a rejected call may have left */
    }
}

static int conv_run(slot_state *st, const step *sp, const gp_batch *b, int bi, ck *c) {
    if (!sp->conv) return conv_run_direct(st, sp, b, c);
    const conv_bucket *bk = &sp->conv->bk[bi];
    const gp__op *op = sp->op;
    if (bk->fused) {
        CK(c, conv_fused(st, sp, b, bk));
        return GP_OK;
    }
    const float one = 1.0f, zero = 0.0f;
    void *x = resolve(sp->src, b), *y = resolve(sp->dst, b);
    CK(c, cudnnConvolutionForward(gp_cuda_cudnn(b), &one, bk->x, x, sp->conv->w, sp->k->w, bk->conv,
                                  bk->algo, conv_ws(st, b, bk->ws), bk->ws, &zero, bk->y, y));
    CK(c, gp__k_bias_act(gp_cuda_stream(b), st->kt, y, sp->k->bias_f32, b->n, op->out.c,
                         (size_t)op->out.h * (size_t)op->out.w, (int)op->act));
    return GP_OK;
}
#else
static int conv_run(slot_state *st, const step *sp, const gp_batch *b, int bi, ck *c) {
    (void)bi;
    return conv_run_direct(st, sp, b, c);
}
#endif

/* ---- setup / teardown ---------------------------------------------------------------------- */

static void state_free(slot_state *st) {
    if (!st) return;
    for (int i = 0; st->steps && i < st->n_steps; i++) {
        lin_free(st->steps[i].lin, st->n_buckets);
#ifdef GP_HAVE_CUDNN
        conv_free(st->steps[i].conv, st->n_buckets);
#endif
    }
    free(st->steps);
    if (st->arena) cudaFree(st->arena);
    free(st->bufs);
    free(st->buckets);
    free(st);
}

static int make_buckets(slot_state *st, ck *c) {
    int n = 1;
    for (size_t b = 1; b < st->capacity; b <<= 1)
        n++;
    st->buckets = calloc((size_t)n, sizeof *st->buckets);
    if (!st->buckets) return fail(c, GP_ENOMEM, "out of memory for the batch buckets");
    st->n_buckets = 0;
    for (size_t b = 1; b < st->capacity; b <<= 1)
        st->buckets[st->n_buckets++] = b;
    st->buckets[st->n_buckets++] = st->capacity;
    return GP_OK;
}

/* Operand references and storage types for every op (see "Precision" at the top). */
static int plan_steps(slot_state *st, const dev_weights *w, ck *c) {
    gp__model *m = st->m;
    int wide = st->kt == GP__KT_F32;
    st->steps = calloc((size_t)m->n_ops, sizeof *st->steps);
    if (!st->steps) return fail(c, GP_ENOMEM, "out of memory planning the op list");
    st->n_steps = m->n_ops;
    int need_in = 0, need_out = 0;
    for (int i = 0; i < m->n_ops; i++) {
        const gp__op *op = &m->ops[i];
        step *sp = &st->steps[i];
        sp->op = op;
        sp->k = &w->ops[i];
        sp->src_t = sp->dst_t = st->kt;
        c->op = op;
        int src_ok = op->src == GP__BUF_INPUT || (op->src >= 0 && op->src < m->n_bufs);
        int src2_ok = op->kind != GP__OP_ADD || op->src2 == GP__BUF_INPUT ||
                      (op->src2 >= 0 && op->src2 < m->n_bufs);
        int dst_ok = op->dst == GP__BUF_OUTPUT || (op->dst >= 0 && op->dst < m->n_bufs);
        if (!src_ok || !src2_ok || !dst_ok)
            return fail(c, GP_ENOTSUP, "operand buffers outside the plan (src %d, src2 %d, dst %d)",
                        op->src, op->src2, op->dst);
        int reads_input =
            op->src == GP__BUF_INPUT || (op->kind == GP__OP_ADD && op->src2 == GP__BUF_INPUT);
        if (op->kind == GP__OP_PREP || op->kind == GP__OP_COPY) {
            if (op->src == GP__BUF_INPUT) /* the f32 input as it came (PREP reads u8 or f32) */
                sp->src_t = GP__KT_F32;
        } else if (reads_input && !wide) {
            need_in = 1;
        }
        if ((op->kind == GP__OP_ARGMAX || op->kind == GP__OP_TOPK) && op->dst != GP__BUF_OUTPUT)
            return fail(c, GP_ENOTSUP, "the output stage must write the model's output");
        if (op->dst == GP__BUF_OUTPUT && op->kind != GP__OP_ARGMAX && op->kind != GP__OP_TOPK) {
            if (op->kind == GP__OP_COPY)
                sp->dst_t = GP__KT_F32;
            else if (!wide)
                need_out = 1;
        }
    }
    c->op = NULL;
    if (need_in) st->in_elems = gp__shape_numel(m->in_shape);
    if (need_out) st->out_elems = gp__shape_numel(m->ops[m->n_ops - 1].out);
    return GP_OK;
}

/* One cudaMalloc for the slot: the plan's buffers, staging, and the cuDNN workspace when the
   cuBLASLt workspace is smaller than the largest convolution needs. */
static int slot_alloc(slot_state *st, const gp_batch *slot, ck *c) {
    gp__model *m = st->m;
    size_t es = kt_size(st->kt), cap = st->capacity, off = 0;
    size_t *offs = calloc((size_t)m->n_bufs + 3, sizeof *offs);
    st->bufs = calloc((size_t)m->n_bufs ? (size_t)m->n_bufs : 1, sizeof *st->bufs);
    if (!offs || !st->bufs) {
        free(offs);
        return fail(c, GP_ENOMEM, "out of memory planning the slot's buffers");
    }
    for (int i = 0; i < m->n_bufs; i++) {
        offs[i] = off;
        off = align_up(off + cap * m->bufs[i].elems * es);
    }
    size_t in_off = off;
    off = align_up(off + cap * st->in_elems * es);
    size_t out_off = off;
    off = align_up(off + cap * st->out_elems * es);
    size_t ws_off = off, lt_bytes = 0;
    (void)gp_cuda_workspace(slot, &lt_bytes);
    if (st->conv_ws_bytes > lt_bytes) off = align_up(off + st->conv_ws_bytes);
    if (off) {
        cudaError_t e = cudaMalloc(&st->arena, off);
        if (e != cudaSuccess) {
            st->arena = NULL;
            free(offs);
            return ck_rt(c, e, "cudaMalloc(activations)", __FILE__, __LINE__);
        }
        /* Zeroed once, so the first batches' padding items hold finite values. */
        e = cudaMemsetAsync(st->arena, 0, off, gp_cuda_stream(slot));
        if (e != cudaSuccess) {
            free(offs);
            return ck_rt(c, e, "cudaMemsetAsync(activations)", __FILE__, __LINE__);
        }
    }
    unsigned char *base = st->arena;
    for (int i = 0; i < m->n_bufs; i++)
        st->bufs[i] = base + offs[i];
    if (st->in_elems) st->instage = base + in_off;
    if (st->out_elems) st->ostage = base + out_off;
    if (st->conv_ws_bytes > lt_bytes) st->conv_ws = base + ws_off;
    free(offs);
    return GP_OK;
}

/* Operand references, once the buffers exist. The input is read as it came by PREP and COPY,
   and through the 16-bit staging copy by every other op; the output is written directly by
   COPY and the output stage, and through the staging buffer by the rest in 16 bit. */
static ref ref_of(const slot_state *st, const gp__op *op, int id, int is_dst) {
    if (id >= 0) return (ref){REF_PTR, st->bufs[id]};
    if (!is_dst) {
        if (st->instage && op->kind != GP__OP_PREP && op->kind != GP__OP_COPY)
            return (ref){REF_PTR, st->instage};
        return (ref){REF_IN, NULL};
    }
    if (st->ostage && op->kind != GP__OP_COPY && op->kind != GP__OP_ARGMAX &&
        op->kind != GP__OP_TOPK)
        return (ref){REF_PTR, st->ostage};
    return (ref){REF_OUT, NULL};
}

static void bind_steps(slot_state *st) {
    for (int i = 0; i < st->n_steps; i++) {
        step *sp = &st->steps[i];
        const gp__op *op = sp->op;
        sp->src = ref_of(st, op, op->src, 0);
        sp->src2 = op->kind == GP__OP_ADD ? ref_of(st, op, op->src2, 0) : sp->src;
        sp->dst = ref_of(st, op, op->dst, 1);
    }
}

int gp__model_cuda_setup(gp__model *m, const gp_batch *slot, void **state, char *err,
                         size_t err_len) {
    ck c = {err, err_len, NULL};
    if (state) *state = NULL;
    if (!m || !slot || !state || slot->backend != GP_BACKEND_CUDA || slot->capacity == 0)
        return fail(&c, GP_ENOTSUP, "CUDA model setup needs a CUDA slot with capacity");
    if (m->n_ops <= 0) return fail(&c, GP_ENOTSUP, "the model has no ops");
    slot_state *st = calloc(1, sizeof *st);
    if (!st) return fail(&c, GP_ENOMEM, "out of memory for the slot's CUDA state");
    st->m = m;
    st->device = gp_cuda_device(slot);
    st->capacity = slot->capacity;
    st->kt = act_type(m->precision);
    st->in_align = align_of(slot->in);
    st->out_align = align_of(slot->out);
    int rc;
    const dev_weights *w = NULL;
    cudaStream_t s = gp_cuda_stream(slot);
    if ((rc = make_buckets(st, &c)) != GP_OK ||
        (rc = weights_for(m, st->device, s, &c, &w)) != GP_OK ||
        (rc = plan_steps(st, w, &c)) != GP_OK)
        goto bad;
#ifdef GP_HAVE_CUDNN
    /* Conv plans first: their workspace sizes decide the slot's allocation. The plans do not
       need the buffers (the operand pointers are bound later). */
    for (int i = 0; i < st->n_steps; i++) {
        if (st->steps[i].op->kind != GP__OP_CONV2D) continue;
        c.op = st->steps[i].op;
        if ((rc = conv_setup(st, &st->steps[i], slot, &c)) == GP_OK) continue;
        if (rc == GP_ENOMEM) goto bad;
        /* cuDNN cannot plan this one (e.g. a data type its legacy API lacks here): the direct
           kernel runs it, slowly but exactly; the reason stays in the slot's note. */
        snprintf(st->note, sizeof st->note, "%s", err && err_len ? err : "cuDNN planning failed");
        if (err && err_len) err[0] = '\0';
        conv_free(st->steps[i].conv, st->n_buckets);
        st->steps[i].conv = NULL;
    }
    c.op = NULL;
#endif
    if ((rc = slot_alloc(st, slot, &c)) != GP_OK) goto bad;
    bind_steps(st);
    for (int i = 0; i < st->n_steps; i++) {
        step *sp = &st->steps[i];
        c.op = sp->op;
        if (sp->op->kind == GP__OP_LINEAR && (rc = lin_setup(st, sp, slot, &c)) != GP_OK) goto bad;
#ifdef GP_HAVE_CUDNN
        if (sp->op->kind == GP__OP_CONV2D && sp->conv) conv_try_fused(st, sp, slot);
#endif
    }
    c.op = NULL;
    /* The zeroing and the fused-conv trials finish here; a failure among them is reported
       now rather than by the first batch. */
    CK(&c, cudaStreamSynchronize(s));
    *state = st;
    return GP_OK;
bad:
    /* Let anything enqueued on the slot's stream finish before its memory goes. */
    cudaStreamSynchronize(s);
    state_free(st);
    return rc;
}

void gp__model_cuda_teardown(gp__model *m, void *state, const gp_batch *slot) {
    (void)m;
    slot_state *st = state;
    if (!st) return;
    cudaSetDevice(st->device); /* current already (gpupipe/cuda.h); cudaFree needs it */
    if (slot && slot->backend == GP_BACKEND_CUDA) cudaStreamSynchronize(gp_cuda_stream(slot));
    state_free(st);
}

/* ---- run ------------------------------------------------------------------------------------ */

static int run_step(slot_state *st, const step *sp, const gp_batch *b, int bi, ck *c) {
    const gp__op *op = sp->op;
    cudaStream_t s = gp_cuda_stream(b);
    size_t n = b->n, numel = n * gp__shape_numel(op->out);
    void *src = resolve(sp->src, b), *dst = resolve(sp->dst, b);
    switch (op->kind) {
    case GP__OP_PREP:
        CK(c, gp__k_prep(s, n, src, op->in_dtype == GP_DTYPE_U8, op->hwc, op->out.c, op->out.h,
                         op->out.w, sp->k->mean, sp->k->std, dst, st->kt));
        return GP_OK;
    case GP__OP_CONV2D:
        return conv_run(st, sp, b, bi, c);
    case GP__OP_LINEAR:
        return lin_run(st, sp, b, bi, c);
    case GP__OP_MAXPOOL2D:
    case GP__OP_AVGPOOL2D:
        CK(c, gp__k_pool2d(s, st->kt, op->kind == GP__OP_MAXPOOL2D, src, dst, n, op->in.c, op->in.h,
                           op->in.w, op->out.h, op->out.w, op->kh, op->kw, op->stride_h,
                           op->stride_w, op->pad_h, op->pad_w));
        return GP_OK;
    case GP__OP_GLOBALAVGPOOL:
        CK(c, gp__k_global_avgpool(s, st->kt, src, dst, n * (size_t)op->in.c,
                                   (size_t)op->in.h * (size_t)op->in.w));
        return GP_OK;
    case GP__OP_ACT:
        CK(c, gp__k_act(s, st->kt, src, dst, numel, (int)op->act));
        return GP_OK;
    case GP__OP_ADD:
        CK(c, gp__k_add_act(s, st->kt, src, resolve(sp->src2, b), dst, numel, (int)op->act));
        return GP_OK;
    case GP__OP_SOFTMAX:
        CK(c, gp__k_softmax(s, st->kt, src, dst, n, op->in.c));
        return GP_OK;
    case GP__OP_ARGMAX:
    case GP__OP_TOPK:
        CK(c, gp__k_topk(s, st->kt, src, (int64_t *)dst, n, op->in.c, op->k));
        return GP_OK;
    case GP__OP_COPY:
        CK(c, gp__k_convert(s, src, sp->src_t, dst, sp->dst_t, numel));
        return GP_OK;
    case GP__OP_COUNT_:
        break;
    }
    return fail(c, GP_EDEVICE, "unknown op kind %d", (int)op->kind);
}

static void record_failure(slot_state *st, int rc) {
    gp__model *m = st->m;
    pthread_mutex_lock(&m->mu);
    m->last_code = rc;
    snprintf(m->last_err, sizeof m->last_err, "%s", st->err);
    pthread_mutex_unlock(&m->mu);
}

int gp__model_cuda_run(gp__model *m, void *state, const gp_batch *b) {
    slot_state *st = state;
    if (!st || !b || st->m != m) return GP_EDEVICE;
    ck c = {st->err, sizeof st->err, NULL};
    int rc = GP_OK;
    if (b->n == 0) return GP_OK;
    if (b->n > st->capacity) {
        rc = fail(&c, GP_EDEVICE, "batch of %zu items exceeds the %zu the slot was set up for",
                  b->n, st->capacity);
        goto out;
    }
    if (align_of(b->in) < st->in_align || align_of(b->out) < st->out_align) {
        rc = fail(&c, GP_EDEVICE, "the slot's buffers are less aligned than at setup");
        goto out;
    }
    int bi = bucket_of(st, b->n);
    cudaStream_t s = gp_cuda_stream(b);
    if (st->instage) {
        cudaError_t e =
            gp__k_convert(s, b->in, GP__KT_F32, st->instage, st->kt, b->n * st->in_elems);
        if (e != cudaSuccess) {
            rc = ck_rt(&c, e, "gp__k_convert(input)", __FILE__, __LINE__);
            goto out;
        }
    }
    for (int i = 0; i < st->n_steps && rc == GP_OK; i++) {
        c.op = st->steps[i].op;
        rc = run_step(st, &st->steps[i], b, bi, &c);
    }
    c.op = NULL;
    if (rc == GP_OK && st->ostage) {
        cudaError_t e =
            gp__k_convert(s, st->ostage, st->kt, b->out, GP__KT_F32, b->n * st->out_elems);
        if (e != cudaSuccess) rc = ck_rt(&c, e, "gp__k_convert(output)", __FILE__, __LINE__);
    }
out:
    if (rc != GP_OK) {
        rc = GP_EDEVICE; /* the contract: GP_OK or GP_EDEVICE */
        record_failure(st, rc);
    }
    return rc;
}
