// Test support: the CUDA side of gpt_gate (gpt.h). A gate holds a slot's stream busy with a
// one-thread kernel that waits on a flag in mapped, page-locked host memory. A blocking host
// function (cudaLaunchHostFunc) would do the same on one stream, but CUDA may serialize host
// functions of independent streams, so two slots held at once would deadlock.
//
// Only plain loads and stores cross the PCIe link: the host writes `open`, each kernel writes
// its own record. No read-modify-write is shared between CPU and GPU, which host memory only
// supports where cudaDevAttrHostNativeAtomicSupported is 1 (not on x86 + PCIe machines).
//
// gpt.h is C and declares these without C++ linkage, so it is not included here.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace {

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// rec: this launch's record; tag: its launch number << 2. Writes tag|1 on entry, then tag|2
// once `open` reads non-zero, or tag|3 after timeout_ns without it (the host side fails the
// test then: a bug in a test cannot hold the GPU for longer than that).
__global__ void gate_kernel(const volatile uint32_t *open, volatile uint32_t *rec, uint32_t tag,
                            unsigned long long timeout_ns) {
    *rec = tag | 1u;
    // The entry record reaches host memory before anything this thread writes later.
    __threadfence_system();
    uint32_t code = 2u;
    unsigned long long t0 = global_ns();
    while (*open == 0u) {
        const unsigned long long now = global_ns();
        if (now < t0) t0 = now; // the timer was set back: count from here
        if (now - t0 >= timeout_ns) {
            code = 3u;
            break;
        }
#if __CUDA_ARCH__ >= 700
        __nanosleep(1000); // fewer reads over the link; the host opens within microseconds
#endif
    }
    // Order the read of `open` before the final record (and before the rest of the stream's
    // work, which is ordered after this kernel anyway).
    __threadfence_system();
    *rec = tag | code;
}

} // namespace

// Page-locked, mapped, portable host memory of `bytes`, zeroed. *host: the host pointer;
// *dev: the pointer kernels use. Returns a cudaError_t.
extern "C" int gpt_cuda_gate_alloc(size_t bytes, void **host, void **dev) {
    *host = nullptr;
    *dev = nullptr;
    void *h = nullptr, *d = nullptr;
    cudaError_t e = cudaHostAlloc(&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) return (int)e;
    e = cudaHostGetDevicePointer(&d, h, 0);
    if (e != cudaSuccess) {
        cudaFreeHost(h);
        return (int)e;
    }
    for (size_t i = 0; i < bytes; i++)
        static_cast<volatile unsigned char *>(h)[i] = 0;
    *host = h;
    *dev = d;
    return 0;
}

extern "C" int gpt_cuda_gate_free(void *host) {
    return (int)cudaFreeHost(host);
}

// Enqueue the gate kernel on `stream`. open, rec: device pointers. Returns a cudaError_t.
extern "C" int gpt_cuda_gate_launch(void *stream, const void *open, void *rec, uint32_t tag,
                                    unsigned long long timeout_ns) {
    gate_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(static_cast<const volatile uint32_t *>(open),
                                                   static_cast<volatile uint32_t *>(rec), tag,
                                                   timeout_ns);
    return (int)cudaGetLastError();
}

extern "C" const char *gpt_cuda_error_name(int err) {
    return cudaGetErrorName((cudaError_t)err);
}
