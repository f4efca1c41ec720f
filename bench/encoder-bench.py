#!/usr/bin/python3
"""The demo encoder served packed by gpupipe against PyTorch with padded batches, on the same
weights and the same requests.

usage: encoder-bench.py GP_INFER [--items N] [--batch B] [--threads T] [--reps R]
                        [--mu M] [--sigma S] [--work DIR] [--skip-torch]

Requests: N token-id sequences with lognormal lengths (median e^M = 48 tokens, sigma 0.8),
clipped to [8, 512]: most are short, a few are long, as text traffic is. Model: the built-in
demo "encoder" (BertModel naming, 4 post-LN layers, hidden 256, 4 heads, FF 1024, vocabulary
30522; mean pooling + l2norm), its weights written by `gp-infer --demo encoder --save-demo`.

  gpupipe:  gp-infer --demo encoder --lengths (packed, no padding), max_batch B, --inflight T
            (the host backend computes each in-flight batch on its own thread), 2 producers;
            items/s as gp-infer reports it (first submit to last callback), median of R runs;
  PyTorch:  the same weights in torch.nn, torch.inference_mode, eval, T threads
            (torch.set_num_threads), batches of B requests padded to their longest, with a key
            padding mask, mean over the real tokens, F.normalize:
              eager, arrival order   BERT written out (matmul attention), batches as the
                                     requests come;
              eager, sorted          the same, requests sorted by length first (length
                                     bucketing: least padding; a server cannot always wait to
                                     sort);
              TransformerEncoder     nn.TransformerEncoder (post-LN, gelu: BERT's layer) with
                                     nested tensors (enable_nested_tensor, PyTorch's own way to
                                     skip padding in inference), arrival order.
            One run each (they are slow here), after one warm-up batch.
Every PyTorch variant's embeddings are compared with gpupipe's (max |diff| / max |ref|).
tokens/s counts real tokens only. Prints a Markdown table for bench/RESULTS.md.
"""
import argparse
import importlib.util
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import gpupipe_export as gx  # noqa: E402  (read_safetensors)

LAYERS, C, HEADS, FF, EPS = 4, 256, 4, 1024, 1e-12


def blas_info():
    spec = importlib.util.spec_from_file_location("model_bench", os.path.join(HERE,
                                                                              "model-bench.py"))
    mb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mb)
    return mb.blas_info()


class EagerBert(nn.Module):
    """The demo encoder as BERT is usually written (HF BertModel's eager path)."""

    def __init__(self, w):
        super().__init__()
        self.w = {k: torch.from_numpy(v) for k, v in w.items()}

    def lin(self, x, name):
        return F.linear(x, self.w[name + ".weight"], self.w[name + ".bias"])

    def ln(self, x, name):
        return F.layer_norm(x, (C,), self.w[name + ".weight"], self.w[name + ".bias"], EPS)

    def forward(self, ids, pad):
        b, t = ids.shape
        w = self.w
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.token_type_embeddings.weight"][0]
             + w["embeddings.position_embeddings.weight"][:t])
        x = self.ln(x, "embeddings.LayerNorm")
        d = C // HEADS
        bias = torch.zeros(b, 1, 1, t).masked_fill(pad[:, None, None, :], float("-inf"))
        for i in range(LAYERS):
            p = f"encoder.layer.{i}"
            q, k, v = (self.lin(x, f"{p}.attention.self.{n}").view(b, t, HEADS, d).transpose(1, 2)
                       for n in ("query", "key", "value"))
            s = q @ k.transpose(-1, -2) / math.sqrt(d) + bias
            o = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, C)
            x = self.ln(x + self.lin(o, f"{p}.attention.output.dense"),
                        f"{p}.attention.output.LayerNorm")
            h = F.gelu(self.lin(x, f"{p}.intermediate.dense"))
            x = self.ln(x + self.lin(h, f"{p}.output.dense"), f"{p}.output.LayerNorm")
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        return F.normalize((x * keep).sum(1) / keep.sum(1), dim=-1)


class NestedBert(nn.Module):
    """The same weights in nn.TransformerEncoder: padding skipped with nested tensors."""

    def __init__(self, w):
        super().__init__()
        self.w = {k: torch.from_numpy(v) for k, v in w.items()}
        layer = nn.TransformerEncoderLayer(C, HEADS, FF, dropout=0.0, activation="gelu",
                                           layer_norm_eps=EPS, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=True)
        with torch.no_grad():
            for i, L in enumerate(self.enc.layers):
                p = f"encoder.layer.{i}"
                sa = L.self_attn
                sa.in_proj_weight.copy_(torch.cat([self.w[f"{p}.attention.self.{n}.weight"]
                                                   for n in ("query", "key", "value")]))
                sa.in_proj_bias.copy_(torch.cat([self.w[f"{p}.attention.self.{n}.bias"]
                                                 for n in ("query", "key", "value")]))
                for dst, src in ((sa.out_proj, "attention.output.dense"),
                                 (L.linear1, "intermediate.dense"), (L.linear2, "output.dense"),
                                 (L.norm1, "attention.output.LayerNorm"),
                                 (L.norm2, "output.LayerNorm")):
                    dst.weight.copy_(self.w[f"{p}.{src}.weight"])
                    dst.bias.copy_(self.w[f"{p}.{src}.bias"])

    def forward(self, ids, pad):
        t = ids.shape[1]
        w = self.w
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.token_type_embeddings.weight"][0]
             + w["embeddings.position_embeddings.weight"][:t])
        x = F.layer_norm(x, (C,), w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"],
                         EPS)
        x = self.enc(x, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        return F.normalize((x * keep).sum(1) / keep.sum(1), dim=-1)


def run_torch(model, seqs, order, batch):
    """-> (seconds, embeddings in request order)."""
    out = [None] * len(seqs)

    def one(idx):
        t = max(len(seqs[i]) for i in idx)
        ids = torch.zeros(len(idx), t, dtype=torch.long)
        pad = torch.ones(len(idx), t, dtype=torch.bool)
        for r, i in enumerate(idx):
            ids[r, :len(seqs[i])] = torch.from_numpy(seqs[i].astype(np.int64))
            pad[r, :len(seqs[i])] = False
        y = model(ids, pad)
        for r, i in enumerate(idx):
            out[i] = y[r].numpy()

    with torch.inference_mode():
        one(order[:batch])  # warm-up
        t0 = time.perf_counter()
        for s in range(0, len(order), batch):
            one(order[s:s + batch])
        secs = time.perf_counter() - t0
    return secs, np.stack(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gp_infer")
    ap.add_argument("--items", type=int, default=600)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mu", type=float, default=math.log(48))
    ap.add_argument("--sigma", type=float, default=0.8)
    ap.add_argument("--work")
    ap.add_argument("--skip-torch", action="store_true")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="encoder_bench_")
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(a.threads)

    rng = np.random.default_rng(7)
    lens = np.clip(np.rint(rng.lognormal(a.mu, a.sigma, a.items)), 8, 512).astype(np.int64)
    seqs = []
    for n in lens:
        s = rng.integers(1000, 30522, n).astype(np.int32)
        s[0], s[-1] = 101, 102
        seqs.append(s)
    ids_p, len_p, out_p = (os.path.join(work, f) for f in ("ids.npy", "len.npy", "emb.npy"))
    np.save(ids_p, np.concatenate(seqs))
    np.save(len_p, lens)
    tokens = int(lens.sum())
    pct = np.percentile(lens, [50, 90, 99])
    print(f"# {a.items} requests, {tokens} tokens: length median {pct[0]:.0f}, p90 {pct[1]:.0f}, "
          f"p99 {pct[2]:.0f}, max {lens.max()} (lognormal mu={a.mu:.3f} sigma={a.sigma}, "
          f"clipped to [8, 512]); batch {a.batch}; {a.threads} threads")

    rates = []
    for _ in range(a.reps):
        p = subprocess.run([a.gp_infer, "--demo", "encoder", "--input", ids_p, "--lengths", len_p,
                            "--output", out_p, "--backend", "host", "--batch", str(a.batch),
                            "--inflight", str(a.threads), "--producers", "2"],
                           capture_output=True, text=True, check=True)
        m = re.search(r"(\d+) items in ([0-9.]+) s .*mean batch ([0-9.]+)", p.stderr)
        rates.append((float(m.group(2)), float(m.group(3))))
    secs = statistics.median(r[0] for r in rates)
    gp = np.load(out_p)
    rows = [("gpupipe host, packed (no padding)", secs, None,
             f"median of {a.reps}; mean batch {rates[0][1]:.1f}")]
    if not a.skip_torch:
        print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, {blas_info()}")
        demo = os.path.join(work, "encoder.safetensors")
        subprocess.run([a.gp_infer, "--demo", "encoder", "--save-demo", demo], check=True)
        w = gx.read_safetensors(demo)[0]
        arrival = list(range(a.items))
        by_len = sorted(arrival, key=lambda i: len(seqs[i]))
        for name, model, order in (("PyTorch eager, padded, arrival order", EagerBert(w), arrival),
                                   ("PyTorch eager, padded, sorted by length", EagerBert(w),
                                    by_len),
                                   ("PyTorch TransformerEncoder, nested tensors", NestedBert(w),
                                    arrival)):
            t, y = run_torch(model.eval(), seqs, order, a.batch)
            padded = sum(a.batch and max(len(seqs[i]) for i in order[s:s + a.batch]) *
                         len(order[s:s + a.batch]) for s in range(0, a.items, a.batch))
            err = float(np.max(np.abs(y - gp)) / np.max(np.abs(gp)))
            rows.append((name, t, err, f"{padded / tokens:.2f}x tokens after padding"))
    print("\n| runner | items/s | tokens/s | vs gpupipe | max rel. diff vs gpupipe | note |")
    print("|---|---|---|---|---|---|")
    base = a.items / rows[0][1]
    for name, t, err, note in rows:
        r = a.items / t
        rs, ts = f"{r:,.1f}".replace(",", " "), f"{tokens / t:,.0f}".replace(",", " ")
        print(f"| {name} | {rs} | {ts} | {r / base:.2f} | "
              f"{'-' if err is None else f'{err:.1e}'} | {note} |")


if __name__ == "__main__":
    main()
