/*
 * Shared by the GPU tests: per-item callback records that check the known transform, and
 * submit/drain helpers that turn a hang into a failure (drain has a timeout).
 * No CUDA header here: the backend-choice test builds without CUDA too.
 */
#ifndef GPU_UTIL_H
#define GPU_UTIL_H

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"

/* One submitted item: the callback fills it. */
typedef struct gpu_item {
    uint64_t index;
    size_t words;
    _Atomic int calls;  /* must end at exactly 1 for an accepted item, 0 for a refused one */
    _Atomic int status; /* the callback's status */
    _Atomic int out_ok; /* 1 when the output equals gpt_word() of the input */
} gpu_item;

static inline uint32_t gpu_in_word(uint64_t index, size_t k) {
    return (uint32_t)(index * 2654435761u) ^ (uint32_t)(k * 40503u + 7u);
}

static inline void gpu_done(void *user, int status, const void *out, size_t bytes) {
    gpu_item *it = user;
    int ok = 0;
    if (status == GP_OK && out && bytes == it->words * 4) {
        const uint32_t *o = out;
        ok = 1;
        for (size_t k = 0; k < it->words && ok; k++)
            ok = o[k] == gpt_word(gpu_in_word(it->index, k));
    }
    atomic_store(&it->out_ok, ok);
    atomic_store(&it->status, status);
    atomic_fetch_add(&it->calls, 1);
}

/* Submit item `index` of `items` (words per item); returns the submit status. */
static inline int gpu_submit(gp_pipeline *p, gpu_item *items, uint64_t index, size_t words) {
    uint32_t stackbuf[256];
    uint32_t *buf = words <= 256 ? stackbuf : malloc(words * 4);
    GPT_CHECK(buf);
    gpu_item *it = &items[index];
    it->index = index;
    it->words = words;
    for (size_t k = 0; k < words; k++)
        buf[k] = gpu_in_word(index, k);
    int rc = gp_pipeline_submit(p, buf, words * 4, gpu_done, it);
    if (buf != stackbuf) free(buf);
    return rc;
}

/* Drain, failing the test instead of hanging. */
static inline void gpu_drain(gp_pipeline *p) {
    int rc = gp_pipeline_drain(p, 60 * 1000 * 1000);
    if (rc != GP_OK) {
        fprintf(stderr, "drain: %s (a hang: items never completed)\n", gp_err_name(rc));
        exit(1);
    }
}

static inline gp_stats gpu_stats(gp_pipeline *p) {
    gp_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    return s;
}

#endif
