"""gnuplot helpers shared by the report scripts: bench/numerics_report.py (docs/numerics.md) and
bench/demo_report.py (docs/demo.md). Every plot is a PNG drawn by gnuplot from a temporary data
file, so both reports look alike and need nothing beyond gnuplot."""
import os
import subprocess

COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"]


def gnuplot(lines):
    subprocess.run(["gnuplot"], input="\n".join(lines), text=True, check=True)


def write_dat(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(" ".join(str(v) for v in row) + "\n")


def fp16_threshold_marks():
    """Dashed verticals at fp16's smallest normal (2^-14) and smallest subnormal (2^-24), on an
    x axis of binades e (|x| in [2^e, 2^(e+1)))."""
    return [
        "set arrow from -14,graph 0 to -14,graph 1 nohead lw 2 dt 2 lc rgb '#d95f02' front",
        "set label 'fp16 smallest normal 2^{-14}' at -13.5,graph 0.93 tc rgb '#d95f02' front",
        "set arrow from -24,graph 0 to -24,graph 1 nohead lw 2 dt 2 lc rgb '#7570b3' front",
        "set label 'fp16 smallest subnormal 2^{-24}' at -23.5,graph 0.84 tc rgb '#7570b3' front",
    ]


def exponent_histogram(png, series, title, ylabel="count", size="900,400"):
    """Counts per binade with fp16's thresholds marked. series: [(label, {binade: value})]; one
    series is drawn as boxes, several as steps."""
    files, plots = [], []
    for i, (label, counts) in enumerate(series):
        dat = f"{png}.{i}.dat"
        write_dat(dat, sorted(counts.items()))
        files.append(dat)
        color = COLORS[i % len(COLORS)]
        if len(series) == 1:
            plots.append(f"'{dat}' u 1:2 w boxes lc rgb '{color}' t '{label}' noenhanced")
        else:
            plots.append(f"'{dat}' u ($1-0.5):2 w steps lw 2 lc rgb '{color}' t '{label}' noenhanced")
    gnuplot([f"set terminal pngcairo size {size} font 'sans,10'", f"set output '{png}'", "set encoding utf8",
             "set style fill solid 0.6", "set boxwidth 0.9", "set xlabel 'binade e (|x| in [2^e, 2^{e+1}))'",
             f"set ylabel '{ylabel}'", "set grid ytics", "set key top left", "set offsets 0, 0, graph 0.35, 0",
             *fp16_threshold_marks(), f"set title '{title}'", "plot " + ", ".join(plots)])
    for f in files:
        os.remove(f)


def line_plot(png, series, title, xlabel, ylabel, logy=False, yrange=None, size="900,450"):
    """series: [(label, [(x, y), ...])], one line each; yrange: (lo, hi) or None for gnuplot's."""
    files, plots = [], []
    for i, (label, pts) in enumerate(series):
        dat = f"{png}.{i}.dat"
        write_dat(dat, pts)
        files.append(dat)
        plots.append(f"'{dat}' u 1:2 w l lw 2 lc rgb '{COLORS[i % len(COLORS)]}' t '{label}' noenhanced")
    script = [f"set terminal pngcairo size {size} font 'sans,10'", f"set output '{png}'", "set encoding utf8",
              f"set xlabel '{xlabel}'", f"set ylabel '{ylabel}'", "set grid", "set key top right box opaque",
              f"set title '{title}'"]
    if logy:
        script += ["set logscale y 10"]
    if yrange:
        script += [f"set yrange [{yrange[0]}:{yrange[1]}]"]
    gnuplot(script + ["plot " + ", ".join(plots)])
    for f in files:
        os.remove(f)
