"""Under PDL, which launch shapes shorten the DeltaNet layer's recurrence and its in-projection, and where should
the small decode kernels let the next one launch?

    python -m lab.deltanet_pdl_probe [OUTDIR]   (on an sm_90 GPU; writes OUTDIR/deltanet_pdl_probe_<gpu>_<date>.json;
                                                PROBE_VARIANTS="as is;recurrence without the overlap": only those,
                                                names joined by ";")

Question: in the PDL decode step the recurrence's increment is 85 us a token at 128 cached tokens for 9 us
of state bytes, 54 us without PDL (`pdl_step_profile`, 2026-12-02): the largest stretch above the floor.
Its launch shape (value blocks of 16 on one warp, 128 programs) was chosen alone, without PDL
(`decode_small_sweep`). Under PDL it launches when the DeltaNet in-projection's last programs start, and
that GEMV (2,056 programs of 4 warps) fills the SMs: the recurrence's programs may find no room to load
their state early. Do other value blocks or warps help there, and does an in-projection of 8 rows a
program (half the programs) leave the room?
Method: the engine's fast decode step of Qwen3.5-0.8B (random weights of the real shapes, bf16, its CUDA
graph, PDL) at 128 and 4,096 cached tokens: as it is; the recurrence at value blocks of 8 and 32 (one warp)
and on 2 and 4 warps (blocks of 16), through `gated_delta_rule_recurrent_gates`'s arguments; the DeltaNet
in-projection + conv at 8 rows a program on 8 warps and on 4, and at 4 rows on 2 warps (`fused_gemv_config`
with the conv); the 8 rows on 4 warps with value blocks of 8. Us per token by
CUDA events over 64 replays, each variant twice, alternated; the greedy tokens of each against the engine's
as it is (the recurrence's variants keep every sum's order; the 8-row GEMV's too: one row, one program).
Result: NVIDIA H200, 2026-12-02 (lab/results/deltanet_pdl_probe_nvidia-h200_2026-12-02.json), us per token
at 128 / 4,096 cached tokens, two runs each: as it is 625.1, 625.5 / 655.2, 653.8; the recurrence at blocks
of 8 672-674 / 684-685, of 32 619.6, 630.8 / 648-650, on 2 warps 638 / 660-662, on 4 warps 636-639 /
659-661; the in-projection at 8 rows 631-637 / 653-654, at 8 rows on 4 warps 649-652 / 632-634, on 2 warps
627-630 / 641; 8 rows on 4 warps with blocks of 8 691-692 / 650-651. No variant is faster at both contexts
by more than the run-to-run spread; 8 rows on 4 warps gains 22 us at 4,096 and loses 26 at 128 (the runs' means). The
recurrence's variants change its tokens (another reduction tree on the GPU): its sums are not in the same
order after all.
Variants added later, on what PDL adds to the recurrence: "recurrence without the overlap" (the recurrence launched
plainly, so it starts when the in-projection has finished and holds no SM while it runs; the kernels after it keep
PDL), the recurrence letting the next kernel launch after the token's loads of q, k, v, a and b rather than at its
entry (`late_trigger_kernel`), and FlashDecoding's merge letting it launch only at its end. The kernel after each,
an output projection, streams its whole weight tile in before its own wait: launched at the small kernel's entry,
that stream shares the memory system with the small kernel's dependent loads. (`pdl_variants_probe` had measured
the recurrence's trigger after its stores and at its exit: within the spread.) Result: NVIDIA H100 80GB HBM3,
2026-12-06 (lab/results/deltanet_pdl_probe_nvidia-h100-80gb-hbm3_2026-12-06.json), us per token at 128 / 4,096
cached tokens, two runs each: as it was 752.8, 752.7 / 768.1, 773.2; the recurrence without the overlap 758.8,
752.9 / 763.7, 764.4; its trigger after its loads 756.5, 741.1 / 767.7, 766.8; the merge's trigger at its end
724.9, 724.5 / 755.1, 756.8: 28 us a token faster at 128 and 15 at 4,096 (the runs' means), the tokens the same.
Since then the solution's merge waits without the trigger; `entry_merge_kernel` (the variant "merge lets the next
kernel launch at its entry") is the merge as it was, for a rerun. Why the early launch of o_proj costs more after
the merge than after the recurrence was not profiled. The split kernel and the q/k prologue, whose next kernels
load nothing before their wait, let them launch at entry; their variants letting them launch at their end
(`exit_trigger_kernel`), alone and together, ran on an H100 after the merge's change (2026-12-06, at 2b26c82;
lab/results/deltanet_pdl_probe_nvidia-h100-80gb-hbm3_2026-12-06_exit_triggers.json), us per token at 128 / 4,096
cached tokens, two runs each: as it is 718.7, 725.5 / 757.4, 756.6; the prologue at its end 729.7, 722.1 / 762.6,
761.4; the split at its end 730.9, 728.2 / 759.8, 759.9; both 727.8, 724.8 / 763.8, 763.3; the tokens the same.
Verdict: adopted: FlashDecoding's merge lets the next kernel launch at its end (solutions/flash_decoding.py), on
the H100's measurement; not yet measured on the H200. Not adopted: the prologue's and the split's trigger at their
end (no gain at 128, 3-7 us a token slower at 4,096: a late trigger pays only where the next kernel has loads to
start before its wait); the launch shapes are not what holds the recurrence at about 4.7 us a layer (85 us a token
over 18 layers under PDL on the H200, `pdl_step_profile`; it waits for the in-projection and then runs a chain of
dependent loads, reductions and stores, whatever its shape), and neither is where it lets the next kernel launch, nor
PDL's overlap itself: solutions/layer_fusion.py and solutions/norm_fusion.py keep theirs.
"""
import functools
from contextlib import contextmanager

import torch

from lab import common
from tritonllm_course.runtime import no_launch_overlap

CONTEXTS = (128, 4096)
REPEATS = 2
VARIANTS = {"as is": {}, "recurrence, blocks of 8": {"block_v": 8}, "recurrence, blocks of 32": {"block_v": 32},
            "recurrence on 2 warps": {"num_warps": 2}, "recurrence on 4 warps": {"num_warps": 4},
            "in-projection at 8 rows": {"in_proj_rows": 8},
            "in-projection at 8 rows on 4 warps": {"in_proj_rows": 8, "in_proj_warps": 4},
            "in-projection on 2 warps": {"in_proj_rows": 4, "in_proj_warps": 2},
            "in-projection at 8 rows on 4 warps, recurrence blocks of 8": {"in_proj_rows": 8, "in_proj_warps": 4,
                                                                           "block_v": 8},
            "recurrence without the overlap": {"overlap": False},
            "recurrence lets the next kernel launch after its loads": {"trigger": "loads"},
            "merge lets the next kernel launch at its entry": {"merge_trigger": "entry"},
            "q/k prologue lets the next kernel launch at its end": {"exit_trigger": ("prologue",)},
            "split lets the next kernel launch at its end": {"exit_trigger": ("split",)},
            "q/k prologue and split let the next kernel launch at their end": {"exit_trigger": ("prologue", "split")}}


@functools.lru_cache(maxsize=None)
def _modules():
    """The solution modules the variants patch: layer_fusion, norm_fusion and flash_decoding."""
    from tritonllm_course import kernels
    return tuple(kernels.load(family, "solutions").module for family in ("layer_fusion", "norm_fusion",
                                                                          "flash_decoding"))


ENTRY_TRIGGER = "    if PDL:\n        pdl_launch_dependents()\n    hv = tl.program_id(0)"
LAST_LOAD = "        g = decay_rate * softplus(tl.load(a_ptr + t * sa + hv).to(tl.float32) + dt_bias)\n"


@functools.lru_cache(maxsize=None)
def late_trigger_kernel():
    """The recurrence with `griddepcontrol.launch_dependents` moved from its entry to after a token's loads of q,
    k, v, a and b: the next kernel's weight stream starts once those have arrived. Nothing else changes."""
    lf, _, _ = _modules()
    edits = [(ENTRY_TRIGGER, "    hv = tl.program_id(0)"),
             (LAST_LOAD, LAST_LOAD + "        if PDL:\n            pdl_launch_dependents()\n")]
    return common.edited_kernel(lf.recurrent_gates_kernel, edits)


@functools.lru_cache(maxsize=None)
def entry_merge_kernel():
    """FlashDecoding's merge as it was before this probe: letting the next kernel (o_proj, whose whole weight
    tile streams in before its own wait) launch at its entry, where the solution's lets it launch at its end."""
    fd = _modules()[2]
    return common.edited_kernel(fd.flash_decoding_merge_kernel,
                                [("    if PDL:\n        pdl_wait()\n", "    pdl_enter(PDL)\n")])


ENTER = "    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores\n"
EXIT_TRIGGERED = {"prologue": (0, "qk_norm_rope_cache_kernel"), "split": (2, "flash_decoding_split_kernel")}


@functools.lru_cache(maxsize=None)
def exit_trigger_kernel(which: str):
    """The q/k prologue ("prologue") or FlashDecoding's split kernel ("split") waiting for the kernel ahead without
    letting the next one launch first: the next launches when this one has finished, as the merge's does."""
    index, name = EXIT_TRIGGERED[which]
    return common.edited_kernel(getattr(_modules()[index], name), [(ENTER, "    if PDL:\n        pdl_wait()\n")])


@contextmanager
def patched(variant: dict):
    """The solution modules with the variant's launch shapes, as they were after."""
    lf, nf, fd = _modules()
    saved = lf.gated_delta_rule_recurrent_gates, nf.fused_gemv_config, lf.recurrent_gates_kernel, \
        fd.flash_decoding_merge_kernel, lf.qk_norm_rope_cache_kernel, fd.flash_decoding_split_kernel
    if "trigger" in variant:                 # the launch sites read the kernel from their module at each call
        lf.recurrent_gates_kernel = late_trigger_kernel()
    if variant.get("merge_trigger") == "entry":
        fd.flash_decoding_merge_kernel = entry_merge_kernel()
    for which in variant.get("exit_trigger", ()):
        index, name = EXIT_TRIGGERED[which]
        setattr(_modules()[index], name, exit_trigger_kernel(which))
    shape = {k: v for k, v in variant.items() if k in ("block_v", "num_warps")}
    if shape:
        lf.gated_delta_rule_recurrent_gates = functools.partial(saved[0], **shape)
    if variant.get("overlap") is False:      # launched plainly: it starts when the in-projection has finished
        inner = lf.gated_delta_rule_recurrent_gates          # with the variant's shape, where it has one

        def plain(*args, **kwargs):
            with no_launch_overlap():
                return inner(*args, **kwargs)
        lf.gated_delta_rule_recurrent_gates = plain
    if "in_proj_rows" in variant:
        rows = variant["in_proj_rows"]

        def config(N, K, interpreted=False, norm=False, gated=False, conv=False, pdl=False):
            cfg = saved[1](N, K, interpreted, norm, gated, conv, pdl)
            if conv and pdl and not interpreted:
                warps = variant.get("in_proj_warps", cfg["num_warps"] * rows // cfg["BLOCK_N"])
                cfg = {**cfg, "BLOCK_N": rows, "num_warps": warps}
            return cfg
        nf.fused_gemv_config = config
    try:
        yield
    finally:
        lf.gated_delta_rule_recurrent_gates, nf.fused_gemv_config, lf.recurrent_gates_kernel, \
            fd.flash_decoding_merge_kernel, lf.qk_norm_rope_cache_kernel, fd.flash_decoding_split_kernel = saved


def engine_us(variant: dict, context: int, tokens: int = 64) -> dict:
    with patched(variant):
        return common.fast_decode_us(context, tokens)


def _checked_variants(device: str) -> dict:
    """Every variant on the GPU; under the interpreter, where a warp count changes nothing and `patched` leaves
    the in-projection's rows as they are (its config applies them on a GPU only), one per distinct recurrence
    tile (the first of those that differ in nothing else)."""
    if device != "cpu":
        return VARIANTS
    seen, kept = set(), {}
    for name, variant in VARIANTS.items():
        tile = tuple(sorted((k, v) for k, v in variant.items()
                            if not k.endswith("warps") and k not in ("in_proj_rows", "overlap", "trigger",
                                                                         "merge_trigger", "exit_trigger")))
        if tile not in seen:
            seen.add(tile)
            kept[name] = variant
    return kept


def check() -> float:
    """Each variant at the tiny config under the interpreter: the fast engine's greedy tokens against the
    engine as it is, and the recurrence at each value block and warp count against the reference rule:
    returns the fraction of differing tokens plus the largest relative error of the recurrence."""
    from tritonllm_course.reference.fusion import gated_delta_rule_recurrent_gates as reference
    from tritonllm_course.config import TINY
    from tritonllm_course.engine import Engine
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    runs = {}
    for name, variant in _checked_variants(device).items():
        with patched(variant):
            engine = Engine.random(TINY, dtype=dtype, device=device, seed=0, max_seq_len=40, level="fast")
            runs[name] = engine.generate(prompt, 6)
    base = runs["as is"]
    differing = sum(sum(a != b for a, b in zip(base, r)) for r in runs.values()) / (len(base) * len(runs))
    lf = _modules()[0]
    gen = torch.Generator().manual_seed(0)
    T, H, HV, DK, DV = 3, 2, 4, 16, 32
    q, k = (torch.nn.functional.normalize(torch.randn(T, H, DK, generator=gen), dim=-1).to(device) for _ in range(2))
    v = torch.randn(T, HV, DV, generator=gen).to(device)
    a, b = torch.randn(T, HV, generator=gen).to(device), torch.randn(T, HV, generator=gen).to(device)
    A_log, dt_bias = torch.rand(HV, generator=gen).to(device), torch.randn(HV, generator=gen).to(device)
    s0 = torch.randn(HV, DK, DV, generator=gen).to(device)
    want, want_s = reference(q.double(), k.double(), v.double(), a.double(), b.double(), A_log.double(),
                             dt_bias.double(), s0.double())
    worst = 0.0
    for block_v, warps, late in ((8, 1, False), (16, 2, False), (32, 4, False), (16, 1, True)):
        kernel = late_trigger_kernel() if late else lf.recurrent_gates_kernel
        with common.replaced(lf, "recurrent_gates_kernel", kernel):
            out, state = lf.gated_delta_rule_recurrent_gates(q, k, v, a, b, A_log, dt_bias, s0.clone(),
                                                             block_v=block_v, num_warps=warps)
        worst = max(worst, common.rel_err(out.cpu(), want.cpu()), common.rel_err(state.cpu(), want_s.cpu()))
    return differing + worst + _edits_differ(device)


def _edits_differ(device: str) -> float:
    """The fraction of the three edited kernels (`entry_merge_kernel`, the split and the q/k prologue of
    `exit_trigger_kernel`) whose output is not the solution's bit for bit: FlashDecoding over a 37-row cache of 2
    KV heads, 3 query heads each, 4 splits, gated; the prologue over 2 tokens of those heads, partial RoPE."""
    lf, _, fd = _modules()
    gen = torch.Generator().manual_seed(1)
    q, gate = (torch.randn(6, 32, generator=gen).to(device) for _ in range(2))
    k_cache, v_cache = (torch.randn(50, 2, 32, generator=gen).to(device) for _ in range(2))
    length = torch.tensor([37], dtype=torch.int32, device=device)

    def decoding():
        return fd.flash_decoding(q, k_cache, v_cache, length, 32 ** -0.5, num_splits=4, gate=gate)

    def prologue():
        qt, kt, vt = (torch.randn(2, h, 32, generator=torch.Generator().manual_seed(2)).to(device) for h in (6, 2, 2))
        caches = [torch.zeros(50, 2, 32, device=device) for _ in range(2)]
        angles = torch.arange(50.0)[:, None] * torch.rand(8, generator=torch.Generator().manual_seed(3))[None, :]
        out = lf.qk_norm_rope_cache(qt, kt, vt, q_weight=torch.full((32,), 0.1, device=device),
                                    k_weight=torch.full((32,), -0.2, device=device), cos=angles.cos().to(device),
                                    sin=angles.sin().to(device),
                                    pos=torch.tensor([40, 41], dtype=torch.int32, device=device),
                                    k_cache=caches[0], v_cache=caches[1])
        return torch.cat([out.flatten(), *(c.flatten() for c in caches)])

    runs = ((fd, "flash_decoding_merge_kernel", entry_merge_kernel(), decoding),
            (fd, "flash_decoding_split_kernel", exit_trigger_kernel("split"), decoding),
            (lf, "qk_norm_rope_cache_kernel", exit_trigger_kernel("prologue"), prologue))
    differing = 0
    for module, name, kernel, run in runs:
        want = run()
        with common.replaced(module, name, kernel):
            differing += not torch.equal(run(), want)
    return differing / len(runs)


def main(out):
    common.engine_probe(out, "deltanet_pdl_probe", VARIANTS, engine_us, CONTEXTS, REPEATS, check)


if __name__ == "__main__":
    main(common.out_dir())
