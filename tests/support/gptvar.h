/*
 * The tests' known transform for variable-size items: output byte j of an item whose input is
 * `in` (in_len bytes) is gptvar_byte(in, in_len, j). Runs as a host loop on the host backend
 * and as a CUDA kernel (support/vartransform_cuda.cu) on the CUDA backend; the batch's offsets
 * say where each item is (gp_batch).
 */
#ifndef GPTVAR_H
#define GPTVAR_H

#include <gpupipe/gpupipe.h>
#include <stddef.h>
#include <stdint.h>

static inline uint8_t gptvar_byte(const uint8_t *in, uint64_t in_len, uint64_t j) {
    return (uint8_t)(in[j % in_len] + j * 7u + in_len);
}

#ifdef GPT_HAVE_CUDA_TRANSFORM
/* support/vartransform_cuda.cu: enqueue the transform of n packed items on `stream`. */
int gpt_cuda_var_transform(void *stream, size_t n, const uint8_t *in, const uint64_t *in_off,
                           uint8_t *out, const uint64_t *out_off);
#endif

/* The compute (user unused): every item of the batch, with fixed or variable sizes on either
   side (offsets from the batch, else k * bytes). */
static inline int gptvar_compute(void *user, const gp_batch *b) {
    if (b->backend == GP_BACKEND_CUDA) {
#ifdef GPT_HAVE_CUDA_TRANSFORM
        if (!b->in_offsets || !b->out_offsets) return GP_ENOTSUP; /* both sides variable */
        return gpt_cuda_var_transform(b->stream, b->n, (const uint8_t *)b->in, b->in_offsets,
                                      (uint8_t *)b->out, b->out_offsets) == 0
                   ? GP_OK
                   : GP_EDEVICE;
#else
        return GP_ENOTSUP;
#endif
    }
    const uint8_t *in = b->in;
    uint8_t *out = b->out;
    for (size_t k = 0; k < b->n; k++) {
        uint64_t i0 = b->in_offsets ? b->in_offsets[k] : k * b->in_bytes;
        uint64_t i1 = b->in_offsets ? b->in_offsets[k + 1] : (k + 1) * b->in_bytes;
        uint64_t o0 = b->out_offsets ? b->out_offsets[k] : k * b->out_bytes;
        uint64_t o1 = b->out_offsets ? b->out_offsets[k + 1] : (k + 1) * b->out_bytes;
        for (uint64_t j = 0; j < o1 - o0; j++)
            out[o0 + j] = gptvar_byte(in + i0, i1 - i0, j);
    }
    return GP_OK;
}

#endif
