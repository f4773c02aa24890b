"""Where eager PyTorch spends a decode step (chapter 02_inside_qwen35): the reference model, one `aten` operator
after another, profiled with torch.profiler, each reference operator labelled.

- `profile_decode(model, steps, prompt_len)`: `steps` greedy decode steps after a prompt, timed without the
  profiler, then profiled; on a GPU the kernels a token launches and the time they keep the GPU busy, on the
  CPU the top-level `aten` operators a token calls (each at least one kernel launch on a GPU); and per
  reference operator its calls and its time a token (the GPU time of its kernels, or its CPU time).
- `main`: the GPU script (scripts/gpu_extras.sh profile): Qwen3.5-0.8B's real shapes with random weights in
  bf16, written to eager_profile_<gpu>_<date>.{json,md} beside the step's bandwidth floor, which chapter
  02_inside_qwen35 cites.
"""
from __future__ import annotations

import functools
import json
import sys
import time
from collections import defaultdict
from contextlib import contextmanager

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from .. import reference as R
from ..safe_files import atomic_write_text
from .benchmark import ceiling_gbps, gpu_script, results_stem
from .bytes_model import bytes_per_token

# the reference operators a decode step calls, each labelled in the trace
REFERENCE_OPS = ("embedding", "rms_norm", "attention_qkv_proj", "qk_norm", "apply_rope", "kv_cache_write",
                 "kv_cache_read", "attention", "output_gate", "linear", "deltanet_in_proj", "conv1d_decode",
                 "l2norm_qk", "deltanet_gates", "gated_delta_rule_recurrent", "gated_rms_norm",
                 "residual_rms_norm", "mlp", "residual_add", "lm_head")


@contextmanager
def labelled_reference():
    """Each of REFERENCE_OPS in `tritonllm_course.reference` wrapped in a profiler label of its name for the
    block (the model looks them up there at call time), the originals put back after. Only the package's own
    names, not `swap.swapped`'s every module: a composite reference's inner calls (the `linear` inside `mlp`)
    stay unlabelled, so each op's time is its own and the shares add up to the step's."""
    originals = {name: getattr(R, name) for name in REFERENCE_OPS}

    def labelled(name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with record_function(name):
                return fn(*args, **kwargs)
        return wrapper
    try:
        for name, fn in originals.items():
            setattr(R, name, labelled(name, fn))
        yield
    finally:
        for name, fn in originals.items():
            setattr(R, name, fn)


def profile_decode(model, steps: int = 8, prompt_len: int = 32) -> dict:
    """Profile `steps` greedy decode steps of the reference `model` after a `prompt_len`-token prompt (one
    untimed step first). Returns {"device", "steps", "context", "wall_ms" (a token, without the profiler),
    "kernels" and "busy_ms" (a token, GPU) or "aten_ops" (a token, CPU), "per_op": {op: {"calls", "us"}} a
    token, the largest time first}."""
    device = model.device
    on_gpu = device.type == "cuda"

    def sync():
        if on_gpu:
            torch.cuda.synchronize()
    gen = torch.Generator(device="cpu").manual_seed(0)
    prompt = torch.randint(0, model.config.vocab_size, (prompt_len,), generator=gen).to(device)
    cache = model.new_cache(prompt_len + 2 * steps + 1)
    token = int(model(prompt, cache).argmax())
    token = int(model([token], cache).argmax())                       # the warm-up step
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        token = int(model([token], cache).argmax())                   # .argmax() + int(): greedy sampling
    sync()
    result = {"device": str(device), "steps": steps, "context": prompt_len + steps,
              "wall_ms": (time.perf_counter() - t0) / steps * 1e3}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with labelled_reference(), profile(activities=activities) as prof:
        for _ in range(steps):
            token = int(model([token], cache).argmax())
        sync()
    events = prof.events()
    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    if on_gpu:      # the GPU-side events: the kernels, and a copy of each label spanning its kernels (skipped)
        kernels = [e for e in events if e.device_type == cuda and e.name not in REFERENCE_OPS]
        result["kernels"] = len(kernels) / steps
        result["busy_ms"] = sum(e.device_time for e in kernels) / steps / 1e3
    else:
        top = [e for e in events if e.name.startswith("aten::")
               and not (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))]
        result["aten_ops"] = len(top) / steps
    per_op = defaultdict(lambda: [0, 0.0])          # each label's CPU-side range: its kernels' time, or its own
    for e in events:
        if e.name in REFERENCE_OPS and e.device_type == cpu:
            per_op[e.name][0] += 1
            per_op[e.name][1] += e.device_time_total if on_gpu else e.cpu_time_total
    result["per_op"] = {name: {"calls": calls / steps, "us": us / steps}
                        for name, (calls, us) in sorted(per_op.items(), key=lambda kv: -kv[1][1])}
    return result


def table(result: dict) -> str:
    """The per-operator table of a `profile_decode` result, as text."""
    clock = "GPU kernel" if "kernels" in result else "CPU"
    spent = sum(op["us"] for op in result["per_op"].values()) or 1.0
    lines = [f"{'reference op':28}{'calls/token':>12}{'time/token (us)':>17}  share   ({clock} time)"]
    for name, op in result["per_op"].items():
        lines.append(f"{name:28}{op['calls']:>12.0f}{op['us']:>17.1f}  {100 * op['us'] / spent:5.1f}%")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Profile the reference model's eager decode on the GPU: Qwen3.5-0.8B's real shapes, random weights, bf16,
    8 steps after a 32-token prompt; writes eager_profile_<gpu>_<date>.{json,md} with the step's bandwidth
    floor at the measured copy bandwidth."""
    started = gpu_script(main.__doc__, argv)
    if started is None:
        return 1
    args, _ = started
    from ..config import QWEN35_0_8B
    from ..model import Qwen35Model
    model = Qwen35Model.random(QWEN35_0_8B, dtype=torch.bfloat16, device="cuda", seed=0)
    result = profile_decode(model)
    gbps = ceiling_gbps()
    stem, date = results_stem(args.out, "eager_profile")
    result.update(gpu=torch.cuda.get_device_name(), date=date, dtype="bfloat16",
                  versions=f"torch {torch.__version__}", ceiling_gbps=gbps,
                  floor_ms=bytes_per_token(QWEN35_0_8B, result["context"]) / (gbps * 1e9) * 1e3)
    text = [f"# Eager decode of the reference model on {result['gpu']}, {date} (bf16, random weights)\n",
            f"{result['kernels']:.0f} kernels a token, the GPU busy {result['busy_ms']:.2f} ms of "
            f"{result['wall_ms']:.2f} ms wall; the bandwidth floor {result['floor_ms']:.3f} ms at {gbps:,.0f} GB/s.\n",
            "```", table(result), "```"]
    atomic_write_text(stem.with_suffix(".json"), json.dumps({k: result[k] for k in (
        "gpu", "date", "dtype", "versions", "steps", "context", "wall_ms", "kernels", "busy_ms", "ceiling_gbps",
        "floor_ms", "per_op")}, indent=1))
    atomic_write_text(stem.with_suffix(".md"), "\n".join(text) + "\n")
    print("\n".join(text))
    print(f"written to {stem}.{{json,md}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
