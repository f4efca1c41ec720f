#!/usr/bin/python3
"""Write torchvision's ResNet-18 (random weights, no download) as a TorchScript image classifier
for examples/torch_service.cpp and bench/torch-bench.py.

usage: make_resnet18_ts.py OUT.pt [--size S] [--images N DIR]

The scripted module takes u8 HWC images [N, S, S, 3], normalizes them inside the model (ImageNet
mean/std: on the GPU when the pipeline runs there, so the copy carries 1 byte per channel) and
returns the 5 best classes, int64 [N, 5], best first: 40 bytes per image travel back instead of
4000. --images N DIR also writes DIR/images.u8 (N random images, each with its own colour and
contrast) and DIR/logits.f32 (PyTorch
eager logits, [N, 1000]) for torch_service's check. Exit 77 when torch/torchvision are missing.
"""
import argparse
import os
import sys

try:
    import torch
    import torch.nn as nn
    import torchvision
except ImportError as exc:  # depends on the machine
    print(f"SKIP: PyTorch/torchvision not importable by {sys.executable} ({exc}): "
          "install python3-torch python3-torchvision")
    sys.exit(77)


class Classifier(nn.Module):
    """u8 [N, H, W, 3] -> int64 [N, 5]: normalize, ResNet-18, top-5."""

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def logits(self, x):
        x = x.permute(0, 3, 1, 2).to(self.mean.dtype).div(255)
        return self.net((x - self.mean) / self.std)

    def forward(self, x):
        return self.logits(x).topk(5, dim=1).indices


def build(seed=0):
    """Random weights; batchnorm statistics and affine randomized too, so that (unlike a fresh
    resnet18) different images get different classes and the check has something to check."""
    torch.manual_seed(seed)
    net = torchvision.models.resnet18(weights=None)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return Classifier(net).eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--images", nargs=2, metavar=("N", "DIR"))
    a = ap.parse_args()
    model = build()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    torch.jit.script(model).save(a.out)
    print(f"wrote {a.out}: ResNet-18 classifier, u8[{a.size}x{a.size}x3] -> i64[5] "
          f"(torch {torch.__version__}, torchvision {torchvision.__version__})")
    if a.images:
        n, d = int(a.images[0]), a.images[1]
        os.makedirs(d, exist_ok=True)
        g = torch.Generator().manual_seed(1)  # per image: a colour, a contrast, noise
        base = torch.rand(n, 1, 1, 3, generator=g) * 255
        contrast = torch.rand(n, 1, 1, 1, generator=g) * 120
        x = base + contrast * torch.randn(n, a.size, a.size, 3, generator=g)
        x = x.clamp(0, 255).to(torch.uint8)
        with torch.inference_mode():
            logits = model.logits(x)
        x.numpy().tofile(os.path.join(d, "images.u8"))
        logits.float().contiguous().numpy().tofile(os.path.join(d, "logits.f32"))
        print(f"wrote {n} images and their eager logits to {d}")


if __name__ == "__main__":
    main()
