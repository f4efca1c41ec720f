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
    if (c->item_in_bytes == 0) return invalid(err, len, "config.item_in_bytes: must be > 0");
    if (c->item_out_bytes == 0) return invalid(err, len, "config.item_out_bytes: must be > 0");
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

static int open_backend(gp_pipeline *p) {
    gp_backend want = p->cfg.backend;
    if (want == GP_BACKEND_HOST) goto host;
#ifdef GP_HAVE_CUDA
    int rc = gp__cuda_ops.open(&p->cfg, &p->err, &p->dev);
    if (rc == GP_OK) {
        p->ops = &gp__cuda_ops;
        p->backend = GP_BACKEND_CUDA;
        return GP_OK;
    }
    if (want == GP_BACKEND_CUDA) return rc;
    gp__err_copy(&p->err, p->fallback_reason, sizeof p->fallback_reason);
#else
    if (want == GP_BACKEND_CUDA)
        return GP__ERR(&p->err, GP_ENODEV,
                       "backend cuda: this build has no CUDA backend "
                       "(configured with GP_WITH_CUDA=OFF or no toolkit)");
    snprintf(p->fallback_reason, sizeof p->fallback_reason,
             "this build has no CUDA backend (GP_WITH_CUDA=OFF or no toolkit at build time)");
#endif
    p->fell_back = 1;
    gp__log(&p->err, GP_LOG_WARN, "backend auto: no usable GPU, running on the host backend: %s",
            p->fallback_reason);
host:
    p->ops = &gp__host_ops;
    p->backend = GP_BACKEND_HOST;
    return gp__host_ops.open(&p->cfg, &p->err, &p->dev);
}

/* ---- slots ---------------------------------------------------------------------------- */

static int slot_init(gp_pipeline *p, gp__slot *s, int index) {
    const gp__device_ops *o = p->ops;
    const gp_config *c = &p->cfg;
    int rc;
    s->index = index;
    s->device = p->backend == GP_BACKEND_CUDA
                    ? (c->num_devices ? c->devices[index % c->num_devices] : 0)
                    : -1;
    if ((rc = o->stream_create(p->dev, s->device, &s->stream)) != GP_OK) return rc;
    if ((rc = o->dev_alloc(p->dev, s->device, c->max_batch * c->item_in_bytes, &s->d_in)) != GP_OK)
        return rc;
    if ((rc = o->dev_alloc(p->dev, s->device, c->max_batch * c->item_out_bytes, &s->d_out)) !=
        GP_OK)
        return rc;
    for (int e = 0; e < GP__EV_COUNT; e++)
        if ((rc = o->event_create(p->dev, s->device, &s->ev[e])) != GP_OK) return rc;
    gp_batch *b = &s->launch.batch;
    memset(b, 0, sizeof *b);
    b->capacity = c->max_batch;
    b->in = s->d_in;
    b->out = s->d_out;
    b->in_bytes = c->item_in_bytes;
    b->out_bytes = c->item_out_bytes;
    b->slot = index;
    b->device = s->device;
    b->backend = p->backend;
    o->stream_bind(p->dev, s->stream, b);
    s->launch.fn = c->compute;
    s->launch.user = c->compute_user;
    if (o->bind_device && (rc = o->bind_device(p->dev, s->device)) != GP_OK) return rc;
    if (c->compute_setup) {
        rc = c->compute_setup(c->compute_user, b);
        if (rc != GP_OK) {
            if (rc > 0 || rc < GP_ENOTSUP) rc = GP_EDEVICE;
            return GP__ERR(&p->err, rc, "compute_setup failed for slot %d", index);
        }
        s->ready = 1;
    }
    if (o->slot_ready && (rc = o->slot_ready(p->dev, s->stream, &s->launch)) != GP_OK) return rc;
    return GP_OK;
}

static void slot_fini(gp_pipeline *p, gp__slot *s) {
    const gp__device_ops *o = p->ops;
    /* Teardown runs on the destroying thread: make the slot's device current first. */
    if (s->ready && o->bind_device) o->bind_device(p->dev, s->device);
    if (s->ready && p->cfg.compute_teardown)
        p->cfg.compute_teardown(p->cfg.compute_user, &s->launch.batch);
    for (int e = 0; e < GP__EV_COUNT; e++)
        if (s->ev[e]) o->event_destroy(p->dev, s->ev[e]);
    if (s->d_out) o->dev_free(p->dev, s->device, s->d_out);
    if (s->d_in) o->dev_free(p->dev, s->device, s->d_in);
    if (s->stream) o->stream_destroy(p->dev, s->stream);
}

/* ---- prep workers --------------------------------------------------------------------- */

static void prepq_push(gp_pipeline *p, uint64_t idx) {
    gp__prepq *q = &p->prepq;
    pthread_mutex_lock(&q->mu);
    /* Never full: at most `capacity` indices are claimed and unreleased. */
    q->buf[q->tail % p->ring.capacity] = idx;
    q->tail++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

static void *prep_main(void *arg) {
    gp_pipeline *p = arg;
    gp__prepq *q = &p->prepq;
    const gp_config *c = &p->cfg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->head == q->tail && !q->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->head == q->tail) break;
        uint64_t idx = q->buf[q->head % p->ring.capacity];
        q->head++;
        pthread_mutex_unlock(&q->mu);

        gp__item *it = gp__ring_item(&p->ring, idx);
        if (atomic_load_explicit(&p->canceling, memory_order_relaxed)) {
            it->status = GP_ECANCELED;
        } else {
            uint64_t t0 = gp__now_ns();
            int rc = c->prep(c->prep_user, it->src, it->src_bytes, gp__ring_in(&p->ring, idx),
                             p->ring.in_bytes);
            GP__BUMP(p->stats.prep_busy_ns, gp__now_ns() - t0);
            it->status = rc == GP_OK ? GP_OK : (rc < 0 && rc >= GP_ENOTSUP ? rc : GP_EPREP);
        }
        gp__ring_publish(&p->ring, idx);
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
    int batcher_started = 0, poller_started = 0;
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
    stop_threads(p, 1, batcher_started, poller_started);
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
    p->stats.t_create_ns = gp__now_ns();
    const gp_config *c = &p->cfg;

    if ((rc = open_backend(p)) != GP_OK) goto fail;
    void *in = NULL, *outb = NULL;
    if ((rc = p->ops->host_alloc(p->dev, c->capacity * c->item_in_bytes, &in)) != GP_OK) goto fail;
    p->ring.in = in; /* owned before ring init so a failure frees it */
    if ((rc = p->ops->host_alloc(p->dev, c->capacity * c->item_out_bytes, &outb)) != GP_OK)
        goto fail;
    p->ring.out = outb;
    if ((rc = gp__ring_init(&p->ring, c->capacity, c->item_in_bytes, c->item_out_bytes, in,
                            outb)) != GP_OK) {
        rc = GP__ERR(&p->err, rc, "ring of %zu items", c->capacity);
        goto fail;
    }
    p->nslots = c->inflight;
    p->slots = calloc((size_t)p->nslots, sizeof *p->slots);
    if (!p->slots) {
        rc = GP__ERR(&p->err, GP_ENOMEM, "slots");
        goto fail;
    }
    for (int i = 0; i < p->nslots; i++)
        if ((rc = slot_init(p, &p->slots[i], i)) != GP_OK) goto fail;
    if ((rc = sync_init(p)) != GP_OK) goto fail;
    if ((rc = start_threads(p)) != GP_OK) goto fail;
    *out = p;
    return GP_OK;

fail:
    if (err && err_len) gp__err_copy(&p->err, err, err_len);
    free_all(p);
    return rc;
}

int gp_pipeline_shutdown(gp_pipeline *p, gp_destroy_mode mode) {
    if (!p) return GP_EINVAL;
    if (!p->shut) {
        stop_threads(p, mode == GP_DESTROY_CANCEL, 1, 1);
        p->shut = 1;
    }
    return atomic_load_explicit(&p->failed, memory_order_relaxed) ? GP_EDEVICE : GP_OK;
}

int gp_pipeline_destroy(gp_pipeline *p, gp_destroy_mode mode) {
    if (!p) return GP_OK;
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

static int claim(gp_pipeline *p, uint64_t *idx) {
    if (atomic_load_explicit(&p->failed, memory_order_relaxed)) return GP_EDEVICE;
    uint64_t blocked = 0;
    int rc = gp__ring_claim(&p->ring, p->cfg.full_policy == GP_FULL_BLOCK, idx, &blocked);
    if (blocked) GP__BUMP(p->stats.backpressure_ns, blocked);
    if (rc == GP_EAGAIN) GP__BUMP(p->stats.rejected_full, 1);
    return rc;
}

static void fill(gp__item *it, gp_done_fn done, void *user, uint64_t deadline_ns) {
    it->done = done;
    it->user = user;
    it->deadline_ns = deadline_ns;
    it->t_submit_ns = gp__now_ns();
    it->status = GP_OK;
}

static void publish(gp_pipeline *p, uint64_t idx) {
    gp__ring_publish(&p->ring, idx);
    gp__notify_wake(&p->bwake);
}

int gp_pipeline_submit_deadline(gp_pipeline *p, const void *input, size_t bytes,
                                uint64_t deadline_ns, gp_done_fn done, void *user) {
    uint64_t idx;
    if (!p || !input || !done || bytes != p->ring.in_bytes) return GP_EINVAL;
    unsigned call = call_enter(p);
    int rc = claim(p, &idx);
    if (rc != GP_OK) return call_leave(p, call, rc);
    memcpy(gp__ring_in(&p->ring, idx), input, bytes);
    fill(gp__ring_item(&p->ring, idx), done, user, deadline_ns);
    publish(p, idx);
    return call_leave(p, call, GP_OK);
}

int gp_pipeline_submit(gp_pipeline *p, const void *input, size_t bytes, gp_done_fn done,
                       void *user) {
    return gp_pipeline_submit_deadline(p, input, bytes, 0, done, user);
}

int gp_pipeline_submit_prep(gp_pipeline *p, const void *src, size_t src_bytes, uint64_t deadline_ns,
                            gp_done_fn done, void *user) {
    uint64_t idx;
    if (!p || !done || (!src && src_bytes) || p->cfg.prep_workers == 0) return GP_EINVAL;
    unsigned call = call_enter(p);
    int rc = claim(p, &idx);
    if (rc != GP_OK) return call_leave(p, call, rc);
    gp__item *it = gp__ring_item(&p->ring, idx);
    fill(it, done, user, deadline_ns);
    it->src = src;
    it->src_bytes = src_bytes;
    prepq_push(p, idx); /* the prep worker publishes */
    return call_leave(p, call, GP_OK);
}

int gp_pipeline_reserve(gp_pipeline *p, gp_reservation *r) {
    uint64_t idx;
    if (!p || !r) return GP_EINVAL;
    unsigned call = call_enter(p);
    int rc = claim(p, &idx);
    if (rc == GP_OK) {
        r->data = gp__ring_in(&p->ring, idx);
        r->bytes = p->ring.in_bytes;
        r->deadline_ns = 0;
        r->seq = idx;
    }
    return call_leave(p, call, rc);
}

int gp_pipeline_commit(gp_pipeline *p, gp_reservation *r, gp_done_fn done, void *user) {
    if (!p || !r || !done || r->data != gp__ring_in(&p->ring, r->seq)) return GP_EINVAL;
    unsigned call = call_enter(p);
    fill(gp__ring_item(&p->ring, r->seq), done, user, r->deadline_ns);
    publish(p, r->seq);
    r->data = NULL;
    return call_leave(p, call, GP_OK);
}

int gp_pipeline_abandon(gp_pipeline *p, gp_reservation *r) {
    if (!p || !r || r->data != gp__ring_in(&p->ring, r->seq)) return GP_EINVAL;
    unsigned call = call_enter(p);
    fill(gp__ring_item(&p->ring, r->seq), NULL, NULL, 0);
    GP__BUMP(p->stats.abandoned, 1);
    publish(p, r->seq);
    r->data = NULL;
    return call_leave(p, call, GP_OK);
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
    if (!p || !input || !output || out_bytes != p->ring.out_bytes) return GP_EINVAL;
    infer_wait w = {.out = output};
    if (pthread_mutex_init(&w.mu, NULL) != 0) return GP_ESYS;
    if (pthread_cond_init(&w.cv, NULL) != 0) {
        pthread_mutex_destroy(&w.mu);
        return GP_ESYS;
    }
    int rc = gp_pipeline_submit(p, input, in_bytes, infer_done, &w);
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
    while (cur < t && !atomic_compare_exchange_weak_explicit(
                          &p->flush_upto, &cur, t, memory_order_relaxed, memory_order_relaxed))
        ;
    gp__notify_wake(&p->bwake);
    return GP_OK;
}

int gp_pipeline_drain(gp_pipeline *p, int64_t timeout_us) {
    if (!p) return GP_EINVAL;
    uint64_t target = gp__ring_claimed(&p->ring);
    gp_pipeline_flush(p);
    uint64_t deadline = timeout_us < 0 ? 0 : gp__now_ns() + (uint64_t)timeout_us * 1000u;
    int rc = GP_OK;
    gp__notify_lock(&p->drained);
    while (atomic_load_explicit(&p->released_upto, memory_order_acquire) < target) {
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
                               .backend = p->backend,
                               .fell_back = p->fell_back,
                               .fallback_reason = p->fallback_reason,
                               .ring = &p->ring};
    gp__stats_read(&src, s, qw, lat);
    if (p->ops && p->ops->stats) p->ops->stats(p->dev, s);
}

int gp_pipeline_stats(gp_pipeline *p, gp_stats *s) {
    if (!p || !gp__stats_size_ok(s)) return GP_EINVAL;
    gp_stats full;
    uint64_t qw[GP__HIST_BUCKETS], lat[GP__HIST_BUCKETS];
    read_stats(p, &full, qw, lat);
    gp__stats_copy_out(&full, s);
    return GP_OK;
}

int gp_pipeline_mark(gp_pipeline *p, gp_stats_mark **out) {
    if (out) *out = NULL;
    if (!p || !out) return GP_EINVAL;
    gp_stats_mark *m = gp__stats_mark_new(p);
    if (!m) return GP_ENOMEM;
    read_stats(p, &m->s, m->queue_wait, m->latency);
    *out = m;
    return GP_OK;
}

int gp_pipeline_stats_since(gp_pipeline *p, const gp_stats_mark *m, gp_stats *out) {
    if (!p || !m || m->owner != p || !gp__stats_size_ok(out)) return GP_EINVAL;
    gp_stats_mark *now = gp__stats_mark_new(p); /* scratch: the histograms are 16 KiB */
    if (!now) return GP_ENOMEM;
    read_stats(p, &now->s, now->queue_wait, now->latency);
    gp_stats full;
    gp__stats_window(m, now, &full);
    gp_stats_mark_free(now);
    gp__stats_copy_out(&full, out);
    return GP_OK;
}
