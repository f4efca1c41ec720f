/* quickstart: a pipeline that doubles 4 floats per item, fed by this thread. */
#include <gpupipe/gpupipe.h>
#include <stdio.h>

static int twice(void *user, const gp_batch *b) /* host backend: host pointers */
{
    for (size_t i = 0; i < b->n * 4; i++)
        ((float *)b->out)[i] = 2.0f * ((const float *)b->in)[i];
    return GP_OK;
}

static void done(void *user, int status, const void *out, size_t bytes) {
    if (status != GP_OK || ((const float *)out)[0] != 2.0f * (float)(size_t)user)
        fprintf(stderr, "item %zu: %s\n", (size_t)user, gp_strerror(status));
}

int main(void) {
    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = GP_BACKEND_HOST;
    cfg.item_in_bytes = cfg.item_out_bytes = 4 * sizeof(float);
    cfg.compute = twice;
    gp_pipeline *p;
    if (gp_pipeline_create(&cfg, &p, NULL, 0) != GP_OK) return 1;
    for (size_t i = 0; i < 100000; i++)
        gp_pipeline_submit(p, (float[4]){(float)i}, 4 * sizeof(float), done, (void *)i);
    if (gp_pipeline_drain(p, -1) == GP_OK) gp_pipeline_report(p, stdout); /* all callbacks ran */
    return gp_pipeline_destroy(p, GP_DESTROY_DRAIN) != GP_OK;
}
