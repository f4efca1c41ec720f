#!/usr/bin/env bash
# cuda-bench end to end on the simulated device (tests/sim.cmake, label sim): every measure,
# (a) to (h), runs to its result line and the run exits 0. Its figures are the simulation's,
# not a GPU's, and are not checked: this guards the benchmark's own code paths (a failed check,
# a crash, a hang) before it meets a GPU, where its minutes are few.
# Usage: cuda-bench-smoke.sh CUDA_BENCH LIBGPSIM
set -euo pipefail
bench=$1 sim=$2
rc=0
out=$(LD_PRELOAD=$sim "$bench" --seconds 0.2 2>&1) || rc=$?
printf '%s\n' "$out"
[ "$rc" = 0 ] || { echo "cuda-bench exited $rc"; exit 1; }
grep -q 'simulated device, not a GPU' <<<"$out" || { echo "not on the simulated device"; exit 1; }
for m in a b c d e f g h; do
  grep -q "^($m) " <<<"$out" || { echo "no result line for ($m)"; exit 1; }
done
echo "cuda-bench: every measure ran on the simulated device"
