#!/usr/bin/env bash
# conv-bench's (g), cuDNN's graph API, on the simulated device (label sim; the simulated
# backend API: tests/sim/libs_sim.c): per shape, the heuristic's configurations (mode A: two
# engines, the second noted TENSOR_CORE; the fallback list: the first again) are planned, timed
# and the fastest plan's output compared with the legacy API's fastest. Checks, per NCHW shape:
# fp32 passes over the tensor-core engine (conv.c's IEEE fp32) and times one plan, fp16 times
# two, the fallback's repeat is recognised as the same plan, and the graph's output equals the
# legacy output (g_diff=0: the same fp32 sums; a plan that read the wrong buffer or wrote
# nothing gives a difference); with engine 1 noted REDUCED_PRECISION_REDUCTION, (g) passes it
# over and (r) times it alone. The timings are the simulation's and are not checked.
# Usage: conv-graph.sh CONV_BENCH LIBGPSIM WORKDIR
set -euo pipefail
bench=$1 sim=$2 work=$3
mkdir -p "$work"
cd "$work"
printf '# NAME CIN COUT KERNEL STRIDE PAD SIZE COUNT\nstem 3 8 7 2 3 32 1\nmid 8 16 3 1 1 16 2\n' \
  >shapes.txt
# fp16r: fp16 with engine 1 noted REDUCED_PRECISION_REDUCTION too (GPSIM_DNN_REDUCED=1): (g)
# passes over it as conv.c does (fp32 sums) and times engine 0 alone; (r) times engine 1 alone.
for run in fp32 fp16 fp16r; do
  prec=${run%r} reduced=0
  [ "$run" = fp16r ] && reduced=1
  rc=0
  GPSIM_DNN_REDUCED=$reduced LD_PRELOAD=$sim GPSIM_DEVICES=1 GPT_REQUIRE_DEVICE=1 "$bench" \
    --batch 2 --reps 2 --precision "$prec" --layouts NCHW --shapes shapes.txt >"$run.txt" 2>&1 || rc=$?
  cat "$run.txt"
  [ "$rc" = 0 ] || { echo "conv-bench --precision $prec (GPSIM_DNN_REDUCED=$reduced) exited $rc"; exit 1; }
  case $run in
  fp32)
    want='g_offered=3 g_timed=1 g_same_plan=1 g_fp32_contract=1 g_failed=0 g_untried=0 g_eng=0 '
    tail='$' ;;
  fp16)
    want='g_offered=3 g_timed=2 g_same_plan=1 g_fp32_contract=0 g_failed=0 g_untried=0 g_eng=[01] '
    tail=' r_timed=0 r_ms=-$' ;;
  fp16r)
    want='g_offered=3 g_timed=1 g_same_plan=1 g_fp32_contract=1 g_failed=0 g_untried=0 g_eng=0 '
    tail=' r_timed=1 r_eng=1 r_ms=[0-9.]+ r_diff=0$' ;;
  esac
  got=$(grep -E "^conv-bench: shape=.* layout=NCHW .*${want}g_ms=[0-9.]+ g_ws_mib=[0-9.]+ g_diff=0${tail}" \
    "$run.txt" | wc -l)
  [ "$got" = 2 ] || { echo "$run: $got of 2 shapes show the expected summary: $want... g_diff=0$tail"; exit 1; }
  grep -q '| NCHW graph(g) ms |' "$run.txt" || { echo "$run: the table has no (g) column"; exit 1; }
  if [ "$prec" = fp16 ]; then
    grep -q '| NCHW graph(r) ms |' "$run.txt" || { echo "$run: the table has no (r) column"; exit 1; }
  elif grep -q 'graph(r)' "$run.txt"; then
    echo "$run: fp32 has an (r) column"; exit 1
  fi
done
if [ "$(grep -c '^conv-bench-graph-r: .*eng=1 notes=tensor_core,reduced_reduction ws_mib=' fp16r.txt)" != 2 ]; then
  echo "fp16r: (r) did not time engine 1 on both shapes"; exit 1
fi
echo "conv-graph: (g) planned, filtered, deduplicated and matched the legacy output (fp32, fp16);" \
  "(r) timed the reduced-precision engine alone"
