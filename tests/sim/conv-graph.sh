#!/usr/bin/env bash
# conv-bench's (g), cuDNN's graph API, on the simulated device (label sim; the simulated
# backend API: tests/sim/libs_sim.c): per shape, the heuristic's configurations (mode A: two
# engines, the second noted TENSOR_CORE; the fallback list: the first again) are planned, timed
# and the fastest plan's output compared with the legacy API's fastest. Checks, per NCHW shape:
# fp32 passes over the tensor-core engine (conv.c's IEEE fp32) and times one plan, fp16 times
# two, the fallback's repeat is recognised as the same plan, and the graph's output equals the
# legacy output (g_diff=0: the same fp32 sums; a plan that read the wrong buffer or wrote
# nothing gives a difference). The timings are the simulation's and are not checked.
# Usage: conv-graph.sh CONV_BENCH LIBGPSIM WORKDIR
set -euo pipefail
bench=$1 sim=$2 work=$3
mkdir -p "$work"
cd "$work"
printf '# NAME CIN COUT KERNEL STRIDE PAD SIZE COUNT\nstem 3 8 7 2 3 32 1\nmid 8 16 3 1 1 16 2\n' \
  >shapes.txt
for prec in fp32 fp16; do
  rc=0
  LD_PRELOAD=$sim GPSIM_DEVICES=1 GPT_REQUIRE_DEVICE=1 "$bench" --batch 2 --reps 2 \
    --precision "$prec" --layouts NCHW --shapes shapes.txt >"$prec.txt" 2>&1 || rc=$?
  cat "$prec.txt"
  [ "$rc" = 0 ] || { echo "conv-bench --precision $prec exited $rc"; exit 1; }
  if [ "$prec" = fp32 ]; then
    want='g_offered=3 g_timed=1 g_same_plan=1 g_fp32_contract=1 g_failed=0 g_untried=0 g_eng=0 '
  else
    want='g_offered=3 g_timed=2 g_same_plan=1 g_fp32_contract=0 g_failed=0 g_untried=0 g_eng=[01] '
  fi
  got=$(grep -E "^conv-bench: shape=.* layout=NCHW .*${want}g_ms=[0-9.]+ g_ws_mib=[0-9.]+ g_diff=0$" \
    "$prec.txt" | wc -l)
  [ "$got" = 2 ] || { echo "$prec: $got of 2 shapes show the expected (g) summary: $want... g_diff=0"; exit 1; }
  grep -q '| NCHW graph(g) ms |' "$prec.txt" || { echo "$prec: the table has no (g) column"; exit 1; }
done
echo "conv-graph: (g) planned, filtered, deduplicated and matched the legacy output (fp32, fp16)"
