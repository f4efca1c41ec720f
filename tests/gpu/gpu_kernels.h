/* Test-only kernels (gpu_kernels.cu). Each returns the launch's cudaError_t. */
#ifndef GPU_KERNELS_H
#define GPU_KERNELS_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A kernel that executes a trap instruction: a sticky fault, the context is lost. */
cudaError_t gput_trap_launch(cudaStream_t stream);

/* A launch with an invalid configuration (too many threads per block): a non-sticky error,
   reported by the launch itself and left as the thread's last error. */
cudaError_t gput_bad_launch(cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
