#!/usr/bin/env python3
"""Cross-checks gpt2_vectors.json (written by gen_gpt2_vectors.js with the npm package's JS
encoder) against OpenAI's encoder.py logic run with the Python `regex` module, GPT-2's own
pre-tokenizer. Exits 1 on any difference. Usage: gen_gpt2_vectors_check.py DIR_WITH_encoder.json_AND_vocab.bpe
"""
import json
import os
import sys

import regex

PAT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def main():
    d = sys.argv[1]
    encoder = json.load(open(os.path.join(d, "encoder.json")))
    merges = open(os.path.join(d, "vocab.bpe"), encoding="utf-8").read().split("\n")[1:-1]
    ranks = {tuple(m.split()): i for i, m in enumerate(merges)}
    byte_encoder = bytes_to_unicode()

    def bpe(word):
        word = list(word)
        while len(word) > 1:
            pairs = [(ranks.get(p, float("inf")), p) for p in zip(word, word[1:])]
            r, best = min(pairs)
            if r == float("inf"):
                break
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = out
        return word

    def encode(text):
        ids = []
        for piece in PAT.findall(text):
            ids += [encoder[t] for t in bpe("".join(byte_encoder[b] for b in piece.encode("utf-8")))]
        return ids

    here = os.path.dirname(os.path.abspath(__file__))
    vectors = json.load(open(os.path.join(here, "gpt2_vectors.json")))
    bad = [c["text"] for c in vectors if encode(c["text"]) != c["ids"]]
    for t in bad:
        print("differs:", json.dumps(t))
    print("gen_gpt2_vectors_check: %d of %d cases agree with encoder.py under Python regex" % (len(vectors) - len(bad), len(vectors)))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
