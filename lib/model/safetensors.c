/* safetensors parsing and building (see safetensors.h). */
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupipe/gpupipe.h"
#include "model_impl.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[GP__ST_DTYPE_COUNT_] = {
    [GP__ST_BOOL] = {"BOOL", 1},       [GP__ST_U8] = {"U8", 1},
    [GP__ST_I8] = {"I8", 1},           [GP__ST_I16] = {"I16", 2},
    [GP__ST_U16] = {"U16", 2},         [GP__ST_F16] = {"F16", 2},
    [GP__ST_BF16] = {"BF16", 2},       [GP__ST_I32] = {"I32", 4},
    [GP__ST_U32] = {"U32", 4},         [GP__ST_F32] = {"F32", 4},
    [GP__ST_F64] = {"F64", 8},         [GP__ST_I64] = {"I64", 8},
    [GP__ST_U64] = {"U64", 8},         [GP__ST_F8_E4M3] = {"F8_E4M3", 1},
    [GP__ST_F8_E5M2] = {"F8_E5M2", 1}, [GP__ST_OTHER] = {"other", 0},
};

size_t gp__st_dtype_size(gp__st_dtype t) {
    return (unsigned)t < GP__ST_DTYPE_COUNT_ ? dtypes[t].size : 0;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const gp__st_tensor *)a)->name, ((const gp__st_tensor *)b)->name);
}

static int cmp_span(const void *a, const void *b) {
    const gp__st_tensor *x = *(const gp__st_tensor *const *)a;
    const gp__st_tensor *y = *(const gp__st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

static int parse_tensor(const char *name, const gp__jval *v, size_t data_len, gp__st_tensor *t,
                        gp__err *e) {
    if (v->kind != GP__J_OBJECT)
        return gp__errf(e, GP_EMODEL, "tensor '%s': header entry is not an object", name);
    for (size_t i = 0; i < v->n; i++) {
        const char *k = v->keys[i];
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return gp__errf(e, GP_EMODEL, "tensor '%s': unknown header field '%s'", name, k);
    }
    const gp__jval *dt = gp__json_get(v, "dtype");
    const gp__jval *sh = gp__json_get(v, "shape");
    const gp__jval *off = gp__json_get(v, "data_offsets");
    if (!dt || !sh || !off)
        return gp__errf(e, GP_EMODEL, "tensor '%s': missing %s", name,
                        !dt   ? "dtype"
                        : !sh ? "shape"
                              : "data_offsets");
    if (dt->kind != GP__J_STRING)
        return gp__errf(e, GP_EMODEL, "tensor '%s': dtype is not a string", name);
    if (strlen(dt->str) != dt->len || dt->len == 0 || dt->len > 32)
        return gp__errf(e, GP_EMODEL, "tensor '%s': dtype '%.32s' is not a dtype name", name,
                        dt->str);
    int found = GP__ST_OTHER; /* a dtype this library does not know: its offsets are checked */
    for (int d = 0; d < GP__ST_OTHER; d++)
        if (strcmp(dt->str, dtypes[d].name) == 0) found = d;
    t->name = name;
    t->dtype = (gp__st_dtype)found;
    t->dtype_str = dt->str;

    if (sh->kind != GP__J_ARRAY)
        return gp__errf(e, GP_EMODEL, "tensor '%s': shape is not an array", name);
    if (sh->n > GP__ST_MAX_RANK)
        return gp__errf(e, GP_EMODEL, "tensor '%s': rank %zu exceeds %d", name, sh->n,
                        GP__ST_MAX_RANK);
    t->rank = (int)sh->n;
    size_t numel = 1;
    for (size_t i = 0; i < sh->n; i++) {
        uint64_t d;
        if (!gp__json_u64(&sh->items[i], &d) || d > SIZE_MAX)
            return gp__errf(e, GP_EMODEL, "tensor '%s': shape[%zu] is not a non-negative integer",
                            name, i);
        t->shape[i] = d;
        if (!gp__mul_ok(numel, (size_t)d, &numel))
            return gp__errf(e, GP_EMODEL, "tensor '%s': shape overflows", name);
    }
    size_t bytes;
    if (!gp__mul_ok(numel, dtypes[found].size, &bytes))
        return gp__errf(e, GP_EMODEL, "tensor '%s': shape overflows", name);

    if (off->kind != GP__J_ARRAY || off->n != 2 || !gp__json_u64(&off->items[0], &t->begin) ||
        !gp__json_u64(&off->items[1], &t->end))
        return gp__errf(e, GP_EMODEL,
                        "tensor '%s': data_offsets is not [begin, end] of non-negative integers",
                        name);
    if (t->begin > t->end)
        return gp__errf(e, GP_EMODEL, "tensor '%s': data_offsets begin %llu > end %llu", name,
                        (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > data_len)
        return gp__errf(e, GP_EMODEL,
                        "tensor '%s': data_offsets end %llu is outside the data (%zu bytes)", name,
                        (unsigned long long)t->end, data_len);
    if (found != GP__ST_OTHER && t->end - t->begin != bytes)
        return gp__errf(e, GP_EMODEL,
                        "tensor '%s': shape x %s size = %zu bytes but data_offsets span %llu", name,
                        dtypes[found].name, bytes, (unsigned long long)(t->end - t->begin));
    return GP_OK;
}

/* Files people pass by mistake, recognized by their first bytes so the message can say what
   the file is and what to do instead of quoting a nonsensical header length. */
static int not_safetensors(const uint8_t *b, size_t len, gp__err *e) {
    if (len >= 4 && memcmp(b, "PK\x03\x04", 4) == 0) {
        /* A zip archive. Its first member's name (local header: name length at 26, name at
           30) tells a NumPy .npz (members "x.npy") from a torch.save archive (members
           "archive/data.pkl", "archive/version", ...). */
        size_t nlen = len >= 30 ? (size_t)(b[26] | b[27] << 8) : 0;
        if (nlen >= 4 && 30 + nlen <= len && memcmp(b + 30 + nlen - 4, ".npy", 4) == 0)
            return gp__errf(e, GP_EMODEL,
                            "not a safetensors file: this is a NumPy .npz archive (an input?); "
                            "a model is a .safetensors file: export one with "
                            "tools/gpupipe_export.py (see docs/MODELS.md)");
        return gp__errf(e, GP_EMODEL,
                        "not a safetensors file: this looks like a torch.save archive (a zip "
                        "file): export the model with tools/gpupipe_export.py (see "
                        "docs/MODELS.md)");
    }
    if (len >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
        return gp__errf(e, GP_EMODEL,
                        "not a safetensors file: this looks like a Python pickle (legacy "
                        "torch.save or pickle.dump): export the model with "
                        "tools/gpupipe_export.py (see docs/MODELS.md)");
    if (len >= 6 && memcmp(b, "\x93NUMPY", 6) == 0)
        return gp__errf(e, GP_EMODEL,
                        "not a safetensors file: this is a NumPy .npy array (an input?); a model "
                        "is a .safetensors file: export one with tools/gpupipe_export.py (see "
                        "docs/MODELS.md)");
    return GP_OK;
}

int gp__st_parse(const void *image, size_t len, gp__st *st, gp__err *e) {
    memset(st, 0, sizeof *st);
    const uint8_t *b = image;
    int rc;
    if (!image || len < 8)
        return gp__errf(e, GP_EMODEL, "file too short for a safetensors header (%zu bytes)", len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | b[i];
    /* Only a file that is not a well-formed start of a safetensors image is looked at for
       other formats: a valid header length can begin with the same bytes as a pickle. */
    if ((hlen > GP__ST_MAX_HEADER || hlen > len - 8 || hlen < 2 || b[8] != '{') &&
        (rc = not_safetensors(b, len, e)) != GP_OK)
        return rc;
    if (hlen > GP__ST_MAX_HEADER)
        return gp__errf(e, GP_EMODEL,
                        "not a safetensors file: its first 8 bytes give a header length of %llu, "
                        "over the format's limit of %u bytes",
                        (unsigned long long)hlen, GP__ST_MAX_HEADER);
    if (hlen > len - 8)
        return gp__errf(e, GP_EMODEL,
                        "header length %llu runs past the end of the file (%zu bytes)",
                        (unsigned long long)hlen, len);
    if (hlen < 2 || b[8] != '{') return gp__errf(e, GP_EMODEL, "header is not a JSON object");
    rc = gp__json_parse((const char *)b + 8, (size_t)hlen, &st->json, e);
    if (rc != GP_OK) return rc;
    const gp__jval *root = st->json.root;
    st->data = b + 8 + hlen;
    st->data_len = len - 8 - (size_t)hlen;
    if (root->kind != GP__J_OBJECT) {
        rc = gp__errf(e, GP_EMODEL, "header is not a JSON object");
        goto fail;
    }
    if (root->n) {
        st->tensors = calloc(root->n, sizeof *st->tensors);
        if (!st->tensors) {
            rc = gp__errf(e, GP_ENOMEM, "out of memory");
            goto fail;
        }
    }
    for (size_t i = 0; i < root->n; i++) {
        const char *key = root->keys[i];
        const gp__jval *v = &root->items[i];
        if (strcmp(key, "__metadata__") == 0) {
            if (v->kind != GP__J_OBJECT) {
                rc = gp__errf(e, GP_EMODEL, "__metadata__ is not an object");
                goto fail;
            }
            for (size_t k = 0; k < v->n; k++) {
                if (v->items[k].kind != GP__J_STRING) {
                    rc = gp__errf(e, GP_EMODEL, "__metadata__ value '%s' is not a string",
                                  v->keys[k]);
                    goto fail;
                }
                if (strcmp(v->keys[k], GP__ST_SPEC_KEY) == 0) {
                    if (strlen(v->items[k].str) != v->items[k].len) {
                        rc = gp__errf(e, GP_EMODEL, "__metadata__ '%s' contains a NUL character",
                                      GP__ST_SPEC_KEY);
                        goto fail;
                    }
                    st->spec = v->items[k].str;
                }
            }
            continue;
        }
        if ((rc = parse_tensor(key, v, st->data_len, &st->tensors[st->n], e)) != GP_OK) goto fail;
        st->n++;
    }
    /* As the reference loader (the safetensors crate: InvalidOffset, MetadataIncompleteBuffer):
       sorted by offsets, each tensor starts where the previous one ends, the first at 0, and
       the last ends where the file ends. A gap or unused bytes at the end mean a truncated,
       padded or hand-edited file; other readers reject it, so gpupipe does too. */
    const gp__st_tensor **by_span = malloc((st->n ? st->n : 1) * sizeof *by_span);
    if (!by_span) {
        rc = gp__errf(e, GP_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < st->n; i++)
        by_span[i] = &st->tensors[i];
    qsort(by_span, st->n, sizeof *by_span, cmp_span);
    uint64_t covered = 0;
    for (size_t i = 0; i < st->n && rc == GP_OK; i++) {
        const gp__st_tensor *t = by_span[i];
        if (t->begin < covered)
            rc = gp__errf(e, GP_EMODEL,
                          "tensor '%s': data_offsets [%llu, %llu) overlap tensor '%s' [%llu, "
                          "%llu)",
                          t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                          by_span[i - 1]->name, (unsigned long long)by_span[i - 1]->begin,
                          (unsigned long long)by_span[i - 1]->end);
        else if (t->begin > covered)
            rc = gp__errf(e, GP_EMODEL,
                          "tensor '%s': data_offsets [%llu, %llu) leave bytes [%llu, %llu) of the "
                          "data unused: the tensors must cover the data without gaps (as the "
                          "reference safetensors loader requires)",
                          t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                          (unsigned long long)covered, (unsigned long long)t->begin);
        covered = t->end;
    }
    free(by_span);
    if (rc != GP_OK) goto fail;
    if (covered != st->data_len) {
        rc = gp__errf(e, GP_EMODEL,
                      "%zu unused bytes after the last tensor: the tensors end at data offset "
                      "%llu but the file has %zu bytes of data; a safetensors file ends where its "
                      "last tensor ends, as the reference loader requires (was something "
                      "appended, or the header edited?): re-export the file",
                      st->data_len - (size_t)covered, (unsigned long long)covered, st->data_len);
        goto fail;
    }
    if (st->n > 1) qsort(st->tensors, st->n, sizeof *st->tensors, cmp_name);
    return GP_OK;
fail:
    gp__st_free(st);
    return rc;
}

void gp__st_free(gp__st *st) {
    if (!st) return;
    free(st->tensors);
    gp__json_free(&st->json);
    memset(st, 0, sizeof *st);
}

const gp__st_tensor *gp__st_find(const gp__st *st, const char *name) {
    gp__st_tensor key = {.name = name};
    if (!st->n) return NULL;
    return bsearch(&key, st->tensors, st->n, sizeof key, cmp_name);
}

int gp__st_read_f32(const gp__st *st, const gp__st_tensor *t, float *dst, gp__err *e) {
    const uint8_t *p = st->data + t->begin;
    size_t size = gp__st_dtype_size(t->dtype);
    size_t n = (size_t)(t->end - t->begin) / (size ? size : 1);
    /* Little-endian by format; assemble bytes so unaligned data and any host order work. */
    switch (t->dtype) {
    case GP__ST_F32:
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
                         (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
            memcpy(&dst[i], &u, 4);
        }
        return GP_OK;
    case GP__ST_F64:
        for (size_t i = 0; i < n; i++) {
            uint64_t u = 0;
            for (int k = 7; k >= 0; k--)
                u = (u << 8) | p[8 * i + (size_t)k];
            double d;
            memcpy(&d, &u, 8);
            dst[i] = (float)d;
        }
        return GP_OK;
    case GP__ST_F16:
        for (size_t i = 0; i < n; i++)
            dst[i] = gp__f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return GP_OK;
    case GP__ST_BF16:
        for (size_t i = 0; i < n; i++)
            dst[i] = gp__bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return GP_OK;
    default:
        return gp__errf(e, GP_EMODEL,
                        t->dtype == GP__ST_OTHER
                            ? "tensor '%s': unknown dtype '%.32s' (a float type is needed: F32, "
                              "F16, BF16, F64)"
                            : "tensor '%s': dtype %s is not a float type (F32, F16, BF16, F64)",
                        t->name, t->dtype_str);
    }
}

/* ---- building ---------------------------------------------------------------------------- */

typedef struct gp__sbuf {
    char *p;
    size_t n, cap;
    int oom;
} gp__sbuf;

static void sb_put(gp__sbuf *s, const char *d, size_t n) {
    if (s->oom) return;
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->n + n + 1)
            cap *= 2;
        char *np = realloc(s->p, cap);
        if (!np) {
            s->oom = 1;
            return;
        }
        s->p = np;
        s->cap = cap;
    }
    memcpy(s->p + s->n, d, n);
    s->n += n;
    s->p[s->n] = '\0';
}

static void sb_str(gp__sbuf *s, const char *str) {
    sb_put(s, str, strlen(str));
}

static void sb_json_string(gp__sbuf *s, const char *str) {
    sb_put(s, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)str; *c; c++) {
        char esc[8];
        if (*c == '"' || *c == '\\') {
            esc[0] = '\\', esc[1] = (char)*c;
            sb_put(s, esc, 2);
        } else if (*c == '\n') {
            sb_put(s, "\\n", 2);
        } else if (*c == '\t') {
            sb_put(s, "\\t", 2);
        } else if (*c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *c);
            sb_put(s, esc, 6);
        } else {
            sb_put(s, (const char *)c, 1);
        }
    }
    sb_put(s, "\"", 1);
}

int gp__st_build(const gp__st_entry *t, size_t n, const char *spec, void **out, size_t *out_len,
                 gp__err *e) {
    *out = NULL;
    *out_len = 0;
    gp__sbuf h = {0};
    size_t data_len = 0;
    char num[64];
    sb_str(&h, "{");
    if (spec) {
        sb_str(&h, "\"__metadata__\":{");
        sb_json_string(&h, GP__ST_SPEC_KEY);
        sb_str(&h, ":");
        sb_json_string(&h, spec);
        sb_str(&h, "}");
    }
    for (size_t i = 0; i < n; i++) {
        size_t numel = 1, bytes;
        if ((unsigned)t[i].dtype >= GP__ST_OTHER || t[i].rank < 0 || t[i].rank > GP__ST_MAX_RANK) {
            free(h.p);
            return gp__errf(e, GP_EINVAL, "tensor '%s': bad dtype or rank", t[i].name);
        }
        for (int d = 0; d < t[i].rank; d++)
            if (t[i].shape[d] > SIZE_MAX || !gp__mul_ok(numel, (size_t)t[i].shape[d], &numel)) {
                free(h.p);
                return gp__errf(e, GP_EINVAL, "tensor '%s': shape overflows", t[i].name);
            }
        if (!gp__mul_ok(numel, dtypes[t[i].dtype].size, &bytes) ||
            !gp__add_ok(data_len, bytes, &data_len)) {
            free(h.p);
            return gp__errf(e, GP_EINVAL, "tensor '%s': too large", t[i].name);
        }
        if (spec || i) sb_str(&h, ",");
        sb_json_string(&h, t[i].name);
        sb_str(&h, ":{\"dtype\":\"");
        sb_str(&h, dtypes[t[i].dtype].name);
        sb_str(&h, "\",\"shape\":[");
        for (int d = 0; d < t[i].rank; d++) {
            snprintf(num, sizeof num, "%s%llu", d ? "," : "", (unsigned long long)t[i].shape[d]);
            sb_str(&h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%zu,%zu]}", data_len - bytes, data_len);
        sb_str(&h, num);
    }
    sb_str(&h, "}");
    while (h.n % 8) /* pad with spaces so the data starts 8-byte aligned, as PyTorch writes */
        sb_str(&h, " ");
    if (h.oom) {
        free(h.p);
        return gp__errf(e, GP_ENOMEM, "out of memory");
    }
    size_t total = 8 + h.n + data_len;
    uint8_t *img = malloc(total);
    if (!img) {
        free(h.p);
        return gp__errf(e, GP_ENOMEM, "out of memory (%zu bytes)", total);
    }
    for (int i = 0; i < 8; i++)
        img[i] = (uint8_t)((uint64_t)h.n >> (8 * i));
    memcpy(img + 8, h.p, h.n);
    free(h.p);
    size_t off = 8 + h.n;
    for (size_t i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < t[i].rank; d++)
            numel *= (size_t)t[i].shape[d];
        size_t bytes = numel * dtypes[t[i].dtype].size;
        if (bytes) memcpy(img + off, t[i].data, bytes);
        off += bytes;
    }
    *out = img;
    *out_len = total;
    return GP_OK;
}
