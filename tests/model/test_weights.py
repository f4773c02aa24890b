"""Loading checkpoints (save_pretrained layout and the hub's multimodal layout), random weights, errors."""
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from tritonllm_course.config import QWEN35_0_8B, TINY, Qwen35Config
from tritonllm_course.hf_compat import hf_from_pretrained, hf_model, weights_from_hf
from tritonllm_course.model import Qwen35Model
from tritonllm_course.safe_files import UnsafeWrite
from tritonllm_course.weights import (CheckpointNotFound, WeightError, count_parameters, expected_shapes,
                                      load_weights, random_weights, resolve_checkpoint, write_hub_checkpoint)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A Qwen3_5ForCausalLM.save_pretrained directory of the tiny config, and the model."""
    hf = hf_model(TINY, seed=0, perturb_norms=0.3, init_std=0.1)
    path = tmp_path_factory.mktemp("hf")
    hf.save_pretrained(path)
    return path, hf


def test_load_save_pretrained_layout(hf_dir):
    path, hf = hf_dir
    config, weights = load_weights(path)
    assert config == TINY.replace(eos_token_id=config.eos_token_id, bos_token_id=config.bos_token_id)
    expected = weights_from_hf(hf)
    assert weights.keys() == expected.keys()
    assert all(torch.equal(weights[k], expected[k]) for k in expected)


@pytest.mark.parametrize("shards", [1, 3])
def test_load_hub_layout(hf_dir, tmp_path, shards):
    path, hf = hf_dir
    hub = write_hub_checkpoint(path, tmp_path / "hub", num_shards=shards, dtype=torch.bfloat16)
    config_json = json.loads((hub / "config.json").read_text())
    assert config_json["model_type"] == "qwen3_5" and config_json["text_config"]["hidden_size"] == 128
    keys = set().union(*(load_file(str(f)).keys() for f in hub.glob("*.safetensors")))
    assert "model.language_model.layers.0.linear_attn.A_log" in keys and "lm_head.weight" not in keys
    assert any(k.startswith("model.visual.") for k in keys) and any(k.startswith("mtp.") for k in keys)

    config, weights = load_weights(hub)                             # stored dtypes: bf16 + fp32 A_log/norm
    assert config.hidden_size == TINY.hidden_size and config.layer_types == TINY.layer_types
    assert weights["layers.0.linear_attn.A_log"].dtype == torch.float32
    assert weights["layers.0.linear_attn.norm.weight"].dtype == torch.float32
    assert weights["layers.0.linear_attn.dt_bias"].dtype == torch.bfloat16
    assert weights.keys() == weights_from_hf(hf).keys()
    _, rounded = load_weights(hub, dtype=torch.bfloat16, match_hf_rounding=True)
    assert rounded["layers.0.linear_attn.A_log"].dtype == torch.bfloat16


def test_transformers_reads_the_hub_layout_we_write(hf_dir, tmp_path):
    """The writer's layout is the one transformers expects of the real checkpoint."""
    path, hf = hf_dir
    hub = write_hub_checkpoint(path, tmp_path / "hub", num_shards=2)
    again = hf_from_pretrained(hub)
    ids = torch.arange(10)[None]
    with torch.no_grad():
        assert torch.equal(again(ids).logits, hf(ids).logits)
    model = Qwen35Model.from_pretrained(hub)
    assert torch.allclose(model(ids[0]), hf(ids).logits[0, -1:], rtol=1e-5, atol=1e-5)


def test_the_hub_writer_never_writes_through_a_link(hf_dir, tmp_path):
    """A link where the writer puts config.json is refused and its target kept; a shard left there as a link
    from an earlier layout is removed, its target untouched."""
    path, _ = hf_dir
    outside = tmp_path / "outside.json"
    outside.write_text("kept")
    hub = tmp_path / "hub"
    hub.mkdir()
    (hub / "config.json").symlink_to(outside)
    with pytest.raises(UnsafeWrite, match="config.json is a symbolic link"):
        write_hub_checkpoint(path, hub)
    assert outside.read_text() == "kept"
    (hub / "config.json").unlink()
    old_shard = tmp_path / "old.safetensors"
    old_shard.write_bytes(b"old")
    (hub / "model-00001-of-00009.safetensors").symlink_to(old_shard)
    write_hub_checkpoint(path, hub)
    assert old_shard.read_bytes() == b"old" and not (hub / "model-00001-of-00009.safetensors").exists()
    assert sorted(p.name for p in hub.glob("model*")) == ["model.safetensors"]


def _rewrite(src, dst, edit):
    """Copy checkpoint `src` to `dst` with edit(tensors) applied to its single safetensors file."""
    dst.mkdir()
    (dst / "config.json").write_text((src / "config.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def test_missing_tensor_is_named(hf_dir, tmp_path):
    path, _ = hf_dir
    bad = _rewrite(path, tmp_path / "bad", lambda t: t.pop("model.layers.0.linear_attn.dt_bias"))
    with pytest.raises(WeightError, match=r"missing tensor layers\.0\.linear_attn\.dt_bias \(expected shape \[4\]\)"):
        load_weights(bad)


def test_mis_shaped_tensor_names_both_shapes(hf_dir, tmp_path):
    path, _ = hf_dir

    def shrink(t):
        t["model.layers.2.mlp.down_proj.weight"] = t["model.layers.2.mlp.down_proj.weight"][:, :200].clone()
    bad = _rewrite(path, tmp_path / "bad", shrink)
    with pytest.raises(WeightError, match=r"layers\.2\.mlp\.down_proj\.weight has shape \[128, 200\]; "
                                          r"the config expects \[128, 256\]"):
        load_weights(bad)


def test_unexpected_tensor_and_untied_head(hf_dir, tmp_path):
    path, _ = hf_dir
    extra = _rewrite(path, tmp_path / "extra", lambda t: t.update({"model.layers.0.typo.weight": torch.zeros(1)}))
    with pytest.raises(WeightError, match="typo"):
        load_weights(extra)
    untied = TINY.replace(tie_word_embeddings=False)
    weights = random_weights(TINY)
    with pytest.raises(WeightError, match=r"missing tensor lm_head\.weight \(expected shape \[512, 128\]\)"):
        Qwen35Model(untied, weights)


def test_random_weights_shapes_and_init():
    w = random_weights(TINY, seed=3)
    assert {k: tuple(v.shape) for k, v in w.items()} == expected_shapes(TINY)
    assert torch.all(w["layers.0.input_layernorm.weight"] == 0)        # zero-centred: scale 1
    assert torch.all(w["layers.3.self_attn.q_norm.weight"] == 0)
    assert torch.all(w["layers.0.linear_attn.norm.weight"] == 1)       # gated norm: plain weight
    assert torch.all(w["layers.0.linear_attn.dt_bias"] == 1)
    a = w["layers.0.linear_attn.A_log"].exp()
    assert torch.all((a >= 0.01) & (a <= 16))
    assert abs(w["embed_tokens.weight"].std().item() - 0.02) < 0.002
    assert torch.equal(random_weights(TINY, seed=3)["layers.1.mlp.up_proj.weight"], w["layers.1.mlp.up_proj.weight"])
    up = "layers.1.mlp.up_proj.weight"
    assert not torch.equal(random_weights(TINY, seed=4)[up], w[up])
    half = random_weights(TINY, dtype=torch.bfloat16)
    assert half["layers.0.linear_attn.A_log"].dtype == torch.float32 and half["norm.weight"].dtype == torch.bfloat16


def test_parameter_count_of_the_real_model():
    assert count_parameters(QWEN35_0_8B) == 752_393_024
    assert len(expected_shapes(QWEN35_0_8B)) == 320            # transformers' 321 state_dict keys less the tied head


def test_bad_sources(tmp_path):
    with pytest.raises(CheckpointNotFound, match="not a hub id"):
        resolve_checkpoint(str(tmp_path / "nowhere" / "x" / "y"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text(json.dumps({"model_type": "qwen3_5_text", **TINY.to_hf_dict()}))
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        load_weights(tmp_path / "empty")
    assert Qwen35Config.from_json(tmp_path / "empty").layer_types == TINY.layer_types


def test_hub_id_offline_gives_a_clear_error(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path))
    code = "from tritonllm_course.weights import resolve_checkpoint; resolve_checkpoint('Qwen/Qwen3.5-0.8B')"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "could not download 'Qwen/Qwen3.5-0.8B'" in run.stderr and "local directory" in run.stderr


def test_the_bench_reads_a_checkpoint_with_both_loaders(hf_dir):
    """`tritonllm-course bench --model DIR`: transformers reads the files through its own `from_pretrained`, the
    engines through the course's loader in bf16 (what `Engine.from_pretrained` runs), not a copy of
    transformers' tensors; the two hold the same weights."""
    from tritonllm_course.measure.engine_bench import read_checkpoint
    path, _ = hf_dir
    hf, weights, config = read_checkpoint(str(path), "cpu")
    assert config.hidden_size == TINY.hidden_size and config.num_hidden_layers == TINY.num_hidden_layers
    theirs = weights_from_hf(hf)
    assert weights.keys() == theirs.keys()
    assert not any(weights[k].data_ptr() == theirs[k].data_ptr() for k in theirs)     # two reads of the files
    assert all(torch.equal(weights[k].to(theirs[k].dtype), theirs[k]) for k in theirs)
