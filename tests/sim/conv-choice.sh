#!/usr/bin/env bash
# The conv2d layer's algorithm timing at create, seen through the pipeline's INFO log
# (lib/cuda/conv.c, docs/DESIGN.md §6), on the simulated device (label sim): gp-infer runs the
# demo CNN with 3 slots and --log info. Checks that the first slot times every convolution at
# every bucket size (one line per distinct convolution and bucket, each naming the pair kept and
# how many ran) and that the later slots time nothing (they plan with the kept choice). The
# outputs' agreement with the host reference is model_cuda_demo's to check, not this.
# Usage: conv-choice.sh GP_INFER LIBGPSIM WORKDIR
set -euo pipefail
infer=$1 sim=$2 work=$3
mkdir -p "$work"
cd "$work"
"$infer" --demo cnn --save-demo cnn.safetensors >/dev/null
"$infer" --demo cnn --describe >describe.txt
convs=$(grep -c ' conv2d ' describe.txt)
# 8 items, u8 32x32x3: a fixed pattern (no numpy needed), as a version-1 .npy file.
python3 - <<'PY'
import struct
hdr = "{'descr': '|u1', 'fortran_order': False, 'shape': (8, 32, 32, 3), }"
hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
data = bytes((i * 37 + (i // 3072) * 11) % 256 for i in range(8 * 32 * 32 * 3))
with open("x.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + data)
PY
rc=0
LD_PRELOAD=$sim GPSIM_DEVICES=1 "$infer" --demo cnn --input x.npy --output y-cuda.npy \
  --backend cuda --batch 4 --inflight 3 --log info --quiet 2>log.txt || rc=$?
cat log.txt
[ "$rc" = 0 ] || { echo "gp-infer on the simulated device exited $rc"; exit 1; }
timed=$(grep -c 'gp-infer: log info: slot 0: conv2d .*: batch [0-9]*: .* ms per run ([0-9]* of [0-9]* algorithm/form pairs ran' log.txt || true)
# buckets of max_batch 4: 1, 2, 4; every conv of the demo CNN has its own geometry
want=$((convs * 3))
[ "$timed" = "$want" ] || { echo "slot 0 logged $timed timed convolutions, expected $want ($convs convs x 3 buckets)"; exit 1; }
if grep -q 'slot [12]: conv2d' log.txt; then
  echo "a later slot timed a convolution again (the choice was not kept)"; exit 1
fi
echo "conv-choice: $timed timed convolutions on slot 0, none on slots 1-2"
