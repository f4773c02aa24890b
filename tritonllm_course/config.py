"""Qwen3.5 text-model configuration, the course's shape presets and the dense Qwen3.5 family.

`qwen3.5-0.8b` is the model the course runs (docs/qwen35.md describes it op by op); `tiny` keeps every
structural feature (both layer types, GQA, partial RoPE, value heads = 2 x key heads) at sizes the
Triton interpreter can run on a CPU in seconds. `qwen3.5-2b`, `-4b`, `-9b` and `-27b` are the text
decoders of the larger dense Qwen3.5 checkpoints (`FAMILY`, with 0.8B), each field's source in
`PRESET_SOURCES` (docs/family.md tabulates them); `parameter_count` counts any config's weights by part.
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


MAX_SIZE = 2**31 - 1     # every size and count: the kernels compute offsets and indices in int32
MAX_LAYERS = 1024        # the deepest published decoders have ~100 layers; the names of each are built


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
        """Every field by type and range, before anything is built from it (a JSON file may hold anything):
        sizes positive ints of at most `MAX_SIZE` (the kernels index with int32), at most `MAX_LAYERS`
        layers (the per-layer names are built from it), rates positive finite numbers, token ids ints >= 0
        (or a list of them for eos_token_id: a string would be read character by character)."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and not (_is_int(value) and value > 0):
                raise ConfigError(f"{f.name} must be a positive integer, got {value!r}")
            if f.type == "int" and value > MAX_SIZE:
                raise ConfigError(f"{f.name} must be at most {MAX_SIZE} (int32 indices), got {value!r}")
            if f.type == "float" and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                          and math.isfinite(value) and value > 0):
                raise ConfigError(f"{f.name} must be a positive finite number, got {value!r}")
        if self.num_hidden_layers > MAX_LAYERS:
            raise ConfigError(f"num_hidden_layers must be at most {MAX_LAYERS}, got {self.num_hidden_layers}")
        if not self.partial_rotary_factor <= 1:
            raise ConfigError(f"partial_rotary_factor must be in (0, 1], got {self.partial_rotary_factor!r}")
        # RoPE's frequencies are rope_theta ** (-2i / rotary_dim): a base below 1 makes them grow past 1 rad
        # per position, and a tiny one overflows them to inf, whose cos and sin are NaN
        if not self.rope_theta >= 1:
            raise ConfigError(f"rope_theta must be >= 1 (the RoPE base: 1e7 in Qwen3.5), got {self.rope_theta!r}")
        if not self.rms_norm_eps < 1:    # the epsilon added to mean(x^2): 1e-6 in Qwen3.5
            raise ConfigError(f"rms_norm_eps must be in (0, 1), got {self.rms_norm_eps!r}")
        if not isinstance(self.tie_word_embeddings, bool):
            raise ConfigError(f"tie_word_embeddings must be true or false, got {self.tie_word_embeddings!r}")
        if self.bos_token_id is not None and not (_is_int(self.bos_token_id) and self.bos_token_id >= 0):
            raise ConfigError(f"bos_token_id must be a token id (an int >= 0) or null, got {self.bos_token_id!r}")
        eos = raw = self.eos_token_id
        if isinstance(eos, list):                   # JSON's list
            object.__setattr__(self, "eos_token_id", eos := tuple(eos))
        ids = eos if isinstance(eos, tuple) else () if eos is None else (eos,)
        if (isinstance(eos, tuple) and not eos) or not all(_is_int(e) and e >= 0 for e in ids):
            raise ConfigError(f"eos_token_id must be a token id (an int >= 0), a non-empty list of them, or null, "
                              f"got {raw!r}")
        for name, given in (("bos_token_id", () if self.bos_token_id is None else (self.bos_token_id,)),
                            ("eos_token_id", ids)):
            past = [t for t in given if t >= self.vocab_size]   # no token of the model has that id: never matched
            if past:
                raise ConfigError(f"{name} {past[0]} is outside the vocabulary [0, {self.vocab_size}) (vocab_size)")
        if not (isinstance(self.layer_types, (list, tuple)) or self.layer_types is None):
            raise ConfigError(f"layer_types must be a list of layer kinds, got {self.layer_types!r}")
        strange = [t for t in self.layer_types or () if not isinstance(t, str)]
        if strange:
            raise ConfigError(f"layer_types holds {strange[:3]!r}; a layer is one of {list(LAYER_TYPES)}")

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
        except RecursionError:      # arrays nested thousands deep: the parser gives up
            raise ConfigError(f"{path} is not a config: its JSON is nested too deep to read") from None
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

# The larger dense Qwen3.5 text decoders. Every field not given is the dataclass default (0.8B's): vocabulary
# 248,320, head_dim 256, RoPE theta 1e7 over a quarter of each head, 16 DeltaNet key heads of 128, value heads
# of 128, 4 conv taps, RMSNorm eps 1e-6, 262,144 positions, a full-attention layer every 4th layer, token
# ids 248044. Sources, field by field: PRESET_SOURCES (docs/family.md).
QWEN35_2B = Qwen35Config(
    hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
    num_attention_heads=8, num_key_value_heads=2, linear_num_value_heads=16,
)
QWEN35_4B = Qwen35Config(
    hidden_size=2560, intermediate_size=9216, num_hidden_layers=32,
    num_attention_heads=16, num_key_value_heads=4, linear_num_value_heads=32,
)
QWEN35_9B = Qwen35Config(
    hidden_size=4096, intermediate_size=12288, num_hidden_layers=32,
    num_attention_heads=16, num_key_value_heads=4, linear_num_value_heads=32,
    tie_word_embeddings=False,
)
QWEN35_27B = Qwen35Config(
    hidden_size=5120, intermediate_size=17408, num_hidden_layers=64,
    num_attention_heads=24, num_key_value_heads=4, linear_num_value_heads=48,
    tie_word_embeddings=False,
)

PRESETS: dict[str, Qwen35Config] = {"qwen3.5-0.8b": QWEN35_0_8B, "tiny": TINY, "qwen3.5-2b": QWEN35_2B,
                                    "qwen3.5-4b": QWEN35_4B, "qwen3.5-9b": QWEN35_9B, "qwen3.5-27b": QWEN35_27B}
FAMILY = ("qwen3.5-0.8b", "qwen3.5-2b", "qwen3.5-4b", "qwen3.5-9b", "qwen3.5-27b")

# Where each value of the family presets comes from: preset -> field -> citation. "repo:path" is a file of a
# public GitHub repository; "code-index file N" a public source file of a code-search index that does not
# name its repository (the file's text quotes the values); a URL a public web page. "unconfirmed:"
# marks a value no source for that checkpoint states: the reason for the value chosen follows. The
# Megatron argument files of slime/miles give the attention and MLP shapes (--num-attention-heads,
# --num-query-groups, --kv-channels = head_dim, --ffn-hidden-size, --rotary-percent, --rotary-base,
# --norm-epsilon, --vocab-size), and tie the LM head unless they pass --untie-embeddings-and-output-weights.
_CARDS = ("code-index file 52989748059 (a transcription of the Qwen/Qwen3.5-* model cards: "
          "layers, hidden layout, DeltaNet heads V/QK, attention heads Q/KV, context)")
_SLIME_0_8B = "THUDM/slime:scripts/models/qwen3.5-0.8B.sh"
_MILES_2B = "williammtan/miles:scripts/models/qwen3.5-2B.sh (same values: K1XE/BPM, same path)"
_MILES_4B = "radixark/miles:scripts/models/qwen3.5-4B.sh (same values: vllm-project/vime, same path)"
_MILES_9B = "radixark/miles:scripts/models/qwen3.5-9B.sh (same values: Lixtt/slime, same path)"
_MILES_27B = "radixark/miles:scripts/models/qwen3.5-27B.sh (same values: THUDM/slime, same path)"
_CONFIG_2B = ("code-index file 54643297878 (a Rust test loading the official Qwen/Qwen3.5-2B config.json: "
              "dims, DeltaNet heads and head dims, conv taps, rotary dim 64, theta 1e7, context, eos)")
_CONFIG_4B = ("code-index file 70205012704 (a Qwen3.5-4B topology fixture) and the qwen3_5_text config.json "
              "of https://huggingface.co/halen214/st01 (a 4B-shaped fine-tune)")
_CONFIG_9B = ("code-index file 71387934500 (the text_config of Qwen/Qwen3.5-9B used as a test fixture: "
              "every field but max_position_embeddings and bos)")
_CARD_9B = ("model card of Qwen/Qwen3.5-9B (copy: https://2048ai.net/69aa85b754b52172bc5f69c3.html): "
            "DeltaNet heads 32 V / 16 QK of 128, attention 16 Q / 4 KV of 256, 262,144 context")
_BOS = ("unconfirmed: derived configs of Qwen3.5 checkpoints have text_config.bos_token_id null (e.g. "
        "huggingface.co ZirTech/OmniMath-2B, KnowledgeXLab/ComActor-9B), Qwen3_5ForCausalLM exports "
        "248044, and no BOS is prepended; kept at the 0.8B preset's 248044")
_HEAD_DIMS_27B = ("unconfirmed: 128 in every other Qwen3.5 size and in Qwen3.6-27B config fixtures "
                  "(code-index file 59724392294: 27B's other sizes; the same architecture per "
                  "huggingface/transformers:docs/source/en/model_doc/qwen3_5.md); not found for 3.5-27B")


def _sources(megatron: str, deltanet: str, head_dims: str, conv: str, layout: str, context: str,
             eos: str, bos: str = _BOS) -> dict[str, str]:
    """A preset's citations: the Megatron argument file for the attention and MLP shapes, the others given."""
    return {"vocab_size": megatron, "hidden_size": megatron, "intermediate_size": megatron,
            "num_hidden_layers": megatron, "layer_types": layout, "num_attention_heads": megatron,
            "num_key_value_heads": megatron, "head_dim": megatron, "rope_theta": megatron,
            "partial_rotary_factor": megatron, "linear_num_key_heads": deltanet,
            "linear_num_value_heads": deltanet, "linear_key_head_dim": head_dims,
            "linear_value_head_dim": head_dims, "linear_conv_kernel_dim": conv, "rms_norm_eps": megatron,
            "tie_word_embeddings": megatron, "max_position_embeddings": context,
            "bos_token_id": bos, "eos_token_id": eos}


PRESET_SOURCES: dict[str, dict[str, str]] = {
    "qwen3.5-0.8b": _sources(
        megatron=_SLIME_0_8B, deltanet=_CARDS, layout=_CARDS,
        head_dims="docs/qwen35.md §2 (tensor shapes of the checkpoint: in_proj_qkv [6144, 1024], norm [128])",
        conv="docs/qwen35.md §2 (conv1d.weight [6144, 1, 4] in the checkpoint)",
        context="docs/qwen35.md §1 (public copies of the checkpoint's config.json)",
        eos="docs/qwen35.md §1 (public copies of the checkpoint's config.json)",
        bos="unconfirmed: docs/qwen35.md §8; derived configs have text_config.bos_token_id null "
            "(e.g. huggingface.co oopere/Qwen3.5-0.65B-Base-Rearchitected)"),
    "qwen3.5-2b": _sources(
        megatron=_MILES_2B, deltanet=_CONFIG_2B + "; " + _CARDS, head_dims=_CONFIG_2B, conv=_CONFIG_2B,
        layout=_CARDS + "; full-attention mask 0x888888 in " + _CONFIG_2B, context=_CONFIG_2B, eos=_CONFIG_2B),
    "qwen3.5-4b": _sources(
        megatron=_MILES_4B, deltanet=_CARDS + "; " + _CONFIG_4B, head_dims=_CONFIG_4B,
        conv="unconfirmed: 4 in the config.json of https://huggingface.co/halen214/st01 (a 4B-shaped "
             "fine-tune) and in every other Qwen3.5 size",
        layout=_CARDS, context=_CARDS + " (262,144, extensible to 1,010,000)",
        eos="unconfirmed: text_config.eos_token_id 248044 in derived 4B configs (https://huggingface.co/"
            "Chat2Find/Chat2Find-CPT) and in every other Qwen3.5 size"),
    "qwen3.5-9b": _sources(
        megatron=_MILES_9B, deltanet=_CARD_9B + "; " + _CONFIG_9B, head_dims=_CARD_9B + "; " + _CONFIG_9B,
        conv=_CONFIG_9B, layout=_CONFIG_9B, context=_CARD_9B, eos=_CONFIG_9B),
    "qwen3.5-27b": _sources(
        megatron=_MILES_27B, deltanet=_CARDS, head_dims=_HEAD_DIMS_27B,
        conv="unconfirmed: 4 in every other Qwen3.5 size and in Qwen3.6-27B config fixtures "
             "(code-index file 59724392294); not found for 3.5-27B",
        layout=_CARDS + " (16 x (3 x Gated DeltaNet -> 1 x Gated Attention))",
        context=_CARDS + " (262,144, extensible to 1,010,000)",
        eos="unconfirmed: 248044 in Qwen3.6-27B config fixtures (code-index file 59724392294), in a 27B "
            "export (https://huggingface.co/ApolloRaines/Sharona_Q27B-R_CodeSecurity) and in every other "
            "Qwen3.5 size"),
}


def parameter_count(config: Qwen35Config) -> dict[str, int]:
    """The text decoder's parameters by part, from the shapes `weights.expected_shapes` lists.

    Per layer: `attention_per_layer` is q_proj (2 x heads x head_dim rows: query and output gate), k_proj,
    v_proj, o_proj, q_norm, k_norm; `deltanet_per_layer` is in_proj_qkv, in_proj_z, in_proj_b, in_proj_a,
    the conv taps [conv_dim, 1, kernel], A_log, dt_bias, the gated norm and out_proj; `mlp_per_layer`
    gate, up and down; `norms_per_layer` the two RMSNorms around the mixer and the MLP. `attention`,
    `deltanet`, `mlp`, `norms` (the final norm included) are the sums over the layers; `lm_head` is 0 when
    tied to the embedding. `decode_read` is what one decode token reads: every weight except the embedding
    rows it does not look up, the LM head (the embedding itself when tied) read whole."""
    c = config
    H, I, V = c.hidden_size, c.intermediate_size, c.vocab_size
    q_width, kv_width = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    attention = (2 * q_width + 2 * kv_width) * H + H * q_width + 2 * c.head_dim
    nv = c.linear_num_value_heads
    deltanet = ((c.conv_dim + c.linear_value_dim + 2 * nv) * H + c.conv_dim * c.linear_conv_kernel_dim
                + 2 * nv + c.linear_value_head_dim + H * c.linear_value_dim)
    mlp, norms = 3 * H * I, 2 * H
    n_attn, n_lin, n = len(c.attention_layers), len(c.linear_layers), c.num_hidden_layers
    embedding = V * H
    lm_head = 0 if c.tie_word_embeddings else V * H
    parts = {"attention": n_attn * attention, "deltanet": n_lin * deltanet, "mlp": n * mlp,
             "norms": n * norms + H}
    total = embedding + lm_head + sum(parts.values())
    return {"embedding": embedding, "lm_head": lm_head, "attention_per_layer": attention,
            "deltanet_per_layer": deltanet, "mlp_per_layer": mlp, "norms_per_layer": norms, **parts,
            "total": total, "decode_read": total - embedding - lm_head + V * H + H}


def miniature(config: Qwen35Config, width: int = 16) -> Qwen35Config:
    """A config of `config`'s head structure at sizes the CPU interpreter runs in seconds: one KV head with
    as many query heads as `config`'s group, one DeltaNet key head with as many value heads as its
    value/key ratio, heads of `width` dims, its rotary fraction, tied or untied head and conv taps, and four
    layers in its pattern (three DeltaNet layers, then attention)."""
    return Qwen35Config(
        vocab_size=128, hidden_size=2 * width, intermediate_size=3 * width, num_hidden_layers=4,
        layer_types=("linear_attention",) * 3 + ("full_attention",),
        num_attention_heads=config.gqa_group, num_key_value_heads=1, head_dim=width,
        partial_rotary_factor=config.partial_rotary_factor, rope_theta=config.rope_theta,
        linear_num_key_heads=1, linear_num_value_heads=config.linear_num_value_heads // config.linear_num_key_heads,
        linear_key_head_dim=width, linear_value_head_dim=width, linear_conv_kernel_dim=config.linear_conv_kernel_dim,
        rms_norm_eps=config.rms_norm_eps, tie_word_embeddings=config.tie_word_embeddings,
        max_position_embeddings=64, bos_token_id=1, eos_token_id=2)


def check_config(config) -> Qwen35Config:
    """`config` if it is a Qwen35Config, else a TypeError naming its type: the engine's arguments and the weights'
    check both take one before any work (None was an AttributeError from deep inside)."""
    if not isinstance(config, Qwen35Config):
        raise TypeError(f"config must be a Qwen35Config (tritonllm_course.config.PRESETS holds some), got "
                        f"{type(config).__name__}")
    return config


def get_config(name_or_path: str | Path) -> Qwen35Config:
    """A preset by name, or the text config of a checkpoint directory / config.json."""
    if str(name_or_path) in PRESETS:
        return PRESETS[str(name_or_path)]
    path = Path(name_or_path)
    if str(name_or_path) and path.exists():          # "" is no name (Path("") is the working folder)
        return Qwen35Config.from_json(path)
    raise ValueError(f"unknown config {name_or_path!r}: use one of {sorted(PRESETS)} "
                     "or a checkpoint directory")
