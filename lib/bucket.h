/*
 * The one bucket rule's lookup (gp_batch, "Buckets"; docs/DESIGN.md §6, "One bucket rule"): in
 * an ascending list of sizes, the index of the first that holds n, else the last. The pipeline
 * picks each batch's bucket with it; the CUDA backend and layers find a batch's graph and plans
 * with it, and token GEMMs their planned token count.
 */
#ifndef GP_BUCKET_H
#define GP_BUCKET_H

#include <stddef.h>

static inline int gp__bucket_index(const size_t *sizes, int count, size_t n) {
    int i = 0;
    while (i < count - 1 && sizes[i] < n)
        i++;
    return i;
}

#endif
