/*
 * The spec: every form of docs/MODELS.md "The spec" parses to the right fields; malformed lines and
 * lines that do not fit together fail with GP_EMODEL naming the line and the problem; the IR built
 * from a spec has the documented rewrites (batchnorm folded, activations fused only when safe) and
 * a buffer plan in which no value is overwritten before its last reader.
 */
#include <gpupipe/model.h>
#include <stdio.h>
#include <string.h>

#include "gpt.h"
#include "model/model_impl.h"
#include "model/spec.h"
#include "mt.h"

static const char design_spec[] =
    "input f32 3x32x32                      # item shape, C x H x W (or features for an MLP)\n"
    "input u8 32x32x3 layout=hwc mean=0.485,0.456,0.406 std=0.229,0.224,0.225\n"
    "conv2d c1 stride=2 padding=1 dilation=2 groups=3\n"
    "batchnorm2d bn1 eps=1e-3\n"
    "linear fc\n"
    "maxpool2d kernel=3 stride=2 padding=1\n"
    "avgpool2d kernel=2\n"
    "globalavgpool\n"
    "relu\n"
    "gelu\n"
    "sigmoid\n"
    "tanh\n"
    "flatten\n"
    "softmax\n"
    "save s\n"
    "restore s\n"
    "add main\n"
    "argmax\n"
    "topk k=5\n"
    "\n"
    "   # only a comment\n"
    "conv2d c2 padding=1x0 stride=2x1 kernel_is_not_an_option_for_conv=1\n";

static void parse_forms(void) {
    gp__spec sp;
    char err[256];
    gp__err e = {err, sizeof err};
    /* The last line has an unknown option: check everything before it parses, then it fails. */
    GPT_RC(gp__spec_parse(design_spec, &sp, &e), GP_EMODEL);
    GPT_CHECK(
        strstr(err, "spec line 22: conv2d: unknown option 'kernel_is_not_an_option_for_conv'"));
    char *ok = strdup(design_spec);
    *strstr(ok, "conv2d c2") = '\0';
    GPT_RC(gp__spec_parse(ok, &sp, &e), GP_OK);
    free(ok);
    GPT_EQ(sp.n, 19);
    const gp__spec_line *l = sp.lines;
    GPT_EQ(l[0].kind, GP__SPEC_INPUT);
    GPT_EQ(l[0].dtype, GP_DTYPE_F32);
    GPT_EQ(l[0].rank, 3);
    GPT_EQ(l[0].dims[0], 3);
    GPT_EQ(l[0].dims[2], 32);
    GPT_EQ(l[1].dtype, GP_DTYPE_U8);
    GPT_EQ(l[1].hwc, 1);
    GPT_EQ(l[1].n_mean, 3);
    GPT_CHECK(l[1].mean[2] == 0.406f && l[1].std[0] == 0.229f);
    GPT_EQ(l[2].kind, GP__SPEC_CONV2D);
    GPT_CHECK(!strcmp(l[2].name, "c1"));
    GPT_EQ(l[2].stride[0], 2);
    GPT_EQ(l[2].stride[1], 2);
    GPT_EQ(l[2].padding[1], 1);
    GPT_EQ(l[2].dilation[0], 2);
    GPT_EQ(l[2].groups, 3);
    GPT_CHECK(l[3].eps == 1e-3);
    GPT_EQ(l[5].kind, GP__SPEC_MAXPOOL2D);
    GPT_EQ(l[5].kernel[0], 3);
    GPT_EQ(l[5].has_stride, 1);
    GPT_EQ(l[6].has_stride, 0);
    GPT_EQ(l[14].kind, GP__SPEC_SAVE);
    GPT_CHECK(!strcmp(l[16].name, "main"));
    GPT_EQ(l[18].kind, GP__SPEC_TOPK);
    GPT_EQ(l[18].k, 5);
    GPT_EQ(l[18].line, 19);
    gp__spec_free(&sp);

    GPT_RC(gp__spec_parse("input f32 8\r\nconv2d c padding=1x0 stride=2x1\r\n", &sp, &e), GP_OK);
    GPT_EQ(sp.lines[1].padding[0], 1);
    GPT_EQ(sp.lines[1].padding[1], 0);
    GPT_EQ(sp.lines[1].stride[0], 2);
    GPT_EQ(sp.lines[1].stride[1], 1);
    GPT_EQ(sp.lines[1].eps == 0, 1); /* conv2d takes no eps */
    gp__spec_free(&sp);
    /* eps defaults per op (spec.h's rows): PyTorch's */
    GPT_RC(gp__spec_parse("input f32 8\nbatchnorm2d b\nlayernorm n\nl2norm\nl2norm eps=0.5\n", &sp,
                          &e),
           GP_OK);
    GPT_EQ(sp.lines[1].eps == 1e-5, 1);
    GPT_EQ(sp.lines[2].eps == 1e-5, 1);
    GPT_EQ(sp.lines[3].eps == 1e-12, 1);
    GPT_EQ(sp.lines[4].eps == 0.5, 1);
    gp__spec_free(&sp);
    printf("ok  every form of docs/MODELS.md \"The spec\" parses\n");
}

static void parse_error(const char *text, const char *needle) {
    gp__spec sp;
    char err[256] = "";
    gp__err e = {err, sizeof err};
    int rc = gp__spec_parse(text, &sp, &e);
    if (rc != GP_EMODEL || !strstr(err, needle)) {
        fprintf(stderr, "spec %s: got %s '%s', want '%s'\n", text, gp_err_name(rc), err, needle);
        exit(1);
    }
    GPT_CHECK(sp.lines == NULL && sp.n == 0);
    printf("ok  %-40.40s -> %s\n", text, err);
}

static void parse_errors(void) {
    parse_error("", "spec is empty");
    parse_error("# nothing\n\n", "spec is empty");
    parse_error("input f32 4\nlinaer fc\n", "spec line 2: unknown op 'linaer'");
    parse_error("input f32 4\n\nconv2d\n", "spec line 3: conv2d: expected a layer name");
    parse_error("input f32 4\nsave\n", "spec line 2: save: expected a tag");
    parse_error("input f32 4\nconv2d c stride=0\n", "spec line 2: conv2d: bad value 'stride=0'");
    parse_error("input f32 4\nconv2d c stride=1 stride=1\n", "option given twice 'stride'");
    parse_error("input f32 4\nconv2d c kernel=3\n", "spec line 2: conv2d: unknown option 'kernel'");
    parse_error("input f32 4\nmaxpool2d stride=2\n",
                "spec line 2: maxpool2d: kernel=K is required");
    parse_error("input f32 4\ntopk\n", "spec line 2: topk: k=K is required");
    parse_error("input f32 4\nrelu now\n", "spec line 2: relu: unexpected word 'now'");
    parse_error("input f64 4\n", "spec line 1: input: unknown dtype");
    parse_error("input f32 4x4\n", "bad shape");
    parse_error("input f32 0\n", "bad shape");
    parse_error("input f32 3x32x32x2\n", "bad shape");
    parse_error("input f32\n", "expected 'input <f32|u8> <shape>'");
    parse_error("input u8 8x8x3 layout=nhwc\n", "bad value 'layout=nhwc'");
    parse_error("input u8 8x8x3 layout=hwc mean=1,2\n", "mean/std need 1 or 3 values");
    parse_error("input u8 3x8x8 std=1,0,1\n", "bad value 'std=1,0,1'");
    parse_error("input u8 3x8x8 mean=0x10\n", "bad value 'mean=0x10'");
    parse_error("input f32 4\nbatchnorm2d bn eps=-1\n", "bad value 'eps=-1'");
    parse_error("input f32 4\nconv2d c groups=99999999999\n", "bad value");
    printf("ok  malformed lines\n");
}

/* Long words: mean/std for 64 channels written at full precision (repr of a float, as the
   exporter writes them) parse; a 65th value and a word past 2048 characters are refused by
   name. */
static void long_values(void) {
    char text[4096], *p = text;
    p += sprintf(p, "input f32 64x2x2 mean=");
    for (int i = 0; i < 64; i++)
        p += sprintf(p, "%s0.48500001430511475", i ? "," : "");
    p += sprintf(p, " std=");
    for (int i = 0; i < 64; i++)
        p += sprintf(p, "%s%.17g", i ? "," : "", 0.25 + i / 1024.0);
    gp__spec sp;
    char err[256];
    gp__err e = {err, sizeof err};
    GPT_RC(gp__spec_parse(text, &sp, &e), GP_OK);
    GPT_EQ(sp.lines[0].n_mean, 64);
    GPT_EQ(sp.lines[0].n_std, 64);
    GPT_CHECK(sp.lines[0].mean[63] == 0.48500001430511475f);
    GPT_CHECK(sp.lines[0].std[63] == (float)(0.25 + 63 / 1024.0));
    gp__spec_free(&sp);
    strcpy(p, ",0.5\n"); /* a 65th std value */
    parse_error(text, "bad value (at most 64 values: one for every channel, or one per channel)");
    strcpy(p, ",\n"); /* a trailing comma is a bad number, not a 65th value */
    parse_error(text, "input: bad value 'std=");
    p = text + sprintf(text, "input f32 64x2x2 mean=");
    for (int i = 0; i < 65; i++)
        p += sprintf(p, "%s0.5", i ? "," : "");
    strcpy(p, "\n");
    parse_error(text, "bad value (at most 64 values");
    p = text + sprintf(text, "input f32 4\nlinear ");
    memset(p, 'w', 2049);
    strcpy(p + 2049, "\n");
    parse_error(text, "spec line 2: a word of 2049 characters (at most 2048)");
    printf("ok  long words\n");
}

/* PyTorch's class names (any case) parse to the same lines as the native names. */
static void pytorch_aliases(void) {
    static const char native[] = "input f32 3x8x8\nconv2d c padding=1\nbatchnorm2d bn\nrelu\n"
                                 "maxpool2d kernel=2\navgpool2d kernel=3 stride=1 padding=1\n"
                                 "gelu\nsigmoid\ntanh\nglobalavgpool\nflatten\nlinear fc\n"
                                 "softmax\n";
    static const char torch[] = "input f32 3x8x8\nConv2d c padding=1\nBatchNorm2d bn\nReLU\n"
                                "MaxPool2d kernel_size=2\nAvgPool2d kernel_size=3 stride=1 "
                                "padding=1\nGELU\nSigmoid\nTanh\nAdaptiveAvgPool2d 1\n"
                                "Flatten\nLinear fc\nSoftmax dim=1\n";
    gp__spec a, b;
    char err[256];
    gp__err e = {err, sizeof err};
    GPT_RC(gp__spec_parse(native, &a, &e), GP_OK);
    GPT_RC(gp__spec_parse(torch, &b, &e), GP_OK);
    GPT_EQ(a.n, b.n);
    for (int i = 0; i < a.n; i++) {
        GPT_EQ(a.lines[i].kind, b.lines[i].kind);
        GPT_CHECK(!strcmp(a.lines[i].name, b.lines[i].name));
        GPT_EQ(a.lines[i].kernel[0], b.lines[i].kernel[0]);
        GPT_EQ(a.lines[i].stride[1], b.lines[i].stride[1]);
        GPT_EQ(a.lines[i].padding[0], b.lines[i].padding[0]);
        GPT_EQ(a.lines[i].has_stride, b.lines[i].has_stride);
    }
    gp__spec_free(&a);
    gp__spec_free(&b);
    const char *same[] = {
        "input f32 4x2x2\nadaptiveavgpool2d output_size=1\n",
        "input f32 4x2x2\nADAPTIVEAVGPOOL2D 1x1\n", "input f32 4x2x2\nAdaptiveAvgPool2d (1,1)\n",
        "input f32 4x2x2\nAdaptiveAvgPool2d output_size=(1,1)\n",
        /* as PyTorch prints the module */
        "input f32 4x2x2\nAdaptiveAvgPool2d output_size=(1, 1)\n",
        "input f32 4x2x2\nAdaptiveAvgPool2d (1, 1)\n", "INPUT f32 4\nSoftMax dim=-1\nTopK k=2\n"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        GPT_RC(gp__spec_parse(same[i], &a, &e), GP_OK);
        GPT_EQ(a.lines[1].kind, i < 6 ? GP__SPEC_GLOBALAVGPOOL : GP__SPEC_SOFTMAX);
        gp__spec_free(&a);
    }
    parse_error("input f32 4x8x8\nAdaptiveAvgPool2d 7\n",
                "spec line 2: AdaptiveAvgPool2d: only output size 1 is supported (it is "
                "globalavgpool); got '7'");
    parse_error("input f32 4x8x8\nAdaptiveAvgPool2d output_size=2x2\n",
                "only output size 1 is supported");
    parse_error("input f32 4x8x8\nAdaptiveAvgPool2d\n",
                "AdaptiveAvgPool2d: give the output size, as in 'AdaptiveAvgPool2d 1'");
    parse_error("input f32 4x8x8\nAdaptiveAvgPool2d 1 1\n", "only output size 1");
    parse_error("input f32 4x8x8\nAdaptiveAvgPool2d (2, 2)\n",
                "only output size 1 is supported (it is globalavgpool); got '(2, 2)'");
    parse_error("input f32 4x8x8\nAdaptiveAvgPool2d 1 x1\n", "got '1 x1'");
    parse_error("input f32 4x8x8\nAdaptiveAvgPool2d (1, 1) x\n", "only output size 1");
    parse_error("input f32 4\nSoftmax dim=0\n",
                "spec line 2: softmax: bad value (softmax runs over the features of a flat "
                "value: dim=1 or dim=-1) 'dim=0'");
    parse_error("input f32 4\nRelu dim=1\n", "spec line 2: relu: unknown option 'dim'");
    parse_error("input f32 4x8x8\nConv2d c kernel_size=3\n",
                "unknown option 'kernel_size' (the kernel size comes from the weight's shape)");
    parse_error("input f32 4\nLSTM rnn\n",
                "spec line 2: unknown op 'LSTM' (ops: input, conv2d, batchnorm2d");
    printf("ok  PyTorch spellings\n");
}

/* --describe: the input line, every op, the output line. */
static void describe_lines(void) {
    gp_model *m;
    char err[256], text[4096];
    GPT_RC(gp_model_demo("cnn", NULL, &m, err, sizeof err), GP_OK);
    FILE *f = tmpfile();
    GPT_CHECK(f);
    GPT_RC(gp_model_describe(m, f), GP_OK);
    rewind(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    const char *want = "input:  u8 32x32x3 per item (3072 bytes), layout hwc; on the device: "
                       "x / 255, mean 0.485,0.456,0.406, std 0.229,0.224,0.225, to f32 3x32x32\n";
    GPT_CHECK(!strncmp(text, want, strlen(want)));
    GPT_CHECK(strstr(text, "\noutput: i64 5 per item (40 bytes): class indices, best first\n"));
    GPT_CHECK(strstr(text, "topk"));
    gp_model_free(m);
    mt t = {.rng = 3};
    mt_add(&t, "fc.weight", 2, (uint64_t[]){3, 4}, -1, 1);
    GPT_RC(mt_load(&t, "input f32 4\nlinear fc\n", &m, err, sizeof err), GP_OK);
    f = tmpfile();
    GPT_CHECK(f);
    GPT_RC(gp_model_describe(m, f), GP_OK);
    rewind(f);
    n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    GPT_CHECK(
        strstr(text, "input:  f32 4 per item (16 bytes), layout features, no normalization\n"));
    GPT_CHECK(strstr(text, "output: f32 3 per item (12 bytes): values\n"));
    gp_model_free(m);
    mt_free(&t);
    /* A write error the FILE buffer would hide until fclose: GP_EIO from describe itself. */
    f = fopen("/dev/full", "w");
    if (f) {
        GPT_RC(gp_model_demo("cnn", NULL, &m, err, sizeof err), GP_OK);
        GPT_RC(gp_model_describe(m, f), GP_EIO);
        fclose(f);
        gp_model_free(m);
    }
    printf("ok  describe: input and output lines; GP_EIO on a full device\n");
}

/* IR-level errors: lines that parse but do not fit together. */
static void build_error(mt *t, const char *spec, const char *needle) {
    gp_model *m;
    char err[256] = "";
    int rc = mt_load(t, spec, &m, err, sizeof err);
    if (rc != GP_EMODEL || !strstr(err, needle)) {
        fprintf(stderr, "spec:\n%s\ngot %s '%s', want '%s'\n", spec, gp_err_name(rc), err, needle);
        exit(1);
    }
    printf("ok  %s\n", err);
}

static void build_errors(void) {
    mt t = {.rng = 1};
    mt_add(&t, "c.weight", 4, (uint64_t[]){4, 2, 3, 3}, -1, 1);
    mt_add(&t, "d.weight", 4, (uint64_t[]){4, 4, 3, 3}, -1, 1);
    mt_add(&t, "fc.weight", 2, (uint64_t[]){5, 16}, -1, 1);
    mt_add(&t, "bn.running_mean", 1, (uint64_t[]){4}, -1, 1);
    mt_add(&t, "bn.running_var", 1, (uint64_t[]){4}, 0.5, 1);
    build_error(&t, "conv2d c\n", "spec line 1: the first op must be 'input', not 'conv2d'");
    build_error(&t, "input f32 2x4x4\ninput f32 2x4x4\n", "spec line 2: input given twice");
    build_error(&t, "input f32 2x4x4\nconv2d c\nrelu\nbatchnorm2d bn\n",
                "spec line 4: batchnorm2d 'bn': must directly follow a conv2d");
    build_error(&t, "input f32 2x4x4\nconv2d c\nsave x\nbatchnorm2d bn\n",
                "must directly follow a conv2d");
    build_error(&t, "input f32 16\nlinear fc\nbatchnorm2d bn\n", "must directly follow a conv2d");
    /* After a residual add that folds into the conv: bn(conv(x) + x) is not bn(conv(x)) + x. */
    build_error(&t, "input f32 4x4x4\nsave x\nconv2d d padding=1\nadd x\nbatchnorm2d bn\n",
                "spec line 5: batchnorm2d 'bn': must directly follow a conv2d");
    build_error(&t, "input f32 2x4x4\nconv2d c padding=1\nlinear fc\n",
                "spec line 3: linear 'fc': needs features (rank 1), got 4x4x4: add flatten");
    build_error(&t, "input f32 16\nconv2d c\n", "spec line 2: conv2d 'c': needs a C x H x W input");
    build_error(&t, "input f32 2x2x2\nconv2d c\n",
                "the kernel does not fit the padded 2x2x2 input");
    build_error(&t, "input f32 2x4x4\nmaxpool2d kernel=2 padding=2\n",
                "padding must be at most half the kernel");
    build_error(&t, "input f32 2x4x4\nrestore nowhere\n",
                "spec line 2: restore: unknown tag 'nowhere'");
    build_error(&t, "input f32 2x4x4\nsave a\nconv2d c padding=1\nadd a\n",
                "spec line 4: add 'a': shapes differ: current 4x4x4, saved 2x4x4");
    build_error(&t, "input f32 16\nsoftmax\nargmax\nrelu\n",
                "spec line 4: nothing may follow the output stage (line 3)");
    build_error(&t, "input f32 16\ntopk k=17\n", "k=17 exceeds the 16 features");
    build_error(&t, "input f32 2x4x4\nsoftmax\n", "softmax: needs features (rank 1)");
    build_error(&t, "input f32 2x8x8\nconv2d c padding=60000\n", "is too large");
    mt_free(&t);
}

/* Rewrites and the buffer plan. */
static int count(const gp__model *m, gp__op_kind k) {
    int n = 0;
    for (int i = 0; i < m->n_ops; i++)
        n += m->ops[i].kind == k;
    return n;
}

/* Replay the plan: each buffer holds the value written last; every read must see the value
   the IR meant (the producer's op index), which the builder does not tell us directly, so
   check the weaker, sufficient invariant: between an op writing buffer b and any later op
   reading b, nothing else writes b (except in-place elementwise ops reading it). */
static void check_plan(const gp__model *m) {
    for (int i = 0; i < m->n_ops; i++) {
        const gp__op *op = &m->ops[i];
        GPT_CHECK(op->dst != GP__BUF_INPUT);
        GPT_CHECK(op->dst != GP__BUF_OUTPUT || i == m->n_ops - 1);
        int reads[2] = {op->src, op->src2};
        GPT_CHECK(gp__op_has_src2(op) || op->src2 == GP__BUF_NONE);
        for (int r = 0; r < 2; r++) {
            int b = reads[r];
            if (b < 0) continue;
            GPT_CHECK(b < m->n_bufs);
            /* src2 is ADD's second operand (in == out) or a conv2d's residual (out's shape) */
            GPT_CHECK(m->bufs[b].elems >= gp__shape_numel(r ? op->out : op->in));
            if (op->dst == b) GPT_CHECK(op->kind == GP__OP_ACT || op->kind == GP__OP_ADD);
        }
        if (op->dst >= 0) {
            GPT_CHECK(m->bufs[op->dst].elems >= gp__shape_numel(op->out));
            GPT_CHECK(m->bufs[op->dst].offset % GP__BUF_ALIGN == 0);
        }
    }
    for (int b = 0; b + 1 < m->n_bufs; b++)
        GPT_CHECK(m->bufs[b].offset + m->bufs[b].elems <= m->bufs[b + 1].offset);
}

static void rewrites(void) {
    mt t = {.rng = 2};
    float *w = mt_add(&t, "c.weight", 4, (uint64_t[]){4, 2, 3, 3}, -1, 1);
    mt_add(&t, "bn.running_mean", 1, (uint64_t[]){4}, -1, 1);
    mt_add(&t, "bn.running_var", 1, (uint64_t[]){4}, 0.5, 1);
    mt_add(&t, "c2.weight", 4, (uint64_t[]){4, 4, 1, 1}, -1, 1);
    gp_model *m;
    char err[256];
    GPT_RC(mt_load(&t,
                   "input f32 2x6x6\nconv2d c padding=1\nbatchnorm2d bn\nrelu\nsave a\n"
                   "conv2d c2\nsave b\nrelu\nadd b\nrelu\nflatten\nrestore a\nflatten\n",
                   &m, err, sizeof err),
           GP_OK);
    /* conv+bn+relu is one op; c2's output is saved so its relu stays separate; add fuses the
       following relu; the spec ends with `restore a`: the result is copied to the output. */
    GPT_EQ(count(m, GP__OP_CONV2D), 2);
    GPT_EQ(count(m, GP__OP_ACT), 1);
    GPT_EQ(count(m, GP__OP_COPY), 1);
    GPT_EQ(m->ops[0].act, GP__ACT_RELU);
    GPT_EQ(m->ops[1].act, GP__ACT_NONE);
    GPT_EQ(m->ops[3].kind, GP__OP_ADD);
    GPT_EQ(m->ops[3].act, GP__ACT_RELU);
    GPT_EQ(m->ops[4].kind, GP__OP_COPY);
    GPT_EQ(m->ops[4].src, m->ops[0].dst);
    GPT_CHECK(m->ops[0].weight[0] != w[0]); /* folded */
    GPT_CHECK(m->ops[0].bias != NULL);
    GPT_EQ(m->out_info.rank, 1);
    GPT_EQ(m->out_info.dims[0], 4 * 6 * 6);
    GPT_EQ(m->out_info.dtype, GP_DTYPE_F32);
    check_plan(m);
    gp_model_free(m);

    /* An input stage only where needed; u8 HWC in, i64 top-k out. */
    GPT_RC(mt_load(&t, "input f32 2x6x6\nconv2d c\n", &m, err, sizeof err), GP_OK);
    GPT_EQ(count(m, GP__OP_PREP), 0);
    GPT_EQ(m->ops[0].src, GP__BUF_INPUT);
    gp_model_free(m);
    GPT_RC(mt_load(&t, "input u8 6x6x2 layout=hwc mean=0.5 std=0.25\nconv2d c\nflatten\ntopk k=3\n",
                   &m, err, sizeof err),
           GP_OK);
    GPT_EQ(m->ops[0].kind, GP__OP_PREP);
    GPT_EQ(m->ops[0].hwc, 1);
    GPT_CHECK(m->ops[0].mean[1] == 0.5f && m->ops[0].std[1] == 0.25f);
    gp_tensor_info ii, oi;
    GPT_RC(gp_model_input_info(m, &ii), GP_OK);
    GPT_RC(gp_model_output_info(m, &oi), GP_OK);
    GPT_EQ(ii.dtype, GP_DTYPE_U8);
    GPT_EQ(ii.dims[0], 6);
    GPT_EQ(ii.dims[2], 2);
    GPT_EQ(ii.bytes, 72);
    GPT_EQ(oi.dtype, GP_DTYPE_I64);
    GPT_EQ(oi.dims[0], 3);
    GPT_EQ(oi.bytes, 24);
    check_plan(m);
    gp_model_free(m);
    mt_free(&t);

    /* The demo models' plans. */
    const char *demos[] = {"mlp", "cnn"};
    for (int i = 0; i < 2; i++) {
        GPT_RC(gp_model_demo(demos[i], NULL, &m, err, sizeof err), GP_OK);
        check_plan(m);
        GPT_CHECK(gp_model_flops(m) > 0);
        gp_model_free(m);
    }
    GPT_RC(gp_model_demo("resnet", NULL, &m, err, sizeof err), GP_EINVAL);
    GPT_CHECK(strstr(err, "mlp | cnn"));
    printf("ok  rewrites and buffer plans\n");
}

int main(void) {
    parse_forms();
    parse_errors();
    long_values();
    pytorch_aliases();
    describe_lines();
    build_errors();
    rewrites();
    return 0;
}
