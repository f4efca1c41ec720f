/* Model runtime helpers: dtype and precision names (the public ones); gp__errf is in common.c. */
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model_impl.h"

const char *gp_dtype_name(gp_dtype t) {
    switch (t) {
    case GP_DTYPE_F32:
        return "f32";
    case GP_DTYPE_U8:
        return "u8";
    case GP_DTYPE_I64:
        return "i64";
    case GP_DTYPE_I32:
        return "i32";
    case GP_DTYPE_F16:
        return "f16";
    case GP_DTYPE_BF16:
        return "bf16";
    case GP_DTYPE_U32:
        return "u32";
    }
    return "?";
}

size_t gp_dtype_size(gp_dtype t) {
    switch (t) {
    case GP_DTYPE_F32:
    case GP_DTYPE_I32:
    case GP_DTYPE_U32:
        return 4;
    case GP_DTYPE_U8:
        return 1;
    case GP_DTYPE_I64:
        return 8;
    case GP_DTYPE_F16:
    case GP_DTYPE_BF16:
        return 2;
    }
    return 0;
}

const char *gp_precision_name(gp_precision p) {
    switch (p) {
    case GP_PRECISION_FP32:
        return "fp32";
    case GP_PRECISION_TF32:
        return "tf32";
    case GP_PRECISION_FP16:
        return "fp16";
    case GP_PRECISION_BF16:
        return "bf16";
    }
    return "?";
}

int gp_precision_parse(const char *name, gp_precision *out) {
    static const gp_precision all[] = {GP_PRECISION_FP32, GP_PRECISION_TF32, GP_PRECISION_FP16,
                                       GP_PRECISION_BF16};
    if (!name || !out) return GP_EINVAL;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(name, gp_precision_name(all[i])) == 0) {
            *out = all[i];
            return GP_OK;
        }
    }
    return GP_EINVAL;
}
