#!/usr/bin/python3
"""Export a PyTorch nn.Module as a gpupipe model (one .safetensors file, the layer spec in its
metadata), then check the file against the module.

Command line:

    python3 tools/gpupipe_export.py mymodel.py:build net.safetensors --input-shape 3,224,224
    python3 tools/gpupipe_export.py torchvision.models:resnet18 rn18.safetensors \\
        --input-shape 3,224,224 --input-dtype u8 --layout hwc \\
        --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225 --head topk=5

    MODEL is FILE.py:NAME or package.module:NAME; NAME is an nn.Module instance, an nn.Module
    class, or a function returning a module (called without arguments; --weights FILE loads a
    state_dict saved with torch.save into it).

Python:

    sys.path.insert(0, "tools"); from gpupipe_export import export
    r = export(model, torch.randn(1, 3, 224, 224), "net.safetensors",
               input_dtype="u8", input_layout="hwc", mean=(0.485, 0.456, 0.406),
               std=(0.229, 0.224, 0.225), head="topk=5")
    print(r.max_rel_err)

`example_input` is what the module's forward takes (float, with the batch dimension). The
exported model takes one item per input: f32 features or C x H x W images, or with
input_dtype="u8" raw u8 pixels, C x H x W or (input_layout="hwc") H x W x C; gpupipe then does
x / 255 and (x - mean) / std on the device, as torchvision's ToTensor + Normalize.

How it works: torch.fx traces the module; every node maps to spec lines (docs/MODELS.md lists
them: Linear, Conv2d with every option, BatchNorm2d after a Conv2d, ReLU/GELU/Sigmoid/Tanh,
MaxPool2d/AvgPool2d, AdaptiveAvgPool2d, Flatten/view/reshape, residual adds, softmax, argmax
and top-k heads; Dropout and Identity are dropped); values read twice are kept with
save/restore; the tensors keep their state_dict names. Anything else stops the export with the
op's name, where it is in the graph and in your code, and what to do. The check runs the module
(eval mode, no_grad) and the file through gp-infer on the same inputs and reports the largest
error; above the tolerance the export fails (the file stays, for a look).

Transformer encoders (token ids in, one vector per sequence out): export_encoder(), or
--encoder on the command line, for a torch.nn encoder (nn.Embedding, nn.LayerNorm,
nn.MultiheadAttention / nn.TransformerEncoder or an attention module with q/k/v/out Linear
layers, cls or mean pooling, F.normalize) or a Hugging Face BertModel (--pooling cls|mean|pooler);
the check runs sequences of several lengths packed through gp-infer --lengths.

    python3 tools/gpupipe_export.py mymodel.py:build enc.safetensors --encoder
    r = export_encoder(model, "enc.safetensors")                  # torch.nn encoder
    r = export_encoder(bert, "bert.safetensors", pooling="mean", normalize=True)

Works with PyTorch 1.13 and 2.x; needs torch and numpy, nothing else (the safetensors file is
written here, not with the safetensors package).
"""
import argparse
import contextlib
import dataclasses
import importlib
import importlib.util
import json
import operator
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import traceback

try:
    import numpy as np
except ImportError as _np_exc:  # say which interpreter, not a bare traceback
    if __name__ == "__main__":
        print(f"gpupipe_export.py: NumPy is not importable by {sys.executable} ({_np_exc}): run "
              "it with a Python that has NumPy and PyTorch (Debian: /usr/bin/python3 with "
              "python3-numpy and python3-torch)", file=sys.stderr)
        sys.exit(2)
    raise

try:
    import torch
    import torch.fx
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.fx.passes.shape_prop import ShapeProp
except ImportError as _exc:  # the writer below works without torch
    torch = None
    _TORCH_ERROR = _exc

SPEC_KEY = "gpupipe.spec"
MAX_NAME = 63  # GP__SPEC_MAX_NAME - 1 in lib/model/spec.h
HERE = os.path.dirname(os.path.abspath(__file__))

# ---- safetensors --------------------------------------------------------------------------


def tensor_entry(t, dtype="F32"):
    """(safetensors dtype, raw little-endian bytes, shape) of a torch tensor stored as dtype
    (F32, F16, BF16, I64)."""
    t = t.detach().contiguous().cpu()
    if dtype == "F32":
        raw = t.float().numpy().astype("<f4").tobytes()
    elif dtype == "F16":
        raw = t.half().numpy().astype("<f2").tobytes()
    elif dtype == "BF16":
        raw = t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    elif dtype == "I64":
        raw = t.long().numpy().astype("<i8").tobytes()
    else:
        raise ValueError(f"unsupported safetensors dtype {dtype}")
    return dtype, raw, list(t.shape)


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype, raw bytes, shape)}, data laid out in this order; metadata: a
    {str: str} dict for "__metadata__". Header padded with spaces to 8 bytes, as PyTorch's
    writer does; the data covers the tensors exactly (no trailing bytes)."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, (dtype, raw, shape) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    return 8 + len(h) + off


def read_safetensors(path):
    """-> ({name: numpy array}, metadata dict). Float and integer dtypes as NumPy has them;
    BF16 is returned as float32."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    np_types = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4",
                "U8": "u1", "I8": "i1", "BOOL": "?"}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[base + b:base + e]
        if t["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=np_types[t["dtype"]])
        out[name] = arr.reshape(t["shape"]).copy()
    return out, header.get("__metadata__", {})


# ---- errors and results -------------------------------------------------------------------

SUPPORTED = ("Linear, Conv2d (any stride, padding, dilation, groups, bias), BatchNorm2d right "
             "after a Conv2d, ReLU, GELU (erf form), Sigmoid, Tanh, MaxPool2d, AvgPool2d, "
             "AdaptiveAvgPool2d/AdaptiveMaxPool2d (output size dividing the input), Flatten / "
             "view / reshape to (N, -1), mean over H and W, residual adds (x + y, same "
             "shapes), softmax over the features, argmax and top-k heads; Dropout and "
             "Identity are dropped")


class ExportError(Exception):
    """The module cannot be exported; str() says what, where and what to do."""


@contextlib.contextmanager
def cuda_fp32_math(tf32):
    """PyTorch's CUDA fp32 matmuls and convolutions in TF32 (tf32=True) or IEEE fp32 inside the
    block, restored after. cuDNN convolutions default to TF32 (cudnn.allow_tf32 is True), about
    1e-4 relative off IEEE fp32: a reference for gpupipe's fp32 must turn it off. PyTorch >= 2.9
    spells it fp32_precision ('tf32' | 'ieee'), older ones allow_tf32. No effect on the CPU."""
    b = torch.backends

    def has(obj, name):  # torch.backends.cuda.matmul raises AssertionError for unknown names
        try:
            getattr(obj, name)
            return True
        except Exception:  # noqa: BLE001
            return False

    if has(b.cuda.matmul, "fp32_precision") and has(getattr(b.cudnn, "conv", None),
                                                     "fp32_precision"):
        knobs, want = [(b.cuda.matmul, "fp32_precision"), (b.cudnn.conv, "fp32_precision")], \
            ("tf32" if tf32 else "ieee")
    else:
        knobs, want = [(b.cuda.matmul, "allow_tf32"), (b.cudnn, "allow_tf32")], bool(tf32)
    saved = [getattr(o, k) for o, k in knobs]
    for o, k in knobs:
        setattr(o, k, want)
    try:
        yield
    finally:
        for (o, k), v in zip(knobs, saved):
            setattr(o, k, v)


class CheckFailed(ExportError):
    """The file was written but disagrees with the module beyond the tolerance; .result has
    the figures."""

    def __init__(self, msg, result):
        super().__init__(msg)
        self.result = result


@dataclasses.dataclass
class ExportResult:
    path: str
    spec: str
    tensors: int            # tensors written
    bytes: int              # file size
    input: str              # the spec's input line
    output: str             # what one output item is
    checked: bool = False   # the check ran
    check_skipped: str = ""  # why it did not run
    items: int = 0          # items compared
    max_abs_err: float = float("nan")
    max_rel_err: float = float("nan")  # max |gp - torch| / max |torch|
    # argmax / top-k outputs: the errors above are those of the scores the head ranks (the
    # file run without its last line); then the fraction of items with identical indices, and
    # the largest difference, relative to the scores' scale, between the score of an index
    # gpupipe picked and the one PyTorch picked at that rank (nonzero only at near-ties)
    index_agreement: float = float("nan")
    index_score_gap: float = float("nan")
    tol: float = 0.0
    ok: bool = True

    def summary(self):
        s = (f"wrote {self.path}: {self.tensors} tensors, {self.bytes / 1e6:.2f} MB, "
             f"{len(self.spec.splitlines())} spec lines; input {self.input[6:]}; "
             f"output {self.output}")
        if not self.checked:
            return s + f"\ncheck skipped: {self.check_skipped}"
        s += (f"\ncheck: {self.items} items through gp-infer vs PyTorch: max abs error "
              f"{self.max_abs_err:.3g}, max relative error {self.max_rel_err:.3g} "
              f"(limit {self.tol:g})")
        if self.index_agreement == self.index_agreement:
            s += (f" on the scores the head ranks; indices identical on "
                  f"{100 * self.index_agreement:.1f}% of items (worst score gap "
                  f"{self.index_score_gap:.3g})")
        return s + (": ok" if self.ok else ": FAILED")


# ---- reading the fx graph -----------------------------------------------------------------

def _target_name(node, root):
    """A readable name for what a node calls: 'nn.LSTM', 'torch.cumsum', 'Tensor.view'."""
    if node.op == "call_module":
        m = root.get_submodule(node.target)
        cls = type(m)
        mod = cls.__module__
        prefix = "nn." if mod.startswith("torch.nn") else mod + "."
        return prefix + cls.__name__
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "get_attr":
        return f"self.{node.target}"
    t = node.target
    name = getattr(t, "__name__", repr(t))
    if getattr(operator, name, None) is t:
        return f"operator.{name}"
    for prefix, mod in (("torch.", torch), ("torch.nn.functional.", F)):
        if getattr(mod, name, None) is t:
            return prefix + name
    return f"{getattr(t, '__module__', None) or '?'}.{name}"


def _where(node):
    """The user's source lines that created the node (torch.fx records the stack)."""
    trace = getattr(node, "stack_trace", None) or ""
    torch_dir = os.path.dirname(torch.__file__)
    frames, lines = [], trace.splitlines()
    i = 0
    while i < len(lines):
        ln = lines[i]
        if ln.strip().startswith("File "):
            code = lines[i + 1] if i + 1 < len(lines) and not lines[i + 1].strip().startswith(
                "File ") else ""
            if "_symbolic_trace.py" in ln:
                break  # frames below this are the exporter's own call
            if torch_dir not in ln and HERE not in ln:
                frames.append(ln.rstrip() + ("\n" + code.rstrip() if code else ""))
            i += 2 if code else 1
        else:
            i += 1
    return "\n".join(frames[-2:])


def _shape(node):
    tm = node.meta.get("tensor_meta") if hasattr(node, "meta") else None
    return tuple(tm.shape) if tm is not None and hasattr(tm, "shape") else None


def _fmt_shape(s):
    return "x".join(str(d) for d in s) if s is not None else "?"


def _bind(node, names, defaults=None):
    """node.args / node.kwargs by parameter name (the tensor input included)."""
    out = dict(defaults or {})
    out.update(zip(names, node.args))
    out.update(node.kwargs)
    return out


def _pair(v):
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return int(v[0]), int(v[0])
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _dims(key, v):
    """'stride=2' / 'stride=2x1'."""
    h, w = _pair(v)
    return f"{key}={h}" if h == w else f"{key}={h}x{w}"


def _opt(key, v, default):
    """As _dims, or '' when it is the default."""
    return "" if _pair(v) == _pair(default) else _dims(key, v)


def _float(x):
    return repr(float(x))


# torch.nn modules with a gpupipe layer (others stop the trace where they are called).
def _known_modules():
    return (nn.Linear, nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.GELU, nn.Sigmoid, nn.Tanh,
            nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d, nn.Flatten,
            nn.Softmax, nn.Dropout, nn.Dropout2d, nn.AlphaDropout, nn.Identity)


def _user_frames():
    """The user's frames inside the traced forward (below torch.fx's trace call)."""
    torch_dir = os.path.dirname(torch.__file__)
    stack = traceback.extract_stack()
    start = min((i for i, f in enumerate(stack) if f.filename.endswith("_symbolic_trace.py")),
                default=-1)
    frames = [f for f in stack[start + 1:]
              if torch_dir not in f.filename and HERE not in f.filename]
    return "\n".join(f'File "{f.filename}", line {f.lineno}, in {f.name}\n  {f.line or ""}'
                     for f in frames[-2:])


class _Tracer(torch.fx.Tracer if torch is not None else object):
    def __init__(self):
        super().__init__()
        self.record_stack_traces = True  # so errors can point at the user's line

    def call_module(self, m, forward, args, kwargs):
        # An unsupported leaf (nn.LSTM, ...) is reported where it is called: its outputs may
        # not even trace (tuple unpacking of a proxy), so waiting for the graph is too late.
        path = self.path_of_module(m)
        if self.is_leaf_module(m, path) and not isinstance(m, _known_modules()):
            cls = type(m)
            what = ("nn." if cls.__module__.startswith("torch.nn") else cls.__module__ + ".") \
                + cls.__name__
            where = _user_frames()
            raise ExportError(
                f"cannot export module '{path}' ({what}), called at graph node "
                f"{len(self.graph.nodes)}: no gpupipe layer for {what}"
                + ("\n  in your code:\n    " + where.replace("\n", "\n    ") if where else "")
                + f"\n  what to do: gpupipe has no layer for this. Supported: {SUPPORTED}. "
                "Replace it with a supported op, or export the part of the model before it and "
                "run the rest in PyTorch (docs/MODELS.md, 'When an op is not supported').")
        return super().call_module(m, forward, args, kwargs)


# Op records produced from fx nodes. kind: input | unary | bn | add | alias | head | multi |
# pick. `inputs` are the fx nodes whose tensor data the op reads.
@dataclasses.dataclass
class _Op:
    kind: str
    node: object
    inputs: list
    lines: list = dataclasses.field(default_factory=list)
    tensors: list = dataclasses.field(default_factory=list)  # (name, tensor)
    note: str = ""
    params: dict = dataclasses.field(default_factory=dict)


class _Graph:
    def __init__(self, module, gm, log):
        self.module, self.gm, self.log = module, gm, log
        self.nodes = list(gm.graph.nodes)
        self.index = {n: i for i, n in enumerate(self.nodes)}

    # -- messages --
    def fail(self, node, what, todo=None):
        users = ", ".join(f"'{u.name}'" for u in node.users) or "nothing"
        ins = ", ".join(f"'{a.name}' ({_fmt_shape(_shape(a))})" for a in node.all_input_nodes)
        msg = (f"cannot export node {self.index[node]} of {len(self.nodes)}, '{node.name}' "
               f"({node.op} {_target_name(node, self.module)}): {what}\n"
               f"  graph: reads {ins or 'nothing'}; used by {users}")
        where = _where(node)
        if where:
            msg += "\n  in your code:\n    " + where.replace("\n", "\n    ")
        msg += "\n  what to do: " + (todo or (
            f"gpupipe has no layer for this. Supported: {SUPPORTED}. Replace it with a "
            "supported op, or export the part of the model before it and run the rest in "
            "PyTorch (docs/MODELS.md, 'When an op is not supported')."))
        raise ExportError(msg)

    def need_rank(self, node, x, ranks, what):
        s = _shape(x)
        if s is None or len(s) not in ranks:
            want = " or ".join({2: "(N, features)", 4: "(N, C, H, W)"}[r] for r in ranks)
            self.fail(node, f"{what} needs a {want} value, got {_fmt_shape(s)}",
                      "flatten before Linear / softmax / heads (torch.flatten(x, 1)); gpupipe "
                      "values are features or C x H x W images" if 2 in ranks else None)
        return s

    # -- classification --
    def classify(self, node):
        op = node.op
        if op == "placeholder":
            return _Op("input", node, [])
        if op == "get_attr":
            self.fail(node, f"forward reads the tensor self.{node.target} directly",
                      "gpupipe reads weights through layers (nn.Linear, nn.Conv2d, ...): use "
                      "the module instead of F.linear/F.conv2d on a parameter or buffer")
        if op == "call_module":
            return self.classify_module(node, self.module.get_submodule(node.target))
        if op == "call_function":
            return self.classify_function(node)
        if op == "call_method":
            return self.classify_method(node)
        self.fail(node, f"unexpected node kind {op}")

    def tensor_arg(self, node, v, what="input"):
        if not isinstance(v, torch.fx.Node) or _shape(v) is None:
            self.fail(node, f"its {what} is a constant or not a tensor ({v!r})",
                      "gpupipe ops combine tensors computed from the model's input; constants "
                      "are not supported (fold them into the weights)")
        return v

    def act(self, node, x, name):
        return _Op("unary", node, [x], [name])

    def classify_module(self, node, m):
        name = node.target
        x = node.args[0] if node.args else None
        if isinstance(m, (nn.Dropout, nn.Dropout2d, nn.AlphaDropout, nn.Identity)):
            return _Op("alias", node, [self.tensor_arg(node, x)],
                       note=f"dropped {type(m).__name__} '{name}' (identity in eval mode)")
        x = self.tensor_arg(node, x)
        if len(node.args) > 1 or node.kwargs:
            self.fail(node, "called with more than one argument")
        if len(name) > MAX_NAME:
            self.fail(node, f"its module path '{name}' is longer than {MAX_NAME} characters",
                      "give the submodule a shorter attribute name")
        if isinstance(m, nn.Linear):
            self.need_rank(node, x, (2,), "Linear")
            t = [(f"{name}.weight", m.weight)] + ([(f"{name}.bias", m.bias)]
                                                  if m.bias is not None else [])
            return _Op("unary", node, [x], [f"linear {name}"], t)
        if isinstance(m, nn.Conv2d):
            self.need_rank(node, x, (4,), "Conv2d")
            if m.padding_mode != "zeros":
                self.fail(node, f"padding_mode='{m.padding_mode}'",
                          "gpupipe pads with zeros: use padding_mode='zeros'")
            pad = m.padding
            if isinstance(pad, str):
                if pad == "valid":
                    pad = (0, 0)
                else:  # 'same': symmetric only
                    pad = []
                    for k, d in zip(m.kernel_size, m.dilation):
                        if d * (k - 1) % 2:
                            self.fail(node, "padding='same' with an even kernel pads one side "
                                      "more than the other", "use an odd kernel or explicit "
                                      "symmetric padding")
                        pad.append(d * (k - 1) // 2)
            opts = [_opt("stride", m.stride, 1), _opt("padding", pad, 0),
                    _opt("dilation", m.dilation, 1),
                    f"groups={m.groups}" if m.groups != 1 else ""]
            t = [(f"{name}.weight", m.weight)] + ([(f"{name}.bias", m.bias)]
                                                  if m.bias is not None else [])
            return _Op("unary", node, [x], [" ".join(["conv2d", name] + [o for o in opts if o])],
                       t)
        if isinstance(m, nn.BatchNorm2d):
            self.need_rank(node, x, (4,), "BatchNorm2d")
            if m.running_mean is None or m.running_var is None:
                self.fail(node, "BatchNorm2d without running statistics "
                          "(track_running_stats=False) normalizes with each batch's statistics",
                          "gpupipe folds batch norm into the conv with fixed statistics: train "
                          "with track_running_stats=True")
            t = [(f"{name}.running_mean", m.running_mean), (f"{name}.running_var", m.running_var)]
            if m.weight is not None:
                t.append((f"{name}.weight", m.weight))
            if m.bias is not None:
                t.append((f"{name}.bias", m.bias))
            eps = "" if m.eps == 1e-5 else f" eps={_float(m.eps)}"
            return _Op("bn", node, [x], [f"batchnorm2d {name}{eps}"], t)
        if isinstance(m, nn.ReLU):
            return self.act(node, x, "relu")
        if isinstance(m, nn.GELU):
            if getattr(m, "approximate", "none") != "none":
                self.fail(node, f"GELU(approximate='{m.approximate}')",
                          "gpupipe's gelu is the exact (erf) form: use nn.GELU()")
            return self.act(node, x, "gelu")
        if isinstance(m, nn.Sigmoid):
            return self.act(node, x, "sigmoid")
        if isinstance(m, nn.Tanh):
            return self.act(node, x, "tanh")
        if isinstance(m, nn.MaxPool2d):
            return self.maxpool(node, x, m.kernel_size, m.stride, m.padding, m.dilation,
                                m.ceil_mode, m.return_indices)
        if isinstance(m, nn.AvgPool2d):
            return self.avgpool(node, x, m.kernel_size, m.stride, m.padding, m.ceil_mode,
                                m.count_include_pad, m.divisor_override)
        if isinstance(m, nn.AdaptiveAvgPool2d):
            return self.adaptive(node, x, m.output_size, "avg")
        if isinstance(m, nn.AdaptiveMaxPool2d):
            if m.return_indices:
                self.fail(node, "return_indices=True")
            return self.adaptive(node, x, m.output_size, "max")
        if isinstance(m, nn.Flatten):
            return self.flatten(node, x, m.start_dim, m.end_dim)
        if isinstance(m, nn.Softmax):
            return self.softmax(node, x, m.dim)
        self.fail(node, f"no gpupipe layer for {_target_name(node, self.module)}")

    def maxpool(self, node, x, k, stride, pad, dil, ceil, ret):
        self.need_rank(node, x, (4,), "max pooling")
        if _pair(dil) != (1, 1) or ceil or ret:
            self.fail(node, "max pooling with dilation, ceil_mode or return_indices",
                      "gpupipe's maxpool2d has dilation 1, floor mode and no indices")
        stride = stride if stride not in (None, (), []) else k
        opts = [_dims("kernel", k), _opt("stride", stride, k), _opt("padding", pad, 0)]
        return _Op("unary", node, [x], [" ".join(["maxpool2d"] + [o for o in opts if o])])

    def avgpool(self, node, x, k, stride, pad, ceil, include_pad, divisor):
        self.need_rank(node, x, (4,), "average pooling")
        if ceil or divisor is not None or (not include_pad and _pair(pad) != (0, 0)):
            self.fail(node, "average pooling with ceil_mode, divisor_override or "
                      "count_include_pad=False and padding",
                      "gpupipe's avgpool2d is floor mode, divides by the kernel area and "
                      "counts padding (count_include_pad=True)")
        stride = stride if stride not in (None, (), []) else k
        opts = [_dims("kernel", k), _opt("stride", stride, k), _opt("padding", pad, 0)]
        return _Op("unary", node, [x], [" ".join(["avgpool2d"] + [o for o in opts if o])])

    def adaptive(self, node, x, size, kind):
        s = self.need_rank(node, x, (4,), f"adaptive {kind} pooling")
        ih, iw = s[2], s[3]
        oh, ow = (size, size) if not isinstance(size, (tuple, list)) else (
            size[0], size[-1])
        oh, ow = oh or ih, ow or iw
        if (oh, ow) == (1, 1) and kind == "avg":
            return _Op("unary", node, [x], ["globalavgpool"])
        if (oh, ow) == (ih, iw):
            return _Op("alias", node, [x], note=f"adaptive pool '{node.name}' to the input's "
                       "own size: identity")
        if ih % oh or iw % ow:
            self.fail(node, f"adaptive {kind} pooling from {ih}x{iw} to {oh}x{ow}: the input "
                      "size is not a multiple of the output size",
                      "gpupipe pools with fixed windows: change the input size so it divides, "
                      "or use output size 1")
        kh, kw = ih // oh, iw // ow
        k = f"{kh}" if kh == kw else f"{kh}x{kw}"
        return _Op("unary", node, [x], [f"{kind}pool2d kernel={k}"])

    def flatten(self, node, x, start, end):
        s = _shape(x)
        r = len(s) if s else 0
        if start not in (1, 1 - r) or end not in (-1, r - 1):
            self.fail(node, f"flatten(start_dim={start}, end_dim={end})",
                      "gpupipe flattens everything after the batch: flatten(x, 1)")
        return self.to_flat(node, x)

    def to_flat(self, node, x):
        s = self.need_rank(node, x, (2, 4), "flatten")
        if len(s) == 2:
            return _Op("alias", node, [x])
        return _Op("unary", node, [x], ["flatten"])

    def reshape(self, node, x):
        """view / reshape / squeeze: fine when it flattens each item or changes nothing."""
        s_in, s_out = _shape(x), _shape(node)
        if s_out == s_in:
            return _Op("alias", node, [x])
        if s_in and s_out and len(s_out) == 2 and s_out[0] == s_in[0] and len(s_in) in (2, 4):
            return self.to_flat(node, x)
        self.fail(node, f"reshapes {_fmt_shape(s_in)} to {_fmt_shape(s_out)}",
                  "gpupipe values are (N, features) or (N, C, H, W); only flattening each item "
                  "(x.view(x.size(0), -1), torch.flatten(x, 1)) is supported")

    def softmax(self, node, x, dim):
        self.need_rank(node, x, (2,), "softmax")
        if dim not in (None, 1, -1):
            self.fail(node, f"softmax over dim={dim}", "gpupipe's softmax runs over the "
                      "features (dim=1) of a flat value")
        return _Op("unary", node, [x], ["softmax"])

    def mean(self, node, x, dim, keepdim):
        self.need_rank(node, x, (4,), "mean")
        if dim is None:
            self.fail(node, "mean over every dimension (the batch too)",
                      "use x.mean((2, 3)), a global average pool")
        dims = sorted(d % 4 for d in (dim if isinstance(dim, (tuple, list)) else (dim,)))
        if dims != [2, 3]:
            self.fail(node, f"mean over dims {dim}", "only the mean over H and W "
                      "(x.mean((2, 3)), a global average pool) is supported")
        return _Op("unary", node, [x], ["globalavgpool"] + ([] if keepdim else ["flatten"]))

    def add(self, node, a, b, alpha=1):
        for v in (a, b):
            self.tensor_arg(node, v, "operand")
        if alpha != 1:
            self.fail(node, f"add with alpha={alpha}")
        if _shape(a) != _shape(b):
            self.fail(node, f"adds values of shapes {_fmt_shape(_shape(a))} and "
                      f"{_fmt_shape(_shape(b))}", "gpupipe's add needs equal shapes (no "
                      "broadcasting)")
        return _Op("add", node, [a, b])

    def head(self, node, x, dim, what):
        self.need_rank(node, x, (2,), what)
        if dim not in (1, -1):
            self.fail(node, f"{what} over dim={dim}",
                      f"gpupipe's {what} runs over the features (dim=1) of a flat value")

    def classify_function(self, node):
        t = node.target
        a = node.args
        x = a[0] if a else None
        if t in (torch.relu, F.relu, torch.relu_, getattr(F, "relu_", None)):
            return self.act(node, self.tensor_arg(node, x), "relu")
        if t in (torch.sigmoid, getattr(F, "sigmoid", None)):
            return self.act(node, self.tensor_arg(node, x), "sigmoid")
        if t in (torch.tanh, getattr(F, "tanh", None)):
            return self.act(node, self.tensor_arg(node, x), "tanh")
        if t is F.gelu:
            p = _bind(node, ("input", "approximate"), {"approximate": "none"})
            if p["approximate"] != "none":
                self.fail(node, f"gelu(approximate='{p['approximate']}')",
                          "gpupipe's gelu is the exact (erf) form")
            return self.act(node, self.tensor_arg(node, x), "gelu")
        if t in (operator.add, operator.iadd, torch.add):
            p = _bind(node, ("input", "other"), {"alpha": 1})
            return self.add(node, p["input"], p["other"], p["alpha"])
        if t is torch.flatten:
            p = _bind(node, ("input", "start_dim", "end_dim"), {"start_dim": 0, "end_dim": -1})
            return self.flatten(node, self.tensor_arg(node, x), p["start_dim"], p["end_dim"])
        if t in (torch.reshape,):
            return self.reshape(node, self.tensor_arg(node, x))
        if t in (F.adaptive_avg_pool2d, F.adaptive_max_pool2d):
            p = _bind(node, ("input", "output_size", "return_indices"), {"return_indices": False})
            if p["return_indices"]:
                self.fail(node, "return_indices=True")
            return self.adaptive(node, self.tensor_arg(node, x), p["output_size"],
                                 "avg" if t is F.adaptive_avg_pool2d else "max")
        if t in (F.max_pool2d, torch.max_pool2d):
            p = _bind(node, ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode",
                             "return_indices"),
                      {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False,
                       "return_indices": False})
            return self.maxpool(node, self.tensor_arg(node, x), p["kernel_size"], p["stride"],
                                p["padding"], p["dilation"], p["ceil_mode"], p["return_indices"])
        if t in (F.avg_pool2d, getattr(torch, "avg_pool2d", F.avg_pool2d)):
            p = _bind(node, ("input", "kernel_size", "stride", "padding", "ceil_mode",
                             "count_include_pad", "divisor_override"),
                      {"stride": None, "padding": 0, "ceil_mode": False,
                       "count_include_pad": True, "divisor_override": None})
            return self.avgpool(node, self.tensor_arg(node, x), p["kernel_size"], p["stride"],
                                p["padding"], p["ceil_mode"], p["count_include_pad"],
                                p["divisor_override"])
        if t in (F.dropout, F.dropout2d, getattr(F, "alpha_dropout", None)):
            p = _bind(node, ("input", "p", "training"), {"training": True})
            if p["training"]:
                self.fail(node, "dropout with training=True", "pass training=self.training "
                          "(the exporter traces in eval mode)")
            return _Op("alias", node, [self.tensor_arg(node, x)],
                       note=f"dropped {node.name} (identity in eval mode)")
        if t in (F.softmax, torch.softmax):
            p = _bind(node, ("input", "dim"), {"dim": None})
            if p.get("dtype") is not None:
                self.fail(node, "softmax with a dtype")
            return self.softmax(node, self.tensor_arg(node, x), p["dim"])
        if t is torch.mean:
            p = _bind(node, ("input", "dim", "keepdim"), {"dim": None, "keepdim": False})
            return self.mean(node, self.tensor_arg(node, x), p["dim"], p["keepdim"])
        if t is torch.topk:
            p = _bind(node, ("input", "k", "dim", "largest", "sorted"),
                      {"dim": -1, "largest": True, "sorted": True})
            x = self.tensor_arg(node, x)
            self.head(node, x, p["dim"], "topk")
            if not p["largest"] or not p["sorted"]:
                self.fail(node, "topk with largest=False or sorted=False",
                          "gpupipe's topk returns the k largest, best first")
            return _Op("multi", node, [x], params={"indices": f"topk k={int(p['k'])}",
                                                   "values_ok": False})
        if t is torch.argmax:
            p = _bind(node, ("input", "dim", "keepdim"), {"dim": None, "keepdim": False})
            x = self.tensor_arg(node, x)
            if p["dim"] is None:
                self.fail(node, "argmax without dim (over the whole batch)",
                          "use torch.argmax(x, dim=1)")
            self.head(node, x, p["dim"], "argmax")
            return _Op("head", node, [x], ["argmax"])
        if t is torch.max and len(a) + len(node.kwargs) >= 2:
            p = _bind(node, ("input", "dim", "keepdim"), {"keepdim": False})
            if isinstance(p.get("dim"), int):
                x = self.tensor_arg(node, x)
                self.head(node, x, p["dim"], "max")
                return _Op("multi", node, [x], params={"indices": "argmax", "values_ok": False})
        if t in (operator.getitem, getattr):
            src = a[0]
            if isinstance(src, torch.fx.Node) and src.op != "placeholder":
                key = a[1]
                return _Op("pick", node, [src], params={"key": key})
        self.fail(node, f"no gpupipe layer for {_target_name(node, self.module)}")

    def classify_method(self, node):
        m = node.target
        x = node.args[0]
        self.tensor_arg(node, x)
        rest = node.args[1:]
        if m in ("relu", "relu_", "sigmoid", "sigmoid_", "tanh", "tanh_"):
            return self.act(node, x, m.rstrip("_"))
        if m in ("contiguous", "clone", "detach"):
            return _Op("alias", node, [x])
        if m in ("view", "reshape", "squeeze"):
            return self.reshape(node, x)
        if m == "flatten":
            p = _bind(node, ("self", "start_dim", "end_dim"), {"start_dim": 0, "end_dim": -1})
            return self.flatten(node, x, p["start_dim"], p["end_dim"])
        if m in ("add", "add_"):
            p = _bind(node, ("input", "other"), {"alpha": 1})
            return self.add(node, x, p["other"], p["alpha"])
        if m == "softmax":
            p = _bind(node, ("self", "dim"), {"dim": None})
            return self.softmax(node, x, p["dim"])
        if m == "mean":
            p = _bind(node, ("self", "dim", "keepdim"), {"dim": None, "keepdim": False})
            return self.mean(node, x, p["dim"], p["keepdim"])
        if m == "topk":
            return self.classify_function_as(node, torch.topk)
        if m == "argmax":
            return self.classify_function_as(node, torch.argmax)
        if m == "max" and rest:
            return self.classify_function_as(node, torch.max)
        self.fail(node, f"no gpupipe layer for Tensor.{m}")

    def classify_function_as(self, node, fn):
        saved = node.target
        try:  # classify x.topk(...) as torch.topk(x, ...)
            node.target = fn
            return self.classify_function(node)
        finally:
            node.target = saved

    def check_inplace(self):
        """An in-place op mutates a value that fx still names by its old node: a later reader
        of that node would see the value before the mutation, unlike PyTorch."""
        for n in self.nodes:
            if n.op not in ("call_method", "call_function", "call_module") or not n.args:
                continue
            name = n.target if n.op == "call_method" else getattr(n.target, "__name__", "")
            inplace = (isinstance(name, str) and name.endswith("_") and not name.endswith("__"))
            inplace |= bool(n.kwargs.get("inplace"))
            if n.op == "call_module":
                inplace = bool(getattr(self.module.get_submodule(n.target), "inplace", False))
            src = n.args[0]
            if inplace and isinstance(src, torch.fx.Node):
                later = [u for u in src.users if self.index[u] > self.index[n]]
                if later:
                    self.fail(n, f"in place on '{src.name}', which '{later[0].name}' reads "
                              "afterwards", "use the op's result (y = x.relu()) or "
                              "inplace=False, so the graph says which value each op reads")


# ---- building the spec --------------------------------------------------------------------

class _Value:
    """A value of the gpupipe program: the input, or the result of spec lines applied to other
    values (unary: lines read the current value; add: two values)."""

    def __init__(self, kind, node, src, lines=(), tensors=()):
        self.kind, self.node, self.src = kind, node, list(src)
        self.lines, self.tensors = list(lines), list(tensors)
        self.users = 0


def _build_values(g, out_node):
    # Nodes the output depends on, through tensor data only: dead code and shape arithmetic
    # (x.size(0) feeding a view) are never classified.
    ops, stack = {}, [out_node]
    while stack:
        n = stack.pop()
        if n in ops:
            continue
        ops[n] = g.classify(n)
        stack.extend(i for i in ops[n].inputs if i not in ops)
    order = [n for n in g.nodes if n in ops]
    placeholders = [n for n in g.nodes if n.op == "placeholder"]
    if len(placeholders) != 1:
        if not placeholders:
            raise ExportError("forward takes no input: gpupipe models take one input tensor")
        g.fail(placeholders[-1], f"forward takes {len(placeholders)} inputs",
               "gpupipe models take one input tensor")
    val = {}
    values = []
    for n in order:
        op = ops[n]
        if op.note:
            g.log(op.note)
        if op.kind == "input":
            v = _Value("input", n, [])
        elif op.kind == "alias":
            val[n] = val[op.inputs[0]]
            continue
        elif op.kind in ("unary", "bn", "head"):
            v = _Value(op.kind, n, [val[op.inputs[0]]], op.lines, op.tensors)
        elif op.kind == "add":
            v = _Value("add", n, [val[i] for i in op.inputs])
        elif op.kind == "multi":
            val[n] = op  # resolved by the pick that reads it
            continue
        elif op.kind == "pick":
            multi = val.get(op.inputs[0])
            if not isinstance(multi, _Op):
                g.fail(n, f"indexes the value of '{op.inputs[0].name}'",
                       "indexing tensors is not supported; only the .indices of topk/max")
            key = op.params["key"]
            if key in (1, "indices"):
                v = _Value("head", n, [val[multi.inputs[0]]], [multi.params["indices"]])
            else:
                g.fail(n, f"uses the values of {multi.node.name} ({key!r})",
                       "gpupipe's topk/argmax heads return the class indices only: return "
                       "torch.topk(x, k).indices, or the scores themselves (softmax)")
        else:
            g.fail(n, f"internal: unknown op kind {op.kind}")
        values.append(v)
        val[n] = v
    out = val[out_node]
    if not isinstance(out, _Value):
        g.fail(out_node, "the output is not a tensor")
    for v in values:
        for s in v.src:
            s.users += 1
    # Batch norm folds into the conv before it: merge the lines, so nothing comes between.
    merged, folded = [], 0
    for v in values:
        if v.kind == "bn":
            c = v.src[0]
            prev = c.node.name
            if c.kind != "unary" or not c.lines[-1].startswith("conv2d"):
                what = c.lines[-1].split()[0] if c.lines else c.kind
                g.fail(v.node, f"BatchNorm2d follows '{prev}' ({what}), not a Conv2d",
                       "gpupipe folds batch norm into the convolution before it, so a "
                       "BatchNorm2d must directly follow a Conv2d")
            if c.users > 1:
                g.fail(v.node, f"the output of Conv2d '{prev}' is also read elsewhere",
                       "gpupipe folds batch norm into the convolution, so nothing else may "
                       "read the convolution's output before the batch norm")
            c.lines += v.lines
            c.tensors += v.tensors
            c.node = v.node  # later readers of the bn read the merged value
            v.merged_into = c
            folded += 1
            continue
        merged.append(v)

    if folded:
        g.log(f"folded {folded} BatchNorm2d into the Conv2d before each")

    def resolve(v):
        while getattr(v, "merged_into", None) is not None:
            v = v.merged_into
        return v

    for v in merged:
        v.src = [resolve(s) for s in v.src]
    out = resolve(out)
    for v in merged:
        if v.kind == "head" and v is not out:
            g.fail(v.node, "a top-k / argmax head that is not the model's output",
                   "heads return class indices and must be the last op")
    return merged, out


def _emit(values, out, input_line):
    """Spec text for values in topological order: the current value flows from line to line;
    a value read later by anything but the next line is saved under a tag."""
    inp = values[0]
    need = set()
    prev = inp
    for v in values[1:]:
        if v.kind in ("unary", "head"):
            if v.src[0] is not prev:
                need.add(v.src[0])
        else:  # add
            a, b = v.src
            if a is prev:
                need.add(b)
            elif b is prev:
                need.add(a)
            else:
                need.update((a, b))
        prev = v
    if out is not prev:
        need.add(out)
    tags = {}
    for i, v in enumerate(values):
        if v in need:
            t = "".join(ch if ch.isalnum() or ch in "._" else "_" for ch in v.node.name)
            tags[v] = t if len(t) <= MAX_NAME and t not in tags.values() else f"v{i}"
    lines = [input_line]
    if inp in need:
        lines.append(f"save {tags[inp]}")
    cur = inp
    for v in values[1:]:
        if v.kind in ("unary", "head"):
            if cur is not v.src[0]:
                lines.append(f"restore {tags[v.src[0]]}")
            lines += v.lines
        else:
            a, b = v.src
            if cur is a:
                lines.append(f"add {tags[b]}")
            elif cur is b:
                lines.append(f"add {tags[a]}")
            else:
                lines += [f"restore {tags[a]}", f"add {tags[b]}"]
        cur = v
        if v in need:
            lines.append(f"save {tags[v]}")
    if out is not cur:
        lines.append(f"restore {tags[out]}")
    return "\n".join(lines) + "\n"


# ---- inputs -------------------------------------------------------------------------------

def _input_line(shape, dtype, layout, mean, std):
    """shape: the module's input without the batch dimension."""
    if dtype not in ("f32", "u8"):
        raise ExportError(f"input_dtype '{dtype}': f32 or u8")
    if layout not in ("chw", "hwc"):
        raise ExportError(f"input_layout '{layout}': chw or hwc")
    if len(shape) == 1:
        if dtype != "f32" or layout != "chw" or mean is not None or std is not None:
            raise ExportError(f"the module takes features ({shape[0]} per item): u8 input, "
                              "layout and mean/std apply to images (N, C, H, W) only")
        return f"input f32 {shape[0]}"
    if len(shape) != 3:
        raise ExportError(f"the module takes items of shape {_fmt_shape(shape)}: gpupipe models "
                          "take features (N, F) or images (N, C, H, W)")
    c, h, w = shape
    dims = f"{h}x{w}x{c} layout=hwc" if layout == "hwc" else f"{c}x{h}x{w}"
    s = f"input {dtype} {dims}"
    for key, vals in (("mean", mean), ("std", std)):
        if vals is None:
            continue
        vals = [float(v) for v in (vals if hasattr(vals, "__len__") else [vals])]
        if len(vals) not in (1, c):
            raise ExportError(f"{key} has {len(vals)} values: give 1 or {c} (one per channel)")
        if len(vals) > 64:
            raise ExportError(f"{key} has {len(vals)} values: gpupipe takes one per channel for "
                              "up to 64 channels; give one value for all")
        if key == "std" and any(v == 0 for v in vals):
            raise ExportError("std has a zero")
        s += f" {key}=" + ",".join(_float(v) for v in vals)
    return s


def _prep(items, dtype, layout, mean, std):
    """What the model does to raw items, in PyTorch (the order of float operations is
    gpupipe's: x / 255, then (x - mean) / std, in fp32)."""
    x = torch.from_numpy(items)
    if x.dim() == 4 and layout == "hwc":
        x = x.permute(0, 3, 1, 2)
    x = x.float()
    if dtype == "u8":
        x = x / 255.0
    if x.dim() == 4:
        c = x.shape[1]
        if mean is not None:
            m = torch.tensor([float(v) for v in np.broadcast_to(np.asarray(mean, np.float64), c)],
                             dtype=torch.float32)
            x = x - m.view(1, c, 1, 1)
        if std is not None:
            s = torch.tensor([float(v) for v in np.broadcast_to(np.asarray(std, np.float64), c)],
                             dtype=torch.float32)
            x = x / s.view(1, c, 1, 1)
    return x.contiguous()


# ---- gp-infer and the check ---------------------------------------------------------------

def _check_exe(r, check, gp_infer, log):
    """The gp-infer the check runs, or None with the check's skip recorded in r and logged;
    ExportError when check=True and none is found."""
    exe, why = (None, "check=False") if check is False else find_gp_infer(gp_infer)
    if exe is None:
        if check:
            raise ExportError(f"the check was requested but {why}")
        r.check_skipped = why
        log(r.summary())
    return exe


def find_gp_infer(explicit=None):
    """-> (path or None, how it was found / why not)."""
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return os.path.abspath(explicit), "given"
        raise ExportError(f"gp-infer '{explicit}' is not an executable file")
    for local, how in ((os.path.join(HERE, "..", "build", "bench", "gp-infer"),
                        "the repository's build/"),
                       (os.path.join("build", "bench", "gp-infer"), "./build/")):
        if os.path.isfile(local) and os.access(local, os.X_OK):
            return os.path.abspath(local), how
    p = shutil.which("gp-infer")
    if p:
        return p, "PATH"
    return None, ("gp-infer not found (not given, not in build/bench/ of this repository or of "
                  "the current directory, not on PATH): build it with `cmake --preset default "
                  "&& cmake --build --preset default`, or pass --gp-infer PATH")


def _run_gp_infer(gp_infer, path, items, backend, work, spec=None):
    xp, yp = os.path.join(work, "x.npy"), os.path.join(work, "y.npy")
    np.save(xp, items)
    cmd = [gp_infer, "--model", path, "--input", xp, "--output", yp, "--backend", backend,
           "--batch", "8", "--quiet"]
    if spec is not None:
        sp = os.path.join(work, "check.spec")
        with open(sp, "w") as f:
            f.write(spec)
        cmd += ["--spec", sp]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise ExportError(f"the check could not run the file: {' '.join(cmd)} exited "
                          f"{p.returncode}:\n{p.stderr.strip()}")
    return np.load(yp)


class _Capture(torch.fx.Interpreter if torch is not None else object):
    """Runs the traced graph and keeps one node's value (the scores a head ranks)."""

    def __init__(self, gm, node):
        super().__init__(gm)
        self.want, self.value = node, None

    def run_node(self, n):
        r = super().run_node(n)
        if n is self.want:
            self.value = r
        return r


def _index_errors(got, ref_idx, scores):
    """Indices from gpupipe vs PyTorch: every index gpupipe picked must hold, in PyTorch's
    scores, the value PyTorch ranks at that position (within tol of the scores' scale), so
    differences can only be between near-ties. -> (agreement, worst relative score gap)."""
    got = got.reshape(got.shape[0], -1).astype(np.int64)
    ref_idx = ref_idx.reshape(ref_idx.shape[0], -1).astype(np.int64)
    agree = float(np.mean(np.all(got == ref_idx, axis=1)))
    if np.any(got < 0) or np.any(got >= scores.shape[1]):
        return agree, float("inf")
    picked = np.take_along_axis(scores, got, 1)
    expect = np.take_along_axis(scores, ref_idx, 1)
    scale = max(float(np.max(np.abs(scores))), 1e-30)
    return agree, float(np.max(np.abs(picked - expect)) / scale) if got.size else 0.0


# ---- export -------------------------------------------------------------------------------

def _parse_head(head):
    if head in (None, "", "none"):
        return None
    if head in ("softmax", "argmax"):
        return head
    if isinstance(head, str) and head.startswith("topk"):
        k = head[4:].lstrip("=: ")
        if k.isdigit() and int(k) >= 1:
            return f"topk k={int(k)}"
    raise ExportError(f"head '{head}': none, softmax, argmax or topk=K")


def _apply_head(y, head):
    if head is None:
        return y
    if head == "softmax":
        return F.softmax(y, dim=1)
    if head == "argmax":
        return torch.argmax(y, dim=1, keepdim=True)
    return torch.topk(y, int(head.split("=")[1]), dim=1).indices


def export(module, example_input, path, input_dtype="f32", input_layout="chw", mean=None,
           std=None, head=None, check=None, gp_infer=None, tol=1e-4, check_items=8,
           check_backend="host", log=None):
    """Write `module` as a gpupipe model to `path` and check it; -> ExportResult.

    module         an nn.Module (put in eval mode for the export, its mode restored after)
    example_input  a tensor as the module's forward takes it: (N, F) or (N, C, H, W) float
                   (a single item without N is accepted)
    input_dtype    "f32" or "u8": what one item of the exported model is
    input_layout   "chw" or "hwc" (u8/f32 images arriving H x W x C)
    mean, std      per-channel (or one) normalization done on the device; with u8, after
                   x / 255 (torchvision's ToTensor + Normalize)
    head           None, "softmax", "argmax" or "topk=K", appended after the module's output
    check          None: run the check when gp-infer is found; True: it must run; False: skip
    gp_infer       path of gp-infer (else build/bench/gp-infer of this repository, else PATH)
    tol            relative error limit of the check: max |gp - torch| / max |torch|
    log            callable taking a line (default: print to stderr)
    Raises ExportError (unsupported op: name, graph position, your code, what to do) and
    CheckFailed (written but the check is over the tolerance).
    """
    if torch is None:
        raise ExportError(f"PyTorch is not available ({_TORCH_ERROR}): install python3-torch")
    log = log or (lambda s: print(s, file=sys.stderr))
    if not isinstance(module, nn.Module):
        raise ExportError(f"module is a {type(module).__name__}, not a torch.nn.Module")
    if not torch.is_tensor(example_input) or not example_input.is_floating_point():
        raise ExportError("example_input must be a float tensor as the module's forward takes "
                          "it, e.g. torch.randn(1, 3, 224, 224)")
    x0 = example_input.detach()
    if x0.dim() in (1, 3):
        x0 = x0.unsqueeze(0)
    head = _parse_head(head)
    input_line = _input_line(tuple(x0.shape[1:]), input_dtype, input_layout, mean, std)
    was_training = module.training
    module.eval()
    # torch.fx traces into the root module: a bare layer (nn.Conv2d(...) itself) is traced as
    # one call inside a Sequential; its tensors are then named 0.weight, 0.bias.
    root = nn.Sequential(module) if isinstance(module, _known_modules()) else module
    try:
        try:
            graph = _Tracer().trace(root)
        except ExportError:
            raise
        except Exception as exc:  # torch.fx raises TraceError, TypeError, ... on control flow
            raise ExportError(
                f"torch.fx could not trace the module: {type(exc).__name__}: {exc}\n  what to "
                "do: the exporter needs a forward without Python control flow that depends on "
                "tensor values (if x.sum() > 0, loops over x.shape, ...); move such code out of "
                "forward, or export the traceable part") from exc
        gm = torch.fx.GraphModule(root, graph)
        dev = next(iter(module.parameters()), torch.empty(0)).device
        with torch.no_grad():
            try:  # the module itself first: ShapeProp prints a traceback of its own errors
                module(x0.to(dev))
            except Exception as exc:  # the module's own error on this input
                raise ExportError(
                    f"the module failed on one item of shape {list(x0.shape[1:])}: "
                    f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}\n  "
                    "what to do: give --input-shape as one item the module takes, without "
                    "the batch (3,224,224 for images, 784 for flat features)") from exc
            ShapeProp(gm).propagate(x0.to(dev))
        g = _Graph(root, gm, log)
        g.check_inplace()
        out_node = [n for n in g.nodes if n.op == "output"][0]
        res = out_node.args[0]
        if not isinstance(res, torch.fx.Node):
            g.fail(out_node, f"the module returns {type(res).__name__} {res!r}",
                   "gpupipe models return one tensor: return only the output you need")
        values, out = _build_values(g, res)
        if head is not None:
            if out.kind == "head":
                raise ExportError(f"head='{head}' but the module already ends with a "
                                  f"{out.lines[-1].split()[0]} head")
            s = _shape(out.node)
            if s is None or len(s) != 2:
                raise ExportError(f"head='{head}' needs the module's output to be (N, "
                                  f"features), got {_fmt_shape(s)}: flatten first")
            if head.startswith("topk") and int(head.split("=")[1]) > s[1]:
                raise ExportError(f"head 'topk={head.split('=')[1]}': the module has "
                                  f"{s[1]} output features, so k is at most {s[1]}")
            h = _Value("head" if head != "softmax" else "unary", out.node, [out], [head])
            values.append(h)
            out = h
        spec = _emit(values, out, input_line)

        tensors, seen = {}, set()
        for v in values:
            for name, t in v.tensors:
                if name not in seen:
                    seen.add(name)
                    tensors[name] = tensor_entry(t, "F32")
        meta = {SPEC_KEY: spec, "format": "pt",
                "gpupipe.exporter": f"tools/gpupipe_export.py, torch {torch.__version__}"}
        nbytes = write_safetensors(path, tensors, meta)
        last = spec.strip().splitlines()[-1].split()
        out_s = _shape(res)
        if last[0] == "topk":
            output = f"i64 {last[1][2:]} class indices, best first"
        elif last[0] == "argmax":
            output = "i64 1 class index"
        else:
            output = f"f32 {_fmt_shape(out_s[1:]) if out_s else '?'}" + (
                " probabilities" if last[0] == "softmax" else "")
        r = ExportResult(path=path, spec=spec, tensors=len(tensors), bytes=nbytes,
                         input=input_line, output=output, tol=tol)

        # ---- the check ----
        exe = _check_exe(r, check, gp_infer, log)
        if exe is None:
            return r
        gen = torch.Generator().manual_seed(1234)
        item = tuple(x0.shape[1:])
        n = max(check_items, 1)
        if input_dtype == "u8":
            shape = (item[1], item[2], item[0]) if input_layout == "hwc" else item
            items = torch.randint(0, 256, (n,) + shape, generator=gen,
                                  dtype=torch.uint8).numpy()
        elif input_layout == "chw" and mean is None and std is None:
            items = torch.cat([x0.float().cpu(), torch.randn((n,) + item, generator=gen)]).numpy()
        else:
            shape = (item[1], item[2], item[0]) if input_layout == "hwc" else item
            items = torch.randn((n,) + shape, generator=gen).numpy()
        xm = _prep(items, input_dtype, input_layout, mean, std)
        with torch.no_grad(), cuda_fp32_math(tf32=False):  # the reference in IEEE fp32
            y_mod = module(xm.to(dev))
            if not torch.is_tensor(y_mod):
                raise ExportError("the module's output is not a tensor")
            ref = _apply_head(y_mod, head).cpu()
            scores = None
            if out.kind == "head":
                src = out.src[0]
                if head is not None:
                    scores = y_mod.float().cpu()
                else:
                    cap = _Capture(gm, src.node)
                    cap.run(xm.to(dev))
                    scores = cap.value.float().cpu()
        def errors(a, b):
            a = a.reshape(a.shape[0], -1).astype(np.float64)
            b = b.reshape(b.shape[0], -1).astype(np.float64)
            if a.shape != b.shape:
                raise ExportError(f"internal: gp-infer returned shape {a.shape}, PyTorch "
                                  f"{b.shape}")
            err = float(np.max(np.abs(a - b)))
            return err, err / max(float(np.max(np.abs(b))), 1e-30)

        with tempfile.TemporaryDirectory(prefix="gpupipe_export_") as work:
            got = _run_gp_infer(exe, os.path.abspath(path), items, check_backend, work)
            if out.kind == "head":  # the same file without the head: the scores it ranks
                body = "".join(spec.splitlines(True)[:-1])
                got_scores = _run_gp_infer(exe, os.path.abspath(path), items, check_backend,
                                           work, body)
        r.checked, r.items = True, items.shape[0]
        if out.kind == "head":
            sc = scores.numpy().reshape(scores.shape[0], -1).astype(np.float64)
            r.max_abs_err, r.max_rel_err = errors(got_scores, sc)
            r.index_agreement, r.index_score_gap = _index_errors(got, ref.numpy(), sc)
            r.ok = r.max_rel_err <= tol and r.index_score_gap <= tol
        else:
            r.max_abs_err, r.max_rel_err = errors(got, ref.double().numpy())
            r.ok = r.max_rel_err <= tol
        log(r.summary())
        if not r.ok:
            raise CheckFailed(
                f"the exported file disagrees with the module: {r.summary()}\n  what to do: "
                "see the spec (gp-infer --model FILE --describe) and docs/MODELS.md; if the "
                "module computes something the exporter mapped wrongly, please report it", r)
        return r
    finally:
        module.train(was_training)


# ---- transformer encoders -----------------------------------------------------------------
#
# An encoder takes token ids (N, T) and returns one vector per sequence. Two ways in:
#  * a torch.nn module, traced with torch.fx: nn.Embedding (words; positions from
#    torch.arange(T); token types from torch.zeros_like(ids)), nn.LayerNorm, nn.Linear,
#    activations, residual adds, nn.MultiheadAttention, nn.TransformerEncoderLayer /
#    nn.TransformerEncoder (batch_first, no masks), an attention module of your own with four
#    nn.Linear children named like q/k/v/out and a heads attribute (it is not traced into: the
#    check proves the mapping), pooling x[:, 0] or x.mean(1), F.normalize;
#  * a Hugging Face BertModel (or any module with its structure and names), mapped
#    structurally, with the pooling chosen here.
# The check runs random sequences of several lengths one at a time through the module and all
# of them packed through gp-infer --lengths.

ENC_SUPPORTED = (
    "nn.Embedding (token ids; positions as torch.arange(T); token types as torch.zeros_like("
    "ids)), nn.LayerNorm, nn.Linear, GELU (erf) / ReLU / Tanh, residual adds, "
    "nn.MultiheadAttention (batch_first, self-attention, no masks), nn.TransformerEncoderLayer "
    "/ nn.TransformerEncoder (batch_first), an attention module with nn.Linear q/k/v/out "
    "children and a heads attribute, x[:, 0] (cls) and x.mean(1) pooling, F.normalize, "
    "Dropout")

_ATT_Q = ("q", "query", "q_proj", "q_lin", "wq", "to_q", "q_linear")
_ATT_K = ("k", "key", "k_proj", "k_lin", "wk", "to_k", "k_linear")
_ATT_V = ("v", "value", "v_proj", "v_lin", "wv", "to_v", "v_linear")
_ATT_O = ("o", "out", "out_proj", "o_proj", "proj", "dense", "wo", "to_out", "o_lin",
          "out_lin", "out_linear")
_ATT_HEADS = ("num_heads", "n_heads", "heads", "num_attention_heads", "n_head", "nhead", "h")


def _custom_attention(m):
    """(heads, q, k, v, out) child names of an attention module of the user's own, or None."""
    if type(m).__module__.startswith("torch."):
        return None
    kids = {n: c for n, c in m.named_children() if isinstance(c, nn.Linear)}
    found = []
    for names in (_ATT_Q, _ATT_K, _ATT_V, _ATT_O):
        hit = [n for n in names if n in kids]
        if len(hit) != 1:
            return None
        found.append(hit[0])
    c = kids[found[0]].in_features
    if any(kids[n].in_features != c or kids[n].out_features != c for n in found):
        return None
    heads = next((getattr(m, a) for a in _ATT_HEADS if isinstance(getattr(m, a, None), int)),
                 None)
    if not heads or c % heads:
        return None
    return (heads,) + tuple(found)


class _EncTracer(_Tracer):
    def iter(self, obj):
        """`b, t = ids.shape`: torch.fx finds the unpack's size by indexing the caller's
        instructions with f_lasti // 2, which Python 3.11's inline caches break; look the
        instruction up by its offset instead."""
        import dis
        import inspect
        calling = inspect.currentframe().f_back.f_back
        for inst in dis.get_instructions(calling.f_code):
            if inst.offset == calling.f_lasti:
                if inst.opname == "UNPACK_SEQUENCE":
                    return (obj[i] for i in range(inst.argval))
                break
        return super().iter(obj)

    def is_leaf_module(self, m, qualname):
        return _custom_attention(m) is not None or super().is_leaf_module(m, qualname)

    def call_module(self, m, forward, args, kwargs):
        known = (nn.Embedding, nn.LayerNorm, nn.Linear, nn.GELU, nn.ReLU, nn.Tanh, nn.Dropout,
                 nn.Identity, nn.MultiheadAttention, nn.TransformerEncoderLayer,
                 nn.TransformerEncoder)
        path = self.path_of_module(m)
        if (self.is_leaf_module(m, path) and not isinstance(m, known)
                and _custom_attention(m) is None):
            cls = type(m)
            raise ExportError(
                f"cannot export module '{path}' (nn.{cls.__name__}): no gpupipe encoder layer "
                f"for it\n  what to do: supported in encoders: {ENC_SUPPORTED}")
        return torch.fx.Tracer.call_module(self, m, forward, args, kwargs)


class _Marker:
    """A tensor made from shapes alone: token positions (arange) or token types (zeros)."""

    def __init__(self, what):
        self.what = what


class _Partial:
    """Embedding terms not yet added together: {'word' | 'position' | 'token_type': module
    name}."""

    def __init__(self, node, parts):
        self.node, self.parts, self.done = node, dict(parts), None


class _Attn:
    """nn.MultiheadAttention's (output, weights) pair: [0] is the attention value."""

    def __init__(self, node, lines, tensors):
        self.node, self.lines, self.tensors = node, lines, tensors


_SHAPE = object()  # an int, a size, a device: shape arithmetic, not data


def _act_name(act, where, fail):
    if act is F.gelu or (isinstance(act, nn.GELU) and getattr(act, "approximate", "none") ==
                         "none"):
        return "gelu"
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    fail(f"{where}: activation {act!r} (gpupipe has gelu in its erf form and relu)")


def _mha_lines(m, name, fail):
    if not m.batch_first:
        fail(f"nn.MultiheadAttention '{name}' has batch_first=False: the exporter reads (N, T, "
             "C) values; build it with batch_first=True")
    if not m._qkv_same_embed_dim or m.bias_k is not None or m.add_zero_attn:
        fail(f"nn.MultiheadAttention '{name}' with kdim/vdim, add_bias_kv or add_zero_attn")
    t = [(f"{name}.in_proj_weight", m.in_proj_weight), (f"{name}.out_proj.weight",
                                                        m.out_proj.weight)]
    if m.in_proj_bias is not None:
        t.append((f"{name}.in_proj_bias", m.in_proj_bias))
    if m.out_proj.bias is not None:
        t.append((f"{name}.out_proj.bias", m.out_proj.bias))
    return [f"attention {name} heads={m.num_heads}"], t


def _ln_lines(m, name, fail):
    if len(m.normalized_shape) != 1:
        fail(f"nn.LayerNorm '{name}' over {tuple(m.normalized_shape)}: gpupipe normalizes the "
             "last dimension only")
    eps = "" if m.eps == 1e-5 else f" eps={_float(m.eps)}"
    if m.weight is None:  # elementwise_affine=False: the identity affine, written out
        c = m.normalized_shape[0]
        return [f"layernorm {name}{eps}"], [(f"{name}.weight", torch.ones(c))]
    t = [(f"{name}.weight", m.weight)] + ([(f"{name}.bias", m.bias)]
                                           if m.bias is not None else [])
    return [f"layernorm {name}{eps}"], t


def _layer_lines(m, name, fail):
    """nn.TransformerEncoderLayer as spec lines (its residuals saved under its own tags)."""
    if not getattr(m, "batch_first", m.self_attn.batch_first):
        fail(f"nn.TransformerEncoderLayer '{name}' has batch_first=False: build it with "
             "batch_first=True")
    act = _act_name(m.activation, f"nn.TransformerEncoderLayer '{name}'", fail)
    att, t = _mha_lines(m.self_attn, f"{name}.self_attn", fail)
    ln1, t1 = _ln_lines(m.norm1, f"{name}.norm1", fail)
    ln2, t2 = _ln_lines(m.norm2, f"{name}.norm2", fail)
    t += t1 + t2
    for lin in ("linear1", "linear2"):
        mod = getattr(m, lin)
        t.append((f"{name}.{lin}.weight", mod.weight))
        if mod.bias is not None:
            t.append((f"{name}.{lin}.bias", mod.bias))
    ff = [f"linear {name}.linear1", act, f"linear {name}.linear2"]
    a, f_ = f"{name}.sa", f"{name}.ff"
    if m.norm_first:
        lines = [f"save {a}"] + ln1 + att + [f"add {a}", f"save {f_}"] + ln2 + ff + [
            f"add {f_}"]
    else:
        lines = [f"save {a}"] + att + [f"add {a}"] + ln1 + [f"save {f_}"] + ff + [
            f"add {f_}"] + ln2
    return lines, t


def _encoder_values(module, gm, log):
    """The fx graph of a torch.nn encoder -> (_Value list, the output value)."""
    nodes = list(gm.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    memo, values = {}, []
    placeholders = [n for n in nodes if n.op == "placeholder"]

    def fail(node, what, todo=None):
        where = _where(node) if node is not None else ""
        msg = "cannot export " + (f"node {index[node]} of {len(nodes)}, '{node.name}' "
                                  f"({node.op} {_target_name(node, module)}): "
                                  if node is not None else "the encoder: ") + what
        if where:
            msg += "\n  in your code:\n    " + where.replace("\n", "\n    ")
        msg += "\n  what to do: " + (todo or f"supported in encoders: {ENC_SUPPORTED}")
        raise ExportError(msg)

    def new(kind, node, src, lines=(), tensors=()):
        v = _Value(kind, node, src, lines, tensors)
        v.tokens = (_shape(node) is not None and len(_shape(node)) == 3)
        values.append(v)
        return v

    def value(node, v):
        """A tensor value (an embedding sum becomes its spec line here)."""
        if isinstance(v, _Partial):
            if "word" not in v.parts:
                fail(v.node, "position or token-type embeddings used without the word "
                     "embeddings", "add them to the word embeddings: tok(ids) + pos(arange)")
            if v.done is None:
                w = v.parts["word"]
                line = f"embedding {w[0]}"
                t = [(f"{w[0]}.weight", w[1].weight)]
                for role, key in (("position", "position"), ("token_type", "token_type")):
                    if role in v.parts:
                        line += f" {key}={v.parts[role][0]}"
                        t.append((f"{v.parts[role][0]}.weight", v.parts[role][1].weight))
                v.done = new("unary", v.node, [inp], [line], t)
                v.done.tokens = True
            return v.done
        if not isinstance(v, _Value):
            fail(node, "reads something that is not a value of the model "
                 f"({type(v).__name__})")
        return v

    def get(n):
        if not isinstance(n, torch.fx.Node):
            return _SHAPE
        if n not in memo:
            memo[n] = classify(n)
        return memo[n]

    def tensor(node, a):
        return value(node, get(a))

    def classify(n):
        if n.op == "placeholder":
            if n is not placeholders[0]:
                fail(n, "the encoder reads a second input (a mask?)", "gpupipe runs each "
                     "sequence unpadded: forward(ids, mask=None) is traced with mask=None")
            return inp
        if n.op == "get_attr":
            fail(n, f"forward reads the tensor self.{n.target} directly",
                 "use modules (nn.Embedding, nn.Linear, ...), not their parameters")
        if n.op == "call_module":
            return classify_module(n, module.get_submodule(n.target))
        t = n.target
        args = [get(a) if isinstance(a, torch.fx.Node) else a for a in n.args]
        src = args[0] if args else None
        name = t if n.op == "call_method" else getattr(t, "__name__", "")
        # shape arithmetic
        if (n.op == "call_method" and t in ("size", "dim")) or (
                t is getattr and n.args[1] in ("shape", "device", "dtype")):
            return _SHAPE
        if src is _SHAPE and t in (operator.getitem, operator.add, operator.sub,
                                   operator.mul, operator.floordiv):
            return _SHAPE
        if t is torch.arange:
            return _Marker("position")
        if (t is torch.zeros_like and args and args[0] is inp) or (
                t is torch.zeros and n.kwargs.get("dtype") in (torch.long, torch.int)):
            return _Marker("token_type")
        if isinstance(src, _Marker) and (t is operator.getitem or name in (
                "unsqueeze", "expand", "expand_as", "to", "view", "reshape", "repeat", "long",
                "int", "type", "contiguous", "type_as")):
            return src
        if t in (F.dropout,) or name in ("contiguous", "clone", "detach"):
            return tensor(n, n.args[0])
        if t in (operator.add, operator.iadd, torch.add) or name in ("add", "add_"):
            p = _bind(n, ("input", "other"), {"alpha": 1})
            if p["alpha"] != 1:
                fail(n, f"add with alpha={p['alpha']}")
            a, b = (get(p["input"]), get(p["other"]))
            if isinstance(a, _Partial) and isinstance(b, _Partial):
                parts = dict(a.parts)
                for k, v in b.parts.items():
                    if k in parts:
                        fail(n, f"adds two {k} embeddings")
                    parts[k] = v
                return _Partial(n, parts)
            a, b = value(n, a), value(n, b)
            if _shape(p["input"]) != _shape(p["other"]):
                fail(n, f"adds values of shapes {_fmt_shape(_shape(p['input']))} and "
                     f"{_fmt_shape(_shape(p['other']))}", "gpupipe's add needs equal shapes")
            return new("add", n, [a, b])
        if t in (F.gelu,) or name == "gelu":
            if _bind(n, ("input", "approximate"), {"approximate": "none"})["approximate"] != \
                    "none":
                fail(n, "gelu(approximate='tanh')", "gpupipe's gelu is the exact (erf) form")
            return new("unary", n, [tensor(n, n.args[0])], ["gelu"])
        if t in (F.relu, torch.relu) or name == "relu":
            return new("unary", n, [tensor(n, n.args[0])], ["relu"])
        if t in (torch.tanh,) or name == "tanh":
            return new("unary", n, [tensor(n, n.args[0])], ["tanh"])
        if t is F.normalize:
            p = _bind(n, ("input", "p", "dim", "eps"), {"p": 2.0, "dim": 1, "eps": 1e-12})
            x = tensor(n, p["input"])
            r = len(_shape(p["input"]) or ())
            if p["p"] != 2 or p["dim"] % r != r - 1:
                fail(n, f"normalize(p={p['p']}, dim={p['dim']})", "gpupipe's l2norm is "
                     "F.normalize(x, p=2, dim=-1)")
            eps = "" if p["eps"] == 1e-12 else f" eps={_float(p['eps'])}"
            return new("unary", n, [x], [f"l2norm{eps}"])
        if t is operator.getitem and isinstance(src, _Attn):
            if n.args[1] != 0:
                fail(n, "uses the attention weights", "gpupipe's attention returns its output "
                     "only ([0]; need_weights does not matter)")
            x = tensor(src.node, src.node.args[0])
            return new("unary", n, [x], src.lines, src.tensors)
        if t is operator.getitem and isinstance(src, _Value) and src.tokens:
            key = n.args[1]
            if (isinstance(key, tuple) and len(key) in (2, 3) and key[0] == slice(None)
                    and key[1] == 0 and (len(key) == 2 or key[2] == slice(None))):
                return new("unary", n, [src], ["pool cls"])
            fail(n, f"indexes the tokens with {key!r}", "the first token is x[:, 0] (pool cls)")
        if t is torch.mean or name == "mean":
            p = _bind(n, ("input", "dim", "keepdim"), {"dim": None, "keepdim": False})
            x = tensor(n, p["input"])
            d = p["dim"][0] if isinstance(p["dim"], (tuple, list)) and len(p["dim"]) == 1 \
                else p["dim"]
            if not x.tokens or d not in (1, -2) or p["keepdim"]:
                fail(n, f"mean over dim={p['dim']}", "the mean over each sequence's tokens is "
                     "x.mean(1) on (N, T, C) values (pool mean)")
            return new("unary", n, [x], ["pool mean"])
        fail(n, f"no gpupipe encoder layer for {_target_name(n, module)}")

    def classify_module(n, m):
        name = n.target
        if len(name) > MAX_NAME:
            fail(n, f"its module path '{name}' is longer than {MAX_NAME} characters")
        a0 = get(n.args[0]) if n.args else None
        if isinstance(m, (nn.Dropout, nn.Identity)):
            return tensor(n, n.args[0])
        if isinstance(m, nn.Embedding):
            if m.max_norm is not None:
                fail(n, "nn.Embedding with max_norm renormalizes rows on lookup")
            if a0 is inp:
                return _Partial(n, {"word": (name, m)})
            if isinstance(a0, _Marker):
                return _Partial(n, {a0.what: (name, m)})
            fail(n, "an nn.Embedding of something other than the token ids, torch.arange(T) "
                 "(positions) or torch.zeros_like(ids) (token types)")
        x = value(n, a0)
        extra = list(n.args[1:]) + list(n.kwargs.values())
        if isinstance(m, nn.MultiheadAttention):
            p = _bind(n, ("query", "key", "value", "key_padding_mask", "need_weights",
                          "attn_mask", "average_attn_weights", "is_causal"))
            if not (p.get("query") is p.get("key") is p.get("value")):
                fail(n, "attention with different query, key and value", "gpupipe's attention "
                     "is self-attention: attn(x, x, x)")
            if p.get("key_padding_mask") is not None or p.get("attn_mask") is not None or \
                    p.get("is_causal"):
                fail(n, "attention with a mask", "gpupipe packs sequences without padding: no "
                     "mask is needed; export with mask=None")
            lines, t = _mha_lines(m, name, lambda w: fail(n, w))
            return _Attn(n, lines, t)
        if any(e is not None for e in extra):
            fail(n, "called with more than the value (a mask?)", "export with mask=None")
        if isinstance(m, nn.Linear):
            t = [(f"{name}.weight", m.weight)] + ([(f"{name}.bias", m.bias)]
                                                  if m.bias is not None else [])
            return new("unary", n, [x], [f"linear {name}"], t)
        if isinstance(m, nn.LayerNorm):
            lines, t = _ln_lines(m, name, lambda w: fail(n, w))
            return new("unary", n, [x], lines, t)
        if isinstance(m, nn.GELU):
            if getattr(m, "approximate", "none") != "none":
                fail(n, "GELU(approximate='tanh')", "gpupipe's gelu is the exact (erf) form")
            return new("unary", n, [x], ["gelu"])
        if isinstance(m, nn.ReLU):
            return new("unary", n, [x], ["relu"])
        if isinstance(m, nn.Tanh):
            return new("unary", n, [x], ["tanh"])
        if isinstance(m, nn.TransformerEncoderLayer):
            lines, t = _layer_lines(m, name, lambda w: fail(n, w))
            return new("unary", n, [x], lines, t)
        if isinstance(m, nn.TransformerEncoder):
            lines, t = [], []
            for i, layer in enumerate(m.layers):
                li, ti = _layer_lines(layer, f"{name}.layers.{i}", lambda w: fail(n, w))
                lines, t = lines + li, t + ti
            if m.norm is not None:
                li, ti = _ln_lines(m.norm, f"{name}.norm", lambda w: fail(n, w))
                lines, t = lines + li, t + ti
            return new("unary", n, [x], lines, t)
        att = _custom_attention(m)
        if att is not None:
            heads, q, k, v, o = att
            t = []
            for p in (q, k, v, o):
                lin = getattr(m, p)
                t.append((f"{name}.{p}.weight", lin.weight))
                if lin.bias is not None:
                    t.append((f"{name}.{p}.bias", lin.bias))
            log(f"mapped '{name}' ({type(m).__name__}) to attention: heads={heads}, q={q} k={k} "
                f"v={v} out={o} (checked below)")
            return new("unary", n, [x], [f"attention {name} heads={heads} q={q} k={k} v={v} "
                                         f"out={o}"], t)
        fail(n, f"no gpupipe encoder layer for {_target_name(n, module)}")

    if not placeholders:
        raise ExportError("forward takes no input: an encoder takes token ids (N, T)")
    inp = _Value("input", placeholders[0], [])
    inp.tokens = False
    values.append(inp)
    out_node = [n for n in nodes if n.op == "output"][0]
    res = out_node.args[0]
    if not isinstance(res, torch.fx.Node):
        fail(out_node, f"the module returns {type(res).__name__}", "return one tensor: the "
             "embeddings or logits, (N, features)")
    out = value(out_node, get(res))
    if out.tokens or out is inp:
        fail(res, f"the output is every token ({_fmt_shape(_shape(res))})",
             "pool each sequence into one vector: x[:, 0] (cls) or x.mean(1)")
    for v in values:
        for s in v.src:
            s.users += 1
    return values, out


def _is_bert(module):
    return (hasattr(module, "embeddings") and hasattr(module, "encoder")
            and hasattr(getattr(module, "encoder"), "layer")
            and hasattr(module.embeddings, "word_embeddings"))


def _bert_spec(module, prefix, pooling, head_lines, fail):
    cfg = getattr(module, "config", None)
    if cfg is not None:
        if getattr(cfg, "hidden_act", "gelu") != "gelu":
            fail(f"hidden_act='{cfg.hidden_act}': gpupipe has gelu in its erf form "
                 "(hidden_act='gelu')")
        if getattr(cfg, "position_embedding_type", "absolute") != "absolute":
            fail(f"position_embedding_type='{cfg.position_embedding_type}': only absolute "
                 "position embeddings")
        if getattr(cfg, "is_decoder", False):
            fail("a decoder (is_decoder=True): gpupipe's attention is bidirectional")
    emb = module.embeddings
    eps = _float(emb.LayerNorm.eps)
    lines = [f"embedding {prefix}embeddings", f"layernorm {prefix}embeddings.LayerNorm eps={eps}"]
    for i, layer in enumerate(module.encoder.layer):
        p = f"{prefix}encoder.layer.{i}"
        heads = layer.attention.self.num_attention_heads
        lines += [f"save {p}.a", f"attention {p}.attention heads={heads}", f"add {p}.a",
                  f"layernorm {p}.attention.output.LayerNorm "
                  f"eps={_float(layer.attention.output.LayerNorm.eps)}",
                  f"save {p}.f", f"linear {p}.intermediate.dense", "gelu",
                  f"linear {p}.output.dense", f"add {p}.f",
                  f"layernorm {p}.output.LayerNorm eps={_float(layer.output.LayerNorm.eps)}"]
    if pooling == "pooler":
        if getattr(module, "pooler", None) is None:
            fail("pooling='pooler' but the model has no pooler (add_pooling_layer=False)")
        lines += ["pool cls", f"linear {prefix}pooler.dense", "tanh"]
    else:
        lines.append(f"pool {pooling}")
    return lines + head_lines


def export_encoder(module, path, id_dtype="i32", pooling=None, normalize=False,
                   example_length=8, check=None, gp_infer=None, tol=1e-4,
                   check_lengths=(1, 2, 7, 16, 33), check_backend="host", log=None):
    """Write a transformer encoder (token ids in, one vector per sequence out) to `path` and
    check it; -> ExportResult.

    module    a torch.nn module whose forward takes token ids (N, T) (other arguments keep
              their defaults: forward(ids, mask=None) is traced with mask=None), or a Hugging
              Face BertModel / BertForSequenceClassification
    id_dtype  "i32", "i64" or "u32": what the exported model's items are
    pooling   BertModel only: "cls" (last_hidden_state[:, 0]), "mean" (over each sequence's
              tokens) or "pooler" (pooler_output); a BertForSequenceClassification always
              pools with its pooler and returns the logits. torch.nn modules pool in forward.
    normalize BertModel only: L2-normalize the pooled vector
    The check runs `check_lengths` random sequences, each alone through the module, and all of
    them packed through gp-infer --lengths; the error is max |gp - torch| / max |torch|.
    Raises ExportError / CheckFailed as export() does.
    """
    if torch is None:
        raise ExportError(f"PyTorch is not available ({_TORCH_ERROR}): install python3-torch")
    log = log or (lambda s: print(s, file=sys.stderr))
    if not isinstance(module, nn.Module):
        raise ExportError(f"module is a {type(module).__name__}, not a torch.nn.Module")
    if id_dtype not in ("i32", "i64", "u32"):
        raise ExportError(f"id_dtype '{id_dtype}': i32, i64 or u32")

    def fail(what, todo=None):
        raise ExportError(f"cannot export the encoder: {what}" + (f"\n  what to do: {todo}"
                                                                 if todo else ""))

    was_training = module.training
    module.eval()
    try:
        if _is_bert(module):
            bert, prefix, cls_head = module, "", False
        elif _is_bert(getattr(module, "bert", None)) and hasattr(module, "classifier"):
            bert, prefix, cls_head = module.bert, "bert.", True
        else:
            bert = None
        if bert:
            if cls_head:
                if pooling not in (None, "pooler") or normalize:
                    fail("a BertForSequenceClassification pools with its pooler and returns "
                         "logits: leave pooling and normalize unset")
                head = ["linear classifier"]
                spec_lines = _bert_spec(bert, prefix, "pooler", head, fail)
            else:
                if pooling not in ("cls", "mean", "pooler"):
                    fail("a BertModel returns every token's vector: choose pooling='cls' "
                         "(last_hidden_state[:, 0]), 'mean' or 'pooler' (pooler_output)")
                spec_lines = _bert_spec(bert, prefix, pooling, ["l2norm"] if normalize else [],
                                        fail)
            spec = "\n".join([f"input {id_dtype} *"] + spec_lines) + "\n"
            tensors = {n: tensor_entry(t) for n, t in module.state_dict().items()
                       if t.is_floating_point()}
            vocab = bert.embeddings.word_embeddings.num_embeddings
            pos = getattr(bert.embeddings, "position_embeddings", None)
            max_len = pos.num_embeddings if pos is not None else 512

            def run_module(ids):
                o = module(input_ids=ids)
                if cls_head:
                    return o.logits
                y = (o.pooler_output if pooling == "pooler" else
                     o.last_hidden_state[:, 0] if pooling == "cls" else
                     o.last_hidden_state.mean(1))
                return F.normalize(y, dim=-1) if normalize else y
        else:
            if pooling is not None or normalize:
                fail("pooling and normalize are for BertModel; a torch.nn encoder pools (and "
                     "normalizes) in its forward")
            import inspect
            params = list(inspect.signature(module.forward).parameters.values())
            concrete = {}
            for p in params[1:]:
                if p.default is inspect.Parameter.empty:
                    fail(f"forward takes '{p.name}' besides the token ids, with no default",
                         "give it a default (None): gpupipe runs each sequence unpadded")
                concrete[p.name] = p.default
            # torch.arange(T) / torch.zeros(B, T) take only sizes, which torch.fx does not
            # intercept: record them as graph nodes while tracing.
            factories = {f: getattr(torch, f) for f in ("arange", "zeros")}

            def recorder(fn):
                def call(*a, **k):
                    px = [x for x in list(a) + list(k.values()) if isinstance(x, torch.fx.Proxy)]
                    if px:
                        return px[0].tracer.create_proxy("call_function", fn, a, k)
                    return fn(*a, **k)
                return call
            try:
                for f, fn in factories.items():
                    setattr(torch, f, recorder(fn))
                graph = _EncTracer().trace(module, concrete_args=concrete or None)
            except ExportError:
                raise
            except Exception as exc:
                raise ExportError(f"torch.fx could not trace the encoder: {type(exc).__name__}: "
                                  f"{exc}\n  what to do: the exporter needs a forward without "
                                  "Python control flow on tensor values") from exc
            finally:
                for f, fn in factories.items():
                    setattr(torch, f, fn)
            gm = torch.fx.GraphModule(module, graph)
            embs = [m for m in module.modules() if isinstance(m, nn.Embedding)]
            if not embs:
                fail("no nn.Embedding: an encoder turns token ids into vectors first")
            vocab = min(m.num_embeddings for m in embs)
            max_len = 512
            dev = next(iter(module.parameters()), torch.empty(0)).device
            ex = torch.randint(0, vocab, (2, example_length),
                               generator=torch.Generator().manual_seed(0)).to(dev)
            with torch.no_grad():
                ShapeProp(gm).propagate(ex)
            values, out = _encoder_values(module, gm, log)
            spec = _emit(values, out, f"input {id_dtype} *")
            tensors, seen = {}, set()
            for v in values:
                for name, t in v.tensors:
                    if name not in seen:
                        seen.add(name)
                        tensors[name] = tensor_entry(t, "F32")
            # the position table bounds the lengths the check may use
            for line in spec.splitlines():
                if line.startswith("embedding ") and "position=" in line:
                    pname = line.split("position=")[1].split()[0]
                    max_len = module.get_submodule(pname).num_embeddings
                    vocab = module.get_submodule(line.split()[1]).num_embeddings

            def run_module(ids):
                return module(ids)

        meta = {SPEC_KEY: spec, "format": "pt",
                "gpupipe.exporter": f"tools/gpupipe_export.py, torch {torch.__version__}"}
        nbytes = write_safetensors(path, tensors, meta)
        dev = next(iter(module.parameters()), torch.empty(0)).device
        with torch.no_grad():
            y0 = run_module(torch.zeros(1, 1, dtype=torch.long, device=dev))
        r = ExportResult(path=path, spec=spec, tensors=len(tensors), bytes=nbytes,
                         input=f"input {id_dtype} *", output=f"f32 {y0.shape[-1]} per sequence",
                         tol=tol)
        exe = _check_exe(r, check, gp_infer, log)
        if exe is None:
            return r
        lens = [min(int(n), max_len) for n in check_lengths]
        g = torch.Generator().manual_seed(1234)
        seqs = [torch.randint(0, vocab, (n,), generator=g) for n in lens]
        with torch.no_grad(), cuda_fp32_math(tf32=False):  # the reference in IEEE fp32
            ref = torch.cat([run_module(s.unsqueeze(0).to(dev)).float().cpu() for s in seqs])
        ids = torch.cat(seqs).numpy().astype({"i32": "<i4", "i64": "<i8", "u32": "<u4"}[id_dtype])
        with tempfile.TemporaryDirectory(prefix="gpupipe_export_") as work:
            xp, lp, yp = (os.path.join(work, f) for f in ("ids.npy", "len.npy", "y.npy"))
            np.save(xp, ids)
            np.save(lp, np.asarray(lens, np.int64))
            cmd = [exe, "--model", os.path.abspath(path), "--input", xp, "--lengths", lp,
                   "--output", yp, "--backend", check_backend, "--quiet"]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                raise ExportError(f"the check could not run the file: {' '.join(cmd)} exited "
                                  f"{p.returncode}:\n{p.stderr.strip()}")
            got = np.load(yp).astype(np.float64)
        want = ref.double().numpy().reshape(got.shape)
        r.checked, r.items = True, len(lens)
        r.max_abs_err = float(np.max(np.abs(got - want)))
        r.max_rel_err = r.max_abs_err / max(float(np.max(np.abs(want))), 1e-30)
        r.ok = r.max_rel_err <= tol
        log(r.summary())
        if not r.ok:
            raise CheckFailed(f"the exported file disagrees with the module: {r.summary()}", r)
        return r
    finally:
        module.train(was_training)


# ---- command line -------------------------------------------------------------------------

def load_module(ref, weights=None):
    """'file.py:name' or 'package.module:name' -> an nn.Module (name: a module instance, a
    module class, or a function returning one)."""
    if ":" not in ref:
        raise ExportError(f"MODEL '{ref}': give FILE.py:NAME or package.module:NAME")
    where, name = ref.rsplit(":", 1)
    try:
        if where.endswith(".py") or os.path.sep in where:
            if not os.path.isfile(where):
                raise ExportError(f"MODEL file '{where}' does not exist")
            sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
            spec = importlib.util.spec_from_file_location(
                os.path.splitext(os.path.basename(where))[0], where)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(where)
    except ExportError:
        raise
    except Exception as exc:  # ImportError, the file's own SyntaxError or exception
        raise ExportError(f"MODEL '{ref}': importing '{where}' failed: "
                          f"{type(exc).__name__}: {exc}") from exc
    if not hasattr(mod, name):
        raise ExportError(f"'{where}' has no '{name}'")
    obj = getattr(mod, name)
    if not isinstance(obj, nn.Module):
        try:
            obj = obj()
        except Exception as exc:
            raise ExportError(f"MODEL '{ref}': calling '{name}()' failed: "
                              f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, nn.Module):
        raise ExportError(f"'{ref}' gave a {type(obj).__name__}, not an nn.Module")
    if weights:
        if not os.path.isfile(weights):
            raise ExportError(f"--weights {weights}: no such file")
        try:  # tensors only: a state_dict; unpickling objects would run the file's code
            sd = torch.load(weights, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            raise ExportError(
                f"--weights {weights}: not a state_dict of tensors (a whole pickled module?): "
                f"{str(exc).splitlines()[0]}\n  what to do: save the weights with "
                "torch.save(model.state_dict(), FILE), or load the checkpoint inside the "
                "function MODEL names") from exc
        if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
            sd = sd["state_dict"]
        try:
            obj.load_state_dict(sd)
        except Exception as exc:  # missing or unexpected keys, shapes that differ
            raise ExportError(f"--weights {weights} does not fit '{ref}': "
                              f"{str(exc).strip().splitlines()[0]}\n  what to do: the "
                              "state_dict must come from this model's class") from exc
    return obj


def _floats(s, what):
    try:
        return [float(v) for v in s.split(",")] if s else None
    except ValueError:
        raise ExportError(f"{what} '{s}': comma-separated numbers, e.g. 0.485,0.456,0.406") \
            from None


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="gpupipe_export.py",
        description="Export a PyTorch nn.Module as a gpupipe model (.safetensors with the "
        "layer spec in its metadata) and check it against PyTorch through gp-infer.",
        epilog="docs/MODELS.md has the details, the layer table and an end-to-end example.")
    ap.add_argument("model", help="FILE.py:NAME or package.module:NAME (an nn.Module, a "
                    "module class or a function returning one)")
    ap.add_argument("output", help="the .safetensors file to write")
    ap.add_argument("--input-shape",
                    help="one item as the module takes it, without the batch: 3,224,224 or 784 "
                    "(required unless --encoder)")
    enc = ap.add_argument_group("transformer encoders (token ids in, one vector per sequence)")
    enc.add_argument("--encoder", action="store_true",
                     help="the module takes token ids (N, T): a torch.nn encoder or a Hugging "
                     "Face BertModel / BertForSequenceClassification")
    enc.add_argument("--id-dtype", default="i32", choices=("i32", "i64", "u32"),
                     help="the exported model's token ids (default i32)")
    enc.add_argument("--pooling", choices=("cls", "mean", "pooler"),
                     help="BertModel: the first token, the mean over the tokens, or the pooler")
    enc.add_argument("--normalize", action="store_true", help="BertModel: L2-normalize")
    ap.add_argument("--input-dtype", default="f32", choices=("f32", "u8"),
                    help="what one item of the exported model is (u8: raw pixels 0..255)")
    ap.add_argument("--layout", default="chw", choices=("chw", "hwc"),
                    help="image items as C x H x W (default) or H x W x C")
    ap.add_argument("--mean", help="per-channel mean, normalized on the device: 0.485,0.456,0.406")
    ap.add_argument("--std", help="per-channel std: 0.229,0.224,0.225")
    ap.add_argument("--head", help="append softmax, argmax or topk=K to the model's output")
    ap.add_argument("--weights", help="a state_dict saved with torch.save, loaded into the model")
    ap.add_argument("--gp-infer", help="gp-infer for the check (default: build/bench/gp-infer "
                    "of this repository, else PATH)")
    chk = ap.add_mutually_exclusive_group()
    chk.add_argument("--check", dest="check", action="store_true", default=None,
                     help="fail when the check cannot run (default: skip it with a message)")
    chk.add_argument("--no-check", dest="check", action="store_false")
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="relative error limit of the check (default 1e-4, fp32 on the host)")
    ap.add_argument("--check-items", type=int, default=8, help="random items checked")
    ap.add_argument("--check-backend", default="host", choices=("host", "cuda", "auto"),
                    help="the backend gp-infer runs the check on (default host, fp32)")
    ap.add_argument("--print-spec", action="store_true", help="print the spec written")
    a = ap.parse_args(argv)
    try:
        if torch is None:
            raise ExportError(f"PyTorch is not available ({_TORCH_ERROR}): install "
                              "python3-torch (Debian) or torch (pip) for this interpreter")
        if a.encoder:
            module = load_module(a.model, a.weights)
            r = export_encoder(module, a.output, id_dtype=a.id_dtype, pooling=a.pooling,
                               normalize=a.normalize, check=a.check, gp_infer=a.gp_infer,
                               tol=a.tol, check_backend=a.check_backend)
            if a.print_spec:
                print(r.spec, end="")
            return 0
        if a.input_shape is None:
            raise ExportError("--input-shape is required (one item as the module takes it, "
                              "e.g. 3,224,224), or --encoder for a module taking token ids")
        try:
            shape = [int(v) for v in a.input_shape.split(",")]
        except ValueError:
            raise ExportError(f"--input-shape '{a.input_shape}': comma-separated integers, "
                              "e.g. 3,224,224") from None
        if not shape or any(v <= 0 for v in shape):
            raise ExportError(f"--input-shape '{a.input_shape}': every dimension must be "
                              "positive, e.g. 3,224,224")
        module = load_module(a.model, a.weights)
        ex = torch.randn([1] + shape, generator=torch.Generator().manual_seed(0))
        r = export(module, ex, a.output, input_dtype=a.input_dtype, input_layout=a.layout,
                   mean=_floats(a.mean, "--mean"), std=_floats(a.std, "--std"), head=a.head,
                   check=a.check,
                   gp_infer=a.gp_infer, tol=a.tol, check_items=a.check_items,
                   check_backend=a.check_backend)
        if a.print_spec:
            print(r.spec, end="")
        return 0
    except CheckFailed as exc:
        print(f"gpupipe_export: {exc}", file=sys.stderr)
        return 1
    except ExportError as exc:
        print(f"gpupipe_export: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the output's directory, a file that cannot be read or written
        print(f"gpupipe_export: not exported: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
