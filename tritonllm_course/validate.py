"""Input checks for the host wrappers: bad input gets an error that names the problem before any launch.

A Triton kernel reads raw pointers: a wrong dtype, a transposed view or a CPU tensor on the GPU path is
not an exception inside the kernel but garbage or a crash. Every wrapper therefore calls `tensor()` on
its arguments first.

The checks of the generation API's arguments live here too (`check_ids`, `check_count`, `check_seed`,
`check_sampling`, `check_decoding`, `eos_set`, `eos_ids`, `nonfinite_error`): the reference model, its generation
loop and the engine all take the same prompt, counts and sampling options, and all sit above this module.
"""
from __future__ import annotations

import contextlib
import math
import operator
from collections import abc

import torch

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64)
EIGHT_BIT = (torch.int8, torch.float8_e4m3fn)   # the 8-bit weights of chapter 31_weight_quant


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


def check_device(device, meta: bool = False) -> torch.device:
    """A device tensors can be made or loaded on, as a torch.device: a CUDA one only where there is one (a misspelt
    one was torch's RuntimeError, "cuda" without CUDA an AssertionError); meta only where `meta`, as it holds no
    values to generate from (the engine refuses it; an engine of `demo.meta_weights`, built directly, sizes its
    buffers on it)."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be a torch device such as 'cpu' or 'cuda', got {device!r}") from None
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {str(device)!r} is not available: {torch.cuda.device_count()} CUDA GPU(s) here")
    if device.type == "meta" and not meta:
        raise ValueError("device 'meta' makes weights without values, nothing to generate from: use 'cpu' or 'cuda'")
    return device


def flag(value, name: str) -> bool:
    """A switch: True or False, else a TypeError naming it (a string such as "no" was true by its truth)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def number(value, name: str) -> float:
    """A real number argument (int or float, not bool): a kernel takes it as an fp32 or int scalar, and a
    string or a tensor would fail inside the launch, not naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    return value


def finite(value, name: str) -> float:
    """A finite real number (an attention's scale: 0 and negative ones are softmax's business), else a TypeError /
    ValueError naming `name`: None or a string failed in the host arithmetic without naming it, a 0-d tensor
    inside the launch, and a NaN or an infinite scale came back as NaN probabilities without a word."""
    number(value, name)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return value


def positive(value, name: str) -> float:
    """A positive finite number (an epsilon, a scale), else a TypeError / ValueError naming `name`."""
    number(value, name)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
    return value


MAX_BLOCK = 2**20   # triton.language.TRITON_MAX_TENSOR_NUMEL: a block of more elements does not compile


def block_size(value, name: str = "block_size") -> int:
    """A block's element count as an int, a power of two from 1 to MAX_BLOCK (`tl.arange` takes no other), else
    a TypeError / ValueError naming `name`: a negative one launched no program and returned the output as it was
    allocated, 0 divided by zero, 3 or 1.5 failed inside the kernel."""
    n = _index(value)
    if n is None:
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if not (0 < n <= MAX_BLOCK and n & (n - 1) == 0):
        raise ValueError(f"{name} must be a power of two from 1 to 2**20, got {n}")
    return n


def warps(value, name: str = "num_warps") -> int:
    """Warps per program as an int, a power of two from 1 to 32, which Triton compiles (the interpreter ignores the
    count: a 3, a 1.5 or a string ran on the CPU, to fail on a GPU), else a ValueError naming `name`."""
    n = _index(value)
    if n not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"{name} must be a power of two from 1 to 32, got {value!r}")
    return n


def tile_config(config, name: str = "config") -> dict:
    """Tile sizes given by hand (a wrapper's `config=`): a dict whose BLOCK_* are power-of-two ints from 16 (tl.dot's
    least tile) to 2**20, num_warps a power of two from 1 to 32 and num_stages an int >= 1; which keys it must hold
    is the wrapper's to say. A string was "dictionary update sequence", 16.0 a TypeError of `&`, a block of 0 or 2**30
    an InterpreterError (a compile error on a GPU), and num_warps=3 was taken."""
    if not isinstance(config, dict):
        raise TypeError(f"{name} must be a dict of tile sizes, got {type(config).__name__}")
    for key, value in config.items():
        n = _index(value)
        if isinstance(key, str) and key.startswith("BLOCK"):
            if n is None:
                raise TypeError(f"{name} {key} must be an int, got {value!r}")
            if not (16 <= n <= MAX_BLOCK and n & (n - 1) == 0):
                raise ValueError(f"{name} {key} = {n}: tl.dot tiles need a power of two >= 16 (at most 2**20)")
        elif key == "num_warps":
            warps(value, f"{name} num_warps")
        elif key == "num_stages" and not (n is not None and n >= 1):
            raise ValueError(f"{name} num_stages must be an int >= 1, got {value!r}")
    return config


def same_device(**tensors: torch.Tensor) -> torch.device:
    """All tensors on one device, and a device Triton can launch on in the current mode: meta tensors only while
    launches are recorded, not run (`targets.py`), as they hold no data to read."""
    devices = {n: t.device for n, t in tensors.items() if t is not None}
    first = next(iter(devices.values()))
    for n, d in devices.items():
        if d != first:
            listing = ", ".join(f"{k} on {v}" for k, v in devices.items())
            raise ValueError(f"tensors must share one device: {listing}")
    from .runtime import runtime
    if first.type == "meta" and runtime().mode != "compile":
        raise ValueError(f"inputs on meta ({', '.join(devices)}): a meta tensor holds no data for a kernel to "
                         "read; give cpu or cuda tensors")
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


def disjoint(outputs: dict, inputs: dict, same: tuple | dict = ()) -> None:
    """Raise ValueError, naming both, when an output buffer shares memory with an input or with another
    output. A kernel's programs read their inputs while others write: an `out=` that overlaps an input
    (`x = buf[:64]`, `out = buf[1:]`) is overwritten before it is read, and the result is wrong without an
    error. `same` names the inputs an output may be exactly (the same view: in place), where every element
    is read by the program that writes it, before it writes it (a residual add, a row's norm): a tuple of
    input names for any output, or {output: input name or tuple of them} where there are several outputs and
    each may be only its own input (q_out may be q, never k, which the programs of k_out still read)."""
    outs = [(n, t) for n, t in outputs.items() if isinstance(t, torch.Tensor)]
    ins = [(n, t) for n, t in inputs.items() if isinstance(t, torch.Tensor)]
    for i, (name, out) in enumerate(outs):
        own = same.get(name, ()) if isinstance(same, dict) else same
        own = (own,) if isinstance(own, str) else own
        for other, t in ins + outs[i + 1:]:
            if _overlap(out, t) and not (other in own and _same_view(out, t)):
                how = (" (in place is allowed only as the same view)" if other in own else
                       f" ({name} may be {' or '.join(own)} itself, in place)" if own else "")
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


def decode_length(length, max_len: int, device: torch.device) -> torch.Tensor:
    """A decode step's cache length as a [1] int tensor on `device` (given as one, or as an int: 2.5 attended to 2
    rows, True to 1), its value in [1, max_len] (`device_range`): the attention wrappers that read the cache take
    either form, the engine's device counter or a learner's int."""
    if isinstance(length, torch.Tensor):
        tensor(length, "length", dtype=INTS, shape=(1,), device=device.type)
    else:
        length = torch.tensor([check_count(length, "length")], dtype=torch.int32, device=device)
    device_range(length, 1, max_len, "length", f"a decode step attends to 1 .. {max_len} cached tokens")
    return length


def _host_may_read(t: torch.Tensor) -> bool:
    """Whether a device check may read `t` on the host now: not a GPU tensor while the checks are off
    (`no_device_checks`) or a CUDA graph is being captured, which forbids the sync."""
    return not (t.is_cuda and (not _device_checks or torch.cuda.is_current_stream_capturing()))


def device_range(t: torch.Tensor, lo: int, hi: int, name: str, why: str = "") -> None:
    """Raise a ValueError naming `name` unless every value of the integer tensor `t` lies in [lo, hi].

    Indices, positions and lengths that kernels read from device memory (token ids, the decode
    position, the cache length) are checked here on the host. On a GPU that read is a sync, and while
    a CUDA graph is being captured it is not allowed at all: the check is skipped then, and the
    kernels' masks, which never touch memory outside their buffers, are the only guard.
    """
    if t.numel() == 0 or not _host_may_read(t):
        return
    first, last = (int(v) for v in torch.aminmax(t.reshape(-1)))
    if first < lo or last > hi:
        bad = first if first < lo else last
        raise ValueError(f"{name} {bad} is outside [{lo}, {hi}]" + (f": {why}" if why else ""))


def device_distinct(t: torch.Tensor, name: str, why: str) -> None:
    """Raise a ValueError naming `name` and its first repeated value unless the values of the 1-D integer
    tensor `t` are distinct: two tokens stored at one cache row race, and which one the row keeps is the
    schedule's choice. Skipped as `device_range` is (a sync on a GPU; not allowed under capture)."""
    if t.numel() < 2 or not _host_may_read(t):
        return
    values, counts = torch.unique(t, return_counts=True)
    repeated = counts > 1
    if bool(repeated.any()):      # the first repeated value and its own count (not the largest count)
        raise ValueError(f"{name} {int(values[repeated][0])} appears {int(counts[repeated][0])} times: {why}")


def projection(x: torch.Tensor, weight: torch.Tensor, weight_name: str = "weight") -> int:
    """`x @ weight.T` inputs: weight [N, K] floating, x [..., K] in the weight's dtype; returns K."""
    tensor(weight, weight_name, dtype=FLOATS, ndim=2)
    K = weight.shape[1]
    tensor(x, "x", dtype=weight.dtype)
    if x.dim() == 0 or x.shape[-1] != K:
        raise ValueError(f"x has shape {list(x.shape)}; its last dimension must be K = {K}, "
                         f"the second dimension of {weight_name} {list(weight.shape)}")
    return K


def scaled_projection(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None,
                        name: str = "weight") -> int:
    """`x @ weight.T` inputs (`projection`), or with `scale` an 8-bit weight: weight [N, K] int8 or
    float8_e4m3fn, scale fp32 [N] (one a row), x [1, K] floating (the fused kernels take 8-bit weights at decode
    only). Returns K."""
    if scale is None:
        return projection(x, weight, name)
    tensor(weight, name, dtype=EIGHT_BIT, ndim=2)
    N, K = weight.shape
    tensor(scale, "scale", dtype=torch.float32, shape=(N,))
    tensor(x, "x", dtype=FLOATS)
    if x.dim() == 0 or x.shape[-1] != K or x.numel() != K:
        raise ValueError(f"x has shape {list(x.shape)}: with 8-bit weights this kernel takes one token of K = {K} "
                         "(prompts run the quant GEMM)")
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
    the product of the sizes after it. An empty x has no layout to check (torch.empty(1, 2, 0) was called
    not contiguous): its sizes are for the caller's own checks to name."""
    if x.numel() == 0:
        return
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
    if H == 0:                                      # HV % H: a ZeroDivisionError
        raise ValueError(f"q and k have no heads (shape {list(q.shape)}): give at least one key head")
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
             "dt_bias": dt_bias, "initial_state": initial_state}, same={"final_state": "initial_state"})
    return T, H, HV, DK, DV, device, out, final_state


# --- the generation API's arguments ------------------------------------------------------------------------
MIN_TEMPERATURE = 1e-6   # below it logits / temperature leaves float32's range for logits of ~3e32, and a draw
                         # is the argmax for any gap between the two largest logits above ~1e-4
MIN_TOP_P = 2.0 ** -126  # float32's smallest normal number: a smaller top_p reaches the samplers as 0, which
                         # keeps nothing (the reference compares in fp32, the kernels take an fp32 argument)
MAX_SEED = 2**63 - 1     # torch.Generator.manual_seed takes a 64-bit seed


def _index(value):
    """`value` as an int when it is one (a Python or numpy int, a 0-d int tensor), else None; bool is not."""
    if isinstance(value, bool) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def check_count(value, name: str, least: int = 0) -> int:
    """`value` as an int >= least, else a TypeError / ValueError naming `name` (max_new_tokens, max_seq_len...)."""
    n = _index(value)
    if n is None:
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if n < least:
        raise ValueError(f"{name} must be >= {least}, got {n}")
    return n


def check_seed(seed, name: str = "seed") -> int:
    """`seed` as an int in [0, MAX_SEED], else a TypeError / ValueError naming `name`."""
    n = _index(seed)
    if n is None:
        raise TypeError(f"{name} must be an int, got {seed!r} ({type(seed).__name__})")
    if not 0 <= n <= MAX_SEED:
        raise ValueError(f"{name} must be in [0, 2**63 - 1], got {n}")
    return n


def check_ids(ids, name: str = "prompt_ids", device=None) -> list[int]:
    """Token ids as a list of ints: a list or tuple of ints, or a 1-D int tensor on the CPU or on `device`.
    A batch (2-D), floats, bools and strings raise TypeError / ValueError naming `name`: each would
    otherwise be read as some other sequence (flattened, truncated, split into characters)."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{name} must be token ids (a list of ints or a 1-D int tensor), got a "
                        f"{type(ids).__name__}: encode text with a tokenizer first")
    if isinstance(ids, (abc.Set, abc.Mapping)):     # a set runs in hash order, a dict as its keys
        raise TypeError(f"{name} must be token ids in order (a list of ints or a 1-D int tensor), got a "
                        f"{type(ids).__name__}, which has no order of its own")
    if isinstance(ids, torch.Tensor):
        if ids.layout != torch.strided:             # a sparse tensor has no data for tolist() to read
            raise TypeError(f"{name} must be a dense tensor, got layout {str(ids.layout).replace('torch.', '')}: "
                            "call .to_dense() first")
        if ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex:
            raise TypeError(f"{name} must hold integer token ids, got a {str(ids.dtype).replace('torch.', '')} "
                            "tensor")
        if ids.dim() != 1:
            raise ValueError(f"{name} must be one sequence (a 1-D tensor), got shape {list(ids.shape)}: "
                             "run the prompts of a batch one at a time")
        if ids.device.type != "cpu" and (device is None or ids.device != torch.device(device)):
            other = device is not None and torch.device(device).type != "cpu"
            where = "on the cpu" + (f" or on {device}" if other else "")
            raise ValueError(f"{name} is on {ids.device}; give it {where}")
        return ids.tolist()
    try:
        items = list(ids)
    except TypeError:
        raise TypeError(f"{name} must be token ids (a list of ints or a 1-D int tensor), got "
                        f"{type(ids).__name__}") from None
    # plain ints only (bool is a type of its own here): the whole list at C speed, before the first kernel starts.
    # A prompt of 4,000 tokens: 0.1 vs 1.2 ms<!-- unsaved: 2026-12-06 --> this way and item by item below on a
    # slow 2-core CPU (a free notebook's); an H100 machine's host checked it in 0.14 ms<!-- unsaved: 2026-12-06 -->
    # either way
    if set(map(type, items)) <= {int}:
        return items
    out = []
    for i, item in enumerate(items):
        n = _index(item)
        if n is None:
            shape = " (a nested list: run the prompts of a batch one at a time)" if isinstance(
                item, (list, tuple)) or getattr(item, "ndim", 0) else ""
            raise TypeError(f"{name}[{i}] must be an int token id, got {item!r} ({type(item).__name__}){shape}")
        out.append(n)
    return out


def eos_set(eos_token_id, name: str = "eos_token_id") -> set[int]:
    """The end-of-sequence ids: None -> none; an int; or a list/tuple/set of ints. Anything else (a
    string, which would stop at each of its characters' digits, a float, a bool) raises naming `name`."""
    if eos_token_id is None:
        return set()
    one = _index(eos_token_id)
    if one is not None:
        return {one}
    if isinstance(eos_token_id, (list, tuple, set, frozenset)):
        ids = [_index(e) for e in eos_token_id]
        if None not in ids:
            return set(ids)
    raise TypeError(f"{name} must be a token id (int), a list of them, None or 'config', got {eos_token_id!r}")


def eos_ids(eos_token_id, config, name: str = "eos_token_id") -> set[int]:
    """`eos_set` of eos_token_id, "config" meaning the config's own, each id checked against its vocabulary: an
    id outside it is never generated, so the stop asked for would never come (a ValueError naming `name`)."""
    ids = eos_set(config.eos_token_id if isinstance(eos_token_id, str) and eos_token_id == "config"
                  else eos_token_id, name)
    bad = sorted(i for i in ids if not 0 <= i < config.vocab_size)
    if bad:
        raise ValueError(f"{name} {bad[0]} is outside the vocabulary [0, {config.vocab_size}): it is never "
                         "generated, so it would never stop the sequence")
    return ids


def check_decoding(greedy, temperature, top_k, top_p) -> None:
    """greedy True or False; the sampling options checked where they sample (`check_sampling`), and refused
    beside greedy=True where they differ from their defaults: they would be ignored, an argmax where sampling
    was meant. The API's rule as the command line's, whose sampling options turn sampling on."""
    flag(greedy, "greedy")
    if not greedy:
        return check_sampling(temperature, top_k, top_p)
    given = [f"{name}={value!r}" for name, value, default in (
        ("temperature", temperature, 1.0), ("top_k", top_k, 0), ("top_p", top_p, 1.0)) if value != default]
    if given:                                                     # NaN differs from every default: refused too
        raise ValueError(f"{', '.join(given)} would sample, but greedy=True (the default) takes the argmax: pass "
                         "greedy=False to sample")


def check_sampling(temperature, top_k, top_p) -> None:
    """Raise ValueError unless temperature is 0 (greedy) or a finite number >= MIN_TEMPERATURE, top_k an
    int >= 0 and MIN_TOP_P <= top_p <= 1. The API's check and the command line's alike: written as
    `not (x >= 0)` so that NaN, which fails every comparison, is refused rather than let through to a
    greedy or garbage decode. The floors are where the samplers' float32 arithmetic breaks: refused here,
    with the argument named, rather than decoded as NaN or as a token outside the vocabulary."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an int >= 0, got {top_k!r}")
    if not (isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature >= 0
            and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if 0 < temperature < MIN_TEMPERATURE:
        raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g}: below, logits / "
                         f"temperature can overflow float32, got {temperature!r}")
    if not (isinstance(top_p, (int, float)) and not isinstance(top_p, bool) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    if top_p < MIN_TOP_P:
        raise ValueError(f"top_p must be at least 2**-126 (about 1.2e-38, float32's smallest normal number; "
                         f"a smaller one rounds to 0 and keeps no token), got {top_p!r}")


# the engine's weight formats (`Engine(weight_format=...)`, chapter 31_weight_quant): the model's own dtype, or 8-bit
WEIGHT_FORMATS = ("native", "int8", "int8_group", "fp8")


def check_weight_format(weight_format, name: str = "weight_format") -> str:
    """weight_format as given, else a ValueError naming the argument and the formats (`WEIGHT_FORMATS`):
    "native" (the projections in the model's dtype, bf16 or fp16), "int8", "int8_group" or "fp8"."""
    if not isinstance(weight_format, str) or weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"{name} must be one of {', '.join(WEIGHT_FORMATS)}, got {weight_format!r}")
    return weight_format


def nonfinite_error(kind: str, step: int, dtype, rope: torch.Tensor | None = None,
                    rope_theta: float | None = None) -> ValueError:
    """The error for logits holding `kind` ("NaN" or "inf") at `step` (0: the prompt's), naming the likely
    cause: RoPE tables that are not finite (rope_theta), float16's range, or else the weights' values."""
    if rope is not None and not bool(torch.isfinite(rope).all()):
        why = f"the RoPE tables are not finite: rope_theta = {rope_theta!r}"
    elif dtype == torch.float16:
        why = "float16 overflow? try --dtype bfloat16 or float32"
    else:
        why = "the activations overflowed: check the weights' scale"
    return ValueError(f"logits contain {kind} at step {step} ({why}); no token was taken from them")
