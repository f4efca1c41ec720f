/*
 * Completion: the poller waits on each device batch's done event in dispatch order, reads
 * its status and timings and frees the slot at once (so the GPU gets it back before any
 * callback runs). With one completion worker (the default) the poller then runs the batch's
 * callbacks itself and releases the ring span: callbacks in submit order, one thread hand-off
 * fewer per batch. With more, it hands the batch to the callback workers, which release ring
 * spans strictly in order.
 */
#include <string.h>

#include "pipeline.h"

void gp__recs_push(gp_pipeline *p, const gp__batchrec *r) {
    gp__recqueue *q = &p->recs;
    pthread_mutex_lock(&q->mu);
    q->buf[q->tail % p->ring.capacity] = *r;
    q->tail++;
    pthread_cond_signal(&q->poll_cv);
    pthread_mutex_unlock(&q->mu);
}

static void mark_failed(gp_pipeline *p) {
    int expected = 0;
    if (atomic_compare_exchange_strong_explicit(&p->failed, &expected, GP_EDEVICE,
                                                memory_order_relaxed, memory_order_relaxed))
        gp__log(&p->err, GP_LOG_ERROR, "device failed: pipeline is now in the failed state");
    gp__notify_wake(&p->bwake);
    gp__notify_wake(&p->slotwake);
}

static void record_timings(gp_pipeline *p, gp__slot *s, const gp__batchrec *r) {
    uint64_t t[GP__EV_COUNT];
    /* Last event first: a backend that renews its time anchor for an event far from it (CUDA)
       renews it at most once per batch, before the earlier events are read, so all four are
       read against one anchor and stay in order. */
    for (int i = GP__EV_COUNT - 1; i >= 0; i--)
        if (p->ops->event_time_ns(p->dev, s->ev[i], &t[i]) != GP_OK) return;
    gp__busy_add(&p->stats.h2d, t[GP__EV_START], t[GP__EV_H2D]);
    gp__busy_add(&p->stats.compute, t[GP__EV_H2D], t[GP__EV_COMPUTE]);
    gp__busy_add(&p->stats.d2h, t[GP__EV_COMPUTE], t[GP__EV_D2H]);
    if (p->cfg.on_batch) {
        gp_batch_trace tr = {.first_seq = r->first,
                             .n = r->n,
                             .slot = r->slot,
                             .status = r->status,
                             .reason = r->reason,
                             .t_start = t[GP__EV_START],
                             .t_h2d_done = t[GP__EV_H2D],
                             .t_compute_done = t[GP__EV_COMPUTE],
                             .t_d2h_done = t[GP__EV_D2H],
                             .t_dispatch = r->t_dispatch};
        p->cfg.on_batch(p->cfg.on_batch_user, &tr);
    }
}

static void finish_device_batch(gp_pipeline *p, gp__batchrec *r) {
    gp__slot *s = &p->slots[r->slot];
    /* A batch whose enqueue failed part-way (GP_EDEVICE from the batcher) recorded only some
       of its events; the others still hold the previous batch's times: no timings from it. */
    int enqueued = r->status != GP_EDEVICE;
    int rc = p->ops->event_wait(p->dev, s->ev[GP__EV_D2H]);
    if (rc != GP_OK) {
        r->status = GP_EDEVICE;
        mark_failed(p);
    } else if (p->ops->healthy && p->ops->healthy(p->dev) != GP_OK) {
        r->status = GP_EDEVICE;
        mark_failed(p);
    } else if (r->status == GP_OK && s->launch.status != GP_OK) {
        r->status = GP_ECOMPUTE;
        GP__ERR(&p->err, GP_ECOMPUTE,
                "compute returned %d for the batch of %llu items at seq %llu%s%s", s->launch.status,
                (unsigned long long)r->n, (unsigned long long)r->first, s->err[0] ? ": " : "",
                s->err);
    } else if (r->status == GP_OK && s->check) {
        /* The compute's check of what its device work found (model/exec.h): the batch is
           done and the slot not yet free, so the batch and its message are this batch's. */
        int crc = s->check(s->check_user, &s->launch.batch);
        if (crc != GP_OK) {
            r->status = GP_ECOMPUTE;
            GP__ERR(&p->err, GP_ECOMPUTE,
                    "the batch of %llu items at seq %llu failed the compute's check (%s)%s%s",
                    (unsigned long long)r->n, (unsigned long long)r->first, gp_err_name(crc),
                    s->err[0] ? ": " : "", s->err);
        }
    }
    if (r->status == GP_OK) {
        /* Items the compute failed alone (gp_batch_fail_item): the batch went on. */
        size_t nf = atomic_load_explicit(&s->failed_items, memory_order_relaxed);
        size_t k = atomic_load_explicit(&s->first_failed, memory_order_relaxed);
        if (nf > 0 && k < r->n) {
            uint32_t st = atomic_load_explicit(&gp__ring_item(&p->ring, r->first + k)->state,
                                               memory_order_relaxed);
            GP__ERR(&p->err, gp__st_code(st),
                    "%zu item%s of the batch of %llu items at seq %llu failed alone (the first: "
                    "item %zu, seq %llu, with this code)%s%s",
                    nf, nf == 1 ? "" : "s", (unsigned long long)r->n, (unsigned long long)r->first,
                    k, (unsigned long long)(r->first + k), s->err[0] ? ": " : "", s->err);
        }
    }
    if (rc == GP_OK && enqueued) record_timings(p, s, r);
    /* Release: everything this slot did happens before the batcher reuses it. */
    atomic_fetch_add_explicit(&p->dev_freed, 1, memory_order_release);
    gp__notify_wake(&p->slotwake);
}

static void run_callbacks(gp_pipeline *p, const gp__batchrec *r);
static void release_done(gp_pipeline *p);

void *gp__poller_main(void *arg) {
    gp_pipeline *p = arg;
    gp__recqueue *q = &p->recs;
    gp__own_thread_mark(p);
    if (p->ops->thread_start) p->ops->thread_start(p->dev);
    for (;;) {
        pthread_mutex_lock(&q->mu);
        while (q->polled == q->tail && !q->batcher_done)
            pthread_cond_wait(&q->poll_cv, &q->mu);
        if (q->polled == q->tail) { /* batcher done and nothing left */
            q->poller_done = 1;
            pthread_cond_broadcast(&q->work_cv);
            pthread_mutex_unlock(&q->mu);
            return NULL;
        }
        gp__batchrec *r = &q->buf[q->polled % p->ring.capacity];
        pthread_mutex_unlock(&q->mu);

        /* The record is ours until polled moves: the batcher writes only at tail, workers
           read only below polled. */
        if (r->slot >= 0) finish_device_batch(p, r); /* the slot is free again from here */

        pthread_mutex_lock(&q->mu);
        q->polled++;
        if (p->nworkers > 0) { /* hand the callbacks to the workers */
            pthread_cond_signal(&q->work_cv);
            pthread_mutex_unlock(&q->mu);
            continue;
        }
        q->taken++; /* one completion worker: this thread is it */
        pthread_mutex_unlock(&q->mu);
        run_callbacks(p, r);
        pthread_mutex_lock(&q->mu);
        r->done = 1;
        release_done(p);
        pthread_mutex_unlock(&q->mu);
    }
}

static void run_callbacks(gp_pipeline *p, const gp__batchrec *r) {
    gp__stats *st = &p->stats;
    uint64_t ok = 0, tmo = 0, can = 0, bad = 0, calls = 0;
    uint64_t t0 = gp__now_ns();
    /* Variable-size outputs are packed from r->out_start in the batch's order (every item of a
       device batch has its place, dead or not); fixed ones sit in the ring's output slots. */
    uint64_t out_pos = r->out_start, out_mask = p->out_arena_bytes - 1;

    for (uint64_t i = r->first; i < r->first + r->n; i++) {
        gp__item *it = gp__ring_item(&p->ring, i);
        const void *out;
        size_t out_bytes;
        if (p->var_out) {
            out = p->out_arena + (out_pos & out_mask);
            out_bytes = it->out_len;
            if (r->slot >= 0) out_pos += it->out_len;
        } else {
            out = gp__ring_out(&p->ring, i);
            out_bytes = p->ring.out_bytes;
        }
        if (!it->done) continue; /* abandoned reservation */
        /* Latency ends as the callback is called (gpupipe.h): its own run time is not in it. */
        uint64_t t_call = gp__now_ns();
        /* Relaxed: the batcher's writes came over recs.mu with the record; the compute's
           (gp_batch_fail_item) before the batch's done event the poller waited on. */
        int s = gp__st_code(atomic_load_explicit(&it->state, memory_order_relaxed));
        if (s == GP_OK) s = r->status;
        /* GP_DESTROY_CANCEL: every callback not yet run says GP_ECANCELED, whatever the item's
           own outcome (gpupipe.h); a failed batch's error is in the last error and the log. */
        if (atomic_load_explicit(&p->canceling, memory_order_relaxed)) s = GP_ECANCELED;
        if (s == GP_OK) {
            it->done(it->user, GP_OK, out, out_bytes);
            ok++;
        } else {
            it->done(it->user, s, NULL, 0);
            tmo += s == GP_ETIMEDOUT;
            can += s == GP_ECANCELED;
            bad += s != GP_ETIMEDOUT && s != GP_ECANCELED;
        }
        calls++;
        gp__hist_add(&st->latency, t_call - it->t_submit_ns);
    }
    GP__BUMP(st->callback_busy_ns, gp__now_ns() - t0);
    GP__BUMP(st->completed_ok, ok);
    GP__BUMP(st->timed_out, tmo);
    GP__BUMP(st->canceled, can);
    GP__BUMP(st->failed, bad);
    /* Last: a reader that sees `completed` sees the per-status counts too. */
    atomic_fetch_add_explicit(&st->completed, calls, memory_order_release);
}

/* Release strictly in order: a span goes back only when every span before it has.
   Called with recs.mu held. */
static void release_done(gp_pipeline *p) {
    gp__recqueue *q = &p->recs;
    uint64_t cap = p->ring.capacity, before = q->released;
    while (q->released < q->taken && q->buf[q->released % cap].done) {
        gp__batchrec *d = &q->buf[q->released % cap];
        /* Release: the callbacks' reads of the outputs happen before the batcher reuses them. */
        if (p->var_out) atomic_store_explicit(&p->out_released, d->out_end, memory_order_release);
        gp__ring_release(&p->ring, d->first, d->n, d->in_end);
        q->released++;
    }
    if (q->released != before) gp__notify_wake(&p->drained);
}

void *gp__worker_main(void *arg) {
    gp_pipeline *p = arg;
    gp__recqueue *q = &p->recs;
    uint64_t cap = p->ring.capacity;
    gp__own_thread_mark(p);
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->taken == q->polled && !q->poller_done)
            pthread_cond_wait(&q->work_cv, &q->mu);
        if (q->taken == q->polled) break; /* poller done and nothing left */
        gp__batchrec *r = &q->buf[q->taken % cap];
        q->taken++;
        pthread_mutex_unlock(&q->mu);

        run_callbacks(p, r);

        pthread_mutex_lock(&q->mu);
        r->done = 1;
        release_done(p);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}
