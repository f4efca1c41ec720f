/* A program outside the tree: built against the installed gpupipe, runs one item. */
#include <gpupipe/gpupipe.h>
#include <stdio.h>
#include <string.h>

static int inc(void *user, const gp_batch *b) {
    const unsigned char *in = b->in;
    unsigned char *out = b->out;
    for (size_t i = 0; i < b->n; i++)
        out[i] = (unsigned char)(in[i] + 1);
    return GP_OK;
}

int main(void) {
    gp_config c;
    gp_config_init(&c);
    c.backend = GP_BACKEND_HOST;
    c.item_in_bytes = c.item_out_bytes = 1;
    c.compute = inc;
    gp_pipeline *p;
    char err[256];
    if (gp_pipeline_create(&c, &p, err, sizeof err) != GP_OK) {
        fprintf(stderr, "create: %s\n", err);
        return 1;
    }
    unsigned char in = 41, out = 0;
    int rc = gp_pipeline_infer(p, &in, 1, &out, 1);
    gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
    if (rc != GP_OK || out != 42 || strcmp(gp_version(), GP_VERSION_STRING) != 0) {
        fprintf(stderr, "consumer: rc %d out %d version %s\n", rc, out, gp_version());
        return 1;
    }
    printf("consumer: gpupipe %s ok\n", gp_version());
    return 0;
}
