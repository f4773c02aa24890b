"""The engine: Qwen3.5 from the course's kernel slots, static buffers, decode under a CUDA graph.

Three rooms: `plan.py` holds the optimisation levels (`LEVELS`: "operators", one kernel per operator;
"fused"; "fast", the fewest kernels), each a `Plan`: which kernel slot each step uses and what each path
fuses, fitted once to a config (`fitted_plan`); `forward.py` the arithmetic of a step, layer by layer,
following the plan; `engine.py` the `Engine`: buffers, CUDA graphs, the token stream, the public API.
`arguments.py` checks the Engine's arguments before any work; `ops.py` resolves the plan's slots into
callables (the op table); `buffers.py` holds the static tensors; `merged.py` the merged weights (8-bit ones
too: `Engine(weight_format=...)`); `graph.py` the capture and replay. The measured table
(`tritonllm-course bench`) sits above the engine, in `measure/engine_bench.py`.
"""
from .engine import Engine, Sampling, StreamSuperseded
from .ops import SOURCES, OpTable
from .plan import FAST_STEPS, FUSED_STEPS, LEVELS, STEPS, Fusions, Plan

__all__ = ["Engine", "FAST_STEPS", "FUSED_STEPS", "Fusions", "LEVELS", "OpTable", "Plan", "SOURCES", "STEPS",
           "Sampling", "StreamSuperseded"]
