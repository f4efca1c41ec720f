/*
 * The layer spec (docs/MODELS.md, include/gpupipe/model.h): one op per line, '#' starts a
 * comment, blank lines ignored. Parsing checks the syntax of each line on its own (keywords,
 * names, options and their values); how lines fit together (shapes, tensors, tags) is checked
 * when the IR is built. Op names are case-insensitive and PyTorch's class names are aliases.
 */
#ifndef GP_LIB_MODEL_SPEC_H
#define GP_LIB_MODEL_SPEC_H

#include "gpupipe/model.h"
#include "util.h"

/* The options an op line may take (GP__SPEC_LIST's accepted / required columns). */
enum {
    GP__O_KERNEL = 1 << 0,
    GP__O_STRIDE = 1 << 1,
    GP__O_PADDING = 1 << 2,
    GP__O_DILATION = 1 << 3,
    GP__O_GROUPS = 1 << 4,
    GP__O_EPS = 1 << 5,
    GP__O_K = 1 << 6,
    GP__O_LAYOUT = 1 << 7,
    GP__O_MEAN = 1 << 8,
    GP__O_STD = 1 << 9,
    GP__O_DIM = 1 << 10, /* softmax dim=1 | dim=-1: PyTorch's spelling of "over the features" */
    GP__O_HEADS = 1 << 11,
    GP__O_POSITION = 1 << 12,
    GP__O_TOKEN_TYPE = 1 << 13,
    GP__O_QKVO = 1 << 14, /* q=, k=, v=, out= (one bit: all four or none) */
};

/* The spec's ops, once (a new op is a row here and its builder in build.c; docs/DESIGN.md
   §10): X(KIND, keyword, options accepted, what follows the keyword (0: nothing, 1: a layer
   name, 2: a tag), options required, eps default). The keyword is matched case-insensitively;
   PyTorch's other class names (MultiheadAttention, AdaptiveAvgPool2d) are aliases in spec.c. */
#define GP__SPEC_LIST(X)                                                                           \
    X(INPUT, "input", GP__O_LAYOUT | GP__O_MEAN | GP__O_STD, 0, 0, 0)                              \
    X(CONV2D, "conv2d", GP__O_STRIDE | GP__O_PADDING | GP__O_DILATION | GP__O_GROUPS, 1, 0, 0)     \
    X(BATCHNORM2D, "batchnorm2d", GP__O_EPS, 1, 0, 1e-5)                                           \
    X(LINEAR, "linear", 0, 1, 0, 0)                                                                \
    X(MAXPOOL2D, "maxpool2d", GP__O_KERNEL | GP__O_STRIDE | GP__O_PADDING, 0, GP__O_KERNEL, 0)     \
    X(AVGPOOL2D, "avgpool2d", GP__O_KERNEL | GP__O_STRIDE | GP__O_PADDING, 0, GP__O_KERNEL, 0)     \
    X(GLOBALAVGPOOL, "globalavgpool", 0, 0, 0, 0)                                                  \
    X(RELU, "relu", 0, 0, 0, 0)                                                                    \
    X(GELU, "gelu", 0, 0, 0, 0)                                                                    \
    X(SIGMOID, "sigmoid", 0, 0, 0, 0)                                                              \
    X(TANH, "tanh", 0, 0, 0, 0)                                                                    \
    X(FLATTEN, "flatten", 0, 0, 0, 0)                                                              \
    X(SOFTMAX, "softmax", GP__O_DIM, 0, 0, 0)                                                      \
    X(SAVE, "save", 0, 2, 0, 0)                                                                    \
    X(RESTORE, "restore", 0, 2, 0, 0)                                                              \
    X(ADD, "add", 0, 2, 0, 0)                                                                      \
    X(ARGMAX, "argmax", 0, 0, 0, 0)                                                                \
    X(TOPK, "topk", GP__O_K, 0, GP__O_K, 0)                                                        \
    X(EMBEDDING, "embedding", GP__O_POSITION | GP__O_TOKEN_TYPE, 1, 0, 0)                          \
    X(LAYERNORM, "layernorm", GP__O_EPS, 1, 0, 1e-5)                                               \
    X(ATTENTION, "attention", GP__O_HEADS | GP__O_QKVO, 1, GP__O_HEADS, 0)                         \
    X(POOL, "pool", 0, 0, 0, 0)                 /* pool cls | pool mean */                         \
    X(L2NORM, "l2norm", GP__O_EPS, 0, 0, 1e-12) /* F.normalize's eps */

typedef enum gp__spec_kind {
#define GP__SPEC_ENUM(kind, keyword, opts, takes, required, eps) GP__SPEC_##kind,
    GP__SPEC_LIST(GP__SPEC_ENUM)
#undef GP__SPEC_ENUM
        GP__SPEC_KIND_COUNT_
} gp__spec_kind;

#define GP__SPEC_MAX_NAME 64
#define GP__SPEC_MAX_CH 64           /* mean/std values */
#define GP__SPEC_MAX_DIM 65536       /* any one dimension, kernel, stride, padding, ... */
#define GP__SPEC_MAX_VOCAB (1 << 24) /* rows of an embedding table */

/* Tensor prefixes an op line may name besides its own (name-valued options). */
enum {
    GP__REF_POSITION,   /* embedding position=NAME: NAME.weight, an nn.Embedding */
    GP__REF_TOKEN_TYPE, /* embedding token_type=NAME */
    GP__REF_Q,          /* attention q=, k=, v=, out=: Linear layers under the attention's name */
    GP__REF_K,
    GP__REF_V,
    GP__REF_OUT,
    GP__REF_COUNT_
};

typedef struct gp__spec_line {
    gp__spec_kind kind;
    int line;                     /* 1-based line number in the text */
    char name[GP__SPEC_MAX_NAME]; /* layer name (conv2d, batchnorm2d, linear) or tag */

    /* input */
    gp_dtype dtype;
    int rank;    /* 1 or 3 */
    int dims[3]; /* as written; dims[0] == -1: variable length (`*`) */
    int hwc;     /* layout=hwc */
    int n_mean, n_std;
    float mean[GP__SPEC_MAX_CH], std[GP__SPEC_MAX_CH];

    /* conv2d, pools: [0] = h, [1] = w. has_stride: stride was given (pools default to the
       kernel, conv to 1). */
    int kernel[2], stride[2], padding[2], dilation[2];
    int has_stride;
    int groups;
    double eps; /* batchnorm2d, layernorm, l2norm: the row's default unless given */
    int k;      /* topk */

    int heads;                                   /* attention heads=H (required) */
    int pool_cls;                                /* pool cls (1) | pool mean (0) */
    char ref[GP__REF_COUNT_][GP__SPEC_MAX_NAME]; /* "" when not given */
} gp__spec_line;

typedef struct gp__spec {
    gp__spec_line *lines;
    int n;
} gp__spec;

/* Parse `text`. GP_EMODEL "spec line N: ..." on the first bad line; GP_ENOMEM. */
int gp__spec_parse(const char *text, gp__spec *out, gp__err *e);
void gp__spec_free(gp__spec *s);

const char *gp__spec_kind_name(gp__spec_kind k);

#endif
