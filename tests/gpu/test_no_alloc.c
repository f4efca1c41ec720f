/*
 * No cudaMalloc / cudaHostAlloc after create: the backend counts its allocations; the count
 * taken right after create must not move while thousands of items in batches of every size
 * run, with CUDA graphs off, with graphs on, and with spin-wait completion. Outputs are
 * checked, so the run is real. The device's free memory before and after is printed too
 * (other processes can move it, so it is information, not a check). Create leaves no CUDA error
 * as this thread's last error.
 */
#include <cuda_runtime_api.h>

#include "testing.h"
#include "gpu_util.h"

enum { N = 3000, WORDS = 64, MAX_BATCH = 32 };
static gpu_item items[N];

static void run(int graphs, int spin) {
    gp_config c;
    gpt_config(&c, GP_BACKEND_CUDA);
    c.item_in_bytes = c.item_out_bytes = WORDS * 4;
    c.max_batch = MAX_BATCH;
    c.inflight = 3;
    c.cuda_graphs = graphs;
    c.spin_wait = spin;
    c.compute = gpt_transform;
    memset(items, 0, sizeof items);
    gp_pipeline *p = gpt_create(&c);
    /* Create leaves no CUDA error of its own on this thread: its clock anchor polls an event,
       and a query's cudaErrorNotReady must not reach the application's cudaGetLastError(). */
    GPT_CHECK(cudaGetLastError() == cudaSuccess);
    uint64_t at_create = gp__pipeline_alloc_count(p);
    size_t free0 = 0, free1 = 0, total = 0;
    GPT_CHECK(cudaMemGetInfo(&free0, &total) == cudaSuccess);

    /* Bursts of 1..MAX_BATCH+7 items, each flushed: batches of many sizes, all buckets. */
    uint64_t i = 0;
    unsigned seed = 12345;
    while (i < N) {
        seed = seed * 1103515245u + 12345u;
        uint64_t burst = 1 + (seed >> 16) % (MAX_BATCH + 7);
        for (uint64_t k = 0; k < burst && i < N; k++, i++)
            GPT_RC(gpu_submit(p, items, i, WORDS), GP_OK);
        GPT_RC(gp_pipeline_flush(p), GP_OK);
        if (seed % 5 == 0) gpu_drain(p);
    }
    gpu_drain(p);
    for (uint64_t k = 0; k < N; k++) {
        GPT_EQ(atomic_load(&items[k].calls), 1);
        GPT_RC(atomic_load(&items[k].status), GP_OK);
        GPT_EQ(atomic_load(&items[k].out_ok), 1);
    }
    uint64_t after = gp__pipeline_alloc_count(p);
    GPT_CHECK(cudaMemGetInfo(&free1, &total) == cudaSuccess);
    gp_stats s = gpu_stats(p);
    printf("graphs %d spin %d: %llu allocations at create, %llu after %d items in %llu batches; "
           "graph replays %llu, eager %llu (%s); device free memory %+lld bytes\n",
           graphs, spin, (unsigned long long)at_create, (unsigned long long)after, N,
           (unsigned long long)s.batches, (unsigned long long)s.graph_replays,
           (unsigned long long)s.graph_eager, s.graph_eager_reason,
           (long long)free1 - (long long)free0);
    /* Rings (2) + per slot: d_in, d_out, cuBLAS and cuBLASLt workspaces. */
    GPT_EQ(at_create, 2 + 4 * c.inflight);
    GPT_EQ(after, at_create);
    if (graphs) {
        GPT_EQ(s.graph_eager, 0);
        GPT_EQ(s.graph_replays, s.batches);
    } else {
        GPT_EQ(s.graph_replays, 0);
        GPT_EQ(s.graph_eager, s.batches);
    }
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
}

int main(void) {
    run(0, 0);
    run(1, 0);
    run(0, 1);
    return 0;
}
