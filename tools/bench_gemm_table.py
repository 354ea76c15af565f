#!/usr/bin/env python3
"""Markdown table of build/bench/bench_gemm's JSON output (docs/benchmarks.md, gemm_f32 section).

    build/bench/bench_gemm --benchmark_repetitions=5 --benchmark_min_time=0.1 \\
        --benchmark_format=json > /tmp/gemm.json
    python3 tools/bench_gemm_table.py [best|median] /tmp/gemm.json [more runs' JSON ...]

One row per projection, row count and thread count: GFLOP/s of each kernel and of OpenBLAS over
the repetitions (best, the default, suits a machine shared with other jobs: a repetition can only
be slowed down by them; or median), and the kernel gemm_nt_f32 runs (AVX-512 where the CPU has
it) over OpenBLAS. One-thread rows divide by the CPU time of the (only) thread, which other jobs
sharing the core do not inflate; two-thread rows by the wall time.
"""
import json
import statistics
import sys
from collections import defaultdict

UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
SHAPES = {
    "tiny/q,o": "256 × 256", "tiny/k,v": "64 × 256", "tiny/gate,up": "768 × 256",
    "tiny/down": "256 × 768", "tiny/lm_head": "4096 × 256", "qwen0.6b/q": "2048 × 1024",
    "qwen0.6b/o": "1024 × 2048", "qwen0.6b/gate,up": "3072 × 1024", "qwen0.6b/down": "1024 × 3072",
}

SIZES = {p: tuple(int(x) for x in s.split(" × ")) for p, s in SHAPES.items()}


def main(stat, paths):
    reps = defaultdict(lambda: defaultdict(list))  # (projection, m, threads) -> impl -> GFLOP/s
    runs = [r for path in paths for r in json.load(open(path))["benchmarks"]]
    for r in runs:
        if r.get("run_type") != "iteration":
            continue
        parts = r["run_name"].split("/")  # model, weight, m=, threads=, impl, real_time
        key = ("/".join(parts[0:2]), parts[2][2:], parts[3][8:])
        m, n_k = int(key[1]), SIZES[key[0]]
        seconds = r["cpu_time" if key[2] == "1" else "real_time"] * UNIT[r["time_unit"]]
        reps[key][parts[4]].append(2.0 * m * n_k[0] * n_k[1] / seconds / 1e9)
    pick = max if stat == "best" else statistics.median
    impls = [i for i in ("avx512", "avx2", "openblas") if any(i in v for v in reps.values())]
    print("| projection | n × k | m | threads | " + " | ".join(impls) + " | ours / OpenBLAS |")
    print("|---|---|---|---|" + "---|" * len(impls) + "---|")
    for (proj, m, threads), v in reps.items():
        g = {i: pick(x) for i, x in v.items()}
        ours = g.get("avx512", g.get("avx2"))  # the kernel gemm_nt_f32 dispatches to
        ratio = f"{ours / g['openblas']:.2f}" if "openblas" in g else ""
        cells = [f"{g[i]:.1f}" if i in g else "" for i in impls]
        print(f"| {proj} | {SHAPES.get(proj, '')} | {m} | {threads} | " + " | ".join(cells) +
              f" | {ratio} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
