/*
 * gpsim's emulations of the model runtime's kernels (kernels/act.cu, post.cu, prep.cu; docs/
 * DESIGN.md §11), chosen by the names nvcc registers for their template instances. Each is the
 * kernel's contract as lib/cuda/kernels.h states it (host.c is the reference), in fp32 with the
 * storage type's rounding, written again here: they check how the CUDA layers call the kernels
 * (arguments, sizes, buffers, streams, graph capture), not the kernels' device code, which only
 * a GPU runs (tests/model_cuda). Every range a kernel would touch must lie in one live device
 * (or mapped) allocation, else the context is lost with cudaErrorIllegalAddress.
 * The encoder kernels (kernels/encoder.cu, tokens.cu, attention.cu) too: both attention kernels
 * (tensor-core and SIMT) are one emulation of their contract, softmax(q k^T / sqrt(d)) v per
 * item and head over the item's own tokens, in double.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define ILLEGAL cudaErrorIllegalAddress

/* Template argument `which` of the kernel registered as `name` (nvcc's mangling: after the
   kernel's <length><name>, "I" then the types: f float, h uint8_t, 6__half,
   13__nv_bfloat16, and S<n>_ for a type repeated). */
static sim_t targ(const sim_op *o, int which) {
    const char *p = strstr(o->k->name, "_kernelI");
    sim_t got[2] = {SIM_F32, SIM_F32};
    if (!p) return SIM_F32;
    p += strlen("_kernelI");
    for (int i = 0; i < 2 && *p && *p != 'E'; i++) {
        if (*p == 'f') {
            got[i] = SIM_F32, p++;
        } else if (*p == 'h') {
            got[i] = SIM_U8, p++;
        } else if (*p == 'i') {
            got[i] = SIM_I32, p++;
        } else if (*p == 'l') {
            got[i] = SIM_I64, p++;
        } else if (strncmp(p, "6__half", 7) == 0) {
            got[i] = SIM_F16, p += 7;
        } else if (strncmp(p, "13__nv_bfloat16", 15) == 0) {
            got[i] = SIM_BF16, p += 15;
        } else if (*p == 'S') { /* a substitution: here always the argument before */
            got[i] = i > 0 ? got[i - 1] : SIM_F32;
            while (*p && *p != '_')
                p++;
            if (*p) p++;
        }
    }
    return got[which];
}

float sim_act(int a, float x) {
    switch (a) {
    case 1:
        return x < 0.0f ? 0.0f : x;
    case 2:
        return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
    case 3:
        return 1.0f / (1.0f + expf(-x));
    case 4:
        return tanhf(x);
    default:
        return x;
    }
}

/* act_kernel<T>(const T *in, T *out, size_t count, int act); in == out allowed */
typedef struct {
    const void *in;
    void *out;
    size_t count;
    int act;
} act_args;
static int emu_act(const sim_op *o) {
    act_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    size_t bytes = a.count * sim_size(t);
    if (!dev_ok(a.in, bytes) || !dev_ok(a.out, bytes)) return ILLEGAL;
    for (size_t i = 0; i < a.count; i++)
        sim_st(t, a.out, i, sim_act(a.act, sim_ld(t, a.in, i)));
    return 0;
}

/* add_act_kernel<T>(const T *a, const T *b, T *out, size_t count, int act) */
typedef struct {
    const void *a, *b;
    void *out;
    size_t count;
    int act;
} add_args;
static int emu_add_act(const sim_op *o) {
    add_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    size_t bytes = a.count * sim_size(t);
    if (!dev_ok(a.a, bytes) || !dev_ok(a.b, bytes) || !dev_ok(a.out, bytes)) return ILLEGAL;
    for (size_t i = 0; i < a.count; i++)
        sim_st(t, a.out, i, sim_act(a.act, sim_ld(t, a.a, i) + sim_ld(t, a.b, i)));
    return 0;
}

/* bias_act_kernel<T>(T *x, const float *bias, size_t count, int C, size_t HW, int act,
   int nhwc): items of C x HW, or HW x C */
typedef struct {
    void *x;
    const float *bias;
    size_t count;
    int C;
    size_t HW;
    int act, nhwc;
} bias_args;
static int emu_bias_act(const sim_op *o) {
    bias_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    if (a.C <= 0 || a.HW == 0 || !dev_ok(a.x, a.count * sim_size(t)) ||
        !dev_ok(a.bias, (size_t)a.C * 4))
        return ILLEGAL;
    for (size_t i = 0; i < a.count; i++) {
        int c = (int)((a.nhwc ? i : i / a.HW) % (size_t)a.C);
        sim_st(t, a.x, i, sim_act(a.act, sim_ld(t, a.x, i) + a.bias[c]));
    }
    return 0;
}

/* pool_kernel<T>(const T *in, T *out, size_t total, pool_geom g, int is_max): items of
   C x H x W -> C x Ho x Wo, or with g.nhwc H x W x C -> Ho x Wo x C */
typedef struct {
    int C, H, W, Ho, Wo, kh, kw, sh, sw, ph, pw, nhwc;
} pool_geom;
typedef struct {
    const void *in;
    void *out;
    size_t total;
    pool_geom g;
    int is_max;
} pool_args;
static int emu_pool(const sim_op *o) {
    pool_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    const pool_geom g = a.g;
    size_t howo = (size_t)g.Ho * (size_t)g.Wo, hw = (size_t)g.H * (size_t)g.W;
    if (howo == 0 || a.total % howo) return ILLEGAL;
    size_t planes = a.total / howo;
    if (!dev_ok(a.in, planes * hw * sim_size(t)) || !dev_ok(a.out, a.total * sim_size(t)))
        return ILLEGAL;
    const float div = (float)(g.kh * g.kw);
    const size_t C = (size_t)(g.C > 0 ? g.C : 1);
    for (size_t i = 0; i < a.total; i++) {
        /* the output pixel r of item k's channel c, in the layout's order */
        size_t c = g.nhwc ? i % C : (i / howo) % C, r = g.nhwc ? (i / C) % howo : i % howo,
               k = i / howo / C;
        int oy = (int)(r / (size_t)g.Wo), ox = (int)(r % (size_t)g.Wo);
        int y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        float acc = a.is_max ? -INFINITY : 0.0f;
        for (int ky = 0; ky < g.kh; ky++) {
            int iy = y0 + ky;
            if (iy < 0 || iy >= g.H) continue;
            for (int kx = 0; kx < g.kw; kx++) {
                int ix = x0 + kx;
                if (ix < 0 || ix >= g.W) continue;
                size_t p = (size_t)iy * (size_t)g.W + (size_t)ix;
                float v = sim_ld(t, a.in, g.nhwc ? (k * hw + p) * C + c : (k * C + c) * hw + p);
                if (a.is_max)
                    acc = (v > acc || isnan(v)) ? v : acc;
                else
                    acc += v;
            }
        }
        sim_st(t, a.out, i, a.is_max ? acc : acc / div);
    }
    return 0;
}

/* gap_nhwc_kernel<T>(const T *in, T *out, size_t n, int C, size_t HW): items of HW x C, the
   mean of each channel, summed in double */
typedef struct {
    const void *in;
    void *out;
    size_t n;
    int C;
    size_t HW;
} gap_nhwc_args;
static int emu_gap_nhwc(const sim_op *o) {
    gap_nhwc_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    size_t C = a.C > 0 ? (size_t)a.C : 0;
    if (!dev_ok(a.in, a.n * a.HW * C * sim_size(t)) || !dev_ok(a.out, a.n * C * sim_size(t)))
        return ILLEGAL;
    for (size_t k = 0; k < a.n; k++)
        for (size_t c = 0; c < C; c++) {
            double sum = 0.0;
            for (size_t p = 0; p < a.HW; p++)
                sum += (double)sim_ld(t, a.in, (k * a.HW + p) * C + c);
            sim_st(t, a.out, k * C + c, (float)(sum / (double)a.HW));
        }
    return 0;
}

/* gap_kernel<T>(const T *in, T *out, size_t planes, size_t HW): the mean, summed in double */
typedef struct {
    const void *in;
    void *out;
    size_t planes, HW;
} gap_args;
static int emu_gap(const sim_op *o) {
    gap_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    if (!dev_ok(a.in, a.planes * a.HW * sim_size(t)) || !dev_ok(a.out, a.planes * sim_size(t)))
        return ILLEGAL;
    for (size_t p = 0; p < a.planes; p++) {
        double sum = 0.0;
        for (size_t k = 0; k < a.HW; k++)
            sum += (double)sim_ld(t, a.in, p * a.HW + k);
        sim_st(t, a.out, p, (float)(sum / (double)a.HW));
    }
    return 0;
}

float sim_tf32(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&v, &u, 4);
    return v;
}

int sim_conv_ok(sim_t t, const sim_conv_geom *g, size_t n, const void *in, const void *w,
                const void *out) {
    if (g->groups < 1 || g->Cin % g->groups || g->Cout % g->groups || g->Ho < 1 || g->Wo < 1)
        return 0;
    size_t es = sim_size(t), hw = (size_t)g->H * (size_t)g->W;
    size_t wk = (size_t)(g->Cin / g->groups) * (size_t)g->kh * (size_t)g->kw;
    return dev_ok(in, n * (size_t)g->Cin * hw * es) && dev_ok(w, (size_t)g->Cout * wk * es) &&
           dev_ok(out, n * (size_t)g->Cout * (size_t)g->Ho * (size_t)g->Wo * es);
}

int sim_conv_co(const sim_conv_geom *g, size_t i) {
    const size_t howo = (size_t)g->Ho * (size_t)g->Wo;
    return (int)((g->nhwc ? i : i / howo) % (size_t)g->Cout);
}

float sim_conv_at(sim_t t, const sim_conv_geom *g, const void *in, const void *w, size_t i,
                  int tf32) {
    const size_t howo = (size_t)g->Ho * (size_t)g->Wo, hw = (size_t)g->H * (size_t)g->W;
    const size_t Cin = (size_t)g->Cin, kk = (size_t)g->kh * (size_t)g->kw;
    const int cin_g = g->Cin / g->groups, cout_g = g->Cout / g->groups;
    /* output element i: item, channel co, pixel r, in the layout's order */
    int co = sim_conv_co(g, i);
    size_t r = g->nhwc ? (i / (size_t)g->Cout) % howo : i % howo, item = i / howo / (size_t)g->Cout;
    int oy = (int)(r / (size_t)g->Wo), ox = (int)(r % (size_t)g->Wo), grp = co / cout_g;
    size_t c0 = (size_t)grp * (size_t)cin_g, w0 = (size_t)co * (size_t)cin_g * kk;
    float acc = 0.0f;
    for (int ci = 0; ci < cin_g; ci++)
        for (int ky = 0; ky < g->kh; ky++) {
            int iy = oy * g->sh - g->ph + ky * g->dh;
            if (iy < 0 || iy >= g->H) continue;
            for (int kx = 0; kx < g->kw; kx++) {
                int ix = ox * g->sw - g->pw + kx * g->dw;
                if (ix < 0 || ix >= g->W) continue;
                size_t p = (size_t)iy * (size_t)g->W + (size_t)ix,
                       q = (size_t)ky * (size_t)g->kw + (size_t)kx, c = c0 + (size_t)ci;
                float xv =
                    sim_ld(t, in, g->nhwc ? (item * hw + p) * Cin + c : (item * Cin + c) * hw + p);
                float wv = sim_ld(
                    t, w, w0 + (g->nhwc ? q * (size_t)cin_g + (size_t)ci : (size_t)ci * kk + q));
                if (tf32) xv = sim_tf32(xv), wv = sim_tf32(wv);
                acc += xv * wv;
            }
        }
    return acc;
}

/* conv_direct_kernel<T>(const T *in, const T *w, const float *bias, T *out, size_t total,
   conv_geom g, int act) */
typedef struct {
    const void *in, *w;
    const float *bias;
    void *out;
    size_t total;
    sim_conv_geom g;
    int act;
} conv_args;
static int emu_conv(const sim_op *o) {
    conv_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    size_t per = (size_t)a.g.Cout * (size_t)a.g.Ho * (size_t)a.g.Wo;
    if (per == 0 || a.total % per || !sim_conv_ok(t, &a.g, a.total / per, a.in, a.w, a.out) ||
        !dev_ok(a.bias, (size_t)a.g.Cout * 4))
        return ILLEGAL;
    for (size_t i = 0; i < a.total; i++) {
        int co = sim_conv_co(&a.g, i);
        sim_st(t, a.out, i, sim_act(a.act, sim_conv_at(t, &a.g, a.in, a.w, i, 0) + a.bias[co]));
    }
    return 0;
}

/* softmax_kernel<T>(const T *in, T *out, int F), one block per item: mx = max (a NaN never
   wins the >), e = expf(x - mx), the sum in double, y = e * (float)(1 / sum). */
typedef struct {
    const void *in;
    void *out;
    int F;
} softmax_args;
static int emu_softmax(const sim_op *o) {
    softmax_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    size_t n = o->grid.x, F = a.F > 0 ? (size_t)a.F : 0;
    if (!dev_ok(a.in, n * F * sim_size(t)) || !dev_ok(a.out, n * F * sim_size(t))) return ILLEGAL;
    for (size_t k = 0; k < n; k++) {
        float mx = -INFINITY;
        for (size_t i = 0; i < F; i++) {
            float v = sim_ld(t, a.in, k * F + i);
            mx = v > mx ? v : mx;
        }
        double sum = 0.0;
        for (size_t i = 0; i < F; i++)
            sum += (double)expf(sim_ld(t, a.in, k * F + i) - mx);
        const float inv = (float)(1.0 / sum);
        for (size_t i = 0; i < F; i++)
            sim_st(t, a.out, k * F + i, expf(sim_ld(t, a.in, k * F + i) - mx) * inv);
    }
    return 0;
}

/* a ranks before b: larger first, NaN largest, equal values (and NaNs) in index order */
static int before(float av, size_t ai, float bv, size_t bi) {
    int an = isnan(av), bn = isnan(bv);
    if (an != bn) return an;
    if (!an && av != bv) return av > bv;
    return ai < bi;
}

/* topk_kernel<T>(const T *in, int64_t *out, int F, int k), one block per item */
typedef struct {
    const void *in;
    int64_t *out;
    int F, k;
} topk_args;
static int emu_topk(const sim_op *o) {
    topk_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    size_t n = o->grid.x;
    if (a.F <= 0 || a.k <= 0 || a.k > a.F) return ILLEGAL;
    size_t F = (size_t)a.F, K = (size_t)a.k;
    if (!dev_ok(a.in, n * F * sim_size(t)) || !dev_ok(a.out, n * K * 8)) return ILLEGAL;
    for (size_t item = 0; item < n; item++) {
        float pv = 0.0f;
        size_t pi = 0;
        for (size_t j = 0; j < K; j++) { /* the best that ranks after the previous pick */
            int have = 0;
            float bv = 0.0f;
            size_t bi = 0;
            for (size_t i = 0; i < F; i++) {
                float v = sim_ld(t, a.in, item * F + i);
                if (j > 0 && !before(pv, pi, v, i)) continue;
                if (!have || before(v, i, bv, bi)) have = 1, bv = v, bi = i;
            }
            a.out[item * K + j] = (int64_t)bi;
            pv = bv, pi = bi;
        }
    }
    return 0;
}

/* prep_kernel<Tin, Tout>(size_t total, const Tin *in, int hwc, int nhwc, int C, int Cs, int H,
   int W, const float *mean, const float *sd, Tout *out): v = x / 255 (u8) or x, (v - mean) / sd;
   in HWC when hwc, out HWC of Cs channels when nhwc (channels C .. Cs-1 zero), else CHW */
typedef struct {
    size_t total;
    const void *in;
    int hwc, nhwc, C, Cs, H, W;
    const float *mean, *sd;
    void *out;
} prep_args;
static int emu_prep(const sim_op *o) {
    prep_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t ti = targ(o, 0), to = targ(o, 1);
    size_t hw = (size_t)a.H * (size_t)a.W, per = (size_t)a.Cs * hw, in_per = (size_t)a.C * hw;
    if (per == 0 || a.Cs < a.C || (!a.nhwc && a.Cs != a.C) ||
        !dev_ok(a.in, a.total / per * in_per * sim_size(ti)) ||
        !dev_ok(a.out, a.total * sim_size(to)) || !dev_ok(a.mean, (size_t)a.C * 4) ||
        !dev_ok(a.sd, (size_t)a.C * 4))
        return ILLEGAL;
    for (size_t i = 0; i < a.total; i++) {
        size_t item = i / per, r = i % per, p = a.nhwc ? r / (size_t)a.Cs : r % hw;
        int c = (int)(a.nhwc ? r % (size_t)a.Cs : r / hw);
        if (c >= a.C) {
            sim_st(to, a.out, i, 0.0f);
            continue;
        }
        size_t src = item * in_per + (a.hwc ? p * (size_t)a.C + (size_t)c : (size_t)c * hw + p);
        float v = ti == SIM_U8 ? sim_ld(ti, a.in, src) / 255.0f : sim_ld(ti, a.in, src);
        sim_st(to, a.out, i, (v - a.mean[c]) / a.sd[c]);
    }
    return 0;
}

/* convert_kernel<Tin, Tout>(const Tin *in, Tout *out, size_t count) */
typedef struct {
    const void *in;
    void *out;
    size_t count;
} convert_args;
static int emu_convert(const sim_op *o) {
    convert_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t ti = targ(o, 0), to = targ(o, 1);
    if (!dev_ok(a.in, a.count * sim_size(ti)) || !dev_ok(a.out, a.count * sim_size(to)))
        return ILLEGAL;
    for (size_t i = 0; i < a.count; i++)
        sim_st(to, a.out, i, sim_ld(ti, a.in, i));
    return 0;
}

/* ---- the encoder kernels ---------------------------------------------------------------- */

/* An item's token range from the device's offsets tok[0 .. n]: nondecreasing, from 0. */
static int tok_ok(const int64_t *tok, size_t n) {
    if (!dev_ok(tok, (n + 1) * 8) || tok[0] != 0) return 0;
    for (size_t k = 0; k < n; k++)
        if (tok[k + 1] < tok[k]) return 0;
    return 1;
}

/* tok_offsets_kernel(size_t n, const uint64_t *off, uint64_t token_bytes, int64_t *tok) */
typedef struct {
    size_t n;
    const uint64_t *off;
    uint64_t token_bytes;
    int64_t *tok;
} tokoff_args;
static int emu_tok_offsets(const sim_op *o) {
    tokoff_args a;
    memcpy(&a, o->args, sizeof a);
    if (a.token_bytes == 0 || !dev_ok(a.off, (a.n + 1) * 8) || !dev_ok(a.tok, (a.n + 1) * 8))
        return ILLEGAL;
    for (size_t k = 0; k <= a.n; k++)
        a.tok[k] = (int64_t)((a.off[k] - a.off[0]) / a.token_bytes);
    return 0;
}

/* token_mean_kernel<T>(const T *in, const int64_t *tok, T *out, int C), one block per item:
   the mean of the item's tokens, summed in double */
typedef struct {
    const void *in;
    const int64_t *tok;
    void *out;
    int C;
} tmean_args;
static int emu_token_mean(const sim_op *o) {
    tmean_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    size_t n = o->grid.x, C = a.C > 0 ? (size_t)a.C : 0;
    if (!tok_ok(a.tok, n) || !dev_ok(a.in, (size_t)a.tok[n] * C * sim_size(t)) ||
        !dev_ok(a.out, n * C * sim_size(t)))
        return ILLEGAL;
    for (size_t k = 0; k < n; k++)
        for (size_t c = 0; c < C; c++) {
            double acc = 0.0;
            for (int64_t r = a.tok[k]; r < a.tok[k + 1]; r++)
                acc += (double)sim_ld(t, a.in, (size_t)r * C + c);
            sim_st(t, a.out, k * C + c, (float)(acc / (double)(a.tok[k + 1] - a.tok[k])));
        }
    return 0;
}

/* embed_kernel<T, I>(const I *ids, const int64_t *tok, const T *word, int vocab, const T *pos,
   int positions, const float *type0, T *out, int chunks, int C, gp__k_bad_token *bad, int tag):
   (word[id] + type0) + pos[p], a row of NaN for an id outside the vocabulary or a position past
   the table, and such a token recorded in `bad` (when not NULL and nothing is yet) and its
   item flagged in the n bytes after it */
typedef struct {
    const void *ids;
    const int64_t *tok;
    const void *word;
    int vocab;
    const void *pos;
    int positions;
    const float *type0;
    void *out;
    int chunks, C;
    struct { /* lib/cuda/kernels.h, gp__k_bad_token */
        int found, item, token, tag;
        long long id;
    } * bad;
    int tag;
} embed_args;
static int emu_embedding(const sim_op *o) {
    embed_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0), it = targ(o, 1);
    if (a.chunks < 1 || a.C < 1 || a.vocab < 1 || o->grid.x % (unsigned)a.chunks) return ILLEGAL;
    size_t n = o->grid.x / (unsigned)a.chunks, C = (size_t)a.C, es = sim_size(t);
    if (!tok_ok(a.tok, n)) return ILLEGAL;
    size_t T = (size_t)a.tok[n];
    if (!dev_ok(a.ids, T * sim_size(it)) || !dev_ok(a.word, (size_t)a.vocab * C * es) ||
        (a.pos && !dev_ok(a.pos, (size_t)a.positions * C * es)) ||
        (a.type0 && !dev_ok(a.type0, C * 4)) || !dev_ok(a.out, T * C * es) ||
        (a.bad && !dev_ok(a.bad, sizeof *a.bad + n)))
        return ILLEGAL;
    for (size_t k = 0; k < n; k++)
        for (int64_t r = a.tok[k]; r < a.tok[k + 1]; r++) {
            int64_t p = r - a.tok[k];
            int64_t id = it == SIM_I64 ? ((const int64_t *)a.ids)[r] : ((const int32_t *)a.ids)[r];
            int bad = id < 0 || id >= a.vocab || (a.pos && p >= a.positions);
            if (bad && a.bad) ((unsigned char *)(a.bad + 1))[k] = 1; /* the item's flag */
            if (bad && a.bad && !a.bad->found) { /* the device's is any bad token; here the first */
                a.bad->found = 1;
                a.bad->item = (int)k;
                a.bad->token = (int)p;
                a.bad->tag = a.tag;
                a.bad->id = id;
            }
            for (size_t c = 0; c < C; c++) {
                float v = NAN;
                if (!bad) {
                    v = sim_ld(t, a.word, (size_t)id * C + c);
                    if (a.type0) v += a.type0[c];
                    if (a.pos) v += sim_ld(t, a.pos, (size_t)p * C + c);
                }
                sim_st(t, a.out, (size_t)r * C + c, v);
            }
        }
    return 0;
}

/* layernorm_kernel<T>(const T *in, T *out, size_t rows, int C, const float *gamma,
   const float *beta, float eps): mean and biased variance in double, in == out allowed */
typedef struct {
    const void *in;
    void *out;
    size_t rows;
    int C;
    const float *gamma, *beta;
    float eps;
} ln_args;
static int emu_layernorm(const sim_op *o) {
    ln_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    size_t C = a.C > 0 ? (size_t)a.C : 0, bytes = a.rows * C * sim_size(t);
    if (!dev_ok(a.in, bytes) || !dev_ok(a.out, bytes) || !dev_ok(a.gamma, C * 4) ||
        !dev_ok(a.beta, C * 4))
        return ILLEGAL;
    for (size_t r = 0; r < a.rows; r++) {
        double sum = 0.0, sq = 0.0;
        for (size_t c = 0; c < C; c++)
            sum += (double)sim_ld(t, a.in, r * C + c);
        const double mean = sum / (double)C;
        for (size_t c = 0; c < C; c++) {
            double dv = (double)sim_ld(t, a.in, r * C + c) - mean;
            sq += dv * dv;
        }
        const double rstd = 1.0 / sqrt(sq / (double)C + (double)a.eps);
        for (size_t c = 0; c < C; c++)
            sim_st(t, a.out, r * C + c,
                   (float)(((double)sim_ld(t, a.in, r * C + c) - mean) * rstd) * a.gamma[c] +
                       a.beta[c]);
    }
    return 0;
}

/* l2norm_kernel<T>(const T *in, T *out, size_t rows, int C, float eps): x / max(||x||, eps) */
typedef struct {
    const void *in;
    void *out;
    size_t rows;
    int C;
    float eps;
} l2_args;
static int emu_l2norm(const sim_op *o) {
    l2_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    size_t C = a.C > 0 ? (size_t)a.C : 0, bytes = a.rows * C * sim_size(t);
    if (!dev_ok(a.in, bytes) || !dev_ok(a.out, bytes)) return ILLEGAL;
    for (size_t r = 0; r < a.rows; r++) {
        double sq = 0.0;
        for (size_t c = 0; c < C; c++) {
            double v = (double)sim_ld(t, a.in, r * C + c);
            sq += v * v;
        }
        const double nrm = sqrt(sq);
        const float den = (float)(nrm < (double)a.eps ? (double)a.eps : nrm);
        for (size_t c = 0; c < C; c++)
            sim_st(t, a.out, r * C + c, sim_ld(t, a.in, r * C + c) / den);
    }
    return 0;
}

/* pool_cls_kernel<T>(const T *in, const int64_t *tok, T *out, size_t count, int C):
   out[k] = in[tok[k]], each item's first token */
typedef struct {
    const void *in;
    const int64_t *tok;
    void *out;
    size_t count;
    int C;
} cls_args;
static int emu_pool_cls(const sim_op *o) {
    cls_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    if (a.C < 1 || a.count % (size_t)a.C) return ILLEGAL;
    size_t C = (size_t)a.C, n = a.count / C;
    if (!tok_ok(a.tok, n) || !dev_ok(a.in, (size_t)a.tok[n] * C * sim_size(t)) ||
        !dev_ok(a.out, a.count * sim_size(t)))
        return ILLEGAL;
    for (size_t k = 0; k < n; k++) {
        if (a.tok[k + 1] == a.tok[k]) return ILLEGAL; /* an item of no token has no first */
        for (size_t c = 0; c < C; c++)
            sim_st(t, a.out, k * C + c, sim_ld(t, a.in, (size_t)a.tok[k] * C + c));
    }
    return 0;
}

/* attn_{mma,simt}_kernel<T, DP>(const T *qkv, const int64_t *tok, T *out, int qtiles, int d,
   int c, float scale), grid (items * qtiles, heads): qkv rows [q | k | v] of c = heads * d
   each, out rows of c. The tensor-core kernel takes scale * log2(e) (it uses exp2). */
typedef struct {
    const void *qkv;
    const int64_t *tok;
    void *out;
    int qtiles, d, c;
    float scale;
} attn_args;
static int attention(const sim_op *o, int log2_scale, size_t rows) {
    attn_args a;
    memcpy(&a, o->args, sizeof a);
    sim_t t = targ(o, 0);
    if (a.qtiles < 1 || a.d < 1 || a.c < a.d || o->grid.x % (unsigned)a.qtiles) return ILLEGAL;
    size_t n = o->grid.x / (unsigned)a.qtiles, heads = o->grid.y, d = (size_t)a.d;
    size_t c = (size_t)a.c, es = sim_size(t);
    if (heads * d > c || !tok_ok(a.tok, n)) return ILLEGAL;
    size_t T = (size_t)a.tok[n];
    if (!dev_ok(a.qkv, T * 3 * c * es) || !dev_ok(a.out, T * c * es)) return ILLEGAL;
    const double scale = log2_scale ? (double)a.scale / 1.4426950408889634 : (double)a.scale;
    double *sc = NULL;
    for (size_t k = 0; k < n; k++) {
        size_t t0 = (size_t)a.tok[k], len = (size_t)(a.tok[k + 1] - a.tok[k]);
        if (len > (size_t)a.qtiles * rows) return ILLEGAL; /* rows the grid has no block for */
        double *grown = realloc(sc, (len ? len : 1) * sizeof *sc);
        if (!grown) {
            free(sc);
            return cudaErrorMemoryAllocation;
        }
        sc = grown;
        for (size_t h = 0; h < heads; h++)
            for (size_t i = 0; i < len; i++) {
                const size_t q = (t0 + i) * 3 * c + h * d;
                double mx = -INFINITY, sum = 0.0;
                for (size_t j = 0; j < len; j++) {
                    const size_t kk = (t0 + j) * 3 * c + c + h * d;
                    double acc = 0.0;
                    for (size_t e = 0; e < d; e++)
                        acc += (double)sim_ld(t, a.qkv, q + e) * (double)sim_ld(t, a.qkv, kk + e);
                    sc[j] = acc * scale;
                    if (sc[j] > mx) mx = sc[j];
                }
                for (size_t j = 0; j < len; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                for (size_t e = 0; e < d; e++) {
                    double acc = 0.0;
                    for (size_t j = 0; j < len; j++)
                        acc +=
                            sc[j] * (double)sim_ld(t, a.qkv, (t0 + j) * 3 * c + 2 * c + h * d + e);
                    sim_st(t, a.out, (t0 + i) * c + h * d + e, (float)(acc / sum));
                }
            }
    }
    free(sc);
    return 0;
}
static int emu_attn_mma(const sim_op *o) {
    return attention(o, 1, 64); /* kMmaRows query rows per block */
}
static int emu_attn_simt(const sim_op *o) {
    return attention(o, 0, 16); /* kSimtRows */
}

/* Parameter letters: sim.h (sim_emu). */
const sim_emu sim_model_emus[] = {
    {"10act_kernelI", emu_act, "ppzi"},
    {"14add_act_kernelI", emu_add_act, "pppzi"},
    {"15bias_act_kernelI", emu_bias_act, "ppzizii"},
    {"11pool_kernelI", emu_pool, "ppzGi"},
    {"10gap_kernelI", emu_gap, "ppzz"},
    {"15gap_nhwc_kernelI", emu_gap_nhwc, "ppziz"},
    {"18conv_direct_kernelI", emu_conv, "ppppzCi"},
    {"14softmax_kernelI", emu_softmax, "ppi"},
    {"11topk_kernelI", emu_topk, "ppii"},
    {"11prep_kernelI", emu_prep, "zpiiiiiippp"},
    {"14convert_kernelI", emu_convert, "ppz"},
    {"18tok_offsets_kernel", emu_tok_offsets, "zpzp"},
    {"17token_mean_kernelI", emu_token_mean, "pppi"},
    {"12embed_kernelI", emu_embedding, "pppipippiipi"},
    {"16layernorm_kernelI", emu_layernorm, "ppzippi"},
    {"13l2norm_kernelI", emu_l2norm, "ppzii"},
    {"15pool_cls_kernelI", emu_pool_cls, "pppzi"},
    {"15attn_mma_kernelI", emu_attn_mma, "pppiiii"},
    {"16attn_simt_kernelI", emu_attn_simt, "pppiiii"},
};
const size_t sim_model_nemus = sizeof sim_model_emus / sizeof sim_model_emus[0];
