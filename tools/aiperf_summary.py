"""The table of a tools/bench_serve.sh run: one row per concurrency from aiperf's JSON exports.
    python tools/aiperf_summary.py OUT_DIR"""
import glob
import json
import os
import re
import sys


def main():
    out = sys.argv[1]
    rows = []
    for path in glob.glob(os.path.join(out, "c*", "profile_export_aiperf.json")):
        c = int(re.search(r"/c(\d+)/", path).group(1))
        with open(path) as f:
            rows.append((c, json.load(f)))
    print("| concurrency | requests | output tok/s | TTFT p50 / p99 ms | inter-block p50 / p99 ms "
          "| inter-token p50 / p99 ms | request p50 / p99 ms |")
    print("|---:|---:|---:|---|---|---|---|")
    for c, d in sorted(rows, key=lambda r: r[0]):
        def pair(key):
            m = d.get(key) or {}
            return f"{m.get('p50', float('nan')):.1f} / {m.get('p99', float('nan')):.1f}"
        print(f"| {c} | {d['request_count']['avg']:.0f} "
              f"| {d['output_token_throughput']['avg']:.1f} | {pair('time_to_first_token')} "
              f"| {pair('inter_chunk_latency')} | {pair('inter_token_latency')} "
              f"| {pair('request_latency')} |")


if __name__ == "__main__":
    main()
