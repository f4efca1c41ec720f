/*
 * The pipeline object and what its threads share. Data flow (docs/DESIGN.md §2):
 *
 *   producers --publish--> ring --batcher--> slot k (stream k: H2D, compute, D2H, event)
 *        --> poller (waits on slot events in dispatch order, frees the slot)
 *        --> callbacks (run by the poller itself with one completion worker, else by the
 *          callback workers), then ring spans released in order
 *
 * Threads, what each owns, and the lock order: docs/DESIGN.md §3.
 */
#ifndef GP_LIB_PIPELINE_H
#define GP_LIB_PIPELINE_H

#include <pthread.h>
#include <stdatomic.h>

#include "backend.h"
#include "bucket.h"
#include "device.h"
#include "errsink.h"
#include "notify.h"
#include "ring.h"
#include "stats.h"

enum { GP__EV_START, GP__EV_H2D, GP__EV_COMPUTE, GP__EV_D2H, GP__EV_COUNT };

/* An in-flight slot: its stream, device buffers of max_batch items, stage events, and the
   launch record. Owned by the batcher from dispatch until the poller frees it. */
typedef struct gp__slot {
    struct gp_pipeline *pipeline;
    int index;
    int device;
    int ready;    /* created, compute_setup (if any) succeeded: teardown owed */
    int in_setup; /* compute_setup is running (gp_batch_set_slot_user); create thread only */
    int in_ready; /* the backend's slot_ready is running: its compute calls (CUDA graphs' warm-up
                     and capture) are not batches, so their padding reports are not counted */
    gp__stream *stream;
    void *d_in, *d_out;
    /* Variable-size items: the batch's offsets, written by the batcher into h_off (pinned) and
       copied to d_off with the batch: n + 1 input offsets, then n + 1 output offsets. */
    uint64_t *h_off;
    void *d_off;
    gp__event *ev[GP__EV_COUNT];
    gp__launch launch;
    /* The compute's check of each finished batch (model/exec.h, gp__batch_set_check), or NULL:
       set in compute_setup, called by the poller (completion.c). */
    int (*check)(void *user, const gp_batch *b);
    void *check_user;
    /* Items of the slot's current batch failed alone (gp_batch_fail_item, batch.c): how many,
       and the first (its index in the batch). Reset by the batcher at dispatch; written by the
       compute (any of its threads) or the check; read by the poller after the done event. */
    _Atomic size_t failed_items, first_failed;
    /* gp_batch_set_error's message for the slot's current batch (or its setup): written by the
       compute before it returns, read by the poller after the batch's done event (or by create
       after setup); cleared by the batcher before the next launch. */
    char err[256];
} gp__slot;

/* One dispatched run of ring indices, in dispatch order. slot < 0: nothing went to the device
   (skipped items at the head: expired, canceled, prep failed, abandoned). Written by the
   batcher before it is counted in recs.tail, then by the poller, then by one callback worker. */
typedef struct gp__batchrec {
    uint64_t first, n;
    int slot;
    int status; /* GP_OK, GP_ECOMPUTE, GP_EDEVICE: applies to items still GP_OK */
    gp_close_reason reason;
    int done; /* callbacks ran; guarded by recs.mu */
    /* Variable-size items (monotonic arena positions): the input bytes up to in_end are free
       once this record is released; the outputs are packed from out_start to out_end. */
    uint64_t in_end, out_start, out_end;
    uint64_t t_dispatch; /* gp_now_ns() as the batcher began dispatching it (the trace's) */
} gp__batchrec;

/* Batch records between batcher, poller and callback workers: cursors into `buf`
   (capacity entries: every record holds at least one unreleased ring index).
   polled <= tail; taken <= polled; released <= taken. All guarded by `mu`. */
typedef struct gp__recqueue {
    pthread_mutex_t mu;
    pthread_cond_t poll_cv; /* poller: tail moved or stop */
    pthread_cond_t work_cv; /* callback workers: polled moved or stop */
    gp__batchrec *buf;
    uint64_t tail, polled, taken, released;
    int batcher_done, poller_done;
} gp__recqueue;

/* Prep requests: ring indices (and, variable-size, their arena positions) waiting for a prep
   worker. Bounded by capacity. */
typedef struct gp__prepreq {
    uint64_t idx, at;
} gp__prepreq;

typedef struct gp__prepq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    gp__prepreq *buf;
    uint64_t head, tail;
    int stop;
} gp__prepq;

struct gp_pipeline {
    gp_config cfg;             /* copy, read-only after create */
    const gp__backend *be;     /* the backend that runs (backend.h) */
    const gp__device_ops *ops; /* be->dev */
    void *dev;                 /* backend context */
    int fell_back;
    char fallback_reason[160];
    gp__errsink err;

    gp__ring ring;
    gp__slot *slots;
    int nslots;
    /* Batch-size buckets (gp_batch), ascending, the last max_batch; read-only after create. */
    size_t buckets[GP_MAX_BUCKETS];
    int nbuckets;
    /* Variable-size items (docs/DESIGN.md §8), read-only after create: the input arena is the
       ring's; outputs, when variable, go to a packed output arena the batcher allocates. */
    int var_in, var_out;
    unsigned char *out_arena;
    uint64_t out_arena_bytes; /* a power of two */
    /* Output arena bytes released, monotonic: written by the completion side in order
       (release), read by the batcher (acquire) before it allocates. */
    _Alignas(GP__CACHELINE) _Atomic uint64_t out_released;

    /* Batcher wake-ups: bwake for publish, flush, shutdown; slotwake for slot freed or
       device failed. Separate so publishes do not wake a batcher that waits for a slot. */
    gp__notify bwake, slotwake;
    /* Device batches freed by the poller (slot of device batch b is b % nslots). Written by
       the poller (release: the slot's last use happened before), read by the batcher. */
    _Alignas(GP__CACHELINE) _Atomic uint64_t dev_freed;
    /* Items before this index dispatch without delay. Written by flush/drain (max), read by
       the batcher. */
    _Atomic uint64_t flush_upto;
    /* 0 running; 1 draining (destroy); read by every thread. */
    _Atomic int stopping;
    _Atomic int canceling; /* destroy with GP_DESTROY_CANCEL */
    _Atomic int failed;    /* GP_EDEVICE after a sticky device fault, else 0 */
    uint64_t final_tail;   /* claimed count at close; written before stopping is set */
    int shut;              /* threads stopped; only the shutdown/destroy caller's thread */

    gp__recqueue recs;
    gp__prepq prepq;

    /* Drain waiters: ring.released moved (woken after the ring's release store). */
    gp__notify drained;

    pthread_t batcher, poller;
    pthread_t *workers;
    int nworkers;
    pthread_t *preps;
    int npreps;

    /* Calls in progress in the submit family, sharded by thread so producers do not share a
       line. Destroy waits for them to return before freeing. */
    struct {
        _Alignas(GP__CACHELINE) _Atomic uint32_t n;
    } calls[GP__CALL_SHARDS];

    gp__stats stats;
};

/* Thread bodies (batcher.c, completion.c). */
void *gp__batcher_main(void *arg);
void *gp__poller_main(void *arg);
void *gp__worker_main(void *arg);

/* Append a record; wakes the poller. Called by the batcher only. */
void gp__recs_push(gp_pipeline *p, const gp__batchrec *r);

#endif
