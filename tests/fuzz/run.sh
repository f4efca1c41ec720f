#!/bin/sh
# Build the model loader's libFuzzer target with clang (ASan + UBSan) and run it for a bounded
# time on a copy of the seed corpus. Exits nonzero on a crash, a leak, a sanitizer report or a
# build failure; the crashing input is left in <build>/fuzz-artifacts/.
#
# usage: tests/fuzz/run.sh SECONDS [BUILD_DIR]      (CI: tests/fuzz/run.sh 60)
set -eu
secs=${1:?usage: run.sh SECONDS [BUILD_DIR]}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${2:-$root/build-fuzz}
cc=${CC:-clang}
command -v "$cc" >/dev/null 2>&1 || { echo "run.sh: $cc not found (the fuzzer needs clang)" >&2; exit 2; }
gen=""
command -v ninja >/dev/null 2>&1 && gen="-G Ninja"

mkdir -p "$build"
# shellcheck disable=SC2086
CC="$cc" cmake -S "$root" -B "$build" $gen -DGP_BUILD_FUZZ=ON -DGP_BUILD_TESTS=ON \
    -DGP_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
    >"$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 2; }
cmake --build "$build" -j2 --target fuzz_model_loader

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here"/corpus/* "$work"/
mkdir -p "$build/fuzz-artifacts"
# -timeout: one input taking > 10 s is a hang; -rss_limit_mb bounds memory per run.
"$build/tests/fuzz_model_loader" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -dict="$here/fuzz.dict" -artifact_prefix="$build/fuzz-artifacts/" \
    -print_final_stats=1 "$work"
echo "run.sh: no crash in $secs s"
