"""The gated delta rule kernels beyond the generic slot check: against transformers' own functions, prefill
handing its state to decode, the state updated in place, bad input, and checks that catch the classic bugs."""
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from tritonllm_course import kernels, slots
from tritonllm_course.runtime import runtime
from tritonllm_course import reference as R
from tritonllm_course.checking import check_fn, compare

mod = kernels.load("delta_rule", "solutions").module
recurrent, chunked = mod.gated_delta_rule_recurrent, mod.gated_delta_rule_chunked
spec = slots.get("gated_delta_chunked")
DEVICE = runtime().device


def _raw(T, H, HV, D, device=DEVICE, seed=0, state=True, dtype=torch.float32):
    """Un-normalised q, k (as the layer has them before its L2 norm), and the rest as the slot makes it."""
    gen = torch.Generator(device=device).manual_seed(seed)
    q, k = (torch.randn(T, H, D, device=device, generator=gen, dtype=dtype) for _ in range(2))
    v = torch.randn(T, HV, D, device=device, generator=gen).to(dtype)
    g = F.logsigmoid(torch.randn(T, HV, device=device, generator=gen) + 4.0)
    beta = torch.sigmoid(torch.randn(T, HV, device=device, generator=gen)).to(dtype)
    s0 = 0.5 * torch.randn(HV, D, D, device=device, generator=gen) if state else None
    return q, k, v, g, beta, s0


def _hf():
    """transformers' PyTorch functions (the decorated names dispatch to fla when it is installed)."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf
    return (getattr(hf.torch_chunk_gated_delta_rule, "__wrapped__", hf.torch_chunk_gated_delta_rule),
            getattr(hf.torch_recurrent_gated_delta_rule, "__wrapped__", hf.torch_recurrent_gated_delta_rule))


def _err(a, b):
    return compare(a, b, "x")[0]


def _fp32_settings() -> str:
    """torch's global fp32 matmul settings, named in a failure: a reduced-precision mode left on by another test in
    the worker would move transformers' fp32 reference, not the kernels."""
    mkldnn = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    return (f"torch fp32 settings: matmul precision {torch.get_float32_matmul_precision()}, backends "
            f"{getattr(torch.backends, 'fp32_precision', '-')}, mkldnn matmul {getattr(mkldnn, 'fp32_precision', '-')}")


# Both forms are fp32 sums of the same terms in other orders: 2e-7 apart on the CPU, with one full-suite run at 2.0e-5
# (cause not found; the failure now names the reference and torch's fp32 settings). A wrong term moves them by far
# more: the decay applied twice, beta squared or taken from the next head, q for k: 0.25 to 4.8 at these shapes.
HF_TOL = 1e-4


@pytest.mark.parametrize("T,chunk,state", [(37, 16, True), (70, 32, False), (70, 64, True)])
def test_matches_transformers(T, chunk, state):
    """Value heads = 2 x key heads, T not a multiple of the chunk; transformers normalises q and k itself."""
    hf_chunk, hf_rec = _hf()
    q, k, v, g, beta, s0 = _raw(T, 2, 4, 32, state=state)
    batched = (q[None], k[None], v[None], g[None], beta[None])
    h0 = s0[None] if state else None
    o_c, s_c = hf_chunk(*batched, chunk_size=chunk, initial_state=h0, output_final_state=True,
                        use_qk_l2norm_in_kernel=True)
    o_r, s_r = hf_rec(*batched, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    qn, kn = R.l2norm_qk(q, k)
    for name, (o, s) in {"chunked": chunked(qn, kn, v, g, beta, s0, chunk_size=chunk),
                         "recurrent": recurrent(qn, kn, v, g, beta, s0)}.items():
        for ref, ref_o, ref_s in (("chunked", o_c[0], s_c[0]), ("recurrent", o_r[0], s_r[0])):
            errs = _err(o, ref_o), _err(s, ref_s)
            assert max(errs) < HF_TOL, f"{name} against transformers' {ref}: output, state {errs}; {_fp32_settings()}"


def test_prefill_then_decode_continues_the_state():
    """A chunked prefill writes the state; recurrent decode steps update it in place (as the engine does);
    together they equal one recurrence over the whole sequence."""
    q, k, v, g, beta, _ = _raw(41, 2, 4, 32, seed=1)
    q, k = R.l2norm_qk(q, k)
    ref_o, ref_s = R.gated_delta_rule_recurrent(q.double(), k.double(), v.double(), g.double(), beta.double())
    P = 37
    o_pre, state = chunked(q[:P], k[:P], v[:P], g[:P], beta[:P], chunk_size=16)
    outs = [o_pre]
    for t in range(P, 41):
        o_t, same = recurrent(q[t:t + 1], k[t:t + 1], v[t:t + 1], g[t:t + 1], beta[t:t + 1], state,
                              final_state=state)
        assert same is state
        outs.append(o_t)
    assert _err(torch.cat(outs), ref_o) < 1e-5 and _err(state, ref_s) < 1e-5


def test_state_in_place_for_the_chunked_kernel():
    q, k, v, g, beta, s0 = _raw(20, 1, 2, 32, seed=2)
    q, k = R.l2norm_qk(q, k)
    _, expected = R.gated_delta_rule_recurrent(q, k, v, g, beta, s0)
    state = s0.clone()
    chunked(q, k, v, g, beta, state, final_state=state, chunk_size=16)
    assert _err(state, expected) < 1e-5


def _broken_check(fn):
    return check_fn(fn, spec.reference, spec.make_inputs, spec.make_out, shape=spec.shapes["tiny"][0],
                    dtype=torch.float32, name="broken", trials=1)


def test_checks_catch_a_dropped_initial_state():
    report = _broken_check(lambda initial_state, **kw: chunked(initial_state=None, **kw))
    assert not report.passed and report.max_error > 1e-2, report


def test_checks_catch_chunks_that_do_not_carry_the_state():
    """Each chunk started from the initial state instead of the previous chunk's final state."""
    def forgetful(q, k, v, g, beta, initial_state, out, final_state, chunk_size):
        for t0 in range(0, q.shape[0], chunk_size):
            part = slice(t0, t0 + chunk_size)
            o, final_state = chunked(q[part], k[part], v[part], g[part], beta[part], initial_state,
                                     final_state=final_state, chunk_size=chunk_size)
            out[part] = o
    report = _broken_check(forgetful)
    assert not report.passed and report.max_error > 1e-2, report


def test_bad_input_is_named():
    q, k, v, g, beta, s0 = _raw(5, 2, 4, 32)
    with pytest.raises(TypeError, match="g .*float16"):
        recurrent(q, k, v, g.half(), beta)
    with pytest.raises(ValueError, match="3 value heads, not a multiple of the 2 key heads"):
        chunked(q, k, v[:, :3].contiguous(), g[:, :3].contiguous(), beta[:, :3].contiguous())
    with pytest.raises(ValueError, match=r"initial_state has shape \[4, 32, 16\]"):
        recurrent(q, k, v, g, beta, s0[..., :16].contiguous())
    with pytest.raises(ValueError, match="chunk_size must be one of"):
        chunked(q, k, v, g, beta, chunk_size=48)
    with pytest.raises(ValueError, match="contiguous"):
        recurrent(q.transpose(0, 1).contiguous().transpose(0, 1), k, v, g, beta)
    with pytest.raises(TypeError, match="final_state has dtype float16"):
        chunked(q, k, v, g, beta, final_state=s0.half())


@pytest.mark.gpu
def test_bf16_prefill_then_decode_at_real_shapes():
    """Qwen3.5-0.8B's layer in bf16: a 1000-token prefill, then 8 decode steps, against fp64."""
    q, k, v, g, beta, s0 = _raw(1008, 16, 16, 128, dtype=torch.bfloat16)
    q, k = R.l2norm_qk(q, k)
    ref_o, ref_s = R.gated_delta_rule_recurrent(*(x.double() for x in (q, k, v, g, beta, s0)))
    o, state = chunked(q[:1000], k[:1000], v[:1000], g[:1000], beta[:1000], s0)
    outs = [o] + [recurrent(q[t:t + 1], k[t:t + 1], v[t:t + 1], g[t:t + 1], beta[t:t + 1], state,
                            final_state=state)[0] for t in range(1000, 1008)]
    # bf16 keeps 8 bits: rounding o alone gives ~2e-3; q, k, v are exact bf16 inputs to both sides
    assert _err(torch.cat(outs), ref_o) < 1e-2 and _err(state, ref_s) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("T", [1, 3, 16, 63, 64, 65, 130])
@pytest.mark.parametrize("qk_dtype", [torch.bfloat16, torch.float32])
def test_short_and_odd_prompts_at_real_shapes(T, qk_dtype):
    """Prompts of one chunk or less (the engine's short prompts), bf16 v, q and k in bf16 or fp32 (the
    engine's L2-normed keys): the chunk scan's loop runs once or not pipelined."""
    q, k, v, g, beta, s0 = _raw(T, 16, 16, 128, dtype=torch.bfloat16)
    q, k = (x.to(qk_dtype) for x in R.l2norm_qk(q, k))
    ref_o, ref_s = R.gated_delta_rule_recurrent(*(x.double() for x in (q, k, v, g, beta, s0)))
    o, state = chunked(q, k, v, g, beta, s0)
    torch.cuda.synchronize()
    assert _err(o, ref_o) < 1e-2 and _err(state, ref_s) < 1e-2



SMALL_HEADS = """
import sys, torch
from tritonllm_course import kernels, slots
from tritonllm_course.runtime import runtime
dr = kernels.load("delta_rule", "solutions").module
device = runtime().device
inp = slots.get("gated_delta_chunked").make_inputs({"T": 40, "H": 2, "HV": 4, "DK": 16, "DV": 64}, torch.float32,
                                                   device, torch.Generator(device=device).manual_seed(0))
def done(what):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    print("ran", what, flush=True)
want, want_s = dr.gated_delta_rule_recurrent(**inp)
done("recurrent")
for chunk in (16, 32, 64):
    for block_v in (16, 64):
        got, got_s = dr.gated_delta_rule_chunked(**inp, chunk_size=chunk, block_v=block_v)
        done(f"chunk {chunk}, block_v {block_v}")
        err = max(((got - want).abs().max() / want.abs().max()).item(),
                  ((got_s - want_s).abs().max() / want_s.abs().max()).item())
        if err > 1e-5:
            sys.exit(f"chunk {chunk}, block_v {block_v}: relative error {err:.1e}")
"""


def test_small_key_heads_in_fp32():
    """16-dim key heads in fp32 (tf32x3 products), 40 tokens: every chunk size and two value blocks against the
    recurrent kernel. In a process of its own: these calls, made by the lab's delta-rule probes' checks, ended in
    an illegal memory access (triton 3.6; H200 and H100, 2026-12-05), which would poison every later CUDA call of
    this test's worker. compute-sanitizer put it in chunk_prepare_kernel at chunks of 64, a shared-memory read
    past its end in the UT transform's products; `chunk_prepare` now gives it key tiles of 32 columns at least.
    The child prints each call it finished: the first one missing is where it faulted."""
    run = subprocess.run([sys.executable, "-c", SMALL_HEADS], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{run.stdout[-1500:]}\n{run.stderr[-1500:]}"


@pytest.mark.parametrize("T", [19, 131])
def test_the_default_chunk_size_follows_the_prompt_length(T):
    """chunk_size=None takes chunk_size_for(T) (16 up to 128 tokens, 32 below 512, 64 from 512: the
    measurements of lab/prefill_probe.py and lab/delta_rule_operands_probe.py) and gives what that chunk size
    gives, bit for bit; other sizes differ only by rounding."""
    assert [mod.chunk_size_for(n) for n in (1, 128, 129, 511, 512, 4096)] == [16, 16, 32, 32, 64, 64]
    q, k, v, g, beta, s0 = _raw(T, 2, 4, 32, seed=T)
    q, k = R.l2norm_qk(q, k)
    picked = mod.chunk_size_for(T)
    o_default, s_default = chunked(q, k, v, g, beta, s0)
    o_picked, s_picked = chunked(q, k, v, g, beta, s0, chunk_size=picked)
    assert torch.equal(o_default, o_picked) and torch.equal(s_default, s_picked)
    other = 64 if picked != 64 else 16
    o_other, _ = chunked(q, k, v, g, beta, s0, chunk_size=other)
    assert _err(o_default, o_other) < 1e-4
