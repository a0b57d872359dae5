#!/usr/bin/env bash
# Downloads the official CIFAR-10 binary version (cifar-10-binary.tar.gz), checks its md5 and
# extracts it into DIR (giving DIR/cifar-10-batches-bin/data_batch_1.bin ...). Needs internet;
# CI never runs it (tests write their own files in the official format). No package registry
# carries these batches, so it downloads from the dataset's home page, or from a copy named by
# KILN_CIFAR10_URL (a mirror, or a file:// path); curl/wget honour the usual proxy variables.
set -euo pipefail

usage() { echo "usage: $0 DIR   (then pass DIR/cifar-10-batches-bin to train_cifar)" >&2; exit 2; }
[[ $# -eq 1 ]] || usage
dir=$1
url=${KILN_CIFAR10_URL:-https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz}
md5=c32a1d4ab5d03f1284b67883e8d87530
archive=$dir/cifar-10-binary.tar.gz

mkdir -p "$dir"
if [[ ! -f $archive ]]; then
  echo "downloading $url"
  if command -v curl >/dev/null; then
    curl -fL --retry 3 -o "$archive.part" "$url"
  elif command -v wget >/dev/null; then
    wget -O "$archive.part" "$url"
  else
    echo "error: neither curl nor wget is installed" >&2; exit 1
  fi
  mv "$archive.part" "$archive"
fi

if command -v md5sum >/dev/null; then
  got=$(md5sum "$archive" | cut -d' ' -f1)
else
  got=$(md5 -q "$archive")  # macOS
fi
if [[ $got != "$md5" ]]; then
  echo "error: $archive has md5 $got, expected $md5 (delete it and run again)" >&2
  exit 1
fi

tar -xzf "$archive" -C "$dir"
echo "CIFAR-10 is in $dir/cifar-10-batches-bin"
