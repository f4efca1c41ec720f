/*
 * Pipeline counters. Each field names its writer; readers (gp_pipeline_stats from any
 * thread) load them relaxed, one by one. Single-writer fields are bumped with a relaxed
 * load + store (no read-modify-write on the hot path); shared ones with fetch_add.
 * Below them: the snapshot and windows over those counters (stats.c), the gp_stats field list
 * as data, and what the doctor (doctor.c) shares with the renderings (render.c).
 */
#ifndef GP_LIB_STATS_H
#define GP_LIB_STATS_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "clock.h"
#include "gpupipe/gpupipe.h"

/* Shards of the producers' per-call counters (pipeline.h's calls in progress, the accepted
   count below): threads rarely share one. */
#define GP__CALL_SHARDS 16

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
/* A plain copy of the bucket counts (a window: the difference of two copies), and the value at
   quantile q in [0, 1] (bucket midpoint; 0 when empty) and the largest bucket's top over one. */
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
    uint64_t t_create_ns; /* read-only: set when create has done its setup, before the threads */
    _Atomic uint64_t t_end_ns; /* when shutdown ended the threads; 0 before: the clock stops */

    /* producers: items accepted (submit, submit_ex, commit; not an abandoned reservation),
       counted before the item is published, on the shard of the call in progress
       (pipeline.h's calls[]) so producers do not share a line; a snapshot sums them. Counted
       directly: derived from the ring's claim count less the abandoned, a snapshot counted
       reservations abandoned while it read (never accepted, and falling later). */
    struct {
        _Alignas(64) _Atomic uint64_t n;
    } accepted[GP__CALL_SHARDS];

    /* producers (rare paths only) */
    _Alignas(64) _Atomic uint64_t rejected_full;
    _Atomic uint64_t backpressure_ns;
    _Atomic uint64_t cancels;               /* gp_pipeline_cancel calls that canceled an item */
    _Atomic uint64_t pad_useful, pad_total; /* gp_batch_report_padding sums (computes) */

    /* batcher */
    _Alignas(64) _Atomic uint64_t batches, batch_items;
    _Atomic uint64_t batch_hist[GP_HIST_BUCKETS];
    _Atomic uint64_t close_reasons[GP_CLOSE_COUNT_];
    _Atomic uint64_t starved_ns, saturated_ns, enqueue_ns;
    _Atomic uint64_t launch_ns; /* of enqueue_ns: inside the backend's launch (the compute) */
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

/* ---- snapshot and windows (stats.c): functions of the counters, not of the pipeline ----- */

/* What a snapshot reads, besides the counters: filled by the pipeline (pipeline.c). */
typedef struct gp__stats_src {
    const gp__stats *t;
    const gp_config *cfg;
    gp_backend backend;
    int fell_back;
    const char *fallback_reason; /* NUL-terminated */
} gp__stats_src;

/* A snapshot with the fine latency histograms it was computed from: a window's start, and the
   scratch for its end. About 16 KiB: always on the heap (gp__stats_mark_new). */
struct gp_stats_mark {
    const void *owner;   /* the pipeline it was taken on */
    uint64_t owner_born; /* its t_create_ns: a later pipeline at the same address is another */
    gp_stats s;
    uint64_t queue_wait[GP__HIST_BUCKETS];
    uint64_t latency[GP__HIST_BUCKETS];
};

/* Every field of `s` (struct_size = sizeof) from the counters of `src`, percentiles and
   latency histograms included; the fine histograms go to qw and lat. Backend counters (graph
   replays) are the caller's to add. Any thread. */
void gp__stats_read(const gp__stats_src *src, gp_stats *s, uint64_t qw[GP__HIST_BUCKETS],
                    uint64_t lat[GP__HIST_BUCKETS]);
/* A zeroed mark owned by `owner`, or NULL. Freed with gp_stats_mark_free. */
gp_stats_mark *gp__stats_mark_new(const void *owner, uint64_t owner_born);
/* The window from `then` to `now` into `out` (every field). `now`'s histograms are
   overwritten with the difference. */
void gp__stats_window(const gp_stats_mark *then, gp_stats_mark *now, gp_stats *out);
/* s->struct_size names a gp_stats this library can read or fill: from the backend field to
   sizeof(gp_stats). */
int gp__stats_size_ok(const gp_stats *s);
/* `s` widened to a full gp_stats: its first struct_size bytes, zeros after. */
void gp__stats_widen(const gp_stats *s, gp_stats *full);
/* The first out->struct_size bytes of `full` into `out`, struct_size kept. */
void gp__stats_copy_out(const gp_stats *full, gp_stats *out);

/* ---- the field list as data (stats.c), for the window and the renderings ----------------- */

typedef enum gp__stat_kind {
    GP__STAT_META,
    GP__STAT_BACKEND,
    GP__STAT_FLAG,
    GP__STAT_TEXT,
    GP__STAT_WALL,
    GP__STAT_COUNT,
    GP__STAT_NS,
    GP__STAT_BYTES,
    GP__STAT_QUANTILE,
    GP__STAT_CONFIG,
    GP__STAT_SIZES,
    GP__STAT_REASONS,
    GP__STAT_LATENCY
} gp__stat_kind;

typedef struct gp__stat_field {
    const char *name, *unit, *prom, *help;
    gp__stat_kind kind;
    size_t offset, size, count; /* size of one element, count of elements (1: a scalar) */
} gp__stat_field;

extern const gp__stat_field gp__stat_fields[];
extern const size_t gp__stat_nfields;

/* Element k of integer field f of s, widened (unsigned fields; int config fields are >= 0). */
uint64_t gp__stat_u64(const gp_stats *s, const gp__stat_field *f, size_t k);
/* The field named `name`, or NULL. */
const gp__stat_field *gp__stat_find(const char *name);

/* ---- the doctor (doctor.c) and the renderings (render.c) ------------------------------- */

/* "producers starve the device", ...: the verdict for people; "unknown" outside the map. */
const char *gp__verdict_title(gp_verdict v);
/* gp_stats_diagnose on a full gp_stats, every field of `d` (struct_size = sizeof). */
void gp__diagnose(const gp_stats *s, gp_diagnosis *d);

#endif
