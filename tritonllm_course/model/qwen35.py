"""Qwen3.5 text decoder in plain PyTorch, composed from the reference operators.

    x = E[ids]
    for each of the 24 layers (18 Gated DeltaNet, 6 gated attention: every 4th):
        x = x + mixer(rms_norm(x))          mixer = Gated DeltaNet or gated attention
        x = x + mlp(rms_norm(x))
    logits = rms_norm(x) @ E.T              tied head

Prefill runs T tokens at once (chunked delta rule, causal attention over the prompt); decode runs one
token against the cache (recurrent delta rule, attention over the KV cache). Both write the cache in
place. The numerics follow transformers' torch path (the one that runs without flash-linear-attention and
causal-conv1d installed, on a GPU as on the CPU): matmuls in the model dtype; norms, softmax, gates and
the DeltaNet state in fp32, rounded back to the model dtype where transformers rounds.

In bf16 and fp16 (`low_precision`) the operators are called with `match_hf_rounding`: the conv through
F.conv1d in the model dtype (its output rounded before the SiLU), attention through torch's fused SDPA
as transformers' default `sdpa` attention calls it, the delta rule in transformers' fp32 order of
operations (and q divided by sqrt(d_k) in decode, where the chunked form multiplies by d_k^-0.5). Not
only the precision but the operations must match: with random weights one bf16 rounding that comes
out differently early in the model grows, layer by layer, to ~1e-2 at the logits (transformers' own
bf16 logits are 5.1%<!-- fig:results.hf_rounding.prefill.hf_bf16_vs_fp32_pct --> (prefill) and
6.6%<!-- fig:results.hf_rounding.decode.hf_bf16_vs_fp32_pct --> (decode) from its fp32 ones on an H200:
results/hf_rounding_nvidia-h200_2026-12-05.json). So
matched, the bf16 logits equal transformers' bit for bit on the CPU (for a bf16 transformers model cast as
`from_pretrained` casts it, RoPE frequencies in fp32: see `hf_compat.to_dtype`) and, in that record, on the
GPU. In fp32 the operators' own forms run, within 4e-6 of transformers (the same record).

In fp16 the residual stream x is kept in fp32 (`residual_dtype`), unlike transformers: a trained
model's stream can outgrow fp16's 65,504 (chapter 09_output_residual); the sublayers still read norm(x) in fp16.
"""
from __future__ import annotations

import torch

from .. import reference as R
from ..config import Qwen35Config
from ..validate import check_ids, flag
from ..weights import check_weights, load_weights, random_weights
from .cache import Qwen35Cache


class Qwen35Model:
    def __init__(self, config: Qwen35Config, weights: dict[str, torch.Tensor]):
        check_weights(config, weights)
        self.config = config
        self.weights = weights
        embed = weights["embed_tokens.weight"]
        self.dtype, self.device = embed.dtype, embed.device
        self.lm_head_weight = weights.get("lm_head.weight", embed)   # tied: the embedding is the head
        self.cos = self.sin = None                                    # RoPE tables, grown on demand

    @property
    def residual_dtype(self) -> torch.dtype:
        """The residual stream's dtype: fp32 in fp16 mode (it would overflow), else the model dtype (bf16
        adds in bf16, as transformers does)."""
        return torch.float32 if self.dtype == torch.float16 else self.dtype

    @property
    def low_precision(self) -> bool:
        """bf16/fp16: the operators are then called with `match_hf_rounding` (see the module docstring)."""
        return self.dtype in (torch.float16, torch.bfloat16)

    def _hf(self, op) -> dict:
        """`match_hf_rounding=True` for the reference's own operators in bf16/fp16; nothing for a kernel
        swapped in (`swap.swapped`), which takes its slot's arguments only."""
        own = getattr(op, "__module__", "").startswith("tritonllm_course.reference")
        return {"match_hf_rounding": True} if own and self.low_precision else {}

    # construction --------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, source, dtype=None, device="cpu", match_hf_rounding=False) -> "Qwen35Model":
        """From a checkpoint directory or hub id (see `weights.load_weights`)."""
        config, weights = load_weights(source, dtype=dtype, device=device, match_hf_rounding=match_hf_rounding)
        return cls(config, weights)

    @classmethod
    def random(cls, config: Qwen35Config, dtype=torch.float32, device="cpu", seed: int = 0) -> "Qwen35Model":
        return cls(config, random_weights(config, dtype=dtype, device=device, seed=seed))

    def new_cache(self, max_seq_len: int) -> Qwen35Cache:
        return Qwen35Cache.allocate(self.config, max_seq_len, dtype=self.dtype, device=self.device)

    # forward ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, ids, cache: Qwen35Cache | None = None, all_logits: bool = False) -> torch.Tensor:
        """Run the tokens `ids` after what `cache` holds; returns logits.

        ids:   [T] int tensor or list of token ids (T >= 1)
        cache: filled in place; None runs the tokens alone with a throw-away cache
        returns [T, vocab] with all_logits, else [1, vocab] for the last token, in the model dtype.
        """
        c = self.config
        self._check_call(cache, all_logits)
        if isinstance(ids, torch.Tensor):        # left where it is: ids on the CPU are range-checked for free
            if ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dim() != 1:
                raise ValueError(f"ids must be a 1-D tensor of integer token ids (one sequence), got "
                                 f"{str(ids.dtype).replace('torch.', '')} of shape {list(ids.shape)}")
        else:                                    # a batch, floats, bools, a string: refused, never flattened
            ids = torch.tensor(check_ids(ids, "ids"), dtype=torch.int64)
        T = ids.numel()
        if T == 0:
            raise ValueError("ids is empty: give at least one token")
        if cache is None:
            cache = self.new_cache(T)
        start = cache.length
        if start + T > cache.max_seq_len:
            raise ValueError(f"{start} cached + {T} new tokens exceed the cache of {cache.max_seq_len} tokens")
        pos = torch.arange(start, start + T, device=self.device)                 # [T]
        self._grow_rope(cache.max_seq_len)
        decode = start > 0 and T == 1

        w, eps = self.weights, c.rms_norm_eps
        dt = self.dtype                                  # the sublayers' inputs; x may be wider (fp16 mode)
        x = R.embedding(ids, w["embed_tokens.weight"]).to(self.residual_dtype)     # [T, hidden]
        for i, kind in enumerate(c.layer_types):
            p = f"layers.{i}."
            h = R.rms_norm(x, w[p + "input_layernorm.weight"], eps).to(dt)
            if kind == "full_attention":
                h = self._attention(i, h, pos, cache)
            else:
                h = self._deltanet(i, h, cache, decode)
            x, h = R.residual_rms_norm(h, x, w[p + "post_attention_layernorm.weight"], eps)
            h = R.mlp(h.to(dt), w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                      w[p + "mlp.down_proj.weight"])
            x = R.residual_add(h, x)
        cache.length = start + T
        if not all_logits:
            x = x[-1:]                                                             # [1, hidden]
        return R.lm_head(R.rms_norm(x, w["norm.weight"], eps).to(dt), self.lm_head_weight)

    __call__ = forward

    def _check_call(self, cache, all_logits) -> None:
        """`forward`'s cache (None, or one of this model's: `new_cache`) and switch, before any work: a dict was an
        AttributeError, a cache of another dtype a RuntimeError of index_put in the first layer, and a string
        all_logits such as "no" was true."""
        flag(all_logits, "all_logits")
        if cache is None:
            return
        if not isinstance(cache, Qwen35Cache):
            raise TypeError(f"cache must be a Qwen35Cache (model.new_cache(max_seq_len)) or None, got "
                            f"{type(cache).__name__}")
        flat = cache.storage[0]
        if flat.dtype != self.dtype or flat.device != self.device:
            raise ValueError(f"cache holds {str(flat.dtype).replace('torch.', '')} on {flat.device}; this model "
                             f"runs {str(self.dtype).replace('torch.', '')} on {self.device}: use model.new_cache")

    def _grow_rope(self, n: int) -> None:
        if self.cos is None or self.cos.shape[0] < n:
            c = self.config
            self.cos, self.sin = R.rope_cache(n, c.rotary_dim, c.rope_theta, dtype=self.dtype, device=self.device)

    def _attention(self, i: int, x: torch.Tensor, pos: torch.Tensor, cache: Qwen35Cache) -> torch.Tensor:
        """Gated full attention of layer i over x [T, hidden] at positions pos [T]."""
        c, w, eps = self.config, self.weights, self.config.rms_norm_eps
        p = f"layers.{i}.self_attn."
        T = x.shape[0]
        q, gate, k, v = R.attention_qkv_proj(x, w[p + "q_proj.weight"], w[p + "k_proj.weight"],
                                             w[p + "v_proj.weight"], c.head_dim)   # q [T, 8, 256], k/v [T, 2, 256]
        q = R.apply_rope(R.qk_norm(q, w[p + "q_norm.weight"], eps), self.cos, self.sin, pos)
        k = R.apply_rope(R.qk_norm(k, w[p + "k_norm.weight"], eps), self.cos, self.sin, pos)
        R.kv_cache_write(k, v, cache.k[i], cache.v[i], pos)
        keys, values = R.kv_cache_read(cache.k[i], cache.v[i], cache.length + T)  # [S, 2, 256] each
        o = R.attention(q, keys, values, pos, c.head_dim ** -0.5, **self._hf(R.attention))   # [T, 8, 256]
        o = R.output_gate(o.reshape(T, -1), gate)                                  # [T, 2048]
        return R.linear(o, w[p + "o_proj.weight"])

    def _deltanet(self, i: int, x: torch.Tensor, cache: Qwen35Cache, decode: bool) -> torch.Tensor:
        """Gated DeltaNet of layer i over x [T, hidden]; decode uses the one-token forms."""
        c, w, eps = self.config, self.weights, self.config.rms_norm_eps
        p = f"layers.{i}.linear_attn."
        T = x.shape[0]
        qkv, z, b, a = R.deltanet_in_proj(x, w[p + "in_proj_qkv.weight"], w[p + "in_proj_z.weight"],
                                          w[p + "in_proj_b.weight"], w[p + "in_proj_a.weight"])
        conv = R.conv1d_decode if decode else R.conv1d_prefill
        state = cache.conv[i] if cache.length or decode else None                 # None: a prompt's start
        qkv, conv_state = conv(qkv, w[p + "conv1d.weight"].squeeze(1), state, **self._hf(conv))   # [T, 6144]
        cache.conv[i].copy_(conv_state)
        q, k, v = qkv.split([c.linear_key_dim, c.linear_key_dim, c.linear_value_dim], dim=-1)
        q = q.reshape(T, c.linear_num_key_heads, c.linear_key_head_dim)           # [T, 16, 128]
        k = k.reshape(T, c.linear_num_key_heads, c.linear_key_head_dim)           # [T, 16, 128]
        v = v.reshape(T, c.linear_num_value_heads, c.linear_value_head_dim)       # [T, 16, 128]
        if self.low_precision and decode:            # transformers' recurrent rule divides q by sqrt(d_k)
            q, k = R.l2norm(R.acc(q)) / c.linear_key_head_dim ** 0.5, R.l2norm(R.acc(k))
        else:                                        # (and its chunked rule multiplies by d_k^-0.5)
            q, k = R.l2norm_qk(R.acc(q), R.acc(k))   # fp32, fed straight to the rule as transformers does
        beta, g = R.deltanet_gates(b, a, w[p + "A_log"], w[p + "dt_bias"])
        rule = R.gated_delta_rule_recurrent if decode else R.gated_delta_rule_chunked
        o, state = rule(q, k, v, g, beta, cache.state[i], **self._hf(rule))        # o [T, 16, 128]
        cache.state[i].copy_(state)
        z = z.reshape(T, c.linear_num_value_heads, c.linear_value_head_dim)       # [T, 16, 128]
        o = R.gated_rms_norm(o, z, w[p + "norm.weight"], eps)
        return R.linear(o.reshape(T, -1), w[p + "out_proj.weight"])               # [T, hidden]
