"""dllm.LLM.chat with images and videos (vLLM's image_url / video_url content parts) gives what
`dllm generate --chat --image / --video` gives on the same files: the SDAR-VL test fixture's
weights with the byte-level chat tokenizer of tests/fixtures/tokenizers/byte-vl."""
import base64
import json
import os
import shutil
import subprocess

import pytest

import dllm
from conftest import DEVICE, DLLM, FIXTURES

MAX_TOKENS = 8
FIXTURE = os.path.join(FIXTURES, "models", "sdar-vl-tiny")


def _image(name):
    return os.path.join(FIXTURE, "images", name)


VIDEO = os.path.join(FIXTURE, "video.mkv")


@pytest.fixture(scope="module")
def vl_model(tmp_path_factory):
    """The fixture's checkpoint with a tokenizer and chat template, in a temp directory."""
    d = tmp_path_factory.mktemp("vision-chat-model")
    for name in os.listdir(FIXTURE):
        path = os.path.join(FIXTURE, name)
        if os.path.isfile(path):
            os.symlink(path, d / name)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(FIXTURES, "tokenizers", "byte-vl", name), d / name)
    return str(d)


@pytest.fixture(scope="module")
def llm(vl_model):
    with dllm.LLM(vl_model, device=DEVICE) as engine:
        yield engine


def _data_url(path, media_type):
    with open(path, "rb") as f:
        return f"data:{media_type};base64," + base64.b64encode(f.read()).decode()


def _cli(model, text, *args):
    """`dllm generate --chat` with the same text, media and knobs: its JSON result."""
    out = subprocess.run([DLLM, "generate", "-m", model, "--device", DEVICE, "--chat", "-p", text,
                          "--max-tokens", str(MAX_TOKENS), "--remasking", "low_confidence_static",
                          "--format", "json", *args],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout[out.stdout.index("{"):])


PARAMS = dllm.SamplingParams(max_tokens=MAX_TOKENS, remasking="low_confidence_static")


def _chat(llm, parts, text, **kwargs):
    content = parts + [{"type": "text", "text": text}]
    return llm.chat([{"role": "user", "content": content}], PARAMS, **kwargs)[0]


def _expect_same(got, want, media_tokens=729):
    assert want["ids"], want
    assert got.token_ids == want["ids"]
    # The prompt the model saw: placeholders expanded to the media's features (729 per image
    # crop, 196 per video frame).
    assert got.stats.prompt_tokens == want["stats"]["prompt_tokens"] > media_tokens


def test_model_info_says_vision(llm):
    assert llm.model_info.has_vision


def test_image_url_parts_match_cli(llm, vl_model):
    got = _chat(llm, [{"type": "image_url", "image_url": {"url": _data_url(_image("wide.png"),
                                                                           "image/png")}}],
                "What is this?")
    _expect_same(got, _cli(vl_model, "What is this?", "--image", _image("wide.png")))
    # Two images, a bare-string URL and a file:// one, in order.
    got = _chat(llm, [{"type": "image_url", "image_url": _data_url(_image("tall.jpg"),
                                                                   "image/jpeg")},
                      {"type": "image_url", "image_url": {"url": "file://" + _image("gray.png")}}],
                "Compare")
    _expect_same(got, _cli(vl_model, "Compare", "--image", _image("tall.jpg"),
                           "--image", _image("gray.png")))


def test_video_url_parts_match_cli(llm, vl_model):
    video = {"type": "video_url", "video_url": {"url": _data_url(VIDEO, "video/x-matroska")}}
    got = _chat(llm, [video], "What happens?", media_io_kwargs={"video": {"num_frames": 4}})
    _expect_same(got, _cli(vl_model, "What happens?", "--video", VIDEO, "--frames", "4"))
    # The default (32 frames: every one of the fixture's 10), from a file:// URL.
    got = _chat(llm, [{"type": "video_url", "video_url": {"url": "file://" + VIDEO}}], "All")
    _expect_same(got, _cli(vl_model, "All", "--video", VIDEO, "--frames", "32"))
    # An image and a video in one message.
    image = {"type": "image_url", "image_url": {"url": _data_url(_image("square.png"),
                                                                 "image/png")}}
    got = _chat(llm, [image, video], "Both", media_io_kwargs={"video": {"num_frames": 3}})
    _expect_same(got, _cli(vl_model, "Both", "--image", _image("square.png"),
                           "--video", VIDEO, "--frames", "3"))


def test_llm_media_io_kwargs_sets_the_default_frames(vl_model):
    with dllm.LLM(vl_model, device=DEVICE, media_io_kwargs={"video": {"num_frames": 2}}) as llm:
        got = _chat(llm, [{"type": "video_url", "video_url": {"url": "file://" + VIDEO}}], "Two")
    _expect_same(got, _cli(vl_model, "Two", "--video", VIDEO, "--frames", "2"), 2 * 196)


def test_bad_media_parts_name_the_part(llm):
    def expect(error, parts, words, **kwargs):
        with pytest.raises(error) as e:
            _chat(llm, parts, "x", **kwargs)
        assert words in str(e.value)

    expect(ValueError, [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}],
           "messages[0].content[0]: dllm fetches nothing from the network")
    expect(ValueError, [{"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}}],
           "messages[0].content[0]: invalid base64")
    expect(ValueError, [{"type": "text", "text": "a"},
                        {"type": "video_url", "video_url": {"url": "data:image/png;base64,aGk="}}],
           "messages[0].content[1]: expected a data:video/...;base64 URL")
    expect(ValueError, [{"type": "image_url", "image_url": {"url": "file:///nonexistent/a.png"}}],
           "messages[0].content[0]: [Errno 2]")
    # Decoded by the engine, which names the part.
    expect(dllm.Error, [{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}}],
           "messages[0].content[0]: not a JPEG, PNG or WebP image")
    expect(dllm.Error, [{"type": "video_url", "video_url": {"url": "data:video/mp4;base64,aGk="}}],
           "messages[0].content[0]: cannot open video")
    video = [{"type": "video_url", "video_url": {"url": "file://" + VIDEO}}]
    expect(ValueError, video, "must be a whole number in [1, 1024]",
           media_io_kwargs={"video": {"num_frames": 0}})
    expect(ValueError, video, "['fps'] is not supported", media_io_kwargs={"video": {"fps": 1}})
    # The engine is unharmed.
    assert _chat(llm, video, "x", media_io_kwargs={"video": {"num_frames": 1}}).token_ids
