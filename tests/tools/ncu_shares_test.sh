#!/usr/bin/env bash
# tools/ncu_shares.py on an excerpt of a real Nsight Compute per-kernel summary (three kernels of
# a training step, recorded on an H200; one maximum printed with a thousands separator). The
# expected totals and shares were worked out by hand from the excerpt: 18 x 732.97 + 15 x 78.63
# + 5 x 201.61 = 15380.96 µs over 38 launches, the GEMM 85.8% of it. A log without a summary is
# refused by name.
# Usage: ncu_shares_test.sh PRECIS_SOURCE_DIR
set -euo pipefail
src=$1
fail() { echo "FAIL: $*"; exit 1; }
out=$(python3 "$src/tools/ncu_shares.py" "$src/tests/data/ncu/wide_mlp_excerpt.log")
grep -qF "38 kernels, 15381.0 µs of GPU time" <<<"$out" || fail "totals: $out"
grep -qF '| `detail::sm90_gemm_kernel<1, 2, 1>` | 132x1x1 / 384x1x1 | 18 | 732.97 |' <<<"$out" || fail "the GEMM's row: $out"
grep -qF '| 85.8% |' <<<"$out" || fail "the GEMM's share: $out"
grep -qF '| `detail::pack_kernel<Eigen::bfloat16, void, Eigen::bfloat16>` | 256x128x1 / 32x8x1 | 15 | 78.63 |' <<<"$out" || fail "pack: $out"
grep -qF '| 7.7% |' <<<"$out" && grep -qF '| 6.6% |' <<<"$out" || fail "the other shares: $out"
# rows in decreasing share
[[ $(grep -n 'sm90_gemm' <<<"$out" | cut -d: -f1) -lt $(grep -n 'pack_kernel' <<<"$out" | cut -d: -f1) &&
   $(grep -n 'pack_kernel' <<<"$out" | cut -d: -f1) -lt $(grep -n 'sum_kernel' <<<"$out" | cut -d: -f1) ]] || fail "order: $out"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
echo "no CUDA device" >"$tmp"
rc=0
msg=$(python3 "$src/tools/ncu_shares.py" "$tmp" 2>&1) || rc=$?
[[ $rc -ne 0 ]] && grep -qF "no per-kernel gpu__time_duration.sum summary in $tmp" <<<"$msg" || fail "a log without a summary: rc $rc: $msg"
echo "ncu_shares.py: totals, shares and order from a recorded summary; a log without one refused"
