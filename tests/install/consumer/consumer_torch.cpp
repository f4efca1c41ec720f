// A C++ program outside the tree, built against the installed libgpupipe-torch through
// gpupipe/torch.hpp alone (no LibTorch headers or flags): a missing file must fail cleanly.
#include <gpupipe/torch.hpp>

#include <cstdio>
#include <cstring>

int main() {
    try {
        gpupipe::TorchModel m("/nonexistent/model.pt",
                              gpupipe::torch_item(GP_DTYPE_F32, {3, 8, 8}));
    } catch (const gpupipe::TorchError &e) {
        if (e.code() == GP_EIO && std::strstr(e.what(), "cannot open") &&
            std::strlen(gp_torch_version()) > 0) {
            std::printf("consumer_torch: LibTorch %s, %s: %s\n", gp_torch_version(),
                        gp_err_name(e.code()), e.what());
            return 0;
        }
        std::fprintf(stderr, "consumer_torch: %s: %s\n", gp_err_name(e.code()), e.what());
        return 1;
    }
    std::fprintf(stderr, "consumer_torch: loading a missing file succeeded\n");
    return 1;
}
