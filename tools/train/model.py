"""The tiny transformer trained for the embedded models, and its checkpoint writer.

One PyTorch module covers the three families we train (they share the math of model-specs §1.3 /
§2.2 / §4.3): pre-norm RMSNorm, q/k/v projections, optional per-head q/k RMSNorm before RoPE
(SDAR, WeDLM: yes; LLaDA: no), NeoX RoPE on explicit logical positions, GQA, SwiGLU MLP, final
norm, untied LM head. Attention takes an explicit boolean mask [batch, queries, keys] (or a
flex_attention BlockMask built from the same rule, which skips the masked tiles), so every training
layout (two-stream block diffusion, WeDLM dual stream with reordering, bidirectional packed
segments) goes through the same code.

Parameter names are Hugging Face Qwen3 names (model.layers.{i}.self_attn.q_proj.weight, ...);
`save_checkpoint` renames them for LLaDA (model.transformer.blocks.{i}.*) and writes config.json in
each family's own dialect, exactly as tools/make_fixtures.py does for the parity fixtures.
"""
import json
import math
import os
import struct
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

try:  # torch >= 2.5: block-sparse attention from a mask rule (the SDAR two-stream layout)
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
except ImportError:  # older torch: dense boolean masks only
    BlockMask = flex_attention = None
_flex_compiled = None


def flex(q, k, v, block_mask):
    """flex_attention with GQA; compiled on the GPU (eager flex is a slow reference), eager on
    the CPU (check_two_streams.py compares it there against the dense mask)."""
    global _flex_compiled
    if not q.is_cuda:
        return flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)
    if _flex_compiled is None:
        _flex_compiled = torch.compile(flex_attention, dynamic=False)
    return _flex_compiled(q, k, v, block_mask=block_mask, enable_gqa=True)


@dataclass
class ModelConfig:
    family: str = "sdar"          # sdar | llada | wedlm
    vocab_size: int = 4096
    hidden: int = 256
    layers: int = 8
    heads: int = 8
    kv_heads: int = 2
    head_dim: int = 32
    inter: int = 768
    rope_theta: float = 10000.0
    eps: float = 1e-6
    max_positions: int = 8192
    block_size: int = 4            # SDAR only: config.json block_size (the trained B)

    @property
    def qk_norm(self):
        return self.family in ("sdar", "wedlm")


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        # Hugging Face order: normalise in fp32, cast back, then multiply by the weight.
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)


def rope_cos_sin(positions, head_dim, theta):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    ang = positions.float()[..., None] * inv                   # [B, T, D/2]
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x, cos, sin):
    # x [B, H, T, D]; NeoX half split (rotate_half).
    d = x.shape[-1] // 2
    a, b = x[..., :d].float(), x[..., d:].float()
    c, s = cos[:, None], sin[:, None]
    return torch.cat([a * c - b * s, b * c + a * s], -1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.hidden, c.heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.eps)
            self.k_norm = RMSNorm(c.head_dim, c.eps)

    def forward(self, x, cos, sin, mask):
        c = self.c
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, c.heads, c.head_dim)
        k = self.k_proj(x).view(B, T, c.kv_heads, c.head_dim)
        v = self.v_proj(x).view(B, T, c.kv_heads, c.head_dim)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if BlockMask is not None and isinstance(mask, BlockMask):
            # v is autocast's dtype (a Linear output); q/k left the fp32 norm and RoPE. SDPA casts
            # all three under autocast, flex_attention does not.
            o = flex(q.to(v.dtype), k.to(v.dtype), v, mask)
            return self.o_proj(o.transpose(1, 2).reshape(B, T, c.heads * c.head_dim))
        rep = c.heads // c.kv_heads
        if rep > 1:  # explicit GQA expansion keeps the memory-efficient SDPA kernel (masks) usable
            k = k.repeat_interleave(rep, 1)
            v = v.repeat_interleave(rep, 1)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        return self.o_proj(o.transpose(1, 2).reshape(B, T, c.heads * c.head_dim))


class MLP(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden, c.inter, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.inter, bias=False)
        self.down_proj = nn.Linear(c.inter, c.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden, c.eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden)
        self.layers = nn.ModuleList([Layer(c) for _ in range(c.layers)])
        self.norm = RMSNorm(c.hidden, c.eps)


class TinyLM(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.config = c
        self.model = Backbone(c)
        self.lm_head = nn.Linear(c.hidden, c.vocab_size, bias=False)
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif "o_proj" in name or "down_proj" in name:
                nn.init.normal_(p, std=std / math.sqrt(2 * self.config.layers))
            else:
                nn.init.normal_(p, std=std)

    def hidden_states(self, tokens, positions, mask):
        """tokens, positions [B, T] (logical RoPE positions); mask [B, T, T] bool (True = may attend)."""
        x = self.model.embed_tokens(tokens)
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        return self.model.norm(x)

    def forward(self, tokens, positions, mask):
        return self.lm_head(self.hidden_states(tokens, positions, mask))

    def num_params(self):
        return sum(p.numel() for p in self.parameters())


# ---------------------------------------------------------------------------------------------
# Checkpoints in each family's on-disk format

LLADA_NAMES = {
    "self_attn.q_proj.weight": "q_proj.weight", "self_attn.k_proj.weight": "k_proj.weight",
    "self_attn.v_proj.weight": "v_proj.weight", "self_attn.o_proj.weight": "attn_out.weight",
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ff_norm.weight",
    "mlp.gate_proj.weight": "ff_proj.weight", "mlp.up_proj.weight": "up_proj.weight",
    "mlp.down_proj.weight": "ff_out.weight",
}


def family_tensor_names(c: ModelConfig, state_dict):
    if c.family != "llada":
        return dict(state_dict)
    out = {}
    for k, v in state_dict.items():
        if k == "model.embed_tokens.weight":
            out["model.transformer.wte.weight"] = v
        elif k == "model.norm.weight":
            out["model.transformer.ln_f.weight"] = v
        elif k == "lm_head.weight":
            out["model.transformer.ff_out.weight"] = v
        else:
            parts = k.split(".")
            out[f"model.transformer.blocks.{parts[2]}." + LLADA_NAMES[".".join(parts[3:])]] = v
    return out


def from_family_tensor_names(c: ModelConfig, tensors):
    if c.family != "llada":
        return dict(tensors)
    inv = {v: k for k, v in LLADA_NAMES.items()}
    out = {}
    for k, v in tensors.items():
        if k == "model.transformer.wte.weight":
            out["model.embed_tokens.weight"] = v
        elif k == "model.transformer.ln_f.weight":
            out["model.norm.weight"] = v
        elif k == "model.transformer.ff_out.weight":
            out["lm_head.weight"] = v
        else:
            parts = k.split(".")
            out[f"model.layers.{parts[3]}." + inv[".".join(parts[4:])]] = v
    return out


def family_config(c: ModelConfig, ids):
    """config.json in the family's dialect. ids: special token ids (from the tokenizer)."""
    eos, im_end, mask = ids["<|endoftext|>"], ids["<|im_end|>"], ids["<|mask|>"]
    if c.family == "llada":
        return {
            "architectures": ["LLaDAModelLM"], "model_type": "llada",
            "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig",
                         "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM"},
            "d_model": c.hidden, "n_layers": c.layers, "n_heads": c.heads, "n_kv_heads": c.kv_heads,
            "mlp_hidden_size": c.inter, "mlp_ratio": c.inter / c.hidden, "vocab_size": c.vocab_size,
            "embedding_size": c.vocab_size, "max_sequence_length": c.max_positions, "rope": True,
            "rope_full_precision": True, "rope_theta": c.rope_theta, "rms_norm_eps": c.eps,
            "layer_norm_type": "rms", "activation_type": "silu", "block_type": "llama",
            "attention_layer_norm": False, "include_bias": False, "include_qkv_bias": False,
            "input_emb_norm": False, "scale_logits": False, "weight_tying": False, "flash_attention": False,
            "mask_token_id": mask, "eos_token_id": eos, "pad_token_id": eos, "use_cache": False,
            "torch_dtype": "bfloat16",
        }
    assert c.head_dim * c.heads == c.hidden or c.family != "llada"
    base = {
        "vocab_size": c.vocab_size, "hidden_size": c.hidden, "intermediate_size": c.inter,
        "num_hidden_layers": c.layers, "num_attention_heads": c.heads, "num_key_value_heads": c.kv_heads,
        "head_dim": c.head_dim, "hidden_act": "silu", "max_position_embeddings": c.max_positions,
        "rms_norm_eps": c.eps, "rope_theta": c.rope_theta, "rope_scaling": None,
        "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
        "attention_bias": False, "bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos,
        "mask_token_id": mask, "torch_dtype": "bfloat16",
    }
    if c.family == "sdar":
        base.update({"architectures": ["SDARForCausalLM"], "model_type": "sdar", "block_size": c.block_size,
                     "attn_implementation": "flex_attention",
                     "auto_map": {"AutoConfig": "configuration_sdar.SDARConfig",
                                  "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"}})
    elif c.family == "wedlm":
        base.update({"architectures": ["WeDLMForCausalLM"], "model_type": "wedlm", "qk_norm": True})
    else:
        raise ValueError(c.family)
    return base


def write_safetensors(path, tensors, metadata=None):
    """Minimal safetensors writer (bf16/f32), so the GPU machine needs no extra package."""
    dtypes = {torch.bfloat16: "BF16", torch.float32: "F32", torch.float16: "F16"}
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)))
        fh.write(h)
        for b in blobs:
            fh.write(b)


def write_sharded_safetensors(out_dir, tensors, metadata, max_shard_bytes):
    """model.safetensors, or with max_shard_bytes > 0 and more bytes than that, shards
    model-0000i-of-0000n.safetensors of at most max_shard_bytes each (a tensor never split) and
    Hugging Face's model.safetensors.index.json naming each tensor's file (the device tool returns
    files of at most 16 MiB)."""
    def nbytes(t):
        return t.numel() * t.element_size()
    total = sum(nbytes(t) for t in tensors.values())
    if max_shard_bytes <= 0 or total <= max_shard_bytes:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, metadata)
        return
    shards, size = [[]], 0
    for name in sorted(tensors):
        if shards[-1] and size + nbytes(tensors[name]) > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes(tensors[name])
    weight_map = {}
    for i, names in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(out_dir, fname), {n: tensors[n] for n in names}, metadata)
        weight_map.update({n: fname for n in names})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh, indent=2)


def read_checkpoint_tensors(ckpt_dir):
    """Every tensor of model.safetensors or of the shards its index names."""
    index = os.path.join(ckpt_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(ckpt_dir, "model.safetensors"))
    with open(index) as fh:
        files = sorted(set(json.load(fh)["weight_map"].values()))
    out = {}
    for f in files:
        out.update(read_safetensors(os.path.join(ckpt_dir, f)))
    return out


def read_safetensors(path):
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        data = fh.read()
    dt = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16}
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=dt[h["dtype"]]).reshape(h["shape"]).clone()
    return out


def save_checkpoint(model: TinyLM, out_dir, ids, tokenizer_dir, extra_generation=None, max_shard_bytes=0):
    c = model.config
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    write_sharded_safetensors(out_dir, family_tensor_names(c, sd), {"format": "pt"}, max_shard_bytes)
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(family_config(c, ids), fh, indent=2)
    gen = {"eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]], "pad_token_id": ids["<|endoftext|>"]}
    if c.family == "llada":
        gen = {"eos_token_id": ids["<|endoftext|>"], "pad_token_id": ids["<|endoftext|>"]}
    gen.update(extra_generation or {})
    with open(os.path.join(out_dir, "generation_config.json"), "w") as fh:
        json.dump(gen, fh, indent=2)
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        with open(os.path.join(tokenizer_dir, f), "rb") as src, open(os.path.join(out_dir, f), "wb") as dst:
            dst.write(src.read())
    with open(os.path.join(out_dir, "train_config.json"), "w") as fh:
        json.dump(asdict(c), fh, indent=2)


def load_checkpoint(ckpt_dir):
    """Reads back a checkpoint written by save_checkpoint into a TinyLM (fp32, bf16-rounded weights)."""
    with open(os.path.join(ckpt_dir, "train_config.json")) as fh:
        c = ModelConfig(**json.load(fh))
    model = TinyLM(c)
    tensors = from_family_tensor_names(c, read_checkpoint_tensors(ckpt_dir))
    model.load_state_dict({k: v.float() for k, v in tensors.items()})
    return model
