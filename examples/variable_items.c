/*
 * variable_items: requests of any length, packed with no padding, and a client that goes away.
 *
 * A toy "token scorer": each request is a sequence of 1..256 token ids (uint32), and the answer is
 * one float score per token, so both inputs and outputs vary per request. Four producer threads
 * submit requests of random lengths with gp_pipeline_submit_ex (which returns each request's
 * sequence number); a fifth thread plays the clients that disconnect and cancels some queued
 * requests with gp_pipeline_cancel. The compute walks the packed batch through its offsets. A few
 * requests carry a token the scorer does not know: the compute fails just those
 * (gp_batch_fail_item), and their batchmates are answered as usual. At the end: every request
 * answered exactly once (scores checked), the canceled ones with GP_ECANCELED, the bad ones with
 * GP_EINVAL, and the numbers that show no padding moved: H2D bytes <= the requests' bytes (a
 * request canceled before its batch moves nothing).
 *
 * The host backend runs it anywhere; on the CUDA backend the same offsets are device arrays and
 * the compute would be a kernel (see docs/DESIGN.md §8.4).
 */
#include <gpupipe/gpupipe.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define PRODUCERS 4
#define PER_PRODUCER 5000
#define MAX_TOKENS 256
#define VOCAB 1000000u /* token ids the scorer knows: 0 .. VOCAB - 1 */

static float score(uint32_t token) { /* the "model" */
    return (float)(token % 1000) / 1000.0f;
}

/* The compute: item k's tokens are at in + in_offsets[k] .. in_offsets[k + 1]; its scores go
   to out + out_offsets[k]. Nothing in the batch is padding. A request with an unknown token
   fails alone: its client gets GP_EINVAL, the rest of the batch is scored. */
static int scorer(void *user, const gp_batch *b) {
    const unsigned char *in = b->in;
    unsigned char *out = b->out;
    for (size_t k = 0; k < b->n; k++) {
        const uint32_t *tok = (const uint32_t *)(in + b->in_offsets[k]);
        float *s = (float *)(out + b->out_offsets[k]);
        size_t n = (b->in_offsets[k + 1] - b->in_offsets[k]) / sizeof(uint32_t);
        for (size_t t = 0; t < n; t++) {
            if (tok[t] >= VOCAB) {
                gp_batch_set_error(b, "request %llu: token %zu (%u) is not in the vocabulary",
                                   (unsigned long long)(b->first_seq + k), t, tok[t]);
                gp_batch_fail_item(b, k, GP_EINVAL);
                break;
            }
            s[t] = score(tok[t]);
        }
    }
    return GP_OK;
}

typedef struct request {
    uint32_t tokens[MAX_TOKENS];
    size_t n;
    int bad;            /* carries a token outside the vocabulary */
    _Atomic int status; /* 1: no answer yet */
    _Atomic uint64_t seq;
} request;

static request reqs[PRODUCERS * PER_PRODUCER];
static _Atomic uint64_t answered, wrong, submitted_bytes;

static void on_answer(void *user, int status, const void *out, size_t bytes) {
    request *r = user;
    if (status == GP_OK) {
        const float *s = out;
        if (bytes != r->n * sizeof(float)) atomic_fetch_add(&wrong, 1);
        for (size_t t = 0; t < r->n && bytes == r->n * sizeof(float); t++)
            if (s[t] != score(r->tokens[t])) atomic_fetch_add(&wrong, 1);
    }
    if (atomic_exchange(&r->status, status) != 1) atomic_fetch_add(&wrong, 1); /* twice */
    atomic_fetch_add(&answered, 1);
}

static gp_pipeline *pipe_;
static _Atomic int producing;

static void *producer(void *arg) {
    int id = (int)(intptr_t)arg;
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
    for (int k = 0; k < PER_PRODUCER; k++) {
        request *r = &reqs[id * PER_PRODUCER + k];
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        r->n = 1 + (size_t)(x >> 33) % MAX_TOKENS;
        for (size_t t = 0; t < r->n; t++)
            r->tokens[t] = ((uint32_t)(x >> 16) + (uint32_t)t * 7919u) % VOCAB;
        r->bad = k % 101 == 50; /* a client sending garbage now and then */
        if (r->bad) r->tokens[r->n / 2] = VOCAB + 17;
        atomic_store(&r->status, 1);
        gp_submit_args a;
        gp_submit_args_init(&a);
        a.input = r->tokens;
        a.input_bytes = r->n * sizeof(uint32_t);
        a.output_bytes = r->n * sizeof(float);
        a.done = on_answer;
        a.user = r;
        uint64_t seq;
        int rc = gp_pipeline_submit_ex(pipe_, &a, &seq);
        if (rc != GP_OK) {
            fprintf(stderr, "submit: %s\n", gp_strerror(rc));
            atomic_store(&r->status, rc);
            continue;
        }
        atomic_store(&r->seq, seq + 1); /* 0: not known yet */
        atomic_fetch_add(&submitted_bytes, a.input_bytes);
    }
    atomic_fetch_sub(&producing, 1);
    return NULL;
}

/* Clients that disconnect: cancel every 7th request of producer 0, as soon as it is known. */
static _Atomic uint64_t cancel_ok, cancel_late;
static void *disconnects(void *arg) {
    for (int k = 0; k < PER_PRODUCER; k += 7) {
        request *r = &reqs[k];
        uint64_t s;
        while ((s = atomic_load(&r->seq)) == 0 && atomic_load(&producing) > 0)
            sched_yield();
        if (!s) break;
        int rc = gp_pipeline_cancel(pipe_, s - 1);
        if (rc == GP_OK)
            atomic_fetch_add(&cancel_ok, 1);
        else if (rc == GP_EBUSY) /* already on the device: the answer comes anyway */
            atomic_fetch_add(&cancel_late, 1);
        else
            fprintf(stderr, "cancel: %s\n", gp_strerror(rc));
    }
    return NULL;
}

int main(void) {
    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = GP_BACKEND_HOST;
    cfg.max_item_in_bytes = MAX_TOKENS * sizeof(uint32_t);
    cfg.max_item_out_bytes = MAX_TOKENS * sizeof(float);
    cfg.max_batch = 64;
    cfg.max_batch_bytes = 2048 * sizeof(uint32_t); /* a token budget: 2048 tokens a batch */
    cfg.compute = scorer;
    char err[256];
    int rc = gp_pipeline_create(&cfg, &pipe_, err, sizeof err);
    if (rc != GP_OK) {
        fprintf(stderr, "create: %s: %s\n", gp_err_name(rc), err);
        return 1;
    }
    pthread_t th[PRODUCERS + 1];
    atomic_store(&producing, PRODUCERS);
    for (intptr_t i = 0; i < PRODUCERS; i++)
        pthread_create(&th[i], NULL, producer, (void *)i);
    pthread_create(&th[PRODUCERS], NULL, disconnects, NULL);
    for (int i = 0; i <= PRODUCERS; i++)
        pthread_join(th[i], NULL);
    gp_pipeline_drain(pipe_, -1);
    gp_stats s;
    s.struct_size = sizeof s;
    gp_pipeline_stats(pipe_, &s);
    int last = gp_pipeline_last_error(pipe_, err, sizeof err);
    gp_pipeline_destroy(pipe_, GP_DESTROY_DRAIN);

    uint64_t ok = 0, canceled = 0, rejected = 0, other = 0;
    for (int i = 0; i < PRODUCERS * PER_PRODUCER; i++) {
        int st = atomic_load(&reqs[i].status);
        ok += st == GP_OK && !reqs[i].bad;
        canceled += st == GP_ECANCELED;
        rejected += st == GP_EINVAL && reqs[i].bad;
        other += st != GP_ECANCELED && st != (reqs[i].bad ? GP_EINVAL : GP_OK);
    }
    printf("%llu requests answered once: %llu ok, %llu canceled (cancel said ok %llu, too late "
           "%llu), %llu rejected alone for an unknown token, %llu wrong scores, %llu other\n",
           (unsigned long long)atomic_load(&answered), (unsigned long long)ok,
           (unsigned long long)canceled, (unsigned long long)atomic_load(&cancel_ok),
           (unsigned long long)atomic_load(&cancel_late), (unsigned long long)rejected,
           (unsigned long long)atomic_load(&wrong), (unsigned long long)other);
    printf("the pipeline's last error, %s: %s\n", gp_err_name(last), err);
    printf("%llu batches, mean %.1f requests, %llu closed by the token budget; H2D %llu bytes for "
           "%llu bytes of requests (no padding)\n",
           (unsigned long long)s.batches, (double)s.batch_items / (double)s.batches,
           (unsigned long long)s.close_bytes, (unsigned long long)s.h2d_bytes,
           (unsigned long long)atomic_load(&submitted_bytes));
    int good = atomic_load(&answered) == PRODUCERS * PER_PRODUCER && atomic_load(&wrong) == 0 &&
               other == 0 && rejected > 0 && canceled == atomic_load(&cancel_ok) &&
               s.h2d_bytes <= atomic_load(&submitted_bytes);
    if (!good) fprintf(stderr, "FAILED\n");
    return good ? 0 : 1;
}
