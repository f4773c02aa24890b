"""Kernel slots: every kernel of the course by name, with what is needed to check and time it.

A slot names one kernel at one place in the model: its article operator number (where it has one) and
the article's name for that operator, what it is in Qwen3.5, its chapter, the PyTorch reference, the
solution/exercise function, how to make random inputs at a given shape, and the bytes and FLOPs it must
move and do (for the roofline). The slot's own name is the course's: the engine step that runs it, the
kernel family that holds it and its reference use the same one.
`catalog.py` lists every planned slot; the modules beside it (`slots/<family>.py`) fill in the ones
that have kernels. A slot without a kernel shows as "planned".
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .catalog import CATALOG


@dataclass
class Slot:
    name: str
    title: str
    op: int | None = None                 # operator number in the source article's table (1..21)
    article: str | None = None            # the article's name for that operator (catalog.py)
    qwen: str = ""                        # what it is in Qwen3.5-0.8B
    chapter: str = ""                     # notebook slug, e.g. "01_triton_basics"
    family: str | None = None             # solutions/<family>.py and exercises/<family>.py
    function: str | None = None           # the host wrapper in that module
    reference: Callable | None = None     # PyTorch reference, accurate for fp64 inputs
    make_inputs: Callable[..., dict] | None = None   # (shape, dtype, device, generator) -> kwargs
    make_out: Callable[..., dict] | None = None      # (inputs) -> {kwarg: empty output buffer}
    mutated: tuple[str, ...] = ()         # input kwargs the kernel updates in place (caches, states)
    shapes: dict[str, list[dict]] = field(default_factory=dict)  # "tiny" (CPU) and "real" (GPU)
    bytes: Callable[[dict], int] | None = None   # HBM bytes one call must move (default: all tensors)
    flops: Callable[[dict], int] | None = None
    tol: dict | None = None               # {dtype: relative tolerance} overriding the defaults
    exact: bool = False                   # integer outputs: must match exactly
    torch_impl: Callable | None = None    # eager PyTorch as the model runs it (default: reference)
    edges: list["Edge"] = field(default_factory=list)   # edge inputs `check` runs beside the shapes
    dims: dict[str, tuple[str, ...]] = field(default_factory=dict)  # {output: dim names} for reports
    extra: dict[str, Any] = field(default_factory=dict)
    min_capability: int | None = None     # e.g. 89: fp8 conversions in hardware (Ada, Hopper); None: every GPU

    @property
    def ready(self) -> bool:
        return self.function is not None

    @property
    def status(self) -> str:
        return "ready" if self.ready else "planned"

    def shape(self, preset: str, index: int = 0) -> dict:
        key = "tiny" if preset == "tiny" else "real"
        if key not in self.shapes:
            raise KeyError(f"slot {self.name} has no {key!r} shapes")
        return dict(self.shapes[key][index])

    def all_shapes(self, preset: str) -> list[dict]:
        key = "tiny" if preset == "tiny" else "real"
        return [dict(s) for s in self.shapes.get(key, [])]

    def given_shape(self, preset: str, shape, strict: bool = True) -> dict:
        """A shape given to `check` (strict) or `bench`: the dims it names, each of its kind (a size a whole number
        >= 1, an option a value of its default's kind), and any size every shape of the mode has and it leaves
        out taken from the mode's first shape (options are never added). Strict, a dim the slot does not have is
        refused (a typo would be ignored by the inputs); `bench` lets the chapters pass one shape to several
        slots. Anything else: one line saying which dim is wrong."""
        mode, every = self.all_shapes(preset), self.all_shapes(preset) + self.all_shapes("tiny")
        dims = {k: v for s in reversed(every) for k, v in s.items()}       # every dim, the mode's default last
        sizes = {k for k in dims if all(_size(s[k]) for s in every if k in s)}   # a 0 somewhere: an option
        if not isinstance(shape, dict):
            raise TypeError(f"shape must be a dict of {self.name}'s dims ({', '.join(dims)}), got {shape!r}")
        for k, v in shape.items():
            if k not in dims:
                if strict:
                    raise ValueError(f"shape: {self.name} has no dim {k!r}; its dims are {', '.join(dims)}")
                continue
            default = dims[k]
            if k in sizes:
                if not _size(v):
                    raise ValueError(f"shape: {k} must be a whole number >= 1, got {v!r}")
            elif not (isinstance(v, type(default)) or _number(v) and _number(default)):
                raise ValueError(f"shape: {k} must be a {type(default).__name__}, like {default!r}; got {v!r}")
        needed = [k for k in (mode[0] if mode else {}) if k in sizes and all(k in s for s in mode)]
        return {**{k: mode[0][k] for k in needed if k not in shape}, **shape}

    def dtypes(self, rt) -> list[torch.dtype]:
        """The dtypes `check` runs by default: fp32 and fp16 under the interpreter, the GPU's dtype and
        fp16 on a GPU; `extra["dtypes"]` narrows them for a kernel that runs in fewer."""
        wanted = [torch.float32, torch.float16] if rt.interpreted else list(dict.fromkeys([rt.dtype, torch.float16]))
        allowed = self.extra.get("dtypes")
        return [d for d in wanted if allowed is None or d in allowed]

    def not_here(self, rt) -> str | None:
        """Why the slot cannot run on this GPU (its capability below `min_capability`), or None. The
        interpreter runs every slot: it emulates the conversions the hardware lacks."""
        if self.min_capability is None or rt.interpreted or rt.capability is None:
            return None
        major, minor = rt.capability
        if 10 * major + minor >= self.min_capability:
            return None
        return (f"{self.name} needs sm_{self.min_capability} or newer ({self.title}); "
                f"this GPU is sm_{major}{minor}")


@dataclass
class Edge:
    """An edge input of a slot's math: the inputs of a declared shape, then changed by `apply`
    (inputs, shape, dtype, generator) -> inputs. `shape` overrides fields of the slot's first shape;
    `presets` limits it to "tiny" (CPU) or "real" (GPU) runs; `tol` ({dtype: relative tolerance})
    overrides the slot's where the edge's own inputs round more than the dtype's default allows for."""
    name: str
    apply: Callable[..., dict]
    shape: dict = field(default_factory=dict)
    presets: tuple[str, ...] = ("tiny", "real")
    tol: dict | None = None

    def shape_for(self, base: dict) -> dict:
        return {**base, **self.shape}

    def runs_in(self, preset: str) -> bool:
        return ("tiny" if preset == "tiny" else "real") in self.presets


_REGISTRY: dict[str, Slot] = {}
_loaded = False


def register(slot: Slot) -> Slot:
    _REGISTRY[slot.name] = slot
    return slot


def implement(name: str, **fields) -> Slot:
    """Attach a kernel and its test spec to a catalogued slot (or add a new variant slot)."""
    if name in _REGISTRY:
        slot = _REGISTRY[name]
        for key, value in fields.items():
            if not hasattr(slot, key):
                raise TypeError(f"Slot has no field {key!r}")
            setattr(slot, key, value)
        return slot
    return register(Slot(name=name, **fields))


def _load() -> None:
    """Import every `slots/<family>.py` once (each attaches its kernels with `implement`)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for info in pkgutil.iter_modules(__path__):
        if info.name not in ("catalog", "common"):
            importlib.import_module(f"{__name__}.{info.name}")


def all_slots() -> list[Slot]:
    _load()
    return list(_REGISTRY.values())


def _size(v) -> bool:
    """A dim that is a size: a whole number >= 1 (a bool or a 0 is an option's value)."""
    return type(v) is int and v >= 1


def _number(v) -> bool:
    return type(v) in (int, float)


def get(name: str) -> Slot:
    if not isinstance(name, str):
        raise TypeError(f"a slot is named by a str, e.g. 'embedding'; got {name!r}")
    _load()
    if name not in _REGISTRY:
        close = [n for n in _REGISTRY if name.split(".")[0] in n]
        raise KeyError(f"no kernel slot {name!r}" + (f"; did you mean {close}?" if close else ""))
    return _REGISTRY[name]


def tensor_bytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


# every planned slot, registered as the package is imported: a family module imported on its own finds its slots
for _name, _op, _article, _title, _qwen, _chapter in CATALOG:
    register(Slot(name=_name, title=_title, op=_op, article=_article, qwen=_qwen, chapter=_chapter))
