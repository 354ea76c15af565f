"""SamplingParams: how one request is decoded (sampling, stopping, the strategy and its knobs)."""
from __future__ import annotations

from typing import Iterable, Sequence, Union

from . import _dllm

OptionValue = Union[int, float, str, bool, None]


def strategy_option_names() -> list[str]:
    """The strategy knobs SamplingParams accepts as keyword arguments (as `dllm generate --help`
    lists them, with '_' for '-'): block_length, steps, threshold, remasking, cfg_scale, ..."""
    names = [name.replace("-", "_") for name in _dllm.Engine.option_names()]
    return [n for n in names if n not in _TYPED_FIELDS]


# Fields SamplingParams has as arguments of their own (the engine's option table lists some too).
_TYPED_FIELDS = {"strategy", "max_tokens", "temperature", "top_k", "top_p", "seed", "stop",
                 "stop_token_ids", "ignore_eos"}


def _option_text(name: str, value: OptionValue) -> str:
    """A knob's value as the engine parses it (as on the command line)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"  # e.g. entropy_threshold=None: WeDLM's one-token-per-step rule
    if isinstance(value, (int, float, str)):
        return str(value)
    raise TypeError(f"SamplingParams: {name} must be a number, a string or a bool "
                    f"(got {type(value).__name__})")


class SamplingParams:
    """How a request is decoded.

    Args:
        max_tokens: generated tokens at most (full diffusion: the canvas); None: the family's
            default.
        temperature: 0 (the default) is greedy.
        top_k: 0 is off.
        top_p: 1 is off.
        seed: the request's random stream; the same seed gives the same result, whatever runs
            with it. Without one each request draws from its own stream.
        stop: stop strings (excluded from the output).
        stop_token_ids: stop ids in addition to the checkpoint's own.
        ignore_eos: generate max_tokens tokens whatever comes.
        strategy: block, ar, s2d2, full, d2cache, fastdllm, dllmcache or wedlm; None: the
            checkpoint family's default.
        **options: strategy knobs by their option name (`strategy_option_names()`), e.g.
            ``block_length=4, threshold=0.9, remasking="low_confidence_static",
            verify_policy="score"``; values as on the command line (bools become true/false).

    Values are checked by the engine when a request is submitted: an invalid one raises
    :class:`dllm.Error` naming the parameter and its accepted range. An unknown knob raises
    TypeError here.
    """

    def __init__(
        self,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        stop_token_ids: Iterable[int] | None = None,
        ignore_eos: bool = False,
        strategy: str | None = None,
        **options: OptionValue,
    ) -> None:
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.seed = seed
        self.stop = [stop] if isinstance(stop, str) else list(stop or [])
        self.stop_token_ids = list(stop_token_ids or [])
        self.ignore_eos = ignore_eos
        self.strategy = strategy
        known = set(strategy_option_names())
        for name in options:
            if name.replace("-", "_") not in known:
                raise TypeError(f"SamplingParams got an unknown option {name!r}; the strategy "
                                f"options are: {', '.join(sorted(known))}")
        self.options: dict[str, OptionValue] = dict(options)

    def __repr__(self) -> str:
        fields = {k: v for k, v in vars(self).items() if v not in (None, [], {}, False)}
        return "SamplingParams(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"

    def _fill(self, request: _dllm.Request) -> None:
        """Copies these parameters into an engine request."""
        if self.max_tokens is not None:
            request.max_tokens = _whole("max_tokens", self.max_tokens)
        if self.temperature is not None:
            request.temperature = _number("temperature", self.temperature)
        if self.top_k is not None:
            request.top_k = _whole("top_k", self.top_k)
        if self.top_p is not None:
            request.top_p = _number("top_p", self.top_p)
        if self.seed is not None:
            seed = _whole("seed", self.seed)
            if not 0 <= seed < 2**64:
                raise ValueError(f"SamplingParams: seed must be in [0, 2^64) (got {seed})")
            request.seed = seed
        request.stop = [str(s) for s in self.stop]
        request.stop_token_ids = [_whole("stop_token_ids", t) for t in self.stop_token_ids]
        request.ignore_eos = bool(self.ignore_eos)
        if self.strategy is not None:
            request.strategy = str(self.strategy)
        request.options = {k: _option_text(k, v) for k, v in self.options.items()}


def _whole(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"SamplingParams: {name} must be a whole number "
                        f"(got {type(value).__name__})")
    if not -2**31 <= value < 2**31 and name != "seed":
        raise ValueError(f"SamplingParams: {name} must fit in 32 bits (got {value})")
    return value


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"SamplingParams: {name} must be a number (got {type(value).__name__})")
    return float(value)
