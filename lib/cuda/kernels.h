/*
 * The model runtime's CUDA kernels (kernels/prep.cu, act.cu, post.cu), launched by the CUDA
 * layers in lib/cuda/: extern "C" launchers that enqueue on `s` and return the launch's
 * cudaError_t (cudaSuccess when there is nothing to do). They never synchronize and never allocate,
 * so they are safe under CUDA-graph capture. Semantics are model_impl.h's (host.c is the
 * reference); arithmetic is fp32 whatever the storage type, with the host's order of operations
 * where it matters.
 *
 * Storage types: activations are fp32, fp16 or bf16 (gp__kt); `act` is a gp__act value. Every
 * tensor is a dense batch of NCHW (or N x features) items.
 */
#ifndef GP_LIB_CUDA_KERNELS_H
#define GP_LIB_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element type of a device tensor. */
typedef enum gp__kt { GP__KT_F32 = 0, GP__KT_F16 = 1, GP__KT_BF16 = 2 } gp__kt;

/* PREP: n items of `in` (u8 when in_u8, else f32; H x W x C when hwc, else C x H x W) ->
   out[item][c][h][w] = (v - mean[c]) / std[c] with v = x / 255 (u8) or x (f32), stored as
   `ot`. mean, std: device arrays of C floats. */
cudaError_t gp__k_prep(cudaStream_t s, size_t n, const void *in, int in_u8, int hwc, int C, int H,
                       int W, const float *mean, const float *std, void *out, gp__kt ot);

/* out[i] = in[i] converted (round to nearest even), i < count. Same type: a device copy. */
cudaError_t gp__k_convert(cudaStream_t s, const void *in, gp__kt it, void *out, gp__kt ot,
                          size_t count);

/* out[i] = act(in[i]); out == in allowed. */
cudaError_t gp__k_act(cudaStream_t s, gp__kt t, const void *in, void *out, size_t count, int act);

/* out[i] = act(a[i] + b[i]); out may alias a or b. */
cudaError_t gp__k_add_act(cudaStream_t s, gp__kt t, const void *a, const void *b, void *out,
                          size_t count, int act);

/* In place on n items of C x HW: x = act(x + bias[c]). bias: device, C floats. */
cudaError_t gp__k_bias_act(cudaStream_t s, gp__kt t, void *x, const float *bias, size_t n, int C,
                           size_t HW, int act);

/* Max (padding is -inf; NaN propagates) or average (count_include_pad: / (kh * kw)) pooling,
   dilation 1, floor mode, n items of C x H x W -> C x Ho x Wo. */
cudaError_t gp__k_pool2d(cudaStream_t s, gp__kt t, int is_max, const void *in, void *out, size_t n,
                         int C, int H, int W, int Ho, int Wo, int kh, int kw, int sh, int sw,
                         int ph, int pw);

/* out[p] = mean of in[p][0 .. HW) for p < planes (= n * C); the sum is taken in double. */
cudaError_t gp__k_global_avgpool(cudaStream_t s, gp__kt t, const void *in, void *out, size_t planes,
                                 size_t HW);

/* Direct convolution (any stride, padding, dilation, groups) with bias and activation:
   n items of Cin x H x W -> Cout x Ho x Wo; w: [Cout][Cin / groups][kh][kw] of type t;
   bias: Cout floats. The fallback when cuDNN is not built. */
cudaError_t gp__k_conv2d_direct(cudaStream_t s, gp__kt t, const void *in, const void *w,
                                const float *bias, void *out, size_t n, int Cin, int H, int W,
                                int Cout, int Ho, int Wo, int kh, int kw, int sh, int sw, int ph,
                                int pw, int dh, int dw, int groups, int act);

/* Softmax over F features per item (max-subtracted, the sum in double, as the host). */
cudaError_t gp__k_softmax(cudaStream_t s, gp__kt t, const void *in, void *out, size_t n, int F);

/* Indices of the k largest of F features per item, largest first, NaN largest, equal values
   in index order (argmax is k = 1). out: n * k int64. */
cudaError_t gp__k_topk(cudaStream_t s, gp__kt t, const void *in, int64_t *out, size_t n, int F,
                       int k);

/* Variable-length models (kernels/tokens.cu): tok[k] = (byte_off[k] - byte_off[0]) /
   token_bytes for k <= n (device arrays); and out[k][c] = mean of in[t][c] over item k's tokens
   tok[k] .. tok[k + 1] (the sum in double), n items of C features. */
cudaError_t gp__k_tok_offsets(cudaStream_t s, size_t n, const uint64_t *byte_off,
                              size_t token_bytes, int64_t *tok);
cudaError_t gp__k_token_mean(cudaStream_t s, gp__kt t, const void *in, const int64_t *tok,
                             void *out, size_t n, int C);

/* gp_batch_pad / gp_batch_unpad (kernels/pad.cu): n items packed at in + in_off[k] (device
   offsets, n + 1) into rows of row_bytes at dst, zero-filled, with mask[k][e] = element e is
   the item's (mask may be NULL); and rows back into out + out_off[k]. */
cudaError_t gp__k_pad(cudaStream_t s, size_t n, const void *in, const uint64_t *in_off, void *dst,
                      size_t row_bytes, size_t elem_bytes, uint8_t *mask);
cudaError_t gp__k_unpad(cudaStream_t s, size_t n, const void *src, size_t row_bytes, void *out,
                        const uint64_t *out_off);

#ifdef __cplusplus
}
#endif
#endif /* GP_LIB_CUDA_KERNELS_H */
