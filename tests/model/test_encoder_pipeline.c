/*
 * A BERT-style encoder (BertModel naming: embeddings, 2 post-LN layers, mean pooling, l2norm)
 * as a pipeline's compute, on every backend: token-id items of 1..MAXT tokens (the position
 * table's limit) submitted from several threads, packed into batches under a token budget.
 * Each item's embedding must equal the item run alone through the host layers
 * (gp_model_run_host_packed): bit for bit on the host backend (each item attends only to
 * itself), within 1e-4 on CUDA (fp32). On every backend an item with a bad id fails alone
 * (GP_EINVAL, a message naming the item, the token and the id) while its batchmates complete
 * right, and the pipeline goes on.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "mt.h"

#define C 64
#define HEADS 4
#define FF 128
#define VOCAB 1000
#define MAXT 96 /* rows of the position table: the model's token limit */
#define N 240
#define PRODUCERS 3

static gp_backend backend;
static char names[64][64];
static int n_names;

static const char *nm(const char *fmt, int l) {
    GPT_CHECK(n_names < 64);
    snprintf(names[n_names], sizeof names[0], fmt, l);
    return names[n_names++];
}

static size_t len_of(size_t k) {
    static const size_t edge[] = {1, 2, 7, 63, 64, 65, MAXT};
    return k < sizeof edge / sizeof edge[0] ? edge[k] : 1 + (k * 7919) % MAXT;
}

static struct {
    int32_t *ids;  /* all items' ids, packed */
    uint64_t *off; /* byte offsets, N + 1 */
    float *want;   /* N * C: each item alone, host layers */
    float *got;
    _Atomic int calls[N], status[N];
    _Atomic int bad;
    gp_pipeline *p;
    _Atomic size_t next;
} D;

static void done(void *user, int status, const void *out, size_t bytes) {
    size_t k = (size_t)(uintptr_t)user;
    atomic_fetch_add(&D.calls[k], 1);
    atomic_store(&D.status[k], status);
    if (status != GP_OK || bytes != C * sizeof(float)) {
        atomic_fetch_add(&D.bad, 1);
        return;
    }
    memcpy(D.got + k * C, out, bytes);
}

static gp_compute_fn inner;
static int copy_compute(void *user, const gp_batch *b) {
    gp_batch copy = *b;
    return inner(user, &copy);
}

/* Item k of the data set, its callback told k. */
static void submit_item(size_t k) {
    GPT_RC(gp_pipeline_submit(D.p, (const char *)D.ids + D.off[k], D.off[k + 1] - D.off[k], done,
                              (void *)(uintptr_t)k),
           GP_OK);
}

static void *produce(void *arg) {
    (void)arg;
    for (;;) {
        size_t k = atomic_fetch_add(&D.next, 1);
        if (k >= N) break;
        submit_item(k);
    }
    return NULL;
}

static char spec[4096];

static void build(mt *t) {
    const double s = 1.0 / sqrt((double)C), sf = 1.0 / sqrt((double)FF);
    mt_add(t, "embeddings.word_embeddings.weight", 2, (uint64_t[]){VOCAB, C}, -1, 1);
    mt_add(t, "embeddings.position_embeddings.weight", 2, (uint64_t[]){MAXT, C}, -1, 1);
    mt_add(t, "embeddings.token_type_embeddings.weight", 2, (uint64_t[]){2, C}, -1, 1);
    mt_add(t, "embeddings.LayerNorm.weight", 1, (uint64_t[]){C}, 0.8, 1.2);
    mt_add(t, "embeddings.LayerNorm.bias", 1, (uint64_t[]){C}, -0.1, 0.1);
    size_t o = (size_t)snprintf(spec, sizeof spec,
                                "input i32 *\nembedding embeddings\n"
                                "layernorm embeddings.LayerNorm eps=1e-12\n");
    for (int l = 0; l < 2; l++) {
        static const char *const proj[] = {"query", "key", "value"};
        for (int k = 0; k < 3; k++) {
            char f[96];
            snprintf(f, sizeof f, "encoder.layer.%%d.attention.self.%s.weight", proj[k]);
            mt_add(t, nm(f, l), 2, (uint64_t[]){C, C}, -s, s);
            snprintf(f, sizeof f, "encoder.layer.%%d.attention.self.%s.bias", proj[k]);
            mt_add(t, nm(f, l), 1, (uint64_t[]){C}, -0.1, 0.1);
        }
        mt_add(t, nm("encoder.layer.%d.attention.output.dense.weight", l), 2, (uint64_t[]){C, C},
               -s, s);
        mt_add(t, nm("encoder.layer.%d.attention.output.dense.bias", l), 1, (uint64_t[]){C}, -0.1,
               0.1);
        mt_add(t, nm("encoder.layer.%d.attention.output.LayerNorm.weight", l), 1, (uint64_t[]){C},
               0.8, 1.2);
        mt_add(t, nm("encoder.layer.%d.attention.output.LayerNorm.bias", l), 1, (uint64_t[]){C},
               -0.1, 0.1);
        mt_add(t, nm("encoder.layer.%d.intermediate.dense.weight", l), 2, (uint64_t[]){FF, C}, -s,
               s);
        mt_add(t, nm("encoder.layer.%d.intermediate.dense.bias", l), 1, (uint64_t[]){FF}, -s, s);
        mt_add(t, nm("encoder.layer.%d.output.dense.weight", l), 2, (uint64_t[]){C, FF}, -sf, sf);
        mt_add(t, nm("encoder.layer.%d.output.dense.bias", l), 1, (uint64_t[]){C}, -sf, sf);
        mt_add(t, nm("encoder.layer.%d.output.LayerNorm.weight", l), 1, (uint64_t[]){C}, 0.8, 1.2);
        mt_add(t, nm("encoder.layer.%d.output.LayerNorm.bias", l), 1, (uint64_t[]){C}, -0.1, 0.1);
        o += (size_t)snprintf(spec + o, sizeof spec - o,
                              "save a%d\nattention encoder.layer.%d.attention heads=%d\nadd a%d\n"
                              "layernorm encoder.layer.%d.attention.output.LayerNorm eps=1e-12\n"
                              "save f%d\nlinear encoder.layer.%d.intermediate.dense\ngelu\n"
                              "linear encoder.layer.%d.output.dense\nadd f%d\n"
                              "layernorm encoder.layer.%d.output.LayerNorm eps=1e-12\n",
                              l, l, HEADS, l, l, l, l, l, l, l);
    }
    snprintf(spec + o, sizeof spec - o, "pool mean\nl2norm\n");
}

int main(int argc, char **argv) {
    backend = gpt_backend(argc, argv);
    mt t = {.rng = 77};
    build(&t);
    gp_model *m;
    char err[512];
    GPT_RC(mt_load(&t, spec, &m, err, sizeof err), GP_OK);
    GPT_EQ(gp_model_input_bytes(m), MAXT * sizeof(int32_t));

    size_t total = 0;
    for (size_t k = 0; k < N; k++)
        total += len_of(k);
    D.ids = malloc(total * sizeof *D.ids);
    D.off = malloc((N + 1) * sizeof *D.off);
    D.want = malloc(N * C * sizeof *D.want);
    D.got = calloc(N * C, sizeof *D.got);
    GPT_CHECK(D.ids && D.off && D.want && D.got);
    for (size_t i = 0; i < total; i++)
        D.ids[i] = (int32_t)(mt_uniform(&t) * VOCAB);
    D.off[0] = 0;
    for (size_t k = 0; k < N; k++) {
        D.off[k + 1] = D.off[k] + len_of(k) * sizeof(int32_t);
        GPT_RC(gp_model_run_host_packed(m, 1, (const char *)D.ids + D.off[k],
                                        (uint64_t[]){0, D.off[k + 1] - D.off[k]}, D.want + k * C,
                                        err, sizeof err),
               GP_OK);
    }

    gp_config c;
    gpt_config(&c, backend);
    GPT_RC(gp_model_configure(m, &c), GP_OK);
    GPT_EQ(c.item_in_bytes, 0);
    GPT_EQ(c.max_item_in_bytes, MAXT * sizeof(int32_t)); /* the position table's limit */
    c.max_batch = 16;
    c.max_batch_bytes = 300 * sizeof(int32_t); /* a token budget: batches of many lengths */
    D.p = gpt_create(&c);
    pthread_t th[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++)
        GPT_CHECK(pthread_create(&th[i], NULL, produce, NULL) == 0);
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(th[i], NULL);
    GPT_RC(gp_pipeline_drain(D.p, -1), GP_OK);
    for (size_t k = 0; k < N; k++)
        GPT_EQ(atomic_load(&D.calls[k]), 1);
    GPT_EQ(atomic_load(&D.bad), 0);
    gp_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    GPT_RC(gp_pipeline_stats(D.p, &st), GP_OK);

    double num = 0, den = 0;
    size_t differ = 0;
    for (size_t i = 0; i < N * C; i++) {
        num = fmax(num, fabs((double)D.got[i] - D.want[i]));
        den = fmax(den, fabs((double)D.want[i]));
        differ += D.got[i] != D.want[i];
    }
    double e = num / den, tol = backend == GP_BACKEND_HOST ? 0.0 : 1e-4;
    printf("%s pipeline: %d items of 1..%d token ids in %llu batches (mean %.1f items): max rel. "
           "error vs each item alone %.2e (limit %g), %zu values differ\n",
           gp_backend_name(backend), N, MAXT, (unsigned long long)st.batches,
           st.batches ? (double)st.batch_items / (double)st.batches : 0.0, e, tol, differ);
    GPT_CHECK(e <= tol);
    GPT_CHECK(st.batches < N); /* items were packed together */

    GPT_RC(gp_pipeline_destroy(D.p, GP_DESTROY_DRAIN), GP_OK);

    /* An item with a bad id between two good ones, in one batch (a long max_delay_us: the
       drain's flush closes it): the bad one fails alone with GP_EINVAL, the item, token and id
       in the model's last error and the pipeline's; its batchmates complete right (on CUDA the
       embedding kernel's record of the token is cleared for the next batch). */
    c.max_delay_us = 60 * 1000 * 1000;
    D.p = gpt_create(&c);
    for (int k = 0; k < 3; k++)
        atomic_store(&D.calls[k], 0);
    atomic_store(&D.bad, 0);
    int32_t bad[3] = {5, VOCAB, 7};
    submit_item(1);
    GPT_RC(gp_pipeline_submit(D.p, bad, sizeof bad, done, (void *)0), GP_OK);
    submit_item(2);
    GPT_RC(gp_pipeline_drain(D.p, -1), GP_OK);
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    GPT_RC(gp_pipeline_stats(D.p, &st), GP_OK);
    GPT_EQ(st.batches, 1);
    for (int k = 0; k < 3; k++)
        GPT_EQ(atomic_load(&D.calls[k]), 1);
    GPT_RC(atomic_load(&D.status[0]), GP_EINVAL);
    GPT_RC(atomic_load(&D.status[1]), GP_OK);
    GPT_RC(atomic_load(&D.status[2]), GP_OK);
    GPT_EQ(st.failed, 1);
    GPT_EQ(st.completed_ok, 2);
    for (size_t k = 1; k < 3; k++) {
        double n2 = 0, d2 = 0;
        for (size_t i = k * C; i < (k + 1) * C; i++) {
            n2 = fmax(n2, fabs((double)D.got[i] - D.want[i]));
            d2 = fmax(d2, fabs((double)D.want[i]));
        }
        GPT_CHECK(n2 / d2 <= tol);
    }
    GPT_RC(gp_model_last_error(m, err, sizeof err), GP_EINVAL);
    GPT_CHECK(strstr(err, "item 1 of the batch: token 1 has id 1000, outside the vocabulary "
                          "0..999") != NULL);
    char perr[512] = "";
    GPT_RC(gp_pipeline_last_error(D.p, perr, sizeof perr), GP_EINVAL);
    GPT_CHECK(strstr(perr, "1 item of the batch of 3 items") != NULL);
    GPT_CHECK(strstr(perr, "token 1 has id 1000") != NULL);
    printf("a bad id fails its item alone, its 2 batchmates right: '%s'\n", perr);
    /* The next batch, good, is not failed by the last one's record. */
    submit_item(1);
    GPT_RC(gp_pipeline_drain(D.p, -1), GP_OK);
    GPT_EQ(atomic_load(&D.calls[1]), 2);
    GPT_RC(atomic_load(&D.status[1]), GP_OK);

    /* An abandoned reservation's bytes (bad ids) ride in the batch with no caller: not failed,
       not counted, not named; the bad item after it is. */
    for (int k = 0; k < 3; k++)
        atomic_store(&D.calls[k], 0);
    gp_reservation rv;
    submit_item(1);
    GPT_RC(gp_pipeline_reserve_ex(D.p, sizeof bad, 0, &rv), GP_OK);
    int32_t worse[3] = {VOCAB + 5, VOCAB + 6, -1};
    memcpy(rv.data, worse, sizeof worse);
    GPT_RC(gp_pipeline_abandon(D.p, &rv), GP_OK);
    GPT_RC(gp_pipeline_submit(D.p, bad, sizeof bad, done, (void *)0), GP_OK);
    GPT_RC(gp_pipeline_drain(D.p, -1), GP_OK);
    GPT_EQ(atomic_load(&D.calls[1]), 1);
    GPT_EQ(atomic_load(&D.calls[0]), 1);
    GPT_RC(atomic_load(&D.status[1]), GP_OK);
    GPT_RC(atomic_load(&D.status[0]), GP_EINVAL);
    GPT_RC(gp_model_last_error(m, err, sizeof err), GP_EINVAL);
    /* CUDA records one bad token, here maybe the abandoned bytes': then the item alone. */
    GPT_CHECK(strstr(err, backend == GP_BACKEND_HOST ? "item 2 of the batch: token 1 has id 1000"
                                                     : "item 2 of the batch: ") != NULL);
    GPT_RC(gp_pipeline_last_error(D.p, perr, sizeof perr), GP_EINVAL);
    GPT_CHECK(strstr(perr, "1 item of the batch of 3 items") != NULL);
    GPT_CHECK(strstr(perr, "(the first: item 2,") != NULL);
    printf("an abandoned reservation's bad ids are no one's: '%s'\n", err);
    GPT_RC(gp_pipeline_destroy(D.p, GP_DESTROY_DRAIN), GP_OK);

    if (backend == GP_BACKEND_HOST) {
        /* A wrapper that hands the model's compute a copy of the batch: the item cannot fail
           alone there (gp_batch_fail_item refuses a copy), so the batch fails whole, where the
           bad item's NaN output was delivered as GP_OK. */
        inner = c.compute;
        c.compute = copy_compute;
        D.p = gpt_create(&c);
        for (int k = 0; k < 3; k++)
            atomic_store(&D.calls[k], 0);
        submit_item(1);
        GPT_RC(gp_pipeline_submit(D.p, bad, sizeof bad, done, (void *)0), GP_OK);
        GPT_RC(gp_pipeline_drain(D.p, -1), GP_OK);
        GPT_EQ(atomic_load(&D.calls[0]), 1);
        GPT_EQ(atomic_load(&D.calls[1]), 1);
        GPT_RC(atomic_load(&D.status[0]), GP_ECOMPUTE);
        GPT_RC(atomic_load(&D.status[1]), GP_ECOMPUTE);
        GPT_RC(gp_pipeline_destroy(D.p, GP_DESTROY_DRAIN), GP_OK);
        printf("a wrapper's copy of the batch: the batch fails whole\n");
    }
    free(D.ids), free(D.off), free(D.want), free(D.got);
    gp_model_free(m);
    mt_free(&t);
    return 0;
}
