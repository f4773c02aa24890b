"""The engine: Qwen3.5 run from the course's kernel slots, a prefill path and a decode path, with the
decode step captured once in a CUDA graph and replayed for every token.

    engine = Engine.from_pretrained("Qwen/Qwen3.5-0.8B", max_seq_len=4096)   # or Engine.random(config)
    for token in engine.stream(prompt_ids, max_new_tokens=64):             # tokens as they come
        ...

What it does differently from the reference model (`tritonllm_course.model`), which it must match token
for token:
- weights merged once at load (`merged.py`): one GEMV per projection group at decode; optionally quantized
  to 8 bits there (`weight_format`), the projections then run the dequantizing kernels of chapter 31_weight_quant;
- every buffer allocated once (`buffers.py`): the cache, the activations, the logits;
- two paths: prefill (GEMM, chunked delta rule, causal attention, conv over the prompt) and decode (GEMV,
  recurrent delta rule, attention over the cache with the length read from device memory, one conv step),
  each step a kernel slot whose source is chosen per slot (`ops.py`), run by `forward.py`;
- the decode step reads the token, the position and the cache length from device memory and advances
  them itself, so it is captured once (`graph.py`) and replayed; the host only reads the new token, to
  stream it and to stop at end-of-sequence (decided outside the graph), one step behind the GPU: the
  next step is queued before the host reads the token it consumes (`TokenReader`).

The plan (`plan.py`: the level's steps and fusions, fitted to the config) is computed once, here; the
arithmetic of the two paths, the fp16 residual stream included, is `forward.Forward`, which `Engine` derives
from; this module holds what is left: the buffers, the CUDA graphs, the token stream and the public API.
"""
from __future__ import annotations

import array
import contextlib
import warnings
from collections import OrderedDict
from typing import Iterator

import torch

from .. import reference as R
from .. import validate
from ..config import Qwen35Config
from ..model.cache import Qwen35Cache
from ..runtime import no_launch_overlap, programmatic_launches
from ..validate import check_count, check_decoding, check_ids, check_seed, eos_ids, flag, nonfinite_error
from ..weights import check_memory, check_weights, load_weights, random_weights
from .arguments import LEVEL, MAX_SEQ_LEN, PREFILL_CHUNK, WEIGHT_FORMAT, check_arguments, check_given_weights, step_args
from .buffers import Activations, Counters
from .forward import Forward, Sampling
from .graph import GraphedStep, graphed_pieces, layer_pieces
from .merged import EngineWeights, merge_bytes, merge_weights
from .ops import OpTable
from .plan import check_limits, fitted_plan


class StreamSuperseded(RuntimeError):
    """A stream resumed after the same Engine was used otherwise (a newer `stream` or `generate`, or a
    direct `prefill`, `decode` or `reset`): the engine holds one sequence, which the newer use now owns."""


class TokenReader:
    """Each step's new token (`ids`, one element in device memory) copied to the host behind the kernels
    that make it, then read in order: `push()` after a step is queued, `pop()` waits for the oldest token
    only. At most two are in flight (the loop runs one step ahead), in two pinned buffers. `ids` may hold a
    second element, the step's logits flag (`Counters.out`): it rides on the same copy, and `pop()` leaves
    it in `flag`."""

    def __init__(self, ids: torch.Tensor):
        self.ids, self.queue, self.slot, self.flag = ids, [], 0, 0
        if ids.is_cuda:
            self.buffers = [torch.empty(ids.numel(), dtype=ids.dtype, pin_memory=True) for _ in range(2)]
            self.events = [torch.cuda.Event() for _ in range(2)]

    def push(self) -> None:
        if len(self.queue) == 2:
            raise RuntimeError("TokenReader holds two tokens in flight at most: pop one first")
        if not self.ids.is_cuda:
            self.queue.append((self.ids.clone(), None))
            return
        buf, event = self.buffers[self.slot], self.events[self.slot]
        buf.copy_(self.ids, non_blocking=True)          # ordered after the step on the same stream
        event.record()
        self.queue.append((buf, event))
        self.slot ^= 1

    def pop(self) -> int:
        buf, event = self.queue.pop(0)
        if event is not None:
            event.synchronize()
        self.flag = int(buf[1]) if buf.numel() > 1 else 0
        return int(buf[0])


class Engine(Forward):
    """Qwen3.5 from kernel slots with static buffers.

    config, weights: as `weights.load_weights` returns them (names without prefix); kept by reference,
                     the merged projections are new tensors
    max_seq_len:     tokens the cache holds (prompt + generated, over all turns until `reset`)
    sources:         {slot name: "solutions" | "exercises" | "auto" | "reference" | callable} per slot,
                     `default_source` for the others (see `ops.py`); None: TRITONLLM_KERNELS, else "auto"
                     (the learner's kernel where it is filled in, else the solution), as in the chapters
    cuda_graph:      replay the decode step from a CUDA graph (on a GPU; ignored on the CPU)
    prefill_graph:   with cuda_graph, also replay prompt chunks from CUDA graphs (with PREFILL_PIECES, in pieces of
                     layers) per (chunk length, start) met twice: a prompt length seen once runs op by op
                     (capturing would cost more than it saves); a repeated one (a benchmark, a server's) replays
    prefill_chunk:   prompt tokens per prefill pass; longer prompts run chunk after chunk
    level:           "operators" (one kernel per operator), "fused" or "fast": the plan `plan.LEVELS` holds
    pdl:             launch the kernels of the decode step and of prompt chunks of up to PDL_PROMPT_TOKENS (128)
                     tokens with programmatic dependent launch (chapter 18_cuda_graphs; longer chunks launch
                     without the overlap): each may start while the one before it drains (at
                     decode loading its weights before it waits for its input); all but the LM head's
                     GEMV, whose 124,160 programs lose more to the trigger and the wait than it gains
                     (`solutions/linear.py`, PDL_MAX_PROGRAMS). None: where the GPU has it (sm_90+).
                     The kernels are those made for PDL wherever the GPU has it: pdl=False launches the
                     same ones one after another, the same bits, later (`_launches`). On the CPU the
                     interpreter runs the same kernels, for which the PDL calls are no-ops
    merged:          the merged projections (`self.weights`) of another engine of these weights, shared
                     rather than stacked again (a benchmark's engines of several levels over one model: a
                     27B's merged copies are ~33 GB)
    weight_format:   "native" (default: the projections in the model's own dtype, bf16 or fp16) or 8-bit,
                     "int8" (a scale per row), "int8_group" (per row and 128 columns) or "fp8" (e4m3, per row;
                     sm_89+): the projections and a copy of the LM head quantized once, at load (`merged.py`),
                     run by every level (`plan.quant_plan`), but "int8_group" not by "fast". Tokens
                     may differ from the native weights' (chapter 31_weight_quant's accuracy table)
    own_weights:     the engine may drop each layer's projections from `weights` as it merges them (the dict is
                     then no longer a checkpoint): its merged copies never sit beside the whole checkpoint, so a
                     model's peak memory is its weights plus one layer's stacked matrix (27B: 0.3 GiB, not 31 more).
                     `from_pretrained` and `random` build their own dicts and pass True; the default leaves a
                     caller's weights (a reference model's, shared) whole
    """

    def __init__(self, config: Qwen35Config, weights: dict[str, torch.Tensor], *, max_seq_len: int = MAX_SEQ_LEN,
                 sources: dict | None = None, default_source: str | None = None, cuda_graph: bool = True,
                 prefill_chunk: int = PREFILL_CHUNK, level: str = LEVEL, prefill_graph: bool = True,
                 pdl: bool | None = None, merged: EngineWeights | None = None, weight_format: str = WEIGHT_FORMAT,
                 own_weights: bool = False):
        max_seq_len, prefill_chunk = check_arguments(max_seq_len, prefill_chunk, level, weight_format, config=config,
                                                     cuda_graph=cuda_graph, prefill_graph=prefill_graph, pdl=pdl,
                                                     own_weights=own_weights, merged=merged)
        check_weights(config, weights)
        check_limits(config)            # shapes no level takes: refused before anything is allocated
        embed = weights["embed_tokens.weight"]
        c = self.config = config
        self.dtype, self.device = embed.dtype, embed.device
        check_given_weights(weights, weight_format, self.dtype, self.device)   # check_arguments' last
        if merged is None:   # a second copy of the projections (own_weights: one layer's at a time)
            check_memory(merge_bytes(c, weights, weight_format, consume=own_weights), self.device,
                         "the engine's merged projections")
        self.cache = Qwen35Cache.allocate(c, max_seq_len, dtype=self.dtype, device=self.device)
        self.max_seq_len = max_seq_len
        if merged is not None and (len(merged.layers) != c.num_hidden_layers or merged.embed is not embed):
            raise ValueError("merged= must be the merged weights of an engine built from these same weights")
        if merged is not None and merged.format != weight_format:
            raise ValueError(f"merged= holds {merged.format} weights; this engine asks for {weight_format}")
        self.weights = merged if merged is not None else merge_weights(c, weights, weight_format,
                                                                          consume=own_weights)
        self.weight_format = weight_format
        self.level = level
        # what each path runs and fuses at this level and weight format, fitted once (plan.py)
        self.plan = fitted_plan(level, c, weight_format)
        self.ops = OpTable(sources, default_source, level, plan=self.plan)
        if self.device.type == "cpu" and self.dtype == torch.bfloat16 and any(
                op.source != "reference" for op in self.ops.ops.values()):
            raise ValueError("bfloat16 arithmetic is wrong under Triton's CPU interpreter: use float32 or float16 "
                             "on the CPU (or the 'reference' source for every slot)")
        widths = {}
        for layer in self.weights.layers:
            group = "attn" if layer.kind == "full_attention" else "dn"
            widths[group] = {name: b - a for name, (a, b) in layer.mixer_in.pieces.items()}
        self.prefill_chunk = min(prefill_chunk, max_seq_len)
        self.wide_stream = self.residual_dtype != self.dtype
        self.decode_act = Activations(c, 1, self.dtype, self.device, widths, self.residual_dtype)
        self.prefill_act = Activations(c, self.prefill_chunk, self.dtype, self.device, widths, self.residual_dtype)
        self.unit_norm = torch.zeros(c.hidden_size, dtype=self.dtype, device=self.device)   # 1 + 0: scale only
        self._decode_views = self.decode_act.take(1)
        self.counters = Counters(c.vocab_size, self.dtype, self.device)
        self.final = torch.empty(1, c.hidden_size, dtype=self.dtype, device=self.device)
        self.new_conv_state = torch.empty(c.conv_dim, c.linear_conv_kernel_dim, dtype=self.dtype, device=self.device)
        self.cos, self.sin = R.rope_cache(max_seq_len, c.rotary_dim, c.rope_theta, dtype=self.dtype,
                                          device=self.device)
        self.positions = torch.arange(max_seq_len, dtype=torch.int32, device=self.device)
        self.use_graph = cuda_graph and self.device.type == "cuda"
        self.pdl_gpu = self.device.type == "cuda" and torch.cuda.get_device_capability(self.device) >= (9, 0)
        self.pdl = self._pdl(pdl)
        self._graphs: dict[Sampling | None, GraphedStep] = {}
        self.prefill_graph = prefill_graph
        self._prefill_graphs: OrderedDict[tuple[int, int, bool], list[GraphedStep]] = OrderedDict()
        self._prefill_seen: OrderedDict[tuple[int, int, bool], int] = OrderedDict()   # key -> uses, newest last
        self.prefill_ids = torch.zeros(self.prefill_chunk, dtype=torch.int64, device=self.device)
        self._decode_fn, self._prefill_fn = self._decode_step, self._prefill_chunk
        self.length = 0          # tokens in the cache (host count; the device counters follow it)
        self.pending = None      # the last token handed out, not yet in the cache
        self.streams = 0         # streams begun: only the newest may run (`StreamSuperseded`)

    def _pdl(self, pdl: bool | None) -> bool:
        """Whether the steps (decode, prompt chunks) launch with PDL: asked for, or (None) where the GPU has it."""
        gpu, has = self.device.type == "cuda", self.pdl_gpu
        if pdl and gpu and not has:
            major, minor = torch.cuda.get_device_capability(self.device)
            raise ValueError(f"pdl=True needs programmatic dependent launch (sm_90 or newer); this GPU is "
                             f"sm_{major}{minor}: use pdl=False or None")
        return has if pdl is None else bool(pdl) and self.device.type != "meta"

    # longer prompt chunks launch without the overlap: their GEMMs fill every SM, and the next kernel's waiting
    # programs would take shared memory and registers beside them (H200, the 0.8B's time to the first token at
    # 4,096 tokens: 38.3 ms<!-- fig:family.0_8b.fast_pdl.ttft.ctx4096.ms --> with PDL against
    # 31.6 ms<!-- fig:family.0_8b.fast_graph.ttft.ctx4096.ms --> without, results/family_nvidia-h200_2026-12-03)
    PDL_PROMPT_TOKENS = 128

    def _launches(self, tokens: int = 1) -> contextlib.ExitStack:
        """The PDL switches around a step of `tokens` tokens. The kernels follow the GPU (where it has PDL, those
        made for it); the launch attribute follows `pdl` up to PDL_PROMPT_TOKENS: it changes the timing alone."""
        stack = contextlib.ExitStack()
        stack.enter_context(programmatic_launches(self.pdl or self.pdl_gpu))
        if not self.pdl or tokens > self.PDL_PROMPT_TOKENS:
            stack.enter_context(no_launch_overlap())
        return stack

    @property
    def residual_dtype(self) -> torch.dtype:
        """The residual stream's dtype: fp32 in fp16 mode (it would overflow), else the model dtype."""
        return torch.float32 if self.dtype == torch.float16 else self.dtype

    # construction ------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, source, dtype=None, device="cpu", **kwargs) -> "Engine":
        """From a checkpoint directory or hub id (`weights.load_weights`); kwargs as `Engine`. Each layer's loaded
        projections are dropped as they are merged (`own_weights`): with 8-bit `weight_format` the engine keeps
        their 8-bit copies and the embedding table."""
        check_arguments(**kwargs, device=device, dtype=dtype)    # before the weights load
        config, weights = load_weights(source, dtype=dtype, device=device)
        return cls(config, weights, **{"own_weights": True, **kwargs})

    @classmethod
    def random(cls, config: Qwen35Config, dtype=torch.float32, device="cpu", seed: int = 0, **kwargs) -> "Engine":
        """Random weights of the config's shapes (transformers' initialisation), dropped as merged (`own_weights`)."""
        check_arguments(**kwargs, device=device, dtype=dtype, config=config)    # before any weight
        return cls(config, random_weights(config, dtype=dtype, device=device, seed=seed),
                   **{"own_weights": True, **kwargs})

    @classmethod
    def from_model(cls, model, **kwargs) -> "Engine":
        """The weights of a reference `Qwen35Model` (shared, not copied)."""
        return cls(model.config, model.weights, **kwargs)

    # running -------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Start a new sequence, no GPU work: its first prompt chunk reads no state and no cache row (test_engine.py
        poisons the cache), no decode comes before a prompt. Supersedes a live stream (`StreamSuperseded`)."""
        self.streams += 1
        self._reset()

    def _reset(self) -> None:
        self.length = self.cache.length = 0
        self.pending = None

    def check_tokens(self, ids, new_tokens: int = 0, cached: int | None = None) -> list[int]:
        """ids as a list of ints, checked against the vocabulary and the room left in the cache after
        `cached` tokens (default: what it holds now)."""
        cached = self.length if cached is None else cached
        ids = check_ids(ids, device=self.device)
        new_tokens = check_count(new_tokens, "max_new_tokens")
        vocab = self.config.vocab_size
        if ids and not (0 <= min(ids) and max(ids) < vocab):          # C speed: the time to the first token
            bad = [t for t in ids if not 0 <= t < vocab]
            raise ValueError(f"token ids {bad[:5]} are outside the vocabulary [0, {vocab})")
        if cached + len(ids) + new_tokens > self.max_seq_len:
            before = f" after the {cached} tokens the sequence already holds" if cached else ""   # pending too
            raise ValueError(f"{len(ids)} prompt tokens + {new_tokens} new tokens{before} exceed the engine's "
                             f"cache of {self.max_seq_len} tokens (max_seq_len); nothing was run")
        return ids

    def prefill(self, ids, *, sampling: Sampling | None = None, seed: int = 0) -> torch.Tensor:
        """Append the tokens `ids` to the cache; returns the last position's logits [vocab] (a view of
        the static buffer) and leaves the next token in `counters.ids`."""
        ids, (sampling, seed) = self.check_tokens(ids), step_args(sampling, seed)
        if not ids:
            raise ValueError("no tokens to prefill: give at least one")
        self.streams += 1
        return self._prefill(ids, sampling, seed)

    def _prefill(self, ids: list[int], sampling: Sampling | None, seed: int) -> torch.Tensor:
        # through a buffer of C int64s: at 4,000 tokens 0.1 vs 0.4 ms<!-- unsaved: 2026-12-06 --> through
        # torch.tensor (a list's items one by one); the copies below read it synchronously, so it outlives them
        host_ids = torch.frombuffer(array.array("q", ids), dtype=torch.int64)
        P = self.prefill_chunk
        for first in range(0, len(ids), P):
            chunk = host_ids[first:first + P]
            T, last = chunk.shape[0], first + P >= len(ids)
            self.prefill_ids[:T].copy_(chunk)            # the static input a captured chunk reads
            graphs = self._prefill_graph(T, self.length, last)     # None: op by op
            for step in graphs if graphs is not None else [lambda: self._prefill_unchecked(T, self.length, last)]:
                step()
            self.length += T
        ctr = self.counters
        ctr.set(self.length, seed % 2**31)
        self._next_token(self.ops.prefill, sampling)
        ctr.seed.fill_((seed + 1) % 2**31)                 # the first decode step draws with the next seed
        self.pending = None
        return ctr.logits[0]

    PREFILL_GRAPHS = 16  # captured prompt chunks kept (least recently used dropped): each holds a memory pool
    PREFILL_SEEN = 1024  # chunk shapes remembered until their second use (a chat makes a new one every turn)
    PREFILL_PIECES = False  # a chunk's graph in `layer_pieces`: no sooner a first token (lab/prefill_graph_probe.py)

    def _prefill_graph(self, T: int, start: int, last: bool) -> list[GraphedStep] | None:
        """The graphs of a T-token chunk at `start` (captured at its second use, one per `layer_pieces`, replayed
        in order), or None: run op by op.

        Static inputs: the ids are copied into `prefill_ids`, the positions are the slice start..start+T
        of a constant table, the attention reads the cache up to start + T: all fixed by the key."""
        if not (self.use_graph and self.prefill_graph):
            return None
        key = (T, start, last)
        if key in self._prefill_graphs:
            self._prefill_graphs.move_to_end(key)
            return self._prefill_graphs[key]
        seen = self._prefill_seen
        seen[key] = seen.pop(key, 0) + 1
        if len(seen) > self.PREFILL_SEEN:
            seen.popitem(last=False)                   # the shape unused the longest
        if seen[key] < 2:
            return None
        del seen[key]                                  # captured below (or never: prefill_graph turns off)
        try:
            self._prefill_graphs[key] = graphed_pieces(lambda p: lambda: self._prefill_unchecked(T, start, last, p),
                                                       layer_pieces(len(self.weights.layers), self.PREFILL_PIECES),
                                                       self._cache_tensors())
        except RuntimeError as e:   # an op that cannot be captured (a swapped-in kernel that syncs, say)
            warnings.warn(f"prompt chunks run op by op from now on: capturing one failed ({e})")
            self.prefill_graph = False
            return None
        if len(self._prefill_graphs) > self.PREFILL_GRAPHS:
            self._prefill_graphs.popitem(last=False)
        return self._prefill_graphs[key]

    def _prefill_unchecked(self, T: int, start: int, last: bool, layers: range | None = None) -> None:
        """The chunk of T ids in `prefill_ids` at `start` (or its `layers`), without the kernels' host-side range
        checks: the ids and lengths were checked once, in `prefill`."""
        with validate.no_device_checks(), self._launches(T):
            self._prefill_fn(self.prefill_act.take(T), self.prefill_ids[:T], start, last=last, layers=layers)

    def _cache_tensors(self) -> list[torch.Tensor]:
        """What a step updates in place and a graph's warm-up must put back: the KV cache, the conv and
        recurrent states."""
        return [*self.cache.k.values(), *self.cache.v.values(), *self.cache.conv.values(),
                *self.cache.state.values()]

    def _graph(self, sampling: Sampling | None) -> GraphedStep:
        if sampling not in self._graphs:   # each graph with its own memory pool: they replay in any order
            state = [*self._cache_tensors(), self.counters.ids, self.counters.steps]
            self._graphs[sampling] = GraphedStep(lambda: self._decode_unchecked(sampling), state)
        return self._graphs[sampling]

    def decode(self, token: int | None = None, *, sampling: Sampling | None = None) -> torch.Tensor:
        """One decode step: consumes `counters.ids` (or `token`, written there first: teacher forcing);
        returns the logits [vocab] (a view of the static buffer); the next token is in `counters.ids`."""
        if not 0 < self.length < self.max_seq_len:
            raise ValueError(f"the cache of {self.max_seq_len} tokens is full; nothing was run" if self.length else
                             "the sequence is empty: a decode step follows a prompt (prefill); nothing was run")
        sampling = step_args(sampling)[0]
        if token is not None:             # named as itself: True was "prompt_ids[0] must be an int token id"
            self.counters.ids.fill_(self.check_tokens([check_count(token, "token")])[0])
        self.streams += 1
        return self._decode(sampling)

    def _decode(self, sampling: Sampling | None) -> torch.Tensor:
        if self.use_graph:
            self._graph(sampling)()
        else:
            self._decode_unchecked(sampling)
        self.length += 1
        self.pending = None
        return self.counters.logits[0]

    def _decode_unchecked(self, sampling: Sampling | None) -> None:
        """The decode step without the kernels' host-side range checks (a device sync each): the ids,
        position and length are the engine's own, checked before any work."""
        with validate.no_device_checks(), self._launches():
            self._decode_fn(sampling)

    def capture(self, sampling: Sampling | None = None) -> None:
        """Warm up and capture the decode step now (otherwise it happens at the first decode)."""
        if self.use_graph:
            self._graph(sampling)

    def stream(self, prompt_ids, max_new_tokens: int, *, greedy: bool = True, temperature: float = 1.0,
               top_k: int = 0, top_p: float = 1.0, eos_token_id="config", seed: int = 0,
               reset: bool = True) -> Iterator[int]:
        """A generator of the new tokens, one by one (an end-of-sequence token included, then it stops).

        greedy:       argmax (ties to the lowest id); else sample (temperature / top_k / top_p) with the
                      course's Gumbel-max sampler, seeded by `seed` (its draws differ from torch's)
        eos_token_id: "config" uses the config's; None never stops early; or an id or list of ids
        reset:        start a new sequence (default); False continues after what the cache holds, the
                      last token handed out included (a chat's next turn)
        Everything is checked here, before any work: ids, sampling options, seed, room in the cache.
        Logits holding NaN or inf stop the stream with a ValueError naming the step (a device flag read
        with each token, `_next_token`).
        """
        flag(reset, "reset")
        history = [self.pending] if self.pending is not None and not reset else []
        # the pending token is the engine's own: only the new ids need checking, and once
        prompt = history + self.check_tokens(prompt_ids, max_new_tokens,
                                             cached=(0 if reset else self.length) + len(history))
        if len(prompt) == len(history):
            raise ValueError("the prompt is empty: give at least one token")
        check_decoding(greedy, temperature, top_k, top_p)
        seed = check_seed(seed)
        sampling = None if greedy or temperature == 0 else Sampling(float(temperature), int(top_k), float(top_p))
        eos = eos_ids(eos_token_id, self.config)
        self.streams += 1             # an older stream, resumed, raises StreamSuperseded
        if reset:
            self._reset()
        return self._tokens(prompt, max_new_tokens, sampling, eos, seed, self.streams)

    def _check_newest(self, stream: int) -> None:
        """Two streams interleaved would feed each other's tokens through one cache: only the newest runs."""
        if stream != self.streams:
            raise StreamSuperseded("this stream was superseded: a newer stream() or generate(), or a direct "
                                   "prefill(), decode() or reset(), used the same Engine, which holds one "
                                   "sequence at a time")

    def _tokens(self, prompt: list[int], max_new_tokens: int, sampling: Sampling | None, eos: set[int],
                seed: int, stream: int) -> Iterator[int]:
        """The token loop, one step ahead: the step that consumes token n (it reads it from device memory)
        is queued before the host reads token n, so the GPU never waits for the host between tokens
        (lab/decode_overlap_probe.py measures what that saves). The price: at an end-of-sequence token
        the step after it has already run, so that token is in the cache (not pending) when `stream`
        returns; a next turn (`reset=False`) goes on from there."""
        if max_new_tokens == 0:
            return
        self._check_newest(stream)
        self._prefill(prompt, sampling, seed)
        reader = TokenReader(self.counters.out)        # the token and its logits' flag, one copy
        reader.push()                                   # token 0, copied behind the prefill
        for n in range(max_new_tokens):
            ahead = n + 1 < max_new_tokens              # the step a full run would take next
            if ahead:
                self._decode(sampling)                  # consumes token n, makes token n + 1
                reader.push()
            token = reader.pop()                        # the one host read per token: token n
            if reader.flag:
                self.pending = None
                raise nonfinite_error("NaN" if reader.flag == 2 else "inf", n, self.dtype, self.cos,
                                      self.config.rope_theta)
            self.pending = None if ahead else token
            yield token
            if token in eos:
                return
            self._check_newest(stream)

    def generate(self, prompt_ids, max_new_tokens: int, **kwargs) -> list[int]:
        """`stream` collected into a list (the same signature as `generation.generate`, minus the model)."""
        return list(self.stream(prompt_ids, max_new_tokens, **kwargs))

    # inspection ----------------------------------------------------------------------------------------
    def compile(self, prefill: bool = False, **options) -> "Engine":
        """Run the decode step (and with `prefill`, the prompt chunks) through torch.compile: what the
        benchmark does to the engine with PyTorch-reference sources. Static buffers give static shapes, so
        the decode step compiles once; a prefill chunk compiles once per length and offset."""
        self._decode_fn = torch.compile(self._decode_step, **options)
        if prefill:
            self._prefill_fn = torch.compile(self._prefill_chunk, **options)
        return self

    @contextlib.contextmanager
    def tracing(self):
        """Record the slot of every op call in the block: `with engine.tracing() as calls: ...`."""
        calls: list[str] = []
        for op in self.ops.ops.values():
            op.calls = calls
        try:
            yield calls
        finally:
            for op in self.ops.ops.values():
                op.calls = None

    def memory(self) -> dict[str, int]:
        """Bytes of each group of static buffers."""
        name = "weights (merged)" if self.weight_format == "native" else f"weights (merged, {self.weight_format})"
        return {name: self.weights.nbytes(), "cache (KV + DeltaNet states)": self.cache.nbytes(),
                "decode activations": self.decode_act.nbytes(), "prefill activations": self.prefill_act.nbytes(),
                "RoPE tables": 2 * self.cos.numel() * self.cos.element_size()}

    def summary(self) -> str:
        c = self.config
        graph = ("decode step replayed from a CUDA graph" if self.use_graph else
                 "decode step launched op by op" if self.device.type == "cuda" else
                 "buffers sized only (meta device)" if self.device.type == "meta" else
                 "decode step launched op by op (no CUDA here)")
        graph += ", with programmatic dependent launch" if self.pdl and self.device.type == "cuda" else ""
        weights = "" if self.weight_format == "native" else f", {self.weight_format} weights"
        lines = [f"Engine ({self.level}{weights}): {c.num_hidden_layers} layers ({len(c.linear_layers)} DeltaNet, "
                 f"{len(c.attention_layers)} attention), {self.device.type}, "
                 f"{str(self.dtype).replace('torch.', '')}, cache of {self.max_seq_len} tokens, prompts in chunks "
                 f"of {self.prefill_chunk}; {graph}"]
        lines += [f"  {name:<30} {n / 2**20:10.2f} MiB" for name, n in self.memory().items()]
        lines += [f"  {note}" for note in self.plan.fallbacks]   # fused kernels the config's shapes do not fit
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()
