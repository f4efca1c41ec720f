#include <gpupipe/gpupipe.h>
#include <stdio.h>
#include <string.h>
static int nop(void *u, const gp_batch *b) { return GP_OK; }
static void done(void *u, int s, const void *o, size_t n) {}
int main(void) {
    gp_config c; gp_config_init(&c);
    c.backend = GP_BACKEND_HOST; c.item_in_bytes = 64; c.item_out_bytes = 16;
    c.max_batch = 256; c.capacity = 4096; c.compute = nop;
    gp_pipeline *p; if (gp_pipeline_create(&c, &p, NULL, 0)) return 1;
    unsigned char in[64]; memset(in, 1, 64);
    for (int i = 0; i < 200000; i++) gp_pipeline_submit(p, in, 64, done, NULL);
    gp_pipeline_drain(p, -1); gp_pipeline_destroy(p, GP_DESTROY_DRAIN); return 0;
}
