/*
 * Transformer encoders on the CUDA layers against the host layers (gp_model_run_host_packed),
 * through a pipeline with variable-size items, packed with no padding: embedding (i32 and i64
 * ids), layernorm, attention (head dimensions 20, 32, 40, 64 and 128: both attention kernels),
 * gelu MLPs with residual adds, [CLS] and mean pooling, l2norm, in every precision.
 *   Round 1: items of 1, 2, 7, 63, 64, 65, 511 and 512 tokens in one batch (checked with the
 *            pipeline's batch trace).
 *   Round 2: 24 items of random lengths 1..512, batches of up to 4 items as they come.
 * Tolerances (max |cuda - host| / max |host| over the batch's outputs): fp32 1e-5, tf32 5e-3,
 * fp16 2e-2, bf16 5e-2.
 *
 * The spec lines for the encoder ops (`embedding`, `layernorm eps=`, `attention heads=`,
 * `pool cls`, `l2norm`) and the tensor names are in SPECS / add_tensors below; every tensor is
 * written under both the Hugging Face BERT names and the torch.nn names (nn.Embedding,
 * nn.MultiheadAttention's in_proj / out_proj), so either convention of the builder finds it.
 * While the model builder in this tree does not know the encoder ops, loading fails with
 * GP_EMODEL ("unknown op", or "... which this build lacks"): the test then prints that and
 * exits 77 (skipped). Any other load failure fails the test. Without a usable CUDA device the
 * pipeline create returns GP_ENODEV: skipped too.
 *
 * "host" as the first argument runs the pipelines on the host backend instead, to keep the
 * harness checkable without a GPU.
 */
#include <gpupipe/model.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "model/model_impl.h"
#include "model/safetensors.h"

static gp_backend backend = GP_BACKEND_CUDA;
static int failures;

static const gp_precision all_prec[] = {GP_PRECISION_FP32, GP_PRECISION_TF32, GP_PRECISION_FP16,
                                        GP_PRECISION_BF16};

static double tol_of(gp_precision p) {
    switch (p) {
    case GP_PRECISION_FP32:
        return 1e-5;
    case GP_PRECISION_TF32:
        return 5e-3;
    case GP_PRECISION_FP16:
        return 2e-2;
    default:
        return 5e-2;
    }
}

/* ---- tensors ----------------------------------------------------------------------------------
 */

static uint64_t rng = 0x62657274656e63ull;

#define MAX_T 96
typedef struct tset {
    gp__st_entry e[MAX_T];
    char names[MAX_T][96];
    float *owned[MAX_T];
    int n, n_owned;
} tset;

/* An F32 tensor under `name`, with `data` (owned by the set when `own`). */
static void t_put(tset *t, const char *name, int rank, const uint64_t *shape, float *data,
                  int own) {
    GPT_CHECK(t->n < MAX_T);
    gp__st_entry *e = &t->e[t->n];
    memset(e, 0, sizeof *e);
    snprintf(t->names[t->n], sizeof t->names[t->n], "%s", name);
    e->name = t->names[t->n];
    e->dtype = GP__ST_F32;
    e->rank = rank;
    for (int i = 0; i < rank; i++)
        e->shape[i] = shape[i];
    e->data = data;
    t->n++;
    if (own) t->owned[t->n_owned++] = data;
}

static float *t_rand(tset *t, const char *name, int rank, const uint64_t *shape, double lo,
                     double hi) {
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)shape[i];
    float *v = malloc(n * sizeof *v);
    GPT_CHECK(v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(lo + (hi - lo) * gpt_uniform(&rng));
    if (name) t_put(t, name, rank, shape, v, 1);
    return v;
}

static void t_free(tset *t) {
    for (int i = 0; i < t->n_owned; i++)
        free(t->owned[i]);
    t->n = t->n_owned = 0;
}

/* A linear layer `name` [out][in] (PyTorch's default range, times `gain`). */
static void t_linear(tset *t, const char *name, uint64_t out, uint64_t in, double gain) {
    char w[96], b[96];
    double r = gain / sqrt((double)in);
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(b, sizeof b, "%s.bias", name);
    t_rand(t, w, 2, (uint64_t[]){out, in}, -r, r);
    t_rand(t, b, 1, (uint64_t[]){out}, -r, r);
}

static void t_layernorm(tset *t, const char *name, uint64_t c) {
    char w[96], b[96];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(b, sizeof b, "%s.bias", name);
    t_rand(t, w, 1, (uint64_t[]){c}, 0.5, 1.5);
    t_rand(t, b, 1, (uint64_t[]){c}, -0.5, 0.5);
}

#define POSITIONS 512

/* Word, position and token-type tables under the BERT names (a file with nn.Embedding's
   NAME.weight too is refused as ambiguous). */
static void t_embedding(tset *t, const char *name, uint64_t vocab, uint64_t c) {
    char s[96];
    snprintf(s, sizeof s, "%s.word_embeddings.weight", name);
    t_rand(t, s, 2, (uint64_t[]){vocab, c}, -1.0, 1.0);
    snprintf(s, sizeof s, "%s.position_embeddings.weight", name);
    t_rand(t, s, 2, (uint64_t[]){POSITIONS, c}, -0.5, 0.5);
    snprintf(s, sizeof s, "%s.token_type_embeddings.weight", name);
    t_rand(t, s, 2, (uint64_t[]){2, c}, -0.2, 0.2);
}

/* Self-attention `name` of c features: BertSelfAttention + BertSelfOutput.dense names
   (name.self.{query,key,value}, name.output.dense) and nn.MultiheadAttention's
   (name.in_proj_weight / in_proj_bias stacked q, k, v; name.out_proj). The q and k weights
   are 3x PyTorch's default range, so the scores are not all near zero. */
static void t_attention(tset *t, const char *name, uint64_t c) {
    const char *part[3] = {"query", "key", "value"};
    double r = 1.0 / sqrt((double)c), gain[3] = {3.0, 3.0, 1.0};
    float *w = malloc(3 * c * c * sizeof *w), *b = malloc(3 * c * sizeof *b);
    GPT_CHECK(w && b);
    char s[96];
    for (int p = 0; p < 3; p++) {
        for (size_t i = 0; i < c * c; i++)
            w[p * c * c + i] = (float)(gain[p] * r * (2.0 * gpt_uniform(&rng) - 1.0));
        for (size_t i = 0; i < c; i++)
            b[p * c + i] = (float)(r * (2.0 * gpt_uniform(&rng) - 1.0));
        snprintf(s, sizeof s, "%s.self.%s.weight", name, part[p]);
        t_put(t, s, 2, (uint64_t[]){c, c}, w + p * c * c, 0);
        snprintf(s, sizeof s, "%s.self.%s.bias", name, part[p]);
        t_put(t, s, 1, (uint64_t[]){c}, b + p * c, 0);
    }
    snprintf(s, sizeof s, "%s.in_proj_weight", name);
    t_put(t, s, 2, (uint64_t[]){3 * c, c}, w, 1);
    snprintf(s, sizeof s, "%s.in_proj_bias", name);
    t_put(t, s, 1, (uint64_t[]){3 * c}, b, 1);
    snprintf(s, sizeof s, "%s.output.dense.weight", name);
    float *wo = t_rand(t, s, 2, (uint64_t[]){c, c}, -r, r);
    snprintf(s, sizeof s, "%s.output.dense.bias", name);
    float *bo = t_rand(t, s, 1, (uint64_t[]){c}, -r, r);
    snprintf(s, sizeof s, "%s.out_proj.weight", name);
    t_put(t, s, 2, (uint64_t[]){c, c}, wo, 0);
    snprintf(s, sizeof s, "%s.out_proj.bias", name);
    t_put(t, s, 1, (uint64_t[]){c}, bo, 0);
}

/* ---- the cases ------------------------------------------------------------------------------- */

#define VOCAB 97

typedef struct enc_case {
    const char *label;
    const char *spec; /* printf format: %d is the heads (where used) */
    int c, heads, ff;
    gp_dtype ids; /* GP_DTYPE_I32 / I64, or F32: f32 tokens of c features */
} enc_case;

/* A post-LN BERT layer (BertModel: embeddings + LayerNorm, then attention, add, LayerNorm,
   gelu MLP, add, LayerNorm). */
#define BERT_LAYER                                                                                 \
    "embedding emb\n"                                                                              \
    "layernorm ln0 eps=1e-12\n"                                                                    \
    "save x\n"                                                                                     \
    "attention att heads=%d\n"                                                                     \
    "add x\n"                                                                                      \
    "layernorm ln1 eps=1e-12\n"                                                                    \
    "save y\n"                                                                                     \
    "linear ff1\n"                                                                                 \
    "gelu\n"                                                                                       \
    "linear ff2\n"                                                                                 \
    "add y\n"                                                                                      \
    "layernorm ln2 eps=1e-12\n"

static const enc_case cases[] = {
    {"bert layer d=64, [CLS], l2norm", "input i64 *\n" BERT_LAYER "pool cls\nl2norm\n", 128, 2, 256,
     GP_DTYPE_I64},
    {"bert layer d=32, mean pool, l2norm", "input i32 *\n" BERT_LAYER "globalavgpool\nl2norm\n", 64,
     2, 128, GP_DTYPE_I32},
    {"attention d=128, mean pool",
     "input i32 *\nembedding emb\nlayernorm ln0 eps=1e-12\nattention att heads=%d\nglobalavgpool\n",
     256, 2, 0, GP_DTYPE_I32},
    {"attention d=40 (padded tiles), mean pool",
     "input i32 *\nembedding emb\nlayernorm ln0 eps=1e-12\nattention att heads=%d\nglobalavgpool\n",
     80, 2, 0, GP_DTYPE_I32},
    {"attention d=20 (simt kernel), mean pool",
     "input i64 *\nembedding emb\nlayernorm ln0 eps=1e-12\nattention att heads=%d\nglobalavgpool\n",
     40, 2, 0, GP_DTYPE_I64},
    {"embedding, mean pool", "input i32 *\nembedding emb\nglobalavgpool\n", 48, 1, 0, GP_DTYPE_I32},
    {"embedding, [CLS]", "input i64 *\nembedding emb\npool cls\n", 48, 1, 0, GP_DTYPE_I64},
    {"f32 tokens: layernorm, mean pool, l2norm",
     "input f32 *x48\nlayernorm ln0 eps=1e-5\nglobalavgpool\nl2norm\n", 48, 1, 0, GP_DTYPE_F32},
};

static void add_tensors(tset *t, const enc_case *ec) {
    uint64_t c = (uint64_t)ec->c;
    t_embedding(t, "emb", VOCAB, c);
    t_layernorm(t, "ln0", c);
    t_attention(t, "att", c);
    t_layernorm(t, "ln1", c);
    t_layernorm(t, "ln2", c);
    if (ec->ff) {
        t_linear(t, "ff1", (uint64_t)ec->ff, c, 1.0);
        t_linear(t, "ff2", c, (uint64_t)ec->ff, 1.0);
    }
}

/* ---- running ----------------------------------------------------------------------------------
 */

/* The builder in this tree may not know the encoder ops yet: that, and only that, skips. A
   builder that lists attention among its ops but refuses one of these specs (another keyword
   or option spelling) fails the test instead, so a mismatch cannot hide as a skip. */
static int builder_lacks_encoders(int rc, const char *err) {
    if (rc != GP_EMODEL) return 0;
    const char *ops = strstr(err, "(ops:");
    if (strstr(err, "unknown op") && ops && !strstr(ops, "attention")) return 1;
    return strstr(err, "which this build lacks") != NULL;
}

static gp_model *load(const void *img, size_t len, const char *spec, gp_precision prec) {
    gp_model_options o;
    gp_model_options_init(&o);
    o.spec_text = spec;
    o.precision = prec;
    gp_model *m = NULL;
    char err[512] = "";
    int rc = gp_model_load_memory(img, len, &o, &m, err, sizeof err);
    if (builder_lacks_encoders(rc, err)) {
        printf("SKIP: the model builder in this tree does not build the encoder ops yet "
               "(gp_model_load_memory: %s: %s)\n",
               gp_err_name(rc), err);
        exit(GPT_SKIP);
    }
    if (rc != GP_OK) {
        fprintf(stderr, "gp_model_load_memory: %s: %s\nspec:\n%s\n", gp_err_name(rc), err, spec);
        exit(1);
    }
    return m;
}

typedef struct result {
    float *out;
    size_t bytes;
    _Atomic int status, calls;
} result;

static void done(void *user, int status, const void *output, size_t bytes) {
    result *r = user;
    if (status == GP_OK && output && bytes == r->bytes) memcpy(r->out, output, bytes);
    atomic_store(&r->status, status);
    atomic_fetch_add(&r->calls, 1);
}

static _Atomic size_t largest_batch;
static void on_batch(void *user, const gp_batch_trace *t) {
    (void)user;
    size_t cur = atomic_load(&largest_batch);
    while (t->n > cur && !atomic_compare_exchange_weak(&largest_batch, &cur, t->n)) {
    }
}

/* n items of lens[k] tokens (in: packed, off: byte offsets) through a pipeline on `backend`. */
static void run_pipeline(gp_model *m, const char *label, size_t n, const unsigned char *in,
                         const uint64_t *off, float *out, int one_batch) {
    gp_config cfg;
    gp_config_init(&cfg);
    GPT_RC(gp_model_configure(m, &cfg), GP_OK);
    cfg.backend = backend;
    cfg.max_batch = one_batch ? n : 4;
    cfg.max_delay_us = one_batch ? 5000000 : 0; /* round 1: the batch closes when full */
    cfg.inflight = 2;
    cfg.on_batch = on_batch;
    atomic_store(&largest_batch, 0);
    gp_pipeline *p = NULL;
    char err[512] = "";
    int rc = gp_pipeline_create(&cfg, &p, err, sizeof err);
    if (rc == GP_ENODEV) {
        printf("SKIP: no usable CUDA device: %s\n", err);
        exit(gpt_no_device());
    }
    if (rc != GP_OK) {
        char merr[512] = "";
        gp_model_last_error(m, merr, sizeof merr);
        fprintf(stderr, "%s: gp_pipeline_create: %s: %s\n  model: %s\n", label, gp_err_name(rc),
                err, merr);
        exit(1);
    }
    size_t ob = gp_model_output_bytes(m);
    result *r = calloc(n, sizeof *r);
    GPT_CHECK(r);
    for (size_t k = 0; k < n; k++) {
        r[k].out = out + k * (ob / sizeof(float));
        r[k].bytes = ob;
        GPT_RC(gp_pipeline_submit(p, in + off[k], off[k + 1] - off[k], done, &r[k]), GP_OK);
    }
    GPT_RC(gp_pipeline_drain(p, 120 * 1000000LL), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    for (size_t k = 0; k < n; k++) {
        if (atomic_load(&r[k].calls) != 1 || atomic_load(&r[k].status) != GP_OK) {
            char merr[512] = "";
            gp_model_last_error(m, merr, sizeof merr);
            fprintf(stderr, "%s: item %zu: %d callbacks, status %s\n  model: %s\n", label, k,
                    atomic_load(&r[k].calls), gp_err_name(atomic_load(&r[k].status)), merr);
            exit(1);
        }
    }
    if (one_batch && atomic_load(&largest_batch) != n) {
        fprintf(stderr, "%s: the %zu items did not run as one batch (largest %zu)\n", label, n,
                atomic_load(&largest_batch));
        failures++;
    }
    free(r);
}

static void compare(const enc_case *ec, const void *img, size_t len, gp_precision prec,
                    const size_t *lens, size_t n, int one_batch) {
    char spec[1024], label[160];
    snprintf(spec, sizeof spec, ec->spec, ec->heads);
    snprintf(label, sizeof label, "%s, %s", ec->label, one_batch ? "one batch" : "24 items");
    gp_model *m = load(img, len, spec, prec);
    size_t tb = ec->ids == GP_DTYPE_I64 ? 8 : ec->ids == GP_DTYPE_I32 ? 4 : 4 * (size_t)ec->c;
    uint64_t *off = malloc((n + 1) * sizeof *off);
    GPT_CHECK(off);
    off[0] = 0;
    for (size_t k = 0; k < n; k++)
        off[k + 1] = off[k] + lens[k] * tb;
    unsigned char *in = malloc(off[n]);
    GPT_CHECK(in);
    size_t T = off[n] / tb;
    for (size_t i = 0; i < T; i++) {
        if (ec->ids == GP_DTYPE_F32) {
            for (int f = 0; f < ec->c; f++) {
                float v = (float)(2.0 + 2.0 * gpt_uniform(&rng) - 1.0);
                memcpy(in + i * tb + 4 * (size_t)f, &v, 4);
            }
        } else {
            int64_t id = (int64_t)(gpt_uniform(&rng) * VOCAB);
            if (ec->ids == GP_DTYPE_I64)
                memcpy(in + i * tb, &id, 8);
            else {
                int32_t id32 = (int32_t)id;
                memcpy(in + i * tb, &id32, 4);
            }
        }
    }
    size_t ob = gp_model_output_bytes(m), nf = n * ob / sizeof(float);
    float *ref = malloc(n * ob), *got = malloc(n * ob);
    GPT_CHECK(ref && got);
    memset(got, 0xff, n * ob);
    char err[512] = "";
    int rc = gp_model_run_host_packed(m, n, in, off, ref, err, sizeof err);
    if (rc != GP_OK) {
        fprintf(stderr, "%s: gp_model_run_host_packed: %s: %s\n", label, gp_err_name(rc), err);
        exit(1);
    }
    run_pipeline(m, label, n, in, off, got, one_batch);
    double scale = 1e-6, worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < nf; i++)
        scale = fmax(scale, fabs((double)ref[i]));
    for (size_t i = 0; i < nf; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!(d <= worst)) {
            worst = isnan(d) ? INFINITY : d;
            at = i;
        }
    }
    double rel = worst / scale, tol = tol_of(prec);
    int ok = rel <= tol;
    printf("%-4s %-60s rel err %.3g (tol %.0e)%s\n", gp_precision_name(prec), label, rel, tol,
           ok ? "" : "  FAIL");
    if (!ok) {
        fprintf(stderr, "  worst at %zu (item %zu): got %.9g, host %.9g\n", at, at / (nf / n),
                (double)got[at], (double)ref[at]);
        failures++;
    }
    free(off);
    free(in);
    free(ref);
    free(got);
    gp_model_free(m);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "host") == 0) backend = GP_BACKEND_HOST;
    static const size_t round1[] = {1, 2, 7, 63, 64, 65, 511, 512};
    size_t round2[24];
    for (size_t k = 0; k < 24; k++)
        round2[k] = 1 + (size_t)(gpt_uniform(&rng) * 512);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        tset t = {0};
        add_tensors(&t, &cases[ci]);
        void *img = NULL;
        size_t len = 0;
        char err[256] = "";
        int rc = gp__st_build(t.e, (size_t)t.n, NULL, &img, &len, &(gp__err){err, sizeof err});
        if (rc != GP_OK) {
            fprintf(stderr, "gp__st_build: %s: %s\n", gp_err_name(rc), err);
            return 1;
        }
        for (size_t p = 0; p < sizeof all_prec / sizeof all_prec[0]; p++) {
            compare(&cases[ci], img, len, all_prec[p], round1, 8, 1);
            compare(&cases[ci], img, len, all_prec[p], round2, 24, 0);
        }
        free(img);
        t_free(&t);
    }
    if (failures) {
        fprintf(stderr, "%d comparison(s) failed\n", failures);
        return 1;
    }
    printf("all comparisons within tolerance\n");
    return 0;
}
