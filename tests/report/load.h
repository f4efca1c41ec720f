/*
 * Load for the stats and doctor tests: producer threads that submit as fast as the ring takes
 * items, or at a fixed interval, through submit or submit_prep; callbacks that count and may
 * sleep (a slow callback). Header-only, one instance per scenario, no globals.
 */
#ifndef GPT_REPORT_LOAD_H
#define GPT_REPORT_LOAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "gpt.h"

#define LOAD_MAX_PRODUCERS 8
#define LOAD_MAX_ITEM (64 * 1024)

typedef struct load {
    gp_pipeline *p;
    size_t in_bytes;
    int producers;
    double interval_us; /* per producer; 0 = as fast as the ring allows */
    int use_prep;       /* submit through gp_pipeline_submit_prep */
    double cb_sleep_us; /* each callback sleeps this long */
    _Atomic int stop;
    _Atomic uint64_t submitted, done, done_ok;
    pthread_t th[LOAD_MAX_PRODUCERS];
    unsigned char src[LOAD_MAX_ITEM]; /* input of every item; prep reads it until done */
} load;

static inline void load_sleep_us(double us) {
    if (us <= 0) return;
    struct timespec ts = {(time_t)(us / 1e6),
                          (long)((us - (double)(time_t)(us / 1e6) * 1e6) * 1e3)};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) != 0)
        ;
}

static inline void load_done(void *user, int status, const void *out, size_t bytes) {
    load *l = user;
    load_sleep_us(l->cb_sleep_us);
    if (status == GP_OK) atomic_fetch_add(&l->done_ok, 1);
    atomic_fetch_add(&l->done, 1);
}

static inline void *load_main(void *arg) {
    load *l = arg;
    double next = gpt_now();
    while (!atomic_load(&l->stop)) {
        int rc = l->use_prep ? gp_pipeline_submit_prep(l->p, l->src, l->in_bytes, 0, load_done, l)
                             : gp_pipeline_submit(l->p, l->src, l->in_bytes, load_done, l);
        GPT_CHECK(rc == GP_OK || rc == GP_EAGAIN);
        if (rc == GP_OK) atomic_fetch_add(&l->submitted, 1);
        if (l->interval_us > 0) {
            next += l->interval_us * 1e-6;
            double wait = next - gpt_now();
            if (wait > 0) load_sleep_us(wait * 1e6);
        }
    }
    return NULL;
}

static inline void load_start(load *l, gp_pipeline *p, size_t in_bytes, int producers) {
    GPT_CHECK(producers >= 1 && producers <= LOAD_MAX_PRODUCERS && in_bytes <= LOAD_MAX_ITEM);
    l->p = p;
    l->in_bytes = in_bytes;
    l->producers = producers;
    atomic_store(&l->stop, 0);
    for (int i = 0; i < producers; i++)
        GPT_CHECK(pthread_create(&l->th[i], NULL, load_main, l) == 0);
}

/* Stop the producers and wait until every accepted item has had its callback. */
static inline void load_stop(load *l) {
    atomic_store(&l->stop, 1);
    for (int i = 0; i < l->producers; i++)
        GPT_CHECK(pthread_join(l->th[i], NULL) == 0);
    GPT_RC(gp_pipeline_drain(l->p, 30 * 1000 * 1000), GP_OK);
    GPT_EQ(atomic_load(&l->done), atomic_load(&l->submitted));
}

#endif
