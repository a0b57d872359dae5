"""Minimal safetensors writer/reader for the parity oracle (torch 1.13 ships no safetensors).

Format: u64 little-endian header length, JSON header {name: {dtype, shape, data_offsets}}, raw data.
"""
import json
import struct

import torch

import safetensors_raw

_DTYPES = {
    torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16", torch.float16: "F16",
    torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL",
}
_TORCH = {v: k for k, v in _DTYPES.items()}


def _raw(t):
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def save(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = _raw(t)
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load(path):
    header, data, _ = safetensors_raw.read(path)
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = _TORCH[info["dtype"]]
        raw = bytearray(data[b:e])
        if dt in (torch.bfloat16, torch.float16):
            t = torch.frombuffer(raw, dtype=torch.int16).view(dt) if e > b else torch.empty(0, dtype=dt)
        else:
            t = torch.frombuffer(raw, dtype=dt) if e > b else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out
