/*
 * pipeline-bench: the core's hand-off cost on the host backend, against a mutex +
 * condition-variable queue doing the same hand-off, and 4 KiB ingestion against
 * single-thread memcpy bandwidth — all in one run, medians of several repetitions.
 *
 *   pipeline-bench [--items N] [--reps R]
 *
 * Pipeline: producers gp_pipeline_submit() items into the ring; the batcher forms batches;
 * the host backend copies each batch ring -> slot buffer (its "H2D"), runs a no-op compute,
 * copies slot buffer -> output ring ("D2H"); a completion worker runs the callbacks.
 * Mutex queue: producers lock, wait for space, copy the item in, signal; one consumer locks,
 * copies up to max_batch items out to a batch buffer, unlocks, runs the same no-op compute,
 * and calls the callbacks. Measured twice: taking up to max_batch items per lock (a batching
 * queue, the strong baseline) and one item per lock (the textbook queue).
 */
#include <gpupipe/gpupipe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_BATCH 256
#define CAPACITY 4096
#define OUT_BYTES 16

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static _Atomic uint64_t completed;

static int noop(void *user, const gp_batch *b) {
    return GP_OK;
}

static void done(void *user, int status, const void *out, size_t bytes) {
    if (status != GP_OK) abort(); /* a benchmark with failed items measures nothing */
    atomic_fetch_add_explicit(&completed, 1, memory_order_relaxed);
}

typedef struct run {
    size_t item;
    uint64_t per_producer;
    gp_pipeline *p;
    struct mq *q;
} run;

/* ---- pipeline ------------------------------------------------------------------------- */

static void *pipe_producer(void *arg) {
    run *r = arg;
    unsigned char *buf = calloc(1, r->item);
    for (uint64_t i = 0; i < r->per_producer; i++) {
        memcpy(buf, &i, sizeof i);
        if (gp_pipeline_submit(r->p, buf, r->item, done, NULL) != GP_OK) abort();
    }
    free(buf);
    return NULL;
}

static double pipeline_items_per_s(size_t item, int producers, uint64_t total) {
    gp_config c;
    gp_config_init(&c);
    c.backend = GP_BACKEND_HOST;
    c.item_in_bytes = item;
    c.item_out_bytes = OUT_BYTES;
    c.max_batch = MAX_BATCH;
    c.capacity = CAPACITY;
    c.compute = noop;
    gp_pipeline *p;
    char err[256];
    if (gp_pipeline_create(&c, &p, err, sizeof err) != GP_OK) {
        fprintf(stderr, "create: %s\n", err);
        exit(1);
    }
    run r = {.item = item, .per_producer = total / (uint64_t)producers, .p = p};
    atomic_store(&completed, 0);
    pthread_t th[8];
    double t0 = now_s();
    for (int i = 0; i < producers; i++)
        pthread_create(&th[i], NULL, pipe_producer, &r);
    for (int i = 0; i < producers; i++)
        pthread_join(th[i], NULL);
    gp_pipeline_drain(p, -1);
    double dt = now_s() - t0;
    uint64_t n = atomic_load(&completed);
    gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
    if (n != r.per_producer * (uint64_t)producers) abort();
    return (double)n / dt;
}

/* ---- mutex + condition variable queue ------------------------------------------------- */

typedef struct mq {
    pthread_mutex_t mu;
    pthread_cond_t not_full, not_empty;
    unsigned char *slots;
    gp_done_fn *cbs;
    size_t item;
    uint64_t head, tail;
    size_t take; /* items the consumer takes per lock: MAX_BATCH, or 1 (the textbook queue) */
    int stop;
} mq;

static void *mq_producer(void *arg) {
    run *r = arg;
    mq *q = r->q;
    unsigned char *buf = calloc(1, r->item);
    for (uint64_t i = 0; i < r->per_producer; i++) {
        memcpy(buf, &i, sizeof i);
        pthread_mutex_lock(&q->mu);
        while (q->tail - q->head == CAPACITY)
            pthread_cond_wait(&q->not_full, &q->mu);
        memcpy(q->slots + (q->tail % CAPACITY) * q->item, buf, q->item);
        q->cbs[q->tail % CAPACITY] = done;
        q->tail++;
        pthread_cond_signal(&q->not_empty);
        pthread_mutex_unlock(&q->mu);
    }
    free(buf);
    return NULL;
}

static void *mq_consumer(void *arg) {
    mq *q = arg;
    unsigned char *batch_in = malloc(MAX_BATCH * q->item);
    unsigned char *batch_out = calloc(MAX_BATCH, OUT_BYTES);
    gp_done_fn cbs[MAX_BATCH];
    gp_batch b = {.in = batch_in, .out = batch_out, .in_bytes = q->item, .out_bytes = OUT_BYTES};
    for (;;) {
        pthread_mutex_lock(&q->mu);
        while (q->head == q->tail && !q->stop)
            pthread_cond_wait(&q->not_empty, &q->mu);
        if (q->head == q->tail) {
            pthread_mutex_unlock(&q->mu);
            break;
        }
        size_t n = 0;
        while (n < q->take && q->head < q->tail) {
            memcpy(batch_in + n * q->item, q->slots + (q->head % CAPACITY) * q->item, q->item);
            cbs[n++] = q->cbs[q->head % CAPACITY];
            q->head++;
        }
        pthread_cond_broadcast(&q->not_full);
        pthread_mutex_unlock(&q->mu);
        b.n = n;
        noop(NULL, &b);
        for (size_t i = 0; i < n; i++)
            cbs[i](NULL, GP_OK, batch_out + i * OUT_BYTES, OUT_BYTES);
    }
    free(batch_in);
    free(batch_out);
    return NULL;
}

static double mutex_items_per_s(size_t item, int producers, uint64_t total, size_t take) {
    mq q = {.item = item, .take = take};
    pthread_mutex_init(&q.mu, NULL);
    pthread_cond_init(&q.not_full, NULL);
    pthread_cond_init(&q.not_empty, NULL);
    q.slots = malloc(CAPACITY * item);
    q.cbs = malloc(CAPACITY * sizeof *q.cbs);
    run r = {.item = item, .per_producer = total / (uint64_t)producers, .q = &q};
    atomic_store(&completed, 0);
    pthread_t th[8], cons;
    double t0 = now_s();
    pthread_create(&cons, NULL, mq_consumer, &q);
    for (int i = 0; i < producers; i++)
        pthread_create(&th[i], NULL, mq_producer, &r);
    for (int i = 0; i < producers; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_lock(&q.mu);
    q.stop = 1;
    pthread_cond_signal(&q.not_empty);
    pthread_mutex_unlock(&q.mu);
    pthread_join(cons, NULL);
    double dt = now_s() - t0;
    if (atomic_load(&completed) != r.per_producer * (uint64_t)producers) abort();
    free(q.slots);
    free(q.cbs);
    return (double)atomic_load(&completed) / dt;
}

/* ---- memcpy bandwidth ----------------------------------------------------------------- */

static double memcpy_bytes_per_s(size_t item, uint64_t total) {
    unsigned char *src = calloc(1, item), *ring = malloc(CAPACITY * item);
    memset(ring, 1, CAPACITY * item);
    double t0 = now_s();
    for (uint64_t i = 0; i < total; i++) {
        src[0] = (unsigned char)i;
        memcpy(ring + (i % CAPACITY) * item, src, item);
    }
    double dt = now_s() - t0;
    volatile unsigned char sink = ring[(total / 2 % CAPACITY) * item];
    (void)sink;
    free(src);
    free(ring);
    return (double)total * (double)item / dt;
}

int main(int argc, char **argv) {
    uint64_t items = 2000000;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--items") && i + 1 < argc)
            items = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--items N] [--reps R]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > 50 || items < 1000) {
        fprintf(stderr, "--reps must be 1..50 and --items >= 1000\n");
        return 2;
    }
    printf("gpupipe %s pipeline-bench: host backend, no-op compute, max_batch %d, ring %d, "
           "%llu items per run, median of %d runs\n\n",
           gp_version(), MAX_BATCH, CAPACITY, (unsigned long long)items, reps);
    printf("%-6s %-9s %14s %16s %8s %16s %8s\n", "item", "producers", "pipeline it/s",
           "mutex-q batch/s", "ratio", "mutex-q one/s", "ratio");
    static const size_t sizes[] = {64, 4096};
    static const int prods[] = {1, 2, 4};
    double v[50], w[50], x[50];
    double pipe4k = 0;
    for (int s = 0; s < 2; s++) {
        uint64_t n = sizes[s] == 4096 ? items / 4 : items;
        for (int k = 0; k < 3; k++) {
            for (int r = 0; r < reps; r++) { /* interleaved, so drift hits all three alike */
                v[r] = pipeline_items_per_s(sizes[s], prods[k], n);
                w[r] = mutex_items_per_s(sizes[s], prods[k], n, MAX_BATCH);
                x[r] = mutex_items_per_s(sizes[s], prods[k], n, 1);
            }
            double pm = median(v, reps), mb = median(w, reps), m1 = median(x, reps);
            if (sizes[s] == 4096 && pm > pipe4k) pipe4k = pm;
            printf("%-6zu %-9d %14.0f %16.0f %7.1fx %16.0f %7.1fx\n", sizes[s], prods[k], pm, mb,
                   pm / mb, m1, pm / m1);
        }
    }
    for (int r = 0; r < reps; r++)
        v[r] = memcpy_bytes_per_s(4096, items / 4);
    double mc = median(v, reps);
    printf("\n4 KiB ingestion: pipeline %.2f GB/s (best producer count), single-thread memcpy "
           "%.2f GB/s: %.0f%%\n",
           pipe4k * 4096 / 1e9, mc / 1e9, 100.0 * pipe4k * 4096 / mc);
    return 0;
}
