#!/usr/bin/env bash
# Runs the tests of a bundle made by tools/gpu_bundle.sh, on a machine with a GPU, from a
# checkout of the commit in COMMIT with the bundle at the place it was made (PLACE):
#   bash .gpu-bundle/run.sh [ctest arguments]     (default: -L gpu --output-on-failure)
# It unpacks the programs outside the checkout (into $PRECIS_BUNDLE_DIR, by default a folder
# of ${TMPDIR:-/tmp} named after the payload's checksum, so that the folder that travels stays
# small), fills in the paths of ctest's files, puts the bundle's libraries and the machine's CUDA
# libraries on LD_LIBRARY_PATH, prints the GPU, the driver and the CPU, and runs ctest in the
# unpacked tree. `source` it instead to get the environment for running the programs yourself:
# TREE (the programs, at their build-tree places), BUNDLE (the unpacked folder: tree/, lib/ and,
# with --data, data/fashion-mnist), SOURCE (the checkout) and LD_LIBRARY_PATH.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
place=$(cat "$here/PLACE")
SOURCE=${here%/"$place"}
if [[ "$SOURCE" == "$here" || ! -f "$SOURCE/CMakeLists.txt" ]]; then
  echo "gpu_bundle run.sh: the bundle must be at $place in a precis checkout (it is at $here)" >&2
  return 2 2>/dev/null || exit 2
fi
key=$(md5sum <"$here/payload.tar.xz" | cut -c1-12)
BUNDLE=${PRECIS_BUNDLE_DIR:-${TMPDIR:-/tmp}/precis-gpu-bundle-$key}
TREE=$BUNDLE/tree
# unpacked, and the placeholders filled in, once per payload and checkout
if [[ "$(cat "$BUNDLE/.filled" 2>/dev/null)" != "$key $SOURCE" ]]; then
  rm -rf "$BUNDLE" && mkdir -p "$BUNDLE"
  if command -v xz >/dev/null; then xz -dc "$here/payload.tar.xz" | tar -C "$BUNDLE" -xf -
  else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$here/payload.tar.xz" "$BUNDLE"
  fi || { echo "gpu_bundle run.sh: could not unpack $here/payload.tar.xz into $BUNDLE" >&2; return 1 2>/dev/null || exit 1; }
  find "$TREE" -name '*.cmake' -exec sed -i -e "s|@BUNDLE@|$TREE|g" -e "s|@SOURCE@|$SOURCE|g" {} +
  echo "$key $SOURCE" >"$BUNDLE/.filled"
fi
libs=$BUNDLE/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$d" ]] && libs=$libs:$d
done
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# cuBLASLt from a Python installation's NVIDIA wheels where the system has none
if find "$TREE" -type f -perm -u+x -exec ldd {} + 2>/dev/null | grep -q 'libcublas.*not found'; then
  for d in $(python3 -c 'import glob, site; print(" ".join(sorted({p.rsplit("/", 1)[0] for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/*/lib/libcublas*.so*")})))' 2>/dev/null); do
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
  done
fi
export BUNDLE TREE SOURCE
(return 0 2>/dev/null) && return 0  # sourced: the environment only
set -uo pipefail
[[ $# -gt 0 ]] || set -- -L gpu

echo "bundle: $(head -n 1 "$here/COMMIT") $(sed -n 2p "$here/COMMIT")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: no GPU found"
lscpu | sed -n 's/^Model name: *//p'
echo "CPU: $(nproc) threads;$(grep -o -w -E 'avx512f|avx512_bf16|avx512_fp16|amx_bf16|amx_fp16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
missing=$(find "$TREE" -type f -perm -u+x -exec ldd {} + 2>/dev/null | grep 'not found' | sort -u)
[[ -z "$missing" ]] || echo "libraries not found (the programs that need them will fail):"$'\n'"$missing"
cd "$TREE" && ctest "$@" --output-on-failure
