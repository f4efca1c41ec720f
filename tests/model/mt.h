/* Model test helpers: random tensors, in-memory safetensors images, loading from a spec. */
#ifndef GP_TESTS_MODEL_MT_H
#define GP_TESTS_MODEL_MT_H

#include <gpupipe/model.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "model/model_impl.h"
#include "model/safetensors.h"

#define MT_MAX 64

/* A model under construction: named fp32 tensors (stored as `dtype`: F32, F16, BF16, F64). */
typedef struct mt {
    gp__st_entry e[MT_MAX];
    void *raw[MT_MAX];
    float *val[MT_MAX]; /* the fp32 values the model will see (after the storage rounding) */
    int n;
    uint64_t rng;
} mt;

static inline double mt_uniform(mt *t) {
    return gpt_uniform(&t->rng);
}

static inline float *mt_rand(mt *t, size_t n, double lo, double hi) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    GPT_CHECK(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(lo + (hi - lo) * mt_uniform(t));
    return p;
}

/* Add tensor `name` of `shape` with uniform values in [lo, hi); returns its fp32 values. */
static inline float *mt_add_as(mt *t, const char *name, gp__st_dtype dtype, int rank,
                               const uint64_t *shape, double lo, double hi) {
    GPT_CHECK(t->n < MT_MAX);
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)shape[i];
    float *v = mt_rand(t, n, lo, hi);
    size_t es = gp__st_dtype_size(dtype);
    uint8_t *raw = malloc(n * es + 1);
    GPT_CHECK(raw);
    for (size_t i = 0; i < n; i++) {
        if (dtype == GP__ST_F32) {
            memcpy(raw + 4 * i, &v[i], 4);
        } else if (dtype == GP__ST_F64) {
            double d = v[i];
            memcpy(raw + 8 * i, &d, 8);
        } else {
            uint16_t h = dtype == GP__ST_F16 ? gp__f32_to_f16(v[i]) : gp__f32_to_bf16(v[i]);
            v[i] = dtype == GP__ST_F16 ? gp__f16_to_f32(h) : gp__bf16_to_f32(h);
            memcpy(raw + 2 * i, &h, 2);
        }
    }
    gp__st_entry *e = &t->e[t->n];
    e->name = name;
    e->dtype = dtype;
    e->rank = rank;
    memcpy(e->shape, shape, (size_t)rank * sizeof *shape);
    e->data = raw;
    t->raw[t->n] = raw;
    t->val[t->n] = v;
    t->n++;
    return v;
}

static inline float *mt_add(mt *t, const char *name, int rank, const uint64_t *shape, double lo,
                            double hi) {
    return mt_add_as(t, name, GP__ST_F32, rank, shape, lo, hi);
}

/* Load the tensors so far with `spec` (in the metadata). rc and err as the loader's. */
static inline int mt_load(mt *t, const char *spec, gp_model **m, char *err, size_t len) {
    void *img;
    size_t n;
    gp__err e = {err, len};
    int rc = gp__st_build(t->e, (size_t)t->n, spec, &img, &n, &e);
    GPT_RC(rc, GP_OK);
    rc = gp_model_load_memory(img, n, NULL, m, err, len);
    free(img);
    return rc;
}

static inline void mt_free(mt *t) {
    for (int i = 0; i < t->n; i++) {
        free(t->raw[i]);
        free(t->val[i]);
    }
    t->n = 0;
}

/* max |a - b| / max |b| over n values (b the reference). */
static inline double mt_rel_err(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

/* gp_model_describe's text (free it), checked to succeed. */
static inline char *mt_describe(const gp_model *m) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    GPT_CHECK(f);
    GPT_RC(gp_model_describe(m, f), GP_OK);
    GPT_CHECK(fclose(f) == 0 && text);
    return text;
}

#endif
