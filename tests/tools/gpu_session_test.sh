#!/usr/bin/env bash
# tools/gpu_session.sh on a bundle of stand-in programs (no GPU needed): the steps named run in
# order from the unpacked tree, each under its cap or what is left of the budget; a step that
# overruns is stopped and reported, one whose program finds no GPU (exit 77) is reported as
# skipped, a failing one by its exit status, one that no longer fits the budget is not started;
# logs and results land in $OUT; bad arguments are refused.
# Usage: gpu_session_test.sh PRECIS_SOURCE_DIR
set -euo pipefail
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR"
fail() { echo "FAIL: $*"; exit 1; }

# stand-ins for the bundle's programs, at their build-tree places
t=$work/stage/tree
mkdir -p "$t/tests" "$t/bench/cuda" "$work/stage/lib"
printf '#!/usr/bin/env bash\necho "[  PASSED  ] 2 tests. ($*)"\n' >"$t/tests/optim_tests"
printf '#!/usr/bin/env bash\necho "no CUDA device"\nexit 77\n' >"$t/bench/cuda/bench_cuda_gemm"
printf '#!/usr/bin/env bash\necho "broken on purpose"\nexit 3\n' >"$t/bench/cuda/bench_cuda_train"
chmod +x "$t/tests/optim_tests" "$t/bench/cuda/bench_cuda_gemm" "$t/bench/cuda/bench_cuda_train"
cat >"$t/CTestTestfile.cmake" <<'C'
add_test(stand_in.sleeps sleep "$ENV{SLEEP_S}")
set_tests_properties(stand_in.sleeps PROPERTIES LABELS gpu)
add_test(stand_in.bench.smoke false)
set_tests_properties(stand_in.bench.smoke PROPERTIES LABELS gpu)
C
# the checkout: the bundle, and a stand-in for the PyTorch baseline script
c=$work/checkout
mkdir -p "$c/.gpu-bundle" "$c/bench/cuda"
: >"$c/CMakeLists.txt"
cat >"$c/bench/cuda/torch_baseline.py" <<'P'
import sys
open(sys.argv[2], "w").write("{}")
print("torch stand-in wrote", sys.argv[2])
P
tar -C "$work/stage" -cf - . | xz >"$c/.gpu-bundle/payload.tar.xz"
echo .gpu-bundle >"$c/.gpu-bundle/PLACE"
printf '4567def\n' >"$c/.gpu-bundle/COMMIT"
cp "$src/tools/gpu_bundle_run.sh" "$c/.gpu-bundle/run.sh"
cd "$c"
session() { bash "$src/tools/gpu_session.sh" "$@" 2>&1; }
row() { grep -F "| $1 | $2 |" <<<"$out" >/dev/null || fail "expected the row '| $1 | $2 |' in: $out"; }

# an overrun, a missing GPU, a failure and a pass, in the order given
rc=0
out=$(OUT=$work/out1 SLEEP_S=30 session --budget 100 --cap tests=2 adamw tests gemm train torch_gemm) || rc=$?
[[ $rc -eq 1 ]] || fail "exit status $rc with a failed step, expected 1: $out"
row adamw ok
row tests "TIMED OUT at 2 s"
row gemm "skipped: no GPU (exit 77)"
row train "FAILED (exit 3)"
row torch_gemm ok
grep -q -- "--gtest_filter=MixedPrecision.Adam\*" "$work/out1/adamw.log" || fail "adamw.log: $(cat "$work/out1/adamw.log")"
[[ -f "$work/out1/torch_gemm.json" ]] || fail "torch_gemm: no torch_gemm.json in OUT"
grep -q -- "---- train: last lines of $work/out1/train.log" <<<"$out" || fail "no train log in the summary: $out"
grep -q "broken on purpose" <<<"$out" || fail "the failed step's output is not in the summary: $out"
(( $(grep -n "^== " <<<"$out" | head -n 1 | cut -d: -f1) < $(grep -n "^== tests" <<<"$out" | cut -d: -f1) )) || fail "order: $out"

# the budget: a step's limit is what is left of it; a step whose minimum no longer fits is not started
out=$(OUT=$work/out2 SLEEP_S=0 session --budget 70 tests adamw) || fail "a passing session failed: $out"
grep -q "^== tests (limit 70 s)" <<<"$out" || fail "the tests step's limit is not the budget left: $out"
row tests ok
out=$(OUT=$work/out3 session --budget 30 tests adamw) || fail "$out"
row tests "not started: 30 s of the budget left, needs 60"
row adamw ok
[[ ! -e "$work/out3/tests.log" ]] || fail "a step that was not started left a log"

# bad arguments, and no bundle
for bad in "nosuchstep" "--cap nosuchstep=5" "--cap tests=soon" "--budget -1" "--frobnicate"; do
  rc=0
  out=$(OUT=$work/out4 session $bad) || rc=$?
  [[ $rc -eq 2 ]] || fail "'$bad': exit status $rc, expected 2: $out"
done
rm -rf "$c/.gpu-bundle"
rc=0
out=$(OUT=$work/out4 session info) || rc=$?
[[ $rc -eq 2 ]] && grep -q "no bundle at $c/.gpu-bundle" <<<"$out" || fail "no bundle: exit status $rc: $out"
echo "gpu_session.sh: steps run in order under their limits and the budget; overruns, missing GPUs and failures reported"
