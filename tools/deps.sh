#!/usr/bin/env bash
# Installs (as root) or names (otherwise) the Debian packages precis needs.
# Usage: tools/deps.sh test|demo|bench|numerics|fuzz
# This file is the one place the package lists live.
set -euo pipefail

# the core and the data reader (precis::data); Boost.Multiprecision (precis::analysis) is for the
# tests, the benchmarks and three examples, not the demo (138 MB installed, a fifth of the demo's)
core_packages=(cmake make g++ libeigen3-dev zlib1g-dev)
build_packages=("${core_packages[@]}" libboost-dev)
test_packages=("${build_packages[@]}" libgtest-dev libbenchmark-dev libopenmpi-dev openmpi-bin xz-utils libsimde-dev python3)
demo_packages=("${core_packages[@]}" dataset-fashion-mnist python3)
# (oneDNN and OpenBLAS's OpenMP variant: bench_gemm's baselines, found when installed)
bench_packages=("${build_packages[@]}" libbenchmark-dev python3 libdnnl-dev libopenblas-openmp-dev)
# the rounding-error suite: Google Benchmark programs, the demo MLP's gradients (case 8) and the
# report script; not oneDNN, which only bench_gemm compares with
numerics_packages=("${build_packages[@]}" libbenchmark-dev python3 dataset-fashion-mnist)
fuzz_packages=("${build_packages[@]}" clang libclang-rt-14-dev)

case "${1:-}" in
  test) wanted=("${test_packages[@]}") ;;
  demo) wanted=("${demo_packages[@]}") ;;
  bench) wanted=("${bench_packages[@]}") ;;
  numerics) wanted=("${numerics_packages[@]}") ;;
  fuzz) wanted=("${fuzz_packages[@]}") ;;
  *) echo "usage: $0 test|demo|bench|numerics|fuzz" >&2; exit 2 ;;
esac

missing=()
for p in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then
  echo "precis: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  $cmd
else
  echo "precis: missing system packages: ${missing[*]}" >&2
  echo "precis: install them with:  sudo apt-get update && sudo $cmd" >&2
  exit 1
fi
