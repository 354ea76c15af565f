#!/usr/bin/env python3
"""Writes models/<name>/README.md (the model card) from the training log (log.json, loss.png) and
the held-out evaluation through `dllm generate` (eval_models.py --json).

    python3 tools/train/write_model_cards.py --models models --eval eval-a.json eval-b.json \
        --samples samples.json
"""
import argparse
import json
import os

OBJECTIVE = {
    "tiny-block": "SDAR block diffusion: two streams [noisy | clean] with the segment's positions; "
                  "clean queries attend block-causally to clean keys (the prefix KV cache at "
                  "inference), noisy queries of block b to clean blocks < b and bidirectionally "
                  "inside their own noisy block; per block a mask ratio t ~ U(0,1); loss = "
                  "cross-entropy on masked tokens (MAGE paper Eq. 4). 30 % of rows use block size "
                  "1 with every answer token masked: the autoregressive objective, so block size 1 "
                  "(the AR decoder, S2D2's verifier) works too.",
    "tiny-full": "LLaDA masked diffusion: one stream, bidirectional inside each packed segment, "
                 "t ~ U(0,1) per segment, loss = sum of CE / t over masked answer tokens / number "
                 "of answer tokens (WeDLM paper Eq. 3). Answers are followed by 0-24 "
                 "<|endoftext|> (LLaDA's SFT padding) so the model fills a fixed canvas.",
    "tiny-causal": "WeDLM causal diffusion (paper §4): [memory (clean) | prediction] streams with "
                   "shared positions; prediction blocks of 16 or 8 with a per-block mask ratio, "
                   "masked tokens reordered after the observed ones under causal attention "
                   "(topological reordering, dual-stream masking); loss = CE / ratio on masked "
                   "tokens (Eq. 10) + the auxiliary next-token loss on the memory stream. Rows "
                   "with block 1 train the engine's AR decoder.",
}
FAMILY = {"tiny-block": "SDAR (`model_type: sdar`, Qwen3 layers: q/k norm, GQA, SwiGLU, RoPE)",
          "tiny-full": "LLaDA (`model_type: llada`, Llama layers, bidirectional)",
          "tiny-causal": "WeDLM (`model_type: wedlm`, Qwen3 layers, causal)"}
DECODERS = {"tiny-block": "`block` (default), `ar`, `s2d2`", "tiny-full": "`full` (default), `d2cache`, "
            "`fastdllm`, `dllmcache`", "tiny-causal": "`wedlm` (default), `ar`"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="models")
    ap.add_argument("--eval", nargs="*", default=[])
    ap.add_argument("--samples", default="", help="JSON {model: [[prompt, output], ...]}")
    args = ap.parse_args()
    rows = []
    for f in args.eval:
        with open(f) as fh:
            rows += json.load(fh)
    samples = {}
    if args.samples:
        with open(args.samples) as fh:
            samples = json.load(fh)
    for name in OBJECTIVE:
        d = os.path.join(args.models, name)
        if not os.path.isdir(d):
            continue
        with open(os.path.join(d, "log.json")) as fh:
            log = json.load(fh)
        a = log["args"]
        size = os.path.getsize(os.path.join(d, "model.safetensors"))
        val = log["val"][-1] if log.get("val") else {}
        lines = [
            f"# {name}",
            "",
            f"An embedded default model of dllm, trained by the project from scratch (issue 10): "
            f"{log['params'] / 1e6:.2f} M parameters, {FAMILY[name]}, stored in the family's exact "
            f"Hugging Face on-disk format (config.json, model.safetensors in bf16 "
            f"({size / 2**20:.1f} MiB), generation_config.json, tokenizer.json, "
            f"tokenizer_config.json with a ChatML chat template), so the normal loaders read it.",
            "",
            f"Decoders: {DECODERS[name]} (`dllm generate -m models/{name} --strategy ...`).",
            "",
            "## Shape",
            "",
            f"hidden {a['hidden']}, {a['layers']} layers, {a['heads']} query / {a['kv_heads']} "
            f"key-value heads, SwiGLU {a['inter']}, vocabulary 4096 (byte-level BPE trained on "
            f"the corpus, `models/tokenizer/`; `<|endoftext|>` 4092, `<|im_start|>` 4093, "
            f"`<|im_end|>` 4094, `<|mask|>` 4095), RoPE θ 10000, up to 8192 positions.",
            "",
            "## Data",
            "",
            "`tools/train/make_data.py`: English prose (Brown corpus from ../shared/data/brown, "
            "GCIDE dictionary, WordNet glosses, fortunes from Debian packages) and synthetic chat "
            "tasks with exact answers — 2-4 digit addition, 3-digit subtraction, sorting, "
            "reversing letters and lists, counting, copying, key-value recall over short and "
            "long (up to ~4K tokens) contexts. The held-out split (`heldout/*.jsonl`) is "
            "generated with its own seed and every training sample equal to a held-out prompt "
            "is rejected.",
            "",
            "## Objective",
            "",
            OBJECTIVE[name],
            "",
            "## Training",
            "",
            f"One NVIDIA H100 (the project's GPU machine), bf16 autocast, AdamW (lr {a['lr']}, "
            f"warm-up {a['warmup']}, cosine to {a['lr_floor']}×, weight decay "
            f"{a['weight_decay']}), batches of {a['rows']} rows × {a['seq_len']} tokens (every "
            f"{a['long_every']}th batch {a['long_rows']} × {a['long_len']}), seed {a['seed']}: "
            f"{log['steps']} steps in {log['train_seconds']:.0f} s. Final validation loss "
            f"{val.get('loss', float('nan')):.3f} (masked-token CE {val.get('ce_masked', float('nan')):.3f}).",
            "",
            "```",
            "python3 tools/train/make_data.py --out build/train-data",
            "BUDGET=400 tools/train/gpu_train.sh build/train-data   # the three models at once, or:",
            f"python3 tools/train/train.py --model {name} --data build/train-data --out OUT "
            f"--layers {a['layers']} --hidden {a['hidden']} --heads {a['heads']} --kv-heads "
            f"{a['kv_heads']} --inter {a['inter']} --time-budget {a['time_budget']:.0f} "
            f"--seed {a['seed']}",
            "```",
            "",
            "![loss curve](loss.png)",
            "",
            "## Held-out accuracy through `dllm generate`",
            "",
            "Exact match of the answer (text up to `<|im_end|>`), greedy, CPU backend, "
            "`tools/train/eval_models.py` (n examples per task from the held-out split; tokens / "
            "forward counts every forward of the request, the prompt's prefill included, so short "
            "answers sit below 1):",
            "",
            "| decoder | task | exact match | tokens / forward |",
            "|---|---|---|---|",
        ]
        for r in rows:
            if r["model"] == name:
                lines.append(f"| {r['decoder']} | {r['task']} | {r['accuracy']:.0%} "
                             f"({r['correct']}/{r['n']}) | {r['tokens_per_forward']:.2f} |")
        if any(r["model"] == name and r["samples"] for r in rows):
            lines += ["", "Samples (held-out prompt → output):", ""]
        shown = 0
        for r in rows:
            if r["model"] == name and shown < 6 and r["samples"]:
                s = r["samples"][0]
                lines.append(f"- [{r['decoder']}] `{s['prompt'][:90]}` → `{s['got'][:90]}` "
                             f"(answer `{s['answer'][:60]}`)")
                shown += 1
        for prompt, out in samples.get(name, []):
            lines += ["", f"Text prompt `{prompt}` →", "", f"> {out}"]
        lines += ["", "Limits: a 6.6M-parameter model trained for minutes — arithmetic, sorting "
                  "and reversal are learned; long-context key-value recall and counting are not "
                  "(see the table); prose continuations are English-like but not coherent.", ""]
        with open(os.path.join(d, "README.md"), "w") as fh:
            fh.write("\n".join(lines))


if __name__ == "__main__":
    main()
