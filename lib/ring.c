#include "ring.h"

#include <stdlib.h>
#include <string.h>

int gp__ring_init(gp__ring *r, uint64_t capacity, size_t in_bytes, size_t out_bytes,
                  unsigned char *in, unsigned char *out) {
    memset(r, 0, sizeof *r);
    r->capacity = capacity;
    r->mask = capacity - 1;
    r->in_bytes = in_bytes;
    r->out_bytes = out_bytes;
    r->in = in;
    r->out = out;
    r->items = aligned_alloc(GP__CACHELINE, capacity * sizeof *r->items);
    if (!r->items) return GP_ENOMEM;
    memset(r->items, 0, capacity * sizeof *r->items);
    for (uint64_t i = 0; i < capacity; i++)
        atomic_init(&r->items[i].seq, 2 * i);
    atomic_init(&r->tail, 0);
    if (gp__notify_init(&r->space) != 0) {
        free(r->items);
        r->items = NULL;
        return GP_ESYS;
    }
    return GP_OK;
}

void gp__ring_fini(gp__ring *r) {
    if (!r->items) return;
    gp__notify_fini(&r->space);
    free(r->items);
    r->items = NULL;
}

/* Slot of `pos` free for it (0), taken by a later claim (> 0) or still holding item
   pos - capacity (< 0)? Acquire pairs with the release in gp__ring_release, so the completion
   side's last reads of this slot happen before we overwrite it. */
static inline int64_t slot_state(gp__ring *r, uint64_t pos) {
    uint64_t seq = atomic_load_explicit(&gp__ring_item(r, pos)->seq, memory_order_acquire);
    return (int64_t)(seq - 2 * pos);
}

int gp__ring_claim(gp__ring *r, int block, uint64_t *idx, uint64_t *blocked_ns) {
    uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    for (;;) {
        if (pos & GP__RING_CLOSED) return GP_ESHUTDOWN;
        int64_t d = slot_state(r, pos);
        if (d == 0) {
            /* Relaxed: tail carries no data; the slot's seq does. */
            if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                *idx = pos;
                return GP_OK;
            }
            continue; /* pos was reloaded by the failed CAS */
        }
        if (d > 0) { /* another producer claimed pos already */
            pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
            continue;
        }
        /* Full: the slot still holds item pos - capacity. */
        if (!block) return GP_EAGAIN;
        uint64_t t0 = gp__now_ns();
        gp__notify_lock(&r->space);
        for (;;) {
            pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
            if ((pos & GP__RING_CLOSED) || slot_state(r, pos) >= 0) break;
            gp__notify_wait(&r->space, 0);
        }
        gp__notify_unlock(&r->space);
        if (blocked_ns) *blocked_ns += gp__now_ns() - t0;
    }
}

void gp__ring_release(gp__ring *r, uint64_t first, uint64_t n) {
    for (uint64_t i = first; i < first + n; i++)
        atomic_store_explicit(&gp__ring_item(r, i)->seq, 2 * (i + r->capacity),
                              memory_order_release);
    gp__notify_wake(&r->space);
}

uint64_t gp__ring_close(gp__ring *r) {
    uint64_t t = atomic_fetch_or_explicit(&r->tail, GP__RING_CLOSED, memory_order_acq_rel);
    gp__notify_wake(&r->space);
    return t & ~GP__RING_CLOSED;
}
