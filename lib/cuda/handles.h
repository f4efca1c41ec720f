/*
 * What gp_batch.impl points to on the CUDA backend: the slot's handles. The backend (backend.c,
 * in the CUDA module) fills them; the public accessors of gpupipe/cuda.h (access.c, in
 * libgpupipe itself) read them. Only CUDA *types* appear here, so libgpupipe reads the handles
 * without linking any CUDA library.
 */
#ifndef GP_LIB_CUDA_HANDLES_H
#define GP_LIB_CUDA_HANDLES_H

#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#define GP__CUDA_HANDLES_MAGIC 0x67704355u /* "gpCU" */

typedef struct gp__cuda_handles {
    uint32_t magic; /* GP__CUDA_HANDLES_MAGIC */
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *lt_ws; /* the cuBLASLt workspace, ws_bytes */
    size_t ws_bytes;
    /* The slot's cuDNN handle (a cudnnHandle_t), created on the first call so that a missing
       cuDNN fails only the computes that use it; NULL when it cannot be created (the reason is
       logged and kept for stats). NULL function: the build has no cuDNN. Called for one slot
       never concurrently (gpupipe/cuda.h). */
    void *(*cudnn)(struct gp__cuda_handles *h);
    /* Say what the slot runs without, and why (the model layers: a convolution on the direct
       kernel): logged, and kept as the pipeline's stats.backend_note unless one is kept
       already (the first note wins). Create thread (compute_setup) only. */
    void (*note)(struct gp__cuda_handles *h, const char *msg);
    /* Log what a layer chose for the slot and why (conv.c: the algorithm its timing kept) at
       GP_LOG_INFO, prefixed "slot N: ". Create thread (compute_setup) only. */
    void (*info)(struct gp__cuda_handles *h, const char *msg);
} gp__cuda_handles;

#endif
