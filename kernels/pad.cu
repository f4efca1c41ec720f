// Padding helpers for variable-size batches (gp_batch_pad / gp_batch_unpad): gather packed items
// into padded rows with a mask, and scatter padded rows back into packed outputs. One block column
// per item (grid x: up to 2^31 - 1 items; grid y: up to 64 chunks of a row); bytes are copied one
// by one, which is enough for a helper that moves each byte once.
#include "kernel_util.cuh"

namespace {

__global__ void pad_kernel(const uint8_t *in, const uint64_t *off, uint8_t *dst, size_t row_bytes,
                           size_t elem_bytes, uint8_t *mask) {
    const size_t k = blockIdx.x;
    const uint64_t start = off[k], len = off[k + 1] - start;
    uint8_t *row = dst + k * row_bytes;
    for (size_t j = (size_t)blockIdx.y * blockDim.x + threadIdx.x; j < row_bytes;
         j += (size_t)gridDim.y * blockDim.x) {
        row[j] = j < len ? in[start + j] : 0;
        if (mask && j % elem_bytes == 0)
            mask[k * (row_bytes / elem_bytes) + j / elem_bytes] = j < len;
    }
}

__global__ void unpad_kernel(const uint8_t *src, size_t row_bytes, uint8_t *out,
                             const uint64_t *off) {
    const size_t k = blockIdx.x;
    const uint64_t start = off[k], len = off[k + 1] - start;
    const uint8_t *row = src + k * row_bytes;
    for (size_t j = (size_t)blockIdx.y * blockDim.x + threadIdx.x; j < len;
         j += (size_t)gridDim.y * blockDim.x)
        out[start + j] = row[j];
}

dim3 grid_for(size_t n, size_t row_bytes) {
    size_t y = (row_bytes + 255) / 256;
    return dim3((unsigned)n, (unsigned)(y < 64 ? (y ? y : 1) : 64));
}

} // namespace

extern "C" cudaError_t gp__k_pad(cudaStream_t s, size_t n, const void *in, const uint64_t *in_off,
                                 void *dst, size_t row_bytes, size_t elem_bytes, uint8_t *mask) {
    if (n == 0 || row_bytes == 0) return cudaSuccess;
    if (n > 0x7fffffffu) return cudaErrorInvalidValue;
    pad_kernel<<<grid_for(n, row_bytes), 256, 0, s>>>((const uint8_t *)in, in_off, (uint8_t *)dst,
                                                      row_bytes, elem_bytes, mask);
    return gpk::launched();
}

extern "C" cudaError_t gp__k_unpad(cudaStream_t s, size_t n, const void *src, size_t row_bytes,
                                   void *out, const uint64_t *out_off) {
    if (n == 0 || row_bytes == 0) return cudaSuccess;
    if (n > 0x7fffffffu) return cudaErrorInvalidValue;
    unpad_kernel<<<grid_for(n, row_bytes), 256, 0, s>>>((const uint8_t *)src, row_bytes,
                                                        (uint8_t *)out, out_off);
    return gpk::launched();
}
