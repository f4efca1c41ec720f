/*
 * The library's one clock: CLOCK_MONOTONIC in nanoseconds. Deadlines (gp_now_ns), queue waits,
 * latencies, stage times and the host backend's event times are all on it.
 */
#ifndef GP_LIB_CLOCK_H
#define GP_LIB_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t gp__now_ns(void) {
    struct timespec ts;
    /* CLOCK_MONOTONIC cannot fail on Linux with a valid pointer. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
