/*
 * gp_batch_fail_item (gpupipe.h): a compute fails single items of its batch and the rest of the
 * batch completes as usual, on every backend (argv[1]: host | cuda). Items are marked by their
 * submit sequence number: seq % 5 == 2 fails with GP_EINVAL (then GP_EIO, which must not
 * replace it), seq % 7 == 3 with 42 (not a GP_E* code: GP_ECOMPUTE). On the host backend the
 * marks come from a second thread of the compute. Every other item gets its transformed output;
 * a failed one no output. The pipeline's last error names the last batch's failures: their
 * count (reset for each batch) and the first. The calls that must be refused are. On the host
 * backend also: an abandoned reservation's bytes, which ride in a batch with no caller, are
 * not failed nor counted (GP_ECANCELED).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "gpt.h"

enum { WORDS = 8, ITEMS = 600, PRODUCERS = 3 };

static int want_status(uint64_t seq) {
    if (seq % 5 == 2) return GP_EINVAL;
    if (seq % 7 == 3) return GP_ECOMPUTE;
    return GP_OK;
}

static void fail_marked(const gp_batch *b) {
    for (size_t k = 0; k < b->n; k++) {
        uint64_t seq = b->first_seq + k;
        if (seq % 5 == 2) {
            GPT_RC(gp_batch_fail_item(b, k, GP_EINVAL), GP_OK);
            GPT_RC(gp_batch_fail_item(b, k, GP_EIO), GP_EBUSY); /* the first failure stays */
        } else if (seq % 7 == 3) {
            GPT_RC(gp_batch_fail_item(b, k, 42), GP_OK);
        }
    }
}

static void *fail_thread(void *arg) {
    fail_marked(arg);
    return NULL;
}

static _Atomic int refused_ok;

static int compute(void *user, const gp_batch *b) {
    (void)user;
    /* Refused: NULL, past the batch, a copy of the batch (not the pipeline's). */
    gp_batch copy = *b;
    if (gp_batch_fail_item(NULL, 0, GP_EINVAL) == GP_EINVAL &&
        gp_batch_fail_item(b, b->n, GP_EINVAL) == GP_EINVAL &&
        gp_batch_fail_item(&copy, 0, GP_EINVAL) == GP_EINVAL)
        atomic_fetch_add(&refused_ok, 1);
    int rc = gpt_transform(NULL, b);
    if (b->backend == GP_BACKEND_HOST) { /* from another of the compute's threads */
        pthread_t t;
        GPT_CHECK(pthread_create(&t, NULL, fail_thread, (void *)b) == 0);
        GPT_CHECK(pthread_join(t, NULL) == 0);
    } else {
        fail_marked(b);
    }
    if (b->n && b->first_seq % 5 == 2)
        gp_batch_set_error(b, "seq %llu is marked", (unsigned long long)b->first_seq);
    return rc;
}

/* The batches as the trace saw them (poller thread, dispatch order). */
static struct {
    uint64_t first[ITEMS];
    size_t n[ITEMS];
    _Atomic size_t count;
} T;

static void on_batch(void *user, const gp_batch_trace *t) {
    (void)user;
    size_t i = atomic_load(&T.count);
    GPT_CHECK(i < ITEMS);
    T.first[i] = t->first_seq;
    T.n[i] = t->n;
    atomic_store(&T.count, i + 1);
}

static struct {
    uint32_t in[ITEMS][WORDS];
    uint32_t out[ITEMS][WORDS];
    _Atomic int calls[ITEMS], status[ITEMS], bytes[ITEMS];
    _Atomic uint64_t next;
    gp_pipeline *p;
} R;

static void done(void *user, int status, const void *out, size_t bytes) {
    size_t i = (size_t)(uintptr_t)user;
    atomic_fetch_add(&R.calls[i], 1);
    atomic_store(&R.status[i], status);
    atomic_store(&R.bytes[i], (int)bytes);
    GPT_CHECK((status == GP_OK) == (out != NULL));
    if (out) memcpy(R.out[i], out, bytes);
}

/* One producer at a time keeps seq == i: items are submitted in index order under a lock. */
static pthread_mutex_t submit_mu = PTHREAD_MUTEX_INITIALIZER;

static void *produce(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&submit_mu);
        uint64_t i = atomic_fetch_add(&R.next, 1);
        if (i >= ITEMS) {
            pthread_mutex_unlock(&submit_mu);
            return NULL;
        }
        GPT_RC(gp_pipeline_submit(R.p, R.in[i], sizeof R.in[i], done, (void *)(uintptr_t)i), GP_OK);
        pthread_mutex_unlock(&submit_mu);
    }
}

/* Host: the item whose first word is ABANDONED is failed if it can be; an abandoned
   reservation with those bytes cannot (GP_ECANCELED), a committed item can. */
#define ABANDONED 0xABAD0000u
static _Atomic int abandon_rc[2]; /* calls that returned GP_ECANCELED, GP_OK */

static int compute_abandon(void *user, const gp_batch *b) {
    (void)user;
    int rc = gpt_transform(NULL, b);
    const uint32_t *in = b->in;
    for (size_t k = 0; k < b->n; k++) {
        if (in[k * WORDS] != ABANDONED) continue;
        int frc = gp_batch_fail_item(b, k, GP_EINVAL);
        GPT_CHECK(frc == GP_ECANCELED || frc == GP_OK);
        atomic_fetch_add(&abandon_rc[frc == GP_OK], 1);
    }
    return rc;
}

/* Host: a pipeline whose items wait for one batch, which the drain's flush closes; R.calls
   cleared. */
static gp_pipeline *one_batch(gp_compute_fn fn) {
    gp_config c;
    gpt_config(&c, GP_BACKEND_HOST);
    c.item_in_bytes = c.item_out_bytes = sizeof R.in[0];
    c.max_batch = 16;
    c.max_delay_us = 60 * 1000 * 1000;
    c.compute = fn;
    memset(&R.calls, 0, sizeof R.calls);
    return gpt_create(&c);
}

static void abandoned_bytes(void) {
    gp_pipeline *p = one_batch(compute_abandon);
    uint32_t marked[WORDS] = {ABANDONED};
    gp_reservation r;
    GPT_RC(gp_pipeline_submit(p, R.in[0], sizeof R.in[0], done, (void *)0), GP_OK);
    GPT_RC(gp_pipeline_reserve(p, &r), GP_OK);
    memcpy(r.data, marked, sizeof marked);
    GPT_RC(gp_pipeline_abandon(p, &r), GP_OK);
    GPT_RC(gp_pipeline_submit(p, marked, sizeof marked, done, (void *)2), GP_OK);
    GPT_RC(gp_pipeline_drain(p, -1), GP_OK);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    char err[512] = "";
    GPT_RC(gp_pipeline_last_error(p, err, sizeof err), GP_EINVAL);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_EQ(st.batches, 1);
    GPT_EQ(atomic_load(&abandon_rc[0]), 1);
    GPT_EQ(atomic_load(&abandon_rc[1]), 1);
    GPT_EQ(atomic_load(&R.calls[0]), 1);
    GPT_EQ(atomic_load(&R.calls[1]), 0);
    GPT_EQ(atomic_load(&R.calls[2]), 1);
    GPT_RC(atomic_load(&R.status[0]), GP_OK);
    GPT_RC(atomic_load(&R.status[2]), GP_EINVAL);
    GPT_EQ(st.failed, 1);
    GPT_CHECK(strstr(err, "1 item of the batch of 3 items at seq 0 failed alone (the first: item "
                          "2, seq 2, with this code)") != NULL);
    GPT_CHECK(strstr(err, "GP_EINVAL") == NULL); /* the code is the return value (gpupipe.h) */
    printf("host: an abandoned reservation's bytes in the batch are not failed (GP_ECANCELED) "
           "nor counted: %s\n",
           err);
}

/* Host: a canceled item inside a span rides in the batch; failing it answers GP_EBUSY (it has
   its status, the cancel) and counts nothing; its callback says GP_ECANCELED. */
#define CANCELED 0xCA0CE1EDu
static _Atomic int canceled_rc = 99;

static int compute_canceled(void *user, const gp_batch *b) {
    (void)user;
    int rc = gpt_transform(NULL, b);
    const uint32_t *in = b->in;
    for (size_t k = 0; k < b->n; k++)
        if (in[k * WORDS] == CANCELED) atomic_store(&canceled_rc, gp_batch_fail_item(b, k, 9));
    return rc;
}

static void canceled_bytes(void) {
    gp_pipeline *p = one_batch(compute_canceled);
    uint32_t marked[WORDS] = {CANCELED};
    gp_submit_args a;
    gp_submit_args_init(&a);
    a.input_bytes = sizeof R.in[0];
    a.done = done;
    uint64_t seq[3];
    for (uintptr_t i = 0; i < 3; i++) {
        a.input = i == 1 ? (const void *)marked : (const void *)R.in[i];
        a.user = (void *)i;
        GPT_RC(gp_pipeline_submit_ex(p, &a, &seq[i]), GP_OK);
    }
    GPT_RC(gp_pipeline_cancel(p, seq[1]), GP_OK); /* held for the delay: not taken yet */
    GPT_RC(gp_pipeline_drain(p, -1), GP_OK);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(p, &st), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_EQ(st.batches, 1);
    GPT_RC(atomic_load(&canceled_rc), GP_EBUSY);
    GPT_RC(atomic_load(&R.status[0]), GP_OK);
    GPT_RC(atomic_load(&R.status[1]), GP_ECANCELED);
    GPT_RC(atomic_load(&R.status[2]), GP_OK);
    GPT_EQ(st.failed, 0);
    GPT_EQ(st.canceled, 1);
    printf("host: a canceled item riding in its batch: gp_batch_fail_item -> GP_EBUSY, its "
           "callback GP_ECANCELED, nothing counted as failed\n");
}

int main(int argc, char **argv) {
    gp_backend backend = gpt_backend(argc, argv);
    for (size_t i = 0; i < ITEMS; i++)
        for (int w = 0; w < WORDS; w++)
            R.in[i][w] = (uint32_t)(i * 131 + (size_t)w * 7 + 1);
    gp_config c;
    gpt_config(&c, backend);
    c.item_in_bytes = c.item_out_bytes = sizeof R.in[0];
    c.max_batch = 16;
    c.max_delay_us = 200;
    c.compute = compute;
    c.completion_workers = 2;
    c.on_batch = on_batch;
    R.p = gpt_create(&c);
    pthread_t th[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++)
        GPT_CHECK(pthread_create(&th[i], NULL, produce, NULL) == 0);
    for (int i = 0; i < PRODUCERS; i++)
        GPT_CHECK(pthread_join(th[i], NULL) == 0);
    GPT_RC(gp_pipeline_drain(R.p, -1), GP_OK);
    gp_stats st = {.struct_size = sizeof st};
    GPT_RC(gp_pipeline_stats(R.p, &st), GP_OK);
    char err[512] = "";
    int last = gp_pipeline_last_error(R.p, err, sizeof err);
    GPT_RC(gp_pipeline_destroy(R.p, GP_DESTROY_DRAIN), GP_OK);

    size_t ok = 0, failed = 0;
    for (size_t i = 0; i < ITEMS; i++) {
        GPT_EQ(atomic_load(&R.calls[i]), 1);
        int want = want_status(i);
        GPT_RC(atomic_load(&R.status[i]), want);
        if (want != GP_OK) {
            GPT_EQ(atomic_load(&R.bytes[i]), 0);
            failed++;
            continue;
        }
        GPT_EQ(atomic_load(&R.bytes[i]), (int)sizeof R.out[i]);
        for (int w = 0; w < WORDS; w++)
            GPT_EQ(R.out[i][w], gpt_word(R.in[i][w]));
        ok++;
    }
    GPT_EQ(st.completed_ok, ok);
    GPT_EQ(st.failed, failed);
    GPT_CHECK(st.batches < ITEMS); /* failed items shared batches with good ones */
    GPT_CHECK(atomic_load(&refused_ok) > 0);
    /* The last error is the last batch with failures: its own count and first failed item. */
    char want[256] = "";
    int want_code = GP_OK;
    for (size_t b = 0; b < atomic_load(&T.count); b++) {
        size_t nf = 0, first = 0;
        for (size_t k = 0; k < T.n[b]; k++)
            if (want_status(T.first[b] + k) != GP_OK && nf++ == 0) first = k;
        if (!nf) continue;
        snprintf(want, sizeof want,
                 "%zu item%s of the batch of %zu items at seq %llu failed alone (the first: item "
                 "%zu, seq %llu, with this code)",
                 nf, nf == 1 ? "" : "s", T.n[b], (unsigned long long)T.first[b], first,
                 (unsigned long long)(T.first[b] + first));
        want_code = want_status(T.first[b] + first);
    }
    GPT_RC(last, want_code);
    GPT_CHECK(want[0] && strstr(err, want) != NULL);
    printf("%s: %zu items in %llu batches: %zu ok, %zu failed alone (GP_EINVAL / GP_ECOMPUTE as "
           "given), their batchmates right; last error: %s\n",
           gp_backend_name(backend), (size_t)ITEMS, (unsigned long long)st.batches, ok, failed,
           err);
    if (backend == GP_BACKEND_HOST) abandoned_bytes();
    if (backend == GP_BACKEND_HOST) canceled_bytes();
    return 0;
}
