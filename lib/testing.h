/*
 * What tests (and only tests) may ask of a pipeline beyond the public API. Implemented in
 * pipeline.c on the device interface's optional test entries, so no backend exposes its
 * internals and no library file includes another folder's private header for them.
 */
#ifndef GP_LIB_TESTING_H
#define GP_LIB_TESTING_H

#include <stdint.h>

#include "gpupipe/gpupipe.h"

/* Device and pinned allocations the pipeline's backend made since create began (CUDA:
   cudaMalloc + cudaHostAlloc); constant once create returned if the submit path never
   allocates. UINT64_MAX when the backend does not count. Any thread. */
uint64_t gp__pipeline_alloc_count(gp_pipeline *p);

#endif
