/* Host implementation of every op (the reference; model_impl.h gives the semantics). */
#ifndef GP_LIB_MODEL_HOST_H
#define GP_LIB_MODEL_HOST_H

#include "model_impl.h"
#include "util.h"

/* After the IR is built: pack CONV2D / LINEAR weights for the host GEMM (op->host_packed) and
   set m->host_work_elems. GP_ENOMEM. */
int gp__host_prepare(gp__model *m, gp__err *e);

/* Run n items on the calling thread with scratch of its own (gp_model_run_host).
   GP_OK, GP_ENOMEM, GP_EINVAL. */
int gp__host_run_alone(gp__model *m, size_t n, const void *in, void *out);

/* The same for a variable-length model: item k at in + off[k] .. in + off[k + 1] (bytes; off[0]
   need not be 0). Errors (an item that is not whole tokens) go to `e`. */
int gp__host_run_packed(gp__model *m, size_t n, const void *in, const uint64_t *off, void *out,
                        gp__err *e);

/* For tests: run a variable-length model's ops 0..op on n packed items and copy op `op`'s
   token value ([tokens][out.c] floats) to `out`. GP_EINVAL when that op does not write a
   token buffer (the last op writes the output). */
int gp__host_run_tokens(gp__model *m, size_t n, const void *in, const uint64_t *off, int op,
                        float *out, gp__err *e);

#endif
