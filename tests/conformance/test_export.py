#!/usr/bin/python3
"""tools/gpupipe_export.py against PyTorch, through gp-infer.

usage: test_export.py GP_INFER WORKDIR

Exports several modules (an MLP with every activation and dropout; a CNN with every Conv2d
option, batch norm with random statistics, every pooling form; a custom module whose residual
adds share values, with a top-k head in forward; torchvision's ResNet-18 with random weights,
logits out and u8 HWC images + mean/std + top-5), each through the exporter's own check and
then again here: fresh inputs, the module run in this file, gp-infer run in this file, compared
with the conformance test's measure (max |gp - torch| / max |torch| <= 1e-4 on the host; top-k
indices equal, or differing only between near-ties). Then the messages: unsupported ops (a
module and a function) name the op, its place in the graph, the user's line and what to do;
batch norm that cannot be folded, broadcasting adds, in-place ops, a check over its tolerance,
gp-infer missing. Exit 0 pass, 1 fail, 77 skipped (torch, torchvision or numpy missing).
"""
import os
import subprocess
import sys
import textwrap

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torchvision
except ImportError as exc:  # pragma: no cover - depends on the machine
    print(f"SKIP: PyTorch/torchvision/NumPy not available ({exc}); install python3-torch "
          "python3-torchvision python3-numpy")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gpupipe_export as gx  # noqa: E402

TOL = 1e-4
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
failures, checks, report, exporter_report = [], 0, [], []


def record(ok, what):
    global checks
    checks += 1
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def randomize_bn(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                if m.weight is not None:
                    m.weight.copy_(torch.rand(c, generator=g) + 0.5)
                    m.bias.copy_(torch.rand(c, generator=g) * 0.4 - 0.2)
                m.running_mean.copy_(torch.rand(c, generator=g) * 0.4 - 0.2)
                m.running_var.copy_(torch.rand(c, generator=g) * 1.5 + 0.5)


# ---- modules --------------------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(40, 64), nn.Linear(64, 48)
        self.fc3, self.fc4 = nn.Linear(48, 32, bias=False), nn.Linear(32, 10)
        self.drop, self.act = nn.Dropout(0.5), nn.GELU()
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        x = self.drop(self.act(self.fc1(x)))
        x = torch.tanh(self.fc2(x))
        x = F.relu(torch.sigmoid(self.fc3(x)))
        return self.softmax(self.fc4(x))


class ConvAll(nn.Module):
    """Every Conv2d option, batch norm (random statistics, eps, no affine), every pool form."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding="same")
        self.bn1 = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 16, 3, stride=(2, 1), padding=(1, 0), bias=False)
        self.bn2 = nn.BatchNorm2d(16, eps=1e-3, affine=False)
        self.c3 = nn.Conv2d(16, 32, 3, dilation=2, padding=2, groups=4)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.c4 = nn.Conv2d(32, 32, (3, 1), padding="valid", groups=32)
        self.avg = nn.AvgPool2d(3, stride=1, padding=1)
        self.ada = nn.AdaptiveAvgPool2d(2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(32, 7)

    def forward(self, x):
        x = F.relu(self.bn1(self.c1(x)))           # 16x16x16
        x = self.bn2(self.c2(x))                   # 16x8x14
        x = F.max_pool2d(F.gelu(self.c3(x)), 2)    # 32x4x7
        x = self.pool(x)                           # 32x2x4
        x = torch.tanh(self.avg(x))
        x = F.avg_pool2d(x, (1, 2))                # 32x2x2
        x = self.ada(x)                            # 32x2x2: identity
        return self.fc(self.flat(self.gap(x)))


class Residual(nn.Module):
    """Adds sharing values: the input read three times, a value read by two adds, an add of
    two values neither of which is the current one, x + x, mean over H and W, view(N, -1),
    a top-k head in forward."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 8, 3, padding=1)
        self.b = nn.Conv2d(4, 8, 1)
        self.c = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.d = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(8, 12)

    def forward(self, x):
        p = F.relu(self.a(x))
        q = self.b(x)
        r = p + q                  # two earlier values
        s = self.bn(self.c(r))
        t = s + p                  # p read again
        u = self.d(t) + r          # r read again
        v = u + u
        w = torch.sigmoid(v) + self.b(x)   # the input read a third time
        y = w.mean((2, 3))
        y = self.fc(y.view(y.size(0), -1))
        return torch.topk(F.softmax(y, dim=1), 3, dim=1).indices


class Classic(nn.Module):
    """LeNet style with x.view(x.size(0), -1) and torch.max(...)[1] as the head."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Linear(16 * 4 * 4, 120), nn.ReLU(inplace=True),
                                        nn.Dropout(), nn.Linear(120, 10))

    def forward(self, x):
        x = self.features(x)
        x = self.classifier(x.view(x.size(0), -1))
        return torch.max(x, 1)[1]


# ---- independent comparison -----------------------------------------------------------------

def gp_run(gp_infer, path, items, work):
    xp, yp = os.path.join(work, "x.npy"), os.path.join(work, "y.npy")
    np.save(xp, items)
    if os.path.exists(yp):
        os.remove(yp)
    p = subprocess.run([gp_infer, "--model", path, "--input", xp, "--output", yp, "--backend",
                        "host", "--batch", "5", "--quiet"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"gp-infer exited {p.returncode}: {p.stderr.strip()}")
    return np.load(yp)


def compare(name, got, ref, scores=None):
    """Floats: relative error; indices: equal, or the picked scores within TOL of torch's."""
    got = got.reshape(got.shape[0], -1)
    ref = ref.reshape(ref.shape[0], -1)
    if got.shape != ref.shape:
        record(False, f"{name}: shape {got.shape} != torch {ref.shape}")
        return
    if scores is None:
        err = float(np.max(np.abs(got.astype(np.float64) - ref)))
        rel = err / max(float(np.max(np.abs(ref))), 1e-30)
        record(rel <= TOL, f"{name}: independent check, max abs error {err:.3g}, relative "
               f"{rel:.3g} (limit {TOL:g})")
        report.append((name, err, rel))
        return
    exact = float(np.mean(np.all(got == ref, axis=1)))
    picked = np.take_along_axis(scores, got.astype(np.int64), 1)
    want = np.take_along_axis(scores, ref.astype(np.int64), 1)
    gap = float(np.max(np.abs(picked - want)) / max(float(np.max(np.abs(scores))), 1e-30))
    record(gap <= TOL, f"{name}: independent check, indices identical on {100 * exact:.1f}% of "
           f"items, worst score gap {gap:.3g} (limit {TOL:g})")
    report.append((name, float("nan"), gap))


def exported(name, module, example, path, gp_infer, **kw):
    r = gx.export(module, example, path, gp_infer=gp_infer, check=True, log=lambda s: None,
                  **kw)
    head = r.index_agreement == r.index_agreement
    record(r.checked and r.ok, f"{name}: exporter's check: max abs error {r.max_abs_err:.3g}, "
           f"relative {r.max_rel_err:.3g}"
           + (f" (scores), indices identical on {100 * r.index_agreement:.0f}%, worst score "
              f"gap {r.index_score_gap:.3g}" if head else ""))
    exporter_report.append((name, r.max_abs_err, r.max_rel_err, r.items))
    return r


def prep(items, u8, hwc, mean, std):
    """The model's input stage written out here, independently of the exporter."""
    x = torch.from_numpy(items)
    if hwc:
        x = x.permute(0, 3, 1, 2)
    x = x.float()
    if u8:
        x = x / 255.0
    if mean is not None:
        x = (x - torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)) / torch.tensor(
            std, dtype=torch.float32).view(1, -1, 1, 1)
    return x


def round_trips(gp_infer, work):
    g = torch.Generator().manual_seed(7)
    torch.manual_seed(11)
    with torch.no_grad():
        # MLP, f32 features, softmax in forward.
        m = MLP().eval()
        path = os.path.join(work, "mlp.safetensors")
        exported("mlp", m, torch.randn(2, 40), path, gp_infer)
        x = torch.randn(32, 40, generator=g)
        compare("mlp", gp_run(gp_infer, path, x.numpy(), work), m(x).numpy())

        # CNN with every conv option; f32 images arriving HWC, normalized on the device.
        m = ConvAll().eval()
        randomize_bn(m, 3)
        path = os.path.join(work, "convall.safetensors")
        mean, std = (0.1, -0.2, 0.3), (1.5, 0.5, 2.0)
        r = exported("convall (f32 hwc + mean/std)", m, torch.randn(1, 3, 16, 16), path,
                     gp_infer, input_layout="hwc", mean=mean, std=std)
        record("conv2d c2 stride=2x1 padding=1x0" in r.spec and "groups=4" in r.spec
               and "dilation=2" in r.spec and "batchnorm2d bn2 eps=0.001" in r.spec
               and "avgpool2d kernel=1x2" in r.spec,
               "convall: spec has every conv option, eps, an asymmetric pool")
        items = torch.randn(16, 16, 16, 3, generator=g).numpy()
        compare("convall", gp_run(gp_infer, path, items, work),
                m(prep(items, False, True, mean, std)).numpy())

        # Residual adds sharing values, top-k head in forward.
        m = Residual().eval()
        randomize_bn(m, 4)
        path = os.path.join(work, "residual.safetensors")
        r = exported("residual (shared adds, top-3 in forward)", m, torch.randn(1, 4, 8, 8),
                     path, gp_infer)
        record(r.spec.count("save ") >= 3 and "restore " in r.spec,
               f"residual: spec keeps shared values with save/restore "
               f"({r.spec.count('save ')} saves)")
        x = torch.randn(24, 4, 8, 8, generator=g)
        # the scores the head ranks: Residual.forward up to the softmax
        p = F.relu(m.a(x))
        rr = p + m.b(x)
        u = m.d(m.bn(m.c(rr)) + p) + rr
        w = torch.sigmoid(u + u) + m.b(x)
        scores = F.softmax(m.fc(w.mean((2, 3))), dim=1).numpy().astype(np.float64)
        compare("residual", gp_run(gp_infer, path, x.numpy(), work), m(x).numpy(), scores)

        # LeNet style: Sequential, inplace ReLU, view(N, -1), torch.max(...)[1].
        m = Classic().eval()
        path = os.path.join(work, "classic.safetensors")
        exported("classic (torch.max head)", m, torch.randn(1, 1, 28, 28), path, gp_infer)
        x = torch.randn(20, 1, 28, 28, generator=g)
        logits = m.classifier(m.features(x).flatten(1)).numpy().astype(np.float64)
        compare("classic", gp_run(gp_infer, path, x.numpy(), work),
                m(x).numpy().reshape(-1, 1), logits)

        # A bare layer as the module (torch.fx traces into its root: it is wrapped).
        m = nn.Conv2d(3, 5, 3, padding="same", dilation=2).eval()
        path = os.path.join(work, "bare_conv.safetensors")
        r = exported("bare nn.Conv2d", m, torch.randn(1, 3, 9, 9), path, gp_infer)
        record("conv2d 0 padding=2 dilation=2" in r.spec, "bare nn.Conv2d: spec names it 0")
        x = torch.randn(5, 3, 9, 9, generator=g)
        compare("bare nn.Conv2d", gp_run(gp_infer, path, x.numpy(), work),
                m(x).numpy().reshape(5, -1))

        # torchvision ResNet-18, random weights and batch norm statistics (no download).
        rn = torchvision.models.resnet18(num_classes=100).eval()
        randomize_bn(rn, 5)
        path = os.path.join(work, "resnet18.safetensors")
        exported("resnet18 logits", rn, torch.randn(1, 3, 64, 64), path, gp_infer)
        x = torch.randn(6, 3, 64, 64, generator=g)
        compare("resnet18 logits", gp_run(gp_infer, path, x.numpy(), work), rn(x).numpy())
        path = os.path.join(work, "resnet18_u8.safetensors")
        r = exported("resnet18 u8 hwc + mean/std + top-5", rn, torch.randn(1, 3, 64, 64), path,
                     gp_infer, input_dtype="u8", input_layout="hwc", mean=MEAN, std=STD,
                     head="topk=5")
        record(r.input.startswith("input u8 64x64x3 layout=hwc mean=0.485,0.456,0.406 "
                                  "std=0.229,0.224,0.225") and r.spec.endswith("topk k=5\n"),
               f"resnet18: input line '{r.input}', ends with topk k=5")
        items = torch.randint(0, 256, (6, 64, 64, 3), generator=g, dtype=torch.uint8).numpy()
        logits = rn(prep(items, True, True, MEAN, STD))
        compare("resnet18 u8 top-5", gp_run(gp_infer, path, items, work),
                torch.topk(logits, 5, dim=1).indices.numpy(),
                logits.numpy().astype(np.float64))


# ---- messages -------------------------------------------------------------------------------

class WithLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.LSTM(8, 8), nn.Linear(8, 2)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[-1])


class WithCumsum(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(torch.cumsum(x, 1))


class BnAfterRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.c, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(F.relu(self.c(x)))


class ConvReadTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.c, self.bn = nn.Conv2d(3, 3, 3, padding=1), nn.BatchNorm2d(3)

    def forward(self, x):
        y = self.c(x)
        return self.bn(y) + y


class Broadcast(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.c(x)
        return y + y.mean((2, 3), keepdim=True)


class InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.c(x)
        z = y.relu_()
        return y + z


def expect_error(name, fn, *needles, cls=None):
    try:
        fn()
    except gx.ExportError as exc:
        msg = str(exc)
        missing = [n for n in needles if n not in msg]
        ok = not missing and (cls is None or isinstance(exc, cls))
        record(ok, f"{name}: message has {' / '.join(repr(n) for n in needles)}"
               + (f"; missing {missing} in:\n{msg}" if missing else ""))
        return exc
    record(False, f"{name}: no error")
    return None


def messages(gp_infer, work):
    path = os.path.join(work, "bad.safetensors")
    src = os.path.abspath(__file__)
    ex = lambda m, *s: (lambda: gx.export(m.eval(), torch.randn(*s), path, gp_infer=gp_infer,
                                          log=lambda _: None))
    exc = expect_error("nn.LSTM", ex(WithLSTM(), 4, 1, 8), "cannot export module 'rnn' (nn.LSTM)",
                       "called at graph node 1", f'File "{src}", line', "y, _ = self.rnn(x)",
                       "what to do:", "Supported: Linear, Conv2d")
    if exc:
        print(textwrap.indent(str(exc), "      | "))
    exc = expect_error("torch.cumsum", ex(WithCumsum(), 1, 8),
                       "cannot export node 1 of 4, 'cumsum' (call_function torch.cumsum)",
                       "graph: reads 'x' (1x8); used by 'fc'", f'File "{src}", line',
                       "torch.cumsum(x, 1)", "what to do:", "export the part of the model "
                       "before it")
    if exc:
        print(textwrap.indent(str(exc), "      | "))
    expect_error("batchnorm after relu", ex(BnAfterRelu(), 1, 3, 8, 8),
                 "BatchNorm2d follows 'relu' (relu), not a Conv2d", "must directly follow a "
                 "Conv2d")
    expect_error("conv output read twice", ex(ConvReadTwice(), 1, 3, 8, 8),
                 "the output of Conv2d 'c' is also read elsewhere")
    expect_error("broadcasting add", ex(Broadcast(), 1, 3, 8, 8),
                 "adds values of shapes 1x4x6x6 and 1x4x1x1", "no broadcasting")
    expect_error("in-place op", ex(InPlace(), 1, 3, 8, 8),
                 "in place on 'c', which 'add' reads afterwards")
    expect_error("features with u8 input",
                 lambda: gx.export(MLP(), torch.randn(1, 40), path, input_dtype="u8"),
                 "u8 input, layout and mean/std apply to images")
    # The check can fail: a limit no float computation meets.
    m = ConvAll().eval()
    randomize_bn(m, 6)
    exc = expect_error("check over its limit", lambda: gx.export(
        m, torch.randn(1, 3, 16, 16), path, gp_infer=gp_infer, tol=0.0, log=lambda _: None),
        "the exported file disagrees with the module", "FAILED", cls=gx.CheckFailed)
    record(exc is not None and exc.result.max_rel_err > 0 and os.path.exists(path),
           "check over its limit: CheckFailed carries the figures; the file stays")
    expect_error("check forced, gp-infer missing", lambda: gx.export(
        MLP(), torch.randn(1, 40), path, gp_infer="/nonexistent/gp-infer", check=True,
        log=lambda _: None),
        "gp-infer '/nonexistent/gp-infer' is not an executable file")
    r = gx.export(MLP(), torch.randn(1, 40), path, check=False, log=lambda _: None)
    record(not r.checked and "check=False" in r.check_skipped, "check=False: skipped, said so")
    # --weights takes tensors only (torch.load weights_only=True): a pickled module is refused
    # with the fix; a state_dict loads.
    mod_pt, sd_pt = os.path.join(work, "module.pt"), os.path.join(work, "sd.pt")
    torch.save(nn.Linear(40, 3), mod_pt)
    expect_error("--weights with a pickled module", lambda: gx.load_module("torch.nn:Identity",
                                                                            mod_pt),
                 "not a state_dict of tensors", "torch.save(model.state_dict(), FILE)")
    lin = nn.Linear(40, 3)
    torch.save(lin.state_dict(), sd_pt)
    lin_py = os.path.join(work, "lin40.py")
    with open(lin_py, "w") as f:
        f.write("import torch.nn as nn\n\n\ndef build():\n    return nn.Linear(40, 3)\n")
    got = gx.load_module(f"{lin_py}:build", sd_pt)
    record(torch.equal(got.weight, lin.weight) and torch.equal(got.bias, lin.bias),
           "--weights with a state_dict: loaded into the module")


def cli(gp_infer, work):
    tool = os.path.join(ROOT, "tools", "gpupipe_export.py")
    mod = os.path.join(work, "mymodel.py")
    with open(mod, "w") as f:
        f.write("import torch.nn as nn\n\n\ndef build():\n"
                "    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),\n"
                "                         nn.AdaptiveAvgPool2d(1), nn.Flatten(),\n"
                "                         nn.Linear(8, 4))\n")
    out = os.path.join(work, "cli.safetensors")
    p = subprocess.run([sys.executable, tool, f"{mod}:build", out, "--input-shape", "3,12,12",
                        "--input-dtype", "u8", "--mean", "0.5", "--std", "0.25", "--head",
                        "softmax", "--gp-infer", gp_infer, "--check"], capture_output=True,
                       text=True)
    record(p.returncode == 0 and "check: 8 items" in p.stderr and ": ok" in p.stderr,
           f"CLI file.py:build exports and checks (exit {p.returncode}): "
           + p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "no output")
    with open(mod, "a") as f:
        f.write("\n\ndef bad():\n    import torch.nn as nn\n"
                "    return nn.Sequential(nn.Linear(4, 4), nn.LSTM(4, 4))\n")
    p = subprocess.run([sys.executable, tool, f"{mod}:bad", out, "--input-shape", "4"],
                       capture_output=True, text=True)
    record(p.returncode == 2 and "gpupipe_export: cannot export module '1' (nn.LSTM)" in
           p.stderr, f"CLI unsupported op: exit {p.returncode}, named")
    # A user's mistakes: "not exported" (exit 2) with a message, never a traceback (MODELS.md).
    sd = os.path.join(work, "linear_sd.pt")
    torch.save(nn.Linear(3, 3).state_dict(), sd)
    mistakes = [
        ("a wrong --input-shape", [f"{mod}:build", out, "--input-shape", "5,12,12"],
         "failed on one item of shape [5, 12, 12]"),
        ("a negative --input-shape dimension", [f"{mod}:build", out, "--input-shape", "3,-1,12"],
         "every dimension must be positive"),
        ("a --mean that is not numbers", [f"{mod}:build", out, "--input-shape", "3,12,12",
                                          "--mean", "a,b,c"], "--mean 'a,b,c'"),
        ("a module that does not import", ["nosuchpkg.mod:foo", out, "--input-shape", "3"],
         "importing 'nosuchpkg.mod' failed"),
        ("--weights of another model", [f"{mod}:build", out, "--input-shape", "3,12,12",
                                        "--weights", sd], "does not fit"),
        ("--weights that do not exist", [f"{mod}:build", out, "--input-shape", "3,12,12",
                                         "--weights", sd + ".missing"], "no such file"),
        ("a topk head wider than the output", [f"{mod}:build", out, "--input-shape",
                                                "3,12,12", "--head", "topk=100000",
                                                "--no-check"], "so k is at most"),
        ("an output in a missing directory", [f"{mod}:build",
                                              os.path.join(work, "no", "dir", "x.safetensors"),
                                              "--input-shape", "3,12,12", "--no-check"],
         "not exported"),
    ]
    for what, args, needle in mistakes:
        p = subprocess.run([sys.executable, tool] + args, capture_output=True, text=True)
        record(p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr,
               f"CLI {what}: exit {p.returncode}, "
               f"{(p.stderr.strip().splitlines() or ['no output'])[0][:120]}")
    p = subprocess.run([sys.executable, tool, "torchvision.models:resnet18", out,
                        "--input-shape", "3,32,32", "--gp-infer", gp_infer, "--head", "topk=5"],
                       capture_output=True, text=True)
    record(p.returncode == 0 and "indices identical" in p.stderr,
           f"CLI package.module:function (torchvision resnet18), exit {p.returncode}")


def readme_path(gp_infer, work):
    """The README's commands on examples/pytorch_model.py, as a newcomer runs them."""
    ex = os.path.join(ROOT, "examples", "pytorch_model.py")
    tool = os.path.join(ROOT, "tools", "gpupipe_export.py")
    net, xp, yp = (os.path.join(work, n) for n in ("net.safetensors", "x.npy", "y.npy"))
    steps = [[sys.executable, tool, f"{ex}:build", net, "--input-shape", "3,32,32",
              "--input-dtype", "u8", "--layout", "hwc", "--mean", "0.485,0.456,0.406",
              "--std", "0.229,0.224,0.225", "--head", "topk=5", "--gp-infer", gp_infer],
             [sys.executable, ex, "images", xp],
             [gp_infer, "--model", net, "--input", xp, "--output", yp],
             [sys.executable, ex, "compare", xp, yp]]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            record(False, f"README path: {' '.join(cmd)} exited {p.returncode}: "
                   f"{p.stderr.strip()[-500:]}")
            return
    record("identical to PyTorch on 100.0% of 16 images" in p.stdout,
           f"README path (export, gp-infer, compare): {p.stdout.strip().splitlines()[0]}")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    gp_infer, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}")
    round_trips(gp_infer, work)
    messages(gp_infer, work)
    cli(gp_infer, work)
    readme_path(gp_infer, work)
    print("\nmax errors, the exporter's check (gp-infer host fp32 vs PyTorch; heads: on the "
          "scores they rank):")
    for name, err, rel, n in exporter_report:
        print(f"  {name:44s} abs {err:.3g}  relative {rel:.3g}  ({n} items)")
    print("max errors, this test's independent check (heads: worst score gap of the indices):")
    for name, err, rel in report:
        print(f"  {name:44s} abs {err:.3g}  relative {rel:.3g}")
    print(f"{checks - len(failures)} of {checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
