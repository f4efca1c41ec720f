/*
 * gpupipe — keep a GPU saturated during inference, by construction.
 *
 * A pipeline owns two rings of fixed-size items (input and output, pinned memory on CUDA),
 * a batcher thread, `inflight` batch slots (each with its own stream and device buffers)
 * and completion workers. Any number of threads submit items; every item that was accepted
 * comes back exactly once through its callback, with a status.
 *
 * Read top-down: version and export macros, error codes, types and callbacks, config,
 * lifecycle, operations, stats, stats windows and diagnosis, utilities.
 *
 * Rules that hold for every function below:
 *  - Fallible calls return GP_OK (0) or a negative GP_E* code.
 *  - When a function that takes a callback returns an error, the callback is never called
 *    (the log callback excepted: it may get the error's detail, as an ERROR line).
 *  - The library never prints, exits or aborts; it reports through return codes,
 *    gp_pipeline_last_error() and the optional log callback.
 */
#ifndef GPUPIPE_GPUPIPE_H
#define GPUPIPE_GPUPIPE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gpupipe/version.h"

#if defined(_WIN32)
#define GP_API __declspec(dllexport)
#elif defined(__GNUC__)
#define GP_API __attribute__((visibility("default")))
#else
#define GP_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------- */
/* Error codes. Values are pinned: never renumbered, only appended.                          */
/* ---------------------------------------------------------------------------------------- */

#define GP_ERRNO_MAP(X)                                                                            \
    X(OK, 0, "success")                                                                            \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(EAGAIN, -3, "ring is full")                                                                  \
    X(ETIMEDOUT, -4, "deadline or timeout expired")                                                \
    X(ECANCELED, -5, "canceled: pipeline destroyed without drain")                                 \
    X(ESHUTDOWN, -6, "pipeline is shutting down")                                                  \
    X(ECOMPUTE, -7, "compute function failed for this batch")                                      \
    X(EDEVICE, -8, "device error")                                                                 \
    X(ENODEV, -9, "no usable device")                                                              \
    X(EMODEL, -10, "invalid model file or spec")                                                   \
    X(ESYS, -11, "system call failed")                                                             \
    X(EIO, -12, "I/O error")                                                                       \
    X(EPREP, -13, "prep function failed for this item")                                            \
    X(ENOTSUP, -14, "not supported by this build or backend")                                      \
    X(EBUSY, -15, "too late: the item is already on the device or done")

typedef enum gp_errno {
#define GP__ERR_ENUM(name, value, text) GP_##name = value,
    GP_ERRNO_MAP(GP__ERR_ENUM)
#undef GP__ERR_ENUM
} gp_errno;

/* Static string describing `code`; "unknown error" for values not in the table. Any thread. */
GP_API const char *gp_strerror(int code);
/* Static name of `code` ("GP_EINVAL"); "GP_UNKNOWN" for values not in the table. Any thread. */
GP_API const char *gp_err_name(int code);

/* ---------------------------------------------------------------------------------------- */
/* Types and callbacks                                                                       */
/* ---------------------------------------------------------------------------------------- */

typedef struct gp_pipeline gp_pipeline;

typedef enum gp_backend {
    GP_BACKEND_AUTO = 0, /* cuda when a device is usable, else host (recorded, never silent:
                            gp_stats.fell_back and fallback_reason, a GP_LOG_WARN line; the
                            last error stays GP_OK) */
    GP_BACKEND_HOST = 1, /* worker threads and memcpy; no GPU needed */
    GP_BACKEND_CUDA = 2  /* CUDA Runtime; GP_ENODEV when no device is usable */
} gp_backend;

typedef enum gp_full_policy {
    GP_FULL_BLOCK = 0, /* submit waits for space */
    GP_FULL_FAIL = 1   /* submit returns GP_EAGAIN at once (shed the item or back off: a
                          producer that retries at once takes the CPU the pipeline's own
                          threads need to free space) */
} gp_full_policy;

typedef enum gp_destroy_mode {
    GP_DESTROY_DRAIN = 0, /* finish every accepted item, then free */
    GP_DESTROY_CANCEL = 1 /* items not yet completed get GP_ECANCELED, then free */
} gp_destroy_mode;

/* Why a batch left the batcher. */
typedef enum gp_close_reason {
    GP_CLOSE_FULL = 0,      /* reached max_batch */
    GP_CLOSE_PREFERRED = 1, /* reached the largest preferred size (gp_config.preferred) */
    GP_CLOSE_DELAY = 2,     /* the oldest item waited max_delay_us */
    GP_CLOSE_SLOT_FREE = 3, /* a slot was free and max_delay_us is 0: work-conserving dispatch */
    GP_CLOSE_FLUSH = 4,     /* gp_pipeline_flush() or gp_pipeline_drain() */
    GP_CLOSE_SHUTDOWN = 5,  /* gp_pipeline_destroy() */
    GP_CLOSE_BYTES = 6,     /* variable-size items: the next item would pass max_batch_bytes,
                               or the arena is nearly full (gp_config.arena_bytes) (counted in
                               gp_stats.close_bytes: close_reasons holds 0..5) */
    GP_CLOSE_COUNT_ = 7
} gp_close_reason;

/*
 * One batch, as the compute function sees it. Items [0, n) are contiguous in `in`/`out`:
 * item k's input is at (char *)in + k * in_bytes (variable-size items: at in + in_offsets[k],
 * in_offsets[k + 1] - in_offsets[k] bytes; see below). `in` and `out` are device pointers on the
 * CUDA backend and host pointers on the host backend; fixed-size, both hold `capacity` items, so
 * a compute may read and write up to `capacity` items (CUDA graphs pad up to a bucket);
 * variable-size, they hold in_capacity / out_capacity bytes.
 * Valid only during the compute call (and, for the slot's template, during compute_setup and
 * compute_teardown).
 *
 * Buckets. A pipeline has one list of batch-size buckets, decided once at create by one rule:
 * the config's preferred sizes when it has any, else the powers of two below max_batch; the
 * last bucket is always max_batch (== capacity). Each batch names the smallest bucket that
 * holds it (`bucket`), so a compute can plan its work per bucket in compute_setup (algorithms,
 * descriptors) and run a batch at its bucket's size; CUDA graphs are captured per bucket.
 */
typedef struct gp_batch {
    size_t n;           /* items in this batch, 1..capacity */
    size_t capacity;    /* items the buffers hold (max_batch) */
    const void *in;     /* n * in_bytes of input */
    void *out;          /* n * out_bytes of output, written by the compute */
    size_t in_bytes;    /* per item */
    size_t out_bytes;   /* per item */
    uint64_t first_seq; /* submit sequence number of item 0 (global submit order) */
    int slot;           /* in-flight slot index, 0..inflight-1 */
    int device;         /* CUDA device id; -1 on the host backend */
    gp_backend backend; /* GP_BACKEND_HOST or GP_BACKEND_CUDA, never AUTO */
    void *stream;       /* cudaStream_t on CUDA (see gpupipe/cuda.h); NULL on host */
    void *impl;         /* internal: read through the gpupipe/cuda.h accessors */
    /* Appended in 0.2.0. */
    void *slot_user;       /* the slot's own pointer, stored by compute_setup with
                              gp_batch_set_slot_user (NULL otherwise); every later batch of the
                              slot and compute_teardown carry it: per-slot state with no lookup */
    size_t bucket;         /* smallest bucket >= n (0 in compute_setup and compute_teardown) */
    const size_t *buckets; /* the pipeline's buckets, ascending; the last is capacity */
    int num_buckets;       /* entries in `buckets`, 1..GP_MAX_BUCKETS */
    /* Variable-size items (config.max_item_in_bytes / max_item_out_bytes; docs/DESIGN.md §8).
       The batch's items are packed: item k's input is in_offsets[k] .. in_offsets[k + 1]
       bytes into `in`, its output out_offsets[k] .. out_offsets[k + 1] bytes into `out`.
       in_offsets / out_offsets are in the same memory as `in` / `out` (device memory on CUDA,
       copied with the batch); the *_host arrays hold the same values in host memory for the
       compute's own planning. n + 1 entries each. NULL when that side has fixed-size items
       (then offsets are k * in_bytes / k * out_bytes), and in compute_setup /
       compute_teardown (no items). */
    const uint64_t *in_offsets, *in_offsets_host;
    const uint64_t *out_offsets, *out_offsets_host;
    size_t in_total;  /* bytes of input in this batch (in_offsets_host[n], or n * in_bytes) */
    size_t out_total; /* bytes of output this batch must write */
    size_t in_capacity, out_capacity; /* bytes `in` and `out` hold (plan for these in setup) */
    const void *slot_ref; /* internal: the slot this batch is the template of (NULL in a batch
                             that is not a pipeline's) */
} gp_batch;

#define GP_MAX_BUCKETS 32 /* at most 21 powers of two below max_batch, or the preferred sizes */

/*
 * Padding, for computes whose model needs a padded [n, max_len] tensor (docs/DESIGN.md §8.6).
 * They run on the batch's backend: host memcpy, or a kernel enqueued on the slot's stream (CUDA:
 * `dst`, `src` and `mask` are device memory, like `in` and `out`). Call them from the compute.
 *
 * gp_batch_pad: row k of `dst` (n rows of row_bytes) gets item k's input, then zeros; `mask`
 * (optional: n * row_bytes / elem_bytes bytes) gets 1 for each element of the item and 0 for
 * the padding. elem_bytes divides row_bytes and every item's size.
 * @return GP_OK; GP_EINVAL (NULL, a batch without variable-size inputs, an item longer than
 *         row_bytes, a size that is not a multiple of elem_bytes); GP_EDEVICE (the launch failed);
 *         GP_ENOTSUP (a backend without the helper).
 */
GP_API int gp_batch_pad(const gp_batch *b, void *dst, size_t row_bytes, size_t elem_bytes,
                        uint8_t *mask);

/*
 * gp_batch_unpad: the inverse for outputs: item k's output is the first
 * out_offsets[k + 1] - out_offsets[k] bytes of row k of `src` (n rows of row_bytes), written
 * packed into b->out. @return as gp_batch_pad (GP_EINVAL: a batch without variable-size
 * outputs, an output longer than row_bytes).
 */
GP_API int gp_batch_unpad(const gp_batch *b, const void *src, size_t row_bytes);

/*
 * From a compute (or compute_setup) that is about to fail, or that fails items alone
 * (gp_batch_fail_item): say why. The message becomes part of the pipeline's last error
 * ("compute returned N for the batch of ...: <message>", "... failed alone ...: <message>", or
 * create's error for a failed setup), so a service sees the compute's own reason. printf-style;
 * truncated to 255 bytes. @return GP_OK; GP_EINVAL (NULL, a batch that is not a pipeline's).
 */
GP_API int gp_batch_set_error(const gp_batch *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/*
 * From a compute, before it returns: fail item k (0 <= k < b->n) of this batch alone, for a
 * fault of its own (an input the compute cannot use): its callback gets `code` (a negative
 * GP_E* code; any other value becomes GP_ECOMPUTE) and no output, while the batch's other items
 * complete as usual. An item keeps its first failure (and a deadline that had passed at
 * dispatch). The pipeline's last error then names the batch, how many items failed alone and
 * the first, with the message of gp_batch_set_error if the compute set one. Any of the
 * compute's threads (call gp_batch_set_error from one). Calls while CUDA graphs are warmed up
 * and captured at create are ignored (those are not batches; a replayed graph does not call the
 * compute).
 * @return GP_OK (this call failed the item; also for the ignored calls at create); GP_EBUSY
 *         (the item had a status already, an earlier failure, a deadline passed at dispatch or
 *         a cancel (gp_pipeline_cancel): it keeps it, and this call is not counted); GP_ECANCELED
 * (item k is an abandoned reservation, whose bytes ride in the batch with no caller: nothing to
 * fail, nothing counted); GP_EINVAL (NULL, a batch that is not a pipeline's, such as a copy of the
 * one the compute got, k >= b->n).
 */
GP_API int gp_batch_fail_item(const gp_batch *b, size_t k, int code);

/*
 * Tell the pipeline how much of this batch's work was padding: `useful` of `total` elements (any
 * unit the compute chooses, e.g. tokens). The stats keep the sums and the doctor's `padding`
 * verdict reads them. Any compute, any backend. Calls made while CUDA graphs are warmed up and
 * captured at create (gpupipe/cuda.h), and from compute_setup or compute_teardown (b->n == 0),
 * are accepted and not counted. @return GP_OK, GP_EINVAL (NULL, useful > total, a batch that is
 * not a pipeline's, such as a copy of the one the compute got).
 */
GP_API int gp_batch_report_padding(const gp_batch *b, uint64_t useful, uint64_t total);

/*
 * From compute_setup only: give the slot a pointer of the compute's own (its per-slot state:
 * plans, scratch buffers). The library stores it in the slot; every later batch of the slot
 * and the slot's compute_teardown see it as b->slot_user. `b` must be the batch compute_setup
 * received. @return GP_OK; GP_EINVAL when `b` is NULL, is not a pipeline's batch (a copy, or
 * one the caller made) or the call is not made from that slot's compute_setup.
 */
GP_API int gp_batch_set_slot_user(const gp_batch *b, void *slot_user);

/*
 * Compute: enqueue the work for one batch and return. On CUDA it runs on the batcher thread
 * and must only enqueue on b->stream (no synchronization). On the host backend it runs on
 * the slot's stream thread and does the work itself. Calls for different slots may run
 * concurrently; calls for one slot never do. Either way the compute runs on one of the
 * pipeline's own threads (gp_done_fn: drain and the like refused there, a blocking submit on
 * a full ring GP_EAGAIN).
 * Return GP_OK, or any nonzero value: that batch's items complete with GP_ECOMPUTE (those it
 * failed alone with gp_batch_fail_item keep their own code) and later batches run as usual.
 */
typedef int (*gp_compute_fn)(void *user, const gp_batch *b);

/*
 * Completion callback, exactly once per accepted item. `status` is GP_OK, GP_ETIMEDOUT,
 * GP_ECANCELED, GP_ECOMPUTE, GP_EDEVICE, the prep function's status, or the code the compute
 * failed the item alone with (gp_batch_fail_item).
 * `output` points into the output ring and is valid only during the call (NULL unless
 * status is GP_OK); `output_bytes` is the configured item_out_bytes, or the item's own
 * output size with variable-size outputs (0 with NULL output).
 * Runs on a completion worker. With completion_workers == 1, callbacks run in submit order.
 * It may call gp_pipeline_submit*: on a full ring these return GP_EAGAIN there even under
 * GP_FULL_BLOCK (the space it would wait for is freed after callbacks like it). On its own
 * pipeline, gp_pipeline_drain, _infer, _shutdown and _destroy would wait for the callback
 * itself: from the pipeline's own threads (completion callbacks, the trace callback, prep
 * functions, the compute) they return GP_EINVAL at once, the reason in
 * gp_pipeline_last_error.
 */
typedef void (*gp_done_fn)(void *user, int status, const void *output, size_t output_bytes);

/*
 * Prep: turn the caller's raw input (`src`, `src_bytes`, as passed to gp_pipeline_submit_prep)
 * into one ring item at `slot` (`slot_bytes` = item_in_bytes). Runs on a prep worker; calls
 * run concurrently. Return GP_OK, or a negative GP_E* code that becomes that item's status
 * (any other nonzero value becomes GP_EPREP).
 */
typedef int (*gp_prep_fn)(void *user, const void *src, size_t src_bytes, void *slot,
                          size_t slot_bytes);

/* Stage timestamps of one device batch (gp_now_ns() clock), for timelines and tests. */
typedef struct gp_batch_trace {
    uint64_t first_seq; /* submit sequence number of the first item */
    size_t n;           /* items */
    int slot;
    int status; /* GP_OK, GP_ECOMPUTE or GP_EDEVICE */
    gp_close_reason reason;
    /* The device's stage events: the batch's start (before its H2D copy) and each stage's end;
       on CUDA read from events and mapped to this clock through an anchor event (a few
       microseconds apart on an H200; further when the anchor waits behind a busy slot). */
    uint64_t t_start, t_h2d_done, t_compute_done, t_d2h_done;
    /* The host: when the batcher began the batch's dispatch (before its first enqueue). From
       the slot's previous t_d2h_done to this is the slot's wait for the host; from this to
       t_start, the enqueue (docs/DESIGN.md §2, "A slot's cycle"). */
    uint64_t t_dispatch;
} gp_batch_trace;

/* Called once per device batch whose stage times are known (not for a batch whose enqueue or
   event wait failed: GP_EDEVICE, its items fail and it has no times), in dispatch order, on
   the completion poller thread, before the batch's callbacks; `t` is valid only during the
   call. Keep it short: it delays the next batch's completion. */
typedef void (*gp_trace_fn)(void *user, const gp_batch_trace *t);

typedef enum gp_log_level { GP_LOG_ERROR = 0, GP_LOG_WARN = 1, GP_LOG_INFO = 2 } gp_log_level;

/* Log sink; `msg` is valid only during the call. Called from the library's threads, and from
   the caller's own thread inside a call that fails (gp_pipeline_create, the submit family, any
   call that records a last error): it must not call gp_pipeline_shutdown, _destroy, _drain or
   _infer on the pipeline that logs (the call in progress may be one it would wait for), nor
   take a lock the caller may hold while calling gpupipe. */
typedef void (*gp_log_fn)(void *user, gp_log_level level, const char *msg);

/* ---------------------------------------------------------------------------------------- */
/* Config                                                                                    */
/* ---------------------------------------------------------------------------------------- */

#define GP_MAX_DEVICES 16
#define GP_MAX_PREFERRED 16

/*
 * Pipeline configuration. Fill with gp_config_init(), then set what you need. The library
 * reads only the first `struct_size` bytes, so code built against an older header keeps
 * working; a struct_size larger than this header's (code built against a newer one) is
 * GP_EINVAL. Everything is copied at create; the config may be freed afterwards.
 */
typedef struct gp_config {
    size_t struct_size; /* set by gp_config_init() */

    gp_backend backend;                 /* default GP_BACKEND_AUTO */
    int devices[GP_MAX_DEVICES];        /* CUDA device ids the slots are spread over */
    int num_devices;                    /* default 0 = device 0 only */
    size_t item_in_bytes;               /* bytes of one input item (required, > 0) */
    size_t item_out_bytes;              /* bytes of one output item (required, > 0) */
    size_t capacity;                    /* ring items, a power of two in max_batch..2^30;
                                           default 0 = next power of two of 4 * max_batch * inflight;
                                           each also costs a 64-byte descriptor in host memory */
    size_t max_batch;                   /* 1..2^20 (1048576); default 64 */
    size_t preferred[GP_MAX_PREFERRED]; /* preferred batch sizes, ascending, <= max_batch:
                                           the buckets (gp_batch); with max_delay_us a held
                                           batch leaves once it reaches the largest */
    int num_preferred;                  /* default 0 */
    uint32_t max_delay_us;      /* at most 60 s; default 0: dispatch as soon as a slot is free */
    int inflight;               /* in-flight batch slots, 1..64; default 3 */
    gp_full_policy full_policy; /* default GP_FULL_BLOCK */

    gp_compute_fn compute; /* required */
    void *compute_user;
    /* Optional: called once per slot at create, after the slot's stream, buffers and
       handles exist (b->n == 0); and once per slot at destroy. Both run on the thread that
       calls create / destroy, with the slot's device current. A model uploads weights and picks
       algorithms here. A nonzero return from setup fails create with that code (GP_EDEVICE if it is
       not a GP_E* code). */
    int (*compute_setup)(void *user, const gp_batch *b);
    void (*compute_teardown)(void *user, const gp_batch *b);

    int prep_workers; /* 0..256; default 0; > 0 requires `prep` */
    gp_prep_fn prep;
    void *prep_user;

    int completion_workers; /* callback threads, 1..64; default 1 (submit-order callbacks) */

    int cuda_graphs; /* 0 or 1 (any other value: GP_EINVAL). CUDA: capture the compute per
                        batch-size bucket (fixed-size inputs and outputs only: GP_EINVAL with
                        max_item_in_bytes or max_item_out_bytes); default 0 */
    int spin_wait; /* 0 or 1. Poll instead of sleeping: the completion thread on the device's events
                      (CUDA), the batcher for up to 200 us for a free slot (any backend);
                      a core each while saturated, for a shorter slot turnaround; default 0 */

    gp_log_fn log; /* optional */
    void *log_user;

    gp_trace_fn on_batch; /* optional: per-batch stage timestamps */
    void *on_batch_user;

    /* Host backend only: simulated stage costs, for tests and for showing overlap without a
       GPU. Copies in one direction share one simulated copy engine and computes share one
       simulated compute engine, as on a GPU. 0 = no simulated cost. */
    double sim_copy_bytes_per_s;
    double sim_compute_us;          /* per batch */
    double sim_compute_us_per_item; /* per item */

    /* Appended in 0.2.0: variable-size items, packed with no padding (docs/DESIGN.md §8).
       Set max_item_in_bytes instead of item_in_bytes, and/or max_item_out_bytes instead of
       item_out_bytes; the compute then finds its items through gp_batch's offsets. */
    size_t max_item_in_bytes;  /* > 0: inputs are 1..max bytes each, packed in an arena (max
                                  at most max_batch_bytes, so at most 1 GiB) */
    size_t max_item_out_bytes; /* > 0: each item's output size is given at submit, 1..max (max
                                  < 4 GiB, and max * the larger of capacity and 2 * max_batch
                                  at most 2 GiB: the output arena) */
    size_t arena_bytes;        /* input arena, a power of two >= 2 * max_item_in_bytes and
                                  <= 2 GiB; default 0: 4 * inflight * max_batch_bytes, rounded
                                  up to a power of two, at most 2 GiB. While less than
                                  2 * max_item_in_bytes of it is free after the published items
                                  (an open reservation's bytes count once committed), a partial
                                  batch is not held for max_delay_us (it closes, reason bytes):
                                  a producer waiting for space never waits out the delay */
    size_t max_batch_bytes;    /* input bytes a batch may carry (a token budget), from
                                  max_item_in_bytes to 1 GiB; a batch closes when the next item
                                  would not fit; default 0: max_batch * max_item_in_bytes (which
                                  must then be at most 1 GiB) */
    /* Appended in 0.3.0. */
    size_t item_in_multiple; /* variable-size inputs: each input's bytes must be a whole
                                number of these (a token's bytes: gp_model_configure sets it),
                                else the submit family (submit, submit_ex, reserve_ex) returns
                                GP_EINVAL and the item never joins a batch; at most
                                max_item_in_bytes; fixed-size inputs: must be 0 (GP_EINVAL);
                                default 0: any size. A gp_config from before this field (its
                                struct_size ends before it) has none: a token model's
                                part-token item then fails its batch in the compute
                                (GP_ECOMPUTE), as in 0.2.0 */
} gp_config;

/* Fill `cfg` with defaults (and struct_size). Any thread. */
GP_API void gp_config_init(gp_config *cfg);

/* ---------------------------------------------------------------------------------------- */
/* Lifecycle                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/*
 * Validate `cfg` and create a running pipeline in *out. Allocates every ring, buffer, stream
 * and thread now; the submit path never allocates afterwards.
 * @return GP_OK; GP_EINVAL (the detail names the field), GP_ENODEV (backend CUDA without a
 *         usable device), GP_ENOMEM, GP_EDEVICE, GP_ESYS. On error *out is NULL and nothing
 *         is left allocated.
 * `err`/`err_len` (optional, may be NULL/0): receives a NUL-terminated detail on error (the
 * log callback may get it too, as an ERROR line: a backend's or a compute_setup's failure).
 * When a compute_setup fails, compute_teardown has run for the slots set up before it. Any
 * thread.
 */
GP_API int gp_pipeline_create(const gp_config *cfg, gp_pipeline **out, char *err, size_t err_len);

/*
 * Stop the pipeline without freeing it. From the call on, the submit family returns
 * GP_ESHUTDOWN. GP_DESTROY_DRAIN completes every accepted item normally; GP_DESTROY_CANCEL
 * completes items not yet delivered with GP_ECANCELED (batches already on the device are
 * waited for, their outputs are dropped), in place of any outcome the item would otherwise
 * have had (an output, a compute's GP_ECOMPUTE, gp_batch_fail_item's code, a timeout; a batch
 * that fails is still recorded in the last error). Either way every accepted item has had its
 * callback when this returns, and the pipeline's threads have ended (batcher, completion, prep; the
 * host backend's per-slot stream threads are idle and end at gp_pipeline_destroy). The pipeline
 * stays valid: stats, report and last error still work, and submits keep returning GP_ESHUTDOWN, so
 * producer threads can be stopped and joined before gp_pipeline_destroy. Reservations
 * (gp_pipeline_reserve) must be committed or abandoned, or this waits for them. Call from a thread
 * that is not a library callback (from the pipeline's own threads, gp_done_fn: GP_EINVAL, nothing
 * stopped), not concurrently with itself or destroy; calling it again does nothing (whatever the
 * mode). @return GP_OK, GP_EINVAL (NULL, the pipeline's own thread, or, before the pipeline is
 * shut, a mode that is neither GP_DESTROY_DRAIN nor GP_DESTROY_CANCEL: nothing stopped), or
 * GP_EDEVICE if the device had failed.
 */
GP_API int gp_pipeline_shutdown(gp_pipeline *p, gp_destroy_mode mode);

/*
 * gp_pipeline_shutdown(p, mode) unless already done (then `mode` is ignored), then free
 * everything. NULL is accepted. No other call on `p` may start once destroy may have
 * returned: stop producers first (shutdown, join them, destroy) if they may still call.
 * Submit-family calls already in progress when destroy is called return GP_ESHUTDOWN and
 * destroy waits for them. Afterwards `p` is invalid. From the pipeline's own threads
 * (gp_done_fn) it returns GP_EINVAL and frees nothing.
 * @return GP_OK, GP_EINVAL (the pipeline's own thread, or a mode that is not a gp_destroy_mode
 * while the pipeline is not shut: nothing freed), or GP_EDEVICE if the device had failed (all
 * is still freed).
 */
GP_API int gp_pipeline_destroy(gp_pipeline *p, gp_destroy_mode mode);

/* ---------------------------------------------------------------------------------------- */
/* Operations, safe from any number of threads. The submit family (submit*, reserve, infer)  */
/* may overlap gp_pipeline_shutdown and returns GP_ESHUTDOWN once it began; commit and        */
/* abandon of a reservation made before still succeed (shutdown waits for them).              */
/* No call may overlap gp_pipeline_destroy except as described there.                        */
/* ---------------------------------------------------------------------------------------- */

/*
 * Copy `bytes` (== item_in_bytes; variable-size items: 1..max_item_in_bytes, a whole number of
 * item_in_multiple when set) from `input` into
 * the ring and queue it. `input` may be reused as soon as this returns. `done` (required) is
 * called exactly once if this returns GP_OK. With variable-size outputs the item's output is
 * max_item_out_bytes (gp_pipeline_submit_ex gives it per item). Blocks while the ring is full
 * (GP_FULL_BLOCK; GP_EAGAIN instead on one of the pipeline's own threads, see gp_done_fn) or
 * returns GP_EAGAIN (GP_FULL_FAIL).
 * @return GP_OK, GP_EINVAL (NULL argument, wrong byte count), GP_EAGAIN, GP_ESHUTDOWN,
 *         GP_EDEVICE (the pipeline failed; once shut down, GP_ESHUTDOWN as for any pipeline).
 */
GP_API int gp_pipeline_submit(gp_pipeline *p, const void *input, size_t bytes, gp_done_fn done,
                              void *user);

/*
 * As gp_pipeline_submit, with an absolute deadline on the gp_now_ns() clock (0 = none). An
 * item whose deadline has passed when the batcher dispatches its batch (enqueues its copy to
 * the device) completes with GP_ETIMEDOUT and its output is never delivered; one that passes
 * while its batch is in flight is delivered.
 */
GP_API int gp_pipeline_submit_deadline(gp_pipeline *p, const void *input, size_t bytes,
                                       uint64_t deadline_ns, gp_done_fn done, void *user);

/*
 * Hand the raw input `src` to the prep worker pool, which runs the configured prep function
 * straight into the ring slot. `src` must stay valid until `done` is called; it may be NULL
 * only with src_bytes 0 (prep is then called with NULL and 0). Requires
 * prep_workers > 0 (else GP_EINVAL) and fixed-size inputs (variable-size: gp_submit_args.prep_src
 * with the item's size). Order and exactly-once hold as for gp_pipeline_submit.
 */
GP_API int gp_pipeline_submit_prep(gp_pipeline *p, const void *src, size_t src_bytes,
                                   uint64_t deadline_ns, gp_done_fn done, void *user);

/* One item for gp_pipeline_submit_ex. Fill with gp_submit_args_init(); the library reads only
   the first `struct_size` bytes (larger than this header's: GP_EINVAL, as for gp_config). */
typedef struct gp_submit_args {
    size_t struct_size;    /* set by gp_submit_args_init() */
    const void *input;     /* the item's bytes, copied into the ring (NULL with prep_src) */
    size_t input_bytes;    /* item_in_bytes (with prep_src too: the size prep writes; 0 is
                              GP_EINVAL), or 1..max_item_in_bytes for variable-size items
                              (a whole number of item_in_multiple when set) */
    size_t output_bytes;   /* variable-size outputs: 1..max_item_out_bytes (0: the maximum);
                              fixed outputs: 0 or item_out_bytes */
    uint64_t deadline_ns;  /* absolute, gp_now_ns() clock; 0 = none */
    const void *prep_src;  /* set: the prep pool writes the item from this raw input (which must
                              stay valid until `done`); needs prep_workers > 0 */
    size_t prep_src_bytes; /* < 4 GiB */
    gp_done_fn done;       /* required */
    void *user;
} gp_submit_args;

/* Fill `a` with defaults (and struct_size). Any thread. */
GP_API void gp_submit_args_init(gp_submit_args *a);

/*
 * Submit one item described by `a` (copied, or handed to the prep pool) and return its
 * sequence number in *seq (optional, may be NULL): the global submit order, the name that
 * gp_pipeline_cancel takes. Blocking, order and exactly-once as gp_pipeline_submit.
 * @return GP_OK, GP_EINVAL (NULL, a size out of range: the detail in gp_pipeline_last_error),
 *         GP_EAGAIN, GP_ESHUTDOWN, GP_EDEVICE.
 */
GP_API int gp_pipeline_submit_ex(gp_pipeline *p, const gp_submit_args *a, uint64_t *seq);

/*
 * Complete the accepted item `seq` with GP_ECANCELED if the batcher has not taken it yet
 * (docs/DESIGN.md §8.5). It is then never copied to the device (or, inside a batch's span,
 * rides along but its output is dropped: its input bytes may never have been written, a prep
 * item canceled before its prep ran), and its one callback says GP_ECANCELED.
 * @return GP_OK (canceled; a second cancel of the same item also returns GP_OK);
 *         GP_EBUSY (too late: the item is on the device or done, its callback comes as usual,
 *         with its output); GP_EINVAL (NULL, or `seq` names no accepted item: not yet
 *         submitted, an uncommitted or abandoned reservation). Once a later item has reused
 *         the done item's ring slot (`capacity` items on), every answer for it is GP_EBUSY.
 *         Any thread, never blocks.
 */
GP_API int gp_pipeline_cancel(gp_pipeline *p, uint64_t seq);

/* A claimed ring slot to be written in place. */
typedef struct gp_reservation {
    void *data;           /* `bytes` to write, contiguous; valid until commit/abandon */
    size_t bytes;         /* item_in_bytes, or the size gp_pipeline_reserve_ex asked for */
    uint64_t deadline_ns; /* optional deadline, set before commit (0 = none) */
    uint64_t seq;         /* submit sequence number: the global submit order */
} gp_reservation;

/*
 * Claim the next ring slot for writing in place (zero copies). Blocks or returns GP_EAGAIN
 * when full, as submit. Items are batched in claim order, so commit or abandon promptly: a
 * pending reservation holds back every later item. The reservation belongs to the calling
 * code; commit it from any thread, once. Variable-size items need the size: use
 * gp_pipeline_reserve_ex (this returns GP_EINVAL for them).
 * @return GP_OK, GP_EINVAL, GP_EAGAIN, GP_ESHUTDOWN, GP_EDEVICE.
 */
GP_API int gp_pipeline_reserve(gp_pipeline *p, gp_reservation *r);

/*
 * As gp_pipeline_reserve for `input_bytes` bytes (variable-size items: 1..max_item_in_bytes, a
 * whole number of item_in_multiple when set;
 * fixed: item_in_bytes) and an output of `output_bytes` (as gp_submit_args.output_bytes).
 * r->bytes is input_bytes. @return as gp_pipeline_reserve.
 */
GP_API int gp_pipeline_reserve_ex(gp_pipeline *p, size_t input_bytes, size_t output_bytes,
                                  gp_reservation *r);

/* Publish a reserved slot; `done` (required) is then called exactly once.
   @return GP_OK or GP_EINVAL (NULL argument); on GP_EINVAL the reservation stays open. */
GP_API int gp_pipeline_commit(gp_pipeline *p, gp_reservation *r, gp_done_fn done, void *user);

/* Give a reserved slot back unused; no callback. @return GP_OK or GP_EINVAL. */
GP_API int gp_pipeline_abandon(gp_pipeline *p, gp_reservation *r);

/*
 * Blocking convenience: submit `input` (in_bytes as gp_pipeline_submit), wait for the result
 * and copy it into `output`. out_bytes must equal item_out_bytes, or, with variable-size
 * outputs, is the item's output size (1..max_item_out_bytes). From the pipeline's own threads
 * (gp_done_fn) GP_EINVAL: it would wait for itself. The item is batched like any other: with
 * max_delay_us set, a lone caller waits up to that long for batchmates (gp_pipeline_flush
 * from another thread, or max_delay_us 0, dispatches at once). @return the item's status, or a
 * submit error.
 */
GP_API int gp_pipeline_infer(gp_pipeline *p, const void *input, size_t in_bytes, void *output,
                             size_t out_bytes);

/* Dispatch every item submitted before this call without waiting for max_delay_us.
   @return GP_OK or GP_EINVAL. */
GP_API int gp_pipeline_flush(gp_pipeline *p);

/*
 * Flush, then wait until every item submitted (or committed) before this call has had its
 * callback, or `timeout_us` passed (< 0, or too long for the clock: wait forever). A
 * reservation still open is not waited for, unless an item accepted after it must wait for its
 * commit or abandon. From the pipeline's own threads (gp_done_fn) GP_EINVAL at once: it would
 * wait for itself. @return GP_OK, GP_ETIMEDOUT, GP_EINVAL.
 */
GP_API int gp_pipeline_drain(gp_pipeline *p, int64_t timeout_us);

/* ---------------------------------------------------------------------------------------- */
/* Stats                                                                                     */
/* ---------------------------------------------------------------------------------------- */

#define GP_HIST_BUCKETS 33 /* batch-size histogram: bucket b counts sizes in [2^(b-1), 2^b) */

/*
 * Latency histograms (queue_wait_hist, latency_hist): bucket b counts durations up to
 * GP_LATENCY_BOUNDS_S[b] seconds and above the bound before it; the last bucket counts what
 * lies above 10 s. They are read from finer buckets (1/16 relative width): a duration goes to
 * the first bound at or above its fine bucket's top, so a duration within 1/16 below a bound
 * may be counted in the next bucket, never in an earlier one.
 */
#define GP_LATENCY_BUCKETS 20
#define GP_LATENCY_BOUNDS_S                                                                        \
    {                                                                                              \
        1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, \
            0.5, 1.0, 2.5, 5.0, 10.0                                                               \
    }

/*
 * Every gp_stats field, once, in layout order: X(kind, type, name, dim, unit, prom, help).
 * The struct below, the library's snapshot and window difference, and its JSON, Prometheus
 * and report renderings all expand this list; a program may expand it too (to dump or compare
 * snapshots). Fields are only ever appended.
 *   kind  how a window treats the field, and how the renderings show it:
 *         META      struct_size                        not rendered
 *         BACKEND   a gp_backend                       window: the later snapshot's
 *         FLAG      0 or 1                             window: the later snapshot's
 *         TEXT      a NUL-terminated string            window: the later snapshot's
 *         WALL      nanoseconds (see wall_ns)          window: the interval
 *         COUNT     events since create                window: the difference
 *         NS        nanoseconds, accumulated           window: the difference
 *         BYTES     bytes moved                        window: the difference
 *         QUANTILE  a latency percentile, ns           window: from the histograms' difference
 *         CONFIG    the configuration it runs under    window: the later snapshot's
 *         SIZES     batch sizes, GP_HIST_BUCKETS power-of-two buckets    window: the difference
 *         REASONS   batches, indexed by gp_close_reason                  window: the difference
 *         LATENCY   durations, GP_LATENCY_BUCKETS buckets (see above)    window: the difference
 *   type, name, dim  the member is `type name dim;` (dim is empty or [N])
 *   unit  what one unit of the value is ("ns", "items", "bytes", ...), "" when none
 *   prom  the Prometheus family (after the "gpupipe_" prefix) with its labels, "" when the
 *         field is not a family or sample of its own (a histogram's sum or count, text, config)
 *   help  what it counts
 * Busy times (kind NS, *_busy_ns): h2d, compute and d2h count the union of stage intervals
 * over all slots, each interval credited when its batch completes, so over the pipeline's life
 * busy / wall is a fraction of wall time; a window's (gp_pipeline_stats_since) may exceed the
 * window's length by the part before the mark of the intervals in flight then. callback and prep
 * count the time spent, summed over their workers (up to wall times the number of workers).
 */
#define GP_STATS_FIELDS(X)                                                                         \
    X(META, size_t, struct_size, , "bytes", "",                                                    \
      "set by the caller to sizeof(gp_stats) before the call")                                     \
    X(BACKEND, gp_backend, backend, , "", "", "the backend that runs: HOST or CUDA")               \
    X(FLAG, int, fell_back, , "", "", "1 when AUTO chose host because no device was usable")       \
    X(TEXT, char, fallback_reason, [160], "", "",                                                  \
      "why, when fell_back (a longer reason is cut between UTF-8 characters and ends in '...'; "   \
      "the WARN log line has it whole)")                                                           \
    X(WALL, uint64_t, wall_ns, , "ns", "uptime_seconds",                                           \
      "time since create finished its setup and started the threads, up to the end of "            \
      "gp_pipeline_shutdown once called (a window: its length)")                                   \
    X(COUNT, uint64_t, submitted, , "items", "items_submitted_total",                              \
      "items accepted by submit or commit (not an open reservation)")                              \
    X(COUNT, uint64_t, completed, , "items", "",                                                   \
      "callbacks run, any status (added when a batch's last callback has returned, so a "          \
      "snapshot may trail a callback that ran; exact after gp_pipeline_drain)")                    \
    X(COUNT, uint64_t, completed_ok, , "items", "items_completed_total{status=\"ok\"}",            \
      "callbacks with GP_OK")                                                                      \
    X(COUNT, uint64_t, timed_out, , "items", "items_completed_total{status=\"timed_out\"}",        \
      "callbacks with GP_ETIMEDOUT")                                                               \
    X(COUNT, uint64_t, canceled, , "items", "items_completed_total{status=\"canceled\"}",          \
      "callbacks with GP_ECANCELED")                                                               \
    X(COUNT, uint64_t, failed, , "items", "items_completed_total{status=\"failed\"}",              \
      "callbacks with any other code: GP_ECOMPUTE, GP_EDEVICE, a prep failure's, or the "          \
      "code a compute gave gp_batch_fail_item")                                                    \
    X(COUNT, uint64_t, rejected_full, , "items", "items_rejected_total",                           \
      "submits that returned GP_EAGAIN because the ring was full")                                 \
    X(COUNT, uint64_t, batches, , "batches", "", "batches dispatched")                             \
    X(COUNT, uint64_t, batch_items, , "items", "",                                                 \
      "items carried by batches (mean batch = batch_items / batches)")                             \
    X(SIZES, uint64_t, batch_hist, [GP_HIST_BUCKETS], "batches", "batch_size_items",               \
      "items per dispatched batch")                                                                \
    X(REASONS, uint64_t, close_reasons, [GP_CLOSE_BYTES], "batches", "batches_closed_total",       \
      "batches by the reason they left the batcher (GP_CLOSE_FULL..GP_CLOSE_SHUTDOWN; "            \
      "GP_CLOSE_BYTES: close_bytes)")                                                              \
    X(NS, uint64_t, h2d_busy_ns, , "ns", "stage_busy_seconds_total{stage=\"h2d\"}",                \
      "union of host-to-device copy intervals")                                                    \
    X(NS, uint64_t, compute_busy_ns, , "ns", "stage_busy_seconds_total{stage=\"compute\"}",        \
      "union of compute intervals")                                                                \
    X(NS, uint64_t, d2h_busy_ns, , "ns", "stage_busy_seconds_total{stage=\"d2h\"}",                \
      "union of device-to-host copy intervals")                                                    \
    X(NS, uint64_t, callback_busy_ns, , "ns", "stage_busy_seconds_total{stage=\"callback\"}",      \
      "time completion workers spent in callbacks, summed over workers")                           \
    X(NS, uint64_t, prep_busy_ns, , "ns", "stage_busy_seconds_total{stage=\"prep\"}",              \
      "time prep workers spent in prep, summed over workers")                                      \
    X(BYTES, uint64_t, h2d_bytes, , "bytes", "copy_bytes_total{direction=\"h2d\"}",                \
      "item bytes copied host to device (not a variable-size batch's offsets)")                    \
    X(BYTES, uint64_t, d2h_bytes, , "bytes", "copy_bytes_total{direction=\"d2h\"}",                \
      "bytes copied device to host")                                                               \
    X(NS, uint64_t, starved_ns, , "ns", "batcher_starved_seconds_total",                           \
      "time the batcher found no item to send")                                                    \
    X(NS, uint64_t, backpressure_ns, , "ns", "producer_backpressure_seconds_total",                \
      "time producers were blocked on a full ring, summed over producers")                         \
    X(NS, uint64_t, saturated_ns, , "ns", "batcher_saturated_seconds_total",                       \
      "time the batcher had a batch but every in-flight slot was busy")                            \
    X(NS, uint64_t, enqueue_ns, , "ns", "enqueue_seconds_total",                                   \
      "host time spent enqueuing batches (copies and compute launch)")                             \
    X(QUANTILE, uint64_t, queue_wait_p50, , "ns", "", "median time from submit to dispatch")       \
    X(QUANTILE, uint64_t, queue_wait_p95, , "ns", "", "95th percentile, submit to dispatch")       \
    X(QUANTILE, uint64_t, queue_wait_p99, , "ns", "", "99th percentile, submit to dispatch")       \
    X(QUANTILE, uint64_t, latency_p50, , "ns", "", "median time from submit to callback")          \
    X(QUANTILE, uint64_t, latency_p95, , "ns", "", "95th percentile, submit to callback")          \
    X(QUANTILE, uint64_t, latency_p99, , "ns", "", "99th percentile, submit to callback")          \
    X(QUANTILE, uint64_t, latency_max, , "ns", "", "largest submit to callback (bucket top)")      \
    X(COUNT, uint64_t, graph_replays, , "batches", "graph_replays_total",                          \
      "batches run as a CUDA graph replay (0 on host)")                                            \
    X(COUNT, uint64_t, graph_eager, , "batches", "graph_eager_batches_total",                      \
      "batches run without a CUDA graph (CUDA backend; 0 on host)")                                \
    X(TEXT, char, graph_eager_reason, [96], "", "", "why batches ran without a CUDA graph")        \
    X(NS, uint64_t, latency_sum_ns, , "ns", "",                                                    \
      "sum of submit to callback over completed items (the latency histogram's sum)")              \
    X(NS, uint64_t, queue_wait_sum_ns, , "ns", "",                                                 \
      "sum of submit to dispatch over batch_items items (the queue wait histogram's sum)")         \
    X(CONFIG, uint64_t, max_batch, , "items", "", "largest batch")                                 \
    X(CONFIG, uint64_t, capacity, , "items", "", "ring items")                                     \
    X(CONFIG, uint64_t, item_in_bytes, , "bytes", "",                                              \
      "bytes of one input item (0 with variable-size inputs)")                                     \
    X(CONFIG, uint64_t, item_out_bytes, , "bytes", "",                                             \
      "bytes of one output item (0 with variable-size outputs)")                                   \
    X(CONFIG, uint32_t, max_delay_us, , "us", "", "how long a small batch may wait")               \
    X(CONFIG, int, inflight, , "slots", "", "in-flight batch slots")                               \
    X(CONFIG, int, prep_workers, , "threads", "", "prep workers")                                  \
    X(CONFIG, int, completion_workers, , "threads", "", "callback threads")                        \
    X(CONFIG, int, cuda_graphs, , "", "",                                                          \
      "1 when the compute is captured in CUDA graphs (config.cuda_graphs on the CUDA backend)")    \
    X(NS, uint64_t, delay_wait_ns, , "ns", "batcher_delay_seconds_total",                          \
      "time the batcher held a partial batch for max_delay_us with a slot free")                   \
    X(LATENCY, uint64_t, queue_wait_hist, [GP_LATENCY_BUCKETS], "items", "queue_wait_seconds",     \
      "time from submit to the batch's dispatch, per item")                                        \
    X(LATENCY, uint64_t, latency_hist, [GP_LATENCY_BUCKETS], "items", "latency_seconds",           \
      "time from submit to the call of the item's callback (its own run not included), per "       \
      "item")                                                                                      \
    X(COUNT, uint64_t, close_bytes, , "batches", "",                                               \
      "batches closed by the byte budget, max_batch_bytes, or a nearly full arena "                \
      "(GP_CLOSE_BYTES; rendered with the close reasons)")                                         \
    X(COUNT, uint64_t, cancels, , "items", "cancels_total",                                        \
      "items gp_pipeline_cancel canceled before they went to the device")                          \
    X(COUNT, uint64_t, pad_useful, , "elements", "padding_elements_total{kind=\"useful\"}",        \
      "elements of real data computes reported with gp_batch_report_padding")                      \
    X(COUNT, uint64_t, pad_total, , "elements", "padding_elements_total{kind=\"computed\"}",       \
      "elements computes processed, padding included (gp_batch_report_padding)")                   \
    X(TEXT, char, backend_note, [160], "", "",                                                     \
      "what the backend runs without and why (e.g. cuDNN unavailable), or empty")                  \
    X(NS, uint64_t, launch_ns, , "ns", "launch_seconds_total",                                     \
      "of enqueue_ns, host time in the backend's launch (CUDA: the compute's own calls or its "    \
      "graph's launch; host: the hand-off to the stream)")                                         \
    X(CONFIG, int, spin_wait, , "", "",                                                            \
      "1 when the completion thread and the batcher poll instead of sleeping")

/*
 * A snapshot of the pipeline's counters, GP_STATS_FIELDS in order. Layout history (fields are
 * only appended, so code built against an older header keeps working): struct_size ..
 * graph_eager_reason first; latency_sum_ns .. delay_wait_ns appended in 0.1.0; queue_wait_hist
 * .. backend_note appended in 0.2.0; launch_ns and spin_wait appended in 0.3.0.
 */
#define GP__STATS_MEMBER(kind, type, name, dim, unit, prom, help) type name dim;
typedef struct gp_stats {
    GP_STATS_FIELDS(GP__STATS_MEMBER)
} gp_stats;

/* Fill `s` (s->struct_size must be set, at most this header's size: a larger one is GP_EINVAL)
   with a consistent-enough snapshot: counters are read one by one without stopping the
   pipeline. Any thread. @return GP_OK or GP_EINVAL. */
GP_API int gp_pipeline_stats(gp_pipeline *p, gp_stats *s);

/*
 * The last error's detail: the failing call, native code, file:line. Copies a
 * NUL-terminated string into `buf` and returns the error code (GP_OK if none). The detail does
 * not repeat the code's name (print gp_err_name of the return value with it); so does every
 * `err` buffer the library fills. Every call on `p` that fails records its detail here (an
 * argument it refused, a struct_size, a write error), and so do the pipeline's own failures (a
 * compute, the device); answers that are not failures leave it as it was: GP_EAGAIN (a full
 * ring), GP_ESHUTDOWN, gp_pipeline_cancel's GP_EBUSY and GP_EINVAL, gp_pipeline_drain's
 * GP_ETIMEDOUT, the submit family's GP_EDEVICE once the device failed (recorded when it
 * failed), gp_pipeline_infer's item status (GP_ECANCELED, GP_ETIMEDOUT: what the item's callback
 * would get; a compute's or the device's failure is recorded as it happens); and once
 * gp_pipeline_shutdown began, the submit family answers GP_ESHUTDOWN whatever its arguments,
 * and commit / abandon GP_EINVAL for what is not an open reservation, recording nothing. It
 * stays until the next one (a later success does not clear
 * it). Any thread.
 */
GP_API int gp_pipeline_last_error(gp_pipeline *p, char *buf, size_t len);

/* ---------------------------------------------------------------------------------------- */
/* Stats windows and diagnosis                                                               */
/* ---------------------------------------------------------------------------------------- */

/*
 * A window: the counters over an interval instead of since create. Take a mark, later ask for
 * the stats since it: COUNT, NS, BYTES and histogram fields are differences, wall_ns is the
 * interval, percentiles come from the difference of the latency histograms, and the other
 * fields are the later snapshot's (see GP_STATS_FIELDS). Measure after a warm-up so. Each
 * difference is exact only up to the events while either snapshot was read: a snapshot keeps
 * pad_useful <= pad_total and completed <= completed_ok + timed_out + canceled + failed, a
 * window may not, by those events (a difference that would be negative reads 0).
 */
typedef struct gp_stats_mark gp_stats_mark;

/*
 * Allocate a mark holding a snapshot of `p` taken now, histograms included, into *out. The
 * mark belongs to the caller: free it with gp_stats_mark_free (before or after destroying `p`).
 * Any thread. @return GP_OK, GP_EINVAL (NULL argument), GP_ENOMEM. On error *out is NULL (when
 * `out` is not NULL).
 */
GP_API int gp_pipeline_mark(gp_pipeline *p, gp_stats_mark **out);

/*
 * Fill `out` (out->struct_size must be set, as for gp_pipeline_stats; only that much is
 * written) with the stats of `p` since `m`, a mark taken on `p`. `m` is only read: any number of
 * threads may use one mark at once, and it may be used again. Any thread.
 * @return GP_OK, GP_EINVAL (NULL argument, bad struct_size, a mark taken on another
 *         pipeline), GP_ENOMEM (no scratch for the histograms; nothing is written).
 */
GP_API int gp_pipeline_stats_since(gp_pipeline *p, const gp_stats_mark *m, gp_stats *out);

/* Free a mark; NULL is accepted. Any thread; not while another call uses the mark. */
GP_API void gp_stats_mark_free(gp_stats_mark *m);

/* The doctor's verdicts: X(NAME, value, name, title). Values are pinned, only appended. */
#define GP_VERDICT_MAP(X)                                                                          \
    X(NO_WORK, 0, "no-work", "no batch dispatched, or none completed, in the snapshot or window")  \
    X(GPU_NOT_USED, 1, "gpu-not-used", "the GPU is not used: running on the host backend")         \
    X(PRODUCERS, 2, "producers", "producers starve the device")                                    \
    X(PREP, 3, "prep", "host pre-processing (prep workers) is the bottleneck")                     \
    X(H2D, 4, "h2d", "host-to-device copies are the bottleneck")                                   \
    X(COMPUTE, 5, "compute", "compute-bound: the healthy case")                                    \
    X(D2H, 6, "d2h", "device-to-host copies are the bottleneck")                                   \
    X(CALLBACKS, 7, "callbacks", "callbacks / post-processing are the bottleneck")                 \
    X(SMALL_BATCHES, 8, "small-batches", "batches too small for the configured delay")             \
    X(ENQUEUE, 9, "enqueue", "host enqueue takes longer than the compute")                         \
    X(INFLIGHT, 10, "inflight", "too few in-flight slots: stages cannot overlap")                  \
    X(MIXED, 11, "mixed", "no single bottleneck")                                                  \
    X(PADDING, 12, "padding", "the compute spends a large share on padding")

/* clang-format off */
typedef enum gp_verdict {
#define GP__VERDICT_ENUM(NAME, value, name, title) GP_VERDICT_##NAME = value,
    GP_VERDICT_MAP(GP__VERDICT_ENUM)
#undef GP__VERDICT_ENUM
    GP_VERDICT_COUNT_ = 13
} gp_verdict;
/* clang-format on */

/* Static short name ("producers", "h2d", ...: stable, lower case, for tables, CSV, JSON and
   tests); "unknown" for values not in the map. Any thread. */
GP_API const char *gp_verdict_name(gp_verdict v);

/*
 * The doctor's diagnosis of a snapshot or a window. Fractions are of wall time; worker
 * utilisations are busy time over wall time times the worker count; busy fractions are capped
 * at 1 (a window's edges can cut an interval that began before it).
 */
typedef struct gp_diagnosis {
    size_t struct_size;    /* set by the caller to sizeof(gp_diagnosis) before the call */
    gp_verdict verdict;    /* GP_VERDICT_GPU_NOT_USED when AUTO fell back, else == bottleneck */
    gp_verdict bottleneck; /* the pipeline's own limit on the backend that ran */
    double wall_s, items_per_s, mean_batch;
    double h2d, compute, d2h;  /* stage busy fractions */
    double callbacks, prep;    /* worker utilisations */
    double enqueue;            /* batcher time spent enqueuing */
    double starved, saturated; /* batcher: no item to send; every slot busy */
    double delay_wait;         /* batcher: holding a partial batch for max_delay_us */
    double backpressure;       /* producer-seconds blocked on a full ring per second */
    double batch_compute_us;   /* compute busy time (a union over slots) per batch: where
                                  slots compute at once (host backend), less than one batch's
                                  compute */
    double batch_enqueue_us;   /* host enqueue per batch */
    double device_items_per_s; /* mean_batch / compute time per batch */
    double h2d_gbps, d2h_gbps; /* bytes moved per wall second, 1e9 */
    char why[384];             /* the numbers that prove the bottleneck */
    char knob[384];            /* what to turn (why and knob: clauses that would not fit are
                                  left out whole, never cut) */
    /* Appended in 0.2.0. */
    double padding; /* share of the elements computes processed that were padding (their
                       gp_batch_report_padding sums; 0 when none reported) */
} gp_diagnosis;

/*
 * The doctor: name the bottleneck of `s` with the numbers that prove it and the knob to turn.
 * A pure function of `s` (a snapshot, a window, or counters from elsewhere): it reads no
 * pipeline. The busiest of compute, H2D, D2H, callbacks and prep (per worker), and enqueue
 * when its host time per batch exceeds the compute per batch, is the bottleneck when it is busy
 * at least 70% of wall time; otherwise small-batches (max_delay_us set, at least half the
 * batches left on the delay timer, the batches short of max_batch carrying at most half of it
 * on average), inflight (a batch waited for a free slot at least 50% of the time), producers
 * (the batcher had no item to send, or held a partial batch for max_delay_us, at least 40% of
 * the time together), else mixed; no-work while no batch was dispatched or no callback has run
 * (a batch still running is not counted yet). When compute is the bottleneck but the batcher
 * had no item to send at least 40% of the time and the mean batch is under a quarter of
 * max_batch, the verdict is producers (the items come too slowly to fill batches; more load
 * would fill them at little extra device time). When compute is the bottleneck and the
 * computes reported (gp_batch_report_padding) that at least a third of their elements were
 * padding, the verdict is padding. The verdict is gpu-not-used when
 * AUTO fell back, with the bottleneck still named. s->struct_size: fields past it read as 0.
 * d->struct_size must be set; only that much is written. Any thread. @return GP_OK or GP_EINVAL
 * (NULL argument, bad struct_size).
 */
GP_API int gp_stats_diagnose(const gp_stats *s, gp_diagnosis *d);

/*
 * Render a snapshot or a window `s` (struct_size as for gp_stats_diagnose) to `f`:
 *  - report: the doctor's verdict (a pipeline that AUTO moved to the host says so first, with
 *    the reason), why, the knob, then the numbers behind it and every counter;
 *  - json: one JSON object with every gp_stats field (the CONFIG fields in a nested "config"
 *    object), the derived fractions and the diagnosis;
 *  - prometheus: text exposition format 0.0.4: counters in seconds and bytes with HELP and TYPE
 *    lines, batch sizes, queue wait and latency as histograms (latency in seconds), the verdict.
 * Writes only to `f`, then flushes it, so a failed write is reported here rather than at the
 * caller's fclose. Any thread.
 * @return GP_OK, GP_EINVAL (NULL argument, bad struct_size), GP_EIO (the stream reported an
 *         error; part of the text may have been written).
 */
GP_API int gp_stats_report(const gp_stats *s, FILE *f);
GP_API int gp_stats_json(const gp_stats *s, FILE *f);
GP_API int gp_stats_prometheus(const gp_stats *s, FILE *f);

/* gp_pipeline_stats of `p`, rendered by gp_stats_report / gp_stats_json / gp_stats_prometheus.
   Any thread. @return as those. */
GP_API int gp_pipeline_report(gp_pipeline *p, FILE *f);
GP_API int gp_pipeline_stats_json(gp_pipeline *p, FILE *f);
GP_API int gp_pipeline_stats_prometheus(gp_pipeline *p, FILE *f);

/* ---------------------------------------------------------------------------------------- */
/* Utilities                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* Monotonic clock in nanoseconds, the clock deadlines are measured on. Any thread. */
GP_API uint64_t gp_now_ns(void);

/* "MAJOR.MINOR.PATCH" of the library linked at run time. Any thread. */
GP_API const char *gp_version(void);

/* Backend name: "auto", "host", "cuda"; "unknown" for other values. */
GP_API const char *gp_backend_name(gp_backend b);
/* Close reason name: "full", "preferred", "delay", "slot-free", "flush", "shutdown", "bytes";
   "unknown" for other values. */
GP_API const char *gp_close_reason_name(gp_close_reason r);

#ifdef __cplusplus
}
#endif
#endif /* GPUPIPE_GPUPIPE_H */
