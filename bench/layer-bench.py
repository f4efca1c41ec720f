#!/usr/bin/python3
"""Where a CNN's time goes, gpupipe against PyTorch, stage by stage of a ResNet-18.

usage: layer-bench.py GP_INFER [--device cuda|cpu] [--precisions fp32,fp16] [--batch 256]
                      [--size 224] [--items 1024] [--batches 20] [--work DIR] [--json OUT]

Why: on the first H200 run (2026-11-26, RESULTS.md) gpupipe ran the ResNet-18 at 0.68x
PyTorch's fp16 channels_last and 0.75x its fp32 with the GPU 99-100 % busy on both sides: the
convolutions are slower, not the feeding. This says which stages trail, and by how much the
layout (PyTorch fp16 NCHW vs channels_last) accounts for it.

The model is symptom-bench's ResNet-18 (torchvision topology, random weights with random
batch-norm statistics, u8 HWC images in, normalization inside). Its spec is cut after the stem
(conv1, bn1, relu, maxpool) and after each of the 8 basic blocks, each cut closed with
`globalavgpool` + `flatten` (a few floats out, so no cut is bound by its copy back), and the
whole model (with fc). For every cut and precision:

  gpupipe   gp-infer --spec CUT, batches of B over --items distinct images (--repeat so that
            at least --batches batches run), 3 slots, 8 producers; the device's compute time
            per batch = the pipeline's compute_busy_ns / batches (its stage events: under load
            the union is the GPU's compute time; the copies are not in it);
  PyTorch   the same cut as a module, batch-norm folded (torch.fx), weights cast once for
            fp16 (autocast for the rest), cudnn.benchmark, IEEE fp32 for fp32; the batch
            already on the device; CUDA events around --batches forward calls after a
            warm-up: ms per batch; fp16 both NCHW and channels_last.

Then, per precision, the whole model op by op: gpupipe's per-op table (gp-infer --profile,
options.profile, one slot so that on CUDA an op's time is its own) and PyTorch's time per aten
op (torch.profiler: on CUDA the device time of each op's kernels), for each layout.

Each cut's gpupipe output for the first 8 items is checked against the cut's PyTorch fp32
output (the conformance test's tolerance per precision): both sides time the same computation.
Prints one Markdown table per precision: ms per batch at each cut and the increment over the
previous cut (that stage's cost), gpupipe / PyTorch per stage. On the CPU (host backend;
smoke test) the gpupipe figure is wall time per batch and PyTorch runs on its threads.
Exit status: 0; 1 when a run failed or a cut's outputs disagree; 77 when PyTorch or NumPy is
missing.
"""
import argparse
import faulthandler
import importlib.util
import json
import math
import os
import subprocess
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as exc:  # depends on the machine
    print(f"SKIP: PyTorch/NumPy not importable by {sys.executable} ({exc})")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, file))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MB = _load("model_bench", "model-bench.py")  # torch_for_inference, blas_info, conformance as C
C, GX = MB.C, MB.gx


class Cut(nn.Module):
    """The ResNet-18 up to (and including) its first `blocks` basic blocks, then global average
    pooling; blocks = 9 is the whole model with fc (logits)."""

    def __init__(self, rn, blocks):
        super().__init__()
        self.conv1, self.bn1 = rn.conv1, rn.bn1
        self.body = nn.Sequential(*[getattr(rn, f"layer{i}")[j] for i in range(1, 5)
                                    for j in range(2)][:min(blocks, 8)])
        self.fc = rn.fc if blocks > 8 else None
        self.register_buffer("mean", rn.mean.clone(), persistent=False)
        self.register_buffer("std", rn.std.clone(), persistent=False)

    def forward(self, u8_nhwc):
        x = u8_nhwc.permute(0, 3, 1, 2).float().div(255)
        x = (x - self.mean) / self.std
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2, padding=1)
        x = self.body(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x) if self.fc is not None else x


def cut_specs(rn, size):
    """[(name, spec text)]: the stem, each block, the whole model; the spec lines are
    conformance.ResNet18.spec's, cut where a stage ends."""
    full = rn.spec(size).strip().split("\n")
    stem_end = next(i for i, ln in enumerate(full) if ln.startswith("maxpool2d")) + 1
    ends, names, pos = [stem_end], ["stem"], stem_end
    for i in range(1, 5):
        for j in range(2):
            stride = rn.strides[f"layer{i}"] if j == 0 else 1
            pos += len(getattr(rn, f"layer{i}")[j].spec(f"layer{i}.{j}", stride))
            ends.append(pos)
            names.append(f"layer{i}.{j}")
    assert full[pos:] == ["globalavgpool", "flatten", "linear fc"], full[pos:]
    cuts = [(n, "\n".join(full[:e] + ["globalavgpool", "flatten"]) + "\n")
            for n, e in zip(names, ends)]
    return cuts + [("fc (whole model)", "\n".join(full) + "\n")]


def run_gp(gp_infer, model, spec, x_path, work, device, prec, batch, repeat):
    sp, y, rep = (os.path.join(work, f) for f in ("cut.spec", "y.npy", "report.json"))
    with open(sp, "w") as f:
        f.write(spec)
    cmd = [gp_infer, "--model", model, "--spec", sp, "--input", x_path, "--output", y,
           "--backend", "cuda" if device == "cuda" else "host", "--precision", prec,
           "--batch", str(batch), "--inflight", "3", "--producers", "8",
           "--repeat", str(repeat), "--warmup", str(6 * batch), "--report", rep, "--quiet",
           "--log", "info"]
    # Below main's 240 s watchdog: a hung gp-infer is killed here and its cut fails alone (the
    # watchdog would end this process and leave gp-infer running on the GPU).
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-800:]}")
    with open(rep) as f:
        r = json.load(f)
    ms = (r["compute_busy_ns"] / max(r["batches"], 1) / 1e6 if device == "cuda"
          else r["seconds"] * 1e3 / max(r["batches"], 1))
    # What conv.c's timing kept for each convolution at the full batch (its INFO log lines).
    # The activations' layout (one line per model: NCHW, or NHWC in fp16 / bf16, docs/DESIGN.md
    # §6), then each convolution's choice at this batch size.
    convs = [ln.split("log info: ", 1)[1] for ln in p.stderr.splitlines()
             if "log info: " in ln and ("model: activations in " in ln or
                                        (" conv2d " in ln and f": batch {batch}: " in ln))]
    return ms, np.load(y), convs


def run_gp_ops(gp_infer, model, spec, x_path, work, device, prec, batch, repeat):
    """gpupipe's per-op time of the whole model (gp-infer --profile, options.profile): one slot
    (--inflight 1), so on CUDA each op's time is its own, not shared with another slot's work.
    -> the table's lines."""
    sp, y = os.path.join(work, "ops.spec"), os.path.join(work, "ops-y.npy")
    with open(sp, "w") as f:
        f.write(spec)
    cmd = [gp_infer, "--model", model, "--spec", sp, "--input", x_path, "--output", y,
           "--backend", "cuda" if device == "cuda" else "host", "--precision", prec,
           "--batch", str(batch), "--inflight", "1", "--producers", "8",
           "--repeat", str(repeat), "--warmup", str(2 * batch), "--profile", "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-800:]}")
    lines = p.stdout.rstrip("\n").split("\n")
    if not lines or not lines[0].startswith("per-op time: "):
        raise RuntimeError(f"gp-infer --profile printed no table: {p.stdout[:300]!r}")
    return lines


def torch_ops(rn, x, device, prec, channels_last, batches):
    """PyTorch's time per aten op of the whole model (torch.profiler; on CUDA the device time
    of the kernels each op launched, on the CPU the op's own CPU time), ms per batch, largest
    first, after the same warm-up as run_torch. -> [(op, calls per batch, ms per batch)]."""
    from torch.profiler import ProfilerActivity, profile
    fwd, _ = MB.torch_for_inference(Cut(rn, 9).eval(), device, prec, channels_last)
    dev = torch.device(device)
    xb = torch.from_numpy(x).to(dev)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.inference_mode(), GX.cuda_fp32_math(tf32=prec == "tf32"):
        for _ in range(3):
            fwd(xb)
        if device == "cuda":
            torch.cuda.synchronize()
        with profile(activities=acts) as prof:
            for _ in range(batches):
                fwd(xb)
            if device == "cuda":
                torch.cuda.synchronize()
    from torch.autograd import DeviceType
    rows = []
    for e in prof.key_averages():
        # The ops (CPU-side events) alone: on CUDA each kernel is also an event of its own,
        # whose device time is already its op's self device time (counted twice otherwise).
        if getattr(e, "device_type", DeviceType.CPU) != DeviceType.CPU:
            continue
        if device == "cuda":  # the attribute's name moved in PyTorch 2.4
            us = getattr(e, "self_device_time_total", None)
            if us is None:
                us = getattr(e, "self_cuda_time_total", 0)
        else:
            us = e.self_cpu_time_total
        if us > 0:
            rows.append((e.key, e.count / batches, us / 1e3 / batches))
    rows.sort(key=lambda r: -r[2])
    return rows


def run_torch(rn, blocks, x, device, prec, channels_last, batches):
    fwd, _ = MB.torch_for_inference(Cut(rn, blocks).eval(), device, prec, channels_last)
    dev = torch.device(device)
    xb = torch.from_numpy(x).to(dev)
    with torch.inference_mode(), GX.cuda_fp32_math(tf32=prec == "tf32"):
        for _ in range(3):  # warm-up: cudnn.benchmark times its algorithms here
            fwd(xb)
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            a.record()
            for _ in range(batches):
                fwd(xb)
            b.record()
            b.synchronize()
            return a.elapsed_time(b) / batches
        t0 = time.perf_counter()
        for _ in range(batches):
            fwd(xb)
        return (time.perf_counter() - t0) * 1e3 / batches


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gp_infer")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precisions", default=None, help="default: fp32,fp16 (cpu: fp32)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--items", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--work", default="/tmp/gp-layer-bench")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    cuda = a.device == "cuda"
    precs = (a.precisions or ("fp32,fp16" if cuda else "fp32")).split(",")
    os.makedirs(a.work, exist_ok=True)
    torch.backends.cudnn.benchmark = True

    torch.manual_seed(3)
    rn = C.ResNet18(classes=1000).eval()
    C.randomize_bn(rn, torch.Generator().manual_seed(5))
    x = np.random.default_rng(1).integers(0, 256, (a.items, a.size, a.size, 3), dtype=np.uint8)
    # No C.center_logits here: it cancels the logits to ~1/200 of their terms (max 0.0097 against
    # |W||f| 2.3), so fp16's rounding of fc's bias alone moved them by 2.5 % and the whole-model
    # cut failed its closeness check on the H200 (0.0252, limit 0.02) while every other cut was
    # within 6.2e-4. This bench checks closeness, not top-1 agreement, and times the same model.
    model = os.path.join(a.work, f"resnet18_{a.size}.safetensors")
    C.save_model(rn, model, rn.spec(a.size))
    x_path = os.path.join(a.work, "x.npy")
    np.save(x_path, x)
    repeat = max(1, math.ceil(a.batches * a.batch / a.items))
    gpu = torch.cuda.get_device_name() if cuda else "cpu"
    print(f"layer-bench: device {a.device} ({gpu}), torch {torch.__version__}; ResNet-18 "
          f"{a.size}x{a.size}, batch {a.batch}; gpupipe {a.items} items x {repeat}, PyTorch "
          f"{a.batches} batches after 3 warm-up; ms per batch"
          + ("" if cuda else " (CPU: wall time)"), flush=True)
    cuts = cut_specs(rn, a.size)
    raw, bad = {"device": a.device, "gpu": gpu, "batch": a.batch, "rows": []}, 0
    for prec in precs:
        layouts = [False, True] if cuda and prec in ("fp16", "bf16") else [False]
        rows, convs, convs_of = [], [], None
        for k, (name, spec) in enumerate(cuts):
            # A cut still running after 240 s prints every thread's Python stack and exits (a
            # model-bench row hung for 280 s on the first GPU run with no sign of where).
            faulthandler.dump_traceback_later(240, exit=True)
            try:
                g, y, cv = run_gp(a.gp_infer, model, spec, x_path, a.work, a.device, prec,
                                  a.batch, repeat)
                convs, convs_of = cv, name
                # The same computation on both sides, or the comparison means nothing: gp's
                # output for the first items against the cut's fp32 output on the CPU.
                with torch.inference_mode():
                    ref = Cut(rn, k).eval()(torch.from_numpy(x[:8])).double().numpy()
                rel = float(np.max(np.abs(y[:8] - ref)) / max(np.max(np.abs(ref)), 1e-30))
                if rel > C.TOL[prec]:
                    raise RuntimeError(f"gpupipe's output is off PyTorch's by {rel:.3g} "
                                       f"(limit {C.TOL[prec]:g}): not the same cut")
                t = [run_torch(rn, k, x[:a.batch], a.device, prec, cl, a.batches)
                     for cl in layouts]
            except Exception as exc:  # one failed cut must not lose the table
                print(f"  {prec} {name}: {exc}", file=sys.stderr, flush=True)
                bad = 1
                continue
            finally:
                faulthandler.cancel_dump_traceback_later()
            rows.append((name, g, t))
            print(f"  {prec} {name}: gpupipe {g:.3f} ms (rel. err {rel:.2g}), PyTorch "
                  + ", ".join(f"{v:.3f}" for v in t) + " ms", file=sys.stderr, flush=True)
        heads = ["PyTorch NCHW", "PyTorch channels_last"][:len(layouts)]
        print(f"\n{prec}: ms per batch of {a.batch} after each stage (Δ: that stage alone)\n")
        print("| stage | gpupipe | " + " | ".join(heads) + " | gpupipe Δ | "
              + " | ".join(h + " Δ" for h in heads) + " | gpupipe Δ / PyTorch Δ |")
        print("|---" * (3 + 2 * len(heads)) + "|---|")
        prev = None
        for name, g, t in rows:
            dg = g - (prev[0] if prev else 0.0)
            dt = [v - (prev[1][i] if prev else 0.0) for i, v in enumerate(t)]
            best = min(dt)
            ratio = f"{dg / best:.2f}" if best > 0.005 else "-"
            print(f"| {name} | {g:.3f} | " + " | ".join(f"{v:.3f}" for v in t)
                  + f" | {dg:.3f} | " + " | ".join(f"{v:.3f}" for v in dt) + f" | {ratio} |")
            prev = (g, t)
            raw["rows"].append(dict(precision=prec, stage=name, gpupipe_ms=g, torch_ms=t))
        # Per op, the whole model: gpupipe's ops (each conv2d with what it carries fused)
        # against PyTorch's aten ops (its convolutions, then the bias / ReLU / add kernels its
        # fusion leaves, the casts), so a gap found above gets a name.
        full = cuts[-1][1]
        faulthandler.dump_traceback_later(240, exit=True)
        try:  # each side alone: a failure of one must not lose the other's table
            ops = run_gp_ops(a.gp_infer, model, full, x_path, a.work, a.device, prec, a.batch,
                             repeat)
            print(f"\n{prec}: gpupipe per op, whole model, batch {a.batch}, one slot "
                  "(gp-infer --profile --inflight 1"
                  + ("" if cuda else "; CPU: wall time per op") + ")\n")
            for ln in ops:
                print(f"    {ln}")
            raw.setdefault("ops", {})[prec] = ops
        except Exception as exc:
            print(f"  {prec} per-op (gpupipe): {exc}", file=sys.stderr, flush=True)
            bad = 1
        try:
            tops = [(cl, torch_ops(rn, x[:a.batch], a.device, prec, cl, a.batches))
                    for cl in layouts]
        except Exception as exc:
            print(f"  {prec} per-op (PyTorch): {exc}", file=sys.stderr, flush=True)
            bad = 1
        else:
            for cl, tr in tops:
                total = sum(r[2] for r in tr)
                if not tr:  # CUPTI gave no kernel times (a sandbox such as gVisor may refuse it)
                    print(f"\n{prec}: PyTorch per aten op, {'channels_last' if cl else 'NCHW'}: "
                          "no op has a time (torch.profiler recorded no device activity)")
                    bad = 1
                    continue
                print(f"\n{prec}: PyTorch per aten op, whole model, "
                      f"{'channels_last' if cl else 'NCHW'}, batch {a.batch} (torch.profiler, "
                      + ("device time of each op's kernels" if cuda else "CPU self time")
                      + f"; sum {total:.3f} ms per batch)\n")
                print("| aten op | calls per batch | ms per batch | share |")
                print("|---|---|---|---|")
                for key, calls, ms in tr[:25]:
                    print(f"| {key} | {calls:g} | {ms:.3f} | {100 * ms / total:.1f}% |")
                if len(tr) > 25:
                    rest = sum(r[2] for r in tr[25:])
                    print(f"| ({len(tr) - 25} more) | | {rest:.3f} | {100 * rest / total:.1f}% |")
                raw.setdefault("torch_ops", {})[f"{prec}{'-cl' if cl else ''}"] = tr
        finally:
            faulthandler.cancel_dump_traceback_later()
        if convs:  # the last cut gp-infer ran: the whole model's convolutions, unless it failed
            print(f"\n{prec}: gpupipe's convolutions at batch {a.batch} (gp-infer --log info: "
                  "the algorithm and form its timing kept, and the heuristic's first), cut "
                  f"'{convs_of}'\n")
            for ln in convs:
                print(f"    {ln}")
            raw.setdefault("convs", {})[prec] = convs
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)
    return bad


if __name__ == "__main__":
    sys.exit(main())
