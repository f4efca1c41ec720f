// Token kernels of variable-length models (docs/DESIGN.md §8.7): the batch's token offsets from
// its byte offsets, and the mean over each item's own tokens (globalavgpool on tokens).
#include "kernel_util.cuh"

namespace {

__global__ void tok_offsets_kernel(size_t n, const uint64_t *off, uint64_t token_bytes,
                                   int64_t *tok) {
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k <= n;
         k += (size_t)gridDim.x * blockDim.x)
        tok[k] = (int64_t)((off[k] - off[0]) / token_bytes);
}

// One block per item, threads over the features; each sums its feature over the item's tokens
// in double (as the host's per-item global pool).
template <typename T>
__global__ void token_mean_kernel(const T *in, const int64_t *tok, T *out, int C) {
    const size_t k = blockIdx.x;
    const int64_t t0 = tok[k], t1 = tok[k + 1];
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        double acc = 0.0;
        for (int64_t t = t0; t < t1; t++)
            acc += (double)gpk::ld(in + (size_t)t * C + c);
        gpk::st(out + k * (size_t)C + c, (float)(acc / (double)(t1 - t0)));
    }
}

template <typename T>
cudaError_t token_mean_t(cudaStream_t s, const void *in, const int64_t *tok, void *out, size_t n,
                         int C) {
    if (n > 0x7fffffffu) return cudaErrorInvalidConfiguration; /* one block per item */
    token_mean_kernel<T><<<(unsigned)n, 128, 0, s>>>((const T *)in, tok, (T *)out, C);
    return gpk::launched();
}

} // namespace

extern "C" cudaError_t gp__k_tok_offsets(cudaStream_t s, size_t n, const uint64_t *byte_off,
                                         size_t token_bytes, int64_t *tok) {
    if (token_bytes == 0) return cudaErrorInvalidValue;
    tok_offsets_kernel<<<gpk::grid_for(n + 1), gpk::kThreads, 0, s>>>(n, byte_off, token_bytes,
                                                                      tok);
    return gpk::launched();
}

extern "C" cudaError_t gp__k_token_mean(cudaStream_t s, gp__kt t, const void *in,
                                        const int64_t *tok, void *out, size_t n, int C) {
    if (n == 0 || C <= 0) return cudaSuccess;
    return GPK_DISPATCH(t, token_mean_t, s, in, tok, out, n, C);
}
