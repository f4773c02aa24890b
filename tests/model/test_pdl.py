"""Programmatic dependent launch (PDL): the engine's decode step launches its kernels with it on an sm_90+
GPU (`Engine(pdl=...)`, `runtime.programmatic_launches`).

PDL lets a kernel start before the one ahead of it has finished, so a kernel launched with it that reads
its input before `pdl_wait` reads stale data. Here: one switch turns on both the kernel's PDL constexpr and
the launch attribute (never one without the other); under the interpreter the PDL calls are no-ops, so
the same kernels give the same bits; the engine's tokens do not change with PDL; on a GPU every kernel of
the fast level's decode step is launched with it.
"""
import ast
import re
from pathlib import Path

import pytest
import torch

from tritonllm_course import kernels
from tritonllm_course.runtime import pdl_args, pdl_supported, programmatic_launches

ROOT = Path(__file__).resolve().parents[2]


def _pdl_kernels(path: Path) -> list[str]:
    """The @triton.jit functions of a kernel module that take a PDL parameter."""
    tree = ast.parse(path.read_text())
    return [f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
            and any(a.arg == "PDL" for a in f.args.args + f.args.kwonlyargs)]


def _modules():
    return sorted((ROOT / "solutions").glob("*.py")) + sorted((ROOT / "exercises").glob("*.py"))


def _kernels_taking_pdl() -> set[str]:
    """The names of every solution kernel with a PDL parameter."""
    return {name for path in sorted((ROOT / "solutions").glob("*.py")) for name in _pdl_kernels(path)}


def _compiled_kernels_launched(fn) -> list[str]:
    """On a GPU: the names of the compiled Triton kernels `fn()` launches (Triton's launch hook)."""
    import triton
    names = []
    hook = lambda metadata: names.append(metadata.get()["name"])   # noqa: E731
    triton.knobs.runtime.launch_enter_hook.add(hook)
    try:
        fn()
        torch.cuda.synchronize()
    finally:
        triton.knobs.runtime.launch_enter_hook.remove(hook)
    return names


def test_the_switch_sets_the_constexpr_and_the_launch_together_and_restores_itself():
    assert pdl_args() == {"PDL": False, "launch_pdl": False}
    with programmatic_launches():
        assert pdl_args() == {"PDL": True, "launch_pdl": True}
        with programmatic_launches(False):
            assert pdl_args() == {"PDL": False, "launch_pdl": False}
        assert pdl_args()["PDL"]
    assert pdl_args() == {"PDL": False, "launch_pdl": False}
    with pytest.raises(RuntimeError), programmatic_launches():
        raise RuntimeError
    assert not pdl_args()["PDL"]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_kernel_that_takes_pdl_is_launched_through_the_switch(path):
    """A kernel with a PDL parameter is launched with `**pdl_args()` at every launch in its module: a
    launch with the attribute but without the wait in the kernel could read stale inputs."""
    text = path.read_text()
    for name in _pdl_kernels(path):
        launches = [m.start() for m in re.finditer(rf"\b{name}\[", text)]
        assert launches, f"{path.name}: {name} takes PDL but is never launched here"
        for start in launches:
            call = text[start:text.index("\n\n", start) if "\n\n" in text[start:] else len(text)]
            call = call[:call.index(")\n") + 1] if ")\n" in call else call
            assert re.search(r"\*\*pdl(_args\(\))?[,)\s]", call), \
                f"{path.name}: a launch of {name} without **pdl_args(): {call[:80]}"
            if "**pdl_args()" not in call:      # `pdl = pdl_args()` in the wrapper, then **pdl
                assert "pdl = pdl_args()" in text[:start].rsplit("\ndef ", 1)[-1], \
                    f"{path.name}: {name} is launched with **pdl, but its wrapper has no pdl = pdl_args()"


def test_the_pdl_calls_are_no_ops_under_the_interpreter(rt):
    """The same kernels with PDL on give the same bits (on the CPU the helpers compile to nothing; on a
    GPU one kernel alone has nothing to overlap)."""
    rms_norm = kernels.get("rmsnorm", "rms_norm")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 131, generator=gen).to(rt.device, rt.dtype)
    w = (0.1 * torch.randn(131, generator=gen)).to(rt.device, rt.dtype)
    plain = rms_norm(x, w, eps=1e-6)
    with programmatic_launches():
        with_pdl = rms_norm(x, w, eps=1e-6)
    assert torch.equal(plain, with_pdl)


@pytest.mark.parametrize("level", ["fast"])
def test_the_engine_generates_the_same_tokens_with_pdl(rt, tiny_engine_pair, level):
    """Greedy and sampled, from a fresh sequence each: PDL changes when kernels start, not what they
    compute."""
    with_pdl, without = tiny_engine_pair(level)
    assert with_pdl.pdl and not without.pdl
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    for kwargs in ({}, dict(greedy=False, temperature=0.8, top_k=20, seed=3)):
        assert with_pdl.generate(prompt, 6, **kwargs) == without.generate(prompt, 6, **kwargs)


@pytest.fixture
def tiny_engine_pair(rt):
    from tritonllm_course.config import TINY
    from tritonllm_course.engine import Engine

    def make(level):
        dtype = torch.float32 if rt.mode == "interpreter" else torch.bfloat16
        return tuple(Engine.random(TINY, dtype=dtype, device=rt.device, seed=0, max_seq_len=64, level=level,
                                   pdl=pdl if rt.mode == "interpreter" or pdl_supported() else False)
                     for pdl in (True, False))
    if rt.mode == "gpu" and not pdl_supported():
        pytest.skip("this GPU has no programmatic dependent launch (sm_90+)")
    return make


def test_pdl_off_runs_the_same_kernels_one_after_another(rt):
    """`Engine(pdl=False)` on a GPU with PDL launches the kernels made for it without the attribute
    (`Engine._launches`): at Qwen3.5-0.8B's shapes (random weights, bf16) the same greedy and sampled tokens
    as with PDL, and the same logits, bit for bit, after a prompt."""
    if rt.mode != "gpu" or not pdl_supported():
        pytest.skip("needs an sm_90+ GPU")
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    from tritonllm_course.weights import random_weights
    weights = random_weights(QWEN35_0_8B, dtype=torch.bfloat16, device="cuda", seed=0)
    prompt = list(range(5, 45))
    runs = []
    for pdl in (True, False):
        engine = Engine(QWEN35_0_8B, weights, max_seq_len=96, level="fast", pdl=pdl)
        logits = engine.prefill(prompt).clone()
        engine.reset()
        runs.append((logits, engine.generate(prompt, 12),
                     engine.generate(prompt, 12, greedy=False, temperature=0.8, top_k=50, seed=1)))
        del engine
    (l1, g1, s1), (l2, g2, s2) = runs
    assert torch.equal(l1, l2) and g1 == g2 and s1 == s2


def test_every_kernel_of_the_fast_decode_step_launches_with_pdl(rt):
    """On a GPU: the names of the kernels one fast-level decode step launches (Triton's launch hook), each a
    kernel that takes PDL: a kernel launched without it ends the overlap where it stands."""
    if rt.mode != "gpu" or not pdl_supported():
        pytest.skip("needs an sm_90+ GPU")
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    engine = Engine.random(QWEN35_0_8B, dtype=torch.bfloat16, device="cuda", max_seq_len=64, level="fast",
                           cuda_graph=False, pdl=True)
    engine.prefill([1, 2, 3])
    engine.decode()
    names = _compiled_kernels_launched(engine.decode)
    assert names, "no Triton launch seen"
    assert sorted(set(names) - _kernels_taking_pdl()) == []


# --- the prompt (prefill) path ----------------------------------------------------------------------------
def _prefills(engine) -> None:
    """The prompts of the prefill tests, each from a fresh sequence: a few tokens (the GEMMs, the chunked
    delta rule, the causal attention), one token (where the fused levels' projections take their GEMVs) and
    a few tokens sampled with top-k and top-p (the threshold search's kernels)."""
    from tritonllm_course.engine import Sampling
    engine.prefill([3, 1, 4])
    engine.reset()
    engine.prefill([5])
    engine.reset()
    engine.prefill([2, 7, 1], sampling=Sampling(0.8, top_k=20, top_p=0.9))


def _pdl_engine(rt, config, level):
    """An engine asked for PDL (the prefill launches with it once the engine turns the switch on around its
    prefill, as around its decode step), op by op: a replayed graph runs no Python to watch."""
    from tritonllm_course.engine import Engine
    dtype = torch.float32 if rt.mode == "interpreter" else torch.bfloat16
    return Engine.random(config, dtype=dtype, device=rt.device, seed=0, max_seq_len=64, level=level,
                         cuda_graph=False, pdl=True)


@pytest.mark.parametrize("level", ["operators", "fused", "fast"])
def test_every_kernel_of_a_prefill_takes_pdl(rt, level):
    """On a GPU: the names of the kernels the prompts of `_prefills` launch (Triton's launch hook), each a
    kernel that takes PDL. The LM head's `gemv_kernel` takes it too, though its launch passes PDL False where
    its grid is over PDL_MAX_PROGRAMS (the real vocabulary): as in the decode step, what is asked here is that
    a kernel can overlap, not that every launch does."""
    if rt.mode != "gpu" or not pdl_supported():
        pytest.skip("needs an sm_90+ GPU")
    from tritonllm_course.config import QWEN35_0_8B
    engine = _pdl_engine(rt, QWEN35_0_8B, level)

    def prompts():
        with programmatic_launches(True):
            _prefills(engine)
    names = _compiled_kernels_launched(prompts)
    assert names, "no Triton launch seen"
    assert sorted(set(names) - _kernels_taking_pdl()) == []


@pytest.mark.parametrize("level", ["operators", "fused", "fast"])
def test_a_prefill_launches_its_kernels_with_pdl_under_the_interpreter(rt, level, monkeypatch):
    """On the CPU, at the tiny config: every kernel the prompts of `_prefills` launch takes PDL, each launch
    passes the constexpr and the attribute together (`pdl_args`), and with the switch on every one has it
    (the embedding aside: the first kernel of a prompt, which the engine may launch without, as it does at
    decode). The interpreter's launches are watched, their keyword arguments included."""
    if rt.mode != "interpreter":
        pytest.skip("watches the interpreter's launches (on a GPU: test_every_kernel_of_a_prefill_takes_pdl)")
    from triton.runtime import interpreter
    from tritonllm_course.config import TINY
    takes = _kernels_taking_pdl()
    engine = _pdl_engine(rt, TINY, level)
    launches = []
    grid_call = interpreter.GridExecutor.__call__

    def watched(self, *args, **kwargs):
        launches.append((self.fn.__name__, kwargs.get("PDL"), kwargs.get("launch_pdl")))
        return grid_call(self, *args, **kwargs)

    monkeypatch.setattr(interpreter.GridExecutor, "__call__", watched)
    with programmatic_launches(True):
        _prefills(engine)
    names = {name for name, _, _ in launches}
    assert {"chunk_scan_kernel", "threshold_select_kernel", "gemv_kernel"} <= names
    assert sorted(names - takes) == []
    assert [launch for launch in launches if launch[1] != launch[2]] == []     # never one without the other
    assert sorted({name for name, on, _ in launches if not on} - {"embedding_kernel"}) == []


def _randn(gen, *shape, scale=1.0, dtype=None):
    return (scale * torch.randn(*shape, generator=gen)).to(dtype or torch.float32)


def _attention_inputs(gen, dt, gate=False):
    q, k, v = _randn(gen, 5, 4, 24, dtype=dt), _randn(gen, 7, 2, 24, dtype=dt), _randn(gen, 7, 2, 24, dtype=dt)
    extra = {"gate": _randn(gen, 5, 4, 24, dtype=dt)} if gate else {}
    return dict(q=q, k=k, v=v, pos=torch.arange(2, 7, dtype=torch.int32), scale=24 ** -0.5, **extra)


def _delta_rule_inputs(gen, dt, gates=False):
    T, H, HV, DK, DV = 5, 1, 2, 12, 16
    qk = dict(q=_randn(gen, T, H, DK, scale=0.3, dtype=dt), k=_randn(gen, T, H, DK, scale=0.3, dtype=dt),
              v=_randn(gen, T, HV, DV, dtype=dt), initial_state=_randn(gen, HV, DK, DV, scale=0.1))
    if not gates:
        return dict(**qk, g=-torch.rand(T, HV, generator=gen), beta=torch.rand(T, HV, generator=gen).to(dt))
    return dict(**qk, a=_randn(gen, T, HV, dtype=dt), b=_randn(gen, T, HV, dtype=dt), A_log=_randn(gen, HV),
                dt_bias=_randn(gen, HV), z=_randn(gen, T, HV, DV, dtype=dt), norm_weight=_randn(gen, DV))


# (family, wrapper, its inputs from (generator, dtype)) for every kernel of the prefill path given PDL with it
PREFILL_WRAPPERS = [
    ("linear", "gemm", lambda gen, dt: dict(x=_randn(gen, 3, 37, dtype=dt), weight=_randn(gen, 19, 37, dtype=dt))),
    ("norm_fusion", "gate_up_swiglu_merged",
     lambda gen, dt: dict(x=_randn(gen, 3, 37, dtype=dt), gate_up_weight=_randn(gen, 38, 37, scale=0.2, dtype=dt))),
    ("norm_fusion", "residual_rms_norm",
     lambda gen, dt: dict(x=_randn(gen, 3, 37, dtype=dt), residual=_randn(gen, 3, 37, dtype=dt),
                          weight=_randn(gen, 37, scale=0.1, dtype=dt))),
    ("layer_fusion", "linear_residual",
     lambda gen, dt: dict(x=_randn(gen, 3, 37, dtype=dt), weight=_randn(gen, 19, 37, dtype=dt),
                          residual=_randn(gen, 3, 19, dtype=dt))),
    ("delta_rule", "gated_delta_rule_chunked", lambda gen, dt: _delta_rule_inputs(gen, dt)),
    ("delta_rule", "gated_delta_rule_chunked_gates", lambda gen, dt: _delta_rule_inputs(gen, dt, gates=True)),
    ("conv1d", "conv1d_l2norm_prefill",
     lambda gen, dt: dict(x=_randn(gen, 5, 40, dtype=dt), weight=_randn(gen, 40, 4, scale=0.5, dtype=dt),
                          conv_state=_randn(gen, 40, 4, dtype=dt), key_heads=1, head_dim=12, value_head_dim=8)),
    ("flash_attention", "flash_attention", lambda gen, dt: _attention_inputs(gen, dt, gate=True)),
    ("attention", "attention", lambda gen, dt: _attention_inputs(gen, dt)),
    ("attention", "output_gate",
     lambda gen, dt: dict(o=_randn(gen, 3, 37, dtype=dt), gate=_randn(gen, 3, 37, dtype=dt))),
    ("residual", "residual_add",
     lambda gen, dt: dict(x=_randn(gen, 3, 37, dtype=dt), residual=_randn(gen, 3, 37, dtype=dt))),
    ("swiglu", "swiglu_merged", lambda gen, dt: dict(gate_up=_randn(gen, 3, 74, dtype=dt))),
    ("gated_rmsnorm", "gated_rms_norm",
     lambda gen, dt: dict(x=_randn(gen, 3, 2, 24, dtype=dt), z=_randn(gen, 3, 2, 24, dtype=dt),
                          weight=_randn(gen, 24))),
    ("deltanet_gates", "deltanet_gates",
     lambda gen, dt: dict(b=_randn(gen, 5, 3, dtype=dt), a=_randn(gen, 5, 3, dtype=dt), A_log=_randn(gen, 3),
                          dt_bias=_randn(gen, 3))),
    ("rope", "apply_rope_",          # in place: x is compared after the call
     lambda gen, dt: dict(x=_randn(gen, 3, 2, 24, dtype=dt), cos=_randn(gen, 9, 16, dtype=dt),
                          sin=_randn(gen, 9, 16, dtype=dt), pos=torch.tensor([4, 0, 8], dtype=torch.int32))),
    ("kv_cache", "kv_cache_write",   # in place: the caches are compared after the call
     lambda gen, dt: dict(k=_randn(gen, 3, 2, 12, dtype=dt), v=_randn(gen, 3, 2, 12, dtype=dt),
                          k_cache=torch.zeros(9, 2, 12, dtype=dt), v_cache=torch.zeros(9, 2, 12, dtype=dt),
                          pos=torch.tensor([2, 3, 7], dtype=torch.int32))),
    ("sampling", "sample",           # the threshold search (top-k, then top-p), then the Gumbel-max argmax
     lambda gen, dt: dict(logits=_randn(gen, 2, 301, scale=3.0, dtype=dt), temperature=0.8, top_k=20, top_p=0.9,
                          seed=3)),
]


@pytest.mark.parametrize("family, name, make", PREFILL_WRAPPERS, ids=[f"{f}.{n}" for f, n, _ in PREFILL_WRAPPERS])
def test_the_prefill_kernels_give_the_same_bits_with_pdl(rt, family, name, make):
    """Each wrapper whose kernel the prefill path launches with PDL, at a tiny odd shape, with the switch off
    and on, from the same inputs: the same bits in every output and every tensor it updates in place (on the
    CPU the PDL calls compile to nothing; on a GPU one kernel alone has nothing to overlap)."""
    fn = kernels.get(family, name)

    def run():
        inputs = make(torch.Generator().manual_seed(0), rt.dtype)
        inputs = {key: value.to(rt.device) if isinstance(value, torch.Tensor) else value
                  for key, value in inputs.items()}
        result = fn(**inputs)
        results = list(result) if isinstance(result, tuple) else [result]
        return results + [value for value in inputs.values() if isinstance(value, torch.Tensor)]

    plain = run()
    with programmatic_launches():
        with_pdl = run()
    assert len(plain) == len(with_pdl)
    for a, b in zip(plain, with_pdl):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
