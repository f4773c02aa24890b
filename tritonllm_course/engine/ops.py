"""Which kernel each step of the engine's plan runs, and where it comes from: the op table.

Every step of the plan (`plan.py`) names a kernel slot (`tritonllm_course.slots`). Each slot runs, by choice:
  solutions  the course's kernel, solutions/<family>.py
  exercises  the learner's kernel, exercises/<family>.py (an unfilled one raises NotImplementedYet)
  auto       the learner's where it is filled in, else the solution (TRITONLLM_KERNELS overrides, as
             everywhere in the course)
  reference  the slot's PyTorch reference, run eagerly and copied into the engine's buffers
or any callable with the kernel wrapper's signature (to try a variant, or to see a wrong one caught).
A slot not named runs the default source: the one TRITONLLM_KERNELS selects, "auto" when it is unset, as
in the chapters (so a student copy, without solutions/, runs the learner's kernels).
Prefill and decode use different kernels where the shapes call for it (GEMM / GEMV, chunked / recurrent
delta rule, causal / cached attention, conv over a prompt / one conv step).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import torch

from .. import kernels, slots
from .plan import Plan, fitted_plan, slot_names, slots_of

SOURCES = ("solutions", "exercises", "auto", "reference")


# the output keyword arguments of each slot's wrapper, in the order its reference returns them
# (then come the `mutated` inputs, updated in place); "out" where not listed
OUTPUTS = {
    "q_rope": (), "k_rope": (), "cache_kv_write": (), "advance_positions": (),
    "conv1d_l2norm.prefill": ("q", "k", "v", "new_state"),
    "conv1d_l2norm.decode": ("q", "k", "v"),
    "deltanet_gates": ("beta", "g"),
    "gated_delta_chunked": ("out", "final_state"),
    "gated_delta_chunked.gates": ("out", "final_state"),
    "gated_delta_recurrent": ("out", "final_state"),
    "gated_delta_recurrent_gates": ("out", "final_state"),
    "residual_rmsnorm": ("h_out", "out"),
}

# kernels one call of a slot's course kernel launches, where not one: two-stage reductions (the pieces,
# then their merge). Greedy decoding; sampling searches its threshold in a few more launches.
LAUNCHES = {"splitk_gemv": 2, "flash_decoding": 2, "flash_decoding.gated": 2, "argmax": 2}


@dataclass
class Op:
    slot: str
    source: str            # solutions / exercises / auto / reference / custom
    label: str             # what runs, for the table
    fn: Callable
    calls: list | None = None   # while tracing: every call appends its slot

    def __call__(self, **kwargs):
        if self.calls is not None:
            self.calls.append(self.slot)
        if not SYNC_OPS:
            return self.fn(**kwargs)
        # debugging: wait for each kernel, so a fault is reported at the op that made it (CUDA reports an
        # illegal address at whatever call comes next, often many kernels later)
        try:
            result = self.fn(**kwargs)
            if torch.cuda.is_available() and not torch.cuda.is_current_stream_capturing():
                torch.cuda.synchronize()
        except Exception as e:
            args = ", ".join(f"{k}={_describe(v)}" for k, v in kwargs.items())
            raise RuntimeError(f"slot {self.slot} ({self.source}: {self.label}) failed: {e}\n"
                               f"  called with {args}") from e
        return result


# TRITONLLM_SYNC_OPS=1: synchronise after every engine op and name the op whose kernel failed
SYNC_OPS = os.environ.get("TRITONLLM_SYNC_OPS", "") not in ("", "0")


def _describe(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"{str(v.dtype).replace('torch.', '')}{list(v.shape)} stride {v.stride()} on {v.device}"
    return repr(v) if not callable(v) else getattr(v, "__name__", "fn")


def _reference_op(slot) -> Callable:
    """The slot's eager PyTorch (its `torch_impl`, else its reference) writing into the engine's buffers.

    `torch_impl` first: it is the form that runs on device data without reading it on the host (the KV
    cache and decode attention mask by a device-side length), so it can be captured in a CUDA graph.
    """
    ref = slot.torch_impl or slot.reference
    outs = OUTPUTS.get(slot.name, ("out",))

    def call(**kwargs):
        targets = [kwargs.pop(name) for name in outs]
        results = ref(**kwargs)
        results = results if isinstance(results, tuple) else (results,)
        targets += [kwargs[name] for name in slot.mutated]
        if len(results) != len(targets):
            raise RuntimeError(f"the reference of {slot.name} returned {len(results)} tensors for the "
                               f"{len(targets)} buffers {list(outs) + list(slot.mutated)}")
        for buf, value in zip(targets, results):
            if buf is not value:
                buf.copy_(value)
        return targets[0] if len(targets) == 1 else tuple(targets)

    return call


def resolve(slot_name: str, source) -> Op:
    """The callable of one slot from one source (a source name, or a callable used as is)."""
    slot = slots.get(slot_name)
    if callable(source):
        return Op(slot_name, "custom", getattr(source, "__name__", "custom function"), source)
    if source not in SOURCES:
        raise ValueError(f"source for slot {slot_name!r} must be one of {SOURCES} or a callable, got {source!r}")
    if source == "reference":
        return Op(slot_name, "reference", "PyTorch", _reference_op(slot))
    if not slot.ready:
        raise ValueError(f"slot {slot_name!r} has no kernel yet: use source 'reference' for it")
    # "auto": the learner's kernel once the regions this wrapper needs are filled in
    loaded = kernels.load(slot.family, None if source == "auto" else source, slot.function)
    fn = getattr(loaded.module, slot.function)
    label = f"{slot.family}.{slot.function}"
    if source == "auto":   # say which one "auto" found
        source = f"auto: {loaded.source}"
    return Op(slot_name, source, label, fn)


class OpTable:
    """The resolved ops of both paths: `table.prefill.<step>(...)`, `table.decode.<step>(...)`.

    sources: {slot name: source} for the slots that differ from `default` (see the module doc).
    level:   "operators", "fused" or "fast" (`plan.LEVELS`): which plan
    config:  the model's config: where its shapes do not fit a fused kernel of the level, the plain
             kernels run that step (`plan.FALLBACKS`; `fallbacks` says which and why)
    weight_format: "native", or the 8-bit format whose quant kernels run the projections (`plan.quant_plan`)
    plan:    the plan already fitted (the engine's): level, config and weight_format are then not read again
    """

    def __init__(self, sources: dict | None = None, default: str | None = None, level: str = "operators",
                 config=None, plan: Plan | None = None, weight_format: str = "native"):
        self.level = level
        self.plan = plan if plan is not None else fitted_plan(level, config, weight_format)
        self.fallbacks = list(self.plan.fallbacks)
        self.steps = self.plan.steps
        names = slots_of(self.steps)
        if not isinstance(sources, (dict, type(None))):   # a str or a list: "dictionary update sequence element"
            raise TypeError(f"sources must be a dict of {{slot name: source}}, got {type(sources).__name__} (one "
                            "source for every slot: default_source=)")
        if default and not callable(default) and default not in SOURCES:   # named as itself (None: the variable)
            raise ValueError(f"default_source must be one of {SOURCES} or a callable, got {default!r}")
        sources = dict(sources or {})
        unknown = sorted(set(sources) - set(names) - set(slot_names(level)))   # a slot a fallback left is known
        if unknown:
            raise KeyError(f"the engine at level {level!r} has no slot {unknown}; its slots are: "
                           f"{', '.join(names)}")
        default = default or kernels.selected()   # None: what TRITONLLM_KERNELS selects, else "auto"
        self.ops = {name: resolve(name, sources.get(name, default)) for name in names}
        self.prefill = SimpleNamespace(**{s.name: self.ops[s.prefill] for s in self.steps if s.prefill})
        self.decode = SimpleNamespace(**{s.name: self.ops[s.decode] for s in self.steps if s.decode})

    @staticmethod
    def launches(calls: list[str]) -> int:
        """The kernels the course's kernels launch for traced slot calls (`Engine.tracing`): one per call,
        two for the two-stage slots of `LAUNCHES` (whatever source ran them: the count of the kernels)."""
        return sum(LAUNCHES.get(name, 1) for name in calls)

    def sources(self) -> dict[str, str]:
        return {name: op.source for name, op in self.ops.items()}

    def rows(self) -> list[dict]:
        """One row per step: its slots, the functions that run them, and their source."""
        rows = []
        for s in self.steps:
            ops = [self.ops[n] for n in (s.prefill, s.decode) if n]
            runs = " / ".join(dict.fromkeys(op.label for op in ops))
            source = " / ".join(dict.fromkeys(op.source for op in ops))
            rows.append({"step": s.name, "where": s.where, "prefill": s.prefill or "-", "decode": s.decode or "-",
                         "runs (prefill / decode)": runs, "source": source})
        return rows

    def markdown(self) -> str:
        """The table as markdown (for a notebook: `display(Markdown(engine.ops.markdown()))`)."""
        rows = self.rows()
        return "\n".join(["| " + " | ".join(rows[0]) + " |", "|---" * len(rows[0]) + "|"]
                         + ["| " + " | ".join(f"`{v}`" if k in ("prefill", "decode", "runs (prefill / decode)")
                                               and v != "-" else v for k, v in r.items()) + " |" for r in rows])

    def __str__(self) -> str:
        rows = self.rows()
        widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in rows[0]}
        line = "  ".join(f"{k:<{w}}" for k, w in widths.items())
        return "\n".join([line, "  ".join("-" * w for w in widths.values())]
                         + ["  ".join(f"{r[k]:<{w}}" for k, w in widths.items()) for r in rows])

    __repr__ = __str__
    _repr_pretty_ = lambda self, p, cycle: p.text(str(self))  # noqa: E731
