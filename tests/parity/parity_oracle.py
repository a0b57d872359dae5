"""What every PyTorch parity oracle (gen_*.py, hf_gpt2.py) does around its own cases.

Importing this module first checks for torch: without it the script prints that it is skipped and
exits 77 (CTest: skipped, and the comparison that needs its file with it). `write` saves the
oracle's tensors to the path it was given (argv[1]) with torch's version in the metadata, and says
what it wrote. A script runs as `/usr/bin/python3 tests/parity/gen_NAME.py OUT.safetensors`, so
this directory is on sys.path and `import parity_oracle` finds this file.
"""
import os
import sys

NAME = os.path.splitext(os.path.basename(sys.argv[0]))[0]

try:
    import torch
except ImportError:
    print(f"{NAME}: SKIPPED: this python has no torch (install python3-torch)")
    sys.exit(77)

import safetensors_io  # noqa: E402 (it needs torch)


def write(tensors, metadata=None, what=None, path=None):
    """Saves `tensors` to `path` (argv[1]) with {"torch": version, **metadata} as the metadata."""
    path = path or sys.argv[1]
    safetensors_io.save(path, tensors, {"torch": torch.__version__, **(metadata or {})})
    print(f"{NAME}: wrote {what or f'{len(tensors)} tensors'} to {path}")
