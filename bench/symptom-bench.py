#!/usr/bin/python3
"""The seeds' symptom, measured (issue 8, B.3): the same weights and the same items run three
ways in one run, with items/s, per-item latency and (on CUDA) the GPU utilization NVML reports.

  (i)   the naive PyTorch loop: batch 1, pageable tensors, model(x.to(dev)).cpu() per item
  (ii)  PyTorch best practice: inference_mode, eval, batch-norm folded into the convolutions
        (torch.fx.experimental.optimization.fuse, as gpupipe folds it), batches of --batch (256,
        the issue's, the same as gpupipe's) staged into pinned buffers and sent with
        non_blocking=True, outputs copied back non_blocking into pinned memory, --inflight + 1
        (4) batches in flight, each slot on its own CUDA stream (copies of one batch overlap
        another's compute, as gpupipe's slots do; one event each), no synchronize per batch;
        cudnn.benchmark on; variants fp32 and fp16 (Linear/Conv weights cast once, autocast for
        the rest; the CNN also channels_last: its u8 HWC input permuted is NHWC-strided in every
        row), each eager and as CUDA graphs (one per slot). The fastest variant is the reference
        for the targets. fp32 is IEEE fp32 on both sides (PyTorch's default TF32 convolutions
        off; --precisions tf32 compares TF32 on both). Not tried: torch.compile (its compile
        time does not fit the GPU run's budget); the u8 normalization runs as PyTorch's eager
        ops.
  (iii) gpupipe: bench/gp-infer (the built-in layers, no PyTorch), --producers (8) threads each
        submitting one item per call, max_batch --batch, --inflight slots, a ring of
        max_batch x (inflight + 1) items rounded up to a power of two; fp32 and fp16, eager and
        with --cuda-graphs.

Models: `mlp`, the demo MLP (784 f32 in, 1024-1024-10, softmax out; its weights from gp-infer
--demo mlp --save-demo), and `resnet18`, a ResNet-18 (torchvision topology, random weights
with random batch-norm statistics, --size x --size x 3 u8 HWC images in, normalization inside,
top-5 class indices out; fc's bias centred on the items, else random weights give every
image the same top class and agreement could not fail). Each side loads the same file.

Every contender runs whole passes over the same items until --seconds have passed (the naive
loop: items one by one until then), so NVML's utilization (a rolling average over 1/6 s to 1 s)
sees a steady state; its first second (or third) in each window is left out of the mean.
gpupipe does this in one process (gp-infer --repeat, sized from a first, shorter run that also
warms it up).
Latency per item: (i) its round trip; (ii) from the host enqueuing its batch's copy-in to the
host holding its batch's output (the loop's retire of that slot); (iii) from its submit call to
its callback, including its wait in the ring.
On CUDA (ii) and (iii) hold at most the same number of items (inflight + 1 batches: gpupipe's
ring), so by Little's law their latencies compare at equal throughput; on a CPU PyTorch's
forward blocks, so (ii) holds one batch while gpupipe's ring holds up to four: compare
items/s there, not latency.
Agreement: the top-1 class of every contender against (ii) fp32 eager, over the first pass
(the column); every item whose top-1 differs must be a near-tie: its class scores, in PyTorch's
IEEE fp32 output, within the precision's tolerance x max |score| of the top class (fp32 1e-4,
tf32 5e-3, fp16/bf16 2e-2, as in the conformance test), else the row says "(N far)" and the run
fails; and the reference must not give one class to over half the items.

usage: symptom-bench.py GP_INFER [--device cuda|cpu] [--models mlp,resnet18] [--items N]
                        [--size S] [--batch 256] [--inflight 3] [--producers 8]
                        [--precisions fp32,fp16] [--seconds S] [--threads T] [--work DIR]
                        [--json OUT.json]
Prints one Markdown table per model (for bench/RESULTS.md); --json writes the raw numbers.
Exit status: 0, or 1 when a contender failed or disagreed with PyTorch fp32 beyond a near-tie.
"""
import argparse
import contextlib
import copy
import importlib.util
import json
import os
import subprocess
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError as exc:  # depends on the machine
    print(f"SKIP: PyTorch/NumPy not importable by {sys.executable} ({exc})")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, file))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MB = _load("model_bench", "model-bench.py")  # DemoMLP, prepare, blas_info, conformance as C
TB = _load("torch_bench", "torch-bench.py")  # Nvml (utilization samples, time.time() tags)
C = MB.C
GX = MB.gx  # tools/gpupipe_export.py: cuda_fp32_math (fp32 means IEEE fp32, as gpupipe's)
MONO_TO_EPOCH = time.time() - time.monotonic()  # gp-infer's window is on CLOCK_MONOTONIC


class Top5(nn.Module):
    def __init__(self, rn):
        super().__init__()
        self.rn = rn

    def forward(self, u8):
        return torch.topk(self.rn(u8), 5, dim=1).indices


def prepare(name, gp_infer, work, items, size):
    """-> (safetensors path, eval torch module (CPU, fp32), items as a NumPy array)."""
    if name == "mlp":
        return MB.prepare("mlp", gp_infer, work, items)
    if name == "resnet18":
        torch.manual_seed(3)
        rn = C.ResNet18(classes=1000).eval()
        C.randomize_bn(rn, torch.Generator().manual_seed(5))
        x = np.random.default_rng(1).integers(0, 256, (items, size, size, 3), dtype=np.uint8)
        C.center_logits(rn, rn.fc, torch.from_numpy(x[:64]))  # else one class for every item
        path = os.path.join(work, f"resnet18_{size}_top5.safetensors")
        C.save_model(rn, path, rn.spec(size) + "topk k=5\n")
        return path, Top5(rn).eval(), x
    raise SystemExit(f"symptom-bench: unknown model '{name}' (mlp, resnet18)")


def ref_scores(module, x, dev):
    """PyTorch fp32 (IEEE) scores of the items (the classifier's output before any top-k):
    what tells a near-tie from a wrong answer in the agreement check."""
    f = copy.deepcopy(module.rn if isinstance(module, Top5) else module).to(dev).eval()
    out = []
    with torch.inference_mode(), GX.cuda_fp32_math(tf32=False):
        for i in range(0, len(x), 256):
            out.append(f(torch.from_numpy(x[i:i + 256]).to(dev)).float().cpu())
    return torch.cat(out).numpy().astype(np.float64)


def far_flips(picked, scores, prec):
    """Items whose top-1 differs from PyTorch fp32's by more than a near-tie: the class picked
    scores, in fp32, more than the precision's tolerance (the conformance test's: fp32 1e-4,
    tf32 5e-3, fp16/bf16 2e-2) x max |score| below fp32's top class."""
    band = C.TOL[prec] * max(float(np.max(np.abs(scores))), 1e-30)
    rows = np.arange(len(picked))
    return int(np.sum(scores.max(axis=1) - scores[rows, picked] > band))


def top1(y):
    y = np.asarray(y)
    return y[:, 0] if y.dtype.kind == "i" else np.argmax(y, axis=1)


def pct(lat_ms, q):
    return float(np.percentile(np.asarray(lat_ms), q)) if len(lat_ms) else float("nan")


def naive(module, x, dev, seconds):
    """(i): one item at a time from pageable memory, .cpu() after each."""
    module = copy.deepcopy(module).to(dev).eval()
    host = torch.from_numpy(x)
    lat, outs, n = [], [], 0
    with torch.inference_mode(), GX.cuda_fp32_math(tf32=False):
        for i in range(3):  # warm-up: the first calls pick kernels
            module(host[i:i + 1].to(dev)).cpu()
        t0, e0 = time.perf_counter(), time.time()
        while True:
            s = time.perf_counter()
            y = module(host[n % len(x):n % len(x) + 1].to(dev)).cpu()
            e = time.perf_counter()
            lat.append((e - s) * 1e3)
            if n < len(x):
                outs.append(y)
            n += 1
            if e - t0 >= seconds and n >= min(len(x), 64):
                break
        secs = time.perf_counter() - t0
    first = torch.cat(outs).numpy()
    return dict(items=n, secs=secs, lat=lat, y=first, epoch0=e0, epoch1=time.time(),
                agree_items=len(first))


def best_practice(module, x, dev, batch, inflight, precision, graphs, channels_last, seconds):
    """(ii): batches staged in pinned memory, non_blocking copies, bounded in-flight batches,
    a CUDA stream per in-flight slot."""
    cuda = dev == "cuda"
    # each variant its own copy: BN folded, 16-bit weights cast once, autocast for the rest
    module, folded = MB.torch_for_inference(module, dev, precision, channels_last)
    n_all = len(x)
    host = torch.from_numpy(x)  # pageable, as a service receives its items
    slots = min(inflight + 1, (n_all + batch - 1) // batch)  # as many batches as gpupipe's ring
    stage = [torch.empty((batch,) + tuple(host.shape[1:]), dtype=host.dtype, pin_memory=cuda)
             for _ in range(slots)]
    with torch.inference_mode(), GX.cuda_fp32_math(tf32=precision == "tf32"):
        probe = module(stage[0].to(dev))
        out_shape, out_dtype = tuple(probe.shape[1:]), probe.dtype
        outs = [torch.empty((batch,) + out_shape, dtype=out_dtype, pin_memory=cuda)
                for _ in range(slots)]
        first = torch.empty((n_all,) + out_shape, dtype=out_dtype)
        # A stream per slot: slot j's copies and compute are ordered on streams[j] and overlap
        # the other slots' (one graph per slot: a graph's input and output buffers are its own).
        streams = [torch.cuda.Stream() for _ in range(slots)] if cuda else None
        steps = ([MB.cuda_graph_step(module, batch, host, dev) for _ in range(slots)]
                 if graphs else None)
        # The weights' casts and the probe ran on the default stream, which PyTorch's
        # (non-blocking) slot streams do not wait for.
        if cuda:
            torch.cuda.synchronize()

        pending = [None] * slots  # per slot: (done event, items, offset, enqueue time)

        def retire(j, record):  # the slot's last batch done: the host has its outputs
            ev, k, off, t_enq = pending[j]
            if cuda:
                ev.synchronize()
            first[off:off + k].copy_(outs[j][:k])
            record.append((t_enq, time.perf_counter(), k))
            pending[j] = None

        def one_pass(record):
            """Every item once; record gets (enqueue time, time the host had it, items)."""
            for b, i in enumerate(range(0, n_all, batch)):
                k, j = min(batch, n_all - i), b % slots
                if pending[j] is not None:  # bounded: at most `slots` batches queued
                    retire(j, record)
                t_enq = time.perf_counter()
                stage[j][:k].copy_(host[i:i + k])
                with torch.cuda.stream(streams[j]) if cuda else contextlib.nullcontext():
                    if steps is not None and k == batch:
                        y = steps[j](stage[j])
                    else:
                        y = module(stage[j][:k].to(dev, non_blocking=True))
                    outs[j][:k].copy_(y[:k], non_blocking=True)
                    ev = None
                    if cuda:
                        ev = torch.cuda.Event()
                        ev.record()  # on streams[j]
                pending[j] = (ev, k, i, t_enq)
            for j in range(slots):
                if pending[j] is not None:
                    retire(j, record)

        one_pass([])  # warm-up pass (cudnn.benchmark picks its algorithms here)
        if cuda:
            torch.cuda.synchronize()
        rec_all, passes = [], 0
        t0, e0 = time.perf_counter(), time.time()
        while True:
            one_pass(rec_all)
            passes += 1
            if time.perf_counter() - t0 >= seconds:
                break
        secs = time.perf_counter() - t0  # one_pass waited for its last batches
    lat = []
    for t_enq, t_done, k in rec_all:
        lat += [(t_done - t_enq) * 1e3] * k
    y = first.float().numpy() if first.is_floating_point() else first.numpy()
    return dict(items=passes * n_all, secs=secs, lat=lat, y=y, epoch0=e0, epoch1=e0 + secs,
                agree_items=n_all, folded=folded)


def gpupipe(gp_infer, path, xpath, work, dev, batch, inflight, producers, precision, graphs,
            seconds):
    cap = 1
    while cap < batch * (inflight + 1):
        cap *= 2
    ypath, rpath = os.path.join(work, "y.npy"), os.path.join(work, "report.json")
    base = [gp_infer, "--model", path, "--input", xpath, "--output", ypath,
            "--backend", "cuda" if dev == "cuda" else "host", "--batch", str(batch),
            "--inflight", str(inflight), "--producers", str(producers), "--capacity", str(cap),
            "--precision", precision, "--report", rpath, "--quiet"]
    if graphs:
        base.append("--cuda-graphs")

    def run(repeat):
        p = subprocess.run(base + ["--repeat", str(repeat)], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(base)}: exit {p.returncode}: {p.stderr.strip()}")
        with open(rpath) as f:
            return json.load(f)

    r = run(1)  # also the warm-up; sizes the timed run to --seconds
    n = r["items"]  # the input's items (one pass)
    for _ in range(2):  # the probe's rate includes its cold start: one more try if short
        want = 1.1 * seconds * r["items_per_s"] / n
        repeat = max(1, min(1 << 20, int(np.ceil(want))))
        r = run(repeat)
        if r["seconds"] >= 0.8 * seconds or repeat == 1 << 20:
            break
    r["cap"], r["y"], r["secs"] = cap, np.load(ypath), r["seconds"]
    r["epoch0"] = r["t_start_ns"] * 1e-9 + MONO_TO_EPOCH
    r["epoch1"] = r["t_end_ns"] * 1e-9 + MONO_TO_EPOCH
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gp_infer")
    ap.add_argument("--device", choices=["cpu", "cuda"],
                    default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", default="mlp,resnet18")
    ap.add_argument("--items", type=int, default=0,
                    help="distinct items per model (default cuda: mlp 65536, resnet18 8192; "
                    "cpu: 8192, 512)")
    ap.add_argument("--size", type=int, default=0, help="ResNet-18 image side (224; cpu 64)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--inflight", type=int, default=0,
                    help="batches in flight, (ii) and (iii) (default 3; cpu: --threads)")
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--precisions", default="", help="default cuda fp32,fp16; cpu fp32")
    ap.add_argument("--seconds", type=float, default=0, help="per contender (cuda 4, cpu 2)")
    ap.add_argument("--threads", type=int, default=0,
                    help="PyTorch intra-op threads (default: every core)")
    ap.add_argument("--work", default="/tmp/gp-symptom-bench")
    ap.add_argument("--json")
    a = ap.parse_args()
    dev, cuda = a.device, a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("symptom-bench: --device cuda, but this torch sees no CUDA device")
    os.makedirs(a.work, exist_ok=True)
    threads = a.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    torch.backends.cudnn.benchmark = True
    size = a.size or (224 if cuda else 64)
    # On a CPU the host backend computes one batch per slot on its own thread: give both sides
    # the same threads (PyTorch's intra-op threads = gpupipe's slots).
    inflight = a.inflight or (3 if cuda else threads)
    precisions = (a.precisions or ("fp32,fp16" if cuda else "fp32")).split(",")
    seconds = a.seconds or (4.0 if cuda else 2.0)
    nv = TB.Nvml(dev)
    gpu = torch.cuda.get_device_name() if cuda else ""
    print(f"symptom-bench: device {dev}" + (f" ({gpu})" if cuda else "")
          + f", torch {torch.__version__}" + (f" CUDA {torch.version.cuda}" if cuda else "")
          + f"; PyTorch {torch.get_num_threads()} threads, {MB.blas_info()}; batch {a.batch}, "
          f"inflight {inflight}, gpupipe producers {a.producers}; {seconds:g} s per contender"
          + ("" if nv.ok or not cuda else f"; GPU utilization: {nv.why}"), flush=True)
    raw, bad = {"device": dev, "gpu": gpu, "torch": torch.__version__, "models": {}}, 0
    for name in a.models.split(","):
        items = a.items or {("mlp", True): 65536, ("resnet18", True): 8192,
                            ("mlp", False): 8192, ("resnet18", False): 512}[(name, cuda)]
        path, module, x = prepare(name, a.gp_infer, a.work, items, size)
        xpath = os.path.join(a.work, f"x_{name}.npy")
        np.save(xpath, x)
        rows, ref_y, scores = [], None, None

        def add(label, r, setup, prec):
            nonlocal ref_y, bad, scores
            y = r["y"][:r["agree_items"]]
            if ref_y is None:
                ref_y = y
                share = np.unique(top1(y), return_counts=True)[1].max() / len(y)
                if share > 0.5:  # agreement would be vacuous: the check could not fail
                    print(f"  {name}: {100 * share:.0f} % of the reference's items have one "
                          "top-1 class: the agreement check means nothing", file=sys.stderr)
                    bad = 1
            agree = float(np.mean(top1(y) == top1(ref_y[:len(y)])))
            # fp16 flips near-ties: on the random ResNet-18, whose 1000 logits sit close
            # together, PyTorch's own fp16 agreed with its fp32 on 93.5 % of items (first H200
            # run, 2026-11-26). A flip that is not a near-tie fails the run.
            if scores is None or len(scores) < len(y):
                scores = ref_scores(module, x[:len(y)], dev)
            far = far_flips(top1(y), scores[:len(y)], prec)
            if far:
                bad = 1
            w = r["epoch1"] - r["epoch0"]  # NVML averages over up to 1 s: skip the first second
            util = nv.mean(r["epoch0"] + min(1.0, w / 3), r["epoch1"])
            rows.append(dict(label=label, items=r["items"], ips=r["items"] / r["secs"],
                             p50=pct(r["lat"], 50) if "lat" in r else r["p50_ms"],
                             p99=pct(r["lat"], 99) if "lat" in r else r["p99_ms"],
                             util=util, agree=agree, far=far, setup=setup))
            print(f"  {name}: {label}: {rows[-1]['ips']:.1f} items/s", file=sys.stderr,
                  flush=True)

        # (ii) fp32 eager first: the reference for agreement.
        variants = []
        for prec in precisions:
            for graphs in ([False, True] if cuda else [False]):
                variants.append((prec, graphs))
        for prec, graphs in variants:
            cl = cuda and prec != "fp32" and name == "resnet18"
            try:
                r = best_practice(module, x, dev, a.batch, inflight, prec, graphs, cl, seconds)
            except Exception as exc:  # e.g. a capture PyTorch refuses: say so, go on
                print(f"  {name}: (ii) {prec}{' graphs' if graphs else ''}: {exc}",
                      file=sys.stderr)
                bad = 1
                continue
            add("(ii) PyTorch best practice", r,
                f"{prec}{', channels_last' if cl else ''}{r['folded']}"
                f"{', CUDA graphs' if graphs else ''}, a stream per slot" if cuda else
                f"{prec}{r['folded']}", prec)
        r = naive(module, x, dev, seconds)
        add("(i) naive loop (PyTorch)", r, "batch 1, pageable, fp32", "fp32")
        for prec, graphs in variants:
            try:
                r = gpupipe(a.gp_infer, path, xpath, a.work, dev, a.batch, inflight,
                            a.producers, prec, graphs, seconds)
            except Exception as exc:  # one failed row must not lose the whole run's tables
                print(f"  {name}: (iii) {prec}: {exc}", file=sys.stderr)
                bad = 1
                continue
            r["agree_items"] = len(x)
            add(f"(iii) gpupipe, {a.producers} producers", r,
                f"{prec}{', --cuda-graphs' if graphs else ''}; ring {r['cap']}, "
                f"{r['batches']} batches of {r['mean_batch']:.0f}", prec)
        raw["models"][name] = rows
        if not rows:
            continue
        rows.sort(key=lambda r: r["label"].split(")")[0])  # (i), (ii)..., (iii)... (stable)
        naive_ips = next((r["ips"] for r in rows if r["label"].startswith("(i)")), None)
        best_ii = max((r["ips"] for r in rows if r["label"].startswith("(ii)")), default=None)
        gp = max((r for r in rows if r["label"].startswith("(iii)")), key=lambda r: r["ips"],
                 default=None)
        desc = ("demo MLP, 784 f32 -> 10 softmax" if name == "mlp" else
                f"ResNet-18, u8 {size}x{size}x3 -> top-5")
        print(f"\n{name}: {desc}; {len(x)} distinct items\n")
        print("| contender | setup | items | items/s | vs (i) | vs best (ii) | p50 ms | p99 ms "
              "| GPU util | top-1 agree |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            u = "n/a" if r["util"] is None else f"{r['util']:.0f} %"
            if not cuda:
                u = "- (CPU)"
            vs_i = f"{r['ips'] / naive_ips:.1f}x" if naive_ips else "n/a"
            vs_ii = f"{r['ips'] / best_ii:.2f}x" if best_ii else "n/a"
            far = f" ({r['far']} far)" if r["far"] else ""
            print(f"| {r['label']} | {r['setup']} | {r['items']} | {r['ips']:.1f} | {vs_i} | "
                  f"{vs_ii} | {r['p50']:.2f} | {r['p99']:.2f} | {u} | "
                  f"{100 * r['agree']:.1f} %{far} |")
        if gp and naive_ips and best_ii:  # issue 8 B.3's targets, from gpupipe's fastest row
            want = 1.5 if name == "mlp" else 1.0
            verdict = lambda ok: "met" if ok else "NOT met"
            print(f"\ntargets ({name}, gpupipe {gp['setup'].split(';')[0]}): "
                  f"gpupipe / naive = {gp['ips'] / naive_ips:.1f}x (>= 20x: "
                  f"{verdict(gp['ips'] >= 20 * naive_ips)}); gpupipe / best (ii) = "
                  f"{gp['ips'] / best_ii:.2f}x (>= {want}x: "
                  f"{verdict(gp['ips'] >= want * best_ii)})" +
                  ("" if not cuda else "; GPU utilization " +
                   ("n/a" if gp["util"] is None else
                    f"{gp['util']:.0f} % (>= 95 %: {verdict(gp['util'] >= 95)})")))
        sys.stdout.flush()
    nv.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)
    return bad


if __name__ == "__main__":
    sys.exit(main())
