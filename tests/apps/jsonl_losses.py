# Helpers for the gpt app tests: read train_gpt's JSONL metrics and train_gpt checkpoints
# (safetensors) with the standard library only, and compare them.
import json
import os
import sys
from array import array

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
import safetensors_raw  # noqa: E402 (standard library only, like this file)


def lines(path, kind):
    with open(path) as f:
        return [o for o in map(json.loads, f) if o.get("type") == kind]


def train_losses(path):
    return {o["step"]: o["loss"] for o in lines(path, "train")}


def model_tensors(path):
    """name -> list of floats, for the f32 model.* tensors of a safetensors checkpoint."""
    header, data, _ = safetensors_raw.read(path)
    out = {}
    for name, info in header.items():
        if name.startswith("model.") and info["dtype"] == "F32":
            begin, end = info["data_offsets"]
            out[name] = array("f", data[begin:end]).tolist()
    return out


def check_converge(metrics, ratio):
    floor = lines(metrics, "config")[0]["entropy_floor"]
    val = lines(metrics, "eval")[-1]["val_loss"]
    train = lines(metrics, "train")[-1]["loss"]
    print(f"entropy floor {floor:.4f}; final train loss {train:.4f} ({train / floor:.3f}x), "
          f"val loss {val:.4f} ({val / floor:.3f}x); allowed {ratio}x")
    # The validation loss (many tokens) is the measure; one batch's training loss only has to be near.
    return val <= ratio * floor and train <= (ratio + 0.05) * floor


def check_equal_losses(a, b):
    la, lb = train_losses(a), train_losses(b)
    print(f"{len(la)} vs {len(lb)} logged steps")
    bad = [s for s in sorted(set(la) | set(lb)) if la.get(s) != lb.get(s)]
    for s in bad[:5]:
        print(f"step {s}: {la.get(s)!r} != {lb.get(s)!r}")
    return len(la) > 0 and not bad


def check_close(a, b, ckpt_a, ckpt_b, tol):
    la, lb = train_losses(a), train_losses(b)
    ok = len(la) > 0 and sorted(la) == sorted(lb)
    worst = max((abs(la[s] - lb[s]) / max(1.0, abs(la[s])) for s in la if s in lb), default=float("inf"))
    ta, tb = model_tensors(ckpt_a), model_tensors(ckpt_b)
    ok = ok and len(ta) > 0 and sorted(ta) == sorted(tb)
    worst_w = max((abs(x - y) for n in ta if n in tb for x, y in zip(ta[n], tb[n])), default=float("inf"))
    print(f"{len(la)} losses, max relative difference {worst:.3g}; {len(ta)} tensors, max weight difference "
          f"{worst_w:.3g}; tolerance {tol}")
    return ok and worst <= tol and worst_w <= tol


def check_final_val(a, b, nats):
    """The last validation losses of two runs within `nats` of each other."""
    va, vb = lines(a, "eval")[-1]["val_loss"], lines(b, "eval")[-1]["val_loss"]
    print(f"final val loss {va:.4f} vs {vb:.4f}: difference {abs(va - vb):.4f} nats, allowed {nats}")
    return abs(va - vb) <= nats


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "converge":
        ok = check_converge(args[0], float(args[1]))
    elif cmd == "final_val":
        ok = check_final_val(args[0], args[1], float(args[2]))
    elif cmd == "equal":
        ok = check_equal_losses(args[0], args[1])
    else:
        ok = check_close(args[0], args[1], args[2], args[3], float(args[4]))
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)
