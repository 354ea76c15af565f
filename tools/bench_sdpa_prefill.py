#!/usr/bin/env python3
"""Peer for `dllm bench --sparse-prefill-kernel`, on the GPU machine: one layer's dense causal
prefill attention in PyTorch SDPA with the flash backend only, on the same shapes (heads, KV heads
and head_dim of the shape's config.json, bf16, one sequence of each length).

  python3 tools/bench_sdpa_prefill.py --shape configs/sdar-8b.json \\
      --lengths 32768,65536,131072,262144 [--reps 3] [--json out.json]

Flash takes no arbitrary mask, so the block-causal rule (SDAR, B = 4) is timed as causal: its
FLOPs differ by n * (B - 1) / 2 pairs of n^2 / 2 (nothing at these lengths). GQA runs through
enable_gqa where the flash backend takes it, else K/V are expanded to every query head first
(outside the timed call; the row says which). TFLOP/s count the causal pairs n (n + 1) / 2 at
4 * head_dim FLOPs per pair per head, as the dllm bench does; --peak gives the % of peak column
(H100 SXM dense bf16: 989 TFLOP/s).
"""
import argparse
import json

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

from bench_torch import time_ms  # tools/ is the script's directory


def shape_of(path):
    c = json.load(open(path))
    heads = c.get("num_attention_heads", c.get("n_heads"))
    kv_heads = c.get("num_key_value_heads", c.get("n_kv_heads", heads))
    d = c.get("head_dim") or c.get("hidden_size", c.get("d_model")) // heads
    return heads, kv_heads, d


def run_flash(q, k, v):
    """The flash call for these tensors: (callable, gqa mode), GQA natively if it runs."""
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads == kv_heads:
        return (lambda: sdpa(q, k, v, is_causal=True)), "none"
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            sdpa(q[:, :, :128], k[:, :, :128], v[:, :, :128], is_causal=True, enable_gqa=True)
        return (lambda: sdpa(q, k, v, is_causal=True, enable_gqa=True)), "enable_gqa"
    except RuntimeError:
        g = heads // kv_heads
        ke, ve = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        return (lambda: sdpa(q, ke, ve, is_causal=True)), "expanded"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True)
    ap.add_argument("--lengths", default="32768,65536,131072,262144")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--peak", type=float, default=989.0, help="dense bf16 TFLOP/s of the GPU")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    heads, kv_heads, d = shape_of(args.shape)
    print(f"\n{args.shape}: PyTorch {torch.__version__} SDPA (flash only), one layer "
          f"({heads}/{kv_heads} heads, head_dim {d}), causal\n")
    print("| tokens | ms | TFLOP/s | % of peak | gqa |\n|---|---|---|---|---|", flush=True)
    rows = []
    for n in [int(x) for x in args.lengths.split(",")]:
        q = torch.randn(1, heads, n, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, kv_heads, n, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, kv_heads, n, d, device="cuda", dtype=torch.bfloat16)
        call, gqa = run_flash(q, k, v)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ms = time_ms(call, args.reps, warmup=1)
        tflops = 4.0 * d * heads * 0.5 * n * (n + 1) / (ms * 1e-3) / 1e12
        print(f"| {n} | {ms:.2f} | {tflops:.0f} | {100 * tflops / args.peak:.0f} % | {gqa} |",
              flush=True)
        rows.append(dict(tokens=n, ms=ms, tflops=tflops, gqa=gqa))
        del q, k, v, call
        torch.cuda.empty_cache()
    if args.json:
        json.dump(dict(shape=args.shape, torch=torch.__version__, backend="flash", rows=rows),
                  open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
