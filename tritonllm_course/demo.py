"""Random weights for the chapters' demonstrations, the real model's buffers without allocating them, and every
reference operator's kernel for `swap.compare_greedy`: beside `weights.py` and `swap.py`, below the model and
the engine, which the chapters build from them."""
from __future__ import annotations

import torch

from . import kernels
from .config import Qwen35Config
from .weights import expected_shapes, is_f32_tensor, random_weights

WEIGHT_SCALE = 5.0   # as `swap.py`: at five times transformers' initialisation a random model's greedy path is varied


def varied_weights(config: Qwen35Config, dtype=torch.float32, device="cpu", seed: int = 0) -> dict:
    """transformers' random initialisation with the matrices (and the embedding) scaled by 5: greedy decoding
    then wanders over the vocabulary instead of repeating one token, so identical tokens mean something."""
    weights = random_weights(config, dtype=dtype, device=device, seed=seed)
    for w in weights.values():
        if w.dim() == 2:
            w.mul_(WEIGHT_SCALE)
    return weights


def meta_weights(config: Qwen35Config, dtype=torch.bfloat16) -> dict:
    """Weights of the config's shapes on the meta device (no memory): to size an engine's buffers."""
    return {name: torch.empty(shape, dtype=torch.float32 if is_f32_tensor(name) else dtype, device="meta")
            for name, shape in expected_shapes(config).items()}


# reference op name -> (kernel family, host wrapper) for every op of the reference model that has a kernel
KERNEL_OF_OP = {
    "embedding": ("embedding", "embedding"), "rms_norm": ("rmsnorm", "rms_norm"), "qk_norm": ("rmsnorm", "qk_norm"),
    "linear": ("linear", "linear"), "apply_rope": ("rope", "apply_rope"),
    "kv_cache_write": ("kv_cache", "kv_cache_write"), "kv_cache_read": ("kv_cache", "kv_cache_read"),
    "attention": ("attention", "attention"), "output_gate": ("attention", "output_gate"),
    "conv1d_prefill": ("conv1d", "conv1d_prefill"), "conv1d_decode": ("conv1d", "conv1d_decode"),
    "l2norm_qk": ("deltanet_gates", "l2norm_qk"), "deltanet_gates": ("deltanet_gates", "deltanet_gates"),
    "gated_delta_rule_chunked": ("delta_rule", "gated_delta_rule_chunked"),
    "gated_delta_rule_recurrent": ("delta_rule", "gated_delta_rule_recurrent"),
    "gated_rms_norm": ("gated_rmsnorm", "gated_rms_norm"), "residual_add": ("residual", "residual_add"),
    "swiglu": ("swiglu", "swiglu"), "argmax": ("sampling", "argmax"),
}


def every_kernel(source: str | None = None) -> dict:
    """{reference op name: kernel} for every operator of the reference model that has a kernel, for
    `swap.compare_greedy`: the reference model run op by op from the course's kernels.
    source: as `kernels.load` (None: the learner's where filled in, else the solution)."""
    ops = {op: kernels.get(family, name, source) for op, (family, name) in KERNEL_OF_OP.items()}
    embedding = ops["embedding"]
    # the reference model keeps the prompt's ids where they come from (the host); the kernel wants them
    # on the table's device
    ops["embedding"] = lambda ids, weight: embedding(ids.to(weight.device), weight)
    return ops
