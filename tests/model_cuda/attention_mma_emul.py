#!/usr/bin/env python3
"""The index arithmetic of kernels/attention.cu's tensor-core kernel, checked without a GPU.

attn_mma_kernel's data movement (cp.async tiles, ldmatrix addresses, mma fragments, the P
fragments built from S's accumulators, masking, the online softmax and the output stores) is
re-enacted here lane by lane, with ldmatrix and mma.m16n8k16 emulated from the fragment
layouts the PTX ISA documents ("Warp-level matrix fragment mma.m16n8k16", "ldmatrix"). The
result is compared with attention computed directly. What this can find: a wrong address, tile
bound, mask or softmax step in the kernel as transcribed below. What it cannot: a misreading of
the PTX layouts themselves (the same reading is used in both places), races, or anything the
compiler does. tests/model_cuda/test_encoder_kernels.c checks the real kernel on a GPU.

Keep the constants and the loops in step with attn_mma_kernel when it changes.

usage: python3 tests/model_cuda/attention_mma_emul.py   (numpy; exits 0 when all cases agree,
77 without numpy). ctest runs it as attention_mma_emul (label unit), GPU or not.
"""
import sys

try:
    import numpy as np
except ImportError as e:  # ctest: skipped, with the reason
    print(f"SKIP: numpy is not importable here ({e})")
    sys.exit(77)

WARPS, BR, BC = 4, 64, 64


def ldsm_x4(smem, addrs, trans):
    """ldmatrix .x4 (b16): addrs[lane] is the element index of the row lane supplies (lanes
    8i..8i+7: rows 0..7 of matrix i). Returns regs[lane][i] = (lo, hi)."""
    regs = [[None] * 4 for _ in range(32)]
    for i in range(4):
        rows = [addrs[8 * i + j] for j in range(8)]
        for lane in range(32):
            g, t = lane // 4, lane % 4
            if not trans:  # row g, columns 2t, 2t + 1
                lo, hi = smem[rows[g] + 2 * t], smem[rows[g] + 2 * t + 1]
            else:  # the transposed matrix: rows 2t, 2t + 1 of column g
                lo, hi = smem[rows[2 * t] + g], smem[rows[2 * t + 1] + g]
            regs[lane][i] = (lo, hi)
    return regs


def mma(d, a, b0, b1):
    """d[lane] (4 floats) += A (16x16) B (16x8); a[lane] = 4 (lo, hi) pairs, b0/b1[lane] pairs."""
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for r, (row, col) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
            A[row, col], A[row, col + 1] = a[lane][r]
        B[2 * t, g], B[2 * t + 1, g] = b0[lane]
        B[2 * t + 8, g], B[2 * t + 9, g] = b1[lane]
    D = A @ B
    for lane in range(32):
        g, t = lane // 4, lane % 4
        d[lane][0] += D[g, 2 * t]
        d[lane][1] += D[g, 2 * t + 1]
        d[lane][2] += D[g + 8, 2 * t]
        d[lane][3] += D[g + 8, 2 * t + 1]


def rnd(x, dt):
    return float(np.array(x, dtype=np.float32).astype(dt).astype(np.float32))


def block(qkv, tok, item, qt, head, d, c, DP, dt, out):
    """One block of attn_mma_kernel, all 4 warps in lockstep."""
    LD = DP + 8
    NS, NO, KQ = BC // 8, DP // 8, DP // 16
    scale_log2 = np.float32(1.0 / np.sqrt(d)) * np.float32(1.4426950408889634)
    t0 = tok[item]
    L = tok[item + 1] - t0
    q0 = qt * BR
    if q0 >= L:
        return
    s_qv = np.full(BR * LD, np.nan)  # uninitialised shared memory: NaN shows any stray read
    s_k = np.full(BC * LD, np.nan)

    def load_tile(s, col, r0):
        chunks = DP // 8
        for it in range(BR * chunks // 128):
            for tid in range(128):
                i = it * 128 + tid
                r, ch = i // chunks, i % chunks
                gr = r0 + r
                ok = gr < L and ch * 8 < d
                for e in range(8):
                    s[r * LD + ch * 8 + e] = qkv[t0 + gr, head * d + col + ch * 8 + e] if ok else 0.0

    load_tile(s_qv, 0, q0)
    load_tile(s_k, c, 0)
    W = []
    for warp in range(WARPS):
        qf = []
        for kc in range(KQ):
            qf.append(ldsm_x4(s_qv, [(warp * 16 + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8
                                     for lane in range(32)], False))
        W.append({"qf": qf, "o": [[[0.0] * 4 for _ in range(32)] for _ in range(NO)],
                  "m0": [-np.inf] * 32, "m1": [-np.inf] * 32, "l0": [0.0] * 32, "l1": [0.0] * 32})
    load_tile(s_qv, 2 * c, 0)  # V(0) (the emulation needs no async order: loads land at once)
    ntiles = (L + BC - 1) // BC
    for j in range(ntiles):
        for w in W:
            s = [[[0.0] * 4 for _ in range(32)] for _ in range(NS)]
            for nt in range(NS):
                for k2 in range(DP // 32):
                    b = ldsm_x4(s_k, [(nt * 8 + (lane & 7)) * LD + k2 * 32 + (lane >> 3) * 8
                                      for lane in range(32)], False)
                    qa, qb = w["qf"][2 * k2], w["qf"][2 * k2 + 1]
                    mma(s[nt], qa, [b[l][0] for l in range(32)], [b[l][1] for l in range(32)])
                    mma(s[nt], qb, [b[l][2] for l in range(32)], [b[l][3] for l in range(32)])
            mx0, mx1 = list(w["m0"]), list(w["m1"])
            for lane in range(32):
                tq = lane & 3
                for nt in range(NS):
                    key = j * BC + nt * 8 + 2 * tq
                    v = s[nt][lane]
                    v[0] = v[0] * scale_log2 if key < L else -np.inf
                    v[1] = v[1] * scale_log2 if key + 1 < L else -np.inf
                    v[2] = v[2] * scale_log2 if key < L else -np.inf
                    v[3] = v[3] * scale_log2 if key + 1 < L else -np.inf
                    mx0[lane] = max(mx0[lane], v[0], v[1])
                    mx1[lane] = max(mx1[lane], v[2], v[3])
            for m in (mx0, mx1):  # __shfl_xor 1, then 2
                for off in (1, 2):
                    m[:] = [max(m[l], m[l ^ off]) for l in range(32)]
            for lane in range(32):
                r0 = 0.0 if mx0[lane] == -np.inf else mx0[lane]
                r1 = 0.0 if mx1[lane] == -np.inf else mx1[lane]
                f0, f1 = 2.0 ** (w["m0"][lane] - r0), 2.0 ** (w["m1"][lane] - r1)
                w["m0"][lane], w["m1"][lane] = mx0[lane], mx1[lane]
                w["l0"][lane] *= f0
                w["l1"][lane] *= f1
                for i in range(NO):
                    o = w["o"][i][lane]
                    o[0] *= f0
                    o[1] *= f0
                    o[2] *= f1
                    o[3] *= f1
                for nt in range(NS):
                    v = s[nt][lane]
                    v[0], v[1] = 2.0 ** (v[0] - r0), 2.0 ** (v[1] - r0)
                    v[2], v[3] = 2.0 ** (v[2] - r1), 2.0 ** (v[3] - r1)
                    w["l0"][lane] += v[0] + v[1]
                    w["l1"][lane] += v[2] + v[3]
            w["s"] = s
        nextk = None
        if j + 1 < ntiles:
            nextk = (j + 1) * BC
        for w in W:  # O += P V(j)
            s = w["s"]
            for kc in range(BC // 16):
                a = [[(rnd(s[2 * kc][l][0], dt), rnd(s[2 * kc][l][1], dt)),
                      (rnd(s[2 * kc][l][2], dt), rnd(s[2 * kc][l][3], dt)),
                      (rnd(s[2 * kc + 1][l][0], dt), rnd(s[2 * kc + 1][l][1], dt)),
                      (rnd(s[2 * kc + 1][l][2], dt), rnd(s[2 * kc + 1][l][3], dt))] for l in range(32)]
                for np_ in range(DP // 16):
                    b = ldsm_x4(s_qv, [(kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + np_ * 16
                                       + (lane >> 4) * 8 for lane in range(32)], True)
                    mma(w["o"][2 * np_], a, [b[l][0] for l in range(32)], [b[l][1] for l in range(32)])
                    mma(w["o"][2 * np_ + 1], a, [b[l][2] for l in range(32)], [b[l][3] for l in range(32)])
        if nextk is not None:
            load_tile(s_k, c, nextk)
            load_tile(s_qv, 2 * c, nextk)
    for warp, w in enumerate(W):
        l0 = [w["l0"][l] for l in range(32)]
        l1 = [w["l1"][l] for l in range(32)]
        for lv in (l0, l1):
            for off in (1, 2):
                lv[:] = [lv[l] + lv[l ^ off] for l in range(32)]
        for lane in range(32):
            g, tq = lane >> 2, lane & 3
            row0, row1 = q0 + warp * 16 + g, q0 + warp * 16 + g + 8
            for i in range(NO):
                col = i * 8 + 2 * tq
                if col >= d:
                    continue
                o = w["o"][i][lane]
                if row0 < L:
                    out[t0 + row0, head * d + col] = rnd(o[0] / l0[lane], dt)
                    out[t0 + row0, head * d + col + 1] = rnd(o[1] / l0[lane], dt)
                if row1 < L:
                    out[t0 + row1, head * d + col] = rnd(o[2] / l1[lane], dt)
                    out[t0 + row1, head * d + col + 1] = rnd(o[3] / l1[lane], dt)


def reference(qkv, tok, heads, d):
    c = heads * d
    out = np.zeros((qkv.shape[0], c))
    for k in range(len(tok) - 1):
        a, b = tok[k], tok[k + 1]
        for h in range(heads):
            q = qkv[a:b, h * d:(h + 1) * d]
            kk = qkv[a:b, c + h * d:c + (h + 1) * d]
            v = qkv[a:b, 2 * c + h * d:2 * c + (h + 1) * d]
            s = q @ kk.T / np.sqrt(d)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[a:b, h * d:(h + 1) * d] = (p / p.sum(axis=1, keepdims=True)) @ v
    return out


def case(lengths, heads, d, dt, rng):
    DP = 32 if d <= 32 else 64 if d <= 64 else 96 if d <= 96 else 128
    c = heads * d
    tok = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    T = int(tok[-1])
    qkv = rng.uniform(-2, 2, size=(T, 3 * c)).astype(np.float32).astype(dt).astype(np.float64)
    out = np.full((T, c), np.nan)
    qtiles = (max(lengths) + BR - 1) // BR
    for item in range(len(lengths)):
        for qt in range(qtiles):
            for head in range(heads):
                block(qkv, tok, item, qt, head, d, c, DP, dt, out)
    ref = reference(qkv, tok, heads, d)
    err = np.max(np.abs(out - ref)) / max(np.max(np.abs(ref)), 1e-6)
    tol = 1e-2 if dt == np.float16 else 4e-2
    ok = err <= tol and not np.isnan(out).any()
    print(f"{np.dtype(dt).name:8} d={d:3} heads={heads} lengths={lengths}: rel err {err:.2e} "
          f"(tol {tol:.0e}){'' if ok else '  FAIL'}")
    return ok


if __name__ == "__main__":
    rng = np.random.default_rng(7)
    try:
        bf16 = np.dtype("bfloat16")  # ml_dtypes registers it where installed
    except TypeError:
        bf16 = None
    cases = [([1, 2, 7], 1, 32), ([63, 64, 65], 1, 64), ([130], 1, 40), ([5, 70], 2, 128),
             ([17], 1, 96), ([66], 1, 8)]
    ok = True
    for lengths, heads, d in cases:
        ok &= case(lengths, heads, d, np.float16, rng)
    if bf16 is None:
        print("bfloat16: no numpy dtype here (ml_dtypes not installed); fp16 covers the indexing")
    sys.exit(0 if ok else 1)
