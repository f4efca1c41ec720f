/*
 * The CUDA module's entry (lib/backend.h): libgpupipe-cuda.so exports GP__MODULE_ENTRY, which
 * returns the CUDA backend's tables: the device interface (backend.c) and the model layers
 * (model.c). The static library links this file in and calls the entry directly.
 */
#include "gpupipe/version.h"

#include "../backend.h"
#include "../device.h"
#include "../model/exec.h"

extern const gp__device_ops gp__cuda_ops;        /* backend.c */
extern const gp__model_exec gp__model_cuda_exec; /* model.c */

static const gp__backend cuda_backend = {
    .id = GP_BACKEND_CUDA,
    .name = "cuda",
    .dev = &gp__cuda_ops,
    .model = &gp__model_cuda_exec,
};

static const gp__module cuda_module = {
    .abi = GP__MODULE_ABI,
    .version = GP_VERSION_STRING,
    .sizeof_config = sizeof(gp_config),
    .sizeof_batch = sizeof(gp_batch),
    .backend = &cuda_backend,
};

GP__MODULE_EXPORT const gp__module *gp__module_cuda(void);
GP__MODULE_EXPORT const gp__module *gp__module_cuda(void) {
    return &cuda_module;
}
