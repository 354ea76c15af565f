#!/usr/bin/env python3
"""Checks a trained checkpoint against our engine before (and after) spending GPU time:
the PyTorch forward of the training model (fp32, on the bf16 weights read back from the written
safetensors) must match `dllm forward --dump-logits` (CPU fp32 reference) to <= 1e-3 relative, for
the attention layouts the decoders use; `dllm info` must load it.

    python3 tools/train/check_parity.py --dllm build/dllm OUT/tiny-block OUT/tiny-full OUT/tiny-causal
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import load_checkpoint  # noqa: E402

torch.set_grad_enabled(False)


def visibility(rule, positions):
    n = len(positions)
    if rule == "causal":
        return np.tril(np.ones((n, n), dtype=bool))
    if rule == "bidirectional":
        return np.ones((n, n), dtype=bool)
    b = int(rule.split(":")[1])
    blk = np.asarray(positions) // b
    return blk[None, :] <= blk[:, None]


def cases_for(family, vocab, mask_id, rng):
    rnd = lambda n: rng.integers(0, vocab, n).tolist()  # noqa: E731
    perm = rng.permutation(14).tolist()
    ids = rnd(21)
    ids[-5:] = [mask_id] * 5
    if family == "sdar":
        return [(ids, list(range(21)), "block:4"), (rnd(9), list(range(3, 12)), "block:4"),
                (ids, list(range(21)), "causal"), (rnd(7), [0, 1, 2, 3, 300, 301, 5000], "block:4")]
    if family == "wedlm":
        return [(ids, list(range(21)), "causal"), (rnd(14), perm, "causal"),
                (rnd(7), [0, 1, 2, 3, 300, 301, 5000], "causal")]
    return [(ids, list(range(21)), "bidirectional"), (rnd(14), perm, "bidirectional")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--dllm", default="build/dllm")
    ap.add_argument("--tol", type=float, default=1e-3)
    args = ap.parse_args()
    worst = 0.0
    for ckpt in args.checkpoints:
        info = subprocess.run([args.dllm, "info", ckpt], capture_output=True, text=True)
        if info.returncode:
            raise SystemExit(f"dllm info {ckpt} failed:\n{info.stderr}")
        model = load_checkpoint(ckpt).eval()
        c = model.config
        cfg = json.load(open(os.path.join(ckpt, "config.json")))
        rng = np.random.default_rng(7)
        for k, (ids, positions, rule) in enumerate(cases_for(c.family, c.vocab_size, cfg["mask_token_id"], rng)):
            vis = torch.from_numpy(visibility(rule, positions))[None]
            ref = model(torch.tensor([ids]), torch.tensor([positions]), vis)[0].numpy()
            with tempfile.TemporaryDirectory() as td:
                out = os.path.join(td, "logits.npy")
                cmd = [args.dllm, "forward", "-m", ckpt, "--ids", ",".join(map(str, ids)), "--positions",
                       ",".join(map(str, positions)), "--attention", rule, "--dump-logits", out]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode:
                    raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")
                got = np.load(out)
            rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
            agree = float((got.argmax(-1) == ref.argmax(-1)).mean())
            worst = max(worst, rel)
            print(f"{os.path.basename(ckpt.rstrip('/')):12s} {c.family:5s} case {k} {rule:13s} n={len(ids):2d} "
                  f"rel.err {rel:.2e} argmax agreement {agree:.3f}")
        print(info.stdout.strip().replace("\n", "\n    "))
    ok = worst <= args.tol
    print(f"worst relative error {worst:.2e} ({'OK' if ok else 'FAIL'}, tolerance {args.tol:g})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
