#!/usr/bin/env python3
"""A random LLaDA-architecture checkpoint of ~470M parameters for the llama.cpp side by side.

    make_llada_checkpoint.py OUT_DIR [--layers 12] [--seed 0]

Writes OUT_DIR/config.json (LLaDAModelLM, as GSAI-ML/LLaDA-8B-Instruct names its fields),
model.safetensors (bf16, LLaDA's tensor names) and the Qwen3 tokenizer of the test fixtures with
one added mask token (both engines need a tokenizer; convert_hf_to_gguf.py recognises Qwen's
pre-tokenizer). Shape: d_model 1024, 16 heads of 64, SwiGLU 2816, vocabulary 151936 (Qwen's padded
size), untied LM head: 2 x 155.6M (embedding, LM head) + 12 x 12.85M (layers) = 465M parameters.
Needs numpy only (the safetensors file is written by hand).
"""
import argparse
import json
import shutil
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "tests" / "fixtures" / "tokenizers" / "qwen3"
MASK = "<|mdm_mask|>"


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even fp32 -> bf16 bit patterns (what torch's .to(bfloat16) does)."""
    u = x.astype(np.float32).view(np.uint32)
    u = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return (u >> np.uint32(16)).astype(np.uint16)


def write_safetensors(path: Path, tensors: dict) -> None:
    header, offset, blobs = {}, 0, []
    for name, bits in tensors.items():
        raw = bits.tobytes()
        header[name] = {"dtype": "BF16", "shape": list(bits.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for raw in blobs:
            f.write(raw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    # Tokenizer: Qwen3's, plus the mask token LLaDA's decoding needs (llama.cpp reads it from
    # tokenizer_config.json's mask_token).
    tok = json.loads((TOKENIZER / "tokenizer.json").read_text())
    mask_id = max(t["id"] for t in tok["added_tokens"]) + 1
    tok["added_tokens"].append({"id": mask_id, "content": MASK, "single_word": False,
                                "lstrip": False, "rstrip": False, "normalized": False,
                                "special": True})
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    tcfg = json.loads((TOKENIZER / "tokenizer_config.json").read_text())
    tcfg["mask_token"] = MASK
    tcfg.setdefault("added_tokens_decoder", {})[str(mask_id)] = {
        "content": MASK, "lstrip": False, "normalized": False, "rstrip": False,
        "single_word": False, "special": True}
    tcfg.pop("chat_template", None)
    (out / "tokenizer_config.json").write_text(json.dumps(tcfg, ensure_ascii=False, indent=1))
    eos_id = next(t["id"] for t in tok["added_tokens"] if t["content"] == "<|im_end|>")

    d, heads, ffn, vocab = 1024, 16, 2816, 151936
    config = {
        "architectures": ["LLaDAModelLM"], "model_type": "llada",
        "d_model": d, "n_layers": args.layers, "n_heads": heads, "n_kv_heads": heads,
        "mlp_hidden_size": ffn, "vocab_size": vocab, "embedding_size": vocab,
        "max_sequence_length": 4096, "rope": True, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5, "layer_norm_type": "rms", "activation_type": "silu",
        "block_type": "llama", "include_bias": False, "include_qkv_bias": False,
        "weight_tying": False, "mask_token_id": mask_id, "eos_token_id": eos_id,
        "pad_token_id": eos_id, "torch_dtype": "bfloat16",
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))

    rng = np.random.default_rng(args.seed)

    def weight(*shape):  # std 0.02 like an initialised LLM; norms at 1
        return bf16_bits(rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02))

    ones = lambda n: bf16_bits(np.ones(n, np.float32))
    t = {"model.transformer.wte.weight": weight(vocab, d),
         "model.transformer.ln_f.weight": ones(d),
         "model.transformer.ff_out.weight": weight(vocab, d)}
    for i in range(args.layers):
        p = f"model.transformer.blocks.{i}."
        t[p + "attn_norm.weight"] = ones(d)
        t[p + "ff_norm.weight"] = ones(d)
        for name in ("q_proj", "k_proj", "v_proj", "attn_out"):
            t[p + name + ".weight"] = weight(d, d)
        t[p + "ff_proj.weight"] = weight(ffn, d)
        t[p + "up_proj.weight"] = weight(ffn, d)
        t[p + "ff_out.weight"] = weight(d, ffn)
    write_safetensors(out / "model.safetensors", dict(sorted(t.items())))
    params = sum(v.size for v in t.values())
    print(f"{out}: {params / 1e6:.1f}M parameters, mask token {mask_id}")


if __name__ == "__main__":
    main()
