/*
 * libFuzzer target: the model loader on arbitrary bytes. The input is a safetensors image;
 * when it loads, the model is described and run on one zero item, so the IR the loader
 * accepted is also exercised. Any crash, leak or sanitizer report is a bug: the loader must
 * answer GP_OK or an error code for every input.
 */
#include <gpupipe/model.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gp_model *m = NULL;
    char err[256];
    int rc = gp_model_load_memory(data, size, NULL, &m, err, sizeof err);
    if (rc != GP_OK) {
        if (m != NULL || err[0] == '\0' || rc >= 0)
            __builtin_trap(); /* errors must leave nothing and say why */
        return 0;
    }
    size_t ib = gp_model_input_bytes(m), ob = gp_model_output_bytes(m);
    /* Run small models only: the fuzzer looks for loader bugs, not for slow convolutions. */
    if (ib <= (1u << 16) && ob <= (1u << 16) && gp_model_flops(m) < 2e6) {
        void *in = calloc(1, ib), *out = malloc(ob);
        if (in && out && gp_model_run_host(m, 1, in, out, err, sizeof err) != GP_OK)
            __builtin_trap();
        free(in);
        free(out);
    }
    FILE *devnull = fopen("/dev/null", "w");
    if (devnull) {
        gp_model_describe(m, devnull);
        fclose(devnull);
    }
    gp_model_free(m);
    return 0;
}
