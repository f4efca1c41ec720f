/*
 * Host layers: im2col + the blocked GEMM for conv and linear, plain loops for the rest; the
 * layer table indexed by op kind, and the host backend's model table (model/exec.h).
 */
#include "host.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../clock.h"
#include "exec.h"
#include "gemm.h"

/* ---- preparation ----------------------------------------------------------------------- */

static size_t conv_k(const gp__op *op) {
    return (size_t)(op->in.c / op->groups) * (size_t)op->kh * (size_t)op->kw;
}

static int conv_direct(const gp__op *op) {
    /* A 1x1, stride 1, unpadded conv reads its input as the GEMM's B directly. */
    return op->kh == 1 && op->kw == 1 && op->stride_h == 1 && op->stride_w == 1 && op->pad_h == 0 &&
           op->pad_w == 0;
}

/* Items per conv GEMM. One item's GEMM has N = Ho*Wo columns: a ResNet's last layers have 49
   (224 input) or 1 (32 input), and a GEMM that narrow streams the whole packed weight matrix
   (9.4 MB for a 512x512 3x3 conv) from memory for every item. Small outputs therefore go
   several items at a time, their columns side by side, up to CONV_COLS columns per GEMM. */
enum { CONV_COLS = 256 };
static size_t conv_items(const gp__op *op) {
    size_t hw = (size_t)op->out.h * (size_t)op->out.w;
    return hw >= CONV_COLS ? 1 : CONV_COLS / hw;
}

int gp__host_prepare(gp__model *m, gp__err *e) {
    size_t work = 0;
    for (int i = 0; i < m->n_ops; i++) {
        gp__op *op = &m->ops[i];
        if (op->kind == GP__OP_LINEAR) {
            size_t M = (size_t)op->out.c, K = (size_t)op->in.c;
            float *p = gp__model_alloc(m, gp__gemm_packed_elems(M, K));
            if (!p) return gp__errf(e, GP_ENOMEM, "out of memory packing '%s'", op->name);
            gp__gemm_pack_a(M, K, op->weight, K, p);
            op->host_packed = p;
        } else if (op->kind == GP__OP_ATTENTION) { /* Wq;Wk;Wv as one GEMM, then Wo */
            size_t C = (size_t)op->in.c;
            float *p = gp__model_alloc(m, gp__gemm_packed_elems(3 * C, C));
            float *p2 = gp__model_alloc(m, gp__gemm_packed_elems(C, C));
            if (!p || !p2) return gp__errf(e, GP_ENOMEM, "out of memory packing '%s'", op->name);
            gp__gemm_pack_a(3 * C, C, op->weight, C, p);
            gp__gemm_pack_a(C, C, op->weight2, C, p2);
            op->host_packed = p;
            op->host_packed2 = p2;
        } else if (op->kind == GP__OP_CONV2D) {
            size_t G = (size_t)op->groups, Mg = (size_t)op->out.c / G, K = conv_k(op);
            size_t per = gp__gemm_packed_elems(Mg, K);
            float *p = gp__model_alloc(m, per * G);
            if (!p) return gp__errf(e, GP_ENOMEM, "out of memory packing '%s'", op->name);
            for (size_t g = 0; g < G; g++)
                gp__gemm_pack_a(Mg, K, op->weight + g * Mg * K, K, p + g * per);
            op->host_packed = p;
            size_t c = conv_items(op), cols = c * (size_t)op->out.h * (size_t)op->out.w;
            if (c > 1 || !conv_direct(op)) {
                /* im2col columns; with several items also their GEMM output (conv2d) */
                size_t need = (K * cols + 63) / 64 * 64 + (c > 1 ? Mg * cols : 0);
                if (need > work) work = need;
            }
        }
    }
    /* conv's columns (and output), then the GEMM's B packing, each 64-float aligned. */
    m->host_work_elems = (work + 63) / 64 * 64 + gp__gemm_work_elems();
    return GP_OK;
}

/* ---- ops ------------------------------------------------------------------------------- */

/* Columns of one group's input: col[((ci*kh + ky)*kw + kx) * ld + oy*Wo + ox] (ld >= Ho*Wo:
   several items' columns side by side). Per row, the output columns whose input falls inside
   the image form one range [ox0, ox1): zeros around it, a copy (stride 1) or a strided gather
   inside it. */
static void im2col(const gp__op *op, const float *in, float *col, size_t ld) {
    int H = op->in.h, W = op->in.w, Ho = op->out.h, Wo = op->out.w;
    int cin = op->in.c / op->groups, sw = op->stride_w;
    for (int ci = 0; ci < cin; ci++)
        for (int ky = 0; ky < op->kh; ky++)
            for (int kx = 0; kx < op->kw; kx++) {
                float *row = col + ((size_t)(ci * op->kh + ky) * (size_t)op->kw + (size_t)kx) * ld;
                const float *src = in + (size_t)ci * (size_t)H * (size_t)W;
                int off = kx * op->dil_w - op->pad_w; /* ix = ox * sw + off */
                int ox0 = off >= 0 ? 0 : (-off + sw - 1) / sw;
                int ox1 = W - 1 - off < 0 ? 0 : (W - 1 - off) / sw + 1;
                if (ox0 > Wo) ox0 = Wo;
                if (ox1 > Wo) ox1 = Wo;
                if (ox1 < ox0) ox1 = ox0;
                for (int oy = 0; oy < Ho; oy++) {
                    int iy = oy * op->stride_h - op->pad_h + ky * op->dil_h;
                    float *r = row + (size_t)oy * (size_t)Wo;
                    if (iy < 0 || iy >= H) {
                        memset(r, 0, (size_t)Wo * sizeof *r);
                        continue;
                    }
                    const float *s = src + (size_t)iy * (size_t)W;
                    for (int ox = 0; ox < ox0; ox++)
                        r[ox] = 0.0f;
                    if (sw == 1) {
                        if (ox1 > ox0)
                            memcpy(r + ox0, s + ox0 + off, (size_t)(ox1 - ox0) * sizeof *r);
                    } else {
                        for (int ox = ox0; ox < ox1; ox++)
                            r[ox] = s[ox * sw + off];
                    }
                    for (int ox = ox1; ox < Wo; ox++)
                        r[ox] = 0.0f;
                }
            }
}

/* Per group, a GEMM over `c` items at once (conv_items): C[cout_g][c*HWo] = W x columns; one
   item (c = 1) writes its output in place, several go through `tmp` and are copied out. The
   sums run over K in the same order either way: c changes no result. */
static void conv2d(const gp__op *op, size_t n, const float *in, float *out, float *work) {
    size_t G = (size_t)op->groups, K = conv_k(op);
    size_t cin_g = (size_t)op->in.c / G, cout_g = (size_t)op->out.c / G;
    size_t HWi = (size_t)op->in.h * (size_t)op->in.w, HWo = (size_t)op->out.h * (size_t)op->out.w;
    size_t per = gp__gemm_packed_elems(cout_g, K), cmax = conv_items(op);
    size_t in_numel = gp__shape_numel(op->in), out_numel = gp__shape_numel(op->out);
    /* work: columns | GEMM output (cmax > 1) | the GEMM's packing (host_prepare sized it) */
    size_t col_elems = cmax == 1 && conv_direct(op) ? 0 : (K * cmax * HWo + 63) / 64 * 64;
    size_t tmp_elems = cmax > 1 ? (cout_g * cmax * HWo + 63) / 64 * 64 : 0;
    float *col = work, *tmp = work + col_elems, *gw = tmp + tmp_elems;
    for (size_t i0 = 0; i0 < n; i0 += cmax) {
        size_t c = n - i0 < cmax ? n - i0 : cmax, ld = c * HWo;
        for (size_t g = 0; g < G; g++) {
            const float *B = in + i0 * in_numel + g * cin_g * HWi;
            if (c > 1 || !conv_direct(op)) {
                for (size_t j = 0; j < c; j++)
                    im2col(op, in + (i0 + j) * in_numel + g * cin_g * HWi, col + j * HWo, ld);
                B = col;
            }
            const float *bias = op->bias + g * cout_g;
            if (c == 1) {
                gp__gemm(cout_g, HWo, K, op->host_packed + g * per, B, (ptrdiff_t)HWo, 1,
                         out + i0 * out_numel + g * cout_g * HWo, (ptrdiff_t)HWo, 1, bias, op->act,
                         gw);
                continue;
            }
            gp__gemm(cout_g, ld, K, op->host_packed + g * per, B, (ptrdiff_t)ld, 1, tmp,
                     (ptrdiff_t)ld, 1, bias, op->act, gw);
            for (size_t j = 0; j < c; j++)
                for (size_t o = 0; o < cout_g; o++)
                    memcpy(out + (i0 + j) * out_numel + (g * cout_g + o) * HWo,
                           tmp + o * ld + j * HWo, HWo * sizeof *out);
        }
    }
}

static void linear(const gp__op *op, size_t n, const float *in, float *out, float *work) {
    size_t M = (size_t)op->out.c, K = (size_t)op->in.c;
    /* y^T = W x^T: B(k, j) = x[j][k], C(i, j) = y[j][i]. */
    gp__gemm(M, n, K, op->host_packed, in, 1, (ptrdiff_t)K, out, 1, (ptrdiff_t)M, op->bias, op->act,
             work);
}

static void prep(const gp__op *op, size_t n, const void *in, float *out) {
    int C = op->out.c, H = op->out.h, W = op->out.w;
    size_t per = gp__shape_numel(op->out);
    for (size_t item = 0; item < n; item++) {
        float *y = out + item * per;
        for (int c = 0; c < C; c++) {
            float mean = op->mean[c], sd = op->std[c];
            for (int h = 0; h < H; h++)
                for (int w = 0; w < W; w++) {
                    size_t src = op->hwc
                                     ? ((size_t)h * (size_t)W + (size_t)w) * (size_t)C + (size_t)c
                                     : ((size_t)c * (size_t)H + (size_t)h) * (size_t)W + (size_t)w;
                    float v;
                    if (op->in_dtype == GP_DTYPE_U8)
                        v = (float)((const uint8_t *)in)[item * per + src] / 255.0f;
                    else
                        v = ((const float *)in)[item * per + src];
                    y[((size_t)c * (size_t)H + (size_t)h) * (size_t)W + (size_t)w] =
                        (v - mean) / sd;
                }
        }
    }
}

static void pool(const gp__op *op, size_t n, const float *in, float *out, int is_max) {
    int C = op->in.c, H = op->in.h, W = op->in.w, Ho = op->out.h, Wo = op->out.w;
    float div = (float)(op->kh * op->kw);
    for (size_t item = 0; item < n; item++)
        for (int c = 0; c < C; c++) {
            const float *x = in + (item * (size_t)C + (size_t)c) * (size_t)H * (size_t)W;
            float *y = out + (item * (size_t)C + (size_t)c) * (size_t)Ho * (size_t)Wo;
            for (int oy = 0; oy < Ho; oy++)
                for (int ox = 0; ox < Wo; ox++) {
                    int y0 = oy * op->stride_h - op->pad_h, x0 = ox * op->stride_w - op->pad_w;
                    float acc = is_max ? -INFINITY : 0.0f;
                    for (int ky = 0; ky < op->kh; ky++) {
                        int iy = y0 + ky;
                        if (iy < 0 || iy >= H) continue;
                        for (int kx = 0; kx < op->kw; kx++) {
                            int ix = x0 + kx;
                            if (ix < 0 || ix >= W) continue;
                            float v = x[(size_t)iy * (size_t)W + (size_t)ix];
                            if (is_max)
                                acc = (v > acc || isnan(v)) ? v : acc;
                            else
                                acc += v;
                        }
                    }
                    y[(size_t)oy * (size_t)Wo + (size_t)ox] = is_max ? acc : acc / div;
                }
        }
}

static void globalavgpool(const gp__op *op, size_t n, const float *in, float *out) {
    size_t HW = (size_t)op->in.h * (size_t)op->in.w;
    for (size_t i = 0; i < n * (size_t)op->in.c; i++) {
        double s = 0.0;
        for (size_t k = 0; k < HW; k++)
            s += in[i * HW + k];
        out[i] = (float)(s / (double)HW);
    }
}

static void softmax(const gp__op *op, size_t n, const float *in, float *out) {
    size_t F = (size_t)op->in.c;
    for (size_t item = 0; item < n; item++) {
        const float *x = in + item * F;
        float *y = out + item * F;
        float mx = -INFINITY;
        for (size_t i = 0; i < F; i++)
            mx = x[i] > mx ? x[i] : mx;
        double s = 0.0;
        for (size_t i = 0; i < F; i++) {
            y[i] = expf(x[i] - mx);
            s += y[i];
        }
        float inv = (float)(1.0 / s);
        for (size_t i = 0; i < F; i++)
            y[i] *= inv;
    }
}

/* a ranks before b: larger, NaN largest (as torch), then the lower index. */
static int ranks_before(float a, float b) {
    if (isnan(a)) return !isnan(b);
    return a > b;
}

static void topk(const gp__op *op, size_t n, const float *in, int64_t *out) {
    size_t F = (size_t)op->in.c, K = (size_t)op->k;
    for (size_t item = 0; item < n; item++) {
        const float *x = in + item * F;
        int64_t *idx = out + item * K;
        size_t have = 0;
        for (size_t i = 0; i < F; i++) {
            /* insertion into the sorted best-K; equal values keep index order */
            if (have == K && !ranks_before(x[i], x[idx[K - 1]])) continue;
            size_t pos = have < K ? have++ : K - 1;
            while (pos > 0 && ranks_before(x[i], x[idx[pos - 1]])) {
                idx[pos] = idx[pos - 1];
                pos--;
            }
            idx[pos] = (int64_t)i;
        }
    }
}

/* Mean over each item's own tokens: out[k][c] = mean of in[t][c], t in tok[k] .. tok[k + 1]
   (the sum in double, as the per-item global pool). */
static void token_mean(const gp__op *op, const gp__run *r, const float *in, float *out) {
    size_t C = (size_t)op->in.c;
    for (size_t k = 0; k < r->n; k++) {
        size_t t0 = (size_t)r->tok[k], t1 = (size_t)r->tok[k + 1];
        for (size_t ch = 0; ch < C; ch++) {
            double acc = 0.0;
            for (size_t t = t0; t < t1; t++)
                acc += in[t * C + ch];
            out[k * C + ch] = (float)(acc / (double)(t1 - t0));
        }
    }
}

/* ---- scratch ------------------------------------------------------------------------------ */

/* Where the slot's scratch is: item buffers for `cap` items, token buffers for `tcap` tokens,
   the GEMM / im2col workspace, and the attention's own: Q, K, V of every token of the batch
   (`qkv`, tcap rows of the widest attention's 3c; each head's output overwrites its Q), one
   item's K of one head transposed (`kt`, d x max_tokens), one row of scores (`row`,
   max_tokens) and one head's output row (`orow`, d). */
typedef struct scratch {
    float *items, *tokens, *work;
    size_t cap, tcap;
    float *qkv, *kt, *row, *orow;
    uint64_t *prof; /* options.profile, a pipeline slot's: each op's ns in this batch, or NULL */
} scratch;

static size_t align64(size_t n) {
    return (n + 63) / 64 * 64;
}

/* The attention scratch: floats per token of the batch (the widest 3c), and the widest
   head (d) for kt and orow. Zeros when the model has no attention. */
static void attn_need(const gp__model *m, size_t *per_token, size_t *dmax) {
    *per_token = *dmax = 0;
    for (int i = 0; i < m->n_ops; i++) {
        const gp__op *op = &m->ops[i];
        if (op->kind != GP__OP_ATTENTION) continue;
        size_t C = (size_t)op->in.c, d = C / (size_t)op->heads;
        if (3 * C > *per_token) *per_token = 3 * C;
        if (d > *dmax) *dmax = d;
    }
}

/* ---- encoder layers (model_impl.h: EMBEDDING .. L2NORM) ----------------------------------- */

/* Token t's id; the arena gives no alignment promise beyond the byte. */
static int64_t token_id(const void *ids, gp_dtype dt, size_t t) {
    if (dt == GP_DTYPE_I64) {
        int64_t v;
        memcpy(&v, (const char *)ids + 8 * t, 8);
        return v;
    }
    if (dt == GP_DTYPE_U32) {
        uint32_t v;
        memcpy(&v, (const char *)ids + 4 * t, 4);
        return (int64_t)v;
    }
    int32_t v;
    memcpy(&v, (const char *)ids + 4 * t, 4);
    return (int64_t)v;
}

static int embedding(const gp__op *op, const gp__run *r, const void *ids, float *out, gp__err *e) {
    size_t C = (size_t)op->out.c;
    const float *type0 = op->bias;
    for (size_t k = 0; k < r->n; k++) {
        size_t t0 = (size_t)r->tok[k], t1 = (size_t)r->tok[k + 1];
        if (op->weight2 && t1 - t0 > (size_t)op->positions)
            return gp__errf(e, GP_EINVAL,
                            "item %zu of the batch has %zu tokens, more than the %d position "
                            "embeddings",
                            k, t1 - t0, op->positions);
        for (size_t t = t0; t < t1; t++) {
            int64_t id = token_id(ids, op->in_dtype, t);
            float *y = out + t * C;
            if (id < 0 || id >= op->vocab) {
                /* In a pipeline the item fails alone (its rows NaN, as on CUDA) and its
                   batchmates go on; counted and told only when this failed it (not an
                   abandoned reservation's bytes, no one's, nor an item whose deadline had
                   passed). Outside one, or for a batch that is not the pipeline's, the run
                   fails. */
                int frc = r->batch ? gp_batch_fail_item(r->batch, k, GP_EINVAL) : GP_EINVAL;
                if (frc == GP_EINVAL || (frc == GP_OK && (*r->failed)++ == 0)) {
                    int rc = gp__errf(e, GP_EINVAL,
                                      "item %zu of the batch: token %zu has id %lld, outside the "
                                      "vocabulary 0..%d of embedding '%s'",
                                      k, t - t0, (long long)id, op->vocab - 1, op->name);
                    if (frc == GP_EINVAL) return rc;
                }
                for (size_t c = 0; c < C; c++)
                    y[c] = NAN;
                continue;
            }
            const float *w = op->weight + (size_t)id * C;
            if (op->weight2) { /* BertEmbeddings' order: (word + type) + position */
                const float *pe = op->weight2 + (t - t0) * C;
                for (size_t c = 0; c < C; c++)
                    y[c] = (w[c] + type0[c]) + pe[c];
            } else {
                for (size_t c = 0; c < C; c++)
                    y[c] = w[c] + type0[c];
            }
        }
    }
    return GP_OK;
}

/* Mean and biased variance in double (two passes): the row's own scale cannot cancel out. */
static void layernorm(const gp__op *op, size_t rows, const float *in, float *out) {
    size_t C = (size_t)op->in.c;
    for (size_t rr = 0; rr < rows; rr++) {
        const float *x = in + rr * C;
        float *y = out + rr * C;
        double s = 0.0;
        for (size_t c = 0; c < C; c++)
            s += x[c];
        double mean = s / (double)C, v = 0.0;
        for (size_t c = 0; c < C; c++) {
            double d = x[c] - mean;
            v += d * d;
        }
        double rstd = 1.0 / sqrt(v / (double)C + (double)op->eps);
        for (size_t c = 0; c < C; c++)
            y[c] = (float)(((double)x[c] - mean) * rstd) * op->weight[c] + op->bias[c];
    }
}

/* Q, K, V for every token of the batch with one GEMM; then per item and head, over the item's
   own tokens only, softmax(q k^T / sqrt(d)) v with the row's maximum subtracted and the sum in
   double; the heads' outputs (written over their Q) go through the output projection as one
   GEMM. */
static void attention(const gp__op *op, const gp__run *r, const float *in, float *out,
                      const scratch *sc) {
    size_t C = (size_t)op->in.c, C3 = 3 * C, H = (size_t)op->heads, d = C / H, T = r->tokens;
    float *qkv = sc->qkv, *kt = sc->kt, *row = sc->row, *o = sc->orow;
    gp__gemm(C3, T, C, op->host_packed, in, 1, (ptrdiff_t)C, qkv, 1, (ptrdiff_t)C3, op->bias,
             GP__ACT_NONE, sc->work);
    float scale = 1.0f / sqrtf((float)d);
    for (size_t k = 0; k < r->n; k++) {
        size_t t0 = (size_t)r->tok[k], L = (size_t)r->tok[k + 1] - t0;
        for (size_t h = 0; h < H; h++) {
            const float *K = qkv + t0 * C3 + C + h * d, *V = qkv + t0 * C3 + 2 * C + h * d;
            for (size_t j = 0; j < L; j++)
                for (size_t x = 0; x < d; x++)
                    kt[x * L + j] = K[j * C3 + x];
            for (size_t i = 0; i < L; i++) {
                float *q = qkv + (t0 + i) * C3 + h * d;
                for (size_t j = 0; j < L; j++)
                    row[j] = 0.0f;
                for (size_t x = 0; x < d; x++) {
                    float qx = q[x];
                    const float *kr = kt + x * L;
                    for (size_t j = 0; j < L; j++)
                        row[j] += qx * kr[j];
                }
                float mx = -INFINITY;
                for (size_t j = 0; j < L; j++) {
                    row[j] *= scale;
                    mx = row[j] > mx ? row[j] : mx;
                }
                double sum = 0.0;
                for (size_t j = 0; j < L; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                for (size_t x = 0; x < d; x++)
                    o[x] = 0.0f;
                for (size_t j = 0; j < L; j++) {
                    float p = row[j];
                    const float *vr = V + j * C3;
                    for (size_t x = 0; x < d; x++)
                        o[x] += p * vr[x];
                }
                float inv = (float)(1.0 / sum);
                for (size_t x = 0; x < d; x++)
                    q[x] = o[x] * inv; /* this Q row of this head is not read again */
            }
        }
    }
    gp__gemm(C, T, C, op->host_packed2, qkv, 1, (ptrdiff_t)C3, out, 1, (ptrdiff_t)C, op->bias2,
             GP__ACT_NONE, sc->work);
}

static void pool_cls(const gp__op *op, const gp__run *r, const float *in, float *out) {
    size_t C = (size_t)op->in.c;
    for (size_t k = 0; k < r->n; k++)
        memcpy(out + k * C, in + (size_t)r->tok[k] * C, C * sizeof *out);
}

/* x / max(||x||, eps), as torch.nn.functional.normalize (clamp_min: a NaN norm stays NaN, so
   does the row); the norm in double. */
static void l2norm(const gp__op *op, size_t rows, const float *in, float *out) {
    size_t C = (size_t)op->in.c;
    for (size_t rr = 0; rr < rows; rr++) {
        const float *x = in + rr * C;
        float *y = out + rr * C;
        double ss = 0.0;
        for (size_t c = 0; c < C; c++)
            ss += (double)x[c] * x[c];
        double n = sqrt(ss);
        float den = (float)(n < (double)op->eps ? (double)op->eps : n);
        for (size_t c = 0; c < C; c++)
            y[c] = x[c] / den;
    }
}

/* ---- the layer table -------------------------------------------------------------------- */

/* One host layer: the batch `r` (n items; tokens, for token values) of `src` (and `src2` for
   ADD) into `dst`, with the slot's scratch. PREP and EMBEDDING read the raw input through
   `src`. GP_OK, or a failure of the batch with its message in `e` (a bad token id). */
typedef int (*host_layer)(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                          float *dst, const scratch *sc, gp__err *e);

/* Rows of a value: items, or tokens for a token value. */
static size_t rows(gp__shape s, const gp__run *r) {
    return s.tokens ? r->tokens : r->n;
}

static int l_prep(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                  float *dst, const scratch *sc, gp__err *e) {
    prep(op, r->n, src, dst);
    return GP_OK;
}
static int l_conv2d(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                    float *dst, const scratch *sc, gp__err *e) {
    if (!src2) {
        conv2d(op, r->n, src, dst, sc->work);
        return GP_OK;
    }
    /* A folded residual add (model_impl.h, Buffers): the conv with its bias, then the add and
       the activation, as the unfolded ops computed them. */
    gp__op plain = *op;
    plain.act = GP__ACT_NONE;
    conv2d(&plain, r->n, src, dst, sc->work);
    size_t numel = r->n * gp__shape_numel(op->out);
    for (size_t k = 0; k < numel; k++)
        dst[k] = gp__act_apply(op->act, dst[k] + src2[k]);
    return GP_OK;
}
static int l_linear(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                    float *dst, const scratch *sc, gp__err *e) {
    linear(op, rows(op->in, r), src, dst, sc->work); /* token by token: one GEMM over T rows */
    return GP_OK;
}
static int l_maxpool2d(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                       float *dst, const scratch *sc, gp__err *e) {
    pool(op, r->n, src, dst, 1);
    return GP_OK;
}
static int l_avgpool2d(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                       float *dst, const scratch *sc, gp__err *e) {
    pool(op, r->n, src, dst, 0);
    return GP_OK;
}
static int l_globalavgpool(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                           float *dst, const scratch *sc, gp__err *e) {
    if (op->in.tokens)
        token_mean(op, r, src, dst);
    else
        globalavgpool(op, r->n, src, dst);
    return GP_OK;
}
static int l_act(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                 float *dst, const scratch *sc, gp__err *e) {
    size_t numel = rows(op->out, r) * gp__shape_numel(op->out);
    for (size_t k = 0; k < numel; k++)
        dst[k] = gp__act_apply(op->act, src[k]);
    return GP_OK;
}
static int l_add(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                 float *dst, const scratch *sc, gp__err *e) {
    size_t numel = rows(op->out, r) * gp__shape_numel(op->out);
    for (size_t k = 0; k < numel; k++)
        dst[k] = gp__act_apply(op->act, src[k] + src2[k]);
    return GP_OK;
}
static int l_softmax(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                     float *dst, const scratch *sc, gp__err *e) {
    softmax(op, r->n, src, dst);
    return GP_OK;
}
static int l_topk(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                  float *dst, const scratch *sc, gp__err *e) {
    topk(op, r->n, src, (int64_t *)(void *)dst);
    return GP_OK;
}
static int l_copy(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                  float *dst, const scratch *sc, gp__err *e) {
    if (dst != src) memcpy(dst, src, rows(op->out, r) * gp__shape_numel(op->out) * sizeof(float));
    return GP_OK;
}
static int l_embedding(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                       float *dst, const scratch *sc, gp__err *e) {
    return embedding(op, r, src, dst, e);
}
static int l_layernorm(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                       float *dst, const scratch *sc, gp__err *e) {
    layernorm(op, rows(op->in, r), src, dst);
    return GP_OK;
}
static int l_attention(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                       float *dst, const scratch *sc, gp__err *e) {
    attention(op, r, src, dst, sc);
    return GP_OK;
}
static int l_pool_cls(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                      float *dst, const scratch *sc, gp__err *e) {
    pool_cls(op, r, src, dst);
    return GP_OK;
}
static int l_l2norm(const gp__op *op, const gp__run *r, const float *src, const float *src2,
                    float *dst, const scratch *sc, gp__err *e) {
    l2norm(op, rows(op->in, r), src, dst);
    return GP_OK;
}

/* Indexed by op kind; every op has a host layer (it is the reference). */
static const host_layer host_layers[GP__OP_COUNT_] = {
    [GP__OP_PREP] = l_prep,
    [GP__OP_CONV2D] = l_conv2d,
    [GP__OP_LINEAR] = l_linear,
    [GP__OP_MAXPOOL2D] = l_maxpool2d,
    [GP__OP_AVGPOOL2D] = l_avgpool2d,
    [GP__OP_GLOBALAVGPOOL] = l_globalavgpool,
    [GP__OP_ACT] = l_act,
    [GP__OP_ADD] = l_add,
    [GP__OP_SOFTMAX] = l_softmax,
    [GP__OP_ARGMAX] = l_topk,
    [GP__OP_TOPK] = l_topk,
    [GP__OP_COPY] = l_copy,
    [GP__OP_EMBEDDING] = l_embedding,
    [GP__OP_LAYERNORM] = l_layernorm,
    [GP__OP_ATTENTION] = l_attention,
    [GP__OP_POOL_CLS] = l_pool_cls,
    [GP__OP_L2NORM] = l_l2norm,
};

static float *bufp(const gp__model *m, const scratch *sc, int id, const void *in, void *out) {
    if (id == GP__BUF_INPUT) return (float *)(uintptr_t)in; /* read-only by the plan */
    if (id == GP__BUF_OUTPUT) return out;
    const gp__buf *b = &m->bufs[id];
    return b->tokens ? sc->tokens + sc->tcap * b->offset : sc->items + sc->cap * b->offset;
}

/* Run ops 0..last (m->n_ops - 1 for the whole model). */
static int run_ops_upto(const gp__model *m, const gp__run *r, const void *in, void *out,
                        const scratch *sc, int last, gp__err *e) {
    if (r->n > sc->cap || r->tokens > sc->tcap)
        return gp__errf(e, GP_EINVAL,
                        "%zu items of %zu tokens exceed the slot's scratch (%zu items, %zu "
                        "tokens)",
                        r->n, r->tokens, sc->cap, sc->tcap);
    for (int i = 0; i <= last; i++) {
        const gp__op *op = &m->ops[i];
        if ((unsigned)op->kind >= GP__OP_COUNT_ || !host_layers[op->kind])
            return gp__errf(e, GP_EINVAL, "no host layer for op %d ('%s')", i,
                            gp__op_name(op->kind));
        const float *src2 = gp__op_has_src2(op) ? bufp(m, sc, op->src2, in, out) : NULL;
        uint64_t t0 = sc->prof ? gp__now_ns() : 0;
        int rc = host_layers[op->kind](op, r, bufp(m, sc, op->src, in, out), src2,
                                       bufp(m, sc, op->dst, in, out), sc, e);
        if (rc != GP_OK) return rc;
        if (sc->prof) sc->prof[i] += gp__now_ns() - t0;
    }
    return GP_OK;
}

static int run_ops(const gp__model *m, const gp__run *r, const void *in, void *out,
                   const scratch *sc, gp__err *e) {
    return run_ops_upto(m, r, in, out, sc, m->n_ops - 1, e);
}

/* ---- the host backend's model table (model/exec.h) ------------------------------------------ */

/* A slot runs a fixed-size batch through the whole op list a chunk of items at a time, the
   chunk's scratch kept within this budget: whole batches for small models, a few items at a
   time for large images, so a host slot's memory does not grow with max_batch. Results do not
   depend on the chunking (each item's arithmetic is the same). A variable-length batch runs
   whole: its token buffers hold the batch's tokens. */
#define HOST_SCRATCH_BUDGET ((size_t)32 << 20)

typedef struct host_slot {
    size_t chunk; /* items per pass */
    scratch sc;
    int64_t *tok; /* variable-length: chunk + 1 token offsets */
    void *mem;    /* one allocation for all of the above but sc.prof */
} host_slot;

static size_t host_chunk(const gp__model *m, size_t want) {
    if (m->token_bytes) return want; /* whole batches (above) */
    size_t per = m->scratch_elems * sizeof(float);
    size_t c = per ? HOST_SCRATCH_BUDGET / per : want;
    if (c < 1) c = 1;
    return c < want ? c : want;
}

/* Scratch for `items` items and `tokens` tokens (variable-length models), all of it now: a
   batch allocates nothing. */
static int slot_alloc(const gp__model *m, host_slot *s, size_t items, size_t tokens) {
    size_t chunk = host_chunk(m, items), it, tk, qkv, total, a_tok, dmax, L = m->max_tokens;
    attn_need(m, &a_tok, &dmax);
    size_t a_fixed = dmax ? align64(dmax * L) + align64(L) + align64(dmax) : 0;
    if (!gp__mul_ok(chunk, m->scratch_elems, &it) ||
        !gp__mul_ok(tokens, m->scratch_tok_elems, &tk) || !gp__mul_ok(tokens, a_tok, &qkv) ||
        !gp__add_ok(it, tk, &total) || !gp__add_ok(total, qkv, &total) ||
        !gp__add_ok(total, a_fixed + m->host_work_elems + 4 * 64 + 2 * (chunk + 1), &total) ||
        total > SIZE_MAX / sizeof(float))
        return GP_ENOMEM;
    void *p = NULL;
    if (posix_memalign(&p, 64, total * sizeof(float)) != 0) return GP_ENOMEM;
    float *f = p;
    s->mem = p;
    s->chunk = chunk;
    s->sc = (scratch){.items = f, .cap = chunk, .tcap = tokens};
    f += align64(it);
    s->sc.tokens = f;
    f += align64(tk);
    s->sc.work = f;
    f += align64(m->host_work_elems);
    s->sc.qkv = f;
    f += align64(qkv);
    s->sc.kt = f;
    s->sc.row = f + (dmax ? align64(dmax * L) : 0);
    s->sc.orow = s->sc.row + (dmax ? align64(L) : 0);
    f += a_fixed;
    s->tok = (int64_t *)(void *)f; /* 64-byte aligned; 2 floats per int64 were counted */
    return GP_OK;
}

static int run_chunked(const gp__model *m, const host_slot *s, size_t n, const void *in, void *out,
                       gp__err *e) {
    int rc = GP_OK;
    for (size_t i = 0; i < n && rc == GP_OK; i += s->chunk) {
        gp__run r = {.n = n - i < s->chunk ? n - i : s->chunk};
        rc = run_ops(m, &r, (const char *)in + i * m->in_info.bytes,
                     (char *)out + i * m->out_info.bytes, &s->sc, e);
    }
    return rc;
}

/* Ops 0..last on n packed items: item k is in[off[k] - off[0] .. off[k + 1] - off[0]). */
static int run_packed(const gp__model *m, host_slot *s, size_t n, const void *in,
                      const uint64_t *off, int last, void *out, const gp_batch *b, size_t *failed,
                      gp__err *e) {
    int rc = gp__token_offsets(m, n, off, s->tok, NULL, e);
    if (rc != GP_OK) return rc;
    gp__run r = {.n = n, .tokens = (size_t)s->tok[n], .tok = s->tok, .batch = b, .failed = failed};
    return run_ops_upto(m, &r, (const char *)in + off[0], out, &s->sc, last, e);
}

int gp__host_run_alone(gp__model *m, size_t n, const void *in, void *out) {
    host_slot s;
    if (slot_alloc(m, &s, n, 0) != GP_OK) return GP_ENOMEM;
    int rc = run_chunked(m, &s, n, in, out, NULL);
    free(s.mem);
    return rc;
}

/* n packed items on scratch of their own: ops 0..last into `out`, or, with `tokens_out`, op
   last's token buffer copied there. */
static int run_packed_alone(gp__model *m, size_t n, const void *in, const uint64_t *off, int last,
                            void *out, float *tokens_out, gp__err *e) {
    if (off[n] < off[0])
        return gp__errf(e, GP_EINVAL, "offsets go backwards: %llu after %llu",
                        (unsigned long long)off[n], (unsigned long long)off[0]);
    /* The items first: an over-long one is GP_EINVAL, not an allocation of its size. */
    int rc = gp__token_offsets(m, n, off, NULL, NULL, e);
    if (rc != GP_OK) return rc;
    host_slot s;
    if (slot_alloc(m, &s, n, (size_t)((off[n] - off[0]) / m->token_bytes)) != GP_OK)
        return gp__errf(e, GP_ENOMEM, "out of memory for the host scratch of %zu items", n);
    rc = run_packed(m, &s, n, in, off, last, out, NULL, NULL, e);
    if (rc == GP_OK && tokens_out)
        memcpy(tokens_out, bufp(m, &s.sc, m->ops[last].dst, in, NULL),
               (size_t)s.tok[n] * (size_t)m->ops[last].out.c * sizeof *tokens_out);
    free(s.mem);
    return rc;
}

int gp__host_run_packed(gp__model *m, size_t n, const void *in, const uint64_t *off, void *out,
                        gp__err *e) {
    return run_packed_alone(m, n, in, off, m->n_ops - 1, out, NULL, e);
}

int gp__host_run_tokens(gp__model *m, size_t n, const void *in, const uint64_t *off, int op,
                        float *out, gp__err *e) {
    if (!m->token_bytes || op < 0 || op >= m->n_ops || !m->ops[op].out.tokens || m->ops[op].dst < 0)
        return gp__errf(e, GP_EINVAL, "op %d does not write a token buffer", op);
    return run_packed_alone(m, n, in, off, op, NULL, out, e);
}

static int host_setup(gp__model *m, const gp_batch *slot, void **state) {
    host_slot *s = calloc(1, sizeof *s);
    /* A variable-length slot holds in_capacity bytes of tokens at most. */
    size_t tokens = m->token_bytes ? slot->in_capacity / m->token_bytes : 0;
    if (!s || slot_alloc(m, s, slot->capacity, tokens) != GP_OK) {
        free(s);
        return GP__ERR(&m->err, GP_ENOMEM, "out of memory for the host scratch of %zu items",
                       slot->capacity);
    }
    if (m->prof && !(s->sc.prof = calloc((size_t)m->n_ops + 1, sizeof *s->sc.prof))) {
        free(s->mem);
        free(s);
        return GP__ERR(&m->err, GP_ENOMEM, "out of memory for the slot's per-op times");
    }
    *state = s;
    return GP_OK;
}

/* options.profile: the op list's times start from zero for each batch (scratch.prof), and a
   batch that ran adds them to the model's counters (profile.c). */
static void prof_begin(const gp__model *m, host_slot *s) {
    if (s->sc.prof) memset(s->sc.prof, 0, (size_t)m->n_ops * sizeof *s->sc.prof);
}

static void prof_end(gp__model *m, const host_slot *s, size_t items, int rc) {
    if (s->sc.prof && rc == GP_OK) gp__prof_batch(m, s->sc.prof, items);
}

static int host_compute(gp__model *m, void *state, const gp_batch *b) {
    host_slot *s = state;
    if (m->token_bytes) {
        char msg[320];
        gp__err e = {msg, sizeof msg};
        size_t failed = 0;
        prof_begin(m, s);
        int rc = b->in_offsets_host ? run_packed(m, s, b->n, b->in, b->in_offsets_host,
                                                 m->n_ops - 1, b->out, b, &failed, &e)
                                    : gp__errf(&e, GP_EINVAL,
                                               "a variable-length model needs "
                                               "variable-size items (offsets)");
        prof_end(m, s, b->n, rc);
        if (rc != GP_OK) return GP__ERR(&m->err, rc, "%s", msg);
        if (failed) { /* items failed alone: say why, in the model's error and the pipeline's */
            GP__ERR(&m->err, GP_EINVAL, "%s", msg);
            gp_batch_set_error(b, "%s", msg);
        }
        return GP_OK;
    }
    char msg[256] = "";
    gp__err e = {msg, sizeof msg};
    prof_begin(m, s);
    int rc = run_chunked(m, s, b->n, b->in, b->out, &e);
    prof_end(m, s, b->n, rc);
    if (rc != GP_OK)
        return GP__ERR(&m->err, rc, "host layers failed for a batch of %zu items: %s", b->n, msg);
    return GP_OK;
}

static void host_teardown(gp__model *m, void *state, const gp_batch *slot) {
    host_slot *s = state;
    if (!s) return;
    free(s->mem);
    free(s->sc.prof);
    free(s);
}

const gp__model_exec gp__model_host_exec = {
    .setup = host_setup,
    .run = host_compute,
    .teardown = host_teardown,
    .model_free = NULL, /* the host layers read the IR's weights directly */
};
