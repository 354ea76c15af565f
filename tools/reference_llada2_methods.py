#!/usr/bin/env python3
"""S2D2 and MAGE on LLaDA2.x: reference trajectories on the committed llada2-tiny fixture.

Reads the checkpoint tools/reference_llada2.py wrote (it is not rewritten here) and runs, with that
script's independent PyTorch forward of the published modeling code (model-specs §6.3):

  * S2D2 (method-specs §5) on LLaDA2.0 block diffusion -> trajectories/llada2-tiny-s2d2.json.
    LLaDA2 is position-aligned like SDAR, so the S2D2 loop is tools/reference_s2d2.py's
    position-aligned one (2L verifier over the whole block, left-to-right acceptance, residual
    resampling) with LLaDA2.0's base rule as the fallback: blocks of 32, steps = min(steps,
    gen_length), the step schedule, threshold 0.95 on the sampled token's filtered probability
    (model-specs §6.5); the HF-2.0 sampling quirk samples at T = 1. Stops at EOS as the engine
    does (the answer cut at the first EOS, without spending the rest of its blocks).
    Checked here: with verification off (span_min > B) it is LLaDA2.0 block diffusion, the same
    trajectory as reference_llada2.llada20_engine.
  * S2D2 over LLaDA2.1 token editing -> trajectories/llada2-tiny-s2d2-edit.json (--only-s2d2-edit
    writes just that file): the semantics of the S2D2 reference's LLaDA2 loop (phymhan/S2D2
    LLaDA2/generate_utils.py, generate_ssd_policy): T2T edits from the draft forward, the 2L
    verifier over the whole edited block with every mask draft-filled, the fallback (M2T) only
    when the policy skips, post-mask editing forwards. Checked here: with verification off it is
    LLaDA2.1 token editing, the same trajectory as reference_llada2.llada21_engine.
  * MAGE (method-specs §1), on LLaDA2.0 block diffusion and LLaDA2.1 token editing (a block's set
    also serves its post-mask editing steps), and Quest / SparseD cases -> sparse/llada2-trajectories.json
    and sparse/llada2-forwards.json:
    a prefix-KV-cache forward (the commit forward is sparse, so the cached K/V of later blocks
    depend on the selection and a full recompute would not do), the selection and gathered
    attention of tools/reference_sparse_attention.py (float64) on this forward's q / k — after
    the fused QKV split, the per-head q/k RMSNorm and the partial RoPE — and its schedule (select
    at a block's first forward, attend through the sets until the commit).

    /work/refenv/bin/python tools/reference_llada2_methods.py
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_llada2 as L2  # noqa: E402
import reference_s2d2 as S2  # noqa: E402
import reference_sparse_attention as SA  # noqa: E402
from dllm_rng import uniform  # noqa: E402

NAME = "llada2-tiny"


def load_fixture(model_dir):
    """The committed checkpoint as reference_llada2's forward reads it; checked against the
    fixture's own reference logits so that both scripts describe the same model."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    for key, f in [("vocab_size", "vocab"), ("hidden_size", "hidden"), ("num_hidden_layers", "layers"),
                   ("num_attention_heads", "heads"), ("num_key_value_heads", "kv_heads"),
                   ("head_dim", "head_dim"), ("num_experts", "experts"), ("num_experts_per_tok", "topk")]:
        assert cfg[key] == L2.F[f], f"{key}: the fixture has {cfg[key]}, reference_llada2.py {L2.F[f]}"
    L2.SD = {k: v.float() for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
    cases = json.load(open(os.path.join(model_dir, "cases.json")))["cases"]
    for c in cases:
        got = L2.forward(L2.SD, c["ids"], c["positions"], L2.visibility(c["attention"], c["positions"]))
        want = np.load(os.path.join(model_dir, c["logits"]))
        assert np.abs(got.numpy() - want).max() < 1e-5, "the fixture is not reference_llada2.py's model"


# ---------------------------------------------------------------------------------------- S2D2
class Llada2Logits:
    """The model interface reference_s2d2.sdar_s2d2 calls: logits under an explicit mask."""
    mask_id = L2.MASK_ID

    def logits(self, ids, positions, visible):
        return L2.forward(L2.SD, ids, positions, visible)


def llada2_s2d2(prompt, p):
    """S2D2 over LLaDA2.0 block diffusion; p as the fixture stores it (the engine's knobs)."""
    q = dict(p, steps=min(p["steps"], p["max_tokens"]))  # min(steps, gen_length // minimal_topk)
    if p["hf_quirk"] and not p["temperature"] > 0:
        q["temperature"] = 1.0  # LLaDA2.0's HF sampler has no greedy branch
    assert q["confidence"] == "filtered" and q["remasking"] == "low_confidence_dynamic"
    return S2.sdar_s2d2(Llada2Logits(), prompt, q)


def s2d2_params(**kw):
    s2 = kw.pop("s2d2", {})
    base = dict(strategy="s2d2", max_tokens=40, block_length=32, steps=32, threshold=0.95,
                remasking="low_confidence_dynamic", confidence="filtered", sub_block_length=0,
                temperature=0.0, top_k=0, top_p=1.0, seed=0, stop_ids=[], hf_quirk=False)
    base.update(kw)
    base["s2d2"] = dict(S2.S2D2_DEFAULTS, **s2)
    return base


# Costs c under `score` (static: verify iff K - c >= 0) chosen so that the tiny model verifies
# at some steps and not at others.
ESTIMATORS = [("soft-entropy", dict(entropy_beta=1.0, score_cost=0.685)),
              ("hard-margin", dict(margin_threshold=0.002, score_cost=0.5)),
              ("confidence-power", dict(confidence_power=0.5, score_cost=0.2)),
              ("renyi-2", dict(score_cost=0.0095))]


def s2d2_cases(rng):
    pr = {"short": rng.integers(0, L2.EOS_ID, 5).tolist(), "exact": rng.integers(0, L2.EOS_ID, 32).tolist(),
          "long": rng.integers(0, L2.EOS_ID, 37).tolist(), "b8": rng.integers(0, L2.EOS_ID, 11).tolist()}
    b8 = dict(block_length=8, steps=8, max_tokens=24)
    cases = [
        ("greedy_always", pr["short"], s2d2_params()),
        ("greedy_eos", pr["short"], s2d2_params(stop_ids=[L2.EOS_ID])),
        ("sampled_eos", pr["b8"], s2d2_params(temperature=1.0, seed=12, stop_ids=[L2.EOS_ID])),
        ("greedy_exact_prompt", pr["exact"], s2d2_params(max_tokens=24)),
        ("greedy_long_prompt", pr["long"], s2d2_params(max_tokens=30)),
        ("sampled_t08", pr["short"], s2d2_params(temperature=0.8, seed=11, threshold=0.3)),
        ("hf_quirk", pr["short"], s2d2_params(hf_quirk=True, seed=5, threshold=0.2)),
        ("topk_topp", pr["long"], s2d2_params(temperature=0.9, top_k=40, top_p=0.9, seed=3, max_tokens=24)),
        ("block8_span2", pr["b8"], s2d2_params(**b8, s2d2=dict(span_min=2))),
        ("block8_steps4", pr["b8"], s2d2_params(**dict(b8, steps=4), threshold=0.3)),
        ("block8_hysteresis", pr["b8"], s2d2_params(**b8, s2d2=dict(
            policy="hysteresis", estimator="soft-entropy", score_type="dynamic", score_cost=1.0,
            hysteresis_on=-0.5, hysteresis_off=-1.5))),
        ("block8_bandit", pr["b8"], s2d2_params(**b8, temperature=1.0, seed=8, s2d2=dict(
            policy="bandit", ucb_entropy_bins=1))),
        ("block8_gamma", pr["b8"], s2d2_params(**b8, temperature=1.0, seed=4, s2d2=dict(gamma=0.5))),
        ("block8_cache_ver_draft_ver", pr["b8"], s2d2_params(**b8, temperature=1.0, seed=6, s2d2=dict(
            cache_ver=True, draft_ver=True))),
        # The LLaDA2.1-mini conservative policy of the S2D2 paper (score, tau -5, static, c 4).
        ("paper_conservative", pr["short"], s2d2_params(s2d2=dict(
            policy="score", estimator="soft-entropy", score_type="static", score_cost=4.0,
            score_threshold=-5.0))),
    ]
    for est, kw in ESTIMATORS:
        cases.append((f"block8_score_{est}", pr["b8"], s2d2_params(**b8, s2d2=dict(
            policy="score", estimator=est, score_type="static", score_threshold=0.0, **kw))))
    return cases


def check_s2d2_without_verification_is_block_diffusion(rng):
    """span_min > B never verifies: S2D2 must then be LLaDA2.0 block diffusion, forward for
    forward (the same random stream: draft forward i is block-diffusion forward i)."""
    prompt = rng.integers(0, L2.EOS_ID, 11).tolist()
    for kw in [dict(), dict(block_length=8, steps=4, threshold=0.3, temperature=0.7, seed=9)]:
        p = s2d2_params(**kw, stop_ids=[L2.EOS_ID], s2d2=dict(span_min=1000))
        got = llada2_s2d2(prompt, p)
        want = L2.llada20_engine(prompt, dict(L2.params(**kw), max_tokens=p["max_tokens"]))
        for key in ("ids", "finish_reason", "forwards", "canvases"):
            assert got[key] == want[key], (kw, key, got[key], want[key])
        assert got["verify_calls"] == 0


# ------------------------------------------------------------------- S2D2 over token editing
def verifier_2l_logits(x, lo, B, first_half):
    """The reference's 2L verifier over the WHOLE block (the engine truncates it at the end of the
    span): [block, edited, every mask draft-filled | B masks], rows [[tril, 0], [strict tril, I]]
    after the block-causal prefix. Returns the logits of the B [MASK] rows."""
    ids = x[:lo] + first_half + [L2.MASK_ID] * B
    pos = list(range(lo)) + list(range(lo, lo + B)) * 2
    qv = np.zeros((2 * B, 2 * B), dtype=bool)
    qv[:B, :B] = np.tril(np.ones((B, B), dtype=bool))
    qv[B:, :B] = np.tril(np.ones((B, B), dtype=bool), -1)
    qv[B:, B:] = np.eye(B, dtype=bool)
    return L2.forward(L2.SD, ids, pos, S2.with_queries(S2.prefix_visible(lo, B, False), qv))[lo + B:]


def llada2_s2d2_edit(prompt, p):
    """S2D2 over LLaDA2.1 token editing, the semantics of phymhan/S2D2 LLaDA2/generate_utils.py
    generate_ssd_policy (num_to_transfer = 1), with the engine's bookkeeping (L2.Engine: final
    tokens once a block's editing ends, stop ids, a canvas after every forward) and random
    streams (draft draw of row i: uniform(seed, 0, forward, i); accept / residual draws:
    reference_s2d2.accept_span). Per step:
      draft forward over the block, every non-prompt row drawn;
      T2T: token rows whose draw differs with p > editing_threshold are overwritten (shown in the
           canvas after the draft forward);
      the policy on the first contiguous masked span C (an empty span scores -inf: hysteresis
           switches off);
      verify: the 2L forward, C accepted left to right, the first rejection resampled;
      else the fallback asks for min(1, masks) tokens: the masks above the threshold, else the
           most confident one (M2T);
      the block ends when a step without masks edited nothing, or before a post-mask forward
           beyond max_post_steps; then the commit forward."""
    q = dict(p)
    if p["hf_quirk"] and not p["temperature"] > 0:
        q["temperature"] = 1.0  # the HF-2.0 sampler samples at T = 1
    g = L2.Engine(prompt, q)
    B, s2 = g.B, q["s2d2"]
    router = S2.Router(s2)
    st = dict(accepted=0, rejected=0, verify_calls=0, edits=0, unverified_steps=0)
    first = g.P // B
    if first > 0:
        g.forwards += 1
        g.snapshot(first)
    for b in range(first, g.nblk):
        lo, hi = b * B, (b + 1) * B
        post_steps, unmasked = 0, 0
        while True:
            masked = [i for i in range(lo, hi) if g.x[i] == L2.MASK_ID]
            if not masked:
                post_steps += 1
                if post_steps > q["max_post_steps"]:
                    break
            rows = list(range(max(lo, g.P), hi))
            logits = g.logits_block(b)
            draws = {i: L2.sample(logits[i - lo], q, uniform(q["seed"], 0, g.forwards, i)) for i in rows}
            g.forwards += 1
            edits = [i for i in rows if g.x[i] != L2.MASK_ID and draws[i][1] > q["editing_threshold"]
                     and draws[i][0] != g.x[i]]
            for i in edits:
                g.x[i] = draws[i][0]
            st["edits"] += len(edits)
            span = S2.first_span(masked)
            decoded = 0
            if not span:
                router.on, router.pending = False, None  # the reference's score -inf
                verify = False
            else:
                probs = {i: S2.probs_of(logits[i - lo], q["temperature"], q["top_k"], q["top_p"], L2.MASK_ID)
                         for i in masked}
                n_hi = sum(1 for i in masked if draws[i][1] > q["threshold"])
                verify = router.decide([probs[i] for i in span], [float(probs[i][draws[i][0]]) for i in span],
                                       n_hi, B, unmasked)
            if verify:
                g.snapshot(b)  # after the draft forward: its edits, no mask decided yet
                first_half = [draws[i][0] if g.x[i] == L2.MASK_ID else g.x[i] for i in range(lo, hi)]
                vlog = verifier_2l_logits(g.x, lo, B, first_half)
                verify_index = g.forwards
                g.forwards += 1
                st["verify_calls"] += 1
                drafts = {i - lo: (draws[i][0], None, None, probs[i]) for i in span}
                decoded = S2.accept_span([i - lo for i in span], drafts, [vlog[i - lo] for i in span], g.x, lo,
                                         dict(q, mask_id=L2.MASK_ID), verify_index, st)
            elif masked:
                st["unverified_steps"] += 1
                high = [i for i in masked if draws[i][1] > q["threshold"]]
                chosen = high if high else sorted(masked, key=lambda i: (-draws[i][1], i))[:1]
                for i in chosen:
                    g.x[i] = draws[i][0]
                decoded = len(chosen)
            unmasked += decoded
            router.record(decoded)
            g.snapshot(b)
            if not masked and not edits:
                break
        g.final_len = hi - g.P
        if g.done()[0]:
            break
        g.forwards += 1  # commit forward
        g.snapshot(b + 1)
    return dict(g.result(), **st)


def s2d2_edit_params(**kw):
    """The fixture's knobs: --strategy s2d2 --edit-mode with explicit thresholds (no step
    schedule, no remasking rule: their options are refused)."""
    p = s2d2_params(**dict(dict(edit_mode="s", threshold=0.2, editing_threshold=0.05, max_post_steps=16,
                                stop_ids=[L2.EOS_ID]), **kw))
    p.update(steps=0, remasking="")
    return p


def s2d2_edit_cases(rng):
    pr = {"short": rng.integers(0, L2.EOS_ID, 5).tolist(), "exact": rng.integers(0, L2.EOS_ID, 32).tolist(),
          "long": rng.integers(0, L2.EOS_ID, 37).tolist(), "b8": rng.integers(0, L2.EOS_ID, 11).tolist()}
    b8 = dict(block_length=8, max_tokens=24)
    return [
        ("greedy_always", pr["short"], s2d2_edit_params()),
        ("greedy_no_stop", pr["short"], s2d2_edit_params(stop_ids=[])),
        ("sampled", pr["b8"], s2d2_edit_params(temperature=1.0, seed=12, stop_ids=[])),
        ("sampled_eos", pr["b8"], s2d2_edit_params(temperature=1.0, seed=12)),
        ("sampled_t08_block8", pr["b8"], s2d2_edit_params(**b8, temperature=0.8, seed=11, stop_ids=[])),
        ("greedy_exact_prompt", pr["exact"], s2d2_edit_params(max_tokens=24)),
        ("greedy_long_prompt", pr["long"], s2d2_edit_params(max_tokens=30)),
        ("hf_quirk", pr["short"], s2d2_edit_params(hf_quirk=True, seed=5)),
        ("topk_topp", pr["long"], s2d2_edit_params(temperature=0.9, top_k=40, top_p=0.9, seed=3, max_tokens=24)),
        ("mode_q", pr["b8"], s2d2_edit_params(**b8, edit_mode="q", threshold=0.3, editing_threshold=0.1)),
        ("post_steps_0", pr["b8"], s2d2_edit_params(**b8, max_post_steps=0)),
        ("post_steps_2", pr["short"], s2d2_edit_params(max_post_steps=2, editing_threshold=0.0)),
        ("block8_span2", pr["b8"], s2d2_edit_params(**b8, s2d2=dict(span_min=2))),
        ("block8_gamma", pr["b8"], s2d2_edit_params(**b8, temperature=1.0, seed=4, stop_ids=[],
                                                    s2d2=dict(gamma=0.5))),
        # Scores K in [0.57, 0.68] here: the state flips, and post-mask steps switch it off.
        ("block8_hysteresis", pr["b8"], s2d2_edit_params(**b8, stop_ids=[], s2d2=dict(
            policy="hysteresis", estimator="soft-entropy", score_type="static", score_cost=0.0,
            hysteresis_on=0.675, hysteresis_off=0.65))),
        # Hysteresis ON at a block's end, its post-mask forwards (empty span, score -inf) switch
        # it off before the next block: without that reset this case verifies 17 times, not 5.
        ("block8_hysteresis_post_mask", pr["short"], s2d2_edit_params(**b8, stop_ids=[], threshold=0.05, s2d2=dict(
            policy="hysteresis", estimator="soft-entropy", score_type="dynamic", score_cost=0.1,
            hysteresis_on=0.5, hysteresis_off=0.0))),
        ("block8_bandit", pr["b8"], s2d2_edit_params(**b8, temperature=1.0, seed=8, s2d2=dict(
            policy="bandit", ucb_entropy_bins=1))),
        # The LLaDA2.1-mini conservative policy of the S2D2 paper (score, tau -5, static, c 4).
        ("paper_conservative", pr["short"], s2d2_edit_params(s2d2=dict(
            policy="score", estimator="soft-entropy", score_type="static", score_cost=4.0,
            score_threshold=-5.0))),
        ("block8_score_hard_margin", pr["b8"], s2d2_edit_params(**b8, s2d2=dict(
            policy="score", estimator="hard-margin", margin_threshold=0.002, score_type="static",
            score_cost=0.5))),
    ]


def check_s2d2_edit_without_verification_is_editing(rng):
    """span_min > B never verifies: S2D2 over token editing must then be --strategy edit,
    forward for forward (draft forward i is editing forward i)."""
    prompt = rng.integers(0, L2.EOS_ID, 11).tolist()
    for kw in [dict(), dict(block_length=8, temperature=0.7, seed=9), dict(hf_quirk=True, seed=3)]:
        p = s2d2_edit_params(**kw, s2d2=dict(span_min=1000))
        got = llada2_s2d2_edit(prompt, p)
        want = L2.llada21_engine(prompt, dict(L2.params(strategy="edit", **kw), max_tokens=p["max_tokens"],
                                              threshold=p["threshold"], editing_threshold=p["editing_threshold"]))
        for key in ("ids", "finish_reason", "forwards", "canvases"):
            assert got[key] == want[key], (kw, key, got[key], want[key])
        assert got["verify_calls"] == 0


def write_s2d2_edit(out_dir):
    rng = np.random.default_rng(2121)  # its own stream: the other fixtures stay as they are
    check_s2d2_edit_without_verification_is_editing(rng)
    records, total = [], dict(edits=0, verify_calls=0, accepted=0, rejected=0, unverified_steps=0)
    for name, pr, p in s2d2_edit_cases(rng):
        res = llada2_s2d2_edit(pr, p)
        records.append(dict(name=name, prompt=pr, params=p, expected=res))
        for k in total:
            total[k] += res[k]
        print(f"s2d2-edit {name:26s} P={len(pr):2d} -> {len(res['ids']):2d} ids {res['finish_reason']:6s} "
              f"{res['forwards']:3d} fwd {res['edits']:2d} edits {res['verify_calls']:2d} verify "
              f"{res['accepted']:2d} acc {res['rejected']:2d} rej {res['unverified_steps']:2d} unverified")
    print("s2d2-edit totals:", total)
    assert all(v > 0 for v in total.values()), "the fixture must edit, accept, reject and skip"
    with open(os.path.join(out_dir, NAME + "-s2d2-edit.json"), "w") as fh:
        json.dump({"model": NAME, "reference": f"tools/reference_llada2_methods.py, torch {torch.__version__}",
                   "cases": records}, fh)


# ---------------------------------------------------------------------------------------- MAGE
class CachedLlada2:
    """The LLaDA2 forward with a prefix KV cache (K after q/k-norm and partial RoPE) and
    per-(layer, KV head) sparse attention hooks; fp32 like reference_llada2.forward except the
    attention itself (float64, reference_sparse_attention)."""

    def __init__(self, block):
        self.block = block
        self.reset()

    def reset(self):
        self.K = [np.zeros((0, L2.F["kv_heads"], L2.F["head_dim"])) for _ in range(L2.F["layers"])]
        self.V = [np.zeros((0, L2.F["kv_heads"], L2.F["head_dim"])) for _ in range(L2.F["layers"])]
        self.pos = []
        self.sets = {}

    def qkv(self, i, x, positions):
        H, KV, D = L2.F["heads"], L2.F["kv_heads"], L2.F["head_dim"]
        rot = int(D * L2.F["partial"])
        sd, p, n = L2.SD, f"model.layers.{i}.", x.shape[0]
        inv = 1.0 / (L2.F["theta"] ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
        freqs = torch.tensor(positions, dtype=torch.float32)[:, None] * inv[None, :]
        emb = torch.cat([freqs, freqs], -1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
        h = L2.rms(x, sd[p + "input_layernorm.weight"])
        qkv = (h @ sd[p + "attention.query_key_value.weight"].T).view(n, H + 2 * KV, D)
        q, k, v = qkv[:, :H], qkv[:, H:H + KV], qkv[:, H + KV:]
        q, k = L2.rms(q, sd[p + "attention.query_layernorm.weight"]), L2.rms(k, sd[p + "attention.key_layernorm.weight"])
        q = torch.cat([q[..., :rot] * cos + L2.rotate_half(q[..., :rot]) * sin, q[..., rot:]], -1)
        k = torch.cat([k[..., :rot] * cos + L2.rotate_half(k[..., :rot]) * sin, k[..., rot:]], -1)
        return q.double().numpy(), k.double().numpy(), v.double().numpy()

    def forward(self, tokens, positions, append, sparse=None):
        """Logits of `tokens` after the cached prefix, block-causal; (logits, {(layer, head):
        slots or None}) with sparse = dict(select, attend, k, exact_layers, select_queries,
        page_size) as reference_sparse_attention's schedule gives it."""
        H, KV, D = L2.F["heads"], L2.F["kv_heads"], L2.F["head_dim"]
        G, sd, n, N = H // KV, L2.SD, len(tokens), len(self.pos)
        x = sd["model.word_embeddings.weight"][torch.tensor(tokens)]
        blk = np.asarray(self.pos + list(positions)) // self.block
        vis = blk[None, :] <= (np.asarray(positions) // self.block)[:, None]
        chosen = {}
        for i in range(L2.F["layers"]):
            p = f"model.layers.{i}."
            q, k, v = self.qkv(i, x, positions)
            Kall, Vall = np.concatenate([self.K[i], k], 0), np.concatenate([self.V[i], v], 0)
            if append:
                self.K[i], self.V[i] = Kall, Vall
            att = np.zeros((n, H, D))
            sparse_layer = sparse is not None and i >= sparse["exact_layers"]
            for hk in range(KV):
                qh, kh, vh = q[:, hk * G:(hk + 1) * G], Kall[:, hk], Vall[:, hk]
                cols = list(range(N + n))
                if sparse_layer and sparse.get("select"):
                    sel, _ = SA.select(sparse["select"], qh, kh, N, vis, sparse["k"], sparse["page_size"],
                                       sparse["select_queries"])
                    chosen[(i, hk)] = sel
                    self.sets[(i, hk)] = (sel, N)
                if sparse_layer and sparse.get("attend"):
                    sel, sel_prefix = self.sets[(i, hk)]
                    cols = SA.key_columns(sel, sel_prefix, N, N + n)
                att[:, hk * G:(hk + 1) * G] = SA.attend(qh, kh, vh, vis, cols)
            o = torch.from_numpy(att.reshape(n, H * D)).float()
            x = x + o @ sd[p + "attention.dense.weight"].T
            h = L2.rms(x, sd[p + "post_attention_layernorm.weight"])
            if i < L2.F["first_dense"]:
                x = x + L2.swiglu(sd, p + "mlp.", h)
                continue
            idx, w = L2.route(h, sd[p + "mlp.gate.weight"], sd[p + "mlp.gate.expert_bias"], None)
            x = x + L2.moe_dispatch(sd, p, h, idx, w) + L2.swiglu(sd, p + "mlp.shared_experts.", h)
        if append:
            self.pos += list(positions)
        return L2.rms(x, sd["model.norm.weight"]) @ sd["lm_head.weight"].T, chosen


def llada20_sparse(m, prompt, p, sp):
    """LLaDA2.0 block diffusion (reference_llada2.llada20_engine's rules: step schedule,
    threshold on the filtered probability, stop at EOS) over the KV cache with sparse attention:
    exact prefill, the block's denoising forwards and its commit through the schedule."""
    g = L2.Engine(prompt, p)
    B, thr = g.B, p["threshold"]
    steps = min(p["steps"], p["max_tokens"])
    sched = L2.transfer_schedule(B, steps)
    m.reset()
    m.block = B
    schedule = SA.Schedule(sp, steps * (g.nblk - g.P // B))
    first = g.P // B
    if first > 0:
        m.forward(g.x[:first * B], list(range(first * B)), append=True)
        g.forwards += 1
        g.snapshot(first)
    for b in range(first, g.nblk):
        lo, hi = b * B, (b + 1) * B
        for step in range(steps + 1):
            masked = [i for i in range(lo, hi) if g.x[i] == L2.MASK_ID]
            if not masked:
                m.forward(g.x[lo:hi], list(range(lo, hi)), append=True, sparse=schedule.step(b, False))
                g.forwards += 1
                g.snapshot(b + 1)
                break
            logits, _ = m.forward(g.x[lo:hi], list(range(lo, hi)), append=False, sparse=schedule.step(b, True))
            draws = {i: L2.sample(logits[i - lo], p, uniform(p["seed"], 0, g.forwards, i)) for i in masked}
            g.forwards += 1
            k = min(sched[min(step, steps - 1)], len(masked))
            high = [i for i in masked if draws[i][1] > thr]
            for i in (high if len(high) >= k else sorted(masked, key=lambda i: (-draws[i][1], i))[:k]):
                g.x[i] = draws[i][0]
            while g.P + g.final_len < len(g.x) and g.x[g.P + g.final_len] != L2.MASK_ID:
                g.final_len += 1
            g.snapshot(b)
            if g.done()[0]:
                return g.result()
    return g.result()


def llada21_sparse(m, prompt, p, sp):
    """LLaDA2.1 token editing (reference_llada2.llada21_engine's rules: M2T above the threshold
    else the most confident mask, T2T above the editing threshold, post-mask steps while they
    edit) over the KV cache with sparse attention: a block's MAGE set serves its post-mask
    editing steps and its commit too."""
    g = L2.Engine(prompt, p)
    B = g.B
    m.reset()
    m.block = B
    schedule = SA.Schedule(sp, 0)
    first = g.P // B
    if first > 0:
        m.forward(g.x[:first * B], list(range(first * B)), append=True)
        g.forwards += 1
        g.snapshot(first)
    for b in range(first, g.nblk):
        lo, hi = b * B, (b + 1) * B
        post_steps = 0
        while True:
            masked = [i for i in range(lo, hi) if g.x[i] == L2.MASK_ID]
            if not masked:
                post_steps += 1
                if post_steps > p["max_post_steps"]:
                    break
            rows = list(range(max(lo, g.P), hi))
            logits, _ = m.forward(g.x[lo:hi], list(range(lo, hi)), append=False, sparse=schedule.step(b, True))
            draws = {i: L2.sample(logits[i - lo], p, uniform(p["seed"], 0, g.forwards, i)) for i in rows}
            g.forwards += 1
            chosen = []
            if masked:
                high = [i for i in masked if draws[i][1] > p["threshold"]]
                chosen = high if high else sorted(masked, key=lambda i: (-draws[i][1], i))[:1]
            edits = [i for i in rows if g.x[i] != L2.MASK_ID and draws[i][1] > p["editing_threshold"]
                     and draws[i][0] != g.x[i]]
            for i in chosen + edits:
                g.x[i] = draws[i][0]
            g.snapshot(b)
            if not masked and not edits:
                break
        g.final_len = hi - g.P
        if g.done()[0]:
            return g.result()
        m.forward(g.x[lo:hi], list(range(lo, hi)), append=True, sparse=schedule.step(b, False))
        g.forwards += 1
        g.snapshot(b + 1)
    return g.result()


def mage_cases(rng):
    """Prompts long enough that the prefix exceeds k; k small enough that the selection changes
    the tokens."""
    pr = {"p70": rng.integers(0, L2.EOS_ID, 70).tolist(), "p45": rng.integers(0, L2.EOS_ID, 45).tolist(),
          "p64": rng.integers(0, L2.EOS_ID, 64).tolist()}
    mage = lambda **kw: dict(dict(method="mage", k=12, exact_layers=1, page_size=16, select_queries=0,
                                  dense_fraction=0.2), **kw)
    lp = lambda **kw: L2.params(**dict(dict(stop_ids=[]), **kw))
    return [
        ("block32_k12", pr["p70"], lp(max_tokens=40, threshold=0.3), mage()),
        ("block32_k16_q4_eos", pr["p64"], lp(max_tokens=40, temperature=0.9, seed=21, threshold=0.3,
                                             stop_ids=[L2.EOS_ID]),
         mage(k=16, select_queries=4)),
        ("block8_k8_all_layers", pr["p45"], lp(block_length=8, steps=8, max_tokens=24, threshold=0.3),
         mage(k=8, exact_layers=0)),
        ("block8_steps4_sampled", pr["p45"], lp(block_length=8, steps=4, max_tokens=24, temperature=0.8,
                                                 seed=13, threshold=0.3), mage(k=10)),
        ("block8_hf_quirk", pr["p70"], lp(block_length=8, steps=8, max_tokens=20, hf_quirk=True, seed=2),
         mage(k=20, select_queries=3)),
        ("block32_k_covers_prefix", pr["p45"], lp(max_tokens=24, threshold=0.3), mage(k=4096)),
        ("block8_quest", pr["p64"], lp(block_length=8, steps=8, max_tokens=20, threshold=0.3),
         mage(method="quest", k=16, page_size=4)),
        ("block8_sparsed", pr["p70"], lp(block_length=8, steps=8, max_tokens=24, threshold=0.3),
         mage(method="sparsed", k=12, dense_fraction=0.2)),
        ("edit_block8_k8", pr["p45"], lp(strategy="edit", block_length=8, max_tokens=24, threshold=0.1,
                                         editing_threshold=0.05), mage(k=8)),
        ("edit_block32_k16_post2", pr["p70"], lp(strategy="edit", max_tokens=30, threshold=0.05,
                                                 editing_threshold=0.0, max_post_steps=2), mage(k=16)),
        ("edit_block8_quest", pr["p64"], lp(strategy="edit", block_length=8, max_tokens=20, threshold=0.2,
                                            editing_threshold=0.1, temperature=0.8, seed=31),
         mage(method="quest", k=16, page_size=4)),
    ]


def forward_cases(rng, out_dir):
    """Prefill 64 tokens, one all-[MASK] block selecting (exact attention, sets stored), then a
    later version of the block attending through the sets: the sets of every (layer, KV head)
    and both forwards' logits."""
    m = CachedLlada2(32)
    prompt = rng.integers(0, L2.EOS_ID, 64).tolist()
    cases = []
    for name, sp in [("mage_k12", dict(k=12, exact_layers=0, page_size=16, select_queries=0)),
                     ("mage_k20_q5", dict(k=20, exact_layers=1, page_size=16, select_queries=5))]:
        m.reset()
        m.forward(prompt, list(range(64)), append=True)
        block, pos = [L2.MASK_ID] * 32, list(range(64, 96))
        logits1, sel = m.forward(block, pos, append=False, sparse=dict(sp, select="mage"))
        later = [int(t) for t in rng.integers(0, L2.EOS_ID, 32)]
        later[3] = later[17] = L2.MASK_ID
        logits2, _ = m.forward(later, pos, append=False, sparse=dict(sp, attend=True))
        exact2, _ = m.forward(later, pos, append=False)
        assert float((logits2 - exact2).abs().max()) > 1e-3, "the selection must matter"
        np.save(os.path.join(out_dir, f"llada2_{name}_select.npy"), logits1.numpy().astype(np.float32))
        np.save(os.path.join(out_dir, f"llada2_{name}_attend.npy"), logits2.numpy().astype(np.float32))
        sets = [[sel.get((l, h)) for h in range(L2.F["kv_heads"])] for l in range(L2.F["layers"])]
        cases.append(dict(method="mage", params=sp, prompt=prompt, block=block, later=later, positions=pos,
                          sets=sets, select_logits=f"llada2_{name}_select.npy",
                          attend_logits=f"llada2_{name}_attend.npy"))
    json.dump(dict(model=NAME, block_length=32, reference="tools/reference_llada2_methods.py", cases=cases),
              open(os.path.join(out_dir, "llada2-forwards.json"), "w"))


# ---------------------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tests/fixtures/models")
    ap.add_argument("--trajectory-out", default="tests/fixtures/trajectories")
    ap.add_argument("--sparse-out", default="tests/fixtures/sparse")
    ap.add_argument("--only-s2d2-edit", action="store_true",
                    help="write trajectories/llada2-tiny-s2d2-edit.json only")
    args = ap.parse_args()
    load_fixture(os.path.join(args.models, NAME))
    write_s2d2_edit(args.trajectory_out)
    if args.only_s2d2_edit:
        return
    rng = np.random.default_rng(2222)
    check_s2d2_without_verification_is_block_diffusion(rng)

    records = []
    for name, pr, p in s2d2_cases(rng):
        res = llada2_s2d2(pr, p)
        records.append(dict(name=name, prompt=pr, params=p, expected=res))
        print(f"s2d2 {name:34s} P={len(pr):2d} -> {len(res['ids']):2d} ids {res['finish_reason']:6s} "
              f"{res['forwards']:3d} fwd {res['verify_calls']:2d} verify {res['accepted']:2d} acc "
              f"{res['rejected']:2d} rej")
    with open(os.path.join(args.trajectory_out, NAME + "-s2d2.json"), "w") as fh:
        json.dump({"model": NAME, "reference": f"tools/reference_llada2_methods.py, torch {torch.__version__}",
                   "cases": records}, fh)

    m = CachedLlada2(32)
    records = []
    for name, pr, p, sp in mage_cases(rng):
        edit = p["strategy"] == "edit"
        res = (llada21_sparse if edit else llada20_sparse)(m, pr, p, sp)
        exact = (L2.llada21_engine if edit else L2.llada20_engine)(pr, p)
        records.append(dict(name=name, prompt=pr, params=p, sparse=sp, expected=res,
                            differs_from_exact=res["ids"] != exact["ids"]))
        print(f"{sp['method']:7s} {name:30s} P={len(pr):2d} -> {len(res['ids']):2d} ids {res['finish_reason']:6s} "
              f"{res['forwards']:3d} fwd, differs from exact: {res['ids'] != exact['ids']}")
        if sp["k"] >= len(pr) + p["max_tokens"]:
            assert res == exact, "k covering every prefix must be exact attention"
    json.dump(dict(model=NAME, reference="tools/reference_llada2_methods.py (attention in float64)",
                   cases=records), open(os.path.join(args.sparse_out, "llada2-trajectories.json"), "w"))
    forward_cases(rng, args.sparse_out)


if __name__ == "__main__":
    main()
