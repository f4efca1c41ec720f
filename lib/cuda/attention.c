/*
 * ATTENTION (layers.h; semantics in lib/model/model_impl.h) on token values, packed with no
 * padding: three enqueues per batch on the slot's stream,
 *
 *   qkv[T][3c] = x Wqkv^T + b          one cuBLASLt GEMM over the batch's T tokens, bias in the
 *                                      epilogue (gp__gemm, linear.c)
 *   o[T][c]    = attention(qkv)        the fused variable-length kernel (kernels/attention.cu):
 *                                      per item and head, over the item's own tokens only
 *   y[T][c]    = o Wo^T + b2           the output projection, bias in the epilogue
 *
 * qkv and o live in the slot's shared step scratch (step.tmp), sized for the slot's token
 * capacity at setup; nothing is allocated per batch. The kernel's path (tensor cores for fp16 /
 * bf16 on sm_80+, the fp32 SIMT kernel otherwise) is decided at setup from the device's compute
 * capability and the head dimension; a head dimension the kernels do not take fails setup with
 * the reason.
 *
 * Why a kernel of our own and not cuDNN's fused attention (the SDPA operation of cuDNN 9's
 * graph API takes packed sequences through ragged offsets): cuDNN's fused attention is
 * fp16 / bf16 only (the runtime also serves fp32 and tf32), needs sm_80+ and a cuDNN build
 * (optional here), and its support for a given head dimension, layout and ragged offsets is
 * decided per cuDNN version and GPU at plan time, so the kernel would be needed as the
 * fallback anyway. bench/attention-bench measures this kernel against
 * torch.nn.functional.scaled_dot_product_attention (flash, efficient and cuDNN backends) per
 * token; cuDNN becomes a fast path for 16-bit storage if the kernel misses the 2x target
 * there (bench/RESULTS.md).
 */
#include <stdlib.h>

#include "gpupipe/cuda.h"

#include "layers.h"

typedef struct attn_plan {
    gp__gemm *qkv, *proj;
    void *d_qkv, *d_o; /* in the step's scratch */
    int heads, d, arch;
} attn_plan;

/* Before the buffers exist: check the op against the kernels, ask for the scratch. */
static int attn_plan_step(slot_state *st, step *sp, const gp_batch *slot, ck *c) {
    (void)slot;
    const gp__op *op = sp->op;
    int C = op->in.c;
    if (!op->in.tokens || !op->out.tokens || op->out.c != C)
        return CK_FAIL(c, GP_ENOTSUP,
                       "attention on CUDA needs token values of the same width in and out");
    if (op->heads < 1 || C % op->heads)
        return CK_FAIL(c, GP_ENOTSUP, "attention: %d features do not split into %d heads", C,
                       op->heads);
    int major = 0, minor = 0;
    CK(c, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, st->device));
    CK(c, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, st->device));
    attn_plan *ap = calloc(1, sizeof *ap);
    if (!ap) return CK_FAIL(c, GP_ENOMEM, "out of memory planning attention");
    sp->plan = ap;
    ap->heads = op->heads;
    ap->d = C / op->heads;
    CK(c, gp__k_attention_arch(major * 10 + minor, &ap->arch));
    if (gp__k_attention_path(st->kt, ap->d, ap->arch) == 0)
        return CK_FAIL(c, GP_ENOTSUP,
                       "attention: head dimension %d (%d features / %d heads) is not supported "
                       "by the CUDA kernel (1..%d)",
                       ap->d, C, op->heads, GP__ATTN_MAX_HEAD_DIM);
    size_t es = gp__kt_size(st->kt);
    sp->tmp_bytes =
        gp__align_up(st->tcap * 3 * (size_t)C * es) + gp__align_up(st->tcap * (size_t)C * es);
    return GP_OK;
}

/* After: the two GEMMs, planned for their operands. */
static int attn_bind(slot_state *st, step *sp, const gp_batch *slot, ck *c) {
    attn_plan *ap = sp->plan;
    const gp__op *op = sp->op;
    uint64_t C = (uint64_t)op->in.c;
    size_t es = gp__kt_size(st->kt);
    if (!sp->tmp) return CK_FAIL(c, GP_EDEVICE, "attention: no scratch was given to the step");
    ap->d_qkv = sp->tmp;
    ap->d_o = (unsigned char *)sp->tmp + gp__align_up(st->tcap * 3 * (size_t)C * es);
    gp__gemm_desc in = {
        .M = 3 * C,
        .K = C,
        .tokens = 1,
        .w = sp->k->w,
        .bias = sp->k->bias_t,
        .bias_f32 = sp->k->bias_f32,
        .x = gp__resolve(sp->src, slot),
        .y = ap->d_qkv,
    };
    gp__gemm_desc out = {
        .M = C,
        .K = C,
        .tokens = 1,
        .w = sp->k->w2,
        .bias = sp->k->bias2_t,
        .bias_f32 = sp->k->bias2_f32,
        .x = ap->d_o,
        .y = gp__resolve(sp->dst, slot),
    };
    int rc = gp__gemm_plan(st, slot, &in, &ap->qkv, c);
    if (rc == GP_OK) rc = gp__gemm_plan(st, slot, &out, &ap->proj, c);
    return rc;
}

static int attn_run(slot_state *st, const step *sp, const gp_batch *b, int bi, ck *c) {
    attn_plan *ap = sp->plan;
    size_t T = st->tokens;
    int rc;
    if (T == 0) return GP_OK;
    if ((rc = gp__gemm_run(ap->qkv, b, bi, T, gp__resolve(sp->src, b), ap->d_qkv, c)) != GP_OK)
        return rc;
    CK(c, gp__k_attention(gp_cuda_stream(b), st->kt, ap->d_qkv, st->d_tok, ap->d_o, b->n,
                          st->max_len, ap->heads, ap->d, ap->arch));
    return gp__gemm_run(ap->proj, b, bi, T, ap->d_o, gp__resolve(sp->dst, b), c);
}

static void attn_release(step *sp, int n_buckets) {
    (void)n_buckets;
    attn_plan *ap = sp->plan;
    if (!ap) return;
    gp__gemm_free(ap->qkv);
    gp__gemm_free(ap->proj);
    free(ap);
    sp->plan = NULL;
}

/* Wqkv, Wo and both biases (fp32 and the activation type, for the cuBLASLt epilogues), as the
   IR must hold them: a mismatch would make the upload read past the host arrays. */
static int attn_consts(const gp__op *op, gp__consts *k, ck *c) {
    size_t C = (size_t)op->out.c;
    if (!op->weight || op->weight_count != 3 * C * C || !op->weight2 ||
        op->weight2_count != C * C || (size_t)op->in.c != C)
        return CK_FAIL(c, GP_EMODEL,
                       "attention: weights of %zu and %zu floats, want 3 x %zu x %zu and "
                       "%zu x %zu",
                       op->weight_count, op->weight2 ? op->weight2_count : 0, C, C, C, C);
    gp__consts_put(k, GP__K_W, op->weight, 0.0f, 3 * C * C, k->kt);
    gp__consts_bias(k, GP__K_BIAS_F32, GP__K_BIAS_T, op->bias, 3 * C);
    gp__consts_put(k, GP__K_W2, op->weight2, 0.0f, C * C, k->kt);
    gp__consts_bias(k, GP__K_BIAS2_F32, GP__K_BIAS2_T, op->bias2, C);
    return GP_OK;
}

const cuda_layer GP__CUDA_LAYER(ATTENTION) = {
    .consts = attn_consts,
    .plan = attn_plan_step,
    .bind = attn_bind,
    .run = attn_run,
    .release = attn_release,
};
