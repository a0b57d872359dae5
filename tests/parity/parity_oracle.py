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

# KILN_TORCH_ISA=avx2: make torch compute as it does on a CPU without AVX-512 (an AMD EPYC before
# Zen 4), whatever this machine has, so an AVX-512 machine also tests Kiln against that torch
# (tests/parity/CMakeLists.txt runs every oracle a second time so). ATen's kernels and oneDNN's are
# capped at AVX2 by their own variables, which must be set before torch loads; torch 1.13 also
# routes bf16 ops (GELU, and the GEMMs of bf16 linear) to oneDNN only where cpuinfo reports
# AVX-512, which no variable caps: an oracle with bf16 ops runs them under `bf16_as_avx2()` (oneDNN
# capped at AVX2 would refuse them: "could not create a primitive descriptor iterator").
# oneDNN capped below AVX-512 by hand (DNNL_MAX_CPU_ISA=AVX2, as for a whole suite run with
# KILN_CPU_CAPABILITY=avx2) refuses torch's bf16 ops too: the same emulation is needed then.
AS_AVX2 = (os.environ.get("KILN_TORCH_ISA", "") == "avx2" or
           os.environ.get("DNNL_MAX_CPU_ISA", "").upper() in ("SSE41", "AVX", "AVX2", "AVX2_VNNI"))
if AS_AVX2:
    os.environ["ATEN_CPU_CAPABILITY"] = "avx2"
    os.environ["DNNL_MAX_CPU_ISA"] = "AVX2"

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


def bf16_as_avx2():
    """A context in which torch's bf16 ops take the path they take on a CPU without AVX-512
    (oneDNN off: ATen's own kernels) under KILN_TORCH_ISA=avx2; torch's own choice otherwise."""
    return torch.backends.mkldnn.flags(enabled=not AS_AVX2)
