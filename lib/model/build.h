/* Building the IR from a spec and a parsed safetensors image. */
#ifndef GP_LIB_MODEL_BUILD_H
#define GP_LIB_MODEL_BUILD_H

#include "model_impl.h"
#include "safetensors.h"
#include "util.h"

/* Fill m's description, ops and buffer plan from `spec_text` and the tensors in `st`.
   GP_EMODEL naming the spec line / tensor and the problem; GP_ENOMEM. On error m holds
   partial state that gp_model_free releases. */
int gp__model_build(gp__model *m, const char *spec_text, const gp__st *st, gp__err *e);

#endif
