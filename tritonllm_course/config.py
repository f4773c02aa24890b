"""Qwen3.5 text-model configuration and the two shape presets of the course.

`qwen3.5-0.8b` is the real model (see the spec in the README's references); `tiny` keeps every
structural feature (both layer types, GQA, partial RoPE, value heads = 2 x key heads) at sizes the
Triton interpreter can run on a CPU in seconds.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path


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
        if not self.layer_types:
            n = self.full_attention_interval
            types = tuple("full_attention" if (i + 1) % n == 0 else "linear_attention"
                          for i in range(self.num_hidden_layers))
            object.__setattr__(self, "layer_types", types)
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries for "
                             f"{self.num_hidden_layers} layers")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError("linear_num_value_heads must be a multiple of linear_num_key_heads")

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
        """Build from a Hugging Face config dict (a composite `qwen3_5` one with `text_config` too)."""
        if "text_config" in d:
            d = d["text_config"]
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "layer_types" in kw:
            kw["layer_types"] = tuple(kw["layer_types"])
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
        return cls.from_dict(json.loads(path.read_text()))

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
