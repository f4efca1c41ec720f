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
        } else if (op->kind == GP__OP_CONV2D) {
            size_t G = (size_t)op->groups, Mg = (size_t)op->out.c / G, K = conv_k(op);
            size_t per = gp__gemm_packed_elems(Mg, K);
            float *p = gp__model_alloc(m, per * G);
            if (!p) return gp__errf(e, GP_ENOMEM, "out of memory packing '%s'", op->name);
            for (size_t g = 0; g < G; g++)
                gp__gemm_pack_a(Mg, K, op->weight + g * Mg * K, K, p + g * per);
            op->host_packed = p;
            if (!conv_direct(op)) {
                size_t col = K * (size_t)op->out.h * (size_t)op->out.w;
                if (col > work) work = col;
            }
        }
    }
    /* im2col columns, then the GEMM's B packing, each 64-float aligned. */
    m->host_work_elems = (work + 63) / 64 * 64 + gp__gemm_work_elems();
    return GP_OK;
}

/* ---- ops ------------------------------------------------------------------------------- */

/* Columns of one group's input: col[(ci*kh + ky)*kw + kx][oy*Wo + ox]. Per row, the output
   columns whose input falls inside the image form one range [ox0, ox1): zeros around it, a
   copy (stride 1) or a strided gather inside it. */
static void im2col(const gp__op *op, const float *in, float *col) {
    int H = op->in.h, W = op->in.w, Ho = op->out.h, Wo = op->out.w;
    int cin = op->in.c / op->groups, sw = op->stride_w;
    for (int ci = 0; ci < cin; ci++)
        for (int ky = 0; ky < op->kh; ky++)
            for (int kx = 0; kx < op->kw; kx++) {
                float *row = col + ((size_t)(ci * op->kh + ky) * (size_t)op->kw + (size_t)kx) *
                                       (size_t)Ho * (size_t)Wo;
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

static void conv2d(const gp__op *op, size_t n, const float *in, float *out, float *work) {
    size_t G = (size_t)op->groups, K = conv_k(op);
    size_t cin_g = (size_t)op->in.c / G, cout_g = (size_t)op->out.c / G;
    size_t HWi = (size_t)op->in.h * (size_t)op->in.w, HWo = (size_t)op->out.h * (size_t)op->out.w;
    size_t per = gp__gemm_packed_elems(cout_g, K);
    size_t col_elems = conv_direct(op) ? 0 : (K * HWo + 63) / 64 * 64;
    float *col = work, *gw = work + col_elems; /* the GEMM's packing after the columns */
    for (size_t item = 0; item < n; item++) {
        const float *x = in + item * gp__shape_numel(op->in);
        float *y = out + item * gp__shape_numel(op->out);
        for (size_t g = 0; g < G; g++) {
            const float *xg = x + g * cin_g * HWi;
            const float *B = xg;
            if (!conv_direct(op)) {
                im2col(op, xg, col);
                B = col;
            }
            gp__gemm(cout_g, HWo, K, op->host_packed + g * per, B, (ptrdiff_t)HWo, 1,
                     y + g * cout_g * HWo, (ptrdiff_t)HWo, 1, op->bias + g * cout_g, op->act, gw);
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

/* ---- the layer table -------------------------------------------------------------------- */

/* One host layer: n items of `src` (and `src2` for ADD) into `dst`; `work` is the model's host
   workspace (host_work_elems floats). PREP reads the raw input through `src`. */
typedef void (*host_layer)(const gp__op *op, size_t n, const float *src, const float *src2,
                           float *dst, float *work);

static void l_prep(const gp__op *op, size_t n, const float *src, const float *src2, float *dst,
                   float *work) {
    prep(op, n, src, dst);
}
static void l_conv2d(const gp__op *op, size_t n, const float *src, const float *src2, float *dst,
                     float *work) {
    conv2d(op, n, src, dst, work);
}
static void l_linear(const gp__op *op, size_t n, const float *src, const float *src2, float *dst,
                     float *work) {
    linear(op, n, src, dst, work);
}
static void l_maxpool2d(const gp__op *op, size_t n, const float *src, const float *src2, float *dst,
                        float *work) {
    pool(op, n, src, dst, 1);
}
static void l_avgpool2d(const gp__op *op, size_t n, const float *src, const float *src2, float *dst,
                        float *work) {
    pool(op, n, src, dst, 0);
}
static void l_globalavgpool(const gp__op *op, size_t n, const float *src, const float *src2,
                            float *dst, float *work) {
    globalavgpool(op, n, src, dst);
}
static void l_act(const gp__op *op, size_t n, const float *src, const float *src2, float *dst,
                  float *work) {
    size_t numel = n * gp__shape_numel(op->out);
    for (size_t k = 0; k < numel; k++)
        dst[k] = gp__act_apply(op->act, src[k]);
}
static void l_add(const gp__op *op, size_t n, const float *src, const float *src2, float *dst,
                  float *work) {
    size_t numel = n * gp__shape_numel(op->out);
    for (size_t k = 0; k < numel; k++)
        dst[k] = gp__act_apply(op->act, src[k] + src2[k]);
}
static void l_softmax(const gp__op *op, size_t n, const float *src, const float *src2, float *dst,
                      float *work) {
    softmax(op, n, src, dst);
}
static void l_topk(const gp__op *op, size_t n, const float *src, const float *src2, float *dst,
                   float *work) {
    topk(op, n, src, (int64_t *)(void *)dst);
}
static void l_copy(const gp__op *op, size_t n, const float *src, const float *src2, float *dst,
                   float *work) {
    if (dst != src) memcpy(dst, src, n * gp__shape_numel(op->out) * sizeof(float));
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
};

static float *bufp(const gp__model *m, float *scratch, size_t cap, int id, const void *in,
                   void *out) {
    if (id == GP__BUF_INPUT) return (float *)(uintptr_t)in; /* read-only by the plan */
    if (id == GP__BUF_OUTPUT) return out;
    return scratch + cap * m->bufs[id].offset;
}

int gp__host_run(const gp__model *m, size_t n, const void *in, void *out, float *scratch,
                 size_t capacity, float *work) {
    if (n > capacity) return GP_EINVAL;
    for (int i = 0; i < m->n_ops; i++) {
        const gp__op *op = &m->ops[i];
        if ((unsigned)op->kind >= GP__OP_COUNT_ || !host_layers[op->kind]) return GP_EINVAL;
        const float *src2 =
            op->kind == GP__OP_ADD ? bufp(m, scratch, capacity, op->src2, in, out) : NULL;
        host_layers[op->kind](op, n, bufp(m, scratch, capacity, op->src, in, out), src2,
                              bufp(m, scratch, capacity, op->dst, in, out), work);
    }
    return GP_OK;
}

/* ---- the host backend's model table (model/exec.h) ------------------------------------------ */

/* A slot runs a batch through the whole op list a chunk of items at a time, the chunk's scratch
   kept within this budget: whole batches for small models, a few items at a time for large
   images, so a host slot's memory does not grow with max_batch. Results do not depend on the
   chunking (each item's arithmetic is the same). */
#define HOST_SCRATCH_BUDGET ((size_t)32 << 20)

typedef struct host_slot {
    size_t chunk;   /* items per pass */
    float *scratch; /* chunk * m->scratch_elems floats, then the workspace */
    float *work;    /* m->host_work_elems floats */
} host_slot;

static size_t host_chunk(const gp__model *m, size_t want) {
    size_t per = m->scratch_elems * sizeof(float);
    size_t c = per ? HOST_SCRATCH_BUDGET / per : want;
    if (c < 1) c = 1;
    return c < want ? c : want;
}

static int slot_alloc(const gp__model *m, host_slot *s, size_t items) {
    size_t chunk = host_chunk(m, items), scr, total;
    if (!gp__mul_ok(chunk, m->scratch_elems, &scr) ||
        !gp__add_ok(scr, m->host_work_elems + 64, &total) || total > SIZE_MAX / sizeof(float))
        return GP_ENOMEM;
    void *p = NULL;
    if (posix_memalign(&p, 64, total * sizeof(float)) != 0) return GP_ENOMEM;
    s->scratch = p;
    s->work = s->scratch + (scr + 63) / 64 * 64;
    s->chunk = chunk;
    return GP_OK;
}

static int run_chunked(const gp__model *m, const host_slot *s, size_t n, const void *in,
                       void *out) {
    int rc = GP_OK;
    for (size_t i = 0; i < n && rc == GP_OK; i += s->chunk) {
        size_t k = n - i < s->chunk ? n - i : s->chunk;
        rc = gp__host_run(m, k, (const char *)in + i * m->in_info.bytes,
                          (char *)out + i * m->out_info.bytes, s->scratch, s->chunk, s->work);
    }
    return rc;
}

int gp__host_run_alone(gp__model *m, size_t n, const void *in, void *out) {
    host_slot s;
    if (slot_alloc(m, &s, n) != GP_OK) return GP_ENOMEM;
    int rc = run_chunked(m, &s, n, in, out);
    free(s.scratch);
    return rc;
}

static int host_setup(gp__model *m, const gp_batch *slot, void **state) {
    host_slot *s = calloc(1, sizeof *s);
    if (!s || slot_alloc(m, s, slot->capacity) != GP_OK) {
        free(s);
        return GP__ERR(&m->err, GP_ENOMEM, "out of memory for the host scratch of %zu items",
                       slot->capacity);
    }
    *state = s;
    return GP_OK;
}

static int host_compute(gp__model *m, void *state, const gp_batch *b) {
    int rc = run_chunked(m, state, b->n, b->in, b->out);
    if (rc != GP_OK)
        return GP__ERR(&m->err, rc, "host layers failed for a batch of %zu items", b->n);
    return GP_OK;
}

static void host_teardown(gp__model *m, void *state, const gp_batch *slot) {
    host_slot *s = state;
    if (!s) return;
    free(s->scratch);
    free(s);
}

const gp__model_exec gp__model_host_exec = {
    .setup = host_setup,
    .run = host_compute,
    .teardown = host_teardown,
    .model_free = NULL, /* the host layers read the IR's weights directly */
};
