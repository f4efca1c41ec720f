/*
 * Lifecycle and failure paths, on every backend:
 *  - full ring: GP_EAGAIN with GP_FULL_FAIL; a blocked producer with GP_FULL_BLOCK;
 *  - destroy with drain and with cancel while items sit in every stage (prep queue, prep
 *    running, ring, in flight, callback running): every callback arrives once, right status;
 *  - destroy with cancel under 4 live producers: every accepted submit gets one callback;
 *  - compute fails for one batch: exactly that batch's items get GP_ECOMPUTE;
 *  - prep workers: order and exactly-once, a failing prep completes only its item;
 *  - infer, abandon.
 */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "gpt.h"

#define WORDS 2
#define NTAGS 4096

static gp_backend backend;
static struct {
    pthread_mutex_t mu;
    int status[NTAGS];
    int count[NTAGS];
    int order[NTAGS];
    int n;
} T = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void reset(void) {
    pthread_mutex_lock(&T.mu);
    memset(T.count, 0, sizeof T.count);
    for (int i = 0; i < NTAGS; i++)
        T.status[i] = 1;
    T.n = 0;
    pthread_mutex_unlock(&T.mu);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void done(void *user, int status, const void *out, size_t bytes) {
    int tag = (int)(intptr_t)user;
    if (status == GP_OK) GPT_EQ(((const uint32_t *)out)[0], gpt_word((uint32_t)tag));
    pthread_mutex_lock(&T.mu);
    T.status[tag] = status;
    T.count[tag]++;
    T.order[T.n++] = tag;
    pthread_mutex_unlock(&T.mu);
}

static int ncallbacks(void) {
    pthread_mutex_lock(&T.mu);
    int n = T.n;
    pthread_mutex_unlock(&T.mu);
    return n;
}

static void base(gp_config *c) {
    gpt_config(c, backend);
    c->item_in_bytes = c->item_out_bytes = WORDS * 4;
    c->compute = gpt_transform;
}

static int submit(gp_pipeline *p, int tag) {
    uint32_t w[WORDS] = {(uint32_t)tag, 7};
    return gp_pipeline_submit(p, w, sizeof w, done, (void *)(intptr_t)tag);
}

/* ---- full ring ------------------------------------------------------------------------ */

typedef struct blocked_producer {
    gp_pipeline *p;
    _Atomic int returned;
} blocked_producer;

static void *block_submit(void *arg) {
    blocked_producer *b = arg;
    GPT_RC(submit(b->p, 100), GP_OK);
    atomic_store(&b->returned, 1);
    return NULL;
}

static void full_ring(gp_full_policy policy) {
    gpt_gate gate;
    gpt_gate_init(&gate);
    gp_config c;
    base(&c);
    c.compute = gpt_gate_compute;
    c.compute_user = &gate;
    c.inflight = 1;
    c.max_batch = 16;
    c.capacity = 64;
    c.full_policy = policy;
    reset();
    gp_pipeline *p = gpt_create(&c);
    GPT_RC(submit(p, 0), GP_OK);
    gpt_gate_wait_entered(&gate, 1); /* item 0 holds the only slot */
    for (int i = 1; i < 64; i++)
        GPT_RC(submit(p, i), GP_OK);
    if (policy == GP_FULL_FAIL) {
        GPT_RC(submit(p, 100), GP_EAGAIN);
        GPT_RC(submit(p, 100), GP_EAGAIN);
        gp_stats st = {.struct_size = sizeof st};
        GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
        GPT_EQ(st.rejected_full, 2);
        gpt_gate_open(&gate);
        GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK);
        GPT_RC(submit(p, 100), GP_OK); /* room again */
    } else {
        blocked_producer b = {.p = p};
        pthread_t th;
        GPT_EQ(pthread_create(&th, NULL, block_submit, &b), 0);
        sleep_ms(30);
        GPT_EQ(atomic_load(&b.returned), 0); /* still blocked on the full ring */
        gpt_gate_open(&gate);
        GPT_EQ(pthread_join(th, NULL), 0);
        GPT_EQ(atomic_load(&b.returned), 1);
        GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK);
        gp_stats st = {.struct_size = sizeof st};
        GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
        GPT_CHECK(st.backpressure_ns >= 20000000u);
    }
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    gpt_gate_destroy(&gate);
    for (int i = 0; i < 64; i++)
        GPT_EQ(T.status[i], GP_OK);
    GPT_EQ(T.count[100], 1);
    GPT_EQ(ncallbacks(), 65);
}

/* ---- destroy while items sit in every stage ------------------------------------------- */

static gpt_gate cb_gate, prep_gate;

static int gated_prep(void *user, const void *src, size_t n, void *slot, size_t slot_bytes) {
    gpt_gate_pass(&prep_gate);
    memcpy(slot, src, slot_bytes);
    return GP_OK;
}

static void cb_wait(void *user, int status, const void *out, size_t bytes) {
    gpt_gate_pass(&cb_gate);
    done(user, status, out, bytes);
}

typedef struct destroy_arg {
    gp_pipeline *p;
    gp_destroy_mode mode;
} destroy_arg;

static void *destroy_thread(void *arg) {
    destroy_arg *d = arg;
    GPT_RC(gp_pipeline_destroy(d->p, d->mode), GP_OK);
    return NULL;
}

/* On CUDA, items 1 and 2 hold both slots at once: two gate kernels wait side by side (a
   blocking host function per slot would not do: CUDA may run host functions of different
   streams one after the other). */
static void destroy_every_stage(gp_destroy_mode mode) {
    gpt_gate gate;
    gpt_gate_init(&gate);
    gpt_gate_init(&cb_gate);
    gpt_gate_init(&prep_gate);
    gpt_gate_open(&gate);
    gp_config c;
    base(&c);
    c.compute = gpt_gate_compute;
    c.compute_user = &gate;
    c.inflight = 2;
    c.max_batch = 4;
    c.prep_workers = 1;
    c.prep = gated_prep;
    reset();
    gp_pipeline *p = gpt_create(&c);

    /* Item 0: its callback blocks the completion worker. */
    uint32_t w0[WORDS] = {0, 7};
    GPT_RC(gp_pipeline_submit(p, w0, sizeof w0, cb_wait, (void *)(intptr_t)0), GP_OK);
    gpt_gate_wait_entered(&cb_gate, 1);
    /* Items 1, 2: one per slot, held in the compute. */
    gpt_gate_close(&gate);
    GPT_RC(submit(p, 1), GP_OK);
    gpt_gate_wait_entered(&gate, 2);
    GPT_RC(submit(p, 2), GP_OK);
    gpt_gate_wait_entered(&gate, 3);
    /* Items 3..9: published, waiting for a slot. */
    for (int i = 3; i < 10; i++)
        GPT_RC(submit(p, i), GP_OK);
    /* Items 10..12: prep running (10) and queued (11, 12). */
    static uint32_t raw[3][WORDS] = {{10, 7}, {11, 7}, {12, 7}};
    for (int i = 0; i < 3; i++)
        GPT_RC(
            gp_pipeline_submit_prep(p, raw[i], sizeof raw[i], 0, done, (void *)(intptr_t)(10 + i)),
            GP_OK);
    gpt_gate_wait_entered(&prep_gate, 1);

    destroy_arg d = {p, mode};
    pthread_t th;
    GPT_EQ(pthread_create(&th, NULL, destroy_thread, &d), 0);
    int late = 0; /* accepted before destroy closed the ring: they get callbacks too */
    while (submit(p, 999) != GP_ESHUTDOWN)
        late++;
    sleep_ms(10);
    gpt_gate_open(&prep_gate);
    gpt_gate_open(&gate);
    gpt_gate_open(&cb_gate);
    GPT_EQ(pthread_join(th, NULL), 0);
    gpt_gate_destroy(&gate);
    gpt_gate_destroy(&cb_gate);
    gpt_gate_destroy(&prep_gate);

    GPT_EQ(ncallbacks(), 13 + late);
    GPT_EQ(T.count[999], late);
    for (int i = 0; i < 13; i++) {
        GPT_EQ(T.count[i], 1);
        int want = mode == GP_DESTROY_DRAIN || i == 0 ? GP_OK : GP_ECANCELED;
        if (T.status[i] != want)
            fprintf(stderr, "item %d: %s, want %s\n", i, gp_err_name(T.status[i]),
                    gp_err_name(want));
        GPT_EQ(T.status[i], want);
        GPT_EQ(T.order[i], i); /* submit order, one worker */
    }
}

/* ---- cancel under live producers ------------------------------------------------------ */

typedef struct live {
    gp_pipeline *p;
    int id;
    _Atomic int *accepted;
} live;

static _Atomic int live_callbacks;

static void live_done(void *user, int status, const void *out, size_t bytes) {
    GPT_CHECK(status == GP_OK || status == GP_ECANCELED);
    atomic_fetch_add(&live_callbacks, 1);
}

static void *live_producer(void *arg) {
    live *l = arg;
    uint32_t w[WORDS] = {1, 2};
    for (;;) {
        int rc = gp_pipeline_submit(l->p, w, sizeof w, live_done, NULL);
        if (rc == GP_ESHUTDOWN) return NULL;
        GPT_RC(rc, GP_OK);
        atomic_fetch_add(l->accepted, 1);
    }
}

static void destroy_under_load(gp_destroy_mode mode) {
    gp_config c;
    base(&c);
    c.capacity = 256;
    c.max_batch = 32;
    gp_pipeline *p = gpt_create(&c);
    _Atomic int accepted = 0;
    atomic_store(&live_callbacks, 0);
    live l[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        l[i] = (live){p, i, &accepted};
        GPT_EQ(pthread_create(&th[i], NULL, live_producer, &l[i]), 0);
    }
    sleep_ms(50);
    /* Shutdown under load: producers see GP_ESHUTDOWN and stop; every accepted item has had
       its callback when shutdown returns; the pipeline stays valid until destroy. */
    GPT_RC(gp_pipeline_shutdown(p, mode), GP_OK);
    int at_shutdown = atomic_load(&live_callbacks);
    for (int i = 0; i < 4; i++)
        GPT_EQ(pthread_join(th[i], NULL), 0);
    GPT_CHECK(atomic_load(&accepted) > 0);
    GPT_EQ(atomic_load(&live_callbacks), atomic_load(&accepted));
    GPT_EQ(at_shutdown, atomic_load(&accepted));
    uint32_t w[WORDS] = {0, 0};
    GPT_RC(gp_pipeline_submit(p, w, sizeof w, live_done, NULL), GP_ESHUTDOWN);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_EQ(st.completed, (uint64_t)atomic_load(&accepted));
    GPT_RC(gp_pipeline_shutdown(p, GP_DESTROY_DRAIN), GP_OK); /* again: nothing to do */
    GPT_RC(gp_pipeline_destroy(p, mode), GP_OK);
    printf("  shutdown(%s) under 4 producers: %d accepted, %d callbacks\n",
           mode == GP_DESTROY_DRAIN ? "drain" : "cancel", atomic_load(&accepted),
           atomic_load(&live_callbacks));
}

/* ---- compute failure ------------------------------------------------------------------ */

static _Atomic uint64_t fail_seq;

static int failing_compute(void *user, const gp_batch *b) {
    uint64_t s = atomic_load(&fail_seq);
    if (s >= b->first_seq && s < b->first_seq + b->n) return 42;
    return gpt_transform(user, b);
}

static struct {
    pthread_mutex_t mu;
    uint64_t first[1024];
    size_t n[1024];
    int status[1024];
    int nb;
} TR = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void trace(void *user, const gp_batch_trace *t) {
    pthread_mutex_lock(&TR.mu);
    TR.first[TR.nb] = t->first_seq;
    TR.n[TR.nb] = t->n;
    TR.status[TR.nb++] = t->status;
    pthread_mutex_unlock(&TR.mu);
}

static void compute_fails(void) {
    gp_config c;
    base(&c);
    c.compute = failing_compute;
    c.max_batch = 8;
    c.on_batch = trace;
    reset();
    TR.nb = 0;
    atomic_store(&fail_seq, UINT64_MAX);
    gp_pipeline *p = gpt_create(&c);
    uint64_t seq_of[300];
    for (int i = 0; i < 300; i++) {
        gp_reservation r;
        GPT_RC(gp_pipeline_reserve(p, &r), GP_OK);
        ((uint32_t *)r.data)[0] = (uint32_t)i;
        seq_of[i] = r.seq;
        if (i == 150)
            atomic_store(&fail_seq, r.seq); /* before commit: its batch is not formed yet */
        GPT_RC(gp_pipeline_commit(p, &r, done, (void *)(intptr_t)i), GP_OK);
    }
    GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK);
    char detail[256];
    GPT_RC(gp_pipeline_last_error(p, detail, sizeof detail), GP_ECOMPUTE);
    GPT_CHECK(strstr(detail, "compute returned 42"));
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    int failed_batches = 0;
    uint64_t lo = 0, hi = 0;
    for (int b = 0; b < TR.nb; b++)
        if (TR.status[b] == GP_ECOMPUTE) {
            failed_batches++;
            lo = TR.first[b];
            hi = lo + TR.n[b];
        }
    GPT_EQ(failed_batches, 1);
    int nfail = 0;
    for (int i = 0; i < 300; i++) {
        int in_failed = seq_of[i] >= lo && seq_of[i] < hi;
        GPT_EQ(T.status[i], in_failed ? GP_ECOMPUTE : GP_OK);
        nfail += in_failed;
    }
    GPT_EQ(st.failed, (uint64_t)nfail);
    GPT_EQ(st.completed_ok, 300u - (uint64_t)nfail);
    printf("  compute failure: 1 batch of %d items failed, %d items ok\n", nfail, 300 - nfail);
}

/* ---- prep workers --------------------------------------------------------------------- */

static int prep_fn(void *user, const void *src, size_t n, void *slot, size_t slot_bytes) {
    uint32_t tag = *(const uint32_t *)src;
    if (tag == 77) return GP_EINVAL; /* this item's own status */
    if (tag == 78) return 5;         /* not a GP code: becomes GP_EPREP */
    uint32_t *w = slot;
    w[0] = tag;
    w[1] = 7;
    return GP_OK;
}

static void prep_workers(void) {
    gp_config c;
    base(&c);
    c.prep_workers = 3;
    c.prep = prep_fn;
    reset();
    gp_pipeline *p = gpt_create(&c);
    static uint32_t src[1000];
    for (int i = 0; i < 1000; i++) {
        src[i] = (uint32_t)i;
        GPT_RC(gp_pipeline_submit_prep(p, &src[i], sizeof src[i], 0, done, (void *)(intptr_t)i),
               GP_OK);
    }
    GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_EQ(ncallbacks(), 1000);
    for (int i = 0; i < 1000; i++) {
        GPT_EQ(T.count[i], 1);
        GPT_EQ(T.order[i], i);
        GPT_EQ(T.status[i], i == 77 ? GP_EINVAL : i == 78 ? GP_EPREP : GP_OK);
    }
}

/* ---- infer and abandon ---------------------------------------------------------------- */

static void infer_and_abandon(void) {
    gp_config c;
    base(&c);
    reset();
    gp_pipeline *p = gpt_create(&c);
    uint32_t in[WORDS] = {5, 6}, out[WORDS];
    GPT_RC(gp_pipeline_infer(p, in, sizeof in, out, sizeof out), GP_OK);
    GPT_EQ(out[0], gpt_word(5));
    GPT_EQ(out[1], gpt_word(6));
    gp_reservation r;
    GPT_RC(gp_pipeline_reserve(p, &r), GP_OK);
    GPT_RC(submit(p, 1), GP_OK); /* behind the open reservation */
    GPT_RC(gp_pipeline_abandon(p, &r), GP_OK);
    GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_EQ(st.submitted, 2); /* infer + item 1; the abandoned slot is not counted */
    GPT_EQ(st.completed, 2);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_EQ(ncallbacks(), 1);
    GPT_EQ(T.status[1], GP_OK);
}

int main(int argc, char **argv) {
    backend = gpt_backend(argc, argv);
    printf("full ring, fail:\n");
    full_ring(GP_FULL_FAIL);
    printf("full ring, block:\n");
    full_ring(GP_FULL_BLOCK);
    printf("destroy(drain) with items in every stage:\n");
    destroy_every_stage(GP_DESTROY_DRAIN);
    printf("destroy(cancel) with items in every stage:\n");
    destroy_every_stage(GP_DESTROY_CANCEL);
    printf("shutdown under load:\n");
    destroy_under_load(GP_DESTROY_DRAIN);
    destroy_under_load(GP_DESTROY_CANCEL);
    printf("compute fails for one batch:\n");
    compute_fails();
    printf("prep workers:\n");
    prep_workers();
    printf("infer and abandon:\n");
    infer_and_abandon();
    printf("lifecycle: ok on %s\n", gp_backend_name(backend));
    return 0;
}
