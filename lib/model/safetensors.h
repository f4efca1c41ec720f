/*
 * safetensors images: strict parsing (header length bounded, JSON well formed, offsets inside
 * the data and non-overlapping, shape x dtype size = byte span for every known dtype) and building
 * (the demo models and the tests write images with it).
 *
 * Layout: 8-byte little-endian header length N, N bytes of JSON (an object: tensor name ->
 * {"dtype", "shape", "data_offsets": [begin, end]} relative to the data, and an optional
 * "__metadata__" object of strings), then the data.
 */
#ifndef GP_LIB_MODEL_SAFETENSORS_H
#define GP_LIB_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "json.h"
#include "util.h"

#define GP__ST_MAX_HEADER 100000000u /* as the reference implementation */
#define GP__ST_MAX_RANK 8
#define GP__ST_SPEC_KEY "gpupipe.spec"

typedef enum gp__st_dtype {
    GP__ST_BOOL,
    GP__ST_U8,
    GP__ST_I8,
    GP__ST_I16,
    GP__ST_U16,
    GP__ST_F16,
    GP__ST_BF16,
    GP__ST_I32,
    GP__ST_U32,
    GP__ST_F32,
    GP__ST_F64,
    GP__ST_I64,
    GP__ST_U64,
    GP__ST_F8_E4M3,
    GP__ST_F8_E5M2,
    /* Any other dtype string (F8_E8M0, C64, a later one): its size is unknown, so only its
       offsets are checked; fine in a tensor the spec does not name, refused in one it does. */
    GP__ST_OTHER,
    GP__ST_DTYPE_COUNT_
} gp__st_dtype;

typedef struct gp__st_tensor {
    const char *name; /* points into the parsed header */
    gp__st_dtype dtype;
    const char *dtype_str; /* as the header spells it (points into the parsed header) */
    int rank;
    uint64_t shape[GP__ST_MAX_RANK];
    uint64_t begin, end; /* byte span in the data section */
} gp__st_tensor;

typedef struct gp__st {
    gp__st_tensor *tensors; /* sorted by name */
    size_t n;
    const char *spec;    /* __metadata__["gpupipe.spec"] or NULL; points into the header */
    const uint8_t *data; /* the data section (inside the caller's image) */
    size_t data_len;
    gp__json json;
} gp__st;

/* Parse and validate the image (kept by reference: it must outlive `out`). GP_EMODEL with the
   problem named; GP_ENOMEM. On error nothing is left allocated. */
int gp__st_parse(const void *image, size_t len, gp__st *out, gp__err *e);
void gp__st_free(gp__st *st);

const gp__st_tensor *gp__st_find(const gp__st *st, const char *name);

/* Size in bytes of one element (0 for GP__ST_OTHER, a dtype the loader does not know). */
size_t gp__st_dtype_size(gp__st_dtype t);

/* Convert a float tensor (F32, F64, F16, BF16) to fp32 into dst (numel floats). GP_EMODEL
   naming the tensor when the dtype is not a float type. */
int gp__st_read_f32(const gp__st *st, const gp__st_tensor *t, float *dst, gp__err *e);

/* One tensor to write. */
typedef struct gp__st_entry {
    const char *name;
    gp__st_dtype dtype;
    int rank;
    uint64_t shape[GP__ST_MAX_RANK];
    const void *data; /* numel * dtype size bytes */
} gp__st_entry;

/* Build an image of `n` tensors (data laid out in the given order) with `spec` (may be NULL)
   in the metadata. *out is malloc'ed. GP_EINVAL (bad entry), GP_ENOMEM. */
int gp__st_build(const gp__st_entry *t, size_t n, const char *spec, void **out, size_t *out_len,
                 gp__err *e);

#endif
