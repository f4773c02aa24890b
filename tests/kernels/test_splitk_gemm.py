"""The short prompt's GEMM + residual split along K (tritonllm_course/splitk_gemm.py): its two kernels at odd
shapes, in place, the same bits every run; when `splits` takes it; `linear_residual` routing through it; on a GPU
the down projection of a 128-token prompt against fp64."""
import pytest
import torch

from tritonllm_course import kernels, splitk_gemm, triton_helpers
from tritonllm_course.runtime import runtime

from helpers import randn, rel

RT = runtime()
ON_GPU = str(RT.device).startswith("cuda")
LAYER_FUSION = kernels.load("layer_fusion", "solutions").module
DTYPE = torch.bfloat16 if ON_GPU else torch.float32
TOL = 1e-2 if ON_GPU else 1e-6


def _operands(M, N, K):
    """x [M, K], W [N, K] (scaled so the sums stay near 1), the residual stream [M, N]."""
    w = randn(N, K, dtype=DTYPE, scale=K ** -0.5, seed=1)
    return randn(M, K, dtype=DTYPE), w, randn(M, N, dtype=DTYPE, seed=2)


def _want(x, w, res):
    return res.double() + x.double() @ w.double().T


@pytest.mark.parametrize("M,N,K,split", [(5, 37, 100, 3), (17, 20, 64, 2), (70, 9, 33, 4), (3, 16, 15, 4)])
def test_both_stages_at_odd_shapes(M, N, K, split):
    """M, N, K not multiples of the tiles, pieces that end past K (and, at K = 15 in 4 pieces of a 16-wide step, a
    split that fills fewer pieces than asked: stage 2 must add only those), the output and the workspace
    poisoned with NaN (a tile or a piece never stored shows)."""
    x, w, res = _operands(M, N, K)
    splitk_gemm.workspace(RT.device, N).fill_(float("nan"))
    y = torch.full((M, N), float("nan"), dtype=DTYPE, device=RT.device)
    splitk_gemm.launch(x, w, res, y, split, {})
    assert rel(y, _want(x, w, res)) < TOL


def test_in_place_and_the_same_bits_every_run():
    """out = residual updates the stream in place; the pieces are added in one order: two runs, one result."""
    M, N, K = 66, 24, 80
    x, w, res = _operands(M, N, K)
    want = _want(x, w, res)
    first = splitk_gemm.launch(x, w, res.clone(), torch.empty_like(res), 4, {})
    stream = res.clone()
    splitk_gemm.launch(x, w, stream, stream, 4, {})
    assert torch.equal(first, stream) and rel(stream, want) < TOL


def test_splits_takes_the_down_projection_at_128_tokens_only(monkeypatch):
    """On an H200's 132 SMs: the down projection (1,024 x 3,584) at 65-128 tokens splits; o_proj / out_proj
    (K = 2 N), the in-projections (N > K), one token, 64 and 129 tokens, and a wide down projection whose unsplit
    grid already fills the SMs do not; under the interpreter only when asked."""
    monkeypatch.setattr(triton_helpers, "_TARGET", triton_helpers.GPUS[90])
    cuda = torch.device("cuda")
    assert splitk_gemm.splits(128, 1024, 3584, cuda) == splitk_gemm.splits(65, 1024, 3584, cuda) == splitk_gemm.SPLIT
    for M, N, K in ((128, 1024, 2048), (128, 8224, 1024), (1, 1024, 3584), (64, 1024, 3584), (129, 1024, 3584),
                    (128, 4096, 12288)):
        assert splitk_gemm.splits(M, N, K, cuda) == 1, (M, N, K)
    monkeypatch.setattr(triton_helpers, "_TARGET", None)
    cpu = torch.device("cpu")
    assert splitk_gemm.splits(128, 1024, 3584, cpu) == 1
    assert splitk_gemm.splits(128, 1024, 3584, cpu, interpreted_too=True) == splitk_gemm.SPLIT


def test_linear_residual_takes_it_where_splits_says(monkeypatch):
    """`linear_residual` runs the two stages where `splits` gives more than one piece, with its result."""
    calls = []
    monkeypatch.setattr(splitk_gemm, "splits", lambda M, N, K, device: 4)
    launch = splitk_gemm.launch
    monkeypatch.setattr(splitk_gemm, "launch", lambda *a: calls.append(a[4]) or launch(*a))
    M, N, K = 9, 12, 56
    x, w, res = _operands(M, N, K)
    y = LAYER_FUSION.linear_residual(x, w, res)
    assert calls == [4] and rel(y, _want(x, w, res)) < TOL


@pytest.mark.skipif(not ON_GPU, reason="the real shape on a GPU")
def test_the_down_projection_of_a_128_token_prompt():
    """The engine's call at the real shape (bf16, 128 x 3,584 by 3,584 -> 1,024), the stream in place, through the
    split where the GPU takes it, against fp64."""
    M, N, K = 128, 1024, 3584
    x, w, res = _operands(M, N, K)
    want = _want(x, w, res)
    LAYER_FUSION.linear_residual(x, w, res, out=res)
    assert rel(res, want) < TOL
