#!/usr/bin/python3
"""TorchScript fixtures and PyTorch eager reference outputs for tests/torch/test_torch.c.

usage: make_fixtures.py OUTDIR

Writes TorchScript files (*.pt), inputs and eager outputs (raw little-endian arrays, shapes as
listed below and in test_torch.c), random weights from a fixed seed, no downloads:

  mlp.pt        f32[16] -> Linear 32, ReLU, Linear 10 -> f32[10]      (torch.jit.script)
                mlp_in.f32 [200, 16], mlp_ref.f32 [200, 10] (eager, fp32),
                mlp_bf16_ref.f32 [200, 10] (eager with the module and input in bfloat16)
  resnet.pt     torchvision resnet18(weights=None, num_classes=10), f32[3, 40, 40] -> f32[10]
                (torch.jit.trace); resnet_in.f32 [24, 3, 40, 40], resnet_ref.f32 [24, 10]
  thrower.pt    f32[4] -> 2x+1, raises RuntimeError("poisoned item ...") when an item's first
                value is negative; allocates 2^57 bytes (and fails: out of memory) when it is
                -2; raises a RuntimeError that only reads like one when it is -3 (-4: in a
                forked function); a shape error whose quoted source reads like one at -5
                                                                      (torch.jit.script)
  tuple.pt      f32[4] -> (x, x): not one tensor                      (torch.jit.script)
  sum.pt        f32[4] -> x.sum(1): shape [N], one value per item     (torch.jit.script)
  slow.pt       f32[64] -> 2x+1 after ~30 256x256 matmuls per item whose result is multiplied
                by 0 (exact output, real compute time)                (torch.jit.script)
  notmodel.pt   a text file;  statedict.pt  torch.save(state_dict): a zip, not TorchScript

Exit status 0, or 77 (skip: torch/torchvision missing; the reason is printed and written to
OUTDIR/SKIP for the test to repeat).
"""
import os
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(out, exist_ok=True)
try:
    import torch
    import torch.nn as nn
    import torchvision
except ImportError as exc:  # depends on the machine
    msg = f"PyTorch/torchvision not importable by {sys.executable} ({exc}): " \
          "install python3-torch python3-torchvision"
    with open(os.path.join(out, "SKIP"), "w") as f:
        f.write(msg + "\n")
    print("SKIP: " + msg)
    sys.exit(77)
if os.path.exists(os.path.join(out, "SKIP")):
    os.remove(os.path.join(out, "SKIP"))

torch.manual_seed(20261121)
torch.set_num_threads(1)  # reference outputs independent of the machine's core count


def save(name, t, dtype):
    t.detach().contiguous().to(dtype).numpy().tofile(os.path.join(out, name))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def forked_raise(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("forked: CUDA out of memory, can't allocate memory")


class Thrower(nn.Module):
    def forward(self, x):
        if bool((x[:, 0] == -2).any()):  # out of memory: 2^57 bytes and more, no machine has it
            return torch.empty(x.shape[0], 36028797018963968)[:, :4]  # 2^55 floats
        if bool((x[:, 0] == -3).any()):  # the model's own error, in an allocator's words
            raise RuntimeError("rejected: std::bad_alloc, can't allocate memory, CUDA out of memory")
        if bool((x[:, 0] == -4).any()):  # the same, raised in a forked function
            return torch.jit.wait(torch.jit.fork(forked_raise, x))
        if bool((x[:, 0] == -5).any()):
            # a shape error; this comment, quoted in the traceback: can't allocate memory
            return x.view(-1, 7)[:, :4]
        if bool((x[:, 0] < 0).any()):
            raise RuntimeError("poisoned item: a negative first value")
        return x * 2 + 1


class Tuple(nn.Module):
    def forward(self, x):
        return x, x


class Sum(nn.Module):
    def forward(self, x):
        return x.sum(1)


class Huge(nn.Module):
    # A stride-0 view whose item claims 3 * 768614336404564651 int64 elements: more bytes than
    # size_t holds, in no memory at all (load must refuse it, not size buffers from a wrap).
    def forward(self, x):
        return torch.zeros(1, 1, 1, dtype=torch.long).expand(x.shape[0], 3, 768614336404564651)


class Slow(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(256, 256) / 16)

    def forward(self, x):
        h = x.repeat(1, 4)
        for _ in range(30):
            h = torch.tanh(h @ self.w)
        return x * 2 + 1 + 0 * h.sum(1, keepdim=True)


# no_grad, not inference_mode: modules built under inference_mode hold inference tensors, which
# scripting, tracing and the in-place batch-norm updates below may refuse in newer PyTorch.
with torch.no_grad():
    mlp = MLP().eval()
    torch.jit.script(mlp).save(os.path.join(out, "mlp.pt"))
    x = torch.randn(200, 16)
    save("mlp_in.f32", x, torch.float32)
    save("mlp_ref.f32", mlp(x), torch.float32)
    mlp16 = MLP().eval()
    mlp16.load_state_dict(mlp.state_dict())
    mlp16 = mlp16.to(torch.bfloat16)
    save("mlp_bf16_ref.f32", mlp16(x.to(torch.bfloat16)).float(), torch.float32)

    net = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    for m in net.modules():  # non-trivial batchnorm statistics
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    x = torch.randn(24, 3, 40, 40)
    torch.jit.trace(net, x[:2]).save(os.path.join(out, "resnet.pt"))
    save("resnet_in.f32", x, torch.float32)
    save("resnet_ref.f32", net(x), torch.float32)

    for name, mod in (("thrower", Thrower()), ("tuple", Tuple()), ("sum", Sum()),
                      ("slow", Slow()), ("huge", Huge())):
        torch.jit.script(mod.eval()).save(os.path.join(out, name + ".pt"))

with open(os.path.join(out, "notmodel.pt"), "w") as f:
    f.write("this is not a TorchScript file\n")
torch.save(mlp.state_dict(), os.path.join(out, "statedict.pt"))
print(f"torch fixtures in {out} (torch {torch.__version__}, torchvision {torchvision.__version__})")
