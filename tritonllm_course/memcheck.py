"""Out-of-bounds checking for kernels run by Triton's CPU interpreter.

On a GPU a kernel that reads or writes past its tensors either corrupts a neighbour silently or stops
the whole process with "an illegal memory access was encountered", reported at some later call. The
interpreter is no better by itself: it dereferences raw pointers, so a stray load on the CPU usually
just reads whatever lies there. `checked()` makes it strict: every load, store and atomic of every
active (unmasked) lane must fall inside the extent of one of the kernel's tensor arguments (the view
it was given, not the whole allocation), else the launch fails with the kernel, the lane count and the
nearest argument named:

    with memcheck.checked():
        rms_norm(x, w, eps)          # raises MemoryError naming the kernel if a lane strays

The test suite runs every CPU test under it (tests/conftest.py), so CI catches what would be an illegal
address on the GPU. It costs one vectorised range test per memory operation.
"""
from __future__ import annotations

import inspect
from contextlib import contextmanager

import numpy as np
import torch


class OutOfBounds(MemoryError):
    """A kernel touched memory outside every tensor it was given."""


def extent(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, last byte + 1) that a view can address through its shape and strides."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    lo = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if s > 0)
    size = t.element_size()
    return t.data_ptr() + lo * size, t.data_ptr() + (hi + 1) * size


class _State:
    def __init__(self):
        self.kernel = None
        self.ranges: list[tuple[str, int, int, int]] = []   # (argument, first byte, end byte, element size)


def _arguments(executor, args_hst, kwargs_hst) -> list[tuple[str, torch.Tensor]]:
    names = list(inspect.signature(executor.fn).parameters)
    pairs = list(zip(names, args_hst)) + list(kwargs_hst.items())
    # a tensor descriptor (TMA) reaches memory through the tensor it describes
    pairs = [(n, getattr(a, "base", a)) for n, a in pairs]
    return [(n, a) for n, a in pairs if isinstance(a, torch.Tensor)]


def _check(state: _State, ptrs: np.ndarray, mask, itemsize: int, what: str) -> None:
    p = np.asarray(ptrs, dtype=np.uint64)
    if mask is not None:
        p = p[np.broadcast_to(np.asarray(mask, dtype=bool), p.shape)]
    p = p.reshape(-1).astype(np.int64)
    if p.size == 0:
        return
    inside = np.zeros(p.shape, dtype=bool)
    for _, lo, hi, _ in state.ranges:
        inside |= (p >= lo) & (p + itemsize <= hi)
    if inside.all():
        return
    bad = p[~inside]
    first = int(bad[0])

    def distance(r):
        _, lo, hi, _ = r
        return 0 if lo <= first < hi else min(abs(first - lo), abs(first - hi))

    lines = []
    for name, lo, hi, size in sorted(state.ranges, key=distance)[:3]:
        where = (f"{(first - hi) // size + 1} elements past its end" if first >= hi else
                 f"{(lo - first + size - 1) // size} elements before its start")
        lines.append(f"  nearest argument `{name}` ({(hi - lo) // size} elements): {where}")
    raise OutOfBounds(f"kernel {state.kernel}: {bad.size} active lane(s) of a {what} outside every tensor "
                      f"argument\n" + "\n".join(lines))


_active = False


@contextmanager
def checked():
    """Check every interpreted kernel's memory accesses against its tensor arguments (CPU interpreter).
    Re-entrant: inside an active check (the test session's) it adds nothing."""
    global _active
    if _active:
        yield
        return
    from triton.runtime import interpreter as I

    state = _State()
    B, G = I.InterpreterBuilder, I.GridExecutor
    saved = {(B, "create_masked_load"): B.create_masked_load, (B, "create_masked_store"): B.create_masked_store,
             (B, "create_atomic_rmw"): B.create_atomic_rmw, (B, "create_atomic_cas"): B.create_atomic_cas,
             (G, "_init_args_hst"): G._init_args_hst}

    def init_args(self, args_dev, kwargs):
        args_hst, kwargs_hst = saved[G, "_init_args_hst"](self, args_dev, kwargs)
        state.kernel = getattr(self.fn, "__name__", "kernel")
        state.ranges = [(n, *extent(t), t.element_size()) for n, t in _arguments(self, args_hst, kwargs_hst)]
        return args_hst, kwargs_hst

    def itemsize(ptrs):
        return np.dtype(I._get_np_dtype(ptrs.get_element_ty())).itemsize

    def load(self, ptrs, mask, other, *rest, **options):
        _check(state, ptrs.data, mask.data, itemsize(ptrs), "load")
        return saved[B, "create_masked_load"](self, ptrs, mask, other, *rest, **options)

    def store(self, ptrs, value, mask, *rest, **options):
        _check(state, ptrs.data, mask.data, itemsize(ptrs), "store")
        return saved[B, "create_masked_store"](self, ptrs, value, mask, *rest, **options)

    def rmw(self, op, ptr, val, mask, *rest, **options):
        _check(state, ptr.data, mask.data, itemsize(ptr), "atomic")
        return saved[B, "create_atomic_rmw"](self, op, ptr, val, mask, *rest, **options)

    def cas(self, ptr, cmp, val, *rest, **options):
        _check(state, ptr.data, None, itemsize(ptr), "atomic compare-and-swap")
        return saved[B, "create_atomic_cas"](self, ptr, cmp, val, *rest, **options)

    for (owner, name), fn in zip(saved, (load, store, rmw, cas, init_args)):
        setattr(owner, name, fn)
    _active = True
    try:
        yield
    finally:
        _active = False
        for (owner, name), fn in saved.items():
            setattr(owner, name, fn)
