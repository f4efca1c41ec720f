#!/usr/bin/env bash
# The conv2d layer's algorithm timing at create, seen through the pipeline's INFO log
# (lib/cuda/conv.c, docs/DESIGN.md §6), on the simulated device (label sim): gp-infer runs the
# demo CNN with 3 slots and --log info. Checks that the first slot times every convolution at
# every bucket size (one line per distinct convolution and bucket, each naming the pair kept and
# how many ran) and that the later slots time nothing (they plan with the kept choice). Then the
# graph API's plans: chosen when they are faster (GPSIM_DNN_LEGACY_SLOW) and kept for the later
# slots, and passed over when they compute something else (GPSIM_DNN_GRAPH_WRONG), the output
# the same bits either way; a repeated shape planning the earlier op's choice at bind; and the
# planning caps bounding slow engines. The outputs' agreement with the host reference is model_cuda_demo's
# and model_cuda_graph_* 's to check, not this. A fast legacy algorithm that computes something
# else (GPSIM_DNN_GEMM_WRONG) is passed over as well.
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
# run NAME [VAR=VALUE ...]: gp-infer on the simulated device (the model in $model, 3 slots,
# batch 4, --log info) with those variables set; y-NAME.npy, log-NAME.txt (printed).
run() {
  local name=$1 rc=0
  shift
  env LD_PRELOAD="$sim" GPSIM_DEVICES=1 "$@" "$infer" "${model[@]}" --input x.npy \
    --output "y-$name.npy" --backend cuda --batch 4 --inflight 3 --log info --quiet \
    2>"log-$name.txt" || rc=$?
  cat "log-$name.txt"
  [ "$rc" = 0 ] || { echo "gp-infer ($name) exited $rc"; exit 1; }
}
# none_later NAME: the later slots timed and planned nothing (they took slot 0's choices).
none_later() {
  if grep -q 'slot [12]: conv2d' "log-$1.txt"; then
    echo "$1: a later slot timed or planned a convolution again (the choice was not kept)"; exit 1
  fi
}
model=(--demo cnn)
run cuda
timed=$(grep -c 'gp-infer: log info: slot 0: conv2d .*: batch [0-9]*: .* ms per run ([0-9]* of [0-9]* algorithm/form pairs ran' log-cuda.txt || true)
# buckets of max_batch 4: 1, 2, 4; every conv of the demo CNN has its own geometry
want=$((convs * 3))
[ "$timed" = "$want" ] || { echo "slot 0 logged $timed timed convolutions, expected $want ($convs convs x 3 buckets)"; exit 1; }
none_later cuda
echo "conv-choice: $timed timed convolutions on slot 0, none on slots 1-2"

# The graph API's plans (lib/cuda/conv_graph.c). With the legacy algorithms made slower, every
# timed convolution must choose a graph-API plan, the later slots must plan with it alone (no
# timing), and the output must be the legacy run's, bit for bit (the same fp32 sums). With
# plans that compute something else as well, conv_verify must pass over every one of them
# (a line each) and the output must again be the legacy run's.
run graph GPSIM_DNN_LEGACY_SLOW=1
graph=$(grep -c 'slot 0: conv2d .*: batch [0-9]*: graph engine [0-9]* unfused, .* ms per run' log-graph.txt || true)
[ "$graph" = "$want" ] || { echo "$graph of $want timed convolutions chose a graph-API plan"; exit 1; }
none_later graph
cmp y-cuda.npy y-graph.npy || { echo "the graph-API plans' output differs from the legacy run's"; exit 1; }
run wrong GPSIM_DNN_LEGACY_SLOW=1 GPSIM_DNN_GRAPH_WRONG=1
over=$(grep -c 'slot 0: conv2d .*: batch [0-9]*: graph engine [0-9]*, the fastest .* differs from the direct kernel by .*: passed over' log-wrong.txt || true)
[ "$over" = "$want" ] || { echo "$over of $want wrong graph plans were passed over"; exit 1; }
if grep -q 'graph engine [0-9]* unfused, ' log-wrong.txt; then
  echo "a wrong graph plan was chosen"; exit 1
fi
cmp y-cuda.npy y-wrong.npy || { echo "the output with wrong graph plans passed over differs"; exit 1; }
# A legacy algorithm other than the heuristic's first is checked too (FFT and Winograd trade
# accuracy for speed): with IMPLICIT_GEMM fast and wrong and every plan wrong, each timed
# convolution passes both over and keeps the heuristic's first, and the output is again the
# legacy run's.
run gemm-wrong GPSIM_DNN_LEGACY_SLOW=1 GPSIM_DNN_GRAPH_WRONG=1 GPSIM_DNN_GEMM_WRONG=1
# (a convolution with a relu may log its fused form and then its unfused one: counted once)
over=$(grep -o 'slot 0: conv2d .*: batch [0-9]*: IMPLICIT_GEMM[^,]*, the fastest .* differs from the direct kernel by .*: passed over' log-gemm-wrong.txt |
  sed 's/: IMPLICIT_GEMM.*//' | sort -u | wc -l)
[ "$over" = "$want" ] || { echo "$over of $want wrong IMPLICIT_GEMM choices were passed over"; exit 1; }
cmp y-cuda.npy y-gemm-wrong.npy || { echo "the output with a wrong legacy algorithm passed over differs"; exit 1; }
# cuDNN's fused conv + bias + relu (+ residual) fast and right, everything else slow or wrong:
# conv_verify checks each fused choice (since NHWC, 2026-11-28) and must let it through, so
# every bucket of every convolution with a relu keeps a fused form, none is passed over.
run fused-fast GPSIM_DNN_LEGACY_SLOW=1 GPSIM_DNN_GRAPH_WRONG=1 GPSIM_DNN_FUSED_FAST=1
relu=$(grep -c ' conv2d .* relu ' describe.txt)
fused=$(grep -c 'slot 0: conv2d .*: batch [0-9]*: [^,]* fused, [0-9.]* ms per run' log-fused-fast.txt || true)
[ "$fused" = $((relu * 3)) ] || { echo "$fused of $((relu * 3)) relu buckets kept a fused form"; exit 1; }
if grep -q 'fused, the fastest .* passed over' log-fused-fast.txt; then
  echo "a right fused form was passed over"; exit 1
fi
# A later slot runs slot 0's plan once at setup: where it does not run there
# (GPSIM_DNN_EXEC_FIRST_ONLY), that slot says so and runs the legacy stand-in, every bucket of
# every convolution, and the batches are right (they failed with cudnnBackendExecute before).
run first-only GPSIM_DNN_LEGACY_SLOW=1 GPSIM_DNN_EXEC_FIRST_ONLY=1
instead=$(grep -c 'slot [12]: conv2d .*: batch [0-9]*: graph engine [0-9]*, chosen earlier, did not run on this slot (.*): IMPLICIT_GEMM instead' log-first-only.txt || true)
[ "$instead" = $((2 * want)) ] || { echo "$instead of $((2 * want)) later-slot plans were found not to run"; exit 1; }
cmp y-cuda.npy y-first-only.npy || { echo "the output with later slots on the legacy algorithm differs"; exit 1; }
# Two convolutions of the same shape (the demo's layer1.0.conv2 twice): the second makes no
# plans at setup and times nothing; it plans the first one's choice at bind (a line each
# bucket), and the output is again the legacy run's (of the same spec), bit for bit.
sed 's/^conv2d layer1.0.conv2 padding=1$/conv2d layer1.0.conv2 padding=1\nbatchnorm2d layer1.0.bn2\nconv2d layer1.0.conv2 padding=1/' \
  <(python3 -c 'import json,struct,sys; d=open("cnn.safetensors","rb").read(); n=struct.unpack("<Q",d[:8])[0]; sys.stdout.write(json.loads(d[8:8+n])["__metadata__"]["gpupipe.spec"])') \
  >twice.spec
[ "$(grep -c '^conv2d layer1.0.conv2' twice.spec)" = 2 ] || { echo "twice.spec: the repeat was not made"; exit 1; }
model=(--model cnn.safetensors --spec twice.spec)
run twice-legacy
run twice-graph GPSIM_DNN_LEGACY_SLOW=1
again=$(grep -c 'slot 0: conv2d layer1.0.conv2: batch [0-9]*: graph engine [0-9]*, as an earlier convolution of the same shape chose' log-twice-graph.txt || true)
[ "$again" = 3 ] || { echo "the repeated convolution planned the earlier choice in $again of 3 buckets"; exit 1; }
timed2=$(grep -c 'slot 0: conv2d layer1.0.conv2 (.*: batch [0-9]*: .* ms per run' log-twice-graph.txt || true)
[ "$timed2" = 3 ] || { echo "layer1.0.conv2 was timed $timed2 times, expected 3 (once per bucket)"; exit 1; }
none_later twice-graph
cmp y-twice-legacy.npy y-twice-graph.npy || { echo "twice.spec: the graph run's output differs from the legacy run's"; exit 1; }
echo "conv-choice: graph-API plans chosen when faster ($graph), wrong ones passed over ($over), a repeated shape plans the earlier choice ($again)"

# The planning caps (conv.c: 250 ms of finalizing per bucket, 4000 ms per slot): with every plan
# taking 600 ms to finalize, each bucket plans one, the slot's budget runs out part-way (one
# INFO line), the buckets after it time the legacy algorithms only, and the output is still
# the legacy run's, bit for bit.
model=(--demo cnn)
run capped GPSIM_DNN_LEGACY_SLOW=1 GPSIM_DNN_PLAN_MS=600
spent=$(grep -c 'slot 0: conv2d .*: the slot.s 4000 ms of graph-API planning is spent' log-capped.txt || true)
[ "$spent" = 1 ] || { echo "the slot's planning budget was reported spent $spent times, expected 1"; exit 1; }
capped=$(grep -c 'slot 0: conv2d .*: batch [0-9]*: graph engine [0-9]* unfused, .* ms per run' log-capped.txt || true)
[ "$capped" -ge 1 ] && [ "$capped" -lt "$want" ] ||
  { echo "$capped of $want buckets chose a plan under the cap (expected some, not all)"; exit 1; }
cmp y-cuda.npy y-capped.npy || { echo "the capped run's output differs from the legacy run's"; exit 1; }
echo "conv-choice: planning capped: $capped of $want buckets planned before the slot's budget ran out"

# The workspace cap (conv.c, gp__conv_ws_cap: 1/16 of the device's free memory when the first
# slot plans, 256 MiB to 2 GiB; the simulated device's 80 GiB give 2048 MiB). With
# IMPLICIT_PRECOMP_GEMM and graph engine 0 asking for 300 MiB, over the fixed 256 MiB of before,
# every bucket times the pairs of the 1 MiB run and reports nothing over the cap; at 2100 MiB
# they are left out: each bucket still timed says how many, and times fewer pairs than in the
# 1 MiB run (a bucket left one pair is not timed). The output is the 1 MiB run's either way.
# pairs NAME: "conv batch pairs" for each bucket slot 0 timed.
pairs() {
  sed -n 's/.*slot 0: conv2d \([^ ]*\) .*: batch \([0-9]*\): .* ms per run ([0-9]* of \([0-9]*\) algorithm.*/\1 \2 \3/p' "log-$1.txt" | sort
}
run ws300 GPSIM_DNN_WS_MIB=300
[ "$(pairs ws300)" = "$(pairs cuda)" ] || { echo "300 MiB workspaces: the timed pairs differ from the 1 MiB run's"; exit 1; }
if grep -q 'over the [0-9]* MiB workspace cap' log-ws300.txt; then
  echo "300 MiB workspaces were reported over the cap"; exit 1
fi
cmp y-cuda.npy y-ws300.npy || { echo "the 300 MiB run's output differs from the 1 MiB run's"; exit 1; }
run ws2100 GPSIM_DNN_WS_MIB=2100
timed=$(pairs ws2100 | wc -l)
over=$(grep -c 'slot 0: conv2d .*: batch [0-9]*: .* graph-API plans; [0-9]* more over the 2048 MiB workspace cap;' log-ws2100.txt || true)
[ "$timed" -ge 1 ] && [ "$over" = "$timed" ] || { echo "$over of $timed timed buckets reported workspaces over the 2048 MiB cap"; exit 1; }
fewer=$(join <(pairs cuda | awk '{print $1 "@" $2, $3}') <(pairs ws2100 | awk '{print $1 "@" $2, $3}') | awk '$3 < $2' | wc -l)
[ "$fewer" = "$timed" ] || { echo "$fewer of $timed buckets timed fewer pairs with 2100 MiB workspaces"; exit 1; }
cmp y-cuda.npy y-ws2100.npy || { echo "the 2100 MiB run's output differs from the 1 MiB run's"; exit 1; }
echo "conv-choice: workspace cap 2048 MiB: 300 MiB candidates kept, 2100 MiB ones left out ($over buckets say so)"
