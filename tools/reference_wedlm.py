#!/usr/bin/env python3
"""Reference trajectories for WeDLM streaming parallel decoding (issue #7).

An independent PyTorch implementation of the official engine's loop (Tencent/WeDLM
wedlm/engine/wedlm_decoder.py + sampler.py; method-specs §3.2), run with transformers on the tiny
WeDLM fixture checkpoints. It shares no code path with the C++ decoder: every step is one full
causal forward, without any KV cache, over

    prompt + committed tokens + the window reordered (filled slots first, then masks),

with explicit position ids (each window slot keeps its logical position). That is exactly what
the engine's cached forward computes when committing is exact, so a match token for token also
checks that the K/V the engine keeps are the right ones.

Per step, in the official order:
  refill   p = leading filled run of the window; append p masks (window = W + p slots)
  forward  the reordered window (see above); the mask rows predict their own positions
  commit   the p leading tokens become final (stop ids / max_tokens are applied token by token)
  fill     H_i (nats, raw logits) + lambda * (window index - first mask index) < tau, else argmin;
           tokens greedy (argmax) or top-k -> top-p -> /T sampling
The prompt is prefilled first in a forward of its own whose logits are discarded.

Deliberate, documented differences from the official engine (the C++ engine does the same):
  * sampling draws come from tools/dllm_rng.py (counter-based, keyed by seed, forward index and
    the logical position decided) and inverse-CDF sampling instead of torch.multinomial, so
    seeded runs are reproducible across implementations;
  * the [MASK] token is never chosen and has no mass in the entropy (its logit is -inf);
  * no KV budget: the window is always W slots (the official engine shrinks the refill only when
    its paged cache runs out);
  * the canvas recorded after a forward is committed tokens + window after the fill step, even in
    the step that commits a stop token or reaches max_tokens (the engine stops right after it).

Numerical robustness: each case records the smallest gap between an adjusted entropy and tau
(and between the two lowest adjusted entropies, and of greedy argmax); a case whose gaps fall
below 1e-4 nats is shifted (tau nudged) so that float differences between implementations
(CPU/GPU torch, the C++ engine) cannot flip a decision.

    python3 tools/reference_wedlm.py --models tests/fixtures/models --out tests/fixtures/trajectories
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dllm_rng import uniform  # noqa: E402
from hf_reference import ReferenceModel, causal_visible  # noqa: E402
from reference_decode import inverse_cdf, top_k_filter, top_p_filter  # noqa: E402

NEG_INF = float("-inf")
# Decisions closer than this are fragile: float differences between implementations (torch vs the
# C++ engine differ by ~1e-6 relative in the logits) could flip them.
ENTROPY_GAP = 5e-5  # nats, between an adjusted entropy and tau or between the two lowest
PROB_GAP = 5e-6     # probability, between the top two (greedy) or between u and a CDF edge


# ---------------------------------------------------------------- sampling (WeDLM sampler.py)
# The filters are the engine's (tools/reference_decode.py); WeDLM applies them to the raw logits
# and divides by T afterwards (decide_row).


class Fragility:
    """Smallest margins of the decisions taken, in units of their limits (< 1: fragile)."""

    def __init__(self):
        self.tau = float("inf")    # adjusted entropy vs tau (fixable by nudging tau)
        self.other = float("inf")  # argmin ties, greedy argmax ties, sampling edges

    def note_tau(self, gap):
        self.tau = min(self.tau, abs(gap) / ENTROPY_GAP)

    def note_argmin(self, gap):
        self.other = min(self.other, abs(gap) / ENTROPY_GAP)

    def note_prob(self, gap):
        self.other = min(self.other, abs(gap) / PROB_GAP)

    def ok(self):
        return self.tau >= 1 and self.other >= 1


def decide_row(row, mask_id, temperature, top_k, top_p, u):
    """(token, entropy as float32, margin of the token choice) for one mask row: WeDLM order
    top-k -> top-p -> /T."""
    row = row.clone()
    row[mask_id] = NEG_INF
    probs = torch.softmax(row.double(), -1)
    logp = torch.where(probs > 0, probs.log(), torch.zeros_like(probs))
    entropy = float(np.float32(-(probs * logp).sum().item()))
    if not temperature > 0:
        top2 = torch.topk(probs, 2).values
        return int(torch.argmax(probs)), entropy, float(top2[0] - top2[1])
    filt = top_p_filter(top_k_filter(row, top_k), top_p) / temperature
    sp = torch.softmax(filt.double(), -1)
    tok = inverse_cdf(sp, u)
    cum = np.cumsum(sp.numpy())
    margin = cum[tok] - u  # u must not sit on a bucket edge
    if tok > 0:
        margin = min(margin, u - cum[tok - 1])
    return tok, entropy, float(margin)


def select(entropies, mask_idx, tau, lam, frag):
    """Window slots to fill: adjusted entropy < tau, else the single lowest (first on ties)."""
    lam64 = float(np.float32(lam))
    adj = [float(h) + lam64 * (i - mask_idx[0]) for h, i in zip(entropies, mask_idx)]
    chosen = []
    if tau is not None:
        t = float(np.float32(tau))
        for k, a in enumerate(adj):
            frag.note_tau(a - t)
            if a < t:
                chosen.append(k)
    if not chosen:
        best = int(np.argmin(adj))
        if len(adj) > 1:
            frag.note_argmin(sorted(adj)[1] - sorted(adj)[0])
        chosen = [best]
    return chosen


# ---------------------------------------------------------------- the decoding loop
def wedlm_generate(m, prompt, p):
    W, tau, lam = p["window"], p["entropy_threshold"], p["pos_penalty"]
    mask = m.mask_id
    P = len(prompt)
    committed = []
    stops = set(p["stop_ids"])
    frag = Fragility()
    canvases = []
    forwards = 1  # the prefill forward (its logits are discarded; nothing to compute)
    window = [mask] * W
    canvases.append(committed + window)
    window_tokens = 0
    runs = []  # lengths of the committed runs, in order

    def done():
        for i, t in enumerate(committed):
            if t in stops:
                if i >= p["max_tokens"]:
                    return True, committed[: p["max_tokens"]], "length"
                return True, committed[:i], "stop"
        if len(committed) >= p["max_tokens"]:
            return True, committed[: p["max_tokens"]], "length"
        return False, None, None

    while True:
        run = next((i for i, t in enumerate(window) if t == mask), len(window))
        window = window + [mask] * run  # refill
        filled = [i for i, t in enumerate(window) if t != mask]
        masks = [i for i, t in enumerate(window) if t == mask]
        order = filled + masks
        base = P + len(committed)
        ids = prompt + committed + [window[i] for i in order]
        pos = list(range(base)) + [base + i for i in order]
        logits = m.logits(ids, pos, causal_visible(len(ids)))
        step = forwards
        forwards += 1
        window_tokens += len(window)
        # Decide every mask row of this forward (logical position base + i keys the draw).
        rows = []
        for k, i in enumerate(masks):
            u = uniform(p["seed"], 0, step, base + i)
            rows.append(decide_row(logits[base + len(filled) + k], mask, p["temperature"], p["top_k"],
                                   p["top_p"], u))
        # Commit the leading run, then fill.
        committed += window[:run]
        if run:
            runs.append(run)
        window = window[run:]
        mask_idx = [i - run for i in masks]
        for k in select([r[1] for r in rows], mask_idx, tau, lam, frag):
            window[mask_idx[k]] = rows[k][0]
            frag.note_prob(rows[k][2])
        canvases.append(committed + window)
        ok, ids_out, reason = done()
        if ok:
            return dict(ids=ids_out, finish_reason=reason, forwards=forwards, canvases=canvases,
                        committed=list(committed), commit_runs=runs, window_tokens=window_tokens,
                        p_cache=len(ids_out) / window_tokens), frag


# ---------------------------------------------------------------- cases
def params(**kw):
    base = dict(strategy="wedlm", max_tokens=24, window=16, entropy_threshold=0.4, pos_penalty=0.02,
                temperature=0.0, top_k=0, top_p=1.0, seed=0, stop_ids=[])
    base.update(kw)
    return base


def robust(m, prompt_len, case_seed, p):
    """Runs a case on a prompt drawn from case_seed; while some decision is within float noise of
    flipping, nudges tau (threshold ties) or draws the next prompt (other ties). Deterministic."""
    for attempt in range(40):
        rng = np.random.default_rng(case_seed * 1000 + attempt)
        prompt = rng.integers(0, 250, prompt_len).tolist()
        for _ in range(5):
            res, frag = wedlm_generate(m, prompt, p)
            if frag.ok():
                return prompt, p, res, frag
            if frag.tau < 1 and p["entropy_threshold"] is not None:
                p = dict(p, entropy_threshold=round(p["entropy_threshold"] + 0.0013, 4))
            else:
                break
    raise RuntimeError(f"no robust variant found for {p}")


def cases_for(h):
    """(name, prompt length, case seed, params). h: a typical entropy (nats) of this random
    model's mask rows, so that 'low' and 'high' thresholds fill some and many masks (a trained
    model has far lower entropies; tau = 0.4 here always falls back to the single best)."""
    low, high = round(h - 0.01, 2), round(h + 0.12, 2)
    c = []
    for i, n in enumerate((3, 7, 12)):
        c.append((f"greedy_defaults_p{n}", n, 10 + i, params()))
    for w in (4, 8, 16):
        c.append((f"greedy_w{w}_none", 7, 20 + w, params(window=w, entropy_threshold=None, max_tokens=12)))
        c.append((f"greedy_w{w}_low", 7, 40 + w, params(window=w, entropy_threshold=low)))
        c.append((f"greedy_w{w}_high", 7, 60 + w, params(window=w, entropy_threshold=high)))
        c.append((f"greedy_w{w}_high_pen01", 7, 80 + w, params(window=w, entropy_threshold=high,
                                                                pos_penalty=0.1)))
    c += [
        ("greedy_w8_high_pen01_max13", 12, 100, params(window=8, entropy_threshold=high, pos_penalty=0.1,
                                                         max_tokens=13)),
        ("greedy_w16_higher_max5", 3, 101, params(window=16, entropy_threshold=round(high + 0.1, 4), max_tokens=5)),
        ("sampled_w8_low", 7, 102, params(window=8, entropy_threshold=low, temperature=0.8, seed=7)),
        ("sampled_w16_high_topk_topp", 7, 103, params(window=16, entropy_threshold=high, temperature=1.2,
                                                       top_k=40, top_p=0.9, seed=11)),
        ("sampled_w4_none", 12, 104, params(window=4, entropy_threshold=None, temperature=0.7, top_p=0.8,
                                            seed=3, max_tokens=10)),
        ("sampled_w16_high_pen01", 3, 105, params(window=16, entropy_threshold=high, pos_penalty=0.1,
                                                  temperature=1.0, seed=5)),
    ]
    return c


def typical_entropy(m, rng):
    pr = rng.integers(0, 250, 6).tolist()
    ids = pr + [m.mask_id] * 16
    lg = m.logits(ids, list(range(len(ids))), causal_visible(len(ids)))[len(pr):]
    lg[:, m.mask_id] = NEG_INF
    probs = torch.softmax(lg.double(), -1)
    h = -(probs * torch.where(probs > 0, probs.log(), torch.zeros_like(probs))).sum(-1)
    return float(h.median())


def stop_variant(res):
    """A stop id whose first occurrence is committed mid-window: inside a multi-token commit run,
    not its last token (so the tokens after it in that commit are dropped), when there is one."""
    ids = res["ids"]
    first = {}
    for i, t in enumerate(ids):
        first.setdefault(t, i)
    inner, start = set(), 0
    for r in res["commit_runs"]:
        inner.update(range(start, start + r - 1))
        start += r
    later = [t for t, i in first.items() if 0 < i]
    if not later:
        return None
    mid = [t for t in later if first[t] in inner]
    return min(mid or later, key=lambda t: abs(first[t] - len(ids) // 2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tests/fixtures/models")
    ap.add_argument("--out", default="tests/fixtures/trajectories")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import transformers
    for model_name in ("wedlm-qwen3-tiny", "wedlm-qwen25-tiny"):
        m = ReferenceModel(os.path.join(args.models, model_name))
        h = typical_entropy(m, np.random.default_rng(4321))
        records = []
        for name, plen, case_seed, p in cases_for(h):
            pr, p, res, frag = robust(m, plen, case_seed, p)
            variants = [(name, pr, p, res, frag)]
            if name.startswith(("greedy_defaults", "greedy_w8_high", "greedy_w16_high_pen", "sampled")):
                stop = stop_variant(res)
                if stop is not None:
                    rs, fs = wedlm_generate(m, pr, dict(p, stop_ids=[stop]))
                    assert fs.ok(), "a stop id cannot make decisions fragile"
                    variants.append((name + "_stop", pr, dict(p, stop_ids=[stop]), rs, fs))
            for vname, vpr, vp, vres, vfrag in variants:
                records.append(dict(name=vname, prompt=vpr, params=vp, expected=vres))
                tpf = len(vres["ids"]) / vres["forwards"]
                print(f"{model_name:18s} {vname:30s} P={len(vpr):2d} tau={vp['entropy_threshold']} -> "
                      f"{len(vres['ids']):2d} ids, {vres['forwards']:3d} fwd ({tpf:.2f} tok/fwd), "
                      f"p_cache {vres['p_cache']:.3f}, {vres['finish_reason']}, margins "
                      f"{min(vfrag.tau, vfrag.other):.1f}, runs {vres['commit_runs']}", flush=True)
        with open(os.path.join(args.out, model_name + ".json"), "w") as fh:
            json.dump({"model": model_name, "typical_entropy": h,
                       "reference": f"tools/reference_wedlm.py, transformers {transformers.__version__}, "
                       f"torch {torch.__version__}", "cases": records}, fh)


if __name__ == "__main__":
    main()
