"""The engine: Qwen3.5 from the course's kernel slots, static buffers, decode under a CUDA graph.

`Engine` (engine.py) runs the model; `ops.py` says which kernel each step uses, at each optimisation
level (`LEVELS`: one kernel per operator, or fused); `buffers.py` holds the static tensors; `merged.py`
the merged weights; `graph.py` the capture and replay; `bench.py` the measured table
(`tritonllm-course bench`).
"""
from .engine import Engine, Sampling, StreamSuperseded
from .ops import FUSED_STEPS, LEVELS, SOURCES, STEPS, OpTable

__all__ = ["Engine", "FUSED_STEPS", "LEVELS", "OpTable", "SOURCES", "STEPS", "Sampling", "StreamSuperseded"]
