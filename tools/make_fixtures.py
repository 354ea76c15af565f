#!/usr/bin/env python3
"""Engine-core parity fixtures: tiny random-weight checkpoints in each family's exact on-disk
format, plus reference logits from Hugging Face transformers.

Runs on the GPU machine (torch + transformers there), reference computed on the CPU in fp32:

    python3 tools/make_fixtures.py --out tests/fixtures/models

For every family it writes <out>/<name>/ with
  config.json, generation_config.json   the family's own config dialect (LLaDA: d_model, n_layers, ...)
  model.safetensors (or shards + index)  bf16 weights under the family's tensor names
  cases.json                             ids, positions, attention rule and expected-logits file per case
  case_<k>.npy                           float32 logits [n_tokens, vocab]

The reference model is the transformers class with the same math (Qwen3 for SDAR / WeDLM-8B, Qwen2
for Fast-dLLM v2 / Dream / WeDLM-7B, Llama for LLaDA with renamed tensors), loaded with the
bf16-rounded weights in fp32, run with an explicit 4D additive mask so that causal, bidirectional and
block-causal rules all go through the same code. An independent plain-torch forward is run too and
must agree with transformers, so a mistake in how we drive transformers cannot slip into the goldens.
"""
import argparse
import json
import math
import os

import numpy as np
import torch
from safetensors.torch import save_file

torch.set_grad_enabled(False)

# name, family-specific config, transformers class, sizes
FIXTURES = [
    # SDAR: Qwen3 layers, q/k norm, explicit head_dim != hidden/heads, GQA 2, sharded checkpoint.
    dict(name="sdar-tiny", family="sdar", hf="qwen3", hidden=64, layers=2, heads=4, kv_heads=2, head_dim=32,
         inter=96, vocab=320, tie=False, bias=False, qk_norm=True, theta=1e6, eps=1e-6, shards=2),
    # WeDLM-8B style: Qwen3 layers, GQA 4.
    dict(name="wedlm-qwen3-tiny", family="wedlm", hf="qwen3", hidden=64, layers=2, heads=8, kv_heads=2,
         head_dim=16, inter=128, vocab=300, tie=False, bias=False, qk_norm=True, theta=1e6, eps=1e-6),
    # WeDLM-7B style: Qwen2.5 layers (qkv bias, no q/k norm), GQA 7 like Qwen2.5-7B (28/4).
    dict(name="wedlm-qwen25-tiny", family="wedlm", hf="qwen2", hidden=112, layers=2, heads=7, kv_heads=1,
         head_dim=16, inter=160, vocab=300, tie=False, bias=True, qk_norm=False, theta=1e6, eps=1e-6),
    # Fast-dLLM v2: Qwen2.5 layers with qkv bias, tied embeddings (like the 1.5B), block 32.
    dict(name="fast-dllm-v2-tiny", family="fast_dllm_v2", hf="qwen2", hidden=64, layers=2, heads=4, kv_heads=2,
         head_dim=16, inter=96, vocab=300, tie=True, bias=True, qk_norm=False, theta=1e6, eps=1e-6),
    # Dream: Qwen2.5 layers, bidirectional.
    dict(name="dream-tiny", family="dream", hf="qwen2", hidden=96, layers=2, heads=6, kv_heads=2, head_dim=16,
         inter=128, vocab=300, tie=False, bias=True, qk_norm=False, theta=1e6, eps=1e-6),
    # LLaDA: Llama blocks, MHA, theta 5e5, eps 1e-5, its own config dialect and tensor names.
    dict(name="llada-tiny", family="llada", hf="llama", hidden=64, layers=2, heads=4, kv_heads=4, head_dim=16,
         inter=128, vocab=300, tie=False, bias=False, qk_norm=False, theta=5e5, eps=1e-5),
]

MASK_ID = {"sdar": 290, "wedlm": 291, "fast_dllm_v2": 292, "dream": 293, "llada": 294}
EOS_ID = 250
IM_END_ID = 251


def family_config(f):
    """config.json exactly in the family's dialect."""
    fam = f["family"]
    if fam == "llada":
        return {
            "architectures": ["LLaDAModelLM"], "model_type": "llada",
            "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig",
                         "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM"},
            "d_model": f["hidden"], "n_layers": f["layers"], "n_heads": f["heads"], "n_kv_heads": f["kv_heads"],
            "mlp_hidden_size": f["inter"], "mlp_ratio": 4, "vocab_size": f["vocab"], "embedding_size": f["vocab"],
            "max_sequence_length": 4096, "rope": True, "rope_full_precision": True, "rope_theta": f["theta"],
            "rms_norm_eps": f["eps"], "layer_norm_type": "rms", "activation_type": "silu", "block_type": "llama",
            "attention_layer_norm": False, "include_bias": False, "include_qkv_bias": False,
            "input_emb_norm": False, "scale_logits": False, "weight_tying": f["tie"], "flash_attention": False,
            "mask_token_id": MASK_ID["llada"], "eos_token_id": EOS_ID, "pad_token_id": EOS_ID,
            # <|eot_id|> for --confidence-eos-eot-inf (126348, the real checkpoints' id, is the
            # default): a token this random model favours, so the flag changes its trajectories
            "eot_token_id": 7,
            "use_cache": False, "torch_dtype": "bfloat16",
        }
    base = {
        "vocab_size": f["vocab"], "hidden_size": f["hidden"], "intermediate_size": f["inter"],
        "num_hidden_layers": f["layers"], "num_attention_heads": f["heads"], "num_key_value_heads": f["kv_heads"],
        "head_dim": f["head_dim"], "hidden_act": "silu", "max_position_embeddings": 32768,
        "rms_norm_eps": f["eps"], "rope_theta": f["theta"], "rope_scaling": None,
        "tie_word_embeddings": f["tie"], "use_sliding_window": False, "sliding_window": None,
        "bos_token_id": EOS_ID, "eos_token_id": EOS_ID, "torch_dtype": "bfloat16",
    }
    if fam == "sdar":
        base.update({"architectures": ["SDARForCausalLM"], "model_type": "sdar", "attention_bias": False,
                     "mask_token_id": MASK_ID["sdar"], "block_size": 4, "attn_implementation": "flex_attention",
                     "auto_map": {"AutoConfig": "configuration_sdar.SDARConfig",
                                  "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"}})
    elif fam == "wedlm":
        base.update({"architectures": ["WeDLMForCausalLM"], "model_type": "wedlm", "attention_bias": f["bias"],
                     "qk_norm": f["qk_norm"], "mask_token_id": MASK_ID["wedlm"]})
    elif fam == "fast_dllm_v2":
        base.update({"architectures": ["Fast_dLLM_QwenForCausalLM"], "model_type": "Fast_dLLM_Qwen",
                     "bd_size": 32, "mask_token_id": MASK_ID["fast_dllm_v2"],
                     "layer_types": ["full_attention"] * f["layers"],
                     "auto_map": {"AutoConfig": "configuration.Fast_dLLM_QwenConfig",
                                  "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM"}})
    elif fam == "dream":
        base.update({"architectures": ["DreamModel"], "model_type": "Dream", "mask_token_id": MASK_ID["dream"],
                     "pad_token_id": EOS_ID, "use_cache": False,
                     "auto_map": {"AutoConfig": "configuration_dream.DreamConfig",
                                  "AutoModel": "modeling_dream.DreamModel"}})
    return base


def hf_model(f):
    import transformers as tf
    common = dict(vocab_size=f["vocab"], hidden_size=f["hidden"], intermediate_size=f["inter"],
                  num_hidden_layers=f["layers"], num_attention_heads=f["heads"], num_key_value_heads=f["kv_heads"],
                  head_dim=f["head_dim"], rms_norm_eps=f["eps"], tie_word_embeddings=f["tie"],
                  max_position_embeddings=4096, attn_implementation="eager")
    rope = {"rope_type": "default", "rope_theta": f["theta"]}
    if f["hf"] == "qwen3":
        cfg = tf.Qwen3Config(attention_bias=f["bias"], rope_parameters=rope, **common)
        model = tf.Qwen3ForCausalLM(cfg)
    elif f["hf"] == "qwen2":
        cfg = tf.Qwen2Config(rope_parameters=rope, **common)
        model = tf.Qwen2ForCausalLM(cfg)
    else:
        cfg = tf.LlamaConfig(attention_bias=False, mlp_bias=False, rope_parameters=rope, **common)
        model = tf.LlamaForCausalLM(cfg)
    return model.float().eval()


def randomize(model, gen):
    """Random weights with enough spread that every op matters; norm weights near (not at) 1."""
    for name, p in model.named_parameters():
        if "norm" in name:
            v = 1.0 + 0.2 * torch.randn(p.shape, generator=gen)
        elif name.endswith("bias"):
            v = 0.2 * torch.randn(p.shape, generator=gen)
        elif "embed" in name:
            v = 1.0 * torch.randn(p.shape, generator=gen)
        else:
            v = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1])
        # Round to bf16: the checkpoint stores bf16, the reference computes with exactly those values.
        p.copy_(v.to(torch.bfloat16).to(torch.float32))


def checkpoint_tensors(f, model):
    sd = {k: v for k, v in model.state_dict().items()}
    if f["tie"]:
        sd.pop("lm_head.weight", None)
    if f["hf"] == "qwen2" and not f["bias"]:
        raise AssertionError("qwen2 fixtures carry biases")
    if f["family"] != "llada":
        return {k: v.to(torch.bfloat16).contiguous() for k, v in sd.items()}
    ren = {}
    for k, v in sd.items():
        n = k
        n = n.replace("model.embed_tokens.weight", "model.transformer.wte.weight")
        n = n.replace("model.norm.weight", "model.transformer.ln_f.weight")
        n = n.replace("lm_head.weight", "model.transformer.ff_out.weight")
        if n.startswith("model.layers."):
            parts = n.split(".")
            i, rest = parts[2], ".".join(parts[3:])
            rest = {
                "self_attn.q_proj.weight": "q_proj.weight", "self_attn.k_proj.weight": "k_proj.weight",
                "self_attn.v_proj.weight": "v_proj.weight", "self_attn.o_proj.weight": "attn_out.weight",
                "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ff_norm.weight",
                "mlp.gate_proj.weight": "ff_proj.weight", "mlp.up_proj.weight": "up_proj.weight",
                "mlp.down_proj.weight": "ff_out.weight",
            }[rest]
            n = f"model.transformer.blocks.{i}.{rest}"
        ren[n] = v.to(torch.bfloat16).contiguous()
    return ren


def write_checkpoint(out_dir, f, tensors):
    meta = {"format": "pt"}
    shards = f.get("shards", 1)
    if shards == 1:
        save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata=meta)
        return
    names = sorted(tensors)
    weight_map = {}
    total = 0
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        save_file(part, os.path.join(out_dir, fname), metadata=meta)
        for n in part:
            weight_map[n] = fname
            total += part[n].numel() * part[n].element_size()
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh, indent=2)


def visibility(rule, positions):
    n = len(positions)
    if rule == "causal":
        return np.tril(np.ones((n, n), dtype=bool))
    if rule == "bidirectional":
        return np.ones((n, n), dtype=bool)
    b = int(rule.split(":")[1])
    blk = np.asarray(positions) // b
    return blk[None, :] <= blk[:, None]


def reference_logits(model, ids, positions, rule):
    vis = torch.from_numpy(visibility(rule, positions))
    additive = torch.zeros(vis.shape, dtype=torch.float32).masked_fill(~vis, torch.finfo(torch.float32).min)
    out = model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]),
                attention_mask=additive[None, None], use_cache=False)
    return out.logits[0].float().numpy()


def plain_torch_logits(f, model, ids, positions, rule):
    """Independent fp32 forward from the state dict, used only to cross-check transformers."""
    sd = model.state_dict()
    H, KV, D = f["heads"], f["kv_heads"], f["head_dim"]
    x = sd["model.embed_tokens.weight"][torch.tensor(ids)]
    pos = torch.tensor(positions, dtype=torch.float32)
    inv = 1.0 / (f["theta"] ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    ang = pos[:, None] * inv[None, :]
    cos, sin = torch.cos(ang), torch.sin(ang)

    def rms(v, w):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + f["eps"]) * w

    def rope(t):  # t [n, heads, D]
        a, b = t[..., : D // 2], t[..., D // 2:]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.cat([a * c - b * s, b * c + a * s], -1)

    vis = torch.from_numpy(visibility(rule, positions))
    n = len(ids)
    for i in range(f["layers"]):
        p = f"model.layers.{i}."
        h = rms(x, sd[p + "input_layernorm.weight"])
        q = h @ sd[p + "self_attn.q_proj.weight"].T
        k = h @ sd[p + "self_attn.k_proj.weight"].T
        v = h @ sd[p + "self_attn.v_proj.weight"].T
        if f["bias"]:
            q, k, v = q + sd[p + "self_attn.q_proj.bias"], k + sd[p + "self_attn.k_proj.bias"], v + sd[p + "self_attn.v_proj.bias"]
        q, k, v = q.view(n, H, D), k.view(n, KV, D), v.view(n, KV, D)
        if f["qk_norm"]:
            q, k = rms(q, sd[p + "self_attn.q_norm.weight"]), rms(k, sd[p + "self_attn.k_norm.weight"])
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(D)
        s = s.masked_fill(~vis[None], float("-inf")).softmax(-1)
        o = torch.einsum("hqk,khd->qhd", s, v).reshape(n, H * D)
        x = x + o @ sd[p + "self_attn.o_proj.weight"].T
        h = rms(x, sd[p + "post_attention_layernorm.weight"])
        g = h @ sd[p + "mlp.gate_proj.weight"].T
        u = h @ sd[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ sd[p + "mlp.down_proj.weight"].T
    x = rms(x, sd["model.norm.weight"])
    head = sd["model.embed_tokens.weight"] if f["tie"] else sd["lm_head.weight"]
    return (x @ head.T).numpy()


def make_cases(f, gen):
    """Each case: ids, positions, rule. Covers every rule, non-contiguous and permuted positions."""
    vocab = f["vocab"]
    rnd = lambda n: torch.randint(0, vocab, (n,), generator=gen).tolist()
    perm = torch.randperm(12, generator=gen).tolist()
    cases = [
        dict(ids=rnd(11), positions=list(range(11)), attention="causal"),
        dict(ids=rnd(10), positions=list(range(10)), attention="bidirectional"),
        dict(ids=rnd(13), positions=list(range(13)), attention="block:4"),
        # Blocks align to absolute positions: a sequence starting at 2 splits blocks mid-way.
        dict(ids=rnd(9), positions=list(range(2, 11)), attention="block:4"),
        # WeDLM-style: tokens stored in a physical order other than their logical positions.
        dict(ids=rnd(12), positions=perm, attention="causal"),
        dict(ids=rnd(12), positions=perm, attention="bidirectional"),
        # Large positions stress RoPE angles.
        dict(ids=rnd(6), positions=[1000, 1001, 1002, 5000, 5001, 20000], attention="block:3"),
    ]
    # Include the mask id and eos somewhere, like real decoding inputs.
    cases[2]["ids"][-3:] = [MASK_ID[f["family"]]] * 3
    return cases


def build(f, out_root, seed):
    gen = torch.Generator().manual_seed(seed)
    out_dir = os.path.join(out_root, f["name"])
    os.makedirs(out_dir, exist_ok=True)
    for old in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, old))
    model = hf_model(f)
    randomize(model, gen)
    write_checkpoint(out_dir, f, checkpoint_tensors(f, model))
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(family_config(f), fh, indent=2)
    gen_cfg = {"eos_token_id": [IM_END_ID, EOS_ID] if f["family"] in ("sdar", "wedlm") else EOS_ID,
               "pad_token_id": EOS_ID}
    with open(os.path.join(out_dir, "generation_config.json"), "w") as fh:
        json.dump(gen_cfg, fh, indent=2)

    cases = make_cases(f, gen)
    for k, c in enumerate(cases):
        ref = reference_logits(model, c["ids"], c["positions"], c["attention"])
        alt = plain_torch_logits(f, model, c["ids"], c["positions"], c["attention"])
        rel = np.linalg.norm(ref - alt) / np.linalg.norm(ref)
        assert rel < 1e-5, f"{f['name']} case {k}: transformers and plain torch disagree ({rel:.2e})"
        c["logits"] = f"case_{k}.npy"
        np.save(os.path.join(out_dir, c["logits"]), ref.astype(np.float32))
        print(f"{f['name']:20s} case {k}: {c['attention']:13s} n={len(c['ids']):2d} "
              f"|logits|={np.linalg.norm(ref):8.2f} hf-vs-torch={rel:.1e}")
    with open(os.path.join(out_dir, "cases.json"), "w") as fh:
        json.dump({"family": f["family"], "reference": "transformers " + __import__("transformers").__version__
                   + " / torch " + torch.__version__ + ", fp32 on bf16-rounded weights", "cases": cases}, fh, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/models")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    for i, f in enumerate(FIXTURES):
        build(f, args.out, args.seed + i)


if __name__ == "__main__":
    main()
