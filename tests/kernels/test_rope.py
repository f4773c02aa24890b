"""The RoPE kernel beyond the generic slot check: against transformers' own rotary functions, in place
vs out of place, the relative-position property, positions checks, and (GPU) CUDA-graph replay."""
import pytest
import torch
from transformers import Qwen3_5TextConfig
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

from tritonllm_course import kernels, slots
from tritonllm_course import reference as R
from tritonllm_course.checking import check_fn
from tritonllm_course.runtime import runtime
from helpers import rel

RT = runtime()
apply_rope = kernels.get("rope", "apply_rope", "solutions")
apply_rope_ = kernels.get("rope", "apply_rope_", "solutions")


def randn(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator(device=RT.device).manual_seed(seed)
    return torch.randn(*shape, device=RT.device, generator=gen).to(dtype)


def positions(*values):
    return torch.tensor(values, device=RT.device)


def test_matches_transformers_rotary_embedding():
    """transformers' cos/sin (Qwen3_5TextRotaryEmbedding) and apply_rotary_pos_emb, at head_dim 32."""
    config = Qwen3_5TextConfig(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                               rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                                                "partial_rotary_factor": 0.25})
    pos = positions(0, 3, 7, 100, 2000)
    q, k = randn(5, 4, 32), randn(5, 2, 32, seed=1)
    mrope_pos = pos[None, None].expand(3, 1, -1)     # [3, 1, T]: text gives t = h = w = the token index
    cos_hf, sin_hf = hf.Qwen3_5TextRotaryEmbedding(config).to(RT.device)(q, mrope_pos)     # [1, 5, 8]
    q_hf, k_hf = hf.apply_rotary_pos_emb(q[None], k[None], cos_hf, sin_hf, unsqueeze_dim=2)  # [1, 5, h, 32]
    cos, sin = R.rope_cache(2001, 8, 1e7, device=RT.device)
    assert rel(apply_rope(q, cos, sin, pos), q_hf[0]) < 1e-6
    assert rel(apply_rope_(k.clone(), cos, sin, pos), k_hf[0]) < 1e-6


def test_in_place_touches_only_the_rotary_dims_and_out_of_place_copies_the_rest():
    x, (cos, sin), pos = randn(4, 3, 40), R.rope_cache(30, 10, 1e7, device=RT.device), positions(0, 29, 5, 5)
    out = torch.full_like(x, float("nan"))
    apply_rope(x, cos, sin, pos, out=out)
    assert torch.equal(out[..., 10:], x[..., 10:]) and not torch.isnan(out).any()
    y = x.clone()
    assert apply_rope_(y, cos, sin, pos) is y
    assert torch.equal(y, out)


def test_scores_depend_only_on_the_relative_position():
    cos, sin = R.rope_cache(64, 16, 1e7, device=RT.device)
    q, k = randn(1, 1, 16), randn(1, 1, 16, seed=1)

    def score(m, n):
        return (apply_rope(q, cos, sin, positions(m)) * apply_rope(k, cos, sin, positions(n))).sum().item()

    assert score(9, 4) == pytest.approx(score(40, 35), rel=1e-5)
    assert score(9, 4) != pytest.approx(score(9, 9), rel=1e-3)


def test_decode_rows_equal_prefill_rows_with_either_table_dtype():
    x, pos = randn(6, 2, 24, dtype=torch.float16), positions(3, 1, 4, 1, 5, 9)
    for table_dtype in (torch.float32, torch.float16):
        cos, sin = R.rope_cache(10, 24, 1e7, dtype=table_dtype, device=RT.device)
        batch = apply_rope(x, cos, sin, pos)
        assert rel(batch, R.apply_rope(x.double(), cos.double(), sin.double(), pos)) < 1e-3
        assert all(torch.equal(apply_rope(x[t:t + 1], cos, sin, pos[t:t + 1]), batch[t:t + 1])
                   for t in range(6))


def test_gpt_j_pairing_fails_the_check():
    """The interleaved (2i, 2i+1) rotation is a valid RoPE, but not Qwen's: the slot's check rejects it."""
    slot = slots.get("q_rope")
    report = check_fn(lambda x, cos, sin, pos: x.copy_(R.apply_rope_interleaved(x, cos, sin, pos)),
                      slot.reference, slot.make_inputs, mutated=("x",), shape=slot.shape("tiny"), seed=0)
    assert not report.passed and report.max_error > 0.1


def test_positions_outside_the_cache():
    x, (cos, sin) = randn(3, 2, 16), R.rope_cache(8, 8, 1e7, device=RT.device)
    with pytest.raises(ValueError, match=r"position 8 is outside \[0, 7\]: beyond the cos/sin cache"):
        apply_rope(x, cos, sin, positions(0, 8, 1))
    out = apply_rope(x, cos, sin, positions(0, 8, 1), check_pos=False)
    assert torch.isnan(out[1, :, :8]).all() and not torch.isnan(out[[0, 2]]).any()


def test_bad_arguments_are_named():
    x, (cos, sin), pos = randn(3, 2, 16), R.rope_cache(8, 8, 1e7, device=RT.device), positions(0, 1, 2)
    with pytest.raises(ValueError, match="rotary_dim 7; it must be even"):
        apply_rope(x, cos[:, :7].contiguous(), sin[:, :7].contiguous(), pos)
    with pytest.raises(ValueError, match="rotary_dim 32; it must be even and in"):
        apply_rope(x, *R.rope_cache(8, 32, 1e7, device=RT.device), pos)
    with pytest.raises(ValueError, match=r"pos has shape \[2\]; expected \[3\]"):
        apply_rope(x, cos, sin, pos[:2])
    with pytest.raises(TypeError, match="pos has dtype float32"):
        apply_rope(x, cos, sin, pos.float())
    with pytest.raises(TypeError, match="sin has dtype float16"):
        apply_rope(x, cos, sin.half(), pos)
    with pytest.raises(ValueError, match="x must be 3-D"):
        apply_rope(x[0], cos, sin, pos[:1])


@pytest.mark.gpu
def test_cuda_graph_replay_reads_the_new_position():
    cos, sin = R.rope_cache(32768, 64, 1e7, dtype=torch.bfloat16, device="cuda")
    x, pos = randn(1, 8, 256, dtype=torch.bfloat16), positions(0)
    static = x.clone()
    apply_rope_(static, cos, sin, pos)                 # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        apply_rope_(static, cos, sin, pos)
    for p in (5, 32767):
        static.copy_(x)
        pos.fill_(p)
        graph.replay()
        expected = R.apply_rope(x.double(), cos.double(), sin.double(), positions(p))
        assert rel(static, expected) < 1e-2 and torch.equal(static[..., 64:], x[..., 64:])
