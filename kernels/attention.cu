// Multi-head self-attention over packed variable-length sequences (ATTENTION in
// lib/model/model_impl.h): every item attends over its own tokens only, nothing is padded.
//
// Input: the packed QKV matrix the projection GEMM writes, [T][3c] (row t: q | k | v, each c
// wide; head j at columns j*d .. j*d + d - 1 of each part), and the batch's token offsets
// tok[0..n] (item k: rows tok[k] .. tok[k + 1] - 1). Output: [T][c], head j at columns j*d.
// o = softmax(q k^T / sqrt(d)) v per item and head, fp32 softmax and accumulation.
//
// Two kernels, FlashAttention-2's structure (one pass over the K/V tiles per query tile,
// online softmax, the score tile never leaves the registers / the warp):
//
//  * mma (fp16 / bf16 on sm_80+, d a multiple of 8, d <= 128): a block is 4 warps and a query
//    tile of 64 rows of one (item, head); each warp owns 16 query rows. Q is staged through
//    shared memory into registers once (mma A fragments), then the block walks K/V tiles of
//    64 keys: S = Q K^T with mma.sync m16n8k16 (fp32 accumulators), scale and mask, the
//    online-softmax update in registers (row max / sum across the 4 lanes sharing a row),
//    P (rounded to the storage type) reused in registers as the A operand of O += P V. K and V
//    tiles arrive with cp.async (zero-filled past the item's end and past d), one buffer each,
//    V's load overlapping S and K's load overlapping P V; V shares its buffer with Q. Shared
//    memory: 2 * 64 * (DP + 8) * 2 bytes (DP = d rounded up to 32; the +8 halves per row keep
//    ldmatrix conflict-free): 34 KiB at DP = 128, under the 48 KiB static limit.
//  * simt (fp32 storage, i.e. the fp32 and tf32 precisions; and 16-bit storage where the mma
//    kernel does not apply): a block is 4 warps and 16 query rows (4 per warp); K/V tiles of
//    32 keys in shared memory as fp32; lane j scores key j against the warp's 4 rows, the warp
//    reduces max and sum by shuffles, and each lane accumulates o for d/32 columns. Exact fp32
//    FMA arithmetic (expf, no tensor cores).
//
// Grid: x = item * query tiles (the tiles of the longest item; a block past its item's end
// returns at once), y = head. Nothing is allocated and nothing synchronizes: safe under graph
// capture.
#include "kernel_util.cuh"

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMmaRows = 64; // query rows per block (16 per warp) = keys per K/V tile

// ---- helpers for the mma kernel (PTX ISA: ldmatrix, mma.m16n8k16, cp.async; sm_80+) ---------
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// 16 bytes global -> shared, asynchronously; src_bytes 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Wait until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i holds
// matrix i (lane l: row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1; .trans: transposed).
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// d[4] += A (16x16, row) * B (16x8, col), fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__half>(float d[4], const uint32_t a[4], uint32_t b0,
                                                 uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float d[4], const uint32_t a[4],
                                                        uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a packed pair of T, lo in the low half (the lower column / key index).
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

template <typename T> __device__ __forceinline__ void store2(T *p, float lo, float hi) {
    *reinterpret_cast<uint32_t *>(p) = pack2<T>(lo, hi);
}

// Rows [r0, r0 + 64) of one part (Q, K or V: column offset `col`) of the item's QKV rows into
// shared memory `s` (row stride LD elements), zero past the item's `len` rows and past d.
template <typename T, int DP, int LD>
__device__ __forceinline__ void load_tile(T *s, const T *base, size_t ld3, int col, int r0, int len,
                                          int d) {
    constexpr int kChunks = DP / 8; // 16-byte chunks per row
    static_assert(kMmaRows * kChunks % kThreads == 0, "whole passes over the tile");
#pragma unroll
    for (int it = 0; it < kMmaRows * kChunks / kThreads; it++) {
        const int i = it * kThreads + (int)threadIdx.x;
        const int r = i / kChunks, ch = i % kChunks, gr = r0 + r;
        const bool ok = gr < len && ch * 8 < d; // d % 8 == 0: a chunk is all in or all out
        // A chunk not read still names a valid address (the item's first row).
        const T *src = ok ? base + (size_t)gr * ld3 + (size_t)(col + ch * 8) : base;
        cp_async16(s + r * LD + ch * 8, src, ok ? 16 : 0);
    }
}

#endif // the helpers of the mma kernel

template <typename T, int DP>
__global__ void __launch_bounds__(kThreads)
    attn_mma_kernel(const T *__restrict__ qkv, const int64_t *__restrict__ tok, T *__restrict__ out,
                    int qtiles, int d, int c, float scale_log2) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    constexpr int BR = kMmaRows, BC = kMmaRows;
    constexpr int LD = DP + 8;  // elements per shared row: 16 bytes of padding (see the top)
    constexpr int NS = BC / 8;  // n-tiles of S (8 keys each)
    constexpr int NO = DP / 8;  // n-tiles of O (8 columns each)
    constexpr int KQ = DP / 16; // k-chunks of Q K^T
    // Raw 16-bit storage: __shared__ variables cannot have class types with constructors.
    __shared__ __align__(128) uint16_t s_qv_raw[BR * LD]; // Q, then V
    __shared__ __align__(128) uint16_t s_k_raw[BC * LD];
    T *s_qv = reinterpret_cast<T *>(s_qv_raw), *s_k = reinterpret_cast<T *>(s_k_raw);

    const int item = (int)(blockIdx.x / (unsigned)qtiles);
    const int q0 = (int)(blockIdx.x % (unsigned)qtiles) * BR;
    const int head = (int)blockIdx.y;
    const int64_t t0 = tok[item];
    const int len = (int)(tok[item + 1] - t0);
    if (q0 >= len) return; // the whole block: before any barrier

    const size_t ld3 = 3 * (size_t)c;
    const T *base = qkv + (size_t)t0 * ld3 + (size_t)head * (size_t)d;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, tq = lane & 3; // the mma fragments' row group and column pair

    // Group 0: Q and K(0).
    load_tile<T, DP, LD>(s_qv, base, ld3, 0, q0, len, d);
    load_tile<T, DP, LD>(s_k, base, ld3, c, 0, len, d);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    // Q fragments (A, 16 x 16 per k-chunk): lanes 0-15 rows 0-15 at column k0, lanes 16-31 the
    // same rows at k0 + 8.
    uint32_t qf[KQ][4];
#pragma unroll
    for (int kc = 0; kc < KQ; kc++)
        ldsm_x4(qf[kc], s_qv + (warp * 16 + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
    __syncthreads(); // every warp has its Q: the buffer becomes V's
    load_tile<T, DP, LD>(s_qv, base, ld3, 2 * c, 0, len, d);
    cp_async_commit(); // group: V(0)

    float o[NO][4];
#pragma unroll
    for (int i = 0; i < NO; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY; // rows g and g + 8, in log2 units
    float l0 = 0.0f, l1 = 0.0f;           // this lane's part of the rows' sums
    const int ntiles = (len + BC - 1) / BC;

    for (int j = 0; j < ntiles; j++) {
        // S = Q K(j)^T. K as the B operand (col layout) is K's rows as stored: ldmatrix
        // without .trans; one x4 covers 8 keys and 32 columns (two k-chunks).
        float s[NS][4];
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int k2 = 0; k2 < DP / 32; k2++) {
                uint32_t b[4];
                ldsm_x4(b, s_k + (nt * 8 + (lane & 7)) * LD + k2 * 32 + (lane >> 3) * 8);
                mma16816<T>(s[nt], qf[2 * k2], b[0], b[1]);
                mma16816<T>(s[nt], qf[2 * k2 + 1], b[2], b[3]);
            }
        }
        // Scale into log2 units, mask keys past the item, new row maxima (4 lanes per row).
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
            const int key = j * BC + nt * 8 + 2 * tq;
            s[nt][0] = key < len ? s[nt][0] * scale_log2 : -INFINITY;
            s[nt][1] = key + 1 < len ? s[nt][1] * scale_log2 : -INFINITY;
            s[nt][2] = key < len ? s[nt][2] * scale_log2 : -INFINITY;
            s[nt][3] = key + 1 < len ? s[nt][3] * scale_log2 : -INFINITY;
            mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
            mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        // Key 0 is in tile 0, so a row's maximum is finite from there on; the guard keeps a
        // row that saw only masked keys at exp2(-inf) = 0 instead of NaN.
        const float r0 = mx0 == -INFINITY ? 0.0f : mx0, r1 = mx1 == -INFINITY ? 0.0f : mx1;
        const float f0 = exp2f(m0 - r0), f1 = exp2f(m1 - r1);
        m0 = mx0;
        m1 = mx1;
        l0 *= f0;
        l1 *= f1;
#pragma unroll
        for (int i = 0; i < NO; i++) {
            o[i][0] *= f0;
            o[i][1] *= f0;
            o[i][2] *= f1;
            o[i][3] *= f1;
        }
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
            s[nt][0] = exp2f(s[nt][0] - r0);
            s[nt][1] = exp2f(s[nt][1] - r0);
            s[nt][2] = exp2f(s[nt][2] - r1);
            s[nt][3] = exp2f(s[nt][3] - r1);
            l0 += s[nt][0] + s[nt][1];
            l1 += s[nt][2] + s[nt][3];
        }

        __syncthreads(); // every warp is done with K(j)
        if (j + 1 < ntiles) load_tile<T, DP, LD>(s_k, base, ld3, c, (j + 1) * BC, len, d);
        cp_async_commit();  // group: K(j + 1) (empty after the last tile)
        cp_async_wait<1>(); // all but the newest group: V(j) has landed
        __syncthreads();

        // O += P V(j). P's A fragment for keys 16kc .. 16kc + 15 is S's accumulators of the
        // n-tiles 2kc and 2kc + 1; V as the B operand needs ldmatrix .trans; one x4 covers 16
        // keys and 16 columns (two n-tiles).
#pragma unroll
        for (int kc = 0; kc < BC / 16; kc++) {
            uint32_t a[4];
            a[0] = pack2<T>(s[2 * kc][0], s[2 * kc][1]);
            a[1] = pack2<T>(s[2 * kc][2], s[2 * kc][3]);
            a[2] = pack2<T>(s[2 * kc + 1][0], s[2 * kc + 1][1]);
            a[3] = pack2<T>(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#pragma unroll
            for (int np = 0; np < DP / 16; np++) {
                uint32_t b[4];
                ldsm_x4_trans(b, s_qv + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD +
                                     np * 16 + (lane >> 4) * 8);
                mma16816<T>(o[2 * np], a, b[0], b[1]);
                mma16816<T>(o[2 * np + 1], a, b[2], b[3]);
            }
        }

        __syncthreads(); // every warp is done with V(j)
        if (j + 1 < ntiles) load_tile<T, DP, LD>(s_qv, base, ld3, 2 * c, (j + 1) * BC, len, d);
        cp_async_commit();  // group: V(j + 1)
        cp_async_wait<1>(); // K(j + 1) has landed
        __syncthreads();
    }

    // The rows' sums over the 4 lanes that share them, then O / l.
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
    const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;
    T *ob = out + (size_t)t0 * (size_t)c + (size_t)head * (size_t)d;
#pragma unroll
    for (int i = 0; i < NO; i++) {
        const int col = i * 8 + 2 * tq; // d % 8 == 0: col < d implies col + 1 < d
        if (col >= d) continue;
        if (row0 < len)
            store2<T>(ob + (size_t)row0 * (size_t)c + col, o[i][0] * inv0, o[i][1] * inv0);
        if (row1 < len)
            store2<T>(ob + (size_t)row1 * (size_t)c + col, o[i][2] * inv1, o[i][3] * inv1);
    }
#else
    // Never launched below sm_80 (gp__k_attention_path picks the simt kernel there).
    __trap();
#endif
}

// ---- the simt kernel -------------------------------------------------------------------------

constexpr int kSimtRows = 16; // query rows per block: 4 per warp
constexpr int kSimtKeys = 32; // keys per K/V tile: one per lane

template <typename T, int DP>
__global__ void __launch_bounds__(kThreads)
    attn_simt_kernel(const T *__restrict__ qkv, const int64_t *__restrict__ tok,
                     T *__restrict__ out, int qtiles, int d, int c, float scale) {
    constexpr int DPL = DP / 32; // output columns per lane
    constexpr int R = kSimtRows / kWarps;
    __shared__ float s_q[kSimtRows][DP];
    __shared__ float s_k[kSimtKeys][DP + 1]; // +1: lane j reads row j without bank conflicts
    __shared__ float s_v[kSimtKeys][DP];

    const int item = (int)(blockIdx.x / (unsigned)qtiles);
    const int q0 = (int)(blockIdx.x % (unsigned)qtiles) * kSimtRows;
    const int head = (int)blockIdx.y;
    const int64_t t0 = tok[item];
    const int len = (int)(tok[item + 1] - t0);
    if (q0 >= len) return; // the whole block: before any barrier

    const size_t ld3 = 3 * (size_t)c;
    const T *base = qkv + (size_t)t0 * ld3 + (size_t)head * (size_t)d;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    for (int i = threadIdx.x; i < kSimtRows * DP; i += kThreads) {
        const int r = i / DP, k = i % DP, gr = q0 + r;
        s_q[r][k] = gr < len && k < d ? gpk::ld(base + (size_t)gr * ld3 + k) : 0.0f;
    }

    float o[R][DPL], m[R], l[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < DPL; e++)
            o[r][e] = 0.0f;
    }

    for (int k0 = 0; k0 < len; k0 += kSimtKeys) {
        __syncthreads(); // Q is in; the previous tile is done with
        for (int i = threadIdx.x; i < kSimtKeys * DP; i += kThreads) {
            const int r = i / DP, k = i % DP, gr = k0 + r;
            float kv = 0.0f, vv = 0.0f;
            if (gr < len && k < d) {
                const T *row = base + (size_t)gr * ld3 + k;
                kv = gpk::ld(row + c);
                vv = gpk::ld(row + 2 * (size_t)c);
            }
            s_k[r][k] = kv;
            s_v[r][k] = vv;
        }
        __syncthreads();

        const bool valid = k0 + lane < len;
        float p[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            float acc = 0.0f;
#pragma unroll 8
            for (int k = 0; k < DP; k++)
                acc = fmaf(s_q[warp * R + r][k], s_k[lane][k], acc);
            const float sc = valid ? acc * scale : -INFINITY;
            float mx = sc;
            for (int off = 16; off > 0; off >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float mnew = fmaxf(m[r], mx);
            const float ref = mnew == -INFINITY ? 0.0f : mnew; // see the mma kernel
            p[r] = expf(sc - ref);
            const float f = expf(m[r] - ref);
            float sum = p[r];
            for (int off = 16; off > 0; off >>= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, off);
            l[r] = l[r] * f + sum;
            m[r] = mnew;
#pragma unroll
            for (int e = 0; e < DPL; e++)
                o[r][e] *= f;
        }
        for (int jj = 0; jj < kSimtKeys; jj++) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float pj = __shfl_sync(0xffffffffu, p[r], jj);
#pragma unroll
                for (int e = 0; e < DPL; e++)
                    o[r][e] = fmaf(pj, s_v[jj][e * 32 + lane], o[r][e]);
            }
        }
    }

    T *ob = out + (size_t)t0 * (size_t)c + (size_t)head * (size_t)d;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int row = q0 + warp * R + r;
        if (row >= len) continue;
        const float inv = 1.0f / l[r];
#pragma unroll
        for (int e = 0; e < DPL; e++) {
            const int col = e * 32 + lane;
            if (col < d) gpk::st(ob + (size_t)row * (size_t)c + col, o[r][e] * inv);
        }
    }
}

// ---- launch ------------------------------------------------------------------------------------

enum { PATH_NONE = 0, PATH_SIMT = 1, PATH_MMA = 2 };

int path_of(gp__kt t, int d, int arch) {
    if (d < 1 || d > GP__ATTN_MAX_HEAD_DIM) return PATH_NONE;
    if (t == GP__KT_F32) return PATH_SIMT;
    if (t != GP__KT_F16 && t != GP__KT_BF16) return PATH_NONE;
    return arch >= 80 && d % 8 == 0 ? PATH_MMA : PATH_SIMT;
}

struct attn_args {
    const void *qkv;
    const int64_t *tok;
    void *out;
    dim3 grid;
    int qtiles, d, c;
    float scale;
};

template <typename T, int DP> cudaError_t launch_mma(cudaStream_t s, const attn_args &a) {
    const float scale_log2 = a.scale * 1.4426950408889634f; // log2(e)
    attn_mma_kernel<T, DP><<<a.grid, kThreads, 0, s>>>((const T *)a.qkv, a.tok, (T *)a.out,
                                                       a.qtiles, a.d, a.c, scale_log2);
    return gpk::launched();
}

template <typename T> cudaError_t mma_t(cudaStream_t s, const attn_args &a) {
    if (a.d <= 32) return launch_mma<T, 32>(s, a);
    if (a.d <= 64) return launch_mma<T, 64>(s, a);
    if (a.d <= 96) return launch_mma<T, 96>(s, a);
    return launch_mma<T, 128>(s, a);
}

template <typename T, int DP> cudaError_t launch_simt(cudaStream_t s, const attn_args &a) {
    attn_simt_kernel<T, DP><<<a.grid, kThreads, 0, s>>>((const T *)a.qkv, a.tok, (T *)a.out,
                                                        a.qtiles, a.d, a.c, a.scale);
    return gpk::launched();
}

template <typename T> cudaError_t simt_t(cudaStream_t s, const attn_args &a) {
    if (a.d <= 32) return launch_simt<T, 32>(s, a);
    if (a.d <= 64) return launch_simt<T, 64>(s, a);
    if (a.d <= 96) return launch_simt<T, 96>(s, a);
    return launch_simt<T, 128>(s, a);
}

} // namespace

extern "C" int gp__k_attention_path(gp__kt t, int head_dim, int arch) {
    return path_of(t, head_dim, arch);
}

extern "C" cudaError_t gp__k_attention_arch(int device_arch, int *arch) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, attn_mma_kernel<__half, 64>);
    if (e != cudaSuccess) return e;
    *arch = fa.ptxVersion < device_arch ? fa.ptxVersion : device_arch;
    return cudaSuccess;
}

extern "C" cudaError_t gp__k_attention(cudaStream_t s, gp__kt t, const void *qkv,
                                       const int64_t *tok, void *out, size_t n, size_t max_len,
                                       int heads, int head_dim, int arch) {
    if (n == 0 || max_len == 0) return cudaSuccess;
    const int path = path_of(t, head_dim, arch);
    if (path == PATH_NONE || heads < 1 || heads > 65535) return cudaErrorInvalidValue;
    const size_t rows = path == PATH_MMA ? (size_t)kMmaRows : (size_t)kSimtRows;
    const size_t qtiles = (max_len + rows - 1) / rows;
    if (qtiles > 0x7fffffffu / n || (size_t)heads * (size_t)head_dim > 0x7fffffffu / 3)
        return cudaErrorInvalidConfiguration;
    attn_args a;
    a.qkv = qkv;
    a.tok = tok;
    a.out = out;
    a.grid = dim3((unsigned)(n * qtiles), (unsigned)heads, 1);
    a.qtiles = (int)qtiles;
    a.d = head_dim;
    a.c = heads * head_dim;
    a.scale = 1.0f / sqrtf((float)head_dim); /* the host's expression, to the bit */
    if (path == PATH_MMA) return t == GP__KT_F16 ? mma_t<__half>(s, a) : mma_t<__nv_bfloat16>(s, a);
    return GPK_DISPATCH(t, simt_t, s, a);
}
