#!/usr/bin/env python3
"""Independent NumPy reference of RoPE scaling (float64), written from the formulas of Hugging
Face transformers' modeling_rope_utils (linear, dynamic NTK, YaRN with its attention factor) and
vLLM's static evaluation of dynamic NTK at L = factor * max_position_embeddings. Writes the
fixture of tests/model/rope_scaling_test.cpp: per config, the inverse frequencies, the attention
factor and a random head vector rotated at a few positions.

    /work/refenv/bin/python tools/reference_rope_scaling.py --out tests/fixtures/rope/cases.json
"""
import argparse
import json
import math

import numpy as np


def default_inv_freq(theta, dim):
    return 1.0 / theta ** (np.arange(0, dim, 2) / dim)


def yarn(theta, dim, max_pos, s):
    original = s.get("original_max_position_embeddings") or max_pos
    factor = s.get("factor")
    if factor is None:
        factor = max_pos / original

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    att = s.get("attention_factor")
    if att is None:
        if s.get("mscale") and s.get("mscale_all_dim"):
            att = mscale(factor, s["mscale"]) / mscale(factor, s["mscale_all_dim"])
        else:
            att = mscale(factor)

    def corr_dim(rot):
        return dim * math.log(original / (rot * 2 * math.pi)) / (2 * math.log(theta))

    low, high = corr_dim(s.get("beta_fast") or 32), corr_dim(s.get("beta_slow") or 1)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
    extra = 1 - ramp
    pos = theta ** (np.arange(0, dim, 2) / dim)
    return (1 / (factor * pos)) * (1 - extra) + (1 / pos) * extra, att


def table(cfg):
    theta, dim, max_pos = cfg["rope_theta"], cfg["rotary_dim"], cfg["max_position_embeddings"]
    s = cfg.get("rope_scaling") or {"rope_type": "default"}
    kind = s.get("rope_type", s.get("type"))
    if kind == "default":
        return default_inv_freq(theta, dim), 1.0
    if kind == "linear":
        return default_inv_freq(theta, dim) / s["factor"], 1.0
    if kind == "dynamic":
        f = s["factor"]
        seq_len = f * max_pos
        base = theta * ((f * seq_len / max_pos) - (f - 1)) ** (dim / (dim - 2))
        return default_inv_freq(base, dim), 1.0
    if kind == "yarn":
        return yarn(theta, dim, max_pos, s)
    raise ValueError(kind)


def rotate(x, inv, att, pos):
    half = len(inv)
    ang = pos * inv
    c, s = np.cos(ang) * att, np.sin(ang) * att
    a, b = x[:half], x[half:2 * half]
    return np.concatenate([a * c - b * s, b * c + a * s, x[2 * half:]])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/rope/cases.json")
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    configs = [
        dict(name="default", rope_theta=1e6, head_dim=32, rotary_dim=32, max_position_embeddings=32768,
             rope_scaling=None),
        dict(name="linear", rope_theta=1e4, head_dim=32, rotary_dim=32, max_position_embeddings=4096,
             rope_scaling={"rope_type": "linear", "factor": 4.0}),
        dict(name="dynamic", rope_theta=1e6, head_dim=32, rotary_dim=32, max_position_embeddings=32768,
             rope_scaling={"type": "dynamic", "factor": 4.0}),
        dict(name="yarn_qwen", rope_theta=1e6, head_dim=32, rotary_dim=32, max_position_embeddings=32768,
             rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
        dict(name="yarn_deepseek", rope_theta=1e4, head_dim=32, rotary_dim=32, max_position_embeddings=163840,
             rope_scaling={"rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                           "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.707}),
        dict(name="yarn_no_truncate_factor_from_lengths", rope_theta=5e5, head_dim=32, rotary_dim=16,
             partial_rotary_factor=0.5, max_position_embeddings=65536,
             rope_scaling={"rope_type": "yarn", "original_max_position_embeddings": 8192,
                           "truncate": False, "attention_factor": 1.25}),
    ]
    positions = [0, 1, 37, 1000, 4000]
    cases = []
    for cfg in configs:
        inv, att = table(cfg)
        x = rng.standard_normal(cfg["head_dim"])
        cases.append(dict(cfg, inv_freq=inv.tolist(), attention_factor=att, x=x.tolist(),
                          positions=positions,
                          rotated=[rotate(x, inv, att, p).tolist() for p in positions]))
    json.dump(dict(reference="tools/reference_rope_scaling.py (NumPy float64)", cases=cases),
              open(a.out, "w"), indent=0)


if __name__ == "__main__":
    main()
