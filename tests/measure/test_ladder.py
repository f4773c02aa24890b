"""The ladder of chapter 29_naive_to_fast (`tritonllm_course.ladder`): its naive projection, its table of steps, every
step's greedy tokens against the reference model's, and its results.

On the CPU the kernels run in Triton's interpreter at the tiny config in fp32: every step must give the
reference model's tokens (the steps whose one change is the CUDA graph or PDL run the code of the step before
there, and are left to the GPU). The GPU test runs the measurement's entry point at the real shapes on a few
steps, naive included, with its fp32 token check.
"""
import dataclasses
import json

import pytest
import torch

from tritonllm_course import ladder
from tritonllm_course.config import TINY
from tritonllm_course.ladder import results
from tritonllm_course.ladder.naive import Transposed, per_output_linear, token_by_token
from tritonllm_course.ladder.rungs import RUNGS, EnginePath, ModelPath, attention_by_path


def _pair(rt, n, k, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, k, generator=gen).to(rt.device, dtype)
    w = (0.02 * torch.randn(n, k, generator=gen)).to(rt.device, dtype)
    return x, w


# --- the naive projection ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("n, k", [(77, 45), (130, 129)])
def test_per_output_linear_in_both_layouts(rt, dtype, n, k):
    x, w = _pair(rt, n, k, dtype)
    want = x.double() @ w.double().T
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    transposed = w.t().contiguous().t()                     # [N, K] view of a [K, N] storage: strides (1, N)
    assert transposed.stride() == (1, n)
    for weight in (w, transposed):
        out = torch.full((1, n), float("nan"), dtype=dtype, device=rt.device)
        got = per_output_linear(x, weight, out=out)
        assert got is out and torch.allclose(got.double(), want, atol=tol, rtol=tol)
    assert per_output_linear(x[0], w).shape == (n,)


def test_transposed_reads_its_copy_and_token_by_token_launches_per_row(rt):
    _, w = _pair(rt, 33, 20, torch.float32)
    x = torch.randn(5, 20, generator=torch.Generator().manual_seed(1)).to(rt.device)
    calls = []

    def counted(x, weight, out=None):
        calls.append(weight.stride())
        return per_output_linear(x, weight, out=out)

    linear = token_by_token(Transposed({"m": w}, counted))
    got = linear(x, w)
    assert len(calls) == 5 and set(calls) == {(1, 33)}     # one launch per row, each on the transposed copy
    assert torch.allclose(got, x @ w.T, atol=1e-5)
    with pytest.raises(ValueError, match="no transposed copy"):
        Transposed({"m": w})(x[:1], w.clone())


def test_bad_inputs_are_named_before_any_launch(rt):
    x, w = _pair(rt, 8, 16, torch.float32)
    with pytest.raises(ValueError, match="one token.*token_by_token"):
        per_output_linear(torch.cat([x, x]), w)
    with pytest.raises(TypeError, match="dtype"):
        per_output_linear(x.half(), w)
    with pytest.raises(ValueError, match="one token"):
        per_output_linear(x[:, :8], w)
    with pytest.raises(ValueError, match="last dimension"):
        token_by_token(per_output_linear)(x[:, :8], w)


def test_attention_by_path_sends_one_token_to_the_decode_kernel():
    seen = {}
    prefill = lambda q, k, v, pos, scale: seen.setdefault("prefill", q.shape[0]) and q           # noqa: E731
    decode = lambda q, k, v, length, scale: seen.setdefault("decode", int(length[0])) and q       # noqa: E731
    attention = attention_by_path(prefill, decode)
    q, kv = torch.zeros(3, 4, 8), torch.zeros(9, 2, 8)
    assert attention(q, kv, kv, torch.arange(6, 9), 1.0).shape == (3, 4, 8)
    assert attention(q[:1], kv, kv, torch.tensor([8]), 1.0).shape == (1, 4, 8)
    assert seen == {"prefill": 3, "decode": 9}


# --- the table -------------------------------------------------------------------------------------------------
def test_each_step_changes_one_thing():
    keys = [s.key for s in RUNGS]
    assert len(set(keys)) == len(keys) and keys[0] == "naive" and keys[-1] == "pdl"
    for before, step in zip(RUNGS, RUNGS[1:]):
        if type(before.path) is type(step.path):
            changed = [f.name for f in dataclasses.fields(step.path)
                       if getattr(before.path, f.name) != getattr(step.path, f.name)]
            assert len(changed) == 1, f"{step.key} changes {changed}"
    model_steps = [s for s in RUNGS if isinstance(s.path, ModelPath)]
    assert model_steps[0].path == ModelPath() and not model_steps[-1].path.sync
    assert RUNGS[-1].path == EnginePath("fast", cuda_graph=True, pdl=None)      # the engine's own default
    assert [s.key for s in ladder.rungs_for("cpu")] == [k for k in keys if k not in ("graph", "pdl")]
    with pytest.raises(KeyError, match="no step"):
        ladder.rung_named("turbo")
    with pytest.raises(ValueError, match="projection"):
        ModelPath(projection="diagonal")


# --- every step, token for token (CPU: the interpreter, tiny, fp32) ---------------------------------------------
@pytest.fixture(scope="module")
def climbed(rt):
    if rt.on_gpu:
        pytest.skip("the CPU ladder; the GPU test below runs the real shapes")
    return ladder.measure("tiny", torch.float32, "cpu", steps=ladder.rungs_for("cpu"), prompt_len=3, tokens=3,
                          uncached_tokens=2, repeats=1)


def test_every_step_gives_the_reference_models_greedy_tokens_in_the_calls_it_says(climbed):
    """One test for the one climb (a module fixture is built again on every xdist worker that needs it)."""
    for row in climbed["steps"]:
        assert not row["error"], f"{row['key']}: {row['error']}"
        assert row["identical"] and row["tokens"] == row["reference"], row["key"]
        assert row["prefill_ms"] > 0 and row["decode_ms"] > 0
    assert climbed["check"]["dtype"] == "float32" and climbed["floor_ms"] is None      # no floor off a GPU
    # the kernel calls a token fall as the steps say
    calls = {r["key"]: r["calls_per_token"] for r in climbed["steps"]}
    tiny_rows = 4                                      # the decode step runs the 3-token prompt + 1 again
    projections = 31                                   # per token row at the tiny config (4 layers, lm_head once)
    assert calls["naive"] == calls["coalesced"] == calls["gemv"] >= tiny_rows * (projections - 1)
    assert calls["gemm"] < calls["gemv"] and calls["kv_cache"] == calls["gemm"]       # per projection, not per row
    assert calls["fused_norm"] == calls["flash"] - TINY.num_hidden_layers             # one kernel for two, per layer
    assert calls["fast"] < calls["engine"] < calls["no_sync"]


def test_a_check_of_its_own_beside_a_low_precision_run(rt):
    """The GPU's way on the CPU: timed in fp16 on transformers' initialisation, checked in fp32 on varied weights."""
    if rt.on_gpu:
        pytest.skip("the GPU test below runs the real shapes")
    steps = [ladder.rung_named(k) for k in ("kv_cache", "fast")]
    res = ladder.measure("tiny", torch.float16, "cpu", steps=steps, prompt_len=3, tokens=3, uncached_tokens=2,
                         repeats=1, check_prompt_len=3, check_tokens=3)
    assert res["check"]["weights"].endswith("a run of its own") and res["dtype"] == "float16"
    for row in res["steps"]:
        assert not row["error"] and not row["check_error"] and row["identical"], row["key"]
        assert len(row["tokens"]) == 3 and row["decode_tokens"] == {"kv_cache": 2, "fast": 1}[row["key"]]


def test_a_spent_budget_skips_the_steps_it_names(rt):
    rows = ladder.climb(TINY, {"w": torch.zeros(1)}, steps=RUNGS[:2], check=None, budget_s=-1)
    assert all(r.error.startswith("skipped: the run's time budget") and r.decode_ms is None for r in rows)
    with pytest.raises(ValueError, match="tokens must be >= 3"):
        ladder.climb(TINY, {"w": torch.zeros(1)}, tokens=2, check=None)


# --- the results --------------------------------------------------------------------------------------------------
def _fake(date="2026-12-03"):
    steps = []
    for key, prefill, decode in [("naive", 2000.0, 1900.0), ("coalesced", 500.0, 480.0), ("gemv", None, None),
                                 ("gemm", 20.0, 19.0), ("kv_cache", 19.0, 2.0)]:
        steps.append({"key": key, "label": key, "change": "c", "article": "4.1", "chapter": "05",
                      "prefill_ms": prefill, "decode_ms": decode, "prefill_runs": 1, "decode_tokens": 1,
                      "calls_per_token": 10.0, "setup_s": 1.0, "tokens": [1], "reference": [1],
                      "identical": True, "error": "" if decode else "failed: boom"})
    return {"gpu": "Test GPU", "date": date, "config": "qwen3.5-0.8b", "dtype": "bfloat16", "versions": "v",
            "prompt_len": 128, "tokens": 32, "uncached_tokens": 2, "repeats": 3, "bytes_per_token": 1_546_000_000,
            "ceiling_gbps": 4000.0, "floor_ms": 0.3865, "seconds": 60.0, "steps": steps,
            "check": {"dtype": "float32", "weights": "w", "prompt_len": 8, "tokens": 4}}


def test_speedups_are_against_the_last_measured_step_and_the_floor(tmp_path):
    rows = {r["key"]: r for r in results.speedups(_fake())}
    assert rows["naive"]["decode_x"] is None and rows["coalesced"]["decode_x"] == pytest.approx(1900 / 480)
    assert rows["gemm"]["prefill_x"] == pytest.approx(500 / 20)           # the failed gemv row is stepped over
    assert rows["kv_cache"]["decode_floor_x"] == pytest.approx(2.0 / 0.3865)
    total = results.totals(_fake())
    assert total["decode_x"] == pytest.approx(950) and total["to"] == "kv_cache"
    md = results.markdown(_fake())
    assert "| 2 | gemv | c | - |" in md and "failed: boom" in md and "decode 950x" in md
    paths = results.write(_fake(), tmp_path / "ladder_test-gpu_2026-12-03")
    assert [p.suffix for p in paths] == [".json", ".md", ".png"] and all(p.stat().st_size for p in paths)
    results.write(_fake("2026-12-04"), tmp_path / "ladder_test-gpu_2026-12-04")
    assert results.newest(tmp_path).name == "ladder_test-gpu_2026-12-04.json"
    assert results.load(results.newest(tmp_path))["date"] == "2026-12-04" and results.newest(tmp_path / "no") is None


def test_the_entry_point_needs_a_gpu(rt, tmp_path, capsys):
    if rt.on_gpu:
        pytest.skip("on a GPU the entry point measures: the GPU test runs it")
    from tritonllm_course.ladder.__main__ import main
    assert main(["--out", str(tmp_path)]) == 1
    assert "needs a GPU" in capsys.readouterr().out and not list(tmp_path.iterdir())


# --- GPU: the real shapes ---------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_the_entry_point_on_a_few_steps(tmp_path):
    from tritonllm_course.ladder.__main__ import main
    steps = ["naive", "gemm", "kv_cache", "flash", "no_sync", "engine", "pdl"]
    # the ladder starts no step after --budget-s (210 s by default): beside a busy GPU suite the naive steps take
    # longer than alone, and a step skipped for time would fail this test for the machine's load, not the code
    assert main(["--out", str(tmp_path), "--steps", *steps, "--tokens", "4", "--repeats", "1",
                 "--budget-s", "600"]) == 0
    (found,) = tmp_path.glob("ladder_*.json")
    res = json.loads(found.read_text())
    assert [r["key"] for r in res["steps"]] == steps
    assert all(r["identical"] and not r["error"] for r in res["steps"])
    assert res["floor_ms"] > 0 and found.with_suffix(".png").exists()
    rows = {r["key"]: r for r in res["steps"]}
    assert rows["naive"]["decode_ms"] > rows["kv_cache"]["decode_ms"] > rows["pdl"]["decode_ms"]
