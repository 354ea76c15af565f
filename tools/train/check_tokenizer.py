#!/usr/bin/env python3
"""Our engine's tokenizer and chat template on the trained tokenizer must agree with Python
`tokenizers` and with the ChatML format the training data uses.

    python3 tools/train/check_tokenizer.py --dllm build/dllm --tokenizer models/tokenizer --data build/train-data
"""
import argparse
import json
import lzma
import os
import random
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks as T  # noqa: E402


def engine_ids(dllm, tok_dir, text):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as fh:
        fh.write(text)
        path = fh.name
    try:
        r = subprocess.run([dllm, "tokenize", "--tokenizer", tok_dir, "--file", path], capture_output=True, text=True)
    finally:
        os.remove(path)
    if r.returncode:
        raise SystemExit(f"dllm tokenize failed: {r.stderr}")
    return [int(x) for x in r.stdout.split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dllm", default="build/dllm")
    ap.add_argument("--tokenizer", default="models/tokenizer")
    ap.add_argument("--data", default="build/train-data")
    ap.add_argument("--n", type=int, default=150)
    args = ap.parse_args()
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    rng = random.Random(5)

    samples = ["Hello world! What is 345 + 678?", "  leading spaces\n\n\ttabs\r\nCRLF  ", "",
               "naïve café — “quotes” 日本語 🙂", "<|im_start|>user\nhi<|im_end|>\n<|mask|><|mask|><|endoftext|>",
               "don't I'll we've THEY'RE", "1234567890 3.14159 -42 1e9", "a\u0301 (combining accent, NFC)"]
    with lzma.open(os.path.join(args.data, "prose_val.u16.xz")) as fh:
        val = np.frombuffer(fh.read(), dtype="<u2")
    eot = tok.token_to_id("<|endoftext|>")
    docs = np.split(val, np.flatnonzero(val == eot) + 1)
    for d in rng.sample(docs, min(args.n // 2, len(docs))):
        samples.append(tok.decode(d.tolist(), skip_special_tokens=False))
    frags = json.load(open(os.path.join(args.data, "fragments.json")))
    gen = T.TaskGen(frags["words"], seed=99)
    for _ in range(args.n // 2):
        samples.append(T.sample_text(*gen.sample_mix()[1]))
    bad = 0
    for s in samples:
        want = tok.encode(s, add_special_tokens=False).ids
        got = engine_ids(args.dllm, args.tokenizer, s)
        if want != got:
            bad += 1
            print(f"MISMATCH {s[:80]!r}\n  python {want[:30]}\n  engine {got[:30]}")
    print(f"tokenize: {len(samples) - bad}/{len(samples)} samples identical (Python tokenizers vs dllm tokenize)")

    msgs = [{"role": "user", "content": "What is 2 + 3?"}]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(msgs, fh)
        path = fh.name
    r = subprocess.run([args.dllm, "chat-template", "--tokenizer", args.tokenizer, "--messages", path],
                       capture_output=True, text=True)
    os.remove(path)
    want = T.USER_PREFIX + "What is 2 + 3?" + T.ASSISTANT_PREFIX
    ok_t = r.returncode == 0 and r.stdout == want
    print(f"chat-template: {'OK' if ok_t else 'MISMATCH'} {r.stdout!r}")
    sys.exit(0 if bad == 0 and ok_t else 1)


if __name__ == "__main__":
    main()
