/*
 * text_embedder: sentence embeddings from a BERT-style encoder (the built-in demo "encoder",
 * or a .safetensors file given as argv[1]), served packed: several producer threads submit
 * token-id arrays of different lengths, the pipeline batches them under a token budget with no
 * padding, and each callback gets one L2-normalized embedding. Prints a few cosine
 * similarities. Runs on the GPU when one is usable, else on the host (and says so).
 *
 * The tokenizer here is a stand-in: words are hashed to ids in BERT's vocabulary range, with
 * [CLS] (101) first and [SEP] (102) last. A real service runs the model's own tokenizer
 * (WordPiece for BERT) and submits its ids the same way. The demo's weights are random, so the
 * similarities say nothing about meaning; identical inputs still give identical embeddings, and
 * this program checks that.
 *
 * Build against an installed gpupipe: cc text_embedder.c $(pkg-config --cflags --libs gpupipe)
 * -lm (sqrt: the cosine similarities).
 */
#include <gpupipe/gpupipe.h>
#include <gpupipe/model.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRODUCERS 4
#define ROUNDS 12 /* each producer submits every text this many times */
#define MAX_IDS 512
#define DIM_MAX 4096

static const char *const texts[] = {
    "the cat sat on the mat",
    "a cat was sitting on the mat",
    "stock markets fell sharply on monday",
    "gpupipe keeps the gpu busy while requests arrive from many threads",
    "the quick brown fox jumps over the lazy dog",
    "how do i reset my password",
    "i forgot my password how can i reset it",
    /* a long one: 109 tokens ([CLS], 107 words, [SEP]) */
    "long documents are split into tokens and every token attends to every other token of the "
    "same document but never to tokens of another document in the same batch because the "
    "batch is packed without padding so a short query and a long report can share one batch "
    "and neither pays for the other and the pipeline closes a batch when its token budget is "
    "reached rather than when a fixed number of requests has arrived which keeps latency low "
    "for short requests and throughput high for long ones while the producers keep submitting "
    "from their own threads without waiting for each other or for the device",
};
#define N_TEXTS (sizeof texts / sizeof texts[0])

/* Stand-in tokenizer: [CLS] words... [SEP], each word hashed (FNV-1a) into 1000..30521. */
static size_t tokenize(const char *s, int32_t *ids, size_t max) {
    size_t n = 0;
    ids[n++] = 101;
    while (*s && n + 1 < max) {
        while (*s == ' ')
            s++;
        if (!*s) break;
        uint32_t h = 2166136261u;
        while (*s && *s != ' ')
            h = (h ^ (unsigned char)*s++) * 16777619u;
        ids[n++] = (int32_t)(1000 + h % 29522);
    }
    ids[n++] = 102;
    return n;
}

typedef struct item {
    size_t text;
    float *emb; /* written by the callback */
    atomic_int status;
} item;

typedef struct shared {
    gp_pipeline *p;
    size_t dim;
    int32_t ids[N_TEXTS][MAX_IDS];
    size_t len[N_TEXTS];
    item *items; /* PRODUCERS * ROUNDS * N_TEXTS */
    atomic_ulong done, failed;
} shared;

typedef struct producer {
    shared *sh;
    int index;
    int rc;
} producer;

static shared sh;

/* Runs on a completion worker; `out` is valid only during the call. */
static void on_embedding(void *user, int status, const void *out, size_t bytes) {
    item *it = user;
    if (status == GP_OK && bytes == sh.dim * sizeof(float)) memcpy(it->emb, out, bytes);
    atomic_store(&it->status, status == GP_OK ? 1 : -1);
    atomic_fetch_add(status == GP_OK ? &sh.done : &sh.failed, 1);
}

static void *produce(void *arg) {
    producer *pr = arg;
    for (int r = 0; r < ROUNDS; r++)
        for (size_t k = 0; k < N_TEXTS; k++) {
            size_t t = (k + (size_t)pr->index) % N_TEXTS; /* producers interleave texts */
            item *it = &sh.items[((size_t)pr->index * ROUNDS + (size_t)r) * N_TEXTS + t];
            it->text = t;
            /* One item = one text's ids, any length: submit copies them into the ring. */
            pr->rc =
                gp_pipeline_submit(sh.p, sh.ids[t], sh.len[t] * sizeof(int32_t), on_embedding, it);
            if (pr->rc != GP_OK) return NULL;
        }
    return NULL;
}

static double cosine(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d += (double)a[i] * b[i];
    return d; /* both are unit vectors */
}

int main(int argc, char **argv) {
    char err[256];
    gp_model *model;
    int rc = argc > 1 ? gp_model_load(argv[1], NULL, &model, err, sizeof err)
                      : gp_model_demo("encoder", NULL, &model, err, sizeof err);
    if (rc != GP_OK) return fprintf(stderr, "model: %s: %s\n", gp_err_name(rc), err), 1;
    gp_tensor_info ii, oi;
    gp_model_input_info(model, &ii);
    gp_model_output_info(model, &oi);
    if (ii.dtype != GP_DTYPE_I32 || ii.dims[0] != -1 || oi.rank != 1 || oi.dims[0] > DIM_MAX) {
        fprintf(stderr, "model: expected i32 token ids in and one vector out\n");
        gp_model_free(model);
        return 1;
    }
    sh.dim = (size_t)oi.dims[0];
    size_t max_tokens = gp_model_input_bytes(model) / ii.bytes;
    for (size_t t = 0; t < N_TEXTS; t++)
        sh.len[t] = tokenize(texts[t], sh.ids[t], max_tokens < MAX_IDS ? max_tokens : MAX_IDS);

    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = GP_BACKEND_AUTO; /* cuda when usable, else host */
    cfg.max_batch = 64;
    gp_model_configure(model, &cfg);              /* compute; items of 1..max_tokens ids */
    cfg.max_batch_bytes = 2048 * sizeof(int32_t); /* a token budget: 2048 tokens per batch */
    gp_pipeline *p;
    if ((rc = gp_pipeline_create(&cfg, &p, err, sizeof err)) != GP_OK) {
        int named = strncmp(err, "GP_E", 4) == 0;
        fprintf(stderr, "pipeline: %s%s%s\n", named ? "" : gp_err_name(rc), named ? "" : ": ", err);
        gp_model_free(model);
        return 1;
    }
    sh.p = p;
    size_t n_items = (size_t)PRODUCERS * ROUNDS * N_TEXTS;
    sh.items = calloc(n_items, sizeof *sh.items);
    float *embs = calloc(n_items * sh.dim, sizeof *embs);
    if (!sh.items || !embs) return fprintf(stderr, "out of memory\n"), 1;
    for (size_t i = 0; i < n_items; i++)
        sh.items[i].emb = embs + i * sh.dim;

    producer pr[PRODUCERS];
    pthread_t th[PRODUCERS];
    uint64_t t0 = gp_now_ns();
    for (int i = 0; i < PRODUCERS; i++) {
        pr[i] = (producer){&sh, i, GP_OK};
        if (pthread_create(&th[i], NULL, produce, &pr[i]) != 0)
            return fprintf(stderr, "pthread_create failed\n"), 1;
    }
    int bad = 0;
    for (int i = 0; i < PRODUCERS; i++) {
        pthread_join(th[i], NULL);
        if (pr[i].rc != GP_OK) {
            fprintf(stderr, "producer %d: submit: %s\n", i, gp_err_name(pr[i].rc));
            bad = 1;
        }
    }
    gp_pipeline_drain(p, -1); /* every accepted item has had its callback */
    double secs = (double)(gp_now_ns() - t0) * 1e-9;
    size_t tokens = 0, shortest = SIZE_MAX, longest = 0;
    for (size_t t = 0; t < N_TEXTS; t++) {
        tokens += sh.len[t] * PRODUCERS * ROUNDS;
        shortest = sh.len[t] < shortest ? sh.len[t] : shortest;
        longest = sh.len[t] > longest ? sh.len[t] : longest;
    }
    gp_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    gp_pipeline_stats(p, &st);
    printf("%zu texts (%zu tokens, %zu..%zu per text) in %.3f s: %.0f texts/s, %.0f tokens/s, "
           "backend %s, %llu batches\n",
           n_items, tokens, shortest, longest, secs, (double)n_items / secs, (double)tokens / secs,
           gp_backend_name(st.backend), (unsigned long long)st.batches);

    /* Every embedding has unit length; every submission of a text gives the same vector (bit
       for bit on the host: a text's result does not depend on the batch it rode in). */
    const item *first[N_TEXTS] = {0};
    double worst = 0;
    for (size_t i = 0; i < n_items; i++) {
        const item *it = &sh.items[i];
        if (atomic_load(&it->status) != 1) continue;
        double norm = sqrt(cosine(it->emb, it->emb, sh.dim));
        if (fabs(norm - 1.0) > 1e-3) bad = 1;
        if (!first[it->text]) first[it->text] = it;
        for (size_t d = 0; d < sh.dim; d++) {
            double diff = fabs((double)it->emb[d] - first[it->text]->emb[d]);
            worst = diff > worst ? diff : worst;
        }
    }
    printf("failed: %lu; every embedding unit length: %s; same text, same vector: largest "
           "difference %.1e\n",
           atomic_load(&sh.failed), bad ? "NO" : "yes", worst);
    static const size_t pairs[][2] = {{0, 1}, {0, 2}, {5, 6}, {5, 4}, {3, 7}};
    printf("cosine similarities (random demo weights: no meaning):\n");
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const item *a = first[pairs[i][0]], *b = first[pairs[i][1]];
        if (!a || !b) continue;
        printf("  %+.4f  \"%.40s\" vs \"%.40s\"\n", cosine(a->emb, b->emb, sh.dim),
               texts[pairs[i][0]], texts[pairs[i][1]]);
    }
    printf("\n");
    gp_pipeline_report(p, stdout); /* where the time went, and what to turn */

    rc = gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
    gp_model_free(model); /* after the pipeline that uses it */
    free(embs);
    free(sh.items);
    return rc == GP_OK && !bad && atomic_load(&sh.failed) == 0 && worst < 1e-4 ? 0 : 1;
}
