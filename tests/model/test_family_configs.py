"""The dense Qwen3.5 family presets (`config.FAMILY`): they construct, their derived sizes fit the kernels'
assumptions, every value has a cited source (`PRESET_SOURCES`), `parameter_count` counts exactly the
tensors the weights module expects (and transformers builds), and each preset builds the same
`Qwen3_5TextConfig`. CPU only, no weights: the models are built on the `meta` device."""
import dataclasses

import pytest
import torch

from tritonllm_course.config import (FAMILY, PRESET_SOURCES, PRESETS, QWEN35_0_8B, QWEN35_27B,
                                     Qwen35Config, get_config, parameter_count)
from tritonllm_course.weights import expected_shapes

DEFAULTS = Qwen35Config()
FIELDS = [f.name for f in dataclasses.fields(Qwen35Config) if f.name != "full_attention_interval"]
# Qwen3.5-0.8B's text decoder: docs/qwen35.md §2, checked there on a model built on the meta device. The
# model card's "0.8B" counts the whole checkpoint (vision tower and MTP head too), so the text decoder's
# count sits a little under it.
PARAMS_0_8B = 752_393_024


@pytest.mark.parametrize("name", FAMILY)
def test_preset_constructs_and_is_found_by_name(name):
    config = PRESETS[name]
    assert isinstance(config, Qwen35Config)
    assert get_config(name) is config
    assert Qwen35Config(**{f: getattr(config, f) for f in FIELDS}) == config      # rebuilt from its fields
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.hidden_size = 1                                                       # frozen


@pytest.mark.parametrize("name", FAMILY)
def test_derived_sizes_are_consistent(name):
    c = PRESETS[name]
    assert c.conv_dim == 2 * c.linear_num_key_heads * c.linear_key_head_dim \
        + c.linear_num_value_heads * c.linear_value_head_dim
    assert c.gqa_group * c.num_key_value_heads == c.num_attention_heads
    assert c.linear_num_value_heads % c.linear_num_key_heads == 0                 # value heads share key heads
    assert c.rotary_dim == 64 and c.rotary_dim % 2 == 0
    assert c.num_hidden_layers % 4 == 0
    assert c.attention_layers == list(range(3, c.num_hidden_layers, 4))          # every 4th layer
    assert len(c.linear_layers) == 3 * len(c.attention_layers)
    assert c.head_dim == 256                                                     # given, not hidden / heads


@pytest.mark.parametrize("name", FAMILY)
def test_every_value_has_a_source(name):
    sources = PRESET_SOURCES[name]
    config = PRESETS[name]
    differing = {f for f in FIELDS if getattr(config, f) != getattr(DEFAULTS, f)}
    assert differing | {"tie_word_embeddings"} <= set(sources), sorted(differing - set(sources))
    assert set(sources) <= set(FIELDS)
    assert all(isinstance(v, str) and v.strip() for v in sources.values())


def test_the_known_structure_of_the_family():
    """The differences the kernels see: value heads per key head 1, 1, 2, 2, 3; untied heads at 9B and 27B."""
    ratios = [PRESETS[n].linear_num_value_heads // PRESETS[n].linear_num_key_heads for n in FAMILY]
    assert ratios == [1, 1, 2, 2, 3]
    assert [PRESETS[n].tie_word_embeddings for n in FAMILY] == [True, True, True, False, False]
    assert (QWEN35_27B.linear_num_key_heads, QWEN35_27B.linear_num_value_heads) == (16, 48)
    assert [PRESETS[n].gqa_group for n in FAMILY] == [4, 4, 4, 4, 6]


def test_parameter_count_of_0_8b_is_the_published_one():
    counts = parameter_count(QWEN35_0_8B)
    assert counts["total"] == PARAMS_0_8B
    assert 0.70e9 < counts["total"] < 0.85e9
    assert counts["lm_head"] == 0                                                   # tied
    assert counts["embedding"] == 254_279_680
    assert counts["deltanet_per_layer"] + counts["mlp_per_layer"] + counts["norms_per_layer"] == 21_555_360
    assert counts["attention_per_layer"] + counts["mlp_per_layer"] + counts["norms_per_layer"] == 18_352_640
    # docs/qwen35.md §6: 1,504,793,280 bytes of weights a decode token, A_log and the gated norm in fp32
    fp32_extra = 2 * len(QWEN35_0_8B.linear_layers) * (QWEN35_0_8B.linear_num_value_heads
                                                       + QWEN35_0_8B.linear_value_head_dim)
    assert 2 * counts["decode_read"] + fp32_extra == 1_504_793_280


def test_parameter_counts_grow_with_size():
    totals = [parameter_count(PRESETS[n])["total"] for n in FAMILY]
    assert totals == sorted(totals) and len(set(totals)) == len(totals)
    # the names' sizes, to a rounding: 0.75, 1.9, 4.2, 9.0, 26.9 billion
    for total, nominal in zip(totals, (0.8e9, 2e9, 4e9, 9e9, 27e9)):
        assert 0.85 < total / nominal < 1.1


@pytest.mark.parametrize("name", FAMILY + ("tiny",))
def test_parameter_count_matches_the_expected_tensors(name):
    config = PRESETS[name]
    counts = parameter_count(config)
    shapes = expected_shapes(config)
    assert counts["total"] == sum(torch.Size(s).numel() for s in shapes.values())
    assert counts["lm_head"] == (0 if config.tie_word_embeddings else shapes["lm_head.weight"][0]
                                 * shapes["lm_head.weight"][1])
    read = counts["total"] - counts["embedding"] - counts["lm_head"] + config.vocab_size * config.hidden_size
    assert counts["decode_read"] == read + config.hidden_size                    # plus one embedding row


@pytest.mark.parametrize("name", FAMILY)
def test_transformers_builds_the_same_model(name):
    """`to_hf_dict` builds a `Qwen3_5TextConfig` with the preset's values, which reads back as the preset,
    and the model transformers builds from it (on the meta device) has `parameter_count`'s parameters."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    config = PRESETS[name]
    hf = Qwen3_5TextConfig(**config.to_hf_dict())
    for field in FIELDS:
        if field in ("rope_theta", "partial_rotary_factor"):
            assert hf.rope_parameters[field] == getattr(config, field)
        elif field == "layer_types":
            assert list(hf.layer_types) == list(config.layer_types)
        else:
            assert getattr(hf, field) == getattr(config, field), field
    assert Qwen35Config.from_dict(hf.to_dict()) == config
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(hf)
    assert sum(p.numel() for p in model.parameters()) == parameter_count(config)["total"]
