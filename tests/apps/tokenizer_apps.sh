#!/usr/bin/env bash
# kiln-tokenize, kiln-make-shards --tokenizer gpt2 and sample_gpt on GPT-2 tokens, end to end:
# ids from the shell, decode back to the exact bytes (invalid UTF-8 included), shards laid out as
# llm.c's (each document opened by <|endoftext|>, the val split the tail), --dir equal to --text,
# clear errors, and sample_gpt printing text from a model trained on those shards.
# Exits 77 (skipped) without the tokenizer files. Usage: tokenizer_apps.sh BIN_DIR WORK_DIR
set -euo pipefail
bin=$1 work=$2
if [ -n "${KILN_CACHE:-}" ]; then tok_dir=$KILN_CACHE/gpt2; else tok_dir=${XDG_CACHE_HOME:-$HOME/.cache}/kiln/gpt2; fi
if [ ! -f "$tok_dir/encoder.json" ] || [ ! -f "$tok_dir/vocab.bpe" ]; then
  echo "SKIPPED: no GPT-2 tokenizer files in $tok_dir (run scripts/get-gpt2-tokenizer.sh)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

# Text -> ids -> text.
got=$(printf 'Hello world' | "$bin/kiln-tokenize" --ids)
[ "$got" = "15496 995" ] || fail "kiln-tokenize 'Hello world' gave '$got'"
[ "$(printf 'Hello world' | "$bin/kiln-tokenize")" = "15496 995" ] || fail "--ids is not the default"
[ "$(printf 'Hello world' | "$bin/kiln-tokenize" --count)" = "2" ] || fail "--count"
[ "$(printf 'a<|endoftext|>b' | "$bin/kiln-tokenize" --special)" = "64 50256 65" ] || fail "--special"
[ "$(printf 'a<|endoftext|>b' | "$bin/kiln-tokenize" | wc -w)" -gt 3 ] || fail "plain <|endoftext|> must be text"
[ "$(printf '15496 995' | "$bin/kiln-tokenize" --decode)" = "Hello world" ] || fail "--decode"
printf 'caf\xc3\xa9 \xff\xfe bad \xe4\xb8 bytes\n\n  \ttrailing  \n' > "$work/odd.txt"
"$bin/kiln-tokenize" < "$work/odd.txt" | "$bin/kiln-tokenize" --decode > "$work/odd.back"
cmp "$work/odd.txt" "$work/odd.back" || fail "round trip of odd bytes"
if echo "1 2 99999" | "$bin/kiln-tokenize" --decode 2> "$work/err.txt"; then fail "--decode accepted 99999"; fi
grep -q '"99999" (input word 3) is not a token id below 50257' "$work/err.txt" || fail "bad id message: $(cat "$work/err.txt")"
if echo hi | "$bin/kiln-tokenize" --tokenizer-dir "$work/nowhere" 2> "$work/err.txt"; then fail "no tables accepted"; fi
grep -q "encoder.json is missing.*get-gpt2-tokenizer.sh" "$work/err.txt" || fail "missing tables message: $(cat "$work/err.txt")"

# Shards: two documents in one file (split at a written <|endoftext|>) and one in another.
mkdir -p "$work/corpus/sub"
printf 'The first document.<|endoftext|>The second one, with "quotes".\n' > "$work/corpus/a.txt"
for i in $(seq 1 300); do printf 'Line %d of the third document: the cat sat on the mat.\n' "$i"; done \
  > "$work/corpus/sub/b.txt"
"$bin/kiln-make-shards" --tokenizer gpt2 --text "$work/corpus/a.txt" "$work/corpus/sub/b.txt" --val-fraction 0.2 \
  --shard-tokens 2000 --out "$work/shards" > "$work/make.txt"
cat "$work/make.txt"
grep -q "tokenized 2/2 files (3 documents" "$work/make.txt" || fail "progress line"
grep -q "val unigram entropy" "$work/make.txt" || fail "unigram entropy line"
[ -f "$work/shards/unigram_entropy.txt" ] || fail "unigram_entropy.txt"
[ ! -f "$work/shards/floor.txt" ] || fail "a text corpus has no floor.txt"
"$bin/kiln-make-shards" --tokenizer gpt2 --dir "$work/corpus" --val-fraction 0.2 --shard-tokens 2000 \
  --out "$work/shards_dir" > /dev/null
for f in "$work"/shards/*.bin; do cmp "$f" "$work/shards_dir/$(basename "$f")" || fail "--dir differs from --text"; done
{
  printf 'The first document.' | "$bin/kiln-tokenize"
  printf 'The second one, with "quotes".\n' | "$bin/kiln-tokenize"
  "$bin/kiln-tokenize" < "$work/corpus/sub/b.txt"
} > "$work/expected_ids.txt"
python3 - "$work/shards" "$work/expected_ids.txt" <<'PY'
import glob, math, struct, sys
from collections import Counter
shards, expected = sys.argv[1], sys.argv[2]
def read(path):
    data = open(path, "rb").read()
    magic, version, n = struct.unpack("<3i", data[:12])
    assert (magic, version) == (20240520, 1), path
    assert len(data) == 1024 + 2 * n, path
    return list(struct.unpack("<%dH" % n, data[1024:]))
train = [t for p in sorted(glob.glob(shards + "/train_*.bin")) for t in read(p)]
val = [t for p in sorted(glob.glob(shards + "/val_*.bin")) for t in read(p)]
assert len(glob.glob(shards + "/train_*.bin")) >= 2, "shard-tokens 2000 must give several train shards"
want = []
for line in open(expected):
    want += [50256] + [int(x) for x in line.split()]
got = train + val
assert got == want, "shard tokens differ from kiln-tokenize's (%d vs %d tokens)" % (len(got), len(want))
assert len(val) == round(0.2 * len(got)), (len(val), len(got))
c = Counter(val)
h = -sum(n / len(val) * math.log(n / len(val)) for n in c.values())
file_h = float(open(shards + "/unigram_entropy.txt").read().split()[0])
assert abs(h - file_h) < 1e-9, (h, file_h)
print("shards ok: %d train + %d val tokens, val unigram entropy %.4f" % (len(train), len(val), h))
PY

# sample_gpt prints text from a GPT-2-vocabulary model trained on these shards.
"$bin/train_gpt" --model gpt2-124m --n-layer 1 --n-head 2 --n-embd 32 --train "$work/shards/train_*.bin" \
  --batch-size 2 --seq-len 64 --steps 3 --warmup-steps 1 --log-every 1 --threads 1 \
  --checkpoint-dir "$work/ckpt" > /dev/null
ckpt=$(ls -v "$work"/ckpt/step_*.safetensors | tail -n 1)
"$bin/sample_gpt" --checkpoint "$ckpt" --prompt "The cat sat" --tokens 20 --seed 1 --threads 1 > "$work/sample.txt"
head -c 11 "$work/sample.txt" | grep -q "^The cat sat$" || fail "sample does not start with the prompt: $(cat "$work/sample.txt")"
if grep -qE '^[0-9]+ [0-9]+ ' "$work/sample.txt"; then fail "sample_gpt printed ids, not text"; fi
"$bin/sample_gpt" --checkpoint "$ckpt" --prompt-ids 464,3797 --tokens 5 --seed 1 --threads 1 \
  --tokenizer-dir "$work/nowhere" > "$work/ids.txt"
grep -qE '^464 3797 ([0-9]+ ){5}' "$work/ids.txt" || fail "without tables sample_gpt prints ids: $(cat "$work/ids.txt")"
echo "tokenizer apps: ok"
