/*
 * Host GEMM, cache-blocked (BLIS-style loops, a register-tiled micro-kernel):
 *   C[i][j] (+)= sum_k A[i][k] * B[k][j]   for i < M, j < N, then (+ bias[i], activation)
 * A (the weights) is packed once at load into MR-row panels; B is packed per call into the
 * caller's workspace in KC x NC blocks; B and C are addressed through row/column strides, so
 * one routine serves conv (C = W x im2col, a few items side by side) and linear
 * (C^T = W x X^T, per batch).
 */
#ifndef GP_LIB_MODEL_GEMM_H
#define GP_LIB_MODEL_GEMM_H

#include <math.h>
#include <stddef.h>

#include "model_impl.h"

#define GP__MR 6
#define GP__NR 16
#define GP__KC 256
#define GP__NC 512

/* Floats of A packed for the GEMM: ceil(M / MR) * MR * K. */
size_t gp__gemm_packed_elems(size_t M, size_t K);
/* Pack row-major A (M x K, row stride lda) into Ap (gp__gemm_packed_elems floats). Panel p
   holds rows [p*MR, p*MR+MR) k-major: Ap[p*MR*K + k*MR + r] (zero rows past M). */
void gp__gemm_pack_a(size_t M, size_t K, const float *A, size_t lda, float *Ap);
/* Workspace floats gp__gemm needs. */
size_t gp__gemm_work_elems(void);

/* C(i, j) = C[i*rsc + j*csc], B(k, j) = B[k*rsb + j*csb]. bias may be NULL. work: 64-byte
   aligned, gp__gemm_work_elems() floats. */
void gp__gemm(size_t M, size_t N, size_t K, const float *Ap, const float *B, ptrdiff_t rsb,
              ptrdiff_t csb, float *C, ptrdiff_t rsc, ptrdiff_t csc, const float *bias, gp__act act,
              float *work);

/* The activation as the host applies it everywhere (reference semantics). */
static inline float gp__act_apply(gp__act a, float x) {
    switch (a) {
    case GP__ACT_RELU:
        return x < 0.0f ? 0.0f : x; /* NaN stays NaN, as in torch */
    case GP__ACT_GELU:
        return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
    case GP__ACT_SIGMOID:
        return 1.0f / (1.0f + expf(-x));
    case GP__ACT_TANH:
        return tanhf(x);
    case GP__ACT_NONE:
        break;
    }
    return x;
}

#endif
