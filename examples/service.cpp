// service: the header from C++ — several request threads, each waiting on its own future,
// fed into one pipeline. Shows the callback contract: copy the output out during the call.
#include <gpupipe/gpupipe.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

using Vec = std::array<float, 8>;

// Host backend compute: a dot product with a fixed weight vector, per item.
static int score(void *, const gp_batch *b) {
    const float *in = static_cast<const float *>(b->in);
    float *out = static_cast<float *>(b->out);
    for (size_t i = 0; i < b->n; i++) {
        float s = 0;
        for (int k = 0; k < 8; k++)
            s += in[i * 8 + k] * float(k + 1);
        out[i] = s;
    }
    return GP_OK;
}

struct Request {
    std::promise<float> result;
};

static void done(void *user, int status, const void *out, size_t) {
    auto *r = static_cast<Request *>(user);
    if (status == GP_OK)
        r->result.set_value(*static_cast<const float *>(out)); // copy now
    else
        r->result.set_exception(std::make_exception_ptr(std::runtime_error(gp_strerror(status))));
}

int main() {
    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = GP_BACKEND_HOST;
    cfg.item_in_bytes = sizeof(Vec);
    cfg.item_out_bytes = sizeof(float);
    cfg.compute = score;
    gp_pipeline *p = nullptr;
    char err[256];
    if (gp_pipeline_create(&cfg, &p, err, sizeof err) != GP_OK) {
        std::fprintf(stderr, "create: %s\n", err);
        return 1;
    }
    std::vector<std::thread> clients;
    std::atomic<int> wrong{0};
    for (int t = 0; t < 4; t++)
        clients.emplace_back([&, t] {
            for (int i = 0; i < 10000; i++) {
                Vec v{};
                v[0] = float(t);
                v[7] = float(i % 100);
                Request r;
                auto f = r.result.get_future();
                if (gp_pipeline_submit(p, v.data(), sizeof v, done, &r) != GP_OK) {
                    wrong++;
                    continue;
                }
                float want = float(t) * 1 + float(i % 100) * 8;
                if (f.get() != want) wrong++; // r outlives the callback: we wait here
            }
        });
    for (auto &c : clients)
        c.join();
    gp_pipeline_report(p, stdout);
    gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
    std::printf("%d wrong results\n", wrong.load());
    return wrong != 0;
}
