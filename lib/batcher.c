/*
 * The batcher: one thread that turns published ring items into batches and puts them on
 * in-flight slots (docs/DESIGN.md §2). Policy, work-conserving:
 *  - a slot is free and items wait: send now (max_delay_us == 0), or, with a delay, when
 *    max_batch or the largest preferred size is reached or the oldest item waited the delay;
 *  - every slot busy: wait for a slot and let the pending batch grow up to max_batch (it is
 *    re-counted when a slot frees), so a small batch is never pushed out early;
 *  - items at the head that are dead (expired, canceled, failed prep, abandoned, device
 *    failed) leave as a record with no slot, in order, so callbacks keep submit order.
 * The batcher alone reads the ring's head; it writes item status only for items it holds.
 */
#include <string.h>

#include "pipeline.h"

typedef struct batcher {
    gp_pipeline *p;
    uint64_t head;        /* next ring index not handed on */
    uint64_t dev_batches; /* device batches dispatched; slot of batch b is b % nslots */
} batcher;

static uint64_t end_index(gp_pipeline *p) {
    /* Acquire pairs with destroy's release store of `stopping`, after final_tail. */
    return atomic_load_explicit(&p->stopping, memory_order_acquire) ? p->final_tail : UINT64_MAX;
}

/* Status an item at the head gets without going to the device, or GP_OK if it should go. */
static int dead_status(gp_pipeline *p, gp__item *it, uint64_t now) {
    if (!it->done || it->status != GP_OK)
        return it->done ? it->status : GP_ECANCELED; /* abandoned: no callback anyway */
    if (atomic_load_explicit(&p->canceling, memory_order_relaxed)) return GP_ECANCELED;
    if (atomic_load_explicit(&p->failed, memory_order_relaxed)) return GP_EDEVICE;
    if (it->deadline_ns && now > it->deadline_ns) return GP_ETIMEDOUT;
    return GP_OK;
}

/* Hand on dead items at the head as one slot-less record. Returns how many. */
static uint64_t skip_dead(batcher *b, uint64_t end, uint64_t now) {
    gp_pipeline *p = b->p;
    uint64_t n = 0;
    while (b->head + n < end && gp__ring_is_published(&p->ring, b->head + n)) {
        gp__item *it = gp__ring_item(&p->ring, b->head + n);
        int st = dead_status(p, it, now);
        if (st == GP_OK) break;
        it->status = st;
        n++;
    }
    if (n) {
        gp__batchrec r = {.first = b->head, .n = n, .slot = -1, .status = GP_OK};
        gp__recs_push(p, &r);
        b->head += n;
    }
    return n;
}

static uint64_t count_published(batcher *b, uint64_t end) {
    gp_pipeline *p = b->p;
    uint64_t n = 0, max = p->cfg.max_batch;
    while (n < max && b->head + n < end && gp__ring_is_published(&p->ring, b->head + n))
        n++;
    return n;
}

static int slot_free(batcher *b) {
    /* Acquire pairs with the poller's release: the slot's previous batch is finished. */
    uint64_t freed = atomic_load_explicit(&b->p->dev_freed, memory_order_acquire);
    return b->dev_batches - freed < (uint64_t)b->p->nslots;
}

static uint64_t largest_preferred(const gp_config *c, uint64_t n) {
    uint64_t best = 0;
    for (int i = 0; i < c->num_preferred; i++)
        if (c->preferred[i] <= n) best = c->preferred[i];
    return best;
}

/* Copy a span between the ring and a contiguous device buffer: one copy, two at the wrap. */
static int copy_span(gp_pipeline *p, gp__slot *s, int h2d, uint64_t first, uint64_t n) {
    gp__ring *r = &p->ring;
    size_t isz = h2d ? r->in_bytes : r->out_bytes;
    unsigned char *dev = h2d ? s->d_in : s->d_out;
    uint64_t done = 0;
    while (done < n) {
        uint64_t run = gp__ring_run(r, first + done, n - done);
        unsigned char *host = h2d ? gp__ring_in(r, first + done) : gp__ring_out(r, first + done);
        int rc = h2d ? p->ops->copy_h2d(p->dev, s->stream, dev + done * isz, host, run * isz)
                     : p->ops->copy_d2h(p->dev, s->stream, host, dev + done * isz, run * isz);
        if (rc != GP_OK) return rc;
        done += run;
    }
    return GP_OK;
}

static void dispatch(batcher *b, uint64_t n, gp_close_reason reason) {
    gp_pipeline *p = b->p;
    /* Read the clock now, after every item of the span was seen published, not at the top of
       the batcher's loop: an item published after that reading could carry a deadline that had
       passed before it was submitted (it must not ride as GP_OK), and its t_submit_ns would be
       later than `now` (a wrapped queue wait). */
    uint64_t now = gp__now_ns();
    gp__stats *st = &p->stats;
    gp__slot *s = &p->slots[b->dev_batches % (uint64_t)p->nslots];
    const gp__device_ops *o = p->ops;
    gp__batchrec r = {.first = b->head, .n = n, .slot = s->index, .reason = reason};

    /* Deadlines are checked up to the H2D copy; an expired item inside the span rides along
       on the device but its output is never delivered. */
    for (uint64_t i = 0; i < n; i++) {
        gp__item *it = gp__ring_item(&p->ring, b->head + i);
        if (it->status == GP_OK && it->deadline_ns && now > it->deadline_ns)
            it->status = GP_ETIMEDOUT;
        gp__hist_add1(&st->queue_wait, now - it->t_submit_ns);
    }

    s->launch.batch.n = n;
    s->launch.batch.bucket = gp__bucket_of(p, n);
    s->launch.batch.first_seq = b->head;
    s->launch.status = GP_OK;
    int rc = o->event_record(p->dev, s->ev[GP__EV_START], s->stream);
    if (rc == GP_OK) rc = copy_span(p, s, 1, b->head, n);
    if (rc == GP_OK) rc = o->event_record(p->dev, s->ev[GP__EV_H2D], s->stream);
    if (rc == GP_OK) rc = o->launch(p->dev, s->stream, &s->launch);
    if (rc == GP_OK) rc = o->event_record(p->dev, s->ev[GP__EV_COMPUTE], s->stream);
    if (rc == GP_OK) rc = copy_span(p, s, 0, b->head, n);
    /* The done event is recorded even after a failure, so the poller's wait ends once the
       stream has finished whatever was enqueued. */
    int rc_done = o->event_record(p->dev, s->ev[GP__EV_D2H], s->stream);
    if (rc == GP_OK) rc = rc_done;
    if (rc != GP_OK) r.status = GP_EDEVICE;
    if (rc_done != GP_OK) { /* nothing to wait on: the stream's state is unknown */
        atomic_store_explicit(&p->failed, GP_EDEVICE, memory_order_relaxed);
    }

    GP__BUMP1(st->enqueue_ns, gp__now_ns() - now);
    GP__BUMP1(st->batches, 1);
    GP__BUMP1(st->batch_items, n);
    GP__BUMP1(st->batch_hist[64 - __builtin_clzll(n) < GP_HIST_BUCKETS ? 64 - __builtin_clzll(n)
                                                                       : GP_HIST_BUCKETS - 1],
              1);
    GP__BUMP1(st->close_reasons[reason], 1);
    GP__BUMP1(st->h2d_bytes, n * p->ring.in_bytes);
    GP__BUMP1(st->d2h_bytes, n * p->ring.out_bytes);

    b->head += n;
    b->dev_batches++;
    gp__recs_push(p, &r);
}

/* Wait until item want_idx is published, a flush or shutdown begins, or deadline_ns (0: none).
   Woken through bwake by producers, flush, drain and destroy. */
static void wait_data(batcher *b, uint64_t want_idx, uint64_t deadline_ns, uint64_t flush_seen,
                      int stopping_seen) {
    gp_pipeline *p = b->p;
    gp__notify_lock(&p->bwake);
    /* Wake on a change of `stopping`, not on its state: while shutting down, the batcher still
       waits (asleep) for prep workers and pending commits to publish. */
    while (!gp__ring_is_published(&p->ring, want_idx) &&
           atomic_load_explicit(&p->stopping, memory_order_acquire) == stopping_seen &&
           atomic_load_explicit(&p->flush_upto, memory_order_relaxed) == flush_seen) {
        if (deadline_ns && gp__now_ns() >= deadline_ns) break;
        gp__notify_wait(&p->bwake, deadline_ns);
    }
    gp__notify_unlock(&p->bwake);
}

/* Wait until a slot is free or the device failed. Woken through slotwake by the poller. */
static void wait_slot(batcher *b) {
    gp_pipeline *p = b->p;
    gp__notify_lock(&p->slotwake);
    while (!slot_free(b) && !atomic_load_explicit(&p->failed, memory_order_relaxed))
        gp__notify_wait(&p->slotwake, 0);
    gp__notify_unlock(&p->slotwake);
}

void *gp__batcher_main(void *arg) {
    batcher b = {.p = arg};
    gp_pipeline *p = b.p;
    const gp_config *c = &p->cfg;
    gp__stats *st = &p->stats;

    for (;;) {
        uint64_t end = end_index(p);
        if (b.head == end) break;
        uint64_t now = gp__now_ns();
        if (skip_dead(&b, end, now)) continue;

        uint64_t n = count_published(&b, end);
        uint64_t flush = atomic_load_explicit(&p->flush_upto, memory_order_relaxed);
        if (n == 0) { /* starved: nothing published at the head */
            gp__wait_begin(&st->starved_since, now);
            wait_data(&b, b.head, 0, flush, end != UINT64_MAX);
            gp__wait_end(&st->starved_since, &st->starved_ns, now);
            continue;
        }
        if (!slot_free(&b)) { /* saturated: the batch grows while we wait */
            gp__wait_begin(&st->saturated_since, now);
            wait_slot(&b);
            gp__wait_end(&st->saturated_since, &st->saturated_ns, now);
            continue;
        }

        uint64_t take = n;
        gp_close_reason reason;
        if (n == c->max_batch) {
            reason = GP_CLOSE_FULL;
        } else if (end != UINT64_MAX) {
            reason = GP_CLOSE_SHUTDOWN;
        } else if (b.head < flush) {
            reason = GP_CLOSE_FLUSH;
        } else if (c->max_delay_us == 0) {
            reason = GP_CLOSE_SLOT_FREE;
        } else if (c->num_preferred && n >= c->preferred[c->num_preferred - 1]) {
            reason = GP_CLOSE_PREFERRED;
            take = largest_preferred(c, n);
        } else {
            uint64_t oldest = gp__ring_item(&p->ring, b.head)->t_submit_ns;
            uint64_t due = oldest + (uint64_t)c->max_delay_us * 1000u;
            if (now < due) { /* wait for the delay, more items, a flush or shutdown */
                gp__wait_begin(&st->delay_since, now);
                wait_data(&b, b.head + n, due, flush, end != UINT64_MAX);
                gp__wait_end(&st->delay_since, &st->delay_ns, now);
                continue;
            }
            reason = GP_CLOSE_DELAY;
        }
        dispatch(&b, take, reason);
    }

    pthread_mutex_lock(&p->recs.mu);
    p->recs.batcher_done = 1;
    pthread_cond_signal(&p->recs.poll_cv);
    pthread_mutex_unlock(&p->recs.mu);
    return NULL;
}
