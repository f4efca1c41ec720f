#!/usr/bin/python3
"""A PyTorch model to export with tools/gpupipe_export.py: a small residual CNN for 32x32 RGB
images, as you would write your own (docs/MODELS.md walks through it).

    python3 tools/gpupipe_export.py examples/pytorch_model.py:build net.safetensors \\
        --input-shape 3,32,32 --input-dtype u8 --layout hwc \\
        --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225 --head topk=5
    python3 examples/pytorch_model.py images x.npy              # 16 random u8 HWC images
    ./build/bench/gp-infer --model net.safetensors --input x.npy --output y.npy
    python3 examples/pytorch_model.py compare x.npy y.npy       # gp-infer vs PyTorch

build() returns the module with its weights: here seeded random ones; yours would load a
checkpoint (model.load_state_dict(torch.load("weights.pt"))), or pass --weights to the
exporter.
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class Block(nn.Module):
    """conv-bn-relu-conv-bn plus a shortcut (a 1x1 projection when the shape changes)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Identity()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.short(x))  # the residual add


class Net(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32),
                                  nn.ReLU(inplace=True))
        self.layer1 = Block(32, 32, 1)
        self.layer2 = Block(32, 64, 2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):  # x: (N, 3, 32, 32) float, normalized
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(self.drop(torch.flatten(self.pool(x), 1)))  # logits


def build():
    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():  # random batch-norm statistics, as a trained model has
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)
    return net.eval()


def main():
    import numpy as np
    if len(sys.argv) == 3 and sys.argv[1] == "images":
        rng = np.random.default_rng(0)
        np.save(sys.argv[2], rng.integers(0, 256, (16, 32, 32, 3), dtype=np.uint8))
        return 0
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        images, got = np.load(sys.argv[2]), np.load(sys.argv[3])
        # What gpupipe does on the device (x / 255, normalize, HWC -> CHW), then the model.
        x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
        x = (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
        with torch.no_grad():
            want = torch.topk(build()(x), 5, dim=1).indices.numpy()
        same = float(np.mean(np.all(got == want, axis=1)))
        print(f"top-5 classes identical to PyTorch on {100 * same:.1f}% of {len(got)} images")
        print("first image: gpupipe", got[0].tolist(), "PyTorch", want[0].tolist())
        return 0 if same == 1.0 else 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
