#!/usr/bin/env python3
"""Where a CUDA kernel's warps wait, per SASS instruction, from Nsight Compute's source counters.

On the GPU machine (ncu is not on the build machine), profile one launch with source counters and
export its SASS page:

    ncu --kernel-name-base demangled --kernel-name "regex:NAME" --launch-skip 4 --launch-count 1 \
        --set none --section SourceCounters --section WarpStateStats -o rep COMMAND
    ncu -i rep.ncu-rep --page source --csv --print-source sass > a.csv

Then `ncu_sass_diff.py a.csv` lists the stall reasons' samples and the hottest instructions, and
`ncu_sass_diff.py a.csv b.csv` compares two runs of the *same binary* under two settings (an
environment switch, another shape): totals, stall reasons and the instructions whose samples moved
most. Instructions are matched by their position in the listing, so both files must come from one
build. (The 2026-11-30 MAGE hand-over diagnosis in docs/benchmarks.md was made this way.)
"""
import argparse
import csv
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # Row 0 names the kernel; row 1 is the header.
    header, data = rows[1], rows[2:]
    if SAMPLES not in header or "Source" not in header:
        sys.exit(f"{path}: not an 'ncu --page source --csv --print-source sass' export")
    return rows[0][1] if len(rows[0]) > 1 else "?", header, data


def number(row, header, column):
    value = row[header.index(column)]
    return int(value) if value else 0


def opcode(source):
    """The instruction's opcode (branch targets and other addresses differ from run to run)."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def stall_columns(header):
    return [c for c in header if c.startswith("stall_") and "Not Issued" not in c]


def stall_totals(header, data):
    return {c: sum(number(r, header, c) for r in data) for c in stall_columns(header)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="an ncu SASS source export (CSV)")
    parser.add_argument("b", nargs="?", help="a second export of the same binary, to compare")
    parser.add_argument("--top", type=int, default=20, help="instructions to list (default 20)")
    args = parser.parse_args()

    kernel, header, a = load(args.a)
    print(f"kernel: {kernel}")
    src = header.index("Source")
    if args.b is None:
        total = sum(number(r, header, SAMPLES) for r in a)
        print(f"samples {total}, warp instructions {sum(number(r, header, EXECUTED) for r in a)}")
        for c, v in sorted(stall_totals(header, a).items(), key=lambda kv: -kv[1]):
            if v:
                print(f"  {c:28s} {v:8d} ({100 * v / max(total, 1):.1f} %)")
        hot = sorted(range(len(a)), key=lambda i: -number(a[i], header, SAMPLES))[: args.top]
        for i in hot:
            print(f"{i:6d} {number(a[i], header, SAMPLES):7d} x{number(a[i], header, EXECUTED):<9d}"
                  f" {a[i][src].strip()[:70]}")
        return

    _, header_b, b = load(args.b)
    if len(a) != len(b) or header != header_b or any(
            opcode(x[src]) != opcode(y[src]) for x, y in zip(a, b)):
        sys.exit("the two exports list different code: compare two runs of one build")
    for name, column in (("samples", SAMPLES), ("warp instructions", EXECUTED)):
        ta, tb = (sum(number(r, header, column) for r in d) for d in (a, b))
        print(f"{name}: {ta} -> {tb} ({tb - ta:+d}, {100 * (tb - ta) / max(ta, 1):+.1f} %)")
    sa, sb = stall_totals(header, a), stall_totals(header, b)
    for c in sorted(sa, key=lambda c: -abs(sb[c] - sa[c])):
        if sa[c] or sb[c]:
            print(f"  {c:28s} {sa[c]:8d} -> {sb[c]:8d} ({sb[c] - sa[c]:+d})")
    moved = sorted(range(len(a)),
                   key=lambda i: -abs(number(b[i], header, SAMPLES) - number(a[i], header, SAMPLES)))
    print("instructions whose samples moved most (index, samples a -> b, executed a -> b):")
    for i in moved[: args.top]:
        print(f"{i:6d} {number(a[i], header, SAMPLES):6d} -> {number(b[i], header, SAMPLES):<6d}"
              f" x{number(a[i], header, EXECUTED)} -> {number(b[i], header, EXECUTED):<9d}"
              f" {a[i][src].strip()[:60]}")


if __name__ == "__main__":
    main()
