// gpupipe/torch.hpp — C++17 convenience over gpupipe/torch.h: ownership and exceptions.
//
//     gpupipe::TorchModel model("resnet18.pt", gpupipe::torch_item(GP_DTYPE_U8, {224, 224, 3}));
//     gp_config cfg;
//     gp_config_init(&cfg);
//     model.configure(cfg);
//     gp_pipeline_create(&cfg, &p, err, sizeof err);
//
// Header-only over the C API of libgpupipe-torch (link gpupipe::gpupipe_torch, or pkg-config
// gpupipe-torch): no LibTorch headers, no LibTorch build flags, any C++17 compiler. Failures
// throw gpupipe::TorchError carrying the GP_E* code and the library's message; nothing else
// here throws except std::bad_alloc. Semantics, copies and threading: gpupipe/torch.h.
#ifndef GPUPIPE_TORCH_HPP
#define GPUPIPE_TORCH_HPP

#include <gpupipe/torch.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

namespace gpupipe {

// A failed gpupipe-torch call: code() is the GP_E* code, what() the detail.
class TorchError : public std::runtime_error {
  public:
    TorchError(int code, const std::string &what) : std::runtime_error(what), code_(code) {}
    int code() const noexcept {
        return code_;
    }

  private:
    int code_;
};

// One item (no batch dimension): torch_item(GP_DTYPE_F32, {3, 224, 224}).
inline gp_torch_item torch_item(gp_dtype dtype, std::initializer_list<int64_t> dims) {
    if (dims.size() < 1 || dims.size() > GP_TORCH_MAX_RANK)
        throw TorchError(GP_EINVAL, "torch_item: rank " + std::to_string(dims.size()) +
                                        ", expected 1.." + std::to_string(GP_TORCH_MAX_RANK));
    gp_torch_item it{};
    it.dtype = dtype;
    it.rank = static_cast<int>(dims.size());
    int i = 0;
    for (int64_t d : dims)
        it.dims[i++] = d;
    return it;
}

// A loaded TorchScript model; frees it on destruction (after the pipeline using it is
// destroyed: destroy the pipeline first). Movable, not copyable.
class TorchModel {
  public:
    // Load with full options (gp_torch_options_init, then set them).
    TorchModel(const std::string &path, const gp_torch_options &opt) {
        char err[2048] = "";
        int rc = gp_torch_model_load(path.c_str(), &opt, &m_, err, sizeof err);
        if (rc != GP_OK) throw TorchError(rc, err);
    }
    // Load with the input item, and the output item (found at load when rank 0).
    explicit TorchModel(const std::string &path, const gp_torch_item &input,
                        const gp_torch_item &output = gp_torch_item{})
        : TorchModel(path, options(input, output)) {}

    TorchModel(TorchModel &&o) noexcept : m_(std::exchange(o.m_, nullptr)) {}
    TorchModel &operator=(TorchModel &&o) noexcept {
        if (this != &o) {
            gp_torch_model_free(m_);
            m_ = std::exchange(o.m_, nullptr);
        }
        return *this;
    }
    TorchModel(const TorchModel &) = delete;
    TorchModel &operator=(const TorchModel &) = delete;
    ~TorchModel() {
        gp_torch_model_free(m_);
    }

    // Make the model cfg's compute (gp_torch_configure).
    void configure(gp_config &cfg) {
        int rc = gp_torch_configure(m_, &cfg);
        if (rc != GP_OK) throw TorchError(rc, last_error_or(gp_strerror(rc)));
    }

    std::size_t input_bytes() const noexcept {
        return gp_torch_input_bytes(m_);
    }
    std::size_t output_bytes() const noexcept {
        return gp_torch_output_bytes(m_);
    }
    gp_torch_item input() const noexcept {
        gp_torch_item it{};
        gp_torch_input(m_, &it);
        return it;
    }
    gp_torch_item output() const noexcept {
        gp_torch_item it{};
        gp_torch_output(m_, &it);
        return it;
    }

    // The last failure inside the pipeline's use of the model (gp_torch_last_error).
    std::string last_error() const {
        return last_error_or("");
    }
    int last_error_code() const noexcept {
        return gp_torch_last_error(m_, nullptr, 0);
    }

    gp_torch_model *get() const noexcept {
        return m_;
    }

  private:
    static gp_torch_options options(const gp_torch_item &input, const gp_torch_item &output) {
        gp_torch_options o;
        gp_torch_options_init(&o);
        o.input = input;
        o.output = output;
        return o;
    }
    std::string last_error_or(const char *fallback) const {
        char buf[4096] = "";
        gp_torch_last_error(m_, buf, sizeof buf);
        return buf[0] ? std::string(buf) : std::string(fallback);
    }

    gp_torch_model *m_ = nullptr;
};

} // namespace gpupipe

#endif // GPUPIPE_TORCH_HPP
