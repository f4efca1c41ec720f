/*
 * Per-op time (options.profile; include/gpupipe/model.h): the counters behind gp_model.prof.
 * profile.c reads, resets and prints them; the backends add a batch through gp__prof_batch and
 * gp__prof_untimed (common.c, which a backend module links too). One mutex: a batch's ops are
 * added, and a reset or a read done, as one step, so every op always holds the same batches
 * (taken once per batch, by the completion path, never on the launch path).
 */
#ifndef GP_LIB_MODEL_PROFILE_H
#define GP_LIB_MODEL_PROFILE_H

#include <pthread.h>
#include <stdint.h>

typedef struct gp__prof_op {
    uint64_t ns, batches, items;
} gp__prof_op;

struct gp__prof {
    pthread_mutex_t mu;
    uint64_t untimed; /* batches not timed: CUDA graph replays, unreadable events */
    int n;            /* the model's ops */
    gp__prof_op op[];
};

#endif
