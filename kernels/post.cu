// Output stage on the device: softmax, argmax and top-k per item, so the device-to-host copy
// carries only what the caller wants. One block per item; features are rank-1 per item.
#include "kernel_util.cuh"
#include "cuda/layers.h"
#include "gpupipe/cuda.h"

namespace {

constexpr int kPostThreads = 256;
constexpr int kWarps = kPostThreads / 32;

// Softmax as the host computes it: mx = max (a NaN never wins the `>`), e = expf(x - mx),
// s = sum of e in double, y = e * (float)(1 / s).
template <typename T>
__global__ void softmax_kernel(const T *__restrict__ in, T *__restrict__ out, int F) {
    __shared__ float s_max[kWarps];
    __shared__ double s_sum[kWarps];
    const T *x = in + (size_t)blockIdx.x * (size_t)F;
    T *y = out + (size_t)blockIdx.x * (size_t)F;
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;

    float mx = -INFINITY;
    for (int i = threadIdx.x; i < F; i += blockDim.x) {
        float v = gpk::ld(x + i);
        mx = v > mx ? v : mx;
    }
    for (int off = 16; off > 0; off >>= 1) {
        float o = __shfl_down_sync(0xffffffffu, mx, off);
        mx = o > mx ? o : mx;
    }
    if (lane == 0) s_max[warp] = mx;
    __syncthreads();
    mx = s_max[0];
    for (int w = 1; w < kWarps; w++)
        mx = s_max[w] > mx ? s_max[w] : mx;

    double sum = 0.0;
    for (int i = threadIdx.x; i < F; i += blockDim.x)
        sum += (double)expf(gpk::ld(x + i) - mx);
    for (int off = 16; off > 0; off >>= 1)
        sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (lane == 0) s_sum[warp] = sum;
    __syncthreads();
    sum = 0.0;
    for (int w = 0; w < kWarps; w++)
        sum += s_sum[w];
    const float inv = (float)(1.0 / sum);
    // in and out are different buffers (the plan never runs softmax in place), but reading
    // x again is safe either way: each element is read then written by the same thread.
    for (int i = threadIdx.x; i < F; i += blockDim.x)
        gpk::st(y + i, expf(gpk::ld(x + i) - mx) * inv);
}

template <typename T>
cudaError_t softmax_t(cudaStream_t s, const void *in, void *out, size_t n, int F) {
    softmax_kernel<T><<<(unsigned)n, kPostThreads, 0, s>>>((const T *)in, (T *)out, F);
    return gpk::launched();
}

// A candidate: value and index; idx < 0 is "none", which ranks after everything.
struct cand {
    float v;
    int idx;
};

// a ranks strictly before b: larger value first, NaN largest (as torch), equal values (and
// NaNs among themselves, and -0 / +0) in index order. A total order on distinct indices.
__device__ __forceinline__ bool before(cand a, cand b) {
    if (a.idx < 0) return false;
    if (b.idx < 0) return true;
    bool an = isnan(a.v), bn = isnan(b.v);
    if (an != bn) return an;
    if (!an && a.v != b.v) return a.v > b.v;
    return a.idx < b.idx;
}

__device__ __forceinline__ cand warp_best(cand c) {
    for (int off = 16; off > 0; off >>= 1) {
        cand o;
        o.v = __shfl_down_sync(0xffffffffu, c.v, off);
        o.idx = __shfl_down_sync(0xffffffffu, c.idx, off);
        if (before(o, c)) c = o;
    }
    return c;
}

// k rounds; round j picks the best element that ranks after round j-1's pick, so the picks
// come out in rank order without marking anything. k is small (top-5, argmax).
template <typename T>
__global__ void topk_kernel(const T *__restrict__ in, int64_t *__restrict__ out, int F, int k) {
    __shared__ cand s_best[kWarps];
    __shared__ cand s_prev;
    const T *x = in + (size_t)blockIdx.x * (size_t)F;
    int64_t *o = out + (size_t)blockIdx.x * (size_t)k;
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    cand prev = {0.0f, -1};
    for (int j = 0; j < k; j++) {
        cand best = {0.0f, -1};
        for (int i = threadIdx.x; i < F; i += blockDim.x) {
            cand c = {gpk::ld(x + i), i};
            if ((prev.idx < 0 || before(prev, c)) && before(c, best)) best = c;
        }
        best = warp_best(best);
        if (lane == 0) s_best[warp] = best;
        __syncthreads();
        if (threadIdx.x == 0) {
            cand b = s_best[0];
            for (int w = 1; w < kWarps; w++)
                if (before(s_best[w], b)) b = s_best[w];
            s_prev = b;
            o[j] = (int64_t)b.idx;
        }
        __syncthreads();
        prev = s_prev;
    }
}

template <typename T>
cudaError_t topk_t(cudaStream_t s, const void *in, int64_t *out, size_t n, int F, int k) {
    topk_kernel<T><<<(unsigned)n, kPostThreads, 0, s>>>((const T *)in, out, F, k);
    return gpk::launched();
}

} // namespace

extern "C" cudaError_t gp__k_softmax(cudaStream_t s, gp__kt t, const void *in, void *out, size_t n,
                                     int F) {
    if (n == 0 || F <= 0) return cudaSuccess;
    if (n > 0x7fffffffu) return cudaErrorInvalidConfiguration;
    return GPK_DISPATCH(t, softmax_t, s, in, out, n, F);
}

extern "C" cudaError_t gp__k_topk(cudaStream_t s, gp__kt t, const void *in, int64_t *out, size_t n,
                                  int F, int k) {
    if (n == 0 || k <= 0) return cudaSuccess;
    if (n > 0x7fffffffu || k > F) return cudaErrorInvalidValue;
    return GPK_DISPATCH(t, topk_t, s, in, out, n, F, k);
}

// ---- the SOFTMAX, ARGMAX and TOPK layers (lib/cuda/layers.h): the launches above as the model
// runs them ------------------

static int run_softmax(slot_state *st, const step *sp, const gp_batch *b, int, ck *c) {
    CK(c, gp__k_softmax(gp_cuda_stream(b), st->kt, gp__resolve(sp->src, b), gp__resolve(sp->dst, b),
                        b->n, sp->op->in.c));
    return GP_OK;
}

// ARGMAX is TOPK with k = 1; both write the model's i64 output.
static int run_topk(slot_state *st, const step *sp, const gp_batch *b, int, ck *c) {
    CK(c, gp__k_topk(gp_cuda_stream(b), st->kt, gp__resolve(sp->src, b),
                     (int64_t *)gp__resolve(sp->dst, b), b->n, sp->op->in.c, sp->op->k));
    return GP_OK;
}

// {consts, plan, bind, run, release}
const cuda_layer GP__CUDA_LAYER(SOFTMAX) = {nullptr, nullptr, nullptr, run_softmax, nullptr};
const cuda_layer GP__CUDA_LAYER(ARGMAX) = {nullptr, nullptr, nullptr, run_topk, nullptr};
const cuda_layer GP__CUDA_LAYER(TOPK) = {nullptr, nullptr, nullptr, run_topk, nullptr};
