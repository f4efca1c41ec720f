/*
 * End to end: 8 producers x 250 000 items through the pipeline with the known per-item
 * transform. Every output is checked, every callback arrives exactly once, and with one
 * completion worker in submit order: per producer (k increasing) and globally (the submit
 * sequence numbers of reserve/commit items increase). Half the producers copy in with
 * gp_pipeline_submit, half write in place with reserve/commit.
 * Then the same with 4 completion workers (no order promise): exactly once still holds.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "gpt.h"

#define PRODUCERS 8
#define WORDS 4

typedef struct state {
    gp_pipeline *p;
    uint32_t per_producer;
    int ordered;
    uint8_t *seen; /* (producer, k) */
    _Atomic uint64_t callbacks;
    int64_t last_k[PRODUCERS]; /* ordered runs only: one worker */
    uint64_t last_seq;
    int any_seq;
} state;

static state S;

static void fill(uint32_t *w, uint32_t id, uint32_t k) {
    w[0] = id;
    w[1] = k;
    w[2] = id ^ (k * 7u);
    w[3] = 0xabcd0000u | id;
}

static void done(void *user, int status, const void *out, size_t bytes) {
    uint64_t u = (uint64_t)(uintptr_t)user;
    uint32_t id = (uint32_t)(u >> 56), k = (uint32_t)(u >> 32) & 0xffffff;
    uint64_t seq = u & 0xffffffffu;
    GPT_RC(status, GP_OK);
    GPT_EQ(bytes, WORDS * 4);
    uint32_t in[WORDS];
    fill(in, id, k);
    const uint32_t *o = out;
    for (int i = 0; i < WORDS; i++)
        GPT_EQ(o[i], gpt_word(in[i]));
    uint64_t key = (uint64_t)id * S.per_producer + k;
    GPT_EQ(S.seen[key], 0);
    S.seen[key] = 1; /* distinct keys per callback; ordered runs have one worker */
    if (S.ordered) {
        GPT_EQ(S.last_k[id] + 1, k);
        S.last_k[id] = k;
        if (id % 2) { /* reserve/commit producer: knows its sequence number */
            GPT_CHECK(!S.any_seq || seq > S.last_seq);
            S.last_seq = seq;
            S.any_seq = 1;
        }
    }
    atomic_fetch_add_explicit(&S.callbacks, 1, memory_order_relaxed);
}

static void *producer(void *arg) {
    uint32_t id = (uint32_t)(uintptr_t)arg;
    uint32_t w[WORDS];
    for (uint32_t k = 0; k < S.per_producer; k++) {
        uint64_t user = (uint64_t)id << 56 | (uint64_t)k << 32;
        if (id % 2 == 0) {
            fill(w, id, k);
            GPT_RC(gp_pipeline_submit(S.p, w, sizeof w, done, (void *)(uintptr_t)user), GP_OK);
        } else {
            gp_reservation r;
            GPT_RC(gp_pipeline_reserve(S.p, &r), GP_OK);
            GPT_EQ(r.bytes, sizeof w);
            fill(r.data, id, k);
            user |= r.seq & 0xffffffffu;
            GPT_RC(gp_pipeline_commit(S.p, &r, done, (void *)(uintptr_t)user), GP_OK);
        }
    }
    return NULL;
}

static void run(gp_backend backend, uint32_t per_producer, int workers) {
    gp_config cfg;
    gpt_config(&cfg, backend);
    cfg.item_in_bytes = cfg.item_out_bytes = WORDS * 4;
    cfg.compute = gpt_transform;
    cfg.completion_workers = workers;
    cfg.max_batch = 256;
    memset(&S, 0, sizeof S);
    S.per_producer = per_producer;
    S.ordered = workers == 1;
    for (int i = 0; i < PRODUCERS; i++)
        S.last_k[i] = -1;
    S.seen = calloc((size_t)PRODUCERS * per_producer, 1);
    GPT_CHECK(S.seen);
    S.p = gpt_create(&cfg);

    double t0 = gpt_now();
    pthread_t th[PRODUCERS];
    for (uintptr_t i = 0; i < PRODUCERS; i++)
        GPT_EQ(pthread_create(&th[i], NULL, producer, (void *)i), 0);
    for (int i = 0; i < PRODUCERS; i++)
        GPT_EQ(pthread_join(th[i], NULL), 0);
    GPT_RC(gp_pipeline_drain(S.p, -1), GP_OK);
    double dt = gpt_now() - t0;

    uint64_t total = (uint64_t)PRODUCERS * per_producer;
    GPT_EQ(atomic_load(&S.callbacks), total);
    for (uint64_t i = 0; i < total; i++)
        GPT_EQ(S.seen[i], 1);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(S.p, &st), GP_OK);
    GPT_EQ(st.submitted, total);
    GPT_EQ(st.completed, total);
    GPT_EQ(st.completed_ok, total);
    GPT_EQ(st.batch_items, total);
    GPT_RC(gp_pipeline_destroy(S.p, GP_DESTROY_DRAIN), GP_OK);
    GPT_EQ(atomic_load(&S.callbacks), total); /* nothing more after destroy */
    printf("e2e %s: %d producers x %u items, %d worker(s), %llu batches (mean %.1f): "
           "%.2f s\n",
           gp_backend_name(backend), PRODUCERS, per_producer, workers,
           (unsigned long long)st.batches, (double)st.batch_items / (double)st.batches, dt);
    free(S.seen);
}

int main(int argc, char **argv) {
    gp_backend b = gpt_backend(argc, argv);
    run(b, 250000, 1);
    run(b, 50000, 4);
    return 0;
}
