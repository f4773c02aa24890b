"""The bridge to transformers: its Qwen3.5 model for one of our configs, and its weights in our naming.

Used to check the reference model against `Qwen3_5ForCausalLM` and to measure transformers in the same
run. transformers is imported lazily: nothing else in the package needs it.
"""
from __future__ import annotations

import inspect

import torch

from .config import Qwen35Config


def hf_model(config: Qwen35Config, dtype=torch.float32, device="cpu", seed: int = 0,
             perturb_norms: float = 0.0, init_std: float = 0.02, attn_implementation: str = "sdpa"):
    """transformers' `Qwen3_5ForCausalLM` with its own random initialisation (seeded), in eval mode.

    perturb_norms: add N(0, perturb_norms) to every norm weight, so that the zero-centred `1 + w` and the
    plain `w` conventions give different results (at init the zero-centred weights are all 0).
    init_std: the std of linear and embedding weights (transformers' initializer_range, 0.02). A tiny
    model at 0.02 barely mixes tokens and greedy decoding repeats one token; ~0.1 makes it varied.
    """
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    hf_config = Qwen3_5TextConfig(**config.to_hf_dict(), initializer_range=init_std)
    hf_config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3_5ForCausalLM(hf_config)
    model = to_dtype(model, dtype).eval()
    if perturb_norms:
        gen = torch.Generator(device=device).manual_seed(seed + 1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.add_(torch.randn(p.shape, generator=gen, device=device, dtype=torch.float32)
                           .to(p.dtype) * perturb_norms)
    return model


def hf_from_pretrained(path, dtype=None):
    """transformers' `Qwen3_5ForCausalLM` read from a checkpoint folder, on its own PyTorch (and, where it is
    installed, flash-linear-attention) path: `use_kernels=False`. From transformers 5.25 `from_pretrained` turns
    the hub's kernels on by default and refuses to load without the `kernels` package; those kernels come from the
    hub at load time, which the course's GPU machines cannot reach, and they are not the baseline a table names."""
    from transformers import Qwen3_5ForCausalLM
    return Qwen3_5ForCausalLM.from_pretrained(path, dtype=dtype, use_kernels=False)


def to_dtype(model, dtype):
    """`model.to(dtype)`, in place, but with the rotary tables' inverse frequencies left in fp32.

    A plain `.to(torch.bfloat16)` also rounds the `inv_freq` buffers, so the RoPE angles p * inv_freq
    come out of bf16 frequencies; `from_pretrained(dtype=torch.bfloat16)` keeps them fp32 (they are
    computed in fp32 and not stored in the checkpoint). This casts the way loading a checkpoint does,
    which is what the reference model follows (its `rope_cache` computes the angles in fp32).
    """
    kept = [(m, name, getattr(m, name)) for m in model.modules()
            for name in ("inv_freq", "original_inv_freq") if isinstance(getattr(m, name, None), torch.Tensor)]
    model.to(dtype)
    for m, name, t in kept:
        setattr(m, name, t)
    return model


def weights_from_hf(model) -> dict[str, torch.Tensor]:
    """A `Qwen3_5ForCausalLM`'s parameters under our names (no `model.` prefix, tied head dropped)."""
    weights = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        weights[name.removeprefix("model.")] = t.detach()
    return weights


def _cache_kwarg(model) -> str:
    # transformers 5.24 calls it `cache`; 5.2-5.17 `past_key_values`
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.no_grad()
def hf_forward(model, ids, cache=None):
    """One forward with a cache: returns (logits [T, vocab] of the new tokens, the cache to pass next)."""
    ids = torch.as_tensor(ids, device=model.device).reshape(1, -1)
    out = model(input_ids=ids, use_cache=True, **{_cache_kwarg(model): cache})
    return out.logits[0], getattr(out, "cache", None) or out.past_key_values
