#!/usr/bin/env python3
"""Reference decoding trajectories for the block-diffusion decoders (issue: decoding engine).

Independent PyTorch implementations of
  * SDAR's block_diffusion_generate (JetAstra/SDAR generate.py) with the evaluation path's
    confidence (softmax(logits/T) before top-k/top-p) or generate.py's (after filtering),
  * Fast-dLLM v2's generate (Efficient-Large-Model/Fast_dLLM_v2_7B modeling.py),
  * autoregressive decoding (mask-token AR for position-aligned models, next-token AR for
    right-shifted ones),
run with transformers models on the tiny fixture checkpoints and writing, per case, the ids after
every forward. Sampling draws come from tools/dllm_rng.py (the engine's counter-based RNG), so
seeded runs are reproducible token for token.

Deliberate, documented differences from the official loops (the engine does the same):
  * generation stops as soon as the final tokens contain a stop id or reach max_tokens (the
    official loops finish the block; the ids are identical, fewer forwards are spent);
  * top-k per step is clamped to the masks left (torch.topk would select non-mask positions and
    overwrite prompt tokens when a step's count exceeds the masks left);
  * the [MASK] token is never chosen (its logit is -inf for every decision);
  * Fast-dLLM v2 always prefills floor(P/B)*B prompt tokens (the official code drops the prompt
    when P == B) and runs blocks until max_tokens instead of max_new_tokens // B blocks.

    python3 tools/reference_decode.py --models tests/fixtures/models --out tests/fixtures/trajectories
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dllm_rng import uniform  # noqa: E402
from hf_reference import ReferenceModel, block_causal_visible, causal_visible  # noqa: E402

NEG_INF = float("-inf")


# ---------------------------------------------------------------- sampling (engine semantics)
def top_k_filter(logits, k):
    if k <= 0 or k >= logits.numel():
        return logits
    kth = torch.topk(logits, k).values[-1]
    return torch.where(logits < kth, torch.full_like(logits, NEG_INF), logits)


def top_p_filter(logits, p):
    if not p < 1.0:
        return logits
    order = np.argsort(-logits.numpy(), kind="stable")
    probs = torch.softmax(logits.double(), -1).numpy()[order]
    cum = np.cumsum(probs)
    remove = cum > p
    remove[1:] = remove[:-1].copy()
    remove[0] = False
    out = logits.clone()
    out[torch.as_tensor(order[remove])] = NEG_INF
    return out


def inverse_cdf(probs, u):
    cum = 0.0
    last = 0
    for i, p in enumerate(probs.tolist()):
        if p <= 0:
            continue
        last = i
        cum += p
        if cum > u:
            return i
    return last


def ban(logits, banned):
    """The engine never decides a [MASK]: its logit acts as -inf everywhere."""
    out = logits.clone()
    out[banned] = NEG_INF
    return out


def sample_token(logits, temperature, top_k, top_p, u, banned):
    """Returns (token, p_filtered, p_tempered) for one row, HF/SDAR order: /T -> top-k -> top-p."""
    logits = ban(logits, banned)
    greedy = not temperature > 0
    t = 1.0 if greedy else temperature
    scaled = logits / t if t != 1.0 else logits.clone()
    filt = top_p_filter(top_k_filter(scaled, top_k), top_p)
    probs = torch.softmax(filt.double(), -1)
    token = int(torch.argmax(probs)) if greedy else inverse_cdf(probs, u)
    tempered = torch.softmax(logits.double() / t, -1)
    return token, float(probs[token]), float(tempered[token])


# ---------------------------------------------------------------- stop / max bookkeeping
class Tracker:
    """Final tokens, stop ids and max_tokens, exactly as the engine applies them."""

    def __init__(self, prompt_len, mask_id, max_tokens, stop_ids):
        self.p, self.mask, self.max, self.stops = prompt_len, mask_id, max_tokens, set(stop_ids)
        self.canvases = []

    def final(self, x):
        out = []
        for t in x[self.p:]:
            if t == self.mask:
                break
            out.append(t)
        return out

    def done(self, x):
        """(done, ids, finish_reason) after a forward."""
        fin = self.final(x)
        for i, t in enumerate(fin):
            if t in self.stops:
                if i >= self.max:
                    return True, fin[: self.max], "length"
                return True, fin[:i], "stop"
        if len(fin) >= self.max:
            return True, fin[: self.max], "length"
        return False, fin, "length"


# ---------------------------------------------------------------- SDAR block diffusion
def transfer_schedule(block, steps):
    n = [block // steps] * steps
    for i in range(block % steps):
        n[i] += 1
    return n


def sdar_generate(m, prompt, p):
    B, S, thr = p["block_length"], p["steps"], p["threshold"]
    P = len(prompt)
    nblk = (P + p["max_tokens"] + B - 1) // B
    x = list(prompt) + [m.mask_id] * (nblk * B - P)
    tr = Tracker(P, m.mask_id, p["max_tokens"], p["stop_ids"])
    forwards = 0
    sched = transfer_schedule(B, S)

    def snapshot(end_block):
        tr.canvases.append(x[P:max(P, min(len(x), (end_block + 1) * B))])

    def finish():
        ok, ids, reason = tr.done(x)
        return ok, dict(ids=ids, finish_reason=reason, forwards=forwards, canvases=tr.canvases)

    first = P // B
    if first > 0:
        forwards += 1  # prefill of floor(P/B)*B tokens (its K/V only; nothing decided)
        snapshot(first)
    for b in range(first, nblk):
        lo, hi = b * B, (b + 1) * B
        for step in range(S + 1):
            masked = [i for i in range(lo, hi) if x[i] == m.mask_id]
            if not masked:
                forwards += 1  # commit forward: store the block's K/V
                snapshot(b + 1)
                break
            pos = list(range(hi))
            logits = m.logits(x[:hi], pos, block_causal_visible(pos, B))
            draws = {}
            for i in masked:
                u = uniform(p["seed"], 0, forwards, i)
                draws[i] = sample_token(logits[i], p["temperature"], p["top_k"], p["top_p"], u, m.mask_id)
            forwards += 1
            conf = {i: (d[2] if p["confidence"] == "tempered" else d[1]) for i, d in draws.items()}
            k = min(sched[min(step, S - 1)], len(masked))
            by_conf = sorted(masked, key=lambda i: (-conf[i], i))
            if p["remasking"] == "sequential":
                chosen = masked[:k]
            elif p["remasking"] == "low_confidence_static":
                chosen = by_conf[:k]
            else:
                high = [i for i in masked if conf[i] > thr]
                chosen = high if len(high) >= k else by_conf[:k]
            for i in chosen:
                x[i] = draws[i][0]
            snapshot(b)
            ok, res = finish()
            if ok:
                return res
    return finish()[1]


# ---------------------------------------------------------------- Fast-dLLM v2
def fast_dllm_v2_generate(m, prompt, p):
    B, sb, thr = p["block_length"], p["sub_block_length"], p["threshold"]
    T, top_p = p["temperature"], p["top_p"]
    P = len(prompt)
    x = list(prompt)
    tr = Tracker(P, m.mask_id, p["max_tokens"], p["stop_ids"])
    forwards = 0

    def finish():
        ok, ids, reason = tr.done(x)
        return ok, dict(ids=ids, finish_reason=reason, forwards=forwards, canvases=tr.canvases)

    def full_logits(n):
        pos = list(range(n))
        return m.logits(x[:n], pos, block_causal_visible(pos, B))

    cached = 0
    if P >= B:
        cached = (P // B) * B
        logits = full_logits(cached)
        forwards += 1
        if P % B == 0:
            x.append(int(torch.argmax(ban(logits[cached - 1], m.mask_id))))
    x += [m.mask_id] * (B - len(x) % B)
    if forwards:  # the prefill forward (a trace entry follows every forward)
        tr.canvases.append(x[P:])
        ok, res = finish()
        if ok:
            return res
    while True:
        lo = cached
        if m.mask_id not in x[lo:lo + B]:
            logits = full_logits(lo + B)
            forwards += 1
            x.append(int(torch.argmax(ban(logits[lo + B - 1], m.mask_id))))
            cached += B
            x += [m.mask_id] * (B - len(x) % B)
        else:
            first = next(j for j in range(B) if x[lo + j] == m.mask_id)
            s0 = (first // sb) * sb
            logits = full_logits(lo + B)
            shifted = torch.cat([logits[lo:lo + 1], logits[lo:lo + B - 1]], 0)  # token j <- logit j-1
            masked = [j for j in range(s0, s0 + sb) if x[lo + j] == m.mask_id]
            best, best_conf = None, -1.0
            for j in masked:
                row = ban(shifted[j], m.mask_id)
                if not T > 0:
                    probs = torch.softmax(row.double(), -1)
                    tok = int(torch.argmax(probs))
                else:
                    probs = torch.softmax(top_p_filter(row / T, top_p).double(), -1)
                    tok = inverse_cdf(probs, uniform(p["seed"], 0, forwards, lo + j))
                conf = float(probs[tok])
                if conf > best_conf:
                    best, best_conf = (j, tok), conf
                if conf > thr:
                    x[lo + j] = tok
            x[lo + best[0]] = best[1]
            forwards += 1
        tr.canvases.append(x[P:])
        ok, res = finish()
        if ok:
            return res


# ---------------------------------------------------------------- autoregressive
def ar_generate(m, prompt, p, shifted):
    P = len(prompt)
    x = list(prompt)
    tr = Tracker(P, m.mask_id, p["max_tokens"], p["stop_ids"])
    forwards = 0
    while True:
        n = len(x)
        if shifted:
            ids, pos = x, list(range(n))
            row = m.logits(ids, pos, causal_visible(n))[n - 1]
        else:  # a mask at the next position predicts its own token
            ids, pos = x + [m.mask_id], list(range(n + 1))
            row = m.logits(ids, pos, causal_visible(n + 1))[n]
        u = uniform(p["seed"], 0, forwards, n)
        tok, _, _ = sample_token(row, p["temperature"], p["top_k"], p["top_p"], u, m.mask_id)
        forwards += 1
        x.append(tok)
        tr.canvases.append(x[P:])
        ok, ids, reason = tr.done(x)
        if ok:
            return dict(ids=ids, finish_reason=reason, forwards=forwards, canvases=tr.canvases)


# ---------------------------------------------------------------- cases
def params(**kw):
    base = dict(strategy="block", max_tokens=16, block_length=4, steps=4, threshold=0.9,
                remasking="low_confidence_dynamic", confidence="tempered", sub_block_length=0,
                temperature=0.0, top_k=0, top_p=1.0, seed=0, stop_ids=[])
    base.update(kw)
    return base


def run(m, prompt, p):
    if p["strategy"] == "ar":
        return ar_generate(m, prompt, p, shifted=m.family == "fast_dllm_v2")
    if m.family == "fast_dllm_v2":
        return fast_dllm_v2_generate(m, prompt, p)
    return sdar_generate(m, prompt, p)


def sdar_cases(m, rng):
    prompts = {"short": rng.integers(0, 250, 3).tolist(), "one_block": rng.integers(0, 250, 4).tolist(),
               "long": rng.integers(0, 250, 10).tolist()}
    cases = []
    for name, pr in prompts.items():
        cases.append((f"greedy_dynamic_{name}", pr, params()))
    pr = prompts["long"]
    cases += [
        ("dynamic_low_threshold", pr, params(threshold=0.02)),
        ("static", pr, params(remasking="low_confidence_static", max_tokens=13)),
        ("sequential", pr, params(remasking="sequential")),
        ("block8_steps4", pr, params(block_length=8, steps=4, max_tokens=20)),
        ("block4_steps2", prompts["short"], params(steps=2, threshold=0.05)),
        ("block4_steps3_static", pr, params(steps=3, remasking="low_confidence_static")),
        ("sampled_t1", pr, params(temperature=1.0, seed=7, threshold=0.05)),
        ("sampled_topk_topp", pr, params(temperature=0.8, top_k=40, top_p=0.9, seed=11, threshold=0.2)),
        ("sampled_filtered_confidence", pr, params(temperature=0.7, top_k=20, seed=3, threshold=0.3,
                                                   confidence="filtered")),
        ("greedy_topk1_filtered", pr, params(top_k=1, confidence="filtered", remasking="low_confidence_static")),
        ("ar_greedy", pr, params(strategy="ar", block_length=1, steps=1)),
        ("ar_sampled", pr, params(strategy="ar", block_length=1, steps=1, temperature=1.0, seed=5)),
    ]
    return cases


def fast_cases(m, rng):
    prompts = {"short": rng.integers(0, 250, 5).tolist(), "exact": rng.integers(0, 250, 32).tolist(),
               "long": rng.integers(0, 250, 37).tolist()}
    base = dict(block_length=32, sub_block_length=8, max_tokens=40, steps=0, remasking="")
    cases = []
    for name, pr in prompts.items():
        cases.append((f"greedy_{name}", pr, params(**base)))
    pr = prompts["short"]
    cases += [
        ("threshold_low", pr, params(**dict(base, threshold=0.02))),
        ("threshold_one", pr, params(**dict(base, threshold=1.0, max_tokens=20))),
        ("block8_sub4", prompts["long"], params(**dict(base, block_length=8, sub_block_length=4, threshold=0.05))),
        ("sampled", pr, params(**dict(base, temperature=0.9, top_p=0.95, seed=21, threshold=0.1))),
        ("sampled_exact", prompts["exact"], params(**dict(base, temperature=1.2, top_p=0.8, seed=2, threshold=0.05))),
        ("ar_greedy", prompts["long"], params(strategy="ar", block_length=1, steps=0, remasking="", max_tokens=12)),
        ("ar_sampled", pr, params(strategy="ar", block_length=1, steps=0, remasking="", max_tokens=12,
                                  temperature=1.0, seed=9)),
    ]
    return cases


def add_stop_cases(m, cases):
    """Stop ids chosen from what the model actually generates, so stops land mid-block."""
    out = []
    for name, pr, p in cases:
        out.append((name, pr, p))
        if name.startswith("greedy") or name.startswith("sampled"):
            res = run(m, pr, p)
            ids = res["ids"]
            first = {}
            for i, t in enumerate(ids):
                first.setdefault(t, i)
            # The token whose first occurrence is nearest the middle of the output.
            later = [t for t, i in first.items() if i > 0]
            if later:
                stop = min(later, key=lambda t: abs(first[t] - len(ids) // 2))
                out.append((name + "_stop", pr, dict(p, stop_ids=[stop])))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tests/fixtures/models")
    ap.add_argument("--out", default="tests/fixtures/trajectories")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import transformers
    for model_name, make in [("sdar-tiny", sdar_cases), ("fast-dllm-v2-tiny", fast_cases)]:
        m = ReferenceModel(os.path.join(args.models, model_name))
        rng = np.random.default_rng(1234)
        cases = add_stop_cases(m, make(m, rng))
        records = []
        for name, pr, p in cases:
            res = run(m, pr, p)
            records.append(dict(name=name, prompt=pr, params=p, expected=res))
            print(f"{model_name:18s} {name:32s} P={len(pr):2d} -> {len(res['ids']):2d} ids, "
                  f"{res['forwards']:3d} forwards, {res['finish_reason']}: {res['ids'][:12]}")
        if model_name == "sdar-tiny":
            # Mask-token AR is SDAR's block decoder with B = 1, S = 1 (two forwards per token there).
            for name, pr, p in cases:
                if p["strategy"] == "ar" and not p["temperature"] > 0:
                    a = run(m, pr, p)["ids"]
                    b = sdar_generate(m, pr, dict(p, strategy="block"))["ids"]
                    assert a == b, (name, a, b)
        with open(os.path.join(args.out, model_name + ".json"), "w") as fh:
            json.dump({"model": model_name, "reference": f"tools/reference_decode.py, transformers "
                       f"{transformers.__version__}, torch {torch.__version__}", "cases": records}, fh)


if __name__ == "__main__":
    main()
