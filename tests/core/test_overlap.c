/*
 * Overlap, structurally, on the host backend with simulated stage costs: 20 ms copy-in,
 * 20 ms compute, 20 ms copy-out per batch, 3 slots, 30 batches. Copies in one direction share
 * one simulated copy engine and computes share one compute engine, as on a GPU. Consecutive
 * batches' stage intervals must intersect (H2D of n+1 with compute of n, D2H of n with
 * compute of n+1) and the total must be under 0.5x the serial sum (30 x 60 ms).
 */
#include <string.h>

#include "gpt.h"

#define BATCHES 30
#define B 16
#define ITEM 4096
#define STAGE_S 0.020

static gp_batch_trace tr[BATCHES + 8];
static int ntr;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void on_batch(void *user, const gp_batch_trace *t) {
    pthread_mutex_lock(&mu);
    if (ntr < BATCHES + 8) tr[ntr] = *t;
    ntr++;
    pthread_mutex_unlock(&mu);
}

static void done(void *user, int status, const void *out, size_t bytes) {
    GPT_RC(status, GP_OK);
}

static double ms(uint64_t t) /* relative to the first batch's start */
{
    return (double)((int64_t)t - (int64_t)tr[0].t_start) * 1e-6;
}

static int intersect(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1) {
    return a0 < b1 && b0 < a1;
}

int main(void) {
    gp_config c;
    gpt_config(&c, GP_BACKEND_HOST);
    c.item_in_bytes = c.item_out_bytes = ITEM;
    c.max_batch = B;
    c.inflight = 3;
    c.max_delay_us = 5000000; /* batches close only when full */
    c.compute = gpt_transform;
    c.sim_copy_bytes_per_s = (double)(B * ITEM) / STAGE_S;
    c.sim_compute_us = STAGE_S * 1e6;
    c.on_batch = on_batch;
    gp_pipeline *p = gpt_create(&c);

    static unsigned char item[ITEM];
    double t0 = gpt_now();
    for (int i = 0; i < BATCHES * B; i++)
        GPT_RC(gp_pipeline_submit(p, item, ITEM, done, NULL), GP_OK);
    GPT_RC(gp_pipeline_drain(p, -1), GP_OK);
    double total = gpt_now() - t0;
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);

    GPT_EQ(ntr, BATCHES);
    double serial = BATCHES * 3 * STAGE_S;
    int h2d_overlaps = 0, d2h_overlaps = 0;
    for (int k = 0; k + 1 < BATCHES; k++) {
        GPT_EQ(tr[k].n, B);
        GPT_EQ(tr[k].reason, GP_CLOSE_FULL);
        const gp_batch_trace *a = &tr[k], *b = &tr[k + 1];
        int ok = intersect(b->t_start, b->t_h2d_done, a->t_h2d_done, a->t_compute_done);
        h2d_overlaps += ok;
        if (!ok)
            printf("  batch %d: h2d [%.1f, %.1f] compute [%.1f, %.1f] ms; batch %d h2d [%.1f, "
                   "%.1f]\n",
                   k, ms(a->t_start), ms(a->t_h2d_done), ms(a->t_h2d_done), ms(a->t_compute_done),
                   k + 1, ms(b->t_start), ms(b->t_h2d_done));
        d2h_overlaps +=
            intersect(a->t_compute_done, a->t_d2h_done, b->t_h2d_done, b->t_compute_done);
    }
    printf("overlap: total %.3f s, serial sum %.3f s (ratio %.2f); H2D(n+1)||compute(n) in "
           "%d/%d pairs, D2H(n)||compute(n+1) in %d/%d pairs\n",
           total, serial, total / serial, h2d_overlaps, BATCHES - 1, d2h_overlaps, BATCHES - 1);
    GPT_EQ(h2d_overlaps, BATCHES - 1);
    GPT_EQ(d2h_overlaps, BATCHES - 1);
    GPT_CHECK(total < 0.5 * serial);
    return 0;
}
