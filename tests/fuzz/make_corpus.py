#!/usr/bin/python3
"""Write the loader fuzzer's seed corpus (tests/fuzz/corpus): small, valid safetensors models
covering every spec form, plus a few near-misses. Deterministic; no torch needed.

usage: make_corpus.py [OUTDIR]
"""
import json
import os
import random
import struct
import sys

rng = random.Random(7)


def image(tensors, spec=None, pad=True):
    """tensors: list of (name, dtype, shape). Data is random bytes of the right size."""
    sizes = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "U8": 1}
    header, blobs, off = {}, [], 0
    if spec is not None:
        header["__metadata__"] = {"gpupipe.spec": spec}
    for name, dtype, shape in tensors:
        n = sizes[dtype]
        for d in shape:
            n *= d
        if dtype == "F32":
            raw = struct.pack(f"<{n // 4}f", *[rng.uniform(-1, 1) for _ in range(n // 4)])
        else:
            raw = bytes(rng.randrange(256) for _ in range(n))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        blobs.append(raw)
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    os.makedirs(out, exist_ok=True)
    seeds = {}
    seeds["mlp"] = image([("fc1.weight", "F32", [8, 6]), ("fc1.bias", "F32", [8]),
                          ("fc2.weight", "F16", [3, 8])],
                         "input f32 6\nlinear fc1\ngelu\nlinear fc2\nsoftmax\nargmax\n")
    seeds["cnn"] = image(
        [("c1.weight", "F32", [4, 3, 3, 3]), ("bn.weight", "F32", [4]), ("bn.bias", "F32", [4]),
         ("bn.running_mean", "F32", [4]), ("bn.running_var", "F32", [4]),
         ("bn.num_batches_tracked", "I64", []),
         ("c2.weight", "BF16", [4, 2, 3, 3]), ("p.weight", "F32", [4, 4, 1, 1]),
         ("fc.weight", "F32", [5, 4]), ("fc.bias", "F64", [5])],
        "# resnet-ish\ninput u8 6x6x3 layout=hwc mean=0.5,0.4,0.3 std=0.2,0.2,0.3\n"
        "conv2d c1 padding=1\nbatchnorm2d bn eps=1e-3\nrelu\nsave s\n"
        "conv2d c2 padding=1x1 stride=1 dilation=1 groups=2\nsigmoid\nsave m\nrestore s\n"
        "conv2d p\nadd m\ntanh\nmaxpool2d kernel=3 stride=2 padding=1\n"
        "avgpool2d kernel=2x1 stride=1\nglobalavgpool\nflatten\nlinear fc\ntopk k=3\n")
    seeds["identity"] = image([], "input f32 3x2x2 layout=hwc mean=1 std=2\nflatten\n")
    seeds["spec_missing"] = image([("fc.weight", "F32", [2, 2])])
    seeds["bad_offsets"] = image([("a", "F32", [2]), ("b", "F32", [2])], "input f32 2\n")
    seeds["bad_offsets"] = seeds["bad_offsets"].replace(b"[8,16]", b"[4,12]")
    seeds["unpadded"] = image([("fc.weight", "F32", [1, 1])], "input f32 1\nlinear fc\n",
                              pad=False)
    # Near-misses of the coverage rule (the tensors must cover the data exactly, as the
    # reference loader requires): bytes after the last tensor, and a gap between tensors.
    seeds["trailing_bytes"] = image([("fc.weight", "F32", [2, 2])], "input f32 2\nlinear fc\n") \
        + b"\0" * 8
    gap = image([("fc.weight", "F32", [2, 2]), ("fc.bias", "F32", [2])],
                "input f32 2\nlinear fc\n")
    seeds["gap"] = gap.replace(b"[16,24]", b"[20,28]") + b"\0" * 4
    # Variable-length models (token ids or f32 tokens): the text-encoder ops, run packed.
    C, V, P, F = 8, 11, 6, 16

    def lin(n, o, i, dt="F32"):
        return [(n + ".weight", dt, [o, i]), (n + ".bias", dt, [o])]

    def ln(n):
        return [(n + ".weight", "F32", [C]), (n + ".bias", "F32", [C])]

    seeds["varlen_pool"] = image([], "input f32 *x2\npool mean\n")
    seeds["bert"] = image(
        [("e.word_embeddings.weight", "F32", [V, C]), ("e.position_embeddings.weight", "F32", [P, C]),
         ("e.token_type_embeddings.weight", "F16", [2, C])] + ln("e.LayerNorm")
        + lin("a.self.query", C, C) + lin("a.self.key", C, C) + lin("a.self.value", C, C, "BF16")
        + lin("a.output.dense", C, C) + ln("l1") + lin("ff1", F, C) + lin("ff2", C, F) + ln("l2"),
        "input i32 *\nembedding e\nlayernorm e.LayerNorm eps=1e-12\nsave x\nattention a heads=2\n"
        "add x\nlayernorm l1\nsave h\nlinear ff1\ngelu\nlinear ff2\nadd h\nlayernorm l2\n"
        "pool mean\nl2norm\n")
    seeds["mha_cls"] = image(
        [("w.weight", "F32", [V, C]), ("pos.weight", "F32", [P, C]), ("tt.weight", "F32", [2, C]),
         ("m.in_proj_weight", "F32", [3 * C, C]), ("m.in_proj_bias", "F32", [3 * C])]
        + lin("m.out_proj", C, C) + lin("cls", 3, C),
        "input u32 *\nembedding w position=pos token_type=tt\nMultiheadAttention m num_heads=4\n"
        "pool cls\nlinear cls\ntanh\nsoftmax dim=-1\nargmax\n")
    seeds["custom_qkvo"] = image(
        [("w.weight", "F32", [V, C])] + lin("at.qq", C, C) + lin("at.kk", C, C)
        + lin("at.vv", C, C) + lin("at.oo", C, C),
        "input i64 *\nembedding w\nattention at heads=1 q=qq k=kk v=vv out=oo\nglobalavgpool\n"
        "l2norm eps=1e-6\ntopk k=2\n")
    seeds["f32_tokens"] = image(ln("n") + lin("p", C, C), "input f32 *x8\nlayernorm n\nlinear p\npool mean\n")
    for name, data in seeds.items():
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {out}")


if __name__ == "__main__":
    main()
