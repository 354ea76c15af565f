"""dllm: inference for diffusion language models, a vLLM-style Python API over dllm's C++ engine.

    import dllm

    llm = dllm.LLM("models/tiny-block")
    params = dllm.SamplingParams(max_tokens=32, strategy="block", threshold=0.9)
    for out in llm.generate(["What is 2 + 3?"], params):
        print(out.text, out.finish_reason, out.stats.forwards)
    print(llm.chat([{"role": "user", "content": "What is 2 + 3?"}])[0].text)
    for chunk in llm.stream("Q: 12+30? A:", params):
        print(chunk.text, end="", flush=True)

Every error the engine reports (a bad file, field, parameter or request) is raised as
:class:`dllm.Error` with the message naming the parameter and its accepted range.
"""
from ._dllm import Error
from .llm import LLM, Stream
from .outputs import CompletionOutput, RequestError, RequestOutput, RequestStats, StreamOutput
from .sampling_params import SamplingParams, strategy_option_names

Error.__module__ = "dllm"  # shown as dllm.Error in tracebacks

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "SamplingParams",
    "RequestOutput",
    "CompletionOutput",
    "RequestStats",
    "StreamOutput",
    "Stream",
    "Error",
    "RequestError",
    "strategy_option_names",
    "__version__",
]
