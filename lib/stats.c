/* Stats snapshot, windows and histogram quantiles. */
#include <string.h>

#include "pipeline.h"

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

uint64_t gp__hist_quantile(const gp__hist *h, double q) {
    uint64_t counts[GP__HIST_BUCKETS];
    gp__hist_read(h, counts);
    return gp__hist_counts_quantile(counts, q);
}

uint64_t gp__hist_max(const gp__hist *h) {
    uint64_t counts[GP__HIST_BUCKETS];
    gp__hist_read(h, counts);
    return gp__hist_counts_max(counts);
}

/* Percentiles from bucket counts (a snapshot or a window). */
static void percentiles(gp_stats *s, const uint64_t *qw, const uint64_t *lat) {
    s->queue_wait_p50 = gp__hist_counts_quantile(qw, 0.50);
    s->queue_wait_p95 = gp__hist_counts_quantile(qw, 0.95);
    s->queue_wait_p99 = gp__hist_counts_quantile(qw, 0.99);
    s->latency_p50 = gp__hist_counts_quantile(lat, 0.50);
    s->latency_p95 = gp__hist_counts_quantile(lat, 0.95);
    s->latency_p99 = gp__hist_counts_quantile(lat, 0.99);
    s->latency_max = gp__hist_counts_max(lat);
}

/* Everything but the percentiles; the histograms go to qw/lat when given. */
static void snapshot(gp_pipeline *p, gp_stats *s, uint64_t *qw, uint64_t *lat) {
    const gp__stats *t = &p->stats;
    const gp_config *c = &p->cfg;
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    s->backend = p->backend;
    s->fell_back = p->fell_back;
    memcpy(s->fallback_reason, p->fallback_reason, sizeof s->fallback_reason);
    s->fallback_reason[sizeof s->fallback_reason - 1] = '\0';
    s->wall_ns = gp__now_ns() - t->t_create_ns;

    /* `completed` first (acquire): the per-status counts added before it are visible. */
    s->completed = atomic_load_explicit(&t->completed, memory_order_acquire);
    s->completed_ok = GP__READ(t->completed_ok);
    s->timed_out = GP__READ(t->timed_out);
    s->canceled = GP__READ(t->canceled);
    s->failed = GP__READ(t->failed);
    uint64_t abandoned = GP__READ(t->abandoned);
    uint64_t claimed = gp__ring_claimed(&p->ring);
    s->submitted = claimed > abandoned ? claimed - abandoned : 0;
    s->rejected_full = GP__READ(t->rejected_full);
    s->batches = GP__READ(t->batches);
    s->batch_items = GP__READ(t->batch_items);
    for (int i = 0; i < GP_HIST_BUCKETS; i++)
        s->batch_hist[i] = GP__READ(t->batch_hist[i]);
    for (int i = 0; i < GP_CLOSE_COUNT_; i++)
        s->close_reasons[i] = GP__READ(t->close_reasons[i]);

    s->h2d_busy_ns = GP__READ(t->h2d.ns);
    s->compute_busy_ns = GP__READ(t->compute.ns);
    s->d2h_busy_ns = GP__READ(t->d2h.ns);
    s->callback_busy_ns = GP__READ(t->callback_busy_ns);
    s->prep_busy_ns = GP__READ(t->prep_busy_ns);
    s->h2d_bytes = GP__READ(t->h2d_bytes);
    s->d2h_bytes = GP__READ(t->d2h_bytes);
    uint64_t now = gp__now_ns();
    s->starved_ns = gp__wait_read(&t->starved_since, &t->starved_ns, now);
    s->backpressure_ns = GP__READ(t->backpressure_ns);
    s->saturated_ns = gp__wait_read(&t->saturated_since, &t->saturated_ns, now);
    s->delay_wait_ns = gp__wait_read(&t->delay_since, &t->delay_ns, now);
    s->enqueue_ns = GP__READ(t->enqueue_ns);

    s->latency_sum_ns = GP__READ(t->latency.sum);
    s->queue_wait_sum_ns = GP__READ(t->queue_wait.sum);
    if (qw) gp__hist_read(&t->queue_wait, qw);
    if (lat) gp__hist_read(&t->latency, lat);

    s->max_batch = c->max_batch;
    s->capacity = c->capacity;
    s->item_in_bytes = c->item_in_bytes;
    s->item_out_bytes = c->item_out_bytes;
    s->max_delay_us = c->max_delay_us;
    s->inflight = c->inflight;
    s->prep_workers = c->prep_workers;
    s->completion_workers = c->completion_workers;
    s->cuda_graphs = c->cuda_graphs;

    if (p->ops && p->ops->stats) p->ops->stats(p->dev, s);
}

void gp__stats_snapshot(gp_pipeline *p, gp_stats *s) {
    uint64_t qw[GP__HIST_BUCKETS], lat[GP__HIST_BUCKETS];
    snapshot(p, s, qw, lat);
    percentiles(s, qw, lat);
}

void gp__stats_mark_take(gp_pipeline *p, gp__stats_mark *m) {
    snapshot(p, &m->s, m->queue_wait, m->latency);
    percentiles(&m->s, m->queue_wait, m->latency);
}

/* a - b for counters read one by one while the pipeline runs: never below zero. */
static uint64_t sub(uint64_t a, uint64_t b) {
    return a > b ? a - b : 0;
}

void gp__stats_since(gp_pipeline *p, const gp__stats_mark *m, gp__stats_mark *now, gp_stats *out) {
    snapshot(p, &now->s, now->queue_wait, now->latency);
    const gp_stats *a = &now->s, *b = &m->s;
    *out = *a;
#define D(f) out->f = sub(a->f, b->f)
    D(wall_ns);
    D(submitted);
    D(completed);
    D(completed_ok);
    D(timed_out);
    D(canceled);
    D(failed);
    D(rejected_full);
    D(batches);
    D(batch_items);
    for (int i = 0; i < GP_HIST_BUCKETS; i++)
        D(batch_hist[i]);
    for (int i = 0; i < GP_CLOSE_COUNT_; i++)
        D(close_reasons[i]);
    D(h2d_busy_ns);
    D(compute_busy_ns);
    D(d2h_busy_ns);
    D(callback_busy_ns);
    D(prep_busy_ns);
    D(h2d_bytes);
    D(d2h_bytes);
    D(starved_ns);
    D(backpressure_ns);
    D(saturated_ns);
    D(enqueue_ns);
    D(delay_wait_ns);
    D(graph_replays);
    D(graph_eager);
    D(latency_sum_ns);
    D(queue_wait_sum_ns);
#undef D
    for (unsigned i = 0; i < GP__HIST_BUCKETS; i++) {
        now->queue_wait[i] = sub(now->queue_wait[i], m->queue_wait[i]);
        now->latency[i] = sub(now->latency[i], m->latency[i]);
    }
    percentiles(out, now->queue_wait, now->latency);
}
