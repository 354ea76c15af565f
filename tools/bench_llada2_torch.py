#!/usr/bin/env python3
"""Peer baseline for `dllm bench --shape configs/llada2-mini.json`, on the GPU machine: the same
denoising step of the LLaDA2.0-mini MoE in plain PyTorch, random bf16 weights.

  python3 tools/bench_llada2_torch.py --shape configs/llada2-mini.json --block 32 \
      --context 4096,32768 --concurrency 1,8 --json out.json

transformers has no llada2_moe model (the published modeling_llada2_moe.py is remote code) and no
weights can be downloaded, so this is our own implementation in the style of that modeling code
(model-specs §6.3): fused query_key_value, per-head q/k RMSNorm, partial NeoX RoPE, GQA through
scaled_dot_product_attention, dense; FFN dense SwiGLU in the first first_k_dense_replace layers,
else the sigmoid group-limited router + routed experts looped one expert at a time (index_select,
SwiGLU, scale, index_add, as HF MoE modules do) + the shared expert.

Step: B query tokens at positions C..C+B-1 of `concurrency` independent sequences attend
(bidirectionally inside the block) to a cached prefix of C random K/V per layer plus themselves;
the block's K/V go into the slots after the prefix of a preallocated cache (as transformers'
StaticCache: no copy of the prefix per step); logits of the block's rows.

CPU smoke test and correctness check (batched MoE and attention vs a per-token computation):
  python3 tools/bench_llada2_torch.py --tiny --device cpu --check --context 64 --block 8 \
      --concurrency 1,2 --reps 2
"""
import argparse
import json
import math

import torch
import torch.nn.functional as F

from bench_torch import time_ms  # tools/: the same timing as the dense peer

# --tiny: a shape that runs in seconds on the CPU but keeps every structural feature (GQA, partial
# RoPE, a dense layer then MoE layers, several groups with group limiting, a shared expert).
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, num_experts=16, num_experts_per_tok=4, n_group=4,
            topk_group=2, moe_intermediate_size=32, vocab_size=512)


# ------------------------------------------------------------------------------------- weights
def rand(shape, dev, dt, std):
    # Filled in place on the device: the 16B checkpoint (32 GB bf16) never passes through CPU RAM.
    return torch.empty(shape, device=dev, dtype=dt).normal_(0.0, std)


def build_layer(c, i, dev, dt, std):
    h, H, KV, D = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    one = lambda n: torch.ones(n, device=dev, dtype=dt)
    L = dict(ln1=one(h), ln2=one(h), qn=one(D), kn=one(D), qkv=rand(((H + 2 * KV) * D, h), dev, dt, std),
             dense=rand((h, H * D), dev, dt, std))
    if i < c["first_k_dense_replace"]:
        I = c["intermediate_size"]
        L.update(gate=rand((I, h), dev, dt, std), up=rand((I, h), dev, dt, std), down=rand((h, I), dev, dt, std))
        return L
    E, I, S = c["num_experts"], c["moe_intermediate_size"], c["moe_intermediate_size"] * c["num_shared_experts"]
    # Experts stacked [E, ...]: eg[e] is the same matrix as experts.{e}.gate_proj.weight, one
    # allocation instead of 768 per layer. expert_bias stays fp32 as in the checkpoint.
    L.update(router=rand((E, h), dev, dt, std), bias=rand((E,), dev, torch.float32, 0.01),
             eg=rand((E, I, h), dev, dt, std), eu=rand((E, I, h), dev, dt, std), ed=rand((E, h, I), dev, dt, std),
             sg=rand((S, h), dev, dt, std), su=rand((S, h), dev, dt, std), sd=rand((h, S), dev, dt, std))
    return L


def build_model(c, dev, dt, std=0.02):
    V, h = c["vocab_size"], c["hidden_size"]
    layers = []
    for i in range(c["num_hidden_layers"]):
        layers.append(build_layer(c, i, dev, dt, std))
    return dict(embed=rand((V, h), dev, dt, 1.0), norm=torch.ones(h, device=dev, dtype=dt),
                lm_head=rand((V, h), dev, dt, std), layers=layers)


# ------------------------------------------------------------------------------------- forward
def rms(x, w, eps):
    # HF RMSNorm: statistics in fp32, back to the activation dtype before the weight.
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def swiglu(x, g, u, d):
    return F.linear(F.silu(F.linear(x, g)) * F.linear(x, u), d)


def rope_tables(c, positions, dt):
    rot = int(c["head_dim"] * c["partial_rotary_factor"])
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, rot, 2, device=positions.device).float() / rot))
    emb = torch.cat([positions.float()[:, None] * inv] * 2, -1)
    return emb.cos().to(dt), emb.sin().to(dt)


def rope(x, cos, sin):
    # Partial rotary: NeoX rotate_half on the first `rot` dims, the rest pass through.
    rot = cos.shape[-1]
    r = x[..., :rot]
    half = torch.cat([-r[..., rot // 2:], r[..., : rot // 2]], -1)
    return torch.cat([r * cos + half * sin, x[..., rot:]], -1)


def attention(x, L, c, ck, cv, C, cos, sin):
    """x [N, B, hidden]; ck/cv [N, KV, C+B, D] hold the prefix, the block's K/V go after it."""
    N, B, _ = x.shape
    H, KV, D, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
    q, k, v = F.linear(x, L["qkv"]).view(N, B, H + 2 * KV, D).split([H, KV, KV], dim=2)
    q, k = rms(q, L["qn"], eps), rms(k, L["kn"], eps)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    ck[:, :, C:], cv[:, :, C:] = rope(k, cos, sin), v
    # No mask: the block sees the whole prefix and itself bidirectionally.
    o = F.scaled_dot_product_attention(rope(q, cos, sin), ck, cv, enable_gqa=True)
    return F.linear(o.transpose(1, 2).reshape(N, B, H * D), L["dense"])


def route(h, L, c):
    """LLaDA2MoeGate: (expert ids [T, K], weights [T, K] fp32)."""
    T, E, G = h.shape[0], c["num_experts"], c["n_group"]
    s = torch.sigmoid(F.linear(h.float(), L["router"].float()))
    sr = s + L["bias"]  # the bias steers selection only; the weights use s
    group = sr.view(T, G, E // G).topk(2, dim=-1).values.sum(-1)
    keep = group.topk(c["topk_group"], dim=-1, sorted=False).indices
    gmask = torch.zeros(T, G, dtype=torch.bool, device=h.device).scatter_(1, keep, True)
    masked = sr.masked_fill(~gmask.repeat_interleave(E // G, dim=1), float("-inf"))
    idx = masked.topk(c["num_experts_per_tok"], dim=-1).indices
    w = s.gather(1, idx)
    if c["norm_topk_prob"] and idx.shape[1] > 1:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return idx, w * c["routed_scaling_factor"]


def moe(h, L, c):
    """h [T, hidden]: routed experts one at a time over the tokens they received, plus shared."""
    idx, w = route(h, L, c)
    K = idx.shape[1]
    order = idx.flatten().argsort()
    tok, wt = order // K, w.flatten()[order].to(h.dtype)
    # One host sync per layer for the per-expert counts (the published moe_infer does the same).
    counts = torch.bincount(idx.flatten(), minlength=c["num_experts"]).tolist()
    out, start = torch.zeros_like(h), 0
    for e, n in enumerate(counts):
        if n:
            t = tok[start:start + n]
            y = swiglu(h.index_select(0, t), L["eg"][e], L["eu"][e], L["ed"][e])
            out.index_add_(0, t, y * wt[start:start + n, None])
            start += n
    return out + swiglu(h, L["sg"], L["su"], L["sd"])


def forward(M, c, ids, caches, C):
    """ids [N, B] at positions C..C+B-1 -> logits [N, B, vocab]."""
    eps = c["rms_norm_eps"]
    x = M["embed"][ids]
    cos, sin = rope_tables(c, torch.arange(C, C + ids.shape[1], device=ids.device), x.dtype)
    for L, (ck, cv) in zip(M["layers"], caches):
        x = x + attention(rms(x, L["ln1"], eps), L, c, ck, cv, C, cos, sin)
        h = rms(x, L["ln2"], eps)
        x = x + (swiglu(h, L["gate"], L["up"], L["down"]) if "gate" in L else
                 moe(h.reshape(-1, h.shape[-1]), L, c).view_as(h))
    return F.linear(rms(x, M["norm"], eps), M["lm_head"])


# ------------------------------------------------------------------------- correctness check
def moe_per_token(h, L, c):
    """The same routing written out token by token with Python sorting, for --check."""
    E, G, K, KG = c["num_experts"], c["n_group"], c["num_experts_per_tok"], c["topk_group"]
    n, out = E // G, []
    for x in h:
        s = torch.sigmoid(L["router"] @ x)
        sr = (s + L["bias"]).tolist()
        gscore = [sum(sorted(sr[g * n:(g + 1) * n], reverse=True)[:2]) for g in range(G)]
        groups = sorted(range(G), key=lambda g: -gscore[g])[:KG]
        chosen = sorted([e for g in groups for e in range(g * n, (g + 1) * n)], key=lambda e: -sr[e])[:K]
        wts = s[chosen] / s[chosen].sum() * c["routed_scaling_factor"]
        y = L["sd"] @ (F.silu(L["sg"] @ x) * (L["su"] @ x))
        for wgt, e in zip(wts, chosen):
            y = y + wgt * (L["ed"][e] @ (F.silu(L["eg"][e] @ x) * (L["eu"][e] @ x)))
        out.append(y)
    return torch.stack(out)


def attention_explicit(x, L, c, ck, cv, C, cos, sin):
    """Attention of one layer with an explicit softmax over [prefix | block], KV heads repeated."""
    N, B, _ = x.shape
    H, KV, D, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
    qkv = (x @ L["qkv"].T).view(N, B, H + 2 * KV, D)
    q = rope(rms(qkv[:, :, :H], L["qn"], eps).transpose(1, 2), cos, sin)
    k = rope(rms(qkv[:, :, H:H + KV], L["kn"], eps).transpose(1, 2), cos, sin)
    k = torch.cat([ck[:, :, :C], k], 2).repeat_interleave(H // KV, 1)
    v = torch.cat([cv[:, :, :C], qkv[:, :, H + KV:].transpose(1, 2)], 2).repeat_interleave(H // KV, 1)
    p = (q @ k.transpose(-1, -2) / math.sqrt(D)).softmax(-1)
    return (p @ v).transpose(1, 2).reshape(N, B, H * D) @ L["dense"].T


def check(c, C, B):
    torch.manual_seed(0)
    # Weights of std 1/sqrt(hidden) (not 0.02): router logits and outputs are O(1), so routing is
    # spread out and the absolute 1e-5 bound is tight relative to the values.
    L = build_layer(c, c["first_k_dense_replace"], "cpu", torch.float32, c["hidden_size"] ** -0.5)
    L["bias"] = 0.05 * torch.randn(c["num_experts"])
    h = torch.randn(64, c["hidden_size"])
    d_moe = (moe(h, L, c) - moe_per_token(h, L, c)).abs().max().item()
    # The check only means something if the bias and the group limit change which experts run.
    sets = lambda LL, cc: [set(r) for r in route(h, LL, cc)[0].tolist()]
    base = sets(L, c)
    by_bias = sum(a != b for a, b in zip(base, sets(dict(L, bias=torch.zeros_like(L["bias"])), c)))
    by_group = sum(a != b for a, b in zip(base, sets(L, dict(c, topk_group=c["n_group"]))))
    assert by_bias > 0 and by_group > 0
    N, KV, D = 2, c["num_key_value_heads"], c["head_dim"]
    ck, cv = torch.randn(N, KV, C + B, D), torch.randn(N, KV, C + B, D)
    x = torch.randn(N, B, c["hidden_size"])
    cos, sin = rope_tables(c, torch.arange(C, C + B), torch.float32)
    args = (x, L, c, ck, cv, C, cos, sin)
    d_att = (attention(*args) - attention_explicit(*args)).abs().max().item()
    print(f"check: MoE batched vs per-token max |diff| {d_moe:.2e} over 64 tokens (routing changed by the "
          f"bias for {by_bias}, by the group limit for {by_group}); "
          f"attention SDPA vs explicit softmax max |diff| {d_att:.2e}")
    assert d_moe < 1e-5 and d_att < 1e-5, "the peer does not compute the reference math"


# ---------------------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="configs/llada2-mini.json")
    ap.add_argument("--block", default="32")
    ap.add_argument("--context", default="4096")
    ap.add_argument("--concurrency", default="1")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--layers", type=int, help="build only this many layers (time scales ~linearly)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="shrink the shape for CPU smoke tests")
    ap.add_argument("--check", action="store_true", help="fp32 check of MoE and attention (with --tiny)")
    ap.add_argument("--json")
    args = ap.parse_args()
    ints = lambda s: [int(v) for v in s.split(",")]
    c = json.load(open(args.shape))
    if args.tiny:
        c.update(TINY)
    full_layers = c["num_hidden_layers"]
    if args.layers:
        c["num_hidden_layers"] = min(args.layers, full_layers)
    torch.manual_seed(0)
    if args.check:
        check(c, ints(args.context)[0], ints(args.block)[0])
    cuda = args.device.startswith("cuda")
    dt = torch.bfloat16
    gpu = torch.cuda.get_device_name() if cuda else "cpu"
    KV, D, L = c["num_key_value_heads"], c["head_dim"], c["num_hidden_layers"]
    rows = []
    with torch.inference_mode():
        M = build_model(c, args.device, dt)
        print(f"{gpu}, torch {torch.__version__}, {L} of {full_layers} layers built"
              f"{' (tiny shape)' if args.tiny else ''}\n")
        print("| block | context | concurrency | ms/step | block tokens/s |")
        print("|---|---|---|---|---|")
        for C in ints(args.context):
            for N in ints(args.concurrency):
                for B in ints(args.block):
                    caches = [(rand((N, KV, C + B, D), args.device, dt, 1.0),
                               rand((N, KV, C + B, D), args.device, dt, 1.0)) for _ in range(L)]
                    ids = torch.randint(0, c["vocab_size"], (N, B), device=args.device)
                    ms = time_ms(lambda: forward(M, c, ids, caches, C), args.reps, cuda)
                    tps = N * B / (ms * 1e-3)
                    print(f"| {B} | {C} | {N} | {ms:.2f} | {tps:.0f} |", flush=True)
                    rows.append(dict(block=B, context=C, concurrency=N, ms_per_step=ms, block_tokens_per_s=tps))
                    del caches
                    if cuda:
                        torch.cuda.empty_cache()
    if args.json:
        json.dump(dict(shape=args.shape, tiny=args.tiny, layers=L, full_layers=full_layers, device=gpu,
                       torch=torch.__version__, rows=rows), open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
