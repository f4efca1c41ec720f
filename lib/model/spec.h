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

typedef enum gp__spec_kind {
    GP__SPEC_INPUT,
    GP__SPEC_CONV2D,
    GP__SPEC_BATCHNORM2D,
    GP__SPEC_LINEAR,
    GP__SPEC_MAXPOOL2D,
    GP__SPEC_AVGPOOL2D,
    GP__SPEC_GLOBALAVGPOOL,
    GP__SPEC_RELU,
    GP__SPEC_GELU,
    GP__SPEC_SIGMOID,
    GP__SPEC_TANH,
    GP__SPEC_FLATTEN,
    GP__SPEC_SOFTMAX,
    GP__SPEC_SAVE,
    GP__SPEC_RESTORE,
    GP__SPEC_ADD,
    GP__SPEC_ARGMAX,
    GP__SPEC_TOPK,
    GP__SPEC_EMBEDDING,
    GP__SPEC_LAYERNORM,
    GP__SPEC_ATTENTION,
    GP__SPEC_POOL,
    GP__SPEC_L2NORM,
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
    double eps; /* batchnorm2d, layernorm: default 1e-5; l2norm: default 1e-12 */
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
