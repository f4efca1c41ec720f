/*
 * Stats snapshot, windows and histogram quantiles: functions of the counters (gp__stats), the
 * configuration and the backend facts the pipeline passes in; nothing here reads the pipeline.
 * The gp_stats field list (GP_STATS_FIELDS) is also turned into data here, for the window
 * difference and the renderings.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"

/* ---- histograms ------------------------------------------------------------------------- */

uint64_t gp__hist_bucket_low(unsigned i) {
    if (i < GP__HIST_SUB) return i;
    unsigned msb = i / GP__HIST_SUB + 3u;
    return (uint64_t)(GP__HIST_SUB + i % GP__HIST_SUB) << (msb - 4u);
}

static uint64_t bucket_width(unsigned i) {
    return i < GP__HIST_SUB ? 1 : UINT64_C(1) << (i / GP__HIST_SUB + 3u - 4u);
}

void gp__hist_read(const gp__hist *h, uint64_t counts[GP__HIST_BUCKETS]) {
    for (unsigned i = 0; i < GP__HIST_BUCKETS; i++)
        counts[i] = GP__READ(h->b[i]);
}

uint64_t gp__hist_counts_quantile(const uint64_t counts[GP__HIST_BUCKETS], double q) {
    uint64_t total = 0;
    for (unsigned i = 0; i < GP__HIST_BUCKETS; i++)
        total += counts[i];
    if (total == 0) return 0;
    if (q < 0) q = 0;
    if (q > 1) q = 1;
    uint64_t rank = (uint64_t)(q * (double)(total - 1)) + 1, seen = 0;
    for (unsigned i = 0; i < GP__HIST_BUCKETS; i++) {
        seen += counts[i];
        if (seen >= rank) return gp__hist_bucket_low(i) + bucket_width(i) / 2;
    }
    return 0;
}

uint64_t gp__hist_counts_max(const uint64_t counts[GP__HIST_BUCKETS]) {
    for (unsigned i = GP__HIST_BUCKETS; i-- > 0;)
        if (counts[i]) return gp__hist_bucket_low(i) + bucket_width(i) - 1;
    return 0;
}

/* Fine buckets into the public GP_LATENCY_BOUNDS_S buckets: the first bound at or above the
   fine bucket's top (values in bucket i are below gp__hist_bucket_low(i + 1)). */
static void coarse(const uint64_t *fine, uint64_t out[GP_LATENCY_BUCKETS]) {
    static const double le_s[GP_LATENCY_BUCKETS - 1] = GP_LATENCY_BOUNDS_S;
    memset(out, 0, GP_LATENCY_BUCKETS * sizeof out[0]);
    unsigned b = 0;
    for (unsigned i = 0; i < GP__HIST_BUCKETS; i++) {
        double top_ns = (double)gp__hist_bucket_low(i + 1) - 1;
        while (b < GP_LATENCY_BUCKETS - 1 && top_ns > le_s[b] * 1e9)
            b++;
        out[b] += fine[i];
    }
}

/* Percentiles and latency histograms from fine bucket counts (a snapshot or a window). */
static void from_hists(gp_stats *s, const uint64_t *qw, const uint64_t *lat) {
    s->queue_wait_p50 = gp__hist_counts_quantile(qw, 0.50);
    s->queue_wait_p95 = gp__hist_counts_quantile(qw, 0.95);
    s->queue_wait_p99 = gp__hist_counts_quantile(qw, 0.99);
    s->latency_p50 = gp__hist_counts_quantile(lat, 0.50);
    s->latency_p95 = gp__hist_counts_quantile(lat, 0.95);
    s->latency_p99 = gp__hist_counts_quantile(lat, 0.99);
    s->latency_max = gp__hist_counts_max(lat);
    coarse(qw, s->queue_wait_hist);
    coarse(lat, s->latency_hist);
}

/* ---- the field list as data ------------------------------------------------------------- */

/* Every field a window subtracts is a uint64_t (or an array of them). LATENCY fields are
   subtracted through the fine histograms they are rebuilt from (gp__stats_window). */
#define GP__SUBTRACTS_META 0
#define GP__SUBTRACTS_BACKEND 0
#define GP__SUBTRACTS_FLAG 0
#define GP__SUBTRACTS_TEXT 0
#define GP__SUBTRACTS_WALL 1
#define GP__SUBTRACTS_COUNT 1
#define GP__SUBTRACTS_NS 1
#define GP__SUBTRACTS_BYTES 1
#define GP__SUBTRACTS_QUANTILE 0
#define GP__SUBTRACTS_CONFIG 0
#define GP__SUBTRACTS_SIZES 1
#define GP__SUBTRACTS_REASONS 1
#define GP__SUBTRACTS_LATENCY 1
#define GP__FIELD_CHECK(kind, type, name, dim, unit, prom, help)                                   \
    _Static_assert(!GP__SUBTRACTS_##kind || sizeof(type) == sizeof(uint64_t),                      \
                   #name ": a field a window subtracts must be uint64_t");
GP_STATS_FIELDS(GP__FIELD_CHECK)

#define GP__FIELD_DESC(kind, type, name, dim, unit, prom, help)                                    \
    {#name,                                                                                        \
     unit,                                                                                         \
     prom,                                                                                         \
     help,                                                                                         \
     GP__STAT_##kind,                                                                              \
     offsetof(gp_stats, name),                                                                     \
     sizeof(type),                                                                                 \
     sizeof(((gp_stats *)0)->name) / sizeof(type)},
const gp__stat_field gp__stat_fields[] = {GP_STATS_FIELDS(GP__FIELD_DESC)};
const size_t gp__stat_nfields = sizeof gp__stat_fields / sizeof gp__stat_fields[0];

uint64_t gp__stat_u64(const gp_stats *s, const gp__stat_field *f, size_t k) {
    const unsigned char *at = (const unsigned char *)s + f->offset + k * f->size;
    if (f->size == sizeof(uint64_t)) {
        uint64_t v;
        memcpy(&v, at, sizeof v);
        return v;
    }
    if (f->size == sizeof(uint32_t)) { /* uint32_t, int and enum fields */
        uint32_t v;
        memcpy(&v, at, sizeof v);
        return v;
    }
    return at[0];
}

const gp__stat_field *gp__stat_find(const char *name) {
    for (size_t i = 0; i < gp__stat_nfields; i++)
        if (strcmp(gp__stat_fields[i].name, name) == 0) return &gp__stat_fields[i];
    return NULL;
}

/* ---- snapshot --------------------------------------------------------------------------- */

void gp__stats_read(const gp__stats_src *src, gp_stats *s, uint64_t qw[GP__HIST_BUCKETS],
                    uint64_t lat[GP__HIST_BUCKETS]) {
    const gp__stats *t = src->t;
    const gp_config *c = src->cfg;
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    s->backend = src->backend;
    s->fell_back = src->fell_back;
    snprintf(s->fallback_reason, sizeof s->fallback_reason, "%s",
             src->fallback_reason ? src->fallback_reason : "");
    /* A shut pipeline's clock stops where its threads ended: its stats keep describing the
       run, not the idle time after it. */
    uint64_t now = gp__now_ns(), end = atomic_load_explicit(&t->t_end_ns, memory_order_acquire);
    if (end && end < now) now = end;
    s->wall_ns = now - t->t_create_ns;

    /* `completed` first (acquire): the per-status counts added before it are visible, and so
       is every completed item's accepted count (read below), so submitted >= completed. */
    s->completed = atomic_load_explicit(&t->completed, memory_order_acquire);
    s->completed_ok = GP__READ(t->completed_ok);
    s->timed_out = GP__READ(t->timed_out);
    s->canceled = GP__READ(t->canceled);
    s->failed = GP__READ(t->failed);
    /* Accepted items only (gpupipe.h): each shard counts before its item is published, so
       after `completed` the sum holds every completed item; each shard only grows, so later
       snapshots never read less. */
    s->submitted = 0;
    for (int i = 0; i < GP__CALL_SHARDS; i++)
        s->submitted += GP__READ(t->accepted[i].n);
    s->rejected_full = GP__READ(t->rejected_full);
    s->batches = GP__READ(t->batches);
    s->batch_items = GP__READ(t->batch_items);
    for (int i = 0; i < GP_HIST_BUCKETS; i++)
        s->batch_hist[i] = GP__READ(t->batch_hist[i]);
    for (int i = 0; i < GP_CLOSE_BYTES; i++)
        s->close_reasons[i] = GP__READ(t->close_reasons[i]);
    s->close_bytes = GP__READ(t->close_reasons[GP_CLOSE_BYTES]);
    s->cancels = GP__READ(t->cancels);
    /* useful before total (acquire), as gp_batch_report_padding adds total first (release):
       a snapshot never has more useful elements than elements. */
    s->pad_useful = atomic_load_explicit(&t->pad_useful, memory_order_acquire);
    s->pad_total = atomic_load_explicit(&t->pad_total, memory_order_acquire);

    s->h2d_busy_ns = GP__READ(t->h2d.ns);
    s->compute_busy_ns = GP__READ(t->compute.ns);
    s->d2h_busy_ns = GP__READ(t->d2h.ns);
    s->callback_busy_ns = GP__READ(t->callback_busy_ns);
    s->prep_busy_ns = GP__READ(t->prep_busy_ns);
    s->h2d_bytes = GP__READ(t->h2d_bytes);
    s->d2h_bytes = GP__READ(t->d2h_bytes);
    s->starved_ns = gp__wait_read(&t->starved_since, &t->starved_ns, now);
    s->backpressure_ns = GP__READ(t->backpressure_ns);
    s->saturated_ns = gp__wait_read(&t->saturated_since, &t->saturated_ns, now);
    s->delay_wait_ns = gp__wait_read(&t->delay_since, &t->delay_ns, now);
    s->enqueue_ns = GP__READ(t->enqueue_ns);
    s->launch_ns = GP__READ(t->launch_ns);

    s->latency_sum_ns = GP__READ(t->latency.sum);
    s->queue_wait_sum_ns = GP__READ(t->queue_wait.sum);
    gp__hist_read(&t->queue_wait, qw);
    gp__hist_read(&t->latency, lat);
    from_hists(s, qw, lat);

    /* The configuration echo: the CONFIG fields are named as in gp_config. */
#define GP__CONFIG_ECHO_META(type, name)
#define GP__CONFIG_ECHO_BACKEND(type, name)
#define GP__CONFIG_ECHO_FLAG(type, name)
#define GP__CONFIG_ECHO_TEXT(type, name)
#define GP__CONFIG_ECHO_WALL(type, name)
#define GP__CONFIG_ECHO_COUNT(type, name)
#define GP__CONFIG_ECHO_NS(type, name)
#define GP__CONFIG_ECHO_BYTES(type, name)
#define GP__CONFIG_ECHO_QUANTILE(type, name)
#define GP__CONFIG_ECHO_CONFIG(type, name) s->name = (type)c->name;
#define GP__CONFIG_ECHO_SIZES(type, name)
#define GP__CONFIG_ECHO_REASONS(type, name)
#define GP__CONFIG_ECHO_LATENCY(type, name)
#define GP__CONFIG_ECHO(kind, type, name, dim, unit, prom, help) GP__CONFIG_ECHO_##kind(type, name)
    GP_STATS_FIELDS(GP__CONFIG_ECHO)
    /* What runs, not what was asked: the host backend (AUTO's fallback too) captures nothing. */
    if (src->backend != GP_BACKEND_CUDA) s->cuda_graphs = 0;
}

/* ---- marks and windows ------------------------------------------------------------------ */

gp_stats_mark *gp__stats_mark_new(const void *owner, uint64_t owner_born) {
    gp_stats_mark *m = calloc(1, sizeof *m);
    if (m) m->owner = owner, m->owner_born = owner_born;
    return m;
}

void gp_stats_mark_free(gp_stats_mark *m) {
    free(m);
}

/* a - b for counters read one by one while the pipeline runs: never below zero. */
static uint64_t sub(uint64_t a, uint64_t b) {
    return a > b ? a - b : 0;
}

void gp__stats_window(const gp_stats_mark *then, gp_stats_mark *now, gp_stats *out) {
    for (unsigned i = 0; i < GP__HIST_BUCKETS; i++) {
        now->queue_wait[i] = sub(now->queue_wait[i], then->queue_wait[i]);
        now->latency[i] = sub(now->latency[i], then->latency[i]);
    }
    gp_stats h; /* percentiles and latency histograms of the window */
    memset(&h, 0, sizeof h);
    from_hists(&h, now->queue_wait, now->latency);
    *out = now->s;
    for (size_t i = 0; i < gp__stat_nfields; i++) {
        const gp__stat_field *f = &gp__stat_fields[i];
        switch (f->kind) {
        case GP__STAT_WALL:
        case GP__STAT_COUNT:
        case GP__STAT_NS:
        case GP__STAT_BYTES:
        case GP__STAT_SIZES:
        case GP__STAT_REASONS:
            for (size_t k = 0; k < f->count; k++) {
                uint64_t d = sub(gp__stat_u64(&now->s, f, k), gp__stat_u64(&then->s, f, k));
                memcpy((unsigned char *)out + f->offset + k * sizeof d, &d, sizeof d);
            }
            break;
        case GP__STAT_QUANTILE:
        case GP__STAT_LATENCY:
            memcpy((unsigned char *)out + f->offset, (const unsigned char *)&h + f->offset,
                   f->size * f->count);
            break;
        case GP__STAT_META:
        case GP__STAT_BACKEND:
        case GP__STAT_FLAG:
        case GP__STAT_TEXT:
        case GP__STAT_CONFIG:
            break;
        }
    }
}

/* ---- struct_size ------------------------------------------------------------------------ */

int gp__stats_size_ok(const gp_stats *s) {
    return s && s->struct_size >= offsetof(gp_stats, backend) + sizeof s->backend &&
           s->struct_size <= sizeof *s;
}

void gp__stats_widen(const gp_stats *s, gp_stats *full) {
    memset(full, 0, sizeof *full);
    memcpy(full, s, s->struct_size);
    full->struct_size = sizeof *full;
    /* A snapshot from elsewhere may leave its text unterminated: read no further than it. */
    for (size_t i = 0; i < gp__stat_nfields; i++) {
        const gp__stat_field *f = &gp__stat_fields[i];
        if (f->kind == GP__STAT_TEXT) ((char *)full)[f->offset + f->size * f->count - 1] = '\0';
    }
}

void gp__stats_copy_out(const gp_stats *full, gp_stats *out) {
    size_t n = out->struct_size;
    memcpy(out, full, n);
    out->struct_size = n;
}
