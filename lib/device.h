/*
 * The device interface: everything the pipeline asks of a backend. The pipeline (ring,
 * batcher, completion) calls only this table; lib/host/ and lib/cuda/ each implement it, and
 * the backend table (backend.h) hands it to the pipeline.
 *
 * Conventions:
 *  - `ctx` is the backend's own context from open(); one per pipeline, never global.
 *  - Fallible entries return GP_OK or a negative GP_E* code and record the detail (the native
 *    call, its code, file:line) in the error sink given to open().
 *  - Streams run their operations in FIFO order; operations on different streams may overlap.
 *  - Entries marked (optional) may be NULL; the pipeline then uses the fallback described.
 *  - Threading: alloc/free/create/destroy are called only from create/destroy. Copies,
 *    launch and event_record are called from the batcher thread; event_wait, event_time_ns
 *    and healthy from the completion thread. Streams and events are never shared between
 *    those two except through event_record -> event_wait of the same slot, which the
 *    pipeline orders (record happens-before wait).
 */
#ifndef GP_LIB_DEVICE_H
#define GP_LIB_DEVICE_H

#include "gpupipe/gpupipe.h"
#include "errsink.h"

typedef struct gp__stream gp__stream; /* backend-defined */
typedef struct gp__event gp__event;   /* backend-defined */

/* A compute launch. Lives in the slot, so it outlives the asynchronous run on the host
   backend. The backend writes `status` (the compute's return) before the next event recorded
   on the stream completes. A backend that runs the compute on a thread of its own (host: the
   stream thread) marks that thread as `owner`'s with gp__own_thread_mark first. */
typedef struct gp__launch {
    gp_compute_fn fn;
    void *user;
    gp_batch batch;
    int status;
    const gp_pipeline *owner;
} gp__launch;

/* Mark the calling thread as one of `p`'s own (the batcher, poller, completion and prep
   workers call it first; the host backend's stream thread before a compute): a call that
   would wait on `p` from there is refused (gpupipe.h, gp_done_fn). A thread-local mark, so a
   new thread that reuses a joined one's id is not (pipeline.c). */
void gp__own_thread_mark(const gp_pipeline *p);

typedef struct gp__device_ops {
    /* Open the backend for `cfg`. Fails with GP_ENODEV (and the reason in the sink) when the
       backend cannot run here. */
    int (*open)(const gp_config *cfg, gp__errsink *sink, void **ctx);
    void (*close)(void *ctx);

    /* Host memory the device copies from/to (pinned on CUDA; never silently pageable). */
    int (*host_alloc)(void *ctx, size_t bytes, void **p);
    void (*host_free)(void *ctx, void *p);
    /* Device memory on `device` (the slot's device; the host backend ignores it). */
    int (*dev_alloc)(void *ctx, int device, size_t bytes, void **p);
    void (*dev_free)(void *ctx, int device, void *p);

    int (*stream_create)(void *ctx, int device, gp__stream **s);
    void (*stream_destroy)(void *ctx, gp__stream *s);
    /* Fill the backend fields of a slot's batch template: stream, impl, device. */
    void (*stream_bind)(void *ctx, gp__stream *s, gp_batch *b);

    int (*copy_h2d)(void *ctx, gp__stream *s, void *dst, const void *src, size_t bytes);
    int (*copy_d2h)(void *ctx, gp__stream *s, void *dst, const void *src, size_t bytes);

    /* Run l->fn(l->user, &l->batch) in stream order. CUDA calls it now, on the caller's
       thread, to enqueue work; host queues it for the stream thread. Returns the enqueue
       status (on CUDA also the compute's own return); l->status is final once an event
       recorded after it has completed. The backend may raise l->batch.n to l->batch.bucket
       (graph padding). */
    int (*launch)(void *ctx, gp__stream *s, gp__launch *l);

    int (*event_create)(void *ctx, int device, gp__event **e);
    void (*event_destroy)(void *ctx, gp__event *e);
    int (*event_record)(void *ctx, gp__event *e, gp__stream *s);
    /* Block until the event completed. GP_OK or GP_EDEVICE. */
    int (*event_wait)(void *ctx, gp__event *e);
    /* Completion time of a completed event on the gp_now_ns() clock. */
    int (*event_time_ns)(void *ctx, gp__event *e, uint64_t *ns);

    /* (optional) Called once per slot at create, after compute_setup, on the create thread,
       with the slot's launch record (batch.n == 0 on entry and on return; batch.buckets lists
       the pipeline's batch-size buckets). The backend may prepare per-slot work that must not
       happen later (CUDA: capture graphs per bucket). A failure fails create. NULL: nothing to
       prepare. */
    int (*slot_ready)(void *ctx, gp__stream *s, gp__launch *l);
    /* (optional) Make `device` current on the calling thread; called before compute_setup and
       compute_teardown, which may run on any thread. NULL: nothing to do. */
    int (*bind_device)(void *ctx, int device);

    /* (optional) Called first on each thread the pipeline starts to drive the device (the
       batcher and the poller). CUDA: their stream-capture interaction mode becomes
       thread-local, so an application capturing a CUDA graph in global mode on another thread
       (PyTorch's default) neither fails their event queries nor is invalidated by them.
       Create and destroy run on the application's thread, in its own mode (docs/DESIGN.md
       §5). Not fatal: the backend logs a failure. NULL: nothing to do. */
    void (*thread_start)(void *ctx);

    /* (optional) GP_OK while the device is usable; GP_EDEVICE after a sticky fault. NULL:
       always usable. */
    int (*healthy)(void *ctx);
    /* (optional) Add backend counters (graph replays, ...) into a stats snapshot. */
    void (*stats)(void *ctx, gp_stats *s);

    /* (optional, for tests) Device and pinned allocations made since open: a test proves that
       none happens after create (testing.h). NULL: the backend does not count. */
    uint64_t (*alloc_count)(void *ctx);

    /* (optional) gp_batch_pad / gp_batch_unpad for batch `b` of this backend, enqueued in the
       slot's stream order (host: done now, on the stream thread that runs the compute); the
       arguments are checked. NULL: GP_ENOTSUP. */
    int (*pad)(void *ctx, const gp_batch *b, void *dst, size_t row_bytes, size_t elem_bytes,
               uint8_t *mask);
    int (*unpad)(void *ctx, const gp_batch *b, const void *src, size_t row_bytes);
} gp__device_ops;

#endif
