/*
 * gpupipe/torch.h — bring your own PyTorch model: a TorchScript module as a pipeline's compute.
 *
 *     gp_torch_options o;
 *     gp_torch_options_init(&o);
 *     o.input = (gp_torch_item){GP_DTYPE_U8, 3, {224, 224, 3}};  // one item, no batch dimension
 *     gp_torch_model *m;
 *     if (gp_torch_model_load("resnet18.pt", &o, &m, err, sizeof err) != GP_OK) ...
 *     gp_config cfg;
 *     gp_config_init(&cfg);
 *     gp_torch_configure(m, &cfg);            // compute, setup/teardown, item sizes
 *     gp_pipeline_create(&cfg, &p, err, sizeof err);
 *     ... submit items of gp_torch_input_bytes(m), get gp_torch_output_bytes(m) back ...
 *     gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
 *     gp_torch_model_free(m);                 // after the pipeline is destroyed
 *
 * The library libgpupipe-torch (CMake target gpupipe::gpupipe_torch, pkg-config gpupipe-torch)
 * is built when CMake finds LibTorch (-DGP_WITH_TORCH=AUTO|ON|OFF); it links libgpupipe and
 * LibTorch. This header needs neither LibTorch's headers nor a C++ compiler;
 * gpupipe/torch.hpp is a C++17 wrapper over it.
 *
 * The model: a TorchScript file (torch.jit.script(m).save(path) or torch.jit.trace) whose
 * `forward` takes one tensor, the batch [N, *input item shape] of the input dtype, and returns
 * one tensor [N, *output item shape] of the output dtype. It is loaded once, on the CPU, in
 * eval mode, and run under inference mode (no autograd).
 *
 * What is copied, per batch (nothing else):
 *  - input: none by this compute. The batch is wrapped in place as a tensor (from_blob over
 *    gp_batch.in, shape [n, *input]); on CUDA it is the slot's device buffer the pipeline's
 *    one H2D copy from the pinned ring filled.
 *  - output: one copy, forward's result into gp_batch.out (a device-to-device copy enqueued
 *    on the slot's stream on CUDA, a memcpy on the host); the pipeline's D2H brings it to the
 *    ring. forward allocates its result itself, so this copy cannot be avoided without
 *    changing the model.
 *  - with precision FP16/BF16 a floating input is also converted on the device (a cast
 *    kernel), and a floating result converted back into the output dtype by the same copy.
 *
 * Per slot (compute_setup, at gp_pipeline_create): on CUDA, the module is copied once per
 * device to that device (converted to the precision), the slot's stream is wrapped as a
 * PyTorch stream (c10::cuda::getStreamFromExternal) and made current around every forward, so
 * every kernel and the output copy are enqueued on it and nothing synchronizes during a
 * batch. On the host the loaded module itself runs, concurrently on the slots' threads (a
 * TorchScript method may be called from several threads; a model that assigns to its own
 * attributes in forward is not supported). Warm-up (options.warmup) also runs here, so the
 * first batch does not pay for lazy initialization.
 *
 * Errors never escape as C++ exceptions: every entry catches them. A batch whose forward
 * throws (the model raised, or rejects the input's shape or dtype; or PyTorch ran out of
 * memory: GP_ENOMEM) or whose result does not match the output item fails alone: its items
 * complete with GP_ECOMPUTE, the pipeline's last error says "compute returned N for the batch
 * of M items at seq S: " and the start of the reason (255 bytes), and gp_torch_last_error()
 * gives the full message (PyTorch's, with the TorchScript traceback, or the shape found and
 * expected). Later batches run as usual. Out of memory, however LibTorch reports it, is
 * GP_ENOMEM in load, setup and compute; an exception the model's own code raises is never
 * taken for it, whatever its words.
 *
 * One pipeline at a time: a gp_torch_model keeps its per-slot state by slot index, so it may
 * serve one live pipeline. gp_torch_configure fails while a pipeline configured with the
 * model exists, and gp_pipeline_create fails (slot already set up) when two pipelines are
 * created from configs the same model was configured into. Load the file again for a second
 * pipeline (weights are then held twice).
 *
 * Read top-down: types, options, lifecycle, queries, use with a pipeline, utilities.
 */
#ifndef GPUPIPE_TORCH_H
#define GPUPIPE_TORCH_H

#include <stddef.h>
#include <stdint.h>

#include "gpupipe/gpupipe.h"
#include "gpupipe/model.h" /* gp_dtype, gp_precision, gp_dtype_size, gp_dtype_name */

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------- */
/* Types                                                                                     */
/* ---------------------------------------------------------------------------------------- */

typedef struct gp_torch_model gp_torch_model;

#define GP_TORCH_MAX_RANK 8

/* Shape and type of one item (the batch dimension excluded): a C-contiguous array of
   dims[0] x ... x dims[rank-1] elements of `dtype` (any but GP_DTYPE_U32, which LibTorch 1.13
   has no tensor type for: refused with GP_EINVAL). */
typedef struct gp_torch_item {
    gp_dtype dtype;
    int rank;                        /* 1..GP_TORCH_MAX_RANK; 0 = unset */
    int64_t dims[GP_TORCH_MAX_RANK]; /* each > 0 */
} gp_torch_item;

/* ---------------------------------------------------------------------------------------- */
/* Options                                                                                   */
/* ---------------------------------------------------------------------------------------- */

/*
 * Load options. Fill with gp_torch_options_init(). The library reads only the first
 * `struct_size` bytes, so code built against an older header keeps working; a struct_size
 * larger than this header's (code built against a newer one) is GP_EINVAL.
 */
typedef struct gp_torch_options {
    size_t struct_size; /* set by gp_torch_options_init() */

    gp_torch_item input;    /* required: the item forward gets (batch dimension added) */
    gp_torch_item output;   /* rank 0 (default): found at load by one forward on the CPU over
                               a batch of 2 zero items; set it to skip that forward (a model
                               that cannot run on the CPU) and to have it checked instead.
                               A model that returns one value per item (shape [N]) has the
                               output item {dtype, 1, {1}}. */
    gp_precision precision; /* GP_PRECISION_FP32 (default): the module as saved.
                               FP16 / BF16: the module's floating parameters and buffers are
                               converted on each slot's device, a floating input is converted
                               before forward and a floating result back to output.dtype.
                               Applies on the host too (where PyTorch's CPU kernels may not
                               support FP16: the warm-up then fails at create).
                               TF32 is GP_EINVAL: it is a process-wide PyTorch switch
                               (torch.backends.cuda.matmul.allow_tf32), set it in your program.
                               On CUDA, FP32 runs under PyTorch's own process-wide math
                               settings, which gpupipe does not change: LibTorch's defaults
                               keep matmuls in full FP32 but let cuDNN convolutions use TF32
                               (torch.backends.cudnn.allow_tf32 = true); switch that off in
                               your program for FP32 convolutions. */
    int warmup;             /* forwards run in compute_setup on zero inputs of batch 1, so the
                               first batch does not pay for lazy initialization (TorchScript's
                               profiling executor optimizes at the second run, kernels and
                               allocator caches start up); on CUDA, per slot, plus one at the
                               pipeline's max_batch so the slot stream's allocator cache holds a
                               full batch's activations before traffic. Host: once per pipeline
                               (the module is shared); compute_setup runs on the creating
                               thread, so each slot thread's OpenMP / oneDNN state still
                               starts cold: the first batch there is faster with warm-up, not
                               yet at its steady cost (bench/RESULTS.md). Default 2; 0 = none. */
    int intra_op_threads;   /* 0 (default): leave PyTorch's thread count alone. 1..1024:
                               at::set_num_threads(n) at load: PROCESS-WIDE, it changes every
                               PyTorch user in the process; and on each thread that runs a
                               forward, before its first. On the host backend each slot runs
                               forward with this many threads, its first batch included:
                               inflight x threads ~ cores. */
} gp_torch_options;

/* Fill `o` with defaults (and struct_size): input and output unset (rank 0), FP32, warmup 2,
   intra_op_threads 0. Any thread. */
GP_API void gp_torch_options_init(gp_torch_options *o);

/* ---------------------------------------------------------------------------------------- */
/* Lifecycle                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/*
 * Load the TorchScript file `path` on the CPU (torch::jit::load), in eval mode; find the
 * output item when opt->output.rank is 0. `opt` is required (the input item).
 * @return GP_OK; GP_EINVAL (NULL argument, struct_size too small or too large, unset or bad input
 * item, bad output item, precision TF32 or unknown, negative warmup, intra_op_threads outside
 *         0..1024); GP_EIO (cannot
 *         open the file); GP_EMODEL (not a TorchScript file, no forward method, or the output
 *         forward failed or returned something other than one tensor [2, ...] whose item has
 *         no dimension of 0 and fits size_t bytes: the message says which, with PyTorch's
 *         words); GP_EIO also for a path that opens but cannot be read (a directory);
 *         GP_ENOMEM. On error *out is NULL.
 * `err`/`err_len` (optional): receives a NUL-terminated detail on error. Any thread.
 * Load files you trust: LibTorch's own parser (1.13: torch::jit::load, as torch.jit.load in
 * Python) crashes the process on some corrupted files, before this library can report it; to
 * vet a file from elsewhere, load it once in a child process.
 */
GP_API int gp_torch_model_load(const char *path, const gp_torch_options *opt, gp_torch_model **out,
                               char *err, size_t err_len);

/* Free the model. NULL is accepted. The pipeline configured with it must be destroyed first.
   Not concurrently with any other use of `m`. */
GP_API void gp_torch_model_free(gp_torch_model *m);

/* ---------------------------------------------------------------------------------------- */
/* Queries. Any thread.                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* The input / output item (output as found at load when it was not given).
   @return GP_OK or GP_EINVAL (NULL argument). */
GP_API int gp_torch_input(const gp_torch_model *m, gp_torch_item *item);
GP_API int gp_torch_output(const gp_torch_model *m, gp_torch_item *item);

/* Bytes of one input / output item (0 for NULL). */
GP_API size_t gp_torch_input_bytes(const gp_torch_model *m);
GP_API size_t gp_torch_output_bytes(const gp_torch_model *m);

/* ---------------------------------------------------------------------------------------- */
/* Use with a pipeline                                                                       */
/* ---------------------------------------------------------------------------------------- */

/*
 * Make `m` the compute of `cfg`: sets compute, compute_user, compute_setup, compute_teardown,
 * item_in_bytes and item_out_bytes, and clears the variable-size fields (max_item_in_bytes,
 * max_item_out_bytes, max_batch_bytes, arena_bytes, item_in_multiple, each as far as
 * cfg->struct_size reaches: a config configured for a token model before); other fields are
 * left alone (cuda_graphs must stay 0:
 * PyTorch's allocator cannot run under a capture it did not start, so with it on every bucket
 * runs eager and the pipeline's graph_eager_reason says why). Creating the pipeline runs the
 * per-slot setup and warm-up; a setup failure fails gp_pipeline_create with its code
 * (GP_EMODEL: warm-up forward failed or its result does not match the output item;
 * GP_ENOMEM: out of memory; GP_ENOTSUP: CUDA backend with a LibTorch built without CUDA;
 * GP_ENODEV: LibTorch sees no CUDA device; GP_EINVAL: the model already serves a pipeline),
 * the detail in create's `err` and in gp_torch_last_error().
 * @return GP_OK; GP_EINVAL (NULL argument, cfg->struct_size too small, or a pipeline
 *         configured with `m` is alive: the detail is in gp_torch_last_error). Not
 *         concurrently with gp_pipeline_create/destroy of a pipeline using `m`.
 */
GP_API int gp_torch_configure(gp_torch_model *m, gp_config *cfg);

/*
 * The detail of the last failure inside a pipeline's use of the model (a setup or warm-up
 * that failed, a batch whose forward threw or whose result did not match): copies a
 * NUL-terminated string into `buf` (truncated to `len`) and returns that failure's code
 * (GP_OK if none). Of failures in several slots at once, the one recorded last in time stays
 * (not necessarily the latest batch's). Any thread.
 */
GP_API int gp_torch_last_error(const gp_torch_model *m, char *buf, size_t len);

/* ---------------------------------------------------------------------------------------- */
/* Utilities                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* 1 when this libgpupipe-torch can run the model on the CUDA backend (built against a LibTorch
   with CUDA, and with gpupipe's CUDA backend), else 0. Any thread. */
GP_API int gp_torch_has_cuda(void);

/* The LibTorch version this library was built against, "MAJOR.MINOR.PATCH". Any thread. */
GP_API const char *gp_torch_version(void);

#ifdef __cplusplus
}
#endif
#endif /* GPUPIPE_TORCH_H */
