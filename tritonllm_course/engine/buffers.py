"""Every tensor the engine computes into, allocated once.

A CUDA graph records the addresses its kernels read and write; a decode step replayed from it only
works if every input and output stays at the same address. So nothing is allocated per token:

- the cache (`model.cache.Qwen35Cache`, the reference model's own layout): the KV cache of the attention
  layers up to `max_seq_len` tokens, the conv state and the fp32 recurrent state of the DeltaNet layers;
- `Activations(rows=1)` for the decode step and `Activations(rows=prefill_chunk)` for prompts (a longer
  prompt is run chunk after chunk, each continuing from the cache);
- `Counters`: the token to feed, [position, length, seed] in device memory, the logits.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from ..config import Qwen35Config


class Activations:
    """The intermediate tensors of one forward over up to `rows` tokens, each [rows, ...].

    The merged projections' outputs: one buffer per group [rows, total width], written by one GEMM (one
    GEMV at decode), whose pieces are column views: contiguous when rows = 1, else each token's piece
    contiguous and the tokens `total width` apart, which every kernel that reads a piece takes (the
    attention's q/k norms, cache write and output gate; the DeltaNet's conv, gates and gated norm).
    stream_dtype: the residual stream x's (fp32 in fp16 mode, with the fp32 scratch h_wide); default dtype.
    """

    def __init__(self, config: Qwen35Config, rows: int, dtype, device, merged_widths: dict[str, dict[str, int]],
                 stream_dtype=None):
        c = config
        self.rows = rows
        self.tensors: dict[str, torch.Tensor] = {}
        self.merged: dict[str, torch.Tensor] = {}     # group -> [rows, total width], its pieces views into it

        def add(name, *shape, dt=dtype):
            self.tensors[name] = torch.empty(rows, *shape, dtype=dt, device=device)

        stream_dtype = stream_dtype or dtype
        add("x", c.hidden_size, dt=stream_dtype)                        # residual stream (fp32 in fp16 mode)
        for name in ("h", "mixer"):                                     # norm out, sublayer out
            add(name, c.hidden_size)
        if stream_dtype != dtype:   # the norms' fp32 output before the cast (their kernels write x's dtype)
            add("h_wide", c.hidden_size, dt=stream_dtype)
            add("zero", c.hidden_size)                                  # a zero residual (fast level, fp16)
            self.tensors["zero"].zero_()
        add("gate_up", 2 * c.intermediate_size)
        add("act", c.intermediate_size)
        for group, widths in merged_widths.items():
            buf = torch.empty(rows, sum(widths.values()), dtype=dtype, device=device)
            self.merged[group] = buf
            start = 0
            for piece, width in widths.items():
                self.tensors[f"{group}.{piece}"] = buf[:, start:start + width]         # [rows, width] view
                start += width
        if c.attention_layers:
            add("q", c.num_attention_heads, c.head_dim)                 # normed, then rotated in place
            add("k", c.num_key_value_heads, c.head_dim)
            add("o", c.num_attention_heads, c.head_dim)
            add("gated", c.num_attention_heads * c.head_dim)
        if c.linear_layers:
            f32 = torch.float32
            # the L2-normed q and k: fp32 for the recurrent rule (decode), which reads them as they are; the
            # chunked rule (prompts) feeds them to the tensor cores in v's dtype, so there the conv rounds them
            # once as it writes them (the same rounding as a cast after it, one kernel launch fewer per layer)
            qk = f32 if rows == 1 else dtype
            add("dq", c.linear_num_key_heads, c.linear_key_head_dim, dt=qk)
            add("dk", c.linear_num_key_heads, c.linear_key_head_dim, dt=qk)
            add("dv", c.linear_num_value_heads, c.linear_value_head_dim)
            add("beta", c.linear_num_value_heads)
            add("g", c.linear_num_value_heads, dt=f32)
            add("do", c.linear_num_value_heads, c.linear_value_head_dim)
            add("dnorm", c.linear_num_value_heads, c.linear_value_head_dim)

    def take(self, T: int) -> SimpleNamespace:
        """Views of the first T rows of every tensor; names with a dot become `group_piece`, a merged
        group's whole buffer is `group_merged`."""
        if not 0 < T <= self.rows:
            raise ValueError(f"{T} rows asked of activations sized for {self.rows}")
        return SimpleNamespace(**{n.replace(".", "_"): t[:T] for n, t in self.tensors.items()},
                               **{f"{g}_merged": b[:T] for g, b in self.merged.items()})

    def nbytes(self) -> int:
        views = {n for n in self.tensors if "." in n}          # the merged groups' pieces: counted once, below
        return (sum(t.numel() * t.element_size() for n, t in self.tensors.items() if n not in views)
                + sum(t.numel() * t.element_size() for t in self.merged.values()))


class Counters:
    """What changes from one decode step to the next, in device memory.

    ids:   [1] int64, the token the next decode step consumes (the argmax writes it there)
    flag:  [1] int64, whether the logits it came from were finite (0), held inf (1) or NaN (2); ids and
           flag are the two elements of `out`, so that one copy brings both to the host
    steps: [3] int32 = [position of that token, cache length including it, sampling seed]; the
           graphed step ends by adding 1 to all three (`advance_positions`)
    logits: [1, vocab] in the model dtype, the last position's
    """

    def __init__(self, vocab_size: int, dtype, device):
        self.out = torch.zeros(2, dtype=torch.int64, device=device)
        self.ids, self.flag = self.out[0:1], self.out[1:2]
        self.steps = torch.zeros(3, dtype=torch.int32, device=device)
        self.logits = torch.empty(1, vocab_size, dtype=dtype, device=device)

    @property
    def pos(self) -> torch.Tensor:
        return self.steps[0:1]

    @property
    def length(self) -> torch.Tensor:
        return self.steps[1:2]

    @property
    def seed(self) -> torch.Tensor:
        return self.steps[2:3]

    def set(self, position: int, seed: int) -> None:
        """Before the first decode step after a prompt: fills on the device, no host-to-device copy."""
        self.steps[0:1].fill_(position)
        self.steps[1:2].fill_(position + 1)
        self.steps[2:3].fill_(seed)
