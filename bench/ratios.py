#!/usr/bin/env python3
"""Tables from Google Benchmark JSON (run with --benchmark_repetitions=N and
--benchmark_format=json); medians of the repetitions, ratios against baselines measured in the
same run.

  ratios.py convert.json             conversion table (precis::convert vs scalar, memcpy, Eigen)
  ratios.py --gemm gemm.json [rerun.json ...]   GEMM GFLOP/s vs Eigen, oneDNN and OpenBLAS (when built with them)
                                     and the measured peak of the unit each kernel runs on
                                     (later files override rows they re-measure)
  ratios.py --allreduce allreduce.json   all-reduce bus bandwidth vs plain MPI_Allreduce
  ratios.py --stream bench.json      element-wise / reduction GB/s vs memcpy of the same bytes
  ratios.py --tape tape.json         tape per-op ns vs the engine, MLP step ms and % of the FMA
                                     peak, step memory (bf16-mixed / 32-true)
"""
import json
import re
import sys
from collections import defaultdict


def medians(path, field):
    runs = json.load(open(path))["benchmarks"]
    med = {}
    for r in runs:
        if r.get("aggregate_name") == "median" and field in r:
            med[r["run_name"]] = r[field]
    if not med:  # single repetition
        for r in runs:
            if field in r:
                med[r["name"]] = r[field]
    return med


def convert_table(path):
    table = defaultdict(dict)
    for name, bps in medians(path, "bytes_per_second").items():
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


MLP = {"-1": "128x784x256", "-2": "128x256x128", "-3": "128x128x10"}


def gemm_table(paths):
    med = {}
    isa = None  # the level precis's GEMM ran at (bench_gemm records it in the JSON's context)
    for path in paths:
        med.update(medians(path, "GFLOP/s"))
        isa = json.load(open(path))["context"].get("precis_gemm_isa", isa)
    # the ceilings measured on one core: register-only loops of each unit, and the tile kernels
    # on L1-resident panels (absent when a --benchmark_filter left them out)
    ceilings = {k: v for k, v in med.items() if k.startswith(("BM_peak", "BM_tile_kernel"))}
    if ceilings:
        print(f"Measured ceilings, 1 core; `_all` rows: every thread at once, summed (precis's GEMM at level "
              f"{isa or 'not recorded'}):\n")
        print("| ceiling | GFLOP/s |")
        print("|---|---|")
        for k, v in sorted(ceilings.items()):
            print(f"| {k[3:]} | {v:.1f} |")
        print()
    # Each column's "% peak" is against the unit its kernel runs on: the AVX-512 FMA where the
    # level is avx512 or above (or, in a JSON without the level, wherever its peak was measured),
    # else the AVX2 one; bf16 inputs against vdpbf16ps at avx512_bf16, nothing at amx_bf16 (no
    # AMX peak loop), else the fp32 FMA (widened while packing).
    def peak(kind):
        avx2, avx512 = med.get(f"BM_peak_fma<{kind}>"), med.get(f"BM_peak_fma_avx512<{kind}>")
        wide = isa in ("avx512", "avx512_bf16", "amx_bf16") if isa else avx512 is not None
        return avx512 if wide and avx512 else avx2
    peak32, peak64 = peak("float"), peak("double")
    dpbf16 = med.get("BM_peak_dpbf16")
    if isa == "amx_bf16":
        peak_bf16 = None
    elif isa == "avx512_bf16" or (isa is None and dpbf16):
        peak_bf16 = dpbf16
    else:
        peak_bf16 = peak32
    rows = defaultdict(dict)
    narrow = defaultdict(dict)
    onednn = {"sgemm": "float", "bf16": "bfloat16"}
    for name, g in med.items():
        m = re.match(r"BM_onednn_(\w+)/n:(-?\d+)/threads:(\d+)", name)
        if m and m.group(1) in onednn:
            rows[(m.group(2), int(m.group(3)))][("onednn", onednn[m.group(1)])] = g
            continue
        m = re.match(r"BM_openblas_gemm<(\w+)>/n:(-?\d+)/threads:(\d+)", name)
        if m:
            rows[(m.group(2), int(m.group(3)))][("openblas", m.group(1))] = g
            continue
        m = re.match(r"BM_(precis|eigen)_gemm<(.+?)>/n:(-?\d+)/threads:(\d+)", name)
        if not m:
            continue
        who, types, n, t = m.groups()
        parts = [x.replace("precis::", "").strip() for x in types.split(",")]
        if who == "precis" and len(parts) == 2 and parts[0] == parts[1] and parts[0] in ("half", "bfloat16"):
            narrow[(n, int(t))][parts[0]] = g  # accumulating in the 16-bit format
            continue
        rows[(n, int(t))][(who, parts[0])] = g
    # the tuned libraries the run was built with, each beside the input formats it has
    baselines = [(who, label) for who, label in (("onednn", "oneDNN"), ("openblas", "OpenBLAS"))
                 if any(w == who for row in rows.values() for w, _ in row)]
    has = {who: {src for row in rows.values() for w, src in row if w == who} for who, _ in baselines}
    cols = [("float", peak32), ("double", peak64), ("bfloat16", peak_bf16), ("half", peak32),
            ("float8_e4m3", peak32)]
    head, rule = "| shape | threads |", "|---|---|"
    for src, _ in cols:
        head += f" {src} precis | Eigen |"
        rule += "---|---|"
        for who, label in baselines:
            if src in has[who]:
                head += f" {label} | vs {label} |"
                rule += "---|---|"
        head += " % peak |"
        rule += "---|"
    print(head)
    print(rule)

    def key(kv):
        n, t = kv[0]
        return (t, int(n) < 0, abs(int(n)))

    for (n, t), row in sorted(rows.items(), key=key):
        shape = MLP.get(n, f"{n}^3")
        line = f"| {shape} | {t} |"
        for src, pk in cols:
            p = row.get(("precis", src))
            e = row.get(("eigen", src))
            line += f" {p:.1f} |" if p else " - |"
            line += f" {e:.1f} |" if e else " - |"
            for who, _ in baselines:
                if src in has[who]:
                    d = row.get((who, src))
                    line += f" {d:.1f} |" if d else " - |"
                    line += f" {p / d:.2f}x |" if p and d else " - |"
            line += f" {100 * p / (pk * t):.0f}% |" if p and pk else " - |"
        print(line)

    # the linear layer's forward, C = X W^T (B a transposed view), against oneDNN's sgemm 'N', 'T'
    linear = defaultdict(dict)
    for name, g in med.items():
        m = re.match(r"BM_(precis|onednn)_linear(?:<.+?>)?/n:(-?\d+)/threads:(\d+)", name)
        if m:
            linear[(m.group(2), int(m.group(3)))][m.group(1)] = g
    if linear:
        print("\nThe linear layer's forward, C = X W^T with W stored [n, k] (fp32), GFLOP/s:\n")
        print("| shape | threads | precis | oneDNN | vs oneDNN | % peak |")
        print("|---|---|---|---|---|---|")
        for (n, t), v in sorted(linear.items(), key=key):
            p, d = v.get("precis"), v.get("onednn")
            print(f"| {MLP.get(n, f'{n}^3')} | {t} | " + (f"{p:.1f}" if p else "-") + " | " + (f"{d:.1f}" if d else "-") +
                  " | " + (f"{p / d:.2f}x" if p and d else "-") + " | " + (f"{100 * p / (peak32 * t):.0f}%" if p and peak32 else "-") + " |")

    # the threads' split: the automatic rule (a grid of threads on more than 4 where the rows
    # would be split) against the rows split with B shared, in the same run
    split = defaultdict(dict)
    for name, g in med.items():
        m = re.match(r"BM_precis_gemm(_rows)?<(.+?), (.+?)>/n:(-?\d+)/threads:(\d+)", name)
        if m:
            src = m.group(2).replace("precis::", "") + " -> " + m.group(3).replace("precis::", "")
            split[(m.group(4), int(m.group(5)), src)]["rows" if m.group(1) else "auto"] = g
    split = {k: v for k, v in split.items() if "rows" in v and "auto" in v}
    if split:
        print("\nThe threads' split: automatic (a grid on more than 4 threads) against rows with B shared, GFLOP/s:\n")
        print("| shape | threads | input -> accumulator | rows, B shared | automatic | ratio |")
        print("|---|---|---|---|---|---|")
        for (n, t, src), v in sorted(split.items(), key=lambda kv: (kv[0][1], int(kv[0][0]) < 0, abs(int(kv[0][0])), kv[0][2])):
            print(f"| {MLP.get(n, f'{n}^3')} | {t} | {src} | {v['rows']:.1f} | {v['auto']:.1f} | {v['auto'] / v['rows']:.2f}x |")

    if narrow:
        print("\nAccumulating in the 16-bit format (every product and sum rounded to it), against "
              "Eigen's product of the same type, which does the same arithmetic:\n")
        print("| shape | threads | bf16 precis | Eigen | ratio | fp16 precis | Eigen | ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for (n, t), row in sorted(narrow.items(), key=key):
            line = f"| {MLP.get(n, f'{n}^3')} | {t} |"
            for src in ("bfloat16", "half"):
                p, e = row.get(src), rows[(n, t)].get(("eigen", src))
                line += f" {p:.2f} |" if p else " - |"
                line += f" {e:.2f} |" if e else " - |"
                line += f" {p / e:.1f}x |" if p and e else " - |"
            print(line)


def tape_table(path):
    peak = 102.4  # measured fp32 FMA peak per core (bench_gemm BM_peak_fma), GFLOP/s
    ns = medians(path, "ns_per_op")
    base = ns.get("engine_chain/float")
    print("| chain | ns per op | vs engine map_into (forward only) |")
    print("|---|---|---|")
    for k, v in sorted(ns.items()):
        print(f"| {k} | {v:.0f} | {v / base:.2f}x |" if base else f"| {k} | {v:.0f} | - |")
    ms = medians(path, "ms_per_step")
    gf = medians(path, "GFLOP/s")
    print()
    print("| step | ms | GFLOP/s | % of peak |")
    print("|---|---|---|---|")
    for k, v in sorted(ms.items()):
        threads = int(re.search(r"threads:(\d+)", k).group(1))
        print(f"| {k} | {v:.2f} | {gf[k]:.1f} | {100 * gf[k] / (peak * threads):.0f}% |")
    mem = medians(path, "peak_MB")
    tape = medians(path, "tape_MB")
    print()
    print("| memory, batch 512 | peak MB | tape MB |")
    print("|---|---|---|")
    for k in sorted(mem):
        print(f"| {k} | {mem[k]:.2f} | {tape[k]:.2f} |")
    b = [k for k in mem if "32-true" in k]
    for a in (k for k in sorted(mem) if "bf16-mixed" in k and b):
        print(f"| {a.split('/')[1]} / 32-true | {mem[a] / mem[b[0]]:.2f} | {tape[a] / tape[b[0]]:.2f} |")


def stream_table(path):
    med = medians(path, "bytes_per_second")
    memcpy = {int(n.split("/")[1]): v for n, v in med.items() if n.startswith("BM_memcpy/")}
    print("| kernel | n | GB/s | memcpy GB/s (same bytes) | ratio |")
    print("|---|---|---|---|---|")
    for name, bps in sorted(med.items()):
        if name.startswith("BM_memcpy"):
            continue
        m = re.match(r"BM_(\w+)<(.+?)>/(\d+)", name)
        if not m:
            continue
        kind, types, n = m.groups()
        n = int(n)
        # the bytes one iteration moves, to find the memcpy baseline of the same size
        elem = {"float": 4, "double": 8, "precis::half": 2, "precis::bfloat16": 2}[types.split(",")[0].strip()]
        arrays = {"add": 3, "relu": 2, "exp": 2, "bias_add": 2}.get(kind, 1)
        nbytes = n * elem * arrays
        copy_bytes = nbytes // 2 if arrays > 1 else nbytes  # memcpy of b bytes moves 2b (elementwise) / reads b (reduce)
        base = memcpy.get(copy_bytes)
        ratio = f"{bps / base:.2f}" if base else "-"
        print(f"| {kind}<{types.replace('precis::', '')}> | {n} | {bps / 1e9:.1f} | "
              f"{base / 1e9:.1f} | {ratio} |" if base else
              f"| {kind}<{types.replace('precis::', '')}> | {n} | {bps / 1e9:.1f} | - | - |")


def allreduce_table(path):
    bw = medians(path, "busbw_GBs")
    rows = defaultdict(dict)
    for name, v in bw.items():
        m = re.match(r"BM_(mpi|precis)_allreduce_(fp32|bf16)/bytes:(\d+)", name)
        if m:
            rows[int(m.group(3))][f"{m.group(1)}_{m.group(2)}"] = v  # the counter is in GB/s
    print("| fp32 bytes | plain MPI_Allreduce GB/s | precis fp32 GB/s | ratio | precis bf16 (via fp32) GB/s | ratio |")
    print("|---|---|---|---|---|---|")
    for b in sorted(rows):
        r = rows[b]
        base = r.get("mpi_fp32")
        cells = []
        for k in ("precis_fp32", "precis_bf16"):
            v = r.get(k)
            cells.append(f"{v:.2f} | {v / base:.2f}" if v and base else "- | -")
        print(f"| {b >> 20} MiB | {base:.2f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if sys.argv[1] == "--allreduce":
        allreduce_table(sys.argv[2])
    elif sys.argv[1] == "--tape":
        tape_table(sys.argv[2])
    elif sys.argv[1] == "--gemm":
        gemm_table(sys.argv[2:])
    elif sys.argv[1] == "--stream":
        stream_table(sys.argv[2])
    else:
        convert_table(sys.argv[1])
