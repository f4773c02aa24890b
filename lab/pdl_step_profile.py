"""Where does the decode step's time go, kernel by kernel, once its kernels overlap under PDL?

    python -m lab.pdl_step_profile [OUTDIR]   (on an sm_90 GPU; writes OUTDIR/pdl_step_profile_<gpu>_<date>.json)

Question: with programmatic dependent launch a kernel starts before the one ahead of it has finished, so a
kernel's own duration (start to end) counts the time it spends waiting at `pdl_wait` and no longer adds
up to the step. Which kernels still cost more than their bytes, once the launches overlap?
Method: the engine's fast decode step of Qwen3.5-0.8B (random weights of the real shapes, bf16) replayed
from its CUDA graph at 128 and 4,096 cached tokens, three ways: without PDL; with PDL but each kernel
launched after the one before has finished (`no_launch_overlap` at capture: the same kernels, so their
durations are clean); with PDL. torch.profiler's device trace of 8 replays; each kernel's slot from the
traced calls (`measure.trace.attribute`). Per kernel, its *increment*: its end minus the end of the
kernel before it in the stream, which adds up to the step's device time with or without overlap; and,
under PDL, its *overlap*: how long it was resident before the kernel ahead of it ended. Per slot, the
increment beside the slot's bytes at the copy ceiling measured in the same run.
Result: NVIDIA H200, 2026-12-02 (lab/results/pdl_step_profile_nvidia-h200_2026-12-02.json; copy ceiling
4,262 GB/s; the LM head launched without PDL, `pdl_variants_probe`). Us per token by events: 689 without
PDL, 709 with the PDL kernels launched without overlap (their whole-tile GEMVs are slower alone), 624 with
PDL at 128 cached tokens (752, 764, 657 at 4,096). Increments per token at 128, without PDL -> with it,
beside the bytes at the ceiling: gate/up + SwiGLU 145 -> 105 (83), the DeltaNet in-projection + conv
120 -> 103 (72), the out-projections + residual 113 -> 79 (47), the gated-norm out_proj 73 -> 47 (18),
the attention in-projection 29 -> 18 (15), the LM head 115 -> 115 (119); and the small latency-bound
kernels, which wait at their top or right after a state load: the recurrence 54 -> 85 (9), FlashDecoding
38 -> 45, q/k norm + RoPE + cache write 13 -> 17. Above the floor at 128: 261 us, 137 of them in those
three small kernels. Since `Engine(pdl=False)` runs the PDL kernels one after another (the same bits),
its row is the no-overlap one: a re-run the same day gave 706 / 710 / 624 us at 128 and 766 / 765 / 662 at
4,096 (lab/results/pdl_step_profile_nvidia-h200_2026-12-02_rerun.json).
Run again on an NVIDIA H100 80GB HBM3 after FlashDecoding's merge let o_proj launch at its end (2026-12-06, 2b26c82;
lab/results/pdl_step_profile_nvidia-h100-80gb-hbm3_2026-12-06.json; copy ceiling 3,025 GB/s, floor 511 us at
128 cached tokens): device time no PDL / PDL, no overlap / PDL 862 / 860 / 729 us at 128 and 920 / 918 / 765
at 4,096. Above the bytes a kernel, PDL against no PDL at 128: the recurrence 4.6 against 2.6 us, FlashDecoding
2.5 against 3.1, the q/k prologue 1.6 against 2.1: of the small kinds only the recurrence is still slower
under PDL. The step's end (final norm 1.2 us, the two argmax kernels 3.4, the position advance 0.9, each its
increment under PDL) bounds what folding those kernels into the LM head and the merge can save: 5.5 us, under
1% of the step.
Verdict: nothing to adopt (a measurement, read in lab/pdl_variants_probe.py): what remains between the
engine and the floor is the small kernels' latency (the recurrence's chain of loads, reductions and stores,
FlashDecoding's two kernels) more than the GEMVs' bytes: the next step is fewer of them (the DeltaNet decode
chain fused per head, the KV cache's past rows loaded before the wait), both tried since and not adopted
(lab/deltanet_head_fusion_probe.py, lab/flash_decoding_prefetch_probe.py).
"""
import contextlib
from collections import defaultdict

import torch

from lab import common

CONTEXTS = (128, 4096)
TOKENS = 8          # decode tokens profiled per mode (one decode step each)
MODES = ("no PDL", "PDL, no overlap", "PDL")


def increments(starts: list[float], ends: list[float]) -> tuple[list[float], list[float]]:
    """Each kernel's increment (its end minus the previous end; the first: its duration) and overlap (how
    long before the previous end it started, 0 if after), in stream order."""
    inc, lap = [], []
    for i, (s, e) in enumerate(zip(starts, ends)):
        prev = ends[i - 1] if i else s
        inc.append(e - prev if i else e - s)
        lap.append(max(0.0, prev - s) if i else 0.0)
    return inc, lap


def profile_mode(mode: str, context: int, gbps: float) -> dict:
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    from tritonllm_course.engine.plan import LEVELS
    from tritonllm_course.measure import bytes_model as B, trace as T
    from tritonllm_course.runtime import no_launch_overlap
    engine = Engine.random(QWEN35_0_8B, dtype=torch.bfloat16, device="cuda", seed=0, level="fast",
                           pdl=mode != "no PDL", max_seq_len=context + 4 * TOKENS + 16)
    calls = T.traced_calls(engine, context)
    per_slot = T.slot_kernels(engine)
    prompt = [(7 * i + 3) % QWEN35_0_8B.vocab_size for i in range(context)]
    engine.reset()
    engine.prefill(prompt)
    with (no_launch_overlap() if mode == "PDL, no overlap" else contextlib.nullcontext()):
        for _ in range(3):                      # compile and capture under the mode's launch attributes
            engine.decode()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(32):
        engine.decode()
    stop.record()
    torch.cuda.synchronize()
    wall_us = start.elapsed_time(stop) * 1e3 / 32
    names, starts, ends = T.device_events(engine.decode, TOKENS)
    owners = T.attribute(names, calls, per_slot, TOKENS)
    inc, lap = increments(starts, ends)
    nbytes = B.slot_bytes(engine.config, context + 3 + 32 + TOKENS // 2, engine.dtype, LEVELS["fast"].steps)
    slots: dict[str, dict] = defaultdict(lambda: {"calls": 0, "duration_us": 0.0, "increment_us": 0.0,
                                                  "overlap_us": 0.0})
    kernels: dict[str, dict] = defaultdict(lambda: {"calls": 0, "duration_us": 0.0, "increment_us": 0.0,
                                                    "overlap_us": 0.0})
    for name, owner, s, e, i, o in zip(names, owners, starts, ends, inc, lap):
        for row in (slots[owner], kernels[f"{name} ({owner})"]):
            row["calls"] += 1 / TOKENS
            row["duration_us"] += (e - s) / TOKENS
            row["increment_us"] += i / TOKENS
            row["overlap_us"] += o / TOKENS
    for slot, row in slots.items():
        b = nbytes.get(slot)
        row["bytes"] = b
        row["floor_us"] = b / (gbps * 1e3) if b else None
    del engine
    torch.cuda.empty_cache()
    return {"wall_us": wall_us, "device_us": (ends[-1] - starts[0]) / TOKENS, "kernels_per_token": len(names) / TOKENS,
            "floor_us": sum(nbytes.values()) / (gbps * 1e3),
            "slots": dict(sorted(slots.items(), key=lambda kv: -kv[1]["increment_us"])),
            "kernels": dict(sorted(kernels.items(), key=lambda kv: -kv[1]["increment_us"]))}


def check() -> float:
    """The increments of a made-up overlapping trace add up to its span; runs anywhere."""
    starts, ends = [0.0, 3.0, 4.0, 9.0], [5.0, 6.0, 10.0, 12.0]
    inc, lap = increments(starts, ends)
    assert inc == [5.0, 1.0, 4.0, 2.0] and lap == [0.0, 2.0, 2.0, 1.0], (inc, lap)
    return abs(sum(inc) - (ends[-1] - starts[0]))


def main(out):
    common.setup()
    from tritonllm_course.measure.benchmark import ceiling_gbps
    gbps = ceiling_gbps()
    res = common.header(copy_ceiling_GBps=gbps, steps=TOKENS, runs={})
    path = common.result_path(out, "pdl_step_profile")
    for context in CONTEXTS:
        for mode in MODES:
            key = f"{mode} @ {context}"
            try:
                res["runs"][key] = r = profile_mode(mode, context, gbps)
                print(f"{key}: {r['wall_us']:.1f} us wall, {r['device_us']:.1f} us device, "
                      f"{r['kernels_per_token']:.0f} kernels, floor {r['floor_us']:.1f} us", flush=True)
                for slot, row in r["slots"].items():
                    fl = f"{row['floor_us']:7.2f}" if row["floor_us"] else "      -"
                    print(f"   {slot:<34} {row['calls']:5.1f} inc {row['increment_us']:7.2f}  dur "
                          f"{row['duration_us']:7.2f}  lap {row['overlap_us']:6.2f}  floor {fl}", flush=True)
            except Exception as e:
                res["runs"][key] = {"error": common.error_text(e)}
                print(key, res["runs"][key], flush=True)
            common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
