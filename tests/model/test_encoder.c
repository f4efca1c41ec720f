/*
 * Transformer encoder layers on the host (model_impl.h: EMBEDDING, LAYERNORM, ATTENTION,
 * POOL_CLS, pool mean, L2NORM) against a naive reference written here in double, straight from
 * the PyTorch definitions (nn.Embedding, nn.LayerNorm, BertSelfAttention / nn.MultiheadAttention,
 * F.normalize): relative error (max |diff| / max |ref|) <= 1e-5. Token values are checked token
 * by token (gp__host_run_tokens), on packed batches of sequences of 1, 2, 7, 63, 64, 65 tokens
 * and one at the token limit; each item attends only to itself, so a batch equals its items run
 * one at a time. Then the spec's and the loader's refusals, bad token ids, and the demo encoder.
 */
#include <gpupipe/model.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpt.h"
#include "model/host.h"
#include "mt.h"

#define TOL 1e-5

static const size_t LENS[] = {1, 2, 7, 63, 64, 65};
#define NLENS (sizeof LENS / sizeof LENS[0])

/* ---- helpers ------------------------------------------------------------------------------ */

static gp_model *load_opt(mt *t, const char *spec, size_t max_tokens, size_t max_batch_tokens,
                          char *err, size_t len, int *rc) {
    void *img;
    size_t n;
    gp__err e = {err, len};
    GPT_RC(gp__st_build(t->e, (size_t)t->n, spec, &img, &n, &e), GP_OK);
    gp_model_options o;
    gp_model_options_init(&o);
    if (max_tokens) o.max_tokens = max_tokens;
    o.max_batch_tokens = max_batch_tokens;
    gp_model *m = NULL;
    *rc = gp_model_load_memory(img, n, &o, &m, err, len);
    free(img);
    return m;
}

static gp_model *load(mt *t, const char *spec, size_t max_tokens) {
    char err[512];
    int rc;
    gp_model *m = load_opt(t, spec, max_tokens, 0, err, sizeof err, &rc);
    if (rc != GP_OK) {
        fprintf(stderr, "load failed: %s\nspec:\n%s\n", err, spec);
        exit(1);
    }
    return m;
}

/* A batch of n items with the given lengths: byte offsets, token offsets. */
typedef struct batch {
    size_t n, tokens, tb; /* items, total tokens, bytes per token */
    size_t *tok;          /* n + 1 token offsets */
    uint64_t *off;        /* n + 1 byte offsets */
    void *in;
} batch;

static void batch_init(batch *b, const size_t *lens, size_t n, size_t tb) {
    b->n = n;
    b->tb = tb;
    b->tok = malloc((n + 1) * sizeof *b->tok);
    b->off = malloc((n + 1) * sizeof *b->off);
    GPT_CHECK(b->tok && b->off);
    b->tok[0] = 0;
    for (size_t k = 0; k < n; k++)
        b->tok[k + 1] = b->tok[k] + lens[k];
    b->tokens = b->tok[n];
    for (size_t k = 0; k <= n; k++)
        b->off[k] = b->tok[k] * tb;
    b->in = malloc(b->tokens * tb);
    GPT_CHECK(b->in);
}

static void batch_free(batch *b) {
    free(b->tok), free(b->off), free(b->in);
}

/* Random ids 0..vocab-1 stored as dtype. */
static void fill_ids(mt *t, batch *b, gp_dtype dt, int vocab) {
    for (size_t i = 0; i < b->tokens; i++) {
        int64_t id = (int64_t)(mt_uniform(t) * vocab);
        if (dt == GP_DTYPE_I64)
            memcpy((char *)b->in + 8 * i, &id, 8);
        else if (dt == GP_DTYPE_U32)
            ((uint32_t *)b->in)[i] = (uint32_t)id;
        else
            ((int32_t *)b->in)[i] = (int32_t)id;
    }
}

static int64_t get_id(const batch *b, gp_dtype dt, size_t i) {
    if (dt == GP_DTYPE_I64) {
        int64_t v;
        memcpy(&v, (const char *)b->in + 8 * i, 8);
        return v;
    }
    return dt == GP_DTYPE_U32 ? (int64_t)((const uint32_t *)b->in)[i]
                              : (int64_t)((const int32_t *)b->in)[i];
}

static float *tokens_of(gp_model *m, const batch *b, int op, size_t width) {
    float *y = malloc(b->tokens * width * sizeof *y);
    char err[256];
    gp__err e = {err, sizeof err};
    GPT_CHECK(y);
    int rc = gp__host_run_tokens(m, b->n, b->in, b->off, op, y, &e);
    if (rc != GP_OK) fprintf(stderr, "run_tokens: %s\n", err);
    GPT_RC(rc, GP_OK);
    return y;
}

static float *items_of(gp_model *m, const batch *b) {
    float *y = malloc(b->n * gp_model_output_bytes(m));
    char err[256];
    GPT_CHECK(y);
    int rc = gp_model_run_host_packed(m, b->n, b->in, b->off, y, err, sizeof err);
    if (rc != GP_OK) fprintf(stderr, "run_host_packed: %s\n", err);
    GPT_RC(rc, GP_OK);
    return y;
}

static void check_close(const char *what, const float *got, const double *ref, size_t n) {
    double e = mt_rel_err(got, ref, n);
    if (!(e <= TOL)) {
        fprintf(stderr, "%s: relative error %.3g > %g\n", what, e, TOL);
        exit(1);
    }
    printf("ok  %-66s rel err %.2g\n", what, e);
}

/* ---- references (double, one item at a time) ----------------------------------------------- */

static void ref_linear(const double *x, size_t L, size_t I, const float *w, const float *b,
                       size_t O, double *y) {
    for (size_t t = 0; t < L; t++)
        for (size_t o = 0; o < O; o++) {
            double s = b ? b[o] : 0.0;
            for (size_t i = 0; i < I; i++)
                s += (double)w[o * I + i] * x[t * I + i];
            y[t * O + o] = s;
        }
}

static void ref_layernorm(const double *x, size_t L, size_t C, const float *w, const float *b,
                          double eps, double *y) {
    for (size_t t = 0; t < L; t++) {
        double mean = 0, var = 0;
        for (size_t c = 0; c < C; c++)
            mean += x[t * C + c];
        mean /= (double)C;
        for (size_t c = 0; c < C; c++)
            var += (x[t * C + c] - mean) * (x[t * C + c] - mean);
        var /= (double)C;
        for (size_t c = 0; c < C; c++)
            y[t * C + c] = (x[t * C + c] - mean) / sqrt(var + eps) * w[c] + (b ? b[c] : 0.0);
    }
}

typedef struct attn_w {
    const float *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo; /* [C][C], [C]; biases may be NULL */
} attn_w;

/* Self-attention of one item's L tokens over themselves. */
static void ref_attention(const double *x, size_t L, size_t C, size_t H, const attn_w *a,
                          double *y) {
    size_t d = C / H;
    double *q = malloc(L * C * sizeof *q), *k = malloc(L * C * sizeof *k);
    double *v = malloc(L * C * sizeof *v), *ctx = malloc(L * C * sizeof *ctx);
    double *p = malloc(L * sizeof *p);
    GPT_CHECK(q && k && v && ctx && p);
    ref_linear(x, L, C, a->wq, a->bq, C, q);
    ref_linear(x, L, C, a->wk, a->bk, C, k);
    ref_linear(x, L, C, a->wv, a->bv, C, v);
    for (size_t h = 0; h < H; h++)
        for (size_t i = 0; i < L; i++) {
            double mx = -INFINITY, sum = 0;
            for (size_t j = 0; j < L; j++) {
                double s = 0;
                for (size_t e = 0; e < d; e++)
                    s += q[i * C + h * d + e] * k[j * C + h * d + e];
                p[j] = s / sqrt((double)d);
                mx = fmax(mx, p[j]);
            }
            for (size_t j = 0; j < L; j++)
                sum += (p[j] = exp(p[j] - mx));
            for (size_t e = 0; e < d; e++) {
                double o = 0;
                for (size_t j = 0; j < L; j++)
                    o += p[j] / sum * v[j * C + h * d + e];
                ctx[i * C + h * d + e] = o;
            }
        }
    ref_linear(ctx, L, C, a->wo, a->bo, C, y);
    free(q), free(k), free(v), free(ctx), free(p);
}

static double gelu(double x) {
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

static char names[256][64];
static int n_names;

static const char *nm(const char *fmt, int l) {
    GPT_CHECK(n_names < 256);
    snprintf(names[n_names], sizeof names[0], fmt, l);
    return names[n_names++];
}

static const char *nm2(const char *a, const char *b) {
    GPT_CHECK(n_names < 256);
    snprintf(names[n_names], sizeof names[0], "%s.%s", a, b);
    return names[n_names++];
}

/* ---- cases --------------------------------------------------------------------------------- */

/* Embedding, every naming and id dtype: word[id] + pos[position in the item] + type[0]. */
static void embedding_cases(void) {
    static const struct {
        const char *spec, *what;
        gp_dtype dt;
        int hf, pos, type;
    } cases[] = {
        {"input i32 *\nembedding emb\nlayernorm ln\npool cls\n",
         "embedding, BertEmbeddings naming, i32 ids", GP_DTYPE_I32, 1, 1, 1},
        {"input i64 *\nEmbedding tok position=pos token_type=typ\nlayernorm ln\npool cls\n",
         "Embedding (nn.Embedding) + position= + token_type=, i64 ids", GP_DTYPE_I64, 0, 1, 1},
        {"input u32 *\nembedding tok\nlayernorm ln\npool cls\n",
         "embedding, nn.Embedding alone (no position term), u32 ids", GP_DTYPE_U32, 0, 0, 0},
    };
    const int V = 1000, C = 48, P = 70, TY = 2;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        mt t = {.rng = 800 + ci};
        float *w, *p = NULL, *ty = NULL;
        if (cases[ci].hf) {
            w = mt_add(&t, "emb.word_embeddings.weight", 2, (uint64_t[]){V, C}, -1, 1);
            p = mt_add(&t, "emb.position_embeddings.weight", 2, (uint64_t[]){P, C}, -1, 1);
            ty = mt_add(&t, "emb.token_type_embeddings.weight", 2, (uint64_t[]){TY, C}, -1, 1);
        } else {
            w = mt_add(&t, "tok.weight", 2, (uint64_t[]){V, C}, -1, 1);
            if (cases[ci].pos) p = mt_add(&t, "pos.weight", 2, (uint64_t[]){P, C}, -1, 1);
            if (cases[ci].type) ty = mt_add(&t, "typ.weight", 2, (uint64_t[]){TY, C}, -1, 1);
        }
        mt_add(&t, "ln.weight", 1, (uint64_t[]){C}, 0.5, 1.5);
        mt_add(&t, "ln.bias", 1, (uint64_t[]){C}, -0.5, 0.5);
        gp_model *m = load(&t, cases[ci].spec, 0);
        /* The position table (70 rows) is the token limit, not options.max_tokens (512). */
        size_t limit = cases[ci].pos ? (size_t)P : 512;
        gp_tensor_info ii;
        GPT_RC(gp_model_input_info(m, &ii), GP_OK);
        GPT_EQ(ii.dtype, cases[ci].dt);
        GPT_EQ(ii.dims[0], -1);
        GPT_EQ(ii.bytes, gp_dtype_size(cases[ci].dt));
        GPT_EQ(gp_model_input_bytes(m), limit * gp_dtype_size(cases[ci].dt));
        GPT_EQ(gp_model_vocab(m), V);
        size_t lens[NLENS + 1];
        memcpy(lens, LENS, sizeof LENS);
        lens[NLENS] = limit; /* the budget edge: an item of exactly the limit */
        batch b;
        batch_init(&b, lens, NLENS + 1, gp_dtype_size(cases[ci].dt));
        fill_ids(&t, &b, cases[ci].dt, V);
        float *y = tokens_of(m, &b, 0, C);
        double *ref = malloc(b.tokens * C * sizeof *ref);
        for (size_t k = 0; k < b.n; k++)
            for (size_t i = b.tok[k]; i < b.tok[k + 1]; i++) {
                int64_t id = get_id(&b, cases[ci].dt, i);
                for (int c = 0; c < C; c++)
                    ref[i * C + (size_t)c] = (double)w[id * C + c] +
                                             (p ? p[(i - b.tok[k]) * C + (size_t)c] : 0.0) +
                                             (ty ? ty[c] : 0.0);
            }
        check_close(cases[ci].what, y, ref, b.tokens * C);
        /* One token more than the limit is refused, naming it. */
        size_t over[1] = {limit + 1};
        batch o;
        batch_init(&o, over, 1, b.tb);
        memset(o.in, 0, o.tokens * o.tb);
        char err[256];
        float out[48];
        GPT_RC(gp_model_run_host_packed(m, 1, o.in, o.off, out, err, sizeof err), GP_EINVAL);
        char want[128];
        snprintf(want, sizeof want, "not 1..%zu whole tokens", limit);
        GPT_CHECK(strstr(err, want) != NULL);
        /* Offsets that decrease: named as such, not as an item of 2^64 - k bytes. */
        uint64_t back[3] = {0, 2 * b.tb, b.tb};
        GPT_RC(gp_model_run_host_packed(m, 2, o.in, back, out, err, sizeof err), GP_EINVAL);
        snprintf(want, sizeof want, "item 1's offsets decrease: %zu, then %zu", 2 * b.tb, b.tb);
        if (!strstr(err, want)) fprintf(stderr, "decreasing offsets: '%s'\n", err);
        GPT_CHECK(strstr(err, want) != NULL);
        /* describe says which limit holds */
        char *text = mt_describe(m);
        GPT_CHECK(strstr(text, cases[ci].pos ? "the position embeddings' rows"
                                             : "the limit: options.max_tokens") != NULL);
        free(text);
        /* options.max_batch_tokens is held to the model's own limit: one item's worth (the
           position table's rows, when shorter than options.max_tokens) is enough, one token
           less is refused, naming the limit. */
        int lrc;
        gp_model *mb = load_opt(&t, cases[ci].spec, 0, limit, err, sizeof err, &lrc);
        GPT_RC(lrc, GP_OK);
        gp_config cfg;
        gp_config_init(&cfg);
        GPT_RC(gp_model_configure(mb, &cfg), GP_OK);
        GPT_EQ(cfg.max_batch_bytes, limit * b.tb);
        GPT_EQ(cfg.max_item_in_bytes, limit * b.tb);
        gp_model_free(mb);
        GPT_CHECK(load_opt(&t, cases[ci].spec, 0, limit - 1, err, sizeof err, &lrc) == NULL);
        GPT_RC(lrc, GP_EINVAL);
        snprintf(want, sizeof want, "below the %zu tokens one item may have (%s)", limit,
                 cases[ci].pos ? "the position embeddings' rows" : "options.max_tokens");
        GPT_CHECK(strstr(err, want) != NULL);
        /* ... and to size_t: a count whose bytes wrap was configured as the wrapped budget (2^62
           + 600 tokens of 4 bytes: 2400 bytes, 600 tokens, accepted at create). */
        size_t wraps[] = {SIZE_MAX / b.tb + 1, ((size_t)1 << 62) + 600, SIZE_MAX};
        for (int k = 0; k < 3; k++) {
            GPT_CHECK(load_opt(&t, cases[ci].spec, 0, wraps[k], err, sizeof err, &lrc) == NULL);
            GPT_RC(lrc, GP_EINVAL);
            if (!strstr(err, "overflows size_t")) fprintf(stderr, "wrapping budget: '%s'\n", err);
            GPT_CHECK(strstr(err, "overflows size_t") != NULL);
        }
        mb = load_opt(&t, cases[ci].spec, 0, SIZE_MAX / b.tb, err, sizeof err, &lrc);
        GPT_RC(lrc, GP_OK); /* no wrap: over max_batch_bytes' 1 GiB, refused at create */
        gp_model_free(mb);
        batch_free(&o);
        free(y), free(ref);
        batch_free(&b);
        gp_model_free(m);
        mt_free(&t);
    }
}

/* Two embeddings of the same ids: an id must fit both, so the vocabulary is the smaller
   table's, in gp_model_vocab and in describe alike; an id between the two fails its item. */
static void two_embeddings(void) {
    mt t = {.rng = 77};
    mt_add(&t, "a.weight", 2, (uint64_t[]){30, 8}, -1, 1);
    mt_add(&t, "b.weight", 2, (uint64_t[]){20, 8}, -1, 1);
    gp_model *m = load(&t,
                       "input i32 *\nsave ids\nembedding a\nsave A\nrestore ids\nembedding b\n"
                       "add A\npool mean\n",
                       0);
    GPT_EQ(gp_model_vocab(m), 20);
    char *text = mt_describe(m);
    GPT_CHECK(strstr(text, "ids 0..19\n") != NULL);
    free(text);
    int32_t ids[2] = {3, 25};
    uint64_t off[2] = {0, sizeof ids};
    float out[8];
    char err[256];
    GPT_RC(gp_model_run_host_packed(m, 1, ids, off, out, err, sizeof err), GP_EINVAL);
    GPT_CHECK(strstr(err, "outside the vocabulary 0..19 of embedding 'b'") != NULL);
    gp_model_free(m);
    mt_free(&t);
    printf("ok  two embeddings: vocabulary 20 (the smaller)\n");
}

/* LayerNorm token by token (and on a per-item value), inputs far from zero. */
static void layernorm_cases(void) {
    const int C = 40;
    const double eps[] = {1e-5, 1e-12};
    const char *specs[] = {"input f32 *x40\nlayernorm ln\nlayernorm ln2\npool mean\n",
                           "input f32 *x40\nLayerNorm ln eps=1e-12\nlayernorm ln2\npool mean\n"};
    for (int ci = 0; ci < 2; ci++) {
        mt t = {.rng = 900 + (uint64_t)ci};
        float *w = mt_add(&t, "ln.weight", 1, (uint64_t[]){C}, 0.5, 1.5);
        float *bb = ci ? NULL : mt_add(&t, "ln.bias", 1, (uint64_t[]){C}, -1, 1);
        mt_add(&t, "ln2.weight", 1, (uint64_t[]){C}, 0.5, 1.5);
        gp_model *m = load(&t, specs[ci], 0);
        GPT_EQ(gp_model_vocab(m), 0); /* f32 tokens: no vocabulary */
        GPT_EQ(gp_model_vocab(NULL), 0);
        batch b;
        batch_init(&b, LENS, NLENS, C * sizeof(float));
        float *x = b.in;
        for (size_t i = 0; i < b.tokens * C; i++)
            x[i] = (float)(100.0 + 3.0 * (mt_uniform(&t) - 0.5)); /* mean ~100, spread ~1 */
        float *y = tokens_of(m, &b, 0, C);
        double *xd = malloc(b.tokens * C * sizeof *xd), *ref = malloc(b.tokens * C * sizeof *ref);
        for (size_t i = 0; i < b.tokens * C; i++)
            xd[i] = x[i];
        ref_layernorm(xd, b.tokens, C, w, bb, eps[ci], ref);
        check_close(ci ? "LayerNorm eps=1e-12, no bias (inputs near 100)"
                       : "layernorm eps=1e-5 (inputs near 100)",
                    y, ref, b.tokens * C);
        free(y), free(xd), free(ref);
        batch_free(&b);
        gp_model_free(m);
        mt_free(&t);
    }
    /* On a per-item (rank-1) value. */
    mt t = {.rng = 910};
    float *w = mt_add(&t, "ln.weight", 1, (uint64_t[]){C}, 0.5, 1.5);
    float *bb = mt_add(&t, "ln.bias", 1, (uint64_t[]){C}, -1, 1);
    gp_model *m = load(&t, "input f32 40\nlayernorm ln\n", 0);
    float *x = mt_rand(&t, 5 * C, -3, 3), y[5 * 40];
    char err[256];
    GPT_RC(gp_model_run_host(m, 5, x, y, err, sizeof err), GP_OK);
    double xd[5 * 40], ref[5 * 40];
    for (int i = 0; i < 5 * C; i++)
        xd[i] = x[i];
    ref_layernorm(xd, 5, C, w, bb, 1e-5, ref);
    check_close("layernorm on per-item features", y, ref, 5 * C);
    free(x);
    gp_model_free(m);
    mt_free(&t);
}

/* Attention on f32 tokens: the three namings, several head sizes, every length. */
static void attention_cases(void) {
    static const struct {
        int C, H, scheme; /* 0 BertAttention, 1 nn.MultiheadAttention, 2 q=/k=/v=/out= */
        int bias;
    } cases[] = {
        {32, 4, 0, 1}, {32, 1, 1, 1}, {48, 3, 2, 0}, {128, 2, 0, 1}, {24, 6, 1, 0},
    };
    const size_t limit = 130;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int C = cases[ci].C, H = cases[ci].H;
        uint64_t c = (uint64_t)C;
        mt t = {.rng = 1000 + ci};
        double s = 1.0 / sqrt((double)C);
        attn_w a = {0};
        char spec[256];
        const char *naming;
        if (cases[ci].scheme == 1) {
            float *w = mt_add(&t, "att.in_proj_weight", 2, (uint64_t[]){3 * c, c}, -s, s);
            float *b = cases[ci].bias
                           ? mt_add(&t, "att.in_proj_bias", 1, (uint64_t[]){3 * c}, -0.5, 0.5)
                           : NULL;
            a.wq = w, a.wk = w + C * C, a.wv = w + 2 * C * C;
            if (b) a.bq = b, a.bk = b + C, a.bv = b + 2 * C;
            a.wo = mt_add(&t, "att.out_proj.weight", 2, (uint64_t[]){c, c}, -s, s);
            if (cases[ci].bias)
                a.bo = mt_add(&t, "att.out_proj.bias", 1, (uint64_t[]){c}, -0.5, 0.5);
            snprintf(spec, sizeof spec, "input f32 *x%d\nMultiheadAttention att num_heads=%d\n", C,
                     H);
            naming = "nn.MultiheadAttention";
        } else {
            static const char *const hf[] = {"att.self.query", "att.self.key", "att.self.value",
                                             "att.output.dense"};
            static const char *const own[] = {"att.q_lin", "att.k_lin", "att.v_lin", "att.o"};
            const char *const *pn = cases[ci].scheme == 0 ? hf : own;
            const float **ws[4] = {&a.wq, &a.wk, &a.wv, &a.wo};
            const float **bs[4] = {&a.bq, &a.bk, &a.bv, &a.bo};
            n_names = 0;
            for (int k = 0; k < 4; k++) {
                *ws[k] = mt_add(&t, nm2(pn[k], "weight"), 2, (uint64_t[]){c, c}, -s, s);
                if (cases[ci].bias)
                    *bs[k] = mt_add(&t, nm2(pn[k], "bias"), 1, (uint64_t[]){c}, -0.5, 0.5);
            }
            if (cases[ci].scheme == 0) {
                snprintf(spec, sizeof spec, "input f32 *x%d\nattention att heads=%d\n", C, H);
                naming = "BertAttention";
            } else {
                snprintf(spec, sizeof spec,
                         "input f32 *x%d\nattention att heads=%d q=q_lin k=k_lin v=v_lin out=o\n",
                         C, H);
                naming = "q= k= v= out= Linear layers";
            }
        }
        strcat(spec, "pool mean\n");
        gp_model *m = load(&t, spec, limit);
        size_t lens[NLENS + 1];
        memcpy(lens, LENS, sizeof LENS);
        lens[NLENS] = limit;
        batch b;
        batch_init(&b, lens, NLENS + 1, (size_t)C * sizeof(float));
        float *x = b.in;
        for (size_t i = 0; i < b.tokens * c; i++)
            x[i] = (float)(4.0 * (mt_uniform(&t) - 0.5));
        float *y = tokens_of(m, &b, 0, c);
        double *ref = malloc(b.tokens * c * sizeof *ref);
        for (size_t k = 0; k < b.n; k++) {
            size_t L = lens[k];
            double *xd = malloc(L * c * sizeof *xd);
            for (size_t i = 0; i < L * c; i++)
                xd[i] = x[b.tok[k] * c + i];
            ref_attention(xd, L, c, (size_t)H, &a, ref + b.tok[k] * c);
            free(xd);
        }
        char what[160];
        snprintf(what, sizeof what, "attention %s, c=%d heads=%d%s, 1..%zu tokens", naming, C, H,
                 cases[ci].bias ? "" : " (no biases)", limit);
        check_close(what, y, ref, b.tokens * c);
        /* Packed == one item at a time, bitwise: no item sees another. */
        for (size_t k = 0; k < b.n; k++) {
            batch one;
            batch_init(&one, &lens[k], 1, b.tb);
            memcpy(one.in, (char *)b.in + b.off[k], b.off[k + 1] - b.off[k]);
            float *yk = tokens_of(m, &one, 0, c);
            GPT_CHECK(memcmp(yk, y + b.tok[k] * c, lens[k] * c * sizeof *yk) == 0);
            free(yk);
            batch_free(&one);
        }
        free(y), free(ref);
        batch_free(&b);
        gp_model_free(m);
        mt_free(&t);
    }
    printf("ok  attention: packed batch == each item alone, bitwise\n");
}

/* Whole BERT-style encoders: post-LN (BertModel naming, cls pooling, l2norm) and pre-LN
   (nn.Embedding + nn.MultiheadAttention naming, final LayerNorm, mean pooling, l2norm). */
typedef struct enc_w {
    const float *word, *pos, *type, *lnew, *lneb;
    attn_w a[2];
    const float *ln1w[2], *ln1b[2], *w1[2], *b1[2], *w2[2], *b2[2], *ln2w[2], *ln2b[2];
    const float *fw, *fb; /* pre-LN: the final LayerNorm */
} enc_w;

enum { EC = 64, EH = 4, EF = 128, EV = 500, EP = 130, ELAYERS = 2 };

static void ref_encoder(const enc_w *w, int pre, int cls, const int32_t *ids, size_t L, double eps,
                        double *out) {
    size_t C = EC;
    double *x = malloc(L * C * sizeof *x), *h = malloc(L * C * sizeof *h);
    double *f = malloc(L * EF * sizeof *f), *n = malloc(L * C * sizeof *n);
    GPT_CHECK(x && h && f && n);
    for (size_t i = 0; i < L; i++)
        for (size_t c = 0; c < C; c++)
            x[i * C + c] = (double)w->word[ids[i] * EC + (int)c] + w->pos[i * C + c] +
                           (w->type ? w->type[c] : 0.0);
    if (!pre) ref_layernorm(x, L, C, w->lnew, w->lneb, eps, x);
    for (int l = 0; l < ELAYERS; l++) {
        /* attention sublayer */
        if (pre) ref_layernorm(x, L, C, w->ln1w[l], w->ln1b[l], eps, n);
        ref_attention(pre ? n : x, L, C, EH, &w->a[l], h);
        for (size_t i = 0; i < L * C; i++)
            x[i] += h[i];
        if (!pre) ref_layernorm(x, L, C, w->ln1w[l], w->ln1b[l], eps, x);
        /* feed-forward sublayer */
        if (pre) ref_layernorm(x, L, C, w->ln2w[l], w->ln2b[l], eps, n);
        ref_linear(pre ? n : x, L, C, w->w1[l], w->b1[l], EF, f);
        for (size_t i = 0; i < L * EF; i++)
            f[i] = gelu(f[i]);
        ref_linear(f, L, EF, w->w2[l], w->b2[l], C, h);
        for (size_t i = 0; i < L * C; i++)
            x[i] += h[i];
        if (!pre) ref_layernorm(x, L, C, w->ln2w[l], w->ln2b[l], eps, x);
    }
    if (pre) ref_layernorm(x, L, C, w->fw, w->fb, eps, x);
    double ss = 0;
    for (size_t c = 0; c < C; c++) {
        double v = 0;
        if (cls)
            v = x[c];
        else {
            for (size_t i = 0; i < L; i++)
                v += x[i * C + c];
            v /= (double)L;
        }
        out[c] = v;
        ss += v * v;
    }
    for (size_t c = 0; c < C; c++)
        out[c] /= fmax(sqrt(ss), 1e-12);
    free(x), free(h), free(f), free(n);
}

static void encoder_cases(void) {
    for (int pre = 0; pre < 2; pre++) {
        mt t = {.rng = 1100 + (uint64_t)pre};
        enc_w w = {0};
        const double s = 1.0 / sqrt((double)EC), sf = 1.0 / sqrt((double)EF);
        const uint64_t c = EC;
        char spec[4096];
        size_t o = 0;
        n_names = 0;
        if (!pre) {
            w.word = mt_add(&t, "embeddings.word_embeddings.weight", 2, (uint64_t[]){EV, c}, -1, 1);
            w.pos =
                mt_add(&t, "embeddings.position_embeddings.weight", 2, (uint64_t[]){EP, c}, -1, 1);
            w.type =
                mt_add(&t, "embeddings.token_type_embeddings.weight", 2, (uint64_t[]){2, c}, -1, 1);
            w.lnew = mt_add(&t, "embeddings.LayerNorm.weight", 1, (uint64_t[]){c}, 0.8, 1.2);
            w.lneb = mt_add(&t, "embeddings.LayerNorm.bias", 1, (uint64_t[]){c}, -0.1, 0.1);
            o += (size_t)snprintf(spec + o, sizeof spec - o,
                                  "input i32 *\nembedding embeddings\n"
                                  "layernorm embeddings.LayerNorm eps=1e-12\n");
        } else {
            w.word = mt_add(&t, "tok.weight", 2, (uint64_t[]){EV, c}, -1, 1);
            w.pos = mt_add(&t, "pos.weight", 2, (uint64_t[]){EP, c}, -1, 1);
            o += (size_t)snprintf(spec + o, sizeof spec - o,
                                  "input i32 *\nembedding tok position=pos\n");
        }
        for (int l = 0; l < ELAYERS; l++) {
            attn_w *a = &w.a[l];
            if (!pre) {
                const float **ws[4] = {&a->wq, &a->wk, &a->wv, &a->wo};
                const float **bs[4] = {&a->bq, &a->bk, &a->bv, &a->bo};
                static const char *const pn[4] = {"self.query", "self.key", "self.value",
                                                  "output.dense"};
                for (int k = 0; k < 4; k++) {
                    char f1[64], f2[64];
                    snprintf(f1, sizeof f1, "encoder.layer.%%d.attention.%s.weight", pn[k]);
                    snprintf(f2, sizeof f2, "encoder.layer.%%d.attention.%s.bias", pn[k]);
                    *ws[k] = mt_add(&t, nm(f1, l), 2, (uint64_t[]){c, c}, -s, s);
                    *bs[k] = mt_add(&t, nm(f2, l), 1, (uint64_t[]){c}, -0.1, 0.1);
                }
                w.ln1w[l] = mt_add(&t, nm("encoder.layer.%d.attention.output.LayerNorm.weight", l),
                                   1, (uint64_t[]){c}, 0.8, 1.2);
                w.ln1b[l] = mt_add(&t, nm("encoder.layer.%d.attention.output.LayerNorm.bias", l), 1,
                                   (uint64_t[]){c}, -0.1, 0.1);
                w.w1[l] = mt_add(&t, nm("encoder.layer.%d.intermediate.dense.weight", l), 2,
                                 (uint64_t[]){EF, c}, -s, s);
                w.b1[l] = mt_add(&t, nm("encoder.layer.%d.intermediate.dense.bias", l), 1,
                                 (uint64_t[]){EF}, -s, s);
                w.w2[l] = mt_add(&t, nm("encoder.layer.%d.output.dense.weight", l), 2,
                                 (uint64_t[]){c, EF}, -sf, sf);
                w.b2[l] = mt_add(&t, nm("encoder.layer.%d.output.dense.bias", l), 1,
                                 (uint64_t[]){c}, -sf, sf);
                w.ln2w[l] = mt_add(&t, nm("encoder.layer.%d.output.LayerNorm.weight", l), 1,
                                   (uint64_t[]){c}, 0.8, 1.2);
                w.ln2b[l] = mt_add(&t, nm("encoder.layer.%d.output.LayerNorm.bias", l), 1,
                                   (uint64_t[]){c}, -0.1, 0.1);
                o += (size_t)snprintf(
                    spec + o, sizeof spec - o,
                    "save a%d\nattention encoder.layer.%d.attention heads=%d\nadd a%d\n"
                    "layernorm encoder.layer.%d.attention.output.LayerNorm eps=1e-12\nsave f%d\n"
                    "linear encoder.layer.%d.intermediate.dense\ngelu\n"
                    "linear encoder.layer.%d.output.dense\nadd f%d\n"
                    "layernorm encoder.layer.%d.output.LayerNorm eps=1e-12\n",
                    l, l, EH, l, l, l, l, l, l, l);
            } else {
                float *in = mt_add(&t, nm("layers.%d.attn.in_proj_weight", l), 2,
                                   (uint64_t[]){3 * c, c}, -s, s);
                float *ib = mt_add(&t, nm("layers.%d.attn.in_proj_bias", l), 1, (uint64_t[]){3 * c},
                                   -0.1, 0.1);
                a->wq = in, a->wk = in + EC * EC, a->wv = in + 2 * EC * EC;
                a->bq = ib, a->bk = ib + EC, a->bv = ib + 2 * EC;
                a->wo = mt_add(&t, nm("layers.%d.attn.out_proj.weight", l), 2, (uint64_t[]){c, c},
                               -s, s);
                a->bo = mt_add(&t, nm("layers.%d.attn.out_proj.bias", l), 1, (uint64_t[]){c}, -0.1,
                               0.1);
                w.ln1w[l] =
                    mt_add(&t, nm("layers.%d.norm1.weight", l), 1, (uint64_t[]){c}, 0.8, 1.2);
                w.ln1b[l] =
                    mt_add(&t, nm("layers.%d.norm1.bias", l), 1, (uint64_t[]){c}, -0.1, 0.1);
                w.w1[l] =
                    mt_add(&t, nm("layers.%d.linear1.weight", l), 2, (uint64_t[]){EF, c}, -s, s);
                w.b1[l] = mt_add(&t, nm("layers.%d.linear1.bias", l), 1, (uint64_t[]){EF}, -s, s);
                w.w2[l] =
                    mt_add(&t, nm("layers.%d.linear2.weight", l), 2, (uint64_t[]){c, EF}, -sf, sf);
                w.b2[l] = mt_add(&t, nm("layers.%d.linear2.bias", l), 1, (uint64_t[]){c}, -sf, sf);
                w.ln2w[l] =
                    mt_add(&t, nm("layers.%d.norm2.weight", l), 1, (uint64_t[]){c}, 0.8, 1.2);
                w.ln2b[l] =
                    mt_add(&t, nm("layers.%d.norm2.bias", l), 1, (uint64_t[]){c}, -0.1, 0.1);
                o += (size_t)snprintf(
                    spec + o, sizeof spec - o,
                    "save a%d\nlayernorm layers.%d.norm1 eps=1e-12\n"
                    "attention layers.%d.attn heads=%d\nadd a%d\nsave f%d\n"
                    "layernorm layers.%d.norm2 eps=1e-12\nlinear layers.%d.linear1\ngelu\n"
                    "linear layers.%d.linear2\nadd f%d\n",
                    l, l, l, EH, l, l, l, l, l, l);
            }
        }
        if (pre) {
            w.fw = mt_add(&t, "norm.weight", 1, (uint64_t[]){c}, 0.8, 1.2);
            w.fb = mt_add(&t, "norm.bias", 1, (uint64_t[]){c}, -0.1, 0.1);
            o += (size_t)snprintf(spec + o, sizeof spec - o, "layernorm norm eps=1e-12\n");
        }
        for (int cls = 0; cls < 2; cls++) {
            char full[4200];
            snprintf(full, sizeof full, "%s%s\nl2norm\n", spec, cls ? "pool cls" : "pool mean");
            gp_model *m = load(&t, full, 0);
            size_t lens[NLENS + 1];
            memcpy(lens, LENS, sizeof LENS);
            lens[NLENS] = EP; /* the position table's limit */
            batch b;
            batch_init(&b, lens, NLENS + 1, 4);
            fill_ids(&t, &b, GP_DTYPE_I32, EV);
            float *y = items_of(m, &b);
            double *ref = malloc(b.n * EC * sizeof *ref);
            for (size_t k = 0; k < b.n; k++)
                ref_encoder(&w, pre, cls, (const int32_t *)b.in + b.tok[k], lens[k], 1e-12,
                            ref + k * EC);
            char what[160];
            snprintf(what, sizeof what, "%s encoder, %d layers, %s pooling, l2norm",
                     pre ? "pre-LN (nn.MultiheadAttention naming)" : "post-LN (BertModel naming)",
                     ELAYERS, cls ? "cls" : "mean");
            check_close(what, y, ref, b.n * EC);
            for (size_t k = 0; k < b.n; k++) { /* unit length */
                double ss = 0;
                for (int i = 0; i < EC; i++)
                    ss += (double)y[k * EC + (size_t)i] * y[k * EC + (size_t)i];
                GPT_CHECK(fabs(sqrt(ss) - 1.0) < 1e-5);
            }
            free(y), free(ref);
            batch_free(&b);
            gp_model_free(m);
        }
        mt_free(&t);
    }
}

/* Bad ids fail the batch with the item and the id named; the other ids are not a problem. */
static void bad_ids(void) {
    mt t = {.rng = 1200};
    mt_add(&t, "e.weight", 2, (uint64_t[]){10, 8}, -1, 1);
    const struct {
        const char *spec;
        gp_dtype dt;
        int64_t bad;
        const char *want;
    } cases[] = {
        {"input i32 *\nembedding e\npool cls\n", GP_DTYPE_I32, -1, "token 2 has id -1"},
        {"input i32 *\nembedding e\npool cls\n", GP_DTYPE_I32, 10, "token 2 has id 10"},
        {"input i64 *\nembedding e\npool cls\n", GP_DTYPE_I64, (int64_t)1 << 40,
         "token 2 has id 1099511627776"},
        {"input u32 *\nembedding e\npool cls\n", GP_DTYPE_U32, 4000000000ll,
         "token 2 has id 4000000000"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        gp_model *m = load(&t, cases[ci].spec, 0);
        size_t lens[3] = {4, 5, 3};
        batch b;
        batch_init(&b, lens, 3, gp_dtype_size(cases[ci].dt));
        fill_ids(&t, &b, cases[ci].dt, 10);
        size_t at = b.tok[1] + 2; /* item 1, token 2 */
        if (cases[ci].dt == GP_DTYPE_I64)
            memcpy((char *)b.in + 8 * at, &cases[ci].bad, 8);
        else if (cases[ci].dt == GP_DTYPE_U32)
            ((uint32_t *)b.in)[at] = (uint32_t)cases[ci].bad;
        else
            ((int32_t *)b.in)[at] = (int32_t)cases[ci].bad;
        float out[3 * 8];
        char err[256];
        GPT_RC(gp_model_run_host_packed(m, 3, b.in, b.off, out, err, sizeof err), GP_EINVAL);
        if (!strstr(err, "item 1 of the batch") || !strstr(err, cases[ci].want) ||
            !strstr(err, "outside the vocabulary 0..9")) {
            fprintf(stderr, "bad id message: '%s'\n", err);
            GPT_CHECK(0);
        }
        batch_free(&b);
        gp_model_free(m);
    }
    mt_free(&t);
    printf("ok  bad token ids (negative, >= vocab, i64, u32) fail with the item and id named\n");
}

/* The spec's and the loader's refusals. */
static void refusals(void) {
    mt t = {.rng = 1300};
    mt_add(&t, "e.weight", 2, (uint64_t[]){10, 8}, -1, 1);
    mt_add(&t, "hf.word_embeddings.weight", 2, (uint64_t[]){10, 8}, -1, 1);
    mt_add(&t, "hf.weight", 2, (uint64_t[]){10, 8}, -1, 1);
    mt_add(&t, "p.weight", 2, (uint64_t[]){4, 7}, -1, 1);
    mt_add(&t, "a.self.query.weight", 2, (uint64_t[]){8, 8}, -1, 1);
    mt_add(&t, "a.self.key.weight", 2, (uint64_t[]){8, 9}, -1, 1);
    mt_add(&t, "m.in_proj_weight", 2, (uint64_t[]){24, 8}, -1, 1);
    mt_add(&t, "k.q_proj_weight", 2, (uint64_t[]){8, 8}, -1, 1);
    mt_add(&t, "ln.weight", 1, (uint64_t[]){7}, -1, 1);
    const char *bad[][2] = {
        /* spec syntax */
        {"input i32 *\nembedding e\nattention m\npool cls\n", "heads=H is required"},
        {"input i32 *\nembedding e\nattention m heads=0\npool cls\n", "bad value 'heads=0'"},
        {"input i32 *\nembedding e\nattention a heads=2 q=x k=y\npool cls\n",
         "give all four of q=, k=, v=, out="},
        {"input i32 *\nembedding e\npool\n", "expected 'pool cls'"},
        {"input i32 *\nembedding e\npool max\n", "'pool mean'"},
        {"input i32 *\nembedding e\nl2norm eps=0\npool cls\n", "bad value 'eps=0'"},
        {"input i32 *\nembedding e\nlayernorm ln heads=2\n", "unknown option 'heads'"},
        {"input i32 *\nembedding e\nlayernorm\n", "expected a layer name"},
        {"input f16 *\nembedding e\n", "unknown dtype"},
        {"input i32 8\nembedding e\n", "token ids: shape *"},
        {"input f32 12\ntopk k=3\nsoftmax\n", "nothing may follow"}, /* topk k= still works */
        /* ids and embeddings */
        {"input i32 *\nlinear e\npool cls\n", "an 'embedding NAME' line must turn them"},
        {"input i32 *\nsave x\nembedding e\nadd x\npool cls\n", "add vectors, not ids"},
        {"input i32 *\npool cls\n", "an 'embedding NAME' line must turn them"},
        {"input f32 *x8\nembedding e\npool cls\n", "must follow an 'input i32 *'"},
        {"input i32 *\nembedding e\nembedding e\npool cls\n", "must follow an 'input i32 *'"},
        {"input i32 *\nembedding nope\npool cls\n",
         "tensor 'nope.word_embeddings.weight' (Hugging Face BertEmbeddings) or 'nope.weight' (an "
         "nn.Embedding) is missing"},
        {"input i32 *\nembedding hf\npool cls\n", "rename one of them"},
        {"input i32 *\nembedding e position=nope\npool cls\n", "tensor 'nope.weight' is missing"},
        {"input i32 *\nembedding e position=p\npool cls\n",
         "tensor 'p.weight' has shape [4,7], expected [*,8]"},
        /* attention */
        {"input i32 *\nembedding e\nattention m heads=3\npool cls\n",
         "heads=3 does not divide the width 8"},
        {"input i32 *\nembedding e\nattention zz heads=2\npool cls\n",
         "no attention weights: expected 'zz.self.query.weight'"},
        {"input i32 *\nembedding e\nattention k heads=2\npool cls\n", "kdim / vdim"},
        {"input i32 *\nembedding e\nattention a heads=2\npool cls\n",
         "tensor 'a.self.key.weight' has shape [8,9], expected [8,8]"},
        {"input i32 *\nembedding e\nattention a heads=2 q=self.query k=self.key v=v out=o\n"
         "pool cls\n",
         "tensor 'a.self.key.weight' has shape [8,9], expected [8,8]"},
        {"input f32 8\nattention m heads=2\n", "needs a token value"},
        {"input i32 *\nembedding e\npool cls\nattention m heads=2\n", "needs a token value"},
        /* layernorm, pool, l2norm, output */
        {"input i32 *\nembedding e\nlayernorm ln\npool cls\n",
         "tensor 'ln.weight' has shape [7], expected [8]"},
        {"input i32 *\nembedding e\nlayernorm none\npool cls\n", "tensor 'none.weight' is missing"},
        {"input f32 2x3x3\nlayernorm ln\n", "needs tokens or features (rank 1)"},
        {"input f32 8\npool mean\n", "images pool with globalavgpool"},
        {"input f32 2x3x3\nl2norm\n", "needs tokens or features"},
        {"input i32 *\nembedding e\nl2norm\n", "pool them"},
        {"input i32 *\nembedding e\npool cls\npool cls\n", "pools each item's tokens"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[512];
        int rc;
        gp_model *m = load_opt(&t, bad[i][0], 0, 0, err, sizeof err, &rc);
        GPT_CHECK(m == NULL);
        if (rc != GP_EMODEL || !strstr(err, bad[i][1])) {
            fprintf(stderr, "spec %zu:\n%s-> rc %d '%s'\n   does not say '%s'\n", i, bad[i][0], rc,
                    err, bad[i][1]);
            GPT_CHECK(0);
        }
    }
    mt_free(&t);
    printf("ok  %zu refusals, each with its message\n", sizeof bad / sizeof bad[0]);
}

/* The demo encoder: loads, gives unit vectors, batching does not change results. */
static void demo_encoder(void) {
    gp_model *m;
    char err[256];
    GPT_RC(gp_model_demo("encoder", NULL, &m, err, sizeof err), GP_OK);
    gp_tensor_info ii, oi;
    GPT_RC(gp_model_input_info(m, &ii), GP_OK);
    GPT_RC(gp_model_output_info(m, &oi), GP_OK);
    GPT_EQ(ii.dtype, GP_DTYPE_I32);
    GPT_EQ(ii.dims[0], -1);
    GPT_EQ(oi.dims[0], 256);
    GPT_EQ(gp_model_input_bytes(m), 512 * 4);
    mt t = {.rng = 1400};
    size_t lens[] = {1, 9, 33, 128};
    batch b;
    batch_init(&b, lens, 4, 4);
    fill_ids(&t, &b, GP_DTYPE_I32, 30522);
    float *y = items_of(m, &b);
    for (size_t k = 0; k < b.n; k++) {
        double ss = 0;
        for (int i = 0; i < 256; i++) {
            GPT_CHECK(isfinite(y[k * 256 + (size_t)i]));
            ss += (double)y[k * 256 + (size_t)i] * y[k * 256 + (size_t)i];
        }
        GPT_CHECK(fabs(sqrt(ss) - 1.0) < 1e-5);
        batch one;
        batch_init(&one, &lens[k], 1, 4);
        memcpy(one.in, (char *)b.in + b.off[k], b.off[k + 1] - b.off[k]);
        float *yk = items_of(m, &one);
        GPT_CHECK(memcmp(yk, y + k * 256, 256 * sizeof *yk) == 0);
        free(yk);
        batch_free(&one);
    }
    /* Distinct inputs give distinct embeddings. */
    double dot = 0;
    for (int i = 0; i < 256; i++)
        dot += (double)y[i] * y[256 + i];
    GPT_CHECK(dot < 0.9999);
    free(y);
    batch_free(&b);
    gp_model_free(m);
    printf("ok  demo encoder: unit embeddings, batched == one at a time, bitwise\n");
}

int main(void) {
    embedding_cases();
    two_embeddings();
    layernorm_cases();
    attention_cases();
    encoder_cases();
    bad_ids();
    refusals();
    demo_encoder();
    return 0;
}
