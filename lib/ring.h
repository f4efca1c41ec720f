/*
 * The ring: a bounded multi-producer ring with one index space for the input and output slots
 * (docs/DESIGN.md §2). Item i owns descriptor i % capacity (and, for fixed-size items, input and
 * output slot i % capacity), so a batch is a contiguous run of indices.
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
 *
 * Variable-size items (docs/DESIGN.md §8.2): the input bytes live in a packed arena instead of
 * fixed slots, and `tail` packs the index and the arena's byte cursor so that one CAS claims
 * both: bit 63 closed, bits 62..32 the index mod 2^31, bits 31..0 the byte cursor mod 2^32.
 * Full values are rebuilt from the released counters, which trail them by at most `capacity`
 * items and `arena` bytes. No item straddles the arena's end (gp__arena_place).
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

/* An item's state word (docs/DESIGN.md §8.5): who may still change the item's fate.
     bits 31..16  lap tag: (index / capacity) mod 2^16, against a stale cancel on a reused slot
     bit 15       accepted: submitted or committed (a callback is owed)
     bit 14       taken: the batcher handed it on (to the device, or dead at the head)
     bit 13       canceled: gp_pipeline_cancel won
     bits 11..0   the item's status (a GP_E* code, signed), GP_OK while it lives
   Written by the producer before publish (plain store: the publish orders it), then only by
   atomic read-modify-writes: cancel (CAS), the batcher (OR taken, then its status), prep, and,
   once taken, the batch's compute or check (gp_batch_fail_item: CAS from GP_OK). */
#define GP__ST_ACCEPTED (UINT32_C(1) << 15)
#define GP__ST_TAKEN (UINT32_C(1) << 14)
#define GP__ST_CANCELED (UINT32_C(1) << 13)
#define GP__ST_CODE_MASK UINT32_C(0xfff)

static inline uint32_t gp__st_make(uint64_t lap, uint32_t flags, int code) {
    return (uint32_t)(lap & 0xffffu) << 16 | flags | ((uint32_t)code & GP__ST_CODE_MASK);
}
static inline int gp__st_code(uint32_t st) {
    uint32_t c = st & GP__ST_CODE_MASK;
    return c & 0x800u ? (int)c - 0x1000 : (int)c; /* sign-extend 12 bits */
}
static inline uint32_t gp__st_with_code(uint32_t st, int code) {
    return (st & ~GP__ST_CODE_MASK) | ((uint32_t)code & GP__ST_CODE_MASK);
}

/* Per-index descriptor. Written by the producer before publish, read by the batcher and the
   completion side after it; `state` as above. One cache line, so producers of neighbouring
   indices do not share lines. */
typedef struct gp__item {
    _Atomic uint64_t seq;
    gp_done_fn done; /* NULL: abandoned reservation, no callback */
    void *user;
    uint64_t deadline_ns; /* 0 = none */
    uint64_t t_submit_ns;
    const void *src; /* prep input */
    _Atomic uint32_t state;
    uint32_t src_bytes; /* prep input bytes */
    uint32_t in_len;    /* variable-size items: input bytes (fixed: unused) */
    uint32_t out_len;   /* variable-size outputs: output bytes (fixed: unused) */
} __attribute__((aligned(GP__CACHELINE))) gp__item;

_Static_assert(sizeof(gp__item) == GP__CACHELINE, "one descriptor per cache line");

typedef struct gp__ring {
    /* Producers' line: claim cursor (bit 63 = closed; variable-size: index and bytes packed,
       see the top). CAS by producers, fetch_or by close. */
    _Alignas(GP__CACHELINE) _Atomic uint64_t tail;
    /* Released so far: every index below `released` (and, variable-size, every arena byte below
       `released_bytes`) is free. Written by the completion side in order (release, after the
       sequence words), read by producers to rebuild full values and check space. */
    _Alignas(GP__CACHELINE) _Atomic uint64_t released;
    _Atomic uint64_t released_bytes;
    /* Blocked producers wait here; woken by release and close. */
    _Alignas(GP__CACHELINE) gp__notify space;
    /* Read-only after init. */
    _Alignas(GP__CACHELINE) uint64_t capacity;
    uint64_t mask;
    unsigned cap_log2;          /* capacity == 1 << cap_log2 */
    size_t in_bytes, out_bytes; /* fixed-size: per item; variable-size input: 0 */
    uint64_t arena;             /* variable-size input: arena bytes (a power of two), else 0 */
    unsigned char *in;  /* fixed: capacity * in_bytes; variable: the arena. Backend host memory
                           (pinned on CUDA) */
    unsigned char *out; /* fixed outputs: capacity * out_bytes */
    gp__item *items;    /* capacity entries */
} gp__ring;

/* Item idx's lap: how many times its descriptor was used before (the state word keeps its low
   16 bits as the tag). */
static inline uint64_t gp__ring_lap(const gp__ring *r, uint64_t idx) {
    return idx >> r->cap_log2;
}

/* `in`/`out` are allocated by the caller (backend host memory); items here. _arena: the input
   is a packed arena of `arena` bytes (a power of two <= 2^31), variable-size items. */
int gp__ring_init(gp__ring *r, uint64_t capacity, size_t in_bytes, size_t out_bytes,
                  unsigned char *in, unsigned char *out);
int gp__ring_init_arena(gp__ring *r, uint64_t capacity, uint64_t arena, size_t out_bytes,
                        unsigned char *in, unsigned char *out);
void gp__ring_fini(gp__ring *r);

/* Claim the next index. block != 0 waits while full and adds the time to *blocked_ns.
   GP_OK, GP_EAGAIN (full, !block) or GP_ESHUTDOWN (closed). Fixed-size rings only. */
int gp__ring_claim(gp__ring *r, int block, uint64_t *idx, uint64_t *blocked_ns);

/* Variable-size: claim the next index and `len` arena bytes (1 <= len <= arena / 2) in one
   step; *start is the item's monotonic arena position (its bytes are at gp__ring_at(start)).
   Returns as gp__ring_claim. */
int gp__ring_claim_bytes(gp__ring *r, int block, uint32_t len, uint64_t *idx, uint64_t *start,
                         uint64_t *blocked_ns);

/* Where an item of `len` bytes goes when the cursor is at `cur` (monotonic): at `cur`, or at the
   next start of the arena when it would not fit before the end (the gap is never copied). */
static inline uint64_t gp__arena_place(uint64_t cur, uint64_t len, uint64_t arena) {
    uint64_t off = cur & (arena - 1);
    return off + len > arena ? cur + (arena - off) : cur;
}
static inline unsigned char *gp__ring_at(gp__ring *r, uint64_t pos) {
    return r->in + (pos & (r->arena - 1));
}

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

/* Free [first, first + n) for reuse (variable-size: and the arena up to in_end, the monotonic
   end of item first + n - 1's bytes) and wake blocked producers. Called in index order. */
void gp__ring_release(gp__ring *r, uint64_t first, uint64_t n, uint64_t in_end);

/* Refuse further claims; returns the final tail (count of claimed indices). */
uint64_t gp__ring_close(gp__ring *r);

/* Claimed indices so far. */
uint64_t gp__ring_claimed(gp__ring *r);

/* One past the last accepted index among those claimed and not yet released, each read once
   (a submit still copying and an open reservation are not accepted yet; a prep item is
   accepted once filled, before its worker publishes it; an abandoned reservation's published
   index is not accepted); `released` when none. Any thread; O(capacity) at most. */
uint64_t gp__ring_accepted_end(gp__ring *r);

/* Largest contiguous run of ring slots starting at idx, at most n long (a span wraps at the
   ring's end, so a batch moves in one or two copies). */
static inline uint64_t gp__ring_run(const gp__ring *r, uint64_t idx, uint64_t n) {
    uint64_t to_end = r->capacity - (idx & r->mask);
    return n < to_end ? n : to_end;
}

#endif
