#!/usr/bin/env python3
"""Writes the tokenizer goldens the C++ tests compare against, using Hugging Face `tokenizers`
(and checking `transformers` agrees on the real tokenizer).

    python3 tools/make_tokenizer_goldens.py          # from the repository root

Reads   tests/fixtures/tokenizers/qwen3/tokenizer.json and tests/fixtures/tokenizers/corpus/*.txt
Writes  tests/fixtures/tokenizers/qwen3_goldens.json      ids + decoded text per corpus text/line,
                                                          decode of random id lists, vocab samples
        tests/fixtures/tokenizers/synthetic_goldens.json  Split behaviors (pieces) and small
                                                          synthetic tokenizers (ids, decoded text)
"""
import json
import os
import random
import sys

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
CORPUS = os.path.join(FIXTURES, "corpus")


def read_corpus():
    """(name, text) for every corpus file, then for each distinct line of it."""
    cases = []
    for name in sorted(os.listdir(CORPUS)):
        if not name.endswith(".txt"):
            continue
        with open(os.path.join(CORPUS, name), "rb") as f:
            text = f.read().decode("utf-8")
        cases.append((name, text))
        seen = set()
        for i, line in enumerate(text.split("\n")):
            if line and line not in seen and line != text:
                seen.add(line)
                cases.append((f"{name}:{i + 1}", line))
    return cases


def encode_case(tok, name, text):
    ids = tok.encode(text, add_special_tokens=False).ids
    return {
        "name": name,
        "text": text,
        "ids": ids,
        "decoded": tok.decode(ids, skip_special_tokens=False),
        "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
    }


def check_transformers(cases, decode_cases):
    """The real-model goldens must also be what transformers returns; stop if not."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        print("transformers not installed; skipping the cross-check", file=sys.stderr)
        return None
    import transformers
    hf = AutoTokenizer.from_pretrained(os.path.join(FIXTURES, "qwen3"))
    for c in cases:
        ids = hf.encode(c["text"], add_special_tokens=False)
        assert ids == c["ids"], f"transformers encodes {c['name']} differently"
        assert hf.decode(ids, skip_special_tokens=False) == c["decoded"], c["name"]
        assert hf.decode(ids, skip_special_tokens=True) == c["decoded_skip_special"], c["name"]
    for c in decode_cases:
        assert hf.decode(c["ids"], skip_special_tokens=c["skip_special_tokens"]) == c["text"]
    return transformers.__version__


def qwen3_goldens():
    tok = Tokenizer.from_file(os.path.join(FIXTURES, "qwen3", "tokenizer.json"))
    cases = [encode_case(tok, name, text) for name, text in read_corpus()]

    # Random id lists, biased towards special tokens and lone high bytes, so decoding meets
    # broken UTF-8 sequences and skipped specials.
    rng = random.Random(20261122)
    special_ids = sorted(tok.get_added_tokens_decoder().keys())
    byte_ids = sorted({tok.token_to_id(c) for c in pre_tokenizers.ByteLevel.alphabet()})
    base_vocab = tok.get_vocab_size(with_added_tokens=False)
    decode_cases = []
    for i in range(300):
        ids = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.6:
                ids.append(rng.randrange(base_vocab))
            elif r < 0.8:
                ids.append(rng.choice(special_ids))
            else:
                ids.append(rng.choice(byte_ids))
        skip = i % 2 == 1
        decode_cases.append({"ids": ids, "skip_special_tokens": skip,
                             "text": tok.decode(ids, skip_special_tokens=skip)})

    sample_ids = sorted(rng.sample(range(tok.get_vocab_size(True)), 200)) + special_ids
    vocab_samples = [{"id": i, "token": tok.id_to_token(i)} for i in sample_ids]
    added = tok.get_added_tokens_decoder()
    transformers_version = check_transformers(cases, decode_cases)
    return {
        "generator": "tools/make_tokenizer_goldens.py",
        "tokenizers_version": tokenizers.__version__,
        "transformers_version": transformers_version,
        "tokenizer": "qwen3/tokenizer.json",
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "special_ids": [i for i in special_ids if added[i].special],
        "vocab_samples": vocab_samples,
        "cases": cases,
        "decode_cases": decode_cases,
    }


# ---- synthetic tokenizers ----

SPLIT_INPUTS = ["", "a  b\t c", "x--y----z--", "12ab3 4e", "--", "  lead and trail  ",
                "héllo wörld 123", "aaa", "-a-", "\n\n x \n"]
SPLIT_PATTERNS = [Regex(r"\s+"), Regex(r"\d+|[aeiou]"), Regex(r"x*"), Regex(r"(?i:A)|\p{N}"),
                  "--", " "]
BEHAVIORS = ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]

TRAIN_TEXT = """The quick brown fox jumps over the lazy dog. Hello world! hello there, café
naïve résumé 12345 67890 the THE The then there these those words word wordy sword
mask masked <mask> tokens and [SEP] separators; ab abc abcd abcde x_y x-y x.y
"""


def spec_of(pre_tokenizer):
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizer
    return json.loads(t.to_str())["pre_tokenizer"]


def split_goldens():
    out = []
    for pattern in SPLIT_PATTERNS:
        for behavior in BEHAVIORS:
            for invert in (False, True):
                split = pre_tokenizers.Split(pattern, behavior=behavior, invert=invert)
                inputs = [{"text": s, "pieces": [p for p, _ in split.pre_tokenize_str(s)]}
                          for s in SPLIT_INPUTS]
                out.append({"spec": spec_of(split), "inputs": inputs})
    return out


def base_bpe():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=420, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TRAIN_TEXT] * 3, trainer)
    return json.loads(tok.to_str())["model"]


SYNTHETIC_TEXTS = [
    "", "Hello world", "  leading and trailing  ", "The quick brown fox.", "hello\n\nthere\tx",
    "a<mask>b", "x <mask> y", "x  <mask>  y", "<mask>", " <mask>", "<mask><mask>",
    "a [SEP] b", "a [SEP]   b", "[SEP]\n\nnext", "<both>", "p  <both>  q", "p\t<both>\nq",
    "word", "a word here", "sword", "wordy", "word.", "(word)", "_word", "wordé", "é word 1word",
    "café", "cafe\u0301", "un café noir", "cafe\u0301x and caféx", "<pre", "<prefix>", "<prefix",
    "x<prefix>y<pre>", "masked tokens", "THE then the", "12345 67890", "naïve résumé ✓ ☃ 😀",
    "Hello <mask> [SEP] <both> word café <prefix> end",
]


def synthetic_tokenizers():
    model = base_bpe()
    variants = []

    def make(name, pre_tokenizer, normalizer=None, added=(), special=(), model_json=None,
             post_processor=None):
        tok = Tokenizer.from_str(json.dumps({
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": None, "pre_tokenizer": None, "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": model_json or model}))
        tok.pre_tokenizer = pre_tokenizer
        if normalizer is not None:
            tok.normalizer = normalizer
        if post_processor is not None:
            tok.post_processor = post_processor
        tok.add_special_tokens(list(special))
        tok.add_tokens(list(added))
        spec = json.loads(tok.to_str())
        if name == "legacy_merges":
            # The older merges format: one "left right" string per merge.
            spec["model"]["merges"] = [" ".join(m) for m in spec["model"]["merges"]]
        tok = Tokenizer.from_str(json.dumps(spec))  # goldens from exactly what is stored
        variants.append({"name": name, "tokenizer_json": spec,
                         "cases": [encode_case(tok, repr(t), t) for t in SYNTHETIC_TEXTS]})

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    added = [
        AddedToken("<both>", lstrip=True, rstrip=True, normalized=False, special=False),
        AddedToken("word", single_word=True, normalized=False, special=False),
        AddedToken("café", normalized=True, special=False),
        AddedToken("cafe\u0301x", normalized=True, special=False),
        AddedToken("<pre", normalized=False, special=False),
        AddedToken("<prefix>", normalized=False, special=False),
        AddedToken("The", normalized=False, special=False),  # already in the model vocabulary
    ]
    special = [
        AddedToken("<mask>", lstrip=True, normalized=False, special=True),
        AddedToken("[SEP]", rstrip=True, normalized=False, special=True),
    ]
    make("added_tokens_nfc", byte_level, normalizers.NFC(), added, special)
    make("prefix_space_gpt2_regex", pre_tokenizers.ByteLevel(add_prefix_space=True,
                                                             use_regex=True), None, added, special,
         post_processor=processors.ByteLevel(trim_offsets=False))
    make("prefix_space_no_regex", pre_tokenizers.ByteLevel(add_prefix_space=True,
                                                           use_regex=False),
         normalizers.Sequence([normalizers.NFC()]), (), special)
    make("legacy_merges", byte_level, None, (), special)
    make("split_sequence", pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        normalizers.NFC(), (), special,
        post_processor=processors.TemplateProcessing(single="[SEP] $A", special_tokens=[
            ("[SEP]", 0)]))

    # ignore_merges: words that are vocabulary entries are taken whole even when the merges
    # would not build them. Add such an entry ("xyzzy") that no merge produces.
    unreachable = dict(model)
    unreachable["vocab"] = dict(model["vocab"])
    unreachable["vocab"]["xyzzy"] = len(unreachable["vocab"])
    for flag in (True, False):
        m = dict(unreachable)
        m["ignore_merges"] = flag
        make(f"ignore_merges_{str(flag).lower()}", byte_level, None, (), special, model_json=m)
    return variants


def main():
    qwen = qwen3_goldens()
    with open(os.path.join(FIXTURES, "qwen3_goldens.json"), "w", encoding="utf-8") as f:
        json.dump(qwen, f, ensure_ascii=False, indent=0)
        f.write("\n")
    synthetic = {
        "generator": "tools/make_tokenizer_goldens.py",
        "tokenizers_version": tokenizers.__version__,
        "splits": split_goldens(),
        "tokenizers": synthetic_tokenizers(),
    }
    with open(os.path.join(FIXTURES, "synthetic_goldens.json"), "w", encoding="utf-8") as f:
        json.dump(synthetic, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(qwen['cases'])} qwen3 cases, {len(qwen['decode_cases'])} decode cases, "
          f"{len(synthetic['splits'])} split specs, {len(synthetic['tokenizers'])} synthetic "
          "tokenizers")


if __name__ == "__main__":
    main()
