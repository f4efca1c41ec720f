/*
 * Per-op time (options.profile; include/gpupipe/model.h): the counters behind gp_model.prof.
 * profile.c reads, resets and prints them; the backends add a batch through gp__prof_batch and
 * gp__prof_untimed (common.c, which a backend module links too). A timed batch counts for
 * every op at once, so the batches and items are one pair for all ops; one mutex makes adding a
 * batch, a reset and a read each one step (taken once per batch, by the completion path, never
 * on the launch path).
 */
#ifndef GP_LIB_MODEL_PROFILE_H
#define GP_LIB_MODEL_PROFILE_H

#include <pthread.h>
#include <stdint.h>

struct gp__prof {
    pthread_mutex_t mu;
    uint64_t batches, items; /* timed: every op of each (one count for all ops) */
    uint64_t untimed;        /* batches not timed: CUDA graph replays, unreadable events */
    int n;                   /* the model's ops */
    uint64_t ns[];           /* per op, summed over the timed batches */
};

#endif
