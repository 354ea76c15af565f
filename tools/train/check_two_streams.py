#!/usr/bin/env python3
"""Checks train.py's SDAR layout that keeps only the live noisy rows (two_streams) against the
full [noisy | clean] layout of every row (the objective as first written), and its flex_attention
block mask against its dense mask: same loss, on real batches of make_data.py's data (a long
needle batch and a short mixed one), random weights, fp32 on the CPU. Needs torch and numpy.

    python3 tools/train/check_two_streams.py --data build/train-data
"""
import argparse
import os
import sys
from types import SimpleNamespace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train as TR  # noqa: E402
from model import ModelConfig, TinyLM  # noqa: E402


def full_layout(x_live, b, mask_id, seed):
    """The reference: noisy rows for every position; the same noise draws as noise_and_masks."""
    gen = torch.Generator().manual_seed(seed)
    tok = torch.as_tensor(b["tokens"], dtype=torch.long)
    pos = torch.as_tensor(b["pos"], dtype=torch.long)
    seg = torch.as_tensor(b["seg"], dtype=torch.long)
    elig = torch.as_tensor(b["elig"])
    Bk = torch.as_tensor(b["blocks"], dtype=torch.long)
    R, L = tok.shape
    same = seg[:, :, None] == seg[:, None, :]
    u = torch.rand(R, L, generator=gen)
    blk = pos // Bk[:, None].clamp_min(1)
    change = torch.ones_like(seg, dtype=torch.bool)
    change[:, 1:] = (seg[:, 1:] != seg[:, :-1]) | (blk[:, 1:] != blk[:, :-1])
    run = torch.cumsum(change.long(), 1) - 1
    ratio = torch.gather(torch.rand(R, L, generator=gen), 1, run).clamp_min(1e-3)
    ratio = torch.where((Bk == 1)[:, None], torch.ones_like(ratio), ratio)
    masked = elig & (u < ratio)
    noisy = torch.where(masked, torch.full_like(tok, mask_id), tok)
    bi, bj = blk[:, :, None], blk[:, None, :]
    none = torch.zeros_like(same)
    mask = torch.cat([torch.cat([same & (bi == bj), same & (bj < bi)], 2),
                      torch.cat([none, same & (bj <= bi)], 2)], 1)
    loss_rows = torch.cat([masked, torch.zeros_like(masked)], 1)
    return dict(tokens=torch.cat([noisy, tok], 1), positions=torch.cat([pos, pos], 1), mask=mask,
                loss_rows=loss_rows, targets=torch.cat([tok, tok], 1),
                weights=loss_rows.float() / masked.sum().clamp_min(1), n_loss=masked.sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="build/train-data")
    a = ap.parse_args()
    data = TR.Data(a.data)
    args = SimpleNamespace(seed=5, seq_len=256, rows=4, long_len=2048, long_rows=2, long_task="needle",
                           long_kv_min=40, long_kv_max=440, prose_frac=0.0, chat_prose_frac=0.1,
                           ar_frac=0.3, mix="needle=0.5,kv=0.2,add=0.3")
    maker = TR.BatchMaker(data, "tiny-long", args)
    torch.manual_seed(0)
    model = TinyLM(ModelConfig(vocab_size=data.meta["vocab_size"], hidden=64, layers=2, heads=4,
                               kv_heads=2, head_dim=16, inter=128, block_size=4))
    mask_id = data.ids["<|mask|>"]
    for step, long in [(1, True), (2, False), (3, True)]:
        b = maker.batch(step, long=long)
        live = TR.noise_and_masks("tiny-long", b, mask_id, torch.Generator().manual_seed(step), torch.device("cpu"))
        full = full_layout(live, b, mask_id, step)
        flex = TR.noise_and_masks("tiny-long", b, mask_id, torch.Generator().manual_seed(step),
                                  torch.device("cpu"), flex_pad=128)
        loss_live, _ = TR.compute_loss(model, live, None)
        loss_full, _ = TR.compute_loss(model, full, None)
        with torch.no_grad():  # flex_attention has no CPU backward
            loss_flex, _ = TR.compute_loss(model, flex, None)
        rows_live, rows_full = live["tokens"].shape[1], full["tokens"].shape[1]
        print(f"batch {step} ({'long' if long else 'short'}): loss {loss_live.item():.6f} vs "
              f"{loss_full.item():.6f} (flex {loss_flex.item():.6f}), rows {rows_live} vs {rows_full}")
        assert int(live["n_loss"]) == int(full["n_loss"]) == int(flex["n_loss"]) > 0
        for other in (loss_full, loss_flex):
            assert abs(loss_live.item() - other.item()) <= 1e-5 * max(1.0, abs(other.item()))
    print("ok: the live-row layout gives the full layout's loss, with dense and flex masks")


if __name__ == "__main__":
    main()
