"""Qwen3.5 text-model configuration and the two shape presets of the course.

`qwen3.5-0.8b` is the real model (docs/qwen35.md describes it op by op); `tiny` keeps every
structural feature (both layer types, GQA, partial RoPE, value heads = 2 x key heads) at sizes the
Triton interpreter can run on a CPU in seconds.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

LAYER_TYPES = ("linear_attention", "full_attention")
# model_type of a Qwen3.5 text config: on its own (`Qwen3_5ForCausalLM`), or nested as the `text_config`
# of the hub's multimodal `qwen3_5` config
TEXT_MODEL_TYPE, COMPOSITE_MODEL_TYPE = "qwen3_5_text", "qwen3_5"
# what a RoPE dict may hold: default RoPE. mrope_* lay the frequencies out over the (t, h, w) positions of
# images; a text token has t = h = w, which makes it default RoPE whatever the sections.
_ROPE_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved"}
# transformers' Qwen3_5TextConfig defaults where they differ from Qwen3.5-0.8B's (the dataclass's) and no
# weight shape would show the difference: a config dict without the field means what it means to transformers
_ABSENT_FIELDS = {"rope_theta": 10_000.0, "tie_word_embeddings": False, "max_position_embeddings": 32768,
                  "bos_token_id": None, "eos_token_id": None}


class ConfigError(ValueError):
    """A config the course cannot run, or a config.json that is not one: the field and its value named."""


@dataclass(frozen=True)
class Qwen35Config:
    vocab_size: int = 248320
    hidden_size: int = 1024
    intermediate_size: int = 3584
    num_hidden_layers: int = 24
    layer_types: tuple[str, ...] = field(default=())  # "linear_attention" | "full_attention"
    # gated full attention
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    head_dim: int = 256
    rope_theta: float = 10_000_000.0
    partial_rotary_factor: float = 0.25
    # Gated DeltaNet
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 16
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    # misc
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 262144
    bos_token_id: int | None = 248044
    eos_token_id: int | tuple[int, ...] | None = 248044
    full_attention_interval: int = field(default=4, compare=False)  # builds layer_types when not given

    def __post_init__(self):
        self._check_numbers()
        if self.layer_types is None or isinstance(self.layer_types, list):   # JSON's null, or a list
            object.__setattr__(self, "layer_types", tuple(self.layer_types or ()))
        if not isinstance(self.layer_types, tuple):
            raise ConfigError(f"layer_types must be a list of layer kinds, got {self.layer_types!r}")
        if not self.layer_types:
            n = self.full_attention_interval
            types = tuple("full_attention" if (i + 1) % n == 0 else "linear_attention"
                          for i in range(self.num_hidden_layers))
            object.__setattr__(self, "layer_types", types)
        if len(self.layer_types) != self.num_hidden_layers:
            raise ConfigError(f"layer_types has {len(self.layer_types)} entries for "
                              f"{self.num_hidden_layers} layers (num_hidden_layers)")
        unknown = sorted({t for t in self.layer_types if t not in LAYER_TYPES}, key=str)
        if unknown:
            raise ConfigError(f"layer_types holds {unknown}; a layer is one of {list(LAYER_TYPES)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"num_attention_heads = {self.num_attention_heads} must be a multiple of "
                              f"num_key_value_heads = {self.num_key_value_heads}")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ConfigError(f"linear_num_value_heads = {self.linear_num_value_heads} must be a multiple of "
                              f"linear_num_key_heads = {self.linear_num_key_heads}")
        if self.rotary_dim < 2 or self.rotary_dim % 2:
            raise ConfigError(f"partial_rotary_factor = {self.partial_rotary_factor} of head_dim = "
                              f"{self.head_dim} rotates {self.rotary_dim} dims; RoPE rotates pairs: need an "
                              "even number >= 2")

    def _check_numbers(self) -> None:
        """Every size a positive int, every rate a positive finite number (a JSON file may hold anything)."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                raise ConfigError(f"{f.name} must be a positive integer, got {value!r}")
            if f.type == "float" and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                          and math.isfinite(value) and value > 0):
                raise ConfigError(f"{f.name} must be a positive finite number, got {value!r}")
        if not self.partial_rotary_factor <= 1:
            raise ConfigError(f"partial_rotary_factor must be in (0, 1], got {self.partial_rotary_factor!r}")
        if not isinstance(self.tie_word_embeddings, bool):
            raise ConfigError(f"tie_word_embeddings must be true or false, got {self.tie_word_embeddings!r}")

    # derived sizes ---------------------------------------------------------------------------
    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def gqa_group(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.linear_key_dim + self.linear_value_dim

    @property
    def attention_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "full_attention"]

    @property
    def linear_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "linear_attention"]

    def replace(self, **changes) -> "Qwen35Config":
        return dataclasses.replace(self, **changes)

    # I/O -------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict) -> "Qwen35Config":
        """Build from a Hugging Face config dict: a `qwen3_5_text` one, or the hub's composite `qwen3_5`
        one with the text config under `text_config`. Fields the engine does not implement (an activation
        other than SiLU, attention biases, RoPE other than default) raise ConfigError naming them. A field
        missing from the dict takes transformers' default (`_ABSENT_FIELDS`), or for the sizes
        Qwen3.5-0.8B's (the weights' shapes are checked against them)."""
        d = _text_config(d)
        _check_implemented(d)
        rope = _rope(d)
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {**_ABSENT_FIELDS, **{k: v for k, v in d.items() if k in names}}
        if isinstance(kw.get("eos_token_id"), list):
            kw["eos_token_id"] = tuple(kw["eos_token_id"])
        for key in ("rope_theta", "partial_rotary_factor"):
            if key in rope:
                kw[key] = rope[key]
        return cls(**kw)

    @classmethod
    def from_json(cls, path: str | Path) -> "Qwen35Config":
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise FileNotFoundError(f"no config.json at {path}")
        if not path.is_file():      # a FIFO or a device would block the read, or never end
            raise ConfigError(f"{path} is not a regular file")
        try:
            d = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(f"{path} is not JSON: {e}") from None
        try:
            return cls.from_dict(d)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None

    def to_hf_dict(self) -> dict:
        """The keyword arguments of transformers' `Qwen3_5TextConfig` for this config."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for key in ("rope_theta", "partial_rotary_factor", "full_attention_interval"):
            d.pop(key)
        d["layer_types"] = list(self.layer_types)
        if isinstance(d["eos_token_id"], tuple):
            d["eos_token_id"] = list(d["eos_token_id"])
        d["rope_parameters"] = {"rope_type": "default", "rope_theta": self.rope_theta,
                                "partial_rotary_factor": self.partial_rotary_factor}
        d["hidden_act"] = "silu"
        d["attention_bias"] = False
        return d


def _text_config(d) -> dict:
    """The text config of a config dict, its model_type checked: a `qwen3_5_text` dict, or the
    `text_config` of a `qwen3_5` one (whose tie_word_embeddings it inherits where it has none)."""
    if not isinstance(d, dict):
        raise ConfigError(f"a config must be a JSON object of fields, got a {type(d).__name__}")
    kind = d.get("model_type")
    if kind == COMPOSITE_MODEL_TYPE:
        text = d.get("text_config")
        if not isinstance(text, dict):
            raise ConfigError(f"a {COMPOSITE_MODEL_TYPE!r} config needs a text_config object, got {text!r}")
        if text.get("model_type", TEXT_MODEL_TYPE) != TEXT_MODEL_TYPE:
            raise ConfigError(f"text_config.model_type = {text['model_type']!r}; this course runs "
                              f"{TEXT_MODEL_TYPE!r}")
        outer, inner = d.get("tie_word_embeddings"), text.get("tie_word_embeddings")
        if outer is not None and inner is not None and outer != inner:
            raise ConfigError(f"tie_word_embeddings = {outer!r} but text_config.tie_word_embeddings = {inner!r}")
        return text if outer is None or inner is not None else {**text, "tie_word_embeddings": outer}
    if kind != TEXT_MODEL_TYPE:
        raise ConfigError(f"model_type = {kind!r}; this course runs Qwen3.5 text models: "
                          f"{TEXT_MODEL_TYPE!r}, or {COMPOSITE_MODEL_TYPE!r} with a text_config")
    return d


def _check_implemented(d: dict) -> None:
    """Fields transformers' Qwen3.5 reads that the course implements only at one value."""
    if d.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"hidden_act = {d['hidden_act']!r}: the MLP and the DeltaNet conv run SiLU only")
    if d.get("attention_bias", False):
        raise ConfigError(f"attention_bias = {d['attention_bias']!r}: the attention projections have no bias here")


def _rope(d: dict) -> dict:
    """The RoPE fields of rope_parameters (or the older rope_scaling): default RoPE, else ConfigError."""
    rope = {}
    for key in ("rope_scaling", "rope_parameters"):
        part = d.get(key)
        if part is None:
            continue
        if not isinstance(part, dict):
            raise ConfigError(f"{key} must be an object, got {part!r}")
        kind = part.get("rope_type", part.get("type", "default"))
        if kind != "default":
            raise ConfigError(f"{key}.rope_type = {kind!r}: the engine runs default RoPE only")
        scaling = sorted(set(part) - _ROPE_KEYS)
        if scaling:
            raise ConfigError(f"{key} has {', '.join(f'{k} = {part[k]!r}' for k in scaling)}: RoPE scaling is "
                              "not implemented (default RoPE only)")
        rope.update(part)
    return rope


QWEN35_0_8B = Qwen35Config()

TINY = Qwen35Config(
    vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32,
    max_position_embeddings=4096, bos_token_id=1, eos_token_id=2,
    full_attention_interval=2,   # layers [lin, full, lin, full]: an attention layer feeds later layers
)

PRESETS: dict[str, Qwen35Config] = {"qwen3.5-0.8b": QWEN35_0_8B, "tiny": TINY}


def get_config(name_or_path: str | Path) -> Qwen35Config:
    """A preset by name, or the text config of a checkpoint directory / config.json."""
    if str(name_or_path) in PRESETS:
        return PRESETS[str(name_or_path)]
    path = Path(name_or_path)
    if path.exists():
        return Qwen35Config.from_json(path)
    raise ValueError(f"unknown config {name_or_path!r}: use one of {sorted(PRESETS)} "
                     "or a checkpoint directory")
