"""Every error the C++ side reports is a Python exception (dllm.Error naming the parameter and
its range), never an abort; wrong Python types are TypeError; a failed batch leaves nothing
running."""
import os

import pytest

import dllm
from conftest import model_dir


def test_missing_model_dir(tmp_path):
    with pytest.raises(dllm.Error, match="nowhere: not a model directory"):
        dllm.LLM(str(tmp_path / "nowhere"))


def test_not_a_checkpoint(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(dllm.Error, match="config.json"):
        dllm.LLM(str(tmp_path))


@pytest.mark.parametrize("kwargs,message", [
    ({"kv_page_size": 12}, "kv-page-size must be a power of two"),
    ({"max_running": 0}, "max-running must be positive"),
    ({"device": "tpu"}, "device"),
])
def test_bad_engine_option(kwargs, message):
    with pytest.raises(dllm.Error, match=message):
        dllm.LLM(model_dir("tiny-block"), **kwargs)


def test_engine_option_types():
    with pytest.raises(TypeError, match="kv_page_size must be a whole number"):
        dllm.LLM(model_dir("tiny-block"), kv_page_size="16")
    with pytest.raises(TypeError, match="unexpected keyword"):
        dllm.LLM(model_dir("tiny-block"), kv_pages=16)


@pytest.mark.parametrize("params,message", [
    ({"max_tokens": 0}, r"max-tokens must be positive \(got 0\)"),
    ({"temperature": -1.0}, "temperature must be >= 0"),
    ({"top_p": 1.5}, r"top-p must be in \(0, 1\]"),
    ({"strategy": "beam"}, "strategy"),
    ({"strategy": "full"}, "full"),  # a full-diffusion strategy on a block model
    ({"threshold": 2.0}, "threshold"),
    ({"block_length": -4}, "block-length"),
    ({"verify_policy": "score"}, "applies to --strategy s2d2 only"),
])
def test_bad_request_parameter(engines, params, message):
    llm = engines("tiny-block")
    with pytest.raises(dllm.Error, match=message):
        llm.generate("Q: 1+1? A:", dllm.SamplingParams(**params))


def test_bad_prompts(engines):
    llm = engines("tiny-block")
    with pytest.raises(dllm.Error, match="vocab|token"):
        llm.generate({"prompt_token_ids": [10**9]})
    with pytest.raises(dllm.Error):
        llm.chat([{"role": "user"}])  # a message without content
    with pytest.raises(TypeError, match="prompt"):
        llm.generate(42)
    with pytest.raises(TypeError, match="exactly one"):
        llm.generate({"prompt": "a", "prompt_token_ids": [1]})
    with pytest.raises(TypeError, match="JSON"):
        llm.chat([{"role": "user", "content": object()}])


def test_sampling_params_types():
    with pytest.raises(TypeError, match="unknown option 'treshold'"):
        dllm.SamplingParams(treshold=0.9)
    with pytest.raises(TypeError, match="max_tokens must be a whole number"):
        dllm.SamplingParams(max_tokens="8")._fill(dllm._dllm.Request())

def test_one_sampling_params_per_prompt(engines):
    with pytest.raises(ValueError, match="2 given for 3 prompts"):
        engines("tiny-block").generate(["a", "b", "c"], [dllm.SamplingParams()] * 2)


def test_failed_batch_names_the_prompt_and_leaves_nothing_running(engines):
    llm = engines("tiny-block")
    before = llm.stats()
    params = [dllm.SamplingParams(max_tokens=64, ignore_eos=True),
              dllm.SamplingParams(max_tokens=-1)]
    with pytest.raises(dllm.Error, match="prompt 1: --max-tokens"):
        llm.generate(["Once upon a time", "Q: 1+1? A:"], params)
    after = llm.stats()
    assert after.cancelled == before.cancelled + 1  # prompt 0 was cancelled, not left running


def test_closed_engine():
    llm = dllm.LLM(model_dir("tiny-block"), device="cpu")
    llm.close()
    with pytest.raises(dllm.Error, match="closed"):
        llm.generate("Q: 1+1? A:")
    llm.close()  # twice is fine


def test_error_is_a_runtime_error():
    assert issubclass(dllm.Error, RuntimeError)
    assert issubclass(dllm.RequestError, dllm.Error)


def test_ctrl_c_interrupts_and_cancels(engines):
    """Ctrl-C (SIGINT) while generate() waits raises KeyboardInterrupt and cancels the call's
    requests instead of leaving them running."""
    import signal
    import threading

    llm = engines("tiny-block")
    before = llm.stats().cancelled
    timer = threading.Timer(0.3, signal.pthread_kill, (threading.main_thread().ident,
                                                       signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        llm.generate(["Once upon a time"] * 2,
                     dllm.SamplingParams(max_tokens=4000, ignore_eos=True, block_length=4))
    timer.join()
    assert llm.stats().cancelled == before + 2


def test_close_while_another_thread_generates():
    """close() from one thread while another waits in generate(): the waiting call ends with
    dllm.Error (its requests were cancelled by the engine's end), nothing crashes."""
    import threading
    import time

    llm = dllm.LLM(model_dir("tiny-block"), device="cpu")
    raised = []

    def run():
        try:
            llm.generate("Once upon a time",
                         dllm.SamplingParams(max_tokens=4000, ignore_eos=True, block_length=4))
        except dllm.Error as e:
            raised.append(str(e))

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    llm.close()
    t.join(timeout=60)
    assert not t.is_alive()
    assert raised and "closed" in raised[0]


def _nan_model(tmp_path, model, final_norm):
    """A copy of an embedded model whose final norm weight is all NaN (bf16 0x7fc0), so every
    logit is NaN (as tests/hostile/numerics_hostile_test.cpp makes it)."""
    import json
    import struct

    source = model_dir(model)
    for name in os.listdir(source):
        if name != "model.safetensors":
            os.symlink(os.path.join(source, name), tmp_path / name)
    with open(os.path.join(source, "model.safetensors"), "rb") as f:
        data = bytearray(f.read())
    (header_len,) = struct.unpack("<Q", data[:8])
    tensor = json.loads(data[8:8 + header_len])[final_norm]
    assert tensor["dtype"] == "BF16"
    begin, end = (8 + header_len + o for o in tensor["data_offsets"])
    data[begin:end] = b"\xc0\x7f" * ((end - begin) // 2)
    (tmp_path / "model.safetensors").write_bytes(bytes(data))
    return str(tmp_path)


def test_failure_while_running_is_request_error(tmp_path):
    """A request accepted but failing while it runs (NaN logits) raises dllm.RequestError with
    the engine's message and the output; streaming raises it at the end; the engine lives on."""
    with dllm.LLM(_nan_model(tmp_path, "tiny-block", "model.norm.weight"), device="cpu") as llm:
        params = dllm.SamplingParams(max_tokens=16)
        failed = "prompt 0 failed while it ran: .*non-finite"
        with pytest.raises(dllm.RequestError, match=failed) as e:
            llm.generate({"prompt_token_ids": [5, 6, 7]}, params)
        assert e.value.output.finish_reason == "error"
        assert isinstance(e.value, dllm.Error)
        with pytest.raises(dllm.RequestError, match="non-finite"):
            for _ in llm.stream({"prompt_token_ids": [5, 6, 7]}, params):
                pass
        assert llm.tokenize("still alive")
