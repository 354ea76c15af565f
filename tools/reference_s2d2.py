#!/usr/bin/env python3
"""Reference trajectories for S2D2 (method-specs §5): training-free self-speculative decoding for
block diffusion, written independently of the engine from the spec and the S2D2 reference loop
(phymhan/S2D2 SDAR/generate_ssd_policy.py), run with transformers on the tiny fixtures.

  * SDAR (position-aligned): the 2L verifier over the WHOLE block, exactly as the reference builds
    it ([block with every mask draft-filled | L masks], mask [[A_L, 0], [A_L^<, I_L]]); the engine
    truncates the first half at the end of the span, which must give the same ids.
  * Fast-dLLM v2 (right-shifted): a causal forward over the block prefix up to the end of the
    current sub-block, masks draft-filled; token j is verified by the logit at j - 1.
  * Acceptance min(1, (q/p)^gamma) left to right; at the first rejection a draw from (q - p)+ / Z
    (q when Z == 0) by inverse CDF in id order; fallback to the family rule.
Randomness comes from tools/dllm_rng.py with the engine's conventions: draft tokens as in
tools/reference_decode.py (stream 0, step = index of the draft forward); the accept draw of the
token at position i is uniform(seed, 0, v, i, STREAM_ACCEPT, 0) and its residual draw index 1,
where v is the index of the verify forward.

    python3 tools/reference_s2d2.py --models tests/fixtures/models --out tests/fixtures/trajectories
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dllm_rng import uniform  # noqa: E402
from hf_reference import ReferenceModel  # noqa: E402
from reference_decode import Tracker, ban, inverse_cdf, top_k_filter, top_p_filter, transfer_schedule  # noqa: E402

STREAM_ACCEPT = 1


def probs_of(logits, T, top_k, top_p, mask_id):
    """The sampling distribution (float64): ban [MASK], /T (T = 1 greedy), top-k, top-p."""
    row = ban(logits, mask_id)
    t = T if T > 0 else 1.0
    row = row / t if t != 1.0 else row.clone()
    return torch.softmax(top_p_filter(top_k_filter(row, top_k), top_p).double(), -1)


def draft_token(logits, p, u, mask_id):
    """(token, p_filtered, p_tempered) like the engine's TokenStats for the draft row."""
    probs = probs_of(logits, p["temperature"], p["top_k"], p["top_p"], mask_id)
    greedy = not p["temperature"] > 0
    tok = int(torch.argmax(probs)) if greedy else inverse_cdf(probs, u)
    t = 1.0 if greedy else p["temperature"]
    tempered = torch.softmax(ban(logits, mask_id).double() / t, -1)
    return tok, float(probs[tok]), float(tempered[tok]), probs


def residual(q, pd, u):
    w = torch.clamp(q - pd, min=0.0)
    if not float(w.sum()) > 0:
        w = q.clone()
    z = float(w.sum())
    target, cum, last = u * z, 0.0, 0
    for i, v in enumerate(w.tolist()):
        if v <= 0:
            continue
        last = i
        cum += v
        if cum > target:
            return i
    return last


# ---------------------------------------------------------------- routing (§5.3)
def norm_entropy(probs):
    V = probs.numel()
    if V <= 1:
        return 0.0
    return float(-(probs * probs.clamp_min(1e-12).log()).sum() / math.log(V))


def margin(probs):
    top = torch.topk(probs, 2).values
    return float(top[0] - top[1])


def alphas(s, span_probs, span_p):
    out = []
    for probs, pt in zip(span_probs, span_p):
        e = s["estimator"]
        if e == "soft-entropy":
            a = math.exp(-s["entropy_beta"] * norm_entropy(probs))
        elif e == "hard-margin":
            a = 1.0 if margin(probs) > s["margin_threshold"] else 0.0
        elif e == "hard-entropy":
            a = 1.0 if norm_entropy(probs) < s["entropy_threshold"] else 0.0
        elif e == "confidence-power":
            a = min(max(pt, 0.0), 1.0) ** s["confidence_power"]
        elif e == "clipped-linear-margin":
            a = min(max(s["margin_coef"] * margin(probs), 0.0), 1.0)
        else:
            a = min(max(float((probs ** 2).sum()), 0.0), 1.0)
        out.append(a)
    return out


def bin_of(v, lo, hi, n):
    if n <= 1 or hi <= lo:
        return 0
    v = min(max(v, lo), hi)
    return min(n - 1, max(0, int((v - lo) / (hi - lo) * n)))


class Router:
    def __init__(self, s):
        self.s, self.on, self.t = s, False, 0
        nb = s["ucb_span_bins"] * s["ucb_progress_bins"] * s["ucb_entropy_bins"]
        self.count = [[0] * nb, [0] * nb]
        self.rsum = [[0.0] * nb, [0.0] * nb]
        self.pending = None

    def score(self, span_probs, span_p, n_hi):
        k, prod = 0.0, 1.0
        for a in alphas(self.s, span_probs, span_p):
            prod *= min(max(a, 0.0), 1.0)
            k += prod
        c = self.s["score_cost"]
        if os.environ.get("S2D2_DEBUG"):
            print("score", self.s["estimator"], len(span_probs), k, file=sys.stderr)
        return k - c if self.s["score_type"] == "static" else k - c * n_hi

    def decide(self, span_probs, span_p, n_hi, block_len, unmasked):
        s, pol = self.s, self.s["policy"]
        self.pending = None
        if pol == "span":
            return len(span_probs) >= s["span_min"]
        if pol == "score":
            return not self.score(span_probs, span_p, n_hi) < s["score_threshold"]
        if pol == "hysteresis":
            sc = self.score(span_probs, span_p, n_hi)
            self.on = (not sc < s["hysteresis_off"]) if self.on else sc > s["hysteresis_on"]
            return self.on
        self.t += 1
        ent = sum(norm_entropy(pr) for pr in span_probs) / max(1, len(span_probs))
        prog = min(1.0, max(0.0, unmasked / max(1, block_len)))
        b = (bin_of(max(1, len(span_probs)), 1.0, max(1, block_len), s["ucb_span_bins"]) * s["ucb_progress_bins"]
             + bin_of(prog, 0.0, 1.0, s["ucb_progress_bins"])) * s["ucb_entropy_bins"] + bin_of(ent, 0.0, 1.0, s["ucb_entropy_bins"])
        lt = math.log(max(1, self.t))
        sc = []
        for a in (0, 1):
            n = self.count[a][b]
            if n == 0:
                sc.append(float("inf"))
            else:
                sc.append(self.rsum[a][b] / n + (0.0 if lt <= 0 else s["ucb_beta"] * math.sqrt(lt / n)))
        act = 1 if sc[1] >= sc[0] else 0
        self.pending = (act, b)
        return act == 1

    def record(self, decoded):
        if self.pending is None:
            return
        a, b = self.pending
        self.count[a][b] += 1
        self.rsum[a][b] += decoded / (2.0 if a == 1 else 1.0)
        self.pending = None


def accept_span(span, drafts, q_rows, x, lo, p, verify_index, stats):
    """Left-to-right acceptance over span offsets; returns tokens decoded."""
    decoded = 0
    for t, j in enumerate(span):
        tok, pd = drafts[j][0], drafts[j][3]
        q = probs_of(q_rows[t], p["temperature"], p["top_k"], p["top_p"], p["mask_id"])
        ratio = float(q[tok]) / max(float(pd[tok]), 1e-12)
        ratio = min(1.0, ratio ** p["s2d2"]["gamma"] if p["s2d2"]["gamma"] != 1.0 else ratio)
        decoded += 1
        if uniform(p["seed"], 0, verify_index, lo + j, STREAM_ACCEPT, 0) < ratio:
            x[lo + j] = tok
            stats["accepted"] += 1
            continue
        x[lo + j] = residual(q, pd, uniform(p["seed"], 0, verify_index, lo + j, STREAM_ACCEPT, 1))
        stats["rejected"] += 1
        break
    return decoded


def first_span(offsets):
    span = []
    for j in offsets:
        if span and j != span[-1] + 1:
            break
        span.append(j)
    return span


# ---------------------------------------------------------------- SDAR
def prefix_visible(n_prefix, B, causal):
    pos = np.arange(n_prefix)
    if causal:
        return np.tril(np.ones((n_prefix, n_prefix), dtype=bool))
    return (pos[None, :] // B) <= (pos[:, None] // B)


def with_queries(prefix_vis, q_vis):
    """Full-recompute mask: prefix rows as cached, query rows see the whole prefix + q_vis."""
    n, m = prefix_vis.shape[0], q_vis.shape[0]
    vis = np.zeros((n + m, n + m), dtype=bool)
    vis[:n, :n] = prefix_vis
    vis[n:, :n] = True
    vis[n:, n:] = q_vis
    return vis


def sdar_s2d2(m, prompt, p):
    B, S, thr, s2 = p["block_length"], p["steps"], p["threshold"], p["s2d2"]
    P = len(prompt)
    nblk = (P + p["max_tokens"] + B - 1) // B
    x = list(prompt) + [m.mask_id] * (nblk * B - P)
    tr = Tracker(P, m.mask_id, p["max_tokens"], p["stop_ids"])
    sched = transfer_schedule(B, S)
    router = Router(s2)
    st = dict(forwards=0, accepted=0, rejected=0, verify_calls=0)

    def snapshot(end_block):
        tr.canvases.append(x[P:max(P, min(len(x), (end_block + 1) * B))])

    def finish():
        ok, ids, reason = tr.done(x)
        return ok, dict(ids=ids, finish_reason=reason, forwards=st["forwards"], canvases=tr.canvases,
                        verify_calls=st["verify_calls"], accepted=st["accepted"], rejected=st["rejected"])

    first = P // B
    if first > 0:
        st["forwards"] += 1
        snapshot(first)
    for b in range(first, nblk):
        lo, hi = b * B, (b + 1) * B
        pv = prefix_visible(lo, B, s2["cache_ver"])
        unmasked = 0
        for step in range(S + 1):
            masked = [j for j in range(B) if x[lo + j] == m.mask_id]
            if not masked:
                st["forwards"] += 1
                snapshot(b + 1)
                break
            qv = np.ones((B, B), dtype=bool)
            if s2["draft_ver"]:
                fm = masked[0]
                qv[:fm] = np.tril(np.ones((B, B), dtype=bool))[:fm]
            logits = m.logits(x[:hi], list(range(hi)), with_queries(pv, qv))[lo:]
            drafts = {}
            for j in masked:
                u = uniform(p["seed"], 0, st["forwards"], lo + j)
                drafts[j] = draft_token(logits[j], p, u, m.mask_id)
            st["forwards"] += 1
            span = first_span(masked)
            span_probs = [drafts[j][3] for j in span]
            span_p = [float(drafts[j][3][drafts[j][0]]) for j in span]
            n_hi = sum(1 for j in masked if drafts[j][1] > thr)
            decoded = 0
            if router.decide(span_probs, span_p, n_hi, B, unmasked):
                snapshot(b)  # the canvas after the draft forward (nothing decided yet)
                ok, res = finish()
                if ok:
                    return res
                first_half = [drafts[j][0] if x[lo + j] == m.mask_id else x[lo + j] for j in range(B)]
                ids = x[:lo] + first_half + [m.mask_id] * B
                pos = list(range(lo)) + list(range(lo, hi)) * 2
                tri = np.tril(np.ones((B, B), dtype=bool))
                qv2 = np.zeros((2 * B, 2 * B), dtype=bool)
                qv2[:B, :B] = tri
                qv2[B:, :B] = np.tril(np.ones((B, B), dtype=bool), -1)
                qv2[B:, B:] = np.eye(B, dtype=bool)
                vlog = m.logits(ids, pos, with_queries(pv, qv2))
                q_rows = [vlog[lo + B + j] for j in span]
                verify_index = st["forwards"]
                st["forwards"] += 1
                st["verify_calls"] += 1
                decoded = accept_span(span, drafts, q_rows, x, lo, dict(p, mask_id=m.mask_id), verify_index, st)
            k = min(sched[min(step, S - 1)], len(masked))
            if decoded < k:
                left = [j for j in masked if x[lo + j] == m.mask_id]
                kl = min(k - decoded, len(left))
                conf = {j: (drafts[j][2] if p["confidence"] == "tempered" else drafts[j][1]) for j in left}
                by_conf = sorted(left, key=lambda j: (-conf[j], j))
                if p["remasking"] == "sequential":
                    chosen = left[:kl]
                elif p["remasking"] == "low_confidence_static":
                    chosen = by_conf[:kl]
                else:
                    high = [j for j in left if conf[j] > thr]
                    chosen = high if len(high) >= kl else by_conf[:kl]
                for j in chosen:
                    x[lo + j] = drafts[j][0]
                decoded += len(chosen)
            unmasked += decoded
            router.record(decoded)
            snapshot(b)
            ok, res = finish()
            if ok:
                return res
    return finish()[1]


# ---------------------------------------------------------------- Fast-dLLM v2
def fast_s2d2(m, prompt, p):
    B, sb, thr, s2 = p["block_length"], p["sub_block_length"], p["threshold"], p["s2d2"]
    T = p["temperature"]
    P = len(prompt)
    x = list(prompt)
    tr = Tracker(P, m.mask_id, p["max_tokens"], p["stop_ids"])
    router = Router(s2)
    st = dict(forwards=0, accepted=0, rejected=0, verify_calls=0)

    def finish():
        ok, ids, reason = tr.done(x)
        return ok, dict(ids=ids, finish_reason=reason, forwards=st["forwards"], canvases=tr.canvases,
                        verify_calls=st["verify_calls"], accepted=st["accepted"], rejected=st["rejected"])

    def run_logits(ids, cached, q_vis):
        return m.logits(ids, list(range(len(ids))), with_queries(prefix_visible(cached, B, False), q_vis))

    cached = 0
    if P >= B:
        cached = (P // B) * B
        lg = m.logits(x[:cached], list(range(cached)), prefix_visible(cached, B, False))
        st["forwards"] += 1
        if P % B == 0:
            x.append(int(torch.argmax(ban(lg[cached - 1], m.mask_id))))
    x += [m.mask_id] * (B - len(x) % B)
    if st["forwards"]:
        tr.canvases.append(x[P:])
        ok, res = finish()
        if ok:
            return res
    unmasked = 0
    while True:
        lo = cached
        if m.mask_id not in x[lo:lo + B]:
            lg = run_logits(x[:lo + B], lo, np.ones((B, B), dtype=bool))
            st["forwards"] += 1
            x.append(int(torch.argmax(ban(lg[lo + B - 1], m.mask_id))))
            cached += B
            x += [m.mask_id] * (B - len(x) % B)
            unmasked = 0
        else:
            first = next(j for j in range(B) if x[lo + j] == m.mask_id)
            s0 = (first // sb) * sb
            lg = run_logits(x[:lo + B], lo, np.ones((B, B), dtype=bool))
            shifted = torch.cat([lg[lo:lo + 1], lg[lo:lo + B - 1]], 0)  # token j <- logit j-1
            masked = [j for j in range(s0, s0 + sb) if x[lo + j] == m.mask_id]
            drafts = {}
            for j in masked:
                u = uniform(p["seed"], 0, st["forwards"], lo + j)
                tok, pf, pt, probs = draft_token(shifted[j], p, u, m.mask_id)
                conf = pt if not T > 0 else pf
                drafts[j] = (tok, pf, conf, probs)
            st["forwards"] += 1
            span = first_span(masked)
            span_probs = [drafts[j][3] for j in span]
            span_p = [float(drafts[j][3][drafts[j][0]]) for j in span]
            n_hi = sum(1 for j in masked if drafts[j][2] > thr)
            if router.decide(span_probs, span_p, n_hi, B, unmasked):
                tr.canvases.append(x[P:])
                ok, res = finish()
                if ok:
                    return res
                end = s0 + sb  # the sub-block end, masks draft-filled
                seg = [drafts[j][0] if x[lo + j] == m.mask_id else x[lo + j] for j in range(end)]
                vlog = run_logits(x[:lo] + seg, lo, np.tril(np.ones((end, end), dtype=bool)))
                q_rows = [vlog[lo + j - 1] for j in span]
                verify_index = st["forwards"]
                st["forwards"] += 1
                st["verify_calls"] += 1
                decoded = accept_span(span, drafts, q_rows, x, lo, dict(p, mask_id=m.mask_id), verify_index, st)
            else:
                best, decoded = None, 0
                for j in masked:
                    if best is None or drafts[j][2] > drafts[best][2]:
                        best = j
                    if drafts[j][2] > thr:
                        x[lo + j] = drafts[j][0]
                        decoded += 1
                if not drafts[best][2] > thr:
                    decoded += 1
                x[lo + best] = drafts[best][0]
            unmasked += decoded
            router.record(decoded)
        tr.canvases.append(x[P:])
        ok, res = finish()
        if ok:
            return res


# ---------------------------------------------------------------- cases
S2D2_DEFAULTS = dict(policy="span", span_min=1, score_type="dynamic", score_cost=2.0, score_threshold=0.0,
                     hysteresis_on=0.0, hysteresis_off=-1.0, estimator="hard-margin", entropy_beta=1.0,
                     margin_threshold=0.05, entropy_threshold=0.5, confidence_power=1.0, margin_coef=1.0,
                     gamma=1.0, ucb_beta=1.0, ucb_span_bins=2, ucb_progress_bins=2, ucb_entropy_bins=2,
                     cache_ver=False, draft_ver=False)


def params(**kw):
    base = dict(strategy="s2d2", max_tokens=16, block_length=4, steps=4, threshold=0.9,
                remasking="low_confidence_dynamic", confidence="tempered", sub_block_length=0,
                temperature=0.0, top_k=0, top_p=1.0, seed=0, stop_ids=[])
    base.update(kw)
    base["s2d2"] = dict(S2D2_DEFAULTS, **kw.get("s2d2", {}))
    return base


# Knobs and costs c chosen so the tiny random models (near-uniform rows) verify at some steps
# and not at others under `score` (static: verify iff K - c >= 0).
ESTIMATORS = [("soft-entropy", dict(entropy_beta=1.0, score_cost=0.64)),
              ("hard-margin", dict(margin_threshold=0.004, score_cost=0.5)),
              ("hard-entropy", dict(entropy_threshold=0.99, score_cost=3.5)),
              ("confidence-power", dict(confidence_power=0.5, score_cost=0.12)),
              ("clipped-linear-margin", dict(margin_coef=20.0, score_cost=0.08)),
              ("renyi-2", dict(score_cost=0.0075))]


def policy_cases(base, tag):
    """Every policy, every estimator (through the score policy), greedy and sampled."""
    cases = [
        (f"{tag}_always", dict(base)),
        (f"{tag}_span3", dict(base, s2d2=dict(base["s2d2"], span_min=3))),
        (f"{tag}_hysteresis", dict(base, s2d2=dict(base["s2d2"], policy="hysteresis", estimator="soft-entropy",
                                                    score_type="dynamic", score_cost=1.0, hysteresis_on=-0.5,
                                                    hysteresis_off=-1.5))),
        (f"{tag}_bandit", dict(base, s2d2=dict(base["s2d2"], policy="bandit", ucb_span_bins=2, ucb_progress_bins=2,
                                                ucb_entropy_bins=1))),
        (f"{tag}_gamma", dict(base, s2d2=dict(base["s2d2"], gamma=0.5))),
    ]
    for est, kw in ESTIMATORS:
        s2 = dict(base["s2d2"], policy="score", estimator=est, score_type="static", score_threshold=0.0, **kw)
        cases.append((f"{tag}_score_{est}", dict(base, s2d2=s2)))
    return cases


def sdar_cases(rng):
    pr_long, pr_short = rng.integers(0, 250, 10).tolist(), rng.integers(0, 250, 3).tolist()
    cases = []
    for tag, base in [("greedy", params()), ("sampled", params(temperature=1.0, seed=42, threshold=0.3)),
                      ("topk_topp", params(temperature=0.8, top_k=40, top_p=0.9, seed=5, threshold=0.3))]:
        cases += [(n, pr_long, c) for n, c in policy_cases(base, tag)]
    cases += [
        ("greedy_short_prompt", pr_short, params()),
        ("score_dynamic", pr_long, params(threshold=0.05, s2d2=dict(policy="score", estimator="soft-entropy", score_cost=1.0))),
        ("cache_ver_draft_ver", pr_long, params(temperature=1.0, seed=3, s2d2=dict(cache_ver=True, draft_ver=True))),
        ("block8_steps4", pr_long, params(block_length=8, steps=4, max_tokens=20, threshold=0.05,
                                          s2d2=dict(policy="span", span_min=2))),
        ("sequential_span4", pr_long, params(remasking="sequential", s2d2=dict(span_min=4))),
    ]
    return cases


def fast_cases(rng):
    pr_short, pr_long = rng.integers(0, 250, 5).tolist(), rng.integers(0, 250, 37).tolist()
    base_kw = dict(block_length=8, sub_block_length=4, max_tokens=24, steps=0, remasking="", top_p=1.0)
    cases = []
    for tag, base in [("greedy", params(**base_kw)),
                      ("sampled", params(**dict(base_kw, temperature=1.0, top_p=0.95, seed=21, threshold=0.3)))]:
        cases += [(n, pr_short, c) for n, c in policy_cases(base, tag)]
    cases += [
        ("greedy_long_prompt", pr_long, params(**base_kw)),
        ("block32_sub8", pr_short, params(**dict(base_kw, block_length=32, sub_block_length=8, max_tokens=40))),
        ("sampled_exact_prompt", rng.integers(0, 250, 8).tolist(),
         params(**dict(base_kw, temperature=1.2, top_p=0.8, seed=2, threshold=0.05))),
    ]
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tests/fixtures/models")
    ap.add_argument("--out", default="tests/fixtures/trajectories")
    args = ap.parse_args()
    import transformers
    for model_name, make, gen in [("sdar-tiny", sdar_cases, sdar_s2d2), ("fast-dllm-v2-tiny", fast_cases, fast_s2d2)]:
        m = ReferenceModel(os.path.join(args.models, model_name))
        rng = np.random.default_rng(4321)
        records = []
        for name, pr, p in make(rng):
            res = gen(m, pr, p)
            records.append(dict(name=name, prompt=pr, params=p, expected=res))
            print(f"{model_name:18s} {name:36s} -> {len(res['ids']):2d} ids, {res['forwards']:3d} fwd, "
                  f"{res['verify_calls']:2d} verify, {res['accepted']:2d} acc, {res['rejected']:2d} rej")
        with open(os.path.join(args.out, model_name + "-s2d2.json"), "w") as fh:
            json.dump({"model": model_name, "reference": f"tools/reference_s2d2.py, transformers "
                       f"{transformers.__version__}, torch {torch.__version__}", "cases": records}, fh)


if __name__ == "__main__":
    main()
