/*
 * The CUDA model layers' shared internals: the slot state that model.c plans and runs, one step
 * per op, and the per-op layer table (docs/DESIGN.md §6). model.c owns the weights, setup / run /
 * teardown and the table; each layer lives beside its code: the ones that are a kernel launch in
 * kernels/<name>.cu (C++, with this header), the ones that plan in linear.c (cuBLASLt), conv.c
 * (cuDNN, or the direct kernel) and attention.c (two planned GEMMs around the fused kernel).
 *
 * A layer's life: consts (once per device: its weights into the model's arena), then per slot
 * plan (before the slot's buffers exist: descriptors, algorithms, workspace and scratch sizes),
 * bind (after: anything that needs the operand pointers), run per batch (enqueue only), and
 * release. Every entry is optional except run.
 *
 * Errors: CK() checks a CUDA / cuBLASLt / cuDNN call and records the failure with the op's spec
 * line in the model's error sink (or, while a layer only probes, in a note), returning GP_E*.
 */
#ifndef GP_LIB_CUDA_LAYERS_H
#define GP_LIB_CUDA_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "../bucket.h"
#include "../model/model_impl.h"
#include "check.h"
#include "kernels.h"

#ifdef __cplusplus /* the CUDA layers in kernels/<name>.cu include these headers */
extern "C" {
#endif

#define GP__CUDA_ALIGN 256 /* bytes: every buffer, weight and workspace */

static inline size_t gp__align_up(size_t x) {
    return (x + GP__CUDA_ALIGN - 1) / GP__CUDA_ALIGN * GP__CUDA_ALIGN;
}

/* ---- checked calls ----------------------------------------------------------------------- */

typedef struct ck {
    gp__errsink *sink; /* where failures go (the model's) */
    char *note;        /* when set, failures go here instead (a probe that may fail) */
    size_t note_len;
    const gp__op *op; /* the op being planned or run, for the message; NULL: none */
} ck;

/* Record a failed status (see check.h) with the op's context; returns its GP_E* code. */
int gp__ck_status(ck *c, gp__cu_status s, const char *call, const char *file, int line);
/* Record a failure of our own (printf-style) with the op's context; returns `code`. */
int gp__ck_fail(ck *c, int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define CK(c, call)                                                                                \
    do {                                                                                           \
        gp__cu_status ck_st_ = GP__CU_STATUS(call);                                                \
        if (ck_st_.code) return gp__ck_status((c), ck_st_, #call, __FILE__, __LINE__);             \
    } while (0)
#define CK_FAIL(c, code, ...) gp__ck_fail((c), (code), __FILE__, __LINE__, __VA_ARGS__)

/* ---- weights on a device (model-wide) ------------------------------------------------------ */

/* Device copies of one op's constants (NULL where the op has none), one GP__K_* slot each. */
typedef struct op_consts {
    void *w;         /* CONV2D / LINEAR weight; EMBEDDING word table; ATTENTION Wqkv [3c][c]:
                        activation type */
    float *bias_f32; /* CONV2D / LINEAR / ATTENTION bias; LAYERNORM beta; EMBEDDING type-0 row */
    void *bias_t;    /* the bias in the activation type (== bias_f32 for fp32) */
    float *mean;     /* PREP */
    float *std;
    void *w2;         /* EMBEDDING position table; ATTENTION Wo [c][c]: activation type */
    float *w_f32;     /* LAYERNORM gamma */
    float *bias2_f32; /* ATTENTION bias2 (the output projection's) */
    void *bias2_t;
} op_consts;

enum {
    GP__K_W,
    GP__K_BIAS_F32,
    GP__K_BIAS_T,
    GP__K_MEAN,
    GP__K_STD,
    GP__K_W2,
    GP__K_W_F32,
    GP__K_BIAS2_F32,
    GP__K_BIAS2_T,
    GP__K_SLOTS
};

/* The model-wide device arena while it is laid out (model.c): a layer's consts hook puts each
   of its op's constants into a slot. Called twice per device: to size (img NULL), then to fill. */
typedef struct gp__consts {
    gp__kt kt;              /* the activation type */
    int nhwc;               /* the model's activations are NHWC (gp__cuda_nhwc): conv2d's
                               weights go in as [Cout][kh][kw][Cin / groups, or chans] */
    int chans;              /* the op's step.chans (the stem pad: conv2d's weights get zero
                               input channels up to it), 0: none */
    unsigned char *img;     /* the host image, or NULL while sizing */
    size_t off;             /* the next free byte (256-byte aligned) */
    size_t at[GP__K_SLOTS]; /* this op's slots: byte offsets, SIZE_MAX where none */
} gp__consts;

/* Put n floats (v NULL: n copies of fill) into `slot`, converted to t. */
void gp__consts_put(gp__consts *k, int slot, const float *v, float fill, size_t n, gp__kt t);
/* A bias of n floats (v NULL: zeros) in fp32 (f32_slot) and in the activation type (t_slot,
   the same bytes when that is fp32): for the bias kernel and for cuBLASLt / cuDNN epilogues. */
void gp__consts_bias(gp__consts *k, int f32_slot, int t_slot, const float *v, size_t n);

/* ---- slot state ---------------------------------------------------------------------------------
 */

/* Where a step's operand lives: a fixed device pointer, or the batch's in / out. */
enum { REF_PTR = 0, REF_IN, REF_OUT };
typedef struct ref {
    int kind;
    void *p; /* REF_PTR */
} ref;

typedef struct step {
    const gp__op *op;
    const op_consts *k;
    ref src, src2, dst;
    gp__kt src_t, dst_t; /* storage types of src and dst (COPY may read / write f32 ends) */
    /* PREP: the channels per pixel it writes; CONV2D: per pixel of its input; 0 for the rest.
       The op's own count, or in NHWC more after the stem pad (docs/DESIGN.md §6: a 3-channel
       image stored as 4 or 8 channels, the added ones zero, for the tensor cores). */
    int chans;
    void *plan; /* the layer's own (linear: gp__gemm, conv: conv_plan, attention) */
    /* Scratch the step needs while it runs (ATTENTION: its QKV and pre-projection values):
       asked for by plan (bytes for the slot's capacity), given by setup before bind. Steps
       run one after another on the slot's stream, so they all share one region. */
    size_t tmp_bytes;
    void *tmp;
} step;

struct dev_weights;

typedef struct slot_state {
    gp__model *m;
    int device;
    struct dev_weights *dw; /* the model's weights (and memos) on this device */
    size_t capacity;
    size_t tcap;    /* variable-length models: tokens a batch may carry (token buffers) */
    int64_t *d_tok; /* the batch's token offsets (capacity + 1), device */
    /* A model with an embedding: the token it found outside its tables and the items' flags
       (kernels.h), in the arena; zeroed before each batch's steps, copied after them to h_bad
       (pinned), which the slot's check reads once the batch is done (model.c, cuda_check).
       NULL without one. */
    gp__k_bad_token *d_bad, *h_bad;
    size_t tokens;  /* the running batch's tokens (set by run before the steps) */
    size_t max_len; /* the running batch's longest item, in tokens (set with `tokens`) */
    gp__kt kt;
    int nhwc;              /* every value of more than one pixel is N x H x W x C (gp__cuda_nhwc) */
    const size_t *buckets; /* the pipeline's (gp_batch.buckets) */
    int n_buckets;

    void *arena;      /* activation buffers, staging, conv workspace */
    void **bufs;      /* per plan buffer */
    void *instage;    /* the f32 input converted to the activation type, or NULL */
    size_t in_elems;  /* per item */
    void *ostage;     /* the result before its conversion to f32, or NULL */
    size_t out_elems; /* per item */
    void *tmp;        /* the steps' shared scratch (step.tmp), or NULL */
    void *conv_ws;    /* own cuDNN workspace, or NULL: the cuBLASLt workspace serves */
    size_t conv_ws_bytes;
    size_t conv_ws_cap; /* conv.c: the most a convolution may ask for (gp__conv_ws_cap), or 0 */
    unsigned in_align, out_align; /* of b->in / b->out at setup, which the plans assume */

    step *steps;
    int n_steps;
    /* options.profile (model.c): an event before the first step and after each (n_steps + 1),
       recorded by run when the stream is not capturing (prof_pending, for the batch whose
       first_seq and n are prof_seq and prof_n), read by check once that batch is done into
       prof_ns (n_steps); NULL without. */
    cudaEvent_t *prof_ev;
    uint64_t *prof_ns;
    int prof_pending;
    uint64_t prof_seq;
    size_t prof_n;
    char note[256];  /* why a convolution runs on the direct kernel, if one does */
    double graph_ms; /* conv.c: wall time spent finalizing graph-API plans at setup (its cap) */
} slot_state;

/* A choice a layer times once per device and key (conv.c: the algorithm and form of a
   convolution's geometry at one batch size), kept with the model's weights on that device and
   shared by every slot of every pipeline using them, and by every op of the model with the same
   key. The key is up to GP__MEMO_KEY bytes, compared bytewise (no padding in it); the value
   GP__MEMO_VALS ints. gp__memo_get returns 1 and fills v if one was put; gp__memo_put returns
   GP_OK, or GP_ENOMEM / GP_ESYS (then nothing is kept). Any thread (the model's lock). */
#define GP__MEMO_KEY 160
#define GP__MEMO_VALS 3
int gp__memo_get(const slot_state *st, const void *key, size_t len, int v[GP__MEMO_VALS]);
int gp__memo_put(const slot_state *st, const void *key, size_t len, const int v[GP__MEMO_VALS]);

/* An INFO line in the pipeline's log for the slot (handles.h, info): what a layer chose at setup.
   Nothing when the slot is not the CUDA backend's. Create thread (bind) only. */
void gp__slot_info(const gp_batch *slot, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- the layer table ------------------------------------------------------------------------- */

/* Every hook but run is optional. consts (model-wide, once per device) refuses weights the op
   cannot run with (GP_EMODEL through CK_FAIL) and puts the rest into the arena; plan and bind
   run per slot (see the top), run per batch. */
typedef struct cuda_layer {
    int (*consts)(const gp__op *op, gp__consts *k, ck *c);
    int (*plan)(slot_state *st, step *sp, const gp_batch *slot, ck *c);
    int (*bind)(slot_state *st, step *sp, const gp_batch *slot, ck *c);
    /* bi: index of the batch's bucket in st->buckets */
    int (*run)(slot_state *st, const step *sp, const gp_batch *b, int bi, ck *c);
    void (*release)(step *sp, int n_buckets);
} cuda_layer;

/* The layer table: one `const cuda_layer GP__CUDA_LAYER(KIND)` per op of model_impl.h's
   GP__OP_LIST, defined beside its code (kernels/<name>.cu for a layer that is one kernel launch,
   written as C++ aggregates in the field order above; linear.c, conv.c, attention.c for those
   that plan). model.c indexes them by op kind: an op without one is a link error of the module. */
#define GP__CUDA_LAYER(kind) gp__cuda_layer_##kind
#define GP__CUDA_LAYER_DECL(kind, name) extern const cuda_layer GP__CUDA_LAYER(kind);
GP__OP_LIST(GP__CUDA_LAYER_DECL)
#undef GP__CUDA_LAYER_DECL

/* The consts hook of a layer with a weight [n][...] of weight_count floats and a bias [out.c]
   (LINEAR, CONV2D). */
int gp__consts_weight_bias(const gp__op *op, gp__consts *k, ck *c);

/* ---- planned GEMMs (linear.c) -------------------------------------------------------------- */

/* y[N][M] = x[N][K] W^T + bias (+ relu), W [M][K] row-major, x, y, W and bias in the slot's
   activation type, on cuBLASLt with the precision's compute type (see model.c). Planned in a
   layer's bind (the heuristic wants the operands' alignment): per batch-size bucket (N = the
   bucket's size), or for token values (`tokens`) for powers of two up to the slot's token
   capacity, N set per batch. LINEAR is one of these; ATTENTION plans two. */
typedef struct gp__gemm gp__gemm;
typedef struct gp__gemm_desc {
    uint64_t M, K;
    int tokens;
    const void *w;         /* device weight [M][K] */
    const void *bias;      /* device bias [M], activation type (the epilogue's) */
    const float *bias_f32; /* the same in fp32 (a kernel's, where a size has no epilogue) */
    int relu;              /* relu in the epilogue */
    const void *x, *y;     /* the operands run will pass (their alignment is planned for) */
} gp__gemm_desc;
int gp__gemm_plan(slot_state *st, const gp_batch *slot, const gp__gemm_desc *d, gp__gemm **out,
                  ck *c);
/* Enqueue on the batch's stream: N rows (tokens: the batch's token count; otherwise the bucket
   bi's size is used). x, y as planned (same alignment). */
int gp__gemm_run(gp__gemm *g, const gp_batch *b, int bi, size_t N, const void *x, void *y, ck *c);
void gp__gemm_free(gp__gemm *g);

/* ---- helpers ------------------------------------------------------------------------------------
 */

/* Whether the CUDA runtime keeps the model's activations NHWC (docs/DESIGN.md §6, "NHWC
   activations"): 1, or 0 with why (when not NULL) saying what keeps it NCHW, or -1 out of
   memory (why says so). A function of the model's ops and precision alone; model.c decides it
   once per device, with the weights' layout, and every slot there takes that answer. */
int gp__cuda_nhwc(const gp__model *m, char *why, size_t why_len);

/* The stem pad of an NHWC model (docs/DESIGN.md §6): chans[i] (m->n_ops, zeroed by the caller)
   set to the stored channel count of each PREP it pads and of each conv2d reading that value,
   the rest left 0; why (when not NULL) says what it padded, or "". model.c decides it with the
   layout, once per device. */
void gp__cuda_stem_pad(const gp__model *m, int *chans, char *why, size_t why_len);

size_t gp__kt_size(gp__kt t);
unsigned gp__align_of(const void *p); /* largest power of two dividing p, up to 256 */

/* Rows of a value in the running batch: its items, or its tokens for a token value. */
static inline size_t gp__rows(const slot_state *st, gp__shape s, const gp_batch *b) {
    return s.tokens ? st->tokens : b->n;
}

/* The batch's first input byte: packed items start at in_offsets[0] (gpupipe.h), which the
   token offsets (gp__k_tok_offsets) are relative to; the batcher writes 0 there, a caller's
   batch may not. */
static inline void *gp__batch_in(const gp_batch *b) {
    const char *in = (const char *)b->in;
    return (void *)(uintptr_t)(b->in_offsets_host ? in + b->in_offsets_host[0] : in);
}

static inline void *gp__resolve(ref r, const gp_batch *b) {
    return r.kind == REF_IN ? gp__batch_in(b) : r.kind == REF_OUT ? b->out : r.p;
}

#ifdef __cplusplus
}
#endif

#endif
