/*
 * attention-bench: the variable-length attention kernel (kernels/attention.cu, gp__k_attention)
 * alone, timed with CUDA events on a packed batch, per token. bench/attention-bench.py runs it
 * next to torch.nn.functional.scaled_dot_product_attention on the same lengths.
 *
 *   attention-bench [--dtype fp16|bf16|fp32] [--heads H] [--head-dim D] [--lengths SPEC]
 *                   [--iters N] [--warmup N] [--simt] [--device N]
 *
 * --lengths: comma-separated items, each L or LxN (N items of L tokens), e.g. 128x64 or
 * 1,2,7,512x8 (default 128x64). --simt forces the SIMT kernel for 16-bit storage (arch 70).
 * Output: one line of key=value pairs (dtype, heads, head_dim, items, tokens, max_len, kernel,
 * iters, us_per_call (median), us_min, ns_per_token, tflops), FLOPs counted as 4 L^2 d per item
 * and head (Q K^T and P V; softmax not counted). Inputs are uniform random, the same every run.
 * Without a usable device it prints why and exits 77.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda/kernels.h"
#include "model/model_impl.h"
#include "bench-spin.h"

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "attention-bench: %s: %s (%s:%d)\n", #call, cudaGetErrorString(e_),    \
                    __FILE__, __LINE__);                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void usage(void) {
    fprintf(stderr, "usage: attention-bench [--dtype fp16|bf16|fp32] [--heads H] [--head-dim D] "
                    "[--lengths L[xN],...] [--iters N] [--warmup N] [--simt] [--device N]\n");
    exit(2);
}

/* Parse "L[xN],..." into lens (grown as needed); returns the count. */
static size_t parse_lengths(const char *spec, size_t **lens) {
    size_t n = 0, cap = 0;
    const char *p = spec;
    *lens = NULL;
    while (*p) {
        char *end;
        unsigned long L = strtoul(p, &end, 10), N = 1;
        if (end == p || L == 0) usage();
        p = end;
        if (*p == 'x') {
            N = strtoul(p + 1, &end, 10);
            if (end == p + 1 || N == 0) usage();
            p = end;
        }
        if (*p == ',')
            p++;
        else if (*p)
            usage();
        for (unsigned long i = 0; i < N; i++) {
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                *lens = realloc(*lens, cap * sizeof **lens);
                if (!*lens) exit(1);
            }
            (*lens)[n++] = L;
        }
    }
    if (n == 0) usage();
    return n;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *dtype = "fp16", *lspec = "128x64";
    int heads = 12, d = 64, iters = 50, warmup = 10, simt = 0, device = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--simt")) {
            simt = 1;
            continue;
        }
        if (!v) usage();
        if (!strcmp(a, "--dtype"))
            dtype = v;
        else if (!strcmp(a, "--heads"))
            heads = atoi(v);
        else if (!strcmp(a, "--head-dim"))
            d = atoi(v);
        else if (!strcmp(a, "--lengths"))
            lspec = v;
        else if (!strcmp(a, "--iters"))
            iters = atoi(v);
        else if (!strcmp(a, "--warmup"))
            warmup = atoi(v);
        else if (!strcmp(a, "--device"))
            device = atoi(v);
        else
            usage();
        i++;
    }
    gp__kt t = !strcmp(dtype, "fp32")   ? GP__KT_F32
               : !strcmp(dtype, "bf16") ? GP__KT_BF16
                                        : GP__KT_F16;
    if (strcmp(dtype, "fp32") && strcmp(dtype, "bf16") && strcmp(dtype, "fp16")) usage();
    if (heads < 1 || d < 1 || iters < 1 || warmup < 0) usage();
    size_t *lens;
    size_t n = parse_lengths(lspec, &lens), T = 0, max_len = 0;

    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= device) {
        printf("attention-bench: no usable CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "device index out of range");
        return 77;
    }
    CK(cudaSetDevice(device));
    int major = 0, minor = 0;
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    int arch = simt ? 70 : major * 10 + minor;
    int path = gp__k_attention_path(t, d, arch);
    if (path == 0) {
        fprintf(stderr, "attention-bench: head dimension %d is not supported (1..%d)\n", d,
                GP__ATTN_MAX_HEAD_DIM);
        return 2;
    }

    double flops = 0.0;
    int64_t *tok = malloc((n + 1) * sizeof *tok);
    if (!tok) return 1;
    tok[0] = 0;
    for (size_t k = 0; k < n; k++) {
        tok[k + 1] = tok[k] + (int64_t)lens[k];
        if (lens[k] > max_len) max_len = lens[k];
        flops += 4.0 * (double)lens[k] * (double)lens[k] * d * heads;
    }
    T = (size_t)tok[n];
    size_t c = (size_t)heads * (size_t)d, es = t == GP__KT_F32 ? 4 : 2, nq = T * 3 * c;
    unsigned char *h = malloc(nq * es);
    if (!h) return 1;
    uint64_t s = 0x61747465ull;
    for (size_t i = 0; i < nq; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)((double)(s >> 11) * (1.0 / 9007199254740992.0) * 4.0 - 2.0);
        if (t == GP__KT_F32)
            memcpy(h + 4 * i, &v, 4);
        else {
            uint16_t b = t == GP__KT_F16 ? gp__f32_to_f16(v) : gp__f32_to_bf16(v);
            memcpy(h + 2 * i, &b, 2);
        }
    }
    void *dq = NULL, *dout = NULL;
    int64_t *dtok = NULL;
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaMalloc(&dq, nq * es));
    CK(cudaMalloc(&dout, T * c * es));
    CK(cudaMalloc((void **)&dtok, (n + 1) * sizeof *dtok));
    CK(cudaMemcpy(dq, h, nq * es, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dtok, tok, (n + 1) * sizeof *tok, cudaMemcpyHostToDevice));

    for (int i = 0; i < warmup; i++)
        CK(gp__k_attention(st, t, dq, dtok, dout, n, max_len, heads, d, arch));
    CK(cudaStreamSynchronize(st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float *ms = malloc((size_t)iters * sizeof *ms);
    if (!ms) return 1;
    for (int i = 0; i < iters; i++) {
        /* 200 us of spin ahead of the start event: the launch below is queued while the GPU
           spins, so the events time the kernel alone (attention-bench.py does the same for
           torch with torch.cuda._sleep). */
        CK(bench_spin_launch(st, 200000, 0, NULL, 1, 0));
        CK(cudaEventRecord(e0, st));
        CK(gp__k_attention(st, t, dq, dtok, dout, n, max_len, heads, d, arch));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    qsort(ms, (size_t)iters, sizeof *ms, cmp_float);
    double med_us = 1e3 * (double)ms[iters / 2], min_us = 1e3 * (double)ms[0];
    printf("attention-bench dtype=%s heads=%d head_dim=%d items=%zu tokens=%zu max_len=%zu "
           "kernel=%s sm=%d%d iters=%d us_per_call=%.2f us_min=%.2f ns_per_token=%.3f "
           "tflops=%.2f\n",
           dtype, heads, d, n, T, max_len, path == 2 ? "mma" : "simt", major, minor, iters, med_us,
           min_us, 1e3 * med_us / (double)T, flops / (med_us * 1e-6) / 1e12);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(dq));
    CK(cudaFree(dout));
    CK(cudaFree(dtok));
    CK(cudaStreamDestroy(st));
    free(ms);
    free(h);
    free(tok);
    free(lens);
    return 0;
}
