/* A consumer of gpupipe/cuda.h built with pkg-config's flags alone, and with each CMake target
   alone (tests/install/run.sh, CUDA builds): the header compiles, gp_cuda_cudnn is declared in a
   cuDNN build, and on a host batch the accessors return NULL / -1 (cuda.h) without touching CUDA.
 */
#include <stdio.h>
#include <string.h>

#include <gpupipe/cuda.h>

static int g_bad;

static int compute(void *user, const gp_batch *b) {
    (void)user;
    if (gp_cuda_stream(b) != NULL || gp_cuda_cublas(b) != NULL || gp_cuda_cublaslt(b) != NULL ||
        gp_cuda_device(b) != -1)
        g_bad = 1;
    size_t bytes = 1;
    if (gp_cuda_workspace(b, &bytes) != NULL || bytes != 0) g_bad = 1;
#if defined(GP_HAVE_CUDNN)
    if (gp_cuda_cudnn(b) != NULL) g_bad = 1;
#endif
    memcpy(b->out, b->in, b->n * b->in_bytes);
    return 0;
}

int main(void) {
    gp_config c;
    gp_config_init(&c);
    c.backend = GP_BACKEND_HOST;
    c.item_in_bytes = c.item_out_bytes = 4;
    c.compute = compute;
    gp_pipeline *p = NULL;
    char err[256];
    unsigned char in[4] = {1, 2, 3, 4}, out[4];
    if (gp_pipeline_create(&c, &p, err, sizeof err) != GP_OK ||
        gp_pipeline_infer(p, in, 4, out, 4) != GP_OK || memcmp(in, out, 4) != 0) {
        fprintf(stderr, "consumer_cuda: the host pipeline failed: %s\n", err);
        return 1;
    }
    gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
    if (g_bad) {
        fprintf(stderr, "consumer_cuda: a cuda.h accessor returned non-NULL on a host batch\n");
        return 1;
    }
    printf("consumer_cuda: gpupipe/cuda.h with pkg-config's flags: ok\n");
    return 0;
}
