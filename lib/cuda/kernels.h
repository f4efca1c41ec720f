/*
 * The model runtime's CUDA kernels (the .cu files in kernels/), launched by the CUDA
 * layers in lib/cuda/: extern "C" launchers that enqueue on `s` and return the launch's
 * cudaError_t (cudaSuccess when there is nothing to do). They never synchronize and never allocate,
 * so they are safe under CUDA-graph capture. Semantics are model_impl.h's (host.c is the
 * reference); arithmetic is fp32 whatever the storage type, with the host's order of operations
 * where it matters.
 *
 * Storage types: activations are fp32, fp16 or bf16 (gp__kt); `act` is a gp__act value. Every
 * tensor is a dense batch of NCHW (or N x features) items; with `nhwc` set, the launchers that
 * take it read and write N x H x W x C instead (a model the CUDA runtime keeps in NHWC:
 * lib/cuda/model.c, docs/DESIGN.md §6).
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
   out[item][c][h][w] (nhwc: out[item][h][w][c]) = (v - mean[c]) / std[c] with v = x / 255 (u8)
   or x (f32), stored as `ot`. mean, std: device arrays of C floats. With nhwc, each pixel is
   stored as Cs >= C channels, channels C .. Cs-1 zero (the stem pad, docs/DESIGN.md §6); Cs is
   C otherwise. */
cudaError_t gp__k_prep(cudaStream_t s, size_t n, const void *in, int in_u8, int hwc, int nhwc,
                       int C, int Cs, int H, int W, const float *mean, const float *std, void *out,
                       gp__kt ot);

/* out[i] = in[i] converted (round to nearest even), i < count. Same type: a device copy. */
cudaError_t gp__k_convert(cudaStream_t s, const void *in, gp__kt it, void *out, gp__kt ot,
                          size_t count);

/* out[i] = act(in[i]); out == in allowed. */
cudaError_t gp__k_act(cudaStream_t s, gp__kt t, const void *in, void *out, size_t count, int act);

/* out[i] = act(a[i] + b[i]); out may alias a or b. */
cudaError_t gp__k_add_act(cudaStream_t s, gp__kt t, const void *a, const void *b, void *out,
                          size_t count, int act);

/* In place on n items of C x HW (nhwc: HW x C): x = act(x + bias[c]). bias: device, C
   floats. */
cudaError_t gp__k_bias_act(cudaStream_t s, gp__kt t, void *x, const float *bias, size_t n, int C,
                           size_t HW, int act, int nhwc);

/* Max (padding is -inf; NaN propagates) or average (count_include_pad: / (kh * kw)) pooling,
   dilation 1, floor mode, n items of C x H x W -> C x Ho x Wo (nhwc: H x W x C -> Ho x Wo x
   C). */
cudaError_t gp__k_pool2d(cudaStream_t s, gp__kt t, int is_max, const void *in, void *out, size_t n,
                         int C, int H, int W, int Ho, int Wo, int kh, int kw, int sh, int sw,
                         int ph, int pw, int nhwc);

/* out[k][c] = mean over the HW pixels of item k's channel c, n items of C x HW (nhwc: HW x C);
   the sum is taken in double. */
cudaError_t gp__k_global_avgpool(cudaStream_t s, gp__kt t, const void *in, void *out, size_t n,
                                 int C, size_t HW, int nhwc);

/* Direct convolution (any stride, padding, dilation, groups) with bias and activation:
   n items of Cin x H x W -> Cout x Ho x Wo, w [Cout][Cin / groups][kh][kw] of type t (nhwc:
   H x W x Cin -> Ho x Wo x Cout, w [Cout][kh][kw][Cin / groups]); bias: Cout floats. The same
   sums, in the same order, in either layout. Builds without cuDNN, convolutions cuDNN cannot
   plan, and conv.c's check of a fast algorithm against exact sums. */
cudaError_t gp__k_conv2d_direct(cudaStream_t s, gp__kt t, const void *in, const void *w,
                                const float *bias, void *out, size_t n, int Cin, int H, int W,
                                int Cout, int Ho, int Wo, int kh, int kw, int sh, int sw, int ph,
                                int pw, int dh, int dw, int groups, int act, int nhwc);

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

/* Transformer encoders (kernels/encoder.cu, kernels/attention.cu) on token values: rows of the
   batch's packed token matrix; tok: the batch's n + 1 token offsets on the device (item k:
   rows tok[k] .. tok[k + 1] - 1, each item at least one token); max_len: the batch's longest
   item, in tokens (it sizes the grid only: items are read through tok). */

/* A token an embedding found outside its tables (gp__k_embedding), in device memory: `found`
   0 until one is; the one thread that sets it writes the rest (any such token of the batch, not
   necessarily the first). The caller zeroes it before the launch and reads it after. The
   batch's n item flags follow it (gp__k_bad_items): 1 for each item with such a token. */
typedef struct gp__k_bad_token {
    int found;
    int item;  /* the batch's item */
    int token; /* the token's position in its item */
    int tag;   /* the caller's, as given */
    long long id;
} gp__k_bad_token;
#define gp__k_bad_items(bad) ((unsigned char *)((bad) + 1))

/* EMBEDDING: out[t][c] = (word[id[t]][c] + type0[c]) + pos[p][c] (BertEmbeddings' order, as
   the host; fp32, rounded once), p = t's position in its item; ids: the model input, int32 or
   (ids_i64) int64, one per token. word [vocab][C] and pos [positions][C] (NULL: no position term)
   in type t; type0: C floats or NULL (no type term). A token whose id is outside 0..vocab-1, or
   whose position is >= positions, gets a row of NaN (nothing is read out of bounds) and, when
   `bad` is not NULL, is recorded there with `tag`, and its item flagged (the CUDA model then
   fails that item alone, as the host backend does: lib/cuda/model.c). */
cudaError_t gp__k_embedding(cudaStream_t s, gp__kt t, const void *ids, int ids_i64,
                            const int64_t *tok, size_t n, size_t max_len, const void *word,
                            int vocab, const void *pos, int positions, const float *type0,
                            void *out, int C, gp__k_bad_token *bad, int tag);

/* LAYERNORM over C features per row: (x - mean) / sqrt(var + eps) * gamma + beta, var the
   biased variance, accumulated in double (two passes). gamma, beta: C floats. out == in
   allowed. */
cudaError_t gp__k_layernorm(cudaStream_t s, gp__kt t, const void *in, void *out, size_t rows, int C,
                            const float *gamma, const float *beta, float eps);

/* L2NORM per row of C: x / max(||x||_2, eps), fp32 sum of squares. out == in allowed. */
cudaError_t gp__k_l2norm(cudaStream_t s, gp__kt t, const void *in, void *out, size_t rows, int C,
                         float eps);

/* POOL_CLS: out[k][c] = in[tok[k]][c] for the n items (each item's first token). */
cudaError_t gp__k_pool_cls(cudaStream_t s, gp__kt t, const void *in, const int64_t *tok, void *out,
                           size_t n, int C);

/* ATTENTION's core (kernels/attention.cu): per item and head, o = softmax(q k^T / sqrt(d)) v
   over the item's own tokens. qkv: [T][3 * heads * d] (q | k | v per row, head j at columns
   j * d of each part), out: [T][heads * d], both of type t, 16-byte aligned. fp32
   accumulation and softmax. arch: the device's compute capability (major * 10 + minor).
   gp__k_attention_path says which kernel runs: 2 the tensor-core (mma.sync) kernel (fp16 /
   bf16 storage, arch >= 80, d a multiple of 8), 1 the fp32 SIMT kernel (fp32 storage, and
   16-bit storage otherwise), 0 unsupported (d outside 1..GP__ATTN_MAX_HEAD_DIM):
   gp__k_attention then returns cudaErrorInvalidValue. */
#define GP__ATTN_MAX_HEAD_DIM 128
int gp__k_attention_path(gp__kt t, int head_dim, int arch);
/* The arch to pass above for a device of compute capability `device_arch`: the lower of it and
   the architecture the tensor-core kernel's code for this device was compiled for (a build for
   sm_75 runs that kernel as a trap on an sm_90 device, through its compute_75 PTX). */
cudaError_t gp__k_attention_arch(int device_arch, int *arch);
cudaError_t gp__k_attention(cudaStream_t s, gp__kt t, const void *qkv, const int64_t *tok,
                            void *out, size_t n, size_t max_len, int heads, int head_dim, int arch);

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
