"""Unusual but valid Qwen3.5 text configs, and the head structure of each size of the dense family
(`config.miniature`): each runs at every engine level, token for token as
transformers' own greedy `generate`, through `tritonllm-course generate --backend triton` from a
checkpoint written by transformers (`save_pretrained`), in the plain layout and in the hub's.

On the CPU the kernels run in Triton's interpreter, in fp32: the configs are tiny (widths of tens, 2-4
layers, 4 new tokens) and each (config, level) pair runs once, the layout alternating so that every
config and every level meets both layouts. Where a fused kernel of a level cannot take a config's shapes
the level runs the plain kernels for that step and says so in the engine's summary (`plan.FALLBACKS`).
"""
import json

import pytest
import torch

from tritonllm_course import cli
from tritonllm_course.config import PRESETS, ConfigError, Qwen35Config, miniature
from tritonllm_course.engine import Engine
from tritonllm_course.engine.plan import LEVELS, fitted_plan
from tritonllm_course.hf_compat import hf_model
from tritonllm_course.weights import load_weights, random_weights, write_hub_checkpoint
from tritonllm_course.runtime import runtime

# tiny configs against transformers on the CPU (fp32, the interpreter); the GPU runs the real shapes elsewhere
pytestmark = pytest.mark.skipif(runtime().on_gpu, reason="compares tiny configs on the CPU interpreter")

LIN, FULL = "linear_attention", "full_attention"
BASE = dict(vocab_size=128, hidden_size=32, intermediate_size=48, num_attention_heads=2, num_key_value_heads=1,
            head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=16,
            linear_value_head_dim=16, max_position_embeddings=64, bos_token_id=1, eos_token_id=2)
CONFIGS = {
    # DeltaNet value heads wider than the key heads, 24 (not a power of two: the fast level's decode
    # DeltaNet runs the plain kernels)
    "value_dim_wider": dict(linear_value_head_dim=24, layer_types=(LIN, FULL)),
    # value heads narrower than the key heads of 24, three value heads per key head; attention first
    "value_dim_narrower": dict(linear_key_head_dim=24, linear_num_value_heads=3, layer_types=(FULL, LIN)),
    # one KV head for three query heads, head_dim 24 (its rotary part 6 dims)
    "one_kv_head": dict(num_attention_heads=3, head_dim=24, layer_types=(LIN, FULL, LIN)),
    # an untied LM head, RoPE over the whole head, two attention layers around two DeltaNet ones
    "untied_full_rotary": dict(tie_word_embeddings=False, partial_rotary_factor=1.0,
                               layer_types=(FULL, LIN, LIN, FULL)),
    # attention layers only, as many KV heads as heads, half the head rotated
    "attention_only": dict(num_key_value_heads=2, head_dim=20, partial_rotary_factor=0.5, layer_types=(FULL, FULL)),
    # DeltaNet layers only (no KV cache at all), a 3-tap conv (fast level: plain decode DeltaNet kernels)
    "deltanet_only": dict(linear_conv_kernel_dim=3, linear_num_key_heads=2, linear_num_value_heads=4,
                          layer_types=(LIN, LIN)),
    # no width a power of two: hidden 40, MLP 72, vocabulary 101, DeltaNet heads of 12 and 20
    "odd_widths": dict(vocab_size=101, hidden_size=40, intermediate_size=72, linear_key_head_dim=12,
                       linear_value_head_dim=20, layer_types=(LIN, FULL)),
    # attention heads wider than FlashAttention's 256 (fused and fast levels: plain prompt attention)
    "wide_heads": dict(num_attention_heads=1, head_dim=272, layer_types=(LIN, FULL)),
}
# the dense family's head structures (config.miniature: its query/KV group, its DeltaNet value/key ratio, its
# tied or untied head); 2B has 0.8B's structure (group 4, one value head per key head, tied)
CONFIGS.update({f"family_{size.removeprefix('qwen3.5-')}": miniature(PRESETS[size])
                for size in ("qwen3.5-0.8b", "qwen3.5-4b", "qwen3.5-9b", "qwen3.5-27b")})
# the steps of each config that a level runs on plain kernels (the summary's lines start with these)
FALLBACKS = {"value_dim_wider": {"fast": "DeltaNet decode"}, "value_dim_narrower": {},
             "one_kv_head": {}, "untied_full_rotary": {}, "attention_only": {},
             "deltanet_only": {"fast": "DeltaNet decode"}, "odd_widths": {"fast": "DeltaNet decode"},
             "wide_heads": {"fused": "attention prefill", "fast": "attention prefill"},
             **{name: {} for name in CONFIGS if name.startswith("family_")}}
PROMPT = [5, 17, 30, 42, 7, 9, 25, 64]
NEW = 4
LAYOUTS = ("plain", "hub")


def config_of(name: str) -> Qwen35Config:
    if isinstance(CONFIGS[name], Qwen35Config):
        return CONFIGS[name]
    fields = {**BASE, **CONFIGS[name]}
    return Qwen35Config(**fields, num_hidden_layers=len(fields["layer_types"]))


def transformers_greedy(hf, config: Qwen35Config) -> list[int]:
    """transformers' greedy tokens. Its cache needs an attention layer (DeltaNet-only models: `get_seq_length`
    raises), so a model without one generates without the cache, recomputing the whole sequence each step."""
    out = hf.generate(torch.tensor([PROMPT]), max_new_tokens=NEW, do_sample=False,
                      use_cache=bool(config.attention_layers))
    return out[0, len(PROMPT):].tolist()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name -> (config, {layout: checkpoint dir}, transformers' greedy tokens), written on first use."""
    made = {}

    def get(name):
        if name not in made:
            config = config_of(name)
            hf = hf_model(config, seed=3, perturb_norms=0.3, init_std=0.1)
            root = tmp_path_factory.mktemp(name)
            hf.save_pretrained(root / "plain")
            dirs = {"plain": root / "plain", "hub": write_hub_checkpoint(root / "plain", root / "hub", num_shards=2)}
            made[name] = config, dirs, transformers_greedy(hf, config)
        return made[name]
    return get


def _cases():
    """Every (config, level), the layout alternating over both."""
    return [pytest.param(name, level, LAYOUTS[(i + j) % 2], id=f"{name}-{level}-{LAYOUTS[(i + j) % 2]}")
            for i, name in enumerate(CONFIGS) for j, level in enumerate(LEVELS)]


@pytest.mark.parametrize("name, level, layout", _cases())
def test_generate_gives_transformers_greedy_tokens(checkpoints, capsys, name, level, layout):
    config, dirs, want = checkpoints(name)
    status = cli.main(["generate", "--model", str(dirs[layout]), "--prompt-ids", ",".join(map(str, PROMPT)),
                       "--max-new-tokens", str(NEW), "--greedy", "--backend", "triton", "--level", level,
                       "--dtype", "float32", "--device", "cpu", "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert json.loads(out)["generated_ids"] == want


def test_the_table_takes_varied_paths(checkpoints):
    """A comparison that could pass by luck would not test much: each config's tokens are not one token
    repeated, and the layouts hold the same weights."""
    for name in CONFIGS:
        config, dirs, want = checkpoints(name)
        assert len(set(want)) > 1, (name, want)
        plain, hub = (load_weights(dirs[layout])[1] for layout in LAYOUTS)
        assert plain.keys() == hub.keys() and all(torch.equal(plain[k], hub[k]) for k in plain), name


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_summary_names_each_fallback(name):
    config = config_of(name)
    for level in LEVELS:
        engine = Engine(config, random_weights(config), max_seq_len=16, level=level, cuda_graph=False)
        notes = [line.strip() for line in engine.summary().splitlines() if "plain kernels" in line]
        expected = FALLBACKS[name].get(level)
        assert [n.split(":")[0] for n in notes] == ([expected] if expected else []), (level, notes)


def test_a_fallback_replaces_the_fused_steps_only():
    """The fast level's decode DeltaNet on plain kernels: its prompt path and the attention keep theirs."""
    fast = fitted_plan("fast").steps
    plan = fitted_plan("fast", config_of("deltanet_only"))
    fitted = plan.steps
    by_name = {s.name: s for s in fitted}
    assert plan.fallbacks == ("DeltaNet decode: plain kernels (linear_conv_kernel_dim 3 is not a power of two >= 2)",)
    assert by_name["conv"].decode == "conv1d_l2norm.decode" and by_name["gates"].prefill is None
    assert by_name["out_proj"].decode == "fused_linear_residual"
    kept = {s.name: s for s in fast}
    assert by_name["attention"] == kept["attention"] and by_name["mlp"] == kept["mlp"]
    assert [s.name for s in fitted].index("gates") == [s.name for s in fitted].index("conv") + 1
    assert _path(fitted, "prefill") == _path(fast, "prefill")
    for level in ("fused", "fast"):              # heads over FlashAttention's: its prompt path only
        wide = fitted_plan(level, config_of("wide_heads"))
        assert _path(wide.steps, "decode") == _path(LEVELS[level].steps, "decode")


def _path(steps, path):
    return [(s.name, getattr(s, path)) for s in steps if getattr(s, path)]


@pytest.mark.parametrize("field, value", [("linear_key_head_dim", 512), ("linear_value_head_dim", 384)])
def test_shapes_no_level_runs_are_refused_before_any_work(field, value):
    config = config_of("value_dim_wider").replace(**{field: value})
    with pytest.raises(ConfigError, match=f"{field} = {value}: the engine runs at most 256"):
        Engine(config, random_weights(config), max_seq_len=8, level="operators")
