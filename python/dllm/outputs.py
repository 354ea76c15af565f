"""What a request gives back: its result (RequestOutput, as vLLM's), statistics, stream chunks."""
from __future__ import annotations

from dataclasses import dataclass, field

from . import _dllm


class RequestError(_dllm.Error):
    """A request that was accepted but failed while it ran (the engine's finish reason "error",
    e.g. a device error). ``output`` holds what it produced before failing."""

    def __init__(self, message: str, output: "RequestOutput") -> None:
        super().__init__(message)
        self.output = output


@dataclass
class RequestStats:
    """Statistics of one request (dllm::RequestStats)."""

    prompt_tokens: int
    generated_tokens: int
    forwards: int  # model forwards the request took part in
    query_rows: int  # query rows it forwarded
    prefix_cached_tokens: int  # prompt tokens reused from the prefix cache
    preemptions: int  # times it was preempted and recomputed
    queue_seconds: float  # submit to first scheduled
    first_token_seconds: float  # submit to the first streamed token (-1: none)
    seconds: float  # submit to finish
    metrics: dict[str, float] = field(default_factory=dict)  # strategy-specific (WeDLM p_cache)
    # Speculative decoding (S2D2): verification forwards, tokens accepted as drafted, rejections.
    speculative: bool = False
    verify_calls: int = 0
    accepted: int = 0
    rejected: int = 0

    @property
    def tokens_per_forward(self) -> float:
        return self.generated_tokens / self.forwards if self.forwards else 0.0

    @classmethod
    def _from_engine(cls, s: _dllm.RequestStats) -> "RequestStats":
        return cls(
            prompt_tokens=s.prompt_tokens, generated_tokens=s.generated_tokens,
            forwards=s.forwards, query_rows=s.query_rows,
            prefix_cached_tokens=s.prefix_cached_tokens, preemptions=s.preemptions,
            queue_seconds=s.queue_seconds, first_token_seconds=s.first_token_seconds,
            seconds=s.seconds, metrics={m.name: m.value for m in s.metrics},
            speculative=s.speculative, verify_calls=s.verify_calls, accepted=s.accepted,
            rejected=s.rejected)


@dataclass
class CompletionOutput:
    """One completion of a request (vLLM's CompletionOutput; dllm gives one per request)."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str


@dataclass
class RequestOutput:
    """The result of one request.

    Attributes:
        request_id: the engine's id of the request.
        prompt: the prompt text (None for token-id and chat prompts).
        prompt_token_ids: the prompt as the engine ran it (chat: after the template).
        text: the generated text (special tokens skipped, cut before a stop string).
        token_ids: the generated ids (stop token excluded).
        finish_reason: stop (a stop id or string), length, cancelled or error.
        strategy: the strategy as resolved (block, full, wedlm, ...).
        stats: forwards, tokens, timings (RequestStats).
        error: what went wrong when finish_reason is "error".
    """

    request_id: int
    prompt: str | None
    prompt_token_ids: list[int]
    text: str
    token_ids: list[int]
    finish_reason: str
    strategy: str
    stats: RequestStats
    error: str | None = None

    @property
    def finished(self) -> bool:
        return True

    @property
    def outputs(self) -> list[CompletionOutput]:
        """vLLM's shape: ``out.outputs[0].text``."""
        return [CompletionOutput(0, self.text, self.token_ids, self.finish_reason)]

    @classmethod
    def _from_engine(cls, r: _dllm.RequestResult, prompt: str | None) -> "RequestOutput":
        return cls(request_id=r.id, prompt=prompt, prompt_token_ids=list(r.prompt_ids),
                   text=r.text, token_ids=list(r.token_ids), finish_reason=r.finish_reason,
                   strategy=r.strategy, stats=RequestStats._from_engine(r.stats),
                   error=r.error or None)


@dataclass
class StreamOutput:
    """One streamed event: tokens that just became final (committed) and their text (UTF-8
    complete; a stop string is held back until it is known not to be one), or the end
    (``finished`` with ``finish_reason``)."""

    text: str
    token_ids: list[int]
    finished: bool = False
    finish_reason: str | None = None
