"""Argmax and sampling beyond the generic slot check: ties across blocks, NaN and signed zeros, the top-k /
top-p thresholds against the references, the seed, the noise's distribution, bad input; on a GPU the
sampler inside a CUDA graph and its distribution over many draws."""
import math

import pytest
import torch

from tritonllm_course import kernels
from tritonllm_course.reference import argmax as reference_argmax, top_k_top_p_filter
from tritonllm_course.reference.sampling import sample_with_noise, threshold_filter
from tritonllm_course.runtime import runtime
from helpers import randn

RT = runtime()
S = kernels.load("sampling", "solutions").module
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def tensor(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, device=RT.device)


def order_key(x):
    """The kernels' key in PyTorch: fp32 bits as an int32 with the order of the floats."""
    x = torch.where(x == 0, torch.zeros_like(x), x).float()
    bits = x.view(torch.int32)
    return torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF).long()


def kept_by_kernel(logits, temperature, top_k, top_p):
    """The tokens the sampler may draw: keys at or above the threshold its search finds."""
    rows = logits.shape[0]
    bounds = torch.empty(rows, 2, dtype=torch.int64, device=logits.device)
    bounds[:, 0] = INT32_MIN
    for k, p in ((top_k, 1.0), (0, top_p)):
        if (0 < k < logits.shape[-1]) or p < 1.0:
            bounds[:, 1] = INT32_MAX
            S.search_threshold(logits, bounds, 1.0 / temperature, top_k=k, top_p=p)
    return order_key(logits) >= bounds[:, :1]


# --- argmax -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("rows,vocab,num_blocks", [(1, 1, None), (2, 31, 4), (1, 4099, 1), (3, 2500, None),
                                                   (1, 3000, 64)])
def test_argmax_first_index_of_ties_across_blocks(rows, vocab, num_blocks):
    logits = randn(rows, vocab, dtype=torch.float16)
    top = logits.max(-1, keepdim=True).values
    for i in (vocab - 1, vocab // 2, vocab // 3):                     # copies of the max in later blocks
        logits[:, i:i + 1] = top
    assert torch.equal(S.argmax(logits, num_blocks=num_blocks), torch.argmax(logits, dim=-1))


def test_argmax_tie_inside_one_lane():
    """One block of several tiles: the two maxima 2048 apart fall in the same lane; the earlier must win."""
    logits = randn(1, 4099)
    logits[0, [5, 2053]] = logits.max() + 1
    assert S.argmax(logits, num_blocks=1).item() == 5


def test_argmax_signed_zeros_nan_and_infinities_as_torch():
    nan = float("nan")
    logits = tensor([[-0.0, 0.0, -1.0],                 # equal: the first
                     [-5.0, nan, nan],                  # NaN wins, first NaN
                     [float("inf"), nan, 1.0],          # NaN above +inf
                     [1.0, 2.0, 0.0],
                     [float("-inf"), float("-inf"), float("-inf")]])
    logits[3, 2] = -logits[1, 1]                        # a NaN with the sign bit set wins too
    assert S.argmax(logits).tolist() == torch.argmax(logits, dim=-1).tolist() == [0, 1, 1, 2, 0]


def test_argmax_keeps_the_leading_shape():
    logits = randn(2, 3, 50)
    assert torch.equal(S.argmax(logits), torch.argmax(logits, dim=-1))
    one = S.argmax(logits[0, 0])
    assert one.shape == () and one.item() == torch.argmax(logits[0, 0]).item()


def test_argmax_bad_input_is_named():
    with pytest.raises(TypeError, match="logits has dtype int64"):
        S.argmax(torch.arange(10, device=RT.device))
    with pytest.raises(ValueError, match="num_blocks must be in"):
        S.argmax(randn(1, 10), num_blocks=0)
    with pytest.raises(ValueError, match="vocab >= 1"):
        S.argmax(randn(3, 0))
    with pytest.raises(TypeError, match="out has dtype int32"):
        S.argmax(randn(2, 10), out=torch.empty(2, dtype=torch.int32, device=RT.device))
    with pytest.raises(ValueError, match="contiguous"):
        S.argmax(randn(10, 2).t())


# --- the top-k / top-p threshold --------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 5, 1.0), (0.7, 0, 0.9), (1.5, 60, 0.5),
                                                     (1.0, 1, 1.0), (2.0, 0, 0.999)])
def test_threshold_keeps_exactly_the_reference_set(dtype, temperature, top_k, top_p):
    logits = randn(2, 900, dtype=dtype, scale=3.0, seed=top_k)
    kept = kept_by_kernel(logits, temperature, top_k, top_p)
    ref = threshold_filter(logits.double() / temperature, top_k, top_p) > float("-inf")
    assert torch.equal(kept, ref), (kept.sum(-1), ref.sum(-1))
    if dtype == torch.float32:                           # no ties: the sorting reference agrees too
        official = top_k_top_p_filter(logits.double() / temperature, top_k, top_p) > float("-inf")
        assert torch.equal(kept, official)


def test_threshold_keeps_every_token_tied_at_the_boundary():
    """top_p = 0.4 over [3, 3, 0, ...]: the nucleus ends inside the tie (each 3 has p = 0.47); the threshold
    keeps both."""
    logits = tensor([[0.0, 3.0, 3.0, 0.0, -1.0, -2.0]])
    assert kept_by_kernel(logits, 1.0, 0, 0.4).tolist() == [[False, True, True, False, False, False]]
    assert (threshold_filter(logits, 0, 0.4) > float("-inf")).sum().item() == 2
    assert (top_k_top_p_filter(logits, 0, 0.4) > float("-inf")).sum().item() == 1   # a prefix of the sort


# --- sampling ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("temperature,top_k,top_p,num_blocks", [(0.8, 0, 1.0, None), (1.2, 30, 1.0, 1),
                                                                (0.6, 0, 0.8, 9), (1.0, 20, 0.9, None)])
def test_sample_equals_the_reference_given_the_same_noise(temperature, top_k, top_p, num_blocks):
    logits = randn(3, 1500, scale=3.0)
    for seed in (0, 12345):
        got = S.sample(logits, temperature, top_k, top_p, seed=seed, num_blocks=num_blocks)
        noise = S.gumbel_noise(seed, 3, 1500, RT.device)
        assert torch.equal(got, sample_with_noise(logits.double(), noise.double(), temperature, top_k, top_p))


def test_seed_as_int_or_device_tensor_and_greedy_limits():
    logits = randn(6, 400, scale=0.5)                     # flat: draws differ from seed to seed
    a = S.sample(logits, seed=7)
    assert torch.equal(a, S.sample(logits, seed=torch.tensor([7], device=RT.device)))
    assert torch.equal(a, S.sample(logits, seed=7))
    assert not torch.equal(a, S.sample(logits, seed=8))
    greedy = torch.argmax(logits, dim=-1)
    assert torch.equal(S.sample(logits, temperature=0.0), greedy)
    assert torch.equal(S.sample(logits, top_k=1, seed=3), greedy)


def test_gumbel_noise_has_the_gumbel_moments():
    g = S.gumbel_noise(11, 1, 200_000, RT.device).double()
    assert abs(g.mean().item() - 0.5772) < 0.01                 # Euler-Mascheronis constant
    assert abs(g.var().item() - math.pi**2 / 6) < 0.03
    assert not torch.equal(g, S.gumbel_noise(12, 1, 200_000, RT.device).double())


def test_gumbel_max_with_given_noise_draws_from_the_softmax():
    """The reference the sampler is checked against is a sampler: frequencies match softmax(filter)."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0], dtype=torch.float64)
    n = 40_000
    for temperature, top_k, top_p in ((0.8, 0, 1.0), (1.0, 3, 1.0), (1.3, 0, 0.7)):
        u = torch.rand(n, 8, generator=gen, dtype=torch.float64)
        draws = sample_with_noise(logits.expand(n, 8), -torch.log(-torch.log(u)), temperature, top_k, top_p)
        freq = torch.bincount(draws, minlength=8).double() / n
        probs = torch.softmax(threshold_filter(logits / temperature, top_k, top_p), dim=-1)
        assert 0.5 * (freq - probs).abs().sum().item() < 0.015


def test_sample_bad_input_is_named():
    logits = randn(1, 10)
    with pytest.raises(ValueError, match="top_p must be in"):
        S.sample(logits, top_p=0.0)
    with pytest.raises(ValueError, match="top_k must be an int"):
        S.sample(logits, top_k=-1)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        S.sample(logits, temperature=-1.0)
    with pytest.raises(TypeError, match="seed must be an int"):
        S.sample(logits, seed=1.5)
    with pytest.raises(TypeError, match="seed has dtype float32"):
        S.sample(logits, seed=torch.zeros(1, device=RT.device))
    # past float32: 1 / temperature overflows, a top_p below its smallest normal number reaches the kernel as 0
    with pytest.raises(ValueError, match=r"temperature must be >= 0: 0 \(greedy\) or a finite number >= 1e-6"):
        S.sample(logits, temperature=1e-40)
    with pytest.raises(ValueError, match=r"top_p must be in \[2\*\*-126, 1\], got 1e-300"):
        S.sample(logits, top_p=1e-300)
    with pytest.raises(TypeError, match="top_p must be a number, got '0.5'"):
        S.sample(logits, top_p="0.5")


def test_reference_argmax_refuses_nan():
    with pytest.raises(ValueError, match="NaN"):
        reference_argmax(tensor([1.0, float("nan")]))


# --- GPU only ---------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_sampler_runs_inside_a_cuda_graph_with_a_device_seed():
    logits = randn(1, 248320, dtype=torch.bfloat16, scale=3.0)
    seed = torch.tensor([100], device="cuda")
    out = torch.empty(1, dtype=torch.int64, device="cuda")
    for _ in range(2):                                       # compile outside the capture
        S.sample(logits, 0.7, 50, 0.9, seed=seed, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        S.sample(logits, 0.7, 50, 0.9, seed=seed, out=out)
    for step in range(3):
        seed.fill_(100 + step)                               # the engine bumps the seed on the device
        graph.replay()
        assert torch.equal(out, S.sample(logits, 0.7, 50, 0.9, seed=100 + step))


@pytest.mark.gpu
@pytest.mark.parametrize("temperature,top_k,top_p", [(0.8, 0, 1.0), (1.0, 3, 1.0), (1.3, 0, 0.7)])
def test_sampler_distribution_over_many_draws(temperature, top_k, top_p):
    logits = tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0])
    n = 200_000
    draws = S.sample(logits.expand(n, 8).contiguous(), temperature, top_k, top_p, seed=5)
    freq = torch.bincount(draws, minlength=8).double() / n
    probs = torch.softmax(threshold_filter(logits.double() / temperature, top_k, top_p), dim=-1)
    assert 0.5 * (freq - probs).abs().sum().item() < 0.01


def test_the_torch_baseline_draws_inside_the_filter_and_from_the_softmax():
    """The PyTorch column of the sampler's benchmark (the slot's `torch_impl`, no host sync): top-k 1 is the
    argmax, top-k 5 keeps to the five largest, and over many rows its draws follow softmax(z / T)."""
    from tritonllm_course import slots
    torch_sample = slots.get("sample").torch_impl
    logits = 3 * torch.randn(64, 500, generator=torch.Generator().manual_seed(0))
    assert torch.equal(torch_sample(logits, 0.8, 1, 1.0, seed=0), logits.argmax(-1))
    top5 = logits.topk(5, dim=-1).indices                                             # [64, 5]
    assert (torch_sample(logits, 1.3, 5, 1.0, seed=0)[:, None] == top5).any(-1).all()
    z = torch.tensor([2.0, 1.0, 0.0, -1.0])
    draws = torch_sample(z.expand(40_000, 4), 0.7, 0, 1.0, seed=0)
    freq = torch.bincount(draws, minlength=4).double() / draws.numel()
    assert (freq - torch.softmax(z.double() / 0.7, -1)).abs().max() < 0.02
