/* Stats snapshot and histogram quantiles. */
#include <string.h>

#include "pipeline.h"

static uint64_t bucket_low(unsigned i)
{
    if (i < GP__HIST_SUB)
        return i;
    unsigned msb = i / GP__HIST_SUB + 3u;
    return (uint64_t)(GP__HIST_SUB + i % GP__HIST_SUB) << (msb - 4u);
}

static uint64_t bucket_width(unsigned i)
{
    return i < GP__HIST_SUB ? 1 : UINT64_C(1) << (i / GP__HIST_SUB + 3u - 4u);
}

uint64_t gp__hist_quantile(const gp__hist *h, double q)
{
    uint64_t counts[GP__HIST_BUCKETS], total = 0;
    for (unsigned i = 0; i < GP__HIST_BUCKETS; i++) {
        counts[i] = GP__READ(h->b[i]);
        total += counts[i];
    }
    if (total == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)(total - 1)) + 1, seen = 0;
    for (unsigned i = 0; i < GP__HIST_BUCKETS; i++) {
        seen += counts[i];
        if (seen >= rank)
            return bucket_low(i) + bucket_width(i) / 2;
    }
    return 0;
}

uint64_t gp__hist_max(const gp__hist *h)
{
    for (unsigned i = GP__HIST_BUCKETS; i-- > 0;)
        if (GP__READ(h->b[i]))
            return bucket_low(i) + bucket_width(i) - 1;
    return 0;
}

void gp__stats_snapshot(gp_pipeline *p, gp_stats *s)
{
    const gp__stats *t = &p->stats;
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    s->backend = p->backend;
    s->fell_back = p->fell_back;
    memcpy(s->fallback_reason, p->fallback_reason, sizeof s->fallback_reason);
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
    s->starved_ns = GP__READ(t->starved_ns);
    s->backpressure_ns = GP__READ(t->backpressure_ns);
    s->saturated_ns = GP__READ(t->saturated_ns);
    s->enqueue_ns = GP__READ(t->enqueue_ns);

    s->queue_wait_p50 = gp__hist_quantile(&t->queue_wait, 0.50);
    s->queue_wait_p95 = gp__hist_quantile(&t->queue_wait, 0.95);
    s->queue_wait_p99 = gp__hist_quantile(&t->queue_wait, 0.99);
    s->latency_p50 = gp__hist_quantile(&t->latency, 0.50);
    s->latency_p95 = gp__hist_quantile(&t->latency, 0.95);
    s->latency_p99 = gp__hist_quantile(&t->latency, 0.99);
    s->latency_max = gp__hist_max(&t->latency);

    if (p->ops && p->ops->stats)
        p->ops->stats(p->dev, s);
}
