"""The engine from 8-bit weights (`Engine(weight_format=...)`, chapter 31_weight_quant): int8 per channel, int8
per group and fp8 e4m3, each against the course's reference model run with the same weights dequantized.

The oracle quantizes every checkpoint projection and the tied LM head with the reference quantizer
(reference/quant.py) and dequantizes them back: the reference model on those weights computes what the
engine's dequantizing kernels compute, so the tokens must be equal and the logits close to fp32 rounding.
On the CPU the kernels run in Triton's interpreter at the tiny config, in fp32, op by op (no CUDA graph);
on a GPU the graph replay must give what the eager steps give.
"""
import dataclasses
import json

import pytest
import torch

from tritonllm_course import cli
from tritonllm_course.config import QWEN35_0_8B, TINY
from tritonllm_course.demo import meta_weights
from tritonllm_course.engine import Engine
from tritonllm_course.engine import engine as engine_module
from tritonllm_course.engine.merged import GROUP_SIZE, Quantized, merge_bytes, merge_weights
from tritonllm_course.engine.plan import fitted_plan
from tritonllm_course.generation import generate
from tritonllm_course.hf_compat import hf_model, weights_from_hf
from tritonllm_course.measure import bytes_model as B
from tritonllm_course.measure import engine_bench
from tritonllm_course.model import Qwen35Model
from tritonllm_course.reference.quant import dequantize, quantize
from tritonllm_course.triton_helpers import GPUS, compiling_for, gpu_of

PROMPT = [5, 17, 301, 42, 7, 99, 256, 3, 64, 128, 11]
FORMATS = ("int8", "int8_group", "fp8")
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def weights(rt):
    """transformers' tiny model's weights (random, std 0.1: a varied greedy path), fp32 on the runtime's device."""
    hf = hf_model(TINY, seed=2, perturb_norms=0.3, init_std=0.1)
    return {n: t.to(rt.device) for n, t in weights_from_hf(hf).items()}


def prompt_then_tokens(engine: Engine, prompt: list[int], n: int) -> tuple[torch.Tensor, list[int]]:
    """The prompt's last logits and the n greedy tokens after it, from one prefill (`generate` would run the prompt
    again): `prefill` leaves the first token in `counters.ids`, each `decode` the next."""
    logits = engine.prefill(prompt).clone()
    tokens = [int(engine.counters.ids)]
    for _ in range(n - 1):
        engine.decode()
        tokens.append(int(engine.counters.ids))
    return logits, tokens


def _projection(name: str) -> bool:
    """Every matrix the engine quantizes: the attention's q/k/v/o, the DeltaNet's in_proj_* and out_proj, the
    MLP's gate/up/down (the conv taps, norms, A_log and dt_bias stay as they are)."""
    return name.startswith("layers.") and "_proj" in name


def oracle(weights: dict, fmt: str, config=TINY) -> Qwen35Model:
    """The reference model on the weights quantized to `fmt` and dequantized back, the tied head as a
    dequantized copy of the embedding table (which stays as it is)."""
    out = dict(weights)
    for name in [n for n in weights if _projection(n)] + ["lm_head.weight"]:
        w = weights.get(name, weights["embed_tokens.weight"])
        q, scale, group_size = quantize(w, fmt, GROUP_SIZE)
        out[name] = dequantize(q, scale, group_size, w.dtype)
    return Qwen35Model(config, out)


def _skip_without_fp8(fmt, rt):
    gpu = gpu_of(torch.device(rt.device))
    if fmt == "fp8" and gpu is not None and not gpu.fp8:
        pytest.skip(f"fp8 weights need an sm_89+ GPU; this one is sm_{gpu.capability}")


# --- the tokens and the logits of the reference model on the dequantized weights ---------------------------
# the fast level runs the formats of one scale a weight row (plan.FAST_FORMATS)
CASES = [(fmt, level) for level in ("operators", "fused", "fast") for fmt in FORMATS
         if level != "fast" or fmt != "int8_group"]


@pytest.mark.parametrize("fmt, level", CASES)
def test_greedy_tokens_and_logits_equal_the_dequantized_reference(weights, rt, fmt, level):
    """Prompt (11 tokens in chunks of 8 and 3: `quant_gemm` at two lengths) and decode (`quant_gemv`, or at the
    fast level its fused kernels with the row scales), op by op."""
    _skip_without_fp8(fmt, rt)
    ref = oracle(weights, fmt)
    engine = Engine(TINY, weights, max_seq_len=40, level=level, weight_format=fmt, prefill_chunk=8,
                    cuda_graph=False)
    logits, tokens = prompt_then_tokens(engine, PROMPT, NEW_TOKENS)
    want = ref(PROMPT, ref.new_cache(40))[-1]
    err = (logits.double() - want.double()).abs().max() / want.double().abs().max()
    assert err <= 1e-4, f"{fmt} at {level}: logits {err:.2e} (relative to the largest) from the oracle's"
    assert tokens == generate(ref, PROMPT, NEW_TOKENS, eos_token_id=None)
    assert len(set(tokens)) > 3                                  # a varied path, not one token repeated


def test_the_fast_levels_plain_deltanet_decode_takes_8_bit_weights_too(rt):
    """A 3-tap conv: the fast level's decode DeltaNet falls back to the fused level's in-projection (the norm
    folded in, no conv) and out_proj + residual, which take the row scales as well."""
    config = dataclasses.replace(TINY, linear_conv_kernel_dim=3)
    hf = hf_model(config, seed=2, perturb_norms=0.3, init_std=0.1)
    weights = {n: t.to(rt.device) for n, t in weights_from_hf(hf).items()}
    engine = Engine(config, weights, max_seq_len=40, level="fast", weight_format="int8", prefill_chunk=8,
                    cuda_graph=False)
    assert engine.plan.fallbacks[0].startswith("DeltaNet decode: plain kernels")
    ref = oracle(weights, "int8", config)
    assert engine.generate(PROMPT, 6, eos_token_id=None) == generate(ref, PROMPT, 6, eos_token_id=None)


def test_fp16_mode_runs_8_bit_weights_at_every_level(weights, rt):
    """fp16 (a T4's dtype): the residual stream in fp32, and at the fused level every residual add writing the
    stream's scaled fp16 copy, which ln1 and ln2 (now kernels of their own) read; at the fast level's decode the
    norm-folded kernels read that copy and the output projections add a zero residual. Every level: the same
    tokens, the logits within fp16 rounding."""
    half = {n: t.half() if t.dtype == torch.float32 and not n.endswith("A_log") else t for n, t in weights.items()}
    runs = {}
    for level in ("operators", "fused", "fast"):
        engine = Engine(TINY, half, max_seq_len=40, level=level, weight_format="int8", prefill_chunk=8)
        assert engine.wide_stream
        logits, tokens = prompt_then_tokens(engine, PROMPT, NEW_TOKENS)
        runs[level] = tokens, logits.double()
    (tokens, a), *others = runs.values()
    for level, (other_tokens, b) in zip(("fused", "fast"), others):
        assert other_tokens == tokens, level
        assert (a - b).abs().max() <= 1e-2 * a.abs().max(), level


def test_the_weights_are_kept_in_8_bits_and_the_embedding_in_the_model_dtype(weights):
    engine = Engine(TINY, weights, max_seq_len=16, weight_format="int8_group", default_source="reference")
    w = engine.weights
    for layer in w.layers:
        for proj in (layer.mixer_in.weight, layer.mixer_out, layer.gate_up.weight, layer.down):
            assert isinstance(proj, Quantized) and proj.q.dtype == torch.int8 and proj.group_size == GROUP_SIZE
    assert isinstance(w.lm_head, Quantized) and w.lm_head.q.shape == weights["embed_tokens.weight"].shape
    assert w.embed is weights["embed_tokens.weight"]
    native = Engine(TINY, weights, max_seq_len=16, default_source="reference")
    assert w.nbytes() < native.weights.nbytes()
    assert "int8_group weights" in engine.summary() and "weights (merged, int8_group)" in engine.memory()



@pytest.mark.parametrize("fmt", ("native",) + FORMATS)
def test_the_memory_check_counts_every_matrix_the_merge_allocates(weights, fmt):
    """`merge_bytes`, what the engine checks against the device's memory before merging, is at least what the
    merge keeps (native: the stacked copies, the DeltaNet's in_proj_qkv/z/b/a among them, plus one q_proj's
    query and gate rows copied apart; a single projection is kept as it is) and, for 8-bit weights, no more than
    that plus one transient copy in fp32."""
    merged = merge_weights(TINY, weights, fmt)
    given = {t.untyped_storage().data_ptr() for t in weights.values()}
    kept = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
            for layer in merged.layers for part in (layer.mixer_in.weight, layer.mixer_out, layer.gate_up.weight,
                                                    layer.down, merged.lm_head)
            for t in (part.tensors() if isinstance(part, Quantized) else (part,))}
    new = sum(n for ptr, n in kept.items() if ptr not in given)
    need = merge_bytes(TINY, weights, fmt)
    apart = max(t.numel() * t.element_size() for n, t in weights.items() if n.endswith("q_proj.weight"))
    if fmt == "native":
        assert need == new + apart and new > 0
    else:
        largest = max(t.numel() for n, t in weights.items() if _projection(n) or n == "embed_tokens.weight")
        assert new <= need <= new + largest * (4 + weights["embed_tokens.weight"].element_size())

@pytest.mark.parametrize("fmt", ("native", "int8"))
def test_merging_can_drop_each_layers_projections_as_it_goes(weights, fmt):
    """consume=True (`Engine(own_weights=True)`, as `from_pretrained` and `random` build): the same merged weights
    bit for bit, the dict left without a projection (its norms, conv taps and embedding kept), and a memory bound,
    the largest group's, below the whole merge's; `Engine` leaves a caller's dict whole by default."""
    want = merge_weights(TINY, weights, fmt)
    mine = dict(weights)
    got = merge_weights(TINY, mine, fmt, consume=True)

    def flat(merged):
        parts = [merged.embed, merged.norm, merged.lm_head]
        for layer in merged.layers:
            parts += [layer.ln1, layer.ln2, layer.mixer_in.weight, layer.mixer_out, layer.gate_up.weight, layer.down,
                      *layer.small.values()]
        return [t for part in parts for t in (part.tensors() if isinstance(part, Quantized) else (part,))]
    assert all(torch.equal(a, b) for a, b in zip(flat(got), flat(want), strict=True))
    assert [layer.mixer_in.pieces for layer in got.layers] == [layer.mixer_in.pieces for layer in want.layers]
    assert not [n for n in mine if _projection(n)] and set(mine) == {n for n in weights if not _projection(n)}
    assert merge_bytes(TINY, weights, fmt, consume=True) < merge_bytes(TINY, weights, fmt)
    given = dict(weights)
    Engine(TINY, given, max_seq_len=8, weight_format=fmt, default_source="reference")
    assert given.keys() == weights.keys()


def test_reference_sources_run_the_8_bit_weights_too(weights):
    """The quant slots' PyTorch source (the whole weight dequantized, then `F.linear`) gives the same tokens."""
    ref = oracle(weights, "int8")
    engine = Engine(TINY, weights, max_seq_len=40, weight_format="int8", default_source="reference")
    assert engine.generate(PROMPT, NEW_TOKENS, eos_token_id=None) == generate(ref, PROMPT, NEW_TOKENS,
                                                                              eos_token_id=None)


# --- the fast level's fused kernels with 8-bit weights ---------------------------------------------------------
def _scaled_cases(fmt, device, gen):
    """Each fused decode kernel of the fast level on one token, odd sizes (a partial program of rows, several K
    steps), its weight quantized to `fmt`: (name, the kernel's wrapper, its arguments, the reference's)."""
    from tritonllm_course import kernels
    from tritonllm_course.reference import fusion as RF
    NF, LF = (kernels.load(f, "solutions").module for f in ("norm_fusion", "layer_fusion"))

    def randn(*shape, std=1.0):
        return std * torch.randn(*shape, device=device, generator=gen)

    def quantized(N, K):
        q, scale, _ = quantize(randn(N, K, std=0.02), fmt, None)
        return q, scale

    x, nw, res = randn(1, 200), 0.3 * randn(200), randn(1, 131)
    w, s = quantized(131, 200)
    wg, sg = quantized(2 * 70, 200)
    wc, sc = quantized(150, 200)
    conv_w, conv_state = randn(100, 4, std=0.3), randn(100, 4)
    o, z, gw = randn(1, 4, 32), randn(1, 4, 32), randn(32)
    wo, so = quantized(131, 128)
    return [
        ("rms_norm_linear", NF.rms_norm_linear, dict(x=x, norm_weight=nw, weight=w, scale=s), RF.rms_norm_linear),
        ("rms_norm_linear_conv", NF.rms_norm_linear_conv,
         dict(x=x, norm_weight=nw, weight=wc, conv_weight=conv_w, conv_state=conv_state, scale=sc),
         RF.rms_norm_linear_conv),
        ("rms_norm_gate_up_swiglu", NF.rms_norm_gate_up_swiglu, dict(x=x, norm_weight=nw, gate_up_weight=wg,
                                                                     scale=sg), RF.rms_norm_gate_up_swiglu),
        ("linear_residual", LF.linear_residual, dict(x=x, weight=w, residual=res, scale=s), RF.linear_residual),
        ("gated_norm_linear_residual", LF.gated_norm_linear_residual,
         dict(x=o, z=z, norm_weight=gw, weight=wo, residual=res, scale=so), RF.gated_norm_linear_residual),
    ]


@pytest.mark.parametrize("fmt", ("int8", "fp8"))
def test_the_fast_level_kernels_apply_each_rows_scale(rt, fmt):
    """Every fused kernel that reads a projection weight at the fast level's decode, on an 8-bit weight and its
    row scales, against its reference on the dequantized math (`quant_linear`), in fp32."""
    _skip_without_fp8(fmt, rt)
    gen = torch.Generator(device=rt.device).manual_seed(3)
    for name, kernel, args, reference in _scaled_cases(fmt, rt.device, gen):
        ref_args = {k: v.clone() for k, v in args.items()}
        got, want = kernel(**args), reference(**ref_args)
        if isinstance(want, tuple):         # the conv: (y, new state), the state rolled in place
            got, want = (got, args["conv_state"]), want
            assert torch.allclose(got[1], want[1], rtol=1e-5, atol=1e-6), name
            got, want = got[0], want[0]
        err = (got.double() - want.double()).abs().max() / want.double().abs().max()
        assert err <= 1e-5, f"{name} ({fmt}): {err:.2e} from the reference"


def test_the_fused_kernels_refuse_a_bad_8_bit_weight_in_one_line(rt):
    """A prompt (the fused kernels take 8-bit weights one token at a time), scales of the wrong shape, scales with
    a weight that is not 8-bit."""
    from tritonllm_course import kernels
    LF = kernels.load("layer_fusion", "solutions").module
    q, scale, _ = quantize(torch.randn(64, 32, device=rt.device), "int8", None)
    x, res = torch.randn(3, 32, device=rt.device), torch.zeros(3, 64, device=rt.device)
    for bad, message in (({"x": x}, "one token of K = 32"), ({"x": x[:1], "scale": scale[:8]}, "scale"),
                         ({"x": x[:1], "weight": q.float()}, "weight")):
        args = {"x": x[:1], "weight": q, "residual": res[:1], "scale": scale, **bad}
        if "residual" in args and args["x"].shape[0] == 3:
            args["residual"] = res
        with pytest.raises((ValueError, TypeError), match=message) as refused:
            LF.linear_residual(**args)
        assert "\n" not in str(refused.value)


# --- the plan -----------------------------------------------------------------------------------------------
def test_the_plan_runs_the_quant_slots_and_the_fused_level_says_what_it_unfused():
    ops = fitted_plan("operators", TINY, "int8")
    assert not ops.fallbacks
    rows = {s.name: (s.prefill, s.decode) for s in ops.steps}
    for step in ("attn_in_proj", "dn_in_proj", "o_proj", "out_proj", "gate_up", "down"):
        assert rows[step] == ("quant_gemm", "quant_gemv")
    assert rows["lm_head"] == ("quant_gemv", "quant_gemv")
    fused = fitted_plan("fused", TINY, "int8_group")
    rows = {s.name: (s.prefill, s.decode) for s in fused.steps}
    assert rows["ln1"] == ("ln1", "ln1") and rows["swiglu"] == ("swiglu.merged", "swiglu.merged")
    assert rows["down"] == ("quant_gemm.group", "quant_gemv.group") and "mlp" not in rows
    assert rows["attention"] == ("flash_attention", "flash_decoding")       # what reads no weight stays fused
    assert not fused.decode.norm_into_projection and fused.decode.residual_into_final_norm
    assert any("int8_group" in note for note in fused.fallbacks)
    assert fitted_plan("fused", TINY).fallbacks == ()
    fast, native = fitted_plan("fast", TINY, "fp8"), fitted_plan("fast", TINY)
    rows, before = ({s.name: (s.prefill, s.decode) for s in p.steps} for p in (fast, native))
    for step in ("attn_in_proj", "dn_in_proj", "o_proj", "out_proj", "down"):      # decode: the fused kernels
        assert rows[step] == ("quant_gemm.fp8", before[step][1])
    assert rows["mlp"] == (None, "fused_gate_up_silu.ln2") and rows["gate_up"] == ("quant_gemm.fp8", None)
    assert rows["lm_head"] == ("quant_gemv.fp8", "quant_gemv.fp8") and fast.decode == native.decode
    assert not fast.prefill.residual_in_epilogue and any("prompt projections" in n for n in fast.fallbacks)


# --- bad inputs ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["int4", "bf16", None, 8, ["int8"]])
def test_an_unknown_format_is_refused_naming_the_argument_and_the_formats(weights, bad):
    with pytest.raises(ValueError, match=r"weight_format must be one of native, int8, int8_group, fp8"):
        Engine(TINY, weights, max_seq_len=16, weight_format=bad)


def test_the_fast_level_refuses_per_group_weights_before_the_weights_are_made(monkeypatch):
    monkeypatch.setattr(engine_module, "random_weights", lambda *a, **k: pytest.fail("weights were made"))
    with pytest.raises(ValueError, match="level 'fast' does not run int8_group weights") as refused:
        Engine.random(TINY, level="fast", weight_format="int8_group")
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match="weight_format must be one of"):
        Engine.random(TINY, weight_format="int3")


def test_fp8_is_refused_on_a_gpu_before_sm_89_before_any_allocation(weights, monkeypatch):
    monkeypatch.setattr(engine_module.Qwen35Cache, "allocate", lambda *a, **k: pytest.fail("allocated"))
    with compiling_for(GPUS[75]), pytest.raises(ValueError, match=r"fp8'? needs an sm_89\+ GPU.*T4.*sm_75"):
        Engine(TINY, weights, max_seq_len=16, weight_format="fp8")
    with compiling_for(GPUS[89]), pytest.raises(pytest.fail.Exception, match="allocated"):
        Engine(TINY, weights, max_seq_len=16, weight_format="fp8")                    # an L4 gets that far


def test_merged_weights_of_another_format_are_refused(weights):
    native = Engine(TINY, weights, max_seq_len=16, default_source="reference")
    with pytest.raises(ValueError, match="merged= holds native weights; this engine asks for int8"):
        Engine(TINY, weights, max_seq_len=16, weight_format="int8", merged=native.weights)


@pytest.mark.parametrize("argv, message", [
    (["--weights", "int4", "--backend", "triton"], "--weights must be one of native, int8, int8_group, fp8"),
    (["--weights", "int8"], "--weights int8 runs on the engine: add --backend triton"),
    (["--level", "fast"], "--level runs on the engine: add --backend triton"),      # was ignored silently
    (["--no-cuda-graph"], "--no-cuda-graph runs on the engine: add --backend triton"),
    (["--weights", "int8_group", "--backend", "triton", "--level", "fast"],
     "level 'fast' does not run int8_group weights"),
])
def test_the_command_line_refuses_bad_weights_in_one_line(capsys, argv, message):
    status = cli.main(["generate", "--model", "random", "--prompt-ids", "1,2,3", *argv])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith("tritonllm-course generate: error: ") and message in lines[0]


def test_the_command_line_generates_from_int8_weights(capsys):
    """`generate --backend triton --weights int8` gives the engine's tokens from the same random weights."""
    status = cli.main(["generate", "--model", "random", "--prompt-ids", "1,2,3", "--max-new-tokens", "4",
                       "--backend", "triton", "--weights", "int8", "--dtype", "float32", "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    model = Qwen35Model.random(TINY, dtype=torch.float32, device=model_device(), seed=0)
    engine = Engine.from_model(model, max_seq_len=8, weight_format="int8", cuda_graph=False)
    assert json.loads(out)["generated_ids"] == engine.generate([1, 2, 3], 4)
    assert "int8 weights" in err


def model_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def test_the_bench_takes_8_bit_rows_only_where_a_level_runs_them(capsys):
    levels = [engine_bench.OPERATORS, engine_bench.OPERATORS + engine_bench.GRAPH,
              engine_bench.FUSED, engine_bench.FUSED + engine_bench.GRAPH]
    fast = [engine_bench.FAST, engine_bench.FAST + engine_bench.GRAPH, engine_bench.FAST + engine_bench.GRAPH
            + engine_bench.PDL]
    assert engine_bench.systems_named(None, "int8") == levels + fast
    assert engine_bench.systems_named(None, "int8_group") == levels
    assert cli.main(["bench", "--weights", "int4"]) == 2
    assert cli.main(["bench", "--weights", "int8_group", "--systems", engine_bench.FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--weights must be one of" in err[0] and "run no int8_group weights" in err[1]


def test_the_bench_table_of_an_int8_run_prints_the_int8_floor_and_the_int8_steps():
    model = engine_bench.byte_model(QWEN35_0_8B, "int8")
    rows = [engine_bench.Row(engine_bench.FUSED + engine_bench.GRAPH, prefill_ms=9.0, decode_ms={128: 0.6})]
    result = {"gpu": "Test GPU", "date": "2026-01-01", "dtype": "bfloat16", "model": "random", "versions": "x",
              "prompt_len": 128, "contexts": [128], "steps": 32, "repeats": 3, "ceiling_gbps": 4000.0,
              "weights": "int8", **model, "rows": [engine_bench.asdict(r) for r in rows],
              "levels": engine_bench.levels_markdown("int8")}
    md = engine_bench.markdown(result)
    assert f"Bandwidth floor: {model['weight_and_state_bytes']:,} + " in md
    assert model["weight_and_state_bytes"] == B.bytes_per_token(QWEN35_0_8B, 0, weight_format="int8")
    assert "The Triton rows read int8 weights" in md and "fast: prefill / decode" in md
    assert "| down | `quant_gemm` / `quant_gemv` | `quant_gemm` / `quant_gemv` |" in md


def test_kernels_per_token_counts_the_unfused_steps_of_8_bit_weights():
    """At the fused level 8-bit weights put ln1, ln2 and the SwiGLU back into kernels of their own; the fast
    level's decode step launches the same kernels from int8 and fp8."""
    calls, _ = engine_bench.kernels_per_token(TINY, "fused")
    calls8, _ = engine_bench.kernels_per_token(TINY, "fused", "int8")
    assert calls8 == calls + 3 * TINY.num_hidden_layers
    fast, _ = engine_bench.kernels_per_token(TINY, "fast")
    assert engine_bench.kernels_per_token(TINY, "fast", "int8")[0] == fast
    assert engine_bench.kernels_per_token(TINY, "fast", "fp8")[0] == fast


# --- the byte model -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", [TINY, QWEN35_0_8B], ids=["tiny", "0.8b"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_byte_model_counts_8_bit_weights_and_their_scales(config, fmt):
    """From the checkpoint's shapes: every projection and the head at one byte a weight plus fp32 scales
    (a row's; int8_group a row's per 128 columns) in place of two bytes a weight (bf16)."""
    shapes = {n: t.shape for n, t in meta_weights(config).items()}
    matrices = [s for n, s in shapes.items() if _projection(n)] + [shapes["embed_tokens.weight"]]
    bf16 = sum(2 * N * K for N, K in matrices)
    scales = sum(N * (-(-K // GROUP_SIZE) if fmt == "int8_group" else 1) for N, K in matrices)
    eight_bit = sum(N * K for N, K in matrices) + 4 * scales
    for context in (0, 100):
        assert (B.bytes_per_token(config, context, weight_format=fmt)
                == B.bytes_per_token(config, context) - bf16 + eight_bit)
    fixed = engine_bench.byte_model(config, fmt)["weight_and_state_bytes"]
    assert fixed == B.bytes_per_token(config, 0) - bf16 + eight_bit
    assert B.floor_us(config, 0, gbps=4000, weight_format=fmt) < 0.6 * B.floor_us(config, 0, gbps=4000)
    with pytest.raises(ValueError, match="weight_format must be one of"):
        B.bytes_per_token(config, 0, weight_format="int4")


# --- on a GPU: the CUDA graph ---------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("level", ["operators", "fused", "fast"])
def test_graph_replay_equals_the_eager_steps_with_int8_weights(weights, level):
    """The decode step captured with the quant kernels replays the eager step's tokens and logits, bit for bit."""
    runs = []
    for graph in (False, True):
        engine = Engine(TINY, weights, max_seq_len=64, level=level, weight_format="int8", cuda_graph=graph)
        tokens = engine.generate(PROMPT, 16, eos_token_id=None)
        runs.append((tokens, engine.counters.logits.clone()))
    assert runs[0][0] == runs[1][0]
    assert torch.equal(runs[0][1], runs[1][1])
