"""LLM.stream: the committed tokens block by block, equal to generate(); leaving early cancels."""
import dllm
from conftest import heldout


def test_stream_equals_generate(engines):
    llm = engines("tiny-block")
    messages = [{"role": "user", "content": heldout("reverse_letters", 4)[3]["prompt"]}]
    params = dllm.SamplingParams(max_tokens=24, block_length=4)
    whole = llm.chat(messages, params)[0]
    stream = llm.stream(messages=messages, sampling_params=params)
    chunks = list(stream)
    assert chunks[-1].finished and chunks[-1].finish_reason == whole.finish_reason
    assert all(not c.finished for c in chunks[:-1])
    assert len(chunks) > 2  # several blocks of 4 tokens, not one piece at the end
    assert "".join(c.text for c in chunks) == whole.text
    assert [t for c in chunks for t in c.token_ids] == whole.token_ids
    assert stream.result.token_ids == whole.token_ids
    assert stream.result.stats.generated_tokens == len(whole.token_ids)


def test_leaving_the_loop_cancels(engines):
    llm = engines("tiny-block")
    params = dllm.SamplingParams(max_tokens=256, ignore_eos=True, block_length=4)
    stream = llm.stream("Once upon a time", params)
    for chunk in stream:
        assert not chunk.finished
        break  # the loop's iterator is released here, which cancels the request
    assert stream.result.finish_reason == "cancelled"
    assert len(stream.result.token_ids) < 256


def test_explicit_cancel(engines):
    llm = engines("tiny-block")
    stream = llm.stream("Once upon a time",
                        dllm.SamplingParams(max_tokens=256, ignore_eos=True))
    stream.cancel()
    assert stream.result.finish_reason == "cancelled"
    assert list(stream) == []
