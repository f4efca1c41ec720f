#!/usr/bin/env bash
# encoder-gpu-run.sh — the transformer-encoder checks and the attention benchmark on a machine
# with an NVIDIA GPU, in one device command after `bash bench/gpu-run.sh build` (same warm
# machine: it reuses build-gpu/ and its gpu-run.env):
#
#   bash bench/encoder-gpu-run.sh [STAGE...]     (default: test sanitize bench)
#
#   test      ctest -R encoder: the kernels against naive references (encoder_kernels_cuda,
#             every element) and whole encoder models on CUDA against the host layers
#             (encoder_cuda; skipped with its reason while the builder lacks the encoder ops)
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck on encoder_kernels_cuda quick
#             (racecheck is the one that can see a missing barrier around the attention
#             kernel's shared K/V tiles)
#   bench     bench/attention-bench.py (the kernel vs torch SDPA per token, fp16 then bf16),
#             and attention-bench alone for the fp32 / SIMT figures
#
# Logs go to $OUT (default ./out): encoder-ctest.log, encoder-<tool>.log, attention-bench-*.txt;
# one line per stage is appended to $OUT/summary.txt (ok | failed | timeout | skipped, seconds,
# why). The whole run stops itself at ENC_RUN_BUDGET_S (default 560 s). Exit 0 when every stage
# is ok or skipped.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/out}
BUILD=${BUILD:-$ROOT/build-gpu}
BUDGET_S=${ENC_RUN_BUDGET_S:-560}
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
# One budget per device command: after `export GPU_RUN_T0=$(date +%s); bash bench/gpu-run.sh
# build && bash bench/encoder-gpu-run.sh ...` the build's time counts against it too.
T0=${GPU_RUN_T0:-$(date +%s)}
left() { echo $((T0 + BUDGET_S - $(date +%s))); }
# cap CAP: seconds a step may take: CAP, or what is left of the budget (minus 10 s) if less.
cap() {
  local l=$(($(left) - 10))
  [ "$1" -lt "$l" ] && l=$1
  echo "$l"
}
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(test sanitize bench)
echo "encoder-gpu-run $(date -u +%Y-%m-%dT%H:%M:%SZ): stages ${STAGES[*]}; commit $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?')" >>"$SUMMARY"

if [ ! -f "$BUILD/gpu-run.env" ]; then
  echo "encoder:  failed      0 s  no build in $BUILD: run 'bash bench/gpu-run.sh build' first (same warm machine)" | tee -a "$SUMMARY"
  exit 1
fi
# shellcheck disable=SC1091
. "$BUILD/gpu-run.env"
if ! timeout 30 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "encoder:  skipped     0 s  no GPU: nvidia-smi lists none" | tee -a "$SUMMARY"
  exit 0
fi
# A GPU is here: a test that finds no usable device fails instead of skipping (gpt.h).
export GPT_REQUIRE_DEVICE=${GPT_REQUIRE_DEVICE-1}
PY=""
for p in "${PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$p" ] && command -v "$p" >/dev/null && "$p" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && { PY=$p; break; }
done

RC=0
line() { # line STAGE STATUS T_START DETAIL
  printf '%-9s %-8s %4d s  %s\n' "$1:" "$2" $(($(date +%s) - $3)) "$4" | tee -a "$SUMMARY"
  case $2 in ok | skipped) ;; *) RC=1 ;; esac
}

for s in "${STAGES[@]}"; do
  t=$(date +%s)
  case $s in
    test)
      log=$OUT/encoder-ctest.log
      c=$(cap 300)
      if [ "$c" -lt 30 ]; then line test timeout "$t" "not run (budget: $(left) s left)"; continue; fi
      # -L gpu: the GPU cases; the encoder's PyTorch conformance runs in gpu-run.sh's test stage.
      (cd "$BUILD" && timeout -k 10 "$c" ctest -L gpu -R encoder --output-on-failure) >"$log" 2>&1
      rc=$?
      sum=$(grep -E 'tests passed|tests failed' "$log" | tail -1)
      skips=$(grep -E 'Skipped' "$log" | grep -oE 'encoder[a-z_]*' | sort -u | tr '\n' ' ')
      # A skip on a GPU machine needs a look: encoder_cuda skips while the builder lacks the
      # encoder ops (ctest -V -R encoder_cuda prints why).
      if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then line test timeout "$t" "ctest cut; $sum"
      elif [ $rc -ne 0 ]; then line test failed "$t" "$sum (encoder-ctest.log)"
      else line test ok "$t" "$sum${skips:+; skipped: $skips}"; fi
      ;;
    sanitize)
      san=$(command -v compute-sanitizer || true)
      [ -z "$san" ] && [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" ] && san=${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer
      if [ -z "$san" ]; then line sanitize skipped "$t" "compute-sanitizer not found"; continue; fi
      if [ "$(uname -r)" = 4.4.0 ]; then # gVisor: the sanitizer refuses the device (gpu-run.sh)
        line sanitize skipped "$t" "gVisor (uname -r 4.4.0): compute-sanitizer does not support the device there"
        continue
      fi
      detail="" st=ok
      for tool in memcheck racecheck synccheck; do
        log=$OUT/encoder-$tool.log
        c=$(cap 150)
        if [ "$c" -lt 20 ]; then detail="$detail $tool: not run (budget);"; st=timeout; continue; fi
        # --report-api-errors no: as gpu-run.sh; an API error the code expects and clears is not a finding.
        timeout -k 10 "$c" "$san" --tool "$tool" --report-api-errors no --error-exitcode 99 "$BUILD/tests/encoder_kernels_cuda" quick >"$log" 2>&1
        rc=$?
        case $rc in
          0) detail="$detail $tool: clean;" ;;
          99) detail="$detail $tool: ERRORS ($(grep -m1 -E 'ERROR SUMMARY' "$log"));"; st=failed ;;
          124 | 137) detail="$detail $tool: timeout;"; [ $st = ok ] && st=timeout ;;
          *) detail="$detail $tool: exit $rc;"; st=failed ;;
        esac
      done
      line sanitize $st "$t" "encoder_kernels_cuda quick:$detail"
      ;;
    bench)
      detail="" st=ok
      for a in "fp32" "fp16" "fp16 --simt"; do # the kernel alone: BERT-base shape, 64 x 128 tokens
        c=$(cap 60)
        if [ "$c" -lt 10 ]; then st=timeout; continue; fi
        # shellcheck disable=SC2086  # "fp16 --simt" is two arguments
        timeout -k 10 "$c" "$BUILD/bench/attention-bench" --dtype $a --lengths 128x64 >>"$OUT/attention-bench-raw.txt" 2>&1 || st=failed
      done
      detail="raw: attention-bench-raw.txt;"
      if [ -z "$PY" ]; then
        detail="$detail no python with torch+CUDA: SDPA comparison not run"
      else
        for dt in fp16 bf16; do
          c=$(cap 240)
          if [ "$c" -lt 30 ]; then detail="$detail $dt: not run (budget);"; st=timeout; continue; fi
          timeout -k 10 "$c" "$PY" "$ROOT/bench/attention-bench.py" "$BUILD/bench/attention-bench" --dtype $dt >"$OUT/attention-bench-$dt.txt" 2>&1
          rc=$?
          if [ $rc -eq 0 ]; then detail="$detail $dt: attention-bench-$dt.txt;"
          elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then detail="$detail $dt: timeout;"; [ $st = ok ] && st=timeout
          else detail="$detail $dt: exit $rc;"; st=failed; fi
        done
      fi
      line bench $st "$t" "$detail"
      ;;
    *)
      echo "encoder-gpu-run: unknown stage '$s' (test | sanitize | bench)" >&2
      exit 2
      ;;
  esac
done
exit $RC
