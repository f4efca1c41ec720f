/*
 * The batcher: one thread that turns published ring items into batches and puts them on
 * in-flight slots (docs/DESIGN.md §2, §8.3). Policy, work-conserving:
 *  - a slot is free and items wait: send now (max_delay_us == 0), or, with a delay, when
 *    max_batch (or, variable-size, max_batch_bytes) or the largest preferred size is reached
 *    or the oldest item waited the delay;
 *  - every slot busy: wait for a slot and let the pending batch grow up to max_batch (it is
 *    re-counted when a slot frees), so a small batch is never pushed out early;
 *  - items at the head that are dead (expired, canceled, failed prep, abandoned, device
 *    failed) leave as a record with no slot, in order, so callbacks keep submit order.
 * The batcher alone reads the ring's head. It takes every item it hands on with one atomic OR
 * of the state word (ring.h), after which only it writes the item's status.
 */
#include <sched.h>
#include <string.h>

#include "pipeline.h"

/* config.spin_wait: how long the batcher polls for a free slot before sleeping. A balanced
   load's stages took ~80 us each on an H200: a slot usually frees within one stage. */
#define SLOT_SPIN_NS 200000u

typedef struct batcher {
    gp_pipeline *p;
    uint64_t head;        /* next ring index not handed on */
    uint64_t dev_batches; /* device batches dispatched; slot of batch b is b % nslots */
    uint64_t in_cur;      /* variable-size input: arena cursor after item head - 1 */
    uint64_t out_cur;     /* variable-size output: output arena cursor */
} batcher;

static uint64_t end_index(gp_pipeline *p) {
    /* Acquire pairs with destroy's release store of `stopping`, after final_tail. */
    return atomic_load_explicit(&p->stopping, memory_order_acquire) ? p->final_tail : UINT64_MAX;
}

/* Status an item at the head gets without going to the device, or GP_OK if it should go. */
static int dead_status(gp_pipeline *p, gp__item *it, uint64_t now) {
    uint32_t st = atomic_load_explicit(&it->state, memory_order_relaxed);
    if (!(st & GP__ST_ACCEPTED)) return GP_ECANCELED;     /* abandoned: no callback anyway */
    if (gp__st_code(st) != GP_OK) return gp__st_code(st); /* prep failed, or canceled */
    if (atomic_load_explicit(&p->canceling, memory_order_relaxed)) return GP_ECANCELED;
    if (atomic_load_explicit(&p->failed, memory_order_relaxed)) return GP_EDEVICE;
    if (it->deadline_ns && now > it->deadline_ns) return GP_ETIMEDOUT;
    return GP_OK;
}

/* Take an item (docs/DESIGN.md §8.5): from here gp_pipeline_cancel says "too late" and only the
   batcher writes its status. A cancel that came first shows in the returned state. Relaxed:
   the state word's modification order is what decides; the item's data was published. */
static uint32_t take(gp__item *it) {
    return atomic_fetch_or_explicit(&it->state, GP__ST_TAKEN, memory_order_relaxed) | GP__ST_TAKEN;
}

static void set_status(gp__item *it, uint32_t st, int code) {
    atomic_store_explicit(&it->state, gp__st_with_code(st, code), memory_order_relaxed);
}

/* Advance the input cursor past one item (variable-size): where its producer put it. */
static void pass_item(batcher *b, const gp__item *it) {
    if (b->p->var_in)
        b->in_cur = gp__arena_place(b->in_cur, it->in_len, b->p->ring.arena) + it->in_len;
}

/* Hand on dead items at the head as one slot-less record. Returns how many. */
static uint64_t skip_dead(batcher *b, uint64_t end, uint64_t now) {
    gp_pipeline *p = b->p;
    uint64_t n = 0;
    while (b->head + n < end && gp__ring_is_published(&p->ring, b->head + n)) {
        gp__item *it = gp__ring_item(&p->ring, b->head + n);
        int code = dead_status(p, it, now);
        if (code == GP_OK) break;
        uint32_t st = take(it);
        if (st & GP__ST_CANCELED) code = GP_ECANCELED; /* a cancel that won meanwhile */
        set_status(it, st, code);
        pass_item(b, it);
        n++;
    }
    if (n) {
        gp__batchrec r = {.first = b->head,
                          .n = n,
                          .slot = -1,
                          .status = GP_OK,
                          .in_end = b->in_cur,
                          .out_start = b->out_cur,
                          .out_end = b->out_cur};
        gp__recs_push(p, &r);
        b->head += n;
    }
    return n;
}

/* Published items at the head that one batch may take: at most max_batch and, variable-size,
   at most max_batch_bytes of input (*budget set when that was the limit). *pressed (variable-
   size): the arena bytes in use up to the last published item leave less than two items'
   room, so a producer may be waiting for space (docs/DESIGN.md §8.3). */
static uint64_t count_published(batcher *b, uint64_t end, int *budget, int *pressed) {
    gp_pipeline *p = b->p;
    uint64_t n = 0, max = p->cfg.max_batch, bytes = 0, cur = b->in_cur;
    *budget = *pressed = 0;
    while (n < max && b->head + n < end && gp__ring_is_published(&p->ring, b->head + n)) {
        if (p->var_in) {
            uint32_t len = gp__ring_item(&p->ring, b->head + n)->in_len;
            if (bytes + len > p->cfg.max_batch_bytes) {
                *budget = 1;
                break;
            }
            bytes += len;
            cur = gp__arena_place(cur, len, p->ring.arena) + len;
        }
        n++;
    }
    /* Full to the byte: no next item can fit (each has at least one byte, or one
       item_in_multiple), so the batch closes now as it would on one that does not (gpupipe.h),
       rather than waiting for it or for the delay. */
    uint64_t least = p->cfg.item_in_multiple ? p->cfg.item_in_multiple : 1;
    if (p->var_in && !*budget && n < max && p->cfg.max_batch_bytes - bytes < least) *budget = 1;
    if (p->var_in && n) {
        uint64_t rel = atomic_load_explicit(&p->ring.released_bytes, memory_order_acquire);
        *pressed = cur - rel > p->ring.arena - 2 * (uint64_t)p->cfg.max_item_in_bytes;
    }
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

/* The slot the next batch takes (free when slot_free says so). */
static gp__slot *next_slot(batcher *b) {
    return &b->p->slots[b->dev_batches % (uint64_t)b->p->nslots];
}

/* Variable-size outputs: the next n items' output offsets, written where dispatch hands them
   to the compute (the next slot's h_off, after its n + 1 input offsets; the slot is free, so
   its previous batch no longer reads them); returns the bytes they take. */
static uint64_t out_offsets(batcher *b, uint64_t n) {
    gp_pipeline *p = b->p;
    uint64_t *off = next_slot(b)->h_off + n + 1;
    off[0] = 0;
    for (uint64_t k = 0; k < n; k++)
        off[k + 1] = off[k] + gp__ring_item(&p->ring, b->head + k)->out_len;
    return off[n];
}

/* Where a batch's `total` output bytes go in the output arena, or UINT64_MAX while that space
   is still held by batches not yet released. */
static uint64_t out_place(batcher *b, uint64_t total) {
    gp_pipeline *p = b->p;
    uint64_t at = gp__arena_place(b->out_cur, total, p->out_arena_bytes);
    /* Acquire pairs with the completion side's release of out_released: the callbacks' reads
       of that space are done. */
    uint64_t rel = atomic_load_explicit(&p->out_released, memory_order_acquire);
    return at + total - rel <= p->out_arena_bytes ? at : UINT64_MAX;
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

/* Variable-size input: the items' offsets into h_off[0..n], and the arena bytes as one range,
   or two when the batch wraps the arena (the gap before the wrap is never copied). A batch
   spans less than the arena, so it wraps at most once. Advances in_cur past the batch. */
typedef struct in_ranges {
    uint64_t at[2], len[2];
    int count;
} in_ranges;

static in_ranges pack_inputs(batcher *b, uint64_t *off, uint64_t n) {
    gp_pipeline *p = b->p;
    in_ranges r = {.count = 1};
    uint64_t cur = b->in_cur;
    off[0] = 0;
    for (uint64_t k = 0; k < n; k++) {
        uint32_t len = gp__ring_item(&p->ring, b->head + k)->in_len;
        uint64_t at = gp__arena_place(cur, len, p->ring.arena);
        if (k == 0) {
            r.at[0] = at;
        } else if ((at & (p->ring.arena - 1)) == 0) {
            /* At the arena's start: skipped there (a gap before it), or the item before ended
               exactly at the arena's end. Either way a second range. */
            r.len[0] = off[k];
            r.at[1] = at;
            r.count = 2;
        }
        cur = at + len;
        off[k + 1] = off[k] + len;
    }
    if (r.count == 1)
        r.len[0] = off[n];
    else
        r.len[1] = off[n] - r.len[0];
    b->in_cur = cur;
    return r;
}

static int copy_inputs(gp_pipeline *p, gp__slot *s, const in_ranges *r) {
    unsigned char *dev = s->d_in;
    for (int i = 0; i < r->count; i++) {
        int rc =
            p->ops->copy_h2d(p->dev, s->stream, dev, gp__ring_at(&p->ring, r->at[i]), r->len[i]);
        if (rc != GP_OK) return rc;
        dev += r->len[i];
    }
    return GP_OK;
}

static void dispatch(batcher *b, uint64_t n, gp_close_reason reason, uint64_t out_at) {
    gp_pipeline *p = b->p;
    /* Read the clock now, after every item of the span was seen published, not at the top of
       the batcher's loop: an item published after that reading could carry a deadline that had
       passed before it was submitted (it must not ride as GP_OK), and its t_submit_ns would be
       later than `now` (a wrapped queue wait). */
    uint64_t now = gp__now_ns();
    gp__stats *st = &p->stats;
    gp__slot *s = next_slot(b);
    const gp__device_ops *o = p->ops;
    gp_batch *bt = &s->launch.batch;
    gp__batchrec r = {
        .first = b->head, .n = n, .slot = s->index, .reason = reason, .t_dispatch = now};

    /* Take every item. Deadlines are checked up to the H2D copy; an expired or canceled item
       inside the span rides along on the device but its output is never delivered. */
    for (uint64_t i = 0; i < n; i++) {
        gp__item *it = gp__ring_item(&p->ring, b->head + i);
        uint32_t stw = take(it);
        if (gp__st_code(stw) == GP_OK && it->deadline_ns && now > it->deadline_ns)
            set_status(it, stw, GP_ETIMEDOUT);
        gp__hist_add1(&st->queue_wait, now - it->t_submit_ns);
    }

    /* The batch as the compute sees it (docs/DESIGN.md §8.4). */
    bt->n = n;
    bt->bucket = p->buckets[gp__bucket_index(p->buckets, p->nbuckets, n)]; /* bucket.h */
    bt->first_seq = b->head;
    in_ranges in = {.count = 0};
    uint64_t *in_off = s->h_off, *out_off = s->h_off ? s->h_off + n + 1 : NULL;
    size_t off_bytes = 0;
    if (p->var_in) {
        in = pack_inputs(b, in_off, n);
        bt->in_offsets_host = in_off;
        bt->in_offsets = s->d_off;
        bt->in_total = in_off[n];
        off_bytes = (n + 1) * sizeof(uint64_t);
    } else {
        bt->in_total = n * p->ring.in_bytes;
    }
    if (p->var_out) { /* out_off[0..n] written by out_offsets */
        bt->out_offsets_host = out_off;
        bt->out_offsets = (uint64_t *)s->d_off + n + 1;
        bt->out_total = out_off[n];
        off_bytes = 2 * (n + 1) * sizeof(uint64_t);
        r.out_start = out_at;
        r.out_end = b->out_cur = out_at + out_off[n];
    } else {
        bt->out_total = n * p->ring.out_bytes;
        r.out_start = r.out_end = b->out_cur;
    }
    r.in_end = b->in_cur;
    s->launch.status = GP_OK;
    s->err[0] = '\0'; /* the slot's previous batch is finished (slot_free) */
    atomic_store_explicit(&s->failed_items, 0, memory_order_relaxed);
    atomic_store_explicit(&s->first_failed, SIZE_MAX, memory_order_relaxed);

    int rc = o->event_record(p->dev, s->ev[GP__EV_START], s->stream);
    if (rc == GP_OK && off_bytes)
        rc = o->copy_h2d(p->dev, s->stream, s->d_off, s->h_off, off_bytes);
    if (rc == GP_OK) rc = p->var_in ? copy_inputs(p, s, &in) : copy_span(p, s, 1, b->head, n);
    if (rc == GP_OK) rc = o->event_record(p->dev, s->ev[GP__EV_H2D], s->stream);
    if (rc == GP_OK) {
        uint64_t t_launch = gp__now_ns();
        rc = o->launch(p->dev, s->stream, &s->launch);
        GP__BUMP1(st->launch_ns, gp__now_ns() - t_launch);
    }
    if (rc == GP_OK) rc = o->event_record(p->dev, s->ev[GP__EV_COMPUTE], s->stream);
    if (rc == GP_OK)
        rc = p->var_out ? o->copy_d2h(p->dev, s->stream,
                                      p->out_arena + (out_at & (p->out_arena_bytes - 1)), s->d_out,
                                      bt->out_total)
                        : copy_span(p, s, 0, b->head, n);
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
    /* Payload bytes only: the offsets (16 bytes an item) are not counted. */
    GP__BUMP1(st->h2d_bytes, bt->in_total);
    GP__BUMP1(st->d2h_bytes, bt->out_total);

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

/* Wait until a slot is free or the device failed. Woken through slotwake by the poller; with
   config.spin_wait, polled for up to SLOT_SPIN_NS first: a sleeping batcher's wake-up was
   tens of microseconds of each slot's turnaround on the GPU machine (docs/DESIGN.md §2). */
static void wait_slot(batcher *b) {
    gp_pipeline *p = b->p;
    if (p->cfg.spin_wait) {
        uint64_t until = gp__now_ns() + SLOT_SPIN_NS;
        do {
            if (slot_free(b) || atomic_load_explicit(&p->failed, memory_order_relaxed)) return;
            (void)sched_yield(); /* cannot fail on Linux; the loop re-checks either way */
        } while (gp__now_ns() < until);
    }
    gp__notify_lock(&p->slotwake);
    while (!slot_free(b) && !atomic_load_explicit(&p->failed, memory_order_relaxed))
        gp__notify_wait(&p->slotwake, 0);
    gp__notify_unlock(&p->slotwake);
}

/* Wait until `total` output bytes fit the output arena (released batches free it), or the
   device failed. Woken through `drained` by every release. */
static void wait_out_space(batcher *b, uint64_t total) {
    gp_pipeline *p = b->p;
    gp__notify_lock(&p->drained);
    while (out_place(b, total) == UINT64_MAX &&
           !atomic_load_explicit(&p->failed, memory_order_relaxed))
        gp__notify_wait(&p->drained, 0);
    gp__notify_unlock(&p->drained);
}

void *gp__batcher_main(void *arg) {
    batcher b = {.p = arg};
    gp_pipeline *p = b.p;
    const gp_config *c = &p->cfg;
    gp__stats *st = &p->stats;
    gp__own_thread_mark(p);
    if (p->ops->thread_start) p->ops->thread_start(p->dev);

    for (;;) {
        uint64_t end = end_index(p);
        if (b.head == end) break;
        uint64_t now = gp__now_ns();
        if (skip_dead(&b, end, now)) continue;

        /* The flush mark before the count, acquire (DESIGN §4, "flush"): an item published
           before the flush that covers it is counted with it, not left to a batch of its own
           (a producer's submit then drain could close 7 of its 8 items). */
        uint64_t flush = atomic_load_explicit(&p->flush_upto, memory_order_acquire);
        int budget, pressed;
        uint64_t n = count_published(&b, end, &budget, &pressed);
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
        } else if (budget) {
            reason = GP_CLOSE_BYTES;
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
            /* A nearly full arena closes the batch now: a producer waiting for space would
               otherwise wait out the delay (its item cannot join). */
            if (now < due && !pressed) { /* wait for the delay, more items, flush, shutdown */
                gp__wait_begin(&st->delay_since, now);
                wait_data(&b, b.head + n, due, flush, end != UINT64_MAX);
                gp__wait_end(&st->delay_since, &st->delay_ns, now);
                continue;
            }
            reason = now < due ? GP_CLOSE_BYTES : GP_CLOSE_DELAY;
        }
        uint64_t out_at = 0;
        if (p->var_out) { /* the batch's outputs need room in the output arena */
            uint64_t total = out_offsets(&b, take);
            if ((out_at = out_place(&b, total)) == UINT64_MAX) {
                gp__wait_begin(&st->saturated_since, now);
                wait_out_space(&b, total);
                gp__wait_end(&st->saturated_since, &st->saturated_ns, now);
                continue;
            }
        }
        dispatch(&b, take, reason, out_at);
    }

    pthread_mutex_lock(&p->recs.mu);
    p->recs.batcher_done = 1;
    pthread_cond_signal(&p->recs.poll_cv);
    pthread_mutex_unlock(&p->recs.mu);
    return NULL;
}
