#!/usr/bin/python3
"""gpupipe's transformer encoder layers vs PyTorch, on BERT-style encoders with random weights.

usage: encoder.py GP_INFER WORKDIR [--keep]

Models written with torch.nn (nn.Embedding for words, positions and token types, nn.LayerNorm,
GELU in its erf form): post-LN (BERT) layers with explicit Q/K/V nn.Linear attention, pre-LN
layers with nn.MultiheadAttention; cls and mean pooling, a BERT pooler + classifier head, and
l2norm. Each is written as safetensors (its state_dict names) with a hand-written spec (the
runtime is what is tested here; the exporter has its own test), and run through gp-infer with
the sequences packed, all of them in one batch (--batch 8 --max-delay-us, checked from
gp-infer's "mean batch"). Sequence lengths 1, 2, 7, 63, 64, 65, 511, 512 in that batch.

  (a) each sequence run alone in PyTorch (batch of one, no mask) == gpupipe, packed;
  (b) the padded PyTorch batch with a key padding mask (pooling over the real tokens only)
      == gpupipe, packed.

relative error = max |gp - torch| / max |torch| over the (items, features) output.
Host fp32 <= 1e-5. On CUDA (when gp-infer can use a device; exit 4 otherwise): fp32 <= 1e-4,
tf32 <= 5e-3, fp16 / bf16 <= 2e-2. Where `transformers` is importable, the same against
transformers.BertModel built from a BertConfig with random weights (last_hidden_state[:, 0] and
pooler_output); skipped with the reason printed otherwise.

Exit status: 0 pass, 1 fail, 77 skipped (torch or numpy missing; the reason is printed).
"""
import math
import os
import re
import subprocess
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as exc:  # pragma: no cover - depends on the machine
    print(f"SKIP: PyTorch/NumPy not available ({exc}); install python3-torch python3-numpy")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from gpupipe_export import tensor_entry, write_safetensors  # noqa: E402

LENGTHS = [1, 2, 7, 63, 64, 65, 511, 512]
TOL = {"host": 1e-5, "fp32": 1e-4, "tf32": 5e-3, "fp16": 2e-2, "bf16": 2e-2}
NP_IDS = {"i32": np.int32, "i64": np.int64, "u32": np.uint32}


# ---- models (torch.nn) ----------------------------------------------------------------------

class SelfAttention(nn.Module):
    """Multi-head self-attention with explicit Q/K/V nn.Linear projections."""

    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.q_lin, self.k_lin, self.v_lin = nn.Linear(c, c), nn.Linear(c, c), nn.Linear(c, c)
        self.o = nn.Linear(c, c)

    def forward(self, x, pad=None):
        b, t, c = x.shape
        h, d = self.heads, c // self.heads
        q = self.q_lin(x).view(b, t, h, d).transpose(1, 2)
        k = self.k_lin(x).view(b, t, h, d).transpose(1, 2)
        v = self.v_lin(x).view(b, t, h, d).transpose(1, 2)
        s = q @ k.transpose(-1, -2) / math.sqrt(d)
        if pad is not None:  # key padding mask: True = padding
            s = s.masked_fill(pad[:, None, None, :], float("-inf"))
        o = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        return self.o(o)


class PostLNLayer(nn.Module):
    """A BERT layer: x = LN(x + attn(x)); x = LN(x + ff2(gelu(ff1(x))))."""

    def __init__(self, c, heads, ff, eps):
        super().__init__()
        self.attn = SelfAttention(c, heads)
        self.ln1, self.ln2 = nn.LayerNorm(c, eps=eps), nn.LayerNorm(c, eps=eps)
        self.ff1, self.ff2 = nn.Linear(c, ff), nn.Linear(ff, c)
        self.act = nn.GELU()

    def forward(self, x, pad=None):
        x = self.ln1(x + self.attn(x, pad))
        return self.ln2(x + self.ff2(self.act(self.ff1(x))))

    def spec(self, name, heads, eps, i):
        return [f"save a{i}",
                f"attention {name}.attn heads={heads} q=q_lin k=k_lin v=v_lin out=o",
                f"add a{i}", f"layernorm {name}.ln1 eps={eps}", f"save f{i}",
                f"linear {name}.ff1", "gelu", f"linear {name}.ff2", f"add f{i}",
                f"layernorm {name}.ln2 eps={eps}"]


class PreLNLayer(nn.Module):
    """A pre-LN layer with nn.MultiheadAttention: x = x + attn(LN(x)); x = x + ff(LN(x))."""

    def __init__(self, c, heads, ff, eps):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(c, eps=eps), nn.LayerNorm(c, eps=eps)
        self.attn = nn.MultiheadAttention(c, heads, batch_first=True)
        self.linear1, self.linear2 = nn.Linear(c, ff), nn.Linear(ff, c)

    def forward(self, x, pad=None):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, key_padding_mask=pad, need_weights=False)[0]
        return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))

    def spec(self, name, heads, eps, i):
        return [f"save a{i}", f"layernorm {name}.norm1 eps={eps}",
                f"MultiheadAttention {name}.attn num_heads={heads}", f"add a{i}", f"save f{i}",
                f"LayerNorm {name}.norm2 eps={eps}", f"Linear {name}.linear1", "GELU",
                f"Linear {name}.linear2", f"add f{i}"]


class Encoder(nn.Module):
    def __init__(self, kind, pooling, normalize=False, classes=0, vocab=1000, c=64, heads=4,
                 ff=256, layers=2, positions=512, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.kind, self.pooling, self.normalize, self.heads = kind, pooling, normalize, heads
        self.eps = 1e-12 if kind == "post" else 1e-5
        self.tok, self.pos, self.typ = (nn.Embedding(vocab, c), nn.Embedding(positions, c),
                                        nn.Embedding(2, c))
        layer = PostLNLayer if kind == "post" else PreLNLayer
        self.layers = nn.ModuleList(layer(c, heads, ff, self.eps) for _ in range(layers))
        self.norm = nn.LayerNorm(c, eps=self.eps)  # post: after the embeddings; pre: at the end
        self.classes = classes
        if classes:
            self.pool_dense, self.classifier = nn.Linear(c, c), nn.Linear(c, classes)
        with torch.no_grad():  # LayerNorms that are not the identity
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)

    def forward(self, ids, pad=None):
        b, t = ids.shape
        x = self.tok(ids) + self.typ(torch.zeros_like(ids))
        x = x + self.pos(torch.arange(t).unsqueeze(0).expand(b, t))
        if self.kind == "post":
            x = self.norm(x)
        for layer in self.layers:
            x = layer(x, pad)
        if self.kind == "pre":
            x = self.norm(x)
        if self.pooling == "cls":
            y = x[:, 0]
        elif pad is None:
            y = x.mean(1)
        else:
            keep = (~pad).unsqueeze(-1).to(x.dtype)
            y = (x * keep).sum(1) / keep.sum(1)
        if self.classes:
            y = self.classifier(torch.tanh(self.pool_dense(y)))
        if self.normalize:
            y = F.normalize(y, dim=-1)
        return y

    def spec(self, id_dtype):
        lines = [f"input {id_dtype} *", "embedding tok position=pos token_type=typ"]
        if self.kind == "post":
            lines.append(f"layernorm norm eps={self.eps}")
        for i, layer in enumerate(self.layers):
            lines += layer.spec(f"layers.{i}", self.heads, self.eps, i)
        if self.kind == "pre":
            lines.append(f"layernorm norm eps={self.eps}")
        lines.append(f"pool {self.pooling}")
        if self.classes:
            lines += ["linear pool_dense", "tanh", "linear classifier"]
        if self.normalize:
            lines.append("l2norm")
        return "\n".join(lines) + "\n"


# ---- running -------------------------------------------------------------------------------

def save(module, path, spec):
    tensors = {n: tensor_entry(t) for n, t in module.state_dict().items() if t.is_floating_point()}
    write_safetensors(path, tensors, {"gpupipe.spec": spec, "format": "pt"})


def run_gp(gp_infer, path, ids, lengths, work, tag, backend="host", precision="fp32"):
    """-> (outputs, None) or (None, why) when the backend is not usable (exit 4)."""
    xp, lp, yp = (os.path.join(work, f"{tag}.{s}.npy") for s in ("ids", "len", "out"))
    np.save(xp, ids)
    np.save(lp, np.asarray(lengths, np.int64))
    cmd = [gp_infer, "--model", path, "--input", xp, "--lengths", lp, "--output", yp,
           "--backend", backend, "--precision", precision, "--batch", str(len(lengths)),
           "--max-delay-us", "10000000", "--producers", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode == 4:
        return None, p.stderr.strip()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    m = re.search(r"mean batch ([0-9.]+)", p.stderr)
    if not m or float(m.group(1)) != float(len(lengths)):
        raise RuntimeError(f"the {len(lengths)} items did not run as one batch: {p.stderr}")
    return np.load(yp), None


def rel_err(a, b):
    a = np.asarray(a, np.float64).reshape(len(a), -1)
    b = np.asarray(b, np.float64).reshape(len(b), -1)
    if a.shape != b.shape:
        raise RuntimeError(f"shapes differ: gpupipe {a.shape}, torch {b.shape}")
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))


def make_ids(lengths, vocab, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(0, vocab, (n,), generator=g) for n in lengths]
    return seqs, torch.cat(seqs).numpy().astype(NP_IDS[dtype])


def torch_alone(fn, seqs):
    with torch.no_grad():
        return torch.cat([fn(s.unsqueeze(0), None) for s in seqs]).double().numpy()


def torch_padded(fn, seqs):
    t = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), t, dtype=torch.long)
    pad = torch.ones(len(seqs), t, dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
        pad[i, :len(s)] = False
    with torch.no_grad():
        return fn(ids, pad).double().numpy()


class Report:
    def __init__(self):
        self.rows, self.failed = [], 0

    def add(self, case, check, backend, err, tol):
        ok = err <= tol
        self.failed += not ok
        self.rows.append((case, check, backend, err, tol, ok))
        print(f"{'ok  ' if ok else 'FAIL'} {case:<44} {check:<28} {backend:<6} rel err "
              f"{err:.2e} (limit {tol:g})", flush=True)


def check_model(rep, gp_infer, work, name, fn, path, vocab, id_dtype, cuda):
    seqs, ids = make_ids(LENGTHS, vocab, id_dtype, seed=len(name))
    ref_a, ref_b = torch_alone(fn, seqs), torch_padded(fn, seqs)
    tag = re.sub(r"[^A-Za-z0-9]+", "_", name)
    got, _ = run_gp(gp_infer, path, ids, LENGTHS, work, tag)
    rep.add(name, "(a) each sequence alone", "host", rel_err(got, ref_a), TOL["host"])
    rep.add(name, "(b) padded + key mask", "host", rel_err(got, ref_b), TOL["host"])
    if cuda["usable"] is False:
        return
    for prec in ("fp32", "tf32", "fp16", "bf16"):
        got, why = run_gp(gp_infer, path, ids, LENGTHS, work, f"{tag}.{prec}", "cuda", prec)
        if got is None:
            cuda["usable"], cuda["why"] = False, why
            return
        cuda["usable"] = True
        rep.add(name, "(a) each sequence alone", prec, rel_err(got, ref_a), TOL[prec])
        rep.add(name, "(b) padded + key mask", prec, rel_err(got, ref_b), TOL[prec])


def hf_cases(rep, gp_infer, work, cuda):
    try:
        import transformers
    except ImportError as exc:
        print(f"skip transformers.BertModel: transformers is not importable ({exc})")
        return
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=512,
                                  max_position_embeddings=512, type_vocab_size=2,
                                  hidden_act="gelu", layer_norm_eps=1e-12)
    torch.manual_seed(5)
    model = transformers.BertModel(cfg).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    layers = ["input i32 *", "embedding embeddings",
              "layernorm embeddings.LayerNorm eps=1e-12"]
    for i in range(cfg.num_hidden_layers):
        p = f"encoder.layer.{i}"
        layers += [f"save a{i}", f"attention {p}.attention heads=4", f"add a{i}",
                   f"layernorm {p}.attention.output.LayerNorm eps=1e-12", f"save f{i}",
                   f"linear {p}.intermediate.dense", "gelu", f"linear {p}.output.dense",
                   f"add f{i}", f"layernorm {p}.output.LayerNorm eps=1e-12"]
    for what, tail in (("last_hidden_state[:, 0]", ["pool cls"]),
                       ("pooler_output", ["pool cls", "linear pooler.dense", "tanh"])):
        name = f"transformers.BertModel {what}"
        path = os.path.join(work, f"hf_{len(tail)}.safetensors")
        save(model, path, "\n".join(layers + tail) + "\n")

        def fn(ids, pad, what=what):
            mask = None if pad is None else (~pad).long()
            out = model(input_ids=ids, attention_mask=mask)
            return out.pooler_output if what == "pooler_output" else out.last_hidden_state[:, 0]

        check_model(rep, gp_infer, work, name, fn, path, cfg.vocab_size, "i32", cuda)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    gp_infer, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    rep = Report()
    cuda = {"usable": None, "why": ""}
    cases = [
        ("post-LN Q/K/V Linear, cls, l2norm", dict(kind="post", pooling="cls", normalize=True),
         "i32"),
        ("post-LN Q/K/V Linear, mean", dict(kind="post", pooling="mean"), "i64"),
        ("post-LN Q/K/V Linear, cls, pooler, 3 logits",
         dict(kind="post", pooling="cls", classes=3), "i32"),
        ("pre-LN MultiheadAttention, mean, l2norm",
         dict(kind="pre", pooling="mean", normalize=True), "u32"),
        ("pre-LN MultiheadAttention, cls", dict(kind="pre", pooling="cls"), "i64"),
    ]
    for i, (name, kw, id_dtype) in enumerate(cases):
        model = Encoder(seed=10 + i, **kw).eval()
        path = os.path.join(work, f"enc{i}.safetensors")
        save(model, path, model.spec(id_dtype))
        check_model(rep, gp_infer, work, name, model, path, 1000, id_dtype, cuda)
    hf_cases(rep, gp_infer, work, cuda)
    if cuda["usable"] is False:
        print(f"CUDA not run: {cuda['why']}")
    print(f"{len(rep.rows) - rep.failed} of {len(rep.rows)} checks passed")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
