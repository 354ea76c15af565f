#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizers/byte-vl/: a byte-level BPE tokenizer without merges (one token
per byte, ids 0-255) whose special tokens sit at the SDAR-VL test fixture's ids (<|image_pad|> 300,
<|video_pad|> 301, inside its 320-token vocabulary), and a Qwen-style chat template that writes
<|image_pad|> / <|video_pad|> for {"type": "image"} / {"type": "video"} content parts, as SDAR-VL's
template does. With the fixture's weights it makes a chat-capable vision model for the server
tests (tests/server/server_vision_test.cpp). Standard library only.
"""
import json
import pathlib

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/tokenizers/byte-vl"

SPECIAL = {"<|im_start|>": 256, "<|im_end|>": 257, "<|endoftext|>": 258, "<|mask|>": 290,
           "<|image_pad|>": 300, "<|video_pad|>": 301}

TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{- '<|image_pad|>' -}}"
    "{%- elif part['type'] == 'video' -%}{{- '<|video_pad|>' -}}"
    "{%- elif part['type'] == 'text' -%}{{- part['text'] -}}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")


def byte_symbols():
    """GPT-2's byte -> printable character map (the ByteLevel pre-tokenizer's alphabet)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
                 list(range(ord("®"), ord("ÿ") + 1)))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def main():
    symbols = byte_symbols()
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for t, i in SPECIAL.items()]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {symbols[b]: b for b in range(256)}, "merges": []},
    }
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None,
              "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "mask_token": "<|mask|>",
              "chat_template": TEMPLATE}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False, indent=1) + "\n")
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")


if __name__ == "__main__":
    main()
