"""Loads our tiny fixture checkpoints (tests/fixtures/models/*) into the equivalent transformers
model class, fp32, for reference decoding. Shared by the reference scripts in tools/.

The forward used by references is a full recompute with an explicit 4D mask: for block-causal
and causal rules that equals running on top of a prefix KV cache, so references need no cache.
"""
import json
import os

import numpy as np
import torch
from safetensors.torch import load_file

torch.set_grad_enabled(False)
torch.set_num_threads(1)

LLADA_RENAMES = {
    "q_proj.weight": "self_attn.q_proj.weight", "k_proj.weight": "self_attn.k_proj.weight",
    "v_proj.weight": "self_attn.v_proj.weight", "attn_out.weight": "self_attn.o_proj.weight",
    "attn_norm.weight": "input_layernorm.weight", "ff_norm.weight": "post_attention_layernorm.weight",
    "ff_proj.weight": "mlp.gate_proj.weight", "up_proj.weight": "mlp.up_proj.weight",
    "ff_out.weight": "mlp.down_proj.weight",
}


class ReferenceModel:
    def __init__(self, model_dir):
        import transformers as tf
        self.dir = model_dir
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        self.cfg = cfg
        self.family = {"sdar": "sdar", "wedlm": "wedlm", "Fast_dLLM_Qwen": "fast_dllm_v2", "Dream": "dream",
                       "llada": "llada"}[cfg["model_type"]]
        tensors = {}
        if os.path.exists(os.path.join(model_dir, "model.safetensors.index.json")):
            index = json.load(open(os.path.join(model_dir, "model.safetensors.index.json")))
            for shard in sorted(set(index["weight_map"].values())):
                tensors.update(load_file(os.path.join(model_dir, shard)))
        else:
            tensors = load_file(os.path.join(model_dir, "model.safetensors"))
        tensors = {k: v.float() for k, v in tensors.items()}
        if self.family == "llada":
            hidden, layers, heads = cfg["d_model"], cfg["n_layers"], cfg["n_heads"]
            common = dict(vocab_size=cfg["embedding_size"], hidden_size=hidden, intermediate_size=cfg["mlp_hidden_size"],
                          num_hidden_layers=layers, num_attention_heads=heads,
                          num_key_value_heads=cfg.get("n_kv_heads", heads), head_dim=hidden // heads,
                          rms_norm_eps=cfg["rms_norm_eps"], tie_word_embeddings=cfg.get("weight_tying", False),
                          rope_parameters={"rope_type": "default", "rope_theta": cfg["rope_theta"]},
                          max_position_embeddings=4096, attn_implementation="eager")
            model = tf.LlamaForCausalLM(tf.LlamaConfig(attention_bias=False, mlp_bias=False, **common))
            sd = {}
            for k, v in tensors.items():
                if k == "model.transformer.wte.weight":
                    sd["model.embed_tokens.weight"] = v
                elif k == "model.transformer.ln_f.weight":
                    sd["model.norm.weight"] = v
                elif k == "model.transformer.ff_out.weight":
                    sd["lm_head.weight"] = v
                else:
                    parts = k.split(".")
                    sd[f"model.layers.{parts[3]}." + LLADA_RENAMES[".".join(parts[4:])]] = v
            self.mask_id = cfg["mask_token_id"]
        else:
            common = dict(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                          intermediate_size=cfg["intermediate_size"], num_hidden_layers=cfg["num_hidden_layers"],
                          num_attention_heads=cfg["num_attention_heads"], num_key_value_heads=cfg["num_key_value_heads"],
                          head_dim=cfg["head_dim"], rms_norm_eps=cfg["rms_norm_eps"],
                          tie_word_embeddings=cfg["tie_word_embeddings"],
                          rope_parameters={"rope_type": "default", "rope_theta": cfg["rope_theta"]},
                          max_position_embeddings=4096, attn_implementation="eager")
            qk_norm = self.family == "sdar" or (self.family == "wedlm" and cfg.get("qk_norm", not cfg.get("attention_bias")))
            if qk_norm:
                model = tf.Qwen3ForCausalLM(tf.Qwen3Config(attention_bias=cfg.get("attention_bias", False), **common))
            else:
                model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**common))
            sd = dict(tensors)
            self.mask_id = cfg["mask_token_id"]
        if common["tie_word_embeddings"]:
            sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
        missing, unexpected = model.load_state_dict(sd, strict=False)
        missing = [m for m in missing if "rotary" not in m]
        assert not missing and not unexpected, (missing, unexpected)
        self.model = model.float().eval()
        self.vocab = common["vocab_size"]

    def logits(self, ids, positions, visible):
        """ids/positions: lists; visible: bool array [n, n]. Returns float32 logits [n, vocab]."""
        vis = torch.as_tensor(np.asarray(visible, dtype=bool))
        additive = torch.zeros(vis.shape, dtype=torch.float32).masked_fill(~vis, torch.finfo(torch.float32).min)
        out = self.model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]),
                         attention_mask=additive[None, None], use_cache=False)
        return out.logits[0].float()


def block_causal_visible(positions, block):
    blk = np.asarray(positions) // block
    return blk[None, :] <= blk[:, None]


def causal_visible(n):
    return np.tril(np.ones((n, n), dtype=bool))
