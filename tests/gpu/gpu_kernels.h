/* Test-only kernels (gpu_kernels.cu). Each returns the launch's cudaError_t. */
#ifndef GPU_KERNELS_H
#define GPU_KERNELS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A kernel that executes a trap instruction: a sticky fault, the context is lost. */
cudaError_t gput_trap_launch(cudaStream_t stream);

/* A launch with an invalid configuration (too many threads per block): a non-sticky error,
   reported by the launch itself and left as the thread's last error. */
cudaError_t gput_bad_launch(cudaStream_t stream);

/* A kernel that runs `ns` nanoseconds of wall time per block (clock64 rounds, %globaltimer
   decides when to stop). exclusive == 0: one warp, kernels of several streams run side by
   side; exclusive != 0: one block per SM holding more than half of its shared memory, so two
   such kernels never share an SM (they serialize like kernels that fill the GPU). The device
   of `stream` must be current. */
cudaError_t gput_spin_launch(cudaStream_t stream, uint64_t ns, int exclusive);

#ifdef __cplusplus
}
#endif
#endif
