/*
 * Several GPUs: the config lists every visible device (up to 4); slots are spread over them
 * round-robin (slot k on devices[k % num_devices]); the compute runs with its slot's device
 * current and learns it from b->device and gp_cuda_device(); every device gets batches; the
 * outputs are right. With one visible device the list is {0, 0}: the mapping is still
 * checked, the spreading is not.
 */
#include <cuda_runtime_api.h>

#include "gpupipe/cuda.h"
#include "gpu_util.h"

enum { N = 4000, WORDS = 32 };

typedef struct mctx {
    int devices[GP_MAX_DEVICES];
    int num;
    _Atomic uint64_t batches[GP_MAX_DEVICES];
    _Atomic int wrong;
} mctx;

static int compute(void *user, const gp_batch *b) {
    mctx *m = user;
    int cur = -1;
    int want = m->devices[b->slot % m->num];
    if (cudaGetDevice(&cur) != cudaSuccess || cur != b->device || b->device != want ||
        gp_cuda_device(b) != want) {
        atomic_store(&m->wrong, 1);
        return 99;
    }
    atomic_fetch_add(&m->batches[b->slot % m->num], 1);
    return gpt_transform(NULL, b);
}

static gpu_item items[N];

int main(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        printf("SKIP: no CUDA device: %s\n", cudaGetErrorString(e));
        return gpt_no_device();
    }
    mctx m = {.num = count >= 2 ? (count < 4 ? count : 4) : 2};
    for (int i = 0; i < m.num; i++)
        m.devices[i] = count >= 2 ? i : 0;
    gp_config c;
    gpt_config(&c, GP_BACKEND_CUDA);
    c.item_in_bytes = c.item_out_bytes = WORDS * 4;
    c.max_batch = 16;
    c.inflight = 2 * m.num;
    c.num_devices = m.num;
    memcpy(c.devices, m.devices, sizeof m.devices);
    c.compute = compute;
    c.compute_user = &m;
    gp_pipeline *p = gpt_create(&c);
    for (uint64_t i = 0; i < N; i++)
        GPT_RC(gpu_submit(p, items, i, WORDS), GP_OK);
    gpu_drain(p);
    GPT_EQ(atomic_load(&m.wrong), 0);
    for (uint64_t i = 0; i < N; i++) {
        GPT_EQ(atomic_load(&items[i].calls), 1);
        GPT_RC(atomic_load(&items[i].status), GP_OK);
        GPT_EQ(atomic_load(&items[i].out_ok), 1);
    }
    for (int i = 0; i < m.num; i++) {
        printf("device list entry %d (device %d): %llu batches\n", i, m.devices[i],
               (unsigned long long)atomic_load(&m.batches[i]));
        GPT_CHECK(atomic_load(&m.batches[i]) > 0);
    }
    if (count < 2)
        printf("one device visible: mapping checked, spreading over GPUs not exercised\n");
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    return 0;
}
