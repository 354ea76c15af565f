"""Fresh held-out needle prompts for the long-context model without the full data build
(make_data.py needs the Debian sources): haystack and key words are those of the committed
fixture tests/fixtures/heldout/needle_4k.jsonl, the sentence and needle forms tasks.py's, the
prompt ids from `dllm tokenize` (checked against the fixture's own ids first).

    python3 tools/train/make_needles.py --task needle_8k --n 20 --seed 98 --out DIR
    python3 tools/train/eval_models.py --heldout DIR --only tiny-long --tasks needle_8k ...
"""
import argparse
import json
import os
import re
import subprocess

import tasks as T

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "heldout", "needle_4k.jsonl")
SENTENCE = re.compile(r"The (\w+) \w+ (\w+)\.")


def haystack_words(rows):
    words = {w for r in rows for pair in SENTENCE.findall(r["prompt"]) for w in pair}
    return sorted(w for w in words if w.isalpha() and w.islower())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dllm", default=os.path.join(ROOT, "build", "dllm"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "tiny-long"))
    ap.add_argument("--task", default="needle_4k", choices=[k for k in T.HELDOUT if "needle" in k])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--seed", type=int, default=99)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    def ids(text):
        out = subprocess.run([args.dllm, "tokenize", "--tokenizer", args.model, "--text", text],
                             capture_output=True, text=True, check=True).stdout
        return [int(x) for x in out.split()]

    rows = [json.loads(line) for line in open(FIXTURE)]
    if ids(T.sample_text([rows[0]["prompt"]], None)) != rows[0]["prompt_ids"]:
        raise SystemExit(f"{args.dllm} tokenize does not give the fixture's prompt ids")
    gen = T.TaskGen(haystack_words(rows), seed=args.seed)
    task, kw, _ = T.HELDOUT[args.task]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{args.task}.jsonl"), "w") as fh:
        for _ in range(args.n):
            p, a = gen.sample(task, **kw)
            fh.write(json.dumps({"task": args.task, "prompt": "".join(p), "answer": "".join(a),
                                 "prompt_ids": ids(T.sample_text(p, None))}) + "\n")


if __name__ == "__main__":
    main()
