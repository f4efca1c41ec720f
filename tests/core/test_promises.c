/*
 * gpupipe.h promises an audit of the installed library found broken (2026-11-26), each held
 * here on the host backend: drain with a timeout too long for the clock, cancel's answers for a
 * done item, open reservations in `submitted` and drain, a compute_setup's GP_EBUSY, teardown
 * without setup and its bucket 0, destroy waiting for a submit inside its own log callback, and
 * a mark of a destroyed pipeline. And calls that would wait for themselves, made from the
 * pipeline's own threads (callbacks, trace, prep, a host compute): refused, not a hang.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "gpt.h"

enum { ITEM = 16 };

static _Atomic int g_sleep_us; /* the compute's delay per batch */

static int copy_compute(void *user, const gp_batch *b) {
    (void)user;
    int us = atomic_load(&g_sleep_us);
    if (us > 0) {
        struct timespec t = {us / 1000000, (long)(us % 1000000) * 1000};
        nanosleep(&t, NULL);
    }
    memcpy(b->out, b->in, b->n * ITEM);
    return 0;
}

typedef struct done_log {
    _Atomic int calls;
    _Atomic int last_status;
} done_log;

static void on_done(void *user, int status, const void *out, size_t bytes) {
    (void)out, (void)bytes;
    done_log *d = user;
    atomic_store(&d->last_status, status);
    atomic_fetch_add(&d->calls, 1);
}

static void base(gp_config *c) {
    gp_config_init(c);
    c->backend = GP_BACKEND_HOST;
    c->item_in_bytes = c->item_out_bytes = ITEM;
    c->max_batch = 4;
    c->compute = copy_compute;
}

static gp_pipeline *make(gp_config *c) {
    gp_pipeline *p = NULL;
    char err[256];
    int rc = gp_pipeline_create(c, &p, err, sizeof err);
    if (rc != GP_OK) fprintf(stderr, "create: %s: %s\n", gp_err_name(rc), err);
    GPT_RC(rc, GP_OK);
    return p;
}

/* drain(INT64_MAX): "< 0, or too long for the clock: wait forever", not an instant timeout. */
static void drain_forever(void) {
    gp_config c;
    base(&c);
    gp_pipeline *p = make(&c);
    unsigned char in[ITEM] = {1};
    done_log d = {0};
    atomic_store(&g_sleep_us, 50000);
    GPT_RC(gp_pipeline_submit(p, in, ITEM, on_done, &d), GP_OK);
    GPT_RC(gp_pipeline_drain(p, INT64_MAX), GP_OK);
    GPT_EQ(atomic_load(&d.calls), 1);
    GPT_RC(gp_pipeline_submit(p, in, ITEM, on_done, &d), GP_OK);
    GPT_RC(gp_pipeline_drain(p, INT64_MAX / 1000 + 1), GP_OK); /* microseconds past 2^63 ns */
    GPT_EQ(atomic_load(&d.calls), 2);
    atomic_store(&g_sleep_us, 0);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    printf("ok  drain with INT64_MAX waits for the item\n");
}

/* A canceled item stays canceled (GP_OK again) after its callback; an abandoned reservation
   is no accepted item (GP_EINVAL) after later items are done; a done item is GP_EBUSY. */
static void cancel_done(void) {
    gp_config c;
    base(&c);
    c.max_delay_us = 200000; /* the first item waits for the timer: time to cancel it */
    gp_pipeline *p = make(&c);
    unsigned char in[ITEM] = {2};
    done_log d = {0}, d2 = {0};
    gp_submit_args a;
    gp_submit_args_init(&a);
    a.input = in;
    a.input_bytes = ITEM;
    a.done = on_done;
    a.user = &d;
    uint64_t s0, s2;
    GPT_RC(gp_pipeline_submit_ex(p, &a, &s0), GP_OK);
    GPT_RC(gp_pipeline_cancel(p, s0), GP_OK);
    GPT_RC(gp_pipeline_cancel(p, s0), GP_OK);
    gp_reservation r;
    GPT_RC(gp_pipeline_reserve(p, &r), GP_OK);
    uint64_t s1 = r.seq;
    GPT_RC(gp_pipeline_abandon(p, &r), GP_OK);
    GPT_RC(gp_pipeline_cancel(p, s1), GP_EINVAL);
    a.user = &d2;
    GPT_RC(gp_pipeline_submit_ex(p, &a, &s2), GP_OK);
    GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK);
    GPT_EQ(atomic_load(&d.calls), 1);
    GPT_RC(atomic_load(&d.last_status), GP_ECANCELED);
    GPT_RC(atomic_load(&d2.last_status), GP_OK);
    GPT_RC(gp_pipeline_cancel(p, s0), GP_OK);     /* still: a second cancel of it */
    GPT_RC(gp_pipeline_cancel(p, s1), GP_EINVAL); /* still: abandoned */
    GPT_RC(gp_pipeline_cancel(p, s2), GP_EBUSY);  /* done with its output */
    GPT_EQ(atomic_load(&d.calls), 1);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_EQ(st.cancels, 1);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    printf("ok  cancel after the callback: canceled GP_OK, abandoned GP_EINVAL, done GP_EBUSY\n");

    /* Once a later item claimed the slot, GP_EBUSY, also while that item is an open
       reservation (its descriptor still holds the old item's state until commit). */
    c.max_batch = 2;
    c.capacity = 2;
    p = make(&c);
    a.user = &d;
    GPT_RC(gp_pipeline_submit_ex(p, &a, &s0), GP_OK);
    GPT_RC(gp_pipeline_cancel(p, s0), GP_OK);
    GPT_RC(gp_pipeline_reserve(p, &r), GP_OK);
    s1 = r.seq;
    GPT_RC(gp_pipeline_abandon(p, &r), GP_OK);
    GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK);
    gp_reservation r2, r3;
    GPT_RC(gp_pipeline_reserve(p, &r2), GP_OK);
    GPT_RC(gp_pipeline_reserve(p, &r3), GP_OK);
    GPT_EQ(r2.seq, s0 + 2);
    GPT_EQ(r3.seq, s1 + 2);
    GPT_RC(gp_pipeline_cancel(p, s0), GP_EBUSY); /* was canceled: GP_OK before the reuse */
    GPT_RC(gp_pipeline_cancel(p, s1), GP_EBUSY); /* was abandoned: GP_EINVAL before */
    GPT_RC(gp_pipeline_abandon(p, &r2), GP_OK);
    GPT_RC(gp_pipeline_abandon(p, &r3), GP_OK);
    GPT_RC(gp_pipeline_cancel(p, s0), GP_EBUSY);
    GPT_RC(gp_pipeline_cancel(p, s1), GP_EBUSY);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    printf("ok  cancel of an item whose slot an open reservation holds: GP_EBUSY\n");
}

/* An open reservation is not submitted: not in stats.submitted, and drain does not wait for it
   when no accepted item comes after it. */
static void open_reservation(void) {
    gp_config c;
    base(&c);
    gp_pipeline *p = make(&c);
    unsigned char in[ITEM] = {3};
    done_log d = {0};
    GPT_RC(gp_pipeline_submit(p, in, ITEM, on_done, &d), GP_OK);
    gp_reservation r;
    GPT_RC(gp_pipeline_reserve(p, &r), GP_OK);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_EQ(st.submitted, 1);
    GPT_RC(gp_pipeline_drain(p, 10 * 1000 * 1000), GP_OK);
    GPT_EQ(atomic_load(&d.calls), 1);
    /* An abandoned reservation after it is not an accepted item either: drain does not wait
       for the open one because of it (it timed out here before, and waited forever with -1). */
    gp_reservation gone;
    GPT_RC(gp_pipeline_reserve(p, &gone), GP_OK);
    GPT_RC(gp_pipeline_abandon(p, &gone), GP_OK);
    uint64_t t0 = gp_now_ns();
    GPT_RC(gp_pipeline_drain(p, 10 * 1000 * 1000), GP_OK);
    GPT_CHECK(gp_now_ns() - t0 < 5000000000ull);
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_EQ(st.submitted, 1);
    memset(r.data, 4, ITEM);
    GPT_RC(gp_pipeline_commit(p, &r, on_done, &d), GP_OK);
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_EQ(st.submitted, 2);
    GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK);
    GPT_EQ(atomic_load(&d.calls), 2);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    printf("ok  an open reservation is neither submitted nor drained for, with an abandoned "
           "one after it\n");
}

/* A call on a pipeline that fails records its own detail: the caller never reads an older,
   unrelated error (or GP_OK) for it. Each call below returned its code with the last error
   left as it was before. */
static void expect_detail(gp_pipeline *p, int rc, int want, const char *says) {
    char msg[512];
    GPT_RC(rc, want);
    GPT_RC(gp_pipeline_last_error(p, msg, sizeof msg), want);
    if (!strstr(msg, says)) fprintf(stderr, "last error '%s' does not say '%s'\n", msg, says);
    GPT_CHECK(strstr(msg, says) != NULL);
}

static void details(void) {
    gp_config c;
    base(&c);
    gp_pipeline *p = make(&c), *q = make(&c);
    unsigned char in[ITEM] = {1}, out[ITEM];
    done_log d = {0};
    expect_detail(p, gp_pipeline_submit(p, NULL, ITEM, on_done, &d), GP_EINVAL, "input is NULL");
    expect_detail(p, gp_pipeline_submit(p, in, ITEM, NULL, &d), GP_EINVAL, "done is NULL");
    gp_submit_args a;
    gp_submit_args_init(&a);
    a.struct_size = 3;
    expect_detail(p, gp_pipeline_submit_ex(p, &a, NULL), GP_EINVAL,
                  "gp_submit_args.struct_size: 3 not in");
    gp_submit_args_init(&a);
    a.prep_src = in;
    a.done = on_done;
    expect_detail(p, gp_pipeline_submit_ex(p, &a, NULL), GP_EINVAL, "needs prep workers");
    expect_detail(p, gp_pipeline_infer(p, in, ITEM, out, 4), GP_EINVAL,
                  "output of 4 bytes: item_out_bytes is 16");
    gp_reservation r = {0};
    expect_detail(p, gp_pipeline_commit(p, &r, on_done, &d), GP_EINVAL, "not an open reservation");
    gp_stats st = {.struct_size = 1};
    expect_detail(p, gp_pipeline_stats(p, &st), GP_EINVAL, "struct_size 1 not in");
    gp_stats_mark *m = NULL;
    GPT_RC(gp_pipeline_mark(q, &m), GP_OK);
    st.struct_size = sizeof st;
    expect_detail(p, gp_pipeline_stats_since(p, m, &st), GP_EINVAL,
                  "a mark taken on another pipeline");
    gp_stats_mark_free(m);
    FILE *ro = fopen("/dev/null", "r");
    GPT_CHECK(ro != NULL);
    expect_detail(p, gp_pipeline_report(p, ro), GP_EIO, "write error");
    fclose(ro);
    expect_detail(p, gp_pipeline_shutdown(p, (gp_destroy_mode)9), GP_EINVAL,
                  "mode 9 is not a gp_destroy_mode");
    GPT_RC(gp_pipeline_destroy(q, GP_DESTROY_DRAIN), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    printf("ok  every failing call on a pipeline leaves its own detail in the last error\n");
}

/* gp_batch_report_padding from compute_setup (b->n == 0, not a batch): accepted, not
   counted (it was: two slots' setups added 2 of 4 to a real batch's 2 of 3). */
static int padding_setup(void *user, const gp_batch *b) {
    (void)user;
    return gp_batch_report_padding(b, 1, 2);
}

static int padding_compute(void *user, const gp_batch *b) {
    GPT_RC(gp_batch_report_padding(b, 2, 3), GP_OK);
    return copy_compute(user, b);
}

static void padding_at_setup(void) {
    gp_config c;
    base(&c);
    c.inflight = 2;
    c.compute = padding_compute;
    c.compute_setup = padding_setup;
    gp_pipeline *p = make(&c);
    unsigned char in[ITEM] = {1};
    done_log d = {0};
    GPT_RC(gp_pipeline_submit(p, in, ITEM, on_done, &d), GP_OK);
    GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_EQ(st.pad_useful, 2);
    GPT_EQ(st.pad_total, 3);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    printf("ok  padding reported from compute_setup is not counted\n");
}

/* A mode that is not a gp_destroy_mode: GP_EINVAL with a detail, nothing stopped (it ran as
   DRAIN before); once shut, destroy ignores the mode as documented. */
static void bad_destroy_mode(void) {
    gp_config c;
    base(&c);
    gp_pipeline *p = make(&c);
    unsigned char in[ITEM] = {5};
    done_log d = {0};
    GPT_RC(gp_pipeline_shutdown(p, (gp_destroy_mode)5), GP_EINVAL);
    char msg[256];
    GPT_RC(gp_pipeline_last_error(p, msg, sizeof msg), GP_EINVAL);
    GPT_CHECK(strstr(msg, "mode 5 is not a gp_destroy_mode") != NULL);
    GPT_RC(gp_pipeline_destroy(p, (gp_destroy_mode)-1), GP_EINVAL);
    GPT_RC(gp_pipeline_submit(p, in, ITEM, on_done, &d), GP_OK); /* still running */
    GPT_RC(gp_pipeline_shutdown(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_EQ(atomic_load(&d.calls), 1);
    GPT_RC(gp_pipeline_destroy(p, (gp_destroy_mode)7), GP_OK); /* shut: the mode is ignored */
    printf("ok  a mode that is not a gp_destroy_mode is refused, nothing stopped\n");
}

typedef struct slots_seen {
    int setups, teardowns, bad_teardown;
    int ret; /* setup's return */
} slots_seen;

static int setup_fn(void *user, const gp_batch *b) {
    slots_seen *s = user;
    (void)b;
    s->setups++;
    return s->ret;
}

static void teardown_fn(void *user, const gp_batch *b) {
    slots_seen *s = user;
    s->teardowns++;
    if (b->n != 0 || b->bucket != 0) s->bad_teardown++;
}

static int seen_compute(void *user, const gp_batch *b) {
    return copy_compute(user, b);
}

static void setup_teardown(void) {
    /* A GP_E* code from setup is create's code, the newest included. */
    static const int codes[] = {GP_EBUSY, GP_ENOTSUP, GP_EINVAL, 7, -100};
    static const int want[] = {GP_EBUSY, GP_ENOTSUP, GP_EINVAL, GP_EDEVICE, GP_EDEVICE};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        slots_seen s = {.ret = codes[i]};
        gp_config c;
        base(&c);
        c.compute = seen_compute;
        c.compute_user = &s;
        c.compute_setup = setup_fn;
        gp_pipeline *p = NULL;
        char err[256];
        GPT_RC(gp_pipeline_create(&c, &p, err, sizeof err), want[i]);
        GPT_CHECK(p == NULL);
    }
    /* Teardown alone: once per slot, with n and bucket 0 (after batches ran). */
    for (int with_setup = 0; with_setup < 2; with_setup++) {
        slots_seen s = {0};
        gp_config c;
        base(&c);
        c.inflight = 2;
        c.compute = seen_compute;
        c.compute_user = &s;
        c.compute_setup = with_setup ? setup_fn : NULL;
        c.compute_teardown = teardown_fn;
        gp_pipeline *p = make(&c);
        unsigned char in[ITEM] = {5};
        done_log d = {0};
        for (int k = 0; k < 7; k++)
            GPT_RC(gp_pipeline_submit(p, in, ITEM, on_done, &d), GP_OK);
        GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK);
        GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
        GPT_EQ(s.setups, with_setup ? 2 : 0);
        GPT_EQ(s.teardowns, 2);
        GPT_EQ(s.bad_teardown, 0);
    }
    printf("ok  setup's GP_EBUSY fails create with it; teardown without setup, bucket 0\n");
}

/* A submit of the wrong size is in progress from its start: destroy waits while its error is
   still being logged (inside the log callback). */
typedef struct log_hold {
    _Atomic int in_log, submit_returned;
} log_hold;

static log_hold g_hold;

static void holding_log(void *user, gp_log_level level, const char *msg) {
    (void)user, (void)level;
    if (!strstr(msg, "item of")) return;
    atomic_store(&g_hold.in_log, 1);
    struct timespec t = {0, 200 * 1000 * 1000};
    nanosleep(&t, NULL);
}

static void *wrong_submit(void *arg) {
    gp_pipeline *p = arg;
    unsigned char in[ITEM + 1] = {0};
    done_log d = {0};
    int rc = gp_pipeline_submit(p, in, ITEM + 1, on_done, &d);
    GPT_CHECK(rc == GP_EINVAL || rc == GP_ESHUTDOWN);
    atomic_store(&g_hold.submit_returned, 1);
    return NULL;
}

static void destroy_waits(void) {
    gp_config c;
    base(&c);
    c.log = holding_log;
    gp_pipeline *p = make(&c);
    pthread_t t;
    GPT_EQ(pthread_create(&t, NULL, wrong_submit, p), 0);
    while (!atomic_load(&g_hold.in_log)) {
        struct timespec w = {0, 1000 * 1000};
        nanosleep(&w, NULL);
    }
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_EQ(atomic_load(&g_hold.submit_returned), 1); /* destroy waited for it */
    GPT_EQ(pthread_join(t, NULL), 0);
    printf("ok  destroy waits for a submit still logging its size error\n");
}

/* A mark is of its pipeline only: a new pipeline (at the same address or not) refuses it. */
static void stale_mark(void) {
    gp_config c;
    base(&c);
    int reused = 0;
    for (int k = 0; k < 4; k++) {
        gp_pipeline *p1 = make(&c);
        gp_stats_mark *m = NULL;
        GPT_RC(gp_pipeline_mark(p1, &m), GP_OK);
        GPT_RC(gp_pipeline_destroy(p1, GP_DESTROY_DRAIN), GP_OK);
        gp_pipeline *p2 = make(&c);
        reused += p2 == p1;
        gp_stats st = {.struct_size = sizeof st};
        GPT_RC(gp_pipeline_stats_since(p2, m, &st), GP_EINVAL);
        gp_stats_mark_free(m);
        GPT_RC(gp_pipeline_destroy(p2, GP_DESTROY_DRAIN), GP_OK);
    }
    printf("ok  a destroyed pipeline's mark is refused (address reused %d of 4 times)\n", reused);
}

/* stats.cuda_graphs says what runs: the host backend captures nothing, whatever the config. */
static void graphs_echo(void) {
    gp_config c;
    base(&c);
    c.cuda_graphs = 1;
    gp_pipeline *p = make(&c);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_EQ(st.backend, GP_BACKEND_HOST);
    GPT_EQ(st.cuda_graphs, 0);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    printf("ok  stats.cuda_graphs is 0 on the host backend\n");
}

/* After shutdown the submit family answers GP_ESHUTDOWN, a wrong size included. */
static void after_shutdown(void) {
    gp_config c;
    base(&c);
    gp_pipeline *p = make(&c);
    GPT_RC(gp_pipeline_shutdown(p, GP_DESTROY_DRAIN), GP_OK);
    unsigned char in[ITEM + 1] = {0};
    done_log d = {0};
    GPT_RC(gp_pipeline_submit(p, in, ITEM, on_done, &d), GP_ESHUTDOWN);
    GPT_RC(gp_pipeline_submit(p, in, ITEM + 1, on_done, &d), GP_ESHUTDOWN);
    gp_reservation r;
    GPT_RC(gp_pipeline_reserve(p, &r), GP_ESHUTDOWN);
    /* Whatever the arguments ("from the call on"), and nothing recorded. */
    GPT_RC(gp_pipeline_submit(p, NULL, ITEM, on_done, &d), GP_ESHUTDOWN);
    GPT_RC(gp_pipeline_submit(p, in, ITEM, NULL, &d), GP_ESHUTDOWN);
    GPT_RC(gp_pipeline_submit_ex(p, NULL, NULL), GP_ESHUTDOWN);
    GPT_RC(gp_pipeline_reserve(p, NULL), GP_ESHUTDOWN);
    unsigned char out[ITEM];
    GPT_RC(gp_pipeline_infer(p, in, ITEM, out, ITEM + 3), GP_ESHUTDOWN);
    /* commit / abandon are not refused by a shutdown (it waits for open reservations): what
       is not an open reservation is GP_EINVAL; a second shutdown does nothing, any mode. */
    gp_reservation none = {0};
    GPT_RC(gp_pipeline_commit(p, NULL, on_done, &d), GP_EINVAL);
    GPT_RC(gp_pipeline_commit(p, &none, on_done, &d), GP_EINVAL);
    GPT_RC(gp_pipeline_abandon(p, &none), GP_EINVAL);
    GPT_RC(gp_pipeline_shutdown(p, (gp_destroy_mode)9), GP_OK);
    GPT_RC(gp_pipeline_last_error(p, NULL, 0), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_EQ(atomic_load(&d.calls), 0);
    printf("ok  after shutdown: GP_ESHUTDOWN, also for a wrong size or a NULL argument\n");
}

/* ---- calls that would wait for themselves, from the pipeline's own threads ------------------ */

typedef struct reentry {
    gp_pipeline *p;
    _Atomic int drain_rc, infer_rc, shutdown_rc, destroy_rc, trace_drain_rc, prep_drain_rc;
    _Atomic int compute_drain_rc;
    _Atomic int ran;
    struct tries { /* blocking submits from one of the pipeline's threads */
        _Atomic int submitted, eagain, others;
        done_log log;
    } from_done, from_prep;
} reentry;

/* n blocking submits into t: GP_EAGAIN once the ring is full, not a wait forever. */
static void try_submits(gp_pipeline *p, int n, struct tries *t) {
    unsigned char in[ITEM] = {0};
    for (int i = 0; i < n; i++) {
        int rc = gp_pipeline_submit(p, in, ITEM, on_done, &t->log);
        if (rc == GP_OK)
            atomic_fetch_add(&t->submitted, 1);
        else if (rc == GP_EAGAIN)
            atomic_fetch_add(&t->eagain, 1);
        else
            atomic_fetch_add(&t->others, 1);
    }
}

static void reentrant_done(void *user, int status, const void *out, size_t bytes) {
    (void)status, (void)out, (void)bytes;
    reentry *r = user;
    if (atomic_fetch_add(&r->ran, 1) != 0) return; /* the first callback tries everything */
    unsigned char in[ITEM] = {0}, o[ITEM];
    atomic_store(&r->drain_rc, gp_pipeline_drain(r->p, -1));
    atomic_store(&r->infer_rc, gp_pipeline_infer(r->p, in, ITEM, o, ITEM));
    atomic_store(&r->shutdown_rc, gp_pipeline_shutdown(r->p, GP_DESTROY_DRAIN));
    atomic_store(&r->destroy_rc, gp_pipeline_destroy(r->p, GP_DESTROY_DRAIN));
    try_submits(r->p, 64, &r->from_done);
}

static void reentrant_trace(void *user, const gp_batch_trace *t) {
    (void)t;
    reentry *r = user;
    atomic_store(&r->trace_drain_rc, gp_pipeline_drain(r->p, 1000 * 1000));
}

/* A host compute runs on the backend's stream thread, which is the pipeline's own too. */
static int reentrant_compute(void *user, const gp_batch *b) {
    reentry *r = user;
    atomic_store(&r->compute_drain_rc, gp_pipeline_drain(r->p, 1000 * 1000));
    memcpy(b->out, b->in, b->n * ITEM);
    return 0;
}

static int reentrant_prep(void *user, const void *src, size_t n, void *slot, size_t slot_bytes) {
    reentry *r = user;
    atomic_store(&r->prep_drain_rc, gp_pipeline_drain(r->p, 1000 * 1000));
    /* From the prep worker: its own item holds back every later one, so a wait for room would
       wait for itself. */
    try_submits(r->p, 16, &r->from_prep);
    memcpy(slot, src, n < slot_bytes ? n : slot_bytes);
    return GP_OK;
}

/* A thread a callback starts while shutdown joins the pipeline's threads may get a joined
   thread's id: it is not the pipeline's own and must not be refused. */
typedef struct reuse {
    gp_pipeline *p;
    pthread_mutex_t mu; /* prep_id: written by the prep worker, read by the helper */
    pthread_t prep_id;
    _Atomic int shutting, first, helper_rc, same_id;
} reuse;

static int reuse_prep(void *user, const void *src, size_t n, void *slot, size_t slot_bytes) {
    reuse *u = user;
    pthread_mutex_lock(&u->mu); /* one prep worker */
    u->prep_id = pthread_self();
    pthread_mutex_unlock(&u->mu);
    memcpy(slot, src, n < slot_bytes ? n : slot_bytes);
    return GP_OK;
}

static void *reuse_helper(void *arg) {
    reuse *u = arg;
    pthread_mutex_lock(&u->mu);
    atomic_store(&u->same_id, pthread_equal(pthread_self(), u->prep_id));
    pthread_mutex_unlock(&u->mu);
    atomic_store(&u->helper_rc, gp_pipeline_drain(u->p, 0));
    return NULL;
}

static void reuse_done(void *user, int status, const void *out, size_t bytes) {
    (void)status, (void)out, (void)bytes;
    reuse *u = user;
    if (atomic_exchange(&u->first, 1)) return;
    while (!atomic_load(&u->shutting))
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    nanosleep(&(struct timespec){0, 100000000}, NULL); /* the batcher and prep worker join */
    pthread_t t;
    GPT_CHECK(pthread_create(&t, NULL, reuse_helper, u) == 0);
    GPT_CHECK(pthread_join(t, NULL) == 0);
}

static void *reuse_shutdown(void *arg) {
    reuse *u = arg;
    atomic_store(&u->shutting, 1);
    GPT_RC(gp_pipeline_shutdown(u->p, GP_DESTROY_DRAIN), GP_OK);
    return NULL;
}

static void reused_ids(void) {
    static reuse u;
    memset(&u, 0, sizeof u);
    GPT_CHECK(pthread_mutex_init(&u.mu, NULL) == 0);
    atomic_store(&u.helper_rc, 1);
    gp_config c;
    base(&c);
    c.max_batch = 1;
    c.prep = reuse_prep;
    c.prep_user = &u;
    c.prep_workers = 1;
    u.p = make(&c);
    unsigned char in[ITEM] = {0};
    for (int i = 0; i < 4; i++)
        GPT_RC(gp_pipeline_submit_prep(u.p, in, ITEM, 0, reuse_done, &u), GP_OK);
    pthread_t t;
    GPT_CHECK(pthread_create(&t, NULL, reuse_shutdown, &u) == 0);
    GPT_CHECK(pthread_join(t, NULL) == 0);
    int rc = atomic_load(&u.helper_rc);
    printf("a thread started by a callback during shutdown (%s the joined prep worker's id): "
           "drain -> %s\n",
           atomic_load(&u.same_id) ? "with" : "without", gp_err_name(rc));
    GPT_CHECK(rc == GP_OK || rc == GP_ETIMEDOUT);
    GPT_RC(gp_pipeline_destroy(u.p, GP_DESTROY_DRAIN), GP_OK);
    pthread_mutex_destroy(&u.mu);
}

static void own_threads(void) {
    static reentry r;
    memset(&r, 0, sizeof r);
    gp_config c;
    base(&c);
    c.capacity = 8;
    c.on_batch = reentrant_trace;
    c.on_batch_user = &r;
    c.prep = reentrant_prep;
    c.prep_user = &r;
    c.prep_workers = 1;
    c.compute = reentrant_compute;
    c.compute_user = &r;
    r.p = make(&c);
    unsigned char in[ITEM] = {1};
    done_log d = {0};
    GPT_RC(gp_pipeline_submit_prep(r.p, in, ITEM, 0, on_done, &d), GP_OK);
    GPT_RC(gp_pipeline_submit(r.p, in, ITEM, reentrant_done, &r), GP_OK);
    GPT_RC(gp_pipeline_drain(r.p, 30 * 1000 * 1000), GP_OK);
    GPT_RC(atomic_load(&r.drain_rc), GP_EINVAL);
    GPT_RC(atomic_load(&r.infer_rc), GP_EINVAL);
    GPT_RC(atomic_load(&r.shutdown_rc), GP_EINVAL);
    GPT_RC(atomic_load(&r.destroy_rc), GP_EINVAL);
    GPT_RC(atomic_load(&r.trace_drain_rc), GP_EINVAL);
    GPT_RC(atomic_load(&r.prep_drain_rc), GP_EINVAL);
    GPT_RC(atomic_load(&r.compute_drain_rc), GP_EINVAL);
    GPT_EQ(atomic_load(&r.from_done.others), 0);
    GPT_CHECK(atomic_load(&r.from_done.eagain) > 0); /* 64 items into a ring of 8 */
    GPT_EQ(atomic_load(&r.from_done.submitted) + atomic_load(&r.from_done.eagain), 64);
    GPT_EQ(atomic_load(&r.from_prep.others), 0);
    GPT_CHECK(atomic_load(&r.from_prep.eagain) > 0); /* 16 items behind its own, in a ring of 8 */
    GPT_EQ(atomic_load(&r.from_prep.submitted) + atomic_load(&r.from_prep.eagain), 16);
    char err[512] = "";
    gp_pipeline_last_error(r.p, err, sizeof err);
    printf("from the pipeline's own threads (callback, trace, prep, host compute): drain, infer, "
           "shutdown, destroy -> GP_EINVAL; "
           "%d of 64 blocking submits from a callback and %d of 16 from prep -> GP_EAGAIN on the "
           "full ring (%s)\n",
           atomic_load(&r.from_done.eagain), atomic_load(&r.from_prep.eagain), err);
    GPT_CHECK(strstr(err, "would wait for itself") != NULL);
    GPT_RC(gp_pipeline_destroy(r.p, GP_DESTROY_DRAIN), GP_OK); /* still whole */
    GPT_EQ(atomic_load(&r.from_done.log.calls), atomic_load(&r.from_done.submitted));
    GPT_EQ(atomic_load(&r.from_prep.log.calls), atomic_load(&r.from_prep.submitted));
    /* From another thread after shutdown, drain is not refused (a new thread may reuse a
       joined worker's id). */
    gp_pipeline *p = make(&c);
    GPT_RC(gp_pipeline_shutdown(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_RC(gp_pipeline_drain(p, 0), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
}

/* GP_DESTROY_CANCEL: an item not yet delivered gets GP_ECANCELED (gpupipe.h), also when its
   batch, on the device as shutdown begins, then fails in the compute: the failure goes to the
   last error, the callback says canceled. */
static _Atomic int g_fail_gate, g_in_fail;

static int failing_compute(void *user, const gp_batch *b) {
    (void)user, (void)b;
    atomic_store(&g_in_fail, 1);
    while (!atomic_load(&g_fail_gate)) {
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
    return GP_ECOMPUTE;
}

static void *open_fail_gate(void *arg) {
    gp_pipeline *p = arg;
    /* Once shutdown has begun (the submit family says GP_ESHUTDOWN, whatever its arguments;
       before, NULL arguments are GP_EINVAL and submit nothing), the batch may fail. */
    struct timespec t = {0, 1000000};
    while (gp_pipeline_submit(p, NULL, 0, NULL, NULL) != GP_ESHUTDOWN)
        nanosleep(&t, NULL);
    t.tv_nsec = 50 * 1000000; /* the close comes just before the cancel mark (stop_threads) */
    nanosleep(&t, NULL);
    atomic_store(&g_fail_gate, 1);
    return NULL;
}

static void cancel_mode_failed_batch(void) {
    gp_config c;
    base(&c);
    c.compute = failing_compute;
    gp_pipeline *p = make(&c);
    unsigned char in[ITEM] = {3};
    done_log d = {0};
    GPT_RC(gp_pipeline_submit(p, in, ITEM, on_done, &d), GP_OK);
    while (!atomic_load(&g_in_fail)) {
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
    pthread_t t;
    GPT_EQ(pthread_create(&t, NULL, open_fail_gate, p), 0);
    GPT_RC(gp_pipeline_shutdown(p, GP_DESTROY_CANCEL), GP_OK);
    GPT_EQ(pthread_join(t, NULL), 0);
    GPT_EQ(atomic_load(&d.calls), 1);
    GPT_RC(atomic_load(&d.last_status), GP_ECANCELED);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_EQ(st.canceled, 1);
    GPT_EQ(st.failed, 0);
    char err[256] = "";
    GPT_RC(gp_pipeline_last_error(p, err, sizeof err), GP_ECOMPUTE);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    printf("ok  GP_DESTROY_CANCEL: a batch failing on the device during shutdown: its item "
           "GP_ECANCELED, the failure in the last error (%s)\n",
           err);
}

/* stats.submitted counts accepted items only and never falls: with reservations reserved and
   abandoned on two threads while snapshots are taken, it stays 0; then with commits beside the
   abandons, it never falls between snapshots and ends at the commits' count. (Derived from the
   ring's claims less the abandoned, it counted reservations abandoned during a snapshot: up to
   23016 with no item ever accepted, and fell in 4% of snapshots.) */
static _Atomic int abandon_stop, abandon_commit;
static _Atomic uint64_t committed;
static done_log commit_log;

static void *abandoner(void *arg) {
    gp_pipeline *p = arg;
    for (uint64_t i = 0; !atomic_load(&abandon_stop); i++) {
        gp_reservation r;
        if (gp_pipeline_reserve(p, &r) != GP_OK) continue;
        if (atomic_load(&abandon_commit) && i % 4 == 0) {
            memset(r.data, 0, r.bytes);
            GPT_RC(gp_pipeline_commit(p, &r, on_done, &commit_log), GP_OK);
            atomic_fetch_add(&committed, 1);
        } else {
            GPT_RC(gp_pipeline_abandon(p, &r), GP_OK);
        }
    }
    return NULL;
}

static void submitted_counts_accepted(void) {
    gp_config c;
    base(&c);
    gp_pipeline *p = gpt_create(&c);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        GPT_EQ(pthread_create(&th[i], NULL, abandoner, p), 0);
    gp_stats s = {.struct_size = sizeof s};
    uint64_t prev = 0, snaps = 0;
    for (double t0 = gpt_now(); gpt_now() - t0 < 0.3; snaps++) {
        GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
        if (s.submitted != 0)
            fprintf(stderr, "abandons only: submitted %llu\n", (unsigned long long)s.submitted);
        GPT_EQ(s.submitted, 0);
    }
    atomic_store(&abandon_commit, 1);
    for (double t0 = gpt_now(); gpt_now() - t0 < 0.3; snaps++) {
        GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
        GPT_CHECK(s.submitted >= prev && s.submitted >= s.completed);
        prev = s.submitted;
    }
    atomic_store(&abandon_stop, 1);
    for (int i = 0; i < 2; i++)
        GPT_EQ(pthread_join(th[i], NULL), 0);
    GPT_RC(gp_pipeline_drain(p, -1), GP_OK);
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    GPT_EQ(s.submitted, atomic_load(&committed));
    GPT_EQ(s.completed, atomic_load(&committed));
    GPT_EQ((uint64_t)atomic_load(&commit_log.calls), atomic_load(&committed));
    GPT_CHECK(atomic_load(&committed) > 0);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    printf("submitted counts accepted items: %llu snapshots, %llu committed\n",
           (unsigned long long)snaps, (unsigned long long)atomic_load(&committed));
}

int main(void) {
    submitted_counts_accepted();
    own_threads();
    reused_ids();
    drain_forever();
    cancel_done();
    cancel_mode_failed_batch();
    open_reservation();
    bad_destroy_mode();
    details();
    padding_at_setup();
    setup_teardown();
    destroy_waits();
    stale_mark();
    graphs_echo();
    after_shutdown();
    return 0;
}
