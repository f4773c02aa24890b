"""Input checks for the host wrappers: bad input gets an error that names the problem before any launch.

A Triton kernel reads raw pointers: a wrong dtype, a transposed view or a CPU tensor on the GPU path is
not an exception inside the kernel but garbage or a crash. Every wrapper therefore calls `tensor()` on
its arguments first.
"""
from __future__ import annotations

import contextlib
import math

import torch

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64)


def _name(dt) -> str:
    return str(dt).replace("torch.", "")


def tensor(x, name: str, *, dtype=None, ndim: int | None = None, shape: tuple | None = None,
           device=None, contiguous: bool = True) -> torch.Tensor:
    """Check one argument. `shape` may hold None for "any size"; `dtype` a dtype or a tuple of them."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if dtype is not None:
        allowed = dtype if isinstance(dtype, tuple) else (dtype,)
        if x.dtype not in allowed:
            raise TypeError(f"{name} has dtype {_name(x.dtype)}; expected "
                            f"{' or '.join(_name(d) for d in allowed)}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)}")
    if shape is not None:
        if x.dim() != len(shape) or any(s is not None and s != n for s, n in zip(shape, x.shape)):
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise ValueError(f"{name} has shape {list(x.shape)}; expected {want}")
    if device is not None and x.device.type != torch.device(device).type:
        raise ValueError(f"{name} is on {x.device}, expected {torch.device(device).type}")
    if contiguous and not x.is_contiguous():
        raise ValueError(f"{name} must be contiguous (strides {x.stride()} for shape {tuple(x.shape)}); "
                         "call .contiguous() first")
    return x


def number(value, name: str) -> float:
    """A real number argument (int or float, not bool): a kernel takes it as an fp32 or int scalar, and a
    string or a tensor would fail inside the launch, not naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    return value


def positive(value, name: str) -> float:
    """A positive finite number (an epsilon, a scale), else a TypeError / ValueError naming `name`."""
    number(value, name)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
    return value


def same_device(**tensors: torch.Tensor) -> torch.device:
    """All tensors on one device, and a device Triton can launch on in the current mode."""
    devices = {n: t.device for n, t in tensors.items() if t is not None}
    first = next(iter(devices.values()))
    for n, d in devices.items():
        if d != first:
            listing = ", ".join(f"{k} on {v}" for k, v in devices.items())
            raise ValueError(f"tensors must share one device: {listing}")
    from .runtime import runtime
    if runtime().on_gpu and first.type != "cuda":
        raise ValueError(f"inputs are on {first}; on the GPU runtime they must be CUDA tensors")
    return first


def output(out, name: str, shape: tuple, dtype, device) -> torch.Tensor:
    """Allocate the output, or check the caller's `out=` buffer (the checks pass NaN-poisoned ones)."""
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    return tensor(out, name, dtype=dtype, shape=tuple(shape), device=device.type)


def _span(t: torch.Tensor) -> tuple[int, int]:
    """[first, last) byte addresses a tensor's elements occupy."""
    last = sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 1)
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _blocks(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(sorted start addresses, byte length) of the contiguous runs t's elements form: its innermost
    dims that are laid out densely make one run, the outer dims give the starts."""
    run, dims = 1, t.dim()
    while dims and (t.shape[dims - 1] == 1 or t.stride(dims - 1) == run):
        run *= t.shape[dims - 1]
        dims -= 1
    starts = torch.zeros((), dtype=torch.int64)
    for n, st in zip(t.shape[:dims], t.stride()[:dims]):
        starts = starts[..., None] + torch.arange(n, dtype=torch.int64) * st
    starts = t.data_ptr() + starts.reshape(-1) * t.element_size()
    return starts.sort().values, run * t.element_size()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors share an element's bytes: address ranges first (a few integer operations, the
    common case of separate buffers), then, for views into one buffer (column slices of a merged
    projection's output), the exact test over their contiguous runs."""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    (a0, a1), (b0, b1) = _span(a), _span(b)
    if a1 <= b0 or b1 <= a0:
        return False
    starts_a, len_a = _blocks(a)
    starts_b, len_b = _blocks(b)
    # each run of a against the run of b that starts last before a's run ends (runs of b have one length)
    j = torch.searchsorted(starts_b, starts_a + len_a) - 1
    hit = (j >= 0) & (starts_b[j.clamp(min=0)] + len_b > starts_a)
    return bool(hit.any())


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.device == b.device and a.data_ptr() == b.data_ptr() and a.shape == b.shape
            and a.stride() == b.stride() and a.dtype == b.dtype)


def disjoint(outputs: dict, inputs: dict, same: tuple = ()) -> None:
    """Raise ValueError, naming both, when an output buffer shares memory with an input or with another
    output. A kernel's programs read their inputs while others write: an `out=` that overlaps an input
    (`x = buf[:64]`, `out = buf[1:]`) is overwritten before it is read, and the result is wrong without an
    error. `same` names the inputs an output may be exactly (the same view: in place), where every element
    is read by the program that writes it, before it writes it (a residual add, a row's norm)."""
    outs = [(n, t) for n, t in outputs.items() if isinstance(t, torch.Tensor)]
    ins = [(n, t) for n, t in inputs.items() if isinstance(t, torch.Tensor)]
    for i, (name, out) in enumerate(outs):
        for other, t in ins + outs[i + 1:]:
            if _overlap(out, t) and not (other in same and _same_view(out, t)):
                how = " (in place is allowed only as the same view)" if other in same else ""
                raise ValueError(f"{name} overlaps {other} in memory{how}: the kernel would overwrite what "
                                 "it still has to read; give a separate output buffer")


_device_checks = True


@contextlib.contextmanager
def no_device_checks():
    """Skip `device_range` on GPU tensors inside the block: for a caller (the engine) that has checked
    its ids, positions and lengths once on the host, so that no kernel call waits for the device."""
    global _device_checks
    previous, _device_checks = _device_checks, False
    try:
        yield
    finally:
        _device_checks = previous


def device_range(t: torch.Tensor, lo: int, hi: int, name: str, why: str = "") -> None:
    """Raise a ValueError naming `name` unless every value of the integer tensor `t` lies in [lo, hi].

    Indices, positions and lengths that kernels read from device memory (token ids, the decode
    position, the cache length) are checked here on the host. On a GPU that read is a sync, and while
    a CUDA graph is being captured it is not allowed at all: the check is skipped then, and the
    kernels' masks, which never touch memory outside their buffers, are the only guard.
    """
    if t.numel() == 0 or (t.is_cuda and (not _device_checks or torch.cuda.is_current_stream_capturing())):
        return
    first, last = (int(v) for v in torch.aminmax(t.reshape(-1)))
    if first < lo or last > hi:
        bad = first if first < lo else last
        raise ValueError(f"{name} {bad} is outside [{lo}, {hi}]" + (f": {why}" if why else ""))


def projection(x: torch.Tensor, weight: torch.Tensor, weight_name: str = "weight") -> int:
    """`x @ weight.T` inputs: weight [N, K] floating, x [..., K] in the weight's dtype; returns K."""
    tensor(weight, weight_name, dtype=FLOATS, ndim=2)
    K = weight.shape[1]
    tensor(x, "x", dtype=weight.dtype)
    if x.dim() == 0 or x.shape[-1] != K:
        raise ValueError(f"x has shape {list(x.shape)}; its last dimension must be K = {K}, "
                         f"the second dimension of {weight_name} {list(weight.shape)}")
    return K


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor):
    """Inputs of causal attention: q [T, heads, D], k and v [S, kv_heads, D] in q's dtype, pos [T] ints in
    [0, S), heads a multiple of kv_heads (GQA). Returns (T, heads, D, S, kv_heads, device)."""
    tensor(q, "q", dtype=FLOATS, ndim=3)
    T, H, D = q.shape
    tensor(k, "k", dtype=q.dtype, ndim=3)
    S, KV = k.shape[0], k.shape[1]
    tensor(k, "k", shape=(S, KV, D))
    tensor(v, "v", dtype=q.dtype, shape=(S, KV, D))
    tensor(pos, "pos", dtype=INTS, shape=(T,))
    if KV == 0 or H % KV:
        raise ValueError(f"{H} query heads are not a multiple of {KV} KV heads (GQA)")
    device = same_device(q=q, k=k, v=v, pos=pos)
    device_range(pos, 0, S - 1, "position", f"queries attend to the {S} keys given, positions 0 .. {S - 1}")
    return T, H, D, S, KV, device


def token_rows(x: torch.Tensor, name: str) -> None:
    """x [T, ...]: each token's block x[t] contiguous, tokens at any stride (a column slice of one
    projection's output is). The last dim must have stride 1; an inner dim of more than one element,
    the product of the sizes after it."""
    inner = 1
    for dim in range(x.dim() - 1, 0, -1):
        if x.stride(dim) != inner and (dim == x.dim() - 1 or x.shape[dim] > 1):
            raise ValueError(f"{name} must be contiguous within each token (shape {list(x.shape)}), got strides "
                             f"{x.stride()}; call .contiguous() first")
        inner *= x.shape[dim]


def delta_rule_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, max_head_dim: int):
    """Inputs of the gated delta rule: q, k [T, H, DK] in one float dtype, v [T, HV, DV] float, HV a
    multiple of H, head dims up to max_head_dim. Tokens may be strided (views of one projection), each
    token's [heads, dim] block contiguous. Returns (T, H, HV, DK, DV)."""
    tensor(q, "q", dtype=FLOATS, ndim=3, contiguous=False)
    T, H, DK = q.shape
    tensor(k, "k", dtype=q.dtype, shape=(T, H, DK), contiguous=False)
    tensor(v, "v", dtype=FLOATS, ndim=3, contiguous=False)
    HV, DV = v.shape[1:]
    tensor(v, "v", shape=(T, None, None), contiguous=False)
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        token_rows(x, name)
    if T == 0:
        raise ValueError("q has no tokens (T = 0)")
    if HV % H:
        raise ValueError(f"v has {HV} value heads, not a multiple of the {H} key heads of q and k")
    if not (0 < DK <= max_head_dim and 0 < DV <= max_head_dim):
        raise ValueError(f"head dims must be in 1..{max_head_dim}; got key dim {DK}, value dim {DV}")
    return T, H, HV, DK, DV


def delta_rule_gate_inputs(q, k, v, a, b, A_log, dt_bias, initial_state, out, final_state, max_head_dim: int):
    """Inputs of a delta rule that computes the DeltaNet gates itself: q, k, v as `delta_rule_qkv`; a, b
    [T, HV] (each token's row contiguous, tokens at any stride); A_log, dt_bias [HV]; initial_state
    [HV, DK, DV] fp32 or None. Returns (T, H, HV, DK, DV, device, out, final_state), the outputs checked or
    allocated (out [T, HV, DV] in v's dtype, final_state fp32)."""
    T, H, HV, DK, DV = delta_rule_qkv(q, k, v, max_head_dim)
    for x, name in ((a, "a"), (b, "b")):
        tensor(x, name, dtype=FLOATS, shape=(T, HV), contiguous=False)
        token_rows(x, name)
    tensor(A_log, "A_log", dtype=FLOATS, shape=(HV,))
    tensor(dt_bias, "dt_bias", dtype=FLOATS, shape=(HV,))
    if initial_state is not None:
        tensor(initial_state, "initial_state", dtype=torch.float32, shape=(HV, DK, DV))
    device = same_device(q=q, k=k, v=v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, initial_state=initial_state)
    out = output(out, "out", (T, HV, DV), v.dtype, device)
    final_state = output(final_state, "final_state", (HV, DK, DV), torch.float32, device)
    disjoint({"out": out, "final_state": final_state}, {"q": q, "k": k, "v": v, "a": a, "b": b, "A_log": A_log,
             "dt_bias": dt_bias, "initial_state": initial_state}, same=("initial_state",))
    return T, H, HV, DK, DV, device, out, final_state
