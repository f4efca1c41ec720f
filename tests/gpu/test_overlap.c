/*
 * Overlap on a real device, from the pipeline's own stage events (the public per-batch trace,
 * config.on_batch): a spin kernel of known duration (2 ms per batch, exclusive: compute kernels
 * serialize as on a full GPU) and 4 MiB per batch in each direction.
 *
 * Per batch n the events give START(n) <= H2D(n) <= COMPUTE(n) <= D2H(n): the H2D copy is
 * [START, H2D], the D2H copy [COMPUTE, D2H]. The kernel itself runs from
 * max(H2D(n), COMPUTE(n-1)) (its input is there and the previous exclusive kernel is done) to
 * COMPUTE(n).
 *
 *   2 slots:  H2D of n+1 overlaps compute of n, and D2H of n-1 overlaps compute of n
 *             (the claim, where slot reuse makes it exact);
 *   3 slots:  no bubble: the input of n is on the device before compute n-1 ends, and D2H of
 *             n-1 overlaps compute of n.
 * Each must hold for at least 90% of the steady-state batches; the compute engine's busy
 * fraction over the run is printed.
 */
#include <cuda_runtime_api.h>

#include "gpu_kernels.h"
#include "gpu_util.h"

enum { ITEM = 64 << 10, MAX_BATCH = 64, BATCHES = 60 };
#define SPIN_NS 2000000ull

static int spin_compute(void *user, const gp_batch *b) {
    return gput_spin_launch(b->stream, SPIN_NS, 1) == cudaSuccess ? GP_OK : 1;
}

static _Atomic uint64_t done_count;
static void count_done(void *user, int status, const void *out, size_t bytes) {
    GPT_RC(status, GP_OK);
    atomic_fetch_add(&done_count, 1);
}

enum { EV_START, EV_H2D, EV_COMPUTE, EV_D2H, EV_COUNT };
typedef struct times {
    uint64_t t[EV_COUNT];
} times;

/* The trace, in dispatch order (on_batch runs on the poller, one batch at a time). */
static times bt[BATCHES + 8];
static _Atomic size_t nb_traced;

static void on_batch(void *user, const gp_batch_trace *t) {
    size_t i = atomic_load_explicit(&nb_traced, memory_order_relaxed);
    if (i >= BATCHES + 8) return;
    bt[i].t[EV_START] = t->t_start;
    bt[i].t[EV_H2D] = t->t_h2d_done;
    bt[i].t[EV_COMPUTE] = t->t_compute_done;
    bt[i].t[EV_D2H] = t->t_d2h_done;
    atomic_store_explicit(&nb_traced, i + 1, memory_order_release);
}

static uint64_t max64(uint64_t a, uint64_t b) {
    return a > b ? a : b;
}
static uint64_t min64(uint64_t a, uint64_t b) {
    return a < b ? a : b;
}
/* Length of the intersection of [a0, a1] and [b0, b1] (0 when disjoint). */
static uint64_t overlap(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1) {
    uint64_t lo = max64(a0, b0), hi = min64(a1, b1);
    return hi > lo ? hi - lo : 0;
}

int main(int argc, char **argv) {
    int slots = argc > 1 ? atoi(argv[1]) : 2;
    GPT_CHECK(slots == 2 || slots == 3);
    gp_config c;
    gpt_config(&c, GP_BACKEND_CUDA);
    c.item_in_bytes = c.item_out_bytes = ITEM;
    c.max_batch = MAX_BATCH;
    c.capacity = 1024;
    c.inflight = slots;
    c.compute = spin_compute;
    c.on_batch = on_batch;
    gp_pipeline *p = gpt_create(&c);
    static unsigned char input[ITEM];
    for (int i = 0; i < BATCHES * MAX_BATCH; i++)
        GPT_RC(gp_pipeline_submit(p, input, ITEM, count_done, NULL), GP_OK);
    gpu_drain(p);
    GPT_EQ(atomic_load(&done_count), BATCHES * MAX_BATCH);
    size_t nb = atomic_load_explicit(&nb_traced, memory_order_acquire);
    printf("%zu batches traced, %d slots\n", nb, slots);
    GPT_CHECK(nb >= 8);

    /* Kernel intervals. */
    uint64_t busy = 0;
    static uint64_t ks[BATCHES + 8], ke[BATCHES + 8];
    for (size_t b = 0; b < nb; b++) {
        ks[b] = b ? max64(bt[b].t[EV_H2D], bt[b - 1].t[EV_COMPUTE]) : bt[b].t[EV_H2D];
        ke[b] = bt[b].t[EV_COMPUTE];
        busy += ke[b] > ks[b] ? ke[b] - ks[b] : 0;
    }
    uint64_t span = ke[nb - 1] - ks[0];
    printf("compute engine busy %.1f%% of %.1f ms (batch compute %.2f ms)\n",
           100.0 * (double)busy / (double)span, (double)span / 1e6, SPIN_NS / 1e6);

    /* Steady state: skip the ramp-up and the tail. */
    size_t checked = 0, h2d_ok = 0, d2h_ok = 0;
    for (size_t b = 4; b + 2 < nb; b++) {
        const times *prev = &bt[b - 1], *next = &bt[b + 1];
        uint64_t d2h_prev = overlap(prev->t[EV_COMPUTE], prev->t[EV_D2H], ks[b], ke[b]);
        int h2d_good;
        if (slots == 2) /* H2D of n+1 inside compute of n */
            h2d_good = overlap(next->t[EV_START], next->t[EV_H2D], ks[b], ke[b]) > 0;
        else /* input of n was there before the engine freed: no bubble */
            h2d_good = bt[b].t[EV_H2D] <= prev->t[EV_COMPUTE];
        checked++;
        h2d_ok += h2d_good;
        d2h_ok += d2h_prev > 0;
        if (!h2d_good || !d2h_prev)
            printf("batch %zu: start %.3f h2d %.3f compute %.3f d2h %.3f (ms, relative); "
                   "kernel %.3f..%.3f\n",
                   b, (double)(bt[b].t[0] - ks[0]) / 1e6, (double)(bt[b].t[1] - ks[0]) / 1e6,
                   (double)(bt[b].t[2] - ks[0]) / 1e6, (double)(bt[b].t[3] - ks[0]) / 1e6,
                   (double)(ks[b] - ks[0]) / 1e6, (double)(ke[b] - ks[0]) / 1e6);
    }
    printf("%s: %zu/%zu batches; D2H(n-1) overlaps compute(n): %zu/%zu\n",
           slots == 2 ? "H2D(n+1) overlaps compute(n)" : "no bubble before compute(n)", h2d_ok,
           checked, d2h_ok, checked);
    GPT_CHECK(checked > 0);
    GPT_CHECK(h2d_ok * 10 >= checked * 9);
    GPT_CHECK(d2h_ok * 10 >= checked * 9);
    gp_stats s = gpu_stats(p);
    printf("stats: h2d busy %.1f ms, compute busy %.1f ms, d2h busy %.1f ms, wall %.1f ms\n",
           (double)s.h2d_busy_ns / 1e6, (double)s.compute_busy_ns / 1e6,
           (double)s.d2h_busy_ns / 1e6, (double)s.wall_ns / 1e6);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    return 0;
}
