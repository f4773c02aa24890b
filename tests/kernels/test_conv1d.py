"""The DeltaNet conv kernels beyond the generic slot check: against transformers' own torch functions,
prefill followed by decode steps continuing from its state, a prefill continuing a state, the fused
conv + L2-norm variants, the bugs the checks must catch, and bad input."""
import pytest
import torch
import torch.nn.functional as F
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

from tritonllm_course import kernels
from tritonllm_course import reference as R
from tritonllm_course.checking import check_fn
from tritonllm_course.runtime import runtime
from tritonllm_course.slots import get
from helpers import randn, rel

RT = runtime()
conv = kernels.load("conv1d", "solutions").module


def hf_prefill_then_decode(x, weight, T0):
    """transformers' path for one sequence: causal_conv1d_fn over the first T0 tokens, the cache's
    state (last K inputs, left-padded), then causal_conv1d_update token by token. x: [T, C]."""
    K = weight.shape[1]
    first = x[:T0].T[None]                                             # [1, C, T0]
    ys = [hf.causal_conv1d_fn(first, weight, activation="silu")[0].T]  # [T0, C]
    state = F.pad(first, (max(0, K - T0), 0))[..., -K:].clone()        # [1, C, K], what the cache keeps
    for t in range(T0, x.shape[0]):
        ys.append(hf.causal_conv1d_update(x[t:t + 1].T[None], state, weight, activation="silu")[0].T)
    return torch.cat(ys), state[0]


@pytest.mark.parametrize("T0", [2, 4, 9])     # prompt shorter than, equal to, longer than the K = 4 taps
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 2e-3)])
def test_prefill_then_decode_matches_transformers(T0, dtype, tol):
    C, steps = 48, 3
    x, w = randn(T0 + steps, C, dtype=dtype), randn(C, 4, dtype=dtype, scale=0.3, seed=1)
    y_hf, state_hf = hf_prefill_then_decode(x.float(), w.float(), T0)
    y, state = conv.conv1d_prefill(x[:T0], w)                          # a new sequence: no state
    ys = [y]
    for t in range(T0, T0 + steps):
        ys.append(conv.conv1d_decode(x[t:t + 1], w, state)[0])        # state rolled in place
    assert rel(torch.cat(ys), y_hf) < tol
    assert torch.equal(state.float(), state_hf)                        # the same layout as the cache


def test_prefill_continues_from_a_state():
    """Two prefills, the second from the first's state, equal one prefill over both (chunked prompts)."""
    x, w = randn(11, 40), randn(40, 4, scale=0.3, seed=1)
    y_all, state_all = conv.conv1d_prefill(x, w)
    y1, s1 = conv.conv1d_prefill(x[:6], w)
    y2, s2 = conv.conv1d_prefill(x[6:], w, s1)
    assert rel(torch.cat([y1, y2]), y_all) < 1e-6 and torch.equal(s2, state_all)
    y3, s3 = conv.conv1d_prefill(x[6:8], w, s1)                        # T < K: old columns move into the state
    assert torch.equal(s3, x[4:8].T)


def test_strided_rows_and_many_token_blocks():
    """x as a view into a wider projection output, and a T spanning several token blocks."""
    wide, w = randn(70, 100), randn(64, 4, scale=0.3, seed=1)
    x = wide[:, 10:74]                                                  # [70, 64], row stride 100
    y, s = conv.conv1d_prefill(x, w, randn(64, 4, seed=2))
    y_ref, s_ref = R.conv1d_prefill(x.contiguous(), w, randn(64, 4, seed=2))
    assert rel(y, y_ref) < 1e-6 and torch.equal(s, s_ref)


def test_only_three_state_columns_are_read():
    """Column 0 of the state is never read (K - 1 = 3 suffice); it is still shifted out."""
    x, w, s = randn(1, 32), randn(32, 4, scale=0.3, seed=1), randn(32, 4, seed=2)
    s2 = s.clone()
    s2[:, 0] = 1e4
    y, _ = conv.conv1d_prefill(x, w, s)
    assert torch.equal(conv.conv1d_prefill(x, w, s2)[0], y)
    assert torch.equal(conv.conv1d_decode(x, w, s2)[0], y)


@pytest.mark.parametrize("H,HV,DV", [(2, 4, 16), (3, 3, 16), (1, 2, 24), (1, 3, 12)])
def test_fused_conv_l2norm_equals_the_unfused_chain(H, HV, DV):
    """conv1d_l2norm_* = conv, split, transformers' l2norm (q scaled by D^-0.5); prefill then decode. The
    value heads' dim DV may differ from the key heads' D (3 x 12 channels: v's last chunk is partial)."""
    D, T = 16, 6
    C = 2 * H * D + HV * DV
    x, w = randn(T + 2, C), randn(C, 4, scale=0.3, seed=1)
    q, k, v, state = conv.conv1d_l2norm_prefill(x[:T], w, None, H, D, value_head_dim=DV)
    for t in range(T, T + 2):                                           # decode continues the fused prefill
        qt, kt, vt, _ = conv.conv1d_l2norm_decode(x[t:t + 1], w, state, H, D, value_head_dim=DV)
        q, k, v = torch.cat([q, qt]), torch.cat([k, kt]), torch.cat([v, vt])
    y, _ = hf_prefill_then_decode(x, w, T)
    q_ref, k_ref, v_ref = y.split([H * D, H * D, HV * DV], -1)
    assert rel(q, hf.l2norm(q_ref.reshape(-1, H, D)) * D ** -0.5) < 1e-6
    assert rel(k, hf.l2norm(k_ref.reshape(-1, H, D))) < 1e-6
    assert v.shape == (T + 2, HV, DV) and rel(v, v_ref.reshape(-1, HV, DV)) < 1e-6
    assert q.dtype == k.dtype == torch.float32 and q.norm(dim=-1).sub(D ** -0.5).abs().max() < 1e-5


def _centred(x, weight, conv_state, out, new_state):
    """A non-causal conv, padded 1 left and 2 right ('same'): the window of t sees tokens t + 1, t + 2."""
    y = F.conv1d(F.pad(x.T[None], (1, 2)), weight[:, None], groups=x.shape[1])[0].T
    out.copy_(F.silu(y))
    new_state.copy_(x[-4:].T)


def test_a_centred_conv_fails_the_check():
    slot = get("conv1d_prefill")
    report = check_fn(_centred, slot.reference, slot.make_inputs, slot.make_out, name="centred",
                      shape={"T": 9, "C": 16, "K": 4, "state": 0}, dtype=torch.float32)
    assert not report.passed and report.max_error > 0.1


def test_forgetting_the_state_fails_the_check():
    slot = get("conv1d_prefill")

    def stateless(x, weight, conv_state, out, new_state):
        conv.conv1d_prefill(x, weight, None, out=out, new_state=new_state)

    report = check_fn(stateless, slot.reference, slot.make_inputs, slot.make_out, name="stateless",
                      shape={"T": 5, "C": 16, "K": 4, "state": 1}, dtype=torch.float32)
    assert not report.passed


def test_bad_arguments_are_named():
    x, w, s = randn(3, 8), randn(8, 4), randn(8, 4)
    with pytest.raises(ValueError, match=r"weight has shape \[8, 1, 4\]"):
        conv.conv1d_prefill(x, w[:, None])
    with pytest.raises(TypeError, match="conv_state has dtype float16"):
        conv.conv1d_prefill(x, w, s.half())
    with pytest.raises(ValueError, match="new_state must not be conv_state"):
        conv.conv1d_prefill(x, w, s, new_state=s)
    with pytest.raises(ValueError, match="one token"):
        conv.conv1d_decode(x, w, s)
    with pytest.raises(ValueError, match="contiguous channels"):
        conv.conv1d_prefill(randn(8, 3).T, w)
    with pytest.raises(ValueError, match="do not split"):
        conv.conv1d_l2norm_decode(x[:1], w, s, key_heads=2, head_dim=4)


@pytest.mark.gpu
def test_real_shapes_bf16_prefill_then_decode_on_gpu():
    C, T0 = 6144, 128
    x, w = randn(T0 + 4, C, dtype=torch.bfloat16), randn(C, 4, dtype=torch.bfloat16, scale=0.3, seed=1)
    y_hf, state_hf = hf_prefill_then_decode(x, w, T0)
    y, state = conv.conv1d_prefill(x[:T0], w)
    ys = [y] + [conv.conv1d_decode(x[t:t + 1], w, state)[0] for t in range(T0, T0 + 4)]
    assert rel(torch.cat(ys), y_hf) < 1e-2 and torch.equal(state, state_hf)
