#!/usr/bin/env python3
"""Writes docs/numerics.md (and its SVG plots, drawn by bench/plotting.py) from the JSON output of the
bench/numerics programs. Nothing in the report is typed by hand: every number and curve comes
from the JSON.

  numerics_report.py JSON_DIR DOCS_DIR
"""
import json
import math
import os
import sys
import textwrap

from plotting import COLORS, MARKERS, Axes, exponent_histogram, figure


def load(path):
    out = []
    for r in json.load(open(path))["benchmarks"]:
        if r.get("run_type", "iteration") == "iteration":
            out.append(r)
    return out


def short(label):
    return label.split(" (")[0]


def g(x):
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.6g}"


def formats_table(rows):
    keys = ("digits", "max", "min_normal", "min_subnormal", "u")
    lines = ["| format | digits t (spec) | max (spec) | min normal (spec) | min subnormal (spec) | u = 2^-t (spec) | |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        ok = all(r[k] == r[k + "_spec"] for k in keys)
        cells = " | ".join(f"{g(r[k])} ({g(r[k + '_spec'])})" for k in keys)
        lines.append(f"| {r['label']} | {cells} | {'match' if ok else '**MISMATCH**'} |")
    return "\n".join(lines)


def ones_table(rows):
    lines = ["| format, rounding | stagnated sum | theory 2^t | terms |", "|---|---|---|---|"]
    for r in rows:
        if r["name"].startswith("ones_stagnation/"):
            lines.append(f"| {r['label']} | {g(r['sum'])} | {g(r['sum_theory'])} | {g(r['terms'])} |")
    return "\n".join(lines)


def harmonic_table(rows):
    lines = ["| format, rounding | terms | published terms | sum | published sum |", "|---|---|---|---|---|"]
    for r in rows:
        if r["name"].startswith("harmonic_stagnation/"):
            pt = g(r["terms_published"]) if r["terms_published"] else "-"
            ps = g(r["sum_published"]) if r["sum_published"] else "-"
            lines.append(f"| {r['label'].split(' (')[0]} | {g(r['terms'])} | {pt} | {g(r['sum'])} | {ps} |")
    return "\n".join(lines)


def error_table(rows):
    lines = [f"| format | n | RN error | SR error (mean of {g(rows[0]['seeds'])}) | SR / (sqrt(n) u) | SR bias ± std. error (z) | gamma_{{n-1}} | gamma~_n(3) | SR / gamma~ | RN / gamma~ |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        det = g(r["bound_det"]) if r["bound_det"] >= 0 else "none (nu >= 1)"
        lines.append(f"| {short(r['label'])} | {g(r['n'])} | {g(r['err_rn'])} | {g(r['err_sr'])} | {g(r['sr_over_sqrt_n_u'])} | "
                     f"{g(r['bias_sr'])} ± {g(r['bias_sr_std_error'])} ({r['bias_sr_z']:.2f}) | {det} | {g(r['bound_prob'])} | "
                     f"{g(r['sr_over_prob'])} | {g(r['rn_over_prob'])} |")
    return "\n".join(lines)


def update_table(rows):
    lines = ["| format | delta | steps | exact | round to nearest | stochastic (mean of 16) | Kahan |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["name"].startswith("update_stagnation/"):
            lines.append(f"| {r['label'].split(' (')[0]} | {g(r['delta'])} | {g(r['steps'])} | {g(r['exact'])} | "
                         f"{g(r['nearest'])} | {g(r['stochastic_mean'])} | {g(r['kahan'])} |")
    return "\n".join(lines)


def gemm_table(rows):
    lines = ["| inputs | K | error (stored inputs) | bound gamma_K | ratio | error (fp32 originals) | block-FMA bound | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['label'].split(' (')[0]} | {g(r['K'])} | {g(r['err_stored'])} | {g(r['bound_stored'])} | "
                     f"{g(r['stored_over_bound'])} | {g(r['err_original'])} | {g(r['bound_original'])} | "
                     f"{g(r['original_over_bound'])} |")
    return "\n".join(lines)


def cast_table(rows):
    lines = ["| format | loss scale | flushed | predicted | subnormal | predicted | overflowed |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["name"].startswith("BM_cast"):
            lines.append(f"| {r['label']} | 2^{g(r['log2_scale'])} | {g(r['flushed'])} | {g(r['flushed_predicted'])} | "
                         f"{g(r['subnormal'])} | {g(r['subnormal_predicted'])} | {g(r['overflowed'])} |")
    return "\n".join(lines)


def plot_histogram(rows, docs):
    h = next(r for r in rows if r["name"].startswith("BM_histogram"))
    counts = {int(k[1:]): v for k, v in h.items() if k.startswith("e") and k[1:].lstrip("-").isdigit()}
    exponent_histogram(os.path.join(docs, "img", "exponent_histogram.svg"), [("count per binade", counts)],
                       "exponents of the synthetic gradient data (log-uniform, 2^{20} values)")
    return "img/exponent_histogram.svg"


def sqrt_n_table(rows, bound_name):
    lines = [f"| data | n | backward error | / u | / (sqrt(n) u) | {bound_name} |", "|---|---|---|---|---|---|"]
    for r in rows:
        det = g(r["bound_det"]) if r["bound_det"] >= 0 else "none (nu >= 1)"
        lines.append(f"| {r['label'].split(' (')[0]} | {g(r['n'])} | {g(r['err'])} | {g(r['err_over_u'])} | "
                     f"{g(r['err_over_sqrt_n_u'])} | {det} |")
    return "\n".join(lines)


def bias_table(rows):
    lines = ["| format | x = 1 + f ulp | draws | SR mean error (ulp) | std. error (theory) | z | RN error (ulp) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['label']} | f = {g(r['f'])} | {g(r['draws'])} | {g(r['sr_bias_ulp'])} | "
                     f"{g(r['sr_std_error_ulp'])} ({g(r['sr_std_error_theory'])}) | {r['sr_z']:.2f} | {g(r['rn_bias_ulp'])} |")
    return "\n".join(lines)


CASE6_ALGS = [("recursive", "recursive"), ("pairwise", "pairwise"), ("compensated", "compensated (Kahan)"),
              ("fp32_acc", "fp32 accumulator"), ("stochastic", "stochastic")]


def case6_table(rows):
    head = " | ".join(f"{name}: error (bound)" for _, name in CASE6_ALGS[:-1])
    head += f" | stochastic, mean of {g(rows[0]['seeds'])}: error (bound)"
    lines = [f"| data | n | exact sum | {head} |", "|---|---|---|" + "---|" * len(CASE6_ALGS)]
    for r in rows:
        cells = []
        for key, _ in CASE6_ALGS:
            b = r["bound_" + key]
            cells.append(f"{g(r['err_' + key])} ({g(b) if b >= 0 else 'none'})")
        lines.append(f"| {short(r['label'])} | {g(r['n'])} | {g(r['exact_sum'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_case6(rows, docs):
    panels = []
    for data_name in ("random", "harmonic"):
        sel = [r for r in rows if f"/{data_name}/" in r["name"]]
        ax = Axes(f"fp16 sums of {short(sel[0]['label'])} terms", "n (terms summed)", "relative error |ŝ - s| / |s|",
                  xlog=2, ylog=10, yrange=(1e-6, 2), key="top left")
        for i, (key, name) in enumerate(CASE6_ALGS):
            # log axes: an error of exactly 0 is drawn at the bottom edge
            ax.line([(r["n"], max(r["err_" + key], 1e-6)) for r in sel], name, COLORS[i % len(COLORS)],
                    width=1.5, marker=MARKERS[i % len(MARKERS)])
        ax.line([(r["n"], r["u"]) for r in sel], "u (fp16)", "#666666", dash="6,4")
        panels.append(ax)
    figure(os.path.join(docs, "img", "fp16_summation.svg"), panels, (1100, 450))
    return "img/fp16_summation.svg"


def plot_stagnation(rows, docs):
    sel = [r for r in rows if r["name"].startswith("harmonic_stagnation/") and "nearest_even" in r["name"]]
    right = 23  # log2 of the plot's right edge
    ax = Axes("harmonic series rounded to nearest in each format: stagnation points (dots)", "n (terms)",
              "partial sum of 1 + 1/2 + ... + 1/n", xlog=2, xrange=(1, 2 ** right), key="top left")
    exact = {}
    for i, r in enumerate(sel):
        ks = sorted(int(k[3:]) for k in r if k.startswith("H2^"))
        pts = [(2 ** k, r[f"H2^{k}"]) for k in ks]
        for k in range(right + 1):
            exact[2 ** k] = r[f"exact2^{k}"]
        # after the stagnation point the sum no longer changes (definition of stagnation)
        pts += [(r["terms"], r["sum"]), (2 ** right, r["sum"])]
        ax.line(pts, short(r["label"]).split()[0], COLORS[i % len(COLORS)])
        ax.points([(r["terms"], r["sum"])], "#000000", "circle", 5)
    ax.line(sorted(exact.items()), "exact H_n", "#666666", dash="6,4", enhanced=True)
    figure(os.path.join(docs, "img", "harmonic_stagnation.svg"), [ax], (900, 450))
    return "img/harmonic_stagnation.svg"


def plot_errors(rows, docs):
    panels = []
    for fmt in ("fp16", "bf16"):
        sel = [r for r in rows if r["label"].startswith(fmt)]
        ax = Axes(f"harmonic sum in {fmt}", "n", "relative error", xlog=2, ylog=10, key="bottom right")
        ax.line([(r["n"], r["err_rn"]) for r in sel], "round to nearest", COLORS[0], 1.5, marker="circle")
        ax.line([(r["n"], r["err_sr"]) for r in sel], f"stochastic (mean of {g(rows[0]['seeds'])})", COLORS[1], 1.5,
                marker="square")
        # the deterministic bound exists only while (n - 1) u < 1: a gap where it does not
        ax.line([(r["n"], r["bound_det"] if r["bound_det"] >= 0 else None) for r in sel], "γ_{n-1} (deterministic)",
                COLORS[2], dash="6,4", enhanced=True)
        ax.line([(r["n"], r["bound_prob"]) for r in sel], "γ̃_n(3) (probabilistic)", COLORS[3], dash="2,3", enhanced=True)
        panels.append(ax)
    figure(os.path.join(docs, "img", "harmonic_error.svg"), panels, (1100, 450))
    return "img/harmonic_error.svg"


def tc_table(rows):
    rnd = {0: "toward zero", 1: "nearest", 2: "toward -inf", 3: "toward +inf", -1: "other"}
    feats = (("exact_products", lambda v: "yes" if v == 1 else "no"),
             ("subnormal_in", lambda v: "yes" if v == 1 else "no"),
             ("align_bits", g), ("sum_bits", g),
             ("rounding", lambda v: rnd.get(int(v), "other")),
             ("c_truncated", lambda v: "yes" if v == 1 else "no"),
             ("block", g))
    lines = ["| architecture, format | exact products | subnormal inputs | alignment bits t | result bits p"
             " | result rounding | c truncated with the products | products per step | published in |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = []
        for key, show in feats:
            pub = r["pub_" + key]
            if pub != pub:  # NaN: nothing published
                cells.append(f"{show(r[key])} (-)")
            elif pub == r[key]:
                cells.append(f"{show(r[key])} ({show(pub)})")
            else:
                cells.append(f"**{show(r[key])}** ({show(pub)})")
        arch_fmt, _, source = r["label"].partition(" (")
        lines.append(f"| {arch_fmt} | " + " | ".join(cells) + f" | {source[:-1]} |")
    return "\n".join(lines)


def wrap(text):
    """One paragraph, refilled to the width of the rest of the report."""
    return textwrap.fill(" ".join(text.split()), 99, break_long_words=False, break_on_hyphens=False)


def pct(x):
    return f"{100 * x:.3g}%"


def case8_skipped(rows):
    """The message of a skipped run (no Fashion-MNIST), or None."""
    for r in rows:
        if r.get("error_occurred"):
            return r.get("error_message", "skipped")
    return None


def case8_table(rows, sampled):
    def cell(r, fmt, what, s):
        m, p = r[f"{fmt}_{what}_s{s}"], r[f"{fmt}_{what}_predicted_s{s}"]
        return pct(m) + ("" if m == p else f" (**predicted {pct(p)}**)")
    lines = ["| step | train loss | zero | exponent < -24 (published: ~" + pct(rows[0]["exp_below_m24_published"]) + ") "
             "| fp16 flushed, scale 1 | 2^8 | 2^16 | fp16 subnormal, scale 1 | 2^8 | 2^16 | fp16 overflowed, 2^16 "
             "| max \|g\| | bf16 flushed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {g(r['step'])} | {r['loss']:.4f} | {pct(r['zero'])} | {pct(r['exp_below_m24'])} | "
                     + " | ".join(cell(r, "fp16", "flushed", s) for s in (0, 8, 16)) + " | "
                     + " | ".join(cell(r, "fp16", "subnormal", s) for s in (0, 8, 16)) + " | "
                     f"{cell(r, 'fp16', 'overflowed', 16)} | {g(r['max_abs'])} | {cell(r, 'bf16', 'flushed', 0)} |")
    lines.append(f"| every 20th step, pooled ({g(sampled['samples'])} steps) | | {pct(sampled['zero'])} | "
                 f"{pct(sampled['exp_below_m24'])} | {pct(sampled['fp16_flushed_s0'])} | {pct(sampled['fp16_flushed_s8'])} | "
                 f"{pct(sampled['fp16_flushed_s16'])} | | | | | | |")
    return "\n".join(lines)


def case8_layers(rows):
    n = sum(1 for k in rows[0] if k.startswith("layer") and k.endswith("_values"))
    head = " | ".join(f"layer {i} ({g(rows[0][f'layer{i}_values'])} weights): zero / exp < -24 / fp16 flushed" for i in range(n))
    lines = [f"| step | {head} |", "|---|" + "---|" * n]
    for r in rows:
        cells = [f"{pct(r[f'layer{i}_zero'])} / {pct(r[f'layer{i}_exp_below_m24'])} / {pct(r[f'layer{i}_fp16_flushed_s0'])}"
                 for i in range(n)]
        lines.append(f"| {g(r['step'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_case8(rows, docs):
    """Fraction of the nonzero gradients per binade, one line per step, on a log axis (the tail
    below fp16's range is thin), with fp16's thresholds and where scales 2^8 and 2^16 move its
    flush threshold 2^-25."""
    ax = Axes("exponents of the demo MLP weight gradients (fp32, 32-true, unscaled)", "binade e (|g| in [2^e, 2^{e+1}))",
              "fraction of nonzero values", ylog=10, xrange=(-55, 5), yrange=(1e-6, 1), key="top left")
    for i, r in enumerate(rows):
        nonzero = r["values"] * (1 - r["zero"] - r["nonfinite"])
        counts = sorted((int(k[1:]), v / nonzero) for k, v in r.items() if k.startswith("e") and k[1:].lstrip("-").isdigit())
        # binade e drawn over [e, e + 1), so the thresholds 2^k sit at k; an empty binade (0 on
        # the log axis) is left out
        pts = [(e, f) for e, f in counts] + ([(counts[-1][0] + 1, counts[-1][1])] if counts else [])
        ax.line(pts, f"step {g(r['step'])}", COLORS[i % len(COLORS)], steps=True)
    for x, color, text in ((-14, "#d95f02", "fp16 smallest normal 2^{-14}"), (-24, "#7570b3", "fp16 smallest subnormal 2^{-24}")):
        ax.vline(x, color, 2, "6,4", text, x + 1.1, 0.03, rotate=True)
    for s in (8, 16):
        x = -25 - s
        ax.vline(x, "#666666", 1, "2,3", f"fp16 flushes below, scale 2^{{{s}}}", x - 0.4, 0.03, rotate=True)
    figure(os.path.join(docs, "img", "gradient_exponents.svg"), [ax], (900, 450))
    return "img/gradient_exponents.svg"


def case8_section(rows, docs):
    skipped = case8_skipped(rows)
    head = """## Case 8: the demo's real weight gradients in fp16, with and without loss scaling

Micikevicius et al. ("Mixed Precision Training", ICLR 2018, Sec. 3.1 and Fig. 2b) report that
about 5% of the weight-gradient values of a Mandarin speech recognition model have exponents
below -24, magnitudes below fp16's smallest subnormal 2^-24 that would be zero in fp16: their
case for keeping an fp32 master copy of the weights. Loss scaling (their Sec. 3.2) multiplies
the gradients by a constant to move such values into fp16's range. The same statistics for the
demo's MLP 784-256-128-10 (ReLU), trained under the fp32 policy 32-true exactly as the demo
trains it (Fashion-MNIST, batch 128, SGD with momentum, cosine decay over 6 epochs: the same
steps as the demo's run): at each step shown, the fp32 weight gradients, unscaled, taken after
backward and before the update.
"""
    if skipped:
        return head + f"\nNot measured in this run: {skipped}\n"
    sel = [r for r in rows if r["name"].startswith("BM_gradients/")]
    sampled = next(r for r in rows if r["name"].startswith("BM_gradients_sampled"))
    first, last = sel[0], sel[-1]
    plot = plot_case8(sel, docs)
    below = [r["exp_below_m24"] for r in sel]
    trend = "grows as the loss falls" if all(a < b for a, b in zip(below, below[1:])) else "goes"
    over = ("nothing overflows" if last["fp16_overflowed_s16"] == 0
            else f"{pct(last['fp16_overflowed_s16'])} overflows")
    bf16 = ("flushes nothing" if all(r["bf16_flushed_s0"] == 0 for r in sel)
            else f"flushes up to {pct(max(r['bf16_flushed_s0'] for r in sel))}")
    how = wrap(f"""Each value is multiplied by the loss scale and rounded to nearest (ties to even) into
fp16. Fractions are of the nonzero values; the "zero" column is the share of exact zeros among all
{g(first['values'])} weight gradients (a weight's gradient is exactly 0 when its input is 0 in every
image of the batch, a blank pixel, or its unit is inactive on every image). The prediction, from
fp16's thresholds alone, is the share of |g| s at or below 2^-25 (half the smallest subnormal:
flushed), below 2^-14 less 2^-25 (subnormal), at or above 65520 (the largest finite value plus half
its ulp: overflowed); a cell shows it only where the cast disagrees. Round to nearest flushes at or
below 2^-25, not below 2^-24: the binade [2^-25, 2^-24) rounds up to the smallest subnormal, so the
flushed share is smaller than the exponent < -24 share. The last row pools every 20th step of the
run, the steps the demo's "fp16-flushed grads" column samples; that column counts over all values,
zeros included: {pct(sampled['fp16_flushed_s0_of_all'])} here.""")
    meaning = wrap(f"""The share below 2^-24 {trend}, from {pct(first['exp_below_m24'])} at step 1 to
{pct(last['exp_below_m24'])} at the last step ({pct(sampled['exp_below_m24'])} pooled over the run):
the same order of magnitude as the published ~{pct(first['exp_below_m24_published'])}, for a very
different model. Without a loss scale fp16 would flush {pct(last['fp16_flushed_s0'])} of the last
step's nonzero gradients and store {pct(last['fp16_subnormal_s0'])} as subnormals, with fewer than
11 significant bits. A scale of 2^8 cuts the flushed share to {pct(last['fp16_flushed_s8'])}, 2^16
to {pct(last['fp16_flushed_s16'])} (the values at or below 2^-41), and {over}. The largest
power-of-two scale that overflows nothing, 2^{g(last['log2_scale_max'])} (max |g| 2^s below 65520),
still flushes {pct(last['fp16_flushed_smax'])}: the exponents have a thin tail down to
|g| = {g(last['min_abs'])} (2^{math.log2(last['min_abs']):.1f}) that no single scale keeps. bf16 has
fp32's exponent range and {bf16}.""")
    return head + f"""
{how}

{case8_table(sel, sampled)}

{meaning}

![exponents of the demo's weight gradients]({plot})

Per layer (fractions as above, fp16 at scale 1):

{case8_layers(sel)}
"""


def main(json_dir, docs):
    data = {name: load(os.path.join(json_dir, name + ".json"))
            for name in ("formats", "stagnation", "stochastic", "summation", "dot_gemm", "underflow",
                         "tensor_core", "gradients")}
    stag, stoch, summ, dotg = data["stagnation"], data["stochastic"], data["summation"], data["dot_gemm"]
    os.makedirs(os.path.join(docs, "img"), exist_ok=True)
    harmonic = [r for r in stoch if r["name"].startswith("harmonic_error/")]
    bias = [r for r in stoch if r["name"].startswith("rounding_bias/")]
    sqrt_n = [r for r in summ if r["name"].startswith("BM_sqrt_n_law")]
    case6 = [r for r in summ if r["name"].startswith("BM_fp16_summation_algorithms")]
    dots = [r for r in dotg if r["name"].startswith("BM_dot_sqrt_n_law")]
    gemm = [r for r in dotg if r["name"].startswith("BM_gemm_error")]
    plot = plot_errors(harmonic, docs)
    stag_plot = plot_stagnation(stag, docs)
    case6_plot = plot_case6(case6, docs)
    hist = plot_histogram(data["underflow"], docs)
    case8 = case8_section(data["gradients"], docs)
    md = f"""# Numerics: rounding error and underflow, measured

Generated by `make numerics` (`bench/numerics_report.py` from the JSON of the eight programs in
`bench/numerics/`: formats, stagnation, stochastic, summation, dot_gemm, underflow, tensor_core,
gradients); do not edit by hand. Each case prints the measured value next to the value from the
specification, from theory or from the literature. Every random draw is seeded: a rerun
reproduces every number.

## Case 1: format constants (measured vs specification)

Measured by rounding experiments on 1000-bit values, nothing read from `precis::format_traits`:
t is the largest k for which 1 + 2^(1-k) survives rounding to nearest; the smallest subnormal is
the last power of two that survives truncation; the smallest normal is the last power of two p
for which p (1 + 2^(1-t)) keeps its t digits; the maximum is a huge value truncated with
saturation. Specifications: IEEE 754-2019 (binary16, binary32, binary64), bfloat16, NVIDIA
TensorFloat-32, OCP 8-bit Floating Point v1.0 (E4M3, E5M2).

{formats_table(data["formats"])}

## Case 2: stagnation of 1 + 1 + 1 + ...

Theory: k ones are exact up to 2^t; 2^t + 1 is a tie that rounds to even (2^t), or it truncates.

{ones_table(stag)}

## Case 3: stagnation of the harmonic series

Each 1/k and each partial sum is rounded once into the format. Published values: Higham & Pranesh,
SIAM J. Sci. Comput. 41(5), 2019, Table 3.1 (round to nearest).

{harmonic_table(stag)}

![harmonic partial sums and stagnation points]({stag_plot})

## Case 4: stochastic rounding: unbiased, and error ~ sqrt(n) u where round to nearest stagnates

**One rounding.** x = 1 + f ulp(1) rounded 2^20 times. Stochastic rounding rounds up with
probability f, so its mean error is 0 with standard error sqrt(f (1 - f) / draws); |z| = |mean| /
std. error below ~3 is indistinguishable from zero. Round to nearest errs by -f ulp every time.

{bias_table(bias)}

**The harmonic sum vs n.** Terms fl(1/k) stored in the format; the reference is the exact sum
of the stored terms. Bounds: deterministic gamma_{{n-1}} (Higham 2002), which does not exist once
nu >= 1, and probabilistic gamma~_n(3) = exp(3 sqrt(n) u + n u^2/(1-u)) - 1, which holds with
probability >= 0.978 (Connolly, Higham & Mary 2021; Croci et al. 2022). Round to nearest
stagnates and crosses the probabilistic bound; stochastic rounding stays below it, its error
divided by sqrt(n) u bounded (it falls as n grows: the later terms are small), and its mean
signed error over {g(harmonic[0]['seeds'])} seeds is within a few standard errors of zero.

![harmonic-sum error vs n]({plot})

{error_table(harmonic)}

## Case 5: the sqrt(n) u law, sums and dot products

Backward error |s^ - s| / sum |x_i| of recursive summation, and |s^ - s| / sum |x_i y_i| of
recursive dot products (each product and each addition rounded once), in the format with round
to nearest, of n values drawn from U[0,1] or U[-1,1], mean of 8 draws (Higham & Mary, SIAM J.
Sci. Comput. 41(5), 2019 and 42(5), 2020). In fp32, and in fp16 before stagnation, the U[0,1]
error divided by sqrt(n) u stays roughly constant: it grows like sqrt(n) u, far below the worst
case. The mean-zero U[-1,1] data stay near a constant multiple of u. fp16 U[0,1] at the largest
n is the stagnation regime, where the sum outgrows the terms' ulp: from n = 4096 for dot
products (whose terms, products of two U[0,1] values, are smaller) and n = 16384 for sums.

**Sums**

{sqrt_n_table(sqrt_n, "gamma_{n-1}")}

**Dot products**

{sqrt_n_table(dots, "gamma_n")}

## Case 6: summation algorithms in fp16

The setup of Fasi & Mikaitis (IEEE Trans. Emerg. Topics Comput. 9(3), 2021, Sec. 8.1; their
script test_summation_algorithms.m): 100000 terms summed in index order, random values
U[-0.002, 0.008] rounded to fp16, or the harmonic terms fl16(1/k). Relative error of the first n
terms against the exact sum of the stored terms, with each algorithm's bound in parentheses
(scaled by kappa = sum |x_i| / |s|; "none" where nu >= 1): recursive gamma_{{n-1}}, pairwise
gamma_{{ceil(log2 n)}}, compensated 2u + 4nu^2, fp32 accumulator rounded once to fp16
u + (1 + u) gamma_{{n-1}}(u32), stochastic gamma~_n(3). As in the paper, recursive summation in
fp16 stagnates (error near 1 for the random data: the sum stops at a few tens while the exact
sum reaches 300), stochastic rounding keeps tracking the exact sum, and compensated summation
stays at the level of one fp16 rounding; so do pairwise summation and the fp32 accumulator,
whose results here are the exact sum rounded once (or nearly) to fp16.

![fp16 summation algorithms]({case6_plot})

{case6_table(case6)}

## Case 7: update stagnation

w = 1 receives the same small update delta (< ulp(1)/2) `steps` times, in the format
(Micikevicius et al., ICLR 2018; Zamirai et al., 2020). By the definition of rounding to
nearest, the weight never moves; stochastic rounding is right in expectation; Kahan-compensated
updates (all operations in the format) carry the lost low part forward.

{update_table(stag)}

{case8}
## Case 9: GEMM error vs K with fp32 accumulation

4 x K times K x 4, U[-1,1] fp32 data rounded into each input format, accumulated in fp32 by
precis's CPU GEMM: exact widening and one FMA per product, a block FMA with b = 1 (Blanchard,
Higham, Lopez, Mary & Pranesh, SIAM J. Sci. Comput. 42(3), 2020); the program caps the GEMM at
its AVX-512 level, below the AMX and AVX512-BF16 kernels that add bf16 products in pairs, so the
rows are the same on every x86 CPU with AVX2 or AVX-512. The error is
max_ij |C - C^|_ij / (|A||B|)_ij. Against the stored inputs the bound is gamma_K(u32); against
the fp32 originals it is 2 u_low + u_low^2 + (1 + u_low)^2 gamma_K(u32). Every point sits under
its bound. fp8 inputs give zero error for moderate K: their products have at most 8 significant
bits, so fp32 partial sums stay exact.

{gemm_table(gemm)}

## Case 10: tensor-core features, read off feature-targeted inner products

Each feature of each architecture's tensor-core model (`precis::tc`, `docs/tensor_cores.md`) is
read off the outputs of inner products built to expose it, as the hardware studies do (Fasi,
Higham, Mikaitis & Pranesh, PeerJ Comput. Sci. 7:e330, 2021; Li et al., "FTTN", 2024): exact
products from (1 + 2^-m)^2; subnormal inputs from the smallest subnormal times 1; the alignment
width t as the largest j for which 1 - 2^-j comes out below 1; the result's significant bits p
from 1 + 2^-j; the result's rounding from c = +-(1 + 3 * 2^-(p-1)) plus +-1, which lies off the
midpoint of two p-bit neighbours; whether c is cut like the products from c = -2^-(t+1) next to
a product 1; the products per step as the smallest b for which two products 2^-(t+1) at
positions 0 and 1 survive +1 and -1 placed at b and b + 1 (they do only when summed in a step of
their own). Each cell is the value the vectors measure, with the published one in parentheses;
a value in bold differs from the publication. Sources: KM, Khattak & Mikaitis, "Accurate models
of NVIDIA tensor cores" (ACM TACO 2025, arXiv 2512.07004), the parameters of their models
validated on recorded outputs of each GPU; FHMP, Fasi et al. 2021 (exact products, no guard
digits, results truncated, subnormal inputs accepted on V100, T4 and A100); DS, the DeepSeek-V3
technical report (2024, section 3.3: fp8 accumulation on Hopper keeps about 14 bits); precis
recordings, 300 WMMA tiles per format and 100 tiles per instruction from precis's device GEMM
(`wgmma` fp16/fp8, `mma.sync` tf32) recorded on an H100 (`tests/data/tensor-core`). The one
difference is tf32 through WMMA (`sm90_wmma`), where precis's recordings decide what KM's
validation data (K = 4) cannot: nvcc lowers WMMA's m16n16k8 to k4 instructions, and two steps of
4 products fit every recorded WMMA output; `mma.sync.m16n8k8` is one step of 8, as KM's model
says.

{tc_table(data["tensor_core"])}

## Underflow and loss scaling

2^20 synthetic gradient-like values: magnitudes log-uniform over [2^-40, 2^0) with random signs
(case 8 measures the demo's real gradients). Each value is multiplied by a loss scale and rounded to
nearest into the format. The predicted fractions follow from the format's thresholds: with
log-uniform data, the share of binades below half the smallest subnormal flushes, and the share
between there and the smallest normal becomes subnormal.

![exponent histogram with fp16 thresholds]({hist})

{cast_table(data["underflow"])}
"""
    with open(os.path.join(docs, "numerics.md"), "w") as f:
        f.write(md)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
