#!/usr/bin/env python3
"""The prepared GPU run (issue #52): every GPU path that is switched off because it never ran on a
GPU, proven or refuted in one device call, each step under its own time limit.

  stage tests   the gpu tests of each switched-off path with its switch on, compute-sanitizer
                memcheck on the small ones, the layer-norm variants against the CPU
  stage train   gpt-tiny, 50 bf16 steps: no switch, each switch alone, all on; losses compared
  stage sweep   bench_cuda --sweep: layer-norm variants, Kiln vs cuDNN attention (dQ accumulator
                zeroed and not), the GELU epilogue, the fused add + layer norm
  stage bench   gpt2-124m (B16 T1024) the same ways, PyTorch eager and torch.compile beside it
  stage profile gpt2-124m's step under Kiln's profiler (device spans), no switch and all on: the
                kernels that hold the step, for README's profile
  stage big     gpt-1.3b (B8 T2048, no recompute): no switch and all on, PyTorch beside it; peak
                memory next to the formula's
  stage suite   every gpu test (ctest -L gpu) under the defaults the first run flipped
  stage kernels bench_cuda: Kiln's kernels against PyTorch's (attention against SDPA, layer norm, ...)
  stage confirm gpt2-124m and gpt-1.3b: the former defaults (baseline), the new ones, the new ones
                with the CUDA graph; PyTorch eager and torch.compile beside gpt2-124m
  stage ce-tests  the cross entropy's forms (KILN_CROSS_ENTROPY_KERNEL) against the CPU, memcheck
  stage ce-sweep  bench_cuda --sweep --only cross_entropy: each form, contiguous and padded logits
  stage ce-bench  gpt2-124m under each form, PyTorch eager and torch.compile beside it
  stage ce-profile gpt2-124m's step under the fast forms, gpt-1.3b's under the defaults
  stage ln-tests  the split layer-norm backward (bwd=split) against the CPU, fused add + layer norm
                  with it, memcheck
  stage ln-sweep  bench_cuda --sweep --only layer_norm: every variant, the split form among them
  stage ln-bench  gpt2-124m and gpt-1.3b under the defaults and the split backward, PyTorch beside
                  gpt2-124m
  stage check     ctest -L gpu beside memcheck on the cross entropy's small cases
  stage sdpa-sweep / sdpa-knobs  bench_cuda --sweep --only attention: each cuDNN engine config (with
                  KILN_SWEEP_SDPA_KNOBS, each knob value), forward and backward apart
  stage sdpa-kernels / final  bench_cuda --only attention vs SDPA; final also the GPT steps beside PyTorch
  stage sdpa-bench  the GPT steps under each KILN_CUDNN_SDPA_ENGINE choice and the scalar column sums
  stage cols-sweep  bench_cuda --sweep --only reduce: the column sums' scalar and vector forms

Then one table, path | tests | loss vs baseline | step ms | ratio | peak GiB | verdict, printed and
written with every figure as JSON under --out (the device tool brings back at most 8 files: one
log, the table, the JSON, the sweep's JSON and the device's cuDNN DEVICEPROP).

  scripts/gpu-check.sh --pending --prebuilt [--call 2]   on the device (after device-prebuilt.sh
                                                         unpack): call 1 (tests, train, sweep,
                                                         bench), then at once call 2 (big)
  scripts/gpu_pending.py --dry-run --build DIR           here and in CI: both calls' plans with each
                                                         step's budget; fails if a binary, flag,
                                                         test, script or variable a call needs is
                                                         missing, or a call's plan overruns
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CALL_LIMIT_S = 600       # one device call
PLAN_LIMIT_S = 540       # what the expected times of the default stages may add up to (margin)
STAGES = ["tests", "train", "sweep", "bench", "profile", "big", "suite", "kernels", "confirm",
          "ce-tests", "ce-sweep", "ce-bench", "ce-profile", "ln-tests", "ln-sweep", "ln-bench",
          "check", "sdpa-sweep", "sdpa-kernels", "sdpa-bench", "sdpa-knobs", "cols-sweep", "final"]
# What one device call runs: the first proves every path and times gpt2-124m; the second (sent at
# once, while the machine is warm) profiles gpt2-124m's step and times gpt-1.3b. Both together would
# overrun one call.
# Call 3 (after the first run flipped the proven defaults, 2026-11-28) checks the flipped defaults.
CALLS = {"1": ["tests", "train", "sweep", "bench"], "2": ["profile", "big"],
         "3": ["suite", "train", "kernels", "confirm"],
         # Call 5 (the cross entropy's forms, Note [Cross-entropy kernels]; GPT's padded logits read in
         # place): prove each, time them, profile what is left; then the whole gpu suite.
         "5": ["ce-tests", "ce-sweep", "ce-bench", "ce-profile", "suite"],
         # Call 6 (Note [Split layer-norm backward]; the cross entropy's registers form now the default):
         # prove the split backward, time it, and the whole gpu suite under the new default.
         "6": ["ln-tests", "ln-sweep", "ln-bench", "suite"],
         # Call 7 (cuDNN attention at 0.78x PyTorch's SDPA, the same library): the gpu suite with the
         # cross entropy's new cases, then each engine config timed apart and in both GPT steps.
         "7": ["check", "sdpa-sweep", "cols-sweep", "sdpa-kernels", "sdpa-bench"],
         # Call 8, at once after 7: each engine's knob values (NVRTC compiles each: minutes).
         "8": ["sdpa-knobs"],
         # Call 9: the gpu suite and the figures under the defaults calls 7-8 chose.
         "9": ["suite", "final"]}

# The paths: environment and flags of train_gpt / bench_gpt that turn each on, over the baseline:
# every path off, as the defaults were before the first GPU run (2026-11-28) flipped the proven ones
# (cuDNN attention under auto, the fused add + layer norm, the layer-norm launch variant; later the split
# layer-norm backward and the cross entropy's registers form).
BASELINE_ENV = {"KILN_ATTENTION": "kiln", "KILN_FUSED_ADD_LN": "0",
                "KILN_LAYER_NORM_VARIANT": "vec=16,fwd=auto,bwd_blocks=1024,partials=auto,bwd=fused",
                "KILN_CROSS_ENTROPY_KERNEL": "accurate"}
SWITCHES = {
    "cuda-graph": ({}, ["--cuda-graph"]),
    "cudnn-attention": ({"KILN_ATTENTION": "cudnn"}, []),
    "fused-add-ln": ({"KILN_FUSED_ADD_LN": "1"}, []),
    "gelu-epilogue": ({"KILN_FUSED_GELU_EPILOGUE": "1"}, []),
    "chunked-head": ({}, ["--fused-head", "on"]),
}
PATHS = {"baseline": (dict(BASELINE_ENV), [])}
for _p, (_env, _flags) in SWITCHES.items():
    PATHS[_p] = (dict(BASELINE_ENV, **_env), _flags)
ALL_ENV = dict(BASELINE_ENV, **{k: v for env, _ in SWITCHES.values() for k, v in env.items()})
ALL_FLAGS = [f for _, flags in SWITCHES.values() for f in flags]
PATHS["all"] = (ALL_ENV, ALL_FLAGS)
# The defaults as they are now, alone and with the CUDA graph (an option a user asks for).
PATHS["defaults"] = ({}, [])
PATHS["defaults-graph"] = ({}, ["--cuda-graph"])
CE_FORMS = ["accurate", "fast", "registers"]
for _f in CE_FORMS:
    PATHS["ce-" + _f] = ({"KILN_CROSS_ENTROPY_KERNEL": _f}, [])
LN_SPLITS = ["528", "1056"]
for _b in LN_SPLITS:
    PATHS["ln-split-" + _b] = ({"KILN_LAYER_NORM_VARIANT": "bwd=split,bwd_blocks=" + _b}, [])
SDPA_CHOICES = {"sdpa-fwd1": "fwd=1", "sdpa-bwd1": "bwd=1", "sdpa-fwd1-bwd1": "fwd=1,bwd=1"}
for _p, _c in SDPA_CHOICES.items():
    PATHS[_p] = ({"KILN_CUDNN_SDPA_ENGINE": _c}, [])
PATHS["cols-scalar"] = ({"KILN_CUDA_REDUCE_COLS": "scalar"}, [])  # the vector form is the default since call 7
CALL1_PATHS = ["baseline"] + list(SWITCHES) + ["all"]
# The paths a 1.3B row runs: each alone would cost a minute apiece.
BIG_PATHS = ["baseline", "all"]


class Step:
    def __init__(self, stage, name, argv, limit, expect, env=None, path=None, lane=None, optional_tool=None):
        self.stage, self.name, self.argv, self.limit, self.expect = stage, name, argv, limit, expect
        self.env = env or {}
        self.path = path            # the switched-off path this step proves, if any
        self.lane = lane            # steps of one stage with a lane run side by side
        self.optional_tool = optional_tool  # e.g. compute-sanitizer: skipped (not failed) when absent
        self.rc, self.seconds, self.output, self.note = None, 0.0, "", ""


def gpu_test(name, path, limit, expect, env=None, lane="t", sanitize=False):
    argv = ["{build}/tests/" + name]
    tool = None
    if sanitize:
        argv = ["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "1"] + argv
        tool = "compute-sanitizer"
    return Step("tests", ("memcheck " if sanitize else "") + name, argv, limit, expect, env, path, lane, tool)


def plan():
    steps = []
    # Tests: one lane per path, the lanes side by side (small kernels; the GPU is not the limit).
    steps += [
        gpu_test("core_cuda_graph", "cuda-graph", 60, 10, lane="graph"),
        gpu_test("parallel_cuda_trainer_graph", "cuda-graph", 120, 40, lane="graph"),
        gpu_test("autograd_cuda_attention_cudnn", "cudnn-attention", 240, 120, lane="cudnn",
                 env={"KILN_ATTENTION": "cudnn", "KILN_TEST_CUDNN_FEW": "1",
                      "KILN_DEVICEPROP_OUT": "{out}/deviceprop.json",
                      "CUDNN_LOGERR_DBG": "1", "CUDNN_LOGDEST_DBG": "stderr"}),
        gpu_test("core_cuda_add_layer_norm", "fused-add-ln", 60, 10, lane="addln", env={"KILN_FUSED_ADD_LN": "1"}),
        gpu_test("core_cuda_add_layer_norm", "fused-add-ln", 150, 60, lane="addln", env={"KILN_FUSED_ADD_LN": "1"},
                 sanitize=True),
        gpu_test("autograd_cuda_linear_gelu_linear", "gelu-epilogue", 90, 20, lane="gelu",
                 env={"KILN_FUSED_GELU_EPILOGUE": "1"}),
        gpu_test("autograd_cuda_linear_gelu_linear", "gelu-epilogue", 200, 90, lane="gelu",
                 env={"KILN_FUSED_GELU_EPILOGUE": "1"}, sanitize=True),
        gpu_test("models_cuda_gpt_fused_head", "chunked-head", 90, 15, lane="head"),
        gpu_test("core_cuda_layer_norm", "layer-norm-variants", 120, 40, lane="ln"),
        gpu_test("core_cuda_graph", "cuda-graph", 120, 40, lane="head", sanitize=True),
        # Issue #49's GPU part: NCCL's 16-bit collectives and the bf16 policy, two ranks on the one GPU.
        gpu_test("parallel_cuda_mixed_precision", None, 120, 30, lane="policy"),
    ]
    # Training: gpt-tiny, 50 bf16 steps per path, all side by side (a few hundred MiB each).
    steps.append(Step("train", "synthetic shards", ["{build}/apps/kiln-make-shards", "--synthetic", "--tokens",
                                                    "2000000", "--lags", "2,3", "--noise", "0.5", "--out",
                                                    "{work}/data"], 60, 3))
    # gpt-tiny with 2 heads of 64 (its preset's 4 heads of 32 are a head dim cuDNN's path does not take:
    # the first run's cudnn-attention and all rows stopped there).
    for p, (env, flags) in PATHS.items():
        steps.append(Step("train", "gpt-tiny " + p, [
            "{build}/apps/train_gpt", "--model", "gpt-tiny", "--n-head", "2", "--train", "{work}/data/train_*.bin",
            "--device", "cuda",
            "--dtype", "bf16", "--steps", "50", "--warmup-steps", "10", "--batch-size", "16", "--seq-len", "128",
            "--lr", "1e-3", "--log-every", "1", "--seed", "7", "--metrics", "{work}/train_%s.jsonl" % p] + flags,
            150, 10, env, p, lane=p))
    # Sweep: every variant of the kernels whose best form is unknown, in one process; cuDNN's
    # attention again with its dQ accumulator zeroed (a per-process setting).
    steps.append(Step("sweep", "bench_cuda --sweep", ["{build}/apps/bench_cuda", "--sweep", "--sweep-json",
                                                       "{out}/sweep.json"], 150, 60))
    steps.append(Step("sweep", "bench_cuda --sweep attention, dq_accum zeroed",
                      ["{build}/apps/bench_cuda", "--sweep", "--only", "attention"], 60, 15,
                      {"KILN_CUDNN_ZERO_DQ_ACCUM": "1"}))
    # gpt2-124m: Kiln per path, then PyTorch eager and compile (with Kiln's baseline beside them).
    gpt2 = ["--device", "cuda", "--config", "gpt2-124m", "-B", "16", "-T", "1024", "--warmup", "3", "--steps", "5"]
    big = ["--device", "cuda", "--config", "gpt-1.3b", "-B", "8", "-T", "2048", "--warmup", "2", "--steps", "3"]

    def kiln(stage, name, shape, p, out, limit, expect):  # bench_gpt, Kiln only, under path p
        env, flags = PATHS[p]
        return Step(stage, name, ["{build}/apps/bench_gpt"] + shape + flags + ["--no-torch"] + out, limit, expect,
                    env, p)

    def torch(stage, name, shape, json_name, limit, expect):  # bench_gpt with PyTorch eager and compile
        return Step(stage, name, ["{build}/apps/bench_gpt"] + shape + ["--torch-modes", "eager,compile", "--python",
                                                                       "{python}", "--json", "{work}/" + json_name],
                    limit, expect)

    for p in CALL1_PATHS:
        steps.append(kiln("bench", "gpt2-124m " + p, gpt2, p, ["--json", "{work}/bench_124m_%s.json" % p], 60, 12))
    steps.append(torch("bench", "gpt2-124m PyTorch eager + compile", gpt2, "bench_124m_torch.json", 180, 75))
    for p in ("baseline", "all"):
        steps.append(kiln("profile", "gpt2-124m profile " + p, gpt2, p, ["--profile", "{work}/trace_%s.json" % p],
                          60, 15))
    for p in BIG_PATHS:
        steps.append(kiln("big", "gpt-1.3b " + p, big, p, ["--json", "{work}/bench_13b_%s.json" % p], 120, 35))
    steps.append(torch("big", "gpt-1.3b PyTorch eager + compile", big, "bench_13b_torch.json", 240, 120))
    # Call 3: the flipped defaults.
    steps.append(Step("suite", "ctest -L gpu", ["ctest", "--test-dir", "{build}", "-L", "gpu", "-j", "3", "--timeout",
                                                "150", "--output-on-failure"], 240, 100))
    steps.append(Step("kernels", "bench_cuda vs PyTorch", ["{build}/apps/bench_cuda", "--python", "{python}"], 120, 60))
    for p in ("baseline", "defaults", "defaults-graph"):
        steps.append(kiln("confirm", "gpt2-124m " + p, gpt2, p, ["--json", "{work}/bench_124m_%s.json" % p], 60, 8))
    steps.append(torch("confirm", "gpt2-124m defaults, PyTorch eager + compile", gpt2, "bench_124m_torch.json",
                       150, 70))
    for p in ("defaults", "defaults-graph"):
        steps.append(kiln("confirm", "gpt-1.3b " + p, big, p, ["--json", "{work}/bench_13b_%s.json" % p], 120, 25))
    # Call 5: the cross entropy's forms.
    steps.append(gpu_test("core_cuda_cross_entropy", None, 150, 40, lane="ce"))
    steps.append(Step("ce-tests", "memcheck core_cuda_cross_entropy (small cases)",
                      ["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "1",
                       "{build}/tests/core_cuda_cross_entropy", "-tce=*GPT-2-sized*"], 150, 90,
                      lane="ce-memcheck", optional_tool="compute-sanitizer"))
    steps.append(gpu_test("models_cuda_gpt_fused_head", None, 90, 15, lane="gpt"))
    for st in steps[-3:]:
        st.stage = "ce-tests"
    steps.append(Step("ce-sweep", "bench_cuda --sweep --only cross_entropy",
                      ["{build}/apps/bench_cuda", "--sweep", "--only", "cross_entropy", "--sweep-json",
                       "{out}/sweep_ce.json"], 90, 25))
    for f in CE_FORMS:  # fwd+bwd through autograd beside PyTorch's (8192, 50257)
        steps.append(Step("ce-sweep", "bench_cuda cross_entropy vs PyTorch, " + f,
                          ["{build}/apps/bench_cuda", "--only", "cross_entropy", "--python", "{python}"], 60, 15,
                          {"KILN_CROSS_ENTROPY_KERNEL": f}))
    for f in CE_FORMS:
        steps.append(kiln("ce-bench", "gpt2-124m ce-" + f, gpt2, "ce-" + f, ["--json", "{work}/bench_124m_ce-%s.json" % f],
                          60, 10))
    steps.append(torch("ce-bench", "gpt2-124m PyTorch eager + compile", gpt2, "bench_124m_torch.json", 150, 70))
    for f in ("fast", "registers"):
        steps.append(kiln("ce-profile", "gpt2-124m profile ce-" + f, gpt2, "ce-" + f,
                          ["--profile", "{work}/trace_ce_%s.json" % f], 60, 15))
    steps.append(kiln("ce-profile", "gpt-1.3b profile defaults", big, "defaults", ["--profile", "{work}/trace_13b.json"],
                      120, 40))
    # Call 6: the split layer-norm backward.
    split_env = {"KILN_LAYER_NORM_VARIANT": "bwd=split,bwd_blocks=1056"}
    for st in (gpu_test("core_cuda_layer_norm", None, 120, 40, lane="ln"),
               gpu_test("core_cuda_add_layer_norm", None, 60, 10, env=split_env, lane="addln"),
               gpu_test("core_cuda_add_layer_norm", None, 150, 60, env=split_env, lane="addln", sanitize=True)):
        st.stage = "ln-tests"
        steps.append(st)
    steps.append(Step("ln-sweep", "bench_cuda --sweep --only layer_norm",
                      ["{build}/apps/bench_cuda", "--sweep", "--only", "layer_norm", "--sweep-json",
                       "{out}/sweep_ln.json"], 120, 45))
    for p in ["defaults"] + ["ln-split-" + b for b in LN_SPLITS]:
        steps.append(kiln("ln-bench", "gpt2-124m " + p, gpt2, p, ["--json", "{work}/bench_124m_%s.json" % p], 60, 10))
    steps.append(torch("ln-bench", "gpt2-124m PyTorch eager + compile", gpt2, "bench_124m_torch.json", 150, 65))
    for p in ("defaults", "ln-split-1056"):
        steps.append(kiln("ln-bench", "gpt-1.3b " + p, big, p, ["--json", "{work}/bench_13b_%s.json" % p], 120, 30))
    # Call 7: cuDNN attention's engine configs (Note [cuDNN SDPA engine choice]).
    steps.append(Step("check", "ctest -L gpu", ["ctest", "--test-dir", "{build}", "-L", "gpu", "-j", "3", "--timeout",
                                                "150", "--output-on-failure"], 240, 100, lane="suite"))
    steps.append(Step("check", "memcheck core_cuda_cross_entropy (small cases)",
                      ["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "1",
                       "{build}/tests/core_cuda_cross_entropy", "-tce=*GPT-2-sized*"], 150, 90,
                      lane="memcheck", optional_tool="compute-sanitizer"))
    steps.append(Step("sdpa-sweep", "bench_cuda --sweep --only attention",
                      ["{build}/apps/bench_cuda", "--sweep", "--only", "attention", "--sweep-json",
                       "{out}/sweep_sdpa.json"], 120, 50))
    steps.append(Step("sdpa-kernels", "bench_cuda attention vs PyTorch",
                      ["{build}/apps/bench_cuda", "--only", "attention", "--python", "{python}"], 90, 40))
    steps.append(Step("cols-sweep", "bench_cuda --sweep --only reduce",
                      ["{build}/apps/bench_cuda", "--sweep", "--only", "reduce", "--sweep-json",
                       "{out}/sweep_cols.json"], 60, 15))
    for p in ["defaults"] + list(SDPA_CHOICES) + ["cols-scalar"]:
        steps.append(kiln("sdpa-bench", "gpt2-124m " + p, gpt2, p, ["--json", "{work}/bench_124m_%s.json" % p], 60, 10))
    for p in ["defaults"] + list(SDPA_CHOICES) + ["cols-scalar"]:
        steps.append(kiln("sdpa-bench", "gpt-1.3b " + p, big, p, ["--json", "{work}/bench_13b_%s.json" % p], 120, 30))
    steps.append(Step("final", "bench_cuda attention vs PyTorch",
                      ["{build}/apps/bench_cuda", "--only", "attention", "--python", "{python}"], 60, 20))
    steps.append(torch("final", "gpt2-124m beside PyTorch eager + compile", gpt2, "bench_124m_torch.json", 150, 65))
    steps.append(kiln("final", "gpt-1.3b defaults", big, "defaults", ["--json", "{work}/bench_13b_defaults.json"],
                      90, 22))
    steps.append(torch("final", "gpt-1.3b beside PyTorch eager + compile", big, "bench_13b_torch.json", 150, 120))
    steps.append(Step("sdpa-knobs", "bench_cuda --sweep --only attention, knob values",
                      ["{build}/apps/bench_cuda", "--sweep", "--only", "attention", "--sweep-json",
                       "{out}/sweep_sdpa_knobs.json"], 280, 200, {"KILN_SWEEP_SDPA_KNOBS": "1"}))
    return steps


def expand(arg, ctx):
    return arg.format(**ctx) if isinstance(arg, str) else arg


def stage_expect(steps):
    """Expected seconds of a stage: lanes side by side, steps of a lane (or without one) in turn."""
    lanes = {}
    serial = 0.0
    for s in steps:
        if s.lane is None:
            serial += s.expect
        else:
            lanes[s.lane] = lanes.get(s.lane, 0.0) + s.expect
    return serial + (max(lanes.values()) if lanes else 0.0)


# ---- dry run ---------------------------------------------------------------------------------

def help_text(binary, cache={}):
    if binary not in cache:
        try:
            cache[binary] = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            cache[binary] = "<--help failed: %s>" % e
    return cache[binary]


def source_of(rel):
    """The source file a build path comes from: tests/<folder>_<name> or apps/<name>."""
    name = os.path.basename(rel)
    if rel.startswith("tests/"):
        folder, _, rest = name.partition("_")
        return os.path.join(ROOT, "tests", folder, "test_" + rest + ".cpp")
    return os.path.join(ROOT, "apps", name + ".cpp")


def pack_members():
    pack = os.path.join(ROOT, ".gpubin", "build-gpu.tar.xz")
    if not os.path.exists(pack):
        return None
    with tarfile.open(pack) as t:
        return {m.name[2:] if m.name.startswith("./") else m.name for m in t.getmembers()}


def env_read_by_code(name):
    pattern = re.compile(re.escape(name))
    for top in ("core", "autograd", "nn", "optim", "parallel", "models", "data", "apps", "tests"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".cpp", ".cu", ".h", ".cuh")):
                    with open(os.path.join(dirpath, f), errors="replace") as fh:
                        if pattern.search(fh.read()):
                            return True
    return name.startswith("CUDNN_")  # cuDNN's own logging variables


def dry_run(steps, build, stages):
    problems = []
    members = pack_members()
    print("gpu_pending dry run: build %s; pack %s" % (build, "found" if members is not None else "not made here"))
    print("%-6s %-52s %6s %6s  %s" % ("stage", "step", "limit", "expect", "checks"))
    for s in steps:
        checks = []
        if s.optional_tool:
            checks.append("%s on the device (skipped there if absent)" % s.optional_tool)
        at = next((i for i, a in enumerate(s.argv) if a.startswith("{build}/")), None)
        if at is not None:
            rel = s.argv[at][len("{build}/"):]
            path = os.path.join(build, rel)
            flags = [a for a in s.argv[at + 1:] if isinstance(a, str) and a.startswith("--")]
            if os.access(path, os.X_OK):
                text = help_text(path)
                missing = [f for f in flags if f not in text]
                checks.append("built" + ("" if not flags else ", flags in --help"))
            else:
                src = source_of(rel)
                if not os.path.exists(src):
                    problems.append("%s: %s is neither built in %s nor a source (%s)" % (s.name, rel, build, src))
                    continue
                with open(src, errors="replace") as fh:
                    text = fh.read()
                if rel == "apps/bench_cuda":  # its --sweep flags live in the sweep's sources too
                    with open(os.path.join(ROOT, "apps", "cuda", "sweep.cpp")) as fh:
                        text += fh.read()
                missing = [f for f in flags if '"%s' % f not in text and ",%s" % f not in text]
                checks.append("source only (CUDA build)" + ("" if not flags else ", flags in source"))
            if members is not None:
                if rel not in members:
                    problems.append("%s: %s is not in .gpubin/build-gpu.tar.xz" % (s.name, rel))
                else:
                    checks.append("in pack")
            for f in missing:
                problems.append("%s: %s has no flag %s" % (s.name, rel, f))
        for var in s.env:
            if not env_read_by_code(var):
                problems.append("%s: no code reads %s" % (s.name, var))
        if s.env:
            checks.append("env read: " + ",".join(sorted(s.env)))
        print("%-6s %-52s %5ds %5ds  %s" % (s.stage, s.name[:52], s.limit, s.expect, "; ".join(checks)))
    total = 0.0
    for stage in stages:
        e = stage_expect([s for s in steps if s.stage == stage])
        total += e
        print("stage %-6s expected %4.0f s" % (stage, e))
    print("expected in all: %.0f s of a %d s call (plan limit %d s); steps past the deadline are skipped" %
          (total, CALL_LIMIT_S, PLAN_LIMIT_S))
    if total > PLAN_LIMIT_S:
        problems.append("the stages %s are expected to take %.0f s, over %d s: split them (--stages)" %
                        (",".join(stages), total, PLAN_LIMIT_S))
    for p in ("tests/apps/jsonl_losses.py",):
        if not os.path.exists(os.path.join(ROOT, p)):
            problems.append("missing %s" % p)
    for p in problems:
        print("DRY RUN PROBLEM: " + p)
    print("dry run: %s" % ("ok" if not problems else "%d problem(s)" % len(problems)))
    return 0 if not problems else 1


# ---- the run -----------------------------------------------------------------------------------

def run_step(s, ctx, deadline, log):
    left = deadline - time.time()
    if left < 5:
        s.rc, s.note = None, "not run: the call's deadline"
        return s
    if s.optional_tool and shutil.which(s.optional_tool) is None:
        s.rc, s.note = None, "skipped: %s not found" % s.optional_tool
        return s
    limit = min(s.limit, left)
    env = dict(os.environ)
    env.update({k: expand(v, ctx) for k, v in s.env.items()})
    argv = [expand(a, ctx) for a in s.argv]
    start = time.time()
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=limit)
        s.rc, s.output = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"") + (e.stderr or b"")
        s.rc, s.output = 124, out.decode(errors="replace") if isinstance(out, bytes) else str(out)
        s.note = "timed out after %.0f s" % limit
    except OSError as e:
        s.rc, s.output = 127, str(e)
    s.seconds = time.time() - start
    if s.rc == 77:  # a gpu test without a usable device: skipped, never passed
        s.rc, s.note = None, "skipped: no usable GPU"
    return s


def run_stage(steps, ctx, deadline, log):
    lanes, serial = {}, []
    for s in steps:
        (lanes.setdefault(s.lane, []) if s.lane else serial).append(s)
    for s in serial:  # serial steps first (the shards the training lanes read)
        run_step(s, ctx, deadline, log)
        write_log(log, s)
    if lanes:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(lanes)) as pool:
            def lane(items):
                for s in items:
                    run_step(s, ctx, deadline, log)
                return items
            for items in pool.map(lane, lanes.values()):
                for s in items:
                    write_log(log, s)


def write_log(log, s):
    log.write("== [%s] %s (rc %s, %.1f s%s)\n" % (s.stage, s.name, s.rc, s.seconds, ", " + s.note if s.note else ""))
    log.write("   $ %s%s\n" % (" ".join("%s=%s" % kv for kv in s.env.items()) + " " if s.env else "",
                               " ".join(str(a) for a in s.argv)))
    log.write(s.output[-20000:] + "\n")
    log.flush()
    print("%-6s %-52s %s %6.1f s %s" % (s.stage, s.name[:52], "ok  " if s.rc == 0 else "FAIL" if s.rc else "--  ",
                                        s.seconds, s.note), flush=True)


def train_losses(path):
    try:
        return [o["loss"] for o in map(json.loads, open(path)) if o.get("type") == "train"]
    except (OSError, ValueError):
        return []


def bench_side(path, side="kiln"):
    try:
        rows = json.load(open(path))
    except (OSError, ValueError):
        return None
    for s in rows[0]["sides"] if rows else []:
        # Kiln's side is "kiln", or "kiln graph" under --cuda-graph.
        if (s["side"] == side or (side == "kiln" and s["side"].startswith("kiln"))) and s["ran"]:
            return {"ms": s["ms"], "peak_gib": s["peak_bytes"] / 2**30,
                    "formula_peak_gib": rows[0]["formula_peak_bytes"] / 2**30}
    return None


def summarize(steps, work, out, loss_tol):
    rows = []
    base_losses = train_losses(os.path.join(work, "train_baseline.jsonl"))
    base_end = sum(base_losses[-10:]) / 10 if len(base_losses) >= 10 else None
    b124 = bench_side(os.path.join(work, "bench_124m_baseline.json"))
    t_eager = bench_side(os.path.join(work, "bench_124m_torch.json"), "torch eager")
    t_compile = bench_side(os.path.join(work, "bench_124m_torch.json"), "torch compile")
    big_torch = {m: bench_side(os.path.join(work, "bench_13b_torch.json"), "torch " + m) for m in ("eager", "compile")}
    for p in list(PATHS) + ["layer-norm-variants"]:
        mine = [s for s in steps if s.stage == "tests" and (s.path == p or (p == "all" and s.path in PATHS))]
        ran = [s for s in mine if s.rc is not None]
        tests = "-" if not mine else "%d/%d passed%s" % (sum(s.rc == 0 for s in ran), len(ran),
                                                          "" if len(ran) == len(mine) else
                                                          ", %d not run" % (len(mine) - len(ran)))
        losses = train_losses(os.path.join(work, "train_%s.jsonl" % p))
        loss = None
        if p != "layer-norm-variants" and len(losses) >= 10 and base_end is not None:
            loss = sum(losses[-10:]) / 10 - base_end
        b = bench_side(os.path.join(work, "bench_124m_%s.json" % p))
        big = bench_side(os.path.join(work, "bench_13b_%s.json" % p))
        row = {"path": p, "tests": tests, "tests_failed": any(s.rc not in (0, None) for s in mine),
               "loss_vs_baseline": loss, "gpt2_124m": b, "gpt_1_3b": big,
               "vs_baseline": (b124["ms"] / b["ms"]) if b and b124 else None,
               "vs_torch_eager": (t_eager["ms"] / b["ms"]) if b and t_eager else None,
               "vs_torch_compile": (t_compile["ms"] / b["ms"]) if b and t_compile else None,
               "big_vs_torch_compile": (big_torch["compile"]["ms"] / big["ms"]) if big and big_torch["compile"] else None}
        failed = row["tests_failed"] or (loss is not None and abs(loss) > loss_tol)
        proven = not failed and mine and len(ran) == len(mine) and (p == "layer-norm-variants" or loss is not None)
        if p.startswith("defaults"):  # proven by call 3's whole gpu suite and its loss curve
            proven = not failed and loss is not None
        if p == "baseline":
            verdict = "reference"
        elif failed:
            verdict = "FAIL: keep off"
        elif not proven:
            verdict = "unproven (not all run)"
        elif row["vs_baseline"] is not None and row["vs_baseline"] < 0.98:
            verdict = "correct, slower: keep off"
        else:
            verdict = "correct" + (", faster: flip on" if row["vs_baseline"] and row["vs_baseline"] > 1.02 else "")
        row["verdict"] = verdict
        rows.append(row)
    torch = {"gpt2_124m": {"eager": t_eager, "compile": t_compile}, "gpt_1_3b": big_torch}
    fmt = lambda v, f: "-" if v is None else f % v
    lines = ["%-20s %-22s %10s %9s %8s %8s %8s %10s %9s %9s  %s" % (
        "path", "tests", "loss vs base", "124m ms", "vs base", "vs eager", "vs compile", "1.3b ms", "1.3b GiB",
        "formula", "verdict")]
    for r in rows:
        b, big = r["gpt2_124m"], r["gpt_1_3b"]
        lines.append("%-20s %-22s %10s %9s %8s %8s %8s %10s %9s %9s  %s" % (
            r["path"], r["tests"], fmt(r["loss_vs_baseline"], "%+.4f"), fmt(b and b["ms"], "%.1f"),
            fmt(r["vs_baseline"], "%.2fx"), fmt(r["vs_torch_eager"], "%.2fx"), fmt(r["vs_torch_compile"], "%.2fx"),
            fmt(big and big["ms"], "%.1f"), fmt(big and big["peak_gib"], "%.2f"),
            fmt(big and big["formula_peak_gib"], "%.2f"), r["verdict"]))
    for name, sides in (("gpt2-124m", torch["gpt2_124m"]), ("gpt-1.3b", torch["gpt_1_3b"])):
        for mode in ("eager", "compile"):
            s = sides[mode]
            lines.append("PyTorch %-7s %-9s %s" % (mode, name, "-" if not s else "%.1f ms/step, peak %.2f GiB" %
                                                   (s["ms"], s["peak_gib"])))
    lines.append("(loss: mean of the last 10 of 50 bf16 steps minus the baseline's, tolerance %.2f nats; vs: step time "
                 "ratio, >1 = this path is faster; GiB: Kiln's allocator peak and the formula's)" % loss_tol)
    table = "\n".join(lines)
    with open(os.path.join(out, "table.txt"), "w") as f:
        f.write(table + "\n")
    steps_json = [{"stage": s.stage, "step": s.name, "rc": s.rc, "seconds": round(s.seconds, 1), "note": s.note,
                   "path": s.path} for s in steps]
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"rows": rows, "torch": torch, "steps": steps_json}, f, indent=1)
    return table, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build-gpu"), help="the build (default build-gpu)")
    ap.add_argument("--out", default=None, help="where the log, table and JSON go (default $OUT/pending)")
    ap.add_argument("--call", choices=sorted(CALLS), default="1", help="which prepared call: 1 = %s, 2 = %s" %
                    (",".join(CALLS["1"]), ",".join(CALLS["2"])))
    ap.add_argument("--stages", default=None, help="comma-separated stages instead of --call's: " + ",".join(STAGES))
    ap.add_argument("--deadline", type=float, default=570, help="seconds from the start after which no step starts "
                    "(default 570, inside a 600 s call)")
    ap.add_argument("--loss-tol", type=float, default=0.05, help="nats between a path's and the baseline's final loss")
    ap.add_argument("--python", default=os.environ.get("KILN_PYTHON", "python3"), help="python with torch")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and check it; run nothing")
    a = ap.parse_args()
    stages = [s for s in a.stages.split(",") if s] if a.stages else CALLS[a.call]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        ap.error("unknown stage(s) %s (choices: %s)" % (",".join(bad), ",".join(STAGES)))
    steps = [s for s in plan() if s.stage in stages]
    build = os.path.abspath(a.build)
    if a.dry_run:
        if a.stages:
            return dry_run(steps, build, stages)
        rc = 0
        for call, call_stages in sorted(CALLS.items()):
            print("\n== call %s: %s ==" % (call, ",".join(call_stages)))
            rc |= dry_run([s for s in plan() if s.stage in call_stages], build, call_stages)
        return rc
    out = a.out or os.path.join(os.environ.get("OUT", build), "pending")
    work = os.path.join(build, "pending-work")
    os.makedirs(out, exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ctx = {"build": build, "work": work, "out": out, "python": a.python}
    start = time.time()
    deadline = start + a.deadline
    with open(os.path.join(out, "log.txt"), "w") as log:
        gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip() \
            if shutil.which("nvidia-smi") else "nvidia-smi not found"
        log.write("gpu: %s\n" % gpu)
        print("gpu_pending on %s, stages %s" % (gpu, ",".join(stages)), flush=True)
        for stage in stages:
            run_stage([s for s in steps if s.stage == stage], ctx, deadline, log)
    table, rows = summarize(steps, work, out, a.loss_tol)
    print("\n== gpu_pending (%s), %.0f s ==" % (gpu, time.time() - start))
    print(table)
    return 1 if any(r["tests_failed"] for r in rows) or any(s.rc not in (0, None) for s in steps) else 0


if __name__ == "__main__":
    sys.exit(main())
