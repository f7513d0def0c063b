#!/usr/bin/env python3
"""PyTorch eager training steps on the GPU: the baseline for precis's training step on the device.

One step = forward, cross-entropy loss, backward, optimizer step, zero_grad, on random data
already on the GPU (the same batch every step). Models: the demo's MLP 784-256-128-10 at batch
128 and 4096, and the wide MLP 4096-4096-4096-10 at batch 8192. Policies as precis names them:
32-true (fp32; the wide MLP also with TF32 allowed), bf16-mixed (autocast to bf16, fp32
parameters), 16-mixed (autocast to fp16 with GradScaler). SGD with momentum 0.9, lr 0.01.

A step's time is wall-clock time over `reps` steps back to back divided by `reps` (launch and
Python overhead included: that is what an eager step costs), the median of 5 such runs after
warm-up. Usage: python3 torch_train_baseline.py [--quick]
"""
import statistics
import sys
import time

import torch


def model(widths):
    layers = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).cuda()


def step_time_us(widths, batch, policy, reps, tf32=False):
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    net = model(widths)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, widths[0], device="cuda")
    y = torch.randint(0, widths[-1], (batch,), device="cuda")
    scaler = torch.amp.GradScaler("cuda") if policy == "16-mixed" else None
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(policy)

    def step():
        if dtype is None:
            loss = torch.nn.functional.cross_entropy(net(x), y)
        else:
            with torch.autocast("cuda", dtype=dtype):
                loss = torch.nn.functional.cross_entropy(net(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        opt.zero_grad(set_to_none=True)

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            step()
        torch.cuda.synchronize()
        runs.append(1e6 * (time.perf_counter() - t0) / reps)
    torch.backends.cuda.matmul.allow_tf32 = False
    return statistics.median(runs)


def main():
    quick = "--quick" in sys.argv
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "cuda", torch.version.cuda)
    print("| model | batch | policy | torch eager step (us) |")
    print("|---|---|---|---|")
    small, wide = [784, 256, 128, 10], [4096, 4096, 4096, 10]
    cases = [(small, 128), (small, 4096), (wide, 8192)]
    for widths, batch in cases[:1] if quick else cases:
        reps = 20 if widths is wide else 200
        if quick:
            reps = 5
        name = "MLP " + "-".join(map(str, widths))
        for policy in ("32-true", "bf16-mixed", "16-mixed"):
            print(f"| {name} | {batch} | {policy} | {step_time_us(widths, batch, policy, reps):.0f} |")
        if widths is wide:
            print(f"| {name} | {batch} | 32-true, TF32 allowed | {step_time_us(widths, batch, '32-true', reps, tf32=True):.0f} |")


if __name__ == "__main__":
    main()
