/* The ring (ring.h; docs/DESIGN.md §2, §8.2). */
#include "ring.h"

#include <stdlib.h>
#include <string.h>

#define IDX_BITS 31
#define IDX_MASK ((UINT64_C(1) << IDX_BITS) - 1)
#define BYTES_MASK UINT64_C(0xffffffff)

static int init(gp__ring *r, uint64_t capacity, size_t in_bytes, uint64_t arena, size_t out_bytes,
                unsigned char *in, unsigned char *out) {
    memset(r, 0, sizeof *r);
    r->capacity = capacity;
    r->mask = capacity - 1;
    while ((UINT64_C(1) << r->cap_log2) < capacity)
        r->cap_log2++;
    r->in_bytes = in_bytes;
    r->out_bytes = out_bytes;
    r->arena = arena;
    r->in = in;
    r->out = out;
    r->items = aligned_alloc(GP__CACHELINE, capacity * sizeof *r->items);
    if (!r->items) return GP_ENOMEM;
    memset(r->items, 0, capacity * sizeof *r->items);
    for (uint64_t i = 0; i < capacity; i++)
        atomic_init(&r->items[i].seq, 2 * i);
    atomic_init(&r->tail, 0);
    atomic_init(&r->released, 0);
    atomic_init(&r->released_bytes, 0);
    if (gp__notify_init(&r->space) != 0) {
        free(r->items);
        r->items = NULL;
        return GP_ESYS;
    }
    return GP_OK;
}

int gp__ring_init(gp__ring *r, uint64_t capacity, size_t in_bytes, size_t out_bytes,
                  unsigned char *in, unsigned char *out) {
    return init(r, capacity, in_bytes, 0, out_bytes, in, out);
}

int gp__ring_init_arena(gp__ring *r, uint64_t capacity, uint64_t arena, size_t out_bytes,
                        unsigned char *in, unsigned char *out) {
    /* The packed claim word keeps 31 bits of index and 32 of bytes (ring.h). */
    if (capacity > (UINT64_C(1) << 30) || arena == 0 || (arena & (arena - 1)) ||
        arena > (UINT64_C(1) << 31))
        return GP_EINVAL;
    return init(r, capacity, 0, arena, out_bytes, in, out);
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

/* Wait (under `space`) until `ready` says the head of the ring can be claimed or the ring is
   closed; adds the time waited to *blocked_ns. */
static void wait_space(gp__ring *r, int (*ready)(gp__ring *r, uint32_t len), uint32_t len,
                       uint64_t *blocked_ns) {
    uint64_t t0 = gp__now_ns();
    gp__notify_lock(&r->space);
    while (!ready(r, len))
        gp__notify_wait(&r->space, 0);
    gp__notify_unlock(&r->space);
    if (blocked_ns) *blocked_ns += gp__now_ns() - t0;
}

/* ---- fixed-size items: tail is the index ---------------------------------------------------- */

static int fixed_ready(gp__ring *r, uint32_t len) {
    uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    return (pos & GP__RING_CLOSED) || slot_state(r, pos) >= 0;
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
        wait_space(r, fixed_ready, 0, blocked_ns);
        pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    }
}

/* ---- variable-size items: tail packs index and byte cursor ---------------------------------- */

/* Rebuild a full counter from its low bits and a value that trails it by less than the mask. */
static inline uint64_t rebuild(uint64_t base, uint64_t low, uint64_t mask) {
    return base + ((low - base) & mask);
}

/* The packed word's full index and byte cursor. The released counters are read after `w`
   (w's load is acquire), so they are at most what the word's claims allow: index - released
   <= capacity, bytes - released_bytes <= arena, both below the masks. */
static inline void unpack(gp__ring *r, uint64_t w, uint64_t *idx, uint64_t *cur, uint64_t *rel_b) {
    uint64_t rel = atomic_load_explicit(&r->released, memory_order_acquire);
    *rel_b = atomic_load_explicit(&r->released_bytes, memory_order_acquire);
    *idx = rebuild(rel, (w >> 32) & IDX_MASK, IDX_MASK);
    *cur = rebuild(*rel_b, w & BYTES_MASK, BYTES_MASK);
}

static int bytes_ready(gp__ring *r, uint32_t len) {
    uint64_t w = atomic_load_explicit(&r->tail, memory_order_acquire), i, cur, rel_b;
    if (w & GP__RING_CLOSED) return 1;
    unpack(r, w, &i, &cur, &rel_b);
    uint64_t end = gp__arena_place(cur, len, r->arena) + len;
    /* A word that moved meanwhile: let the claim loop look again. */
    return (slot_state(r, i) >= 0 && end - rel_b <= r->arena) ||
           atomic_load_explicit(&r->tail, memory_order_acquire) != w;
}

int gp__ring_claim_bytes(gp__ring *r, int block, uint32_t len, uint64_t *idx, uint64_t *start,
                         uint64_t *blocked_ns) {
    for (;;) {
        /* Acquire: the released counters unpack reads are not read before the word. */
        uint64_t w = atomic_load_explicit(&r->tail, memory_order_acquire), i, cur, rel_b;
        if (w & GP__RING_CLOSED) return GP_ESHUTDOWN;
        unpack(r, w, &i, &cur, &rel_b);
        uint64_t at = gp__arena_place(cur, len, r->arena), end = at + len;
        int64_t d = slot_state(r, i);
        if (d > 0) continue; /* another producer claimed i already: w was stale */
        if (d == 0 && end - rel_b <= r->arena) {
            uint64_t nw = ((i + 1) & IDX_MASK) << 32 | (end & BYTES_MASK);
            /* Relaxed, as for fixed-size items: the slot's seq carries the data. A CAS that
               succeeds saw the word unchanged since it was read, so i and at are still ours
               (an ABA would need 2^31 claims in between). */
            if (atomic_compare_exchange_weak_explicit(&r->tail, &w, nw, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                *idx = i;
                *start = at;
                return GP_OK;
            }
            continue;
        }
        /* A word read before other claims and releases rebuilds to nonsense: only a word that
           is still current proves the ring full. */
        if (atomic_load_explicit(&r->tail, memory_order_acquire) != w) continue;
        /* Full: the index slot or the bytes are still held. */
        if (!block) return GP_EAGAIN;
        wait_space(r, bytes_ready, len, blocked_ns);
    }
}

/* ---- both ----------------------------------------------------------------------------------- */

void gp__ring_release(gp__ring *r, uint64_t first, uint64_t n, uint64_t in_end) {
    for (uint64_t i = first; i < first + n; i++)
        atomic_store_explicit(&gp__ring_item(r, i)->seq, 2 * (i + r->capacity),
                              memory_order_release);
    /* Release: the last reads of these items' bytes happen before a producer reuses them. */
    if (r->arena) atomic_store_explicit(&r->released_bytes, in_end, memory_order_release);
    atomic_store_explicit(&r->released, first + n, memory_order_release);
    gp__notify_wake(&r->space);
}

static uint64_t claimed_of(gp__ring *r, uint64_t w) {
    if (!r->arena) return w & ~GP__RING_CLOSED;
    uint64_t i, cur, rel_b;
    unpack(r, w, &i, &cur, &rel_b);
    return i;
}

uint64_t gp__ring_close(gp__ring *r) {
    uint64_t w = atomic_fetch_or_explicit(&r->tail, GP__RING_CLOSED, memory_order_acq_rel);
    gp__notify_wake(&r->space);
    return claimed_of(r, w);
}

uint64_t gp__ring_claimed(gp__ring *r) {
    if (!r->arena) return atomic_load_explicit(&r->tail, memory_order_acquire) & ~GP__RING_CLOSED;
    /* An observer's read: `released` first, then the word (acquire orders them). Read after
       the word (unpack's order, right for a claimer that retries on a moved word), `released`
       can pass the word's index while this thread is preempted between the loads, and the
       rebuild wraps by 2^31. Read before, it is at most the word's index, and trails it by
       less than 2^31 unless that many claims came between the two loads. */
    uint64_t rel = atomic_load_explicit(&r->released, memory_order_acquire);
    uint64_t w = atomic_load_explicit(&r->tail, memory_order_acquire);
    return rebuild(rel, (w >> 32) & IDX_MASK, IDX_MASK);
}

uint64_t gp__ring_accepted_end(gp__ring *r) {
    uint64_t rel = atomic_load_explicit(&r->released, memory_order_acquire);
    uint64_t end = gp__ring_claimed(r), last = rel;
    /* Accepted: published as accepted (an abandoned reservation is published too, with no
       caller: not accepted, not open), released meanwhile (its word moved past 2i + 1 to
       2(i + capacity)), or filled as accepted with this lap's tag and not published yet: a prep
       item whose submit has returned. Open (skipped): claimed, not filled as accepted. */
    for (uint64_t i = rel; i < end; i++) {
        const gp__item *it = gp__ring_item(r, i);
        uint64_t seq = atomic_load_explicit(&it->seq, memory_order_acquire);
        uint32_t st = atomic_load_explicit(&it->state, memory_order_relaxed);
        int accepted = (st >> 16) == (gp__ring_lap(r, i) & 0xffffu) && (st & GP__ST_ACCEPTED);
        if (seq == 2 * i + 1 ? accepted : seq != 2 * i || accepted) last = i + 1;
    }
    return last;
}
