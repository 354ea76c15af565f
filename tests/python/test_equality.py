"""dllm.LLM gives what `dllm generate` gives: for every strategy on the embedded models, with
strategy knobs as keyword arguments, the same ids, text and finish reason, batched and solo."""
import pytest

import dllm
from conftest import cli_generate, heldout

# (model, strategy, knobs): every strategy of every embedded model, with its defaults and with
# knobs given (as SamplingParams keyword arguments and as `--requests` keys).
CASES = [
    ("tiny-block", "block", {}),
    ("tiny-block", "block", {"block_length": 4, "threshold": 0.7,
                             "remasking": "low_confidence_static"}),
    ("tiny-block", "ar", {}),
    ("tiny-block", "s2d2", {}),
    ("tiny-block", "s2d2", {"verify_policy": "score"}),
    ("tiny-full", "full", {}),
    ("tiny-full", "full", {"block_length": 8, "steps": 8}),
    ("tiny-full", "d2cache", {}),
    ("tiny-full", "fastdllm", {"cache": "prefix"}),
    ("tiny-full", "dllmcache", {}),
    ("tiny-causal", "wedlm", {}),
    ("tiny-causal", "wedlm", {"window": 8, "entropy_threshold": None}),
    ("tiny-causal", "ar", {}),
]
MAX_TOKENS = 16
SEED = 7


def _items():
    return heldout("add3", 2) + heldout("reverse_letters", 2)


def _cli_value(v):
    if v is None:
        return "none"
    return v


@pytest.mark.parametrize("model,strategy,knobs", CASES,
                         ids=[f"{m}-{s}-{'-'.join(k) or 'defaults'}" for m, s, k in CASES])
def test_chat_matches_cli(engines, model, strategy, knobs):
    items = _items()
    conversations = [[{"role": "user", "content": d["prompt"]}] for d in items]
    params = dllm.SamplingParams(max_tokens=MAX_TOKENS, seed=SEED, strategy=strategy, **knobs)
    llm = engines(model)
    batched = llm.chat(conversations, params)
    solo = [llm.chat(c, params)[0] for c in conversations]
    expected = cli_generate(model, [
        {"messages": c, "max_tokens": MAX_TOKENS, "seed": SEED, "strategy": strategy,
         **{k: _cli_value(v) for k, v in knobs.items()}} for c in conversations])
    for got_batched, got_solo, want, item in zip(batched, solo, expected, items):
        assert "error" not in want, want
        assert got_batched.token_ids == want["ids"], item["prompt"]
        assert got_batched.text == want["text"]
        assert got_batched.finish_reason == want["finish_reason"]
        assert got_batched.strategy == want["strategy"] == strategy
        assert got_batched.stats.generated_tokens == len(want["ids"])
        assert got_batched.stats.forwards == want["stats"]["forwards"]
        assert (got_solo.token_ids, got_solo.text) == (got_batched.token_ids, got_batched.text)
        assert got_batched.prompt_token_ids == item["prompt_ids"]


def test_prompt_text_and_ids_match_cli(engines):
    """Raw-text and token-id prompts, against `dllm generate -p` / `--prompt-ids`."""
    import json
    import subprocess
    from conftest import DEVICE, DLLM, model_dir

    llm = engines("tiny-block")
    params = dllm.SamplingParams(max_tokens=12, stop=["\n"])
    text = "Q: 305+196? A:"
    ids = heldout("add3", 1)[0]["prompt_ids"]
    by_text, by_ids = llm.generate([text, {"prompt_token_ids": ids}], params)
    ids_arg = ",".join(map(str, ids))
    for args, got in ((["-p", text], by_text), (["--prompt-ids", ids_arg], by_ids)):
        out = subprocess.run([DLLM, "generate", "-m", model_dir("tiny-block"), *args,
                              "--max-tokens", "12", "--stop", "\n", "--format", "json",
                              "--device", DEVICE],
                             capture_output=True, text=True, check=True)
        want = json.loads(out.stdout)
        assert (got.token_ids, got.text, got.finish_reason) == (
            want["ids"], want["text"], want["finish_reason"])
    assert by_text.prompt == text and by_ids.prompt is None
    assert by_text.outputs[0].text == by_text.text  # vLLM's shape
    assert llm.tokenize(text) == by_text.prompt_token_ids
    assert llm.detokenize(by_ids.token_ids) == by_ids.text


def test_knob_changes_the_decode(engines):
    """Knobs reach the decoder: a lower threshold commits more tokens per forward."""
    llm = engines("tiny-block")
    conv = [{"role": "user", "content": heldout("reverse_letters", 5)[4]["prompt"]}]
    strict = llm.chat(conv, dllm.SamplingParams(max_tokens=16, threshold=0.99))[0]
    loose = llm.chat(conv, dllm.SamplingParams(max_tokens=16, threshold=0.01))[0]
    assert loose.stats.forwards < strict.stats.forwards
