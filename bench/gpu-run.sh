#!/usr/bin/env bash
# gpu-run.sh — what the CUDA backend needs checked on a machine with an NVIDIA GPU, in stages
# that each fit one command of a lent device machine (at most 10 minutes per command):
#
#   bash bench/gpu-run.sh [STAGE...]      (no stage: all of them, as far as the budget allows)
#
#   build     find nvcc, cuBLAS, cuDNN and NVTX (toolkit, or PyTorch's nvidia-* wheels: CUDA 13
#             nvidia/cu13/{lib,include}, older nvidia/{cublas,cudnn}/...), configure and build
#             into $BUILD; no GPU needed
#   test      ctest -L 'gpu|conformance': the GPU tests, and the model layers against PyTorch
#             (host and CUDA, every precision; the interpreter that has torch)
#   bench     build-gpu/bench/cuda-bench ((a)-(f): issue 8's B.3 figures), then the README's main job on the
#             GPU: gp-bench --workload mlp --backend cuda --svg, and again with the doctor's
#             knobs on (--cuda-graphs --spin-wait)
#   symptom   bench/symptom-bench.py: the naive PyTorch loop, PyTorch best practice and gpupipe
#             on the demo MLP and a ResNet-18 (items/s, p50/p99, NVML utilization, targets)
#   layers    bench/layer-bench.py: a ResNet-18 cut after each stage, gpupipe's compute per
#             batch against PyTorch's (which stages make the CNN slower than PyTorch's)
#   convs     bench/conv-bench.py: each distinct convolution of the ResNet-18 alone, conv.c's
#             cuDNN algorithm rule against every algorithm, NCHW against NHWC, the fused form,
#             the graph API's engines, PyTorch's F.conv2d (why the convolutions trail)
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck over the small gpu cases
#   compare   bench/model-bench.py (gpupipe vs PyTorch), when a python has torch with CUDA
#
# Every invocation first records the machine in $OUT/env.txt. The build directory persists
# between commands on the same (warm) machine: later stages reuse it and say so when it is
# missing. Logs go to $OUT (default ./out); $OUT/summary.txt gets one line per stage:
# ok | failed | timeout | skipped, the seconds it took and why.
#
# Time: the whole run is guarded (GPU_RUN_BUDGET_S, default 560 s, so one call fits a 600 s
# command with margin); each step's timeout is derived from what is left; a step cut short is
# reported "timeout". Exit status: 0 when every stage is ok or skipped, else 1.
#
# Environment: OUT, BUILD (default build-gpu), JOBS (default: all cores), CUDA_ARCH (default:
# the GPU's, else 90), GPU_RUN_BUDGET_S, PYTHON (for compare), COMPARE_ITEMS (default 2048),
# SAN_TOOLS (default "memcheck racecheck synccheck": split them over two commands when one is
# not enough), GPU_RUN_PACK=1 (all logs in one .tgz beside summary.txt: the device tool
# returns at most eight files). For testing this script without a GPU: GPU_RUN_ASSUME_GPU=1 (run the GPU
# stages anyway), GP_SANITIZER (a stand-in for compute-sanitizer), GPU_RUN_PREFER_WHEELS=1
# (cuBLAS, cuDNN, NVTX from the wheels even where the toolkit has them).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/out}
BUILD=${BUILD:-$ROOT/build-gpu}
BUDGET_S=${GPU_RUN_BUDGET_S:-560}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt

# ---- the whole-script guard -----------------------------------------------------------------
# Every step below runs under `timeout` within the budget; this outer guard also catches what
# nothing else would (a hang between steps) and still leaves a line in the summary.
if [ -z "${GPU_RUN_GUARDED:-}" ]; then
  # The stage running now (written by the run below): the guard's line names it.
  GPU_RUN_STAGE_FILE=$(mktemp "${TMPDIR:-/tmp}/gpu-run-stage.XXXXXX" 2>/dev/null) ||
    GPU_RUN_STAGE_FILE=/dev/null
  export GPU_RUN_GUARDED=1 GPU_RUN_T0=${GPU_RUN_T0:-$(date +%s)} GPU_RUN_STAGE_FILE
  timeout -k 5 $((BUDGET_S + 15)) bash "${BASH_SOURCE[0]}" "$@"
  rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    stage=$(cat "$GPU_RUN_STAGE_FILE" 2>/dev/null)
    echo "gpu-run: timeout: the whole-script guard stopped the run after $((BUDGET_S + 15)) s${stage:+, in stage $stage}" |
      tee -a "$SUMMARY"
  fi
  [ "$GPU_RUN_STAGE_FILE" = /dev/null ] || rm -f "$GPU_RUN_STAGE_FILE"
  # GPU_RUN_PACK=1: every log of $OUT in one archive beside summary.txt, because the device
  # tool returns at most eight files (build test bench alone writes nine). Runs after the
  # guard, so a run cut short still comes back whole.
  if [ -n "${GPU_RUN_PACK:-}" ]; then
    pack=gpu-run-$(date -u +%Y%m%d-%H%M%S).tgz
    if (cd "$OUT" && find . -maxdepth 1 -type f ! -name '*.tgz' -printf '%f\n' |
      tar czf "$pack" -T -); then
      find "$OUT" -maxdepth 1 -type f ! -name '*.tgz' ! -name summary.txt -delete
      echo "gpu-run: logs packed into $OUT/$pack (summary.txt kept beside it)"
    else
      echo "gpu-run: packing the logs failed; they are left as they are"
    fi
  fi
  exit $rc
fi

T0=$GPU_RUN_T0
DEADLINE=$((T0 + BUDGET_S))
RESERVE=5 # seconds kept for the summary after the last step
now() { date +%s; }
left() { echo $((DEADLINE - $(now))); }
# limit CAP: the seconds a step may take now: CAP, or what is left of the budget if less.
# `timeout -k 10` may add 10 s to a step that ignores SIGTERM: that is counted in.
limit() {
  local l=$(($(left) - RESERVE - 10))
  [ "$1" -lt "$l" ] && l=$1
  echo "$l"
}
is_timeout() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }

cd "$ROOT" || exit 1
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(build test bench symptom layers convs sanitize compare)
for s in "${STAGES[@]}"; do
  case $s in
    build | test | bench | symptom | layers | convs | sanitize | compare) ;;
    *)
      echo "gpu-run: unknown stage '$s' (build | test | bench | symptom | layers | convs | sanitize | compare)" >&2
      exit 2
      ;;
  esac
done

{
  echo
  echo "gpu-run $(date -u +%Y-%m-%dT%H:%M:%SZ): stages ${STAGES[*]}; budget ${BUDGET_S} s;" \
    "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (+ local changes)');" \
    "build dir $BUILD"
} >>"$SUMMARY"
# Detail lines of the current stage: collected here, written under its status line.
NOTES=$(mktemp "${TMPDIR:-/tmp}/gpu-run-notes.XXXXXX")
trap 'rm -f "$NOTES"' EXIT
note() { echo "    $*" >>"$NOTES"; }
notes_raw() { sed 's/^/      /' >>"$NOTES"; } # stdin, indented further

# ---- environment (every invocation) ---------------------------------------------------------
NVCC=$(command -v nvcc || true)
for d in "${CUDA_HOME:-}" /usr/local/cuda /usr/local/cuda-13 /usr/local/cuda-12; do
  [ -z "$NVCC" ] && [ -n "$d" ] && [ -x "$d/bin/nvcc" ] && NVCC=$d/bin/nvcc
done
CUDA_DIR=""
if [ -n "$NVCC" ]; then
  CUDA_DIR=$(cd "$(dirname "$NVCC")/.." && pwd)
  export PATH=$CUDA_DIR/bin:$PATH
fi

# Python interpreters to try, in order (the first python3 on PATH may not be the one with
# torch): $PYTHON, python3, /usr/bin/python3, python.
PYTHONS=()
for py in "${PYTHON:-}" python3 /usr/bin/python3 python; do
  [ -n "$py" ] || continue
  py=$(command -v "$py" 2>/dev/null) || continue
  [[ " ${PYTHONS[*]} " == *" $py "* ]] || PYTHONS+=("$py")
done

# Directories of the nvidia namespace package (PyTorch's nvidia-* wheels), one per line.
nvidia_roots() {
  {
    local py
    for py in ${PYTHONS[@]+"${PYTHONS[@]}"}; do
      timeout 30 "$py" -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null
    done
    ls -d /usr/local/lib/python3*/*-packages/nvidia /usr/lib/python3*/*-packages/nvidia \
      "${HOME:-/root}"/.local/lib/python3*/site-packages/nvidia 2>/dev/null
  } | awk 'NF && !seen[$0]++'
}
NV_ROOTS=$(nvidia_roots)

{
  echo "== date"; date -u
  echo "== commit"; git rev-parse HEAD 2>/dev/null; git status --short 2>/dev/null | head -20
  echo "== nvidia-smi"; timeout 30 nvidia-smi 2>&1
  echo "== GPU name, driver, clocks, PCIe (nvidia-smi --query-gpu)"
  timeout 30 nvidia-smi --format=csv --query-gpu=name,driver_version,compute_cap,memory.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,persistence_mode,compute_mode 2>&1
  echo "== CUDA version (driver)"; timeout 30 nvidia-smi 2>&1 | grep -o 'CUDA Version: *[0-9.]*'
  echo "== nvidia-smi -q -d CLOCK,PERFORMANCE"; timeout 30 nvidia-smi -q -d CLOCK,PERFORMANCE 2>&1 | head -80
  echo "== nvcc"; [ -n "$NVCC" ] && "$NVCC" --version 2>&1 | tail -2
  echo "== ls /usr/local/cuda/lib64/libcublas* libcudnn*"
  ls -l /usr/local/cuda/lib64/libcublas* /usr/local/cuda/lib64/libcudnn* 2>&1
  echo "== which compute-sanitizer ncu nsys"
  for t in compute-sanitizer ncu nsys; do printf '%s: %s\n' "$t" "$(command -v "$t" || echo 'not found')"; done
  echo "== python: torch, nvidia.cudnn"
  for py in ${PYTHONS[@]+"${PYTHONS[@]}"}; do
    printf '%s: ' "$py"
    # torch alone (cuDNN's wheel may be nvidia/cu13, not nvidia.cudnn: found or not, said apart)
    timeout 60 "$py" -c 'import importlib.util as u, torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), "cudnn", torch.backends.cudnn.version(), "nvidia.cudnn:", u.find_spec("nvidia") is not None and u.find_spec("nvidia.cudnn") is not None)' 2>&1 | tail -1
  done
  echo "== nvidia wheels (lib and include dirs)"
  for r in $NV_ROOTS; do ls -d "$r"/*/lib "$r"/*/include 2>/dev/null; done
  echo "== cpu"; lscpu 2>&1 | head -20
  echo "== tools"; command -v cmake ninja gcc python3 2>&1
  cmake --version 2>&1 | head -1; gcc --version 2>&1 | head -1
} >"$OUT/env.txt" 2>&1

GPU_OK=0
GPU_WHY="no GPU: nvidia-smi lists none"
if [ -n "${GPU_RUN_ASSUME_GPU:-}" ]; then
  GPU_OK=1 GPU_WHY=""
elif timeout 30 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  GPU_OK=1 GPU_WHY=""
  # A GPU is here: a test that finds no usable device fails instead of skipping
  # (tests/support/gpt.h gpt_no_device): an all-skipped run must not read "ok".
  export GPT_REQUIRE_DEVICE=${GPT_REQUIRE_DEVICE-1}
fi
need_gpu() {
  [ "$GPU_OK" = 1 ] && return 0
  ST_STATUS=skipped ST_DETAIL=$GPU_WHY
  return 1
}
need_build() {
  if [ ! -f "$BUILD/CMakeCache.txt" ] || [ ! -f "$BUILD/gpu-run.env" ]; then
    ST_STATUS=failed
    ST_DETAIL="no build in $BUILD: run the build stage first (on the same warm machine)"
    return 1
  fi
  # shellcheck disable=SC1091
  . "$BUILD/gpu-run.env"
  return 0
}
# budget_for CAP MIN: sets STEP_T to the seconds a step may take; fails the stage (skipped)
# when fewer than MIN are left.
budget_for() {
  STEP_T=$(limit "$1")
  if [ "$STEP_T" -lt "$2" ]; then
    ST_STATUS=skipped
    ST_DETAIL="time budget spent: $(left) s left, the step needs >= $2 s + $((RESERVE + 10)) s reserve"
    return 1
  fi
  return 0
}

# ---- build ----------------------------------------------------------------------------------
SHIM=$BUILD/libshim
has_sys_lib() { # has_sys_lib NAME: libNAME.so in the toolkit or the system's loader cache
  [ -z "${GPU_RUN_PREFER_WHEELS:-}" ] || return 1
  [ -e "$CUDA_DIR/lib64/lib$1.so" ] || [ -e "$CUDA_DIR/lib/x64/lib$1.so" ] ||
    ldconfig -p 2>/dev/null | grep -q "lib$1\.so "
}
# wheel_lib NAME: the first libNAME.so.N (else libNAME.so) in the wheels' lib dirs.
wheel_lib() {
  local r d f
  for r in $NV_ROOTS; do
    for d in "$r"/cu13/lib "$r"/cu12/lib "$r"/cublas/lib "$r"/cudnn/lib "$r"/*/lib; do
      for f in "$d/lib$1".so.[0-9]* "$d/lib$1.so"; do
        [ -e "$f" ] && echo "$f" && return 0
      done
    done
  done
  return 1
}
# wheel_include FILE: the first wheel include dir holding FILE.
wheel_include() {
  local r d
  for r in $NV_ROOTS; do
    for d in "$r"/cu13/include "$r"/cu12/include "$r"/cublas/include "$r"/cudnn/include \
      "$r"/nvtx/include "$r"/cuda_nvtx/include "$r"/*/include; do
      [ -e "$d/$1" ] && echo "$d" && return 0
    done
  done
  return 1
}
# shim_libs FILE PATTERN: link every PATTERN file of FILE's dir (versioned names, and
# sub-libraries loaded at run time) into the shim, plus the unversioned name CMake looks for.
LIBDIRS=()
shim_libs() {
  local dir f base
  dir=$(dirname "$1")
  mkdir -p "$SHIM/lib"
  for f in "$dir"/$2; do
    [ -e "$f" ] && ln -sfn "$f" "$SHIM/lib/$(basename "$f")"
  done
  base=$(basename "$1")
  ln -sfn "$1" "$SHIM/lib/${base%%.so*}.so"
  [[ " ${LIBDIRS[*]} " == *" $dir "* ]] || LIBDIRS+=("$dir")
}
# shim_headers DIR PATTERN...: link those headers of DIR into the shim. Only these: a wheel's
# include dir also holds CUDA runtime headers that must not shadow the toolkit's.
shim_headers() {
  local dir=$1 p f
  shift
  mkdir -p "$SHIM/include"
  for p in "$@"; do
    for f in "$dir"/$p; do [ -e "$f" ] && ln -sfn "$f" "$SHIM/include/$(basename "$f")"; done
  done
}

st_build() {
  if [ -z "$NVCC" ]; then
    ST_STATUS=failed ST_DETAIL="no nvcc (no CUDA toolkit): nothing can be built here"
    return
  fi
  budget_for 420 30 || return
  local t_stage=$STEP_T t_end=$(($(now) + STEP_T))
  local log=$OUT/build.log
  : >"$log"
  mkdir -p "$BUILD"
  # Marks a completed build for the later stages: gone until this build succeeds.
  rm -f "$BUILD/gpu-run.env"
  note "toolkit: $CUDA_DIR ($("$NVCC" --version | grep -o 'release [0-9.]*'))"
  rm -rf "$SHIM"
  local extra=() lib f d
  # cuBLAS / cuBLASLt: libraries and headers, each from the toolkit when it has them.
  for lib in cublas cublasLt; do
    if has_sys_lib "$lib"; then
      note "$lib: toolkit/system"
    elif f=$(wheel_lib "$lib"); then
      shim_libs "$f" "lib$lib.so*"
      note "$lib: wheel $f"
    else
      note "$lib: NOT FOUND (the CUDA backend needs it)"
    fi
  done
  if [ ! -e "$CUDA_DIR/include/cublasLt.h" ] || [ -n "${GPU_RUN_PREFER_WHEELS:-}" ]; then
    if d=$(wheel_include cublasLt.h); then
      shim_headers "$d" 'cublas*.h'
      note "cuBLAS headers: wheel $d"
    else
      note "cuBLAS headers: NOT FOUND"
    fi
  fi
  # cuDNN (optional): the toolkit, the system, or a wheel (nvidia/cudnn or nvidia/cu13).
  if has_sys_lib cudnn && { [ -e "$CUDA_DIR/include/cudnn.h" ] || [ -e /usr/include/cudnn.h ] ||
    [ -e /usr/include/x86_64-linux-gnu/cudnn.h ]; }; then
    note "cuDNN: toolkit/system"
  elif f=$(wheel_lib cudnn) && d=$(wheel_include cudnn.h); then
    shim_libs "$f" 'libcudnn*.so*'
    shim_headers "$d" 'cudnn*.h'
    export CUDNN_ROOT=$SHIM
    note "cuDNN: wheel $f"
  else
    note "cuDNN: not found (building without it)"
    extra+=(-DGP_WITH_CUDNN=OFF)
  fi
  # NVTX (header-only nvtx3): the toolkit's, else a wheel's.
  if [ ! -e "$CUDA_DIR/include/nvtx3/nvToolsExt.h" ] || [ -n "${GPU_RUN_PREFER_WHEELS:-}" ]; then
    if d=$(wheel_include nvtx3/nvToolsExt.h); then
      mkdir -p "$SHIM/include"
      ln -sfn "$d/nvtx3" "$SHIM/include/nvtx3"
      note "NVTX: wheel $d/nvtx3"
    else
      note "NVTX: nvtx3/nvToolsExt.h NOT FOUND (lib/cuda/backend.c includes it)"
    fi
  fi
  local ldp=""
  if [ -d "$SHIM" ]; then
    # -isystem (not CPATH): the wheels' headers warn like the toolkit's would, i.e. not at all.
    if [ -d "$SHIM/include" ]; then
      extra+=(-DCMAKE_C_FLAGS="-isystem $SHIM/include" -DCMAKE_CXX_FLAGS="-isystem $SHIM/include"
        -DCMAKE_CUDA_FLAGS="-isystem $SHIM/include")
    fi
    [ -d "$SHIM/lib" ] && extra+=(-DCMAKE_LIBRARY_PATH="$SHIM/lib")
    ldp=$SHIM/lib
    for d in ${LIBDIRS[@]+"${LIBDIRS[@]}"}; do ldp=$ldp:$d; done
  fi
  local arch=${CUDA_ARCH:-}
  if [ -z "$arch" ]; then
    arch=$(timeout 30 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
    arch=${arch:-90}
  fi
  # LibTorch from the PyTorch wheel, for libgpupipe-torch (optional: without it that target is
  # simply not built).
  local p tp=""
  for p in ${PYTHONS[@]+"${PYTHONS[@]}"}; do
    tp=$(timeout 120 "$p" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null) && break
    tp=""
  done
  if [ -n "$tp" ]; then
    # That interpreter also writes the torch tests' fixtures and runs the conformance tests
    # (the CMake defaults prefer /usr/bin/python3, which on the GPU machine has no torch).
    # TORCH_CUDA_ARCH_LIST: LibTorch's CMake then targets this GPU, not what it detects.
    extra+=(-DCMAKE_PREFIX_PATH="$tp" -DGP_TORCH_PYTHON="$p" -DGP_CONFORMANCE_PYTHON="$p")
    export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-${arch%?}.${arch: -1}}
    note "LibTorch: $tp (python $p, TORCH_CUDA_ARCH_LIST $TORCH_CUDA_ARCH_LIST)"
  fi
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  [ -f "$BUILD/CMakeCache.txt" ] && note "reusing $BUILD (incremental build)"
  local rc t
  echo "== configure (CUDA arch $arch)" >>"$log"
  timeout -k 10 "$(limit $((t_end - $(now))))" cmake -S "$ROOT" -B "$BUILD" ${gen[@]+"${gen[@]}"} \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGP_WITH_CUDA=ON -DGP_WERROR=OFF \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    ${extra[@]+"${extra[@]}"} >>"$log" 2>&1
  rc=$?
  # retry_without OPTION WHAT: a failed configure again with -DOPTION=OFF (cache kept); sets rc.
  retry_without() {
    note "$2 failed; configuring without it (see build.log)"
    extra+=("-D$1=OFF")
    t=$(limit $((t_end - $(now))))
    rc=124
    if [ "$t" -ge 5 ]; then
      timeout -k 10 "$t" cmake -S "$ROOT" -B "$BUILD" "-D$1=OFF" >>"$log" 2>&1
      rc=$?
    fi
  }
  if [ $rc -ne 0 ] && ! is_timeout $rc && [ -n "$tp" ]; then retry_without GP_WITH_TORCH "configure with LibTorch"; fi
  if [ $rc -ne 0 ] && ! is_timeout $rc && [[ " ${extra[*]} " != *GP_WITH_CUDNN=OFF* ]]; then
    retry_without GP_WITH_CUDNN "configure with cuDNN"
  fi
  if [ $rc -ne 0 ]; then
    is_timeout $rc && ST_STATUS=timeout || ST_STATUS=failed
    ST_DETAIL="configure (exit $rc), see build.log"
    tail -15 "$log" | notes_raw
    return
  fi
  echo "== build" >>"$log"
  local t_build
  t_build=$(limit $((t_end - $(now))))
  if [ "$t_build" -lt 10 ]; then
    ST_STATUS=timeout ST_DETAIL="configured, no time left to build (stage limit $t_stage s)"
    return
  fi
  timeout -k 10 "$t_build" cmake --build "$BUILD" -j "$JOBS" >>"$log" 2>&1
  rc=$?
  # ext/torch has only been compiled against older LibTorch headers: a build failure with
  # LibTorch is retried once without it (the core library and the tests do not need it).
  if [ $rc -ne 0 ] && ! is_timeout $rc && [ -n "$tp" ] &&
    [[ " ${extra[*]} " != *GP_WITH_TORCH=OFF* ]]; then
    grep -E 'error' "$log" | grep -m 5 -E 'ext/torch|torch' | notes_raw
    retry_without GP_WITH_TORCH "the build with LibTorch"
    if [ $rc -eq 0 ]; then
      t_build=$(limit $((t_end - $(now))))
      rc=124
      if [ "$t_build" -ge 10 ]; then
        timeout -k 10 "$t_build" cmake --build "$BUILD" -j "$JOBS" >>"$log" 2>&1
        rc=$?
      fi
    fi
  fi
  local what
  what=$(grep -o 'CUDA=[A-Z]* cuDNN=[A-Z]*' "$log" | tail -1)
  if is_timeout $rc; then
    ST_STATUS=timeout ST_DETAIL="build cut at $t_build s ($what); run the build stage again to finish it"
    return
  fi
  if [ $rc -ne 0 ]; then
    ST_STATUS=failed ST_DETAIL="build (exit $rc, $what), tail of build.log below"
    grep -E 'error|Error' "$log" | head -15 | notes_raw
    tail -10 "$log" | notes_raw
    return
  fi
  # What later stages (and a user) need to run the binaries.
  {
    echo "# written by bench/gpu-run.sh build: the environment the built binaries need"
    [ -n "$ldp" ] && echo "export LD_LIBRARY_PATH=$ldp\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    echo "export PATH=$CUDA_DIR/bin:\$PATH"
  } >"$BUILD/gpu-run.env"
  local nwarn
  nwarn=$(grep -c 'warning' "$log")
  ST_DETAIL="$what, CUDA arch $arch, $nwarn warning line(s) in build.log"
  # The binaries' libraries resolve (versioned names in the shim), as a user would run them.
  (
    # shellcheck disable=SC1091
    . "$BUILD/gpu-run.env"
    for b in bench/cuda-bench bench/gp-infer tests/gpu_handles; do
      [ -x "$BUILD/$b" ] && { echo "== ldd $b"; ldd "$BUILD/$b"; }
    done
  ) >"$OUT/ldd.txt" 2>&1
  if grep -q 'not found' "$OUT/ldd.txt"; then
    ST_STATUS=failed ST_DETAIL="$ST_DETAIL; ldd: libraries not found (ldd.txt)"
    grep 'not found' "$OUT/ldd.txt" | sort -u | head -5 | notes_raw
  fi
  if [ -n "$ldp" ]; then
    note "to run the binaries outside this script: export LD_LIBRARY_PATH=$ldp\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  else
    note "the binaries need no LD_LIBRARY_PATH (libraries from the toolkit/system)"
  fi
}

# ---- test -----------------------------------------------------------------------------------
st_test() {
  need_gpu || return
  need_build || return
  # GPU_RUN_TEST_CAP: the step's cap (default 330 s). Command 1 (build test convs, 420 s) sets
  # it lower so that a test hanging to its own TIMEOUT cannot leave convs under its 60 s minimum.
  budget_for "${GPU_RUN_TEST_CAP:-330}" 60 || return
  local log=$OUT/ctest-gpu.log rc stop
  # --stop-time ends the tests ctest is running when the step's time is up (they report
  # "Timeout"), so the log still has a summary; the outer timeout is the backstop. Local time
  # with no zone: ctest appends its own offset, and a time with two is silently ignored.
  stop=$(date -d "@$(($(now) + STEP_T - 5))" "+%H:%M:%S")
  (cd "$BUILD" && timeout -k 10 "$STEP_T" ctest -L 'gpu|conformance' --output-on-failure -j 4 \
    --stop-time "$stop" --output-junit "$OUT/ctest-gpu.xml") >"$log" 2>&1
  rc=$?
  grep -q 'The stop time has been passed' "$log" && rc=124
  # Every test's full output (ctest-gpu.log has only the failures').
  cp "$BUILD/Testing/Temporary/LastTest.log" "$OUT/ctest-gpu-all.log" 2>/dev/null
  local line failed skipped
  line=$(grep -E 'tests passed|tests failed' "$log" | tail -1)
  failed=$(sed -n '/The following tests FAILED:/,$p' "$log" | grep -E '^\s+[0-9]+ - ' | head -20)
  skipped=$(sed -n '/The following tests did not run:/,/^$/p' "$log" | grep -E '^\s+[0-9]+ - ' | head -20)
  if is_timeout $rc; then
    # ctest's line counts only the tests it started: say how many were listed.
    local total
    total=$(cd "$BUILD" && ctest -N -L 'gpu|conformance' 2>/dev/null | grep -o 'Total Tests: [0-9]*')
    ST_STATUS=timeout ST_DETAIL="ctest cut at $STEP_T s; ${line:-no summary}${total:+ (of ${total#Total Tests: } listed)}"
  elif [ $rc -ne 0 ]; then
    ST_STATUS=failed ST_DETAIL="ctest exit $rc; ${line:-no summary (see ctest-gpu.log)}"
  else
    ST_DETAIL=$line
  fi
  [ -n "$failed" ] && { note "failed:"; echo "$failed" | sed 's/^\s*//' | notes_raw; }
  [ -n "$skipped" ] && { note "skipped (on a GPU machine each needs a look):"; echo "$skipped" | sed 's/^\s*//' | notes_raw; }
  # A convolution none of whose cuDNN algorithms ran moves to the direct kernel (correct, slow:
  # the tests still pass); on a GPU each is a finding (model_cuda_ops prints the backend note).
  local direct
  direct=$(grep -c 'runs on the direct kernel' "$OUT/ctest-gpu-all.log" 2>/dev/null || true)
  [ "${direct:-0}" -gt 0 ] &&
    note "$direct backend notes say a conv2d runs on the direct kernel (ctest-gpu-all.log: 'runs on the direct kernel')"
  return 0
}

# ---- bench ----------------------------------------------------------------------------------
st_bench() {
  need_gpu || return
  need_build || return
  if [ ! -x "$BUILD/bench/cuda-bench" ]; then
    ST_STATUS=failed ST_DETAIL="cuda-bench not built in $BUILD"
    return
  fi
  budget_for 240 30 || return
  local rc
  timeout -k 10 "$STEP_T" "$BUILD/bench/cuda-bench" >"$OUT/cuda-bench.txt" 2>&1
  rc=$?
  grep -E '^\(|target|busy|peak pinned' "$OUT/cuda-bench.txt" | notes_raw
  if is_timeout $rc; then
    ST_STATUS=timeout ST_DETAIL="cuda-bench cut at $STEP_T s"
    return
  elif [ $rc -eq 77 ]; then
    ST_STATUS=failed ST_DETAIL="cuda-bench found no usable device: $(head -1 "$OUT/cuda-bench.txt")"
    return
  elif [ $rc -ne 0 ]; then
    ST_STATUS=failed ST_DETAIL="cuda-bench exit $rc (see cuda-bench.txt)"
    return
  fi
  ST_DETAIL="cuda-bench ok (cuda-bench.txt)"
  # The README's main job on the GPU (gp-bench --workload mlp, its table and SVG; RESULTS.md
  # "GPU figures"). --backend cuda: a fallback to the host would be a failure here. No CSV or
  # JSON: the device returns at most eight files, and the table holds the figures.
  if [ -x "$BUILD/bench/gp-bench" ]; then
    if budget_for 150 30; then
      local args=(--backend cuda) help
      help=$(timeout 30 "$BUILD/bench/gp-bench" --help 2>&1)
      [[ $help == *--workload* ]] && args+=(--workload mlp)
      [[ $help == *--svg* ]] && args+=(--svg "$OUT/gp-bench-cuda.svg")
      timeout -k 10 "$STEP_T" "$BUILD/bench/gp-bench" "${args[@]}" >"$OUT/gp-bench-cuda.txt" 2>&1
      rc=$?
      if is_timeout $rc; then
        ST_STATUS=timeout ST_DETAIL="$ST_DETAIL; gp-bench --backend cuda cut at $STEP_T s"
      elif [ $rc -ne 0 ]; then
        ST_STATUS=failed ST_DETAIL="$ST_DETAIL; gp-bench --backend cuda exit $rc (gp-bench-cuda.txt)"
      else
        ST_DETAIL="$ST_DETAIL; gp-bench --backend cuda ok (gp-bench-cuda.txt)"
        # The same sweep with the doctor's two knobs on (the enqueue verdict's cuda_graphs=1,
        # the inflight verdict's spin_wait=1): what taking its advice buys, in one run.
        local keep_status=$ST_STATUS keep_detail=$ST_DETAIL
        if [[ $help != *--cuda-graphs* ]]; then
          :
        elif ! budget_for 120 30; then # not a failure of the stage: say so and keep its verdict
          ST_DETAIL="$keep_detail; --cuda-graphs --spin-wait not run: $ST_DETAIL"
          ST_STATUS=$keep_status
        else
          timeout -k 10 "$STEP_T" "$BUILD/bench/gp-bench" --backend cuda --workload mlp \
            --cuda-graphs --spin-wait >"$OUT/gp-bench-cuda-knobs.txt" 2>&1
          rc=$?
          if is_timeout $rc; then
            [ "$ST_STATUS" = ok ] && ST_STATUS=timeout
            ST_DETAIL="$ST_DETAIL; gp-bench --cuda-graphs --spin-wait cut at $STEP_T s"
          elif [ $rc -ne 0 ]; then
            ST_STATUS=failed
            ST_DETAIL="$ST_DETAIL; gp-bench --cuda-graphs --spin-wait exit $rc (gp-bench-cuda-knobs.txt)"
          else
            ST_DETAIL="$ST_DETAIL; with --cuda-graphs --spin-wait ok (gp-bench-cuda-knobs.txt)"
          fi
        fi
      fi
    else
      ST_DETAIL="cuda-bench ok; gp-bench not run: $ST_DETAIL"
      ST_STATUS=timeout
    fi
  fi
}

# ---- sanitize -------------------------------------------------------------------------------
# Not under a sanitizer: the deliberate sticky fault (the trap is the point of it), the overlap
# timings (a sanitizer changes timing by design), the no-device cases, and the cases too big
# for a 10-minute command under memcheck/racecheck (model_cuda_ops, test_stress_cuda,
# gpu_no_alloc, the full-size encoder cases: bench/encoder-gpu-run.sh sanitizes the kernels'
# quick case, and LibTorch's CUDA test). Cases listed in SAN_LAST run after the others, while
# time is left. The stage as a whole stops starting cases after SAN_BUDGET_S (default: what is
# left), so a stage after it in the same command keeps its time.
SAN_SKIP='^(gpu_fault_sticky|gpu_overlap|gpu_overlap_3slots|gpu_nodev|gpu_nodev_range|gpu_auto_fallback|model_cuda_ops|test_stress_cuda|gpu_no_alloc|encoder_kernels_cuda|encoder_cuda|test_torch_cuda|torch_fixtures)$'
SAN_LAST='^(model_cuda_demo|model_cuda_graphs)$'
st_sanitize() {
  need_gpu || return
  need_build || return
  local san=${GP_SANITIZER:-}
  if [ -z "$san" ]; then
    san=$(command -v compute-sanitizer || true)
    for f in "$CUDA_DIR/bin/compute-sanitizer" "$CUDA_DIR/compute-sanitizer/compute-sanitizer"; do
      [ -z "$san" ] && [ -x "$f" ] && san=$f
    done
  fi
  if [ -z "$san" ]; then
    ST_STATUS=skipped ST_DETAIL="compute-sanitizer not found"
    return
  fi
  # gVisor (kernel 4.4.0): compute-sanitizer refuses the device there ("Device not supported",
  # then error 999; seen on the lent H200s, 2026-11-04): every case would read "failed".
  if [ -z "${GP_SANITIZER:-}" ] && [ "$(uname -r)" = 4.4.0 ]; then
    ST_STATUS=skipped ST_DETAIL="gVisor (uname -r 4.4.0): compute-sanitizer does not support the device there"
    return
  fi
  local san_end=$(($(now) + ${SAN_BUDGET_S:-$(left)}))
  local py=${PYTHONS[0]:-}
  if [ -z "$py" ]; then
    ST_STATUS=failed ST_DETAIL="no python3 to list the tests"
    return
  fi
  # name, env assignments, working directory, command, from ctest's JSON; separated by \x1f
  # (not a tab: `read` would merge a tab-separated empty field with its neighbour).
  local cases
  cases=$(cd "$BUILD" && ctest -L gpu --show-only=json-v1 2>/dev/null | "$py" -c '
import json, shlex, sys
for t in json.load(sys.stdin)["tests"]:
    env, wd = [], ""
    for p in t.get("properties", []):
        if p.get("name") == "ENVIRONMENT":
            env = p.get("value") or []
        if p.get("name") == "WORKING_DIRECTORY":
            wd = p.get("value") or ""
    print("\x1f".join([t["name"], " ".join(shlex.quote(e) for e in env), wd,
                        " ".join(shlex.quote(c) for c in t["command"])]))
')
  if [ -z "$cases" ]; then
    ST_STATUS=failed ST_DETAIL="could not list the gpu tests (ctest --show-only=json-v1)"
    return
  fi
  cases=$(printf '%s\n' "$cases" | awk -F$'\x1f' -v skip="$SAN_SKIP" -v last="$SAN_LAST" \
    '$1 ~ skip {next} $1 ~ last {l = l $0 "\n"; next} {print} END {printf "%s", l}')
  local tool name envs wd cmd rc t log any_timeout=0 any_err=0 any_fail=0 budget_out=0
  for tool in ${SAN_TOOLS:-memcheck racecheck synccheck}; do
    log=$OUT/$tool.log
    : >"$log"
    local clean=0 errs=0 fails=0 touts=0 nodev=0 notrun=0 errnames="" toutnames="" failnames=""
    while IFS=$'\x1f' read -r name envs wd cmd; do
      [ -n "$name" ] || continue
      t=$(limit 120)
      [ $((san_end - $(now))) -lt "$t" ] && t=$((san_end - $(now)))
      if [ "$t" -lt 20 ]; then
        notrun=$((notrun + 1))
        echo "== $name: not run, time budget spent" >>"$log"
        continue
      fi
      echo "== $name: $cmd (limit $t s)" >>"$log"
      # shellcheck disable=SC2086  # envs and cmd are shell-quoted by the lister above
      (cd "${wd:-$BUILD/tests}" && eval "timeout -k 10 $t env $envs \"\$san\" --tool $tool --report-api-errors no --error-exitcode 99 $cmd") >>"$log" 2>&1
      rc=$?
      echo "== $name: exit $rc" >>"$log"
      case $rc in
        0) clean=$((clean + 1)) ;;
        77) nodev=$((nodev + 1)) ;;
        99) errs=$((errs + 1)) errnames="$errnames $name" ;;
        124 | 137) touts=$((touts + 1)) toutnames="$toutnames $name" ;;
        *) fails=$((fails + 1)) failnames="$failnames $name" ;;
      esac
    done <<<"$cases"
    note "$tool: $clean clean, $errs with sanitizer errors${errnames:+ ($errnames )}, $fails failed${failnames:+ ($failnames )}, $touts timeout${toutnames:+ ($toutnames )}, $nodev skipped (no device), $notrun not run (budget)"
    grep -E 'ERROR SUMMARY: [1-9]' "$log" | sort | uniq -c | head -5 | notes_raw
    [ $errs -gt 0 ] && any_err=1
    [ $fails -gt 0 ] && any_fail=1
    [ $touts -gt 0 ] && any_timeout=1
    [ $notrun -gt 0 ] && budget_out=1
  done
  if [ $any_err = 1 ] || [ $any_fail = 1 ]; then
    ST_STATUS=failed ST_DETAIL="sanitizer errors or failed cases (see the lines below and <tool>.log)"
  elif [ $any_timeout = 1 ] || [ $budget_out = 1 ]; then
    ST_STATUS=timeout ST_DETAIL="some cases hit their time limit or were not run (budget)"
  else
    ST_DETAIL="every listed case clean under ${SAN_TOOLS:-memcheck racecheck synccheck}"
  fi
}

# ---- symptom and compare: gpupipe against PyTorch ------------------------------------------
# torch_python: sets PY to the first python with numpy and a CUDA build of torch, and checks
# the build has gp-infer; else sets the stage's status and fails.
torch_python() {
  local p
  PY=""
  for p in ${PYTHONS[@]+"${PYTHONS[@]}"}; do
    if timeout 120 "$p" -c 'import sys, numpy, torch; sys.exit(0 if torch.cuda.is_available() else 3)' >/dev/null 2>&1; then
      PY=$p
      break
    fi
  done
  if [ -z "$PY" ]; then
    ST_STATUS=skipped ST_DETAIL="no python with numpy and a CUDA build of torch (tried: ${PYTHONS[*]:-none})"
    return 1
  fi
  need_build || return 1
  if [ ! -x "$BUILD/bench/gp-infer" ]; then
    ST_STATUS=failed ST_DETAIL="gp-infer not built in $BUILD"
    return 1
  fi
}

# run_py_bench NAME SCRIPT LOG CAP MIN PATTERN [TOOL ARG...]: a PyTorch-side bench of bench/ on
# CUDA with the interpreter that has torch, its output in $OUT/LOG, the lines matching PATTERN
# in the summary; the step's status from its exit. The script's arguments: gp-infer and a work
# folder in $BUILD, or TOOL (a binary the build must have made) and the ARGs.
run_py_bench() {
  local name=$1 script=$2 log=$3 cap=$4 min=$5 pat=$6
  shift 6
  need_gpu || return
  torch_python || return
  local args=("$BUILD/bench/gp-infer" --device cuda --work "$BUILD/$name-work")
  if [ $# -gt 0 ]; then
    if [ ! -x "$1" ]; then
      ST_STATUS=failed ST_DETAIL="$1 not built (CUDA and cuDNN needed: see build.log)"
      return
    fi
    args=("$@")
  fi
  budget_for "$cap" "$min" || return
  # GPU_RUN_STEP_S: the script's own budget (conv-bench.py --budget: it leaves out, and says so,
  # what would not fit, instead of being cut with its tables unprinted).
  GPU_RUN_STEP_S=$STEP_T timeout -k 10 "$STEP_T" "$PY" "$ROOT/bench/$script" "${args[@]}" \
    >"$OUT/$log" 2>&1
  local rc=$?
  grep -E "$pat" "$OUT/$log" | notes_raw
  if is_timeout $rc; then
    ST_STATUS=timeout ST_DETAIL="$script cut at $STEP_T s ($log has what finished)"
  elif [ $rc -ne 0 ]; then
    ST_STATUS=failed ST_DETAIL="$script exit $rc: a run failed or disagreed ($log)"
    tail -5 "$OUT/$log" | grep -v -E "$pat|^[[:space:]]*$" | notes_raw # (matching lines: above)
  else
    ST_DETAIL="$script ok ($log)"
  fi
}

st_symptom() {
  run_py_bench symptom symptom-bench.py symptom.txt 420 120 '^(\||targets|symptom-bench)'
}

# ---- layers ---------------------------------------------------------------------------------
# bench/layer-bench.py: the ResNet-18 cut after each stage, gpupipe's compute per batch against
# PyTorch's (fp32; fp16 NCHW and channels_last): which stages make the CNN slower; then the
# whole model op by op (gp-infer --profile at one slot, PyTorch's aten ops by torch.profiler):
# which op. The third run's layers took 121 s; the per-op pass adds one gp-infer run and one
# profiled PyTorch pass per precision and layout (an estimate: under a minute).
st_layers() {
  run_py_bench layer layer-bench.py layers.txt 360 90 \
    '^(\| (stage|stem|layer[0-9]|fc \(whole)|\|---\|---\|---\|---\|---|fp|layer-bench)'
}

# ---- convs ----------------------------------------------------------------------------------
# bench/conv-bench.py: each distinct convolution of the ResNet-18 alone (fp32, fp16): conv.c's
# algorithm rule against every algorithm, NCHW against NHWC, the fused form, the graph API's
# engines (in fp16 also those that sum in 16 bits), PyTorch's F.conv2d. No --torch-cudnn rerun
# under PyTorch's cuDNN since the third run settled that the version is not the gap (conv.c's
# rule: the same weighted totals under 9.14 and 9.19, 23.605 / 23.644 ms fp32, 6.225 / 6.225
# fp16): its time goes to the stem's padded shapes and the (r) pass.
st_convs() {
  run_py_bench conv conv-bench.py convs.txt 280 60 '^(\||fp|conv-bench\.py)' \
    "$BUILD/bench/conv-bench"
}

st_compare() {
  need_gpu || return
  if [ ! -f "$ROOT/bench/model-bench.py" ]; then
    ST_STATUS=skipped ST_DETAIL="bench/model-bench.py is not in this tree"
    return
  fi
  torch_python || return
  local py=$PY
  local help args=() prec rc ran=0
  help=$(timeout 120 "$py" "$ROOT/bench/model-bench.py" --help 2>&1)
  [[ $help == *--device* ]] && args+=(--device cuda)
  [[ $help == *--items* ]] && args+=(--items "${COMPARE_ITEMS:-2048}")
  [[ $help == *--work* ]] && args+=(--work "$BUILD/model-bench-work")
  # A step (one gp-infer run, one PyTorch timing) took < 5 s on the H200; a hung one (PyTorch's
  # CUDA graphs, both runs of 2026-11-26) ends the process and the rows after it: stop it soon.
  [[ $help == *--step-timeout* ]] && args+=(--step-timeout 60)
  local precs=(fp32)
  [[ $help == *--precision* ]] && precs=(fp32 fp16)
  # One process per model: a step that hangs ends its process (model-bench's watchdog), so it
  # costs that model's remaining rows only, not every row after it.
  local models=("") m one log_m st det
  [[ $help == *--models* ]] && models=(mlp cnn resnet18)
  det="$(basename "$py"): $(timeout 60 "$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -1)"
  for prec in "${precs[@]}"; do
    local a=("${args[@]}") said=""
    [[ $help == *--precision* ]] && a+=(--precision "$prec")
    : >"$OUT/compare-$prec.txt"
    for m in "${models[@]}"; do
      one=${m:-all}
      st=$ST_STATUS
      if ! budget_for 200 45; then # (budget_for sets the stage's status and detail: undone)
        said="$said, $one not run (time budget spent)"
        ST_STATUS=$st
        [ "$ST_STATUS" = ok ] && ST_STATUS=timeout
        continue
      fi
      log_m=$(mktemp "${TMPDIR:-/tmp}/gpu-run-compare.XXXXXX")
      # The MLP and the small CNN run 20 batches of 256 in a few ms (the third run: 1.3 to
      # 8 ms), fill and drain a large part of that: 100 batches at least for them (their
      # batch-1 points, 2048 items, are long already); the ResNet-18's windows are >= 0.1 s.
      local mb=()
      [[ $m != resnet18 && $help == *--min-batches* ]] && mb=(--min-batches 100)
      timeout -k 10 "$STEP_T" "$py" "$ROOT/bench/model-bench.py" "$BUILD/bench/gp-infer" \
        "${a[@]}" "${mb[@]}" ${m:+--models "$m"} >"$log_m" 2>&1
      rc=$?
      cat "$log_m" >>"$OUT/compare-$prec.txt"
      ran=$((ran + 1))
      if is_timeout $rc; then
        [ "$ST_STATUS" = ok ] && ST_STATUS=timeout
        said="$said, $one cut at $STEP_T s"
      elif [ $rc -ne 0 ]; then
        ST_STATUS=failed
        if grep -q '^Timeout (' "$log_m"; then
          said="$said, $one exit $rc (a step hung: its stacks in the log)"
        else
          said="$said, $one exit $rc"
        fi
        grep -v '^|' "$log_m" | grep -E 'FAILED|failed|Error' | tail -3 | cut -c1-300 | notes_raw
      else
        said="$said, $one ok"
      fi
      rm -f "$log_m"
    done
    # The table once per precision (each model's run prints its own header).
    grep -E '^\|' "$OUT/compare-$prec.txt" | awk '!(/^\| model \||^\|---/ && seen[$0]++)' | notes_raw
    det="$det; $prec:${said#,} (compare-$prec.txt)"
  done
  ST_DETAIL=$det
  # gpupipe + LibTorch vs PyTorch on one TorchScript model (bench/torch-bench.py), appended to
  # the fp32 log: the device returns at most eight files.
  # It runs whatever model-bench did, and says why when it does not.
  local st0=$ST_STATUS det0=$ST_DETAIL
  if [ ! -x "$BUILD/bench/torch-bench" ] || [ ! -f "$ROOT/bench/torch-bench.py" ]; then
    ST_DETAIL="$ST_DETAIL; torch-bench not run: not in this build (no LibTorch: see build.log)"
  elif ! budget_for 300 60; then
    ST_STATUS=$st0 ST_DETAIL="$det0; torch-bench not run: time budget spent ($(left) s left)"
    [ "$ST_STATUS" = ok ] && ST_STATUS=timeout
  else
    timeout -k 10 "$STEP_T" "$py" "$ROOT/bench/torch-bench.py" --bench "$BUILD/bench/torch-bench" \
      --device cuda >>"$OUT/compare-fp32.txt" 2>&1
    rc=$?
    if is_timeout $rc; then
      [ "$ST_STATUS" = ok ] && ST_STATUS=timeout
      ST_DETAIL="$ST_DETAIL; torch-bench cut at $STEP_T s (compare-fp32.txt)"
    elif [ $rc -ne 0 ]; then
      ST_STATUS=failed ST_DETAIL="$ST_DETAIL; torch-bench exit $rc (compare-fp32.txt)"
    else
      ST_DETAIL="$ST_DETAIL; torch-bench ok"
    fi
  fi
}

# ---- run ------------------------------------------------------------------------------------
RC=0
for s in "${STAGES[@]}"; do
  ST_STATUS=ok ST_DETAIL=""
  t_s=$(now)
  : >"$NOTES"
  echo "$s (started $((t_s - T0)) s into the run)" >"${GPU_RUN_STAGE_FILE:-/dev/null}"
  "st_$s"
  printf '%-9s %-8s %4d s  %s\n' "$s:" "$ST_STATUS" $(($(now) - t_s)) "$ST_DETAIL" >>"$SUMMARY"
  cat "$NOTES" >>"$SUMMARY"
  case $ST_STATUS in ok | skipped) ;; *) RC=1 ;; esac
done
echo "done in $(($(now) - T0)) s of $BUDGET_S" >>"$SUMMARY"
# The summary of this invocation, on the terminal too.
awk '/^gpu-run [0-9]/ {buf = ""} {buf = buf $0 "\n"} END {printf "%s", buf}' "$SUMMARY"
[ "$RC" -eq 0 ] # the exit status
