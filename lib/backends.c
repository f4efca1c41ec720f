/*
 * The backend table and the loading of backend modules (backend.h). Compiled twice: into the
 * shared library (the CUDA backend comes from the module, found with dlopen) and, with
 * GP_CUDA_BUILTIN, into the static library (the module's objects are linked in).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "device.h"

extern const gp__backend gp__host_backend; /* host/backend.c */
#ifdef GP_CUDA_BUILTIN
const gp__module *gp__module_cuda(void); /* cuda/module.c, linked in */
#endif

static int load_host(const gp__backend **out, char *why, size_t len);
static int load_cuda(const gp__backend **out, char *why, size_t len);

/* In the order AUTO tries them. */
static const struct {
    gp_backend id;
    int (*load)(const gp__backend **out, char *why, size_t len);
} table[] = {
    {GP_BACKEND_CUDA, load_cuda},
    {GP_BACKEND_HOST, load_host},
};
#define NTABLE ((int)(sizeof table / sizeof table[0]))

int gp__backend_count(void) {
    return NTABLE;
}

gp_backend gp__backend_at(int i) {
    return i >= 0 && i < NTABLE ? table[i].id : GP_BACKEND_AUTO;
}

int gp__backend_load(gp_backend id, const gp__backend **out, char *why, size_t why_len) {
    if (why && why_len) why[0] = '\0';
    *out = NULL;
    for (int i = 0; i < NTABLE; i++)
        if (table[i].id == id) return table[i].load(out, why, why_len);
    if (why && why_len) snprintf(why, why_len, "backend %d is not in the backend table", (int)id);
    return GP_EINVAL;
}

static int load_host(const gp__backend **out, char *why, size_t len) {
    *out = &gp__host_backend;
    return GP_OK;
}

#if defined(GP_CUDA_BUILTIN) || defined(GP_HAVE_CUDA)
/* A module's tables, once its entry checked out. */
static int accept_module(const gp__module *m, const char *where, const gp__backend **out, char *why,
                         size_t len) {
    if (!m || !m->backend) {
        snprintf(why, len, "module %s returned no backend", where);
        return GP_ENODEV;
    }
    if (m->abi != GP__MODULE_ABI || strcmp(m->version, GP_VERSION_STRING) != 0 ||
        m->sizeof_config != sizeof(gp_config) || m->sizeof_batch != sizeof(gp_batch)) {
        snprintf(why, len,
                 "module %s was built for gpupipe %s (module ABI %u), this library is %s (ABI %u): "
                 "install the module built with this library",
                 where, m->version ? m->version : "?", (unsigned)m->abi, GP_VERSION_STRING,
                 (unsigned)GP__MODULE_ABI);
        return GP_ENODEV;
    }
    *out = m->backend;
    return GP_OK;
}
#endif

#if defined(GP_CUDA_BUILTIN)
static int load_cuda(const gp__backend **out, char *why, size_t len) {
    return accept_module(gp__module_cuda(), "(linked in)", out, why, len);
}
#elif defined(GP_HAVE_CUDA)
/* Open `path` (a full path, or a bare name for the loader's search path) and check its entry.
   GP_ENODEV with the reason; *missing is set when the file itself was not found. */
static int open_module(const char *path, const gp__backend **out, int *missing, char *why,
                       size_t len) {
    *missing = 0;
    /* RTLD_NODELETE: never unloaded, as backend.h says. RTLD_LOCAL: its CUDA symbols stay its
       own. dlerror is per thread in glibc. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *e = dlerror();
        size_t n = strlen(GP__MODULE_FILE);
        /* "libgpupipe-cuda.so: cannot open shared object file": the module itself is absent
           (a dependency that is absent is named instead). */
        *missing = e && strstr(e, "cannot open shared object file") &&
                   (strncmp(e, path, strlen(path)) == 0 || strncmp(e, GP__MODULE_FILE, n) == 0);
        snprintf(why, len, "CUDA module %s cannot be loaded: %s", path, e ? e : "dlopen failed");
        return GP_ENODEV;
    }
    gp__module_entry_fn entry;
    /* POSIX's way to turn a dlsym result into a function pointer. */
    *(void **)(&entry) = dlsym(h, GP__MODULE_ENTRY);
    if (!entry) {
        snprintf(why, len, "%s has no entry point %s: not a gpupipe backend module", path,
                 GP__MODULE_ENTRY);
        return GP_ENODEV;
    }
    return accept_module(entry(), path, out, why, len);
}

static int load_cuda(const gp__backend **out, char *why, size_t len) {
    char dir[4096] = "", path[4096 + 64]; /* a PATH_MAX directory, named in the reason */
    int missing = 1, rc = GP_ENODEV;
    Dl_info info;
    /* Beside this library first: an installation keeps the two together, whatever the loader
       path says. */
    if (dladdr((const void *)&gp__backend_load, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash && (size_t)(slash - info.dli_fname) < sizeof dir) {
            memcpy(dir, info.dli_fname, (size_t)(slash - info.dli_fname));
            dir[slash - info.dli_fname] = '\0';
        }
    }
    if (dir[0]) {
        snprintf(path, sizeof path, "%s/%s", dir, GP__MODULE_FILE);
        if (access(path, F_OK) == 0) return open_module(path, out, &missing, why, len);
    }
    rc = open_module(GP__MODULE_FILE, out, &missing, why, len);
    if (rc != GP_OK && missing)
        snprintf(why, len,
                 "CUDA module %s not found: this installation has no CUDA support; install "
                 "the module beside libgpupipe (looked in %s and the loader's search path)",
                 GP__MODULE_FILE, dir[0] ? dir : "the library's directory");
    return rc;
}
#else
static int load_cuda(const gp__backend **out, char *why, size_t len) {
    snprintf(why, len,
             "this build has no CUDA backend (GP_WITH_CUDA=OFF or no toolkit at build time)");
    return GP_ENODEV;
}
#endif
