#!/usr/bin/python3
"""Three ways to run the same TorchScript model over the same stream of images, measured in one
run: what the pipeline alone is worth, with PyTorch's own kernels on every side.

  (i)   naive: a per-item loop in PyTorch (batch of 1: copy in, forward, copy out, next)
  (ii)  PyTorch batched, not pipelined: batches of --batch (256), inference_mode; on CUDA the
        batch is staged in a preallocated pinned buffer and sent with non_blocking=True, one
        stream, .cpu() waits for each batch; also at --also-batch sizes (64), so batch size and
        pipelining can be told apart. (PyTorch pipelined over several streams, with CUDA graphs
        and folded batch-norm, is bench/symptom-bench.py's (ii): this bench isolates what the
        pipeline adds to batching with the same kernels.)
  (iii) gpupipe + LibTorch: bench/torch-bench (C++, libgpupipe-torch), --producers (8) threads
        submitting items; rows for each --gp config (max_batch/inflight/threads)

The model: examples/make_resnet18_ts.py (ResNet-18, random weights, u8 HWC images in, top-5
int64 out, normalization and top-k inside the model), at --size (64 on a CPU, 224 on a GPU by
default), or --model. All three load the same .pt file.

Per contender: items/s (items over wall time), latency p50 / p99 per item, and on CUDA the GPU
utilization NVML reported (mean of samples every 20 ms while the contender ran; pynvml, from
nvidia-ml-py; "n/a" without it). Latency: (i) one item's round trip; (ii) the batch's round trip
(every item of a batch is ready when it starts); (iii) submit call -> callback, including the
time an item queues in the ring behind a closed loop of producers (the ring is sized
max_batch x (inflight + 1), rounded up to a power of two, to keep that queue short).
Threads: PyTorch's intra-op threads are --threads for (i)/(ii); for (iii) inflight x threads
equals --threads on a CPU (each slot runs its own forward). Also: gpupipe's first-batch latency
with and without warm-up (fresh processes).

usage: torch-bench.py --bench BUILD/bench/torch-bench [--device cpu|cuda] [--size S]
                      [--items N] [--naive-items N] [--batch 256] [--threads T] [--reps R]
                      [--gp B/K/T ...] [--model PT] [--json OUT.json]
Prints a Markdown table (paste into bench/RESULTS.md) and, with --json, writes the raw numbers.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

try:
    import numpy as np
    import torch
except ImportError as exc:  # depends on the machine
    print(f"SKIP: PyTorch/NumPy not importable by {sys.executable} ({exc})")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Nvml:
    """GPU utilization samples (percent) every 20 ms, tagged with time.time()."""

    def __init__(self, device):
        self.samples, self.ok, self.why = [], False, ""
        if device != "cuda":
            self.why = "no GPU"
            return
        try:
            import pynvml
            pynvml.nvmlInit()
            self.h = self._handle(pynvml, torch.cuda.current_device())
            pynvml.nvmlDeviceGetUtilizationRates(self.h)  # supported here? (not on MIG)
            self.nvml = pynvml
            self.ok = True
        except Exception as exc:  # pynvml missing or NVML not usable
            self.why = f"NVML unavailable: {exc}"
            return
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    @staticmethod
    def _handle(pynvml, idx):
        """NVML numbers devices without CUDA_VISIBLE_DEVICES: find this one by its PCI id."""
        p = torch.cuda.get_device_properties(idx)
        bus = getattr(p, "pci_bus_id", None)
        if bus is not None:
            pci = f"{getattr(p, 'pci_domain_id', 0):08X}:{bus:02X}:{p.pci_device_id:02X}.0"
            try:
                return pynvml.nvmlDeviceGetHandleByPciBusId(pci)
            except Exception:  # noqa: BLE001 - fall back to the index
                pass
        return pynvml.nvmlDeviceGetHandleByIndex(idx)

    def _run(self):
        while not self.stop:
            try:
                u = self.nvml.nvmlDeviceGetUtilizationRates(self.h).gpu
            except Exception as exc:  # noqa: BLE001 - say why the figures stop
                self.ok, self.why = False, f"NVML sampling failed: {exc}"
                return
            self.samples.append((time.time(), u))
            time.sleep(0.02)

    def mean(self, t0, t1):
        """Mean utilization of the samples taken in [t0, t1]; NVML's figure is itself an
        average over the last 1/6 s to 1 s, so callers skip the start of a window."""
        if not self.ok:
            return None
        s = [u for t, u in list(self.samples) if t0 <= t <= t1]
        return sum(s) / len(s) if s else None

    def close(self):
        if self.ok:
            self.stop = True
            self.t.join()


def pct(lat_ms, q):
    return float(np.percentile(np.asarray(lat_ms), q))


def naive(model, imgs, n, device):
    lat = []
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(n):
            s = time.perf_counter()
            x = imgs[i:i + 1]
            if device == "cuda":
                x = x.to(device)
            model(x).cpu()
            lat.append((time.perf_counter() - s) * 1e3)
    return n, time.perf_counter() - t0, lat


def best_practice(model, imgs, n, batch, device):
    lat = []
    pinned = None
    if device == "cuda":
        pinned = torch.empty((batch,) + tuple(imgs.shape[1:]), dtype=imgs.dtype).pin_memory()
    t0 = time.perf_counter()
    with torch.inference_mode():
        for b in range(0, n, batch):
            s = time.perf_counter()
            k = min(batch, n - b)
            x = imgs[b:b + k]
            if device == "cuda":
                pinned[:k].copy_(x)
                x = pinned[:k].to(device, non_blocking=True)
            model(x).cpu()  # .cpu() waits for the batch
            lat += [(time.perf_counter() - s) * 1e3] * k
    return n, time.perf_counter() - t0, lat


def gpupipe(bench, pt, size, items, b, k, t, device):
    cap = 1
    while cap < b * (k + 1):
        cap *= 2
    cmd = [bench, "--model", pt, "--input", f"u8:{size}x{size}x3", "--items", str(items),
           "--producers", str(ARGS.producers), "--max-batch", str(b), "--inflight", str(k),
           "--threads", str(t), "--capacity", str(cap),
           "--backend", "cuda" if device == "cuda" else "host"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {out.returncode}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1]), cap


def first_batch(bench, pt, size, warmup, t, device):
    cmd = [bench, "--model", pt, "--input", f"u8:{size}x{size}x3", "--first-batch",
           "--warmup", str(warmup), "--threads", str(t), "--inflight", "1",
           "--backend", "cuda" if device == "cuda" else "host"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {out.returncode}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True, help="path to the built bench/torch-bench")
    ap.add_argument("--device", choices=["cpu", "cuda"],
                    default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--size", type=int, default=0, help="image side (default 64 cpu, 224 cuda)")
    ap.add_argument("--items", type=int, default=5120)
    ap.add_argument("--naive-items", type=int, default=0, help="(i) items (default --items)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--also-batch", type=int, nargs="*", default=[64],
                    help="(ii) also at these batch sizes, to tell batch size from pipelining")
    ap.add_argument("--threads", type=int, default=0,
                    help="PyTorch intra-op threads (default: all cores)")
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--gp", nargs="*", default=None,
                    help="gpupipe configs max_batch/inflight/threads (default: cpu "
                         "256/1/T 256/T/1 64/1/T 64/T/1; cuda 256/3/1 64/3/1)")
    ap.add_argument("--reps", type=int, default=1, help="repetitions; the table gives medians")
    ap.add_argument("--first-reps", type=int, default=3)
    ap.add_argument("--model")
    ap.add_argument("--json")
    ARGS = a = ap.parse_args()
    dev = a.device
    size = a.size or (224 if dev == "cuda" else 64)
    threads = a.threads or (os.cpu_count() or 1)
    torch.set_num_threads(threads)
    gp = a.gp or ([f"256/1/{threads}", f"256/{threads}/1", f"64/1/{threads}", f"64/{threads}/1"]
                  if dev == "cpu"
                  else ["256/3/1", "64/3/1"])
    naive_items = a.naive_items or a.items

    tmp = tempfile.mkdtemp(prefix="torch-bench-")
    pt = a.model or os.path.join(tmp, f"resnet18_{size}.pt")
    if not a.model:
        subprocess.run([sys.executable, os.path.join(ROOT, "examples", "make_resnet18_ts.py"),
                        pt, "--size", str(size)], check=True, stdout=subprocess.DEVNULL)
    model = torch.jit.load(pt, map_location=dev).eval()
    g = torch.Generator().manual_seed(0)
    imgs = torch.randint(0, 256, (a.items, size, size, 3), dtype=torch.uint8, generator=g)
    with torch.inference_mode():  # warm both PyTorch loops: batch 1 and full batches, twice
        for n in [1] + [min(b, a.items) for b in [a.batch] + a.also_batch]:
            x = imgs[:n].to(dev) if dev == "cuda" else imgs[:n]
            model(x).cpu()
            model(x).cpu()
    nv = Nvml(dev)

    raw = {"device": dev, "size": size, "threads": threads, "items": a.items,
                     "torch": torch.__version__}
    if dev == "cuda":
        raw["gpu"] = torch.cuda.get_device_name()

    # Each repetition runs every contender once, in order; the table gives per-row medians
    # (on a shared machine the load moves between contenders, less so between repetitions).
    runs = []

    def add(name, n, secs, lat, util, extra=""):
        rows.append((name, n, n / secs, pct(lat, 50), pct(lat, 99), util, extra))

    raw["gpupipe"] = []
    for rep in range(a.reps):
        rows = []
        e0 = time.time()
        n, secs, lat = naive(model, imgs, naive_items, dev)
        add("(i) naive per-item loop (PyTorch)", n, secs, lat, nv.mean(e0, time.time()),
            f"batch 1, {threads} threads")
        for bs in [a.batch] + [b for b in a.also_batch if b != a.batch]:
            e0 = time.time()
            n, secs, lat = best_practice(model, imgs, a.items, bs, dev)
            add("(ii) PyTorch batched (not pipelined)", n, secs, lat, nv.mean(e0, time.time()),
                f"batch {bs}, {(n + bs - 1) // bs} batches, {threads} threads" +
                (", pinned + non_blocking" if dev == "cuda" else ""))
        for c in gp:
            b, k, t = (int(v) for v in c.split("/"))
            r, cap = gpupipe(a.bench, pt, size, a.items, b, k, t, dev)
            raw["gpupipe"].append(r)
            util = nv.mean(r["t_start_epoch"], r["t_end_epoch"])
            rows.append((f"(iii) gpupipe + LibTorch, {a.producers} producers", r["items"],
                         r["items_per_s"], r["p50_ms"], r["p99_ms"], util,
                         f"max_batch {b}, inflight {k} x {t} threads, ring {cap}; "
                         f"{r['batches']} batches of {r['mean_batch']:.0f}"))
        runs.append(rows)
        print(f"repetition {rep + 1}/{a.reps}: " +
              ", ".join(f"{r[2]:.1f}" for r in rows) + " items/s", file=sys.stderr)

    def med(i, j):
        vals = [run[i][j] for run in runs if run[i][j] is not None]
        return float(np.median(vals)) if vals else None

    rows = [runs[-1][i][:2] + (med(i, 2), med(i, 3), med(i, 4), med(i, 5), runs[-1][i][6])
            for i in range(len(runs[-1]))]
    raw["runs"] = runs
    nv.close()

    fb = {}
    for w in (0, 2):
        fb[w] = [first_batch(a.bench, pt, size, w, threads, dev) for _ in range(a.first_reps)]
    raw["first_batch"] = fb
    raw["rows"] = rows

    base = rows[0][2]
    print(f"\nmodel: ResNet-18 TorchScript (u8 {size}x{size}x3 -> top-5), device {dev}"
          + (f" ({raw['gpu']})" if dev == "cuda" else "") + f", torch {torch.__version__}; "
          f"median of {a.reps} repetition(s)\n")
    print("| contender | items | items/s | vs (i) | p50 ms | p99 ms | GPU util | setup |")
    print("|---|---|---|---|---|---|---|---|")
    for name, n, ips, p50, p99, util, extra in rows:
        u = "n/a" if util is None else f"{util:.0f}%"
        if dev != "cuda":
            u = "— (CPU)"
        print(f"| {name} | {n} | {ips:.1f} | {ips / base:.1f}x | {p50:.1f} | {p99:.1f} | {u} | "
              f"{extra} |")
    print("\ngpupipe first batch (fresh process each; single-item infer):\n")
    print("| warm-up | load ms | create ms (runs warm-up) | first item ms | second item ms |")
    print("|---|---|---|---|---|")
    for w, runs in fb.items():
        med = {k: float(np.median([r[k] for r in runs]))
               for k in ("load_ms", "create_ms", "first_ms", "second_ms")}
        print(f"| {w} | {med['load_ms']:.0f} | {med['create_ms']:.0f} | {med['first_ms']:.1f} | "
              f"{med['second_ms']:.1f} |")
    if dev == "cuda" and not nv.ok:
        print(f"\nGPU utilization: {nv.why}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()
