/*
 * The transformer-encoder kernels (kernels/attention.cu, kernels/encoder.cu) called directly
 * through their launchers (lib/cuda/kernels.h) and checked element by element against naive
 * references written here (double precision), on packed batches of items of 1, 2, 7, 63, 64,
 * 65, 511 and 512 tokens:
 *   attention   every head dimension class (8, 20, 32, 40, 64, 80, 96, 128) in fp32, fp16 and
 *               bf16; for 16-bit storage both kernels (tensor-core mma on sm_80+, and the SIMT
 *               kernel, forced by passing arch 70); head dimension 136 refused; nothing written
 *               outside the output rows (a NaN guard zone after them); n == 0 a no-op
 *   embedding   i32 and i64 ids, with ids outside the vocabulary and positions past the table
 *               (their rows NaN, one recorded with its id, their items flagged, every other row
 *               exact)
 *   layernorm, l2norm (a zero row; a row with a NaN all NaN), pool_cls
 * Tolerances (max |got - ref| / max |ref| per case): fp32 1e-5; attention fp16 1e-2, bf16 3e-2
 * (P is rounded to the storage type before P V, as FlashAttention does); layernorm and l2norm
 * one rounding of the output (fp16 1e-3, bf16 8e-3); embedding and pool_cls bit-exact.
 * "quick" as the argument: items of 1, 7, 64, 65 and 130 tokens, head dimensions 20, 64 and
 * 128 (the compute-sanitizer runs). Without a usable CUDA device: prints why and exits 77.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kernels.h"
#include "gpt.h"
#include "model/model_impl.h"

/* The batch: items of these lengths, packed. "quick" (for compute-sanitizer, which is slow)
   uses fewer and shorter items and fewer head dimensions. */
static const size_t lengths_full[] = {1, 2, 7, 63, 64, 65, 511, 512};
static const size_t lengths_quick[] = {1, 7, 64, 65, 130};
static const size_t *lengths = lengths_full;
static size_t n_items = sizeof lengths_full / sizeof lengths_full[0];
static int quick;
#define MAX_ITEMS 8
#define GUARD_ROWS 64

static int failures;
static cudaStream_t stream;
static int arch;

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static uint64_t rng = 0x656e636f646572ull;

static const char *kt_name(gp__kt t) {
    return t == GP__KT_F32 ? "fp32" : t == GP__KT_F16 ? "fp16" : "bf16";
}

/* A float as stored in type t, and back. */
static float round_to(gp__kt t, float v) {
    return t == GP__KT_F32   ? v
           : t == GP__KT_F16 ? gp__f16_to_f32(gp__f32_to_f16(v))
                             : gp__bf16_to_f32(gp__f32_to_bf16(v));
}

/* Host array of n floats -> device array of type t (values already representable). */
static void *to_device(gp__kt t, const float *v, size_t n) {
    size_t es = t == GP__KT_F32 ? 4 : 2;
    void *h = malloc(n * es + 1), *d = NULL;
    GPT_CHECK(h);
    for (size_t i = 0; i < n; i++) {
        if (t == GP__KT_F32)
            ((float *)h)[i] = v[i];
        else
            ((uint16_t *)h)[i] = t == GP__KT_F16 ? gp__f32_to_f16(v[i]) : gp__f32_to_bf16(v[i]);
    }
    CU(cudaMalloc(&d, n * es + 1));
    CU(cudaMemcpy(d, h, n * es, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static float *from_device(gp__kt t, const void *d, size_t n) {
    size_t es = t == GP__KT_F32 ? 4 : 2;
    void *h = malloc(n * es + 1);
    float *v = malloc(n * sizeof *v + 1);
    GPT_CHECK(h && v);
    CU(cudaStreamSynchronize(stream));
    CU(cudaMemcpy(h, d, n * es, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        v[i] = t == GP__KT_F32   ? ((float *)h)[i]
               : t == GP__KT_F16 ? gp__f16_to_f32(((uint16_t *)h)[i])
                                 : gp__bf16_to_f32(((uint16_t *)h)[i]);
    free(h);
    return v;
}

/* A device array of n elements of type t, every byte 0xff (NaN in all three types). */
static void *nan_device(gp__kt t, size_t n) {
    size_t es = t == GP__KT_F32 ? 4 : 2;
    void *d = NULL;
    CU(cudaMalloc(&d, n * es + 1));
    CU(cudaMemset(d, 0xff, n * es));
    return d;
}

static void report(const char *what, gp__kt t, double err, double tol, const char *extra) {
    int ok = err <= tol;
    printf("%-4s %-44s rel err %.3g (tol %.0e)%s%s\n", kt_name(t), what, err, tol,
           extra ? extra : "", ok ? "" : "  FAIL");
    failures += !ok;
}

/* max |got - ref| / max |ref|; NaN anywhere in got is infinite. */
static double rel_err(const float *got, const double *ref, size_t n) {
    double num = 0.0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= num)) num = isnan(d) ? INFINITY : d;
        den = fmax(den, fabs(ref[i]));
    }
    return num / den;
}

/* Token offsets of the items (host and device). */
static int64_t tok_h[MAX_ITEMS + 1];
static int64_t *tok_d;
static size_t T_all, max_len;

static void setup_tokens(void) {
    tok_h[0] = 0;
    max_len = 0;
    for (size_t k = 0; k < n_items; k++) {
        tok_h[k + 1] = tok_h[k] + (int64_t)lengths[k];
        if (lengths[k] > max_len) max_len = lengths[k];
    }
    T_all = (size_t)tok_h[n_items];
    CU(cudaMalloc((void **)&tok_d, (n_items + 1) * sizeof *tok_h));
    CU(cudaMemcpy(tok_d, tok_h, (n_items + 1) * sizeof *tok_h, cudaMemcpyHostToDevice));
}

/* ---- attention ------------------------------------------------------------------------------ */

static void attention_ref(const float *qkv, int heads, int d, double *out) {
    size_t c = (size_t)heads * (size_t)d, ld = 3 * c;
    double *s = malloc(max_len * sizeof *s);
    GPT_CHECK(s);
    for (size_t k = 0; k < n_items; k++) {
        size_t a = (size_t)tok_h[k], L = lengths[k];
        for (int h = 0; h < heads; h++)
            for (size_t i = 0; i < L; i++) {
                const float *q = qkv + (a + i) * ld + (size_t)h * (size_t)d;
                double mx = -INFINITY, sum = 0.0;
                for (size_t j = 0; j < L; j++) {
                    const float *kk = qkv + (a + j) * ld + c + (size_t)h * (size_t)d;
                    double dot = 0.0;
                    for (int e = 0; e < d; e++)
                        dot += (double)q[e] * kk[e];
                    s[j] = dot / sqrt((double)d);
                    mx = fmax(mx, s[j]);
                }
                for (size_t j = 0; j < L; j++)
                    sum += (s[j] = exp(s[j] - mx));
                double *o = out + (a + i) * c + (size_t)h * (size_t)d;
                for (int e = 0; e < d; e++) {
                    double acc = 0.0;
                    for (size_t j = 0; j < L; j++)
                        acc += s[j] * qkv[(a + j) * ld + 2 * c + (size_t)h * (size_t)d + (size_t)e];
                    o[e] = acc / sum;
                }
            }
    }
    free(s);
}

static void attention_case(gp__kt t, int d, int use_arch) {
    int heads = d >= 96 ? 1 : 2;
    size_t c = (size_t)heads * (size_t)d;
    size_t nq = T_all * 3 * c, no = T_all * c;
    float *qkv = malloc(nq * sizeof *qkv);
    double *ref = malloc(no * sizeof *ref);
    GPT_CHECK(qkv && ref);
    /* Scores q.k / sqrt(d) with a standard deviation of 2 (amp^2 / 3): softmax neither
       uniform nor one-hot. */
    const double amp = sqrt(6.0);
    for (size_t i = 0; i < nq; i++)
        qkv[i] = round_to(t, (float)(amp * (2.0 * gpt_uniform(&rng) - 1.0)));
    attention_ref(qkv, heads, d, ref);
    void *dq = to_device(t, qkv, nq), *dout = nan_device(t, no + GUARD_ROWS * c);
    int path = gp__k_attention_path(t, d, use_arch);
    CU(gp__k_attention(stream, t, dq, tok_d, dout, n_items, max_len, heads, d, use_arch));
    float *got = from_device(t, dout, no + GUARD_ROWS * c);
    size_t guard_bad = 0;
    for (size_t i = no; i < no + GUARD_ROWS * c; i++)
        guard_bad += !isnan(got[i]);
    double tol = t == GP__KT_F32 ? 1e-5 : t == GP__KT_F16 ? 1e-2 : 3e-2;
    char what[96], extra[64] = "";
    snprintf(what, sizeof what, "attention d=%d heads=%d (%s kernel)", d, heads,
             path == 2 ? "mma" : "simt");
    if (guard_bad) {
        snprintf(extra, sizeof extra, "; %zu values written past the output", guard_bad);
        failures++;
    }
    report(what, t, rel_err(got, ref, no), tol, extra);
    free(got);
    free(qkv);
    free(ref);
    CU(cudaFree(dq));
    CU(cudaFree(dout));
}

static void run_attention(void) {
    static const int dims_full[] = {8, 20, 32, 40, 64, 80, 96, 128}, dims_quick[] = {20, 64, 128};
    const int *dims = quick ? dims_quick : dims_full;
    size_t n_dims = quick ? 3 : sizeof dims_full / sizeof dims_full[0];
    static const gp__kt types[] = {GP__KT_F32, GP__KT_F16, GP__KT_BF16};
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t di = 0; di < n_dims; di++) {
            attention_case(types[ti], dims[di], arch);
            /* 16-bit storage on the SIMT kernel too (the path below sm_80 or for d % 8 != 0). */
            if (types[ti] != GP__KT_F32 && gp__k_attention_path(types[ti], dims[di], arch) == 2)
                attention_case(types[ti], dims[di], 70);
        }
    /* Refusals and the empty batch. */
    GPT_EQ(gp__k_attention_path(GP__KT_F16, 136, arch), 0);
    GPT_EQ(gp__k_attention_path(GP__KT_F32, 0, arch), 0);
    GPT_EQ(gp__k_attention(stream, GP__KT_F16, NULL, tok_d, NULL, 1, 4, 1, 136, arch),
           cudaErrorInvalidValue);
    GPT_EQ(gp__k_attention(stream, GP__KT_F16, NULL, NULL, NULL, 0, 0, 2, 64, arch), cudaSuccess);
    printf("attention: head dim 136 refused, n == 0 a no-op\n");
}

/* ---- embedding --------------------------------------------------------------------------------
 */

static void embedding_case(gp__kt t, int i64) {
    /* Positions past the table in the longest items (their rows NaN). */
    const int vocab = 50, positions = quick ? 100 : 300, C = 48;
    float *word = malloc((size_t)vocab * C * sizeof *word);
    float *pos = malloc((size_t)positions * C * sizeof *pos), type0[48];
    GPT_CHECK(word && pos);
    for (int i = 0; i < vocab * C; i++)
        word[i] = round_to(t, (float)(2.0 * gpt_uniform(&rng) - 1.0));
    for (int i = 0; i < positions * C; i++)
        pos[i] = round_to(t, (float)(0.5 * gpt_uniform(&rng) - 0.25));
    for (int i = 0; i < C; i++)
        type0[i] = (float)(0.2 * gpt_uniform(&rng) - 0.1);
    int64_t *ids = malloc(T_all * sizeof *ids);
    int32_t *ids32 = malloc(T_all * sizeof *ids32);
    GPT_CHECK(ids && ids32);
    for (size_t i = 0; i < T_all; i++)
        ids[i] = (int64_t)(gpt_uniform(&rng) * vocab);
    /* Bad ids in item 1 or 2 (7 tokens): -1, vocab, and for i64 one past 32 bits. */
    size_t b0 = (size_t)tok_h[quick ? 1 : 2];
    ids[b0 + 1] = -1;
    ids[b0 + 3] = vocab;
    if (i64) ids[b0 + 5] = (int64_t)1 << 40;
    for (size_t i = 0; i < T_all; i++)
        ids32[i] = (int32_t)ids[i];
    void *dids = NULL;
    CU(cudaMalloc(&dids, T_all * 8));
    CU(cudaMemcpy(dids, i64 ? (void *)ids : (void *)ids32, T_all * (i64 ? 8 : 4),
                  cudaMemcpyHostToDevice));
    void *dword = to_device(t, word, (size_t)vocab * C),
         *dpos = to_device(t, pos, (size_t)positions * C);
    float *dtype0 = NULL;
    CU(cudaMalloc((void **)&dtype0, sizeof type0));
    CU(cudaMemcpy(dtype0, type0, sizeof type0, cudaMemcpyHostToDevice));
    void *dout = nan_device(t, (T_all + GUARD_ROWS) * C);
    /* The record, then one flag per item (kernels.h). */
    size_t bad_bytes = sizeof(gp__k_bad_token) + n_items;
    gp__k_bad_token *dbad = NULL, hbad;
    unsigned char *hflags = malloc(n_items), *item_bad = calloc(n_items, 1);
    GPT_CHECK(hflags && item_bad);
    CU(cudaMalloc((void **)&dbad, bad_bytes));
    CU(cudaMemset(dbad, 0, bad_bytes));
    CU(gp__k_embedding(stream, t, dids, i64, tok_d, n_items, max_len, dword, vocab, dpos, positions,
                       dtype0, dout, C, dbad, 7));
    CU(cudaMemcpy(&hbad, dbad, sizeof hbad, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(hflags, gp__k_bad_items(dbad), n_items, cudaMemcpyDeviceToHost));
    float *got = from_device(t, dout, (T_all + GUARD_ROWS) * C);
    size_t wrong = 0, nan_rows = 0, want_nan = 0;
    for (size_t k = 0; k < n_items; k++)
        for (size_t p = 0; p < lengths[k]; p++) {
            size_t tt = (size_t)tok_h[k] + p;
            int64_t id = ids[tt];
            int bad = id < 0 || id >= vocab || (int)p >= positions;
            want_nan += bad;
            item_bad[k] |= (unsigned char)bad;
            int row_nan = 1;
            for (int cc = 0; cc < C; cc++) {
                float g = got[tt * C + cc];
                row_nan &= isnan(g);
                if (!bad) {
                    /* BertEmbeddings' order, as the kernel and the host: (word + type0) + pos */
                    float w = word[id * C + cc] + type0[cc];
                    w += pos[p * C + cc];
                    w = round_to(t, w);
                    wrong += memcmp(&g, &w, sizeof g) != 0;
                }
            }
            if (bad) nan_rows += row_nan;
        }
    for (size_t i = T_all * C; i < (T_all + GUARD_ROWS) * C; i++)
        wrong += !isnan(got[i]);
    /* The record names one of the bad tokens, with its id as given, and the tag. */
    int rec_ok = hbad.found == 1 && hbad.tag == 7 && hbad.item >= 0 &&
                 (size_t)hbad.item < n_items && hbad.token >= 0 &&
                 (size_t)hbad.token < lengths[hbad.item];
    if (rec_ok) {
        int64_t id = ids[(size_t)tok_h[hbad.item] + (size_t)hbad.token];
        long long given = i64 ? (long long)id : (long long)(int32_t)id;
        rec_ok = hbad.id == given && (given < 0 || given >= vocab || hbad.token >= positions);
    }
    size_t flags_wrong = 0; /* every item with a bad token flagged, no other */
    for (size_t k = 0; k < n_items; k++)
        flags_wrong += hflags[k] != item_bad[k];
    int ok = wrong == 0 && nan_rows == want_nan && rec_ok && flags_wrong == 0;
    printf("%-4s embedding %s ids: %zu rows, %zu bad ids / positions -> %zu NaN rows, %zu values "
           "differ; recorded: item %d token %d id %lld, %zu item flags wrong%s\n",
           kt_name(t), i64 ? "i64" : "i32", T_all, want_nan, nan_rows, wrong, hbad.item, hbad.token,
           hbad.id, flags_wrong, ok ? "" : "  FAIL");
    failures += !ok;
    GPT_EQ(gp__k_embedding(stream, t, dids, i64, tok_d, 0, 0, dword, vocab, dpos, positions, dtype0,
                           dout, C, NULL, 0),
           cudaSuccess);
    CU(cudaFree(dbad));
    free(hflags);
    free(item_bad);
    free(got);
    free(word);
    free(pos);
    free(ids);
    free(ids32);
    CU(cudaFree(dids));
    CU(cudaFree(dword));
    CU(cudaFree(dpos));
    CU(cudaFree(dtype0));
    CU(cudaFree(dout));
}

/* ---- layernorm, l2norm, pool_cls ----------------------------------------------------------------
 */

static void rows_case(gp__kt t, int C) {
    size_t n = T_all * (size_t)C;
    float *x = malloc(n * sizeof *x), *gamma = malloc((size_t)C * sizeof *gamma);
    float *beta = malloc((size_t)C * sizeof *beta);
    double *ref = malloc(n * sizeof *ref);
    GPT_CHECK(x && gamma && beta && ref);
    for (size_t i = 0; i < n; i++) /* an offset mean, as real activations have */
        x[i] = round_to(t, (float)(3.0 + 2.0 * gpt_uniform(&rng) - 1.0));
    for (int i = 0; i < C; i++) {
        gamma[i] = (float)(0.5 + gpt_uniform(&rng));
        beta[i] = (float)(gpt_uniform(&rng) - 0.5);
    }
    for (int i = 0; i < C; i++) /* row 5 is all zeros: l2norm gives zeros (x / eps) */
        x[5 * (size_t)C + (size_t)i] = 0.0f;
    const float eps = 1e-5f;
    void *dx = to_device(t, x, n), *dout = nan_device(t, n + GUARD_ROWS * (size_t)C);
    float *dg = NULL, *db = NULL;
    CU(cudaMalloc((void **)&dg, (size_t)C * 4));
    CU(cudaMalloc((void **)&db, (size_t)C * 4));
    CU(cudaMemcpy(dg, gamma, (size_t)C * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(db, beta, (size_t)C * 4, cudaMemcpyHostToDevice));
    double tol_round = t == GP__KT_F32 ? 1e-5 : t == GP__KT_F16 ? 1e-3 : 8e-3;
    char what[64];

    /* layernorm */
    for (size_t r = 0; r < T_all; r++) {
        const float *xr = x + r * (size_t)C;
        double mean = 0.0, var = 0.0;
        for (int i = 0; i < C; i++)
            mean += xr[i];
        mean /= C;
        for (int i = 0; i < C; i++)
            var += (xr[i] - mean) * (xr[i] - mean);
        var /= C;
        for (int i = 0; i < C; i++)
            ref[r * (size_t)C + (size_t)i] = (xr[i] - mean) / sqrt(var + eps) * gamma[i] + beta[i];
    }
    CU(gp__k_layernorm(stream, t, dx, dout, T_all, C, dg, db, eps));
    float *got = from_device(t, dout, n + GUARD_ROWS * (size_t)C);
    size_t guard_bad = 0;
    for (size_t i = n; i < n + GUARD_ROWS * (size_t)C; i++)
        guard_bad += !isnan(got[i]);
    snprintf(what, sizeof what, "layernorm C=%d", C);
    report(what, t, rel_err(got, ref, n) + (double)guard_bad, tol_round, NULL);
    free(got);
    /* in place */
    void *dx2 = to_device(t, x, n);
    CU(gp__k_layernorm(stream, t, dx2, dx2, T_all, C, dg, db, eps));
    got = from_device(t, dx2, n);
    snprintf(what, sizeof what, "layernorm C=%d in place", C);
    report(what, t, rel_err(got, ref, n), tol_round, NULL);
    free(got);
    CU(cudaFree(dx2));

    /* l2norm */
    for (size_t r = 0; r < T_all; r++) {
        const float *xr = x + r * (size_t)C;
        double ss = 0.0;
        for (int i = 0; i < C; i++)
            ss += (double)xr[i] * xr[i];
        double den = fmax(sqrt(ss), 1e-12);
        for (int i = 0; i < C; i++)
            ref[r * (size_t)C + (size_t)i] = xr[i] / den;
    }
    CU(cudaMemset(dout, 0xff, (n + GUARD_ROWS * (size_t)C) * (t == GP__KT_F32 ? 4 : 2)));
    CU(gp__k_l2norm(stream, t, dx, dout, T_all, C, 1e-12f));
    got = from_device(t, dout, n + GUARD_ROWS * (size_t)C);
    guard_bad = 0;
    for (size_t i = n; i < n + GUARD_ROWS * (size_t)C; i++)
        guard_bad += !isnan(got[i]);
    snprintf(what, sizeof what, "l2norm C=%d (a zero row)", C);
    report(what, t, rel_err(got, ref, n) + (double)guard_bad, tol_round, NULL);
    free(got);
    /* A NaN in a row makes the whole row NaN, as F.normalize (not x / eps beside it). */
    float keep = x[3 * (size_t)C + 1];
    x[3 * (size_t)C + 1] = NAN;
    void *dxn = to_device(t, x, n);
    x[3 * (size_t)C + 1] = keep;
    CU(gp__k_l2norm(stream, t, dxn, dout, T_all, C, 1e-12f));
    got = from_device(t, dout, n);
    size_t not_nan = 0;
    for (int i = 0; i < C; i++)
        not_nan += !isnan(got[3 * (size_t)C + (size_t)i]);
    printf("%-4s l2norm C=%d, a NaN in row 3: %zu of the row's values not NaN%s\n", kt_name(t), C,
           not_nan, not_nan ? "  FAIL" : "");
    failures += not_nan != 0;
    free(got);
    CU(cudaFree(dxn));

    /* pool_cls: each item's first token, bit for bit */
    CU(gp__k_pool_cls(stream, t, dx, tok_d, dout, n_items, C));
    got = from_device(t, dout, n_items * (size_t)C);
    size_t wrong = 0;
    for (size_t k = 0; k < n_items; k++)
        for (int i = 0; i < C; i++)
            wrong += memcmp(&got[k * (size_t)C + (size_t)i],
                            &x[(size_t)tok_h[k] * (size_t)C + (size_t)i], sizeof(float)) != 0;
    printf("%-4s pool_cls C=%d: %zu values differ%s\n", kt_name(t), C, wrong,
           wrong ? "  FAIL" : "");
    failures += wrong != 0;
    free(got);

    GPT_EQ(gp__k_layernorm(stream, t, dx, dout, 0, C, dg, db, eps), cudaSuccess);
    GPT_EQ(gp__k_l2norm(stream, t, dx, dout, 0, C, eps), cudaSuccess);
    GPT_EQ(gp__k_pool_cls(stream, t, dx, tok_d, dout, 0, C), cudaSuccess);
    free(x);
    free(gamma);
    free(beta);
    free(ref);
    CU(cudaFree(dx));
    CU(cudaFree(dout));
    CU(cudaFree(dg));
    CU(cudaFree(db));
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "quick") == 0) {
        quick = 1;
        lengths = lengths_quick;
        n_items = sizeof lengths_quick / sizeof lengths_quick[0];
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("SKIP: no usable CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "no devices");
        return gpt_no_device();
    }
    int major = 0, minor = 0;
    CU(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CU(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    /* The attention path for this build's code on this device (kernels.h): the device's
       capability alone would pick the tensor-core kernel on a build without sm_80+ code. */
    CU(gp__k_attention_arch(major * 10 + minor, &arch));
    printf("device 0: compute capability %d.%d, attention kernels for sm_%d\n", major, minor, arch);
    /* A blocking stream: the uploads (cudaMemcpy) and NaN fills (cudaMemset) run on the legacy
       default stream, and the kernels must be ordered after them. */
    CU(cudaStreamCreate(&stream));
    setup_tokens();
    static const gp__kt types[] = {GP__KT_F32, GP__KT_F16, GP__KT_BF16};
    run_attention();
    for (size_t ti = 0; ti < 3; ti++) {
        embedding_case(types[ti], 0);
        embedding_case(types[ti], 1);
        rows_case(types[ti], 50);
        if (!quick) rows_case(types[ti], 768);
    }
    CU(cudaStreamSynchronize(stream));
    CU(cudaGetLastError());
    CU(cudaFree(tok_d));
    CU(cudaStreamDestroy(stream));
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("all encoder kernel checks passed\n");
    return 0;
}
