"""GPU benchmark of the gated delta rule (chapters 15_delta_rule and 16_delta_rule_chunked), at Qwen3.5-0.8B's shapes
(16 heads of 128).

- decode: one recurrent step, for several (block_v, num_warps) splits of the state, against the bytes it
  must move (the fp32 state read and written: 2 MiB) in GB/s and % of the measured copy ceiling;
- prefill: the chunked kernels at T = 128 ... 8192 against transformers' PyTorch path
  (`torch_chunk_gated_delta_rule`) and flash-linear-attention's `chunk_gated_delta_rule` (when `fla`
  imports), with the ratios; transformers' path under torch.compile too, up to `COMPILE_MAX_T`; every row names
  its strongest baseline (the fastest peer) and the ratio against it;
- accuracy: relative error of o and of the final state against the fp64 recurrence, in bf16, for
  chunk sizes 16 / 32 / 64 and growing T.
Every timing is a CUDA-graph replay over input sets larger than L2 (`benchmark.time_calls`).

    python -m tritonllm_course.measure.delta_rule_bench --out results/     # on a GPU machine
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ..safe_files import atomic_write_text, save_figure
from .benchmark import ceiling_gbps, fastest, gpu_script, results_stem, time_calls

PREFILL_T = (128, 512, 1024, 2048, 4096, 8192)
DECODE_SPLITS = [(bv, nw) for bv in (4, 8, 16, 32) for nw in (1, 2, 4)]
ERROR_T = (128, 1024, 4096)
SPLIT_T = (1024, 4096)          # where the scan's other value-column splits are timed too
SHAPE = {"H": 16, "HV": 16, "DK": 128, "DV": 128}
# transformers' chunked path loops over chunks in Python, so torch.compile unrolls T / 64 chunks into one
# graph: at 2,048 tokens that is 32, past it the compile takes minutes a length for a baseline that fla beats
COMPILE_MAX_T = 2048
COMPILED = " + torch.compile"


def _input_sets(T, dtype, n_bytes_min=256 * 2**20):
    """Independent input sets, together larger than L2, so the timings measure HBM."""
    import torch
    from ..slots.delta_rule import make_inputs, moved
    gen = torch.Generator(device="cuda").manual_seed(T)
    first = make_inputs({"T": T, **SHAPE}, dtype, "cuda", gen)
    copies = max(2, min(64, math.ceil(n_bytes_min / moved(first))))
    return [first] + [make_inputs({"T": T, **SHAPE}, dtype, "cuda", gen) for _ in range(copies - 1)]


def _batched(inp, unscale_q=False):
    """Our [T, H, D] inputs as the [1, T, H, D] that transformers and fla take."""
    q = inp["q"] * inp["q"].shape[-1] ** 0.5 if unscale_q else inp["q"]   # transformers scales q itself
    return {"q": q[None], "k": inp["k"][None], "v": inp["v"][None], "g": inp["g"][None],
            "beta": inp["beta"][None], "initial_state": inp["initial_state"][None]}


def _peers():
    """{name: (chunked fn, recurrent fn, takes unscaled q)}: transformers' torch path and fla (if any)."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf
    # the decorated names dispatch to fla when it is installed: __wrapped__ is the PyTorch code itself
    chunk = getattr(hf.torch_chunk_gated_delta_rule, "__wrapped__", hf.torch_chunk_gated_delta_rule)
    rec = getattr(hf.torch_recurrent_gated_delta_rule, "__wrapped__", hf.torch_recurrent_gated_delta_rule)
    peers = {"transformers torch": (
        lambda q, k, v, g, beta, initial_state: chunk(q, k, v, g, beta, chunk_size=64,
                                                      initial_state=initial_state, output_final_state=True),
        lambda q, k, v, g, beta, initial_state: rec(q, k, v, g, beta, initial_state=initial_state,
                                                    output_final_state=True),
        True)}
    note = "fla not importable"
    try:
        import fla
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
        peers[f"fla {fla.__version__}"] = (
            lambda q, k, v, g, beta, initial_state: chunk_gated_delta_rule(
                q, k, v, g, beta, scale=1.0, initial_state=initial_state, output_final_state=True),
            lambda q, k, v, g, beta, initial_state: fused_recurrent_gated_delta_rule(
                q, k, v, g=g, beta=beta, scale=1.0, initial_state=initial_state, output_final_state=True),
            False)
        note = f"fla {fla.__version__}"
    except Exception as e:  # absent, or failing to import on this stack: say so and go on
        note = f"fla not importable: {type(e).__name__}: {e}"
    return peers, note


def _compiled_peers(peers):
    """transformers' PyTorch path under torch.compile (default mode): the strongest plain-PyTorch baseline.
    fla is left as it is: its kernels are Triton already, and Inductor has nothing to fuse around them."""
    import torch
    return {name + COMPILED: (torch.compile(chunk, dynamic=False), torch.compile(rec, dynamic=False), unscale)
            for name, (chunk, rec, unscale) in peers.items() if name.startswith("transformers")}


def _strongest(time_us: dict, peers) -> str | None:
    """The fastest peer timed (None if none ran)."""
    return fastest(time_us, lambda name: name in peers)


def _time(fn, sets):
    """Microseconds per call from a CUDA-graph replay; falls back to do_bench if capture fails."""
    import torch
    import triton.testing
    try:
        return time_calls(fn, sets), "cuda graph"
    except Exception:
        torch.cuda.synchronize()
        return triton.testing.do_bench(lambda: fn(**sets[0]), warmup=5, rep=50) * 1e3, "do_bench"


def decode(kernels_mod, ceiling, peers, dtype):
    from ..slots.delta_rule import moved
    sets = _input_sets(1, dtype)
    nbytes = moved(sets[0])
    rows = []

    def add(label, fn, s, note=""):
        us, how = _time(fn, s)
        gbps = nbytes / (us * 1e-6) / 1e9
        rows.append({"impl": label, "time_us": us, "GB/s": gbps, "% of ceiling": 100 * gbps / ceiling,
                     "timing": how, "note": note})

    rec = kernels_mod.gated_delta_rule_recurrent
    for bv, nw in DECODE_SPLITS:
        add(f"triton block_v={bv} warps={nw}",
            lambda bv=bv, nw=nw, **kw: rec(**kw, block_v=bv, num_warps=nw), sets,
            f"{16 * 128 // bv} programs")
    add("triton default, state in place", lambda **kw: rec(**kw, final_state=kw["initial_state"]), sets)
    failed = {}
    for name, (_, peer_rec, unscale) in peers.items():
        try:
            add(name, peer_rec, [_batched(s, unscale) for s in sets])
        except Exception as e:  # a baseline that does not compile or run here: recorded, the run goes on
            failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    timed = {r["impl"]: r["time_us"] for r in rows}
    return {"bytes": nbytes, "rows": rows, "strongest": _strongest(timed, peers), "failed": failed}


def prefill(kernels_mod, peers, dtype):
    from ..slots.delta_rule import chunked_flops, moved
    out = []
    for T in PREFILL_T:
        sets = _input_sets(T, dtype)
        row = {"T": T, "bytes": moved(sets[0]), "flops": chunked_flops({**sets[0], "chunk_size": 64}),
               "time_us": {}, "timing": {}}
        impls = {"triton": (kernels_mod.gated_delta_rule_chunked, sets)}
        if T in SPLIT_T:
            for bv in (32, 64):
                impls[f"triton block_v={bv}"] = (
                    lambda bv=bv, **kw: kernels_mod.gated_delta_rule_chunked(**kw, block_v=bv), sets)
        for name, (peer_chunk, _, unscale) in peers.items():
            if name.endswith(COMPILED) and T > COMPILE_MAX_T:
                continue
            impls[name] = (peer_chunk, [_batched(s, unscale) for s in sets])
        row["failed"] = {}
        for name, (fn, s) in impls.items():
            if name.startswith("triton"):
                row["time_us"][name], row["timing"][name] = _time(fn, s)
                continue
            try:
                row["time_us"][name], row["timing"][name] = _time(fn, s)
            except Exception as e:  # recorded, the other baselines still timed
                row["failed"][name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        t = row["time_us"]["triton"]
        row["speed-up"] = {name: us / t for name, us in row["time_us"].items() if name in peers}
        row["strongest"] = _strongest(row["time_us"], peers)
        row["vs strongest"] = row["speed-up"][row["strongest"]] if row["strongest"] else None
        row["GB/s"] = row["bytes"] / (t * 1e-6) / 1e9
        row["TFLOP/s"] = row["flops"] / (t * 1e-6) / 1e12
        out.append(row)
        print(f"prefill T={T}: " + ", ".join(f"{k} {v:.1f} us" for k, v in row["time_us"].items()))
    return out


def stages(kernels_mod, dtype, T=4096, chunk=64, block_v=16):
    """Where the prefill's time goes: each of the three stages timed alone (kernel 1 in the form the rule runs
    at this chunk size: two launches at chunks of 64)."""
    import torch
    sets = _input_sets(T, dtype)[:4]
    prepare = kernels_mod.chunk_prepare_for(chunk)
    for s in sets:
        s["w"], s["u"] = prepare(s["k"], s["v"], s["g"], s["beta"], chunk)
        s["final"] = torch.empty_like(s["initial_state"])
        s["starts"], s["v_new"] = kernels_mod.chunk_scan(s["k"], s["w"], s["u"], s["g"], s["initial_state"],
                                                         s["final"], chunk, block_v)
        s["out"] = torch.empty_like(s["v"])
    calls = {
        "1 prepare (UT transform, w, u)":
            lambda s: prepare(s["k"], s["v"], s["g"], s["beta"], chunk),
        "2 state scan":
            lambda s: kernels_mod.chunk_scan(s["k"], s["w"], s["u"], s["g"], s["initial_state"], s["final"],
                                             chunk, block_v),
        "3 output":
            lambda s: kernels_mod.chunk_output(s["q"], s["k"], s["g"], s["starts"], s["v_new"], s["out"],
                                               chunk)}
    out = {name: _time(lambda fn=fn, **kw: fn(kw), sets)[0] for name, fn in calls.items()}
    print(f"stages at T={T}: " + ", ".join(f"{k} {v:.1f} us" for k, v in out.items()))
    return {"T": T, "time_us": out}


def accuracy(kernels_mod, peers, dtype):
    """Relative error against the fp64 recurrence, in `dtype`, for the kernels and the peers."""
    import torch
    from .. import reference as R
    from ..checking import compare
    from ..slots.delta_rule import make_inputs
    rows = []
    for T in ERROR_T:
        inp = make_inputs({"T": T, **SHAPE}, dtype, "cuda", torch.Generator(device="cuda").manual_seed(1))
        ref_o, ref_s = R.gated_delta_rule_recurrent(**{k: v.double() for k, v in inp.items()})
        chunked = kernels_mod.gated_delta_rule_chunked
        runs = {f"triton chunked C={c}": (lambda c=c: chunked(**inp, chunk_size=c)) for c in (16, 32, 64)}
        runs["triton recurrent"] = lambda: kernels_mod.gated_delta_rule_recurrent(**inp)
        for name, (peer_chunk, _, unscale) in peers.items():
            runs[f"{name} chunked"] = lambda f=peer_chunk, u=unscale: (
                lambda o, s: (o[0], s[0]))(*f(**_batched(inp, u)))
        for name, run in runs.items():
            o, s = run()
            rows.append({"T": T, "impl": name, "o": compare(o, ref_o, "o")[0],
                         "state": compare(s, ref_s, "state")[0]})
        print(f"accuracy T={T}: " + ", ".join(f"{r['impl']} {r['o']:.1e}/{r['state']:.1e}"
                                               for r in rows if r["T"] == T))
    return rows


def markdown(res) -> str:
    lines = [f"# Gated delta rule on {res['gpu']}, {res['date']} ({res['dtype']}, 16 heads x 128 x 128)", "",
             f"Ceiling: measured copy bandwidth {res['ceiling_gbps']:.0f} GB/s. Peers: {res['fla']}.", "",
             f"## Decode step (T = 1): {res['decode']['bytes'] / 1e6:.2f} MB to move", "",
             "| implementation | us | GB/s | % of ceiling | timing | note |", "|---|---|---|---|---|---|"]
    for r in res["decode"]["rows"]:
        lines.append(f"| {r['impl']} | {r['time_us']:.2f} | {r['GB/s']:.0f} | {r['% of ceiling']:.1f}% | "
                     f"{r['timing']} | {r['note']} |")
    if res["decode"].get("strongest"):
        lines += ["", f"Strongest baseline at decode: {res['decode']['strongest']}."]
    lines += [f"- {name}: failed, not timed ({why})" for name, why in res["decode"].get("failed", {}).items()]
    peers = list(dict.fromkeys(n for r in res["prefill"] for n in (*r["speed-up"], *r.get("failed", {}))))
    names = ["triton"] + peers

    def cell(r, n, fmt):
        if n in r["time_us"]:
            return fmt(n)
        return "failed" if n in r.get("failed", {}) else "-"

    lines += ["", "## Chunked prefill (chunk 64): us per call, and the Triton kernels' speed-up",
              "", "| T | " + " | ".join(names) + " | " + " | ".join(f"vs {n}" for n in peers)
              + " | strongest baseline | vs strongest |",
              "|---" * (3 + len(names) + len(peers)) + "|"]
    for r in res["prefill"]:
        strongest = r.get("strongest") or _strongest(r["time_us"], r["speed-up"])   # older records: computed
        lines.append(f"| {r['T']} | " + " | ".join(cell(r, n, lambda n: f"{r['time_us'][n]:.1f}") for n in names)
                     + " | " + " | ".join(cell(r, n, lambda n: f"{r['speed-up'][n]:.2f}x") for n in peers)
                     + f" | {strongest or '-'} | "
                     + (f"{r['speed-up'][strongest]:.2f}x |" if strongest else "- |"))
    failures = [f"- T = {r['T']}, {name}: failed, not timed ({why})"
                for r in res["prefill"] for name, why in r.get("failed", {}).items()]
    lines += [""] + failures if failures else []
    lines += ["", "Other splits of the state scan (default block_v = 16):", "",
              "| T | variant | us |", "|---|---|---|"]
    for r in res["prefill"]:
        lines += [f"| {r['T']} | {n} | {us:.1f} |" for n, us in r["time_us"].items()
                  if n.startswith("triton ")]
    st = res["stages"]
    lines += ["", f"Each kernel alone at T = {st['T']}:", "", "| kernel | us |", "|---|---|"]
    lines += [f"| {name} | {us:.1f} |" for name, us in st["time_us"].items()]
    lines += ["", "## Relative error against the fp64 recurrence (o / final state)", "",
              "| T | implementation | o | final state |", "|---|---|---|---|"]
    for r in res["accuracy"]:
        lines.append(f"| {r['T']} | {r['impl']} | {r['o']:.1e} | {r['state']:.1e} |")
    return "\n".join(lines) + "\n"


def plot(res, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    rows = res["decode"]["rows"]
    ax = axes[0]
    ax.barh([r["impl"] for r in rows], [r["% of ceiling"] for r in rows],
            color=["tab:orange" if r["impl"].startswith("triton") else "tab:blue" for r in rows])
    for i, r in enumerate(rows):
        ax.text(r["% of ceiling"], i, f" {r['time_us']:.1f} us", va="center", fontsize=7)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel(f"% of copy ceiling ({res['ceiling_gbps'] / 1000:.2f} TB/s)")
    ax.set_title(f"decode step: {res['decode']['bytes'] / 1e6:.1f} MB moved")
    ax = axes[1]
    for name in ["triton"] + list(dict.fromkeys(n for r in res["prefill"] for n in r["speed-up"])):
        pts = [(r["T"], r["time_us"][name]) for r in res["prefill"] if name in r["time_us"]]
        ax.loglog([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("prompt tokens T")
    ax.set_ylabel("us per layer call")
    ax.set_title("chunked prefill, one DeltaNet layer")
    ax.legend(fontsize=8)
    ax = axes[2]
    for name in dict.fromkeys(r["impl"] for r in res["accuracy"]):
        pts = [r for r in res["accuracy"] if r["impl"] == name]
        ax.loglog([p["T"] for p in pts], [p["o"] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("T")
    ax.set_ylabel("relative error of o vs fp64 recurrence")
    ax.set_title(f"accuracy in {res['dtype']}")
    ax.legend(fontsize=7)
    fig.suptitle(f"Gated delta rule on {res['gpu']}, {res['date']}")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def main(argv=None) -> int:
    started = gpu_script(__doc__, argv)
    if started is None:
        return 1
    args, rt = started
    import torch
    from .. import kernels
    from .. import slots
    slots.get("gated_delta_chunked")              # loads every slot's spec before the kernel module is used
    mod = kernels.load("delta_rule", "solutions").module
    peers, fla_note = _peers()
    print(fla_note)
    timed_peers = {**peers, **_compiled_peers(peers)}   # accuracy: the compiled path is the same arithmetic
    ceiling = ceiling_gbps()
    stem, date = results_stem(args.out, "delta_rule")
    out, tag = stem.parent, stem.name
    with torch.no_grad():
        res = {"gpu": rt.gpu_name, "date": date, "summary": rt.summary(), "dtype": rt.dtype_name,
               "ceiling_gbps": ceiling, "fla": fla_note,
               "decode": decode(mod, ceiling, timed_peers, rt.dtype),
               "prefill": prefill(mod, timed_peers, rt.dtype),
               "stages": stages(mod, rt.dtype),
               "accuracy": accuracy(mod, peers, rt.dtype)}
    atomic_write_text(out / f"{tag}.json", json.dumps(res, indent=1))
    atomic_write_text(out / f"{tag}.md", markdown(res))
    plot(res, out / f"{tag}.png")
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
