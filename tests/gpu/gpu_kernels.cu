// Test-only kernels: faults on purpose.
#include "gpu_kernels.h"

namespace {

__global__ void trap_kernel() {
    __trap();
}

__global__ void noop_kernel() {}

} // namespace

extern "C" cudaError_t gput_trap_launch(cudaStream_t stream) {
    trap_kernel<<<1, 1, 0, stream>>>();
    return cudaPeekAtLastError();
}

extern "C" cudaError_t gput_bad_launch(cudaStream_t stream) {
    noop_kernel<<<1, 4096, 0, stream>>>(); // > 1024 threads per block: invalid configuration
    return cudaPeekAtLastError();
}
