/*
 * Spec + tensors -> IR (model_impl.h): resolve shapes line by line, check every tensor the
 * spec names, fold batchnorm, fuse activations, plan buffers.
 */
#include "build.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "spec.h"

/* A value: an activation. Views (flatten) share their root's storage. */
typedef struct bval {
    gp__shape shape;
    int root;     /* value that owns the storage (itself for non-views) */
    int producer; /* op index that writes the root; -1 for the input */
    int saved;    /* some tag names it (root only) */
    int last_use; /* last op index that reads it (root only) */
    int buf;      /* assigned buffer (root only) */
} bval;

typedef struct tagent {
    char name[GP__SPEC_MAX_NAME];
    int val;
} tagent;

typedef struct bctx {
    gp__model *m;
    const gp__st *st;
    gp__err *e;
    bval *vals;
    int n_vals, cap_vals;
    int cap_ops;
    int *op_src, *op_src2, *op_dst; /* value ids per op, while building */
    tagent *tags;
    int n_tags, cap_tags;
    const gp__spec_line *l; /* the line being built, for messages */
    int rc;                 /* why new_op failed */
    int ids;                /* the value of a token-id input (only an embedding reads it), or -1 */
} bctx;

static int oom(bctx *c) {
    return gp__errf(c->e, GP_ENOMEM, "out of memory building the model");
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 1;
    int ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *np = realloc(*p, (size_t)ncap * elem);
    if (!np) return 0;
    *p = np;
    *cap = ncap;
    return 1;
}

static int new_val(bctx *c, gp__shape s, int producer) {
    if (!grow((void **)&c->vals, &c->cap_vals, c->n_vals + 1, sizeof *c->vals)) return -1;
    int v = c->n_vals++;
    c->vals[v] =
        (bval){.shape = s, .root = v, .producer = producer, .last_use = producer, .buf = -100};
    return v;
}

static void fmt_dims(const uint64_t *d, int rank, char *buf, size_t len) {
    size_t o = 0;
    o += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%llu", i ? "," : "", (unsigned long long)d[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

static int lerr(bctx *c, const char *fmt, const char *detail) {
    char msg[512];
    snprintf(msg, sizeof msg, fmt, detail);
    if (c->l->name[0])
        return gp__errf(c->e, GP_EMODEL, "spec line %d: %s '%s': %s", c->l->line,
                        gp__spec_kind_name(c->l->kind), c->l->name, msg);
    return gp__errf(c->e, GP_EMODEL, "spec line %d: %s: %s", c->l->line,
                    gp__spec_kind_name(c->l->kind), msg);
}

/* Find `<prefix>.<suffix>`; check rank and (where want[i] >= 0) each dim, every dim in
   1..GP__SPEC_MAX_DIM except the first, which may reach max0 (embedding tables). required == 0:
   a missing tensor gives *t = NULL and GP_OK. */
static int tensor_at(bctx *c, const char *prefix, const char *suffix, int rank, const int64_t *want,
                     int required, uint64_t max0, const gp__st_tensor **t) {
    char full[2 * GP__SPEC_MAX_NAME + 32];
    snprintf(full, sizeof full, "%s.%s", prefix, suffix);
    *t = gp__st_find(c->st, full);
    if (!*t) {
        if (!required) return GP_OK;
        return gp__errf(c->e, GP_EMODEL, "spec line %d: %s '%s': tensor '%s' is missing",
                        c->l->line, gp__spec_kind_name(c->l->kind), c->l->name, full);
    }
    int ok = (*t)->rank == rank;
    for (int i = 0; ok && i < rank; i++)
        ok = (*t)->shape[i] >= 1 && (*t)->shape[i] <= (i == 0 ? max0 : GP__SPEC_MAX_DIM) &&
             (want[i] < 0 || (uint64_t)want[i] == (*t)->shape[i]);
    if (!ok) {
        char got[96], exp[96];
        fmt_dims((*t)->shape, (*t)->rank, got, sizeof got);
        size_t o = (size_t)snprintf(exp, sizeof exp, "[");
        for (int i = 0; i < rank && o < sizeof exp; i++) {
            if (want[i] < 0)
                o += (size_t)snprintf(exp + o, sizeof exp - o, "%s*", i ? "," : "");
            else
                o += (size_t)snprintf(exp + o, sizeof exp - o, "%s%lld", i ? "," : "",
                                      (long long)want[i]);
        }
        if (o < sizeof exp) snprintf(exp + o, sizeof exp - o, "]");
        /* The shape may fit the pattern and still be refused: say which dimension. */
        char why[96] = "";
        for (int i = 0; (*t)->rank == rank && !why[0] && i < rank; i++) {
            uint64_t lim = i == 0 ? max0 : GP__SPEC_MAX_DIM;
            if ((*t)->shape[i] == 0)
                snprintf(why, sizeof why, " (dimension %d is 0)", i);
            else if ((*t)->shape[i] > lim)
                snprintf(why, sizeof why, " (dimension %d is over the limit, %llu)", i,
                         (unsigned long long)lim);
        }
        return gp__errf(
            c->e, GP_EMODEL, "spec line %d: %s '%s': tensor '%s' has shape %s, expected %s%s",
            c->l->line, gp__spec_kind_name(c->l->kind), c->l->name, full, got, exp, why);
    }
    return GP_OK;
}

static int tensor(bctx *c, const char *suffix, int rank, const int64_t *want, int required,
                  const gp__st_tensor **t) {
    return tensor_at(c, c->l->name, suffix, rank, want, required, GP__SPEC_MAX_DIM, t);
}

/* fp32 copy of a tensor (numel floats), owned by the model. */
static int load_f32(bctx *c, const gp__st_tensor *t, size_t numel, float **out) {
    *out = gp__model_alloc(c->m, numel);
    if (!*out) return oom(c);
    return gp__st_read_f32(c->st, t, *out, c->e);
}

/* A tensor the file may lack: its fp32 copy, or n zeros. */
static int load_or_zeros(bctx *c, const gp__st_tensor *t, size_t n, float **out) {
    if (t) return load_f32(c, t, n, out);
    if (!(*out = gp__model_alloc(c->m, n))) return oom(c);
    memset(*out, 0, n * sizeof **out);
    return GP_OK;
}

#define GP__MAX_ACT_ELEMS (1u << 28) /* per item: 1 GiB of fp32 */

/* Append an op reading value `src` and producing a new value of shape `out`. -1 on failure
   with c->rc set. */
static int new_op(bctx *c, gp__op_kind kind, gp__shape in, gp__shape out, int src) {
    gp__model *m = c->m;
    if (gp__shape_numel(out) > GP__MAX_ACT_ELEMS) {
        char b[64];
        gp__shape_str(out, b, sizeof b);
        c->rc = lerr(c, "the output (%s) is too large", b);
        return -1;
    }
    int old_cap = c->cap_ops;
    if (!grow((void **)&m->ops, &c->cap_ops, m->n_ops + 1, sizeof *m->ops)) goto nomem;
    if (c->cap_ops != old_cap) {
        size_t cap = (size_t)c->cap_ops;
        int *a = realloc(c->op_src, cap * sizeof *a);
        if (!a) goto nomem;
        c->op_src = a;
        if (!(a = realloc(c->op_src2, cap * sizeof *a))) goto nomem;
        c->op_src2 = a;
        if (!(a = realloc(c->op_dst, cap * sizeof *a))) goto nomem;
        c->op_dst = a;
    }
    int i = m->n_ops;
    gp__op *op = &m->ops[i];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->line = c->l->line;
    op->in = in;
    op->out = out;
    op->src2 = GP__BUF_NONE;
    op->groups = 1;
    op->stride_h = op->stride_w = op->dil_h = op->dil_w = 1;
    c->op_src[i] = src;
    c->op_src2[i] = -1;
    int v = new_val(c, out, i);
    if (v < 0) goto nomem;
    c->op_dst[i] = v;
    m->n_ops++;
    c->rc = GP_OK;
    return i;
nomem: /* the message only now: a successful load leaves `err` as it found it */
    c->rc = oom(c);
    return -1;
}

static int out_dim(int in, int pad, int dil, int k, int stride, int *out) {
    long span = (long)dil * (k - 1) + 1;
    long num = (long)in + 2L * pad - span;
    if (num < 0) return 0;
    *out = (int)(num / stride + 1);
    return 1;
}

/* Ops that work on a whole item (convolutions, pools, softmax, the output stages) cannot take
   a token value: its items have no fixed size. */
static int need_items(bctx *c, gp__shape s) {
    if (!s.tokens) return GP_OK;
    return lerr(c, "%s",
                "needs a per-item value, got variable-length tokens: pool them first "
                "(pool mean | pool cls)");
}

static int need_rank3(bctx *c, gp__shape s) {
    if (s.tokens) return need_items(c, s);
    if (s.rank == 3) return GP_OK;
    char b[64];
    gp__shape_str(s, b, sizeof b);
    return lerr(c, "needs a C x H x W input, got %s features", b);
}

static int need_rank1(bctx *c, gp__shape s) {
    if (s.rank == 1) return s.tokens ? need_items(c, s) : GP_OK;
    char b[64];
    gp__shape_str(s, b, sizeof b);
    return lerr(c, "needs features (rank 1), got %s: add flatten", b);
}

static int build_conv(bctx *c, int *cur) {
    const gp__spec_line *l = c->l;
    gp__shape in = c->vals[*cur].shape;
    int rc = need_rank3(c, in);
    if (rc != GP_OK) return rc;
    if (in.c % l->groups != 0) {
        char b[64];
        snprintf(b, sizeof b, "%d input channels are not divisible by groups=%d", in.c, l->groups);
        return lerr(c, "%s", b);
    }
    const gp__st_tensor *w, *b;
    int64_t want_w[4] = {-1, in.c / l->groups, -1, -1};
    if ((rc = tensor(c, "weight", 4, want_w, 1, &w)) != GP_OK) return rc;
    int cout = (int)w->shape[0], kh = (int)w->shape[2], kw = (int)w->shape[3];
    if (cout % l->groups != 0) {
        char m[96];
        snprintf(m, sizeof m, "%d output channels are not divisible by groups=%d", cout, l->groups);
        return lerr(c, "%s", m);
    }
    int64_t want_b[1] = {cout};
    if ((rc = tensor(c, "bias", 1, want_b, 0, &b)) != GP_OK) return rc;
    gp__shape out = {3, cout, 0, 0, 0};
    if (!out_dim(in.h, l->padding[0], l->dilation[0], kh, l->stride[0], &out.h) ||
        !out_dim(in.w, l->padding[1], l->dilation[1], kw, l->stride[1], &out.w)) {
        char m[64];
        gp__shape_str(in, m, sizeof m);
        return lerr(c, "the kernel does not fit the padded %s input", m);
    }
    int i = new_op(c, GP__OP_CONV2D, in, out, *cur);
    if (i < 0) return c->rc;
    gp__op *op = &c->m->ops[i];
    snprintf(op->name, sizeof op->name, "%s", l->name);
    op->kh = kh, op->kw = kw;
    op->stride_h = l->stride[0], op->stride_w = l->stride[1];
    op->pad_h = l->padding[0], op->pad_w = l->padding[1];
    op->dil_h = l->dilation[0], op->dil_w = l->dilation[1];
    op->groups = l->groups;
    op->weight_count = (size_t)cout * (size_t)(in.c / l->groups) * (size_t)kh * (size_t)kw;
    float *wp, *bp;
    if ((rc = load_f32(c, w, op->weight_count, &wp)) != GP_OK) return rc;
    if ((rc = load_or_zeros(c, b, (size_t)cout, &bp)) != GP_OK) return rc;
    op->weight = wp;
    op->bias = bp;
    op->flops = 2.0 * (double)op->weight_count * (double)out.h * (double)out.w;
    *cur = c->op_dst[i];
    return GP_OK;
}

static int build_batchnorm(bctx *c, int cur) {
    bval *v = &c->vals[cur];
    int p = v->producer;
    /* Not after an add folded into the conv (src2): the fold would scale the conv alone, while
       the spec normalizes the sum. */
    if (v->root != cur || p < 0 || c->m->ops[p].kind != GP__OP_CONV2D ||
        c->m->ops[p].act != GP__ACT_NONE || c->op_src2[p] >= 0 || v->saved)
        return lerr(c, "%s", "must directly follow a conv2d (it is folded into it)");
    gp__op *op = &c->m->ops[p];
    int C = op->out.c, rc;
    int64_t want[1] = {C};
    const gp__st_tensor *mean, *var, *gamma, *beta;
    if ((rc = tensor(c, "running_mean", 1, want, 1, &mean)) != GP_OK ||
        (rc = tensor(c, "running_var", 1, want, 1, &var)) != GP_OK ||
        (rc = tensor(c, "weight", 1, want, 0, &gamma)) != GP_OK ||
        (rc = tensor(c, "bias", 1, want, 0, &beta)) != GP_OK)
        return rc;
    float *t = malloc(4 * (size_t)C * sizeof *t);
    if (!t) return oom(c);
    float *fm = t, *fv = t + C, *fg = t + 2 * C, *fb = t + 3 * C;
    rc = gp__st_read_f32(c->st, mean, fm, c->e);
    if (rc == GP_OK) rc = gp__st_read_f32(c->st, var, fv, c->e);
    if (rc == GP_OK && gamma) rc = gp__st_read_f32(c->st, gamma, fg, c->e);
    if (rc == GP_OK && beta) rc = gp__st_read_f32(c->st, beta, fb, c->e);
    if (rc != GP_OK) {
        free(t);
        return rc;
    }
    float *w = (float *)op->weight, *b = (float *)op->bias; /* owned by the model */
    size_t per = op->weight_count / (size_t)C;
    for (int o = 0; o < C; o++) {
        double g = gamma ? fg[o] : 1.0, be = beta ? fb[o] : 0.0;
        double s = g / sqrt((double)fv[o] + c->l->eps);
        for (size_t k = 0; k < per; k++)
            w[(size_t)o * per + k] = (float)(w[(size_t)o * per + k] * s);
        b[o] = (float)(((double)b[o] - fm[o]) * s + be);
    }
    free(t);
    return GP_OK;
}

static int build_linear(bctx *c, int *cur) {
    gp__shape in = c->vals[*cur].shape;
    int rc = in.rank == 1 ? GP_OK : need_rank1(c, in); /* per item, or token by token */
    if (rc != GP_OK) return rc;
    const gp__st_tensor *w, *b;
    int64_t want_w[2] = {-1, in.c};
    if ((rc = tensor(c, "weight", 2, want_w, 1, &w)) != GP_OK) return rc;
    int out_f = (int)w->shape[0];
    int64_t want_b[1] = {out_f};
    if ((rc = tensor(c, "bias", 1, want_b, 0, &b)) != GP_OK) return rc;
    int i = new_op(c, GP__OP_LINEAR, in, (gp__shape){1, out_f, 1, 1, in.tokens}, *cur);
    if (i < 0) return c->rc;
    gp__op *op = &c->m->ops[i];
    snprintf(op->name, sizeof op->name, "%s", c->l->name);
    op->weight_count = (size_t)out_f * (size_t)in.c;
    float *wp, *bp;
    if ((rc = load_f32(c, w, op->weight_count, &wp)) != GP_OK) return rc;
    if ((rc = load_or_zeros(c, b, (size_t)out_f, &bp)) != GP_OK) return rc;
    op->weight = wp;
    op->bias = bp;
    op->flops = 2.0 * (double)op->weight_count;
    *cur = c->op_dst[i];
    return GP_OK;
}

static int build_pool(bctx *c, int *cur, gp__op_kind kind) {
    const gp__spec_line *l = c->l;
    gp__shape in = c->vals[*cur].shape;
    int rc = need_rank3(c, in);
    if (rc != GP_OK) return rc;
    int sh = l->has_stride ? l->stride[0] : l->kernel[0];
    int sw = l->has_stride ? l->stride[1] : l->kernel[1];
    if (l->padding[0] > l->kernel[0] / 2 || l->padding[1] > l->kernel[1] / 2)
        return lerr(c, "%s", "padding must be at most half the kernel (as PyTorch)");
    gp__shape out = {3, in.c, 0, 0, 0};
    if (!out_dim(in.h, l->padding[0], 1, l->kernel[0], sh, &out.h) ||
        !out_dim(in.w, l->padding[1], 1, l->kernel[1], sw, &out.w)) {
        char m[64];
        gp__shape_str(in, m, sizeof m);
        return lerr(c, "the kernel does not fit the padded %s input", m);
    }
    int i = new_op(c, kind, in, out, *cur);
    if (i < 0) return c->rc;
    gp__op *op = &c->m->ops[i];
    op->kh = l->kernel[0], op->kw = l->kernel[1];
    op->stride_h = sh, op->stride_w = sw;
    op->pad_h = l->padding[0], op->pad_w = l->padding[1];
    op->flops = (double)gp__shape_numel(out) * (double)(op->kh * op->kw);
    *cur = c->op_dst[i];
    return GP_OK;
}

static int build_act(bctx *c, int *cur, gp__act act) {
    bval *v = &c->vals[*cur];
    int p = v->producer;
    if (v->root == *cur && p >= 0 && !v->saved && c->m->ops[p].act == GP__ACT_NONE &&
        (c->m->ops[p].kind == GP__OP_CONV2D || c->m->ops[p].kind == GP__OP_LINEAR ||
         c->m->ops[p].kind == GP__OP_ADD)) {
        c->m->ops[p].act = act; /* fused: nothing else can read the pre-activation value */
        return GP_OK;
    }
    int i = new_op(c, GP__OP_ACT, v->shape, v->shape, *cur);
    if (i < 0) return c->rc;
    c->m->ops[i].act = act;
    c->m->ops[i].flops = (double)gp__shape_numel(v->shape);
    *cur = c->op_dst[i];
    return GP_OK;
}

/* ---- transformer encoders (token values; model_impl.h) -------------------------------------- */

static int need_features(bctx *c, gp__shape s) {
    if (s.rank == 1) return GP_OK;
    char b[64];
    gp__shape_str(s, b, sizeof b);
    return lerr(c, "needs tokens or features (rank 1), got %s: add flatten", b);
}

/* embedding NAME: Hugging Face BertEmbeddings naming (NAME.word_embeddings.weight, optional
   NAME.position_embeddings.weight and NAME.token_type_embeddings.weight) or a plain
   nn.Embedding (NAME.weight, with position=P and token_type=T naming nn.Embedding tables). */
static int build_embedding(bctx *c, int *cur) {
    const gp__spec_line *l = c->l;
    gp__model *m = c->m;
    if (c->ids < 0 || c->vals[*cur].root != c->ids)
        return lerr(c, "%s",
                    "reads token ids: it must follow an 'input i32 *' (or i64, u32) line "
                    "directly");
    const gp__st_tensor *hf, *plain, *word, *pos = NULL, *type = NULL;
    int64_t any[2] = {-1, -1};
    int rc;
    if ((rc = tensor_at(c, l->name, "word_embeddings.weight", 2, any, 0, GP__SPEC_MAX_VOCAB,
                        &hf)) != GP_OK ||
        (rc = tensor_at(c, l->name, "weight", 2, any, 0, GP__SPEC_MAX_VOCAB, &plain)) != GP_OK)
        return rc;
    if (hf && plain)
        return lerr(c, "%s",
                    "the file has both NAME.word_embeddings.weight (BertEmbeddings) and "
                    "NAME.weight (nn.Embedding): rename one of them");
    if (!hf && !plain) {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "tensor '%s.word_embeddings.weight' (Hugging Face BertEmbeddings) or '%s.weight' "
                 "(an nn.Embedding) is missing",
                 l->name, l->name);
        return lerr(c, "%s", msg);
    }
    word = hf ? hf : plain;
    int C = (int)word->shape[1];
    int64_t want[2] = {-1, C};
    if (hf) {
        if (l->ref[GP__REF_POSITION][0] || l->ref[GP__REF_TOKEN_TYPE][0])
            return lerr(c, "%s",
                        "position= and token_type= name nn.Embedding tables; with BertEmbeddings "
                        "naming they are NAME.position_embeddings and NAME.token_type_embeddings");
        if ((rc = tensor_at(c, l->name, "position_embeddings.weight", 2, want, 0,
                            GP__SPEC_MAX_VOCAB, &pos)) != GP_OK ||
            (rc = tensor_at(c, l->name, "token_type_embeddings.weight", 2, want, 0,
                            GP__SPEC_MAX_VOCAB, &type)) != GP_OK)
            return rc;
    } else {
        if (l->ref[GP__REF_POSITION][0] &&
            (rc = tensor_at(c, l->ref[GP__REF_POSITION], "weight", 2, want, 1, GP__SPEC_MAX_VOCAB,
                            &pos)) != GP_OK)
            return rc;
        if (l->ref[GP__REF_TOKEN_TYPE][0] &&
            (rc = tensor_at(c, l->ref[GP__REF_TOKEN_TYPE], "weight", 2, want, 1, GP__SPEC_MAX_VOCAB,
                            &type)) != GP_OK)
            return rc;
    }
    int i = new_op(c, GP__OP_EMBEDDING, c->vals[*cur].shape, (gp__shape){1, C, 1, 1, 1}, *cur);
    if (i < 0) return c->rc;
    gp__op *op = &m->ops[i];
    snprintf(op->name, sizeof op->name, "%s", l->name);
    op->in_dtype = m->in_info.dtype;
    op->vocab = (int)word->shape[0];
    op->weight_count = (size_t)op->vocab * (size_t)C;
    float *w, *b;
    if ((rc = load_f32(c, word, op->weight_count, &w)) != GP_OK) return rc;
    op->weight = w;
    if (pos) {
        op->positions = (int)pos->shape[0];
        op->weight2_count = (size_t)op->positions * (size_t)C;
        if ((rc = load_f32(c, pos, op->weight2_count, &w)) != GP_OK) return rc;
        op->weight2 = w;
        /* Every position an item can have must have a row: the table is the model's limit
           when it is shorter than options.max_tokens (gp_model_describe says which). */
        if ((size_t)op->positions < m->max_tokens) {
            m->max_tokens = (size_t)op->positions;
            m->positions_limit = 1;
        }
    }
    if (!(b = gp__model_alloc(m, (size_t)C))) return oom(c);
    memset(b, 0, (size_t)C * sizeof *b);
    if (type) { /* every token has type 0 (a single segment): row 0 */
        size_t n = (size_t)type->shape[0] * (size_t)C;
        float *t = malloc(n * sizeof *t);
        if (!t) return oom(c);
        rc = gp__st_read_f32(c->st, type, t, c->e);
        if (rc == GP_OK) memcpy(b, t, (size_t)C * sizeof *b);
        free(t);
        if (rc != GP_OK) return rc;
    }
    op->bias = b;
    op->flops = 2.0 * C;
    *cur = c->op_dst[i];
    return GP_OK;
}

static int build_layernorm(bctx *c, int *cur) {
    gp__shape in = c->vals[*cur].shape;
    int rc = need_features(c, in);
    if (rc != GP_OK) return rc;
    const gp__st_tensor *w, *b;
    int64_t want[1] = {in.c};
    if ((rc = tensor(c, "weight", 1, want, 1, &w)) != GP_OK ||
        (rc = tensor(c, "bias", 1, want, 0, &b)) != GP_OK)
        return rc;
    int i = new_op(c, GP__OP_LAYERNORM, in, in, *cur);
    if (i < 0) return c->rc;
    gp__op *op = &c->m->ops[i];
    snprintf(op->name, sizeof op->name, "%s", c->l->name);
    op->eps = (float)c->l->eps;
    op->weight_count = (size_t)in.c;
    float *wp, *bp;
    if ((rc = load_f32(c, w, (size_t)in.c, &wp)) != GP_OK ||
        (rc = load_or_zeros(c, b, (size_t)in.c, &bp)) != GP_OK)
        return rc;
    op->weight = wp;
    op->bias = bp;
    op->flops = 8.0 * in.c;
    *cur = c->op_dst[i];
    return GP_OK;
}

/* One c x c projection `<name>.<proj>.weight` (+ optional .bias) into w / b. */
static int load_proj(bctx *c, const char *proj, int C, float *w, float *b) {
    char sw[GP__SPEC_MAX_NAME + 16], sb[GP__SPEC_MAX_NAME + 16];
    snprintf(sw, sizeof sw, "%s.weight", proj);
    snprintf(sb, sizeof sb, "%s.bias", proj);
    const gp__st_tensor *tw, *tb;
    int64_t ww[2] = {C, C}, wb[1] = {C};
    int rc;
    if ((rc = tensor_at(c, c->l->name, sw, 2, ww, 1, GP__SPEC_MAX_DIM, &tw)) != GP_OK ||
        (rc = tensor_at(c, c->l->name, sb, 1, wb, 0, GP__SPEC_MAX_DIM, &tb)) != GP_OK ||
        (rc = gp__st_read_f32(c->st, tw, w, c->e)) != GP_OK)
        return rc;
    if (tb) return gp__st_read_f32(c->st, tb, b, c->e);
    memset(b, 0, (size_t)C * sizeof *b);
    return GP_OK;
}

/* attention NAME heads=H: Hugging Face BertAttention naming (NAME.self.{query,key,value},
   NAME.output.dense), nn.MultiheadAttention's (NAME.in_proj_weight / in_proj_bias,
   NAME.out_proj), or q= k= v= out= naming four Linear layers under NAME. */
static int build_attention(bctx *c, int *cur) {
    const gp__spec_line *l = c->l;
    gp__model *m = c->m;
    gp__shape in = c->vals[*cur].shape;
    char b[64];
    gp__shape_str(in, b, sizeof b);
    if (!in.tokens)
        return lerr(c,
                    "attends over each item's tokens: it needs a token value (an embedding's "
                    "output), got %s",
                    b);
    int C = in.c, rc;
    if (C % l->heads != 0) {
        char msg[96];
        snprintf(msg, sizeof msg, "heads=%d does not divide the width %d", l->heads, C);
        return lerr(c, "%s", msg);
    }
    const gp__st_tensor *in_w, *in_b, *probe;
    int64_t w3[2] = {3 * (int64_t)C, C}, b3[1] = {3 * (int64_t)C};
    const char *names[4] = {"self.query", "self.key", "self.value", "output.dense"};
    int scheme = 0; /* 1: q=/k=/v=/out=, 2: nn.MultiheadAttention, 3: BertAttention */
    if (l->ref[GP__REF_Q][0]) {
        scheme = 1;
        for (int r = 0; r < 4; r++)
            names[r] = l->ref[GP__REF_Q + r];
    } else {
        char sep[GP__SPEC_MAX_NAME + 32];
        snprintf(sep, sizeof sep, "%s.q_proj_weight", l->name);
        if (gp__st_find(c->st, sep))
            return lerr(c, "%s",
                        "nn.MultiheadAttention with kdim / vdim other than embed_dim (separate "
                        "q/k/v projection weights) is not supported");
        if ((rc = tensor_at(c, l->name, "in_proj_weight", 2, w3, 0, GP__SPEC_MAX_DIM, &in_w)) !=
            GP_OK)
            return rc;
        if (in_w) {
            scheme = 2;
        } else {
            if ((rc = tensor_at(c, l->name, "self.query.weight", 2, (int64_t[]){-1, -1}, 0,
                                GP__SPEC_MAX_DIM, &probe)) != GP_OK)
                return rc;
            if (!probe) {
                char msg[400];
                snprintf(msg, sizeof msg,
                         "no attention weights: expected '%s.self.query.weight' (Hugging Face "
                         "BertAttention), '%s.in_proj_weight' (nn.MultiheadAttention), or name "
                         "the projections with q= k= v= out=",
                         l->name, l->name);
                return lerr(c, "%s", msg);
            }
            scheme = 3;
        }
    }
    int i = new_op(c, GP__OP_ATTENTION, in, in, *cur);
    if (i < 0) return c->rc;
    gp__op *op = &m->ops[i];
    snprintf(op->name, sizeof op->name, "%s", l->name);
    op->heads = l->heads;
    op->weight_count = 3 * (size_t)C * (size_t)C;
    op->weight2_count = (size_t)C * (size_t)C;
    float *w = gp__model_alloc(m, op->weight_count), *bb = gp__model_alloc(m, 3 * (size_t)C);
    float *w2 = gp__model_alloc(m, op->weight2_count), *b2 = gp__model_alloc(m, (size_t)C);
    if (!w || !bb || !w2 || !b2) return oom(c);
    if (scheme == 2) {
        if ((rc = tensor_at(c, l->name, "in_proj_bias", 1, b3, 0, GP__SPEC_MAX_DIM, &in_b)) !=
                GP_OK ||
            (rc = gp__st_read_f32(c->st, in_w, w, c->e)) != GP_OK)
            return rc;
        if (in_b && (rc = gp__st_read_f32(c->st, in_b, bb, c->e)) != GP_OK) return rc;
        if (!in_b) memset(bb, 0, 3 * (size_t)C * sizeof *bb);
        if ((rc = load_proj(c, "out_proj", C, w2, b2)) != GP_OK) return rc;
    } else {
        for (int r = 0; r < 3; r++)
            if ((rc = load_proj(c, names[r], C, w + (size_t)r * C * C, bb + (size_t)r * C)) !=
                GP_OK)
                return rc;
        if ((rc = load_proj(c, names[3], C, w2, b2)) != GP_OK) return rc;
    }
    op->weight = w;
    op->bias = bb;
    op->weight2 = w2;
    op->bias2 = b2;
    /* The projections, per token; the scores add 4 * T * c per token of an item of T tokens,
       which no per-token figure can hold. */
    op->flops = 8.0 * (double)C * (double)C;
    *cur = c->op_dst[i];
    return GP_OK;
}

static int find_tag(bctx *c, int *val) {
    for (int i = 0; i < c->n_tags; i++)
        if (strcmp(c->tags[i].name, c->l->name) == 0) {
            *val = c->tags[i].val;
            return GP_OK;
        }
    return gp__errf(c->e, GP_EMODEL, "spec line %d: %s: unknown tag '%s' (no 'save %s' before)",
                    c->l->line, gp__spec_kind_name(c->l->kind), c->l->name, c->l->name);
}

static int build_lines(bctx *c, const gp__spec *sp, int *cur_io, int *stage_line) {
    gp__model *m = c->m;
    int cur = *cur_io, rc = GP_OK;
    *stage_line = 0;
    for (int li = 1; li < sp->n; li++) {
        const gp__spec_line *l = &sp->lines[li];
        c->l = l;
        if (*stage_line)
            return gp__errf(c->e, GP_EMODEL,
                            "spec line %d: nothing may follow the output stage (line %d)", l->line,
                            *stage_line);
        /* Token ids are integers: only an embedding reads them (save/restore only rename). */
        if (c->ids >= 0 && c->vals[cur].root == c->ids && l->kind != GP__SPEC_EMBEDDING &&
            l->kind != GP__SPEC_SAVE && l->kind != GP__SPEC_RESTORE)
            return gp__errf(c->e, GP_EMODEL,
                            "spec line %d: %s: the current value is the token ids (the %s "
                            "input): an 'embedding NAME' line must turn them into vectors first",
                            l->line, gp__spec_kind_name(l->kind), gp_dtype_name(m->in_info.dtype));
        switch (l->kind) {
        case GP__SPEC_INPUT:
            return gp__errf(c->e, GP_EMODEL, "spec line %d: input given twice (first at line %d)",
                            l->line, sp->lines[0].line);
        case GP__SPEC_CONV2D:
            rc = build_conv(c, &cur);
            break;
        case GP__SPEC_BATCHNORM2D:
            rc = build_batchnorm(c, cur);
            break;
        case GP__SPEC_LINEAR:
            rc = build_linear(c, &cur);
            break;
        case GP__SPEC_MAXPOOL2D:
            rc = build_pool(c, &cur, GP__OP_MAXPOOL2D);
            break;
        case GP__SPEC_AVGPOOL2D:
            rc = build_pool(c, &cur, GP__OP_AVGPOOL2D);
            break;
        case GP__SPEC_GLOBALAVGPOOL: {
            gp__shape in = c->vals[cur].shape;
            /* Tokens: the mean over each item's tokens, a per-item feature vector. */
            if (!in.tokens && (rc = need_rank3(c, in)) != GP_OK) break;
            gp__shape out =
                in.tokens ? (gp__shape){1, in.c, 1, 1, 0} : (gp__shape){3, in.c, 1, 1, 0};
            int i = new_op(c, GP__OP_GLOBALAVGPOOL, in, out, cur);
            if (i < 0) return c->rc;
            m->ops[i].flops = (double)gp__shape_numel(in);
            cur = c->op_dst[i];
            break;
        }
        case GP__SPEC_RELU:
            rc = build_act(c, &cur, GP__ACT_RELU);
            break;
        case GP__SPEC_GELU:
            rc = build_act(c, &cur, GP__ACT_GELU);
            break;
        case GP__SPEC_SIGMOID:
            rc = build_act(c, &cur, GP__ACT_SIGMOID);
            break;
        case GP__SPEC_TANH:
            rc = build_act(c, &cur, GP__ACT_TANH);
            break;
        case GP__SPEC_FLATTEN: {
            gp__shape s = c->vals[cur].shape;
            if (s.rank == 1) break; /* already flat: identity, as torch.flatten(x, 1) on (N, F) */
            if ((rc = need_items(c, s)) != GP_OK) break;
            int v = new_val(c, (gp__shape){1, (int)gp__shape_numel(s), 1, 1, 0}, -1);
            if (v < 0) return oom(c);
            c->vals[v].root = c->vals[cur].root;
            c->vals[v].producer = c->vals[c->vals[cur].root].producer;
            cur = v;
            break;
        }
        case GP__SPEC_SOFTMAX: {
            gp__shape in = c->vals[cur].shape;
            if ((rc = need_rank1(c, in)) != GP_OK) break;
            int i = new_op(c, GP__OP_SOFTMAX, in, in, cur);
            if (i < 0) return c->rc;
            m->ops[i].flops = 3.0 * in.c;
            cur = c->op_dst[i];
            break;
        }
        case GP__SPEC_SAVE: {
            int t = -1;
            for (int i = 0; i < c->n_tags; i++)
                if (strcmp(c->tags[i].name, l->name) == 0) t = i;
            if (t < 0) {
                if (!grow((void **)&c->tags, &c->cap_tags, c->n_tags + 1, sizeof *c->tags))
                    return oom(c);
                t = c->n_tags++;
                snprintf(c->tags[t].name, sizeof c->tags[t].name, "%s", l->name);
            }
            c->tags[t].val = cur;
            c->vals[c->vals[cur].root].saved = 1;
            c->vals[cur].saved = 1;
            break;
        }
        case GP__SPEC_RESTORE:
            rc = find_tag(c, &cur);
            break;
        case GP__SPEC_ADD: {
            int other = 0; /* set by find_tag on GP_OK (gcc -O3 cannot see it) */
            if ((rc = find_tag(c, &other)) != GP_OK) break;
            if (c->ids >= 0 && c->vals[other].root == c->ids)
                return lerr(c, "%s", "the saved value is the token ids: add vectors, not ids");
            gp__shape a = c->vals[cur].shape, b = c->vals[other].shape;
            if (a.rank != b.rank || a.c != b.c || a.h != b.h || a.w != b.w ||
                a.tokens != b.tokens) {
                char sa[64], sb[64], msg[160];
                gp__shape_str(a, sa, sizeof sa);
                gp__shape_str(b, sb, sizeof sb);
                snprintf(msg, sizeof msg, "shapes differ: current %s, saved %s", sa, sb);
                return lerr(c, "%s", msg);
            }
            /* Folded into the conv2d that made the current value, when nothing else reads that
               value or has fused into it (model_impl.h, Buffers): the conv2d reads `other` as
               src2, and an activation line after this one fuses into the conv2d. */
            const bval *v = &c->vals[cur];
            int p = v->producer;
            if (p >= 0 && p == m->n_ops - 1 && v->root == cur && !v->saved &&
                m->ops[p].kind == GP__OP_CONV2D && m->ops[p].act == GP__ACT_NONE &&
                c->op_src2[p] < 0 && c->vals[other].root != cur) {
                c->op_src2[p] = other;
                m->ops[p].flops += (double)gp__shape_numel(a);
                break;
            }
            int i = new_op(c, GP__OP_ADD, a, a, cur);
            if (i < 0) return c->rc;
            c->op_src2[i] = other;
            m->ops[i].flops = (double)gp__shape_numel(a);
            cur = c->op_dst[i];
            break;
        }
        case GP__SPEC_ARGMAX:
        case GP__SPEC_TOPK: {
            gp__shape in = c->vals[cur].shape;
            if ((rc = need_rank1(c, in)) != GP_OK) break;
            int k = l->kind == GP__SPEC_ARGMAX ? 1 : l->k;
            if (k > in.c) {
                char msg[96];
                snprintf(msg, sizeof msg, "k=%d exceeds the %d features", k, in.c);
                return lerr(c, "%s", msg);
            }
            int i = new_op(c, l->kind == GP__SPEC_ARGMAX ? GP__OP_ARGMAX : GP__OP_TOPK, in,
                           (gp__shape){1, k, 1, 1, 0}, cur);
            if (i < 0) return c->rc;
            m->ops[i].k = k;
            m->ops[i].flops = (double)in.c;
            cur = c->op_dst[i];
            *stage_line = l->line;
            break;
        }
        case GP__SPEC_EMBEDDING:
            rc = build_embedding(c, &cur);
            break;
        case GP__SPEC_LAYERNORM:
            rc = build_layernorm(c, &cur);
            break;
        case GP__SPEC_ATTENTION:
            rc = build_attention(c, &cur);
            break;
        case GP__SPEC_POOL: {
            gp__shape in = c->vals[cur].shape;
            if (!in.tokens) {
                char b[64];
                gp__shape_str(in, b, sizeof b);
                return lerr(c,
                            "pools each item's tokens, got a per-item value (%s); images pool "
                            "with globalavgpool",
                            b);
            }
            /* mean: the token mean globalavgpool already is (model_impl.h, Tokens) */
            int i = new_op(c, l->pool_cls ? GP__OP_POOL_CLS : GP__OP_GLOBALAVGPOOL, in,
                           (gp__shape){1, in.c, 1, 1, 0}, cur);
            if (i < 0) return c->rc;
            m->ops[i].flops = l->pool_cls ? 0.0 : (double)in.c;
            cur = c->op_dst[i];
            break;
        }
        case GP__SPEC_L2NORM: {
            gp__shape in = c->vals[cur].shape;
            if ((rc = need_features(c, in)) != GP_OK) break;
            int i = new_op(c, GP__OP_L2NORM, in, in, cur);
            if (i < 0) return c->rc;
            m->ops[i].eps = (float)l->eps;
            m->ops[i].flops = 3.0 * in.c;
            cur = c->op_dst[i];
            break;
        }
        case GP__SPEC_KIND_COUNT_:
            break;
        }
        if (rc != GP_OK) return rc;
    }
    *cur_io = cur;
    return GP_OK;
}

static int build_input(bctx *c, const gp__spec *sp, int *cur) {
    gp__model *m = c->m;
    const gp__spec_line *l = &sp->lines[0];
    c->l = l;
    if (l->kind != GP__SPEC_INPUT)
        return gp__errf(c->e, GP_EMODEL, "spec line %d: the first op must be 'input', not '%s'",
                        l->line, gp__spec_kind_name(l->kind));
    gp_tensor_info *ii = &m->in_info;
    ii->dtype = l->dtype;
    ii->rank = l->rank;
    size_t numel = 1;
    for (int d = 0; d < l->rank; d++) {
        ii->dims[d] = l->dims[d];
        if (l->dims[d] > 0) numel *= (size_t)l->dims[d];
    }
    ii->bytes = numel * gp_dtype_size(l->dtype); /* variable length: one token */
    if (l->dims[0] < 0) {                        /* tokens (docs/DESIGN.md §8.7) */
        if (l->hwc || l->n_mean || l->n_std)
            return lerr(c, "%s", "layout, mean and std are for fixed-size inputs");
        m->token_bytes = ii->bytes;
        m->in_shape = (gp__shape){1, l->rank == 2 ? l->dims[1] : 1, 1, 1, 1};
        int v = new_val(c, m->in_shape, -1);
        if (v < 0) return oom(c);
        c->vals[v].buf = GP__BUF_INPUT;
        if (l->dtype != GP_DTYPE_F32) c->ids = v; /* token ids: one integer per token */
        *cur = v;
        return GP_OK;
    }
    gp__shape chw = {1, l->dims[0], 1, 1, 0};
    if (l->rank == 3)
        chw = l->hwc ? (gp__shape){3, l->dims[2], l->dims[0], l->dims[1], 0}
                     : (gp__shape){3, l->dims[0], l->dims[1], l->dims[2], 0};
    m->in_shape = chw;
    int v0 = new_val(c, chw, -1);
    if (v0 < 0) return oom(c);
    c->vals[v0].buf = GP__BUF_INPUT;
    *cur = v0;
    if (l->dtype == GP_DTYPE_F32 && !l->hwc && !l->n_mean && !l->n_std) return GP_OK;
    int i = new_op(c, GP__OP_PREP, chw, chw, v0);
    if (i < 0) return c->rc;
    gp__op *op = &m->ops[i];
    op->in_dtype = l->dtype;
    op->hwc = l->hwc;
    float *ms = gp__model_alloc(m, 2 * (size_t)chw.c);
    if (!ms) return oom(c);
    for (int ch = 0; ch < chw.c; ch++) {
        ms[ch] = l->n_mean ? l->mean[l->n_mean == 1 ? 0 : ch] : 0.0f;
        ms[chw.c + ch] = l->n_std ? l->std[l->n_std == 1 ? 0 : ch] : 1.0f;
    }
    op->mean = ms;
    op->std = ms + chw.c;
    op->flops = 2.0 * (double)gp__shape_numel(chw);
    *cur = c->op_dst[i];
    return GP_OK;
}

/* Liveness and buffer assignment (see "Buffers" in model_impl.h). */
static int plan_buffers(bctx *c, int final) {
    gp__model *m = c->m;
    int n = m->n_ops;
    for (int i = 0; i < n; i++) {
        int r = c->vals[c->op_src[i]].root;
        if (c->vals[r].last_use < i) c->vals[r].last_use = i;
        if (c->op_src2[i] >= 0) {
            r = c->vals[c->op_src2[i]].root;
            if (c->vals[r].last_use < i) c->vals[r].last_use = i;
        }
    }
    int *holder = NULL; /* per buffer: the root value in it */
    int cap_h = 0, cap_b = 0;
    for (int i = 0; i < n; i++) {
        int dv = c->op_dst[i];
        size_t need = gp__shape_numel(c->vals[dv].shape);
        if (i == n - 1) {
            c->vals[dv].buf = GP__BUF_OUTPUT;
            continue;
        }
        (void) final;
        int chosen = -1;
        gp__op_kind k = m->ops[i].kind;
        if (k == GP__OP_ACT || k == GP__OP_ADD) {
            int cands[2] = {c->op_src[i], c->op_src2[i]};
            for (int j = 0; j < 2 && chosen < 0; j++) {
                if (cands[j] < 0) continue;
                int r = c->vals[cands[j]].root;
                if (c->vals[r].buf >= 0 && c->vals[r].last_use == i) chosen = c->vals[r].buf;
            }
        }
        int tokens = c->vals[dv].shape.tokens;
        if (chosen < 0) {
            int best = -1, largest = -1;
            for (int b = 0; b < m->n_bufs; b++) {
                if (c->vals[holder[b]].last_use >= i || m->bufs[b].tokens != tokens) continue;
                if (m->bufs[b].elems >= need &&
                    (best < 0 || m->bufs[b].elems < m->bufs[best].elems))
                    best = b;
                if (largest < 0 || m->bufs[b].elems > m->bufs[largest].elems) largest = b;
            }
            chosen = best >= 0 ? best : largest;
            if (chosen < 0) {
                if (!grow((void **)&m->bufs, &cap_b, m->n_bufs + 1, sizeof *m->bufs) ||
                    !grow((void **)&holder, &cap_h, m->n_bufs + 1, sizeof *holder)) {
                    free(holder);
                    return oom(c);
                }
                chosen = m->n_bufs++;
                m->bufs[chosen] = (gp__buf){0, 0, tokens};
            }
            if (m->bufs[chosen].elems < need) m->bufs[chosen].elems = need;
        }
        holder[chosen] = dv;
        c->vals[dv].buf = chosen;
    }
    free(holder);
    size_t off[2] = {0, 0}; /* item scratch, token scratch */
    for (int b = 0; b < m->n_bufs; b++) {
        size_t *o = &off[m->bufs[b].tokens];
        m->bufs[b].offset = *o;
        *o += (m->bufs[b].elems + GP__BUF_ALIGN - 1) / GP__BUF_ALIGN * GP__BUF_ALIGN;
    }
    m->scratch_elems = off[0];
    m->scratch_tok_elems = off[1];
    for (int i = 0; i < n; i++) {
        gp__op *op = &m->ops[i];
        op->src = c->vals[c->vals[c->op_src[i]].root].buf;
        op->dst = c->vals[c->op_dst[i]].buf;
        if (c->op_src2[i] >= 0) op->src2 = c->vals[c->vals[c->op_src2[i]].root].buf;
    }
    return GP_OK;
}

int gp__model_build(gp__model *m, const char *spec_text, const gp__st *st, gp__err *e) {
    gp__spec sp;
    int rc = gp__spec_parse(spec_text, &sp, e);
    if (rc != GP_OK) return rc;
    bctx c = {.m = m, .st = st, .e = e, .ids = -1};
    int cur = 0, stage_line = 0;
    if ((rc = build_input(&c, &sp, &cur)) != GP_OK) goto out;
    if ((rc = build_lines(&c, &sp, &cur, &stage_line)) != GP_OK) goto out;
    c.l = &sp.lines[sp.n - 1];
    /* The result must be written to the output by the last op. */
    int root = c.vals[cur].root;
    if (c.vals[root].producer < 0 || c.vals[root].producer != m->n_ops - 1 ||
        c.vals[root].buf == GP__BUF_INPUT) {
        gp__shape s = c.vals[cur].shape;
        int i = new_op(&c, GP__OP_COPY, s, s, cur);
        if (i < 0) {
            rc = c.rc;
            goto out;
        }
        cur = c.op_dst[i];
    }
    gp__shape fs = c.vals[cur].shape;
    if (fs.tokens) {
        rc = gp__errf(e, GP_EMODEL,
                      "spec line %d: the model's output is variable-length tokens: pool them into "
                      "one value per item (pool mean | pool cls) before the output",
                      c.l->line);
        goto out;
    }
    gp_tensor_info *oi = &m->out_info;
    oi->dtype = stage_line ? GP_DTYPE_I64 : GP_DTYPE_F32;
    oi->rank = fs.rank;
    oi->dims[0] = fs.c;
    if (fs.rank == 3) {
        oi->dims[1] = fs.h;
        oi->dims[2] = fs.w;
    }
    oi->bytes = gp__shape_numel(fs) * gp_dtype_size(oi->dtype);
    if ((rc = plan_buffers(&c, cur)) != GP_OK) goto out;
    m->flops = 0;
    for (int i = 0; i < m->n_ops; i++)
        m->flops += m->ops[i].flops;
out:
    free(c.vals);
    free(c.op_src);
    free(c.op_src2);
    free(c.op_dst);
    free(c.tags);
    gp__spec_free(&sp);
    return rc;
}
