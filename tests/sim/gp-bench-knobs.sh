#!/usr/bin/env bash
# gp-bench's --cuda-graphs and --spin-wait on the simulated device (label sim): the demo MLP on
# CUDA at one batch size with the doctor's report. Checks that the header says both knobs are
# on, that the batches ran as CUDA graph replays (none eager), that the report's configuration
# echo shows spin_wait (gp_stats.spin_wait), and that the doctor does not advise cuda_graphs=1
# or spin_wait=1 while they are on. The figures are the simulation's and are not checked.
# Usage: gp-bench-knobs.sh GP_BENCH LIBGPSIM
set -euo pipefail
bench=$1 sim=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
LD_PRELOAD=$sim GPSIM_DEVICES=1 GPT_REQUIRE_DEVICE=1 "$bench" --workload mlp --backend cuda \
  --batch 8 --cuda-graphs --spin-wait --report --duration 0.1 --warmup 0.05 --baseline none -q \
  >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" = 0 ] || { echo "gp-bench exited $rc"; exit 1; }
grep -q '^pipeline  cuda_graphs=1 spin_wait=1$' "$out" || { echo "no header line for the knobs"; exit 1; }
grep -Eq '^  graphs    [1-9][0-9]* replays, 0 eager' "$out" || { echo "batches did not run as graph replays"; exit 1; }
grep -q 'inflight 3, spin_wait on)' "$out" || { echo "the report does not echo spin_wait"; exit 1; }
if grep -E '^  knob:' "$out" | grep -Eq 'cuda_graphs=1|spin_wait=1'; then
  echo "the doctor advises a knob that is on already"; exit 1
fi
echo "gp-bench-knobs: both knobs on, graphs replayed, spin_wait echoed, not advised again"
