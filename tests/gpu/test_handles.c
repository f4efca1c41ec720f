/*
 * gpupipe/cuda.h on a real device: the slot's stream, cuBLAS handle (bound to the stream,
 * with a workspace), cuBLASLt handle and workspace, cuDNN handle, device id, checked in
 * compute_setup and used by the compute (out = 2 * in through cublasSscal), with
 *   eager          graphs off: every batch eager, the reason says so;
 *   graphs         every batch a graph replay, padded up to its bucket; at create the compute
 *                  ran twice per slot and bucket at the bucket's size, eagerly (warm-up) and
 *                  then under capture, in that order (gpupipe/cuda.h);
 *   uncapturable   graphs on, but the compute synchronizes its stream (illegal under
 *                  capture): every bucket falls back to eager, with the reason in stats;
 *   dnn_in_capture graphs on, setup never calls gp_cuda_cudnn and the compute first does under
 *                  capture: NULL there, so every bucket runs eager (cuda.h), and the batches'
 *                  calls, outside a capture, get the handle.
 * Every compute call reports its padding (n of capacity items): batches count, calls at create
 * do not.
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "gpupipe/cuda.h"
#include "gpu_util.h"

enum { FLOATS = 48, MAX_BATCH = 32, N = 2000 };

enum { MAX_SLOTS = 8, MAX_CALLS = 64 };

typedef struct hctx {
    int uncapturable, dnn_in_capture;
    _Atomic int dnn_bad; /* dnn_in_capture: a handle under capture, or none for a batch */
    _Atomic int setups, bad_setup, no_cudnn;
    /* Calls per slot while the pipeline is created (created == 0): 'w' eager, 'c' under
       capture, '?' the query failed; and the batch size each call saw. */
    _Atomic int created;
    char seq[MAX_SLOTS][MAX_CALLS + 1];
    size_t seq_n[MAX_SLOTS][MAX_CALLS];
    int calls[MAX_SLOTS];
    /* Host time in the compute's calls for batches (after create): stats.launch_ns holds it. */
    _Atomic uint64_t compute_ns;
} hctx;

static int setup(void *user, const gp_batch *b) {
    hctx *h = user;
    cudaStream_t st = gp_cuda_stream(b), bound = NULL;
    int cur = -1, bad = 0;
    size_t ws = 0;
    bad |= st == NULL || (void *)st != b->stream;
    bad |= gp_cuda_device(b) != b->device;
    bad |= cudaGetDevice(&cur) != cudaSuccess || cur != b->device;
    bad |= gp_cuda_cublas(b) == NULL;
    bad |= cublasGetStream(gp_cuda_cublas(b), &bound) != CUBLAS_STATUS_SUCCESS || bound != st;
    bad |= gp_cuda_cublaslt(b) == NULL;
    bad |= gp_cuda_workspace(b, &ws) == NULL || ws < (4u << 20);
#if defined(GP_HAVE_CUDNN)
    /* NULL is allowed where cuDNN cannot be loaded, with the reason in stats.backend_note
       (checked in main); a handle must be bound to the slot's stream. */
    cudaStream_t dnn_st = NULL;
    cudnnHandle_t dnn = h->dnn_in_capture ? NULL : gp_cuda_cudnn(b);
    if (h->dnn_in_capture)
        ;
    else if (!dnn)
        atomic_fetch_add(&h->no_cudnn, 1);
    else
        bad |= cudnnGetStream(dnn, &dnn_st) != CUDNN_STATUS_SUCCESS || dnn_st != st;
#endif
    if (bad) fprintf(stderr, "slot %d: a cuda.h accessor is wrong\n", b->slot);
    atomic_fetch_add(&h->setups, 1);
    atomic_fetch_or(&h->bad_setup, bad);
    return GP_OK;
}

static int scale2(void *user, const gp_batch *b) {
    hctx *h = user;
    cudaStream_t st = gp_cuda_stream(b);
    size_t floats = b->n * b->in_bytes / sizeof(float);
    const float two = 2.0f;
    uint64_t t0 = gp_now_ns();
    if (!atomic_load(&h->created) && b->slot >= 0 && b->slot < MAX_SLOTS) {
        /* create's calls run on the creating thread, one slot after another */
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        int k = h->calls[b->slot]++;
        if (k < MAX_CALLS) {
            h->seq[b->slot][k] = cudaStreamIsCapturing(st, &cs) != cudaSuccess ? '?'
                                 : cs == cudaStreamCaptureStatusNone           ? 'w'
                                                                               : 'c';
            h->seq_n[b->slot][k] = b->n;
        }
    }
    if (gp_batch_report_padding(b, b->n, b->capacity) != GP_OK) return 3;
#if defined(GP_HAVE_CUDNN)
    if (h->dnn_in_capture) { /* not in create's warm-ups: the first call is the capture's */
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(st, &cs) != cudaSuccess) return 4;
        if (cs != cudaStreamCaptureStatusNone)
            atomic_fetch_or(&h->dnn_bad, gp_cuda_cudnn(b) != NULL);
        else if (atomic_load(&h->created))
            atomic_fetch_or(&h->dnn_bad, gp_cuda_cudnn(b) == NULL);
    }
#endif
    if (h->uncapturable && cudaStreamSynchronize(st) != cudaSuccess)
        return 7; /* under capture: illegal, so the bucket stays eager */
    if (cudaMemcpyAsync(b->out, b->in, floats * sizeof(float), cudaMemcpyDeviceToDevice, st) !=
        cudaSuccess)
        return 1;
    if (cublasSscal(gp_cuda_cublas(b), (int)floats, &two, b->out, 1) != CUBLAS_STATUS_SUCCESS)
        return 2;
    if (atomic_load(&h->created)) atomic_fetch_add(&h->compute_ns, gp_now_ns() - t0);
    return GP_OK;
}

typedef struct fitem {
    uint64_t index;
    _Atomic int calls, ok;
} fitem;
static fitem items[N];

static float in_value(uint64_t i, size_t k) {
    return (float)((i * 31 + k) % 1000) * 0.25f - 100.0f;
}

static void done(void *user, int status, const void *out, size_t bytes) {
    fitem *it = user;
    int ok = status == GP_OK && bytes == FLOATS * sizeof(float);
    for (size_t k = 0; ok && k < FLOATS; k++)
        ok = ((const float *)out)[k] == 2.0f * in_value(it->index, k);
    atomic_store(&it->ok, ok);
    atomic_fetch_add(&it->calls, 1);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "eager";
    hctx h = {.uncapturable = strcmp(mode, "uncapturable") == 0,
              .dnn_in_capture = strcmp(mode, "dnn_in_capture") == 0};
#if !defined(GP_HAVE_CUDNN)
    if (h.dnn_in_capture) {
        printf("SKIP: dnn_in_capture needs a build with cuDNN\n");
        return GPT_SKIP;
    }
#endif
    gp_config c;
    gpt_config(&c, GP_BACKEND_CUDA);
    c.item_in_bytes = c.item_out_bytes = FLOATS * sizeof(float);
    c.max_batch = MAX_BATCH;
    c.inflight = 2;
    c.cuda_graphs = strcmp(mode, "eager") != 0;
    c.compute = scale2;
    c.compute_setup = setup;
    c.compute_user = &h;
    gp_pipeline *p = gpt_create(&c);
    atomic_store(&h.created, 1);
    GPT_EQ(atomic_load(&h.setups), c.inflight);
    GPT_EQ(atomic_load(&h.bad_setup), 0);
    gp_stats s0 = gpu_stats(p);
    if (atomic_load(&h.no_cudnn)) { /* not this test's failure, but say it loudly */
        printf("NOTE: gp_cuda_cudnn() returned NULL in %d of %d setups: %s\n",
               atomic_load(&h.no_cudnn), c.inflight, s0.backend_note);
        GPT_CHECK(strstr(s0.backend_note, "cuDNN unavailable") != NULL);
    }
    GPT_EQ(s0.pad_useful, 0); /* create's calls are not batches */
    GPT_EQ(s0.pad_total, 0);
    /* The pipeline's buckets: the powers of two below MAX_BATCH, then MAX_BATCH. */
    size_t buckets[8];
    int nb = 0;
    for (size_t v = 1; v < MAX_BATCH; v <<= 1)
        buckets[nb++] = v;
    buckets[nb++] = MAX_BATCH;
    for (int sl = 0; sl < c.inflight; sl++) {
        if (!c.cuda_graphs) {
            GPT_EQ(h.calls[sl], 0);
            continue;
        }
        /* warm-up then capture, per bucket, at the bucket's size; a capture that fails
           (uncapturable) still happened under capture */
        GPT_EQ(h.calls[sl], 2 * nb);
        for (int k = 0; k < 2 * nb; k++) {
            GPT_EQ(h.seq[sl][k], k % 2 == 0 ? 'w' : 'c');
            GPT_EQ(h.seq_n[sl][k], buckets[k / 2]);
        }
    }

    uint64_t i = 0;
    unsigned seed = 7;
    float buf[FLOATS];
    while (i < N) {
        seed = seed * 1103515245u + 12345u;
        uint64_t burst = 1 + (seed >> 16) % MAX_BATCH;
        for (uint64_t k = 0; k < burst && i < N; k++, i++) {
            items[i].index = i;
            for (size_t w = 0; w < FLOATS; w++)
                buf[w] = in_value(i, w);
            GPT_RC(gp_pipeline_submit(p, buf, sizeof buf, done, &items[i]), GP_OK);
        }
        gpu_drain(p); /* one burst, one or a few batches: many sizes */
    }
    for (uint64_t k = 0; k < N; k++) {
        GPT_EQ(atomic_load(&items[k].calls), 1);
        GPT_EQ(atomic_load(&items[k].ok), 1);
    }
    gp_stats s = gpu_stats(p);
    printf("%s: %llu batches, graph replays %llu, eager %llu, reason: %s\n", mode,
           (unsigned long long)s.batches, (unsigned long long)s.graph_replays,
           (unsigned long long)s.graph_eager, s.graph_eager_reason);
    if (strcmp(mode, "graphs") == 0) {
        GPT_EQ(s.graph_replays, s.batches);
        GPT_EQ(s.graph_eager, 0);
        GPT_EQ(s.pad_total, 0); /* replays do not call the compute */
    } else {
        GPT_EQ(s.pad_useful, N); /* every eager batch reported n of capacity */
        GPT_EQ(s.pad_total, s.batches * MAX_BATCH);
        GPT_EQ(s.graph_replays, 0);
        GPT_EQ(s.graph_eager, s.batches);
        GPT_CHECK(strstr(s.graph_eager_reason,
                         h.uncapturable     ? "slot"
                         : h.dnn_in_capture ? "gp_cuda_cudnn() was first called under capture"
                                            : "cuda_graphs is 0"));
        GPT_EQ(atomic_load(&h.dnn_bad), 0);
    }
    /* launch_ns: the part of enqueue_ns inside the backend's launch, which runs the compute
       (eager) or replays its graph. */
    printf("enqueue %.1f us per batch, of which launch %.1f us (the compute's own calls %.1f us)\n",
           (double)s.enqueue_ns / (double)s.batches / 1e3,
           (double)s.launch_ns / (double)s.batches / 1e3,
           (double)atomic_load(&h.compute_ns) / (double)s.batches / 1e3);
    GPT_CHECK(s.launch_ns > 0 && s.launch_ns <= s.enqueue_ns);
    GPT_CHECK(s.launch_ns >= atomic_load(&h.compute_ns));
    if (strcmp(mode, "graphs") != 0) GPT_CHECK(atomic_load(&h.compute_ns) > 0);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    return 0;
}
