#!/usr/bin/env python3
"""Peer baseline for `dllm bench`, on the GPU machine: the same denoising step in Hugging Face
transformers (SDPA attention) and PyTorch SDPA alone, on the same shapes.

  python3 tools/bench_torch.py --shape configs/sdar-8b.json --block 32 --context 4096,32768 --json out.json

Step: B query tokens at positions C..C+B-1 attend (bidirectionally inside the block) to a cached
prefix of C random K/V per layer plus themselves; the cache is cropped back after every step.
"""
import argparse
import json
import statistics
import time

import torch


def time_ms(fn, reps, cuda=True, warmup=3):
    """Median ms of `reps` calls after `warmup`: CUDA events on the GPU, wall time on the CPU."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if not cuda:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
            continue
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def hf_config(shape):
    import transformers as tf
    c = json.load(open(shape))
    qk_norm = c["model_type"] in ("sdar", "wedlm")
    if c["model_type"] == "llada":
        kw = dict(vocab_size=c["embedding_size"], hidden_size=c["d_model"], intermediate_size=c["mlp_hidden_size"],
                  num_hidden_layers=c["n_layers"], num_attention_heads=c["n_heads"], num_key_value_heads=c["n_kv_heads"],
                  head_dim=c["d_model"] // c["n_heads"], rms_norm_eps=c["rms_norm_eps"])
        return tf.LlamaConfig(attn_implementation="sdpa", **kw), tf.LlamaForCausalLM
    kw = dict(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
              num_hidden_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
              num_key_value_heads=c["num_key_value_heads"], head_dim=c["head_dim"], rms_norm_eps=c["rms_norm_eps"],
              tie_word_embeddings=c.get("tie_word_embeddings", False), max_position_embeddings=262144)
    if qk_norm:
        return tf.Qwen3Config(attn_implementation="sdpa", **kw), tf.Qwen3ForCausalLM
    return tf.Qwen2Config(attn_implementation="sdpa", **kw), tf.Qwen2ForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--context", default="4096")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    from transformers import DynamicCache
    cfg, cls = hf_config(args.shape)
    with torch.device("cuda"):
        model = cls(cfg).to(torch.bfloat16).eval()
    L, KV, D, H = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, cfg.num_attention_heads
    B = args.block
    rows = []
    print(f"| context | block | transformers ms/step | SDPA ms (one layer) | SDPA GB/s |")
    print("|---|---|---|---|---|")
    for C in [int(x) for x in args.context.split(",")]:
        cache = DynamicCache()
        for layer in range(L):
            k = torch.randn(1, KV, C, D, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(1, KV, C, D, device="cuda", dtype=torch.bfloat16)
            cache.update(k, v, layer)
        ids = torch.randint(0, cfg.vocab_size, (1, B), device="cuda")
        pos = torch.arange(C, C + B, device="cuda")[None]
        mask = torch.ones(1, 1, B, C + B, dtype=torch.bool, device="cuda")

        def step():
            model(input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=cache, use_cache=True)
            cache.crop(C)

        hf_ms = time_ms(step, args.reps)
        q = torch.randn(1, H, B, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, KV, C + B, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, KV, C + B, D, device="cuda", dtype=torch.bfloat16)
        sdpa_ms = time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True), args.reps)
        gbs = 2 * KV * (C + B) * D * 2 / (sdpa_ms * 1e-3) / 1e9
        print(f"| {C} | {B} | {hf_ms:.2f} | {sdpa_ms:.3f} | {gbs:.0f} |", flush=True)
        rows.append(dict(context=C, block=B, transformers_ms=hf_ms, sdpa_ms=sdpa_ms, sdpa_gbs=gbs))
        del cache
        torch.cuda.empty_cache()
    if args.json:
        json.dump(dict(shape=args.shape, torch=torch.__version__, rows=rows), open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
