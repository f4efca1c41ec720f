// Elementwise and window ops of the model runtime: activations, residual add, conv bias +
// activation where cuDNN cannot fuse it, max/avg pooling, global average pooling, and a direct
// convolution for builds without cuDNN. Semantics: lib/model/model_impl.h (host.c is the
// reference); arithmetic in fp32 whatever the storage type.
#include "kernel_util.cuh"
#include "cuda/layers.h"
#include "gpupipe/cuda.h"

namespace {

#define GPK_FOR(i, count)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count);                    \
         i += (size_t)gridDim.x * blockDim.x)

template <typename T> __global__ void act_kernel(const T *in, T *out, size_t count, int act) {
    // in and out may alias (in-place ACT): no __restrict__.
    GPK_FOR(i, count) gpk::st(out + i, gpk::act_apply(act, gpk::ld(in + i)));
}

template <typename T>
cudaError_t act_t(cudaStream_t s, const void *in, void *out, size_t count, int act) {
    act_kernel<T>
        <<<gpk::grid_for(count), gpk::kThreads, 0, s>>>((const T *)in, (T *)out, count, act);
    return gpk::launched();
}

template <typename T>
__global__ void add_act_kernel(const T *a, const T *b, T *out, size_t count, int act) {
    GPK_FOR(i, count) gpk::st(out + i, gpk::act_apply(act, gpk::ld(a + i) + gpk::ld(b + i)));
}

template <typename T>
cudaError_t add_act_t(cudaStream_t s, const void *a, const void *b, void *out, size_t count,
                      int act) {
    add_act_kernel<T><<<gpk::grid_for(count), gpk::kThreads, 0, s>>>((const T *)a, (const T *)b,
                                                                     (T *)out, count, act);
    return gpk::launched();
}

template <typename T>
__global__ void bias_act_kernel(T *x, const float *__restrict__ bias, size_t count, int C,
                                size_t HW, int act, int nhwc) {
    GPK_FOR(i, count) {
        int c = (int)((nhwc ? i : i / HW) % (size_t)C);
        gpk::st(x + i, gpk::act_apply(act, gpk::ld(x + i) + bias[c]));
    }
}

template <typename T>
cudaError_t bias_act_t(cudaStream_t s, void *x, const float *bias, size_t count, int C, size_t HW,
                       int act, int nhwc) {
    bias_act_kernel<T>
        <<<gpk::grid_for(count), gpk::kThreads, 0, s>>>((T *)x, bias, count, C, HW, act, nhwc);
    return gpk::launched();
}

struct pool_geom {
    int C, H, W, Ho, Wo, kh, kw, sh, sw, ph, pw;
    int nhwc; // in and out are N x H x W x C (else N x C x H x W)
};

// One thread per output element; the window is visited in the host's order (rows, then
// columns) so the average's sum rounds the same way. NHWC: consecutive threads take
// consecutive channels of one pixel, so reads and writes stay coalesced.
template <typename T>
__global__ void pool_kernel(const T *__restrict__ in, T *__restrict__ out, size_t total,
                            pool_geom g, int is_max) {
    const size_t howo = (size_t)g.Ho * (size_t)g.Wo, hw = (size_t)g.H * (size_t)g.W;
    const float div = (float)(g.kh * g.kw);
    GPK_FOR(i, total) {
        size_t r, base, step; // the output pixel; its channel's first input element; per pixel
        if (g.nhwc) {
            size_t c = i % (size_t)g.C, q = i / (size_t)g.C;
            r = q % howo;
            base = (q / howo) * hw * (size_t)g.C + c, step = (size_t)g.C;
        } else {
            r = i % howo;
            base = (i / howo) * hw, step = 1;
        }
        int oy = (int)(r / (size_t)g.Wo), ox = (int)(r % (size_t)g.Wo);
        const T *x = in + base;
        int y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        float acc = is_max ? -INFINITY : 0.0f;
        for (int ky = 0; ky < g.kh; ky++) {
            int iy = y0 + ky;
            if (iy < 0 || iy >= g.H) continue;
            for (int kx = 0; kx < g.kw; kx++) {
                int ix = x0 + kx;
                if (ix < 0 || ix >= g.W) continue;
                float v = gpk::ld(x + ((size_t)iy * (size_t)g.W + (size_t)ix) * step);
                if (is_max)
                    acc = (v > acc || isnan(v)) ? v : acc;
                else
                    acc += v;
            }
        }
        gpk::st(out + i, is_max ? acc : acc / div);
    }
}

template <typename T>
cudaError_t pool_t(cudaStream_t s, const void *in, void *out, size_t total, pool_geom g,
                   int is_max) {
    pool_kernel<T>
        <<<gpk::grid_for(total), gpk::kThreads, 0, s>>>((const T *)in, (T *)out, total, g, is_max);
    return gpk::launched();
}

// One warp per plane; the sum in double as the host's.
template <typename T>
__global__ void gap_kernel(const T *__restrict__ in, T *__restrict__ out, size_t planes,
                           size_t HW) {
    const int lane = threadIdx.x & 31;
    const size_t warps_per_block = blockDim.x / 32;
    for (size_t p = (size_t)blockIdx.x * warps_per_block + threadIdx.x / 32; p < planes;
         p += (size_t)gridDim.x * warps_per_block) {
        const T *x = in + p * HW;
        double sum = 0.0;
        for (size_t k = (size_t)lane; k < HW; k += 32)
            sum += (double)gpk::ld(x + k);
        for (int off = 16; off > 0; off >>= 1)
            sum += __shfl_down_sync(0xffffffffu, sum, off);
        if (lane == 0) gpk::st(out + p, (float)(sum / (double)HW));
    }
}

template <typename T>
cudaError_t gap_t(cudaStream_t s, const void *in, void *out, size_t planes, size_t HW) {
    // kThreads / 32 planes per block; the loop guard keeps whole warps together.
    size_t blocks = (planes + gpk::kThreads / 32 - 1) / (gpk::kThreads / 32);
    unsigned g = (unsigned)(blocks < 8192 ? blocks : 8192);
    gap_kernel<T><<<g, gpk::kThreads, 0, s>>>((const T *)in, (T *)out, planes, HW);
    return gpk::launched();
}

// NHWC: one thread per (item, channel), the pixels in order; consecutive threads read
// consecutive channels of a pixel (coalesced). The sum in double, as the host's.
template <typename T>
__global__ void gap_nhwc_kernel(const T *__restrict__ in, T *__restrict__ out, size_t n, int C,
                                size_t HW) {
    GPK_FOR(i, n * (size_t)C) {
        const T *x = in + (i / (size_t)C) * HW * (size_t)C + i % (size_t)C;
        double sum = 0.0;
        for (size_t k = 0; k < HW; k++)
            sum += (double)gpk::ld(x + k * (size_t)C);
        gpk::st(out + i, (float)(sum / (double)HW));
    }
}

template <typename T>
cudaError_t gap_nhwc_t(cudaStream_t s, const void *in, void *out, size_t n, int C, size_t HW) {
    gap_nhwc_kernel<T>
        <<<gpk::grid_for(n * (size_t)C), gpk::kThreads, 0, s>>>((const T *)in, (T *)out, n, C, HW);
    return gpk::launched();
}

struct conv_geom {
    int Cin, H, W, Cout, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw, groups;
    int nhwc; // in, out N x H x W x C and w [Cout][kh][kw][Cin / groups] (else NCHW, KCRS)
};

// One thread per output element: the reference convolution, fp32 accumulation, the same sum
// order in either layout (input channel, then row, then column). Slow but complete (any
// groups, dilation): builds without cuDNN, convolutions cuDNN cannot plan, and the exact
// sums conv.c checks a fast algorithm against.
template <typename T>
__global__ void conv_direct_kernel(const T *__restrict__ in, const T *__restrict__ w,
                                   const float *__restrict__ bias, T *__restrict__ out,
                                   size_t total, conv_geom g, int act) {
    const size_t howo = (size_t)g.Ho * (size_t)g.Wo, hw = (size_t)g.H * (size_t)g.W;
    const int cin_g = g.Cin / g.groups, cout_g = g.Cout / g.groups;
    const size_t kk = (size_t)g.kh * (size_t)g.kw;
    GPK_FOR(i, total) {
        size_t r, item;
        int co;
        if (g.nhwc) {
            co = (int)(i % (size_t)g.Cout);
            r = (i / (size_t)g.Cout) % howo, item = i / (size_t)g.Cout / howo;
        } else {
            r = i % howo;
            co = (int)((i / howo) % (size_t)g.Cout), item = i / howo / (size_t)g.Cout;
        }
        int oy = (int)(r / (size_t)g.Wo), ox = (int)(r % (size_t)g.Wo);
        int grp = co / cout_g;
        // element (ci, iy, ix) of the group's input and (ci, ky, kx) of the filter
        const size_t ci0 = (size_t)grp * (size_t)cin_g;
        const T *x = in + item * (size_t)g.Cin * hw;
        const T *wk = w + (size_t)co * (size_t)cin_g * kk;
        float acc = 0.0f;
        for (int ci = 0; ci < cin_g; ci++)
            for (int ky = 0; ky < g.kh; ky++) {
                int iy = oy * g.sh - g.ph + ky * g.dh;
                if (iy < 0 || iy >= g.H) continue;
                for (int kx = 0; kx < g.kw; kx++) {
                    int ix = ox * g.sw - g.pw + kx * g.dw;
                    if (ix < 0 || ix >= g.W) continue;
                    size_t p = (size_t)iy * (size_t)g.W + (size_t)ix,
                           q = (size_t)ky * (size_t)g.kw + (size_t)kx;
                    size_t xi =
                        g.nhwc ? p * (size_t)g.Cin + ci0 + (size_t)ci : (ci0 + (size_t)ci) * hw + p;
                    size_t wi = g.nhwc ? q * (size_t)cin_g + (size_t)ci : (size_t)ci * kk + q;
                    acc += gpk::ld(x + xi) * gpk::ld(wk + wi);
                }
            }
        gpk::st(out + i, gpk::act_apply(act, acc + bias[co]));
    }
}

template <typename T>
cudaError_t conv_direct_t(cudaStream_t s, const void *in, const void *w, const float *bias,
                          void *out, size_t total, conv_geom g, int act) {
    conv_direct_kernel<T><<<gpk::grid_for(total), gpk::kThreads, 0, s>>>(
        (const T *)in, (const T *)w, bias, (T *)out, total, g, act);
    return gpk::launched();
}

} // namespace

extern "C" cudaError_t gp__k_act(cudaStream_t s, gp__kt t, const void *in, void *out, size_t count,
                                 int act) {
    if (count == 0 || (act == gpk::ACT_NONE && in == out)) return cudaSuccess;
    return GPK_DISPATCH(t, act_t, s, in, out, count, act);
}

extern "C" cudaError_t gp__k_add_act(cudaStream_t s, gp__kt t, const void *a, const void *b,
                                     void *out, size_t count, int act) {
    if (count == 0) return cudaSuccess;
    return GPK_DISPATCH(t, add_act_t, s, a, b, out, count, act);
}

extern "C" cudaError_t gp__k_bias_act(cudaStream_t s, gp__kt t, void *x, const float *bias,
                                      size_t n, int C, size_t HW, int act, int nhwc) {
    size_t count = n * (size_t)C * HW;
    if (count == 0) return cudaSuccess;
    return GPK_DISPATCH(t, bias_act_t, s, x, bias, count, C, HW, act, nhwc);
}

extern "C" cudaError_t gp__k_pool2d(cudaStream_t s, gp__kt t, int is_max, const void *in, void *out,
                                    size_t n, int C, int H, int W, int Ho, int Wo, int kh, int kw,
                                    int sh, int sw, int ph, int pw, int nhwc) {
    size_t total = n * (size_t)C * (size_t)Ho * (size_t)Wo;
    if (total == 0) return cudaSuccess;
    pool_geom g = {C, H, W, Ho, Wo, kh, kw, sh, sw, ph, pw, nhwc};
    return GPK_DISPATCH(t, pool_t, s, in, out, total, g, is_max);
}

extern "C" cudaError_t gp__k_global_avgpool(cudaStream_t s, gp__kt t, const void *in, void *out,
                                            size_t n, int C, size_t HW, int nhwc) {
    if (n == 0 || C <= 0 || HW == 0) return cudaSuccess;
    if (nhwc && HW > 1) return GPK_DISPATCH(t, gap_nhwc_t, s, in, out, n, C, HW);
    return GPK_DISPATCH(t, gap_t, s, in, out, n * (size_t)C, HW);
}

extern "C" cudaError_t gp__k_conv2d_direct(cudaStream_t s, gp__kt t, const void *in, const void *w,
                                           const float *bias, void *out, size_t n, int Cin, int H,
                                           int W, int Cout, int Ho, int Wo, int kh, int kw, int sh,
                                           int sw, int ph, int pw, int dh, int dw, int groups,
                                           int act, int nhwc) {
    size_t total = n * (size_t)Cout * (size_t)Ho * (size_t)Wo;
    if (total == 0) return cudaSuccess;
    if (groups < 1 || Cin % groups != 0 || Cout % groups != 0) return cudaErrorInvalidValue;
    conv_geom g = {Cin, H, W, Cout, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw, groups, nhwc};
    return GPK_DISPATCH(t, conv_direct_t, s, in, w, bias, out, total, g, act);
}

// ---- the pooling, ACT and ADD layers (lib/cuda/layers.h): the launches above as the model runs
// them ------------------

static int run_pool(slot_state *st, const step *sp, const gp_batch *b, int, ck *c) {
    const gp__op *op = sp->op;
    CK(c, gp__k_pool2d(gp_cuda_stream(b), st->kt, op->kind == GP__OP_MAXPOOL2D,
                       gp__resolve(sp->src, b), gp__resolve(sp->dst, b), b->n, op->in.c, op->in.h,
                       op->in.w, op->out.h, op->out.w, op->kh, op->kw, op->stride_h, op->stride_w,
                       op->pad_h, op->pad_w, st->nhwc));
    return GP_OK;
}

static int run_globalavgpool(slot_state *st, const step *sp, const gp_batch *b, int, ck *c) {
    const gp__op *op = sp->op;
    if (op->in.tokens) { // the mean over each item's own tokens (tokens.cu)
        CK(c, gp__k_token_mean(gp_cuda_stream(b), st->kt, gp__resolve(sp->src, b), st->d_tok,
                               gp__resolve(sp->dst, b), b->n, op->in.c));
        return GP_OK;
    }
    CK(c, gp__k_global_avgpool(gp_cuda_stream(b), st->kt, gp__resolve(sp->src, b),
                               gp__resolve(sp->dst, b), b->n, op->in.c,
                               (size_t)op->in.h * (size_t)op->in.w, st->nhwc));
    return GP_OK;
}

static int run_act(slot_state *st, const step *sp, const gp_batch *b, int, ck *c) {
    CK(c, gp__k_act(gp_cuda_stream(b), st->kt, gp__resolve(sp->src, b), gp__resolve(sp->dst, b),
                    gp__rows(st, sp->op->out, b) * gp__shape_numel(sp->op->out), (int)sp->op->act));
    return GP_OK;
}

static int run_add(slot_state *st, const step *sp, const gp_batch *b, int, ck *c) {
    CK(c, gp__k_add_act(gp_cuda_stream(b), st->kt, gp__resolve(sp->src, b),
                        gp__resolve(sp->src2, b), gp__resolve(sp->dst, b),
                        gp__rows(st, sp->op->out, b) * gp__shape_numel(sp->op->out),
                        (int)sp->op->act));
    return GP_OK;
}

// {consts, plan, bind, run, release}
const cuda_layer GP__CUDA_LAYER(MAXPOOL2D) = {nullptr, nullptr, nullptr, run_pool, nullptr};
const cuda_layer GP__CUDA_LAYER(AVGPOOL2D) = {nullptr, nullptr, nullptr, run_pool, nullptr};
const cuda_layer GP__CUDA_LAYER(GLOBALAVGPOOL) = {nullptr, nullptr, nullptr, run_globalavgpool,
                                                  nullptr};
const cuda_layer GP__CUDA_LAYER(ACT) = {nullptr, nullptr, nullptr, run_act, nullptr};
const cuda_layer GP__CUDA_LAYER(ADD) = {nullptr, nullptr, nullptr, run_add, nullptr};
