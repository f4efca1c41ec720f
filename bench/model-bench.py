#!/usr/bin/python3
"""gpupipe's model runtime against PyTorch on the same weights and batch sizes, in one run.

usage: model-bench.py GP_INFER [--device cuda|cpu] [--models mlp,cnn,resnet18]
                      [--batches 1,8,64,256] [--items N] [--precision fp32|tf32|fp16|bf16]
                      [--work DIR] [--threads T] [--producers P] [--min-batches B]
                      [--windows K] [--step-timeout S]

Models: the built-in demo MLP and CNN (weights written by `gp-infer --demo X --save-demo`) and
a ResNet-18 (torchvision topology, 224x224 u8 images in, the conformance test's model) with
random weights. For each model and batch size it runs
  gpupipe:      gp-infer on N items (pipeline: P producer threads submitting item by item,
                8 on CUDA as issue 8's comparison and symptom-bench.py have them, 2 on the
                CPU, whose cores compute; batches of B, 3 slots in flight),
                items/s as gp-infer reports it (first submit to last callback), the median
                of K windows (gp-infer --windows K: one process, one pipeline);
                on CUDA also with --cuda-graphs;
  PyTorch:      torch.inference_mode, eval mode, batch-norm folded into the convolutions
                (torch.fx fuse, as gpupipe folds it), the same u8 / f32 inputs, batches of B
                from pinned memory with non_blocking copies in and out (cuda), the batches
                round-robin over 3 CUDA streams (one batch's copies overlap another's compute,
                as gpupipe's 3 slots), one synchronize at the end; fp16/bf16: Linear/Conv
                weights cast once, autocast for the rest; on CUDA also with CUDA graphs (one
                per stream and batch size); the median of K windows of the N items, as
                gpupipe's;
and checks that both agree on the predicted class (argmax / top-1) for >= 99 % of items.

The ratio is best against best: gpupipe's faster variant (eager or CUDA graphs) over PyTorch's
faster one, so the peer has its best settings here (a ratio against PyTorch eager alone, the
column "eager/eager", is not the comparison to quote). PyTorch runs the convolutional models
(cnn, resnet18) channels_last on CUDA in fp16 and bf16, as PyTorch's performance guide advises
for tensor cores (layer-bench, H200, 2026-11-27: the fp16 ResNet-18 at 0.98 of NCHW's time
per batch of 256), and since 2026-11-28 gpupipe runs them NHWC there too; NCHW otherwise (fp32
channels_last not tried). Medians: a shared machine's one slow window (the third H200
run's fp32 MLP with CUDA graphs read 7824 items/s at batch 1, the first run's 38598) should
not become a figure; K = --windows (default 3), each window all N items.

Fair on the CPU: gpupipe's host backend computes `inflight` batches at once, one thread each,
so both sides get the same T threads (--threads, default: every core): gp-infer --inflight T,
torch.set_num_threads(T). Each point runs at least --min-batches (20) batches of B, so fill and
drain of the pipeline do not dominate: N = max(--items, 20 x B). The header says which BLAS
PyTorch uses (its build setting and the library actually loaded) and its thread count.
Prints a Markdown table for bench/RESULTS.md. Needs python3-torch and python3-numpy.
"""
import argparse
import contextlib
import copy
import faulthandler
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "conformance"))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import conformance as C  # noqa: E402  (ResNet18, save_model)
import gpupipe_export as gx  # noqa: E402  (read_safetensors)

MEAN, STD = C.MEAN, C.STD


def read_safetensors(path):
    return {k: torch.from_numpy(v) for k, v in gx.read_safetensors(path)[0].items()}


def blas_info():
    """PyTorch's BLAS as built (BLAS_INFO) and as loaded: Debian's build links the generic
    libblas.so.3, which the alternatives system points at the reference BLAS or OpenBLAS."""
    built = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    a = torch.randn(64, 64)
    (a @ a).sum().item()  # make sure the BLAS library is loaded
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if re.search(r"(blas|mkl|blis|accelerate)[^/]*\.so", path, re.I):
                    libs.add(os.path.realpath(path))
    except OSError:
        pass
    def kind(path):
        low = path.lower()
        for key, name in (("openblas", "OpenBLAS"), ("mkl", "MKL"), ("blis", "BLIS"),
                          ("atlas", "ATLAS"), ("/blas/libblas", "reference BLAS (netlib)")):
            if key in low:
                return f"{name}: {path}"
        return path

    mkl = "MKL" if torch.backends.mkl.is_available() else ""
    return (f"BLAS_INFO={built.group(1) if built else '?'}"
            + (f" ({mkl})" if mkl else "")
            + (f", loaded {'; '.join(kind(p) for p in sorted(libs))}" if libs
               else ", no separate BLAS library loaded"))


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
            # The demo's random weights give every image the same classes: centre fc's bias on
            # these images (both sides then load the rewritten file), or top-1 agreement could
            # not fail.
            module.eval()
            C.center_logits(module, module.fc, torch.from_numpy(x[:64]))
            arrays, meta = gx.read_safetensors(path)
            arrays["fc.bias"] = module.fc.bias.detach().numpy()
            gx.write_safetensors(path, {k: gx.tensor_entry(torch.from_numpy(np.asarray(v)))
                                        for k, v in arrays.items()}, meta)
        return path, module.eval(), x
    if name == "resnet18":
        torch.manual_seed(3)
        rn = C.ResNet18(classes=1000).eval()
        C.randomize_bn(rn, torch.Generator().manual_seed(5))
        x = rng.integers(0, 256, (items, 224, 224, 3), dtype=np.uint8)
        C.center_logits(rn, rn.fc, torch.from_numpy(x[:64]))  # else one class for every item
        path = os.path.join(work, "resnet18_224.safetensors")
        C.save_model(rn, path, rn.spec(224) + "argmax\n")
        return path, ResNetTop1(rn).eval(), x
    raise SystemExit(f"unknown model {name}")


def run_gpupipe(gp_infer, path, xpath, ypath, device, batch, precision, graphs, inflight,
                windows, producers):
    cmd = [gp_infer, "--model", path, "--input", xpath, "--output", ypath, "--batch", str(batch),
           "--backend", "cuda" if device == "cuda" else "host", "--precision", precision,
           "--inflight", str(inflight), "--windows", str(windows), "--producers", str(producers),
           # Untimed first batches, as PyTorch's side runs its probe and warm-ups before its
           # clock: a 20-batch run of a fresh process otherwise times its lazily loaded kernels.
           "--warmup", str(2 * inflight * batch)]
    if graphs:
        cmd.append("--cuda-graphs")
    report = os.path.join(os.path.dirname(ypath), "gp-infer-report.json")
    cmd += ["--report", report]
    # Below the step's watchdog (step()): a gp-infer still running is killed here and its row
    # fails alone, rather than the watchdog ending this process with gp-infer left running.
    limit = max(STEP_TIMEOUT - 10, STEP_TIMEOUT * 0.8)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired as exc:
        # The reason first: gpu-run.sh's summary keeps a failure line's first 300 characters.
        raise RuntimeError(f"gp-infer still running after {limit:g} s, killed; its stderr so "
                           f"far: {(exc.stderr or b'')[-2000:]!r}; {' '.join(cmd)}") from None
    if p.returncode != 0:
        raise RuntimeError(f"gp-infer exit {p.returncode}: {p.stderr.strip()}; {' '.join(cmd)}")
    m = re.search(r"\(([0-9.]+) items/s\)", p.stderr)
    if not m:
        raise RuntimeError(f"{' '.join(cmd)}: no '(N items/s)' in its stderr: {p.stderr.strip()}")
    # What bound the point, in the log beside the table: gp-infer's own line (each window's
    # items/s, mean batch, latency) and the stages' busy time over the windows' span (compute
    # near 100 %: the device's compute; well below: the feeding, copies or the host path).
    for ln in p.stderr.splitlines():
        if ln.startswith("gp-infer: ") and " items/s" in ln:
            print(f"    {ln}", file=sys.stderr)
    try:
        with open(report) as f:
            r = json.load(f)
        span = (r["t_end_ns"] - r["t_start_ns"]) or 1
        print("    busy over the windows: " + ", ".join(
            f"{k} {100 * r[k + '_busy_ns'] / span:.0f} %" for k in ("h2d", "compute", "d2h"))
            + f"; {r['batches']} batches, mean {r['mean_batch']:.1f} items", file=sys.stderr)
    except (OSError, ValueError, KeyError) as exc:
        print(f"    (no report from gp-infer: {exc})", file=sys.stderr)
    return float(m.group(1)), np.load(ypath)


STEP_TIMEOUT = 180.0  # --step-timeout: one gp-infer run or one PyTorch timing


@contextlib.contextmanager
def step(what):
    """One step of a row, announced on stderr (a log cut short says which step it was in); a
    step still running after STEP_TIMEOUT dumps every thread's Python stack and exits 1 (the
    first H200 run, 2026-11-26, lost 280 s to a row that never finished, with no sign of why).
    A step that raises is reported here and re-raised (its row then fails alone: main)."""
    t0 = time.perf_counter()
    print(f"  {what} ...", file=sys.stderr, flush=True)
    faulthandler.dump_traceback_later(STEP_TIMEOUT, exit=True)
    try:
        yield
    except Exception as exc:
        print(f"  {what}: FAILED after {time.perf_counter() - t0:.1f} s: {type(exc).__name__}: "
              f"{exc}", file=sys.stderr, flush=True)
        raise
    finally:
        faulthandler.cancel_dump_traceback_later()
    print(f"  {what}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def fold_bn(module):
    """-> (module with every conv -> batch-norm pair folded into the conv, how): PyTorch's own
    inference fusion (torch.fx), as gpupipe folds batch-norm at load."""
    if not any(isinstance(m, nn.BatchNorm2d) for m in module.modules()):
        return module, ""
    try:
        from torch.fx.experimental.optimization import fuse
        return fuse(module), ", BN folded (fx)"
    except Exception as exc:  # depends on the torch version: run unfolded, and say so
        print(f"  fx fuse failed, batch-norm not folded: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return module, ", BN NOT folded (fx fuse failed)"


def torch_for_inference(module, device, precision, channels_last=False):
    """-> (callable, how): a copy of `module` set up as a PyTorch user serving it would: eval,
    batch-norm folded, on `device`, optionally channels_last; on CUDA with fp16/bf16 the
    Linear/Conv weights cast once (as gpupipe converts its weights at load: autocast's per-call
    casts of them are then no-ops) and autocast for the rest (fp32 accumulation)."""
    module, how = fold_bn(copy.deepcopy(module).eval())
    module = module.to(torch.device(device))
    if channels_last:
        module = module.to(memory_format=torch.channels_last)
    if device == "cuda" and precision in ("fp16", "bf16"):
        dt = torch.float16 if precision == "fp16" else torch.bfloat16
        for m in module.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                m.to(dt)
        inner = module
        return (lambda t: _autocast_call(inner, t, dt)), how
    return module, how


def run_torch(module, x, device, batch, precision, graphs, windows):
    # fp32 is IEEE fp32, as gpupipe's (PyTorch's cuDNN convolutions default to TF32)
    with gx.cuda_fp32_math(tf32=precision == "tf32"):
        return _run_torch(module, x, device, batch, precision, graphs, windows)


def torch_channels_last(module, device, precision):
    """PyTorch's layout for the module: channels_last for a convolutional model on CUDA in fp16
    / bf16 (tensor cores; PyTorch's performance guide), NCHW otherwise."""
    return (device == "cuda" and precision in ("fp16", "bf16")
            and any(isinstance(m, nn.Conv2d) for m in module.modules()))


def _run_torch(module, x, device, batch, precision, graphs, windows, channels_last=None):
    """-> (median items/s of `windows` timed passes over x, the last pass's outputs).
    channels_last None: torch_channels_last's choice."""
    dev = torch.device(device)
    if channels_last is None:
        channels_last = torch_channels_last(module, device, precision)
    module, _ = torch_for_inference(module, device, precision, channels_last)
    n = x.shape[0]
    host_in = torch.from_numpy(x)
    if device == "cuda":
        host_in = host_in.pin_memory()
    with torch.inference_mode():
        probe = module(host_in[:batch].to(dev))
        host_out = torch.empty((n,) + tuple(probe.shape[1:]), dtype=probe.dtype,
                               pin_memory=device == "cuda")
        cuda = device == "cuda"
        slots = 3 if cuda else 1  # gp-infer's default inflight on CUDA
        streams = [torch.cuda.Stream() for _ in range(slots)] if cuda else None
        steps = ([cuda_graph_step(module, batch, host_in, dev) for _ in range(slots)]
                 if graphs else None)
        rates = []
        for _ in range(windows):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for b, i in enumerate(range(0, n, batch)):
                j, xb = b % slots, host_in[i:i + batch]
                # Batch b on stream j: in order with that stream's earlier batch (and its
                # graph's buffers), overlapping the other streams' copies and compute.
                with torch.cuda.stream(streams[j]) if cuda else contextlib.nullcontext():
                    if steps is not None and xb.shape[0] == batch:
                        y = steps[j](xb)
                    else:
                        y = module(xb.to(dev, non_blocking=True))
                    host_out[i:i + batch].copy_(y, non_blocking=True)
            if cuda:
                torch.cuda.synchronize()
            rates.append(n / (time.perf_counter() - t0))
    out = host_out.float().numpy() if host_out.is_floating_point() else host_out.numpy()
    return median(rates), out


def median(v):
    """The median of v (an even count: the mean of the middle two, as gp-infer --windows)."""
    v = sorted(v)
    k = len(v) // 2
    return v[k] if len(v) % 2 else (v[k - 1] + v[k]) / 2


def cuda_graph_step(module, batch, like, dev):
    """module captured in a CUDA graph for batches of `batch` items shaped and typed as `like`'s
    (warmed up on a side stream first, as PyTorch's docs do) -> step(xb): copies xb into the
    graph's input, replays, returns the graph's output rows (valid until the next replay).

    Each graph is captured on a stream of its own. torch.cuda.graph's default capture stream is
    one per process, and PyTorch keys its cuBLAS workspace by stream: graphs captured on the same
    stream share one workspace (pytorch/pytorch#193402). Replayed at once on the slots' streams,
    they most likely raced on it: on the H200 (2026-11-26, both runs) the fp32 MLP and CNN at
    batch 64 hung in torch.cuda.synchronize() after the first replays (not yet rerun)."""
    static_in = torch.empty((batch,) + tuple(like.shape[1:]), dtype=like.dtype, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            module(static_in)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.Stream()):
        static_out = module(static_in)

    def step(xb):
        static_in[:xb.shape[0]].copy_(xb, non_blocking=True)
        g.replay()
        return static_out[:xb.shape[0]]
    return step


def _autocast_call(module, t, dtype):
    with torch.autocast("cuda", dtype=dtype, cache_enabled=False):
        return module(t)


def top1(y):
    return y[:, 0] if y.dtype.kind == "i" else np.argmax(y, axis=1)


def main():
    global STEP_TIMEOUT
    ap = argparse.ArgumentParser()
    ap.add_argument("gp_infer")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", default="mlp,cnn,resnet18")
    ap.add_argument("--batches", default="1,8,64,256")
    ap.add_argument("--items", type=int, default=0,
                    help="items per point, at least --min-batches x batch; default: 8192 "
                    "(cpu: 2048), resnet18 a quarter")
    ap.add_argument("--min-batches", type=int, default=20)
    ap.add_argument("--windows", type=int, default=3,
                    help="timed windows per point, each of every item; the figure is their "
                    "median (default %(default)d)")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--work", default="/tmp/gp-model-bench")
    ap.add_argument("--threads", type=int, default=0,
                    help="CPU threads for both: gpupipe --inflight and torch.set_num_threads "
                    "(default: every core)")
    ap.add_argument("--producers", type=int, default=0,
                    help="gpupipe's submitting threads (default: 8 on CUDA, as issue 8's "
                    "comparison; 2 on the CPU, whose cores compute)")
    ap.add_argument("--step-timeout", type=float, default=STEP_TIMEOUT,
                    help="seconds one step (a gp-infer run, a PyTorch timing) may take before "
                    "the bench stops with every thread's stack (default %(default)g)")
    a = ap.parse_args()
    if not 1 <= a.windows <= 1000:
        ap.error(f"--windows {a.windows}: 1 to 1000")
    STEP_TIMEOUT = a.step_timeout
    os.makedirs(a.work, exist_ok=True)
    threads = a.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    # On the CPU gpupipe's compute threads are its in-flight batches; on CUDA its default (3
    # streams) stays and the CPU thread count only matters to PyTorch's host-side work.
    inflight = threads if a.device == "cpu" else 3
    # Until 2026-11-28 gp-infer's default 2 producers fed the CUDA runs too: at batch 256 the
    # demo MLP's 2 threads, reading the input file and submitting item by item, may have bound
    # gpupipe's side (third run: 1.39M / 1.54M items/s eager fp32 / fp16; gp-bench's 2
    # producers, which read no file, 2.50M at 256; symptom-bench's 8, first run, 3.6M).
    producers = a.producers or (8 if a.device == "cuda" else 2)
    graphs = a.device == "cuda"
    print(f"torch {torch.__version__}, device {a.device}"
          + (f" ({torch.cuda.get_device_name()})" if a.device == "cuda" else "")
          + f", precision {a.precision}; PyTorch: {torch.get_num_threads()} threads, "
          f"{blas_info()}; gpupipe: --inflight {inflight}, --producers {producers}"
          + (" (one compute thread per in-flight batch)" if a.device == "cpu" else "")
          + ("; PyTorch's convolutional models channels_last" if a.device == "cuda"
             and a.precision in ("fp16", "bf16") else "")
          + f"; at least {a.min_batches} batches per point; items/s: the median of "
          f"{a.windows} timed window(s) of every item"
          + ("; ratio: the faster of gpupipe eager / + graphs over the faster of PyTorch eager / "
             "+ graphs (eager/eager beside it)" if graphs else ""))
    head = "| model | batch | items | gpupipe items/s |" + (" gpupipe+graphs |" if graphs else "") + \
        " PyTorch items/s |" + (" PyTorch+graphs |" if graphs else "") + \
        (" gpupipe/PyTorch best/best | eager/eager |" if graphs else " gpupipe/PyTorch |") + \
        " top-1 agree |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    batches = [int(v) for v in a.batches.split(",")]
    failed = []  # "model batch: contender" of every step that failed (exit status 1)

    def attempt(what, fn):
        """fn() inside step(what); None when it raised (the step has said why on stderr)."""
        try:
            with step(what):
                return fn()
        except Exception:  # one failed step must not lose the other rows
            failed.append(what)
            return None

    for name in a.models.split(","):
        base = a.items or (8192 if a.device == "cuda" else 2048)
        if name == "resnet18" and not a.items:
            base = max(base // 4, 64)
        most = max([base] + [a.min_batches * b for b in batches])
        prep = attempt(f"{name}: prepare", lambda: prepare(name, a.gp_infer, a.work, most))
        if prep is None:
            print(f"| {name} | - | - | FAILED: see '{name}: prepare' above |", flush=True)
            continue
        path, module, x_all = prep
        ypath = os.path.join(a.work, "y.npy")
        for b in batches:
            items = max(base, a.min_batches * b)
            x = x_all[:items]
            xpath = os.path.join(a.work, f"x_{name}_{items}.npy")
            np.save(xpath, x)
            gp = attempt(f"{name} batch {b}: gpupipe",
                         lambda: run_gpupipe(a.gp_infer, path, xpath, ypath, a.device, b,
                                             a.precision, False, inflight, a.windows,
                                             producers))
            cells = [gp]
            if graphs:
                cells.append(attempt(f"{name} batch {b}: gpupipe --cuda-graphs",
                                     lambda: run_gpupipe(a.gp_infer, path, xpath, ypath,
                                                         a.device, b, a.precision, True,
                                                         inflight, a.windows, producers)))
            pt = attempt(f"{name} batch {b}: PyTorch",
                         lambda: run_torch(module, x, a.device, b, a.precision, False,
                                           a.windows))
            cells.append(pt)
            if graphs:
                cells.append(attempt(f"{name} batch {b}: PyTorch + CUDA graphs",
                                     lambda: run_torch(module, x, a.device, b, a.precision,
                                                       True, a.windows)))
            row = [name, str(b), str(items)] + ["FAILED" if c is None else f"{c[0]:.0f}"
                                                for c in cells]
            ours, theirs = cells[:len(cells) // 2], cells[len(cells) // 2:]
            # Best against best: each side's faster variant. A failed variant leaves the ratio
            # undone ("-"): the other side's best might be the one that failed.
            if all(c is not None for c in cells):
                row.append(f"{max(c[0] for c in ours) / max(c[0] for c in theirs):.2f}")
            else:
                row.append("-")
            if graphs:
                row.append(f"{gp[0] / pt[0]:.2f}" if gp is not None and pt is not None else "-")
            if gp is not None and pt is not None:
                agree = float(np.mean(top1(gp[1]) == top1(pt[1])))
                classes = len(np.unique(top1(pt[1])))  # 1: the check could not fail (demo cnn)
                row.append(f"{100 * agree:.1f}% ({classes} classes)")
            else:
                row.append("-")
            print("| " + " | ".join(row) + " |", flush=True)
    if failed:
        print(f"model-bench: {len(failed)} step(s) failed (their reasons above): "
              + "; ".join(failed), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
