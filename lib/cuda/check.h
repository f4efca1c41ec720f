/*
 * The one way CUDA Runtime, cuBLAS(Lt) and cuDNN results are turned into gpupipe errors, for the
 * backend (backend.c) and the model layers (lib/cuda/, kernels/<name>.cu) alike. The library is
 * told apart by the status type, so one macro checks any call:
 *
 *     gp__cu_status st = GP__CU_STATUS(cudaMalloc(&p, n));
 *     if (st.code) return gp__cu_record(sink, st, "cudaMalloc(&p, n)", NULL, __FILE__, __LINE__);
 *
 * which GP__CU (backend.c) and CK (layers.h) write in one line. The detail recorded names the call,
 * the native code, its name and text, file:line and an optional context (the model layer being
 * run).
 */
#ifndef GP_LIB_CUDA_CHECK_H
#define GP_LIB_CUDA_CHECK_H

#include <stddef.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#ifdef GP_HAVE_CUDNN
#include <cudnn.h>
#endif

#include "../errsink.h"

#ifdef __cplusplus /* the CUDA layers in kernels/<name>.cu check their launches with CK too */
extern "C" {
#endif

enum { GP__LIB_CUDART = 0, GP__LIB_CUBLAS = 1, GP__LIB_CUDNN = 2 };

typedef struct gp__cu_status {
    int lib;
    int code; /* 0 is success in all three libraries */
} gp__cu_status;

static inline gp__cu_status gp__cu_rt(cudaError_t e) {
    gp__cu_status s = {GP__LIB_CUDART, (int)e};
    return s;
}
static inline gp__cu_status gp__cu_blas(cublasStatus_t e) {
    gp__cu_status s = {GP__LIB_CUBLAS, (int)e};
    return s;
}
#ifdef GP_HAVE_CUDNN
static inline gp__cu_status gp__cu_dnn(cudnnStatus_t e) {
    gp__cu_status s = {GP__LIB_CUDNN, (int)e};
    return s;
}
#define GP__CU_DNN_ASSOC , cudnnStatus_t : gp__cu_dnn
#else
#define GP__CU_DNN_ASSOC
#endif

/* The native name ("cudaErrorIllegalAddress", "CUBLAS_STATUS_NOT_SUPPORTED", ...) and text. */
void gp__cu_describe(gp__cu_status s, const char **name, const char **text);

/* Errors after which the CUDA context is unusable (driver_types.h: "any further CUDA work will
   return the same error"): a sticky device fault. */
int gp__cu_is_sticky(gp__cu_status s);

/* The gpupipe code of a failed status: GP_ENOMEM for allocation failures, else GP_EDEVICE. */
int gp__cu_code(gp__cu_status s);

/* "<call> failed: <name> (<code>): <text>", the function's name only (not its arguments). */
void gp__cu_format(gp__cu_status s, const char *call, char *buf, size_t len);

/* Record a failed call in `sink` (with `context` appended when not NULL) and return
   gp__cu_code(s); GP_OK for success. */
int gp__cu_record(gp__errsink *sink, gp__cu_status s, const char *call, const char *context,
                  const char *file, int line);

#ifdef __cplusplus
}
/* C++ has no _Generic: overloads tell the libraries apart. */
static inline gp__cu_status gp__cu_of(cudaError_t e) {
    return gp__cu_rt(e);
}
static inline gp__cu_status gp__cu_of(cublasStatus_t e) {
    return gp__cu_blas(e);
}
#ifdef GP_HAVE_CUDNN
static inline gp__cu_status gp__cu_of(cudnnStatus_t e) {
    return gp__cu_dnn(e);
}
#endif
#define GP__CU_STATUS(call) gp__cu_of(call)
#else
/* The status of a call of any of the three libraries; `call` is evaluated once. */
#define GP__CU_STATUS(call)                                                                        \
    _Generic((call), cudaError_t : gp__cu_rt, cublasStatus_t : gp__cu_blas GP__CU_DNN_ASSOC)(call)
#endif

#endif
