/* Error strings and names, generated from the one table in gpupipe.h; names of enums. */
#include <string.h>

#include "errsink.h"

const char *gp_strerror(int code) {
    switch (code) {
#define GP__ERR_STR(name, value, text)                                                             \
    case GP_##name:                                                                                \
        return text;
        GP_ERRNO_MAP(GP__ERR_STR)
#undef GP__ERR_STR
    }
    return "unknown error";
}

const char *gp_err_name(int code) {
    switch (code) {
#define GP__ERR_NAME(name, value, text)                                                            \
    case GP_##name:                                                                                \
        return "GP_" #name;
        GP_ERRNO_MAP(GP__ERR_NAME)
#undef GP__ERR_NAME
    }
    return "GP_UNKNOWN";
}

int gp__is_err(int code) {
    return code != GP_OK && strcmp(gp_err_name(code), "GP_UNKNOWN") != 0;
}

const char *gp_version(void) {
    return GP_VERSION_STRING;
}

const char *gp_backend_name(gp_backend b) {
    switch (b) {
    case GP_BACKEND_AUTO:
        return "auto";
    case GP_BACKEND_HOST:
        return "host";
    case GP_BACKEND_CUDA:
        return "cuda";
    }
    return "unknown";
}

const char *gp_close_reason_name(gp_close_reason r) {
    static const char *const names[GP_CLOSE_COUNT_] = {"full",  "preferred", "delay", "slot-free",
                                                       "flush", "shutdown",  "bytes"};
    return (unsigned)r < GP_CLOSE_COUNT_ ? names[r] : "unknown";
}
