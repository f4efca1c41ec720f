// The tests' known per-item transform as a CUDA kernel. gpt.h is C and declares the launcher
// without C++ linkage, so it is not included here: the word formula repeats gpt_word(), and
// every pipeline test compares this kernel's output with gpt_word() on the host.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace {

__global__ void transform_kernel(const uint32_t *in, uint32_t *out, size_t words) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < words;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = in[i] * 2654435761u + 12345u; // == gpt_word(in[i])
}

} // namespace

extern "C" int gpt_cuda_transform(void *stream, const uint32_t *in, uint32_t *out, size_t words) {
    if (words == 0) return 0;
    const unsigned threads = 256;
    size_t blocks = (words + threads - 1) / threads;
    if (blocks > 4096) blocks = 4096; // the loop strides over the rest
    transform_kernel<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(in, out, words);
    return (int)cudaGetLastError();
}
