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

ROOT = Path(__file__).resolve().parents[1]


def _pdl_kernels(path: Path) -> list[str]:
    """The @triton.jit functions of a kernel module that take a PDL parameter."""
    tree = ast.parse(path.read_text())
    return [f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
            and any(a.arg == "PDL" for a in f.args.args + f.args.kwonlyargs)]


def _modules():
    return sorted((ROOT / "solutions").glob("*.py")) + sorted((ROOT / "exercises").glob("*.py"))


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


def test_every_kernel_of_the_fast_decode_step_launches_with_pdl(rt):
    """On a GPU: the names of the kernels one fast-level decode step launches (Triton's launch hook), each a
    kernel that takes PDL: a kernel launched without it ends the overlap where it stands."""
    if rt.mode != "gpu" or not pdl_supported():
        pytest.skip("needs an sm_90+ GPU")
    import triton
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    takes = {name for path in sorted((ROOT / "solutions").glob("*.py")) for name in _pdl_kernels(path)}
    engine = Engine.random(QWEN35_0_8B, dtype=torch.bfloat16, device="cuda", max_seq_len=64, level="fast",
                           cuda_graph=False, pdl=True)
    engine.prefill([1, 2, 3])
    engine.decode()
    names = []
    hook = lambda metadata: names.append(metadata.get()["name"])   # noqa: E731
    triton.knobs.runtime.launch_enter_hook.add(hook)
    try:
        engine.decode()
        torch.cuda.synchronize()
    finally:
        triton.knobs.runtime.launch_enter_hook.remove(hook)
    assert names, "no Triton launch seen"
    assert sorted(set(names) - takes) == []
