/* CUDA, cuBLAS(Lt) and cuDNN statuses as gpupipe errors (check.h). */
#include "check.h"

#include <stdio.h>
#include <string.h>

void gp__cu_describe(gp__cu_status s, const char **name, const char **text) {
    switch (s.lib) {
    case GP__LIB_CUDART:
        *name = cudaGetErrorName((cudaError_t)s.code);
        *text = cudaGetErrorString((cudaError_t)s.code);
        return;
    case GP__LIB_CUBLAS:
        *name = cublasLtGetStatusName((cublasStatus_t)s.code);
        *text = cublasLtGetStatusString((cublasStatus_t)s.code);
        return;
    default:
#ifdef GP_HAVE_CUDNN
        *name = cudnnGetErrorString((cudnnStatus_t)s.code); /* "CUDNN_STATUS_..." */
        *text = "cuDNN status";
#else
        *name = *text = "?";
#endif
        return;
    }
}

int gp__cu_is_sticky(gp__cu_status s) {
    if (s.lib != GP__LIB_CUDART) return 0;
    switch ((cudaError_t)s.code) {
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorExternalDevice:
    case cudaErrorMpsClientTerminated: /* "the process must be terminated" */
    case cudaErrorTensorMemoryLeak:    /* "further CUDA work will return the same error" */
        return 1;
    default:
        return 0;
    }
}

int gp__cu_code(gp__cu_status s) {
    if (s.code == 0) return GP_OK;
    switch (s.lib) {
    case GP__LIB_CUDART:
        return s.code == (int)cudaErrorMemoryAllocation ? GP_ENOMEM : GP_EDEVICE;
    case GP__LIB_CUBLAS:
        return s.code == (int)CUBLAS_STATUS_ALLOC_FAILED ? GP_ENOMEM : GP_EDEVICE;
    default:
#ifdef GP_HAVE_CUDNN
        return s.code == (int)CUDNN_STATUS_ALLOC_FAILED ? GP_ENOMEM : GP_EDEVICE;
#else
        return GP_EDEVICE;
#endif
    }
}

void gp__cu_format(gp__cu_status s, const char *call, char *buf, size_t len) {
    const char *name, *text;
    gp__cu_describe(s, &name, &text);
    int call_len = (int)strcspn(call, "(");
    while (call_len > 0 && call[call_len - 1] == ' ') /* "the compute (...)": no double space */
        call_len--;
    snprintf(buf, len, "%.*s failed: %s (%d): %s", call_len, call, name ? name : "?", s.code,
             text ? text : "?");
}

int gp__cu_record(gp__errsink *sink, gp__cu_status s, const char *call, const char *context,
                  const char *file, int line) {
    if (s.code == 0) return GP_OK;
    char what[256];
    gp__cu_format(s, call, what, sizeof what);
    int code = gp__cu_code(s);
    return gp__err_record(sink, code, file, line, "%s%s%s", what, context ? " " : "",
                          context ? context : "");
}
