#!/usr/bin/env bash
# The measurements a session on a lent GPU machine makes, in one call, from a precis checkout
# that carries a bundle (tools/gpu_bundle.sh --data, built where there is no GPU):
#   bash tools/gpu_session.sh [--budget SECONDS] [--cap STEP=SECONDS ...] [--bundle DIR] [STEP ...]
#   bash tools/gpu_session.sh --list
# Steps run in the order given (default: every step, in the order of --list), each under a time
# limit of its own (its cap, or what is left of the budget if that is less); a step whose
# minimum no longer fits in what is left of the budget (default 540 s) is not started. Each
# step's output goes to $OUT/STEP.log (OUT: default /tmp/out; JSON and the demos' reports land
# there too), and the last thing printed is a table: each step's status and seconds, then the
# last lines of each step's log. Exit status 0 when every step that ran passed, 1 otherwise
# (a step whose program found no GPU, exit 77, counts as skipped, not failed), 2 on bad arguments.
# Nothing here changes the GPU's settings.
set -uo pipefail

# step, cap (s), minimum worth starting (s), log lines in the summary, what it measures
steps_table="info        10  2 10  the GPU, driver, CPU, cores and flags, and the bundle's commit
adamw       60  5  4  the host optimizer's 16-bit AdamW step (optim_tests, host compiler of the bundle) on this CPU
tests      300 60  8  ctest -L gpu (the benchmarks' smoke runs excluded: their steps below run them in full)
gemm       180 60 24  bench_cuda_gemm: precis's kernels against cuBLASLt (JSON: cuda_gemm.json)
gemm_demo   90 20 40  bench_cuda_gemm --demo: the demo's shapes only, each precis kernel with K sliced (automatic) and whole, and fp32 on the CUDA cores, against cuBLASLt (JSON: cuda_gemm_demo.json)
torch_gemm  90 30  8  cuBLAS through PyTorch at 4096^3 and 8192^3 (torch_gemm.json)
train      150 40 14  bench_cuda_train: precis's training step on the device
train_whole_k 60 15 10 bench_cuda_train on the demo's MLP with every product's K whole (PRECIS_CUDA_GEMM_SPLIT_K=1), to set beside train
torch_train 150 40 14 PyTorch eager's step for the same models and policies
profile     90 30 64  Nsight Compute's kernel times of a few training steps (the small MLP at batch 128 under bf16-mixed and 32-true, and the wide MLP, bf16-mixed; caches left warm, as in a step) and each kernel's share (profile_*.log)
demo       150 40 30  the demo's MLP and CNN on the device, default plan, full data set (demo-gpu/)
vit         90 30  6  the demo's ViT on the device, one epoch of bf16-mixed (demo-gpu-vit/)
cpu_gemm   180 40 20  bench_gemm on the host CPU at 1 thread and all cores, n = 1024 and 2048, with oneDNN where bundled and the rows split beside the automatic one (a grid on many threads), the benchmarks taking turns (the host's speed drifts), and its ratio tables (cpu_gemm.json)
cpu_demo   120 40 12  the demo's MLP, CNN and ViT on the host CPU, 32-true against bf16-mixed, one epoch each (demo-cpu/)
optim       60 20 10  bench_cuda_optim: the fused optimizer step
torch_optim 60 20 10  PyTorch's optimizer step for the same sizes"

die() { echo "gpu_session.sh: $*" >&2; exit 2; }
known() { awk -v s="$1" '$1 == s {f = 1} END {exit !f}' <<<"$steps_table"; }
field() { awk -v s="$1" -v k="$2" '$1 == s {print $k}' <<<"$steps_table"; }

budget=540
bundle_dir=.gpu-bundle
declare -A cap
want=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --budget)
      [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--budget '${2:-}': expected whole seconds"
      budget=$2; shift 2 ;;
    --cap)
      [[ "${2:-}" =~ ^([a-z_]+)=([0-9]+)$ ]] || die "--cap '${2:-}': expected STEP=SECONDS"
      known "${BASH_REMATCH[1]}" || die "--cap: unknown step '${BASH_REMATCH[1]}' (--list names them)"
      cap[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}; shift 2 ;;
    --bundle) bundle_dir=${2:-}; shift 2 ;;
    --list)
      echo "step        cap(s) min(s)  what"
      awk '{printf "%-11s %5s %6s   ", $1, $2, $3; for (i = 5; i <= NF; ++i) printf "%s%s", $i, (i < NF ? " " : "\n")}' <<<"$steps_table"
      exit 0 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) die "unknown option '$1' (expected --budget, --cap, --bundle or --list)" ;;
    *) known "$1" || die "unknown step '$1' (--list names them)"; want+=("$1"); shift ;;
  esac
done
[[ ${#want[@]} -gt 0 ]] || mapfile -t want < <(awk '{print $1}' <<<"$steps_table")

root=$(git rev-parse --show-toplevel 2>/dev/null || pwd)
[[ -f "$root/$bundle_dir/run.sh" ]] || die "no bundle at $root/$bundle_dir (make one here with tools/gpu_bundle.sh --data where nvcc is, and carry it)"
# shellcheck source=/dev/null
source "$root/$bundle_dir/run.sh" || die "$root/$bundle_dir/run.sh could not set up the bundle"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" || die "cannot create $OUT"
data=$BUNDLE/data/fashion-mnist
jobs=$(( $(nproc) < 6 ? $(nproc) : 6 ))  # the CPU demo's six runs side by side, one thread each
export OUT data jobs root bundle_dir
start=$SECONDS

# each step: the commands, run from the unpacked tree with its output in $OUT/STEP.log
run_step() {
  case "$1" in
    info)
      echo "bundle: $(tr '\n' ' ' <"$root/$bundle_dir/COMMIT")"
      echo "checkout: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo '(not a git checkout)')"
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null \
        || echo "nvidia-smi: no GPU found"
      lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|L2 cache|L3 cache):' | tr -s ' '
      echo "flags: $(grep -o -w -E 'avx2|fma|f16c|avx512f|avx512bw|avx512_bf16|avx512_fp16|amx_tile|amx_bf16|amx_fp16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
      ;;
    adamw) "$TREE/tests/optim_tests" --gtest_filter='MixedPrecision.Adam*' ;;
    tests) ctest -L gpu -E '\.smoke$' --timeout 240 --output-on-failure ;;
    gemm) "$TREE/bench/cuda/bench_cuda_gemm" --json "$OUT/cuda_gemm.json" ;;
    gemm_demo) "$TREE/bench/cuda/bench_cuda_gemm" --demo --json "$OUT/cuda_gemm_demo.json" ;;
    torch_gemm) python3 "$SOURCE/bench/cuda/torch_baseline.py" --json "$OUT/torch_gemm.json" ;;
    train) "$TREE/bench/cuda/bench_cuda_train" ;;
    train_whole_k) PRECIS_CUDA_GEMM_SPLIT_K=1 "$TREE/bench/cuda/bench_cuda_train" --only "784-256-128-10 |" ;;
    torch_train) python3 "$SOURCE/bench/cuda/torch_train_baseline.py" ;;
    profile)
      ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
      [[ -n "$ncu" ]] || { echo "ncu not found"; exit 1; }
      # launches skipped: the model's set-up and about 10 warm-up steps; then about 3 steps
      prof() { "$ncu" --clock-control none --cache-control none --launch-skip "$1" --launch-count 120 --metrics gpu__time_duration.sum \
        --print-summary per-kernel "$TREE/bench/cuda/bench_cuda_train" $3 --only "$4" >"$OUT/profile_$2.log" 2>&1; }
      prof 400 small --quick "784-256-128-10 | 128 | bf16-mixed" && prof 400 small32 --quick "784-256-128-10 | 128 | 32-true" &&
        prof 450 wide "" "4096-4096-4096-10 | 8192 | bf16-mixed" &&
        for c in small small32 wide; do echo "$c:"; python3 "$SOURCE/tools/ncu_shares.py" "$OUT/profile_$c.log" --top 18; done ;;
    demo)
      # the ViT apart: attention launches a few kernels per (entry, head) matrix, minutes per run
      "$TREE/examples/train_fashion_mnist" --device cuda --data "$data" --models mlp,cnn --out "$OUT/demo-gpu" ;;
    vit) "$TREE/examples/train_fashion_mnist" --device cuda --data "$data" --models vit --policies bf16-mixed --epochs 1 --out "$OUT/demo-gpu-vit" ;;
    cpu_gemm)
      PRECIS_BENCH_THREADS=1,$(nproc) "$TREE/bench/perf/bench_gemm" \
        --benchmark_filter='^BM_peak|^(BM_precis_gemm(_rows)?<float, float>|BM_onednn_sgemm|BM_precis_gemm(_rows)?<precis::bfloat16, float>|BM_onednn_bf16)/n:(1024|2048)/' \
        --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
        --benchmark_out="$OUT/cpu_gemm.json" \
        --benchmark_out_format=json && python3 "$SOURCE/bench/ratios.py" --gemm "$OUT/cpu_gemm.json" ;;
    cpu_demo)
      "$TREE/examples/train_fashion_mnist" --data "$data" --models mlp,cnn,vit --policies 32-true,bf16-mixed --epochs 1 \
        --threads "$jobs" --jobs "$jobs" --out "$OUT/demo-cpu" ;;
    optim) "$TREE/bench/cuda/bench_cuda_optim" ;;
    torch_optim) python3 "$SOURCE/bench/cuda/torch_optim_baseline.py" ;;
  esac
}

declare -A status secs
failed=0
for s in "${want[@]}"; do
  left=$(( budget - (SECONDS - start) ))
  limit=${cap[$s]:-$(field "$s" 2)}
  (( limit > left )) && limit=$left
  if (( left < $(field "$s" 3) || limit < 1 )); then
    status[$s]="not started: ${left} s of the budget left, needs $(field "$s" 3)"
    secs[$s]=0
    continue
  fi
  t0=$SECONDS
  echo "== $s (limit ${limit} s)"
  # a subshell per step, so a step's cd or environment stays its own; -k: KILL 5 s after TERM
  (cd "$TREE" && export -f run_step && timeout -k 5 "$limit" bash -c 'run_step "$1"' _ "$s") >"$OUT/$s.log" 2>&1
  rc=$?
  secs[$s]=$(( SECONDS - t0 ))
  case $rc in
    0) status[$s]=ok ;;
    77) status[$s]="skipped: no GPU (exit 77)" ;;
    124|137) status[$s]="TIMED OUT at ${limit} s"; failed=1 ;;
    *) status[$s]="FAILED (exit $rc)"; failed=1 ;;
  esac
done

echo
echo "| step | status | seconds |"
echo "|---|---|---|"
for s in "${want[@]}"; do echo "| $s | ${status[$s]} | ${secs[$s]} |"; done
echo "budget ${budget} s, used $(( SECONDS - start )) s; logs and results in $OUT"
for s in "${want[@]}"; do
  [[ -f "$OUT/$s.log" ]] || continue
  echo "---- $s: last lines of $OUT/$s.log"
  tail -n "$(field "$s" 4)" "$OUT/$s.log" | cut -c1-400
done
exit $failed
