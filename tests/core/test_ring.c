/*
 * Ring with 1..8 producers: every index is claimed exactly once, and the consumer never sees
 * a torn slot (each slot is filled with one word repeated; a mixed slot would show two).
 * Small capacity so the ring wraps many times and producers block on a full ring.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "gpt.h"
#include "ring.h"

#define CAP 64
#define WORDS 32 /* 128-byte items: a torn write would be visible */
#define PER_PRODUCER 100000

typedef struct ctx {
    gp__ring ring;
    int producers;
    uint8_t *seen; /* by (producer, k) */
} ctx;

typedef struct prod {
    ctx *c;
    int id;
} prod;

static void *producer(void *arg) {
    prod *pr = arg;
    gp__ring *r = &pr->c->ring;
    for (uint32_t k = 0; k < PER_PRODUCER; k++) {
        uint64_t idx;
        GPT_RC(gp__ring_claim(r, 1, &idx, NULL), GP_OK);
        uint32_t *slot = gp__ring_in(r, idx);
        uint32_t tag = ((uint32_t)pr->id << 24) | k;
        for (int w = 0; w < WORDS; w++)
            slot[w] = tag;
        gp__ring_item(r, idx)->user = (void *)(uintptr_t)idx;
        gp__ring_publish(r, idx);
    }
    return NULL;
}

static void run(int producers) {
    ctx c = {.producers = producers};
    static uint32_t in[CAP * WORDS], out[CAP];
    GPT_RC(gp__ring_init(&c.ring, CAP, sizeof(uint32_t) * WORDS, sizeof(uint32_t),
                         (unsigned char *)in, (unsigned char *)out),
           GP_OK);
    uint64_t total = (uint64_t)producers * PER_PRODUCER;
    c.seen = calloc(total, 1);
    GPT_CHECK(c.seen);
    pthread_t th[8];
    prod pr[8];
    for (int i = 0; i < producers; i++) {
        pr[i] = (prod){&c, i};
        GPT_EQ(pthread_create(&th[i], NULL, producer, &pr[i]), 0);
    }
    /* Consumer: read in index order, check, release in order (batches of up to 7). */
    uint64_t head = 0;
    while (head < total) {
        uint64_t n = 0;
        while (n < 7 && head + n < total && gp__ring_is_published(&c.ring, head + n)) {
            uint32_t *slot = gp__ring_in(&c.ring, head + n);
            for (int w = 1; w < WORDS; w++)
                GPT_EQ(slot[w], slot[0]);
            GPT_EQ((uintptr_t)gp__ring_item(&c.ring, head + n)->user, head + n);
            uint32_t id = slot[0] >> 24, k = slot[0] & 0xffffff;
            GPT_CHECK(id < (uint32_t)producers && k < PER_PRODUCER);
            uint64_t key = (uint64_t)id * PER_PRODUCER + k;
            GPT_EQ(c.seen[key], 0);
            c.seen[key] = 1;
            n++;
        }
        if (n) gp__ring_release(&c.ring, head, n, 0);
        head += n;
    }
    for (int i = 0; i < producers; i++)
        GPT_EQ(pthread_join(th[i], NULL), 0);
    for (uint64_t i = 0; i < total; i++)
        GPT_EQ(c.seen[i], 1);
    GPT_EQ(gp__ring_claimed(&c.ring), total);
    /* Closed ring refuses claims. */
    GPT_EQ(gp__ring_close(&c.ring), total);
    uint64_t idx;
    GPT_RC(gp__ring_claim(&c.ring, 1, &idx, NULL), GP_ESHUTDOWN);
    free(c.seen);
    gp__ring_fini(&c.ring);
}

static void full_nonblocking(void) {
    gp__ring r;
    static unsigned char in[4 * 8], out[4 * 8];
    GPT_RC(gp__ring_init(&r, 4, 8, 8, in, out), GP_OK);
    uint64_t idx;
    for (int i = 0; i < 4; i++) {
        GPT_RC(gp__ring_claim(&r, 0, &idx, NULL), GP_OK);
        GPT_EQ(idx, i);
        gp__ring_publish(&r, idx);
    }
    GPT_RC(gp__ring_claim(&r, 0, &idx, NULL), GP_EAGAIN);
    gp__ring_release(&r, 0, 1, 0);
    GPT_RC(gp__ring_claim(&r, 0, &idx, NULL), GP_OK);
    GPT_EQ(idx, 4);
    GPT_EQ(gp__ring_run(&r, 3, 4), 1); /* index 3 is the last slot: the span wraps */
    gp__ring_fini(&r);
}

/* Variable-size rings: gp__ring_claimed read by observers while a producer and a consumer
   cycle a 2-slot ring as fast as they can (their claims pass the word an observer read many
   times over while it is preempted). Every reading is at most the claims begun so far and at
   least its predecessor; a rebuild against a `released` that passed the word wrapped by 2^31. */
enum { VCAP = 2, VLEN = 8 };
typedef struct vctx {
    gp__ring ring;
    _Atomic uint64_t begun, ends[VCAP];
    _Atomic int stop, bad;
} vctx;

static void *v_producer(void *arg) {
    vctx *v = arg;
    uint64_t idx, start;
    while (!atomic_load(&v->stop)) {
        atomic_fetch_add(&v->begun, 1);
        if (gp__ring_claim_bytes(&v->ring, 1, VLEN, &idx, &start, NULL) != GP_OK) break;
        atomic_store(&v->ends[idx % VCAP], start + VLEN);
        gp__ring_publish(&v->ring, idx);
    }
    return NULL;
}

static void *v_consumer(void *arg) {
    vctx *v = arg;
    for (uint64_t i = 0; !atomic_load(&v->stop); i++) {
        while (!gp__ring_is_published(&v->ring, i))
            if (atomic_load(&v->stop)) return NULL;
        gp__ring_release(&v->ring, i, 1, atomic_load(&v->ends[i % VCAP]));
    }
    return NULL;
}

static void *v_observer(void *arg) {
    vctx *v = arg;
    uint64_t last = 0;
    while (!atomic_load(&v->stop)) {
        uint64_t c = gp__ring_claimed(&v->ring), begun = atomic_load(&v->begun);
        if (c > begun || c < last) {
            fprintf(stderr, "gp__ring_claimed read %llu after %llu, with %llu claims begun\n",
                    (unsigned long long)c, (unsigned long long)last, (unsigned long long)begun);
            atomic_store(&v->bad, 1);
        }
        last = c;
    }
    return NULL;
}

static void claimed_observed(void) {
    static unsigned char in[64], out[VCAP * 8];
    vctx *v = calloc(1, sizeof *v);
    GPT_CHECK(v);
    GPT_RC(gp__ring_init_arena(&v->ring, VCAP, sizeof in, 8, in, out), GP_OK);
    pthread_t t[4];
    void *(*fn[4])(void *) = {v_producer, v_consumer, v_observer, v_observer};
    for (int i = 0; i < 4; i++)
        GPT_EQ(pthread_create(&t[i], NULL, fn[i], v), 0);
    double t0 = gpt_now();
    while (gpt_now() - t0 < 1.5 && !atomic_load(&v->bad)) {
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    atomic_store(&v->stop, 1);
    gp__ring_close(&v->ring); /* a producer blocked on a full ring returns */
    for (int i = 0; i < 4; i++)
        GPT_EQ(pthread_join(t[i], NULL), 0);
    GPT_EQ(atomic_load(&v->bad), 0);
    printf("ring: gp__ring_claimed observed over %llu variable-size claims: ok\n",
           (unsigned long long)atomic_load(&v->begun));
    gp__ring_fini(&v->ring);
    free(v);
}

int main(void) {
    full_nonblocking();
    claimed_observed();
    for (int producers = 1; producers <= 8; producers++) {
        run(producers);
        printf("ring: %d producer(s) x %d items: ok\n", producers, PER_PRODUCER);
    }
    return 0;
}
