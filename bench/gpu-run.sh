#!/usr/bin/env bash
# gpu-run.sh — everything the CUDA backend needs checked on a machine with an NVIDIA GPU, in one
# call (a lent device machine runs one command of at most 10 minutes):
#   1. find the toolkit, cuBLAS and cuDNN (system, or inside PyTorch's nvidia-* Python
#      packages), configure and build;
#   2. ctest -L gpu;
#   3. cuda-bench (the issue's (a)-(e)), and bench/torch-bench.py when LibTorch was found;
#   4. compute-sanitizer memcheck, racecheck and synccheck over the GPU tests, as far as the
#      time budget allows.
# Logs go to "$OUT" (default ./out), eight files at most:
#   env.txt build.log ctest-gpu.log cuda-bench.txt memcheck.log racecheck.log synccheck.log
#   summary.txt
# Environment: OUT, BUILD (default build-gpu), BUDGET_S (default 540: stop starting sanitizer
# runs after this many seconds), JOBS (default: all cores).
# Run from anywhere: bash bench/gpu-run.sh
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/out}
BUILD=${BUILD:-$ROOT/build-gpu}
BUDGET_S=${BUDGET_S:-540}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
T0=$(date +%s)
mkdir -p "$OUT" "$BUILD"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(($(date +%s) - T0)); }

cd "$ROOT" || exit 1
say "gpu-run: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (+ local changes)')"

# ---- 1. environment ------------------------------------------------------------------------
{
  echo "== date"; date -u
  echo "== commit"; git rev-parse HEAD 2>/dev/null; git status --short 2>/dev/null | head -20
  echo "== nvidia-smi"; nvidia-smi 2>&1
  echo "== nvidia-smi -q (clocks, PCIe)"; nvidia-smi -q -d CLOCK,PERFORMANCE 2>&1 | head -60
  nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current,compute_cap,driver_version --format=csv 2>&1
  echo "== cpu"; lscpu 2>&1 | head -20
  echo "== tools"; command -v cmake ninja nvcc compute-sanitizer python3 gcc 2>&1
  cmake --version 2>&1 | head -1; gcc --version 2>&1 | head -1
} >"$OUT/env.txt" 2>&1

# nvcc: PATH, /usr/local/cuda, CUDA_HOME.
NVCC=$(command -v nvcc || true)
for d in "${CUDA_HOME:-}" /usr/local/cuda /usr/local/cuda-13 /usr/local/cuda-12; do
  [ -z "$NVCC" ] && [ -n "$d" ] && [ -x "$d/bin/nvcc" ] && NVCC=$d/bin/nvcc
done
if [ -z "$NVCC" ]; then
  say "FAIL: no nvcc (no CUDA toolkit): nothing can be built here"
  exit 1
fi
CUDA_DIR=$(cd "$(dirname "$NVCC")/.." && pwd)
export PATH=$CUDA_DIR/bin:$PATH
"$NVCC" --version | tail -2 >>"$OUT/env.txt"
say "toolkit: $CUDA_DIR ($("$NVCC" --version | grep -o 'release [0-9.]*'))"

# Libraries from PyTorch's wheels when the system has none: a shim dir with the unversioned
# .so names CMake looks for, headers on CPATH, the libraries on LD_LIBRARY_PATH.
SHIM=$BUILD/libshim
wheel_dir() { python3 -c "import nvidia.$1 as m; print(m.__path__[0])" 2>/dev/null; }
shim_lib() { # shim_lib <wheel module> <lib name without .so>
  local d; d=$(wheel_dir "$1") || return 1
  [ -n "$d" ] || return 1
  local so; so=$(ls "$d"/lib/lib"$2".so* 2>/dev/null | head -1)
  [ -n "$so" ] || return 1
  mkdir -p "$SHIM/lib" "$SHIM/include"
  ln -sf "$so" "$SHIM/lib/lib$2.so"
  for h in "$d"/include/*.h; do [ -e "$h" ] && ln -sf "$h" "$SHIM/include/"; done
  echo "$d"
}
# Runs in the parent shell (shim_lib runs in $(...), where an export would be lost).
add_lib_path() { export LD_LIBRARY_PATH=$1/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; }
has_sys_lib() { # has_sys_lib <lib name>
  [ -e "$CUDA_DIR/lib64/lib$1.so" ] || [ -e "$CUDA_DIR/lib/x64/lib$1.so" ] ||
    ldconfig -p 2>/dev/null | grep -q "lib$1\.so "
}
CMAKE_EXTRA=()
for pair in cublas:cublas cublas:cublasLt; do
  mod=${pair%%:*}; lib=${pair##*:}
  if ! has_sys_lib "$lib"; then
    if d=$(shim_lib "$mod" "$lib"); then
      add_lib_path "$d"; say "$lib: from the Python wheel $d"
    else
      say "$lib: not found"
    fi
  fi
done
if has_sys_lib cudnn && { [ -e "$CUDA_DIR/include/cudnn.h" ] || [ -e /usr/include/cudnn.h ] ||
                          [ -e /usr/include/x86_64-linux-gnu/cudnn.h ]; }; then
  say "cuDNN: system"
elif d=$(shim_lib cudnn cudnn); then
  add_lib_path "$d"
  export CUDNN_ROOT=$SHIM
  say "cuDNN: from the Python wheel $d"
else
  say "cuDNN: not found (building without it)"
  CMAKE_EXTRA+=(-DGP_WITH_CUDNN=OFF)
fi
if [ -d "$SHIM" ]; then
  export CPATH=$SHIM/include${CPATH:+:$CPATH}
  CMAKE_EXTRA+=(-DCMAKE_LIBRARY_PATH="$SHIM/lib")
fi

# LibTorch from PyTorch's wheel: builds libgpupipe-torch, whose CUDA test (test_torch_cuda) runs
# with the gpu tests and whose bench runs after cuda-bench (into cuda-bench.txt).
if TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) &&
   [ -n "$TORCH_PREFIX" ]; then
  CMAKE_EXTRA+=(-DCMAKE_PREFIX_PATH="$TORCH_PREFIX")
  say "LibTorch: $TORCH_PREFIX"
fi

# Build for this GPU only (faster); 90 when the query fails.
CC_ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
CC_ARCH=${CC_ARCH:-90}
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
{
  echo "== configure"
  cmake -S "$ROOT" -B "$BUILD" ${GEN[@]+"${GEN[@]}"} -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGP_WITH_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$CC_ARCH" ${CMAKE_EXTRA[@]+"${CMAKE_EXTRA[@]}"}
} >"$OUT/build.log" 2>&1
CONF=$?
if [ $CONF -ne 0 ] && [ -n "${TORCH_PREFIX:-}" ]; then
  say "configure with LibTorch failed; retrying without it (see build.log)"
  CMAKE_EXTRA+=(-DGP_WITH_TORCH=OFF)
  cmake -S "$ROOT" -B "$BUILD" -DGP_WITH_TORCH=OFF >>"$OUT/build.log" 2>&1
  CONF=$?
fi
if [ $CONF -ne 0 ] && [[ ! " ${CMAKE_EXTRA[*]} " =~ GP_WITH_CUDNN=OFF ]]; then
  say "configure with cuDNN failed; retrying without it (see build.log)"
  CMAKE_EXTRA+=(-DGP_WITH_CUDNN=OFF)
  cmake -S "$ROOT" -B "$BUILD" ${GEN[@]+"${GEN[@]}"} -DGP_WITH_CUDNN=OFF >>"$OUT/build.log" 2>&1
fi
echo "== build" >>"$OUT/build.log"
if ! cmake --build "$BUILD" -j "$JOBS" >>"$OUT/build.log" 2>&1; then
  say "FAIL: build (tail of build.log follows)"
  tail -30 "$OUT/build.log" | tee -a "$SUMMARY"
  exit 1
fi
say "build: ok ($(grep -o 'CUDA=[A-Z]* cuDNN=[A-Z]*' "$OUT/build.log" | tail -1)), $(elapsed) s"

# ---- 2. gpu tests --------------------------------------------------------------------------
ctest --test-dir "$BUILD" -L gpu --output-on-failure -j 4 --timeout 300 >"$OUT/ctest-gpu.log" 2>&1
CT=$?
say "ctest -L gpu: exit $CT; $(grep -E 'tests passed|tests failed' "$OUT/ctest-gpu.log" | tail -1)"
grep -E '\*\*\*(Failed|Skipped|Timeout)|Not Run|Exception' "$OUT/ctest-gpu.log" | tee -a "$SUMMARY"
say "after tests: $(elapsed) s"

# ---- 3. benchmark --------------------------------------------------------------------------
if [ -x "$BUILD/bench/cuda-bench" ]; then
  timeout 240 "$BUILD/bench/cuda-bench" >"$OUT/cuda-bench.txt" 2>&1
  say "cuda-bench: exit $?"
  grep -E '^\(|target|peak' "$OUT/cuda-bench.txt" | tee -a "$SUMMARY"
else
  say "cuda-bench: not built"
fi
if [ -x "$BUILD/bench/torch-bench" ]; then
  { echo; echo "== torch-bench.py (ResNet-18 TorchScript: naive loop, PyTorch batch 256, gpupipe)"
    timeout 300 python3 "$ROOT/bench/torch-bench.py" --bench "$BUILD/bench/torch-bench" \
      --device cuda --json "$BUILD/torch-bench.json"; echo "torch-bench.py: exit $?"
  } >>"$OUT/cuda-bench.txt" 2>&1
  say "$(grep -E '^torch-bench.py: exit' "$OUT/cuda-bench.txt")"
  grep -E '^\| \(' "$OUT/cuda-bench.txt" | tee -a "$SUMMARY"
else
  say "torch-bench: not built (no LibTorch found)"
fi
say "after bench: $(elapsed) s"

# ---- 4. compute-sanitizer ------------------------------------------------------------------
SAN=$(command -v compute-sanitizer || true)
[ -z "$SAN" ] && [ -x "$CUDA_DIR/bin/compute-sanitizer" ] && SAN=$CUDA_DIR/bin/compute-sanitizer
[ -z "$SAN" ] && [ -x "$CUDA_DIR/compute-sanitizer/compute-sanitizer" ] && SAN=$CUDA_DIR/compute-sanitizer/compute-sanitizer
if [ -z "$SAN" ] && d=$(wheel_dir cuda_sanitizer_api) && [ -x "$d/compute-sanitizer/compute-sanitizer" ]; then
  SAN=$d/compute-sanitizer/compute-sanitizer # the nvidia-cuda-sanitizer-api wheel
fi
SAN=${GP_SANITIZER:-$SAN} # override (used to dry-run this script without a GPU)
# The cases run under the sanitizer: every gpu test but the deliberate sticky fault (the
# trap is the point of it) and the overlap timings (a sanitizer changes timing by design).
# API errors are not reported: several cases provoke them on purpose (invalid launch, an
# uncapturable compute, no device); memory, race and sync errors are.
SKIP_RE='^(gpu_fault_sticky|gpu_overlap|gpu_overlap_3slots|gpu_nodev|gpu_nodev_range|gpu_auto_fallback)$'
CASES=$(cd "$BUILD" && ctest -L gpu --show-only=json-v1 2>/dev/null | python3 -c '
import json, sys
for t in json.load(sys.stdin)["tests"]:
    print(t["name"] + "\t" + " ".join(t["command"]))
' 2>/dev/null)
if [ -z "$SAN" ]; then
  say "compute-sanitizer: not found"
elif [ -z "$CASES" ]; then
  say "compute-sanitizer: could not list the tests (needs python3)"
else
  for tool in memcheck racecheck synccheck; do
    log=$OUT/$tool.log
    : >"$log"
    pass=0 fail=0 nodev=0 skipped=0
    while IFS=$'\t' read -r name cmd; do
      [[ $name =~ $SKIP_RE ]] && continue
      if [ "$(elapsed)" -ge "$BUDGET_S" ]; then
        skipped=$((skipped + 1)); echo "== $name: not run, time budget spent" >>"$log"; continue
      fi
      echo "== $name: $cmd" >>"$log"
      # shellcheck disable=SC2086
      (cd "$BUILD/tests" && timeout 120 "$SAN" --tool "$tool" --report-api-errors no \
        --error-exitcode 99 $cmd) >>"$log" 2>&1
      rc=$?
      echo "== $name: exit $rc" >>"$log"
      case $rc in
        0) pass=$((pass + 1)) ;;
        77) nodev=$((nodev + 1)) ;;
        *) fail=$((fail + 1)) ;;
      esac
    done <<<"$CASES"
    say "compute-sanitizer $tool: $pass clean, $fail with errors or failures, $nodev skipped (no device), $skipped not run (budget)"
    grep -E '^== .*exit [^07]|ERROR SUMMARY: [1-9]' "$log" | head -10 | tee -a "$SUMMARY"
  done
fi
say "done in $(elapsed) s"
