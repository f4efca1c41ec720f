/*
 * Variable-length models (docs/DESIGN.md §8.7), on every backend: an input of tokens
 * (`input f32 *xF`), token-wise linear / relu / add, globalavgpool as the mean over each item's
 * own tokens, item-level layers after it. Checked against a naive reference written here, alone
 * (gp_model_run_host_packed) and through a pipeline with variable-size items of 1..max tokens;
 * the spec's refusals (item-level layers on tokens, a token output, ids without an embedding,
 * u8 tokens) and an item that is not whole tokens.
 */
#include <stdatomic.h>
#include <string.h>

#include "mt.h"

#define F 8     /* features per token */
#define H 16    /* hidden */
#define OUT 4   /* classes */
#define MAXT 40 /* tokens per item */
#define N 300   /* items */

static gp_backend backend;
static float *w1, *b1, *w2, *b2;

/* The model below, written out: per token h = relu(W1 x + b1), r = h + h (the residual adds
   the saved value to itself), mean over the item's tokens, linear 2, softmax. */
static void reference(const float *x, size_t T, double *out) {
    double mean[H] = {0};
    for (size_t t = 0; t < T; t++)
        for (int o = 0; o < H; o++) {
            double acc = b1[o];
            for (int i = 0; i < F; i++)
                acc += (double)w1[o * F + i] * x[t * F + i];
            float h = (float)acc > 0 ? (float)acc : 0.0f;
            mean[o] += 2.0 * h;
        }
    double logits[OUT], mx = -1e300, sum = 0;
    for (int o = 0; o < OUT; o++) {
        double acc = b2[o];
        for (int i = 0; i < H; i++)
            acc += (double)w2[o * H + i] * (mean[i] / (double)T);
        logits[o] = acc;
        if (acc > mx) mx = acc;
    }
    for (int o = 0; o < OUT; o++)
        sum += exp(logits[o] - mx);
    for (int o = 0; o < OUT; o++)
        out[o] = exp(logits[o] - mx) / sum;
}

static const char *SPEC = "input f32 *x8\n"
                          "linear l1\n"
                          "relu\n"
                          "save h\n"
                          "add h\n"
                          "globalavgpool\n"
                          "linear l2\n"
                          "softmax\n";

static size_t tokens_of(size_t k) {
    return 1 + (k * 7919) % MAXT;
}

static struct {
    float *x;      /* all items' tokens, packed */
    uint64_t *off; /* byte offsets, N + 1 */
    double *want;  /* N * OUT */
    float *got;    /* N * OUT through the pipeline */
    _Atomic int calls[N];
    _Atomic int bad;
} D;

static void done(void *user, int status, const void *out, size_t bytes) {
    size_t k = (size_t)(uintptr_t)user;
    atomic_fetch_add(&D.calls[k], 1);
    if (status != GP_OK || bytes != OUT * sizeof(float)) {
        atomic_fetch_add(&D.bad, 1);
        return;
    }
    memcpy(D.got + k * OUT, out, bytes);
}

static void refusals(mt *t) {
    const char *bad[][2] = {
        {"input f32 *x8\nsoftmax\n", "per-item value"},
        {"input f32 *x8\nlinear l1\n", "pool them"},
        {"input f32 *x8\nflatten\nlinear l1\n", "pool them"},
        {"input i32 *\nlinear l1\n", "embedding"},
        {"input u8 *x3\nglobalavgpool\n", "variable-length input"},
        {"input f32 *x3x4\nglobalavgpool\n", "bad shape"},
        {"input f32 8x*\nglobalavgpool\n", "bad shape"},
        {"input f32 *x8 mean=0.5\nglobalavgpool\n", "C x H x W"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gp_model *m = NULL;
        char err[512];
        GPT_RC(mt_load(t, bad[i][0], &m, err, sizeof err), GP_EMODEL);
        GPT_CHECK(m == NULL);
        if (!strstr(err, bad[i][1])) {
            fprintf(stderr, "spec %zu: '%s' does not say '%s'\n", i, err, bad[i][1]);
            GPT_CHECK(0);
        }
    }
}

int main(int argc, char **argv) {
    backend = gpt_backend(argc, argv);
    mt t = {.rng = 42};
    w1 = mt_add(&t, "l1.weight", 2, (uint64_t[]){H, F}, -0.5, 0.5);
    b1 = mt_add(&t, "l1.bias", 1, (uint64_t[]){H}, -0.1, 0.1);
    w2 = mt_add(&t, "l2.weight", 2, (uint64_t[]){OUT, H}, -0.5, 0.5);
    b2 = mt_add(&t, "l2.bias", 1, (uint64_t[]){OUT}, -0.1, 0.1);
    refusals(&t);

    gp_model *m;
    char err[512];
    GPT_RC(mt_load(&t, SPEC, &m, err, sizeof err), GP_OK);
    gp_tensor_info ii;
    GPT_RC(gp_model_input_info(m, &ii), GP_OK);
    GPT_EQ(ii.dims[0], -1);
    GPT_EQ(ii.dims[1], F);
    GPT_EQ(ii.bytes, F * sizeof(float));                      /* one token */
    GPT_EQ(gp_model_input_bytes(m), 512 * F * sizeof(float)); /* the default max_tokens */

    /* The items, packed, and the reference. */
    size_t total = 0;
    for (size_t k = 0; k < N; k++)
        total += tokens_of(k);
    D.x = mt_rand(&t, total * F, -1.0, 1.0);
    D.off = malloc((N + 1) * sizeof *D.off);
    D.want = malloc(N * OUT * sizeof *D.want);
    D.got = calloc(N * OUT, sizeof *D.got);
    GPT_CHECK(D.off && D.want && D.got);
    D.off[0] = 0;
    for (size_t k = 0; k < N; k++) {
        D.off[k + 1] = D.off[k] + tokens_of(k) * F * sizeof(float);
        reference(D.x + D.off[k] / sizeof(float), tokens_of(k), D.want + k * OUT);
    }

    /* Alone, on the host layers. */
    float *alone = malloc(N * OUT * sizeof *alone);
    GPT_CHECK(alone);
    GPT_RC(gp_model_run_host_packed(m, N, D.x, D.off, alone, err, sizeof err), GP_OK);
    double e_alone = mt_rel_err(alone, D.want, N * OUT);
    printf("host layers alone: %d items of 1..%d tokens, max rel. error %.2e\n", N, MAXT, e_alone);
    GPT_CHECK(e_alone < 1e-5);
    /* Offsets need not start at 0: item k is in[off[k] .. off[k + 1]) (model.h). */
    GPT_RC(gp_model_run_host_packed(m, N - 2, D.x, D.off + 2, alone, err, sizeof err), GP_OK);
    GPT_CHECK(mt_rel_err(alone, D.want + 2 * OUT, (N - 2) * OUT) < 1e-5);
    uint64_t backwards[2] = {D.off[1], D.off[0]};
    GPT_RC(gp_model_run_host_packed(m, 1, D.x, backwards, alone, err, sizeof err), GP_EINVAL);
    GPT_CHECK(strstr(err, "backwards") != NULL);
    GPT_RC(gp_model_run_host(m, 1, D.x, alone, err, sizeof err), GP_EINVAL);
    uint64_t ragged[2] = {0, F * sizeof(float) + 2}; /* not whole tokens */
    GPT_RC(gp_model_run_host_packed(m, 1, D.x, ragged, alone, err, sizeof err), GP_EINVAL);
    GPT_CHECK(strstr(err, "whole tokens") != NULL);
    uint64_t huge[2] = {0, (uint64_t)1 << 44}; /* over the limit: refused before any scratch */
    GPT_RC(gp_model_run_host_packed(m, 1, D.x, huge, alone, err, sizeof err), GP_EINVAL);
    GPT_CHECK(strstr(err, "whole tokens") != NULL);

    /* Through a pipeline: variable-size items, batches of many lengths. */
    gp_config c;
    gpt_config(&c, backend);
    GPT_RC(gp_model_configure(m, &c), GP_OK);
    GPT_EQ(c.item_in_bytes, 0);
    GPT_EQ(c.max_item_in_bytes, 512 * F * sizeof(float));
    GPT_EQ(c.item_in_multiple, F * sizeof(float)); /* whole tokens, checked at submit */
    c.max_batch = 32;
    c.max_item_in_bytes = MAXT * F * sizeof(float); /* this service's longest item */
    c.max_batch_bytes = 200 * F * sizeof(float);    /* a token budget */
    gp_pipeline *p = gpt_create(&c);
    for (size_t k = 0; k < N; k++)
        GPT_RC(gp_pipeline_submit(p, (const char *)D.x + D.off[k], D.off[k + 1] - D.off[k], done,
                                  (void *)(uintptr_t)k),
               GP_OK);
    GPT_RC(gp_pipeline_drain(p, -1), GP_OK);
    /* An item that is not whole tokens is refused at submit, alone, with a message: it never
       joins a batch, so its batchmates do not fail with it (they did, GP_ECOMPUTE, when the
       compute found it). */
    atomic_store(&D.calls[0], 0);
    float ragged_item[F + 1] = {0};
    GPT_RC(gp_pipeline_submit(p, (const char *)D.x + D.off[1], D.off[2] - D.off[1], done,
                              (void *)(uintptr_t)1),
           GP_OK);
    GPT_RC(gp_pipeline_submit(p, ragged_item, sizeof ragged_item - 2, done, (void *)0), GP_EINVAL);
    GPT_RC(gp_pipeline_submit(p, (const char *)D.x + D.off[2], D.off[3] - D.off[2], done,
                              (void *)(uintptr_t)2),
           GP_OK);
    GPT_RC(gp_pipeline_drain(p, -1), GP_OK);
    GPT_EQ(atomic_load(&D.calls[0]), 0);
    GPT_EQ(atomic_load(&D.bad), 0);
    GPT_RC(gp_pipeline_last_error(p, err, sizeof err), GP_EINVAL);
    printf("a part-token item: %s\n", err);
    GPT_CHECK(strstr(err, "not a whole number of item_in_multiple (32 bytes)") != NULL);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_EQ(atomic_load(&D.calls[1]), 2);
    GPT_EQ(atomic_load(&D.calls[2]), 2);
    for (size_t k = 3; k < N; k++)
        GPT_EQ(atomic_load(&D.calls[k]), 1);

    /* Without item_in_multiple (a config that cleared it) the compute's own check still
       catches a part-token item: its batch fails with a message (the offsets of the items
       after it would be misaligned), nothing is lost. */
    c.item_in_multiple = 0;
    p = gpt_create(&c);
    atomic_store(&D.calls[0], 0);
    GPT_RC(gp_pipeline_submit(p, ragged_item, sizeof ragged_item - 2, done, (void *)0), GP_OK);
    GPT_RC(gp_pipeline_drain(p, -1), GP_OK);
    GPT_EQ(atomic_load(&D.calls[0]), 1);
    GPT_EQ(atomic_load(&D.bad), 1);
    GPT_RC(gp_model_last_error(m, err, sizeof err), GP_EINVAL);
    GPT_CHECK(strstr(err, "whole tokens") != NULL);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    atomic_store(&D.bad, 0);
    /* A config from before item_in_multiple: configure writes nothing past its struct_size. */
    {
        unsigned char raw[sizeof(gp_config) + 16];
        memset(raw, 0x5A, sizeof raw);
        gp_config *old = (gp_config *)raw;
        gp_config_init(old);
        old->struct_size = offsetof(gp_config, item_in_multiple);
        memset(raw + old->struct_size, 0x5A, sizeof raw - old->struct_size);
        GPT_RC(gp_model_configure(m, old), GP_OK);
        for (size_t i = offsetof(gp_config, item_in_multiple); i < sizeof raw; i++)
            GPT_EQ(raw[i], 0x5A);
    }

    /* One gp_config configured again for a fixed-size model: the variable-size fields go
       (create refused "set one, not both" when they stayed), and back. */
    gp_model *fixed;
    GPT_RC(mt_load(&t, "input f32 8\nlinear l1\nrelu\nlinear l2\n", &fixed, err, sizeof err),
           GP_OK);
    GPT_RC(gp_model_configure(fixed, &c), GP_OK);
    GPT_EQ(c.item_in_bytes, F * sizeof(float));
    GPT_CHECK(c.max_item_in_bytes == 0 && c.max_batch_bytes == 0 && c.arena_bytes == 0 &&
              c.item_in_multiple == 0 && c.max_item_out_bytes == 0);
    p = gpt_create(&c);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_RC(gp_model_configure(m, &c), GP_OK);
    GPT_CHECK(c.item_in_bytes == 0 && c.max_batch_bytes == 0);
    p = gpt_create(&c);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    /* Each variable-size field is cleared as far as struct_size reaches, at every size that
       ends between them (model.h), not only when it reaches them all. */
    {
        static const size_t ends[] = {
            offsetof(gp_config, max_item_in_bytes) + sizeof c.max_item_in_bytes,
            offsetof(gp_config, max_item_out_bytes) + sizeof c.max_item_out_bytes,
            offsetof(gp_config, arena_bytes) + sizeof c.arena_bytes,
        };
        for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
            gp_config v = c;
            v.max_item_in_bytes = 2048, v.max_item_out_bytes = 64, v.arena_bytes = 1 << 16;
            v.struct_size = ends[k];
            GPT_RC(gp_model_configure(fixed, &v), GP_OK);
            GPT_EQ(v.max_item_in_bytes, 0);
            GPT_EQ(v.max_item_out_bytes, k >= 1 ? 0 : 64);
            GPT_EQ(v.arena_bytes, k >= 2 ? 0 : 1 << 16);
            p = gpt_create(&v);
            GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
        }
    }
    gp_model_free(fixed);
    double e_pipe = mt_rel_err(D.got, D.want, N * OUT); /* the failed call wrote nothing */
    double tol = backend == GP_BACKEND_HOST ? 1e-5 : 1e-4;
    printf("%s pipeline: max rel. error %.2e (limit %.0e)\n", gp_backend_name(backend), e_pipe,
           tol);
    GPT_CHECK(e_pipe < tol);

    free(alone);
    free(D.x);
    free(D.off);
    free(D.want);
    free(D.got);
    gp_model_free(m);
    mt_free(&t);
    return 0;
}
