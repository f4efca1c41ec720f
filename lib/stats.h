/*
 * Pipeline counters. Each field names its writer; readers (gp_pipeline_stats from any
 * thread) load them relaxed, one by one. Single-writer fields are bumped with a relaxed
 * load + store (no read-modify-write on the hot path); shared ones with fetch_add.
 */
#ifndef GP_LIB_STATS_H
#define GP_LIB_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "gpupipe/gpupipe.h"

/* Log-linear histogram of nanoseconds: 16 sub-buckets per power of two, so a bucket's width
   is at most 1/16 of its lower bound. No allocation per value. */
#define GP__HIST_SUB 16
#define GP__HIST_BUCKETS (61 * GP__HIST_SUB)

typedef struct gp__hist {
    _Atomic uint64_t b[GP__HIST_BUCKETS];
} gp__hist;

static inline unsigned gp__hist_index(uint64_t v)
{
    if (v < GP__HIST_SUB)
        return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    return (msb - 3u) * GP__HIST_SUB + (unsigned)((v >> (msb - 4u)) & (GP__HIST_SUB - 1));
}

/* Single writer. */
static inline void gp__hist_add1(gp__hist *h, uint64_t v)
{
    _Atomic uint64_t *c = &h->b[gp__hist_index(v)];
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}
/* Any number of writers. */
static inline void gp__hist_add(gp__hist *h, uint64_t v)
{
    atomic_fetch_add_explicit(&h->b[gp__hist_index(v)], 1, memory_order_relaxed);
}
/* Value at quantile q in [0, 1] (bucket midpoint); 0 when empty. max: largest bucket's top. */
uint64_t gp__hist_quantile(const gp__hist *h, double q);
uint64_t gp__hist_max(const gp__hist *h);

#define GP__BUMP1(field, v)                                                                    \
    atomic_store_explicit(&(field), atomic_load_explicit(&(field), memory_order_relaxed) + (v), \
                          memory_order_relaxed)
#define GP__BUMP(field, v) atomic_fetch_add_explicit(&(field), (v), memory_order_relaxed)
#define GP__READ(field) atomic_load_explicit(&(field), memory_order_relaxed)

/* Union of stage intervals, fed in dispatch order by the poller. */
typedef struct gp__busy {
    _Atomic uint64_t ns;
    uint64_t last_end; /* poller only */
} gp__busy;

static inline void gp__busy_add(gp__busy *b, uint64_t start, uint64_t end)
{
    if (end <= start)
        return;
    if (start < b->last_end)
        start = b->last_end;
    if (end > start)
        GP__BUMP1(b->ns, end - start);
    if (end > b->last_end)
        b->last_end = end;
}

typedef struct gp__stats {
    uint64_t t_create_ns; /* read-only */

    /* producers (rare paths only) */
    _Alignas(64) _Atomic uint64_t rejected_full;
    _Atomic uint64_t backpressure_ns;
    _Atomic uint64_t abandoned;

    /* batcher */
    _Alignas(64) _Atomic uint64_t batches, batch_items;
    _Atomic uint64_t batch_hist[GP_HIST_BUCKETS];
    _Atomic uint64_t close_reasons[GP_CLOSE_COUNT_];
    _Atomic uint64_t starved_ns, saturated_ns, enqueue_ns;
    _Atomic uint64_t h2d_bytes, d2h_bytes;
    gp__hist queue_wait;

    /* poller */
    _Alignas(64) gp__busy h2d, compute, d2h;

    /* callback workers and prep workers */
    _Alignas(64) _Atomic uint64_t completed, completed_ok, timed_out, canceled, failed;
    _Atomic uint64_t callback_busy_ns, prep_busy_ns;
    gp__hist latency;
} gp__stats;

struct gp_pipeline;
void gp__stats_snapshot(struct gp_pipeline *p, gp_stats *out);

#endif
