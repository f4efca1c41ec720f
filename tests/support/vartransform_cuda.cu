// The variable-size transform of gptvar.h as a CUDA kernel: one block per item. gptvar.h is C,
// so the byte formula is repeated here (gptvar_byte).
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace {

__global__ void var_kernel(const uint8_t *in, const uint64_t *in_off, uint8_t *out,
                           const uint64_t *out_off) {
    const size_t k = blockIdx.x;
    const uint64_t i0 = in_off[k], in_len = in_off[k + 1] - i0;
    const uint64_t o0 = out_off[k], out_len = out_off[k + 1] - o0;
    for (uint64_t j = threadIdx.x; j < out_len; j += blockDim.x)
        out[o0 + j] = (uint8_t)(in[i0 + j % in_len] + j * 7u + in_len);
}

} // namespace

extern "C" int gpt_cuda_var_transform(void *stream, size_t n, const uint8_t *in,
                                      const uint64_t *in_off, uint8_t *out,
                                      const uint64_t *out_off) {
    if (n == 0) return 0;
    var_kernel<<<(unsigned)n, 128, 0, (cudaStream_t)stream>>>(in, in_off, out, out_off);
    return (int)cudaGetLastError();
}
