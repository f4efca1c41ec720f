/*
 * Pipeline lifecycle and the producer side: create (validate, pick the backend, allocate
 * everything once, start threads), submit/reserve/commit, prep workers, flush, drain,
 * destroy.
 */
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "testing.h"

/* pthread_mutex_lock/unlock and pthread_cond_wait/signal on mutexes and condition variables
   this library initialised cannot fail (EINVAL/EPERM are programming errors), so those calls
   are not checked; every init and create call is. */

#define MAX_BATCH_LIMIT (UINT64_C(1) << 20)
#define CAPACITY_LIMIT (UINT64_C(1) << 30)

void gp_config_init(gp_config *c) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->struct_size = sizeof *c;
    c->backend = GP_BACKEND_AUTO;
    c->max_batch = 64;
    c->inflight = 3;
    c->full_policy = GP_FULL_BLOCK;
    c->completion_workers = 1;
}

uint64_t gp_now_ns(void) {
    return gp__now_ns();
}

/* ---- validation ---------------------------------------------------------------------- */

static int invalid(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int invalid(char *err, size_t len, const char *fmt, ...) {
    if (err && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, len, fmt, ap);
        va_end(ap);
    }
    return GP_EINVAL;
}

static int is_pow2(uint64_t v) {
    return v && !(v & (v - 1));
}

static uint64_t next_pow2(uint64_t v) {
    uint64_t r = 1;
    while (r < v)
        r <<= 1;
    return r;
}

static int sim_ok(double v) {
    return isfinite(v) && v >= 0;
}

#define ARENA_LIMIT (UINT64_C(1) << 31) /* the packed claim word keeps 32 bits of bytes */

/* Variable-size items (docs/DESIGN.md §8): the budget, the arenas. Fills the defaults. */
static int check_variable(gp_config *c, char *err, size_t len) {
    if (!c->max_item_in_bytes) {
        if (c->arena_bytes || c->max_batch_bytes || c->item_in_multiple)
            return invalid(err, len, "config.%s: only for variable-size inputs (max_item_in_bytes)",
                           c->arena_bytes       ? "arena_bytes"
                           : c->max_batch_bytes ? "max_batch_bytes"
                                                : "item_in_multiple");
    } else {
        if (c->max_batch_bytes == 0) {
            if (c->max_item_in_bytes > (ARENA_LIMIT / 2) / c->max_batch)
                return invalid(err, len,
                               "config.max_batch_bytes: its default, max_batch (%zu) * "
                               "max_item_in_bytes (%zu), is over 1 GiB; set a budget",
                               c->max_batch, c->max_item_in_bytes);
            c->max_batch_bytes = c->max_batch * c->max_item_in_bytes;
        }
        if (c->max_batch_bytes < c->max_item_in_bytes || c->max_batch_bytes > ARENA_LIMIT / 2)
            return invalid(err, len,
                           "config.max_batch_bytes: %zu not in max_item_in_bytes (%zu)..1 GiB: "
                           "every item must fit a batch alone",
                           c->max_batch_bytes, c->max_item_in_bytes);
        if (c->item_in_multiple > c->max_item_in_bytes)
            return invalid(err, len,
                           "config.item_in_multiple: %zu is over max_item_in_bytes (%zu): no "
                           "input could be a whole number of it",
                           c->item_in_multiple, c->max_item_in_bytes);
        if (c->arena_bytes == 0) {
            uint64_t want = 4 * (uint64_t)c->inflight * c->max_batch_bytes;
            if (want < 2 * (uint64_t)c->max_item_in_bytes) want = 2 * c->max_item_in_bytes;
            c->arena_bytes = next_pow2(want < ARENA_LIMIT ? want : ARENA_LIMIT);
        }
        if (!is_pow2(c->arena_bytes) || c->arena_bytes > ARENA_LIMIT ||
            c->arena_bytes < 2 * (uint64_t)c->max_item_in_bytes)
            return invalid(err, len,
                           "config.arena_bytes: %zu must be a power of two in 2 * "
                           "max_item_in_bytes (%zu)..2 GiB (an item never straddles the "
                           "arena's end, so an empty arena must hold any item at either place)",
                           c->arena_bytes, 2 * c->max_item_in_bytes);
    }
    if (c->max_item_out_bytes &&
        c->max_item_out_bytes >
            ARENA_LIMIT / (c->capacity > 2 * c->max_batch ? c->capacity : 2 * c->max_batch))
        return invalid(err, len,
                       "config.max_item_out_bytes: %zu times the larger of capacity and 2 * "
                       "max_batch (%zu) is over the 2 GiB output arena",
                       c->max_item_out_bytes,
                       c->capacity > 2 * c->max_batch ? c->capacity : 2 * c->max_batch);
    return GP_OK;
}

/* Copy what the caller's struct_size covers over the defaults, then check every field. */
static int load_config(const gp_config *in, gp_config *c, char *err, size_t len) {
    if (in->struct_size < offsetof(gp_config, backend) + sizeof in->backend ||
        in->struct_size > sizeof *c)
        return invalid(err, len,
                       "config.struct_size: %zu is not a gp_config size; call "
                       "gp_config_init()",
                       in->struct_size);
    gp_config_init(c);
    memcpy(c, in, in->struct_size);
    c->struct_size = sizeof *c;

    if (c->backend != GP_BACKEND_AUTO && c->backend != GP_BACKEND_HOST &&
        c->backend != GP_BACKEND_CUDA)
        return invalid(err, len, "config.backend: %d is not a gp_backend", (int)c->backend);
    if (c->num_devices < 0 || c->num_devices > GP_MAX_DEVICES)
        return invalid(err, len, "config.num_devices: %d not in 0..%d", c->num_devices,
                       GP_MAX_DEVICES);
    for (int i = 0; i < c->num_devices; i++)
        if (c->devices[i] < 0)
            return invalid(err, len, "config.devices[%d]: %d is negative", i, c->devices[i]);
    /* Each side is fixed-size (item_*_bytes) or variable-size (max_item_*_bytes): one of two. */
    if ((c->item_in_bytes == 0) == (c->max_item_in_bytes == 0))
        return invalid(err, len,
                       c->item_in_bytes ? "config.item_in_bytes and config.max_item_in_bytes: set "
                                          "one (fixed-size or variable-size inputs), not both"
                                        : "config.item_in_bytes: must be > 0 (or set "
                                          "max_item_in_bytes for variable-size inputs)");
    if ((c->item_out_bytes == 0) == (c->max_item_out_bytes == 0))
        return invalid(err, len,
                       c->item_out_bytes
                           ? "config.item_out_bytes and config.max_item_out_bytes: set "
                             "one (fixed-size or variable-size outputs), not both"
                           : "config.item_out_bytes: must be > 0 (or set "
                             "max_item_out_bytes for variable-size outputs)");
    if (c->max_item_in_bytes > UINT32_MAX)
        return invalid(err, len, "config.max_item_in_bytes: %zu is over 4 GiB - 1",
                       c->max_item_in_bytes);
    if (c->max_item_out_bytes > UINT32_MAX)
        return invalid(err, len, "config.max_item_out_bytes: %zu is over 4 GiB - 1",
                       c->max_item_out_bytes);
    if (c->max_batch == 0 || c->max_batch > MAX_BATCH_LIMIT)
        return invalid(err, len, "config.max_batch: %zu not in 1..%llu", c->max_batch,
                       (unsigned long long)MAX_BATCH_LIMIT);
    if (c->inflight < 1 || c->inflight > 64)
        return invalid(err, len, "config.inflight: %d not in 1..64", c->inflight);
    if (c->num_preferred < 0 || c->num_preferred > GP_MAX_PREFERRED)
        return invalid(err, len, "config.num_preferred: %d not in 0..%d", c->num_preferred,
                       GP_MAX_PREFERRED);
    for (int i = 0; i < c->num_preferred; i++) {
        if (c->preferred[i] == 0 || c->preferred[i] > c->max_batch)
            return invalid(err, len, "config.preferred[%d]: %zu not in 1..max_batch (%zu)", i,
                           c->preferred[i], c->max_batch);
        if (i && c->preferred[i] <= c->preferred[i - 1])
            return invalid(err, len, "config.preferred[%d]: %zu is not above preferred[%d]", i,
                           c->preferred[i], i - 1);
    }
    if (c->capacity == 0)
        c->capacity = next_pow2(4 * (uint64_t)c->max_batch * (uint64_t)c->inflight);
    if (!is_pow2(c->capacity) || c->capacity < c->max_batch || c->capacity > CAPACITY_LIMIT)
        return invalid(err, len,
                       "config.capacity: %zu must be a power of two in max_batch (%zu)..%llu",
                       c->capacity, c->max_batch, (unsigned long long)CAPACITY_LIMIT);
    if (c->item_in_bytes > SIZE_MAX / c->capacity || c->item_out_bytes > SIZE_MAX / c->capacity)
        return invalid(err, len, "config.capacity: %zu items of this size overflow memory",
                       c->capacity);
    int rc = check_variable(c, err, len);
    if (rc != GP_OK) return rc;
    if (c->max_delay_us > 60u * 1000u * 1000u)
        return invalid(err, len, "config.max_delay_us: %u is over 60 s", c->max_delay_us);
    if (c->full_policy != GP_FULL_BLOCK && c->full_policy != GP_FULL_FAIL)
        return invalid(err, len, "config.full_policy: %d is not a gp_full_policy",
                       (int)c->full_policy);
    if (!c->compute) return invalid(err, len, "config.compute: required");
    if (c->prep_workers < 0 || c->prep_workers > 256)
        return invalid(err, len, "config.prep_workers: %d not in 0..256", c->prep_workers);
    if (c->prep_workers > 0 && !c->prep)
        return invalid(err, len, "config.prep: required when prep_workers > 0");
    if (c->completion_workers < 1 || c->completion_workers > 64)
        return invalid(err, len, "config.completion_workers: %d not in 1..64",
                       c->completion_workers);
    if (c->cuda_graphs != 0 && c->cuda_graphs != 1)
        return invalid(err, len, "config.cuda_graphs: %d is not 0 or 1", c->cuda_graphs);
    if (c->cuda_graphs && (c->max_item_in_bytes || c->max_item_out_bytes))
        return invalid(err, len,
                       "config.cuda_graphs: a graph replays the work captured for one batch "
                       "size, and variable-size items (max_item_%s_bytes) change it batch to "
                       "batch: use fixed-size items or no graphs",
                       c->max_item_in_bytes ? "in" : "out");
    if (c->spin_wait != 0 && c->spin_wait != 1)
        return invalid(err, len, "config.spin_wait: %d is not 0 or 1", c->spin_wait);
    if (!sim_ok(c->sim_copy_bytes_per_s))
        return invalid(err, len, "config.sim_copy_bytes_per_s: must be finite and >= 0");
    if (!sim_ok(c->sim_compute_us))
        return invalid(err, len, "config.sim_compute_us: must be finite and >= 0");
    if (!sim_ok(c->sim_compute_us_per_item))
        return invalid(err, len, "config.sim_compute_us_per_item: must be finite and >= 0");
    return GP_OK;
}

/* ---- backend choice ------------------------------------------------------------------- */

/* Open backend `id` from the table (backend.h). GP_OK, or the error with the reason in `why`
   and, unless AUTO is probing (another backend comes after it), in the sink. */
static int try_backend(gp_pipeline *p, gp_backend id, int probe, char *why, size_t len) {
    const gp__backend *be;
    int rc = gp__backend_load(id, &be, why, len);
    if (rc != GP_OK) {
        /* Asked for by name: an error. Tried by AUTO: only the fallback reason. */
        if (p->cfg.backend == id) GP__ERR(&p->err, rc, "backend %s: %s", gp_backend_name(id), why);
        return rc;
    }
    if (probe) gp__err_probe(&p->err, 1, 0);
    rc = be->dev->open(&p->cfg, &p->err, &p->dev);
    if (rc != GP_OK) gp__err_copy(&p->err, why, len);
    if (probe) gp__err_probe(&p->err, 0, rc != GP_OK);
    if (rc != GP_OK) return rc;
    p->be = be;
    p->ops = be->dev;
    return GP_OK;
}

/* HOST or CUDA: that one or GP_ENODEV. AUTO: the table's order; the first backend's failure
   is recorded as the fallback reason (stats, report, log), never silent. */
static int open_backend(gp_pipeline *p) {
    /* Room for a module path of PATH_MAX and the loader's words: the WARN line has it whole. */
    char why[4096 + 512], first[4096 + 512] = "";
    if (p->cfg.backend != GP_BACKEND_AUTO)
        return try_backend(p, p->cfg.backend, 0, why, sizeof why);
    int rc = GP_ENODEV, n = gp__backend_count();
    for (int i = 0; i < n; i++) {
        gp_backend id = gp__backend_at(i);
        if ((rc = try_backend(p, id, i < n - 1, why, sizeof why)) == GP_OK) break;
        if (i == 0) snprintf(first, sizeof first, "%s", why);
    }
    if (rc == GP_OK && p->be->id != gp__backend_at(0)) {
        p->fell_back = 1;
        /* The stats field holds 159 characters (the most useful part comes first); a longer
           reason ends in "..." there, and the log line has it whole. */
        size_t k = strlen(first), cap = sizeof p->fallback_reason;
        if (k < cap) {
            memcpy(p->fallback_reason, first, k + 1);
        } else { /* cut before a UTF-8 continuation byte: no half character (the JSON) */
            size_t cut = cap - 4;
            while (cut > 0 && ((unsigned char)first[cut] & 0xC0) == 0x80)
                cut--;
            memcpy(p->fallback_reason, first, cut);
            memcpy(p->fallback_reason + cut, "...", 4);
        }
        gp__log(&p->err, GP_LOG_WARN, "backend auto: no usable GPU, running on the %s backend: %s",
                gp_backend_name(p->be->id), first);
    }
    return rc;
}

/* The one bucket rule (gp_batch): the preferred sizes, else the powers of two below max_batch;
   max_batch last. */
static void make_buckets(gp_pipeline *p) {
    const gp_config *c = &p->cfg;
    p->nbuckets = 0;
    if (c->num_preferred > 0) {
        for (int i = 0; i < c->num_preferred; i++)
            if (c->preferred[i] < c->max_batch) p->buckets[p->nbuckets++] = c->preferred[i];
    } else {
        for (size_t b = 1; b < c->max_batch; b <<= 1)
            p->buckets[p->nbuckets++] = b;
    }
    p->buckets[p->nbuckets++] = c->max_batch;
}

/* ---- slots ---------------------------------------------------------------------------- */

static int slot_init(gp_pipeline *p, gp__slot *s, int index) {
    const gp__device_ops *o = p->ops;
    const gp_config *c = &p->cfg;
    int rc;
    s->pipeline = p;
    s->index = index;
    s->device = c->num_devices ? c->devices[index % c->num_devices] : 0; /* host: unused */
    if ((rc = o->stream_create(p->dev, s->device, &s->stream)) != GP_OK) return rc;
    /* A batch holds max_batch items, or max_batch_bytes of variable-size input; outputs at
       most max_batch of the largest. */
    size_t in_cap = p->var_in ? c->max_batch_bytes : c->max_batch * c->item_in_bytes;
    size_t out_cap = c->max_batch * (p->var_out ? c->max_item_out_bytes : c->item_out_bytes);
    if ((rc = o->dev_alloc(p->dev, s->device, in_cap, &s->d_in)) != GP_OK) return rc;
    if ((rc = o->dev_alloc(p->dev, s->device, out_cap, &s->d_out)) != GP_OK) return rc;
    if (p->var_in || p->var_out) {
        size_t off_bytes = 2 * (c->max_batch + 1) * sizeof(uint64_t);
        void *h = NULL;
        if ((rc = o->host_alloc(p->dev, off_bytes, &h)) != GP_OK) return rc;
        s->h_off = h;
        if ((rc = o->dev_alloc(p->dev, s->device, off_bytes, &s->d_off)) != GP_OK) return rc;
    }
    for (int e = 0; e < GP__EV_COUNT; e++)
        if ((rc = o->event_create(p->dev, s->device, &s->ev[e])) != GP_OK) return rc;
    gp_batch *b = &s->launch.batch;
    memset(b, 0, sizeof *b);
    b->buckets = p->buckets;
    b->num_buckets = p->nbuckets;
    b->in_capacity = in_cap;
    b->out_capacity = out_cap;
    b->slot_ref = s;
    b->capacity = c->max_batch;
    b->in = s->d_in;
    b->out = s->d_out;
    b->in_bytes = c->item_in_bytes;
    b->out_bytes = c->item_out_bytes;
    b->slot = index;
    b->device = s->device;
    b->backend = p->be->id;
    o->stream_bind(p->dev, s->stream, b);
    s->launch.fn = c->compute;
    s->launch.user = c->compute_user;
    s->launch.owner = p;
    if (o->bind_device && (rc = o->bind_device(p->dev, s->device)) != GP_OK) return rc;
    if (c->compute_setup) {
        s->in_setup = 1;
        rc = c->compute_setup(c->compute_user, b);
        s->in_setup = 0;
        if (rc != GP_OK) {
            if (!gp__is_err(rc)) rc = GP_EDEVICE;
            return GP__ERR(&p->err, rc, "compute_setup failed for slot %d%s%s", index,
                           s->err[0] ? ": " : "", s->err);
        }
    }
    s->ready = 1; /* teardown owed from here, with or without a setup */
    if (o->slot_ready) {
        s->in_ready = 1;
        rc = o->slot_ready(p->dev, s->stream, &s->launch);
        s->in_ready = 0;
        if (rc != GP_OK) return rc;
    }
    return GP_OK;
}

static void slot_fini(gp_pipeline *p, gp__slot *s) {
    const gp__device_ops *o = p->ops;
    /* Teardown runs on the destroying thread: make the slot's device current first. */
    if (s->ready && p->cfg.compute_teardown) {
        if (o->bind_device) o->bind_device(p->dev, s->device);
        /* The slot's template as setup saw it (gpupipe.h: n and bucket 0), not the last batch. */
        gp_batch *b = &s->launch.batch;
        b->n = b->bucket = 0;
        b->first_seq = 0;
        b->in_total = b->out_total = 0;
        b->in_offsets = b->in_offsets_host = b->out_offsets = b->out_offsets_host = NULL;
        p->cfg.compute_teardown(p->cfg.compute_user, b);
    }
    for (int e = 0; e < GP__EV_COUNT; e++)
        if (s->ev[e]) o->event_destroy(p->dev, s->ev[e]);
    if (s->d_off) o->dev_free(p->dev, s->device, s->d_off);
    if (s->h_off) o->host_free(p->dev, s->h_off);
    if (s->d_out) o->dev_free(p->dev, s->device, s->d_out);
    if (s->d_in) o->dev_free(p->dev, s->device, s->d_in);
    if (s->stream) o->stream_destroy(p->dev, s->stream);
}

/* ---- prep workers --------------------------------------------------------------------- */

static void prepq_push(gp_pipeline *p, uint64_t idx, uint64_t at) {
    gp__prepq *q = &p->prepq;
    pthread_mutex_lock(&q->mu);
    /* Never full: at most `capacity` indices are claimed and unreleased. */
    q->buf[q->tail % p->ring.capacity] = (gp__prepreq){idx, at};
    q->tail++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* Set an unpublished item's status, unless a cancel came first (its code stays). CAS: cancel
   may race with us until the item is published and taken. */
static void prep_status(gp__item *it, int code) {
    uint32_t st = atomic_load_explicit(&it->state, memory_order_relaxed);
    while (!(st & GP__ST_CANCELED) &&
           !atomic_compare_exchange_weak_explicit(&it->state, &st, gp__st_with_code(st, code),
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

static void *prep_main(void *arg) {
    gp_pipeline *p = arg;
    gp__own_thread_mark(p);
    gp__prepq *q = &p->prepq;
    const gp_config *c = &p->cfg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->head == q->tail && !q->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->head == q->tail) break;
        gp__prepreq req = q->buf[q->head % p->ring.capacity];
        q->head++;
        pthread_mutex_unlock(&q->mu);

        gp__item *it = gp__ring_item(&p->ring, req.idx);
        uint32_t st = atomic_load_explicit(&it->state, memory_order_relaxed);
        if (atomic_load_explicit(&p->canceling, memory_order_relaxed)) {
            prep_status(it, GP_ECANCELED);
        } else if (!(st & GP__ST_CANCELED)) { /* a canceled item needs no prep */
            void *slot = p->var_in ? gp__ring_at(&p->ring, req.at) : gp__ring_in(&p->ring, req.idx);
            size_t bytes = p->var_in ? it->in_len : p->ring.in_bytes;
            uint64_t t0 = gp__now_ns();
            int rc = c->prep(c->prep_user, it->src, it->src_bytes, slot, bytes);
            GP__BUMP(p->stats.prep_busy_ns, gp__now_ns() - t0);
            prep_status(it, rc == GP_OK ? GP_OK : (gp__is_err(rc) ? rc : GP_EPREP));
        }
        gp__ring_publish(&p->ring, req.idx);
        gp__notify_wake(&p->bwake);

        pthread_mutex_lock(&q->mu);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* ---- create / destroy ----------------------------------------------------------------- */

static int sync_init(gp_pipeline *p) {
    uint64_t cap = p->cfg.capacity;
    if (gp__notify_init(&p->bwake) || gp__notify_init(&p->slotwake) || gp__notify_init(&p->drained))
        return GP__ERR(&p->err, GP_ESYS, "pthread mutex/cond init failed");
    if (pthread_mutex_init(&p->recs.mu, NULL) || pthread_cond_init(&p->recs.poll_cv, NULL) ||
        pthread_cond_init(&p->recs.work_cv, NULL) || pthread_mutex_init(&p->prepq.mu, NULL) ||
        pthread_cond_init(&p->prepq.cv, NULL))
        return GP__ERR(&p->err, GP_ESYS, "pthread mutex/cond init failed");
    p->recs.buf = calloc(cap, sizeof *p->recs.buf);
    p->prepq.buf = p->cfg.prep_workers ? calloc(cap, sizeof *p->prepq.buf) : NULL;
    if (!p->recs.buf || (p->cfg.prep_workers && !p->prepq.buf))
        return GP__ERR(&p->err, GP_ENOMEM, "batch record queue of %llu entries",
                       (unsigned long long)cap);
    return GP_OK;
}

/* Wait until no call of the submit family is in progress (they return GP_ESHUTDOWN once the
   ring is closed; a producer blocked on a full ring was woken by the close). */
static void wait_calls(gp_pipeline *p) {
    for (;;) {
        uint32_t busy = 0;
        for (int i = 0; i < GP__CALL_SHARDS; i++)
            busy += atomic_load_explicit(&p->calls[i].n, memory_order_acquire);
        if (busy == 0) return;
        sched_yield();
    }
}

/* Stop and join whatever threads run; safe on a partly started pipeline. */
static void stop_threads(gp_pipeline *p, int cancel, int batcher_started, int poller_started) {
    p->final_tail = gp__ring_close(&p->ring);
    /* Let calls that raced with the close return: each has claimed (counted in final_tail,
       the batcher waits for its publish) or fails with GP_ESHUTDOWN. After this no call of
       the submit family that began before the close is still running. */
    wait_calls(p);
    if (cancel) atomic_store_explicit(&p->canceling, 1, memory_order_relaxed);
    atomic_store_explicit(&p->stopping, 1, memory_order_release);
    gp__notify_wake(&p->bwake);
    gp__notify_wake(&p->slotwake);

    if (batcher_started) {
        pthread_join(p->batcher, NULL);
    } else {
        pthread_mutex_lock(&p->recs.mu);
        p->recs.batcher_done = 1;
        pthread_cond_broadcast(&p->recs.poll_cv);
        pthread_mutex_unlock(&p->recs.mu);
    }
    pthread_mutex_lock(&p->prepq.mu);
    p->prepq.stop = 1;
    pthread_cond_broadcast(&p->prepq.cv);
    pthread_mutex_unlock(&p->prepq.mu);
    for (int i = 0; i < p->npreps; i++)
        pthread_join(p->preps[i], NULL);
    if (poller_started) {
        pthread_join(p->poller, NULL);
    } else {
        pthread_mutex_lock(&p->recs.mu);
        p->recs.poller_done = 1;
        pthread_cond_broadcast(&p->recs.work_cv);
        pthread_mutex_unlock(&p->recs.mu);
    }
    for (int i = 0; i < p->nworkers; i++)
        pthread_join(p->workers[i], NULL);
}

/* The pipeline whose thread this is: the batcher (it runs a CUDA compute's launch), the
   poller (the trace callback; completion callbacks with one worker), the completion workers,
   the prep workers, and the host backend's stream threads (a host compute: marked before
   each compute). Per thread: not shared state. */
static _Thread_local const gp_pipeline *own_pipeline;

void gp__own_thread_mark(const gp_pipeline *p) {
    own_pipeline = p;
}

/* A wait on `p` from one of its own threads waits for itself (gpupipe.h, gp_done_fn). */
static int own_thread(const gp_pipeline *p) {
    return own_pipeline == p;
}

/* Refuse a waiting call from the pipeline's own thread: GP_EINVAL, with the reason. */
static int from_own_thread(gp_pipeline *p, const char *call) {
    if (!own_thread(p)) return 0;
    GP__ERR(&p->err, GP_EINVAL,
            "%s called from one of the pipeline's own threads (a completion, trace or prep "
            "callback, or the compute): it would wait for itself; call it from another thread",
            call);
    return 1;
}

static void free_all(gp_pipeline *p) {
    if (p->slots) {
        for (int i = 0; i < p->nslots; i++)
            slot_fini(p, &p->slots[i]);
        free(p->slots);
    }
    gp__ring_fini(&p->ring);
    if (p->ops) {
        if (p->ring.in) p->ops->host_free(p->dev, p->ring.in);
        if (p->ring.out) p->ops->host_free(p->dev, p->ring.out);
        if (p->out_arena) p->ops->host_free(p->dev, p->out_arena);
        if (p->dev) p->ops->close(p->dev);
    }
    free(p->recs.buf);
    free(p->prepq.buf);
    free(p->workers);
    free(p->preps);
    /* Sync objects were zero-initialised; destroying a zeroed default object is harmless on
       glibc, and they are only zero when init never ran. */
    gp__notify_fini(&p->bwake);
    gp__notify_fini(&p->slotwake);
    gp__notify_fini(&p->drained);
    pthread_mutex_destroy(&p->recs.mu);
    pthread_cond_destroy(&p->recs.poll_cv);
    pthread_cond_destroy(&p->recs.work_cv);
    pthread_mutex_destroy(&p->prepq.mu);
    pthread_cond_destroy(&p->prepq.cv);
    gp__errsink_fini(&p->err);
    free(p);
}

static int start_threads(gp_pipeline *p) {
    int rc, nw = p->cfg.completion_workers, np = p->cfg.prep_workers;
    int poller_started = 0;
    p->workers = calloc((size_t)nw, sizeof *p->workers);
    p->preps = np ? calloc((size_t)np, sizeof *p->preps) : NULL;
    if (!p->workers || (np && !p->preps)) {
        rc = GP__ERR(&p->err, GP_ENOMEM, "thread tables");
        goto fail;
    }
    if (nw == 1) nw = 0; /* one completion worker: the poller runs the callbacks itself */
    for (; p->nworkers < nw; p->nworkers++)
        if ((rc = pthread_create(&p->workers[p->nworkers], NULL, gp__worker_main, p)) != 0)
            goto fail_create;
    if ((rc = pthread_create(&p->poller, NULL, gp__poller_main, p)) != 0) goto fail_create;
    poller_started = 1;
    for (; p->npreps < np; p->npreps++)
        if ((rc = pthread_create(&p->preps[p->npreps], NULL, prep_main, p)) != 0) goto fail_create;
    if ((rc = pthread_create(&p->batcher, NULL, gp__batcher_main, p)) != 0) goto fail_create;
    return GP_OK;
fail_create:
    rc = GP__ERR(&p->err, GP_ESYS, "pthread_create failed: errno %d", rc);
fail:
    stop_threads(p, 1, 0, poller_started); /* the batcher starts last */
    return rc;
}

int gp_pipeline_create(const gp_config *cfg, gp_pipeline **out, char *err, size_t err_len) {
    int rc;
    if (err && err_len) err[0] = '\0';
    if (!out) return invalid(err, err_len, "out: NULL");
    *out = NULL;
    if (!cfg) return invalid(err, err_len, "cfg: NULL");

    gp_pipeline *p = calloc(1, sizeof *p);
    if (!p) {
        invalid(err, err_len, "out of memory");
        return GP_ENOMEM;
    }
    if ((rc = load_config(cfg, &p->cfg, err, err_len)) != GP_OK) {
        free(p);
        return rc;
    }
    if (gp__errsink_init(&p->err, p->cfg.log, p->cfg.log_user) != GP_OK) {
        free(p);
        invalid(err, err_len, "pthread_mutex_init failed");
        return GP_ESYS;
    }
    const gp_config *c = &p->cfg;

    if ((rc = open_backend(p)) != GP_OK) goto fail;
    p->var_in = c->max_item_in_bytes > 0;
    p->var_out = c->max_item_out_bytes > 0;
    void *in = NULL, *outb = NULL;
    size_t in_bytes = p->var_in ? c->arena_bytes : c->capacity * c->item_in_bytes;
    if ((rc = p->ops->host_alloc(p->dev, in_bytes, &in)) != GP_OK) goto fail;
    p->ring.in = in;  /* owned before ring init so a failure frees it */
    if (p->var_out) { /* docs/DESIGN.md §8.3: holds capacity items and a full batch's skip */
        uint64_t items = c->capacity > 2 * c->max_batch ? c->capacity : 2 * c->max_batch;
        p->out_arena_bytes = next_pow2(items * c->max_item_out_bytes);
        if ((rc = p->ops->host_alloc(p->dev, p->out_arena_bytes, &outb)) != GP_OK) goto fail;
        p->out_arena = outb;
    } else {
        if ((rc = p->ops->host_alloc(p->dev, c->capacity * c->item_out_bytes, &outb)) != GP_OK)
            goto fail;
        p->ring.out = outb;
    }
    rc = p->var_in ? gp__ring_init_arena(&p->ring, c->capacity, c->arena_bytes, c->item_out_bytes,
                                         in, p->ring.out)
                   : gp__ring_init(&p->ring, c->capacity, c->item_in_bytes, c->item_out_bytes, in,
                                   p->ring.out);
    if (rc != GP_OK) {
        rc = GP__ERR(&p->err, rc, "ring of %zu items", c->capacity);
        goto fail;
    }
    make_buckets(p);
    p->nslots = c->inflight;
    p->slots = calloc((size_t)p->nslots, sizeof *p->slots);
    if (!p->slots) {
        rc = GP__ERR(&p->err, GP_ENOMEM, "slots");
        goto fail;
    }
    for (int i = 0; i < p->nslots; i++)
        if ((rc = slot_init(p, &p->slots[i], i)) != GP_OK) goto fail;
    if ((rc = sync_init(p)) != GP_OK) goto fail;
    /* The stats' clock starts here, not before the backend's open and the computes' setup
       (a CUDA context, weights, algorithm searches: seconds that are not the run's). */
    p->stats.t_create_ns = gp__now_ns();
    if ((rc = start_threads(p)) != GP_OK) goto fail;
    *out = p;
    return GP_OK;

fail:
    if (err && err_len) gp__err_copy(&p->err, err, err_len);
    free_all(p);
    return rc;
}

/* A mode that is neither DRAIN nor CANCEL, for a pipeline not shut yet (after, it is ignored). */
static int bad_mode(gp_pipeline *p, gp_destroy_mode mode, const char *call) {
    if (p->shut || mode == GP_DESTROY_DRAIN || mode == GP_DESTROY_CANCEL) return 0;
    GP__ERR(&p->err, GP_EINVAL, "%s: mode %d is not a gp_destroy_mode (nothing stopped)", call,
            (int)mode);
    return 1;
}

int gp_pipeline_shutdown(gp_pipeline *p, gp_destroy_mode mode) {
    if (!p || from_own_thread(p, "gp_pipeline_shutdown")) return GP_EINVAL;
    if (bad_mode(p, mode, "gp_pipeline_shutdown")) return GP_EINVAL;
    if (!p->shut) {
        stop_threads(p, mode == GP_DESTROY_CANCEL, 1, 1);
        atomic_store_explicit(&p->stats.t_end_ns, gp__now_ns(), memory_order_release);
        p->shut = 1;
    }
    return atomic_load_explicit(&p->failed, memory_order_relaxed) ? GP_EDEVICE : GP_OK;
}

int gp_pipeline_destroy(gp_pipeline *p, gp_destroy_mode mode) {
    if (!p) return GP_OK;
    if (from_own_thread(p, "gp_pipeline_destroy")) return GP_EINVAL; /* nothing is freed */
    if (bad_mode(p, mode, "gp_pipeline_destroy")) return GP_EINVAL;
    int rc = gp_pipeline_shutdown(p, mode);
    wait_calls(p); /* a submit that overlapped a destroy without a prior shutdown */
    free_all(p);
    return rc;
}

/* ---- producers ------------------------------------------------------------------------ */

/* Enter/leave a call of the submit family. The shard comes from the caller's stack address
   (threads' stacks are megabytes apart), so threads rarely share a counter's cache line. */
static unsigned call_enter(gp_pipeline *p) {
    int here;
    uint64_t a = (uint64_t)(uintptr_t)&here >> 20;
    unsigned s = (unsigned)((a * UINT64_C(0x9E3779B97F4A7C15)) >> 60) % GP__CALL_SHARDS;
    /* seq_cst: ordered before the call's read of the ring's closed bit (destroy closes the
       ring, then reads these counters). */
    atomic_fetch_add_explicit(&p->calls[s].n, 1, memory_order_seq_cst);
    return s;
}

static int call_leave(gp_pipeline *p, unsigned s, int rc) {
    /* Release: the call's last touch of the pipeline happens before destroy frees it. */
    atomic_fetch_sub_explicit(&p->calls[s].n, 1, memory_order_release);
    return rc;
}

#define HOT static inline __attribute__((always_inline)) /* the submit path: no call overhead */

/* The sizes of one item, checked against the config: input, and output (0: the default). */
static int item_sizes_slow(gp_pipeline *p, size_t in, size_t out, uint32_t *in_len,
                           uint32_t *out_len) {
    const gp_config *c = &p->cfg;
    if (p->var_in ? (in == 0 || in > c->max_item_in_bytes) : in != c->item_in_bytes)
        return GP__ERR(&p->err, GP_EINVAL,
                       p->var_in ? "item of %zu bytes: not in 1..max_item_in_bytes (%zu)"
                                 : "item of %zu bytes: item_in_bytes is %zu",
                       in, p->var_in ? c->max_item_in_bytes : c->item_in_bytes);
    if (p->var_in && c->item_in_multiple && in % c->item_in_multiple)
        return GP__ERR(&p->err, GP_EINVAL,
                       "item of %zu bytes: not a whole number of item_in_multiple (%zu bytes)", in,
                       c->item_in_multiple);
    if (p->var_out ? out > c->max_item_out_bytes : (out != 0 && out != c->item_out_bytes))
        return GP__ERR(&p->err, GP_EINVAL,
                       p->var_out ? "output of %zu bytes: over max_item_out_bytes (%zu)"
                                  : "output of %zu bytes: item_out_bytes is %zu",
                       out, p->var_out ? c->max_item_out_bytes : c->item_out_bytes);
    *in_len = (uint32_t)in;
    *out_len = p->var_out ? (uint32_t)(out ? out : c->max_item_out_bytes) : 0;
    return GP_OK;
}

/* The fixed-size case, which is the hot one, in a few instructions. */
HOT int item_sizes(gp_pipeline *p, size_t in, size_t out, uint32_t *in_len, uint32_t *out_len) {
    if (!p->var_in && !p->var_out && in == p->cfg.item_in_bytes && out == 0) {
        *in_len = 0; /* unused for fixed-size items */
        *out_len = 0;
        return GP_OK;
    }
    return item_sizes_slow(p, in, out, in_len, out_len);
}

/* Shutdown began (the ring is closed): the submit family answers GP_ESHUTDOWN before it looks
   at its arguments' sizes (gpupipe.h: "from the call on"). */
static inline int shut(gp_pipeline *p) {
    return (atomic_load_explicit(&p->ring.tail, memory_order_relaxed) & GP__RING_CLOSED) != 0;
}

/* A refusal of the submit family's arguments, recorded (gpupipe.h, gp_pipeline_last_error)
   inside the call's bracket and only while the ring is open: a destroy waits for the calls it
   sees, then frees, so no record races it. Once shutdown began the answer is GP_ESHUTDOWN,
   whatever the arguments (gpupipe.h: "from the call on"). Returns the code. */
#define REFUSE(p, code, ...) refuse_at((p), (code), __FILE__, __LINE__, __VA_ARGS__)
static int refuse_at(gp_pipeline *p, int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int refuse_at(gp_pipeline *p, int code, const char *file, int line, const char *fmt, ...) {
    unsigned call = call_enter(p);
    if (shut(p)) {
        code = GP_ESHUTDOWN;
    } else {
        va_list ap;
        va_start(ap, fmt);
        gp__err_vrecord(&p->err, code, file, line, fmt, ap);
        va_end(ap);
    }
    return call_leave(p, call, code);
}

/* Claim the next index (and, variable-size, `in_len` arena bytes): *at is where the item's
   input goes. */
HOT int claim(gp_pipeline *p, uint32_t in_len, uint64_t *idx, unsigned char **at,
              uint64_t *arena_pos) {
    /* A failed pipeline refuses with GP_EDEVICE until it is shut down; from then on the ring's
       claim says GP_ESHUTDOWN, as for any pipeline (gpupipe.h, gp_pipeline_shutdown). */
    if (atomic_load_explicit(&p->failed, memory_order_relaxed) && !shut(p)) return GP_EDEVICE;
    uint64_t blocked = 0, pos = 0;
    int rc;
    /* Try first; block only on a full ring (GP_FULL_BLOCK), and not on one of the pipeline's
       own threads: a callback waiting for space its own completion frees would wait forever
       (gp_done_fn): it gets GP_EAGAIN. */
    for (int block = 0;; block = 1) {
        if (p->var_in) {
            rc = gp__ring_claim_bytes(&p->ring, block, in_len, idx, &pos, &blocked);
            if (rc == GP_OK) *at = gp__ring_at(&p->ring, pos);
        } else {
            rc = gp__ring_claim(&p->ring, block, idx, &blocked);
            if (rc == GP_OK) *at = gp__ring_in(&p->ring, *idx);
        }
        if (rc != GP_EAGAIN || block || p->cfg.full_policy != GP_FULL_BLOCK || own_thread(p)) break;
    }
    if (arena_pos) *arena_pos = pos;
    if (blocked) GP__BUMP(p->stats.backpressure_ns, blocked);
    if (rc == GP_EAGAIN) GP__BUMP(p->stats.rejected_full, 1);
    if (rc == GP_OK && p->var_in) /* the length, before anything can publish the item */
        gp__ring_item(&p->ring, *idx)->in_len = in_len;
    return rc;
}

/* Fill the descriptor before publish; `done` NULL marks an abandoned reservation. The state
   is a plain store: nothing but a cancel of this very index can race with it, and that one
   sees the previous lap's tag and backs off (gp_pipeline_cancel). */
HOT void fill(gp_pipeline *p, uint64_t idx, gp_done_fn done, void *user, uint64_t deadline_ns,
              uint32_t out_len) {
    gp__item *it = gp__ring_item(&p->ring, idx);
    it->done = done;
    it->user = user;
    it->deadline_ns = deadline_ns;
    it->t_submit_ns = gp__now_ns();
    if (p->var_out) it->out_len = out_len;
    atomic_store_explicit(
        &it->state, gp__st_make(gp__ring_lap(&p->ring, idx), done ? GP__ST_ACCEPTED : 0, GP_OK),
        memory_order_relaxed);
}

/* An item accepted (stats.submitted), counted on the call's shard before it is published. */
HOT void count_accepted(gp_pipeline *p, unsigned call) {
    GP__BUMP(p->stats.accepted[call].n, 1);
}

HOT void publish(gp_pipeline *p, uint64_t idx) {
    gp__ring_publish(&p->ring, idx);
    gp__notify_wake(&p->bwake);
}

void gp_submit_args_init(gp_submit_args *a) {
    if (!a) return;
    memset(a, 0, sizeof *a);
    a->struct_size = sizeof *a;
}

/* One item copied into the ring: the submit family's common path. */
HOT int submit_copy(gp_pipeline *p, const void *input, size_t in_bytes, size_t out_bytes,
                    uint64_t deadline_ns, gp_done_fn done, void *user, uint64_t *seq) {
    uint64_t idx;
    uint32_t in_len, out_len;
    unsigned char *at = NULL; /* set by claim on GP_OK; gcc -O1 -fsanitize=thread cannot tell */
    /* In progress from here (destroy waits), before anything reads the pipeline. */
    unsigned call = call_enter(p);
    if (shut(p)) return call_leave(p, call, GP_ESHUTDOWN);
    int rc = item_sizes(p, in_bytes, out_bytes, &in_len, &out_len);
    if (rc != GP_OK) return call_leave(p, call, rc);
    if ((rc = claim(p, in_len, &idx, &at, NULL)) != GP_OK) return call_leave(p, call, rc);
    memcpy(at, input, in_bytes);
    fill(p, idx, done, user, deadline_ns, out_len);
    count_accepted(p, call);
    if (seq) *seq = idx;
    publish(p, idx);
    return call_leave(p, call, GP_OK);
}

/* One item handed to the prep pool (a->prep_src may be NULL with 0 bytes); its worker writes
   the input and publishes. */
static int submit_prep_item(gp_pipeline *p, const gp_submit_args *a, uint64_t *seq) {
    uint64_t idx, at_pos;
    uint32_t in_len, out_len;
    unsigned char *at = NULL; /* set by claim on GP_OK; gcc -O1 -fsanitize=thread cannot tell */
    unsigned call = call_enter(p);                         /* as submit_copy */
    if (shut(p)) return call_leave(p, call, GP_ESHUTDOWN); /* whatever the arguments */
    if (!a->done || (!a->prep_src && a->prep_src_bytes) || a->input || p->cfg.prep_workers == 0)
        return call_leave(p, call,
                          GP__ERR(&p->err, GP_EINVAL, "%s",
                                  !a->done   ? "done is NULL"
                                  : a->input ? "input and prep_src are both set: one or the other"
                                  : !a->prep_src ? "prep_src is NULL with prep_src_bytes > 0"
                                                 : "prep_src needs prep workers "
                                                   "(config.prep_workers is 0)"));
    if (a->prep_src_bytes > UINT32_MAX)
        return call_leave(p, call,
                          GP__ERR(&p->err, GP_EINVAL, "prep_src_bytes: %zu is over 4 GiB - 1",
                                  a->prep_src_bytes));
    int rc = item_sizes(p, a->input_bytes, a->output_bytes, &in_len, &out_len);
    if (rc != GP_OK) return call_leave(p, call, rc);
    if ((rc = claim(p, in_len, &idx, &at, &at_pos)) != GP_OK) return call_leave(p, call, rc);
    gp__item *it = gp__ring_item(&p->ring, idx);
    it->src = a->prep_src;
    it->src_bytes = (uint32_t)a->prep_src_bytes;
    fill(p, idx, a->done, a->user, a->deadline_ns, out_len);
    count_accepted(p, call);
    if (seq) *seq = idx;
    prepq_push(p, idx, at_pos); /* the prep worker publishes */
    return call_leave(p, call, GP_OK);
}

/* One item, copied in or handed to the prep pool. */
static int submit_item(gp_pipeline *p, const gp_submit_args *a, int prep, uint64_t *seq) {
    if (prep) return submit_prep_item(p, a, seq);
    if (!a->done || !a->input)
        return REFUSE(p, GP_EINVAL, "%s is NULL", !a->done ? "done" : "input");
    return submit_copy(p, a->input, a->input_bytes, a->output_bytes, a->deadline_ns, a->done,
                       a->user, seq);
}

int gp_pipeline_submit_ex(gp_pipeline *p, const gp_submit_args *args, uint64_t *seq) {
    gp_submit_args a;
    if (!p) return GP_EINVAL;
    if (!args) return REFUSE(p, GP_EINVAL, "gp_pipeline_submit_ex: args is NULL");
    if (args->struct_size < offsetof(gp_submit_args, user) + sizeof args->user ||
        args->struct_size > sizeof a)
        return REFUSE(
            p, GP_EINVAL, "gp_submit_args.struct_size: %zu not in %zu..%zu (gp_submit_args_init)",
            args->struct_size, offsetof(gp_submit_args, user) + sizeof args->user, sizeof a);
    gp_submit_args_init(&a);
    memcpy(&a, args, args->struct_size);
    return submit_item(p, &a, a.prep_src != NULL, seq);
}

int gp_pipeline_submit_deadline(gp_pipeline *p, const void *input, size_t bytes,
                                uint64_t deadline_ns, gp_done_fn done, void *user) {
    if (!p) return GP_EINVAL;
    if (!input || !done) return REFUSE(p, GP_EINVAL, "%s is NULL", !done ? "done" : "input");
    return submit_copy(p, input, bytes, 0, deadline_ns, done, user, NULL);
}

int gp_pipeline_submit(gp_pipeline *p, const void *input, size_t bytes, gp_done_fn done,
                       void *user) {
    return gp_pipeline_submit_deadline(p, input, bytes, 0, done, user);
}

int gp_pipeline_submit_prep(gp_pipeline *p, const void *src, size_t src_bytes, uint64_t deadline_ns,
                            gp_done_fn done, void *user) {
    if (!p) return GP_EINVAL;
    if (p->var_in)
        return REFUSE(p, GP_EINVAL,
                      "gp_pipeline_submit_prep: variable-size inputs are submitted with "
                      "gp_submit_args.prep_src and input_bytes");
    gp_submit_args a;
    gp_submit_args_init(&a);
    a.input_bytes = p->cfg.item_in_bytes;
    a.deadline_ns = deadline_ns;
    a.prep_src = src;
    a.prep_src_bytes = src_bytes;
    a.done = done;
    a.user = user;
    return submit_item(p, &a, 1, NULL);
}

int gp_pipeline_reserve_ex(gp_pipeline *p, size_t input_bytes, size_t output_bytes,
                           gp_reservation *r) {
    uint64_t idx;
    uint32_t in_len, out_len;
    unsigned char *at = NULL; /* set by claim on GP_OK; gcc -O1 -fsanitize=thread cannot tell */
    if (!p) return GP_EINVAL;
    if (!r) return REFUSE(p, GP_EINVAL, "gp_pipeline_reserve: r is NULL");
    unsigned call = call_enter(p); /* as submit_copy */
    if (shut(p)) return call_leave(p, call, GP_ESHUTDOWN);
    int rc = item_sizes(p, input_bytes, output_bytes, &in_len, &out_len);
    if (rc != GP_OK) return call_leave(p, call, rc);
    rc = claim(p, in_len, &idx, &at, NULL);
    if (rc == GP_OK) {
        if (p->var_out) gp__ring_item(&p->ring, idx)->out_len = out_len; /* commit keeps it */
        r->data = at;
        r->bytes = input_bytes;
        r->deadline_ns = 0;
        r->seq = idx;
    }
    return call_leave(p, call, rc);
}

int gp_pipeline_reserve(gp_pipeline *p, gp_reservation *r) {
    if (!p) return GP_EINVAL;
    if (!r || p->var_in)
        return REFUSE(p, GP_EINVAL, "%s",
                      !r ? "gp_pipeline_reserve: r is NULL"
                         : "gp_pipeline_reserve: variable-size inputs reserve with "
                           "gp_pipeline_reserve_ex and their size");
    return gp_pipeline_reserve_ex(p, p->cfg.item_in_bytes, 0, r);
}

/* Is `r` a reservation of this pipeline that is still open? */
static int reservation_open(gp_pipeline *p, const gp_reservation *r) {
    if (!r->data || r->seq >= gp__ring_claimed(&p->ring)) return 0;
    /* Claimed and not yet published: the sequence word still says "free for seq". */
    if (atomic_load_explicit(&gp__ring_item(&p->ring, r->seq)->seq, memory_order_acquire) !=
        2 * r->seq)
        return 0;
    if (!p->var_in) return r->data == gp__ring_in(&p->ring, r->seq);
    const unsigned char *d = r->data;
    return d >= p->ring.in && d + r->bytes <= p->ring.in + p->ring.arena &&
           r->bytes == gp__ring_item(&p->ring, r->seq)->in_len;
}

/* commit / abandon refusing their reservation (NULL, or not an open one), inside the call's
   bracket: GP_EINVAL whether shut or not (shutdown waits for open reservations, it does not
   refuse them), recorded only while the ring is open (as REFUSE). */
static int not_open(gp_pipeline *p, const char *call, const char *why) {
    if (!shut(p)) GP__ERR(&p->err, GP_EINVAL, "%s: %s", call, why);
    return GP_EINVAL;
}

#define NOT_OPEN_WHY                                                                               \
    "not an open reservation of this pipeline (committed or abandoned already, or not from "       \
    "gp_pipeline_reserve)"

int gp_pipeline_commit(gp_pipeline *p, gp_reservation *r, gp_done_fn done, void *user) {
    if (!p) return GP_EINVAL;
    unsigned call = call_enter(p);
    if (!r || !done || !reservation_open(p, r))
        return call_leave(p, call,
                          not_open(p, "gp_pipeline_commit",
                                   !r      ? "r is NULL"
                                   : !done ? "done is NULL"
                                           : NOT_OPEN_WHY));
    fill(p, r->seq, done, user, r->deadline_ns, gp__ring_item(&p->ring, r->seq)->out_len);
    count_accepted(p, call);
    publish(p, r->seq);
    r->data = NULL;
    return call_leave(p, call, GP_OK);
}

int gp_pipeline_abandon(gp_pipeline *p, gp_reservation *r) {
    if (!p) return GP_EINVAL;
    unsigned call = call_enter(p);
    if (!r || !reservation_open(p, r))
        return call_leave(p, call,
                          not_open(p, "gp_pipeline_abandon", !r ? "r is NULL" : NOT_OPEN_WHY));
    /* The reserved sizes stay: a compute never sees an empty output, dead item or not. */
    fill(p, r->seq, NULL, NULL, 0, gp__ring_item(&p->ring, r->seq)->out_len);
    publish(p, r->seq);
    r->data = NULL;
    return call_leave(p, call, GP_OK);
}

int gp_pipeline_cancel(gp_pipeline *p, uint64_t seq) {
    if (!p) return GP_EINVAL;
    unsigned call = call_enter(p);
    int rc;
    /* Acquire (in gp__ring_claimed and here): below `released` every item is done. A done
       item's descriptor still tells a canceled or abandoned one from the rest until a later
       lap reuses it. Once index seq + capacity is claimed the slot is reused (so seq is done),
       whether or not that item is filled yet (an open reservation's is not): GP_EBUSY
       (gpupipe.h), and an old index never meets an aliased lap tag. */
    uint64_t claimed = gp__ring_claimed(&p->ring);
    uint64_t rel = atomic_load_explicit(&p->ring.released, memory_order_acquire);
    if (seq >= claimed) {
        rc = GP_EINVAL; /* never accepted (yet) */
    } else if (claimed - seq > p->ring.capacity) {
        rc = GP_EBUSY; /* done, its slot claimed again */
    } else {
        gp__item *it = gp__ring_item(&p->ring, seq);
        uint32_t st = atomic_load_explicit(&it->state, memory_order_relaxed);
        for (;;) {
            /* The lap tag tells this item from the descriptor's previous and next use. */
            int16_t lap = (int16_t)((st >> 16) - (uint32_t)(gp__ring_lap(&p->ring, seq) & 0xffff));
            if (lap > 0) {
                rc = GP_EBUSY; /* done, and the descriptor reused */
            } else if (lap < 0 || !(st & GP__ST_ACCEPTED)) {
                rc = GP_EINVAL; /* not filled yet: a reservation, or abandoned */
            } else if (st & GP__ST_CANCELED) {
                rc = GP_OK;
            } else if ((st & GP__ST_TAKEN) || seq < rel) {
                rc = GP_EBUSY;
            } else {
                uint32_t nst = gp__st_with_code(st | GP__ST_CANCELED, GP_ECANCELED);
                /* Relaxed: the state word's modification order decides against the batcher's
                   take; the callback is the completion side's, ordered by the record. */
                if (!atomic_compare_exchange_weak_explicit(
                        &it->state, &st, nst, memory_order_relaxed, memory_order_relaxed))
                    continue;
                GP__BUMP(p->stats.cancels, 1);
                rc = GP_OK;
            }
            break;
        }
    }
    return call_leave(p, call, rc);
}

typedef struct infer_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, status;
    void *out;
} infer_wait;

static void infer_done(void *user, int status, const void *output, size_t bytes) {
    infer_wait *w = user;
    if (status == GP_OK) memcpy(w->out, output, bytes);
    pthread_mutex_lock(&w->mu);
    w->status = status;
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int gp_pipeline_infer(gp_pipeline *p, const void *input, size_t in_bytes, void *output,
                      size_t out_bytes) {
    if (!p) return GP_EINVAL;
    if (!input || !output)
        return REFUSE(p, GP_EINVAL, "gp_pipeline_infer: %s is NULL", !input ? "input" : "output");
    if (p->var_out ? out_bytes == 0 || out_bytes > p->cfg.max_item_out_bytes
                   : out_bytes != p->cfg.item_out_bytes)
        return REFUSE(p, GP_EINVAL,
                      p->var_out ? "gp_pipeline_infer: output of %zu bytes: not in "
                                   "1..max_item_out_bytes (%zu)"
                                 : "gp_pipeline_infer: output of %zu bytes: item_out_bytes is %zu",
                      out_bytes, p->var_out ? p->cfg.max_item_out_bytes : p->cfg.item_out_bytes);
    /* After shutdown began the submit below says GP_ESHUTDOWN without waiting. */
    if (!shut(p) && from_own_thread(p, "gp_pipeline_infer")) return GP_EINVAL;
    infer_wait w = {.out = output};
    if (pthread_mutex_init(&w.mu, NULL) != 0)
        return REFUSE(p, GP_ESYS, "gp_pipeline_infer: pthread_mutex_init failed");
    if (pthread_cond_init(&w.cv, NULL) != 0) {
        pthread_mutex_destroy(&w.mu);
        return REFUSE(p, GP_ESYS, "gp_pipeline_infer: pthread_cond_init failed");
    }
    gp_submit_args a;
    gp_submit_args_init(&a);
    a.input = input;
    a.input_bytes = in_bytes;
    a.output_bytes = p->var_out ? out_bytes : 0;
    a.done = infer_done;
    a.user = &w;
    int rc = submit_item(p, &a, 0, NULL);
    if (rc == GP_OK) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        rc = w.status;
        pthread_mutex_unlock(&w.mu);
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return rc;
}

/* ---- flush / drain -------------------------------------------------------------------- */

int gp_pipeline_flush(gp_pipeline *p) {
    if (!p) return GP_EINVAL;
    uint64_t t = gp__ring_claimed(&p->ring);
    uint64_t cur = atomic_load_explicit(&p->flush_upto, memory_order_relaxed);
    /* Release: the items this thread published before are visible to the batcher that sees
       the mark (DESIGN §4, "flush"). */
    while (cur < t && !atomic_compare_exchange_weak_explicit(
                          &p->flush_upto, &cur, t, memory_order_release, memory_order_relaxed))
        ;
    gp__notify_wake(&p->bwake);
    return GP_OK;
}

int gp_pipeline_drain(gp_pipeline *p, int64_t timeout_us) {
    if (!p || from_own_thread(p, "gp_pipeline_drain")) return GP_EINVAL;
    /* Up to the last item accepted before this call: an open reservation (or a submit still
       copying) is not submitted yet, unless an item after it is, which waits for it anyway. */
    uint64_t target = gp__ring_accepted_end(&p->ring);
    gp_pipeline_flush(p);
    /* A timeout too long for the clock (~292 years of ns from now) is no timeout. */
    uint64_t now = gp__now_ns(), deadline = 0;
    if (timeout_us >= 0 && (uint64_t)timeout_us <= (UINT64_MAX - now) / 1000u)
        deadline = now + (uint64_t)timeout_us * 1000u;
    int rc = GP_OK;
    gp__notify_lock(&p->drained);
    /* Acquire: pairs with gp__ring_release's store; the callbacks ran before it. */
    while (atomic_load_explicit(&p->ring.released, memory_order_acquire) < target) {
        if (deadline && gp__now_ns() >= deadline) {
            rc = GP_ETIMEDOUT;
            break;
        }
        gp__notify_wait(&p->drained, deadline);
    }
    gp__notify_unlock(&p->drained);
    return rc;
}

/* ---- introspection -------------------------------------------------------------------- */

int gp_pipeline_last_error(gp_pipeline *p, char *buf, size_t len) {
    if (!p) {
        if (buf && len) buf[0] = '\0';
        return GP_EINVAL;
    }
    return gp__err_copy(&p->err, buf, len);
}

/* The glue between the pipeline and stats.c: what a snapshot reads besides the counters, and
   the backend's own counters (graph replays) added on top. */
static void read_stats(gp_pipeline *p, gp_stats *s, uint64_t *qw, uint64_t *lat) {
    const gp__stats_src src = {.t = &p->stats,
                               .cfg = &p->cfg,
                               .backend = p->be->id,
                               .fell_back = p->fell_back,
                               .fallback_reason = p->fallback_reason};
    gp__stats_read(&src, s, qw, lat);
    if (p->ops && p->ops->stats) p->ops->stats(p->dev, s);
}

static int bad_stats(gp_pipeline *p, const char *call, const gp_stats *s) {
    if (!s) return GP__ERR(&p->err, GP_EINVAL, "%s: the gp_stats is NULL", call);
    return GP__ERR(&p->err, GP_EINVAL, "%s: gp_stats.struct_size %zu not in %zu..%zu", call,
                   s->struct_size, offsetof(gp_stats, backend) + sizeof s->backend,
                   sizeof(gp_stats));
}

int gp_pipeline_stats(gp_pipeline *p, gp_stats *s) {
    if (!p) return GP_EINVAL;
    if (!gp__stats_size_ok(s)) return bad_stats(p, "gp_pipeline_stats", s);
    gp_stats full;
    uint64_t qw[GP__HIST_BUCKETS], lat[GP__HIST_BUCKETS];
    read_stats(p, &full, qw, lat);
    gp__stats_copy_out(&full, s);
    return GP_OK;
}

int gp_pipeline_mark(gp_pipeline *p, gp_stats_mark **out) {
    if (out) *out = NULL;
    if (!p) return GP_EINVAL;
    if (!out) return GP__ERR(&p->err, GP_EINVAL, "gp_pipeline_mark: out is NULL");
    gp_stats_mark *m = gp__stats_mark_new(p, p->stats.t_create_ns);
    if (!m) return GP__ERR(&p->err, GP_ENOMEM, "gp_pipeline_mark: %zu bytes", sizeof *m);
    read_stats(p, &m->s, m->queue_wait, m->latency);
    *out = m;
    return GP_OK;
}

int gp_pipeline_stats_since(gp_pipeline *p, const gp_stats_mark *m, gp_stats *out) {
    if (!p) return GP_EINVAL;
    if (!m || m->owner != p || m->owner_born != p->stats.t_create_ns)
        return GP__ERR(&p->err, GP_EINVAL, "gp_pipeline_stats_since: %s",
                       !m ? "the mark is NULL" : "a mark taken on another pipeline");
    if (!gp__stats_size_ok(out)) return bad_stats(p, "gp_pipeline_stats_since", out);
    gp_stats_mark *now = gp__stats_mark_new(p, 0); /* scratch: the histograms are 16 KiB */
    if (!now) return GP__ERR(&p->err, GP_ENOMEM, "gp_pipeline_stats_since: %zu bytes", sizeof *now);
    read_stats(p, &now->s, now->queue_wait, now->latency);
    gp_stats full;
    gp__stats_window(m, now, &full);
    gp_stats_mark_free(now);
    gp__stats_copy_out(&full, out);
    return GP_OK;
}

uint64_t gp__pipeline_alloc_count(gp_pipeline *p) {
    if (!p || !p->ops || !p->ops->alloc_count) return UINT64_MAX;
    return p->ops->alloc_count(p->dev);
}
