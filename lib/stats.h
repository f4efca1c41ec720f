/*
 * Pipeline counters. Each field names its writer; readers (gp_pipeline_stats from any
 * thread) load them relaxed, one by one. Single-writer fields are bumped with a relaxed
 * load + store (no read-modify-write on the hot path); shared ones with fetch_add.
 */
#ifndef GP_LIB_STATS_H
#define GP_LIB_STATS_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "clock.h"
#include "gpupipe/gpupipe.h"

/* Log-linear histogram of nanoseconds: 16 sub-buckets per power of two, so a bucket's width
   is at most 1/16 of its lower bound. No allocation per value. */
#define GP__HIST_SUB 16
#define GP__HIST_BUCKETS (61 * GP__HIST_SUB)

typedef struct gp__hist {
    _Atomic uint64_t b[GP__HIST_BUCKETS];
    _Atomic uint64_t sum; /* of the values, for means and Prometheus _sum */
} gp__hist;

static inline unsigned gp__hist_index(uint64_t v) {
    if (v < GP__HIST_SUB) return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    return (msb - 3u) * GP__HIST_SUB + (unsigned)((v >> (msb - 4u)) & (GP__HIST_SUB - 1));
}

/* Single writer. */
static inline void gp__hist_add1(gp__hist *h, uint64_t v) {
    _Atomic uint64_t *c = &h->b[gp__hist_index(v)];
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&h->sum, atomic_load_explicit(&h->sum, memory_order_relaxed) + v,
                          memory_order_relaxed);
}
/* Any number of writers. */
static inline void gp__hist_add(gp__hist *h, uint64_t v) {
    atomic_fetch_add_explicit(&h->b[gp__hist_index(v)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, v, memory_order_relaxed);
}
/* Value at quantile q in [0, 1] (bucket midpoint); 0 when empty. max: largest bucket's top. */
uint64_t gp__hist_quantile(const gp__hist *h, double q);
uint64_t gp__hist_max(const gp__hist *h);
/* The same over a plain copy of the bucket counts (a window: the difference of two copies). */
void gp__hist_read(const gp__hist *h, uint64_t counts[GP__HIST_BUCKETS]);
uint64_t gp__hist_counts_quantile(const uint64_t counts[GP__HIST_BUCKETS], double q);
uint64_t gp__hist_counts_max(const uint64_t counts[GP__HIST_BUCKETS]);
/* Bucket i holds values in [gp__hist_bucket_low(i), gp__hist_bucket_low(i + 1)). */
uint64_t gp__hist_bucket_low(unsigned i);

#define GP__BUMP1(field, v)                                                                        \
    atomic_store_explicit(&(field), atomic_load_explicit(&(field), memory_order_relaxed) + (v),    \
                          memory_order_relaxed)
#define GP__BUMP(field, v) atomic_fetch_add_explicit(&(field), (v), memory_order_relaxed)
#define GP__READ(field) atomic_load_explicit(&(field), memory_order_relaxed)

/* A timed wait of a single writer (the batcher): begin publishes the start, end clears it
   and adds the time. end clears before it adds, and a reader reads the total before the
   start, so a reader may miss the last wait for a moment but never counts one twice. */
static inline void gp__wait_begin(_Atomic uint64_t *since, uint64_t now) {
    atomic_store_explicit(since, now, memory_order_relaxed);
}
static inline void gp__wait_end(_Atomic uint64_t *since, _Atomic uint64_t *total, uint64_t start) {
    uint64_t end = gp__now_ns();
    atomic_store_explicit(since, 0, memory_order_release);
    atomic_store_explicit(total, atomic_load_explicit(total, memory_order_relaxed) + (end - start),
                          memory_order_release);
}
/* total + the wait in progress, as of `now`. */
static inline uint64_t gp__wait_read(const _Atomic uint64_t *since, const _Atomic uint64_t *total,
                                     uint64_t now) {
    uint64_t t = atomic_load_explicit(total, memory_order_acquire);
    uint64_t s = atomic_load_explicit(since, memory_order_acquire);
    return t + (s && now > s ? now - s : 0);
}

/* Union of stage intervals, fed in dispatch order by the poller. */
typedef struct gp__busy {
    _Atomic uint64_t ns;
    uint64_t last_end; /* poller only */
} gp__busy;

static inline void gp__busy_add(gp__busy *b, uint64_t start, uint64_t end) {
    if (end <= start) return;
    if (start < b->last_end) start = b->last_end;
    if (end > start) GP__BUMP1(b->ns, end - start);
    if (end > b->last_end) b->last_end = end;
}

typedef struct gp__stats {
    uint64_t t_create_ns; /* read-only */

    /* producers (rare paths only) */
    _Alignas(64) _Atomic uint64_t rejected_full;
    _Atomic uint64_t backpressure_ns;
    _Atomic uint64_t abandoned;
    _Atomic uint64_t cancels; /* gp_pipeline_cancel calls that canceled an item */
    _Atomic uint64_t pad_useful, pad_total; /* gp_batch_report_padding sums (computes) */

    /* batcher */
    _Alignas(64) _Atomic uint64_t batches, batch_items;
    _Atomic uint64_t batch_hist[GP_HIST_BUCKETS];
    _Atomic uint64_t close_reasons[GP_CLOSE_COUNT_];
    _Atomic uint64_t starved_ns, saturated_ns, enqueue_ns;
    /* Start of the batcher's wait in progress (0: none), so a snapshot counts a long wait
       before it ends: an idle pipeline reads as starved now, not after the next item. */
    _Atomic uint64_t starved_since, saturated_since;
    /* Holding a partial batch for max_delay_us (items waiting, a slot free). */
    _Atomic uint64_t delay_ns, delay_since;
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

/* ---- windows ---------------------------------------------------------------------------
   Counters over an interval rather than since create: take a mark, later ask for the stats
   since it. Counters and busy times are differences, wall_ns is the interval, percentiles
   come from the difference of the two histograms. gp-bench measures after a warm-up so. */
typedef struct gp__stats_mark {
    gp_stats s;
    uint64_t queue_wait[GP__HIST_BUCKETS];
    uint64_t latency[GP__HIST_BUCKETS];
} gp__stats_mark;

/* Any thread; `m` belongs to the caller (about 16 KiB: not for a small stack). */
void gp__stats_mark_take(struct gp_pipeline *p, gp__stats_mark *m);
/* Fill `out` (every field, struct_size = sizeof) with the stats since `m`. `scratch` is a mark
   the function may overwrite (the "now" side), so nothing large lives on the stack. */
void gp__stats_since(struct gp_pipeline *p, const gp__stats_mark *m, gp__stats_mark *scratch,
                     gp_stats *out);

/* ---- diagnosis (report.c) ----------------------------------------------------------------
   The doctor's verdict as data, so gp_pipeline_report and gp-bench say the same thing. A pure
   function of a snapshot (or a window): nothing here reads the pipeline. */
typedef enum gp__verdict {
    GP__V_NO_WORK = 0,   /* no batch ran yet */
    GP__V_GPU_NOT_USED,  /* backend AUTO fell back to the host */
    GP__V_PRODUCERS,     /* the batcher waits for items: producers starve the device */
    GP__V_PREP,          /* prep workers saturated */
    GP__V_H2D,           /* host-to-device copies saturated */
    GP__V_COMPUTE,       /* compute saturated: the healthy case */
    GP__V_D2H,           /* device-to-host copies saturated */
    GP__V_CALLBACKS,     /* completion workers saturated */
    GP__V_SMALL_BATCHES, /* batches leave on the delay timer far below max_batch */
    GP__V_ENQUEUE,       /* host launch work per batch exceeds the device time */
    GP__V_INFLIGHT,      /* every slot busy, no stage saturated: too few slots */
    GP__V_MIXED,         /* nothing dominates */
    GP__V_COUNT_
} gp__verdict;

typedef struct gp__diag {
    gp__verdict verdict;    /* GP__V_GPU_NOT_USED when AUTO fell back, else == bottleneck */
    gp__verdict bottleneck; /* the pipeline's own limit on the backend that ran */
    /* Derived numbers. Fractions are of wall time; worker utilisations are busy time over
       wall time times the worker count. */
    double wall_s, items_per_s, mean_batch;
    double h2d, compute, d2h, callbacks, prep, enqueue;
    double starved, saturated, backpressure;   /* backpressure: producer-seconds per second */
    double delay_wait;                         /* holding a partial batch for max_delay_us */
    double batch_compute_us, batch_enqueue_us; /* per batch */
    double device_items_per_s;                 /* mean_batch / compute time per batch */
    double h2d_gbps, d2h_gbps;                 /* bytes moved per wall second, 1e9 */
    char why[384];                             /* the numbers that prove the bottleneck */
    char knob[384];                            /* what to turn */
} gp__diag;

/* "producers", "h2d", ...: short, stable, lower case (tables, CSV, JSON, tests). */
const char *gp__verdict_name(gp__verdict v);
/* "producers starve the device", ...: for people. */
const char *gp__verdict_title(gp__verdict v);
void gp__diagnose(const gp_stats *s, gp__diag *d);
/* gp_pipeline_report / gp_pipeline_stats_json for a given snapshot or window. GP_OK, GP_EIO. */
int gp__stats_write_report(const gp_stats *s, FILE *f);
int gp__stats_write_json(const gp_stats *s, FILE *f);
/* Write `s` (NULL: "") as a JSON string literal, escaped. */
void gp__json_str(FILE *f, const char *s);

#endif
