#!/usr/bin/env python3
"""bench/plotting.py (the reports' SVG plots) and bench/demo_report.py on a recorded demo run.

Expected values are worked out by hand: where a point lands in the panel, which ticks gnuplot's
spacing rule gives for a range, how markup splits into pieces, which points break a line. The
demo report is checked against its JSON: every plot docs/demo.md links exists, parses as SVG,
and has one line per run of its model.
Usage: plotting_test.py PRECIS_SOURCE_DIR
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

src = sys.argv[1]
sys.path.insert(0, os.path.join(src, "bench"))
import plotting as pl  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def close(a, b, tol=0.06):
    return abs(a - b) <= tol


# a log-2 axis from 1 to 1024 over 0..100 px: 32 = 2^5 sits halfway; linear 0..10 over 100..0
s = pl.Scale(1, 1024, 0, 100, log=2)
check(close(s(32), 50) and close(s(1), 0) and close(s(1024), 100), f"log scale: {s(1)}, {s(32)}, {s(1024)}")
s = pl.Scale(0, 10, 100, 0)
check(close(s(2.5), 75), f"linear scale, reversed: {s(2.5)}")

# gnuplot's tick spacing, 20 / (span / power of 10 below it) compared with 40, 20, 10, 4, 2, 0.5:
# span 41.5 -> 5 (4.8 > 4: half a power), 0.105 -> 0.02 (19 > 10: a fifth), 6 -> 1 (3.3 > 2: one
# power), 8 -> 1 (2.5 > 2), 0.37 -> 0.05 (5.4 > 4), 300 -> 50 (6.7 > 4), 15 -> 2 (13.3 > 10)
for span, step in ((41.5, 5), (0.105, 0.02), (6, 1), (8, 1), (0.37, 0.05), (300, 50), (15, 2)):
    got = pl.nice_step(span)
    check(math.isclose(got, step, rel_tol=1e-9), f"nice_step({span}) = {got}, expected {step}")
check(pl.linear_ticks(-0.3, 1.05, 0.5) == [0.0, 0.5, 1.0] or pl.linear_ticks(-0.3, 1.05, 0.5) == [-0.0, 0.5, 1.0],
      f"linear ticks: {pl.linear_ticks(-0.3, 1.05, 0.5)}")
check(pl.format_linear(0.15000000000000002, 0.05) == "0.15" and pl.format_linear(-1e-17, 0.05) == "0",
      "tick labels: rounding and no -0")
check(pl.log_ticks(1, 2 ** 23, 2) == list(range(0, 24, 2)), f"log ticks thinned to <= 12: {pl.log_ticks(1, 2 ** 23, 2)}")
check(pl.log_ticks(1e-6, 1, 10) == list(range(-6, 1)), f"log ticks: {pl.log_ticks(1e-6, 1, 10)}")

# markup: superscripts and subscripts, braced or one character
check(pl.parse_enhanced("2^{-14} x_n") == [("2", 0), ("-14", 1), (" x", 0), ("n", -1)],
      f"markup: {pl.parse_enhanced('2^{-14} x_n')}")
check(pl.parse_enhanced("a^b") == [("a", 0), ("b", 1)] and pl.parse_enhanced("plain") == [("plain", 0)], "markup, short forms")

# automatic ranges: a line from (0, 0.1) to (6, 0.47) spans x 0..6 and y 0.1..0.5 (step 0.05)
ax = pl.Axes("t", "x", "y")
ax.line([(0, 0.1), (3, 0.2), (6, 0.47)], "a")
check(ax._range(0) == (0, 6), f"x range: {ax._range(0)}")
lo, hi = ax._range(1)
check(close(lo, 0.1, 1e-9) and close(hi, 0.5, 1e-9), f"y range: {(lo, hi)}")
# a range given as NaN (a diverged run's loss) or empty is replaced by the data's
ax = pl.Axes(yrange=(float("nan"), float("nan")), xrange=(3, 3))
ax.line([(0, 0.1), (6, 0.47)])
check(ax._range(0) == (0, 6) and all(math.isclose(a, b) for a, b in zip(ax._range(1), (0.1, 0.5))),
      f"unusable ranges fall back to the data: {ax._range(0)}, {ax._range(1)}")
# boxes stand on zero and take their width into the x range
ax = pl.Axes()
ax.boxes([(1, 3), (2, 5)], "b", width=0.9)
check(ax._range(1)[0] == 0 and ax._range(0)[0] <= 0.55 and ax._range(0)[1] >= 2.45, f"box ranges: {ax._range(0)}, {ax._range(1)}")
# log axes widen to whole powers
ax = pl.Axes(xlog=2, ylog=10)
ax.line([(3, 0.002), (100, 0.5)])
check(ax._range(0) == (2, 128) and all(math.isclose(a, b) for a, b in zip(ax._range(1), (1e-3, 1))),
      f"log ranges: {ax._range(0)}, {ax._range(1)}")

# a figure: one line broken by a NaN and by a value a log axis cannot show; the first point at
# the panel's lower left corner (margins 74 left, 46 bottom)
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "f.svg")
    ax = pl.Axes("broken", "n", "v", ylog=10, xrange=(0, 4), yrange=(1, 1000), key="bottom right")
    ax.line([(0, 1), (1, 10), (2, float("nan")), (3, 100), (3.5, 0), (4, 1000)], "with gaps", steps=False)
    ax.vline(2, text="mark 2^{3}", rotate=True)
    ax.points([(1, 10)], marker="square")
    pl.figure(path, [ax], (500, 300))
    root = ET.parse(path).getroot()
    check(root.tag == SVG + "svg" and root.get("width") == "500", "figure: an <svg> element of the asked width")
    lines = [e for e in root.iter(SVG + "polyline")]
    runs = [[tuple(float(v) for v in p.split(",")) for p in e.get("points").split()] for e in lines]
    check([len(r) for r in runs] == [2, 1, 1], f"a line broken at NaN and at 0 on a log axis: runs of {[len(r) for r in runs]}")
    if runs:
        x0, y0 = runs[0][0]
        check(close(x0, 74) and close(y0, 300 - 46), f"first point at the lower left corner: {(x0, y0)}")
        x1, y1 = runs[0][1]
        # x = 1 of 0..4 over 74..484, y = 10 a third of the way up 254..30 (log 1..1000)
        check(close(x1, 74 + 410 / 4) and close(y1, 254 - 224 / 3), f"second point: {(x1, y1)}")
    texts = ["".join(t.itertext()) for t in root.iter(SVG + "text")]
    check("mark 23" in texts, f"the mark's label with its superscript piece: {texts}")
    check(any(t == "with gaps" for t in texts), "the legend names the line")
    check(len(list(root.iter(SVG + "rect"))) >= 4, "background, frame, legend box and the square marker")
    try:
        pl.marker("star", 0, 0, 1, "#000")
        check(False, "an unknown marker is refused")
    except ValueError as e:
        check("unknown marker 'star'" in str(e), f"the marker error names it: {e}")

    # the demo report on a recorded run: every linked plot exists and parses, one loss line per run
    results = os.path.join(src, "tests", "data", "demo", "results.json")
    out = subprocess.run([sys.executable, os.path.join(src, "bench", "demo_report.py"), results, tmp],
                         capture_output=True, text=True)
    check(out.returncode == 0, f"demo_report.py failed: {out.stderr}")
    md = open(os.path.join(tmp, "demo.md")).read() if out.returncode == 0 else ""
    links = [l.split("](")[1].rstrip(")") for l in md.splitlines() if l.startswith("![")]
    data = json.load(open(results))
    models = [m for m in data["models"] if any(r["model"] == m for r in data["results"])]
    check(len(links) == 2 * len(models), f"two plots per model: {links}")
    for link in links:
        p = os.path.join(tmp, link)
        check(link.endswith(".svg") and os.path.exists(p), f"linked plot {link} written")
        if not os.path.exists(p):
            continue
        root = ET.parse(p).getroot()
        model = os.path.basename(link).split("_")[1]
        runs = sum(r["model"] == model for r in data["results"])
        if link.endswith("_loss.svg"):
            n = len(list(root.iter(SVG + "polyline")))
            # a legend sample per run is a <line>; each run's curve one polyline (no gaps in a loss curve)
            check(n == runs, f"{link}: {n} curves for {runs} runs")

if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("plotting.py: scales, gnuplot's tick spacing, markup, ranges, broken lines; the demo report's plots, one curve per run")
