#!/usr/bin/env python3
"""Reference decoding trajectories for d2Cache and its Fast-dLLM v1 and dLLM-Cache baselines on LLaDA and Dream (issue #9).

An independent PyTorch implementation written after the d2Cache reference (Kamichanw/d2Cache:
src/cache/d2cache.py, src/generation/vanilla.py, src/utils/common.py; method-specs §4), run on the
tiny fixture checkpoints with the transformers model's own modules but a hand-written layer loop
that reproduces the reference's caching semantics:
  * step 0 forwards the whole canvas and stores every token's K/V (post-RoPE: the canvas
    positions never change, method-specs §4.2);
  * every later step forwards only the selected rows through all layers; their fresh K/V
    overwrite their cache rows and they attend bidirectionally to all T cached rows; the hidden
    states of unselected tokens are never recomputed (their K/V stay stale at every layer);
  * the attention rollout is the dense product of (E + I) / rowsum over the layers, E = I with
    the selected rows replaced by the head-averaged attention probabilities (d2cache.py:147-174),
    and the importance of a token is its column sum;
  * decoding: certainty-prior (score = confidence x density, sigma > 0) over the decodable masks
    of the current block (LLaDA: selected rows; Dream, right-shifted: the row before), top
    num_transfer_tokens, or with a threshold everything >= threshold (top-n when fewer);
  * q_mask for the next step (on_step_end): stage 1 top-k masks by conf_cache x density in the
    search window with the current-block bias, Dream shifts it left by one, plus the positions
    decoded this step; stage 2 the nucleus (p) of the rollout importance over the unselected
    tokens (min_k = 1); Dream then sets the last prompt row to "gen position 0 selected"; then
    the inflate rule.
With d2c_select_all every step is instead the transformers model's plain full forward of the
whole canvas (the reference's "vanilla" generation), which the engine must reproduce with its
cached selected-row path forwarding every row.

Deliberate, documented differences from the reference (the engine does the same):
  * greedy decoding only; confidence = p(argmax) with [MASK] never chosen (its logit is -inf);
  * the certainty density is the exact sum over the padded canvas in float64 (the reference
    uses an FFT in float32; equal up to rounding), normalised by the full kernel sum as the
    reference's circular convolution does; sigma = 0 means density 1 (certainty prior off);
  * the rollout and the nucleus cumulative sum are float64; ties in every top-k and sort break
    toward the lower position;
  * d2c_frozen_conf=True reproduces the reference's conf_cache that is never updated after
    step 0 (method-specs §4.6 quirk 1); False (the paper) updates conf_cache with every fresh
    confidence of a masked token (the decodable rows of the step);
  * generation stops as soon as the final tokens contain a stop id or reach max_tokens.

    python3 tools/reference_d2cache.py --models tests/fixtures/models --out tests/fixtures/trajectories
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_reference import ReferenceModel  # noqa: E402
from reference_decode import Tracker  # noqa: E402

NEG_INF = float("-inf")


def f32(v):
    return float(np.float32(v))


class CachedCanvas:
    """The model with a per-layer K/V cache over the whole canvas (d2Cache semantics)."""

    def __init__(self, m, T):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
        self.rope_apply = apply_rotary_pos_emb
        self.m, self.T = m, T
        mm = m.model.model
        self.layers, self.embed, self.norm, self.rotary = mm.layers, mm.embed_tokens, mm.norm, mm.rotary_emb
        self.head = m.model.lm_head
        cfg = m.model.config
        self.H, self.Hkv, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.K = [torch.zeros(self.Hkv, T, self.d) for _ in self.layers]
        self.V = [torch.zeros(self.Hkv, T, self.d) for _ in self.layers]

    def forward(self, x, rows):
        """Forwards canvas rows `rows` (ascending); returns logits [n, vocab] and the
        head-averaged attention probabilities per layer [L][n, T]."""
        rows_t = torch.tensor(rows)
        h = self.embed(torch.tensor([[x[r] for r in rows]]))
        pos = rows_t[None]
        cos, sin = self.rotary(h, pos)
        n, attn_rows = len(rows), []
        for li, layer in enumerate(self.layers):
            a = layer.self_attn
            hn = layer.input_layernorm(h)
            q = a.q_proj(hn).view(1, n, self.H, self.d).transpose(1, 2)
            k = a.k_proj(hn).view(1, n, self.Hkv, self.d).transpose(1, 2)
            v = a.v_proj(hn).view(1, n, self.Hkv, self.d).transpose(1, 2)
            q, k = self.rope_apply(q, k, cos, sin)
            self.K[li][:, rows_t] = k[0]
            self.V[li][:, rows_t] = v[0]
            rep = self.H // self.Hkv
            keys = self.K[li].repeat_interleave(rep, 0)  # [H, T, d]
            vals = self.V[li].repeat_interleave(rep, 0)
            scores = q[0] @ keys.transpose(1, 2) / math.sqrt(self.d)  # [H, n, T]
            probs = torch.softmax(scores, dim=-1)
            attn_rows.append(probs.mean(0).double())
            out = (probs @ vals).transpose(0, 1).reshape(1, n, self.H * self.d)
            h = h + a.o_proj(out)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.head(self.norm(h))[0].float(), attn_rows


def dense_rollout(attn_rows, rows, T):
    """d2cache.py accumulate_attn_rollout: C = W_L ... W_1, importance = column sums."""
    C = torch.eye(T, dtype=torch.float64)
    for a in attn_rows:
        E = torch.eye(T, dtype=torch.float64)
        E[torch.tensor(rows)] = a
        W = E + torch.eye(T, dtype=torch.float64)
        W = W / W.sum(dim=-1, keepdim=True)
        C = W @ C
    return C.sum(dim=0).tolist()


def certainty_density(known, sigma):
    """common.py certainty_density: left pad 1, right pad = known[-1], normalised by the whole
    kernel sum over [-3G, 3G) (the reference's circular convolution of ones)."""
    G = len(known)
    if sigma <= 0:
        return [1.0] * G
    pad_right = 1.0 if known[-1] else 0.0
    padded = [1.0] * G + [1.0 if k else 0.0 for k in known] + [pad_right] * G  # index j + G
    phi = lambda dist: math.exp(-(dist * dist) / (2.0 * sigma * sigma))  # noqa: E731
    Z = sum(phi(dd) for dd in range(-3 * G, 3 * G))
    out = []
    for i in range(G):
        s = 0.0
        for j in range(-G, 2 * G):
            s += phi(i - j) * padded[j + G]
        out.append(s / Z)
    return out


def top_indices(scores, k):
    """Indices of the k largest finite scores, ties toward the lower index."""
    order = sorted((i for i in range(len(scores)) if scores[i] != NEG_INF), key=lambda i: (-scores[i], i))
    return order[:k]


def nucleus_select(scores, p, allowed):
    """common.py nucleus_select with min_k = 1: sort the normalised scores of allowed tokens
    descending, keep while cumsum <= p, always the first, never a disallowed token."""
    s = [scores[i] if allowed[i] else 0.0 for i in range(len(scores))]
    total = sum(s) + 1e-9
    order = sorted(range(len(s)), key=lambda i: (-s[i] / total, i))
    out = [False] * len(s)
    cum = 0.0
    for rank, i in enumerate(order):
        cum += s[i] / total
        if (cum <= p or rank < 1) and allowed[i]:
            out[i] = True
    return out


def transfer_counts(block, steps):
    base, rem = block // steps, block % steps
    return [base + (1 if i < rem else 0) for i in range(steps)]


def d2cache_generate(m, prompt, p):
    P, G, B = len(prompt), p["max_tokens"], p["block_length"] or p["max_tokens"]
    steps = p["steps"] or G
    mask = m.mask_id
    shift = 1 if m.family == "dream" else 0
    T = P + G
    assert G % B == 0
    nb = G // B
    assert steps % nb == 0
    spb = steps // nb
    k_top, sigma, top_p, inflate = p["d2c_k"], p["d2c_sigma"], f32(p["d2c_p"]), p["d2c_inflate"]
    thr = f32(p["threshold"]) if p["threshold"] >= 0 else None
    x = list(prompt) + [mask] * G
    tr = Tracker(P, mask, G, p["stop_ids"])
    canvas = CachedCanvas(m, T)
    q_rows = None  # None: the next forward is the full step-0 forward
    conf_cache = None
    forwards = 0
    for b in range(nb):
        blk = range(b * B, (b + 1) * B)
        counts = transfer_counts(B, spb)
        for i in range(spb):
            if not any(x[P + g] == mask for g in blk):
                break
            # ---- forward
            if p["d2c_select_all"]:
                rows = list(range(T))
                logits = m.logits(x, rows, np.ones((T, T), dtype=bool))
                attn = None
            else:
                rows = list(range(T)) if q_rows is None else q_rows
                logits, attn = canvas.forward(x, rows)
            row_of = {r: n for n, r in enumerate(rows)}
            remaining_before = [x[P + g] == mask for g in range(G)]
            conf = [NEG_INF] * G
            tok = [None] * G
            for g in range(G):
                src = P + g - shift
                if remaining_before[g] and src in row_of:
                    lg = logits[row_of[src]].double().clone()
                    lg[mask] = NEG_INF
                    pr = torch.softmax(lg, dim=-1)
                    tok[g] = int(torch.argmax(pr))
                    conf[g] = f32(pr[tok[g]])
            # ---- decode (vanilla.py generate_step / confidence_unmasking)
            dens = certainty_density([not r for r in remaining_before], sigma)
            score = [conf[g] * dens[g] if (conf[g] != NEG_INF and g in blk) else NEG_INF for g in range(G)]
            n_cand = sum(1 for s in score if s != NEG_INF)
            chosen = []
            if thr is not None:
                chosen = [g for g in range(G) if score[g] != NEG_INF and score[g] >= thr]
            if len(chosen) < counts[i]:
                chosen = top_indices(score, min(n_cand, counts[i]))
            for g in chosen:
                x[P + g] = tok[g]
            forwards += 1
            tr.canvases.append(x[P:])
            ok, ids, reason = tr.done(x)
            if ok:
                return dict(ids=ids, finish_reason=reason, forwards=forwards, canvases=tr.canvases)
            if p["d2c_select_all"]:
                continue
            # ---- on_step_end: the rows of the next step
            if conf_cache is None:
                conf_cache = list(conf)
            elif not p["d2c_frozen_conf"]:
                for g in range(G):
                    if conf[g] != NEG_INF:
                        conf_cache[g] = conf[g]
            remaining = [x[P + g] == mask for g in range(G)]
            cnt, end0 = 0, G - 1
            for g in range(G):
                cnt += remaining[g]
                if cnt >= k_top:
                    end0 = g
                    break
            search_end = (end0 // B + 1) * B - 1
            d_now = certainty_density([not r for r in remaining], sigma)
            s = [conf_cache[g] * d_now[g] for g in range(G)]
            bias = max(s)
            s = [s[g] + bias if g in blk else s[g] for g in range(G)]
            cand = [s[g] if (blk.start <= g <= search_end and remaining[g]) else NEG_INF for g in range(G)]
            selected = [False] * G
            for g in top_indices(cand, min(k_top, G)):
                selected[g] = True
            response = selected[1:] + [False] if shift else list(selected)
            for g in chosen:
                response[g] = True
            q = [False] * P + response
            importance = dense_rollout(attn, rows, T)
            nuc = nucleus_select(importance, top_p, [not v for v in q])
            q = [a or c for a, c in zip(q, nuc)]
            if shift:
                q[P - 1] = selected[0]
            if inflate > 0:
                sel = [t for t in range(T) if q[t]]
                add = []
                for t in range(T):
                    if q[t]:
                        continue
                    prev = max((u for u in sel if u < t), default=None)
                    nxt = min((u for u in sel if u > t), default=None)
                    if prev is not None and nxt is not None and nxt - prev <= inflate:
                        add.append(t)
                for t in add:
                    q[t] = True
            q_rows = [t for t in range(T) if q[t]]
    ok, ids, reason = tr.done(x)
    return dict(ids=ids, finish_reason=reason, forwards=forwards, canvases=tr.canvases)


# ---------------------------------------------------------------- Fast-dLLM v1 (method-specs §6.4)
def fastdllm_generate(m, prompt, p):
    """Fast-dLLM v1 (NVlabs/Fast-dLLM llada/generate.py generate_with_prefix_cache /
    generate_with_dual_cache; dream/model/generation_utils_block.py _sample with
    alg=confidence_threshold), greedy, threshold parallel decoding: per block, one full forward
    of the canvas refreshes the whole cache, then each step forwards the block (dual) or the
    block and everything after it (prefix) against the cached rest; the top-1 mask of the block
    is always unmasked, every other with confidence >= threshold too.
    LLaDA decodes from the block-start forward with the same rule; Dream's block-start forward
    fixes only the first block position (from row s-1), and its block steps shift logits inside
    the forwarded window (position s would read row s itself; it is never masked then). Dream's
    loop checks for remaining masks after the step, so a block it completes at block start still
    costs one block forward (block_length 1)."""
    P, G, B = len(prompt), p["max_tokens"], p["block_length"]
    thr = f32(p["threshold"])
    mask = m.mask_id
    dream = m.family == "dream"
    T = P + G
    x = list(prompt) + [mask] * G
    tr = Tracker(P, mask, G, p["stop_ids"])
    canvas = CachedCanvas(m, T)
    forwards = 0

    def decide(logits_row):
        lg = logits_row.double().clone()
        lg[mask] = NEG_INF
        pr = torch.softmax(lg, dim=-1)
        t = int(torch.argmax(pr))
        return t, f32(pr[t])

    def threshold_rule(cands):  # cands: {position: (token, conf)}
        order = sorted(cands, key=lambda j: (-cands[j][1], j))
        for rank, j in enumerate(order):
            if rank == 0 or cands[j][1] >= thr:
                x[j] = cands[j][0]

    def record():
        nonlocal forwards
        forwards += 1
        tr.canvases.append(x[P:])
        return tr.done(x)

    for b in range(G // B):
        s, e = P + b * B, P + (b + 1) * B
        logits, _ = canvas.forward(x, list(range(T)))
        if dream:
            x[s] = decide(logits[s - 1])[0]
        else:
            threshold_rule({j: decide(logits[j]) for j in range(s, e) if x[j] == mask})
        ok, ids, reason = record()
        if ok:
            return dict(ids=ids, finish_reason=reason, forwards=forwards, canvases=tr.canvases)
        first = True
        while True:
            if not any(x[j] == mask for j in range(s, e)) and not (dream and first):
                break
            first = False
            rows = list(range(s, e)) if p["cache"] == "dual" else list(range(s, T))
            logits, _ = canvas.forward(x, rows)
            cands = {}
            for j in range(s, e):
                if x[j] == mask:
                    src = (j - 1 if j > s else j) if dream else j
                    cands[j] = decide(logits[src - s])
            if cands:
                threshold_rule(cands)
            ok, ids, reason = record()
            if ok:
                return dict(ids=ids, finish_reason=reason, forwards=forwards, canvases=tr.canvases)
            if dream and not any(x[j] == mask for j in range(s, e)):
                break
    ok, ids, reason = tr.done(x)
    return dict(ids=ids, finish_reason=reason, forwards=forwards, canvases=tr.canvases)


# ---------------------------------------------------------------- dLLM-Cache (method-specs §6.3)
class DllmCacheCanvas(CachedCanvas):
    """The d2Cache repository's dLLM-Cache port (src/cache/dllm_cache.py): per layer, K/V and the
    attention (after o_proj) and FFN outputs of every canvas row are cached; every row's hidden
    state is residual + cached outputs. Layer 0 always refreshes everything (its input is the
    current embedding); other layers refresh the prompt rows on refresh_prompt, the response
    rows on refresh_response, and otherwise (rho > 0) recompute V of every response row (V cache
    replaced), then Q/K, attention and FFN of the int(G * rho) rows with the lowest cosine
    similarity between new and cached V."""

    def __init__(self, m, T, P):
        super().__init__(m, T)
        self.P = P
        self.attn_out, self.ffn_out = [None] * len(self.layers), [None] * len(self.layers)
        self.first = True

    def forward_step(self, x, refresh_prompt, refresh_response, rho):
        T, P = self.T, self.P
        G = T - P
        h = self.embed(torch.tensor([x]))
        cos, sin = self.rotary(h, torch.arange(T)[None])
        for li, layer in enumerate(self.layers):
            a = layer.self_attn
            rp = self.first or refresh_prompt or li == 0
            rr = self.first or refresh_response or li == 0
            hn = layer.input_layernorm(h)[0]  # [T, hidden]
            rows = list(range(P)) if rp else []
            if rr:
                rows += list(range(P, T))
            elif rho > 0:
                v_new = a.v_proj(hn[P:]).view(G, self.Hkv, self.d)
                v_old = self.V[li][:, P:].transpose(0, 1)  # [G, Hkv, d]
                sim = torch.nn.functional.cosine_similarity(v_new.reshape(G, -1).double(),
                                                            v_old.reshape(G, -1).double(), dim=-1)
                self.V[li][:, P:] = v_new.transpose(0, 1)
                order = sorted(range(G), key=lambda g: (float(sim[g]), g))[: int(G * rho)]
                rows += [P + g for g in sorted(order)]
            if rows:
                rt = torch.tensor(rows)
                hs = hn[rt][None]
                n = len(rows)
                q = a.q_proj(hs).view(1, n, self.H, self.d).transpose(1, 2)
                k = a.k_proj(hs).view(1, n, self.Hkv, self.d).transpose(1, 2)
                v = a.v_proj(hs).view(1, n, self.Hkv, self.d).transpose(1, 2)
                q, k = self.rope_apply(q, k, cos[:, rt], sin[:, rt])
                self.K[li][:, rt] = k[0]
                self.V[li][:, rt] = v[0]
                rep = self.H // self.Hkv
                keys = self.K[li].repeat_interleave(rep, 0)
                vals = self.V[li].repeat_interleave(rep, 0)
                probs = torch.softmax(q[0] @ keys.transpose(1, 2) / math.sqrt(self.d), dim=-1)
                o = a.o_proj((probs @ vals).transpose(0, 1).reshape(1, n, self.H * self.d))[0]
                if self.attn_out[li] is None:
                    self.attn_out[li] = torch.zeros(T, o.shape[-1])
                self.attn_out[li][rt] = o
            h = h + self.attn_out[li][None]
            if rows:
                f = layer.mlp(layer.post_attention_layernorm(h[0][rt][None]))[0]
                if self.ffn_out[li] is None:
                    self.ffn_out[li] = torch.zeros(T, f.shape[-1])
                self.ffn_out[li][rt] = f
            h = h + self.ffn_out[li][None]
        self.first = False
        return self.head(self.norm(h))[0].float()


def dllmcache_generate(m, prompt, p):
    """Vanilla decoding (d2Cache vanilla.py with sigma None: the top-n confidence masks of the
    current block per step, or the threshold rule) over dLLM-Cache forwards; refresh_prompt at
    forward t iff t % K_p == 0, refresh_response iff t % K_r == 0 (dLLM-Cache: (step - 1) % K
    with steps from 1; the first forward computes everything)."""
    P, G, B = len(prompt), p["max_tokens"], p["block_length"]
    steps = p["steps"] or G
    mask = m.mask_id
    shift = 1 if m.family == "dream" else 0
    T = P + G
    nb = G // B
    spb = steps // nb
    thr = f32(p["threshold"]) if p["threshold"] >= 0 else None
    x = list(prompt) + [mask] * G
    tr = Tracker(P, mask, G, p["stop_ids"])
    canvas = DllmCacheCanvas(m, T, P)
    forwards = 0
    for b in range(nb):
        blk = range(P + b * B, P + (b + 1) * B)
        counts = transfer_counts(B, spb)
        for i in range(spb):
            if not any(x[j] == mask for j in blk):
                break
            logits = canvas.forward_step(x, forwards % p["dlc_kp"] == 0, forwards % p["dlc_kr"] == 0,
                                         f32(p["dlc_rho"]))
            cands = {}
            for j in blk:
                if x[j] == mask:
                    lg = logits[j - shift].double().clone()
                    lg[mask] = NEG_INF
                    pr = torch.softmax(lg, dim=-1)
                    t = int(torch.argmax(pr))
                    cands[j] = (t, f32(pr[t]))
            chosen = [j for j in cands if thr is not None and cands[j][1] >= thr]
            if len(chosen) < counts[i]:
                chosen = sorted(cands, key=lambda j: (-cands[j][1], j))[: counts[i]]
            for j in chosen:
                x[j] = cands[j][0]
            forwards += 1
            tr.canvases.append(x[P:])
            ok, ids, reason = tr.done(x)
            if ok:
                return dict(ids=ids, finish_reason=reason, forwards=forwards, canvases=tr.canvases)
    ok, ids, reason = tr.done(x)
    return dict(ids=ids, finish_reason=reason, forwards=forwards, canvases=tr.canvases)


def generate(m, prompt, p):
    return {"d2cache": d2cache_generate, "fastdllm": fastdllm_generate,
            "dllmcache": dllmcache_generate}[p["strategy"]](m, prompt, p)


# ---------------------------------------------------------------- cases
def params(**kw):
    base = dict(strategy="d2cache", max_tokens=24, block_length=0, steps=0, threshold=-1.0, remasking="",
                confidence="tempered", sub_block_length=0, temperature=0.0, top_k=0, top_p=1.0, seed=0,
                stop_ids=[], cache="", dlc_kp=0, dlc_kr=0, dlc_rho=0.25, d2c_k=4, d2c_sigma=10.0, d2c_p=0.1, d2c_inflate=0, d2c_frozen_conf=False,
                d2c_select_all=False)
    base.update(kw)
    return base


def cases_for(rng):
    prompts = {"short": rng.integers(0, 250, 3).tolist(), "mid": rng.integers(0, 250, 6).tolist(),
               "long": rng.integers(0, 250, 10).tolist()}
    pr = prompts["mid"]
    cases = [(f"paper_k4_{name}", q, params()) for name, q in prompts.items()]
    cases += [
        ("frozen_k4", pr, params(d2c_frozen_conf=True)),
        ("frozen_k4_long", prompts["long"], params(d2c_frozen_conf=True, d2c_sigma=3.0)),
        ("paper_k2_sigma3_p03", pr, params(d2c_k=2, d2c_sigma=3.0, d2c_p=0.3)),
        ("paper_k8_p0", prompts["short"], params(d2c_k=8, d2c_p=0.0)),
        ("paper_semiar_b8", pr, params(block_length=8, d2c_k=3)),
        ("frozen_semiar_b8_inflate", prompts["long"], params(block_length=8, d2c_k=3, d2c_inflate=4,
                                                             d2c_frozen_conf=True)),
        ("paper_steps12_b8", pr, params(block_length=8, steps=12, d2c_k=5)),
        ("threshold_sigma0", pr, params(block_length=8, threshold=0.05, d2c_sigma=0.0)),
        ("paper_k32_default", prompts["long"], params(max_tokens=32, d2c_k=32, d2c_p=0.1)),
        ("select_all_sigma0", pr, params(d2c_select_all=True, d2c_sigma=0.0)),
        ("select_all_sigma10_b8", prompts["short"], params(d2c_select_all=True, block_length=8)),
        ("select_all_threshold", pr, params(d2c_select_all=True, block_length=8, threshold=0.05,
                                            d2c_sigma=0.0)),
    ]
    for cache in ("dual", "prefix"):
        # d2c_* at the engine defaults: they do not apply to fastdllm (the engine refuses others).
        fd = lambda **kw: dict(params(strategy="fastdllm", cache=cache, threshold=0.9, block_length=8,  # noqa: E731
                                      d2c_k=32, d2c_sigma=10.0, d2c_p=0.1), **kw)
        cases += [
            (f"fastdllm_{cache}_t09_b8", pr, fd()),
            (f"fastdllm_{cache}_t03_b4_long", prompts["long"], fd(block_length=4, threshold=0.3)),
            (f"fastdllm_{cache}_t005_b8_short", prompts["short"], fd(threshold=0.05)),
            (f"fastdllm_{cache}_t02_b24", pr, fd(block_length=24, threshold=0.2)),
            (f"fastdllm_{cache}_t1_b1", prompts["short"], fd(max_tokens=6, block_length=1, threshold=1.0)),
        ]
    dc = lambda **kw: dict(params(strategy="dllmcache", block_length=8, d2c_k=32, d2c_sigma=10.0,  # noqa: E731
                                  d2c_p=0.1, dlc_kp=5, dlc_kr=2, dlc_rho=0.25), **kw)
    cases += [
        ("dllmcache_kp5_kr2_b8", pr, dc()),
        ("dllmcache_kp8_kr3_rho05_long", prompts["long"], dc(dlc_kp=8, dlc_kr=3, dlc_rho=0.5)),
        ("dllmcache_kp50_kr7_b24", pr, dc(block_length=24, dlc_kp=50, dlc_kr=7)),
        ("dllmcache_rho0_short", prompts["short"], dc(dlc_kp=4, dlc_kr=3, dlc_rho=0.0)),
        ("dllmcache_steps12_threshold", pr, dc(steps=12, threshold=0.05, dlc_kr=4)),
        ("dllmcache_kr1_equals_vanilla", pr, dc(dlc_kp=1, dlc_kr=1)),
    ]
    return cases


def check_dllmcache_bites(m, cases):
    """Partial refresh must change a trajectory against refreshing every step, and K_r = 1 (every
    step refreshed) must equal vanilla decoding with plain transformers forwards."""
    diff = False
    for name, pr, p in cases:
        if p["strategy"] != "dllmcache" or name.endswith("_stop"):
            continue
        a = generate(m, pr, p)["canvases"]
        full = generate(m, pr, dict(p, dlc_kp=1, dlc_kr=1))["canvases"]
        diff |= a != full
        if p["dlc_kr"] == 1 and p["dlc_kp"] == 1:
            vanilla = d2cache_generate(m, pr, dict(p, strategy="d2cache", d2c_select_all=True, d2c_sigma=0.0))
            assert vanilla["canvases"] == a, name
    assert diff, "dLLM-Cache never differs from full recompute"


def check_fastdllm_cache_bites(m, cases):
    """Dual and prefix caching must decode differently from each other somewhere."""
    seen = {}
    for name, pr, p in cases:
        if p["strategy"] == "fastdllm" and not name.endswith("_stop"):
            key = name.replace("dual", "X").replace("prefix", "X")
            seen.setdefault(key, []).append(generate(m, pr, p)["canvases"])
    assert any(v[0] != v[1] for v in seen.values() if len(v) == 2), "prefix and dual never differ"


def check_knobs_bite(m, cases):
    """The cached path must differ from recomputing everything somewhere (else the cache is not
    exercised), and frozen vs paper confidence must differ in at least one case."""
    diff_cache = diff_frozen = False
    for name, pr, p in cases:
        if p["strategy"] != "d2cache" or p["d2c_select_all"] or name.endswith("_stop"):
            continue
        a = d2cache_generate(m, pr, p)["canvases"]
        diff_cache |= a != d2cache_generate(m, pr, dict(p, d2c_select_all=True))["canvases"]
        diff_frozen |= a != d2cache_generate(m, pr, dict(p, d2c_frozen_conf=not p["d2c_frozen_conf"]))["canvases"]
    assert diff_cache, "no case differs from full recompute"
    assert diff_frozen, "frozen and paper confidences never differ"


def add_stop_cases(m, cases):
    out = []
    for name, pr, p in cases:
        out.append((name, pr, p))
        ids = generate(m, pr, p)["ids"]
        first = {}
        for i, t in enumerate(ids):
            first.setdefault(t, i)
        later = [t for t, i in first.items() if i > 0]
        if later and len(out) % 4 == 1:
            stop = min(later, key=lambda t: (abs(first[t] - len(ids) // 2), t))
            out.append((name + "_stop", pr, dict(p, stop_ids=[stop])))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tests/fixtures/models")
    ap.add_argument("--out", default="tests/fixtures/trajectories")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import transformers
    for model_name in ("llada-tiny", "dream-tiny"):
        m = ReferenceModel(os.path.join(args.models, model_name))
        # The hand-written layer loop is the transformers forward when every row is computed.
        probe = [5, 17, 99, 3] + [m.mask_id] * 8
        got, _ = CachedCanvas(m, len(probe)).forward(probe, list(range(len(probe))))
        want = m.logits(probe, list(range(len(probe))), np.ones((len(probe),) * 2, dtype=bool))
        assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
        rng = np.random.default_rng(9090)
        cases = add_stop_cases(m, cases_for(rng))
        check_knobs_bite(m, cases)
        check_fastdllm_cache_bites(m, cases)
        check_dllmcache_bites(m, cases)
        records = []
        for name, pr, p in cases:
            res = generate(m, pr, p)
            records.append(dict(name=name, prompt=pr, params=p, expected=res))
            print(f"{model_name:11s} {name:28s} P={len(pr):2d} -> {len(res['ids']):2d} ids, "
                  f"{res['forwards']:3d} forwards, {res['finish_reason']}: {res['ids'][:12]}")
        with open(os.path.join(args.out, model_name + "-d2cache.json"), "w") as fh:
            json.dump({"model": model_name, "reference": f"tools/reference_d2cache.py, transformers "
                       f"{transformers.__version__}, torch {torch.__version__}", "cases": records}, fh)


if __name__ == "__main__":
    main()
