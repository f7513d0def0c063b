#!/usr/bin/env python3
"""Each kernel's share of the GPU time in an Nsight Compute per-kernel summary
(`ncu --metrics gpu__time_duration.sum --print-summary per-kernel PROGRAM > LOG`), as a table:
kernel (its name without arguments), grid / block, invocations, mean and total µs, share.

  ncu_shares.py LOG [--top N]
"""
import argparse
import re
import sys

HEAD = re.compile(r"^\s+(\S.*?)\s\((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\), .*Invocations (\d+)\s*$")
TIME = re.compile(r"^\s+gpu__time_duration\.sum\s+(\w+)\s+([\d.,]+)\s+([\d.,]+)\s+([\d.,]+)\s*$")
UNIT = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6}


def short(name):
    """A kernel's name up to its argument list, its template arguments kept."""
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return name[:i].removeprefix("void ")
    return name.removeprefix("void ")


def parse(text):
    rows, head = [], None
    for line in text.splitlines():
        m = HEAD.match(line)
        if m:
            head = (short(m.group(1)), f"{m.group(2)}x{m.group(3)}x{m.group(4)} / {m.group(5)}x{m.group(6)}x{m.group(7)}",
                    int(m.group(8)))
            continue
        m = TIME.match(line)
        if m and head:
            if m.group(1) not in UNIT:
                sys.exit(f"ncu_shares.py: unknown time unit '{m.group(1)}'")
            mean = float(m.group(4).replace(",", "")) * UNIT[m.group(1)]
            rows.append((head[0], head[1], head[2], mean, mean * head[2]))
            head = None
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    rows = parse(open(a.log, errors="replace").read())
    if not rows:
        sys.exit(f"ncu_shares.py: no per-kernel gpu__time_duration.sum summary in {a.log}")
    total = sum(r[4] for r in rows)
    print(f"{sum(r[2] for r in rows)} kernels, {total:.1f} µs of GPU time\n")
    print("| kernel | grid / block | invocations | mean µs | total µs | share |")
    print("|---|---|---|---|---|---|")
    for name, grid, n, mean, tot in sorted(rows, key=lambda r: -r[4])[:a.top]:
        print(f"| `{name}` | {grid} | {n} | {mean:.2f} | {tot:.1f} | {100 * tot / total:.1f}% |")


if __name__ == "__main__":
    main()
