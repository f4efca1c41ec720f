#!/usr/bin/python3
"""gpupipe's model runtime against PyTorch on the same weights and batch sizes, in one run.

usage: model-bench.py GP_INFER [--device cuda|cpu] [--models mlp,cnn,resnet18]
                      [--batches 1,8,64,256] [--items N] [--precision fp32|tf32|fp16|bf16]
                      [--work DIR] [--threads T]

Models: the built-in demo MLP and CNN (weights written by `gp-infer --demo X --save-demo`) and
a ResNet-18 (torchvision topology, 224x224 u8 images in, the conformance test's model) with
random weights. For each model and batch size it runs
  gpupipe:      gp-infer on N items (pipeline: producers, batches of B, 3 slots in flight),
                items/s as gp-infer reports it (first submit to last callback);
                on CUDA also with --cuda-graphs;
  PyTorch:      torch.inference_mode, eval mode, the same u8 / f32 inputs, batches of B from
                pinned memory with non_blocking copies in and out (cuda), one synchronize at
                the end; on CUDA also with CUDA graphs (one captured graph per batch size);
and checks that both agree on the predicted class (argmax / top-1) for >= 99 % of items.
Prints a Markdown table for bench/RESULTS.md. Needs python3-torch and python3-numpy.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "conformance"))
import conformance as C  # noqa: E402  (ResNet18, save_model)

MEAN, STD = C.MEAN, C.STD


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", name
        b, e = t["data_offsets"]
        out[name] = torch.from_numpy(
            np.frombuffer(data[base + b:base + e], dtype="<f4").reshape(t["shape"]).copy())
    return out


class DemoMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 1024), nn.Linear(1024, 1024), nn.Linear(1024, 10)

    def forward(self, x):
        return F.softmax(self.fc3(F.relu(self.fc2(F.relu(self.fc1(x))))), dim=1)


class DemoCNN(nn.Module):
    """The demo cnn spec (lib/model/demo.c) in PyTorch: u8 HWC in, top-5 indices out."""

    def __init__(self):
        super().__init__()
        conv = lambda i, o, k, s=1, p=0: nn.Conv2d(i, o, k, stride=s, padding=p, bias=False)
        self.conv1, self.bn1 = conv(3, 32, 3, 1, 1), nn.BatchNorm2d(32)
        self.layer1 = nn.Module()
        blk = nn.Module()
        blk.conv1, blk.bn1 = conv(32, 64, 3, 2, 1), nn.BatchNorm2d(64)
        blk.conv2, blk.bn2 = conv(64, 64, 3, 1, 1), nn.BatchNorm2d(64)
        blk.downsample = nn.Sequential(conv(32, 64, 1, 2), nn.BatchNorm2d(64))
        self.layer1.add_module("0", blk)
        self.conv3, self.bn3 = conv(64, 128, 3, 1, 1), nn.BatchNorm2d(128)
        self.fc = nn.Linear(128, 100)
        self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(STD).view(1, 3, 1, 1))

    def forward(self, u8):
        x = (u8.permute(0, 3, 1, 2).float().div(255) - self.mean) / self.std
        s = F.relu(self.bn1(self.conv1(x)))
        b = getattr(self.layer1, "0")
        m = b.bn2(b.conv2(F.relu(b.bn1(b.conv1(s)))))
        x = F.relu(m + b.downsample(s))
        x = F.relu(self.bn3(self.conv3(F.max_pool2d(x, 2))))
        p = F.softmax(self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)), dim=1)
        return torch.topk(p, 5, dim=1).indices


class ResNetTop1(nn.Module):
    def __init__(self, rn):
        super().__init__()
        self.rn = rn

    def forward(self, u8):
        return torch.argmax(self.rn(u8), dim=1, keepdim=True)


def prepare(name, gp_infer, work, items):
    """-> (safetensors path, torch module, input array, what to compare)."""
    rng = np.random.default_rng(1)
    if name in ("mlp", "cnn"):
        path = os.path.join(work, f"demo_{name}.safetensors")
        subprocess.run([gp_infer, "--demo", name, "--save-demo", path], check=True)
        module = DemoMLP() if name == "mlp" else DemoCNN()
        sd = read_safetensors(path)
        missing = module.load_state_dict(sd, strict=False).missing_keys
        assert all(k in ("mean", "std") or k.endswith("num_batches_tracked") for k in missing), missing
        if name == "mlp":
            x = rng.standard_normal((items, 784), dtype=np.float32)
        else:
            x = rng.integers(0, 256, (items, 32, 32, 3), dtype=np.uint8)
        return path, module.eval(), x
    if name == "resnet18":
        torch.manual_seed(3)
        rn = C.ResNet18(classes=1000).eval()
        C.randomize_bn(rn, torch.Generator().manual_seed(5))
        path = os.path.join(work, "resnet18_224.safetensors")
        C.save_model(rn, path, rn.spec(224) + "argmax\n")
        x = rng.integers(0, 256, (items, 224, 224, 3), dtype=np.uint8)
        return path, ResNetTop1(rn).eval(), x
    raise SystemExit(f"unknown model {name}")


def run_gpupipe(gp_infer, path, xpath, ypath, device, batch, precision, graphs):
    cmd = [gp_infer, "--model", path, "--input", xpath, "--output", ypath, "--batch", str(batch),
           "--backend", "cuda" if device == "cuda" else "host", "--precision", precision]
    if graphs:
        cmd.append("--cuda-graphs")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    m = re.search(r"\(([0-9.]+) items/s\)", p.stderr)
    return float(m.group(1)), np.load(ypath)


def run_torch(module, x, device, batch, precision, graphs):
    dev = torch.device(device)
    module = module.to(dev).eval()
    amp = None
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        if precision in ("fp16", "bf16"):
            amp = torch.float16 if precision == "fp16" else torch.bfloat16
    if amp is not None:  # fp16/bf16 math with fp32 accumulation, as gpupipe's layers
        inner = module
        module = lambda t: _autocast_call(inner, t, amp)
    n = x.shape[0]
    host_in = torch.from_numpy(x)
    if device == "cuda":
        host_in = host_in.pin_memory()
    outs = []
    with torch.inference_mode():
        probe = module(host_in[:batch].to(dev))
        host_out = torch.empty((n,) + tuple(probe.shape[1:]), dtype=probe.dtype,
                               pin_memory=device == "cuda")
        step = None
        if graphs:
            static_in = torch.empty((batch,) + tuple(host_in.shape[1:]), dtype=host_in.dtype,
                                    device=dev)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    module(static_in)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                static_out = module(static_in)

            def step(xb):
                static_in[:xb.shape[0]].copy_(xb, non_blocking=True)
                g.replay()
                return static_out[:xb.shape[0]]
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            xb = host_in[i:i + batch]
            if step is not None and xb.shape[0] == batch:
                y = step(xb)
            else:
                y = module(xb.to(dev, non_blocking=True))
            host_out[i:i + batch].copy_(y, non_blocking=True)
        if device == "cuda":
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
    return n / secs, host_out.float().numpy() if host_out.is_floating_point() else host_out.numpy()


def _autocast_call(module, t, dtype):
    with torch.autocast("cuda", dtype=dtype, cache_enabled=False):
        return module(t)


def top1(y):
    return y[:, 0] if y.dtype.kind == "i" else np.argmax(y, axis=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gp_infer")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", default="mlp,cnn,resnet18")
    ap.add_argument("--batches", default="1,8,64,256")
    ap.add_argument("--items", type=int, default=0, help="default: 8192 (cpu: 2048), resnet 1/4")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--work", default="/tmp/gp-model-bench")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: all cores)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    if a.threads:
        torch.set_num_threads(a.threads)
    graphs = a.device == "cuda"
    print(f"torch {torch.__version__}, device {a.device}"
          + (f" ({torch.cuda.get_device_name()})" if a.device == "cuda" else
             f", {torch.get_num_threads()} torch threads") + f", precision {a.precision}")
    head = "| model | batch | gpupipe items/s |" + (" gpupipe+graphs |" if graphs else "") + \
        " PyTorch items/s |" + (" PyTorch+graphs |" if graphs else "") + " gpupipe/PyTorch | top-1 agree |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name in a.models.split(","):
        items = a.items or (8192 if a.device == "cuda" else 2048)
        if name == "resnet18":
            items = max(items // 4, 64)
        path, module, x = prepare(name, a.gp_infer, a.work, items)
        xpath, ypath = os.path.join(a.work, f"x_{name}.npy"), os.path.join(a.work, "y.npy")
        np.save(xpath, x)
        for b in [int(v) for v in a.batches.split(",")]:
            gp_ips, gp_y = run_gpupipe(a.gp_infer, path, xpath, ypath, a.device, b, a.precision, False)
            row = [name, str(b), f"{gp_ips:.0f}"]
            if graphs:
                row.append(f"{run_gpupipe(a.gp_infer, path, xpath, ypath, a.device, b, a.precision, True)[0]:.0f}")
            t_ips, t_y = run_torch(module, x, a.device, b, a.precision, False)
            row.append(f"{t_ips:.0f}")
            if graphs:
                row.append(f"{run_torch(module, x, a.device, b, a.precision, True)[0]:.0f}")
            agree = float(np.mean(top1(gp_y) == top1(t_y)))
            row += [f"{gp_ips / t_ips:.2f}", f"{100 * agree:.1f}%"]
            print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
