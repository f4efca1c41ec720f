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
from types import SimpleNamespace

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as exc:  # pragma: no cover - depends on the machine
    print(f"SKIP: PyTorch/NumPy not available ({exc}); install python3-torch python3-numpy")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from gpupipe_export import ExportError, export_encoder, tensor_entry, write_safetensors  # noqa: E402,E501

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
        randomize_layernorms(self)

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


class _BertSelfAttention(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.num_attention_heads = heads
        self.query, self.key, self.value = nn.Linear(c, c), nn.Linear(c, c), nn.Linear(c, c)

    def forward(self, x, pad=None):
        b, t, c = x.shape
        h, d = self.num_attention_heads, c // self.num_attention_heads
        q, k, v = (f(x).view(b, t, h, d).transpose(1, 2) for f in (self.query, self.key,
                                                                   self.value))
        s = q @ k.transpose(-1, -2) / math.sqrt(d)
        if pad is not None:
            s = s.masked_fill(pad[:, None, None, :], float("-inf"))
        return (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)


class _DenseLN(nn.Module):
    def __init__(self, i, c, eps):
        super().__init__()
        self.dense, self.LayerNorm = nn.Linear(i, c), nn.LayerNorm(c, eps=eps)

    def forward(self, h, x):
        return self.LayerNorm(self.dense(h) + x)


class _BertAttention(nn.Module):
    def __init__(self, c, heads, eps):
        super().__init__()
        self.self, self.output = _BertSelfAttention(c, heads), _DenseLN(c, c, eps)

    def forward(self, x, pad=None):
        return self.output(self.self(x, pad), x)


class _BertLayer(nn.Module):
    def __init__(self, c, heads, ff, eps):
        super().__init__()
        self.attention = _BertAttention(c, heads, eps)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(c, ff)
        self.output = _DenseLN(ff, c, eps)

    def forward(self, x, pad=None):
        x = self.attention(x, pad)
        return self.output(F.gelu(self.intermediate.dense(x)), x)


class MiniBert(nn.Module):
    """Hugging Face BertModel's structure and state_dict names, in plain torch.nn."""

    def __init__(self, vocab=1000, c=64, heads=4, ff=256, layers=2, positions=512, eps=1e-12,
                 seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.embeddings = nn.Module()
        e = self.embeddings
        e.word_embeddings, e.position_embeddings = nn.Embedding(vocab, c), nn.Embedding(
            positions, c)
        e.token_type_embeddings, e.LayerNorm = nn.Embedding(2, c), nn.LayerNorm(c, eps=eps)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(_BertLayer(c, heads, ff, eps) for _ in range(layers))
        self.pooler = nn.Module()
        self.pooler.dense = nn.Linear(c, c)
        randomize_layernorms(self)

    def forward(self, input_ids, attention_mask=None):
        e = self.embeddings
        t = input_ids.shape[1]
        x = e.word_embeddings(input_ids) + e.token_type_embeddings(torch.zeros_like(input_ids))
        x = e.LayerNorm(x + e.position_embeddings(torch.arange(t).unsqueeze(0)))
        pad = None if attention_mask is None else attention_mask == 0
        for layer in self.encoder.layer:
            x = layer(x, pad)
        return SimpleNamespace(last_hidden_state=x,
                               pooler_output=torch.tanh(self.pooler.dense(x[:, 0])))


class MiniBertForSequenceClassification(nn.Module):
    def __init__(self, classes=3, seed=0):
        super().__init__()
        self.bert = MiniBert(seed=seed)
        self.classifier = nn.Linear(64, classes)

    def forward(self, input_ids, attention_mask=None):
        return SimpleNamespace(logits=self.classifier(self.bert(input_ids,
                                                                attention_mask).pooler_output))


def randomize_layernorms(module):
    with torch.no_grad():  # LayerNorms that are not the identity
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)


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


def bert_spec(layers, heads, tail):
    lines = ["input i32 *", "embedding embeddings", "layernorm embeddings.LayerNorm eps=1e-12"]
    for i in range(layers):
        p = f"encoder.layer.{i}"
        lines += [f"save a{i}", f"attention {p}.attention heads={heads}", f"add a{i}",
                  f"layernorm {p}.attention.output.LayerNorm eps=1e-12", f"save f{i}",
                  f"linear {p}.intermediate.dense", "gelu", f"linear {p}.output.dense",
                  f"add f{i}", f"layernorm {p}.output.LayerNorm eps=1e-12"]
    return "\n".join(lines + tail) + "\n"


def bert_cases(rep, gp_infer, work, cuda, model, label, layers, heads, vocab):
    """BertModel naming: the CLS token's last hidden state and the pooler's output."""
    for what, tail in (("last_hidden_state[:, 0]", ["pool cls"]),
                       ("pooler_output", ["pool cls", "linear pooler.dense", "tanh"])):
        name = f"{label} {what}"
        path = os.path.join(work, re.sub(r"[^A-Za-z0-9]+", "_", name) + ".safetensors")
        save(model, path, bert_spec(layers, heads, tail))

        def fn(ids, pad, what=what):
            mask = None if pad is None else (~pad).long()
            out = model(input_ids=ids, attention_mask=mask)
            return out.pooler_output if what == "pooler_output" else out.last_hidden_state[:, 0]

        check_model(rep, gp_infer, work, name, fn, path, vocab, "i32", cuda)


def transformers_bert(seed=5):
    """A transformers.BertModel with random weights, or (None, why)."""
    try:
        import transformers
    except ImportError as exc:
        return None, f"transformers is not importable ({exc})"
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=512,
                                  max_position_embeddings=512, type_vocab_size=2,
                                  hidden_act="gelu", layer_norm_eps=1e-12)
    torch.manual_seed(seed)
    model = transformers.BertModel(cfg).eval()
    randomize_layernorms(model)
    return model, ""


class TorchTransformer(nn.Module):
    """nn.TransformerEncoder (post-LN or norm_first) over nn.Embedding words and positions."""

    def __init__(self, norm_first, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb, self.pos = nn.Embedding(500, 64), nn.Embedding(128, 64)
        layer = nn.TransformerEncoderLayer(64, 4, 128, activation="gelu", batch_first=True,
                                           norm_first=norm_first)
        self.enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(64) if norm_first else None)
        randomize_layernorms(self)

    def forward(self, ids, mask=None):
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        x = self.enc(x, src_key_padding_mask=mask)
        return F.normalize(x.mean(dim=1), dim=-1)


def cli_model():
    """For the exporter's command line test (FILE.py:cli_model)."""
    return Encoder(kind="pre", pooling="cls", normalize=True, seed=21)


class _Bad(nn.Module):
    def __init__(self, what):
        super().__init__()
        self.what = what
        self.emb, self.pos = nn.Embedding(100, 32), nn.Embedding(64, 32)
        self.attn = nn.MultiheadAttention(32, 4, batch_first=what != "batch_first")
        self.act = nn.GELU(approximate="tanh") if what == "tanh" else nn.GELU()

    def forward(self, ids, mask=None):
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))
        if self.what == "mask":
            mask = ids == 0
        x = x + self.attn(x, x, x, key_padding_mask=mask)[0]
        x = self.act(x)
        if self.what == "cumsum":
            x = torch.cumsum(x, 1)
        return x if self.what == "tokens" else x[:, 0]


class _NoDefault(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)

    def forward(self, ids, mask):
        return self.emb(ids)[:, 0]


def exporter_cases(rep, gp_infer, work):
    """tools/gpupipe_export.py's export_encoder: torch.nn encoders and BertModel-shaped ones,
    exported from the module alone (no spec written here) and checked by the exporter itself
    (sequences of 1, 2, 7, 16, 33 tokens packed through gp-infer vs each alone in PyTorch)."""
    tol = TOL["host"]
    path = os.path.join(work, "exported.safetensors")
    quiet = dict(gp_infer=gp_infer, check=True, tol=tol, log=lambda s: None)
    models = [(f"export: {k['kind']}-LN, {k['pooling']}" + (", l2norm" if k.get("normalize")
                                                           else "") +
               (", pooler head" if k.get("classes") else ""), Encoder(seed=30 + i, **k), {})
              for i, k in enumerate([dict(kind="post", pooling="cls", normalize=True),
                                     dict(kind="post", pooling="mean", classes=3),
                                     dict(kind="pre", pooling="mean", normalize=True)])]
    models += [("export: nn.TransformerEncoder post-LN, mean, l2norm",
                TorchTransformer(False, seed=40), dict(id_dtype="i64")),
               ("export: nn.TransformerEncoder norm_first, mean, l2norm",
                TorchTransformer(True, seed=41), dict(id_dtype="u32")),
               ("export: BertModel clone, pooling=cls", MiniBert(seed=42), dict(pooling="cls")),
               ("export: BertModel clone, pooling=mean, normalize", MiniBert(seed=43),
                dict(pooling="mean", normalize=True)),
               ("export: BertModel clone, pooling=pooler", MiniBert(seed=44),
                dict(pooling="pooler")),
               ("export: BertForSequenceClassification clone",
                MiniBertForSequenceClassification(seed=45), {})]
    hf, why = transformers_bert(seed=46)
    if hf is not None:
        models.append(("export: transformers.BertModel, mean, normalize", hf,
                       dict(pooling="mean", normalize=True)))
    for name, model, kw in models:
        r = export_encoder(model.eval(), path, **quiet, **kw)
        rep.add(name, "exporter's own check", "host", r.max_rel_err, tol)
    # the command line
    here = os.path.abspath(__file__)
    tool = os.path.join(os.path.dirname(here), "..", "..", "tools", "gpupipe_export.py")
    cmd = [sys.executable, tool, f"{here}:cli_model", path, "--encoder", "--id-dtype", "u32",
           "--gp-infer", gp_infer, "--check", "--tol", str(tol)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"max relative error ([0-9.e+-]+)", p.stderr)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    rep.add("export: command line --encoder", "exporter's own check", "host", float(m.group(1)),
            tol)
    # refusals, each with its reason
    refusals = [(_Bad("mask"), {}, "attention with a mask"),
                (_Bad("batch_first"), {}, "batch_first=False"),
                (_Bad("tanh"), {}, "erf"),
                (_Bad("cumsum"), {}, "no gpupipe encoder layer for torch.cumsum"),
                (_Bad("tokens"), {}, "pool each sequence"),
                (_NoDefault(), {}, "with no default"),
                (MiniBert(), {}, "choose pooling='cls'"),
                (Encoder(kind="post", pooling="cls"), dict(pooling="mean"),
                 "pooling and normalize are for BertModel")]
    for model, kw, want in refusals:
        try:
            export_encoder(model.eval(), path, **quiet, **kw)
            msg = "exported"
        except ExportError as exc:
            msg = str(exc)
        ok = want in msg
        rep.failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} export refused: {want!r}" +
              ("" if ok else f": got {msg}"), flush=True)


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
    bert_cases(rep, gp_infer, work, cuda, MiniBert(seed=3).eval(),
               "torch.nn BertModel clone (HF names)", 2, 4, 1000)
    hf, why = transformers_bert()
    if hf is None:
        print(f"skip transformers.BertModel: {why}")
    else:
        bert_cases(rep, gp_infer, work, cuda, hf, "transformers.BertModel", 2, 4, 1000)
    exporter_cases(rep, gp_infer, work)
    if cuda["usable"] is False:
        print(f"CUDA not run: {cuda['why']}")
    print(f"{len(rep.rows) - rep.failed} of {len(rep.rows)} checks passed")
    # GPT_REQUIRE_DEVICE (bench/gpu-run.sh on the GPU machine): CUDA not run is a failure.
    if not cuda["usable"] and os.environ.get("GPT_REQUIRE_DEVICE", "0") not in ("", "0"):
        print("GPT_REQUIRE_DEVICE is set: CUDA not run fails this test")
        return 1
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
