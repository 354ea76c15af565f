"""EleutherAI's lm-eval (PyPI `lm-eval[api]`) against `dllm serve`, as README "Evaluation" says
to run it: the held-out tasks of the embedded models (tests/eval/tasks/, local JSONL) through
`local-chat-completions` and `local-completions`. Asserts that lm-eval's accuracy is the
expected one, computed independently: `dllm generate --requests` (no server, no lm-eval) on the
same items, scored by exact match against the held-out answers; and that every response lm-eval
logged is the text `dllm generate` gives.

Run by ctest (tests/eval/run_lm_eval_test.sh) from the repository root as:
    python lm_eval_test.py DLLM_BINARY
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

DLLM = sys.argv[1] if len(sys.argv) > 1 else "build/dllm"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELDOUT = os.path.join(ROOT, "tests", "fixtures", "heldout")

# (model, lm-eval model type, its extra flags, {task: held-out file}): the WeDLM model through the
# chat API (its add3 is not perfect, so the accuracy is a real number), the block model through
# the completions API with the chat template's text as the prompt.
CASES = [
    ("tiny-causal", "local-chat-completions", ["--apply_chat_template"],
     {"dllm_heldout_add3": "add3", "dllm_heldout_reverse_letters": "reverse_letters"}),
    ("tiny-block", "local-completions", [],
     {"dllm_heldout_add3_completions": "add3",
      "dllm_heldout_reverse_letters_completions": "reverse_letters"}),
]
# What the task files ask for (tests/eval/tasks/_heldout_chat.yaml) and lm-eval sends with it.
MAX_TOKENS = 24
STOP = ["<|im_end|>"]
LM_EVAL_SEED = 1234


def start_server(model):
    proc = subprocess.Popen([DLLM, "serve", "--port", "0", "-m",
                             os.path.join(ROOT, "models", model)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not m:
        proc.kill()
        raise RuntimeError("dllm serve did not start: " + line)
    return proc, f"http://127.0.0.1:{m.group(1)}/v1"


def stop_server(proc):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, "dllm serve did not exit cleanly"
    proc.stdout.close()


def run_lm_eval(model, model_type, flags, tasks, base_url, out_dir):
    endpoint = "chat/completions" if "chat" in model_type else "completions"
    model_args = ",".join([f"base_url={base_url}/{endpoint}", f"model={model}",
                           "tokenizer_backend=None", "tokenized_requests=False",
                           "num_concurrent=4", "max_retries=1"])
    cmd = [sys.executable, "-m", "lm_eval", "--model", model_type, "--model_args", model_args,
           *flags, "--include_path", "tests/eval/tasks", "--tasks", ",".join(tasks),
           "--output_path", out_dir, "--log_samples"]
    print("+", " ".join(cmd), flush=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               HF_DATASETS_CACHE=os.path.join(out_dir, "hf-datasets"))
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    [results] = glob.glob(os.path.join(out_dir, "**", "results_*.json"), recursive=True)
    with open(results) as f:
        accuracy = {t: r["exact_match,none"] for t, r in json.load(f)["results"].items()}
    responses = {}
    for task in tasks:
        [samples] = glob.glob(os.path.join(out_dir, "**", f"samples_{task}_*.jsonl"),
                              recursive=True)
        with open(samples) as f:
            rows = [json.loads(line) for line in f]
        responses[task] = {r["doc"]["prompt"]: r["resps"][0][0] for r in rows}
    return accuracy, responses


def expected_by_cli(model, chat, items):
    """`dllm generate --requests` on the items (chat: the user message through the template;
    completions: the held-out file's own prompt ids, which are the template's tokens)."""
    requests = []
    for d in items:
        r = {"max_tokens": MAX_TOKENS, "stop": STOP, "temperature": 0, "seed": LM_EVAL_SEED}
        if chat:
            r["messages"] = [{"role": "user", "content": d["prompt"]}]
        else:
            r["prompt_ids"] = d["prompt_ids"]
        requests.append(r)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
        f.writelines(json.dumps(r) + "\n" for r in requests)
        f.flush()
        out = subprocess.run([DLLM, "generate", "-m", os.path.join(ROOT, "models", model),
                              "--requests", f.name], capture_output=True, text=True, check=True)
    return [json.loads(line)["text"] for line in out.stdout.splitlines()]


def main():
    failures = []
    for model, model_type, flags, tasks in CASES:
        with tempfile.TemporaryDirectory() as out_dir:
            proc, base_url = start_server(model)
            try:
                accuracy, responses = run_lm_eval(model, model_type, flags, list(tasks), base_url,
                                                  out_dir)
            finally:
                stop_server(proc)
        for task, heldout in tasks.items():
            with open(os.path.join(HELDOUT, heldout + ".jsonl")) as f:
                items = [json.loads(line) for line in f]
            texts = expected_by_cli(model, "chat" in model_type, items)
            correct = sum(t == d["answer"] for t, d in zip(texts, items))
            expected = correct / len(items)
            print(f"{model} {model_type} {task}: lm-eval exact_match {accuracy[task]:.4f}, "
                  f"expected {correct}/{len(items)} = {expected:.4f}", flush=True)
            if abs(accuracy[task] - expected) > 1e-9:
                failures.append(f"{task}: lm-eval {accuracy[task]} != expected {expected}")
            for t, d in zip(texts, items):
                if responses[task].get(d["prompt"]) != t:
                    failures.append(f"{task} {d['prompt']!r}: lm-eval got "
                                    f"{responses[task].get(d['prompt'])!r}, dllm generate {t!r}")
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
