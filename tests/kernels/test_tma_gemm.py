"""The prompt GEMM through tensor descriptors (tritonllm_course/tma_gemm.py): its three epilogues at odd shapes
(the TMA's zero fill past every edge), the residual in place, its config, when it is taken and when not, and on
an sm_90 GPU the three callers at the real shapes of long prompts."""
import json
from pathlib import Path

import pytest
import torch

from tritonllm_course import kernels, tma_gemm, triton_helpers
from tritonllm_course.reference import quant as Q
from tritonllm_course.runtime import runtime

from helpers import randn, rel

ROOT = Path(__file__).resolve().parents[2]

RT = runtime()
LINEAR = kernels.load("linear", "solutions").module
NORM_FUSION = kernels.load("norm_fusion", "solutions").module
LAYER_FUSION = kernels.load("layer_fusion", "solutions").module
TMA_GPU = str(RT.device).startswith("cuda") and torch.cuda.get_device_capability()[0] * 10 >= tma_gemm.TMA_CAPABILITY
needs_descriptors = pytest.mark.skipif(tma_gemm.TensorDescriptor is None, reason="this triton has no "
                                       "host tensor descriptors")


def _tiles(monkeypatch, swap: bool) -> None:
    """`tma_gemm.config` with SWAP_AB = `swap`; under the interpreter small tiles, so that every shape has partial
    tiles on every side."""
    if TMA_GPU:
        pick = tma_gemm.config
        monkeypatch.setattr(tma_gemm, "config", lambda *a: {**pick(*a), "SWAP_AB": swap})
    else:
        monkeypatch.setattr(tma_gemm, "config", lambda M, N, gated, dtype, device, *_: {
            "BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "num_warps": 4, "num_stages": 1, "SWAP_AB": swap})


def _reference(x, w, up=None, res=None):
    y = x.double() @ w.double().T
    if up is not None:
        y = torch.nn.functional.silu(y) * (x.double() @ up.double().T)
    return y if res is None else y + res.double()


@needs_descriptors
@pytest.mark.parametrize("M,N,K", [(37, 24, 48), (5, 48, 16), (130, 70, 144)])
@pytest.mark.parametrize("epilogue", ["plain", "gated", "residual"])
@pytest.mark.parametrize("swap", [False, True], ids=["x W^T", "swapped"])
def test_every_epilogue_at_odd_shapes(M, N, K, epilogue, swap, monkeypatch):
    """M, N and K not multiples of the tiles (the TMA fills past the edges with zeros; a load past K that
    were not zero would add garbage), the output poisoned with NaN (a tile never stored shows), in both
    operand orders. K a multiple of 16: triton 3.5's interpreter asks that of a row stride in elements."""
    _tiles(monkeypatch, swap)
    dtype = torch.bfloat16 if TMA_GPU else torch.float32
    x, w = randn(M, K, dtype=dtype), randn(N, K, dtype=dtype, scale=K ** -0.5, seed=1)
    up = randn(N, K, dtype=dtype, scale=K ** -0.5, seed=2) if epilogue == "gated" else None
    res = randn(M, N, dtype=dtype, seed=3) if epilogue == "residual" else None
    y = torch.full((M, N), float("nan"), dtype=dtype, device=RT.device)
    tma_gemm.launch(x, w, y, up=up, residual=res)
    assert rel(y, _reference(x, w, up, res)) < (1e-2 if TMA_GPU else 1e-6)


@needs_descriptors
@pytest.mark.parametrize("fmt", ["int8", "fp8"])
@pytest.mark.parametrize("epilogue", ["plain", "gated", "residual"])
@pytest.mark.parametrize("swap", [False, True], ids=["x W^T", "swapped"])
def test_eight_bit_weights_with_a_scale_a_row(fmt, epilogue, swap, monkeypatch):
    """Chapter 31_weight_quant's formats: the 8-bit tile widened in registers, each row of the weight times
    its scale after the K loop (a column of x W^T, a row of W x^T); gated, the gate's and up's own scales before
    the SwiGLU (the two are quantized apart, so a scale of the wrong operand shows); odd shapes, the output
    poisoned."""
    if fmt == "fp8" and RT.on_gpu and not triton_helpers.gpu_of(torch.device(RT.device)).fp8:
        pytest.skip("fp8 e4m3 needs an sm_89+ GPU")
    _tiles(monkeypatch, swap)
    M, N, K = (300, 200, 272) if TMA_GPU else (37, 24, 48)
    dtype = torch.bfloat16 if TMA_GPU else torch.float32
    x = randn(M, K, dtype=dtype)
    q, s, _ = Q.quantize(randn(N, K, scale=K ** -0.5, seed=1), fmt)
    qu, su, _ = Q.quantize(3 * randn(N, K, scale=K ** -0.5, seed=2), fmt) if epilogue == "gated" else (None,) * 3
    res = randn(M, N, dtype=dtype, seed=3) if epilogue == "residual" else None
    y = torch.full((M, N), float("nan"), dtype=dtype, device=RT.device)
    tma_gemm.launch(x, q, y, up=qu, residual=res, scale=s, up_scale=su)
    up = None if qu is None else Q.dequantize(qu, su, dtype=torch.float64)
    assert rel(y, _reference(x, Q.dequantize(q, s, dtype=torch.float64), up, res)) < (1e-2 if TMA_GPU else 1e-6)


@needs_descriptors
def test_the_residual_is_updated_in_place(monkeypatch):
    monkeypatch.setattr(tma_gemm, "config", lambda M, N, gated, dtype, device, *_: {
        "BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "num_warps": 4, "num_stages": 1})
    x, w, r = randn(19, 48), randn(32, 48, scale=0.1, seed=1), randn(19, 32, seed=2)
    want = _reference(x, w, res=r)
    tma_gemm.launch(x, w, r, residual=r)
    assert rel(r, want) < 1e-6


def test_taken_only_where_the_tma_is():
    """sm_90 GPUs from MIN_M tokens in fp16/bf16 with aligned operands; never below sm_90, under the
    interpreter (unless asked), for short prompts, fp32, a misaligned base or row stride, strided rows."""
    meta = {"device": "meta", "dtype": torch.bfloat16}
    x, w = torch.empty(tma_gemm.MIN_M, 1024, **meta), torch.empty(2048, 1024, **meta)
    if tma_gemm.TensorDescriptor is None:
        assert not tma_gemm.usable(x, w)
        return
    with triton_helpers.compiling_for(triton_helpers.GPUS[90]):
        assert tma_gemm.usable(x, w)
        assert not tma_gemm.usable(x[:-1], w)                                  # a short prompt
        assert not tma_gemm.usable(x.float(), w.float())                       # fp32
        assert not tma_gemm.usable(torch.empty(300, 1028, **meta)[:, :1024], w)   # rows 2,056 bytes apart
        assert not tma_gemm.usable(torch.empty(1024, 300, **meta).T, w)       # columns contiguous, not rows
        w8 = torch.empty(2048, 1024, device="meta", dtype=torch.int8)
        assert tma_gemm.usable(x, w8) and tma_gemm.usable(x, w8, w8.to(torch.float8_e4m3fn))   # 8-bit, scaled
        assert not tma_gemm.usable(x, w, w8) and not tma_gemm.usable(x, w.float())   # mixed, or another dtype
    for capability in (75, 80, 86, 89):
        with triton_helpers.compiling_for(triton_helpers.GPUS[capability]):
            assert not tma_gemm.usable(x, w), capability
    cpu, w_cpu = torch.empty(tma_gemm.MIN_M, 1024, dtype=torch.bfloat16), torch.empty(2048, 1024, dtype=torch.bfloat16)
    assert not tma_gemm.usable(cpu, w_cpu)
    assert tma_gemm.usable(cpu, w_cpu, interpreted_too=True)
    odd = torch.empty(tma_gemm.MIN_M * 1024 + 1, dtype=torch.bfloat16)[1:].view(tma_gemm.MIN_M, 1024)
    assert not tma_gemm.usable(odd, w_cpu, interpreted_too=True)                  # base 2 bytes off


SWEEPS = ("prompt_gemm_sweep_nvidia-h200_2026-12-05.json", "prompt_gemm_sweep_nvidia-h200_2026-12-05_tma.json")


def test_config_picks_the_sweeps_fastest_tiles_on_an_h200():
    """At every shape and length the H200's sweeps timed (lab/results/, M = 128 to 4,096), the config's tiles were
    among those measured and within 3% of the fastest TMA tiles; the stages fit an H200's shared memory."""
    h200 = torch.device("cuda")
    cases = [c for name in SWEEPS for c in json.loads((ROOT / "lab" / "results" / name).read_text())["cases"]]
    assert {c["M"] for c in cases} == {128, 512, 1024, 2048, 4096}
    with triton_helpers.compiling_for(triton_helpers.GPUS[90]):
        for c in cases:
            cfg = tma_gemm.config(c["M"], c["N"], c["kind"] == "gated", torch.bfloat16, h200)
            timed = [r["us"] for r in c["best"] if r["form"] == "tma" and all(r[k] == v for k, v in cfg.items())]
            where = f"M = {c['M']}, {c['shape']}: {cfg}"
            assert timed, f"{where} was not among the fastest configs measured"
            assert timed[0] <= 1.03 * c["best_tma"]["us"], f"{where}: {timed[0]:.1f} us, best {c['best_tma']}"
        for M, N, gated in [(256, 1024, False), (4096, 8224, False), (512, 3584, True)]:
            cfg = tma_gemm.config(M, N, gated, torch.bfloat16, h200)
            stage = (cfg["BLOCK_M"] + (2 if gated else 1) * cfg["BLOCK_N"]) * cfg["BLOCK_K"] * 2
            assert cfg["num_stages"] * stage <= triton_helpers.GPUS[90].shared_bytes


@pytest.mark.skipif(not TMA_GPU, reason="the TMA path of the callers runs on sm_90 and newer GPUs")
@pytest.mark.parametrize("M", [tma_gemm.MIN_M, 1000, 4096])
def test_the_callers_take_it_at_real_shapes(M):
    """gemm (the in-projections), the gate/up + SwiGLU and the GEMM + residual at Qwen3.5-0.8B's shapes from
    MIN_M tokens, against fp64; M = 1,000 ends in a partial row tile. The pointer kernels' answer beside it
    (MIN_M raised past M) agrees to bf16's rounding."""
    bf = torch.bfloat16
    x = randn(M, 1024, dtype=bf)
    for N in (5120, 8224):
        w = randn(N, 1024, dtype=bf, scale=1024 ** -0.5, seed=1)
        assert tma_gemm.usable(x, w)
        assert rel(LINEAR.gemm(x, w), _reference(x, w)) < 1e-2
    gate_up = randn(2 * 3584, 1024, dtype=bf, scale=1024 ** -0.5, seed=2)
    got = NORM_FUSION.gate_up_swiglu_merged(x, gate_up)
    assert rel(got, _reference(x, gate_up[:3584], gate_up[3584:])) < 1e-2
    for K in (2048, 3584):
        h, w, r = randn(M, K, dtype=bf, seed=4), randn(1024, K, dtype=bf, scale=K ** -0.5, seed=5), randn(M, 1024,
                                                                                                              dtype=bf)
        want = _reference(h, w, res=r)
        assert rel(LAYER_FUSION.linear_residual(h, w, r, out=r), want) < 1e-2


@pytest.mark.skipif(not TMA_GPU, reason="the TMA path of quant_gemm runs on sm_90 and newer GPUs")
@pytest.mark.parametrize("fmt", ["int8", "fp8"])
def test_quant_gemm_takes_it_with_a_scale_a_row(fmt, monkeypatch):
    """quant_gemm (chapter 31_weight_quant) at M = 1,000 tokens with one scale a row runs the TMA form: against
    fp64 of the dequantized weight, and level with its pointer kernel's answer (MIN_M raised past M); per
    group it keeps the pointer kernel (the scales change along K)."""
    quant = kernels.load("quant", "solutions").module
    x = randn(1000, 1024, dtype=torch.bfloat16)
    q, s, _ = Q.quantize(randn(5120, 1024, scale=1024 ** -0.5, seed=1), fmt)
    assert tma_gemm.usable(x, q)
    want = _reference(x, Q.dequantize(q, s, dtype=torch.float64))
    got = quant.quant_gemm(x, q, s)
    assert rel(got, want) < 1e-2
    if fmt == "int8":   # per group: the pointer kernel, never the TMA form
        qg, sg, group = Q.quantize(randn(5120, 1024, scale=1024 ** -0.5, seed=1), "int8_group", 128)
        with monkeypatch.context() as m:
            m.setattr(tma_gemm, "launch", lambda *a, **k: pytest.fail("per-group weights took the TMA form"))
            assert rel(quant.quant_gemm(x, qg, sg, group), _reference(x, Q.dequantize(qg, sg, group,
                                                                                      dtype=torch.float64))) < 1e-2
    monkeypatch.setattr(tma_gemm, "MIN_M", 1 << 30)
    assert rel(quant.quant_gemm(x, q, s), got) < 1e-2


QUANT_PROBE = ROOT / "lab" / "results" / "quant_gemm_probe_nvidia-h200_2026-12-05.json"
PROMPT_COUNTS = {"DeltaNet in_proj": 18, "attention in_proj": 6, "gate/up (stacked)": 24, "down + residual": 24,
                 "o_proj / out_proj + residual": 24}      # each GEMM's count in a prompt of Qwen3.5-0.8B


def test_fp8_config_takes_the_probes_fastest_swapped_tiles():
    """fp8 weights, ungated: W x^T at tiles among those lab/quant_gemm_probe.py timed on the H200, within 5% of
    the fastest at each of the five prompt GEMMs from 1,024 tokens; over a prompt's GEMMs (each times its count
    in the model) faster than x W^T at 1,024 and 4,096 tokens and within 1% of it at 512. int8 and bf16 keep
    x W^T."""
    h200 = torch.device("cuda")
    cases = [c for c in json.loads(QUANT_PROBE.read_text())["cases"] if c["format"] == "fp8"]
    with triton_helpers.compiling_for(triton_helpers.GPUS[90]):
        for M in sorted({c["M"] for c in cases}):
            picked = plain = 0.0
            for shape, count in PROMPT_COUNTS.items():
                here = [c for c in cases if c["M"] == M and c["shape"] == shape]
                cfg = tma_gemm.config(M, here[0]["N"], False, torch.bfloat16, h200, tma_gemm.FP8)
                assert cfg["SWAP_AB"], cfg
                swapped = [c["us"] for c in here if c["form"] == "TMA 8-bit W x^T"]
                timed = [c["us"] for c in here if c["form"] == "TMA 8-bit W x^T" and c["cfg"] == cfg]
                assert timed, f"M = {M}, {shape}: {cfg} was not measured"
                if M >= 1024:
                    assert min(timed) <= 1.05 * min(swapped), f"M = {M}, {shape}: {min(timed):.1f} us"
                picked += count * min(timed)
                plain += count * next(c["us"] for c in here if c["form"] == "TMA 8-bit x W^T")
            assert picked < (plain if M >= 1024 else 1.01 * plain), f"M = {M}: {picked:.0f} against {plain:.0f} us"
        for weight_dtype in (torch.int8, torch.bfloat16, None):
            assert not tma_gemm.config(4096, 5120, False, torch.bfloat16, h200, weight_dtype).get("SWAP_AB")
        assert not tma_gemm.config(4096, 3584, True, torch.bfloat16, h200, tma_gemm.FP8).get("SWAP_AB")
