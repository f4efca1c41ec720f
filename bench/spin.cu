// Spin kernel of known wall duration (see spin.h).
#include "spin.h"

namespace {

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

extern "C" cudaError_t gp__spin_launch(cudaStream_t stream, uint64_t ns_per_batch,
                                       uint64_t ns_per_item, size_t n, int exclusive) {
    const unsigned long long ns =
        (unsigned long long)ns_per_batch + (unsigned long long)ns_per_item * n;
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
