/*
 * Per-op time (options.profile; include/gpupipe/model.h): the counters behind gp_model.prof.
 * profile.c reads and prints them; the backends add to them through gp__prof_batch and
 * gp__prof_untimed (common.c, which a backend module links too). Relaxed atomics: each counter
 * is exact, a read during a batch may see part of it.
 */
#ifndef GP_LIB_MODEL_PROFILE_H
#define GP_LIB_MODEL_PROFILE_H

#include <stdatomic.h>

typedef struct gp__prof_op {
    atomic_uint_fast64_t ns, batches, items;
} gp__prof_op;

struct gp__prof {
    atomic_uint_fast64_t untimed; /* batches not timed: CUDA graph replays, unreadable events */
    int n;                        /* the model's ops */
    gp__prof_op op[];
};

#endif
