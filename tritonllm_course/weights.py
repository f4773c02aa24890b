"""Qwen3.5 weights: the names and shapes the config implies, loading a Hugging Face checkpoint, random
weights of the real shapes, and a writer of the hub's file layout for tests.

Weights live in a plain dict keyed by the checkpoint's names without prefix, e.g.
`layers.3.self_attn.q_proj.weight`. Two file layouts are read:
- the hub checkpoint (multimodal `Qwen3_5ForConditionalGeneration`): text weights under
  `model.language_model.`, the vision tower under `model.visual.` and the multi-token-prediction head
  under `mtp.` (both skipped: a text decoder does not use them);
- a `Qwen3_5ForCausalLM.save_pretrained` directory: text weights under `model.`.
The LM head is tied to the embedding in Qwen3.5-0.8B, so the file need not hold `lm_head.weight`.
The checkpoint stores `linear_attn.A_log` and `linear_attn.norm.weight` in fp32 (the rest in bf16);
they stay fp32 here unless `match_hf_rounding=True`, which rounds them as transformers does when it
loads the model in bf16.
"""
from __future__ import annotations

import gc
import json
import math
import os
import re
from collections import abc
from pathlib import Path

import torch

from .config import Qwen35Config, check_config
from .safe_files import atomic_write_bytes
from .validate import FLOATS, check_device, check_seed

# the dtypes weights may come in: the kernels' three, and float64 for the reference model alone
WEIGHT_FLOATS = (*FLOATS, torch.float64)
F32_SUFFIXES = ("linear_attn.A_log", "linear_attn.norm.weight")
_SKIPPED_PREFIXES = ("model.visual.", "mtp.")
_TEXT_PREFIXES = ("model.language_model.", "model.")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_DOWNLOAD_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.jinja"]


class WeightError(ValueError):
    """A checkpoint that does not fit the config: missing tensors or wrong shapes, each named."""


class WeightsTooLarge(ValueError):
    """Weights that the device's memory cannot hold: refused before any of them is allocated."""


class CheckpointNotFound(FileNotFoundError):
    """No such directory, and the hub id could not be downloaded (offline, unknown or gated repo)."""


def expected_shapes(config: Qwen35Config) -> dict[str, tuple[int, ...]]:
    """Every tensor of the text model with its shape, in checkpoint order (name without prefix)."""
    c = config
    H, I = c.hidden_size, c.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (c.vocab_size, H)}
    for i, kind in enumerate(c.layer_types):
        p = f"layers.{i}."
        if kind == "linear_attention":
            a = p + "linear_attn."
            shapes.update({
                a + "in_proj_qkv.weight": (c.conv_dim, H),
                a + "in_proj_z.weight": (c.linear_value_dim, H),
                a + "in_proj_b.weight": (c.linear_num_value_heads, H),
                a + "in_proj_a.weight": (c.linear_num_value_heads, H),
                a + "conv1d.weight": (c.conv_dim, 1, c.linear_conv_kernel_dim),
                a + "A_log": (c.linear_num_value_heads,),
                a + "dt_bias": (c.linear_num_value_heads,),
                a + "norm.weight": (c.linear_value_head_dim,),
                a + "out_proj.weight": (H, c.linear_value_dim),
            })
        elif kind == "full_attention":
            a = p + "self_attn."
            q_width, kv_width = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
            shapes.update({
                a + "q_proj.weight": (2 * q_width, H),      # query and gate, interleaved per head
                a + "k_proj.weight": (kv_width, H),
                a + "v_proj.weight": (kv_width, H),
                a + "o_proj.weight": (H, q_width),
                a + "q_norm.weight": (c.head_dim,),
                a + "k_norm.weight": (c.head_dim,),
            })
        else:
            raise ValueError(f"layer {i} has unknown type {kind!r}")
        shapes.update({
            p + "mlp.gate_proj.weight": (I, H),
            p + "mlp.up_proj.weight": (I, H),
            p + "mlp.down_proj.weight": (H, I),
            p + "input_layernorm.weight": (H,),
            p + "post_attention_layernorm.weight": (H,),
        })
    shapes["norm.weight"] = (H,)
    if not c.tie_word_embeddings:
        shapes["lm_head.weight"] = (c.vocab_size, H)
    return shapes


def check_weights(config: Qwen35Config, weights: dict[str, torch.Tensor]) -> None:
    """Raise WeightError naming every missing or mis-shaped tensor (with both shapes), and every tensor
    that is not floating point or holds a NaN or an infinity: the kernels would read an int's bits as
    numbers, and a NaN decodes silently as token 0 where nothing checks the logits. A config that is not a
    Qwen35Config or weights that are not a dict are a TypeError; a value that is not a tensor (a numpy array),
    a float8 tensor (no reduction checks its values) or one on another device than the embedding (a meta tensor
    among CPU ones ran, and gave token 0) is named like a mis-shaped one."""
    check_config(config)
    if not isinstance(weights, abc.Mapping):
        raise TypeError(f"weights must be a dict of {{name: tensor}} (as load_weights returns them), got "
                        f"{type(weights).__name__}")
    embed = weights.get("embed_tokens.weight")
    model = (embed.dtype, embed.device) if isinstance(embed, torch.Tensor) else None
    problems, more = [], 0
    for name, shape in expected_shapes(config).items():
        problem = _weight_problem(name, weights.get(name), shape, model)
        if problem is None:
            continue
        if len(problems) == 10:     # the rest counted, not described: a config may declare absurdly many
            more += 1
        else:
            problems.append(problem)
    if len(problems) == 1:     # one line, as the command line prints it
        raise WeightError(f"the weights do not fit the config: {problems[0]}")
    if problems:
        tail = f"\n  ... and {more} more" if more else ""
        raise WeightError("the weights do not fit the config:\n  " + "\n  ".join(problems) + tail)


def _weight_problem(name: str, t, shape: tuple[int, ...], model) -> str | None:
    """What is wrong with the weight `name` (None: nothing): missing, not a tensor, its shape, its dtype, its
    device or, for a matrix, its dtype not the embedding's (`model`: (dtype, device), or None), or a NaN or an
    infinity among its values. Vectors may be wider (the checkpoint's fp32 norms and A_log); a matrix in
    another dtype failed in both backends (a matmul of two dtypes, a kernel's "x has dtype float32")."""
    if t is None:
        return f"missing tensor {name} (expected shape {list(shape)})"
    if not isinstance(t, torch.Tensor):
        return f"{name} is a {type(t).__name__}, not a torch.Tensor"
    if tuple(t.shape) != shape:
        return f"tensor {name} has shape {list(t.shape)}; the config expects {list(shape)}"
    if t.dtype not in WEIGHT_FLOATS:
        return (f"tensor {name} has dtype {str(t.dtype).replace('torch.', '')}; weights must be floating point: "
                "float32, float16, bfloat16 or float64")
    if model is not None and t.device != model[1]:
        return f"tensor {name} is on {t.device}, the embedding on {model[1]}: put every weight on one device"
    if model is not None and t.dim() > 1 and t.dtype != model[0]:
        return (f"tensor {name} has dtype {str(t.dtype).replace('torch.', '')}, the embedding "
                f"{str(model[0]).replace('torch.', '')}: every matrix in one dtype (load_weights(dtype=...))")
    if not _finite(t):
        return f"tensor {name} holds NaN or infinite values"
    return None


def _finite(t: torch.Tensor) -> bool:
    """No NaN and no infinity in t. aminmax is one pass (NaN propagates into both ends):
    ~30x<!-- unsaved: 2026-12-01 --> faster than isfinite().all() on the CPU, which matters for 750M parameters
    checked at every load. A meta tensor (buffers sized only, `demo.meta_weights`) holds no values to check."""
    if t.numel() == 0 or t.is_meta:
        return True
    low, high = torch.aminmax(t)
    return bool(torch.isfinite(low) & torch.isfinite(high))


def available_memory(device) -> int | None:
    """Bytes that can be allocated now on `device`: a GPU's free memory, the machine's available RAM
    (MemAvailable, which counts the page cache the kernel can drop), None where unknown (meta)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if hasattr(os, "sysconf") and "SC_AVPHYS_PAGES" in os.sysconf_names:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


def stored_bytes(shapes: dict[str, tuple[int, ...]], dtype, stored: dict[str, torch.dtype] | None = None) -> int:
    """Bytes of the tensors `shapes` once in memory: in `dtype` (the checkpoint's fp32 tensors in fp32 under
    a 16-bit dtype), or with dtype None in their `stored` dtypes."""
    total = 0
    for name, shape in shapes.items():
        dt = stored[name] if dtype is None else dtype
        if dtype in (torch.float16, torch.bfloat16) and is_f32_tensor(name):
            dt = torch.float32
        total += math.prod(shape) * torch.empty(0, dtype=dt).element_size()
    return total


def check_memory(need: int, device, what: str) -> None:
    """Raise WeightsTooLarge, one line, when `need` bytes exceed what `device` can allocate now: an
    allocation past it fails after minutes of work, or gets the process killed once its pages are touched."""
    have = available_memory(device)
    if have is not None and need > have and torch.device(device).type == "cuda":
        # an engine that failed or was dropped a moment ago may still hold its tensors in reference cycles
        # (a traceback's frames, graphs and their closures): collect them and return the allocator's cache
        gc.collect()
        torch.cuda.empty_cache()
        have = available_memory(device)
    if have is not None and need > have:
        raise WeightsTooLarge(f"{what} need {need / 2**30:.1f} GiB, more than the {have / 2**30:.1f} GiB "
                              f"{'free on' if torch.device(device).type == 'cuda' else 'available on'} {device}: "
                              "use a smaller config or a 16-bit --dtype, or a device with more memory")


def is_f32_tensor(name: str) -> bool:
    """The tensors the real checkpoint stores in fp32."""
    return name.endswith(F32_SUFFIXES)


_FLOAT_CODES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
_CODE_NAMES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64",
               "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def _cast_checked(name: str, t: torch.Tensor, dtype, match_hf_rounding: bool) -> torch.Tensor:
    """`_cast`, the stored tensor checked first (a NaN or an infinity is the file's, named as such) and the
    cast after (a value past the new dtype's range, e.g. fp32's 1e5 in fp16, becomes inf: named too)."""
    if not _finite(t):
        raise WeightError(f"the weights do not fit the config: tensor {name} holds NaN or infinite values")
    out = _cast(name, t, dtype, match_hf_rounding)
    if out.dtype != t.dtype and not _finite(out):
        raise WeightError(f"the weights do not fit the config: tensor {name} holds values beyond "
                          f"{str(out.dtype).replace('torch.', '')}'s range (stored in "
                          f"{str(t.dtype).replace('torch.', '')}): load it in a wider --dtype")
    return out


def _cast(name: str, t: torch.Tensor, dtype, match_hf_rounding: bool) -> torch.Tensor:
    """`t` in `dtype`, except the checkpoint's fp32 tensors, which stay fp32 under a 16-bit dtype."""
    if dtype is None:
        return t
    if is_f32_tensor(name) and not match_hf_rounding and dtype in (torch.float16, torch.bfloat16):
        return t.to(torch.float32)
    return t.to(dtype)


# ---------------------------------------------------------------------------------------------------
# finding and reading a checkpoint

def is_hub_id(source: str | Path) -> bool:
    """Whether `source` reads as a Hugging Face hub id ('Qwen/Qwen3.5-0.8B'), which `resolve_checkpoint` downloads."""
    return bool(_HUB_ID.match(str(source)))


def resolve_checkpoint(source: str | Path) -> Path:
    """A local checkpoint directory, or a hub id downloaded (with progress bars) into the HF cache."""
    if not isinstance(source, (str, os.PathLike)):      # None: "expected str, bytes or os.PathLike object"
        raise TypeError(f"source must be a checkpoint directory or a hub id, got {type(source).__name__}")
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{path} is a file; pass the checkpoint directory that holds config.json")
        return path
    if not is_hub_id(source):
        raise CheckpointNotFound(f"no checkpoint directory {path}, and {str(source)!r} is not a hub id "
                                "like 'Qwen/Qwen3.5-0.8B'")
    return _download(str(source))


def _download(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:
        raise CheckpointNotFound("downloading from the hub needs the huggingface_hub package "
                           "(pip install huggingface_hub), or pass a local checkpoint directory") from e
    try:  # already in the local cache: no network needed
        return Path(snapshot_download(repo_id, allow_patterns=_DOWNLOAD_PATTERNS, local_files_only=True))
    except Exception:  # noqa: BLE001  (not cached: fall through to the download)
        pass
    try:
        return Path(snapshot_download(repo_id, allow_patterns=_DOWNLOAD_PATTERNS))
    except Exception as e:  # noqa: BLE001  (offline, unknown repo, gated repo...: one clear message)
        raise CheckpointNotFound(
            f"could not download {repo_id!r} from the Hugging Face hub ({type(e).__name__}: {e}). "
            "If this machine is offline, download the checkpoint where there is network "
            "(`hf download " + repo_id + "`) and pass its local directory instead.") from e


def safetensors_files(root: Path) -> list[Path]:
    """The checkpoint's safetensors files: the shards of model.safetensors.index.json, or the single file.
    Each is a regular file inside `root`: a shard named with `..` or an absolute path is refused, and so is
    a FIFO or a device (reading one would block, or never end). Symbolic links are followed: the hub's
    cache links every file of a snapshot to its blob."""
    index = root / "model.safetensors.index.json"
    if index.exists():
        return [_regular(root / s, f"shard of {index.name}") for s in _shard_names(index)]
    single = root / "model.safetensors"
    if single.exists():
        return [_regular(single, "checkpoint file")]
    raise FileNotFoundError(f"no model.safetensors or model.safetensors.index.json in {root}")


def _shard_names(index: Path) -> list[str]:
    """The shard files an index names (its weight_map's values), each a plain path below its folder."""
    try:
        data = json.loads(_regular(index, "index").read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WeightError(f"{index} is not JSON: {e}") from None
    except RecursionError:      # arrays nested thousands deep: the parser gives up
        raise WeightError(f"{index} is not an index: its JSON is nested too deep to read") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise WeightError(f"{index} has no weight_map of tensor names to shard files")
    shards = sorted(set(weight_map.values()))
    outside = [s for s in shards if Path(s).is_absolute() or ".." in Path(s).parts or not Path(s).parts]
    if outside:
        raise WeightError(f"{index} names shards outside its folder: {outside[:5]}")
    missing = [s for s in shards if not (index.parent / s).exists()]
    if missing:
        raise FileNotFoundError(f"{index.name} lists shards that are not in {index.parent}: {missing}")
    return shards


def _regular(path: Path, what: str) -> Path:
    if not path.is_file():
        raise WeightError(f"the {what} {path} is not a regular file")
    return path


def text_name(key: str) -> str | None:
    """The name of a checkpoint tensor in the text model, or None for weights a text decoder skips."""
    if key.startswith(_SKIPPED_PREFIXES):
        return None
    for prefix in _TEXT_PREFIXES:
        if key.startswith(prefix):
            return key[len(prefix):]
    return key  # lm_head.weight, or something unexpected (reported by the caller)


def load_weights(source: str | Path, dtype=None, device="cpu", match_hf_rounding: bool = False):
    """Read a Qwen3.5 checkpoint: returns (Qwen35Config, weights dict).

    source: a local directory (config.json + safetensors, single file or sharded) or a hub id.
    dtype:  None keeps the stored dtypes; a dtype casts every tensor to it, except that under fp16/bf16
            the checkpoint's fp32 tensors stay fp32 unless match_hf_rounding.
    """
    if dtype is not None and dtype not in WEIGHT_FLOATS:   # one line, before any file is read
        raise TypeError(f"dtype must be None (as stored), float32, float16, bfloat16 or float64, got {dtype!r}")
    device = check_device(device, meta=True)
    root = resolve_checkpoint(source)
    config = Qwen35Config.from_json(root)
    expected = expected_shapes(config)
    files = safetensors_files(root)
    for file in files:
        try:
            str(file).encode("utf-8")
        except UnicodeEncodeError:   # safetensors takes the path as a Rust string: it must be UTF-8
            raise WeightError(f"the checkpoint path {str(file)!r} is not valid UTF-8, which safetensors cannot "
                              "open: move or rename the checkpoint to a UTF-8 path") from None
    # pass 1, the headers only: every stored tensor's name, shape and dtype checked, the memory counted
    stored, unexpected, problems, where = {}, [], [], {}
    for file in files:
        with _opened(file) as f:
            for key in f.keys():
                name = text_name(key)
                if name is None or (name == "lm_head.weight" and config.tie_word_embeddings):
                    continue  # the vision tower, the MTP head; tied: the embedding is the head
                if name not in expected:
                    unexpected.append(key)
                    continue
                if name in where:     # in two shards, or under two prefixes: the last one read won, unsaid
                    problems.append(f"tensor {name} is stored twice ({where[name]} and {key} in {file.name}): "
                                    "keep one")
                    continue
                where[name] = f"{key} in {file.name}"
                part = f.get_slice(key)
                shape, code = tuple(part.get_shape()), part.get_dtype()
                if shape != expected[name]:
                    problems.append(f"tensor {name} has shape {list(shape)}; the config expects "
                                    f"{list(expected[name])}")
                elif code not in _FLOAT_CODES:
                    stored_as = _CODE_NAMES.get(code, code)
                    problems.append(f"tensor {name} has dtype {stored_as} (as stored); weights must be floating "
                                    "point: float32, float16, bfloat16 or float64")
                stored[name] = _FLOAT_CODES.get(code, torch.float32)
    if unexpected:
        raise WeightError(f"{root} holds tensors the config does not describe: {unexpected[:10]}"
                          + (f" and {len(unexpected) - 10} more" if len(unexpected) > 10 else ""))
    missing = [f"missing tensor {n} (expected shape {list(s)})" for n, s in expected.items() if n not in stored]
    problems += missing
    if problems:
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise WeightError("the weights do not fit the config: " + problems[0] if len(problems) == 1 else
                          "the weights do not fit the config:\n  " + "\n  ".join(problems[:10]) + more)
    check_memory(stored_bytes(expected, dtype, stored), device, f"the {len(expected)} tensors of {root}")
    # pass 2: each tensor read, checked as stored, then cast and moved
    weights = {}
    for file in files:
        with _opened(file) as f:
            for key in f.keys():
                name = text_name(key)
                if name in stored:
                    weights[name] = _cast_checked(name, f.get_tensor(key), dtype, match_hf_rounding).to(device)
    check_weights(config, weights)
    return config, weights


class _opened:
    """`safe_open` of one file, its read errors named: a corrupt or truncated file says which."""

    def __init__(self, file: Path):
        self.file = file

    def __enter__(self):
        from safetensors import SafetensorError, safe_open
        self.errors = (SafetensorError, OSError)
        try:
            self.handle = safe_open(str(self.file), framework="pt", device="cpu")
            return self.handle.__enter__()
        except self.errors as e:
            raise WeightError(f"{self.file} is not a readable safetensors file ({e})") from None

    def __exit__(self, kind, value, tb):
        self.handle.__exit__(kind, value, tb)
        if kind is not None and issubclass(kind, self.errors):
            raise WeightError(f"{self.file} is not a readable safetensors file ({value})") from None
        return False


# ---------------------------------------------------------------------------------------------------
# random weights

def random_weights(config: Qwen35Config, dtype=torch.float32, device="cpu", seed: int = 0) -> dict:
    """Weights of the real shapes with transformers' initialisation, for tests and benchmarks.

    Linear, conv and embedding weights ~ N(0, 0.02); zero-centred norm weights 0 (scale 1); the gated
    norm weight and dt_bias 1; A_log = log U(0.01, 16). The checkpoint's fp32 tensors are fp32 (fp64 if
    dtype is fp64). Drawn on `device` from one seeded generator: the same seed gives the same weights on
    the same device type.
    """
    if dtype not in WEIGHT_FLOATS:     # one line, not a refusal of every tensor by the config check
        raise TypeError(f"dtype must be float32, float16, bfloat16 or float64, got {dtype!r}")
    seed = check_seed(seed)
    device = check_device(device)   # meta, a misspelt one or "cuda" without CUDA: torch's errors from the generator
    shapes = expected_shapes(config)
    check_memory(stored_bytes(shapes, dtype), device, f"random weights of {count_parameters(config):,} parameters")
    gen = torch.Generator(device=device).manual_seed(seed)
    weights = {}
    for name, shape in shapes.items():
        work = torch.float64 if dtype == torch.float64 else torch.float32
        if name.endswith("A_log"):
            t = torch.empty(shape, dtype=work, device=device).uniform_(0.01, 16, generator=gen).log_()
        elif name.endswith(("dt_bias", "linear_attn.norm.weight")):
            t = torch.ones(shape, dtype=work, device=device)
        elif name.endswith(("norm.weight", "layernorm.weight")):
            t = torch.zeros(shape, dtype=work, device=device)
        else:
            t = torch.empty(shape, dtype=work, device=device).normal_(0.0, 0.02, generator=gen)
        weights[name] = _cast(name, t, dtype, match_hf_rounding=False)
    return weights


def count_parameters(config: Qwen35Config) -> int:
    """Parameters of the text model (the tied head counted once)."""
    return sum(torch.Size(s).numel() for s in expected_shapes(config).values())


# ---------------------------------------------------------------------------------------------------
# writing the hub layout (for tests: the real checkpoint cannot be downloaded everywhere)

def _read_all(root: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    tensors = {}
    for file in safetensors_files(root):
        tensors.update(load_file(str(file)))
    return tensors


def write_hub_checkpoint(src_dir: str | Path, dst_dir: str | Path, num_shards: int = 1, dtype=None) -> Path:
    """Rewrite a `Qwen3_5ForCausalLM.save_pretrained` directory into the hub's multimodal layout.

    Text tensors move from `model.` to `model.language_model.`; a tied `lm_head.weight` is dropped; two
    small stand-ins for the vision tower and the MTP head are added (a loader must skip them); config.json
    becomes the composite `qwen3_5` config with the text config nested under `text_config`. With `dtype`
    the tensors are cast to it, keeping the fp32 ones fp32 as the real checkpoint does. `num_shards > 1`
    writes model-0000i-of-0000n.safetensors and model.safetensors.index.json. Other files (tokenizer,
    generation config) are copied. Every file is written as `safe_files.atomic_write_bytes` writes: a link in
    `dst_dir` is refused (`UnsafeWrite`), never written through. returns dst_dir.
    """
    from safetensors.torch import save

    src, dst = Path(src_dir), Path(dst_dir)
    dst.mkdir(parents=True, exist_ok=True)

    def write(name: str, data: bytes) -> None:
        atomic_write_bytes(dst / name, data, root=dst)
    text_config = json.loads((src / "config.json").read_text())
    tied = text_config.get("tie_word_embeddings", True)
    tensors = {}
    for key, t in _read_all(src).items():
        if key == "lm_head.weight":
            if tied:
                continue
            new_key = key
        else:
            if not key.startswith("model."):
                raise WeightError(f"{src} is not a Qwen3_5ForCausalLM checkpoint: unexpected tensor {key}")
            new_key = "model.language_model." + key[len("model."):]
        tensors[new_key] = _cast(key, t, dtype, match_hf_rounding=False).contiguous()
    hidden = text_config["hidden_size"]
    tensors["model.visual.patch_embed.proj.weight"] = torch.zeros(4, 3, 2, 2, 2)
    tensors["mtp.fc.weight"] = torch.zeros(hidden, 2 * hidden)

    for name in _written_files(dst):   # a link among them is removed, not followed
        name.unlink()
    names = sorted(tensors)
    if num_shards <= 1:
        write("model.safetensors", save(tensors, metadata={"format": "pt"}))
    else:
        weight_map = {}
        for s in range(num_shards):
            shard = f"model-{s + 1:05d}-of-{num_shards:05d}.safetensors"
            part = {k: tensors[k] for k in names[s::num_shards]}
            write(shard, save(part, metadata={"format": "pt"}))
            weight_map.update(dict.fromkeys(part, shard))
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        write("model.safetensors.index.json",
              json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2).encode())

    text_config.pop("architectures", None)
    text_config["model_type"] = "qwen3_5_text"
    composite = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
                 "tie_word_embeddings": tied, "text_config": text_config}
    write("config.json", json.dumps(composite, indent=2).encode())
    for other in src.iterdir():
        if other.is_file() and other.name != "config.json" and other not in _written_files(src):
            write(other.name, other.read_bytes())
    return dst


def _written_files(root: Path) -> list[Path]:
    return [p for p in root.glob("model*.safetensors*") if p.is_file() or p.is_symlink()]
