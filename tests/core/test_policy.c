/*
 * The batcher's policy, case by case, observed through the per-batch trace (size and close
 * reason of every device batch) and the item statuses: work-conserving dispatch, grow while
 * every slot is busy, max_batch, delay, preferred sizes, flush, deadlines, shutdown.
 * Slots are held busy with a gate the compute waits on.
 */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "gpt.h"

#define WORDS 2
#define MAXB 64

typedef struct seen_batch {
    size_t n;
    gp_close_reason reason;
} seen_batch;

static struct {
    pthread_mutex_t mu;
    seen_batch b[1024];
    int nb;
    int status[1024]; /* per item tag */
    int order[1024];  /* tags in callback order */
    int ncb;
} T = {.mu = PTHREAD_MUTEX_INITIALIZER};

static gp_backend backend;
static gpt_gate gate;

static void on_batch(void *user, const gp_batch_trace *t) {
    pthread_mutex_lock(&T.mu);
    T.b[T.nb++] = (seen_batch){t->n, t->reason};
    pthread_mutex_unlock(&T.mu);
}

static void done(void *user, int status, const void *out, size_t bytes) {
    int tag = (int)(intptr_t)user;
    if (status == GP_OK) {
        const uint32_t *o = out;
        GPT_EQ(o[0], gpt_word((uint32_t)tag));
    } else {
        GPT_CHECK(out == NULL && bytes == 0);
    }
    pthread_mutex_lock(&T.mu);
    T.status[tag] = status;
    T.order[T.ncb++] = tag;
    pthread_mutex_unlock(&T.mu);
}

static int callbacks(void) {
    pthread_mutex_lock(&T.mu);
    int n = T.ncb;
    pthread_mutex_unlock(&T.mu);
    return n;
}

static void wait_callbacks(int n, double max_s) {
    double t0 = gpt_now();
    while (callbacks() < n) {
        GPT_CHECK(gpt_now() - t0 < max_s);
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

static gp_pipeline *make(int inflight, uint32_t delay_us, const size_t *pref, int npref) {
    memset(T.b, 0, sizeof T.b);
    T.nb = T.ncb = 0;
    for (int i = 0; i < 1024; i++)
        T.status[i] = 1; /* "no callback yet" */
    gpt_gate_init(&gate);
    gpt_gate_open(&gate);
    gp_config c;
    gpt_config(&c, backend);
    c.item_in_bytes = c.item_out_bytes = WORDS * 4;
    c.max_batch = MAXB;
    c.inflight = inflight;
    c.max_delay_us = delay_us;
    c.compute = gpt_gate_compute;
    c.compute_user = &gate;
    c.on_batch = on_batch;
    for (int i = 0; i < npref; i++)
        c.preferred[i] = pref[i];
    c.num_preferred = npref;
    return gpt_create(&c);
}

static void submit(gp_pipeline *p, int tag, uint64_t deadline_ns) {
    uint32_t w[WORDS] = {(uint32_t)tag, 0};
    GPT_RC(gp_pipeline_submit_deadline(p, w, sizeof w, deadline_ns, done, (void *)(intptr_t)tag),
           GP_OK);
}

static void expect_batches(const seen_batch *want, int n) {
    pthread_mutex_lock(&T.mu);
    if (T.nb != n) fprintf(stderr, "got %d batches, want %d\n", T.nb, n);
    for (int i = 0; i < T.nb; i++)
        fprintf(T.nb == n ? stdout : stderr, "  batch %d: n=%zu %s\n", i, T.b[i].n,
                gp_close_reason_name(T.b[i].reason));
    GPT_EQ(T.nb, n);
    for (int i = 0; i < n; i++) {
        GPT_EQ(T.b[i].n, want[i].n);
        GPT_EQ(T.b[i].reason, want[i].reason);
    }
    pthread_mutex_unlock(&T.mu);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A free slot and no delay: one item leaves at once. */
static void slot_free(void) {
    gp_pipeline *p = make(3, 0, NULL, 0);
    submit(p, 0, 0);
    wait_callbacks(1, 10);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    expect_batches((seen_batch[]){{1, GP_CLOSE_SLOT_FREE}}, 1);
}

/* The only slot is busy: later items wait and leave as one batch when it frees. */
static void grow_while_busy(void) {
    gp_pipeline *p = make(1, 0, NULL, 0);
    gpt_gate_close(&gate);
    submit(p, 0, 0);
    gpt_gate_wait_entered(&gate, 1);
    for (int i = 1; i <= 40; i++)
        submit(p, i, 0);
    sleep_ms(20); /* a batcher that pushed out small batches would have done so by now */
    gpt_gate_open(&gate);
    wait_callbacks(41, 10);
    GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK); /* counters are bumped after the callbacks */
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_CHECK(st.saturated_ns > 0);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    expect_batches((seen_batch[]){{1, GP_CLOSE_SLOT_FREE}, {40, GP_CLOSE_SLOT_FREE}}, 2);
}

/* Growth stops at max_batch. */
static void full(void) {
    gp_pipeline *p = make(1, 0, NULL, 0);
    gpt_gate_close(&gate);
    submit(p, 0, 0);
    gpt_gate_wait_entered(&gate, 1);
    for (int i = 1; i <= 2 * MAXB + 10; i++)
        submit(p, i, 0);
    gpt_gate_open(&gate);
    wait_callbacks(2 * MAXB + 11, 10);
    GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_EQ(st.close_reasons[GP_CLOSE_FULL], 2);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    expect_batches((seen_batch[]){{1, GP_CLOSE_SLOT_FREE},
                                  {MAXB, GP_CLOSE_FULL},
                                  {MAXB, GP_CLOSE_FULL},
                                  {10, GP_CLOSE_SLOT_FREE}},
                   4);
}

/* With a delay, a small batch waits for it even though slots are free. */
static void delay(void) {
    gp_pipeline *p = make(3, 30000, NULL, 0);
    double t0 = gpt_now();
    for (int i = 0; i < 5; i++)
        submit(p, i, 0);
    double span = gpt_now() - t0; /* the submits' own time (long under TSan on a busy machine) */
    wait_callbacks(5, 10);
    double dt = gpt_now() - t0;
    GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK);
    GPT_CHECK(dt >= 0.029);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    /* The delay runs from the oldest item's submit, so every item waits at least the delay
       less the submits' span (microseconds normally: the check is then the delay itself). The
       histogram (1/16 resolution) may read up to 2 ms low at 30 ms. */
    double wait_min = (0.030 - span) * (28.0 / 30.0) * 1e9;
    GPT_CHECK(wait_min <= 0 || (double)st.queue_wait_p50 >= wait_min);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    pthread_mutex_lock(&T.mu);
    size_t items = 0;
    for (int i = 0; i < T.nb; i++) {
        GPT_EQ(T.b[i].reason, GP_CLOSE_DELAY);
        items += T.b[i].n;
    }
    pthread_mutex_unlock(&T.mu);
    GPT_EQ(items, 5);
    printf("  delay: 5 items after %.1f ms\n", dt * 1e3);
}

/* Reaching the largest preferred size sends that many without waiting for the delay. */
static void preferred(void) {
    static const size_t pref[] = {4, 8};
    gp_pipeline *p = make(3, 5000000, pref, 2);
    double t0 = gpt_now();
    for (int i = 0; i < 11; i++)
        submit(p, i, 0);
    wait_callbacks(8, 10);
    GPT_CHECK(gpt_now() - t0 < 2.0);
    sleep_ms(10);
    GPT_EQ(callbacks(), 8); /* the other 3 wait for the delay */
    GPT_RC(gp_pipeline_flush(p), GP_OK);
    wait_callbacks(11, 10);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    expect_batches((seen_batch[]){{8, GP_CLOSE_PREFERRED}, {3, GP_CLOSE_FLUSH}}, 2);
}

/* Deadlines are checked up to the H2D copy: expired at the head -> skipped; expired inside a
   span -> rides along, ETIMEDOUT, no output. Callbacks stay in submit order. */
static void deadlines(void) {
    gp_pipeline *p = make(1, 0, NULL, 0);
    gpt_gate_close(&gate);
    submit(p, 0, 0);
    gpt_gate_wait_entered(&gate, 1);
    uint64_t soon = gp_now_ns() + 1000000;
    submit(p, 1, soon);
    submit(p, 2, 0);
    submit(p, 3, soon);
    submit(p, 4, 0);
    submit(p, 5, gp_now_ns() + 60ull * 1000000000ull); /* far: delivered */
    sleep_ms(10);
    gpt_gate_open(&gate);
    wait_callbacks(6, 10);
    GPT_RC(gp_pipeline_drain(p, GPT_DRAIN_US), GP_OK);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_EQ(st.timed_out, 2);
    GPT_EQ(st.completed_ok, 4);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    static const int want[] = {GP_OK, GP_ETIMEDOUT, GP_OK, GP_ETIMEDOUT, GP_OK, GP_OK};
    for (int i = 0; i < 6; i++) {
        GPT_EQ(T.status[i], want[i]);
        GPT_EQ(T.order[i], i);
    }
    expect_batches((seen_batch[]){{1, GP_CLOSE_SLOT_FREE}, {4, GP_CLOSE_SLOT_FREE}}, 2);
}

/* Flush sends now; destroy sends the rest with reason shutdown. */
static void flush_and_shutdown(void) {
    gp_pipeline *p = make(3, 10000000, NULL, 0);
    for (int i = 0; i < 3; i++)
        submit(p, i, 0);
    GPT_RC(gp_pipeline_flush(p), GP_OK);
    wait_callbacks(3, 5);
    for (int i = 3; i < 5; i++)
        submit(p, i, 0);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    for (int i = 0; i < 5; i++)
        GPT_EQ(T.status[i], GP_OK);
    expect_batches((seen_batch[]){{3, GP_CLOSE_FLUSH}, {2, GP_CLOSE_SHUTDOWN}}, 2);
}

int main(int argc, char **argv) {
    backend = gpt_backend(argc, argv);
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"slot-free", slot_free},
                 {"grow-while-busy", grow_while_busy},
                 {"full", full},
                 {"delay", delay},
                 {"preferred", preferred},
                 {"deadlines", deadlines},
                 {"flush+shutdown", flush_and_shutdown}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        printf("%s:\n", cases[i].name);
        cases[i].fn();
        gpt_gate_destroy(&gate); /* each case made one pipeline with it and destroyed it */
    }
    printf("policy: %zu cases ok on %s\n", sizeof cases / sizeof cases[0],
           gp_backend_name(backend));
    return 0;
}
