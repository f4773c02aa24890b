"""The engine: Qwen3.5 from the course's kernel slots, static buffers, decode under a CUDA graph.

`Engine` (engine.py) runs the model; `ops.py` holds the optimisation levels (`LEVELS`: "operators", one
kernel per operator; "fused"; "fast", the fewest kernels), each a `Plan`: which kernel each step uses and
what each path fuses; `buffers.py` holds the static tensors; `merged.py` the merged weights; `graph.py` the
capture and replay. The measured table (`tritonllm-course bench`) sits above the engine, in
`measure/engine_bench.py`.
"""
from .engine import Engine, Sampling, StreamSuperseded
from .ops import FAST_STEPS, FUSED_STEPS, LEVELS, SOURCES, STEPS, Fusions, OpTable, Plan

__all__ = ["Engine", "FAST_STEPS", "FUSED_STEPS", "Fusions", "LEVELS", "OpTable", "Plan", "SOURCES", "STEPS",
           "Sampling", "StreamSuperseded"]
