/*
 * gpsim's CUDA libraries (docs/DESIGN.md §11): cuBLAS handles with Sscal, and cuBLASLt matmuls
 * and cuDNN convolutions as the CUDA layers plan and run them.
 *
 * cuBLASLt is simulated from its documented semantics (cublasLt.h), not from the library's
 * code, so that the layers' descriptors are checked against the API rather than against
 * themselves: D = alpha op(A) op(B) + beta C over column-major layouts (rows, cols, leading
 * dimension), op = N or T per operand; epilogues DEFAULT, RELU, BIAS and RELU_BIAS (the bias
 * runs along D's rows, of D's type unless BIAS_DATA_TYPE says otherwise); A, B, C and D of one
 * type (fp32, fp16 or bf16), compute CUBLAS_COMPUTE_32F (double accumulation here) or
 * 32F_FAST_TF32 (fp32 operands, their inputs rounded to tf32), fp32 scale on the host.
 * What a real cuBLASLt would reject, or only show as corruption, fails here:
 *  - layouts whose shapes do not chain (op(A) m x k, op(B) k x n, C and D m x n), a leading
 *    dimension below the rows, a batch count, a row-major order, an attribute not simulated:
 *    CUBLAS_STATUS_INVALID_VALUE or CUBLAS_STATUS_NOT_SUPPORTED at the call;
 *  - an algorithm the heuristic did not return, a pointer less aligned than the preference
 *    promised when the algorithm was chosen, less workspace than the algorithm needs:
 *    CUBLAS_STATUS_INVALID_VALUE / NOT_SUPPORTED at the matmul;
 *  - an operand, bias or workspace outside one live device allocation: the context is lost
 *    (cudaErrorIllegalAddress) when the matmul runs, as a kernel straying would.
 * The heuristic answers with an algorithm that uses workspace (1 MiB, or what the preference
 * allows if less) first, so the workspace path runs; GPSIM_LT_EPILOGUES=0 makes it offer no
 * algorithm with an epilogue (as cuBLASLt may have none for a size), so the layers' fallback
 * (the bias as a kernel after a plain GEMM) runs too. cuDNN: its own section, below.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#ifdef GPSIM_HAVE_CUDNN
#include <cudnn.h>
#endif

#include "sim.h"

/* A switch of the simulation (GPSIM_*) set to "0". */
static int env_off(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "0") == 0;
}
#ifdef GPSIM_HAVE_CUDNN
/* One set to anything else. */
static int env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}
#endif

/* ---- cuBLAS: handles and Sscal ------------------------------------------------------------ */

struct cublasContext {
    cudaStream_t st;
};

SIM_API cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    *h = NULL;
    if (lost()) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (sim_fault("cublasCreate")) return CUBLAS_STATUS_ALLOC_FAILED;
    *h = calloc(1, sizeof **h);
    if (*h) sim_res(RES_BLAS, 1);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
SIM_API cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    free(h);
    sim_res(RES_BLAS, -1);
    return CUBLAS_STATUS_SUCCESS;
}
SIM_API cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t st) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->st = st;
    return CUBLAS_STATUS_SUCCESS;
}
SIM_API cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t *st) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    *st = h->st;
    return CUBLAS_STATUS_SUCCESS;
}
SIM_API cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    /* Checked (device memory of that size), not kept: the simulated Sscal needs none. */
    return bytes && kind_of(ws, bytes) != MEM_DEVICE ? CUBLAS_STATUS_INVALID_VALUE
                                                     : CUBLAS_STATUS_SUCCESS;
}

typedef struct sscal_args {
    float *x;
    size_t n;
    float alpha;
} sscal_args;

static int emu_sscal(const sim_op *o) {
    sscal_args a;
    memcpy(&a, o->args, sizeof a);
    if (!dev_ok(a.x, a.n * sizeof *a.x)) return cudaErrorIllegalAddress;
    for (size_t i = 0; i < a.n; i++)
        a.x[i] *= a.alpha;
    return 0;
}
static const sim_kernel sscal_work = {NULL, "cublasSscal", emu_sscal};

SIM_API cublasStatus_t cublasSscal_v2(cublasHandle_t h, int n, const float *alpha, float *x,
                                      int incx) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (lost()) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (n <= 0) return CUBLAS_STATUS_SUCCESS;
    if (incx != 1) return CUBLAS_STATUS_NOT_SUPPORTED; /* not simulated */
    sim_op o = {.kind = OP_KERNEL, .k = &sscal_work};
    sscal_args a = {x, (size_t)n, *alpha};
    memcpy(o.args, &a, sizeof a);
    return enqueue(h->st, &o) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                             : CUBLAS_STATUS_EXECUTION_FAILED;
}

/* ---- cuBLASLt ----------------------------------------------------------------------------- */

struct cublasLtContext {
    int unused;
};
SIM_API cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = NULL;
    if (lost()) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (sim_fault("cublasLtCreate")) return CUBLAS_STATUS_ALLOC_FAILED;
    *h = calloc(1, sizeof(struct cublasLtContext));
    if (*h) sim_res(RES_LT, 1);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
SIM_API cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    free(h);
    sim_res(RES_LT, -1);
    return CUBLAS_STATUS_SUCCESS;
}

/* The descriptors: handles to these (the header's semi-opaque structs are never touched); the
   algorithm, which the caller holds by value, carries an lt_algo in its words. */
typedef struct lt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
} lt_layout;
typedef struct lt_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t ta, tb;
    uint32_t epilogue;
    const void *bias;
    int32_t bias_type; /* -1: D's type */
} lt_desc;
typedef struct lt_pref {
    uint64_t max_ws;
    uint32_t align[4]; /* A, B, C, D: what the caller promises its pointers have */
} lt_pref;
#define LT_MAGIC 0x6770736d6c74616cull /* "gpsimltal": an algorithm this heuristic returned */
typedef struct lt_algo {
    uint64_t magic;
    uint64_t ws;
    uint32_t align[4];
} lt_algo;
_Static_assert(sizeof(lt_algo) <= sizeof(cublasLtMatmulAlgo_t), "algo fits");

#define LAYOUT(l) ((lt_layout *)(void *)(l))
#define DESC(d) ((lt_desc *)(void *)(d))
#define PREF(p) ((lt_pref *)(void *)(p))

static int lt_type(cudaDataType_t t, sim_t *out) {
    switch (t) {
    case CUDA_R_32F:
        *out = SIM_F32;
        return 1;
    case CUDA_R_16F:
        *out = SIM_F16;
        return 1;
    case CUDA_R_16BF:
        *out = SIM_BF16;
        return 1;
    default:
        return 0;
    }
}

SIM_API cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type,
                                                  uint64_t rows, uint64_t cols, int64_t ld) {
    sim_t t;
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    if (!lt_type(type, &t)) return CUBLAS_STATUS_NOT_SUPPORTED; /* not simulated */
    if (ld < (int64_t)rows || ld < 1) return CUBLAS_STATUS_INVALID_VALUE;
    if (sim_fault("cublasLtMatrixLayoutCreate")) return CUBLAS_STATUS_ALLOC_FAILED;
    lt_layout *x = malloc(sizeof *x);
    if (!x) return CUBLAS_STATUS_ALLOC_FAILED;
    sim_res(RES_LT_DESC, 1);
    *x = (lt_layout){type, rows, cols, ld};
    *l = (cublasLtMatrixLayout_t)(void *)x;
    return CUBLAS_STATUS_SUCCESS;
}
SIM_API cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                        cublasLtMatrixLayoutAttribute_t attr,
                                                        const void *buf, size_t size) {
    if (!l || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    lt_layout *x = LAYOUT(l), y = *x;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
    case CUBLASLT_MATRIX_LAYOUT_COLS:
        if (size != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(attr == CUBLASLT_MATRIX_LAYOUT_ROWS ? &y.rows : &y.cols, buf, size);
        break;
    case CUBLASLT_MATRIX_LAYOUT_LD:
        if (size != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&y.ld, buf, size);
        break;
    default:
        return CUBLAS_STATUS_NOT_SUPPORTED; /* not simulated */
    }
    if (y.ld < (int64_t)y.rows || y.ld < 1) return CUBLAS_STATUS_INVALID_VALUE;
    *x = y;
    return CUBLAS_STATUS_SUCCESS;
}
SIM_API cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    if (l) sim_res(RES_LT_DESC, -1);
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

SIM_API cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d,
                                                cublasComputeType_t compute, cudaDataType_t scale) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
        return CUBLAS_STATUS_NOT_SUPPORTED; /* not simulated */
    if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (sim_fault("cublasLtMatmulDescCreate")) return CUBLAS_STATUS_ALLOC_FAILED;
    lt_desc *x = malloc(sizeof *x);
    if (!x) return CUBLAS_STATUS_ALLOC_FAILED;
    sim_res(RES_LT_DESC, 1);
    *x = (lt_desc){.compute = compute,
                   .scale = scale,
                   .ta = CUBLAS_OP_N,
                   .tb = CUBLAS_OP_N,
                   .epilogue = CUBLASLT_EPILOGUE_DEFAULT,
                   .bias_type = -1};
    *d = (cublasLtMatmulDesc_t)(void *)x;
    return CUBLAS_STATUS_SUCCESS;
}
SIM_API cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    if (d) sim_res(RES_LT_DESC, -1);
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

static int set_attr(void *dst, size_t want, const void *buf, size_t size) {
    if (!buf || size != want) return 0;
    memcpy(dst, buf, size);
    return 1;
}

SIM_API cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                      cublasLtMatmulDescAttributes_t attr,
                                                      const void *buf, size_t size) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    lt_desc *x = DESC(d);
    int ok;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
        ok = set_attr(&x->ta, sizeof x->ta, buf, size) &&
             (x->ta == CUBLAS_OP_N || x->ta == CUBLAS_OP_T);
        break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
        ok = set_attr(&x->tb, sizeof x->tb, buf, size) &&
             (x->tb == CUBLAS_OP_N || x->tb == CUBLAS_OP_T);
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        ok = set_attr(&x->epilogue, sizeof x->epilogue, buf, size);
        if (ok && x->epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
            x->epilogue != CUBLASLT_EPILOGUE_RELU && x->epilogue != CUBLASLT_EPILOGUE_BIAS &&
            x->epilogue != CUBLASLT_EPILOGUE_RELU_BIAS)
            return CUBLAS_STATUS_NOT_SUPPORTED; /* not simulated */
        break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        ok = set_attr(&x->bias, sizeof x->bias, buf, size);
        break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        ok = set_attr(&x->bias_type, sizeof x->bias_type, buf, size);
        break;
    default:
        return CUBLAS_STATUS_NOT_SUPPORTED; /* not simulated: say so, never guess */
    }
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

SIM_API cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    if (sim_fault("cublasLtMatmulPreferenceCreate")) return CUBLAS_STATUS_ALLOC_FAILED;
    lt_pref *x = malloc(sizeof *x);
    if (!x) return CUBLAS_STATUS_ALLOC_FAILED;
    sim_res(RES_LT_DESC, 1);
    /* cublasLt.h: no workspace, and pointers 256-byte aligned, unless told otherwise */
    *x = (lt_pref){0, {256, 256, 256, 256}};
    *p = (cublasLtMatmulPreference_t)(void *)x;
    return CUBLAS_STATUS_SUCCESS;
}
SIM_API cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    if (p) sim_res(RES_LT_DESC, -1);
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}
SIM_API cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                            cublasLtMatmulPreferenceAttributes_t a,
                                                            const void *buf, size_t size) {
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    lt_pref *x = PREF(p);
    int ok, i = -1;
    switch (a) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        ok = set_attr(&x->max_ws, sizeof x->max_ws, buf, size);
        break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
        i = 0;
        break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
        i = 1;
        break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
        i = 2;
        break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        i = 3;
        break;
    default:
        return CUBLAS_STATUS_NOT_SUPPORTED; /* not simulated */
    }
    if (i >= 0) ok = set_attr(&x->align[i], sizeof x->align[i], buf, size) && x->align[i] > 0;
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

/* The shapes and types of one matmul, checked: CUBLAS_STATUS_SUCCESS when they chain. */
typedef struct lt_shape {
    uint64_t m, n, k;
    sim_t t, bias_t;
} lt_shape;

static cublasStatus_t lt_check(const lt_desc *d, const lt_layout *a, const lt_layout *b,
                               const lt_layout *c, const lt_layout *dd, lt_shape *s) {
    if (a->type != b->type || a->type != c->type || a->type != dd->type)
        return CUBLAS_STATUS_NOT_SUPPORTED; /* mixed types: not simulated */
    if (!lt_type(dd->type, &s->t)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && s->t != SIM_F32)
        return CUBLAS_STATUS_NOT_SUPPORTED; /* tf32 takes fp32 operands */
    s->m = dd->rows;
    s->n = dd->cols;
    s->k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t am = d->ta == CUBLAS_OP_N ? a->rows : a->cols;
    uint64_t bk = d->tb == CUBLAS_OP_N ? b->rows : b->cols;
    uint64_t bn = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    if (am != s->m || bk != s->k || bn != s->n || c->rows != s->m || c->cols != s->n)
        return CUBLAS_STATUS_INVALID_VALUE;
    s->bias_t = s->t;
    if (d->bias_type >= 0 && !lt_type((cudaDataType_t)d->bias_type, &s->bias_t))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

SIM_API cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t res[],
    int *returned) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !a || !b || !c || !d || !pref || requested < 1 || !res || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    lt_shape s;
    cublasStatus_t e = lt_check(DESC(desc), LAYOUT(a), LAYOUT(b), LAYOUT(c), LAYOUT(d), &s);
    if (e != CUBLAS_STATUS_SUCCESS) return e;
    if (DESC(desc)->epilogue != CUBLASLT_EPILOGUE_DEFAULT && env_off("GPSIM_LT_EPILOGUES"))
        return CUBLAS_STATUS_NOT_SUPPORTED; /* no algorithm for this configuration */
    const lt_pref *p = PREF(pref);
    uint64_t ws[2] = {p->max_ws < (1u << 20) ? p->max_ws : (1u << 20), 0};
    int n = requested < 2 ? requested : 2;
    for (int i = 0; i < n; i++) {
        memset(&res[i], 0, sizeof res[i]);
        lt_algo al = {LT_MAGIC, ws[i], {p->align[0], p->align[1], p->align[2], p->align[3]}};
        memcpy(res[i].algo.data, &al, sizeof al);
        res[i].workspaceSize = (size_t)ws[i];
        res[i].state = CUBLAS_STATUS_SUCCESS;
        res[i].wavesCount = 1.0f;
    }
    *returned = n;
    return CUBLAS_STATUS_SUCCESS;
}

/* An algorithm the heuristic returned, for these descriptors: its workspace. Any of this
   simulation's algorithms takes any shape, unless epilogues are off (GPSIM_LT_EPILOGUES). */
SIM_API cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                               cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                               cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                               const cublasLtMatmulAlgo_t *algo,
                                               cublasLtMatmulHeuristicResult_t *res) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !a || !b || !c || !d || !algo || !res) return CUBLAS_STATUS_INVALID_VALUE;
    lt_shape s;
    cublasStatus_t e = lt_check(DESC(desc), LAYOUT(a), LAYOUT(b), LAYOUT(c), LAYOUT(d), &s);
    if (e != CUBLAS_STATUS_SUCCESS) return e;
    lt_algo al;
    memcpy(&al, algo->data, sizeof al);
    if (al.magic != LT_MAGIC) return CUBLAS_STATUS_INVALID_VALUE;
    if (DESC(desc)->epilogue != CUBLASLT_EPILOGUE_DEFAULT && env_off("GPSIM_LT_EPILOGUES"))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(res, 0, sizeof *res);
    res->algo = *algo;
    res->workspaceSize = (size_t)al.ws;
    res->state = CUBLAS_STATUS_SUCCESS;
    res->wavesCount = 1.0f;
    return CUBLAS_STATUS_SUCCESS;
}

/* What the matmul's work reads, kept with the operation (it replays in a CUDA graph). */
typedef struct lt_args {
    const void *a, *b, *c, *bias;
    void *d;
    uint64_t m, n, k;
    int64_t lda, ldb, ldc, ldd;
    float alpha, beta;
    int32_t ta, tb, tf32, relu, t, bias_t;
} lt_args;
_Static_assert(sizeof(lt_args) <= SIM_MAX_ARGS, "the matmul's arguments fit an operation");

/* Elements a column-major rows x cols matrix with leading dimension ld spans. */
static size_t span(uint64_t rows, uint64_t cols, int64_t ld) {
    return rows && cols ? (size_t)(cols - 1) * (size_t)ld + (size_t)rows : 0;
}

static int emu_matmul(const sim_op *o) {
    lt_args x;
    memcpy(&x, o->args, sizeof x);
    sim_t t = (sim_t)x.t;
    size_t es = sim_size(t);
    uint64_t ar = x.ta == CUBLAS_OP_N ? x.m : x.k, ac = x.ta == CUBLAS_OP_N ? x.k : x.m;
    uint64_t br = x.tb == CUBLAS_OP_N ? x.k : x.n, bc = x.tb == CUBLAS_OP_N ? x.n : x.k;
    if (!dev_ok(x.a, span(ar, ac, x.lda) * es) || !dev_ok(x.b, span(br, bc, x.ldb) * es) ||
        !dev_ok(x.d, span(x.m, x.n, x.ldd) * es) ||
        (x.beta != 0.0f && !dev_ok(x.c, span(x.m, x.n, x.ldc) * es)) ||
        (x.bias && !dev_ok(x.bias, x.m * sim_size((sim_t)x.bias_t))))
        return cudaErrorIllegalAddress;
    for (uint64_t j = 0; j < x.n; j++)
        for (uint64_t i = 0; i < x.m; i++) {
            double acc = 0.0;
            for (uint64_t p = 0; p < x.k; p++) {
                size_t ai = x.ta == CUBLAS_OP_N ? i + p * (size_t)x.lda : p + i * (size_t)x.lda;
                size_t bi = x.tb == CUBLAS_OP_N ? p + j * (size_t)x.ldb : j + p * (size_t)x.ldb;
                float av = sim_ld(t, x.a, ai), bv = sim_ld(t, x.b, bi);
                if (x.tf32) av = sim_tf32(av), bv = sim_tf32(bv);
                acc += (double)av * (double)bv;
            }
            float v = x.alpha * (float)acc;
            if (x.beta != 0.0f) v += x.beta * sim_ld(t, x.c, i + j * (size_t)x.ldc);
            if (x.bias) v += sim_ld((sim_t)x.bias_t, x.bias, i);
            if (x.relu && v < 0.0f) v = 0.0f; /* NaN stays NaN */
            sim_st(t, x.d, i + j * (size_t)x.ldd, v);
        }
    return 0;
}
static const sim_kernel matmul_work = {NULL, "cublasLtMatmul", emu_matmul};

static int aligned(const void *p, uint32_t to) {
    return (uintptr_t)p % to == 0;
}

SIM_API cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                      const void *alpha, const void *A, cublasLtMatrixLayout_t a,
                                      const void *B, cublasLtMatrixLayout_t b, const void *beta,
                                      const void *C, cublasLtMatrixLayout_t c, void *D,
                                      cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t *algo,
                                      void *ws, size_t ws_bytes, cudaStream_t st) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (lost()) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (!desc || !a || !b || !c || !d || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    lt_shape s;
    const lt_desc *x = DESC(desc);
    cublasStatus_t e = lt_check(x, LAYOUT(a), LAYOUT(b), LAYOUT(c), LAYOUT(d), &s);
    if (e != CUBLAS_STATUS_SUCCESS) return e;
    /* The simulation needs the heuristic's algorithm (real cuBLASLt can pick one itself). */
    lt_algo al;
    if (!algo) return CUBLAS_STATUS_NOT_SUPPORTED;
    memcpy(&al, algo->data, sizeof al);
    if (al.magic != LT_MAGIC) return CUBLAS_STATUS_INVALID_VALUE;
    if (ws_bytes < al.ws || (al.ws && kind_of(ws, al.ws) != MEM_DEVICE))
        return CUBLAS_STATUS_INVALID_VALUE;
    /* The algorithm was chosen for pointers with the alignment the preference promised. */
    if (!aligned(A, al.align[0]) || !aligned(B, al.align[1]) || !aligned(C, al.align[2]) ||
        !aligned(D, al.align[3]))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    int bias = x->epilogue == CUBLASLT_EPILOGUE_BIAS || x->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
    if (bias && !x->bias) return CUBLAS_STATUS_INVALID_VALUE;
    lt_args g = {
        .a = A,
        .b = B,
        .c = C,
        .bias = bias ? x->bias : NULL,
        .d = D,
        .m = s.m,
        .n = s.n,
        .k = s.k,
        .lda = LAYOUT(a)->ld,
        .ldb = LAYOUT(b)->ld,
        .ldc = LAYOUT(c)->ld,
        .ldd = LAYOUT(d)->ld,
        .alpha = *(const float *)alpha,
        .beta = *(const float *)beta,
        .ta = x->ta,
        .tb = x->tb,
        .tf32 = x->compute == CUBLAS_COMPUTE_32F_FAST_TF32,
        .relu = x->epilogue == CUBLASLT_EPILOGUE_RELU || x->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS,
        .t = (int32_t)s.t,
        .bias_t = (int32_t)s.bias_t,
    };
    if (s.m == 0 || s.n == 0) return CUBLAS_STATUS_SUCCESS;
    sim_op o = {.kind = OP_KERNEL, .k = &matmul_work};
    memcpy(o.args, &g, sizeof g);
    return enqueue(st, &o) == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

/* ---- cuDNN: the legacy convolution API the CUDA conv2d layer uses ------------------------ */

#ifdef GPSIM_HAVE_CUDNN
/* From the documented semantics (cudnn_cnn.h) too: NCHW or NHWC tensors and filters (an NHWC
   filter is K x kh x kw x C; x, w and y of one layout, the fused call's z and bias too), 2-D
   cross-correlation with padding, stride, dilation and groups, y = alpha conv(x) + beta y and
   the fused y = act(alpha1 conv(x) + alpha2 z + bias) (relu, or identity with
   IMPLICIT_PRECOMP_GEMM only, as documented), fp32 compute for fp32 / fp16 / bf16 data; float
   data with a math type that allows tensor cores is read as tf32. The heuristic offers
   IMPLICIT_PRECOMP_GEMM with the descriptor's math type and 1 MiB of workspace, then
   IMPLICIT_GEMM with FMA math and none, so both the workspace and the fp32 rule (FMA only) are
   exercised; a forward checks the workspace against its algorithm's need. The environment:
   GPSIM_CUDNN=0 makes handle creation fail (cuDNN unavailable: conv2d on the direct kernel),
   GPSIM_DNN_FUSED=0 makes the fused call refuse (CUDNN_STATUS_NOT_SUPPORTED, as cuDNN does
   for a configuration it cannot fuse); GPSIM_DNN_FUSED_WRONG=1 makes it compute 1.25 conv(x)
   without a residual, and with one (alpha2 not 0) the convolution right and 2 z, and spares it
   GPSIM_DNN_LEGACY_SLOW (a fused form fast and wrong, which conv.c's check against the direct
   kernel must catch, the heuristic's first algorithm's too, and with a residual only through
   z); GPSIM_DNN_FUSED_FAST=1 spares it GPSIM_DNN_LEGACY_SLOW and leaves it right (a fused
   form fast and right, which the check must let through). */

struct cudnnContext {
    cudaStream_t st;
    long index; /* how many handles the process created before it */
};
struct cudnnTensorStruct {
    cudnnDataType_t type;
    int n, c, h, w, set;
    cudnnTensorFormat_t fmt;
};
struct cudnnFilterStruct {
    cudnnDataType_t type;
    int k, c, h, w, set;
    cudnnTensorFormat_t fmt;
};
struct cudnnConvolutionStruct {
    int ph, pw, u, v, dh, dw, groups, set;
    cudnnMathType_t math;
};
struct cudnnActivationStruct {
    cudnnActivationMode_t mode;
};

SIM_API cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
    *h = NULL;
    if (env_off("GPSIM_CUDNN")) return CUDNN_STATUS_NOT_INITIALIZED; /* as with no sub-library */
    if (lost()) return CUDNN_STATUS_EXECUTION_FAILED;
    if (sim_fault("cudnnCreate")) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    static _Atomic long created;
    *h = calloc(1, sizeof **h);
    if (*h) {
        sim_res(RES_DNN, 1);
        (*h)->index = atomic_fetch_add(&created, 1);
    }
    return *h ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
}
SIM_API cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    sim_res(RES_DNN, -1);
    free(h);
    return CUDNN_STATUS_SUCCESS;
}
SIM_API cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t st) {
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    h->st = st;
    return CUDNN_STATUS_SUCCESS;
}
SIM_API cudnnStatus_t cudnnGetStream(cudnnHandle_t h, cudaStream_t *st) {
    if (!h || !st) return CUDNN_STATUS_BAD_PARAM;
    *st = h->st;
    return CUDNN_STATUS_SUCCESS;
}

/* Descriptors: created zeroed, unusable until set. */
#define DNN_NEW(T, out, call)                                                                      \
    do {                                                                                           \
        if (!(out)) return CUDNN_STATUS_BAD_PARAM;                                                 \
        *(out) = sim_fault(call) ? NULL : calloc(1, sizeof(T));                                    \
        if (*(out)) sim_res(RES_DNN_DESC, 1);                                                      \
        return *(out) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED; \
    } while (0)
SIM_API cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) {
    DNN_NEW(struct cudnnTensorStruct, d, "cudnnCreateTensorDescriptor");
}
SIM_API cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) {
    DNN_NEW(struct cudnnFilterStruct, d, "cudnnCreateFilterDescriptor");
}
SIM_API cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) {
    DNN_NEW(struct cudnnConvolutionStruct, d, "cudnnCreateConvolutionDescriptor");
}
SIM_API cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t *d) {
    DNN_NEW(struct cudnnActivationStruct, d, "cudnnCreateActivationDescriptor");
}
SIM_API cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
    if (d) sim_res(RES_DNN_DESC, -1);
    free(d);
    return CUDNN_STATUS_SUCCESS;
}
SIM_API cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
    if (d) sim_res(RES_DNN_DESC, -1);
    free(d);
    return CUDNN_STATUS_SUCCESS;
}
SIM_API cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
    if (d) sim_res(RES_DNN_DESC, -1);
    free(d);
    return CUDNN_STATUS_SUCCESS;
}
SIM_API cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t d) {
    if (d) sim_res(RES_DNN_DESC, -1);
    free(d);
    return CUDNN_STATUS_SUCCESS;
}

static int dnn_type(cudnnDataType_t t, sim_t *out) {
    switch (t) {
    case CUDNN_DATA_FLOAT:
        *out = SIM_F32;
        return 1;
    case CUDNN_DATA_HALF:
        *out = SIM_F16;
        return 1;
    case CUDNN_DATA_BFLOAT16:
        *out = SIM_BF16;
        return 1;
    default:
        return 0;
    }
}

SIM_API cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d,
                                                 cudnnTensorFormat_t format, cudnnDataType_t type,
                                                 int n, int c, int h, int w) {
    sim_t t;
    if (!d || n < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    if ((format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) || !dnn_type(type, &t))
        return CUDNN_STATUS_NOT_SUPPORTED;
    *d = (struct cudnnTensorStruct){type, n, c, h, w, 1, format};
    return CUDNN_STATUS_SUCCESS;
}
SIM_API cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                                 cudnnTensorFormat_t format, int k, int c, int h,
                                                 int w) {
    sim_t t;
    if (!d || k < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    if ((format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) || !dnn_type(type, &t))
        return CUDNN_STATUS_NOT_SUPPORTED;
    *d = (struct cudnnFilterStruct){type, k, c, h, w, 1, format};
    return CUDNN_STATUS_SUCCESS;
}
SIM_API cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph,
                                                      int pw, int u, int v, int dh, int dw,
                                                      cudnnConvolutionMode_t mode,
                                                      cudnnDataType_t compute) {
    if (!d || ph < 0 || pw < 0 || u < 1 || v < 1 || dh < 1 || dw < 1) return CUDNN_STATUS_BAD_PARAM;
    /* torch.nn.Conv2d is a cross-correlation; fp32 compute is the only one simulated */
    if (mode != CUDNN_CROSS_CORRELATION || compute != CUDNN_DATA_FLOAT)
        return CUDNN_STATUS_NOT_SUPPORTED;
    d->ph = ph, d->pw = pw, d->u = u, d->v = v, d->dh = dh, d->dw = dw, d->set = 1;
    if (d->groups == 0) d->groups = 1;
    return CUDNN_STATUS_SUCCESS;
}
SIM_API cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
    if (!d || groups < 1) return CUDNN_STATUS_BAD_PARAM;
    d->groups = groups;
    return CUDNN_STATUS_SUCCESS;
}
SIM_API cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d,
                                                  cudnnMathType_t math) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (math != CUDNN_DEFAULT_MATH && math != CUDNN_TENSOR_OP_MATH &&
        math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && math != CUDNN_FMA_MATH)
        return CUDNN_STATUS_BAD_PARAM;
    d->math = math;
    return CUDNN_STATUS_SUCCESS;
}
SIM_API cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d,
                                                   cudnnActivationMode_t mode,
                                                   cudnnNanPropagation_t nan, double coef) {
    (void)nan, (void)coef;
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (mode != CUDNN_ACTIVATION_RELU && mode != CUDNN_ACTIVATION_IDENTITY)
        return CUDNN_STATUS_NOT_SUPPORTED; /* not simulated */
    d->mode = mode;
    return CUDNN_STATUS_SUCCESS;
}

/* The geometry of conv(x, w) into y, checked: 1 when the descriptors agree. */
static int dnn_geom(const struct cudnnTensorStruct *x, const struct cudnnFilterStruct *w,
                    const struct cudnnConvolutionStruct *cv, const struct cudnnTensorStruct *y,
                    sim_conv_geom *g, sim_t *t) {
    if (!x || !w || !cv || !x->set || !w->set || !cv->set) return 0;
    if (x->type != w->type || !dnn_type(x->type, t) || x->c != w->c * cv->groups ||
        w->k % cv->groups || x->fmt != w->fmt || (y && y->fmt != x->fmt))
        return 0;
    *g = (sim_conv_geom){
        x->c,  x->h,  x->w,   w->k,   0,      0,      w->h,       w->w,
        cv->u, cv->v, cv->ph, cv->pw, cv->dh, cv->dw, cv->groups, x->fmt == CUDNN_TENSOR_NHWC};
    g->Ho = 1 + (x->h + 2 * cv->ph - ((w->h - 1) * cv->dh + 1)) / cv->u;
    g->Wo = 1 + (x->w + 2 * cv->pw - ((w->w - 1) * cv->dw + 1)) / cv->v;
    if (g->Ho < 1 || g->Wo < 1) return 0;
    if (y && (!y->set || y->type != x->type || y->n != x->n || y->c != w->k || y->h != g->Ho ||
              y->w != g->Wo))
        return 0;
    return 1;
}

SIM_API cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t cv,
                                                            const cudnnTensorDescriptor_t x,
                                                            const cudnnFilterDescriptor_t w, int *n,
                                                            int *c, int *h, int *wo) {
    sim_conv_geom g;
    sim_t t;
    if (!dnn_geom(x, w, cv, NULL, &g, &t)) return CUDNN_STATUS_BAD_PARAM;
    *n = x->n, *c = g.Cout, *h = g.Ho, *wo = g.Wo;
    return CUDNN_STATUS_SUCCESS;
}

/* What the simulated IMPLICIT_PRECOMP_GEMM and graph engine 0 ask for: 1 MiB, or
   GPSIM_DNN_WS_MIB MiB (a workspace near or over conv.c's cap). */
static size_t dnn_ws_bytes(void) {
    const char *v = getenv("GPSIM_DNN_WS_MIB");
    return (v && *v ? (size_t)strtoull(v, NULL, 10) : 1) << 20;
}
static size_t dnn_ws(cudnnConvolutionFwdAlgo_t algo) {
    return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ? dnn_ws_bytes() : 0;
}
static int dnn_algo_ok(cudnnConvolutionFwdAlgo_t algo) {
    return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
           algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
}

SIM_API cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t y, const int requested,
    int *returned, cudnnConvolutionFwdAlgoPerf_t *perf) {
    sim_conv_geom g;
    sim_t t;
    if (!h || !returned || !perf || requested < 1) return CUDNN_STATUS_BAD_PARAM;
    if (!dnn_geom(x, w, cv, y, &g, &t)) return CUDNN_STATUS_BAD_PARAM;
    const cudnnConvolutionFwdAlgo_t algos[2] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                                CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM};
    const cudnnMathType_t maths[2] = {cv->math, CUDNN_FMA_MATH};
    int n = requested < 2 ? requested : 2;
    for (int i = 0; i < n; i++) {
        memset(&perf[i], 0, sizeof perf[i]);
        perf[i].algo = algos[i];
        perf[i].status = CUDNN_STATUS_SUCCESS;
        perf[i].time = (float)(i + 1);
        perf[i].memory = dnn_ws(algos[i]);
        perf[i].determinism = CUDNN_DETERMINISTIC;
        perf[i].mathType = maths[i];
    }
    *returned = n;
    return CUDNN_STATUS_SUCCESS;
}

SIM_API cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t y,
    cudnnConvolutionFwdAlgo_t algo, size_t *bytes) {
    sim_conv_geom g;
    sim_t t;
    if (!h || !bytes || !dnn_geom(x, w, cv, y, &g, &t)) return CUDNN_STATUS_BAD_PARAM;
    if (!dnn_algo_ok(algo)) return CUDNN_STATUS_NOT_SUPPORTED; /* not simulated */
    *bytes = dnn_ws(algo);
    return CUDNN_STATUS_SUCCESS;
}

/* The forward's work: y = act(alpha conv(x) + beta z + bias[c]) (cudnnConvolutionForward:
   z = y; the fused call: its z, which may be y). */
typedef struct dnn_args {
    const void *x, *w, *bias, *z;
    void *y;
    size_t n;
    sim_conv_geom g;
    float alpha, beta;
    int32_t t, tf32, relu;
    int32_t slow; /* GPSIM_DNN_LEGACY_SLOW: the work takes 4x its time, and 8 ms more */
} dnn_args;
_Static_assert(sizeof(dnn_args) <= SIM_MAX_ARGS, "the forward's arguments fit an operation");

static int emu_dnn_forward(const sim_op *o) {
    dnn_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = (sim_t)a.t;
    const size_t howo = (size_t)a.g.Ho * (size_t)a.g.Wo;
    const size_t total = a.n * (size_t)a.g.Cout * howo;
    if (!sim_conv_ok(t, &a.g, a.n, a.x, a.w, a.y) ||
        (a.bias && !dev_ok(a.bias, (size_t)a.g.Cout * sim_size(t))) ||
        !dev_ok(a.z, total * sim_size(t)))
        return cudaErrorIllegalAddress;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < total; i++) {
        float v = a.alpha * sim_conv_at(t, &a.g, a.x, a.w, i, a.tf32);
        if (a.beta != 0.0f) v += a.beta * sim_ld(t, a.z, i);
        if (a.bias) v += sim_ld(t, a.bias, (size_t)sim_conv_co(&a.g, i));
        sim_st(t, a.y, i, a.relu ? sim_act(1, v) : v);
    }
    if (a.slow) { /* a margin that other work on the machine does not undo */
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
        usleep((useconds_t)(3.0 * us + 8000.0));
    }
    return 0;
}
static const sim_kernel dnn_work = {NULL, "cudnnConvolutionForward", emu_dnn_forward};

/* Checks shared by both forwards; then the work on the handle's stream. */
static cudnnStatus_t dnn_forward(cudnnHandle_t h, const struct cudnnTensorStruct *x, const void *xp,
                                 const struct cudnnFilterStruct *w, const void *wp,
                                 const struct cudnnConvolutionStruct *cv,
                                 cudnnConvolutionFwdAlgo_t algo, void *ws, size_t ws_bytes,
                                 const struct cudnnTensorStruct *y, void *yp, const void *zp,
                                 float alpha, float beta, const void *bias, int relu, int fused) {
    sim_conv_geom g;
    sim_t t;
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    if (lost()) return CUDNN_STATUS_EXECUTION_FAILED;
    if (!dnn_geom(x, w, cv, y, &g, &t)) return CUDNN_STATUS_BAD_PARAM;
    if (env_on("GPSIM_DNN_FORWARD_FAIL")) return CUDNN_STATUS_NOT_SUPPORTED;
    if (!dnn_algo_ok(algo)) return CUDNN_STATUS_NOT_SUPPORTED;
    /* GPSIM_DNN_GEMM_WRONG: the heuristic's second algorithm computes something else, and fast */
    const int wrong =
        (algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM && env_on("GPSIM_DNN_GEMM_WRONG")) ||
        (fused && env_on("GPSIM_DNN_FUSED_WRONG"));
    const int fast = wrong || (fused && env_on("GPSIM_DNN_FUSED_FAST"));
    const int z_wrong = wrong && fused && beta != 0.0f; /* a residual: its z alone wrong */
    size_t need = dnn_ws(algo);
    if (ws_bytes < need || (need && kind_of(ws, need) != MEM_DEVICE)) return CUDNN_STATUS_BAD_PARAM;
    dnn_args a = {xp,
                  wp,
                  bias,
                  zp,
                  yp,
                  (size_t)x->n,
                  g,
                  wrong && !z_wrong ? 1.25f * alpha : alpha,
                  z_wrong ? 2.0f * beta : beta,
                  (int32_t)t,
                  t == SIM_F32 && cv->math != CUDNN_FMA_MATH,
                  relu,
                  env_on("GPSIM_DNN_LEGACY_SLOW") && !fast};
    sim_op o = {.kind = OP_KERNEL, .k = &dnn_work};
    memcpy(o.args, &a, sizeof a);
    return enqueue(h->st, &o) == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

SIM_API cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha,
                                              const cudnnTensorDescriptor_t xd, const void *x,
                                              const cudnnFilterDescriptor_t wd, const void *w,
                                              const cudnnConvolutionDescriptor_t cv,
                                              cudnnConvolutionFwdAlgo_t algo, void *ws,
                                              size_t ws_bytes, const void *beta,
                                              const cudnnTensorDescriptor_t yd, void *y) {
    if (!alpha || !beta) return CUDNN_STATUS_BAD_PARAM;
    return dnn_forward(h, xd, x, wd, w, cv, algo, ws, ws_bytes, yd, y, y, *(const float *)alpha,
                       *(const float *)beta, NULL, 0, 0);
}

SIM_API cudnnStatus_t cudnnConvolutionBiasActivationForward(
    cudnnHandle_t h, const void *alpha1, const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t cv,
    cudnnConvolutionFwdAlgo_t algo, void *ws, size_t ws_bytes, const void *alpha2,
    const cudnnTensorDescriptor_t zd, const void *z, const cudnnTensorDescriptor_t bd,
    const void *bias, const cudnnActivationDescriptor_t act, const cudnnTensorDescriptor_t yd,
    void *y) {
    if (!alpha1 || !alpha2 || !zd || !bd || !act || !bias) return CUDNN_STATUS_BAD_PARAM;
    if (env_off("GPSIM_DNN_FUSED")) return CUDNN_STATUS_NOT_SUPPORTED;
    /* z: y's shape and type (y itself with alpha2 0, or the layer's folded residual); a bias of
       y's type, one per output channel */
    if (!z || zd->set != 1 || zd->type != yd->type || zd->n != yd->n || zd->c != yd->c ||
        zd->h != yd->h || zd->w != yd->w || zd->fmt != yd->fmt)
        return CUDNN_STATUS_BAD_PARAM;
    if (!bd->set || bd->type != yd->type || bd->n != 1 || bd->c != yd->c || bd->h != 1 ||
        bd->w != 1 || bd->fmt != yd->fmt)
        return CUDNN_STATUS_BAD_PARAM;
    if (act->mode == CUDNN_ACTIVATION_IDENTITY &&
        algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
        return CUDNN_STATUS_NOT_SUPPORTED; /* as documented */
    return dnn_forward(h, xd, x, wd, w, cv, algo, ws, ws_bytes, yd, y, z, *(const float *)alpha1,
                       *(const float *)alpha2, bias, act->mode == CUDNN_ACTIVATION_RELU, 1);
}

/* The graph (backend) API, as far as a one-convolution graph goes (conv2d's graph-API candidates,
   lib/cuda/conv_graph.c, and bench/conv-bench's (g)): descriptors hold typed attributes, checked
   against a table of what each kind accepts (attribute, type, element counts), as cuDNN checks
   them; Finalize checks what each kind requires: a tensor of 4 dimensions, a 2-d cross-correlation
   with fp32 compute, a forward convolution whose x, w and y agree, a graph of that one operation, a
   heuristic on a finalized graph, a plan of one of the heuristic's configurations, a variant
   pack of as many ids as pointers. The heuristic offers two engines in mode A, INSTANT and B
   (engine 0: 1 MiB of workspace; engine 1: TENSOR_CORE, none) and engine 0 alone as the
   fallback list, so the workspace, the fp32 note filter and a repeated plan all happen; a plan
   for x, w and y not all packed NCHW or all packed NHWC (the filter K x kh x kw x C) is
   CUDNN_STATUS_NOT_SUPPORTED.
   Execute finds x, w and y by unique id in the variant pack and runs the legacy forward's work
   (engine 1 reads fp32 as tf32). GPSIM_DNN_LEGACY_SLOW=1 makes every legacy forward take 4x its
   time and 8 ms more, so the plans win a timing; GPSIM_DNN_GRAPH_WRONG=1 scales every plan's output
   by 1.25 (an engine computing something else, which conv.c's check against the direct kernel must
   catch); GPSIM_DNN_PLAN_MS=N makes finalizing a plan take N ms of wall time (an engine slow to
   build, which conv.c's planning caps must bound); GPSIM_DNN_GEMM_WRONG=1 scales the legacy
   IMPLICIT_GEMM's output (the heuristic's second algorithm here) by 1.25 and spares it
   GPSIM_DNN_LEGACY_SLOW (an algorithm fast and inaccurate, which conv.c must also check);
   GPSIM_DNN_WS_MIB=N makes IMPLICIT_PRECOMP_GEMM and engine 0 ask for N MiB of workspace;
   GPSIM_DNN_FORWARD_FAIL=1 makes every forward, legacy or plan, refuse to run
   (CUDNN_STATUS_NOT_SUPPORTED) while planning succeeds: a convolution nothing of cuDNN's runs,
   which conv.c must move to the direct kernel rather than fail its batches;
   GPSIM_DNN_REDUCED=1 notes engine 1 REDUCED_PRECISION_REDUCTION too (sums in 16 bits: what
   conv.c forbids and bench/conv-bench's (r) times; its work stays the same here). */

#define SB_ATTRS 12
#define SB_BYTES 64

typedef struct sb_attr {
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int64_t n;
    unsigned char v[SB_BYTES];
} sb_attr;

typedef struct sb_desc {
    cudnnBackendDescriptorType_t kind;
    int final;
    int nattr;
    sb_attr a[SB_ATTRS];
    struct sb_desc *graph; /* engine config, engine: the graph the heuristic answered for */
    int engine;            /* engine config, engine: 0 or 1 */
} sb_desc;

typedef struct sb_rule {
    cudnnBackendDescriptorType_t kind;
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int lo, hi, required;
} sb_rule;

static const sb_rule SB_RULES[] = {
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1, 1},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 1, 8, 1},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 1, 8, 1},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, 1, 1},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, 1, 1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE,
     1, 1, 1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
     CUDNN_TYPE_CONVOLUTION_MODE, 1, 1, 1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1,
     1, 1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 1, 3,
     1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64,
     1, 3, 1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 1,
     3, 1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64,
     1, 3, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, 1, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, 1, 1},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, (cudnnBackendAttributeName_t)800, CUDNN_TYPE_HANDLE,
     1, 1, 1}, /* CUDNN_ATTR_OPERATIONGRAPH_HANDLE (deprecated, still the way to give the handle) */
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_OPS,
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 8, 1},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, 1},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, 1,
     1},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, (cudnnBackendAttributeName_t)400, CUDNN_TYPE_HANDLE,
     1, 1, 1}, /* CUDNN_ATTR_EXECUTION_PLAN_HANDLE (deprecated, as above) */
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, 1},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 1,
     8, 1},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
     CUDNN_TYPE_VOID_PTR, 1, 8, 1},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
     1, 1, 1},
};

static size_t sb_size(cudnnBackendAttributeType_t t) {
    switch (t) {
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
        return sizeof(void *);
    case CUDNN_TYPE_INT64:
    case CUDNN_TYPE_DOUBLE:
        return 8;
    case CUDNN_TYPE_CHAR:
        return 1;
    default: /* the enums, float, int32 */
        return 4;
    }
}

static const sb_attr *sb_get(const sb_desc *d, cudnnBackendAttributeName_t name) {
    for (int i = 0; i < d->nattr; i++)
        if (d->a[i].name == name) return &d->a[i];
    return NULL;
}
static int64_t sb_i64(const sb_desc *d, cudnnBackendAttributeName_t name, int64_t i) {
    const sb_attr *a = sb_get(d, name);
    int64_t v = 0;
    if (a && i < a->n) memcpy(&v, a->v + 8 * i, 8);
    return v;
}
static int32_t sb_i32(const sb_desc *d, cudnnBackendAttributeName_t name) {
    const sb_attr *a = sb_get(d, name);
    int32_t v = -1;
    if (a) memcpy(&v, a->v, 4);
    return v;
}
static sb_desc *sb_ptr(const sb_desc *d, cudnnBackendAttributeName_t name, int64_t i) {
    const sb_attr *a = sb_get(d, name);
    sb_desc *p = NULL;
    if (a && i < a->n) memcpy(&p, a->v + sizeof p * i, sizeof p);
    return p;
}

SIM_API cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t kind,
                                                   cudnnBackendDescriptor_t *out) {
    if (!out) return CUDNN_STATUS_BAD_PARAM;
    if (sim_fault("cudnnBackendCreateDescriptor"))
        return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    sb_desc *d = calloc(1, sizeof *d);
    if (!d) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    sim_res(RES_DNN_BACKEND, 1);
    d->kind = kind;
    *out = d;
    return CUDNN_STATUS_SUCCESS;
}
SIM_API cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
    if (d) sim_res(RES_DNN_BACKEND, -1);
    free(d);
    return CUDNN_STATUS_SUCCESS;
}

SIM_API cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t desc,
                                               cudnnBackendAttributeName_t name,
                                               cudnnBackendAttributeType_t type, int64_t n,
                                               const void *v) {
    sb_desc *d = desc;
    const sb_rule *r = NULL;
    if (!d || !v || n < 1) return CUDNN_STATUS_BAD_PARAM;
    if (d->final) return CUDNN_STATUS_NOT_INITIALIZED; /* a finalized descriptor is read-only */
    for (size_t i = 0; i < sizeof SB_RULES / sizeof *SB_RULES; i++)
        if (SB_RULES[i].kind == d->kind && SB_RULES[i].name == name) r = &SB_RULES[i];
    if (!r) return CUDNN_STATUS_NOT_SUPPORTED; /* not simulated for this kind */
    if (type != r->type || n < r->lo || n > r->hi || (size_t)n * sb_size(type) > SB_BYTES)
        return CUDNN_STATUS_BAD_PARAM;
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (int64_t i = 0; i < n; i++) { /* the descriptors given must be finalized */
            const sb_desc *p = ((const cudnnBackendDescriptor_t *)v)[i];
            if (!p || !p->final) return CUDNN_STATUS_BAD_PARAM;
        }
    sb_attr *a = (sb_attr *)sb_get(d, name);
    if (!a) {
        if (d->nattr == SB_ATTRS) return CUDNN_STATUS_INTERNAL_ERROR;
        a = &d->a[d->nattr++];
    }
    a->name = name, a->type = type, a->n = n;
    memcpy(a->v, v, (size_t)n * sb_size(type));
    return CUDNN_STATUS_SUCCESS;
}

/* The tensor's layout, of the two the simulated engines read: 0 packed NCHW, 1 packed NHWC
   (dimensions N, C, H, W; strides C H W, 1, W C, C), -1 neither. */
static int sb_layout(const sb_desc *t) {
    static const int order[2][4] = {{3, 2, 1, 0}, {1, 3, 2, 0}}; /* innermost first */
    for (int l = 0; l < 2; l++) {
        int64_t s = 1, ok = 1;
        for (int k = 0; k < 4; k++) {
            int i = order[l][k];
            ok &= sb_i64(t, CUDNN_ATTR_TENSOR_STRIDES, i) == s;
            s *= sb_i64(t, CUDNN_ATTR_TENSOR_DIMENSIONS, i);
        }
        if (ok) return l;
    }
    return -1;
}

/* The convolution's geometry and data type from a finalized forward operation. */
static int sb_geom(const sb_desc *op, sim_conv_geom *g, sim_t *t, size_t *n) {
    const sb_desc *x = sb_ptr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, 0),
                  *w = sb_ptr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, 0),
                  *y = sb_ptr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, 0),
                  *cv = sb_ptr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, 0);
    if (!x || !w || !y || !cv || x->kind != CUDNN_BACKEND_TENSOR_DESCRIPTOR ||
        w->kind != CUDNN_BACKEND_TENSOR_DESCRIPTOR || y->kind != CUDNN_BACKEND_TENSOR_DESCRIPTOR ||
        cv->kind != CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)
        return 0;
    cudnnDataType_t dt = (cudnnDataType_t)sb_i32(x, CUDNN_ATTR_TENSOR_DATA_TYPE);
    if (!dnn_type(dt, t) || sb_i32(w, CUDNN_ATTR_TENSOR_DATA_TYPE) != (int32_t)dt ||
        sb_i32(y, CUDNN_ATTR_TENSOR_DATA_TYPE) != (int32_t)dt)
        return 0;
#define D(T, i) ((int)sb_i64((T), CUDNN_ATTR_TENSOR_DIMENSIONS, (i)))
#define C(a, i) ((int)sb_i64(cv, (a), (i)))
    *g = (sim_conv_geom){D(x, 1),
                         D(x, 2),
                         D(x, 3),
                         D(w, 0),
                         0,
                         0,
                         D(w, 2),
                         D(w, 3),
                         C(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, 0),
                         C(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, 1),
                         C(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, 0),
                         C(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, 1),
                         C(CUDNN_ATTR_CONVOLUTION_DILATIONS, 0),
                         C(CUDNN_ATTR_CONVOLUTION_DILATIONS, 1),
                         1,
                         sb_layout(x) == 1};
    if (D(w, 1) != g->Cin || g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->ph < 0 ||
        g->pw < 0 || C(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, 0) != g->ph ||
        C(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, 1) != g->pw)
        return 0;
    g->Ho = 1 + (g->H + 2 * g->ph - ((g->kh - 1) * g->dh + 1)) / g->sh;
    g->Wo = 1 + (g->W + 2 * g->pw - ((g->kw - 1) * g->dw + 1)) / g->sw;
    *n = (size_t)D(x, 0);
    int ok = g->Ho >= 1 && g->Wo >= 1 && D(y, 0) == D(x, 0) && D(y, 1) == g->Cout &&
             D(y, 2) == g->Ho && D(y, 3) == g->Wo;
#undef C
#undef D
    return ok;
}

static const sb_desc *sb_graph_op(const sb_desc *og) {
    return og ? sb_ptr(og, CUDNN_ATTR_OPERATIONGRAPH_OPS, 0) : NULL;
}

SIM_API cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc) {
    sb_desc *d = desc;
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (d->final) return CUDNN_STATUS_BAD_PARAM;
    for (size_t i = 0; i < sizeof SB_RULES / sizeof *SB_RULES; i++)
        if (SB_RULES[i].kind == d->kind && SB_RULES[i].required && !sb_get(d, SB_RULES[i].name))
            return CUDNN_STATUS_BAD_PARAM; /* a required attribute is missing */
    sim_conv_geom g;
    sim_t t;
    size_t n;
    switch (d->kind) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: {
        sim_t tt;
        if (sb_get(d, CUDNN_ATTR_TENSOR_DIMENSIONS)->n != sb_get(d, CUDNN_ATTR_TENSOR_STRIDES)->n)
            return CUDNN_STATUS_BAD_PARAM;
        if (sb_get(d, CUDNN_ATTR_TENSOR_DIMENSIONS)->n != 4 ||
            !dnn_type((cudnnDataType_t)sb_i32(d, CUDNN_ATTR_TENSOR_DATA_TYPE), &tt))
            return CUDNN_STATUS_NOT_SUPPORTED;
        for (int i = 0; i < 4; i++)
            if (sb_i64(d, CUDNN_ATTR_TENSOR_DIMENSIONS, i) < 1 ||
                sb_i64(d, CUDNN_ATTR_TENSOR_STRIDES, i) < 1)
                return CUDNN_STATUS_BAD_PARAM;
        break;
    }
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
        if (sb_i64(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 0) != 2 ||
            sb_get(d, CUDNN_ATTR_CONVOLUTION_DILATIONS)->n != 2 ||
            sb_get(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES)->n != 2 ||
            sb_get(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS)->n != 2 ||
            sb_get(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS)->n != 2)
            return CUDNN_STATUS_BAD_PARAM;
        if (sb_i32(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE) != CUDNN_CROSS_CORRELATION ||
            sb_i32(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE) != CUDNN_DATA_FLOAT)
            return CUDNN_STATUS_NOT_SUPPORTED;
        break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
        if (!sb_geom(d, &g, &t, &n)) return CUDNN_STATUS_BAD_PARAM;
        break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: {
        const sb_desc *op = sb_graph_op(d);
        void *h = NULL;
        memcpy(&h, sb_get(d, (cudnnBackendAttributeName_t)800)->v, sizeof h);
        if (!h) return CUDNN_STATUS_BAD_PARAM;
        if (sb_get(d, CUDNN_ATTR_OPERATIONGRAPH_OPS)->n != 1 ||
            op->kind != CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR)
            return CUDNN_STATUS_NOT_SUPPORTED; /* one forward convolution only */
        break;
    }
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: {
        const sb_desc *og = sb_ptr(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, 0);
        int32_t mode = sb_i32(d, CUDNN_ATTR_ENGINEHEUR_MODE);
        if (og->kind != CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR || mode < 0 ||
            mode >= CUDNN_HEUR_MODES_COUNT)
            return CUDNN_STATUS_BAD_PARAM;
        break;
    }
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
        const sb_desc *ec = sb_ptr(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, 0);
        void *h = NULL;
        memcpy(&h, sb_get(d, (cudnnBackendAttributeName_t)400)->v, sizeof h);
        if (!h || ec->kind != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR || !ec->graph)
            return CUDNN_STATUS_BAD_PARAM;
        const sb_desc *op = sb_graph_op(ec->graph);
        const cudnnBackendAttributeName_t ts[3] = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                                   CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                                   CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
        int lay = sb_layout(sb_ptr(op, ts[0], 0));
        for (int i = 0; i < 3; i++) /* x, w and y packed in one of the two layouts */
            if (lay < 0 || sb_layout(sb_ptr(op, ts[i], 0)) != lay)
                return CUDNN_STATUS_NOT_SUPPORTED;
        d->graph = ec->graph;
        d->engine = ec->engine;
        const char *ms = getenv("GPSIM_DNN_PLAN_MS");
        if (ms && atoi(ms) > 0) {
            struct timespec slow = {atoi(ms) / 1000, (long)(atoi(ms) % 1000) * 1000000L};
            nanosleep(&slow, NULL);
        }
        break;
    }
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
        if (sb_get(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)->n !=
            sb_get(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)->n)
            return CUDNN_STATUS_BAD_PARAM;
        break;
    default:
        return CUDNN_STATUS_NOT_SUPPORTED; /* engine configs and engines come from a Get */
    }
    d->final = 1;
    return CUDNN_STATUS_SUCCESS;
}

#define SB_ENGINES 2 /* engine 0: 1 MiB of workspace; engine 1: tensor cores, none */

static cudnnStatus_t sb_put(cudnnBackendAttributeType_t want, cudnnBackendAttributeType_t type,
                            int64_t requested, int64_t *count, void *out, const void *v,
                            int64_t n) {
    if (type != want || !count) return CUDNN_STATUS_BAD_PARAM;
    *count = n;
    if (requested > 0 && out)
        memcpy(out, v, (size_t)(requested < n ? requested : n) * sb_size(type));
    return CUDNN_STATUS_SUCCESS;
}

SIM_API cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const desc,
                                               cudnnBackendAttributeName_t name,
                                               cudnnBackendAttributeType_t type, int64_t requested,
                                               int64_t *count, void *out) {
    sb_desc *d = desc;
    if (!d || !count || requested < 0 || (requested > 0 && !out)) return CUDNN_STATUS_BAD_PARAM;
    if (!d->final) return CUDNN_STATUS_NOT_INITIALIZED;
    if (d->kind == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
        int64_t n =
            sb_i32(d, CUDNN_ATTR_ENGINEHEUR_MODE) == CUDNN_HEUR_MODE_FALLBACK ? 1 : SB_ENGINES;
        if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        if (requested == 0) {
            *count = n;
            return CUDNN_STATUS_SUCCESS;
        }
        int64_t k = requested < n ? requested : n;
        for (int64_t i = 0; i < k; i++) { /* engine configs the caller created */
            sb_desc *ec = ((cudnnBackendDescriptor_t *)out)[i];
            if (!ec || ec->kind != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
                return CUDNN_STATUS_BAD_PARAM;
            ec->graph = sb_ptr(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, 0);
            ec->engine = (int)i;
            ec->final = 1;
        }
        *count = k;
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->kind == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && name == CUDNN_ATTR_ENGINECFG_ENGINE) {
        if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR || requested < 1) return CUDNN_STATUS_BAD_PARAM;
        sb_desc *e = *(cudnnBackendDescriptor_t *)out;
        if (!e || e->kind != CUDNN_BACKEND_ENGINE_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        e->graph = d->graph, e->engine = d->engine, e->final = 1;
        *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->kind == CUDNN_BACKEND_ENGINE_DESCRIPTOR) {
        const int64_t idx = d->engine;
        const cudnnBackendNumericalNote_t tc[2] = {
            CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION};
        if (name == CUDNN_ATTR_ENGINE_GLOBAL_INDEX)
            return sb_put(CUDNN_TYPE_INT64, type, requested, count, out, &idx, 1);
        if (name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE)
            return sb_put(CUDNN_TYPE_NUMERICAL_NOTE, type, requested, count, out, tc,
                          d->engine != 1                ? 0
                          : env_on("GPSIM_DNN_REDUCED") ? 2
                                                        : 1);
        if (name == CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE)
            return sb_put(CUDNN_TYPE_BEHAVIOR_NOTE, type, requested, count, out, tc, 0);
    }
    if (d->kind == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
        if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
            int64_t ws = d->engine == 0 ? (int64_t)dnn_ws_bytes() : 0;
            return sb_put(CUDNN_TYPE_INT64, type, requested, count, out, &ws, 1);
        }
        if (name == CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION) {
            char json[64];
            int len = snprintf(json, sizeof json, "{\"gpsim_engine\":%d}", d->engine);
            return sb_put(CUDNN_TYPE_CHAR, type, requested, count, out, json, len + 1);
        }
    }
    return CUDNN_STATUS_NOT_SUPPORTED; /* not simulated */
}

SIM_API cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan,
                                          cudnnBackendDescriptor_t pack) {
    const sb_desc *p = plan, *vp = pack;
    if (!h || !p || !vp || !p->final || !vp->final ||
        p->kind != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
        vp->kind != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        return CUDNN_STATUS_BAD_PARAM;
    if (lost()) return CUDNN_STATUS_EXECUTION_FAILED;
    /* GPSIM_DNN_EXEC_FIRST_ONLY: plans run on the process's first handle only (an engine that a
       later slot's handle cannot run, which conv.c must find at setup, not at a batch) */
    if (h->index > 0 && env_on("GPSIM_DNN_EXEC_FIRST_ONLY")) return CUDNN_STATUS_NOT_SUPPORTED;
    if (env_on("GPSIM_DNN_FORWARD_FAIL")) return CUDNN_STATUS_NOT_SUPPORTED;
    const sb_desc *op = sb_graph_op(p->graph);
    sim_conv_geom g;
    sim_t t;
    size_t n;
    if (!op || !sb_geom(op, &g, &t, &n)) return CUDNN_STATUS_BAD_PARAM;
    /* x, w and y by unique id */
    const cudnnBackendAttributeName_t ts[3] = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
    void *ptr[3] = {NULL, NULL, NULL};
    const sb_attr *ids = sb_get(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    for (int k = 0; k < 3; k++) {
        int64_t uid = sb_i64(sb_ptr(op, ts[k], 0), CUDNN_ATTR_TENSOR_UNIQUE_ID, 0);
        for (int64_t i = 0; i < ids->n; i++)
            if (sb_i64(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, i) == uid)
                memcpy(&ptr[k], sb_get(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)->v + 8 * i,
                       sizeof ptr[k]);
        if (!ptr[k]) return CUDNN_STATUS_BAD_PARAM; /* a tensor without a pointer */
    }
    void *ws = NULL;
    memcpy(&ws, sb_get(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)->v, sizeof ws);
    if (p->engine == 0 && kind_of(ws, dnn_ws_bytes()) != MEM_DEVICE) return CUDNN_STATUS_BAD_PARAM;
    float alpha, beta;
    memcpy(&alpha, sb_get(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA)->v, 4);
    memcpy(&beta, sb_get(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA)->v, 4);
    if (env_on("GPSIM_DNN_GRAPH_WRONG")) alpha *= 1.25f; /* an engine computing something else */
    dnn_args a = {ptr[0],
                  ptr[1],
                  NULL,
                  ptr[2],
                  ptr[2],
                  n,
                  g,
                  alpha,
                  beta,
                  (int32_t)t,
                  t == SIM_F32 && p->engine == 1,
                  0,
                  0};
    sim_op o = {.kind = OP_KERNEL, .k = &dnn_work};
    memcpy(o.args, &a, sizeof a);
    return enqueue(h->st, &o) == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}
#endif
