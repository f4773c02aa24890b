"""The forward arithmetic of the engine: one decode step and one prompt chunk, layer by layer, from the
kernel slots of the op table, following the fused operators of the plan (`plan.Fusions`); static buffers
only, so a decode step can be captured in a CUDA graph (the engine, `engine.py`, does that). A projection's
weight is a tensor or an 8-bit `merged.Quantized`, passed to its slot by `merged.projection_args` (the plan
runs the quant kernels for those, and at the fast level's decode the fused kernels with the weight's row scales:
`merged.fused_weight_args`).

Optimisation levels (`level`), the benchmark's rows with `cuda_graph`: each a plan (`plan.LEVELS`) of steps,
the kernel slot each runs, and of what each path fuses (`plan.Fusions`), which the one prefill path and the
one decode path below follow:
  "operators"  one kernel per operator (chapter 19_engine)
  "fused"      RMSNorm folded into the merged projections (ln1 and ln2, at decode only), the last residual add
               into the final norm, split-K for the narrow decode GEMVs, FlashDecoding /
               FlashAttention (chapters 21_norm_fusion, 23_flash_attention, 24_split_k and 25_flash_decoding)
  "fast"       "fused" with the residual adds in the output projections' epilogues, plain GEMVs for
               them, an attention layer's q/k norms, RoPE and cache write in one kernel, at decode the
               DeltaNet gates inside the recurrent delta rule and its gated RMSNorm inside out_proj
               (chapter 22_layer_fusion): the fewest kernels per token

fp16 mode (`residual_dtype`): the residual stream a.x is fp32, as in the reference model (Qwen's stream
outgrows fp16's 65,504). The residual adds take it as it is; the kernels that write or read it in the
model dtype are adapted here: the embedding goes through a.h and is cast; a norm of its own (every level's
prefill ln1, the operators level's norms) writes fp32 scratch, cast to a.h; at the fused and fast levels
(`Fusions.residual_into_final_norm`) every residual add runs in `residual_rmsnorm` with a zero weight, in
the launch `attn_residual` / `mlp_residual` would take, and also writes a.h, an fp16 copy of the stream
scaled to unit RMS (RMSNorm ignores its input's scale), which the norm-folded projections and a prompt's
ln2 read; the fast level's output projections add a zero residual there.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch

from ..runtime import programmatic_launches
from ..validate import check_sampling
from .merged import fused_weight_args, projection_args


@dataclass(frozen=True)
class Sampling:
    """Temperature / top-k / top-p: Python numbers, so frozen into a captured graph (one graph each). Defined
    beside the decode step that reads it; `Engine` exports it."""
    temperature: float
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        """The options checked as `generate`'s are (`check_sampling`): `prefill` and `decode` take a Sampling made
        by hand, whose NaN temperature or top_p of 0 would otherwise reach the sampler's float32 arithmetic."""
        check_sampling(self.temperature, self.top_k, self.top_p)


@functools.cache
def _takes_flag(fn) -> bool:
    """Whether an argmax / sample kernel writes the logits' flag itself (`flag=`: the course's do)."""
    try:
        return "flag" in inspect.signature(fn).parameters
    except (TypeError, ValueError):                      # a builtin or C function: no signature to read
        return False


class Forward:
    """The two paths of the engine, as methods of the `Engine` (which derives from this class): they read the
    engine's op table (`ops`: `ops.prefill.<step>`, `ops.decode.<step>`), its fitted plan (`plan`), merged
    weights, cache, static buffers (`counters`, the activations' views), RoPE tables and `wide_stream`
    (fp16 mode), all set up by `Engine.__init__`."""

    # the two paths -------------------------------------------------------------------------------------
    # One code for every level: each path reads its `Fusions` (`self.plan.prefill` / `.decode`, plan.py) to
    # choose between the operators' kernels and the fused ones, which the op table's steps name.
    def _decode_step(self, sampling: Sampling | None) -> None:
        """One token: reads ids / position / length from the counters, leaves the next token in ids and
        advances the counters. Static shapes and buffers only: this is what the CUDA graph captures."""
        op, f, ctr, w = self.ops.decode, self.plan.decode, self.counters, self.weights
        a = self._decode_views
        with programmatic_launches(False):   # with PDL: a step starts when the one before has finished
            self._embed(op, ctr.ids, a)
        self._layers(op, f, a, 1, ctr.pos, None)
        if f.residual_into_final_norm:
            self._final_residual_norm(op, f, a)
        else:
            self._norm(op.final_norm, a.x, w.norm, a.h, getattr(a, "h_wide", None))
        op.lm_head(x=a.h, **projection_args(w.lm_head), out=ctr.logits)
        self._next_token(op, sampling)
        op.advance(steps=ctr.steps)

    def _prefill_chunk(self, a, ids: torch.Tensor, start: int, last: bool, layers: range | None = None) -> None:
        """Tokens ids [T] at positions start.. (after what the cache holds) through the views `a` of the
        prefill activations; the last chunk of a prompt also computes the logits of its last position.
        layers: only these (one CUDA graph's piece of the chunk, `graph.layer_pieces`), the embedding with
        the first layer and the head with the last."""
        op, f, w, T = self.ops.prefill, self.plan.prefill, self.weights, ids.shape[0]
        layers = range(len(w.layers)) if layers is None else layers
        if layers.start == 0:
            with programmatic_launches(False):   # with PDL: a chunk starts when what came before has finished
                self._embed(op, ids, a)
        self._layers(op, f, a, T, self.positions[start:start + T], start, layers)      # positions: [T] int32
        if layers.stop < len(w.layers):
            return
        if f.residual_into_final_norm:   # with the last layer's add: every row of every chunk
            self._final_residual_norm(op, f, a)
            h = a.h[T - 1:]
        elif last:                       # a norm of its own: the last token's row only
            wide = getattr(a, "h_wide", None)
            self._norm(op.final_norm, a.x[T - 1:], w.norm, self.final, None if wide is None else wide[T - 1:])
            h = self.final
        if last:
            op.lm_head(x=h, **projection_args(w.lm_head), out=self.counters.logits)   # h [1, hidden]: the last token

    def _layers(self, op, f, a, T: int, pos, start: int | None, layers: range | None = None) -> None:
        """Every layer (or those of `layers`) over the stream a.x [T, hidden]: ln1 and the merged in-projection,
        the mixer, the MLP sublayer. start is None on the decode path."""
        last = len(self.weights.layers) - 1
        for i in range(last + 1) if layers is None else layers:
            layer = self.weights.layers[i]
            if self._in_proj(op, f, a, i, layer) == "attn":
                self._attention(op, f, a, i, layer, T, pos, start)
            else:
                self._deltanet(op, f, a, i, layer, T, start)
            self._mlp(op, f, a, layer, i == last)

    def _in_proj(self, op, f, a, i, layer) -> str:
        """ln1 and the layer's merged in-projection: one GEMM (one GEMV at decode) into the group's whole
        buffer, whose pieces the kernels after it read as column views. Returns the group."""
        group = "attn" if layer.kind == "full_attention" else "dn"
        proj, out = getattr(op, f"{group}_in_proj"), getattr(a, f"{group}_merged")   # [T, total width]
        if f.norm_into_projection:   # ln1 folded in: the projection normalises the stream as it reads it
            conv = {}
            if group == "dn" and f.conv_into_in_proj:    # and runs the conv's step, its state rolled in place
                conv = {"conv_weight": layer.small["conv"], "conv_state": self.cache.conv[i]}
            proj(x=self._stream_in(a, f), norm_weight=layer.ln1, **fused_weight_args(layer.mixer_in.weight),
                 eps=self.config.rms_norm_eps, out=out, **conv)
        else:
            self._norm(op.ln1, a.x, layer.ln1, a.h, getattr(a, "h_wide", None))
            proj(x=a.h, **projection_args(layer.mixer_in.weight), out=out)
        return group

    def _attention(self, op, f, a, i, layer, T: int, pos, start: int | None) -> None:
        """Gated attention of layer i after its in-projection -> a.mixer (or added to a.x). start is None on
        the decode path."""
        c, eps = self.config, self.config.rms_norm_eps
        q_raw = a.attn_q.view(T, c.num_attention_heads, c.head_dim)      # [T, heads, head_dim]
        k_raw = a.attn_k.view(T, c.num_key_value_heads, c.head_dim)      # [T, kv_heads, head_dim]
        v = a.attn_v.view(T, c.num_key_value_heads, c.head_dim)          # [T, kv_heads, head_dim]
        k_cache, v_cache = self.cache.k[i], self.cache.v[i]
        if f.rope_cache_write_into_qk_norm:
            op.qk_prologue(q=q_raw, k=k_raw, v=v, q_weight=layer.small["q_norm"], k_weight=layer.small["k_norm"],
                           cos=self.cos, sin=self.sin, pos=pos, k_cache=k_cache, v_cache=v_cache, eps=eps, out=a.q)
        else:
            op.q_norm(x=q_raw, weight=layer.small["q_norm"], eps=eps, out=a.q)
            op.k_norm(x=k_raw, weight=layer.small["k_norm"], eps=eps, out=a.k)
            op.q_rope(x=a.q, cos=self.cos, sin=self.sin, pos=pos)
            op.k_rope(x=a.k, cos=self.cos, sin=self.sin, pos=pos)
            op.cache_kv_write(k=a.k, v=v, k_cache=k_cache, v_cache=v_cache, pos=pos)
        scale = c.head_dim ** -0.5
        heads = (c.num_attention_heads, c.head_dim)
        gated = f.output_gate_into_attention          # the attention kernel writes the gated output itself
        o = a.gated.view(T, *heads) if gated else a.o                          # [T, heads, head_dim]
        gate = a.attn_gate.view(T, *heads)                    # [T, heads, head_dim], a column view
        if start is None:   # one token over the cache; the length is read from device memory
            op.attention(q=a.q[0], k_cache=k_cache, v_cache=v_cache, length=self.counters.length,
                         scale=scale, out=o[0], **({"gate": gate[0]} if gated else {}))
        else:               # the chunk's tokens over everything cached up to them
            op.attention(q=a.q, k=k_cache[:start + T], v=v_cache[:start + T], pos=pos, scale=scale, out=o,
                         **({"gate": gate} if gated else {}))
        if not gated:
            op.output_gate(o=a.o.view(T, -1), gate=a.attn_gate, out=a.gated)   # [T, heads * head_dim]
        self._out_proj(op.o_proj, f, a.gated, layer.mixer_out, a)

    def _deltanet(self, op, f, a, i, layer, T: int, start: int | None) -> None:
        """Gated DeltaNet of layer i after its in-projection -> a.mixer (or added to a.x), its cache updated
        in place. start is None on the decode path; 0 for a new sequence's first chunk, whose states are the
        reset's zeros: there the kernels read none (as if given no state) and the conv writes its new state
        in place."""
        c, small = self.config, layer.small
        H, HV, DK, DV = (c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim,
                         c.linear_value_head_dim)
        conv_state, state = self.cache.conv[i], self.cache.state[i]
        fresh = start == 0
        if f.conv_into_in_proj:   # q, k, v where the in-projection's conv left them, L2-normalised in the rule
            q, k, v = a.dn_qkv.split([H * DK, H * DK, HV * DV], dim=-1)   # [T, H*DK] x 2, [T, HV*DV]
            qkv = dict(q=q.view(T, H, DK), k=k.view(T, H, DK), v=v.view(T, HV, DV), qk_norm=True)
        else:
            conv = dict(x=a.dn_qkv, weight=small["conv"], conv_state=None if fresh else conv_state, key_heads=H,
                        head_dim=DK, value_head_dim=DV, q=a.dq, k=a.dk, v=a.dv)
            if start is None:   # the state is rolled in place
                op.conv(**conv)
            elif fresh:         # no program reads the old state: the new one goes straight into the cache
                op.conv(**conv, new_state=conv_state)
            else:               # the new state goes to a scratch buffer: programs still read the old one
                op.conv(**conv, new_state=self.new_conv_state)
                conv_state.copy_(self.new_conv_state)
            qkv = dict(q=a.dq, k=a.dk, v=a.dv)
        rule = dict(**qkv, initial_state=None if fresh else state, final_state=state)
        if not f.gates_into_delta_rule:
            op.gates(b=a.dn_b, a=a.dn_a, A_log=small["A_log"], dt_bias=small["dt_bias"], beta=a.beta, g=a.g)
            rule.update(g=a.g, beta=a.beta)
        else:   # the chunked rule's first kernel keeps g in a.g
            rule.update(a=a.dn_a, b=a.dn_b, A_log=small["A_log"], dt_bias=small["dt_bias"],
                        **({} if start is None else {"g": a.g}))
        z = a.dn_z.view(T, HV, DV)                                                   # [T, HV, Dv]
        norm = dict(z=z, norm_weight=small["norm"], eps=c.rms_norm_eps)
        if f.gated_norm_into_delta_rule:   # in the chunked rule's last kernel's epilogue
            op.delta_rule(**rule, **norm, out=a.dnorm)
            x, extra = a.dnorm.view(T, -1), {}
        elif f.gated_norm_into_out_proj:
            op.delta_rule(**rule, out=a.do)
            x, extra = a.do, norm
        else:
            op.delta_rule(**rule, out=a.do)
            op.gated_rmsnorm(x=a.do, z=z, weight=small["norm"], eps=c.rms_norm_eps, out=a.dnorm)
            x, extra = a.dnorm.view(T, -1), {}
        self._out_proj(op.out_proj, f, x, layer.mixer_out, a, **extra)             # [T, HV * Dv] -> [T, hidden]

    def _mlp(self, op, f, a, layer, last: bool) -> None:
        """The residual add after the mixer, the MLP sublayer (ln2, gate/up, SwiGLU, down) and its residual
        add, on a.x. The last layer leaves its add to the final norm where the plan fuses them."""
        eps = self.config.rms_norm_eps
        self._residual(op, f, a, "attn_residual")
        if f.norm_into_projection:      # ln2 + gate/up + SwiGLU in one kernel, normalising as it reads
            op.mlp(x=self._stream_in(a, f), norm_weight=layer.ln2, eps=eps, out=a.act,
                   **fused_weight_args(layer.gate_up.weight, "gate_up_weight"))
        else:
            if self._scaled_copy(f):    # ln2 of the stream's fp16 copy, in place
                op.ln2(x=a.h, weight=layer.ln2, eps=eps, out=a.h)
            else:
                self._norm(op.ln2, a.x, layer.ln2, a.h, getattr(a, "h_wide", None))
            if f.swiglu_into_gate_up:
                op.mlp(x=a.h, gate_up_weight=layer.gate_up.weight, out=a.act)
            else:
                op.gate_up(x=a.h, **projection_args(layer.gate_up.weight), out=a.gate_up)   # [T, 2 * I]: [gate | up]
                op.swiglu(gate_up=a.gate_up, out=a.act)
        self._out_proj(op.down, f, a.act, layer.down, a)
        if not (last and f.residual_into_final_norm):
            self._residual(op, f, a, "mlp_residual")

    def _out_proj(self, proj, f, x, weight, a, **extra) -> None:
        """An output projection (o_proj, out_proj, down) [T, K] -> [T, hidden]: into a.mixer, or with
        `residual_in_epilogue` added to the stream a.x by the projection's epilogue, in place. In fp16 that
        adds a zero residual into a.mixer: the add that follows also writes the fp16 copy of the stream.
        extra: the fused kernel's other inputs (the gated norm's z, weight and eps)."""
        if not f.residual_in_epilogue:   # 8-bit weights: the quant kernels' arguments
            proj(x=x, **projection_args(weight), out=a.mixer, **extra)
        elif self.wide_stream:
            proj(x=x, **fused_weight_args(weight), residual=a.zero, out=a.mixer, **extra)
        else:
            proj(x=x, **fused_weight_args(weight), residual=a.x, out=a.x, **extra)

    def _residual(self, op, f, a, step: str) -> None:
        """a.x += a.mixer by the kernel of `step`, unless an output projection's epilogue made the add; where
        the plan keeps a scaled copy (fp16), `residual_rmsnorm` instead, in the same launch: a.h = a.x /
        rms(a.x) in fp16, which keeps it in fp16's range; the next norm does not see the scale (up to eps: a
        relative 0.5 * eps / mean(x^2), far below fp16's rounding)."""
        if self._scaled_copy(f):
            op.final_residual_norm(x=a.mixer, residual=a.x, weight=self.unit_norm, eps=self.config.rms_norm_eps,
                                   h_out=a.x, out=a.h)
        elif not f.residual_in_epilogue:
            getattr(op, step)(x=a.mixer, residual=a.x, out=a.x)

    def _final_residual_norm(self, op, f, a) -> None:
        """The last layer's residual add and the final norm, a.h = norm(a.x + a.mixer), a.x updated; the norm
        alone where down's epilogue made the add (bf16, fp32)."""
        eps, weight = self.config.rms_norm_eps, self.weights.norm
        if f.residual_in_epilogue and not self.wide_stream:
            op.final_norm(x=a.x, weight=weight, eps=eps, out=a.h)
        else:       # the new stream goes back into a.x in place: each element is read before it is written
            op.final_residual_norm(x=a.mixer, residual=a.x, weight=weight, eps=eps, h_out=a.x, out=a.h)

    def _scaled_copy(self, f) -> bool:
        """Whether a.h holds the stream's fp16 copy scaled to unit RMS, written by every residual add (fp16
        mode, the adds in `residual_rmsnorm`): what the norms that read the stream read there."""
        return self.wide_stream and f.residual_into_final_norm

    def _stream_in(self, a, f) -> torch.Tensor:
        """What a norm-folded projection reads: the stream a.x, or its scaled fp16 copy a.h (those kernels
        read x in the weights' dtype)."""
        return a.h if self._scaled_copy(f) else a.x

    def _embed(self, op, ids, a) -> None:
        """The embedding rows into the stream a.x; in fp16 mode through a.h (the kernel writes the table's
        dtype), then cast: a.h also holds them in fp16 for a norm-folded first projection."""
        if self.wide_stream:
            op.embedding(ids=ids, weight=self.weights.embed, out=a.h)
            a.x.copy_(a.h)
        else:
            op.embedding(ids=ids, weight=self.weights.embed, out=a.x)

    def _norm(self, norm, x, weight, out, wide) -> None:
        """out = norm(x) in the model dtype; in fp16 mode x is the fp32 stream and the kernel writes x's
        dtype, so it writes the fp32 scratch `wide` (x's shape), cast into out."""
        eps = self.config.rms_norm_eps
        if self.wide_stream:
            norm(x=x, weight=weight, eps=eps, out=wide)
            out.copy_(wide)
        else:
            norm(x=x, weight=weight, eps=eps, out=out)

    def _next_token(self, op, sampling: Sampling | None) -> None:
        ctr = self.counters
        # The logits' flag, beside the token in device memory (0 finite, 1 inf, 2 NaN): the token picked from
        # NaN or inf logits must not be handed out. The course's argmax and sampler write it in their last
        # kernel from the picked token's logit (NaN and +inf always win the pick): no launch of its own, no
        # reduction over the vocabulary, no sync (it rides on the token's copy to the host: `TokenReader`).
        # A kernel without the `flag` argument (the PyTorch reference, a custom one) gets the same test in
        # PyTorch ops after it.
        fn = (op.argmax if sampling is None else op.sample).fn
        args = {"flag": ctr.flag} if not torch.compiler.is_compiling() and _takes_flag(fn) else {}
        if sampling is None:
            op.argmax(logits=ctr.logits, out=ctr.ids, **args)
        else:
            op.sample(logits=ctr.logits, temperature=sampling.temperature, top_k=sampling.top_k,
                      top_p=sampling.top_p, seed=ctr.seed, out=ctr.ids, **args)
        if not args:
            x = ctr.logits.view(-1).gather(0, ctr.ids)                     # [1]: the picked token's logit
            ctr.flag.copy_(2 * torch.isnan(x).long() + torch.isinf(x).long())
