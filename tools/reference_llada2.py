#!/usr/bin/env python3
"""LLaDA2.x (llada2_moe) parity fixtures from an independent PyTorch implementation.

Writes a tiny random checkpoint in the exact on-disk format of the published LLaDA2.0-mini /
LLaDA2.1-mini checkpoints (config.json keys, tensor names, fused query_key_value, MoE tensors,
tokenizer.json + tokenizer_config.json with a Ling role-format chat template), reference logits,
and reference decoding trajectories for LLaDA2.0 block diffusion and LLaDA2.1 token editing:

    /work/refenv/bin/python tools/reference_llada2.py \
        --model-out tests/fixtures/models --trajectory-out tests/fixtures/trajectories

Only torch (CPU), numpy and safetensors are needed (no transformers: the published modeling file
is remote code). The forward below is our own implementation of the semantics of the published
modeling_llada2_moe.py (model-specs §6.3), fp32 on bf16-rounded weights:
  fused QKV -> view(n, H + 2 KV, D) -> per-head RMSNorm of q and k -> NeoX RoPE on the first
  head_dim * partial_rotary_factor dims -> attention with an additive mask -> dense;
  FFN: dense SwiGLU in the first first_k_dense_replace layers, else LLaDA2MoeGate (sigmoid,
  expert_bias for the selection only, group-limited top-k, weights = normalised un-biased scores
  x routed_scaling_factor) over the routed experts + the shared experts.
The MoE is computed twice — token by token, and by the expert-sorted dispatch of the published
moe_infer — and both must agree. torch.topk leaves ties unspecified; here (and in the engine) ties
break toward the lower group / expert index. Router logits accumulate in float64 and are rounded
to fp32 so that duplicated router rows tie exactly; the checkpoint is built so that routing ties,
group masking and the expert bias all change which experts run (asserted below), and so that
every other routing decision has a margin far above fp32 rounding.

Trajectories follow the engine's loop structure (prefix KV: a prefill forward of floor(P/B)*B
prompt tokens, the block's denoising forwards, one commit forward per finished block), computed
here by full recompute under the block-causal mask, which is the same math. Greedy cases are also
run through literal ports of the published generate() loops (LLaDA2.0 HF, LLaDA2.1 CLI copy, see
model-specs §6.5/6.6), which must return the same ids. Sampling draws come from
tools/dllm_rng.py (the engine's counter-based RNG).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dllm_rng import uniform  # noqa: E402

torch.set_grad_enabled(False)
torch.set_num_threads(1)  # tiny shapes: threads only add overhead
NEG_INF = float("-inf")

NAME = "llada2-tiny"
F = dict(vocab=300, hidden=32, layers=3, heads=4, kv_heads=2, head_dim=16, partial=0.5, inter=64,
         experts=16, topk=4, shared=1, moe_inter=16, first_dense=1, n_group=4, topk_group=2,
         scaling=2.5, theta=600000.0, eps=1e-6)
# Special tokens (the real checkpoint: eos 156892, mask 156895; strings of the fixture's own).
EOS_ID, ROLE_OPEN_ID, ROLE_CLOSE_ID, ROLE_END_ID, MASK_ID = 290, 291, 292, 293, 295
SPECIAL = {EOS_ID: "<|endoftext|>", ROLE_OPEN_ID: "<role>", ROLE_CLOSE_ID: "</role>",
           ROLE_END_ID: "<|role_end|>", MASK_ID: "<|mask|>"}
# Router rows that tie exactly: (copy, original). 1 <- 0 inside group 0; 6 <- 2 across groups 1/0.
DUPLICATE_ROUTER_ROWS = [(1, 0), (6, 2), (13, 9)]


# ------------------------------------------------------------------------------------ tokenizer
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tokenizer_files():
    """A byte-level BPE tokenizer.json (256 byte tokens, a few merges, special tokens) and a
    tokenizer_config.json with a Ling role-format chat template (model-specs §6.4)."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = []
    for a, b in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"),
                 ("Ġ", "s"), ("r", "e"), ("a", "t"), ("e", "n"), ("Ġ", "w"), ("o", "r"), ("i", "s"),
                 ("Ġ", "c"), ("e", "s"), ("a", "n"), ("Ġ", "b"), ("Ġ", "1"), ("Ġ", "2")]:
        merges.append([a, b])
        vocab[a + b] = len(vocab)
    assert len(vocab) <= EOS_ID
    added = [dict(id=i, content=s, single_word=False, lstrip=False, rstrip=False, normalized=False,
                  special=True) for i, s in sorted(SPECIAL.items())]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                                   "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": merges},
    }
    # Ling role format (model-specs §6.4), the same text as the engine's built-in llada2_moe template:
    # a default system turn "detailed thinking off" unless the messages start with a system turn.
    template = (
        "{%- if messages[0]['role'] == 'system' -%}"
        "{%- set system_text = messages[0]['content'] -%}{%- set turns = messages[1:] -%}"
        "{%- else -%}"
        "{%- set system_text = 'detailed thinking ' + ('on' if enable_thinking is defined and enable_thinking else 'off') -%}"
        "{%- set turns = messages -%}"
        "{%- endif -%}"
        "{{- '<role>SYSTEM</role>' + system_text + '<|role_end|>' -}}"
        "{%- for message in turns -%}"
        "{%- if message['role'] == 'user' -%}{{- '<role>HUMAN</role>' + message['content'] + '<|role_end|>' -}}"
        "{%- elif message['role'] == 'assistant' -%}{{- '<role>ASSISTANT</role>' + message['content'] + '<|role_end|>' -}}"
        "{%- else -%}{{- '<role>SYSTEM</role>' + message['content'] + '<|role_end|>' -}}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<role>ASSISTANT</role>' -}}{%- endif -%}")
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False, "add_eos_token": False,
        "bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "mask_token": "<|mask|>", "model_max_length": 32768, "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {str(i): dict(content=s, lstrip=False, normalized=False, rstrip=False,
                                              single_word=False, special=True) for i, s in SPECIAL.items()},
        "chat_template": template,
    }
    return tok, cfg


# ---------------------------------------------------------------------------------- checkpoint
def config_json():
    """config.json with the keys of the published LLaDA2.0-mini config (model-specs §6.1)."""
    return {
        "architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe",
        "auto_map": {"AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
                     "AutoModel": "modeling_llada2_moe.LLaDA2MoeModel",
                     "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM"},
        "vocab_size": F["vocab"], "hidden_size": F["hidden"], "intermediate_size": F["inter"],
        "num_hidden_layers": F["layers"], "num_attention_heads": F["heads"],
        "num_key_value_heads": F["kv_heads"], "head_dim": F["head_dim"], "hidden_act": "silu",
        "max_position_embeddings": 32768, "rms_norm_eps": F["eps"], "rope_theta": F["theta"],
        "rope_scaling": None, "partial_rotary_factor": F["partial"], "use_qk_norm": True,
        "use_qkv_bias": False, "use_bias": False, "norm_head": False, "tie_word_embeddings": False,
        "num_experts": F["experts"], "num_experts_per_tok": F["topk"],
        "num_shared_experts": F["shared"], "moe_intermediate_size": F["moe_inter"],
        "first_k_dense_replace": F["first_dense"], "n_group": F["n_group"],
        "topk_group": F["topk_group"], "score_function": "sigmoid",
        "moe_router_enable_expert_bias": True, "routed_scaling_factor": F["scaling"],
        "norm_topk_prob": True, "num_nextn_predict_layers": 0, "output_router_logits": False,
        "pad_token_id": EOS_ID, "eos_token_id": EOS_ID, "initializer_range": 0.02,
        # Not in the published config (the engine then uses generate()'s mask_id 156895, outside
        # this tiny vocabulary): an extra key, which transformers' config classes accept.
        "mask_token_id": MASK_ID,
        "attention_dropout": 0.0, "use_cache": False, "torch_dtype": "bfloat16",
    }


def random_state_dict(gen):
    """Random weights in the published tensor names; bf16-rounded (expert_bias stays fp32)."""
    H, D, KV, h = F["heads"], F["head_dim"], F["kv_heads"], F["hidden"]
    sd = {}

    def w(name, shape, scale, center=0.0):
        v = center + scale * torch.randn(shape, generator=gen)
        sd[name] = v.to(torch.bfloat16).to(torch.float32)

    w("model.word_embeddings.weight", (F["vocab"], h), 1.0)
    w("model.norm.weight", (h,), 0.2, 1.0)
    w("lm_head.weight", (F["vocab"], h), 1.0 / math.sqrt(h))
    for i in range(F["layers"]):
        p = f"model.layers.{i}."
        w(p + "input_layernorm.weight", (h,), 0.2, 1.0)
        w(p + "post_attention_layernorm.weight", (h,), 0.2, 1.0)
        w(p + "attention.query_key_value.weight", ((H + 2 * KV) * D, h), 1.0 / math.sqrt(h))
        w(p + "attention.query_layernorm.weight", (D,), 0.2, 1.0)
        w(p + "attention.key_layernorm.weight", (D,), 0.2, 1.0)
        w(p + "attention.dense.weight", (h, H * D), 1.0 / math.sqrt(H * D))
        if i < F["first_dense"]:
            w(p + "mlp.gate_proj.weight", (F["inter"], h), 1.0 / math.sqrt(h))
            w(p + "mlp.up_proj.weight", (F["inter"], h), 1.0 / math.sqrt(h))
            w(p + "mlp.down_proj.weight", (h, F["inter"]), 1.0 / math.sqrt(F["inter"]))
            continue
        # Router logits of order 1 (sigmoid scores spread over ~0.2..0.8), a bias of the same order
        # as their differences, so the bias changes the selection without deciding it alone.
        w(p + "mlp.gate.weight", (F["experts"], h), 1.5 / math.sqrt(h))
        router = sd[p + "mlp.gate.weight"]
        bias = 0.15 * torch.randn(F["experts"], generator=gen)
        for copy, orig in DUPLICATE_ROUTER_ROWS:
            router[copy] = router[orig]
            bias[copy] = bias[orig]
        sd[p + "mlp.gate.expert_bias"] = bias.to(torch.float32)
        for e in range(F["experts"]):
            q = f"{p}mlp.experts.{e}."
            w(q + "gate_proj.weight", (F["moe_inter"], h), 1.0 / math.sqrt(h))
            w(q + "up_proj.weight", (F["moe_inter"], h), 1.0 / math.sqrt(h))
            w(q + "down_proj.weight", (h, F["moe_inter"]), 1.0 / math.sqrt(F["moe_inter"]))
        si = F["moe_inter"] * F["shared"]
        w(p + "mlp.shared_experts.gate_proj.weight", (si, h), 1.0 / math.sqrt(h))
        w(p + "mlp.shared_experts.up_proj.weight", (si, h), 1.0 / math.sqrt(h))
        w(p + "mlp.shared_experts.down_proj.weight", (h, si), 1.0 / math.sqrt(si))
    return sd


# ------------------------------------------------------------------------------------- forward
# When set, activations are rounded to bf16 where the CUDA backend stores them (normed rows, q|k|v,
# attention output, SwiGLU activations): the fixture's routing must not change under that, so
# that the GPU parity test sees no routing flip (only exact ties, which stay ties).
BF16_ACTIVATIONS = False


def r16(x):
    return x.to(torch.bfloat16).float() if BF16_ACTIVATIONS else x


def rms(x, w):
    return r16(w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + F["eps"])))


def rotate_half(x):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([-b, a], -1)


def topk_stable(values, k):
    """Top-k along the last dim, best first; ties toward the lower index."""
    order = torch.sort(values, dim=-1, descending=True, stable=True)
    return order.values[..., :k], order.indices[..., :k]


class Routing:
    """Per MoE layer and token: the chosen experts and the facts the fixture must contain."""

    def __init__(self):
        self.boundary_ties = 0      # k-th and (k+1)-th candidate tie exactly: tie-breaking decides
        self.group_ties = 0         # a group-score tie at the kept/dropped boundary
        self.group_masking = 0      # group limiting changes the chosen set
        self.bias_changes = 0       # the expert bias changes the chosen set
        self.min_margin = float("inf")  # smallest non-tie gap at any routing boundary
        self.choices = []


def route(h, W, bias, stats):
    T, E, G, K, KG = h.shape[0], F["experts"], F["n_group"], F["topk"], F["topk_group"]
    logits = (h.double() @ W.double().T).float()
    for copy, orig in DUPLICATE_ROUTER_ROWS:
        assert torch.equal(logits[:, copy], logits[:, orig])
    s = torch.sigmoid(logits)
    sr = s + bias

    def select(scores, limit_groups):
        g = scores.view(T, G, E // G)
        group_scores = topk_stable(g, 2)[0].sum(-1)
        keep = topk_stable(group_scores, KG)[1] if limit_groups else torch.arange(G).expand(T, G)
        mask = torch.zeros(T, G, dtype=torch.bool)
        mask.scatter_(1, keep, True)
        masked = scores.masked_fill(~mask.repeat_interleave(E // G, 1), NEG_INF)
        return topk_stable(masked, K)[1], group_scores, masked

    idx, group_scores, masked = select(sr, True)
    if stats is not None:
        for t in range(T):
            chosen = set(idx[t].tolist())
            stats.choices.append(sorted(chosen))
            srt = torch.sort(masked[t], descending=True, stable=True).values
            gsrt = torch.sort(group_scores[t], descending=True, stable=True).values
            for a, b, counter in [(srt[K - 1], srt[K], "boundary_ties"), (gsrt[KG - 1], gsrt[KG], "group_ties")]:
                if not math.isfinite(float(b)):
                    continue
                if float(a) == float(b):
                    setattr(stats, counter, getattr(stats, counter) + 1)
                else:
                    stats.min_margin = min(stats.min_margin, float(a - b))
            stats.group_masking += chosen != set(select(sr, False)[0][t].tolist())
            stats.bias_changes += chosen != set(select(s, True)[0][t].tolist())
    w = torch.gather(s, 1, idx)
    if K > 1:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return idx, w * F["scaling"]


def swiglu(sd, p, x):
    g = x @ sd[p + "gate_proj.weight"].T
    u = x @ sd[p + "up_proj.weight"].T
    return r16(torch.nn.functional.silu(g) * u) @ sd[p + "down_proj.weight"].T


def moe_per_token(sd, p, h, idx, w):
    out = torch.zeros_like(h)
    for t in range(h.shape[0]):
        for j in range(F["topk"]):
            out[t] += w[t, j] * swiglu(sd, f"{p}mlp.experts.{int(idx[t, j])}.", h[t:t + 1])[0]
    return out


def moe_dispatch(sd, p, h, idx, w):
    """The published moe_infer: tokens sorted by expert, each expert once, scattered back."""
    flat = idx.reshape(-1)
    order = flat.argsort(stable=True)
    tokens = h[order // F["topk"]]
    counts = torch.bincount(flat, minlength=F["experts"]).tolist()
    outs, start = [], 0
    for e, n in enumerate(counts):
        if n:
            outs.append(swiglu(sd, f"{p}mlp.experts.{e}.", tokens[start:start + n]))
            start += n
    y = torch.empty(flat.shape[0], h.shape[1])
    y[order] = torch.cat(outs)
    return (y.view(h.shape[0], F["topk"], -1) * w.unsqueeze(-1)).sum(1)


def forward(sd, ids, positions, visible, stats=None):
    """Logits [n, vocab] of `ids` at `positions` under `visible` [n, n] (True = may attend)."""
    H, KV, D = F["heads"], F["kv_heads"], F["head_dim"]
    rot = int(D * F["partial"])
    n = len(ids)
    x = sd["model.word_embeddings.weight"][torch.tensor(ids)]
    inv = 1.0 / (F["theta"] ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    freqs = torch.tensor(positions, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    additive = torch.zeros(n, n).masked_fill(~torch.as_tensor(visible), NEG_INF)
    for i in range(F["layers"]):
        p = f"model.layers.{i}."
        h = rms(x, sd[p + "input_layernorm.weight"])
        qkv = r16(h @ sd[p + "attention.query_key_value.weight"].T).view(n, H + 2 * KV, D)
        q, k, v = qkv[:, :H], qkv[:, H:H + KV], qkv[:, H + KV:]
        q, k = rms(q, sd[p + "attention.query_layernorm.weight"]), rms(k, sd[p + "attention.key_layernorm.weight"])
        q = torch.cat([q[..., :rot] * cos + rotate_half(q[..., :rot]) * sin, q[..., rot:]], -1)
        k = torch.cat([k[..., :rot] * cos + rotate_half(k[..., :rot]) * sin, k[..., rot:]], -1)
        k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(D) + additive[None]
        o = r16(torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, H * D))
        x = x + o @ sd[p + "attention.dense.weight"].T
        h = rms(x, sd[p + "post_attention_layernorm.weight"])
        if i < F["first_dense"]:
            x = x + swiglu(sd, p + "mlp.", h)
            continue
        idx, w = route(h, sd[p + "mlp.gate.weight"], sd[p + "mlp.gate.expert_bias"], stats)
        y = moe_dispatch(sd, p, h, idx, w)
        if stats is not None and not BF16_ACTIVATIONS:  # logits fixtures: the per-token form too
            alt = moe_per_token(sd, p, h, idx, w)
            assert torch.allclose(y, alt, rtol=1e-5, atol=1e-5), "moe per-token vs dispatch"
        x = x + y + swiglu(sd, p + "mlp.shared_experts.", h)
    x = rms(x, sd["model.norm.weight"])
    return x @ sd["lm_head.weight"].T


def visibility(rule, positions):
    n = len(positions)
    if rule == "causal":
        return np.tril(np.ones((n, n), dtype=bool))
    if rule == "bidirectional":
        return np.ones((n, n), dtype=bool)
    blk = np.asarray(positions) // int(rule.split(":")[1])
    return blk[None, :] <= blk[:, None]


# --------------------------------------------------------------------------- logits fixtures
def logit_cases(gen):
    rnd = lambda n: torch.randint(0, EOS_ID, (n,), generator=gen).tolist()
    perm = torch.randperm(12, generator=gen).tolist()
    cases = [
        dict(ids=rnd(11), positions=list(range(11)), attention="causal"),
        dict(ids=rnd(10), positions=list(range(10)), attention="bidirectional"),
        dict(ids=rnd(13), positions=list(range(13)), attention="block:4"),
        dict(ids=rnd(9), positions=list(range(2, 11)), attention="block:4"),
        dict(ids=rnd(12), positions=perm, attention="bidirectional"),
        dict(ids=rnd(6), positions=[1000, 1001, 1002, 5000, 5001, 20000], attention="block:3"),
        dict(ids=rnd(40), positions=list(range(40)), attention="block:32"),
    ]
    cases[2]["ids"][-3:] = [MASK_ID] * 3
    cases[6]["ids"][30:] = [MASK_ID] * 10
    return cases


# ----------------------------------------------------------------------------- decoding (engine)
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
    remove = np.cumsum(probs) > p
    remove[1:] = remove[:-1].copy()
    remove[0] = False
    out = logits.clone()
    out[torch.as_tensor(order[remove])] = NEG_INF
    return out


def inverse_cdf(probs, u):
    cum, last = 0.0, 0
    for i, q in enumerate(probs.tolist()):
        if q <= 0:
            continue
        last = i
        cum += q
        if cum > u:
            return i
    return last


def sample(logits, p, u):
    """_sample_with_temperature_topk_topp: (token, its probability after the filters). The
    HF-2.0 quirk samples at T = 1 when temperature is 0; greedy takes the argmax."""
    logits = logits.clone()
    logits[MASK_ID] = NEG_INF  # the engine never decides a mask
    t = p["temperature"]
    sampled = t > 0 or p["hf_quirk"]
    scaled = logits / t if t > 0 and t != 1.0 else logits
    probs = torch.softmax(top_p_filter(top_k_filter(scaled, p["top_k"]), p["top_p"]).double(), -1)
    token = inverse_cdf(probs, u) if sampled else int(torch.argmax(probs))
    return token, float(probs[token])


class Engine:
    """The engine's bookkeeping: final tokens, stop ids, max_tokens, a canvas after each forward."""

    def __init__(self, prompt, p):
        self.P, self.p, self.B = len(prompt), p, p["block_length"]
        self.nblk = (self.P + p["max_tokens"] + self.B - 1) // self.B
        self.x = list(prompt) + [MASK_ID] * (self.nblk * self.B - self.P)
        self.forwards, self.canvases, self.final_len = 0, [], 0

    def snapshot(self, end_block):
        self.canvases.append(self.x[self.P:max(self.P, min(len(self.x), (end_block + 1) * self.B))])

    def logits_block(self, b):
        hi = (b + 1) * self.B
        pos = list(range(hi))
        return forward(SD, self.x[:hi], pos, visibility(f"block:{self.B}", pos))[b * self.B:]

    def done(self):
        fin = self.x[self.P:self.P + self.final_len]
        for i, t in enumerate(fin):
            if t in self.p["stop_ids"]:
                return (True, fin[:self.p["max_tokens"]], "length") if i >= self.p["max_tokens"] \
                    else (True, fin[:i], "stop")
        if len(fin) >= self.p["max_tokens"]:
            return True, fin[:self.p["max_tokens"]], "length"
        return False, fin, "length"

    def result(self):
        _, ids, reason = self.done()
        return dict(ids=ids, finish_reason=reason, forwards=self.forwards, canvases=self.canvases)


def transfer_schedule(block, steps):
    n = [block // steps] * steps
    for i in range(block % steps):
        n[i] += 1
    return n


def llada20_engine(prompt, p):
    """LLaDA2.0 block diffusion as the engine runs it (BlockDiffusionDecoder)."""
    g = Engine(prompt, p)
    B, thr = g.B, p["threshold"]
    steps = min(p["steps"], p["max_tokens"])  # min(steps, gen_length // minimal_topk)
    sched = transfer_schedule(B, steps)
    first = g.P // B
    if first > 0:
        g.forwards += 1
        g.snapshot(first)
    for b in range(first, g.nblk):
        lo = b * B
        for step in range(steps + 1):
            masked = [i for i in range(lo, lo + B) if g.x[i] == MASK_ID]
            if not masked:
                g.forwards += 1  # commit forward
                g.snapshot(b + 1)
                break
            logits = g.logits_block(b)
            draws = {i: sample(logits[i - lo], p, uniform(p["seed"], 0, g.forwards, i)) for i in masked}
            g.forwards += 1
            k = min(sched[min(step, steps - 1)], len(masked))
            high = [i for i in masked if draws[i][1] > thr]
            chosen = high if len(high) >= k else sorted(masked, key=lambda i: (-draws[i][1], i))[:k]
            for i in chosen:
                g.x[i] = draws[i][0]
            while g.P + g.final_len < len(g.x) and g.x[g.P + g.final_len] != MASK_ID:
                g.final_len += 1
            g.snapshot(b)
            if g.done()[0]:
                return g.result()
    return g.result()


def llada21_engine(prompt, p):
    """LLaDA2.1 joint M2T + T2T token editing as the engine runs it (TokenEditingDecoder):
    tokens of a block become final when its editing ends."""
    g = Engine(prompt, p)
    B = g.B
    first = g.P // B
    if first > 0:
        g.forwards += 1
        g.snapshot(first)
    for b in range(first, g.nblk):
        lo = b * B
        post_steps = 0
        while True:
            masked = [i for i in range(lo, lo + B) if g.x[i] == MASK_ID]
            if not masked:
                post_steps += 1
                if post_steps > p["max_post_steps"]:
                    break
            rows = [i for i in range(max(lo, g.P), lo + B)]  # every non-prompt row of the block
            logits = g.logits_block(b)
            draws = {i: sample(logits[i - lo], p, uniform(p["seed"], 0, g.forwards, i)) for i in rows}
            g.forwards += 1
            chosen = []
            if masked:
                high = [i for i in masked if draws[i][1] > p["threshold"]]
                chosen = high if len(high) >= 1 else sorted(masked, key=lambda i: (-draws[i][1], i))[:1]
            edits = [i for i in rows if g.x[i] != MASK_ID and draws[i][1] > p["editing_threshold"]
                     and draws[i][0] != g.x[i]]
            for i in chosen + edits:
                g.x[i] = draws[i][0]
            g.snapshot(b)
            if not masked and not edits:
                break
        g.final_len = (b + 1) * B - g.P
        if g.done()[0]:
            return g.result()
        g.forwards += 1  # commit forward
        g.snapshot(b + 1)
    return g.result()


# ------------------------------------------------------------- literal ports (greedy cross-check)
def hf20_generate(prompt, p):
    """LLaDA2MoeModelLM.generate (model-specs §6.5), full recompute, greedy; returns the ids
    without the trailing EOS (the engine's convention)."""
    B, gen, P = p["block_length"], p["max_tokens"], len(prompt)
    steps = min(p["steps"], gen)
    nb = (P + gen + B - 1) // B
    x = list(prompt) + [MASK_ID] * (nb * B - P)
    sched = transfer_schedule(B, steps)
    for blk in range(P // B, nb):
        W = (blk + 1) * B
        for step in range(steps):
            am = [i for i in range(W - B, W) if x[i] == MASK_ID]
            if not am:
                break
            pos = list(range(W))
            logits = forward(SD, x[:W], pos, visibility(f"block:{B}", pos))
            d = {i: sample(logits[i], p, 0.0) for i in am}
            high = [i for i in am if d[i][1] > p["threshold"]]
            chosen = high if len(high) >= sched[step] else \
                sorted(am, key=lambda i: (-d[i][1], i))[:min(sched[step], len(am))]
            for i in chosen:
                x[i] = d[i][0]
        if EOS_ID in x[P:W]:
            break
    ans = x[P:P + gen]
    return ans[:ans.index(EOS_ID)] if EOS_ID in ans else ans


def cli21_generate(prompt, p):
    """The LLaDA2.1 generate() (model-specs §6.6), full recompute, greedy, num_to_transfer 1."""
    B, gen, P = p["block_length"], p["max_tokens"], len(prompt)
    nb = (P + gen + B - 1) // B
    x = list(prompt) + [MASK_ID] * (nb * B - P)
    for blk in range(P // B, nb):
        W, lo = (blk + 1) * B, blk * B
        post = 0
        while True:
            old = x[lo:W]
            am = [i for i in range(lo, W) if x[i] == MASK_ID]
            if not am:
                post += 1
            if post > p["max_post_steps"]:
                break
            pos = list(range(W))
            logits = forward(SD, x[:W], pos, visibility(f"block:{B}", pos))
            d = {i: sample(logits[i], p, 0.0) for i in range(lo, W)}
            transfer = set()
            if am:
                high = [i for i in am if d[i][1] > p["threshold"]]
                transfer = set(high) if len(high) >= 1 else {sorted(am, key=lambda i: (-d[i][1], i))[0]}
            edits = {i for i in range(max(lo, P), W) if old[i - lo] != MASK_ID and
                     d[i][1] > p["editing_threshold"] and d[i][0] != old[i - lo]}
            for i in transfer | edits:
                x[i] = d[i][0]
            if not am and not edits:
                break
        gp = x[P:W]
        if MASK_ID not in gp and EOS_ID in gp:
            break
    ans = x[P:P + gen]
    return ans[:ans.index(EOS_ID)] if EOS_ID in ans else ans


def params(**kw):
    base = dict(strategy="block", max_tokens=40, block_length=32, steps=32, threshold=0.95,
                remasking="low_confidence_dynamic", confidence="filtered", sub_block_length=0,
                temperature=0.0, top_k=0, top_p=1.0, seed=0, stop_ids=[EOS_ID], hf_quirk=False,
                editing_threshold=-1.0, max_post_steps=16)
    base.update(kw)
    if base["strategy"] == "edit":  # no step schedule, no remasking rule (their options refused)
        base.update(steps=0, remasking="")
    return base


def decode_cases(rng):
    pr = {"short": rng.integers(0, EOS_ID, 5).tolist(), "exact": rng.integers(0, EOS_ID, 32).tolist(),
          "long": rng.integers(0, EOS_ID, 37).tolist(), "b8": rng.integers(0, EOS_ID, 11).tolist()}
    c20 = [
        ("greedy_short", pr["short"], params()),
        ("greedy_exact", pr["exact"], params(max_tokens=24)),
        ("greedy_long", pr["long"], params(max_tokens=30)),
        ("threshold_low", pr["short"], params(threshold=0.05, max_tokens=48)),
        ("block8_steps4", pr["b8"], params(block_length=8, steps=4, threshold=0.3, max_tokens=30)),
        ("block8_steps8", pr["b8"], params(block_length=8, steps=8, max_tokens=30)),
        ("hf_quirk_t0", pr["short"], params(hf_quirk=True, seed=5, threshold=0.2)),
        ("hf_quirk_topk", pr["b8"], params(hf_quirk=True, seed=7, top_k=20, block_length=8, steps=8,
                                           threshold=0.3, max_tokens=24)),
        ("sampled_t07_topp", pr["long"], params(temperature=0.7, top_p=0.9, seed=3, threshold=0.3,
                                                max_tokens=24)),
        ("no_stop", pr["b8"], params(block_length=8, steps=8, stop_ids=[], max_tokens=20)),
    ]
    c21 = [
        ("s_mode_short", pr["short"], params(strategy="edit", threshold=0.5, editing_threshold=0.0)),
        ("q_mode_short", pr["short"], params(strategy="edit", threshold=0.7, editing_threshold=0.5)),
        ("s_mode_long", pr["long"], params(strategy="edit", threshold=0.5, editing_threshold=0.0,
                                           max_tokens=30)),
        ("edit_block8", pr["b8"], params(strategy="edit", block_length=8, threshold=0.1,
                                         editing_threshold=0.05, max_tokens=30)),
        ("edit_block8_post2", pr["b8"], params(strategy="edit", block_length=8, threshold=0.02,
                                               editing_threshold=0.0, max_post_steps=2, max_tokens=30)),
        ("edit_exact", pr["exact"], params(strategy="edit", threshold=0.3, editing_threshold=0.2,
                                           max_tokens=24)),
        ("edit_no_edits", pr["b8"], params(strategy="edit", block_length=8, threshold=0.3,
                                           editing_threshold=1.0, max_tokens=24)),
        ("edit_hf_quirk", pr["b8"], params(strategy="edit", block_length=8, hf_quirk=True, seed=9,
                                           threshold=0.3, editing_threshold=0.3, max_tokens=24)),
        ("edit_sampled", pr["short"], params(strategy="edit", temperature=0.8, top_k=30, seed=4,
                                             threshold=0.4, editing_threshold=0.3, max_tokens=24)),
        ("edit_no_stop", pr["b8"], params(strategy="edit", block_length=8, threshold=0.2,
                                          editing_threshold=0.1, stop_ids=[], max_tokens=20)),
    ]
    return c20, c21


# ---------------------------------------------------------------------------------------- main
def tune_eos():
    """Make EOS a token the random model produces mid-generation: its LM-head row becomes a
    slightly boosted copy of the row of the token that greedy decoding of the trajectory prompts
    emits (not first) in the most runs — so that stops land inside blocks, as in real decoding."""
    c20, _ = decode_cases(np.random.default_rng(1234))
    runs = {}
    for _, pr, p in c20[:6]:
        ids = llada20_engine(pr, dict(p, stop_ids=[]))["ids"]
        for t in set(ids[3:]):
            runs[t] = runs.get(t, 0) + 1
    favourite = max(sorted(runs), key=lambda t: runs[t])
    SD["lm_head.weight"][EOS_ID] = (SD["lm_head.weight"][favourite] * 1.01).to(torch.bfloat16).float()
    print(f"EOS {EOS_ID} now mirrors token {favourite} (emitted in {runs[favourite]} of 6 runs)")


def main():
    global SD
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-out", default="tests/fixtures/models")
    ap.add_argument("--trajectory-out", default="tests/fixtures/trajectories")
    ap.add_argument("--seed", type=int, default=2024)
    args = ap.parse_args()
    global BF16_ACTIVATIONS
    for seed in range(args.seed, args.seed + 40):
        gen = torch.Generator().manual_seed(seed)
        SD = random_state_dict(gen)
        cases = logit_cases(gen)
        exact, rounded = Routing(), Routing()
        for c in cases:
            vis = visibility(c["attention"], c["positions"])
            forward(SD, c["ids"], c["positions"], vis, exact)
            BF16_ACTIVATIONS = True
            forward(SD, c["ids"], c["positions"], vis, rounded)
            BF16_ACTIVATIONS = False
        flips = sum(a != b for a, b in zip(exact.choices, rounded.choices))
        print(f"seed {seed}: {flips} routing changes under bf16 activations, margin {exact.min_margin:.1e}")
        if flips == 0 and exact.boundary_ties > 0 and exact.min_margin > 1e-4:
            break
    else:
        raise SystemExit("no seed gives routing robust to bf16 activations")
    tune_eos()

    out = os.path.join(args.model_out, NAME)
    os.makedirs(out, exist_ok=True)
    for old in os.listdir(out):
        os.remove(os.path.join(out, old))
    tensors = {k: (v if k.endswith("expert_bias") else v.to(torch.bfloat16)).contiguous() for k, v in SD.items()}
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(out, "model.safetensors"), 0o644)
    tok, tok_cfg = tokenizer_files()
    for fname, obj in [("config.json", config_json()), ("tokenizer.json", tok),
                       ("tokenizer_config.json", tok_cfg),
                       ("generation_config.json", {"eos_token_id": EOS_ID, "pad_token_id": EOS_ID})]:
        with open(os.path.join(out, fname), "w") as fh:
            json.dump(obj, fh, indent=1 if fname != "tokenizer.json" else None, ensure_ascii=False)

    stats = Routing()
    for k, c in enumerate(cases):
        logits = forward(SD, c["ids"], c["positions"], visibility(c["attention"], c["positions"]), stats)
        c["logits"] = f"case_{k}.npy"
        np.save(os.path.join(out, c["logits"]), logits.numpy().astype(np.float32))
        print(f"{NAME} case {k}: {c['attention']:13s} n={len(c['ids']):2d} |logits|={float(logits.norm()):8.2f}")
    print(f"routing over {len(stats.choices)} token-layers: boundary ties {stats.boundary_ties}, group ties "
          f"{stats.group_ties}, group masking changes {stats.group_masking}, bias changes {stats.bias_changes}, "
          f"smallest non-tie margin {stats.min_margin:.2e}")
    assert stats.boundary_ties > 0 and stats.group_masking > 0 and stats.bias_changes > 0
    assert stats.min_margin > 1e-4, "a routing decision is too close to call across implementations"
    with open(os.path.join(out, "cases.json"), "w") as fh:
        json.dump({"family": "llada2_moe", "reference": f"tools/reference_llada2.py, torch {torch.__version__}, "
                   "fp32 on bf16-rounded weights", "routing": {
                       "boundary_ties": stats.boundary_ties, "group_ties": stats.group_ties,
                       "group_masking_changes": stats.group_masking, "bias_changes": stats.bias_changes},
                   "cases": cases}, fh, indent=1)

    rng = np.random.default_rng(1234)
    c20, c21 = decode_cases(rng)
    os.makedirs(args.trajectory_out, exist_ok=True)
    for fname, cases, run, literal in [(NAME + ".json", c20, llada20_engine, hf20_generate),
                                       (NAME + "-edit.json", c21, llada21_engine, cli21_generate)]:
        records = []
        for name, pr, p in cases:
            res = run(pr, p)
            if not (p["temperature"] > 0 or p["hf_quirk"]) and p["stop_ids"]:
                lit = literal(pr, p)
                assert lit[:p["max_tokens"]] == res["ids"], (name, lit, res["ids"])
            records.append(dict(name=name, prompt=pr, params=p, expected=res))
            print(f"{fname:24s} {name:20s} P={len(pr):2d} -> {len(res['ids']):2d} ids, {res['forwards']:3d} "
                  f"forwards, {res['finish_reason']}: {res['ids'][:10]}")
        with open(os.path.join(args.trajectory_out, fname), "w") as fh:
            json.dump({"model": NAME, "reference": f"tools/reference_llada2.py, torch {torch.__version__}",
                       "cases": records}, fh)


if __name__ == "__main__":
    main()
