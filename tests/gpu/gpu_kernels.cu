// Test-only kernels: faults on purpose, and a spin kernel of known duration (the tests' own
// copy: the library does not ship one).
#include "gpu_kernels.h"

namespace {

__global__ void trap_kernel() {
    __trap();
}

__global__ void noop_kernel() {}

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin_kernel(unsigned long long ns) {
    // Dynamic shared memory is only reserved (exclusive mode), never touched.
    if (threadIdx.x != 0) return;
    const unsigned long long t0 = global_ns();
    while (global_ns() - t0 < ns) {
        const long long c0 = clock64();
        while (clock64() - c0 < 1000) {
        }
    }
}

} // namespace

extern "C" cudaError_t gput_trap_launch(cudaStream_t stream) {
    trap_kernel<<<1, 1, 0, stream>>>();
    return cudaPeekAtLastError();
}

extern "C" cudaError_t gput_bad_launch(cudaStream_t stream) {
    noop_kernel<<<1, 4096, 0, stream>>>(); // > 1024 threads per block: invalid configuration
    return cudaPeekAtLastError();
}

extern "C" cudaError_t gput_spin_launch(cudaStream_t stream, uint64_t ns, int exclusive) {
    if (!exclusive) {
        spin_kernel<<<1, 32, 0, stream>>>(ns);
        return cudaGetLastError();
    }
    int dev = 0, sms = 0, per_block = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    // The opt-in maximum per block exceeds half of an SM's shared memory on every
    // architecture, so one such block fills an SM's shared memory.
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(spin_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 per_block);
    if (e != cudaSuccess) return e;
    spin_kernel<<<sms, 32, (size_t)per_block, stream>>>(ns);
    return cudaGetLastError();
}
