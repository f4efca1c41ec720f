/*
 * The public accessors of gpupipe/cuda.h. They live in libgpupipe (not in the CUDA module), so a
 * compute that calls them links only libgpupipe; they read the handles the CUDA backend put in
 * the batch (handles.h) and call no CUDA function.
 */
#include "gpupipe/cuda.h"

#include "handles.h"

static gp__cuda_handles *handles_of(const gp_batch *b) {
    gp__cuda_handles *h = b && b->backend == GP_BACKEND_CUDA ? b->impl : NULL;
    return h && h->magic == GP__CUDA_HANDLES_MAGIC ? h : NULL;
}

cudaStream_t gp_cuda_stream(const gp_batch *b) {
    const gp__cuda_handles *h = handles_of(b);
    return h ? h->stream : NULL;
}

cublasHandle_t gp_cuda_cublas(const gp_batch *b) {
    const gp__cuda_handles *h = handles_of(b);
    return h ? h->blas : NULL;
}

cublasLtHandle_t gp_cuda_cublaslt(const gp_batch *b) {
    const gp__cuda_handles *h = handles_of(b);
    return h ? h->lt : NULL;
}

void *gp_cuda_workspace(const gp_batch *b, size_t *bytes) {
    const gp__cuda_handles *h = handles_of(b);
    if (bytes) *bytes = h ? h->ws_bytes : 0;
    return h ? h->lt_ws : NULL;
}

#ifdef GP_HAVE_CUDNN
cudnnHandle_t gp_cuda_cudnn(const gp_batch *b) {
    gp__cuda_handles *h = handles_of(b);
    return h && h->cudnn ? (cudnnHandle_t)h->cudnn(h) : NULL;
}
#endif

int gp_cuda_device(const gp_batch *b) {
    const gp__cuda_handles *h = handles_of(b);
    return h ? h->device : -1;
}
