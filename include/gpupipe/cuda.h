/*
 * gpupipe/cuda.h — CUDA-typed views of a batch, for compute functions on the CUDA backend.
 *
 * The only public gpupipe header that includes CUDA headers. Available when the library was
 * built with the CUDA backend (GP_HAVE_CUDA is then a compile definition of the gpupipe CMake
 * targets and in `pkg-config --cflags gpupipe`, with the CUDA headers' directory);
 * gp_cuda_cudnn() only when it was also built with cuDNN (GP_HAVE_CUDNN, likewise).
 *
 * The accessors are part of libgpupipe itself and call no CUDA function: a compute using them
 * links only libgpupipe (and the CUDA libraries it calls itself). The CUDA backend runs from the
 * module libgpupipe-cuda.so, which libgpupipe loads at run time (the static library has it
 * linked in).
 *
 * Ownership and threading, for every accessor below:
 *  - Everything returned belongs to the batch's in-flight slot: one stream, one cuBLAS handle,
 *    one cuBLASLt handle and workspace, one cuDNN handle per slot, created at
 *    gp_pipeline_create (cuDNN's on first use) and destroyed by gp_pipeline_destroy. Never destroy
 * them, never rebind the handles to another stream, never free the workspace.
 *  - They are valid during the compute call and during compute_setup / compute_teardown for
 *    the same slot (gp_config), nowhere else.
 *  - Calls for one slot never run concurrently, so a compute may use the slot's handles
 *    without locking; calls for different slots may run concurrently on other threads.
 *  - The compute only enqueues on the stream; it must not synchronize it, the device or the
 *    context (that stalls the pipeline, and breaks CUDA-graph capture).
 *  - With config.cuda_graphs the compute is called twice per slot and batch-size bucket at
 *    create, with b->n the bucket's size and items whose contents are unspecified (zeros at
 *    first): once eagerly as a warm-up (gpupipe waits for it, so first-call initialisation
 *    happens outside the capture), then under stream capture; the graph is replayed
 *    afterwards. It must enqueue the same work for the same b->n every time and must not
 *    depend on b->first_seq. A bucket whose warm-up or capture fails runs eager, with the
 *    reason in gp_stats.graph_eager_reason. Padding reported from these calls
 *    (gp_batch_report_padding) is not counted: they are not batches.
 *  - The pipeline's own threads interact with stream capture thread-locally: an application
 *    capturing a CUDA graph in global mode on another thread (PyTorch's default) does not
 *    break a running pipeline, nor the pipeline that capture. gp_pipeline_create,
 *    gp_pipeline_destroy and gp_model_free allocate, free and wait on the calling thread:
 *    call them outside such a capture (CUDA fails those calls and invalidates the capture).
 *  - On a batch that is not a CUDA batch (host backend) the accessors return NULL / 0 / -1.
 *    NULL is also CUDA's legacy default stream: check b->backend before using the stream.
 */
#ifndef GPUPIPE_CUDA_H
#define GPUPIPE_CUDA_H

#include <stddef.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#if defined(GP_HAVE_CUDNN)
#include <cudnn.h>
#endif

#include "gpupipe/gpupipe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The slot's non-blocking stream, the one b->stream holds. Copies and the event that tells
   the pipeline the batch is done are ordered on it: enqueue all of the batch's work here (or
   join other streams back into it with events before returning). */
GP_API cudaStream_t gp_cuda_stream(const gp_batch *b);

/* The slot's cuBLAS handle, already bound to gp_cuda_stream(b), with its own device workspace
   set (cublasSetWorkspace: 32 MiB on compute capability 9.0 and later, 4 MiB before), so
   cuBLAS allocates nothing during the run or under graph capture. Math mode and pointer mode
   are the defaults; a compute may change them (the handle is the slot's alone). */
GP_API cublasHandle_t gp_cuda_cublas(const gp_batch *b);

/* The slot's cuBLASLt handle. cuBLASLt takes the stream and workspace per call: pass
   gp_cuda_stream(b) and gp_cuda_workspace(b, &bytes). */
GP_API cublasLtHandle_t gp_cuda_cublaslt(const gp_batch *b);

/* The slot's cuBLASLt workspace on the slot's device (not the one cuBLAS uses); its size goes
   to *bytes when `bytes` is not NULL. Valid for work enqueued on gp_cuda_stream(b) only. */
GP_API void *gp_cuda_workspace(const gp_batch *b, size_t *bytes);

#if defined(GP_HAVE_CUDNN)
/* The slot's cuDNN handle, set to gp_cuda_stream(b) (cudnnSetStream). It is created on the
   slot's first call, so a machine where cuDNN cannot be loaded fails only the computes that
   use it: this then returns NULL for the slot (the reason goes to the log callback and to
   stats.backend_note), and the compute can run without cuDNN or fail its batch. Call it first
   from compute_setup: a first call inside a compute under CUDA-graph capture (config
   cuda_graphs) returns NULL for that call only (creating the handle would break the capture;
   that bucket then runs eager, and a later call outside a capture creates the handle). cuDNN
   workspaces are the compute's: allocate them in compute_setup, not per batch. */
GP_API cudnnHandle_t gp_cuda_cudnn(const gp_batch *b);
#endif

/* The CUDA device id of the slot (== b->device); -1 for a host batch. It is the calling
   thread's current device during compute, compute_setup and compute_teardown. Note that
   gp_pipeline_create and gp_pipeline_destroy leave the calling thread's current device set to
   one of the pipeline's devices: set your own again afterwards if you rely on it. */
GP_API int gp_cuda_device(const gp_batch *b);

#ifdef __cplusplus
}
#endif
#endif /* GPUPIPE_CUDA_H */
