/*
 * Host backend: the device interface on plain threads, so the whole pipeline runs (and is
 * tested) where no GPU exists. A stream is a worker thread running a FIFO of operations; an
 * event is a counter with a condition variable and the time it completed; copies are memcpy;
 * the compute runs on the stream thread with host pointers.
 *
 * Simulated stage costs (config.sim_*): copies in one direction share one simulated copy
 * engine and computes share one compute engine, as on a GPU with one copy engine per
 * direction, so the stage overlap of the pipeline can be checked and shown without a GPU.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../backend.h"
#include "../clock.h"
#include "../device.h"
#include "../model/exec.h"

enum { ENGINE_H2D, ENGINE_COMPUTE, ENGINE_D2H, ENGINE_COUNT };
#define STREAM_OPS 64 /* a slot enqueues at most 9 ops per batch and has one batch at a time */

/* A simulated engine serves operations in the order they were enqueued (tickets taken by the
   batcher at enqueue time), like a GPU's copy or compute queue: two slots' copies never
   overtake each other. */
typedef struct engine {
    pthread_mutex_t mu; /* leaf lock */
    pthread_cond_t cv;
    _Atomic uint64_t next; /* next ticket; taken by the enqueuing thread */
    uint64_t serving;      /* under mu */
} engine;

typedef struct host_ctx {
    gp__errsink *sink;
    double copy_bytes_per_s, compute_us, compute_us_per_item;
    int simulate[ENGINE_COUNT]; /* engine has a simulated cost: its ops take tickets */
    engine engine[ENGINE_COUNT];
} host_ctx;

struct gp__event {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t recorded;  /* records issued; written by the batcher thread under mu */
    uint64_t completed; /* records reached by the stream; under mu */
    uint64_t t_ns;      /* when the last record completed */
};

typedef enum op_kind { OP_H2D, OP_D2H, OP_LAUNCH, OP_RECORD } op_kind;

typedef struct stream_op {
    op_kind kind;
    void *dst;
    const void *src;
    size_t bytes;
    gp__launch *launch;
    gp__event *event;
    uint64_t target; /* OP_RECORD: value of `completed` once reached */
    uint64_t ticket; /* simulated engine turn (copies and launches of simulated engines) */
} stream_op;

struct gp__stream {
    host_ctx *ctx;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* ops added, ops taken, stop */
    stream_op ops[STREAM_OPS];
    uint64_t head, tail; /* under mu */
    int stop;
};

static void sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) != 0)
        ; /* EINTR: sleep the rest */
}

/* Wait for our turn on a simulated engine, hold it for `us` microseconds, pass it on. */
static void engine_busy(host_ctx *c, int which, uint64_t ticket, double us) {
    if (!c->simulate[which]) return;
    engine *e = &c->engine[which];
    pthread_mutex_lock(&e->mu);
    while (e->serving != ticket)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    /* A cost beyond uint64_t nanoseconds (a rate near 0, a huge config value) sleeps that
       long rather than converting out of range (undefined). */
    double ns = us * 1000.0;
    if (ns > 0) sleep_ns(ns < 18446744073709549568.0 ? (uint64_t)ns : UINT64_MAX);
    pthread_mutex_lock(&e->mu);
    e->serving++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static uint64_t take_ticket(host_ctx *c, int which) {
    return c->simulate[which]
               ? atomic_fetch_add_explicit(&c->engine[which].next, 1, memory_order_relaxed)
               : 0;
}

static void run_op(host_ctx *c, stream_op *op) {
    switch (op->kind) {
    case OP_H2D:
    case OP_D2H:
        memcpy(op->dst, op->src, op->bytes);
        if (c->copy_bytes_per_s > 0)
            engine_busy(c, op->kind == OP_H2D ? ENGINE_H2D : ENGINE_D2H, op->ticket,
                        (double)op->bytes / c->copy_bytes_per_s * 1e6);
        break;
    case OP_LAUNCH: {
        gp__launch *l = op->launch;
        gp__own_thread_mark(l->owner); /* the compute runs here: a wait on l->owner refused */
        l->status = l->fn(l->user, &l->batch);
        engine_busy(c, ENGINE_COMPUTE, op->ticket,
                    c->compute_us + c->compute_us_per_item * (double)l->batch.n);
        break;
    }
    case OP_RECORD: {
        gp__event *e = op->event;
        uint64_t now = gp__now_ns();
        pthread_mutex_lock(&e->mu);
        e->completed = op->target;
        e->t_ns = now;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        break;
    }
    }
}

static void *stream_main(void *arg) {
    gp__stream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->head == s->tail && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->head == s->tail) break;
        stream_op op = s->ops[s->head % STREAM_OPS];
        pthread_mutex_unlock(&s->mu);
        run_op(s->ctx, &op);
        pthread_mutex_lock(&s->mu);
        s->head++;
        pthread_cond_broadcast(&s->cv); /* room for a blocked enqueue */
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int enqueue(gp__stream *s, const stream_op *op) {
    pthread_mutex_lock(&s->mu);
    while (s->tail - s->head == STREAM_OPS)
        pthread_cond_wait(&s->cv, &s->mu);
    s->ops[s->tail % STREAM_OPS] = *op;
    s->tail++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return GP_OK;
}

/* ---- the table ------------------------------------------------------------------------ */

static int host_open(const gp_config *cfg, gp__errsink *sink, void **out) {
    host_ctx *c = calloc(1, sizeof *c);
    if (!c) return GP__ERR(sink, GP_ENOMEM, "host backend context");
    c->sink = sink;
    c->copy_bytes_per_s = cfg->sim_copy_bytes_per_s;
    c->compute_us = cfg->sim_compute_us;
    c->compute_us_per_item = cfg->sim_compute_us_per_item;
    c->simulate[ENGINE_H2D] = c->simulate[ENGINE_D2H] = c->copy_bytes_per_s > 0;
    c->simulate[ENGINE_COMPUTE] = c->compute_us > 0 || c->compute_us_per_item > 0;
    for (int i = 0; i < ENGINE_COUNT; i++) {
        int rc = pthread_mutex_init(&c->engine[i].mu, NULL);
        if (rc == 0 && (rc = pthread_cond_init(&c->engine[i].cv, NULL)) != 0)
            pthread_mutex_destroy(&c->engine[i].mu);
        if (rc != 0) {
            while (i-- > 0) {
                pthread_cond_destroy(&c->engine[i].cv);
                pthread_mutex_destroy(&c->engine[i].mu);
            }
            free(c);
            return GP__ERR(sink, GP_ESYS, "simulated engine init: errno %d", rc);
        }
        atomic_init(&c->engine[i].next, 0);
    }
    *out = c;
    return GP_OK;
}

static void host_close(void *ctx) {
    host_ctx *c = ctx;
    for (int i = 0; i < ENGINE_COUNT; i++) {
        pthread_cond_destroy(&c->engine[i].cv);
        pthread_mutex_destroy(&c->engine[i].mu);
    }
    free(c);
}

static int host_alloc(void *ctx, size_t bytes, void **p) {
    host_ctx *c = ctx;
    /* No allocation holds more than PTRDIFF_MAX bytes (glibc refuses them; a sanitizer's
       allocator aborts on them), and a size within 63 of SIZE_MAX would round up to 0 (a
       64-byte block behind a huge ring). */
    if (bytes > PTRDIFF_MAX) {
        *p = NULL;
        return GP__ERR(c->sink, GP_ENOMEM, "host buffer of %zu bytes", bytes);
    }
    size_t rounded = (bytes + 63) & ~(size_t)63;
    *p = aligned_alloc(64, rounded ? rounded : 64);
    return *p ? GP_OK : GP__ERR(c->sink, GP_ENOMEM, "host buffer of %zu bytes", bytes);
}

static void host_free(void *ctx, void *p) {
    free(p);
}

static int host_dev_alloc(void *ctx, int device, size_t bytes, void **p) {
    return host_alloc(ctx, bytes, p);
}

static void host_dev_free(void *ctx, int device, void *p) {
    free(p);
}

static int host_stream_create(void *ctx, int device, gp__stream **out) {
    host_ctx *c = ctx;
    gp__stream *s = calloc(1, sizeof *s);
    int rc;
    if (!s) return GP__ERR(c->sink, GP_ENOMEM, "host stream");
    s->ctx = c;
    if ((rc = pthread_mutex_init(&s->mu, NULL)) != 0) goto fail;
    if ((rc = pthread_cond_init(&s->cv, NULL)) != 0) {
        pthread_mutex_destroy(&s->mu);
        goto fail;
    }
    if ((rc = pthread_create(&s->thread, NULL, stream_main, s)) != 0) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        goto fail;
    }
    *out = s;
    return GP_OK;
fail:
    free(s);
    return GP__ERR(c->sink, GP_ESYS, "host stream thread setup: errno %d", rc);
}

/* Runs what was queued, then stops the thread. */
static void host_stream_destroy(void *ctx, gp__stream *s) {
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static void host_stream_bind(void *ctx, gp__stream *s, gp_batch *b) {
    b->stream = NULL;
    b->impl = NULL;
    b->device = -1;
}

static int host_copy_h2d(void *ctx, gp__stream *s, void *dst, const void *src, size_t bytes) {
    stream_op op = {.kind = OP_H2D,
                    .dst = dst,
                    .src = src,
                    .bytes = bytes,
                    .ticket = take_ticket(ctx, ENGINE_H2D)};
    return enqueue(s, &op);
}

static int host_copy_d2h(void *ctx, gp__stream *s, void *dst, const void *src, size_t bytes) {
    stream_op op = {.kind = OP_D2H,
                    .dst = dst,
                    .src = src,
                    .bytes = bytes,
                    .ticket = take_ticket(ctx, ENGINE_D2H)};
    return enqueue(s, &op);
}

static int host_launch(void *ctx, gp__stream *s, gp__launch *l) {
    stream_op op = {.kind = OP_LAUNCH, .launch = l, .ticket = take_ticket(ctx, ENGINE_COMPUTE)};
    return enqueue(s, &op);
}

static int host_event_create(void *ctx, int device, gp__event **out) {
    host_ctx *c = ctx;
    gp__event *e = calloc(1, sizeof *e);
    int rc;
    if (!e) return GP__ERR(c->sink, GP_ENOMEM, "host event");
    if ((rc = pthread_mutex_init(&e->mu, NULL)) != 0) {
        free(e);
        return GP__ERR(c->sink, GP_ESYS, "pthread_mutex_init: errno %d", rc);
    }
    if ((rc = pthread_cond_init(&e->cv, NULL)) != 0) {
        pthread_mutex_destroy(&e->mu);
        free(e);
        return GP__ERR(c->sink, GP_ESYS, "pthread_cond_init: errno %d", rc);
    }
    *out = e;
    return GP_OK;
}

static void host_event_destroy(void *ctx, gp__event *e) {
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static int host_event_record(void *ctx, gp__event *e, gp__stream *s) {
    pthread_mutex_lock(&e->mu);
    uint64_t target = ++e->recorded;
    pthread_mutex_unlock(&e->mu);
    stream_op op = {.kind = OP_RECORD, .event = e, .target = target};
    return enqueue(s, &op);
}

static int host_event_wait(void *ctx, gp__event *e) {
    pthread_mutex_lock(&e->mu);
    while (e->completed < e->recorded)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    return GP_OK;
}

static int host_event_time_ns(void *ctx, gp__event *e, uint64_t *ns) {
    pthread_mutex_lock(&e->mu);
    *ns = e->t_ns;
    pthread_mutex_unlock(&e->mu);
    return GP_OK;
}

/* The padding helpers run inside the compute, on the stream thread: plain copies. */
static int host_pad(void *ctx, const gp_batch *b, void *dst, size_t row_bytes, size_t elem_bytes,
                    uint8_t *mask) {
    const uint64_t *off = b->in_offsets_host;
    size_t elems = row_bytes / elem_bytes;
    for (size_t k = 0; k < b->n; k++) {
        size_t len = (size_t)(off[k + 1] - off[k]);
        unsigned char *row = (unsigned char *)dst + k * row_bytes;
        memcpy(row, (const unsigned char *)b->in + off[k], len);
        memset(row + len, 0, row_bytes - len);
        if (mask) {
            memset(mask + k * elems, 1, len / elem_bytes);
            memset(mask + k * elems + len / elem_bytes, 0, elems - len / elem_bytes);
        }
    }
    return GP_OK;
}

static int host_unpad(void *ctx, const gp_batch *b, const void *src, size_t row_bytes) {
    const uint64_t *off = b->out_offsets_host;
    for (size_t k = 0; k < b->n; k++)
        memcpy((unsigned char *)b->out + off[k], (const unsigned char *)src + k * row_bytes,
               (size_t)(off[k + 1] - off[k]));
    return GP_OK;
}

static const gp__device_ops host_ops = {
    .open = host_open,
    .close = host_close,
    .host_alloc = host_alloc,
    .host_free = host_free,
    .dev_alloc = host_dev_alloc,
    .dev_free = host_dev_free,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_bind = host_stream_bind,
    .copy_h2d = host_copy_h2d,
    .copy_d2h = host_copy_d2h,
    .launch = host_launch,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .event_wait = host_event_wait,
    .event_time_ns = host_event_time_ns,
    .healthy = NULL,
    .stats = NULL,
    .pad = host_pad,
    .unpad = host_unpad,
};

/* The host backend's entry in the backend table (backend.h): this device interface and the
   model runtime's host layers (lib/model/host.c). */
const gp__backend gp__host_backend = {
    .id = GP_BACKEND_HOST,
    .name = "host",
    .dev = &host_ops,
    .model = &gp__model_host_exec,
};
