#!/usr/bin/env python3
"""PyTorch's optimizer step on the GPU, beside bench_cuda_optim's table (same shapes, same GPU).

The demo's MLP (784-256-128-10) and the wide MLP (4096-4096-4096-10): 32-true with Adam,
bf16-mixed with AdamW (fp32 masters: the model in fp32 under autocast keeps fp32 parameters and
gradients, so the step reads fp32 gradients), 16-mixed with AdamW behind GradScaler
(unscale_, the finite check, step, update). torch.optim's fused=True kernels; each step timed
alone with CUDA events, medians of 50 after 5 warm-up steps. Usage: python3
torch_optim_baseline.py
"""
import statistics

import torch


def mlp_params(widths):
    ps = []
    for a, b in zip(widths[:-1], widths[1:]):
        ps.append(torch.nn.Parameter(torch.zeros(b, a, device="cuda")))
        ps.append(torch.nn.Parameter(torch.zeros(b, device="cuda")))
    for p in ps:
        p.grad = torch.zeros_like(p)
    return ps


def median_us(fn, reps=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(1000.0 * a.elapsed_time(b))
    return statistics.median(times)


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "cuda", torch.version.cuda)
    print("| model | policy | parameters | torch step (us) |")
    print("|---|---|---|---|")
    for name, widths in (("MLP 784-256-128-10", [784, 256, 128, 10]), ("MLP 4096-4096-4096-10", [4096, 4096, 4096, 10])):
        ps = mlp_params(widths)
        n = sum(p.numel() for p in ps)
        opt = torch.optim.Adam(ps, fused=True)
        print(f"| {name} | 32-true, Adam | {n} | {median_us(opt.step):.1f} |")
        opt = torch.optim.AdamW(ps, fused=True)
        print(f"| {name} | bf16-mixed, AdamW | {n} | {median_us(opt.step):.1f} |")
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(torch.ones((), device="cuda"))  # creates the scale, as scaling a loss does (unscale_ needs it)

        def scaled_step():
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()

        print(f"| {name} | 16-mixed, AdamW + GradScaler | {n} | {median_us(scaled_step):.1f} |")


if __name__ == "__main__":
    main()
