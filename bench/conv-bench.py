#!/usr/bin/python3
"""Why gpupipe's convolutions trail PyTorch's, shape by shape: bench/conv-bench (cuDNN's legacy
API as lib/cuda/conv.c uses it) beside PyTorch's own F.conv2d on the same shapes.

usage: conv-bench.py CONV_BENCH [--precisions fp32,fp16] [--batch 256] [--reps 5]
                     [--shapes resnet18|FILE] [--torch-cudnn] [--json OUT]

Why: on the first H200 run (2026-11-26, RESULTS.md) gpupipe ran the ResNet-18 at 0.68x
PyTorch's speed in fp16 and 0.75x in fp32, and bench/layer-bench.py put the gap in the
convolutions (up to 2.8x for the 3x3 stride-1 ones in fp32). Per convolution shape this sets
apart what could explain it:

  conv-bench    for each precision: conv.c's algorithm rule (every usable entry of the
                heuristic's list, timed; until 2026-11-26 its first 3) against every algorithm
                and math type timed, NCHW against NHWC, the fused conv + bias + relu; its raw
                output is printed indented;
                and the graph API's engines (cudnnBackend*, as PyTorch 2 reaches cuDNN),
                their fastest output checked against the legacy API's (GRAPH_TOL);
  PyTorch       F.conv2d on the same shapes (no bias), cudnn.benchmark, IEEE fp32 for fp32
                (no TF32), NCHW and channels_last; 3 warm-up calls, then the median of R calls,
                each between two CUDA events, queued behind torch.cuda._sleep so that the events
                time the GPU (conv-bench times its runs the same way);
  --torch-cudnn conv-bench again with LD_LIBRARY_PATH led by the directory of the cuDNN that
                PyTorch loaded (its wheels'), so the same legacy-API rules are timed under
                PyTorch's cuDNN too: whether the cuDNN version is the gap.

Order (a run cut short keeps what came first): conv-bench with the loader's cuDNN, PyTorch, the
tables; then the --torch-cudnn runs and their tables. --budget S (default: $GPU_RUN_STEP_S, set
by bench/gpu-run.sh to the step's limit) caps each conv-bench run and leaves out what no longer
fits, saying so; the rows a killed or failed conv-bench printed before it stopped are kept.

Prints, per precision, a Markdown table: shape | count | ours(h) NCHW | best(a) NCHW |
best(a) NHWC | graph(g) NCHW | graph(g) NHWC | PyTorch NCHW | PyTorch channels_last |
ours/PyTorch-best | reachable/PyTorch-best (ms per convolution, weighted totals = sum of count x
ms; reachable: the fastest of (a) and (g), what conv.c could get from the same cuDNN; in fp16 /
bf16 then graph(r) NCHW | graph(r) NHWC | with (r)/PyTorch-best: conv-bench's (r), the engines
that sum in 16 bits, which conv.c forbids and PyTorch's engine filter allows), and with
--torch-cudnn one of conv-bench under the cuDNN the loader finds against PyTorch's. Exit status:
0; 1 when a run failed or a graph(g) output is over its limit; 77 without PyTorch or a CUDA
device (SKIP line).
"""
import argparse
import faulthandler
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
try:
    import torch
    import torch.nn.functional as F
    import gpupipe_export as gx  # cuda_fp32_math: IEEE fp32 on any PyTorch version
except ImportError as exc:  # depends on the machine
    print(f"SKIP: PyTorch/NumPy not importable by {sys.executable} ({exc})")
    sys.exit(77)

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# (g)'s output against the legacy API's, relative to the output's magnitude: fp32 sums in another
# order; fp16 / bf16 add their output rounding (2^-11, 2^-8) and tensor-core accumulation order.
GRAPH_TOL = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 3e-2}
BIN_TIMEOUT_S = 240  # one conv-bench run; ~10 s expected on an H200
KV = re.compile(r"^conv-bench: (\w+)=")


def run_bench(cmd, env=None, limit=BIN_TIMEOUT_S):
    """Runs conv-bench, echoing its output indented as it comes; killed after `limit` s.
    -> (exit status, lines)."""
    extra = f" (LD_LIBRARY_PATH={env['LD_LIBRARY_PATH']})" if env else ""
    print(f"\n$ {' '.join(cmd)}{extra}", flush=True)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env)
    timer = threading.Timer(limit, p.kill)
    timer.start()
    lines = []
    try:
        for ln in p.stdout:
            lines.append(ln.rstrip("\n"))
            print("    " + lines[-1], flush=True)
        rc = p.wait()
    finally:
        timer.cancel()
    if rc < 0:
        print(f"conv-bench.py: conv-bench killed (signal {-rc}; the limit was {limit:.0f} s)",
              flush=True)
    print(f"  ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    return rc, lines


def parse(lines):
    """conv-bench's key=value lines -> (header dict, {(shape, layout): row dict}, [shapes in
    order]); the loaded libraries as header['loaded'], a list."""
    head, rows, order = {"loaded": []}, {}, []
    for ln in lines:
        if not KV.match(ln):
            continue
        body = ln[len("conv-bench: "):]
        try:
            toks = shlex.split(body)
        except ValueError:  # a quote in a why= value (conv_graph.c: "cuDNN's graph heuristic ...")
            toks = body.split()
        kv = dict(t.split("=", 1) for t in toks if "=" in t)
        if "shape" in kv:
            try:
                for k, v in kv.items():
                    if k.endswith("_ms") or k in ("n", "c", "hw", "k", "r", "stride", "pad",
                                                  "out", "count"):
                        kv[k] = None if v == "-" else (float(v) if k.endswith("_ms") else int(v))
                key = (kv["shape"], kv["layout"])
                if "count" not in kv:  # the tables need it
                    raise KeyError("count")
                for k in ("fused_z_nan", "g_diff", "r_diff"):  # read as numbers by the tables
                    if kv.get(k, "-") != "-":
                        float(kv[k])
            except (KeyError, ValueError) as exc:  # one bad line must not lose the tables
                print(f"conv-bench.py: line not understood ({type(exc).__name__}: {exc}): {ln}",
                      flush=True)
                continue
            rows[key] = kv
            if kv["shape"] not in order:
                order.append(kv["shape"])
        elif "loaded" in kv:
            head["loaded"].append(kv["loaded"])
        else:
            head.update(kv)
    return head, rows, order


def torch_cudnn_dirs():
    """The directories of the cuDNN PyTorch loaded (then of its other nvidia wheel libraries,
    which that cuDNN may open): from /proc/self/maps, else nvidia.cudnn's lib. [] if none."""
    torch.backends.cudnn.version()  # loads it
    dnn, other = [], []
    try:
        with open("/proc/self/maps") as f:
            for ln in f:
                parts = ln.split(None, 5)
                if len(parts) < 6 or not parts[5].startswith("/"):
                    continue
                path = parts[5].strip()
                d, base = os.path.dirname(path), os.path.basename(path)
                if base.startswith("libcudnn"):
                    dnn.append(d)
                elif f"{os.sep}nvidia{os.sep}" in path:
                    other.append(d)
    except OSError:
        pass
    if not dnn:
        try:
            import nvidia.cudnn as nc  # PyTorch's wheel, when it has one
            base = os.path.dirname(nc.__file__) if getattr(nc, "__file__", None) else \
                list(nc.__path__)[0]
            if os.path.isdir(os.path.join(base, "lib")):
                dnn.append(os.path.join(base, "lib"))
        except ImportError:
            pass
    out = []
    for d in dnn + (other if dnn else []):
        if d not in out:
            out.append(d)
    return out


def time_torch(row, prec, channels_last, reps):
    """PyTorch's F.conv2d for one conv-bench row: median ms of `reps` calls."""
    dev, dt = torch.device("cuda"), DTYPES[prec]
    g = torch.Generator(device=dev).manual_seed(1)
    x = (torch.rand(row["n"], row["c"], row["hw"], row["hw"], device=dev, generator=g) * 2 - 1)
    w = (torch.rand(row["k"], row["c"], row["r"], row["r"], device=dev, generator=g) * 2 - 1)
    x, w = x.to(dt), (w * 0.1).to(dt)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
        w = w.contiguous(memory_format=torch.channels_last)
    s, p = row["stride"], row["pad"]
    with torch.inference_mode(), gx.cuda_fp32_math(tf32=False):
        for _ in range(3):  # cudnn.benchmark times its algorithms on the first
            F.conv2d(x, w, None, s, p)
        torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
        if hasattr(torch.cuda, "_sleep"):  # the calls below are queued while the GPU spins
            torch.cuda._sleep(2_000_000 + 400_000 * reps)
        ev[0].record()
        for i in range(reps):
            F.conv2d(x, w, None, s, p)
            ev[i + 1].record()
        ev[-1].synchronize()
        return statistics.median(ev[i].elapsed_time(ev[i + 1]) for i in range(reps))


def fmt(v):
    return "-" if v is None else f"{v:.3f}"


def wsum(vals, counts):
    """Sum of count x value, with how many values are missing (a count-0 shape, outside the
    totals, is never missing)."""
    tot = sum(c * v for v, c in zip(vals, counts) if v is not None)
    miss = sum(v is None for v, c in zip(vals, counts) if c)
    if miss == sum(1 for c in counts if c):
        return "-"
    return f"{tot:.3f}" + (f" ({miss} missing)" if miss else "")


def ratio(a, b):
    return "-" if a is None or b is None or b <= 0 else f"{a / b:.2f}"


def total(vals, counts):
    if any(v is None for v, c in zip(vals, counts) if c):
        return None
    return sum(c * v for v, c in zip(vals, counts) if c)


def joined_table(prec, batch, order, rows, pt):
    red = prec != "fp32"  # (r): the engines reducing in 16 bits, fp16 / bf16 only
    print(f"\n{prec}: ms per convolution, batch {batch}; ours(h) = conv.c's rule, best(a) = "
          "every legacy-API algorithm (FFT apart), graph(g) = the graph API's fastest engine, "
          "PyTorch = F.conv2d with cudnn.benchmark"
          + (" (IEEE fp32)" if prec == "fp32" else "") + "; reachable = the fastest of (a) and "
          "(g) in either layout"
          + ("; graph(r) = the graph API's fastest engine noted REDUCED_PRECISION_REDUCTION "
             "(sums in 16 bits: conv.c forbids it, PyTorch's engine filter does not); with (r) = "
             "the fastest of reachable and (r)" if red else "") + "\n")
    extra = " graph(r) NCHW | graph(r) NHWC | with (r)/PyTorch-best |" if red else ""
    print("| shape | count | ours(h) NCHW | best(a) NCHW | best(a) NHWC | graph(g) NCHW | "
          "graph(g) NHWC | PyTorch NCHW | PyTorch channels_last | ours/PyTorch-best | "
          "reachable/PyTorch-best |" + extra)
    print("|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if red else ""))
    cols = [[] for _ in range(12)]
    counts = []
    for name in order:
        r0, r1 = rows.get((name, "NCHW"), {}), rows.get((name, "NHWC"), {})
        t = pt.get(name, (None, None))
        best_pt = min((v for v in t if v is not None), default=None)
        ours = [r0.get("a_ms"), r1.get("a_ms"), r0.get("g_ms"), r1.get("g_ms")]
        reach = min((v for v in ours if v is not None), default=None)
        red_ms = [r0.get("r_ms"), r1.get("r_ms")]
        with_r = min((v for v in [reach] + red_ms if v is not None), default=None)
        vals = [r0.get("h_ms"), r0.get("a_ms"), r1.get("a_ms"), r0.get("g_ms"), r1.get("g_ms"),
                t[0], t[1], best_pt, reach] + red_ms + [with_r]
        r = r0 or r1
        counts.append(r["count"])
        for col, v in zip(cols, vals):
            col.append(v)
        print(f"| {name} {r['c']}->{r['k']} {r['r']}x{r['r']}/{r['stride']} @{r['hw']} | "
              f"{r['count']} | " + " | ".join(fmt(v) for v in vals[:7])
              + f" | {ratio(vals[0], best_pt)} | {ratio(reach, best_pt)} |"
              + (f" {fmt(red_ms[0])} | {fmt(red_ms[1])} | {ratio(with_r, best_pt)} |"
                 if red else ""))
    print(f"| weighted total | {sum(counts)} | "
          + " | ".join(wsum(col, counts) for col in cols[:7])
          + f" | {ratio(total(cols[0], counts), total(cols[7], counts))}"
          + f" | {ratio(total(cols[8], counts), total(cols[7], counts))} |"
          + (f" {wsum(cols[9], counts)} | {wsum(cols[10], counts)} | "
             f"{ratio(total(cols[11], counts), total(cols[7], counts))} |" if red else ""))
    # (g)'s output against the legacy API's fastest (conv-bench's g_diff: the largest
    # difference over the largest magnitude)
    tol = GRAPH_TOL[prec]
    diffs = [(float(rw["g_diff"]), f"{n} {lay}") for (n, lay), rw in rows.items()
             if rw.get("g_diff", "-") != "-"]
    bad = [f"{w} {d:.3g}" for d, w in diffs if not d <= tol]
    print(f"\n{prec}: graph(g) output vs best(a)'s: " + (
        "not compared (no plan ran)" if not diffs else
        f"largest difference {max(d for d, _ in diffs):.3g} of the output's magnitude over "
        f"{len(diffs)} shape/layouts (limit {tol:g})"
        + (f"; OVER THE LIMIT: {', '.join(bad)}" if bad else "")))
    # (r)'s output against the legacy API's fastest: how far sums in 16 bits move it (reported,
    # not held to GRAPH_TOL: conv.c does not run these engines)
    rdiffs = [(float(rw["r_diff"]), f"{n} {lay}") for (n, lay), rw in rows.items()
              if rw.get("r_diff", "-") != "-"]
    if red:
        print(f"{prec}: graph(r) output vs best(a)'s: " + (
            "not compared (no reduced-precision engine ran)" if not rdiffs else
            "largest difference {:.3g} ({}) of the output's magnitude over {} shape/layouts "
            "(graph(g)'s limit {:g}, not applied)".format(*max(rdiffs), len(rdiffs), tol)))
    return bad


def cudnn_table(prec, order, sys_rows, tc_rows, pt, sys_head, tc_head):
    libs = [os.path.realpath(h.get("cudnn_lib", "?")) for h in (sys_head, tc_head)]
    print(f"\n{prec}: conv-bench with the cuDNN the loader finds ({sys_head.get('cudnn', '?')}, "
          f"{libs[0]}) and with PyTorch's ({tc_head.get('cudnn', '?')}, {libs[1]}), ms per "
          "convolution" + (" (the same library both times)" if libs[0] == libs[1] else "") + "\n")
    heads = ["ours(h) NCHW", "best(a) NCHW", "best(a) NHWC", "graph(g) NCHW", "graph(g) NHWC"]
    keys = [("h_ms", "NCHW"), ("a_ms", "NCHW"), ("a_ms", "NHWC"), ("g_ms", "NCHW"),
            ("g_ms", "NHWC")]
    print("| shape | count | " + " | ".join(f"{h} default | {h} PyTorch's" for h in heads)
          + " | PyTorch best |")
    print("|---" * (3 + 2 * len(heads)) + "|")
    cols = [[] for _ in range(2 * len(keys) + 1)]
    counts = []
    for name in order:
        vals = []
        for key, lay in keys:
            vals += [sys_rows.get((name, lay), {}).get(key), tc_rows.get((name, lay), {}).get(key)]
        vals.append(min((v for v in pt.get(name, (None, None)) if v is not None), default=None))
        r = sys_rows.get((name, "NCHW")) or sys_rows.get((name, "NHWC"))
        counts.append(r["count"])
        for col, v in zip(cols, vals):
            col.append(v)
        print(f"| {name} | {r['count']} | " + " | ".join(fmt(v) for v in vals) + " |")
    print(f"| weighted total | {sum(counts)} | " + " | ".join(wsum(c, counts) for c in cols)
          + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("conv_bench", help="the conv-bench binary (build/bench/conv-bench)")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--shapes", default="resnet18")
    ap.add_argument("--torch-cudnn", action="store_true",
                    help="also run conv-bench on the cuDNN PyTorch loaded")
    ap.add_argument("--json", default=None)
    ap.add_argument("--budget", type=float, default=float(os.environ.get("GPU_RUN_STEP_S") or 0),
                    help="seconds the whole script may take (0: no limit; default "
                    "$GPU_RUN_STEP_S)")
    a = ap.parse_args()
    if not (os.path.isfile(a.conv_bench) and os.access(a.conv_bench, os.X_OK)):
        print(f"conv-bench.py: {a.conv_bench} is not an executable", file=sys.stderr)
        return 2
    precs = [p for p in a.precisions.split(",") if p]
    bad_prec = [p for p in precs if p not in DTYPES]
    if bad_prec or not precs or a.batch < 1 or a.reps < 1:
        print(f"conv-bench.py: bad --precisions {a.precisions} / --batch / --reps",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(f"SKIP: no CUDA device for PyTorch {torch.__version__} ({sys.executable})")
        return 77
    t_start = time.perf_counter()
    torch.backends.cudnn.benchmark = True
    tc_ver = torch.backends.cudnn.version()
    print(f"conv-bench.py: torch {torch.__version__} (CUDA {torch.version.cuda}), its cuDNN "
          f"{tc_ver}; device {torch.cuda.get_device_name()}; batch {a.batch}, {a.reps} timed "
          f"runs per measure; shapes {a.shapes}", flush=True)
    common = ["--batch", str(a.batch), "--reps", str(a.reps), "--shapes", a.shapes]
    raw = {"torch": torch.__version__, "torch_cudnn": tc_ver, "batch": a.batch, "runs": {}}
    bad, runs = 0, {}

    # The time left of --budget (15 s kept for the tables), None without one.
    deadline = t_start + a.budget - 15 if a.budget > 0 else None

    def left():
        return None if deadline is None else deadline - time.perf_counter()

    def bench_run(which, env, prec):
        """One conv-bench run into runs[(which, prec)]; -> its exit status (None: not run)."""
        nonlocal bad
        what = (f"conv-bench --precision {prec} "
                f"({'PyTorch' if which == 'torch' else 'default'} cuDNN)")
        limit = BIN_TIMEOUT_S if left() is None else min(BIN_TIMEOUT_S, left())
        if limit < 20:
            print(f"\nconv-bench.py: {what} not run: time budget spent ({a.budget:.0f} s)",
                  flush=True)
            bad = 1
            return None
        rc, lines = run_bench([a.conv_bench, "--precision", prec] + common, env, limit)
        if rc == 77:
            print(next((ln for ln in lines if ln.startswith("SKIP")),
                       "SKIP: conv-bench found no usable CUDA device"))
            if which == "torch":  # the default run found the device: this one failed
                bad = 1
            return rc
        got = parse(lines)
        if rc != 0:
            print(f"conv-bench.py: {what} exit {rc}; {len(got[1])} shape/layout rows before it "
                  "stopped are kept", flush=True)
            bad = 1
        if got[1]:
            runs[(which, prec)] = got
            raw["runs"][f"{which}-{prec}"] = {"head": got[0], "rows": list(got[1].values()),
                                               "exit": rc}
        return rc

    # conv-bench with the cuDNN the loader finds, PyTorch, the tables; then conv-bench with
    # PyTorch's cuDNN (the least needed, so last).
    for prec in precs:
        if bench_run("default", None, prec) == 77:
            return 77
    t_bench = time.perf_counter()

    # PyTorch on the same shapes (the default run's list).
    pt_all = {}
    for prec in precs:
        if ("default", prec) not in runs:
            continue
        _, rows, order = runs[("default", prec)]
        pt = pt_all[prec] = {}
        for name in order:
            row = rows.get((name, "NCHW")) or rows.get((name, "NHWC"))
            vals = []
            for cl in (False, True):
                if left() is not None and left() < 10:
                    print(f"  {prec} {name} {'channels_last' if cl else 'NCHW'}: PyTorch: not "
                          "run, time budget spent", file=sys.stderr, flush=True)
                    vals.append(None)
                    bad = 1
                    continue
                # A measure still running after 120 s prints every thread's Python stack and
                # exits.
                faulthandler.dump_traceback_later(120, exit=True)
                try:
                    vals.append(time_torch(row, prec, cl, a.reps))
                except Exception as exc:  # one failed measure must not lose the table
                    print(f"  {prec} {name} {'channels_last' if cl else 'NCHW'}: PyTorch: {exc}",
                          file=sys.stderr, flush=True)
                    vals.append(None)
                    bad = 1
                finally:
                    faulthandler.cancel_dump_traceback_later()
            pt[name] = tuple(vals)
            print(f"  {prec} {name}: PyTorch NCHW {fmt(pt[name][0])}, channels_last "
                  f"{fmt(pt[name][1])} ms", file=sys.stderr, flush=True)
        raw.setdefault("pytorch", {})[prec] = pt
    t_torch = time.perf_counter()

    for prec in precs:
        if ("default", prec) not in runs:
            continue
        head, rows, order = runs[("default", prec)]
        if joined_table(prec, a.batch, order, rows, pt_all.get(prec, {})):
            bad = 1
        # RESULTS.md "First GPU run: check these" 14(a): does the fused call read z = y with
        # alpha2 = 0? (y filled with NaN before one fused run; the count is y's non-finite.)
        nan = [(n, int(rows[(n, "NCHW")]["fused_z_nan"])) for n in order
               if "fused_z_nan" in rows.get((n, "NCHW"), {})]
        read = [n for n, v in nan if v != 0]
        verdict = ("no shape ran fused" if not nan else
                   f"non-finite output in {len(read)} of {len(nan)} shapes ({', '.join(read)}): "
                   "cuDNN reads z; conv.c must pass a zeroed z" if read else
                   f"finite in all {len(nan)} shapes run fused: z not read")
        print(f"\n{prec}: fused conv (z = y, alpha2 = 0) on a y of NaN: {verdict}", flush=True)

    # --torch-cudnn: conv-bench again, LD_LIBRARY_PATH led by the directory of PyTorch's cuDNN.
    if a.torch_cudnn:
        tc_dirs = torch_cudnn_dirs()
        if not tc_dirs:
            print("\nconv-bench.py: --torch-cudnn: the cuDNN PyTorch loaded was not found "
                  "(/proc/self/maps, nvidia.cudnn); that run is left out", flush=True)
            bad = 1
        else:
            tc_env = dict(os.environ)
            tc_env["LD_LIBRARY_PATH"] = ":".join(
                tc_dirs + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p])
            for prec in precs:
                bench_run("torch", tc_env, prec)
                if ("torch", prec) not in runs:
                    continue
                head = runs[("torch", prec)][0]
                lib = os.path.realpath(head.get("cudnn_lib", "?"))
                if not any(lib.startswith(os.path.realpath(d) + os.sep) for d in tc_dirs):
                    print(f"conv-bench.py: --torch-cudnn {prec}: conv-bench loaded {lib}, not "
                          f"from {tc_dirs[0]}: its figures are not PyTorch's cuDNN", flush=True)
                    bad = 1
                if ("default", prec) in runs:
                    d_head, d_rows, order = runs[("default", prec)]
                    cudnn_table(prec, order, d_rows, runs[("torch", prec)][1],
                                pt_all.get(prec, {}), d_head, head)
    t_end = time.perf_counter()
    print(f"\nconv-bench.py: conv-bench runs {t_bench - t_start:.1f} s, PyTorch "
          f"{t_torch - t_bench:.1f} s, --torch-cudnn runs {t_end - t_torch:.1f} s"
          + (" (a run failed or was left out: see above)" if bad else ""), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)
    return bad


if __name__ == "__main__":
    sys.exit(main())
