/*
 * Ring with 1..8 producers: every index is claimed exactly once, and the consumer never sees
 * a torn slot (each slot is filled with one word repeated; a mixed slot would show two).
 * Small capacity so the ring wraps many times and producers block on a full ring.
 */
#include <pthread.h>
#include <string.h>

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

int main(void) {
    full_nonblocking();
    for (int producers = 1; producers <= 8; producers++) {
        run(producers);
        printf("ring: %d producer(s) x %d items: ok\n", producers, PER_PRODUCER);
    }
    return 0;
}
