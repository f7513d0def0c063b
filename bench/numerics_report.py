#!/usr/bin/env python3
"""Writes docs/numerics.md (and its PNG plots, through gnuplot) from the JSON output of the
bench/numerics programs. Nothing in the report is typed by hand: every number and curve comes
from the JSON.

  numerics_report.py JSON_DIR DOCS_DIR
"""
import json
import os
import subprocess
import sys


def load(path):
    out = []
    for r in json.load(open(path))["benchmarks"]:
        if r.get("run_type", "iteration") == "iteration":
            out.append(r)
    return out


def g(x):
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.6g}"


def formats_table(rows):
    lines = ["| format | digits (spec) | max (spec) | min normal (spec) | min subnormal (spec) | u |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if not r["name"].startswith("format_constants/"):
            continue
        ok = all(r[k] == r[k + "_spec"] for k in ("digits", "max", "min_normal", "min_subnormal"))
        lines.append(f"| {r['label']} | {g(r['digits'])} ({g(r['digits_spec'])}) | {g(r['max'])} ({g(r['max_spec'])}) | "
                     f"{g(r['min_normal'])} ({g(r['min_normal_spec'])}) | {g(r['min_subnormal'])} "
                     f"({g(r['min_subnormal_spec'])}) | {g(r['u'])} |" + ("" if ok else " **mismatch**"))
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
    lines = ["| format | n | RN error | SR error (mean of 10) | SR bias | gamma_{n-1} | gamma~_n(3) | SR / gamma~ | RN / gamma~ |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        det = g(r["bound_det"]) if r["bound_det"] >= 0 else "none (nu >= 1)"
        lines.append(f"| {r['label'].split(' (')[0]} | {g(r['n'])} | {g(r['err_rn'])} | {g(r['err_sr'])} | "
                     f"{g(r['bias_sr'])} | {det} | {g(r['bound_prob'])} | {g(r['sr_over_prob'])} | {g(r['rn_over_prob'])} |")
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
    data = os.path.join(docs, "img", "exponents.dat")
    with open(data, "w") as f:
        for k, v in sorted(((int(k[1:]), v) for k, v in h.items() if k.startswith("e") and k[1:].lstrip("-").isdigit())):
            f.write(f"{k} {v}\n")
    png = os.path.join(docs, "img", "exponent_histogram.png")
    script = [
        "set terminal pngcairo size 900,400 font 'sans,10'", f"set output '{png}'", "set encoding utf8",
        "set style fill solid 0.6", "set boxwidth 0.9", "set xlabel 'binade e (|x| in [2^e, 2^{e+1}))'",
        "set ylabel 'count'", "set grid ytics", "set key top left", "set offsets 0, 0, graph 0.35, 0",
        "set arrow from -14,graph 0 to -14,graph 1 nohead lw 2 dt 2 lc rgb '#d95f02' front",
        "set label 'fp16 smallest normal 2^{-14}' at -13.5,graph 0.93 tc rgb '#d95f02' front",
        "set arrow from -24,graph 0 to -24,graph 1 nohead lw 2 dt 2 lc rgb '#7570b3' front",
        "set label 'fp16 smallest subnormal 2^{-24}' at -23.5,graph 0.84 tc rgb '#7570b3' front",
        "set title 'exponents of the synthetic gradient data (log-uniform, 2^{20} values)'",
        f"plot '{data}' u 1:2 w boxes lc rgb '#1b9e77' t 'count per binade'",
    ]
    subprocess.run(["gnuplot"], input="\n".join(script), text=True, check=True)
    os.remove(data)
    return "img/exponent_histogram.png"


def sqrt_n_table(rows):
    lines = ["| data | n | backward error | / u | / (sqrt(n) u) | gamma_{n-1} |", "|---|---|---|---|---|---|"]
    for r in rows:
        det = g(r["bound_det"]) if r["bound_det"] >= 0 else "none (nu >= 1)"
        lines.append(f"| {r['label'].split(' (')[0]} | {g(r['n'])} | {g(r['err'])} | {g(r['err_over_u'])} | "
                     f"{g(r['err_over_sqrt_n_u'])} | {det} |")
    return "\n".join(lines)


def plot_errors(rows, docs):
    img = os.path.join(docs, "img")
    os.makedirs(img, exist_ok=True)
    panels = []
    for fmt in ("fp16", "bf16"):
        data = os.path.join(img, f"harmonic_error_{fmt}.dat")
        with open(data, "w") as f:
            f.write("# n err_rn err_sr bound_det bound_prob\n")
            for r in rows:
                if r["label"].startswith(fmt):
                    det = r["bound_det"] if r["bound_det"] >= 0 else "NaN"
                    f.write(f"{r['n']} {r['err_rn']} {r['err_sr']} {det} {r['bound_prob']}\n")
        panels.append((fmt, data))
    png = os.path.join(img, "harmonic_error.png")
    script = [
        "set terminal pngcairo size 1100,450 font 'sans,10'",
        f"set output '{png}'",
        "set multiplot layout 1,2",
        "set encoding utf8",
        "set logscale x 2", "set logscale y 10", "set format x '2^{%L}'", "set format y '10^{%L}'",
        "set xlabel 'n'", "set ylabel 'relative error'", "set key bottom right box opaque", "set grid",
    ]
    for fmt, data in panels:
        script += [
            f"set title 'harmonic sum in {fmt}'",
            f"plot '{data}' u 1:2 w lp pt 7 t 'round to nearest', '' u 1:3 w lp pt 5 t 'stochastic (mean of 10)', "
            f"'' u 1:4 w l dt 2 lw 2 t 'γ_{{n-1}} (deterministic)', '' u 1:5 w l dt 4 lw 2 t 'γ̃_n(3) (probabilistic)'",
        ]
    script.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(script), text=True, check=True)
    for _, data in panels:
        os.remove(data)
    return "img/harmonic_error.png"


def main(json_dir, docs):
    stag = load(os.path.join(json_dir, "stagnation.json"))
    summ = load(os.path.join(json_dir, "summation.json"))
    gemm = load(os.path.join(json_dir, "gemm_error.json"))
    under = load(os.path.join(json_dir, "underflow.json"))
    harmonic = [r for r in summ if r["name"].startswith("BM_harmonic_error")]
    sqrt_n = [r for r in summ if r["name"].startswith("BM_sqrt_n_law")]
    plot = plot_errors(harmonic, docs)
    hist = plot_histogram(under, docs)
    md = f"""# Numerics: rounding error and underflow, measured

Generated by `make numerics` (`bench/numerics_report.py` from the JSON of `bench/numerics/*`);
do not edit by hand. Each case prints the measured value next to the value from the
specification, from theory or from the literature.

## Case 1: format constants (measured vs specification)

The maximum is measured by rounding 2 x max toward zero with saturation; the other constants come
from `precis::format_traits`. Specifications: IEEE 754-2019 (binary16, binary32), bfloat16, OCP
8-bit Floating Point v1.0 (E4M3, E5M2).

{formats_table(stag)}

## Case 2: stagnation of 1 + 1 + 1 + ...

Theory: k ones are exact up to 2^t; 2^t + 1 is a tie that rounds to even (2^t), or it truncates.

{ones_table(stag)}

## Case 3: stagnation of the harmonic series

Each 1/k and each partial sum is rounded once into the format. Published values: Higham & Pranesh,
SIAM J. Sci. Comput. 41(5), 2019, Table 3.1 (round to nearest).

{harmonic_table(stag)}

## Case 4: harmonic-sum error vs n, round to nearest vs stochastic rounding

Terms fl(1/k) stored in the format; the reference is the exact sum of the stored terms. Bounds:
deterministic gamma_{{n-1}} (Higham 2002), which does not exist once nu >= 1, and probabilistic
gamma~_n(3) = exp(3 sqrt(n) u + n u^2/(1-u)) - 1, which holds with probability >= 0.978
(Connolly, Higham & Mary 2021). Round to nearest stagnates and crosses the probabilistic bound;
stochastic rounding stays far below it, with a mean bias indistinguishable from zero.

![harmonic-sum error vs n]({plot})

{error_table(harmonic)}

## Case 5: the sqrt(n) u law

Backward error |s^ - s| / sum |x_i| of recursive summation (round to nearest) of n values drawn
from U[0,1] or U[-1,1], mean of 8 draws (Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019 and
42(5), 2020). In fp32 and in fp16 before stagnation, the U[0,1] error divided by sqrt(n) u stays
roughly constant: it grows like sqrt(n) u, far below the worst case gamma_{{n-1}}. The mean-zero
U[-1,1] data stay near a constant multiple of u. fp16 U[0,1] beyond n = 4096 is the
stagnation regime: the sum outgrows the terms' ulp.

{sqrt_n_table(sqrt_n)}

## Case 7: update stagnation

w = 1 receives the same small update delta (< ulp(1)/2) `steps` times, in the format
(Micikevicius et al., ICLR 2018; Zamirai et al., 2020). By the definition of rounding to
nearest, the weight never moves; stochastic rounding is right in expectation; Kahan-compensated
updates (all operations in the format) carry the lost low part forward.

{update_table(stag)}

## Case 9: GEMM error vs K with fp32 accumulation

4 x K times K x 4, U[-1,1] fp32 data rounded into each input format, accumulated in fp32 by
precis's CPU GEMM: exact widening and one FMA per product, a block FMA with b = 1 (Blanchard,
Higham, Lopez, Mary & Pranesh, SIAM J. Sci. Comput. 42(3), 2020). The error is
max_ij |C - C^|_ij / (|A||B|)_ij. Against the stored inputs the bound is gamma_K(u32); against
the fp32 originals it is 2 u_low + u_low^2 + (1 + u_low)^2 gamma_K(u32). Every point sits under
its bound. fp8 inputs give zero error for moderate K: their products have at most 8 significant
bits, so fp32 partial sums stay exact.

{gemm_table(gemm)}

## Underflow and loss scaling

2^20 synthetic gradient-like values: magnitudes log-uniform over [2^-40, 2^0) with random signs
(the demo's real gradients are case 8). Each value is multiplied by a loss scale and rounded to
nearest into the format. The predicted fractions follow from the format's thresholds: with
log-uniform data, the share of binades below half the smallest subnormal flushes, and the share
between there and the smallest normal becomes subnormal.

![exponent histogram with fp16 thresholds]({hist})

{cast_table(under)}
"""
    with open(os.path.join(docs, "numerics.md"), "w") as f:
        f.write(md)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
