/*
 * The backend table (docs/DESIGN.md §5). A backend is a name, a way to load it, and two tables:
 * the device interface the pipeline drives (device.h) and the model runtime's layers on it
 * (model/exec.h). The pipeline chooses a backend from the table; the model runtime finds its
 * layers through the backend of the batch it is given. Beyond that, the library names a backend
 * only to report which one runs (gp_batch.backend; gp_stats.backend, and its cuda_graphs: 0 when
 * the host runs).
 *
 * Loading: host is part of the library. cuda lives in the module libgpupipe-cuda.so (lib/cuda/),
 * which the shared library loads with dlopen on first use, from its own directory first, then
 * the loader's search path; the static library links it in (GP_CUDA_BUILTIN). A module is
 * opened RTLD_NODELETE and never unloaded (the CUDA runtime registers exit handlers), so the
 * dynamic loader's reference count is the only state: the library keeps no global.
 */
#ifndef GP_LIB_BACKEND_H
#define GP_LIB_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "gpupipe/gpupipe.h"

typedef struct gp__device_ops gp__device_ops; /* device.h */
typedef struct gp__model_exec gp__model_exec; /* model/exec.h */

typedef struct gp__backend {
    gp_backend id;               /* GP_BACKEND_HOST or GP_BACKEND_CUDA */
    const char *name;            /* "host", "cuda" */
    const gp__device_ops *dev;   /* the device interface */
    const gp__model_exec *model; /* the model runtime's layers; NULL: none on this backend */
} gp__backend;

/* The backends GP_BACKEND_AUTO tries, in order (the first whose open() succeeds runs). */
int gp__backend_count(void);
gp_backend gp__backend_at(int i);

/*
 * Load backend `id` (HOST or CUDA) and return its tables in *out. GP_OK; GP_ENODEV when it is
 * not available, with the reason in `why` ("module libgpupipe-cuda.so not found ...", "...
 * cannot be loaded: libcudart.so.13: cannot open shared object file", "this build has no CUDA
 * backend"); GP_EINVAL for an id that is not a backend. Any thread.
 */
int gp__backend_load(gp_backend id, const gp__backend **out, char *why, size_t why_len);

/* ---- the module interface -------------------------------------------------------------------
 * A backend module exports one function, GP__MODULE_ENTRY, returning a gp__module. The library
 * checks that the module was built from the same version and against the same internal
 * interfaces (GP__MODULE_ABI) before it uses any table. */

/* Bump on any change to a struct or table a module shares with the library (device.h,
   backend.h, model/model_impl.h, model/exec.h, errsink.h, gp_batch, gp_config). */
#define GP__MODULE_ABI 3u

typedef struct gp__module {
    uint32_t abi;         /* GP__MODULE_ABI the module was built with */
    const char *version;  /* GP_VERSION_STRING the module was built with */
    size_t sizeof_config; /* sizeof(gp_config) */
    size_t sizeof_batch;  /* sizeof(gp_batch) */
    const gp__backend *backend;
} gp__module;

typedef const gp__module *(*gp__module_entry_fn)(void);
#define GP__MODULE_ENTRY "gp__module_cuda"
#define GP__MODULE_FILE "libgpupipe-cuda.so"

#if defined(__GNUC__)
#define GP__MODULE_EXPORT __attribute__((visibility("default")))
#else
#define GP__MODULE_EXPORT
#endif

#endif
