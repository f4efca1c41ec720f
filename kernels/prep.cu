// Input stage on the device: raw u8 (or f32) items, HWC or CHW, to normalized CHW (or, for a
// model the CUDA runtime keeps in NHWC, HWC) activations, so producers send one byte per channel.
// Also the storage-type conversions the model runtime uses around 16-bit activations.
#include "kernel_util.cuh"
#include "cuda/layers.h"
#include "gpupipe/cuda.h"

namespace {

// One thread per output element, writes coalesced. The float operations are the host's, in
// its order: v = x / 255 (u8), then (v - mean) / std with IEEE division (no fast math).
// nhwc: the output is H x W x Cs per item (an HWC input is then copied in its own order), its
// channels C .. Cs-1 zero (the stem pad); Cs == C without nhwc.
template <typename Tin, typename Tout>
__global__ void prep_kernel(size_t total, const Tin *__restrict__ in, int hwc, int nhwc, int C,
                            int Cs, int H, int W, const float *__restrict__ mean,
                            const float *__restrict__ sd, Tout *__restrict__ out) {
    const size_t hw = (size_t)H * (size_t)W, per = (size_t)Cs * hw, in_per = (size_t)C * hw;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t item = i / per, r = i % per;
        int c = (int)(nhwc ? r % (size_t)Cs : r / hw);
        size_t p = nhwc ? r / (size_t)Cs : r % hw; // h * W + w
        if (c >= C) {                              // a stored channel beyond the input's
            gpk::st(out + i, 0.0f);
            continue;
        }
        size_t src = item * in_per + (hwc ? p * (size_t)C + (size_t)c : (size_t)c * hw + p);
        float v;
        if (sizeof(Tin) == 1)
            v = (float)in[src] / 255.0f;
        else
            v = (float)in[src];
        gpk::st(out + i, (v - mean[c]) / sd[c]);
    }
}

template <typename Tout>
cudaError_t prep_to(cudaStream_t s, size_t total, const void *in, int in_u8, int hwc, int nhwc,
                    int C, int Cs, int H, int W, const float *mean, const float *sd, void *out) {
    unsigned g = gpk::grid_for(total);
    if (in_u8)
        prep_kernel<uint8_t, Tout><<<g, gpk::kThreads, 0, s>>>(
            total, (const uint8_t *)in, hwc, nhwc, C, Cs, H, W, mean, sd, (Tout *)out);
    else
        prep_kernel<float, Tout><<<g, gpk::kThreads, 0, s>>>(total, (const float *)in, hwc, nhwc, C,
                                                             Cs, H, W, mean, sd, (Tout *)out);
    return gpk::launched();
}

template <typename Tin, typename Tout>
__global__ void convert_kernel(const Tin *__restrict__ in, Tout *__restrict__ out, size_t count) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        gpk::st(out + i, gpk::ld(in + i));
}

template <typename Tin>
cudaError_t convert_from(cudaStream_t s, const void *in, void *out, gp__kt ot, size_t count) {
    unsigned g = gpk::grid_for(count);
    const Tin *x = (const Tin *)in;
    switch (ot) {
    case GP__KT_F32:
        convert_kernel<Tin, float><<<g, gpk::kThreads, 0, s>>>(x, (float *)out, count);
        break;
    case GP__KT_F16:
        convert_kernel<Tin, __half><<<g, gpk::kThreads, 0, s>>>(x, (__half *)out, count);
        break;
    case GP__KT_BF16:
        convert_kernel<Tin, __nv_bfloat16>
            <<<g, gpk::kThreads, 0, s>>>(x, (__nv_bfloat16 *)out, count);
        break;
    default:
        return cudaErrorInvalidValue;
    }
    return gpk::launched();
}

} // namespace

extern "C" cudaError_t gp__k_prep(cudaStream_t s, size_t n, const void *in, int in_u8, int hwc,
                                  int nhwc, int C, int Cs, int H, int W, const float *mean,
                                  const float *std, void *out, gp__kt ot) {
    if (!nhwc || Cs < C) Cs = C; // the stem pad is NHWC's alone
    size_t total = n * (size_t)Cs * (size_t)H * (size_t)W;
    if (total == 0) return cudaSuccess;
    return GPK_DISPATCH(ot, prep_to, s, total, in, in_u8, hwc, nhwc, C, Cs, H, W, mean, std, out);
}

extern "C" cudaError_t gp__k_convert(cudaStream_t s, const void *in, gp__kt it, void *out,
                                     gp__kt ot, size_t count) {
    if (count == 0) return cudaSuccess;
    if (it == ot) {
        if (in == out) return cudaSuccess;
        return cudaMemcpyAsync(out, in, count * gp__kt_size(it), cudaMemcpyDeviceToDevice, s);
    }
    return GPK_DISPATCH(it, convert_from, s, in, out, ot, count);
}

// ---- the PREP and COPY layers (lib/cuda/layers.h): the launches above as the model runs them
// ------------------

static int consts_prep(const gp__op *op, gp__consts *k, ck *) {
    gp__consts_put(k, GP__K_MEAN, op->mean, 0.0f, (size_t)op->out.c, GP__KT_F32);
    gp__consts_put(k, GP__K_STD, op->std, 1.0f, (size_t)op->out.c, GP__KT_F32);
    return GP_OK;
}

static int run_prep(slot_state *st, const step *sp, const gp_batch *b, int, ck *c) {
    const gp__op *op = sp->op;
    CK(c, gp__k_prep(gp_cuda_stream(b), b->n, gp__resolve(sp->src, b), op->in_dtype == GP_DTYPE_U8,
                     op->hwc, st->nhwc, op->out.c, sp->chans, op->out.h, op->out.w, sp->k->mean,
                     sp->k->std, gp__resolve(sp->dst, b), st->kt));
    return GP_OK;
}

// COPY converts between storage types; its ends may be the f32 model input / output.
static int run_copy(slot_state *st, const step *sp, const gp_batch *b, int, ck *c) {
    CK(c,
       gp__k_convert(gp_cuda_stream(b), gp__resolve(sp->src, b), sp->src_t, gp__resolve(sp->dst, b),
                     sp->dst_t, gp__rows(st, sp->op->out, b) * gp__shape_numel(sp->op->out)));
    return GP_OK;
}

// {consts, plan, bind, run, release}
const cuda_layer GP__CUDA_LAYER(PREP) = {consts_prep, nullptr, nullptr, run_prep, nullptr};
const cuda_layer GP__CUDA_LAYER(COPY) = {nullptr, nullptr, nullptr, run_copy, nullptr};
