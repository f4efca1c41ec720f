/*
 * The CUDA backend's model table (model/exec.h): the model runtime's ops on the slot's stream.
 *
 * Model-wide (m->shared[GP_BACKEND_CUDA], created under m->mu): per device, one arena with every
 * weight in the activation type (fp32, or fp16 / bf16 converted on the host with the loader's
 * rounding), each bias in fp32 (for the bias + activation kernel) and in the activation type
 * (for the cuBLASLt and cuDNN epilogues), and PREP's mean / std. Uploaded once per device,
 * freed by gp_model_free.
 *
 * Per slot (the state setup returns, kept in gp_batch.slot_user by the model glue): one arena
 * with the plan's buffers for `capacity` items in the activation type (laid out from the plan's
 * per-item sizes, each 256-byte aligned), the 16-bit staging buffers (below), and a cuDNN
 * workspace when the slot's cuBLASLt workspace is too small; every cudaMalloc happens here,
 * none in run. Layers that plan per batch-size bucket (linear.c, conv.c) plan for the
 * pipeline's buckets (gp_batch.buckets); a batch of n items runs the cuBLASLt and cuDNN calls
 * at its bucket's size (the padding items are independent and their results unused, as with
 * CUDA-graph padding); the kernels run on n items.
 *
 * Precision. FP32: CUBLAS_COMPUTE_32F, cuDNN FMA math only. TF32: CUBLAS_COMPUTE_32F_FAST_TF32,
 * cuDNN default math (tensor cores allowed). FP16 / BF16: 16-bit storage and weights, fp32
 * accumulation (CUBLAS_COMPUTE_32F; cuDNN compute type float), tensor-op math. The model's
 * input and output stay as the model declares them (u8 / f32 in, f32 / i64 out): PREP writes
 * 16-bit directly; an f32 input read by another op is converted into a staging buffer first;
 * a result written by LINEAR, CONV2D or an elementwise op goes through an output staging
 * buffer and one conversion to f32. COPY reads / writes f32 ends directly.
 *
 * Layout. Activations are NCHW, or NHWC for a convolutional fp16 / bf16 model whose values of
 * more than one pixel stay among the layers that take either (gp__cuda_nhwc below, docs/
 * DESIGN.md §6): one layout per model, so every slot, device and CUDA graph runs the same.
 *
 * The layer table below maps each op kind to its CUDA layer (layers.h), defined beside its
 * code: linear and conv2d plan per bucket, attention (attention.c) plans two GEMMs and runs the
 * fused kernel between them; the rest are one kernel launch each (kernels/<name>.cu). Token ids (a
 * model whose input is i32 / i64 / u32) are read only by EMBEDDING, as they came; an id outside the
 * vocabulary gives that token a row of NaN, flags its item and is recorded in the slot's d_bad
 * (kernels.h, gp__k_embedding), which run copies back after the steps and cuda_check reads once
 * the batch is done: the item fails alone, as on the host (model/exec.h, check).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupipe/cuda.h"

#include "../model/exec.h"
#include "handles.h"
#include "layers.h"

/* The kernels take gp__act values as ints (kernels/kernel_util.cuh mirrors them). */
_Static_assert(GP__ACT_NONE == 0 && GP__ACT_RELU == 1 && GP__ACT_GELU == 2 &&
                   GP__ACT_SIGMOID == 3 && GP__ACT_TANH == 4,
               "kernels/kernel_util.cuh mirrors gp__act");

/* ---- checked calls (layers.h) ------------------------------------------------------------- */

static void op_context(const ck *c, char *buf, size_t len) {
    buf[0] = '\0';
    if (c->op)
        snprintf(buf, len, "[spec line %d: %s%s%s%s]", c->op->line, gp__op_name(c->op->kind),
                 c->op->name[0] ? " '" : "", c->op->name, c->op->name[0] ? "'" : "");
}

int gp__ck_status(ck *c, gp__cu_status s, const char *call, const char *file, int line) {
    char where[128];
    op_context(c, where, sizeof where);
    if (c->note) {
        char what[256];
        gp__cu_format(s, call, what, sizeof what);
        snprintf(c->note, c->note_len, "%s %s", what, where);
        return gp__cu_code(s);
    }
    return gp__cu_record(c->sink, s, call, where[0] ? where : NULL, file, line);
}

int gp__ck_fail(ck *c, int code, const char *file, int line, const char *fmt, ...) {
    char msg[256], where[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    op_context(c, where, sizeof where);
    if (c->note) {
        snprintf(c->note, c->note_len, "%s %s", msg, where);
        return code;
    }
    return gp__err_record(c->sink, code, file, line, "%s%s%s", msg, where[0] ? " " : "", where);
}

/* ---- helpers ------------------------------------------------------------------------------ */

size_t gp__kt_size(gp__kt t) {
    return t == GP__KT_F32 ? 4 : 2;
}

unsigned gp__align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uintptr_t low = a & (~a + 1u); /* lowest set bit */
    return a == 0 || low >= GP__CUDA_ALIGN ? GP__CUDA_ALIGN : (unsigned)low;
}

static gp__kt act_type(gp_precision p) {
    return p == GP_PRECISION_FP16 ? GP__KT_F16 : p == GP_PRECISION_BF16 ? GP__KT_BF16 : GP__KT_F32;
}

/* ---- the activations' layout (layers.h, gp__cuda_nhwc) ------------------------------------- */

/* Whether op writes its value in the model's layout (its out has more than one pixel) or, for
   ACT and ADD (elementwise), passes on its operands' layout. */
static int lays_out(const gp__op *op) {
    return op->kind == GP__OP_PREP || op->kind == GP__OP_CONV2D || op->kind == GP__OP_MAXPOOL2D ||
           op->kind == GP__OP_AVGPOOL2D;
}

/* The ops that read a value of more than one pixel in either layout. */
static int reads_either(const gp__op *op) {
    return op->kind == GP__OP_CONV2D || op->kind == GP__OP_MAXPOOL2D ||
           op->kind == GP__OP_AVGPOOL2D || op->kind == GP__OP_GLOBALAVGPOOL ||
           op->kind == GP__OP_ACT || op->kind == GP__OP_ADD;
}

/* NHWC in fp16 and bf16, where cuDNN's tensor-core kernels work in NHWC and NCHW costs
   transposes or slower engines (docs/DESIGN.md §6: the third GPU run's 20 fp16 ResNet-18
   convolutions, 6.225 ms in NCHW against 2.972 for the NHWC engines), for a fixed-size model
   with a convolution whose input only PREP reads, when every value of more than one pixel is
   written and read only by PREP, CONV2D, pooling, ACT and ADD, and is not the model's output
   (what a flatten renames, SOFTMAX, TOPK and the output read in CHW order). A value of one
   pixel (C x 1 x 1, GLOBALAVGPOOL's) is the same bytes in either layout. Buffers are followed
   in op order: px[b] is the pixels (h, w) of the value in buffer b whose bytes the layout
   orders, or zero when its bytes are the same in either layout. */
int gp__cuda_nhwc(const gp__model *m, char *why, size_t why_len) {
    char dummy[1];
    if (!why) why = dummy, why_len = sizeof dummy;
    why[0] = '\0';
    if (m->precision != GP_PRECISION_FP16 && m->precision != GP_PRECISION_BF16) {
        snprintf(why, why_len, "%s keeps NCHW", gp_precision_name(m->precision));
        return 0;
    }
    if (m->token_bytes) {
        snprintf(why, why_len, "a variable-length model");
        return 0;
    }
    int convs = 0, ok = 1;
    for (int i = 0; i < m->n_ops; i++)
        convs |= m->ops[i].kind == GP__OP_CONV2D;
    if (!convs) {
        snprintf(why, why_len, "no convolution");
        return 0;
    }
    gp__shape *px = calloc((size_t)m->n_bufs + 1, sizeof *px);
    if (!px) {
        snprintf(why, why_len, "out of memory deciding the activations' layout");
        return -1;
    }
    for (int i = 0; i < m->n_ops && ok; i++) {
        const gp__op *op = &m->ops[i];
        int srcs[2] = {op->src, gp__op_has_src2(op) ? op->src2 : GP__BUF_NONE};
        gp__shape from = {0}; /* the pixels an ordered operand holds, or zero: none */
        for (int k = 0; k < 2 && ok; k++) {
            int b = srcs[k];
            if (b == GP__BUF_INPUT && op->kind != GP__OP_PREP) {
                snprintf(why, why_len, "%s (spec line %d) reads the model input",
                         gp__op_name(op->kind), op->line);
                ok = 0;
            } else if (b >= 0 && b < m->n_bufs && px[b].h * px[b].w > 1) {
                if (!reads_either(op)) {
                    snprintf(why, why_len,
                             "%s (spec line %d) reads a value of %dx%d pixels in CHW order",
                             gp__op_name(op->kind), op->line, px[b].h, px[b].w);
                    ok = 0;
                }
                from = px[b];
            }
        }
        if (!ok) break;
        int pixels = op->out.rank == 3 && (size_t)op->out.h * (size_t)op->out.w > 1;
        if (!lays_out(op) && !reads_either(op) && pixels) {
            snprintf(why, why_len, "%s (spec line %d) writes a value of %dx%d pixels",
                     gp__op_name(op->kind), op->line, op->out.h, op->out.w);
            ok = 0;
            break;
        }
        /* ACT and ADD keep their operands' order whatever shape they are given (one after a
           flatten still holds the pixels in HWC order); GLOBALAVGPOOL writes one pixel. */
        int elementwise = op->kind == GP__OP_ACT || op->kind == GP__OP_ADD;
        gp__shape out = lays_out(op) && pixels ? op->out : elementwise ? from : (gp__shape){0};
        if (op->dst == GP__BUF_OUTPUT && out.h * out.w > 1) {
            snprintf(why, why_len, "the model's output is a value of %dx%d pixels", out.h, out.w);
            ok = 0;
        } else if (op->dst >= 0 && op->dst < m->n_bufs) {
            px[op->dst] = out;
        }
    }
    free(px);
    return ok;
}

/* The stem pad (layers.h, docs/DESIGN.md §6): cuDNN's tensor-core convolutions want the input
   channels a multiple of 8 in fp16 / bf16, and for a first layer of stride 2 a multiple of 4 is
   enough (NVIDIA's Convolutional Layers User's Guide, "Channels In And Out"); an image has 3. In
   NHWC, a PREP value of fewer than 4 channels and more than one pixel that only groups-1
   convolutions read, as their input (not a residual), before anything overwrites its buffer, is
   stored with 4 channels (every reader of stride 2 or more both ways) or 8, the added ones
   zero, and those convolutions get zero weights for them: the same sums. */
void gp__cuda_stem_pad(const gp__model *m, int *chans, char *why, size_t why_len) {
    size_t at = 0;
    if (why && why_len) why[0] = '\0';
    for (int i = 0; i < m->n_ops; i++) {
        const gp__op *op = &m->ops[i];
        int b = op->dst, readers = 0, ok = 1, s2 = 1;
        if (op->kind != GP__OP_PREP || b < 0 || b >= m->n_bufs || op->out.c >= 4 ||
            (size_t)op->out.h * (size_t)op->out.w <= 1)
            continue;
        for (int j = i + 1; j < m->n_ops && ok; j++) {
            const gp__op *r = &m->ops[j];
            int res = gp__op_has_src2(r) && r->src2 == b;
            if (r->src == b || res) {
                ok = r->kind == GP__OP_CONV2D && r->groups == 1 && !res;
                readers += ok;
                s2 &= r->stride_h >= 2 && r->stride_w >= 2;
            }
            if (r->dst == b) break; /* the value ends here */
        }
        if (!ok || !readers) continue;
        const int cs = s2 ? 4 : 8;
        chans[i] = cs;
        for (int j = i + 1; j < m->n_ops; j++) {
            const gp__op *r = &m->ops[j];
            if (r->src == b) chans[j] = cs;
            if (r->dst == b) break;
        }
        if (why && at < why_len)
            at += (size_t)snprintf(why + at, why_len - at,
                                   "%sprep (spec line %d) stores its %d channel%s as %d, the "
                                   "added ones zero, for %d convolution%s",
                                   at ? "; " : "", op->line, op->out.c, op->out.c == 1 ? "" : "s",
                                   cs, readers, readers == 1 ? "" : "s");
    }
}

/* ---- the layer table (layers.h) ------------------------------------------------------------ */

/* Indexed by op kind: every op of model_impl.h's list has a CUDA layer, defined beside its code. */
static const cuda_layer *const layers[GP__OP_COUNT_] = {
#define GP__CUDA_LAYER_ROW(kind, name) [GP__OP_##kind] = &GP__CUDA_LAYER(kind),
    GP__OP_LIST(GP__CUDA_LAYER_ROW)
#undef GP__CUDA_LAYER_ROW
};

static const cuda_layer *layer_of(const gp__op *op) {
    return (unsigned)op->kind < GP__OP_COUNT_ ? layers[op->kind] : NULL;
}

/* ---- model-wide state: weights per device ------------------------------------------------- */

typedef struct memo {
    struct memo *next;
    size_t len;
    unsigned char key[GP__MEMO_KEY];
    int v[GP__MEMO_VALS];
} memo;

typedef struct dev_weights {
    struct dev_weights *next;
    int device;
    int nhwc;         /* gp__cuda_nhwc, decided with the weights' layout: every slot takes it */
    char layout[160]; /* what kept the model NCHW, or for NHWC the stem pad's note, or "" */
    int *chans;       /* gp__cuda_stem_pad's, per op (NHWC only; zeros: none) */
    void *arena;
    op_consts *ops; /* m->n_ops */
    memo *memos;    /* gp__memo_*, under m->mu */
} dev_weights;

typedef struct model_cuda {
    dev_weights *devs;
} model_cuda;

void gp__consts_put(gp__consts *k, int slot, const float *v, float fill, size_t n, gp__kt t) {
    size_t at = k->off;
    if (k->img) {
        if (t == GP__KT_F32) {
            float *d = (float *)(void *)(k->img + at);
            if (v)
                memcpy(d, v, n * sizeof(float));
            else
                for (size_t i = 0; i < n; i++)
                    d[i] = fill;
        } else {
            uint16_t *d = (uint16_t *)(void *)(k->img + at);
            for (size_t i = 0; i < n; i++) {
                float x = v ? v[i] : fill;
                d[i] = t == GP__KT_F16 ? gp__f32_to_f16(x) : gp__f32_to_bf16(x);
            }
        }
    }
    k->off = gp__align_up(at + n * gp__kt_size(t));
    k->at[slot] = at;
}

void gp__consts_bias(gp__consts *k, int f32_slot, int t_slot, const float *v, size_t n) {
    gp__consts_put(k, f32_slot, v, 0.0f, n, GP__KT_F32);
    if (k->kt == GP__KT_F32)
        k->at[t_slot] = k->at[f32_slot];
    else
        gp__consts_put(k, t_slot, v, 0.0f, n, k->kt);
}

int gp__consts_weight_bias(const gp__op *op, gp__consts *k, ck *c) {
    (void)c;
    gp__consts_put(k, GP__K_W, op->weight, 0.0f, op->weight_count, k->kt);
    gp__consts_bias(k, GP__K_BIAS_F32, GP__K_BIAS_T, op->bias, (size_t)op->out.c);
    return GP_OK;
}

/* Lay out (img == NULL: size only) the device arena of every op's constants through the
   layers' consts hooks. offs receives per op the byte offset of each GP__K_* slot (SIZE_MAX:
   none); *bytes the arena's size. */
static int layout_consts(const gp__model *m, gp__kt kt, int nhwc, const int *chans,
                         unsigned char *img, size_t (*offs)[GP__K_SLOTS], size_t *bytes, ck *c) {
    gp__consts k = {.kt = kt, .nhwc = nhwc, .img = img};
    for (int i = 0; i < m->n_ops; i++) {
        const gp__op *op = &m->ops[i];
        const cuda_layer *l = layer_of(op);
        k.chans = chans[i];
        for (int s = 0; s < GP__K_SLOTS; s++)
            k.at[s] = SIZE_MAX;
        if (l && l->consts) {
            c->op = op;
            int rc = l->consts(op, &k, c);
            if (rc != GP_OK) return rc;
            c->op = NULL;
        }
        memcpy(offs[i], k.at, sizeof k.at);
    }
    *bytes = k.off;
    return GP_OK;
}

static void dev_weights_free(dev_weights *d) {
    if (!d) return;
    if (d->arena) cudaFree(d->arena); /* teardown: a failure is not actionable */
    free(d->ops);
    free(d->chans);
    while (d->memos) {
        memo *x = d->memos;
        d->memos = x->next;
        free(x);
    }
    free(d);
}

void gp__slot_info(const gp_batch *slot, const char *fmt, ...) {
    gp__cuda_handles *h = (gp__cuda_handles *)slot->impl;
    if (!h || h->magic != GP__CUDA_HANDLES_MAGIC || !h->info) return;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    h->info(h, msg);
}

int gp__memo_get(const slot_state *st, const void *key, size_t len, int v[GP__MEMO_VALS]) {
    int found = 0;
    if (len > GP__MEMO_KEY) return 0;
    if (pthread_mutex_lock(&st->m->mu) != 0) return 0; /* not found: timed again */
    for (const memo *x = st->dw->memos; x && !found; x = x->next)
        if (x->len == len && memcmp(x->key, key, len) == 0) {
            memcpy(v, x->v, sizeof x->v);
            found = 1;
        }
    pthread_mutex_unlock(&st->m->mu);
    return found;
}

int gp__memo_put(const slot_state *st, const void *key, size_t len, const int v[GP__MEMO_VALS]) {
    if (len > GP__MEMO_KEY) return GP_ENOMEM; /* a key this long is never kept */
    memo *x = calloc(1, sizeof *x);
    if (!x) return GP_ENOMEM;
    x->len = len;
    memcpy(x->key, key, len);
    memcpy(x->v, v, sizeof x->v);
    if (pthread_mutex_lock(&st->m->mu) != 0) {
        free(x);
        return GP_ESYS;
    }
    x->next = st->dw->memos;
    st->dw->memos = x;
    pthread_mutex_unlock(&st->m->mu);
    return GP_OK;
}

/* Upload the weights to the current device (d->device) through `stream`, synchronously. */
static int upload_weights(gp__model *m, dev_weights *d, cudaStream_t stream, ck *c) {
    gp__kt kt = act_type(m->precision);
    size_t(*offs)[GP__K_SLOTS] = calloc((size_t)m->n_ops ? (size_t)m->n_ops : 1, sizeof *offs);
    d->ops = calloc((size_t)m->n_ops ? (size_t)m->n_ops : 1, sizeof *d->ops);
    d->chans = calloc((size_t)m->n_ops ? (size_t)m->n_ops : 1, sizeof *d->chans);
    if (!offs || !d->ops || !d->chans) {
        free(offs);
        return CK_FAIL(c, GP_ENOMEM, "out of memory laying out the weights");
    }
    size_t bytes = 0;
    unsigned char *img = NULL;
    int rc = GP_OK;
    /* The activations' layout, once: the weights are laid out for it here, and every slot on
       this device runs it (dev_weights.nhwc). */
    d->nhwc = gp__cuda_nhwc(m, d->layout, sizeof d->layout);
    if (d->nhwc < 0) {
        rc = CK_FAIL(c, GP_ENOMEM, "%s", d->layout);
        goto out;
    }
    if (d->nhwc) gp__cuda_stem_pad(m, d->chans, d->layout, sizeof d->layout);
    rc = layout_consts(m, kt, d->nhwc, d->chans, NULL, offs, &bytes, c);
    if (rc != GP_OK) goto out;
    if (bytes) {
        img = malloc(bytes);
        if (!img) {
            rc = CK_FAIL(c, GP_ENOMEM, "out of memory staging %zu bytes of weights", bytes);
            goto out;
        }
        if ((rc = layout_consts(m, kt, d->nhwc, d->chans, img, offs, &bytes, c)) != GP_OK) goto out;
        cudaError_t e = cudaMalloc(&d->arena, bytes);
        if (e != cudaSuccess) {
            d->arena = NULL;
            rc = gp__ck_status(c, gp__cu_rt(e), "cudaMalloc(weights)", __FILE__, __LINE__);
            goto out;
        }
        /* Pageable source: the call returns once the bytes are staged; the synchronize makes
           them visible to every slot's stream on this device. */
        e = cudaMemcpyAsync(d->arena, img, bytes, cudaMemcpyHostToDevice, stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
        if (e != cudaSuccess) {
            rc = gp__ck_status(c, gp__cu_rt(e), "cudaMemcpyAsync(weights)", __FILE__, __LINE__);
            goto out;
        }
    }
    for (int i = 0; i < m->n_ops; i++) {
        unsigned char *base = d->arena;
        op_consts *oc = &d->ops[i];
        void *p[GP__K_SLOTS];
        for (int k = 0; k < GP__K_SLOTS; k++)
            p[k] = offs[i][k] != SIZE_MAX ? base + offs[i][k] : NULL;
        oc->w = p[GP__K_W];
        oc->bias_f32 = p[GP__K_BIAS_F32];
        oc->bias_t = p[GP__K_BIAS_T];
        oc->mean = p[GP__K_MEAN];
        oc->std = p[GP__K_STD];
        oc->w2 = p[GP__K_W2];
        oc->w_f32 = p[GP__K_W_F32];
        oc->bias2_f32 = p[GP__K_BIAS2_F32];
        oc->bias2_t = p[GP__K_BIAS2_T];
    }
out:
    free(img);
    free(offs);
    return rc;
}

/* The weights on `device`, uploaded by the first slot that needs them (*fresh then 1). Takes
   m->mu. */
static int weights_for(gp__model *m, int device, cudaStream_t stream, ck *c, dev_weights **out,
                       int *fresh) {
    int rc = GP_OK;
    *fresh = 0;
    pthread_mutex_lock(&m->mu);
    model_cuda *mc = m->shared[GP_BACKEND_CUDA];
    if (!mc) {
        mc = calloc(1, sizeof *mc);
        if (!mc) {
            rc = CK_FAIL(c, GP_ENOMEM, "out of memory for the model's CUDA state");
            goto out;
        }
        m->shared[GP_BACKEND_CUDA] = mc;
    }
    for (dev_weights *d = mc->devs; d; d = d->next)
        if (d->device == device) {
            *out = d;
            goto out;
        }
    dev_weights *d = calloc(1, sizeof *d);
    if (!d) {
        rc = CK_FAIL(c, GP_ENOMEM, "out of memory for the model's CUDA state");
        goto out;
    }
    d->device = device;
    if ((rc = upload_weights(m, d, stream, c)) != GP_OK) {
        dev_weights_free(d);
        goto out;
    }
    d->next = mc->devs;
    mc->devs = d;
    *out = d;
    *fresh = 1;
out:
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static void cuda_model_free(gp__model *m, void *shared) {
    model_cuda *mc = shared;
    if (!mc) return;
    int prev = -1;
    /* Teardown: the previous device is restored when it can be read; failures of these calls
       leave nothing to act on. */
    int have_prev = cudaGetDevice(&prev) == cudaSuccess;
    while (mc->devs) {
        dev_weights *d = mc->devs;
        mc->devs = d->next;
        cudaSetDevice(d->device); /* cudaFree needs the owning device current */
        dev_weights_free(d);
    }
    if (have_prev) cudaSetDevice(prev);
    free(mc);
}

/* ---- setup / teardown ---------------------------------------------------------------------- */

static void state_free(slot_state *st) {
    if (!st) return;
    for (int i = 0; st->steps && i < st->n_steps; i++) {
        const cuda_layer *l = layer_of(st->steps[i].op);
        if (l && l->release) l->release(&st->steps[i], st->n_buckets);
    }
    free(st->steps);
    for (int i = 0; st->prof_ev && i <= st->n_steps; i++) /* teardown: not actionable */
        if (st->prof_ev[i]) cudaEventDestroy(st->prof_ev[i]);
    free(st->prof_ev);
    free(st->prof_ns);
    if (st->arena) cudaFree(st->arena); /* teardown: a failure is not actionable */
    if (st->h_bad) cudaFreeHost(st->h_bad);
    free(st->bufs);
    free(st);
}

/* Operand references and storage types for every op (see "Precision" at the top). */
static int plan_steps(slot_state *st, const dev_weights *w, ck *c) {
    gp__model *m = st->m;
    int wide = st->kt == GP__KT_F32;
    st->steps = calloc((size_t)m->n_ops, sizeof *st->steps);
    if (!st->steps) return CK_FAIL(c, GP_ENOMEM, "out of memory planning the op list");
    st->n_steps = m->n_ops;
    int need_in = 0, need_out = 0;
    for (int i = 0; i < m->n_ops; i++) {
        const gp__op *op = &m->ops[i];
        step *sp = &st->steps[i];
        sp->op = op;
        sp->k = &w->ops[i];
        sp->src_t = sp->dst_t = st->kt;
        sp->chans = w->chans[i]                 ? w->chans[i]
                    : op->kind == GP__OP_PREP   ? op->out.c
                    : op->kind == GP__OP_CONV2D ? op->in.c
                                                : 0;
        c->op = op;
        if (!layer_of(op)) return CK_FAIL(c, GP_ENOTSUP, "no CUDA layer for this op");
        int src_ok = op->src == GP__BUF_INPUT || (op->src >= 0 && op->src < m->n_bufs);
        int src2_ok = !gp__op_has_src2(op) || op->src2 == GP__BUF_INPUT ||
                      (op->src2 >= 0 && op->src2 < m->n_bufs);
        int dst_ok = op->dst == GP__BUF_OUTPUT || (op->dst >= 0 && op->dst < m->n_bufs);
        if (!src_ok || !src2_ok || !dst_ok)
            return CK_FAIL(c, GP_ENOTSUP,
                           "operand buffers outside the plan (src %d, src2 %d, dst %d)", op->src,
                           op->src2, op->dst);
        int reads_input =
            op->src == GP__BUF_INPUT || (gp__op_has_src2(op) && op->src2 == GP__BUF_INPUT);
        int ids_in = m->in_info.dtype == GP_DTYPE_I32 || m->in_info.dtype == GP_DTYPE_I64 ||
                     m->in_info.dtype == GP_DTYPE_U32;
        if (op->kind == GP__OP_EMBEDDING) {
            /* The ids as they came: one i32 / i64 / u32 per token of the model input. u32 ids
               go to the i32 kernel: one of 2^31 or more reads negative, outside the vocabulary
               either way, and gets its NaN row. */
            size_t idb = op->in_dtype == GP_DTYPE_I64 ? 8 : 4;
            if (op->src != GP__BUF_INPUT || !ids_in || op->in_dtype != m->in_info.dtype ||
                m->token_bytes != idb || !op->out.tokens)
                return CK_FAIL(c, GP_ENOTSUP,
                               "embedding on CUDA reads token ids (i32 / i64 / u32, one per token) "
                               "from the model input");
        } else if (reads_input && ids_in) {
            return CK_FAIL(c, GP_ENOTSUP, "only embedding can read token ids");
        }
        if (op->kind == GP__OP_POOL_CLS && (!op->in.tokens || op->out.tokens))
            return CK_FAIL(c, GP_ENOTSUP, "pool_cls on CUDA takes token values to items");
        if (op->kind == GP__OP_EMBEDDING) {
            /* read as they came (ref_of): never staged */
        } else if (op->kind == GP__OP_PREP || op->kind == GP__OP_COPY) {
            if (op->src == GP__BUF_INPUT) /* the f32 input as it came (PREP reads u8 or f32) */
                sp->src_t = GP__KT_F32;
        } else if (reads_input && !wide) {
            need_in = 1;
        }
        if ((op->kind == GP__OP_ARGMAX || op->kind == GP__OP_TOPK) && op->dst != GP__BUF_OUTPUT)
            return CK_FAIL(c, GP_ENOTSUP, "the output stage must write the model's output");
        if (op->dst == GP__BUF_OUTPUT && op->kind != GP__OP_ARGMAX && op->kind != GP__OP_TOPK) {
            if (op->kind == GP__OP_COPY)
                sp->dst_t = GP__KT_F32;
            else if (!wide)
                need_out = 1;
        }
    }
    c->op = NULL;
    if (need_in) st->in_elems = gp__shape_numel(m->in_shape);
    if (need_out) st->out_elems = gp__shape_numel(m->ops[m->n_ops - 1].out);
    return GP_OK;
}

/* One cudaMalloc for the slot: the plan's buffers, staging, and the cuDNN workspace when the
   cuBLASLt workspace is smaller than the largest convolution needs. */
static int slot_alloc(slot_state *st, const gp_batch *slot, ck *c) {
    gp__model *m = st->m;
    size_t es = gp__kt_size(st->kt), cap = st->capacity, off = 0;
    size_t *offs = calloc((size_t)m->n_bufs + 3, sizeof *offs);
    st->bufs = calloc((size_t)m->n_bufs ? (size_t)m->n_bufs : 1, sizeof *st->bufs);
    if (!offs || !st->bufs) {
        free(offs);
        return CK_FAIL(c, GP_ENOMEM, "out of memory planning the slot's buffers");
    }
    for (int i = 0; i < m->n_bufs; i++) {
        size_t el = m->bufs[i].elems;
        for (int j = 0; j < st->n_steps; j++) { /* a value the stem pad stores wider */
            const step *sp = &st->steps[j];
            size_t pel = (size_t)sp->chans * (size_t)sp->op->out.h * (size_t)sp->op->out.w;
            if (sp->op->kind == GP__OP_PREP && sp->op->dst == i && pel > el) el = pel;
        }
        offs[i] = off;
        off = gp__align_up(off + (m->bufs[i].tokens ? st->tcap : cap) * el * es);
    }
    /* The input's staging copy: items, or the batch's tokens. */
    size_t in_off = off;
    off = gp__align_up(off + (m->token_bytes ? st->tcap : cap) * st->in_elems * es);
    size_t tok_off = off;
    if (m->token_bytes) off = gp__align_up(off + (cap + 1) * sizeof(int64_t));
    size_t out_off = off;
    off = gp__align_up(off + cap * st->out_elems * es);
    /* The steps' scratch: one region, as large as the largest step asks for. */
    size_t tmp_off = off, tmp_bytes = 0;
    for (int i = 0; i < st->n_steps; i++)
        if (st->steps[i].tmp_bytes > tmp_bytes) tmp_bytes = st->steps[i].tmp_bytes;
    off = gp__align_up(off + tmp_bytes);
    size_t ws_off = off, lt_bytes = 0;
    (void)gp_cuda_workspace(slot, &lt_bytes);
    if (st->conv_ws_bytes > lt_bytes) off = gp__align_up(off + st->conv_ws_bytes);
    size_t bad_off = off;
    int embeds = 0;
    for (int i = 0; i < st->n_steps; i++)
        embeds |= st->steps[i].op->kind == GP__OP_EMBEDDING;
    size_t bad_bytes = sizeof(gp__k_bad_token) + cap; /* the record, then the items' flags */
    if (embeds) off = gp__align_up(off + bad_bytes);
    int rc = GP_OK;
    if (off) {
        cudaError_t e = cudaMalloc(&st->arena, off);
        if (e != cudaSuccess) {
            st->arena = NULL;
            rc = gp__ck_status(c, gp__cu_rt(e), "cudaMalloc(activations)", __FILE__, __LINE__);
        } else if ((e = cudaMemsetAsync(st->arena, 0, off, gp_cuda_stream(slot))) != cudaSuccess) {
            /* Zeroed once, so the first batches' padding items hold finite values. */
            rc = gp__ck_status(c, gp__cu_rt(e), "cudaMemsetAsync(activations)", __FILE__, __LINE__);
        }
    }
    if (rc == GP_OK) {
        unsigned char *base = st->arena;
        for (int i = 0; i < m->n_bufs; i++)
            st->bufs[i] = base + offs[i];
        if (st->in_elems) st->instage = base + in_off;
        if (m->token_bytes) st->d_tok = (int64_t *)(void *)(base + tok_off);
        if (st->out_elems) st->ostage = base + out_off;
        if (tmp_bytes) {
            st->tmp = base + tmp_off;
            for (int i = 0; i < st->n_steps; i++)
                if (st->steps[i].tmp_bytes) st->steps[i].tmp = st->tmp;
        }
        if (st->conv_ws_bytes > lt_bytes) st->conv_ws = base + ws_off;
        if (embeds) {
            st->d_bad = (gp__k_bad_token *)(void *)(base + bad_off);
            cudaError_t e = cudaMallocHost((void **)&st->h_bad, bad_bytes);
            if (e != cudaSuccess) {
                st->h_bad = NULL;
                rc = gp__ck_status(c, gp__cu_rt(e), "cudaMallocHost(the embedding's bad token)",
                                   __FILE__, __LINE__);
            }
        }
    }
    free(offs);
    return rc;
}

/* Operand references, once the buffers exist. The input is read as it came by PREP, COPY and
   EMBEDDING (token ids), and through the 16-bit staging copy by every other op; the output is
   written directly by COPY and the output stage, and through the staging buffer by the rest in 16
   bit. */
static ref ref_of(const slot_state *st, const gp__op *op, int id, int is_dst) {
    if (id >= 0) return (ref){REF_PTR, st->bufs[id]};
    if (!is_dst) {
        if (st->instage && op->kind != GP__OP_PREP && op->kind != GP__OP_COPY &&
            op->kind != GP__OP_EMBEDDING)
            return (ref){REF_PTR, st->instage};
        return (ref){REF_IN, NULL};
    }
    if (st->ostage && op->kind != GP__OP_COPY && op->kind != GP__OP_ARGMAX &&
        op->kind != GP__OP_TOPK)
        return (ref){REF_PTR, st->ostage};
    return (ref){REF_OUT, NULL};
}

static void bind_steps(slot_state *st) {
    for (int i = 0; i < st->n_steps; i++) {
        step *sp = &st->steps[i];
        const gp__op *op = sp->op;
        sp->src = ref_of(st, op, op->src, 0);
        sp->src2 = gp__op_has_src2(op) ? ref_of(st, op, op->src2, 0) : sp->src;
        sp->dst = ref_of(st, op, op->dst, 1);
    }
}

/* options.profile: the events run and check time the steps with (slot_state.prof_ev). */
static int prof_setup(slot_state *st, ck *c) {
    st->prof_ev = calloc((size_t)st->n_steps + 1, sizeof *st->prof_ev);
    st->prof_ns = calloc((size_t)st->n_steps, sizeof *st->prof_ns);
    if (!st->prof_ev || !st->prof_ns)
        return CK_FAIL(c, GP_ENOMEM, "out of memory for the slot's per-op times");
    for (int i = 0; i <= st->n_steps; i++)
        CK(c, cudaEventCreate(&st->prof_ev[i]));
    return GP_OK;
}

static int cuda_setup(gp__model *m, const gp_batch *slot, void **state) {
    ck c = {.sink = &m->err};
    *state = NULL;
    if (slot->backend != GP_BACKEND_CUDA || slot->capacity == 0 || slot->num_buckets < 1)
        return CK_FAIL(&c, GP_ENOTSUP, "CUDA model setup needs a CUDA slot with buckets");
    if (m->n_ops <= 0) return CK_FAIL(&c, GP_ENOTSUP, "the model has no ops");
    slot_state *st = calloc(1, sizeof *st);
    if (!st) return CK_FAIL(&c, GP_ENOMEM, "out of memory for the slot's CUDA state");
    st->m = m;
    st->device = gp_cuda_device(slot);
    st->capacity = slot->capacity;
    st->tcap = m->token_bytes ? slot->in_capacity / m->token_bytes : 0;
    st->kt = act_type(m->precision);
    st->buckets = slot->buckets;
    st->n_buckets = slot->num_buckets;
    st->in_align = gp__align_of(slot->in);
    st->out_align = gp__align_of(slot->out);
    int rc;
    dev_weights *w = NULL;
    cudaStream_t s = gp_cuda_stream(slot);
    int fresh = 0;
    if ((rc = weights_for(m, st->device, s, &c, &w, &fresh)) != GP_OK) goto bad;
    st->dw = w;
    st->nhwc = w->nhwc;
    if (fresh) /* once per model and device: the layout every slot runs (docs/DESIGN.md §6) */
        gp__slot_info(slot, "model: activations in %s%s%s%s", st->nhwc ? "NHWC" : "NCHW",
                      w->layout[0] ? " (" : "", w->layout, w->layout[0] ? ")" : "");
    if ((rc = plan_steps(st, w, &c)) != GP_OK) goto bad;
    /* Plans first: their workspace sizes decide the slot's allocation. */
    for (int i = 0; i < st->n_steps; i++) {
        const cuda_layer *l = layer_of(st->steps[i].op);
        c.op = st->steps[i].op;
        if (l->plan && (rc = l->plan(st, &st->steps[i], slot, &c)) != GP_OK) goto bad;
    }
    c.op = NULL;
    if ((rc = slot_alloc(st, slot, &c)) != GP_OK) goto bad;
    bind_steps(st);
    for (int i = 0; i < st->n_steps; i++) {
        const cuda_layer *l = layer_of(st->steps[i].op);
        c.op = st->steps[i].op;
        if (l->bind && (rc = l->bind(st, &st->steps[i], slot, &c)) != GP_OK) goto bad;
    }
    c.op = NULL;
    if (m->prof && (rc = prof_setup(st, &c)) != GP_OK) goto bad;
    if (st->note[0]) { /* a layer runs slower than it could: say so in the pipeline's stats */
        gp__cuda_handles *h = (gp__cuda_handles *)slot->impl;
        if (h && h->magic == GP__CUDA_HANDLES_MAGIC && h->note) h->note(h, st->note);
    }
    /* The zeroing and the fused-conv trials finish here; a failure among them is reported now
       rather than by the first batch. */
    {
        cudaError_t e = cudaStreamSynchronize(s);
        if (e != cudaSuccess) {
            rc =
                gp__ck_status(&c, gp__cu_rt(e), "cudaStreamSynchronize(setup)", __FILE__, __LINE__);
            goto bad;
        }
    }
    *state = st;
    return GP_OK;
bad:
    /* Let anything enqueued on the slot's stream finish before its memory goes; the status
       adds nothing to the failure already recorded. */
    cudaStreamSynchronize(s);
    state_free(st);
    return rc;
}

static void cuda_teardown(gp__model *m, void *state, const gp_batch *slot) {
    (void)m;
    slot_state *st = state;
    if (!st) return;
    /* Teardown: nothing to act on if these fail. The device is current already
       (gpupipe/cuda.h); cudaFree needs it. */
    cudaSetDevice(st->device);
    if (slot && slot->backend == GP_BACKEND_CUDA) cudaStreamSynchronize(gp_cuda_stream(slot));
    state_free(st);
}

/* ---- run ------------------------------------------------------------------------------------ */

static int cuda_run(gp__model *m, void *state, const gp_batch *b) {
    slot_state *st = state;
    ck c = {.sink = &m->err};
    int rc = GP_OK;
    if (!st || st->m != m) return CK_FAIL(&c, GP_EDEVICE, "a CUDA batch for a slot not set up");
    st->prof_pending = 0; /* first: no earlier run's events may be read for this batch */
    if (b->n == 0) return GP_OK;
    if (b->n > st->capacity)
        return CK_FAIL(&c, GP_EDEVICE, "batch of %zu items exceeds the %zu the slot was set up for",
                       b->n, st->capacity);
    if (gp__align_of(gp__batch_in(b)) < st->in_align || gp__align_of(b->out) < st->out_align)
        return CK_FAIL(&c, GP_EDEVICE, "the slot's buffers are less aligned than at setup");
    int bi = gp__bucket_index(st->buckets, st->n_buckets, b->bucket ? b->bucket : b->n);
    cudaStream_t s = gp_cuda_stream(b);
    size_t in_rows = b->n;
    if (m->token_bytes) { /* variable length: whole tokens, within the slot's token buffers */
        const uint64_t *off = b->in_offsets_host;
        if (!off || !b->in_offsets)
            return CK_FAIL(&c, GP_EDEVICE, "a variable-length model needs variable-size items");
        char why[160];
        gp__err e = {why, sizeof why};
        size_t longest = 0;
        int trc = gp__token_offsets(m, b->n, off, NULL, &longest, &e);
        if (trc != GP_OK) /* the item's fault (GP_EINVAL), as on the host: not the device's */
            return CK_FAIL(&c, trc, "%s", why);
        st->max_len = longest; /* sizes the grids of the per-item token kernels */
        st->tokens = (size_t)(off[b->n] - off[0]) / m->token_bytes;
        if (st->tokens > st->tcap)
            return CK_FAIL(&c, GP_EDEVICE, "a batch of %zu tokens exceeds the slot's %zu",
                           st->tokens, st->tcap);
        in_rows = st->tokens;
        CK(&c, gp__k_tok_offsets(s, b->n, b->in_offsets, m->token_bytes, st->d_tok));
    }
    if (st->instage)
        CK(&c, gp__k_convert(s, gp__batch_in(b), GP__KT_F32, st->instage, st->kt,
                             in_rows * st->in_elems));
    size_t bad_bytes = sizeof(gp__k_bad_token) + b->n;
    if (st->d_bad) CK(&c, cudaMemsetAsync(st->d_bad, 0, bad_bytes, s));
    /* options.profile: events around every step, unless this run is being captured into a CUDA
       graph (its replays are not timed: an event recorded under capture is not one a replay
       records again); check reads them. */
    int prof = 0;
    if (st->prof_ev) {
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        CK(&c, cudaStreamIsCapturing(s, &cs));
        prof = cs == cudaStreamCaptureStatusNone;
        if (prof) CK(&c, cudaEventRecord(st->prof_ev[0], s));
    }
    for (int i = 0; i < st->n_steps && rc == GP_OK; i++) {
        c.op = st->steps[i].op;
        rc = layer_of(c.op)->run(st, &st->steps[i], b, bi, &c);
        if (rc == GP_OK && prof) {
            cudaError_t e = cudaEventRecord(st->prof_ev[i + 1], s);
            if (e != cudaSuccess)
                rc = gp__ck_status(&c, gp__cu_rt(e), "cudaEventRecord(per-op time)", __FILE__,
                                   __LINE__);
        }
    }
    c.op = NULL;
    st->prof_pending = prof && rc == GP_OK;
    st->prof_seq = b->first_seq;
    st->prof_n = b->n;
    if (rc == GP_OK && st->ostage) {
        cudaError_t e =
            gp__k_convert(s, st->ostage, st->kt, b->out, GP__KT_F32, b->n * st->out_elems);
        if (e != cudaSuccess)
            rc = gp__ck_status(&c, gp__cu_rt(e), "gp__k_convert(output)", __FILE__, __LINE__);
    }
    if (rc == GP_OK && st->d_bad) {
        cudaError_t e = cudaMemcpyAsync(st->h_bad, st->d_bad, bad_bytes, cudaMemcpyDeviceToHost, s);
        if (e != cudaSuccess)
            rc = gp__ck_status(&c, gp__cu_rt(e), "cudaMemcpyAsync(the embedding's bad token)",
                               __FILE__, __LINE__);
    }
    return rc == GP_OK ? GP_OK : GP_EDEVICE; /* the contract: GP_OK or GP_EDEVICE */
}

/* options.profile, once the batch's device work is done and its check passed: its steps' times
   into the model's counters (profile.c), or one batch not timed (a CUDA graph replay: run did
   not record for this batch, which first_seq and n tell from an earlier eager batch or a
   warm-up at create; an event that cannot be read). Timing never fails the batch. */
static void prof_read(gp__model *m, slot_state *st, const gp_batch *b) {
    int mine = st->prof_pending && st->prof_seq == b->first_seq && st->prof_n == b->n;
    st->prof_pending = 0;
    if (!mine) {
        gp__prof_untimed(m);
        return;
    }
    for (int i = 0; i < st->n_steps; i++) {
        float ms = 0;
        cudaError_t e = cudaEventElapsedTime(&ms, st->prof_ev[i], st->prof_ev[i + 1]);
        if (e != cudaSuccess) {
            /* Its error stays the thread's last (the completion thread's, which runs the
               application's callbacks: their cudaGetLastError() would read it as their own),
               as backend.c's spin_query clears a query's "not yet". */
            if (cudaPeekAtLastError() == e) (void)cudaGetLastError();
            gp__prof_untimed(m);
            return;
        }
        st->prof_ns[i] = ms > 0 ? (uint64_t)((double)ms * 1e6 + 0.5) : 0;
    }
    gp__prof_batch(m, st->prof_ns, b->n);
}

/* After the batch's device work (exec.h, check): each item with a token an embedding found
   outside its tables fails alone (gp_batch_fail_item; an abandoned reservation's bytes are no
   one's, an item whose deadline had passed keeps that), and the message is the host backend's
   (host.c) for the recorded token, or for the first item this failed when the recorded one was
   not (the position case the pipeline's item limit rules out). Its batchmates go on. The copy in
   h_bad finished before the batch's done event. */
static int check_tokens(gp__model *m, const slot_state *st, const gp_batch *b) {
    ck c = {.sink = &m->err};
    if (!st || !st->h_bad || !st->h_bad->found) return GP_OK;
    gp__k_bad_token bad = *st->h_bad;
    const unsigned char *flags = gp__k_bad_items(st->h_bad);
    const gp__op *op = bad.tag >= 0 && bad.tag < st->n_steps ? st->steps[bad.tag].op : NULL;
    if (!op || op->kind != GP__OP_EMBEDDING || bad.item < 0 || (size_t)bad.item >= b->n ||
        !flags[bad.item])
        return CK_FAIL(&c, GP_EDEVICE, "the embedding's record of a bad token is corrupt");
    size_t first = SIZE_MAX;
    int recorded = 0;
    for (size_t k = 0; k < b->n; k++) {
        /* Not GP_OK: an abandoned reservation, or an item already failed (the poller passes
           the slot's own batch, so never GP_EINVAL). */
        if (!flags[k] || gp_batch_fail_item(b, k, GP_EINVAL) != GP_OK) continue;
        if (first == SIZE_MAX) first = k;
        recorded |= k == (size_t)bad.item;
    }
    if (first == SIZE_MAX) return GP_OK;
    /* u32 ids run through the i32 kernel: the id as the caller wrote it. The message is built
       here, not read back from the model's error (another slot may write it meanwhile). */
    long long id = op->in_dtype == GP_DTYPE_U32 ? (long long)(uint32_t)bad.id : bad.id;
    char msg[224];
    if (!recorded)
        snprintf(msg, sizeof msg,
                 "item %zu of the batch: a token id outside the vocabulary 0..%d of embedding "
                 "'%s'",
                 first, op->vocab - 1, op->name);
    else if (id >= 0 && id < op->vocab) /* in the vocabulary: the position had no row */
        snprintf(msg, sizeof msg,
                 "item %d of the batch: token %d has no row among the %d position embeddings",
                 bad.item, bad.token, op->positions);
    else
        snprintf(msg, sizeof msg,
                 "item %d of the batch: token %d has id %lld, outside the vocabulary 0..%d of "
                 "embedding '%s'",
                 bad.item, bad.token, id, op->vocab - 1, op->name);
    c.op = op;
    CK_FAIL(&c, GP_EINVAL, "%s", msg);
    gp_batch_set_error(b, "%s", msg);
    return GP_OK;
}

/* The check (exec.h): the embedding's bad tokens, then options.profile's times of a batch that
   passed it (one that failed is not counted). */
static int cuda_check(gp__model *m, void *state, const gp_batch *b) {
    slot_state *st = state;
    int rc = check_tokens(m, st, b);
    if (st && st->prof_ev) {
        if (rc == GP_OK)
            prof_read(m, st, b);
        else
            st->prof_pending = 0;
    }
    return rc;
}

const gp__model_exec gp__model_cuda_exec = {
    .setup = cuda_setup,
    .run = cuda_run,
    .check = cuda_check,
    .teardown = cuda_teardown,
    .model_free = cuda_model_free,
};
