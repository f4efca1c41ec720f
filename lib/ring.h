/*
 * The ring: a bounded multi-producer ring of fixed-size items with one index space for the
 * input and output slots (DESIGN §2). Item i owns input slot i % capacity and output slot
 * i % capacity, so a batch is a contiguous run of indices.
 *
 * Each index has a sequence number (the classic bounded MPMC design, values doubled):
 *   seq == 2i              slot free for the producer that claims index i
 *   seq == 2i + 1          item i published: its input and metadata are visible to the batcher
 *   seq == 2(i + capacity) released by the completion side: free for index i + capacity
 * Invariant: "published i" never equals "free for some later index", for every capacity.
 * (Undoubled, published i == i + 1 == free for i + capacity when capacity is 1: a producer
 * claimed and overwrote an item still in the pipeline.)
 * Producers claim with one compare-and-swap on `tail`, fill the slot, publish with a release
 * store. The batcher reads in index order. The completion side releases strictly in order.
 */
#ifndef GP_LIB_RING_H
#define GP_LIB_RING_H

#include <stdatomic.h>
#include <stdint.h>

#include "clock.h"
#include "gpupipe/gpupipe.h"
#include "notify.h"

#define GP__CACHELINE 64
#define GP__RING_CLOSED (UINT64_C(1) << 63) /* bit of `tail`: no more claims */

/* Per-index metadata. Written by the producer before publish, read by the batcher and the
   completion side after it; `status` may also be written by the batcher (ETIMEDOUT) before
   the item's batch is handed on. One cache line, so producers of neighbouring indices do not
   share lines. */
typedef struct gp__item {
    _Atomic uint64_t seq;
    gp_done_fn done; /* NULL: abandoned reservation, no callback */
    void *user;
    uint64_t deadline_ns; /* 0 = none */
    uint64_t t_submit_ns;
    const void *src; /* prep input */
    size_t src_bytes;
    int32_t status; /* GP_OK until something fails this item */
} __attribute__((aligned(GP__CACHELINE))) gp__item;

typedef struct gp__ring {
    /* Producers' line: claim cursor (bit 63 = closed). CAS by producers, fetch_or by close. */
    _Alignas(GP__CACHELINE) _Atomic uint64_t tail;
    /* Blocked producers wait here; woken by release and close. */
    _Alignas(GP__CACHELINE) gp__notify space;
    /* Read-only after init. */
    _Alignas(GP__CACHELINE) uint64_t capacity;
    uint64_t mask;
    size_t in_bytes, out_bytes;
    unsigned char *in;  /* capacity * in_bytes, backend host memory (pinned on CUDA) */
    unsigned char *out; /* capacity * out_bytes */
    gp__item *items;    /* capacity entries */
} gp__ring;

/* `in`/`out` are allocated by the caller (backend host memory); items here. */
int gp__ring_init(gp__ring *r, uint64_t capacity, size_t in_bytes, size_t out_bytes,
                  unsigned char *in, unsigned char *out);
void gp__ring_fini(gp__ring *r);

/* Claim the next index. block != 0 waits while full and adds the time to *blocked_ns.
   GP_OK, GP_EAGAIN (full, !block) or GP_ESHUTDOWN (closed). */
int gp__ring_claim(gp__ring *r, int block, uint64_t *idx, uint64_t *blocked_ns);

static inline gp__item *gp__ring_item(gp__ring *r, uint64_t idx) {
    return &r->items[idx & r->mask];
}
static inline void *gp__ring_in(gp__ring *r, uint64_t idx) {
    return r->in + (idx & r->mask) * r->in_bytes;
}
static inline void *gp__ring_out(gp__ring *r, uint64_t idx) {
    return r->out + (idx & r->mask) * r->out_bytes;
}

/* Make item idx visible to the batcher: release orders the slot's contents before it. */
static inline void gp__ring_publish(gp__ring *r, uint64_t idx) {
    atomic_store_explicit(&gp__ring_item(r, idx)->seq, 2 * idx + 1, memory_order_release);
}

/* Has item idx been published? Acquire pairs with the publish. */
static inline int gp__ring_is_published(gp__ring *r, uint64_t idx) {
    return atomic_load_explicit(&gp__ring_item(r, idx)->seq, memory_order_acquire) == 2 * idx + 1;
}

/* Free [first, first + n) for reuse and wake blocked producers. Called in index order. */
void gp__ring_release(gp__ring *r, uint64_t first, uint64_t n);

/* Refuse further claims; returns the final tail (count of claimed indices). */
uint64_t gp__ring_close(gp__ring *r);

/* Claimed indices so far, without the closed bit. */
static inline uint64_t gp__ring_claimed(gp__ring *r) {
    return atomic_load_explicit(&r->tail, memory_order_acquire) & ~GP__RING_CLOSED;
}

/* Largest contiguous run of ring slots starting at idx, at most n long (a span wraps at the
   ring's end, so a batch moves in one or two copies). */
static inline uint64_t gp__ring_run(const gp__ring *r, uint64_t idx, uint64_t n) {
    uint64_t to_end = r->capacity - (idx & r->mask);
    return n < to_end ? n : to_end;
}

#endif
