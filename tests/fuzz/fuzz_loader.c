/*
 * libFuzzer target: the model loader on arbitrary bytes. The input is a safetensors image;
 * when it loads, the model is described and run on zero items (a variable-length model: three
 * packed items of token id 0, then one with an id past the vocabulary and one part token, which
 * must be refused), so the IR the loader accepted is also exercised. Any crash, leak or
 * sanitizer report is a bug: the loader must answer GP_OK or an error code for every input.
 */
#include <gpupipe/model.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A variable-length model's host run: items of 1, 3 and 2 tokens (at most max_tokens) of id 0
   must run; an id equal to the vocabulary and an item of part of a token must be refused. */
static void run_packed(gp_model *m, const gp_tensor_info *ii, size_t ib, size_t ob) {
    char err[256];
    size_t tb = ii->bytes, most = tb ? ib / tb : 0;
    if (tb == 0 || most == 0 || ib % tb != 0) __builtin_trap(); /* the header's promise */
    if (ib > (1u << 20) || ob > (1u << 16) || gp_model_flops(m) >= 2e7) return;
    const size_t cnt[3] = {1, most < 3 ? most : 3, most < 2 ? most : 2};
    uint64_t off[4] = {0};
    for (int k = 0; k < 3; k++)
        off[k + 1] = off[k] + cnt[k] * tb;
    unsigned char *in = calloc(1, off[3]), *out = malloc(3 * ob);
    if (in && out) {
        if (gp_model_run_host_packed(m, 3, in, off, out, err, sizeof err) != GP_OK)
            __builtin_trap();
        int64_t vocab = gp_model_vocab(m);
        if (vocab > 0 && vocab <= INT32_MAX && ii->dtype != GP_DTYPE_F32) {
            int64_t bad = vocab; /* the first id past it, in the input's dtype */
            if (ii->dtype == GP_DTYPE_I64)
                memcpy(in + off[1], &bad, 8);
            else {
                int32_t b32 = (int32_t)bad;
                memcpy(in + off[1], &b32, 4);
            }
            if (gp_model_run_host_packed(m, 3, in, off, out, err, sizeof err) == GP_OK)
                __builtin_trap();
        }
        const uint64_t part[2] = {0, tb - 1};
        if (tb > 1 && gp_model_run_host_packed(m, 1, in, part, out, err, sizeof err) != GP_EINVAL)
            __builtin_trap();
    }
    free(in);
    free(out);
}

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
    gp_tensor_info ii;
    if (gp_model_input_info(m, &ii) != GP_OK) __builtin_trap();
    /* Run small models only: the fuzzer looks for loader bugs, not for slow convolutions. */
    if (ii.dims[0] == -1) {
        run_packed(m, &ii, ib, ob);
    } else if (ib <= (1u << 16) && ob <= (1u << 16) && gp_model_flops(m) < 2e6) {
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
