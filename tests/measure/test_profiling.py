"""The profiling helpers of chapter 20_profile: the byte model against docs/qwen35.md §6, kernel calls per token
against the engine's step table, the traced calls with their layers, the attribution of a trace's kernels
to slots (to layers: tests/measure/test_layer_times.py), and the GPU breakdown."""
import json
from collections import Counter

import pytest
import torch

import tritonllm_course
from tritonllm_course.measure import bytes_model as B, profiling as P, trace as T
from tritonllm_course.config import QWEN35_0_8B, TINY
from tritonllm_course.engine import Engine


@pytest.fixture(scope="module")
def tiny_engine():
    return Engine.random(TINY, torch.float32, tritonllm_course.runtime().device, seed=0, max_seq_len=16)


@pytest.mark.parametrize("context", [0, 1, 4096, 262144])
def test_bytes_per_token_is_the_specs(context):
    assert B.bytes_per_token(QWEN35_0_8B, context) == 1_544_820_416 + 12_288 * context


def test_bytes_per_token_item_by_item():
    """The table of docs/qwen35.md §6, line by line."""
    b = B.step_bytes(QWEN35_0_8B, 100)
    assert b["dn_in_proj"] + b["out_proj"] == 18 * 21_037_056                  # GDN matrices
    assert b["conv"] == 18 * 24_576 * 2 + 1_769_472                            # taps; state read + written
    assert b["gates"] + b["gated_rmsnorm"] == 18 * (16 * 4 + 16 * 2 + 128 * 4)    # A_log, dt_bias, norm
    assert b["attn_in_proj"] + b["o_proj"] == 6 * 14_680_064                   # attention matrices
    assert b["q_norm"] + b["k_norm"] == 6 * 1_024
    assert b["gate_up"] + b["down"] == 24 * 22_020_096
    assert b["ln1"] + b["ln2"] == 24 * 4_096
    assert b["final_norm"] == b["embedding"] == 2_048
    assert b["lm_head"] == 508_559_360 + 496_640                               # the table; logits written
    assert b["delta_rule"] == 37_748_736
    assert b["cache_kv_write"] == 12_288 and b["attention"] == 12_288 * 100
    weights = sum(b.values()) - b["delta_rule"] - 1_769_472 - 496_640 - b["cache_kv_write"] - b["attention"]
    assert weights == 1_504_793_280
    slots = B.slot_bytes(QWEN35_0_8B, 100)
    assert slots["in_proj"] == b["attn_in_proj"] + b["dn_in_proj"]
    assert slots["ln2"] == b["ln2"] + b["final_norm"]
    assert sum(slots.values()) == sum(b.values()) and B.FOLDED not in slots


@pytest.mark.parametrize("level", ["fused", "fast"])
def test_fused_slots_count_the_bytes_of_the_steps_they_replace(level):
    from tritonllm_course.engine.plan import LEVELS
    b, slots = B.step_bytes(QWEN35_0_8B, 100), B.slot_bytes(QWEN35_0_8B, 100, steps=LEVELS[level].steps)
    assert sum(slots.values()) == sum(b.values())                               # every byte somewhere
    if level == "fast":     # the DeltaNet in-projection also runs the conv's step
        assert slots["fused_rmsnorm_linear"] == b["attn_in_proj"]
        assert slots["fused_rmsnorm_linear.conv"] == b["dn_in_proj"] + b["conv"]
    else:
        assert slots["fused_rmsnorm_linear"] == b["attn_in_proj"] + b["dn_in_proj"]
    assert slots["fused_gate_up_silu.ln2"] == b["ln2"] + b["gate_up"]
    assert slots["lm_head"] == b["lm_head"]
    folded = b["ln1"] + (b["gates"] + b["gated_rmsnorm"] if level == "fast" else 0)
    assert slots[B.FOLDED] == folded < 100_000                                  # norm weights, gate params
    if level == "fast":
        assert slots["qk_norm_rope_cache"] == b["q_norm"] + b["k_norm"] + b["cache_kv_write"]
        assert slots["fused_linear_residual"] == b["o_proj"] + b["down"]
        assert slots["gated_norm_linear_residual"] == b["out_proj"]
        assert slots["ln2"] == b["final_norm"] and "residual_rmsnorm" not in slots
    else:
        assert slots["splitk_gemv"] == b["o_proj"] + b["out_proj"] + b["down"]
        assert slots["residual_rmsnorm"] == b["final_norm"]


def test_byte_model_follows_the_dtype_and_checks_context():
    half, full = B.bytes_per_token(QWEN35_0_8B, 0), B.bytes_per_token(QWEN35_0_8B, 0, torch.float32)
    assert 1.9 * half < full < 2 * half          # fp32 doubles all but the fp32 state and small tensors
    with pytest.raises(ValueError, match="context"):
        B.bytes_per_token(QWEN35_0_8B, -1)
    assert B.floor_us(QWEN35_0_8B, 0, gbps=4000) == pytest.approx(1_544_820_416 / 4000e9 * 1e6)


def test_recorded_ceiling_is_the_newest_kernel_tables(tmp_path):
    from tritonllm_course.kernels import course_root
    from tritonllm_course.measure.benchmark import recorded_ceiling
    tables = sorted((course_root() / "results").glob("kernels_*.json"), key=lambda p: p.stem.rsplit("_", 1)[-1])
    data = json.loads(tables[-1].read_text())
    ceiling = recorded_ceiling()
    assert ceiling.path == tables[-1] and (ceiling.gpu, ceiling.date) == (data["gpu"], data["date"])
    assert ceiling.gbps == data["results"][0]["ceiling_gbps"] > 0
    assert f"{ceiling.gbps:.0f} GB/s" in tables[-1].with_suffix(".md").read_text().splitlines()[0]
    with pytest.raises(FileNotFoundError, match="no kernel table"):
        recorded_ceiling(tmp_path)
    row = {"gpu": "G", "ceiling_gbps": 1000.0}      # the newest by date; one without rows is passed over
    for date, rows in (("2026-01-02", [row]), ("2026-01-10", []), ("2026-01-03", [{**row, "ceiling_gbps": 2.0}])):
        (tmp_path / f"kernels_g_{date}.json").write_text(json.dumps({"gpu": "G", "date": date, "results": rows}))
    assert recorded_ceiling(tmp_path)[:3] == (2.0, "G", "2026-01-03")


def test_expected_calls_of_the_real_model():
    calls = T.expected_calls(QWEN35_0_8B)
    assert sum(calls.values()) == 335            # 24 x 7 + 6 x 9 + 18 x 6 + embed, final norm, head, argmax, advance
    assert calls["in_proj"] == calls["out_proj"] == 24
    assert calls["ln2"] == 25 and calls["qk_norm"] == 12
    assert calls["decode_attention"] == 6 and calls["gated_delta_recurrent"] == 18
    assert "sample" not in calls
    sampled = T.expected_calls(QWEN35_0_8B, sampling=True)
    assert sampled["sample"] == 1 and "argmax" not in sampled


def test_traced_calls_match_the_op_table(tiny_engine):
    calls = T.traced_calls(tiny_engine)
    assert Counter(calls) == T.expected_calls(TINY)
    assert calls[0] == "embedding" and calls[-2:] == ["argmax", "advance_positions"]


def test_traced_calls_carry_their_layer(tiny_engine):
    calls = T.traced_calls(tiny_engine, layers=True)
    assert Counter(c.slot for c in calls) == T.expected_calls(TINY)
    parts = [c.part for c in calls]
    assert list(dict.fromkeys(parts)) == [T.EMBEDDING, 0, 1, 2, 3, T.HEAD]     # each part once, in order
    assert calls[0] == T.Call("embedding", T.EMBEDDING) and calls[-1] == T.Call("advance_positions", T.HEAD)
    attention = {c.part for c in calls if c.slot == "decode_attention"}
    assert attention == set(TINY.attention_layers)
    assert not {"_embed", "_in_proj", "_layers"} & set(tiny_engine.__dict__)    # the marks are gone


def test_slot_kernels(tiny_engine):
    kernels = T.slot_kernels(tiny_engine)
    for slot in ("in_proj", "out_proj", "gate_up", "down", "lm_head"):
        assert "gemv_kernel" in kernels[slot]
    assert "decode_attention_kernel" in kernels["decode_attention"]
    assert "output_gate_kernel" not in kernels["decode_attention"]
    assert {"argmax_partial_kernel", "argmax_merge_kernel"} <= kernels["argmax"]
    mixed = Engine.random(TINY, torch.float32, "cpu", seed=0, max_seq_len=8, sources={"ln1": "reference"})
    assert T.slot_kernels(mixed)["ln1"] == set()


def test_prefill_calls_and_kernels(tiny_engine):
    calls = T.traced_prefill_calls(tiny_engine, prompt_len=5)
    steps = [s.prefill for s in tiny_engine.ops.steps if s.prefill]
    # every layer's prefill slots, then the head: each prefill slot of the table appears, nothing else
    assert set(calls) <= set(steps) and calls[0] == "embedding" and "lm_head" in calls
    # at prefill every layer's in-projection is one GEMM (the kernels after it read column views)
    assert Counter(calls)["in_proj.prefill"] == TINY.num_hidden_layers
    assert tiny_engine.length == 0                                      # reset afterwards
    kernels = T.slot_kernels(tiny_engine, "prefill")
    assert "gemm_kernel" in kernels["in_proj.prefill"] and "gemv_kernel" in kernels["lm_head"]
    # long prompts on sm_90 run the GEMMs' TMA form, through another module (`tma_gemm.launch`)
    for slot in ("in_proj.prefill", "out_proj.prefill", "gate_up.prefill", "down.prefill"):
        assert "tma_gemm_kernel" in kernels[slot], (slot, kernels[slot])
    assert "gated_delta_recurrent" not in kernels
    with pytest.raises(ValueError, match="path"):
        T.slot_kernels(tiny_engine, "decoding")
    with pytest.raises(ValueError, match="prompt_len"):
        T.traced_prefill_calls(tiny_engine, prompt_len=0)


def test_attribute_follows_the_call_order():
    calls = ["ln1", "in_proj", "ln2", "lm_head", "argmax"]
    per_slot = {"ln1": {"norm"}, "ln2": {"norm"}, "in_proj": {"gemv"}, "lm_head": {"gemv"},
                "argmax": {"partial", "merge"}}
    one = ["norm", "gemv", "norm", "gemv", "partial", "merge"]
    trace = one + ["Memcpy DtoH"] + one
    owners = T.attribute(trace, calls, per_slot, tokens=2)
    assert owners[:6] == ["ln1", "in_proj", "ln2", "lm_head", "argmax", "argmax"]
    assert owners[6] == T.OTHER and owners[7:] == owners[:6]
    # a kernel whose count does not fit the calls cannot be placed among several slots
    assert T.attribute(["norm"] * 3, calls, per_slot, tokens=2) == [T.OTHER] * 3
    assert T.attribute(["partial"] * 3, calls, per_slot, tokens=2) == ["argmax"] * 3


def test_decode_breakdown_needs_a_gpu(tiny_engine, rt):
    if rt.on_gpu:
        pytest.skip("on a GPU the CPU engine is not what is profiled")
    with pytest.raises(RuntimeError, match="GPU"):
        P.decode_breakdown(tiny_engine)
    with pytest.raises(RuntimeError, match="GPU"):
        P.prefill_breakdown(tiny_engine)
    result = {}          # the GPU script reports a failed prefill profile and goes on
    lines = P._prefill_report(tiny_engine, "operators", result)
    assert "failed (RuntimeError" in lines[0] and "prefill_profiles" not in result


@pytest.mark.gpu
def test_decode_breakdown_on_the_gpu():
    engine = Engine.random(QWEN35_0_8B, torch.bfloat16, "cuda", seed=0, max_seq_len=128)
    prof = P.decode_breakdown(engine, steps=4, prompt_len=16)
    assert set(prof.runs) == {"launched op by op", "CUDA graph"}
    for run in prof.runs.values():
        assert run.kernel_us > 0
        # wall time comes from a run without the profiler, kernel times from the profiled one: 2% slack
        assert run.kernel_us <= 1.02 * run.wall_us, str(run)
        slots = {r["slot"]: r for r in run.slots}
        assert slots["lm_head"]["calls"] == 1 and slots["in_proj"]["calls"] == 24, str(run)
        assert slots["lm_head"]["GB/s"] > 0
    assert prof.runs["CUDA graph"].wall_us < prof.runs["launched op by op"].wall_us
    pre = P.prefill_breakdown(engine, prompt_len=40, runs=2)
    assert set(pre) == {"launched op by op", "CUDA graph"}
    for run in pre.values():
        slots = {r["slot"]: r for r in run.slots}
        assert slots["lm_head"]["calls"] == 1 and run.per == "prompt" and "us per prompt" in str(run)
        assert 0 < run.kernel_us <= 1.02 * run.wall_us, str(run)
    assert pre["CUDA graph"].wall_us < pre["launched op by op"].wall_us


def test_the_gpu_script_without_a_gpu_says_why_and_fails(tmp_path, capsys, rt):
    if rt.on_gpu:
        pytest.skip("this machine has a GPU")
    assert P.main(["--out", str(tmp_path)]) == 1
    assert "needs a GPU: nothing measured" in capsys.readouterr().out and not list(tmp_path.iterdir())


def test_prompt_table_puts_a_records_prompts_side_by_side():
    """Chapter 20_profile's prompt table: one column a prompt length of the level asked for (shortest first),
    the slots in the order of the longest prompt's time, a slot absent from a prompt shown as "-"."""
    from tritonllm_course.measure.profiling import prompt_table

    def prompt(level, n, slots, wall):
        rows = [{"slot": s, "calls": 1.0, "us": us, "share": us / sum(slots.values())} for s, us in slots.items()]
        kernel_us = sum(slots.values())
        return {"level": level, "prompt_len": n, "runs": {"CUDA graph": {
            "wall_us": wall, "kernel_us": kernel_us, "launches": 2.0 * len(slots), "kernels": [], "slots": rows}}}
    record = {"prefill_profiles": [
        prompt("fast", 4000, {"gemm": 300.0, "delta": 600.0, "flash": 100.0}, 1100.0),
        prompt("fast", 128, {"gemm": 30.0, "delta": 10.0}, 50.0),
        prompt("fused", 128, {"other": 1.0}, 2.0)]}
    table = prompt_table(record).splitlines()
    assert table[0] == "| slot | 128 tokens: us (share) | 4000 tokens: us (share) |"
    assert [line.split("|")[1].strip() for line in table[2:5]] == ["`delta`", "`gemm`", "`flash`"]
    assert table[2] == "| `delta` | 10.0 (25%) | 600.0 (60%) |"
    assert table[4] == "| `flash` | - | 100.0 (10%) |"
    assert table[5:] == ["| kernels | 40.0 us | 1000.0 us |", "| wall | 50.0 us | 1100.0 us |",
                         "| launches | 4 | 6 |"]
    assert prompt_table(record, level="operators") == ""
