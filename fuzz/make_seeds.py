#!/usr/bin/env python3
"""Assembles the fuzzers' seed corpora from the repository's own fixtures (nothing is committed
but this script): python3 fuzz/make_seeds.py OUT_DIR  ->  OUT_DIR/<target>/<seed files>.

Only small inputs are used: big files slow every fuzzing iteration down, and their structure is
already present in the small ones (safetensors headers are cut after the header, the 11 MB Qwen3
tokenizer is left out in favour of the 260 KB embedded one and the synthetic specs)."""
import glob
import json
import os
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIX = os.path.join(ROOT, "tests", "fixtures")


def write(out, target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data)


def safetensors_seeds(out):
    for path in sorted(glob.glob(os.path.join(FIX, "models", "*", "*.safetensors"))):
        with open(path, "rb") as f:
            blob = f.read()
        name = os.path.basename(os.path.dirname(path)) + "-" + os.path.basename(path)
        if len(blob) <= 64 * 1024:
            write(out, "safetensors_header", name, blob)
        # The length prefix and header alone (offsets then point past the end: also a case).
        (header_len,) = struct.unpack("<Q", blob[:8])
        write(out, "safetensors_header", name + ".header", blob[: 8 + header_len])


def config_seeds(out):
    paths = glob.glob(os.path.join(FIX, "models", "*", "config.json"))
    paths += glob.glob(os.path.join(ROOT, "models", "*", "config.json"))
    paths += glob.glob(os.path.join(ROOT, "configs", "*.json"))
    for path in sorted(paths):
        name = os.path.basename(os.path.dirname(path)) + "-" + os.path.basename(path)
        with open(path, "rb") as f:
            write(out, "config_reader", name, f.read())


def tokenizer_seeds(out):
    with open(os.path.join(FIX, "tokenizers", "synthetic_goldens.json")) as f:
        for spec in json.load(f)["tokenizers"]:
            write(out, "tokenizer_json", spec["name"] + ".json", json.dumps(spec["tokenizer_json"]))
    with open(os.path.join(ROOT, "models", "tokenizer", "tokenizer.json"), "rb") as f:
        write(out, "tokenizer_json", "embedded.json", f.read())


def jinja_seeds(out):
    with open(os.path.join(FIX, "chat_templates", "jinja_cases.json")) as f:
        for case in json.load(f)["cases"]:
            write(out, "jinja_template", case["name"] + ".jinja", case["template"])
    for path in sorted(glob.glob(os.path.join(FIX, "chat_templates", "synthetic", "*.jinja"))):
        with open(path, "rb") as f:
            write(out, "jinja_template", os.path.basename(path), f.read())
    with open(os.path.join(FIX, "chat_templates", "qwen3", "tokenizer_config.json")) as f:
        write(out, "jinja_template", "qwen3.jinja", json.load(f)["chat_template"])


def openai_request_seeds(out):
    bodies = [
        {"model": "tiny-block", "prompt": "1+2=", "max_tokens": 8, "stop": ["\n"], "n": 2},
        {"prompt": [[1, 2], [3]], "stream": True, "stream_options": {"include_usage": True}},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
         "max_completion_tokens": 4, "temperature": 0.7, "top_p": 0.9, "top_k": -1, "seed": 3,
         "strategy": "block", "block_length": 4, "dllm": {"stream_provisional": True},
         "stream": True, "chat_template_kwargs": {"enable_thinking": False}},
        {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": "file:///tmp/a.png"},
            {"type": "text", "text": "what is it?"}]}]},
        {"messages": [{"role": "user", "content": [
            {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAAIGZ0eXA="}},
            {"type": "text", "text": "what happens?"}]}],
         "media_io_kwargs": {"video": {"num_frames": 8}}},
    ]
    for i, body in enumerate(bodies):
        write(out, "openai_request", f"body{i}.json", json.dumps(body))


def image_seeds(out):
    """The small test images of every format the decoder reads (the large JPEG left out)."""
    paths = glob.glob(os.path.join(FIX, "images", "*"))
    paths += glob.glob(os.path.join(FIX, "models", "sdar-vl-tiny", "images", "*"))
    for path in sorted(paths):
        if os.path.getsize(path) <= 65536:
            with open(path, "rb") as f:
                write(out, "image_decode", os.path.basename(path), f.read())


def main():
    out = sys.argv[1]
    openai_request_seeds(out)
    image_seeds(out)
    safetensors_seeds(out)
    config_seeds(out)
    tokenizer_seeds(out)
    jinja_seeds(out)
    for target in sorted(os.listdir(out)):
        print(f"{target}: {len(os.listdir(os.path.join(out, target)))} seeds")


if __name__ == "__main__":
    main()
