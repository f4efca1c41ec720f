// Test support: run a blocking host function in a CUDA stream (holds a slot busy).
#include <cuda_runtime.h>

extern "C" int gpt_cuda_host_func(void *stream, void (*fn)(void *), void *arg) {
    return (int)cudaLaunchHostFunc((cudaStream_t)stream, fn, arg);
}
