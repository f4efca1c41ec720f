#!/usr/bin/env bash
# The CUDA module is optional at run time: a program linked to the shared libgpupipe must run on
# the host backend, and say why, when
#   1. the module is not installed beside the library (nor on the loader path);
#   2. the module is there but cannot be loaded (a dependency is missing: a stand-in module);
#   3. the real module is there but the CUDA libraries are not on the machine (a mount namespace
#      hides the toolkit; skipped with the reason when namespaces are not permitted);
# and libgpupipe.so itself must need no CUDA library (readelf -d).
# usage: run.sh <build-dir> <probe> <cc> <has-cuda: 1 | 0>
set -euo pipefail
build=$1 probe=$2 cc=${3:-cc} has_cuda=${4:-1}
lib=$build/lib
tmp=$(mktemp -d)
# Case 1b's directory: a short, known prefix (not $TMPDIR's), so the stats' cut lands among
# its 2-byte characters.
short=$(mktemp -d /tmp/gp.XXXXXX)
trap 'rm -rf "$tmp" "$short"' EXIT

echo "== libgpupipe.so needs:"
readelf -d "$lib/libgpupipe.so" | grep NEEDED | tee "$tmp/needed"
if grep -Ei 'cuda|cublas|cudnn|nvrtc|nvidia' "$tmp/needed"; then
  echo "FAIL: libgpupipe.so needs a CUDA library"; exit 1
fi

if [ "$has_cuda" != 1 ]; then
  # Built without CUDA: nothing to load; AUTO says so and runs on the host.
  echo "== a build without CUDA (cases 1-3 need a CUDA build)"
  "$probe" "this build has no CUDA backend"
  exit 0
fi

# The library without its module, found first through LD_LIBRARY_PATH.
# A deep directory, so the reason (it names the directory) is longer than a 512-byte line too.
long=$(printf 'd%.0s' $(seq 1 200))
nomod="$tmp/nomod/$long/$long"
mkdir -p "$nomod"
cp -P "$lib"/libgpupipe.so* "$nomod/"
echo "== 1. no module (its reason names the directory: longer than the stats field, cut with ...;"
echo "      the WARN line has it whole)"
LD_LIBRARY_PATH="$nomod" "$probe" "libgpupipe-cuda.so not found" cut "the loader's search path)"

echo "== 1b. a directory named in UTF-8, at two offsets: the stats' cut keeps whole characters"
for pre in "" x; do
  u="$short/u$pre/$pre$(printf '\303\251%.0s' $(seq 1 100))"
  mkdir -p "$u"
  cp -P "$lib"/libgpupipe.so* "$u/"
  LD_LIBRARY_PATH="$u" "$probe" "libgpupipe-cuda.so not found" cut "the loader's search path)"
done

echo "== 2. a module whose dependency is missing"
mkdir -p "$tmp/badmod" "$tmp/absent"
cp -P "$lib"/libgpupipe.so* "$tmp/badmod/"
"$cc" -shared -fPIC -o "$tmp/absent/libgp_absent.so" "$(dirname "$0")/absent.c"
"$cc" -shared -fPIC -o "$tmp/badmod/libgpupipe-cuda.so" "$(dirname "$0")/fake_module.c" \
  -L"$tmp/absent" -lgp_absent
rm "$tmp/absent/libgp_absent.so"
LD_LIBRARY_PATH="$tmp/badmod" "$probe" "libgp_absent.so: cannot open shared object file"

if [ ! -f "$lib/libgpupipe-cuda.so" ]; then
  echo "== 3. skipped: this build has no CUDA module"
  exit 0
fi
echo "== 0. the real module as installed (CUDA where a GPU is usable, else the reason)"
"$probe" any
echo "== 3. the real module, the CUDA libraries hidden"
cudart=$(ldd "$lib/libgpupipe-cuda.so" | awk '/libcudart/ {print $3}')
if [ -z "$cudart" ] || [ ! -e "$cudart" ]; then
  # Already absent here: the module cannot load, which is the case itself.
  "$probe" "cannot be loaded"
  exit 0
fi
cudadir=$(dirname "$(readlink -f "$cudart")")
# Hide every directory the module's CUDA dependencies come from (matched on the library's
# name, not its path: the build may live under a directory whose name says cuda).
dirs=$(ldd "$lib/libgpupipe-cuda.so" | awk '$1 ~ /^lib(cud|cublas|nvrtc|nvJitLink)/ {print $3}' |
       xargs -r -n1 readlink -f | xargs -r -n1 dirname | sort -u | tr '\n' ' ')
script="set -e; for d in $dirs; do mount -t tmpfs none \"\$d\"; done; exec \"$probe\" \"cannot be loaded\""
if unshare -m --propagation private true 2>/dev/null; then
  unshare -m --propagation private sh -c "$script"
else
  echo "== 3. skipped: mount namespaces are not permitted here (unshare -m failed); cases 1 and 2 ran"
fi
