#!/usr/bin/env python3
"""Ratio table from Google Benchmark JSON (run with --benchmark_repetitions=N and
--benchmark_format=json). For every conversion, the median bytes/s of precis::convert divided
by the medians of the baselines measured in the same run."""
import json
import re
import sys
from collections import defaultdict


def main(path):
    runs = json.load(open(path))["benchmarks"]
    med = {}
    for r in runs:
        if r.get("aggregate_name") == "median":
            med[r["run_name"]] = r["bytes_per_second"]
    if not med:  # single repetition
        for r in runs:
            med[r["name"]] = r["bytes_per_second"]
    table = defaultdict(dict)
    for name, bps in med.items():
        m = re.match(r"BM_(\w+?)<(.+?), (.+?)>/(\d+)", name)
        if m:
            kind, src, dst, n = m.groups()
            table[(src.replace("precis::", ""), dst.replace("precis::", ""), int(n))][kind] = bps
    print("| conversion | n | precis GB/s | scalar loop GB/s | memcpy GB/s | Eigen cast GB/s | vs scalar | vs memcpy | vs Eigen |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (src, dst, n), row in sorted(table.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
        p = row.get("precis_convert")
        if not p:
            continue
        def gb(k):
            return f"{row[k] / 1e9:.2f}" if k in row else "-"
        def ratio(k):
            return f"{p / row[k]:.2f}x" if k in row else "-"
        print(f"| {src} -> {dst} | {n} | {p / 1e9:.2f} | {gb('scalar_loop')} | {gb('memcpy')} | "
              f"{gb('eigen_cast')} | {ratio('scalar_loop')} | {ratio('memcpy')} | {ratio('eigen_cast')} |")


if __name__ == "__main__":
    main(sys.argv[1])
