"""FlashDecoding (chapter 25_flash_decoding) beyond the generic slot check: any number of splits gives the reference,
including lengths off the step size, length 1 and lengths that leave most splits empty; partials of empty
splits are never read; merging the kernel's own partials is the full softmax to rounding, and merging
them without the rescale is caught; bad input is named; and (GPU) one captured CUDA graph replays with a
changing length in device memory, against chapter 08_attention's kernel and in fp32."""
import math

import pytest
import torch

from tritonllm_course import kernels, reference as R
from tritonllm_course.runtime import runtime

H, KV, D = 6, 2, 24               # G = 3, head_dim not a power of two
DEV = runtime().device
SCALE = 1 / math.sqrt(D)


@pytest.fixture(scope="module")
def fd(rt):
    return kernels.load("flash_decoding", "solutions").module


def _cache(max_len, length, dtype=torch.float32, seed=0, heads=H, kv=KV, d=D):
    """q and a cache whose rows from `length` on are NaN: a kernel that reads them fails."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(heads, d, generator=g).to(DEV, dtype)
    k = torch.randn(max_len, kv, d, generator=g).to(DEV, dtype)
    v = torch.randn(max_len, kv, d, generator=g).to(DEV, dtype)
    k[length:], v[length:] = float("nan"), float("nan")
    return q, k, v


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _ref(q, k, v, length):
    return R.decode_attention(q.double(), k.double(), v.double(), length, SCALE)


@pytest.mark.parametrize("length", [1, 15, 16, 17, 150, 257])
@pytest.mark.parametrize("splits", [1, 3, 7, 40])
def test_any_split_count_matches_the_reference(fd, length, splits):
    q, k, v = _cache(257, length)
    out = fd.flash_decoding(q, k, v, torch.tensor([length], device=DEV), SCALE, num_splits=splits)
    assert not out.isnan().any() and _rel(out, _ref(q, k, v, length)) < 1e-5


def _partials(H_, splits, D_):
    return torch.full((H_ * splits * (D_ + 2),), float("nan"), device=DEV)


def test_partials_of_empty_splits_are_never_read(fd):
    """NaN scratch: a split that writes nothing leaves NaN there, so reading it would show."""
    max_len, splits = 300, 19
    for length in (1, 20, 299):                      # 1 and 20: most splits empty
        q, k, v = _cache(max_len, length, seed=length)
        scratch = _partials(H, splits, D)
        out = fd.flash_decoding(q, k, v, torch.tensor([length], device=DEV), SCALE, num_splits=splits,
                                partials=scratch)
        assert not out.isnan().any() and _rel(out, _ref(q, k, v, length)) < 1e-5
        m = scratch[H * splits * D:H * splits * (D + 1)].view(H, splits)
        assert m[:, 0].isfinite().all()
        if length == 1:
            assert m[:, 1:].isnan().all(), "a split past the length wrote its partials"


def _kernel_partials(fd, q, k, v, length, splits):
    scratch = _partials(q.shape[0], splits, q.shape[1])
    fd.flash_decoding(q, k, v, torch.tensor([length], device=DEV), SCALE, num_splits=splits, partials=scratch)
    n = q.shape[0] * splits
    acc = scratch[:n * q.shape[1]].view(q.shape[0], splits, q.shape[1]).double()          # [H, splits, D]
    m = scratch[n * q.shape[1]:n * (q.shape[1] + 1)].view(q.shape[0], splits).double()    # [H, splits]
    l = scratch[n * (q.shape[1] + 1):].view(q.shape[0], splits).double()
    used = m[0].isfinite()                                                                 # splits in use
    return acc[:, used], m[:, used], l[:, used]


def test_merging_the_partials_is_the_full_softmax(fd):
    q, k, v = _cache(200, 200, seed=7)
    q = q * 4                                        # a peaked softmax: the split maxima differ a lot
    acc, m, l = _kernel_partials(fd, q, k, v, 200, splits=5)
    w = torch.exp2(m - m.amax(1, keepdim=True))                                            # [H, splits]
    exact = (w[..., None] * acc).sum(1) / (w * l).sum(1)[:, None]
    ref = _ref(q, k, v, 200)
    assert _rel(exact, ref) < 1e-6
    naive = acc.sum(1) / l.sum(1)[:, None]          # BUG: the partials summed against different maxima
    assert _rel(naive, ref) > 0.05


def test_equals_chapter_08_decode_attention(fd):
    attn = kernels.load("attention", "solutions").module
    q, k, v = _cache(130, 101, seed=8, heads=4, kv=2, d=32)
    length = torch.tensor([101], device=DEV)
    assert _rel(fd.flash_decoding(q, k, v, length, 1 / math.sqrt(32)),
                attn.decode_attention(q, k, v, length, 1 / math.sqrt(32))) < 1e-5


@pytest.mark.parametrize("splits", [1, 3])
def test_the_merge_applies_the_output_gate(fd, splits):
    """The fast level's decode: out = attention * sigmoid(gate), the gate applied by the merge."""
    q, k, v = _cache(40, 29, seed=4)
    gate = torch.randn(H, D, device=DEV) * 2
    out = fd.flash_decoding(q, k, v, 29, SCALE, num_splits=splits, gate=gate)
    want = R.output_gate(R.decode_attention(q.double(), k.double(), v.double(), 29, SCALE), gate.double())
    assert ((out.double() - want).norm() / want.norm()).item() < 1e-5
    with pytest.raises(ValueError, match=r"gate has shape \[6, 12\]"):
        fd.flash_decoding(q, k, v, 29, SCALE, gate=gate[:, :12])


def test_bad_input_is_named(fd):
    q, k, v = _cache(8, 8)
    with pytest.raises(ValueError, match=r"length 9 is outside \[1, 8\]"):
        fd.flash_decoding(q, k, v, torch.tensor([9], device=DEV), SCALE)
    with pytest.raises(ValueError, match=r"length 0 is outside"):
        fd.flash_decoding(q, k, v, 0, SCALE)
    with pytest.raises(ValueError, match=r"num_splits must be in \[1, 256\], got 0"):
        fd.flash_decoding(q, k, v, 4, SCALE, num_splits=0)
    with pytest.raises(ValueError, match=r"partials has shape \[10\]"):
        fd.flash_decoding(q, k, v, 4, SCALE, num_splits=2, partials=torch.empty(10, device=DEV))
    with pytest.raises(ValueError, match="6 query heads are not a multiple of 4 KV heads"):
        fd.flash_decoding(q, torch.randn(8, 4, D, device=DEV), torch.randn(8, 4, D, device=DEV), 4, SCALE)
    with pytest.raises(TypeError, match="v_cache has dtype float16"):
        fd.flash_decoding(q, k, v.half(), 4, SCALE)


# --- GPU --------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_one_cuda_graph_replays_with_a_changing_length(fd, rt):
    heads, kv, d, max_len = 8, 2, 256, 16384
    q = torch.randn(heads, d, device="cuda", dtype=rt.dtype)
    kc = torch.randn(max_len, kv, d, device="cuda", dtype=rt.dtype)
    vc = torch.randn(max_len, kv, d, device="cuda", dtype=rt.dtype)
    length = torch.tensor([1], dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    fd.flash_decoding(q, kc, vc, length, 1 / 16, out=out)        # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fd.flash_decoding(q, kc, vc, length, 1 / 16, out=out)
    for n in (1, 2, 63, 64, 65, 1000, 4097, 16383, max_len):
        length.fill_(n)
        graph.replay()
        ref = R.decode_attention(q.double(), kc.double(), vc.double(), n, 1 / 16)
        assert _rel(out, ref) < 2e-2, n


@pytest.mark.gpu
@pytest.mark.parametrize("length", [1, 128, 4096, 16384])
def test_equals_chapter_08_on_the_gpu_and_runs_in_fp32(fd, rt, length):
    attn = kernels.load("attention", "solutions").module
    for dtype, tol in ((rt.dtype, 2e-2), (torch.float32, 1e-5)):   # fp32: the model-swap checks
        q, k, v = _cache(16384, length, dtype=dtype, seed=length, heads=8, kv=2, d=256)
        n = torch.tensor([length], device="cuda")
        ref = R.decode_attention(q.double(), k.double(), v.double(), length, 1 / 16)
        assert _rel(fd.flash_decoding(q, k, v, n, 1 / 16), ref) < tol
        assert _rel(attn.decode_attention(q, k, v, n, 1 / 16), ref) < tol
