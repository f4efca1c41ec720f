/*
 * Stands in for the CUDA layers (lib/model/cuda_*.c) in a CUDA build that has none yet: every
 * entry reports GP_ENOTSUP, so a pipeline on the CUDA backend fails at create with a clear
 * reason while the host backend works. sources.cmake drops this file once cuda_*.c exist.
 */
#include <stdio.h>

#include "model_impl.h"

int gp__model_cuda_setup(gp__model *m, const gp_batch *slot, void **state, char *err,
                         size_t err_len) {
    *state = NULL;
    if (err && err_len)
        snprintf(err, err_len, "this build has no CUDA model layers (lib/model/cuda_*.c)");
    return GP_ENOTSUP;
}

int gp__model_cuda_run(gp__model *m, void *state, const gp_batch *b) {
    return GP_ENOTSUP;
}

void gp__model_cuda_teardown(gp__model *m, void *state, const gp_batch *slot) {}

void gp__model_cuda_free(gp__model *m) {}
