// cuda-bench's spin kernel with %globaltimer stamps (see bench-spin.h).
#include "bench-spin.h"

#include <atomic>

namespace {

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Time since base, clamped to the 40 bits a key holds (a timer set back reads as 0).
__device__ __forceinline__ unsigned long long rel_ns(unsigned long long t,
                                                     unsigned long long base) {
    if (t <= base) return 0;
    const unsigned long long d = t - base;
    return d < BENCH_SPIN_TMASK ? d : BENCH_SPIN_TMASK;
}

__global__ void spin_kernel(unsigned long long ns, bench_spin_stamp *stamp,
                            unsigned long long gen_hi, unsigned long long base) {
    // Dynamic shared memory is only reserved (exclusive mode), never touched.
    if (threadIdx.x != 0) return;
    const unsigned long long t0 = global_ns();
    if (stamp) atomicMax(&stamp->start_key, gen_hi | (BENCH_SPIN_TMASK - rel_ns(t0, base)));
    while (global_ns() - t0 < ns) {
        const long long c0 = clock64();
        while (clock64() - c0 < 1000) {
        }
    }
    if (stamp) atomicMax(&stamp->end_key, gen_hi | rel_ns(global_ns(), base));
}

__global__ void timer_kernel(volatile unsigned long long *dst) {
    *dst = global_ns();
    __threadfence_system();
}

// Exclusive mode's per-device figures, queried once per device (the launch is on the hot path
// of every batch). 0 = not known yet; racing first launches store the same values.
constexpr int kMaxDevices = 64;
std::atomic<int> g_sms[kMaxDevices];
std::atomic<int> g_smem[kMaxDevices];

cudaError_t exclusive_shape(int *sms, int *smem) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev >= 0 && dev < kMaxDevices) {
        *sms = g_sms[dev].load(std::memory_order_acquire);
        *smem = g_smem[dev].load(std::memory_order_acquire);
        if (*sms > 0 && *smem > 0) return cudaSuccess;
    }
    e = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    // The opt-in maximum per block exceeds half of an SM's shared memory on every
    // architecture, so one such block fills an SM's shared memory.
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(spin_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, *smem);
    if (e == cudaSuccess && dev >= 0 && dev < kMaxDevices) {
        g_smem[dev].store(*smem, std::memory_order_release);
        g_sms[dev].store(*sms, std::memory_order_release);
    }
    return e;
}

} // namespace

extern "C" cudaError_t bench_spin_launch(cudaStream_t stream, uint64_t ns, int exclusive,
                                         bench_spin_stamp *stamp, uint32_t gen, uint64_t base_ns) {
    if (stamp && (gen == 0 || gen > BENCH_SPIN_GENMAX)) return cudaErrorInvalidValue;
    const unsigned long long gen_hi = (unsigned long long)gen << BENCH_SPIN_TBITS;
    if (!exclusive) {
        spin_kernel<<<1, 32, 0, stream>>>(ns, stamp, gen_hi, base_ns);
        return cudaGetLastError();
    }
    int sms = 0, smem = 0;
    cudaError_t e = exclusive_shape(&sms, &smem);
    if (e != cudaSuccess) return e;
    spin_kernel<<<sms, 32, (size_t)smem, stream>>>(ns, stamp, gen_hi, base_ns);
    return cudaGetLastError();
}

extern "C" cudaError_t bench_timer_now(cudaStream_t stream, unsigned long long *dst) {
    timer_kernel<<<1, 1, 0, stream>>>(dst);
    return cudaGetLastError();
}
