/*
 * libgpupipe-torch: a TorchScript module as a pipeline's compute (include/gpupipe/torch.h).
 *
 * Choices, and why:
 *  - One translation unit, C API outside. LibTorch headers take ~15 s per file to compile on
 *    a 2-core machine, and its C++ ABI (libstdc++ dual ABI, exceptions) must not leak into
 *    programs that only want a compute: callers see torch.h (C) or torch.hpp (C++ over the C
 *    API) and never LibTorch's headers. Every entry catches every exception.
 *  - Per-slot state is keyed by the pipeline's slot index (gp_batch.slot) in a fixed array:
 *    compute reads slots[b->slot] without a lock. compute_setup (which writes the entry) runs
 *    on the creating thread before any of the pipeline's threads exist, and
 *    compute_teardown after they have ended, so thread start and join order those accesses.
 *    The price: one live pipeline per model (both entry points detect a second one). The
 *    array predates gp_batch.slot_user (0.2.0), which would lift that: setup would store the
 *    Slot with gp_batch_set_slot_user, compute and teardown read b->slot_user, and `slots`,
 *    `live` and both refusals would go, with torch.h's one-pipeline rule and test_torch's check
 *    of it (gp_torch_model_free would no longer find the slots a pipeline not destroyed first
 *    left).
 *  - Modules: the loaded one runs on the host (shared by the slots' threads: TorchScript's
 *    executor locks its own compilation); each CUDA device gets one deep copy, converted to
 *    the precision, shared by that device's slots. Parameters and buffers are converted one
 *    by one, floating ones only (torch::jit::Module::to would also cast integer buffers).
 *  - Warm-up: TorchScript's profiling executor records the first run and optimizes at the
 *    second, oneDNN / cuDNN / cuBLAS initialize lazily, and PyTorch's CUDA allocator caches
 *    blocks per stream; so `warmup` runs at batch 1 once per pipeline on the host (nothing
 *    there is per slot) and per slot on CUDA, plus one run at max_batch on CUDA so the slot's
 *    stream owns a full batch's activations before traffic. Warm-up uses the whole batch
 *    path (shape checks, output copy), so a model that disagrees with the options fails
 *    gp_pipeline_create rather than the first batch.
 *  - CUDA: compute only enqueues. The slot's stream is wrapped (getStreamFromExternal) and
 *    made current for forward and the output copy; tensors forward allocates come from
 *    PyTorch's caching allocator tagged with that stream, so freeing them when compute returns
 *    is safe (a block is reused only by later work on the same stream). Setup synchronizes
 *    the stream once, after warm-up. Graph capture is refused: PyTorch's allocator would hand
 *    out memory the graph then keeps using.
 *  - Threads: at::set_num_threads is process-wide, so it is called only when the caller asks
 *    (options.intra_op_threads): at load, and again on each thread that runs a forward, before
 *    its first (a thread starts at OpenMP's default, and oneDNN's parallel regions read that
 *    before PyTorch's parallel_for would pass the setting on lazily).
 */
#include "gpupipe/torch.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/runtime/jit_exception.h>
#include <torch/script.h>
#include <torch/version.h>

#if defined(GP_TORCH_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>
#endif

#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr int kMaxSlots = 64;     /* gp_config.inflight is 1..64 */
constexpr int kMaxThreads = 1024; /* options.intra_op_threads (torch.h) */

/* A failure with its gp code, thrown inside the library and caught at the C boundary. */
struct Failure : std::runtime_error {
    int code;
    Failure(int c, const std::string &msg) : std::runtime_error(msg), code(c) {}
};

bool scalar_of(gp_dtype t, at::ScalarType *out) {
    switch (t) {
    case GP_DTYPE_F32:
        *out = at::kFloat;
        return true;
    case GP_DTYPE_U8:
        *out = at::kByte;
        return true;
    case GP_DTYPE_I64:
        *out = at::kLong;
        return true;
    case GP_DTYPE_I32:
        *out = at::kInt;
        return true;
    case GP_DTYPE_F16:
        *out = at::kHalf;
        return true;
    case GP_DTYPE_BF16:
        *out = at::kBFloat16;
        return true;
    case GP_DTYPE_U32: /* no uint32 tensors in LibTorch 1.13 (a shell type from 2.3 on) */
        return false;
    }
    return false;
}

bool dtype_of(at::ScalarType s, gp_dtype *out) {
    switch (s) {
    case at::kFloat:
        *out = GP_DTYPE_F32;
        return true;
    case at::kByte:
        *out = GP_DTYPE_U8;
        return true;
    case at::kLong:
        *out = GP_DTYPE_I64;
        return true;
    case at::kInt:
        *out = GP_DTYPE_I32;
        return true;
    case at::kHalf:
        *out = GP_DTYPE_F16;
        return true;
    case at::kBFloat16:
        *out = GP_DTYPE_BF16;
        return true;
    default:
        return false;
    }
}

std::string dims_str(const int64_t *d, size_t rank) {
    std::ostringstream s;
    for (size_t i = 0; i < rank; i++)
        s << (i ? "x" : "") << d[i];
    return s.str();
}

std::string item_str(const gp_torch_item &it) {
    return std::string(gp_dtype_name(it.dtype)) + "[" + dims_str(it.dims, (size_t)it.rank) + "]";
}

std::string tensor_str(const at::Tensor &t) {
    std::ostringstream s;
    s << c10::toString(t.scalar_type()) << t.sizes() << " on " << t.device();
    return s.str();
}

/* PyTorch's message without the C++ backtrace c10::Error appends. A TorchScript error is a
   traceback ending in the error itself ("RuntimeError: ..."): that last line comes first, so a
   truncated copy still says what went wrong. */
std::string torch_message(const std::exception &e) {
    auto *c = dynamic_cast<const c10::Error *>(&e);
    std::string msg = c ? c->what_without_backtrace() : e.what();
    size_t end = msg.find_last_not_of(" \n");
    if (end == std::string::npos) return msg;
    size_t nl = msg.rfind('\n', end);
    if (nl == std::string::npos) return msg;
    return msg.substr(nl + 1, end - nl) + "\n" + msg.substr(0, end + 1);
}

/* The error itself in a message the TorchScript interpreter re-raised: after its innermost
   (last) traceback, the first line at column 0 that starts with a name and ": " ("RuntimeError:
   ...", "builtins.ValueError: ..."). The traceback before it quotes the model's source,
   comments and string literals included: those are not the error's words. A message with no
   traceback is all error; one whose error line cannot be found has none (""). */
const char *error_words(const char *w) {
    const char *t = nullptr;
    for (const char *p = w; (p = std::strstr(p, "Traceback of TorchScript")) != nullptr; p++)
        t = p;
    if (!t) return w;
    for (const char *l = std::strchr(t, '\n'); l; l = std::strchr(l + 1, '\n')) {
        const char *s = l + 1, *q = s;
        while (std::isalnum(static_cast<unsigned char>(*q)) || *q == '_' || *q == '.')
            q++;
        if (q > s && q[0] == ':' && q[1] == ' ') return s;
    }
    return "";
}

/* Out of memory, however LibTorch reports it: std::bad_alloc itself, c10's OutOfMemoryError
   (a CUDA allocation), or the error's own words (the CPU allocator's "can't allocate memory",
   and errors the TorchScript interpreter re-raised, their type lost). Such failures are
   GP_ENOMEM, not a bad model or a failed forward. A raise in the model's own code never is,
   whatever its words (torch.h): its JITException, or, re-raised from a forked function, an
   error named "builtins.<Type>" (TorchScript's raise); nor is the model's source quoted in a
   traceback. */
bool is_oom(const std::exception &e) {
    if (dynamic_cast<const std::bad_alloc *>(&e) || dynamic_cast<const c10::OutOfMemoryError *>(&e))
        return true;
    if (dynamic_cast<const torch::jit::JITException *>(&e)) return false;
    auto *c = dynamic_cast<const c10::Error *>(&e);
    const char *w = c ? c->what_without_backtrace() : e.what();
    if (!w) return false;
    w = error_words(w);
    if (std::strncmp(w, "builtins.", 9) == 0) return false;
    /* The interpreter re-raises an op's error as a plain runtime_error: the CUDA caching
       allocator's "CUDA out of memory", a failed cudaMalloc's "CUDA error: out of memory",
       cuBLAS / cuDNN workspace allocations. */
    static const char *const oom[] = {"std::bad_alloc",
                                      "can't allocate memory",
                                      "CUDA out of memory",
                                      "CUDA error: out of memory",
                                      "CUBLAS_STATUS_ALLOC_FAILED",
                                      "CUDNN_STATUS_ALLOC_FAILED"};
    for (const char *t : oom)
        if (std::strstr(w, t)) return true;
    return false;
}

int validate_item(const gp_torch_item &it, const char *what, bool required, std::string *msg) {
    if (it.rank == 0 && !required) return GP_OK;
    std::ostringstream s;
    bool bad = true;
    if (it.rank < 1 || it.rank > GP_TORCH_MAX_RANK) {
        s << "options." << what << ".rank is " << it.rank << ": give the " << what
          << " item's shape without the batch dimension, rank 1.." << GP_TORCH_MAX_RANK;
    } else if (gp_dtype_size(it.dtype) == 0) {
        s << "options." << what << ".dtype " << (int)it.dtype << " is not a gp_dtype";
    } else if (at::ScalarType st; !scalar_of(it.dtype, &st)) {
        s << "options." << what << ".dtype " << gp_dtype_name(it.dtype)
          << " has no LibTorch tensor type (f32, u8, i64, i32, f16, bf16)";
    } else {
        size_t elems = 1;
        bad = false;
        for (int i = 0; i < it.rank && !bad; i++) {
            bad = true;
            if (it.dims[i] <= 0)
                s << "options." << what << ".dims[" << i << "] is " << it.dims[i]
                  << ": every dimension must be > 0";
            else if ((uint64_t)it.dims[i] > (SIZE_MAX >> 8) / elems) /* bytes fit size_t */
                s << "options." << what << " item is too large";
            else
                elems *= (size_t)it.dims[i], bad = false;
        }
    }
    if (!bad) return GP_OK;
    *msg = s.str();
    return GP_EINVAL;
}

size_t item_bytes(const gp_torch_item &it) {
    size_t n = gp_dtype_size(it.dtype);
    for (int i = 0; i < it.rank; i++)
        n *= (size_t)it.dims[i];
    return n;
}

std::vector<int64_t> batch_sizes(const gp_torch_item &it, int64_t n) {
    std::vector<int64_t> v{n};
    v.insert(v.end(), it.dims, it.dims + it.rank);
    return v;
}

struct DeviceModule {
    torch::jit::Module module;
    bool warmed = false; /* host: warm-up done for this pipeline */
};

struct Slot {
    std::shared_ptr<DeviceModule> dm;
    c10::Device device{c10::kCPU};
#if defined(GP_TORCH_CUDA)
    c10::optional<c10::cuda::CUDAStream> stream;
#endif
};

} // namespace

struct gp_torch_model {
    /* Immutable after load. */
    torch::jit::Module module; /* as loaded, on the CPU, eval mode */
    gp_torch_item in{}, out{};
    size_t in_bytes = 0, out_bytes = 0;
    at::ScalarType in_type = at::kFloat, out_type = at::kFloat;
    at::ScalarType compute_type = at::kFloat; /* the precision */
    int warmup = 2;
    int threads = 0; /* options.intra_op_threads */

    /* Written by compute_setup / compute_teardown (the create / destroy thread), read by
       compute after the pipeline's threads start: see the top of this file. */
    std::array<Slot *, kMaxSlots> slots{};
    std::atomic<int> live{0}; /* slots set up; configure refuses while > 0 */

    std::mutex dev_mu; /* devices: setup and teardown */
    std::map<int, std::weak_ptr<DeviceModule>> devices;

    mutable std::mutex err_mu; /* last_code, last_err: any thread */
    int last_code = GP_OK;
    std::string last_err;

    int fail(int code, const std::string &msg) {
        std::lock_guard<std::mutex> g(err_mu);
        last_code = code;
        last_err = msg;
        return code;
    }
};

namespace {

/* Record a failure whose message is built by `msg`; never throws (a message that cannot be
   built for want of memory is replaced by a fixed one). @return code. */
template <class F> int record(gp_torch_model &m, int code, F &&msg) noexcept {
    try {
        return m.fail(code, msg());
    } catch (...) {
        try {
            return m.fail(code, "(the message was lost: out of memory)");
        } catch (...) {
            return code;
        }
    }
}

/* Copy the message `msg` builds into err/len; never throws. @return code. */
template <class F> int put_err(char *err, size_t len, int code, F &&msg) noexcept {
    if (!err || !len) return code;
    try {
        std::snprintf(err, len, "%s", std::string(msg()).c_str());
    } catch (...) {
        std::snprintf(err, len, "%s", "(the message was lost: out of memory)");
    }
    return code;
}

/* The result of forward, checked against the output item for a batch of n. */
void check_result(const gp_torch_model &m, const at::Tensor &y, int64_t n, const c10::Device &dev) {
    /* One value per item: [N] stands for the output item {1}. */
    bool shape_ok = y.sizes().vec() == batch_sizes(m.out, n) ||
                    (m.out.rank == 1 && m.out.dims[0] == 1 && y.dim() == 1 && y.size(0) == n);
    bool type_ok = y.scalar_type() == m.out_type ||
                   (m.compute_type != at::kFloat && y.scalar_type() == m.compute_type &&
                    at::isFloatingType(m.out_type));
    if (shape_ok && type_ok && y.device() == dev) return;
    std::ostringstream s;
    s << "forward returned " << tensor_str(y) << ", expected " << c10::toString(m.out_type) << "["
      << n << (m.out.rank ? ", " : "");
    for (int i = 0; i < m.out.rank; i++)
        s << (i ? ", " : "") << m.out.dims[i];
    s << "] on " << dev << " (output item " << item_str(m.out) << ", batch of " << n
      << "): make the model return that, or set options.output to what it returns";
    throw Failure(GP_ECOMPUTE, s.str());
}

/* options.intra_op_threads on the calling thread before its first forward (see the top of this
   file); at::set_num_threads also drops oneDNN's caches, so once per thread and value. */
void apply_threads(const gp_torch_model &m) {
    static thread_local int applied = 0;
    if (m.threads > 0 && applied != m.threads) {
        at::set_num_threads(m.threads);
        applied = m.threads;
    }
}

/* forward on x ([n, *input] on the slot's device), checked, written into `out` (n output
   items on the slot's device; may be null when only the result is wanted). */
at::Tensor run(const gp_torch_model &m, torch::jit::Module &mod, at::Tensor x, void *out, int64_t n,
               const c10::Device &dev) {
    apply_threads(m);
    /* FP16/BF16: a floating input follows the converted parameters (FP32 passes it as is). */
    if (m.compute_type != at::kFloat && m.compute_type != x.scalar_type() &&
        at::isFloatingType(x.scalar_type()))
        x = x.to(m.compute_type);
    c10::IValue r = mod.forward({x});
    if (!r.isTensor())
        throw Failure(GP_ECOMPUTE, "forward returned a " + r.tagKind() +
                                       ", not one tensor: return a single tensor "
                                       "(torch.cat or torch.stack several)");
    at::Tensor y = r.toTensor();
    check_result(m, y, n, dev);
    if (out) {
        at::Tensor o = at::from_blob(out, batch_sizes(m.out, n),
                                     at::TensorOptions().dtype(m.out_type).device(dev));
        o.view(y.sizes()).copy_(y, /*non_blocking=*/true); /* stream-ordered on CUDA */
    }
    return y;
}

/* The module for `dev`: the loaded one on the CPU in fp32, else one converted deep copy per
   device, shared by that device's slots. */
std::shared_ptr<DeviceModule> device_module(gp_torch_model &m, const c10::Device &dev) {
    std::lock_guard<std::mutex> g(m.dev_mu);
    int key = dev.is_cpu() ? -1 : dev.index();
    if (auto dm = m.devices[key].lock()) return dm;
    auto dm = std::make_shared<DeviceModule>();
    if (dev.is_cpu() && m.compute_type == at::kFloat) {
        dm->module = m.module;
    } else {
        dm->module = m.module.deepcopy();
        /* FP32 means "as saved": only FP16/BF16 change floating tensors' types. */
        bool cast = m.compute_type != at::kFloat;
        auto convert = [&](at::Tensor t) {
            at::ScalarType st =
                cast && at::isFloatingType(t.scalar_type()) ? m.compute_type : t.scalar_type();
            t.set_data(t.to(dev, st));
        };
        for (const at::Tensor &t : dm->module.parameters())
            convert(t);
        for (const at::Tensor &t : dm->module.buffers())
            convert(t);
    }
    m.devices[key] = dm;
    return dm;
}

void warm(gp_torch_model &m, Slot &s, const gp_batch *b) {
    auto zeros = [&](int64_t n) {
        return at::zeros(batch_sizes(m.in, n),
                         at::TensorOptions().dtype(m.in_type).device(s.device));
    };
    for (int i = 0; i < m.warmup; i++)
        run(m, s.dm->module, zeros(1), b->out, 1, s.device);
    if (!s.device.is_cpu() && m.warmup > 0 && b->capacity > 1)
        run(m, s.dm->module, zeros((int64_t)b->capacity), b->out, (int64_t)b->capacity, s.device);
}

int setup_impl(gp_torch_model &m, const gp_batch *b) {
    if (b->slot < 0 || b->slot >= kMaxSlots)
        throw Failure(GP_EINVAL, "slot index " + std::to_string(b->slot) + " is out of range");
    if (m.slots[b->slot])
        throw Failure(GP_EINVAL,
                      "slot " + std::to_string(b->slot) +
                          " is already set up: this gp_torch_model serves another live "
                          "pipeline; one pipeline per model at a time: load the file again "
                          "for a second pipeline");
    auto s = std::make_unique<Slot>();
    if (b->backend == GP_BACKEND_CUDA) {
#if defined(GP_TORCH_CUDA)
        if (!torch::cuda::is_available())
            throw Failure(GP_ENODEV, "the pipeline runs on CUDA device " +
                                         std::to_string(b->device) +
                                         " but LibTorch sees no CUDA device "
                                         "(torch::cuda::is_available() is false): is this "
                                         "LibTorch built for this driver?");
        if (b->device >= (int)torch::cuda::device_count())
            throw Failure(GP_ENODEV,
                          "LibTorch sees " + std::to_string(torch::cuda::device_count()) +
                              " CUDA devices, the slot is on device " + std::to_string(b->device));
        s->device = c10::Device(c10::kCUDA, (c10::DeviceIndex)b->device);
        s->stream = c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(b->stream),
                                                     (c10::DeviceIndex)b->device);
#else
        throw Failure(GP_ENOTSUP,
                      "the pipeline runs on the CUDA backend but this libgpupipe-torch was "
                      "built against a LibTorch without CUDA (or without gpupipe's CUDA "
                      "backend): use backend host, or rebuild against a CUDA LibTorch "
                      "(-DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; "
                      "print(torch.utils.cmake_prefix_path)'))");
#endif
    } else if (b->backend != GP_BACKEND_HOST) {
        throw Failure(GP_EINVAL, "unknown backend " + std::to_string((int)b->backend));
    }
    s->dm = device_module(m, s->device);
    if (m.warmup > 0) {
        c10::InferenceMode inference;
        try {
            if (s->device.is_cpu()) {
                if (!s->dm->warmed) warm(m, *s, b);
                s->dm->warmed = true;
            }
#if defined(GP_TORCH_CUDA)
            if (s->stream) {
                c10::cuda::CUDAStreamGuard guard(*s->stream);
                warm(m, *s, b);
                s->stream->synchronize(); /* setup may block; compute never does */
            }
#endif
        } catch (const std::exception &e) {
            throw Failure(is_oom(e) ? GP_ENOMEM : GP_EMODEL,
                          std::string(is_oom(e) ? "out of memory: " : "") +
                              "warm-up forward on zero inputs " + item_str(m.in) + " failed on " +
                              s->device.str() + ": " + torch_message(e));
        }
    }
    m.slots[b->slot] = s.release();
    m.live.fetch_add(1, std::memory_order_relaxed);
    return GP_OK;
}

/* As record, and the same message to the pipeline (gp_batch_set_error): create's error, or the
   pipeline's for a failed batch, then says why, not only that the compute failed. The message
   is built once: another slot's failure recorded meanwhile cannot take its place. */
template <class F> int record_b(gp_torch_model &m, const gp_batch *b, int code, F &&msg) noexcept {
    const char *lost = "(the message was lost: out of memory)";
    try {
        std::string text = msg();
        try {
            m.fail(code, text);
        } catch (...) { /* the lock or the copy failing: the pipeline still gets the text */
        }
        gp_batch_set_error(b, "%s", text.c_str());
    } catch (...) {
        record(m, code, [&] { return std::string(lost); });
        gp_batch_set_error(b, "%s", lost);
    }
    return code;
}

int torch_setup(void *user, const gp_batch *b) noexcept {
    auto *m = static_cast<gp_torch_model *>(user);
    auto where = [&] { return "compute_setup, slot " + std::to_string(b->slot) + ": "; };
    try {
        return setup_impl(*m, b);
    } catch (const Failure &f) {
        return record_b(*m, b, f.code, [&] { return where() + f.what(); });
    } catch (const std::exception &e) { /* std::bad_alloc too: is_oom */
        bool oom = is_oom(e);
        return record_b(*m, b, oom ? GP_ENOMEM : GP_EMODEL, [&] {
            return where() + (oom ? "out of memory: " : "") + torch_message(e);
        });
    } catch (...) {
        return record_b(*m, b, GP_EMODEL, [&] { return where() + "unknown exception"; });
    }
}

void torch_teardown(void *user, const gp_batch *b) noexcept {
    auto *m = static_cast<gp_torch_model *>(user);
    if (b->slot < 0 || b->slot >= kMaxSlots || !m->slots[b->slot]) return;
    Slot *s = m->slots[b->slot];
    m->slots[b->slot] = nullptr;
    m->live.fetch_sub(1, std::memory_order_relaxed);
    try {
        std::lock_guard<std::mutex> g(m->dev_mu);
        delete s;   /* the last slot of a device frees its module copy */
    } catch (...) { /* a destructor that throws: nothing to report it to */
    }
}

int torch_compute(void *user, const gp_batch *b) noexcept {
    auto *m = static_cast<gp_torch_model *>(user);
    Slot *s = b->slot >= 0 && b->slot < kMaxSlots ? m->slots[b->slot] : nullptr;
    if (!s)
        return record_b(*m, b, GP_EINVAL, [&] {
            return "compute for slot " + std::to_string(b->slot) +
                   " that was not set up: keep the compute_setup gp_torch_configure put in the "
                   "config";
        });
    auto where = [&] {
        return "slot " + std::to_string(b->slot) + ", batch of " + std::to_string(b->n) +
               " items at seq " + std::to_string(b->first_seq) + ": ";
    };
    try {
        c10::InferenceMode inference;
        int64_t n = (int64_t)b->n;
#if defined(GP_TORCH_CUDA)
        if (s->stream) {
            cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
            if (cudaStreamIsCapturing(s->stream->stream(), &cap) == cudaSuccess &&
                cap != cudaStreamCaptureStatusNone)
                return record_b(*m, b, GP_ENOTSUP, [&] {
                    return where() + "CUDA graph capture is not supported by the LibTorch "
                                     "compute (PyTorch's allocator would give the graph memory "
                                     "it reuses): set cuda_graphs = 0";
                });
            c10::cuda::CUDAStreamGuard guard(*s->stream);
            at::Tensor x = at::from_blob(const_cast<void *>(b->in), batch_sizes(m->in, n),
                                         at::TensorOptions().dtype(m->in_type).device(s->device));
            run(*m, s->dm->module, x, b->out, n, s->device);
            return GP_OK;
        }
#endif
        at::Tensor x = at::from_blob(const_cast<void *>(b->in), batch_sizes(m->in, n),
                                     at::TensorOptions().dtype(m->in_type));
        run(*m, s->dm->module, x, b->out, n, s->device);
        return GP_OK;
    } catch (const Failure &f) {
        return record_b(*m, b, f.code, [&] { return where() + f.what(); });
    } catch (const std::exception &e) { /* std::bad_alloc too: is_oom */
        bool oom = is_oom(e);
        return record_b(*m, b, oom ? GP_ENOMEM : GP_ECOMPUTE, [&] {
            return where() + (oom ? "forward ran out of memory: " : "forward failed: ") +
                   torch_message(e);
        });
    } catch (...) {
        return record_b(*m, b, GP_ECOMPUTE,
                        [&] { return where() + "forward threw an unknown exception"; });
    }
}

int load_impl(const char *path, const gp_torch_options &o, std::unique_ptr<gp_torch_model> &m) {
    std::string msg;
    int rc;
    if ((rc = validate_item(o.input, "input", true, &msg)) != GP_OK) throw Failure(rc, msg);
    if ((rc = validate_item(o.output, "output", false, &msg)) != GP_OK) throw Failure(rc, msg);
    switch (o.precision) {
    case GP_PRECISION_FP32:
        m->compute_type = at::kFloat;
        break;
    case GP_PRECISION_FP16:
        m->compute_type = at::kHalf;
        break;
    case GP_PRECISION_BF16:
        m->compute_type = at::kBFloat16;
        break;
    case GP_PRECISION_TF32:
        throw Failure(GP_EINVAL, "options.precision TF32: TF32 is a process-wide PyTorch switch "
                                 "(torch.backends.cuda.matmul.allow_tf32, "
                                 "at::globalContext().setAllowTF32CuBLAS): set it in your "
                                 "program and keep precision FP32");
    default:
        throw Failure(GP_EINVAL, "options.precision " + std::to_string((int)o.precision) +
                                     " is not FP32, FP16 or BF16");
    }
    if (o.warmup < 0) throw Failure(GP_EINVAL, "options.warmup is negative");
    if (o.intra_op_threads < 0) throw Failure(GP_EINVAL, "options.intra_op_threads is negative");
    if (o.intra_op_threads > kMaxThreads)
        throw Failure(GP_EINVAL, "options.intra_op_threads is " +
                                     std::to_string(o.intra_op_threads) + ", more than " +
                                     std::to_string(kMaxThreads));
    m->threads = o.intra_op_threads;
    m->in = o.input;
    m->warmup = o.warmup;
    scalar_of(m->in.dtype, &m->in_type);
    m->in_bytes = item_bytes(m->in);

    /* torch::jit::load's message for a missing file is about zip archives: say it plainly. */
    std::FILE *f = std::fopen(path, "rb");
    if (!f)
        throw Failure(GP_EIO, std::string("cannot open '") + path + "': " + std::strerror(errno));
    /* A directory opens, and fails its first read (EISDIR): not a file either. */
    errno = 0;
    if (std::fgetc(f) == EOF && std::ferror(f)) {
        int e = errno;
        std::fclose(f);
        throw Failure(GP_EIO,
                      std::string("cannot read '") + path + "': " + std::strerror(e ? e : EIO));
    }
    std::fclose(f);
    try {
        m->module = torch::jit::load(path, c10::Device(c10::kCPU));
    } catch (const std::exception &e) {
        if (is_oom(e))
            throw Failure(GP_ENOMEM,
                          std::string("out of memory loading '") + path + "': " + torch_message(e));
        throw Failure(GP_EMODEL, std::string("'") + path +
                                     "' is not a TorchScript file torch::jit::load can read "
                                     "(save one with torch.jit.script(model).save(path) or "
                                     "torch.jit.trace): " +
                                     torch_message(e));
    }
    if (!m->module.find_method("forward"))
        throw Failure(GP_EMODEL, std::string("'") + path + "' has no forward method");
    m->module.eval();
    if (o.intra_op_threads > 0) at::set_num_threads(o.intra_op_threads);

    if (o.output.rank > 0) {
        m->out = o.output;
    } else { /* one forward at batch 2 on the CPU, in the module's own precision */
        c10::InferenceMode inference;
        at::Tensor y;
        try {
            c10::IValue r =
                m->module.forward({at::zeros(batch_sizes(m->in, 2), at::dtype(m->in_type))});
            if (!r.isTensor())
                throw Failure(GP_EMODEL, "forward returned a " + r.tagKind() +
                                             ", not one tensor: return a single tensor");
            y = r.toTensor();
        } catch (const Failure &) {
            throw;
        } catch (const std::exception &e) {
            if (is_oom(e))
                throw Failure(GP_ENOMEM, "out of memory finding the output item (forward on 2 "
                                         "zero items " +
                                             item_str(m->in) + "): " + torch_message(e));
            throw Failure(GP_EMODEL, "finding the output item: forward on 2 zero items " +
                                         item_str(m->in) + " failed: " + torch_message(e) +
                                         " (check options.input, or set options.output to "
                                         "skip this forward)");
        }
        if (y.dim() < 1 || y.size(0) != 2 || y.dim() > GP_TORCH_MAX_RANK + 1)
            throw Failure(GP_EMODEL, "finding the output item: forward on 2 items returned " +
                                         tensor_str(y) +
                                         ": the first dimension must be the batch and the item "
                                         "rank at most " +
                                         std::to_string(GP_TORCH_MAX_RANK));
        if (!dtype_of(y.scalar_type(), &m->out.dtype))
            throw Failure(GP_EMODEL, std::string("forward returns ") +
                                         c10::toString(y.scalar_type()) +
                                         ", which has no gp_dtype (f32, u8, i64, i32, f16, bf16)");
        if (y.dim() == 1) {
            m->out.rank = 1;
            m->out.dims[0] = 1;
        } else {
            m->out.rank = (int)y.dim() - 1;
            for (int i = 0; i < m->out.rank; i++)
                m->out.dims[i] = y.size(i + 1);
        }
        /* The rule a given output item meets: every dimension > 0, its bytes within size_t
           (a view can claim more elements than memory holds: the pipeline would size its
           buffers from a wrapped product). */
        std::string why;
        if (validate_item(m->out, "output", true, &why) != GP_OK)
            throw Failure(GP_EMODEL, "finding the output item: forward on 2 items returned " +
                                         tensor_str(y) +
                                         ": its item has a dimension of 0 or is too large");
    }
    scalar_of(m->out.dtype, &m->out_type);
    m->out_bytes = item_bytes(m->out);
    return GP_OK;
}

} // namespace

extern "C" {

void gp_torch_options_init(gp_torch_options *o) {
    if (!o) return;
    std::memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->input.dtype = GP_DTYPE_F32;
    o->output.dtype = GP_DTYPE_F32;
    o->precision = GP_PRECISION_FP32;
    o->warmup = 2;
    o->intra_op_threads = 0;
}

int gp_torch_model_load(const char *path, const gp_torch_options *opt, gp_torch_model **out,
                        char *err, size_t err_len) {
    if (out) *out = nullptr;
    if (!path || !opt || !out)
        return put_err(err, err_len, GP_EINVAL, [&] {
            return !opt ? "options are required: the input item's dtype and shape"
                        : "NULL argument";
        });
    /* Larger than this library's struct: a caller built against a newer header, whose new
       fields would be ignored without a word (gp_config does the same). */
    if (opt->struct_size < offsetof(gp_torch_options, precision) ||
        opt->struct_size > sizeof(gp_torch_options))
        return put_err(err, err_len, GP_EINVAL, [] {
            return "options.struct_size is not a gp_torch_options size of this library (too "
                   "small, or from a newer header): fill the options with "
                   "gp_torch_options_init()";
        });
    gp_torch_options o;
    gp_torch_options_init(&o);
    std::memcpy(&o, opt, opt->struct_size);
    try {
        std::unique_ptr<gp_torch_model> m(new gp_torch_model);
        load_impl(path, o, m);
        *out = m.release();
        return GP_OK;
    } catch (const Failure &f) {
        return put_err(err, err_len, f.code, [&] { return f.what(); });
    } catch (const std::bad_alloc &) {
        return put_err(err, err_len, GP_ENOMEM, [] { return "out of memory"; });
    } catch (const std::exception &e) {
        return put_err(err, err_len, is_oom(e) ? GP_ENOMEM : GP_EMODEL, [&] {
            return std::string(is_oom(e) ? "out of memory " : "") + "loading '" + path +
                   "': " + torch_message(e);
        });
    } catch (...) {
        return put_err(err, err_len, GP_EMODEL, [] { return "loading: unknown exception"; });
    }
}

void gp_torch_model_free(gp_torch_model *m) {
    if (!m) return;
    try {
        for (Slot *&s : m->slots) { /* a pipeline not destroyed first: best effort */
            delete s;
            s = nullptr;
        }
        delete m;
    } catch (...) {
    }
}

int gp_torch_input(const gp_torch_model *m, gp_torch_item *item) {
    if (!m || !item) return GP_EINVAL;
    *item = m->in;
    return GP_OK;
}

int gp_torch_output(const gp_torch_model *m, gp_torch_item *item) {
    if (!m || !item) return GP_EINVAL;
    *item = m->out;
    return GP_OK;
}

size_t gp_torch_input_bytes(const gp_torch_model *m) {
    return m ? m->in_bytes : 0;
}

size_t gp_torch_output_bytes(const gp_torch_model *m) {
    return m ? m->out_bytes : 0;
}

int gp_torch_configure(gp_torch_model *m, gp_config *cfg) {
    if (!m || !cfg) return GP_EINVAL;
    if (cfg->struct_size < offsetof(gp_config, prep_workers))
        return record(*m, GP_EINVAL, [&] {
            return "gp_torch_configure: cfg->struct_size is " + std::to_string(cfg->struct_size) +
                   ", under the " + std::to_string(offsetof(gp_config, prep_workers)) +
                   " bytes this library sets: fill the config with gp_config_init";
        });
    int live = m->live.load(std::memory_order_relaxed);
    if (live > 0)
        return record(*m, GP_EINVAL, [&] {
            return "gp_torch_configure: the model serves a live pipeline (" + std::to_string(live) +
                   " slots set up); one pipeline per model at a time: destroy that pipeline "
                   "first, or load the file again";
        });
    cfg->item_in_bytes = m->in_bytes;
    cfg->item_out_bytes = m->out_bytes;
    /* Fixed-size items: the variable-size fields a config configured for a token gp_model
       holds are cleared, as far as its struct_size reaches (torch.h). */
#define REACHES(f) (cfg->struct_size >= offsetof(gp_config, f) + sizeof cfg->f)
    if (REACHES(max_item_in_bytes)) cfg->max_item_in_bytes = 0;
    if (REACHES(max_item_out_bytes)) cfg->max_item_out_bytes = 0;
    if (REACHES(arena_bytes)) cfg->arena_bytes = 0;
    if (REACHES(max_batch_bytes)) cfg->max_batch_bytes = 0;
    if (REACHES(item_in_multiple)) cfg->item_in_multiple = 0;
#undef REACHES
    cfg->compute = torch_compute;
    cfg->compute_user = m;
    cfg->compute_setup = torch_setup;
    cfg->compute_teardown = torch_teardown;
    return GP_OK;
}

int gp_torch_last_error(const gp_torch_model *m, char *buf, size_t len) {
    if (buf && len) buf[0] = '\0';
    if (!m) return GP_EINVAL;
    try {
        std::lock_guard<std::mutex> g(m->err_mu);
        if (buf && len) std::snprintf(buf, len, "%s", m->last_err.c_str());
        return m->last_code;
    } catch (...) { /* std::mutex::lock failing */
        if (buf && len) buf[0] = '\0';
        return GP_ESYS;
    }
}

int gp_torch_has_cuda(void) {
#if defined(GP_TORCH_CUDA)
    return 1;
#else
    return 0;
#endif
}

const char *gp_torch_version(void) {
    return TORCH_VERSION;
}

} // extern "C"
