"""Where does the chunked delta rule lose to flash-linear-attention, kernel by kernel?

    python -m lab.delta_rule_kernels_probe [OUTDIR]    (on a GPU with fla importable; PROBE_S bounds it,
                                                        default 240; PROBE_TS and PROBE_CHUNKS name the
                                                        lengths and chunk sizes, default 512-4,096 and 32, 64)
    (scripts/gpu_extras.sh prompt runs it)

Question: chapter 16_delta_rule_chunked's rule runs in three kernels (the UT transform per chunk, the scan
over chunks per value head and block of `block_v` value columns, the output per chunk); flash-linear-attention's
`chunk_gated_delta_rule` runs the same algebra in about six (the decay's cumulative sum, beta K K^T, the
triangular solve, w and u, the state scan, the output). The course's rule is 1.3-1.4x behind fla from
T = 2,048 (docs/results.md section 6) and 18 layers of a prompt run it. Which of the three kernels holds the
gap, and do other chunk sizes and value blocks close it?
Method: Qwen3.5-0.8B's DeltaNet shapes (16 heads, 128 x 128 state), bf16, inputs as the chapter's check
makes them (`slots.delta_rule.make_inputs`), T in TS. (1) Each call timed as the course times
(`benchmark.time_calls`: a CUDA graph over four copies of the inputs, about 30 MB at T = 512, under the 50 MB
L2, and past it from T = 1,024): the course's rule at every chunk size in
CHUNKS and value block in BLOCKS, then at the engine's with the scan launched at each of SCAN_LAUNCHES (warps
and pipeline stages, `SCAN_LAUNCH` in solutions/delta_rule.py), fla's chunk kernel beside it. (2) The device
time of each kernel of one call, from torch.profiler's trace over TRACE_CALLS eager calls
(`measure.trace.device_events`), for the course's rule as the engine runs it (`chunk_size_for`, block_v 16),
every variant of (1), and fla. (The 2026-12-05 run had no launch variants and traced the engine's rule and its
fastest variant only.) Writes
OUTDIR/delta_rule_kernels_probe_<gpu>_<date>.json, saved after every length.
Result: NVIDIA H200, 2026-12-05, fla 0.6.0 (lab/results/delta_rule_kernels_probe_nvidia-h200_2026-12-05.json;
the figures in lab/README.md). The engine's choice of that day (chunks of 32, value blocks of 16) was the course's
fastest at every length; every wider value block and chunks of 64 were slower. Against fla it is ahead at 512
and 1,024 tokens, level at 2,048 and a few percent behind at 4,096. Kernel by kernel at 4,096 the gap is the
state scan (the course's one kernel against fla's `chunk_gated_delta_rule_fwd_kernel_h`); the course's prepare
kernel is faster than fla's three kernels for the same work (cumulative sum, beta K K^T with its solve, w and u),
and the output kernels are level.
Verdict: nothing to adopt from the variants: solutions/delta_rule.py keeps `chunk_size_for` and block_v = 16.
What is left is the scan's sequential walk over the chunks. Its launch variants ran on an H100, 2026-12-06
(lab/results/delta_rule_kernels_probe_nvidia-h100-80gb-hbm3_2026-12-06.json): none was faster at 4,096 tokens
than the engine's 4 warps at triton's default stages (4 warps at 4 stages: 262.1 against 258.8 us, but 0.5-1.9%
faster at 512-2,048; one or two stages, or two warps, are much slower), so `SCAN_LAUNCH` stayed.
There the output kernel trails fla's too (level on the H200; the figures in lab/README.md).
After the split first kernel was adopted (lab/delta_rule_operands_probe.py), a second H100 run the same day
(lab/results/delta_rule_kernels_probe_nvidia-h100-80gb-hbm3_2026-12-06_split.json): the engine's rule (chunks of
64 from 512 tokens) took 33.7, 54.2, 98.7 and 188.9 us at 512, 1,024, 2,048 and 4,096 tokens against fla's 49.7,
69.0, 112.7 and 209.4 us in the same process. Kernel by kernel at 4,096: the scan 79.6 against fla's 79.2 us, the
output 53.5 against 54.9, the first kernel's two launches 29.0 + 24.6 against fla's 40.4 + 23.1 (and its 2.6 us
cumulative sum). The scan at 4 warps and 4 stages was the course's fastest variant at every length (182.7 us at
4,096): adopted in `SCAN_LAUNCH`. One stage is no longer tried: at chunks of 64 Triton 3.6 built a scan that
faulted (8 warps) or returned values 0.09 off (4 warps).
Below 512 tokens (H100, 2026-12-06, PROBE_TS="128 256" PROBE_CHUNKS="16 32 64",
lab/results/delta_rule_kernels_probe_nvidia-h100-80gb-hbm3_2026-12-06_short.json), us a call at value blocks of 16: at
128 tokens chunks of 16 / 32 / 64 took 16.8 / 17.5 / 19.8 (fla 33.3), at 256 tokens 26.4 / 23.1 / 24.4 (fla 39.6):
`chunk_size_for`'s 16 and 32 are the fastest there; the scan at 3 stages rather than `SCAN_LAUNCH`'s 4 ties at
128 tokens and gains 0.2 us at 256 (kept). fla's time at these lengths is mostly its first kernel (the K K^T
solve, 15.6 us at 128 tokens).
"""
import os
import time
from collections import defaultdict

import torch
import triton
import triton.testing

from lab import common

TS = tuple(int(t) for t in os.environ.get("PROBE_TS", "512 1024 2048 4096").split())    # the lengths, in order
CHUNKS = tuple(int(c) for c in os.environ.get("PROBE_CHUNKS", "32 64").split())         # of 16, 32 and 64
BLOCKS = (16, 32, 64)
SHAPE = {"H": 16, "HV": 16, "DK": 128, "DV": 128}
TRACE_CALLS = 10
# the scan's launch at the engine's chunk and value block (`SCAN_LAUNCH` in solutions/delta_rule.py): warps and
# software-pipeline stages (the fast level's is {"num_warps": 4} with triton's default stages)
# One stage is left out: at chunks of 64 Triton 3.6 built scans that faulted (8 warps) or returned wrong values
# (4 warps, 0.09 off) with it on an H100 (2026-12-06), and at chunks of 32 it was the slowest of each warp count.
SCAN_LAUNCHES = [{"num_warps": w, "num_stages": s} for w in (2, 4, 8) for s in (2, 3, 4)]


def make_inputs(*args):
    """The chapter's check's inputs (`slots.delta_rule.make_inputs`, through the registry, which loads the
    catalogue first)."""
    from tritonllm_course import slots
    return slots.get("gated_delta_chunked").make_inputs(*args)


def inputs(T, copies=1):
    """Input sets of the chapter's check at T tokens (fp32 state, bf16 q, k, v)."""
    gen = torch.Generator(device="cuda").manual_seed(T)
    return [make_inputs({"T": T, **SHAPE}, torch.bfloat16, "cuda", gen) for _ in range(copies)]


def fla_fn():
    """fla's chunk kernel taking our [T, H, D] inputs (None when fla does not import), and its version."""
    try:
        import fla
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception as e:  # noqa: BLE001  (absent or broken on this stack: the probe says so)
        return None, common.error_text(e)

    def call(q, k, v, g, beta, initial_state):
        return chunk_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None], scale=1.0,
                                      initial_state=initial_state[None], output_final_state=True)
    return call, fla.__version__


def per_kernel(fn, inp) -> dict:
    """{kernel name: device us per call}, from a profiler trace of TRACE_CALLS eager calls."""
    from tritonllm_course.measure.trace import device_events
    fn(**inp)
    torch.cuda.synchronize()
    names, starts, ends = device_events(lambda: fn(**inp), TRACE_CALLS)
    out = defaultdict(float)
    for n, s, e in zip(names, starts, ends):
        out[n] += (e - s) / TRACE_CALLS
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def rule_with(prepare, C, q, k, v, g, beta, initial_state=None, block_v=16):
    """The chunked rule at chunks of C with `prepare(k, v, g, beta, C)`'s w and u in place of the course's first
    kernel, then the course's scan and output: (out, final_state), as `gated_delta_rule_chunked`."""
    from tritonllm_course import kernels
    dr = kernels.load("delta_rule", "solutions").module
    T, HV, DV, DK = k.shape[0], v.shape[1], v.shape[2], k.shape[2]
    out = torch.empty(T, HV, DV, dtype=v.dtype, device=v.device)
    final_state = torch.empty(HV, DK, DV, dtype=torch.float32, device=v.device)
    w, u = prepare(k, v, g, beta, C)
    starts, v_new = dr.chunk_scan(k, w, u, g, initial_state, final_state, C, block_v)
    dr.chunk_output(q, k, g, starts, v_new, out, C)
    return out, final_state


def time_by_length(variants: dict, ts, path, res: dict, budget: float, t0: float) -> dict:
    """Each of `variants` ({name: a callable on the chapter's inputs}) at each T of ts, in order: timed by
    `benchmark.time_calls` (a CUDA graph over four copies of the inputs) and traced kernel by kernel
    (`per_kernel`), a row per T in res["rows"], saved to `path` after every length. A variant that raises is
    recorded with its error. No length starts once `budget` seconds have passed since t0."""
    from tritonllm_course.measure.benchmark import time_calls
    for T in ts:
        if time.time() - t0 > budget:
            break
        sets = inputs(T, copies=4)
        row = {"T": T, "us": {}, "kernels_us": {}}
        for key, fn in variants.items():
            try:
                row["us"][key] = time_calls(fn, sets)
                row["kernels_us"][key] = per_kernel(fn, sets[0])
            except Exception as e:  # noqa: BLE001  (recorded, not fatal)
                torch.cuda.synchronize()
                row["us"][key] = common.error_text(e)
        res["rows"].append(row)
        print(T, {k: round(v, 1) if isinstance(v, float) else v for k, v in row["us"].items()}, flush=True)
        common.save(path, res)
    return res


def check(device="cpu") -> float:
    """The variants the probe times compute the same rule: the course's chunked kernel at each chunk size and
    value block against its recurrent kernel (fp32, T = 40: a last chunk cut short): the largest relative error."""
    from tritonllm_course import kernels
    dr = kernels.load("delta_rule", "solutions").module
    gen = torch.Generator(device=device).manual_seed(0)
    inp = make_inputs({"T": 40, "H": 2, "HV": 4, "DK": 16, "DV": 64}, torch.float32, device, gen)
    want, want_state = dr.gated_delta_rule_recurrent(**inp)
    worst = 0.0
    for chunk in CHUNKS:
        for block_v in BLOCKS:
            got, state = dr.gated_delta_rule_chunked(**inp, chunk_size=chunk, block_v=block_v)
            worst = max(worst, common.rel_err(got, want), common.rel_err(state, want_state))
    return worst


def main(out):
    common.setup()
    from tritonllm_course import kernels
    from tritonllm_course.measure.benchmark import time_calls
    dr = kernels.load("delta_rule", "solutions").module
    fla, fla_version = fla_fn()
    budget, t0 = float(os.environ.get("PROBE_S", "240")), time.time()
    path = common.result_path(out, "delta_rule_kernels_probe")
    res = common.header(check_rel_err=check("cuda"), fla=fla_version, shape=SHAPE, rows=[])
    for T in TS:
        if time.time() - t0 > budget:
            break
        sets = inputs(T, copies=4)
        row = {"T": T, "engine_chunk": dr.chunk_size_for(T), "us": {}}
        variants = {f"course chunk {c} block_v {bv}": (c, bv) for c in CHUNKS for bv in BLOCKS}
        for key, (chunk, block_v) in variants.items():
            try:
                row["us"][key] = time_calls(
                    lambda chunk=chunk, block_v=block_v, **s: dr.gated_delta_rule_chunked(
                        **s, chunk_size=chunk, block_v=block_v), sets)
            except Exception as e:  # noqa: BLE001  (recorded, not fatal)
                row["us"][key] = common.error_text(e)
        if fla is not None:
            try:
                row["us"]["fla"] = time_calls(fla, sets)
            except Exception as e:  # noqa: BLE001  (a capture fla refuses: timed eagerly instead, and said)
                torch.cuda.synchronize()
                row["fla_timing"] = f"do_bench, not a graph ({common.error_text(e, 120)})"
                row["us"]["fla"] = triton.testing.do_bench(lambda: fla(**sets[0]), warmup=5, rep=50) * 1e3
        for launch in SCAN_LAUNCHES:     # the engine's chunk and value block, the scan launched otherwise
            key = f"course scan warps {launch['num_warps']} stages {launch['num_stages']}"
            variants[key] = (row["engine_chunk"], 16, launch)
            try:
                with common.replaced(dr, "SCAN_LAUNCH", launch):
                    row["us"][key] = time_calls(
                        lambda **s: dr.gated_delta_rule_chunked(**s, chunk_size=row["engine_chunk"]), sets)
            except Exception as e:  # noqa: BLE001  (recorded, not fatal)
                row["us"][key] = common.error_text(e)
        timed = {k: v for k, v in row["us"].items() if isinstance(v, float) and k != "fla"}
        row["best_course"] = min(timed, key=timed.get)
        # every variant's kernels: which of the three a chunk size, a value block or a launch moves
        row["kernels_us"] = {"course as the engine runs it": per_kernel(
            lambda **s: dr.gated_delta_rule_chunked(**s, chunk_size=row["engine_chunk"]), sets[0])}
        for key in timed:
            chunk, block_v, *launch = variants[key]
            with common.replaced(dr, "SCAN_LAUNCH", launch[0] if launch else dr.SCAN_LAUNCH):
                row["kernels_us"][key] = per_kernel(
                    lambda chunk=chunk, block_v=block_v, **s: dr.gated_delta_rule_chunked(
                        **s, chunk_size=chunk, block_v=block_v), sets[0])
        if fla is not None:
            row["kernels_us"]["fla"] = per_kernel(fla, sets[0])
        res["rows"].append(row)
        print(T, {k: round(v, 1) for k, v in timed.items()}, "fla", row["us"].get("fla"), flush=True)
        common.save(path, res)
    return res


if __name__ == "__main__":
    main(common.out_dir())
