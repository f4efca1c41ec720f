/* quickstart: double 4 floats per item on whatever backend is usable. */
#include <gpupipe/gpupipe.h>
#include <stdio.h>

static int twice(void *user, const gp_batch *b) /* host backend: plain pointers */
{
    const float *in = b->in;
    float *out = b->out;
    for (size_t i = 0; i < b->n * 4; i++)
        out[i] = 2.0f * in[i];
    return GP_OK;
}

static void done(void *user, int status, const void *out, size_t bytes)
{
    if (status == GP_OK && ((const float *)out)[0] != 2.0f * *(float *)user)
        fprintf(stderr, "wrong result\n");
}

int main(void)
{
    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = GP_BACKEND_HOST;
    cfg.item_in_bytes = cfg.item_out_bytes = 4 * sizeof(float);
    cfg.compute = twice;
    gp_pipeline *p;
    char err[256];
    if (gp_pipeline_create(&cfg, &p, err, sizeof err) != GP_OK)
        return fprintf(stderr, "create: %s\n", err), 1;
    static float x[1000][4];
    for (int i = 0; i < 1000; i++) {
        x[i][0] = (float)i;
        gp_pipeline_submit(p, x[i], sizeof x[i], done, &x[i][0]);
    }
    gp_pipeline_drain(p, -1);
    gp_pipeline_report(p, stdout);
    return gp_pipeline_destroy(p, GP_DESTROY_DRAIN) == GP_OK ? 0 : 1;
}
