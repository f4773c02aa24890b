"""Under PDL, do the short prompt's GEMMs gain by asking L2 for their weights before they wait?

    python -m lab.prompt_pdl_prologue_probe [OUTDIR]   (on an sm_90 GPU; writes
                                                       OUTDIR/prompt_pdl_prologue_probe_<gpu>_<date>.json;
                                                       PROMPTS="128 200" the prompt lengths, AB_ROUNDS the rounds)

Question: below `tma_gemm.MIN_M` tokens the prompt's projections run the pointer GEMMs: chapter 05_projections's
`gemm_kernel` (the in-projections), chapter 21_norm_fusion's `fused_gemm_kernel` (gate/up + SwiGLU) and chapter
22_layer_fusion's `gemm_residual_kernel` (o_proj, out_proj, down). Each opens with `pdl_enter`: it lets the next
kernel launch, then waits for the previous one before it loads anything. At 128 tokens they read their weights at
about a third of the bandwidth, latency-bound (`lab/prompt_gemm_ncu_probe.py`), and the fast level's first token
is as quick with PDL as without it (1.84 against 1.85 ms on an H100: results/engine_nvidia-h100-80gb-hbm3_2026-12-06_
targets/bench.md). The decode GEMVs gained from PDL once every weight load came before the wait
(`lab/pdl_chain_probe.py`); a GEMM's tile of weights does not fit in registers, but its rows can be asked of L2
(`cp.async.bulk.prefetch.L2`, fire and forget: no register held, nothing waited on) in the stretch between the
launch and the wait, while the previous kernel finishes. The weights are the step's constants: nothing the previous
kernel writes. Does the first token come sooner?
Method: the fast level of Qwen3.5-0.8B (random weights of the real shapes, bf16, its prompt graph, PDL), the first
token of a prompt of each length in PROMPTS (default 128; below `MIN_M`, 256, every prompt GEMM is a pointer
GEMM), as `common.ttft_ms` times it; three engines alternated AB_ROUNDS times (default 3): as it is; "weights to L2
first", where the three kernels are edited (`common.edited_kernel`) so that, with PDL, each program asks L2 for
its BLOCK_N weight rows (gate and up both, for the gated GEMM: one bulk request a row; the rows are a vector
spread over the program's threads, so a row may be asked for more than once) between `pdl_launch_dependents`
and `pdl_wait`; and the engine with `pdl=False`. The edit changes no arithmetic: the first
tokens of the three are compared. The check: the edited kernels against fp64 at odd shapes, NaN-poisoned outputs
(under the interpreter, where PDL is off and the request is never made; on the GPU with PDL, the request made);
under the interpreter also the tiny engine's tokens with the edited kernels swapped in, its prompt launching all
three.
Compiled for sm_90 without a GPU (`tritonllm_course.lowering`'s compile, triton 3.7.1, bf16, PDL on): each edited
kernel's SASS asks with `UBLKPF.L2` in a loop over its rows' addresses (`BRA.U.ANY`), all before `ACQBULK` (the
wait); registers a thread 124 -> 128 for `gemm_kernel` at 128 x 64 x 64 tiles, the same for the other two, shared
memory the same for all three.
Result: NVIDIA H100 80GB HBM3, 2026-12-07, at 0a45394
(lab/results/prompt_pdl_prologue_probe_nvidia-h100-80gb-hbm3_2026-12-07.json; triton 3.6.0, torch 2.11.0), the
first token of a 128-token prompt, three rounds: as it is 1.79-1.81 ms, weights to L2 first 1.94-1.97 ms,
`pdl=False` 1.79-1.81 ms; the same first token in all three.
The requests made the first token slower by about a twelfth. Why was not profiled; what the kernels do says
where to look: every program sharing a column tile asks for the same BLOCK_N x K slice in BLOCK_N requests,
and the previous kernel's tail is short next to the slice's bytes, so the requests queue ahead of the loads
that would have fetched the same lines.
Verdict: not adopted: the prompt GEMMs of solutions/linear.py, solutions/norm_fusion.py and
solutions/layer_fusion.py wait before any load, as they did.
"""
import contextlib
import functools
import os

import torch
import triton
import triton.language as tl

from lab import common
from lab.l2_prefetch_probe import prefetch_l2
from tritonllm_course.triton_helpers import pdl_launch_dependents, pdl_wait

# (module, kernel, its weight arguments): the pointer GEMMs a prompt below tma_gemm.MIN_M tokens runs
KERNELS = (("linear", "gemm_kernel", ("w_ptr",)),
           ("norm_fusion", "fused_gemm_kernel", ("w_ptr", "up_w_ptr")),
           ("layer_fusion", "gemm_residual_kernel", ("w_ptr",)))


@triton.jit
def weight_rows_to_l2(w_ptr, rows, N, K):
    """Ask L2 for the rows `rows` of the row-major weight W [N, K]: one bulk request a row, none past N. Each
    row's bytes must be a multiple of 16 (`weights_fit`). Returns zeros (the requests are fire and forget)."""
    elt = w_ptr.dtype.element_ty.primitive_bitwidth // 8
    starts = (w_ptr + rows.to(tl.int64) * K).to(tl.int64)                               # [BLOCK_N] addresses
    nbytes = tl.where(rows < N, K * elt, 0).to(tl.int64)                                # [BLOCK_N]
    return prefetch_l2(starts, nbytes)


def prologue(weights) -> str:
    """The lines that replace a kernel's `pdl_enter(PDL)`: with PDL, launch the next kernel, ask L2 for this
    program's weight rows, then wait. The requests' zeros are stored under a mask that never holds, so that
    nothing drops them."""
    rows = "tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)"
    asks = f"weight_rows_to_l2(w_ptr, {rows}, N, K)"
    if "up_w_ptr" in weights:   # the gated GEMM's up weight, where the launch has one
        asks += f"\n        if GATED:\n            sent += weight_rows_to_l2(up_w_ptr, {rows}, N, K)"
    return ("if PDL:\n"
            "        pdl_launch_dependents()\n"
            f"        sent = {asks}\n"
            f"        tl.store(y_ptr + ({rows}) * 0, sent.to(y_ptr.dtype.element_ty), mask=sent != 0)\n"
            "        pdl_wait()")


@functools.lru_cache(maxsize=None)
def _edited():
    """{(module, kernel name): the edited kernel} for the three GEMMs."""
    from tritonllm_course import kernels
    out = {}
    for family, name, weights in KERNELS:
        module = kernels.load(family, "solutions").module
        out[(family, name)] = common.edited_kernel(getattr(module, name), [("pdl_enter(PDL)", prologue(weights))],
                                                   weight_rows_to_l2=weight_rows_to_l2,
                                                   pdl_launch_dependents=pdl_launch_dependents, pdl_wait=pdl_wait)
    return out


@contextlib.contextmanager
def weights_to_l2_first():
    """The solutions' three prompt GEMMs replaced by their edited copies inside the block (their wrappers look
    the kernel up at call time)."""
    from tritonllm_course import kernels
    with contextlib.ExitStack() as stack:
        for (family, name), kernel in _edited().items():
            stack.enter_context(common.replaced(kernels.load(family, "solutions").module, name, kernel))
        yield


def weights_fit(engine) -> bool:
    """Every projection's rows a multiple of 16 bytes (the bulk request's unit)."""
    return all(w.shape[-1] * w.element_size() % 16 == 0 for layer in engine.weights.layers
               for w in (layer.mixer_in.weight, layer.mixer_out, layer.gate_up.weight, layer.down))


def check(device="cpu") -> float:
    """The edited kernels against fp64 at odd shapes (M, N, K not multiples of the tiles), outputs poisoned with
    NaN; with PDL where the device has it (the requests made), off under the interpreter. The largest relative
    error."""
    from tritonllm_course.runtime import pdl_args
    edited = _edited()
    gen = torch.Generator().manual_seed(0)
    pdl = pdl_args() if device != "cpu" else {}
    dtype = torch.float32                       # the dots in ieee fp32: the error is the kernels', not bf16's
    M, N, K = 37, 50, 72
    x, w, up, res = (torch.randn(*s, generator=gen).to(device, dtype) for s in ((M, K), (N, K), (N, K), (M, N)))
    xd, wd, upd = x.double(), w.double(), up.double()
    blocks = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32}
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
    worst = 0.0

    def poisoned():
        return torch.full((M, N), float("nan"), device=device, dtype=dtype)

    y = poisoned()
    edited[("linear", "gemm_kernel")][grid](x, w, y, M, N, K, **blocks, **pdl)
    worst = max(worst, common.rel_err(y, xd @ wd.T))
    y = poisoned()
    edited[("layer_fusion", "gemm_residual_kernel")][grid](x, w, res, y, M, N, K, **blocks, **pdl)
    worst = max(worst, common.rel_err(y, res.double() + xd @ wd.T))
    for gated in (False, True):
        y = poisoned()
        edited[("norm_fusion", "fused_gemm_kernel")][grid](x, x, w, up, y, M, N, K, 1e-6, HAS_NORM=False,
                                                           GATED=gated, **blocks, **pdl)
        g = xd @ wd.T
        want = g * torch.sigmoid(g) * (xd @ upd.T) if gated else g
        worst = max(worst, common.rel_err(y, want))
    if device == "cpu":
        assert tiny_engine_runs_them(), "the tiny engine's prompt did not run the edited kernels, or its tokens moved"
    return worst


def tiny_engine_runs_them() -> bool:
    """The tiny engine's fast level (fp32, no graph) generates the same tokens with the edited kernels swapped in
    as without, and its prompt launches each of the three."""
    from tritonllm_course.config import TINY
    from tritonllm_course.engine import Engine
    def tokens():
        engine = Engine.random(TINY, dtype=torch.float32, device="cpu", seed=0, max_seq_len=32, level="fast",
                               cuda_graph=False)
        return engine.generate([5, 17, 42, 7, 9, 11], 3, eos_token_id=None)

    launched = []
    want = tokens()
    with weights_to_l2_first(), contextlib.ExitStack() as stack:
        for (_, name), kernel in _edited().items():      # each edited kernel's launches counted
            def counted(*args, _run=kernel.run, _name=name, **kwargs):
                launched.append(_name)
                return _run(*args, **kwargs)
            stack.enter_context(common.replaced(kernel, "run", counted))
        got = tokens()
    return got == want and {name for _, name, _ in KERNELS} <= set(launched)


def main(out):
    common.setup()
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    from tritonllm_course.tma_gemm import MIN_M
    prompts = [int(p) for p in os.environ.get("PROMPTS", "128").split()]
    assert all(p < MIN_M for p in prompts), f"PROMPTS: below {MIN_M} tokens the prompt GEMMs are pointer GEMMs"
    path = common.result_path(out, "prompt_pdl_prologue_probe")
    res = common.header(check=check("cuda"), min_m=MIN_M, prompts=prompts, ttft_ms={})
    common.save(path, res)
    variants = {"as is": ({}, contextlib.nullcontext), "weights to L2 first": ({}, weights_to_l2_first),
                "pdl=False": ({"pdl": False}, contextlib.nullcontext)}
    engines = {}
    for name, (kwargs, context) in variants.items():
        with context():
            engines[name] = Engine.random(QWEN35_0_8B, dtype=torch.bfloat16, device="cuda", seed=0,
                                          max_seq_len=max(prompts) + 8, level="fast", **kwargs)
        assert weights_fit(engines[name]), "a weight row is not a multiple of 16 bytes"
    for length in prompts:
        prompt = [(7 * i + 3) % QWEN35_0_8B.vocab_size for i in range(length)]
        runs = res["ttft_ms"][str(length)] = {name: [] for name in variants}
        for name, (_, context) in variants.items():
            with context():
                common.ttft_ms(engines[name], prompt)           # its prompt graph captured under its kernels
        for _ in range(int(os.environ.get("AB_ROUNDS", "3"))):
            for name, (_, context) in variants.items():
                with context():
                    runs[name].append(common.ttft_ms(engines[name], prompt))
        print(length, runs, flush=True)
        common.save(path, res)
    return res


if __name__ == "__main__":
    main(common.out_dir())
