#!/usr/bin/env bash
# Builds precis's GPU tests, the CUDA benchmarks, the demo with --device cuda and the CPU tests
# and benchmarks that belong beside them, on a machine that has nvcc but needs no GPU, and packs
# the programs into one folder. A machine with a GPU (and its driver) but without a compiler,
# precis's build dependencies or the time to build, runs them from a checkout of the same commit
# with that folder in it:
#
#   here:  tools/gpu_bundle.sh [--arch LIST] [--data] [--gpu-only] [--out DIR]
#   there: bash DIR/run.sh [ctest arguments]        (default: -L gpu --output-on-failure)
#
# DIR (default .gpu-bundle, which git ignores) holds run.sh, COMMIT (the commit it was built
# from) and payload.tar.xz, which run.sh unpacks there: the programs under tree/ at the places a
# build tree has them, the build tree's CTestTestfile.cmake files (its paths replaced by
# placeholders that run.sh fills in, so ctest runs the same tests with the same arguments, pass
# expressions and skip codes as here), and under lib/ the shared libraries the programs need
# that are not part of every Linux system (Google Benchmark, OpenMP's runtime, the CUDA runtime;
# not cuBLASLt, which run.sh finds in that machine's CUDA installation). --data adds the
# Fashion-MNIST files (30 MB) as data/fashion-mnist, for the demo. bench_gemm has oneDNN as its
# baseline where libdnnl-dev is installed here (its library travels then: 6 MB packed), but not
# OpenBLAS, which no step on that machine runs (PRECIS_BENCH_OPENBLAS=OFF). --gpu-only leaves
# out the CPU programs (optim_tests, bench_gemm and oneDNN's library: tools/gpu_session.sh's
# adamw and cpu_gemm steps), for when what travels must be smaller: a call carries at most
# 64 MiB, the checkout's files included, and the end of the run says how close it comes. The
# build is Release with MPI disabled (build/gpu-bundle), for the architectures in --arch
# (default 90a; docs/cuda.md).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
arch=90a
out=.gpu-bundle
data=0
gpu_only=0
jobs=${JOBS:-2}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch) arch=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --data) data=1; shift ;;
    --gpu-only) gpu_only=1; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu_bundle.sh: unknown argument '$1' (expected --arch LIST, --out DIR, --data or --gpu-only)" >&2; exit 2 ;;
  esac
done
case "$out" in
  /*|..*|*/..*) echo "gpu_bundle.sh: --out '$out': expected a folder inside the checkout, given relative to its root" >&2; exit 2 ;;
esac
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "gpu_bundle.sh: nvcc not found: the bundle needs the CUDA toolkit here" >&2; exit 1; }

# the programs: every `gpu` test's, the CUDA benchmarks, the demo; optim_tests and bench_gemm
# for the CPU beside the GPU (its own instruction sets: the kernels are chosen at run time)
targets=(format_cuda_test device_test gemm_test optim_test elementwise_test backend_test
         bench_cuda_gemm bench_cuda_optim bench_cuda_train train_fashion_mnist cuda_gemm)
[[ $gpu_only -eq 1 ]] || targets+=(optim_tests bench_gemm)

build=build/gpu-bundle
# (-U: oneDNN is looked for again each time, not taken from an earlier configure's cache)
cmake -S . -B "$build" -U 'PRECIS_DNNL_*' -DCMAKE_BUILD_TYPE=Release -DPRECIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DPRECIS_BUILD_BENCHMARKS=ON -DPRECIS_BENCH_OPENBLAS=OFF -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

B=$(cd "$build" && pwd)
rm -rf "$out"
mkdir -p "$out/stage/tree" "$out/stage/lib"
O=$(cd "$out/stage" && pwd)
for t in "${targets[@]}"; do
  f=$(find "$B" -type f -name "$t" -perm -u+x -not -path '*/CMakeFiles/*' -print -quit)
  [[ -n "$f" ]] || { echo "gpu_bundle.sh: $t was not built" >&2; exit 1; }
  rel=${f#"$B"/}
  mkdir -p "$O/tree/$(dirname "$rel")"
  cp "$f" "$O/tree/$rel"
  strip --strip-debug "$O/tree/$rel"
done
# ctest's files (and gtest's discovered lists), the build and source paths as placeholders
while IFS= read -r f; do
  rel=${f#"$B"/}
  mkdir -p "$O/tree/$(dirname "$rel")"
  sed -e "s|$B|@BUNDLE@|g" -e "s|$root|@SOURCE@|g" "$f" >"$O/tree/$rel"
done < <(find "$B" \( -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' \) -not -path '*/CMakeFiles/*')
# shared libraries that are not the C and C++ runtimes every Linux has (nor cuBLAS: large, and
# part of any CUDA installation)
for f in $(find "$O/tree" -type f -perm -u+x); do
  ldd "$f" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  case "$name" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libstdc++.so*|libgcc_s.so*|libcublas*) ;;
    *) cp -L "$path" "$O/lib/$name" ;;
  esac
done
if [[ $data -eq 1 ]]; then
  mkdir -p "$O/data/fashion-mnist"
  cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$O/data/fashion-mnist/" \
    || { echo "gpu_bundle.sh: --data: /usr/share/datasets/fashion-mnist not found (Debian's dataset-fashion-mnist)" >&2; exit 1; }
fi
{
  git rev-parse HEAD
  git diff --quiet HEAD -- || echo "(with uncommitted changes)"
} >"$out/COMMIT"
echo "$out" >"$out/PLACE"
cp tools/gpu_bundle_run.sh "$out/run.sh"
# one archive: the programs shrink about fourfold (what travels to a machine may be limited)
tar -C "$O" -cf - . | xz -T "$jobs" -6 >"$out/payload.tar.xz"
if [[ $gpu_only -eq 1 ]]; then echo "gpu_bundle.sh: the GPU programs only (no optim_tests, no bench_gemm)"
elif ldd "$O/tree/bench/perf/bench_gemm" | grep -q libdnnl; then echo "gpu_bundle.sh: bench_gemm with oneDNN's baseline"
else echo "gpu_bundle.sh: bench_gemm without oneDNN's baseline (install libdnnl-dev here for it)"; fi
echo "gpu_bundle.sh: $(du -sh "$O" | cut -f1) of programs and files, $(du -sh "$out/payload.tar.xz" | cut -f1) packed, in $out" \
  "($(head -n 1 "$out/COMMIT"), CUDA architectures $arch)"
rm -rf "$O"
# what a call would carry: this folder and the checkout's tracked files
travel=$(( $(du -cb "$out"/* | tail -n 1 | cut -f1) + $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1) ))
echo "gpu_bundle.sh: with the checkout's files, $(( travel / 1048576 )) MiB would travel (a call carries at most 64)"
if (( travel > 64 * 1048576 )); then echo "gpu_bundle.sh: too much for one call: try --gpu-only" >&2; fi
