"""LLM: a loaded model and its serving engine, vLLM-style (generate, chat, stream)."""
from __future__ import annotations

import base64
import binascii
import json
import os
import urllib.parse
from typing import Any, Iterator, Mapping, Sequence, Union

from . import _dllm
from .outputs import RequestError, RequestOutput, StreamOutput
from .sampling_params import SamplingParams

# A prompt: text (tokenized without special tokens added), or vLLM's dict forms
# {"prompt": text} / {"prompt_token_ids": [ids]}.
Prompt = Union[str, Mapping[str, Any]]
Message = Mapping[str, Any]  # {"role": ..., "content": ...}


class LLM:
    """A diffusion language model loaded into dllm's serving engine.

    The engine runs on its own thread and steps every submitted request through one forward per
    step (continuous batching over a paged KV pool); ``generate`` submits all its prompts at once,
    and calls from several Python threads share the engine's forwards (the GIL is released while
    the engine runs). A request's result does not depend on what runs with it.

    Args:
        model: checkpoint directory (config.json, safetensors, tokenizer.json).
        device: "auto" (CUDA when this build has it and a GPU is visible), "cpu" or "cuda".
        kv_cache_memory: KV pool size in GiB; None: ``gpu_memory_utilization`` on CUDA, 1 GiB on
            the CPU.
        gpu_memory_utilization: CUDA, without kv_cache_memory: the share of the GPU's memory the
            engine may hold in all (as vLLM's).
        kv_page_size: slots per KV page (a power of two).
        max_running: sequences in one forward at most.
        max_batch_rows: query rows in one forward.
        prefix_sharing: reuse the K/V of identical prompt prefixes across requests.
        random_weights: a model-shape config.json whose weights are drawn at random (benchmarks;
            ``model`` still gives the tokenizer).
        media_io_kwargs: vision-language models, as vLLM's: ``{"video": {"num_frames": N}}``,
            the frames sampled uniformly from each video of ``chat`` (default 32); a call's own
            ``media_io_kwargs`` overrides it.

    Raises:
        dllm.Error: the checkpoint or a setting is invalid (the message names it).

    Use ``with dllm.LLM(...) as llm:`` or ``llm.close()`` to stop the engine deterministically.
    """

    def __init__(
        self,
        model: str | os.PathLike,
        device: str = "auto",
        *,
        kv_cache_memory: float | None = None,
        gpu_memory_utilization: float = 0.9,
        kv_page_size: int = 16,
        max_running: int = 256,
        max_batch_rows: int = 16384,
        prefix_sharing: bool = True,
        random_weights: str | os.PathLike | None = None,
        media_io_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self._video_frames = _video_frames(media_io_kwargs, _DEFAULT_VIDEO_FRAMES)
        config = _dllm.EngineConfig()
        config.model = os.fspath(model)
        config.device = _text("device", device)
        if kv_cache_memory is not None:
            config.kv_cache_bytes = int(_number("kv_cache_memory", kv_cache_memory) * 2**30)
        config.gpu_memory_utilization = _number("gpu_memory_utilization", gpu_memory_utilization)
        config.kv_page_size = _whole("kv_page_size", kv_page_size)
        config.max_running = _whole("max_running", max_running)
        config.max_batch_rows = _whole("max_batch_rows", max_batch_rows)
        config.prefix_sharing = bool(prefix_sharing)
        if random_weights is not None:
            config.random_weights = os.fspath(random_weights)
        self._engine = _dllm.Engine(config)

    # ----- generation ---------------------------------------------------------------------------

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Generates a completion for each prompt; the outputs come back in input order.

        Args:
            prompts: a prompt or a list of them: text, ``{"prompt": text}`` or
                ``{"prompt_token_ids": [ids]}``.
            sampling_params: one SamplingParams for all prompts, or one per prompt; None: the
                checkpoint family's defaults.

        Raises:
            dllm.Error: a prompt or parameter is invalid (nothing of the call keeps running).
            dllm.RequestError: a request failed while it ran.
        """
        items = _as_list(prompts, lambda p: isinstance(p, (str, Mapping)))
        requests = []
        for prompt in items:
            request, text = _prompt_request(prompt)
            requests.append((request, text))
        return self._run(requests, sampling_params)

    def chat(
        self,
        messages: Sequence[Message] | Sequence[Sequence[Message]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        media_io_kwargs: Mapping[str, Any] | None = None,
    ) -> list[RequestOutput]:
        """Answers a conversation, or a list of conversations, through the checkpoint's chat
        template (messages are ``{"role", "content"}`` dicts). One RequestOutput per conversation.

        A vision-language model (``model_info.has_vision``) takes pictures and videos as vLLM's
        content parts, in the order they appear::

            {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}
            {"type": "video_url", "video_url": {"url": "file:///path/clip.mp4"}}

        URLs are ``data:<type>;base64,`` data or ``file://`` paths (read by this process);
        nothing is fetched from the network. ``media_io_kwargs={"video": {"num_frames": N}}``
        sets the frames sampled per video for this call.

        Raises:
            dllm.Error: a message, template, image, video or parameter is invalid.
            ValueError: a content part's URL is not a data: or file:// URL (the message names
                the part, ``messages[0].content[1]``).
            dllm.RequestError: a request failed while it ran.
        """
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
            raise TypeError("messages must be a list of {'role', 'content'} dicts, or a list of "
                            f"such lists (got {type(messages).__name__})")
        one = len(messages) > 0 and isinstance(messages[0], Mapping)
        conversations = [messages] if one else list(messages)  # [] is no conversation
        frames = _video_frames(media_io_kwargs, self._video_frames)
        requests = [(_chat_request(c, chat_template_kwargs, frames), None) for c in conversations]
        return self._run(requests, sampling_params)

    def stream(
        self,
        prompt: Prompt | None = None,
        sampling_params: SamplingParams | None = None,
        *,
        messages: Sequence[Message] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> "Stream":
        """Starts one request (a prompt, or a conversation given as ``messages``) and returns an
        iterator of StreamOutput: the tokens of each block as it becomes final, then the end.
        ``Stream.result`` holds the RequestOutput once the iteration is over; leaving the loop
        early (or ``Stream.cancel()``) cancels the request.

        Raises:
            dllm.Error: the prompt or a parameter is invalid (at once, before iterating).
        """
        if (prompt is None) == (messages is None):
            raise TypeError("LLM.stream: give exactly one of prompt or messages")
        if messages is not None:
            request, text = _chat_request(messages, chat_template_kwargs, self._video_frames), None
        else:
            request, text = _prompt_request(prompt)
        if sampling_params is not None:
            _check_params(sampling_params)._fill(request)
        return Stream(self._engine, self._engine.submit(request), text)

    def _run(self, requests, sampling_params) -> list[RequestOutput]:
        """Submits every request, then collects their results in order."""
        params = _params_for(sampling_params, len(requests))
        for (request, _), p in zip(requests, params):
            if p is not None:
                p._fill(request)
        submissions = []
        try:
            for i, (request, _) in enumerate(requests):
                try:
                    submissions.append(self._engine.submit(request))
                except _dllm.Error as e:
                    raise _dllm.Error(f"prompt {i}: {e}" if len(requests) > 1 else str(e)) from None
            results = [_drain(self._engine, s) for s in submissions]
        except BaseException:
            self._abandon(submissions)
            raise
        outputs = [RequestOutput._from_engine(r, text)
                   for r, (_, text) in zip(results, requests)]
        for i, out in enumerate(outputs):
            if out.finish_reason == "error":
                raise RequestError(f"prompt {i} failed while it ran: {out.error}", out)
        return outputs

    def _abandon(self, submissions) -> None:
        """Cancels submitted requests (an error or Ctrl-C in the middle of a call) and waits for
        their ends, so that nothing of the call keeps running."""
        if self._engine.closed:
            return  # closing cancelled them
        for s in submissions:
            self._engine.cancel(s.id)
        for s in submissions:
            try:
                self._engine.wait(s.id)
            except _dllm.Error:
                pass  # already waited for

    # ----- tokenizer, template, statistics ------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """The checkpoint tokenizer's ids of ``text`` (no special tokens added)."""
        return self._engine.tokenize(_text("text", text))

    def detokenize(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of ``token_ids``."""
        return self._engine.detokenize(list(token_ids), skip_special_tokens)

    def apply_chat_template(self, messages: Sequence[Message], add_generation_prompt: bool = True,
                            chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        """The prompt text the checkpoint's chat template makes of ``messages``."""
        return self._engine.apply_chat_template(
            _json("messages", list(messages)), add_generation_prompt,
            _json("chat_template_kwargs", chat_template_kwargs) if chat_template_kwargs else "")

    def stats(self) -> _dllm.EngineStats:
        """The engine's counters: requests, forwards, rows, KV pages, times."""
        return self._engine.stats()

    @property
    def model_info(self) -> _dllm.ModelInfo:
        """Family, shapes, default strategy and device of the loaded model."""
        return self._engine.model_info()

    # ----- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stops the engine (unfinished requests end "cancelled") and frees the model."""
        self._engine.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Stream:
    """The streamed outputs of one request (LLM.stream): iterate for StreamOutput chunks."""

    def __init__(self, engine: _dllm.Engine, submission: _dllm.Submission, prompt: str | None):
        self._engine = engine
        self._submission = submission
        self._prompt = prompt
        self._done = False
        self.result: RequestOutput | None = None  # set when the end has been read

    @property
    def request_id(self) -> int:
        return self._submission.id

    def __iter__(self) -> Iterator[StreamOutput]:
        try:
            while not self._done:
                o = self._submission.next_output()
                if o.finished:
                    self._finish()
                    yield StreamOutput(o.text, list(o.token_ids), True, o.finish_reason)
                elif o.token_ids or o.text:
                    yield StreamOutput(o.text, list(o.token_ids))
        finally:
            if not self._done:  # the loop was left early (break, an exception, Ctrl-C)
                self.cancel()

    def cancel(self) -> None:
        """Cancels the request (if it still runs) and waits for its end."""
        if self._done:
            return
        self._engine.cancel(self._submission.id)
        self._finish()

    def _finish(self) -> None:
        self._done = True
        r = self._engine.wait(self._submission.id)
        self.result = RequestOutput._from_engine(r, self._prompt)
        if r.finish_reason == "error":
            raise RequestError(f"the request failed while it ran: {r.error}", self.result)

    def __del__(self) -> None:
        if not getattr(self, "_done", True) and not self._engine.closed:
            try:
                self.cancel()
            except Exception:
                pass


# ----- helpers ----------------------------------------------------------------------------------

def _drain(engine: _dllm.Engine, submission: _dllm.Submission) -> _dllm.RequestResult:
    """Reads a request's outputs up to its end (with the GIL released); returns its result."""
    while not submission.next_output().finished:
        pass
    return engine.wait(submission.id)


def _as_list(value, is_item) -> list:
    if is_item(value):
        return [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"expected a prompt or a list of prompts (got {type(value).__name__})")
    return list(value)


def _prompt_request(prompt: Prompt):
    request = _dllm.Request()
    if isinstance(prompt, str):
        request.prompt = prompt
        return request, prompt
    if isinstance(prompt, Mapping):
        keys = set(prompt) & {"prompt", "prompt_token_ids"}
        if len(keys) != 1:
            raise TypeError("a prompt dict needs exactly one of 'prompt' or 'prompt_token_ids'")
        if "prompt" in prompt:
            request.prompt = _text("prompt", prompt["prompt"])
            return request, request.prompt
        ids = prompt["prompt_token_ids"]
        if isinstance(ids, (str, bytes)) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise TypeError("prompt_token_ids must be a list of whole numbers")
        request.prompt_ids = list(ids)
        return request, None
    raise TypeError(f"a prompt is a string or a dict with 'prompt' or 'prompt_token_ids' "
                    f"(got {type(prompt).__name__})")


def _chat_request(messages, chat_template_kwargs, video_frames: int) -> _dllm.Request:
    request = _dllm.Request()
    messages = [_message_with_media(m, i, request) for i, m in enumerate(messages)]
    request.messages_json = _json("messages", messages)
    request.video_frames = video_frames
    if chat_template_kwargs:
        request.chat_template_kwargs_json = _json("chat_template_kwargs",
                                                  dict(chat_template_kwargs))
    return request


_DEFAULT_VIDEO_FRAMES = 32  # vLLM's num_frames default
_MEDIA_PARTS = {"image_url": "image", "video_url": "video"}


def _video_frames(media_io_kwargs, default: int) -> int:
    """The frames per video of vLLM's media_io_kwargs ({"video": {"num_frames": N}})."""
    if media_io_kwargs is None:
        return default
    if not isinstance(media_io_kwargs, Mapping):
        raise TypeError("media_io_kwargs must be a dict like {'video': {'num_frames': 32}}")
    video = media_io_kwargs.get("video")
    if video is None:
        return default
    if not isinstance(video, Mapping):
        raise TypeError("media_io_kwargs['video'] must be a dict like {'num_frames': 32}")
    for key in video:
        if key != "num_frames":
            raise ValueError(f"media_io_kwargs['video']['{key}'] is not supported (dllm samples "
                             "num_frames frames uniformly over the whole video)")
    n = video.get("num_frames", default)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1024:
        raise ValueError(f"media_io_kwargs['video']['num_frames'] must be a whole number in "
                         f"[1, 1024] (got {n!r})")
    return n


def _message_with_media(message, i: int, request: _dllm.Request):
    """The message as the chat template sees it: each image / video content part becomes
    {"type": "image"} / {"type": "video"} (the template writes its placeholder) and its bytes go
    to the request, named by the part. Messages without media are left as they are."""
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, (list, tuple)) or not any(
            isinstance(p, Mapping) and str(p.get("type")) in _MEDIA_PARTS for p in content):
        return message
    parts = []
    for j, part in enumerate(content):
        kind = _MEDIA_PARTS.get(str(part.get("type"))) if isinstance(part, Mapping) else None
        if kind is None:
            parts.append(part)
            continue
        where = f"messages[{i}].content[{j}]"
        data = _media_bytes(part, kind, where)
        (request.add_video_bytes if kind == "video" else request.add_image_bytes)(data, where)
        parts.append({"type": kind})
    return {**message, "content": parts}


def _media_bytes(part, kind: str, where: str) -> bytes:
    """The encoded bytes of an image_url / video_url content part."""
    key = part["type"]
    url = part.get(key)
    if isinstance(url, Mapping):
        url = url.get("url")
    if not isinstance(url, str):
        raise ValueError(f"{where}: {key} parts need {{'{key}': {{'url': ...}}}}")
    lower = url[:16].lower()
    if lower.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        if not comma:
            raise ValueError(f"{where}: a data: URL without the ',' before its data")
        if not header.lower().startswith(kind + "/") or not header.endswith(";base64"):
            raise ValueError(f"{where}: expected a data:{kind}/...;base64 URL "
                             f"(got data:{header[:40]})")
        try:
            return base64.b64decode(data, validate=True)
        except binascii.Error as e:
            raise ValueError(f"{where}: invalid base64 data: {e}") from None
    if lower.startswith("file://"):
        parsed = urllib.parse.urlparse(url)
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"{where}: file:// URLs name a local path (file:///abs/path)")
        try:
            with open(urllib.parse.unquote(parsed.path), "rb") as f:
                return f.read()
        except OSError as e:
            raise ValueError(f"{where}: {e}") from None
    raise ValueError(f"{where}: dllm fetches nothing from the network; give the {kind} as a "
                     f"data:{kind}/...;base64 URL or a file:// path (got {url[:24]!r}...)")


def _params_for(sampling_params, n: int) -> list[SamplingParams | None]:
    if sampling_params is None or isinstance(sampling_params, SamplingParams):
        return [sampling_params] * n
    if not isinstance(sampling_params, Sequence):
        _check_params(sampling_params)
    params = list(sampling_params)
    if len(params) != n:
        raise ValueError(f"sampling_params: {len(params)} given for {n} prompts (give one, or "
                         f"one per prompt)")
    return [_check_params(p) for p in params]


def _check_params(p) -> SamplingParams:
    if not isinstance(p, SamplingParams):
        raise TypeError(f"sampling_params must be dllm.SamplingParams (got {type(p).__name__})")
    return p


def _json(name: str, value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be JSON-serializable: {e}") from None


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string (got {type(value).__name__})")
    return value


def _whole(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a whole number (got {type(value).__name__})")
    return value


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number (got {type(value).__name__})")
    return float(value)
