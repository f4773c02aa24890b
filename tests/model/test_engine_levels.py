"""The engine's levels (`engine.plan.LEVELS`): one kernel per operator ("operators"); SwiGLU folded into
gate/up and, at decode, the norms into the projections ("fused"); the fewest kernels, with split-K,
FlashDecoding / FlashAttention and the epilogue fusions ("fast"). The benchmark's rows, each also under the
CUDA graph on a GPU.

On the CPU the kernels run in Triton's interpreter at the tiny config in fp32: every level must give the
reference model's greedy tokens, and the fused levels must launch the kernels their op tables say, fewer
than one per operator. The GPU tests run the real shapes: graph replay against op-by-op launches, and fp32
logits against transformers.
"""
import math
from contextlib import contextmanager

import pytest
import torch

from tritonllm_course.config import QWEN35_0_8B, TINY
from tritonllm_course.engine import Engine
from tritonllm_course.engine.plan import FUSED_STEPS, LEVELS, STEPS, slot_names
from tritonllm_course.generation import generate
from tritonllm_course.hf_compat import hf_model, weights_from_hf
from tritonllm_course.measure import engine_bench
from tritonllm_course.model import Qwen35Model

PROMPT = [5, 17, 301, 42, 7, 99, 256, 3, 64, 128, 11]
NEW = 8

# slot calls per layer of one decode step, and the kernels they launch (split-K and FlashDecoding: two)
CALLS = {"operators": {"linear_attention": 13, "full_attention": 16},
         "fused": {"linear_attention": 10, "full_attention": 13},
         "fast": {"linear_attention": 5, "full_attention": 6}}
LAUNCHED = {"operators": CALLS["operators"], "fused": {"linear_attention": 12, "full_attention": 16},
            "fast": {"linear_attention": 5, "full_attention": 7}}
# and outside the layers, calls: embed, (final norm,) LM head, argmax, advance (the fused level's final
# norm is the last layer's residual add); launches: the same, the argmax in two stages
OUTSIDE = {"operators": 5, "fused": 4, "fast": 5}
OUTSIDE_LAUNCHED = {"operators": 6, "fused": 5, "fast": 6}


@pytest.fixture(scope="module")
def model(rt):
    """The reference model on transformers' tiny random weights (std 0.1: a varied greedy path), fp32."""
    hf = hf_model(TINY, seed=2, perturb_norms=0.3, init_std=0.1)
    ref = Qwen35Model(TINY, {n: t.to(rt.device) for n, t in weights_from_hf(hf).items()})
    return ref, generate(ref, PROMPT, NEW, eos_token_id=None)


@pytest.fixture(scope="module")
def kernel_runs(model):
    """level -> (engine, its greedy tokens) with the course's kernels; the fused engine reads the prompt in
    chunks of 4 (FlashAttention and the chunked delta rule continue after cached tokens)."""
    ref, _ = model
    runs = {}
    for level, chunk in (("operators", 512), ("fused", 4), ("fast", 5)):
        engine = Engine.from_model(ref, max_seq_len=32, level=level, prefill_chunk=chunk, cuda_graph=False)
        runs[level] = engine, engine.generate(PROMPT, NEW, eos_token_id=None)
    return runs


def _per_token(table: dict, level: str, config) -> int:
    outside = OUTSIDE_LAUNCHED if table is LAUNCHED else OUTSIDE
    return sum(table[level][kind] for kind in config.layer_types) + outside[level]


# --- CPU: the kernels -----------------------------------------------------------------------------------
@contextmanager
def _compiled_launches(launched: list):
    """On a GPU: Triton's launch hook appends each compiled kernel's name (the interpreter has no hook)."""
    from triton import knobs

    def hook(metadata):
        launched.append(metadata.get()["name"])

    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add"):                     # Triton >= 3.7: a chain of hooks
        chain.add(hook)
        try:
            yield
        finally:
            chain.remove(hook)
    else:                                         # Triton 3.6: one hook or None
        knobs.runtime.launch_enter_hook = hook
        try:
            yield
        finally:
            knobs.runtime.launch_enter_hook = chain


def test_every_level_gives_the_reference_tokens_in_the_kernels_of_its_op_table(model, kernel_runs, monkeypatch):
    """Each level's greedy tokens are the reference model's; the traced slot calls and the kernels the interpreter
    actually launches per decode token are its op table's. One test for the three engines (a module fixture is
    built again on every xdist worker that needs it)."""
    _, want = model
    for level, (engine, tokens) in kernel_runs.items():
        assert tokens == want and len(set(want)) > NEW // 2, level   # a varied path, not one token repeated
        assert engine.level == level and f"Engine ({level})" in engine.summary()
    assert set(kernel_runs) == set(LEVELS)
    from triton.runtime import interpreter
    launched = []
    grid_call = interpreter.GridExecutor.__call__

    def counting(self, *args, **kwargs):
        launched.append(self.fn.__name__)
        return grid_call(self, *args, **kwargs)

    monkeypatch.setattr(interpreter.GridExecutor, "__call__", counting)
    counts, traced = {}, {}
    for level, (engine, _) in kernel_runs.items():
        launched.clear()
        with engine.tracing() as calls, _compiled_launches(launched):
            engine.decode()
        assert len(calls) == _per_token(CALLS, level, TINY)
        assert len(launched) == engine.ops.launches(calls) == _per_token(LAUNCHED, level, TINY), launched
        counts[level], traced[level] = len(launched), (calls, list(launched))
    calls, launched = traced["fused"]
    assert calls.count("splitk_gemv") == 2 * TINY.num_hidden_layers and "ln2" not in calls
    assert kernel_runs["fused"][0].ops.decode.attention.slot == "flash_decoding"
    assert launched.count("splitk_partial_kernel") == 8
    calls, launched = traced["fast"]
    assert calls.count("fused_linear_residual") == TINY.num_hidden_layers + len(TINY.attention_layers)
    assert calls.count("gated_norm_linear_residual") == len(TINY.linear_layers) and "splitk_gemv" not in calls
    assert launched.count("gemv_residual_kernel") == 6 and "residual_add_kernel" not in launched
    # the conv's step ran in the DeltaNet in-projection's epilogue: no conv kernel of its own
    assert calls.count("fused_rmsnorm_linear.conv") == len(TINY.linear_layers)
    assert not any(name.startswith("conv1d") for name in launched + calls)
    assert counts["fast"] < counts["fused"] < counts["operators"]


def test_real_model_kernel_counts():
    """Qwen3.5-0.8B (18 DeltaNet + 6 attention layers), traced on the meta device."""
    assert engine_bench.kernels_per_token(QWEN35_0_8B, "operators") == (335, 336)
    assert engine_bench.kernels_per_token(QWEN35_0_8B, "fused") == (262, 317)
    assert _per_token(CALLS, "fused", QWEN35_0_8B) == 262 and _per_token(LAUNCHED, "fused", QWEN35_0_8B) == 317
    assert engine_bench.kernels_per_token(QWEN35_0_8B, "fast") == (131, 138)
    assert _per_token(CALLS, "fast", QWEN35_0_8B) == 131 and _per_token(LAUNCHED, "fast", QWEN35_0_8B) == 138


# --- CPU: the plumbing, with the PyTorch references (milliseconds) ----------------------------------------
def test_fused_level_with_reference_sources_and_its_table(model):
    ref, want = model
    engine = Engine.from_model(ref, max_seq_len=32, level="fused", default_source="reference", prefill_chunk=3)
    assert engine.generate(PROMPT, NEW, eos_token_id=None) == want
    table = str(engine.ops)
    for step in FUSED_STEPS:
        assert step.name in table
    for slot in ("fused_rmsnorm_linear", "fused_gate_up_silu.ln2", "splitk_gemv", "flash_decoding",
                 "flash_attention", "residual_rmsnorm"):
        assert slot in table and slot in slot_names("fused") and slot not in slot_names()
    assert [s.name for s in STEPS] == [s.name for s in LEVELS["operators"].steps]       # level 1 unchanged


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fast_level_with_reference_sources(model, dtype):
    """The epilogue adds (bf16, fp32) and, in fp16, the zero residual beside the fp32 stream's own add."""
    ref, want = model
    if dtype == torch.float16:
        ref = Qwen35Model(TINY, {n: t.to(torch.float16) for n, t in ref.weights.items()})
        want = generate(ref, PROMPT, NEW, eos_token_id=None)
    engine = Engine.from_model(ref, max_seq_len=32, level="fast", default_source="reference", prefill_chunk=3)
    assert engine.generate(PROMPT, NEW, eos_token_id=None) == want
    assert "fused_linear_residual" in slot_names("fast") and "attn_residual" not in slot_names("fast")


def test_a_prompt_at_the_fast_level_has_no_gates_or_gated_norm_kernel(model):
    """At a prompt the fast level computes the DeltaNet gates in the chunked rule's first kernel and the
    gated RMSNorm in its last one's epilogue."""
    ref, _ = model
    engine = Engine.from_model(ref, max_seq_len=32, level="fast", default_source="reference")
    with engine.tracing() as calls:
        engine.prefill(PROMPT)
    assert calls.count("gated_delta_chunked.gates") == len(TINY.linear_layers)
    assert "deltanet_gates" not in calls and "gated_rmsnorm" not in calls


def test_a_wrong_fused_kernel_changes_the_tokens(model):
    """The check can fail: a final norm that forgets the (1 + w) scale."""
    ref, want = model

    def forgets_weight(x, residual, weight, eps, h_out, out):
        h_out.copy_(residual + x)
        out.copy_(h_out * torch.rsqrt(h_out.pow(2).mean(-1, keepdim=True) + eps))

    engine = Engine.from_model(ref, max_seq_len=32, level="fused", default_source="reference",
                               sources={"residual_rmsnorm": forgets_weight})
    assert engine.generate(PROMPT, NEW, eos_token_id=None) != want


def test_bad_levels_and_slots_are_named(model):
    ref, _ = model
    with pytest.raises(ValueError, match="level must be one of"):
        Engine.from_model(ref, max_seq_len=8, level="fastest")
    with pytest.raises(KeyError, match="level 'fused' has no slot \\['swiglu.merged'\\]"):
        Engine.from_model(ref, max_seq_len=8, level="fused", default_source="reference",
                          sources={"swiglu.merged": "solutions"})


def test_bench_systems_levels_and_kernel_column(tmp_path):
    assert engine_bench.systems_named(["triton engine + CUDA graph", engine_bench.FUSED, "triton engine"]) == [
        engine_bench.OPERATORS, engine_bench.OPERATORS + engine_bench.GRAPH, engine_bench.FUSED]
    with pytest.raises(ValueError, match="unknown systems"):
        engine_bench.systems_named(["triton turbo"])
    rows = [engine_bench.Row(engine_bench.FUSED + engine_bench.GRAPH, prefill_ms=9.0, decode_ms={128: 0.6},
                             kernels=317),
            engine_bench.Row("transformers eager", prefill_ms=50.0, decode_ms={128: 20.0})]
    result = {"gpu": "Test GPU", "date": "2026-01-01", "dtype": "bfloat16", "model": "random", "versions": "x",
              "prompt_len": 128, "contexts": [128], "steps": 32, "repeats": 3, "ceiling_gbps": 4000.0,
              "rows": [engine_bench.asdict(r) for r in rows]}
    assert "| kernels |" in engine_bench.markdown(result) and "| 317 |" in engine_bench.markdown(result)
    result["levels"] = engine_bench.levels_markdown()
    md = engine_bench.markdown(result)
    assert "| o_proj | `out_proj.prefill` / `out_proj` | `out_proj.prefill` / `splitk_gemv` |" in md
    assert "| ln2 | `ln2` / `ln2` | `ln2` / - |" in md
    assert "| mlp | - | `fused_gate_up_silu.merged` / `fused_gate_up_silu.ln2` |" in md


# --- GPU: real shapes -----------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("level", ["fused", "fast"])
def test_fused_graph_replay_gives_the_tokens_of_the_fused_engine_without_graph(level):
    engine = Engine.random(QWEN35_0_8B, dtype=torch.bfloat16, device="cuda", seed=1, max_seq_len=1200,
                           level=level)
    for n in (100, 1100):        # a short cache (2 splits in use), and one that uses 18 of FlashDecoding's 19
        prompt = torch.randint(0, QWEN35_0_8B.vocab_size, (n,), generator=torch.Generator().manual_seed(n)).tolist()
        engine.use_graph = False
        eager = engine.generate(prompt, 32, eos_token_id=None)
        engine.use_graph = True
        assert engine.generate(prompt, 32, eos_token_id=None) == eager
    assert len(engine._graphs) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("level", ["fused", "fast"])
def test_fused_fp32_teacher_forcing_matches_transformers(level):
    """As test_engine's fp32 check, at the fused levels: top-1 agreement >= 99%, logits within 2e-2."""
    prefill, positions = 16, 256
    tf32, torch.backends.cudnn.allow_tf32 = torch.backends.cudnn.allow_tf32, False   # transformers' conv1d
    try:
        hf = hf_model(QWEN35_0_8B, dtype=torch.float32, device="cuda", seed=0)
        ids = torch.randint(0, QWEN35_0_8B.vocab_size, (prefill + positions,),
                            generator=torch.Generator().manual_seed(0)).tolist()
        with torch.no_grad():
            want = hf(input_ids=torch.tensor([ids], device="cuda")).logits[0, prefill - 1:-1].double()
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    engine = Engine(QWEN35_0_8B, weights_from_hf(hf), max_seq_len=512, level=level)
    rows = [engine.prefill(ids[:prefill]).double().clone()]
    rows += [engine.decode(token).double().clone() for token in ids[prefill:-1]]      # teacher forcing
    got = torch.stack(rows)
    rel = (torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want)).item()
    agree = (got.argmax(-1) == want.argmax(-1)).double().mean().item()
    print(f"{level}, fp32, {positions} positions: logits relative difference {rel:.2e}, top-1 agreement {agree:.1%}")
    assert math.isfinite(rel) and agree >= 0.99 and rel <= 2e-2


@pytest.mark.gpu
def test_bench_runs_the_fused_levels(tmp_path):
    from tritonllm_course import cli
    args = cli.build_parser().parse_args(["bench", "--out", str(tmp_path), "--systems", engine_bench.FUSED,
                                          engine_bench.FUSED + engine_bench.GRAPH,
                                          engine_bench.FAST + engine_bench.GRAPH, "--contexts", "128",
                                          "--steps", "4", "--repeats", "1"])
    assert args.func(args) == 0
    (folder,) = tmp_path.iterdir()
    md = (folder / "bench.md").read_text()
    assert "Triton + fusion + split-K + CUDA Graph" in md and "| 317 |" in md
    assert "Triton, fewest kernels + CUDA Graph" in md and "| 138 |" in md
