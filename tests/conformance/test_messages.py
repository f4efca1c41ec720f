#!/usr/bin/python3
"""gp-infer's messages for what a new user gets wrong first: each says what is wrong and what
to do, names a missing flag, and prints an error code's name once.

usage: test_messages.py GP_INFER WORKDIR

Real files where it matters: a torch.save archive and a legacy pickle written by PyTorch, a
float64 .npy written by NumPy. Exit 0 pass, 1 fail, 77 skipped (numpy or torch missing).
"""
import json
import os
import struct
import subprocess
import sys

try:
    import numpy as np
    import torch
except ImportError as exc:  # pragma: no cover - depends on the machine
    print(f"SKIP: NumPy/PyTorch not available ({exc}); install python3-numpy python3-torch")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gpupipe_export as gx  # noqa: E402  (the safetensors writer)

failures, checks = [], 0


def record(ok, what, detail=""):
    global checks
    checks += 1
    print(("ok    " if ok else "FAIL  ") + what + (f"\n      {detail}" if detail else ""),
          flush=True)
    if not ok:
        failures.append(what)


def run(gp, *args):
    p = subprocess.run([gp] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def expect(gp, what, args, code, *needles, stream="stderr"):
    rc, out, err = run(gp, *args)
    text = out if stream == "stdout" else err
    missing = [n for n in needles if n not in text]
    doubled = [w for w in text.split() if w.startswith("GP_E") and f"{w} {w}" in text]
    record(rc == code and not missing and not doubled,
           f"{what}: exit {rc} (want {code})" + (f", missing {missing}" if missing else "")
           + (f", doubled {doubled[0]}" if doubled else ""),
           text.strip().splitlines()[0] if text.strip() else "(no output)")
    return rc, out, err


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    gp, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(work, exist_ok=True)
    w = lambda name: os.path.join(work, name)

    # A small model: 4 features -> 3, with its spec in PyTorch spelling.
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    gx.write_safetensors(w("lin.safetensors"),
                         {"fc.weight": gx.tensor_entry(lin.weight),
                          "fc.bias": gx.tensor_entry(lin.bias)},
                         {"gpupipe.spec": "Input f32 4\nLinear fc\nReLU\nSoftmax dim=1\n"})
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    np.save(w("x.npy"), x)
    rc, _, err = run(gp, "--model", w("lin.safetensors"), "--input", w("x.npy"), "--output",
                     w("y.npy"), "--backend", "host", "--quiet")
    if rc == 0:
        with torch.no_grad():
            ref = torch.softmax(torch.relu(lin(torch.from_numpy(x))), 1).numpy()
        got = np.load(w("y.npy"))
        rel = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        record(rel <= 1e-5, f"spec in PyTorch spelling (Linear, ReLU, Softmax dim=1) runs: "
               f"relative error {rel:.3g}")
    else:
        record(False, "spec in PyTorch spelling runs", err.strip())

    # Not a safetensors file.
    torch.save(lin.state_dict(), w("m.pt"))
    torch.save(lin.state_dict(), w("legacy.pt"), _use_new_zipfile_serialization=False)
    for name, needle in (("m.pt", "not a safetensors file: this looks like a torch.save archive "
                          "(a zip file): export the model with tools/gpupipe_export.py"),
                         ("legacy.pt", "not a safetensors file: this looks like a Python pickle"),
                         ("x.npy", "not a safetensors file: this is a NumPy .npy array")):
        expect(gp, f"--model {name}", ["--model", w(name), "--describe"], 3,
               f"gp-infer: model {w(name)}: GP_EMODEL: {needle}")
    with open(w("junk.bin"), "wb") as f:
        f.write(b"\x01\x02\x03\x04\x05\x06\x07\x08" + b"x" * 64)
    expect(gp, "--model junk", ["--model", w("junk.bin"), "--describe"], 3,
           "not a safetensors file: its first 8 bytes give a header length of")
    # Unused bytes after the last tensor.
    with open(w("lin.safetensors"), "rb") as f:
        data = f.read()
    with open(w("trailing.safetensors"), "wb") as f:
        f.write(data + b"\0" * 16)
    expect(gp, "16 bytes appended", ["--model", w("trailing.safetensors"), "--describe"], 3,
           "16 unused bytes after the last tensor", "re-export the file")

    # Inputs of the wrong dtype.
    np.save(w("x64.npy"), x.astype(np.float64))
    expect(gp, "float64 input", ["--model", w("lin.safetensors"), "--input", w("x64.npy"),
                                 "--output", w("y.npy")], 3,
           "dtype float64 ('<f8')", "convert with x.astype(np.float32)")
    np.save(w("xi.npy"), (x * 10).astype(np.int64))
    expect(gp, "int64 input", ["--model", w("lin.safetensors"), "--input", w("xi.npy"),
                               "--output", w("y.npy")], 3,
           "has dtype i64", "convert with x.astype(np.float32)")
    # A file whose header claims far more than it holds (4 TB of f32 in 32 bytes): a short file,
    # not an allocation of what it claims (it said "out of memory").
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (268435456000, 4), }"
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(w("short.npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode() + bytes(32))
    expect(gp, "a truncated .npy claiming 4 TB", ["--model", w("lin.safetensors"), "--input",
                                                  w("short.npy"), "--output", w("y.npy")], 3,
           "data is shorter than its shape says", "32 there")
    np.save(w("img.npy"), np.zeros((2, 32, 32, 3), np.float32))
    expect(gp, "float images for a u8 model", ["--demo", "cnn", "--input", w("img.npy"),
                                               "--output", w("y.npy")], 3,
           "the model takes u8 items", "convert with x.astype(np.uint8)",
           "pass the images before any normalization")

    # Flags.
    expect(gp, "no --output", ["--model", w("lin.safetensors"), "--input", w("x.npy")], 2,
           "gp-infer: --output is required (where to write the results", "usage: gp-infer")
    expect(gp, "no --model", ["--input", w("x.npy"), "--output", w("y.npy")], 2,
           "gp-infer: --model M.safetensors is required")
    expect(gp, "no --input", ["--model", w("lin.safetensors"), "--output", w("y.npy")], 2,
           "gp-infer: --input is required with --output")
    # Output paths that cannot be written: refused before the run, not after it.
    expect(gp, "--output in a missing directory",
           ["--model", w("lin.safetensors"), "--input", w("x.npy"), "--output",
            w("no/such/dir/y.npy")], 2, "gp-infer: --output", "no directory")
    expect(gp, "--report that is a directory",
           ["--model", w("lin.safetensors"), "--input", w("x.npy"), "--output", w("y.npy"),
            "--report", work], 2, "gp-infer: --report", "is a directory")
    expect(gp, "--max-tokens on a fixed-size model",
           ["--model", w("lin.safetensors"), "--input", w("x.npy"), "--output", w("y.npy"),
            "--max-tokens", "5"], 2, "--max-tokens is for variable-length models")
    expect(gp, "nothing to do", ["--model", w("lin.safetensors")], 2,
           "gp-infer: nothing to do: give --input X.npy --output Y.npy")
    expect(gp, "--model and --demo", ["--model", w("lin.safetensors"), "--demo", "mlp",
                                      "--describe"], 2, "--model and --demo are exclusive")

    # Timing flags (bench/symptom-bench.py reads --report): --repeat R submits every item R
    # times and writes each item once; the report counts every submission.
    rc, _, err = run(gp, "--model", w("lin.safetensors"), "--input", w("x.npy"), "--output",
                     w("y1.npy"), "--backend", "host")
    rc3, _, err3 = run(gp, "--model", w("lin.safetensors"), "--input", w("x.npy"), "--output",
                       w("y3.npy"), "--backend", "host", "--repeat", "3", "--producers", "4",
                       "--batch", "2", "--capacity", "8", "--report", w("r.json"))
    rep = {}
    if rc3 == 0:
        with open(w("r.json")) as f:
            rep = json.load(f)
    n = len(x)
    record(rc == 0 and rc3 == 0 and np.array_equal(np.load(w("y1.npy")), np.load(w("y3.npy")))
           and rep.get("items") == 3 * n and rep.get("producers") == 4
           and rep.get("max_batch") == 2 and rep.get("backend") == "host"
           and 0 < rep["p50_ms"] <= rep["p99_ms"] <= rep["max_ms"]
           and rep["t_end_ns"] > rep["t_start_ns"]
           and abs(rep["items_per_s"] * rep["seconds"] - 3 * n) < 0.01 * 3 * n
           and rep["batches"] >= (3 * n + 1) // 2 and "latency p50 " in err3,
           "--repeat 3 --report: same outputs, 3 x N submissions, p50 <= p99 <= max", str(rep))
    # --warmup W: W untimed submissions first; outputs unchanged, the report's window and its
    # counters exclude them (W = 5 x N items in batches of at most 2 would add >= 2.5 x N
    # batches: a report counting them has more than N batches of N items).
    rcw, _, errw = run(gp, "--model", w("lin.safetensors"), "--input", w("x.npy"), "--output",
                       w("yw.npy"), "--backend", "host", "--warmup", str(5 * n), "--batch", "2",
                       "--report", w("rw.json"))
    repw = {}
    if rcw == 0:
        with open(w("rw.json")) as f:
            repw = json.load(f)
    record(rcw == 0 and np.array_equal(np.load(w("y1.npy")), np.load(w("yw.npy")))
           and repw.get("items") == n and (n + 1) // 2 <= repw.get("batches", 0) <= n
           and f"gp-infer: {n} items in " in errw,
           "--warmup 5N: same outputs; items and batches of the timed window only", str(repw))
    # --windows K: K timed windows of N items in one pipeline; the figure is their median, each
    # window's figure is in the report and on the summary line; outputs unchanged; the counters
    # cover every window (K x N items in batches of at most 2: at least K x N / 2 batches).
    rck, _, errk = run(gp, "--model", w("lin.safetensors"), "--input", w("x.npy"), "--output",
                       w("yk.npy"), "--backend", "host", "--windows", "3", "--batch", "2",
                       "--report", w("rk.json"))
    repk = {}
    if rck == 0:
        with open(w("rk.json")) as f:
            repk = json.load(f)
    wins = repk.get("window_items_per_s", [])
    record(rck == 0 and np.array_equal(np.load(w("y1.npy")), np.load(w("yk.npy")))
           and repk.get("items") == n and repk.get("windows") == 3 and len(wins) == 3
           and all(v > 0 for v in wins)
           and abs(repk["items_per_s"] - sorted(wins)[1]) <= 1e-3 * sorted(wins)[1]
           and abs(repk["items_per_s"] * repk["seconds"] - n) < 0.01 * n
           and repk["batches"] >= 3 * ((n + 1) // 2)
           and "median of 3 windows: " in errk and f"gp-infer: {n} items in " in errk,
           "--windows 3: same outputs; the median of 3 windows of N items; counters of all 3",
           str(repk))
    expect(gp, "--windows 0", ["--model", w("lin.safetensors"), "--input", w("x.npy"),
                               "--output", w("y.npy"), "--windows", "0"], 2,
           "--windows: '0' is not a number in [1, 1000]")
    # No items at all, with --warmup: nothing to warm up with; 0 items, exit 0 (it divided by 0).
    np.save(w("x0.npy"), np.zeros((0,) + x.shape[1:], dtype=x.dtype))
    rc0, _, err0 = run(gp, "--model", w("lin.safetensors"), "--input", w("x0.npy"), "--output",
                       w("y0.npy"), "--backend", "host", "--warmup", "3")
    record(rc0 == 0 and np.load(w("y0.npy")).shape[0] == 0,
           "--warmup with an input of no items: exit 0, no outputs", f"exit {rc0}: {err0[-200:]}")
    expect(gp, "--capacity not a power of two",
           ["--model", w("lin.safetensors"), "--input", w("x.npy"), "--output", w("y.npy"),
            "--backend", "host", "--batch", "4", "--capacity", "12"], 2,
           "config.capacity: 12 must be a power of two")
    expect(gp, "--repeat 0", ["--model", w("lin.safetensors"), "--input", w("x.npy"),
                              "--output", w("y.npy"), "--repeat", "0"], 2,
           "--repeat: '0' is not a number in [1, 1048576]")
    expect(gp, "--report to a missing directory (before the run: no outputs written)",
           ["--model", w("lin.safetensors"), "--input", w("x.npy"), "--output", w("y2.npy"),
            "--backend", "host", "--report", w("no/such/dir/r.json")], 2,
           "gp-infer: --report", "no directory")
    record(not os.path.exists(w("y2.npy")), "--report to a missing directory: no y2.npy written")

    # --describe: input and output lines.
    expect(gp, "--describe (demo cnn)", ["--demo", "cnn", "--describe"], 0,
           "input:  u8 32x32x3 per item (3072 bytes), layout hwc; on the device: x / 255, "
           "mean 0.485,0.456,0.406, std 0.229,0.224,0.225",
           "output: i64 5 per item (40 bytes): class indices, best first", stream="stdout")
    expect(gp, "--describe (features)", ["--model", w("lin.safetensors"), "--describe"], 0,
           "input:  f32 4 per item (16 bytes), layout features, no normalization",
           "output: f32 3 per item (12 bytes): probabilities", stream="stdout")

    # Spec messages through the tool.
    gx.write_safetensors(w("ada.safetensors"), {}, {"gpupipe.spec":
                                                    "input f32 4x8x8\nAdaptiveAvgPool2d 7\n"})
    expect(gp, "AdaptiveAvgPool2d 7", ["--model", w("ada.safetensors"), "--describe"], 3,
           "spec line 2: AdaptiveAvgPool2d: only output size 1 is supported")

    # Variable-length items: token ids packed in one array, their lengths in another. A tiny
    # encoder (vocabulary 30, 16 positions) keeps this fast under the sanitizers.
    g = np.random.default_rng(3)
    gx.write_safetensors(w("enc.safetensors"), {
        "e.weight": gx.tensor_entry(torch.from_numpy(g.standard_normal((30, 8), np.float32))),
        "p.weight": gx.tensor_entry(torch.from_numpy(g.standard_normal((16, 8), np.float32)))},
        {"gpupipe.spec": "input i32 *\nembedding e position=p\npool mean\nl2norm\n"})
    enc = ["--model", w("enc.safetensors")]
    np.save(w("ids.npy"), np.array([1, 7, 2, 1, 8, 9, 2], np.int32))
    np.save(w("len.npy"), np.array([3, 4], np.int64))
    expect(gp, "token ids without --lengths", enc + ["--input", w("ids.npy"), "--output",
                                                     w("y.npy")], 3,
           "the model takes variable-length items (i32 * tokens): give --lengths L.npy")
    expect(gp, "--lengths for a fixed-size model", ["--model", w("lin.safetensors"), "--input",
                                                    w("x.npy"), "--lengths", w("len.npy"),
                                                    "--output", w("y.npy")], 3,
           "--lengths is for variable-length models")
    np.save(w("len6.npy"), np.array([3, 3], np.int64))
    expect(gp, "lengths that do not add up", enc + ["--input", w("ids.npy"), "--lengths",
                                                    w("len6.npy"), "--output", w("y.npy")], 3,
           "the items have 6 tokens in all, but input", "holds 7")
    np.save(w("len0.npy"), np.array([7, 0], np.int64))
    expect(gp, "an empty item", enc + ["--input", w("ids.npy"), "--lengths", w("len0.npy"),
                                       "--output", w("y.npy")], 3,
           "item 1 has 0 tokens; the model takes 1..16 per item")
    np.save(w("ids64.npy"), np.array([1, 7, 2, 1, 8, 9, 2], np.int64))
    expect(gp, "i64 ids for an i32 model", enc + ["--input", w("ids64.npy"), "--lengths",
                                                  w("len.npy"), "--output", w("y.npy")],
           3, "the model takes i32 tokens", "convert with x.astype(np.int32)")
    np.save(w("big.npy"), np.array([1, 7, 2, 1, 30, 9, 2], np.int32))
    expect(gp, "an id outside the vocabulary (a bad input, named by its place in the file)",
           enc + ["--input", w("big.npy"), "--lengths", w("len.npy"), "--output", w("y.npy"),
                  "--backend", "host"], 3,
           "item 1 (tokens 3..6 of the file): token 1 has id 30, outside the model's "
           "vocabulary 0..29")
    np.save(w("lenf.npy"), np.array([3, 4], np.float64))
    expect(gp, "float lengths", enc + ["--input", w("ids.npy"), "--lengths", w("lenf.npy"),
                                       "--output", w("y.npy")], 3,
           "float64", "convert with x.astype(np.int64)")
    expect(gp, "--describe (encoder)", enc + ["--describe"], 0,
           "input:  i32 * per item: 1..16 token ids (the limit: the position embeddings' rows)",
           "output: f32 8 per item (32 bytes): values", stream="stdout")
    expect(gp, "--describe (demo encoder)", ["--demo", "encoder", "--describe"], 0,
           "input:  i32 * per item: 1..512 token ids", "output: f32 256 per item", stream="stdout")
    rc, _, err = run(gp, *enc, "--input", w("ids.npy"), "--lengths", w("len.npy"), "--output",
                     w("y.npy"), "--backend", "host")
    y = np.load(w("y.npy")) if rc == 0 else None
    record(rc == 0 and y.shape == (2, 8) and np.allclose(np.linalg.norm(y, axis=1), 1, 1e-5),
           "packed ids through gp-infer: (2, 8) unit vectors", err.strip())

    # .npy files NumPy can write but gp-infer does not read, or reads: each said plainly.
    def raw_npy(name, descr, shape, data, fortran="False"):
        d = ("{'descr': %s, 'fortran_order': %s, 'shape': %s, }"
             % (descr, fortran, shape)).encode()
        d += b" " * ((64 - (10 + len(d) + 1) % 64) % 64) + b"\n"
        with open(w(name), "wb") as f:
            f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d + data)
    lin_in = ["--model", w("lin.safetensors"), "--backend", "host", "--output", w("y.npy")]
    raw_npy("native.npy", "'=f4'", "(5, 4)", x.tobytes())
    rc, _, err = run(gp, *lin_in, "--input", w("native.npy"), "--quiet")
    record(rc == 0 and np.load(w("y.npy")).shape == (5, 3),
           "'=f4' (native byte order) reads as float32", err.strip())
    raw_npy("rec.npy", "[('a', '<f4'), ('b', '<f4')]", "(5,)", x.tobytes()[:40])
    expect(gp, "a structured dtype", lin_in + ["--input", w("rec.npy")], 3,
           "a structured dtype (named fields)", "convert with x.astype(np.float32)")
    raw_npy("obj.npy", "'|O'", "(1,)", b"")
    expect(gp, "an object array", lin_in + ["--input", w("obj.npy")], 3,
           "dtype object ('|O') is not one gp-infer reads")
    raw_npy("f0.npy", "'<f4'", "(5, 4)", x.tobytes(), fortran="0")
    expect(gp, "fortran_order 0", lin_in + ["--input", w("f0.npy")], 3,
           "bad fortran_order (True or False)")
    open(w("empty.npy"), "wb").close()
    expect(gp, "an empty file", lin_in + ["--input", w("empty.npy")], 3,
           "an empty file, not an .npy file")
    expect(gp, "a directory as input", lin_in + ["--input", work], 3, "is a directory")
    raw_npy("zero.npy", "'<f4'", "(9223372036854775807, 0)", b"")
    expect(gp, "a huge dimension times 0: no elements, read (then the shape is wrong)",
           lin_in + ["--input", w("zero.npy")], 3, "has dtype f32 and shape")

    # A write that fails half-way (a file-size limit, as a full disk) says so and leaves no
    # half-written .npy behind.
    import resource
    import signal
    x2k = np.random.default_rng(4).standard_normal((4000, 4)).astype(np.float32)
    np.save(w("x2k.npy"), x2k)

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
    p = subprocess.run([gp] + lin_in + ["--input", w("x2k.npy"), "--quiet"], capture_output=True,
                       text=True, preexec_fn=small_files)
    record(p.returncode == 1 and "not written" in p.stderr
           and "(the partial file was removed)" in p.stderr and not os.path.exists(w("y.npy")),
           "a failed output write: exit 1, said, no partial y.npy left", p.stderr.strip())
    # The same for --save-demo and --report: whole or removed.
    p = subprocess.run([gp, "--demo", "mlp", "--save-demo", w("cut.safetensors")],
                       capture_output=True, text=True, preexec_fn=small_files)
    record(p.returncode == 1 and "--save-demo" in p.stderr
           and "(the partial file was removed)" in p.stderr
           and not os.path.exists(w("cut.safetensors")),
           "a failed --save-demo write: exit 1, said, no partial model left", p.stderr.strip())
    # Standard output that cannot be written (the description is the result): exit 1.
    with open("/dev/full", "w") as full:
        p = subprocess.run([gp, "--demo", "mlp", "--describe"], stdout=full,
                           stderr=subprocess.PIPE, text=True)
    record(p.returncode == 1 and "standard output: a write failed" in p.stderr,
           "--describe to a full stdout: exit 1, said", p.stderr.strip())
    # A path option followed by another option: a forgotten value, not a file named --quiet.
    expect(gp, "--output followed by an option", lin_in + ["--input", w("x.npy"), "--output",
           "--quiet"], 2, "--output needs a value (the next word, --quiet, is an option")
    record(not os.path.exists("--quiet") and not os.path.exists(w("--quiet")),
           "no file named --quiet written")
    # An output that is an input's file (or another output's) is refused before the run.
    expect(gp, "--output onto --input", lin_in + ["--input", w("x.npy"), "--output",
           w("x.npy")], 2, "--output", "also --input's file (it would be overwritten)")
    expect(gp, "--report without --input", ["--demo", "mlp", "--describe", "--report",
           w("r.json")], 2, "--report goes with --input")

    # The error code's name once: a backend this machine may not have.
    rc, _, err = run(gp, "--model", w("lin.safetensors"), "--input", w("x.npy"), "--output",
                     w("y.npy"), "--backend", "cuda")
    if rc == 4:
        record(err.count("GP_ENODEV") == 1
               and err.startswith("gp-infer: backend cuda: GP_ENODEV: "),
               "--backend cuda without a device: GP_ENODEV printed once", err.strip())
    else:
        print(f"note: --backend cuda ran here (exit {rc}); the GP_ENODEV message is not checked")
    # A file with a header gpupipe rejects: GP_EMODEL printed once.
    h = json.dumps({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}}).encode()
    with open(w("bad.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"\0" * 8)
    rc, _, err = run(gp, "--model", w("bad.safetensors"), "--describe")
    record(rc == 3 and err.count("GP_EMODEL") == 1, "GP_EMODEL printed once", err.strip())

    print(f"{checks - len(failures)} of {checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
