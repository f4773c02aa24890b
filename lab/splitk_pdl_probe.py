"""The decode step's wide-K projections split along K under PDL, as the megakernel anchor splits its down?

    python -m lab.splitk_pdl_probe [OUTDIR]   (on an sm_90 GPU; writes OUTDIR/splitk_pdl_probe_<gpu>_<date>.json)

Question: `msaroufim/megakernels-vs-cuda-graphs` runs Llama-3.2-1B's down projection (K = 8,192) split 4
ways along K with a small reduce kernel after it. Here, under PDL, the fast level's down projection
(1,024 x 3,584, plus the residual) holds each program's 4 whole rows in registers: 256 programs of 16
warps, two waves on 132 SMs, 79 us a token for it and o_proj (`fused_linear_residual` in `pdl_step_profile`,
2026-12-02). Do more, shorter programs (the K range split S ways) pay for the partials' round trip, with
the sum in a reduce kernel of its own (the anchor's way) or done by each row block's last program to
finish (counted with an atomic, no extra launch)? And o_proj (K = 2,048) split the same way?
Method: the engine's fast decode step of Qwen3.5-0.8B (random weights of the real shapes, bf16, its CUDA
graph, PDL) at 128 and 4,096 cached tokens, its down projection (and in one variant o_proj) swapped for
`splitk_residual`: program (row block of 4, piece s) triggers its dependents at entry, loads its
[4, K / S] weight piece before the PDL wait, then x's piece; the S fp32 partial row sums go to a
workspace, summed in the order s = 0, 1, ... with the residual by `reduce_residual_kernel` (PDL, its own
launch) or by the row block's last program (an acquire-release atomic count, reset by that program for
the next replay). S = 2, 4, 7 (7 x 512 = 3,584: no masked lanes). Us per token by CUDA events over 64
replays, each variant twice, alternated; the greedy tokens against the engine as it is (the split sums in
another order: a differing token is rounding, the check bounds the error).
Result: NVIDIA H200, 2026-12-03 (lab/results/splitk_pdl_probe_nvidia-h200_2026-12-03.json; check 1.5e-7 on the
GPU; in the SASS every split's 4 weight loads a thread sit before `ACQBULK`, x's after), us per token at
128 / 4,096 cached tokens, two runs each: as it is 625.7, 622.4 / 655.0, 655.9; down in 2 + reduce kernel
633.3, 642.5 / 674.2, 672.1; in 4 + reduce 644.4, 637.0 / 686.0, 684.5; in 7 + reduce 666.2, 653.4 / 692.9,
653.2; in 4, last program sums 676.9, 668.5 / 699.1, 699.2; in 7, last program sums 676.5, 667.6 / 696.8,
697.1; down in 7 + o_proj in 4, last program sums 684.7, 672.3 / 707.8, 703.8. Every split is slower but in
one run (7 + reduce at 4,096: 2.8 us faster in its second run, 37.9 slower in its first), against the same
run as it is: with the reduce kernel (24 more kernels) by 8-20 us a token in 2 pieces and 15-41 in 4 or 7;
with the last program summing by 41-51 (its fence, atomic and serial sum at the end of every call), 48-59
with o_proj split too. The tokens differ from the engine's (the sums in another
order), as the check's error bound allows.
Verdict: not adopted: solutions/layer_fusion.py keeps one program per 4 whole rows. Under PDL a whole-row
program already issues all its weight loads before the wait, so the second wave of 256 programs costs no
exposed latency that more, shorter programs would hide; what a split adds (a launch, or an atomic and a
serial tail) is not paid back. The anchor splits a K of 8,192 (Llama-3.2-1B's down), twice 3,584.
"""
import torch
import triton
import triton.language as tl

from lab import common
from tritonllm_course import triton_helpers as helpers, validate
from tritonllm_course.runtime import pdl_args, runtime
from tritonllm_course.triton_helpers import pdl_enter, pdl_launch_dependents, pdl_wait

CONTEXTS = (128, 4096)
REPEATS = 2
ROWS = helpers.PDL_ROWS
# variant: {projection: (pieces, who sums them)}; "reduce": reduce_residual_kernel, "last": the last program
VARIANTS = {"as is": {},
            "down in 2 + reduce kernel": {"down": (2, "reduce")},
            "down in 4 + reduce kernel": {"down": (4, "reduce")},
            "down in 7 + reduce kernel": {"down": (7, "reduce")},
            "down in 4, last program sums": {"down": (4, "last")},
            "down in 7, last program sums": {"down": (7, "last")},
            "down in 7 + o_proj in 4, last program sums": {"down": (7, "last"), "o_proj": (4, "last")}}


@triton.jit
def splitk_piece_kernel(x_ptr, w_ptr, res_ptr, y_ptr, part_ptr, count_ptr, N, K, K_PER,
                        SPLIT: tl.constexpr, LAST_SUMS: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr, PDL: tl.constexpr = False):
    """Program (row block b, piece s): part[s, rows] = W[rows, s*K_PER : (s+1)*K_PER] @ x[...] in fp32, the
    weight piece loaded before the PDL wait. LAST_SUMS: the block's last program to finish adds the SPLIT
    parts in order s = 0, 1, ... and res into y (y may be res) and resets the block's count."""
    if PDL:
        pdl_launch_dependents()
    b, s = tl.program_id(0), tl.program_id(1)
    rows = b * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = rows < N
    k = s * K_PER + tl.arange(0, BLOCK_K)
    k_ok = (k < K) & (tl.arange(0, BLOCK_K) < K_PER)
    w = tl.load(w_ptr + rows.to(tl.int64)[:, None] * K + k[None, :], mask=ok[:, None] & k_ok[None, :], other=0.0,
                eviction_policy="evict_first")                                        # [BLOCK_N, BLOCK_K]
    if PDL:
        pdl_wait()
    x = tl.load(x_ptr + k, mask=k_ok, other=0.0).to(tl.float32)                          # [BLOCK_K]
    tl.store(part_ptr + s * N + rows, tl.sum(w.to(tl.float32) * x[None, :], axis=1), mask=ok)
    if LAST_SUMS:
        tl.debug_barrier()                  # every thread's part stored before the count moves
        arrived = tl.atomic_add(count_ptr + b, 1, sem="acq_rel")       # the last arrival sees every part
        if arrived == SPLIT - 1:
            total = tl.load(res_ptr + rows, mask=ok, other=0.0).to(tl.float32)
            for j in tl.static_range(SPLIT):                           # a fixed order: the same sum every run
                total += tl.load(part_ptr + j * N + rows, mask=ok, other=0.0, cache_modifier=".cg")
            tl.store(y_ptr + rows, total.to(y_ptr.dtype.element_ty), mask=ok)
            tl.atomic_xchg(count_ptr + b, 0)                           # ready for the next replay


@triton.jit
def reduce_residual_kernel(part_ptr, res_ptr, y_ptr, N, SPLIT: tl.constexpr, BLOCK: tl.constexpr,
                           PDL: tl.constexpr = False):
    """y = res + part[0] + part[1] + ... (in that order, fp32), y may be res: the anchor's reduce kernel."""
    pdl_enter(PDL)                          # every input is the previous kernel's (or older): nothing ahead
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < N
    total = tl.load(res_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    for j in tl.static_range(SPLIT):
        total += tl.load(part_ptr + j * N + offs, mask=ok, other=0.0)
    tl.store(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=ok)


class SplitK:
    """`residual + x @ weight.T` for one token in `split` pieces of K; its workspace and counts kept (a
    captured graph holds their addresses)."""

    def __init__(self, split: int, last_sums: bool):
        self.split, self.last_sums = split, last_sums
        self.buffers: dict = {}

    def __call__(self, x, weight, residual, out):
        K = validate.projection(x, weight, "weight")
        N = weight.shape[0]
        if x.numel() != K:
            raise ValueError(f"splitk_residual runs one token; x is {tuple(x.shape)}")
        key = (N, K, x.device)
        if key not in self.buffers:
            self.buffers[key] = (torch.empty(self.split, N, dtype=torch.float32, device=x.device),
                                 torch.zeros(triton.cdiv(N, ROWS), dtype=torch.int32, device=x.device))
        part, count = self.buffers[key]
        k_per = triton.cdiv(K, self.split)
        tile = helpers.pdl_gemv_config(k_per) if not runtime().interpreted else None
        block_k, warps = (tile["BLOCK_K"], tile["num_warps"]) if tile else (triton.next_power_of_2(k_per), 4)
        pdl = pdl_args()
        splitk_piece_kernel[(triton.cdiv(N, ROWS), self.split)](
            x, weight, residual, out, part, count, N, K, k_per, SPLIT=self.split, LAST_SUMS=self.last_sums,
            BLOCK_N=ROWS, BLOCK_K=block_k, num_warps=warps, **pdl)
        if not self.last_sums:
            reduce_residual_kernel[(triton.cdiv(N, 256),)](part, residual, out, N, SPLIT=self.split, BLOCK=256,
                                                           num_warps=2, **pdl)
        return out


def swap_in(engine, variant: dict) -> None:
    """The variant's projections into the engine's decode ops (the other projections' calls unchanged)."""
    for name, (split, who) in variant.items():
        setattr(engine.ops.decode, name, SplitK(split, who == "last"))


def engine_us(variant: dict, context: int, tokens: int = 64) -> dict:
    return common.fast_decode_us(context, tokens, setup=(lambda engine: swap_in(engine, variant)) if variant else None)


def check() -> float:
    """Both ways of summing, 1-7 pieces, odd shapes, in place (y = res) and three calls on one workspace
    (the counts reset): the largest relative error against fp64, plus 1 if a count is left non-zero or two
    calls differ; and the tiny engine with both ways of summing against its tokens as it is (the fraction differing)."""
    from tritonllm_course.config import TINY
    from tritonllm_course.engine import Engine
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for N, K, split in ((37, 70, 3), (9, 33, 1), (64, 224, 7), (5, 128, 4)):
        x = torch.randn(1, K, generator=gen).to(device)
        w = torch.randn(N, K, generator=gen).to(device)
        res = torch.randn(1, N, generator=gen).to(device)
        want = res.double() + x.double() @ w.double().T
        for last in (False, True):
            op, outs = SplitK(split, last), []
            for _ in range(3):
                y = res.clone()
                outs.append(op(x, w, y, y))
            _, count = op.buffers[(N, K, x.device)]
            worst = max(worst, common.rel_err(outs[0].cpu(), want.cpu()), float(count.any()),
                        float(not all(torch.equal(outs[0], o) for o in outs[1:])))
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    runs = []
    for variant in ({}, {"down": (2, "last"), "o_proj": (3, "reduce")}):     # few programs: the interpreter is slow
        engine = Engine.random(TINY, dtype=dtype, device=device, seed=0, max_seq_len=40, level="fast")
        swap_in(engine, variant)
        runs.append(engine.generate(prompt, 6))
    differing = sum(sum(a != b for a, b in zip(runs[0], r)) for r in runs) / (len(runs[0]) * len(runs))
    return worst + differing


def loads_before_wait() -> dict:
    """The piece kernel at the down projection's shapes compiled for sm_90 (`tritonllm_course.lowering`, no
    GPU needed): per split, the global loads of the SASS before and after the wait `ACQBULK`, and the atomic."""
    from tritonllm_course import lowering
    sig = {"x_ptr": "*bf16", "w_ptr": "*bf16", "res_ptr": "*bf16", "y_ptr": "*bf16", "part_ptr": "*fp32",
           "count_ptr": "*i32", "N": 1024, "K": 3584}
    found = {}
    for split in (2, 4, 7):
        tile = helpers.pdl_gemv_config(triton.cdiv(3584, split))
        constexprs = {"SPLIT": split, "LAST_SUMS": True, "BLOCK_N": ROWS, "BLOCK_K": tile["BLOCK_K"], "PDL": True}
        low = lowering.lower(splitk_piece_kernel, {**sig, "K_PER": triton.cdiv(3584, split)}, constexprs,
                             num_warps=tile["num_warps"])
        sass = low.lines("sass", r"LDG|ACQBULK|ATOMG")
        wait = next(i for i, ln in enumerate(sass) if "ACQBULK" in ln)
        found[split] = {"loads_before_wait": sum("LDG" in ln for ln in sass[:wait]),
                        "loads_after_wait": sum("LDG" in ln for ln in sass[wait:]),
                        "atomics": sum("ATOMG" in ln for ln in sass), "registers": low.resources.get("REG")}
    return found


def main(out):
    common.setup()
    res = common.header(check=check(), sass=loads_before_wait(), engine={})
    path = common.result_path(out, "splitk_pdl_probe")
    res["tokens_equal_as_is"] = common.engine_variants(res, path, VARIANTS, engine_us, CONTEXTS, REPEATS, "as is")
    print("tokens equal:", res["tokens_equal_as_is"], flush=True)
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
