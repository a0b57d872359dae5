"""The safetensors layout read with the standard library only (the app tests run without torch):
u64 little-endian header length, JSON header {name: {dtype, shape, data_offsets}}, raw data.
safetensors_io.py builds torch tensors on top; tests/apps/jsonl_losses.py reads f32 weights."""
import json
import struct


def read(path):
    """(header without "__metadata__", data bytes, metadata dict or None)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    metadata = header.pop("__metadata__", None)
    return header, data, metadata
