/*
 * CUDA backend internals that tests (and only tests and benchmarks) reach: the allocation
 * count behind "no cudaMalloc/cudaHostAlloc after create", and a trace of stage event times
 * for the overlap test. Nothing here is public API.
 */
#ifndef GP_LIB_CUDA_INTERNAL_H
#define GP_LIB_CUDA_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gpupipe/gpupipe.h"

/* Device and pinned allocations (cudaMalloc + cudaHostAlloc) the CUDA backend of `p` made
   since create began. Constant once create returned. 0 when `p` runs on another backend.
   Any thread. */
uint64_t gp__cuda_alloc_count(gp_pipeline *p);

/* One stage event time as the poller read it: `event` is the slot's gp__event (compare with
   gp_pipeline.slots[k].ev[stage]), `ns` its completion on the gp_now_ns() clock. */
typedef struct gp__cuda_trace_entry {
    const void *event;
    uint64_t ns;
} gp__cuda_trace_entry;

/* A caller-owned buffer the backend appends to (single writer: the poller). The poller reads
   the four stage events of every device batch in dispatch order, START, H2D, COMPUTE, D2H,
   so entries come in groups of four. Appending stops at `cap`. */
typedef struct gp__cuda_trace {
    gp__cuda_trace_entry *e;
    size_t cap;
    _Atomic size_t n; /* entries written; the poller stores it with release order */
} gp__cuda_trace;

/* Start tracing into `t` (which must outlive the pipeline or a later call with NULL). Call
   before submitting the items to trace. @return GP_OK, or GP_EINVAL when `p` is not on the
   CUDA backend. */
int gp__cuda_trace_start(gp_pipeline *p, gp__cuda_trace *t);

#endif
