// torch-bench: gpupipe + LibTorch on a TorchScript model, the third contender of
// bench/torch-bench.py (which runs the two PyTorch ones on the same file). Producer threads
// submit random items as fast as the ring takes them; prints one JSON line.
//
// usage: torch-bench --model PT --input u8:64x64x3 [--items N] [--producers P]
//                    [--max-batch B] [--inflight K] [--delay-us D] [--threads T]
//                    [--warmup W] [--capacity C] [--backend host|cuda|auto] [--first-batch]
//
//   items/s: N over first submit -> last callback. Latency per item: from the submit call
//   (before any wait for ring space) to its callback, so it includes the queueing a closed
//   loop of P producers builds (bounded by the ring: --capacity, a power of two >= max_batch;
//   default 4 x max_batch x inflight); p50/p99 over all items. --threads sets PyTorch's intra-op
//   threads (process-wide; each slot's forward uses that many). --first-batch: time
//   gp_pipeline_create (which runs the warm-up) and the first two single-item inferences.
#include <gpupipe/gpupipe.h>
#include <gpupipe/torch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

struct Args {
    std::string model, input = "u8:64x64x3", backend = "host";
    long items = 5120, producers = 8, max_batch = 256, inflight = 2, delay_us = 0, threads = 0,
         warmup = 2, capacity = 0;
    bool first_batch = false;
};

[[noreturn]] void usage(const char *why) {
    std::fprintf(stderr,
                 "torch-bench: %s\nusage: torch-bench --model PT --input DTYPE:DxDxD [--items N] "
                 "[--producers P] [--max-batch B] [--inflight K] [--delay-us D] [--threads T] "
                 "[--warmup W] [--capacity C] [--backend host|cuda|auto] [--first-batch]\n",
                 why);
    std::exit(2);
}

Args parse(int argc, char **argv) {
    Args a;
    for (int i = 1; i < argc; i++) {
        std::string k = argv[i];
        if (k == "--first-batch") {
            a.first_batch = true;
            continue;
        }
        if (i + 1 >= argc) usage(("missing value for " + k).c_str());
        const char *v = argv[++i];
        char *end = nullptr;
        long n = std::strtol(v, &end, 10);
        bool num = end && *end == '\0' && n >= 0;
        std::pair<const char *, long *> nums[] = {
            {"--items", &a.items},         {"--producers", &a.producers},
            {"--max-batch", &a.max_batch}, {"--inflight", &a.inflight},
            {"--delay-us", &a.delay_us},   {"--threads", &a.threads},
            {"--warmup", &a.warmup},       {"--capacity", &a.capacity}};
        if (k == "--model") {
            a.model = v;
            continue;
        }
        if (k == "--input") {
            a.input = v;
            continue;
        }
        if (k == "--backend") {
            a.backend = v;
            continue;
        }
        bool known = false;
        for (auto &kv : nums)
            if (k == kv.first) {
                if (!num) usage(("bad value for " + k).c_str());
                *kv.second = n;
                known = true;
            }
        if (!known) usage(("unknown option " + k).c_str());
    }
    if (a.model.empty()) usage("--model is required");
    if (a.items < 1 || a.producers < 1) usage("--items and --producers must be >= 1");
    return a;
}

gp_torch_item parse_item(const std::string &s) {
    size_t colon = s.find(':');
    if (colon == std::string::npos) usage("--input is DTYPE:DxDxD (u8:64x64x3)");
    std::string t = s.substr(0, colon);
    gp_torch_item it{};
    const gp_dtype types[] = {GP_DTYPE_F32, GP_DTYPE_U8,  GP_DTYPE_I64,
                              GP_DTYPE_I32, GP_DTYPE_F16, GP_DTYPE_BF16};
    bool found = false;
    for (gp_dtype d : types)
        if (t == gp_dtype_name(d)) it.dtype = d, found = true;
    if (!found) usage("--input dtype: f32, u8, i64, i32, f16 or bf16");
    const char *p = s.c_str() + colon + 1;
    while (*p) {
        if (it.rank == GP_TORCH_MAX_RANK) usage("--input: too many dimensions");
        char *end = nullptr;
        it.dims[it.rank++] = std::strtoll(p, &end, 10);
        if (end == p || it.dims[it.rank - 1] <= 0) usage("--input: bad dimension");
        p = *end == 'x' ? end + 1 : end;
        if (*end && *end != 'x') usage("--input: dimensions are separated by x");
    }
    if (it.rank == 0) usage("--input: no dimensions");
    return it;
}

double now_s() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

double epoch_s() { // for matching NVML samples taken by another process
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
}

struct Item {
    uint64_t t0 = 0;
    std::atomic<uint64_t> t1{0};
    std::atomic<int> status{1};
};

void on_done(void *user, int status, const void *, size_t) {
    auto *it = static_cast<Item *>(user);
    it->status.store(status, std::memory_order_relaxed);
    it->t1.store(gp_now_ns(), std::memory_order_release);
}

gp_backend backend_of(const std::string &b) {
    if (b == "host") return GP_BACKEND_HOST;
    if (b == "cuda") return GP_BACKEND_CUDA;
    if (b == "auto") return GP_BACKEND_AUTO;
    usage("--backend host, cuda or auto");
}

} // namespace

int main(int argc, char **argv) {
    Args a = parse(argc, argv);
    gp_torch_options o;
    gp_torch_options_init(&o);
    o.input = parse_item(a.input);
    o.warmup = int(a.warmup);
    o.intra_op_threads = int(a.threads);
    try {
        double t_load = now_s();
        gpupipe::TorchModel model(a.model, o);
        t_load = now_s() - t_load;
        gp_config cfg;
        gp_config_init(&cfg);
        model.configure(cfg);
        cfg.backend = backend_of(a.backend);
        cfg.max_batch = size_t(a.max_batch);
        cfg.inflight = int(a.inflight);
        cfg.max_delay_us = uint32_t(a.delay_us);
        cfg.capacity = size_t(a.capacity);
        size_t in_bytes = model.input_bytes(), out_bytes = model.output_bytes();

        // A pool of random inputs, reused cyclically (the data does not change the timing).
        size_t pool = std::min<size_t>(size_t(a.items), 256);
        std::vector<unsigned char> data(pool * in_bytes);
        uint64_t x = 0x9e3779b97f4a7c15ull;
        for (auto &b : data) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            b = (unsigned char)(x >> 56);
        }
        // Float inputs: small values, not random bit patterns.
        if (o.input.dtype == GP_DTYPE_F32)
            for (size_t i = 0; i < data.size() / 4; i++) {
                float f = float(data[i * 4]) / 255.0f;
                std::memcpy(&data[i * 4], &f, 4);
            }

        gp_pipeline *p = nullptr;
        char err[512];
        double t_create = now_s();
        int rc = gp_pipeline_create(&cfg, &p, err, sizeof err);
        t_create = now_s() - t_create;
        if (rc != GP_OK) {
            std::fprintf(stderr, "torch-bench: create: %s: %s\n  %s\n", gp_err_name(rc), err,
                         model.last_error().c_str());
            return rc == GP_ENODEV || rc == GP_ENOTSUP ? 77 : 1;
        }
        gp_stats st{};
        st.struct_size = sizeof st;

        if (a.first_batch) {
            std::vector<unsigned char> out(out_bytes);
            double lat[2];
            for (double &l : lat) {
                double t = now_s();
                rc = gp_pipeline_infer(p, data.data(), in_bytes, out.data(), out_bytes);
                l = now_s() - t;
                if (rc != GP_OK) break;
            }
            gp_pipeline_stats(p, &st);
            gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
            if (rc != GP_OK) {
                std::fprintf(stderr, "torch-bench: infer: %s: %s\n", gp_err_name(rc),
                             model.last_error().c_str());
                return 1;
            }
            std::printf("{\"mode\":\"first-batch\",\"backend\":\"%s\",\"warmup\":%ld,"
                        "\"load_ms\":%.1f,\"create_ms\":%.1f,\"first_ms\":%.2f,"
                        "\"second_ms\":%.2f}\n",
                        gp_backend_name(st.backend), a.warmup, t_load * 1e3, t_create * 1e3,
                        lat[0] * 1e3, lat[1] * 1e3);
            return 0;
        }

        std::vector<Item> items(size_t(a.items));
        std::atomic<long> bad_submit{0};
        // The producers submit `v` (each k-th item from k), all of it, then the pipeline drains.
        auto submit_all = [&](std::vector<Item> &v, std::atomic<long> &bad) {
            std::vector<std::thread> prod;
            for (long k = 0; k < a.producers; k++)
                prod.emplace_back([&, k] {
                    for (size_t i = size_t(k); i < v.size(); i += size_t(a.producers)) {
                        v[i].t0 = gp_now_ns();
                        if (gp_pipeline_submit(p, &data[(i % pool) * in_bytes], in_bytes, on_done,
                                               &v[i]) != GP_OK)
                            bad++;
                    }
                });
            for (auto &t : prod)
                t.join();
            gp_pipeline_drain(p, -1);
        };
        // Untimed first: the same producers over up to 2048 items, so the batch sizes the run
        // forms have been through TorchScript's profiling executor (it specialises per shape)
        // before the clock starts, as the PyTorch side's warm-up runs are.
        {
            std::vector<Item> warm(std::min(items.size(), size_t(2048)));
            std::atomic<long> bad_warm{0};
            submit_all(warm, bad_warm);
        }
        gp_stats_mark *mark = nullptr; // the stats below: the timed run only
        if (gp_pipeline_mark(p, &mark) != GP_OK) mark = nullptr;
        double e0 = epoch_s(), t0 = now_s();
        submit_all(items, bad_submit);
        double wall = now_s() - t0, e1 = epoch_s();
        if (!mark || gp_pipeline_stats_since(p, mark, &st) != GP_OK) gp_pipeline_stats(p, &st);
        gp_stats_mark_free(mark);
        rc = gp_pipeline_destroy(p, GP_DESTROY_DRAIN);

        std::vector<double> lat;
        long failed = bad_submit.load();
        for (auto &it : items) {
            if (it.status.load() != GP_OK) {
                failed++;
                continue;
            }
            lat.push_back(double(it.t1.load(std::memory_order_acquire) - it.t0) * 1e-6);
        }
        if (failed || lat.empty()) {
            std::fprintf(stderr, "torch-bench: %ld items failed: %s\n", failed,
                         model.last_error().c_str());
            return 1;
        }
        std::sort(lat.begin(), lat.end());
        auto pct = [&](double q) { return lat[std::min(lat.size() - 1, size_t(q * lat.size()))]; };
        std::printf("{\"mode\":\"throughput\",\"backend\":\"%s\",\"items\":%ld,\"producers\":%ld,"
                    "\"max_batch\":%ld,\"inflight\":%ld,\"threads\":%ld,\"seconds\":%.3f,"
                    "\"items_per_s\":%.1f,\"p50_ms\":%.2f,\"p99_ms\":%.2f,\"batches\":%llu,"
                    "\"mean_batch\":%.1f,\"compute_busy\":%.3f,\"t_start_epoch\":%.3f,"
                    "\"t_end_epoch\":%.3f}\n",
                    gp_backend_name(st.backend), a.items, a.producers, a.max_batch, a.inflight,
                    a.threads, wall, double(a.items) / wall, pct(0.50), pct(0.99),
                    (unsigned long long)st.batches,
                    st.batches ? double(st.batch_items) / double(st.batches) : 0.0,
                    st.wall_ns ? double(st.compute_busy_ns) / double(st.wall_ns) : 0.0, e0, e1);
        return rc != GP_OK;
    } catch (const gpupipe::TorchError &e) {
        std::fprintf(stderr, "torch-bench: %s: %s\n", gp_err_name(e.code()), e.what());
        return 1;
    }
}
