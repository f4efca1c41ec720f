/*
 * gpupipe built-in model runtime: load a model (safetensors weights + a layer spec) and use it
 * as a pipeline's compute. docs/MODELS.md is the user guide: the spec, every layer with its
 * PyTorch equivalent, and tools/gpupipe_export.py, which writes the file from an nn.Module.
 *
 *     gp_model *m;
 *     char err[256];
 *     if (gp_model_load("net.safetensors", NULL, &m, err, sizeof err) != GP_OK) ...
 *     gp_config cfg;
 *     gp_config_init(&cfg);
 *     gp_model_configure(m, &cfg);          // compute, setup/teardown, item sizes
 *     gp_pipeline_create(&cfg, &p, err, sizeof err);
 *     ... submit items of gp_model_input_bytes(m), get gp_model_output_bytes(m) back ...
 *     gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
 *     gp_model_free(m);                     // after every pipeline that uses it is destroyed
 *
 * The spec comes from (first found): options.spec_text, options.spec_path, the safetensors
 * `__metadata__` key "gpupipe.spec", or a file beside the weights ("net.safetensors" ->
 * "net.spec"). Loading is strict: a malformed file, a tensor the spec names that is missing,
 * not a float type (F32, F16, BF16, F64) or of a shape that does not fit the spec fails with
 * GP_EMODEL and a message naming the tensor or spec line and the problem. Tensors the spec does
 * not name may have any dtype, one this library does not know included (only their offsets
 * are checked).
 *
 * Layers follow PyTorch semantics (eval mode): the host backend runs the host implementation
 * in fp32; the CUDA backend runs cuBLASLt/cuDNN layers in the configured precision.
 *
 * The spec (docs/MODELS.md; one op per line, '#' starts a comment; tensors named as in a
 * PyTorch state_dict: <name>.weight, .bias, .running_mean, .running_var; other tensors are
 * ignored):
 *
 *   input f32 784 | input f32 3x32x32                  item: features, or C x H x W
 *   input u8 32x32x3 layout=hwc mean=a,b,c std=a,b,c  u8 items: x / 255, then (x - mean) / std
 *   input f32 *x64                                    variable length: each item is a sequence
 *                                                     of tokens of 64 floats (docs/MODELS.md)
 *   input i32 * | input i64 * | input u32 *           variable length: token ids (an embedding
 *                                                     must come next)
 *   conv2d <name> [stride=S] [padding=P] [dilation=D] [groups=G]   (bias optional)
 *   batchnorm2d <name> [eps=1e-5]                     folded into the conv before it
 *   linear <name>                                     (bias optional)
 *   maxpool2d kernel=K [stride=S] [padding=P]         stride defaults to the kernel
 *   avgpool2d kernel=K [stride=S] [padding=P]         padding counts (count_include_pad)
 *   globalavgpool | relu | gelu | sigmoid | tanh | flatten | softmax
 *   save <tag> | restore <tag> | add <tag>            residuals
 *   argmax | topk k=K                                 int64 class indices out; last line
 *   embedding <name> [position=<p>] [token_type=<t>]  ids -> vectors: <name>.word_embeddings
 *                                                     (+ .position_embeddings, token type 0)
 *                                                     as BertEmbeddings, or <name>.weight
 *                                                     (+ <p>.weight, <t>.weight) as nn.Embedding
 *   layernorm <name> [eps=1e-5]                       nn.LayerNorm over the features
 *   attention <name> heads=H [q=Q k=K v=V out=O]      self-attention of each item's tokens
 *                                                     over themselves: BertAttention naming
 *                                                     (.self.query, ..., .output.dense),
 *                                                     nn.MultiheadAttention (.in_proj_weight,
 *                                                     .out_proj), or four named Linear layers
 *   pool cls | pool mean                              tokens -> one vector per item
 *   l2norm [eps=1e-12]                                x / max(||x||, eps) (F.normalize)
 *
 * Extensions, all optional: K, S, P, D may be "HxW" (kernel=3x1); layout=chw (the default);
 * mean/std with one value for every channel, or on an f32 input (no / 255 then). gelu is the
 * erf form. softmax, argmax, topk and linear need a flat (rank-1) value: flatten first.
 *
 * Variable-length inputs (`*` as the first dimension): a pipeline configured with the model
 * takes items of any whole number of tokens, 1..options.max_tokens, packed with no padding
 * (gpupipe.h, variable-size items); a submit of any other size returns GP_EINVAL (the item
 * never joins a batch; with a gp_config from before item_in_multiple, it fails its batch). linear,
 * the activations, add, layernorm and l2norm work token by token; attention lets each item's tokens
 * attend to that item's tokens only; globalavgpool (= pool mean) and pool cls give one value per
 * item; the model's output must be per item (pool before the output). With a position table shorter
 * than options.max_tokens, its rows are the limit. An item with an id outside the vocabulary fails
 * alone, on every backend: its callback gets GP_EINVAL, its batchmates complete as usual, and the
 * model's and the pipeline's last errors name the item, the token and the id (docs/MODELS.md, "Text
 * encoders"; gpupipe.h, gp_batch_fail_item). With several bad tokens in a batch, the message
 * names the first on the host, any one on CUDA (whose embedding kernel finds them).
 *
 * PyTorch spellings: op names are case-insensitive, so the class names Linear, Conv2d,
 * BatchNorm2d, ReLU, GELU, Sigmoid, Tanh, MaxPool2d, AvgPool2d, Flatten, Softmax, Embedding,
 * LayerNorm and MultiheadAttention (with num_heads=) name the same layers; `AdaptiveAvgPool2d 1`
 * (or output_size=1, 1x1, (1,1)) is globalavgpool, and any other output size is refused with a
 * message. kernel_size= is kernel=; softmax accepts dim=1 or dim=-1 (the features).
 *
 * The safetensors file must be well formed as the reference loader defines it: the tensors'
 * data_offsets cover the data exactly, without overlaps, gaps or bytes after the last tensor.
 * One refusal of this library's own: a JSON key (a tensor name) containing U+0000 (GP_EMODEL).
 * A torch.save archive, a pickle or a NumPy file is recognized and the message says so.
 *
 * Read top-down: types, options, lifecycle, queries, use with a pipeline, utilities.
 */
#ifndef GPUPIPE_MODEL_H
#define GPUPIPE_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gpupipe/gpupipe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------- */
/* Types                                                                                     */
/* ---------------------------------------------------------------------------------------- */

typedef struct gp_model gp_model;

/* Element types of model inputs and outputs. Values pinned. */
typedef enum gp_dtype {
    GP_DTYPE_F32 = 0,
    GP_DTYPE_U8 = 1,
    GP_DTYPE_I64 = 2, /* argmax / topk indices */
    GP_DTYPE_I32 = 3,
    GP_DTYPE_F16 = 4,
    GP_DTYPE_BF16 = 5,
    GP_DTYPE_U32 = 6 /* token ids (appended in 0.2.0) */
} gp_dtype;

/* Arithmetic precision on the CUDA backend. The host backend always computes in fp32. */
typedef enum gp_precision {
    GP_PRECISION_FP32 = 0, /* IEEE fp32 (tensor cores off) */
    GP_PRECISION_TF32 = 1, /* fp32 storage, tf32 tensor-core math (opt-in) */
    GP_PRECISION_FP16 = 2, /* weights converted at load; fp32 accumulation */
    GP_PRECISION_BF16 = 3  /* weights converted at load; fp32 accumulation */
} gp_precision;

#define GP_MODEL_MAX_RANK 4

/* Shape and type of one item of a model's input or output (the batch dimension excluded). A
   variable-length input has dims[0] == -1 (its token count) and `bytes` is one token's. */
typedef struct gp_tensor_info {
    gp_dtype dtype;
    int rank;                        /* 1..GP_MODEL_MAX_RANK */
    int64_t dims[GP_MODEL_MAX_RANK]; /* as the caller sees the item: e.g. 32,32,3 for u8 HWC */
    size_t bytes;                    /* one item (variable-length: one token) */
} gp_tensor_info;

/* ---------------------------------------------------------------------------------------- */
/* Options                                                                                   */
/* ---------------------------------------------------------------------------------------- */

/*
 * Load options. Fill with gp_model_options_init(). The library reads only the first
 * `struct_size` bytes. Strings are read during the load call only.
 */
typedef struct gp_model_options {
    size_t struct_size; /* set by gp_model_options_init(); one shorter than spec_path and
                           spec_text, or larger than this header's: GP_EINVAL */

    const char *spec_path;  /* spec file; NULL: __metadata__ "gpupipe.spec", then beside */
    const char *spec_text;  /* the spec itself; overrides spec_path and the metadata */
    gp_precision precision; /* CUDA backend precision; default GP_PRECISION_FP32 */
    size_t max_batch;       /* batch size the CUDA layers plan algorithms and workspaces for;
                               0 (default): the pipeline's max_batch, seen at setup; at most
                               2^20 (GP_EINVAL above). When nonzero, gp_model_configure also
                               sets cfg->max_batch. */
    uint64_t seed;          /* gp_model_demo only: weight seed; default 0x67707570 */
    /* Appended in 0.2.0: variable-length inputs (`input f32 *xF`). */
    size_t max_tokens;       /* tokens one item may have, 1..2^24 (else GP_EINVAL at load, for
                                any model); default 512 */
    size_t max_batch_tokens; /* tokens one batch may carry (gp_config.max_batch_bytes); default
                                0: max_batch * max_tokens. Variable-length inputs: below the
                                tokens one item may have (max_tokens, or a shorter position
                                table), or so many that their bytes overflow size_t, is
                                GP_EINVAL at load (over max_batch_bytes' 1 GiB: at create);
                                fixed-size inputs ignore it */
    /* Appended in 0.3.0: per-op time (gp_model_op_time, gp_model_profile). */
    int profile; /* 1: every batch a pipeline runs with the model times each of its ops; 0
                    (default): nothing is timed; any other value: GP_EINVAL at load. The host
                    backend times an op's wall time on the slot's thread; the CUDA backend
                    records an event on the slot's stream before the first op and after each
                    one, and reads them once the batch is done, so an op's time is its stream's
                    and includes the device's work for other slots in flight at once (time
                    per-op costs with config.inflight 1), and the host's launch of the next
                    op when that is slower than the op itself (small batches); a batch's input
                    and output conversions (f32 items of an fp16 / bf16 model) are in no op.
                    Batches replayed as CUDA graphs are not timed (gp_model_profile counts
                    them, with any whose events could not be read); batches that fail are not
                    counted at all (the host counts a batch when the model's compute returns:
                    a compute wrapping it that fails afterwards leaves it counted). Items are
                    the batch's (CUDA runs a batch at its bucket's size: a partial batch pays
                    for its bucket). gp_model_run_host's calls are not pipeline batches: never
                    timed. */
} gp_model_options;

/* Fill `o` with defaults (and struct_size). Any thread. */
GP_API void gp_model_options_init(gp_model_options *o);

/* ---------------------------------------------------------------------------------------- */
/* Lifecycle                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/*
 * Load the model in the safetensors file `path` (memory-mapped; weights are copied out as
 * fp32 with batchnorm folded into the preceding conv, and the mapping is released before
 * this returns). `opt` may be NULL (defaults).
 * @return GP_OK; GP_EINVAL (NULL argument, bad option); GP_EIO (cannot open or map the file or
 *         the spec file); GP_EMODEL (malformed file or spec, missing or mis-shaped tensor: the
 *         message names it); GP_ENOMEM. On error *out is NULL.
 * `err`/`err_len` (optional): receives a NUL-terminated detail on error. Any thread.
 */
GP_API int gp_model_load(const char *path, const gp_model_options *opt, gp_model **out, char *err,
                         size_t err_len);

/*
 * As gp_model_load, from a safetensors image in memory (`data`, `bytes`), read only during
 * the call. There is no "beside" spec file: the spec comes from the options or the metadata.
 */
GP_API int gp_model_load_memory(const void *data, size_t bytes, const gp_model_options *opt,
                                gp_model **out, char *err, size_t err_len);

/*
 * A built-in demo model with deterministic random weights (opt->seed), generated without any
 * file: the weights are written as an in-memory safetensors image and loaded through the same
 * strict loader. Names:
 *   "mlp": f32[784] -> linear 1024, relu -> linear 1024, relu -> linear 10 -> softmax: f32[10]
 *   "cnn": u8[32x32x3] HWC images, mean/std normalized -> ResNet-style convs with batchnorm,
 *          a residual block with projection shortcut, pooling -> linear 100 -> softmax
 *          -> topk k=5: i64[5] class indices, best first
 *   "encoder": i32 token ids, 1..512 per item (variable length) -> a BERT-style text encoder
 *          in Hugging Face BertModel naming: embeddings (vocabulary 30522, 512 positions),
 *          4 post-LN layers of hidden 256, 4 heads, intermediate 1024, GELU -> pool mean
 *          -> l2norm: f32[256] unit-length sentence embeddings
 * @return GP_OK; GP_EINVAL (NULL argument or unknown name: the message lists the names);
 *         GP_ENOMEM. On error *out is NULL. Any thread.
 */
GP_API int gp_model_demo(const char *name, const gp_model_options *opt, gp_model **out, char *err,
                         size_t err_len);

/*
 * The demo model's safetensors image (spec in its metadata), as gp_model_demo would load it:
 * *data is malloc'ed, free() it. Lets tools write the demo to disk. @return as gp_model_demo;
 * on error *data is NULL and *bytes 0 (those that are not NULL pointers themselves).
 */
GP_API int gp_model_demo_safetensors(const char *name, const gp_model_options *opt, void **data,
                                     size_t *bytes, char *err, size_t err_len);

/* Free the model. NULL is accepted. Every pipeline configured with it must be destroyed
   first. Not concurrently with any other use of `m`. */
GP_API void gp_model_free(gp_model *m);

/* ---------------------------------------------------------------------------------------- */
/* Queries. Any thread; `m` is immutable after load.                                         */
/* ---------------------------------------------------------------------------------------- */

/* Shape and type of one input / output item. @return GP_OK or GP_EINVAL (NULL argument). */
GP_API int gp_model_input_info(const gp_model *m, gp_tensor_info *info);
GP_API int gp_model_output_info(const gp_model *m, gp_tensor_info *info);

/* Bytes of one input / output item (0 for NULL; the input of a variable-length model: the
   largest item, options.max_tokens tokens, or the position table's rows when it has fewer). */
GP_API size_t gp_model_input_bytes(const gp_model *m);
GP_API size_t gp_model_output_bytes(const gp_model *m);

/* Token-id models (`input i32|i64|u32 *`): the vocabulary, the embedding's rows (with several
   embeddings, the smallest); the valid ids are 0..vocab-1 (an item with another fails alone,
   GP_EINVAL). 0 for any other input and for NULL. Appended in 0.2.0. */
GP_API int64_t gp_model_vocab(const gp_model *m);

/* Floating-point operations per item (multiply-add = 2), for throughput figures. For a
   variable-length model: those of an item of one token, attention's scores excluded (they grow
   with the item's length: 4 x tokens x width per token and layer), so a T-token item costs
   about T times this figure plus that term. */
GP_API double gp_model_flops(const gp_model *m);

/* The spec text the model was built from (valid until gp_model_free). */
GP_API const char *gp_model_spec(const gp_model *m);

/* The input line (dtype, item shape and bytes, layout, the normalization done on the device:
   x / 255 for u8, mean, std), one line per executed op (kind, name, shapes, fused activation,
   buffers), the output line (dtype, shape, bytes, what it holds) and the buffer plan.
   @return GP_OK, GP_EINVAL, GP_EIO. */
GP_API int gp_model_describe(const gp_model *m, FILE *f);

/* Ops in the model's op list (the numbering of gp_model_describe, from 0); 0 for NULL. */
GP_API int gp_model_op_count(const gp_model *m);

/* ---------------------------------------------------------------------------------------- */
/* Per-op time (options.profile). Any thread, also while pipelines run batches.             */
/* ---------------------------------------------------------------------------------------- */

/*
 * Op `op`'s time (0 .. gp_model_op_count() - 1): *ns its nanoseconds summed over the batches
 * timed since load or the last gp_model_profile_reset, *batches those batches, *items their
 * items (any out-pointer may be NULL). Every op of a timed batch is timed, and a batch is
 * added to every op's counters at once: a read, a reset or gp_model_profile sees all of a
 * batch or none of it, so every op always holds the same batches and items.
 * @return GP_OK; GP_EINVAL (NULL model, op out of range); GP_ENOTSUP (loaded without
 *         options.profile; the out-values are then 0).
 */
GP_API int gp_model_op_time(const gp_model *m, int op, uint64_t *ns, uint64_t *batches,
                            uint64_t *items);

/* Zero every op's counters and the count of batches not timed. @return GP_OK, GP_EINVAL (NULL),
   GP_ENOTSUP (loaded without options.profile). */
GP_API int gp_model_profile_reset(gp_model *m);

/*
 * Print the per-op times as a table: one row per op (index, spec line, kind with what it carries
 * fused, as "conv2d+add+relu", or an activation op's function, as "act:gelu", name ("-" for an
 * unnamed op), output shape, ms per timed batch, us per item, share of the summed time, GFLOP/s
 * from gp_model_describe's MFLOP per item: "-" for token models), the sum per batch (a row
 * "sum"), and the batches timed and not timed (CUDA graph replays, unreadable events) since
 * load or the last reset. Before a batch was timed the time columns, the sum's too, read "-".
 * The first line is "per-op time: B batches timed (I items, ...), U not timed ...".
 * @return GP_OK; GP_EINVAL (NULL argument); GP_ENOTSUP (loaded without options.profile);
 *         GP_ENOMEM; GP_EIO (a write failed).
 */
GP_API int gp_model_profile(const gp_model *m, FILE *f);

/* ---------------------------------------------------------------------------------------- */
/* Use with a pipeline                                                                       */
/* ---------------------------------------------------------------------------------------- */

/*
 * Make `m` the compute of `cfg`: sets compute, compute_user, compute_setup, compute_teardown,
 * item_in_bytes and item_out_bytes (and max_batch when options.max_batch was nonzero). A
 * variable-length model sets max_item_in_bytes (options.max_tokens tokens, or the position
 * table's rows when it has fewer) instead of item_in_bytes, max_batch_bytes
 * (options.max_batch_tokens tokens; 0, the default budget, when that is not set) and
 * item_in_multiple (one token's bytes: an item that is not whole tokens fails at submit with
 * GP_EINVAL, alone). The fields of the other kind are cleared (item_in_bytes for a
 * variable-length model; max_item_in_bytes, max_batch_bytes, arena_bytes and item_in_multiple
 * for a fixed-size one; max_item_out_bytes always), as far as cfg->struct_size reaches, so one
 * gp_config may be configured again for another model. Other fields are left alone. One model
 * may serve several pipelines at once; it must outlive them.
 * The compute dispatches on the batch's backend: host runs the host layers on the slot's
 * thread; CUDA enqueues the device layers on the slot's stream (GP_ENOTSUP at create when
 * this build has no CUDA layers).
 * @return GP_OK or GP_EINVAL (NULL argument, cfg->struct_size too small). Any thread.
 */
GP_API int gp_model_configure(gp_model *m, gp_config *cfg);

/*
 * Run `n` items through the host implementation on the calling thread, without a pipeline:
 * `in` holds n input items, `out` receives n output items. The reference the tests compare
 * other backends with. It allocates its scratch on every call (and frees it before returning):
 * a compute that runs batch after batch should use gp_model_configure, whose slots allocate
 * theirs once. @return GP_OK, GP_EINVAL, GP_ENOMEM. Any thread, concurrently.
 */
GP_API int gp_model_run_host(gp_model *m, size_t n, const void *in, void *out, char *err,
                             size_t err_len);

/*
 * As gp_model_run_host for a variable-length model: item k's input is in[in_offsets[k] ..
 * in_offsets[k + 1]) (n + 1 byte offsets, each item a whole number of tokens, 1..max_tokens
 * of them); `out` receives n output items. @return GP_OK, GP_EINVAL (also: a fixed-size
 * model, an item that is not whole tokens), GP_ENOMEM.
 */
GP_API int gp_model_run_host_packed(gp_model *m, size_t n, const void *in,
                                    const uint64_t *in_offsets, void *out, char *err,
                                    size_t err_len);

/*
 * The detail of the last failure inside a pipeline's use of the model (a compute_setup that
 * failed, e.g. "CUDA layers not built" or a cuDNN error; a batch that failed). Copies a
 * NUL-terminated string into `buf` and returns that failure's code (GP_OK if none). Any thread.
 */
GP_API int gp_model_last_error(gp_model *m, char *buf, size_t len);

/* ---------------------------------------------------------------------------------------- */
/* Utilities                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* "f32", "u8", "i64", "i32", "f16", "bf16", "u32"; "?" otherwise. */
GP_API const char *gp_dtype_name(gp_dtype t);
/* Bytes of one element; 0 for unknown values. */
GP_API size_t gp_dtype_size(gp_dtype t);
/* "fp32", "tf32", "fp16", "bf16"; "?" otherwise. */
GP_API const char *gp_precision_name(gp_precision p);
/* Parse a precision name as above. @return GP_OK or GP_EINVAL. */
GP_API int gp_precision_parse(const char *name, gp_precision *out);

#ifdef __cplusplus
}
#endif
#endif /* GPUPIPE_MODEL_H */
