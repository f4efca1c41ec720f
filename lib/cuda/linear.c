/*
 * Planned cuBLASLt GEMMs (gp__gemm, layers.h) and LINEAR on them: per bucket a layout and the
 * heuristic's algorithm, chosen at setup within the slot's cuBLASLt workspace; the bias (and
 * relu) in the epilogue, other activations as a kernel after it. ATTENTION (attention.c) plans
 * its two projections here too.
 *
 * Row-major y[n][M] = x[n][K] W^T + b, W [M][K] row-major, in cuBLASLt's column-major terms:
 * D (M x n, ld M) = op(A) B with A = W stored K x M (ld K) and op = T, B = x stored K x n
 * (ld K). The bias runs along D's rows (M), as CUBLASLT_EPILOGUE_BIAS broadcasts it.
 * gelu is the erf form; cuBLASLt's GELU epilogue is the tanh form, so it is not fused.
 * Where the heuristic has no algorithm with the bias epilogue for a size (it may have none for
 * 16-bit types with odd K, or N = 1), that size runs the GEMM without an epilogue and the bias
 * (and relu) as a kernel after it; the slot's note says so (stats.backend_note).
 */
#include <stdlib.h>
#include <string.h>

#include "gpupipe/cuda.h"

#include "layers.h"

#define HEUR_RESULTS 8

typedef struct lin_bucket {
    cublasLtMatrixLayout_t b, d;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
    int plain; /* the algorithm is for `plain`: bias (and relu) by a kernel after it */
} lin_bucket;

struct gp__gemm {
    cublasLtMatmulDesc_t desc;  /* with the bias (+ relu) epilogue */
    cublasLtMatmulDesc_t plain; /* without: made when a size needs it, else NULL */
    cublasComputeType_t ct;
    gp__kt kt;
    uint64_t M;
    const float *bias_f32;
    int relu;
    cublasLtMatrixLayout_t a;
    lin_bucket *bk; /* per bucket */
    /* The GEMM's N per bucket: the pipeline's batch buckets, or, token by token, powers of two
       up to the slot's token capacity (a batch's N is its token count, set per batch). */
    size_t *sizes;
    int n_sizes;
    int tokens;
    cublasLtMatmulPreference_t pref; /* tokens: kept for a batch whose N the bucket's
                                        algorithm does not take */
    size_t ws_bytes;
    const void *w;
};
typedef struct gp__gemm lin_plan;

static cudaDataType_t blas_type(gp__kt t) {
    return t == GP__KT_F16 ? CUDA_R_16F : t == GP__KT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static int set_pref(ck *c, cublasLtMatmulPreference_t pref, uint64_t ws, uint32_t al_a,
                    uint32_t al_b, uint32_t al_d) {
    CK(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                               sizeof ws));
    CK(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                               &al_a, sizeof al_a));
    CK(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                               &al_b, sizeof al_b));
    CK(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                               &al_d, sizeof al_d));
    CK(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                               &al_d, sizeof al_d));
    return GP_OK;
}

/* D = op(A) B with op(A) = A^T (see the top), fp32 scale, the precision's compute type. */
static int new_desc(const lin_plan *lp, cublasLtMatmulDesc_t *d, ck *c) {
    CK(c, cublasLtMatmulDescCreate(d, lp->ct, CUDA_R_32F));
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CK(c, cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CK(c, cublasLtMatmulDescSetAttribute(*d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    return GP_OK;
}

/* The descriptor without an epilogue (created on first need). */
static int plain_desc(lin_plan *lp, ck *c) {
    return lp->plain ? GP_OK : new_desc(lp, &lp->plain, c);
}

/* The heuristic's first algorithm for `desc` that succeeded within the workspace: 1 found,
   0 none, < 0 a failed call (its GP_E* code, which is negative). */
static int heuristic(cublasLtHandle_t h, const lin_plan *lp, cublasLtMatmulDesc_t desc,
                     const lin_bucket *bk, cublasLtMatmulPreference_t pref, size_t ws_bytes,
                     cublasLtMatmulAlgo_t *algo, size_t *ws, ck *c) {
    cublasLtMatmulHeuristicResult_t res[HEUR_RESULTS];
    int got = 0;
    memset(res, 0, sizeof res);
    cublasStatus_t e = cublasLtMatmulAlgoGetHeuristic(h, desc, lp->a, bk->b, bk->d, bk->d, pref,
                                                      HEUR_RESULTS, res, &got);
    if (e == CUBLAS_STATUS_NOT_SUPPORTED) return 0; /* no algorithm for this configuration */
    if (e != CUBLAS_STATUS_SUCCESS)
        return gp__ck_status(c, gp__cu_blas(e), "cublasLtMatmulAlgoGetHeuristic", __FILE__,
                             __LINE__);
    for (int r = 0; r < got; r++)
        if (res[r].state == CUBLAS_STATUS_SUCCESS && res[r].workspaceSize <= ws_bytes) {
            *algo = res[r].algo;
            *ws = res[r].workspaceSize;
            return 1;
        }
    return 0;
}

/* An algorithm for bucket `bk`'s layouts: with the epilogue if the heuristic has one (unless
   plain_only), else without (*plain = 1, lp->plain made on first need). As heuristic(). */
static int pick(cublasLtHandle_t h, lin_plan *lp, const lin_bucket *bk, int plain_only,
                cublasLtMatmulPreference_t pref, size_t ws_bytes, cublasLtMatmulAlgo_t *algo,
                size_t *ws, int *plain, ck *c) {
    int found = plain_only ? 0 : heuristic(h, lp, lp->desc, bk, pref, ws_bytes, algo, ws, c);
    *plain = found == 0;
    if (found != 0) return found;
    int rc = plain_desc(lp, c); /* host-side: nothing enqueued */
    return rc != GP_OK ? rc : heuristic(h, lp, lp->plain, bk, pref, ws_bytes, algo, ws, c);
}

/* Bucket `bk`'s algorithm: with the epilogue if the heuristic has one, else without. */
static int plan_bucket(slot_state *st, lin_plan *lp, lin_bucket *bk, uint64_t N, uint64_t M,
                       uint64_t K, cublasLtMatmulPreference_t pref, const gp_batch *slot,
                       size_t ws_bytes, ck *c) {
    cudaDataType_t dt = blas_type(st->kt);
    cublasLtHandle_t h = gp_cuda_cublaslt(slot);
    CK(c, cublasLtMatrixLayoutCreate(&bk->b, dt, K, N, (int64_t)K));
    CK(c, cublasLtMatrixLayoutCreate(&bk->d, dt, M, N, (int64_t)M));
    int found = pick(h, lp, bk, 0, pref, ws_bytes, &bk->algo, &bk->ws, &bk->plain, c);
    if (found == 1 && bk->plain && !st->note[0])
        snprintf(st->note, sizeof st->note,
                 "cuBLASLt has no bias-epilogue algorithm for a %s GEMM M=%llu N=%llu K=%llu: "
                 "its bias runs as a kernel after it",
                 gp_precision_name(st->m->precision), (unsigned long long)M, (unsigned long long)N,
                 (unsigned long long)K);
    if (found < 0) return found;
    if (found == 1) return GP_OK;
    return CK_FAIL(c, GP_ENOTSUP,
                   "cuBLASLt has no algorithm for a %s GEMM M=%llu N=%llu K=%llu within %zu bytes "
                   "of workspace",
                   gp_precision_name(st->m->precision), (unsigned long long)M,
                   (unsigned long long)N, (unsigned long long)K, ws_bytes);
}

int gp__gemm_plan(slot_state *st, const gp_batch *slot, const gp__gemm_desc *gd, gp__gemm **out,
                  ck *c) {
    gp_precision prec = st->m->precision;
    uint64_t M = gd->M, K = gd->K;
    cublasComputeType_t ct =
        prec == GP_PRECISION_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    lin_plan *lp = calloc(1, sizeof *lp);
    *out = lp;
    if (!lp) return CK_FAIL(c, GP_ENOMEM, "out of memory planning a GEMM");
    lp->tokens = gd->tokens;
    lp->w = gd->w;
    lp->ct = ct;
    lp->kt = st->kt;
    lp->M = M;
    lp->bias_f32 = gd->bias_f32;
    lp->relu = gd->relu;
    if (lp->tokens) { /* powers of two below the token capacity, then the capacity */
        lp->sizes = calloc(66, sizeof *lp->sizes);
        if (!lp->sizes) return CK_FAIL(c, GP_ENOMEM, "out of memory planning a GEMM");
        for (size_t t = 1; t < st->tcap; t <<= 1)
            lp->sizes[lp->n_sizes++] = t;
        lp->sizes[lp->n_sizes++] = st->tcap;
    } else {
        lp->sizes = calloc((size_t)st->n_buckets, sizeof *lp->sizes);
        if (!lp->sizes) return CK_FAIL(c, GP_ENOMEM, "out of memory planning a GEMM");
        for (int i = 0; i < st->n_buckets; i++)
            lp->sizes[lp->n_sizes++] = st->buckets[i];
    }
    lp->bk = calloc((size_t)lp->n_sizes, sizeof *lp->bk);
    if (!lp->bk) return CK_FAIL(c, GP_ENOMEM, "out of memory planning a GEMM");

    int rc = new_desc(lp, &lp->desc, c);
    if (rc != GP_OK) return rc;
    uint32_t epi = gd->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    CK(c,
       cublasLtMatmulDescSetAttribute(lp->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    const void *bias = gd->bias; /* the bias is of D's type (cublasLt.h, BIAS_DATA_TYPE) */
    CK(c, cublasLtMatmulDescSetAttribute(lp->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                         sizeof bias));
    CK(c, cublasLtMatrixLayoutCreate(&lp->a, blas_type(st->kt), K, M, (int64_t)K));

    size_t ws_bytes = 0;
    (void)gp_cuda_workspace(slot, &ws_bytes);
    cublasLtMatmulPreference_t pref = NULL;
    CK(c, cublasLtMatmulPreferenceCreate(&pref));
    rc = set_pref(c, pref, ws_bytes, gp__align_of(gd->w), gp__align_of(gd->x), gp__align_of(gd->y));
    for (int bi = 0; bi < lp->n_sizes && rc == GP_OK; bi++)
        rc = plan_bucket(st, lp, &lp->bk[bi], lp->sizes[bi], M, K, pref, slot, ws_bytes, c);
    if (lp->tokens) {
        lp->pref = pref; /* gp__gemm_free destroys it */
        lp->ws_bytes = ws_bytes;
    } else {
        cublasLtMatmulPreferenceDestroy(pref); /* its status is not actionable here */
    }
    return rc;
}

void gp__gemm_free(gp__gemm *lp) {
    if (!lp) return;
    /* Destroy statuses are not actionable in teardown. */
    if (lp->bk)
        for (int i = 0; i < lp->n_sizes; i++) {
            if (lp->bk[i].b) cublasLtMatrixLayoutDestroy(lp->bk[i].b);
            if (lp->bk[i].d) cublasLtMatrixLayoutDestroy(lp->bk[i].d);
        }
    free(lp->bk);
    free(lp->sizes);
    if (lp->pref) cublasLtMatmulPreferenceDestroy(lp->pref);
    if (lp->a) cublasLtMatrixLayoutDestroy(lp->a);
    if (lp->desc) cublasLtMatmulDescDestroy(lp->desc);
    if (lp->plain) cublasLtMatmulDescDestroy(lp->plain);
    free(lp);
}

/* Token by token: the GEMM's N is the batch's token count. The bucket above it lends its
   layouts (their column count set to N, a host-side attribute) and its algorithm when cuBLASLt
   accepts that for N (cublasLtMatmulAlgoCheck); otherwise the heuristic picks one for N now,
   with the bucket's descriptor and then without an epilogue (host-side: nothing is allocated on
   the device). *plain: the algorithm is for lp->plain. */
static int token_bucket(lin_plan *lp, const gp_batch *b, size_t N, lin_bucket **out,
                        cublasLtMatmulAlgo_t *algo, size_t *ws, int *plain, ck *c) {
    lin_bucket *bk = &lp->bk[gp__bucket_index(lp->sizes, lp->n_sizes, N)];
    cublasLtHandle_t h = gp_cuda_cublaslt(b);
    uint64_t cols = N;
    CK(c, cublasLtMatrixLayoutSetAttribute(bk->b, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols));
    CK(c, cublasLtMatrixLayoutSetAttribute(bk->d, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols));
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    *out = bk;
    *plain = bk->plain;
    if (cublasLtMatmulAlgoCheck(h, bk->plain ? lp->plain : lp->desc, lp->a, bk->b, bk->d, bk->d,
                                &bk->algo, &res) == CUBLAS_STATUS_SUCCESS &&
        res.workspaceSize <= lp->ws_bytes) {
        *algo = bk->algo;
        *ws = res.workspaceSize;
        return GP_OK;
    }
    int found = pick(h, lp, bk, bk->plain, lp->pref, lp->ws_bytes, algo, ws, plain, c);
    if (found < 0) return found;
    if (found == 0) return CK_FAIL(c, GP_EDEVICE, "cuBLASLt has no algorithm for %zu tokens", N);
    return GP_OK;
}

int gp__gemm_run(gp__gemm *lp, const gp_batch *b, int bi, size_t N, const void *x, void *y, ck *c) {
    lin_bucket *bk = NULL;
    cublasLtMatmulAlgo_t algo;
    size_t need = 0;
    int plain = 0;
    memset(&algo, 0, sizeof algo);
    if (lp->tokens) { /* bi indexes the item buckets, not these */
        if (N == 0) return GP_OK;
        int rc = token_bucket(lp, b, N, &bk, &algo, &need, &plain, c);
        if (rc != GP_OK) return rc;
    } else {
        bk = &lp->bk[bi];
        algo = bk->algo;
        need = bk->ws;
        plain = bk->plain;
        N = lp->sizes[bi]; /* the bucket's size, as planned */
    }
    size_t ws_bytes = 0;
    void *ws = gp_cuda_workspace(b, &ws_bytes);
    const float alpha = 1.0f, beta = 0.0f; /* scale type fp32; beta 0: C is not read */
    CK(c, cublasLtMatmul(gp_cuda_cublaslt(b), plain ? lp->plain : lp->desc, &alpha, lp->w, lp->a, x,
                         bk->b, &beta, y, bk->d, y, bk->d, &algo, need ? ws : NULL, need,
                         gp_cuda_stream(b)));
    if (plain) /* y[N][M]: the bias along each row, as the epilogue would add it */
        CK(c, gp__k_bias_act(gp_cuda_stream(b), lp->kt, y, lp->bias_f32, N, (int)lp->M, 1,
                             lp->relu ? (int)GP__ACT_RELU : (int)GP__ACT_NONE, 0));
    return GP_OK;
}

/* ---- LINEAR --------------------------------------------------------------------------------- */

static int lin_bind(slot_state *st, step *sp, const gp_batch *slot, ck *c) {
    const gp__op *op = sp->op;
    gp__gemm_desc d = {
        .M = (uint64_t)op->out.c,
        .K = (uint64_t)gp__shape_numel(op->in),
        .tokens = op->in.tokens,
        .w = sp->k->w,
        .bias = sp->k->bias_t,
        .bias_f32 = sp->k->bias_f32,
        .relu = op->act == GP__ACT_RELU,
        .x = gp__resolve(sp->src, slot),
        .y = gp__resolve(sp->dst, slot),
    };
    gp__gemm *g = NULL;
    int rc = gp__gemm_plan(st, slot, &d, &g, c);
    sp->plan = g;
    return rc;
}

static void lin_release(step *sp, int n_buckets) {
    (void)n_buckets;
    gp__gemm_free(sp->plan);
    sp->plan = NULL;
}

static int lin_run(slot_state *st, const step *sp, const gp_batch *b, int bi, ck *c) {
    const gp__op *op = sp->op;
    size_t rows = gp__rows(st, op->in, b);
    void *y = gp__resolve(sp->dst, b);
    int rc = gp__gemm_run(sp->plan, b, bi, rows, gp__resolve(sp->src, b), y, c);
    if (rc != GP_OK) return rc;
    /* relu ran in the epilogue; gelu is the erf form and cuBLASLt's GELU epilogue the tanh
       form, so the other activations run as a kernel after it. */
    if (op->act != GP__ACT_NONE && op->act != GP__ACT_RELU)
        CK(c, gp__k_act(gp_cuda_stream(b), st->kt, y, y, rows * (size_t)op->out.c, (int)op->act));
    return GP_OK;
}

const cuda_layer GP__CUDA_LAYER(LINEAR) = {
    .consts = gp__consts_weight_bias,
    .bind = lin_bind,
    .run = lin_run,
    .release = lin_release,
};
