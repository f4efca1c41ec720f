/*
 * The model runtime's internal representation (IR), shared by the loader, the host layers and
 * the CUDA layers (lib/cuda/, the .cu files in kernels/).
 *
 * A loaded model is immutable: a flat list of executed ops with every shape resolved per item,
 * fp32 host weights (batchnorm already folded into the preceding conv, f16/bf16/f64 files
 * converted), and a buffer plan. Backends only read it; per-slot state is each backend's own
 * (model/exec.h), kept in the batch's slot_user.
 *
 * Op list. The spec's lines become ops in order, with these rewrites done at load:
 *  - `flatten`, `save`, `restore` emit no op: they only rename values (see buffers below).
 *  - `batchnorm2d` is folded into the conv that produced the current value:
 *        s = gamma / sqrt(var + eps);  w'[o] = w[o] * s[o];  b'[o] = (b[o] - mean[o]) * s[o] +
 * beta[o] (computed in double). A batchnorm that does not directly follow a conv2d is GP_EMODEL.
 *  - an activation directly after CONV2D, LINEAR or ADD is fused into that op's `act` when the
 *    pre-activation value is not saved; otherwise it is a standalone ACT op.
 *  - an f32 input in CHW layout without mean/std needs no PREP op; any other input starts with
 *    PREP (u8 -> f32 with x / 255, HWC -> CHW, per-channel (x - mean[c]) / std[c]).
 *  - when the model's result is not written by the last op (e.g. the spec ends with `restore`),
 *    a COPY op writes it to the output.
 *
 * Semantics (PyTorch eval mode; the host implementation in host.c is the reference):
 *  PREP        v = (in_dtype == u8 ? (float)x / 255.0f : x); out[c][h][w] = (v - mean[c]) / std[c]
 *              (exactly this order of float operations, as torchvision's ToTensor + Normalize)
 *  CONV2D      out = conv2d(in, weight, bias, stride, padding (zeros), dilation, groups); act
 *  LINEAR      out[o] = sum_i in[i] * weight[o][i] + bias[o]; act
 *  MAXPOOL2D   max over the window, padding counts as -inf (dilation 1, floor mode)
 *  AVGPOOL2D   sum over the window / (kh * kw): padding counts as zeros (count_include_pad=True)
 *  GLOBALAVGPOOL  out[c] = mean over h, w (adaptive_avg_pool2d to 1x1); out shape C x 1 x 1
 *  ACT         out = act(in) elementwise
 *  ADD         out = in + in2 elementwise; act
 *  SOFTMAX     over the features of a rank-1 value
 *  ARGMAX      int64 index of the first maximum of a rank-1 value
 *  TOPK        int64 indices of the k largest of a rank-1 value, largest first; equal values
 *              in index order
 *  COPY        out = in
 *  Activations: relu max(x,0); gelu 0.5 x (1 + erf(x / sqrt 2)) (the erf form, not tanh);
 *  sigmoid 1 / (1 + exp(-x)); tanh.
 *
 * Transformer encoders (token values; torch.nn / Hugging Face BertModel in eval mode):
 *  EMBEDDING   token ids (the model input, i32, i64 or u32: in_dtype) -> tokens of out.c:
 *              out[t] = word[id[t]] + pos[p(t)] + type0, p(t) = t's position in its item
 *              (0-based); weight = word [vocab][out.c], weight2 = pos [positions][out.c] (NULL:
 *              no position term), bias = the token-type-0 row [out.c] (zeros when none). The
 *              host adds in BertEmbeddings' order, (word + type0) + pos. An id outside
 *              0..vocab-1 inside a pipeline fails only its item (gp_batch_fail_item, its rows
 *              NaN; docs/DESIGN.md §8.7); on the host, outside one (or for a batch not the
 *              pipeline's) it fails the run. A position >= positions fails the batch on the
 *              host. A backend that cannot report them must at least never read out of bounds
 *              (and documents what it computes then). The loader lowers m->max_tokens to
 *              `positions` when the table is shorter, so a valid batch has no such position.
 *              Always the first op; it reads GP__BUF_INPUT (ids, token_bytes = 4 or 8).
 *  LAYERNORM   per row (token, or item of rank 1) over its c features:
 *              y = (x - mean) / sqrt(var + eps) * weight + bias, var the biased variance
 *              (torch.nn.LayerNorm); eps from the spec.
 *  ATTENTION   multi-head self-attention of each item's tokens over the same item's tokens only
 *              (packed sequences: no padding exists or is computed): with c = in.c, h = heads,
 *              d = c / h: [q k v] = x W^T + b with W = weight [3c][c] (Wq, Wk, Wv stacked) and
 *              b = bias [3c]; per item and head, o = softmax(q k^T / sqrt(d)) v over the
 *              item's tokens; out = concat_heads(o) weight2^T + bias2 with weight2 [c][c],
 *              bias2 [c] (the output projection, as BertSelfAttention + BertSelfOutput.dense,
 *              or nn.MultiheadAttention's in_proj / out_proj). Residual and LayerNorm are
 *              separate ops (save / add / layernorm), so post-LN and pre-LN blocks are both
 *              spec lines.
 *  POOL_CLS    tokens -> item: each item's first token (BERT's [CLS] pooling). (`pool mean`
 *              is GLOBALAVGPOOL on tokens.)
 *  L2NORM      per row: x / max(||x||_2, eps) (torch.nn.functional.normalize, eps 1e-12 default).
 *
 * Layouts. A value is a dense batch: item k of a value with per-item element count S starts at
 * element k * S of its buffer; inside an item the logical layout is CHW (rank 3) or features
 * (rank 1), as PyTorch's NCHW. A backend may keep other layouts internally as long as values
 * read by FLATTEN-renamed LINEARs, SOFTMAX/ARGMAX/TOPK and the model output are CHW: the CUDA
 * runtime keeps a convolutional fp16 / bf16 model in NHWC when they are (lib/cuda/model.c,
 * gp__cuda_nhwc; docs/DESIGN.md §6).
 *
 * Tokens. A variable-length model's input is a sequence of tokens per item (rank-1 token
 * shape, `tokens` set). LINEAR, ACT and ADD on token values work token by token on the packed
 * token matrix of the whole batch (T rows, T the batch's total tokens); GLOBALAVGPOOL on a token
 * value is the mean over each item's own tokens (gp__run.tok) and gives a per-item rank-1 value.
 * Token values live in token buffers, which hold max_batch_tokens tokens. The model's output is
 * always per item.
 *
 * Buffers. Every op reads `src` (and `src2`: ADD's second operand, a CONV2D's folded residual)
 * and writes `dst`, each a buffer id:
 * GP__BUF_INPUT is the batch input (b->in, item layout as gp_model_input_info; read-only),
 * GP__BUF_OUTPUT the batch output (b->out; written only by the last op), ids >= 0 index
 * m->bufs. Buffer i of a slot whose scratch was allocated for `capacity` items starts at
 * element capacity * m->bufs[i].offset of the scratch and holds capacity * m->bufs[i].elems
 * elements; offsets are multiples of GP__BUF_ALIGN elements, so every buffer is 256-byte
 * aligned for any capacity when the scratch is. A token buffer lives in a second scratch, the
 * token scratch of max_batch_tokens * scratch_tok_elems elements, at
 * max_batch_tokens * offset. The plan is in elements, not bytes: a backend
 * that keeps activations in 16-bit allocates elements * 2 bytes with the same offsets.
 * dst == src (or src2) only for ACT and ADD (elementwise, in place); never otherwise.
 *
 * A residual add folded into a convolution: `add TAG` right after a conv2d whose output nothing
 * else reads (not saved, no activation yet) does not become an ADD op; the conv2d reads TAG's
 * value as src2 and computes dst = act(conv(src) + bias + src2), the act being the one a
 * following activation line fuses (ResNet's block tail, relu(bn(conv(x)) + identity), is one
 * op). The host computes it as the two ops did (the conv with its bias, then the add and act),
 * so its results are bit for bit those of the unfolded model; the CUDA layer may run it as
 * cuDNN's fused conv + bias + z + relu (lib/cuda/conv.c).
 */
#ifndef GP_LIB_MODEL_IMPL_H
#define GP_LIB_MODEL_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "../errsink.h"
#include "gpupipe/gpupipe.h"
#include "gpupipe/model.h"
#include "util.h"

#ifdef __cplusplus /* the CUDA layers in kernels/<name>.cu include these headers */
extern "C" {
#endif

#define GP__MODEL_BACKENDS 3 /* indexed by gp_backend: AUTO (unused), HOST, CUDA */

/* ---- ops --------------------------------------------------------------------------------- */

/* The ops, once: kind and name (describe, messages). A new op is a row here, its builder in
   build.c, its host layer in host.c and its CUDA layer in lib/cuda/ (docs/DESIGN.md §10). */
#define GP__OP_LIST(X)                                                                             \
    X(PREP, "prep")                                                                                \
    X(CONV2D, "conv2d")                                                                            \
    X(LINEAR, "linear")                                                                            \
    X(MAXPOOL2D, "maxpool2d")                                                                      \
    X(AVGPOOL2D, "avgpool2d")                                                                      \
    X(GLOBALAVGPOOL, "globalavgpool")                                                              \
    X(ACT, "act")                                                                                  \
    X(ADD, "add")                                                                                  \
    X(SOFTMAX, "softmax")                                                                          \
    X(ARGMAX, "argmax")                                                                            \
    X(TOPK, "topk")                                                                                \
    X(COPY, "copy")                                                                                \
    X(EMBEDDING, "embedding")                                                                      \
    X(LAYERNORM, "layernorm")                                                                      \
    X(ATTENTION, "attention")                                                                      \
    X(POOL_CLS, "pool_cls")                                                                        \
    X(L2NORM, "l2norm")

typedef enum gp__op_kind {
#define GP__OP_ENUM(kind, name) GP__OP_##kind,
    GP__OP_LIST(GP__OP_ENUM)
#undef GP__OP_ENUM
        GP__OP_COUNT_
} gp__op_kind;

typedef enum gp__act {
    GP__ACT_NONE = 0,
    GP__ACT_RELU,
    GP__ACT_GELU, /* erf form; cuBLASLt's GELU epilogue is the tanh form: do not fuse it there */
    GP__ACT_SIGMOID,
    GP__ACT_TANH
} gp__act;

/* Per-item shape. rank 1: c = features, h = w = 1. rank 3: C x H x W. With `tokens` set the
   shape is one token's (rank 1: c features) and each item has its own number of tokens: the
   value of a variable-length input and what token-wise ops make of it (docs/DESIGN.md §8.7). */
typedef struct gp__shape {
    int rank;
    int c, h, w;
    int tokens;
} gp__shape;

static inline size_t gp__shape_numel(gp__shape s) {
    return (size_t)s.c * (size_t)s.h * (size_t)s.w;
}

enum { GP__BUF_INPUT = -1, GP__BUF_OUTPUT = -2, GP__BUF_NONE = -3 };
#define GP__BUF_ALIGN 64 /* elements: 256 bytes of fp32 */

typedef struct gp__op {
    gp__op_kind kind;
    int line;           /* spec line (1-based) that produced the op, for messages */
    char name[64];      /* layer name for CONV2D / LINEAR (tensor prefix); "" otherwise */
    gp__shape in;       /* per item, logical CHW (for PREP: the CHW shape after the stage) */
    gp__shape out;      /* per item */
    int src, src2, dst; /* buffer ids (see Buffers); src2: GP__BUF_NONE but for ADD and a
                           CONV2D with a folded residual (gp__op_has_src2) */
    gp__act act;        /* CONV2D, LINEAR, ADD: fused after the op; ACT: the activation */

    /* CONV2D (kh, kw from the weight), MAXPOOL2D, AVGPOOL2D (kh, kw = kernel) */
    int kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
    int groups; /* CONV2D; 1 otherwise */

    int k; /* TOPK: k (<= in.c); ARGMAX: 1 */

    /* PREP */
    gp_dtype in_dtype; /* GP_DTYPE_U8 or GP_DTYPE_F32 */
    int hwc;           /* the item arrives H x W x C */
    const float *mean; /* [in.c]: 0 when the spec gave none */
    const float *std;  /* [in.c]: 1 when the spec gave none */

    /* CONV2D: weight [out.c][in.c / groups][kh][kw]; LINEAR: weight [out.c][in.c].
       bias [out.c] is never NULL for these (zeros when the file has none). fp32, host memory
       owned by the model, batchnorm folded. */
    const float *weight;
    size_t weight_count;
    const float *bias;
    const float *host_packed; /* the weight packed for the host GEMM (host.h); host only */

    /* EMBEDDING: weight2 = position embeddings [positions][out.c] (or NULL), vocab = rows of
       weight. ATTENTION: weight2 = the output projection [c][c], bias2 [c]; heads.
       LAYERNORM, L2NORM: eps. See the semantics above. */
    const float *weight2, *bias2;
    size_t weight2_count;
    const float *host_packed2; /* weight2 packed for the host GEMM; host only */
    int vocab, positions;
    int heads;
    float eps;

    double flops; /* per item (token models: per token for token-wise ops; ATTENTION: its
                     projections only, the scores' 4 * T * c per token of a T-token item
                     depend on the item) */
} gp__op;

/* Whether the op reads src2: ADD, and a CONV2D with a folded residual add (see Buffers). */
static inline int gp__op_has_src2(const gp__op *op) {
    return op->kind == GP__OP_ADD || (op->kind == GP__OP_CONV2D && op->src2 != GP__BUF_NONE);
}

typedef struct gp__buf {
    size_t elems;  /* per item (token buffers: per token): the largest value the buffer holds */
    size_t offset; /* per item (per token), in elements, a multiple of GP__BUF_ALIGN */
    int tokens;    /* a token buffer: it lives in the token scratch (see Buffers) */
} gp__buf;

/* What one run of the op list needs to know about the batch besides its bytes: n items and,
   for a variable-length model, the tokens (host memory). */
typedef struct gp__run {
    size_t n;
    size_t tokens;      /* total tokens of the n items (variable-length models), else 0 */
    const int64_t *tok; /* n + 1 token offsets (item k: tokens tok[k] .. tok[k + 1]), or NULL */
    /* A pipeline's batch, or NULL. With one, an item whose input the layers cannot use (a token
       id outside the vocabulary) fails alone (gp_batch_fail_item), its values NaN, and the
       first such failure's message is left in the run's error buffer with *failed counted;
       without one, the run fails. */
    const gp_batch *batch;
    size_t *failed;
} gp__run;

/* ---- the model ----------------------------------------------------------------------------- */

struct gp_model {
    gp_precision precision;
    size_t max_batch; /* options.max_batch (0 = the pipeline's) */
    gp_tensor_info in_info, out_info;
    gp__shape in_shape; /* the input as a CHW value (after PREP) */

    gp__op *ops;
    int n_ops;
    gp__buf *bufs;
    int n_bufs;
    size_t scratch_elems;     /* per item: sum of the item buffers, aligned */
    size_t scratch_tok_elems; /* per token: sum of the token buffers, aligned */
    size_t host_work_elems;   /* per call (not per item): host im2col + GEMM packing workspace */
    /* Variable-length models (the input is tokens): bytes of one input token, and the limits
       from the options. 0 for fixed-size models. */
    size_t token_bytes;
    size_t max_tokens, max_batch_tokens;
    int positions_limit; /* max_tokens is a position table's rows (shorter than the option) */

    double flops;
    char *spec;

    /* Every weight array the ops point into, freed with the model. */
    float **allocs;
    int n_allocs, cap_allocs;

    /* The last setup or compute failure (gp_model_last_error); any thread records. */
    gp__errsink err;
    /* Each backend's model-wide state (CUDA: the weights per device), indexed by gp_backend:
       created by that backend's first slot setup under `mu`, freed by gp_model_free through
       exec[id]->model_free. */
    pthread_mutex_t mu;
    void *shared[GP__MODEL_BACKENDS];
    const struct gp__model_exec *exec[GP__MODEL_BACKENDS];
    /* options.profile: the per-op counters (profile.c), NULL without. */
    struct gp__prof *prof;
};
typedef struct gp_model gp__model;

/* ---- helpers the backends share ------------------------------------------------------------ */

/* A variable-length model's batch of n packed items (byte offsets off[0..n]): every item must
   be 1..max_tokens whole tokens. tok (or NULL) gets the token offsets tok[0..n] (tok[0] = 0),
   *longest the longest item's tokens. GP_OK, or GP_EINVAL with the item named in e. */
int gp__token_offsets(const gp__model *m, size_t n, const uint64_t *off, int64_t *tok,
                      size_t *longest, gp__err *e);

/* fp32 <-> fp16 / bf16, round to nearest even; NaN stays NaN. */
uint16_t gp__f32_to_f16(float f);
float gp__f16_to_f32(uint16_t h);
uint16_t gp__f32_to_bf16(float f);
float gp__bf16_to_f32(uint16_t h);

/* ---- the IR's lifetime (ir.c) ------------------------------------------------------------- */

/* An empty model (locks initialised); NULL when out of memory. */
gp__model *gp__model_new(void);
/* Free everything: each backend's model-wide state, the ops, weights and spec. NULL is ok. */
void gp__model_destroy(gp__model *m);

/* Per-op time (options.profile; profile.h). profile.c: init, free; common.c: batch, untimed. init:
   GP_OK or GP_ENOMEM (m->prof set). batch: one timed batch of `items` items, op i took ns[i]
   (m->n_ops values). untimed: one batch not timed (a CUDA graph replay). Both do nothing when
   m->prof is NULL; any thread. */
int gp__prof_init(gp__model *m);
void gp__prof_free(gp__model *m);
void gp__prof_batch(gp__model *m, const uint64_t *ns, size_t items);
void gp__prof_untimed(gp__model *m);
/* A 64-byte aligned array of n floats owned by the model (freed with it); NULL on failure. */
float *gp__model_alloc(gp__model *m, size_t n);
/* Copy the caller's options (as far as its struct_size reaches) over defaults and check them.
   GP_EINVAL with the field named. */
int gp__model_options_copy(gp_model_options *dst, const gp_model_options *src, gp__err *e);

/* Name of an op kind / activation ("conv2d", "relu", ...). */
const char *gp__op_name(gp__op_kind k);
/* "256", "*x256" (per token), "3x224x224" */
void gp__shape_str(gp__shape s, char *buf, size_t len);
const char *gp__act_name(gp__act a);

#ifdef __cplusplus
}
#endif

#endif /* GP_LIB_MODEL_IMPL_H */
