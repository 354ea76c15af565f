"""Python threads share one engine: their requests run in the same forwards (the GIL is released
while the engine works) and each gets what it gets alone."""
import threading

import dllm
from conftest import DEVICE, heldout, model_dir

N_THREADS = 6


def _conversations():
    items = heldout("add3", 3) + heldout("reverse_letters", 3)
    return [[{"role": "user", "content": d["prompt"]}] for d in items]


def _params(i):
    # Different strategies and knobs in the same forwards.
    return [dllm.SamplingParams(max_tokens=16, seed=i),
            dllm.SamplingParams(max_tokens=16, seed=i, strategy="ar"),
            dllm.SamplingParams(max_tokens=16, seed=i, strategy="s2d2")][i % 3]


def test_threads_batched_equal_solo():
    conversations = _conversations()
    with dllm.LLM(model_dir("tiny-block"), device=DEVICE) as llm:
        solo = [llm.chat(c, _params(i))[0] for i, c in enumerate(conversations)]
        assert llm.stats().sequences_per_step == 1.0
    with dllm.LLM(model_dir("tiny-block"), device=DEVICE) as llm:
        results = [None] * N_THREADS
        start = threading.Barrier(N_THREADS)

        def run(i):
            start.wait()
            # Each thread submits twice: its conversation, streamed, then again whole.
            stream = llm.stream(messages=conversations[i], sampling_params=_params(i))
            text = "".join(chunk.text for chunk in stream)
            results[i] = (llm.chat(conversations[i], _params(i))[0], stream.result, text)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(N_THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = llm.stats()
    for (whole, streamed, text), alone in zip(results, solo):
        assert whole.token_ids == alone.token_ids and whole.text == alone.text
        assert streamed.token_ids == alone.token_ids and text == alone.text
    # The threads' requests shared forwards: impossible if a waiting thread held the GIL.
    assert stats.sequences_per_step > 1.5, stats.sequences_per_step
    assert stats.finished == 2 * N_THREADS


def test_gil_released_while_generating(engines):
    """Python code runs on another thread while generate() waits for the engine."""
    llm = engines("tiny-full")
    ticks = 0
    done = threading.Event()

    def tick():
        nonlocal ticks
        while not done.is_set():
            ticks += 1

    t = threading.Thread(target=tick)
    t.start()
    try:
        out = llm.generate("Q: 305+196? A:", dllm.SamplingParams(max_tokens=32))[0]
    finally:
        done.set()
        t.join()
    assert out.stats.forwards > 1
    assert ticks > 1000
