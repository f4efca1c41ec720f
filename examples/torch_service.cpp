// torch_service: your own PyTorch model behind the pipeline. A TorchScript ResNet-18 classifier
// (u8 224x224 RGB images in, the 5 best classes out; examples/make_resnet18_ts.py writes it)
// serves several producer threads, which write their images straight into the pipeline's ring
// (reserve/commit). The pipeline batches them; each batch runs the model's forward on the slot's
// stream (on the GPU when this build's LibTorch has CUDA and a device is usable, else on the
// host backend), and only 5 int64 per image come back.
//
// usage: torch_service MODEL.pt [IMAGES.u8 LOGITS.f32]
//   With the two files (make_resnet18_ts.py MODEL.pt --images N DIR) the images come from
//   there and every top-5 is checked against PyTorch eager logits: each class returned must
//   hold the logit eager ranks at that position (up to near-ties). Without them, synthetic
//   images, and the first results are printed.
#include <gpupipe/gpupipe.h>
#include <gpupipe/torch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <thread>
#include <vector>

namespace {

constexpr int kSize = 224, kTop = 5, kClasses = 1000, kProducers = 4, kPerProducer = 12;
constexpr std::size_t kImageBytes = std::size_t(kSize) * kSize * 3;

struct Result { // one per image: alive until its callback has run
    std::atomic<int> calls{0};
    int status = GP_OK;
    std::array<int64_t, kTop> top{};
};

// Runs on a completion worker; `out` is valid only during the call: copy it out.
void on_top5(void *user, int status, const void *out, std::size_t bytes) {
    auto *r = static_cast<Result *>(user);
    r->status = status;
    if (status == GP_OK && bytes == sizeof r->top) std::memcpy(r->top.data(), out, bytes);
    r->calls.fetch_add(1, std::memory_order_release);
}

std::vector<char> read_all(const char *path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

// A synthetic photo: a colour gradient whose slope depends on the image number.
void draw(uint8_t *img, int n) {
    for (int y = 0; y < kSize; y++)
        for (int x = 0; x < kSize; x++) {
            uint8_t *px = img + (std::size_t(y) * kSize + x) * 3;
            px[0] = uint8_t(x * (n % 7 + 1));
            px[1] = uint8_t(y * (n % 5 + 1));
            px[2] = uint8_t((x + y) * (n % 3 + 1));
        }
}

// The largest gap between the logit of the class returned at rank k and the k-th largest logit,
// relative to the largest |logit|: 0 when the order agrees, small at near-ties.
double top5_gap(const float *logits, const std::array<int64_t, kTop> &top) {
    std::vector<float> sorted(logits, logits + kClasses);
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    double scale = 0, gap = 0;
    for (int c = 0; c < kClasses; c++)
        scale = std::max(scale, double(std::fabs(logits[c])));
    for (int k = 0; k < kTop; k++) {
        if (top[k] < 0 || top[k] >= kClasses) return INFINITY;
        for (int j = 0; j < k; j++)
            if (top[j] == top[k]) return INFINITY;
        gap = std::max(gap, std::fabs(double(logits[top[k]]) - double(sorted[k])));
    }
    return gap / scale;
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 2 && argc != 4) {
        std::fprintf(stderr, "usage: %s MODEL.pt [IMAGES.u8 LOGITS.f32]\n", argv[0]);
        return 2;
    }
    std::vector<char> images, logits;
    int n = kProducers * kPerProducer;
    if (argc == 4) {
        images = read_all(argv[2]);
        logits = read_all(argv[3]);
        n = int(images.size() / kImageBytes);
        if (n == 0 || images.size() != n * kImageBytes ||
            logits.size() != std::size_t(n) * kClasses * sizeof(float)) {
            std::fprintf(stderr, "%s / %s: expected N images of %zu bytes and N x %d logits\n",
                         argv[2], argv[3], kImageBytes, kClasses);
            return 1;
        }
    }
    try {
        // The five lines: load (output item found by one forward), configure, create.
        gpupipe::TorchModel model(argv[1], gpupipe::torch_item(GP_DTYPE_U8, {kSize, kSize, 3}));
        gp_config cfg;
        gp_config_init(&cfg);
        model.configure(cfg);
        // CUDA needs a LibTorch with CUDA: with a CPU-only one, stay on the host.
        cfg.backend = gp_torch_has_cuda() ? GP_BACKEND_AUTO : GP_BACKEND_HOST;
        cfg.max_batch = 16;
        cfg.max_delay_us = 2000;
        cfg.inflight = 2;
        gp_torch_item out = model.output();
        if (out.dtype != GP_DTYPE_I64 || out.rank != 1 || out.dims[0] != kTop) {
            std::fprintf(stderr, "%s returns %s x %lld per image, expected i64[5]\n", argv[1],
                         gp_dtype_name(out.dtype), (long long)out.dims[0]);
            return 1;
        }
        gp_pipeline *p = nullptr;
        char err[512];
        int rc = gp_pipeline_create(&cfg, &p, err, sizeof err);
        if (rc != GP_OK) {
            std::fprintf(stderr, "create: %s: %s\n  %s\n", gp_err_name(rc), err,
                         model.last_error().c_str());
            return 1;
        }

        std::vector<Result> results(n);
        std::vector<std::thread> producers;
        std::atomic<int> submit_errors{0};
        for (int t = 0; t < kProducers; t++)
            producers.emplace_back([&, t] {
                for (int i = t; i < n; i += kProducers) {
                    gp_reservation r;
                    if (gp_pipeline_reserve(p, &r) != GP_OK) {
                        submit_errors++;
                        return;
                    }
                    if (images.empty()) // write the image in place, in the ring
                        draw(static_cast<uint8_t *>(r.data), i);
                    else
                        std::memcpy(r.data, images.data() + std::size_t(i) * kImageBytes,
                                    kImageBytes);
                    if (gp_pipeline_commit(p, &r, on_top5, &results[i]) != GP_OK) {
                        submit_errors++;
                        return;
                    }
                }
            });
        for (auto &t : producers)
            t.join();
        gp_pipeline_drain(p, -1);
        gp_pipeline_report(p, stdout);
        rc = gp_pipeline_destroy(p, GP_DESTROY_DRAIN);

        int failed = submit_errors.load(), wrong = 0;
        double worst = 0;
        for (int i = 0; i < n; i++) {
            const Result &r = results[i];
            if (r.calls.load(std::memory_order_acquire) != 1 || r.status != GP_OK) {
                if (failed++ < 3)
                    std::fprintf(stderr, "image %d: %d callbacks, %s\n", i, r.calls.load(),
                                 gp_err_name(r.status));
                continue;
            }
            if (i < 4)
                std::printf("image %2d: top-5 classes %lld %lld %lld %lld %lld\n", i,
                            (long long)r.top[0], (long long)r.top[1], (long long)r.top[2],
                            (long long)r.top[3], (long long)r.top[4]);
            if (!logits.empty()) {
                double gap =
                    top5_gap(reinterpret_cast<const float *>(logits.data()) + i * kClasses, r.top);
                worst = std::max(worst, gap);
                if (!(gap <= 5e-3)) wrong++; // TF32 convolutions on a GPU stay far below this
            }
        }
        if (failed) std::fprintf(stderr, "last error: %s\n", model.last_error().c_str());
        std::printf("%d images, %d failed", n, failed);
        if (!logits.empty()) // compared only with the reference files
            std::printf(", %d top-5 lists disagree with PyTorch eager (largest logit gap %.2g)",
                        wrong, worst);
        std::printf("\n");
        return failed || wrong || rc != GP_OK;
    } catch (const gpupipe::TorchError &e) {
        std::fprintf(stderr, "%s: %s\n", gp_err_name(e.code()), e.what());
        return 1;
    }
}
