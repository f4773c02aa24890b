"""`@triton.jit` helpers shared by the solutions (imported, never copied), and the GPUs the kernels are for.

All take and return fp32 blocks: the kernels cast to fp32 right after loading. What a chapter has the
learner write is no helper here: it lives in that chapter's family, inside its solution region, and later
families take it from there (`kernels.jit_function`): the online softmax (attention.py), the GEMV's and the
GEMM's walks along K (linear.py), the delta rule's step (delta_rule.py).
"""
import contextlib
import functools
import os
from dataclasses import dataclass

import triton
import triton.language as tl


@triton.jit
def sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def silu(x):
    return x * sigmoid(x)


@triton.jit
def softplus(x):
    # log(1 + e^x), without overflow for large x (PyTorch's threshold is 20)
    return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))


@triton.jit
def tanh(x):
    # tl.math.tanh is not available under the CPU interpreter
    return 2.0 * sigmoid(2.0 * x) - 1.0


@triton.jit
def l2_normalize_rows(x, eps):
    # x [R, D] -> each row divided by sqrt(sum(row^2) + eps): the DeltaNet L2 norm of q and k
    return x * tl.rsqrt(tl.sum(x * x, axis=1) + eps)[:, None]


# A decode GEMV launched with PDL holds its whole [rows, K] weight tile in registers, so that every weight
# load is issued before the wait: PDL_ROWS rows a program, about PDL_ELEMENTS weights a thread
# (`lab/pdl_chain_probe.py`; the configs of solutions/norm_fusion.py and layer_fusion.py). A K wider than
# 16 warps hold at PDL_ROWS rows (K > 4,096: the larger sizes of the family) takes fewer rows a program
# rather than more weights a thread (at 0.8B 64 a thread measured slower than 2 rows); past PDL_MAX_K,
# one row on 16 warps, the tile is too wide and the GEMV walks K. So does a K that fills less than PDL_MIN_FILL of
# its power-of-two tile: walking 27B's K = 5,120 and 6,144 (padded to 8,192 lanes) made its fast level
# 5.2%<!-- fig:lab.family_tile_h100.27b.fast_4096_gain.pct --> faster, where 9B's 12,288 in 16,384 (three
# quarters) gained 0.3%<!-- fig:code.triton_helpers.9b_whole_gain.pct --> whole (in a rerun
# 0.9%<!-- fig:code.triton_helpers.9b_whole_gain_rerun.pct -->) and 4B's 2,560 and 9,216 tied
# (lab/family_tile_probe.py, H100). The rule walks 5,120 (five eighths) and keeps 6,144 (three quarters) whole:
# measured so, 27B took 3.7%<!-- fig:lab.family_tile_rule_h100.27b.gain.pct --> less time than with both whole,
# 1.7%<!-- fig:lab.family_tile_rule_h100.27b.cap4096_gain.pct --> more than with both walking; 4B
# 0.5%<!-- fig:lab.family_tile_rule_h100.4b.loss.pct --> more than with its K whole (H100). A rule that walks
# 6,144 too would also walk 2B's down projection: 0.6%<!-- fig:lab.family_tile_2b_h100.cap4096.pct --> slower
# there (lab/results/family_tile_probe_nvidia-h100-80gb-hbm3_2026-12-07_2b.json).
PDL_ROWS, PDL_ELEMENTS, PDL_WARPS = 4, 32, 16
PDL_MAX_K = PDL_WARPS * 32 * PDL_ELEMENTS
PDL_MIN_FILL = 0.75


def pdl_gemv_config(K: int) -> dict | None:
    """The whole-tile launch parameters of a decode GEMV with PDL (None: K is too wide for one tile, or fills
    too little of its padded one; the GEMV walks K)."""
    if K > PDL_MAX_K or K < PDL_MIN_FILL * triton.next_power_of_2(K):
        return None
    block_k = max(16, triton.next_power_of_2(K))
    rows = max(1, min(PDL_ROWS, PDL_WARPS * 32 * PDL_ELEMENTS // block_k))
    warps = max(1, min(PDL_WARPS, rows * block_k // (32 * PDL_ELEMENTS)))
    return {"BLOCK_N": rows, "BLOCK_K": block_k, "num_warps": triton.next_power_of_2(warps)}


@triton.jit
def row_tile(w_ptr, rows, N, K, k0, BLOCK_K: tl.constexpr):
    """W[rows, k0 : k0 + BLOCK_K] of a row-major [N, K] W, in W's dtype, 0 outside it: [BLOCK_N, BLOCK_K].
    Each weight is read once: evict_first keeps it from pushing the activations out of the caches. A tile
    wholly past K reads no memory (every lane masked): a walk may load one tile ahead without a test."""
    k = k0 + tl.arange(0, BLOCK_K)
    ok = (rows < N)[:, None] & (k < K)[None, :]
    return tl.load(w_ptr + rows.to(tl.int64)[:, None] * K + k[None, :], mask=ok, other=0.0,
                   eviction_policy="evict_first")


# Programmatic dependent launch (PDL, sm_90+): a kernel launched with `launch_pdl=True` may start while the
# kernel before it in the stream still runs, once every program of that one has called `pdl_launch_dependents`
# (or exited). Everything before `pdl_wait` overlaps the previous kernel, so it may only read memory that no
# kernel of the step writes (weights); everything after it sees all earlier kernels' stores. The memory
# clobber keeps the compiler from moving loads across either call (lab/pdl_chain_probe.py reads the SASS).
# Under the CPU interpreter kernels run one after another and there is no overlap to control: both are no-ops.
if os.environ.get("TRITON_INTERPRET") == "1":
    @triton.jit
    def pdl_launch_dependents():
        pass

    @triton.jit
    def pdl_wait():
        pass
else:
    @triton.jit
    def pdl_launch_dependents():
        tl.inline_asm_elementwise("griddepcontrol.launch_dependents; mov.u32 $0, 0;", "=r,~{memory}", [],
                                  dtype=tl.int32, is_pure=False, pack=1)

    @triton.jit
    def pdl_wait():
        tl.inline_asm_elementwise("griddepcontrol.wait; mov.u32 $0, 0;", "=r,~{memory}", [],
                                  dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def pdl_enter(PDL: tl.constexpr):
    """The top of a kernel with nothing to load before its inputs: with PDL, let the next kernel launch, then
    wait for the previous one (without PDL, nothing)."""
    if PDL:
        pdl_launch_dependents()
        pdl_wait()


# --- the GPU a launch is for --------------------------------------------------------------------------------
FP8_CAPABILITY = 89   # the first compute capability with fp8 (e4m3, e5m2) conversions in hardware


@dataclass(frozen=True)
class GPU:
    """What a kernel may use on one kind of GPU. Shared memory is the most a block may ask for (the opt-in
    maximum, Triton's `max_shared_mem`), registers those of an SM and of a thread: the CUDA C++ Programming
    Guide, "Technical Specifications per Compute Capability". SMs and bandwidth: the named GPU's datasheet."""
    capability: int                  # 75 = sm_75
    shared_bytes: int
    sms: int
    name: str
    registers_per_sm: int = 64 * 1024
    registers_per_thread: int = 255

    @property
    def bf16(self) -> bool:          # bf16 arithmetic and tensor cores: sm_80 on
        return self.capability >= 80

    @property
    def pdl(self) -> bool:           # programmatic dependent launch (griddepcontrol): sm_90 on
        return self.capability >= 90

    @property
    def fp8(self) -> bool:           # fp8 e4m3 conversions in hardware: Ada (sm_89) and Hopper (sm_90) on
        return self.capability >= FP8_CAPABILITY

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The half-precision dtypes the course runs there (fp16 only where bf16 is missing)."""
        return ("bfloat16", "float16") if self.bf16 else ("float16",)


# The learners' GPUs: Colab's T4 (sm_75), A100 (sm_80) and L4 (sm_89), the workstations' RTX 30 (sm_86) and
# RTX 40 (sm_89), the H100 / H200 (sm_90).
GPUS = {
    75: GPU(75, 64 * 1024, 40, "T4"),
    80: GPU(80, 163 * 1024, 108, "A100"),
    86: GPU(86, 99 * 1024, 82, "RTX 3090"),
    89: GPU(89, 99 * 1024, 58, "L4"),
    90: GPU(90, 227 * 1024, 132, "H100 / H200"),
}

_TARGET: GPU | None = None      # set by `compiling_for`: the launches are recorded and compiled for this GPU


@contextlib.contextmanager
def compiling_for(gpu: GPU):
    """Inside the block the config functions choose for `gpu`, whatever device the tensors are on (the meta
    device of `tritonllm_course.targets`, which compiles every launch for a GPU that is not here)."""
    global _TARGET
    if not isinstance(gpu, GPU):
        raise TypeError(f"gpu must be a triton_helpers.GPU, got {type(gpu).__name__}")
    before, _TARGET = _TARGET, gpu
    try:
        yield gpu
    finally:
        _TARGET = before


def gpu_launch(device) -> bool:
    """Whether a launch on `device` runs on a GPU (or is compiled for one): False under the interpreter."""
    return _TARGET is not None or device.type == "cuda"


def gpu_of(device) -> GPU | None:
    """The GPU a launch on `device` is for: the one being compiled for, else a CUDA device's own limits (read
    once from the driver), None under the interpreter."""
    if _TARGET is not None:
        return _TARGET
    if device.type != "cuda":
        return None
    return _cuda_gpu(device.index)


@functools.cache
def _cuda_gpu(index: int | None) -> GPU:
    import torch
    index = torch.cuda.current_device() if index is None else index
    props = triton.runtime.driver.active.utils.get_device_properties(index)
    major, minor = torch.cuda.get_device_capability(index)
    return GPU(10 * major + minor, props["max_shared_mem"], props["multiprocessor_count"],
               torch.cuda.get_device_name(index))


def shared_memory(device_index: int | None) -> int:
    """Bytes of shared memory a block may use on CUDA device `device_index`, or on the GPU being compiled for."""
    if _TARGET is not None:
        return _TARGET.shared_bytes
    return _cuda_gpu(device_index).shared_bytes


def rows_within(shared_bytes: int | None, rows: int, row_bytes: int, stages: int = 1, fixed: int = 0,
                least: int = 16) -> int:
    """`rows` halved (not below `least`) until `stages` tiles of that many rows of `row_bytes` each, plus
    `fixed` bytes, fit in `shared_bytes` (None: no limit, the interpreter). How a config chosen on an H200
    keeps its pipeline depth on a GPU with less shared memory: shorter steps, as many loads in flight.
    Two tiles at least are counted: on sm_75 a single stage still stages the operands of `tl.dot` through
    shared memory (1.25 tiles compiled). An upper bound of what Triton allocates, not the figure itself:
    `tritonllm-course targets` compiles the result for every GPU and checks what it really takes."""
    tiles = max(stages, 2)
    while shared_bytes is not None and rows > least and fixed + tiles * rows * row_bytes > shared_bytes:
        rows //= 2
    return rows
