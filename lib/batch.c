/*
 * What a compute can ask of its batch (gpupipe.h, "One batch"): its slot's own pointer, the
 * padding helpers and the padding report. The batch a compute (or compute_setup) receives is
 * the slot's template (pipeline.c, slot_init), so the slot, and through it the pipeline, is
 * found from the pointer.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "model/exec.h"
#include "pipeline.h"

/* The slot whose template `b` is, or NULL for a batch that is not a pipeline's: slot_ref is
   set by slot_init, and a copy or a caller's own batch does not sit at its slot's template. */
static gp__slot *slot_of(const gp_batch *b) {
    gp__slot *s = (gp__slot *)(uintptr_t)b->slot_ref;
    return s && &s->launch.batch == b ? s : NULL;
}

int gp_batch_set_slot_user(const gp_batch *b, void *slot_user) {
    gp__slot *s = b ? slot_of(b) : NULL;
    if (!s || !s->in_setup) return GP_EINVAL;
    s->launch.batch.slot_user = slot_user;
    return GP_OK;
}

int gp__batch_set_check(const gp_batch *b, int (*check)(void *user, const gp_batch *b),
                        void *user) {
    gp__slot *s = b ? slot_of(b) : NULL;
    if (!s || !s->in_setup) return GP_EINVAL;
    s->check = check;
    s->check_user = user;
    return GP_OK;
}

/* Row k must hold item k: sizes from the host offsets. */
static int rows_fit(const uint64_t *off, size_t n, size_t row_bytes, size_t elem_bytes) {
    for (size_t k = 0; k < n; k++) {
        uint64_t len = off[k + 1] - off[k];
        if (len > row_bytes || len % elem_bytes) return 0;
    }
    return 1;
}

int gp_batch_pad(const gp_batch *b, void *dst, size_t row_bytes, size_t elem_bytes, uint8_t *mask) {
    if (!b || !dst || !b->in_offsets_host || elem_bytes == 0 || row_bytes % elem_bytes ||
        !rows_fit(b->in_offsets_host, b->n, row_bytes, elem_bytes))
        return GP_EINVAL;
    gp__slot *s = slot_of(b);
    if (!s) return GP_EINVAL;
    gp_pipeline *p = s->pipeline;
    if (!p->ops->pad) return GP_ENOTSUP;
    return p->ops->pad(p->dev, b, dst, row_bytes, elem_bytes, mask);
}

int gp_batch_unpad(const gp_batch *b, const void *src, size_t row_bytes) {
    if (!b || !src || !b->out_offsets_host || !rows_fit(b->out_offsets_host, b->n, row_bytes, 1))
        return GP_EINVAL;
    gp__slot *s = slot_of(b);
    if (!s) return GP_EINVAL;
    gp_pipeline *p = s->pipeline;
    if (!p->ops->unpad) return GP_ENOTSUP;
    return p->ops->unpad(p->dev, b, src, row_bytes);
}

int gp_batch_fail_item(const gp_batch *b, size_t k, int code) {
    gp__slot *s = b ? slot_of(b) : NULL;
    if (!s || k >= b->n) return GP_EINVAL;
    if (s->in_ready) return GP_OK; /* a call at create (CUDA graphs), not a batch */
    gp_pipeline *p = s->pipeline;
    if (!gp__is_err(code)) code = GP_ECOMPUTE;
    /* Taken by the batcher, so only this batch's compute (or check) writes the state now
       (DESIGN §9, "One item fails alone"); the first failure wins, as does a status the
       batcher gave at dispatch (an expired deadline). An abandoned reservation's bytes ride in
       the batch (accepted bit clear): left alone. Relaxed: the poller reads it after the
       batch's done event (DESIGN §4). */
    gp__item *it = gp__ring_item(&p->ring, b->first_seq + k);
    uint32_t st = atomic_load_explicit(&it->state, memory_order_relaxed);
    if (!(st & GP__ST_ACCEPTED)) return GP_ECANCELED; /* abandoned: no caller, not counted */
    while (gp__st_code(st) == GP_OK)
        if (atomic_compare_exchange_weak_explicit(&it->state, &st, gp__st_with_code(st, code),
                                                  memory_order_relaxed, memory_order_relaxed)) {
            size_t none = SIZE_MAX;
            atomic_fetch_add_explicit(&s->failed_items, 1, memory_order_relaxed);
            atomic_compare_exchange_strong_explicit(&s->first_failed, &none, k,
                                                    memory_order_relaxed, memory_order_relaxed);
            return GP_OK;
        }
    return GP_EBUSY; /* it had a status already (a deadline at dispatch, a failure before, a
                        cancel) */
}

int gp_batch_report_padding(const gp_batch *b, uint64_t useful, uint64_t total) {
    gp__slot *s = b ? slot_of(b) : NULL;
    if (!s || useful > total) return GP_EINVAL;
    /* A call at create (CUDA graphs), or from compute_setup / compute_teardown (n == 0): not
       a batch, nothing to count. */
    if (s->in_ready || b->n == 0) return GP_OK;
    gp_pipeline *p = s->pipeline;
    /* Computes of several slots run concurrently (host backend): shared counters. Total
       first: a snapshot reads useful first (stats.c), so it never sees useful > total. */
    atomic_fetch_add_explicit(&p->stats.pad_total, total, memory_order_release);
    atomic_fetch_add_explicit(&p->stats.pad_useful, useful, memory_order_release);
    return GP_OK;
}

int gp_batch_set_error(const gp_batch *b, const char *fmt, ...) {
    gp__slot *s = b ? slot_of(b) : NULL;
    if (!s || !fmt) return GP_EINVAL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return GP_OK;
}
