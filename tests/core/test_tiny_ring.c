/*
 * Capacity 1 (a valid config with max_batch 1): the ring must still tell "item i published"
 * from "free for index i + 1". Found by test_stress (GP_STRESS_SEED=0x3c8317413f1f22db
 * GP_STRESS_ROUND=63): with seq == i + 1 for both, a second producer claimed the slot of an
 * item still in the pipeline, overwrote it, and the batcher then waited forever.
 *  - ring: capacity 1 and 2, a published item is not free for the next lap; release frees it;
 *  - pipeline, capacity 1, GP_FULL_FAIL: a submit while the only item is in flight gets
 *    GP_EAGAIN; sequential submits each get one right callback;
 *  - pipeline, capacity 1, GP_FULL_BLOCK: two producers, every item called back once.
 */
#include <stdatomic.h>
#include <string.h>

#include "gpt.h"
#include "ring.h"

#define ITEMS 2000

static gp_backend backend;
static _Atomic int count[2 * ITEMS + 1];
static _Atomic int bad;

static void ring_laps(uint64_t cap) {
    gp__ring r;
    static unsigned char in[2 * 8], out[2 * 8];
    GPT_RC(gp__ring_init(&r, cap, 8, 8, in, out), GP_OK);
    uint64_t idx;
    for (uint64_t lap = 0; lap < 3; lap++) {
        for (uint64_t i = 0; i < cap; i++) {
            GPT_RC(gp__ring_claim(&r, 0, &idx, NULL), GP_OK);
            GPT_EQ(idx, lap * cap + i);
            GPT_CHECK(!gp__ring_is_published(&r, idx));
            gp__ring_publish(&r, idx);
            GPT_CHECK(gp__ring_is_published(&r, idx));
        }
        /* Every slot holds a published item: full, not free for the next lap. */
        GPT_RC(gp__ring_claim(&r, 0, &idx, NULL), GP_EAGAIN);
        gp__ring_release(&r, lap * cap, cap, 0);
        GPT_CHECK(!gp__ring_is_published(&r, (lap + 1) * cap));
    }
    gp__ring_fini(&r);
}

static void done(void *user, int status, const void *out, size_t bytes) {
    int tag = (int)(intptr_t)user;
    if (status != GP_OK || ((const uint32_t *)out)[0] != gpt_word((uint32_t)tag))
        atomic_fetch_add(&bad, 1);
    atomic_fetch_add(&count[tag], 1);
}

static int submit(gp_pipeline *p, int tag) {
    uint32_t w = (uint32_t)tag;
    return gp_pipeline_submit(p, &w, sizeof w, done, (void *)(intptr_t)tag);
}

static gp_pipeline *tiny(gp_full_policy policy, gpt_gate *gate) {
    gp_config c;
    gpt_config(&c, backend);
    c.item_in_bytes = c.item_out_bytes = 4;
    c.max_batch = 1;
    c.capacity = 1;
    c.inflight = 1;
    c.full_policy = policy;
    c.compute = gpt_gate_compute;
    c.compute_user = gate;
    return gpt_create(&c);
}

static void check_counts(int n) {
    for (int i = 0; i < n; i++)
        if (atomic_load(&count[i]) != 1) {
            fprintf(stderr, "item %d: %d callbacks\n", i, atomic_load(&count[i]));
            GPT_EQ(atomic_load(&count[i]), 1);
        }
    GPT_EQ(atomic_load(&bad), 0);
}

static void fail_policy(void) {
    gpt_gate gate;
    gpt_gate_init(&gate);
    memset(count, 0, sizeof count);
    gp_pipeline *p = tiny(GP_FULL_FAIL, &gate);
    GPT_RC(submit(p, 0), GP_OK);
    gpt_gate_wait_entered(&gate, 1); /* item 0 holds the only ring slot */
    GPT_RC(submit(p, 1), GP_EAGAIN);
    gpt_gate_open(&gate);
    GPT_RC(gp_pipeline_drain(p, 5000000), GP_OK);
    GPT_EQ(atomic_load(&count[0]), 1);
    for (int i = 1; i < ITEMS; i++) {
        int rc;
        while ((rc = submit(p, i)) == GP_EAGAIN)
            sched_yield();
        GPT_RC(rc, GP_OK);
    }
    GPT_RC(gp_pipeline_drain(p, 5000000), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    gpt_gate_destroy(&gate);
    check_counts(ITEMS);
}

typedef struct producer {
    gp_pipeline *p;
    int base;
} producer;

static void *produce(void *arg) {
    producer *pr = arg;
    for (int i = 0; i < ITEMS; i++)
        GPT_RC(submit(pr->p, pr->base + i), GP_OK);
    return NULL;
}

static void block_policy(void) {
    gpt_gate gate;
    gpt_gate_init(&gate);
    gpt_gate_open(&gate);
    memset(count, 0, sizeof count);
    gp_pipeline *p = tiny(GP_FULL_BLOCK, &gate);
    producer pr[2] = {{p, 0}, {p, ITEMS}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        GPT_EQ(pthread_create(&th[i], NULL, produce, &pr[i]), 0);
    for (int i = 0; i < 2; i++)
        GPT_EQ(pthread_join(th[i], NULL), 0);
    GPT_RC(gp_pipeline_drain(p, 5000000), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    gpt_gate_destroy(&gate);
    check_counts(2 * ITEMS);
}

int main(int argc, char **argv) {
    backend = gpt_backend(argc, argv);
    ring_laps(1);
    ring_laps(2);
    printf("ring, capacity 1 and 2: ok\n");
    fail_policy();
    printf("pipeline, capacity 1, full fail: ok\n");
    block_policy();
    printf("pipeline, capacity 1, full block, 2 producers: ok\n");
    return 0;
}
