"""GPU benchmark of FlashAttention (chapter 23_flash_attention) and FlashDecoding (chapter 25_flash_decoding) at
Qwen3.5-0.8B's shapes (8 query heads, 2 KV heads, head_dim 256), beyond the kernel table's per-slot rows:

- prefill: FlashAttention against chapter 08_attention's two-pass kernel and op-by-op chain, SDPA's fused backends
  scaled_dot_product_attention and the reference (eager, torch.compile), T = 128 ... 8192, in TFLOP/s;
- tiles: FlashAttention with other BLOCK_M x BLOCK_N / warps / stages (what `flash_config` chose marked);
- decode: FlashDecoding against chapter 08_attention's one-program-per-KV-head kernel, its three-kernel chain and
  graph-safe PyTorch, cache lengths 128 ... 65,536 (max_len = length), GB/s and the crossover length;
- splits: FlashDecoding's num_splits swept at four lengths;
- accuracy: bf16 against the fp64 reference.
Every timing is a CUDA-graph replay over input sets larger than L2 (`benchmark.time_calls`).

    python -m tritonllm_course.measure.flash_bench --out results/     # on a GPU machine
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from .. import triton_helpers as helpers
from ..safe_files import atomic_write_text, save_figure
from .benchmark import ceiling_gbps, fastest, gpu_script, results_stem, time_calls

PREFILL_T = (128, 512, 1024, 2048, 4096, 8192)
MATERIALISED_MAX_T = 4096          # the [8, T, T] scores of the chain and the reference: 1 GB at 8192
COMPILED_T = (128, 1024, 4096)
TILES = [(16, 64, 4, 2), (32, 64, 4, 2), (64, 32, 4, 2), (64, 64, 4, 2), (64, 64, 4, 3), (64, 64, 8, 2),
         (64, 64, 8, 3), (128, 32, 8, 2), (128, 64, 8, 2)]
TILE_T = (128, 512, 1024, 2048, 4096)   # each length where flash_config's rule changes its tile, and between
DECODE_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
SPLITS = (4, 16, 33, 66, 132, 256)
SPLIT_LENGTHS = (1024, 4096, 16384, 65536)
HEADS = {"heads": 8, "kv_heads": 2, "head_dim": 256}


def _sets(slot, shape, dtype, n_bytes_min=256 * 2**20):
    """Independent input sets of a slot, together larger than L2."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(0)
    first = slot.make_inputs(shape, dtype, "cuda", gen)
    copies = max(2, min(64, math.ceil(n_bytes_min / slot.bytes(first))))
    return [first] + [slot.make_inputs(shape, dtype, "cuda", gen) for _ in range(copies - 1)]


def _time(fn, sets):
    try:
        return time_calls(fn, sets)
    except Exception as e:            # a configuration out of shared memory or registers
        return f"{type(e).__name__}"


# PyTorch's fused attention kernels take 4-D [batch, heads, T, D] inputs only: given 3-D tensors SDPA falls
# back to its unfused math path, which materialises the scores: at T = 4096 on an H200 that fallback took
# 4,839.1 us<!-- fig:flash.prefill.t4096.sdpa_math_3d.us --> (results/flash_nvidia-h200_2026-11-30.json),
# 15x<!-- fig:code.flash_bench.sdpa_math_over_flash.t4096 --> the flash backend's
# 327.2 us<!-- fig:flash4.prefill.t4096.sdpa_flash.us --> and
# 30x<!-- fig:code.flash_bench.sdpa_math_over_cudnn.t4096 --> cuDNN's
# 163.7 us<!-- fig:flash4.prefill.t4096.sdpa_cudnn.us --> once pinned (results/flash_nvidia-h200_2026-12-04.json).
# Each fused backend is pinned on its own, so a backend that cannot run these shapes raises instead of falling
# back.
SDPA_BACKENDS = {"SDPA flash": "FLASH_ATTENTION", "SDPA cuDNN": "CUDNN_ATTENTION",
                 "SDPA mem-efficient": "EFFICIENT_ATTENTION"}


def sdpa(q, k, v, pos, scale, backend="FLASH_ATTENTION"):
    """Causal attention through `scaled_dot_product_attention` with one fused backend pinned.
    q [T, H, D], k/v [S, Hkv, D] as the course's kernels take them (S = T: a prompt from position 0)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(getattr(SDPBackend, backend)):
        # [T, H, D] -> [1, H, T, D]: the batch dimension the fused kernels need (a view, no copy)
        o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                           v.transpose(0, 1)[None], is_causal=True, scale=scale, enable_gqa=True)
    return o[0].transpose(0, 1)                                        # [1, H, T, D] -> [T, H, D]


def sdpa_baselines(names=tuple(SDPA_BACKENDS)) -> dict:
    """name -> a function of the flash_attention slot's inputs running SDPA with that backend pinned."""
    def pinned(backend):
        return lambda **kw: sdpa(**kw, backend=backend)
    return {name: pinned(b) for name, b in SDPA_BACKENDS.items() if name in names}


def prefill(fa, attn, dtype):
    import torch
    from .. import reference as R
    from .. import slots
    slot = slots.get("flash_attention")

    def chain(q, k, v, pos, scale):
        return attn.pv(attn.masked_softmax(attn.qk_scores(q, k), attn.causal_mask(pos, k.shape[0]), scale), v)

    rows = []
    for T in PREFILL_T:
        sets = _sets(slot, {"tokens": T, "keys": T, **HEADS}, dtype)
        impls = {"flash (triton)": fa.flash_attention, "two-pass (ch08)": attn.attention, **sdpa_baselines()}
        if T <= MATERIALISED_MAX_T:
            impls.update({"op-by-op (ch08)": chain, "reference eager": R.attention})
        if T in COMPILED_T:
            impls["reference torch.compile"] = torch.compile(R.attention, dynamic=False)
        times = {name: _time(fn, sets) for name, fn in impls.items()}
        rows.append({"T": T, "flops": slot.flops(sets[0]), "bytes": slot.bytes(sets[0]), "times_us": times})
        print(f"prefill T={T}: "
              + "  ".join(f"{n} {t if isinstance(t, str) else f'{t:.1f}'}" for n, t in times.items()))
    return rows


def tiles(fa, dtype):
    from .. import slots
    slot = slots.get("flash_attention")
    rows = []
    for T in TILE_T:
        sets = _sets(slot, {"tokens": T, "keys": T, **HEADS}, dtype)
        gpu = helpers.gpu_of(sets[0]["q"].device)      # the wrapper's pick on this GPU (its shared memory)
        chosen = fa.flash_config(T, 4, 2, 256, sets[0]["q"].element_size(),
                                 shared_bytes=None if gpu is None else gpu.shared_bytes)
        for bm, bn, warps, stages in TILES:
            cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages}
            rows.append({"T": T, **cfg, "chosen": cfg == chosen, "flops": slot.flops(sets[0]),
                         "time_us": _time(lambda cfg=cfg, **kw: fa.flash_attention(**kw, config=cfg), sets)})
    return rows


def _chain(attn):
    """Chapter 08_attention's three kernels over the whole cache, which is the length here (max_len = length, so
    no mask): a program per block of scores in each, where the fused kernel has one per KV head."""
    def chain(q, k_cache, v_cache, length, scale, **_):
        return attn.pv(attn.scaled_softmax(attn.qk_scores(q[None], k_cache), scale), v_cache)   # [1, H, D]
    return chain


def decode(fd, attn, dtype):
    from .. import slots
    slot = slots.get("flash_decoding")
    rows = []
    for n in DECODE_LENGTHS:
        sets = _sets(slot, {"length": n, "max_len": n, **HEADS}, dtype)
        times = {"flash decoding (triton)": _time(fd.flash_decoding, sets),
                 "one program per KV head (ch08)": _time(attn.decode_attention, sets),
                 "three kernels: scores, softmax, P.V (ch08)": _time(_chain(attn), sets),
                 "torch eager, graph-safe": _time(slot.torch_impl, sets)}
        rows.append({"length": n, "bytes": slot.bytes(sets[0]), "times_us": times})
        print(f"decode length={n}: " + "  ".join(f"{k} {v if isinstance(v, str) else f'{v:.1f}'}"
                                                  for k, v in times.items()))
    return rows


def splits(fd, dtype):
    from .. import slots
    slot = slots.get("flash_decoding")
    rows = []
    for n in SPLIT_LENGTHS:
        sets = _sets(slot, {"length": n, "max_len": n, **HEADS}, dtype)
        for s in SPLITS:
            rows.append({"length": n, "num_splits": s, "bytes": slot.bytes(sets[0]),
                         "time_us": _time(lambda s=s, **kw: fd.flash_decoding(**kw, num_splits=s), sets)})
    return rows


def accuracy(fa, fd, attn, dtype):
    import torch
    from .. import reference as R
    from .. import slots

    def rel(a, b):
        return ((a.double() - b.double()).norm() / b.double().norm()).item()

    gen = torch.Generator(device="cuda").manual_seed(1)
    out = {}
    inp = slots.get("flash_attention").make_inputs({"tokens": 4096, "keys": 4096, **HEADS}, dtype, "cuda", gen)
    ref = R.attention(*(inp[k].double() for k in ("q", "k", "v")), inp["pos"], inp["scale"])
    out["prefill T=4096"] = {"flash": rel(fa.flash_attention(**inp), ref),
                             "two-pass (ch08)": rel(attn.attention(**inp), ref),
                             **{name: _rel_or_error(fn, inp, ref, rel) for name, fn in sdpa_baselines().items()}}
    inp = slots.get("flash_decoding").make_inputs({"length": 16384, "max_len": 16384, **HEADS}, dtype, "cuda", gen)
    ref = R.decode_attention(*(inp[k].double() for k in ("q", "k_cache", "v_cache")), inp["length"], inp["scale"])
    out["decode length=16384"] = {"flash decoding": rel(fd.flash_decoding(**inp), ref),
                                  "one program per KV head (ch08)": rel(attn.decode_attention(**inp), ref)}
    return out


def _rel_or_error(fn, inp, ref, rel):
    try:
        return rel(fn(**inp), ref)
    except RuntimeError as e:             # a pinned backend that cannot run these shapes says so
        return f"{type(e).__name__}"


def strongest(times: dict) -> str | None:
    """The fastest baseline of a prefill row (every implementation that is not the course's FlashAttention)."""
    return fastest(times, lambda k: k != "flash (triton)")


def _fmt(t):
    return t if isinstance(t, str) else f"{t:.1f}"


def _fmt_err(v):
    return v if isinstance(v, str) else f"{v:.1e}"


def markdown(res) -> str:
    lines = [f"# FlashAttention and FlashDecoding on {res['gpu']}, {res['date']}, {res['dtype']}", "",
             f"Ceiling (measured copy): {res['ceiling_gbps']:.0f} GB/s. Times in µs per layer, CUDA-graph replay.", "",
             "## Prefill (causal, S = T): µs, and TFLOP/s of the causal FLOPs", ""]
    impls = list(dict.fromkeys(k for r in res["prefill"] for k in r["times_us"]))
    lines += ["| T | " + " | ".join(impls) + " | strongest baseline: its time / flash's |",
              "|---" * (len(impls) + 2) + "|"]
    for r in res["prefill"]:
        cells = []
        for i in impls:
            t = r["times_us"].get(i, "-")
            cells.append(_fmt(t) if isinstance(t, str) else f"{t:.1f} ({r['flops'] / t / 1e6:.0f})")
        best = strongest(r["times_us"])
        lead = (f"{best}: {r['times_us'][best] / r['times_us']['flash (triton)']:.2f}x"
                if best and not isinstance(r["times_us"]["flash (triton)"], str) else "-")
        lines.append(f"| {r['T']} | " + " | ".join(cells) + f" | {lead} |")
    lines += ["", "## FlashAttention tiles (* = flash_config's choice)", "",
              "| T | BLOCK_M | BLOCK_N | warps | stages | µs | TFLOP/s |", "|---|---|---|---|---|---|---|"]
    for r in res["tiles"]:
        t = r["time_us"]
        lines.append(f"| {r['T']} | {r['BLOCK_M']} | {r['BLOCK_N']} | {r['num_warps']} | {r['num_stages']}"
                     f"{' *' if r['chosen'] else ''} | {_fmt(t)} | "
                     + ("-" if isinstance(t, str) else f"{r['flops'] / t / 1e6:.0f}") + " |")
    lines += ["", "## Decode (max_len = length): µs, and % of the ceiling", ""]
    impls = list(res["decode"][0]["times_us"])
    lines += ["| length | " + " | ".join(impls) + " |", "|---" * (len(impls) + 1) + "|"]
    for r in res["decode"]:
        cells = [_fmt(t) if isinstance(t, str) else
                 f"{t:.1f} ({100 * r['bytes'] / (t * 1e-6) / 1e9 / res['ceiling_gbps']:.0f}%)"
                 for t in r["times_us"].values()]
        lines.append(f"| {r['length']} | " + " | ".join(cells) + " |")
    lines += ["", f"Split-KV is faster than one program per KV head from length {res['crossover']}.", "",
              "## FlashDecoding splits: µs", "", "| length | " + " | ".join(str(s) for s in SPLITS) + " |",
              "|---" * (len(SPLITS) + 1) + "|"]
    for n in SPLIT_LENGTHS:
        lines.append(f"| {n} | " + " | ".join(_fmt(r["time_us"]) for r in res["splits"] if r["length"] == n) + " |")
    lines += ["", "## Accuracy in " + res["dtype"] + " (relative error against fp64)", ""]
    for case, errs in res["accuracy"].items():
        lines.append(f"- {case}: " + ", ".join(f"{k} {_fmt_err(v)}" for k, v in errs.items()))
    return "\n".join(lines) + "\n"


def plot(res, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    for impl in dict.fromkeys(k for r in res["prefill"] for k in r["times_us"]):
        pts = [(r["T"], r["flops"] / r["times_us"][impl] / 1e6) for r in res["prefill"]
               if not isinstance(r["times_us"].get(impl, "-"), str)]
        axes[0].plot(*zip(*pts), marker="o", label=impl)
    axes[0].set_ylabel("TFLOP/s (causal)"); axes[0].set_xlabel("prompt tokens T")
    axes[0].set_title("prefill attention")
    for impl in res["decode"][0]["times_us"]:
        pts = [(r["length"], r["times_us"][impl]) for r in res["decode"] if not isinstance(r["times_us"][impl], str)]
        axes[1].plot(*zip(*pts), marker="o", label=impl)
    axes[1].set_ylabel("µs per layer"); axes[1].set_yscale("log"); axes[1].set_xlabel("cache length")
    axes[1].set_title("decode attention")
    for ax in axes:
        ax.set_xscale("log", base=2); ax.legend(fontsize=7)
    fig.suptitle(f"{res['gpu']}, {res['dtype']}, {res['date']}")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def main(argv=None) -> int:
    started = gpu_script(__doc__, argv)
    if started is None:
        return 1
    args, rt = started
    import torch
    from .. import kernels, slots
    slots.get("flash_attention")                  # loads every slot's spec
    fa = kernels.load("flash_attention", "solutions").module
    fd = kernels.load("flash_decoding", "solutions").module
    attn = kernels.load("attention", "solutions").module
    stem, date = results_stem(args.out, "flash")
    out, tag = stem.parent, stem.name
    with torch.no_grad():
        res = {"gpu": rt.gpu_name, "date": date, "summary": rt.summary(), "dtype": rt.dtype_name,
               "ceiling_gbps": ceiling_gbps(), "prefill": prefill(fa, attn, rt.dtype), "tiles": tiles(fa, rt.dtype),
               "decode": decode(fd, attn, rt.dtype), "splits": splits(fd, rt.dtype),
               "accuracy": accuracy(fa, fd, attn, rt.dtype)}
    faster = [r["length"] for r in res["decode"]
              if all(not isinstance(t, str) for t in r["times_us"].values())
              and r["times_us"]["flash decoding (triton)"] < r["times_us"]["one program per KV head (ch08)"]]
    res["crossover"] = faster[0] if faster else None
    atomic_write_text(out / f"{tag}.json", json.dumps(res, indent=1))
    atomic_write_text(out / f"{tag}.md", markdown(res))
    plot(res, out / f"{tag}.png")
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
