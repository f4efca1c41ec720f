#!/usr/bin/env python3
"""gpupipe's variable-length attention kernel against torch's scaled_dot_product_attention, per
token, on the same batches (the issue's target: within 2x of SDPA per token at fp16).

    python3 bench/attention-bench.py BUILD/bench/attention-bench [--dtype fp16|bf16]
                                     [--iters N] [--quick]

For each workload (heads, head dim, a batch of item lengths) it times, on one GPU:
  ours          attention-bench (the kernel alone: packed QKV in, packed O out, no padding)
  flash padded  F.scaled_dot_product_attention on [B, h, Lmax, d], FLASH_ATTENTION backend,
                no mask: the padding is computed (and would be wrong for short items), so this
                is the cost a padded server pays, per real token
  sdpa masked   the same with a boolean key-padding mask, torch's own backend choice: what a
                padded server computes correctly
  sdpa jagged   nested jagged tensors (torch.nested, layout=torch.jagged), no padding: the
                same work as ours
  cudnn padded  CUDNN_ATTENTION backend on the padded batch, no mask: cuDNN's fused attention,
                the alternative the kernel was chosen over (lib/cuda/attention.c)
Each figure is the median of --iters timed calls (CUDA events) after warm-up, divided by the
batch's real tokens. A variant torch cannot run here prints "n/a" with the reason. The last
columns: ours / the fastest torch variant, and whether that is within the 2x target.

Needs torch with CUDA and the built attention-bench (bench/gpu-run.sh build). Exit status: 0
when it ran (whatever the ratios), 77 without a GPU, 1 on errors.
"""
import argparse
import random
import statistics
import subprocess
import sys


def workloads(quick):
    rnd = random.Random(1234)
    mixed = [rnd.randint(16, 512) for _ in range(64)]
    short = [rnd.randint(8, 64) for _ in range(256)]
    w = [
        ("bert-base, 64 x 128 tokens", 12, 64, [128] * 64),
        ("bert-base, 16 x 512 tokens", 12, 64, [512] * 16),
        ("bert-base, 64 items of 16..512", 12, 64, mixed),
        ("bert-base, 256 items of 8..64", 12, 64, short),
        ("minilm (d=32), 64 items of 16..512", 12, 32, mixed),
        ("d=128, 64 items of 16..512", 8, 128, mixed),
    ]
    return w[:2] if quick else w


def lengths_arg(lens):
    """[128, 128, 7] -> '128x2,7'"""
    out, i = [], 0
    while i < len(lens):
        j = i
        while j < len(lens) and lens[j] == lens[i]:
            j += 1
        out.append(f"{lens[i]}x{j - i}" if j - i > 1 else str(lens[i]))
        i = j
    return ",".join(out)


def run_ours(exe, dtype, heads, d, lens, iters):
    cmd = [exe, "--dtype", dtype, "--heads", str(heads), "--head-dim", str(d), "--lengths",
           lengths_arg(lens), "--iters", str(iters)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return None, (r.stdout + r.stderr).strip().splitlines()[-1:] or ["exit %d" % r.returncode]
    kv = dict(f.split("=", 1) for f in r.stdout.split() if "=" in f)
    return float(kv["ns_per_token"]), kv


def time_cuda(torch, fn, iters, warmup=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        # A spin kernel ahead of the start event: Python's dispatch of fn() happens while the
        # GPU spins, so the events time the kernel, not the host (bench/attention-bench.c
        # times one bare launch the same way).
        torch.cuda._sleep(1_000_000)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)  # us
    return statistics.median(times)


def torch_variants(torch, F, dtype, heads, d, lens, iters):
    dev = "cuda"
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    B, Lmax, T = len(lens), max(lens), sum(lens)
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.rand(B, heads, Lmax, d, device=dev, dtype=dt, generator=g) * 4 - 2
               for _ in range(3))
    res = {}

    def per_token(name, fn):
        try:
            us = time_cuda(torch, fn, iters)
            res[name] = (us * 1e3 / T, "")
        except Exception as e:  # noqa: BLE001  (report why a variant cannot run)
            res[name] = (None, f"{type(e).__name__}: {str(e).splitlines()[0][:80]}")

    backend = getattr(getattr(torch.nn, "attention", None), "SDPBackend", None)
    kernel_ctx = getattr(getattr(torch.nn, "attention", None), "sdpa_kernel", None)

    def with_backend(name_enum, fn):
        if backend is None or kernel_ctx is None or not hasattr(backend, name_enum):
            raise RuntimeError(f"torch {torch.__version__} has no torch.nn.attention.{name_enum}")

        def run():
            with kernel_ctx(getattr(backend, name_enum)):
                return fn()
        return run

    def flash():
        return F.scaled_dot_product_attention(q, k, v)
    per_token("flash padded", with_backend("FLASH_ATTENTION", flash))

    mask = torch.zeros(B, 1, 1, Lmax, dtype=torch.bool, device=dev)
    for i, L in enumerate(lens):
        mask[i, :, :, :L] = True

    def masked():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    per_token("sdpa masked", masked)

    def jagged_fn():
        # Packed values [T, h, d] with one offsets tensor shared by q, k and v (so they share
        # the ragged dimension), viewed as [B, h, j, d].
        offsets = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(B)], device=dev,
                               dtype=torch.int64)

        def part():
            vals = torch.rand(T, heads, d, device=dev, dtype=dt, generator=g) * 4 - 2
            return torch.nested.nested_tensor_from_jagged(vals, offsets).transpose(1, 2)
        qj, kj, vj = part(), part(), part()
        return lambda: F.scaled_dot_product_attention(qj, kj, vj)
    try:
        per_token("sdpa jagged", jagged_fn())
    except Exception as e:  # noqa: BLE001
        res["sdpa jagged"] = (None, f"{type(e).__name__}: {str(e).splitlines()[0][:80]}")

    per_token("cudnn padded", with_backend("CUDNN_ATTENTION", flash))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench", help="path to the built attention-bench")
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="the first two workloads only")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"attention-bench.py: no torch here ({e})")
        return 77
    if not torch.cuda.is_available():
        print(f"attention-bench.py: torch {torch.__version__} sees no CUDA device")
        return 77
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__} "
          f"(CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}); dtype {a.dtype}; "
          f"median of {a.iters} calls; ns per real token")
    cols = ["flash padded", "sdpa masked", "sdpa jagged", "cudnn padded"]
    print("| workload | tokens | ours (kernel) | " + " | ".join(cols) +
          " | ours / fastest torch | within 2x |")
    print("|---|---|---|" + "---|" * len(cols) + "---|---|")
    notes = []
    for name, heads, d, lens in workloads(a.quick):
        ours, info = run_ours(a.bench, a.dtype, heads, d, lens, a.iters)
        if ours is None:
            print(f"| {name} | {sum(lens)} | failed: {' '.join(info)} |" + " |" * (len(cols) + 2))
            continue
        tv = torch_variants(torch, F, a.dtype, heads, d, lens, a.iters)
        cells = []
        for c in cols:
            val, why = tv[c]
            cells.append(f"{val:.3f}" if val is not None else "n/a")
            if why:
                notes.append(f"{name}, {c}: {why}")
        best = min((v for v, _ in tv.values() if v is not None), default=None)
        ratio = f"{ours / best:.2f}" if best else "n/a"
        within = ("yes" if ours <= 2 * best else "NO") if best else "n/a"
        print(f"| {name} | {sum(lens)} | {ours:.3f} ({info['kernel']}) | " + " | ".join(cells) +
              f" | {ratio} | {within} |")
        torch.cuda.empty_cache()
    for n in notes:
        print(f"n/a: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
