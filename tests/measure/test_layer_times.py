"""The engine per layer (chapter 20_profile, `measure/layer_times.py`): each kernel of a trace placed on the call that
launched it and that call's layer, a trace or a labelling that does not fit the calls refused (planted:
a call list shifted by one, labels shifted by one call), the parts adding up to the step, every level's
structure under the interpreter on the tiny model and, on the meta device, at the real shapes."""
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from tritonllm_course import cli
from tritonllm_course.config import QWEN35_0_8B, TINY
from tritonllm_course.engine import Engine
from tritonllm_course.demo import meta_weights
from tritonllm_course.measure import layer_times as LT
from tritonllm_course.measure import trace as T

LEVELS = ("operators", "fused", "fast")


@pytest.fixture(scope="module")
def measured(rt):
    """layer_times of the tiny model at every level under the interpreter: a 4-token prompt, decode at 4."""
    if rt.on_gpu:
        pytest.skip("the interpreter's structure test; test_layer_times_on_the_gpu runs the GPU")
    out = {}
    for level in LEVELS:
        engine = Engine.random(TINY, torch.float32, "cpu", seed=0, max_seq_len=8, level=level)
        out[level] = LT.layer_times(engine, prompt_len=4, contexts=(4,), steps=1, prompts=1)
    return out


@pytest.fixture(scope="module")
def one_step(rt):
    """Two decode steps of the tiny fast-level engine: their kernels (the interpreter's launches) and the
    traced calls of one, with the decode path's kernels per slot."""
    if rt.on_gpu:
        pytest.skip("the interpreter's launches")
    engine = Engine.random(TINY, torch.float32, "cpu", seed=0, max_seq_len=8, level="fast")
    engine.prefill([3, 5])
    with T.layer_tracing(engine) as calls:
        names, starts, ends = LT.interpreter_events(engine.decode, 2)
    assert calls[:len(calls) // 2] * 2 == calls
    return names, calls[:len(calls) // 2], T.slot_kernels(engine), engine.ops.steps


def _placed(names, calls, per_slot, runs=2):
    slots = [c.slot if isinstance(c, T.Call) else c for c in calls]
    placed = T.place_kernels(names, slots, per_slot, runs)
    T.check_attribution(names, placed, slots, per_slot, runs)
    return placed


def test_each_kernel_falls_on_the_call_that_launched_it(one_step):
    names, calls, per_slot, steps = one_step
    placed = _placed(names, calls, per_slot)
    assert all(p is not None for p in placed)                     # the interpreter runs course kernels only
    assert [run for run, _ in placed] == sorted(run for run, _ in placed)
    for name, (run, j) in zip(names, placed):
        assert name in per_slot[calls[j].slot]
    assert {j for _, j in placed} == set(range(len(calls)))       # every call launched something
    assert calls[0] == T.Call("embedding", T.EMBEDDING) and calls[-1].part == T.HEAD
    T.check_layers(calls, steps, LT.layer_kinds(TINY))


def test_a_call_list_shifted_by_one_is_refused(one_step):
    names, calls, per_slot, _ = one_step
    slots = [c.slot for c in calls]
    for wrong, why in ((slots[1:] + slots[:1], "out of the trace's order"),   # rotated by one
                       (slots[1:], "do not fit"),                               # the first call missing
                       (slots[:1] + slots, "do not fit")):                      # one call too many
        with pytest.raises(T.AttributionError, match=why):
            _placed(names, wrong, per_slot)
    with pytest.raises(T.AttributionError, match="do not fit"):               # a kernel missing from the trace
        _placed(names[:3] + names[4:], slots, per_slot)


def test_labels_shifted_by_one_call_are_refused(one_step):
    _, calls, _, steps = one_step
    kinds = LT.layer_kinds(TINY)
    # each call labelled as the one before it: layer 0 (DeltaNet) ends with layer 1's attention in-projection
    late = [T.Call(c.slot, calls[max(j - 1, 0)].part) for j, c in enumerate(calls)]
    with pytest.raises(T.AttributionError, match=r"layer 0 \(DeltaNet\) calls fused_rmsnorm_linear, which only"):
        T.check_layers(late, steps, kinds)
    # each call labelled as the one after it: layer 0 starts with the embedding, layer 2 with a residual add
    early = [T.Call(c.slot, calls[min(j + 1, len(calls) - 1)].part) for j, c in enumerate(calls)]
    with pytest.raises(T.AttributionError, match="DeltaNet layers 0 and 2 call different slots"):
        T.check_layers(early, steps, kinds)
    swapped = [T.Call(c.slot, 1 - c.part if c.part in (0, 1) else c.part) for c in calls]   # layers 0, 1
    with pytest.raises(T.AttributionError, match="which only (attention|DeltaNet) layers run"):
        T.check_layers(swapped, steps, kinds)
    with pytest.raises(T.AttributionError, match="no calls"):
        T.check_layers([c for c in calls if c.part != 2], steps, kinds)


def test_placing_calls_that_launch_a_kernel_several_times():
    calls = ["norm", "rule", "norm", "rule", "head"]
    per_slot = {"norm": {"rms"}, "rule": {"prep", "scan"}, "head": {"gemv", "rms"}}
    one = ["rms", "prep", "scan", "scan", "rms", "prep", "scan", "scan", "rms", "gemv"]   # scan: twice a call
    placed = T.place_kernels(one * 2, calls, per_slot, 2)
    T.check_attribution(one * 2, placed, calls, per_slot, 2)
    assert placed[:10] == [(0, 0), (0, 1), (0, 1), (0, 1), (0, 2), (0, 3), (0, 3), (0, 3), (0, 4), (0, 4)]
    assert placed[10:] == [(1, j) for _, j in placed[:10]]
    assert T.attribute(one, calls, per_slot, 1) == [calls[j] for _, j in T.place_kernels(one, calls, per_slot, 1)]


def test_the_parts_add_up_and_overlap_counts_once():
    # programmatic dependent launch: each kernel starts before the one before it ends
    starts, ends = [0.0, 8.0, 9.0, 20.0, 30.0], [10.0, 15.0, 18.0, 25.0, 32.0]
    spans = T.timeline_us(starts, ends)
    assert spans == [10.0, 5.0, 3.0, 5.0, 2.0] and sum(spans) == T.busy_us(starts, ends) == 25.0
    calls = [T.Call("embedding", T.EMBEDDING), T.Call("ln1", 0), T.Call("lm_head", T.HEAD)]
    names = ["emb", "memset", "rms", "copy", "gemv"]
    placed = [(0, 0), None, (0, 1), None, (0, 2)]
    parts = {r["part"]: r for r in LT.part_times(names, starts, ends, placed, calls, ["DeltaNet"], 1)}
    assert parts[T.EMBEDDING]["us"] == 10.0 and parts[0]["us"] == 3.0 and parts[T.HEAD]["us"] == 2.0
    assert parts["other"]["us"] == 10.0 and parts["other"]["slots"] == {T.OTHER: 10.0}   # between parts
    inside = [(0, 0), (0, 1), None, (0, 1), (0, 2)]          # unplaced work between two kernels of layer 0
    parts = {r["part"]: r for r in LT.part_times(names, starts, ends, inside, calls, ["DeltaNet"], 1)}
    assert parts[0]["us"] == 13.0 and parts[0]["launches"] == 3 and parts["other"]["us"] == 0.0


@pytest.mark.parametrize("level", LEVELS)
def test_every_layer_with_its_kind_at_every_level(measured, level):
    lt = measured[level]
    kinds = LT.layer_kinds(TINY)
    assert kinds == ["DeltaNet", "attention", "DeltaNet", "attention"] and lt.kinds == kinds
    assert list(lt.phases) == ["prefill 4", "decode @ 4"] and not lt.errors
    delta = {"prefill": "gated_delta_chunked", "decode": "gated_delta_recurrent"}
    for phase in lt.phases.values():
        parts = {r["part"]: r for r in phase.parts}
        assert list(parts) == [T.EMBEDDING, 0, 1, 2, 3, T.HEAD, "other"]
        for i, kind in enumerate(kinds):
            row = parts[i]
            assert row["kind"] == kind and row["us"] > 0 and row["launches"] >= 3
            slots = " ".join(row["slots"])
            assert (delta[phase.path] in slots) == (kind == "DeltaNet")
            assert ("attention" in slots or "flash" in slots) == (kind == "attention")
        assert set(parts[T.EMBEDDING]["slots"]) == {"embedding"}
        assert {"lm_head", "argmax"} <= set(parts[T.HEAD]["slots"])
        assert parts["other"]["us"] == 0                       # the interpreter launches course kernels only
        assert phase.busy_us == pytest.approx(phase.kernel_us)  # one launch at a time: no overlap
        by_kind = {r["kind"]: r for r in phase.kinds()}
        assert sum(r["share"] for r in by_kind.values()) == pytest.approx(1)
        assert by_kind["DeltaNet"]["us"] == pytest.approx(parts[0]["us"] + parts[2]["us"])
        assert by_kind["attention"]["mean_us"] == pytest.approx((parts[1]["us"] + parts[3]["us"]) / 2)
    assert lt.phases["decode @ 4"].cached == 5 and lt.phases["decode @ 4"].wall_us is None


def test_tables_plot_and_json(measured):
    lt = measured["fast"]
    table = lt.table()
    assert "Gated DeltaNet layer (x2): mean, share of all 2" in table and "gated attention layer (x2)" in table
    assert {len(line.split("|")) for line in table.splitlines()} == {7}   # 1 + 2 columns per path, edges
    assert len(lt.layer_table().splitlines()) == 2 + TINY.num_hidden_layers + 3
    assert "fast level, CPU (Triton interpreter)" in str(lt)
    fig = lt.plot()
    assert len(fig.axes) == 2 and len(fig.axes[0].patches) == TINY.num_hidden_layers + 3
    data = json.loads(json.dumps(lt.as_dict()))
    assert data["layer_kinds"] == lt.kinds and data["phases"]["decode @ 4"]["per"] == "token"
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_the_calls_of_every_level_at_the_real_shapes_have_their_layers():
    """An engine of Qwen3.5-0.8B's shapes on the meta device (PyTorch references, no memory): each step is
    the embedding, the 24 layers in order with the kinds' slots, the head."""
    kinds = LT.layer_kinds(QWEN35_0_8B)
    assert kinds.count("attention") == 6 and kinds.count("DeltaNet") == 18
    for level in LEVELS:
        engine = Engine(QWEN35_0_8B, meta_weights(QWEN35_0_8B), max_seq_len=8, default_source="reference",
                        cuda_graph=False, prefill_chunk=4, level=level)
        for path, run in (("prefill", lambda: engine.prefill([0] * 6)), ("decode", engine.decode)):
            with T.layer_tracing(engine) as calls:
                run()
            parts = list(dict.fromkeys(c.part for c in calls))
            assert parts == [T.EMBEDDING, *range(24), T.HEAD], (level, path)
            T.check_layers(calls, engine.ops.steps, kinds)
            if path == "decode" and level == "operators":
                assert Counter(c.slot for c in calls) == T.expected_calls(QWEN35_0_8B)
        assert not [name for name in ("_embed", "_in_proj", "_layers") if name in engine.__dict__]


def test_bad_input_is_refused_before_any_work(rt):
    engine = Engine.random(TINY, torch.float32, "cpu", seed=0, max_seq_len=8)
    for kwargs, match in ((dict(prompt_len=0), "prompt_len"), (dict(prompt_len=9), "prompt_len"),
                          (dict(contexts=(8,)), "need a cache"), (dict(contexts=(0,)), "at least 1 token"),
                          (dict(contexts=()), "at least one"), (dict(steps=0), "steps"),
                          (dict(prompts=0), "prompts")):
        with pytest.raises(ValueError, match=match):
            LT.layer_times(engine, **{"prompt_len": 4, "contexts": (4,), "steps": 1, "prompts": 1, **kwargs})
    assert engine.length == 0
    meta = Engine(TINY, meta_weights(TINY), max_seq_len=8, default_source="reference", cuda_graph=False)
    with pytest.raises(ValueError, match="not on meta"):
        LT.layer_times(meta, prompt_len=4, contexts=(4,), steps=1, prompts=1)


def test_the_command_line(tmp_path, capsys, rt):
    if rt.on_gpu:
        pytest.skip("on a GPU the command measures the real model (test_layer_times_on_the_gpu)")
    assert cli.main(["layers", "--steps", "0"]) == 2
    assert cli.main(["layers", "--budget-s", "nan"]) == 2
    assert "--budget-s must be above 0" in capsys.readouterr().err
    assert cli.main(["layers", "--config", "nope"]) == 2
    assert cli.main(["layers", "--config", ""]) == 2          # not the default: "" was the working folder's config
    assert "unknown config ''" in capsys.readouterr().err
    assert cli.main(["layers", "--config", "qwen3.5-0.8b"]) == 1
    assert "needs a GPU: nothing measured" in capsys.readouterr().err
    args = ["layers", "--levels", "fast", "--prompt-len", "4", "--contexts", "4", "--steps", "1", "--prompts", "1"]
    assert cli.main(args + ["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "fast level, CPU (Triton interpreter)" in out and "nothing written" in out
    assert not list(tmp_path.iterdir())


@pytest.mark.gpu
def test_layer_times_on_the_gpu(tmp_path):
    engine = Engine.random(QWEN35_0_8B, torch.bfloat16, "cuda", seed=0, max_seq_len=1024 + 16, level="fast")
    lt = LT.layer_times(engine, prompt_len=128, contexts=(128, 1024), steps=4, prompts=2)
    assert list(lt.phases) == ["prefill 128", "decode @ 128", "decode @ 1024"] and lt.graph
    for phase in lt.phases.values():
        parts = {r["part"]: r for r in phase.parts}
        assert all(parts[i]["us"] > 0 for i in range(24)) and parts[T.HEAD]["us"] > 0
        # wall time from a run without the profiler, busy time from the profiled one: 2% slack
        assert 0 < phase.busy_us <= 1.02 * phase.wall_us, str(lt)
        assert phase.busy_us <= phase.kernel_us * (1 + 1e-9)
    del engine
    torch.cuda.empty_cache()
    stem = tmp_path / "layers_test"
    LT.write_results([lt], stem, {"model": "Qwen3.5-0.8B", "gpu": "this GPU", "date": "today",
                                  "dtype": "bfloat16", "versions": "-"})
    assert json.loads(stem.with_suffix(".json").read_text())["levels"][0]["level"] == "fast"
    assert stem.with_suffix(".png").exists() and "## fast" in stem.with_suffix(".md").read_text()


@pytest.mark.parametrize("command", ["bench", "layers"])
def test_the_gpu_commands_say_skipped_in_a_fresh_process_without_a_gpu(command):
    """Their modules import triton: the command line switches the interpreter on before that import, so a plain
    shell on a CPU machine (no TRITON_INTERPRET) gets the one line, not setup's traceback."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITONLLM_FORCE_CPU": "1"}
    done = subprocess.run([sys.executable, "-m", "tritonllm_course.cli", command], env=env, capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert "Traceback" not in done.stderr, done.stderr
    assert f"tritonllm-course {command}: skipped:" in done.stdout + done.stderr
