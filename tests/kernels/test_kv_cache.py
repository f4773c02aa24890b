"""The static KV cache (chapter 07_kv_cache) beyond the generic slot checks: bad input, the overflow guard, a
prefill followed by decode steps through one position tensor updated in place, and (GPU) the same
inside a CUDA graph."""
import pytest
import torch

from tritonllm_course import kernels, reference as R
from tritonllm_course.runtime import runtime

KV, D = 2, 32
DEV = runtime().device


@pytest.fixture(scope="module")
def kv(rt):
    return kernels.load("kv_cache", "solutions").module


def _cache(max_len, dtype=torch.float32, device=DEV):
    return (torch.zeros(max_len, KV, D, dtype=dtype, device=device),
            torch.zeros(max_len, KV, D, dtype=dtype, device=device))


def test_bad_input_is_named(kv):
    kc, vc = _cache(8)
    k = torch.randn(3, KV, D, device=DEV)
    pos = torch.arange(3, dtype=torch.int32, device=DEV)
    with pytest.raises(TypeError, match="k has dtype float16"):
        kv.kv_cache_write(k.half(), k, kc, vc, pos)
    with pytest.raises(ValueError, match=r"v has shape \[2, 2, 32\]"):
        kv.kv_cache_write(k, k[:2], kc, vc, pos)
    with pytest.raises(TypeError, match="pos has dtype float32"):
        kv.kv_cache_write(k, k, kc, vc, pos.float())
    with pytest.raises(ValueError, match="v_cache has shape"):
        kv.kv_cache_write(k, k, kc, vc[:4], pos)
    with pytest.raises(ValueError, match="contiguous"):
        kv.kv_cache_write(k, k, kc, vc.transpose(0, 1).contiguous().transpose(0, 1), pos)
    with pytest.raises(ValueError, match="give both k_out and v_out"):
        kv.kv_cache_read(kc, vc, 3, k_out=torch.empty(3, KV, D, device=DEV))


def test_overflow_is_rejected_and_nothing_is_written(kv):
    kc, vc = _cache(8)
    k = torch.randn(3, KV, D, device=DEV)
    with pytest.raises(ValueError, match=r"position 9 is outside \[0, 7\].*KV cache holds 8 rows"):
        kv.kv_cache_write(k, k, kc, vc, torch.arange(7, 10, device=DEV))
    with pytest.raises(ValueError, match="position -1 is outside"):
        kv.kv_cache_write(k, k, kc, vc, torch.tensor([-1, 0, 1], device=DEV))
    # inside a CUDA graph the host cannot look: the kernel's own mask must keep the write in bounds
    kv.kv_cache_write_kernel[(3,)](k, k, kc, vc, torch.tensor([6, 7, 8], device=DEV), 8, KV * D, KV * D,
                                   ROW=KV * D, BLOCK=64)
    assert torch.equal(kc[6:], k[:2]) and kc[:6].abs().sum() == 0
    with pytest.raises(ValueError, match="cannot read 9 rows from a cache of 8 rows"):
        kv.kv_cache_read(kc, vc, 9)


def test_a_repeated_position_is_refused_and_nothing_is_written(kv):
    """Two tokens at one row race (which the row keeps is the schedule's choice): refused before the kernel."""
    kc, vc = _cache(8)
    k = torch.randn(3, KV, D, device=DEV)
    with pytest.raises(ValueError, match="position 5 appears 2 times: each token is stored at a row of its own"):
        kv.kv_cache_write(k, k, kc, vc, torch.tensor([5, 2, 5], device=DEV))
    assert kc.abs().sum() == 0 and vc.abs().sum() == 0
    k6 = torch.randn(6, KV, D, device=DEV)
    with pytest.raises(ValueError, match="position 5 appears 2 times"):          # its own count, not the largest
        kv.kv_cache_write(k6, k6, kc, vc, torch.tensor([5, 2, 5, 7, 7, 7], device=DEV))
    kv.kv_cache_write(k[:1], k[:1], kc, vc, torch.tensor([5], device=DEV))       # one token: nothing to compare


def test_prefill_then_decode_through_one_device_position(kv):
    """The engine's pattern: one `pos` tensor, updated in place before each step (as a graph needs)."""
    max_len, prompt, steps = 16, 5, 4
    kc, vc = _cache(max_len)
    ks = torch.randn(prompt + steps, KV, D, device=DEV)
    vs = torch.randn(prompt + steps, KV, D, device=DEV)
    kv.kv_cache_write(ks[:prompt], vs[:prompt], kc, vc, torch.arange(prompt, device=DEV))
    pos = torch.zeros(1, dtype=torch.int64, device=DEV)
    length = torch.zeros(1, dtype=torch.int32, device=DEV)
    for i in range(prompt, prompt + steps):
        pos.fill_(i)
        length.fill_(i + 1)
        kv.kv_cache_write(ks[i:i + 1], vs[i:i + 1], kc, vc, pos)
        k_read, v_read = kv.kv_cache_read(kc, vc, length)
        assert torch.equal(k_read, ks[:i + 1]) and torch.equal(v_read, vs[:i + 1])
    assert kc[prompt + steps:].abs().sum() == 0, "rows past the sequence were written"


def test_read_into_a_static_buffer_zeroes_the_tail(kv):
    kc, vc = torch.randn(12, KV, D, device=DEV), torch.randn(12, KV, D, device=DEV)
    k_out = torch.full((12, KV, D), float("nan"), device=DEV)
    v_out = torch.full((12, KV, D), float("nan"), device=DEV)
    kv.kv_cache_read(kc, vc, torch.tensor([5], device=DEV), k_out=k_out, v_out=v_out)
    assert torch.equal(k_out[:5], kc[:5]) and torch.equal(v_out[:5], vc[:5])
    assert k_out[5:].abs().sum() == 0 and v_out[5:].abs().sum() == 0


def test_matches_the_reference_on_int64_positions_and_fp16(kv):
    kc, vc = _cache(20, torch.float16)
    rk, rv = kc.clone(), vc.clone()
    k, v = torch.randn(6, KV, D, device=DEV).half(), torch.randn(6, KV, D, device=DEV).half()
    pos = torch.tensor([3, 9, 4, 15, 0, 19], device=DEV)     # any distinct positions, not only a range
    kv.kv_cache_write(k, v, kc, vc, pos)
    R.kv_cache_write(k, v, rk, rv, pos)
    assert torch.equal(kc, rk) and torch.equal(vc, rv)


@pytest.mark.gpu
def test_decode_steps_replayed_from_a_cuda_graph(kv, rt):
    """Capture one write + read with device pos/length, replay for several positions."""
    max_len, steps = 64, 5
    kc, vc = _cache(max_len, rt.dtype, "cuda")
    ks = torch.randn(steps, 1, KV, D, device="cuda", dtype=rt.dtype)
    k_in, v_in = torch.empty_like(ks[0]), torch.empty_like(ks[0])
    pos = torch.zeros(1, dtype=torch.int32, device="cuda")
    length = torch.ones(1, dtype=torch.int32, device="cuda")
    k_out, v_out = torch.empty(max_len, KV, D, dtype=rt.dtype, device="cuda"), \
        torch.empty(max_len, KV, D, dtype=rt.dtype, device="cuda")
    step = lambda: (kv.kv_cache_write(k_in, v_in, kc, vc, pos),  # noqa: E731
                    kv.kv_cache_read(kc, vc, length, k_out=k_out, v_out=v_out))
    k_in.copy_(ks[0]); v_in.copy_(ks[0])
    step()                                  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for i in range(steps):
        k_in.copy_(ks[i]); v_in.copy_(-ks[i])
        pos.fill_(i); length.fill_(i + 1)
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(kc[:steps], ks[:, 0]) and torch.equal(vc[:steps], -ks[:, 0])
    assert torch.equal(k_out[:steps], ks[:, 0]) and k_out[steps:].abs().sum() == 0


def test_rows_of_a_wider_projection_are_written_from_their_token_stride(kv):
    """k and v as column slices of one [T, width] projection output (the engine's merged in-projection):
    each token's rows contiguous, tokens `width` apart; a layout that is not per-token contiguous is refused."""
    T, width = 5, 3 * KV * D + 7
    merged = torch.randn(T, width, device=DEV)
    k = merged[:, 7:7 + KV * D].view(T, KV, D)                    # [T, KV, D] at token stride `width`
    v = merged[:, 7 + KV * D:7 + 2 * KV * D].view(T, KV, D)
    pos = torch.tensor([4, 0, 2, 7, 5], device=DEV)
    kc, vc = _cache(8)
    rk, rv = _cache(8)
    for cache in (kc, vc, rk, rv):
        cache.fill_(float("nan"))                                  # rows never written stay NaN in both
    kv.kv_cache_write(k, v, kc, vc, pos)
    R.kv_cache_write(k.contiguous(), v.contiguous(), rk, rv, pos)
    assert torch.equal(kc.nan_to_num(-1.0), rk.nan_to_num(-1.0))
    assert torch.equal(vc.nan_to_num(-1.0), rv.nan_to_num(-1.0))
    with pytest.raises(ValueError, match="v must be contiguous within each token"):
        interleaved = torch.randn(T, D, KV, device=DEV).transpose(1, 2)   # [T, KV, D], heads interleaved
        kv.kv_cache_write(k, interleaved, kc, vc, pos)
