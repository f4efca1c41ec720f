// Transformer-encoder kernels besides attention (lib/model/model_impl.h): the embedding gather,
// layernorm, [CLS] pooling and l2norm, on token values (rows of the batch's packed token matrix)
// or item values. Arithmetic in fp32 whatever the storage type.
#include "kernel_util.cuh"
#include "cuda/layers.h"
#include "gpupipe/cuda.h"

namespace {

constexpr int kRowsPerBlock = gpk::kThreads / 32; // one warp per row

template <typename A> __device__ __forceinline__ A warp_sum(A v) {
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Blocks for `rows` rows of one warp each, capped; the kernels loop (grid stride).
inline unsigned row_blocks(size_t rows) {
    size_t b = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
    return (unsigned)(b < 8192 ? b : 8192);
}

// ---- embedding ----------------------------------------------------------------------------

constexpr int kEmbedRows = 16; // tokens per block, of one item

// out[t] = (word[id[t]] + type0) + pos[p], p = t's position in its item, summed in that order
// in fp32 and rounded once. A token whose id is outside 0..vocab-1, or whose position has no
// row in `pos`, gets a row of NaN: nothing is read out of bounds, and the bad item's result
// is visibly not a number (attention spreads it over that item only; every other op is per
// row or per item), where a clamped or zeroed id would give a plausible wrong answer. And it
// is recorded in `bad` (when not NULL) by the one thread that claims it, and its item flagged,
// so that item fails.
template <typename T, typename I>
__global__ void embed_kernel(const I *__restrict__ ids, const int64_t *__restrict__ tok,
                             const T *__restrict__ word, int vocab, const T *__restrict__ pos,
                             int positions, const float *__restrict__ type0, T *__restrict__ out,
                             int chunks, int C, gp__k_bad_token *bad, int tag) {
    const int item = (int)(blockIdx.x / (unsigned)chunks);
    const int p0 = (int)(blockIdx.x % (unsigned)chunks) * kEmbedRows;
    const int64_t t0 = tok[item];
    const int len = (int)(tok[item + 1] - t0);
    for (int p = p0; p < p0 + kEmbedRows && p < len; p++) {
        const int64_t t = t0 + p;
        const long long id = (long long)ids[t];
        const bool outside = id < 0 || id >= vocab || (pos && p >= positions);
        if (outside && bad && threadIdx.x == 0) {
            gp__k_bad_items(bad)[item] = 1;
            if (atomicCAS(&bad->found, 0, 1) == 0) {
                bad->item = item;
                bad->token = p;
                bad->tag = tag;
                bad->id = id;
            }
        }
        const T *w = word + (outside ? 0 : (size_t)id * (size_t)C);
        const T *pp = pos && !outside ? pos + (size_t)p * (size_t)C : nullptr;
        T *o = out + (size_t)t * (size_t)C;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float v;
            if (outside) {
                v = __int_as_float(0x7fc00000); // quiet NaN
            } else {
                v = gpk::ld(w + c); // BertEmbeddings' order, as the host: (word + type0) + pos
                if (type0) v += type0[c];
                if (pp) v += gpk::ld(pp + c);
            }
            gpk::st(o + c, v);
        }
    }
}

template <typename T>
cudaError_t embed_t(cudaStream_t s, const void *ids, int ids_i64, const int64_t *tok, size_t blocks,
                    int chunks, const void *word, int vocab, const void *pos, int positions,
                    const float *type0, void *out, int C, gp__k_bad_token *bad, int tag) {
    if (ids_i64)
        embed_kernel<T, int64_t><<<(unsigned)blocks, 128, 0, s>>>(
            (const int64_t *)ids, tok, (const T *)word, vocab, (const T *)pos, positions, type0,
            (T *)out, chunks, C, bad, tag);
    else
        embed_kernel<T, int32_t><<<(unsigned)blocks, 128, 0, s>>>(
            (const int32_t *)ids, tok, (const T *)word, vocab, (const T *)pos, positions, type0,
            (T *)out, chunks, C, bad, tag);
    return gpk::launched();
}

// ---- layernorm, l2norm ----------------------------------------------------------------------

// One warp per row, two passes over the row (mean, then the biased variance as the mean of
// squared deviations: no cancellation), both in double as the host's layernorm (an fp32 mean
// alone misses it by ~2e-5 relative once mean/std passes ~500); the third pass writes,
// y = (float)((x - mean) * rstd) * gamma + beta, the host's expression. The row is re-read
// from L1/L2 rather than kept in registers, so any C works. in == out is safe: a lane reads
// each element it writes before writing it, after the warp's statistics are complete. The
// kernel is bound by memory, not by the double arithmetic.
template <typename T>
__global__ void layernorm_kernel(const T *in, T *out, size_t rows, int C,
                                 const float *__restrict__ gamma, const float *__restrict__ beta,
                                 float eps) {
    const int lane = threadIdx.x & 31;
    for (size_t r = (size_t)blockIdx.x * kRowsPerBlock + threadIdx.x / 32; r < rows;
         r += (size_t)gridDim.x * kRowsPerBlock) {
        const T *x = in + r * (size_t)C;
        double sum = 0.0;
        for (int c = lane; c < C; c += 32)
            sum += (double)gpk::ld(x + c);
        const double mean = warp_sum(sum) / (double)C;
        double sq = 0.0;
        for (int c = lane; c < C; c += 32) {
            const double dv = (double)gpk::ld(x + c) - mean;
            sq += dv * dv;
        }
        const double rstd = 1.0 / sqrt(warp_sum(sq) / (double)C + (double)eps);
        T *y = out + r * (size_t)C;
        for (int c = lane; c < C; c += 32)
            gpk::st(y + c, (float)(((double)gpk::ld(x + c) - mean) * rstd) * gamma[c] + beta[c]);
    }
}

template <typename T>
cudaError_t layernorm_t(cudaStream_t s, const void *in, void *out, size_t rows, int C,
                        const float *gamma, const float *beta, float eps) {
    layernorm_kernel<T><<<row_blocks(rows), gpk::kThreads, 0, s>>>((const T *)in, (T *)out, rows, C,
                                                                   gamma, beta, eps);
    return gpk::launched();
}

// x / max(||x||_2, eps) per row (torch.nn.functional.normalize), the sum of squares in double
// as the host's (an fp32 sum overflows to inf past |x| ~ 1.8e19 and the row would become 0).
template <typename T>
__global__ void l2norm_kernel(const T *in, T *out, size_t rows, int C, float eps) {
    const int lane = threadIdx.x & 31;
    for (size_t r = (size_t)blockIdx.x * kRowsPerBlock + threadIdx.x / 32; r < rows;
         r += (size_t)gridDim.x * kRowsPerBlock) {
        const T *x = in + r * (size_t)C;
        double sq = 0.0;
        for (int c = lane; c < C; c += 32) {
            const double v = (double)gpk::ld(x + c);
            sq += v * v;
        }
        const double n = sqrt(warp_sum(sq));
        const float den = (float)(n < (double)eps ? (double)eps : n); // NaN stays NaN (host.c)
        T *y = out + r * (size_t)C;
        for (int c = lane; c < C; c += 32)
            gpk::st(y + c, gpk::ld(x + c) / den);
    }
}

template <typename T>
cudaError_t l2norm_t(cudaStream_t s, const void *in, void *out, size_t rows, int C, float eps) {
    l2norm_kernel<T>
        <<<row_blocks(rows), gpk::kThreads, 0, s>>>((const T *)in, (T *)out, rows, C, eps);
    return gpk::launched();
}

// ---- [CLS] pooling -----------------------------------------------------------------------------

// out[k] = in[tok[k]]: each item's first token.
template <typename T>
__global__ void pool_cls_kernel(const T *__restrict__ in, const int64_t *__restrict__ tok,
                                T *__restrict__ out, size_t count, int C) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t k = i / (size_t)C, c = i % (size_t)C;
        out[i] = in[(size_t)tok[k] * (size_t)C + c];
    }
}

template <typename T>
cudaError_t pool_cls_t(cudaStream_t s, const void *in, const int64_t *tok, void *out, size_t n,
                       int C) {
    const size_t count = n * (size_t)C;
    pool_cls_kernel<T>
        <<<gpk::grid_for(count), gpk::kThreads, 0, s>>>((const T *)in, tok, (T *)out, count, C);
    return gpk::launched();
}

} // namespace

extern "C" cudaError_t gp__k_embedding(cudaStream_t s, gp__kt t, const void *ids, int ids_i64,
                                       const int64_t *tok, size_t n, size_t max_len,
                                       const void *word, int vocab, const void *pos, int positions,
                                       const float *type0, void *out, int C, gp__k_bad_token *bad,
                                       int tag) {
    if (n == 0 || max_len == 0 || C <= 0) return cudaSuccess;
    if (!ids || !tok || !word || vocab < 1 || (pos && positions < 1) || !out)
        return cudaErrorInvalidValue;
    const size_t chunks = (max_len + kEmbedRows - 1) / kEmbedRows;
    if (chunks > 0x7fffffffu / n) return cudaErrorInvalidConfiguration;
    return GPK_DISPATCH(t, embed_t, s, ids, ids_i64, tok, n * chunks, (int)chunks, word, vocab, pos,
                        positions, type0, out, C, bad, tag);
}

extern "C" cudaError_t gp__k_layernorm(cudaStream_t s, gp__kt t, const void *in, void *out,
                                       size_t rows, int C, const float *gamma, const float *beta,
                                       float eps) {
    if (rows == 0 || C <= 0) return cudaSuccess;
    if (!gamma || !beta) return cudaErrorInvalidValue;
    return GPK_DISPATCH(t, layernorm_t, s, in, out, rows, C, gamma, beta, eps);
}

extern "C" cudaError_t gp__k_l2norm(cudaStream_t s, gp__kt t, const void *in, void *out,
                                    size_t rows, int C, float eps) {
    if (rows == 0 || C <= 0) return cudaSuccess;
    return GPK_DISPATCH(t, l2norm_t, s, in, out, rows, C, eps);
}

extern "C" cudaError_t gp__k_pool_cls(cudaStream_t s, gp__kt t, const void *in, const int64_t *tok,
                                      void *out, size_t n, int C) {
    if (n == 0 || C <= 0) return cudaSuccess;
    return GPK_DISPATCH(t, pool_cls_t, s, in, tok, out, n, C);
}

// ---- the encoder layers (lib/cuda/layers.h): the launches above as the model runs them
// ------------------

// EMBEDDING reads the ids as they came (the model input, never staged); the rest run on token
// rows, POOL_CLS from tokens to items (lib/model/model_impl.h).

// The tables as the IR must hold them: a mismatch would make the upload read past the host
// arrays, so it is refused with what differs. Tables in the activation type, the type-0 row fp32.
static int consts_embedding(const gp__op *op, gp__consts *k, ck *c) {
    size_t C = (size_t)op->out.c;
    if (!op->weight || op->vocab < 1 || op->weight_count != (size_t)op->vocab * C)
        return CK_FAIL(c, GP_EMODEL, "embedding: word table of %zu floats, want vocab %d x %zu",
                       op->weight_count, op->vocab, C);
    if (op->weight2 && (op->positions < 1 || op->weight2_count != (size_t)op->positions * C))
        return CK_FAIL(c, GP_EMODEL,
                       "embedding: position table of %zu floats, want positions %d x %zu",
                       op->weight2_count, op->positions, C);
    gp__consts_put(k, GP__K_W, op->weight, 0.0f, (size_t)op->vocab * C, k->kt);
    if (op->weight2)
        gp__consts_put(k, GP__K_W2, op->weight2, 0.0f, (size_t)op->positions * C, k->kt);
    gp__consts_put(k, GP__K_BIAS_F32, op->bias, 0.0f, C, GP__KT_F32);
    return GP_OK;
}

// A token outside the tables is recorded in the slot's st->d_bad, tagged with the step's index
// (lib/cuda/model.c zeroes it before the steps, copies it back after them and fails the batch).
static int run_embedding(slot_state *st, const step *sp, const gp_batch *b, int, ck *c) {
    const gp__op *op = sp->op;
    CK(c, gp__k_embedding(gp_cuda_stream(b), st->kt, gp__resolve(sp->src, b),
                          op->in_dtype == GP_DTYPE_I64, st->d_tok, b->n, st->max_len, sp->k->w,
                          op->vocab, sp->k->w2, op->positions, sp->k->bias_f32,
                          gp__resolve(sp->dst, b), op->out.c, st->d_bad, (int)(sp - st->steps)));
    return GP_OK;
}

// gamma (ones when none) and beta in fp32
static int consts_layernorm(const gp__op *op, gp__consts *k, ck *) {
    gp__consts_put(k, GP__K_W_F32, op->weight, 1.0f, (size_t)op->out.c, GP__KT_F32);
    gp__consts_put(k, GP__K_BIAS_F32, op->bias, 0.0f, (size_t)op->out.c, GP__KT_F32);
    return GP_OK;
}

static int run_layernorm(slot_state *st, const step *sp, const gp_batch *b, int, ck *c) {
    const gp__op *op = sp->op;
    CK(c,
       gp__k_layernorm(gp_cuda_stream(b), st->kt, gp__resolve(sp->src, b), gp__resolve(sp->dst, b),
                       gp__rows(st, op->in, b), op->in.c, sp->k->w_f32, sp->k->bias_f32, op->eps));
    return GP_OK;
}

static int run_l2norm(slot_state *st, const step *sp, const gp_batch *b, int, ck *c) {
    const gp__op *op = sp->op;
    CK(c, gp__k_l2norm(gp_cuda_stream(b), st->kt, gp__resolve(sp->src, b), gp__resolve(sp->dst, b),
                       gp__rows(st, op->in, b), op->in.c, op->eps));
    return GP_OK;
}

static int run_pool_cls(slot_state *st, const step *sp, const gp_batch *b, int, ck *c) {
    CK(c, gp__k_pool_cls(gp_cuda_stream(b), st->kt, gp__resolve(sp->src, b), st->d_tok,
                         gp__resolve(sp->dst, b), b->n, sp->op->in.c));
    return GP_OK;
}

// {consts, plan, bind, run, release}
const cuda_layer GP__CUDA_LAYER(EMBEDDING) = {consts_embedding, nullptr, nullptr, run_embedding,
                                              nullptr};
const cuda_layer GP__CUDA_LAYER(LAYERNORM) = {consts_layernorm, nullptr, nullptr, run_layernorm,
                                              nullptr};
const cuda_layer GP__CUDA_LAYER(L2NORM) = {nullptr, nullptr, nullptr, run_l2norm, nullptr};
const cuda_layer GP__CUDA_LAYER(POOL_CLS) = {nullptr, nullptr, nullptr, run_pool_cls, nullptr};
