#!/usr/bin/env bash
# Install the built tree into a temporary prefix, then build and run a consumer both ways:
# CMake's find_package(gpupipe CONFIG) (shared and static) and pkg-config (shared), and run the
# installed tools; nothing sets LD_LIBRARY_PATH: installed binaries find the installed library
# through their RUNPATH ($ORIGIN/../lib), consumers through the rpath their build gave them.
# usage: run.sh <build-dir> <source-dir>
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"
for f in include/gpupipe/gpupipe.h include/gpupipe/version.h; do
  [ -f "$prefix/$f" ] || { echo "missing $f after install"; exit 1; }
done
libdir=$(dirname "$(find "$prefix" -name 'libgpupipe.so' | head -1)")
[ -f "$libdir/libgpupipe.a" ] || { echo "static library not installed"; exit 1; }
soname=$(objdump -p "$libdir/libgpupipe.so" | awk '/SONAME/ {print $2}')
case "$soname" in libgpupipe.so.[0-9]*) ;; *) echo "bad SONAME '$soname'"; exit 1;; esac

# Consumers are built with the tree's flags, so a sanitizer build links its runtime.
cflags=$(sed -n 's/^CMAKE_C_FLAGS:STRING=//p' "$build/CMakeCache.txt")
ldflags=$(sed -n 's/^CMAKE_EXE_LINKER_FLAGS:STRING=//p' "$build/CMakeCache.txt")

# 1. CMake package.
cmake -S "$src/tests/install/consumer" -B "$tmp/cm" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="$cflags" -DCMAKE_EXE_LINKER_FLAGS="$ldflags" \
  > "$tmp/cm.log" || { cat "$tmp/cm.log"; exit 1; }
cmake --build "$tmp/cm" > "$tmp/cmb.log" || { cat "$tmp/cmb.log"; exit 1; }
"$tmp/cm/consumer_shared"
"$tmp/cm/consumer_static"
if [ -f "$build/lib/libgpupipe-cuda.so" ]; then # gpupipe/cuda.h through the targets alone
  "$tmp/cm/consumer_cuda_shared"
  "$tmp/cm/consumer_cuda_static"
fi

# 2. pkg-config.
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -std=c11 $cflags $ldflags $(pkg-config --cflags gpupipe) "$src/tests/install/consumer/consumer.c" \
  -o "$tmp/pc_consumer" $(pkg-config --libs gpupipe) -Wl,-rpath,"$libdir"
"$tmp/pc_consumer"
# gpupipe/cuda.h in a CUDA build, with pkg-config's flags alone (its GP_HAVE_* and CUDA headers).
if [ -f "$build/lib/libgpupipe-cuda.so" ]; then
  cc -std=c11 $cflags $ldflags $(pkg-config --cflags gpupipe) \
    "$src/tests/install/consumer/consumer_cuda.c" -o "$tmp/pc_cuda" $(pkg-config --libs gpupipe) \
    -Wl,-rpath,"$libdir"
  "$tmp/pc_cuda"
fi
# 3. The installed tools, from the prefix alone.
unset LD_LIBRARY_PATH
for tool in gp-infer gp-bench; do
  [ -x "$prefix/bin/$tool" ] || { echo "missing bin/$tool after install"; exit 1; }
  runpath=$(readelf -d "$prefix/bin/$tool" | sed -n 's/.*R\(UN\)\?PATH.*\[\(.*\)\]/\2/p')
  case "$runpath" in *'$ORIGIN/../lib'*) ;; *) echo "$tool: RUNPATH '$runpath' lacks \$ORIGIN/../lib"; exit 1;; esac
done
"$prefix/bin/gp-infer" --demo mlp --describe > "$tmp/describe.txt" ||
  { echo "installed gp-infer failed"; cat "$tmp/describe.txt"; exit 1; }
if [ -f "$build/lib/libgpupipe-cuda.so" ]; then
  [ -f "$libdir/libgpupipe-cuda.so" ] || { echo "CUDA module not installed beside libgpupipe"; exit 1; }
  runpath=$(readelf -d "$libdir/libgpupipe-cuda.so" | sed -n 's/.*R\(UN\)\?PATH.*\[\(.*\)\]/\2/p')
  case "$runpath" in *'$ORIGIN'*) ;; *) echo "module RUNPATH '$runpath' lacks \$ORIGIN"; exit 1;; esac
fi
if readelf -d "$libdir/libgpupipe.so" | grep NEEDED | grep -Ei 'cuda|cublas|cudnn'; then
  echo "installed libgpupipe.so needs a CUDA library"; exit 1
fi
# gp-bench links the shared library and, in CUDA builds, the static CUDA runtime: it too must
# load on a machine without CUDA libraries.
if readelf -d "$prefix/bin/gp-bench" | grep NEEDED | grep -Ei 'cuda|cublas|cudnn'; then
  echo "installed gp-bench needs a CUDA library"; exit 1
fi
echo "install: find_package (shared, static) and pkg-config consumers built and ran; installed tools ran"

# 4. libgpupipe-torch, only when built: its headers, gpupipe-torch.pc, and a C++ consumer of
#    gpupipe/torch.hpp both ways (no LibTorch headers or flags needed).
if [ -f "$libdir/libgpupipe-torch.so" ]; then
  for f in include/gpupipe/torch.h include/gpupipe/torch.hpp; do
    [ -f "$prefix/$f" ] || { echo "missing $f after install"; exit 1; }
  done
  "$tmp/cm/consumer_torch"
  c++ -std=c++17 $cflags $ldflags $(pkg-config --cflags gpupipe-torch) \
    "$src/tests/install/consumer/consumer_torch.cpp" -o "$tmp/pc_torch" \
    $(pkg-config --libs gpupipe-torch) -Wl,-rpath,"$libdir"
  "$tmp/pc_torch"
  echo "install: libgpupipe-torch consumers (find_package, pkg-config) built and ran"
elif [ -f "$prefix/include/gpupipe/torch.h" ]; then
  echo "gpupipe/torch.h installed without libgpupipe-torch"
  exit 1
fi
