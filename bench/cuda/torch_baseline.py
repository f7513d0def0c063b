#!/usr/bin/env python3
"""cuBLAS through PyTorch on the same GPU, as a cross-check of bench_cuda_gemm's cuBLASLt column.

TFLOP/s of torch.matmul (bf16, fp16, tf32) and torch._scaled_mm (fp8 e4m3, unit scales, bf16
output) at 4096^3 and 8192^3: random normal operands, median of CUDA-event timings after a
warm-up. Usage: python3 torch_baseline.py [--json FILE]
"""
import json
import statistics
import sys

import torch


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    torch.manual_seed(0)
    rows = []
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "cuda", torch.version.cuda)
    for n in (4096, 8192):
        flop = 2.0 * n * n * n
        for name, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            a = torch.randn(n, n, device="cuda", dtype=dt)
            b = torch.randn(n, n, device="cuda", dtype=dt)
            rows.append((name, n, flop / median_ms(lambda: a @ b) / 1e9))
        torch.backends.cuda.matmul.allow_tf32 = True
        a = torch.randn(n, n, device="cuda")
        b = torch.randn(n, n, device="cuda")
        rows.append(("tf32", n, flop / median_ms(lambda: a @ b) / 1e9))
        torch.backends.cuda.matmul.allow_tf32 = False
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()  # column-major, as _scaled_mm requires
        one = torch.tensor(1.0, device="cuda")
        rows.append(("e4m3", n, flop / median_ms(
            lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)) / 1e9))
    for name, n, tf in rows:
        print(f"torch {name:5s} {n}^3 {tf:8.1f} TFLOP/s")
    if out:
        with open(out, "w") as f:
            json.dump([{"format": r[0], "n": r[1], "tflops": r[2]} for r in rows], f, indent=1)


if __name__ == "__main__":
    main()
