#!/usr/bin/env python3
"""Writes DOCS/demo.md and its plots (DOCS/img/demo_*.svg, drawn by bench/plotting.py as the
numerics report's are) from the results.json that examples/train_fashion_mnist writes. Every
number and curve comes from the JSON.

  demo_report.py RESULTS_JSON DOCS_DIR
  demo_report.py RESULTS_JSON DOCS_DIR --device "an NVIDIA H200, ..." [--reference CPU_RESULTS_JSON]

--device: RESULTS_JSON is a run of `train_fashion_mnist --device cuda`; the report is
DOCS/demo_gpu.md with plots DOCS/img/demo_gpu_*.svg, and says where it ran. --reference adds to
each model a comparison with the CPU run of the same policy and length in that file.
"""
import argparse
import json
import math
import os

from plotting import exponent_histogram, line_plot


def label(r, mixed):
    """A run's name in comparisons and plots: with its epochs when runs of a model differ in length."""
    return f"{r['policy']} ({r['epochs']} epochs)" if mixed else r["policy"]


def table(rows):
    lines = ["| policy | epochs | test accuracy | final train loss | s / epoch | memory (MiB) | skipped steps | final loss scale | fp16-flushed grads | zero grads | fp8 saturated | fp8 flushed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def frac(v):
        return "–" if v is None else f"{v:.2e}"

    for r in rows:
        lines.append(f"| {r['policy']} | {r['epochs']} | {r['test_accuracy']:.4f} | {r['final_train_loss']:.4f} | {r['seconds_per_epoch']:.1f} | "
                     f"{r['memory_mib']:.1f} | {r['skipped_steps']} | {r['final_loss_scale']:g} | {r['fp16_flushed_grads']:.2e} | "
                     f"{r['zero_grads']:.4f} | {frac(r.get('fp8_saturated'))} | {frac(r.get('fp8_flushed'))} |")
    return "\n".join(lines)


def against_reference(rows, ref_name="32-true"):
    """Each run against the reference run of the same length (or the first one, if none is)."""
    refs = [r for r in rows if r["policy"] == ref_name]
    if not refs:
        return f"({ref_name} was not run, so there is no comparison.)"
    mixed = len({r["epochs"] for r in rows}) > 1
    lines = [f"| policy | accuracy − {ref_name} (pp) | train loss / {ref_name} | time / {ref_name} | memory / {ref_name} |",
             "|---|---|---|---|---|"]
    for r in rows:
        ref = next((q for q in refs if q["epochs"] == r["epochs"]), refs[0])
        lines.append(f"| {label(r, mixed)} | {100 * (r['test_accuracy'] - ref['test_accuracy']):+.2f} | "
                     f"{r['final_train_loss'] / ref['final_train_loss']:.3f} | {r['seconds_per_epoch'] / ref['seconds_per_epoch']:.2f} | "
                     f"{r['memory_mib'] / ref['memory_mib']:.2f} |")
    return "\n".join(lines)


def against_cpu(rows, cpu_rows):
    """Each device run against the CPU run of the same model, policy and length."""
    lines = ["| policy | epochs | test accuracy, device | CPU | difference (pp) | final train loss, device | CPU | "
             "skipped steps, device / CPU | final loss scale, device / CPU |",
             "|---|---|---|---|---|---|---|---|---|"]
    missing = []
    for r in rows:
        c = next((q for q in cpu_rows if q["policy"] == r["policy"] and q["epochs"] == r["epochs"]), None)
        if c is None:
            missing.append(f"{r['policy']} ({r['epochs']} epochs)")
            continue
        lines.append(f"| {r['policy']} | {r['epochs']} | {r['test_accuracy']:.4f} | {c['test_accuracy']:.4f} | "
                     f"{100 * (r['test_accuracy'] - c['test_accuracy']):+.2f} | {r['final_train_loss']:.4f} | "
                     f"{c['final_train_loss']:.4f} | {r['skipped_steps']} / {c['skipped_steps']} | "
                     f"{r['final_loss_scale']:g} / {c['final_loss_scale']:g} |")
    if missing:
        lines.append(f"\n(No CPU run of the same length for {', '.join(missing)}.)")
    return "\n".join(lines)


def model_section(name, description, rows, lo, img, st, prefix="demo", cpu_rows=None):
    """One model's table, comparison and plots; with cpu_rows, also against the CPU's runs."""
    mixed = len({r["epochs"] for r in rows}) > 1
    curves = []
    for r in rows:
        n = len(r["curve"])
        curves.append((label(r, mixed), [((i + 1) * r["epochs"] / n, y) for i, y in enumerate(r["curve"])]))
    # from the end of the first epoch on, where the policies differ (a diverged run's NaN or
    # infinite losses are left out of the range, and of its line)
    finite = [(x, y) for _, pts in curves for x, y in pts if math.isfinite(y)]
    later = [y for x, y in finite if x >= 1] or [y for _, y in finite]
    line_plot(os.path.join(img, f"{prefix}_{name}_loss.svg"), curves,
              f"Fashion-MNIST, {name}: training loss (mean over each tenth of an epoch)",
              "epoch", "cross-entropy", yrange=(0.9 * min(later), 1.1 * max(later)) if later else None)
    series = []
    for r in rows:
        total = r["gradient_values_sampled"]
        series.append((label(r, mixed), {lo + i: c / total for i, c in enumerate(r["histogram"])}))
    exponent_histogram(os.path.join(img, f"{prefix}_{name}_gradient_exponents.svg"), series,
                       f"{name}: weight-gradient exponents, unscaled (sampled every 20 steps; zeros not shown)",
                       ylabel="fraction of gradient values", size=(1000, 450))
    cpu = ""
    if cpu_rows is not None:
        cpu = f"""
Against the CPU run of the same policy and length (the same initial weights, batches and
schedule; another summation order):

{against_cpu(rows, cpu_rows)}
"""
    return f"""## {name}: {description}

{table(rows)}

The same numbers relative to 32-true{" (the run of the same length)" if len({r["epochs"] for r in rows}) > 1 else ""}:

{against_reference(rows)}
{cpu}
![{name}: training loss per policy](img/{prefix}_{name}_loss.svg)

![{name}: weight-gradient exponents per policy, with fp16's thresholds](img/{prefix}_{name}_gradient_exponents.svg)
"""


def timing(st):
    """How the runs shared the machine (results.json's settings; older files have no jobs)."""
    jobs, threads = st.get("jobs", 1), st.get("threads_per_job", st.get("threads", 0))
    each = f"{threads} thread{'s' if threads != 1 else ''}" if threads else "OpenMP's default threads"
    if jobs <= 1:
        return f"one run at a time on {each}"
    return (f"{jobs} runs at a time on {each} each (`--jobs`, `--threads`): each run's time is "
            f"measured while other runs use the other cores")


def training(data, st):
    """Each model's optimizer and the learning rate its decay starts from (older files: one SGD)."""
    if "training" not in data:
        return f"Every model: SGD with momentum {st['momentum']}, learning rate {st['lr']}."
    names = {"mlp": "MLP", "cnn": "CNN", "vit": "ViT"}
    return "\n".join(f"- {names.get(name, name)}: {t['optimizer']}, learning rate {t['lr']:g}."
                     for name, t in data["training"].items())


def main(path, docs, device=None, reference=None):
    data = json.load(open(path))
    st, rows = data["settings"], data["results"]
    lo, _ = data["histogram_binades"]
    img = os.path.join(docs, "img")
    os.makedirs(img, exist_ok=True)
    prefix = "demo_gpu" if device else "demo"
    cpu = json.load(open(reference))["results"] if reference else None
    sections = [model_section(name, description, [r for r in rows if r["model"] == name], lo, img, st, prefix,
                              None if cpu is None else [r for r in cpu if r["model"] == name])
                for name, description in data["models"].items() if any(r["model"] == name for r in rows)]
    body = "\n".join(sections)
    plan = """`make demo` trains the MLP
under every policy (64-true and the emulated 16-bit "-true" policies for fewer epochs, beside a
32-true run of the same length as their reference) and the CNN and the ViT under 32-true, bf16-mixed and
16-mixed, for a few epochs each (the epochs column); `make demo-full`
(`train_fashion_mnist_full --full`: the program with every run compiled in) runs every model
under every policy for longer."""
    if device:
        ran = ", ".join(name.upper() if name != "vit" else "ViT" for name in data["models"] if any(r["model"] == name for r in rows))
        plan = (f"The device runs follow the CPU's plan (64-true and the emulated 16-bit \"-true\" policies for fewer epochs, "
                f"beside a 32-true run of the same length; the epochs column); this run trained: {ran}.")
        title = "# Demo on the GPU: Fashion-MNIST under every precision policy"
        made = (f"Generated by `bench/demo_report.py --device` from the `results.json` of `train_fashion_mnist "
                f"--device cuda`, run on {device}; do not edit by hand. The CPU's report is docs/demo.md.")
        seconds = ("wall-clock seconds per epoch, training only, one run at a time on the GPU; each step "
                   "copies its batch and labels to the device and reads its loss back (two waits a step)")
        memory = ("GPU memory: the tape's device arenas at their peak, the parameters and their gradients, "
                  "and the optimizer's fp32 masters and state.")
    else:
        title = "# Demo: Fashion-MNIST under every precision policy"
        made = ("Generated by `make demo` (`examples/train_fashion_mnist`, then `bench/demo_report.py` from its\n"
                "`results.json`); do not edit by hand.")
        seconds = f"wall-clock seconds per epoch, training only, {timing(st)}"
        memory = """the tape's peak (activations, their gradients, scratch), the parameters and their
  gradients, and the optimizer's fp32 masters and state (SGD's momentum, AdamW's two moments).
  Not the process's resident size."""
    md = f"""{title}

{made}

Setup: cross-entropy, cosine learning-rate decay to 0, batch {st['batch']}, over the 60000
training images, seed {st['seed']}; test accuracy on the 10000 test images. Every policy of a
model starts from the same initial weights and sees the same batches. {plan} How each model trains (`--lr` replaces the learning rates):

{training(data, st)}

Columns:

- **s / epoch**: {seconds}.
- **memory**: {memory}
- **fp16-flushed grads**: the fraction of weight-gradient values, divided by the loss scale,
  that are nonzero but round to zero in fp16: what fp16 without loss scaling would lose. Under
  16-true the gradients already are fp16 and unscaled, so there it is measured directly: the
  fraction that are zero although the same step recomputed in fp32 (same weights, same batch)
  gives a nonzero value.
- **zero grads**: the fraction of weight-gradient values that are exactly 0: pixels that are 0
  across a whole batch, and inactive ReLUs.
- Both gradient columns are sampled every 20 steps over the whole run.
- **fp8 saturated, fp8 flushed** (fp8 policies): of every element cast to fp8 during training
  (the GEMMs' e4m3 operands and e5m2 output gradients), the fraction that saturated at the
  format's largest value and the fraction that were nonzero and became zero. fp8-mixed scales
  each tensor from its own amax (current scaling); fp8-mixed/unscaled makes the same casts with
  every scale 1, which is what scaling buys.

{body}"""
    out = os.path.join(docs, f"{prefix}.md")
    with open(out, "w") as f:
        f.write(md)
    print(f"wrote {out} and its plots in {img}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("docs")
    ap.add_argument("--device", help="where a --device cuda run ran (writes demo_gpu.md)")
    ap.add_argument("--reference", help="a CPU run's results.json to compare each device run with")
    a = ap.parse_args()
    if a.reference and not a.device:
        ap.error("--reference compares a device run with the CPU's: give --device too")
    main(a.results, a.docs, a.device, a.reference)
