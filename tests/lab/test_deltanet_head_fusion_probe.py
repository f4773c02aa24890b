"""lab/deltanet_head_fusion_probe.py: the DeltaNet in-projection and its recurrence in one launch.

Under the interpreter (programs one after another, atomics sequential) these check the counting, the head
mapping, the reset across calls and the arithmetic, not races: see the probe's docstring. On a GPU the probe
runs the same comparisons itself (its `check` in its JSON).
"""
import pytest

from lab import deltanet_head_fusion_probe as probe   # the course root on sys.path: tests/lab/conftest.py
from tritonllm_course.config import TINY

pytestmark = pytest.mark.needs_solutions      # the probe runs the fast level's in-projection from solutions/


@pytest.mark.parametrize("mode", probe.MODES)
def test_the_one_launch_matches_the_reference_rule_call_after_call(rt, mode):
    """Against the reference in-projection + conv and the reference rule (fp64), 3 calls in a row on one
    counts buffer (left at 0 after each), TINY's heads, 3 value heads a key head, odd head sizes."""
    if rt.mode == "gpu":
        pytest.skip("checked on the GPU by the probe itself (check in its JSON)")
    assert probe.kernel_error(modes={mode: probe.MODES[mode]}, steps=3) < 1e-5


def test_the_last_arriver_orders_agree_bit_for_bit(rt):
    """The b/a rows first or the rows in order: another program completes each head and runs its rule, on
    the same stored inputs: the same bits (kernel_error adds 1 where they differ)."""
    if rt.mode == "gpu":
        pytest.skip("checked on the GPU by the probe itself (check in its JSON)")
    modes = {n: probe.MODES[n] for n in ("last-arriver, b/a first", "last-arriver, rows in order")}
    assert probe.kernel_error(shapes=probe.SHAPES[1:2], modes=modes, steps=2) < 1e-5


@pytest.mark.parametrize("config", [TINY, TINY.replace(linear_num_value_heads=6)], ids=["TINY", "6 value heads"])
def test_the_tiny_engine_decodes_the_same_with_the_swap(rt, config):
    """The fast level's decode steps after a common prompt, with `head_fusion` (b/a first) and without: the
    same greedy tokens and logits (two steps: each runs both DeltaNet layers through one counts buffer)."""
    if rt.mode == "gpu":
        pytest.skip("checked on the GPU by the probe itself (check in its JSON)")
    assert probe.engine_error(config, {"b/a first": {}}, prompt=(3, 1, 4), steps=2) < 1e-5


@pytest.mark.parametrize("planted, mode", [("no_reset", "last-arriver, b/a first"),
                                           ("head_map", "last-arriver, b/a first"),
                                           ("no_reset", "tail programs"), ("head_map", "tail programs")])
def test_the_check_catches_a_planted_bug(rt, planted, mode):
    """A counter never reset (the second call finds its heads already counted: no rule runs, or the
    counts stay up) and the key heads interleaved instead of grouped (hv % H for hv // (HV / H)) are caught
    at 3 value heads a key head."""
    if rt.mode == "gpu":
        pytest.skip("the planted bugs are checked under the interpreter")
    assert probe.kernel_error(shapes=probe.SHAPES[1:2], modes={mode: probe.MODES[mode]}, steps=2,
                              planted=planted) > 0.1


def test_the_engine_hook_refuses_what_it_does_not_fuse(rt):
    """The swap checks that the rule's inputs are the in-projection's output and that calls pair up."""
    if rt.mode == "gpu":
        pytest.skip("run under the interpreter")
    import torch
    from tritonllm_course.engine import Engine
    engine = Engine.random(TINY, dtype=torch.float32, device="cpu", seed=0, max_seq_len=8, level="fast",
                           cuda_graph=False)
    probe.head_fusion(engine)
    op = engine.ops.decode
    with pytest.raises(RuntimeError, match="without its in-projection"):
        op.delta_rule(q=None, k=None, v=None, a=None, b=None, A_log=None, dt_bias=None, initial_state=None,
                      final_state=None, out=None)
    a = engine._decode_views
    op.dn_in_proj(x=a.x, norm_weight=None, weight=None, eps=1e-6, out=a.dn_merged, conv_weight=None,
                  conv_state=None)
    with pytest.raises(RuntimeError, match="without its recurrence"):
        op.dn_in_proj(x=a.x, norm_weight=None, weight=None, eps=1e-6, out=a.dn_merged, conv_weight=None,
                      conv_state=None)
    wrong = a.dn_merged[:, 1:]
    with pytest.raises(ValueError, match="q is not the in-projection's output"):
        op.delta_rule(q=wrong, k=wrong, v=wrong, a=wrong, b=wrong, A_log=None, dt_bias=None, initial_state=None,
                      final_state=None, out=None, qk_norm=True)
