#!/usr/bin/env python3
"""Held-out accuracy of the embedded models through `dllm generate` (not PyTorch): exact match of
the generated answer (text up to <|im_end|>, stripped) on the held-out chat tasks of make_data.py.
A task's examples run through one engine at once (`--requests`): a request's tokens do not depend
on what runs beside it.

    python3 tools/train/eval_models.py --dllm build/dllm --heldout build/train-data/heldout \
        --models models --n 50 [--json out.json] [--decoders tiny-block=block,ar ...]

Prints a Markdown table (model, decoder, task, accuracy, tokens per forward, the mean MAGE recall
of --sparse-recall runs) and optionally JSON. The long-context model (tiny-long, issue 21) runs
exact attention against MAGE / Quest / SparseD at k = 256 / 512 / 1024 on the needle tasks:

    python3 tools/train/eval_models.py --dllm gpu-bundle/bin/dllm --device cuda \
        --heldout DATA/heldout --models DIR --only tiny-long --tasks needle_4k,needle_8k,needle_16k
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# Decoders per model and the flags each needs (defaults are the family's).
DECODERS = {
    "tiny-block": {"block": [], "ar": ["--strategy", "ar"], "s2d2": ["--strategy", "s2d2"]},
    "tiny-full": {"full": ["--max-tokens", "32"],
                  "d2cache": ["--strategy", "d2cache", "--max-tokens", "32"],
                  "fastdllm": ["--strategy", "fastdllm", "--max-tokens", "32"],
                  "dllmcache": ["--strategy", "dllmcache", "--max-tokens", "32"]},
    "tiny-causal": {"wedlm": [], "ar": ["--strategy", "ar"]},
}


def sparse_decoders(ks=(256, 512, 1024)):
    """Issue 21's table for the long-context model: exact attention, then MAGE (with its recall
    diagnostic, whose tokens are exact decoding's), MAGE selecting from one of the block's queries
    (`mage-q1-*`: the GPU's cheap selection), Quest and SparseD at every k."""
    out = {"exact": []}
    for k in ks:
        kk = ["--sparse-k", str(k)]
        q1 = ["--sparse-select-queries", "1"]
        out[f"mage-recall-{k}"] = ["--sparse", "mage", "--sparse-recall"] + kk
        out[f"mage-{k}"] = ["--sparse", "mage"] + kk
        out[f"mage-recall-q1-{k}"] = ["--sparse", "mage", "--sparse-recall"] + q1 + kk
        out[f"mage-q1-{k}"] = ["--sparse", "mage"] + q1 + kk
        out[f"quest-{k}"] = ["--sparse", "quest"] + kk
        out[f"sparsed-{k}"] = ["--sparse", "sparsed"] + kk
    return out


DECODERS["tiny-long"] = sparse_decoders()


def load_tasks(heldout, n, only=None):
    tasks = {}
    for f in sorted(os.listdir(heldout)):
        if not f.endswith(".jsonl"):
            continue
        name = f[:-6]
        if only and name not in only:
            continue
        with open(os.path.join(heldout, f)) as fh:
            tasks[name] = [json.loads(line) for line in fh][:n]
    return tasks


def request_fields(flags):
    """CLI flags ["--sparse", "mage", "--sparse-recall", ...] as a request line's fields
    ({"sparse": "mage", "sparse_recall": true, ...}: `dllm generate --requests` option names)."""
    out, i = {}, 0
    while i < len(flags):
        name = flags[i][2:].replace("-", "_")
        if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            value = flags[i + 1]
            out[name] = int(value) if value.lstrip("-").isdigit() else value
            i += 2
        else:
            out[name] = True
            i += 1
    return out


def run_task(dllm, model, flags, exs, device="cpu"):
    """Every example of a task through one engine (`dllm generate --requests`, all at once).
    Returns [(correct, text, stats)] in order, or raises RuntimeError with the refusal."""
    fields = request_fields(flags)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
        for ex in exs:
            line = {"prompt_ids": ex["prompt_ids"], "max_tokens": max(16, len(ex["answer"]) + 8)}
            line.update(fields)
            fh.write(json.dumps(line) + "\n")
        path = fh.name
    cmd = [dllm, "generate", "-m", model, "--requests", path, "--device", device]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    finally:
        os.unlink(path)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} ({fields})\n{r.stderr}")
    out = []
    for ex, line in zip(exs, r.stdout.splitlines()):
        j = json.loads(line)
        if j.get("finish_reason") == "error":
            raise RuntimeError(j["error"])
        text = j["text"].split("<|im_end|>")[0].strip()
        out.append((text == ex["answer"].strip(), text, j["stats"]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dllm", default="build/dllm")
    ap.add_argument("--heldout", default="build/train-data/heldout")
    ap.add_argument("--models", default="models")
    ap.add_argument("--n", type=int, default=50, help="examples per task")
    ap.add_argument("--tasks", default="", help="comma-separated task names (default: all)")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all present)")
    ap.add_argument("--decoders", default="", help="comma-separated decoder names (default: all)")
    ap.add_argument("--json", default="")
    ap.add_argument("--device", default="cpu", help="cpu | cuda (the GPU bundle's dllm)")
    args = ap.parse_args()
    only_tasks = set(args.tasks.split(",")) if args.tasks else None
    tasks = load_tasks(args.heldout, args.n, only_tasks)
    results = []
    print("| model | decoder | task | exact match | tokens/forward | MAGE recall |")
    print("|---|---|---|---|---|---|")
    for model, decoders in DECODERS.items():
        if args.only and model not in args.only.split(","):
            continue
        path = os.path.join(args.models, model)
        if not os.path.isdir(path):
            continue
        for dec, flags in decoders.items():
            if args.decoders and dec not in args.decoders.split(","):
                continue
            for task, exs in tasks.items():
                ok = 0
                gen = fwd = 0
                recalls = []
                samples = []
                error = None
                try:
                    outcomes = run_task(args.dllm, path, flags, exs, args.device)
                except RuntimeError as e:  # a combination the backend refuses (CUDA Quest over
                    error = str(e).strip().splitlines()[-1]  # partial pages): reported as a row
                    outcomes = []
                for ex, (good, text, stats) in zip(exs, outcomes):
                    ok += good
                    gen += stats["generated_tokens"]
                    fwd += stats["forwards"]
                    if "mage_recall" in stats:
                        recalls.append(stats["mage_recall"])
                    if len(samples) < 3:
                        samples.append({"prompt": ex["prompt"], "answer": ex["answer"], "got": text})
                if error:
                    print(f"| {model} | {dec} | {task} | refused: {error} | | |", flush=True)
                    results.append({"model": model, "decoder": dec, "task": task, "error": error})
                    continue
                acc = ok / max(1, len(exs))
                tpf = gen / max(1, fwd)
                recall = sum(recalls) / len(recalls) if recalls else None
                shown = f"{recall:.3f}" if recall is not None else ""
                print(f"| {model} | {dec} | {task} | {acc:.0%} ({ok}/{len(exs)}) | {tpf:.2f} | {shown} |",
                      flush=True)
                results.append({"model": model, "decoder": dec, "task": task, "n": len(exs), "correct": ok,
                                "accuracy": acc, "tokens_per_forward": tpf, "mage_recall": recall,
                                "samples": samples})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
