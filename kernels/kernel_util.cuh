// Device helpers shared by the model runtime's kernels (kernels/<name>.cu): storage-type
// loads and stores, the activations exactly as the host applies them (lib/model/gemm.h), grid
// sizing, and dispatch over the storage type.
#ifndef GP_KERNELS_KERNEL_UTIL_CUH
#define GP_KERNELS_KERNEL_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/kernels.h"

namespace gpk {

// gp__act values (lib/model/model_impl.h); checked against the enum in lib/cuda/model.c.
enum { ACT_NONE = 0, ACT_RELU = 1, ACT_GELU = 2, ACT_SIGMOID = 3, ACT_TANH = 4 };

__device__ __forceinline__ float ld(const float *p) {
    return *p;
}
__device__ __forceinline__ float ld(const __half *p) {
    return __half2float(*p);
}
__device__ __forceinline__ float ld(const __nv_bfloat16 *p) {
    return __bfloat162float(*p);
}

__device__ __forceinline__ void st(float *p, float v) {
    *p = v;
}
__device__ __forceinline__ void st(__half *p, float v) {
    *p = __float2half_rn(v);
}
__device__ __forceinline__ void st(__nv_bfloat16 *p, float v) {
    *p = __float2bfloat16_rn(v);
}

// The host's activations (gemm.h gp__act_apply): accurate expf/erff/tanhf, no fast math.
__device__ __forceinline__ float act_apply(int a, float x) {
    switch (a) {
    case ACT_RELU:
        return x < 0.0f ? 0.0f : x; // NaN stays NaN
    case ACT_GELU:
        return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
    case ACT_SIGMOID:
        return 1.0f / (1.0f + expf(-x));
    case ACT_TANH:
        return tanhf(x);
    default:
        return x;
    }
}

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over `count` elements: enough to fill any current GPU, capped
// so the grid stays far below the launch limit.
inline unsigned grid_for(size_t count) {
    size_t b = (count + kThreads - 1) / kThreads;
    const size_t cap = 8192;
    return (unsigned)(b < cap ? b : cap);
}

// The launch's own status. A zero-sized launch is skipped by the callers (cudaSuccess). A
// query's "not yet" (cudaErrorNotReady) that an earlier cudaEventQuery/cudaStreamQuery on this
// thread may have left as the last error is not this launch's failure: no launch causes it.
inline cudaError_t launched() {
    cudaError_t e = cudaGetLastError();
    return e == cudaErrorNotReady ? cudaSuccess : e;
}

} // namespace gpk

// Call F<T>(args...) with T the C++ type of storage type `t`; unknown types are
// cudaErrorInvalidValue.
#define GPK_DISPATCH(t, F, ...)                                                                    \
    ((t) == GP__KT_F32    ? F<float>(__VA_ARGS__)                                                  \
     : (t) == GP__KT_F16  ? F<__half>(__VA_ARGS__)                                                 \
     : (t) == GP__KT_BF16 ? F<__nv_bfloat16>(__VA_ARGS__)                                          \
                          : cudaErrorInvalidValue)

#endif
